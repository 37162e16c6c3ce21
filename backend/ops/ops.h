/* The op set — GPT-2's forward and backward, and the device optimizer of
 * offload none — launched on a backend stream.
 *
 * Each op has a host version (backend/ops/<op>.c: plain C, OpenBLAS for matmuls,
 * fp32, run as a host function on the stream's worker thread) and a CUDA
 * version (backend/ops/<op>.cu: bf16 or fp16 storage, fp32 accumulation) with
 * the same shape. The ops are those of the registry (backend/ops/op_list.h);
 * ops_* checks the arguments and forwards to the op table of the stream's
 * backend (backend/backend_impl.h); no caller branches on the backend.
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
#ifndef FERRY_BACKEND_OPS_OPS_H
#define FERRY_BACKEND_OPS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/numerics.h"
#include "backend/backend.h"
#include "backend/comm.h"
#include "backend/ops/op_list.h"

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

/* The ops, one per entry of the registry (backend/ops/op_list.h, which says what
 * each computes and what its arguments must hold): ops_<name>(stream, the
 * op's arguments), declared by OPS_DECLARE below. So that grep finds each,
 * here they are by name, in FERRY_OPS's order (tests/ops/test_op_registry.c
 * fails when this list and the registry differ):
 *   ops_encoder_forward     out = wte[token] + wpe[position]: the token (and position) embedding
 *   ops_encoder_backward    adds dout into the rows of dwte (and dwpe) the forward read
 *   ops_layernorm_forward   LayerNorm of N rows of C, saving mean and rstd
 *   ops_layernorm_backward  adds LayerNorm's gradients into dinp, dweight and dbias
 *   ops_matmul_forward      out = inp @ weight^T + bias: a linear layer
 *   ops_matmul_backward     adds the linear layer's gradients into dinp, dweight and dbias
 *   ops_gelu_forward        GELU, tanh form, element-wise
 *   ops_gelu_backward       adds dout * gelu'(inp) into dinp
 *   ops_residual_forward    out = a + b, element-wise
 *   ops_attention_forward   causal multi-head self-attention, saving each query's log-sum-exp
 *   ops_attention_backward  adds attention's gradient into dqkv
 *   ops_classifier          the fused classifier: losses, and their gradients into dinp and dwte
 *   ops_convert_from_f32    fp32 values to the storage type
 *   ops_convert_to_f32      the storage type to fp32 values
 *   ops_adamw               AdamW on one tensor on the device (offload none)
 *   ops_sumsq               adds a gradient's sum of squares into one fp64, deterministically
 *   ops_accumulate          a micro-batch's gradient into the step's fp32 sum
 *   ops_rmsnorm_forward     RMSNorm of N rows of C, saving rstd
 *   ops_rmsnorm_backward    adds RMSNorm's gradients into dinp and dweight
 *   ops_rope_forward        rotary position embedding: query and key heads rotated into qkv, values copied
 *   ops_rope_backward       adds the inverse rotation of dout into dinp
 *   ops_swiglu_forward      the SiLU-gated MLP's activation: silu(gate) * up
 *   ops_swiglu_backward     adds SwiGLU's gradients into dinp
 *   ops_kv_append           the new tokens' keys and values into the cache, their queries out
 *   ops_kv_append_rope      kv_append with the query and key heads rotated as rope_forward
 *   ops_attention_decode    the new queries' causal attention against the cache
 */
#define OPS_DECLARE(NAME, CUDA, EXTRA) ferry_status ops_##NAME(OPS_PARAMS(NAME));
FERRY_OPS(OPS_DECLARE)

/* The classifier's scratch (ops_classifier): chunk x Vp logits of the
 * storage type, then, when that is 16-bit, the Vp x C fp32 accumulator. */
size_t ops_classifier_scratch_bytes(const backend *be, int chunk, int Vp, int C);
/* The same for a storage type rather than an open backend (planners): the
 * same bytes on every backend. 0 on bad arguments. */
size_t ops_classifier_scratch_bytes_for(ferry_dtype act, int chunk, int Vp, int C);
/* Where the fp32 accumulator starts inside the scratch (16-bit storage). */
size_t ops_classifier_accumulator_offset(ferry_dtype act, int chunk, int Vp);

#define OPS_SUMSQ_PARTIALS 512 /* partial sums in ops_sumsq's scratch, on every backend */

/* ---- collectives: sums across the ranks of a communicator (backend/comm.h) ----
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

/* Checks positions pos[B T] (host memory; NULL passes) against
 * op_list.h's rule: pos[b T] = 0 and each next one 0 (an example starts)
 * or the previous + 1. FERRY_ERR_INVALID_ARGUMENT names `who`, the row,
 * the index in the row, the value and what was allowed there. */
ferry_status ops_check_positions(const char *who, const int32_t *pos, int B, int T);

/* Device memory the backend's matmuls want as workspace (cuBLASLt's, so its
 * heuristics may pick split-K and stream-K kernels): 32 MiB on cuda, 0 on
 * host. Given to ops_init; counts against the caller's budget. */
#define OPS_CUDA_MATMUL_WORKSPACE ((size_t)32 << 20)
size_t ops_workspace_bytes(ferry_backend_kind kind);

#ifdef __cplusplus
}
#endif

#endif
