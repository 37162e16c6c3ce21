/* The planner's promise, across a matrix: for every offload mode (none,
 * optimizer, params, nvme), recompute on and off, every storage type (f32,
 * bf16, f16), GPT-2-shaped models of the dN family (N layers, 64N wide, N
 * heads; a vocabulary of 1024 keeps a CPU step short, and the plan does not
 * depend on it), budgets from tight to roomy (the plan of one sample, of two
 * and of four) and sequences of 64 and 256:
 *   - the planner's largest batch (gpt2_plan_max_batch) sets up, allocates
 *     its activations and trains a step on the host backend;
 *   - the engine's measured device peak equals the plan's, byte for byte,
 *     and so does the host pool's;
 *   - one sample more fails cleanly, FERRY_ERR_OUT_OF_MEMORY at setup, with
 *     a message naming the memory plan.
 * The engine is told what the activations take (auto_activation_bytes, as
 * train_gpt2 does), so they lie in its plan. With --undeclared the
 * activations are left out of the plan and go through the arena's dynamic
 * heap, the allocator every buffer went through before the plan: that run
 * is expected to fail (meson's should_fail), and does where its chunks
 * fragment, so the matrix can tell the two apart. --fragment runs the one
 * case where they did (GPT-2's vocabulary, d4, T=256, optimizer, recompute,
 * f32, a 400 MiB budget: 256 MiB chunks leave the activations no room).
 * --xl runs the cuda backend (the simulated device, where this program is
 * built against it) at GPT-2 XL's widths (1600 wide, 25 heads; two layers,
 * so a step fits a CPU), in bf16 and f16 (or those --dtypes names), at the
 * middle budget above (a simulated step at that width takes seconds). Each
 * list is of whole names, comma-separated; a name that matches nothing
 * bails out. --moments f32,bf16,8bit runs the optimizer and params cases
 * with each form of the host Adam moments (default f32; the compact forms
 * are the CPU update's, so none and nvme keep f32). --upload-window on|off
 * sets the engine's upload window in the optimizer and params cases
 * (default: the engine's policy, on with compact moments).
 *   test_plan_matrix [d2,d4,...] [--seqs 64,256] [--dtypes f32,bf16,f16] [--moments f32,bf16,8bit]
 *                    [--upload-window on|off]
 *                    [--undeclared] [--fragment] [--xl] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "common/error.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "models/gpt2_plan.h"
#include "tap.h"

#define VOCAB 1024
#define CTX 256

static char nvme_dir[] = "/tmp/ferry-plan-matrix-XXXXXX";
static bool undeclared;
static int failures_oom;
static ferry_backend_kind kind = FERRY_BACKEND_HOST;

/* The model's initial weights (seed 7), made once per model and handed to
 * every run: GPT-2's normal initialisation is most of a small step's time. */
static float **values;
static int nvalues;

static void free_values(void)
{
    for (int g = 0; g < nvalues; g++)
        free(values[g]);
    free(values);
    values = NULL;
    nvalues = 0;
}

/* The weights of model c in `values`; false (bailing out) when they cannot be made. */
static bool make_values(const gpt2_config *c)
{
    gpt2_model *m = NULL;
    free_values();
    ferry_status st = gpt2_create(c, &m);
    int n = st == FERRY_OK ? gpt2_num_groups(m) : 0;
    if (st == FERRY_OK && !(values = calloc((size_t)n, sizeof *values)))
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "initial weights");
    for (int g = 0; st == FERRY_OK && g < n; g++, nvalues++) {
        values[g] = malloc(gpt2_group_numel(m, g) * sizeof(float));
        st = values[g] ? gpt2_init_group(m, g, 7, values[g]) : err_set(FERRY_ERR_OUT_OF_MEMORY, "initial weights");
    }
    gpt2_destroy(m);
    if (st != FERRY_OK) {
        free_values();
        printf("Bail out! %s\n", ferry_last_error());
    }
    return st == FERRY_OK;
}

/* One run: setup with budget, activations, one step. *peak and *host the
 * engine's high-water marks. */
static ferry_moments form = FERRY_MOMENTS_F32; /* of the case being run */
static int window_asked = FERRY_UPLOAD_WINDOW_AUTO; /* --upload-window on|off */

