/* Data parallelism on the host backend, run by mpirun -np N. In every
 * offload mode (and with the delayed update), N ranks each taking one
 * micro-batch of B sequences must train bitwise as one process taking the
 * same N micro-batches as gradient accumulation: the same loss for every
 * micro-batch, the same final weights, the same gradient norms. The host
 * backend sums across ranks in rank order, the order in which one process
 * adds its micro-batches, so this holds at every N (2, 3 and 4 in CI), not
 * only at 2 where a sum of two values has one order. A checkpoint saved by
 * the N ranks continues exactly in one process, and one saved by one
 * process continues exactly in the N ranks. Each rank holds 1/N of the host
 * state: its pool bytes are those of its slots, counted here from the
 * layout rule. The reference runs on rank 0, data parallelism off.
 *
 * A step dropped between its micro-batches (ferry_engine_abandon_step, a
 * signal's stop) by every rank after the same micro-batch leaves the
 * collectives paired and the run bitwise as if the step had never begun.
 *
 * The same holds with compact Adam moments (bf16, stochastically rounded
 * by the element's global index, and 8bit, quantized per block of 256):
 * each rank updates its slot in the compact layout, and a checkpoint saved
 * by the N ranks is the file one process writes, which resumes at any
 * world size, and one of another form is converted by each rank for its
 * part, as one process converts the whole.
 *
 * The upload window (on by default with compact moments) converts each
 * rank's slot from its master weights as it goes up: with it on or off
 * the ranks train as the one process, and each rank's pool holds the ring
 * in place of its slot's upload copy.
 *
 * Runs in f32, and in bf16 storage with FERRY_TEST_DTYPE=bf16. Only rank 0
 * writes TAP; every rank's own checks are summed across ranks and reported
 * there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/numerics.h"
#include "engine/intree.h"
#include "backend/comm.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "models/gpt2_plan.h"
#include "offload/pool.h"
#include "engine_fixture.h"
#include "tap.h"
#include "token_batches.h"
#include "test_dtype.h"
#include "tests/test_files.h"

enum { STEPS = 6, HALF = 3, B = 2, T = 32, MAXR = 8 };

static gpt2_config model;
static const uint64_t SEED = 4321;
static int rank, world;
static ferry_moments moments = FERRY_MOMENTS_F32; /* of the runs being made */
static int upload_window = FERRY_UPLOAD_WINDOW_AUTO; /* of the runs being made */
/* run(), with several ranks: in this step every rank first takes its first
 * micro-batch and drops the step (ferry_engine_abandon_step), then takes
 * the step whole; -1: never. */
static int abandon_in_step = -1;

typedef struct run_result {
    float loss[STEPS][MAXR];   /* every micro-batch's loss */
    double norm[STEPS];        /* the step's global gradient norm */
    float *weights;            /* every group's master weights, concatenated */
    size_t nweights;
    uint64_t host_bytes;       /* this rank's pinned pool in use */
    uint64_t expected_host;    /* what its slots should take */
    uint64_t device_peak;
    double comm_bytes;
    uint64_t load_read;        /* bytes this process read while loading (rchar of /proc/self/io) */
} run_result;

typedef struct run_opts {
    ferry_offload mode;
    int delayed;
    int prefetch;
    int parallel;      /* 1: this rank trains micro-batch `rank` with the others; -1: alone, all micro-batches */
    const char *load;  /* continue from this checkpoint; NULL: from the seed */
    int first, last;   /* steps [first, last) */
    const char *save;  /* save after the last step, when not NULL */
    int per_rank;      /* micro-batches per rank (0: 1); alone, world x that */
    const char *resave; /* save right after the load, when not NULL: the state loaded */
} run_opts;

/* The bytes this process has read through read(2) and its kind (rchar in
 * /proc/self/io), every thread's; UINT64_MAX where the kernel does not say. */
static uint64_t bytes_read(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    unsigned long long v = 0;
    int got = f ? fscanf(f, "rchar: %llu", &v) : 0;
    if (f)
        fclose(f);
    return got == 1 ? (uint64_t)v : UINT64_MAX;
}

/* Deterministic text-like tokens of micro-batch `micro` at `step`. */
static void batch_tokens(int step, int micro, int32_t *tokens, int32_t *targets)
{
    static const token_recipe recipe = {991, 7919, 104729, 11, 3, 1, 113, 4};
    token_batch(&recipe, step, micro, B * T, model.vocab_size, tokens, targets);
}

static ferry_step_options step_options(void)
{
    return efix_options(2e-3f, 0.05f, 0.5f); /* clips: the global norm must be the same everywhere */
}

/* Host pool bytes of one rank's slots: the layout rule, not the engine's
 * code. With the upload window (by default with compact moments) the
 * upload copy is a ring of one chunk the size of the largest group (the
 * chunks are 16 MiB; this model's groups are far smaller). */
