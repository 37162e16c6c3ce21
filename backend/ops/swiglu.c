/* Host version of the SiLU-gated MLP's activation, silu(gate) * up over the
 * fused gate/up projection's output, forward and backward;
 * backend/ops/swiglu.cu is the CUDA one. */
#include "backend/ops/ops_host.h"

#include <math.h>

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void hostop_swiglu_forward(float *out, const float *inp, int N, int I)
{
    for (int r = 0; r < N; r++) {
        const float *g = inp + (size_t)r * 2 * I, *u = g + I;
        float *o = out + (size_t)r * I;
        for (int i = 0; i < I; i++)
            o[i] = g[i] * sigmoid(g[i]) * u[i];
    }
}

/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x). */
void hostop_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int I)
{
    for (int r = 0; r < N; r++) {
        const float *g = inp + (size_t)r * 2 * I, *u = g + I, *d = dout + (size_t)r * I;
        float *dg = dinp + (size_t)r * 2 * I, *du = dg + I;
        for (int i = 0; i < I; i++) {
            float s = sigmoid(g[i]);
            dg[i] += d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
            du[i] += d[i] * g[i] * s;
        }
    }
}
