/* The split update of optimizer mode (engine/split.c): the first groups'
 * master weights and Adam moments on the device, updated there by the
 * backend's AdamW. On the host backend every split — forced 1, 2, all, and
 * auto — gives bitwise the all-CPU run's master weights, moments and device
 * weights over steps with clipping active, weight decay on (one group
 * exempt, one with an exempt range) and micro-batches accumulated; a resume
 * in the middle is exact; a forced split the budget cannot hold, or one
 * where the split is not available (data parallel, the NVMe tier, the
 * delayed update, params mode), fails at setup with a sentence. The dtype
 * comes from FERRY_TEST_DTYPE (f32, bf16; f16 with its loss scale). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/error.h"
#include "engine/engine.h"
#include "engine/split_fixture.h"
#include "offload/trace.h"
#include "tap.h"
#include "test_dtype.h"

static char dir[256];

static ferry_engine_config config(int split) { return config_on(FERRY_BACKEND_HOST, test_dtype(), split); }

static ferry_engine *make(int split)
{
    ferry_engine_config cfg = config(split);
    return make_cfg(&cfg);
}

/* Master weights, moments and device weights of two engines, bitwise; the
 * device groups' state read from the device. */
static bool same_state(ferry_engine *a, ferry_engine *b, char *why, size_t cap)
{
    if (ferry_engine_synchronize(a) != FERRY_OK || ferry_engine_synchronize(b) != FERRY_OK ||
        update_pull(a->update) != FERRY_OK || update_pull(b->update) != FERRY_OK) {
        snprintf(why, cap, "synchronize: %s", ferry_last_error());
        return false;
    }
    for (int g = 0; g < GROUPS; g++) {
        engine_group *x = &a->groups.g[g], *y = &b->groups.g[g];
        const void *xs[4] = {x->master, x->m, x->v, x->dev_weights}, *ys[4] = {y->master, y->m, y->v, y->dev_weights};
        const char *names[4] = {"master weights", "adam m", "adam v", "device weights"};
        for (int k = 0; k < 4; k++) {
            size_t bytes = numel[g] * (k == 3 ? a->ctx.act_size : sizeof(float));
            if (memcmp(xs[k], ys[k], bytes) != 0) {
                size_t i = 0;
                while (i < numel[g] && ((const float *)xs[k])[i] == ((const float *)ys[k])[i])
                    i++;
                snprintf(why, cap, "group %d %s differ (first near element %zu: %.9g vs %.9g)", g, names[k], i,
                         k < 3 ? (double)((const float *)xs[k])[i] : 0.0, k < 3 ? (double)((const float *)ys[k])[i] : 0.0);
                return false;
            }
        }
    }
    snprintf(why, cap, "identical");
    return true;
}

static void test_splits_match(ferry_engine *ref)
{
    const int splits[] = {1, 2, GROUPS, -1};
    for (size_t c = 0; c < sizeof splits / sizeof splits[0]; c++) {
        ferry_engine *e = make(splits[c]);
        tap_ok(e != NULL, "split %d: setup", splits[c]);
        if (!e)
            continue;
        ferry_status st = train(e, 0, STEPS);
        char why[200];
        bool same = st == FERRY_OK && same_state(ref, e, why, sizeof why);
        int chose = ferry_engine_device_update_groups(e);
        tap_ok(same, "split %d (%d groups on the device): %d steps bitwise the all-CPU run's master weights, "
                     "moments and device weights (%s)",
               splits[c], chose, STEPS, st == FERRY_OK ? why : ferry_last_error());
        if (splits[c] > 0)
            tap_ok(chose == splits[c] && strstr(ferry_engine_describe(e), "split update (forced)"),
                   "forced split %d: %d groups updated on the device, and described: %s", splits[c], chose,
                   ferry_engine_describe(e));
        else
            tap_ok(chose >= 0 && chose <= GROUPS, "auto chose %d groups after its warm-up (0..%d)", chose, GROUPS);
        float *w = malloc(numel[0] * sizeof(float)), *r = malloc(numel[0] * sizeof(float));
        tap_ok(ferry_engine_get_weights(e, 0, w) == FERRY_OK && ferry_engine_get_weights(ref, 0, r) == FERRY_OK &&
                   memcmp(w, r, numel[0] * sizeof(float)) == 0,
               "split %d: ferry_engine_get_weights reads the device's master weights", splits[c]);
        free(w);
        free(r);
        ferry_engine_destroy(e);
    }
}

/* In f32 on the host backend offload none is the optimizer mode's bits
 * (docs/engine.md): so is every split, through the all-CPU run. */
static void test_none(ferry_engine *ref)
{
    if (test_dtype() != FERRY_DTYPE_F32)
        return;
    ferry_engine_config cfg = config(-1);
    cfg.offload = FERRY_OFFLOAD_NONE;
    ferry_engine *e = make_cfg(&cfg);
    bool same = e && train(e, 0, STEPS) == FERRY_OK;
    for (int g = 0; g < GROUPS && same; g++) {
        float *a = malloc(numel[g] * sizeof(float)), *b = malloc(numel[g] * sizeof(float));
        same = a && b && ferry_engine_get_weights(e, g, a) == FERRY_OK && ferry_engine_get_weights(ref, g, b) == FERRY_OK &&
               memcmp(a, b, numel[g] * sizeof(float)) == 0;
        free(a);
        free(b);
    }
    tap_ok(same, "offload none: the same %d steps give the all-CPU (and so every split's) weights, bitwise", STEPS);
    ferry_engine_destroy(e);
}

