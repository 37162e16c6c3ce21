/* Causal multi-head attention on cuda, FlashAttention-2 style, on the
 * tensor cores through mma.sync: nothing of size T x T ever reaches device
 * memory. One source for both storage types T (bf16; f16 also on Turing)
 * and head sizes up to 128 (padded to 32, 64 or 128: HSP). Host version:
 * attention.c; Volta's kernels (and the kernel lab's earlier variants):
 * attention_wmma.cu. Fragment layouts and the instructions: mma.cuh.
 *
 * Forward: a block (BQ = 128 queries, or 64 where the card's shared memory
 * per block is short) owns BQ queries of one (batch, head), each warp 32 of
 * them at head sizes up to 64 (two 16-row tiles: every K and V fragment
 * read from shared memory feeds two products, which keeps the loop off
 * shared memory's bandwidth), 16 at 128 (registers). The Q tile and, two
 * stages deep, the K and V tiles of 64 keys come into shared memory by
 * cp.async (rows padded by 16 bytes, so ldmatrix reads them without bank
 * conflicts); the next tile's copy runs while the warps compute on the
 * current one. Each warp keeps its Q fragments, its rows' scores S = Q K^T
 * of a tile and its rows of output in registers (fp32 accumulators); the
 * online softmax works on the score
 * fragments in the log2 domain (each row's four lanes agree through two
 * shuffles), and P goes from the score registers straight into the A
 * fragments of P @ V. Tiles past the diagonal are never loaded; a warp
 * whose rows all precede a tile skips its products. Writes O (through
 * shared memory, in 16-byte stores) and lse = m + log(l).
 *
 * Positions (packed examples, op_list.h): query i sees keys i - pos[i] ..
 * i, a per-row lower bound beside the causal upper one. Every kernel
 * starts at the key tile (forward, dQ) holding its block's lowest start
 * (its first query's: starts ascend along a row), ends (dK, dV) at the
 * last query tile whose first query's example can still reach its keys,
 * skips a warp's products on a tile wholly outside its rows' examples, and
 * masks the keys below a row's start in the tiles that cross one. The
 * online softmax then meets rows with no key in a tile: their running max
 * starts at -1e30 instead of -inf, so it stays finite there (the same bits
 * as before wherever a row has keys, which without positions is every
 * tile). The forward keeps its rows' starts in shared memory, not
 * registers. A position outside [0, i] is clamped there. NULL positions:
 * the kernels' arithmetic as it was, bit for bit.
 *
 * Backward: a first pass writes delta = rowsum(dO * O) (D) once, one warp
 * per (row, head); then two kernels, neither with atomics, each owning the
 * part of dqkv it adds to (deterministic):
 * - dK, dV: a block of 4 warps per (b, h, 64 keys), each warp 16 keys; it
 *   walks the query tiles (64 queries; 32 at HSP 128, for registers) from
 *   the diagonal to the end, Q and dO (and their rows' lse and D) two
 *   stages deep by cp.async, and forms per tile S^T = K Q^T, P^T =
 *   exp(scale S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D), then
 *   accumulates dV += P^T dO and dK += dS^T Q in registers (on Turing at
 *   HSP 128, 16 queries of the tile at a time, for registers);
 * - dQ: a block of 4 warps per (b, h, 64 queries) walks the key tiles up
 *   to the diagonal (64 keys; 32 at HSP 128), recomputes P and dP = dO V^T,
 *   and accumulates dQ += dS K.
 * The products are m16n8k16 (bf16 or f16, fp32 accumulation); on Turing
 * (ARCH 75: f16 only) each is two m16n8k8, and the tiles come in through
 * registers, one stage deep, which keeps every kernel within its 64 KiB.
 *
 * Shared memory a block (LDH = HSP + 8 elements a row):
 *   forward (BQ + 2 stages x 2 x 64) x LDH x 2 bytes + the BQ rows'
 *     starts: 54.5 KiB at HSP 64 and BQ 128, 102.5 KiB at HSP 128 and BQ
 *     128, 85.25 KiB at BQ 64;
 *   dK/dV and dQ (2 x 64 + 2 stages x 2 x BI) x LDH x 2 bytes + the lse
 *     and D rows: 55.0 KiB at HSP 64 (BI 64), 68.5 KiB at HSP 128 (BI 32);
 *   one stage (Turing) at HSP 128: 51.25 KiB forward, 51.5 KiB backward.
 * Launch order puts the longest blocks first (the last query tiles of the
 * forward and dQ, the first key tiles of dK/dV).
 *
 * Registers: every loop over a fragment array (scores, outputs, the
 * softmax's max and sum, the operands of a product) has a trip count known
 * at compile time and is unrolled, so that each array element is a
 * register; ptxas gives every kernel here no stack frame and no spills, on
 * every card (tools/build/kernel_resources.py fails a kernel of the
 * training step that has either; docs/perf.md has the registers per card).
 * An index known only at run time would put the array in local memory, on
 * the L1 path ldmatrix shares. */
#include "backend/ops/mma.cuh"

