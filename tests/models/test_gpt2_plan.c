/* Tests of the memory planner (models/gpt2_plan.c, over engine/plan.c)
 * against real runs:
 * - its activations are what gpt2_activations_create asks the allocator
 *   for on an open host backend, for shapes that do and do not hit the
 *   classifier's chunking;
 * - a small GPT-2 trained for a few steps through the engine on the host
 *   backend, in each offload mode, with and without recompute (and params
 *   mode at two prefetch depths), writes a memory trace; `memprof --json` on
 *   that trace gives the measured device and host peaks, which must be within
 *   5% of gpt2_plan_predict's (and agree with ferry_engine_memory_stats), and
 *   says that the run kept the memory plan the trace carries;
 * - params mode trains in a budget of its predicted peak, and not under the
 *   predicted floor;
 * - `memprof plan`: bad flags exit 2 with a message, a budget too small says
 *   so and names the largest batch that fits (checked by predicting it and
 *   the next one), and --json parses with cJSON and carries the figures.
 * argv[1]: the memprof program. $FERRY_KEEP_TRACES=1 keeps the traces. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "engine/engine_fixture.h"
#include "json_path.h"
#include "run_program.h"
#include "tap.h"
#include "models/gpt2_plan.h"
#include "offload/arena.h"

enum { STEPS = 3 };

static const char *memprof;
static char dir[] = "/tmp/ferry_gpt2_plan_XXXXXX";

typedef program_run run;

static void run_memprof(const char *args, run *r) { program_run_in(dir, memprof, args, r); }

static double num(const cJSON *o, const char *path) { return json_num(o, path); }

/* ---- the activations, against what the model asks for ---- */

/* An allocator that counts the bytes asked and hands out distinct fake
 * pointers (nothing is launched, so nothing is dereferenced). */
typedef struct counter {
    uint64_t bytes;
    uintptr_t next;
} counter;

static ferry_status count_alloc(void *ctx, const char *what, size_t bytes, void **out)
{
    (void)what;
    counter *c = ctx;
    c->bytes += bytes;
    c->next += 4096;
    *out = (void *)c->next;
    return FERRY_OK;
}

static void count_free(void *ctx, void *ptr)
{
    (void)ctx;
    (void)ptr;
}

static void check_activations(void)
{
    backend *be = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK) {
        tap_ok(0, "host backend opens: %s", ferry_last_error());
        return;
    }
    struct { int L, NH, C, V, maxT, B, T; } shapes[] = {
        {4, 4, 64, 1000, 128, 8, 64},    /* the training test's model */
        {4, 4, 128, 1000, 128, 4, 64},
        {2, 2, 64, 50257, 1024, 2, 200}, /* 400 rows > 166 per classifier chunk */
        {3, 3, 96, 333, 64, 1, 1},       /* a single token; V not a multiple of 128 */
        {12, 12, 768, 50257, 1024, 8, 1024},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        gpt2_config c;
        gpt2_model *m = NULL;
        if (gpt2_config_from_fields(shapes[i].L, shapes[i].NH, shapes[i].C, shapes[i].V, 0, shapes[i].maxT, &c) !=
                FERRY_OK ||
            gpt2_create(&c, &m) != FERRY_OK) {
            tap_ok(0, "shape %zu: model: %s", i, ferry_last_error());
            continue;
        }
        for (int rc = 0; rc <= 1; rc++) {
            counter cnt = {0, 0};
            gpt2_allocator alloc = {&cnt, count_alloc, count_free};
            gpt2_activations *a = NULL;
            ferry_status st = gpt2_activations_create(m, be, shapes[i].B, shapes[i].T, rc, &alloc, &a);
            gpt2_activations_destroy(a);
            gpt2_plan p;
            if (st == FERRY_OK)
                st = gpt2_plan_predict(&(gpt2_plan_request){.cfg = &c, .batch = shapes[i].B, .seq = shapes[i].T,
                                                            .offload = FERRY_OFFLOAD_OPTIMIZER, .recompute = rc,
                                                            .prefetch_groups = 2, .micro_batches = 1,
                                                            .backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_AUTO,
                                                            .ranks = 1, .device_budget = 0}, &p);
            if (st != FERRY_OK) {
                tap_ok(0, "shape %zu: %s", i, ferry_last_error());
                continue;
            }
            TAP_IS_INT(p.activations, cnt.bytes,
                       "activations L%d C%d V%d B%d T%d recompute %d: planned = what the model asks for",
                       shapes[i].L, shapes[i].C, shapes[i].V, shapes[i].B, shapes[i].T, rc);
        }
        gpt2_destroy(m);
    }
    backend_close(be);
}

