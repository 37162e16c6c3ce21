/* What every component of the engine is handed at setup, owned by the
 * orchestrator (engine.c) and only used by the components:
 * - engine_ctx: the backend and its three streams, where memory comes from
 *   (the device arena, the pinned host pool), the CPU threads, the memory
 *   trace, the device's element type and the offload mode the device side
 *   runs in (offload nvme runs it as optimizer mode), and the configuration
 *   as resolved at setup (read only);
 * - engine_progress: the step in progress (steps taken, which micro-batch,
 *   whether they accumulate, inference), which the orchestrator advances and
 *   the schedule, the drains and the step read, and the step's figures as
 *   they accumulate, which every component adds its part to.
 * Data only: no function, no decision.
 *
 * The components, floor by floor (a file includes the headers of its own
 * floor's component and of floors below it, never above; tests/layering
 * checks it):
 *   0  context.h, groups.h    the shared data: this file; the group table
 *   1  layout, device_share   what each mode holds (a table); the card's share
 *   2  plan                   the memory plan: what setup and the schedule allocate
 *   3  auto, dp               offload auto's choice; data parallelism (ranks, collectives)
 *   4  placement, residency   allocating what the layout lists; params mode's device weights
 *   5  update                 where the optimizer state lives and the AdamW update
 *                             (update_resident.c, update_cpu.c, update_split.c, update_nvme.c)
 *   6  drain                  gradients: buffers, the drain to the host, the norm's partial sums
 *   7  schedule               fetch, grads, release within a step
 *   8  step                   norm, skip, clip, the update's launch, the loss scale, timing
 *   9  checkpoint             the state file
 *  10  engine.c               the public face, configuration, setup and teardown order */
#ifndef FERRY_ENGINE_CONTEXT_H
#define FERRY_ENGINE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ferry.h"
#include "offload/arena.h"
#include "offload/pool.h"
#include "offload/trace.h"
#include "optim/threadpool.h"

typedef struct engine_ctx {
    const ferry_engine_config *cfg; /* as resolved at setup: cfg->offload is the device side's mode */
    backend *be;
    backend_stream *compute, *h2d, *d2h;
    arena *arena;
    pool *pool;
    tp_pool *threads;
    trace *trace;
    int numa_node;
    ferry_dtype act; /* the device's element type */
    size_t act_size;
} engine_ctx;

/* The device side's mode: NONE, OPTIMIZER or PARAMS. */
static inline ferry_offload ctx_mode(const engine_ctx *c) { return c->cfg->offload; }

typedef struct engine_progress {
    int64_t step;                 /* optimizer steps taken */
    int micro_index, micro_count; /* micro_index -1 before the first begin_micro_batch of a step */
    bool accumulating;            /* this step has several micro-batches: gradients are summed in fp32 */
    bool inference;               /* between begin_inference and end_inference */
    ferry_step_timing acc;        /* the step's figures so far */
} engine_progress;

#endif
