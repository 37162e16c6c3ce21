/* Kernel lab: a variant of the attention backward (backend/ops/attention.cu),
 * checked and timed by dev/kernels/attention.c.
 *   1 (the lab's variant 3): the WMMA dK/dV kernel (attention_wmma.cu,
 *      variants 1 and 2) recomputes D = rowsum(dO * O) for every query tile
 *      it visits, once per key block (T / 64 times each row at T = 1024),
 *      and the dQ kernel once more; this variant takes D computed once
 *      (attention.cu's first pass, into [B, NH, T] fp32 scratch), and both
 *      kernels read it. The kernels and their functions are the WMMA ones
 *      otherwise, copied here so the two can be timed side by side.
 * Scratch: lab_attention_backward1_scratch_bytes(B, T, NH). */
#include <mma.h>

#include "dev/kernels/lab.h"
#include "backend/ops/cuda_util.cuh"

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

/* bf16 WMMA exists from sm_80: below it (the fat binary's sm_75 code) the
 * variants compile to a trap; the lab runs them only where the card has
 * bf16, as the backend does. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define LAB_BF16_WMMA_HERE 0
#else
#define LAB_BF16_WMMA_HERE 1
#endif

/* out (16 x 64 fp32, ld LDS) = A (16 rows of a tile) @ X^T, X a 64-row tile. */
template <int ND> __device__ void mm_abt(float *out, const bf16 *a, const bf16 *x)
{
#if !LAB_BF16_WMMA_HERE
    (void)out, (void)a, (void)x;
    __trap();
#else
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
#endif
}

/* acc (16 x HSP) += P (16 x 64 bf16, ld LDP) @ Y (a 64-row tile). */
template <int ND> __device__ void mm_pv(frag_c (&acc)[ND], const bf16 *p, const bf16 *y)
{
#if !LAB_BF16_WMMA_HERE
    (void)acc, (void)p, (void)y;
    __trap();
#else
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
#endif
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
    attention_dq_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *Dsum,
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
    for (int i = lane; i < 16; i += 32) { /* D read, not recomputed */
        const int rr = warp * 16 + i, q = q0 + rr;
        Drow[rr] = q < T ? Dsum[((size_t)b * NH + h) * T + q] : 0.0f;
        Lrow[rr] = q < T ? lse[((size_t)b * NH + h) * T + q] : 0.0f;
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
    attention_dkv_kernel(bf16 *dqkv, const bf16 *dout, const bf16 *qkv, const float *Dsum,
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
        for (int i = lane; i < 16; i += 32) { /* D read once per query tile, not recomputed per key block */
            const int rr = warp * 16 + i, q = q0 + rr;
            Dq[rr] = q < T ? Dsum[((size_t)b * NH + h) * T + q] : 0.0f;
            Lq[rr] = q < T ? lse[((size_t)b * NH + h) * T + q] : 0.0f;
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


template <int ND>
ferry_status launch1(cudaStream_t s, int B, int T, int C, int NH, bf16 *dqkv, const bf16 *dout, const bf16 *qkv,
                     const bf16 *out, const float *lse, float *Dsum, bool vec)
{
    const int HS = C / NH;
    const size_t smem = backward_smem<ND>();
    ferry_status st = allow_smem(reinterpret_cast<const void *>(attention_dq_kernel<ND>), smem, HS);
    if (st == FERRY_OK)
        st = allow_smem(reinterpret_cast<const void *>(attention_dkv_kernel<ND>), smem, HS);
    if (st != FERRY_OK)
        return st;
    st = cudaop_attention_delta(s, FERRY_DTYPE_BF16, Dsum, dout, out, B, T, C, NH);
    if (st != FERRY_OK)
        return st;
    const float scale = 1.0f / sqrtf((float)HS);
    dim3 grid((T + BR - 1) / BR, NH, B);
    attention_dq_kernel<ND><<<grid, THREADS, smem, s>>>(dqkv, dout, qkv, Dsum, lse, T, C, NH, scale, vec);
    CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<ND><<<grid, THREADS, smem, s>>>(dqkv, dout, qkv, Dsum, lse, T, C, NH, scale, vec);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

} // namespace

extern "C" size_t lab_attention_backward1_scratch_bytes(int B, int T, int NH)
{
    return (size_t)B * NH * T * sizeof(float);
}

extern "C" ferry_status lab_attention_backward1(void *stream, void *dqkv, const void *dout, const void *qkv,
                                                const void *out, const float *lse, int B, int T, int C, int NH,
                                                void *scratch)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0 && C / NH <= 128,
               "attention backward variant 1: B=%d T=%d C=%d NH=%d", B, T, C, NH);
    const int HS = C / NH;
    const bool vec = HS % 8 == 0 && C % 8 == 0 && cu_aligned16(qkv, dout, dqkv);
    cudaStream_t s = cu_stream(stream);
    bf16 *dx = static_cast<bf16 *>(dqkv);
    const bf16 *dy = static_cast<const bf16 *>(dout), *x = static_cast<const bf16 *>(qkv),
               *o = static_cast<const bf16 *>(out);
    float *Dsum = static_cast<float *>(scratch);
    switch ((HS + 15) / 16) {
    case 1: return launch1<1>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    case 2: return launch1<2>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    case 3: return launch1<3>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    case 4: return launch1<4>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    case 5: return launch1<5>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    case 6: return launch1<6>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    case 7: return launch1<7>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    default: return launch1<8>(s, B, T, C, NH, dx, dy, x, o, lse, Dsum, vec);
    }
}
