/* Token + position embedding on cuda, in either storage type (bf16 or f16):
 * forward gathers rows of wte and adds those of wpe (wpe NULL: the token
 * embedding alone, as Llama's), the row of each token's position: t, or
 * with positions (packed examples) its place in its example;
 * backward adds dout into dwpe (a sum over the batch, or with positions
 * over every token at that position, in (b, t) order; dwpe NULL: none) and
 * into the dwte rows of the tokens seen, deterministically and without
 * atomics or scratch. Host version: encoder.c.
 *
 * The dwte backward: one block per token position i. The block scans the
 * token list in order; if its token id occurs at an earlier position it
 * leaves (that position's block owns the id), otherwise it sums dout over
 * every position holding the id, in position order, in fp32 shared memory,
 * and adds the sum to dwte once. The scan reads N ids per block (N^2 int
 * reads from L2, 256 MiB at N = 8192), the gradient rows once. */
#include "backend/ops/cuda_util.cuh"

namespace {

/* Negative token ids met by the forward, read as id 0 (see ops_cuda.h). */
__device__ unsigned int g_bad_tokens;

/* The wpe row of token `row` (b T + t): t, or its position clamped into
 * [0, t] (callers check positions before the upload). */
__device__ __forceinline__ int wpe_row(const int32_t *pos, int row, int T)
{
    const int t = row % T;
    if (!pos)
        return t;
    const int p = pos[row];
    return p < 0 ? 0 : p > t ? t : p;
}

/* occupancy floor: 32 warps/SM: `encoder_forward_kernel<.*>` (memory-bound) */
template <typename E>
__global__ void encoder_forward_kernel(E *out, const int32_t *tokens, const E *wte, const E *wpe, int N, int T,
                                       int C, int V, bool vec, const int32_t *pos)
{
    const int per = vec ? 8 : 1;
    const int groups = C / per;
    const size_t total = (size_t)N * groups;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < total; g += stride) {
        const int row = (int)(g / groups), c = (int)(g % groups) * per, t = wpe_row(pos, row, T);
        int tok = tokens[row];
        if (tok < 0 || tok >= V) {
            if (c == 0)
                atomicAdd(&g_bad_tokens, 1u);
            tok = 0;
        }
        const E *w = wte + (size_t)tok * C + c, *p = wpe ? wpe + (size_t)t * C + c : nullptr;
        E *o = out + (size_t)row * C + c;
        if (vec) {
            float a[8], b[8];
            cu_load8(a, w);
            if (p) {
                cu_load8(b, p);
                for (int j = 0; j < 8; j++)
                    a[j] += b[j];
            }
            cu_store8(o, a);
        } else {
            *o = p ? cu_round<E>(cu_f32(*w) + cu_f32(*p)) : *w;
        }
    }
}

/* dwpe[t, c] += sum_b dout[b, t, c], b in order. */
/* occupancy floor: 32 warps/SM: `wpe_backward_kernel<.*>` (memory-bound) */
template <typename E> __global__ void wpe_backward_kernel(E *dwpe, const E *dout, int B, int T, int C)
{
    const size_t tc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tc >= (size_t)T * C)
        return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++)
        sum += cu_f32(dout[(size_t)b * T * C + tc]);
    dwpe[tc] = cu_round<E>(cu_f32(dwpe[tc]) + sum);
}

/* With positions: dwpe[p, c] += the sum of dout[b, t, c] over the tokens
 * at position p, in (b, t) order. A thread per (p, c), a warp's threads on
 * one p (its position reads are one broadcast). The walk along a row jumps
 * over tokens that cannot be at p: from t, at position q, the next token at
 * p is at t + p - q or later when q < p (this example's, or a later one's
 * p-th token, past t + p), and at t + p + 1 or later when q >= p (the next
 * example starts after t); about T / (p + 1) reads a row instead of T. */
template <typename E>
__global__ void wpe_backward_pos_kernel(E *dwpe, const E *dout, const int32_t *pos, int B, int T, int C)
{
    const size_t tc = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tc >= (size_t)T * C)
        return;
    const int p = (int)(tc / C), c = (int)(tc % C);
    float sum = 0.0f;
    for (int b = 0; b < B; b++)
        for (int t = p; t < T;) {
            const int q = wpe_row(pos, b * T + t, T);
            if (q == p)
                sum += cu_f32(dout[((size_t)b * T + t) * C + c]);
            t += q < p ? p - q : p + 1;
        }
    dwpe[tc] = cu_round<E>(cu_f32(dwpe[tc]) + sum);
}

constexpr int WTE_THREADS = 256;
/* wte_backward_kernel's static shared memory: `list` and `warp_count`. */
constexpr size_t WTE_STATIC_SMEM = (WTE_THREADS + WTE_THREADS / 32) * sizeof(int);
/* A block may have 48 KiB of shared memory without the opt-in, static and
 * dynamic together: the accumulator of C floats gets the rest. */
constexpr int WTE_MAX_C = (int)((48 * 1024 - WTE_STATIC_SMEM) / sizeof(float));

/* A token outside [0, V) is read as token 0 by the forward: its gradient goes there. */
__device__ __forceinline__ int clamp_token(int32_t t, int V) { return t < 0 || t >= V ? 0 : t; }

