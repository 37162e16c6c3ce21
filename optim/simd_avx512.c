/* optim/simd_avx512.c: the AVX-512 (F, BW, VL, with F16C) kernels. Compiled
 * through target attributes so the rest of the build stays baseline; only
 * called when cpu_simd_detect() reports AVX-512. Tails use masked loads and
 * stores, so no scalar code (which the compiler could contract differently)
 * runs here. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "optim/kernels.h"

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL512 static inline __attribute__((always_inline)) T512

INL512 __m512 ld512(const void *src, ferry_dtype t, size_t i, bool tail, __mmask16 k)
{
    if (t == FERRY_DTYPE_F32)
        return tail ? _mm512_maskz_loadu_ps(k, (const float *)src + i) : _mm512_loadu_ps((const float *)src + i);
    const uint16_t *h = (const uint16_t *)src + i;
    __m256i x = tail ? _mm256_maskz_loadu_epi16(k, h) : _mm256_loadu_si256((const __m256i *)h);
    if (t == FERRY_DTYPE_F16)
        return _mm512_cvtph_ps(x);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

/* fp32 -> bf16, nearest even; NaN -> quiet NaN (as dtype_f32_to_bf16). */
INL512 __m256i bf16_512(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)),
                                                      _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

INL512 void st512(void *dst, ferry_dtype t, size_t i, __m512 x, bool tail, __mmask16 k, bool nt)
{
    if (t == FERRY_DTYPE_F32) {
        float *d = (float *)dst + i;
        if (tail)
            _mm512_mask_storeu_ps(d, k, x);
        else if (nt)
            _mm512_stream_ps(d, x);
        else
            _mm512_storeu_ps(d, x);
        return;
    }
    __m256i h = t == FERRY_DTYPE_F16 ? _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) : bf16_512(x);
    uint16_t *d = (uint16_t *)dst + i;
    if (tail)
        _mm256_mask_storeu_epi16(d, k, h);
    else if (nt)
        _mm256_stream_si256((__m256i *)d, h);
    else
        _mm256_storeu_si256((__m256i *)d, h);
}

typedef struct c512 {
    __m512 b1, omb1, b2, omb2, bc2s, eps, nstep, decay, gs;
} c512;

INL512 void adamw16(const c512 *c, const adamw_span *s, size_t i, ferry_dtype gt, bool copy,
                    ferry_dtype ct, bool tail, __mmask16 k, bool nt)
{
    __m512 g = _mm512_mul_ps(ld512(s->g, gt, i, tail, k), c->gs);
    __m512 p = ld512(s->p, FERRY_DTYPE_F32, i, tail, k);
    __m512 m = ld512(s->m, FERRY_DTYPE_F32, i, tail, k);
    __m512 v = ld512(s->v, FERRY_DTYPE_F32, i, tail, k);
    m = _mm512_fmadd_ps(c->omb1, g, _mm512_mul_ps(c->b1, m));
    v = _mm512_fmadd_ps(_mm512_mul_ps(c->omb2, g), g, _mm512_mul_ps(c->b2, v));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c->bc2s), c->eps);
    __m512 pd = _mm512_mul_ps(p, c->decay); /* torch: param.mul_(decay) */
    OPTIM_NO_CONTRACT(pd);
    p = _mm512_add_ps(pd, _mm512_div_ps(_mm512_mul_ps(c->nstep, m), denom)); /* addcdiv */
    st512(s->p, FERRY_DTYPE_F32, i, p, tail, k, false);
    st512(s->m, FERRY_DTYPE_F32, i, m, tail, k, false);
    st512(s->v, FERRY_DTYPE_F32, i, v, tail, k, false);
    if (copy)
        st512(s->copy, ct, i, p, tail, k, nt);
}

