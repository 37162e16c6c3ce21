/* ZeRO data parallelism inside the engine (engine/dp.c): which part of each
 * group a rank owns, the collectives that keep the ranks' weights
 * identical, and the agreement on the step's decision. Every call takes the
 * component (NULL when the engine trains alone, where each does nothing or
 * says "one rank") and what it works on as arguments. Floor 3: it knows the
 * group table, the layout's arithmetic and the backend, nothing above. */
#ifndef FERRY_ENGINE_DP_H
#define FERRY_ENGINE_DP_H

#include <stdbool.h>

#include "engine/context.h"
#include "engine/groups.h"

typedef struct engine_dp engine_dp;

/* At create, before the backend opens (the world picks the GPU): joins the
 * launcher's world unless data_parallel is -1, and turns data parallelism
 * on (*out non-NULL) for a world of several ranks (or always, with
 * data_parallel 1). `nvme`: the config asks for the NVMe tier, which trains
 * alone. */
ferry_status dp_join(const ferry_engine_config *cfg, bool nvme, engine_dp **out);
int dp_rank(const engine_dp *d);  /* 0 alone */
int dp_world(const engine_dp *d); /* 1 alone */
/* The optimizer threads of a rank: every core of the node shared out among
 * the ranks on this machine, unless the config names a count. */
int dp_optimizer_threads(const engine_dp *d, const ferry_engine_config *cfg);
/* After the streams: the collectives' streams and communicators.
 * Collective (every rank opens its engine). */
ferry_status dp_open(engine_dp *d, const engine_ctx *c);
/* Synchronizes and closes them (before the backend closes); frees d. */
void dp_close(engine_dp *d);

/* The state is split across ranks: optimizer and params modes. */
bool dp_partitioned(const engine_dp *d, ferry_offload mode);
/* Sets the group's part fields (alone, or unpartitioned: the whole group). */
void dp_layout(const engine_dp *d, ferry_offload mode, engine_group *g);
/* After placement: each group's events, and the reduce buffers the plan
 * gave (send 0, receive 0, send 1, receive 1; the partitioned modes). */
ferry_status dp_place(engine_dp *d, const engine_ctx *c, const engine_groups *gs, void *const reduce[4]);
void dp_unplace(engine_dp *d);
/* Group gi's events: its slot of the weights is on the device (h2d
 * stream); a timed weight wait is past that part (compute stream). */
backend_event *dp_staged(const engine_dp *d, int gi);
backend_event *dp_wait_mid(const engine_dp *d, int gi);

/* Backward released group gi (g) on stream s, in offload none: its
 * gradient is added into the fp32 sum and, at the step's last micro-batch,
 * all-reduced. */
ferry_status dp_release_resident(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, int gi,
                                 backend_stream *s, bool last);
/* Optimizer and params modes, the drain of one micro-batch's gradients of
 * g: chunk by chunk, every rank's slot widened to fp32 and reduce-scattered
 * on the gradient comm stream, this rank's sum copied to host_grads on the
 * d2h stream (two buffer pairs take turns, so one chunk reduces while the
 * last drains); records g->drained after the last copy. */
ferry_status dp_reduce_and_drain(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, int gi);
/* Uploads this rank's slot of the group's weights (after `also_wait` when
 * not NULL; the caller has queued the wait for the group's update on the
 * h2d stream) and all-gathers the others'; records g->uploaded. */
ferry_status dp_upload(engine_dp *d, const engine_ctx *c, engine_progress *p, engine_group *g, int gi,
                       backend_event *also_wait);

/* The step. Offload none: the compute stream waits for every group's
 * all-reduce (timed as communication wait). */
ferry_status dp_wait_reduced(engine_dp *d, const engine_ctx *c, const engine_groups *gs);
/* Optimizer and params modes: every group's sum of squares from the norm's
 * tiles of every rank, added in tile order (the same bits as alone):
 * norms[i] is group i's, the results go to sumsq[i] and bad[i]. */
ferry_status dp_sum_norms(engine_dp *d, const engine_groups *gs, engine_norm *const *norms, double *sumsq,
                          bool *bad);
/* The skip decision's input made the same on every rank: a non-finite
 * gradient anywhere is non-finite everywhere. */
ferry_status dp_agree_nonfinite(engine_dp *d, bool *bad, int ngroups);
/* The collectives of the step so far have succeeded (their streams
 * synchronized) and no rank has failed. */
ferry_status dp_check(engine_dp *d);
/* Waits for the collectives' streams. */
ferry_status dp_synchronize(engine_dp *d);
/* Adds the step's communication figures to t. */
void dp_close_timing(engine_dp *d, ferry_step_timing *t);

/* Master weights in and out: gathered from every rank / taken for this
 * rank's part (collective in the partitioned modes). */
ferry_status dp_get_master(engine_dp *d, engine_group *g, float *out);
ferry_status dp_set_master(engine_dp *d, engine_group *g, const float *values);

/* Checkpoints: rank 0 writes the whole state, the other ranks send it their parts. */
bool dp_writes_files(const engine_dp *d);
/* One run of a group's state as the file holds it: len elements of esize
 * bytes, rank p owning [p * cap, min(len, (p + 1) * cap)), which it keeps
 * from `local` on (this rank's buffer). The master weights and fp32 or
 * bf16 moments are one run each (cap the slot); 8-bit moments two, their
 * codes (cap the slot) and their absmax (cap the slot's blocks). */
typedef struct dp_run {
    void *local;
    size_t esize, len, cap;
} dp_run;
/* Elements [at, at + n) of the run into buf on rank 0, from whichever
 * ranks own them; other ranks send theirs. Collective, in the same order
 * on every rank. */
ferry_status dp_gather_run(engine_dp *d, const dp_run *r, size_t at, size_t n, void *buf);
/* Elements [at, at + n) of the run arrived from a file: keeps this rank's part. */
void dp_take_run(const engine_dp *d, const dp_run *r, size_t at, size_t n, const void *buf);
/* Makes rank 0's status every rank's: rank 0 sends whether it succeeded (and
 * its message). */
ferry_status dp_agree_status(engine_dp *d, ferry_status st, const char *what);
/* A checkpoint's save on every rank, between these two: the ranks' ledgers
 * are compared first (a rank that issued other collectives is named before
 * its state is written), and the other ranks' waits are bounded by the
 * writer's progress (dp_save_progress, rank 0's bytes written) instead of
 * the collective timeout. Collective; no-ops alone. */
ferry_status dp_save_begin(engine_dp *d, const char *path);
void dp_save_progress(engine_dp *d, uint64_t bytes_done);
void dp_save_end(engine_dp *d);

#endif
