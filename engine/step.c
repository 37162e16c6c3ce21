/* The end of a step, kept exact yet overlapped: the global gradient norm
 * (partial sums already computed as gradients landed during backward, added
 * in group order; the same pass flags an inf or NaN), the loss scale divided
 * out, the inf/NaN skip and the loss scale's update, clipping, then the
 * AdamW update of each group in forward order. In the offload modes the update runs on the CPU
 * pool and each group's upload is queued behind its own update on the H2D
 * stream, so the next forward of group i waits for group i only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/sized.h"
#include "engine/engine.h"
#include "engine/shard.h"
#include "optim/gradnorm.h"

static const size_t option_fields[] = {
    SIZED_END(ferry_step_options, lr),           SIZED_END(ferry_step_options, beta1),
    SIZED_END(ferry_step_options, beta2),        SIZED_END(ferry_step_options, eps),
    SIZED_END(ferry_step_options, weight_decay), SIZED_END(ferry_step_options, max_grad_norm),
};
SIZED_NO_TAIL_PADDING(ferry_step_options, max_grad_norm);

/* Reads the caller's options over the defaults (common/sized.h), then checks them. */
static ferry_status check_options(const ferry_step_options *caller, ferry_step_options *o)
{
    if (!caller)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step: options are NULL; use FERRY_STEP_OPTIONS_INIT");
    ferry_step_options defaults = FERRY_STEP_OPTIONS_INIT;
    *o = defaults;
    ferry_status st = sized_read(o, sizeof *o, caller, option_fields, sizeof option_fields / sizeof option_fields[0],
                                 "ferry_step_options");
    if (st != FERRY_OK)
        return err_wrap(st, "ferry_engine_step");
    if (!isfinite(o->lr) || o->lr < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step: lr %g must be finite and >= 0", (double)o->lr);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step: betas (%g, %g) must be in [0, 1)",
                       (double)o->beta1, (double)o->beta2);
    if (!isfinite(o->eps) || o->eps < 0 || !isfinite(o->weight_decay) || o->weight_decay < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step: eps %g and weight_decay %g must be >= 0",
                       (double)o->eps, (double)o->weight_decay);
    if (!isfinite(o->max_grad_norm))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step: max_grad_norm %g must be finite",
                       (double)o->max_grad_norm);
    return FERRY_OK;
}

static ferry_status check_ready(ferry_engine *e)
{
    if (e->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_step: inference is on (no step is in progress); call "
                                        "ferry_engine_end_inference() and run a micro-batch first");
    if (e->micro_index < 0 || e->micro_index != e->micro_count - 1)
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_step: no gradients to apply: run micro-batch %d of %d (forward and "
                       "backward) first",
                       e->micro_index < 0 ? 0 : e->micro_index + 1, e->micro_count < 1 ? 1 : e->micro_count);
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (g->fetched[0] || g->fetched[1])
            return err_set(FERRY_ERR_STATE, "ferry_engine_step: group %d ('%s') is still fetched; release it",
                           i, g->name);
        if (g->released_backward != e->micro_count)
            return err_set(FERRY_ERR_STATE,
                           "ferry_engine_step: group %d ('%s') has no gradients for this step: release "
                           "it in backward (after adding its gradients) before stepping",
                           i, g->name);
    }
    return FERRY_OK;
}

/* ---- the norm ---- */

static ferry_status norms_offloaded(ferry_engine *e)
{
    double t0 = clock_now_ms();
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        ferry_status st = tp_wait(g->norm_ticket);
        g->norm_ticket = NULL;
        if (st != FERRY_OK)
            return st;
        if (e->dp)
            continue; /* the ranks' tiles are added below */
        double sum = 0;
        bool bad = false;
        for (size_t t = 0; t < g->norm->ntiles; t++) {
            sum += g->norm->partial[t];
            bad |= g->norm->bad[t] != 0;
        }
        g->sumsq = sum;
        g->nonfinite = bad;
    }
    ferry_status st = e->dp ? shard_sum_norms(e) : FERRY_OK;
    /* How long the update started after backward ended: gradients still
     * draining (or being reduced across ranks), or their norm still being summed. */
    e->timing_acc.optimizer_wait_grads_ms = clock_now_ms() - t0;
    return st;
}

