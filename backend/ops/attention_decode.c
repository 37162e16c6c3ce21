/* Host version of generation's cache ops (backend/ops/op_list.h says what
 * each computes): the new tokens' keys and values appended to a layer's
 * cache, with or without the rotary embedding, and the new queries'
 * attention against the cache, grouped key/value heads read as they are.
 * backend/ops/attention_decode.cu is the CUDA one. The rotation is
 * rope.c's to the bit: the fp32 angle pos * inv_freq[i], its cosine and
 * sine in fp32 (cosf, sinf), the same products and sums, so a token
 * decoded at position p gets the keys a full forward gives it. Owns no
 * cache memory: the caller's tensors. */
#include "backend/ops/ops_host.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"

/* One head of HS rotated by the angles of `pos` (rope.c's rotate). */
static void rotate_head(float *out, const float *x, const float *inv_freq, int32_t pos, int HS)
{
    int h = HS / 2;
    for (int i = 0; i < h; i++) {
        float a = (float)pos * inv_freq[i];
        float c = cosf(a), s = sinf(a);
        float lo = x[i] * c - x[i + h] * s, hi = x[i + h] * c + x[i] * s;
        out[i] = lo;
        out[i + h] = hi;
    }
}

static void copy_head(float *out, const float *x, int HS)
{
    for (int i = 0; i < HS; i++)
        out[i] = x[i];
}

void hostop_kv_append(float *q, float *kcache, float *vcache, const float *qkv, const float *inv_freq, int pos0,
                      int B, int Tq, int NH, int NKV, int HS, int Tmax)
{
    size_t row = (size_t)(NH + 2 * NKV) * HS, Q = (size_t)NH * HS;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tq; t++) {
            size_t n = (size_t)b * Tq + t;
            int32_t pos = pos0 + t;
            const float *x = qkv + n * row;
            for (int h = 0; h < NH; h++) {
                float *o = q + n * Q + (size_t)h * HS;
                if (inv_freq)
                    rotate_head(o, x + (size_t)h * HS, inv_freq, pos, HS);
                else
                    copy_head(o, x + (size_t)h * HS, HS);
            }
            for (int j = 0; j < NKV; j++) {
                size_t at = (((size_t)b * NKV + j) * Tmax + (size_t)pos) * HS;
                const float *k = x + Q + (size_t)j * HS, *v = x + Q + (size_t)(NKV + j) * HS;
                if (inv_freq)
                    rotate_head(kcache + at, k, inv_freq, pos, HS);
                else
                    copy_head(kcache + at, k, HS);
                copy_head(vcache + at, v, HS);
            }
        }
}

/* One query row against keys 0..p of one key/value head: scores in fp32,
 * their maximum subtracted, exp, the weighted sum of values divided by the
 * sum of the weights. `w` holds p + 1 floats. */
static void attend_row(float *out, const float *q, const float *k, const float *v, int p, int HS, float *w)
{
    float scale = 1.0f / sqrtf((float)HS), max = -INFINITY;
    for (int j = 0; j <= p; j++) {
        float dot = 0.0f;
        for (int i = 0; i < HS; i++)
            dot += q[i] * k[(size_t)j * HS + i];
        w[j] = dot * scale;
        max = w[j] > max ? w[j] : max;
    }
    float sum = 0.0f;
    for (int j = 0; j <= p; j++) {
        w[j] = expf(w[j] - max);
        sum += w[j];
    }
    for (int i = 0; i < HS; i++)
        out[i] = 0.0f;
    for (int j = 0; j <= p; j++)
        for (int i = 0; i < HS; i++)
            out[i] += w[j] * v[(size_t)j * HS + i];
    float inv = 1.0f / sum;
    for (int i = 0; i < HS; i++)
        out[i] *= inv;
}

ferry_status hostop_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int pos0,
                                     int B, int Tq, int NH, int NKV, int HS, int Tmax)
{
    float *w = malloc((size_t)Tmax * sizeof *w);
    if (!w)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "attention_decode: no host memory for %d scores", Tmax);
    int group = NH / NKV;
    size_t Q = (size_t)NH * HS;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tq; t++)
            for (int h = 0; h < NH; h++) {
                size_t n = (size_t)b * Tq + t, at = ((size_t)b * NKV + (size_t)(h / group)) * Tmax * HS;
                attend_row(out + n * Q + (size_t)h * HS, q + n * Q + (size_t)h * HS, kcache + at, vcache + at,
                           pos0 + t, HS, w);
            }
    free(w);
    return FERRY_OK;
}
