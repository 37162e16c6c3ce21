/* The engine's own checkpoint file (engine/checkpoint.c): every group's
 * fp32 master weights and Adam moments, the step count, the device weights
 * a delayed update has yet to replace, the loss scale and the skip counts,
 * and the embedder's blob, in one file written atomically; with data
 * parallelism rank 0 writes the whole of it. Floor 9: it reads the state
 * through the update (where it lives), data parallelism (who owns which
 * part) and the step's loss scale. */
#ifndef FERRY_ENGINE_CHECKPOINT_H
#define FERRY_ENGINE_CHECKPOINT_H

#include "engine/context.h"
#include "engine/dp.h"
#include "engine/groups.h"
#include "engine/schedule.h"
#include "engine/step.h"
#include "engine/update.h"

typedef struct ckpt_env {
    const engine_ctx *ctx;
    engine_groups *groups;
    engine_progress *prog;
    engine_dp *dp;
    engine_update *update;
    engine_sched *sched;
    engine_scaling *scaling;
} ckpt_env;

/* ferry_engine_save and ferry_engine_load, on an engine that is set up. */
ferry_status ckpt_save(const ckpt_env *env, const char *path, const void *user, size_t user_bytes);
ferry_status ckpt_load(const ckpt_env *env, const char *path, void *user, size_t user_cap, size_t *user_bytes);

#endif
