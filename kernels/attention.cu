/* Causal multi-head attention on cuda, FlashAttention-2 style: nothing of
 * size T x T ever reaches device memory. Host version: attention.c.
 *
 * Forward: a block of 4 warps owns 64 queries of one (batch, head); each
 * warp owns 16 of them. Q, then each K/V tile of 64 keys up to the diagonal,
 * sit in shared memory (bf16, head dim zero-padded to a multiple of 16); the
 * score and P @ V products are WMMA bf16 16x16x16 with fp32 accumulation; an
 * online softmax in fp32 (two lanes per query row) rescales the running
 * output, kept in fp32 in shared memory. Writes O and lse = m + log(l).
 *
 * Backward, two kernels, no atomics and no scratch:
 * - dQ: a block per (b, h, 64 queries) walks the K/V tiles up to the
 *   diagonal, recomputes P = exp(scale S - lse) and dP = dO V^T, forms
 *   dS = P (dP - D) with D = rowsum(dO * O), and accumulates dQ += dS K in
 *   WMMA accumulators;
 * - dK, dV: a block per (b, h, 64 keys) walks the query tiles from the
 *   diagonal to the end, recomputes P^T and dP^T the same way (D recomputed
 *   from dO and O per tile), and accumulates dV += P^T dO and dK += dS^T Q.
 * Each part of dqkv is owned by one block, which adds its result once. */
#include <mma.h>

#include "kernels/cuda_util.cuh"

