/* A GPT-2 trained through the engine, as an embedder does it (ferry.h and
 * engine/intree.h, like tools/train_gpt2): the model, an engine in one
 * offload mode on one backend, activations from the engine's budget, and
 * one fixed batch; plus the one rule for skipping a GPU test. The model on
 * its engine, its micro-batches, weights and teardown are
 * tests/engine/engine_fixture.h's; what is here is the GPU tests' own: the
 * skip, the backend argument, the fixed batch, the NVMe folder, a step
 * and an evaluation on that batch. Header-only, for the tests in
 * tests/gpu. */
#ifndef FERRY_TESTS_GPU_ENGINE_FIXTURE_H
#define FERRY_TESTS_GPU_ENGINE_FIXTURE_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "tests/engine/engine_fixture.h"
#include "tests/tap.h"

/* A GPU test may skip (exit 77) only when there is no GPU: the cuda
 * backend answers FERRY_ERR_UNSUPPORTED for no driver, no device, or a card
 * ferry does not run on. Anything else that fails to open is a failure. */
static inline void efix_require_gpu(ferry_backend_kind kind)
{
    if (kind != FERRY_BACKEND_CUDA)
        return;
    backend *be = NULL;
    ferry_status st = backend_open(FERRY_BACKEND_CUDA, &be);
    backend_close(be);
    if (st == FERRY_ERR_UNSUPPORTED) {
        tap_diag("cuda: %s", ferry_last_error());
        tap_plan_skip("no usable GPU");
    }
    if (st != FERRY_OK) {
        printf("Bail out! a GPU is there but the cuda backend does not open: %s\n", ferry_last_error());
        exit(1);
    }
}

/* "cuda" (the default) or "host", from argv[1]. */
static inline ferry_backend_kind efix_backend_arg(int argc, char **argv)
{
    ferry_backend_kind kind = FERRY_BACKEND_CUDA;
    if (argc > 1 && (ferry_backend_parse(argv[1], &kind) != FERRY_OK || kind == FERRY_BACKEND_AUTO)) {
        printf("Bail out! usage: %s [cuda|host]\n", argv[0]);
        exit(2);
    }
    return kind;
}

/* Fills tokens and targets (the next token; every 9th ignored) from seed. */
static inline void efix_batch(efix *f, uint64_t seed)
{
    int V = gpt2_get_config(f->m)->vocab_size;
    size_t n = (size_t)f->B * f->T;
    for (size_t i = 0; i <= n; i++) {
        int32_t t = (int32_t)(tap_rand_unit(&seed) * V);
        if (i < n)
            f->tokens[i] = t;
        if (i > 0)
            f->targets[i - 1] = (i - 1) % 9 == 8 ? -1 : t;
    }
}

/* The folder of the NVMe tier for offload nvme: a temporary one, made once
 * per process and left empty (each engine removes its file). */
static inline const char *efix_nvme_dir(void)
{
    static char dir[] = "/tmp/ferry-gpu-nvme-XXXXXX";
    static bool made;
    if (!made)
        made = mkdtemp(dir) != NULL;
    return dir;
}

/* The model from cfg on an engine from ec, initialised from seed, set up,
 * with activations for B x T and a batch drawn from batch_seed. */
static inline ferry_status efix_open_config(efix *f, const gpt2_config *cfg, const ferry_engine_config *ec, int B,
                                            int T, uint64_t seed, uint64_t batch_seed)
{
    ferry_status st = efix_engine(f, cfg, ec, seed, B, T, false);
    if (st != FERRY_OK)
        return st;
    efix_batch(f, batch_seed);
    return efix_acts(f);
}

/* The model from cfg on an engine of `kind` in `mode` with `budget` bytes of
 * device memory (0: all free), initialised from seed, set up, with
 * activations for B x T and a batch drawn from batch_seed. Offload nvme
 * keeps the moments in a temporary folder through a 1 MiB window. dtype: the
 * device storage (FERRY_DTYPE_AUTO: the backend's, bf16 or f16 by the card). */
static inline ferry_status efix_open(efix *f, const gpt2_config *cfg, ferry_backend_kind kind, ferry_dtype dtype,
                                     ferry_offload mode, uint64_t budget, int B, int T, uint64_t seed,
                                     uint64_t batch_seed)
{
    ferry_engine_config ec = efix_config(kind, mode, dtype, 0);
    ec.device_budget_bytes = budget;
    if (mode == FERRY_OFFLOAD_NVME) {
        ec.nvme_path = efix_nvme_dir();
        ec.nvme_window_bytes = 1 << 20;
    }
    return efix_open_config(f, cfg, &ec, B, T, seed, batch_seed);
}

/* One training step on the fixed batch (the backward under the engine's
 * loss scale: f16 on sm_70/75 turns it on); *loss is its mean loss. */
static inline ferry_status efix_step(efix *f, const ferry_step_options *so, float *loss)
{
    ferry_status st = efix_micro_batch(f, 0, 1, ferry_engine_loss_scale(f->e), loss);
    if (st == FERRY_OK) st = ferry_engine_step(f->e, so, NULL);
    return st;
}

/* The mean loss of the current weights on tokens/targets, without gradients. */
static inline ferry_status efix_eval(efix *f, const int32_t *tokens, const int32_t *targets, float *loss)
{
    backend_stream *s = engine_embed_stream(f->e);
    ferry_status st = ferry_engine_begin_inference(f->e);
    if (st == FERRY_OK) st = gpt2_forward(f->m, f->act, &f->hooks, s, tokens, targets, false);
    if (st == FERRY_OK) st = gpt2_loss(f->act, s, loss);
    ferry_status end = ferry_engine_end_inference(f->e);
    return st == FERRY_OK ? end : st;
}

#endif
