/* The engine on the cuda backend (the product's kernels and cuda backend, on
 * the simulated device) against the host backend storing bf16, which rounds
 * where the CUDA ops store: a small GPT-2 (2 layers, 4 heads, 64 wide, 500
 * tokens, B x T = 4 x 40, T not a multiple of the attention tile) trained 5
 * steps on one fixed batch from one seed in each offload mode (none,
 * optimizer, params; params also with no prefetch under the planner's
 * tightest budget, so that fetches evict groups whose weights the compute
 * stream may still be reading), and with the one-step delayed update.
 * Params mode with a budget that holds the whole model keeps every group on
 * the device: after the first step it fetches nothing; under the tightest
 * budget it fetches in every step, and its device peak stays inside it.
 *
 * Each step's loss must agree within 5e-3 relative (bf16 keeps 8 bits of
 * mantissa and the two backends sum in different orders; they agree to about
 * 1e-4 here), the loss must fall, and each parameter group's change of its
 * fp32 master weights over the 5 steps must agree within 1e-1 relative norm:
 * AdamW divides each gradient by its own running magnitude, so a weight
 * whose gradient is near zero moves by about lr in a direction its rounding
 * picks, which makes a few percent of the update's norm differ between any
 * two bf16 runs (4e-2 to 5e-2 here); a group whose weights were overwritten
 * or updated from the wrong gradients differs by far more.
 *
 * Run with random stream delays (FERRY_CUDASIM_DELAY_US): the compute,
 * upload and drain streams then interleave differently on every seed, so an
 * event wait the engine forgot becomes a wrong result here.
 *
 * And no host wait of the engine on cuda spins a CPU core (the CPU AdamW
 * wants every core while the GPU computes): each is a wait on an event made
 * with cudaEventBlockingSync, as the simulator's counters show. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev/cudasim/cudasim.h"
#include "models/gpt2_plan.h"
#include "tests/gpu/engine_fixture.h"

#define STEPS 5
#define B_ 4
#define T_ 40
#define SEED 4242u
#define BATCH_SEED 99u
#define TOL_LOSS 5e-3
#define TOL_UPDATE 1e-1
#define MAX_GROUPS 16

typedef struct run {
    float loss[STEPS];
    double fetched[STEPS]; /* params mode: each step's bytes fetches uploaded */
    uint64_t device_peak;
    float *w0, *w;
    size_t n;
    int groups;
    size_t group_numel[MAX_GROUPS];
} run;

/* efix_open with the dtype and the delayed update chosen. */
static ferry_status open_engine(efix *f, const gpt2_config *cfg, ferry_backend_kind kind, ferry_offload mode,
                                int delayed, int prefetch, uint64_t budget)
{
    ferry_engine_config ec = efix_config(kind, mode, FERRY_DTYPE_BF16, 0);
    ec.delayed_update = delayed;
    ec.prefetch_groups = prefetch;
    ec.device_budget_bytes = budget;
    return efix_open_config(f, cfg, &ec, B_, T_, SEED, BATCH_SEED);
}

/* Three blocks: more than the two weight slots of their class params mode
 * plans with no fetch ahead, so the tightest budget evicts. */
static void model_config(gpt2_config *c) { gpt2_config_from_fields(3, 4, 64, 500, 0, 64, c); }

static bool train(ferry_backend_kind kind, ferry_offload mode, int delayed, int prefetch, uint64_t budget,
                  const char *name, run *r)
{
    gpt2_config c;
    model_config(&c);
    cudasim_stats before, after;
    cudasim_get_stats(&before);
    efix f;
    bool ok = tap_is_status(open_engine(&f, &c, kind, mode, delayed, prefetch, budget), FERRY_OK, "%s on %s: sets up",
                            name, ferry_backend_name(kind));
    if (ok)
        ok = tap_ok((r->w0 = efix_weights(&f, &r->n)) != NULL, "%s on %s: initial weights read", name,
                    ferry_backend_name(kind));
    if (ok) {
        r->groups = gpt2_num_groups(f.m);
        ok = tap_ok(r->groups <= MAX_GROUPS, "%s: %d parameter groups", name, r->groups);
        for (int g = 0; ok && g < r->groups; g++)
            r->group_numel[g] = gpt2_group_numel(f.m, g);
    }
    ferry_step_options so = efix_options(3e-3f, 0.1f, 1.0f);
    for (int s = 0; ok && s < STEPS; s++) {
        ok = tap_is_status(efix_step(&f, &so, &r->loss[s]), FERRY_OK, "%s on %s: step %d", name,
                           ferry_backend_name(kind), s);
        ferry_step_timing t = FERRY_STEP_TIMING_INIT;
        if (ok)
            ok = tap_is_status(ferry_engine_step_timing(f.e, &t), FERRY_OK, "%s: step %d's timing", name, s);
        r->fetched[s] = t.fetch_h2d_bytes;
    }
    if (ok)
        ok = tap_is_status(ferry_engine_synchronize(f.e), FERRY_OK, "%s on %s: the update lands", name,
                           ferry_backend_name(kind));
    if (ok)
        ok = tap_ok((r->w = efix_weights(&f, &r->n)) != NULL, "%s on %s: trained weights read", name,
                    ferry_backend_name(kind));
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (ok)
        ok = tap_is_status(ferry_engine_memory_stats(f.e, &ms), FERRY_OK, "%s: memory stats", name);
    r->device_peak = ms.device_total_peak_bytes;
    efix_close(&f);
    cudasim_get_stats(&after);
    if (ok && kind == FERRY_BACKEND_CUDA)
        tap_ok(after.host_waits > before.host_waits && after.spin_waits == before.spin_waits,
               "%s on cuda: none of its %llu host waits spins a core (%llu would)", name,
               (unsigned long long)(after.host_waits - before.host_waits),
               (unsigned long long)(after.spin_waits - before.spin_waits));
    return ok;
}

