/* Kernel lab: attention variant 6, the unfused baseline any fused attention
 * must beat, as llm.c computes attention: q, k, v permuted into [B, NH, T,
 * HS], the T x T scores of every (batch, head) by one cuBLASLt strided-
 * batched matmul (scale folded into alpha), a fused causal softmax that
 * writes the probabilities (storage type) and the log-sum-exp, P @ V by a
 * second batched matmul, and the heads put back. The backward keeps P from
 * the forward (in the scratch) and runs four batched matmuls (dP = dO V^T,
 * dV = P^T dO, dQ = dS K, dK = dS^T Q) around a softmax backward (dS =
 * scale P (dP - rowsum(P dP))), then adds the permuted gradients into
 * dqkv. Full T x T products (the causal upper half computed and ignored, as
 * llm.c does). Checked and timed by dev/kernels/attention.c; bf16 or f16.
 *
 * Scratch (lab_attention_unfused_scratch_bytes): q, k, v, dO, dq, dk, dv
 * permuted (7 B T C values of the storage type), P and dP (2 B NH T^2). */
#include <cublasLt.h>

#include "backend/ops/cuda_util.cuh"
#include "dev/kernels/lab.h"

namespace {

/* The scratch's pieces, in elements of the storage type. */
struct parts {
    size_t btc, tt;
    size_t q, k, v, dO, dq, dk, dv, P, dP, total;
};

parts parts_of(int B, int T, int C, int NH)
{
    parts p;
    p.btc = (size_t)B * T * C;
    p.tt = (size_t)B * NH * T * T;
    p.q = 0;
    p.k = p.q + p.btc;
    p.v = p.k + p.btc;
    p.dO = p.v + p.btc;
    p.dq = p.dO + p.btc;
    p.dk = p.dq + p.btc;
    p.dv = p.dk + p.btc;
    p.P = p.dv + p.btc;
    p.dP = p.P + p.tt;
    p.total = p.dP + p.tt;
    return p;
}

/* dst[part][b, h, t, d] = src[b, t, part C + h HS + d] for `parts_n`
 * matrices of a [B, T, parts_n C] source (qkv: 3; dout: 1). */
template <typename T>
__global__ void permute_kernel(T *dst, const T *src, int parts_n, int B, int T_, int C, int NH)
{
    const size_t n = (size_t)parts_n * B * T_ * C;
    const int HS = C / NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % HS), h = (int)(i / ((size_t)HS * T_) % NH);
        const size_t t = i / HS % T_, b = i / ((size_t)C * T_) % B, part = i / ((size_t)C * T_ * B);
        dst[i] = src[((b * T_ + t) * parts_n + part) * C + (size_t)h * HS + d];
    }
}

/* dst[b, t, part C + h HS + d] (+)= src[part][b, h, t, d]. */
template <typename T>
__global__ void unpermute_kernel(T *dst, const T *src, int parts_n, int B, int T_, int C, int NH, bool add)
{
    const size_t n = (size_t)parts_n * B * T_ * C;
    const int HS = C / NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % HS), h = (int)(i / ((size_t)HS * T_) % NH);
        const size_t t = i / HS % T_, b = i / ((size_t)C * T_) % B, part = i / ((size_t)C * T_ * B);
        T *p = dst + ((b * T_ + t) * parts_n + part) * C + (size_t)h * HS + d;
        *p = cu_round<T>(cu_f32(src[i]) + (add ? cu_f32(*p) : 0.0f));
    }
}

/* One warp per row i of a (b, h): P[i, j] = softmax_j<=i(S[i, :]) (S scaled
 * already), 0 past the diagonal; lse[b, h, i] = log sum exp. */
template <typename T> __global__ void softmax_kernel(T *P, float *lse, const T *S, size_t rows, int T_)
{
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const int i = (int)(row % T_);
    const T *s = S + row * T_;
    T *p = P + row * T_;
    float mx = -INFINITY;
    for (int j = lane; j <= i; j += 32)
        mx = fmaxf(mx, cu_f32(s[j]));
    mx = cu_warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32)
        sum += __expf(cu_f32(s[j]) - mx);
    sum = cu_warp_sum(sum);
    const float inv = 1.0f / sum;
    for (int j = lane; j < T_; j += 32)
        p[j] = cu_round<T>(j <= i ? __expf(cu_f32(s[j]) - mx) * inv : 0.0f);
    if (lane == 0)
        lse[row] = mx + logf(sum);
}

/* dS[i, :] = scale P (dP - sum_j P dP), in place of dP; one warp per row. */
template <typename T> __global__ void softmax_backward_kernel(T *dP, const T *P, size_t rows, int T_, float scale)
{
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    const int i = (int)(row % T_);
    T *dp = dP + row * T_;
    const T *p = P + row * T_;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32)
        dot += cu_f32(p[j]) * cu_f32(dp[j]);
    dot = cu_warp_sum(dot);
    for (int j = lane; j < T_; j += 32)
        dp[j] = cu_round<T>(j <= i ? scale * cu_f32(p[j]) * (cu_f32(dp[j]) - dot) : 0.0f);
}

