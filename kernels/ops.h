/* The op set — GPT-2's forward and backward, and the device optimizer of
 * offload none — launched on a backend stream.
 *
 * Each op has a host version (kernels/<op>.c: plain C, OpenBLAS for matmuls,
 * fp32, run as a host function on the stream's worker thread) and a CUDA
 * version (kernels/<op>.cu: bf16 or fp16 storage, fp32 accumulation) with
 * the same shape. ops_* checks the arguments and forwards to the op table of the
 * stream's backend (kernels/backend_impl.h); no caller branches on the
 * backend.
 *
 * Element types: tensors typed `act_t *` (void) hold the backend's storage
 * type, backend_act_dtype(): fp32 on host, bf16 on cuda from sm_80 and fp16
 * below (either may be chosen on host, fp16 on any card). That covers
 * parameters, their gradients and activations. Statistics (layernorm mean and
 * rstd, attention log-sum-exp, losses) are always fp32; token ids int32.
 *
 * Accumulation: every backward op ADDS into its outputs (parameter gradients
 * and input gradients alike), so gradients accumulate over micro-batches and
 * over the two paths into the residual stream; callers zero what must start
 * from zero. Forward ops overwrite their outputs.
 *
 * Layouts follow llm.c: activations [B, T, C] row-major; a linear layer's
 * weight is [OC, C] (out = inp @ weight^T + bias). Hugging Face's Conv1D
 * [C, OC] layout is converted at load/save time, not here.
 *
 * Every function returns FERRY_OK or the status of a failed launch; errors
 * inside a running host op are reported by the stream's next synchronize. */
#ifndef FERRY_KERNELS_OPS_H
#define FERRY_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/numerics.h"
#include "kernels/backend.h"
#include "kernels/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void act_t; /* backend_act_dtype() elements: float on host, bf16 or fp16 on cuda */

/* The storage type of the backend's tensors: FERRY_DTYPE_F32, _BF16 or
 * _F16. The default is the backend's own (host f32; cuda bf16 from sm_80,
 * f16 on sm_70 and sm_75); the host backend can also store bf16 or f16 (its
 * ops then round where the CUDA ops store them), so the engine's 16-bit
 * paths run without a GPU. Set it once, before the backend holds any device
 * buffer; AUTO keeps the default. FERRY_ERR_UNSUPPORTED for a type the
 * backend's ops cannot store or its device cannot compute in (bf16 below
 * sm_80, with a sentence naming the card), FERRY_ERR_STATE after
 * allocations. */
ferry_dtype backend_act_dtype(const backend *be);
ferry_status backend_set_act_dtype(backend *be, ferry_dtype act);

/* Call once per backend before launching ops: creates cuBLASLt handles and
 * cached descriptors on cuda; nothing on host. Freed by ops_shutdown(). The
 * cuBLASLt workspace (`workspace_bytes`, may be 0) is caller-provided device
 * memory, so it counts against the caller's budget. */
ferry_status ops_init(backend *be, void *workspace, size_t workspace_bytes);
void ops_shutdown(backend *be);

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; wte has at least V rows. A
 * token outside [0, V) makes the stream fail with FERRY_ERR_INVALID_ARGUMENT
 * (host) or is read as token 0 and counted (cuda: see
 * cudaop_encoder_take_bad_tokens); callers check tokens before upload. */
ferry_status ops_encoder_forward(backend_stream *s, act_t *out, const int32_t *tokens,
                                 const act_t *wte, const act_t *wpe, int B, int T, int C, int V);
/* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum over b of dout[b,t,:].
 * dwte has V rows; a token outside [0, V) adds into row 0, the row the
 * forward read for it (never outside dwte). */
ferry_status ops_encoder_backward(backend_stream *s, act_t *dwte, act_t *dwpe, const act_t *dout,
                                  const int32_t *tokens, int B, int T, int C, int V);

