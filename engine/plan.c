/* The engine's memory plan: what setup and the schedule will allocate, by
 * category, counted from the layout table setup allocates from (layout.c)
 * and charged with the allocators' own rounding (arena_charge, pool_charge).
 * Owns only arithmetic; opens no backend. */
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "engine/intree.h"
#include "engine/layout.h"
#include "offload/arena.h"
#include "offload/nvme.h"
#include "offload/pool.h"

static ferry_status check_request(const engine_plan_request *rq)
{
    if (!rq || (rq->ngroups > 0 && !rq->group_numel))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: NULL request or group sizes");
    if (rq->ngroups < 1 || rq->ngroups > ENGINE_MAX_GROUPS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: %d groups; plan for 1..%d", rq->ngroups,
                       ENGINE_MAX_GROUPS);
    if (rq->backend != FERRY_BACKEND_HOST && rq->backend != FERRY_BACKEND_CUDA)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: backend %d; plan for host or cuda",
                       (int)rq->backend);
    if (rq->dtype != FERRY_DTYPE_AUTO && rq->dtype != FERRY_DTYPE_F32 && rq->dtype != FERRY_DTYPE_BF16 &&
        rq->dtype != FERRY_DTYPE_F16)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: dtype %s; the device holds f32, bf16 or f16",
                       dtype_name(rq->dtype));
    if (rq->backend == FERRY_BACKEND_CUDA && rq->dtype == FERRY_DTYPE_F32)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: the cuda backend stores bf16 or f16, not f32");
    if (rq->offload < FERRY_OFFLOAD_NONE || rq->offload > FERRY_OFFLOAD_NVME)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: offload %d is not none, optimizer, params or nvme",
                       (int)rq->offload);
    if (rq->disk && rq->offload != FERRY_OFFLOAD_PARAMS && rq->offload != FERRY_OFFLOAD_NVME)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: the state on disk with offload %s; use nvme or params",
                       ferry_offload_name(rq->offload));
    if (rq->micro_batches < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: %d micro-batches per step", rq->micro_batches);
    if (rq->prefetch_groups < 0 || rq->prefetch_groups > 64)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: prefetch %d is outside 0..64", rq->prefetch_groups);
    if (rq->ranks < 0 || rq->ranks > 65536)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: %d ranks; plan for 1..65536", rq->ranks);
    if (rq->ranks > 1 && (rq->disk || rq->offload == FERRY_OFFLOAD_NVME))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: the NVMe tier trains alone, not with %d ranks "
                       "(each rank holds a shard of the state in host memory instead)", rq->ranks);
    for (int g = 0; g < rq->ngroups; g++)
        if (rq->group_numel[g] == 0 || rq->group_numel[g] > ((size_t)1 << 40))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: group %d has %zu parameters, outside 1..2^40", g,
                           rq->group_numel[g]);
    return FERRY_OK;
}

/* Data parallelism in the sharded modes (engine/dp.c): a rank's slot of
 * a group, and the device weights of a group (every rank's slot). */
static bool plan_sharded(const engine_plan_request *rq) { return rq->ranks > 1 && rq->offload != FERRY_OFFLOAD_NONE; }
static size_t plan_cap(const engine_plan_request *rq, int g) { return engine_shard_cap(rq->group_numel[g], rq->ranks); }
static size_t plan_padded(const engine_plan_request *rq, int g)
{
    return plan_sharded(rq) ? plan_cap(rq, g) * (size_t)rq->ranks : rq->group_numel[g];
}

/* Sum of the `count` largest charges of `numel * elem` over the groups
 * (`padded`: the device weights' numel). */
static uint64_t largest_of(const engine_plan_request *rq, int count, size_t elem, bool padded)
{
    uint64_t *c = malloc((size_t)rq->ngroups * sizeof *c);
    if (!c)
        return UINT64_MAX;
    for (int g = 0; g < rq->ngroups; g++)
        c[g] = arena_charge((padded ? plan_padded(rq, g) : rq->group_numel[g]) * elem);
    uint64_t sum = 0;
    for (int k = 0; k < count && k < rq->ngroups; k++) { /* count is small: selection, not a sort */
        int best = k;
        for (int i = k + 1; i < rq->ngroups; i++)
            if (c[i] > c[best])
                best = i;
        uint64_t t = c[k];
        c[k] = c[best];
        c[best] = t;
        sum += c[k];
    }
    free(c);
    return sum;
}

