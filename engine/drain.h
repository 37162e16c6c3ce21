/* Gradients within a step (engine/drain.c): the buffer a group's backward
 * writes (params mode takes one of the plan's gradient slots of its size
 * class, within the drain window), and
 * on release the way down to the host: the D2H copy (or, with data
 * parallelism, the reduce-scatter of every rank's slot), the CPU's fp32 sum
 * over micro-batches and the norm's partial sums tile by tile as each
 * group lands, while backward goes on. Floor 6: it waits for the update
 * (the delayed update may still read the drained copy). */
#ifndef FERRY_ENGINE_DRAIN_H
#define FERRY_ENGINE_DRAIN_H

#include <stdbool.h>

#include "engine/context.h"
#include "engine/dp.h"
#include "engine/groups.h"
#include "engine/placement.h"
#include "engine/update.h"

typedef struct engine_drain engine_drain;

typedef struct drain_env {
    const engine_ctx *ctx;
    engine_groups *groups;
    engine_progress *prog;
    engine_dp *dp;
    engine_update *update;
    const engine_placement *placement; /* params mode's gradient slots (its plan) */
} drain_env;

ferry_status drain_open(const drain_env *env, engine_drain **out);
/* Waits for the CPU's work in flight and frees the norms. */
void drain_close(engine_drain *d);

/* The gradient buffer of group gi for its backward on stream s (params
 * mode: allocated, zeroed once its last drain read it). */
ferry_status drain_grads(engine_drain *d, int gi, backend_stream *s, void **grads);
/* Group gi's backward released on stream s: its gradient goes down (or is
 * summed on the device in offload none). */
ferry_status drain_release(engine_drain *d, int gi, backend_stream *s);
/* Params mode: frees device gradient buffers whose drain has finished
 * (`block`: waits for each drain). */
void drain_collect(engine_drain *d, bool block);
/* A new micro-batch: no gradient buffer is handed out. */
void drain_begin_micro(engine_drain *d);
/* The CPU's work on group gi's drained gradients done; its status. */
ferry_status drain_wait_norm(engine_drain *d, int gi);
/* Group gi's norm partials (after drain_wait_norm). */
engine_norm *drain_norm(engine_drain *d, int gi);
/* An abandoned step: every CPU sum finishes and is dropped. */
ferry_status drain_abandon(engine_drain *d);

#endif
