/* Kernels for tests/tools/test_kernel_resources.sh, each planting one
 * violation of what tools/build/kernel_resources.py checks (none is part of
 * the library or launched anywhere; the test writes the launch log lines
 * that say how they would be launched):
 *   heavy_kernel     no __launch_bounds__, about 128 registers a thread: at
 *                    1024 threads a block it needs twice the 65,536 a block
 *                    may have, and at 1024 threads it has no bounds;
 *   bounded_spill_kernel  __launch_bounds__(1024) on the same work: ptxas must
 *                    fit 64 registers a thread, and spills;
 *   light_kernel     a few registers, within every limit;
 *   frame_kernel     16 values in an array read at an index known only at
 *                    run time: ptxas keeps the array in a 64-byte stack
 *                    frame (local memory), with no spills;
 *   rope_forward_kernel  the same with 8 values, a 32-byte frame, under the
 *                    name of a kernel the check allows up to 32 bytes. */
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

/* N loads into an array, then n updates at indices known only at run time. */
template <int N> __device__ __forceinline__ void framed_work(const float *in, float *out, int n)
{
    float t[N];
#pragma unroll
    for (int k = 0; k < N; k++)
        t[k] = in[k * n + threadIdx.x];
    for (int it = 0; it < n; it++)
        t[(it * 5 + threadIdx.x) % N] += in[it];
    out[threadIdx.x] = t[(threadIdx.x * 7 + n) % N];
}

__global__ void frame_kernel(const float *in, float *out, int n) { framed_work<16>(in, out, n); }

__global__ void rope_forward_kernel(const float *in, float *out, int n) { framed_work<8>(in, out, n); }
