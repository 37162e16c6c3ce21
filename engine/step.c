/* The end of a step, kept exact yet overlapped: the global gradient norm
 * (partial sums already computed as gradients landed during backward, added
 * in group order; the same pass flags an inf or NaN), the loss scale divided
 * out, the inf/NaN skip and the loss scale's update, clipping, then the
 * AdamW update of each group in forward order. In the offload modes the update runs on the CPU
 * pool and each group's upload is queued behind its own update on the H2D
 * stream, so the next forward of group i waits for group i only. */
#include "engine/step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops/ops.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/sized.h"
#include "optim/gradnorm.h"

struct engine_step {
    step_env env;
    engine_scaling *scaling;
    double *sumsq; /* per group: the sum of squares of the step's gradients */
    bool *nonfinite;
    double last_step_ms; /* clock_now_ms() of the last step; 0 before the first */
    ferry_step_timing timing;
};

static const size_t option_fields[] = {
    SIZED_END(ferry_step_options, lr),           SIZED_END(ferry_step_options, beta1),
    SIZED_END(ferry_step_options, beta2),        SIZED_END(ferry_step_options, eps),
    SIZED_END(ferry_step_options, weight_decay), SIZED_END(ferry_step_options, max_grad_norm),
};
SIZED_NO_TAIL_PADDING(ferry_step_options, max_grad_norm);

void step_scaling_reset(engine_scaling *s, const ferry_engine_config *cfg)
{
    /* the settings were checked with the config */
    loss_scale_init(&s->scaler, cfg->loss_scale_init, cfg->loss_scale_growth, cfg->loss_scale_backoff,
                    cfg->loss_scale_interval);
    s->skipped_steps = 0;
    s->skips_in_row = 0;
}

void step_scaling_init(engine_scaling *s, const ferry_engine_config *cfg, ferry_dtype act)
{
    s->on = cfg->loss_scaling == FERRY_LOSS_SCALING_DYNAMIC ||
            (cfg->loss_scaling == FERRY_LOSS_SCALING_AUTO && act == FERRY_DTYPE_F16);
    step_scaling_reset(s, cfg);
}

ferry_status step_open(const step_env *env, engine_scaling *scaling, engine_step **out)
{
    engine_step *s = calloc(1, sizeof *s);
    int n = env->groups->n > 0 ? env->groups->n : 1;
    if (s) {
        s->sumsq = calloc((size_t)n, sizeof *s->sumsq);
        s->nonfinite = calloc((size_t)n, sizeof *s->nonfinite);
    }
    if (!s || !s->sumsq || !s->nonfinite) {
        if (s) {
            free(s->sumsq);
            free(s->nonfinite);
        }
        free(s);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    }
    s->env = *env;
    s->scaling = scaling;
    s->timing.world_size = dp_world(env->dp);
    *out = s;
    return FERRY_OK;
}

void step_close(engine_step *s)
{
    if (!s)
        return;
    free(s->sumsq);
    free(s->nonfinite);
    free(s);
}

const ferry_step_timing *step_timing(const engine_step *s) { return &s->timing; }

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

static ferry_status check_ready(const engine_step *s)
{
    const engine_progress *p = s->env.prog;
    if (p->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_step: inference is on (no step is in progress); call "
                                        "ferry_engine_end_inference() and run a micro-batch first");
    if (p->micro_index < 0 || p->micro_index != p->micro_count - 1)
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_step: no gradients to apply: run micro-batch %d of %d (forward and "
                       "backward) first",
                       p->micro_index < 0 ? 0 : p->micro_index + 1, p->micro_count < 1 ? 1 : p->micro_count);
    return sched_step_ready(s->env.sched, p->micro_count);
}

/* ---- the norm ---- */

static ferry_status norms_offloaded(engine_step *s)
{
    const engine_groups *gs = s->env.groups;
    double t0 = clock_now_ms();
    for (int i = 0; i < gs->n; i++) {
        ferry_status st = drain_wait_norm(s->env.drain, i);
        if (st != FERRY_OK)
            return st;
        if (s->env.dp)
            continue; /* the ranks' tiles are added below */
        const engine_norm *nm = drain_norm(s->env.drain, i);
        double sum = 0;
        bool bad = false;
        for (size_t t = 0; t < nm->ntiles; t++) {
            sum += nm->partial[t];
            bad |= nm->bad[t] != 0;
        }
        s->sumsq[i] = sum;
        s->nonfinite[i] = bad;
    }
    ferry_status st = FERRY_OK;
    if (s->env.dp) {
        engine_norm **norms = malloc((size_t)gs->n * sizeof *norms);
        if (!norms)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "the gradient norm: out of host memory");
        for (int i = 0; i < gs->n; i++)
            norms[i] = drain_norm(s->env.drain, i);
        st = dp_sum_norms(s->env.dp, gs, norms, s->sumsq, s->nonfinite);
        free(norms);
    }
    /* How long the update started after backward ended: gradients still
     * draining (or being reduced across ranks), or their norm still being summed. */
    s->env.prog->acc.optimizer_wait_grads_ms = clock_now_ms() - t0;
    return st;
}

