/* What every component of the engine is handed at setup, owned by the
 * orchestrator (engine.c) and only used by the components:
 * - engine_ctx: the backend and its three streams, where memory comes from
 *   (the device arena, the pinned host pool), the CPU threads, the memory
 *   trace, the device's element type, the offload mode as resolved once
 *   (engine_mode), and the configuration as the embedder gave it (read
 *   only);
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
 *   2  plan, window           the memory plan: what setup and the schedule allocate; the
 *                             upload window's ring
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

/* The offload mode, resolved once: at ferry_engine_create from the
 * configuration, then by offload auto at setup, before any byte is placed
 * (engine.c writes it, nothing else does). Every component reads the mode
 * here; cfg->offload and cfg->nvme_path stay as the embedder gave them. */
typedef struct engine_mode {
    ferry_offload asked;  /* NONE, OPTIMIZER, PARAMS or NVME once set up (AUTO until offload auto chose) */
    ferry_offload device; /* NONE, OPTIMIZER or PARAMS: what the device side runs (nvme runs as optimizer) */
    char *disk_dir;       /* the NVMe tier's folder (the engine's copy), NULL without the tier */
    bool master_on_disk;  /* the tier holds the fp32 master weights too (nvme_master) */
} engine_mode;

typedef struct engine_ctx {
    const ferry_engine_config *cfg; /* as the embedder gave it (its strings not kept) */
    engine_mode mode;
    backend *be;
    backend_stream *compute, *h2d, *d2h;
    arena *arena;
    pool *pool;
    tp_pool *threads;
    trace *trace;
    int numa_node;
    ferry_dtype act; /* the device's element type */
    size_t act_size;
    struct engine_window *window; /* the upload window's ring (engine/window.h); NULL when it is off */
} engine_ctx;

/* The device side's mode: NONE, OPTIMIZER or PARAMS. */
static inline ferry_offload ctx_mode(const engine_ctx *c) { return c->mode.device; }
/* The NVMe tier's folder, NULL without the tier. */
static inline const char *ctx_disk(const engine_ctx *c) { return c->mode.disk_dir; }

typedef struct engine_progress {
    int64_t step;                 /* optimizer steps taken */
    int micro_index, micro_count; /* micro_index -1 before the first begin_micro_batch of a step */
    bool accumulating;            /* this step has several micro-batches: gradients are summed in fp32 */
    bool inference;               /* between begin_inference and end_inference */
    ferry_step_timing acc;        /* the step's figures so far */
} engine_progress;

#endif