/* N rows of C; eps 1e-5 as GPT-2. mean and rstd are [N] fp32, saved for backward. */
ferry_status ops_layernorm_forward(backend_stream *s, act_t *out, float *mean, float *rstd,
                                   const act_t *inp, const act_t *weight, const act_t *bias,
                                   int N, int C);
ferry_status ops_layernorm_backward(backend_stream *s, act_t *dinp, act_t *dweight, act_t *dbias,
                                    const act_t *dout, const act_t *inp, const act_t *weight,
                                    const float *mean, const float *rstd, int N, int C);

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be NULL). */
ferry_status ops_matmul_forward(backend_stream *s, act_t *out, const act_t *inp,
                                const act_t *weight, const act_t *bias, int N, int C, int OC);
/* dinp += dout @ weight; dweight += dout^T @ inp; dbias += sum over rows of
 * dout (dbias may be NULL). */
ferry_status ops_matmul_backward(backend_stream *s, act_t *dinp, act_t *dweight, act_t *dbias,
                                 const act_t *dout, const act_t *inp, const act_t *weight, int N,
                                 int C, int OC);

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
ferry_status ops_gelu_forward(backend_stream *s, act_t *out, const act_t *inp, size_t n);
ferry_status ops_gelu_backward(backend_stream *s, act_t *dinp, const act_t *inp,
                               const act_t *dout, size_t n);

/* out = a + b, n elements. */
ferry_status ops_residual_forward(backend_stream *s, act_t *out, const act_t *a, const act_t *b,
                                  size_t n);

/* Causal multi-head self-attention. qkv is [B, T, 3C] (q, k, v each C = NH x
 * HS, heads contiguous inside each); out is [B, T, C]; lse is [B, NH, T] fp32:
 * the log-sum-exp of each query's scaled scores, kept for backward so no T x T
 * matrix is ever stored. scale = 1/sqrt(HS). */
ferry_status ops_attention_forward(backend_stream *s, act_t *out, float *lse, const act_t *qkv,
                                   int B, int T, int C, int NH);
ferry_status ops_attention_backward(backend_stream *s, act_t *dqkv, const act_t *dout,
                                    const act_t *qkv, const act_t *out, const float *lse, int B,
                                    int T, int C, int NH);

/* The fused classifier. For N rows of inp [N, C] against wte [Vp, C] (only
 * the first V rows are real tokens; padded rows never enter the softmax):
 * losses[i] = -log softmax(inp[i] @ wte^T)[targets[i]]. When dinp is not
 * NULL, also accumulates the gradient of grad_scale * sum(losses):
 * dinp += dlogits @ wte and dwte += dlogits^T @ inp, where
 * dlogits = grad_scale * (softmax - onehot). Rows are processed `chunk` at a
 * time through `scratch` (ops_classifier_scratch_bytes): chunk x Vp logits
 * in the storage type, so the full N x Vp logits never exist at once; and,
 * when the storage is 16-bit, a Vp x C fp32 accumulator in which dwte's
 * contributions of every chunk are summed, so dwte is rounded once
 * per call, not once per chunk (at GPT-2 XL's batch 76 x 1024 that was 234
 * roundings of the embedding's gradient per micro-batch). Targets < 0 are
 * ignored (loss 0, no gradient). */
ferry_status ops_classifier(backend_stream *s, float *losses, act_t *dinp, act_t *dwte,
                            const act_t *inp, const act_t *wte, const int32_t *targets,
                            float grad_scale, int N, int C, int V, int Vp, void *scratch,
                            int chunk);
size_t ops_classifier_scratch_bytes(const backend *be, int chunk, int Vp, int C);
/* The same for a storage type rather than an open backend (planners): the
 * same bytes on every backend. 0 on bad arguments. */
size_t ops_classifier_scratch_bytes_for(ferry_dtype act, int chunk, int Vp, int C);
/* Where the fp32 accumulator starts inside the scratch (16-bit storage). */
size_t ops_classifier_accumulator_offset(ferry_dtype act, int chunk, int Vp);

/* Conversions between fp32 host-side values and the backend's storage type,
 * on device memory: dst[i] = (act)src[i] and back. */
