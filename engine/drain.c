/* Gradients within a step: the buffers a group's backward writes, and on
 * release their way to the host on the D2H stream (with data parallelism
 * through the reduce-scatter, engine/dp.c) while backward goes on, with
 * the CPU's fp32 sum over micro-batches and the norm's partial sums taken
 * tile by tile on the optimizer threads as each group lands. Every
 * cross-stream dependency is an event; which groups are fetched is the
 * schedule's business, the update that reads the result the step's. */
#include "engine/drain.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/comm.h"
#include "backend/ops/ops.h"
#include "common/error.h"
#include "common/numerics.h"
#include "engine/layout.h"
#include "optim/adamw.h"
#include "optim/gradnorm.h"

typedef struct drain_group {
    bool acquired;          /* its gradient buffer was handed out in this micro-batch */
    int slot;               /* params mode: its gradient slot (-1: none) */
    tp_ticket *norm_ticket; /* the CPU's work on the drained gradients: their fp32 sum
                               (several micro-batches) and the norm's partials */
    engine_norm *norm;
} drain_group;

/* Params mode's gradient slots of one size class: the free ones, a stack. */
typedef struct drain_class {
    int slots, nfree, groups;
    int *free;
} drain_class;

struct engine_drain {
    drain_env env;
    drain_group *g; /* per group */
    drain_class *classes;
    int nclasses;
    const int *class_of; /* per group (the plan's) */
    int window;          /* the draining gradients the plan's slots hold besides the one asked for */
};

static bool params(const engine_drain *d) { return ctx_mode(d->env.ctx) == FERRY_OFFLOAD_PARAMS; }

ferry_status drain_open(const drain_env *env, engine_drain **out)
{
    engine_drain *d = calloc(1, sizeof *d);
    if (d)
        d->g = calloc((size_t)(env->groups->n > 0 ? env->groups->n : 1), sizeof *d->g);
    if (!d || !d->g) {
        free(d);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    }
    d->env = *env;
    *out = d;
    for (int i = 0; i < env->groups->n; i++)
        d->g[i].slot = -1;
    if (!params(d))
        return FERRY_OK;
    const engine_static_plan *plan = &env->placement->plan;
    d->window = engine_drain_window(plan->depth);
    d->class_of = plan->gclass_of;
    d->nclasses = plan->ngclass;
    d->classes = calloc((size_t)(plan->ngclass ? plan->ngclass : 1), sizeof *d->classes);
    if (!d->classes)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    for (int k = 0; k < plan->ngclass; k++) {
        drain_class *x = &d->classes[k];
        x->slots = plan->gclass[k].slots;
        x->groups = plan->gclass[k].groups;
        x->free = malloc((size_t)(x->slots ? x->slots : 1) * sizeof *x->free);
        if (!x->free)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
        for (int j = 0; j < x->slots; j++)
            x->free[x->nfree++] = x->slots - 1 - j;
    }
    return FERRY_OK;
}

void drain_close(engine_drain *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->env.groups->n; i++) {
        drain_group *dg = &d->g[i];
        if (dg->norm_ticket)
            tp_wait(dg->norm_ticket);
        if (dg->norm) {
            free(dg->norm->partial);
            free(dg->norm->bad);
            free(dg->norm);
        }
    }
    for (int k = 0; d->classes && k < d->nclasses; k++)
        free(d->classes[k].free);
    free(d->classes);
    free(d->g);
    free(d);
}

void drain_begin_micro(engine_drain *d)
{
    for (int i = 0; i < d->env.groups->n; i++)
        d->g[i].acquired = false;
}

ferry_status drain_wait_norm(engine_drain *d, int gi)
{
    ferry_status st = tp_wait(d->g[gi].norm_ticket);
    d->g[gi].norm_ticket = NULL;
    return st;
}

engine_norm *drain_norm(engine_drain *d, int gi) { return d->g[gi].norm; }

ferry_status drain_abandon(engine_drain *d)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < d->env.groups->n; i++) {
        if (d->g[i].norm_ticket) {
            ferry_status w = tp_wait(d->g[i].norm_ticket);
            d->g[i].norm_ticket = NULL;
            if (st == FERRY_OK)
                st = w;
        }
        d->g[i].acquired = false;
    }
    return st;
}

/* ---- params mode: gradient buffers on demand ---- */

