/* Params mode's device weights: which group's weights are in which of the
 * plan's weight slots (a pool per size class of groups, placed at setup:
 * nothing is allocated or freed as groups come and go, so nothing can
 * fragment), which group gives its slot up when its class has none free
 * (the RETIRING one needed furthest in the future, by the order of fetches
 * the first step recorded), and that order itself. Released weights stay
 * in their slot until it is needed: with a slot for every group (the plan
 * gives one when the budget holds them all) a model is fetched once. Every
 * rule here depends only on the plan and on what the schedule asked for,
 * never on timing, so ranks keep alike. The fetches and their uploads are
 * the schedule's (schedule.c). */
#include "engine/residency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/layout.h"

/* One size class's slots: which are free (a stack of slot numbers). */
typedef struct res_class {
    int slots;
    void **ptr;  /* [slots] */
    int *free;   /* [slots]: free slot numbers, nfree of them */
    int nfree;
    int groups;  /* groups of the class */
    int planned; /* slots 0..planned-1 are the plan's; the rest res_grow took from the arena */
    uint64_t bytes;
} res_class;

struct engine_residency {
    const engine_ctx *c;
    engine_groups *gs;
    const engine_progress *p;
    engine_res_state *state; /* per group */
    int *cls, *slot;         /* per group: its class, and its slot while it has one (-1: none) */
    res_class *classes;
    int nclasses;
    int resident_now, resident_max;
    int prefetch_depth;      /* the groups fetched ahead now (the plan's at first) */
    bool may_grow;           /* res_grow has not run and may */
    /* where the schedule is: the last fetch's phase and group */
    ferry_phase cur_phase;
    int cur_group;
    /* The learned order: the groups the first step's first micro-batch
     * fetched, per phase, in order; order_first/last: each group's first
     * and last place in it (-1: never); order_pos: where the pass under way
     * is (the pass: order_step, order_micro, order_infer). */
    int *order[2], *order_first[2], *order_last[2];
    int order_len[2], order_cap[2], order_pos[2];
    bool order_learned, order_overflow, order_reported;
    int64_t order_step;
    int order_micro;
    bool order_infer;
};

static bool params(const engine_residency *r) { return ctx_mode(r->c) == FERRY_OFFLOAD_PARAMS; }

static ferry_status open_classes(engine_residency *r, const engine_static_plan *plan, void *const *slots)
{
    r->nclasses = plan->nwclass;
    r->classes = calloc((size_t)(plan->nwclass ? plan->nwclass : 1), sizeof *r->classes);
    if (!r->classes)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    int at = 0;
    for (int k = 0; k < plan->nwclass; k++) {
        res_class *x = &r->classes[k];
        x->slots = x->planned = plan->wclass[k].slots;
        x->groups = plan->wclass[k].groups;
        x->bytes = plan->wclass[k].bytes;
        x->ptr = malloc((size_t)(x->slots ? x->slots : 1) * sizeof *x->ptr);
        x->free = malloc((size_t)(x->slots ? x->slots : 1) * sizeof *x->free);
        if (!x->ptr || !x->free)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
        for (int j = 0; j < x->slots; j++) {
            x->ptr[j] = slots[at++];
            x->free[x->nfree++] = x->slots - 1 - j; /* slot 0 is taken first */
        }
    }
    for (int g = 0; g < r->gs->n; g++)
        r->cls[g] = plan->wclass_of[g];
    return FERRY_OK;
}

