/* Device helpers shared by the CUDA ops (the backend/ .cu files): the two
 * 16-bit storage types (bf16, fp16) and their loads, stores and roundings,
 * the dispatch from a storage type to a kernel template, warp and block
 * reductions, argument checks, and the one cuBLASLt entry point (cuda_gemm,
 * defined in matmul.cu) the matmul and the classifier share. Every op is
 * one kernel source templated on its storage type T (bf16 or f16); math and
 * statistics are fp32 whichever it is. Owns no state; included only by .cu
 * files. */
#ifndef FERRY_BACKEND_OPS_CUDA_UTIL_CUH
#define FERRY_BACKEND_OPS_CUDA_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda_check.h"
#include "backend/ops/ops_cuda.h"

typedef __nv_bfloat16 bf16;
typedef __half f16;

/* What each storage type is to the device and to cuBLASLt. */
template <typename T> struct cu_type;
template <> struct cu_type<bf16> {
    typedef __nv_bfloat162 pair;
    static constexpr ferry_dtype dtype = FERRY_DTYPE_BF16;
    static constexpr cudaDataType_t cuda = CUDA_R_16BF;
    static __device__ __forceinline__ float widen(bf16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ bf16 round(float x) { return __float2bfloat16_rn(x); }
    /* A bf16 is the upper half of the fp32 it widens to, so the pair widens
     * exactly by a shift and a mask of its 32 bits. (__bfloat1622float2 is
     * cvt.f32.bf16 on each 16-bit half on sm_90, where ptxas gives each half
     * a register of its own: layernorm's dinp, which keeps its row packed,
     * took 156 registers there instead of about 100; and CUDA 11, the last
     * to build Volta, declares it for sm_80 and newer only.) */
    static __device__ __forceinline__ float2 widen2(pair p)
    {
        uint32_t u;
        memcpy(&u, &p, 4);
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
    }
    static __device__ __forceinline__ pair round2(float a, float b) { return __floats2bfloat162_rn(a, b); }
};
template <> struct cu_type<f16> {
    typedef __half2 pair;
    static constexpr ferry_dtype dtype = FERRY_DTYPE_F16;
    static constexpr cudaDataType_t cuda = CUDA_R_16F;
    static __device__ __forceinline__ float widen(f16 x) { return __half2float(x); }
    static __device__ __forceinline__ f16 round(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ float2 widen2(pair p) { return __half22float2(p); }
    static __device__ __forceinline__ pair round2(float a, float b) { return __floats2half2_rn(a, b); }
};

/* A storage element as fp32 (exact), and fp32 rounded to nearest even into
 * one (past the type's range: inf, which is how fp16 overflow reaches the
 * step's inf/NaN check; NaN stays NaN). */
static __device__ __forceinline__ float cu_f32(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ float cu_f32(f16 x) { return __half2float(x); }
static __device__ __forceinline__ float cu_f32(float x) { return x; }
template <typename T> static __device__ __forceinline__ T cu_round(float x) { return cu_type<T>::round(x); }

/* Calls f(T()) with T the storage type `act` names (bf16 or f16), so one
 * entry point launches the kernel template of either; another type is
 * FERRY_ERR_INVALID_ARGUMENT naming the op. */
template <typename F> static ferry_status cu_with_type(ferry_dtype act, const char *op, F &&f)
{
    switch (act) {
    case FERRY_DTYPE_BF16: return f(bf16());
    case FERRY_DTYPE_F16: return f(f16());
    default: break;
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: storage type %s; the cuda ops store bf16 or f16", op,
                   dtype_name(act));
}

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

/* The grid of an elementwise kernel that loops over its elements with a
 * grid stride: two full waves of 256-thread blocks on the largest card built
 * for (an H100 or H200 has 132 SMs, each holding 8 such blocks at once, so
 * 132 x 16 blocks), which keeps every SM of a smaller card busy too, while
 * the stride loop covers any length with no launch-limit concern. A kernel
 * doing less per element (the conversions) takes twice that. One place, so
 * a new card's SM count changes one number. */
#define CU_GRID_STRIDE_BLOCKS (132u * 16u)

static inline unsigned cu_blocks(size_t work, unsigned per_block, unsigned cap)
{
    size_t b = (work + per_block - 1) / per_block;
    if (b < 1)
        b = 1;
    return b > cap ? cap : (unsigned)b;
}

/* True when every pointer is 16-byte aligned, so 8 16-bit values move as one uint4. */
static inline bool cu_aligned16(const void *a, const void *b = nullptr, const void *c = nullptr)
{
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

/* Opts a kernel into `bytes` of dynamic shared memory (above 48 KiB a
 * launch needs it; the card's limit is cudaDevAttrMaxSharedMemoryPerBlockOptin). */
static inline ferry_status cu_allow_smem(const void *kernel, size_t bytes)
{
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return FERRY_OK;
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

/* The column sums of matmul's dbias and layernorm's dweight/dbias: a
 * block of 1024 threads owns a strip of CU_STRIP columns; thread t is row
 * slot t / 2 (of 512), half t % 2 (8 columns). cu_strip_sum takes each
 * thread's 8 partial sums and returns, in threads 0..15, the sum of column
 * t over the 512 slots (0 elsewhere): the slots' sums go to shared memory,
 * 256 threads add 32 slots each (thread t the slots of part t / 16, column
 * t % 16), 16 add those 16 parts in order (deterministic; two barriers,
 * two shared-memory passes of 32 KiB). A second call may follow at once:
 * the first call's last reads of sm.slot come before its second barrier,
 * and the second call writes sm.part only after its own first one.
 *
 * Banks (32 of 4 bytes): a part's 32 slots are rows of 16 words, then 16
 * words of padding, with column c of slot k at word c ^ ((k / 2) % 8) of
 * its row. Each warp's accesses then fall on 32 distinct banks: a write
 * (16 slots of one part, both halves, one column each) has the slot's
 * parity in bank bit 4, the half in bit 3 and the slot pair through the
 * XOR in bits 0-2; a read (row k of two parts, 16 columns) has the parts
 * 16 banks apart and the 16 columns a permutation of 16 banks.
 * (Padding rows alone cannot: with rows of 17 words, slot k of parts p and
 * p + 1 are 32 x 17 words apart, on one bank, and a write's two halves meet
 * on 8 banks.) */
#define CU_STRIP 16
struct cu_strip_smem {
    float slot[16][32 * CU_STRIP + 16];
    float part[16][CU_STRIP];
};
static __device__ __forceinline__ float *cu_strip_at(cu_strip_smem &sm, int slot, int col)
{
    const int k = slot % 32;
    return &sm.slot[slot / 32][k * CU_STRIP + (col ^ ((k / 2) % 8))];
}
static __device__ __forceinline__ float cu_strip_sum(const float (&acc)[8], cu_strip_smem &sm)
{
    const int tid = threadIdx.x, slot = tid / 2, half = tid & 1;
#pragma unroll
    for (int j = 0; j < 8; j++)
        *cu_strip_at(sm, slot, 8 * half + j) = acc[j];
    __syncthreads();
    if (tid < 256) {
        const int col = tid % CU_STRIP, part = tid / CU_STRIP;
        float s = 0.0f;
        for (int k = 0; k < 32; k++)
            s += *cu_strip_at(sm, part * 32 + k, col);
        sm.part[part][col] = s;
    }
    __syncthreads();
    float s = 0.0f;
    if (tid < CU_STRIP)
        for (int p2 = 0; p2 < 16; p2++)
            s += sm.part[p2][tid];
    return s;
}

/* 8 storage elements <-> 8 floats through one 16-byte access. */
template <typename T> static __device__ __forceinline__ void cu_load8(float out[8], const T *p)
{
    uint4 raw = *reinterpret_cast<const uint4 *>(p);
    const typename cu_type<T>::pair *h = reinterpret_cast<const typename cu_type<T>::pair *>(&raw);
    for (int i = 0; i < 4; i++) {
        float2 f = cu_type<T>::widen2(h[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

template <typename T> static __device__ __forceinline__ void cu_store8(T *p, const float in[8])
{
    uint4 raw;
    typename cu_type<T>::pair *h = reinterpret_cast<typename cu_type<T>::pair *>(&raw);
    for (int i = 0; i < 4; i++)
        h[i] = cu_type<T>::round2(in[2 * i], in[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = raw;
}

/* D (m x n, column-major, ld ldd) = op(A) op(B) [+ bias per row of D] + beta D,
 * with op(X) = X^T when trans. A, B, D and the bias of the storage type
 * `act` (bf16 or f16), fp32 compute. Row-major callers pass their matrices
 * as the transposed column-major ones. The descriptors and the algorithm
 * for a shape are made once per device and cached. Defined in matmul.cu. */
ferry_status cuda_gemm(cudaStream_t stream, ferry_dtype act, bool transa, bool transb, int m, int n, int k,
                       const void *A, int lda, const void *B, int ldb, void *D, int ldd, float beta,
                       const void *bias);
/* The same with an fp32 D: products of 16-bit values accumulated in fp32
 * across calls (beta = 1) without a 16-bit rounding each time. No bias. */
ferry_status cuda_gemm_f32(cudaStream_t stream, ferry_dtype act, bool transa, bool transb, int m, int n, int k,
                           const void *A, int lda, const void *B, int ldb, float *D, int ldd, float beta);
/* dst[i] = T(dst[i] + acc[i]) for n elements of the storage type: one
 * rounding for what was accumulated in fp32. Defined in matmul.cu. */
ferry_status cuda_add_f32_to(cudaStream_t stream, ferry_dtype act, void *dst, const float *acc, size_t n);

/* dst[c] += sum over r of src[r * cols + c] (src row-major rows x cols, of
 * the storage type); fp32 sums in a fixed order (deterministic, no
 * atomics). Defined in matmul.cu. */
ferry_status cuda_colsum_add(cudaStream_t stream, ferry_dtype act, void *dst, const void *src, int rows, int cols);

#endif
