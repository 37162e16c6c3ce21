/* Params mode learns the order of fetches in the first step, for any
 * embedder: a model whose backward visits its groups out of order (not the
 * descending order params mode assumes before it knows) trains bitwise as
 * in mode none; from the second step on its fetches find their groups
 * already prefetched (demand fetches fall, no fetch is off the order); a
 * step that leaves the order still trains exactly, and is counted as such
 * (ferry_step_timing.order_misses); several passes in one inference are
 * not. The embedder computes on the calling
 * thread (the host backend): each group is a vector pulled towards a target,
 * loss sum (w - t)^2, so its gradient is 2 (w - t). Runs in f32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/intree.h"
#include "tap.h"

enum { G = 10, N = 16384, STEPS = 8, ODD_STEP = 5, INFER_STEP = 3 };

/* The order backward visits the groups: not descending, not ascending. */
static const int back_order[G] = {4, 9, 1, 7, 0, 5, 8, 2, 6, 3};
static const int odd_order[G] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};

typedef struct run_out {
    float *weights; /* every group's, concatenated */
    int demand[STEPS], misses[STEPS];
    uint64_t peak, budget;
} run_out;

static float target(int g, size_t i) { return (float)((int)((g * 31 + (int)i * 7) % 17) - 8) * 0.125f; }

static ferry_status pass(ferry_engine *e, int step)
{
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    void *w = NULL, *dw = NULL;
    for (int g = 0; g < G && st == FERRY_OK; g++) { /* forward: the loss, ascending */
        if ((st = ferry_engine_fetch(e, g, FERRY_PHASE_FORWARD, &w)) == FERRY_OK)
            st = ferry_engine_synchronize(e);
        if (st == FERRY_OK)
            st = ferry_engine_release(e, g, FERRY_PHASE_FORWARD);
    }
    const int *order = step == ODD_STEP ? odd_order : back_order;
    for (int k = 0; k < G && st == FERRY_OK; k++) {
        int g = order[k];
        if ((st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w)) == FERRY_OK &&
            (st = ferry_engine_grads(e, g, &dw)) == FERRY_OK)
            st = ferry_engine_synchronize(e);
        for (size_t i = 0; i < N && st == FERRY_OK; i++)
            ((float *)dw)[i] += 2.0f * (((const float *)w)[i] - target(g, i));
        if (st == FERRY_OK)
            st = ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
    }
    return st;
}

/* Between steps, three forward passes in one inference (as sampling runs
 * one a token): each starts the record's forward anew, off it nowhere. */
static ferry_status infer(ferry_engine *e)
{
    ferry_status st = ferry_engine_begin_inference(e);
    void *w = NULL;
    for (int k = 0; k < 3 * G && st == FERRY_OK; k++)
        if ((st = ferry_engine_fetch(e, k % G, FERRY_PHASE_FORWARD, &w)) == FERRY_OK)
            st = ferry_engine_release(e, k % G, FERRY_PHASE_FORWARD);
    ferry_status end = ferry_engine_end_inference(e);
    return st == FERRY_OK ? end : st;
}

/* budget 0: what the device has free (every group stays). */
static ferry_status run(ferry_offload mode, uint64_t budget, run_out *out)
{
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.offload = mode;
    cfg.prefetch_groups = 1;
    cfg.device_budget_bytes = budget;
    cfg.optimizer_threads = 2;
    cfg.dtype = FERRY_DTYPE_F32;
    ferry_engine *e = NULL;
    float *init = malloc(N * sizeof(float));
    ferry_status st = init ? ferry_engine_create(&cfg, &e) : FERRY_ERR_OUT_OF_MEMORY;
    for (int g = 0; g < G && st == FERRY_OK; g++) {
        for (size_t i = 0; i < N; i++)
            init[i] = (float)(((g + 3) * 7919 + (int)i * 104729) % 2001 - 1000) * 1e-3f;
        char name[32];
        snprintf(name, sizeof name, "group %d", g);
        st = ferry_engine_add_group(e, name, N, init, NULL, NULL);
    }
    free(init);
    if (st == FERRY_OK)
        st = ferry_engine_setup(e);
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 1e-2f;
    o.weight_decay = 0.01f;
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        ferry_step_timing t = FERRY_STEP_TIMING_INIT;
        if (step == INFER_STEP)
            st = infer(e);
        if (st == FERRY_OK && (st = pass(e, step)) == FERRY_OK && (st = ferry_engine_step(e, &o, NULL)) == FERRY_OK)
            st = ferry_engine_step_timing(e, &t);
        out->demand[step] = t.demand_fetches;
        out->misses[step] = t.order_misses;
    }
    out->weights = malloc((size_t)G * N * sizeof(float));
    if (st == FERRY_OK && !out->weights)
        st = FERRY_ERR_OUT_OF_MEMORY;
    for (int g = 0; g < G && st == FERRY_OK; g++)
        st = ferry_engine_get_weights(e, g, out->weights + (size_t)g * N);
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (st == FERRY_OK)
        st = ferry_engine_memory_stats(e, &ms);
    out->peak = ms.device_total_peak_bytes;
    out->budget = ms.device_budget_bytes;
    if (st != FERRY_OK)
        tap_diag("%s: %s", ferry_offload_name(mode), ferry_last_error());
    ferry_engine_destroy(e);
    return st;
}

