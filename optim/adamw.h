/* optim/adamw.h: the CPU AdamW update, exactly torch.optim.AdamW's arithmetic
 * (decoupled weight decay, bias correction, eps after the square root), over
 * fp32 master weights and fp32 moments held in host memory. Owns the update
 * kernels (AVX-512, AVX2+FMA+F16C, scalar; chosen at run time) and their
 * split into fixed tiles on the thread pool. Does not own any buffer, decide
 * when to step, or know about devices.
 *
 * Per element, for step t (1-based), with g the gradient as fp32:
 *     g  = g * grad_scale                  (the clip coefficient)
 *     p  = p * (1 - lr * weight_decay)
 *     m  = beta1 * m + (1 - beta1) * g
 *     v  = beta2 * v + (1 - beta2) * g * g
 *     p  = p + (-lr / (1 - beta1^t) * m) / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *     copy_out = p rounded to bf16/fp16 (nearest even), if asked
 * Scalar factors are computed in double from the double hyperparameters and
 * rounded once to fp32, as PyTorch does with Python floats;
 * the element arithmetic is fp32 in torch's order of operations (the moments
 * with a fused multiply-add, as torch's vectorised add/addcmul), the same on
 * every SIMD path, so all paths and all thread counts give bitwise identical
 * results, and in practice torch's to the last bit.
 *
 * A gradient holding inf or NaN is not filtered here: the step's recipe
 * (gradnorm_sumsq over every group, then gradnorm_decide in optim/gradnorm.h)
 * says whether to update and with which grad_scale. */
#ifndef FERRY_OPTIM_ADAMW_H
#define FERRY_OPTIM_ADAMW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cpu.h"
#include "common/numerics.h"
#include "ferry.h"
#include "optim/half.h"
#include "optim/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements per tile: the unit of work of every optimizer job (common/
 * numerics.h). Hyperparameters: adamw_hparams, also there; turn weight decay
 * off for a group (biases, layernorms) with weight_decay = 0. */
#define OPTIM_TILE NUMERICS_TILE

/* PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-2. */
#define ADAMW_HPARAMS_DEFAULT { 1e-3, 0.9, 0.999, 1e-8, 1e-2 }

/* One update of one buffer (a parameter group, or any part of it). */
typedef struct adamw_job {
    float *master;          /* n fp32 master weights, updated in place */
    float *m, *v;           /* n fp32 moments, updated in place */
    const void *grad;       /* n gradients of type grad_dtype; read only */
    ferry_dtype grad_dtype; /* F32, BF16 or F16 */
    size_t n;
    int64_t step;           /* the step being taken, 1 for the first */
    adamw_hparams hp;
    float grad_scale;       /* multiplies g before the moments: the clip coefficient; 1 for none */
    void *copy_out;         /* NULL, or n elements receiving the updated weights */
    ferry_dtype copy_dtype; /* BF16 or F16 (F32 allowed: a plain copy) */
} adamw_job;

/* Checks a job: non-NULL buffers for n > 0, step >= 1, hyperparameters in
 * range, grad_scale finite and >= 0, known types. FERRY_ERR_INVALID_ARGUMENT
 * with the field and value otherwise. Called by adamw_run/adamw_submit. */
ferry_status adamw_check(const adamw_job *job);

/* Runs the update and returns when it is done. pool may be NULL (the calling
 * thread does it). The buffers must not overlap each other. */
ferry_status adamw_run(tp_pool *pool, const adamw_job *job);

/* Queues the update on the pool and returns at once; the job struct is
 * copied, the buffers must stay untouched until tp_wait(*ticket) returns. */
ferry_status adamw_submit(tp_pool *pool, const adamw_job *job, tp_ticket **ticket);

/* adamw_run with an explicit SIMD level (tests, benchmarks); a level above
 * cpu_simd_detect() is FERRY_ERR_UNSUPPORTED. adamw_run uses cpu_simd_active(). */
ferry_status adamw_run_level(tp_pool *pool, const adamw_job *job, cpu_simd level);

#ifdef __cplusplus
}
#endif
#endif
