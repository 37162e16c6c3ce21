/* The device arena: the planned region (one buffer, each planned buffer at
 * its offset) and the dynamic region (chunks from backend_alloc carved by
 * the span heap) under one hard budget, with per-category accounting for
 * stats and for messages that explain a refusal. The categories' names are
 * offload/category.c's. */
#include "offload/arena.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/units.h"

#define CHUNK_DEFAULT ((uint64_t)256 << 20)

/* A live planned buffer. */
typedef struct planned {
    heap_live live;
    uint64_t offset;
} planned;

struct arena {
    pthread_mutex_t mu;
    backend *be;
    heap *heap;
    uint64_t budget, chunk;
    uint64_t cur[FERRY_MEM_CATEGORY_COUNT], peak[FERRY_MEM_CATEGORY_COUNT];
    uint64_t total_peak;
    trace *trace;
    /* the planned region and its live buffers */
    char *region;
    uint64_t region_bytes;
    planned *placed;
    size_t nplaced, cap_placed;
    uint64_t placed_bytes;
};

ferry_status arena_create(backend *be, const arena_config *cfg, arena **out)
{
    if (!be || !cfg || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "arena_create: NULL backend, config or out");
    *out = NULL;
    uint64_t budget = cfg->budget_bytes;
    if (budget == 0) {
        uint64_t free_b = 0, total_b = 0;
        ferry_status st = backend_mem_info(be, &free_b, &total_b);
        if (st != FERRY_OK)
            return err_wrap(st, "device arena: no budget given and the device's free memory is unknown");
        budget = free_b;
    }
    budget &= ~(uint64_t)(ARENA_ALIGN - 1);
    if (budget == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "device arena: a budget of %llu bytes holds nothing; set device_budget_bytes to at "
                       "least 256 bytes, or to 0 for what the device has free",
                       (unsigned long long)cfg->budget_bytes);
    arena *a = calloc(1, sizeof *a);
    if (!a)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "device arena: cannot allocate its bookkeeping");
    ferry_status st = heap_create(ARENA_ALIGN, &a->heap);
    if (st != FERRY_OK) {
        free(a);
        return st;
    }
    a->be = be;
    a->budget = budget;
    a->chunk = cfg->chunk_bytes ? (cfg->chunk_bytes + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1)
                                : CHUNK_DEFAULT;
    a->trace = cfg->trace;
    pthread_mutex_init(&a->mu, NULL);
    trace_limit(a->trace, TRACE_POOL_DEVICE, budget);
    *out = a;
    return FERRY_OK;
}

static uint64_t a_reserved(const arena *a)
{
    heap_usage u;
    heap_usage_get(a->heap, &u);
    return u.reserved + a->region_bytes;
}

static void release_chunk(void *ctx, void *base, size_t bytes, void *cookie)
{
    (void)bytes;
    (void)cookie;
    arena *a = ctx;
    backend_free(a->be, base);
}

void arena_destroy(arena *a)
{
    if (!a)
        return;
    heap_release_regions(a->heap, false, release_chunk, a);
    heap_destroy(a->heap);
    if (a->region)
        backend_free(a->be, a->region);
    free(a->placed);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* Up to `max` live allocations of both regions, largest first. */
static size_t largest(const arena *a, heap_live *out, size_t max)
{
    size_t n = heap_largest(a->heap, out, max);
    for (size_t p = 0; p < a->nplaced; p++) {
        const heap_live *x = &a->placed[p].live;
        size_t at = n;
        while (at > 0 && out[at - 1].bytes < x->bytes)
            at--;
        if (at >= max)
            continue;
        size_t keep = n < max ? n : max - 1;
        memmove(out + at + 1, out + at, (keep - at) * sizeof *out);
        out[at] = *x;
        n = keep + 1;
    }
    return n;
}

/* "device budget 24.0 GiB exhausted: activations 'block 17 attn' asked
 * 512.0 MiB with 23.8 GiB in use (params 3.1 GiB, ...); <what to do>" */
static ferry_status refuse(arena *a, size_t bytes, ferry_mem_category cat, const char *name,
                           const char *why)
{
    char bud[32], ask[32], use[32], b[32];
    char parts[400] = "", big[300] = "";
    size_t len = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++) {
        if (!a->cur[c] || len >= sizeof parts)
            continue;
        len += (size_t)snprintf(parts + len, sizeof parts - len, "%s%s %s", len ? ", " : "",
                                ferry_mem_category_name((ferry_mem_category)c),
                                units_fmt_bytes(b, sizeof b, a->cur[c]));
    }
    heap_live top[3];
    size_t n = largest(a, top, 3), blen = 0;
    for (size_t i = 0; i < n && blen < sizeof big; i++)
        blen += (size_t)snprintf(big + blen, sizeof big - blen, "%s'%s' %s", i ? ", " : "; largest: ",
                                 top[i].name, units_fmt_bytes(b, sizeof b, top[i].bytes));
    heap_usage u;
    heap_usage_get(a->heap, &u);
    u.in_use += a->placed_bytes;
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "device budget %s exhausted%s: %s '%s' asked %s with %s in use (%s)%s; make the "
                   "activations smaller (a smaller batch, or activations recomputed in backward), use offload "
                   "FERRY_OFFLOAD_PARAMS, or raise device_budget_bytes",
                   units_fmt_bytes(bud, sizeof bud, a->budget), why, ferry_mem_category_name(cat), name,
                   units_fmt_bytes(ask, sizeof ask, bytes), units_fmt_bytes(use, sizeof use, u.in_use),
                   len ? parts : "nothing", big);
}

