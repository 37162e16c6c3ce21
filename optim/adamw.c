/* optim/adamw.c: AdamW's validation, its scalar factors (computed in double
 * as torch.optim.AdamW does), the split of a job into OPTIM_TILE tiles on the
 * pool, and the per-ISA dispatch. The element kernels live in simd_*.c. */
#include "optim/adamw.h"

#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "optim/kernels.h"

static int adamw_finite_in(double x, double lo, double hi) { return isfinite(x) && x >= lo && x < hi; }

static ferry_status adamw_check_hparams(const adamw_hparams *hp)
{
    if (!isfinite(hp->lr) || hp->lr < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: lr %g; give a finite lr >= 0", hp->lr);
    if (!adamw_finite_in(hp->beta1, 0.0, 1.0) || !adamw_finite_in(hp->beta2, 0.0, 1.0))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: betas (%g, %g); each must be in [0, 1)",
                       hp->beta1, hp->beta2);
    if (!isfinite(hp->eps) || hp->eps < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: eps %g; give a finite eps >= 0 (1e-8 is usual)",
                       hp->eps);
    if (!isfinite(hp->weight_decay) || hp->weight_decay < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: weight_decay %g; give a finite value >= 0 (0 = off)",
                       hp->weight_decay);
    return FERRY_OK;
}

ferry_status adamw_check(const adamw_job *job)
{
    if (!job)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: job is NULL");
    if (job->n > 0 && (!job->master || !job->m || !job->v || !job->grad))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "adamw: a NULL buffer for %zu elements (master %p, m %p, v %p, grad %p)", job->n,
                       (void *)job->master, (void *)job->m, (void *)job->v, job->grad);
    if (!dtype_is_float(job->grad_dtype))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: gradient type %d; use f32, bf16 or f16",
                       (int)job->grad_dtype);
    if (job->copy_out && !dtype_is_float(job->copy_dtype))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: copy type %d; use bf16, f16 or f32",
                       (int)job->copy_dtype);
    if (job->step < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: step %lld; steps count from 1", (long long)job->step);
    if (!isfinite(job->grad_scale) || job->grad_scale < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "adamw: grad_scale %g; give the clip coefficient, finite and >= 0 (1 = none)",
                       (double)job->grad_scale);
    return adamw_check_hparams(&job->hp);
}

typedef struct adamw_ctx {
    adamw_job job;
    adamw_consts c;
    void (*kernel)(const adamw_consts *, const adamw_span *);
} adamw_ctx;

static void adamw_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    const adamw_ctx *x = arg;
    const adamw_job *j = &x->job;
    size_t off = tile * OPTIM_TILE, len = j->n - off < OPTIM_TILE ? j->n - off : OPTIM_TILE;
    adamw_span s = {
        j->master + off, j->m + off, j->v + off,
        (const char *)j->grad + off * dtype_size(j->grad_dtype), j->grad_dtype,
        j->copy_out ? (char *)j->copy_out + off * dtype_size(j->copy_dtype) : NULL, j->copy_dtype,
        len,
    };
    x->kernel(&x->c, &s);
}

static ferry_status adamw_prepare(const adamw_job *job, cpu_simd level, adamw_ctx *x)
{
    ferry_status st = adamw_check(job);
    if (st == FERRY_OK)
        st = optim_check_level(level, "adamw");
    if (st != FERRY_OK)
        return st;
    x->job = *job;
    x->c = adamw_consts_make(&job->hp, job->step, job->grad_scale);
    switch (level) {
    case CPU_SIMD_AVX512: x->kernel = optim_adamw_avx512; break;
    case CPU_SIMD_AVX2: x->kernel = optim_adamw_avx2; break;
    case CPU_SIMD_SCALAR: x->kernel = optim_adamw_scalar; break;
    }
    return FERRY_OK;
}

static size_t adamw_tiles(size_t n) { return (n + OPTIM_TILE - 1) / OPTIM_TILE; }

ferry_status adamw_run_level(tp_pool *pool, const adamw_job *job, cpu_simd level)
{
    adamw_ctx x;
    ferry_status st = adamw_prepare(job, level, &x);
    if (st != FERRY_OK)
        return st;
    return tp_parallel_for(pool, adamw_tiles(job->n), adamw_tile, &x);
}

ferry_status adamw_run(tp_pool *pool, const adamw_job *job)
{
    return adamw_run_level(pool, job, cpu_simd_active());
}

ferry_status adamw_submit(tp_pool *pool, const adamw_job *job, tp_ticket **ticket)
{
    if (!pool || !ticket)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw_submit: pool and ticket must not be NULL");
    *ticket = NULL;
    adamw_ctx *x = malloc(sizeof *x);
    if (!x)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "adamw_submit: out of memory for a job");
    ferry_status st = adamw_prepare(job, cpu_simd_active(), x);
    if (st == FERRY_OK)
        st = tp_submit(pool, adamw_tiles(job->n), adamw_tile, x, free, ticket);
    if (st != FERRY_OK)
        free(x);
    return st;
}