/* ---- real training ---- */

typedef struct train_opts {
    ferry_offload mode;
    bool recompute;
    int prefetch;
    uint64_t budget;
    const char *trace;
    int accum; /* micro-batches per step; 0 = 1 */
} train_opts;

typedef struct measured {
    uint64_t device_peak, host_peak; /* ferry_engine_memory_stats */
    int max_resident;
} measured;

static gpt2_config model_cfg;
/* 4 layers, 64 wide, 512 tokens a micro-batch: a block's gradient is under
 * 3% of the device peak, so the timing-dependent count of gradient buffers
 * in params mode (one or two fewer than the bound when the compute stream
 * catches up with the host) stays inside the 5% the prediction is held to. */
enum { TB = 8, TT = 64 };

static void tokens_for(int step, int32_t *tokens, int32_t *targets)
{
    uint64_t rng = 4242 + (uint64_t)step;
    int32_t prev = (int32_t)(tap_rand_u64(&rng) % (uint64_t)model_cfg.vocab_size);
    for (int i = 0; i < TB * TT; i++) {
        tokens[i] = prev;
        prev = (int32_t)(tap_rand_u64(&rng) % (uint64_t)model_cfg.vocab_size);
        targets[i] = prev;
    }
}

static ferry_status train(const train_opts *o, measured *out)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, o->mode, FERRY_DTYPE_AUTO, 2);
    cfg.prefetch_groups = o->prefetch;
    cfg.device_budget_bytes = o->budget ? o->budget : (uint64_t)1 << 30;
    cfg.trace_path = o->trace;
    /* The plan is the placement without the split update, whose device
     * state after the warm-up comes out of the budget the plan leaves
     * spare (docs/engine.md). */
    cfg.device_update_groups = 0;
    /* The activations it will take, declared: the engine's plan holds them. */
    cfg.auto_activation_bytes = efix_acts_bytes(&model_cfg, FERRY_DTYPE_F32, TB, TT, o->recompute);
    efix f;
    ferry_status st = efix_start(&f, &model_cfg, &cfg, 99, TB, TT, o->recompute);
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.lr = 1e-3f;
    int accum = o->accum > 0 ? o->accum : 1;
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        tokens_for(step, f.tokens, f.targets);
        float loss = 0;
        for (int k = 0; k < accum && st == FERRY_OK; k++) {
            st = ferry_engine_begin_micro_batch(f.e, k, accum);
            if (st == FERRY_OK) st = ferry_engine_mark(f.e, step, "forward");
            if (st == FERRY_OK) st = gpt2_forward(f.m, f.act, &f.hooks, f.s, f.tokens, f.targets, true);
            if (st == FERRY_OK) st = ferry_engine_mark(f.e, step, "backward");
            if (st == FERRY_OK) st = gpt2_backward(f.m, f.act, &f.hooks, f.s, 1.0f / (float)accum);
            if (st == FERRY_OK) st = gpt2_loss(f.act, f.s, &loss);
        }
        if (st == FERRY_OK) st = ferry_engine_mark(f.e, step, "optimizer");
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &so, NULL);
    }
    if (st == FERRY_OK) {
        ferry_engine_synchronize(f.e);
        ferry_memory_stats ms = efix_memory(&f);
        out->device_peak = ms.device_total_peak_bytes;
        out->host_peak = ms.host_peak_bytes;
        out->max_resident = efix_timing(&f).max_resident_groups;
    }
    if (st != FERRY_OK)
        tap_diag("training failed: %s", ferry_last_error());
    efix_close(&f);
    return st;
}

static const char *mode_name(ferry_offload m) { return ferry_offload_name(m); }

/* With accum > 1 the step's micro-batch gradients are summed in fp32: the
 * prediction must count that sum (4 bytes a parameter) where the engine puts
 * it (device in none, host otherwise). */
