/* Setup's placement: allocates what layout.c lists for the offload mode (the
 * engine's own buffers, then every group's), fills it (master weights from
 * the initial values, zero moments and gradients, the device or upload copy
 * of the weights), and says in one sentence what it chose. Also evicts
 * retiring weights in params mode, the group needed furthest ahead first.
 * The host-side setup (first touch, the master copy, the bf16 conversion)
 * runs on the engine's thread pool, every core of its node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "engine/engine.h"
#include "engine/shard.h"
#include "optim/half.h"

void engine_bytes_per_param(const ferry_engine *e, double *device, double *host)
{
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    unsigned on_disk;
    int n = engine_layout_buffers(e, b, &on_disk);
    *device = *host = 0;
    for (int i = 0; i < n; i++)
        if (!(on_disk & (1u << i)))
            *(b[i].device ? device : host) += (double)b[i].elem_bytes;
}

static size_t total_params(const ferry_engine *e)
{
    size_t n = 0;
    for (int g = 0; g < e->ngroups; g++)
        n += e->groups[g].numel;
    return n;
}

static size_t largest_group(const ferry_engine *e)
{
    size_t n = 0;
    for (int g = 0; g < e->ngroups; g++)
        if (e->groups[g].numel > n)
            n = e->groups[g].numel;
    return n;
}

/* Says before allocating anything whether the mode can fit the budget. */
static ferry_status check_device_fit(ferry_engine *e)
{
    double dev_pp, host_pp;
    engine_bytes_per_param(e, &dev_pp, &host_pp);
    uint64_t budget = arena_budget(e->arena);
    size_t n = total_params(e);
    uint64_t need = (uint64_t)(dev_pp * (double)n);
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS)
        need = (uint64_t)(2 * e->act_size) * largest_group(e);
    if (need <= budget)
        return FERRY_OK;
    char b[32], nb[32];
    units_fmt_bytes(b, sizeof b, budget);
    units_fmt_bytes(nb, sizeof nb, need);
    if (e->cfg.offload == FERRY_OFFLOAD_NONE)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device budget %s is too small for offload 'none': %zu parameters need %s on the "
                       "device (%.0f bytes each: weights, gradients, fp32 master weights and Adam "
                       "moments) before any activation; use offload FERRY_OFFLOAD_OPTIMIZER (%.0f bytes "
                       "per parameter on the device) or offload FERRY_OFFLOAD_PARAMS (a few groups at a "
                       "time), or raise device_budget_bytes",
                       b, n, nb, dev_pp, 2.0 * (double)e->act_size);
    if (e->cfg.offload == FERRY_OFFLOAD_OPTIMIZER)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device budget %s is too small for offload 'optimizer': %zu parameters need %s "
                       "for weights and gradients on the device; use offload FERRY_OFFLOAD_PARAMS, which "
                       "keeps only a few groups there, or raise device_budget_bytes",
                       b, n, nb);
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "device budget %s cannot hold even the largest parameter group (%zu parameters: %s "
                   "for its weights and gradients); raise device_budget_bytes or split the group",
                   b, largest_group(e), nb);
}

