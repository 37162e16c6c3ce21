/* fp32 <-> 16-bit conversions on cuda device memory, for either storage
 * type: round to nearest even going down (__float2bfloat16_rn,
 * __float2half_rn: NaN stays NaN, past fp16's range inf), exact going up.
 * Host version: convert.c. */
#include "backend/ops/cuda_util.cuh"

namespace {

/* occupancy floor: 32 warps/SM: `from_f32_kernel<.*>` (memory-bound) */
template <typename T> __global__ void from_f32_kernel(T *dst, const float *src, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = cu_round<T>(src[i]);
}

/* occupancy floor: 32 warps/SM: `to_f32_kernel<.*>` (memory-bound) */
template <typename T> __global__ void to_f32_kernel(float *dst, const T *src, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = cu_f32(src[i]);
}

} // namespace

extern "C" ferry_status cudaop_convert_from_f32(void *stream, ferry_dtype act, act_t *dst, const float *src,
                                                size_t n)
{
    if (n == 0)
        return FERRY_OK;
    return cu_with_type(act, "convert_from_f32", [&](auto tag) {
        using T = decltype(tag);
        from_f32_kernel<T><<<cu_blocks(n, 256, 2 * CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(static_cast<T *>(dst),
                                                                                       src, n);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_convert_to_f32(void *stream, ferry_dtype act, float *dst, const act_t *src,
                                              size_t n)
{
    if (n == 0)
        return FERRY_OK;
    return cu_with_type(act, "convert_to_f32", [&](auto tag) {
        using T = decltype(tag);
        to_f32_kernel<T><<<cu_blocks(n, 256, 2 * CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(
            dst, static_cast<const T *>(src), n);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
