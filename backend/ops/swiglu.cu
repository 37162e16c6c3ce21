/* The SiLU-gated MLP's activation on cuda, silu(gate) * up over the fused
 * gate/up projection's output ([N, 2I]: a row's I gate columns, then its I
 * up columns), forward and accumulating backward, the storage type (bf16 or
 * f16) in and out with fp32 math and one rounding at the store. 8 columns
 * per 16-byte access when I is a multiple of 8 and the pointers are
 * aligned (every row's halves then start on a 16-byte boundary), one at a
 * time otherwise. Host version: swiglu.c. */
#include "backend/ops/cuda_util.cuh"

namespace {

/* expf, not __expf: the accurate exponential, as the host's. */
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* PER values at p as floats (8: one 16-byte access), and back, rounded once. */
template <int PER, typename T> __device__ __forceinline__ void load_n(float *v, const T *p)
{
    if (PER == 8)
        cu_load8(v, p);
    else
        v[0] = cu_f32(*p);
}

template <int PER, typename T> __device__ __forceinline__ void store_n(T *p, const float *v)
{
    if (PER == 8)
        cu_store8(p, v);
    else
        *p = cu_round<T>(v[0]);
}

/* A thread per PER columns of one row: g = inp[r, i..], u = inp[r, I + i..]. */
/* occupancy floor: 32 warps/SM: `swiglu_forward_kernel<.*>` (memory-bound) */
template <typename T, int PER> __global__ void swiglu_forward_kernel(T *out, const T *inp, size_t N, int I)
{
    const int groups = I / PER;
    const size_t total = N * groups, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t r = idx / groups;
        const int i = (int)(idx - r * groups) * PER;
        const T *gp = inp + r * 2 * I + i;
        float g[8], u[8];
        load_n<PER>(g, gp);
        load_n<PER>(u, gp + I);
#pragma unroll
        for (int j = 0; j < PER; j++)
            g[j] = g[j] * sigmoid(g[j]) * u[j];
        store_n<PER>(out + r * I + i, g);
    }
}

/* d(gate) += dout up s (1 + gate (1 - s)), d(up) += dout gate s, s = sigmoid(gate). */
/* occupancy floor: 32 warps/SM: `swiglu_backward_kernel<.*>` (memory-bound; the
 * launch bounds hold Volta's 8-wide variant to 64 registers, 69 unbounded) */
template <typename T, int PER>
__global__ void __launch_bounds__(256, 4)
    swiglu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t N, int I)
{
    const int groups = I / PER;
    const size_t total = N * groups, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t r = idx / groups;
        const int i = (int)(idx - r * groups) * PER;
        const size_t at = r * 2 * I + i;
        float g[8], u[8], d[8], dg[8], du[8];
        load_n<PER>(g, inp + at);
        load_n<PER>(u, inp + at + I);
        load_n<PER>(d, dout + r * I + i);
        load_n<PER>(dg, dinp + at);
        load_n<PER>(du, dinp + at + I);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const float s = sigmoid(g[j]);
            dg[j] += d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
            du[j] += d[j] * g[j] * s;
        }
        store_n<PER>(dinp + at, dg);
        store_n<PER>(dinp + at + I, du);
    }
}

ferry_status check_shape(const char *op, int N, int I)
{
    CU_REQUIRE(N > 0 && I > 0, "%s: sizes must be positive, got N=%d I=%d", op, N, I);
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status cudaop_swiglu_forward(void *stream, ferry_dtype act, act_t *out, const act_t *inp, int N,
                                              int I)
{
    ferry_status st = check_shape("swiglu_forward", N, I);
    if (st != FERRY_OK)
        return st;
    const bool vec = I % 8 == 0 && cu_aligned16(out, inp);
    const size_t work = (size_t)N * (vec ? I / 8 : I);
    const unsigned blocks = cu_blocks(work, 256, CU_GRID_STRIDE_BLOCKS);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "swiglu_forward", [&](auto tag) {
        using T = decltype(tag);
        T *o = static_cast<T *>(out);
        const T *x = static_cast<const T *>(inp);
        if (vec)
            swiglu_forward_kernel<T, 8><<<blocks, 256, 0, s>>>(o, x, (size_t)N, I);
        else
            swiglu_forward_kernel<T, 1><<<blocks, 256, 0, s>>>(o, x, (size_t)N, I);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_swiglu_backward(void *stream, ferry_dtype act, act_t *dinp, const act_t *inp,
                                               const act_t *dout, int N, int I)
{
    ferry_status st = check_shape("swiglu_backward", N, I);
    if (st != FERRY_OK)
        return st;
    const bool vec = I % 8 == 0 && cu_aligned16(dinp, inp, dout);
    const size_t work = (size_t)N * (vec ? I / 8 : I);
    const unsigned blocks = cu_blocks(work, 256, CU_GRID_STRIDE_BLOCKS);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "swiglu_backward", [&](auto tag) {
        using T = decltype(tag);
        T *dx = static_cast<T *>(dinp);
        const T *x = static_cast<const T *>(inp), *dy = static_cast<const T *>(dout);
        if (vec)
            swiglu_backward_kernel<T, 8><<<blocks, 256, 0, s>>>(dx, x, dy, (size_t)N, I);
        else
            swiglu_backward_kernel<T, 1><<<blocks, 256, 0, s>>>(dx, x, dy, (size_t)N, I);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
