/* The simulated device's cuBLASLt subset (dev/cudasim/cublaslt.cpp), through
 * the library's own C API: results against a double-precision reference for
 * every transpose, bf16 and fp16 operands, bf16, fp16 and fp32 D, the bias
 * epilogue, beta = 0 over an uninitialised (NaN) C and beta = 1 accumulating,
 * strided batches;
 * then each descriptor mistake the library refuses, with its status: shapes
 * that disagree, a leading dimension below the rows, types that do not go
 * together, a bias of another type or without its pointer, an attribute of
 * the wrong size, a stale algorithm, a pointer less aligned than the
 * preference promised, too small a workspace, a destroyed descriptor, and an
 * operand whose layout runs past its buffer (a sticky illegal address). */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/cudasim/cudasim.h"
#include "dev/ops/opcheck.h"
#include "tests/tap.h"

static cublasLtHandle_t lt;
static uint64_t rng = 20260301;

static void is_status(cublasStatus_t got, cublasStatus_t want, const char *what)
{
    if (!tap_ok(got == want, "%s: %s", what, cublasGetStatusName(want)))
        tap_diag("  got %s", cublasGetStatusName(got));
}

/* fp16 bits of a float, rounded to nearest even (normal range). */
static uint16_t half_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffffu;
    if (exp <= 0)
        return (uint16_t)sign;
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)h;
}

static float half_value(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    uint32_t u = exp == 0 ? sign : sign | ((exp - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A 16-bit matrix of random values (as bits) and its float values. */
static uint16_t *rand16(size_t n, cudaDataType_t t, float *vals)
{
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        float v = (float)tap_rand_unit(&rng) - 0.5f;
        h[i] = t == CUDA_R_16BF ? opcheck_bf16_bits(v) : half_bits(v);
        vals[i] = t == CUDA_R_16BF ? opcheck_bf16_value(h[i]) : half_value(h[i]);
    }
    return h;
}

static void *up(const void *h, size_t bytes)
{
    void *d = NULL;
    cudaMalloc(&d, bytes);
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

typedef struct plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} plan;

/* Column-major, as cuBLASLt: op(A) m x k, op(B) k x n, D m x n. */
static cublasStatus_t make_plan(plan *p, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldd,
                                cudaDataType_t ab, cudaDataType_t d, int bias, int32_t bias_type, uint32_t align,
                                uint64_t ws_max)
{
    memset(p, 0, sizeof *p);
    cublasStatus_t st = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!st) st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
    if (!st) st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
    if (!st && bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        if (!st && bias_type >= 0)
            st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
    }
    if (!st) st = cublasLtMatrixLayoutCreate(&p->a, ab, ta ? k : m, ta ? m : k, lda);
    if (!st) st = cublasLtMatrixLayoutCreate(&p->b, ab, tb ? n : k, tb ? k : n, ldb);
    if (!st) st = cublasLtMatrixLayoutCreate(&p->c, d, m, n, ldd);
    if (st)
        return st;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_max, sizeof ws_max);
    uint32_t al[4] = {align, align, align, align};
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4);
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &r, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (!st && !found)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (!st) {
        p->algo = r.algo;
        p->ws = r.workspaceSize;
    }
    return st;
}

