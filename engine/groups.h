/* The engine's parameter groups: the record every component reads, and
 * the table that holds them. A group's record says what the group is (name,
 * size, options, the ranges exempt from weight decay, the caller's initial
 * values until setup), which part of it this rank owns, where each of its
 * buffers is (placement fills the pointers from the layout table), and the
 * events that order the streams around it. What a component keeps per
 * group beyond that (the schedule's fetch flags, the drain's tickets, the
 * split update's device arrays) is in that component's own state, indexed
 * by the group's number. Floor 0: data and its bookkeeping only. */
#ifndef FERRY_ENGINE_GROUPS_H
#define FERRY_ENGINE_GROUPS_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "ferry.h"
#include "optim/threadpool.h"

#define ENGINE_NAME_MAX 64
#define ENGINE_MAX_GROUPS 65536

typedef struct engine_group {
    char name[ENGINE_NAME_MAX];
    size_t numel;
    ferry_group_options opts;
    float *init;            /* the caller's initial values until setup */
    size_t (*no_decay)[2];  /* sorted, disjoint {offset, count} ranges (copied) */
    size_t no_decay_count;

    /* This rank's part of the group, [part_lo, part_lo + part_n), in a
     * slot of part_cap elements (a whole number of NUMERICS_TILE); the
     * device weights hold `padded` = world x part_cap elements. Alone, and
     * in offload none: 0, numel, numel, numel (engine/dp.c sets them). */
    size_t part_lo, part_n, part_cap, padded;

    /* fp32 master weights and Adam moments: host pool (offload modes; NULL
     * where the NVMe tier holds them) or device arena (offload none). */
    float *master, *m, *v;
    /* Compact moments (engine config `moments` BF16 or 8BIT; m and v are
     * then NULL): each one moment in optim/moments.h's layout, host pool. */
    void *mq, *vq;
    /* Host copies in the device type: gradients as drained, weights for upload. */
    void *host_grads, *host_weights;
    /* Device buffers; in params mode present only while fetched or retiring. */
    void *dev_weights, *dev_grads;
    /* The fp32 sum of the step's micro-batch gradients, from the first step
     * with several: host pool in the offload modes, device in none. */
    float *grad_acc;

    backend_event *uploaded;   /* the device weights are written (h2d stream, or where the update ran) */
    backend_event *released;   /* compute done reading the weights (compute stream) */
    backend_event *grads_done; /* compute done writing the gradients (compute stream) */
    backend_event *drained;    /* D2H of the gradients done (d2h stream) */
    backend_event *updated;    /* the group's update is done (h2d stream) */
} engine_group;

typedef struct engine_groups {
    engine_group *g;
    int n, cap;
} engine_groups;

/* Per-tile partial sums of a group's gradient norm (the drain fills them,
 * engine/drain.c; data parallelism adds every rank's, engine/dp.c). */
typedef struct engine_norm {
    size_t ntiles;
    double *partial;    /* [ntiles] */
    unsigned char *bad; /* [ntiles] */
} engine_norm;

/* Adds a group: copies its initial values (checking each is finite, on
 * the pool's threads) and its no-decay ranges (sorted, checked). */
ferry_status groups_add(engine_groups *t, tp_pool *threads, const char *name, size_t numel, const float *init,
                        const ferry_group_options *opts, int *group_id);
/* Gives back the initial values (after setup). */
void groups_drop_init(engine_groups *t);
void groups_free(engine_groups *t);
size_t groups_total(const engine_groups *t);
size_t groups_largest(const engine_groups *t);

/* The gradients the update and the norm read: the fp32 sum when the step
 * accumulated micro-batches (or, with data parallelism in offload none, the
 * fp32 sum the ranks all-reduce), else the storage type's (device in none,
 * the drained host copy otherwise: fp32 when summed across ranks). */
const void *group_step_grads(const engine_group *g, ferry_offload mode, bool accumulating, bool ranks,
                             ferry_dtype act, ferry_dtype *dtype);

const char *engine_phase_name(ferry_phase phase);

#endif
