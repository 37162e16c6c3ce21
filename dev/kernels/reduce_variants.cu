/* Kernel lab: variants of the column reductions and of layernorm's dinp,
 * beside the production kernels (backend/ops/matmul.cu, backend/ops/layernorm.cu),
 * checked by dev/kernels/matmul.c and dev/kernels/layernorm.c. The kernels
 * production ran before its 16-column strips (cuda_util.cuh's cu_strip_sum)
 * and its register-row dinp, copied here (they are private to the backend's
 * files), and the variants measured against them on the H200:
 *   colsum 2 and layernorm dparams 0: each block 32 columns and every row
 *     (C / 32 = 50 blocks at C = 1600, far fewer than a card's SMs);
 *   colsum 1 and layernorm dparams 1: the rows also split over
 *     LAB_ROW_SLICES blocks per column group, fp32 partial sums in scratch
 *     added in a fixed order by a second kernel (deterministic, no atomics);
 *   layernorm dinp 0: per-thread arrays of run-time length (8 or 1), which
 *     the compiler keeps in local memory; dinp 1: the length a template
 *     parameter, the loops unrolled into registers (measured 1.9x dinp 0).
 * Each change is timed alone: lab_layernorm_backward_v(dinp 0|1, dparams
 * 0|1); lab_colsum_add(0 production, 1 row slices, 2 the previous). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "dev/kernels/lab.h"
#include "backend/ops/cuda_util.cuh"

namespace {

typedef __nv_bfloat16 bf16;
constexpr int ROWS_PER_BLOCK = 8;

/* ---- copies of the previous production kernels ---- */

/* dst[c] += sum_r src[r, c]: a block owns 32 columns, its 32 x 32 threads
 * stride over the rows, and a fixed tree adds the 32 partial sums. */
__global__ void colsum_prev_kernel(bf16 *dst, const bf16 *src, int rows, int cols)
{
    __shared__ float part[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += 32)
            sum += __bfloat162float(src[(size_t)r * cols + c]);
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    for (int s = 16; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols)
        dst[c] = __float2bfloat16_rn(__bfloat162float(dst[c]) + part[0][threadIdx.x]);
}

/* Row loops visit c = lane*per, lane*per + 32*per, ... with per = 8 (one
 * 16-byte access) when the row allows, 1 otherwise. */
__device__ __forceinline__ void load_rt(float *v, const bf16 *p, int per)
{
    if (per == 8) {
        cu_load8(v, p);
    } else {
        v[0] = __bfloat162float(*p);
    }
}

__device__ __forceinline__ void store_rt(bf16 *p, const float *v, int per)
{
    if (per == 8) {
        cu_store8(p, v);
    } else {
        *p = __float2bfloat16_rn(v[0]);
    }
}

/* dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w. */
__global__ void layernorm_dinp0_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp,
                                      const bf16 *weight, const float *mean, const float *rstd,
                                      int N, int C, bool vec)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const int per = vec ? 8 : 1;
    const float mu = mean[row], rs = rstd[row];
    const bf16 *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    bf16 *dx = dinp + (size_t)row * C;
    float a[8], g[8], w[8];
    float sum_dn = 0.0f, sum_dnx = 0.0f;
    for (int c = lane * per; c < C; c += 32 * per) {
        load_rt(a, x + c, per);
        load_rt(g, dy + c, per);
        load_rt(w, weight + c, per);
        for (int j = 0; j < per; j++) {
            float dn = g[j] * w[j];
            sum_dn += dn;
            sum_dnx += dn * (a[j] - mu) * rs;
        }
    }
    const float mean_dn = cu_warp_sum(sum_dn) / C;
    const float mean_dnx = cu_warp_sum(sum_dnx) / C;
    for (int c = lane * per; c < C; c += 32 * per) {
        float d[8];
        load_rt(a, x + c, per);
        load_rt(g, dy + c, per);
        load_rt(w, weight + c, per);
        load_rt(d, dx + c, per);
        for (int j = 0; j < per; j++) {
            float xhat = (a[j] - mu) * rs;
            d[j] += (g[j] * w[j] - mean_dn - xhat * mean_dnx) * rs;
        }
        store_rt(dx + c, d, per);
    }
}

/* dweight[c] += sum_r dout[r,c] xhat[r,c]; dbias[c] += sum_r dout[r,c].
 * A block owns 32 columns; 32 x 32 threads stride over rows; fixed tree. */
