/* Kernel lab: a variant of the fused classifier (backend/ops/classifier.cu),
 * checked and timed by dev/kernels/classifier.c.
 *   1: the production classifier adds each chunk's share of dwte into its
 *      fp32 accumulator with its own product (beta = 1), so the whole Vp x C
 *      accumulator (322 MB at GPT-2 XL) is read and written once per chunk
 *      (25 times at N = 8192, chunk 333); this variant keeps the logits'
 *      gradients of `group` chunks in scratch and adds them with one product
 *      of K = group x chunk rows, reading the accumulator `group` times less
 *      often for `group` times the logits scratch. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "dev/kernels/lab.h"
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr int CLS_THREADS = 512;

/* The production softmax cross-entropy (classifier.cu), less the count of
 * targets >= V (they are ignored here as there). */
__global__ void __launch_bounds__(CLS_THREADS)
    xent1_kernel(bf16 *logits, float *losses, const int32_t *targets, float grad_scale, int V, int Vp)
{
    __shared__ float red[32];
    const int r = blockIdx.x, tid = threadIdx.x;
    bf16 *row = logits + (size_t)r * Vp;
    int target = targets[r];
    if (target >= V)
        target = -1;
    float m = -INFINITY, s = 0.0f;
    for (int j = tid; j < V; j += CLS_THREADS) {
        const float x = __bfloat162float(row[j]);
        if (x > m) {
            s = s * __expf(m - x) + 1.0f;
            m = x;
        } else {
            s += __expf(x - m);
        }
    }
    const float row_max = cu_block_max(m, red);
    const float scaled = m == -INFINITY ? 0.0f : s * __expf(m - row_max);
    const float lse = row_max + logf(cu_block_sum(scaled, red));
    if (tid == 0)
        losses[r] = target < 0 ? 0.0f : lse - __bfloat162float(row[target]);
    __syncthreads();
    for (int j = tid; j < Vp; j += CLS_THREADS) {
        float d = 0.0f;
        if (target >= 0 && j < V)
            d = grad_scale * (__expf(__bfloat162float(row[j]) - lse) - (j == target ? 1.0f : 0.0f));
        row[j] = __float2bfloat16_rn(d);
    }
}

size_t accumulator_offset(int chunk, int group, int Vp) { return ((size_t)chunk * group * Vp * 2 + 255) / 256 * 256; }

} // namespace

extern "C" size_t lab_classifier1_scratch_bytes(int chunk, int group, int Vp, int C)
{
    return accumulator_offset(chunk, group, Vp) + (size_t)Vp * C * sizeof(float);
}

extern "C" ferry_status lab_classifier1(void *stream, float *losses, void *dinp, void *dwte, const void *inp,
                                        const void *wte, const int32_t *targets, float grad_scale, int N, int C,
                                        int V, int Vp, void *scratch, int chunk, int group)
{
    CU_REQUIRE(N > 0 && C > 0 && V > 0 && Vp >= V && chunk > 0 && group > 0,
               "classifier variant 1: need N, C, V, chunk, group > 0 and Vp >= V");
    cudaStream_t s = cu_stream(stream);
    const bf16 *x = static_cast<const bf16 *>(inp), *w = static_cast<const bf16 *>(wte);
    bf16 *logits = static_cast<bf16 *>(scratch);
    float *acc = reinterpret_cast<float *>(static_cast<char *>(scratch) + accumulator_offset(chunk, group, Vp));
    CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)Vp * C * sizeof(float), s));
    const int span = chunk * group;
    for (int g0 = 0; g0 < N; g0 += span) {
        const int grows = N - g0 < span ? N - g0 : span;
        for (int r0 = g0; r0 < g0 + grows; r0 += chunk) {
            const int rows = g0 + grows - r0 < chunk ? g0 + grows - r0 : chunk;
            bf16 *lc = logits + (size_t)(r0 - g0) * Vp;
            const bf16 *xc = x + (size_t)r0 * C;
            ferry_status st = cuda_gemm(s, FERRY_DTYPE_BF16, true, false, Vp, rows, C, w, C, xc, C, lc, Vp, 0.0f, nullptr);
            if (st != FERRY_OK)
                return st;
            xent1_kernel<<<rows, CLS_THREADS, 0, s>>>(lc, losses + r0, targets + r0, grad_scale, V, Vp);
            CUDA_CHECK_LAUNCH();
            st = cuda_gemm(s, FERRY_DTYPE_BF16, false, false, C, rows, Vp, w, C, lc, Vp, static_cast<bf16 *>(dinp) + (size_t)r0 * C, C,
                           1.0f, nullptr);
            if (st != FERRY_OK)
                return st;
        }
        /* acc^T (C x Vp) += (inp rows of the group, C x grows) @ (their dlogits, Vp x grows)^T */
        ferry_status st = cuda_gemm_f32(s, FERRY_DTYPE_BF16, false, true, C, Vp, grows, x + (size_t)g0 * C, C, logits,
                                        Vp, acc, C, 1.0f);
        if (st != FERRY_OK)
            return st;
    }
    return cuda_add_f32_to(s, FERRY_DTYPE_BF16, dwte, acc, (size_t)Vp * C);
}