static ferry_status create_events(ferry_engine *e, engine_group *g)
{
    backend_event **plain[] = {&g->uploaded, &g->released, &g->grads_done, &g->drained, &g->updated};
    /* The step's timing reads the time between these: its weight waits and
     * the first wait off the learned order. */
    backend_event **timed[] = {&g->wait_begin, &g->wait_end, &g->miss_begin, &g->miss_end};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        ferry_status st = backend_event_create(e->be, plain[i]);
        if (st != FERRY_OK)
            return st;
    }
    for (size_t i = 0; i < sizeof timed / sizeof timed[0]; i++) {
        ferry_status st = backend_event_create_timed(e->be, timed[i]);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

static ferry_status dev_alloc(ferry_engine *e, engine_group *g, size_t bytes, ferry_mem_category cat,
                              const char *what, void **out)
{
    char name[ENGINE_NAME_MAX + 24];
    snprintf(name, sizeof name, "%s %s", g->name, what);
    return arena_alloc(e->arena, bytes, cat, name, out);
}

static ferry_status host_alloc(ferry_engine *e, engine_group *g, size_t bytes, ferry_mem_category cat,
                               const char *what, void **out)
{
    char name[ENGINE_NAME_MAX + 24];
    snprintf(name, sizeof name, "%s %s", g->name, what);
    ferry_status st = pool_alloc(e->pool, bytes, 0, cat, name, out);
    if (st != FERRY_OK)
        return err_wrap(st, "placing the optimizer state on the host (%s)", ferry_offload_name(e->cfg.offload));
    return FERRY_OK;
}

/* Allocates every buffer the layout table (layout.c) gives the group. */
static ferry_status alloc_group(ferry_engine *e, engine_group *g)
{
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    bool sharded = shard_sharded(e);
    unsigned on_disk;
    int n = engine_layout_buffers(e, b, &on_disk);
    for (int i = 0; i < n; i++) {
        if (on_disk & (1u << i))
            continue; /* in the store's file */
        void *ptr = NULL;
        size_t bytes = engine_buffer_elems(&b[i], sharded, g->numel, g->shard_cap, g->padded) * b[i].elem_bytes;
        ferry_status st = b[i].device ? dev_alloc(e, g, bytes, b[i].cat, b[i].what, &ptr)
                                      : host_alloc(e, g, bytes, b[i].cat, b[i].what, &ptr);
        if (st != FERRY_OK)
            return st;
        memcpy((char *)g + b[i].slot, &ptr, sizeof ptr);
    }
    return FERRY_OK;
}

ferry_status engine_ensure_accumulators(ferry_engine *e)
{
    engine_buffer b = engine_accumulator_buffer(e->cfg.offload);
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (g->grad_acc)
            continue;
        void *ptr = NULL;
        size_t bytes = engine_buffer_elems(&b, shard_sharded(e), g->numel, g->shard_cap, g->padded) * b.elem_bytes;
        ferry_status st = b.device ? dev_alloc(e, g, bytes, b.cat, b.what, &ptr) : host_alloc(e, g, bytes, b.cat, b.what, &ptr);
        if (st == FERRY_OK && !b.device)
            st = tp_first_touch(e->threads, ptr, bytes);
        if (st != FERRY_OK)
            return err_wrap(st, "summing several micro-batches in fp32");
        memcpy((char *)g + b.slot, &ptr, sizeof ptr);
    }
    return engine_split_ensure_accumulators(e);
}

const void *engine_step_grads(const ferry_engine *e, const engine_group *g, ferry_dtype *dtype)
{
    /* With data parallelism the gradients are summed across ranks in fp32:
     * in the fp32 sum (offload none), or drained as fp32 (sharded modes). */
    bool acc = e->accumulating || (e->dp && e->cfg.offload == FERRY_OFFLOAD_NONE);
    *dtype = acc || e->dp ? FERRY_DTYPE_F32 : e->act;
    if (acc)
        return g->grad_acc;
    return e->cfg.offload == FERRY_OFFLOAD_NONE ? g->dev_grads : g->host_grads;
}

