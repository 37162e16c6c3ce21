/* optim/adamw.h: the CPU AdamW update, exactly torch.optim.AdamW's arithmetic
 * (decoupled weight decay, bias correction, eps after the square root), over
 * fp32 master weights and moments held in host memory, fp32 or in a compact
 * form read and written as it is (optim/moments.h). Owns the update
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
#include "optim/moments.h"
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
    /* The moments' form (optim/moments.h). F32 (0): m and v above. BF16 and
     * 8BIT: m and v above are unused (NULL) and the update reads and writes
     * mq and vq, each one moment in the form's layout for this job's n
     * elements: BF16 n uint16; 8BIT n codes, with m_absmax and v_absmax
     * holding one fp32 per block of MOMENTS_Q8_BLOCK from element 0 (a job
     * of 8BIT starts on a block). */
    ferry_moments moments;
    void *mq, *vq;
    float *m_absmax, *v_absmax;
    uint64_t seed;          /* BF16: the stochastic rounding's seed */
    uint64_t index0;        /* BF16: the global index of element 0 (the rounding's counter) */
    /* Ranges [off, off + len) of this job (sorted, disjoint, inside n)
     * updated with weight decay 0 whatever hp says: a block of 8BIT may
     * hold weights with and without decay. NULL: none. */
    const size_t (*no_decay)[2];
    size_t no_decay_count;
} adamw_job;

/* Checks a job: non-NULL buffers for n > 0, step >= 1, hyperparameters in
 * range, grad_scale finite and >= 0, known types. FERRY_ERR_INVALID_ARGUMENT
 * with the field and value otherwise. Called by adamw_run/adamw_submit. */
ferry_status adamw_check(const adamw_job *job);

/* Runs the update and returns when it is done. pool may be NULL (the calling
 * thread does it). The buffers must not overlap each other. */
ferry_status adamw_run(tp_pool *pool, const adamw_job *job);

/* Queues the update on the pool and returns at once; the job struct is
 * copied, the buffers (and the no-decay ranges) must stay untouched until
 * tp_wait(*ticket) returns. */
ferry_status adamw_submit(tp_pool *pool, const adamw_job *job, tp_ticket **ticket);

/* adamw_run with an explicit SIMD level (tests, benchmarks); a level above
 * cpu_simd_detect() is FERRY_ERR_UNSUPPORTED. adamw_run uses cpu_simd_active(). */
ferry_status adamw_run_level(tp_pool *pool, const adamw_job *job, cpu_simd level);

#ifdef __cplusplus
}
#endif
#endif