/* Offload none: each group's sum of squares by the backend's op, on the
 * compute stream after the backward that wrote the gradients. */
static ferry_status norms_resident(ferry_engine *e)
{
    ferry_status st;
    size_t bytes = (size_t)e->ngroups * sizeof(double);
    if (e->dp && (st = shard_wait_reduced(e)) != FERRY_OK)
        return st;
    if ((st = backend_memset_async(e->compute, e->dev_sumsq, 0, bytes)) != FERRY_OK)
        return st;
    for (int i = 0; i < e->ngroups; i++) {
        ferry_dtype t;
        const void *grads = engine_step_grads(e, &e->groups[i], &t);
        if ((st = ops_sumsq(e->compute, grads, t, e->groups[i].numel, e->dev_sumsq + i, e->dev_sumsq_scratch)) !=
            FERRY_OK)
            return st;
    }
    double *host = malloc(bytes);
    if (!host)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gradient norm: out of host memory");
    st = backend_memcpy_async(e->compute, host, e->dev_sumsq, bytes, BACKEND_COPY_D2H);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(e->compute);
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++) {
        e->groups[i].sumsq = host[i];
        e->groups[i].nonfinite = !isfinite(host[i]);
    }
    free(host);
    return st;
}

/* The recipe's decision (optim/gradnorm.h) from every group's sum, the loss
 * scale taken out. */
static ferry_status decide(ferry_engine *e, const ferry_step_options *o, gradnorm_decision *d)
{
    double *sums = malloc((size_t)e->ngroups * sizeof *sums);
    bool *bad = malloc((size_t)e->ngroups * sizeof *bad);
    if (!sums || !bad) {
        free(sums);
        free(bad);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_step: out of host memory");
    }
    for (int i = 0; i < e->ngroups; i++) {
        sums[i] = e->groups[i].sumsq;
        bad[i] = e->groups[i].nonfinite;
    }
    /* Every rank decides from the same flags: all skip, or none. */
    ferry_status st = shard_agree_nonfinite(e, bad, e->ngroups);
    float inv_scale = e->scaling ? loss_scale_inverse(&e->scaler) : 1.0f;
    if (st == FERRY_OK)
        *d = gradnorm_decide_unscaled(sums, bad, e->ngroups, o->max_grad_norm, inv_scale);
    free(sums);
    free(bad);
    return st;
}

/* ---- the update ---- */

static adamw_hparams group_hparams(const engine_group *g, const ferry_step_options *o)
{
    adamw_hparams hp = {o->lr * g->opts.lr_scale, o->beta1, o->beta2, o->eps,
                        g->opts.weight_decay ? o->weight_decay : 0.0f};
    return hp;
}

/* A group's update as jobs over its segments: the decayed parts and the
 * ranges exempt from weight decay alternate, each cut to this rank's part
 * of the group (all of it alone). Element-wise, so the split changes no
 * bit. */
typedef ferry_status (*segment_fn)(ferry_engine *e, engine_group *g, size_t first, size_t n,
                                   adamw_hparams hp, float clip);

static ferry_status own_part(ferry_engine *e, engine_group *g, size_t first, size_t n, adamw_hparams hp, float clip,
                             segment_fn fn)
{
    size_t lo = g->shard_lo, hi = g->shard_lo + g->shard_n;
    size_t a = first > lo ? first : lo, b = first + n < hi ? first + n : hi;
    return a < b ? fn(e, g, a, b - a, hp, clip) : FERRY_OK;
}

