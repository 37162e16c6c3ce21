/* tools/bench/dp/bench_ledger.c: what the collective ledger and the
 * watchdog's bookkeeping cost one data-parallel step. Run it under
 * `mpirun -np N` (alone it trains through the collectives at world size 1,
 * data_parallel 1, where no watchdog runs). In the same run it measures:
 *   - the step: GPT-2 as tools/bench/dp/bench_dp.sh trains it (4 layers x
 *     256 wide, vocabulary 2000, micro-batch 4 x 128 per rank, optimizer
 *     offload, host backend, one optimizer thread): the median step time of
 *     20 steps after 3 of warm-up, and the collectives each step writes in
 *     the ledger (the ledger's count before and after);
 *   - per collective, what the ledger and the watchdog add to it whatever
 *     its size: the fold into the hash and the ring (comm_ledger_write), the
 *     words naming it (comm_entry_describe, the watchdog's and the ledger's
 *     messages), the watchdog's list (comm_watch_begin and _end): the median
 *     of 5 rounds of 100000, in ns;
 *   - per step, the comparison: comm_ledger_words before the step's
 *     all-reduce and comm_ledger_verify after it (8 doubles of arithmetic;
 *     the all-reduce carrying them is the step's own);
 * and prints their cost per step (collectives x per collective +
 * comparison) and its ratio to the step. The watchdog's thread, which
 * wakes a few times per FERRY_COMM_TIMEOUT to send a heartbeat, is off the
 * step's path and not counted. Every rank writes the same entries, so the
 * ledgers stay alike. Rank 0 prints. Drives the engine, owns nothing of it.
 * Exit status: 0, or 1 when the engine fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/comm.h"
#include "backend/comm_impl.h"
#include "common/clock.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"

enum { B = 4, T = 128, WARMUP = 3, STEPS = 20, ROUNDS = 5, CALLS = 100000 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Median step time (ms) and collectives per step of the bench_dp model. */
static ferry_status train(int rank, double *step_ms, double *per_step)
{
    gpt2_config cfg;
    gpt2_model *m = NULL;
    ferry_engine *e = NULL;
    gpt2_activations *act = NULL;
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = FERRY_OFFLOAD_OPTIMIZER;
    c.optimizer_threads = 1;
    c.dtype = FERRY_DTYPE_F32;
    c.data_parallel = 1;
    ferry_status st = gpt2_config_from_fields(4, 4, 256, 2000, 0, T, &cfg);
    if (st == FERRY_OK) st = gpt2_create(&cfg, &m);
    if (st == FERRY_OK) st = ferry_engine_create(&c, &e);
    if (st == FERRY_OK) st = gpt2_engine_add_groups(m, e, 1234, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    gpt2_allocator alloc = e ? gpt2_engine_allocator(e) : (gpt2_allocator){0};
    if (st == FERRY_OK) st = gpt2_activations_create(m, engine_embed_backend(e), B, T, false, &alloc, &act);
    gpt2_hooks hooks = e ? gpt2_engine_hooks(e) : (gpt2_hooks){0};
    backend_stream *s = e ? engine_embed_stream(e) : NULL;
    int32_t tokens[B * T], targets[B * T];
    double times[STEPS];
    uint64_t before = 0, after = 0;
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 1e-3f;
    for (int step = 0; step < WARMUP + STEPS && st == FERRY_OK; step++) {
        for (int i = 0; i < B * T; i++)
            tokens[i] = (int32_t)(((size_t)i * 7919 + (size_t)(step * 4 + rank) * 31) % 2000);
        for (int i = 0; i < B * T; i++)
            targets[i] = tokens[(i + 1) % (B * T)];
        if (step == WARMUP)
            comm_ledger_state(&before, NULL);
        double t0 = clock_now_ms();
        float loss = 0;
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        st = ferry_engine_begin_micro_batch(e, 0, 1);
        if (st == FERRY_OK) st = gpt2_forward(m, act, &hooks, s, tokens, targets, true);
        if (st == FERRY_OK) st = gpt2_backward(m, act, &hooks, s, 1.0f);
        if (st == FERRY_OK) st = gpt2_loss(act, s, &loss);
        if (st == FERRY_OK) st = ferry_engine_step(e, &o, &rep);
        if (st == FERRY_OK) st = ferry_engine_synchronize(e);
        if (step >= WARMUP)
            times[step - WARMUP] = clock_now_ms() - t0;
    }
    comm_ledger_state(&after, NULL);
    if (st == FERRY_OK) {
        *step_ms = median(times, STEPS);
        *per_step = (double)(after - before) / STEPS;
    } else
        fprintf(stderr, "bench_ledger: rank %d: %s\n", rank, ferry_last_error());
    gpt2_activations_destroy(act);
    ferry_engine_destroy(e);
    gpt2_destroy(m);
    return st;
}

/* Median ns per collective of the ledger's and the watchdog's bookkeeping. */
static void per_collective(double *ledger_ns, double *watch_ns)
{
    double l[ROUNDS], w[ROUNDS];
    char what[200];
    static comm_watch_item item;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = clock_now_ms();
        for (int i = 0; i < CALLS; i++) {
            comm_entry e = comm_ledger_write("gradients", COMM_OP_REDUCE_SCATTER, i % 50, 1179648, FERRY_DTYPE_F32, -1);
            comm_entry_describe(&e, what, sizeof what);
        }
        double t1 = clock_now_ms();
        for (int i = 0; i < CALLS; i++) {
            comm_watch_begin(&item, what);
            comm_watch_end(&item);
        }
        double t2 = clock_now_ms();
        l[r] = (t1 - t0) * 1e6 / CALLS;
        w[r] = (t2 - t1) * 1e6 / CALLS;
    }
    *ledger_ns = median(l, ROUNDS);
    *watch_ns = median(w, ROUNDS);
}

