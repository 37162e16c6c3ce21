/* LayerNorm on cuda, in either storage type (bf16 or f16): one warp per row
 * with fp32 statistics (forward saves mean and rstd); the backward in two
 * kernels, one warp per row for dinp and a column reduction for
 * dweight/dbias whose per-column sums run in fp32 in a fixed order
 * (deterministic; no atomics, no scratch). Host version: layernorm.c.
 *
 * The backward's dinp keeps its row of inp and dout in registers (CHUNKS x
 * 8 values a lane, C up to 2048 with 16-byte accesses), so each is read
 * from memory once; other rows (C above 2048, or not a multiple of 8) take
 * the two-pass kernel that reads them twice. dweight/dbias: a block per
 * strip of 16 columns (cuda_util.cuh's cu_strip_sum): 100 blocks at C =
 * 1600 (32-column blocks of 32 x 32 threads gave 50, fewer than a card's
 * SMs; that kernel, and the run-time-length dinp, are the kernel lab's
 * layernorm variant 3). */
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr float LN_EPS = 1e-5f;
constexpr int ROWS_PER_BLOCK = 8; /* warps per block, one row each */

/* Row loops visit c = lane PER, lane PER + 32 PER, ... with PER = 8 (one
 * 16-byte access) when the row allows, 1 otherwise; PER is a template
 * argument so that the loops over the 8-value arrays unroll and the arrays
 * stay in registers (a count known only at run time put them on the
 * stack). */
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

/* occupancy floor: 32 warps/SM: `layernorm_forward_kernel<.*>` (memory-bound) */
template <typename T, int PER>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    layernorm_forward_kernel(T *out, float *mean_out, float *rstd_out, const T *inp, const T *weight, const T *bias,
                             int N, int C)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const T *x = inp + (size_t)row * C;
    float v[8];
    float sum = 0.0f;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(v, x + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            sum += v[j];
    }
    const float mean = cu_warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(v, x + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            sq += (v[j] - mean) * (v[j] - mean);
    }
    const float rstd = rsqrtf(cu_warp_sum(sq) / C + LN_EPS);
    for (int c = lane * PER; c < C; c += 32 * PER) {
        float w[8], b[8];
        load_n<PER>(v, x + c);
        load_n<PER>(w, weight + c);
        load_n<PER>(b, bias + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            v[j] = (v[j] - mean) * rstd * w[j] + b[j];
        store_n<PER>(out + (size_t)row * C + c, v);
    }
    if (lane == 0) {
        if (mean_out)
            mean_out[row] = mean;
        if (rstd_out)
            rstd_out[row] = rstd;
    }
}

/* dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w. */
/* occupancy floor: 32 warps/SM: `layernorm_dinp_kernel<.*>` (memory-bound) */
template <typename T, int PER>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    layernorm_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *weight, const float *mean,
                          const float *rstd, int N, int C)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const float mu = mean[row], rs = rstd[row];
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    float a[8], g[8], w[8];
    float sum_dn = 0.0f, sum_dnx = 0.0f;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(a, x + c);
        load_n<PER>(g, dy + c);
        load_n<PER>(w, weight + c);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            float dn = g[j] * w[j];
            sum_dn += dn;
            sum_dnx += dn * (a[j] - mu) * rs;
        }
    }
    const float mean_dn = cu_warp_sum(sum_dn) / C;
    const float mean_dnx = cu_warp_sum(sum_dnx) / C;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        float d[8];
        load_n<PER>(a, x + c);
        load_n<PER>(g, dy + c);
        load_n<PER>(w, weight + c);
        load_n<PER>(d, dx + c);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            float xhat = (a[j] - mu) * rs;
            d[j] += (g[j] * w[j] - mean_dn - xhat * mean_dnx) * rs;
        }
        store_n<PER>(dx + c, d);
    }
}