static void check_training(ferry_offload mode, bool recompute, int prefetch, int accum)
{
    char trace[600];
    snprintf(trace, sizeof trace, "%s/%s_%d_%d_%d.fmt", dir, mode_name(mode), recompute, prefetch, accum);
    train_opts o = {mode, recompute, prefetch, 0, trace, accum};
    measured ms = {0};
    gpt2_plan p;
    gpt2_plan_request rq = {.cfg = &model_cfg, .batch = TB, .seq = TT, .offload = mode, .recompute = recompute,
                            .prefetch_groups = prefetch, .micro_batches = accum, .backend = FERRY_BACKEND_HOST,
                            .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                            .device_budget = (uint64_t)1 << 30}; /* train()'s budget: params mode keeps every group */
    ferry_status pst = gpt2_plan_predict(&rq, &p);
    if (accum > 1)
        tap_diag("%s recompute %d prefetch %d, %d micro-batches a step:", mode_name(mode), recompute, prefetch, accum);
    TAP_IS_STATUS(pst, FERRY_OK, "%s recompute %d prefetch %d: predicted", mode_name(mode), recompute, prefetch);
    if (!tap_ok(train(&o, &ms) == FERRY_OK, "%s recompute %d prefetch %d: %d steps trained with a trace",
                mode_name(mode), recompute, prefetch, STEPS))
        return;
    char args[700];
    snprintf(args, sizeof args, "--json '%s'", trace);
    run r;
    run_memprof(args, &r);
    TAP_IS_INT(r.status, 0, "%s recompute %d prefetch %d: memprof --json reads the trace", mode_name(mode), recompute,
               prefetch);
    cJSON *j = cJSON_Parse(r.out);
    double dev = num(j, "device.peak_bytes"), host = num(j, "host.peak_bytes");
    double dev_act = num(j, "device.by_category_at_peak.activations");
    tap_diag("%s recompute %d prefetch %d: device peak measured %.0f, predicted %llu (%+.2f%%); host %.0f vs %llu; "
             "max resident groups %d, predicted %d",
             mode_name(mode), recompute, prefetch, dev, (unsigned long long)p.device_total,
             100.0 * ((double)p.device_total - dev) / dev, host, (unsigned long long)p.host_total,
             ms.max_resident, p.device_weight_groups);
    TAP_IS_INT(dev, ms.device_peak, "%s recompute %d: memprof's device peak = the engine's own high-water mark",
               mode_name(mode), recompute);
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(j, "plan");
    if (!tap_ok(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(plan, "kept")),
                "%s recompute %d prefetch %d: the run kept the plan its trace carries", mode_name(mode), recompute,
                prefetch))
        tap_diag("  %s", r.out);
    TAP_IS_CLOSE(p.device_total, dev, 0, 0.05, "%s recompute %d prefetch %d: device peak predicted within 5%%",
                 mode_name(mode), recompute, prefetch);
    TAP_IS_INT(p.activations, dev_act, "%s recompute %d: activations at the device peak exactly as predicted",
               mode_name(mode), recompute);
    if (mode == FERRY_OFFLOAD_NONE) {
        TAP_IS_INT(host < 0 ? 0 : host, 0, "none: nothing in the host pool");
        TAP_IS_INT(p.host_total, 0, "none: planner predicts no host pool");
    } else {
        TAP_IS_CLOSE(p.host_total, host, 0, 0.05, "%s recompute %d: host peak predicted within 5%%", mode_name(mode),
                     recompute);
        TAP_IS_INT(p.host_total, host, "%s recompute %d: host peak exactly as predicted", mode_name(mode), recompute);
    }
    if (mode != FERRY_OFFLOAD_PARAMS)
        TAP_IS_INT(p.device_total, dev, "%s recompute %d: device peak exactly as predicted", mode_name(mode),
                   recompute);
    else {
        TAP_IS_INT(ms.max_resident, p.device_weight_groups, "params prefetch %d: groups resident at most %d",
                   prefetch, p.device_weight_groups);
        double w = num(j, "device.category_peaks.params");
        if (!tap_ok(w <= (double)p.device_bytes[FERRY_MEM_PARAMS],
                    "params prefetch %d: device weights never above the predicted window", prefetch))
            tap_diag("  weights peak %.0f, predicted %llu", w, (unsigned long long)p.device_bytes[FERRY_MEM_PARAMS]);
    }
    cJSON_Delete(j);
}

