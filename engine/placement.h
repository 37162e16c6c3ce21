/* Setup's placement (engine/placement.c): the static memory plan
 * (engine/plan.h) placed in the arena's planned region, every planned
 * buffer at its offset; each group's host buffers from the pinned pool; the
 * groups' events; the op set started (it wants the matmul workspace); and
 * the embedder's allocations served in the range the plan gave them.
 * Filling the optimizer state is the update's (update.h). Floor 4. */
#ifndef FERRY_ENGINE_PLACEMENT_H
#define FERRY_ENGINE_PLACEMENT_H

#include <stdbool.h>

#include "engine/context.h"
#include "engine/device_share.h"
#include "engine/groups.h"
#include "engine/layout.h"
#include "engine/plan.h"

/* Where the NVMe tier is and what it holds: decides which layout buffers
 * stay off the host. */
typedef struct engine_where {
    bool partitioned;        /* data parallelism splits the state across ranks */
    bool disk;           /* the NVMe tier holds the moments */
    bool master_on_disk; /* ... and the master weights */
} engine_where;

/* A live allocation of the embedder in its planned range. */
typedef struct engine_embedder_take {
    uint64_t off, bytes;
    void *ptr;
} engine_embedder_take;

typedef struct engine_placement {
    engine_static_plan plan;       /* what setup placed by */
    void *global[ENGINE_GLOBALS];  /* the engine's own device buffers (layout.h) */
    void *reduce[4];               /* data parallelism's reduce buffers: send 0, receive 0, send 1, receive 1 */
    void **wslots, **gslots;       /* params mode: every weights and gradients slot, class after class */
    float *(*split)[4];            /* per group: the forced split's device arrays (NULL past them) */
    const engine_planned *embedder; /* the embedder's range of the region, or NULL */
    engine_embedder_take *takes;   /* the embedder's live allocations in it, by offset */
    size_t ntakes, cap_takes;
    bool ops_ready;                /* the op set has the planned workspace; placement_unplace takes it back */
} engine_placement;

/* Bytes per parameter the mode keeps on the device and the host. */
void placement_bytes_per_param(const engine_ctx *c, engine_where w, double *device, double *host);
/* This rank's bytes per parameter of the model: with data parallelism in
 * the partitioned modes its host slots hold about 1/N of them. */
void placement_rank_bytes_per_param(const engine_ctx *c, const engine_groups *gs, engine_where w, double *device,
                                    double *host);
/* Says before allocating anything whether the mode can fit the budget. */
ferry_status placement_check_fit(const engine_ctx *c, const engine_groups *gs, engine_where w);
/* The static plan of `rq` made and placed: the arena's region reserved
 * (beyond the budget: FERRY_ERR_OUT_OF_MEMORY naming the plan), every
 * planned buffer at its offset, the groups' device pointers set; then the
 * op set started on the planned workspace, the libraries' share of the
 * card measured around it. */
ferry_status placement_plan(engine_placement *pl, const engine_ctx *c, engine_groups *gs,
                            const engine_plan_request *rq, engine_device_share *share);
/* Params mode's slot k of weights (gradients) class `cls`. */
void *placement_wslot(const engine_placement *pl, int cls, int k);
void *placement_gslot(const engine_placement *pl, int cls, int k);
/* A group's events and its host buffers (its device ones are planned). */
ferry_status placement_group(const engine_ctx *c, engine_group *g, engine_where w);
/* The embedder's allocation in its planned range, first fit; *out NULL
 * (and FERRY_OK) when it does not fit there, for the dynamic region to take. */
ferry_status placement_embedder_alloc(engine_placement *pl, const engine_ctx *c, size_t bytes,
                                      ferry_mem_category cat, const char *name, void **out);
/* Frees it when it lies in the range (true), else false. */
bool placement_embedder_free(engine_placement *pl, const engine_ctx *c, void *ptr);
/* Allocates every group's grad_acc (engine_accumulator_buffer) that is not
 * there yet: the first step with several micro-batches does (offload none
 * with data parallelism from setup on). */
ferry_status placement_accumulators(const engine_ctx *c, engine_groups *gs, bool partitioned);
/* Shuts the op set down, destroys the groups' events and frees the plan
 * (memory goes with the arena and the pool). */
void placement_unplace(engine_placement *pl, const engine_ctx *c, engine_groups *gs);

#endif
