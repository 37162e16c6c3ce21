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

/* adamw_element on 8 lanes: g as loaded, m and v updated in place; the new weights. */
INL256 __m256 update8(const c256 *c, __m256 g, __m256 p, __m256 *mp, __m256 *vp)
{
    g = _mm256_mul_ps(g, c->gs);
    __m256 m = _mm256_fmadd_ps(c->omb1, g, _mm256_mul_ps(c->b1, *mp));
    __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(c->omb2, g), g, _mm256_mul_ps(c->b2, *vp));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c->bc2s), c->eps);
    __m256 pd = _mm256_mul_ps(p, c->decay); /* torch: param.mul_(decay) */
    OPTIM_NO_CONTRACT(pd);
    *mp = m;
    *vp = v;
    return _mm256_add_ps(pd, _mm256_div_ps(_mm256_mul_ps(c->nstep, m), denom)); /* addcdiv */
}

INL256 void adamw8(const c256 *c, const adamw_span *s, size_t i, ferry_dtype gt, bool copy, ferry_dtype ct, bool nt)
{
    __m256 m = _mm256_loadu_ps(s->m + i);
    __m256 v = _mm256_loadu_ps(s->v + i);
    __m256 p = update8(c, ld256(s->g, gt, i), _mm256_loadu_ps(s->p + i), &m, &v);
    _mm256_storeu_ps(s->p + i, p);
    _mm256_storeu_ps(s->m + i, m);
    _mm256_storeu_ps(s->v + i, v);
    if (copy)
        st256(s->copy, ct, i, p, nt);
}

INL256 c256 consts256(const adamw_consts *ac)
{
    c256 c = {_mm256_set1_ps(ac->beta1), _mm256_set1_ps(ac->one_minus_beta1), _mm256_set1_ps(ac->beta2),
              _mm256_set1_ps(ac->one_minus_beta2), _mm256_set1_ps(ac->bc2_sqrt), _mm256_set1_ps(ac->eps),
              _mm256_set1_ps(ac->neg_step), _mm256_set1_ps(ac->decay), _mm256_set1_ps(ac->grad_scale)};
    return c;
}

INL256 void adamw256_body(const adamw_consts *ac, const adamw_span *s, ferry_dtype gt, bool copy, ferry_dtype ct)
{
    c256 c = consts256(ac);
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

/* ---- compact moments (optim/moments.h): the same update8, other loads and stores ---- */

INL256 __m256i mix32_256(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bU));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* moments_random(key, index + lane) in lanes 0..7. */
INL256 __m256i random256(uint32_t key, uint64_t index)
{
    __m256i lo = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)index), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i hk;
    if ((uint32_t)index > UINT32_MAX - 7) { /* the low half wraps inside the vector */
        uint32_t h[8];
        for (int j = 0; j < 8; j++)
            h[j] = moments_mix32((uint32_t)((index + (uint64_t)j) >> 32) ^ key);
        hk = _mm256_loadu_si256((const __m256i *)h);
    } else { /* one high half: its mix once */
        hk = _mm256_set1_epi32((int)moments_mix32((uint32_t)(index >> 32) ^ key));
    }
    return mix32_256(_mm256_xor_si256(lo, hk));
}

/* moments_bf16_round on 8 lanes. */
INL256 __m128i bf16_sr256(__m256 x, __m256i r)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i t = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_and_si256(r, _mm256_set1_epi32(0xffff))), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    t = _mm256_blendv_epi8(t, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(t, t), 0x08));
}

INL256 void bf16_8(const c256 *c, const adamw_cspan *s, size_t i, ferry_dtype gt, bool copy, ferry_dtype ct)
{
    __m256 m = ld256(s->m, FERRY_DTYPE_BF16, i), v = ld256(s->v, FERRY_DTYPE_BF16, i);
    __m256 p = update8(c, ld256(s->g, gt, i), _mm256_loadu_ps(s->p + i), &m, &v);
    _mm256_storeu_ps(s->p + i, p);
    _mm_storeu_si128((__m128i *)((uint16_t *)s->m + i), bf16_sr256(m, random256(s->key_m, s->index0 + i)));
    _mm_storeu_si128((__m128i *)((uint16_t *)s->v + i), bf16_sr256(v, random256(s->key_v, s->index0 + i)));
    if (copy)
        st256(s->copy, ct, i, p, false);
}

