/* GELU (tanh form) on cuda, forward and accumulating backward, the storage
 * type (bf16 or f16) in and out with fp32 math. 8 elements per 16-byte
 * access where the pointers allow, one at a time otherwise. Host version:
 * gelu.c. */
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr float GELU_K = 0.7978845608028654f; /* sqrt(2/pi) */
constexpr float GELU_A = 0.044715f;

__device__ __forceinline__ float gelu(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_grad(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
}

/* Elements [0, vec8 * 8) go 8 at a time, the rest one by one. */
/* occupancy floor: 32 warps/SM: `gelu_forward_kernel<.*>` (memory-bound) */
template <typename T> __global__ void gelu_forward_kernel(T *out, const T *inp, size_t n, size_t vec8)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t g = tid; g < vec8; g += stride) {
        float x[8];
        cu_load8(x, inp + g * 8);
        for (int j = 0; j < 8; j++)
            x[j] = gelu(x[j]);
        cu_store8(out + g * 8, x);
    }
    for (size_t i = vec8 * 8 + tid; i < n; i += stride)
        out[i] = cu_round<T>(gelu(cu_f32(inp[i])));
}

/* occupancy floor: 32 warps/SM: `gelu_backward_kernel<.*>` (memory-bound) */
template <typename T>
__global__ void gelu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n, size_t vec8)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t g = tid; g < vec8; g += stride) {
        float x[8], dy[8], dx[8];
        cu_load8(x, inp + g * 8);
        cu_load8(dy, dout + g * 8);
        cu_load8(dx, dinp + g * 8);
        for (int j = 0; j < 8; j++)
            dx[j] += gelu_grad(x[j]) * dy[j];
        cu_store8(dinp + g * 8, dx);
    }
    for (size_t i = vec8 * 8 + tid; i < n; i += stride) {
        float x = cu_f32(inp[i]);
        float d = cu_f32(dinp[i]) + gelu_grad(x) * cu_f32(dout[i]);
        dinp[i] = cu_round<T>(d);
    }
}

} // namespace

extern "C" ferry_status cudaop_gelu_forward(void *stream, ferry_dtype act, act_t *out, const act_t *inp, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    size_t vec8 = cu_aligned16(out, inp) ? n / 8 : 0;
    return cu_with_type(act, "gelu_forward", [&](auto tag) {
        using T = decltype(tag);
        gelu_forward_kernel<T><<<cu_blocks(n / 8 + 1, 256, CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(
            static_cast<T *>(out), static_cast<const T *>(inp), n, vec8);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_gelu_backward(void *stream, ferry_dtype act, act_t *dinp, const act_t *inp,
                                             const act_t *dout, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    size_t vec8 = cu_aligned16(dinp, inp, dout) ? n / 8 : 0;
    return cu_with_type(act, "gelu_backward", [&](auto tag) {
        using T = decltype(tag);
        gelu_backward_kernel<T><<<cu_blocks(n / 8 + 1, 256, CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(
            static_cast<T *>(dinp), static_cast<const T *>(inp), static_cast<const T *>(dout), n, vec8);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