/* Params mode under a hard budget: the predicted peak is enough to train in
 * (and the run stays inside it); below the predicted floor (group 0 and the
 * largest other group, weights and gradients each, plus the activations)
 * no schedule fits and setup or the first step fails with out-of-memory. */
static void check_params_budget(void)
{
    gpt2_plan p;
    if (gpt2_plan_predict(&(gpt2_plan_request){.cfg = &model_cfg, .batch = TB, .seq = TT,
                                               .offload = FERRY_OFFLOAD_PARAMS, .recompute = true,
                                               .prefetch_groups = 2, .micro_batches = 1,
                                               .backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                               .device_budget = 0}, &p) != FERRY_OK) {
        tap_ok(0, "params budget: predicted: %s", ferry_last_error());
        return;
    }
    measured ms = {0};
    train_opts o = {FERRY_OFFLOAD_PARAMS, true, 2, p.device_total, NULL, 1};
    tap_ok(train(&o, &ms) == FERRY_OK, "params: trains in a budget of its predicted peak, %llu bytes",
           (unsigned long long)p.device_total);
    tap_ok(ms.device_peak <= p.device_total, "params: device peak %llu within that budget",
           (unsigned long long)ms.device_peak);
    o.budget = p.device_min_bytes - ARENA_ALIGN;
    ferry_status st = train(&o, &ms);
    TAP_IS_STATUS(st, FERRY_ERR_OUT_OF_MEMORY, "params: %llu bytes, one granule under the predicted floor %llu, "
                  "is out of memory", (unsigned long long)o.budget, (unsigned long long)p.device_min_bytes);
}

/* ---- the command line ---- */

