/* The fused classifier on cuda, in either storage type T (bf16 or f16): for
 * `chunk` rows at a time, cuBLASLt writes the logits [rows, Vp] of type T
 * into the caller's scratch; one block per row
 * finds max, log-sum-exp and the loss over the V real columns in fp32 and,
 * when a gradient is wanted, overwrites the logits in place with
 * grad_scale * (softmax - onehot) (0 in the padded columns); then two
 * accumulating cuBLASLt products give dinp and dwte's share, the latter into
 * an fp32 accumulator that is added into dwte once at the end (one rounding
 * per call, however many chunks). Under fp16 a loss scale makes the
 * gradient rows grad_scale times larger; one past fp16's range stores inf,
 * which the step's check finds. Host version: classifier.c. */
#include "backend/ops/cuda_util.cuh"

namespace {

constexpr int CLS_THREADS = 512;

/* Targets >= V met since the last cudaop_classifier_take_bad_targets(). */
__device__ unsigned int g_bad_targets;

template <typename T>
__global__ void __launch_bounds__(CLS_THREADS)
    softmax_xent_kernel(T *logits, float *losses, const int32_t *targets, float grad_scale, int V, int Vp,
                        bool want_grad)
{
    __shared__ float red[32];
    const int r = blockIdx.x, tid = threadIdx.x;
    T *row = logits + (size_t)r * Vp;
    int target = targets[r];
    if (target >= V) {
        if (tid == 0)
            atomicAdd(&g_bad_targets, 1u);
        target = -1;
    }
    /* Online max and sum of exp over this thread's columns, then merged. */
    float m = -INFINITY, s = 0.0f;
    for (int j = tid; j < V; j += CLS_THREADS) {
        const float x = cu_f32(row[j]);
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
        losses[r] = target < 0 ? 0.0f : lse - cu_f32(row[target]);
    if (!want_grad)
        return;
    __syncthreads(); /* row[target] is read above before it is overwritten */
    for (int j = tid; j < Vp; j += CLS_THREADS) {
        float d = 0.0f;
        if (target >= 0 && j < V)
            d = grad_scale * (__expf(cu_f32(row[j]) - lse) - (j == target ? 1.0f : 0.0f));
        row[j] = cu_round<T>(d);
    }
}

template <typename T>
ferry_status classify(cudaStream_t s, float *losses, T *dinp, T *dwte, const T *x, const T *w,
                      const int32_t *targets, float grad_scale, int N, int C, int V, int Vp, void *scratch,
                      int chunk)
{
    constexpr ferry_dtype act = cu_type<T>::dtype;
    T *logits = static_cast<T *>(scratch);
    const bool want_grad = dinp != nullptr;
    /* dwte's contributions of every chunk, summed in fp32, rounded once at the end. */
    float *acc = reinterpret_cast<float *>(static_cast<char *>(scratch) +
                                           ops_classifier_accumulator_offset(act, chunk, Vp));
    if (want_grad && dwte)
        CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)Vp * C * sizeof(float), s));
    for (int r0 = 0; r0 < N; r0 += chunk) {
        const int rows = N - r0 < chunk ? N - r0 : chunk;
        const T *xc = x + (size_t)r0 * C;
        /* logits^T (Vp x rows) = (wte, stored C x Vp, transposed) @ (inp rows, stored C x rows) */
        ferry_status st = cuda_gemm(s, act, true, false, Vp, rows, C, w, C, xc, C, logits, Vp, 0.0f, nullptr);
        if (st != FERRY_OK)
            return st;
        softmax_xent_kernel<T><<<rows, CLS_THREADS, 0, s>>>(logits, losses + r0, targets + r0, grad_scale, V, Vp,
                                                            want_grad);
        CUDA_CHECK_LAUNCH();
        if (!want_grad)
            continue;
        /* dinp^T (C x rows) += (wte, stored C x Vp) @ (dlogits, stored Vp x rows) */
        st = cuda_gemm(s, act, false, false, C, rows, Vp, w, C, logits, Vp, dinp + (size_t)r0 * C, C, 1.0f,
                       nullptr);
        if (st != FERRY_OK)
            return st;
        /* acc^T (C x Vp) += (inp rows, stored C x rows) @ (dlogits stored Vp x rows)^T */
        if (dwte) {
            st = cuda_gemm_f32(s, act, false, true, C, Vp, rows, xc, C, logits, Vp, acc, C, 1.0f);
            if (st != FERRY_OK)
                return st;
        }
    }
    if (want_grad && dwte)
        return cuda_add_f32_to(s, act, dwte, acc, (size_t)Vp * C);
    return FERRY_OK;
}

} // namespace

extern "C" ferry_status cudaop_classifier(void *stream, ferry_dtype act, float *losses, act_t *dinp, act_t *dwte,
                                          const act_t *inp, const act_t *wte, const int32_t *targets,
                                          float grad_scale, int N, int C, int V, int Vp, void *scratch, int chunk)
{
    CU_REQUIRE(N > 0 && C > 0 && V > 0 && Vp >= V && chunk > 0,
               "classifier: need N, C, V, chunk > 0 and Vp >= V; got N=%d C=%d V=%d Vp=%d "
               "chunk=%d",
               N, C, V, Vp, chunk);
    CU_REQUIRE(losses && inp && wte && targets && scratch,
               "classifier: losses, inp, wte, targets and scratch must be device pointers, one "
               "is NULL");
    return cu_with_type(act, "classifier", [&](auto tag) {
        using T = decltype(tag);
        return classify<T>(cu_stream(stream), losses, static_cast<T *>(dinp), static_cast<T *>(dwte),
                           static_cast<const T *>(inp), static_cast<const T *>(wte), targets, grad_scale, N, C, V,
                           Vp, scratch, chunk);
    });
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
