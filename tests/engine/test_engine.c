/* The engine on the host backend with the tiny GPT-2: every offload mode
 * gives bitwise the same losses and final weights (with and without gradient
 * accumulation, several prefetch depths), equal to a plain synchronous loop
 * written here; the delayed update matches its own definition; params mode
 * trains a model several times its device budget without exceeding it; and
 * misuse returns a status with a message. Runs in f32, and in bf16 or f16
 * storage with FERRY_TEST_DTYPE=bf16 or f16 (the same assertions: the
 * engine's 16-bit paths round at the same points as the synchronous loop's
 * 16-bit buffers; under f16 both scale the loss as the engine's dynamic
 * loss scale says, the loop with optim/loss_scale's rule, which
 * tests/engine/test_loss_scale.c holds to torch's GradScaler). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/numerics.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "models/gpt2_plan.h"
#include "optim/adamw.h"
#include "optim/gradnorm.h"
#include "optim/loss_scale.h"
#include "engine_fixture.h"
#include "tap.h"
#include "token_batches.h"
#include "test_dtype.h"

enum { STEPS = 20, B = 2, T = 32 };

typedef struct run_result {
    float loss[STEPS];
    float *weights; /* every group's master weights, concatenated */
    size_t nweights;
    uint64_t device_peak;
    int max_resident;
    double h2d[STEPS], fetched[STEPS]; /* each step's bytes up, and of them what fetches uploaded */
} run_result;

typedef struct run_opts {
    ferry_offload mode;
    int accum;
    int prefetch;
    int delayed;
    uint64_t budget;
} run_opts;

static gpt2_config tiny;
static const uint64_t SEED = 1234;

/* Deterministic text-like tokens: a repeating pattern with noise. */
static void batch_tokens(int step, int micro, int32_t *tokens, int32_t *targets)
{
    static const token_recipe recipe = {77, 131, 17, 7, 1, 0, 97, 5};
    token_batch(&recipe, step, micro, B * T, tiny.vocab_size, tokens, targets);
}

static ferry_step_options step_options(void) { return efix_options(3e-3f, 0.01f, 1.0f); }

static ferry_status run_engine(const run_opts *ro, run_result *out)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, ro->mode, test_dtype(), 2);
    cfg.prefetch_groups = ro->prefetch;
    cfg.delayed_update = ro->delayed;
    cfg.device_budget_bytes = ro->budget;
    /* The activations it will take, declared: the engine's plan holds them. */
    cfg.auto_activation_bytes = efix_acts_bytes(&tiny, test_dtype(), B, T, false);
    efix f;
    ferry_status st = efix_start(&f, &tiny, &cfg, SEED, B, T, false);
    ferry_step_options o = step_options();
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        float scale = ferry_engine_loss_scale(f.e); /* 1 unless f16 */
        st = efix_micro_batches(&f, batch_tokens, step, 0, ro->accum, scale / (float)ro->accum, NULL, &out->loss[step]);
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, NULL);
        ferry_step_timing t = FERRY_STEP_TIMING_INIT;
        if (st == FERRY_OK) st = ferry_engine_step_timing(f.e, &t);
        out->h2d[step] = t.transfer_h2d_bytes;
        out->fetched[step] = t.fetch_h2d_bytes;
    }
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->weights, &out->nweights);
    if (st == FERRY_OK) {
        out->device_peak = efix_memory(&f).device_total_peak_bytes;
        out->max_resident = efix_timing(&f).max_resident_groups;
    }
    if (st != FERRY_OK)
        tap_diag("run failed: %s", ferry_last_error());
    efix_close(&f);
    return st;
}

/* The plain synchronous algorithm: resident buffers, then the optimizer's
 * whole recipe. With `delay`, gradients are taken at the weights of two
 * updates back (what the delayed update computes). */