/* Offload none: each group's sum of squares by the backend's op, on the
 * compute stream after the backward that wrote the gradients. */
static ferry_status norms_resident(engine_step *s)
{
    const engine_ctx *c = s->env.ctx;
    const engine_groups *gs = s->env.groups;
    double *dev_sumsq = s->env.placement->global[ENGINE_GLOBAL_SUMSQ];
    ferry_status st;
    size_t bytes = (size_t)gs->n * sizeof(double);
    if (s->env.dp && (st = dp_wait_reduced(s->env.dp, c, gs)) != FERRY_OK)
        return st;
    if ((st = backend_memset_async(c->compute, dev_sumsq, 0, bytes)) != FERRY_OK)
        return st;
    for (int i = 0; i < gs->n; i++) {
        ferry_dtype t;
        const void *grads = group_step_grads(&gs->g[i], ctx_mode(c), s->env.prog->accumulating, s->env.dp != NULL,
                                             c->act, &t);
        if ((st = ops_sumsq(c->compute, grads, t, gs->g[i].numel, dev_sumsq + i,
                            s->env.placement->global[ENGINE_GLOBAL_SUMSQ_SCRATCH])) != FERRY_OK)
            return st;
    }
    double *host = malloc(bytes);
    if (!host)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gradient norm: out of host memory");
    st = backend_memcpy_async(c->compute, host, dev_sumsq, bytes, BACKEND_COPY_D2H);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(c->compute);
    for (int i = 0; i < gs->n && st == FERRY_OK; i++) {
        s->sumsq[i] = host[i];
        s->nonfinite[i] = !isfinite(host[i]);
    }
    free(host);
    return st;
}

/* The recipe's decision (optim/gradnorm.h) from every group's sum, the loss
 * scale taken out. */
static ferry_status decide(engine_step *s, const ferry_step_options *o, gradnorm_decision *d)
{
    int n = s->env.groups->n;
    bool *bad = malloc((size_t)n * sizeof *bad);
    if (!bad)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_step: out of host memory");
    memcpy(bad, s->nonfinite, (size_t)n * sizeof *bad);
    /* Every rank decides from the same flags: all skip, or none. */
    ferry_status st = dp_agree_nonfinite(s->env.dp, bad, n);
    float inv_scale = s->scaling->on ? loss_scale_inverse(&s->scaling->scaler) : 1.0f;
    if (st == FERRY_OK)
        *d = gradnorm_decide_unscaled(s->sumsq, bad, n, o->max_grad_norm, inv_scale);
    free(bad);
    return st;
}

/* ---- skipped steps and the loss scale ---- */

/* Counts the step's outcome and feeds it to the loss scale: the same
 * decision as the update's (so data parallel ranks, fed one flag, agree). */
static void count_skip(engine_scaling *sc, bool skipped)
{
    sc->skipped_steps += skipped;
    sc->skips_in_row = skipped ? sc->skips_in_row + 1 : 0;
    if (sc->on)
        loss_scale_update(&sc->scaler, skipped);
}

/* A loss scale that only ever backs off means the forward or the model
 * overflows, not the gradients: training would go on updating nothing. */
static ferry_status check_collapse(const engine_step *s, float used)
{
    const engine_scaling *sc = s->scaling;
    const ferry_engine_config *cfg = s->env.ctx->cfg;
    int limit = cfg->loss_scale_max_skips;
    if (!sc->on || limit == 0 || sc->skips_in_row < limit)
        return FERRY_OK;
    return err_set(FERRY_ERR_STATE,
                   "the loss scale collapsed: %d steps in a row had inf or NaN gradients (the scale backed off to %g, "
                   "the last step used %g), so nothing has been trained since step %lld; the forward pass itself "
                   "overflows fp16, the run diverged, or the first scale (%g) was far too large: lower the learning "
                   "rate or loss_scale_init, resume from an earlier checkpoint, or train in bf16 or f32 where "
                   "the card allows",
                   sc->skips_in_row, (double)sc->scaler.scale, (double)used, (long long)s->env.prog->step,
                   (double)cfg->loss_scale_init);
}

