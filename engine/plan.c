/* The engine's static memory plan: every device buffer with a place in
 * the step's schedule (the engine's own buffers, each group's layout
 * buffers, the fp32 sums, the reduce buffers, params mode's slots, the split
 * update's forced state, the embedder's declared bytes), each with its size
 * and lifetime, given an offset of one region by the static planner
 * (memplan.c); and the host pool's and the disk's counts, from the same
 * layout table setup allocates from (layout.c), charged with the
 * allocators' own rounding (arena_charge, pool_charge). Owns only
 * arithmetic; opens no backend. */
#include "engine/plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/units.h"
#include "engine/layout.h"
#include "offload/arena.h"
#include "offload/nvme.h"
#include "offload/pool.h"

static bool on_disk(const engine_plan_request *rq);

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
    if (rq->moments != FERRY_MOMENTS_F32 && rq->moments != FERRY_MOMENTS_BF16 && rq->moments != FERRY_MOMENTS_8BIT)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: moments form %d; f32, bf16 or 8bit", (int)rq->moments);
    if (rq->moments != FERRY_MOMENTS_F32 && (rq->offload == FERRY_OFFLOAD_NONE || rq->split_groups > 0))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine plan: moments %s are updated by the CPU: plan offload optimizer, params or nvme, "
                       "without a split (offload %s)",
                       ferry_moments_name(rq->moments), ferry_offload_name(rq->offload));
    if (rq->micro_batches < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: %d micro-batches per step", rq->micro_batches);
    if (rq->prefetch_groups < 0 || rq->prefetch_groups > 64)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: prefetch %d is outside 0..64", rq->prefetch_groups);
    if (rq->ranks < 0 || rq->ranks > 65536)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: %d ranks; plan for 1..65536", rq->ranks);
    if (rq->ranks > 1 && (rq->disk || rq->offload == FERRY_OFFLOAD_NVME))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: the NVMe tier trains alone, not with %d ranks "
                       "(each rank holds a part of the state in host memory instead)", rq->ranks);
    if (rq->split_groups < 0 || rq->split_groups > rq->ngroups ||
        (rq->split_groups > 0 && rq->offload != FERRY_OFFLOAD_OPTIMIZER))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: %d groups updated on the device; 0..%d, in "
                       "offload optimizer only", rq->split_groups, rq->ngroups);
    for (int g = 0; g < rq->ngroups; g++)
        if (rq->group_numel[g] == 0 || rq->group_numel[g] > ((size_t)1 << 40))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: group %d has %zu parameters, outside 1..2^40", g,
                           rq->group_numel[g]);
    return FERRY_OK;
}

/* Data parallelism in the partitioned modes (engine/dp.c): a rank's slot of
 * a group, and the device weights of a group (every rank's slot). */
static bool ranked(const engine_plan_request *rq) { return rq->ranks > 1 || rq->collective; }
static int world(const engine_plan_request *rq) { return rq->ranks > 1 ? rq->ranks : 1; }
static bool plan_partitioned(const engine_plan_request *rq) { return ranked(rq) && rq->offload != FERRY_OFFLOAD_NONE; }
static size_t plan_cap(const engine_plan_request *rq, int g) { return engine_part_cap(rq->group_numel[g], world(rq)); }
static size_t plan_padded(const engine_plan_request *rq, int g)
{
    return plan_partitioned(rq) ? plan_cap(rq, g) * (size_t)world(rq) : rq->group_numel[g];
}

/* The device side of a mode: offload nvme places it as optimizer mode does. */
static ferry_offload device_mode(const engine_plan_request *rq)
{
    return rq->offload == FERRY_OFFLOAD_NVME ? FERRY_OFFLOAD_OPTIMIZER : rq->offload;
}

static bool on_disk(const engine_plan_request *rq) { return rq->offload == FERRY_OFFLOAD_NVME || rq->disk; }

static bool accumulates(const engine_plan_request *rq)
{
    return rq->micro_batches > 1 || (ranked(rq) && device_mode(rq) == FERRY_OFFLOAD_NONE);
}

/* The NVMe tier: the store's file (its regions as offload/nvme_format.c
 * lays them out) and its window, charged as the pool charges it. */
