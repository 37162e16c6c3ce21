/* The engine's static memory plan (engine/plan.c): every device buffer
 * with a place in the step's schedule, with its size and lifetime, at an
 * offset of one region assigned by the static planner (engine/memplan.h),
 * and the host pool's and the disk's byte counts beside. Setup places its
 * buffers by it (engine/placement.c) and the planners count with it
 * (engine_plan_memory in engine/intree.h, gpt2_plan, memprof plan, offload
 * auto), so the plan's peak is the run's, byte for byte. Arithmetic only.
 * Floor 2. */
#ifndef FERRY_ENGINE_PLAN_H
#define FERRY_ENGINE_PLAN_H

#include "engine/groups.h"
#include "engine/intree.h"
#include "engine/memplan.h"

typedef enum engine_plan_kind {
    PLAN_GLOBAL,   /* which: the engine_global_id */
    PLAN_GROUP,    /* group; which: the index of its layout buffer */
    PLAN_ACC,      /* group: its fp32 sum of micro-batch gradients on the device (offload none) */
    PLAN_REDUCE,   /* which: 0 send, 1 receive of pair 0; 2, 3 of pair 1 */
    PLAN_WSLOT,    /* params mode: group = the weights' size class; which: the slot */
    PLAN_GSLOT,    /* params mode: group = the gradients' size class; which: the slot */
    PLAN_SPLIT,    /* group; which: 0 master, 1 m, 2 v, 3 the gradients' fp32 sum */
    PLAN_EMBEDDER, /* the embedder's declared bytes */
} engine_plan_kind;

typedef struct engine_planned {
    memplan_buffer b;
    engine_plan_kind kind;
    int group, which;
    char name[ENGINE_NAME_MAX + 48];
} engine_planned;

/* Params mode's slots of one size class: groups whose buffers charge the
 * same bytes share them, so any of them fits any free slot. */
typedef struct engine_slot_class {
    uint64_t bytes; /* each slot's charge */
    int groups;     /* groups of the class */
    int slots;      /* slots planned */
} engine_slot_class;

typedef struct engine_static_plan {
    engine_planned *items;
    int n, cap;
    uint64_t region_bytes;
    engine_memory_plan counts;  /* what engine_plan_memory reports */
    int depth;                  /* params mode: the fetch-ahead planned */
    engine_slot_class *wclass, *gclass; /* params mode: the weights' and the gradients' classes */
    int nwclass, ngclass;
    int *wclass_of, *gclass_of; /* per group */
} engine_static_plan;

/* Params mode's rule for weights kept on the device in `room` bytes: a
 * slot for every group of every class when all fit; else one slot at a
 * time to the class with the most groups still without one, while a slot
 * fits. Adds to classes[].slots; returns the bytes taken. */
uint64_t engine_plan_keep_weights(engine_slot_class *classes, int n, uint64_t room);
/* The plan of a request (checked as engine_plan_memory checks it). */
ferry_status engine_static_plan_make(const engine_plan_request *rq, engine_static_plan *out);
void engine_static_plan_free(engine_static_plan *p);
/* The planned buffer of (kind, group, which), or NULL. */
const engine_planned *engine_static_plan_find(const engine_static_plan *p, engine_plan_kind kind, int group,
                                              int which);
/* One sentence of what the plan holds, for messages: "the memory plan of
 * 52 buffers (params 3.1 GiB, ...; largest 'wte weights' 160.0 MiB)". */
void engine_static_plan_words(const engine_static_plan *p, char *buf, size_t cap);

#endif
