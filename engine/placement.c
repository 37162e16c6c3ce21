/* Where each byte of training state lives, per offload mode — the only
 * place that decides it:
 *
 *   mode       device (per parameter)            host pool (per parameter)
 *   none       weights, grads (act), master, m, v  -
 *   optimizer  weights, grads (act)              master, m, v (fp32), grads, weights (act)
 *   params     a bounded window of weights/grads master, m, v (fp32), grads, weights (act)
 *
 * With bf16 on the device that is 16 bytes per parameter on the host in the
 * offload modes (12 fp32 + 2 drained gradient + 2 upload copy), and 4 on the
 * device in optimizer mode. Also evicts retiring weights in params mode.
 * The host-side setup (first touch, the master copy, the bf16 conversion)
 * runs on the engine's thread pool, every core of its node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "engine/engine.h"
#include "optim/half.h"
#ifdef FERRY_HAVE_CUDA
#include "kernels/ops_cuda.h"
#endif

static optim_dtype act_optim(const ferry_engine *e)
{
    return e->act == DTYPE_F32 ? OPTIM_F32 : OPTIM_BF16;
}

void engine_bytes_per_param(const ferry_engine *e, double *device, double *host)
{
    double act = (double)e->act_size;
    switch (e->cfg.offload) {
    case FERRY_OFFLOAD_NONE: *device = 2 * act + 12; *host = 0; return;
    case FERRY_OFFLOAD_OPTIMIZER: *device = 2 * act; *host = 12 + 2 * act; return;
    case FERRY_OFFLOAD_PARAMS: break;
    }
    /* params: ferry_engine_create refuses any other value */
    *device = 0;
    *host = 12 + 2 * act;
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
                       "moments) before any activation; use --offload optimizer (%.0f bytes per "
                       "parameter on the device) or --offload params (a few groups at a time), or a "
                       "larger --gpu-mem",
                       b, n, nb, dev_pp, 2.0 * (double)e->act_size);
    if (e->cfg.offload == FERRY_OFFLOAD_OPTIMIZER)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device budget %s is too small for offload 'optimizer': %zu parameters need %s "
                       "for weights and gradients on the device; use --offload params, which keeps "
                       "only a few groups there, or a larger --gpu-mem",
                       b, n, nb);
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "device budget %s cannot hold even the largest parameter group (%zu parameters: %s "
                   "for its weights and gradients); raise --gpu-mem or split the group",
                   b, largest_group(e), nb);
}

