/* The pinned host pool: large slabs obtained once from the OS (mmap, huge
 * pages where allowed, placed on a NUMA node, page-locked where the limits
 * allow) and sub-allocated to the engine's host state: fp32 master weights,
 * Adam moments, gradients waiting for the update, staging.
 *
 * Also owns the span heap (pool_heap_*), the best-fit sub-allocator with
 * coalescing that both this pool and the device arena (offload/arena.c) run
 * over their big regions. It does not own device memory or transfers.
 *
 * Threads: every pool_ function may be called from any thread; a pool is
 * guarded by one mutex. The pool_heap_ functions are not locked: their owner
 * holds its own lock. */
#ifndef FERRY_OFFLOAD_POOL_H
#define FERRY_OFFLOAD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "kernels/backend.h"
#include "offload/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the span heap ---- */

#define POOL_HEAP_NAME_MAX 64 /* allocation names are copied, cut to 63 bytes */

typedef struct pool_heap pool_heap;

/* One live allocation, as the heap reports it. */
typedef struct pool_heap_live {
    void *ptr;
    uint64_t bytes; /* charged bytes (rounded to the heap's granule) */
    ferry_mem_category category;
    char name[POOL_HEAP_NAME_MAX];
} pool_heap_live;

typedef struct pool_heap_usage {
    uint64_t reserved;      /* bytes of all regions */
    uint64_t in_use;        /* bytes of live allocations */
    uint64_t free;          /* reserved - in_use */
    uint64_t largest_free;  /* largest free span */
    uint64_t empty_regions_bytes; /* bytes of regions holding no live allocation */
    size_t live;            /* live allocations */
    size_t regions;
} pool_heap_usage;

/* `granule` (a power of two) is the minimum alignment and the unit sizes are
 * rounded up to. */
ferry_status pool_heap_create(size_t granule, pool_heap **out);
/* Frees the heap's bookkeeping only; the regions' memory is the owner's
 * (release it first with pool_heap_release_regions). NULL is fine. */
void pool_heap_destroy(pool_heap *h);
/* Adds [base, base+bytes) as free space; `cookie` comes back on release.
 * base and bytes must be multiples of the granule. */
ferry_status pool_heap_add_region(pool_heap *h, void *base, size_t bytes, void *cookie);
/* Best fit over all free spans. *out = NULL (and FERRY_OK) when nothing
 * fits: the owner then grows. `align` is a power of two (0 = the granule). */
ferry_status pool_heap_alloc(pool_heap *h, size_t bytes, size_t align, ferry_mem_category category,
                             const char *name, void **out);
/* Frees a live allocation and coalesces it with free neighbours; *freed
 * (optional) receives what it was. FERRY_ERR_INVALID_ARGUMENT for a pointer
 * that is not a live allocation's start (changes nothing). */
ferry_status pool_heap_free(pool_heap *h, void *ptr, pool_heap_live *freed);
/* Charged size of `bytes` (what pool_heap_alloc will count). */
uint64_t pool_heap_charge(const pool_heap *h, size_t bytes);
void pool_heap_usage_get(const pool_heap *h, pool_heap_usage *u);
/* Copies up to `max` live allocations, largest first; returns how many. */
size_t pool_heap_largest(const pool_heap *h, pool_heap_live *out, size_t max);
/* Removes regions (all of them, or only those without live allocations) and
 * calls release(ctx, base, bytes, cookie) for each. Returns bytes removed. */
uint64_t pool_heap_release_regions(pool_heap *h, bool only_empty,
                                   void (*release)(void *ctx, void *base, size_t bytes, void *cookie),
                                   void *ctx);

/* ---- the pinned host pool ---- */

typedef enum pool_pin {
    POOL_PIN_TRY = 0, /* page-lock; stay unpinned (and say so once) where refused */
    POOL_PIN_NEVER,   /* plain pageable memory, no warning */
} pool_pin;

typedef struct pool_config {
    uint64_t limit_bytes; /* the pinned memory budget on reserved bytes; 0 = none */
    size_t slab_bytes;    /* growth step; 0 = 256 MiB; rounded to 2 MiB (4 KiB below 2 MiB) */
    int numa_node;        /* hwloc logical NUMA node for the slabs; -1 = first touch */
    pool_pin pin;
    backend *be;          /* with a cuda backend, slabs are registered with it
                             (cudaHostRegister); NULL or host: mlock */
    trace *trace;         /* NULL = no trace */
} pool_config;

#define POOL_CONFIG_INIT { 0, 0, -1, POOL_PIN_TRY, NULL, NULL }

/* Every block is aligned to at least POOL_MIN_ALIGN (O_DIRECT; so also 64 B
 * for SIMD) and its size is rounded up to it. */
#define POOL_MIN_ALIGN 4096u

typedef struct pool pool;

/* Creates an empty pool (no memory is obtained until the first alloc).
 * FERRY_ERR_INVALID_ARGUMENT for a NUMA node this machine lacks. */
ferry_status pool_create(const pool_config *cfg, pool **out);
/* Unmaps every slab, live allocations included. NULL is fine. */
void pool_destroy(pool *p);
/* `align`: 0 = POOL_MIN_ALIGN, else a power of two (raised to POOL_MIN_ALIGN).
 * FERRY_ERR_OUT_OF_MEMORY past the limit or when the OS refuses, with a
 * message naming the category, the name, the bytes and the limit. `name` is
 * copied. 0 bytes gets one granule. */
ferry_status pool_alloc(pool *p, size_t bytes, size_t align, ferry_mem_category category,
                        const char *name, void **out);
/* FERRY_ERR_INVALID_ARGUMENT for a pointer this pool did not hand out (or
 * already freed); NULL is a no-op. */
ferry_status pool_free(pool *p, void *ptr);
/* Fills the host_ fields of *st. */
void pool_stats(pool *p, ferry_memory_stats *st);
/* Bytes in use now by category. */
uint64_t pool_category_bytes(pool *p, ferry_mem_category category);
/* Why memory is unpinned ("" when every slab is pinned or none exists);
 * the same sentence is printed once per process to stderr. Copied into buf. */
const char *pool_pinning_note(pool *p, char *buf, size_t cap);
/* Gives empty slabs back to the OS; returns bytes released. */
uint64_t pool_trim(pool *p);

#ifdef __cplusplus
}
#endif

#endif