static void check_cli_errors(void)
{
    const char *bad[][2] = {
        {"plan --batch 0", "--batch"},
        {"plan --batch x", "--batch"},
        {"plan --offload disk", "disk"},
        {"plan --model gpt5", "gpt5"},
        {"plan --layers 4 --heads 3 --width 128", "--heads"},
        {"plan --layers 4", "--heads"},
        {"plan --seq 2048", "2048"},
        {"plan --gpu-mem 24QB", "24QB"},
        {"plan --backend tpu", "tpu"},
        {"plan --prefetch 99", "--prefetch"},
        {"plan --layers 4 --heads 4 --width 128 --vocab 70000", "--vocab"}, /* train_gpt2's limit: uint16 tokens */
        {"plan --layers 4 --heads 5000 --width 10000", "--heads"},          /* train_gpt2 takes at most 4096 */
        {"plan --grad-accum 0", "--grad-accum"},
        {"plan --dtype i32", "i32"},
        {"plan --frobnicate", "--frobnicate"},
        {"plan --batch", "--batch"},
        {"plan extra", "extra"},
        {"plan --card 24GiB --gpu-mem 23GiB", "not both"},
        {"plan --card-reserve 1GiB", "--card SIZE too"},
        {"plan --card 1GiB --card-reserve 1GiB", "leaves nothing"},
        {"plan --card 24G", "ambiguous"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run r;
        run_memprof(bad[i][0], &r);
        TAP_IS_INT(r.status, 2, "'memprof %s': exit 2", bad[i][0]);
        if (!tap_ok(strstr(r.err, bad[i][1]) != NULL && strlen(r.out) == 0,
                    "'memprof %s': stderr names '%s', nothing on stdout", bad[i][0], bad[i][1]))
            tap_diag("  stderr: %s", r.err);
    }
    run r;
    /* --backend auto chooses as train_gpt2 would: without a GPU, the host (fp32 on the device). */
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    ferry_system_probe(&info);
    run_memprof("plan --backend auto --model d2", &r);
    const char *want_backend = info.gpu_count > 0 ? "cuda backend (bf16" : "host backend (fp32";
    tap_ok(r.status == 0 && strstr(r.out, want_backend) != NULL,
           "memprof plan --backend auto plans for the %s backend, as train_gpt2's auto would (exit %d)",
           info.gpu_count > 0 ? "cuda" : "host", r.status);
    run_memprof("plan --help", &r);
    TAP_IS_INT(r.status, 0, "memprof plan --help: exit 0");
    tap_ok(strstr(r.out, "--gpu-mem") != NULL, "memprof plan --help lists --gpu-mem");
}

/* --card SIZE: the budget is SIZE less the reserve (0.5 GiB unless
 * --card-reserve says otherwise), the same plan as --gpu-mem of that. */
static void check_cli_card(void)
{
    gpt2_config c;
    gpt2_config_preset("gpt2-xl", &c);
    const struct { const char *flags; uint64_t budget; } cases[] = {
        {"--card 24GiB", ((uint64_t)24 << 30) - ((uint64_t)512 << 20)},
        {"--card 24GiB --card-reserve 1GiB", (uint64_t)23 << 30},
        {"--card 16GB --card-reserve 0", 16000000000ull},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int maxB = 0;
        gpt2_plan_max_batch(&(gpt2_plan_request){.cfg = &c, .batch = 1, .seq = 1024,
                                                 .offload = FERRY_OFFLOAD_OPTIMIZER, .recompute = true,
                                                 .prefetch_groups = 2, .micro_batches = 1,
                                                 .backend = FERRY_BACKEND_CUDA, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                                 .device_budget = 0}, cases[i].budget, &maxB);
        char args[256];
        snprintf(args, sizeof args, "plan --model gpt2-xl --seq 1024 --recompute %s --json", cases[i].flags);
        run r;
        run_memprof(args, &r);
        cJSON *j = cJSON_Parse(r.out);
        TAP_IS_INT(r.status, 0, "memprof %s: exit 0", args);
        TAP_IS_INT(num(j, "gpu_mem_bytes"), cases[i].budget, "%s: the budget is the card less the reserve",
                   cases[i].flags);
        TAP_IS_INT(num(j, "max_batch"), maxB, "%s: the largest batch is the planner's at that budget (%d)",
                   cases[i].flags, maxB);
        cJSON_Delete(j);
    }
    run r;
    run_memprof("plan --model gpt2-xl --seq 1024 --recompute --card 24GiB", &r);
    if (!tap_ok(strstr(r.out, "--card 24.0 GiB less 512.0 MiB for the CUDA context and libraries") &&
                    strstr(r.out, "--gpu-mem 23.5 GiB: fits"),
                "the text says the card, the reserve and the budget"))
        tap_diag("  stdout: %s", r.out);
}

/* --layout and --layout-svg: the JSON layout's buffers checked here on
 * their own terms (no two alive at once share a byte; the region ends at the
 * last buffer's end and is the plan's device peak), and the picture draws
 * each of them, by name, under the budget's line. */
static void check_cli_layout(void)
{
    static const char *const modes[] = {"optimizer", "params", "none"};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        char args[600], svg_path[300];
        snprintf(svg_path, sizeof svg_path, "%s/layout-%s.svg", dir, modes[k]);
        snprintf(args, sizeof args,
                 "plan --backend host --model d2 --vocab 1024 --context 64 --batch 2 --seq 64 --offload %s "
                 "--gpu-mem 64MiB --json --layout --layout-svg '%s'", modes[k], svg_path);
        run r;
        run_memprof(args, &r);
        cJSON *j = cJSON_Parse(r.out);
        const cJSON *bufs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "layout"), "buffers");
        int n = cJSON_GetArraySize(bufs), overlaps = 0;
        double end = 0;
        for (int a = 0; a < n; a++) {
            const cJSON *x = cJSON_GetArrayItem(bufs, a);
            double xo = num(x, "offset"), xb = num(x, "bytes"), xs = num(x, "start");
            double xe = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(x, "end")) ? 1e18 : num(x, "end");
            end = xo + xb > end ? xo + xb : end;
            for (int b = a + 1; b < n; b++) {
                const cJSON *y = cJSON_GetArrayItem(bufs, b);
                double yo = num(y, "offset"), yb = num(y, "bytes"), ys = num(y, "start");
                double ye = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(y, "end")) ? 1e18 : num(y, "end");
                if (xs < ye && ys < xe && xo < yo + yb && yo < xo + xb)
                    overlaps++;
            }
        }
        TAP_IS_INT(r.status, 0, "plan --offload %s --layout --layout-svg: exit 0", modes[k]);
        tap_ok(n > 4 && overlaps == 0, "%s: %d buffers, none sharing a byte with one alive at the same time (%d do)",
               modes[k], n, overlaps);
        TAP_IS_INT(num(j, "layout.region_bytes"), end, "%s: the region ends at the last buffer's end", modes[k]);
        TAP_IS_INT(num(j, "layout.region_bytes"), num(j, "device.total_bytes"),
                   "%s: the region is the plan's device peak", modes[k]);
        static char svg[1 << 20];
        program_slurp(svg_path, svg, sizeof svg);
        int rects = 0, named = 0;
        for (const char *q = svg; (q = strstr(q, "<rect class=\"buffer\"")) != NULL; q++)
            rects++;
        for (int a = 0; a < n; a++) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bufs, a), "name");
            char title[160];
            snprintf(title, sizeof title, "<title>%s: ", cJSON_IsString(name) ? name->valuestring : "?");
            named += strstr(svg, title) != NULL;
        }
        tap_ok(rects == n && named == n && strstr(svg, ">budget 64.0 MiB</text>"),
               "%s: the picture draws the %d buffers (%d rectangles, %d titled by name) and the budget's line",
               modes[k], n, rects, named);
        cJSON_Delete(j);
    }
}