static void drop_plan(plan *p)
{
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

/* One product against double precision: the stored A is (ta ? k x m : m x k). */
static void product(int ta, int tb, cudaDataType_t ab, cudaDataType_t dt, int bias, float beta)
{
    const int m = 24, n = 40, k = 72, lda = (ta ? k : m) + 8, ldb = (tb ? n : k) + 8, ldd = m + 8;
    const size_t na = (size_t)lda * (ta ? m : k), nb = (size_t)ldb * (tb ? k : n), nd = (size_t)ldd * n;
    float *va = malloc(na * 4), *vb = malloc(nb * 4), *vbias = malloc((size_t)m * 4), *vc = malloc(nd * 4);
    uint16_t *ha = rand16(na, ab, va), *hb = rand16(nb, ab, vb);
    uint16_t *hbias = rand16((size_t)m, dt == CUDA_R_32F ? CUDA_R_16BF : dt, vbias);
    const size_t des = dt == CUDA_R_32F ? 4 : 2;
    void *hc = malloc(nd * des);
    for (size_t i = 0; i < nd; i++) {
        float v = (float)tap_rand_unit(&rng);
        if (des == 4)
            ((float *)hc)[i] = vc[i] = v;
        else
            ((uint16_t *)hc)[i] = dt == CUDA_R_16BF ? opcheck_bf16_bits(v) : half_bits(v),
            vc[i] = dt == CUDA_R_16BF ? opcheck_bf16_value(((uint16_t *)hc)[i]) : half_value(((uint16_t *)hc)[i]);
    }
    void *da = up(ha, na * 2), *db = up(hb, nb * 2), *dd = NULL, *ws = NULL;
    void *dbias = up(hbias, (size_t)m * 2); /* 16-bit: the bias goes with a 16-bit D here */
    cudaMalloc(&dd, nd * des); /* poisoned: NaN until written */
    if (beta != 0.0f)
        cudaMemcpy(dd, hc, nd * des, cudaMemcpyHostToDevice);
    cudaMalloc(&ws, 1 << 20);
    plan p;
    char what[160];
    snprintf(what, sizeof what, "%s%s %s -> %s%s, beta %g", ta ? "T" : "N", tb ? "T" : "N",
             ab == CUDA_R_16BF ? "bf16" : "fp16", dt == CUDA_R_32F ? "fp32" : dt == CUDA_R_16BF ? "bf16" : "fp16",
             bias ? " + bias" : "", (double)beta);
    cublasStatus_t st = make_plan(&p, ta, tb, m, n, k, lda, ldb, ldd, ab, dt, bias, -1, 256, 1 << 20);
    if (!st && bias)
        st = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias);
    const float alpha = 1.0f;
    if (!st)
        st = cublasLtMatmul(lt, p.op, &alpha, da, p.a, db, p.b, &beta, dd, p.c, dd, p.c, &p.algo, ws, 1 << 20, 0);
    is_status(st, CUBLAS_STATUS_SUCCESS, what);
    void *got = malloc(nd * des);
    cudaMemcpy(got, dd, nd * des, cudaMemcpyDeviceToHost);
    double err = 0, ref = 0;
    int nonfinite = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double a = ta ? va[(size_t)i * lda + l] : va[(size_t)l * lda + i];
                double b = tb ? vb[(size_t)l * ldb + j] : vb[(size_t)j * ldb + l];
                s += a * b;
            }
            if (beta != 0.0f)
                s += beta * vc[(size_t)j * ldd + i];
            if (bias)
                s += vbias[i];
            size_t at = (size_t)j * ldd + i;
            double g = des == 4 ? ((float *)got)[at]
                                : dt == CUDA_R_16BF ? opcheck_bf16_value(((uint16_t *)got)[at])
                                                    : half_value(((uint16_t *)got)[at]);
            nonfinite += !isfinite(g);
            err += (g - s) * (g - s);
            ref += s * s;
        }
    /* fp32 D: fp32 sums of exact products; 16-bit D: one rounding (2^-9, 2^-12). */
    const double tol = des == 4 ? 1e-6 : dt == CUDA_R_16BF ? 4e-3 : 1e-3;
    tap_ok(nonfinite == 0 && sqrt(err / ref) <= tol, "%s: relative error %.2g <= %.0e against double (%d non-finite%s)",
           what, sqrt(err / ref), tol, nonfinite, beta == 0.0f ? ", C never written" : "");
    drop_plan(&p);
    cudaFree(da), cudaFree(db), cudaFree(dbias), cudaFree(dd), cudaFree(ws);
    free(va), free(vb), free(vbias), free(vc), free(ha), free(hb), free(hbias), free(hc), free(got);
}

/* Strided batches (attention's unfused baseline in the kernel lab): 3
 * products of m x k by k x n, each batch's operands `stride` elements after
 * the last's (a gap between them), every batch against double; and batch
 * counts that disagree, refused. */