namespace {

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr int BKV = 64; /* keys per forward tile */
constexpr int BK = 64;  /* keys per dK/dV block, queries per dQ block */

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

template <int HSP> struct hdim {
    static constexpr int LDH = HSP + 8; /* a shared row: 16 bytes of padding */
    static constexpr int CH = HSP / 8;  /* 16-byte chunks of a row */
    static constexpr int KS = HSP / 16; /* k-steps of a product over the head */
    static constexpr int DT = HSP / 8;  /* 8-column tiles of an output over the head */
    /* the inner tile of the backward kernels: 64 rows, 32 at HSP 128 */
    static constexpr int BI = HSP > 64 ? 32 : 64;
};

template <int ARCH> constexpr int stages() { return ARCH >= 80 ? 2 : 1; }

/* Whether the machine code being compiled can run the kernels written for
 * ARCH: ARCH 80's need sm_80's instructions, and ARCH 75's run on Turing
 * alone (every later card launches ARCH 80's), so each compiles to a trap
 * on the other cards instead of machine code that never runs there. The
 * host pass and the simulated device have both. */
template <int ARCH> __host__ __device__ constexpr bool runs_here()
{
#if defined(__CUDA_ARCH__)
    return ARCH >= 80 ? __CUDA_ARCH__ >= 800 : __CUDA_ARCH__ < 800;
#else
    return true;
#endif
}

template <int HSP, int BQ, int ARCH> constexpr size_t forward_smem()
{
    return (size_t)(BQ + 2 * stages<ARCH>() * BKV) * hdim<HSP>::LDH * 2 + (size_t)BQ * sizeof(int);
}

/* dK/dV's and dQ's: two tiles of 64 rows, two stages of two inner tiles,
 * the inner rows' lse and D per stage (dQ's 64 rows' once). */
template <int HSP, int ARCH> constexpr size_t backward_smem()
{
    return (size_t)(2 * BK + 2 * stages<ARCH>() * hdim<HSP>::BI) * hdim<HSP>::LDH * 2 +
           2 * (size_t)(stages<ARCH>() * hdim<HSP>::BI > BK ? stages<ARCH>() * hdim<HSP>::BI : BK) * 4;
}

/* Rows row0.. of a [*, stride] matrix, head columns [0, HS), into a ROWS x
 * LDH tile; zeros past T rows and HS columns. `vec`: 16-byte copies (HS,
 * stride and the base allow them; asynchronous with ARCH 80), else element
 * by element. Copy i of 16 bytes goes to row i / CH, chunk i % CH, except
 * at HSP 32 (4 chunks a row): there the 8 copies of each quarter-warp go
 * to one chunk of 8 rows, (i / 32) 8 + i % 8, chunk (i / 8) % 4, which
 * puts them on distinct banks (rows of 80 bytes are 5 chunks apart, while
 * two rows of 4 chunks would meet) and reads the same 8 rows a warp. */
template <typename T, int HSP, int ROWS, int THREADS, int ARCH>
__device__ __forceinline__ void load_rows(T *dst, const T *src, size_t stride, int row0, int T_, int HS, bool vec)
{
    using H = hdim<HSP>;
    if (vec) {
        for (int i = threadIdx.x; i < ROWS * H::CH; i += THREADS) {
            const int r = H::CH == 4 ? (i / 32) * 8 + i % 8 : i / H::CH;
            const int c = (H::CH == 4 ? (i / 8) % 4 : i % H::CH) * 8;
            const bool ok = row0 + r < T_ && c < HS;
            cu_cp16<ARCH>(dst + r * H::LDH + c, ok ? src + (size_t)(row0 + r) * stride + c : src, ok);
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            const int r = i / HSP, c = i % HSP;
            dst[r * H::LDH + c] = row0 + r < T_ && c < HS ? src[(size_t)(row0 + r) * stride + c] : cu_round<T>(0.0f);
        }
    }
}

/* n floats of src from row0 into dst (zeros past T). */
template <int THREADS>
__device__ __forceinline__ void load_floats(float *dst, const float *src, int row0, int n, int T_, float scale)
{
    for (int i = threadIdx.x; i < n; i += THREADS)
        dst[i] = row0 + i < T_ ? src[row0 + i] * scale : 0.0f;
}

/* The A fragments of a warp's 16 rows of a tile (rows r0.., all KS k-steps). */
template <int HSP> __device__ __forceinline__ void load_a(uint32_t (&f)[hdim<HSP>::KS][4], const void *tile, int r0)
{
    using H = hdim<HSP>;
    const int lane = threadIdx.x % 32;
    const char *base = static_cast<const char *>(tile);
#pragma unroll
    for (int ks = 0; ks < H::KS; ks++)
        cu_ldsm4<false>(f[ks], cu_smem(base + 2 * ((r0 + lane % 16) * H::LDH + ks * 16 + (lane / 16) * 8)));
}

/* acc[mt][n-tile 0 .. 2 NP) += A (MT tiles of 16 rows of the warp,
 * fragments a[mt]) @ X^T for rows x0 .. x0 + 16 NP of the tile X (keys by
 * head columns): X's rows are the product's columns, through ldmatrix (not
 * transposed), each fragment of X used for every one of the MT tiles. */
template <typename T, int HSP, int NP, int MT, int ARCH>
__device__ __forceinline__ void mm_abt(float (&acc)[MT][2 * NP][4], const uint32_t (&a)[MT][hdim<HSP>::KS][4],
                                       const T *x, int x0)
{
    using H = hdim<HSP>;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int np = 0; np < NP; np++)
#pragma unroll
        for (int ks = 0; ks < H::KS; ks++) {
            uint32_t b[4];
            cu_ldsm4<false>(b, cu_smem(x + (x0 + np * 16 + lane % 8 + (lane / 16) * 8) * H::LDH + ks * 16 +
                                ((lane / 8) % 2) * 8));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                cu_mma16816<T, ARCH>(acc[mt][2 * np], a[mt][ks], b[0], b[1]);
                cu_mma16816<T, ARCH>(acc[mt][2 * np + 1], a[mt][ks], b[2], b[3]);
            }
        }
}

/* acc[mt][head n-tiles] += P @ Y for P the warp's MT tiles of 16 x 16 KP
 * values held as C fragments p[mt][2 KP][4] (packed here into A
 * fragments), Y rows y0 .. y0 + 16 KP of a tile (through ldmatrix,
 * transposed; each fragment used for every tile). */