INL256 void bf16_body(const adamw_consts *ac, const adamw_cspan *s, ferry_dtype gt, bool copy, ferry_dtype ct)
{
    c256 c = consts256(ac);
    size_t n = s->n, i = 0;
    for (; i + 8 <= n; i += 8)
        bf16_8(&c, s, i, gt, copy, ct);
    if (i == n)
        return;
    size_t r = n - i, gsz = dtype_size(gt), csz = copy ? dtype_size(ct) : 0;
    float p[8] = {0}, gbuf[8] = {0}, cbuf[8];
    uint16_t m[8] = {0}, v[8] = {0};
    memcpy(p, s->p + i, r * 4);
    memcpy(m, (const uint16_t *)s->m + i, r * 2);
    memcpy(v, (const uint16_t *)s->v + i, r * 2);
    memcpy(gbuf, (const char *)s->g + i * gsz, r * gsz);
    adamw_cspan t = *s;
    t.p = p, t.m = m, t.v = v, t.g = gbuf, t.copy = cbuf, t.n = 8, t.index0 = s->index0 + i;
    bf16_8(&c, &t, 0, gt, copy, ct);
    memcpy(s->p + i, p, r * 4);
    memcpy((uint16_t *)s->m + i, m, r * 2);
    memcpy((uint16_t *)s->v + i, v, r * 2);
    if (copy)
        memcpy((char *)s->copy + i * csz, cbuf, r * csz);
}

INL256 __m256 absmax_step(__m256 x, __m256 acc)
{
    /* maxps returns its second operand when the first is NaN: NaN is skipped, as in the scalar loop */
    return _mm256_max_ps(_mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))), acc);
}

INL256 __m256 dequant256(const void *codes, size_t i, const float *map, float absmax)
{
    __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)codes + i)));
    return _mm256_mul_ps(_mm256_i32gather_ps(map, k, 4), _mm256_set1_ps(absmax));
}

INL256 void q8_8(const c256 *c, const adamw_cspan *s, size_t i, ferry_dtype gt, bool copy, ferry_dtype ct, __m256 *mx,
                 __m256 *vx)
{
    __m256 m = dequant256(s->m, i, s->map_m, s->m_absmax), v = dequant256(s->v, i, s->map_v, s->v_absmax);
    __m256 p = update8(c, ld256(s->g, gt, i), _mm256_loadu_ps(s->p + i), &m, &v);
    _mm256_storeu_ps(s->p + i, p);
    _mm256_storeu_ps(s->m_new + i, m);
    _mm256_storeu_ps(s->v_new + i, v);
    *mx = absmax_step(m, *mx);
    *vx = absmax_step(v, *vx);
    if (copy)
        st256(s->copy, ct, i, p, false);
}

INL256 float hmax256(__m256 x, float acc)
{
    float l[8];
    _mm256_storeu_ps(l, x);
    for (int j = 0; j < 8; j++)
        acc = l[j] > acc ? l[j] : acc;
    return acc;
}

INL256 void q8_body(const adamw_consts *ac, const adamw_cspan *s, float max_out[2], ferry_dtype gt, bool copy,
                    ferry_dtype ct)
{
    c256 c = consts256(ac);
    __m256 mx = _mm256_setzero_ps(), vx = _mm256_setzero_ps();
    size_t n = s->n, i = 0;
    for (; i + 8 <= n; i += 8)
        q8_8(&c, s, i, gt, copy, ct, &mx, &vx);
    max_out[0] = hmax256(mx, max_out[0]);
    max_out[1] = hmax256(vx, max_out[1]);
    if (i == n)
        return;
    size_t r = n - i, gsz = dtype_size(gt), csz = copy ? dtype_size(ct) : 0;
    float p[8] = {0}, gbuf[8] = {0}, cbuf[8], mn[8], vn[8];
    uint8_t m[8] = {0}, v[8] = {0};
    memcpy(p, s->p + i, r * 4);
    memcpy(m, (const uint8_t *)s->m + i, r);
    memcpy(v, (const uint8_t *)s->v + i, r);
    memcpy(gbuf, (const char *)s->g + i * gsz, r * gsz);
    adamw_cspan t = *s;
    t.p = p, t.m = m, t.v = v, t.g = gbuf, t.copy = cbuf, t.n = 8, t.m_new = mn, t.v_new = vn;
    __m256 tm = _mm256_setzero_ps(), tv = _mm256_setzero_ps();
    q8_8(&c, &t, 0, gt, copy, ct, &tm, &tv);
    for (size_t j = 0; j < r; j++) { /* the staged lanes past r are not the block's */
        float a = __builtin_fabsf(mn[j]), b = __builtin_fabsf(vn[j]);
        max_out[0] = a > max_out[0] ? a : max_out[0];
        max_out[1] = b > max_out[1] ? b : max_out[1];
    }
    memcpy(s->p + i, p, r * 4);
    memcpy(s->m_new + i, mn, r * 4);
    memcpy(s->v_new + i, vn, r * 4);
    if (copy)
        memcpy((char *)s->copy + i * csz, cbuf, r * csz);
}

