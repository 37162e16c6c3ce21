/* Host version of the linear layer, out = inp @ weight^T + bias, forward and
 * backward, through OpenBLAS sgemm; backend/ops/matmul.cu is the cuBLASLt one.
 * OpenBLAS's address space is made sure of once, by the host backend's
 * ops_init (backend/ops/blas.h), so under ulimit -v setup fails with a message
 * instead of a multiply spinning forever. */
#include "backend/ops/ops_host.h"
#include "backend/ops/blas.h"

#include <string.h>


void hostop_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC)
{
    /* Start from the bias (or zero) so sgemm accumulates onto it with beta = 1. */
    for (int r = 0; r < N; r++) {
        float *o = out + (size_t)r * OC;
        if (bias)
            memcpy(o, bias, (size_t)OC * sizeof *o);
        else
            memset(o, 0, (size_t)OC * sizeof *o);
    }
    blas_sgemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
}

void hostop_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC)
{
    /* dinp[N,C] += dout[N,OC] @ weight[OC,C] */
    blas_sgemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    /* dweight[OC,C] += dout^T @ inp */
    blas_sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (!dbias)
        return;
    for (int r = 0; r < N; r++) {
        const float *d = dout + (size_t)r * OC;
        for (int j = 0; j < OC; j++)
            dbias[j] += d[j];
    }
}
