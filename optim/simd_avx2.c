/* optim/simd_avx2.c: the AVX2 + FMA + F16C kernels. Compiled through target
 * attributes; only called when cpu_simd_detect() reports at least AVX2. A
 * tail shorter than a vector is staged through small buffers and run through
 * the same vector code, so every element sees the same instructions. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "optim/kernels.h"

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL256 static inline __attribute__((always_inline)) T256

INL256 __m256 ld256(const void *src, ferry_dtype t, size_t i)
{
    if (t == FERRY_DTYPE_F32)
        return _mm256_loadu_ps((const float *)src + i);
    __m128i x = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
    if (t == FERRY_DTYPE_F16)
        return _mm256_cvtph_ps(x);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
}

/* fp32 -> bf16, nearest even; NaN -> quiet NaN (as dtype_f32_to_bf16). */
INL256 __m128i bf16_256(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)),
                                                      _mm256_set1_epi32(0x7fff)));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* 32 -> 16 bits: pack within 128-bit lanes, then gather the two halves */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
}

INL256 void st256(void *dst, ferry_dtype t, size_t i, __m256 x, bool nt)
{
    if (t == FERRY_DTYPE_F32) {
        if (nt)
            _mm256_stream_ps((float *)dst + i, x);
        else
            _mm256_storeu_ps((float *)dst + i, x);
        return;
    }
    __m128i h = t == FERRY_DTYPE_F16 ? _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : bf16_256(x);
    __m128i *d = (__m128i *)((uint16_t *)dst + i);
    if (nt)
        _mm_stream_si128(d, h);
    else
        _mm_storeu_si128(d, h);
}

typedef struct c256 {
    __m256 b1, omb1, b2, omb2, bc2s, eps, nstep, decay, gs;
} c256;

INL256 void adamw8(const c256 *c, const adamw_span *s, size_t i, ferry_dtype gt, bool copy, ferry_dtype ct, bool nt)
{
    __m256 g = _mm256_mul_ps(ld256(s->g, gt, i), c->gs);
    __m256 p = _mm256_loadu_ps(s->p + i);
    __m256 m = _mm256_loadu_ps(s->m + i);
    __m256 v = _mm256_loadu_ps(s->v + i);
    m = _mm256_fmadd_ps(c->omb1, g, _mm256_mul_ps(c->b1, m));
    v = _mm256_fmadd_ps(_mm256_mul_ps(c->omb2, g), g, _mm256_mul_ps(c->b2, v));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c->bc2s), c->eps);
    __m256 pd = _mm256_mul_ps(p, c->decay); /* torch: param.mul_(decay) */
    OPTIM_NO_CONTRACT(pd);
    p = _mm256_add_ps(pd, _mm256_div_ps(_mm256_mul_ps(c->nstep, m), denom)); /* addcdiv */
    _mm256_storeu_ps(s->p + i, p);
    _mm256_storeu_ps(s->m + i, m);
    _mm256_storeu_ps(s->v + i, v);
    if (copy)
        st256(s->copy, ct, i, p, nt);
}

INL256 void adamw256_body(const adamw_consts *ac, const adamw_span *s, ferry_dtype gt, bool copy, ferry_dtype ct)
{
    c256 c = {_mm256_set1_ps(ac->beta1), _mm256_set1_ps(ac->one_minus_beta1), _mm256_set1_ps(ac->beta2),
              _mm256_set1_ps(ac->one_minus_beta2), _mm256_set1_ps(ac->bc2_sqrt), _mm256_set1_ps(ac->eps),
              _mm256_set1_ps(ac->neg_step), _mm256_set1_ps(ac->decay), _mm256_set1_ps(ac->grad_scale)};
    size_t n = s->n, i = 0;
    size_t vbytes = copy ? 8 * dtype_size(ct) : 0;
    bool nt = copy && ((uintptr_t)s->copy % vbytes) == 0; /* write-only copy: skip the line reads */
    for (; i + 8 <= n; i += 8)
        adamw8(&c, s, i, gt, copy, ct, nt);
    if (nt)
        _mm_sfence();
    if (i == n)
        return;
    size_t r = n - i, gsz = dtype_size(gt), csz = copy ? dtype_size(ct) : 0;
    float p[8] = {0}, m[8] = {0}, v[8] = {0}, gbuf[8] = {0}, cbuf[8];
    memcpy(p, s->p + i, r * 4);
    memcpy(m, s->m + i, r * 4);
    memcpy(v, s->v + i, r * 4);
    memcpy(gbuf, (const char *)s->g + i * gsz, r * gsz);
    adamw_span t = {p, m, v, gbuf, gt, cbuf, ct, 8};
    adamw8(&c, &t, 0, gt, copy, ct, false);
    memcpy(s->p + i, p, r * 4);
    memcpy(s->m + i, m, r * 4);
    memcpy(s->v + i, v, r * 4);
    if (copy)
        memcpy((char *)s->copy + i * csz, cbuf, r * csz);
}