static ferry_status plan_disk(const engine_plan_request *rq, int arrays, engine_memory_plan *p)
{
    nvme_form forms[ENGINE_DISK_ARRAYS]; /* the moments in their form, the master weights fp32 */
    engine_disk_forms(rq->moments, forms);
    size_t tile = nvme_tile_elems_for(rq->disk_window_bytes, (size_t)rq->disk_block_bytes, arrays);
    if (!tile)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: an NVMe window of %llu bytes cannot hold %d tiles of %d "
                       "arrays of 4 KiB", (unsigned long long)rq->disk_window_bytes, NVME_MIN_SLOTS, arrays);
    for (int g = 0; g < rq->ngroups; g++)
        p->disk_bytes += nvme_region_bytes_as(rq->group_numel[g], arrays, forms, tile);
    p->host_bytes[FERRY_MEM_NVME] +=
        nvme_window_charge(rq->disk_window_bytes, (size_t)rq->disk_block_bytes, arrays, p->disk_bytes);
    return FERRY_OK;
}

/* ---- the host pool ---- */

/* The upload window's ring, as engine/window.c allocates it. */
static size_t plan_window_bytes(const engine_plan_request *rq, size_t act_size)
{
    size_t largest = 0, per;
    int count;
    for (int g = 0; g < rq->ngroups; g++)
        largest = rq->group_numel[g] > largest ? rq->group_numel[g] : largest;
    engine_window_shape(rq->upload_window_chunks, rq->upload_window_chunk_bytes, act_size, largest, &per, &count);
    return per * act_size * (size_t)count;
}

static ferry_status plan_host(const engine_plan_request *rq, size_t act_size, engine_memory_plan *m)
{
    ferry_offload mode = device_mode(rq);
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX + 1];
    bool partitioned = plan_partitioned(rq);
    int nb = engine_group_buffers_partitioned(mode, act_size, partitioned, b);
    unsigned disk = engine_disk_buffers(b, nb, on_disk(rq), rq->disk_master);
    engine_buffers_moments(b, nb, rq->moments);
    if (engine_window_on(rq->upload_window, rq->moments, mode, on_disk(rq))) {
        engine_buffers_window(b, nb); /* the ring instead of the upload copies */
        m->host_bytes[FERRY_MEM_STAGING] += pool_charge(plan_window_bytes(rq, act_size));
    }
    if (accumulates(rq))
        b[nb++] = engine_accumulator_buffer(mode);
    for (int g = 0; g < rq->ngroups; g++) {
        size_t cap = partitioned ? plan_cap(rq, g) : rq->group_numel[g], padded = plan_padded(rq, g);
        for (int i = 0; i < nb; i++)
            if (!b[i].device && !(disk & (1u << i)) && b[i].elem_bytes)
                m->host_bytes[b[i].cat] +=
                    pool_charge(engine_buffer_bytes(&b[i], engine_buffer_elems(&b[i], partitioned, rq->group_numel[g], cap, padded)));
    }
    return on_disk(rq) ? plan_disk(rq, rq->disk_master ? 3 : 2, m) : FERRY_OK;
}

/* ---- the device region ---- */

static ferry_status add(engine_static_plan *p, engine_plan_kind kind, int group, int which, ferry_mem_category cat,
                        uint64_t bytes, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static ferry_status add(engine_static_plan *p, engine_plan_kind kind, int group, int which, ferry_mem_category cat,
                        uint64_t bytes, const char *fmt, ...)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        engine_planned *grown = realloc(p->items, (size_t)cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "engine plan: out of host memory");
        p->items = grown;
        p->cap = cap;
    }
    engine_planned *x = &p->items[p->n++];
    memset(x, 0, sizeof *x);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->name, sizeof x->name, fmt, ap);
    va_end(ap);
    x->b = (memplan_buffer){NULL, cat, arena_charge((size_t)bytes), 0, MEMPLAN_FOREVER, 0};
    x->kind = kind;
    x->group = group;
    x->which = which;
    return FERRY_OK;
}

/* Params mode's size classes: the groups whose buffers of `elem_bytes`
 * per element (`padded`: the device weights' elements) charge alike. */
static ferry_status classes_of(const engine_plan_request *rq, size_t elem, bool padded, engine_slot_class **out,
                               int *n, int **class_of)
{
    *out = calloc((size_t)rq->ngroups, sizeof **out);
    *class_of = calloc((size_t)rq->ngroups, sizeof **class_of);
    if (!*out || !*class_of)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "engine plan: out of host memory");
    *n = 0;
    for (int g = 0; g < rq->ngroups; g++) {
        uint64_t bytes = arena_charge((padded ? plan_padded(rq, g) : rq->group_numel[g]) * elem);
        int c = 0;
        while (c < *n && (*out)[c].bytes != bytes)
            c++;
        if (c == *n)
            (*out)[(*n)++].bytes = bytes;
        (*out)[c].groups++;
        (*class_of)[g] = c;
    }
    return FERRY_OK;
}

