/* The device arena: every device byte of an engine, under one hard budget,
 * in two regions. The planned region is one buffer from backend_alloc,
 * sized by the engine's static memory plan (engine/memplan.h), in which each
 * planned buffer sits at the offset the plan gave it: it cannot fragment.
 * The dynamic region is the rest of the budget: a few large buffers from
 * backend_alloc (growing in chunks, never past the budget in reserved bytes)
 * sub-allocated best-fit with coalescing (the span heap of offload/heap.h),
 * for what has no place in the plan. Everything is 256-byte aligned. Each
 * allocation carries a category and a name, so a refusal can say what asked
 * and what holds the memory. Works the same on the host and cuda backends.
 * It owns no transfers and knows nothing of what the bytes mean.
 *
 * Threads: any function, from any thread; one mutex guards an arena. */
#ifndef FERRY_OFFLOAD_ARENA_H
#define FERRY_OFFLOAD_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "backend/backend.h"
#include "offload/pool.h"
#include "offload/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARENA_ALIGN 256u
/* What arena_alloc charges for `bytes`: for planners without an arena. */
uint64_t arena_charge(size_t bytes);

typedef struct arena_config {
    uint64_t budget_bytes; /* hard cap on reserved device bytes; 0 = the device's free memory now */
    uint64_t chunk_bytes;  /* growth step; 0 = 256 MiB */
    trace *trace;          /* NULL = no trace */
} arena_config;

#define ARENA_CONFIG_INIT { 0, 0, NULL }

typedef struct arena arena;

/* The backend must outlive the arena. */
ferry_status arena_create(backend *be, const arena_config *cfg, arena **out);
/* Gives every chunk back to the backend, live allocations included. NULL is fine. */
void arena_destroy(arena *a);
/* 256-byte aligned device memory of at least `bytes` (0 gets 256). Beyond
 * the budget: FERRY_ERR_OUT_OF_MEMORY with a message naming the category, the
 * name, the bytes asked, the bytes in use by category and the budget; the
 * arena is then exactly as it was. `name` is copied (63 bytes kept). */
ferry_status arena_alloc(arena *a, size_t bytes, ferry_mem_category category, const char *name,
                         void **out);
/* FERRY_ERR_INVALID_ARGUMENT for a pointer that is not a live allocation's
 * start (changes nothing); NULL is a no-op. Takes planned buffers too. */
ferry_status arena_free(arena *a, void *ptr);
/* The planned region: one device buffer of `bytes` (a multiple of 256),
 * taken from the budget at once, before the dynamic region holds anything;
 * once per arena; traced as a reserve and a REGION record (its base).
 * Beyond the budget: FERRY_ERR_OUT_OF_MEMORY naming `plan`, a sentence of
 * what the plan holds. */
ferry_status arena_plan_region(arena *a, uint64_t bytes, const char *plan);
/* A planned buffer: the region's bytes [offset, offset + bytes), counted as
 * an allocation of `category` (and traced with its offset) until
 * arena_free. FERRY_ERR_INVALID_ARGUMENT when it does not lie inside the
 * region or overlaps a live planned buffer (a wrong plan). */
ferry_status arena_place(arena *a, uint64_t offset, size_t bytes, ferry_mem_category category, const char *name,
                         void **out);
/* The planned region's size (0: none) and its base. */
uint64_t arena_region_bytes(const arena *a);
/* Fills the device_ fields of *st. */
void arena_stats(arena *a, ferry_memory_stats *st);
/* Up to `max` live allocations, largest first; returns how many. */
size_t arena_largest(arena *a, heap_live *out, size_t max);
/* Gives chunks without live allocations back to the backend; returns bytes. */
uint64_t arena_trim(arena *a);
uint64_t arena_budget(const arena *a);

#ifdef __cplusplus
}
#endif

#endif
