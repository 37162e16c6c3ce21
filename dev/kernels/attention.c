/* Kernel lab: causal multi-head attention, forward (out and the
 * log-sum-exp) and the accumulating backward (with its delta). Reference:
 * hostop_attention_* (a T x T score matrix per head, fp32); production:
 * ops_attention_* (backend/ops/attention.cu: mma.sync, ldmatrix and
 * cp.async, FlashAttention-2 style; on Volta attention_wmma.cu). Variants,
 * each a forward and a backward:
 *   1  WMMA, 32 queries per block (2 warps): Turing's tiles before the
 *      mma.sync kernels (attention_wmma.cu, forced);
 *   2  WMMA, 64 queries per block: the production kernel of every other
 *      card before them, measured on the H200 at 5.6% (forward) and 2.3%
 *      (backward) of the matmul ceiling;
 *   3  variant 2's backward reading D = rowsum(dO * O) computed once
 *      (dev/kernels/attention_variants.cu; bf16 only; backward only);
 *   4  mma.sync with 64 queries per forward block (4 warps);
 *   5  mma.sync with 128 queries per forward block (8 warps; the
 *      production choice where the card's shared memory holds it); its
 *      backward is variant 4's, the backward having one shape;
 *   6  unfused, as llm.c: cuBLASLt strided-batched Q K^T and P V around a
 *      fused causal softmax, P kept in memory for the backward
 *      (dev/kernels/attention_unfused.cu): the baseline a fused kernel
 *      must beat.
 * A variant the card cannot hold or run is said and skipped. Flops count
 * the causal half of the score and P @ V products (the unfused variant
 * computes the whole square, and is charged the half all the same). */
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
    float *lse, *delta;
    void *scratch; /* variant 3's D, variant 6's permuted tensors and probabilities */
} attn;

typedef enum kind { PRODUCTION, WMMA, WMMA_D_ONCE, MMA, UNFUSED } kind;

static const struct {
    const char *name;
    kind k;
    int tile;      /* WMMA's queries per block; mma.sync's queries per forward block */
    bool forward;  /* has a forward of its own */
    bool backward; /* has a backward of its own */
} variants[] = {
    {"0 production", PRODUCTION, 0, true, true},
    {"1 WMMA 32-query tiles", WMMA, 32, true, true},
    {"2 WMMA 64-query tiles", WMMA, 64, true, true},
    {"3 WMMA, D computed once", WMMA_D_ONCE, 64, false, true},
    {"4 mma.sync 64-query", MMA, 64, true, true},
    {"5 mma.sync 128-query", MMA, 128, true, false},
    {"6 unfused cuBLASLt", UNFUSED, 0, true, true},
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])

static int current; /* the variant being checked or timed */

static ferry_status run_forward(lab *L, attn *k)
{
    switch (variants[current].k) {
    case WMMA:
        return cudaop_attention_forward_wmma(L->stream, L->act, variants[current].tile, k->out, k->lse, k->qkv, k->B,
                                             k->T, k->C, k->NH, NULL);
    case MMA:
        return cudaop_attention_forward_mma(L->stream, L->act, variants[current].tile, k->out, k->lse, k->qkv, k->B,
                                            k->T, k->C, k->NH, NULL);
    case UNFUSED:
        return lab_attention_unfused_forward(L->stream, L->act, k->out, k->lse, k->qkv, k->B, k->T, k->C, k->NH,
                                             k->scratch);
    default: return ops_attention_forward(L->s, k->out, k->lse, k->qkv, k->B, k->T, k->C, k->NH, NULL);
    }
}

static ferry_status run_backward(lab *L, attn *k)
{
    switch (variants[current].k) {
    case WMMA:
        return cudaop_attention_backward_wmma(L->stream, L->act, variants[current].tile, k->dqkv, k->dout, k->qkv,
                                              k->out, k->lse, k->delta, k->B, k->T, k->C, k->NH, NULL);
    case WMMA_D_ONCE:
        return lab_attention_backward1(L->stream, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->B, k->T, k->C, k->NH,
                                       k->scratch);
    case MMA:
        return cudaop_attention_backward_mma(L->stream, L->act, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->delta,
                                             k->B, k->T, k->C, k->NH, NULL);
    case UNFUSED:
        return lab_attention_unfused_backward(L->stream, L->act, k->dqkv, k->dout, k->B, k->T, k->C, k->NH,
                                              k->scratch);
    default:
        return ops_attention_backward(L->s, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->delta, k->B, k->T, k->C,
                                      k->NH, NULL);
    }
}

static void forward(lab *L, void *p) { lab_must(run_forward(L, p), variants[current].name); }
static void backward(lab *L, void *p) { lab_must(run_backward(L, p), variants[current].name); }

/* The scratch the variant needs, or 0. */
static size_t scratch_bytes(const attn *k)
{
    switch (variants[current].k) {
    case WMMA_D_ONCE: return lab_attention_backward1_scratch_bytes(k->B, k->T, k->NH);
    case UNFUSED: return lab_attention_unfused_scratch_bytes(k->B, k->T, k->C, k->NH);
    default: return 0;
    }
}