__global__ void layernorm_dparams0_kernel(bf16 *dweight, bf16 *dbias, const bf16 *dout,
                                         const bf16 *inp, const float *mean, const float *rstd,
                                         int N, int C)
{
    __shared__ float pw[32][33], pb[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int r = ty; r < N; r += 32) {
            const size_t at = (size_t)r * C + c;
            const float g = __bfloat162float(dout[at]);
            sw += g * (__bfloat162float(inp[at]) - mean[r]) * rstd[r];
            sb += g;
        }
    pw[ty][tx] = sw;
    pb[ty][tx] = sb;
    __syncthreads();
    for (int s = 16; s > 0; s >>= 1) {
        if (ty < s) {
            pw[ty][tx] += pw[ty + s][tx];
            pb[ty][tx] += pb[ty + s][tx];
        }
        __syncthreads();
    }
    if (ty == 0 && c < C) {
        if (dweight)
            dweight[c] = __float2bfloat16_rn(__bfloat162float(dweight[c]) + pw[0][tx]);
        if (dbias)
            dbias[c] = __float2bfloat16_rn(__bfloat162float(dbias[c]) + pb[0][tx]);
    }
}

/* ---- the variants ---- */


/* partial[slice][c] = sum over the slice's rows of src[r, c] (and of
 * src[r, c] * xhat[r, c] when w_partial is given). */
__global__ void colsum_slices_kernel(float *partial, float *w_partial, const bf16 *src, const bf16 *inp,
                                     const float *mean, const float *rstd, int rows, int cols)
{
    __shared__ float part[32][33], wpart[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x, slice = blockIdx.y;
    const int per = (rows + gridDim.y - 1) / gridDim.y, r0 = slice * per, r1 = min(rows, r0 + per);
    float s = 0.0f, sw = 0.0f;
    if (c < cols)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 32) {
            const size_t at = (size_t)r * cols + c;
            const float g = __bfloat162float(src[at]);
            s += g;
            if (w_partial)
                sw += g * (__bfloat162float(inp[at]) - mean[r]) * rstd[r];
        }
    part[threadIdx.y][threadIdx.x] = s;
    wpart[threadIdx.y][threadIdx.x] = sw;
    __syncthreads();
    for (int k = 16; k > 0; k >>= 1) {
        if ((int)threadIdx.y < k) {
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + k][threadIdx.x];
            wpart[threadIdx.y][threadIdx.x] += wpart[threadIdx.y + k][threadIdx.x];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols) {
        partial[(size_t)slice * cols + c] = part[0][threadIdx.x];
        if (w_partial)
            w_partial[(size_t)slice * cols + c] = wpart[0][threadIdx.x];
    }
}

/* dst[c] = bf16(dst[c] + sum of the slices in order). */
__global__ void add_slices_kernel(bf16 *dst, const float *partial, int slices, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols || !dst)
        return;
    float s = 0.0f;
    for (int k = 0; k < slices; k++)
        s += partial[(size_t)k * cols + c];
    dst[c] = __float2bfloat16_rn(__bfloat162float(dst[c]) + s);
}

/* n = 8: one 16-byte access; n = 1: one element. Fixed at compile time. */
template <int PER> __device__ __forceinline__ void load_n(float (&v)[PER], const bf16 *p)
{
    if (PER == 8) {
        uint4 raw = *reinterpret_cast<const uint4 *>(p);
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
        for (int i = 0; i < PER / 2; i++) {
            float2 f = __bfloat1622float2(h[i]);
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    } else {
        v[0] = __bfloat162float(*p);
    }
}

template <int PER> __device__ __forceinline__ void store_n(bf16 *p, const float (&v)[PER])
{
    if (PER == 8) {
        uint4 raw;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
        for (int i = 0; i < PER / 2; i++)
            h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        *reinterpret_cast<uint4 *>(p) = raw;
    } else {
        *p = __float2bfloat16_rn(v[0]);
    }
}

template <int PER>
__global__ void layernorm_dinp1_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                                       const float *mean, const float *rstd, int N, int C)
{
    const int lane = threadIdx.x % 32, row = blockIdx.x * 8 + threadIdx.x / 32;
    if (row >= N)
        return;
    const float mu = mean[row], rs = rstd[row];
    const bf16 *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    bf16 *dx = dinp + (size_t)row * C;
    float a[PER], g[PER], w[PER], d[PER];
    float sum_dn = 0.0f, sum_dnx = 0.0f;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(a, x + c);
        load_n<PER>(g, dy + c);
        load_n<PER>(w, weight + c);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const float dn = g[j] * w[j];
            sum_dn += dn;
            sum_dnx += dn * (a[j] - mu) * rs;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        sum_dn += __shfl_xor_sync(0xffffffffu, sum_dn, o);
        sum_dnx += __shfl_xor_sync(0xffffffffu, sum_dnx, o);
    }
    const float mean_dn = sum_dn / C, mean_dnx = sum_dnx / C;
    for (int c = lane * PER; c < C; c += 32 * PER) {
        load_n<PER>(a, x + c);
        load_n<PER>(g, dy + c);
        load_n<PER>(w, weight + c);
        load_n<PER>(d, dx + c);
#pragma unroll
        for (int j = 0; j < PER; j++)
            d[j] += (g[j] * w[j] - mean_dn - (a[j] - mu) * rs * mean_dnx) * rs;
        store_n<PER>(dx + c, d);
    }
}

