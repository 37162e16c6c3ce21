/* Causal multi-head attention on cuda with WMMA (16x16x16 fragments through
 * shared memory): the production kernels of Volta (sm_70, fp16), which has
 * no ldmatrix or mma.sync m16n8k16, and on every other card the kernel
 * lab's variants 1 and 2 (dev/kernels/attention.c), kept beside the
 * mma.sync kernels of attention.cu that replaced them there. One source for
 * both storage types T (bf16, or f16) and two tile sizes. Host version:
 * attention.c.
 *
 * Forward: a block of BQ / 16 warps owns BQ queries of one (batch, head);
 * each warp owns 16 of them. Q, then each K/V tile of BQ keys up to the
 * diagonal, sit in shared memory (type T, head dim zero-padded to a multiple
 * of 16); the score and P @ V products are WMMA 16x16x16 of T with fp32
 * accumulation; an online softmax in fp32 (two lanes per query row) rescales
 * the running output, kept in fp32 in shared memory. Writes O and
 * lse = m + log(l).
 *
 * Backward, two kernels, no atomics and no scratch (delta, the registry's
 * D = rowsum(dO * O), is written first by attention.cu's kernel for the
 * op's contract; these kernels compute D themselves, as they always did):
 * - dQ: a block per (b, h, BQ queries) walks the K/V tiles up to the
 *   diagonal, recomputes P = exp(scale S - lse) and dP = dO V^T, forms
 *   dS = P (dP - D) with D = rowsum(dO * O), and accumulates dQ += dS K in
 *   WMMA accumulators;
 * - dK, dV: a block per (b, h, BQ keys) walks the query tiles from the
 *   diagonal to the end, recomputes P^T and dP^T the same way (D recomputed
 *   from dO and O per tile), and accumulates dV += P^T dO and dK += dS^T Q.
 * Each part of dqkv is owned by one block, which adds its result once.
 *
 * Positions (packed examples, op_list.h): query i sees keys i - pos[i] ..
 * i. The forward and dQ start at the key tile of their block's lowest
 * start (its first query's), dK/dV end at the last query tile whose first
 * query's example reaches the block's keys, and each row masks the keys
 * below its start; a row with no key in a tile keeps its max at -inf and
 * takes the exponentials against 0 (the same bits as before wherever the
 * max is finite, always without positions). NULL: the kernels as they were.
 *
 * Tiles: BQ = 64 (4 warps) where the card's shared memory per block allows
 * it, else BQ = 32 (2 warps: a quarter of the tile memory and half the fp32
 * scratch), chosen at run time from cudaDevAttrMaxSharedMemoryPerBlockOptin:
 * at head size 64 the forward needs 70.75 KiB and the backward 79.75 KiB with
 * 64 (sm_70 allows 96 KiB, sm_80 163, sm_86 and sm_89 99, sm_90 227), 33.4
 * and 29.9 KiB with 32 (sm_75 allows 64 KiB); at head size 128, 64-query
 * tiles fit only sm_80 and sm_90. */
#include <mma.h>

#include <type_traits>

#include "backend/ops/cuda_util.cuh"