template <typename T, int HSP, int KP, int MT, int ARCH>
__device__ __forceinline__ void mm_pv(float (&acc)[MT][hdim<HSP>::DT][4], const float (&p)[MT][2 * KP][4],
                                      const T *y, int y0)
{
    using H = hdim<HSP>;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < KP; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = cu_pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            a[mt][1] = cu_pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            a[mt][2] = cu_pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            a[mt][3] = cu_pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < H::DT / 2; dp++) {
            uint32_t b[4];
            cu_ldsm4<true>(b, cu_smem(y + (y0 + kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * H::LDH + dp * 16 +
                                  (lane / 16) * 8));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                cu_mma16816<T, ARCH>(acc[mt][2 * dp], a[mt], b[0], b[1]);
                cu_mma16816<T, ARCH>(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* The four lanes of a fragment row agree on its max / sum. */
__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Adds (or writes) a warp's 16 rows of fp32 C fragments acc[DT][4], times
 * `factor`, into rows row0.. of a [*, stride] matrix (head columns [0,
 * HS)), through `stage` (the warp's own 16 x LDH rows of shared memory) so
 * the global accesses are 16 bytes wide when `vec`. */
template <typename T, int HSP>
__device__ __forceinline__ void store_rows(T *dst, size_t stride, const float (&acc)[hdim<HSP>::DT][4], float factor,
                                           T *stage, int row0, int T_, int HS, bool vec, bool accumulate)
{
    using H = hdim<HSP>;
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int dt = 0; dt < H::DT; dt++) {
        const int c = dt * 8 + 2 * t;
        *reinterpret_cast<uint32_t *>(stage + g * H::LDH + c) = cu_pack2<T>(acc[dt][0] * factor, acc[dt][1] * factor);
        *reinterpret_cast<uint32_t *>(stage + (g + 8) * H::LDH + c) =
            cu_pack2<T>(acc[dt][2] * factor, acc[dt][3] * factor);
    }
    __syncwarp();
    if (vec) {
        for (int i = lane; i < 16 * H::CH; i += 32) {
            const int r = i / H::CH, c = (i % H::CH) * 8;
            if (row0 + r >= T_ || c >= HS)
                continue;
            T *p = dst + (size_t)(row0 + r) * stride + c;
            float v[8], w[8];
            cu_load8(v, stage + r * H::LDH + c);
            if (accumulate) {
                cu_load8(w, p);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[j] += w[j];
            }
            cu_store8(p, v);
        }
    } else {
        for (int i = lane; i < 16 * HS; i += 32) {
            const int r = i / HS, c = i % HS;
            if (row0 + r >= T_)
                break;
            T *p = dst + (size_t)(row0 + r) * stride + c;
            float v = cu_f32(stage[r * H::LDH + c]);
            *p = cu_round<T>(accumulate ? v + cu_f32(*p) : v);
        }
    }
    __syncwarp();
}

/* ---- forward ---- */

/* 16-row tiles a forward warp owns: two at head sizes up to 64 (each K or
 * V fragment from ldmatrix then feeds two products, which keeps the loop
 * off shared memory's bandwidth), one at 128 (registers). */
template <int HSP> constexpr int fwd_mt() { return HSP <= 64 ? 2 : 1; }
template <int HSP, int BQ> constexpr int fwd_threads() { return 32 * BQ / (16 * fwd_mt<HSP>()); }

template <typename T, int HSP, int BQ, int ARCH>
__device__ void forward_body(T *out, float *lse, const T *qkv, int T_, int C, int NH, float scale_log2, bool vec,
                             const int32_t *pos)
{
    using H = hdim<HSP>;
    constexpr int MT = fwd_mt<HSP>(), THREADS = fwd_threads<HSP, BQ>(), ST = stages<ARCH>(), NP = BKV / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem);
    T *Ks = Qs + BQ * H::LDH, *Vs = Ks + ST * BKV * H::LDH;
    /* The block's rows' first keys, in shared memory rather than registers (at HSP 64 the loop's
     * fragments leave none to spare): read where a tile needs them. */
    int *Los = reinterpret_cast<int *>(Vs + ST * BKV * H::LDH);
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int q0 = qt * BQ, wq = q0 + warp * 16 * MT; /* the warp's first query */
    const size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * stride + (size_t)h * HS;
    const int32_t *pr = pos ? pos + (size_t)b * T_ : nullptr;
    const int j0 = first_key(pr, q0, T_) / BKV; /* the tile of the block's lowest start */
    const int n_kv = (min(T_, q0 + BQ) + BKV - 1) / BKV; /* tiles j0 .. n_kv - 1 */
    /* (rows past T, never written, take the last row's, so that a warp's last row holds its highest start) */
    for (int i = threadIdx.x; i < BQ; i += THREADS) /* ordered before its reads by the loop's first barrier */
        Los[i] = first_key(pr, min(q0 + i, T_ - 1), T_);

    const int s0 = ST == 2 ? j0 & 1 : 0; /* tile j's stage is j's parity */
    load_rows<T, HSP, BQ, THREADS, ARCH>(Qs, base, stride, q0, T_, HS, vec);
    load_rows<T, HSP, BKV, THREADS, ARCH>(Ks + s0 * BKV * H::LDH, base + C, stride, j0 * BKV, T_, HS, vec);
    load_rows<T, HSP, BKV, THREADS, ARCH>(Vs + s0 * BKV * H::LDH, base + 2 * C, stride, j0 * BKV, T_, HS, vec);
    cu_cp_commit<ARCH>();

    uint32_t qf[MT][H::KS][4];
    float o[MT][H::DT][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dt = 0; dt < H::DT; dt++)
            o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
        /* Finite, below every score: a row whose first tiles hold none of its keys (positions) keeps
         * it, with alpha 1 and p 0 there, instead of a max of -inf and exp2(-inf + inf); at its
         * first key, alpha = exp2(-1e30 - max) = 0 as exp2(-inf) was: the same bits. */
        m[mt][0] = m[mt][1] = -1e30f;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    for (int j = j0; j < n_kv; j++) {
        const int st = ST == 2 ? j & 1 : 0, kv0 = j * BKV;
        T *Kt = Ks + st * BKV * H::LDH, *Vt = Vs + st * BKV * H::LDH;
        if constexpr (ST == 2) {
            if (j + 1 < n_kv) { /* the other stage was last read before the previous barrier */
                load_rows<T, HSP, BKV, THREADS, ARCH>(Ks + (st ^ 1) * BKV * H::LDH, base + C, stride, kv0 + BKV,
                                                      T_, HS, vec);
                load_rows<T, HSP, BKV, THREADS, ARCH>(Vs + (st ^ 1) * BKV * H::LDH, base + 2 * C, stride,
                                                      kv0 + BKV, T_, HS, vec);
                cu_cp_commit<ARCH>();
                cu_cp_wait<ARCH, 1>();
            } else {
                cu_cp_wait<ARCH, 0>();
            }
        } else if (j > j0) {
            load_rows<T, HSP, BKV, THREADS, ARCH>(Kt, base + C, stride, kv0, T_, HS, vec);
            load_rows<T, HSP, BKV, THREADS, ARCH>(Vt, base + 2 * C, stride, kv0, T_, HS, vec);
        }
        __syncthreads();
        if (j == j0)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                load_a<HSP>(qf[mt], Qs, warp * 16 * MT + 16 * mt);
        /* some key of the tile is at or before one of the warp's queries, and in one of their examples
         * (the warp's lowest start is its first row's: starts ascend) */
        const int *wlos = Los + warp * 16 * MT;
        if (kv0 <= wq + 16 * MT - 1 && kv0 + BKV > wlos[0]) {
            float s[MT][2 * NP][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < 2 * NP; n++)
                    s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
            mm_abt<T, HSP, NP, MT, ARCH>(s, qf, Kt, 0);
            const bool edge = kv0 + BKV - 1 > wq || kv0 + BKV > T_ || kv0 < wlos[16 * MT - 1];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                /* row r sees keys lo .. min(row, T - 1): element (n, i) is key kv0 + 2t + 8n + (i & 1),
                 * inside iff 8n + (i & 1) - (lo - kv0 - 2t), unsigned, is at most the range's width */
                int first[2], width[2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int lo = edge ? wlos[16 * mt + g + 8 * r] : 0;
                    first[r] = lo - kv0 - 2 * t;
                    width[r] = min(wq + 16 * mt + g + 8 * r, T_ - 1) - lo;
                }
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int n = 0; n < 2 * NP; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float x = s[mt][n][i] * scale_log2;
                        if (edge && (unsigned)(n * 8 + (i & 1) - first[i / 2]) > (unsigned)width[i / 2])
                            x = -INFINITY;
                        s[mt][n][i] = x;
                        mx[i / 2] = fmaxf(mx[i / 2], x);
                    }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float m_new = fmaxf(m[mt][r], quad_max(mx[r]));
                    const float alpha = exp2f(m[mt][r] - m_new);
                    m[mt][r] = m_new;
                    l[mt][r] *= alpha;
#pragma unroll
                    for (int dt = 0; dt < H::DT; dt++) {
                        o[mt][dt][2 * r] *= alpha;
                        o[mt][dt][2 * r + 1] *= alpha;
                    }
                }
#pragma unroll
                for (int n = 0; n < 2 * NP; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float p = exp2f(s[mt][n][i] - m[mt][i / 2]);
                        s[mt][n][i] = p;
                        l[mt][i / 2] += p;
                    }
            }
            mm_pv<T, HSP, NP, MT, ARCH>(o, s, Vt, 0);
        }
        __syncthreads(); /* every warp is done with this stage */
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = wq + 16 * mt + g + 8 * r;
            const float sum = quad_sum(l[mt][r]);
            if (t == 0 && row < T_)
                lse[((size_t)b * NH + h) * T_ + row] = (m[mt][r] + log2f(sum)) * LN2;
            inv[r] = 1.0f / sum;
        }