/* 3 steps split, save, load into a fresh split engine (and into an all-CPU
 * one), 3 more: the 6-step all-CPU run. */
static void test_resume(ferry_engine *ref)
{
    char path[300];
    snprintf(path, sizeof path, "%s/split.ckpt", dir);
    ferry_engine *a = make(2), *b = make(2), *c = make(0);
    if (!a || !b || !c) {
        tap_ok(false, "resume: setup (%s)", ferry_last_error());
        ferry_engine_destroy(a), ferry_engine_destroy(b), ferry_engine_destroy(c);
        return;
    }
    ferry_status st = train(a, 0, 3);
    TAP_IS_STATUS(st == FERRY_OK ? ferry_engine_save(a, path, NULL, 0) : st, FERRY_OK, "resume: save after 3 split steps");
    TAP_IS_STATUS(ferry_engine_load(b, path, NULL, 0, NULL), FERRY_OK, "resume: load into a split engine");
    TAP_IS_STATUS(ferry_engine_load(c, path, NULL, 0, NULL), FERRY_OK, "resume: load into an all-CPU engine");
    char why[200];
    bool sb = train(b, 3, STEPS) == FERRY_OK && same_state(ref, b, why, sizeof why);
    tap_ok(sb, "resume: split, 3 steps + save + load + 3 steps == 6 all-CPU steps, bitwise (%s)", why);
    bool sc = train(c, 3, STEPS) == FERRY_OK && same_state(ref, c, why, sizeof why);
    tap_ok(sc, "resume: the split's checkpoint continued on the CPU == 6 all-CPU steps, bitwise (%s)", why);
    ferry_engine_destroy(a), ferry_engine_destroy(b), ferry_engine_destroy(c);
    unlink(path);
}

static void expect_setup_error(ferry_engine_config *cfg, ferry_status want, const char *words, const char *what)
{
    ferry_engine *e = NULL;
    ferry_status st = ferry_engine_create(cfg, &e);
    if (st == FERRY_OK && (st = add_groups(e)) == FERRY_OK)
        st = ferry_engine_setup(e);
    const char *msg = ferry_last_error();
    tap_ok(st == want && strstr(msg, words) != NULL, "%s: %s (got status %d: %s)", what, words, (int)st, msg);
    ferry_engine_destroy(e);
}

static void test_refusals(void)
{
    size_t total = 0;
    for (int g = 0; g < GROUPS; g++)
        total += numel[g];
    ferry_engine_config cfg = config(GROUPS);
    /* Room for every weight and gradient and the state of the first three
     * groups, not for the last one's 2.4 MB. */
    cfg.device_budget_bytes = total * 2 * dtype_size(test_dtype()) + (1 << 20);
    expect_setup_error(&cfg, FERRY_ERR_OUT_OF_MEMORY, "groups fit", "a forced split beyond the budget fails");
    cfg.device_update_groups = 3;
    ferry_engine *e = make_cfg(&cfg);
    tap_ok(e && ferry_engine_device_update_groups(e) == 3, "the same budget holds a forced split of 3");
    ferry_engine_destroy(e);

    cfg = config(GROUPS + 1);
    expect_setup_error(&cfg, FERRY_ERR_INVALID_ARGUMENT, "parameter groups", "a split of more groups than there are");
    cfg = config(1);
    cfg.delayed_update = 1;
    expect_setup_error(&cfg, FERRY_ERR_INVALID_ARGUMENT, "delayed update", "the split with the delayed update");
    cfg = config(1);
    cfg.offload = FERRY_OFFLOAD_PARAMS;
    expect_setup_error(&cfg, FERRY_ERR_INVALID_ARGUMENT, "offload 'optimizer' only", "the split in params mode");
    cfg = config(1);
    cfg.offload = FERRY_OFFLOAD_NVME;
    cfg.nvme_path = dir;
    expect_setup_error(&cfg, FERRY_ERR_INVALID_ARGUMENT, "NVMe tier", "the split with the NVMe tier");
    cfg = config(1);
    cfg.data_parallel = 1; /* the partitioned paths at world size 1 */
    expect_setup_error(&cfg, FERRY_ERR_INVALID_ARGUMENT, "data parallelism", "the split with data parallelism");
    cfg = config(-2);
    ferry_engine *bad = NULL;
    TAP_IS_STATUS(ferry_engine_create(&cfg, &bad), FERRY_ERR_INVALID_ARGUMENT, "device_update_groups -2 is refused");

    /* Auto where the split is not available: every update stays on the CPU. */
    cfg = config(-1);
    cfg.delayed_update = 1;
    e = make_cfg(&cfg);
    ferry_status st = e ? train(e, 0, 3) : FERRY_ERR_STATE;
    tap_ok(st == FERRY_OK && ferry_engine_device_update_groups(e) == 0,
           "auto with the delayed update keeps every update on the CPU (%d on the device)",
           ferry_engine_device_update_groups(e));
    ferry_engine_destroy(e);
}

