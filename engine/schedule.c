/* The schedule inside a step: fetching a group's weights (and, in params
 * mode, the next groups ahead on the H2D stream), handing out gradient
 * buffers, and on release handing the gradients to the drain (drain.c).
 * Keeps per group what the caller holds and how often it was released;
 * which groups' weights stay on the device is residency.c's rule, and the
 * wait for each group's update is the update's (update.h). Every
 * cross-stream dependency is an event. */
#include "engine/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

typedef struct sched_group {
    bool fetched[2];       /* fetched in phase, not yet released */
    int released_backward; /* micro-batches whose backward released this group */
    bool wait_recorded;    /* wait_begin/end hold this step's forward wait */
    bool miss_recorded;    /* miss_begin/end hold this step's first wait off the learned order */
    backend_event *wait_begin, *wait_end; /* around the compute stream's wait in forward */
    backend_event *miss_begin, *miss_end; /* params mode: around the wait of a fetch off the learned order */
} sched_group;

struct engine_sched {
    sched_env env;
    sched_group *g; /* per group */
};

static bool params(const engine_sched *s) { return ctx_mode(s->env.ctx) == FERRY_OFFLOAD_PARAMS; }

ferry_status sched_open(const sched_env *env, engine_sched **out)
{
    engine_sched *s = calloc(1, sizeof *s);
    if (s)
        s->g = calloc((size_t)(env->groups->n > 0 ? env->groups->n : 1), sizeof *s->g);
    if (!s || !s->g) {
        free(s);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    }
    s->env = *env;
    *out = s;
    /* The step's timing reads the time between these: its weight waits and
     * the first wait off the learned order. */
    for (int i = 0; i < env->groups->n; i++) {
        sched_group *sg = &s->g[i];
        backend_event **timed[] = {&sg->wait_begin, &sg->wait_end, &sg->miss_begin, &sg->miss_end};
        for (size_t k = 0; k < sizeof timed / sizeof timed[0]; k++) {
            ferry_status st = backend_event_create_timed(env->ctx->be, timed[k]);
            if (st != FERRY_OK)
                return st;
        }
    }
    return FERRY_OK;
}

void sched_close(engine_sched *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->env.groups->n; i++) {
        sched_group *sg = &s->g[i];
        backend_event *all[] = {sg->wait_begin, sg->wait_end, sg->miss_begin, sg->miss_end};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            backend_event_destroy(all[k]);
    }
    free(s->g);
    free(s);
}

static ferry_status check_micro(const engine_sched *s, const char *what)
{
    const engine_progress *p = s->env.prog;
    if (p->inference)
        return FERRY_OK;
    if (p->micro_index < 0)
        return err_set(FERRY_ERR_STATE, "%s: no micro-batch in progress; call "
                                        "ferry_engine_begin_micro_batch() first", what);
    return FERRY_OK;
}

/* ---- params mode: fetching ---- */

static ferry_status issue_fetch(engine_sched *s, int gi, long dist)
{
    const engine_ctx *c = s->env.ctx;
    engine_progress *p = s->env.prog;
    engine_group *g = &s->env.groups->g[gi];
    ferry_status st = res_alloc_weights(s->env.res, gi, dist);
    if (st != FERRY_OK)
        return st;
    if (s->env.dp) { /* this rank's slot up, the others' gathered */
        p->acc.fetch_h2d_bytes += (double)(g->part_cap * c->act_size);
        if ((st = update_barrier(s->env.update, g)) != FERRY_OK)
            return st;
        return dp_upload(s->env.dp, c, p, g, gi, NULL);
    }
    size_t bytes = g->numel * c->act_size;
    p->acc.transfer_h2d_bytes += (double)bytes;
    p->acc.fetch_h2d_bytes += (double)bytes;
    if ((st = update_barrier(s->env.update, g)) != FERRY_OK ||
        (st = update_copy_up(c, g)) != FERRY_OK)
        return st;
    return backend_event_record(g->uploaded, c->h2d);
}