static void check_cli_fit(void)
{
    gpt2_config c;
    gpt2_config_preset("gpt2", &c);
    int maxB = 0;
    uint64_t budget = (uint64_t)6 << 30;
    gpt2_plan_max_batch(&(gpt2_plan_request){.cfg = &c, .batch = 1, .seq = 1024, .offload = FERRY_OFFLOAD_OPTIMIZER,
                                             .recompute = false, .prefetch_groups = 2, .micro_batches = 1,
                                             .backend = FERRY_BACKEND_CUDA, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                             .device_budget = 0}, budget, &maxB);
    gpt2_plan at, above;
    gpt2_plan_predict(&(gpt2_plan_request){.cfg = &c, .batch = maxB, .seq = 1024, .offload = FERRY_OFFLOAD_OPTIMIZER,
                                           .recompute = false, .prefetch_groups = 2, .micro_batches = 1,
                                           .backend = FERRY_BACKEND_CUDA, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                           .device_budget = 0}, &at);
    gpt2_plan_predict(&(gpt2_plan_request){.cfg = &c, .batch = maxB + 1, .seq = 1024,
                                           .offload = FERRY_OFFLOAD_OPTIMIZER, .recompute = false,
                                           .prefetch_groups = 2, .micro_batches = 1, .backend = FERRY_BACKEND_CUDA,
                                           .dtype = FERRY_DTYPE_AUTO, .ranks = 1, .device_budget = 0}, &above);
    tap_ok(maxB >= 1 && at.device_total <= budget && above.device_total > budget,
           "max batch %d: B=%d predicts %llu <= 6 GiB, B=%d predicts %llu > 6 GiB", maxB, maxB,
           (unsigned long long)at.device_total, maxB + 1, (unsigned long long)above.device_total);

    run r;
    run_memprof("plan --model gpt2 --batch 64 --seq 1024 --offload optimizer --gpu-mem 6GiB", &r);
    TAP_IS_INT(r.status, 1, "a plan that does not fit: exit 1");
    char want[64];
    snprintf(want, sizeof want, "largest batch that fits: %d", maxB);
    if (!tap_ok(strstr(r.out, "does not fit") && strstr(r.out, want), "the text says it does not fit and '%s'",
                want))
        tap_diag("  stdout: %s", r.out);

    run_memprof("plan --model gpt2 --batch 64 --seq 1024 --offload optimizer --gpu-mem 6GiB --json", &r);
    cJSON *j = cJSON_Parse(r.out);
    tap_ok(j != NULL, "--json output parses with cJSON");
    gpt2_plan p;
    gpt2_plan_predict(&(gpt2_plan_request){.cfg = &c, .batch = 64, .seq = 1024, .offload = FERRY_OFFLOAD_OPTIMIZER,
                                           .recompute = false, .prefetch_groups = 2, .micro_batches = 1,
                                           .backend = FERRY_BACKEND_CUDA, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                           .device_budget = 0}, &p);
    TAP_IS_INT(num(j, "device.total_bytes"), p.device_total, "json device.total_bytes = gpt2_plan_predict's");
    TAP_IS_INT(num(j, "device.by_category.activations"), p.activations, "json device activations");
    TAP_IS_INT(num(j, "host.total_bytes"), p.host_total, "json host.total_bytes");
    TAP_IS_INT(num(j, "max_batch"), maxB, "json max_batch");
    tap_ok(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "fits")), "json fits is false");
    cJSON_Delete(j);

    snprintf(want, sizeof want, "plan --model gpt2 --batch %d --seq 1024 --gpu-mem 6GiB", maxB);
    run_memprof(want, &r);
    TAP_IS_INT(r.status, 0, "the largest batch fits: exit 0");
    tap_ok(strstr(r.out, "fits") && !strstr(r.out, "does not fit"), "the text says it fits");

    /* f16, the type of Volta and Turing: bf16's bytes, said as f16. */
    run_memprof("plan --model gpt2 --batch 8 --seq 1024 --dtype f16 --json", &r);
    j = cJSON_Parse(r.out);
    gpt2_plan_predict(&(gpt2_plan_request){.cfg = &c, .batch = 8, .seq = 1024, .offload = FERRY_OFFLOAD_OPTIMIZER,
                                           .recompute = false, .prefetch_groups = 2, .micro_batches = 1,
                                           .backend = FERRY_BACKEND_CUDA, .dtype = FERRY_DTYPE_BF16, .ranks = 1,
                                           .device_budget = 0}, &p);
    TAP_IS_INT(r.status, 0, "memprof plan --dtype f16: exit 0");
    TAP_IS_INT(num(j, "device.total_bytes"), p.device_total, "f16's device bytes are bf16's");
    TAP_IS_INT(num(j, "host.total_bytes"), p.host_total, "and so are its host bytes");
    cJSON_Delete(j);
    run_memprof("plan --model gpt2 --batch 8 --seq 1024 --dtype f16", &r);
    if (!tap_ok(strstr(r.out, "(f16 on the device, dynamic loss scaling)") != NULL, "the text says f16"))
        tap_diag("  stdout: %s", r.out);

    /* 124M parameters, host pool: 12 + 2 + 2 bytes each (4 KiB rounding aside). */
    gpt2_plan_predict(&(gpt2_plan_request){.cfg = &c, .batch = 64, .seq = 1024, .offload = FERRY_OFFLOAD_OPTIMIZER,
                                           .recompute = false, .prefetch_groups = 2, .micro_batches = 1,
                                           .backend = FERRY_BACKEND_CUDA, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                           .device_budget = 0}, &p);
    double per_param = (double)p.host_total / (double)p.group_elems;
    TAP_IS_CLOSE(per_param, 16.0, 0.001, 0, "gpt2 optimizer offload, cuda: 16 host bytes per parameter");
}

