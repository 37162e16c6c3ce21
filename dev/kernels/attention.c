/* Kernel lab: causal multi-head attention, forward (out and the
 * log-sum-exp) and the accumulating backward. Reference:
 * hostop_attention_* (a T x T score matrix per head, fp32); production:
 * ops_attention_* (kernels/attention.cu, FlashAttention-2 style). Flops
 * count the causal half of the score and P @ V products. Backward variant 1
 * (dev/kernels/attention_variants.cu) computes D = rowsum(dO * O) once
 * instead of in every key block's pass over each query tile. */
#include "dev/kernels/lab.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/ops_host.h"

typedef struct attn {
    int B, T, C, NH;
    void *out, *qkv, *dout, *dqkv;
    float *lse;
    void *scratch; /* variant 1's D */
} attn;

static void forward(lab *L, void *p)
{
    attn *k = p;
    lab_must(ops_attention_forward(L->s, k->out, k->lse, k->qkv, k->B, k->T, k->C, k->NH), "attention");
}

static void backward1(lab *L, void *p);

static void backward(lab *L, void *p)
{
    attn *k = p;
    lab_must(ops_attention_backward(L->s, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->B, k->T, k->C, k->NH),
             "attention bwd");
}

/* HS = 64 as GPT-2's, T not a multiple of the 64-query tile. */
static void check(lab *L)
{
    const int B = 2, T = 96, C = 192, NH = 3;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = lab_rand(L, nqkv, -2, 2), *dout = lab_rand(L, nout, -1, 1), *dqkv = lab_rand(L, nqkv, -1, 1);
    float *dqkv_start = malloc(nqkv * 4);
    memcpy(dqkv_start, dqkv, nqkv * 4);
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4);
    attn k = {B, T, C, NH, lab_alloc(L, nout * 2), lab_up_bf16(L, qkv, nqkv), lab_up_bf16(L, dout, nout),
              lab_up_bf16(L, dqkv, nqkv), lab_alloc(L, nlse * 4), NULL};
    lab_must(hostop_attention_forward(out, lse, qkv, B, T, C, NH), "host attention");
    forward(L, &k);
    lab_check_bf16(L, "attention_forward", "0 production", k.out, out, nout, 2e-2);
    /* The backward from the device's own forward output, as training runs it. */
    float *out_dev = lab_down_bf16(L, k.out, nout), *lse_dev = lab_down_f32(L, k.lse, nlse);
    lab_must(hostop_attention_backward(dqkv, dout, qkv, out_dev, lse_dev, B, T, C, NH), "host attention bwd");
    backward(L, &k);
    lab_check_bf16(L, "attention_backward dqkv", "0 production", k.dqkv, dqkv, nqkv, 2e-2);
    /* Variant 1 from the same start: dqkv as before the production backward. */
    LAB_FREE(L, k.dqkv);
    k.dqkv = lab_up_bf16(L, dqkv_start, nqkv);
    k.scratch = lab_alloc(L, lab_attention_backward1_scratch_bytes(B, T, NH));
    backward1(L, &k);
    lab_check_bf16(L, "attention_backward dqkv", "1 D computed once", k.dqkv, dqkv, nqkv, 2e-2);
    LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse, k.scratch);
    free(dqkv_start);
    free(qkv), free(dout), free(dqkv), free(out), free(lse), free(out_dev), free(lse_dev);
}

static void backward1(lab *L, void *p)
{
    attn *k = p;
    lab_must(lab_attention_backward1(L->stream, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->B, k->T, k->C, k->NH,
                                     k->scratch),
             "attention bwd variant 1");
}

void lab_attention(lab *L)
{
    check(L);
    const lab_sizes z = L->z;
    const size_t nc = (size_t)z.B * z.T * z.C;
    attn k = {z.B, z.T, z.C, z.NH, lab_zeros(L, nc * 2), lab_random_bf16(L, 3 * nc, 1),
              lab_random_bf16(L, nc, 1), lab_zeros(L, 3 * nc * 2), lab_zeros(L, (size_t)z.B * z.NH * z.T * 4),
              NULL};
    /* 4 B NH T^2 HS for QK^T and PV, halved by the causal mask */
    const double fwd = 2.0 * z.B * z.NH * (double)z.T * z.T * ((double)z.C / z.NH);
    forward(L, &k); /* the out and lse the backward reads */
    lab_time(L, "attention_forward", "0 production", forward, &k, fwd, LAB_FLOPS);
    lab_time(L, "attention_backward", "0 production", backward, &k, 2.5 * fwd, LAB_FLOPS);
    k.scratch = lab_alloc(L, lab_attention_backward1_scratch_bytes(z.B, z.T, z.NH));
    lab_time(L, "attention_backward", "1 D computed once", backward1, &k, 2.5 * fwd, LAB_FLOPS);
    LAB_FREE(L, k.out, k.qkv, k.dout, k.dqkv, k.lse, k.scratch);
}
