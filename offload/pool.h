/* The pinned host pool: large slabs obtained once from the OS (mmap, huge
 * pages where allowed, placed on a NUMA node, page-locked where the limits
 * allow) and sub-allocated through the span heap (offload/heap.h) to the
 * engine's host state: fp32 master weights, Adam moments, gradients waiting
 * for the update, staging. It does not own device memory or transfers.
 *
 * Threads: every pool_ function may be called from any thread; a pool is
 * guarded by one mutex. */
#ifndef FERRY_OFFLOAD_POOL_H
#define FERRY_OFFLOAD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "backend/backend.h"
#include "offload/heap.h"
#include "offload/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

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
/* What pool_alloc(p, bytes, 0, ...) charges: for planners without a pool. */
uint64_t pool_charge(size_t bytes);

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
/* Makes room in one slab for `bytes` of allocations (as pool_charge counts
 * them) about to be made, so that they pack without the slack a fixed slab
 * size leaves at the end of each slab: a budget then holds exactly what a
 * planner counted. FERRY_ERR_OUT_OF_MEMORY past the limit, naming `what`. */
ferry_status pool_reserve(pool *p, size_t bytes, const char *what);
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