static uint64_t expected_host_bytes(const gpt2_model *m, ferry_offload mode, int n)
{
    if (mode == FERRY_OFFLOAD_NONE)
        return 0;
    size_t act = test_dtype() == FERRY_DTYPE_BF16 ? 2 : 4, largest = 0;
    bool ring = upload_window == FERRY_UPLOAD_WINDOW_ON ||
                (upload_window == FERRY_UPLOAD_WINDOW_AUTO && moments != FERRY_MOMENTS_F32);
    uint64_t sum = 0;
    for (int g = 0; g < gpt2_num_groups(m); g++) {
        largest = gpt2_group_numel(m, g) > largest ? gpt2_group_numel(m, g) : largest;
        size_t tiles = (gpt2_group_numel(m, g) + NUMERICS_TILE - 1) / NUMERICS_TILE;
        size_t slot = (tiles + (size_t)n - 1) / (size_t)n * NUMERICS_TILE;
        /* m and v: 4 bytes an element, bf16 2, 8bit 1 and an fp32 absmax per 256 */
        size_t mv = moments == FERRY_MOMENTS_F32 ? slot * 4 : moments == FERRY_MOMENTS_BF16 ? slot * 2
                                                                                          : slot + slot / 256 * 4;
        /* master, m, v, the summed gradients (fp32), the upload copy (storage type) */
        sum += 2 * pool_charge(slot * 4) + 2 * pool_charge(mv) + (ring ? 0 : pool_charge(slot * act));
    }
    return sum + (ring ? pool_charge(largest * act) : 0);
}

/* An engine on the host backend for this test's model in `mode`. */
static ferry_engine_config config(ferry_offload mode, int parallel)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, mode, test_dtype(), 1);
    cfg.data_parallel = parallel;
    cfg.moments = moments;
    cfg.moments_seed = 77;
    cfg.upload_window = upload_window;
    return cfg;
}

static ferry_status run(const run_opts *ro, run_result *out)
{
    ferry_engine_config cfg = config(ro->mode, ro->parallel);
    cfg.delayed_update = ro->delayed;
    cfg.prefetch_groups = ro->prefetch;
    int per = ro->per_rank > 0 ? ro->per_rank : 1, micro = ro->parallel == 1 ? per : world * per, scale = world * per;
    int first = ro->parallel == 1 ? rank * per : 0; /* the global index of this process's first micro-batch */
    efix f;
    ferry_status st = efix_engine(&f, &model, &cfg, SEED, B, T, false);
    uint64_t before = bytes_read();
    if (st == FERRY_OK && ro->load) st = ferry_engine_load(f.e, ro->load, NULL, 0, NULL);
    uint64_t after = bytes_read();
    out->load_read = before == UINT64_MAX || after == UINT64_MAX ? UINT64_MAX : after - before;
    if (st == FERRY_OK && ro->resave) st = ferry_engine_save(f.e, ro->resave, NULL, 0);
    if (st == FERRY_OK) st = efix_acts(&f);
    ferry_step_options o = step_options();
    for (int step = ro->first; step < ro->last && st == FERRY_OK; step++) {
        double losses[MAXR] = {0};
        if (step == abandon_in_step && ro->parallel == 1) {
            float dropped = 0;
            batch_tokens(step, first, f.tokens, f.targets);
            st = efix_micro_batch(&f, 0, micro, 1.0f / (float)scale, &dropped);
            if (st == FERRY_OK) st = ferry_engine_abandon_step(f.e);
        }
        float got[MAXR] = {0};
        if (st == FERRY_OK) st = efix_micro_batches(&f, batch_tokens, step, first, micro, 1.0f / (float)scale, got, NULL);
        for (int k = 0; k < micro; k++)
            losses[first + k] = got[k];
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, &rep);
        /* every rank's losses, each at its micro-batch (x + 0 = x) */
        if (st == FERRY_OK && ro->parallel == 1) st = ferry_world_all_reduce(losses, (size_t)(world * per));
        for (int k = 0; k < world * per; k++)
            out->loss[step][k] = (float)losses[k];
        out->norm[step] = rep.grad_norm;
    }
    if (st == FERRY_OK && ro->save) st = ferry_engine_save(f.e, ro->save, NULL, 0);
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->weights, &out->nweights);
    if (st == FERRY_OK) {
        ferry_memory_stats ms = efix_memory(&f);
        out->host_bytes = ms.host_in_use_bytes;
        out->device_peak = ms.device_total_peak_bytes;
        out->expected_host = expected_host_bytes(f.m, ro->mode, ro->parallel == 1 ? world : 1);
        out->comm_bytes = efix_timing(&f).comm_bytes;
    }
    if (st != FERRY_OK)
        fprintf(stderr, "rank %d: run failed: %s\n", rank, ferry_last_error());
    efix_close(&f);
    return st;
}