#define ADAMW256_CASE(GT)                                                                    \
    case GT:                                                                                 \
        if (!s->copy)                                                                        \
            adamw256_body(c, s, GT, false, FERRY_DTYPE_F32);                                       \
        else if (s->ct == FERRY_DTYPE_BF16)                                                        \
            adamw256_body(c, s, GT, true, FERRY_DTYPE_BF16);                                       \
        else if (s->ct == FERRY_DTYPE_F16)                                                         \
            adamw256_body(c, s, GT, true, FERRY_DTYPE_F16);                                        \
        else                                                                                 \
            adamw256_body(c, s, GT, true, FERRY_DTYPE_F32);                                        \
        return;

T256 void optim_adamw_avx2(const adamw_consts *c, const adamw_span *s)
{
    switch (s->gt) {
        ADAMW256_CASE(FERRY_DTYPE_F32)
        ADAMW256_CASE(FERRY_DTYPE_BF16)
        ADAMW256_CASE(FERRY_DTYPE_F16)
    default: break; /* checked by adamw_check */
    }
}

/* 16 elements into lanes 0-3, 4-7, 8-11, 12-15 of four accumulators. */
INL256 void sumsq16(const void *g, ferry_dtype t, size_t i, __m256d a[4])
{
    for (int h = 0; h < 2; h++) {
        __m256 x = ld256(g, t, i + 8 * (size_t)h);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
        a[2 * h] = _mm256_fmadd_pd(lo, lo, a[2 * h]); /* exact square: same as the scalar add */
        a[2 * h + 1] = _mm256_fmadd_pd(hi, hi, a[2 * h + 1]);
    }
}

INL256 double sumsq256_body(const void *g, ferry_dtype t, size_t n)
{
    __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        sumsq16(g, t, i, a);
    if (i < n) { /* zero-padded tail: adding +0 changes no lane */
        float buf[16] = {0};
        for (size_t j = 0; i + j < n; j++)
            buf[j] = dtype_load_f32(g, t, i + j);
        sumsq16(buf, FERRY_DTYPE_F32, 0, a);
    }
    double lane[16];
    for (int k = 0; k < 4; k++)
        _mm256_storeu_pd(lane + 4 * k, a[k]);
    double s = 0;
    for (int l = 0; l < 16; l++)
        s += lane[l];
    return s;
}

T256 double optim_sumsq_avx2(const void *g, ferry_dtype t, size_t n)
{
    switch (t) {
    case FERRY_DTYPE_BF16: return sumsq256_body(g, FERRY_DTYPE_BF16, n);
    case FERRY_DTYPE_F16: return sumsq256_body(g, FERRY_DTYPE_F16, n);
    default: break;
    }
    return sumsq256_body(g, FERRY_DTYPE_F32, n);
}

INL256 void convert256_body(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        st256(dst, dt, i, ld256(src, st, i), false);
    if (i < n) {
        size_t r = n - i;
        unsigned char in[32] = {0}, out[32];
        memcpy(in, (const char *)src + i * dtype_size(st), r * dtype_size(st));
        st256(out, dt, 0, ld256(in, st, 0), false);
        memcpy((char *)dst + i * dtype_size(dt), out, r * dtype_size(dt));
    }
}

T256 void optim_convert_avx2(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    if (st == FERRY_DTYPE_F32 && dt == FERRY_DTYPE_BF16)
        convert256_body(dst, FERRY_DTYPE_BF16, src, FERRY_DTYPE_F32, n);
    else if (st == FERRY_DTYPE_F32 && dt == FERRY_DTYPE_F16)
        convert256_body(dst, FERRY_DTYPE_F16, src, FERRY_DTYPE_F32, n);
    else if (st == FERRY_DTYPE_BF16 && dt == FERRY_DTYPE_F32)
        convert256_body(dst, FERRY_DTYPE_F32, src, FERRY_DTYPE_BF16, n);
    else if (st == FERRY_DTYPE_F16 && dt == FERRY_DTYPE_F32)
        convert256_body(dst, FERRY_DTYPE_F32, src, FERRY_DTYPE_F16, n);
    else
        optim_convert_scalar(dst, dt, src, st, n);
}
