/* The linear layer on cuda: out = inp @ weight^T + bias through cuBLASLt
 * (the storage type, bf16 or f16, in and out; fp32 compute; bias in the
 * epilogue), its backward as two
 * accumulating cuBLASLt products plus a column-sum kernel for dbias, and the
 * per-device cuBLASLt state every matmul here and in classifier.cu uses: one
 * handle, the caller's workspace, and a cache of descriptors and chosen
 * algorithms keyed by shape (made once, never per call). Host version:
 * matmul.c. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops/cuda_util.cuh"

namespace {

struct gemm_key {
    int transa, transb, m, n, k, lda, ldb, ldd, has_bias, d_f32;
    int cuda_type; /* cudaDataType_t of A, B, the bias and (unless d_f32) D */
    unsigned align_a, align_b, align_d, align_bias;
};

struct gemm_plan {
    gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

struct lt_context {
    backend *be;
    int device;
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    gemm_plan *plans;
    size_t plan_count, plan_cap;
};

enum { MAX_CONTEXTS = 64 };

/* Guards the context table and every plan: cuda_gemm holds it while it sets
 * a plan's bias pointer and enqueues the product (enqueueing is quick). */
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
lt_context *g_contexts[MAX_CONTEXTS];
int g_context_count;

unsigned pointer_alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned align = 256;
    while (align > 1 && a % align != 0)
        align /= 2;
    return align;
}

void plan_destroy(gemm_plan *p)
{
    if (p->a)
        cublasLtMatrixLayoutDestroy(p->a);
    if (p->b)
        cublasLtMatrixLayoutDestroy(p->b);
    if (p->d)
        cublasLtMatrixLayoutDestroy(p->d);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
}

void context_destroy(lt_context *c)
{
    for (size_t i = 0; i < c->plan_count; i++)
        plan_destroy(&c->plans[i]);
    free(c->plans);
    if (c->handle)
        cublasLtDestroy(c->handle);
    free(c);
}

ferry_status stream_device(cudaStream_t stream, int *device)
{
#if CUDART_VERSION >= 12080
    CUDA_CHECK(cudaStreamGetDevice(stream, device));
#else
    (void)stream;
    CUDA_CHECK(cudaGetDevice(device));
#endif
    return FERRY_OK;
}

lt_context *context_for_device(int device)
{
    for (int i = 0; i < g_context_count; i++)
        if (g_contexts[i]->device == device)
            return g_contexts[i];
    return nullptr;
}

ferry_status plan_fill(lt_context *c, gemm_plan *p)
{
    const gemm_key &k = p->key;
    CUDA_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = k.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = k.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k.has_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bias_type = (cudaDataType_t)k.cuda_type;
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi));
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &bias_type, sizeof bias_type));
    }
    /* Stored shapes: A is k x m when transposed, m x k otherwise; likewise B. */
    const cudaDataType_t t = (cudaDataType_t)k.cuda_type;
    CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->a, t, k.transa ? k.k : k.m, k.transa ? k.m : k.k, k.lda));
    CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->b, t, k.transb ? k.n : k.k, k.transb ? k.k : k.n, k.ldb));
    CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->d, k.d_f32 ? CUDA_R_32F : t, k.m, k.n, k.ldd));

    cublasLtMatmulPreference_t pref;
    CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c->workspace_bytes;
    uint32_t aa = k.align_a, ab = k.align_b, ad = k.align_d;
    cublasStatus_t rc = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (rc == CUBLAS_STATUS_SUCCESS)
        rc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &aa, sizeof aa);
    if (rc == CUBLAS_STATUS_SUCCESS)
        rc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &ab, sizeof ab);
    if (rc == CUBLAS_STATUS_SUCCESS)
        rc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &ad, sizeof ad);
    if (rc == CUBLAS_STATUS_SUCCESS)
        rc = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &ad, sizeof ad);
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int found = 0;
    if (rc == CUBLAS_STATUS_SUCCESS)
        rc = cublasLtMatmulAlgoGetHeuristic(c->handle, p->op, p->a, p->b, p->d, p->d, pref, 1,
                                            &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    CUDA_CHECK(rc);
    if (found == 0)
        return err_set(FERRY_ERR_BACKEND,
                       "cuBLASLt has no algorithm for a %s matmul m=%d n=%d k=%d (trans %d%d, "
                       "ld %d/%d/%d, bias %d, workspace %zu bytes); try a larger cuBLASLt "
                       "workspace or dimensions that are multiples of 8",
                       k.cuda_type == CUDA_R_16F ? "f16" : "bf16", k.m, k.n, k.k, k.transa, k.transb, k.lda,
                       k.ldb, k.ldd, k.has_bias, c->workspace_bytes);
    p->algo = result.algo;
    return FERRY_OK;
}