/* The upload window of a case: as asked in the modes it serves, else the default. */
static int window_of(ferry_offload mode)
{
    return mode == FERRY_OFFLOAD_OPTIMIZER || mode == FERRY_OFFLOAD_PARAMS ? window_asked : FERRY_UPLOAD_WINDOW_AUTO;
}

static ferry_status run(const gpt2_config *c, ferry_offload mode, bool recompute, ferry_dtype dtype, int B, int T,
                        uint64_t budget, uint64_t *peak, uint64_t *host)
{
    gpt2_model *m = NULL;
    ferry_engine *e = NULL;
    gpt2_activations *act = NULL;
    int32_t *tok = malloc((size_t)B * T * sizeof *tok), *tgt = malloc((size_t)B * T * sizeof *tgt);
    ferry_engine_config ec = FERRY_ENGINE_CONFIG_INIT;
    ec.backend = kind;
    ec.dtype = dtype;
    ec.offload = mode;
    ec.device_budget_bytes = budget;
    ec.optimizer_threads = 2;
    ec.device_update_groups = 0; /* auto's split would take what the plan leaves spare */
    ec.moments = form;
    ec.upload_window = window_of(mode);
    if (mode == FERRY_OFFLOAD_NVME) {
        ec.nvme_path = nvme_dir;
        ec.nvme_window_bytes = 1 << 20;
    }
    ferry_status st = tok && tgt ? gpt2_create(c, &m) : err_set(FERRY_ERR_OUT_OF_MEMORY, "tokens");
    if (st == FERRY_OK && !undeclared)
        ec.auto_activation_bytes = gpt2_activations_bytes(m, dtype, B, T, recompute);
    if (st == FERRY_OK) st = ferry_engine_create(&ec, &e);
    if (st == FERRY_OK) st = gpt2_engine_add_groups(m, e, 7, values);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    gpt2_allocator alloc = e ? gpt2_engine_allocator(e) : (gpt2_allocator){0};
    if (st == FERRY_OK) st = gpt2_activations_create(m, engine_embed_backend(e), B, T, recompute, &alloc, &act);
    gpt2_hooks hooks = e ? gpt2_engine_hooks(e) : (gpt2_hooks){0};
    backend_stream *s = e ? engine_embed_stream(e) : NULL;
    for (int i = 0; st == FERRY_OK && i < B * T; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % VOCAB);
        tgt[i] = (int32_t)((i * 7 + 10) % VOCAB);
    }
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    if (st == FERRY_OK) st = ferry_engine_begin_micro_batch(e, 0, 1);
    if (st == FERRY_OK) st = gpt2_forward(m, act, &hooks, s, tok, tgt, true);
    if (st == FERRY_OK) st = gpt2_backward(m, act, &hooks, s, ferry_engine_loss_scale(e));
    if (st == FERRY_OK) st = ferry_engine_step(e, &so, NULL);
    if (st == FERRY_OK) st = ferry_engine_synchronize(e);
    if (st == FERRY_OK) {
        ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
        ferry_engine_memory_stats(e, &ms);
        *peak = ms.device_total_peak_bytes;
        *host = ms.host_peak_bytes;
    }
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", ferry_last_error());
    if (e)
        ferry_engine_synchronize(e);
    gpt2_activations_destroy(act);
    ferry_engine_destroy(e);
    gpt2_destroy(m);
    free(tok);
    free(tgt);
    if (st != FERRY_OK)
        err_set(st, "%s", keep);
    return st;
}