INL512 void adamw512_body(const adamw_consts *ac, const adamw_span *s, ferry_dtype gt, bool copy, ferry_dtype ct)
{
    c512 c = {_mm512_set1_ps(ac->beta1), _mm512_set1_ps(ac->one_minus_beta1), _mm512_set1_ps(ac->beta2),
              _mm512_set1_ps(ac->one_minus_beta2), _mm512_set1_ps(ac->bc2_sqrt), _mm512_set1_ps(ac->eps),
              _mm512_set1_ps(ac->neg_step), _mm512_set1_ps(ac->decay), _mm512_set1_ps(ac->grad_scale)};
    size_t n = s->n, i = 0;
    /* The weight copy is written, never read: streaming stores skip reading
     * its lines first, when the copy is aligned for them. */
    size_t vbytes = copy ? 16 * dtype_size(ct) : 0;
    bool nt = copy && ((uintptr_t)s->copy % vbytes) == 0;
    for (; i + 16 <= n; i += 16)
        adamw16(&c, s, i, gt, copy, ct, false, 0xffff, nt);
    if (i < n)
        adamw16(&c, s, i, gt, copy, ct, true, (__mmask16)((1u << (n - i)) - 1u), false);
    if (nt)
        _mm_sfence();
}

#define ADAMW512_CASE(GT)                                                                    \
    case GT:                                                                                 \
        if (!s->copy)                                                                        \
            adamw512_body(c, s, GT, false, FERRY_DTYPE_F32);                                       \
        else if (s->ct == FERRY_DTYPE_BF16)                                                        \
            adamw512_body(c, s, GT, true, FERRY_DTYPE_BF16);                                       \
        else if (s->ct == FERRY_DTYPE_F16)                                                         \
            adamw512_body(c, s, GT, true, FERRY_DTYPE_F16);                                        \
        else                                                                                 \
            adamw512_body(c, s, GT, true, FERRY_DTYPE_F32);                                        \
        return;

T512 void optim_adamw_avx512(const adamw_consts *c, const adamw_span *s)
{
    switch (s->gt) {
        ADAMW512_CASE(FERRY_DTYPE_F32)
        ADAMW512_CASE(FERRY_DTYPE_BF16)
        ADAMW512_CASE(FERRY_DTYPE_F16)
    default: break; /* checked by adamw_check */
    }
}

INL512 double sumsq512_body(const void *g, ferry_dtype t, size_t n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    size_t i = 0;
    for (; i < n; i += 16) {
        bool tail = i + 16 > n;
        __m512 x = ld512(g, t, i, tail, tail ? (__mmask16)((1u << (n - i)) - 1u) : 0xffff);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0); /* the square is exact: same as the scalar add */
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    double lane[16];
    _mm512_storeu_pd(lane, a0);
    _mm512_storeu_pd(lane + 8, a1);
    double s = 0;
    for (int l = 0; l < 16; l++)
        s += lane[l];
    return s;
}

T512 double optim_sumsq_avx512(const void *g, ferry_dtype t, size_t n)
{
    switch (t) {
    case FERRY_DTYPE_BF16: return sumsq512_body(g, FERRY_DTYPE_BF16, n);
    case FERRY_DTYPE_F16: return sumsq512_body(g, FERRY_DTYPE_F16, n);
    default: break;
    }
    return sumsq512_body(g, FERRY_DTYPE_F32, n);
}

INL512 void convert512_body(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        st512(dst, dt, i, ld512(src, st, i, false, 0xffff), false, 0xffff, false);
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        st512(dst, dt, i, ld512(src, st, i, true, k), true, k, false);
    }
}

T512 void optim_convert_avx512(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    if (st == FERRY_DTYPE_F32 && dt == FERRY_DTYPE_BF16)
        convert512_body(dst, FERRY_DTYPE_BF16, src, FERRY_DTYPE_F32, n);
    else if (st == FERRY_DTYPE_F32 && dt == FERRY_DTYPE_F16)
        convert512_body(dst, FERRY_DTYPE_F16, src, FERRY_DTYPE_F32, n);
    else if (st == FERRY_DTYPE_BF16 && dt == FERRY_DTYPE_F32)
        convert512_body(dst, FERRY_DTYPE_F32, src, FERRY_DTYPE_BF16, n);
    else if (st == FERRY_DTYPE_F16 && dt == FERRY_DTYPE_F32)
        convert512_body(dst, FERRY_DTYPE_F32, src, FERRY_DTYPE_F16, n);
    else
        optim_convert_scalar(dst, dt, src, st, n);
}