static ferry_status run_reference(int accum, bool delay, run_result *out)
{
    backend *be = NULL;
    backend_stream *s = NULL;
    gpt2_model *m = NULL;
    gpt2_resident *r = NULL;
    gpt2_activations *act = NULL;
    ferry_status st = backend_open(FERRY_BACKEND_HOST, &be);
    if (st == FERRY_OK) st = backend_set_act_dtype(be, test_dtype());
    if (st == FERRY_OK) st = backend_stream_create(be, "ref", &s);
    if (st == FERRY_OK) st = gpt2_create(&tiny, &m);
    if (st == FERRY_OK) st = gpt2_resident_create(m, be, &r);
    gpt2_allocator alloc = gpt2_backend_allocator(be);
    if (st == FERRY_OK) st = gpt2_activations_create(m, be, B, T, false, &alloc, &act);
    if (st != FERRY_OK)
        return st;
    int G = gpt2_num_groups(m);
    float **master = calloc((size_t)G, sizeof *master), **mom = calloc((size_t)G, sizeof *mom);
    float **vel = calloc((size_t)G, sizeof *vel), **grad = calloc((size_t)G, sizeof *grad);
    float **prev = calloc((size_t)G, sizeof *prev), **scratch = calloc((size_t)G, sizeof *scratch);
    for (int g = 0; g < G; g++) {
        size_t n = gpt2_group_numel(m, g);
        master[g] = malloc(n * 4); mom[g] = calloc(n, 4); vel[g] = calloc(n, 4);
        grad[g] = malloc(n * 4); prev[g] = malloc(n * 4); scratch[g] = malloc(n * 4);
        gpt2_init_group(m, g, SEED, master[g]);
        memcpy(prev[g], master[g], n * 4);
        gpt2_resident_set_params(r, s, g, master[g]);
    }
    ferry_step_options o = step_options();
    gpt2_hooks hooks = gpt2_resident_hooks(r);
    int32_t tokens[B * T], targets[B * T];
    /* f16 scales the loss (torch GradScaler's rule and defaults) */
    bool scaling = test_dtype() == FERRY_DTYPE_F16;
    loss_scaler ls;
    loss_scale_init(&ls, LOSS_SCALE_INIT_DEFAULT, LOSS_SCALE_GROWTH_DEFAULT, LOSS_SCALE_BACKOFF_DEFAULT,
                    LOSS_SCALE_INTERVAL_DEFAULT);
    int taken = 0;
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        float sum = 0, scale = scaling ? ls.scale : 1.0f, inv = scaling ? loss_scale_inverse(&ls) : 1.0f;
        /* Each micro-batch's gradients from zero, summed over the step in fp32. */
        for (int k = 0; k < accum; k++) {
            float loss = 0;
            batch_tokens(step, k, tokens, targets);
            gpt2_resident_zero_grads(r, s);
            gpt2_forward(m, act, &hooks, s, tokens, targets, true);
            gpt2_backward(m, act, &hooks, s, scale / (float)accum);
            gpt2_loss(act, s, &loss);
            sum += loss;
            for (int g = 0; g < G; g++) {
                gpt2_resident_get_grads(r, s, g, scratch[g]);
                numerics_accumulate(grad[g], scratch[g], FERRY_DTYPE_F32, gpt2_group_numel(m, g), k == 0);
            }
        }
        out->loss[step] = sum / (float)accum;
        /* The global norm over whole groups, then AdamW tensor by tensor:
         * GPT-2 decays only its 2-D weights. */
        double sumsq = 0;
        bool bad = false;
        for (int g = 0; g < G; g++) {
            double one;
            bool nf;
            gradnorm_sumsq(NULL, grad[g], FERRY_DTYPE_F32, gpt2_group_numel(m, g), &one, &nf);
            sumsq += one;
            bad |= nf;
        }
        /* The norm of the unscaled gradients; the update unscales and clips in one factor. */
        float clip = gradnorm_clip_coef(sqrt(sumsq) * (double)inv, o.max_grad_norm) * inv;
        for (int g = 0; g < G && !bad && st == FERRY_OK; g++) {
            for (int t = 0; t < gpt2_group_tensor_count(m, g) && st == FERRY_OK; t++) {
                gpt2_tensor_info ti;
                gpt2_group_tensor(m, g, t, &ti);
                adamw_job j = {master[g] + ti.offset, mom[g] + ti.offset, vel[g] + ti.offset, grad[g] + ti.offset,
                               FERRY_DTYPE_F32, ti.numel, taken + 1,
                               {o.lr, o.beta1, o.beta2, o.eps, ti.decay ? o.weight_decay : 0.0f}, clip, NULL,
                               FERRY_DTYPE_F32, .moments = FERRY_MOMENTS_F32};
                st = adamw_run(NULL, &j);
            }
        }
        taken += !bad;
        loss_scale_update(&ls, bad);
        /* The next step computes at the newest weights, or (delayed) at the
         * weights from before this update. */
        for (int g = 0; g < G; g++) {
            gpt2_resident_set_params(r, s, g, delay ? prev[g] : master[g]);
            memcpy(prev[g], master[g], gpt2_group_numel(m, g) * 4);
        }
    }
    out->nweights = 0;
    for (int g = 0; g < G; g++)
        out->nweights += gpt2_group_numel(m, g);
    out->weights = malloc(out->nweights * 4);
    size_t at = 0;
    for (int g = 0; g < G; g++) {
        memcpy(out->weights + at, master[g], gpt2_group_numel(m, g) * 4);
        at += gpt2_group_numel(m, g);
        free(master[g]); free(mom[g]); free(vel[g]); free(grad[g]); free(prev[g]); free(scratch[g]);
    }
    free(master); free(mom); free(vel); free(grad); free(prev); free(scratch);
    gpt2_activations_destroy(act);
    gpt2_resident_destroy(r);
    gpt2_destroy(m);
    backend_stream_destroy(s);
    backend_close(be);
    return st;
}

