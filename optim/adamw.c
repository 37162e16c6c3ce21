/* optim/adamw.c: AdamW's validation, its scalar factors (computed in double
 * as torch.optim.AdamW does), the split of a job into OPTIM_TILE tiles on the
 * pool, and the per-ISA dispatch. The element kernels live in simd_*.c. */
#include "optim/adamw.h"

#include <math.h>
#include <stdbool.h>
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

static ferry_status adamw_check_ranges(const adamw_job *job)
{
    if (job->no_decay_count > 0 && !job->no_decay)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: %zu no-decay ranges at NULL", job->no_decay_count);
    size_t end = 0;
    for (size_t r = 0; r < job->no_decay_count; r++) {
        size_t off = job->no_decay[r][0], len = job->no_decay[r][1];
        if (off < end || len > job->n || off > job->n - len)
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "adamw: no-decay range %zu [%zu, +%zu) overlaps the one before (ending %zu) or leaves the "
                           "job's %zu elements; give sorted, disjoint ranges inside the job",
                           r, off, len, end, job->n);
        end = off + len;
    }
    return FERRY_OK;
}

ferry_status adamw_check(const adamw_job *job)
{
    if (!job)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: job is NULL");
    ferry_status st = moments_check_form(job->moments, "adamw");
    if (st != FERRY_OK)
        return st;
    bool f32 = job->moments == FERRY_MOMENTS_F32;
    void *m = f32 ? (void *)job->m : job->mq, *v = f32 ? (void *)job->v : job->vq;
    if (job->n > 0 && (!job->master || !m || !v || !job->grad))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "adamw: a NULL buffer for %zu elements (master %p, m %p, v %p, grad %p; moments %s)", job->n,
                       (void *)job->master, m, v, job->grad, ferry_moments_name(job->moments));
    if (job->n > 0 && job->moments == FERRY_MOMENTS_8BIT && (!job->m_absmax || !job->v_absmax))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "adamw: 8bit moments without absmax arrays (m %p, v %p)",
                       (void *)job->m_absmax, (void *)job->v_absmax);
    if ((st = adamw_check_ranges(job)) != FERRY_OK)
        return st;
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
    adamw_consts c, plain; /* plain: weight decay 0 (the no-decay ranges) */
    uint32_t key_m, key_v;
    void (*kernel)(const adamw_consts *, const adamw_span *);
    void (*bf16)(const adamw_consts *, const adamw_cspan *);
    void (*q8)(const adamw_consts *, const adamw_cspan *, float[2]);
    void (*quantize)(uint8_t *, const float *, size_t, float, const moments_q8_buckets *);
} adamw_ctx;

/* The end of the piece of constant decay that starts at `at` (before hi),
 * and whether it is a no-decay piece. */
static size_t piece_end(const adamw_job *j, size_t at, size_t hi, bool *plain)
{
    for (size_t r = 0; r < j->no_decay_count; r++) {
        size_t off = j->no_decay[r][0], end = off + j->no_decay[r][1];
        if (end <= at)
            continue;
        *plain = off <= at;
        size_t e = off <= at ? end : off;
        return e < hi ? e : hi;
    }
    *plain = false;
    return hi;
}

static adamw_cspan cspan_at(const adamw_ctx *x, size_t off, size_t len)
{
    const adamw_job *j = &x->job;
    size_t msize = j->moments == FERRY_MOMENTS_BF16 ? 2 : 1;
    adamw_cspan s = {
        .p = j->master + off,
        .m = (char *)j->mq + off * msize,
        .v = (char *)j->vq + off * msize,
        .g = (const char *)j->grad + off * dtype_size(j->grad_dtype),
        .gt = j->grad_dtype,
        .copy = j->copy_out ? (char *)j->copy_out + off * dtype_size(j->copy_dtype) : NULL,
        .ct = j->copy_dtype,
        .n = len,
        .key_m = x->key_m,
        .key_v = x->key_v,
        .index0 = j->index0 + off,
    };
    return s;
}