/* Adds a chunk that fits `need`: min(budget - reserved, max(need, chunk)).
 * Empty chunks are given back first only when that is what makes it fit, so
 * a refused request changes nothing. */
static ferry_status grow(arena *a, size_t need, size_t bytes, ferry_mem_category cat, const char *name)
{
    heap_usage u;
    heap_usage_get(a->heap, &u);
    uint64_t room = a->budget - u.reserved - a->region_bytes;
    if (need > room) {
        if (need > room + u.empty_regions_bytes) {
            char why[160] = "", f[32], l[32];
            if (u.in_use + a->region_bytes + need <= a->budget) /* the bytes exist, but not in one piece */
                snprintf(why, sizeof why, " by fragmentation (%s free in reserved chunks, largest span %s)",
                         units_fmt_bytes(f, sizeof f, u.free), units_fmt_bytes(l, sizeof l, u.largest_free));
            return refuse(a, bytes, cat, name, why);
        }
        heap_release_regions(a->heap, true, release_chunk, a);
        room = a->budget - a_reserved(a);
    }
    uint64_t size = need > a->chunk ? need : a->chunk;
    if (size > room)
        size = room;
    void *base = NULL;
    ferry_status st = backend_alloc(a->be, (size_t)size, &base);
    if (st != FERRY_OK && size > need) { /* the device may hold less than the budget says */
        size = need;
        st = backend_alloc(a->be, (size_t)size, &base);
    }
    if (st != FERRY_OK)
        return err_wrap(FERRY_ERR_OUT_OF_MEMORY,
                        "device arena: %s '%s' asked %zu bytes within the budget, but the device "
                        "refused a chunk of %llu bytes",
                        ferry_mem_category_name(cat), name, bytes, (unsigned long long)size);
    st = heap_add_region(a->heap, base, (size_t)size, NULL);
    if (st != FERRY_OK) {
        backend_free(a->be, base);
        return st;
    }
    trace_reserve(a->trace, TRACE_POOL_DEVICE, a_reserved(a));
    return FERRY_OK;
}

uint64_t arena_charge(size_t bytes) { return heap_charge_for(ARENA_ALIGN, bytes); }

/* Counts a new allocation of `charge` bytes (under the lock). */
static void count_in(arena *a, ferry_mem_category category, uint64_t charge)
{
    a->cur[category] += charge;
    if (a->cur[category] > a->peak[category])
        a->peak[category] = a->cur[category];
    uint64_t total = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        total += a->cur[c];
    if (total > a->total_peak)
        a->total_peak = total;
}