void drain_collect(engine_drain *d, bool block)
{
    engine_groups *gs = d->env.groups;
    for (int i = 0; i < gs->n; i++) {
        engine_group *g = &gs->g[i];
        if (!g->dev_grads || d->g[i].acquired)
            continue;
        bool done = false;
        if (block)
            done = backend_event_synchronize(g->drained) == FERRY_OK;
        else if (backend_event_query(g->drained, &done) != FERRY_OK)
            done = false;
        if (done) { /* the slot goes back to its class */
            drain_class *x = &d->classes[d->class_of[i]];
            x->free[x->nfree++] = d->g[i].slot;
            d->g[i].slot = -1;
            trace_vacate(d->env.ctx->trace, FERRY_MEM_GRADS, g->name, i, g->numel * d->env.ctx->act_size, g->dev_grads);
            g->dev_grads = NULL;
        }
    }
}

/* A gradient slot of group gi's class: a free one, else one whose drain
 * has ended (the drains still running are waited for when none has). */
static ferry_status take_slot(engine_drain *d, int gi)
{
    engine_group *g = &d->env.groups->g[gi];
    drain_class *x = &d->classes[d->class_of[gi]];
    if (x->nfree == 0)
        drain_collect(d, false);
    if (x->nfree == 0)
        drain_collect(d, true);
    if (x->nfree == 0)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "params mode: the %d gradient slots of groups the size of '%s' (%d such groups) all hold "
                       "gradients not yet released; release each group's backward before asking for more than %d "
                       "groups' gradients",
                       x->slots, g->name, x->groups, x->slots);
    d->g[gi].slot = x->free[--x->nfree];
    g->dev_grads = placement_gslot(d->env.placement, d->class_of[gi], d->g[gi].slot);
    trace_occupy(d->env.ctx->trace, FERRY_MEM_GRADS, g->name, gi, g->numel * d->env.ctx->act_size, g->dev_grads);
    return FERRY_OK;
}

static ferry_status acquire_param_grads(engine_drain *d, int gi, backend_stream *s)
{
    const engine_ctx *c = d->env.ctx;
    engine_groups *gs = d->env.groups;
    engine_group *g = &gs->g[gi];
    size_t bytes = g->numel * c->act_size;
    drain_collect(d, false);
    /* Bound the gradient buffers still draining to the plan's window, so
     * the slots never run out however fast the D2H stream runs. */
    int draining = 0;
    for (int i = 0; i < gs->n; i++)
        draining += gs->g[i].dev_grads && !d->g[i].acquired && i != gi;
    if (draining > d->window)
        drain_collect(d, true);
    ferry_status st = g->dev_grads ? FERRY_OK : take_slot(d, gi);
    if (st != FERRY_OK)
        return st;
    /* Every micro-batch's gradient starts at zero (several are summed in fp32
     * on the host), once a lingering buffer's last drain has read it. */
    if ((st = backend_stream_wait_event(s, g->drained)) != FERRY_OK)
        return st;
    return backend_memset_async(s, g->dev_grads, 0, bytes);
}

ferry_status drain_grads(engine_drain *d, int gi, backend_stream *s, void **grads)
{
    engine_group *g = &d->env.groups->g[gi];
    ferry_status st;
    if (!d->g[gi].acquired && params(d) && (st = acquire_param_grads(d, gi, s)) != FERRY_OK)
        return err_wrap(st, "gradients of group %d ('%s')", gi, g->name);
    d->g[gi].acquired = true;
    *grads = g->dev_grads;
    return FERRY_OK;
}

/* ---- draining and the norm's partial sums ---- */

/* The CPU's work on one drain of one group, a pool job of its own: its
 * tiles wait until the d2h stream has copied this micro-batch's gradients
 * (a latch the stream opens, so a later drain of the same group can never be
 * mistaken for this one), add them into the fp32 sum over micro-batches, and
 * after the step's last drain take the norm's partial sums. */
typedef struct drain_job {
    engine_group *g;
    engine_norm *norm;
    bool accumulate, first, last;
    ferry_dtype t;  /* of the drained gradients: the device type, or fp32 when summed across ranks */
    size_t tile0;   /* the group's tile where this rank's part begins (0 alone) */
    pthread_mutex_t lock;
    pthread_cond_t landed_cond;
    bool landed, abandoned;
    comm_waker *waker; /* with data parallelism: a failed world abandons the job (its copy may never land) */
} drain_job;

