/* The engine itself, private to engine.c (and to the engine's white-box
 * tests): the configuration and its resolution, the context every
 * component is handed, the group table, and the components, each with its
 * own state behind its own header. Embedders include engine/intree.h. */
#ifndef FERRY_ENGINE_ENGINE_H
#define FERRY_ENGINE_ENGINE_H

#include <stdbool.h>

#include "engine/checkpoint.h"
#include "engine/context.h"
#include "engine/device_share.h"
#include "engine/dp.h"
#include "engine/drain.h"
#include "engine/groups.h"
#include "engine/intree.h"
#include "engine/placement.h"
#include "engine/residency.h"
#include "engine/schedule.h"
#include "engine/step.h"
#include "engine/update.h"

/* What ferry_engine_alloc handed out: ferry_engine_free takes these only. */
typedef struct engine_user_allocs {
    void **p;
    size_t count, cap;
} engine_user_allocs;

/* Offload auto: whether it was asked, and its one line (the mode it
 * chose is ctx.mode). */
typedef struct engine_resolution {
    bool auto_asked;
    char auto_reason[3072];
} engine_resolution;

struct ferry_engine {
    ferry_engine_config cfg; /* as given (the mode resolved is ctx.mode) */
    engine_resolution how;
    engine_ctx ctx;
    engine_progress prog;
    engine_groups groups;
    engine_scaling scaling;
    engine_device_share share;
    engine_dp *dp; /* NULL when training alone */
    engine_placement placement;
    engine_residency *res;
    engine_update *update;
    engine_drain *drain;
    engine_sched *sched;
    engine_step *step;
    engine_user_allocs user;
    bool ops_started; /* the op set (cuBLASLt) started at create; shut down at close */
    bool setup_done;
    char describe[1536];
};

#endif
