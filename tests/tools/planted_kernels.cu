/* Kernels for tests/tools/test_kernel_resources.sh, each planting one
 * violation of what tools/build/kernel_resources.py checks (none is part of
 * the library or launched anywhere; the test writes the launch log lines
 * that say how they would be launched):
 *   heavy_kernel     no __launch_bounds__, about 128 registers a thread: at
 *                    1024 threads a block it needs twice the 65,536 a block
 *                    may have, and at 1024 threads it has no bounds;
 *   bounded_spill_kernel  __launch_bounds__(1024) on the same work: ptxas must
 *                    fit 64 registers a thread, and spills;
 *   light_kernel     a few registers, within every limit. */
#include <cuda_runtime.h>

#define WIDE 96

/* WIDE accumulators live at once, each fed by its own load: the registers
 * cannot be shared. */
__device__ __forceinline__ void wide_work(const float *in, float *out, int n)
{
    float acc[WIDE];
#pragma unroll
    for (int k = 0; k < WIDE; k++)
        acc[k] = in[k * n + threadIdx.x];
    for (int it = 0; it < n; it++) {
#pragma unroll
        for (int k = 0; k < WIDE; k++)
            acc[k] = acc[k] * acc[(k + 1) % WIDE] + in[it * WIDE + k];
    }
#pragma unroll
    for (int k = 0; k < WIDE; k++)
        out[k * n + threadIdx.x] = acc[k];
}

__global__ void heavy_kernel(const float *in, float *out, int n) { wide_work(in, out, n); }

__global__ void __launch_bounds__(1024) bounded_spill_kernel(const float *in, float *out, int n)
{
    wide_work(in, out, n);
}

__global__ void light_kernel(const float *in, float *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = 2.0f * in[i];
}