static void compare(const run_result *got, const run_result *ref, int from, const char *what)
{
    int bad = -1, badk = 0;
    for (int s = from; s < STEPS && bad < 0; s++)
        for (int k = 0; k < world && bad < 0; k++)
            if (memcmp(&got->loss[s][k], &ref->loss[s][k], sizeof(float)) != 0 ||
                memcmp(&got->norm[s], &ref->norm[s], sizeof(double)) != 0) {
                bad = s;
                badk = k;
            }
    if (!tap_ok(bad < 0, "%s: every micro-batch's loss and every step's gradient norm bitwise equal (last loss %.7f)",
                what, (double)got->loss[STEPS - 1][0]))
        tap_diag("  step %d micro-batch %d: loss %.9g vs %.9g, norm %.17g vs %.17g", bad, badk,
                 (double)got->loss[bad][badk], (double)ref->loss[bad][badk], got->norm[bad], ref->norm[bad]);
    efix_same_weights(got->weights, got->nweights, ref->weights, ref->nweights, what);
}

static void free_result(run_result *r)
{
    free(r->weights);
    memset(r, 0, sizeof *r);
}

/* One mode: N ranks against one process with N micro-batches. */
static void test_mode(ferry_offload mode, int delayed, int prefetch)
{
    char what[96];
    snprintf(what, sizeof what, "%d ranks, offload %s%s%s%s%s%s", world, ferry_offload_name(mode),
             delayed ? ", delayed update" : "", mode == FERRY_OFFLOAD_PARAMS && prefetch ? ", prefetch 1" : "",
             moments != FERRY_MOMENTS_F32 ? ", moments " : "", moments != FERRY_MOMENTS_F32 ? ferry_moments_name(moments) : "",
             upload_window == FERRY_UPLOAD_WINDOW_ON ? ", upload window on"
             : upload_window == FERRY_UPLOAD_WINDOW_OFF ? ", upload window off" : "");
    run_result dp = {0}, ref = {0};
    run_opts o = {mode, delayed, prefetch, 1, NULL, 0, STEPS, NULL, 1, NULL};
    ferry_status st = run(&o, &dp);
    int ran = efix_ranks_ok(st == FERRY_OK);
    int host_ok = efix_ranks_ok(dp.host_bytes == dp.expected_host);
    uint64_t host_max = dp.host_bytes;
    if (rank == 0) {
        tap_ok(ran == world, "%s: all %d ranks trained (%d did)", what, world, ran);
        run_opts r = {mode, delayed, prefetch, -1, NULL, 0, STEPS, NULL, 1, NULL};
        tap_ok(run(&r, &ref) == FERRY_OK, "%s: the one-process reference with %d micro-batches ran", what, world);
        compare(&dp, &ref, 0, what);
        if (mode != FERRY_OFFLOAD_NONE)
            tap_ok(host_ok == world, "%s: each rank's host pool holds its 1/%d slots: %llu bytes on rank 0 (the "
                   "layout rule says %llu; one process holds %llu)",
                   what, world, (unsigned long long)host_max, (unsigned long long)dp.expected_host,
                   (unsigned long long)ref.host_bytes);
        tap_ok(world == 1 || dp.comm_bytes > 0, "%s: the step sent %.0f bytes through collectives", what, dp.comm_bytes);
        /* memprof plan --ranks N predicts rank 0's memory (a world of one
         * through the collectives is a test of the paths, not a plan) */
        gpt2_plan p;
        /* The runs' budget is the free memory: params mode keeps every group. */
        gpt2_plan_request rq = {.cfg = &model, .batch = B, .seq = T, .offload = mode, .recompute = false,
                                .prefetch_groups = prefetch, .micro_batches = 1, .backend = FERRY_BACKEND_HOST,
                                .dtype = test_dtype(), .ranks = world, .device_budget = (uint64_t)1 << 40,
                                .moments = moments, .upload_window = upload_window};
        ferry_status planned = world > 1 ? gpt2_plan_predict(&rq, &p) : FERRY_ERR_STATE;
        if (world > 1 && tap_ok(planned == FERRY_OK, "%s: memory planned for %d ranks %s", what, world,
                                planned == FERRY_OK ? "" : ferry_last_error())) {
            tap_ok(p.host_total == dp.host_bytes, "%s: the plan for %d ranks predicts rank 0's host pool: %llu bytes "
                   "(measured %llu)", what, world, (unsigned long long)p.host_total,
                   (unsigned long long)dp.host_bytes);
            double r = (double)dp.device_peak / (double)p.device_total;
            tap_ok(mode == FERRY_OFFLOAD_PARAMS ? r <= 1.0 && r > 0.5 : r <= 1.0 && r > 0.95,
                   "%s: ... and bounds its device peak: %llu measured, %llu planned (%.1f%%)", what,
                   (unsigned long long)dp.device_peak, (unsigned long long)p.device_total, 100 * r);
        }
    }
    free_result(&dp);
    free_result(&ref);
}

