/* optim/simd_scalar.c: the portable kernels, the reference the vector paths
 * match bit for bit. Built for the baseline ISA: no contraction can fuse a
 * multiply and an add behind our back, and every fused step is an explicit
 * fmaf (a hardware instruction through glibc where the CPU has one). */
#include "optim/kernels.h"

void optim_adamw_scalar(const adamw_consts *c, const adamw_span *s)
{
    for (size_t i = 0; i < s->n; i++) {
        adamw_element(c, &s->p[i], &s->m[i], &s->v[i], dtype_load_f32(s->g, s->gt, i));
        if (s->copy)
            dtype_store_f32(s->copy, s->ct, i, s->p[i]);
    }
}

double optim_sumsq_scalar(const void *g, ferry_dtype t, size_t n)
{
    return numerics_sumsq_tile(g, t, n);
}

void optim_convert_scalar(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dtype_store_f32(dst, dt, i, dtype_load_f32(src, st, i));
}

void optim_adamw_bf16_scalar(const adamw_consts *c, const adamw_cspan *s)
{
    uint16_t *m = s->m, *v = s->v;
    for (size_t i = 0; i < s->n; i++) {
        float mf = moments_bf16_load(m[i]), vf = moments_bf16_load(v[i]);
        adamw_element(c, &s->p[i], &mf, &vf, dtype_load_f32(s->g, s->gt, i));
        m[i] = moments_bf16_round(mf, moments_random(s->key_m, s->index0 + i));
        v[i] = moments_bf16_round(vf, moments_random(s->key_v, s->index0 + i));
        if (s->copy)
            dtype_store_f32(s->copy, s->ct, i, s->p[i]);
    }
}

void optim_adamw_q8_scalar(const adamw_consts *c, const adamw_cspan *s, float max_out[2])
{
    const uint8_t *m = s->m, *v = s->v;
    float mx = max_out[0], vx = max_out[1];
    for (size_t i = 0; i < s->n; i++) {
        float mf = s->map_m[m[i]] * s->m_absmax, vf = s->map_v[v[i]] * s->v_absmax;
        adamw_element(c, &s->p[i], &mf, &vf, dtype_load_f32(s->g, s->gt, i));
        s->m_new[i] = mf;
        s->v_new[i] = vf;
        mx = __builtin_fabsf(mf) > mx ? __builtin_fabsf(mf) : mx;
        vx = __builtin_fabsf(vf) > vx ? __builtin_fabsf(vf) : vx;
        if (s->copy)
            dtype_store_f32(s->copy, s->ct, i, s->p[i]);
    }
    max_out[0] = mx;
    max_out[1] = vx;
}

void optim_q8_quantize_scalar(uint8_t *codes, const float *x, size_t n, float absmax, const moments_q8_buckets *thr)
{
    for (size_t i = 0; i < n; i++)
        codes[i] = moments_q8_code(thr, absmax > 0.0f ? x[i] / absmax : 0.0f);
}
