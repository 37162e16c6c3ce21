/* The op registry: every op of the backend table, once. From this list come
 * the slots of backend_ops (backend_impl.h), the declarations of ops.h, the
 * checked fronts of ops.c, the entries of both tables (ops_host.c,
 * ops_cuda.c), the cuda wrappers and cudaop_* prototypes of the ops that
 * follow the common binding (ops_cuda.h), and, outside the product, the
 * descriptions the op tests and the kernel lab drive over their shape
 * tables (dev/ops/opinfo.h, dev/ops/op_shapes.h).
 *
 * FERRY_OPS(OP) lists OP(name, CUDA, extra) for each op:
 *   name   ops_<name>, the slot <name>, hostop_/cudaop_<name>;
 *   CUDA   OPC_ACT: the cuda table runs cudaop_<name>(cudaStream_t, the
 *          storage type, the op's arguments), declared here; OPC_OWN: its
 *          cuda_<name> in ops_cuda.c binds it otherwise;
 *   extra  a check beyond the arguments' own (an expression of the
 *          arguments, `op` the op's name, `s` the stream), FERRY_OK when
 *          there is none.
 * FERRY_OP_ARGS_<name>(A) lists the arguments after the stream, in order,
 * as A(kind, name, extent, aux):
 *   DIM        int, > 0                      COUNT   size_t, > 0
 *   COUNT0     size_t; 0 makes the op do nothing (after `extra`)
 *   INT        int, checked by `extra`       F32V    float      I64V int64_t
 *   BOOLV      bool                          DTYPE   ferry_dtype
 *   HPARAMS    const adamw_hparams *, checked by `extra`
 *   ACT_IN, ACT_OUT, ACT_ADD                 tensors of the storage type
 *   ACT_IN_OPT, ACT_OUT_OPT, ACT_ADD_OPT     the same, NULL allowed
 *   F32_IN, F32_OUT, F32_ADD                 float tensors
 *   F64_ADD    double tensor                 I32_IN  int32 tensor
 *   POS_IN_OPT int32 positions within each example (below), NULL allowed
 *   RAW        device bytes (scratch)        TYPED_IN const void *, of type `aux`
 * `extent` is the elements a tensor must hold (bytes for RAW), an
 * expression of the arguments; `aux` is a TYPED_IN's type, an I32_IN's
 * bound (the values are in [0, aux): the drivers draw them so) and a
 * POS_IN_OPT's row length T, else 0.
 *
 * Positions (POS_IN_OPT, the packing of several examples into one row of
 * T tokens): pos[b T + t] is token t's index within its example: 0 at an
 * example's first token, pos[b T + t - 1] + 1 inside it; so pos[b T] = 0
 * and 0 <= pos[b T + t] <= t. The example of token t starts at t -
 * pos[b T + t], and attention lets query t see the keys j with t -
 * pos[b T + t] <= j <= t (its own example's prefix, nothing else). NULL
 * is one example a row (pos = t), the op's plain form, with the same bits
 * as before positions existed. The host ops refuse positions that break
 * the rule (FERRY_ERR_INVALID_ARGUMENT naming row, index and value); the
 * cuda ones clamp each into [0, t] and never read or write outside their
 * tensors, but their result is then undefined: callers check positions on
 * the host before the upload (ops_check_positions). The drivers draw
 * examples of random lengths.
 *
 * OUT tensors are written whole, ADD tensors added into (every backward op
 * accumulates), IN tensors only read.
 *
 * Adding an op (docs/design.md, "How to add an op"): its entry and
 * argument list here (with what it computes), backend/ops/<name>.c (the host
 * reference, declared in ops_host.h) and its launch in ops_host.c,
 * backend/ops/<name>.cu, its name in backend/meson.build, its ops_<name>
 * line in ops.h's list of the generated ops, a row of dev/ops/op_shapes.h
 * and its double-precision reference in tests/ops/op_refs.h; the checks,
 * the tables, the op tests and the lab's check follow. */
#ifndef FERRY_BACKEND_OPS_OP_LIST_H
#define FERRY_BACKEND_OPS_OP_LIST_H

