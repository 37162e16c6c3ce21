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
