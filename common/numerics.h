/* The definitions of ferry's numerics that more than one layer computes, so
 * that every implementation follows one text:
 * - the AdamW update of one element, exactly torch.optim.AdamW's arithmetic
 *   (the CPU optimizer's SIMD kernels in optim/ reproduce it bit for bit; the
 *   host backend's device AdamW op in backend/ runs it as written);
 * - the fp32 sum of a step's micro-batch gradients;
 * - the gradient sum of squares: in double, over fixed tiles of
 *   NUMERICS_TILE elements, each tile over NUMERICS_SUMSQ_LANES interleaved
 *   lanes added in lane order, tiles added in tile order. So the global norm
 *   depends only on the data, never on threads or SIMD width, and the engine
 *   gets the same bits whichever layer summed.
 * Owns no state; any thread. */
#ifndef FERRY_COMMON_NUMERICS_H
#define FERRY_COMMON_NUMERICS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements per tile: the unit of every optimizer job and of every partial
 * sum of squares. Fixed, so no split of work can change a result. */
#define NUMERICS_TILE ((size_t)65536)
#define NUMERICS_SUMSQ_LANES 16

/* Hyperparameters of one update. Doubles, as Python holds them: 1 - beta2
 * must be computed from 0.999, not from its fp32 rounding, to get PyTorch's
 * numbers. */
typedef struct adamw_hparams {
    double lr;           /* >= 0 */
    double beta1, beta2; /* in [0, 1) */
    double eps;          /* >= 0 */
    double weight_decay; /* >= 0 */
} adamw_hparams;

/* The fp32 factors of one update. Per element, for step t (1-based):
 *     g  = g * grad_scale                  (the clip coefficient)
 *     m  = beta1 * m + (1 - beta1) * g     (one fused multiply-add)
 *     v  = beta2 * v + (1 - beta2) * g * g (one fused multiply-add)
 *     p  = p * (1 - lr * weight_decay) + (-lr / (1 - beta1^t) * m) / (sqrt(v) / sqrt(1 - beta2^t) + eps) */
typedef struct adamw_consts {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step;  /* -lr / (1 - beta1^t) */
    float decay;     /* 1 - lr * weight_decay */
    float grad_scale;
} adamw_consts;

/* Each factor computed in double from the hyperparameters (what Python does
 * with them) and rounded once to fp32 (what the tensor op does with a Python
 * scalar). step >= 1. */
static inline adamw_consts adamw_consts_make(const adamw_hparams *hp, int64_t step, float grad_scale)
{
    double t = (double)step;
    double bc1 = 1.0 - pow(hp->beta1, t);
    double bc2 = 1.0 - pow(hp->beta2, t);
    adamw_consts c = {
        (float)hp->beta1, (float)(1.0 - hp->beta1),
        (float)hp->beta2, (float)(1.0 - hp->beta2),
        (float)sqrt(bc2), (float)hp->eps,
        (float)(-(hp->lr / bc1)), (float)(1.0 - hp->lr * hp->weight_decay),
        grad_scale,
    };
    return c;
}

/* One element of the update: the definition the vector kernels reproduce. */
static inline void adamw_element(const adamw_consts *c, float *p, float *m, float *v, float g)
{
    g = g * c->grad_scale;
    float mm = __builtin_fmaf(c->one_minus_beta1, g, c->beta1 * *m);
    float vv = __builtin_fmaf(c->one_minus_beta2 * g, g, c->beta2 * *v);
    float denom = __builtin_sqrtf(vv) / c->bc2_sqrt + c->eps;
    /* torch: param.mul_(decay), then addcdiv: param + (value * m) / denom */
    *p = *p * c->decay + (c->neg_step * mm) / denom;
    *m = mm;
    *v = vv;
}

/* Sum of squares of n <= NUMERICS_TILE elements (one tile) of type t, in
 * double over the interleaved lanes (element i -> lane i % 16), lanes added
 * in order. Squares of finite fp32 values cannot overflow it: an inf or NaN
 * sum means an inf or NaN element. */
static inline double numerics_sumsq_tile(const void *g, ferry_dtype t, size_t n)
{
    double lane[NUMERICS_SUMSQ_LANES] = {0};
    for (size_t i = 0; i < n; i++) {
        double x = dtype_load_f32(g, t, i);
        lane[i % NUMERICS_SUMSQ_LANES] += x * x; /* exact square: one rounding, as an fma */
    }
    double s = 0;
    for (int l = 0; l < NUMERICS_SUMSQ_LANES; l++)
        s += lane[l];
    return s;
}

/* acc[i] = g[i] (first) or acc[i] + g[i] for n elements of type t, widened
 * exactly: a micro-batch's gradient added into the fp32 sum of a step's
 * micro-batches, the same bits wherever it runs (the host backend's
 * ops_accumulate, the engine's CPU after a drain). */
static inline void numerics_accumulate(float *acc, const void *g, ferry_dtype t, size_t n, int first)
{
    for (size_t i = 0; i < n; i++)
        acc[i] = first ? dtype_load_f32(g, t, i) : acc[i] + dtype_load_f32(g, t, i);
}

#ifdef __cplusplus
}
#endif
#endif