/* Whether this variant runs here: its storage type (variant 3 is bf16's),
 * and the card holds and has it (a refusal is FERRY_ERR_UNSUPPORTED, said
 * and skipped). Runs the forward (its own, or the production one that
 * leaves the out and lse a backward-only variant reads) and the backward
 * once. */
static bool fits(lab *L, attn *k)
{
    if (variants[current].k == WMMA_D_ONCE && !lab_bf16_variant(L, "attention_backward", variants[current].name))
        return false;
    const int self = current;
    if (!variants[current].forward)
        current = 0;
    ferry_status st = run_forward(L, k);
    current = self;
    if (st == FERRY_OK)
        st = run_backward(L, k);
    if (st == FERRY_OK)
        return true;
    lab_must(st == FERRY_ERR_UNSUPPORTED ? FERRY_OK : st, variants[current].name);
    printf("skip   %-30s %-26s %s\n", "attention", variants[current].name, ferry_last_error());
    fflush(stdout);
    return false;
}

/* HS = 64 as GPT-2's, T not a multiple of any tile. */
static void check(lab *L)
{
    const int B = 2, T = 96 + 7, C = 192, NH = 3;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = lab_rand(L, nqkv, -2, 2), *dout = lab_rand(L, nout, -1, 1), *dqkv0 = lab_rand(L, nqkv, -1, 1);
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4), *dqkv = malloc(nqkv * 4), *delta = malloc(nlse * 4);
    lab_must(hostop_attention_forward(out, lse, qkv, B, T, C, NH, NULL), "host attention");
    for (current = 0; current < N_VARIANTS; current++) {
        attn k = {B, T, C, NH, lab_alloc(L, nout * 2), lab_up_16(L, qkv, nqkv), lab_up_16(L, dout, nout),
                  lab_up_16(L, dqkv0, nqkv), lab_alloc(L, nlse * 4), lab_alloc(L, nlse * 4), NULL};
        k.scratch = lab_alloc(L, scratch_bytes(&k));
        if (fits(L, &k)) {
            backend_free(L->be, k.dqkv); /* fits() ran the backward into it: start again */
            k.dqkv = lab_up_16(L, dqkv0, nqkv);
            const int self = current;
            if (!variants[current].forward)
                current = 0;
            forward(L, &k);
            if (variants[current].forward && current == self) {
                lab_check_16(L, "attention_forward", variants[current].name, k.out, out, nout, 2e-2);
                lab_check_f32(L, "attention_forward lse", variants[current].name, k.lse, lse, nlse, 1e-2);
            }
            current = self;
            /* The backward from the device's own forward output, as training runs it. */
            float *out_dev = lab_down_16(L, k.out, nout), *lse_dev = lab_down_f32(L, k.lse, nlse);
            memcpy(dqkv, dqkv0, nqkv * sizeof *dqkv);
            lab_must(hostop_attention_backward(dqkv, dout, qkv, out_dev, lse_dev, delta, B, T, C, NH, NULL),
                     "host attention bwd");
            if (variants[current].backward) {
                backward(L, &k);
                lab_check_16(L, "attention_backward dqkv", variants[current].name, k.dqkv, dqkv, nqkv, 2e-2);
                if (variants[current].k != WMMA_D_ONCE && variants[current].k != UNFUSED) /* no delta of theirs */
                    lab_check_f32(L, "attention_backward delta", variants[current].name, k.delta, delta, nlse, 1e-2);
            }
            free(out_dev), free(lse_dev);
        }
        LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse, k.delta, k.scratch);
    }
    free(qkv), free(dout), free(dqkv0), free(dqkv), free(out), free(lse), free(delta);
}

void lab_attention(lab *L)
{
    check(L);
    const lab_sizes z = L->z;
    const size_t nc = (size_t)z.B * z.T * z.C, nlse = (size_t)z.B * z.NH * z.T;
    /* 4 B NH T^2 HS for QK^T and PV, halved by the causal mask */
    const double fwd = 2.0 * z.B * z.NH * (double)z.T * z.T * ((double)z.C / z.NH);
    attn k = {z.B, z.T, z.C, z.NH, lab_zeros(L, nc * 2), lab_random_16(L, 3 * nc, 1), lab_random_16(L, nc, 1),
              lab_zeros(L, 3 * nc * 2), lab_zeros(L, nlse * 4), lab_zeros(L, nlse * 4), NULL};
    for (current = 0; current < N_VARIANTS; current++) {
        k.scratch = lab_alloc(L, scratch_bytes(&k));
        if (fits(L, &k)) { /* also the out and lse this variant's backward reads */
            if (variants[current].forward)
                lab_time(L, "attention_forward", variants[current].name, forward, &k, fwd, LAB_FLOPS);
            if (variants[current].backward)
                lab_time(L, "attention_backward", variants[current].name, backward, &k, 2.5 * fwd, LAB_FLOPS);
        }
        LAB_FREE(L, k.scratch);
    }
    LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse, k.delta);
}