#define FERRY_OPS(OP)                                                                                   \
    OP(encoder_forward, OPC_ACT, FERRY_OK)                                                              \
    OP(encoder_backward, OPC_ACT, FERRY_OK)                                                             \
    OP(layernorm_forward, OPC_ACT, FERRY_OK)                                                            \
    OP(layernorm_backward, OPC_ACT, FERRY_OK)                                                           \
    OP(matmul_forward, OPC_ACT, FERRY_OK)                                                               \
    OP(matmul_backward, OPC_ACT, FERRY_OK)                                                              \
    OP(gelu_forward, OPC_ACT, FERRY_OK)                                                                 \
    OP(gelu_backward, OPC_ACT, FERRY_OK)                                                                \
    OP(residual_forward, OPC_ACT, FERRY_OK)                                                             \
    OP(attention_forward, OPC_ACT, opx_heads(op, C, NH))                                                \
    OP(attention_backward, OPC_ACT, opx_heads(op, C, NH))                                               \
    OP(classifier, OPC_ACT, opx_classifier(op, V, Vp, dinp, dwte))                                      \
    OP(convert_from_f32, OPC_ACT, FERRY_OK)                                                             \
    OP(convert_to_f32, OPC_ACT, FERRY_OK)                                                               \
    OP(adamw, OPC_OWN, opx_adamw(op, s, grad_dtype, hp, step, grad_scale))                              \
    OP(sumsq, OPC_OWN, opx_grad_dtype(op, s, grad_dtype))                                               \
    OP(accumulate, OPC_ACT, FERRY_OK)                                                                   \
    OP(rmsnorm_forward, OPC_ACT, FERRY_OK)                                                              \
    OP(rmsnorm_backward, OPC_ACT, FERRY_OK)                                                             \
    OP(rope_forward, OPC_ACT, opx_rope(op, NH, NKV, HS))                                                \
    OP(rope_backward, OPC_ACT, opx_rope(op, NH, NKV, HS))                                               \
    OP(swiglu_forward, OPC_ACT, FERRY_OK)                                                               \
    OP(swiglu_backward, OPC_ACT, FERRY_OK)                                                              \
    OP(kv_append, OPC_ACT, opx_kv(op, NH, NKV, HS, pos0, Tq, Tmax, false))                              \
    OP(kv_append_rope, OPC_ACT, opx_kv(op, NH, NKV, HS, pos0, Tq, Tmax, true))                          \
    OP(attention_decode, OPC_ACT, opx_kv(op, NH, NKV, HS, pos0, Tq, Tmax, false))

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[p,:], p = pos[b,t] (pos NULL: p =
 * t); wpe NULL: no position embedding, as Llama's token embedding alone;
 * wte has at least V rows. A
 * token outside [0, V) makes the stream fail with FERRY_ERR_INVALID_ARGUMENT
 * (host) or is read as token 0 and counted (cuda: see
 * cudaop_encoder_take_bad_tokens); callers check tokens before upload. */
#define FERRY_OP_ARGS_encoder_forward(A)                                                                \
    A(ACT_OUT, out, (size_t)B * T * C, 0) A(I32_IN, tokens, (size_t)B * T, V)                           \
    A(ACT_IN, wte, (size_t)V * C, 0) A(ACT_IN_OPT, wpe, (size_t)T * C, 0)                               \
    A(DIM, B, 0, 0) A(DIM, T, 0, 0) A(DIM, C, 0, 0) A(DIM, V, 0, 0) A(POS_IN_OPT, pos, (size_t)B * T, T)
/* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[p,:] += the sum of dout[b,t,:]
 * over every (b, t) with pos[b,t] = p (pos NULL: t = p), in (b, t) order
 * (dwpe NULL: none). dwte has V rows; a token outside [0, V) adds into row 0, the row the
 * forward read for it (never outside dwte). */
#define FERRY_OP_ARGS_encoder_backward(A)                                                               \
    A(ACT_ADD, dwte, (size_t)V * C, 0) A(ACT_ADD_OPT, dwpe, (size_t)T * C, 0)                           \
    A(ACT_IN, dout, (size_t)B * T * C, 0) A(I32_IN, tokens, (size_t)B * T, V)                           \
    A(DIM, B, 0, 0) A(DIM, T, 0, 0) A(DIM, C, 0, 0) A(DIM, V, 0, 0) A(POS_IN_OPT, pos, (size_t)B * T, T)

