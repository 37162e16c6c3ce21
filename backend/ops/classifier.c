/* Host version of the fused classifier: logits against the tied embedding,
 * softmax cross-entropy, and (optionally) its gradient into the input rows and
 * the embedding, `chunk` rows at a time so the N x V logits never exist at
 * once; backend/ops/classifier.cu is the CUDA one. Only the first V rows of wte
 * (the real tokens) are multiplied: the padded rows V..Vp-1 never enter the
 * softmax and get no gradient. */
#include "backend/ops/ops_host.h"
#include "backend/ops/blas.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"

/* Turns one row of logits into its loss and, in place, into
 * grad_scale * (softmax - onehot). */
static float row_loss_and_grad(float *z, int V, int target, float grad_scale, int want_grad)
{
    float mx = z[0];
    for (int j = 1; j < V; j++)
        mx = z[j] > mx ? z[j] : mx;
    double sum = 0.0;
    for (int j = 0; j < V; j++)
        sum += expf(z[j] - mx);
    float lse = mx + (float)log(sum);
    float loss = lse - z[target];
    if (want_grad) {
        for (int j = 0; j < V; j++)
            z[j] = grad_scale * expf(z[j] - lse);
        z[target] -= grad_scale;
    }
    return loss;
}

/* Rounds n values to the 16-bit type t in place: what the CUDA classifier's
 * scratch keeps of the logits and of their gradient. */
static void round_to(float *z, size_t n, ferry_dtype t)
{
    for (size_t j = 0; j < n; j++)
        z[j] = dtype_round(z[j], t);
}

static ferry_status classify(float *losses, float *dinp, float *dwte, const float *inp, const float *wte,
                             const int32_t *targets, float grad_scale, int N, int C, int V, int Vp,
                             float *scratch, int chunk, ferry_dtype stored)
{
    int want_grad = dinp != NULL;
    for (int r0 = 0; r0 < N; r0 += chunk) {
        int rows = N - r0 < chunk ? N - r0 : chunk;
        const float *x = inp + (size_t)r0 * C;
        for (int r = 0; r < rows; r++) {
            int32_t tgt = targets[r0 + r];
            if (tgt >= V)
                return err_set(FERRY_ERR_INVALID_ARGUMENT,
                               "classifier: target %d at row %d is outside the vocabulary [0, %d)"
                               " (negative targets are ignored, larger ones are a data error)",
                               (int)tgt, r0 + r, V);
        }
        /* logits[rows, V] (row stride Vp) = x @ wte[0:V]^T */
        blas_sgemm(false, true, rows, V, C, 1.0f, x, C, wte, C, 0.0f, scratch, Vp);
        for (int r = 0; r < rows; r++) {
            float *z = scratch + (size_t)r * Vp;
            if (stored != FERRY_DTYPE_F32)
                round_to(z, (size_t)V, stored);
            int32_t tgt = targets[r0 + r];
            if (tgt < 0) {
                losses[r0 + r] = 0.0f;
                if (want_grad)
                    memset(z, 0, (size_t)V * sizeof *z);
                continue;
            }
            losses[r0 + r] = row_loss_and_grad(z, V, tgt, grad_scale, want_grad);
            if (stored != FERRY_DTYPE_F32 && want_grad)
                round_to(z, (size_t)V, stored);
        }
        if (!want_grad)
            continue;
        /* dinp[rows, C] += dlogits @ wte[0:V]; dwte[0:V] += dlogits^T @ x */
        blas_sgemm(false, false, rows, C, V, 1.0f, scratch, Vp, wte, C, 1.0f, dinp + (size_t)r0 * C, C);
        if (dwte)
            blas_sgemm(true, false, V, C, rows, 1.0f, scratch, Vp, x, C, 1.0f, dwte, C);
    }
    return FERRY_OK;
}

ferry_status hostop_classifier(float *losses, float *dinp, float *dwte, const float *inp,
                               const float *wte, const int32_t *targets, float grad_scale, int N,
                               int C, int V, int Vp, float *scratch, int chunk)
{
    return classify(losses, dinp, dwte, inp, wte, targets, grad_scale, N, C, V, Vp, scratch, chunk,
                    FERRY_DTYPE_F32);
}

ferry_status hostop_classifier_stored(float *losses, float *dinp, float *dwte, const float *inp,
                                      const float *wte, const int32_t *targets, float grad_scale, int N,
                                      int C, int V, int Vp, float *scratch, int chunk, ferry_dtype stored)
{
    return classify(losses, dinp, dwte, inp, wte, targets, grad_scale, N, C, V, Vp, scratch, chunk, stored);
}
