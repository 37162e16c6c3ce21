/* Kernel lab: causal multi-head attention, forward (out and the
 * log-sum-exp) and the accumulating backward. Reference:
 * hostop_attention_* (a T x T score matrix per head, fp32); production:
 * ops_attention_* (backend/ops/attention.cu, FlashAttention-2 style), whose
 * tile size the card's shared memory decides. Variants: the same kernels
 * with each tile size forced (cudaop_attention_*_tiled): 1, 32 queries per
 * block (2 warps), what Turing's 64 KiB per block runs; 2, 64 queries (4
 * warps), what every other card runs at head size 64. A size the card
 * cannot hold is said and skipped. Flops count the causal half of the
 * score and P @ V products. Backward variant 3
 * (dev/kernels/attention_variants.cu, bf16 storage only) computes
 * D = rowsum(dO * O) once instead of in every key block's pass over each
 * query tile; its tiles are variant 2's. */
#include "dev/kernels/lab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_cuda.h"
#include "backend/ops/ops_host.h"

typedef struct attn {
    int B, T, C, NH;
    void *out, *qkv, *dout, *dqkv;
    float *lse;
    void *scratch; /* variant 3's D */
} attn;

static const struct {
    const char *name;
    int tile; /* 0: the production entry point, which chooses */
} variants[] = {
    {"0 production", 0},
    {"1 32-query tiles", 32},
    {"2 64-query tiles", 64},
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])

static int current; /* the variant being checked or timed */

static ferry_status run_forward(lab *L, attn *k)
{
    if (variants[current].tile == 0)
        return ops_attention_forward(L->s, k->out, k->lse, k->qkv, k->B, k->T, k->C, k->NH);
    return cudaop_attention_forward_tiled(L->stream, L->act, variants[current].tile, k->out, k->lse, k->qkv, k->B,
                                          k->T, k->C, k->NH);
}

static ferry_status run_backward(lab *L, attn *k)
{
    if (variants[current].tile == 0)
        return ops_attention_backward(L->s, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->B, k->T, k->C, k->NH);
    return cudaop_attention_backward_tiled(L->stream, L->act, variants[current].tile, k->dqkv, k->dout, k->qkv,
                                           k->out, k->lse, k->B, k->T, k->C, k->NH);
}

static void forward(lab *L, void *p) { lab_must(run_forward(L, p), variants[current].name); }
static void backward(lab *L, void *p) { lab_must(run_backward(L, p), variants[current].name); }

#define VARIANT3 "3 D computed once"

static ferry_status run_backward3(lab *L, attn *k)
{
    return lab_attention_backward1(L->stream, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->B, k->T, k->C, k->NH,
                                   k->scratch);
}

static void backward3(lab *L, void *p) { lab_must(run_backward3(L, p), VARIANT3); }

/* Whether variant 3 runs here: bf16 storage, and its 64-query tiles fit the card. */
static bool fits3(lab *L, attn *k)
{
    if (!lab_bf16_variant(L, "attention_backward", VARIANT3))
        return false;
    ferry_status st = run_backward3(L, k);
    if (st == FERRY_OK)
        return true;
    lab_must(st == FERRY_ERR_UNSUPPORTED ? FERRY_OK : st, VARIANT3);
    printf("skip   %-30s %-26s %s\n", "attention_backward", VARIANT3, ferry_last_error());
    fflush(stdout);
    return false;
}

/* Whether the card holds this variant's tiles at head size C / NH. */
static bool fits(lab *L, attn *k)
{
    ferry_status st = run_forward(L, k);
    if (st == FERRY_OK)
        st = run_backward(L, k);
    if (st == FERRY_OK)
        return true;
    lab_must(st == FERRY_ERR_UNSUPPORTED ? FERRY_OK : st, variants[current].name);
    printf("skip   %-30s %-26s %s\n", "attention", variants[current].name, ferry_last_error());
    fflush(stdout);
    return false;
}