static void compare(const run_result *a, const run_result *b, const char *what)
{
    efix_same_losses(a->loss, b->loss, 0, STEPS, "%s: %d losses bitwise equal (last %.7f)", what, STEPS,
                     (double)a->loss[STEPS - 1]);
    efix_same_weights(a->weights, a->nweights, b->weights, b->nweights, what);
}

static void test_modes_agree(void)
{
    run_result ref = {0}, ref2 = {0};
    if (run_reference(1, false, &ref) != FERRY_OK || run_reference(2, false, &ref2) != FERRY_OK) {
        tap_ok(0, "reference loop ran: %s", ferry_last_error());
        return;
    }
    tap_ok(ref.loss[STEPS - 1] < ref.loss[0] - 0.5f, "the reference loop learns: loss %.4f -> %.4f",
           (double)ref.loss[0], (double)ref.loss[STEPS - 1]);
    static const struct { ferry_offload mode; int accum, prefetch; const char *name; } runs[] = {
        {FERRY_OFFLOAD_NONE, 1, 2, "none"},
        {FERRY_OFFLOAD_OPTIMIZER, 1, 2, "optimizer"},
        {FERRY_OFFLOAD_PARAMS, 1, 0, "params, prefetch 0"},
        {FERRY_OFFLOAD_PARAMS, 1, 1, "params, prefetch 1"},
        {FERRY_OFFLOAD_PARAMS, 1, 3, "params, prefetch 3"},
        {FERRY_OFFLOAD_NONE, 2, 2, "none, 2 micro-batches"},
        {FERRY_OFFLOAD_OPTIMIZER, 2, 2, "optimizer, 2 micro-batches"},
        {FERRY_OFFLOAD_PARAMS, 2, 2, "params, 2 micro-batches"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        run_opts ro = {runs[i].mode, runs[i].accum, runs[i].prefetch, 0, 0};
        run_result got = {0};
        if (run_engine(&ro, &got) != FERRY_OK) {
            tap_ok(0, "%s ran", runs[i].name);
            continue;
        }
        compare(&got, runs[i].accum == 1 ? &ref : &ref2, runs[i].name);
        free(got.weights);
    }
    free(ref.weights);
    free(ref2.weights);
}

static void test_delayed_update(void)
{
    run_result ref = {0}, got = {0};
    run_opts ro = {FERRY_OFFLOAD_OPTIMIZER, 1, 2, 1, 0};
    if (run_reference(1, true, &ref) != FERRY_OK || run_engine(&ro, &got) != FERRY_OK) {
        tap_ok(0, "delayed update ran: %s", ferry_last_error());
        return;
    }
    compare(&got, &ref, "delayed update vs its definition (gradients two updates old)");
    free(ref.weights);
    free(got.weights);
}

/* The deep model's figures in the storage type. */
typedef struct deep_figures {
    uint64_t weights; /* every group's weights */
    size_t acts;               /* its activations at B x T */
    int groups;
} deep_figures;

/* Puts a deeper, narrower GPT-2 in tiny's place (many small groups, so a
 * window of a few fits where the whole model does not) and returns the
 * config it replaced; *d gets its figures. */
static gpt2_config use_deep(deep_figures *d)
{
    gpt2_config deep;
    gpt2_config_from_fields(24, 2, 32, 500, 512, 64, &deep);
    gpt2_config saved = tiny;
    tiny = deep;
    gpt2_model *m;
    gpt2_create(&tiny, &m);
    size_t es = dtype_size(test_dtype());
    memset(d, 0, sizeof *d);
    d->groups = gpt2_num_groups(m);
    for (int g = 0; g < d->groups; g++)
        d->weights += gpt2_group_numel(m, g) * es;
    d->acts = gpt2_activations_bytes(m, test_dtype(), B, T, false);
    gpt2_destroy(m);
    return saved;
}

static void test_params_beyond_budget(void)
{
    deep_figures d;
    gpt2_config saved = use_deep(&d);
    uint64_t weights = d.weights;
    size_t acts = d.acts;
    /* The smallest plan that runs (no fetch ahead: per size class of
     * groups, two blocks' weights and three blocks' gradients, one slot each
     * for the embeddings and the final layernorm) and the activations, with
     * 16 KiB to spare: the weights alone are several times that. */
    gpt2_plan floor;
    gpt2_plan_request frq = {.cfg = &tiny, .batch = B, .seq = T, .offload = FERRY_OFFLOAD_PARAMS,
                             .prefetch_groups = 1, .micro_batches = 1, .backend = FERRY_BACKEND_HOST,
                             .dtype = test_dtype(), .ranks = 1};
    uint64_t budget = gpt2_plan_predict(&frq, &floor) == FERRY_OK ? floor.device_min_bytes + (1u << 14) : 0;
    tap_ok(weights >= 2 * (budget - acts), "the model's weights (%.0f KiB) are %.1fx the budget left after "
           "activations (%.0f KiB)", (double)weights / 1024, (double)weights / (double)(budget - acts),
           (double)(budget - acts) / 1024);
    run_opts ro = {FERRY_OFFLOAD_PARAMS, 1, 1, 0, budget};
    run_result got = {0};
    ferry_status st = run_engine(&ro, &got);
    tap_ok(st == FERRY_OK, "params mode trains with a %.0f KiB budget for %.0f KiB of weights (+ grads, "
                           "master, moments)", (double)budget / 1024, (double)weights / 1024);
    tap_ok(got.device_peak <= budget && got.device_peak > 0, "device peak %llu <= budget %llu",
           (unsigned long long)got.device_peak, (unsigned long long)budget);
    tap_ok(got.max_resident > 0 && got.max_resident <= 4,
           "at most the floor's 4 weight slots hold groups (2 blocks, the embeddings, the final layernorm; saw %d)",
           got.max_resident);
    tap_ok(st == FERRY_OK && got.loss[STEPS - 1] < got.loss[0], "and it learns: %.4f -> %.4f",
           (double)got.loss[0], (double)got.loss[STEPS - 1]);
    free(got.weights);
    tiny = saved;

    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, FERRY_OFFLOAD_NONE, test_dtype(), 0);
    cfg.device_budget_bytes = weights; /* the weights fit; with master and moments they do not */
    efix f;
    st = efix_engine(&f, &tiny, &cfg, SEED, B, T, false);
    TAP_IS_STATUS(st, FERRY_ERR_OUT_OF_MEMORY, "offload none with too small a budget fails at setup");
    tap_ok(strstr(ferry_last_error(), "offload FERRY_OFFLOAD_OPTIMIZER") &&
               strstr(ferry_last_error(), "offload FERRY_OFFLOAD_PARAMS") && !strstr(ferry_last_error(), "--"),
           "and suggests the offload modes in the API's words, no trainer flag: %s", ferry_last_error());
    efix_close(&f);
}