/* Elements [lo, hi) of an 8BIT job inside one block: dequantize, update,
 * requantize with the block's new absmax. */
static void q8_block(const adamw_ctx *x, size_t lo, size_t hi)
{
    const adamw_job *j = &x->job;
    size_t b = lo / MOMENTS_Q8_BLOCK;
    float mnew[MOMENTS_Q8_BLOCK], vnew[MOMENTS_Q8_BLOCK], mx[2] = {0.0f, 0.0f};
    for (size_t at = lo; at < hi;) {
        bool plain;
        size_t end = piece_end(j, at, hi, &plain);
        adamw_cspan s = cspan_at(x, at, end - at);
        s.map_m = moments_q8_map(1);
        s.map_v = moments_q8_map(0);
        s.m_absmax = j->m_absmax[b];
        s.v_absmax = j->v_absmax[b];
        s.m_new = mnew + (at - lo);
        s.v_new = vnew + (at - lo);
        x->q8(plain ? &x->plain : &x->c, &s, mx);
        at = end;
    }
    j->m_absmax[b] = mx[0];
    j->v_absmax[b] = mx[1];
    x->quantize((uint8_t *)j->mq + lo, mnew, hi - lo, mx[0], moments_q8_buckets_of(1));
    x->quantize((uint8_t *)j->vq + lo, vnew, hi - lo, mx[1], moments_q8_buckets_of(0));
}

static void adamw_range(const adamw_ctx *x, size_t lo, size_t hi)
{
    const adamw_job *j = &x->job;
    for (size_t at = lo; at < hi;) {
        bool plain;
        size_t end = piece_end(j, at, hi, &plain);
        const adamw_consts *c = plain ? &x->plain : &x->c;
        if (j->moments == FERRY_MOMENTS_BF16) {
            adamw_cspan s = cspan_at(x, at, end - at);
            x->bf16(c, &s);
        } else {
            adamw_span s = {
                j->master + at, j->m + at, j->v + at,
                (const char *)j->grad + at * dtype_size(j->grad_dtype), j->grad_dtype,
                j->copy_out ? (char *)j->copy_out + at * dtype_size(j->copy_dtype) : NULL, j->copy_dtype,
                end - at,
            };
            x->kernel(c, &s);
        }
        at = end;
    }
}

static void adamw_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    const adamw_ctx *x = arg;
    const adamw_job *j = &x->job;
    size_t off = tile * OPTIM_TILE, len = j->n - off < OPTIM_TILE ? j->n - off : OPTIM_TILE;
    if (j->moments != FERRY_MOMENTS_8BIT) {
        adamw_range(x, off, off + len);
        return;
    }
    for (size_t b = off; b < off + len; b += MOMENTS_Q8_BLOCK) /* tiles hold whole blocks */
        q8_block(x, b, b + MOMENTS_Q8_BLOCK < off + len ? b + MOMENTS_Q8_BLOCK : off + len);
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
    adamw_hparams plain = job->hp;
    plain.weight_decay = 0.0;
    x->plain = adamw_consts_make(&plain, job->step, job->grad_scale);
    x->key_m = moments_key(job->seed, job->step, 0);
    x->key_v = moments_key(job->seed, job->step, 1);
    /* The compact forms' AVX-512 level runs their AVX2 kernels (the same
     * bits by construction; the form's traffic, not its width, bounds them). */
    x->bf16 = optim_adamw_bf16_avx2;
    x->q8 = optim_adamw_q8_avx2;
    x->quantize = optim_q8_quantize_avx2;
    switch (level) {
    case CPU_SIMD_AVX512: x->kernel = optim_adamw_avx512; break;
    case CPU_SIMD_AVX2: x->kernel = optim_adamw_avx2; break;
    case CPU_SIMD_SCALAR:
        x->kernel = optim_adamw_scalar;
        x->bf16 = optim_adamw_bf16_scalar;
        x->q8 = optim_adamw_q8_scalar;
        x->quantize = optim_q8_quantize_scalar;
        break;
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