/* Slots per class for a fetch-ahead of `depth`: the weights' window and
 * the drains in flight (layout.c), never more than the class's groups. */
static void window_slots(engine_static_plan *p, int depth)
{
    int w = engine_weight_window(depth), g = engine_drain_window(depth) + 2;
    for (int c = 0; c < p->nwclass; c++)
        p->wclass[c].slots = w < p->wclass[c].groups ? w : p->wclass[c].groups;
    for (int c = 0; c < p->ngclass; c++)
        p->gclass[c].slots = g < p->gclass[c].groups ? g : p->gclass[c].groups;
}

static uint64_t slot_bytes(const engine_static_plan *p)
{
    uint64_t sum = 0;
    for (int c = 0; c < p->nwclass; c++)
        sum += (uint64_t)p->wclass[c].slots * p->wclass[c].bytes;
    for (int c = 0; c < p->ngclass; c++)
        sum += (uint64_t)p->gclass[c].slots * p->gclass[c].bytes;
    return sum;
}

uint64_t engine_plan_keep_weights(engine_slot_class *classes, int n, uint64_t room)
{
    uint64_t all = 0;
    for (int c = 0; c < n; c++)
        all += (uint64_t)(classes[c].groups - classes[c].slots) * classes[c].bytes;
    if (all <= room) {
        for (int c = 0; c < n; c++)
            classes[c].slots = classes[c].groups;
        return all;
    }
    uint64_t taken = 0;
    for (;;) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            const engine_slot_class *k = &classes[c];
            if (k->slots < k->groups && k->bytes <= room - taken &&
                (best < 0 || k->groups - k->slots > classes[best].groups - classes[best].slots))
                best = c;
        }
        if (best < 0)
            return taken;
        classes[best].slots++;
        taken += classes[best].bytes;
    }
}

static const char *group_name(const engine_plan_request *rq, int g, char *buf, size_t cap)
{
    if (rq->group_names && rq->group_names[g])
        snprintf(buf, cap, "%s", rq->group_names[g]);
    else
        snprintf(buf, cap, "group %d", g);
    return buf;
}

/* Every device buffer but params mode's slots, in the order setup places them. */
static ferry_status plan_fixed(const engine_plan_request *rq, size_t act_size, engine_static_plan *p)
{
    char gname[ENGINE_NAME_MAX];
    ferry_offload mode = device_mode(rq);
    engine_global_buffer gb[ENGINE_GLOBAL_BUFFERS_MAX];
    int ng = engine_global_buffers(rq->backend, mode, rq->ngroups, gb);
    ferry_status st = FERRY_OK;
    for (int i = 0; i < ng && st == FERRY_OK; i++)
        st = add(p, PLAN_GLOBAL, -1, gb[i].id, gb[i].cat, gb[i].bytes, "%s", gb[i].what);
    engine_buffer b[ENGINE_GROUP_BUFFERS_MAX];
    bool partitioned = plan_partitioned(rq);
    int nb = engine_group_buffers_partitioned(mode, act_size, partitioned, b);
    engine_buffer acc = engine_accumulator_buffer(mode);
    size_t most_cap = 0;
    for (int g = 0; g < rq->ngroups && st == FERRY_OK; g++) {
        size_t cap = partitioned ? plan_cap(rq, g) : rq->group_numel[g], padded = plan_padded(rq, g);
        most_cap = cap > most_cap ? cap : most_cap;
        for (int i = 0; i < nb && st == FERRY_OK && mode != FERRY_OFFLOAD_PARAMS; i++)
            if (b[i].device)
                st = add(p, PLAN_GROUP, g, i, b[i].cat,
                         engine_buffer_elems(&b[i], partitioned, rq->group_numel[g], cap, padded) * b[i].elem_bytes,
                         "%s %s", group_name(rq, g, gname, sizeof gname), b[i].what);
        if (st == FERRY_OK && acc.device && accumulates(rq))
            st = add(p, PLAN_ACC, g, 0, acc.cat, rq->group_numel[g] * acc.elem_bytes, "%s %s",
                     group_name(rq, g, gname, sizeof gname), acc.what);
    }
    if (st == FERRY_OK && partitioned) {
        size_t chunk = engine_reduce_chunk(world(rq), most_cap);
        for (int k = 0; k < 2 && st == FERRY_OK; k++)
            if ((st = add(p, PLAN_REDUCE, -1, 2 * k, FERRY_MEM_STAGING, chunk * (size_t)world(rq) * 4,
                          "gradients to reduce (fp32)")) == FERRY_OK)
                st = add(p, PLAN_REDUCE, -1, 2 * k + 1, FERRY_MEM_STAGING, chunk * 4, "reduced gradients (fp32)");
    }
    static const char *const split_what[4] = {"master", "adam m", "adam v", "grad sum"};
    for (int g = 0; g < rq->split_groups && st == FERRY_OK; g++)
        for (int k = 0; k < (accumulates(rq) ? 4 : 3) && st == FERRY_OK; k++)
            st = add(p, PLAN_SPLIT, g, k, FERRY_MEM_OPTIMIZER, rq->group_numel[g] * sizeof(float), "%s device %s",
                     group_name(rq, g, gname, sizeof gname), split_what[k]);
    if (st == FERRY_OK && rq->embedder_bytes)
        st = add(p, PLAN_EMBEDDER, -1, 0, FERRY_MEM_ACTIVATIONS, rq->embedder_bytes, "the embedder's activations");
    return st;
}