/* Several micro-batches per rank: the ranks' sums are added to each other,
 * not one micro-batch after another, so one process with all of them is
 * matched up to fp32 reassociation, not bitwise. Each micro-batch's loss
 * is still the same (same weights), so the first step is; after it the
 * losses stay within 1e-5 and the weights within 1e-4 (one dropped or
 * doubled micro-batch moves them by far more). */
static void test_accumulation(ferry_offload mode)
{
    char what[96];
    snprintf(what, sizeof what, "%d ranks x 2 micro-batches, offload %s", world, ferry_offload_name(mode));
    run_result dp = {0}, ref = {0};
    run_opts o = {mode, 0, 2, 1, NULL, 0, STEPS, NULL, 2, NULL};
    int ran = efix_ranks_ok(run(&o, &dp) == FERRY_OK);
    if (rank == 0) {
        run_opts r = {mode, 0, 2, -1, NULL, 0, STEPS, NULL, 2, NULL};
        tap_ok(ran == world && run(&r, &ref) == FERRY_OK, "%s: ran, and one process with %d micro-batches", what,
               2 * world);
        double worst_loss = 0, worst_w = 0;
        bool first_equal = true;
        for (int k = 0; k < 2 * world; k++) {
            first_equal &= memcmp(&dp.loss[0][k], &ref.loss[0][k], sizeof(float)) == 0;
            for (int s = 0; s < STEPS; s++) {
                double d = fabs((double)dp.loss[s][k] - ref.loss[s][k]) / fabs((double)ref.loss[s][k]);
                worst_loss = d > worst_loss ? d : worst_loss;
            }
        }
        for (size_t i = 0; dp.weights && ref.weights && i < dp.nweights; i++) {
            double d = fabs((double)dp.weights[i] - ref.weights[i]);
            worst_w = d > worst_w ? d : worst_w;
        }
        tap_ok(first_equal, "%s: the first step's micro-batch losses bitwise equal", what);
        tap_ok(dp.weights && ref.weights && worst_loss < 1e-5 && worst_w < 1e-4,
               "%s: losses within %.2g relative, weights within %.2g (bounds 1e-5, 1e-4)", what, worst_loss, worst_w);
    }
    free_result(&dp);
    free_result(&ref);
}

/* Every rank drops step 2 after the first of its 2 micro-batches, then
 * takes it whole: the same losses, norms and weights, bit for bit, as the
 * ranks that never dropped it. What the dropped micro-batch put in flight
 * (its reduce-scatters or all-reduce sums, the drains, the CPU's sums) is
 * finished and discarded on every rank alike. */
static void test_abandon(ferry_offload mode, int delayed)
{
    char what[112];
    snprintf(what, sizeof what, "%d ranks x 2 micro-batches, offload %s%s, step 2 dropped after 1 and taken again",
             world, ferry_offload_name(mode), delayed ? ", delayed update" : "");
    run_result cut = {0}, whole = {0};
    run_opts o = {mode, delayed, 2, 1, NULL, 0, STEPS, NULL, 2, NULL};
    int ran = efix_ranks_ok(run(&o, &whole) == FERRY_OK);
    abandon_in_step = 2;
    ran += efix_ranks_ok(run(&o, &cut) == FERRY_OK);
    abandon_in_step = -1;
    if (rank == 0) {
        tap_ok(ran == 2 * world, "%s: ran on every rank, with and without the drop", what);
        compare(&cut, &whole, 0, what);
    }
    free_result(&cut);
    free_result(&whole);
}

/* A non-finite gradient on one rank only: every rank skips the step (the
 * flags are all-reduced), reports the same bad group, and keeps its
 * weights; the next step trains again everywhere. The last rank writes a
 * NaN into group 1's gradient just before its backward release. */
typedef struct poison {
    gpt2_hooks inner; /* first: the forwarders below take the wrapper as it */
    ferry_engine *e;
    bool armed;
} poison;

/* The acquires of a wrapper whose first member is the engine's hooks,
 * passed through (the poison and swap wrappers change releases only). */
static ferry_status forward_acquire_params(void *ctx, int g, ferry_phase ph, backend_stream *s, const act_t **p)
{
    const gpt2_hooks *inner = ctx;
    return inner->acquire_params(inner->ctx, g, ph, s, p);
}

static ferry_status forward_acquire_grads(void *ctx, int g, backend_stream *s, act_t **grads)
{
    const gpt2_hooks *inner = ctx;
    return inner->acquire_grads(inner->ctx, g, s, grads);
}