#pragma unroll
        for (int dt = 0; dt < H::DT; dt++) {
            o[mt][dt][0] *= inv[0];
            o[mt][dt][1] *= inv[0];
            o[mt][dt][2] *= inv[1];
            o[mt][dt][3] *= inv[1];
        }
        /* The warp's own Q rows of shared memory stage its output. */
        store_rows<T, HSP>(out + (size_t)b * T_ * C + (size_t)h * HS, C, o[mt], 1.0f,
                           Qs + (warp * 16 * MT + 16 * mt) * H::LDH, wq + 16 * mt, T_, HS, vec, false);
    }
}

/* occupancy floor: 4 warps/SM from sm_80: `attention_fwd_kernel<__nv_bfloat16, \d+, \d+, 80>`
 * (the 128-query block's 85 KiB of tiles leave one block an SM on sm_86/89) */
template <typename T, int HSP, int BQ, int ARCH>
__global__ void __launch_bounds__(fwd_threads<HSP, BQ>())
    attention_fwd_kernel(T *out, float *lse, const T *qkv, int T_, int C, int NH, float scale_log2, bool vec,
                         const int32_t *pos)
{
    if constexpr (runs_here<ARCH>())
        forward_body<T, HSP, BQ, ARCH>(out, lse, qkv, T_, C, NH, scale_log2, vec, pos);
    else
        __trap();
}

/* ---- backward ---- */

/* delta[b, h, t] = dout . out over the head: a warp per (row, head). */
/* occupancy floor: 32 warps/SM: `attention_delta_kernel<.*>` (memory-bound) */
template <typename T> __global__ void attention_delta_kernel(float *delta, const T *dout, const T *out, int B, int T_,
                                                              int C, int NH)
{
    const size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32, HS = C / NH;
    if (w >= (size_t)B * T_ * NH)
        return; /* the whole warp */
    const int h = (int)(w % NH);
    const size_t bt = w / NH;
    const T *dy = dout + bt * C + (size_t)h * HS, *y = out + bt * C + (size_t)h * HS;
    float acc = 0.0f;
    for (int c = lane; c < HS; c += 32)
        acc += cu_f32(dy[c]) * cu_f32(y[c]);
    acc = cu_warp_sum(acc);
    if (lane == 0)
        delta[((bt / T_) * NH + h) * T_ + bt % T_] = acc;
}

