/* RMSNorm (Llama's) on cuda, in either storage type (bf16 or f16): one warp
 * per row with the mean of squares summed in fp32 (the forward saves rstd);
 * the backward in two kernels, one warp per row for dinp and a column
 * reduction for dweight whose per-column sums run in fp32 in a fixed order
 * (deterministic: no atomics, no scratch). Host version: rmsnorm.c.
 *
 * Rows go 8 values a lane through 16-byte accesses when C is a multiple of
 * 8 and the pointers are aligned, one value a lane otherwise. dweight: a
 * block per strip of 16 columns (cuda_util.cuh's cu_strip_sum), as
 * layernorm's dweight/dbias. */
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr int ROWS_PER_BLOCK = 8; /* warps per block, one row each */

/* Row loops visit c = lane PER, lane PER + 32 PER, ... with PER = 8 (one
 * 16-byte access) when the row allows, 1 otherwise; PER is a template
 * argument so that the 8-value arrays stay in registers. */
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

/* rstd = 1 / sqrt(mean(x^2) + eps); out = x rstd w. */
/* occupancy floor: 32 warps/SM: `rmsnorm_forward_kernel<.*>` (memory-bound) */
template <typename T, int PER>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    rmsnorm_forward_kernel(T *out, float *rstd_out, const T *inp, const T *weight, int N, int C, float eps)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C;
    T *o = out + (size_t)row * C;
    float v[8], w[8];
    float sq = 0.0f;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(v, x + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            sq += v[j] * v[j];
    }
    const float rstd = rsqrtf(cu_warp_sum(sq) / C + eps);
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(v, x + c);
        load_n<PER>(w, weight + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            v[j] = v[j] * rstd * w[j];
        store_n<PER>(o + c, v);
    }
    if (lane == 0)
        rstd_out[row] = rstd;
}

/* dinp += rstd w dout - x rstd^3 mean(w dout x). */
/* occupancy floor: 32 warps/SM: `rmsnorm_dinp_kernel<.*>` (memory-bound) */
template <typename T, int PER>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    rmsnorm_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *weight, const float *rstd, int N, int C)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const float rs = rstd[row];
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    float a[8], g[8], w[8], d[8];
    float dot = 0.0f;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(a, x + c);
        load_n<PER>(g, dy + c);
        load_n<PER>(w, weight + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            dot += w[j] * g[j] * a[j];
    }
    const float k = cu_warp_sum(dot) / C * rs * rs * rs;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(a, x + c);
        load_n<PER>(g, dy + c);
        load_n<PER>(w, weight + c);
        load_n<PER>(d, dx + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            d[j] += rs * w[j] * g[j] - a[j] * k;
        store_n<PER>(dx + c, d);
    }
}

/* dweight[c] += sum_r dout[r,c] inp[r,c] rstd[r]: a block per strip of 16
 * columns, 512 row slots of two halves (8 columns, one 16-byte load each
 * when `vec`), partial sums met in a fixed order. */
/* occupancy floor: 32 warps/SM: `rmsnorm_dweight_kernel<.*>` (one 1024-thread block) */
template <typename T>
__global__ void __launch_bounds__(1024)
    rmsnorm_dweight_kernel(T *dweight, const T *dout, const T *inp, const float *rstd, int N, int C, bool vec)
{
    __shared__ cu_strip_smem sm;
    const int c0 = blockIdx.x * CU_STRIP + 8 * (threadIdx.x & 1);
    float sw[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int r = threadIdx.x / 2; r < N; r += 512) {
        const size_t at = (size_t)r * C + c0;
        float g[8], a[8];
        if (vec && c0 < C) {
            cu_load8(g, dout + at);
            cu_load8(a, inp + at);
        } else {
            for (int j = 0; j < 8; j++) {
                g[j] = c0 + j < C ? cu_f32(dout[at + j]) : 0.0f;
                a[j] = c0 + j < C ? cu_f32(inp[at + j]) : 0.0f;
            }
        }
        const float rs = rstd[r];
        for (int j = 0; j < 8; j++)
            sw[j] += g[j] * a[j] * rs;
    }
    const float w = cu_strip_sum(sw, sm);
    const int c = blockIdx.x * CU_STRIP + (int)threadIdx.x;
    if (threadIdx.x < CU_STRIP && c < C)
        dweight[c] = cu_round<T>(cu_f32(dweight[c]) + w);
}

ferry_status check_shape(const char *op, int N, int C)
{
    CU_REQUIRE(N > 0 && C > 0, "%s: sizes must be positive, got N=%d C=%d", op, N, C);
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status cudaop_rmsnorm_forward(void *stream, ferry_dtype act, act_t *out, float *rstd,
                                               const act_t *inp, const act_t *weight, int N, int C, float eps)
{
    ferry_status st = check_shape("rmsnorm_forward", N, C);
    if (st != FERRY_OK)
        return st;
    const bool vec = C % 8 == 0 && cu_aligned16(out, inp, weight);
    const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "rmsnorm_forward", [&](auto tag) {
        using T = decltype(tag);
        T *o = static_cast<T *>(out);
        const T *x = static_cast<const T *>(inp), *w = static_cast<const T *>(weight);
        if (vec)
            rmsnorm_forward_kernel<T, 8><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(o, rstd, x, w, N, C, eps);
        else
            rmsnorm_forward_kernel<T, 1><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(o, rstd, x, w, N, C, eps);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_rmsnorm_backward(void *stream, ferry_dtype act, act_t *dinp, act_t *dweight,
                                                const act_t *dout, const act_t *inp, const act_t *weight,
                                                const float *rstd, int N, int C)
{
    ferry_status st = check_shape("rmsnorm_backward", N, C);
    if (st != FERRY_OK)
        return st;
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "rmsnorm_backward", [&](auto tag) {
        using T = decltype(tag);
        const T *dy = static_cast<const T *>(dout), *x = static_cast<const T *>(inp);
        const bool vec_rows = C % 8 == 0 && cu_aligned16(dinp, dout, inp) && cu_aligned16(weight);
        const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
        T *dx = static_cast<T *>(dinp);
        const T *w = static_cast<const T *>(weight);
        if (vec_rows)
            rmsnorm_dinp_kernel<T, 8><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, rstd, N, C);
        else
            rmsnorm_dinp_kernel<T, 1><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, rstd, N, C);
        CUDA_CHECK_LAUNCH();
        const bool vec_cols = C % 8 == 0 && cu_aligned16(dout, inp);
        rmsnorm_dweight_kernel<T><<<(unsigned)((C + CU_STRIP - 1) / CU_STRIP), 1024, 0, s>>>(
            static_cast<T *>(dweight), dy, x, rstd, N, C, vec_cols);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