static ferry_status for_each_segment(ferry_engine *e, engine_group *g, const ferry_step_options *o,
                                     float clip, segment_fn fn)
{
    adamw_hparams hp = group_hparams(g, o), plain = hp;
    plain.weight_decay = 0.0f;
    size_t at = 0;
    ferry_status st = FERRY_OK;
    bool split = hp.weight_decay > 0.0f;
    for (size_t r = 0; split && r < g->no_decay_count && st == FERRY_OK; r++) {
        size_t off = g->no_decay[r][0], n = g->no_decay[r][1];
        if (off > at)
            st = own_part(e, g, at, off - at, hp, clip, fn);
        if (st == FERRY_OK && n > 0)
            st = own_part(e, g, off, n, plain, clip, fn);
        at = off + n;
    }
    if (st == FERRY_OK && at < g->numel)
        st = own_part(e, g, at, g->numel - at, hp, clip, fn);
    return st;
}

/* One segment's update on the pool, tile by tile; the tile that finishes the
 * whole step's update stamps the time, for the figure of the update's cost. */
typedef struct segment_job {
    ferry_engine *e;
    adamw_job job;
} segment_job;

static void segment_tile(void *ctx, size_t tile, int worker)
{
    (void)worker;
    segment_job *sj = ctx;
    adamw_job part = sj->job;
    size_t first = tile * OPTIM_TILE, esize = dtype_size(part.grad_dtype);
    part.n = sj->job.n - first < OPTIM_TILE ? sj->job.n - first : OPTIM_TILE;
    part.master += first;
    part.m += first;
    part.v += first;
    part.grad = (const char *)part.grad + first * esize;
    part.copy_out = (char *)part.copy_out + first * dtype_size(part.copy_dtype);
    adamw_run(NULL, &part); /* checked whole before submission */
    if (atomic_fetch_sub(&sj->e->update_tiles_left, 1) == 1)
        atomic_store(&sj->e->update_end_us, (uint64_t)(clock_now_ms() * 1e3));
}

static ferry_status submit_segment(ferry_engine *e, engine_group *g, size_t first, size_t n, adamw_hparams hp,
                                   float clip)
{
    ferry_dtype gt;
    const char *grads = engine_step_grads(e, g, &gt);
    size_t at = first - g->shard_lo; /* the host state holds this rank's part */
    adamw_job job = {g->master + at, g->m + at, g->v + at, grads + at * dtype_size(gt), gt, n,
                     e->step + 1, hp, clip, (char *)g->host_weights + at * e->act_size, e->act};
    ferry_status st = adamw_check(&job);
    if (st != FERRY_OK)
        return st;
    tp_ticket **grown = realloc(g->update_tickets, (size_t)(g->update_count + 1) * sizeof *grown);
    segment_job *sj = malloc(sizeof *sj);
    if (grown)
        g->update_tickets = grown;
    if (!grown || !sj) {
        free(sj);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "update of group '%s': out of host memory", g->name);
    }
    sj->e = e;
    sj->job = job;
    size_t ntiles = (n + OPTIM_TILE - 1) / OPTIM_TILE;
    atomic_fetch_add(&e->update_tiles_left, ntiles);
    st = tp_submit(e->threads, ntiles, segment_tile, sj, free, &g->update_tickets[g->update_count]);
    if (st == FERRY_OK)
        g->update_count++;
    else
        free(sj);
    return st;
}

static ferry_status run_segment_resident(ferry_engine *e, engine_group *g, size_t first, size_t n,
                                         adamw_hparams hp, float clip)
{
    size_t off = first * e->act_size;
    ferry_dtype gt;
    const char *grads = engine_step_grads(e, g, &gt);
    return ops_adamw(e->compute, g->master + first, g->m + first, g->v + first, grads + first * dtype_size(gt), gt,
                     (char *)g->dev_weights + off, n, &hp, e->step + 1, clip);
}

/* The split update: a group whose state is on the device is updated there
 * by the backend's AdamW (the CPU's element math, bit for bit), on the
 * compute stream, which the next forward runs on after it. Its gradients:
 * the device copy the drain read, or, when the step accumulated
 * micro-batches, their fp32 sum the CPU made, sent up. */
