/* Generation's cache ops on cuda (backend/ops/op_list.h says what each
 * computes), in either storage type (bf16 or f16), fp32 math, one rounding
 * at each store. Host version: attention_decode.c.
 *   kv_append(_rope): a thread per (token, head of the fused projection,
 *     element; with rope a pair (i, i + HS/2)): a query head into q, a key
 *     or value head into its cache slot at pos0 + t. The rotation is
 *     rope.cu's: the fp32 angle pos * inv_freq[i], the accurate sincosf
 *     (its 32-byte frame for angles past 105615, as rope.cu says).
 *   attention_decode: a block of 256 threads per (batch row, new token,
 *     query head), reading key/value head h / (NH / NKV) of the cache as it
 *     is. Keys go by tiles of 256, a thread a key: its score q . k / sqrt(HS)
 *     into shared memory, the tile's maximum and sum by a tree in shared
 *     memory, the running maximum and sum rescaled (online softmax); thread
 *     d < HS (HS <= 256) keeps output element d, adding the tile's weights
 *     times value column d (a coalesced row of the tile's values per key).
 *     One block per query row: generation's rows are few and its keys many,
 *     and the keys past the new token's position are never read. */
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr int DEC_THREADS = 256;

template <typename T, bool ROPE>
__global__ void kv_append_kernel(T *q, T *kc, T *vc, const T *qkv, const float *inv_freq, int pos0, size_t rows,
                                 int Tq, int NH, int NKV, int HS, int Tmax)
{
    const int heads = NH + 2 * NKV, half = HS / 2, per_head = ROPE ? half : HS;
    const size_t row = (size_t)heads * HS, total = rows * heads * per_head;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const size_t rest = idx / per_head, n = rest / heads;
        const int i = (int)(idx - rest * per_head), head = (int)(rest - n * heads);
        const int b = (int)(n / Tq), t = (int)(n - (size_t)b * Tq), pos = pos0 + t;
        const T *x = qkv + n * row + (size_t)head * HS;
        T *o;
        if (head < NH) {
            o = q + n * NH * HS + (size_t)head * HS;
        } else {
            const int j = head < NH + NKV ? head - NH : head - NH - NKV;
            T *cache = head < NH + NKV ? kc : vc;
            o = cache + (((size_t)b * NKV + j) * Tmax + pos) * HS;
        }
        if (!ROPE) {
            o[i] = x[i];
            continue;
        }
        const float lo = cu_f32(x[i]), hi = cu_f32(x[i + half]);
        if (head >= NH + NKV) { /* a value head: copied */
            o[i] = cu_round<T>(lo);
            o[i + half] = cu_round<T>(hi);
            continue;
        }
        const float a = (float)pos * inv_freq[i];
        float sn, cs;
        sincosf(a, &sn, &cs);
        o[i] = cu_round<T>(lo * cs - hi * sn);
        o[i + half] = cu_round<T>(hi * cs + lo * sn);
    }
}

/* The maximum (max) or the sum of v over the block; every thread gets it. */
template <bool MAX>
__device__ float block_reduce(float v, float *red)
{
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int w = DEC_THREADS / 2; w > 0; w /= 2) {
        if (tid < w)
            red[tid] = MAX ? fmaxf(red[tid], red[tid + w]) : red[tid] + red[tid + w];
        __syncthreads();
    }
    const float r = red[0];
    __syncthreads();
    return r;
}

template <typename T>
__global__ void __launch_bounds__(DEC_THREADS) attention_decode_kernel(T *out, const T *q, const T *kc, const T *vc,
                                                                       int pos0, int Tq, int NH, int NKV, int HS,
                                                                       int Tmax)
{
    __shared__ float qs[DEC_THREADS], w[DEC_THREADS], red[DEC_THREADS];
    const int tid = threadIdx.x, h = blockIdx.x % NH;
    const size_t n = blockIdx.x / NH;
    const int b = (int)(n / Tq), t = (int)(n - (size_t)b * Tq), p = pos0 + t;
    const size_t head = (size_t)b * NKV + (size_t)(h / (NH / NKV));
    const T *K = kc + head * Tmax * HS, *V = vc + head * Tmax * HS;
    const T *qrow = q + n * NH * HS + (size_t)h * HS;
    if (tid < HS)
        qs[tid] = cu_f32(qrow[tid]);
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)HS);
    float m = -INFINITY, l = 0.0f, acc = 0.0f;
    for (int j0 = 0; j0 <= p; j0 += DEC_THREADS) {
        const int j = j0 + tid, keys = min(DEC_THREADS, p + 1 - j0);
        float s = -INFINITY;
        if (tid < keys) {
            const T *k = K + (size_t)j * HS;
            float dot = 0.0f;
            for (int i = 0; i < HS; i++)
                dot += qs[i] * cu_f32(k[i]);
            s = dot * scale;
        }
        const float mt = block_reduce<true>(s, red), mn = fmaxf(m, mt), corr = expf(m - mn);
        const float e = tid < keys ? expf(s - mn) : 0.0f;
        w[tid] = e;
        const float st = block_reduce<false>(e, red); /* its barriers also publish w */
        l = l * corr + st;
        if (tid < HS) {
            float sum = 0.0f;
            for (int jj = 0; jj < keys; jj++)
                sum += w[jj] * cu_f32(V[(size_t)(j0 + jj) * HS + tid]);
            acc = acc * corr + sum;
        }
        m = mn;
        __syncthreads(); /* w is rewritten by the next tile */
    }
    if (tid < HS)
        out[n * NH * HS + (size_t)h * HS + tid] = cu_round<T>(acc / l);
}

