/* The fused classifier on cuda: for `chunk` rows at a time, cuBLASLt writes
 * the bf16 logits [rows, Vp] into the caller's scratch; one block per row
 * finds max, log-sum-exp and the loss over the V real columns in fp32 and,
 * when a gradient is wanted, overwrites the logits in place with
 * grad_scale * (softmax - onehot) (0 in the padded columns); then two
 * accumulating cuBLASLt products give dinp and dwte's share, the latter into
 * an fp32 accumulator that is added into the bf16 dwte once at the end (one
 * rounding per call, however many chunks). Host version: classifier.c. */
#include "kernels/cuda_util.cuh"

namespace {

constexpr int CLS_THREADS = 512;

/* Targets >= V met since the last cudaop_classifier_take_bad_targets(). */
__device__ unsigned int g_bad_targets;

__global__ void __launch_bounds__(CLS_THREADS)
    softmax_xent_kernel(bf16 *logits, float *losses, const int32_t *targets, float grad_scale,
                        int V, int Vp, bool want_grad)
{
    __shared__ float red[32];
    const int r = blockIdx.x, tid = threadIdx.x;
    bf16 *row = logits + (size_t)r * Vp;
    int target = targets[r];
    if (target >= V) {
        if (tid == 0)
            atomicAdd(&g_bad_targets, 1u);
        target = -1;
    }
    /* Online max and sum of exp over this thread's columns, then merged. */
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
    if (!want_grad)
        return;
    __syncthreads(); /* row[target] is read above before it is overwritten */
    for (int j = tid; j < Vp; j += CLS_THREADS) {
        float d = 0.0f;
        if (target >= 0 && j < V)
            d = grad_scale * (__expf(__bfloat162float(row[j]) - lse) - (j == target ? 1.0f : 0.0f));
        row[j] = __float2bfloat16_rn(d);
    }
}

} // namespace

extern "C" ferry_status cudaop_classifier(void *stream, float *losses, act_t *dinp, act_t *dwte,
                                          const act_t *inp, const act_t *wte,
                                          const int32_t *targets, float grad_scale, int N, int C,
                                          int V, int Vp, void *scratch, int chunk)
{
    CU_REQUIRE(N > 0 && C > 0 && V > 0 && Vp >= V && chunk > 0,
               "classifier: need N, C, V, chunk > 0 and Vp >= V; got N=%d C=%d V=%d Vp=%d "
               "chunk=%d",
               N, C, V, Vp, chunk);
    CU_REQUIRE(losses && inp && wte && targets && scratch,
               "classifier: losses, inp, wte, targets and scratch must be device pointers, one "
               "is NULL");
    cudaStream_t s = cu_stream(stream);
    const bf16 *x = static_cast<const bf16 *>(inp), *w = static_cast<const bf16 *>(wte);
    bf16 *logits = static_cast<bf16 *>(scratch);
    const bool want_grad = dinp != nullptr;
    /* dwte's contributions of every chunk, summed in fp32, rounded once at the end. */
    float *acc = reinterpret_cast<float *>(static_cast<char *>(scratch) +
                                           ops_classifier_accumulator_offset(FERRY_DTYPE_BF16, chunk, Vp));
    if (want_grad && dwte)
        CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)Vp * C * sizeof(float), s));
    for (int r0 = 0; r0 < N; r0 += chunk) {
        const int rows = N - r0 < chunk ? N - r0 : chunk;
        const bf16 *xc = x + (size_t)r0 * C;
        /* logits^T (Vp x rows) = (wte, stored C x Vp, transposed) @ (inp rows, stored C x rows) */
        ferry_status st = cuda_gemm(s, true, false, Vp, rows, C, w, C, xc, C, logits, Vp, 0.0f,
                                    nullptr);
        if (st != FERRY_OK)
            return st;
        softmax_xent_kernel<<<rows, CLS_THREADS, 0, s>>>(logits, losses + r0, targets + r0,
                                                         grad_scale, V, Vp, want_grad);
        CUDA_CHECK_LAUNCH();
        if (!want_grad)
            continue;
        /* dinp^T (C x rows) += (wte, stored C x Vp) @ (dlogits, stored Vp x rows) */
        st = cuda_gemm(s, false, false, C, rows, Vp, w, C, logits, Vp,
                       static_cast<bf16 *>(dinp) + (size_t)r0 * C, C, 1.0f, nullptr);
        if (st != FERRY_OK)
            return st;
        /* acc^T (C x Vp) += (inp rows, stored C x rows) @ (dlogits stored Vp x rows)^T */
        if (dwte) {
            st = cuda_gemm_f32(s, false, true, C, Vp, rows, xc, C, logits, Vp, acc, C, 1.0f);
            if (st != FERRY_OK)
                return st;
        }
    }
    if (want_grad && dwte)
        return cuda_add_f32_to_bf16(s, static_cast<bf16 *>(dwte), acc, (size_t)Vp * C);
    return FERRY_OK;
}

extern "C" ferry_status cudaop_classifier_take_bad_targets(void *stream, uint32_t *count)
{
    unsigned int value = 0;
    const unsigned int zero = 0;
    cudaStream_t s = cu_stream(stream);
    CUDA_CHECK(cudaMemcpyFromSymbolAsync(&value, g_bad_targets, sizeof value, 0,
                                         cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyToSymbolAsync(g_bad_targets, &zero, sizeof zero, 0,
                                       cudaMemcpyHostToDevice, s));
    ferry_status st = cu_wait_stream(s);
    if (st != FERRY_OK)
        return st;
    *count = value;
    return FERRY_OK;
}
