/* Device helpers shared by the CUDA ops (the kernels/ .cu files): bf16 loads and
 * stores, warp and block reductions, argument checks, and the one cuBLASLt
 * entry point (cuda_gemm, defined in matmul.cu) the matmul and the
 * classifier share. Owns no state; included only by .cu files. */
#ifndef FERRY_KERNELS_CUDA_UTIL_CUH
#define FERRY_KERNELS_CUDA_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda_check.h"
#include "kernels/ops_cuda.h"

typedef __nv_bfloat16 bf16;

static inline cudaStream_t cu_stream(void *s) { return static_cast<cudaStream_t>(s); }

/* Waits for the stream's work so far, sleeping on a blocking-sync event
 * (cudaStreamSynchronize would spin a core). */
static inline ferry_status cu_wait_stream(cudaStream_t s)
{
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventBlockingSync | cudaEventDisableTiming));
    cudaError_t rc = cudaEventRecord(ev, s);
    if (rc == cudaSuccess)
        rc = cudaEventSynchronize(ev);
    cudaEventDestroy(ev);
    CUDA_CHECK(rc);
    return FERRY_OK;
}

static inline unsigned cu_blocks(size_t work, unsigned per_block, unsigned cap)
{
    size_t b = (work + per_block - 1) / per_block;
    if (b < 1)
        b = 1;
    return b > cap ? cap : (unsigned)b;
}

/* True when every pointer is 16-byte aligned, so 8 bf16 move as one uint4. */
static inline bool cu_aligned16(const void *a, const void *b = nullptr, const void *c = nullptr)
{
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* Argument checks shared by the ops: a clear message naming the op and value. */
#define CU_REQUIRE(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond))                                                                           \
            return err_set(FERRY_ERR_INVALID_ARGUMENT, __VA_ARGS__);                           \
    } while (0)

static __device__ __forceinline__ float cu_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double cu_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float cu_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of up to 1024 threads (blockDim.x a multiple of 32);
 * every thread gets the result. `shared` holds 32 floats. The order is fixed,
 * so the result is deterministic. */
static __device__ __forceinline__ float cu_block_sum(float v, float *shared)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = cu_warp_sum(v);
    __syncthreads(); /* `shared` may still be read by a previous call */
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : 0.0f;
    return cu_warp_sum(v);
}

static __device__ __forceinline__ float cu_block_max(float v, float *shared)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : -INFINITY;
    return cu_warp_max(v);
}

/* 8 bf16 <-> 8 floats through one 16-byte access. */
static __device__ __forceinline__ void cu_load8(float out[8], const bf16 *p)
{
    uint4 raw = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

static __device__ __forceinline__ void cu_store8(bf16 *p, const float in[8])
{
    uint4 raw;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&raw);
    for (int i = 0; i < 4; i++)
        h[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = raw;
}

/* D (m x n, column-major, ld ldd) = op(A) op(B) [+ bias per row of D] + beta D,
 * with op(X) = X^T when trans. bf16 in and out, fp32 compute. Row-major
 * callers pass their matrices as the transposed column-major ones. The
 * descriptors and the algorithm for a shape are made once per device and
 * cached. Defined in matmul.cu. */
ferry_status cuda_gemm(cudaStream_t stream, bool transa, bool transb, int m, int n, int k,
                       const bf16 *A, int lda, const bf16 *B, int ldb, bf16 *D, int ldd, float beta,
                       const bf16 *bias);
/* The same with an fp32 D: products of bf16 accumulated in fp32 across calls
 * (beta = 1) without a bf16 rounding each time. No bias. */
ferry_status cuda_gemm_f32(cudaStream_t stream, bool transa, bool transb, int m, int n, int k,
                           const bf16 *A, int lda, const bf16 *B, int ldb, float *D, int ldd, float beta);
/* dst[i] = bf16(dst[i] + acc[i]) for n elements: one rounding for what was
 * accumulated in fp32. Defined in matmul.cu. */
ferry_status cuda_add_f32_to_bf16(cudaStream_t stream, bf16 *dst, const float *acc, size_t n);

/* dst[c] += sum over r of src[r * cols + c] (src row-major rows x cols); fp32
 * sums in a fixed order (deterministic, no atomics). Defined in matmul.cu. */
ferry_status cuda_colsum_add(cudaStream_t stream, bf16 *dst, const bf16 *src, int rows, int cols);

#endif
