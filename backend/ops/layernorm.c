/* Host version of layer normalisation over the last dimension (eps 1e-5, as
 * GPT-2), forward and backward; backend/ops/layernorm.cu is the CUDA one. Row
 * statistics are summed in double so the reference is not the weak link. */
#include "backend/ops/ops_host.h"

#include <math.h>

#define LAYERNORM_EPS 1e-5

void hostop_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        float *o = out + (size_t)r * C;
        double sum = 0.0;
        for (int i = 0; i < C; i++)
            sum += x[i];
        double m = sum / C;
        double var = 0.0;
        for (int i = 0; i < C; i++) {
            double d = x[i] - m;
            var += d * d;
        }
        float mf = (float)m;
        float s = (float)(1.0 / sqrt(var / C + LAYERNORM_EPS));
        for (int i = 0; i < C; i++)
            o[i] = (x[i] - mf) * s * weight[i] + bias[i];
        mean[r] = mf;
        rstd[r] = s;
    }
}

/* With xhat = (x - mean) * rstd and g = dout * weight:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
void hostop_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C;
        const float *d = dout + (size_t)r * C;
        float *dx = dinp + (size_t)r * C;
        float m = mean[r], s = rstd[r];
        double gsum = 0.0, gxsum = 0.0;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            float g = d[i] * weight[i];
            gsum += g;
            gxsum += (double)g * xhat;
        }
        float gmean = (float)(gsum / C), gxmean = (float)(gxsum / C);
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * s;
            float g = d[i] * weight[i];
            dbias[i] += d[i];
            dweight[i] += d[i] * xhat;
            dx[i] += s * (g - gmean - xhat * gxmean);
        }
    }
}
