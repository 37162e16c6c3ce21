/* Helpers shared by the GPU tests and the kernel lab: bf16 rounding on the
 * host (round to nearest even, the reference for the device conversion),
 * device buffers filled from fp32 arrays, and error norms. Header-only. */
#ifndef FERRY_TESTS_KERNELS_GPU_UTIL_H
#define FERRY_TESTS_KERNELS_GPU_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/backend.h"

static inline uint16_t gpu_bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float gpu_bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void gpu_round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = gpu_bf16_value(gpu_bf16_bits(x[i]));
}

/* Uniform in [lo, hi), from the tests' seeded generator state. */
static inline uint64_t gpu_rand_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float *gpu_rand_array(uint64_t *state, size_t n, float lo, float hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)((double)(gpu_rand_next(state) >> 11) * 0x1.0p-53);
    gpu_round_bf16(x, n); /* both backends then start from the same values */
    return x;
}

/* A device copy of bytes, or exits the test with the error (a test cannot go
 * on without its buffers). */
static inline void *gpu_upload(backend *be, backend_stream *s, const void *src, size_t bytes)
{
    void *d = NULL;
    if (backend_alloc(be, bytes ? bytes : 1, &d) != FERRY_OK ||
        backend_memcpy_async(s, d, src, bytes, BACKEND_COPY_H2D) != FERRY_OK ||
        backend_stream_synchronize(s) != FERRY_OK) {
        printf("Bail out! device buffer of %zu bytes: %s\n", bytes, ferry_last_error());
        exit(1);
    }
    return d;
}

static inline void *gpu_upload_bf16(backend *be, backend_stream *s, const float *x, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * 2);
    if (!h)
        exit(1);
    for (size_t i = 0; i < n; i++)
        h[i] = gpu_bf16_bits(x[i]);
    void *d = gpu_upload(be, s, h, n * 2);
    free(h);
    return d;
}

/* Waits for the stream and copies a bf16 device array back as floats. */
static inline float *gpu_download_bf16(backend_stream *s, const void *d, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * 2);
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!h || !x || backend_memcpy_async(s, h, d, n * 2, BACKEND_COPY_D2H) != FERRY_OK ||
        backend_stream_synchronize(s) != FERRY_OK) {
        printf("Bail out! download of %zu bf16: %s\n", n, ferry_last_error());
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = gpu_bf16_value(h[i]);
    free(h);
    return x;
}

static inline float *gpu_download_f32(backend_stream *s, const void *d, size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x || backend_memcpy_async(s, x, d, n * 4, BACKEND_COPY_D2H) != FERRY_OK ||
        backend_stream_synchronize(s) != FERRY_OK) {
        printf("Bail out! download of %zu floats: %s\n", n, ferry_last_error());
        exit(1);
    }
    return x;
}

typedef struct gpu_err {
    double max_abs; /* max |got - want| */
    double rel;     /* ||got - want|| / ||want|| (want == 0: ||got||) */
} gpu_err;

static inline gpu_err gpu_compare(const float *got, const float *want, size_t n)
{
    gpu_err e = {0, 0};
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

#endif
