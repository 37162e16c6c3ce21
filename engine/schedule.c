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

ferry_status engine_settle_resident(ferry_engine *e)
{
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (g->fetched[FERRY_PHASE_FORWARD] || g->fetched[FERRY_PHASE_BACKWARD])
            return err_set(FERRY_ERR_STATE, "group %d ('%s') is still fetched; release it first", i, g->name);
        /* Prefetched but never asked for: let the copy land; it stays. */
        if (g->residency == RES_INFLIGHT || g->residency == RES_PRESENT) {
            ferry_status st = backend_event_synchronize(g->uploaded);
            if (st != FERRY_OK)
                return st;
            /* the compute stream never read it: its last read is long done */
            if ((st = backend_event_record(g->released, e->compute)) != FERRY_OK)
                return st;
            g->residency = RES_RETIRING;
        }
    }
    return FERRY_OK;
}

ferry_status engine_retire_all(ferry_engine *e)
{
    ferry_status st = engine_settle_resident(e);
    if (st != FERRY_OK)
        return st;
    return engine_evict(e, -1, 0, NULL);
}

ferry_status engine_refresh_resident(ferry_engine *e)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        if (g->residency != RES_RETIRING)
            continue;
        if (e->dp) { /* this rank's slot up, the others' gathered, as a fetch does */
            st = shard_upload(e, g, g->released);
            continue;
        }
        size_t bytes = g->numel * e->act_size;
        e->timing_acc.transfer_h2d_bytes += (double)bytes;
        if ((st = engine_update_barrier(e, g)) == FERRY_OK &&
            (st = backend_stream_wait_event(e->h2d, g->released)) == FERRY_OK &&
            (st = backend_memcpy_async(e->h2d, g->dev_weights, g->host_weights, bytes, BACKEND_COPY_H2D)) == FERRY_OK)
            st = backend_event_record(g->uploaded, e->h2d);
    }
    return st;
}

/* ---- params mode: fetching ---- */

static int window(const ferry_engine *e) { return engine_weight_window(e->prefetch_depth); }

/* The weights residency may keep on the device: the budget less every
 * other device byte in use now (activations, workspace, staging) and the
 * room kept for the gradients in flight. It depends only on what was
 * allocated, never on timing, so ranks that allocate alike keep alike. */
static uint64_t weight_cap(ferry_engine *e)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(e->arena, &ms);
    uint64_t other = e->grads_reserve;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (c != FERRY_MEM_PARAMS && c != FERRY_MEM_GRADS)
            other += ms.device_current_bytes[c];
    uint64_t budget = arena_budget(e->arena);
    return budget > other ? budget - other : 0;
}

/* The residency rule before `bytes` more of weights go on the device for a
 * group needed `dist` fetches from now: released groups stay while all the
 * weights fit the cap, or while fewer than the window hold weights (the
 * schedule's own need); otherwise the one needed furthest ahead goes, never
 * one needed before this group. *met says whether the rule is met. */
