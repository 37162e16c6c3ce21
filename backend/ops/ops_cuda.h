/* The CUDA versions of the op set (backend/ops/<op>.cu), as backend/ops/ops.c calls
 * them: for each ops_X(backend_stream *s, ARGS...) of backend/ops/ops.h there is
 * cudaop_X(void *stream, ARGS...) with the same ARGS, `stream` being the
 * stream's cudaStream_t (backend_stream_native()), and `act`, the storage
 * type of the backend's tensors (backend_act_dtype(): bf16, or f16 on cards
 * without bf16 tensor cores and by choice), just after it. Math and
 * statistics are fp32, tokens int32. Also the device AdamW and the gradient
 * sum of squares the engine uses when nothing is offloaded.
 *
 * No function here allocates device memory: what an op needs beyond its
 * arguments (the cuBLASLt workspace, the classifier's logits, the sum of
 * squares' partials) is passed in by the caller, so it counts against the
 * engine's budget. Plain C: ops.c includes it; no CUDA header needed. */
#ifndef FERRY_BACKEND_OPS_OPS_CUDA_H
#define FERRY_BACKEND_OPS_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the cuBLASLt handle of the backend's device and remembers
 * `workspace` (device memory of `workspace_bytes`, may be NULL/0) for its
 * matmuls. Matmul descriptors and the chosen algorithms are cached per shape
 * and freed by cudaop_shutdown(). Call from the thread that opened `be`
 * (the backend's device must be current, as after backend_open). The
 * workspace is shared by every stream of the device: matmuls on two streams
 * of one device must not run at the same time unless workspace_bytes is 0. */
ferry_status cudaop_init(backend *be, void *workspace, size_t workspace_bytes);
void cudaop_shutdown(backend *be);

/* The ops of the common binding (backend/ops/op_list.h's OPC_ACT):
 * cudaop_<name>(cudaStream_t, the storage type, the op's arguments). */
#define CUDAOP_PROTO_OPC_ACT(NAME) ferry_status cudaop_##NAME(void *stream, ferry_dtype act FERRY_OP_ARGS_##NAME(OPA_DECL));
#define CUDAOP_PROTO_OPC_OWN(NAME)
#define CUDAOP_PROTO(NAME, CUDA, EXTRA) CUDAOP_PROTO_##CUDA(NAME)
FERRY_OPS(CUDAOP_PROTO)

/* What is particular to some of them:
 * - encoder_backward is deterministic, without atomics or scratch: one
 *   block per token position; the block of a token id's first position
 *   sums every position holding that id, in position order, in fp32, and
 *   adds the sum to dwte once.
 * - attention is FlashAttention-2 style: nothing of size T x T is stored.
 *   Head size C / NH up to 128; larger is FERRY_ERR_UNSUPPORTED. From
 *   Turing on (sm_75 storing f16, sm_80 and newer either type) the kernels
 *   of attention.cu (mma.sync, ldmatrix, cp.async); on Volta those of
 *   attention_wmma.cu (WMMA). The entry points below run one of them with
 *   its tile chosen, for the kernel lab and the tests: _mma with `bq`
 *   queries per forward block (0: the card's choice, 64 or 128), _wmma with
 *   `tile` queries per block (0: the card's choice, 32 or 64); a size the
 *   card cannot hold, or a kernel its architecture lacks, is
 *   FERRY_ERR_UNSUPPORTED. `pos` is the op's positions (NULL: none).
 * - the classifier's `scratch` is ops_classifier_scratch_bytes_for(act,
 *   chunk, Vp, C) bytes of device memory (chunk x Vp logits of the storage
 *   type, then their gradients in place; then the Vp x C fp32 accumulator
 *   of dwte across chunks). Targets >= V are counted
 *   (cudaop_classifier_take_bad_targets) and treated like negative ones:
 *   loss 0, no gradient.
 * - conversions round to nearest even (f32 -> bf16 or f16; past fp16's
 *   range: inf) and widen exactly (-> f32). */

/* Token ids outside [0, V) met by cudaop_encoder_forward on this device since the
 * last call (they were read as token 0). Synchronizes `stream`; resets. */
ferry_status cudaop_encoder_take_bad_tokens(void *stream, uint32_t *count);
ferry_status cudaop_attention_forward_mma(void *stream, ferry_dtype act, int bq, act_t *out, float *lse,
                                          const act_t *qkv, int B, int T, int C, int NH, const int32_t *pos);
ferry_status cudaop_attention_backward_mma(void *stream, ferry_dtype act, act_t *dqkv, const act_t *dout,
                                           const act_t *qkv, const act_t *out, const float *lse, float *delta, int B,
                                           int T, int C, int NH, const int32_t *pos);
ferry_status cudaop_attention_forward_wmma(void *stream, ferry_dtype act, int tile, act_t *out, float *lse,
                                           const act_t *qkv, int B, int T, int C, int NH, const int32_t *pos);
ferry_status cudaop_attention_backward_wmma(void *stream, ferry_dtype act, int tile, act_t *dqkv, const act_t *dout,
                                            const act_t *qkv, const act_t *out, const float *lse, float *delta,
                                            int B, int T, int C, int NH, const int32_t *pos);
/* delta[b, h, t] = dout[b, t, h] . out[b, t, h] over the head's HS values
 * (the attention backward's first pass). */
ferry_status cudaop_attention_delta(void *stream, ferry_dtype act, float *delta, const act_t *dout,
                                    const act_t *out, int B, int T, int C, int NH);
ferry_status cudaop_classifier_take_bad_targets(void *stream, uint32_t *count);

/* torch.optim.AdamW on device, for n elements of one tensor, exactly
 * common/numerics.h's adamw_element (its factors from adamw_consts_make,
 * its operations rounded one by one, the moments' fused multiply-adds as
 * the CPU's), so the bits are the CPU optimizer's:
 *   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p = p (1 - lr wd) + (-lr / (1-b1^step)) m / (sqrt(v) / sqrt(1-b2^step) + eps)
 * master, m, v are fp32 and updated in place; grad is of the storage type
 * act, or fp32 (a sum of micro-batches) when grad_dtype is FERRY_DTYPE_F32;
 * param_out (may be NULL) receives p rounded to act. step >= 1. */
ferry_status cudaop_adamw(void *stream, ferry_dtype act, float *master, float *m, float *v, const void *grad,
                          ferry_dtype grad_dtype, void *param_out, size_t n, const adamw_hparams *hp,
                          int64_t step, float grad_scale);

/* *out_device_sumsq_accumulate += sum of grad^2 (fp64, in device memory),
 * deterministic: a fixed number of blocks and a fixed reduction order, no
 * atomics, so the bits depend only on the data. An inf or NaN gradient makes
 * the sum inf or NaN, which is the flag the caller checks. `scratch` holds
 * cudaop_sumsq_scratch_bytes() bytes of device memory (per-block partials);
 * calls sharing a scratch must be on one stream. */
ferry_status cudaop_sumsq(void *stream, const void *grad, ferry_dtype grad_dtype, size_t n,
                          double *out_device_sumsq_accumulate, void *scratch);
size_t cudaop_sumsq_scratch_bytes(void);

#ifdef __cplusplus
}
#endif

#endif
