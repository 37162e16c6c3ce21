/* Rotary position embedding on cuda (Hugging Face's convention: the two
 * halves of each head rotated), in either storage type (bf16 or f16), with
 * the grouped key/value heads laid out per query head for attention; fp32
 * math, one rounding at the store. Host version: rope.c.
 *
 * Angles are pos * inv_freq[i] in fp32 and their sine and cosine the
 * accurate sincosf (not __sincosf, whose error grows with the angle, which
 * here reaches the sequence length). A thread owns PER pairs (i, i + HS/2)
 * of a head: 8, as two 16-byte accesses, when HS/2 is a multiple of 8 and
 * the tensors are aligned; 1 otherwise.
 *   forward: a thread per (token, query head h, pairs): rotates query head
 *     h and key head h / (NH / NKV), copies value head h / (NH / NKV), one
 *     sincosf per pair for all three;
 *   backward: a thread per (token, head of dinp, pairs): a query head adds
 *     the inverse rotation of its gradient; a key (value) head adds those
 *     (the gradients) of the NH / NKV query heads sharing it in ascending
 *     order, each thread summing its own elements, so no atomics.
 *
 * Both kernels have a 32-byte stack frame, sincosf's: its slow path, the
 * Payne-Hanek reduction of angles above 105615 (positions past 105615 at
 * inv_freq 1), keeps its array of the angle's bits times 2/pi there;
 * smaller angles never touch it (with __sincosf the frame is gone). It is
 * the one frame on the training step's path that
 * tools/build/kernel_resources.py allows. */
#include "backend/ops/cuda_util.cuh"

namespace {

/* PER values at p and at p + half, into lo and hi. */
template <int PER, typename T>
__device__ __forceinline__ void load_pair(float *lo, float *hi, const T *p, int half)
{
    if (PER == 8) {
        cu_load8(lo, p);
        cu_load8(hi, p + half);
    } else {
        lo[0] = cu_f32(p[0]);
        hi[0] = cu_f32(p[half]);
    }
}

template <int PER, typename T>
__device__ __forceinline__ void store_pair(T *p, const float *lo, const float *hi, int half)
{
    if (PER == 8) {
        cu_store8(p, lo);
        cu_store8(p + half, hi);
    } else {
        p[0] = cu_round<T>(lo[0]);
        p[half] = cu_round<T>(hi[0]);
    }
}

/* cos and sin of pos * inv_freq[i + j], j < PER; the backward's inverse
 * rotation negates the sine. */
template <int PER>
__device__ __forceinline__ void angles(float *c, float *s, const float *inv_freq, int i, int32_t pos, bool inverse)
{
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const float a = (float)pos * inv_freq[i + j];
        float sn, cs;
        sincosf(a, &sn, &cs);
        c[j] = cs;
        s[j] = inverse ? -sn : sn;
    }
}

/* (lo, hi) rotated: lo c - hi s, hi c + lo s; added to (alo, ahi) when
 * `add`, else written there. */
template <int PER>
__device__ __forceinline__ void rotate(float *alo, float *ahi, const float *lo, const float *hi, const float *c,
                                       const float *s, bool add)
{
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const float l = lo[j] * c[j] - hi[j] * s[j], h = hi[j] * c[j] + lo[j] * s[j];
        alo[j] = add ? alo[j] + l : l;
        ahi[j] = add ? ahi[j] + h : h;
    }
}

/* occupancy floor: 32 warps/SM: `rope_forward_kernel<.*>` (memory-bound; the
 * launch bounds hold Volta's 8-wide variant to 64 registers, 76 unbounded) */
template <typename T, int PER>
__global__ void __launch_bounds__(256, 4)
    rope_forward_kernel(T *out, const T *inp, const float *inv_freq, const int32_t *pos, size_t BT, int NH, int NKV,
                        int HS)
{
    const int half = HS / 2, groups = half / PER, group = NH / NKV;
    const size_t C = (size_t)NH * HS, in_row = (size_t)(NH + 2 * NKV) * HS, out_row = 3 * C;
    const size_t total = BT * NH * groups, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t rest = idx / groups, n = rest / NH;
        const int i = (int)(idx - rest * groups) * PER, h = (int)(rest - n * NH);
        const size_t kv = (size_t)(h / group) * HS;
        const T *x = inp + n * in_row;
        T *o = out + n * out_row;
        float c[8], s[8], lo[8], hi[8], rlo[8], rhi[8];
        angles<PER>(c, s, inv_freq, i, pos[n], false);
        load_pair<PER>(lo, hi, x + (size_t)h * HS + i, half);
        rotate<PER>(rlo, rhi, lo, hi, c, s, false);
        store_pair<PER>(o + (size_t)h * HS + i, rlo, rhi, half);
        load_pair<PER>(lo, hi, x + C + kv + i, half);
        rotate<PER>(rlo, rhi, lo, hi, c, s, false);
        store_pair<PER>(o + C + (size_t)h * HS + i, rlo, rhi, half);
        load_pair<PER>(lo, hi, x + C + (size_t)NKV * HS + kv + i, half);
        store_pair<PER>(o + 2 * C + (size_t)h * HS + i, lo, hi, half);
    }
}