/* ---- timing ---- */

static void close_timing(engine_step *s)
{
    engine_progress *p = s->env.prog;
    bool params = ctx_mode(s->env.ctx) == FERRY_OFFLOAD_PARAMS;
    double now = clock_now_ms();
    ferry_step_timing t = p->acc;
    t.size = sizeof t;
    t.step_ms = s->last_step_ms > 0 ? now - s->last_step_ms : 0;
    s->last_step_ms = now;
    sched_close_timing(s->env.sched, &t);
    dp_close_timing(s->env.dp, &t);
    err_clear();
    t.max_resident_groups = params ? res_resident_max(s->env.res) : s->env.groups->n;
    t.prefetch_depth = params ? res_prefetch_depth(s->env.res) : 0;
    s->timing = t;
    res_adapt_prefetch(s->env.res, &t, s->env.dp != NULL);
    memset(&p->acc, 0, sizeof p->acc);
}

ferry_status step_run(engine_step *s, const ferry_step_options *caller_opts, ferry_step_report *r)
{
    ferry_step_options opts, *o = &opts;
    ferry_step_report report = FERRY_STEP_REPORT_INIT;
    engine_progress *p = s->env.prog;
    engine_scaling *sc = s->scaling;
    bool params = ctx_mode(s->env.ctx) == FERRY_OFFLOAD_PARAMS;
    ferry_status st = check_options(caller_opts, o);
    if (st != FERRY_OK || (st = check_ready(s)) != FERRY_OK)
        return st;
    if ((st = update_check(s->env.update)) != FERRY_OK)
        return st;
    if (r && (st = sized_write(r, &report, sizeof report, "ferry_step_report")) != FERRY_OK)
        return err_wrap(st, "ferry_engine_step");
    bool offloaded = ctx_mode(s->env.ctx) != FERRY_OFFLOAD_NONE;
    st = offloaded ? norms_offloaded(s) : norms_resident(s);
    if (st == FERRY_OK) /* every collective of the step so far went through */
        st = dp_check(s->env.dp);
    if (st != FERRY_OK)
        return st;
    gradnorm_decision d = {0, 1.0f, false, -1, 1.0f};
    if ((st = decide(s, o, &d)) != FERRY_OK)
        return st;
    if ((st = update_prepare(s->env.update)) != FERRY_OK)
        return st;
    if (!d.skipped) {
        if ((st = update_run(s->env.update, o, d.grad_scale)) != FERRY_OK)
            return st;
        p->step++;
    } else if (params && (st = res_settle(s->env.res)) != FERRY_OK) {
        return st; /* skipped: the weights did not change, the copies on the device stay current */
    }
    sched_step_done(s->env.sched);
    if (params)
        res_order_learn(s->env.res); /* the first step's fetches become the order */
    p->micro_index = -1;
    p->acc.optimizer_ms = update_last_ms(s->env.update);
    close_timing(s);
    if ((st = update_after_step(s->env.update, &s->timing)) != FERRY_OK)
        return st;
    report.step = p->step;
    report.grad_norm = d.grad_norm;
    report.clip_coef = d.clip_coef;
    report.skipped = d.skipped;
    report.bad_group = d.bad_group;
    report.loss_scale = sc->on ? sc->scaler.scale : 0.0f;
    count_skip(sc, d.skipped);
    report.skipped_steps = sc->skipped_steps;
    report.skips_in_row = sc->skips_in_row;
    if (r)
        sized_write(r, &report, sizeof report, "ferry_step_report"); /* its size was checked above */
    trace *tr = s->env.ctx->trace;
    if (tr) {
        trace_step_timing(tr, p->step, "step_ms", s->timing.step_ms);
        trace_step_timing(tr, p->step, "compute_wait_transfer_ms", s->timing.compute_wait_transfer_ms);
        trace_step_timing(tr, p->step, "compute_wait_optimizer_ms", s->timing.compute_wait_optimizer_ms);
        trace_step_timing(tr, p->step, "optimizer_wait_grads_ms", s->timing.optimizer_wait_grads_ms);
    }
    return check_collapse(s, report.loss_scale);
}
