/* Checking a cuda op against its host version (backend/ops/ops_host.h), for the
 * programs that do it — the gpu tests (tests/gpu/) and the kernel lab
 * (dev/kernels/) — and not used by the library itself: bf16 rounding on the
 * host (round to nearest even, the reference for the device's conversion),
 * a seeded generator, device buffers of bf16 or f16 (common/dtype.h's
 * conversions) filled from host arrays and read back,
 * the relative error norm, and torch's AdamW in double. Header-only. The
 * functions that touch the backend return its status; whether a failure
 * ends the program is the caller's decision. */
#ifndef FERRY_DEV_OPS_OPCHECK_H
#define FERRY_DEV_OPS_OPCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "backend/backend.h"

static inline uint16_t opcheck_bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float opcheck_bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* splitmix64: the next value of a seeded stream. */
static inline uint64_t opcheck_rand_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* x[i] uniform in [lo, hi), rounded to bf16 and then to fp16, so that each
 * value is exact in both storage types and the host reference and the
 * device op start from the same values in either. */
static inline void opcheck_rand_fill(uint64_t *state, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        float v = lo + (hi - lo) * (float)((double)(opcheck_rand_next(state) >> 11) * 0x1.0p-53);
        x[i] = dtype_round_f16(opcheck_bf16_value(opcheck_bf16_bits(v)));
    }
}

/* A new device buffer holding `bytes` of src (at least 1 byte is allocated). */
static inline ferry_status opcheck_upload(backend *be, backend_stream *s, const void *src, size_t bytes,
                                          void **out)
{
    ferry_status st = backend_alloc(be, bytes ? bytes : 1, out);
    if (st == FERRY_OK)
        st = backend_memcpy_async(s, *out, src, bytes, BACKEND_COPY_H2D);
    return st == FERRY_OK ? backend_stream_synchronize(s) : st;
}

/* The same for n floats stored as bf16. */
static inline ferry_status opcheck_upload_bf16(backend *be, backend_stream *s, const float *x, size_t n,
                                               void **out)
{
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * 2);
    if (!h)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "opcheck: no host memory for %zu bf16 values", n);
    for (size_t i = 0; i < n; i++)
        h[i] = opcheck_bf16_bits(x[i]);
    ferry_status st = opcheck_upload(be, s, h, n * 2, out);
    free(h);
    return st;
}

/* Waits for the stream, then reads n bf16 device values into out as floats. */
static inline ferry_status opcheck_download_bf16(backend_stream *s, const void *d, size_t n, float *out)
{
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * 2);
    if (!h)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "opcheck: no host memory for %zu bf16 values", n);
    ferry_status st = backend_memcpy_async(s, h, d, n * 2, BACKEND_COPY_D2H);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(s);
    for (size_t i = 0; st == FERRY_OK && i < n; i++)
        out[i] = opcheck_bf16_value(h[i]);
    free(h);
    return st;
}

/* n floats stored as `t` (bf16 or f16, rounded to nearest even) in a new
 * device buffer, and n device values of type t read back as floats. */
static inline ferry_status opcheck_upload_as(backend *be, backend_stream *s, const float *x, size_t n, ferry_dtype t,
                                             void **out)
{
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * 2);
    if (!h)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "opcheck: no host memory for %zu %s values", n, dtype_name(t));
    for (size_t i = 0; i < n; i++)
        dtype_store_f32(h, t, i, x[i]);
    ferry_status st = opcheck_upload(be, s, h, n * 2, out);
    free(h);
    return st;
}

static inline ferry_status opcheck_download_as(backend_stream *s, const void *d, size_t n, ferry_dtype t, float *out)
{
    uint16_t *h = (uint16_t *)malloc((n ? n : 1) * 2);
    if (!h)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "opcheck: no host memory for %zu %s values", n, dtype_name(t));
    ferry_status st = backend_memcpy_async(s, h, d, n * 2, BACKEND_COPY_D2H);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(s);
    for (size_t i = 0; st == FERRY_OK && i < n; i++)
        out[i] = dtype_load_f32(h, t, i);
    free(h);
    return st;
}

static inline ferry_status opcheck_download_f32(backend_stream *s, const void *d, size_t n, float *out)
{
    ferry_status st = backend_memcpy_async(s, out, d, n * 4, BACKEND_COPY_D2H);
    return st == FERRY_OK ? backend_stream_synchronize(s) : st;
}

typedef struct opcheck_err {
    double max_abs; /* max |got - want|; NaN if any value is NaN */
    double rel;     /* ||got - want|| / ||want|| (want == 0: ||got - want||); NaN likewise */
} opcheck_err;

static inline opcheck_err opcheck_compare(const float *got, const float *want, size_t n)
{
    opcheck_err e = {0, 0};
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)want[i];
        if (!(fabs(d) <= e.max_abs))
            e.max_abs = fabs(d); /* NaN sticks */
        num += d * d;
        den += (double)want[i] * want[i];
    }
    e.rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (isnan(e.max_abs))
        e.rel = NAN;
    return e;
}

/* torch.optim.AdamW (_single_tensor_adamw) in double, one step over n values
 * whose fp32 gradients are g x gscale. */
static inline void opcheck_adamw_ref(double *p, double *m, double *v, const float *g, size_t n, double lr,
                                     double b1, double b2, double eps, double wd, int64_t step,
                                     double gscale)
{
    const double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
    for (size_t i = 0; i < n; i++) {
        const double gi = g[i] * gscale;
        p[i] *= 1 - lr * wd;
        m[i] = m[i] * b1 + (1 - b1) * gi;
        v[i] = v[i] * b2 + (1 - b2) * gi * gi;
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

#endif