/* N rows of C; eps 1e-5 as GPT-2. mean and rstd are [N] fp32, saved for backward. */
#define FERRY_OP_ARGS_layernorm_forward(A)                                                              \
    A(ACT_OUT, out, (size_t)N * C, 0) A(F32_OUT, mean, (size_t)N, 0) A(F32_OUT, rstd, (size_t)N, 0)     \
    A(ACT_IN, inp, (size_t)N * C, 0) A(ACT_IN, weight, (size_t)C, 0) A(ACT_IN, bias, (size_t)C, 0)      \
    A(DIM, N, 0, 0) A(DIM, C, 0, 0)
#define FERRY_OP_ARGS_layernorm_backward(A)                                                             \
    A(ACT_ADD, dinp, (size_t)N * C, 0) A(ACT_ADD, dweight, (size_t)C, 0)                                \
    A(ACT_ADD, dbias, (size_t)C, 0) A(ACT_IN, dout, (size_t)N * C, 0) A(ACT_IN, inp, (size_t)N * C, 0)  \
    A(ACT_IN, weight, (size_t)C, 0) A(F32_IN, mean, (size_t)N, 0) A(F32_IN, rstd, (size_t)N, 0)         \
    A(DIM, N, 0, 0) A(DIM, C, 0, 0)

/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be NULL). */
#define FERRY_OP_ARGS_matmul_forward(A)                                                                 \
    A(ACT_OUT, out, (size_t)N * OC, 0) A(ACT_IN, inp, (size_t)N * C, 0)                                 \
    A(ACT_IN, weight, (size_t)OC * C, 0) A(ACT_IN_OPT, bias, (size_t)OC, 0)                             \
    A(DIM, N, 0, 0) A(DIM, C, 0, 0) A(DIM, OC, 0, 0)
/* dinp += dout @ weight; dweight += dout^T @ inp; dbias += sum over rows of
 * dout (dbias may be NULL). */
#define FERRY_OP_ARGS_matmul_backward(A)                                                                \
    A(ACT_ADD, dinp, (size_t)N * C, 0) A(ACT_ADD, dweight, (size_t)OC * C, 0)                           \
    A(ACT_ADD_OPT, dbias, (size_t)OC, 0) A(ACT_IN, dout, (size_t)N * OC, 0)                             \
    A(ACT_IN, inp, (size_t)N * C, 0) A(ACT_IN, weight, (size_t)OC * C, 0)                               \
    A(DIM, N, 0, 0) A(DIM, C, 0, 0) A(DIM, OC, 0, 0)

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); the
 * backward adds dout * gelu'(inp) into dinp. */
#define FERRY_OP_ARGS_gelu_forward(A) A(ACT_OUT, out, n, 0) A(ACT_IN, inp, n, 0) A(COUNT, n, 0, 0)
#define FERRY_OP_ARGS_gelu_backward(A)                                                                  \
    A(ACT_ADD, dinp, n, 0) A(ACT_IN, inp, n, 0) A(ACT_IN, dout, n, 0) A(COUNT, n, 0, 0)

/* out = a + b, n elements. */
#define FERRY_OP_ARGS_residual_forward(A)                                                               \
    A(ACT_OUT, out, n, 0) A(ACT_IN, a, n, 0) A(ACT_IN, b, n, 0) A(COUNT, n, 0, 0)

/* Causal multi-head self-attention (with positions: each query sees only
 * its own example's keys, the other examples of its row masked out, as
 * FlashAttention's variable-length batches). qkv is [B, T, 3C] (q, k, v each C = NH x
 * HS, heads contiguous inside each); out is [B, T, C]; lse is [B, NH, T] fp32:
 * the log-sum-exp of each query's scaled scores, kept for backward so no T x T
 * matrix is ever stored. scale = 1/sqrt(HS). C must be a multiple of NH.
 * The backward also writes delta, [B, NH, T] fp32: D_i = dout_i . out_i of
 * each query row (FlashAttention-2's D, computed once and read by every
 * pass over that row; a caller may give it any scratch of that size). */