static ferry_status make_room(ferry_engine *e, int gi, long dist, uint64_t bytes, bool *met)
{
    uint64_t cap = weight_cap(e);
    *met = true;
    while (*met && e->resident_bytes + bytes > cap && e->resident_now >= window(e)) {
        ferry_status st = engine_evict_after(e, gi, dist, met);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

/* A fetch (dist 0) evicts any released group the arena needs gone; a
 * prefetch only those needed after the group it brings. */
static ferry_status alloc_weights(ferry_engine *e, engine_group *g, int gi, long dist)
{
    char name[ENGINE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s weights", g->name);
    long after = dist > 0 ? dist : -1;
    ferry_status st = arena_alloc(e->arena, g->padded * e->act_size, FERRY_MEM_PARAMS, name, &g->dev_weights);
    bool evicted = true;
    while (st == FERRY_ERR_OUT_OF_MEMORY && evicted) {
        ferry_status ev = engine_evict_after(e, gi, after, &evicted);
        if (ev != FERRY_OK)
            return ev;
        if (!evicted)
            break; /* arena_alloc's message says what did not fit */
        st = arena_alloc(e->arena, g->padded * e->act_size, FERRY_MEM_PARAMS, name, &g->dev_weights);
    }
    return st;
}

static ferry_status issue_fetch(ferry_engine *e, int gi, long dist)
{
    engine_group *g = &e->groups[gi];
    ferry_status st = alloc_weights(e, g, gi, dist);
    if (st != FERRY_OK)
        return st;
    e->resident_now++;
    e->resident_bytes += engine_weight_charge(e, g);
    if (e->resident_now > e->resident_max)
        e->resident_max = e->resident_now;
    g->residency = RES_INFLIGHT;
    g->last_use = ++e->fetch_counter;
    if (e->dp) { /* this rank's slot up, the others' gathered */
        e->timing_acc.fetch_h2d_bytes += (double)(g->shard_cap * e->act_size);
        return shard_upload(e, g, NULL);
    }
    size_t bytes = g->numel * e->act_size;
    e->timing_acc.transfer_h2d_bytes += (double)bytes;
    e->timing_acc.fetch_h2d_bytes += (double)bytes;
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
/* ---- params mode: the order of fetches, learned in the first step ---- */

void engine_order_reset(ferry_engine *e, bool free_learned)
{
    if (e->order_learned && !free_learned)
        return;
    for (int ph = 0; ph < 2; ph++) {
        free(e->order[ph]);
        free(e->order_first[ph]);
        free(e->order_last[ph]);
        e->order[ph] = e->order_first[ph] = e->order_last[ph] = NULL;
        e->order_len[ph] = e->order_cap[ph] = e->order_pos[ph] = 0;
    }
    e->order_learned = e->order_overflow = false;
}

/* The first step's first micro-batch: each fetch goes on the record (at
 * most four fetches a group a phase; a longer record is given up and the
 * assumed order stays). */
static void order_record(ferry_engine *e, int gi, ferry_phase ph)
{
    if (e->order_learned || e->order_overflow || e->inference || e->micro_index != 0 || e->step != 0)
        return;
    if (e->order_len[ph] == e->order_cap[ph]) {
        int cap = e->order_cap[ph] ? 2 * e->order_cap[ph] : e->ngroups;
        int *grown = cap <= 4 * e->ngroups ? realloc(e->order[ph], (size_t)cap * sizeof *grown) : NULL;
        if (!grown) {
            e->order_overflow = true;
            return;
        }
        e->order[ph] = grown;
        e->order_cap[ph] = cap;
    }
    e->order[ph][e->order_len[ph]++] = gi;
}

void engine_order_learn(ferry_engine *e)
{
    if (e->order_learned || e->order_overflow || e->order_len[FERRY_PHASE_FORWARD] == 0)
        return;
    for (int ph = 0; ph < 2; ph++) {
        e->order_first[ph] = malloc((size_t)e->ngroups * sizeof(int));
        e->order_last[ph] = malloc((size_t)e->ngroups * sizeof(int));
        if (!e->order_first[ph] || !e->order_last[ph]) {
            engine_order_reset(e, true);
            e->order_overflow = true; /* no host memory: the assumed order stays */
            return;
        }
        for (int g = 0; g < e->ngroups; g++)
            e->order_first[ph][g] = e->order_last[ph][g] = -1;
        for (int k = 0; k < e->order_len[ph]; k++) {
            int g = e->order[ph][k];
            if (e->order_first[ph][g] < 0)
                e->order_first[ph][g] = k;
            e->order_last[ph][g] = k;
        }
    }
    e->order_learned = true;
}

/* Follows the pass under way through the record: whether the fetch of gi
 * is where the record puts it. Off the record, the pass goes on from the
 * group's next place in it. */
static bool order_follow(ferry_engine *e, int gi, ferry_phase ph)
{
    if (e->step != e->order_step || e->micro_index != e->order_micro || e->inference != e->order_infer) {
        e->order_pos[0] = e->order_pos[1] = 0; /* a new pass */
        e->order_step = e->step;
        e->order_micro = e->micro_index;
        e->order_infer = e->inference;
    }
    int *o = e->order[ph], n = e->order_len[ph], p = e->order_pos[ph];
    if (p < n && o[p] == gi) {
        e->order_pos[ph] = p + 1;
        return true;
    }
    /* The record's first group (fetched once a pass) again: another pass
     * in the same micro-batch or inference (sampling runs one a token). */
    if (n > 0 && o[0] == gi && e->order_last[ph][gi] == 0) {
        e->order_pos[ph] = 1;
        return p >= n;
    }
    for (int k = 0; k < n; k++) {
        int at = (p + 1 + k) % n;
        if (o[at] == gi) {
            e->order_pos[ph] = at + 1;
            break;
        }
    }
    return false;
}

/* Says once that a step left the learned order. */
static void order_report(ferry_engine *e, int gi, ferry_phase ph)
{
    if (e->order_reported)
        return;
    e->order_reported = true;
    fprintf(stderr,
            "ferry: params mode: step %lld fetched group %d ('%s') in %s off the order the first step "
            "recorded; such fetches wait for their transfer (exact, only slower), and are counted in "
            "ferry_step_timing.order_misses and order_wait_ms (this is said once)\n",
            (long long)e->step + 1, gi, e->groups[gi].name, engine_phase_name(ph));
}

/* The k-th group the pass needs after gi: by the record once learned, else
 * the assumed order (forward ascending, backward descending); -1 past the end. */
static int ahead_of(const ferry_engine *e, int gi, ferry_phase ph, int k)
{
    if (e->order_learned) {
        int p = e->order_pos[ph] + k - 1;
        return p < e->order_len[ph] ? e->order[ph][p] : -1;
    }
    int h = gi + (ph == FERRY_PHASE_FORWARD ? k : -k);
    return h >= 0 && h < e->ngroups ? h : -1;
}

static void prefetch_after(ferry_engine *e, int gi, ferry_phase phase)
{
    for (int k = 1; k <= e->prefetch_depth; k++) {
        int h = ahead_of(e, gi, phase, k);
        if (h < 0)
            break;
        if (e->groups[h].residency != RES_ABSENT)
            continue;
        bool room = false;
        if (make_room(e, gi, k, engine_weight_charge(e, &e->groups[h]), &room) != FERRY_OK || !room) {
            err_clear(); /* the fetch that needs the room will meet it again and say so */
            break;
        }
        ferry_status st = issue_fetch(e, h, k);
        if (st == FERRY_ERR_OUT_OF_MEMORY && e->dp && e->groups[h].residency == RES_ABSENT) {
            collect_grads(e, true);
            st = issue_fetch(e, h, k);
        }
        if (st != FERRY_OK) {
            err_clear();
            break;
        }
    }
}

void engine_adapt_prefetch(ferry_engine *e, const ferry_step_timing *t)
{
    /* With several ranks every rank must fetch alike: the depth stays. */
    if (e->cfg.offload != FERRY_OFFLOAD_PARAMS || e->dp || e->prefetch_depth >= 64 || t->fetch_h2d_bytes <= 0 ||
        t->step_ms <= 0 || t->compute_wait_transfer_ms <= 0.02 * t->step_ms)
        return;
    uint64_t deeper = (uint64_t)engine_weight_window(e->prefetch_depth + 1) * e->largest_weights;
    if (deeper <= weight_cap(e))
        e->prefetch_depth++;
}

/* The compute stream waits for the weights; in the first forward after a
 * step the wait is timed (events around it), for the overlap figures, and
 * so is the first wait of a fetch off the learned order (`miss`). */
static ferry_status wait_for_weights(ferry_engine *e, engine_group *g, ferry_phase phase, backend_stream *s,
                                     bool miss)
{
    bool timed = phase == FERRY_PHASE_FORWARD && e->micro_index == 0 && !g->wait_recorded;
    ferry_status st;
    if (miss && !timed && !g->miss_recorded) {
        if ((st = backend_event_record(g->miss_begin, s)) != FERRY_OK ||
            (st = backend_stream_wait_event(s, g->uploaded)) != FERRY_OK)
            return st;
        g->miss_recorded = true;
        return backend_event_record(g->miss_end, s);
    }
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
    bool miss = false;
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS) {
        e->cur_phase = phase;
        e->cur_group = gi;
        order_record(e, gi, phase);
        if (e->order_learned && !order_follow(e, gi, phase)) {
            miss = true;
            e->timing_acc.order_misses++;
            order_report(e, gi, phase);
        }
        if (g->residency == RES_ABSENT) {
            e->timing_acc.demand_fetches++;
            bool room; /* unmet: the fetch evicts what the arena needs gone */
            st = make_room(e, gi, 0, engine_weight_charge(e, g), &room);
            if (st == FERRY_OK)
                st = issue_fetch(e, gi, 0);
        }
        if (st != FERRY_OK)
            return err_wrap(st, "fetching group %d ('%s') for %s", gi, g->name, engine_phase_name(phase));
        if (g->residency != RES_PRESENT)
            g->residency = RES_PRESENT;
        g->last_use = ++e->fetch_counter;
        prefetch_after(e, gi, phase);
    }
    if ((st = wait_for_weights(e, g, phase, s, miss)) != FERRY_OK)
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