/* The cached plan for `key`, made on first use. Called with g_lock held. */
ferry_status plan_get(lt_context *c, const gemm_key &key, gemm_plan **out)
{
    for (size_t i = 0; i < c->plan_count; i++)
        if (memcmp(&c->plans[i].key, &key, sizeof key) == 0) {
            *out = &c->plans[i];
            return FERRY_OK;
        }
    if (c->plan_count == c->plan_cap) {
        size_t cap = c->plan_cap ? c->plan_cap * 2 : 16;
        gemm_plan *grown = static_cast<gemm_plan *>(realloc(c->plans, cap * sizeof *grown));
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cuBLASLt plan cache: out of host memory");
        c->plans = grown;
        c->plan_cap = cap;
    }
    gemm_plan *p = &c->plans[c->plan_count];
    memset(p, 0, sizeof *p);
    p->key = key;
    ferry_status st = plan_fill(c, p);
    if (st != FERRY_OK) {
        plan_destroy(p);
        return st;
    }
    c->plan_count++;
    *out = p;
    return FERRY_OK;
}

ferry_status gemm_locked(cudaStream_t stream, const gemm_key &key, const void *A, const void *B,
                         void *D, float beta, const void *bias)
{
    int device = 0;
    ferry_status st = stream_device(stream, &device);
    if (st != FERRY_OK)
        return st;
    lt_context *c = context_for_device(device);
    if (!c)
        return err_set(FERRY_ERR_STATE,
                       "a cuda matmul was launched on device %d before ops_init() was called for "
                       "a backend on that device; call ops_init() after backend_open()",
                       device);
    gemm_plan *p = nullptr;
    st = plan_get(c, key, &p);
    if (st != FERRY_OK)
        return st;
    if (bias)
        CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias));
    const float alpha = 1.0f;
    CUDA_CHECK(cublasLtMatmul(c->handle, p->op, &alpha, A, p->a, B, p->b, &beta, D, p->d, D, p->d,
                              &p->algo, c->workspace, c->workspace_bytes, stream));
    return FERRY_OK;
}

/* dst[c] += sum_r src[r, c] for a strip of 16 columns per block (so a
 * 1600-column bias has 100 blocks, a 6400-column one 400): its 1024 threads
 * are 512 row slots of two halves of 8 columns (one 16-byte load when
 * `vec`); slot s adds rows s, s + 512, ...; cu_strip_sum adds the slots in
 * a fixed order, so the sums are deterministic. */
template <typename T> __global__ void __launch_bounds__(1024)
    colsum_add_kernel(T *dst, const T *src, int rows, int cols, bool vec)
{
    __shared__ cu_strip_smem sm;
    const int c0 = blockIdx.x * CU_STRIP + 8 * (threadIdx.x & 1);
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int r = threadIdx.x / 2; r < rows; r += 512) {
        const T *p = src + (size_t)r * cols + c0;
        float v[8];
        if (vec && c0 < cols) {
            cu_load8(v, p);
        } else {
            for (int j = 0; j < 8; j++)
                v[j] = c0 + j < cols ? cu_f32(p[j]) : 0.0f;
        }
        for (int j = 0; j < 8; j++)
            acc[j] += v[j];
    }
    const float sum = cu_strip_sum(acc, sm);
    const int c = blockIdx.x * CU_STRIP + (int)threadIdx.x;
    if (threadIdx.x < CU_STRIP && c < cols)
        dst[c] = cu_round<T>(cu_f32(dst[c]) + sum);
}

