/* optim/gradnorm.h: the gradient L2 norm for clipping, and inf/NaN detection
 * in the same pass. Owns the sum-of-squares kernels (AVX-512, AVX2, scalar)
 * and the clip coefficient; the caller owns the buffers and the decision.
 *
 * Determinism: each OPTIM_TILE-element tile is summed in double over 16
 * interleaved lanes (element i of the tile goes to lane i % 16) that are then
 * added in lane order; tiles are added in tile order. Every SIMD path follows
 * this order and squares of fp32 values are exact in double, so the result is
 * bitwise the same for any thread count and any SIMD path. The engine adds the
 * per-group sums in fixed group order, then takes sqrt. */
#ifndef FERRY_OPTIM_GRADNORM_H
#define FERRY_OPTIM_GRADNORM_H

#include <stdbool.h>
#include <stddef.h>

#include "common/cpu.h"
#include "ferry.h"
#include "optim/half.h"
#include "optim/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sum of squares of n gradients of type t, in double; *nonfinite is set when
 * any element is inf or NaN (then *sumsq is inf or NaN). pool may be NULL.
 * FERRY_ERR_INVALID_ARGUMENT on NULL pointers or an unknown type;
 * FERRY_ERR_OUT_OF_MEMORY for the per-tile partial sums. */
ferry_status gradnorm_sumsq(tp_pool *pool, const void *grad, ferry_dtype t, size_t n,
                            double *sumsq, bool *nonfinite);
/* The same with an explicit SIMD level (tests, benchmarks). */
ferry_status gradnorm_sumsq_level(tp_pool *pool, const void *grad, ferry_dtype t, size_t n,
                                  cpu_simd level, double *sumsq, bool *nonfinite);

/* PyTorch clip_grad_norm_'s coefficient: max_norm / (norm + 1e-6), clamped to
 * at most 1. Returns 1 when max_norm <= 0 (clipping off) and 0 when the norm
 * is not finite (the step must be skipped anyway). */
float gradnorm_clip_coef(double global_norm, float max_norm);

/* The step's recipe, one function for the engine and for its test against
 * torch: from every group's sum of squares (gradnorm_sumsq), added in group
 * order, the global norm; a step with a non-finite gradient anywhere is
 * skipped (weights and moments untouched, as torch's GradScaler skips it);
 * else the clip coefficient, which every group's update then takes as its
 * grad_scale (adamw_job.grad_scale, ops_adamw's grad_scale). */
typedef struct gradnorm_decision {
    double grad_norm; /* global L2 norm; NaN when skipped */
    float clip_coef;  /* 1 = not clipped */
    bool skipped;
    int bad_group;    /* the first group with a non-finite gradient; -1 if none */
    float grad_scale; /* the updates' grad_scale: clip_coef, times the loss scale's inverse */
} gradnorm_decision;

gradnorm_decision gradnorm_decide(const double *group_sumsq, const bool *group_nonfinite, int ngroups,
                                  float max_norm);

/* The same for gradients that carry a loss scale (optim/loss_scale.h):
 * inv_scale = loss_scale_inverse(). The norm is that of the unscaled
 * gradients (sqrt of the sums, times inv_scale: exact for a power-of-two
 * scale), clipping is decided on it, and clip_coef becomes the updates'
 * grad_scale is clip_coef x inv_scale, so the gradients are unscaled and
 * clipped by one multiplication (for a power-of-two scale, bitwise
 * torch's unscale_ followed by clip_grad_norm_'s multiplication). A skip
 * is decided as gradnorm_decide decides it, and also when inv_scale is not
 * finite (a scale that collapsed to nothing; bad_group is then -1); data parallel ranks feed
 * group_nonfinite with flags reduced over every rank, so each rank skips,
 * and updates its scale, alike. gradnorm_decide is inv_scale = 1. */
gradnorm_decision gradnorm_decide_unscaled(const double *group_sumsq, const bool *group_nonfinite, int ngroups,
                                           float max_norm, float inv_scale);

#ifdef __cplusplus
}
#endif
#endif
