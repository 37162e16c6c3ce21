/* The gpu tests' side of dev/ops/opcheck.h: helpers that allocate what they
 * return and end the test with a TAP "Bail out!" when the host or the backend
 * fails, since a test cannot go on without its buffers. */
#ifndef FERRY_TESTS_GPU_UTIL_H
#define FERRY_TESTS_GPU_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "dev/ops/opcheck.h"

static inline void gpu_bail_unless(ferry_status st, const char *what, size_t n)
{
    if (st != FERRY_OK) {
        printf("Bail out! %s (%zu values): %s\n", what, n, ferry_last_error());
        exit(1);
    }
}

static inline float *gpu_floats(size_t n)
{
    float *x = (float *)malloc((n ? n : 1) * sizeof *x);
    gpu_bail_unless(x ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory"), "host array", n);
    return x;
}

/* n values uniform in [lo, hi), exact in bf16 and fp16, from the test's seeded stream. */
static inline float *gpu_rand_array(uint64_t *state, size_t n, float lo, float hi)
{
    float *x = gpu_floats(n);
    opcheck_rand_fill(state, x, n, lo, hi);
    return x;
}

static inline void *gpu_upload(backend *be, backend_stream *s, const void *src, size_t bytes)
{
    void *d = NULL;
    gpu_bail_unless(opcheck_upload(be, s, src, bytes, &d), "device buffer", bytes);
    return d;
}

static inline void *gpu_upload_bf16(backend *be, backend_stream *s, const float *x, size_t n)
{
    void *d = NULL;
    gpu_bail_unless(opcheck_upload_bf16(be, s, x, n, &d), "bf16 device buffer", n);
    return d;
}

static inline float *gpu_download_bf16(backend_stream *s, const void *d, size_t n)
{
    float *x = gpu_floats(n);
    gpu_bail_unless(opcheck_download_bf16(s, d, n, x), "download of bf16", n);
    return x;
}

/* The same for the 16-bit storage type t (bf16 or f16). */
static inline void *gpu_upload_as(backend *be, backend_stream *s, const float *x, size_t n, ferry_dtype t)
{
    void *d = NULL;
    gpu_bail_unless(opcheck_upload_as(be, s, x, n, t, &d), "16-bit device buffer", n);
    return d;
}

static inline float *gpu_download_as(backend_stream *s, const void *d, size_t n, ferry_dtype t)
{
    float *x = gpu_floats(n);
    gpu_bail_unless(opcheck_download_as(s, d, n, t, x), "download of 16-bit values", n);
    return x;
}

static inline float *gpu_download_f32(backend_stream *s, const void *d, size_t n)
{
    float *x = gpu_floats(n);
    gpu_bail_unless(opcheck_download_f32(s, d, n, x), "download of floats", n);
    return x;
}

#endif
