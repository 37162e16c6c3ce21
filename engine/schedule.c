/* The schedule inside a step: fetching a group's weights (and, in params
 * mode, the next groups ahead on the H2D stream), handing out gradient
 * buffers, and on release draining gradients to the host on the D2H stream
 * while backward goes on, with the gradient norm's partial sums computed by
 * the CPU as each group lands. Every cross-stream dependency is an event. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/shard.h"
#include "common/numerics.h"
#include "optim/gradnorm.h"

static ferry_status check_micro(ferry_engine *e, const char *what)
{
    if (e->inference)
        return FERRY_OK;
    if (e->micro_index < 0)
        return err_set(FERRY_ERR_STATE, "%s: no micro-batch in progress; call "
                                        "ferry_engine_begin_micro_batch() first", what);
    return FERRY_OK;
}

/* ---- the CPU update as seen from the streams ---- */

typedef struct update_wait_args {
    tp_ticket **tickets; /* owned by the host function, freed when waited */
    int count;
} update_wait_args;

static ferry_status wait_update(void *p)
{
    update_wait_args *a = p;
    ferry_status st = FERRY_OK;
    for (int k = 0; k < a->count; k++) {
        ferry_status one = tp_wait(a->tickets[k]);
        if (st == FERRY_OK)
            st = one;
    }
    free(a->tickets);
    return st;
}

ferry_status engine_update_barrier(ferry_engine *e, engine_group *g)
{
    if (g->nvme_wait)
        return engine_nvme_barrier(e, g);
    if (!g->update_tickets)
        return FERRY_OK;
    update_wait_args a = {g->update_tickets, g->update_count};
    ferry_status st = backend_launch_host(e->h2d, wait_update, &a, sizeof a);
    if (st != FERRY_OK)
        return st;
    g->update_tickets = NULL; /* the stream owns them now */
    g->update_count = 0;
    return backend_event_record(g->updated, e->h2d);
}

ferry_status engine_wait_updates(ferry_engine *e)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++)
        st = engine_update_barrier(e, &e->groups[i]);
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++)
        st = backend_event_synchronize(e->groups[i].updated);
    if (st == FERRY_OK && e->nvme)
        st = engine_nvme_wait_idle(e); /* the update's last writes too */
    return st;
}

ferry_status engine_retire_all(ferry_engine *e)
{
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (g->fetched[FERRY_PHASE_FORWARD] || g->fetched[FERRY_PHASE_BACKWARD])
            return err_set(FERRY_ERR_STATE, "group %d ('%s') is still fetched; release it first", i, g->name);
        /* Prefetched but never asked for: let the copy land, then drop it. */
        if (g->residency == RES_INFLIGHT || g->residency == RES_PRESENT) {
            ferry_status st = backend_event_synchronize(g->uploaded);
            if (st != FERRY_OK)
                return st;
            g->residency = RES_RETIRING;
        }
    }
    return engine_evict(e, -1, 0, NULL);
}

/* ---- params mode: fetching ---- */

static int window(const ferry_engine *e) { return engine_weight_window(e->cfg.prefetch_groups); }

