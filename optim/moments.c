/* optim/moments.c: the 8-bit maps and their thresholds (built once, on
 * first use), the forms' names, and whole-buffer conversion between the
 * forms. The layout, the maps and the rounding are defined in
 * optim/moments.h; the update's kernels are in simd_*.c. */
#include "optim/moments.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"

static float q8_map[2][256], q8_thr[2][255];
static moments_q8_buckets q8_buckets[2];
static int q8_fill[2];
static pthread_once_t q8_once = PTHREAD_ONCE_INIT;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* bitsandbytes' create_dynamic_map(signed, 7, 8), in double. */
static void build_map(int is_signed, float *out, float *thr)
{
    double d[256];
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int k = is_signed ? 1 << i : 1 << (i + 1); /* values between the k + 1 boundaries */
        double scale = pow(10.0, (double)(i - 6));
        for (int j = 0; j < k; j++) {
            double lo = 0.1 + 0.9 * j / k, hi = 0.1 + 0.9 * (j + 1) / k;
            d[n++] = scale * (lo + hi) / 2.0;
            if (is_signed)
                d[n++] = -scale * (lo + hi) / 2.0;
        }
    }
    d[n++] = 0.0;
    d[n++] = 1.0; /* n == 256 */
    qsort(d, 256, sizeof d[0], cmp_double);
    for (int i = 0; i < 256; i++)
        out[i] = (float)d[i];
    for (int i = 0; i < 255; i++) {
        /* m: the midpoint (nearest); v: the value itself (rounds up) */
        double mid = is_signed ? ((double)out[i] + (double)out[i + 1]) / 2.0 : (double)out[i];
        float t = (float)mid;
        if ((double)t > mid)
            t = nextafterf(t, -INFINITY);
        thr[i] = t;
    }
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The buckets of moments.h over [-1, 1]: each bucket's base, and the most
 * thresholds one holds. */
static void build_buckets(const float *thr, moments_q8_buckets *q, int *fill)
{
    *fill = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float a = from_bits(b << 16), z = from_bits((b << 16) | 0xffffu);
        float lo = a < z ? a : z, hi = a < z ? z : a;
        if (isnan(a) || isnan(z) || lo > 1.0f || hi < -1.0f) {
            q->base[b] = lo > 1.0f ? 255 : 0; /* never looked up: x is clamped */
            continue;
        }
        int below = 0, inside = 0;
        for (int k = 0; k < 255; k++) {
            below += thr[k] < lo;
            inside += thr[k] >= lo && thr[k] <= hi;
        }
        q->base[b] = (uint8_t)below;
        *fill = inside > *fill ? inside : *fill;
    }
    for (int k = 0; k < 255 + MOMENTS_Q8_BUCKET_MAX + 1; k++)
        q->thr[k] = k < 255 ? thr[k] : INFINITY;
}

static void build_maps(void)
{
    build_map(1, q8_map[1], q8_thr[1]);
    build_map(0, q8_map[0], q8_thr[0]);
    build_buckets(q8_thr[1], &q8_buckets[1], &q8_fill[1]);
    build_buckets(q8_thr[0], &q8_buckets[0], &q8_fill[0]);
}

const moments_q8_buckets *moments_q8_buckets_of(int is_signed)
{
    pthread_once(&q8_once, build_maps);
    return &q8_buckets[is_signed ? 1 : 0];
}

int moments_q8_bucket_fill(int is_signed)
{
    pthread_once(&q8_once, build_maps);
    return q8_fill[is_signed ? 1 : 0];
}

const float *moments_q8_map(int is_signed)
{
    pthread_once(&q8_once, build_maps);
    return q8_map[is_signed ? 1 : 0];
}

const float *moments_q8_thresholds(int is_signed)
{
    pthread_once(&q8_once, build_maps);
    return q8_thr[is_signed ? 1 : 0];
}