ferry_status res_open(const engine_ctx *c, engine_groups *gs, const engine_progress *p, const engine_static_plan *plan,
                      void *const *slots, bool may_grow, engine_residency **out)
{
    engine_residency *r = calloc(1, sizeof *r);
    int n = gs->n > 0 ? gs->n : 1;
    if (r) {
        r->state = calloc((size_t)n, sizeof *r->state);
        r->cls = calloc((size_t)n, sizeof *r->cls);
        r->slot = malloc((size_t)n * sizeof *r->slot);
    }
    *out = r;
    if (!r || !r->state || !r->cls || !r->slot)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    for (int g = 0; g < gs->n; g++)
        r->slot[g] = -1;
    r->c = c;
    r->gs = gs;
    r->p = p;
    r->prefetch_depth = params(r) ? plan->depth : c->cfg->prefetch_groups;
    r->cur_phase = FERRY_PHASE_FORWARD;
    r->cur_group = -1;
    r->may_grow = may_grow && params(r);
    return params(r) ? open_classes(r, plan, slots) : FERRY_OK;
}

void res_close(engine_residency *r)
{
    if (!r)
        return;
    res_order_reset(r, true);
    for (int k = 0; r->classes && k < r->nclasses; k++) {
        free(r->classes[k].ptr);
        free(r->classes[k].free);
    } /* the slots res_grow took go with the arena */
    free(r->classes);
    free(r->state);
    free(r->cls);
    free(r->slot);
    free(r);
}

engine_res_state res_state(const engine_residency *r, int gi) { return r->state[gi]; }
void res_set_state(engine_residency *r, int gi, engine_res_state s) { r->state[gi] = s; }
int res_prefetch_depth(const engine_residency *r) { return r->prefetch_depth; }
int res_resident_max(const engine_residency *r) { return r->resident_max; }

void res_set_cursor(engine_residency *r, ferry_phase phase, int gi)
{
    r->cur_phase = phase;
    r->cur_group = gi;
}

/* ---- which group goes ---- */

/* By the learned order: the rest of this pass, then the other phase's
 * pass (backward after forward, the next forward after backward), then
 * this phase's again. */
static long next_use_learned(const engine_residency *r, int h)
{
    int ph = r->cur_phase, other = !ph;
    long p = r->order_pos[ph], n = r->order_len[ph];
    if (r->order_first[ph][h] >= p)
        return r->order_first[ph][h] - p + 1;
    if (r->order_last[ph][h] >= p) /* fetched more than once a pass: find the next */
        for (long k = p; k < n; k++)
            if (r->order[ph][k] == h)
                return k - p + 1;
    if (r->order_first[other][h] >= 0)
        return n - p + 1 + r->order_first[other][h];
    if (r->order_first[ph][h] >= 0)
        return n - p + 1 + r->order_len[other] + r->order_first[ph][h];
    return 2 * (n + r->order_len[other]) + 2; /* never fetched in the record */
}

long res_next_use(const engine_residency *r, int h)
{
    if (r->order_learned)
        return next_use_learned(r, h);
    long G = r->gs->n, at = r->cur_group;
    if (r->cur_phase == FERRY_PHASE_FORWARD) /* the rest of forward, then backward from the top */
        return h > at ? h - at : (G - 1 - at) + (G - 1 - h) + 1;
    return h < at ? at - h : at + 1 + h; /* the rest of backward, then the next forward */
}

/* Gives group `victim`'s slot back to its class, once its last use is done. */
static ferry_status vacate_slot(engine_residency *r, int victim)
{
    engine_group *g = &r->gs->g[victim];
    /* The slot is reused at once: the kernels reading it must be done. */
    ferry_status st = backend_event_synchronize(g->released);
    if (st != FERRY_OK)
        return st;
    res_class *x = &r->classes[r->cls[victim]];
    x->free[x->nfree++] = r->slot[victim];
    r->slot[victim] = -1;
    trace_vacate(r->c->trace, FERRY_MEM_PARAMS, g->name, victim, g->padded * r->c->act_size, g->dev_weights);
    g->dev_weights = NULL;
    r->state[victim] = RES_ABSENT;
    r->resident_now--;
    return FERRY_OK;
}

/* The RETIRING group of class `cls` (any class: -1) needed furthest in the
 * future, later than `after` fetches from now, but keep_group; -1 if none. */