static ferry_status poison_release(void *ctx, int g, ferry_phase ph, backend_stream *s)
{
    poison *x = ctx;
    if (x->armed && g == 1 && ph == FERRY_PHASE_BACKWARD) {
        void *grads = NULL;
        ferry_status st = ferry_engine_synchronize(x->e);
        if (st == FERRY_OK) st = ferry_engine_grads(x->e, g, &grads);
        if (st != FERRY_OK)
            return st;
        if (test_dtype() == FERRY_DTYPE_BF16)
            ((uint16_t *)grads)[7] = 0x7fc0; /* a bf16 NaN */
        else
            ((float *)grads)[7] = NAN;
    }
    return x->inner.release(x->inner.ctx, g, ph, s);
}

static void test_skip_agreed(ferry_offload mode)
{
    ferry_engine_config cfg = config(mode, 1);
    efix f;
    ferry_status st = efix_start(&f, &model, &cfg, SEED, B, T, false);
    poison px = {f.hooks, f.e, false};
    f.hooks = (gpt2_hooks){&px, forward_acquire_params, forward_acquire_grads, poison_release};
    ferry_step_options o = step_options();
    size_t n = f.m ? gpt2_group_numel(f.m, 1) : 1;
    float *before = malloc(n * sizeof(float)), *after = malloc(n * sizeof(float));
    ferry_step_report rep[2] = {FERRY_STEP_REPORT_INIT, FERRY_STEP_REPORT_INIT};
    if (st == FERRY_OK && (!before || !after))
        st = FERRY_ERR_OUT_OF_MEMORY;
    if (st == FERRY_OK) st = ferry_engine_get_weights(f.e, 1, before);
    for (int step = 0; step < 2 && st == FERRY_OK; step++) {
        px.armed = step == 0 && rank == world - 1;
        st = efix_micro_batches(&f, batch_tokens, step, rank, 1, 1.0f / (float)world, NULL, NULL);
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, &rep[step]);
        if (step == 0 && st == FERRY_OK) st = ferry_engine_get_weights(f.e, 1, after);
    }
    if (st != FERRY_OK)
        fprintf(stderr, "rank %d: %s\n", rank, ferry_last_error());
    bool kept = st == FERRY_OK && memcmp(before, after, n * sizeof(float)) == 0;
    int ran = efix_ranks_ok(st == FERRY_OK), skipped = efix_ranks_ok(rep[0].skipped && rep[0].bad_group == 1),
        untouched = efix_ranks_ok(kept), trained = efix_ranks_ok(!rep[1].skipped && rep[1].step == 1);
    if (rank == 0) {
        const char *name = ferry_offload_name(mode);
        tap_ok(ran == world, "offload %s: a NaN in rank %d's gradient only: all %d ranks ran", name, world - 1, world);
        tap_ok(skipped == world, "offload %s: ... every rank skipped the step and named group 1 (%d of %d did)", name,
               skipped, world);
        tap_ok(untouched == world, "offload %s: ... every rank's weights are untouched (%d of %d)", name, untouched,
               world);
        tap_ok(trained == world, "offload %s: ... and the next step trains on every rank (%d of %d)", name, trained,
               world);
    }
    free(before);
    free(after);
    efix_close(&f);
}

/* A planted divergence: the last rank releases blocks 1 and 2 (one size:
 * their collectives have one count) in the other order in its backward, as
 * an embedder that releases in its own order might on one rank only. The
 * reduce-scatters then pair block 1 on one rank with block 2 on another, no
 * error from the transport; the ledger, compared on the step's all-reduce,
 * must stop every rank in that step, naming the first collective that
 * differs. The world is failed afterwards: run alone (argument "diverge"). */
typedef struct swap_hooks {
    gpt2_hooks inner; /* first: forward_acquire_* take the wrapper as it */
    bool armed, held;
} swap_hooks;

static ferry_status swap_release(void *ctx, int g, ferry_phase ph, backend_stream *s)
{
    swap_hooks *x = ctx;
    if (x->armed && ph == FERRY_PHASE_BACKWARD && g == 2) { /* block 1's release first, then this */
        x->held = true;
        return FERRY_OK;
    }
    ferry_status st = x->inner.release(x->inner.ctx, g, ph, s);
    if (st == FERRY_OK && x->held && g == 1) {
        x->held = false;
        st = x->inner.release(x->inner.ctx, 2, ph, s);
    }
    return st;
}

