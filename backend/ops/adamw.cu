/* The device optimizer for the engine's no-offload mode (ops_adamw,
 * ops_sumsq and ops_accumulate on cuda; the host reference is
 * backend/ops/adamw.c): torch.optim.AdamW on fp32 master weights and moments in
 * device memory, reading gradients of the storage type (bf16 or f16; or
 * their fp32 sum over micro-batches) and writing the parameter copy in the
 * storage type; the deterministic sum
 * of squares behind global-norm clipping and the inf/NaN check; and the fp32
 * sum of a step's micro-batch gradients. The CPU AdamW (optim/) is the one
 * used when the state is offloaded. */
#include <math.h>

#include "common/numerics.h"
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr int SUMSQ_BLOCKS = OPS_SUMSQ_PARTIALS; /* fixed: the reduction tree must not depend on the GPU */
constexpr int SUMSQ_THREADS = 256;

/* One element of common/numerics.h's adamw_element, each operation rounded
 * as written: the moments' two fused multiply-adds as the CPU's, every
 * other product, sum and quotient alone, so nvcc cannot contract them and
 * the bits are the CPU optimizer's (optim/) and the host reference's. */
__device__ __forceinline__ float adamw_element_dev(const adamw_consts &c, float &p, float &m, float &v, float g)
{
    g = __fmul_rn(g, c.grad_scale);
    const float mm = __fmaf_rn(c.one_minus_beta1, g, __fmul_rn(c.beta1, m));
    const float vv = __fmaf_rn(__fmul_rn(c.one_minus_beta2, g), g, __fmul_rn(c.beta2, v));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv), c.bc2_sqrt), c.eps);
    /* torch: param.mul_(decay), then addcdiv: param + (value * m) / denom */
    p = __fadd_rn(__fmul_rn(p, c.decay), __fdiv_rn(__fmul_rn(c.neg_step, mm), denom));
    m = mm;
    v = vv;
    return p;
}

/* occupancy floor: 32 warps/SM: `adamw_kernel<.*>` (memory-bound) */
template <typename G, typename T>
__global__ void adamw_kernel(float *master, float *m, float *v, const G *grad, T *param_out, size_t n,
                             const adamw_consts c)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = master[i], mi = m[i], vi = v[i];
        adamw_element_dev(c, p, mi, vi, cu_f32(grad[i]));
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        if (param_out)
            param_out[i] = cu_round<T>(p);
    }
}

/* Block b sums elements b*T + t, stepping by the whole grid, in fp64. */
template <typename G>
__global__ void __launch_bounds__(SUMSQ_THREADS)
    sumsq_partial_kernel(const G *grad, size_t n, double *partials)
{
    __shared__ double warp_sums[SUMSQ_THREADS / 32];
    const size_t stride = (size_t)SUMSQ_BLOCKS * SUMSQ_THREADS;
    double sum = 0.0;
    for (size_t i = (size_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n; i += stride) {
        const double g = cu_f32(grad[i]);
        sum += g * g;
    }
    sum = cu_warp_sum_d(sum);
    if (threadIdx.x % 32 == 0)
        warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < SUMSQ_THREADS / 32; w++)
            total += warp_sums[w];
        partials[blockIdx.x] = total;
    }
}

__global__ void __launch_bounds__(SUMSQ_BLOCKS)
    sumsq_final_kernel(const double *partials, double *out)
{
    __shared__ double tree[SUMSQ_BLOCKS];
    tree[threadIdx.x] = partials[threadIdx.x];
    __syncthreads();
    for (int s = SUMSQ_BLOCKS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            tree[threadIdx.x] += tree[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out += tree[0];
}

/* occupancy floor: 32 warps/SM: `accumulate_kernel<.*>` (memory-bound) */
template <typename T> __global__ void accumulate_kernel(float *acc, const T *g, size_t n, bool first)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc[i] = first ? cu_f32(g[i]) : acc[i] + cu_f32(g[i]);
}

} // namespace