static int victim_of(const engine_residency *r, int cls, int keep_group, long after)
{
    int victim = -1;
    long far = after;
    for (int i = 0; i < r->gs->n; i++) {
        long d = res_next_use(r, i);
        if (i != keep_group && r->state[i] == RES_RETIRING && (cls < 0 || r->cls[i] == cls) && d > far) {
            victim = i;
            far = d;
        }
    }
    return victim;
}

ferry_status res_evict(engine_residency *r, int keep_group, int max_resident, int *evicted_out)
{
    int evicted = 0, v;
    ferry_status st = FERRY_OK;
    while (st == FERRY_OK && r->resident_now > max_resident && (v = victim_of(r, -1, keep_group, -1)) >= 0)
        if ((st = vacate_slot(r, v)) == FERRY_OK)
            evicted++;
    if (evicted_out)
        *evicted_out = evicted;
    return st;
}

/* ---- room ---- */

ferry_status res_grow(engine_residency *r)
{
    if (!r->may_grow)
        return FERRY_OK;
    r->may_grow = false;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(r->c->arena, &ms);
    uint64_t budget = arena_budget(r->c->arena), used = ms.device_total_current_bytes;
    engine_slot_class *want = calloc((size_t)r->nclasses, sizeof *want);
    if (!want)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "params mode: out of host memory");
    for (int k = 0; k < r->nclasses; k++)
        want[k] = (engine_slot_class){r->classes[k].bytes, r->classes[k].groups, r->classes[k].slots};
    engine_plan_keep_weights(want, r->nclasses, budget > used ? budget - used : 0);
    ferry_status st = FERRY_OK;
    for (int k = 0; k < r->nclasses && st == FERRY_OK; k++) {
        res_class *x = &r->classes[k];
        if (want[k].slots == x->slots)
            continue;
        void **ptr = realloc(x->ptr, (size_t)want[k].slots * sizeof *ptr);
        int *fr = ptr ? realloc(x->free, (size_t)want[k].slots * sizeof *fr) : NULL;
        if (ptr)
            x->ptr = ptr;
        if (fr)
            x->free = fr;
        if (!ptr || !fr) {
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "params mode: out of host memory");
            break;
        }
        while (x->slots < want[k].slots) {
            char name[64];
            snprintf(name, sizeof name, "weights slot %d of class %d (kept)", x->slots, k);
            if (arena_alloc(r->c->arena, (size_t)x->bytes, FERRY_MEM_PARAMS, name, &x->ptr[x->slots]) != FERRY_OK) {
                err_clear(); /* the room was counted, but not in one piece: keep what there is */
                break;
            }
            x->free[x->nfree++] = x->slots++;
        }
    }
    free(want);
    return st;
}

uint64_t res_shrink(engine_residency *r)
{
    uint64_t freed = 0;
    for (int k = 0; r->classes && k < r->nclasses; k++) {
        res_class *x = &r->classes[k];
        for (int g = 0; g < r->gs->n; g++)
            if (r->cls[g] == k && r->slot[g] >= x->planned && r->state[g] == RES_RETIRING && vacate_slot(r, g) != FERRY_OK)
                err_clear();
        /* Free slots past the plan's go back, the highest first, while nothing above them is held. */
        for (int s = x->slots - 1; s >= x->planned; s--) {
            int at = -1;
            for (int f = 0; f < x->nfree; f++)
                if (x->free[f] == s)
                    at = f;
            if (at < 0)
                break;
            x->free[at] = x->free[--x->nfree];
            arena_free(r->c->arena, x->ptr[s]);
            x->slots--;
            freed += x->bytes;
        }
    }
    return freed;
}

ferry_status res_make_room(engine_residency *r, int keep_group, int target, long dist, bool *met)
{
    int cls = r->cls[target];
    *met = r->classes[cls].nfree > 0;
    if (*met)
        return FERRY_OK;
    int v = victim_of(r, cls, keep_group, dist);
    if (v < 0)
        return FERRY_OK;
    ferry_status st = vacate_slot(r, v);
    *met = st == FERRY_OK;
    return st;
}

