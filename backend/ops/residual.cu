/* The residual add on cuda: out = a + b in the storage type (bf16 or f16)
 * with the sum in fp32, 8 elements per 16-byte access where the pointers
 * allow. Host version: residual.c. */
#include "backend/ops/cuda_util.cuh"

namespace {

/* occupancy floor: 32 warps/SM: `residual_forward_kernel<.*>` (memory-bound) */
template <typename T>
__global__ void residual_forward_kernel(T *out, const T *a, const T *b, size_t n, size_t vec8)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t g = tid; g < vec8; g += stride) {
        float x[8], y[8];
        cu_load8(x, a + g * 8);
        cu_load8(y, b + g * 8);
        for (int j = 0; j < 8; j++)
            x[j] += y[j];
        cu_store8(out + g * 8, x);
    }
    for (size_t i = vec8 * 8 + tid; i < n; i += stride)
        out[i] = cu_round<T>(cu_f32(a[i]) + cu_f32(b[i]));
}

} // namespace

extern "C" ferry_status cudaop_residual_forward(void *stream, ferry_dtype act, act_t *out, const act_t *a,
                                                const act_t *b, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    size_t vec8 = cu_aligned16(out, a, b) ? n / 8 : 0;
    return cu_with_type(act, "residual_forward", [&](auto tag) {
        using T = decltype(tag);
        residual_forward_kernel<T><<<cu_blocks(n / 8 + 1, 256, CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(
            static_cast<T *>(out), static_cast<const T *>(a), static_cast<const T *>(b), n, vec8);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