int main(int argc, char **argv)
{
    memprof = program_setup(argc, argv, 2, "usage: test_gpt2_plan MEMPROF", dir);
    if (gpt2_config_from_fields(4, 4, 64, 1000, 0, 128, &model_cfg) != FERRY_OK)
        tap_plan_skip("model config refused");

    check_activations();
    for (int mode = FERRY_OFFLOAD_NONE; mode <= FERRY_OFFLOAD_PARAMS; mode++)
        for (int rc = 0; rc <= 1; rc++)
            check_training((ferry_offload)mode, rc, 2, 1);
    check_training(FERRY_OFFLOAD_PARAMS, false, 0, 1);
    check_training(FERRY_OFFLOAD_PARAMS, true, 1, 1);
    check_training(FERRY_OFFLOAD_PARAMS, true, 4, 1);
    for (int mode = FERRY_OFFLOAD_NONE; mode <= FERRY_OFFLOAD_PARAMS; mode++)
        check_training((ferry_offload)mode, true, 2, 2);
    check_params_budget();
    check_cli_errors();
    check_cli_fit();
    check_cli_card();
    check_cli_layout();

    if (getenv("FERRY_KEEP_TRACES"))
        tap_diag("traces kept in %s", dir);
    else
        test_dir_remove(dir);
    return tap_done();
}