/* Best effort: a prefetch that does not fit is simply not issued. With
 * data parallelism every rank must gather the same groups in the same
 * order, so whether one fits must not depend on how far the drains got:
 * a prefetch that finds no room waits for them and tries once more. */
static void prefetch_after(engine_sched *s, int gi, ferry_phase phase)
{
    engine_residency *r = s->env.res;
    for (int k = 1; k <= res_prefetch_depth(r); k++) {
        int h = res_ahead_of(r, gi, phase, k);
        if (h < 0)
            break;
        if (res_state(r, h) != RES_ABSENT)
            continue;
        bool room = false;
        if (res_make_room(r, gi, h, k, &room) != FERRY_OK || !room) {
            err_clear(); /* the fetch that needs the room will meet it again and say so */
            break;
        }
        ferry_status st = issue_fetch(s, h, k);
        if (st == FERRY_ERR_OUT_OF_MEMORY && s->env.dp && res_state(r, h) == RES_ABSENT) {
            drain_collect(s->env.drain, true);
            st = issue_fetch(s, h, k);
        }
        if (st != FERRY_OK) {
            err_clear();
            break;
        }
    }
}

/* The compute stream waits for the weights; in the first forward after a
 * step the wait is timed (events around it), for the overlap figures, and
 * so is the first wait of a fetch off the learned order (`miss`). */
static ferry_status wait_for_weights(engine_sched *s, int gi, ferry_phase phase, backend_stream *st, bool miss)
{
    engine_group *g = &s->env.groups->g[gi];
    sched_group *sg = &s->g[gi];
    bool timed = phase == FERRY_PHASE_FORWARD && s->env.prog->micro_index == 0 && !sg->wait_recorded;
    ferry_status rc;
    if (miss && !timed && !sg->miss_recorded) {
        if ((rc = backend_event_record(sg->miss_begin, st)) != FERRY_OK ||
            (rc = backend_stream_wait_event(st, g->uploaded)) != FERRY_OK)
            return rc;
        sg->miss_recorded = true;
        return backend_event_record(sg->miss_end, st);
    }
    if (timed && (rc = backend_event_record(sg->wait_begin, st)) != FERRY_OK)
        return rc;
    /* Partitioned: the weights came in two legs, this rank's slot up (the
     * update, the transfer) and the others' gathered; the mark between them
     * tells the two waits apart. */
    if (timed && dp_partitioned(s->env.dp, ctx_mode(s->env.ctx)) &&
        ((rc = backend_stream_wait_event(st, dp_staged(s->env.dp, gi))) != FERRY_OK ||
         (rc = backend_event_record(dp_wait_mid(s->env.dp, gi), st)) != FERRY_OK))
        return rc;
    if ((rc = backend_stream_wait_event(st, g->uploaded)) != FERRY_OK)
        return rc;
    if (timed) {
        sg->wait_recorded = true;
        return backend_event_record(sg->wait_end, st);
    }
    return FERRY_OK;
}

/* Params mode: the group's weights on the device (fetched now if absent),
 * the learned order followed, the groups after it fetched ahead. */
static ferry_status fetch_params(engine_sched *s, int gi, ferry_phase phase, bool *miss)
{
    engine_residency *r = s->env.res;
    engine_progress *p = s->env.prog;
    engine_group *g = &s->env.groups->g[gi];
    ferry_status st = res_grow(r); /* the first fetch: weights kept in the room left, when not planned */
    if (st != FERRY_OK)
        return st;
    res_set_cursor(r, phase, gi);
    res_order_record(r, gi, phase);
    if (res_order_learned(r) && !res_order_follow(r, gi, phase)) {
        *miss = true;
        p->acc.order_misses++;
        res_order_report(r, gi, phase);
    }
    if (res_state(r, gi) == RES_ABSENT) {
        p->acc.demand_fetches++;
        bool room; /* unmet: the fetch takes the slot of a group needed sooner */
        st = res_make_room(r, gi, gi, 0, &room);
        if (st == FERRY_OK)
            st = issue_fetch(s, gi, 0);
    }
    if (st != FERRY_OK)
        return err_wrap(st, "fetching group %d ('%s') for %s", gi, g->name, engine_phase_name(phase));
    if (res_state(r, gi) != RES_PRESENT)
        res_set_state(r, gi, RES_PRESENT);
    prefetch_after(s, gi, phase);
    return FERRY_OK;
}