ferry_status arena_alloc(arena *a, size_t bytes, ferry_mem_category category, const char *name,
                         void **out)
{
    if (!a || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "arena_alloc: NULL arena or out");
    *out = NULL;
    if ((unsigned)category >= FERRY_MEM_CATEGORY_COUNT)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "device arena: category %d is not a ferry_mem_category",
                       (int)category);
    if (!name)
        name = "";
    pthread_mutex_lock(&a->mu);
    ferry_status st;
    void *ptr = NULL;
    uint64_t charge = bytes > a->budget ? a->budget + ARENA_ALIGN : arena_charge(bytes);
    if (charge > a->budget - a->region_bytes) {
        st = refuse(a, bytes, category, name, "");
    } else {
        st = heap_alloc(a->heap, bytes, ARENA_ALIGN, category, name, &ptr);
        if (st == FERRY_OK && !ptr) {
            st = grow(a, (size_t)charge, bytes, category, name);
            if (st == FERRY_OK)
                st = heap_alloc(a->heap, bytes, ARENA_ALIGN, category, name, &ptr);
            if (st == FERRY_OK && !ptr) /* cannot happen: the new chunk fits */
                st = err_set(FERRY_ERR_OUT_OF_MEMORY, "device arena: no span fits %zu bytes after growing", bytes);
        }
    }
    if (st == FERRY_OK) {
        count_in(a, category, charge);
        trace_alloc(a->trace, TRACE_POOL_DEVICE, category, name, charge, ptr);
        *out = ptr;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

ferry_status arena_free(arena *a, void *ptr)
{
    if (!a)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "arena_free: NULL arena");
    if (!ptr)
        return FERRY_OK;
    heap_live f;
    pthread_mutex_lock(&a->mu);
    if (a->region && (char *)ptr >= a->region && (char *)ptr < a->region + a->region_bytes) {
        for (size_t p = 0; p < a->nplaced; p++) {
            if (a->placed[p].live.ptr != ptr)
                continue;
            f = a->placed[p].live;
            a->placed[p] = a->placed[--a->nplaced];
            a->placed_bytes -= f.bytes;
            a->cur[f.category] -= f.bytes;
            trace_free(a->trace, TRACE_POOL_DEVICE, f.category, f.name, f.bytes, ptr);
            pthread_mutex_unlock(&a->mu);
            return FERRY_OK;
        }
        pthread_mutex_unlock(&a->mu);
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "device arena: cannot free %p: it lies in the planned region but "
                                                   "starts no planned buffer", ptr);
    }
    ferry_status st = heap_free(a->heap, ptr, &f);
    if (st == FERRY_OK) {
        a->cur[f.category] -= f.bytes;
        trace_free(a->trace, TRACE_POOL_DEVICE, f.category, f.name, f.bytes, ptr);
    }
    pthread_mutex_unlock(&a->mu);
    if (st != FERRY_OK)
        return err_wrap(st, "device arena: cannot free");
    return FERRY_OK;
}

void arena_stats(arena *a, ferry_memory_stats *st)
{
    heap_usage u;
    pthread_mutex_lock(&a->mu);
    heap_usage_get(a->heap, &u);
    st->device_budget_bytes = a->budget;
    st->device_reserved_bytes = u.reserved + a->region_bytes;
    for (int c = 0; c < FERRY_MEM_CATEGORY_SLOTS; c++) {
        st->device_current_bytes[c] = c < FERRY_MEM_CATEGORY_COUNT ? a->cur[c] : 0;
        st->device_peak_bytes[c] = c < FERRY_MEM_CATEGORY_COUNT ? a->peak[c] : 0;
    }
    st->device_total_current_bytes = u.in_use + a->placed_bytes;
    st->device_total_peak_bytes = a->total_peak;
    st->device_fragmentation = u.free ? 1.0 - (double)u.largest_free / (double)u.free : 0.0;
    pthread_mutex_unlock(&a->mu);
}

size_t arena_largest(arena *a, heap_live *out, size_t max)
{
    pthread_mutex_lock(&a->mu);
    size_t n = largest(a, out, max);
    pthread_mutex_unlock(&a->mu);
    return n;
}

uint64_t arena_trim(arena *a)
{
    pthread_mutex_lock(&a->mu);
    uint64_t r = heap_release_regions(a->heap, true, release_chunk, a);
    if (r)
        trace_reserve(a->trace, TRACE_POOL_DEVICE, a_reserved(a));
    pthread_mutex_unlock(&a->mu);
    return r;
}

uint64_t arena_budget(const arena *a) { return a->budget; }
uint64_t arena_region_bytes(const arena *a) { return a->region_bytes; }

