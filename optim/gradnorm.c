/* optim/gradnorm.c: the gradient sum of squares split in OPTIM_TILE tiles,
 * each tile's partial kept in its own slot and added in tile order (so the
 * thread count cannot change the result), the clip coefficient, and the
 * step's decision (skip, or clip by how much). */
#include "optim/gradnorm.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "optim/adamw.h"
#include "optim/kernels.h"

typedef struct gradnorm_ctx {
    const void *grad;
    ferry_dtype t;
    size_t n;
    double (*kernel)(const void *, ferry_dtype, size_t);
    double *partial; /* one per tile */
} gradnorm_ctx;

static void gradnorm_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    gradnorm_ctx *c = arg;
    size_t off = tile * OPTIM_TILE, len = c->n - off < OPTIM_TILE ? c->n - off : OPTIM_TILE;
    c->partial[tile] = c->kernel((const char *)c->grad + off * dtype_size(c->t), c->t, len);
}

ferry_status gradnorm_sumsq_level(tp_pool *pool, const void *grad, ferry_dtype t, size_t n,
                                  cpu_simd level, double *sumsq, bool *nonfinite)
{
    if (!sumsq || !nonfinite || (n > 0 && !grad))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gradnorm: NULL %s", !grad ? "gradient" : "result pointer");
    if (!dtype_is_float(t))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gradnorm: gradient type %d; use f32, bf16 or f16",
                       (int)t);
    ferry_status st = optim_check_level(level, "gradnorm");
    if (st != FERRY_OK)
        return st;
    *sumsq = 0;
    *nonfinite = false;
    if (n == 0)
        return FERRY_OK;
    size_t ntiles = (n + OPTIM_TILE - 1) / OPTIM_TILE;
    double (*kernel)(const void *, ferry_dtype, size_t) = level == CPU_SIMD_AVX512 ? optim_sumsq_avx512
                                                          : level == CPU_SIMD_AVX2 ? optim_sumsq_avx2
                                                                                   : optim_sumsq_scalar;
    if (ntiles == 1) {
        /* One tile (the engine's drain asks tile by tile): its sum as is, the
         * same value as 0 + the one partial, with nothing allocated. */
        double s = kernel(grad, t, n);
        *sumsq = s;
        *nonfinite = !isfinite(s);
        return FERRY_OK;
    }
    gradnorm_ctx c = {grad, t, n, kernel, malloc(ntiles * sizeof(double))};
    if (!c.partial)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gradnorm: out of memory for %zu partial sums", ntiles);
    st = tp_parallel_for(pool, ntiles, gradnorm_tile, &c);
    if (st == FERRY_OK) {
        double s = 0;
        for (size_t i = 0; i < ntiles; i++)
            s += c.partial[i];
        /* squares of finite fp32 values cannot overflow a double sum of any
         * size that fits in memory: a non-finite sum means an inf/NaN input */
        *sumsq = s;
        *nonfinite = !isfinite(s);
    }
    free(c.partial);
    return st;
}

ferry_status gradnorm_sumsq(tp_pool *pool, const void *grad, ferry_dtype t, size_t n, double *sumsq, bool *nonfinite)
{
    return gradnorm_sumsq_level(pool, grad, t, n, cpu_simd_active(), sumsq, nonfinite);
}

float gradnorm_clip_coef(double global_norm, float max_norm)
{
    if (!(max_norm > 0))
        return 1.0f;
    if (!isfinite(global_norm))
        return 0.0f;
    double coef = (double)max_norm / (global_norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

gradnorm_decision gradnorm_decide(const double *group_sumsq, const bool *group_nonfinite, int ngroups,
                                  float max_norm)
{
    return gradnorm_decide_unscaled(group_sumsq, group_nonfinite, ngroups, max_norm, 1.0f);
}

gradnorm_decision gradnorm_decide_unscaled(const double *group_sumsq, const bool *group_nonfinite, int ngroups,
                                           float max_norm, float inv_scale)
{
    gradnorm_decision d = {0, 1.0f, false, -1, 1.0f};
    double sum = 0;
    for (int i = 0; i < ngroups; i++) {
        sum += group_sumsq[i];
        if (group_nonfinite[i] && d.bad_group < 0)
            d.bad_group = i;
    }
    /* A loss scale that backed off to nothing unscales by inf: nothing to apply. */
    d.skipped = d.bad_group >= 0 || !(inv_scale > 0 && isfinite(inv_scale));
    d.grad_norm = d.skipped ? (double)NAN : sqrt(sum) * (double)inv_scale;
    if (!d.skipped)
        d.clip_coef = gradnorm_clip_coef(d.grad_norm, max_norm);
    d.grad_scale = d.clip_coef * inv_scale;
    return d;
}