#define COMPACT256_CT(BODY, GT, ...)                                                                     \
    case GT:                                                                                             \
        if (!s->copy)                                                                                    \
            BODY(__VA_ARGS__, GT, false, FERRY_DTYPE_F32);                                               \
        else if (s->ct == FERRY_DTYPE_BF16)                                                              \
            BODY(__VA_ARGS__, GT, true, FERRY_DTYPE_BF16);                                               \
        else if (s->ct == FERRY_DTYPE_F16)                                                               \
            BODY(__VA_ARGS__, GT, true, FERRY_DTYPE_F16);                                                \
        else                                                                                             \
            BODY(__VA_ARGS__, GT, true, FERRY_DTYPE_F32);                                                \
        return;

T256 void optim_adamw_bf16_avx2(const adamw_consts *c, const adamw_cspan *s)
{
    switch (s->gt) {
        COMPACT256_CT(bf16_body, FERRY_DTYPE_F32, c, s)
        COMPACT256_CT(bf16_body, FERRY_DTYPE_BF16, c, s)
        COMPACT256_CT(bf16_body, FERRY_DTYPE_F16, c, s)
    default: break; /* checked by adamw_check */
    }
}

T256 void optim_adamw_q8_avx2(const adamw_consts *c, const adamw_cspan *s, float max_out[2])
{
    switch (s->gt) {
        COMPACT256_CT(q8_body, FERRY_DTYPE_F32, c, s, max_out)
        COMPACT256_CT(q8_body, FERRY_DTYPE_BF16, c, s, max_out)
        COMPACT256_CT(q8_body, FERRY_DTYPE_F16, c, s, max_out)
    default: break;
    }
}

/* moments_q8_code on 8 lanes: the clamp in the vector, the bucket's
 * lookups one lane at a time (AVX2's gathers are slower than 8 loads on
 * the CPUs measured). */
INL256 void codes256(uint8_t *dst, const moments_q8_buckets *q, __m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-1.0f)), _mm256_set1_ps(1.0f)); /* NaN -> -1 */
    float xs[8];
    uint32_t us[8];
    _mm256_storeu_ps(xs, x);
    _mm256_storeu_si256((__m256i *)us, _mm256_srli_epi32(_mm256_castps_si256(x), 16));
    for (int j = 0; j < 8; j++) {
        unsigned idx = q->base[us[j]];
        for (int k = 0, b = (int)idx; k < MOMENTS_Q8_BUCKET_MAX; k++)
            idx += xs[j] > q->thr[b + k];
        dst[j] = (uint8_t)idx;
    }
}

T256 void optim_q8_quantize_avx2(uint8_t *codes, const float *x, size_t n, float absmax, const moments_q8_buckets *thr)
{
    bool zero = !(absmax > 0.0f);
    __m256 a = _mm256_set1_ps(absmax);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        codes256(codes + i, thr, zero ? _mm256_setzero_ps() : _mm256_div_ps(_mm256_loadu_ps(x + i), a));
    if (i < n) {
        float buf[8] = {0};
        uint8_t out[8];
        memcpy(buf, x + i, (n - i) * 4);
        codes256(out, thr, zero ? _mm256_setzero_ps() : _mm256_div_ps(_mm256_loadu_ps(buf), a));
        memcpy(codes + i, out, n - i);
    }
}