#define FERRY_OP_ARGS_attention_forward(A)                                                              \
    A(ACT_OUT, out, (size_t)B * T * C, 0) A(F32_OUT, lse, (size_t)B * NH * T, 0)                        \
    A(ACT_IN, qkv, (size_t)B * T * 3 * C, 0)                                                            \
    A(DIM, B, 0, 0) A(DIM, T, 0, 0) A(DIM, C, 0, 0) A(DIM, NH, 0, 0) A(POS_IN_OPT, pos, (size_t)B * T, T)
#define FERRY_OP_ARGS_attention_backward(A)                                                             \
    A(ACT_ADD, dqkv, (size_t)B * T * 3 * C, 0) A(ACT_IN, dout, (size_t)B * T * C, 0)                    \
    A(ACT_IN, qkv, (size_t)B * T * 3 * C, 0) A(ACT_IN, out, (size_t)B * T * C, 0)                       \
    A(F32_IN, lse, (size_t)B * NH * T, 0) A(F32_OUT, delta, (size_t)B * NH * T, 0)                      \
    A(DIM, B, 0, 0) A(DIM, T, 0, 0) A(DIM, C, 0, 0) A(DIM, NH, 0, 0) A(POS_IN_OPT, pos, (size_t)B * T, T)

/* The fused classifier. For N rows of inp [N, C] against wte [Vp, C] (only
 * the first V rows are real tokens; padded rows never enter the softmax):
 * losses[i] = -log softmax(inp[i] @ wte^T)[targets[i]]. When dinp is not
 * NULL (dwte then too), also accumulates the gradient of
 * grad_scale * sum(losses): dinp += dlogits @ wte and dwte += dlogits^T @
 * inp, where dlogits = grad_scale * (softmax - onehot). Rows are processed
 * `chunk` at a time through `scratch` (ops_classifier_scratch_bytes): chunk x
 * Vp logits in the storage type, so the full N x Vp logits never exist at
 * once; and, when the storage is 16-bit, a Vp x C fp32 accumulator in which
 * dwte's contributions of every chunk are summed, so dwte is rounded once
 * per call, not once per chunk (at GPT-2 XL's batch 76 x 1024 that was 234
 * roundings of the embedding's gradient per micro-batch). Targets < 0 are
 * ignored (loss 0, no gradient). Vp >= V. */
#define FERRY_OP_ARGS_classifier(A)                                                                     \
    A(F32_OUT, losses, (size_t)N, 0) A(ACT_ADD_OPT, dinp, (size_t)N * C, 0)                             \
    A(ACT_ADD_OPT, dwte, (size_t)Vp * C, 0) A(ACT_IN, inp, (size_t)N * C, 0)                            \
    A(ACT_IN, wte, (size_t)Vp * C, 0) A(I32_IN, targets, (size_t)N, V) A(F32V, grad_scale, 0, 0)        \
    A(DIM, N, 0, 0) A(DIM, C, 0, 0) A(DIM, V, 0, 0) A(INT, Vp, 0, 0)                                    \
    A(RAW, scratch, (ops_classifier_scratch_bytes(backend_stream_backend(s), chunk, Vp, C)), 0)         \
    A(DIM, chunk, 0, 0)

/* Conversions between fp32 values and the backend's storage type, on device
 * memory: dst[i] = (act)src[i] (round to nearest even) and back. */
#define FERRY_OP_ARGS_convert_from_f32(A) A(ACT_OUT, dst, n, 0) A(F32_IN, src, n, 0) A(COUNT, n, 0, 0)
#define FERRY_OP_ARGS_convert_to_f32(A) A(F32_OUT, dst, n, 0) A(ACT_IN, src, n, 0) A(COUNT, n, 0, 0)