template <typename T, int HSP, int ARCH>
__device__ void dkv_body(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *delta, int T_, int C,
                         int NH, float scale, bool vec, const int32_t *pos)
{
    using H = hdim<HSP>;
    constexpr int THREADS = 128, ST = stages<ARCH>(), BI = H::BI, NP = BI / 16;
    constexpr int NPC = ARCH >= 80 ? NP : HSP > 64 ? 1 : NP / 2; /* 16-query blocks a pass (below) */
    extern __shared__ __align__(128) unsigned char smem[];
    T *Ks = reinterpret_cast<T *>(smem);
    T *Vs = Ks + BK * H::LDH, *Qs = Vs + BK * H::LDH, *dOs = Qs + ST * BI * H::LDH;
    float *Ls = reinterpret_cast<float *>(dOs + ST * BI * H::LDH), *Ds = Ls + ST * BI;
    const int h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int k0 = blockIdx.x * BK, wk = k0 + warp * 16; /* the warp's first key */
    const size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * stride + (size_t)h * HS;
    const T *dy = dout + (size_t)b * T_ * C + (size_t)h * HS;
    const float *lrow = lse + ((size_t)b * NH + h) * T_, *drow = delta + ((size_t)b * NH + h) * T_;
    const float scale_log2 = scale * LOG2E;
    const int32_t *pr = pos ? pos + (size_t)b * T_ : nullptr;
    int n_q = (T_ - k0 + BI - 1) / BI; /* query tiles from the diagonal on */
    /* ... to the last whose first query's example starts at or before the block's last key */
    while (pr && n_q > 1 && first_key(pr, k0 + (n_q - 1) * BI, T_) > k0 + BK - 1)
        n_q--;

    load_rows<T, HSP, BK, THREADS, ARCH>(Ks, base + C, stride, k0, T_, HS, vec);
    load_rows<T, HSP, BK, THREADS, ARCH>(Vs, base + 2 * C, stride, k0, T_, HS, vec);
    load_rows<T, HSP, BI, THREADS, ARCH>(Qs, base, stride, k0, T_, HS, vec);
    load_rows<T, HSP, BI, THREADS, ARCH>(dOs, dy, C, k0, T_, HS, vec);
    load_floats<THREADS>(Ls, lrow, k0, BI, T_, LOG2E);
    load_floats<THREADS>(Ds, drow, k0, BI, T_, 1.0f);
    cu_cp_commit<ARCH>();

    float dk[1][H::DT][4], dv[1][H::DT][4]; /* one 16-row tile a warp (the products' MT = 1) */
#pragma unroll
    for (int dt = 0; dt < H::DT; dt++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            dk[0][dt][i] = dv[0][dt][i] = 0.0f;
    const int key[2] = {wk + g, wk + g + 8};
    for (int j = 0; j < n_q; j++) {
        const int st = ST == 2 ? j & 1 : 0, q0 = k0 + j * BI;
        T *Qt = Qs + st * BI * H::LDH, *dOt = dOs + st * BI * H::LDH;
        const float *Lt = Ls + st * BI, *Dt = Ds + st * BI;
        if constexpr (ST == 2) {
            if (j + 1 < n_q) {
                const int s2 = st ^ 1;
                load_rows<T, HSP, BI, THREADS, ARCH>(Qs + s2 * BI * H::LDH, base, stride, q0 + BI, T_, HS, vec);
                load_rows<T, HSP, BI, THREADS, ARCH>(dOs + s2 * BI * H::LDH, dy, C, q0 + BI, T_, HS, vec);
                load_floats<THREADS>(Ls + s2 * BI, lrow, q0 + BI, BI, T_, LOG2E);
                load_floats<THREADS>(Ds + s2 * BI, drow, q0 + BI, BI, T_, 1.0f);
                cu_cp_commit<ARCH>();
                cu_cp_wait<ARCH, 1>();
            } else {
                cu_cp_wait<ARCH, 0>();
            }
        } else if (j > 0) {
            load_rows<T, HSP, BI, THREADS, ARCH>(Qt, base, stride, q0, T_, HS, vec);
            load_rows<T, HSP, BI, THREADS, ARCH>(dOt, dy, C, q0, T_, HS, vec);
            load_floats<THREADS>(Ls, lrow, q0, BI, T_, LOG2E);
            load_floats<THREADS>(Ds, drow, q0, BI, T_, 1.0f);
        }
        __syncthreads();
        /* some query of the tile is at or after one of the warp's keys, and in one of their examples */
        if (q0 + BI - 1 >= wk && wk < T_ && first_key(pr, q0, T_) <= wk + 15) {
            /* with positions: some query of the tile starts after one of the warp's keys */
            const bool lo_edge = pr && first_key(pr, min(q0 + BI, T_) - 1, T_) > wk;
            const bool edge = q0 < wk + 15 || q0 + BI > T_ || lo_edge;
            /* The tile's queries in passes of 16 NPC: one pass, but two on
             * Turing (at HSP 64 since positions, whose masking took 8 bytes
             * of stack there), where the whole tile's S^T and dP^T beside
             * dK, dV and the K fragments take more than 255 registers and
             * spill. dK and dV receive their products in the same order
             * either way. */
#pragma unroll 1
            for (int c0 = 0; c0 < 16 * NP; c0 += 16 * NPC) {
                uint32_t kf[1][H::KS][4];
                float s[1][2 * NPC][4], dp[1][2 * NPC][4];
#pragma unroll
                for (int n = 0; n < 2 * NPC; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        s[0][n][i] = dp[0][n][i] = 0.0f;
                load_a<HSP>(kf[0], Ks, warp * 16);
                mm_abt<T, HSP, NPC, 1, ARCH>(s, kf, Qt, c0); /* S^T: the warp's keys x the pass's queries */
                load_a<HSP>(kf[0], Vs, warp * 16);
                mm_abt<T, HSP, NPC, 1, ARCH>(dp, kf, dOt, c0); /* dP^T = V dO^T */
#pragma unroll
                for (int n = 0; n < 2 * NPC; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int qc = c0 + n * 8 + 2 * t + (i & 1), q = q0 + qc;
                        float p = exp2f(s[0][n][i] * scale_log2 - Lt[qc]);
                        if (edge && (q < key[i / 2] || q >= T_ || (lo_edge && first_key(pr, q, T_) > key[i / 2])))
                            p = 0.0f;
                        s[0][n][i] = p;                          /* P^T */
                        dp[0][n][i] = p * (dp[0][n][i] - Dt[qc]); /* dS^T */
                    }
                mm_pv<T, HSP, NPC, 1, ARCH>(dv, s, dOt, c0);
                mm_pv<T, HSP, NPC, 1, ARCH>(dk, dp, Qt, c0);
            }
        }
        __syncthreads();
    }
    /* The warp's own K rows of shared memory stage its results. */
    T *dbase = dqkv + (size_t)b * T_ * stride + (size_t)h * HS;
    store_rows<T, HSP>(dbase + C, stride, dk[0], scale, Ks + warp * 16 * H::LDH, wk, T_, HS, vec, true);
    store_rows<T, HSP>(dbase + 2 * C, stride, dv[0], 1.0f, Ks + warp * 16 * H::LDH, wk, T_, HS, vec, true);
}

/* occupancy floor: 4 warps/SM from sm_80: `attention_dkv_kernel<__nv_bfloat16, \d+, 80>`
 * (one 128-thread block of 55-69 KiB an SM on sm_86/89) */
template <typename T, int HSP, int ARCH>
__global__ void __launch_bounds__(128)
    attention_dkv_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *delta, int T_, int C,
                         int NH, float scale, bool vec, const int32_t *pos)
{
    if constexpr (runs_here<ARCH>())
        dkv_body<T, HSP, ARCH>(dqkv, dout, qkv, lse, delta, T_, C, NH, scale, vec, pos);
    else
        __trap();
}

template <typename T, int HSP, int ARCH>
__device__ void dq_body(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *delta, int T_, int C,
                        int NH, float scale, bool vec, const int32_t *pos)
{
    using H = hdim<HSP>;
    constexpr int THREADS = 128, ST = stages<ARCH>(), BI = H::BI, NP = BI / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    T *Qs = reinterpret_cast<T *>(smem);
    T *dOs = Qs + BK * H::LDH, *Ks = dOs + BK * H::LDH, *Vs = Ks + ST * BI * H::LDH;
    float *Ls = reinterpret_cast<float *>(Vs + ST * BI * H::LDH), *Ds = Ls + BK;
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, HS = C / NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int q0 = qt * BK, wq = q0 + warp * 16;
    const size_t stride = 3 * (size_t)C;
    const T *base = qkv + (size_t)b * T_ * stride + (size_t)h * HS;
    const T *dy = dout + (size_t)b * T_ * C + (size_t)h * HS;
    const float scale_log2 = scale * LOG2E;
    const int32_t *pr = pos ? pos + (size_t)b * T_ : nullptr;
    const int j0 = first_key(pr, q0, T_) / BI;            /* from the tile of the block's lowest start */
    const int n_k = (min(T_, q0 + BK) + BI - 1) / BI - j0; /* key tiles up to the diagonal */
    const int wlo = first_key(pr, wq, T_);
    const int lo[2] = {first_key(pr, wq + g, T_), first_key(pr, wq + g + 8, T_)};

    load_rows<T, HSP, BK, THREADS, ARCH>(Qs, base, stride, q0, T_, HS, vec);
    load_rows<T, HSP, BK, THREADS, ARCH>(dOs, dy, C, q0, T_, HS, vec);
    load_rows<T, HSP, BI, THREADS, ARCH>(Ks, base + C, stride, j0 * BI, T_, HS, vec);
    load_rows<T, HSP, BI, THREADS, ARCH>(Vs, base + 2 * C, stride, j0 * BI, T_, HS, vec);
    load_floats<THREADS>(Ls, lse + ((size_t)b * NH + h) * T_, q0, BK, T_, LOG2E);
    load_floats<THREADS>(Ds, delta + ((size_t)b * NH + h) * T_, q0, BK, T_, 1.0f);
    cu_cp_commit<ARCH>();

    uint32_t qf[1][H::KS][4], dof[1][H::KS][4]; /* one 16-row tile a warp (the products' MT = 1) */
    float dq[1][H::DT][4];
#pragma unroll
    for (int dt = 0; dt < H::DT; dt++)
        dq[0][dt][0] = dq[0][dt][1] = dq[0][dt][2] = dq[0][dt][3] = 0.0f;
    const int row[2] = {wq + g, wq + g + 8};
    float lr[2] = {0.0f, 0.0f}, dr[2] = {0.0f, 0.0f};
    for (int j = 0; j < n_k; j++) {
        const int st = ST == 2 ? j & 1 : 0, kv0 = (j0 + j) * BI;
        T *Kt = Ks + st * BI * H::LDH, *Vt = Vs + st * BI * H::LDH;
        if constexpr (ST == 2) {
            if (j + 1 < n_k) {
                load_rows<T, HSP, BI, THREADS, ARCH>(Ks + (st ^ 1) * BI * H::LDH, base + C, stride, kv0 + BI, T_, HS,
                                                     vec);
                load_rows<T, HSP, BI, THREADS, ARCH>(Vs + (st ^ 1) * BI * H::LDH, base + 2 * C, stride, kv0 + BI,
                                                     T_, HS, vec);
                cu_cp_commit<ARCH>();
                cu_cp_wait<ARCH, 1>();
            } else {
                cu_cp_wait<ARCH, 0>();
            }
        } else if (j > 0) {
            load_rows<T, HSP, BI, THREADS, ARCH>(Kt, base + C, stride, kv0, T_, HS, vec);
            load_rows<T, HSP, BI, THREADS, ARCH>(Vt, base + 2 * C, stride, kv0, T_, HS, vec);
        }
        __syncthreads();
        if (j == 0) {
            load_a<HSP>(qf[0], Qs, warp * 16);
            load_a<HSP>(dof[0], dOs, warp * 16);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                lr[r] = Ls[warp * 16 + g + 8 * r];
                dr[r] = Ds[warp * 16 + g + 8 * r];
            }
        }
        if (kv0 <= wq + 15 && kv0 + BI > wlo) {
            float s[1][2 * NP][4], dp[1][2 * NP][4];
#pragma unroll
            for (int n = 0; n < 2 * NP; n++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    s[0][n][i] = dp[0][n][i] = 0.0f;
            mm_abt<T, HSP, NP, 1, ARCH>(s, qf, Kt, 0);
            mm_abt<T, HSP, NP, 1, ARCH>(dp, dof, Vt, 0); /* dP = dO V^T */
            const bool edge = kv0 + BI - 1 > wq || kv0 + BI > T_ || kv0 < max(lo[0], lo[1]);
#pragma unroll
            for (int n = 0; n < 2 * NP; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int key = kv0 + n * 8 + 2 * t + (i & 1);
                    float p = exp2f(s[0][n][i] * scale_log2 - lr[i / 2]);
                    if (edge && (key > row[i / 2] || key >= T_ || key < lo[i / 2]))
                        p = 0.0f;
                    s[0][n][i] = p * (dp[0][n][i] - dr[i / 2]); /* dS */
                }
            mm_pv<T, HSP, NP, 1, ARCH>(dq, s, Kt, 0);
        }
        __syncthreads();
    }
    store_rows<T, HSP>(dqkv + (size_t)b * T_ * stride + (size_t)h * HS, stride, dq[0], scale,
                       Qs + warp * 16 * H::LDH, wq, T_, HS, vec, true);
}

/* occupancy floor: 4 warps/SM from sm_80: `attention_dq_kernel<__nv_bfloat16, \d+, 80>` (as the dK/dV kernel's) */
template <typename T, int HSP, int ARCH>
__global__ void __launch_bounds__(128)
    attention_dq_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *delta, int T_, int C,
                        int NH, float scale, bool vec, const int32_t *pos)
{
    if constexpr (runs_here<ARCH>())
        dq_body<T, HSP, ARCH>(dqkv, dout, qkv, lse, delta, T_, C, NH, scale, vec, pos);
    else
        __trap();
}