ferry_status res_alloc_weights(engine_residency *r, int gi, long dist)
{
    engine_group *g = &r->gs->g[gi];
    res_class *x = &r->classes[r->cls[gi]];
    if (x->nfree == 0) {
        int v = victim_of(r, r->cls[gi], gi, dist > 0 ? dist : -1);
        ferry_status st = v >= 0 ? vacate_slot(r, v) : FERRY_OK;
        if (st != FERRY_OK)
            return st;
        if (x->nfree == 0)
            return err_set(FERRY_ERR_OUT_OF_MEMORY,
                           "params mode: the %d weight slots of groups the size of '%s' (%d such groups) all hold "
                           "groups in use or needed sooner; fetch fewer of them at once (release each group before "
                           "fetching more than prefetch_groups + 2 of them), or raise device_budget_bytes",
                           x->slots, g->name, x->groups);
    }
    int k = x->free[--x->nfree];
    r->slot[gi] = k;
    g->dev_weights = x->ptr[k];
    trace_occupy(r->c->trace, FERRY_MEM_PARAMS, g->name, gi, g->padded * r->c->act_size, g->dev_weights);
    r->resident_now++;
    if (r->resident_now > r->resident_max)
        r->resident_max = r->resident_now;
    r->state[gi] = RES_INFLIGHT;
    return FERRY_OK;
}

ferry_status res_settle(engine_residency *r)
{
    for (int i = 0; i < r->gs->n; i++) {
        engine_group *g = &r->gs->g[i];
        /* Prefetched but never asked for: let the copy land; it stays. */
        if (r->state[i] == RES_INFLIGHT || r->state[i] == RES_PRESENT) {
            ferry_status st = backend_event_synchronize(g->uploaded);
            if (st != FERRY_OK)
                return st;
            /* the compute stream never read it: its last read is long done */
            if ((st = backend_event_record(g->released, r->c->compute)) != FERRY_OK)
                return st;
            r->state[i] = RES_RETIRING;
        }
    }
    return FERRY_OK;
}

ferry_status res_retire_all(engine_residency *r)
{
    ferry_status st = res_settle(r);
    if (st != FERRY_OK)
        return st;
    return res_evict(r, -1, 0, NULL);
}

void res_adapt_prefetch(engine_residency *r, const ferry_step_timing *t, bool ranks)
{
    /* With several ranks every rank must fetch alike: the depth stays. */
    if (!params(r) || ranks || r->prefetch_depth >= 64 || t->fetch_h2d_bytes <= 0 || t->step_ms <= 0 ||
        t->compute_wait_transfer_ms <= 0.02 * t->step_ms)
        return;
    int w = engine_weight_window(r->prefetch_depth + 1);
    for (int k = 0; k < r->nclasses; k++)
        if (r->classes[k].slots < (w < r->classes[k].groups ? w : r->classes[k].groups))
            return;
    r->prefetch_depth++;
}

/* ---- the order of fetches, learned in the first step ---- */

void res_order_reset(engine_residency *r, bool free_learned)
{
    if (r->order_learned && !free_learned)
        return;
    for (int ph = 0; ph < 2; ph++) {
        free(r->order[ph]);
        free(r->order_first[ph]);
        free(r->order_last[ph]);
        r->order[ph] = r->order_first[ph] = r->order_last[ph] = NULL;
        r->order_len[ph] = r->order_cap[ph] = r->order_pos[ph] = 0;
    }
    r->order_learned = r->order_overflow = false;
}

/* The first step's first micro-batch: each fetch goes on the record (at
 * most four fetches a group a phase; a longer record is given up and the
 * assumed order stays). */
