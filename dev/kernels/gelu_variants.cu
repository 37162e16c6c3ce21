/* Kernel lab: other kernels for GELU forward, beside the production one
 * (backend/ops/gelu.cu), checked and timed by dev/kernels/gelu.c.
 *   1: one element per thread, 2-byte loads and stores, one block per 256
 *      elements: the plain version, without the production kernel's 16-byte
 *      accesses and grid-stride loop. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "dev/kernels/lab.h"
#include "backend/cuda_check.h"

namespace {

__global__ void gelu_forward1_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *inp, size_t n)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float x = __bfloat162float(inp[i]);
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x); /* sqrt(2/pi) (x + a x^3) */
    out[i] = __float2bfloat16_rn(0.5f * x * (1.0f + tanhf(u)));
}

} // namespace

extern "C" ferry_status lab_gelu_forward1(void *stream, void *out, const void *inp, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    const size_t blocks = (n + 255) / 256;
    if (blocks > 0x7fffffffu)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gelu variant 1: %zu elements need too many blocks", n);
    gelu_forward1_kernel<<<(unsigned)blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<__nv_bfloat16 *>(out), static_cast<const __nv_bfloat16 *>(inp), n);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}
