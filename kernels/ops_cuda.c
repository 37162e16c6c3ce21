/* The cuda backend's op table (backend_cuda_ops): each op hands its
 * (already checked) arguments to the kernel of kernels/<op>.cu on the
 * stream's cudaStream_t (kernels/ops_cuda.h), with the backend's storage
 * type: bf16 (the default from sm_80) or f16 (the default on sm_70 and
 * sm_75, where bf16 is refused). Built only with CUDA; owns no memory. */
#include "kernels/backend_impl.h"
#include "kernels/comm_impl.h"
#include "kernels/ops_cuda.h"

static ferry_status cuda_encoder_forward(backend_stream *s, act_t *out, const int32_t *tokens,
                                         const act_t *wte, const act_t *wpe, int B, int T, int C,
                                         int V)
{
    return cudaop_encoder_forward(backend_stream_native(s), s->be->act, out, tokens, wte, wpe, B, T, C, V);
}

static ferry_status cuda_encoder_backward(backend_stream *s, act_t *dwte, act_t *dwpe,
                                          const act_t *dout, const int32_t *tokens, int B, int T,
                                          int C, int V)
{
    return cudaop_encoder_backward(backend_stream_native(s), s->be->act, dwte, dwpe, dout, tokens, B, T, C, V);
}

static ferry_status cuda_layernorm_forward(backend_stream *s, act_t *out, float *mean, float *rstd,
                                           const act_t *inp, const act_t *weight, const act_t *bias,
                                           int N, int C)
{
    return cudaop_layernorm_forward(backend_stream_native(s), s->be->act, out, mean, rstd, inp, weight, bias, N, C);
}

static ferry_status cuda_layernorm_backward(backend_stream *s, act_t *dinp, act_t *dweight,
                                            act_t *dbias, const act_t *dout, const act_t *inp,
                                            const act_t *weight, const float *mean,
                                            const float *rstd, int N, int C)
{
    return cudaop_layernorm_backward(backend_stream_native(s), s->be->act, dinp, dweight, dbias, dout, inp, weight,
                                     mean, rstd, N, C);
}

static ferry_status cuda_matmul_forward(backend_stream *s, act_t *out, const act_t *inp,
                                        const act_t *weight, const act_t *bias, int N, int C, int OC)
{
    return cudaop_matmul_forward(backend_stream_native(s), s->be->act, out, inp, weight, bias, N, C, OC);
}

static ferry_status cuda_matmul_backward(backend_stream *s, act_t *dinp, act_t *dweight,
                                         act_t *dbias, const act_t *dout, const act_t *inp,
                                         const act_t *weight, int N, int C, int OC)
{
    return cudaop_matmul_backward(backend_stream_native(s), s->be->act, dinp, dweight, dbias, dout, inp, weight, N,
                                  C, OC);
}

static ferry_status cuda_gelu_forward(backend_stream *s, act_t *out, const act_t *inp, size_t n)
{
    return cudaop_gelu_forward(backend_stream_native(s), s->be->act, out, inp, n);
}

static ferry_status cuda_gelu_backward(backend_stream *s, act_t *dinp, const act_t *inp,
                                       const act_t *dout, size_t n)
{
    return cudaop_gelu_backward(backend_stream_native(s), s->be->act, dinp, inp, dout, n);
}

static ferry_status cuda_residual_forward(backend_stream *s, act_t *out, const act_t *a,
                                          const act_t *b, size_t n)
{
    return cudaop_residual_forward(backend_stream_native(s), s->be->act, out, a, b, n);
}

static ferry_status cuda_attention_forward(backend_stream *s, act_t *out, float *lse,
                                           const act_t *qkv, int B, int T, int C, int NH)
{
    return cudaop_attention_forward(backend_stream_native(s), s->be->act, out, lse, qkv, B, T, C, NH);
}

static ferry_status cuda_attention_backward(backend_stream *s, act_t *dqkv, const act_t *dout,
                                            const act_t *qkv, const act_t *out, const float *lse,
                                            int B, int T, int C, int NH)
{
    return cudaop_attention_backward(backend_stream_native(s), s->be->act, dqkv, dout, qkv, out, lse, B, T, C, NH);
}

static ferry_status cuda_classifier(backend_stream *s, float *losses, act_t *dinp, act_t *dwte,
                                    const act_t *inp, const act_t *wte, const int32_t *targets,
                                    float grad_scale, int N, int C, int V, int Vp, void *scratch,
                                    int chunk)
{
    return cudaop_classifier(backend_stream_native(s), s->be->act, losses, dinp, dwte, inp, wte, targets, grad_scale,
                             N, C, V, Vp, scratch, chunk);
}

static ferry_status cuda_convert_from_f32(backend_stream *s, act_t *dst, const float *src, size_t n)
{
    return cudaop_convert_from_f32(backend_stream_native(s), s->be->act, dst, src, n);
}

static ferry_status cuda_convert_to_f32(backend_stream *s, float *dst, const act_t *src, size_t n)
{
    return cudaop_convert_to_f32(backend_stream_native(s), s->be->act, dst, src, n);
}

static ferry_status cuda_adamw(backend_stream *s, float *master, float *m, float *v, const void *grad,
                               ferry_dtype grad_dtype, act_t *param_out, size_t n, const adamw_hparams *hp,
                               int64_t step, float grad_scale)
{
    return cudaop_adamw(backend_stream_native(s), s->be->act, master, m, v, grad, grad_dtype, param_out, n, (float)hp->lr,
                        (float)hp->beta1, (float)hp->beta2, (float)hp->eps, (float)hp->weight_decay, step,
                        grad_scale);
}

static ferry_status cuda_sumsq(backend_stream *s, const void *grad, ferry_dtype grad_dtype, size_t n,
                               double *sumsq, void *scratch)
{
    return cudaop_sumsq(backend_stream_native(s), grad, grad_dtype, n, sumsq, scratch);
}

static ferry_status cuda_accumulate(backend_stream *s, float *acc, const act_t *g, size_t n, bool first)
{
    return cudaop_accumulate(backend_stream_native(s), s->be->act, acc, g, n, first);
}

const backend_ops backend_cuda_ops = {
    .act_dtypes = 1u << FERRY_DTYPE_BF16 | 1u << FERRY_DTYPE_F16, /* bf16 only from sm_80: backend_cuda_init */
    .init = cudaop_init,
    .shutdown = cudaop_shutdown,
    .encoder_forward = cuda_encoder_forward,
    .encoder_backward = cuda_encoder_backward,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .residual_forward = cuda_residual_forward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .classifier = cuda_classifier,
    .convert_from_f32 = cuda_convert_from_f32,
    .convert_to_f32 = cuda_convert_to_f32,
    .adamw = cuda_adamw,
    .sumsq = cuda_sumsq,
    .accumulate = cuda_accumulate,
    .comm_open = comm_nccl_open,
    .comm_close = comm_nccl_close,
    .reduce_scatter = comm_nccl_reduce_scatter,
    .all_gather = comm_nccl_all_gather,
    .all_reduce = comm_nccl_all_reduce,
};
