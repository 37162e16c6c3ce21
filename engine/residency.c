/* Params mode's device weights: which groups' weights stay on the device
 * after their use (released weights are kept while the budget holds them
 * beside everything else, so a model that fits is fetched once), which one
 * goes when room is needed (the one needed furthest in the future, by the
 * order of fetches the first step recorded), and that order itself. Every
 * rule here depends only on what was allocated and what the schedule asked
 * for, never on timing, so ranks that allocate alike keep alike. The
 * fetches and their uploads are the schedule's (schedule.c). */
#include "engine/residency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/layout.h"

struct engine_residency {
    const engine_ctx *c;
    engine_groups *gs;
    const engine_progress *p;
    engine_res_state *state; /* per group */
    int resident_now, resident_max;
    /* the arena charge of the weights on the device, the room kept for the
     * gradients in flight (the planner's count of them), the largest
     * group's weights, and the groups fetched ahead now (prefetch_groups at
     * least) */
    uint64_t resident_bytes, grads_reserve, largest_weights;
    int prefetch_depth;
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

uint64_t res_weight_charge(const engine_residency *r, const engine_group *g)
{
    return arena_charge(g->padded * r->c->act_size);
}

ferry_status res_open(const engine_ctx *c, engine_groups *gs, const engine_progress *p, engine_residency **out)
{
    engine_residency *r = calloc(1, sizeof *r);
    if (r)
        r->state = calloc((size_t)gs->n, sizeof *r->state);
    if (!r || !r->state) {
        free(r);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    }
    r->c = c;
    r->gs = gs;
    r->p = p;
    r->prefetch_depth = c->cfg->prefetch_groups;
    r->cur_phase = FERRY_PHASE_FORWARD;
    r->cur_group = -1;
    *out = r;
    if (!params(r))
        return FERRY_OK;
    int count = engine_drain_window(c->cfg->prefetch_groups) + 2;
    uint64_t *ch = malloc((size_t)gs->n * sizeof *ch);
    if (!ch)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    for (int g = 0; g < gs->n; g++) {
        ch[g] = arena_charge(gs->g[g].numel * c->act_size);
        uint64_t w = res_weight_charge(r, &gs->g[g]);
        r->largest_weights = w > r->largest_weights ? w : r->largest_weights;
    }
    r->grads_reserve = 0;
    for (int k = 0; k < count && k < gs->n; k++) { /* count is small: selection, not a sort */
        int best = k;
        for (int i = k + 1; i < gs->n; i++)
            if (ch[i] > ch[best])
                best = i;
        uint64_t t = ch[k];
        ch[k] = ch[best];
        ch[best] = t;
        r->grads_reserve += ch[k];
    }
    free(ch);
    return FERRY_OK;
}

void res_close(engine_residency *r)
{
    if (!r)
        return;
    res_order_reset(r, true);
    free(r->state);
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

ferry_status res_evict_after(engine_residency *r, int keep_group, long after, bool *evicted)
{
    int victim = -1;
    long far = after;
    *evicted = false;
    for (int i = 0; i < r->gs->n; i++) {
        long d = res_next_use(r, i);
        if (i != keep_group && r->state[i] == RES_RETIRING && d > far) {
            victim = i;
            far = d;
        }
    }
    if (victim < 0)
        return FERRY_OK;
    engine_group *g = &r->gs->g[victim];
    /* Freed memory is reused at once: the kernels reading it must be done. */
    ferry_status st = backend_event_synchronize(g->released);
    if (st != FERRY_OK)
        return st;
    arena_free(r->c->arena, g->dev_weights);
    g->dev_weights = NULL;
    r->state[victim] = RES_ABSENT;
    r->resident_now--;
    r->resident_bytes -= res_weight_charge(r, g);
    *evicted = true;
    return FERRY_OK;
}

ferry_status res_evict(engine_residency *r, int keep_group, int max_resident, int *evicted_out)
{
    int evicted = 0;
    ferry_status st = FERRY_OK;
    bool one = true;
    while (r->resident_now > max_resident && one && (st = res_evict_after(r, keep_group, -1, &one)) == FERRY_OK)
        evicted += one;
    if (evicted_out)
        *evicted_out = evicted;
    return st;
}

/* ---- room ---- */

static int window(const engine_residency *r) { return engine_weight_window(r->prefetch_depth); }

/* The weights residency may keep on the device: the budget less every
 * other device byte in use now (activations, workspace, staging) and the
 * room kept for the gradients in flight. It depends only on what was
 * allocated, never on timing, so ranks that allocate alike keep alike. */
static uint64_t weight_cap(const engine_residency *r)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(r->c->arena, &ms);
    uint64_t other = r->grads_reserve;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (c != FERRY_MEM_PARAMS && c != FERRY_MEM_GRADS)
            other += ms.device_current_bytes[c];
    uint64_t budget = arena_budget(r->c->arena);
    return budget > other ? budget - other : 0;
}

/* Released groups stay while all the weights fit the cap, or while fewer
 * than the window hold weights (the schedule's own need); otherwise the one
 * needed furthest ahead goes, never one needed before this group. */
ferry_status res_make_room(engine_residency *r, int gi, long dist, uint64_t bytes, bool *met)
{
    uint64_t cap = weight_cap(r);
    *met = true;
    while (*met && r->resident_bytes + bytes > cap && r->resident_now >= window(r)) {
        ferry_status st = res_evict_after(r, gi, dist, met);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

ferry_status res_alloc_weights(engine_residency *r, int gi, long dist)
{
    engine_group *g = &r->gs->g[gi];
    char name[ENGINE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s weights", g->name);
    long after = dist > 0 ? dist : -1;
    ferry_status st = arena_alloc(r->c->arena, g->padded * r->c->act_size, FERRY_MEM_PARAMS, name, &g->dev_weights);
    bool evicted = true;
    while (st == FERRY_ERR_OUT_OF_MEMORY && evicted) {
        ferry_status ev = res_evict_after(r, gi, after, &evicted);
        if (ev != FERRY_OK)
            return ev;
        if (!evicted)
            break; /* arena_alloc's message says what did not fit */
        st = arena_alloc(r->c->arena, g->padded * r->c->act_size, FERRY_MEM_PARAMS, name, &g->dev_weights);
    }
    if (st != FERRY_OK)
        return st;
    r->resident_now++;
    r->resident_bytes += res_weight_charge(r, g);
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
    uint64_t deeper = (uint64_t)engine_weight_window(r->prefetch_depth + 1) * r->largest_weights;
    if (deeper <= weight_cap(r))
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