ferry_status check_shape(const char *op, int N, int C, int OC)
{
    CU_REQUIRE(N > 0 && C > 0 && OC > 0,
               "%s: sizes must be positive, got N=%d C=%d OC=%d", op, N, C, OC);
    return FERRY_OK;
}

/* The key and the call of either storage type and either output type. */
ferry_status gemm_any(cudaStream_t stream, ferry_dtype act, bool transa, bool transb, int m, int n, int k,
                      const void *A, int lda, const void *B, int ldb, void *D, bool d_f32, int ldd, float beta,
                      const void *bias)
{
    CU_REQUIRE(act == FERRY_DTYPE_BF16 || act == FERRY_DTYPE_F16,
               "cuda matmul: storage type %s; the cuda ops store bf16 or f16", dtype_name(act));
    gemm_key key;
    memset(&key, 0, sizeof key); /* the key is compared with memcmp */
    key.transa = transa;
    key.transb = transb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldd = ldd;
    key.has_bias = bias != nullptr;
    key.d_f32 = d_f32;
    key.cuda_type = act == FERRY_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    key.align_a = pointer_alignment(A);
    key.align_b = pointer_alignment(B);
    key.align_d = pointer_alignment(D);
    key.align_bias = bias ? pointer_alignment(bias) : 0;
    pthread_mutex_lock(&g_lock);
    ferry_status st = gemm_locked(stream, key, A, B, D, beta, bias);
    pthread_mutex_unlock(&g_lock);
    return st;
}

} // namespace

ferry_status cuda_gemm(cudaStream_t stream, ferry_dtype act, bool transa, bool transb, int m, int n, int k,
                       const void *A, int lda, const void *B, int ldb, void *D, int ldd, float beta,
                       const void *bias)
{
    return gemm_any(stream, act, transa, transb, m, n, k, A, lda, B, ldb, D, false, ldd, beta, bias);
}

ferry_status cuda_gemm_f32(cudaStream_t stream, ferry_dtype act, bool transa, bool transb, int m, int n, int k,
                           const void *A, int lda, const void *B, int ldb, float *D, int ldd, float beta)
{
    return gemm_any(stream, act, transa, transb, m, n, k, A, lda, B, ldb, D, true, ldd, beta, nullptr);
}

namespace {

/* occupancy floor: 32 warps/SM: `add_f32_to_kernel<.*>` (memory-bound) */
template <typename T> __global__ void add_f32_to_kernel(T *dst, const float *acc, size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = cu_round<T>(cu_f32(dst[i]) + acc[i]);
}

} // namespace

