/* Setup's placement (engine/placement.c): allocates what the layout table
 * lists for the offload mode, the engine's own buffers first, then each
 * group's, and starts the op set (which may want the matmul workspace).
 * Filling the optimizer state is the update's (update.h). Floor 4. */
#ifndef FERRY_ENGINE_PLACEMENT_H
#define FERRY_ENGINE_PLACEMENT_H

#include <stdbool.h>

#include "engine/context.h"
#include "engine/device_share.h"
#include "engine/groups.h"
#include "engine/layout.h"

/* Where the NVMe tier is and what it holds: decides which layout buffers
 * stay off the host. */
typedef struct engine_where {
    bool sharded;        /* data parallelism splits the state across ranks */
    bool disk;           /* the NVMe tier holds the moments */
    bool master_on_disk; /* ... and the master weights */
} engine_where;

typedef struct engine_placement {
    void *global[ENGINE_GLOBALS]; /* the engine's own device buffers (layout.h) */
    bool ops_ready;               /* ops_init done; placement_unplace shuts them down */
} engine_placement;

/* Bytes per parameter the mode keeps on the device and the host. */
void placement_bytes_per_param(const engine_ctx *c, engine_where w, double *device, double *host);
/* This rank's bytes per parameter of the model: with data parallelism in
 * the sharded modes its host slots hold about 1/N of them. */
void placement_rank_bytes_per_param(const engine_ctx *c, const engine_groups *gs, engine_where w, double *device,
                                    double *host);
/* Says before allocating anything whether the mode can fit the budget. */
ferry_status placement_check_fit(const engine_ctx *c, const engine_groups *gs, engine_where w);
/* The engine's own buffers, then the op set; the libraries' share of the
 * card is measured around its start. */
ferry_status placement_globals(engine_placement *pl, const engine_ctx *c, int ngroups, engine_device_share *share);
/* A group's events and every buffer the layout gives it. */
ferry_status placement_group(const engine_ctx *c, engine_group *g, engine_where w);
/* Allocates every group's grad_acc (engine_accumulator_buffer) that is not
 * there yet: the first step with several micro-batches does (offload none
 * with data parallelism from setup on). */
ferry_status placement_accumulators(const engine_ctx *c, engine_groups *gs, bool sharded);
/* Shuts the op set down and destroys the groups' events (memory goes with
 * the arena and the pool). */
void placement_unplace(engine_placement *pl, const engine_ctx *c, engine_groups *gs);

#endif