static ferry_status run_segment_split(ferry_engine *e, engine_group *g, size_t first, size_t n, adamw_hparams hp,
                                      float clip)
{
    ferry_dtype gt = e->accumulating ? FERRY_DTYPE_F32 : e->act;
    const char *grads = e->accumulating ? (const char *)g->dev_grad_acc : (const char *)g->dev_grads;
    return ops_adamw(e->compute, g->dev_master + first, g->dev_m + first, g->dev_v + first,
                     grads + first * dtype_size(gt), gt, (char *)g->dev_weights + first * e->act_size, n, &hp,
                     e->step + 1, clip);
}

static ferry_status update_split(ferry_engine *e, const ferry_step_options *o, float clip)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->split_groups && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        if (e->accumulating)
            st = backend_memcpy_async(e->compute, g->dev_grad_acc, g->grad_acc, g->numel * sizeof(float),
                                      BACKEND_COPY_H2D);
        if (st == FERRY_OK)
            st = for_each_segment(e, g, o, clip, run_segment_split);
        /* The forward's wait for the weights is on this event. */
        if (st == FERRY_OK)
            st = backend_event_record(g->uploaded, e->compute);
    }
    return st;
}

/* The last update's wall time, once all of it has run. */
static void note_finished_update(ferry_engine *e)
{
    uint64_t end = atomic_load(&e->update_end_us);
    if (e->update_start_ms > 0 && atomic_load(&e->update_tiles_left) == 0 && end > 0)
        e->last_update_ms = (double)end / 1e3 - e->update_start_ms;
}

static ferry_status update_offloaded(ferry_engine *e, const ferry_step_options *o, float clip)
{
    ferry_status st = FERRY_OK;
    note_finished_update(e);
    e->update_start_ms = clock_now_ms();
    atomic_store(&e->update_end_us, 0);
    bool params = e->cfg.offload == FERRY_OFFLOAD_PARAMS;
    /* Params mode: the groups on the device stay there and are rewritten in
     * place once their update is done (the weights change every step). */
    if (params && (st = engine_settle_resident(e)) != FERRY_OK)
        return st;
    if (e->nvme) {
        st = engine_nvme_update(e, o, clip);
        return st == FERRY_OK && params ? engine_refresh_resident(e) : st;
    }
    /* The split update's groups (the first ones) on the device, the rest
     * on the CPU's pool. */
    for (int i = e->split_groups; i < e->ngroups && st == FERRY_OK; i++)
        st = for_each_segment(e, &e->groups[i], o, clip, submit_segment);
    if (st == FERRY_OK)
        st = update_split(e, o, clip);
    if (st == FERRY_OK && params)
        return engine_refresh_resident(e);
    if (e->cfg.offload != FERRY_OFFLOAD_OPTIMIZER || e->cfg.delayed_update)
        return st;
    /* Each group's upload follows its own update, in forward order. */
    for (int i = e->split_groups; i < e->ngroups && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        if (e->dp) {
            st = shard_upload(e, g, NULL);
            continue;
        }
        size_t bytes = g->numel * e->act_size;
        e->timing_acc.transfer_h2d_bytes += (double)bytes;
        if ((st = engine_update_barrier(e, g)) == FERRY_OK &&
            (st = backend_memcpy_async(e->h2d, g->dev_weights, g->host_weights, bytes, BACKEND_COPY_H2D)) == FERRY_OK)
            st = backend_event_record(g->uploaded, e->h2d);
    }
    return st;
}

/* Delayed update (DPU): the update of step t runs while step t+1 computes
 * with the weights of step t-1; each group's upload waits for that group's
 * backward in step t+1 to finish (the compute stream must not read weights
 * while they change). Its own release, not group 0's: an embedder may
 * release groups in any order. */