static void batched(void)
{
    const int m = 20, n = 12, k = 24, batch = 3;
    const int64_t sa = (int64_t)m * k + 40, sb = (int64_t)k * n + 8, sd = (int64_t)m * n + 16;
    const size_t na = (size_t)sa * batch, nb = (size_t)sb * batch, nd = (size_t)sd * batch;
    float *va = malloc(na * 4), *vb = malloc(nb * 4);
    uint16_t *ha = rand16(na, CUDA_R_16BF, va), *hb = rand16(nb, CUDA_R_16BF, vb);
    void *da = up(ha, na * 2), *db = up(hb, nb * 2), *dd = NULL;
    cudaMalloc(&dd, nd * 4); /* NaN until written: the gaps stay so */
    plan p;
    cublasStatus_t st = make_plan(&p, 1, 0, m, n, k, k, k, m, CUDA_R_16BF, CUDA_R_32F, 0, -1, 256, 0);
    const int64_t strides[3] = {sa, sb, sd};
    cublasLtMatrixLayout_t ls[3] = {p.a, p.b, p.c};
    for (int i = 0; i < 3 && !st; i++) {
        st = cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
        if (!st)
            st = cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                  sizeof strides[i]);
    }
    /* the heuristic again, for the batched layouts */
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    if (!st)
        st = cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &r, &found);
    const float one = 1, zero = 0;
    if (!st)
        st = cublasLtMatmul(lt, p.op, &one, da, p.a, db, p.b, &zero, dd, p.c, dd, p.c, &r.algo, NULL, 0, 0);
    is_status(st, CUBLAS_STATUS_SUCCESS, "3 strided batches of A^T B (bf16 -> fp32)");
    float *got = malloc(nd * 4);
    cudaMemcpy(got, dd, nd * 4, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int l = 0; l < k; l++)
                    s += (double)va[b * sa + (size_t)i * k + l] * vb[b * sb + (size_t)j * k + l];
                double e = fabs(s - got[b * sd + (size_t)j * m + i]);
                worst = e > worst || e != e ? e : worst;
            }
    tap_ok(worst <= 1e-5, "every batch's product against double (max err %.2g)", worst);
    tap_ok(isnan(got[sd - 1]) && isnan(got[2 * sd - 1]), "the gaps between batches of D are never written");
    const int two = 2;
    cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two);
    is_status(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &r, &found),
              CUBLAS_STATUS_INVALID_VALUE, "batch counts 3, 2, 3, 3");
    const int64_t back = -1;
    cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    cublasLtMatrixLayoutSetAttribute(p.b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &back, sizeof back);
    is_status(cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &r, &found),
              CUBLAS_STATUS_INVALID_VALUE, "a negative batch stride");
    cublasLtMatmulPreferenceDestroy(pref);
    drop_plan(&p);
    cudaFree(da), cudaFree(db), cudaFree(dd);
    free(va), free(vb), free(ha), free(hb), free(got);
}