static ferry_status alloc_weights(ferry_engine *e, engine_group *g, int gi)
{
    char name[ENGINE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s weights", g->name);
    ferry_status st = engine_evict(e, gi, window(e) - 1, NULL);
    if (st != FERRY_OK)
        return st;
    st = arena_alloc(e->arena, g->padded * e->act_size, FERRY_MEM_PARAMS, name, &g->dev_weights);
    while (st == FERRY_ERR_OUT_OF_MEMORY) {
        int evicted = 0;
        ferry_status ev = engine_evict(e, gi, e->resident_now - 1, &evicted);
        if (ev != FERRY_OK)
            return ev;
        if (evicted == 0)
            break; /* arena_alloc's message says what did not fit */
        st = arena_alloc(e->arena, g->padded * e->act_size, FERRY_MEM_PARAMS, name, &g->dev_weights);
    }
    return st;
}

static ferry_status issue_fetch(ferry_engine *e, int gi)
{
    engine_group *g = &e->groups[gi];
    ferry_status st = alloc_weights(e, g, gi);
    if (st != FERRY_OK)
        return st;
    e->resident_now++;
    if (e->resident_now > e->resident_max)
        e->resident_max = e->resident_now;
    g->residency = RES_INFLIGHT;
    g->last_use = ++e->fetch_counter;
    if (e->dp) /* this rank's slot up, the others' gathered */
        return shard_upload(e, g, NULL);
    size_t bytes = g->numel * e->act_size;
    e->timing_acc.transfer_h2d_bytes += (double)bytes;
    if ((st = engine_update_barrier(e, g)) != FERRY_OK ||
        (st = backend_memcpy_async(e->h2d, g->dev_weights, g->host_weights, bytes, BACKEND_COPY_H2D)) != FERRY_OK)
        return st;
    return backend_event_record(g->uploaded, e->h2d);
}

static void collect_grads(ferry_engine *e, bool block);

/* Best effort: a prefetch that does not fit is simply not issued. With
 * data parallelism every rank must gather the same groups in the same
 * order, so whether one fits must not depend on how far the drains got:
 * a prefetch that finds no room waits for them and tries once more. */
static void prefetch_after(ferry_engine *e, int gi, ferry_phase phase)
{
    int dir = phase == FERRY_PHASE_FORWARD ? 1 : -1;
    for (int k = 1; k <= e->cfg.prefetch_groups; k++) {
        int h = gi + dir * k;
        if (h < 0 || h >= e->ngroups)
            break;
        if (e->groups[h].residency != RES_ABSENT)
            continue;
        int evicted = 0;
        if (e->resident_now >= window(e) &&
            (engine_evict(e, gi, window(e) - 1, &evicted) != FERRY_OK || evicted == 0)) {
            err_clear(); /* the fetch that needs the room will meet it again and say so */
            break;
        }
        ferry_status st = issue_fetch(e, h);
        if (st == FERRY_ERR_OUT_OF_MEMORY && e->dp && e->groups[h].residency == RES_ABSENT) {
            collect_grads(e, true);
            st = issue_fetch(e, h);
        }
        if (st != FERRY_OK) {
            err_clear();
            break;
        }
    }
}

/* The compute stream waits for the weights; in the first forward after a
 * step the wait is timed (events around it), for the overlap figures. */
static ferry_status wait_for_weights(ferry_engine *e, engine_group *g, ferry_phase phase, backend_stream *s)
{
    bool timed = phase == FERRY_PHASE_FORWARD && e->micro_index == 0 && !g->wait_recorded;
    ferry_status st;
    if (timed && (st = backend_event_record(g->wait_begin, s)) != FERRY_OK)
        return st;
    /* Sharded: the weights came in two legs, this rank's slot up (the
     * update, the transfer) and the others' gathered; the mark between them
     * tells the two waits apart. */
    if (timed && shard_sharded(e) &&
        ((st = backend_stream_wait_event(s, g->staged)) != FERRY_OK ||
         (st = backend_event_record(g->wait_mid, s)) != FERRY_OK))
        return st;
    if ((st = backend_stream_wait_event(s, g->uploaded)) != FERRY_OK)
        return st;
    if (timed) {
        g->wait_recorded = true;
        return backend_event_record(g->wait_end, s);
    }
    return FERRY_OK;
}

ferry_status engine_fetch(ferry_engine *e, int gi, ferry_phase phase, backend_stream *s, void **weights)
{
    ferry_status st = engine_check_group(e, gi, "ferry_engine_fetch");
    if (st != FERRY_OK)
        return st;
    if (!weights || (phase != FERRY_PHASE_FORWARD && phase != FERRY_PHASE_BACKWARD))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_fetch: NULL weights or bad phase %d", (int)phase);
    if ((st = check_micro(e, "ferry_engine_fetch")) != FERRY_OK)
        return st;
    engine_group *g = &e->groups[gi];
    if (e->inference && phase != FERRY_PHASE_FORWARD)
        return err_set(FERRY_ERR_STATE, "ferry_engine_fetch: group %d for backward during inference; call "
                                        "ferry_engine_end_inference() first", gi);
    if (g->fetched[phase])
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_fetch: group %d ('%s') was asked for twice in %s without a release "
                       "between; call ferry_engine_release() when done with it",
                       gi, g->name, engine_phase_name(phase));
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS) {
        if (g->residency == RES_ABSENT && (st = issue_fetch(e, gi)) != FERRY_OK)
            return err_wrap(st, "fetching group %d ('%s') for %s", gi, g->name, engine_phase_name(phase));
        if (g->residency != RES_PRESENT)
            g->residency = RES_PRESENT;
        g->last_use = ++e->fetch_counter;
        prefetch_after(e, gi, phase);
    }
    if ((st = wait_for_weights(e, g, phase, s)) != FERRY_OK)
        return st;
    g->fetched[phase] = true;
    *weights = g->dev_weights;
    return FERRY_OK;
}

/* ---- gradients ---- */

/* Params mode: frees device gradient buffers whose drain has finished. */
static void collect_grads(ferry_engine *e, bool block)
{
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (!g->dev_grads || g->grads_acquired)
            continue;
        bool done = false;
        if (block)
            done = backend_event_synchronize(g->drained) == FERRY_OK;
        else if (backend_event_query(g->drained, &done) != FERRY_OK)
            done = false;
        if (done) {
            arena_free(e->arena, g->dev_grads);
            g->dev_grads = NULL;
        }
    }
}