/* Fills master (from init), zero moments, and the device weights. */
static ferry_status fill_none(ferry_engine *e, engine_group *g)
{
    size_t f32 = g->numel * sizeof(float), act = g->numel * e->act_size;
    ferry_status st;
    if ((st = backend_memcpy_async(e->compute, g->master, g->init, f32, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memset_async(e->compute, g->m, 0, f32)) != FERRY_OK ||
        (st = backend_memset_async(e->compute, g->v, 0, f32)) != FERRY_OK ||
        (st = backend_memset_async(e->compute, g->dev_grads, 0, act)) != FERRY_OK ||
        (st = ops_convert_from_f32(e->compute, g->dev_weights, g->master, g->numel)) != FERRY_OK)
        return st;
    /* init is freed after setup: the copy must have happened. */
    return backend_stream_synchronize(e->compute);
}

static ferry_status fill_offloaded(ferry_engine *e, engine_group *g)
{
    /* This rank's part: the whole group alone; with data parallelism a slot
     * of shard_cap elements holding shard_n of the group from shard_lo,
     * zero past them, with the gradients drained as fp32. */
    size_t f32 = g->shard_cap * sizeof(float), act = g->numel * e->act_size;
    size_t grads = g->shard_cap * (e->dp ? sizeof(float) : e->act_size);
    ferry_status st;
    /* First touch from the optimizer's threads puts the pages on its node;
     * the master weights are first touched by the copy, on the same threads. */
    if ((g->m && (st = tp_first_touch(e->threads, g->m, f32)) != FERRY_OK) ||
        (g->v && (st = tp_first_touch(e->threads, g->v, f32)) != FERRY_OK) ||
        (st = tp_first_touch(e->threads, g->host_grads, grads)) != FERRY_OK ||
        (e->dp && (st = tp_first_touch(e->threads, g->master, f32)) != FERRY_OK) ||
        (e->dp && (st = tp_first_touch(e->threads, g->host_weights, g->shard_cap * e->act_size)) != FERRY_OK) ||
        (g->master && (st = half_convert_pool(e->threads, g->master, FERRY_DTYPE_F32, g->init + g->shard_lo,
                                              FERRY_DTYPE_F32, g->shard_n)) != FERRY_OK) ||
        (e->nvme && (st = engine_nvme_fill(e, g)) != FERRY_OK))
        return st;
    if (e->cfg.offload == FERRY_OFFLOAD_OPTIMIZER &&
        (st = backend_memset_async(e->compute, g->dev_grads, 0, act)) != FERRY_OK)
        return st;
    return engine_write_device_weights(e, g);
}

/* The device (or upload) copy of the weights from the master weights, after
 * setup or a load. Synchronous. */
ferry_status engine_write_device_weights(ferry_engine *e, engine_group *g)
{
    ferry_status st;
    if (e->cfg.offload == FERRY_OFFLOAD_NONE) {
        if ((st = ops_convert_from_f32(e->compute, g->dev_weights, g->master, g->numel)) != FERRY_OK)
            return st;
        return backend_stream_synchronize(e->compute);
    }
    st = g->master ? half_convert_pool(e->threads, g->host_weights, e->act, g->master, FERRY_DTYPE_F32, g->shard_n)
                   : engine_nvme_convert_master(e, g);
    if (st != FERRY_OK)
        return st;
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS)
        return FERRY_OK;
    if (e->dp) { /* this rank's slot up, the others' gathered */
        if ((st = shard_upload(e, g, NULL)) != FERRY_OK)
            return st;
        return shard_check(e); /* the gather's failure, if any, is the caller's */
    }
    if ((st = backend_memcpy_async(e->h2d, g->dev_weights, g->host_weights, g->numel * e->act_size,
                                   BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_event_record(g->uploaded, e->h2d)) != FERRY_OK)
        return st;
    return backend_stream_synchronize(e->h2d);
}

/* This rank's bytes per parameter of the model: with data parallelism in
 * the sharded modes its host slots hold about 1/N of them. */
static void rank_bytes_per_param(const ferry_engine *e, double *dev_pp, double *host_pp)
{
    engine_bytes_per_param(e, dev_pp, host_pp);
    if (!shard_sharded(e))
        return;
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    int n = engine_group_buffers_sharded(e->cfg.offload, e->act_size, true, b);
    double dev = 0, host = 0;
    for (int g = 0; g < e->ngroups; g++)
        for (int i = 0; i < n; i++) {
            const engine_group *gr = &e->groups[g];
            double bytes = (double)engine_buffer_elems(&b[i], true, gr->numel, gr->shard_cap, gr->padded) *
                           (double)b[i].elem_bytes;
            *(b[i].device ? &dev : &host) += bytes;
        }
    *dev_pp = dev / (double)total_params(e);
    *host_pp = host / (double)total_params(e);
}

static void describe(ferry_engine *e)
{
    double dev_pp, host_pp;
    rank_bytes_per_param(e, &dev_pp, &host_pp);
    char budget[32], pin[256] = "";
    units_fmt_bytes(budget, sizeof budget, arena_budget(e->arena));
    pool_pinning_note(e->pool, pin, sizeof pin);
    char rank[64] = "";
    if (e->dp)
        snprintf(rank, sizeof rank, "; rank %d of %d", ferry_engine_rank(e), ferry_engine_world_size(e));
    snprintf(e->describe, sizeof e->describe,
             "%s backend (%s), offload %s, %d groups, %zu parameters; device budget %s, %.0f B/param "
             "on the device, %.*f B/param on the host%s; optimizer: %s%s%s",
             ferry_backend_name(backend_kind(e->be)), backend_device_name(e->be),
             ferry_offload_name(ferry_engine_offload(e)), e->ngroups, total_params(e), budget, dev_pp,
             host_pp < 10 && host_pp > 0 && host_pp != (int)host_pp ? 1 : 0, host_pp, rank,
             tp_pool_binding(e->threads), pin[0] ? "; " : "", pin);
    if (e->nvme)
        engine_nvme_describe(e, e->describe, sizeof e->describe);
}

/* The engine's own buffers (layout.c), then the op set, which may want one
 * of them (the matmul workspace). */
static ferry_status place_globals(ferry_engine *e)
{
    engine_global_buffer b[ENGINE_GLOBAL_BUFFERS_MAX];
    int n = engine_global_buffers(backend_kind(e->be), e->cfg.offload, e->ngroups, b);
    for (int i = 0; i < n; i++) {
        void *ptr = NULL;
        ferry_status st = arena_alloc(e->arena, b[i].bytes, b[i].cat, b[i].what, &ptr);
        if (st != FERRY_OK)
            return err_wrap(st, "ferry_engine_setup");
        memcpy((char *)e + b[i].slot, &ptr, sizeof ptr);
    }
    uint64_t free_before = engine_device_free(e);
    ferry_status st = ops_init(e->be, e->dev_workspace, ops_workspace_bytes(backend_kind(e->be)));
    e->ops_ready = st == FERRY_OK;
    engine_device_share_libraries(e, free_before);
    return st;
}

/* Params mode: what residency keeps free for gradients (the planner's
 * count: engine_drain_window + 2 groups, the largest) and the largest
 * group's weights, charged as the arena charges. */
static ferry_status plan_residency(ferry_engine *e)
{
    e->prefetch_depth = e->cfg.prefetch_groups;
    e->cur_phase = FERRY_PHASE_FORWARD;
    e->cur_group = -1;
    if (e->cfg.offload != FERRY_OFFLOAD_PARAMS)
        return FERRY_OK;
    int count = engine_drain_window(e->cfg.prefetch_groups) + 2;
    uint64_t *c = malloc((size_t)e->ngroups * sizeof *c);
    if (!c)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    for (int g = 0; g < e->ngroups; g++) {
        c[g] = arena_charge(e->groups[g].numel * e->act_size);
        uint64_t w = engine_weight_charge(e, &e->groups[g]);
        e->largest_weights = w > e->largest_weights ? w : e->largest_weights;
    }
    e->grads_reserve = 0;
    for (int k = 0; k < count && k < e->ngroups; k++) { /* count is small: selection, not a sort */
        int best = k;
        for (int i = k + 1; i < e->ngroups; i++)
            if (c[i] > c[best])
                best = i;
        uint64_t t = c[k];
        c[k] = c[best];
        c[best] = t;
        e->grads_reserve += c[k];
    }
    free(c);
    return FERRY_OK;
}

ferry_status engine_place(ferry_engine *e)
{
    ferry_status st = engine_auto_resolve(e); /* offload auto: the mode, before any byte */
    if (st == FERRY_OK)
        st = check_device_fit(e);
    if (st == FERRY_OK)
        st = place_globals(e);
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++)
        shard_layout(e, &e->groups[i]);
    if (st == FERRY_OK)
        st = plan_residency(e); /* after the layout: the weights' padded sizes */
    if (st == FERRY_OK)
        st = shard_place(e); /* its events come before the first upload */
    if (st == FERRY_OK && e->nvme_dir && (st = engine_nvme_reserve_host(e)) == FERRY_OK)
        st = engine_nvme_open(e);
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        if ((st = create_events(e, g)) == FERRY_OK && (st = alloc_group(e, g)) == FERRY_OK)
            st = e->cfg.offload == FERRY_OFFLOAD_NONE ? fill_none(e, g) : fill_offloaded(e, g);
    }
    if (st == FERRY_OK)
        describe(e);
    return st;
}

