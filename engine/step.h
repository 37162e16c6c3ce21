/* The end of a step (engine/step.c): the global gradient norm, the loss
 * scale taken out, the inf/NaN skip, clipping, the update's launch, the
 * loss scale's own update and the count of skipped steps, and the step's
 * timing figures. Owns the loss scaler, the skip counts and the last
 * step's timing. Floor 8. */
#ifndef FERRY_ENGINE_STEP_H
#define FERRY_ENGINE_STEP_H

#include <stdbool.h>

#include "engine/context.h"
#include "engine/dp.h"
#include "engine/drain.h"
#include "engine/groups.h"
#include "engine/placement.h"
#include "engine/residency.h"
#include "engine/schedule.h"
#include "engine/update.h"
#include "optim/loss_scale.h"

typedef struct engine_step engine_step;

typedef struct step_env {
    const engine_ctx *ctx;
    engine_groups *groups;
    engine_progress *prog;
    engine_dp *dp;
    engine_residency *res;
    engine_update *update;
    engine_drain *drain;
    engine_sched *sched;
    engine_placement *placement; /* offload none's norm buffers */
} step_env;

/* The loss scale's state and the skip counts (a checkpoint keeps them). */
typedef struct engine_scaling {
    bool on;              /* dynamic loss scaling (f16 storage by default) */
    loss_scaler scaler;
    int64_t skipped_steps;  /* since the start of training */
    int skips_in_row;       /* consecutive skipped steps up to the last one */
} engine_scaling;

/* At create: the loss scale's first state (the config was checked). */
void step_scaling_init(engine_scaling *s, const ferry_engine_config *cfg, ferry_dtype act);
/* Back to the first state (a load of a run that had none). */
void step_scaling_reset(engine_scaling *s, const ferry_engine_config *cfg);

ferry_status step_open(const step_env *env, engine_scaling *scaling, engine_step **out);
void step_close(engine_step *s);
/* ferry_engine_step, once the group table is set up. */
ferry_status step_run(engine_step *s, const ferry_step_options *opts, ferry_step_report *report);
/* The last step's timing. */
const ferry_step_timing *step_timing(const engine_step *s);

#endif