/* The optimizer of offload none, on the device. torch.optim.AdamW on n
 * elements of one tensor, in stream order (the element arithmetic of
 * common/numerics.h): master, m, v are fp32 device buffers updated in place;
 * grad is of grad_dtype — the storage type, or F32 for gradients summed over
 * micro-batches (ops_accumulate) —, multiplied by grad_scale (the clip
 * coefficient) first; param_out (may be NULL) receives the updated weights
 * in the storage type. step >= 1. */
#define FERRY_OP_ARGS_adamw(A)                                                                          \
    A(F32_ADD, master, n, 0) A(F32_ADD, m, n, 0) A(F32_ADD, v, n, 0) A(TYPED_IN, grad, n, grad_dtype)   \
    A(DTYPE, grad_dtype, 0, 0) A(ACT_OUT_OPT, param_out, n, 0) A(COUNT0, n, 0, 0)                       \
    A(HPARAMS, hp, 0, 0) A(I64V, step, 0, 0) A(F32V, grad_scale, 0, 0)

/* *sumsq (one fp64 in device memory) += the sum of grad[i]^2 over n elements
 * of grad_dtype (the storage type or f32), deterministically: the bits
 * depend only on the data (host: common/numerics.h's tiled order; cuda: a
 * fixed reduction tree). An inf or NaN gradient makes the sum inf or NaN,
 * which is the flag callers check. `scratch` holds ops_sumsq_scratch_bytes()
 * of device memory; calls sharing a scratch must be on one stream. */
#define FERRY_OP_ARGS_sumsq(A)                                                                          \
    A(TYPED_IN, grad, n, grad_dtype) A(DTYPE, grad_dtype, 0, 0) A(COUNT0, n, 0, 0)                      \
    A(F64_ADD, sumsq, 1, 0) A(RAW, scratch, ops_sumsq_scratch_bytes(), 0)

/* acc[i] = g[i] (first) or acc[i] + g[i] over n elements, in fp32: one
 * micro-batch's gradient (the storage type) added into the fp32 sum of the
 * step's micro-batches, so accumulating k micro-batches rounds to fp32, not
 * to bf16, k times. Exact fp32 adds in element order: the same bits as the
 * CPU's acc += widen(g). */
#define FERRY_OP_ARGS_accumulate(A)                                                                     \
    A(F32_ADD, acc, n, 0) A(ACT_IN, g, n, 0) A(COUNT0, n, 0, 0) A(BOOLV, first, 0, 0)

/* RMSNorm (Llama's): N rows of C; rstd[i] = 1 / sqrt(mean(inp[i,:]^2) + eps)
 * in fp32, saved for backward; out = inp * rstd * weight, computed in fp32
 * and rounded once. The backward adds into dinp and dweight (the sum over
 * rows of dout * inp * rstd). */
#define FERRY_OP_ARGS_rmsnorm_forward(A)                                                                \
    A(ACT_OUT, out, (size_t)N * C, 0) A(F32_OUT, rstd, (size_t)N, 0) A(ACT_IN, inp, (size_t)N * C, 0)   \
    A(ACT_IN, weight, (size_t)C, 0) A(DIM, N, 0, 0) A(DIM, C, 0, 0) A(F32V, eps, 0, 0)
#define FERRY_OP_ARGS_rmsnorm_backward(A)                                                               \
    A(ACT_ADD, dinp, (size_t)N * C, 0) A(ACT_ADD, dweight, (size_t)C, 0)                                \
    A(ACT_IN, dout, (size_t)N * C, 0) A(ACT_IN, inp, (size_t)N * C, 0) A(ACT_IN, weight, (size_t)C, 0)  \
    A(F32_IN, rstd, (size_t)N, 0) A(DIM, N, 0, 0) A(DIM, C, 0, 0)