static uint64_t largest(const engine_plan_request *rq, int count, size_t elem)
{
    return largest_of(rq, count, elem, false);
}

/* The device side of a mode: offload nvme places it as optimizer mode does. */
static ferry_offload device_mode(const engine_plan_request *rq)
{
    return rq->offload == FERRY_OFFLOAD_NVME ? FERRY_OFFLOAD_OPTIMIZER : rq->offload;
}

static bool on_disk(const engine_plan_request *rq) { return rq->offload == FERRY_OFFLOAD_NVME || rq->disk; }

/* The NVMe tier: the store's file (its regions as offload/nvme.c lays them
 * out) and its window, charged as the pool charges it. */
static ferry_status plan_disk(const engine_plan_request *rq, int arrays, engine_memory_plan *p)
{
    size_t tile = nvme_tile_elems_for(rq->disk_window_bytes, (size_t)rq->disk_block_bytes, arrays);
    if (!tile)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: an NVMe window of %llu bytes cannot hold %d tiles of %d "
                       "arrays of 4 KiB", (unsigned long long)rq->disk_window_bytes, NVME_MIN_SLOTS, arrays);
    for (int g = 0; g < rq->ngroups; g++)
        p->disk_bytes += nvme_region_bytes(rq->group_numel[g], arrays, tile);
    p->host_bytes[FERRY_MEM_NVME] +=
        nvme_window_charge(rq->disk_window_bytes, (size_t)rq->disk_block_bytes, arrays, p->disk_bytes);
    return FERRY_OK;
}

static ferry_status plan_setup(const engine_plan_request *rq, engine_memory_plan *p)
{
    engine_global_buffer gb[ENGINE_GLOBAL_BUFFERS_MAX];
    ferry_offload mode = device_mode(rq);
    int n = engine_global_buffers(rq->backend, mode, rq->ngroups, gb);
    for (int i = 0; i < n; i++)
        p->device_bytes[gb[i].cat] += arena_charge(gb[i].bytes);
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX + 1];
    bool sharded = plan_sharded(rq);
    int nb = engine_group_buffers_sharded(mode, p->act_size, sharded, b);
    unsigned disk = engine_disk_buffers(b, nb, on_disk(rq), rq->disk_master);
    /* the fp32 sum of micro-batches; offload none with ranks all-reduces in it from setup on */
    if (rq->micro_batches > 1 || (rq->ranks > 1 && mode == FERRY_OFFLOAD_NONE))
        b[nb++] = engine_accumulator_buffer(mode);
    size_t most_cap = 0;
    for (int g = 0; g < rq->ngroups; g++) {
        size_t cap = sharded ? plan_cap(rq, g) : rq->group_numel[g], padded = plan_padded(rq, g);
        most_cap = cap > most_cap ? cap : most_cap;
        for (int i = 0; i < nb; i++) {
            size_t bytes = engine_buffer_elems(&b[i], sharded, rq->group_numel[g], cap, padded) * b[i].elem_bytes;
            if (disk & (1u << i))
                continue; /* the store's, below */
            if (b[i].device)
                p->device_bytes[b[i].cat] += arena_charge(bytes);
            else
                p->host_bytes[b[i].cat] += pool_charge(bytes);
        }
    }
    /* two pairs of reduce buffers: a chunk of every rank's slot of the fp32
     * gradients, and this rank's chunk of their sum */
    if (sharded) {
        size_t chunk = engine_reduce_chunk(rq->ranks, most_cap);
        p->device_bytes[FERRY_MEM_STAGING] +=
            2 * (arena_charge(chunk * (size_t)rq->ranks * 4) + arena_charge(chunk * 4));
    }
    return on_disk(rq) ? plan_disk(rq, rq->disk_master ? 3 : 2, p) : FERRY_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Params mode's residency under a budget (schedule.c's rule): the weights
 * may fill the budget less every other byte and the gradients' room. All of
 * them when they fit (then exact); else the room itself, and as many groups
 * as it can hold, the smallest first (bounds). */