static ferry_status upload_delayed(ferry_engine *e)
{
    if (!e->dpu_pending)
        return FERRY_OK;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        if (e->dp) {
            st = shard_upload(e, g, g->grads_done);
            continue;
        }
        size_t bytes = g->numel * e->act_size;
        e->timing_acc.transfer_h2d_bytes += (double)bytes;
        if ((st = engine_update_barrier(e, g)) == FERRY_OK &&
            (st = backend_stream_wait_event(e->h2d, g->grads_done)) == FERRY_OK &&
            (st = backend_memcpy_async(e->h2d, g->dev_weights, g->host_weights, bytes, BACKEND_COPY_H2D)) == FERRY_OK)
            st = backend_event_record(g->uploaded, e->h2d);
    }
    /* The next update rewrites host_weights and master: the uploads must have read them. */
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++)
        st = backend_event_synchronize(e->groups[i].uploaded);
    e->dpu_pending = false;
    return st;
}

static ferry_status update_resident(ferry_engine *e, const ferry_step_options *o, float clip)
{
    ferry_status st = FERRY_OK;
    double t0 = clock_now_ms();
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++)
        st = for_each_segment(e, &e->groups[i], o, clip, run_segment_resident);
    /* On cuda the kernels run on after this; the figure is then their launch. */
    e->last_update_ms = clock_now_ms() - t0;
    return st;
}

/* ---- skipped steps and the loss scale ---- */

/* Counts the step's outcome and feeds it to the loss scale: the same
 * decision as the update's (so data parallel ranks, fed one flag, agree). */
static void count_skip(ferry_engine *e, bool skipped)
{
    e->skipped_steps += skipped;
    e->skips_in_row = skipped ? e->skips_in_row + 1 : 0;
    if (e->scaling)
        loss_scale_update(&e->scaler, skipped);
}

/* A loss scale that only ever backs off means the forward or the model
 * overflows, not the gradients: training would go on updating nothing. */
static ferry_status check_collapse(const ferry_engine *e, float used)
{
    int limit = e->cfg.loss_scale_max_skips;
    if (!e->scaling || limit == 0 || e->skips_in_row < limit)
        return FERRY_OK;
    return err_set(FERRY_ERR_STATE,
                   "the loss scale collapsed: %d steps in a row had inf or NaN gradients (the scale backed off to %g, "
                   "the last step used %g), so nothing has been trained since step %lld; the forward pass itself "
                   "overflows fp16, the run diverged, or the first scale (%g) was far too large: lower the learning "
                   "rate or loss_scale_init, resume from an earlier checkpoint, or train in bf16 or f32 where "
                   "the card allows",
                   e->skips_in_row, (double)e->scaler.scale, (double)used, (long long)e->step,
                   (double)e->cfg.loss_scale_init);
}

/* ---- timing ---- */

static void close_timing(ferry_engine *e)
{
    double now = clock_now_ms();
    ferry_step_timing t = e->timing_acc;
    t.size = sizeof t;
    t.step_ms = e->last_step_ms > 0 ? now - e->last_step_ms : 0;
    e->last_step_ms = now;
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        float ms = 0;
        if (!g->wait_recorded)
            continue;
        float gathered = 0;
        if (backend_event_synchronize(g->wait_end) == FERRY_OK &&
            backend_event_elapsed_ms(g->wait_begin, g->wait_end, &ms) == FERRY_OK && ms > 0) {
            /* Sharded: the wait after this rank's slot arrived was for the others'. */
            if (shard_sharded(e) && backend_event_elapsed_ms(g->wait_mid, g->wait_end, &gathered) == FERRY_OK) {
                gathered = gathered < 0 ? 0 : gathered > ms ? ms : gathered;
                ms -= gathered;
                t.compute_wait_comm_ms += gathered;
            }
            if (e->cfg.offload == FERRY_OFFLOAD_PARAMS)
                t.compute_wait_transfer_ms += ms;
            else
                t.compute_wait_optimizer_ms += ms;
        }
        g->wait_recorded = false;
    }
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        float ms = 0;
        if (g->miss_recorded && backend_event_synchronize(g->miss_end) == FERRY_OK &&
            backend_event_elapsed_ms(g->miss_begin, g->miss_end, &ms) == FERRY_OK && ms > 0)
            t.order_wait_ms += ms;
        g->miss_recorded = false;
    }
    shard_close_timing(e, &t);
    err_clear();
    t.max_resident_groups = e->cfg.offload == FERRY_OFFLOAD_PARAMS ? e->resident_max : e->ngroups;
    t.prefetch_depth = e->cfg.offload == FERRY_OFFLOAD_PARAMS ? e->prefetch_depth : 0;
    e->timing = t;
    engine_adapt_prefetch(e, &t);
    memset(&e->timing_acc, 0, sizeof e->timing_acc);
}