/* ---- launches ---- */

struct attn_args {
    cudaStream_t s;
    const int32_t *pos; /* positions [B T], or NULL */
    int B, T, C, NH, HS, HSP;
    float scale;
    bool vec;
    int arch;  /* 80 or 75: the kernels' instruction set for this card */
    int limit; /* shared memory a block may opt into */
};

/* The card's instruction set and shared memory; f16 only on Turing, none
 * of these kernels before it. */
ferry_status card_of(const char *op, ferry_dtype act, attn_args *a)
{
    int device = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&a->limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const int cc = major * 10 + minor;
    a->arch = cc >= 80 ? 80 : 75;
    if (cc < 75 || (cc < 80 && act != FERRY_DTYPE_F16))
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "%s: the mma.sync kernels need sm_75 storing f16 or sm_80 and newer; this card is sm_%d "
                       "storing %s (its attention is attention_wmma.cu's)",
                       op, cc, dtype_name(act));
    return FERRY_OK;
}

ferry_status make_args(const char *op, void *stream, ferry_dtype act, int B, int T, int C, int NH, attn_args *a)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
               "%s: need positive sizes with C a multiple of NH; got B=%d T=%d C=%d NH=%d", op, B, T, C, NH);
    CU_REQUIRE(B <= 65535 && NH <= 65535, "%s: B=%d or NH=%d exceeds 65535", op, B, NH);
    a->s = cu_stream(stream);
    a->B = B;
    a->T = T;
    a->C = C;
    a->NH = NH;
    a->HS = C / NH;
    if (a->HS > 128)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "%s: head size %d (C=%d / NH=%d) is above the 128 the cuda attention supports; use more heads",
                       op, a->HS, C, NH);
    a->HSP = a->HS <= 32 ? 32 : a->HS <= 64 ? 64 : 128;
    a->scale = 1.0f / sqrtf((float)a->HS);
    a->vec = a->HS % 8 == 0 && C % 8 == 0;
    return card_of(op, act, a);
}