/* Dynamic shared memory: C floats of accumulator. */
template <typename E>
__global__ void __launch_bounds__(WTE_THREADS)
    wte_backward_kernel(E *dwte, const E *dout, const int32_t *tokens, int N, int C, int V)
{
    extern __shared__ float acc[];
    __shared__ int list[WTE_THREADS];
    __shared__ int warp_count[WTE_THREADS / 32];
    const int i = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int tok = clamp_token(tokens[i], V);
    for (int c = tid; c < C; c += WTE_THREADS)
        acc[c] = 0.0f;
    for (int base = 0; base < N; base += WTE_THREADS) {
        const int j = base + tid;
        const bool match = j < N && clamp_token(tokens[j], V) == tok;
        /* An earlier position holds the id: its block owns it. Uniform exit. */
        if (__syncthreads_or(match && j < i))
            return;
        /* Compact this chunk's matches into `list`, in position order. */
        const unsigned mask = __ballot_sync(0xffffffffu, match);
        if (lane == 0)
            warp_count[warp] = __popc(mask);
        __syncthreads();
        int offset = 0, count = 0;
        for (int w = 0; w < WTE_THREADS / 32; w++) {
            offset += w < warp ? warp_count[w] : 0;
            count += warp_count[w];
        }
        if (match)
            list[offset + __popc(mask & ((1u << lane) - 1u))] = j;
        __syncthreads();
        for (int c = tid; c < C; c += WTE_THREADS) {
            float sum = acc[c];
            for (int m = 0; m < count; m++)
                sum += cu_f32(dout[(size_t)list[m] * C + c]);
            acc[c] = sum;
        }
        __syncthreads(); /* list and warp_count are rewritten next chunk */
    }
    E *row = dwte + (size_t)tok * C;
    for (int c = tid; c < C; c += WTE_THREADS)
        row[c] = cu_round<E>(cu_f32(row[c]) + acc[c]);
}

ferry_status check_shape(const char *op, int B, int T, int C)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0, "%s: sizes must be positive, got B=%d T=%d C=%d", op, B,
               T, C);
    CU_REQUIRE(C <= WTE_MAX_C,
               "%s: C=%d channels exceed the %d the cuda encoder backward holds in shared memory "
               "(48 KiB a block, %zu bytes of it static)",
               op, C, WTE_MAX_C, WTE_STATIC_SMEM);
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status cudaop_encoder_forward(void *stream, ferry_dtype act, act_t *out, const int32_t *tokens,
                                               const act_t *wte, const act_t *wpe, int B, int T, int C, int V,
                                               const int32_t *pos)
{
    ferry_status st = check_shape("encoder_forward", B, T, C);
    if (st != FERRY_OK)
        return st;
    const bool vec = C % 8 == 0 && cu_aligned16(out, wte, wpe);
    const size_t work = (size_t)B * T * (vec ? C / 8 : C);
    return cu_with_type(act, "encoder_forward", [&](auto tag) {
        using E = decltype(tag);
        encoder_forward_kernel<E><<<cu_blocks(work, 256, CU_GRID_STRIDE_BLOCKS), 256, 0, cu_stream(stream)>>>(
            static_cast<E *>(out), tokens, static_cast<const E *>(wte), static_cast<const E *>(wpe), B * T, T, C,
            V, vec, pos);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_encoder_backward(void *stream, ferry_dtype act, act_t *dwte, act_t *dwpe,
                                                const act_t *dout, const int32_t *tokens, int B, int T, int C,
                                                int V, const int32_t *pos)
{
    ferry_status st = check_shape("encoder_backward", B, T, C);
    if (st == FERRY_OK && V <= 0)
        st = err_set(FERRY_ERR_INVALID_ARGUMENT, "encoder_backward: V must be positive, got %d", V);
    if (st != FERRY_OK)
        return st;
    cudaStream_t s = cu_stream(stream);
    return cu_with_type(act, "encoder_backward", [&](auto tag) {
        using E = decltype(tag);
        const E *dy = static_cast<const E *>(dout);
        if (dwpe) {
            const size_t tc = (size_t)T * C;
            if (pos)
                wpe_backward_pos_kernel<E><<<(unsigned)((tc + 255) / 256), 256, 0, s>>>(static_cast<E *>(dwpe), dy,
                                                                                    pos, B, T, C);
            else
                wpe_backward_kernel<E><<<(unsigned)((tc + 255) / 256), 256, 0, s>>>(static_cast<E *>(dwpe), dy, B,
                                                                                    T, C);
            CUDA_CHECK_LAUNCH();
        }
        if (dwte) {
            wte_backward_kernel<E><<<B * T, WTE_THREADS, C * sizeof(float), s>>>(static_cast<E *>(dwte), dy,
                                                                                 tokens, B * T, C, V);
            CUDA_CHECK_LAUNCH();
        }
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_encoder_take_bad_tokens(void *stream, uint32_t *count)
{
    unsigned int value = 0;
    const unsigned int zero = 0;
    cudaStream_t s = cu_stream(stream);
    CUDA_CHECK(cudaMemcpyFromSymbolAsync(&value, g_bad_tokens, sizeof value, 0,
                                         cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyToSymbolAsync(g_bad_tokens, &zero, sizeof zero, 0, cudaMemcpyHostToDevice,
                                       s));
    ferry_status st = cu_wait_stream(s);
    if (st != FERRY_OK)
        return st;
    *count = value;
    return FERRY_OK;
}