extern "C" ferry_status cudaop_adamw(void *stream, ferry_dtype act, float *master, float *m, float *v,
                                     const void *grad, ferry_dtype grad_dtype, void *param_out, size_t n,
                                     const adamw_hparams *hp, int64_t step, float grad_scale)
{
    CU_REQUIRE(hp, "adamw: the hyperparameters are NULL");
    CU_REQUIRE(step >= 1, "adamw: step must be >= 1 (the first update is step 1), got %lld",
               (long long)step);
    CU_REQUIRE(hp->beta1 >= 0.0 && hp->beta1 < 1.0 && hp->beta2 >= 0.0 && hp->beta2 < 1.0,
               "adamw: betas must lie in [0, 1), got %g and %g", hp->beta1, hp->beta2);
    CU_REQUIRE(hp->lr >= 0.0 && hp->eps >= 0.0 && hp->weight_decay >= 0.0,
               "adamw: need lr >= 0, eps >= 0 (as the CPU optimizer), weight_decay >= 0; got %g, %g, %g", hp->lr,
               hp->eps, hp->weight_decay);
    if (n == 0)
        return FERRY_OK;
    CU_REQUIRE(master && m && v && grad, "adamw: master, m, v and grad must not be NULL");
    CU_REQUIRE(grad_dtype == act || grad_dtype == FERRY_DTYPE_F32,
               "adamw: gradients of type %s; the storage type (%s) or f32", dtype_name(grad_dtype), dtype_name(act));
    /* The factors from the one definition the CPU uses (common/numerics.h). */
    const adamw_consts c = adamw_consts_make(hp, step, grad_scale);
    const unsigned blocks = cu_blocks(n, 256, CU_GRID_STRIDE_BLOCKS);
    return cu_with_type(act, "adamw", [&](auto tag) {
        using T = decltype(tag);
        T *out = static_cast<T *>(param_out);
        if (grad_dtype == FERRY_DTYPE_F32)
            adamw_kernel<<<blocks, 256, 0, cu_stream(stream)>>>(master, m, v, static_cast<const float *>(grad), out,
                                                                n, c);
        else
            adamw_kernel<<<blocks, 256, 0, cu_stream(stream)>>>(master, m, v, static_cast<const T *>(grad), out, n, c);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" size_t cudaop_sumsq_scratch_bytes(void) { return SUMSQ_BLOCKS * sizeof(double); }

extern "C" ferry_status cudaop_sumsq(void *stream, const void *grad, ferry_dtype grad_dtype, size_t n,
                                     double *out_device_sumsq_accumulate, void *scratch)
{
    CU_REQUIRE(out_device_sumsq_accumulate && scratch,
               "sumsq: the result and the scratch (cudaop_sumsq_scratch_bytes() bytes) must be "
               "device pointers, one is NULL");
    if (n == 0)
        return FERRY_OK;
    CU_REQUIRE(grad, "sumsq: grad is NULL with n=%zu", n);
    CU_REQUIRE(grad_dtype == FERRY_DTYPE_BF16 || grad_dtype == FERRY_DTYPE_F16 || grad_dtype == FERRY_DTYPE_F32,
               "sumsq: gradients of type %s; bf16, f16 or f32", dtype_name(grad_dtype));
    cudaStream_t s = cu_stream(stream);
    double *partials = static_cast<double *>(scratch);
    if (grad_dtype == FERRY_DTYPE_F32)
        sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s>>>(static_cast<const float *>(grad), n, partials);
    else if (grad_dtype == FERRY_DTYPE_F16)
        sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s>>>(static_cast<const f16 *>(grad), n, partials);
    else
        sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s>>>(static_cast<const bf16 *>(grad), n, partials);
    CUDA_CHECK_LAUNCH();
    sumsq_final_kernel<<<1, SUMSQ_BLOCKS, 0, s>>>(partials, out_device_sumsq_accumulate);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

extern "C" ferry_status cudaop_accumulate(void *stream, ferry_dtype act, float *acc, const void *g, size_t n,
                                          bool first)
{
    if (n == 0)
        return FERRY_OK;
    CU_REQUIRE(acc && g, "accumulate: acc and g must be device pointers, one is NULL");
    return cu_with_type(act, "accumulate", [&](auto tag) {
        using T = decltype(tag);
        accumulate_kernel<T><<<cu_blocks(n, 256, CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(
            acc, static_cast<const T *>(g), n, first);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