/* Rotary position embedding in Hugging Face's convention (the two halves of
 * each head rotated, not interleaved pairs), with grouped-query heads laid
 * out for ops_attention_*. inp is [B, T, (NH + 2 NKV) HS]: NH query heads,
 * then NKV key heads, then NKV value heads (the fused q/k/v projection's
 * output); out is [B, T, 3, NH, HS] (attention's qkv with C = NH HS): query
 * head h rotated, key head h / (NH / NKV) rotated, value head h / (NH / NKV)
 * copied. A rotation by angle a_i = pos[b,t] * inv_freq[i] (fp32 product,
 * then cos and sin in fp32) maps x to x_i cos a_i - x_{i+HS/2} sin a_i and
 * x_{i+HS/2} cos a_i + x_i sin a_i for i < HS/2. inv_freq is [HS/2] fp32
 * (the model's, scaling applied); pos is [B, T], each in [0, T) in the op
 * tests (any value >= 0 is valid). NH % NKV == 0, HS even. The backward adds
 * into dinp the inverse rotation of dout, each key and value head summing
 * the NH / NKV query heads that share it in ascending order. */
#define FERRY_OP_ARGS_rope_forward(A)                                                                   \
    A(ACT_OUT, out, (size_t)B * T * 3 * NH * HS, 0) A(ACT_IN, inp, (size_t)B * T * (NH + 2 * NKV) * HS, 0) \
    A(F32_IN, inv_freq, (size_t)HS / 2, 0) A(I32_IN, pos, (size_t)B * T, T)                             \
    A(DIM, B, 0, 0) A(DIM, T, 0, 0) A(DIM, NH, 0, 0) A(DIM, NKV, 0, 0) A(DIM, HS, 0, 0)
#define FERRY_OP_ARGS_rope_backward(A)                                                                  \
    A(ACT_ADD, dinp, (size_t)B * T * (NH + 2 * NKV) * HS, 0) A(ACT_IN, dout, (size_t)B * T * 3 * NH * HS, 0) \
    A(F32_IN, inv_freq, (size_t)HS / 2, 0) A(I32_IN, pos, (size_t)B * T, T)                             \
    A(DIM, B, 0, 0) A(DIM, T, 0, 0) A(DIM, NH, 0, 0) A(DIM, NKV, 0, 0) A(DIM, HS, 0, 0)

/* The SiLU-gated MLP's activation: inp is [N, 2I] (the fused gate and up
 * projections: the gate's I columns, then the up's), out[n,i] =
 * silu(inp[n,i]) * inp[n,I+i] with silu(x) = x / (1 + exp(-x)), in fp32.
 * The backward adds d(gate) = dout * up * silu'(gate) and d(up) = dout *
 * silu(gate) into dinp. */
#define FERRY_OP_ARGS_swiglu_forward(A)                                                                 \
    A(ACT_OUT, out, (size_t)N * I, 0) A(ACT_IN, inp, (size_t)N * 2 * I, 0) A(DIM, N, 0, 0) A(DIM, I, 0, 0)
#define FERRY_OP_ARGS_swiglu_backward(A)                                                                \
    A(ACT_ADD, dinp, (size_t)N * 2 * I, 0) A(ACT_IN, inp, (size_t)N * 2 * I, 0)                         \
    A(ACT_IN, dout, (size_t)N * I, 0) A(DIM, N, 0, 0) A(DIM, I, 0, 0)

/* Generation with a key/value cache. A cache is one layer's keys or values,
 * [B, NKV, Tmax, HS]: batch row b, key/value head j, position p. Tq new
 * tokens of each batch row take positions pos0 .. pos0 + Tq - 1 (pos0 >= 0,
 * pos0 + Tq <= Tmax; every row at the same positions); qkv is their fused
 * projection, [B, Tq, (NH + 2 NKV) HS] (NH query heads, NKV key heads, NKV
 * value heads: GPT-2's [q | k | v] is NKV = NH). NH % NKV == 0, HS <= 256.
 *
 * kv_append: q [B, Tq, NH HS] = the query heads; the key and value heads
 * written into kcache and vcache at their positions, every other position
 * left as it is. kv_append_rope: the same with the query and key heads
 * rotated as rope_forward rotates them (HS even, angle pos * inv_freq[i] in
 * fp32, its cosine and sine in fp32), at pos = pos0 + t. */