static void compare(const char *name, const run *dev, const run *host)
{
    int at = 0;
    double worst = efix_worst_rel(dev->loss, host->loss, STEPS, &at);
    tap_ok(worst <= TOL_LOSS, "%s: every step's loss on cuda within %.0e of the host's (worst %.2e at step %d: %.5f vs %.5f)",
           name, TOL_LOSS, worst, at, dev->loss[at], host->loss[at]);
    tap_ok(dev->loss[STEPS - 1] < dev->loss[0], "%s: the loss falls on cuda, %.4f -> %.4f", name, dev->loss[0],
           dev->loss[STEPS - 1]);
    if (!tap_ok(dev->n == host->n && memcmp(dev->w0, host->w0, dev->n * sizeof *dev->w0) == 0,
                "%s: both start from the same master weights", name))
        return;
    double worst_e = 0;
    int worst_g = 0;
    size_t base = 0;
    for (int g = 0; g < host->groups; g++) {
        double num = 0, den = 0;
        for (size_t i = base; i < base + host->group_numel[g]; i++) {
            double u = (double)dev->w[i] - dev->w0[i], v = (double)host->w[i] - host->w0[i];
            num += (u - v) * (u - v);
            den += v * v;
        }
        double e = den > 0 ? sqrt(num / den) : INFINITY;
        if (!(e <= worst_e))
            worst_e = e, worst_g = g;
        base += host->group_numel[g];
    }
    tap_ok(worst_e <= TOL_UPDATE, "%s: each group's weight change over %d steps on cuda within %.0e relative norm "
           "of the host's (worst %.2e, group %d)", name, STEPS, TOL_UPDATE, worst_e, worst_g);
}

/* The planner's tightest budget for params mode on cuda with no prefetch:
 * the window of groups the schedule needs, no more; 0 on failure. */
static uint64_t tightest_budget(void)
{
    gpt2_config c;
    model_config(&c);
    gpt2_plan p;
    gpt2_plan_request rq = {.cfg = &c, .batch = B_, .seq = T_, .offload = FERRY_OFFLOAD_PARAMS, .recompute = false,
                            .prefetch_groups = 0, .micro_batches = 1, .backend = FERRY_BACKEND_CUDA,
                            .dtype = FERRY_DTYPE_BF16, .ranks = 1, .device_budget = 0};
    ferry_status st = gpt2_plan_predict(&rq, &p);
    if (!tap_is_status(st, FERRY_OK, "the planner's tightest params budget (%.1f MiB)",
                       st == FERRY_OK ? (double)p.device_total / (1 << 20) : 0.0))
        return 0;
    return p.device_total;
}

/* Params mode's fetches after the first step: none where the budget keeps
 * every group, some in every step under the tightest; the peak inside the
 * budget either way. */
static void check_residency(const char *name, const run *dev, uint64_t budget, bool keeps_all)
{
    double after = 0, least = INFINITY;
    for (int s = 1; s < STEPS; s++) {
        after += dev->fetched[s];
        least = fmin(least, dev->fetched[s]);
    }
    if (keeps_all)
        tap_ok(dev->fetched[0] > 0 && after == 0, "%s: the first step fetches %.0f bytes, the next %d nothing (%.0f)",
               name, dev->fetched[0], STEPS - 1, after);
    else
        tap_ok(least > 0, "%s: every step fetches again (at least %.0f bytes)", name, least);
    tap_ok(dev->device_peak <= budget, "%s: the device peak %llu within the budget %llu", name,
           (unsigned long long)dev->device_peak, (unsigned long long)budget);
}

int main(void)
{
    efix_require_gpu(FERRY_BACKEND_CUDA);
    tap_diag("seed %u, batch seed %u; stream delays: FERRY_CUDASIM_DELAY_US=%s", SEED, BATCH_SEED,
             getenv("FERRY_CUDASIM_DELAY_US") ? getenv("FERRY_CUDASIM_DELAY_US") : "0");
    const uint64_t roomy = 96u << 20, tight = tightest_budget();
    const struct {
        ferry_offload mode;
        int delayed, prefetch;
        uint64_t budget;
        const char *name;
    } cases[] = {
        {FERRY_OFFLOAD_NONE, 0, 2, roomy, "offload none"},
        {FERRY_OFFLOAD_OPTIMIZER, 0, 2, roomy, "offload optimizer"},
        {FERRY_OFFLOAD_PARAMS, 0, 2, roomy, "offload params, every group kept"},
        {FERRY_OFFLOAD_PARAMS, 0, 0, tight, "offload params, no prefetch, the tightest budget (fetches evict)"},
        {FERRY_OFFLOAD_OPTIMIZER, 1, 2, roomy, "offload optimizer, delayed update"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].budget == 0)
            continue; /* the planner failed, and said so */
        run dev, host;
        memset(&dev, 0, sizeof dev);
        memset(&host, 0, sizeof host);
        if (train(FERRY_BACKEND_CUDA, cases[i].mode, cases[i].delayed, cases[i].prefetch, cases[i].budget,
                  cases[i].name, &dev) &&
            train(FERRY_BACKEND_HOST, cases[i].mode, cases[i].delayed, cases[i].prefetch, cases[i].budget,
                  cases[i].name, &host)) {
            compare(cases[i].name, &dev, &host);
            if (cases[i].mode == FERRY_OFFLOAD_PARAMS)
                check_residency(cases[i].name, &dev, cases[i].budget, cases[i].budget == roomy);
        }
        free(dev.w0), free(dev.w), free(host.w0), free(host.w);
    }
    return tap_done();
}
