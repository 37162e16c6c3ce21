/* Host version of RMSNorm over the last dimension (Llama's), forward and
 * backward; backend/ops/rmsnorm.cu is the CUDA one. The mean of squares is
 * summed in double so the reference is not the weak link; rstd is kept in
 * fp32, as the CUDA kernel keeps it. */
#include "backend/ops/ops_host.h"

#include <math.h>

void hostop_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                            float eps)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float *o = out + (size_t)r * C;
        double ss = 0.0;
        for (int i = 0; i < C; i++)
            ss += (double)x[i] * x[i];
        float s = (float)(1.0 / sqrt(ss / C + (double)eps));
        for (int i = 0; i < C; i++)
            o[i] = x[i] * s * weight[i];
        rstd[r] = s;
    }
}

/* y = w x r with r = (mean(x^2) + eps)^-1/2: dx = r (w dy) - x r^3 mean(w dy
 * x); dw += dy x r, summed over rows in row order. */
void hostop_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
        float *dx = dinp + (size_t)r * C;
        float s = rstd[r];
        double dot = 0.0;
        for (int i = 0; i < C; i++)
            dot += (double)weight[i] * dy[i] * x[i];
        float k = (float)(dot / C) * s * s * s;
        for (int i = 0; i < C; i++) {
            dx[i] += s * weight[i] * dy[i] - x[i] * k;
            dweight[i] += dy[i] * x[i] * s;
        }
    }
}