static void one_case(const char *model, const gpt2_config *c, ferry_offload mode, bool recompute, ferry_dtype dtype,
                     int T, int k, uint64_t budget)
{
    char what[160];
    snprintf(what, sizeof what, "%s T=%d %s%s %s, %s moments, budget %d (%.2f MiB)", model, T,
             ferry_offload_name(mode), recompute ? " recompute" : "", dtype_name(dtype), ferry_moments_name(form), k,
             (double)budget / (1 << 20));
    gpt2_plan_request rq = {.cfg = c, .batch = 1, .seq = T, .offload = mode, .recompute = recompute,
                            .prefetch_groups = 2, .micro_batches = 1, .backend = kind, .dtype = dtype,
                            .ranks = 1, .device_budget = budget, .moments = form,
                            .upload_window = window_of(mode)};
    gpt2_plan_disk disk = {false, 1 << 20, 0};
    int maxB = 0;
    gpt2_plan p;
    ferry_status st = gpt2_plan_max_batch(&rq, budget, &maxB);
    if (st == FERRY_OK && maxB > 0) {
        rq.batch = maxB;
        st = gpt2_plan_predict_disk(&rq, mode == FERRY_OFFLOAD_NVME ? &disk : NULL, &p);
    }
    if (!tap_ok(st == FERRY_OK && maxB > 0, "%s: the planner's largest batch is %d", what, maxB)) {
        tap_diag("  %s", st == FERRY_OK ? "not even one sample fits" : ferry_last_error());
        return;
    }
    uint64_t peak = 0, host = 0;
    st = run(c, mode, recompute, dtype, maxB, T, budget, &peak, &host);
    if (st == FERRY_ERR_OUT_OF_MEMORY)
        failures_oom++;
    if (!tap_ok(st == FERRY_OK, "%s: batch %d sets up and trains a step", what, maxB)) {
        tap_diag("  %s", ferry_last_error());
        return;
    }
    if (!tap_ok(peak == p.device_total && host == p.host_total,
                "%s: the measured peaks equal the plan's, byte for byte (device %llu, host %llu)", what,
                (unsigned long long)peak, (unsigned long long)host))
        tap_diag("  planned device %llu, host %llu", (unsigned long long)p.device_total,
                 (unsigned long long)p.host_total);
    if (undeclared)
        return;
    st = run(c, mode, recompute, dtype, maxB + 1, T, budget, &peak, &host);
    const char *msg = ferry_last_error();
    if (!tap_ok(st == FERRY_ERR_OUT_OF_MEMORY && strstr(msg, "memory plan"),
                "%s: batch %d fails cleanly, out of memory naming the plan", what, maxB + 1))
        tap_diag("  status %d: %s", (int)st, st == FERRY_OK ? "it trained" : msg);
}

/* A comma-separated list of names, each matched whole ("bf16" is not "f16"). */
static bool parse_list(const char *arg, const char *const *names, int n, bool *on)
{
    bool any = false;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        on[i] = false;
        for (const char *p = arg; *p; p += strcspn(p, ","), p += *p == ',')
            if (strncmp(p, names[i], len) == 0 && (p[len] == ',' || p[len] == '\0'))
                on[i] = true;
        any |= on[i];
    }
    return any;
}