/* Params mode keeps released groups on the device while the budget holds
 * them: with room for the whole model no fetch uploads anything after the
 * first step (each step's update is written once into the copies kept,
 * one model's bytes), with room for half it moves between one and two
 * models' bytes a step, under a tight budget about two; the device peak
 * stays inside the budget and the bits are mode none's. */
static void test_params_residency(void)
{
    deep_figures d;
    gpt2_config saved = use_deep(&d);
    double weights = (double)d.weights;
    int G = d.groups;
    /* The planner's peak with every group kept, and with the window alone. */
    gpt2_plan full, window;
    gpt2_plan_request rq = {.cfg = &tiny, .batch = B, .seq = T, .offload = FERRY_OFFLOAD_PARAMS, .recompute = false,
                            .prefetch_groups = 1, .micro_batches = 1, .backend = FERRY_BACKEND_HOST,
                            .dtype = test_dtype(), .ranks = 1, .device_budget = (uint64_t)1 << 40};
    ferry_status st = gpt2_plan_predict(&rq, &full);
    rq.device_budget = 0;
    if (st == FERRY_OK)
        st = gpt2_plan_predict(&rq, &window);
    if (!tap_ok(st == FERRY_OK, "residency: planned: %s", st == FERRY_OK ? "" : ferry_last_error())) {
        tiny = saved;
        return;
    }
    uint64_t all = full.device_bytes[FERRY_MEM_PARAMS];
    run_result none = {0};
    run_opts no = {FERRY_OFFLOAD_NONE, 1, 1, 0, 0};
    if (run_engine(&no, &none) != FERRY_OK) {
        tap_ok(0, "residency: mode none ran");
        tiny = saved;
        return;
    }
    static const struct { const char *name; int percent; } cases[] = {
        {"a budget for the whole model", 100}, {"a budget for half the model", 50}, {"a tight budget", 0}};
    double steady[3] = {0};
    for (int c = 0; c < 3; c++) {
        uint64_t budget = cases[c].percent == 100 ? full.device_total
                          : cases[c].percent == 50 ? full.device_total - all / 2
                                                   : window.device_total;
        run_opts ro = {FERRY_OFFLOAD_PARAMS, 1, 1, 0, budget};
        run_result got = {0};
        char what[128];
        snprintf(what, sizeof what, "params with %s (%.0f KiB)", cases[c].name, (double)budget / 1024);
        if (!tap_ok(run_engine(&ro, &got) == FERRY_OK, "%s: trains", what))
            continue;
        compare(&got, &none, what);
        tap_ok(got.device_peak <= budget, "%s: device peak %llu <= budget %llu", what,
               (unsigned long long)got.device_peak, (unsigned long long)budget);
        /* After the first step: a budget for the whole model moves the same
         * bytes every step; under the others a gradient's drain finishing
         * sooner or later can cost one fetch more or less: the mean. */
        double up = 0, fetched = 0;
        for (int k = 1; k < STEPS; k++) {
            up += got.h2d[k] / (STEPS - 1);
            fetched += got.fetched[k] / (STEPS - 1);
        }
        steady[c] = up;
        if (cases[c].percent == 100) {
            tap_ok(got.fetched[0] == weights && got.h2d[0] == 2 * weights,
                   "%s: the first step fetches each group once (%.0f of %.0f bytes) and writes the update into "
                   "the copies (%.0f up in all)", what, got.fetched[0], weights, got.h2d[0]);
            int alike = 1;
            for (int k = 1; k < STEPS; k++)
                alike &= got.h2d[k] == weights && got.fetched[k] == 0;
            tap_ok(alike, "%s: after it no fetch uploads anything (%.0f bytes a step); the update's refresh moves "
                   "one model's bytes (%.0f of %.0f)", what, fetched, up, weights);
            TAP_IS_INT(got.max_resident, G, "%s: every group stays on the device", what);
        } else if (cases[c].percent == 50) {
            tap_ok(fetched > 0 && up > weights && up < 2 * weights,
                   "%s: between one and two models' bytes up a step (%.2f models, %.0f bytes fetched, means)", what,
                   up / weights, fetched);
        } else {
            tap_ok(up > 1.5 * weights && got.max_resident <= window.device_weight_groups,
                   "%s: fetches nearly everything twice (%.2f models a step), at most the window's %d weight slots "
                   "held (%d)", what, up / weights, window.device_weight_groups, got.max_resident);
        }
        free(got.weights);
    }
    tap_ok(steady[0] < steady[1] && steady[1] < steady[2],
           "residency: the bytes moved a step fall as the budget grows (%.0f, %.0f, %.0f)", steady[2], steady[1],
           steady[0]);
    free(none.weights);
    tiny = saved;
}

