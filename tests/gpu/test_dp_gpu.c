/* The collective paths of data parallelism at world size 1, on a GPU:
 * an engine with data_parallel 1 sends every gradient through a
 * reduce-scatter (or, in offload none, an all-reduce) and every weight
 * through an all-gather — real NCCL on the cuda backend — and must train
 * bitwise as the same engine alone, in every offload mode: at one rank each
 * collective is a copy, the fp32 widening of bf16 gradients is exact, and
 * the norm and AdamW read the same values. Without a GPU it skips (77); a
 * CUDA build without NCCL skips too (it cannot run this path). With `host`
 * it runs the same on the host backend (the engine suite), no MPI needed.
 * argv[1]: cuda (default) or host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "tests/engine/engine_fixture.h"
#include "tests/gpu/engine_fixture.h"
#include "tests/tap.h"

enum { STEPS = 5, B = 2, T = 64 };

static gpt2_config model;

typedef struct result {
    float loss[STEPS];
    double norm[STEPS];
    float *weights;
    size_t n;
    double comm_bytes;
} result;

static void tokens_of(int step, int micro, int32_t *tokens, int32_t *targets)
{
    (void)micro; /* one micro-batch a step */
    uint64_t rng = 17 + (uint64_t)step * 7919;
    for (int i = 0; i < B * T + 1; i++) {
        int32_t tok = (int32_t)((i * 13 + step) % 251);
        if (tap_rand_u64(&rng) % 3 == 0)
            tok = (int32_t)(tap_rand_u64(&rng) % (uint64_t)model.vocab_size);
        if (i < B * T)
            tokens[i] = tok;
        if (i > 0)
            targets[i - 1] = tok;
    }
}

static ferry_status train(ferry_backend_kind kind, ferry_offload mode, int parallel, result *out)
{
    ferry_engine_config cfg = efix_config(kind, mode, FERRY_DTYPE_AUTO, 2);
    cfg.device_budget_bytes = (uint64_t)2 << 30;
    cfg.data_parallel = parallel;
    efix f;
    ferry_status st = efix_start(&f, &model, &cfg, 99, B, T, false);
    ferry_step_options o = efix_options(1e-3f, 0.1f, 1.0f);
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        st = efix_micro_batches(&f, tokens_of, step, 0, 1, 1.0f, &out->loss[step], NULL);
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, &rep);
        out->norm[step] = rep.grad_norm;
    }
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->weights, &out->n);
    ferry_step_timing t = FERRY_STEP_TIMING_INIT;
    if (st == FERRY_OK && ferry_engine_step_timing(f.e, &t) == FERRY_OK)
        out->comm_bytes = t.comm_bytes;
    efix_close(&f);
    return st;
}

int main(int argc, char **argv)
{
    ferry_backend_kind kind = efix_backend_arg(argc, argv);
    efix_require_gpu(kind);
    if (gpt2_config_from_fields(2, 4, 128, 1000, 0, 128, &model) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    ferry_world_info w = FERRY_WORLD_INFO_INIT;
    ferry_world_probe(&w);
    if (kind == FERRY_BACKEND_CUDA && !w.nccl_compiled)
        tap_plan_skip("this CUDA build has no NCCL (-Dnccl=disabled): the collective path cannot run");
    tap_diag("%s backend, world size 1 through the collectives (%s) against the engine alone; GPT-2 2 x 128, "
             "B=%d T=%d, %d steps",
             ferry_backend_name(kind), kind == FERRY_BACKEND_CUDA ? "NCCL" : "the host backend's", B, T, STEPS);
    const ferry_offload modes[] = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const char *name = ferry_offload_name(modes[i]);
        result alone = {0}, dp = {0};
        ferry_status a = train(kind, modes[i], -1, &alone);
        ferry_status b = train(kind, modes[i], 1, &dp);
        if (!tap_ok(a == FERRY_OK && b == FERRY_OK, "%s: both ran", name))
            tap_diag("  %s", ferry_last_error());
        tap_ok(dp.comm_bytes == 0, "%s: at one rank nothing leaves it (%.0f bytes sent)", name, dp.comm_bytes);
        int bad = -1;
        for (int s = 0; s < STEPS && bad < 0 && a == FERRY_OK && b == FERRY_OK; s++)
            if (memcmp(&alone.loss[s], &dp.loss[s], sizeof(float)) || memcmp(&alone.norm[s], &dp.norm[s], sizeof(double)))
                bad = s;
        if (!tap_ok(a == FERRY_OK && b == FERRY_OK && bad < 0, "%s: losses and gradient norms bitwise equal (last loss %.6f)",
                    name, (double)alone.loss[STEPS - 1]) && bad >= 0)
            tap_diag("  step %d: loss %.9g vs %.9g, norm %.17g vs %.17g", bad, (double)alone.loss[bad],
                     (double)dp.loss[bad], alone.norm[bad], dp.norm[bad]);
        efix_same_weights(alone.weights, alone.n, dp.weights, dp.n, name);
        tap_ok(a == FERRY_OK && alone.loss[STEPS - 1] < alone.loss[0], "%s: and it learns: %.4f -> %.4f", name,
               (double)alone.loss[0], (double)alone.loss[STEPS - 1]);
        free(alone.weights);
        free(dp.weights);
    }
    return tap_done();
}