static ferry_status plan_residency(const engine_plan_request *rq, engine_memory_plan *p)
{
    uint64_t other = rq->embedder_bytes;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (c != FERRY_MEM_PARAMS)
            other += p->device_bytes[c];
    uint64_t cap = rq->device_budget > other ? rq->device_budget - other : 0;
    if (cap <= p->device_bytes[FERRY_MEM_PARAMS])
        return FERRY_OK; /* no room past the window */
    uint64_t *c = malloc((size_t)rq->ngroups * sizeof *c);
    if (!c)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "engine plan: out of host memory");
    uint64_t all = 0;
    for (int g = 0; g < rq->ngroups; g++)
        all += c[g] = arena_charge(plan_padded(rq, g) * p->act_size);
    qsort(c, (size_t)rq->ngroups, sizeof *c, cmp_u64);
    int fit = 0;
    for (uint64_t sum = 0; fit < rq->ngroups && sum + c[fit] <= cap; fit++)
        sum += c[fit];
    free(c);
    p->device_bytes[FERRY_MEM_PARAMS] = all <= cap ? all : cap;
    if (fit > p->device_weight_groups)
        p->device_weight_groups = fit;
    return FERRY_OK;
}

/* Params mode: the window of weights and of draining gradients. */
static ferry_status plan_window(const engine_plan_request *rq, engine_memory_plan *p)
{
    int wg = engine_weight_window(rq->prefetch_groups), gg = engine_drain_window(rq->prefetch_groups) + 2;
    p->device_weight_groups = wg < rq->ngroups ? wg : rq->ngroups;
    p->device_grad_groups = gg < rq->ngroups ? gg : rq->ngroups;
    uint64_t w = largest_of(rq, wg, p->act_size, true), g = largest(rq, gg, p->act_size),
             two = largest_of(rq, 2, p->act_size, true) + largest(rq, 2, p->act_size);
    if (w == UINT64_MAX || g == UINT64_MAX || two == UINT64_MAX)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "engine plan: out of host memory");
    p->device_bytes[FERRY_MEM_PARAMS] += w;
    p->device_bytes[FERRY_MEM_GRADS] += g;
    /* The schedule's out-of-memory paths (no prefetch, every drain waited
     * for, every other group evicted) still need two groups at once (one
     * held for the whole pass, one computing), weights and gradients each. */
    p->device_min_bytes = two;
    return rq->device_budget ? plan_residency(rq, p) : FERRY_OK;
}

ferry_status engine_plan_memory(const engine_plan_request *rq, engine_memory_plan *out)
{
    ferry_status st = out ? check_request(rq) : err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: out is NULL");
    if (st != FERRY_OK)
        return st;
    engine_memory_plan p;
    memset(&p, 0, sizeof p);
    ferry_dtype act = rq->dtype != FERRY_DTYPE_AUTO ? rq->dtype
                      : rq->backend == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
    p.act_size = dtype_size(act);
    p.device_weight_groups = p.device_grad_groups = rq->offload == FERRY_OFFLOAD_PARAMS ? 0 : rq->ngroups;
    if ((st = plan_setup(rq, &p)) != FERRY_OK)
        return st;
    if (rq->offload == FERRY_OFFLOAD_PARAMS && (st = plan_window(rq, &p)) != FERRY_OK)
        return st;
    if (rq->offload != FERRY_OFFLOAD_PARAMS)
        for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
            p.device_min_bytes += p.device_bytes[c];
    else
        for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
            p.device_min_bytes += c == FERRY_MEM_PARAMS || c == FERRY_MEM_GRADS ? 0 : p.device_bytes[c];
    *out = p;
    return FERRY_OK;
}