static ferry_status drain_landed(void *p)
{
    drain_job *j = *(drain_job **)p;
    pthread_mutex_lock(&j->lock);
    j->landed = true;
    pthread_cond_broadcast(&j->landed_cond);
    pthread_mutex_unlock(&j->lock);
    return FERRY_OK;
}

static void drain_tile(void *ctx, size_t tile, int worker)
{
    (void)worker;
    drain_job *job = ctx;
    pthread_mutex_lock(&job->lock);
    while (!job->landed && !job->abandoned)
        pthread_cond_wait(&job->landed_cond, &job->lock);
    bool abandoned = job->abandoned;
    pthread_mutex_unlock(&job->lock);
    if (abandoned)
        return;
    engine_group *g = job->g;
    size_t first = tile * OPTIM_TILE; /* in this rank's part of the group */
    size_t n = g->part_n - first < OPTIM_TILE ? g->part_n - first : OPTIM_TILE;
    const char *src = (const char *)g->host_grads + first * dtype_size(job->t);
    if (job->accumulate)
        numerics_accumulate(g->grad_acc + first, src, job->t, n, job->first);
    if (!job->last)
        return;
    bool bad = false;
    size_t at = job->tile0 + tile;
    if (job->accumulate)
        gradnorm_sumsq(NULL, g->grad_acc + first, FERRY_DTYPE_F32, n, &job->norm->partial[at], &bad);
    else
        gradnorm_sumsq(NULL, src, job->t, n, &job->norm->partial[at], &bad);
    job->norm->bad[at] = bad;
}

/* The world failed (a rank died or hung, NCCL was aborted): the copy the
 * tiles wait for may never land, so they give up; the step then fails with
 * the world's failure at its next collective. */
static void drain_job_wake(void *ctx)
{
    drain_job *j = ctx;
    pthread_mutex_lock(&j->lock);
    j->abandoned = true;
    pthread_cond_broadcast(&j->landed_cond);
    pthread_mutex_unlock(&j->lock);
}

static void drain_job_free(void *ctx)
{
    drain_job *j = ctx;
    comm_waker_remove(j->waker);
    pthread_cond_destroy(&j->landed_cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static ferry_status norm_arrays(drain_group *dg, const engine_group *g, int gi)
{
    if (dg->norm)
        return FERRY_OK;
    size_t ntiles = (g->numel + OPTIM_TILE - 1) / OPTIM_TILE;
    dg->norm = calloc(1, sizeof *dg->norm);
    if (dg->norm) {
        dg->norm->partial = calloc(ntiles, sizeof(double));
        dg->norm->bad = calloc(ntiles, 1);
        dg->norm->ntiles = ntiles;
    }
    if (!dg->norm || !dg->norm->partial || !dg->norm->bad)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gradient norm of group %d: out of host memory", gi);
    return FERRY_OK;
}

/* Queues the CPU's work on the drain just issued on the d2h stream. */
static ferry_status submit_drain_job(engine_drain *d, int gi, bool last)
{
    const engine_ctx *c = d->env.ctx;
    const engine_progress *p = d->env.prog;
    engine_group *g = &d->env.groups->g[gi];
    drain_group *dg = &d->g[gi];
    ferry_status st = norm_arrays(dg, g, gi);
    drain_job *j = st == FERRY_OK ? calloc(1, sizeof *j) : NULL;
    if (st == FERRY_OK && !j)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "the gradients of group %d: out of host memory", gi);
    if (st != FERRY_OK)
        return st;
    j->g = g;
    j->norm = dg->norm;
    j->accumulate = p->accumulating;
    j->first = p->micro_index == 0;
    j->last = last;
    j->t = d->env.dp ? FERRY_DTYPE_F32 : c->act;
    j->tile0 = g->part_lo / OPTIM_TILE;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->landed_cond, NULL);
    if (d->env.dp && (st = comm_waker_add(drain_job_wake, j, &j->waker)) != FERRY_OK) {
        drain_job_free(j);
        return st;
    }
    size_t ntiles = (g->part_n + OPTIM_TILE - 1) / OPTIM_TILE;
    if ((st = tp_submit(c->threads, ntiles, drain_tile, j, drain_job_free, &dg->norm_ticket)) != FERRY_OK) {
        drain_job_free(j);
        return st;
    }
    if (ntiles == 0) /* this rank owns none of the group: nothing waits for the copy */
        return FERRY_OK;
    st = backend_launch_host(c->d2h, drain_landed, &j, sizeof j);
    if (st != FERRY_OK) { /* the tiles must not wait for a copy that will not come */
        pthread_mutex_lock(&j->lock);
        j->abandoned = true;
        pthread_cond_broadcast(&j->landed_cond);
        pthread_mutex_unlock(&j->lock);
    }
    return st;
}