ferry_status ops_convert_from_f32(backend_stream *s, act_t *dst, const float *src, size_t n);
ferry_status ops_convert_to_f32(backend_stream *s, float *dst, const act_t *src, size_t n);

/* ---- the optimizer of offload none, on the device ---- */

/* torch.optim.AdamW on n elements of one tensor, in stream order (the
 * element arithmetic of common/numerics.h): master, m, v are fp32 device
 * buffers updated in place; grad is of grad_dtype — the storage type, or
 * F32 for gradients summed over micro-batches (ops_accumulate) —,
 * multiplied by grad_scale (the clip coefficient) first; param_out (may be
 * NULL) receives the updated weights in the storage type. step >= 1. */
ferry_status ops_adamw(backend_stream *s, float *master, float *m, float *v, const void *grad,
                       ferry_dtype grad_dtype, act_t *param_out, size_t n, const adamw_hparams *hp,
                       int64_t step, float grad_scale);

/* *sumsq (one fp64 in device memory) += the sum of grad[i]^2 over n elements
 * in the storage type, deterministically: the bits depend only on the data
 * (host: common/numerics.h's tiled order; cuda: a fixed reduction tree). An
 * inf or NaN gradient makes the sum inf or NaN, which is the flag callers
 * check. `scratch` holds ops_sumsq_scratch_bytes() of device memory; calls
 * sharing a scratch must be on one stream. */
ferry_status ops_sumsq(backend_stream *s, const void *grad, ferry_dtype grad_dtype, size_t n, double *sumsq,
                       void *scratch);

/* acc[i] = g[i] (first) or acc[i] + g[i] over n elements, in fp32: one
 * micro-batch's gradient (the storage type) added into the fp32 sum of the
 * step's micro-batches, so accumulating k micro-batches rounds to fp32, not
 * to bf16, k times. Exact fp32 adds in element order: the same bits as the
 * CPU's acc += widen(g). */
ferry_status ops_accumulate(backend_stream *s, float *acc, const act_t *g, size_t n, bool first);
#define OPS_SUMSQ_PARTIALS 512 /* partial sums in the scratch, on every backend */

/* ---- collectives: sums across the ranks of a communicator (kernels/comm.h) ----
 *
 * Launched on a stream like a copy, in stream order, on device buffers of
 * the comm's backend, of type t (f32, bf16 or f16). Every rank issues the
 * same collectives of a communicator in the same order, each from the one
 * stream that uses the communicator. N = backend_comm_size(c), r its rank.
 * Sums: on the host backend in rank order in fp32 (rank 0's value, plus
 * rank 1's, ...; 16-bit types widened and the sum rounded once), the same
 * bits on every rank and as one process adding its N micro-batches; on the
 * cuda backend NCCL's order (every rank the same bits, the order NCCL's).
 * A collective that fails (a rank died, the timeout, another rank's
 * failure) makes the stream fail, reported by its next synchronize. */

/* recv[0..count) = the sum over ranks of their send[r * count ..
 * (r + 1) * count): send holds N * count elements. */
ferry_status ops_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                ferry_dtype t);
/* recv[p * count .. (p + 1) * count) = rank p's send[0..count): recv holds
 * N * count elements; send may be recv + r * count (in place). */
ferry_status ops_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                            ferry_dtype t);
/* recv[0..count) = the sum over ranks of send[0..count); send may be recv. */
ferry_status ops_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                            ferry_dtype t);
size_t ops_sumsq_scratch_bytes(void);

/* Device memory the backend's matmuls want as workspace (cuBLASLt's, so its
 * heuristics may pick split-K and stream-K kernels): 32 MiB on cuda, 0 on
 * host. Given to ops_init; counts against the caller's budget. */
#define OPS_CUDA_MATMUL_WORKSPACE ((size_t)32 << 20)
size_t ops_workspace_bytes(ferry_backend_kind kind);

#ifdef __cplusplus
}
#endif

#endif
