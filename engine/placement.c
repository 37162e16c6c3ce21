/* Setup's placement: the static memory plan (plan.c) in the arena's
 * planned region, every device buffer with a place in the step at its
 * offset; then each group's host buffers from the pinned pool and its
 * events; and before any of it, whether the mode can fit the budget at all.
 * The embedder's allocations take the range the plan gave them, first fit,
 * so a run that declared its activations allocates nothing dynamic.
 * What goes into the buffers (master weights from the initial values, zero
 * moments, the device copy of the weights) is the update's business
 * (update.c), where the optimizer state lives; params mode's weights,
 * which come and go, are residency.c's. */
#include "engine/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops/ops.h"
#include "common/error.h"
#include "common/units.h"

static int where_buffers(const engine_ctx *c, engine_where w, engine_buffer b[ENGINE_GROUP_BUFFERS_MAX],
                         unsigned *on_disk)
{
    int n = engine_layout_buffers(ctx_mode(c), c->act_size, w.partitioned, w.disk, w.master_on_disk, b, on_disk);
    engine_buffers_moments(b, n, c->cfg->moments);
    if (c->window)
        engine_buffers_window(b, n); /* the ring instead of the upload copies */
    return n;
}

void placement_bytes_per_param(const engine_ctx *c, engine_where w, double *device, double *host)
{
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    unsigned on_disk;
    int n = where_buffers(c, w, b, &on_disk);
    *device = *host = 0;
    for (int i = 0; i < n; i++)
        if (!(on_disk & (1u << i)))
            *(b[i].device ? device : host) += (double)b[i].elem_bytes;
}

void placement_rank_bytes_per_param(const engine_ctx *c, const engine_groups *gs, engine_where w, double *dev_pp,
                                    double *host_pp)
{
    placement_bytes_per_param(c, w, dev_pp, host_pp);
    if (!w.partitioned)
        return;
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    int n = engine_group_buffers_partitioned(ctx_mode(c), c->act_size, true, b);
    double dev = 0, host = 0;
    for (int g = 0; g < gs->n; g++)
        for (int i = 0; i < n; i++) {
            const engine_group *gr = &gs->g[g];
            double bytes = (double)engine_buffer_elems(&b[i], true, gr->numel, gr->part_cap, gr->padded) *
                           (double)b[i].elem_bytes;
            *(b[i].device ? &dev : &host) += bytes;
        }
    *dev_pp = dev / (double)groups_total(gs);
    *host_pp = host / (double)groups_total(gs);
}

ferry_status placement_check_fit(const engine_ctx *c, const engine_groups *gs, engine_where w)
{
    double dev_pp, host_pp;
    placement_bytes_per_param(c, w, &dev_pp, &host_pp);
    uint64_t budget = arena_budget(c->arena);
    size_t n = groups_total(gs);
    uint64_t need = (uint64_t)(dev_pp * (double)n);
    if (ctx_mode(c) == FERRY_OFFLOAD_PARAMS)
        need = (uint64_t)(2 * c->act_size) * groups_largest(gs);
    if (need <= budget)
        return FERRY_OK;
    char b[32], nb[32];
    units_fmt_bytes(b, sizeof b, budget);
    units_fmt_bytes(nb, sizeof nb, need);
    if (ctx_mode(c) == FERRY_OFFLOAD_NONE)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device budget %s is too small for offload 'none': %zu parameters need %s on the "
                       "device (%.0f bytes each: weights, gradients, fp32 master weights and Adam "
                       "moments) before any activation; use offload FERRY_OFFLOAD_OPTIMIZER (%.0f bytes "
                       "per parameter on the device) or offload FERRY_OFFLOAD_PARAMS (a few groups at a "
                       "time), or raise device_budget_bytes",
                       b, n, nb, dev_pp, 2.0 * (double)c->act_size);
    if (ctx_mode(c) == FERRY_OFFLOAD_OPTIMIZER)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device budget %s is too small for offload 'optimizer': %zu parameters need %s "
                       "for weights and gradients on the device; use offload FERRY_OFFLOAD_PARAMS, which "
                       "keeps only a few groups there, or raise device_budget_bytes",
                       b, n, nb);
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "device budget %s cannot hold even the largest parameter group (%zu parameters: %s "
                   "for its weights and gradients); raise device_budget_bytes or split the group",
                   b, groups_largest(gs), nb);
}

static ferry_status place_item(const engine_ctx *c, const engine_planned *x, void **out)
{
    return arena_place(c->arena, x->b.offset, (size_t)x->b.bytes, x->b.cat, x->name, out);
}

/* The plan into the memory trace, after the region's own record (the
 * arena's) and before its buffers are placed: memprof checks the run's
 * allocations and slots against it. */
