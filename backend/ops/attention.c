/* Host version of causal multi-head self-attention; backend/ops/attention.cu is
 * the CUDA (flash) one. Per (batch, head) the T x T score matrix is formed in
 * a scratch with sgemm, only its causal lower triangle is used (with
 * positions, only each row's own example: keys i - pos[i] .. i), and forward
 * keeps the log-sum-exp of each query row. Backward has the shape of
 * FlashAttention's: it recomputes the probabilities from q, k and lse
 * (P = exp(S - lse)), uses D_i = rowsum(dO_i * O_i) (written to delta, as
 * the op's contract has it), and never reads a stored probability matrix. */
#include "backend/ops/ops_host.h"
#include "backend/ops/blas.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"

/* The first key query i of row b may see: its example's first token (0
 * without positions). A position outside [0, i] is clamped there (the
 * launch refused it already). */
static int first_key(const int32_t *pos, int b, int T, int i)
{
    if (!pos)
        return 0;
    int32_t p = pos[(size_t)b * T + i];
    return i - (p < 0 ? 0 : p > i ? i : (int)p);
}

static ferry_status scratch_alloc(float **out, size_t count, const char *who, int T)
{
    *out = malloc(count * sizeof **out);
    if (!*out)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "%s: out of host memory for a %d x %d score scratch (%zu bytes); use a "
                       "shorter sequence",
                       who, T, T, count * sizeof **out);
    return FERRY_OK;
}

/* S[T,T] = scale * Q K^T for one (b, h); q and k point at the head's first
 * element, rows 3C apart. The upper triangle is computed and ignored. */
static void scores(float *S, const float *q, const float *k, int T, int HS, int ld, float scale)
{
    blas_sgemm(false, true, T, T, HS, scale, q, ld, k, ld, 0.0f, S, T);
}

ferry_status hostop_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
                                      int C, int NH, const int32_t *pos)
{
    int HS = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float *S = NULL;
    ferry_status st = scratch_alloc(&S, (size_t)T * T, "attention forward", T);
    if (st != FERRY_OK)
        return st;
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * HS;
            const float *k = q + C, *v = q + 2 * C;
            float *o = out + (size_t)b * T * C + (size_t)h * HS;
            float *l = lse + ((size_t)b * NH + h) * T;
            scores(S, q, k, T, HS, ld, scale);
            for (int i = 0; i < T; i++) {
                float *row = S + (size_t)i * T;
                const int lo = first_key(pos, b, T, i);
                float mx = row[lo];
                for (int j = lo + 1; j <= i; j++)
                    mx = row[j] > mx ? row[j] : mx;
                double sum = 0.0;
                for (int j = lo; j <= i; j++) {
                    row[j] = expf(row[j] - mx);
                    sum += row[j];
                }
                float inv = (float)(1.0 / sum);
                for (int j = lo; j <= i; j++)
                    row[j] *= inv;
                for (int j = 0; j < lo; j++)
                    row[j] = 0.0f; /* another example's keys get no weight */
                for (int j = i + 1; j < T; j++)
                    row[j] = 0.0f; /* causal: later keys get no weight */
                l[i] = mx + (float)log(sum);
            }
            /* O[T,HS] = P[T,T] @ V[T,HS], written into the head's columns of out */
            blas_sgemm(false, false, T, HS, T, 1.0f, S, T, v, ld, 0.0f, o, C);
        }
    }
    free(S);
    return FERRY_OK;
}

ferry_status hostop_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse, float *delta, int B, int T,
                                       int C, int NH, const int32_t *pos)
{
    int HS = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    float *P = NULL, *dP = NULL;
    ferry_status st = scratch_alloc(&P, (size_t)T * T, "attention backward", T);
    if (st == FERRY_OK)
        st = scratch_alloc(&dP, (size_t)T * T, "attention backward", T);
    if (st != FERRY_OK) {
        free(P);
        return st;
    }
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t base = (size_t)b * T * ld + (size_t)h * HS;
            const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
            size_t obase = (size_t)b * T * C + (size_t)h * HS;
            const float *o = out + obase, *dO = dout + obase;
            const float *l = lse + ((size_t)b * NH + h) * T;
            float *D = delta + ((size_t)b * NH + h) * T;
            /* P = exp(scale Q K^T - lse), causal, within each example */
            scores(P, q, k, T, HS, ld, scale);
            for (int i = 0; i < T; i++) {
                float *row = P + (size_t)i * T;
                const int lo = first_key(pos, b, T, i);
                for (int j = 0; j < lo; j++)
                    row[j] = 0.0f;
                for (int j = lo; j <= i; j++)
                    row[j] = expf(row[j] - l[i]);
                for (int j = i + 1; j < T; j++)
                    row[j] = 0.0f;
                double d = 0.0;
                for (int e = 0; e < HS; e++)
                    d += (double)dO[(size_t)i * C + e] * o[(size_t)i * C + e];
                D[i] = (float)d;
            }
            /* dV[T,HS] += P^T @ dO */
            blas_sgemm(true, false, T, HS, T, 1.0f, P, T, dO, C, 1.0f, dv, ld);
            /* dP[T,T] = dO @ V^T, then dS = P * (dP - D) in place */
            blas_sgemm(false, true, T, T, HS, 1.0f, dO, C, v, ld, 0.0f, dP, T);
            for (int i = 0; i < T; i++) {
                float *drow = dP + (size_t)i * T;
                const float *prow = P + (size_t)i * T;
                const int lo = first_key(pos, b, T, i);
                for (int j = 0; j < lo; j++)
                    drow[j] = 0.0f;
                for (int j = lo; j <= i; j++)
                    drow[j] = prow[j] * (drow[j] - D[i]);
                for (int j = i + 1; j < T; j++)
                    drow[j] = 0.0f;
            }
            /* dQ += scale dS @ K; dK += scale dS^T @ Q */
            blas_sgemm(false, false, T, HS, T, scale, dP, T, k, ld, 1.0f, dq, ld);
            blas_sgemm(true, false, T, HS, T, scale, dP, T, q, ld, 1.0f, dk, ld);
        }
    }
    free(P);
    free(dP);
    return FERRY_OK;
}
