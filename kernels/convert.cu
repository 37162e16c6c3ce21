/* fp32 <-> bf16 conversions on cuda device memory: round to nearest even
 * going down (__float2bfloat16_rn, NaN stays NaN), exact going up. Host
 * version: convert.c. */
#include "kernels/cuda_util.cuh"

namespace {

__global__ void from_f32_kernel(bf16 *dst, const float *src, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void to_f32_kernel(float *dst, const bf16 *src, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __bfloat162float(src[i]);
}

} // namespace

extern "C" ferry_status cudaop_convert_from_f32(void *stream, act_t *dst, const float *src,
                                                size_t n)
{
    if (n == 0)
        return FERRY_OK;
    from_f32_kernel<<<cu_blocks(n, 256, 132 * 32), 256, 0, cu_stream(stream)>>>(
        static_cast<bf16 *>(dst), src, n);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

extern "C" ferry_status cudaop_convert_to_f32(void *stream, float *dst, const act_t *src, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    to_f32_kernel<<<cu_blocks(n, 256, 132 * 32), 256, 0, cu_stream(stream)>>>(
        dst, static_cast<const bf16 *>(src), n);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}