void engine_unplace(ferry_engine *e)
{
    if (e->ops_ready)
        ops_shutdown(e->be);
    e->ops_ready = false;
    shard_unplace(e);
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (g->norm_ticket) {
            tp_wait(g->norm_ticket);
            g->norm_ticket = NULL;
        }
        for (int k = 0; k < g->update_count; k++)
            tp_wait(g->update_tickets[k]);
        free(g->update_tickets);
        g->update_tickets = NULL;
        g->update_count = 0;

        if (g->norm) {
            free(g->norm->partial);
            free(g->norm->bad);
            free(g->norm);
            g->norm = NULL;
        }
        /* Arena and pool memory goes with them; only the events are per group. */
        backend_event *all[] = {g->uploaded, g->released, g->grads_done, g->drained, g->updated,
                                g->wait_begin, g->wait_end, g->miss_begin, g->miss_end};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            backend_event_destroy(all[k]);
        g->uploaded = g->released = g->grads_done = g->drained = NULL;
        g->updated = g->wait_begin = g->wait_end = g->miss_begin = g->miss_end = NULL;
    }
    engine_order_reset(e, true);
    engine_nvme_close(e);
}

/* By the learned order: the rest of this pass, then the other phase's
 * pass (backward after forward, the next forward after backward), then
 * this phase's again. */
