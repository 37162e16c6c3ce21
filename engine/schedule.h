/* The schedule inside a step (engine/schedule.c): fetching a group's
 * weights (in params mode with the next groups ahead on the H2D stream),
 * handing out gradient buffers, and releasing groups, whose gradients then
 * go down (the drain). Keeps per group what the caller holds (fetched in
 * which phase, released in how many micro-batches) and times the compute
 * stream's waits for weights. Floor 7. */
#ifndef FERRY_ENGINE_SCHEDULE_H
#define FERRY_ENGINE_SCHEDULE_H

#include <stdbool.h>

#include "engine/context.h"
#include "engine/dp.h"
#include "engine/drain.h"
#include "engine/groups.h"
#include "engine/residency.h"
#include "engine/update.h"

typedef struct engine_sched engine_sched;

typedef struct sched_env {
    const engine_ctx *ctx;
    engine_groups *groups;
    engine_progress *prog;
    engine_dp *dp;
    engine_residency *res;
    engine_update *update;
    engine_drain *drain;
} sched_env;

ferry_status sched_open(const sched_env *env, engine_sched **out);
void sched_close(engine_sched *s);

/* The caller's calls, on stream `st` (the compute stream); the group number
 * is checked by the caller. */
ferry_status sched_fetch(engine_sched *s, int gi, ferry_phase phase, backend_stream *st, void **weights);
ferry_status sched_grads(engine_sched *s, int gi, backend_stream *st, void **grads);
ferry_status sched_release(engine_sched *s, int gi, ferry_phase phase, backend_stream *st);

/* The first group still fetched (in forward when `forward_only`), or -1. */
int sched_first_fetched(const engine_sched *s, bool forward_only);
/* Micro-batch `index` may start: no group fetched, each released in
 * every earlier micro-batch's backward (what the caller is told otherwise
 * starts with `what`). */
ferry_status sched_micro_ready(engine_sched *s, int index, const char *what);
/* The step may run: every group released in each of `micro_count` backwards. */
ferry_status sched_step_ready(const engine_sched *s, int micro_count);
/* After a step, or an abandoned one: the release counts start over. */
void sched_step_done(engine_sched *s);
void sched_abandon(engine_sched *s);
/* Weights changed (set_weights, a load): every copy params mode keeps on
 * the device is dropped; refused while a group is fetched. */
ferry_status sched_retire_all(engine_sched *s);
/* The step's weight waits (and waits off the learned order) into t. */
void sched_close_timing(engine_sched *s, ferry_step_timing *t);

#endif
