/* Params mode's device weights (engine/residency.c): which groups' weights
 * are on the device, the room they may take, which one goes when room is
 * needed (the one needed furthest ahead), and the order of fetches the
 * first step records, by which later steps prefetch and evict. Floor 4: it
 * reads the group table, the layout's windows and the arena; the fetches
 * themselves are the schedule's. */
#ifndef FERRY_ENGINE_RESIDENCY_H
#define FERRY_ENGINE_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/context.h"
#include "engine/groups.h"

/* Where a group's device weights are. */
typedef enum engine_res_state {
    RES_ABSENT = 0, /* not on the device */
    RES_INFLIGHT,   /* a fetch is queued on the H2D stream (event `uploaded`) */
    RES_PRESENT,    /* on the device and fetched by the caller */
    RES_RETIRING,   /* released, kept for reuse until evicted (event `released`) */
} engine_res_state;

typedef struct engine_residency engine_residency;

/* At setup, after the groups' layout: the room kept for the gradients in
 * flight (the planner's count: engine_drain_window + 2 groups, the
 * largest) and the largest group's weights, charged as the arena charges. */
ferry_status res_open(const engine_ctx *c, engine_groups *gs, const engine_progress *p, engine_residency **out);
void res_close(engine_residency *r);

engine_res_state res_state(const engine_residency *r, int gi);
void res_set_state(engine_residency *r, int gi, engine_res_state s);
/* Where the schedule is: the last fetch's phase and group (eviction reads the order from it). */
void res_set_cursor(engine_residency *r, ferry_phase phase, int gi);
int res_prefetch_depth(const engine_residency *r);
int res_resident_max(const engine_residency *r);

/* The arena charge of a group's device weights. */
uint64_t res_weight_charge(const engine_residency *r, const engine_group *g);
/* Fetches from now until group h is next needed: by the learned order once
 * there is one; before, forward ascends, backward descends, then the next
 * step's forward. */
long res_next_use(const engine_residency *r, int h);
/* Frees the device weights of the RETIRING group (not keep_group) needed
 * furthest in the future, if that is later than `after` fetches from now
 * (-1: any); *evicted says whether one went. The weights are freed only
 * after the wait for their last use succeeds: when that wait fails, they
 * stay, and so does the error. */
ferry_status res_evict_after(engine_residency *r, int keep_group, long after, bool *evicted);
/* Evicts as res_evict_after does, the one needed furthest in the future
 * first, until at most max_resident groups hold device weights or none is
 * left to evict; *evicted (may be NULL) says how many. */
ferry_status res_evict(engine_residency *r, int keep_group, int max_resident, int *evicted);
/* The residency rule before `bytes` more of weights go on the device for a
 * group needed `dist` fetches from now; *met says whether it is met. */
ferry_status res_make_room(engine_residency *r, int gi, long dist, uint64_t bytes, bool *met);
/* The device weights of group gi from the arena (a fetch, dist 0, evicts
 * any released group the arena needs gone; a prefetch only those needed
 * after it), counted as resident. */
ferry_status res_alloc_weights(engine_residency *r, int gi, long dist);
/* Between steps: every group's copy on the device becomes RETIRING (a
 * prefetch lands first) and stays; none may be fetched. */
ferry_status res_settle(engine_residency *r);
/* Drops every RETIRING device copy (weights changed). */
ferry_status res_retire_all(engine_residency *r);

/* The order of fetches: recorded in the first step's first micro-batch,
 * learned at its end, followed by the passes after. */
void res_order_record(engine_residency *r, int gi, ferry_phase ph);
void res_order_learn(engine_residency *r);
bool res_order_learned(const engine_residency *r);
/* Whether the fetch of gi is where the record puts it (moves the pass on). */
bool res_order_follow(engine_residency *r, int gi, ferry_phase ph);
/* Says once that a step left the learned order. */
void res_order_report(engine_residency *r, int gi, ferry_phase ph);
/* Forgets a record not yet learned (an abandoned step); frees it with `free_learned`. */
void res_order_reset(engine_residency *r, bool free_learned);
/* The k-th group the pass needs after gi; -1 past the end. */
int res_ahead_of(const engine_residency *r, int gi, ferry_phase ph, int k);
/* After a step: one group deeper fetch-ahead when the step's forward
 * stalled on fetches, while the deeper window fits the room (alone only:
 * ranks must fetch alike). */
void res_adapt_prefetch(engine_residency *r, const ferry_step_timing *t, bool ranks);

#endif