/* Blocks an SM is to hold of the row kernel below (its __launch_bounds__),
 * so that ptxas keeps its registers within their share, 65,536 / (256 x
 * blocks): the kernel is bound by memory, where warps in flight matter
 * more than registers. The row's 2 x CHUNKS 16-byte words take 8 CHUNKS
 * registers: at 8 chunks the share is 128 (2 blocks, 16 warps; it needs
 * 96), at 4 chunks 64 (4 blocks, 32 warps; it needs 64). At 1 or 2 chunks
 * no minimum (0): it needs 40 or fewer, and a minimum of 8 blocks is more
 * than sm_75, 86 and 89 hold, which ptxas warns of. */
constexpr int dinp_rows_blocks(int chunks) { return chunks >= 8 ? 2 : chunks >= 4 ? 4 : 0; }

/* The same with the row in registers: lane l holds columns (k 32 + l) 8 ..
 * + 8 for k < CHUNKS (C <= 256 CHUNKS, C % 8 == 0, 16-byte aligned rows),
 * as raw 16-byte words; inp and dout are read once. */
/* occupancy floor: 16 warps/SM: `layernorm_dinp_rows_kernel<.*>`
 * (its launch bounds hold the 8-chunk rows, GPT-2 XL's, to 96 registers: 2 blocks of 256 an SM) */
template <typename T, int CHUNKS>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK, dinp_rows_blocks(CHUNKS))
    layernorm_dinp_rows_kernel(T *dinp, const T *dout, const T *inp, const T *weight, const float *mean,
                               const float *rstd, int N, int C)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const float mu = mean[row], rs = rstd[row];
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    uint4 xr[CHUNKS], gr[CHUNKS];
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
        const int c = (k * 32 + lane) * 8;
        if (c < C) {
            xr[k] = *reinterpret_cast<const uint4 *>(x + c);
            gr[k] = *reinterpret_cast<const uint4 *>(dy + c);
        }
    }
    float sum_dn = 0.0f, sum_dnx = 0.0f;
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
        const int c = (k * 32 + lane) * 8;
        if (c >= C)
            continue;
        float a[8], g[8], w[8];
        cu_load8(a, reinterpret_cast<const T *>(&xr[k]));
        cu_load8(g, reinterpret_cast<const T *>(&gr[k]));
        cu_load8(w, weight + c);
        for (int j = 0; j < 8; j++) {
            const float dn = g[j] * w[j];
            sum_dn += dn;
            sum_dnx += dn * (a[j] - mu) * rs;
        }
    }
    const float mean_dn = cu_warp_sum(sum_dn) / C;
    const float mean_dnx = cu_warp_sum(sum_dnx) / C;
#pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
        const int c = (k * 32 + lane) * 8;
        if (c >= C)
            continue;
        float a[8], g[8], w[8], d[8];
        cu_load8(a, reinterpret_cast<const T *>(&xr[k]));
        cu_load8(g, reinterpret_cast<const T *>(&gr[k]));
        cu_load8(w, weight + c);
        cu_load8(d, dx + c);
        for (int j = 0; j < 8; j++)
            d[j] += (g[j] * w[j] - mean_dn - (a[j] - mu) * rs * mean_dnx) * rs;
        cu_store8(dx + c, d);
    }
}

/* dweight[c] += sum_r dout[r,c] xhat[r,c]; dbias[c] += sum_r dout[r,c]:
 * a block per strip of 16 columns, 512 row slots of two halves (8 columns,
 * one 16-byte load each when `vec`), partial sums met in a fixed order. */