static long next_use_learned(const ferry_engine *e, int h)
{
    int ph = e->cur_phase, other = !ph;
    long p = e->order_pos[ph], n = e->order_len[ph];
    if (e->order_first[ph][h] >= p)
        return e->order_first[ph][h] - p + 1;
    if (e->order_last[ph][h] >= p) /* fetched more than once a pass: find the next */
        for (long k = p; k < n; k++)
            if (e->order[ph][k] == h)
                return k - p + 1;
    if (e->order_first[other][h] >= 0)
        return n - p + 1 + e->order_first[other][h];
    if (e->order_first[ph][h] >= 0)
        return n - p + 1 + e->order_len[other] + e->order_first[ph][h];
    return 2 * (n + e->order_len[other]) + 2; /* never fetched in the record */
}

long engine_next_use(const ferry_engine *e, int h)
{
    if (e->order_learned)
        return next_use_learned(e, h);
    long G = e->ngroups, at = e->cur_group;
    if (e->cur_phase == FERRY_PHASE_FORWARD) /* the rest of forward, then backward from the top */
        return h > at ? h - at : (G - 1 - at) + (G - 1 - h) + 1;
    return h < at ? at - h : at + 1 + h; /* the rest of backward, then the next forward */
}

uint64_t engine_weight_charge(const ferry_engine *e, const engine_group *g)
{
    return arena_charge(g->padded * e->act_size);
}

ferry_status engine_evict_after(ferry_engine *e, int keep_group, long after, bool *evicted)
{
    engine_group *victim = NULL;
    long far = after;
    *evicted = false;
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        long d = engine_next_use(e, i);
        if (i != keep_group && g->residency == RES_RETIRING && d > far) {
            victim = g;
            far = d;
        }
    }
    if (!victim)
        return FERRY_OK;
    /* Freed memory is reused at once: the kernels reading it must be done. */
    ferry_status st = backend_event_synchronize(victim->released);
    if (st != FERRY_OK)
        return st;
    arena_free(e->arena, victim->dev_weights);
    victim->dev_weights = NULL;
    victim->residency = RES_ABSENT;
    e->resident_now--;
    e->resident_bytes -= engine_weight_charge(e, victim);
    *evicted = true;
    return FERRY_OK;
}

ferry_status engine_evict(ferry_engine *e, int keep_group, int max_resident, int *evicted_out)
{
    int evicted = 0;
    ferry_status st = FERRY_OK;
    bool one = true;
    while (e->resident_now > max_resident && one && (st = engine_evict_after(e, keep_group, -1, &one)) == FERRY_OK)
        evicted += one;
    if (evicted_out)
        *evicted_out = evicted;
    return st;
}