namespace {

using namespace nvcuda;

/* Queries per block = keys per tile: the diagonal logic needs them equal. */
template <int BQ> struct tiles {
    static constexpr int WARPS = BQ / 16;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int LDS = BQ + 4;  /* fp32 score rows */
    static constexpr int LDP = BQ + 8;  /* probability rows, type T */
    static constexpr int HALF = BQ / 2; /* score columns per lane: lanes 2r and 2r+1 share row r */
};

template <int ND, int BQ> struct dims {
    static constexpr int HSP = ND * 16;   /* padded head size */
    static constexpr int LDH = HSP + 8;   /* Q/K/V/dO rows, type T */
    static constexpr int LDO = HSP + 4;   /* fp32 output rows */
    static constexpr int TILE = BQ * LDH; /* elements of one tile */
    static constexpr int LDS = tiles<BQ>::LDS;
    /* per warp, fp32: the forward's 16 x LDS scores, also its 16 x LDO output
     * products; the backward's two 16 x LDS blocks (S and dP), also a 16 x
     * LDO output */
    static constexpr int FWD_F = 16 * LDS > 16 * LDO ? 16 * LDS : 16 * LDO;
    static constexpr int BWD_F = 2 * 16 * LDS > 16 * LDO ? 2 * 16 * LDS : 16 * LDO;
};

template <typename T> using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T> using frag_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* WMMA of T is there on the architecture being compiled: fp16 from sm_70,
 * bf16 from sm_80. Below sm_80 the bf16 kernels compile to a trap (the
 * backend refuses bf16 on those cards, so they never launch). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <typename T> constexpr bool wmma_here = std::is_same<T, f16>::value;
#else
template <typename T> constexpr bool wmma_here = true;
#endif

/* Rows row0.. of a [*, stride] matrix into a BQ x LDH tile; zero past T
 * rows and HS columns. `vec`: 16-byte accesses (HS, stride and src allow). */
template <typename T, int ND, int BQ>
__device__ void load_tile(T *dst, const T *src, size_t stride, int row0, int T_, int HS, bool vec)
{
    constexpr int HSP = dims<ND, BQ>::HSP, LDH = dims<ND, BQ>::LDH, THREADS = tiles<BQ>::THREADS;
    if (vec) {
        constexpr int CH = HSP / 8;
        for (int i = threadIdx.x; i < BQ * CH; i += THREADS) {
            const int r = i / CH, c = (i % CH) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (row0 + r < T_ && c < HS)
                v = *reinterpret_cast<const uint4 *>(src + (size_t)(row0 + r) * stride + c);
            *reinterpret_cast<uint4 *>(dst + r * LDH + c) = v;
        }
    } else {
        for (int i = threadIdx.x; i < BQ * HSP; i += THREADS) {
            const int r = i / HSP, c = i % HSP;
            T v = cu_round<T>(0.0f);
            if (row0 + r < T_ && c < HS)
                v = src[(size_t)(row0 + r) * stride + c];
            dst[r * LDH + c] = v;
        }
    }
}

/* out (16 x BQ fp32, ld LDS) = A (16 rows of a tile) @ X^T, X a BQ-row tile. */
template <typename T, int ND, int BQ> __device__ void mm_abt(float *out, const T *a, const T *x)
{
    constexpr int LDH = dims<ND, BQ>::LDH, LDS = tiles<BQ>::LDS;
    for (int n = 0; n < BQ / 16; n++) {
        frag_c c;
        wmma::fill_fragment(c, 0.0f);
        for (int d = 0; d < ND; d++) {
            frag_a<T> fa;
            frag_bt<T> fb;
            wmma::load_matrix_sync(fa, a + d * 16, LDH);
            wmma::load_matrix_sync(fb, x + n * 16 * LDH + d * 16, LDH);
            wmma::mma_sync(c, fa, fb, c);
        }
        wmma::store_matrix_sync(out + n * 16, c, LDS, wmma::mem_row_major);
    }
}

/* acc (16 x HSP) += P (16 x BQ of T, ld LDP) @ Y (a BQ-row tile). */
template <typename T, int ND, int BQ> __device__ void mm_pv(frag_c (&acc)[ND], const T *p, const T *y)
{
    constexpr int LDH = dims<ND, BQ>::LDH, LDP = tiles<BQ>::LDP;
    for (int kk = 0; kk < BQ / 16; kk++) {
        frag_a<T> fa;
        wmma::load_matrix_sync(fa, p + kk * 16, LDP);
        for (int n = 0; n < ND; n++) {
            frag_b<T> fb;
            wmma::load_matrix_sync(fb, y + kk * 16 * LDH + n * 16, LDH);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* Warp-wide: dst[row r of 16][c] (+)= factor * src[r * LDO + c] for rows
 * row0 + r < T and c < HS; lanes run along columns (coalesced). */
template <typename T, int ND, int BQ>
__device__ void write_rows(T *dst, size_t stride, const float *src, int row0, int T_, int HS, float factor,
                           bool accumulate)
{
    constexpr int LDO = dims<ND, BQ>::LDO;
    const int lane = threadIdx.x % 32;
    for (int i = lane; i < 16 * HS; i += 32) {
        const int r = i / HS, c = i % HS;
        if (row0 + r >= T_)
            break; /* rows only grow with i */
        T *p = dst + (size_t)(row0 + r) * stride + c;
        float v = factor * src[r * LDO + c];
        if (accumulate)
            v += cu_f32(*p);
        *p = cu_round<T>(v);
    }
}

/* The first key query `row` may see: its example's first token (pr is the
 * batch row's positions, NULL: none; 0 past T), the position clamped into
 * [0, row]. */
__device__ __forceinline__ int first_key(const int32_t *pr, int row, int T_)
{
    if (!pr || row >= T_)
        return 0;
    const int p = pr[row];
    return row - (p < 0 ? 0 : p > row ? row : p);
}

template <typename T, int ND, int BQ>
__device__ void forward_body(T *out, float *lse, const T *qkv, int T_, int C, int NH, float scale, bool vec,
                             const int32_t *pos)
{
    using D = dims<ND, BQ>;
    constexpr int WARPS = tiles<BQ>::WARPS, LDS = tiles<BQ>::LDS, LDP = tiles<BQ>::LDP, HALF = tiles<BQ>::HALF;
    extern __shared__ __align__(128) unsigned char smem[];
    const int qt = gridDim.x - 1 - blockIdx.x; /* the longest tiles start first */
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = qt * BQ;
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + D::TILE, *Vs = Ks + D::TILE;
    float *Uf = reinterpret_cast<float *>(Vs + D::TILE) + warp * (D::FWD_F + 16 * D::LDO);
    float *Of = Uf + D::FWD_F; /* running output, 16 x LDO */
    T *Pb = reinterpret_cast<T *>(reinterpret_cast<float *>(Vs + D::TILE) + WARPS * (D::FWD_F + 16 * D::LDO)) +
            warp * 16 * LDP;
    const size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * stride + (size_t)h * HS;

    load_tile<T, ND, BQ>(Qs, base, stride, q0, T_, HS, vec);
    for (int i = lane; i < 16 * D::LDO; i += 32)
        Of[i] = 0.0f;
    /* Lanes 2r and 2r+1 own row r: columns [HALF half, HALF half + HALF) of a tile. */
    const int r = lane / 2, half = lane % 2;
    const int qi = q0 + warp * 16 + r;
    const int32_t *pr = pos ? pos + (size_t)b * T_ : nullptr;
    const int lo = first_key(pr, qi, T_);
    float m = -INFINITY, l = 0.0f;
    const int kv_end = min(T_, q0 + BQ);
    for (int kv0 = first_key(pr, q0, T_) / BQ * BQ; kv0 < kv_end; kv0 += BQ) {
        __syncthreads(); /* every warp is done with the previous K/V */
        load_tile<T, ND, BQ>(Ks, base + C, stride, kv0, T_, HS, vec);
        load_tile<T, ND, BQ>(Vs, base + 2 * C, stride, kv0, T_, HS, vec);
        __syncthreads();
        mm_abt<T, ND, BQ>(Uf, Qs + warp * 16 * D::LDH, Ks);
        __syncwarp();
        float s[HALF];
        float tile_max = -INFINITY;
        for (int j = 0; j < HALF; j++) {
            const int col = half * HALF + j, kj = kv0 + col;
            s[j] = kj <= qi && kj < T_ && kj >= lo ? Uf[r * LDS + col] * scale : -INFINITY;
            tile_max = fmaxf(tile_max, s[j]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        /* finite without positions (key 0 is in every row's first tile); with them -inf until the
         * row meets its example's first key, the exponentials then taken against 0 */
        const float m_new = fmaxf(m, tile_max);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = __expf(m - m_use);
        float sum = 0.0f;
        for (int j = 0; j < HALF; j++) {
            const float p = __expf(s[j] - m_use);
            sum += p;
            Pb[r * LDP + half * HALF + j] = cu_round<T>(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * alpha + sum;
        m = m_new;
        __syncwarp(); /* Pb complete, Uf's scores consumed */
        frag_c acc[ND];
        for (int n = 0; n < ND; n++)
            wmma::fill_fragment(acc[n], 0.0f);
        mm_pv<T, ND, BQ>(acc, Pb, Vs);
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
    if (half == 0 && qi < T_)
        lse[((size_t)b * NH + h) * T_ + qi] = m + logf(l);
    __syncwarp();
    write_rows<T, ND, BQ>(out + (size_t)b * T_ * C + (size_t)h * HS, C, Of, q0 + warp * 16, T_, HS, 1.0f, false);
}

template <typename T, int ND, int BQ>
__global__ void __launch_bounds__(tiles<BQ>::THREADS)
    attention_forward_kernel(T *out, float *lse, const T *qkv, int T_, int C, int NH, float scale, bool vec,
                             const int32_t *pos)
{
    if constexpr (wmma_here<T>)
        forward_body<T, ND, BQ>(out, lse, qkv, T_, C, NH, scale, vec, pos);
    else
        __trap();
}

/* D for a row of a query tile: sum_c dO[row, c] O[row, c] over the warp. */
template <typename T> __device__ float row_dot(const T *dOs_row, const T *o_row, int HS)
{
    const int lane = threadIdx.x % 32;
    float acc = 0.0f;
    for (int c = lane; c < HS; c += 32)
        acc += cu_f32(dOs_row[c]) * cu_f32(o_row[c]);
    return cu_warp_sum(acc);
}

template <typename T, int ND, int BQ>
__device__ void dq_body(T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int T_, int C,
                        int NH, float scale, bool vec, const int32_t *pos)
{
    using D = dims<ND, BQ>;
    constexpr int WARPS = tiles<BQ>::WARPS, LDS = tiles<BQ>::LDS, LDP = tiles<BQ>::LDP, HALF = tiles<BQ>::HALF;
    extern __shared__ __align__(128) unsigned char smem[];
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int q0 = qt * BQ;
    T *Qs = reinterpret_cast<T *>(smem);
    T *dOs = Qs + D::TILE, *Ks = dOs + D::TILE, *Vs = Ks + D::TILE;
    float *Sf = reinterpret_cast<float *>(Vs + D::TILE) + warp * D::BWD_F;
    float *dPf = Sf + 16 * LDS;
    T *Pb = reinterpret_cast<T *>(reinterpret_cast<float *>(Vs + D::TILE) + WARPS * D::BWD_F) + warp * 16 * LDP;
    __shared__ float Drow[BQ], Lrow[BQ];
    const size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * stride + (size_t)h * HS;
    const size_t obase = (size_t)b * T_ * C + (size_t)h * HS;

    load_tile<T, ND, BQ>(Qs, base, stride, q0, T_, HS, vec);
    load_tile<T, ND, BQ>(dOs, dout + obase, C, q0, T_, HS, vec);
    __syncthreads();
    for (int i = 0; i < 16; i++) {
        const int rr = warp * 16 + i, q = q0 + rr;
        const float d = q < T_ ? row_dot<T>(dOs + rr * D::LDH, out + obase + (size_t)q * C, HS) : 0.0f;
        if (lane == 0) {
            Drow[rr] = d;
            Lrow[rr] = q < T_ ? lse[((size_t)b * NH + h) * T_ + q] : 0.0f;
        }
    }
    __syncwarp();
    const int r = lane / 2, half = lane % 2;
    const int qi = q0 + warp * 16 + r;
    const float Dr = Drow[warp * 16 + r], Lr = Lrow[warp * 16 + r];
    const int32_t *pr = pos ? pos + (size_t)b * T_ : nullptr;
    const int lo = first_key(pr, qi, T_);
    frag_c dq[ND];
    for (int n = 0; n < ND; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    const int kv_end = min(T_, q0 + BQ);
    for (int kv0 = first_key(pr, q0, T_) / BQ * BQ; kv0 < kv_end; kv0 += BQ) {
        __syncthreads();
        load_tile<T, ND, BQ>(Ks, base + C, stride, kv0, T_, HS, vec);
        load_tile<T, ND, BQ>(Vs, base + 2 * C, stride, kv0, T_, HS, vec);
        __syncthreads();
        mm_abt<T, ND, BQ>(Sf, Qs + warp * 16 * D::LDH, Ks);
        mm_abt<T, ND, BQ>(dPf, dOs + warp * 16 * D::LDH, Vs);
        __syncwarp();
        for (int j = 0; j < HALF; j++) {
            const int col = half * HALF + j, kj = kv0 + col;
            float ds = 0.0f;
            if (kj <= qi && qi < T_ && kj >= lo) {
                const float p = __expf(Sf[r * LDS + col] * scale - Lr);
                ds = p * (dPf[r * LDS + col] - Dr);
            }
            Pb[r * LDP + col] = cu_round<T>(ds);
        }
        __syncwarp();
        mm_pv<T, ND, BQ>(dq, Pb, Ks);
    }
    __syncwarp();
    for (int n = 0; n < ND; n++)
        wmma::store_matrix_sync(Sf + n * 16, dq[n], D::LDO, wmma::mem_row_major);
    __syncwarp();
    write_rows<T, ND, BQ>(dqkv + (size_t)b * T_ * stride + (size_t)h * HS, stride, Sf, q0 + warp * 16, T_, HS,
                          scale, true);
}

template <typename T, int ND, int BQ>
__global__ void __launch_bounds__(tiles<BQ>::THREADS)
    attention_dq_kernel(T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int T_, int C,
                        int NH, float scale, bool vec, const int32_t *pos)
{
    if constexpr (wmma_here<T>)
        dq_body<T, ND, BQ>(dqkv, dout, qkv, out, lse, T_, C, NH, scale, vec, pos);
    else
        __trap();
}

template <typename T, int ND, int BQ>
__device__ void dkv_body(T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int T_, int C,
                         int NH, float scale, bool vec, const int32_t *pos)
{
    using D = dims<ND, BQ>;
    constexpr int WARPS = tiles<BQ>::WARPS, LDS = tiles<BQ>::LDS, LDP = tiles<BQ>::LDP, HALF = tiles<BQ>::HALF;
    extern __shared__ __align__(128) unsigned char smem[];
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kv0 = blockIdx.x * BQ;
    T *Ks = reinterpret_cast<T *>(smem);
    T *Vs = Ks + D::TILE, *Qs = Vs + D::TILE, *dOs = Qs + D::TILE;
    float *Sf = reinterpret_cast<float *>(dOs + D::TILE) + warp * D::BWD_F;
    float *dPf = Sf + 16 * LDS;
    T *Pb = reinterpret_cast<T *>(reinterpret_cast<float *>(dOs + D::TILE) + WARPS * D::BWD_F) + warp * 16 * LDP;
    __shared__ float Dq[BQ], Lq[BQ];
    __shared__ int Sq[BQ]; /* the tile's queries' first keys */
    const size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * stride + (size_t)h * HS;
    const size_t obase = (size_t)b * T_ * C + (size_t)h * HS;
    const int32_t *pr = pos ? pos + (size_t)b * T_ : nullptr;
    /* the query tiles from the diagonal to the last whose first query's example reaches the block's keys */
    int q_tiles = (T_ - kv0 + BQ - 1) / BQ;
    while (pr && q_tiles > 1 && first_key(pr, kv0 + (q_tiles - 1) * BQ, T_) > kv0 + BQ - 1)
        q_tiles--;

    load_tile<T, ND, BQ>(Ks, base + C, stride, kv0, T_, HS, vec);
    load_tile<T, ND, BQ>(Vs, base + 2 * C, stride, kv0, T_, HS, vec);
    /* Lanes 2r and 2r+1 own key row r of this warp: query columns [HALF half, +HALF). */
    const int r = lane / 2, half = lane % 2;
    const int kj = kv0 + warp * 16 + r;
    frag_c dk[ND], dv[ND];
    for (int n = 0; n < ND; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int q0 = kv0; q0 < kv0 + q_tiles * BQ; q0 += BQ) {
        __syncthreads(); /* every warp is done with the previous Q/dO tile */
        load_tile<T, ND, BQ>(Qs, base, stride, q0, T_, HS, vec);
        load_tile<T, ND, BQ>(dOs, dout + obase, C, q0, T_, HS, vec);
        __syncthreads();
        for (int i = 0; i < 16; i++) {
            const int rr = warp * 16 + i, q = q0 + rr;
            const float d = q < T_ ? row_dot<T>(dOs + rr * D::LDH, out + obase + (size_t)q * C, HS) : 0.0f;
            if (lane == 0) {
                Dq[rr] = d;
                Lq[rr] = q < T_ ? lse[((size_t)b * NH + h) * T_ + q] : 0.0f;
                Sq[rr] = first_key(pr, q, T_);
            }
        }
        __syncthreads();
        mm_abt<T, ND, BQ>(Sf, Ks + warp * 16 * D::LDH, Qs);   /* S^T: keys x queries */
        mm_abt<T, ND, BQ>(dPf, Vs + warp * 16 * D::LDH, dOs); /* dP^T = V dO^T */
        __syncwarp();
        for (int j = 0; j < HALF; j++) {
            const int col = half * HALF + j, qi = q0 + col;
            float p = 0.0f;
            if (kj <= qi && qi < T_ && Sq[col] <= kj)
                p = __expf(Sf[r * LDS + col] * scale - Lq[col]);
            Sf[r * LDS + col] = p;
            Pb[r * LDP + col] = cu_round<T>(p);
        }
        __syncwarp();
        mm_pv<T, ND, BQ>(dv, Pb, dOs);
        __syncwarp(); /* Pb is rewritten below */
        for (int j = 0; j < HALF; j++) {
            const int col = half * HALF + j;
            const float ds = Sf[r * LDS + col] * (dPf[r * LDS + col] - Dq[col]);
            Pb[r * LDP + col] = cu_round<T>(ds);
        }
        __syncwarp();
        mm_pv<T, ND, BQ>(dk, Pb, Qs);
    }
    __syncwarp();
    T *dbase = dqkv + (size_t)b * T_ * stride + (size_t)h * HS;
    for (int n = 0; n < ND; n++)
        wmma::store_matrix_sync(Sf + n * 16, dk[n], D::LDO, wmma::mem_row_major);
    __syncwarp();
    write_rows<T, ND, BQ>(dbase + C, stride, Sf, kv0 + warp * 16, T_, HS, scale, true);
    __syncwarp();
    for (int n = 0; n < ND; n++)
        wmma::store_matrix_sync(Sf + n * 16, dv[n], D::LDO, wmma::mem_row_major);
    __syncwarp();
    write_rows<T, ND, BQ>(dbase + 2 * C, stride, Sf, kv0 + warp * 16, T_, HS, 1.0f, true);
}

template <typename T, int ND, int BQ>
__global__ void __launch_bounds__(tiles<BQ>::THREADS)
    attention_dkv_kernel(T *dqkv, const T *dout, const T *qkv, const T *out, const float *lse, int T_, int C,
                         int NH, float scale, bool vec, const int32_t *pos)
{
    if constexpr (wmma_here<T>)
        dkv_body<T, ND, BQ>(dqkv, dout, qkv, out, lse, T_, C, NH, scale, vec, pos);
    else
        __trap();
}

/* Dynamic shared memory of each kernel, and the static rows (D, lse and the first keys) beside it. */
template <int ND, int BQ> size_t forward_smem()
{
    using D = dims<ND, BQ>;
    return 3 * D::TILE * 2 + tiles<BQ>::WARPS * (D::FWD_F + 16 * D::LDO) * sizeof(float) +
           tiles<BQ>::WARPS * 16 * tiles<BQ>::LDP * 2;
}

template <int ND, int BQ> size_t backward_smem()
{
    using D = dims<ND, BQ>;
    return 4 * D::TILE * 2 + tiles<BQ>::WARPS * D::BWD_F * sizeof(float) + tiles<BQ>::WARPS * 16 * tiles<BQ>::LDP * 2;
}

constexpr size_t static_smem(int BQ) { return 2 * (size_t)BQ * sizeof(float) + (size_t)BQ * sizeof(int); }

/* The device's shared memory per block (opted in), for the tile choice and
 * the messages. */
ferry_status smem_limit(int *limit)
{
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return FERRY_OK;
}

struct attn_args {
    cudaStream_t s;
    const int32_t *pos; /* positions [B T], or NULL */
    int B, T, C, NH, HS;
    float scale;
    bool vec;
};

template <typename T, int ND, int BQ> ferry_status launch_forward(const attn_args &a, T *out, float *lse, const T *qkv)
{
    const size_t smem = forward_smem<ND, BQ>();
    ferry_status st = cu_allow_smem(reinterpret_cast<const void *>(attention_forward_kernel<T, ND, BQ>), smem);
    if (st != FERRY_OK)
        return st;
    dim3 grid((a.T + BQ - 1) / BQ, a.NH, a.B);
    attention_forward_kernel<T, ND, BQ><<<grid, tiles<BQ>::THREADS, smem, a.s>>>(out, lse, qkv, a.T, a.C, a.NH,
                                                                                 a.scale, a.vec, a.pos);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

template <typename T, int ND, int BQ>
ferry_status launch_backward(const attn_args &a, T *dqkv, const T *dout, const T *qkv, const T *out,
                             const float *lse)
{
    const size_t smem = backward_smem<ND, BQ>();
    ferry_status st = cu_allow_smem(reinterpret_cast<const void *>(attention_dq_kernel<T, ND, BQ>), smem);
    if (st == FERRY_OK)
        st = cu_allow_smem(reinterpret_cast<const void *>(attention_dkv_kernel<T, ND, BQ>), smem);
    if (st != FERRY_OK)
        return st;
    dim3 grid((a.T + BQ - 1) / BQ, a.NH, a.B);
    attention_dq_kernel<T, ND, BQ><<<grid, tiles<BQ>::THREADS, smem, a.s>>>(dqkv, dout, qkv, out, lse, a.T, a.C,
                                                                            a.NH, a.scale, a.vec, a.pos);
    CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<T, ND, BQ><<<grid, tiles<BQ>::THREADS, smem, a.s>>>(dqkv, dout, qkv, out, lse, a.T, a.C,
                                                                             a.NH, a.scale, a.vec, a.pos);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

/* The shared memory a pass needs with tiles of bq at this head size. */
template <int ND> size_t need(bool backward, int bq)
{
    const size_t dyn = backward ? (bq == 64 ? backward_smem<ND, 64>() : backward_smem<ND, 32>())
                                : (bq == 64 ? forward_smem<ND, 64>() : forward_smem<ND, 32>());
    return dyn + static_smem(bq);
}

size_t need_bytes(int HS, bool backward, int bq)
{
    switch ((HS + 15) / 16) {
    case 1: return need<1>(backward, bq);
    case 2: return need<2>(backward, bq);
    case 3: return need<3>(backward, bq);
    case 4: return need<4>(backward, bq);
    case 5: return need<5>(backward, bq);
    case 6: return need<6>(backward, bq);
    case 7: return need<7>(backward, bq);
    default: return need<8>(backward, bq);
    }
}

/* The tile size: `asked` (64 or 32) if given, else the larger that fits the
 * card; a size that does not fit is FERRY_ERR_UNSUPPORTED naming both. */
ferry_status choose_tile(const char *op, int HS, bool backward, int asked, int *bq)
{
    int limit = 0;
    ferry_status st = smem_limit(&limit);
    if (st != FERRY_OK)
        return st;
    CU_REQUIRE(asked == 0 || asked == 32 || asked == 64, "%s: tile %d; use 0 (chosen for the card), 32 or 64", op,
               asked);
    const int options[2] = {64, 32};
    for (int i = 0; i < 2; i++) {
        if (asked && options[i] != asked)
            continue;
        if (need_bytes(HS, backward, options[i]) <= (size_t)limit) {
            *bq = options[i];
            return FERRY_OK;
        }
    }
    const int tried = asked ? asked : 32;
    return err_set(FERRY_ERR_UNSUPPORTED,
                   "%s: head size %d with %d-query tiles needs %zu bytes of shared memory per block, this GPU "
                   "allows %d; use a smaller head size%s",
                   op, HS, tried, need_bytes(HS, backward, tried), limit,
                   asked == 64 ? " or let the tile be chosen (0)" : "");
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

template <typename T, int BQ> ferry_status forward_at(const attn_args &a, T *o, float *lse, const T *x)
{
    switch ((a.HS + 15) / 16) {
    case 1: return launch_forward<T, 1, BQ>(a, o, lse, x);
    case 2: return launch_forward<T, 2, BQ>(a, o, lse, x);
    case 3: return launch_forward<T, 3, BQ>(a, o, lse, x);
    case 4: return launch_forward<T, 4, BQ>(a, o, lse, x);
    case 5: return launch_forward<T, 5, BQ>(a, o, lse, x);
    case 6: return launch_forward<T, 6, BQ>(a, o, lse, x);
    case 7: return launch_forward<T, 7, BQ>(a, o, lse, x);
    default: return launch_forward<T, 8, BQ>(a, o, lse, x);
    }
}

template <typename T, int BQ>
ferry_status backward_at(const attn_args &a, T *dx, const T *dy, const T *x, const T *o, const float *lse)
{
    switch ((a.HS + 15) / 16) {
    case 1: return launch_backward<T, 1, BQ>(a, dx, dy, x, o, lse);
    case 2: return launch_backward<T, 2, BQ>(a, dx, dy, x, o, lse);
    case 3: return launch_backward<T, 3, BQ>(a, dx, dy, x, o, lse);
    case 4: return launch_backward<T, 4, BQ>(a, dx, dy, x, o, lse);
    case 5: return launch_backward<T, 5, BQ>(a, dx, dy, x, o, lse);
    case 6: return launch_backward<T, 6, BQ>(a, dx, dy, x, o, lse);
    case 7: return launch_backward<T, 7, BQ>(a, dx, dy, x, o, lse);
    default: return launch_backward<T, 8, BQ>(a, dx, dy, x, o, lse);
    }
}

} // namespace

extern "C" ferry_status cudaop_attention_forward_wmma(void *stream, ferry_dtype act, int tile, act_t *out,
                                                      float *lse, const act_t *qkv, int B, int T, int C, int NH,
                                                      const int32_t *pos)
{
    attn_args a = {}; /* make_args fills it, or fails */
    ferry_status st = make_args("attention_forward", stream, B, T, C, NH, &a);
    a.pos = pos;
    int bq = 0;
    if (st == FERRY_OK)
        st = choose_tile("attention_forward", a.HS, false, tile, &bq);
    if (st != FERRY_OK)
        return st;
    a.vec = a.vec && cu_aligned16(qkv);
    return cu_with_type(act, "attention_forward", [&](auto tag) {
        using E = decltype(tag);
        E *o = static_cast<E *>(out);
        const E *x = static_cast<const E *>(qkv);
        return bq == 64 ? forward_at<E, 64>(a, o, lse, x) : forward_at<E, 32>(a, o, lse, x);
    });
}

extern "C" ferry_status cudaop_attention_backward_wmma(void *stream, ferry_dtype act, int tile, act_t *dqkv,
                                                       const act_t *dout, const act_t *qkv, const act_t *out,
                                                       const float *lse, float *delta, int B, int T, int C,
                                                       int NH, const int32_t *pos)
{
    attn_args a = {}; /* make_args fills it, or fails */
    ferry_status st = make_args("attention_backward", stream, B, T, C, NH, &a);
    a.pos = pos;
    int bq = 0;
    if (st == FERRY_OK)
        st = choose_tile("attention_backward", a.HS, true, tile, &bq);
    if (st == FERRY_OK)
        st = cudaop_attention_delta(stream, act, delta, dout, out, B, T, C, NH);
    if (st != FERRY_OK)
        return st;
    a.vec = a.vec && cu_aligned16(qkv, dout, dqkv);
    return cu_with_type(act, "attention_backward", [&](auto tag) {
        using E = decltype(tag);
        E *dx = static_cast<E *>(dqkv);
        const E *dy = static_cast<const E *>(dout), *x = static_cast<const E *>(qkv), *o = static_cast<const E *>(out);
        return bq == 64 ? backward_at<E, 64>(a, dx, dy, x, o, lse) : backward_at<E, 32>(a, dx, dy, x, o, lse);
    });
}