/* Median ns of one comparison's arithmetic (words, then verify of the sum
 * every rank alike would give). */
static double comparison_ns(int world)
{
    double v[ROUNDS], words[COMM_LEDGER_WORDS], summed[COMM_LEDGER_WORDS];
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = clock_now_ms();
        for (int i = 0; i < CALLS; i++) {
            comm_ledger_words(words);
            for (int k = 0; k < COMM_LEDGER_WORDS; k++)
                summed[k] = words[k] * world;
            if (comm_ledger_verify(summed) != FERRY_OK)
                return -1;
        }
        v[r] = (clock_now_ms() - t0) * 1e6 / CALLS;
    }
    return median(v, ROUNDS);
}

int main(void)
{
    ferry_world_info w = FERRY_WORLD_INFO_INIT;
    if (ferry_world_join(&w) != FERRY_OK) {
        fprintf(stderr, "bench_ledger: joining the world: %s\n", ferry_last_error());
        return 1;
    }
    double step_ms = 0, per_step = 0, ledger_ns = 0, watch_ns = 0;
    if (train(w.rank, &step_ms, &per_step) != FERRY_OK) {
        ferry_world_abort("its training failed");
        return 1;
    }
    per_collective(&ledger_ns, &watch_ns);
    double cmp_ns = comparison_ns(w.world_size);
    ferry_world_barrier();
    if (w.rank == 0) {
        double cost_us = (per_step * (ledger_ns + watch_ns) + cmp_ns) / 1e3;
        printf("world %d (%s), GPT-2 4 layers x 256, micro-batch %d x %d per rank, offload optimizer, host backend\n",
               w.world_size, w.launcher, B, T);
        printf("step: %.2f ms (median of %d), %.0f collectives per step\n", step_ms, STEPS, per_step);
        printf("per collective: ledger %.0f ns (its fold and its words), watchdog %.0f ns%s; per step: comparison %.0f ns\n",
               ledger_ns, watch_ns, w.world_size > 1 ? "" : " (no watchdog alone: its list is not kept)",
               cmp_ns);
        printf("ledger and watchdog: %.1f us per step, %.5f of the step\n", cost_us, cost_us / (step_ms * 1e3));
    }
    ferry_world_leave();
    return 0;
}
