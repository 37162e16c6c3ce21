/* optim/simd_scalar.c: the portable kernels, the reference the vector paths
 * match bit for bit. Built for the baseline ISA: no contraction can fuse a
 * multiply and an add behind our back, and every fused step is an explicit
 * fmaf (a hardware instruction through glibc where the CPU has one). */
#include "optim/kernels.h"

void optim_adamw_scalar(const adamw_consts *c, const adamw_span *s)
{
    for (size_t i = 0; i < s->n; i++) {
        optim_adamw_one(c, &s->p[i], &s->m[i], &s->v[i], optim_load_one(s->g, s->gt, i));
        if (s->copy)
            optim_store_one(s->copy, s->ct, i, s->p[i]);
    }
}

double optim_sumsq_scalar(const void *g, optim_dtype t, size_t n)
{
    double lane[OPTIM_SUMSQ_LANES] = {0};
    for (size_t i = 0; i < n; i++) {
        double x = optim_load_one(g, t, i);
        lane[i % OPTIM_SUMSQ_LANES] += x * x; /* exact square: one rounding, as an fma */
    }
    double s = 0;
    for (int l = 0; l < OPTIM_SUMSQ_LANES; l++)
        s += lane[l];
    return s;
}

void optim_convert_scalar(void *dst, optim_dtype dt, const void *src, optim_dtype st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        optim_store_one(dst, dt, i, optim_load_one(src, st, i));
}
