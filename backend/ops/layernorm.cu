/* LayerNorm on cuda, in either storage type (bf16 or f16): one warp per row
 * with fp32 statistics (forward saves
 * mean and rstd); the backward in two kernels, one warp per row for dinp and
 * a column reduction for dweight/dbias whose per-column sums run in fp32 in a
 * fixed order (deterministic; no atomics, no scratch). Host version:
 * layernorm.c. */
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr float LN_EPS = 1e-5f;
constexpr int ROWS_PER_BLOCK = 8; /* warps per block, one row each */

/* Row loops visit c = lane*per, lane*per + 32*per, ... with per = 8 (one
 * 16-byte access) when the row allows, 1 otherwise. */
template <typename T> __device__ __forceinline__ void load_n(float *v, const T *p, int per)
{
    if (per == 8) {
        cu_load8(v, p);
    } else {
        v[0] = cu_f32(*p);
    }
}

template <typename T> __device__ __forceinline__ void store_n(T *p, const float *v, int per)
{
    if (per == 8) {
        cu_store8(p, v);
    } else {
        *p = cu_round<T>(v[0]);
    }
}

template <typename T>
__global__ void layernorm_forward_kernel(T *out, float *mean_out, float *rstd_out, const T *inp, const T *weight,
                                         const T *bias, int N, int C, bool vec)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const int per = vec ? 8 : 1;
    const T *x = inp + (size_t)row * C;
    float v[8];
    float sum = 0.0f;
    for (int c = lane * per; c < C; c += 32 * per) {
        load_n(v, x + c, per);
        for (int j = 0; j < per; j++)
            sum += v[j];
    }
    const float mean = cu_warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane * per; c < C; c += 32 * per) {
        load_n(v, x + c, per);
        for (int j = 0; j < per; j++)
            sq += (v[j] - mean) * (v[j] - mean);
    }
    const float rstd = rsqrtf(cu_warp_sum(sq) / C + LN_EPS);
    for (int c = lane * per; c < C; c += 32 * per) {
        float w[8], b[8];
        load_n(v, x + c, per);
        load_n(w, weight + c, per);
        load_n(b, bias + c, per);
        for (int j = 0; j < per; j++)
            v[j] = (v[j] - mean) * rstd * w[j] + b[j];
        store_n(out + (size_t)row * C + c, v, per);
    }
    if (lane == 0) {
        if (mean_out)
            mean_out[row] = mean;
        if (rstd_out)
            rstd_out[row] = rstd;
    }
}

/* dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w. */
template <typename T>
__global__ void layernorm_dinp_kernel(T *dinp, const T *dout, const T *inp, const T *weight, const float *mean,
                                      const float *rstd, int N, int C, bool vec)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (row >= N)
        return;
    const int per = vec ? 8 : 1;
    const float mu = mean[row], rs = rstd[row];
    const T *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    T *dx = dinp + (size_t)row * C;
    float a[8], g[8], w[8];
    float sum_dn = 0.0f, sum_dnx = 0.0f;
    for (int c = lane * per; c < C; c += 32 * per) {
        load_n(a, x + c, per);
        load_n(g, dy + c, per);
        load_n(w, weight + c, per);
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
        load_n(a, x + c, per);
        load_n(g, dy + c, per);
        load_n(w, weight + c, per);
        load_n(d, dx + c, per);
        for (int j = 0; j < per; j++) {
            float xhat = (a[j] - mu) * rs;
            d[j] += (g[j] * w[j] - mean_dn - xhat * mean_dnx) * rs;
        }
        store_n(dx + c, d, per);
    }
}

/* dweight[c] += sum_r dout[r,c] xhat[r,c]; dbias[c] += sum_r dout[r,c].
 * A block owns 32 columns; 32 x 32 threads stride over rows; fixed tree.
 * Launched with 1024 threads: __launch_bounds__ keeps ptxas within the
 * 64 registers a thread such a block may have. */
template <typename T>
__global__ void __launch_bounds__(1024) layernorm_dparams_kernel(T *dweight, T *dbias, const T *dout, const T *inp, const float *mean,
                                         const float *rstd, int N, int C)
{
    __shared__ float pw[32][33], pb[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int r = ty; r < N; r += 32) {
            const size_t at = (size_t)r * C + c;
            const float g = cu_f32(dout[at]);
            sw += g * (cu_f32(inp[at]) - mean[r]) * rstd[r];
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
            dweight[c] = cu_round<T>(cu_f32(dweight[c]) + pw[0][tx]);
        if (dbias)
            dbias[c] = cu_round<T>(cu_f32(dbias[c]) + pb[0][tx]);
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
        layernorm_forward_kernel<T><<<blocks, 32 * ROWS_PER_BLOCK, 0, cu_stream(stream)>>>(
            static_cast<T *>(out), mean, rstd, static_cast<const T *>(inp), static_cast<const T *>(weight),
            static_cast<const T *>(bias), N, C, vec);
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
            layernorm_dinp_kernel<T><<<blocks, 32 * ROWS_PER_BLOCK, 0, s>>>(
                static_cast<T *>(dinp), dy, x, static_cast<const T *>(weight), mean, rstd, N, C, vec);
            CUDA_CHECK_LAUNCH();
        }
        if (dweight || dbias) {
            layernorm_dparams_kernel<T><<<(C + 31) / 32, dim3(32, 32), 0, s>>>(
                static_cast<T *>(dweight), static_cast<T *>(dbias), dy, x, mean, rstd, N, C);
            CUDA_CHECK_LAUNCH();
        }
        return FERRY_OK;
    });
}