/* occupancy floor: 32 warps/SM: `layernorm_dparams_kernel<.*>` (one 1024-thread block) */
template <typename T>
__global__ void __launch_bounds__(1024)
    layernorm_dparams_kernel(T *dweight, T *dbias, const T *dout, const T *inp, const float *mean,
                             const float *rstd, int N, int C, bool vec)
{
    __shared__ cu_strip_smem sm;
    const int c0 = blockIdx.x * CU_STRIP + 8 * (threadIdx.x & 1);
    float sw[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float sb[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
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
        const float mu = mean[r], rs = rstd[r];
        for (int j = 0; j < 8; j++) {
            sw[j] += g[j] * (a[j] - mu) * rs;
            sb[j] += g[j];
        }
    }
    const float w = cu_strip_sum(sw, sm);
    const float bsum = cu_strip_sum(sb, sm);
    const int c = blockIdx.x * CU_STRIP + (int)threadIdx.x;
    if (threadIdx.x < CU_STRIP && c < C) {
        if (dweight)
            dweight[c] = cu_round<T>(cu_f32(dweight[c]) + w);
        if (dbias)
            dbias[c] = cu_round<T>(cu_f32(dbias[c]) + bsum);
    }
}

ferry_status check_shape(const char *op, int N, int C)
{
    CU_REQUIRE(N > 0 && C > 0, "%s: sizes must be positive, got N=%d C=%d", op, N, C);
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status cudaop_layernorm_forward(void *stream, ferry_dtype act, act_t *out, float *mean,
                                                 float *rstd, const act_t *inp, const act_t *weight,
                                                 const act_t *bias, int N, int C)
{
    ferry_status st = check_shape("layernorm_forward", N, C);
    if (st != FERRY_OK)
        return st;
    const bool vec = C % 8 == 0 && cu_aligned16(out, inp) && cu_aligned16(weight, bias);
    const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    return cu_with_type(act, "layernorm_forward", [&](auto tag) {
        using T = decltype(tag);
        cudaStream_t s = cu_stream(stream);
        T *o = static_cast<T *>(out);
        const T *x = static_cast<const T *>(inp), *w = static_cast<const T *>(weight);
        const T *b = static_cast<const T *>(bias);
        if (vec)
            layernorm_forward_kernel<T, 8><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(o, mean, rstd, x, w, b, N, C);
        else
            layernorm_forward_kernel<T, 1><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(o, mean, rstd, x, w, b, N, C);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_layernorm_backward(void *stream, ferry_dtype act, act_t *dinp, act_t *dweight,
                                                  act_t *dbias, const act_t *dout, const act_t *inp,
                                                  const act_t *weight, const float *mean, const float *rstd,
                                                  int N, int C)
{
    ferry_status st = check_shape("layernorm_backward", N, C);
    if (st != FERRY_OK)
        return st;
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "layernorm_backward", [&](auto tag) {
        using T = decltype(tag);
        const T *dy = static_cast<const T *>(dout), *x = static_cast<const T *>(inp);
        if (dinp) {
            const bool vec = C % 8 == 0 && cu_aligned16(dinp, dout, inp) && cu_aligned16(weight);
            const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
            T *dx = static_cast<T *>(dinp);
            const T *w = static_cast<const T *>(weight);
            const int chunks = (C + 255) / 256;
            if (vec && chunks <= 1)
                layernorm_dinp_rows_kernel<T, 1><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
            else if (vec && chunks <= 2)
                layernorm_dinp_rows_kernel<T, 2><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
            else if (vec && chunks <= 4)
                layernorm_dinp_rows_kernel<T, 4><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
            else if (vec && chunks <= 8)
                layernorm_dinp_rows_kernel<T, 8><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
            else if (vec)
                layernorm_dinp_kernel<T, 8><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
            else
                layernorm_dinp_kernel<T, 1><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
            CUDA_CHECK_LAUNCH();
        }
        if (dweight || dbias) {
            const bool vec = C % 8 == 0 && cu_aligned16(dout, inp);
            layernorm_dparams_kernel<T><<<(C + CU_STRIP - 1) / CU_STRIP, 1024, 0, s>>>(
                static_cast<T *>(dweight), static_cast<T *>(dbias), dy, x, mean, rstd, N, C, vec);
            CUDA_CHECK_LAUNCH();
        }
        return FERRY_OK;
    });
}