static void test_divergence(ferry_offload mode)
{
    ferry_engine_config cfg = config(mode, 1);
    efix f;
    ferry_status st = efix_start(&f, &model, &cfg, SEED, B, T, false);
    swap_hooks sw = {f.hooks, rank == world - 1, false};
    f.hooks = (gpt2_hooks){&sw, forward_acquire_params, forward_acquire_grads, swap_release};
    ferry_step_options o = step_options();
    ferry_status setup = st;
    if (st == FERRY_OK) st = efix_micro_batches(&f, batch_tokens, 0, rank, 1, 1.0f / (float)world, NULL, NULL);
    if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, NULL);
    const char *msg = ferry_last_error();
    /* Every rank says so itself (the world is gone: no rank can gather the
     * others' words); test_dp_diverge.sh reads the lines. */
    bool named = st == FERRY_ERR_BACKEND && strstr(msg, "collective #") && strstr(msg, "group 1") &&
                 strstr(msg, "group 2");
    fprintf(stderr, "verdict rank %d: %s (offload %s, setup %d, status %d): %s\n", rank,
            named && setup == FERRY_OK ? "named" : "NOT named", ferry_offload_name(mode), (int)setup, (int)st, msg);
    efix_close(&f);
}

/* The checkpoint's path, made by rank 0 and sent to the others. */
static void shared_dir(char *path, size_t cap)
{
    memset(path, 0, cap);
    if (rank == 0) {
        snprintf(path, cap, "/tmp/ferry-test-dp-XXXXXX");
        if (!mkdtemp(path))
            path[0] = '\0';
    }
    comm_world_broadcast(path, cap, 0);
}

/* What rank r reads loading a file of `bytes` whose blob is empty, by the
 * format and the layout rule (not the engine's code): the header and group
 * table once, its 1/N of the bytes after them to check (part r of N, as
 * the format cuts them), then its slot of each group's master, m and v
 * (slots of whole tiles, rank r's starting at r x slot, the last one cut at
 * the group's end, so a small group is rank 0's alone). */
static double expected_read(const gpt2_model *m, long bytes, int r)
{
    int groups = gpt2_num_groups(m);
    uint64_t head = 72 + 72 * (uint64_t)groups, p = (uint64_t)bytes - head, n = (uint64_t)world;
    uint64_t part = p / n * (uint64_t)(r + 1) + p % n * (uint64_t)(r + 1) / n - (p / n * (uint64_t)r + p % n * (uint64_t)r / n);
    uint64_t own = 0;
    for (int g = 0; g < groups; g++) {
        size_t numel = gpt2_group_numel(m, g), tiles = (numel + NUMERICS_TILE - 1) / NUMERICS_TILE;
        size_t slot = (tiles + n - 1) / n * NUMERICS_TILE, lo = (size_t)r * slot;
        uint64_t mine = lo >= numel ? 0 : numel - lo < slot ? numel - lo : slot;
        /* master fp32; m and v in the form: bf16 2 bytes, 8bit the codes and their blocks' absmax */
        uint64_t mv = moments == FERRY_MOMENTS_F32 ? 4 * mine : moments == FERRY_MOMENTS_BF16 ? 2 * mine
                                                                                            : mine + (mine + 255) / 256 * 4;
        own += 4 * mine + 2 * mv;
    }
    return (double)(head + part + own);
}

/* The N ranks' load of `file` (saved by one process): the state each took is
 * the file's, bit for bit (saved again at once, the same bytes), and each
 * rank read what expected_read says, within 16 KiB (measured by the
 * kernel's count of the bytes the process read), never the whole file
 * twice, as every rank did before. */
static void check_load(const char *file, const char *resaved, const double *reads, const char *what)
{
    long n1, n2;
    unsigned char *a = test_slurp(file, &n1), *b = test_slurp(resaved, &n2);
    tap_ok(a && b && n1 == n2 && memcmp(a, b, (size_t)n1) == 0,
           "%s: the state loaded is the file's, bit for bit (saved again at once: %ld bytes, %ld before)", what, n2, n1);
    free(a);
    free(b);
    gpt2_model *m = NULL;
    if (reads[0] >= (double)UINT64_MAX || gpt2_create(&model, &m) != FERRY_OK) {
        tap_skip("%s: the bytes read per rank: this kernel has no /proc/self/io", what);
        return;
    }
    int off = -1;
    double most = 0;
    char each[320] = "";
    for (int r = 0; r < world; r++) {
        double want = expected_read(m, n1, r);
        if (fabs(reads[r] - want) > 16384 && off < 0)
            off = r;
        most = reads[r] > most ? reads[r] : most;
        snprintf(each + strlen(each), sizeof each - strlen(each), "%s%.0f (%.0f)", r ? ", " : "", reads[r], want);
    }
    gpt2_destroy(m);
    tap_ok(off < 0 && most < 2.0 * (double)n1,
           "%s: each rank read its part to check and its slots, within 16 KiB, of the %ld-byte file: %s bytes (the "
           "expected in brackets); the most %.2f of the file, where every rank read it whole twice before", what, n1, each,
           most / (double)n1);
}

/* A byte of the last rank's part of the payload changed: every rank refuses
 * the file, naming the damage, though only that rank read the byte. */
