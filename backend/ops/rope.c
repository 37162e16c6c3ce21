/* Host version of the rotary position embedding in Hugging Face's
 * convention (halves rotated), which also lays the grouped key and value
 * heads out per query head for attention; backend/ops/rope.cu is the CUDA
 * one. Angles are the fp32 product pos * inv_freq, their cosine and sine in
 * fp32, as transformers computes its cos/sin cache. */
#include "backend/ops/ops_host.h"

#include <math.h>

/* One head of HS: out = R(a) x (backward: out += R(-a) x). */
static void rotate(float *out, const float *x, const float *inv_freq, int32_t pos, int HS, bool inverse, bool add)
{
    int h = HS / 2;
    for (int i = 0; i < h; i++) {
        float a = (float)pos * inv_freq[i];
        float c = cosf(a), s = inverse ? -sinf(a) : sinf(a);
        float lo = x[i] * c - x[i + h] * s, hi = x[i + h] * c + x[i] * s;
        out[i] = add ? out[i] + lo : lo;
        out[i + h] = add ? out[i + h] + hi : hi;
    }
}

void hostop_rope_forward(float *out, const float *inp, const float *inv_freq, const int32_t *pos, int B, int T,
                         int NH, int NKV, int HS)
{
    size_t in_row = (size_t)(NH + 2 * NKV) * HS, out_row = (size_t)3 * NH * HS, C = (size_t)NH * HS;
    int group = NH / NKV;
    for (size_t n = 0; n < (size_t)B * T; n++) {
        const float *x = inp + n * in_row;
        float *o = out + n * out_row;
        for (int h = 0; h < NH; h++) {
            size_t kv = (size_t)(h / group) * HS;
            rotate(o + (size_t)h * HS, x + (size_t)h * HS, inv_freq, pos[n], HS, false, false);
            rotate(o + C + (size_t)h * HS, x + C + kv, inv_freq, pos[n], HS, false, false);
            const float *v = x + C + (size_t)NKV * HS + kv;
            for (int i = 0; i < HS; i++)
                o[2 * C + (size_t)h * HS + i] = v[i];
        }
    }
}

void hostop_rope_backward(float *dinp, const float *dout, const float *inv_freq, const int32_t *pos, int B, int T,
                          int NH, int NKV, int HS)
{
    size_t in_row = (size_t)(NH + 2 * NKV) * HS, out_row = (size_t)3 * NH * HS, C = (size_t)NH * HS;
    int group = NH / NKV;
    for (size_t n = 0; n < (size_t)B * T; n++) {
        float *dx = dinp + n * in_row;
        const float *d = dout + n * out_row;
        for (int h = 0; h < NH; h++)
            rotate(dx + (size_t)h * HS, d + (size_t)h * HS, inv_freq, pos[n], HS, true, true);
        for (int k = 0; k < NKV; k++) {
            float *dk = dx + C + (size_t)k * HS, *dv = dx + C + (size_t)(NKV + k) * HS;
            for (int j = 0; j < group; j++) {
                size_t h = (size_t)(k * group + j) * HS;
                rotate(dk, d + C + h, inv_freq, pos[n], HS, true, true);
                for (int i = 0; i < HS; i++)
                    dv[i] += d[2 * C + h + i];
            }
        }
    }
}
