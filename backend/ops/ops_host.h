/* The host (reference) implementations of the op set: synchronous, fp32,
 * plain C with OpenBLAS for the matrix products. backend/ops/ops.c launches them
 * on a host stream; tests call them directly (finite differences, references
 * for the CUDA ops). Semantics are those of backend/ops/ops.h, argument for
 * argument, minus the stream: forward ops overwrite their outputs, backward
 * ops ADD into theirs.
 *
 * Every function here is deterministic: the same inputs give the same bits on
 * every run, whatever the number of threads ferry runs (OpenBLAS is called
 * with fixed shapes and summation orders do not depend on any thread count).
 * Functions that can fail (bad token, bad target, out of host memory for a
 * scratch row) return a status with err_set(); the others cannot fail. */
#ifndef FERRY_BACKEND_OPS_OPS_HOST_H
#define FERRY_BACKEND_OPS_OPS_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/numerics.h"
#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[p,:], p = pos[b,t] (pos NULL: t;
 * wpe NULL: none). `V` is the number of rows of
 * wte a token may select (V <= 0: only negative tokens are rejected; the
 * caller vouches for the upper bound). A token outside [0, V) is
 * FERRY_ERR_INVALID_ARGUMENT naming its position and value. */
ferry_status hostop_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, int B, int T, int C, int V, const int32_t *pos);
/* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[p,:] += dout[b,t,:] (dwpe NULL:
 * none). Tokens and positions are those of the forward (already checked;
 * here a position outside [0, t] is clamped there). */
void hostop_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int B, int T, int C, int V, const int32_t *pos);

void hostop_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
void hostop_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

void hostop_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
void hostop_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);

void hostop_gelu_forward(float *out, const float *inp, size_t n);
void hostop_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

void hostop_residual_forward(float *out, const float *a, const float *b, size_t n);

/* Materialises one T x T score matrix per (batch, head) in a malloc'd
 * scratch, so these can fail with FERRY_ERR_OUT_OF_MEMORY. pos (NULL: one
 * example a row) as op_list.h's positions; one outside [0, t] is clamped
 * there (ops_attention_* on the host backend refuses it first). */
ferry_status hostop_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
                                      int C, int NH, const int32_t *pos);
/* The backward also writes delta [B, NH, T] (D_i = dout_i . out_i). */
ferry_status hostop_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse, float *delta, int B,
                                       int T, int C, int NH, const int32_t *pos);

/* `scratch` holds chunk x Vp floats. A target >= V is FERRY_ERR_INVALID_ARGUMENT. */
ferry_status hostop_classifier(float *losses, float *dinp, float *dwte, const float *inp,
                               const float *wte, const int32_t *targets, float grad_scale, int N,
                               int C, int V, int Vp, float *scratch, int chunk);
/* The same with the logits and their gradient rounded to `stored` (bf16 or
 * f16; f32: not rounded) where the CUDA classifier keeps them in its scratch
 * of the storage type (the host backend's 16-bit storage modes). */
ferry_status hostop_classifier_stored(float *losses, float *dinp, float *dwte, const float *inp,
                                      const float *wte, const int32_t *targets, float grad_scale, int N,
                                      int C, int V, int Vp, float *scratch, int chunk, ferry_dtype stored);

/* Llama's ops (backend/ops/op_list.h says what each computes). */
void hostop_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                            float eps);
void hostop_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, int N, int C);
void hostop_rope_forward(float *out, const float *inp, const float *inv_freq, const int32_t *pos, int B, int T,
                         int NH, int NKV, int HS);
void hostop_rope_backward(float *dinp, const float *dout, const float *inv_freq, const int32_t *pos, int B, int T,
                          int NH, int NKV, int HS);
void hostop_swiglu_forward(float *out, const float *inp, int N, int I);
void hostop_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int I);

/* Generation's cache ops (backend/ops/attention_decode.c); inv_freq NULL:
 * kv_append, no rotation. */
void hostop_kv_append(float *q, float *kcache, float *vcache, const float *qkv, const float *inv_freq, int pos0,
                      int B, int Tq, int NH, int NKV, int HS, int Tmax);
ferry_status hostop_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int pos0,
                                     int B, int Tq, int NH, int NKV, int HS, int Tmax);

void hostop_convert_copy(float *dst, const float *src, size_t n);

/* AdamW over n elements (common/numerics.h's arithmetic): grad holds
 * grad_dtype elements, param_out (may be NULL) `act` ones (f32, bf16 or f16);
 * step >= 1. */
void hostop_adamw(float *master, float *m, float *v, const void *grad, ferry_dtype grad_dtype,
                  void *param_out, ferry_dtype act, size_t n, const adamw_hparams *hp, int64_t step,
                  float grad_scale);
/* The sum of squares of n `act` elements, tile by tile in tile order
 * (common/numerics.h): bitwise the CPU optimizer's gradnorm_sumsq. */
double hostop_sumsq(const void *grad, ferry_dtype act, size_t n);


#ifdef __cplusplus
}
#endif

#endif