static void test_damaged_at_ranks(ferry_offload mode, const char *file, const char *dir)
{
    char bad[160];
    snprintf(bad, sizeof bad, "%s/damaged.ferry", dir);
    if (rank == 0) {
        long n;
        unsigned char *b = test_slurp(file, &n);
        FILE *f = b ? fopen(bad, "wb") : NULL;
        if (b && n > 1000)
            b[n - 100] ^= 0x10; /* in the loss scale section: the last part */
        if (f) {
            fwrite(b, 1, (size_t)n, f);
            fclose(f);
        }
        free(b);
    }
    ferry_world_barrier();
    run_result r = {0};
    run_opts load = {mode, 0, 0, 1, bad, HALF, HALF, NULL, 1, NULL};
    ferry_status st = run(&load, &r);
    int refused = efix_ranks_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "is damaged") &&
                           strstr(ferry_last_error(), "nothing was loaded"));
    if (rank == 0) {
        tap_ok(refused == world, "offload %s: a byte changed in the last rank's part: all %d ranks refuse the file "
               "(%d did): %s", ferry_offload_name(mode), world, refused, ferry_last_error());
        unlink(bad);
    }
    free_result(&r);
}

/* Saved by N ranks, continued alone; saved alone, continued by N ranks. */
static void test_checkpoint_across_worlds(ferry_offload mode)
{
    char dir[128], file[160];
    shared_dir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/state.ferry", dir);
    run_result whole = {0}, a = {0}, b = {0};
    /* N ranks, steps 0..HALF, save; then one process continues to STEPS. */
    run_opts first = {mode, 0, 0, 1, NULL, 0, HALF, file, 1, NULL};
    ferry_status st = run(&first, &a);
    int saved = efix_ranks_ok(st == FERRY_OK);
    if (rank == 0) {
        run_opts ref = {mode, 0, 0, -1, NULL, 0, STEPS, NULL, 1, NULL};
        run_opts rest = {mode, 0, 0, -1, file, HALF, STEPS, NULL, 1, NULL};
        char what[96];
        snprintf(what, sizeof what, "offload %s, moments %s: saved by %d ranks at step %d, resumed alone",
                 ferry_offload_name(mode), ferry_moments_name(moments), world, HALF);
        tap_ok(saved == world && run(&ref, &whole) == FERRY_OK && run(&rest, &b) == FERRY_OK, "%s: ran", what);
        memcpy(b.loss, whole.loss, sizeof b.loss[0] * HALF);
        memcpy(b.norm, whole.norm, sizeof b.norm[0] * HALF);
        compare(&b, &whole, HALF, what);
        long nr = -1, na = -1;
        unsigned char *by_ranks = test_slurp(file, &nr), *by_one = NULL;
        /* and back: one process saves at HALF, the N ranks continue */
        run_opts alone = {mode, 0, 0, -1, NULL, 0, HALF, file, 1, NULL};
        free_result(&b);
        tap_ok(run(&alone, &b) == FERRY_OK, "offload %s: one process saved step %d", ferry_offload_name(mode), HALF);
        by_one = test_slurp(file, &na);
        tap_ok(by_ranks && by_one && nr == na && memcmp(by_ranks, by_one, (size_t)nr) == 0,
               "offload %s, moments %s: the file %d ranks saved is byte for byte the one one process saves (%ld and "
               "%ld bytes)", ferry_offload_name(mode), ferry_moments_name(moments), world, nr, na);
        free(by_ranks);
        free(by_one);
    }
    ferry_world_barrier();
    free_result(&a);
    char resaved[160];
    snprintf(resaved, sizeof resaved, "%s/resaved.ferry", dir);
    run_opts again = {mode, 0, 0, 1, file, HALF, STEPS, NULL, 1, resaved};
    st = run(&again, &a);
    int resumed = efix_ranks_ok(st == FERRY_OK);
    double reads[MAXR] = {0};
    reads[rank] = (double)a.load_read;
    ferry_world_all_reduce(reads, (size_t)world);
    if (rank == 0) {
        char what[96];
        snprintf(what, sizeof what, "offload %s, moments %s: saved alone at step %d, resumed by %d ranks",
                 ferry_offload_name(mode), ferry_moments_name(moments), HALF, world);
        tap_ok(resumed == world, "%s: ran on every rank", what);
        memcpy(a.loss, whole.loss, sizeof a.loss[0] * HALF);
        memcpy(a.norm, whole.norm, sizeof a.norm[0] * HALF);
        compare(&a, &whole, HALF, what);
        check_load(file, resaved, reads, what);
    }
    ferry_world_barrier();
    test_damaged_at_ranks(mode, file, dir);
    if (rank == 0) {
        unlink(file);
        unlink(resaved);
        rmdir(dir);
    }
    free_result(&whole);
    free_result(&a);
    free_result(&b);
}

/* Saved alone with bf16 moments, resumed with 8bit ones by the N ranks:
 * each converts its part as one process converts the whole group (per
 * element, per block of 256, on which every slot starts), so the run goes
 * on bitwise as one process resuming the file with 8bit moments. */