/* The batched matmuls, in the row-major words of the callers: D (M x N) =
 * alpha op(A) op(B), A and B row-major with `ta` / `tb` transposing them,
 * `batch` of them at strides sa, sb, sd. Each shape's plan is made once. */
struct bplan {
    bool used;
    int key[13];
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

cublasLtHandle_t g_lt;
bplan g_plans[16];

#define LT_CHECK(call)                                                                                          \
    do {                                                                                                        \
        cublasStatus_t lt_st_ = (call);                                                                         \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS)                                                                    \
            return err_set(FERRY_ERR_BACKEND, "attention variant 6: %s failed: %s", #call,                     \
                           cublasLtGetStatusString(lt_st_));                                                    \
    } while (0)

ferry_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int rows, int cols, int ld, int batch,
                    int64_t stride)
{
    LT_CHECK(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    return FERRY_OK;
}

/* The alignment every batch's matrix keeps: the largest power of two up to
 * 256 dividing the address and the stride in bytes. */
unsigned align_of(const void *p, int64_t stride_bytes)
{
    const uintptr_t a = (uintptr_t)p | (uintptr_t)stride_bytes;
    unsigned al = 256;
    while (al > 1 && a % al)
        al /= 2;
    return al;
}

/* Row-major D = op(A) op(B) is column-major D^T = op(B)^T op(A)^T: cuBLASLt
 * gets B as its first operand. al[]: the alignments of A, B, D. */
ferry_status plan_for(bplan **out, cudaDataType_t t, bool ta, bool tb, int M, int N, int K, int64_t sa, int64_t sb,
                      int64_t sd, int batch, const unsigned (&al)[3])
{
    const int key[13] = {(int)t, ta, tb, M, N, K, (int)sa, (int)sb, (int)sd, batch, (int)al[0], (int)al[1],
                         (int)al[2]};
    for (bplan &p : g_plans)
        if (p.used && memcmp(p.key, key, sizeof key) == 0) {
            *out = &p;
            return FERRY_OK;
        }
    bplan *p = nullptr;
    for (bplan &q : g_plans)
        if (!q.used) {
            p = &q;
            break;
        }
    if (!p)
        return err_set(FERRY_ERR_BACKEND, "attention variant 6: more than 16 matmul shapes");
    if (!g_lt)
        LT_CHECK(cublasLtCreate(&g_lt));
    memcpy(p->key, key, sizeof key);
    LT_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* cuBLASLt's A is our B: row-major K x N (N x K when tb) is column-major N x K (K x N). */
    cublasOperation_t oa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
    ferry_status st = layout(&p->a, t, tb ? K : N, tb ? N : K, tb ? K : N, batch, sb);
    if (st == FERRY_OK)
        st = layout(&p->b, t, ta ? M : K, ta ? K : M, ta ? M : K, batch, sa);
    if (st == FERRY_OK)
        st = layout(&p->d, t, N, M, N, batch, sd);
    if (st != FERRY_OK)
        return st;
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    /* cuBLASLt's A is ours B, its B ours A; C is D */
    const uint32_t lt_al[4] = {al[1], al[0], al[2], al[2]};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        cublasStatus_t ps = cublasLtMatmulPreferenceSetAttribute(pref, which[i], &lt_al[i], sizeof lt_al[i]);
        if (ps != CUBLAS_STATUS_SUCCESS) {
            cublasLtMatmulPreferenceDestroy(pref);
            LT_CHECK(ps);
        }
    }
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(g_lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &r, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    LT_CHECK(hs);
    if (!found)
        return err_set(FERRY_ERR_BACKEND, "attention variant 6: no cuBLASLt algorithm for %d x %d x %d", M, N, K);
    p->algo = r.algo;
    p->used = true;
    *out = p;
    return FERRY_OK;
}

ferry_status bmm(cudaStream_t s, cudaDataType_t t, bool ta, bool tb, int M, int N, int K, float alpha, const void *A,
                 int64_t sa, const void *B, int64_t sb, void *D, int64_t sd, int batch)
{
    bplan *p = nullptr;
    const unsigned al[3] = {align_of(A, sa * 2), align_of(B, sb * 2), align_of(D, sd * 2)};
    ferry_status st = plan_for(&p, t, ta, tb, M, N, K, sa, sb, sd, batch, al);
    if (st != FERRY_OK)
        return st;
    const float zero = 0.0f;
    LT_CHECK(cublasLtMatmul(g_lt, p->op, &alpha, B, p->a, A, p->b, &zero, D, p->d, D, p->d, &p->algo, nullptr, 0, s));
    return FERRY_OK;
}

unsigned grid_of(size_t n) { return cu_blocks(n, 256, CU_GRID_STRIDE_BLOCKS); }

template <typename T>
ferry_status forward(cudaStream_t s, T *out, float *lse, const T *qkv, int B, int T_, int C, int NH, T *w)
{
    const parts p = parts_of(B, T_, C, NH);
    const int HS = C / NH, BH = B * NH;
    const cudaDataType_t ct = cu_type<T>::cuda;
    permute_kernel<T><<<grid_of(3 * p.btc), 256, 0, s>>>(w + p.q, qkv, 3, B, T_, C, NH);
    CUDA_CHECK_LAUNCH();
    const int64_t sh = (int64_t)T_ * HS, st2 = (int64_t)T_ * T_;
    /* S = scale Q K^T into dP's room (P is written from it) */
    ferry_status st = bmm(s, ct, false, true, T_, T_, HS, 1.0f / sqrtf((float)HS), w + p.q, sh, w + p.k, sh,
                          w + p.dP, st2, BH);
    if (st != FERRY_OK)
        return st;
    const size_t rows = (size_t)BH * T_;
    softmax_kernel<T><<<(unsigned)((rows * 32 + 255) / 256), 256, 0, s>>>(w + p.P, lse, w + p.dP, rows, T_);
    CUDA_CHECK_LAUNCH();
    st = bmm(s, ct, false, false, T_, HS, T_, 1.0f, w + p.P, st2, w + p.v, sh, w + p.dq, sh, BH);
    if (st != FERRY_OK)
        return st;
    unpermute_kernel<T><<<grid_of(p.btc), 256, 0, s>>>(out, w + p.dq, 1, B, T_, C, NH, false);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

template <typename T>
ferry_status backward(cudaStream_t s, T *dqkv, const T *dout, int B, int T_, int C, int NH, T *w)
{
    const parts p = parts_of(B, T_, C, NH);
    const int HS = C / NH, BH = B * NH;
    const cudaDataType_t ct = cu_type<T>::cuda;
    const int64_t sh = (int64_t)T_ * HS, st2 = (int64_t)T_ * T_;
    permute_kernel<T><<<grid_of(p.btc), 256, 0, s>>>(w + p.dO, dout, 1, B, T_, C, NH);
    CUDA_CHECK_LAUNCH();
    ferry_status st = bmm(s, ct, false, true, T_, T_, HS, 1.0f, w + p.dO, sh, w + p.v, sh, w + p.dP, st2, BH);
    if (st == FERRY_OK) /* dV = P^T dO */
        st = bmm(s, ct, true, false, T_, HS, T_, 1.0f, w + p.P, st2, w + p.dO, sh, w + p.dv, sh, BH);
    if (st != FERRY_OK)
        return st;
    const size_t rows = (size_t)BH * T_;
    softmax_backward_kernel<T><<<(unsigned)((rows * 32 + 255) / 256), 256, 0, s>>>(w + p.dP, w + p.P, rows, T_,
                                                                                   1.0f / sqrtf((float)HS));
    CUDA_CHECK_LAUNCH();
    st = bmm(s, ct, false, false, T_, HS, T_, 1.0f, w + p.dP, st2, w + p.k, sh, w + p.dq, sh, BH); /* dQ = dS K */
    if (st == FERRY_OK) /* dK = dS^T Q */
        st = bmm(s, ct, true, false, T_, HS, T_, 1.0f, w + p.dP, st2, w + p.q, sh, w + p.dk, sh, BH);
    if (st != FERRY_OK)
        return st;
    unpermute_kernel<T><<<grid_of(3 * p.btc), 256, 0, s>>>(dqkv, w + p.dq, 3, B, T_, C, NH, true);
    CUDA_CHECK_LAUNCH();
    return FERRY_OK;
}

} // namespace

extern "C" size_t lab_attention_unfused_scratch_bytes(int B, int T, int C, int NH)
{
    return parts_of(B, T, C, NH).total * 2;
}

extern "C" ferry_status lab_attention_unfused_forward(void *stream, ferry_dtype act, void *out, float *lse,
                                                      const void *qkv, int B, int T, int C, int NH, void *scratch)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0, "attention variant 6: B=%d T=%d C=%d NH=%d", B, T,
               C, NH);
    return cu_with_type(act, "attention variant 6", [&](auto tag) {
        using E = decltype(tag);
        return forward<E>(cu_stream(stream), static_cast<E *>(out), lse, static_cast<const E *>(qkv), B, T, C, NH,
                          static_cast<E *>(scratch));
    });
}

extern "C" ferry_status lab_attention_unfused_backward(void *stream, ferry_dtype act, void *dqkv, const void *dout,
                                                       int B, int T, int C, int NH, void *scratch)
{
    CU_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0, "attention variant 6: B=%d T=%d C=%d NH=%d", B, T,
               C, NH);
    return cu_with_type(act, "attention variant 6", [&](auto tag) {
        using E = decltype(tag);
        return backward<E>(cu_stream(stream), static_cast<E *>(dqkv), static_cast<const E *>(dout), B, T, C, NH,
                           static_cast<E *>(scratch));
    });
}
