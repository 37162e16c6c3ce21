/* The span heap: the best-fit sub-allocator with coalescing that the pinned
 * host pool (offload/pool.c) and the device arena (offload/arena.c) both run
 * over their big regions. Regions are cut into address-ordered blocks; free
 * blocks sit on one list searched best-fit; live blocks are found by address
 * through a hash table; a freed block merges with free neighbours at once,
 * so a region with nothing live is one free block again. Owns only its
 * bookkeeping: the regions' memory belongs to the caller.
 *
 * Threads: not locked; its owner holds its own lock. */
#ifndef FERRY_OFFLOAD_HEAP_H
#define FERRY_OFFLOAD_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif


#define HEAP_NAME_MAX 64 /* allocation names are copied, cut to 63 bytes */

typedef struct heap heap;

/* One live allocation, as the heap reports it. */
typedef struct heap_live {
    void *ptr;
    uint64_t bytes; /* charged bytes (rounded to the heap's granule) */
    ferry_mem_category category;
    char name[HEAP_NAME_MAX];
} heap_live;

typedef struct heap_usage {
    uint64_t reserved;      /* bytes of all regions */
    uint64_t in_use;        /* bytes of live allocations */
    uint64_t free;          /* reserved - in_use */
    uint64_t largest_free;  /* largest free span */
    uint64_t empty_regions_bytes; /* bytes of regions holding no live allocation */
    size_t live;            /* live allocations */
    size_t regions;
} heap_usage;

/* `granule` (a power of two) is the minimum alignment and the unit sizes are
 * rounded up to. */
ferry_status heap_create(size_t granule, heap **out);
/* Frees the heap's bookkeeping only; the regions' memory is the owner's
 * (release it first with heap_release_regions). NULL is fine. */
void heap_destroy(heap *h);
/* Adds [base, base+bytes) as free space; `cookie` comes back on release.
 * base and bytes must be multiples of the granule. */
ferry_status heap_add_region(heap *h, void *base, size_t bytes, void *cookie);
/* Best fit over all free spans. *out = NULL (and FERRY_OK) when nothing
 * fits: the owner then grows. `align` is a power of two (0 = the granule). */
ferry_status heap_alloc(heap *h, size_t bytes, size_t align, ferry_mem_category category,
                             const char *name, void **out);
/* Frees a live allocation and coalesces it with free neighbours; *freed
 * (optional) receives what it was. FERRY_ERR_INVALID_ARGUMENT for a pointer
 * that is not a live allocation's start (changes nothing). */
ferry_status heap_free(heap *h, void *ptr, heap_live *freed);
/* Charged size of `bytes` (what heap_alloc will count). */
uint64_t heap_charge(const heap *h, size_t bytes);
void heap_usage_get(const heap *h, heap_usage *u);
/* Copies up to `max` live allocations, largest first; returns how many. */
size_t heap_largest(const heap *h, heap_live *out, size_t max);
/* Removes regions (all of them, or only those without live allocations) and
 * calls release(ctx, base, bytes, cookie) for each. Returns bytes removed. */
uint64_t heap_release_regions(heap *h, bool only_empty,
                                   void (*release)(void *ctx, void *base, size_t bytes, void *cookie),
                                   void *ctx);

/* Bytes of all regions, and of live allocations: heap_usage_get's first two. */
uint64_t heap_reserved(const heap *h);
uint64_t heap_in_use(const heap *h);
/* What a heap of `granule` charges for `bytes` (0 bytes: one granule), for
 * planners that have no heap: heap_charge of such a heap gives the same. */
uint64_t heap_charge_for(size_t granule, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