int main(void)
{
    run_out none = {0}, params = {0};
    /* The budget params mode is planned for at prefetch 1: a window of
     * three groups' weights and four groups' gradients, nothing kept past it. */
    size_t numel[G];
    for (int g = 0; g < G; g++)
        numel[g] = N;
    engine_plan_request rq = {.backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_F32,
                              .offload = FERRY_OFFLOAD_PARAMS, .prefetch_groups = 1, .micro_batches = 1,
                              .group_numel = numel, .ngroups = G, .disk = false, .disk_master = false,
                              .disk_window_bytes = 0, .disk_block_bytes = 0, .ranks = 1, .device_budget = 0,
                              .embedder_bytes = 0};
    engine_memory_plan p;
    uint64_t budget = 0;
    if (engine_plan_memory(&rq, &p) == FERRY_OK)
        for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
            budget += p.device_bytes[c];
    tap_ok(budget > 0 && p.device_weight_groups == 3, "planned: %llu bytes, %d groups' weights at once",
           (unsigned long long)budget, p.device_weight_groups);
    TAP_IS_STATUS(run(FERRY_OFFLOAD_NONE, 0, &none), FERRY_OK, "mode none trains the out-of-order model");
    TAP_IS_STATUS(run(FERRY_OFFLOAD_PARAMS, budget, &params), FERRY_OK,
                  "params mode trains it in its planned budget");
    size_t diff = 0;
    for (size_t i = 0; none.weights && params.weights && i < (size_t)G * N; i++)
        diff += memcmp(&none.weights[i], &params.weights[i], sizeof(float)) != 0;
    tap_ok(none.weights && params.weights && diff == 0,
           "params mode, backward out of order (and one step in yet another order): the weights bitwise "
           "mode none's (%zu of %d differ)", diff, G * N);
    tap_ok(params.peak <= params.budget, "the device peak %llu stays inside the budget %llu",
           (unsigned long long)params.peak, (unsigned long long)params.budget);
    tap_diag("demand fetches a step: %d %d %d %d %d %d %d %d; off the order: %d %d %d %d %d %d %d %d",
             params.demand[0], params.demand[1], params.demand[2], params.demand[3], params.demand[4],
             params.demand[5], params.demand[6], params.demand[7], params.misses[0], params.misses[1],
             params.misses[2], params.misses[3], params.misses[4], params.misses[5], params.misses[6],
             params.misses[7]);
    /* The first step prefetches in the assumed order: backward's guesses
     * are wrong, and nearly every backward fetch waits for its group. */
    tap_ok(params.demand[0] >= G / 2, "step 1, the order assumed: %d fetches found their group absent",
           params.demand[0]);
    int learned = 1, worst = 0;
    for (int s = 1; s < STEPS; s++)
        if (s != ODD_STEP) {
            learned &= params.misses[s] == 0;
            if (s != INFER_STEP) /* its figures count the inference's fetches too */
                worst = params.demand[s] > worst ? params.demand[s] : worst;
        }
    tap_ok(learned, "from step 2 on, no fetch is off the order the first step recorded (three forward passes of "
           "an inference before step %d included)", INFER_STEP + 1);
    tap_ok(worst <= 2 && worst < params.demand[0] / 4,
           "and at most %d fetches a step find their group absent (the first of each phase), against %d "
           "in step 1", worst, params.demand[0]);
    tap_ok(params.misses[ODD_STEP] >= G / 2, "the step whose backward runs in another order is counted: %d "
           "fetches off the order", params.misses[ODD_STEP]);
    free(none.weights);
    free(params.weights);
    return tap_done();
}