template <int HSP, int ARCH> size_t forward_need(int bq)
{
    return bq == 128 ? forward_smem<HSP, 128, ARCH>() : forward_smem<HSP, 64, ARCH>();
}

size_t forward_bytes(const attn_args &a, int bq)
{
    if (a.arch >= 80)
        return a.HSP == 32 ? forward_need<32, 80>(bq) : a.HSP == 64 ? forward_need<64, 80>(bq)
                                                                    : forward_need<128, 80>(bq);
    return a.HSP == 32 ? forward_need<32, 75>(bq) : a.HSP == 64 ? forward_need<64, 75>(bq) : forward_need<128, 75>(bq);
}

size_t backward_bytes(const attn_args &a)
{
    if (a.arch >= 80)
        return a.HSP == 32 ? backward_smem<32, 80>() : a.HSP == 64 ? backward_smem<64, 80>() : backward_smem<128, 80>();
    return a.HSP == 32 ? backward_smem<32, 75>() : a.HSP == 64 ? backward_smem<64, 75>() : backward_smem<128, 75>();
}

/* Queries per forward block: `asked` (64 or 128) if given, else 128 where
 * it fits; a size that does not fit is FERRY_ERR_UNSUPPORTED naming both. */
ferry_status choose_bq(const attn_args &a, int asked, int *bq)
{
    CU_REQUIRE(asked == 0 || asked == 64 || asked == 128,
               "attention_forward: %d queries per block; use 0 (chosen for the card), 64 or 128", asked);
    const int options[2] = {128, 64};
    for (int option : options) {
        if (asked && option != asked)
            continue;
        if (forward_bytes(a, option) <= (size_t)a.limit) {
            *bq = option;
            return FERRY_OK;
        }
    }
    const int tried = asked ? asked : 64;
    return err_set(FERRY_ERR_UNSUPPORTED,
                   "attention_forward: head size %d with %d-query blocks needs %zu bytes of shared memory per "
                   "block, this GPU allows %d%s",
                   a.HS, tried, forward_bytes(a, tried), a.limit, asked == 128 ? "; let the size be chosen (0)" : "");
}

