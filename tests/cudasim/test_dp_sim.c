/* Data parallelism on the cuda backend (the product's kernels, cuda backend
 * and NCCL calls, on the simulated device and its NCCL over MPI), run by
 * mpirun -np 2, against the host backend's data parallelism (its
 * collectives over MPI) storing the same 16-bit type, which rounds where
 * the CUDA ops store. Each rank trains its own micro-batch of a small GPT-2
 * (2 layers, 4 heads, 64 wide, 500 tokens, B x T = 2 x 40) for 5 steps from
 * one seed, in offload modes none, optimizer (the host state sharded across
 * the ranks) and params.
 *
 * Every micro-batch's loss on cuda must agree with the host's within 5e-3
 * relative, every step's global gradient norm within 2e-2 relative (the
 * ranks' gradients summed in another order and rounded to 16 bits on cuda),
 * the loss must fall, and the change of the fp32 master weights over the 5
 * steps must agree within 1e-1 relative norm (AdamW's normalised step
 * moves a weight whose gradient is near zero by about lr in a direction its
 * rounding picks; engine-sim explains the bound). Both ranks must hold the
 * same master weights at the end on each backend (a shard that was not
 * gathered, or a gradient one rank did not receive, shows there bit for
 * bit).
 *
 *   test_dp_sim bf16|f16   (FERRY_CUDASIM_ARCH: 86 for bf16, 75 for f16)
 *
 * Only rank 0 writes TAP; every rank's checks are summed across ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "tests/engine/engine_fixture.h"
#include "tests/tap.h"
#include "tests/token_batches.h"

enum { STEPS = 5, B = 2, T = 40, MAXR = 4 };
#define TOL_LOSS 5e-3
#define TOL_NORM 2e-2
#define TOL_UPDATE 1e-1

static gpt2_config model;
static const uint64_t SEED = 4242;
static int rank, world;
static ferry_dtype dtype;

typedef struct run_result {
    float loss[STEPS][MAXR]; /* every rank's micro-batch loss */
    double norm[STEPS];
    float *w0, *w; /* all master weights, before and after */
    size_t n;
} run_result;

static void batch_tokens(int step, int micro, int32_t *tokens, int32_t *targets)
{
    static const token_recipe recipe = {991, 7919, 104729, 11, 3, 1, 113, 4};
    token_batch(&recipe, step, micro, B * T, model.vocab_size, tokens, targets);
}

static ferry_status run(ferry_backend_kind kind, ferry_offload mode, run_result *out)
{
    ferry_engine_config cfg = efix_config(kind, mode, dtype, 1);
    cfg.data_parallel = 1;
    memset(out, 0, sizeof *out);
    efix f;
    ferry_status st = efix_start(&f, &model, &cfg, SEED, B, T, false);
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->w0, &out->n);
    ferry_step_options o = efix_options(2e-3f, 0.05f, 0.5f); /* clips: the global norm matters */
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        double losses[MAXR] = {0};
        float loss = 0;
        st = efix_micro_batches(&f, batch_tokens, step, rank, 1, 1.0f / (float)world, &loss, NULL);
        losses[rank] = loss;
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, &rep);
        if (st == FERRY_OK) st = ferry_world_all_reduce(losses, (size_t)world);
        for (int k = 0; k < world; k++)
            out->loss[step][k] = (float)losses[k];
        out->norm[step] = rep.grad_norm;
    }
    size_t n = 0;
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->w, &n);
    if (st != FERRY_OK)
        fprintf(stderr, "rank %d: %s run failed: %s\n", rank, kind == FERRY_BACKEND_CUDA ? "cuda" : "host",
                ferry_last_error());
    efix_close(&f);
    return st;
}

/* Whether this rank's final weights are rank 0's, bit for bit (a checksum of
 * the bits, all-reduced: rank 0's against the sum). */
static int same_as_rank0(const run_result *r)
{
    double sums[2 * MAXR] = {0};
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; r->w && i < r->n; i++) {
        uint32_t b;
        memcpy(&b, &r->w[i], 4);
        h = (h ^ b) * 1099511628211ull;
    }
    sums[rank] = (double)(h >> 12); /* exact in a double */
    if (ferry_world_all_reduce(sums, (size_t)world) != FERRY_OK)
        return 0;
    int same = 1;
    for (int k = 1; k < world; k++)
        same &= sums[k] == sums[0];
    return same;
}