static ferry_status create_events(ferry_engine *e, engine_group *g)
{
    backend_event **all[] = {&g->uploaded, &g->released, &g->grads_done, &g->drained,
                             &g->updated, &g->wait_begin, &g->wait_end};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        ferry_status st = backend_event_create(e->be, all[i]);
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

/* Fills master (from init), zero moments, and the device weights. */
static ferry_status place_none(ferry_engine *e, engine_group *g)
{
    size_t f32 = g->numel * sizeof(float), act = g->numel * e->act_size;
    ferry_status st;
    if ((st = dev_alloc(e, g, act, FERRY_MEM_PARAMS, "weights", &g->dev_weights)) != FERRY_OK ||
        (st = dev_alloc(e, g, act, FERRY_MEM_GRADS, "grads", &g->dev_grads)) != FERRY_OK ||
        (st = dev_alloc(e, g, f32, FERRY_MEM_PARAMS, "master", (void **)&g->master)) != FERRY_OK ||
        (st = dev_alloc(e, g, f32, FERRY_MEM_OPTIMIZER, "adam m", (void **)&g->m)) != FERRY_OK ||
        (st = dev_alloc(e, g, f32, FERRY_MEM_OPTIMIZER, "adam v", (void **)&g->v)) != FERRY_OK)
        return st;
    if ((st = backend_memcpy_async(e->compute, g->master, g->init, f32, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memset_async(e->compute, g->m, 0, f32)) != FERRY_OK ||
        (st = backend_memset_async(e->compute, g->v, 0, f32)) != FERRY_OK ||
        (st = backend_memset_async(e->compute, g->dev_grads, 0, act)) != FERRY_OK ||
        (st = ops_convert_from_f32(e->compute, g->dev_weights, g->master, g->numel)) != FERRY_OK)
        return st;
    /* init is freed after setup: the copy must have happened. */
    return backend_stream_synchronize(e->compute);
}

static ferry_status place_offloaded(ferry_engine *e, engine_group *g)
{
    size_t f32 = g->numel * sizeof(float), act = g->numel * e->act_size;
    ferry_status st;
    if ((st = host_alloc(e, g, f32, FERRY_MEM_PARAMS, "master", (void **)&g->master)) != FERRY_OK ||
        (st = host_alloc(e, g, f32, FERRY_MEM_OPTIMIZER, "adam m", (void **)&g->m)) != FERRY_OK ||
        (st = host_alloc(e, g, f32, FERRY_MEM_OPTIMIZER, "adam v", (void **)&g->v)) != FERRY_OK ||
        (st = host_alloc(e, g, act, FERRY_MEM_GRADS, "grads", &g->host_grads)) != FERRY_OK ||
        (st = host_alloc(e, g, act, FERRY_MEM_STAGING, "weights", &g->host_weights)) != FERRY_OK)
        return st;
    /* First touch from the optimizer's threads puts the pages on its node;
     * the master weights are first touched by the copy, on the same threads. */
    if ((st = tp_first_touch(e->threads, g->m, f32)) != FERRY_OK ||
        (st = tp_first_touch(e->threads, g->v, f32)) != FERRY_OK ||
        (st = tp_first_touch(e->threads, g->host_grads, act)) != FERRY_OK ||
        (st = half_convert_pool(e->threads, g->master, OPTIM_F32, g->init, OPTIM_F32, g->numel)) != FERRY_OK)
        return st;
    if (e->cfg.offload == FERRY_OFFLOAD_OPTIMIZER) {
        if ((st = dev_alloc(e, g, act, FERRY_MEM_PARAMS, "weights", &g->dev_weights)) != FERRY_OK ||
            (st = dev_alloc(e, g, act, FERRY_MEM_GRADS, "grads", &g->dev_grads)) != FERRY_OK ||
            (st = backend_memset_async(e->compute, g->dev_grads, 0, act)) != FERRY_OK)
            return st;
    }
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
    if ((st = half_convert_pool(e->threads, g->host_weights, act_optim(e), g->master, OPTIM_F32, g->numel)) !=
        FERRY_OK)
        return st;
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS)
        return FERRY_OK;
    if ((st = backend_memcpy_async(e->h2d, g->dev_weights, g->host_weights, g->numel * e->act_size,
                                   BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_event_record(g->uploaded, e->h2d)) != FERRY_OK)
        return st;
    return backend_stream_synchronize(e->h2d);
}

static void describe(ferry_engine *e)
{
    double dev_pp, host_pp;
    engine_bytes_per_param(e, &dev_pp, &host_pp);
    char budget[32], pin[256] = "";
    units_fmt_bytes(budget, sizeof budget, arena_budget(e->arena));
    pool_pinning_note(e->pool, pin, sizeof pin);
    snprintf(e->describe, sizeof e->describe,
             "%s backend (%s), offload %s, %d groups, %zu parameters; device budget %s, %.0f B/param "
             "on the device, %.0f B/param on the host; optimizer: %s%s%s",
             ferry_backend_name(backend_kind(e->be)), backend_device_name(e->be),
             ferry_offload_name(e->cfg.offload), e->ngroups, total_params(e), budget, dev_pp, host_pp,
             tp_pool_binding(e->threads), pin[0] ? "; " : "", pin);
}

ferry_status engine_place(ferry_engine *e)
{
    ferry_status st = check_device_fit(e);
    if (st != FERRY_OK)
        return st;
    if (e->cfg.offload == FERRY_OFFLOAD_NONE && backend_kind(e->be) == FERRY_BACKEND_CUDA) {
#ifdef FERRY_HAVE_CUDA
        size_t scratch = cudaop_sumsq_scratch_bytes();
#else
        size_t scratch = 256;
#endif
        if ((st = arena_alloc(e->arena, (size_t)e->ngroups * sizeof(double), FERRY_MEM_WORKSPACE,
                              "gradient norm partials", (void **)&e->dev_sumsq)) != FERRY_OK ||
            (st = arena_alloc(e->arena, scratch, FERRY_MEM_WORKSPACE, "gradient norm scratch",
                              &e->dev_sumsq_scratch)) != FERRY_OK)
            return st;
    }
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if ((st = create_events(e, g)) != FERRY_OK)
            return st;
        st = e->cfg.offload == FERRY_OFFLOAD_NONE ? place_none(e, g) : place_offloaded(e, g);
        if (st != FERRY_OK)
            return st;
    }
    describe(e);
    return FERRY_OK;
}

void engine_unplace(ferry_engine *e)
{
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
        backend_event *all[] = {g->uploaded, g->released, g->grads_done, g->drained,
                                g->updated, g->wait_begin, g->wait_end};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            backend_event_destroy(all[k]);
        g->uploaded = g->released = g->grads_done = g->drained = NULL;
        g->updated = g->wait_begin = g->wait_end = NULL;
    }
}

int engine_evict(ferry_engine *e, int keep_group, int max_resident)
{
    int evicted = 0;
    while (e->resident_now > max_resident) {
        engine_group *oldest = NULL;
        for (int i = 0; i < e->ngroups; i++) {
            engine_group *g = &e->groups[i];
            if (i != keep_group && g->residency == RES_RETIRING && (!oldest || g->last_use < oldest->last_use))
                oldest = g;
        }
        if (!oldest)
            break;
        backend_event_synchronize(oldest->released);
        arena_free(e->arena, oldest->dev_weights);
        oldest->dev_weights = NULL;
        oldest->residency = RES_ABSENT;
        e->resident_now--;
        evicted++;
    }
    return evicted;
}