/* The device groups' state is the arena's, as optimizer state: what the
 * memory stats (and the trace memprof reads) count. */
/* Bytes the trace at `path` says the device arena gave the optimizer
 * state, by its allocation records (what memprof adds up). */
static uint64_t traced_device_optimizer(const char *path, int *records)
{
    FILE *f = fopen(path, "rb");
    uint64_t sum = 0;
    trace_record r;
    *records = 0;
    if (!f || fseek(f, TRACE_HEADER_SIZE, SEEK_SET) != 0) {
        if (f)
            fclose(f);
        return 0;
    }
    while (fread(&r, sizeof r, 1, f) == 1)
        if (r.kind == TRACE_ALLOC && r.pool == TRACE_POOL_DEVICE && r.category == FERRY_MEM_OPTIMIZER &&
            strstr(r.name, " device ")) {
            sum += r.bytes;
            (*records)++;
        }
    fclose(f);
    return sum;
}

static void test_memory(void)
{
    char trace[300];
    snprintf(trace, sizeof trace, "%s/split.trace", dir);
    ferry_engine_config tc = config(2);
    tc.trace_path = trace;
    ferry_engine *cpu = make(0), *split = make_cfg(&tc);
    ferry_memory_stats a = FERRY_MEMORY_STATS_INIT, b = FERRY_MEMORY_STATS_INIT;
    ferry_status st = cpu && split ? ferry_engine_memory_stats(cpu, &a) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = ferry_engine_memory_stats(split, &b);
    /* master, m, v of groups 0 and 1, each rounded up to the arena's 256 B */
    uint64_t want = 3 * (((numel[0] * 4 + 255) / 256 * 256) + ((numel[1] * 4 + 255) / 256 * 256));
    uint64_t got = b.device_current_bytes[FERRY_MEM_OPTIMIZER] - a.device_current_bytes[FERRY_MEM_OPTIMIZER];
    tap_ok(st == FERRY_OK && got == want,
           "split 2: the device holds %llu more bytes of optimizer state (want %llu: master, m, v of 2 groups)",
           (unsigned long long)got, (unsigned long long)want);
    ferry_engine_destroy(cpu);
    ferry_engine_destroy(split);
    int records = 0;
    uint64_t traced = traced_device_optimizer(trace, &records);
    tap_ok(traced == want && records == 6,
           "and its memory trace records them: %d device optimizer-state allocations, %llu bytes", records,
           (unsigned long long)traced);
    unlink(trace);
}

/* Auto's rule on its own: hand-computed cases. */
static void test_auto_rule(void)
{
    const double even[4] = {0.25, 0.25, 0.25, 0.25};
    /* CPU 40 ms for all, forward 100 ms: with 1 on the device the CPU needs
     * 10, 20, 30 ms by 25, 50, 75 ms of forward: 1 is enough. */
    tap_ok(engine_split_auto_choice(even, 4, 40, 100, 4) == 1, "auto: a fast CPU needs only group 0 on the device");
    /* CPU 400 ms, forward 100: k=2 leaves 100, 200 ms by 50, 75: no; k=3
     * leaves 100 ms by 75: no; k=4 leaves nothing. */
    tap_ok(engine_split_auto_choice(even, 4, 400, 100, 4) == 4, "auto: a slow CPU puts every group on the device");
    tap_ok(engine_split_auto_choice(even, 4, 400, 100, 2) == 2, "auto: never more than fit the budget");
    /* CPU 150, forward 100: k=2 leaves 37.5 by 50, 75 by 75: yes; k=1: 37.5 by 25: no. */
    tap_ok(engine_split_auto_choice(even, 4, 150, 100, 4) == 2, "auto: the smallest split that hides the CPU");
    tap_ok(engine_split_auto_choice(even, 4, 0, 100, 4) == 0, "auto: an update that costs nothing stays on the CPU");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ferry-split-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("Bail out! cannot make a temporary directory\n");
        return 1;
    }
    tap_diag("storage %s", test_dtype_name());
    ferry_engine *ref = make(0);
    if (!ref || train(ref, 0, STEPS) != FERRY_OK) {
        printf("Bail out! the all-CPU reference run failed: %s\n", ferry_last_error());
        return 1;
    }
    tap_ok(ferry_engine_device_update_groups(ref) == 0, "device_update_groups 0: every update on the CPU");
    /* f16: the loss scale backs off from 65536 through the first steps' overflows */
    tap_ok(ferry_engine_steps(ref) >= 2, "the reference took %lld of its %d steps (the rest skipped for overflow)",
           (long long)ferry_engine_steps(ref), STEPS);
    test_auto_rule();
    test_memory();
    test_splits_match(ref);
    test_none(ref);
    test_resume(ref);
    test_refusals();
    ferry_engine_destroy(ref);
    rmdir(dir);
    return tap_done();
}