/* A class's name: its first group's ("weights slot 1 of 'block 0' and its kind"). */
static const char *class_name(const engine_plan_request *rq, const int *class_of, int c, char *buf, size_t cap)
{
    int g = 0;
    while (g < rq->ngroups - 1 && class_of[g] != c)
        g++;
    return group_name(rq, g, buf, cap);
}

static ferry_status plan_slots(const engine_plan_request *rq, engine_static_plan *p)
{
    ferry_status st = FERRY_OK;
    char name[ENGINE_NAME_MAX];
    for (int c = 0; c < p->nwclass && st == FERRY_OK; c++)
        for (int k = 0; k < p->wclass[c].slots && st == FERRY_OK; k++)
            st = add(p, PLAN_WSLOT, c, k, FERRY_MEM_PARAMS, p->wclass[c].bytes, "weights slot %d of '%s' and its kind",
                     k, class_name(rq, p->wclass_of, c, name, sizeof name));
    for (int c = 0; c < p->ngclass && st == FERRY_OK; c++)
        for (int k = 0; k < p->gclass[c].slots && st == FERRY_OK; k++)
            st = add(p, PLAN_GSLOT, c, k, FERRY_MEM_GRADS, p->gclass[c].bytes, "grads slot %d of '%s' and its kind",
                     k, class_name(rq, p->gclass_of, c, name, sizeof name));
    return st;
}

static uint64_t fixed_bytes(const engine_static_plan *p)
{
    uint64_t sum = 0;
    for (int i = 0; i < p->n; i++)
        sum += p->items[i].b.bytes;
    return sum;
}

/* Params mode: the deepest fetch-ahead whose window fits the budget beside
 * the fixed buffers (down to none), then the weights kept in what is left
 * when the embedder said what it takes. */
static void plan_params(const engine_plan_request *rq, engine_static_plan *p, engine_memory_plan *m)
{
    uint64_t fixed = fixed_bytes(p);
    p->depth = rq->prefetch_groups;
    window_slots(p, p->depth);
    while (rq->device_budget && p->depth > 0 && fixed + slot_bytes(p) > rq->device_budget)
        window_slots(p, --p->depth);
    engine_static_plan floor = *p;
    window_slots(&floor, 0);
    m->device_min_bytes = fixed + slot_bytes(&floor);
    window_slots(p, p->depth); /* floor shared the class arrays */
    uint64_t used = fixed + slot_bytes(p);
    if (rq->device_budget && rq->embedder_bytes && used < rq->device_budget)
        engine_plan_keep_weights(p->wclass, p->nwclass, rq->device_budget - used);
}