ferry_status arena_plan_region(arena *a, uint64_t bytes, const char *plan)
{
    if (!a || bytes % ARENA_ALIGN)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "arena_plan_region: NULL arena, or %llu bytes not a multiple of "
                       "%u", (unsigned long long)bytes, ARENA_ALIGN);
    if (bytes == 0)
        return FERRY_OK;
    pthread_mutex_lock(&a->mu);
    ferry_status st = FERRY_OK;
    uint64_t reserved = a_reserved(a);
    if (a->region) {
        st = err_set(FERRY_ERR_STATE, "device arena: the planned region is already there");
    } else if (bytes > a->budget || reserved > a->budget - bytes) {
        char bud[32], need[32], res[32] = "";
        if (reserved)
            snprintf(res, sizeof res, " beside the %s reserved already", units_fmt_bytes(bud, sizeof bud, reserved));
        st = err_set(FERRY_ERR_OUT_OF_MEMORY,
                     "device budget %s is too small for the memory plan: %s needs %s%s; make the activations "
                     "smaller (a smaller batch, or activations recomputed in backward), use offload "
                     "FERRY_OFFLOAD_PARAMS, or raise device_budget_bytes",
                     units_fmt_bytes(bud, sizeof bud, a->budget), plan ? plan : "the plan",
                     units_fmt_bytes(need, sizeof need, bytes), res);
    } else {
        void *base = NULL;
        st = backend_alloc(a->be, (size_t)bytes, &base);
        if (st == FERRY_OK) {
            a->region = base;
            a->region_bytes = bytes;
            trace_reserve(a->trace, TRACE_POOL_DEVICE, a_reserved(a));
            trace_region(a->trace, base, bytes); /* the planned buffers are traced at their offsets from it */
        } else {
            st = err_wrap(FERRY_ERR_OUT_OF_MEMORY, "device arena: the memory plan's region of %llu bytes is within "
                          "the budget, but the device refused it", (unsigned long long)bytes);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

ferry_status arena_place(arena *a, uint64_t offset, size_t bytes, ferry_mem_category category, const char *name,
                         void **out)
{
    if (!a || !out || (unsigned)category >= FERRY_MEM_CATEGORY_COUNT)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "arena_place: NULL arena or out, or a bad category");
    *out = NULL;
    uint64_t charge = arena_charge(bytes);
    pthread_mutex_lock(&a->mu);
    ferry_status st = FERRY_OK;
    if (!a->region || offset % ARENA_ALIGN || offset > a->region_bytes || charge > a->region_bytes - offset)
        st = err_set(FERRY_ERR_INVALID_ARGUMENT, "device arena: '%s' planned at [%llu, +%llu) lies outside the "
                     "planned region of %llu bytes: the plan is wrong", name ? name : "",
                     (unsigned long long)offset, (unsigned long long)charge, (unsigned long long)a->region_bytes);
    for (size_t p = 0; p < a->nplaced && st == FERRY_OK; p++) {
        const planned *q = &a->placed[p];
        if (offset < q->offset + q->live.bytes && q->offset < offset + charge)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "device arena: '%s' planned at [%llu, +%llu) overlaps '%s', "
                         "which is alive there: the plan is wrong", name ? name : "", (unsigned long long)offset,
                         (unsigned long long)charge, q->live.name);
    }
    if (st == FERRY_OK && a->nplaced == a->cap_placed) {
        size_t cap = a->cap_placed ? 2 * a->cap_placed : 64;
        planned *grown = realloc(a->placed, cap * sizeof *grown);
        if (!grown)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "device arena: out of host memory for its bookkeeping");
        else {
            a->placed = grown;
            a->cap_placed = cap;
        }
    }
    if (st == FERRY_OK) {
        planned *q = &a->placed[a->nplaced++];
        memset(q, 0, sizeof *q);
        q->offset = offset;
        q->live.ptr = a->region + offset;
        q->live.bytes = charge;
        q->live.category = category;
        snprintf(q->live.name, sizeof q->live.name, "%s", name ? name : "");
        a->placed_bytes += charge;
        count_in(a, category, charge);
        trace_alloc(a->trace, TRACE_POOL_DEVICE, category, q->live.name, charge, q->live.ptr);
        *out = q->live.ptr;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}
