/* Params mode's device weights (engine/residency.c): which groups' weights
 * are on the device, in which of the plan's weight slots (one pool per size
 * class of groups, engine/plan.h), which one goes when its class has no
 * free slot (the one needed furthest ahead), and the order of fetches the
 * first step records, by which later steps prefetch and evict. Floor 4: it
 * reads the group table and the plan's slots; the fetches themselves are
 * the schedule's. */
#ifndef FERRY_ENGINE_RESIDENCY_H
#define FERRY_ENGINE_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/context.h"
#include "engine/groups.h"
#include "engine/plan.h"

/* Where a group's device weights are. */
typedef enum engine_res_state {
    RES_ABSENT = 0, /* not on the device */
    RES_INFLIGHT,   /* a fetch is queued on the H2D stream (event `uploaded`) */
    RES_PRESENT,    /* on the device and fetched by the caller */
    RES_RETIRING,   /* released, kept for reuse until evicted (event `released`) */
} engine_res_state;

typedef struct engine_residency engine_residency;

/* At setup, after placement: params mode's weight slots, as the plan
 * classed them (`plan`) and placement placed them (`slots`, class after
 * class), and the fetch-ahead the plan holds; `may_grow`: the plan kept no
 * weights because the embedder did not say what it takes (res_grow).
 * Other modes: none. */
ferry_status res_open(const engine_ctx *c, engine_groups *gs, const engine_progress *p, const engine_static_plan *plan,
                      void *const *slots, bool may_grow, engine_residency **out);
void res_close(engine_residency *r);

engine_res_state res_state(const engine_residency *r, int gi);
void res_set_state(engine_residency *r, int gi, engine_res_state s);
/* Where the schedule is: the last fetch's phase and group (eviction reads the order from it). */
void res_set_cursor(engine_residency *r, ferry_phase phase, int gi);
int res_prefetch_depth(const engine_residency *r);
int res_resident_max(const engine_residency *r);

/* Fetches from now until group h is next needed: by the learned order once
 * there is one; before, forward ascends, backward descends, then the next
 * step's forward. */
long res_next_use(const engine_residency *r, int h);
/* An embedder that did not declare its bytes (auto_activation_bytes 0)
 * had no weights kept in the plan: at the first fetch, with its
 * activations allocated, more weight slots are taken by the plan's rule
 * from what the budget has left then (the arena's dynamic region). Once;
 * nothing when there is no room. */
ferry_status res_grow(engine_residency *r);
/* Gives those slots back to the arena, their groups first given up (the
 * embedder asks for more than the budget left): how many bytes. */
uint64_t res_shrink(engine_residency *r);
/* Gives up the slot of every RETIRING group but keep_group, the one
 * needed furthest in the future first, until at most max_resident groups
 * hold device weights; *evicted (may be NULL) says how many. A slot is
 * given up only after the wait for its last use succeeds: when that wait
 * fails, it stays, and so does the error. */
ferry_status res_evict(engine_residency *r, int keep_group, int max_resident, int *evicted);
/* Room for group `target`'s weights needed `dist` fetches from now: a free
 * slot of its class, or the slot of a RETIRING group of its class (not
 * keep_group) needed after that; *met says whether there is one. */
ferry_status res_make_room(engine_residency *r, int keep_group, int target, long dist, bool *met);
/* Group gi's device weights in a slot of its class (a fetch, dist 0, takes
 * any released group's; a prefetch only one needed after it), counted as
 * resident. */
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
 * stalled on fetches, while every class has the slots the deeper window
 * needs (alone only: ranks must fetch alike). */
void res_adapt_prefetch(engine_residency *r, const ferry_step_timing *t, bool ranks);

#endif