ferry_status engine_static_plan_make(const engine_plan_request *rq, engine_static_plan *out)
{
    memset(out, 0, sizeof *out);
    ferry_status st = check_request(rq);
    if (st != FERRY_OK)
        return st;
    engine_memory_plan *m = &out->counts;
    ferry_dtype act = rq->dtype != FERRY_DTYPE_AUTO ? rq->dtype
                      : rq->backend == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
    m->act_size = dtype_size(act);
    bool params = rq->offload == FERRY_OFFLOAD_PARAMS;
    if ((st = plan_host(rq, m->act_size, m)) == FERRY_OK)
        st = plan_fixed(rq, m->act_size, out);
    if (st == FERRY_OK && params &&
        (st = classes_of(rq, m->act_size, true, &out->wclass, &out->nwclass, &out->wclass_of)) == FERRY_OK &&
        (st = classes_of(rq, m->act_size, false, &out->gclass, &out->ngclass, &out->gclass_of)) == FERRY_OK) {
        plan_params(rq, out, m);
        st = plan_slots(rq, out);
    }
    memplan_buffer *b = st == FERRY_OK ? malloc((size_t)(out->n ? out->n : 1) * sizeof *b) : NULL;
    if (st == FERRY_OK && !b)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "engine plan: out of host memory");
    if (st == FERRY_OK) {
        for (int i = 0; i < out->n; i++) {
            out->items[i].b.name = out->items[i].name;
            b[i] = out->items[i].b;
        }
        st = memplan_assign(b, out->n, &out->region_bytes);
        for (int i = 0; i < out->n && st == FERRY_OK; i++) {
            out->items[i].b = b[i];
            m->device_bytes[b[i].cat] += b[i].bytes;
        }
    }
    free(b);
    if (st != FERRY_OK) {
        engine_static_plan_free(out);
        return st;
    }
    m->region_bytes = out->region_bytes;
    m->planned_buffers = out->n;
    m->prefetch_depth = params ? out->depth : 0;
    if (!params)
        m->device_min_bytes = out->region_bytes;
    m->device_weight_groups = m->device_grad_groups = params ? 0 : rq->ngroups;
    for (int c = 0; params && c < out->nwclass; c++)
        m->device_weight_groups += out->wclass[c].slots;
    for (int c = 0; params && c < out->ngclass; c++)
        m->device_grad_groups += out->gclass[c].slots;
    return FERRY_OK;
}

void engine_static_plan_free(engine_static_plan *p)
{
    free(p->items);
    free(p->wclass);
    free(p->gclass);
    free(p->wclass_of);
    free(p->gclass_of);
    memset(p, 0, sizeof *p);
}

const engine_planned *engine_static_plan_find(const engine_static_plan *p, engine_plan_kind kind, int group,
                                              int which)
{
    for (int i = 0; i < p->n; i++)
        if (p->items[i].kind == kind && p->items[i].group == group && p->items[i].which == which)
            return &p->items[i];
    return NULL;
}

void engine_static_plan_words(const engine_static_plan *p, char *buf, size_t cap)
{
    char parts[400] = "", b[32];
    size_t len = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (p->counts.device_bytes[c] && len < sizeof parts)
            len += (size_t)snprintf(parts + len, sizeof parts - len, "%s%s %s", len ? ", " : "",
                                    ferry_mem_category_name((ferry_mem_category)c),
                                    units_fmt_bytes(b, sizeof b, p->counts.device_bytes[c]));
    const engine_planned *big = NULL;
    for (int i = 0; i < p->n; i++)
        if (!big || p->items[i].b.bytes > big->b.bytes)
            big = &p->items[i];
    char lb[32];
    snprintf(buf, cap, "the memory plan of %d buffers (%s%s%s%s%s)", p->n, parts, big ? "; largest '" : "",
             big ? big->name : "", big ? "' " : "", big ? units_fmt_bytes(lb, sizeof lb, big->b.bytes) : "");
}

ferry_status engine_plan_memory(const engine_plan_request *rq, engine_memory_plan *out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan: out is NULL");
    engine_static_plan p;
    ferry_status st = engine_static_plan_make(rq, &p);
    if (st != FERRY_OK)
        return st;
    *out = p.counts;
    engine_static_plan_free(&p);
    return FERRY_OK;
}

static int by_offset(const void *a, const void *b)
{
    const engine_layout_entry *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

ferry_status engine_plan_layout(const engine_plan_request *rq, engine_layout_entry **out, int *n, uint64_t *region)
{
    if (!out || !n || !region)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine plan layout: NULL argument");
    *out = NULL;
    *n = 0;
    engine_static_plan p;
    ferry_status st = engine_static_plan_make(rq, &p);
    if (st != FERRY_OK)
        return st;
    engine_layout_entry *e = calloc((size_t)(p.n ? p.n : 1), sizeof *e);
    if (!e) {
        engine_static_plan_free(&p);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "engine plan layout: out of host memory");
    }
    for (int i = 0; i < p.n; i++) {
        const engine_planned *x = &p.items[i];
        e[i] = (engine_layout_entry){.cat = x->b.cat, .offset = x->b.offset, .bytes = x->b.bytes,
                                     .start = x->b.start, .end = x->b.end, .embedder = x->kind == PLAN_EMBEDDER};
        snprintf(e[i].name, sizeof e[i].name, "%s", x->name);
    }
    qsort(e, (size_t)p.n, sizeof *e, by_offset);
    *out = e;
    *n = p.n;
    *region = p.region_bytes;
    engine_static_plan_free(&p);
    return FERRY_OK;
}