static void test_misuse(void)
{
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    ferry_engine *e = NULL;
    cfg.prefetch_groups = -1;
    TAP_IS_STATUS(ferry_engine_create(&cfg, &e), FERRY_ERR_INVALID_ARGUMENT, "a negative prefetch is refused");
    tap_ok(strstr(ferry_last_error(), "prefetch_groups -1") != NULL, "naming the field: %s", ferry_last_error());
    cfg.prefetch_groups = 2;
    cfg.size = 8;
    TAP_IS_STATUS(ferry_engine_create(&cfg, &e), FERRY_ERR_INVALID_ARGUMENT, "a config without its size is refused");
    cfg.size = sizeof cfg;
    TAP_IS_STATUS(ferry_engine_create(&cfg, &e), FERRY_OK, "create");
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    void *p = NULL;
    ferry_offload mode;
    TAP_IS_STATUS(ferry_offload_parse("zero3", &mode), FERRY_ERR_INVALID_ARGUMENT, "unknown offload name");
    TAP_IS_STATUS(ferry_engine_fetch(e, 0, FERRY_PHASE_FORWARD, &p), FERRY_ERR_STATE, "fetch before setup");
    TAP_IS_STATUS(ferry_engine_setup(e), FERRY_ERR_STATE, "setup without groups");
    TAP_IS_STATUS(ferry_engine_add_group(e, NULL, 8, w, NULL, NULL), FERRY_ERR_INVALID_ARGUMENT,
                  "a group without a name is refused");
    tap_ok(strstr(ferry_last_error(), "NULL name") != NULL, "saying so: %s", ferry_last_error());
    float bad[8] = {1, 2, 3, 4, 5, INFINITY, 7, NAN};
    TAP_IS_STATUS(ferry_engine_add_group(e, "bad", 8, bad, NULL, NULL), FERRY_ERR_INVALID_ARGUMENT,
                  "a group with an infinite initial value is refused");
    tap_ok(strstr(ferry_last_error(), "'bad'") && strstr(ferry_last_error(), "value 5 is inf"),
           "naming the group and the value: %s", ferry_last_error());
    TAP_IS_STATUS(ferry_engine_add_group(e, "a", 8, w, NULL, NULL), FERRY_OK, "add a group");
    TAP_IS_STATUS(ferry_engine_add_group(e, "empty", 0, w, NULL, NULL), FERRY_ERR_INVALID_ARGUMENT,
                  "an empty group is refused");
    TAP_IS_STATUS(ferry_engine_setup(e), FERRY_OK, "setup");
    TAP_IS_STATUS(ferry_engine_add_group(e, "late", 8, w, NULL, NULL), FERRY_ERR_STATE,
                  "a group added after setup is refused");
    tap_ok(strstr(ferry_last_error(), "before ferry_engine_setup") != NULL, "and says when to add it");
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    TAP_IS_STATUS(ferry_engine_step(e, &o, NULL), FERRY_ERR_STATE, "a step without gradients is refused");
    ferry_engine_begin_inference(e);
    TAP_IS_STATUS(ferry_engine_step(e, &o, NULL), FERRY_ERR_STATE, "a step during inference is refused");
    tap_ok(strstr(ferry_last_error(), "inference is on") != NULL, "saying inference is on: %s", ferry_last_error());
    ferry_engine_end_inference(e);
    TAP_IS_INT(ferry_engine_backend(NULL), FERRY_BACKEND_AUTO, "ferry_engine_backend(NULL) is AUTO");
    TAP_IS_INT((int)ferry_engine_offload(NULL), -1, "ferry_engine_offload(NULL) is -1");
    tap_ok(strcmp(ferry_offload_name(ferry_engine_offload(NULL)), "unknown") == 0, "which is named 'unknown'");
    TAP_IS_INT(ferry_engine_dtype(NULL), FERRY_DTYPE_AUTO, "ferry_engine_dtype(NULL) is AUTO");
    TAP_IS_INT(ferry_engine_steps(NULL), -1, "ferry_engine_steps(NULL) is -1");
    TAP_IS_INT(ferry_engine_backend(e), FERRY_BACKEND_HOST, "the engine's backend is host");
    TAP_IS_STATUS(ferry_engine_fetch(e, 0, FERRY_PHASE_FORWARD, &p), FERRY_ERR_STATE,
                  "fetch outside a micro-batch is refused");
    ferry_engine_begin_micro_batch(e, 0, 1);
    TAP_IS_STATUS(ferry_engine_fetch(e, 0, FERRY_PHASE_FORWARD, &p), FERRY_OK, "fetch");
    TAP_IS_STATUS(ferry_engine_fetch(e, 0, FERRY_PHASE_FORWARD, &p), FERRY_ERR_STATE, "a group asked twice is refused");
    tap_ok(strstr(ferry_last_error(), "twice") != NULL, "the message says so: %s", ferry_last_error());
    TAP_IS_STATUS(ferry_engine_fetch(e, 5, FERRY_PHASE_FORWARD, &p), FERRY_ERR_INVALID_ARGUMENT, "a group that does not exist");
    TAP_IS_STATUS(ferry_engine_grads(e, 0, &p), FERRY_ERR_STATE, "grads outside backward");
    TAP_IS_STATUS(ferry_engine_free(e, p), FERRY_ERR_INVALID_ARGUMENT, "freeing the weights of a group is refused");
    tap_ok(strstr(ferry_last_error(), "ferry_engine_alloc") != NULL, "saying what may be freed: %s",
           ferry_last_error());
    void *act = NULL;
    TAP_IS_STATUS(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "act", sizeof w, &act), FERRY_OK,
                  "an activation buffer");
    tap_ok(act != p, "it does not reuse the weights' memory (%p vs %p)", act, p);
    TAP_IS_STATUS(ferry_engine_free(e, act), FERRY_OK, "it is freed");
    TAP_IS_STATUS(ferry_engine_free(e, act), FERRY_ERR_INVALID_ARGUMENT, "and not freed twice");
    TAP_IS_STATUS(ferry_engine_free(e, NULL), FERRY_OK, "freeing NULL does nothing");
    ferry_engine_release(e, 0, FERRY_PHASE_FORWARD);
    TAP_IS_STATUS(ferry_engine_release(e, 0, FERRY_PHASE_FORWARD), FERRY_ERR_STATE, "release twice");
    TAP_IS_STATUS(ferry_engine_step(e, &o, NULL), FERRY_ERR_STATE, "a step before backward is refused");
    ferry_engine_fetch(e, 0, FERRY_PHASE_BACKWARD, &p);
    void *dw = NULL;
    ferry_engine_grads(e, 0, &dw);
    ferry_engine_synchronize(e);
    for (int i = 0; i < 8; i++)
        ((float *)dw)[i] = i == 3 ? NAN : 1.0f;
    ferry_engine_release(e, 0, FERRY_PHASE_BACKWARD);
    ferry_step_report rep = FERRY_STEP_REPORT_INIT;
    o.lr = -1;
    TAP_IS_STATUS(ferry_engine_step(e, &o, &rep), FERRY_ERR_INVALID_ARGUMENT, "a negative lr is refused");
    o.lr = 0.1f;
    TAP_IS_STATUS(ferry_engine_step(e, &o, &rep), FERRY_OK, "a step with a NaN gradient returns OK");
    tap_ok(rep.skipped == 1 && rep.bad_group == 0 && rep.step == 0, "and is reported skipped (group %d)", rep.bad_group);
    float back[8];
    ferry_engine_get_weights(e, 0, back);
    tap_ok(memcmp(back, w, sizeof w) == 0, "the weights are untouched by the skipped step");
    ferry_engine_destroy(e);
}

int main(void)
{
    if (gpt2_config_from_fields(2, 4, 64, 500, 512, 64, &tiny) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    tap_diag("tiny GPT-2: 2 layers, 4 heads, 64 wide, vocab 500 padded to 512; B=%d T=%d, %d steps; %s storage",
             B, T, STEPS, test_dtype_name());
    test_misuse();
    test_modes_agree();
    test_delayed_update();
    test_params_beyond_budget();
    test_params_residency();
    return tap_done();
}