ferry_status slices(void *stream, bf16 *dst, bf16 *dweight, const bf16 *src, const bf16 *inp, const float *mean,
                    const float *rstd, int rows, int cols, void *scratch)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    float *partial = static_cast<float *>(scratch);
    float *w_partial = dweight ? partial + (size_t)LAB_ROW_SLICES * cols : nullptr;
    colsum_slices_kernel<<<dim3((cols + 31) / 32, LAB_ROW_SLICES), dim3(32, 32), 0, s>>>(partial, w_partial, src, inp,
                                                                                        mean, rstd, rows, cols);
    CUDA_CHECK_LAUNCH();
    add_slices_kernel<<<(cols + 255) / 256, 256, 0, s>>>(dst, partial, LAB_ROW_SLICES, cols);
    CUDA_CHECK_LAUNCH();
    if (dweight) {
        add_slices_kernel<<<(cols + 255) / 256, 256, 0, s>>>(dweight, w_partial, LAB_ROW_SLICES, cols);
        CUDA_CHECK_LAUNCH();
    }
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status lab_colsum_add(void *stream, int variant, void *dst, const void *src, int rows, int cols,
                                       void *scratch)
{
    if (rows <= 0 || cols <= 0)
        return FERRY_OK;
    if (variant == 0)
        return cuda_colsum_add(static_cast<cudaStream_t>(stream), FERRY_DTYPE_BF16, dst, src, rows, cols);
    if (variant == 2) {
        colsum_prev_kernel<<<(cols + 31) / 32, dim3(32, 32), 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<bf16 *>(dst), static_cast<const bf16 *>(src), rows, cols);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    }
    return slices(stream, static_cast<bf16 *>(dst), nullptr, static_cast<const bf16 *>(src), nullptr, nullptr,
                  nullptr, rows, cols, scratch);
}

extern "C" ferry_status lab_layernorm_backward_v(void *stream, int dinp_variant, int dparams_variant, void *dinp,
                                                 void *dweight, void *dbias, const void *dout, const void *inp,
                                                 const void *weight, const float *mean, const float *rstd, int N,
                                                 int C, void *scratch)
{
    if (N <= 0 || C <= 0)
        return FERRY_OK;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    bf16 *dx = static_cast<bf16 *>(dinp), *dw = static_cast<bf16 *>(dweight), *db = static_cast<bf16 *>(dbias);
    const bf16 *dy = static_cast<const bf16 *>(dout), *x = static_cast<const bf16 *>(inp),
               *w = static_cast<const bf16 *>(weight);
    const bool vec = C % 8 == 0 && cu_aligned16(dinp, dout, inp) && cu_aligned16(weight);
    const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    if (dinp_variant == 0)
        layernorm_dinp0_kernel<<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C, vec);
    else if (vec)
        layernorm_dinp1_kernel<8><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
    else
        layernorm_dinp1_kernel<1><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(dx, dy, x, w, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    if (dparams_variant == 0) {
        layernorm_dparams0_kernel<<<(C + 31) / 32, dim3(32, 32), 0, s>>>(dw, db, dy, x, mean, rstd, N, C);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    }
    return slices(stream, db, dw, dy, x, mean, rstd, N, C, scratch);
}