int main(int argc, char **argv)
{
    static const char *const model_names[] = {"d2", "d4", "d12", "xl-wide"};
    static const int model_n[] = {2, 4, 12, 2};
    bool models[4] = {true, true, false, false}, seqs[2] = {true, true}, dtypes[3] = {true, true, true};
    bool fragment = false, ok = true, forms[3] = {true, false, false};
    static const char *const form_names[] = {"f32", "bf16", "8bit"};
    static const char *const seq_names[] = {"64", "256"}, *const dtype_names[] = {"f32", "bf16", "f16"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--undeclared"))
            undeclared = true;
        else if (!strcmp(argv[i], "--fragment"))
            fragment = true;
        else if (!strcmp(argv[i], "--xl")) {
            kind = FERRY_BACKEND_CUDA;
            models[0] = models[1] = models[2] = false;
            models[3] = true;
            dtypes[0] = false; /* the cuda backend stores bf16 or f16 */
        }
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc)
            ok = parse_list(argv[++i], seq_names, 2, seqs);
        else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc)
            ok = parse_list(argv[++i], dtype_names, 3, dtypes);
        else if (!strcmp(argv[i], "--moments") && i + 1 < argc)
            ok = parse_list(argv[++i], form_names, 3, forms);
        else if (!strcmp(argv[i], "--upload-window") && i + 1 < argc) {
            const char *v = argv[++i];
            ok = !strcmp(v, "on") || !strcmp(v, "off");
            window_asked = !strcmp(v, "on") ? FERRY_UPLOAD_WINDOW_ON : FERRY_UPLOAD_WINDOW_OFF;
        }
        else
            ok = parse_list(argv[i], model_names, 3, models);
        if (!ok) {
            printf("Bail out! '%s' names nothing this program runs (models d2, d4, d12; --seqs 64,256; "
                   "--dtypes f32,bf16,f16)\n", argv[i]);
            return 1;
        }
    }
    if (kind == FERRY_BACKEND_CUDA) { /* skipped only where there is no device at all */
        backend *be = NULL;
        ferry_status st = backend_open(FERRY_BACKEND_CUDA, &be);
        backend_close(be);
        if (st == FERRY_ERR_UNSUPPORTED) {
            printf("1..0 # SKIP --xl runs the cuda backend: %s\n", ferry_last_error());
            return 77;
        }
        if (st != FERRY_OK) {
            printf("Bail out! the cuda backend does not open: %s\n", ferry_last_error());
            return 1;
        }
    }
    if (!mkdtemp(nvme_dir)) {
        printf("Bail out! no temporary folder for the NVMe tier\n");
        return 1;
    }
    if (fragment) {
        gpt2_config c;
        if (gpt2_config_from_fields(4, 4, 256, 50257, 0, CTX, &c) != FERRY_OK || !make_values(&c))
            return 1;
        one_case("d4 (GPT-2's vocabulary)", &c, FERRY_OFFLOAD_OPTIMIZER, true, FERRY_DTYPE_F32, 256, 0, 400u << 20);
        free_values();
        rmdir(nvme_dir);
        return tap_done();
    }
    static const ferry_offload modes[] = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS,
                                          FERRY_OFFLOAD_NVME};
    static const ferry_dtype dts[] = {FERRY_DTYPE_F32, FERRY_DTYPE_BF16, FERRY_DTYPE_F16};
    static const int Ts[] = {64, 256}, ks[] = {1, 2, 4};
    for (int mi = 0; mi < 4; mi++) {
        if (!models[mi])
            continue;
        gpt2_config c;
        bool xl = mi == 3;
        if (gpt2_config_from_fields(model_n[mi], xl ? 25 : model_n[mi], xl ? 1600 : 64 * model_n[mi], VOCAB, 0, CTX,
                                    &c) != FERRY_OK ||
            !make_values(&c))
            return 1;
        for (int ti = 0; ti < 2; ti++)
            for (int di = 0; di < 3; di++)
                for (size_t o = 0; o < sizeof modes / sizeof modes[0]; o++)
                    for (int fi = 0; fi < 3; fi++)
                    for (int rc = 0; rc < 2; rc++) {
                        bool cpu = modes[o] == FERRY_OFFLOAD_OPTIMIZER || modes[o] == FERRY_OFFLOAD_PARAMS;
                        if (!seqs[ti] || !dtypes[di] || !forms[fi] || (fi > 0 && !cpu))
                            continue;
                        form = (ferry_moments)fi;
                        /* The plan of one sample (params: no weights kept), then room for one and
                         * for three samples' activations more. */
                        gpt2_plan one;
                        gpt2_plan_request r1 = {.cfg = &c, .batch = 1, .seq = Ts[ti], .offload = modes[o],
                                                .recompute = rc, .prefetch_groups = 2, .micro_batches = 1,
                                                .backend = kind, .dtype = dts[di], .ranks = 1,
                                                .moments = form, .upload_window = window_of(modes[o])};
                        gpt2_plan_disk disk = {false, 1 << 20, 0};
                        if (gpt2_plan_predict_disk(&r1, modes[o] == FERRY_OFFLOAD_NVME ? &disk : NULL, &one) !=
                            FERRY_OK) {
                            tap_ok(0, "plan of one sample: %s", ferry_last_error());
                            continue;
                        }
                        for (int ki = xl ? 1 : 0; ki < (xl ? 2 : 3); ki++) /* xl: one budget, a step is long */
                            one_case(model_names[mi], &c, modes[o], rc, dts[di], Ts[ti], ks[ki],
                                     one.device_total + (uint64_t)(ks[ki] - 1) * one.activations + 4096);
                    }
        free_values();
    }
    rmdir(nvme_dir);
    if (undeclared)
        tap_diag("undeclared activations: %d runs out of memory at the planner's largest batch", failures_oom);
    return tap_done();
}
