/* tests/optim/test_half.c: bf16 and fp16 conversions against references
 * written here in double arithmetic (round to nearest even by rint), over
 * special values, every fp16 pattern and random fp32 patterns; the bulk
 * converters of every SIMD level this CPU has against the same references. */
#include <fenv.h>
#include <math.h>
#include <string.h>

#include "optim/half.h"
#include "tests/tap.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Rounds |x| to `prec` significant bits with minimum exponent emin
 * (subnormals below), nearest even; returns +inf at or past 2^(emax+1). */
static double round_format(double ax, int prec, int emin, int emax)
{
    int e;
    frexp(ax, &e); /* ax = f * 2^e, f in [0.5, 1) */
    e -= 1;        /* ax in [2^e, 2^(e+1)) */
    if (e < emin)
        e = emin;
    double ulp = ldexp(1.0, e - (prec - 1));
    double y = rint(ax / ulp) * ulp; /* rint: ties to even in the default mode */
    return y >= ldexp(1.0, emax + 1) ? INFINITY : y;
}

static uint16_t ref_bf16(float f)
{
    uint32_t u = bits(f);
    if (isnan(f))
        return 0xffff; /* marker: any NaN accepted, checked separately */
    double y = round_format(fabs((double)f), 8, -126, 127);
    return (uint16_t)((u >> 16 & 0x8000) | (bits((float)y) >> 16));
}

static uint16_t ref_f16(float f)
{
    uint32_t sign = bits(f) >> 16 & 0x8000;
    if (isnan(f))
        return 0xffff;
    double y = round_format(fabs((double)f), 11, -14, 15);
    if (isinf(y))
        return (uint16_t)(sign | 0x7c00);
    if (y < ldexp(1.0, -14))
        return (uint16_t)(sign | (uint16_t)(y / ldexp(1.0, -24)));
    int e;
    double fr = frexp(y, &e); /* y = fr * 2^e */
    uint32_t mant = (uint32_t)(fr * 2048.0) - 1024u;
    return (uint16_t)(sign | (uint32_t)(e - 1 + 15) << 10 | mant);
}

static double ref_f16_value(uint16_t h)
{
    int exp = h >> 10 & 0x1f, mant = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (exp == 31)
        return mant ? NAN : s * INFINITY;
    if (exp == 0)
        return s * ldexp(mant, -24);
    return s * ldexp(1024 + mant, exp - 25);
}

static int nan16_ok(uint16_t h, int f16) /* a quiet NaN in the 16-bit format */
{
    return f16 ? (h & 0x7e00) == 0x7e00 : (h & 0x7fc0) == 0x7fc0;
}

/* Special and random fp32 inputs. */
static size_t make_inputs(float *x, size_t cap, uint64_t *rng)
{
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.99f,
                             65520.0f, 65536.0f, 3.4028235e38f, -3.4028235e38f, 1e-45f, 1.17549435e-38f,
                             5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f, 6.097555e-5f, 6.1035156e-5f,
                             1.00390625f, 1.01171875f, 1.0048828f, 1.0009766f, 1.0014648f,
                             from_bits(0x7f800001), from_bits(0xffa00000), from_bits(0x3f808000),
                             from_bits(0x3f818000), from_bits(0x7f7f8000), from_bits(0x7f7fffff)};
    size_t n = 0;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        x[n++] = special[i];
    while (n < cap) {
        uint32_t u = (uint32_t)tap_rand_u64(rng);
        if (n % 3 == 0) /* bias toward the fp16 range and exact ties */
            u = (u & 0x8000ffffu) | ((0x30u + (u >> 16) % 0x20u) << 23) | ((n % 5 == 0) ? 0x1000u : 0);
        x[n++] = from_bits(u);
    }
    return n;
}

static void check_scalar_down(const float *x, size_t n)
{
    size_t bad_bf = 0, bad_h = 0, bad_nan = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t b = dtype_f32_to_bf16(x[i]), h = dtype_f32_to_f16(x[i]);
        if (isnan(x[i])) {
            bad_nan += !nan16_ok(b, 0) + !nan16_ok(h, 1);
            continue;
        }
        if (b != ref_bf16(x[i]) && bad_bf++ < 3)
            tap_diag("  bf16(%a = %08x): got %04x, want %04x", (double)x[i], bits(x[i]), b, ref_bf16(x[i]));
        if (h != ref_f16(x[i]) && bad_h++ < 3)
            tap_diag("  f16(%a = %08x): got %04x, want %04x", (double)x[i], bits(x[i]), h, ref_f16(x[i]));
    }
    TAP_IS_INT(bad_bf, 0, "scalar fp32->bf16 rounds to nearest even on %zu inputs", n);
    TAP_IS_INT(bad_h, 0, "scalar fp32->fp16 rounds to nearest even on %zu inputs", n);
    TAP_IS_INT(bad_nan, 0, "scalar: NaN stays a quiet NaN in bf16 and fp16");
}

static void check_scalar_up(void)
{
    size_t bad = 0, bad_bf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = ref_f16_value((uint16_t)h);
        float got = dtype_f16_to_f32((uint16_t)h);
        int ok = isnan(want) ? isnan(got) && (bits(got) & 0x00400000u) : (double)got == want &&
                 !signbit(got) == !signbit(want);
        if (!ok && bad++ < 3)
            tap_diag("  f16 %04x: got %a, want %a", h, (double)got, want);
        float b = dtype_bf16_to_f32((uint16_t)h);
        uint32_t back = bits(b) >> 16;
        bad_bf += back != h || (bits(b) & 0xffff) != 0;
    }
    TAP_IS_INT(bad, 0, "every fp16 pattern -> fp32 exact (NaN -> quiet NaN)");
    TAP_IS_INT(bad_bf, 0, "every bf16 pattern -> fp32 exact");
}