#define FERRY_OP_ARGS_kv_append(A)                                                                      \
    A(ACT_OUT, q, (size_t)B * Tq * NH * HS, 0) A(ACT_ADD, kcache, (size_t)B * NKV * Tmax * HS, 0)       \
    A(ACT_ADD, vcache, (size_t)B * NKV * Tmax * HS, 0) A(ACT_IN, qkv, (size_t)B * Tq * (NH + 2 * NKV) * HS, 0) \
    A(INT, pos0, 0, 0) A(DIM, B, 0, 0) A(DIM, Tq, 0, 0) A(DIM, NH, 0, 0) A(DIM, NKV, 0, 0)              \
    A(DIM, HS, 0, 0) A(DIM, Tmax, 0, 0)
#define FERRY_OP_ARGS_kv_append_rope(A)                                                                 \
    A(ACT_OUT, q, (size_t)B * Tq * NH * HS, 0) A(ACT_ADD, kcache, (size_t)B * NKV * Tmax * HS, 0)       \
    A(ACT_ADD, vcache, (size_t)B * NKV * Tmax * HS, 0) A(ACT_IN, qkv, (size_t)B * Tq * (NH + 2 * NKV) * HS, 0) \
    A(F32_IN, inv_freq, (size_t)HS / 2, 0) A(INT, pos0, 0, 0) A(DIM, B, 0, 0) A(DIM, Tq, 0, 0)          \
    A(DIM, NH, 0, 0) A(DIM, NKV, 0, 0) A(DIM, HS, 0, 0) A(DIM, Tmax, 0, 0)
/* Causal attention of the Tq new queries against the cache: query t of
 * batch row b, head h (q [B, Tq, NH HS]) at position p = pos0 + t attends
 * to the keys and values 0 .. p of key/value head h / (NH / NKV) (read as
 * they are, not expanded per query head), scale 1/sqrt(HS), softmax in
 * fp32; out is [B, Tq, NH HS], as attention_forward's out. Positions past p
 * are never read. */
#define FERRY_OP_ARGS_attention_decode(A)                                                               \
    A(ACT_OUT, out, (size_t)B * Tq * NH * HS, 0) A(ACT_IN, q, (size_t)B * Tq * NH * HS, 0)              \
    A(ACT_IN, kcache, (size_t)B * NKV * Tmax * HS, 0) A(ACT_IN, vcache, (size_t)B * NKV * Tmax * HS, 0) \
    A(INT, pos0, 0, 0) A(DIM, B, 0, 0) A(DIM, Tq, 0, 0) A(DIM, NH, 0, 0) A(DIM, NKV, 0, 0)              \
    A(DIM, HS, 0, 0) A(DIM, Tmax, 0, 0)

/* ---- what the kinds are, and the expansions the files above use ---- */

/* The C type of an argument of each kind. */
#define OPK_TYPE_DIM int
#define OPK_TYPE_COUNT size_t
#define OPK_TYPE_COUNT0 size_t
#define OPK_TYPE_INT int
#define OPK_TYPE_F32V float
#define OPK_TYPE_I64V int64_t
#define OPK_TYPE_BOOLV bool
#define OPK_TYPE_DTYPE ferry_dtype
#define OPK_TYPE_HPARAMS const adamw_hparams *
#define OPK_TYPE_ACT_IN const act_t *
#define OPK_TYPE_ACT_OUT act_t *
#define OPK_TYPE_ACT_ADD act_t *
#define OPK_TYPE_ACT_IN_OPT const act_t *
#define OPK_TYPE_ACT_OUT_OPT act_t *
#define OPK_TYPE_ACT_ADD_OPT act_t *
#define OPK_TYPE_F32_IN const float *
#define OPK_TYPE_F32_OUT float *
#define OPK_TYPE_F32_ADD float *
#define OPK_TYPE_F64_ADD double *
#define OPK_TYPE_I32_IN const int32_t *
#define OPK_TYPE_POS_IN_OPT const int32_t *
#define OPK_TYPE_RAW void *
#define OPK_TYPE_TYPED_IN const void *

/* ", type name" and ", name": an op's parameters after the stream, and its arguments. */
#define OPA_DECL(kind, name, extent, aux) , OPK_TYPE_##kind name
#define OPA_PASS(kind, name, extent, aux) , name
#define OPS_PARAMS(op) backend_stream *s FERRY_OP_ARGS_##op(OPA_DECL)

#endif
