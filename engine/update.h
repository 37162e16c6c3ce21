/* The update (engine/update.c and its implementations): where each group's
 * optimizer state lives (fp32 master weights, Adam moments), the AdamW
 * update that runs on it, and the wait that orders each group's next use
 * of its weights behind its own update. One interface, one implementation
 * chosen at setup:
 *   update_resident.c  offload none: the state on the device, the backend's AdamW on the compute stream
 *   update_cpu.c       optimizer and params modes: the state in the pinned host pool, the CPU's AdamW on
 *                      the optimizer threads, each group's upload behind its own update
 *   update_split.c     optimizer mode, alone: as the CPU's, with the first groups' state on the device
 *                      and updated there (forced, or chosen once after the warm-up steps)
 *   update_nvme.c      the NVMe tier: the moments (and master weights) in a file, updated through a window
 * A new strategy is one file with its update_ops (update_impl.h) and one
 * line in update_open. Floor 5: it uses the group table, data parallelism
 * (partitioned uploads) and residency (params mode's copies on the device). */
#ifndef FERRY_ENGINE_UPDATE_H
#define FERRY_ENGINE_UPDATE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/context.h"
#include "engine/dp.h"
#include "engine/groups.h"
#include "engine/placement.h"
#include "engine/residency.h"
#include "engine/window.h"

typedef struct engine_update engine_update;

/* What an update is handed at setup. */
typedef struct update_env {
    const engine_ctx *ctx;
    engine_groups *groups;
    engine_progress *prog;
    engine_dp *dp;          /* NULL alone */
    engine_residency *res;  /* params mode's device weights */
    const engine_placement *placement; /* the planned split arrays (forced) */
} update_env;

/* Chooses and opens the implementation for the mode (the NVMe tier opens
 * its store and thread here, before any group is filled). */
ferry_status update_open(const update_env *env, engine_update **out);
/* Waits for what is in flight and frees everything (the state's memory
 * goes with the arena and the pool). */
void update_close(engine_update *u);

/* Setup, per group, after placement allocated its buffers: the optimizer
 * state from g->init (zero moments), and the device copy of the weights. */
ferry_status update_fill(engine_update *u, engine_group *g);
/* Setup, once every group is filled: what the implementation places then
 * (the split's forced groups). */
ferry_status update_setup_done(engine_update *u);
/* The device (params mode: upload) copy of a group's weights from its
 * master weights, after setup, set_weights or a load. Synchronous. */
ferry_status update_write_weights(engine_update *u, engine_group *g);
/* A group's master weights to (to_engine) or from `host` (numel floats). */
ferry_status update_master_io(engine_update *u, engine_group *g, float *host, bool to_engine);

/* The step: before it decides (the delayed update's uploads, which happen
 * whether it skips or not)... */
ferry_status update_prepare(engine_update *u);
/* ... and, when it does not skip, every group's update queued (step
 * prog->step + 1); returns with it under way. */
ferry_status update_run(engine_update *u, const ferry_step_options *o, float clip);
/* The h2d stream waits until group g's update is done; records g->updated. */
ferry_status update_barrier(engine_update *u, engine_group *g);
/* Queues on the h2d stream the copy of group g's weights (alone, not
 * partitioned) up to g->dev_weights: from the upload copy, or converted
 * from the master weights through the upload window. Not the event. */
ferry_status update_copy_up(const engine_ctx *c, const engine_group *g);
/* Waits on the host until every group's update is done (writes included). */
ferry_status update_wait(engine_update *u);
/* The implementation's sticky failure (the NVMe tier's disk), FERRY_OK while none. */
ferry_status update_check(engine_update *u);
/* After a step: the split's choice once its warm-up steps are timed. */
ferry_status update_after_step(engine_update *u, const ferry_step_timing *t);
/* The first step with several micro-batches: device sums the split needs. */
ferry_status update_accumulators(engine_update *u);
/* The last update's wall time (ms) once it finished; 0 before. */
double update_last_ms(const engine_update *u);
/* Groups updated on the device in optimizer mode (the split). */
int update_device_groups(const engine_update *u);
/* The split's automatic choice: the smallest number of leading groups
 * whose device update lets the CPU update every later group before the
 * forward reaches it (cpu_share: each group's share of the parameters), at
 * most `fit`. Pure: tested alone (update_split.c). */
int engine_split_auto_choice(const double *cpu_share, int ngroups, double update_ms, double forward_ms, int fit);
/* The room a forced split of the first n groups needs beside a plan
 * without it (`spare` of `budget` left): FERRY_ERR_OUT_OF_MEMORY saying how
 * many groups fit when it does not. */
ferry_status update_split_check_room(const engine_groups *gs, int n, bool accumulates, uint64_t spare,
                                     uint64_t budget);
/* One line to add to the engine's description when something new was
 * placed (the split), once; NULL otherwise. */
const char *update_take_note(engine_update *u);

/* Checkpoints. Device-held state to the host arrays before a save, and
 * back after a load; the delayed update's pending device weights. */
ferry_status update_pull(engine_update *u);
ferry_status update_push(engine_update *u);
bool update_delayed_pending(const engine_update *u);
void update_set_delayed_pending(engine_update *u, bool pending);
/* The chunks of one of a group's fp32 arrays held outside memory (0
 * master, 1 m, 2 v; the group's pointer is NULL), as checkpoint.c walks
 * them: fn gets a pointer to each piece of at most `chunk` bytes, in order;
 * `to_engine`: the pieces are stored after fn fills them. */
typedef ferry_status (*update_chunk_fn)(void *ctx, void *state, bool on_device, void *buf, size_t bytes);
ferry_status update_state_chunks(engine_update *u, engine_group *g, int array, bool to_engine, void *buf,
                                 size_t chunk, update_chunk_fn fn, void *ctx);
/* The disk's figures in memory stats, a sentence in the description. */
void update_stats(const engine_update *u, ferry_memory_stats *st);
void update_describe(const engine_update *u, char *buf, size_t cap);

#endif