ferry_status sched_fetch(engine_sched *s, int gi, ferry_phase phase, backend_stream *st, void **weights)
{
    if (!weights || (phase != FERRY_PHASE_FORWARD && phase != FERRY_PHASE_BACKWARD))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_fetch: NULL weights or bad phase %d", (int)phase);
    ferry_status rc = check_micro(s, "ferry_engine_fetch");
    if (rc != FERRY_OK)
        return rc;
    engine_group *g = &s->env.groups->g[gi];
    sched_group *sg = &s->g[gi];
    if (s->env.prog->inference && phase != FERRY_PHASE_FORWARD)
        return err_set(FERRY_ERR_STATE, "ferry_engine_fetch: group %d for backward during inference; call "
                                        "ferry_engine_end_inference() first", gi);
    if (sg->fetched[phase])
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_fetch: group %d ('%s') was asked for twice in %s without a release "
                       "between; call ferry_engine_release() when done with it",
                       gi, g->name, engine_phase_name(phase));
    bool miss = false;
    if (params(s) && (rc = fetch_params(s, gi, phase, &miss)) != FERRY_OK)
        return rc;
    if ((rc = wait_for_weights(s, gi, phase, st, miss)) != FERRY_OK)
        return rc;
    sg->fetched[phase] = true;
    *weights = g->dev_weights;
    return FERRY_OK;
}

ferry_status sched_grads(engine_sched *s, int gi, backend_stream *st, void **grads)
{
    if (!grads)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_grads: grads is NULL");
    if (!s->g[gi].fetched[FERRY_PHASE_BACKWARD])
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_grads: group %d ('%s') is not fetched for backward; call "
                       "ferry_engine_fetch(e, %d, FERRY_PHASE_BACKWARD, ...) first",
                       gi, s->env.groups->g[gi].name, gi);
    return drain_grads(s->env.drain, gi, st, grads);
}

ferry_status sched_release(engine_sched *s, int gi, ferry_phase phase, backend_stream *st)
{
    if (phase != FERRY_PHASE_FORWARD && phase != FERRY_PHASE_BACKWARD)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_release: bad phase %d", (int)phase);
    engine_group *g = &s->env.groups->g[gi];
    sched_group *sg = &s->g[gi];
    if (!sg->fetched[phase])
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_release: group %d ('%s') is not fetched for %s; fetch before release",
                       gi, g->name, engine_phase_name(phase));
    sg->fetched[phase] = false;
    ferry_status rc;
    if (params(s) && !sg->fetched[!phase]) {
        if ((rc = backend_event_record(g->released, st)) != FERRY_OK)
            return rc;
        res_set_state(s->env.res, gi, RES_RETIRING);
    }
    if (phase == FERRY_PHASE_FORWARD)
        return FERRY_OK;
    if (s->env.prog->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_release: no backward during inference");
    if (sg->released_backward != s->env.prog->micro_index)
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_release: group %d ('%s') was already released in this micro-batch's "
                       "backward",
                       gi, g->name);
    sg->released_backward++;
    return drain_release(s->env.drain, gi, st);
}

/* ---- the step's bookkeeping ---- */

int sched_first_fetched(const engine_sched *s, bool forward_only)
{
    for (int i = 0; i < s->env.groups->n; i++)
        if (s->g[i].fetched[FERRY_PHASE_FORWARD] || (!forward_only && s->g[i].fetched[FERRY_PHASE_BACKWARD]))
            return i;
    return -1;
}