static void test_convert_at_ranks(ferry_offload mode)
{
    char dir[128], file[160], what[96];
    shared_dir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/state.ferry", dir);
    snprintf(what, sizeof what, "offload %s: saved alone in bf16, resumed in 8bit by %d ranks", ferry_offload_name(mode),
             world);
    run_result saved = {0}, ref = {0}, got = {0};
    if (rank == 0) {
        moments = FERRY_MOMENTS_BF16;
        run_opts o = {mode, 0, 0, -1, NULL, 0, HALF, file, 1, NULL};
        moments = run(&o, &saved) == FERRY_OK ? FERRY_MOMENTS_8BIT : FERRY_MOMENTS_F32;
        run_opts r = {mode, 0, 0, -1, file, HALF, STEPS, NULL, 1, NULL};
        tap_ok(moments == FERRY_MOMENTS_8BIT && run(&r, &ref) == FERRY_OK,
               "%s: one process saved step %d in bf16 and resumed it in 8bit", what, HALF);
    }
    ferry_world_barrier();
    moments = FERRY_MOMENTS_8BIT;
    run_opts o = {mode, 0, 0, 1, file, HALF, STEPS, NULL, 1, NULL};
    ferry_status st = run(&o, &got);
    int resumed = efix_ranks_ok(st == FERRY_OK);
    if (rank == 0) {
        tap_ok(resumed == world, "%s: ran on every rank", what);
        compare(&got, &ref, HALF, what);
        unlink(file);
        rmdir(dir);
    }
    ferry_world_barrier();
    moments = FERRY_MOMENTS_F32;
    free_result(&saved);
    free_result(&ref);
    free_result(&got);
}

int main(int argc, char **argv)
{
    ferry_world_info w = efix_join(1, MAXR);
    rank = w.rank;
    world = w.world_size;
    if (gpt2_config_from_fields(2, 4, 128, 500, 512, 64, &model) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    if (argc == 3 && !strcmp(argv[1], "diverge")) { /* alone: the world fails on purpose */
        ferry_offload mode = FERRY_OFFLOAD_OPTIMIZER;
        if (ferry_offload_parse(argv[2], &mode) != FERRY_OK)
            return 2;
        test_divergence(mode);
        return 0;
    }
    tap_diag("GPT-2 of 2 layers, 4 heads, 128 wide, vocab 500; micro-batch %d x %d; %d steps; %d ranks (%s); %s "
             "storage",
             B, T, STEPS, world, w.launcher, test_dtype_name());
    test_mode(FERRY_OFFLOAD_NONE, 0, 2);
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 0, 2);
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 1, 2);
    test_mode(FERRY_OFFLOAD_PARAMS, 0, 1);
    test_skip_agreed(FERRY_OFFLOAD_NONE);
    test_skip_agreed(FERRY_OFFLOAD_OPTIMIZER);
    test_skip_agreed(FERRY_OFFLOAD_PARAMS);
    if (world > 1) {
        test_accumulation(FERRY_OFFLOAD_NONE);
        test_accumulation(FERRY_OFFLOAD_OPTIMIZER);
    }
    test_abandon(FERRY_OFFLOAD_NONE, 0);
    test_abandon(FERRY_OFFLOAD_OPTIMIZER, 0);
    test_abandon(FERRY_OFFLOAD_OPTIMIZER, 1);
    test_abandon(FERRY_OFFLOAD_PARAMS, 0);
    test_checkpoint_across_worlds(FERRY_OFFLOAD_OPTIMIZER);
    test_checkpoint_across_worlds(FERRY_OFFLOAD_PARAMS);
    /* compact moments: each rank's slot in the compact layout */
    moments = FERRY_MOMENTS_BF16;
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 0, 2);
    test_checkpoint_across_worlds(FERRY_OFFLOAD_PARAMS);
    moments = FERRY_MOMENTS_8BIT;
    test_mode(FERRY_OFFLOAD_PARAMS, 0, 1);
    test_checkpoint_across_worlds(FERRY_OFFLOAD_OPTIMIZER);
    /* the upload window (on above: compact moments) off, and on with fp32
     * moments: the ranks' slots the same bits either way as the one
     * process, which keeps the default */
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 1, 2);
    upload_window = FERRY_UPLOAD_WINDOW_OFF;
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 0, 2);
    moments = FERRY_MOMENTS_F32;
    upload_window = FERRY_UPLOAD_WINDOW_ON;
    test_mode(FERRY_OFFLOAD_PARAMS, 0, 1);
    upload_window = FERRY_UPLOAD_WINDOW_AUTO;
    test_convert_at_ranks(FERRY_OFFLOAD_PARAMS);
    int rc = rank == 0 ? tap_done() : 0;
    ferry_world_leave();
    return rc;
}