ferry_status check_kv(const char *op, int pos0, int B, int Tq, int NH, int NKV, int HS, int Tmax, bool rope)
{
    CU_REQUIRE(B > 0 && Tq > 0 && NH > 0 && NKV > 0 && HS > 0 && Tmax > 0,
               "%s: sizes must be positive, got B=%d Tq=%d NH=%d NKV=%d HS=%d Tmax=%d", op, B, Tq, NH, NKV, HS, Tmax);
    CU_REQUIRE(NH % NKV == 0 && HS <= DEC_THREADS && (!rope || HS % 2 == 0),
               "%s: NH=%d must be a multiple of NKV=%d, HS=%d at most %d%s", op, NH, NKV, HS, DEC_THREADS,
               rope ? " and even" : "");
    CU_REQUIRE(pos0 >= 0 && pos0 <= Tmax - Tq, "%s: positions %d.. of %d tokens do not fit Tmax=%d", op, pos0, Tq,
               Tmax);
    return FERRY_OK;
}

template <bool ROPE>
ferry_status launch_append(const char *op, void *stream, ferry_dtype act, act_t *q, act_t *kcache, act_t *vcache,
                           const act_t *qkv, const float *inv_freq, int pos0, int B, int Tq, int NH, int NKV, int HS,
                           int Tmax)
{
    ferry_status st = check_kv(op, pos0, B, Tq, NH, NKV, HS, Tmax, ROPE);
    if (st != FERRY_OK)
        return st;
    const size_t rows = (size_t)B * Tq, work = rows * (NH + 2 * NKV) * (ROPE ? HS / 2 : HS);
    const unsigned blocks = cu_blocks(work, 256, CU_GRID_STRIDE_BLOCKS);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, op, [&](auto tag) {
        using E = decltype(tag);
        kv_append_kernel<E, ROPE><<<blocks, 256, 0, s>>>(static_cast<E *>(q), static_cast<E *>(kcache),
                                                         static_cast<E *>(vcache), static_cast<const E *>(qkv),
                                                         inv_freq, pos0, rows, Tq, NH, NKV, HS, Tmax);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

} // namespace

extern "C" ferry_status cudaop_kv_append(void *stream, ferry_dtype act, act_t *q, act_t *kcache, act_t *vcache,
                                         const act_t *qkv, int pos0, int B, int Tq, int NH, int NKV, int HS, int Tmax)
{
    return launch_append<false>("kv_append", stream, act, q, kcache, vcache, qkv, nullptr, pos0, B, Tq, NH, NKV, HS,
                                Tmax);
}

extern "C" ferry_status cudaop_kv_append_rope(void *stream, ferry_dtype act, act_t *q, act_t *kcache, act_t *vcache,
                                              const act_t *qkv, const float *inv_freq, int pos0, int B, int Tq, int NH,
                                              int NKV, int HS, int Tmax)
{
    return launch_append<true>("kv_append_rope", stream, act, q, kcache, vcache, qkv, inv_freq, pos0, B, Tq, NH, NKV,
                               HS, Tmax);
}

extern "C" ferry_status cudaop_attention_decode(void *stream, ferry_dtype act, act_t *out, const act_t *q,
                                                const act_t *kcache, const act_t *vcache, int pos0, int B, int Tq,
                                                int NH, int NKV, int HS, int Tmax)
{
    ferry_status st = check_kv("attention_decode", pos0, B, Tq, NH, NKV, HS, Tmax, false);
    if (st != FERRY_OK)
        return st;
    const size_t blocks = (size_t)B * Tq * NH;
    CU_REQUIRE(blocks <= 0x7fffffffu, "attention_decode: %zu query rows is more than one grid holds", blocks);
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "attention_decode", [&](auto tag) {
        using E = decltype(tag);
        attention_decode_kernel<E><<<(unsigned)blocks, DEC_THREADS, 0, s>>>(
            static_cast<E *>(out), static_cast<const E *>(q), static_cast<const E *>(kcache),
            static_cast<const E *>(vcache), pos0, Tq, NH, NKV, HS, Tmax);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}