/* occupancy floor: 24 warps/SM: `rope_backward_kernel<.*>`
 * (the 8-wide variant sums a shared head's query heads in 72 registers; the
 * launch bounds hold Volta's to 85, 92 unbounded) */
template <typename T, int PER>
__global__ void __launch_bounds__(256, 3)
    rope_backward_kernel(T *dinp, const T *dout, const float *inv_freq, const int32_t *pos, size_t BT, int NH, int NKV,
                         int HS)
{
    const int half = HS / 2, groups = half / PER, group = NH / NKV, heads = NH + 2 * NKV;
    const size_t C = (size_t)NH * HS, in_row = (size_t)heads * HS, out_row = 3 * C;
    const size_t total = BT * heads * groups, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t rest = idx / groups, n = rest / heads;
        const int i = (int)(idx - rest * groups) * PER, head = (int)(rest - n * heads);
        T *dx = dinp + n * in_row + (size_t)head * HS + i;
        const T *d = dout + n * out_row + i;
        float acc_lo[8], acc_hi[8], lo[8], hi[8];
        load_pair<PER>(acc_lo, acc_hi, dx, half);
        if (head < NH + NKV) {
            float c[8], s[8];
            angles<PER>(c, s, inv_freq, i, pos[n], true);
            /* a query head: its own gradient; a key head: its group's, in order */
            const int first = head < NH ? head : (head - NH) * group, count = head < NH ? 1 : group;
            const size_t base = head < NH ? 0 : C;
            for (int j = 0; j < count; j++) {
                load_pair<PER>(lo, hi, d + base + (size_t)(first + j) * HS, half);
                rotate<PER>(acc_lo, acc_hi, lo, hi, c, s, true);
            }
        } else {
            const int first = (head - NH - NKV) * group;
            for (int j = 0; j < group; j++) {
                load_pair<PER>(lo, hi, d + 2 * C + (size_t)(first + j) * HS, half);
#pragma unroll
                for (int k = 0; k < PER; k++) {
                    acc_lo[k] += lo[k];
                    acc_hi[k] += hi[k];
                }
            }
        }
        store_pair<PER>(dx, acc_lo, acc_hi, half);
    }
}

ferry_status check_shape(const char *op, int B, int T, int NH, int NKV, int HS)
{
    CU_REQUIRE(B > 0 && T > 0 && NH > 0 && NKV > 0 && HS > 0,
               "%s: sizes must be positive, got B=%d T=%d NH=%d NKV=%d HS=%d", op, B, T, NH, NKV, HS);
    CU_REQUIRE(NH % NKV == 0 && HS % 2 == 0,
               "%s: NH=%d must be a multiple of NKV=%d and HS=%d even", op, NH, NKV, HS);
    return FERRY_OK;
}

/* 8 pairs a thread when each half of a head is whole 16-byte words. */
bool pairs_vec(int HS, const void *a, const void *b) { return (HS / 2) % 8 == 0 && cu_aligned16(a, b); }

} // namespace

extern "C" ferry_status cudaop_rope_forward(void *stream, ferry_dtype act, act_t *out, const act_t *inp,
                                            const float *inv_freq, const int32_t *pos, int B, int T, int NH,
                                            int NKV, int HS)
{
    ferry_status st = check_shape("rope_forward", B, T, NH, NKV, HS);
    if (st != FERRY_OK)
        return st;
    const bool vec = pairs_vec(HS, out, inp);
    const size_t BT = (size_t)B * T, work = BT * NH * (HS / 2 / (vec ? 8 : 1));
    const unsigned blocks = cu_blocks(work, 256, CU_GRID_STRIDE_BLOCKS);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "rope_forward", [&](auto tag) {
        using E = decltype(tag);
        E *o = static_cast<E *>(out);
        const E *x = static_cast<const E *>(inp);
        if (vec)
            rope_forward_kernel<E, 8><<<blocks, 256, 0, s>>>(o, x, inv_freq, pos, BT, NH, NKV, HS);
        else
            rope_forward_kernel<E, 1><<<blocks, 256, 0, s>>>(o, x, inv_freq, pos, BT, NH, NKV, HS);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_rope_backward(void *stream, ferry_dtype act, act_t *dinp, const act_t *dout,
                                             const float *inv_freq, const int32_t *pos, int B, int T, int NH,
                                             int NKV, int HS)
{
    ferry_status st = check_shape("rope_backward", B, T, NH, NKV, HS);
    if (st != FERRY_OK)
        return st;
    const bool vec = pairs_vec(HS, dinp, dout);
    const size_t BT = (size_t)B * T, work = BT * (NH + 2 * NKV) * (HS / 2 / (vec ? 8 : 1));
    const unsigned blocks = cu_blocks(work, 256, CU_GRID_STRIDE_BLOCKS);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "rope_backward", [&](auto tag) {
        using E = decltype(tag);
        E *dx = static_cast<E *>(dinp);
        const E *dy = static_cast<const E *>(dout);
        if (vec)
            rope_backward_kernel<E, 8><<<blocks, 256, 0, s>>>(dx, dy, inv_freq, pos, BT, NH, NKV, HS);
        else
            rope_backward_kernel<E, 1><<<blocks, 256, 0, s>>>(dx, dy, inv_freq, pos, BT, NH, NKV, HS);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