static ferry_status acquire_param_grads(ferry_engine *e, engine_group *g, backend_stream *s)
{
    size_t bytes = g->numel * e->act_size;
    char name[ENGINE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s grads", g->name);
    collect_grads(e, false);
    /* Bound the gradient buffers still draining to the prefetch window, so
     * the device peak does not depend on how fast the D2H stream runs. */
    int draining = 0;
    for (int i = 0; i < e->ngroups; i++)
        draining += e->groups[i].dev_grads && !e->groups[i].grads_acquired && &e->groups[i] != g;
    if (draining > engine_drain_window(e->cfg.prefetch_groups))
        collect_grads(e, true);
    ferry_status st = g->dev_grads ? FERRY_OK : arena_alloc(e->arena, bytes, FERRY_MEM_GRADS, name, &g->dev_grads);
    if (st == FERRY_ERR_OUT_OF_MEMORY) {
        collect_grads(e, true);
        st = engine_evict(e, (int)(g - e->groups), 1, NULL);
        if (st == FERRY_OK)
            st = arena_alloc(e->arena, bytes, FERRY_MEM_GRADS, name, &g->dev_grads);
    }
    if (st != FERRY_OK)
        return st;
    /* Every micro-batch's gradient starts at zero (several are summed in fp32
     * on the host), once a lingering buffer's last drain has read it. */
    if ((st = backend_stream_wait_event(s, g->drained)) != FERRY_OK)
        return st;
    return backend_memset_async(s, g->dev_grads, 0, bytes);
}

ferry_status engine_grads(ferry_engine *e, int gi, backend_stream *s, void **grads)
{
    ferry_status st = engine_check_group(e, gi, "ferry_engine_grads");
    if (st != FERRY_OK)
        return st;
    if (!grads)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_grads: grads is NULL");
    engine_group *g = &e->groups[gi];
    if (!g->fetched[FERRY_PHASE_BACKWARD])
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_grads: group %d ('%s') is not fetched for backward; call "
                       "ferry_engine_fetch(e, %d, FERRY_PHASE_BACKWARD, ...) first",
                       gi, g->name, gi);
    if (!g->grads_acquired && e->cfg.offload == FERRY_OFFLOAD_PARAMS &&
        (st = acquire_param_grads(e, g, s)) != FERRY_OK)
        return err_wrap(st, "gradients of group %d ('%s')", gi, g->name);
    g->grads_acquired = true;
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
    ferry_engine *e;
    int group;
    bool accumulate, first, last;
    ferry_dtype t;  /* of the drained gradients: the device type, or fp32 when summed across ranks */
    size_t tile0;   /* the group's tile where this rank's part begins (0 alone) */
    pthread_mutex_t lock;
    pthread_cond_t landed_cond;
    bool landed, abandoned;
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
    ferry_engine *e = job->e;
    engine_group *g = &e->groups[job->group];
    size_t first = tile * OPTIM_TILE; /* in this rank's part of the group */
    size_t n = g->shard_n - first < OPTIM_TILE ? g->shard_n - first : OPTIM_TILE;
    const char *src = (const char *)g->host_grads + first * dtype_size(job->t);
    if (job->accumulate)
        numerics_accumulate(g->grad_acc + first, src, job->t, n, job->first);
    if (!job->last)
        return;
    bool bad = false;
    size_t at = job->tile0 + tile;
    if (job->accumulate)
        gradnorm_sumsq(NULL, g->grad_acc + first, FERRY_DTYPE_F32, n, &g->norm->partial[at], &bad);
    else
        gradnorm_sumsq(NULL, src, job->t, n, &g->norm->partial[at], &bad);
    g->norm->bad[at] = bad;
}