namespace {

using namespace nvcuda;

constexpr int BR = 64; /* queries per block (4 warps x 16) */
constexpr int BC = 64; /* keys per tile; the diagonal logic assumes BR == BC */
constexpr int WARPS = 4;
constexpr int THREADS = 32 * WARPS;
constexpr int LDS = BC + 4; /* fp32 score rows */
constexpr int LDP = BC + 8; /* bf16 probability rows */

template <int ND> struct dims {
    static constexpr int HSP = ND * 16;  /* padded head size */
    static constexpr int LDH = HSP + 8;  /* bf16 Q/K/V/dO rows */
    static constexpr int LDO = HSP + 4;  /* fp32 output rows */
    static constexpr int TILE = BR * LDH; /* elements of one bf16 tile */
    /* per warp, fp32: two 16 x LDS score blocks, also used for a 16 x LDO output */
    static constexpr int WARP_F = 2 * 16 * LDS > 16 * LDO ? 2 * 16 * LDS : 16 * LDO;
};

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Rows row0.. of a [*, stride] bf16 matrix into a 64 x LDH tile; zero past T
 * rows and HS columns. `vec`: 16-byte accesses (HS, stride and src allow). */
template <int ND>
__device__ void load_tile(bf16 *dst, const bf16 *src, size_t stride, int row0, int T, int HS,
                          bool vec)
{
    constexpr int HSP = dims<ND>::HSP, LDH = dims<ND>::LDH;
    if (vec) {
        constexpr int CH = HSP / 8;
        for (int i = threadIdx.x; i < BR * CH; i += THREADS) {
            const int r = i / CH, c = (i % CH) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (row0 + r < T && c < HS)
                v = *reinterpret_cast<const uint4 *>(src + (size_t)(row0 + r) * stride + c);
            *reinterpret_cast<uint4 *>(dst + r * LDH + c) = v;
        }
    } else {
        for (int i = threadIdx.x; i < BR * HSP; i += THREADS) {
            const int r = i / HSP, c = i % HSP;
            bf16 v = __float2bfloat16_rn(0.0f);
            if (row0 + r < T && c < HS)
                v = src[(size_t)(row0 + r) * stride + c];
            dst[r * LDH + c] = v;
        }
    }
}

/* out (16 x 64 fp32, ld LDS) = A (16 rows of a tile) @ X^T, X a 64-row tile. */
template <int ND> __device__ void mm_abt(float *out, const bf16 *a, const bf16 *x)
{
    constexpr int LDH = dims<ND>::LDH;
    for (int n = 0; n < BC / 16; n++) {
        frag_c c;
        wmma::fill_fragment(c, 0.0f);
        for (int d = 0; d < ND; d++) {
            frag_a fa;
            frag_bt fb;
            wmma::load_matrix_sync(fa, a + d * 16, LDH);
            wmma::load_matrix_sync(fb, x + n * 16 * LDH + d * 16, LDH);
            wmma::mma_sync(c, fa, fb, c);
        }
        wmma::store_matrix_sync(out + n * 16, c, LDS, wmma::mem_row_major);
    }
}

/* acc (16 x HSP) += P (16 x 64 bf16, ld LDP) @ Y (a 64-row tile). */
template <int ND> __device__ void mm_pv(frag_c (&acc)[ND], const bf16 *p, const bf16 *y)
{
    constexpr int LDH = dims<ND>::LDH;
    for (int kk = 0; kk < BC / 16; kk++) {
        frag_a fa;
        wmma::load_matrix_sync(fa, p + kk * 16, LDP);
        for (int n = 0; n < ND; n++) {
            frag_b fb;
            wmma::load_matrix_sync(fb, y + kk * 16 * LDH + n * 16, LDH);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* Warp-wide: dst[row r of 16][c] (+)= factor * src[r * LDO + c] for rows
 * row0 + r < T and c < HS; lanes run along columns (coalesced). */
template <int ND>
__device__ void write_rows(bf16 *dst, size_t stride, const float *src, int row0, int T, int HS,
                           float factor, bool accumulate)
{
    constexpr int LDO = dims<ND>::LDO;
    const int lane = threadIdx.x % 32;
    for (int i = lane; i < 16 * HS; i += 32) {
        const int r = i / HS, c = i % HS;
        if (row0 + r >= T)
            break; /* rows only grow with i */
        bf16 *p = dst + (size_t)(row0 + r) * stride + c;
        float v = factor * src[r * LDO + c];
        if (accumulate)
            v += __bfloat162float(*p);
        *p = __float2bfloat16_rn(v);
    }
}

template <int ND>
__global__ void __launch_bounds__(THREADS)
    attention_forward_kernel(bf16 *out, float *lse, const bf16 *qkv, int T, int C, int NH,
                             float scale, bool vec)
{
    using D = dims<ND>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int qt = gridDim.x - 1 - blockIdx.x; /* the longest tiles start first */
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = qt * BR;
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *Ks = Qs + D::TILE, *Vs = Ks + D::TILE;
    float *Uf = reinterpret_cast<float *>(Vs + D::TILE) + warp * (D::WARP_F + 16 * D::LDO);
    float *Of = Uf + D::WARP_F; /* running output, 16 x LDO */
    bf16 *Pb = reinterpret_cast<bf16 *>(reinterpret_cast<float *>(Vs + D::TILE) +
                                        WARPS * (D::WARP_F + 16 * D::LDO)) +
               warp * 16 * LDP;
    const size_t stride = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;

    load_tile<ND>(Qs, base, stride, q0, T, HS, vec);
    for (int i = lane; i < 16 * D::LDO; i += 32)
        Of[i] = 0.0f;
    /* Lanes 2r and 2r+1 own row r: columns [32 half, 32 half + 32) of a tile. */
    const int r = lane / 2, half = lane % 2;
    const int qi = q0 + warp * 16 + r;
    float m = -INFINITY, l = 0.0f;
    const int kv_end = min(T, q0 + BR);
    for (int kv0 = 0; kv0 < kv_end; kv0 += BC) {
        __syncthreads(); /* every warp is done with the previous K/V */
        load_tile<ND>(Ks, base + C, stride, kv0, T, HS, vec);
        load_tile<ND>(Vs, base + 2 * C, stride, kv0, T, HS, vec);
        __syncthreads();
        mm_abt<ND>(Uf, Qs + warp * 16 * D::LDH, Ks);
        __syncwarp();
        float s[32];
        float tile_max = -INFINITY;
        for (int j = 0; j < 32; j++) {
            const int col = half * 32 + j, kj = kv0 + col;
            s[j] = kj <= qi && kj < T ? Uf[r * LDS + col] * scale : -INFINITY;
            tile_max = fmaxf(tile_max, s[j]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        const float m_new = fmaxf(m, tile_max); /* finite: key 0 is in every row's first tile */
        const float alpha = __expf(m - m_new);
        float sum = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float p = __expf(s[j] - m_new);
            sum += p;
            Pb[r * LDP + half * 32 + j] = __float2bfloat16_rn(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * alpha + sum;
        m = m_new;
        __syncwarp(); /* Pb complete, Uf's scores consumed */
        frag_c acc[ND];
        for (int n = 0; n < ND; n++)
            wmma::fill_fragment(acc[n], 0.0f);
        mm_pv<ND>(acc, Pb, Vs);
        for (int n = 0; n < ND; n++)
            wmma::store_matrix_sync(Uf + n * 16, acc[n], D::LDO, wmma::mem_row_major);
        __syncwarp();
        for (int c = half; c < D::HSP; c += 2)
            Of[r * D::LDO + c] = Of[r * D::LDO + c] * alpha + Uf[r * D::LDO + c];
        __syncwarp();
    }
    const float inv_l = 1.0f / l;
    for (int c = half; c < D::HSP; c += 2)
        Of[r * D::LDO + c] *= inv_l;
    if (half == 0 && qi < T)
        lse[((size_t)b * NH + h) * T + qi] = m + logf(l);
    __syncwarp();
    write_rows<ND>(out + (size_t)b * T * C + (size_t)h * HS, C, Of, q0 + warp * 16, T, HS, 1.0f,
                   false);
}

/* D for row `rr` of a query tile: sum_c dO[row, c] O[row, c] over the warp. */
template <int ND>
__device__ float row_dot(const bf16 *dOs_row, const bf16 *o_row, int HS)
{
    const int lane = threadIdx.x % 32;
    float acc = 0.0f;
    for (int c = lane; c < HS; c += 32)
        acc += __bfloat162float(dOs_row[c]) * __bfloat162float(o_row[c]);
    return cu_warp_sum(acc);
}

template <int ND>
__global__ void __launch_bounds__(THREADS)
    attention_dq_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
                        const float *lse, int T, int C, int NH, float scale, bool vec)
{
    using D = dims<ND>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = qt * BR;
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *dOs = Qs + D::TILE, *Ks = dOs + D::TILE, *Vs = Ks + D::TILE;
    float *Sf = reinterpret_cast<float *>(Vs + D::TILE) + warp * D::WARP_F;
    float *dPf = Sf + 16 * LDS;
    bf16 *Pb = reinterpret_cast<bf16 *>(reinterpret_cast<float *>(Vs + D::TILE) +
                                        WARPS * D::WARP_F) +
               warp * 16 * LDP;
    __shared__ float Drow[BR], Lrow[BR];
    const size_t stride = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const size_t obase = (size_t)b * T * C + (size_t)h * HS;

    load_tile<ND>(Qs, base, stride, q0, T, HS, vec);
    load_tile<ND>(dOs, dout + obase, C, q0, T, HS, vec);
    __syncthreads();
    for (int i = 0; i < 16; i++) {
        const int rr = warp * 16 + i, q = q0 + rr;
        const float d = q < T ? row_dot<ND>(dOs + rr * D::LDH, out + obase + (size_t)q * C, HS)
                              : 0.0f;
        if (lane == 0) {
            Drow[rr] = d;
            Lrow[rr] = q < T ? lse[((size_t)b * NH + h) * T + q] : 0.0f;
        }
    }
    __syncwarp();
    const int r = lane / 2, half = lane % 2;
    const int qi = q0 + warp * 16 + r;
    const float Dr = Drow[warp * 16 + r], Lr = Lrow[warp * 16 + r];
    frag_c dq[ND];
    for (int n = 0; n < ND; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    const int kv_end = min(T, q0 + BR);
    for (int kv0 = 0; kv0 < kv_end; kv0 += BC) {
        __syncthreads();
        load_tile<ND>(Ks, base + C, stride, kv0, T, HS, vec);
        load_tile<ND>(Vs, base + 2 * C, stride, kv0, T, HS, vec);
        __syncthreads();
        mm_abt<ND>(Sf, Qs + warp * 16 * D::LDH, Ks);
        mm_abt<ND>(dPf, dOs + warp * 16 * D::LDH, Vs);
        __syncwarp();
        for (int j = 0; j < 32; j++) {
            const int col = half * 32 + j, kj = kv0 + col;
            float ds = 0.0f;
            if (kj <= qi && qi < T) {
                const float p = __expf(Sf[r * LDS + col] * scale - Lr);
                ds = p * (dPf[r * LDS + col] - Dr);
            }
            Pb[r * LDP + col] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
        mm_pv<ND>(dq, Pb, Ks);
    }
    __syncwarp();
    for (int n = 0; n < ND; n++)
        wmma::store_matrix_sync(Sf + n * 16, dq[n], D::LDO, wmma::mem_row_major);
    __syncwarp();
    write_rows<ND>(dqkv + (size_t)b * T * stride + (size_t)h * HS, stride, Sf, q0 + warp * 16, T,
                   HS, scale, true);
}

template <int ND>
__global__ void __launch_bounds__(THREADS)
    attention_dkv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const bf16 *out,
                         const float *lse, int T, int C, int NH, float scale, bool vec)
{
    using D = dims<ND>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kv0 = blockIdx.x * BC;
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + D::TILE, *Qs = Vs + D::TILE, *dOs = Qs + D::TILE;
    float *Sf = reinterpret_cast<float *>(dOs + D::TILE) + warp * D::WARP_F;
    float *dPf = Sf + 16 * LDS;
    bf16 *Pb = reinterpret_cast<bf16 *>(reinterpret_cast<float *>(dOs + D::TILE) +
                                        WARPS * D::WARP_F) +
               warp * 16 * LDP;
    __shared__ float Dq[BR], Lq[BR];
    const size_t stride = 3 * (size_t)C;
    const bf16 *base = qkv + (size_t)b * T * stride + (size_t)h * HS;
    const size_t obase = (size_t)b * T * C + (size_t)h * HS;

    load_tile<ND>(Ks, base + C, stride, kv0, T, HS, vec);
    load_tile<ND>(Vs, base + 2 * C, stride, kv0, T, HS, vec);
    /* Lanes 2r and 2r+1 own key row r of this warp: query columns [32 half, +32). */
    const int r = lane / 2, half = lane % 2;
    const int kj = kv0 + warp * 16 + r;
    frag_c dk[ND], dv[ND];
    for (int n = 0; n < ND; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int q0 = kv0; q0 < T; q0 += BR) {
        __syncthreads(); /* every warp is done with the previous Q/dO tile */
        load_tile<ND>(Qs, base, stride, q0, T, HS, vec);
        load_tile<ND>(dOs, dout + obase, C, q0, T, HS, vec);
        __syncthreads();
        for (int i = 0; i < 16; i++) {
            const int rr = warp * 16 + i, q = q0 + rr;
            const float d =
                q < T ? row_dot<ND>(dOs + rr * D::LDH, out + obase + (size_t)q * C, HS) : 0.0f;
            if (lane == 0) {
                Dq[rr] = d;
                Lq[rr] = q < T ? lse[((size_t)b * NH + h) * T + q] : 0.0f;
            }
        }
        __syncthreads();
        mm_abt<ND>(Sf, Ks + warp * 16 * D::LDH, Qs);   /* S^T: keys x queries */
        mm_abt<ND>(dPf, Vs + warp * 16 * D::LDH, dOs); /* dP^T = V dO^T */
        __syncwarp();
        for (int j = 0; j < 32; j++) {
            const int col = half * 32 + j, qi = q0 + col;
            float p = 0.0f;
            if (kj <= qi && qi < T)
                p = __expf(Sf[r * LDS + col] * scale - Lq[col]);
            Sf[r * LDS + col] = p;
            Pb[r * LDP + col] = __float2bfloat16_rn(p);
        }
        __syncwarp();
        mm_pv<ND>(dv, Pb, dOs);
        __syncwarp(); /* Pb is rewritten below */
        for (int j = 0; j < 32; j++) {
            const int col = half * 32 + j;
            const float ds = Sf[r * LDS + col] * (dPf[r * LDS + col] - Dq[col]);
            Pb[r * LDP + col] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
        mm_pv<ND>(dk, Pb, Qs);
    }
    __syncwarp();
    bf16 *dbase = dqkv + (size_t)b * T * stride + (size_t)h * HS;
    for (int n = 0; n < ND; n++)
        wmma::store_matrix_sync(Sf + n * 16, dk[n], D::LDO, wmma::mem_row_major);
    __syncwarp();
    write_rows<ND>(dbase + C, stride, Sf, kv0 + warp * 16, T, HS, scale, true);
    __syncwarp();
    for (int n = 0; n < ND; n++)
        wmma::store_matrix_sync(Sf + n * 16, dv[n], D::LDO, wmma::mem_row_major);
    __syncwarp();
    write_rows<ND>(dbase + 2 * C, stride, Sf, kv0 + warp * 16, T, HS, 1.0f, true);
}

template <int ND> size_t forward_smem()
{
    using D = dims<ND>;
    return 3 * D::TILE * sizeof(bf16) + WARPS * (D::WARP_F + 16 * D::LDO) * sizeof(float) +
           WARPS * 16 * LDP * sizeof(bf16);
}

template <int ND> size_t backward_smem()
{
    using D = dims<ND>;
    return 4 * D::TILE * sizeof(bf16) + WARPS * D::WARP_F * sizeof(float) +
           WARPS * 16 * LDP * sizeof(bf16);
}

/* Opts a kernel into `bytes` of dynamic shared memory, or says why not. */
ferry_status allow_smem(const void *kernel, size_t bytes, int HS)
{
    int device = 0, limit = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (bytes + 2 * BR * sizeof(float) > (size_t)limit) /* + the static D and lse rows */
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "attention: head size %d needs %zu bytes of shared memory per block, this "
                       "GPU allows %d; use a smaller head size",
                       HS, bytes, limit);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return FERRY_OK;
}

struct attn_args {
    cudaStream_t s;
    int B, T, C, NH, HS;
    float scale;
    bool vec;
};

template <int ND>
ferry_status launch_forward(const attn_args &a, bf16 *out, float *lse, const bf16 *qkv)
{
    const size_t smem = forward_smem<ND>();
    ferry_status st =
        allow_smem(reinterpret_cast<const void *>(attention_forward_kernel<ND>), smem, a.HS);
    if (st != FERRY_OK)
        return st;
    dim3 grid((a.T + BR - 1) / BR, a.NH, a.B);
    attention_forward_kernel<ND><<<grid, THREADS, smem, a.s>>>(out, lse, qkv, a.T, a.C, a.NH,
                                                                a.scale, a.vec);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

template <int ND>
ferry_status launch_backward(const attn_args &a, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                             const bf16 *out, const float *lse)
{
    const size_t smem = backward_smem<ND>();
    ferry_status st =
        allow_smem(reinterpret_cast<const void *>(attention_dq_kernel<ND>), smem, a.HS);
    if (st == FERRY_OK)
        st = allow_smem(reinterpret_cast<const void *>(attention_dkv_kernel<ND>), smem, a.HS);
    if (st != FERRY_OK)
        return st;
    dim3 grid((a.T + BR - 1) / BR, a.NH, a.B);
    attention_dq_kernel<ND><<<grid, THREADS, smem, a.s>>>(dqkv, dout, qkv, out, lse, a.T, a.C,
                                                           a.NH, a.scale, a.vec);
    CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<ND><<<grid, THREADS, smem, a.s>>>(dqkv, dout, qkv, out, lse, a.T, a.C,
                                                            a.NH, a.scale, a.vec);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

ferry_status make_args(const char *op, void *stream, int B, int T, int C, int NH, attn_args *a)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
               "%s: need positive sizes with C a multiple of NH; got B=%d T=%d C=%d NH=%d", op, B,
               T, C, NH);
    CU_REQUIRE(B <= 65535 && NH <= 65535, "%s: B=%d or NH=%d exceeds 65535", op, B, NH);
    a->s = cu_stream(stream);
    a->B = B;
    a->T = T;
    a->C = C;
    a->NH = NH;
    a->HS = C / NH;
    if (a->HS > 128)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "%s: head size %d (C=%d / NH=%d) is above the 128 the cuda attention "
                       "supports; use more heads",
                       op, a->HS, C, NH);
    a->scale = 1.0f / sqrtf((float)a->HS);
    a->vec = a->HS % 8 == 0 && C % 8 == 0;
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status cudaop_attention_forward(void *stream, act_t *out, float *lse,
                                                 const act_t *qkv, int B, int T, int C, int NH)
{
    attn_args a = {}; /* make_args fills it, or fails */
    ferry_status st = make_args("attention_forward", stream, B, T, C, NH, &a);
    if (st != FERRY_OK)
        return st;
    a.vec = a.vec && cu_aligned16(qkv);
    bf16 *o = static_cast<bf16 *>(out);
    const bf16 *x = static_cast<const bf16 *>(qkv);
    switch ((a.HS + 15) / 16) {
    case 1: return launch_forward<1>(a, o, lse, x);
    case 2: return launch_forward<2>(a, o, lse, x);
    case 3: return launch_forward<3>(a, o, lse, x);
    case 4: return launch_forward<4>(a, o, lse, x);
    case 5: return launch_forward<5>(a, o, lse, x);
    case 6: return launch_forward<6>(a, o, lse, x);
    case 7: return launch_forward<7>(a, o, lse, x);
    default: return launch_forward<8>(a, o, lse, x);
    }
}

extern "C" ferry_status cudaop_attention_backward(void *stream, act_t *dqkv, const act_t *dout,
                                                  const act_t *qkv, const act_t *out,
                                                  const float *lse, int B, int T, int C, int NH)
{
    attn_args a = {}; /* make_args fills it, or fails */
    ferry_status st = make_args("attention_backward", stream, B, T, C, NH, &a);
    if (st != FERRY_OK)
        return st;
    a.vec = a.vec && cu_aligned16(qkv, dout, dqkv);
    bf16 *dx = static_cast<bf16 *>(dqkv);
    const bf16 *dy = static_cast<const bf16 *>(dout), *x = static_cast<const bf16 *>(qkv),
               *o = static_cast<const bf16 *>(out);
    switch ((a.HS + 15) / 16) {
    case 1: return launch_backward<1>(a, dx, dy, x, o, lse);
    case 2: return launch_backward<2>(a, dx, dy, x, o, lse);
    case 3: return launch_backward<3>(a, dx, dy, x, o, lse);
    case 4: return launch_backward<4>(a, dx, dy, x, o, lse);
    case 5: return launch_backward<5>(a, dx, dy, x, o, lse);
    case 6: return launch_backward<6>(a, dx, dy, x, o, lse);
    case 7: return launch_backward<7>(a, dx, dy, x, o, lse);
    default: return launch_backward<8>(a, dx, dy, x, o, lse);
    }
}