ferry_status sched_micro_ready(engine_sched *s, int index, const char *what)
{
    for (int i = 0; i < s->env.groups->n; i++) {
        sched_group *sg = &s->g[i];
        const char *name = s->env.groups->g[i].name;
        if (sg->fetched[0] || sg->fetched[1])
            return err_set(FERRY_ERR_STATE, "%s: group %d ('%s') is still fetched; release it first", what, i, name);
        if (index > 0 && sg->released_backward != index)
            return err_set(FERRY_ERR_STATE,
                           "%s(%d): group %d ('%s') has no gradients from micro-batch %d; run its backward and "
                           "release it first",
                           what, index, i, name, index - 1);
    }
    drain_begin_micro(s->env.drain);
    return FERRY_OK;
}

ferry_status sched_step_ready(const engine_sched *s, int micro_count)
{
    for (int i = 0; i < s->env.groups->n; i++) {
        const sched_group *sg = &s->g[i];
        const char *name = s->env.groups->g[i].name;
        if (sg->fetched[0] || sg->fetched[1])
            return err_set(FERRY_ERR_STATE, "ferry_engine_step: group %d ('%s') is still fetched; release it", i,
                           name);
        if (sg->released_backward != micro_count)
            return err_set(FERRY_ERR_STATE,
                           "ferry_engine_step: group %d ('%s') has no gradients for this step: release "
                           "it in backward (after adding its gradients) before stepping",
                           i, name);
    }
    return FERRY_OK;
}

ferry_status sched_retire_all(engine_sched *s)
{
    int gi = sched_first_fetched(s, false);
    if (gi >= 0)
        return err_set(FERRY_ERR_STATE, "group %d ('%s') is still fetched; release it first", gi,
                       s->env.groups->g[gi].name);
    return res_retire_all(s->env.res);
}

void sched_step_done(engine_sched *s)
{
    for (int i = 0; i < s->env.groups->n; i++)
        s->g[i].released_backward = 0;
}

void sched_abandon(engine_sched *s)
{
    for (int i = 0; i < s->env.groups->n; i++) {
        s->g[i].released_backward = 0;
        s->g[i].wait_recorded = false;
    }
}

void sched_close_timing(engine_sched *s, ferry_step_timing *t)
{
    bool partitioned = dp_partitioned(s->env.dp, ctx_mode(s->env.ctx));
    for (int i = 0; i < s->env.groups->n; i++) {
        sched_group *sg = &s->g[i];
        float ms = 0;
        if (!sg->wait_recorded)
            continue;
        float gathered = 0;
        if (backend_event_synchronize(sg->wait_end) == FERRY_OK &&
            backend_event_elapsed_ms(sg->wait_begin, sg->wait_end, &ms) == FERRY_OK && ms > 0) {
            /* Partitioned: the wait after this rank's slot arrived was for the others'. */
            if (partitioned &&
                backend_event_elapsed_ms(dp_wait_mid(s->env.dp, i), sg->wait_end, &gathered) == FERRY_OK) {
                gathered = gathered < 0 ? 0 : gathered > ms ? ms : gathered;
                ms -= gathered;
                t->compute_wait_comm_ms += gathered;
            }
            if (params(s))
                t->compute_wait_transfer_ms += ms;
            else
                t->compute_wait_optimizer_ms += ms;
        }
        sg->wait_recorded = false;
    }
    for (int i = 0; i < s->env.groups->n; i++) {
        sched_group *sg = &s->g[i];
        float ms = 0;
        if (sg->miss_recorded && backend_event_synchronize(sg->miss_end) == FERRY_OK &&
            backend_event_elapsed_ms(sg->miss_begin, sg->miss_end, &ms) == FERRY_OK && ms > 0)
            t->order_wait_ms += ms;
        sg->miss_recorded = false;
    }
}