static void mistakes(void)
{
    plan p;
    is_status(make_plan(&p, 0, 0, 32, 16, 64, 32, 48, 32, CUDA_R_16BF, CUDA_R_16BF, 0, -1, 256, 0),
              CUBLAS_STATUS_INVALID_VALUE, "B's layout (48 x 16) does not give op(B) k = 64 rows");
    drop_plan(&p);
    is_status(make_plan(&p, 1, 0, 32, 16, 64, 32, 64, 32, CUDA_R_16BF, CUDA_R_16BF, 0, -1, 256, 0),
              CUBLAS_STATUS_INVALID_VALUE, "a transposed A whose leading dimension 32 is below its 64 rows");
    drop_plan(&p);
    is_status(make_plan(&p, 0, 0, 32, 16, 64, 32, 64, 32, CUDA_R_16F, CUDA_R_16BF, 0, -1, 256, 0),
              CUBLAS_STATUS_NOT_SUPPORTED, "fp16 operands with a bf16 D");
    drop_plan(&p);
    is_status(make_plan(&p, 0, 0, 32, 16, 64, 32, 64, 32, CUDA_R_16BF, CUDA_R_16BF, 1, CUDA_R_32F, 256, 0),
              CUBLAS_STATUS_NOT_SUPPORTED, "an fp32 bias with a bf16 D");
    drop_plan(&p);
    cublasLtMatmulDesc_t d16;
    cublasLtMatmulDescCreate(&d16, CUBLAS_COMPUTE_16F, CUDA_R_16F);
    cublasLtMatrixLayout_t l;
    cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 16, 16, 16);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    is_status(cublasLtMatmulAlgoGetHeuristic(lt, d16, l, l, l, l, pref, 1, &r, &found), CUBLAS_STATUS_NOT_SUPPORTED,
              "compute type 16F (the subset computes in fp32)");
    int32_t small = 1;
    is_status(cublasLtMatmulDescSetAttribute(d16, CUBLASLT_MATMUL_DESC_EPILOGUE, &small, 2), CUBLAS_STATUS_INVALID_VALUE,
              "an attribute given in 2 bytes where cuBLASLt stores 4");
    cublasLtMatmulDescDestroy(d16);
    is_status(cublasLtMatmulDescSetAttribute(d16, CUBLASLT_MATMUL_DESC_EPILOGUE, &small, 4), CUBLAS_STATUS_INVALID_VALUE,
              "a destroyed descriptor");
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulPreferenceDestroy(pref);

    /* Mistakes at cublasLtMatmul, with a good plan for 32 x 16 x 256. */
    void *A = NULL, *B = NULL, *D = NULL, *bias = NULL, *ws = NULL;
    cudaMalloc(&A, 256 * 64 * 2);
    cudaMalloc(&B, 256 * 64 * 2);
    cudaMalloc(&D, 256 * 64 * 2);
    cudaMalloc(&bias, 256);
    cudaMalloc(&ws, 1 << 20);
    cudaMemset(A, 0, 256 * 64 * 2);
    cudaMemset(B, 0, 256 * 64 * 2);
    const float one = 1, zero = 0;
    is_status(make_plan(&p, 0, 0, 32, 16, 256, 32, 256, 32, CUDA_R_16BF, CUDA_R_16BF, 1, -1, 256, 1 << 20),
              CUBLAS_STATUS_SUCCESS, "a plan with the bias epilogue");
    is_status(cublasLtMatmul(lt, p.op, &one, A, p.a, B, p.b, &zero, D, p.c, D, p.c, &p.algo, ws, 1 << 20, 0),
              CUBLAS_STATUS_INVALID_VALUE, "the bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    is_status(cublasLtMatmul(lt, p.op, &one, (char *)A + 2, p.a, B, p.b, &zero, D, p.c, D, p.c, &p.algo, ws, 1 << 20, 0),
              CUBLAS_STATUS_NOT_SUPPORTED, "A 2-byte aligned with an algorithm chosen for 256-byte alignment");
    tap_ok(p.ws > 0, "a k = 256 product offered a workspace takes one (%zu bytes)", p.ws);
    is_status(cublasLtMatmul(lt, p.op, &one, A, p.a, B, p.b, &zero, D, p.c, D, p.c, &p.algo, ws, p.ws - 1, 0),
              CUBLAS_STATUS_INVALID_VALUE, "a workspace a byte smaller than the algorithm's");
    plan other;
    make_plan(&other, 0, 0, 16, 16, 256, 16, 256, 16, CUDA_R_16BF, CUDA_R_16BF, 1, -1, 256, 1 << 20);
    is_status(cublasLtMatmul(lt, p.op, &one, A, p.a, B, p.b, &zero, D, p.c, D, p.c, &other.algo, ws, 1 << 20, 0),
              CUBLAS_STATUS_INVALID_VALUE, "an algorithm chosen for other layouts (a stale plan)");
    drop_plan(&other);
    is_status(cublasLtMatmul(lt, p.op, &one, A, p.a, B, p.b, &zero, D, p.c, D, p.c, &p.algo, ws, 1 << 20, 0),
              CUBLAS_STATUS_SUCCESS, "the same call, right");
    tap_ok(cudaDeviceSynchronize() == cudaSuccess, "... runs");
    drop_plan(&p);
    /* A layout larger than its buffer: B's leading dimension 4096 over a
     * 32 KiB buffer. cuBLASLt cannot see it; the device faults when it runs. */
    is_status(make_plan(&p, 0, 0, 32, 16, 256, 32, 4096, 32, CUDA_R_16BF, CUDA_R_16BF, 0, -1, 256, 0),
              CUBLAS_STATUS_SUCCESS, "a plan whose B has leading dimension 4096");
    is_status(cublasLtMatmul(lt, p.op, &one, A, p.a, B, p.b, &zero, D, p.c, D, p.c, &p.algo, NULL, 0, 0),
              CUBLAS_STATUS_SUCCESS, "is accepted by cublasLtMatmul, as by cuBLASLt");
    cudaError_t e = cudaDeviceSynchronize();
    tap_ok(e == cudaErrorIllegalAddress && strstr(cudasim_last_failure(), "matrix B"),
           "and faults when it runs: %s (%s)", cudaGetErrorName(e), cudasim_last_failure());
    cudasim_reset_errors();
    drop_plan(&p);
    cudaFree(A), cudaFree(B), cudaFree(D), cudaFree(bias), cudaFree(ws);
}

int main(void)
{
    tap_diag("seed %llu", (unsigned long long)rng);
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        printf("Bail out! cublasLtCreate failed\n");
        return 1;
    }
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            product(ta, tb, CUDA_R_16BF, CUDA_R_16BF, 0, 0.0f);
    product(1, 0, CUDA_R_16BF, CUDA_R_16BF, 1, 0.0f);
    product(0, 0, CUDA_R_16BF, CUDA_R_16BF, 0, 1.0f);
    product(0, 1, CUDA_R_16BF, CUDA_R_32F, 0, 1.0f);
    product(0, 1, CUDA_R_16BF, CUDA_R_32F, 0, 0.0f);
    product(1, 0, CUDA_R_16F, CUDA_R_16F, 1, 0.0f);
    product(0, 0, CUDA_R_16F, CUDA_R_32F, 0, 1.0f);
    batched();
    mistakes();
    cublasLtDestroy(lt);
    return tap_done();
}