void res_order_record(engine_residency *r, int gi, ferry_phase ph)
{
    const engine_progress *p = r->p;
    if (r->order_learned || r->order_overflow || p->inference || p->micro_index != 0 || p->step != 0)
        return;
    if (r->order_len[ph] == r->order_cap[ph]) {
        int cap = r->order_cap[ph] ? 2 * r->order_cap[ph] : r->gs->n;
        int *grown = cap <= 4 * r->gs->n ? realloc(r->order[ph], (size_t)cap * sizeof *grown) : NULL;
        if (!grown) {
            r->order_overflow = true;
            return;
        }
        r->order[ph] = grown;
        r->order_cap[ph] = cap;
    }
    r->order[ph][r->order_len[ph]++] = gi;
}

void res_order_learn(engine_residency *r)
{
    if (r->order_learned || r->order_overflow || r->order_len[FERRY_PHASE_FORWARD] == 0)
        return;
    int n = r->gs->n;
    for (int ph = 0; ph < 2; ph++) {
        r->order_first[ph] = malloc((size_t)n * sizeof(int));
        r->order_last[ph] = malloc((size_t)n * sizeof(int));
        if (!r->order_first[ph] || !r->order_last[ph]) {
            res_order_reset(r, true);
            r->order_overflow = true; /* no host memory: the assumed order stays */
            return;
        }
        for (int g = 0; g < n; g++)
            r->order_first[ph][g] = r->order_last[ph][g] = -1;
        for (int k = 0; k < r->order_len[ph]; k++) {
            int g = r->order[ph][k];
            if (r->order_first[ph][g] < 0)
                r->order_first[ph][g] = k;
            r->order_last[ph][g] = k;
        }
    }
    r->order_learned = true;
}

bool res_order_learned(const engine_residency *r) { return r->order_learned; }

/* Follows the pass under way through the record: whether the fetch of gi
 * is where the record puts it. Off the record, the pass goes on from the
 * group's next place in it. */
bool res_order_follow(engine_residency *r, int gi, ferry_phase ph)
{
    const engine_progress *pr = r->p;
    if (pr->step != r->order_step || pr->micro_index != r->order_micro || pr->inference != r->order_infer) {
        r->order_pos[0] = r->order_pos[1] = 0; /* a new pass */
        r->order_step = pr->step;
        r->order_micro = pr->micro_index;
        r->order_infer = pr->inference;
    }
    int *o = r->order[ph], n = r->order_len[ph], p = r->order_pos[ph];
    if (p < n && o[p] == gi) {
        r->order_pos[ph] = p + 1;
        return true;
    }
    /* The record's first group (fetched once a pass) again: another pass
     * in the same micro-batch or inference (sampling runs one a token). */
    if (n > 0 && o[0] == gi && r->order_last[ph][gi] == 0) {
        r->order_pos[ph] = 1;
        return p >= n;
    }
    for (int k = 0; k < n; k++) {
        int at = (p + 1 + k) % n;
        if (o[at] == gi) {
            r->order_pos[ph] = at + 1;
            break;
        }
    }
    return false;
}

void res_order_report(engine_residency *r, int gi, ferry_phase ph)
{
    if (r->order_reported)
        return;
    r->order_reported = true;
    fprintf(stderr,
            "ferry: params mode: step %lld fetched group %d ('%s') in %s off the order the first step "
            "recorded; such fetches wait for their transfer (exact, only slower), and are counted in "
            "ferry_step_timing.order_misses and order_wait_ms (this is said once)\n",
            (long long)r->p->step + 1, gi, r->gs->g[gi].name, engine_phase_name(ph));
}

int res_ahead_of(const engine_residency *r, int gi, ferry_phase ph, int k)
{
    if (r->order_learned) {
        int p = r->order_pos[ph] + k - 1;
        return p < r->order_len[ph] ? r->order[ph][p] : -1;
    }
    int h = gi + (ph == FERRY_PHASE_FORWARD ? k : -k);
    return h >= 0 && h < r->gs->n ? h : -1;
}