static void trace_plan(const engine_ctx *c, const engine_static_plan *p)
{
    for (int i = 0; c->trace && i < p->n; i++) {
        const engine_planned *x = &p->items[i];
        trace_plan_role role = x->kind == PLAN_WSLOT      ? TRACE_ROLE_WSLOT
                               : x->kind == PLAN_GSLOT    ? TRACE_ROLE_GSLOT
                               : x->kind == PLAN_EMBEDDER ? TRACE_ROLE_RANGE
                                                          : TRACE_ROLE_BUFFER;
        trace_planned(c->trace, x->b.cat, x->name, x->b.offset, x->b.bytes, x->b.start, x->b.end, role);
    }
}

/* Where a planned buffer's pointer goes. */
static ferry_status place_all(engine_placement *pl, const engine_ctx *c, engine_groups *gs,
                              const engine_plan_request *rq)
{
    engine_static_plan *p = &pl->plan;
    trace_plan(c, p);
    int nw = 0, ng = 0;
    for (int k = 0; k < p->nwclass; k++)
        nw += p->wclass[k].slots;
    for (int k = 0; k < p->ngclass; k++)
        ng += p->gclass[k].slots;
    pl->wslots = calloc((size_t)(nw ? nw : 1), sizeof *pl->wslots);
    pl->gslots = calloc((size_t)(ng ? ng : 1), sizeof *pl->gslots);
    pl->split = calloc((size_t)(gs->n ? gs->n : 1), sizeof *pl->split);
    if (!pl->wslots || !pl->gslots || !pl->split)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    engine_group_buffers_partitioned(ctx_mode(c), c->act_size, rq->ranks > 1 || rq->collective, b);
    int wat = 0, gat = 0;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < p->n && st == FERRY_OK; i++) {
        const engine_planned *x = &p->items[i];
        void *ptr = NULL;
        if (x->kind == PLAN_EMBEDDER) {
            pl->embedder = x; /* taken piece by piece by the embedder's allocations */
            continue;
        }
        if ((st = place_item(c, x, &ptr)) != FERRY_OK)
            break;
        switch (x->kind) {
        case PLAN_GLOBAL: pl->global[x->which] = ptr; break;
        case PLAN_GROUP: memcpy((char *)&gs->g[x->group] + b[x->which].slot, &ptr, sizeof ptr); break;
        case PLAN_ACC: gs->g[x->group].grad_acc = ptr; break;
        case PLAN_REDUCE: pl->reduce[x->which] = ptr; break;
        case PLAN_WSLOT: pl->wslots[wat++] = ptr; break;
        case PLAN_GSLOT: pl->gslots[gat++] = ptr; break;
        case PLAN_SPLIT: pl->split[x->group][x->which] = ptr; break;
        case PLAN_EMBEDDER: break;
        }
    }
    return st;
}

ferry_status placement_plan(engine_placement *pl, const engine_ctx *c, engine_groups *gs,
                            const engine_plan_request *rq, engine_device_share *share)
{
    ferry_status st = engine_static_plan_make(rq, &pl->plan);
    if (st != FERRY_OK)
        return err_wrap(st, "ferry_engine_setup");
    char words[600];
    engine_static_plan_words(&pl->plan, words, sizeof words);
    if ((st = arena_plan_region(c->arena, pl->plan.region_bytes, words)) != FERRY_OK ||
        (st = place_all(pl, c, gs, rq)) != FERRY_OK)
        return err_wrap(st, "ferry_engine_setup");
    uint64_t free_before = engine_device_free(c->be);
    st = ops_init(c->be, pl->global[ENGINE_GLOBAL_WORKSPACE], ops_workspace_bytes(backend_kind(c->be)));
    pl->ops_ready = st == FERRY_OK;
    engine_device_share_libraries(share, c->be, free_before);
    return st;
}

/* Slots are listed class after class, in the plan's order. */
static void *slot(void *const *all, const engine_slot_class *cls, int which, int k)
{
    int at = 0;
    for (int c = 0; c < which; c++)
        at += cls[c].slots;
    return all[at + k];
}

void *placement_wslot(const engine_placement *pl, int cls, int k) { return slot(pl->wslots, pl->plan.wclass, cls, k); }
void *placement_gslot(const engine_placement *pl, int cls, int k) { return slot(pl->gslots, pl->plan.gclass, cls, k); }