ferry_status engine_step(ferry_engine *e, const ferry_step_options *caller_opts, ferry_step_report *r)
{
    ferry_step_options opts, *o = &opts;
    ferry_step_report report = FERRY_STEP_REPORT_INIT;
    ferry_status st = engine_check_group(e, 0, "ferry_engine_step");
    if (st != FERRY_OK || (st = check_options(caller_opts, o)) != FERRY_OK || (st = check_ready(e)) != FERRY_OK)
        return st;
    if (e->nvme && (st = engine_nvme_check(e)) != FERRY_OK)
        return st;
    if (r && (st = sized_write(r, &report, sizeof report, "ferry_step_report")) != FERRY_OK)
        return err_wrap(st, "ferry_engine_step");
    bool offloaded = e->cfg.offload != FERRY_OFFLOAD_NONE;
    st = offloaded ? norms_offloaded(e) : norms_resident(e);
    if (st == FERRY_OK) /* every collective of the step so far went through */
        st = shard_check(e);
    if (st != FERRY_OK)
        return st;
    gradnorm_decision d = {0, 1.0f, false, -1, 1.0f};
    if ((st = decide(e, o, &d)) != FERRY_OK)
        return st;
    if (e->cfg.delayed_update && (st = upload_delayed(e)) != FERRY_OK)
        return st;
    if (!d.skipped) {
        st = offloaded ? update_offloaded(e, o, d.grad_scale) : update_resident(e, o, d.grad_scale);
        if (st != FERRY_OK)
            return st;
        e->step++;
        e->dpu_pending = e->cfg.delayed_update;
    } else if (e->cfg.offload == FERRY_OFFLOAD_PARAMS && (st = engine_settle_resident(e)) != FERRY_OK) {
        return st; /* skipped: the weights did not change, the copies on the device stay current */
    }
    for (int i = 0; i < e->ngroups; i++)
        e->groups[i].released_backward = 0;
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS)
        engine_order_learn(e); /* the first step's fetches become the order */
    e->micro_index = -1;
    e->timing_acc.optimizer_ms = e->last_update_ms;
    close_timing(e);
    if ((st = engine_split_after_step(e)) != FERRY_OK)
        return st;
    report.step = e->step;
    report.grad_norm = d.grad_norm;
    report.clip_coef = d.clip_coef;
    report.skipped = d.skipped;
    report.bad_group = d.bad_group;
    report.loss_scale = e->scaling ? e->scaler.scale : 0.0f;
    count_skip(e, d.skipped);
    report.skipped_steps = e->skipped_steps;
    report.skips_in_row = e->skips_in_row;
    if (r)
        sized_write(r, &report, sizeof report, "ferry_step_report"); /* its size was checked above */
    if (e->trace) {
        trace_step_timing(e->trace, e->step, "step_ms", e->timing.step_ms);
        trace_step_timing(e->trace, e->step, "compute_wait_transfer_ms", e->timing.compute_wait_transfer_ms);
        trace_step_timing(e->trace, e->step, "compute_wait_optimizer_ms", e->timing.compute_wait_optimizer_ms);
        trace_step_timing(e->trace, e->step, "optimizer_wait_grads_ms", e->timing.optimizer_wait_grads_ms);
    }
    return check_collapse(e, report.loss_scale);
}