static void test_mode(ferry_offload mode)
{
    char what[96];
    snprintf(what, sizeof what, "%d ranks, %s, offload %s", world, ferry_dtype_name(dtype), ferry_offload_name(mode));
    run_result cu, ho;
    int cu_ran = efix_ranks_ok(run(FERRY_BACKEND_CUDA, mode, &cu) == FERRY_OK);
    int cu_same = same_as_rank0(&cu);
    int ho_ran = efix_ranks_ok(run(FERRY_BACKEND_HOST, mode, &ho) == FERRY_OK);
    int ho_same = same_as_rank0(&ho);
    if (rank == 0) {
        tap_ok(cu_ran == world && ho_ran == world, "%s: every rank trained on cuda (%d) and on host (%d)", what,
               cu_ran, ho_ran);
        tap_ok(cu_same && ho_same, "%s: the ranks end with the same master weights, bit for bit (cuda %s, host %s)",
               what, cu_same ? "yes" : "no", ho_same ? "yes" : "no");
        double worst = 0, worst_norm = 0;
        int at = 0, at_norm = 0;
        for (int s = 0; s < STEPS; s++) {
            for (int k = 0; k < world; k++) {
                double d = fabs((double)cu.loss[s][k] - ho.loss[s][k]) / fabs((double)ho.loss[s][k]);
                if (!(d <= worst)) {
                    worst = d;
                    at = s;
                }
            }
            double dn = fabs(cu.norm[s] - ho.norm[s]) / fabs(ho.norm[s]);
            if (!(dn <= worst_norm)) {
                worst_norm = dn;
                at_norm = s;
            }
        }
        tap_ok(worst <= TOL_LOSS, "%s: every micro-batch's loss on cuda within %.0e of the host's (worst %.2e at "
               "step %d: %.6f vs %.6f)", what, TOL_LOSS, worst, at, (double)cu.loss[at][0], (double)ho.loss[at][0]);
        tap_ok(worst_norm <= TOL_NORM, "%s: every step's gradient norm within %.0e of the host's (worst %.2e at "
               "step %d: %.6g vs %.6g)", what, TOL_NORM, worst_norm, at_norm, cu.norm[at_norm], ho.norm[at_norm]);
        tap_ok(cu.loss[STEPS - 1][0] < cu.loss[0][0], "%s: rank 0's loss falls on cuda, %.4f -> %.4f", what,
               (double)cu.loss[0][0], (double)cu.loss[STEPS - 1][0]);
        double diff = 0, ref = 0, start = 0;
        bool same_start = cu.w0 && ho.w0 && cu.n == ho.n && cu.w && ho.w;
        for (size_t i = 0; same_start && i < cu.n; i++) {
            double a = (double)cu.w[i] - cu.w0[i], b = (double)ho.w[i] - ho.w0[i];
            diff += (a - b) * (a - b);
            ref += b * b;
            start += fabs((double)cu.w0[i] - ho.w0[i]);
        }
        tap_ok(same_start && start == 0, "%s: both start from the same master weights", what);
        double rel = ref > 0 ? sqrt(diff / ref) : INFINITY;
        tap_ok(rel <= TOL_UPDATE, "%s: the weights' change over %d steps on cuda within %.0e relative norm of the "
               "host's (%.2e)", what, STEPS, TOL_UPDATE, rel);
    }
    free(cu.w0), free(cu.w), free(ho.w0), free(ho.w);
}

int main(int argc, char **argv)
{
    if (argc != 2 || ferry_dtype_parse(argv[1], &dtype) != FERRY_OK ||
        (dtype != FERRY_DTYPE_BF16 && dtype != FERRY_DTYPE_F16)) {
        printf("Bail out! usage: test_dp_sim bf16|f16\n");
        return 1;
    }
    ferry_world_info w = efix_join(2, MAXR); /* under mpirun */
    rank = w.rank;
    world = w.world_size;
    if (gpt2_config_from_fields(2, 4, 64, 500, 0, T, &model) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    tap_diag("GPT-2 of 2 layers, 4 heads, 64 wide, vocab 500; micro-batch %d x %d a rank; %d steps; %d ranks (%s); "
             "%s storage",
             B, T, STEPS, world, w.launcher, ferry_dtype_name(dtype));
    test_mode(FERRY_OFFLOAD_NONE);
    test_mode(FERRY_OFFLOAD_OPTIMIZER);
    test_mode(FERRY_OFFLOAD_PARAMS);
    int rc = rank == 0 ? tap_done() : 0;
    ferry_world_leave();
    return rc;
}