/* HS = 64 as GPT-2's, T not a multiple of either tile. */
static void check(lab *L)
{
    const int B = 2, T = 96 + 7, C = 192, NH = 3;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = lab_rand(L, nqkv, -2, 2), *dout = lab_rand(L, nout, -1, 1), *dqkv0 = lab_rand(L, nqkv, -1, 1);
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4), *dqkv = malloc(nqkv * 4);
    lab_must(hostop_attention_forward(out, lse, qkv, B, T, C, NH), "host attention");
    for (current = 0; current < N_VARIANTS; current++) {
        attn k = {B, T, C, NH, lab_alloc(L, nout * 2), lab_up_16(L, qkv, nqkv), lab_up_16(L, dout, nout),
                  lab_up_16(L, dqkv0, nqkv), lab_alloc(L, nlse * 4), NULL};
        if (fits(L, &k)) {
            backend_free(L->be, k.dqkv); /* fits() ran the backward into it: start again */
            k.dqkv = lab_up_16(L, dqkv0, nqkv);
            forward(L, &k);
            lab_check_16(L, "attention_forward", variants[current].name, k.out, out, nout, 2e-2);
            /* The backward from the device's own forward output, as training runs it. */
            float *out_dev = lab_down_16(L, k.out, nout), *lse_dev = lab_down_f32(L, k.lse, nlse);
            for (size_t i = 0; i < nqkv; i++)
                dqkv[i] = dqkv0[i];
            lab_must(hostop_attention_backward(dqkv, dout, qkv, out_dev, lse_dev, B, T, C, NH), "host attention bwd");
            backward(L, &k);
            lab_check_16(L, "attention_backward dqkv", variants[current].name, k.dqkv, dqkv, nqkv, 2e-2);
            free(out_dev), free(lse_dev);
        }
        LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse);
    }
    /* Variant 3's backward from the production forward's out and lse. */
    attn k = {B, T, C, NH, lab_alloc(L, nout * 2), lab_up_16(L, qkv, nqkv), lab_up_16(L, dout, nout),
              lab_up_16(L, dqkv0, nqkv), lab_alloc(L, nlse * 4), lab_alloc(L, lab_attention_backward1_scratch_bytes(B, T, NH))};
    current = 0;
    forward(L, &k);
    if (fits3(L, &k)) {
        backend_free(L->be, k.dqkv); /* fits3() ran the backward into it: start again */
        k.dqkv = lab_up_16(L, dqkv0, nqkv);
        float *out_dev = lab_down_16(L, k.out, nout), *lse_dev = lab_down_f32(L, k.lse, nlse);
        memcpy(dqkv, dqkv0, nqkv * sizeof *dqkv);
        lab_must(hostop_attention_backward(dqkv, dout, qkv, out_dev, lse_dev, B, T, C, NH), "host attention bwd");
        backward3(L, &k);
        lab_check_16(L, "attention_backward dqkv", VARIANT3, k.dqkv, dqkv, nqkv, 2e-2);
        free(out_dev), free(lse_dev);
    }
    LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse, k.scratch);
    free(qkv), free(dout), free(dqkv0), free(dqkv), free(out), free(lse);
}

void lab_attention(lab *L)
{
    check(L);
    const lab_sizes z = L->z;
    const size_t nc = (size_t)z.B * z.T * z.C;
    attn k = {z.B, z.T, z.C, z.NH, lab_zeros(L, nc * 2), lab_random_16(L, 3 * nc, 1),
              lab_random_16(L, nc, 1), lab_zeros(L, 3 * nc * 2), lab_zeros(L, (size_t)z.B * z.NH * z.T * 4), NULL};
    /* 4 B NH T^2 HS for QK^T and PV, halved by the causal mask */
    const double fwd = 2.0 * z.B * z.NH * (double)z.T * z.T * ((double)z.C / z.NH);
    for (current = 0; current < N_VARIANTS; current++) {
        if (!fits(L, &k))
            continue;
        forward(L, &k); /* the out and lse the backward reads */
        lab_time(L, "attention_forward", variants[current].name, forward, &k, fwd, LAB_FLOPS);
        lab_time(L, "attention_backward", variants[current].name, backward, &k, 2.5 * fwd, LAB_FLOPS);
    }
    current = 0;
    forward(L, &k);
    k.scratch = lab_alloc(L, lab_attention_backward1_scratch_bytes(z.B, z.T, z.NH));
    if (fits3(L, &k))
        lab_time(L, "attention_backward", VARIANT3, backward3, &k, 2.5 * fwd, LAB_FLOPS);
    LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse, k.scratch);
}