static void drain_job_free(void *ctx)
{
    drain_job *j = ctx;
    pthread_cond_destroy(&j->landed_cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static ferry_status norm_arrays(ferry_engine *e, engine_group *g, int gi)
{
    if (g->norm)
        return FERRY_OK;
    size_t ntiles = (g->numel + OPTIM_TILE - 1) / OPTIM_TILE;
    g->norm = calloc(1, sizeof *g->norm);
    if (g->norm) {
        g->norm->partial = calloc(ntiles, sizeof(double));
        g->norm->bad = calloc(ntiles, 1);
        g->norm->ntiles = ntiles;
    }
    if (!g->norm || !g->norm->partial || !g->norm->bad)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gradient norm of group %d: out of host memory", gi);
    (void)e;
    return FERRY_OK;
}

/* Queues the CPU's work on the drain just issued on the d2h stream. */
static ferry_status submit_drain_job(ferry_engine *e, int gi, bool last)
{
    engine_group *g = &e->groups[gi];
    ferry_status st = norm_arrays(e, g, gi);
    drain_job *j = st == FERRY_OK ? calloc(1, sizeof *j) : NULL;
    if (st == FERRY_OK && !j)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "the gradients of group %d: out of host memory", gi);
    if (st != FERRY_OK)
        return st;
    j->e = e;
    j->group = gi;
    j->accumulate = e->accumulating;
    j->first = e->micro_index == 0;
    j->last = last;
    j->t = e->dp ? FERRY_DTYPE_F32 : e->act;
    j->tile0 = g->shard_lo / OPTIM_TILE;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->landed_cond, NULL);
    size_t ntiles = (g->shard_n + OPTIM_TILE - 1) / OPTIM_TILE;
    if ((st = tp_submit(e->threads, ntiles, drain_tile, j, drain_job_free, &g->norm_ticket)) != FERRY_OK) {
        drain_job_free(j);
        return st;
    }
    if (ntiles == 0) /* this rank owns none of the group: nothing waits for the copy */
        return FERRY_OK;
    st = backend_launch_host(e->d2h, drain_landed, &j, sizeof j);
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

static ferry_status after_cpu_sum(ferry_engine *e, engine_group *g)
{
    if (!g->norm_ticket)
        return FERRY_OK;
    ticket_wait_args a = {g->norm_ticket};
    ferry_status st = backend_launch_host(e->d2h, wait_ticket, &a, sizeof a);
    if (st == FERRY_OK)
        g->norm_ticket = NULL;
    return st;
}

static ferry_status drain(ferry_engine *e, engine_group *g, int gi, bool last)
{
    size_t bytes = g->numel * e->act_size;
    ferry_status st;
    /* With the delayed update, the last step's update may still read host_grads. */
    if (e->cfg.delayed_update && ((st = engine_update_barrier(e, g)) != FERRY_OK ||
                                  (st = backend_stream_wait_event(e->d2h, g->updated)) != FERRY_OK))
        return st;
    if (e->accumulating && (st = after_cpu_sum(e, g)) != FERRY_OK)
        return st;
    /* Alone the device gradients come down; with data parallelism this
     * rank's slot of their sum across ranks, reduced chunk by chunk. */
    if (e->dp) {
        st = shard_reduce_and_drain(e, g);
    } else {
        e->timing_acc.transfer_d2h_bytes += (double)bytes;
        if ((st = backend_stream_wait_event(e->d2h, g->grads_done)) == FERRY_OK &&
            (st = backend_memcpy_async(e->d2h, g->host_grads, g->dev_grads, bytes, BACKEND_COPY_D2H)) == FERRY_OK)
            st = backend_event_record(g->drained, e->d2h);
    }
    if (st != FERRY_OK)
        return st;
    return last || e->accumulating ? submit_drain_job(e, gi, last) : FERRY_OK;
}

ferry_status engine_release(ferry_engine *e, int gi, ferry_phase phase, backend_stream *s)
{
    ferry_status st = engine_check_group(e, gi, "ferry_engine_release");
    if (st != FERRY_OK)
        return st;
    if (phase != FERRY_PHASE_FORWARD && phase != FERRY_PHASE_BACKWARD)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_release: bad phase %d", (int)phase);
    engine_group *g = &e->groups[gi];
    if (!g->fetched[phase])
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_release: group %d ('%s') is not fetched for %s; fetch before release",
                       gi, g->name, engine_phase_name(phase));
    g->fetched[phase] = false;
    bool params = e->cfg.offload == FERRY_OFFLOAD_PARAMS;
    if (params && !g->fetched[!phase]) {
        if ((st = backend_event_record(g->released, s)) != FERRY_OK)
            return st;
        g->residency = RES_RETIRING;
    }
    if (phase == FERRY_PHASE_FORWARD)
        return FERRY_OK;
    if (e->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_release: no backward during inference");
    if (g->released_backward != e->micro_index)
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_release: group %d ('%s') was already released in this micro-batch's "
                       "backward",
                       gi, g->name);
    g->released_backward++;
    if (!g->grads_acquired && params) {
        /* No gradient was asked for: the group's gradient is zero (or what
         * earlier micro-batches left). Give it a buffer so the sum stays whole. */
        void *unused;
        g->fetched[phase] = true;
        st = engine_grads(e, gi, s, &unused);
        g->fetched[phase] = false;
        if (st != FERRY_OK)
            return st;
    }
    g->grads_acquired = false;
    if ((st = backend_event_record(g->grads_done, s)) != FERRY_OK)
        return st;
    bool last = e->micro_index == e->micro_count - 1;
    if (e->cfg.offload == FERRY_OFFLOAD_NONE && e->dp)
        return shard_release_resident(e, g, s, last);
    if (e->cfg.offload == FERRY_OFFLOAD_NONE)
        return e->accumulating ? ops_accumulate(s, g->grad_acc, g->dev_grads, g->numel, e->micro_index == 0) : FERRY_OK;
    if (!params && !last && !e->accumulating && !e->dp)
        return FERRY_OK;
    return drain(e, g, gi, last);
}