const char *ferry_moments_name(ferry_moments form)
{
    switch (form) {
    case FERRY_MOMENTS_F32: return "f32";
    case FERRY_MOMENTS_BF16: return "bf16";
    case FERRY_MOMENTS_8BIT: return "8bit";
    }
    return "unknown";
}

ferry_status ferry_moments_parse(const char *name, ferry_moments *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_moments_parse: NULL argument");
    for (int f = FERRY_MOMENTS_F32; f <= FERRY_MOMENTS_8BIT; f++) {
        if (strcmp(name, ferry_moments_name((ferry_moments)f)) == 0) {
            *out = (ferry_moments)f;
            return FERRY_OK;
        }
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "unknown moments form '%s': use f32, bf16 or 8bit", name);
}

ferry_status moments_check_form(ferry_moments form, const char *who)
{
    if (form == FERRY_MOMENTS_F32 || form == FERRY_MOMENTS_BF16 || form == FERRY_MOMENTS_8BIT)
        return FERRY_OK;
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: moments form %d; use f32, bf16 or 8bit (ferry_moments)", who,
                   (int)form);
}

/* Element i of a moment in form f as fp32. */
static float load_one(const void *src, ferry_moments f, size_t n, size_t i, const float *map)
{
    if (f == FERRY_MOMENTS_F32)
        return ((const float *)src)[i];
    if (f == FERRY_MOMENTS_BF16)
        return moments_bf16_load(((const uint16_t *)src)[i]);
    const float *absmax = moments_q8_absmax((void *)(uintptr_t)src, n);
    return map[((const uint8_t *)src)[i]] * absmax[i / MOMENTS_Q8_BLOCK];
}

/* One block of values into codes and its absmax, as the update stores it. */
static void quantize_block(uint8_t *codes, float *absmax, const float *x, size_t len, const moments_q8_buckets *thr)
{
    float mx = 0.0f;
    for (size_t i = 0; i < len; i++)
        mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
    *absmax = mx;
    for (size_t i = 0; i < len; i++)
        codes[i] = moments_q8_code(thr, mx > 0.0f ? x[i] / mx : 0.0f);
}

ferry_status moments_convert(void *dst, ferry_moments df, const void *src, ferry_moments sf, size_t n,
                             int signed_map)
{
    ferry_status st = moments_check_form(df, "moments_convert");
    if (st == FERRY_OK)
        st = moments_check_form(sf, "moments_convert");
    if (st != FERRY_OK)
        return st;
    if (n > 0 && (!dst || !src))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "moments_convert: a NULL buffer for %zu elements", n);
    if (df == sf) {
        memcpy(dst, src, moments_bytes(df, n));
        return FERRY_OK;
    }
    const float *map = moments_q8_map(signed_map);
    const moments_q8_buckets *thr = moments_q8_buckets_of(signed_map);
    float block[MOMENTS_Q8_BLOCK];
    for (size_t b0 = 0; b0 < n; b0 += MOMENTS_Q8_BLOCK) {
        size_t len = n - b0 < MOMENTS_Q8_BLOCK ? n - b0 : MOMENTS_Q8_BLOCK;
        for (size_t i = 0; i < len; i++)
            block[i] = load_one(src, sf, n, b0 + i, map);
        if (df == FERRY_MOMENTS_F32)
            memcpy((float *)dst + b0, block, len * sizeof(float));
        else if (df == FERRY_MOMENTS_BF16)
            for (size_t i = 0; i < len; i++)
                ((uint16_t *)dst)[b0 + i] = dtype_f32_to_bf16(block[i]);
        else
            quantize_block((uint8_t *)dst + b0, moments_q8_absmax(dst, n) + b0 / MOMENTS_Q8_BLOCK, block, len, thr);
    }
    if (df == FERRY_MOMENTS_8BIT) /* the padding, so equal states are equal bytes */
        memset((uint8_t *)dst + n, 0, moments_q8_codes_bytes(n) - n);
    return FERRY_OK;
}