ferry_status cuda_add_f32_to(cudaStream_t stream, ferry_dtype act, void *dst, const float *acc, size_t n)
{
    if (n == 0)
        return FERRY_OK;
    return cu_with_type(act, "add_f32_to", [&](auto tag) {
        using T = decltype(tag);
        add_f32_to_kernel<T><<<cu_blocks(n, 256, CU_GRID_STRIDE_BLOCKS), 256, 0, stream>>>(static_cast<T *>(dst), acc, n);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

ferry_status cuda_colsum_add(cudaStream_t stream, ferry_dtype act, void *dst, const void *src, int rows, int cols)
{
    if (rows <= 0 || cols <= 0)
        return FERRY_OK;
    return cu_with_type(act, "colsum_add", [&](auto tag) {
        using T = decltype(tag);
        const bool vec = cols % 8 == 0 && cu_aligned16(src);
        colsum_add_kernel<T><<<(cols + CU_STRIP - 1) / CU_STRIP, 1024, 0, stream>>>(
            static_cast<T *>(dst), static_cast<const T *>(src), rows, cols, vec);
        CUDA_CHECK_LAUNCH();
        return FERRY_OK;
    });
}

extern "C" ferry_status cudaop_init(backend *be, void *workspace, size_t workspace_bytes)
{
    CU_REQUIRE(be != nullptr, "ops_init: backend is NULL");
    CU_REQUIRE(workspace != nullptr || workspace_bytes == 0,
               "ops_init: workspace is NULL but workspace_bytes is %zu", workspace_bytes);
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_context_count; i++)
        if (g_contexts[i]->be == be) {
            /* Re-init: a new workspace invalidates plans chosen for the old size. */
            lt_context *c = g_contexts[i];
            for (size_t j = 0; j < c->plan_count; j++)
                plan_destroy(&c->plans[j]);
            c->plan_count = 0;
            c->workspace = workspace;
            c->workspace_bytes = workspace_bytes;
            pthread_mutex_unlock(&g_lock);
            return FERRY_OK;
        }
    ferry_status st = FERRY_OK;
    lt_context *c = static_cast<lt_context *>(calloc(1, sizeof *c));
    if (!c) {
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "ops_init: out of host memory");
    } else if (g_context_count == MAX_CONTEXTS) {
        st = err_set(FERRY_ERR_STATE, "ops_init: more than %d backends initialised at once; call "
                                      "ops_shutdown() for backends no longer used", MAX_CONTEXTS);
    } else {
        cublasStatus_t rc = cublasLtCreate(&c->handle);
        if (rc != CUBLAS_STATUS_SUCCESS) {
            st = err_set(FERRY_ERR_BACKEND, "cublasLtCreate failed: %s (code %d)",
                         cublasGetStatusString(rc), (int)rc);
        } else {
            c->be = be;
            c->device = device;
            c->workspace = workspace;
            c->workspace_bytes = workspace_bytes;
            g_contexts[g_context_count++] = c;
            c = nullptr;
        }
    }
    if (c)
        context_destroy(c);
    pthread_mutex_unlock(&g_lock);
    return st;
}

extern "C" void cudaop_shutdown(backend *be)
{
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_context_count; i++)
        if (g_contexts[i]->be == be) {
            context_destroy(g_contexts[i]);
            g_contexts[i] = g_contexts[--g_context_count];
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

/* cuBLASLt is column-major, so a row-major [r, c] matrix is read as its c x r
 * transpose: out^T (OC x N) = (weight, stored C x OC, transposed) @ (inp,
 * stored C x N) + bias per row of out^T. */
extern "C" ferry_status cudaop_matmul_forward(void *stream, ferry_dtype act, act_t *out, const act_t *inp,
                                              const act_t *weight, const act_t *bias, int N, int C,
                                              int OC)
{
    ferry_status st = check_shape("matmul_forward", N, C, OC);
    if (st != FERRY_OK)
        return st;
    return cuda_gemm(cu_stream(stream), act, true, false, OC, N, C, weight, C, inp, C, out, OC, 0.0f, bias);
}

extern "C" ferry_status cudaop_matmul_backward(void *stream, ferry_dtype act, act_t *dinp, act_t *dweight,
                                               act_t *dbias, const act_t *dout, const act_t *inp,
                                               const act_t *weight, int N, int C, int OC)
{
    ferry_status st = check_shape("matmul_backward", N, C, OC);
    if (st != FERRY_OK)
        return st;
    cudaStream_t s = cu_stream(stream);
    /* dinp^T (C x N) += W^T (C x OC, as stored) @ dout^T (OC x N, as stored). */
    if (dinp) {
        st = cuda_gemm(s, act, false, false, C, N, OC, weight, C, dout, OC, dinp, C, 1.0f, nullptr);
        if (st != FERRY_OK)
            return st;
    }
    /* dweight^T (C x OC) += inp^T (C x N, as stored) @ dout (N x OC: dout^T transposed). */
    if (dweight) {
        st = cuda_gemm(s, act, false, true, C, OC, N, inp, C, dout, OC, dweight, C, 1.0f, nullptr);
        if (st != FERRY_OK)
            return st;
    }
    if (dbias)
        return cuda_colsum_add(s, act, dbias, dout, N, OC);
    return FERRY_OK;
}