/* The d2h stream waits for the CPU to be done with host_grads (the last
 * micro-batch's sum) before overwriting them; the stream owns the ticket. */
typedef struct ticket_wait_args {
    tp_ticket *ticket;
} ticket_wait_args;

static ferry_status wait_ticket(void *p)
{
    return tp_wait(((ticket_wait_args *)p)->ticket);
}

static ferry_status after_cpu_sum(engine_drain *d, int gi)
{
    drain_group *dg = &d->g[gi];
    if (!dg->norm_ticket)
        return FERRY_OK;
    ticket_wait_args a = {dg->norm_ticket};
    ferry_status st = backend_launch_host(d->env.ctx->d2h, wait_ticket, &a, sizeof a);
    if (st == FERRY_OK)
        dg->norm_ticket = NULL;
    return st;
}

static ferry_status drain(engine_drain *d, int gi, bool last)
{
    const engine_ctx *c = d->env.ctx;
    engine_progress *p = d->env.prog;
    engine_group *g = &d->env.groups->g[gi];
    size_t bytes = g->numel * c->act_size;
    ferry_status st;
    /* With the delayed update, the last step's update may still read host_grads. */
    if (c->cfg->delayed_update && ((st = update_barrier(d->env.update, g)) != FERRY_OK ||
                                   (st = backend_stream_wait_event(c->d2h, g->updated)) != FERRY_OK))
        return st;
    if (p->accumulating && (st = after_cpu_sum(d, gi)) != FERRY_OK)
        return st;
    /* Alone the device gradients come down; with data parallelism this
     * rank's slot of their sum across ranks, reduced chunk by chunk. */
    if (d->env.dp) {
        st = dp_reduce_and_drain(d->env.dp, c, p, g, gi);
    } else {
        p->acc.transfer_d2h_bytes += (double)bytes;
        if ((st = backend_stream_wait_event(c->d2h, g->grads_done)) == FERRY_OK &&
            (st = backend_memcpy_async(c->d2h, g->host_grads, g->dev_grads, bytes, BACKEND_COPY_D2H)) == FERRY_OK)
            st = backend_event_record(g->drained, c->d2h);
    }
    if (st != FERRY_OK)
        return st;
    return last || p->accumulating ? submit_drain_job(d, gi, last) : FERRY_OK;
}

ferry_status drain_release(engine_drain *d, int gi, backend_stream *s)
{
    const engine_ctx *c = d->env.ctx;
    engine_progress *p = d->env.prog;
    engine_group *g = &d->env.groups->g[gi];
    ferry_status st;
    if (!d->g[gi].acquired && params(d)) {
        /* No gradient was asked for: the group's gradient is zero (or what
         * earlier micro-batches left). Give it a buffer so the sum stays whole. */
        void *unused;
        if ((st = drain_grads(d, gi, s, &unused)) != FERRY_OK)
            return st;
    }
    d->g[gi].acquired = false;
    if ((st = backend_event_record(g->grads_done, s)) != FERRY_OK)
        return st;
    bool last = p->micro_index == p->micro_count - 1;
    ferry_offload mode = ctx_mode(c);
    if (mode == FERRY_OFFLOAD_NONE && d->env.dp)
        return dp_release_resident(d->env.dp, c, p, g, gi, s, last);
    if (mode == FERRY_OFFLOAD_NONE)
        return p->accumulating ? ops_accumulate(s, g->grad_acc, g->dev_grads, g->numel, p->micro_index == 0) : FERRY_OK;
    if (mode != FERRY_OFFLOAD_PARAMS && !last && !p->accumulating && !d->env.dp)
        return FERRY_OK;
    return drain(d, gi, last);
}