template <typename T, int HSP, int BQ, int ARCH>
ferry_status launch_forward(const attn_args &a, T *out, float *lse, const T *qkv)
{
    const size_t smem = forward_smem<HSP, BQ, ARCH>();
    ferry_status st = cu_allow_smem(reinterpret_cast<const void *>(attention_fwd_kernel<T, HSP, BQ, ARCH>), smem);
    if (st != FERRY_OK)
        return st;
    dim3 grid((a.T + BQ - 1) / BQ, a.NH, a.B);
    attention_fwd_kernel<T, HSP, BQ, ARCH><<<grid, fwd_threads<HSP, BQ>(), smem, a.s>>>(out, lse, qkv, a.T, a.C,
                                                                                         a.NH, a.scale * LOG2E,
                                                                                         a.vec, a.pos);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

template <typename T, int HSP, int ARCH>
ferry_status launch_backward(const attn_args &a, T *dqkv, const T *dout, const T *qkv, const float *lse,
                             const float *delta)
{
    const size_t smem = backward_smem<HSP, ARCH>();
    ferry_status st = cu_allow_smem(reinterpret_cast<const void *>(attention_dkv_kernel<T, HSP, ARCH>), smem);
    if (st == FERRY_OK)
        st = cu_allow_smem(reinterpret_cast<const void *>(attention_dq_kernel<T, HSP, ARCH>), smem);
    if (st != FERRY_OK)
        return st;
    dim3 grid((a.T + BK - 1) / BK, a.NH, a.B);
    attention_dkv_kernel<T, HSP, ARCH><<<grid, 128, smem, a.s>>>(dqkv, dout, qkv, lse, delta, a.T, a.C, a.NH,
                                                                 a.scale, a.vec, a.pos);
    CUDA_CHECK_LAUNCH();
    attention_dq_kernel<T, HSP, ARCH><<<grid, 128, smem, a.s>>>(dqkv, dout, qkv, lse, delta, a.T, a.C, a.NH,
                                                                a.scale, a.vec, a.pos);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

/* Calls f(std::integral_constant<int, HSP>, std::integral_constant<int, ARCH>)
 * for the arguments' head padding and instruction set; ARCH 75 with T
 * storing f16 only (card_of refused the rest). */
template <typename T, typename F> ferry_status with_shape(const attn_args &a, F &&f)
{
    using I32 = std::integral_constant<int, 32>;
    using I64 = std::integral_constant<int, 64>;
    using I128 = std::integral_constant<int, 128>;
    if constexpr (std::is_same<T, f16>::value) {
        if (a.arch < 80) {
            using A = std::integral_constant<int, 75>;
            return a.HSP == 32 ? f(I32(), A()) : a.HSP == 64 ? f(I64(), A()) : f(I128(), A());
        }
    }
    using A = std::integral_constant<int, 80>;
    return a.HSP == 32 ? f(I32(), A()) : a.HSP == 64 ? f(I64(), A()) : f(I128(), A());
}

} // namespace

extern "C" ferry_status cudaop_attention_delta(void *stream, ferry_dtype act, float *delta, const act_t *dout,
                                               const act_t *out, int B, int T, int C, int NH)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0,
               "attention delta: need positive sizes with C a multiple of NH; got B=%d T=%d C=%d NH=%d", B, T, C, NH);
    const size_t threads = (size_t)B * T * NH * 32;
    CU_REQUIRE(threads / 256 < (1u << 31), "attention delta: B*T*NH = %zu rows is too many for one grid",
               threads / 32);
    return cu_with_type(act, "attention_backward", [&](auto tag) {
        using E = decltype(tag);
        attention_delta_kernel<E><<<(unsigned)((threads + 255) / 256), 256, 0, cu_stream(stream)>>>(
            delta, static_cast<const E *>(dout), static_cast<const E *>(out), B, T, C, NH);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_attention_forward_mma(void *stream, ferry_dtype act, int bq, act_t *out, float *lse,
                                                     const act_t *qkv, int B, int T, int C, int NH,
                                                     const int32_t *pos)
{
    attn_args a = {}; /* make_args fills it, or fails */
    ferry_status st = make_args("attention_forward", stream, act, B, T, C, NH, &a);
    a.pos = pos;
    int q = 0;
    if (st == FERRY_OK)
        st = choose_bq(a, bq, &q);
    if (st != FERRY_OK)
        return st;
    a.vec = a.vec && cu_aligned16(qkv, out);
    return cu_with_type(act, "attention_forward", [&](auto tag) {
        using E = decltype(tag);
        E *o = static_cast<E *>(out);
        const E *x = static_cast<const E *>(qkv);
        return with_shape<E>(a, [&](auto hsp, auto arch) {
            constexpr int HSP = decltype(hsp)::value, ARCH = decltype(arch)::value;
            return q == 128 ? launch_forward<E, HSP, 128, ARCH>(a, o, lse, x)
                            : launch_forward<E, HSP, 64, ARCH>(a, o, lse, x);
        });
    });
}

extern "C" ferry_status cudaop_attention_backward_mma(void *stream, ferry_dtype act, act_t *dqkv, const act_t *dout,
                                                      const act_t *qkv, const act_t *out, const float *lse,
                                                      float *delta, int B, int T, int C, int NH, const int32_t *pos)
{
    attn_args a = {}; /* make_args fills it, or fails */
    ferry_status st = make_args("attention_backward", stream, act, B, T, C, NH, &a);
    a.pos = pos;
    if (st == FERRY_OK && backward_bytes(a) > (size_t)a.limit)
        st = err_set(FERRY_ERR_UNSUPPORTED,
                     "attention_backward: head size %d needs %zu bytes of shared memory per block, this GPU "
                     "allows %d",
                     a.HS, backward_bytes(a), a.limit);
    if (st == FERRY_OK)
        st = cudaop_attention_delta(stream, act, delta, dout, out, B, T, C, NH);
    if (st != FERRY_OK)
        return st;
    a.vec = a.vec && cu_aligned16(qkv, dout, dqkv);
    return cu_with_type(act, "attention_backward", [&](auto tag) {
        using E = decltype(tag);
        E *dx = static_cast<E *>(dqkv);
        const E *dy = static_cast<const E *>(dout), *x = static_cast<const E *>(qkv);
        return with_shape<E>(a, [&](auto hsp, auto arch) {
            constexpr int HSP = decltype(hsp)::value, ARCH = decltype(arch)::value;
            return launch_backward<E, HSP, ARCH>(a, dx, dy, x, lse, delta);
        });
    });
}

/* The card's architecture: the mma.sync kernels from Turing on, WMMA on Volta. */
static bool has_mma(ferry_dtype act)
{
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        cudaGetLastError(); /* the mma entry points ask again and say what failed */
        return true;
    }
    const int cc = major * 10 + minor;
    return cc >= 80 || (cc >= 75 && act == FERRY_DTYPE_F16);
}

extern "C" ferry_status cudaop_attention_forward(void *stream, ferry_dtype act, act_t *out, float *lse,
                                                 const act_t *qkv, int B, int T, int C, int NH, const int32_t *pos)
{
    if (has_mma(act))
        return cudaop_attention_forward_mma(stream, act, 0, out, lse, qkv, B, T, C, NH, pos);
    return cudaop_attention_forward_wmma(stream, act, 0, out, lse, qkv, B, T, C, NH, pos);
}

extern "C" ferry_status cudaop_attention_backward(void *stream, ferry_dtype act, act_t *dqkv, const act_t *dout,
                                                  const act_t *qkv, const act_t *out, const float *lse, float *delta,
                                                  int B, int T, int C, int NH, const int32_t *pos)
{
    if (has_mma(act))
        return cudaop_attention_backward_mma(stream, act, dqkv, dout, qkv, out, lse, delta, B, T, C, NH, pos);
    return cudaop_attention_backward_wmma(stream, act, 0, dqkv, dout, qkv, out, lse, delta, B, T, C, NH, pos);
}
