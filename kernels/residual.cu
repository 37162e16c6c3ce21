/* The residual add on cuda: out = a + b in bf16 with the sum in fp32, 8
 * elements per 16-byte access where the pointers allow. Host version:
 * residual.c. */
#include "kernels/cuda_util.cuh"

namespace {

__global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n,
                                        size_t vec8)
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
        out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

} // namespace

extern "C" ferry_status cudaop_residual_forward(void *stream, act_t *out, const act_t *a,
                                                const act_t *b, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    size_t vec8 = cu_aligned16(out, a, b) ? n / 8 : 0;
    residual_forward_kernel<<<cu_blocks(n / 8 + 1, 256, 132 * 16), 256, 0, cu_stream(stream)>>>(
        static_cast<bf16 *>(out), static_cast<const bf16 *>(a), static_cast<const bf16 *>(b), n,
        vec8);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}