ferry_status placement_embedder_alloc(engine_placement *pl, const engine_ctx *c, size_t bytes,
                                      ferry_mem_category cat, const char *name, void **out)
{
    *out = NULL;
    const engine_planned *r = pl->embedder;
    uint64_t charge = arena_charge(bytes);
    if (!r || charge > r->b.bytes)
        return FERRY_OK;
    /* First fit between the live takes, kept sorted by offset. */
    uint64_t at = r->b.offset, end = r->b.offset + r->b.bytes;
    size_t i = 0;
    for (; i < pl->ntakes; i++) {
        if (pl->takes[i].off - at >= charge)
            break;
        at = pl->takes[i].off + pl->takes[i].bytes;
    }
    if (end - at < charge)
        return FERRY_OK;
    if (pl->ntakes == pl->cap_takes) {
        size_t cap = pl->cap_takes ? 2 * pl->cap_takes : 32;
        engine_embedder_take *grown = realloc(pl->takes, cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_alloc('%s'): out of host memory", name);
        pl->takes = grown;
        pl->cap_takes = cap;
    }
    void *ptr = NULL;
    ferry_status st = arena_place(c->arena, at, bytes, cat, name, &ptr);
    if (st != FERRY_OK)
        return st;
    memmove(pl->takes + i + 1, pl->takes + i, (pl->ntakes - i) * sizeof *pl->takes);
    pl->takes[i] = (engine_embedder_take){at, charge, ptr};
    pl->ntakes++;
    *out = ptr;
    return FERRY_OK;
}

bool placement_embedder_free(engine_placement *pl, const engine_ctx *c, void *ptr)
{
    for (size_t i = 0; i < pl->ntakes; i++) {
        if (pl->takes[i].ptr != ptr)
            continue;
        arena_free(c->arena, ptr);
        memmove(pl->takes + i, pl->takes + i + 1, (pl->ntakes - i - 1) * sizeof *pl->takes);
        pl->ntakes--;
        return true;
    }
    return false;
}

static ferry_status create_events(const engine_ctx *c, engine_group *g)
{
    backend_event **all[] = {&g->uploaded, &g->released, &g->grads_done, &g->drained, &g->updated};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        ferry_status st = backend_event_create(c->be, all[i]);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

static ferry_status dev_alloc(const engine_ctx *c, engine_group *g, size_t bytes, ferry_mem_category cat,
                              const char *what, void **out)
{
    char name[ENGINE_NAME_MAX + 24];
    snprintf(name, sizeof name, "%s %s", g->name, what);
    return arena_alloc(c->arena, bytes, cat, name, out);
}

static ferry_status host_alloc(const engine_ctx *c, engine_group *g, size_t bytes, ferry_mem_category cat,
                               const char *what, void **out)
{
    char name[ENGINE_NAME_MAX + 24];
    snprintf(name, sizeof name, "%s %s", g->name, what);
    ferry_status st = pool_alloc(c->pool, bytes, 0, cat, name, out);
    if (st != FERRY_OK)
        return err_wrap(st, "placing the optimizer state on the host (%s)", ferry_offload_name(ctx_mode(c)));
    return FERRY_OK;
}

ferry_status placement_group(const engine_ctx *c, engine_group *g, engine_where w)
{
    ferry_status st = create_events(c, g);
    if (st != FERRY_OK)
        return st;
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    unsigned on_disk;
    int n = where_buffers(c, w, b, &on_disk);
    for (int i = 0; i < n; i++) {
        if ((on_disk & (1u << i)) || b[i].device || !b[i].elem_bytes)
            continue; /* in the store's file; in the plan's region; not held (the upload window) */
        void *ptr = NULL;
        size_t bytes = engine_buffer_bytes(&b[i], engine_buffer_elems(&b[i], w.partitioned, g->numel, g->part_cap, g->padded));
        st = host_alloc(c, g, bytes, b[i].cat, b[i].what, &ptr);
        if (st != FERRY_OK)
            return st;
        memcpy((char *)g + b[i].slot, &ptr, sizeof ptr);
    }
    return FERRY_OK;
}

ferry_status placement_accumulators(const engine_ctx *c, engine_groups *gs, bool partitioned)
{
    engine_buffer b = engine_accumulator_buffer(ctx_mode(c));
    for (int i = 0; i < gs->n; i++) {
        engine_group *g = &gs->g[i];
        if (g->grad_acc)
            continue;
        void *ptr = NULL;
        size_t bytes = engine_buffer_elems(&b, partitioned, g->numel, g->part_cap, g->padded) * b.elem_bytes;
        ferry_status st = b.device ? dev_alloc(c, g, bytes, b.cat, b.what, &ptr) : host_alloc(c, g, bytes, b.cat, b.what, &ptr);
        if (st == FERRY_OK && !b.device)
            st = tp_first_touch(c->threads, ptr, bytes);
        if (st != FERRY_OK)
            return err_wrap(st, "summing several micro-batches in fp32");
        memcpy((char *)g + b.slot, &ptr, sizeof ptr);
    }
    return FERRY_OK;
}

void placement_unplace(engine_placement *pl, const engine_ctx *c, engine_groups *gs)
{
    if (pl->ops_ready && ops_init(c->be, NULL, 0) != FERRY_OK) /* the workspace goes with the arena */
        err_clear();
    pl->ops_ready = false;
    engine_static_plan_free(&pl->plan);
    free(pl->wslots);
    free(pl->gslots);
    free(pl->split);
    free(pl->takes);
    pl->wslots = pl->gslots = NULL;
    pl->split = NULL;
    pl->takes = NULL;
    pl->ntakes = pl->cap_takes = 0;
    pl->embedder = NULL;
    for (int i = 0; i < gs->n; i++) {
        engine_group *g = &gs->g[i];
        /* Arena and pool memory goes with them; only the events are per group. */
        backend_event *all[] = {g->uploaded, g->released, g->grads_done, g->drained, g->updated};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            backend_event_destroy(all[k]);
        g->uploaded = g->released = g->grads_done = g->drained = g->updated = NULL;
    }
}
