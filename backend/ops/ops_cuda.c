/* The cuda backend's op table (backend_cuda_ops): each op hands its
 * (already checked) arguments to the kernel of backend/ops/<op>.cu on the
 * stream's cudaStream_t (backend/ops/ops_cuda.h), with the backend's storage
 * type: bf16 (the default from sm_80) or f16 (the default on sm_70 and
 * sm_75, where bf16 is refused). Built only with CUDA; owns no memory. */
#include "backend/backend_impl.h"
#include "backend/comm_impl.h"
#include "backend/ops/ops_cuda.h"

/* The ops of the common binding (backend/ops/op_list.h's OPC_ACT): the stream's
 * cudaStream_t, the storage type, then the op's arguments as they are. */
#define CUDA_WRAP_OPC_ACT(NAME)                                                                 \
    static ferry_status cuda_##NAME(OPS_PARAMS(NAME))                                           \
    {                                                                                           \
        return cudaop_##NAME(backend_stream_native(s), s->be->act FERRY_OP_ARGS_##NAME(OPA_PASS)); \
    }
#define CUDA_WRAP_OPC_OWN(NAME)
#define CUDA_WRAP(NAME, CUDA, EXTRA) CUDA_WRAP_##CUDA(NAME)
FERRY_OPS(CUDA_WRAP)

/* The others. */
static ferry_status cuda_adamw(backend_stream *s, float *master, float *m, float *v, const void *grad,
                               ferry_dtype grad_dtype, act_t *param_out, size_t n, const adamw_hparams *hp,
                               int64_t step, float grad_scale)
{
    return cudaop_adamw(backend_stream_native(s), s->be->act, master, m, v, grad, grad_dtype, param_out, n, hp, step,
                        grad_scale);
}

static ferry_status cuda_sumsq(backend_stream *s, const void *grad, ferry_dtype grad_dtype, size_t n,
                               double *sumsq, void *scratch)
{
    return cudaop_sumsq(backend_stream_native(s), grad, grad_dtype, n, sumsq, scratch);
}

#define CUDA_ENTRY(NAME, CUDA, EXTRA) .NAME = cuda_##NAME,
const backend_ops backend_cuda_ops = {
    .act_dtypes = 1u << FERRY_DTYPE_BF16 | 1u << FERRY_DTYPE_F16, /* bf16 only from sm_80: backend_cuda_init */
    .init = cudaop_init,
    .shutdown = cudaop_shutdown,
    FERRY_OPS(CUDA_ENTRY)
    .comm_open = comm_nccl_open,
    .comm_close = comm_nccl_close,
    .reduce_scatter = comm_nccl_reduce_scatter,
    .all_gather = comm_nccl_all_gather,
    .all_reduce = comm_nccl_all_reduce,
};
