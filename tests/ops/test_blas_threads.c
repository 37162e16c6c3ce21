/* The host ops' multiply (blas_sgemm, backend/ops/blas.c) gives the same
 * bits whatever OpenBLAS's thread count (1, 2, 3 and 4 threads), for the
 * reductions OpenBLAS's single- and multi-threaded drivers cut differently
 * (K not a multiple of their step: GPT-2's vocabulary 50257, B x T = 700,
 * 500, 4097), with A transposed or not, B transposed or not, alpha and beta
 * as the ops use them; and it is the product: each element against a
 * double-precision sum, within fp32's rounding of K terms. K = 0 scales C
 * by beta, as sgemm does. Whether cblas_sgemm itself differs across thread
 * counts on this machine is said (a diagnostic: it depends on OpenBLAS's
 * kernel), since that is why blas_sgemm exists. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops/blas.h"
#include "tap.h"

void openblas_set_num_threads(int num_threads); /* OpenBLAS's own */

static float *random_matrix(size_t n, uint64_t *seed)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; p && i < n; i++)
        p[i] = (float)(tap_rand_unit(seed) - 0.5);
    return p;
}

/* C[i][j] = alpha sum_k op(A)[i][k] op(B)[k][j] + beta C0[i][j], in double. */
static double reference(bool ta, bool tb, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                        float beta, float c0, int i, int j)
{
    double s = 0;
    for (int k = 0; k < K; k++)
        s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
             (double)(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
    return alpha * s + beta * (double)c0;
}

static void shape(int M, int N, int K, bool ta, bool tb, float alpha, float beta, uint64_t seed)
{
    int lda = ta ? M : K, ldb = tb ? K : N;
    float *A = random_matrix((size_t)M * K + 1, &seed), *B = random_matrix((size_t)K * N + 1, &seed);
    float *C0 = random_matrix((size_t)M * N, &seed), *C[4], *D[4];
    const int threads[4] = {1, 2, 3, 4};
    for (int t = 0; t < 4; t++) {
        C[t] = malloc((size_t)M * N * sizeof(float));
        D[t] = malloc((size_t)M * N * sizeof(float));
        memcpy(C[t], C0, (size_t)M * N * sizeof(float));
        memcpy(D[t], C0, (size_t)M * N * sizeof(float));
        openblas_set_num_threads(threads[t]);
        blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C[t], N);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                    A, lda, B, ldb, beta, D[t], N);
    }
    size_t differ = 0, cblas_differ = 0, far = 0;
    double worst = 0;
    for (size_t e = 0; e < (size_t)M * N; e++) {
        for (int t = 1; t < 4; t++) {
            differ += memcmp(&C[t][e], &C[0][e], sizeof(float)) != 0;
            cblas_differ += memcmp(&D[t][e], &D[0][e], sizeof(float)) != 0;
        }
        /* Few elements checked in double (each is K multiplies): a strided sample. */
        if (e % 97 == 0) {
            int i = (int)(e / (size_t)N), j = (int)(e % (size_t)N);
            double want = reference(ta, tb, K, alpha, A, lda, B, ldb, beta, C0[e], i, j);
            double err = fabs((double)C[0][e] - want), bound = 4e-7 * (K + 2) * (1 + fabs(want));
            worst = err > worst ? err : worst;
            far += err > bound;
        }
    }
    tap_ok(differ == 0 && far == 0,
           "M %d, N %d, K %d, A%s, B%s, alpha %g, beta %g: the same bits on 1, 2, 3 and 4 OpenBLAS threads (%zu "
           "elements differ) and the product (worst error %.3g against a double sum; %zu beyond fp32's rounding)",
           M, N, K, ta ? "^T" : "", tb ? "^T" : "", (double)alpha, (double)beta, differ, worst, far);
    if (cblas_differ)
        tap_diag("    cblas_sgemm alone differs across those thread counts in %zu elements here", cblas_differ);
    for (int t = 0; t < 4; t++) {
        free(C[t]);
        free(D[t]);
    }
    free(A);
    free(B);
    free(C0);
}

int main(void)
{
    uint64_t seed = 20261204;
    tap_diag("seed %llu", (unsigned long long)seed);
    /* The classifier's input gradient over the vocabulary, and its forward. */
    shape(128, 128, 50257, false, false, 1.0f, 1.0f, seed + 1);
    shape(64, 32, 500, false, true, 1.0f, 0.0f, seed + 2);
    /* Weight gradients over B x T rows (dout^T inp), and odd reductions. */
    shape(384, 128, 700, true, false, 1.0f, 1.0f, seed + 3);
    shape(128, 128, 4097, true, false, 0.125f, 1.0f, seed + 4);
    shape(33, 65, 1999, false, true, 0.7f, 1.0f, seed + 5);
    /* K below one step, and a multiple of it. */
    shape(64, 64, 17, true, true, 1.0f, 1.0f, seed + 6);
    shape(96, 80, 1024, false, false, 1.0f, 0.0f, seed + 7);
    /* K = 0: C = beta C. */
    float A = 1, B = 1, C = 3;
    blas_sgemm(false, false, 1, 1, 0, 1.0f, &A, 1, &B, 1, 0.5f, &C, 1);
    tap_ok(C == 1.5f, "K = 0 scales C by beta (3 x 0.5 = %g)", (double)C);
    return tap_done();
}