static void check_bulk(const float *x, size_t n, cpu_simd level)
{
    const char *name = cpu_simd_name(level);
    uint16_t *b = malloc(n * 2), *h = malloc(n * 2);
    float *back = malloc(n * 4);
    /* odd offsets: unaligned pointers and a tail on every level */
    size_t off = 3, len = n - off - 2;
    TAP_IS_STATUS(half_convert_level(b, FERRY_DTYPE_BF16, x + off, FERRY_DTYPE_F32, len, level), FERRY_OK, "%s: f32->bf16", name);
    TAP_IS_STATUS(half_convert_level(h, FERRY_DTYPE_F16, x + off, FERRY_DTYPE_F32, len, level), FERRY_OK, "%s: f32->f16", name);
    size_t bad = 0;
    for (size_t i = 0; i < len; i++) {
        float xi = x[off + i];
        bad += isnan(xi) ? !nan16_ok(b[i], 0) || !nan16_ok(h[i], 1)
                         : b[i] != dtype_f32_to_bf16(xi) || h[i] != dtype_f32_to_f16(xi);
        bad += !isnan(xi) && (b[i] != ref_bf16(xi) || h[i] != ref_f16(xi));
    }
    TAP_IS_INT(bad, 0, "%s: bulk fp32->bf16/fp16 equal to the reference rounding on %zu elements", name, len);
    TAP_IS_STATUS(half_convert_level(back, FERRY_DTYPE_F32, h, FERRY_DTYPE_F16, len, level), FERRY_OK, "%s: f16->f32", name);
    bad = 0;
    for (size_t i = 0; i < len; i++) {
        double want = ref_f16_value(h[i]);
        bad += isnan(want) ? !isnan(back[i]) : (double)back[i] != want;
    }
    TAP_IS_INT(bad, 0, "%s: bulk fp16->fp32 exact", name);
    TAP_IS_STATUS(half_convert_level(back, FERRY_DTYPE_F32, b, FERRY_DTYPE_BF16, len, level), FERRY_OK, "%s: bf16->f32", name);
    bad = 0;
    for (size_t i = 0; i < len; i++)
        bad += bits(back[i]) != (uint32_t)b[i] << 16;
    TAP_IS_INT(bad, 0, "%s: bulk bf16->fp32 exact", name);
    for (size_t k = 0; k < 20; k++) { /* every short length */
        uint16_t o[20];
        memset(o, 0xee, sizeof o);
        half_convert_level(o, FERRY_DTYPE_BF16, x + 40, FERRY_DTYPE_F32, k, level);
        size_t wrong = 0;
        for (size_t i = 0; i < 20; i++)
            wrong += i < k ? o[i] != dtype_f32_to_bf16(x[40 + i]) : o[i] != 0xeeee;
        if (wrong)
            bad++;
    }
    TAP_IS_INT(bad, 0, "%s: lengths 0..19 write exactly their elements", name);
    free(b);
    free(h);
    free(back);
}

int main(void)
{
    uint64_t seed = 0x5eed0004u, rng = seed;
    tap_diag("seed %llu", (unsigned long long)seed);
    if (fegetround() != FE_TONEAREST)
        tap_plan_skip("rounding mode is not to-nearest");
    size_t n = 300000;
    float *x = malloc(n * sizeof *x);
    n = make_inputs(x, n, &rng);
    check_scalar_down(x, n);
    check_scalar_up();
    for (int l = CPU_SIMD_SCALAR; l <= (int)cpu_simd_detect(); l++)
        check_bulk(x, n, (cpu_simd)l);
    if (cpu_simd_detect() < CPU_SIMD_AVX512)
        tap_diag("this CPU lacks AVX-512: that path is not exercised here");

    tp_pool *pool = NULL;
    TAP_IS_STATUS(tp_pool_create(2, -1, &pool), FERRY_OK, "pool for the parallel convert");
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    half_convert_level(a, FERRY_DTYPE_BF16, x, FERRY_DTYPE_F32, n, CPU_SIMD_SCALAR);
    TAP_IS_STATUS(half_convert_pool(pool, b, FERRY_DTYPE_BF16, x, FERRY_DTYPE_F32, n), FERRY_OK, "parallel convert");
    TAP_IS_INT(memcmp(a, b, n * 2), 0, "parallel convert equals the scalar one");
    TAP_IS_STATUS(half_convert(NULL, FERRY_DTYPE_BF16, x, FERRY_DTYPE_F32, 4), FERRY_ERR_INVALID_ARGUMENT, "NULL destination refused");
    TAP_IS_STATUS(half_convert(b, (ferry_dtype)7, x, FERRY_DTYPE_F32, 4), FERRY_ERR_INVALID_ARGUMENT, "unknown type refused");
    TAP_IS_INT(dtype_size(FERRY_DTYPE_BF16), 2, "bf16 is 2 bytes");
    tp_pool_destroy(pool);
    free(a);
    free(b);
    free(x);
    return tap_done();
}
