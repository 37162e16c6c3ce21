/* ZeRO data parallelism inside the engine (engine/shard.c): which part of
 * each group a rank owns, the collectives that keep the ranks' weights
 * identical, and the agreement on the step's decision. Included by the
 * engine's own files only; engine.c, placement.c, schedule.c, step.c and
 * checkpoint.c call these at their few hooks, all of which do nothing when
 * the engine trains alone (e->dp NULL). */
#ifndef FERRY_ENGINE_SHARD_H
#define FERRY_ENGINE_SHARD_H

#include <stdbool.h>

#include "engine/engine.h"

/* At create, before the backend opens (the world picks the GPU): joins the
 * launcher's world unless data_parallel is -1, and turns data parallelism
 * on for a world of several ranks (or always, with data_parallel 1). */
ferry_status shard_join(ferry_engine *e);
/* The optimizer threads of a rank: every core of the node shared out among
 * the ranks on this machine, unless the config names a count. */
int shard_optimizer_threads(const ferry_engine *e);
/* After the streams: the collectives' streams and communicators.
 * Collective (every rank opens its engine). */
ferry_status shard_open(ferry_engine *e);
/* Synchronizes and closes them (before the backend closes). */
void shard_close(ferry_engine *e);

/* The state is split across ranks: optimizer and params modes. */
bool shard_sharded(const ferry_engine *e);
/* Sets the group's shard fields (alone: the whole group). */
void shard_layout(ferry_engine *e, engine_group *g);
/* After every group is placed: events, the reduce buffers, and in offload
 * none the fp32 gradient sums. */
ferry_status shard_place(ferry_engine *e);
void shard_unplace(ferry_engine *e);

/* Backward released group g on stream s. Offload none: its gradient is
 * added into the fp32 sum and, at the step's last micro-batch, all-reduced.
 * Returns FERRY_OK having done it, with *handled true. */
ferry_status shard_release_resident(ferry_engine *e, engine_group *g, backend_stream *s, bool last);
/* Optimizer and params modes, the drain of one micro-batch's gradients of
 * g: chunk by chunk, every rank's slot widened to fp32 and reduce-scattered
 * on the gradient comm stream, this rank's sum copied to host_grads on the
 * d2h stream (two buffer pairs take turns, so one chunk reduces while the
 * last drains); records g->drained after the last copy. */
ferry_status shard_reduce_and_drain(ferry_engine *e, engine_group *g);
/* Uploads this rank's slot of the group's weights (after its update; after
 * `also_wait` too when not NULL) and all-gathers the others'; records
 * g->uploaded. */
ferry_status shard_upload(ferry_engine *e, engine_group *g, backend_event *also_wait);

/* The step. Offload none: the compute stream waits for every group's
 * all-reduce (timed as communication wait). */
ferry_status shard_wait_reduced(ferry_engine *e);
/* Optimizer and params modes: every group's sum of squares from the norm's
 * tiles of every rank, added in tile order (the same bits as alone). */
ferry_status shard_sum_norms(ferry_engine *e);
/* The skip decision's input made the same on every rank: a non-finite
 * gradient anywhere is non-finite everywhere. */
ferry_status shard_agree_nonfinite(ferry_engine *e, bool *bad, int ngroups);
/* The collectives of the step so far have succeeded (their streams
 * synchronized) and no rank has failed. */
ferry_status shard_check(ferry_engine *e);
/* Waits for the collectives' streams. */
ferry_status shard_synchronize(ferry_engine *e);
/* Adds the step's communication figures to t. */
void shard_close_timing(ferry_engine *e, ferry_step_timing *t);

/* Master weights in and out: gathered from every rank / taken for this
 * rank's part (collective in the sharded modes). */
ferry_status shard_get_master(ferry_engine *e, engine_group *g, float *out);
ferry_status shard_set_master(ferry_engine *e, engine_group *g, const float *values);

/* Checkpoints (engine/checkpoint.c): rank 0 writes the whole state, the
 * other ranks send it their parts. */
bool shard_writes_files(const ferry_engine *e);
/* Elements [at, at + n) of array k (0 master, 1 m, 2 v) of the group into
 * buf on rank 0, from whichever ranks own them; other ranks send theirs.
 * Collective, in the same order on every rank. */
ferry_status shard_gather_state(ferry_engine *e, engine_group *g, int k, size_t at, size_t n, float *buf);
/* Elements [at, at + n) of array k arrived from a file: keeps this rank's part. */
void shard_take_state(ferry_engine *e, engine_group *g, int k, size_t at, size_t n, const float *buf);
/* Makes rank 0's status every rank's: rank 0 sends whether it succeeded (and
 * its message). */
ferry_status shard_agree_status(ferry_engine *e, ferry_status st, const char *what);

#endif
