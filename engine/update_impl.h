/* Inside the update component: the base every implementation shares and
 * the table of what an implementation provides (engine/update.h says what
 * each does). Included by update.c and update_*.c alone. */
#ifndef FERRY_ENGINE_UPDATE_IMPL_H
#define FERRY_ENGINE_UPDATE_IMPL_H

#include <stdatomic.h>

#include "engine/update.h"
#include "optim/adamw.h"

typedef struct update_ops {
    const char *name;
    size_t state_bytes; /* of the implementation's own state, after the base (update_state) */
    ferry_status (*start)(engine_update *u);                 /* NULL: nothing to start */
    void (*stop)(engine_update *u);                          /* NULL: nothing to stop */
    ferry_status (*fill)(engine_update *u, engine_group *g); /* required */
    ferry_status (*run)(engine_update *u, const ferry_step_options *o, float clip); /* required */
    ferry_status (*write_weights)(engine_update *u, engine_group *g);                /* NULL: update_write_offloaded */
    ferry_status (*master_io)(engine_update *u, engine_group *g, float *host, bool to_engine); /* NULL: host arrays */
    ferry_status (*barrier)(engine_update *u, engine_group *g); /* NULL: update_ticket_barrier */
    ferry_status (*wait_idle)(engine_update *u);   /* NULL: the barriers and `updated` suffice */
    ferry_status (*check)(engine_update *u);       /* NULL: never fails on its own */
    ferry_status (*setup_done)(engine_update *u);
    ferry_status (*after_step)(engine_update *u, const ferry_step_timing *t);
    ferry_status (*accumulators)(engine_update *u);
    ferry_status (*pull)(engine_update *u);
    ferry_status (*push)(engine_update *u);
    ferry_status (*state_chunks)(engine_update *u, engine_group *g, int array, bool to_engine, void *buf,
                                 size_t chunk, update_chunk_fn fn, void *ctx);
    /* The master weights of a group whose g->master is NULL (held elsewhere)
     * into its upload copy, host_weights. */
    ferry_status (*convert_master)(engine_update *u, engine_group *g);
    /* Setup: the part of a group's state held outside memory. */
    ferry_status (*fill_outside)(engine_update *u, engine_group *g);
    int (*device_groups)(const engine_update *u);
    void (*stats)(const engine_update *u, ferry_memory_stats *st);
    void (*describe)(const engine_update *u, char *buf, size_t cap);
} update_ops;

/* The CPU AdamW jobs of one group not yet handed to a stream (one per
 * decay segment). */
typedef struct update_tickets {
    tp_ticket **t;
    int count;
} update_tickets;

struct engine_update {
    const update_ops *ops;
    update_env env;
    update_tickets *tickets; /* per group */
    /* the CPU update under way: tiles still to run, when it started and ended */
    atomic_size_t tiles_left;
    _Atomic uint64_t end_us;
    double start_ms, last_ms;
    bool dpu_pending; /* delayed update: the update of the last step still to be uploaded */
    char note[256];
    bool note_new;
    /* the implementation's own state follows (ops->state_bytes) */
    _Alignas(max_align_t) unsigned char state[];
};

static inline void *update_state(engine_update *u) { return u->state; }
static inline const void *update_state_c(const engine_update *u) { return u->state; }
static inline ferry_offload update_mode(const engine_update *u) { return ctx_mode(u->env.ctx); }

extern const update_ops update_resident_ops, update_cpu_ops, update_split_ops, update_nvme_ops;

/* ---- shared by the implementations (update.c) ---- */

/* A group's AdamW hyperparameters for the step: the group's lr scale, and
 * weight decay where the group takes it (and `decay`: not in a no-decay range). */
adamw_hparams update_hparams(const engine_group *g, const ferry_step_options *o, bool decay);
/* The parts of ranges in[0..n) ({offset, length}) inside [lo, lo + len), from
 * lo, into out (room for n); returns how many. */
size_t update_clip_ranges(const size_t (*in)[2], size_t n, size_t lo, size_t len, size_t (*out)[2]);
/* A group's update as calls over its segments: the decayed parts and the
 * ranges exempt from weight decay alternate, each cut to this rank's part
 * of the group (all of it alone). Element-wise, so the split changes no bit. */
typedef ferry_status (*update_segment_fn)(engine_update *u, engine_group *g, size_t first, size_t n,
                                          adamw_hparams hp, float clip);
ferry_status update_for_each_segment(engine_update *u, engine_group *g, const ferry_step_options *o, float clip,
                                     update_segment_fn fn);
/* The offload modes' update begins: the last one's time noted, the clock
 * started, and in params mode the copies on the device settled. */
ferry_status update_begin_offloaded(engine_update *u);
/* Optimizer mode: each group's upload from `first` on follows its own
 * update, in forward order. */
ferry_status update_upload_after(engine_update *u, int first);
/* Params mode after the update is queued: each group kept on the device is
 * rewritten in place from its upload copy, behind its own update and after
 * the compute stream's last read, in forward order. */
ferry_status update_refresh_resident(engine_update *u);
/* The CPU's jobs of a group as the h2d stream's wait (records `updated`). */
ferry_status update_ticket_barrier(engine_update *u, engine_group *g);
/* The CPU's AdamW of groups [first, n) submitted to the optimizer threads. */
ferry_status update_submit_cpu(engine_update *u, const ferry_step_options *o, float clip, int first);
/* The offload modes' setup fill and device copy (ops hooks cover what is
 * held outside memory). */
ferry_status update_fill_offloaded(engine_update *u, engine_group *g);
ferry_status update_write_offloaded(engine_update *u, engine_group *g);
/* Sets the note update_take_note hands out once. */
void update_set_note(engine_update *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
