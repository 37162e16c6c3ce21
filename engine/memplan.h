/* The static memory planner (engine/memplan.c): given buffers with sizes
 * and lifetimes over a schedule, an offset for each in one region, so that
 * two buffers alive at the same time never overlap, and the region's size
 * (the peak) is a property of the plan, never of an allocation order. Every
 * device buffer with a place in the step's schedule is planned this way at
 * setup, by the same function the planners call (engine/plan.c), so the
 * plan's peak is the run's. Arithmetic only. Floor 1. */
#ifndef FERRY_ENGINE_MEMPLAN_H
#define FERRY_ENGINE_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

/* A lifetime that lasts the whole run. */
#define MEMPLAN_FOREVER INT32_MAX
/* Every offset and size is a multiple of this (the device arena's alignment). */
#define MEMPLAN_ALIGN 256u

typedef struct memplan_buffer {
    const char *name;        /* for the layout's listing and messages (not copied) */
    ferry_mem_category cat;
    uint64_t bytes;          /* rounded up to MEMPLAN_ALIGN by the planner */
    int32_t start, end;      /* alive in schedule positions [start, end); end MEMPLAN_FOREVER: to the run's end */
    uint64_t offset;         /* out: where it lies in the region */
} memplan_buffer;

/* Assigns every buffer an offset: the largest first, each at the lowest
 * place that fits among the buffers already placed whose lifetimes overlap
 * its own (best fit over the gaps; in the manner of the static planners of
 * TFLite and XLA). *peak is the region's size. Deterministic: the same
 * buffers give the same offsets. FERRY_ERR_INVALID_ARGUMENT for an empty
 * lifetime or sizes past 2^62. */
ferry_status memplan_assign(memplan_buffer *b, int n, uint64_t *peak);

/* The lower bound no plan can beat: the most bytes alive at one position. */
uint64_t memplan_live_max(const memplan_buffer *b, int n);

/* Whether two buffers alive at once overlap in the region (a plan that is
 * wrong); their indices in *i, *j. For tests and for memprof's check of a
 * plan it reads back. */
int memplan_conflict(const memplan_buffer *b, int n, int *i, int *j);

#endif
