/* The engine's private state, shared by its files and by nothing else:
 * engine.c (create, config, groups, stats), placement.c (where each byte
 * lives, per offload mode), schedule.c (fetch, release, prefetch, gradient
 * drain during backward), step.c (norm, clipping, the update and the
 * upload), checkpoint.c (save and load). Embedders include engine/intree.h. */
#ifndef FERRY_ENGINE_ENGINE_H
#define FERRY_ENGINE_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "engine/intree.h"
#include "ferry.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "offload/arena.h"
#include "offload/pool.h"
#include "offload/trace.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "optim/threadpool.h"

#define ENGINE_NAME_MAX 64
#define ENGINE_MAX_GROUPS 65536

/* Where a group's device weights are (PARAMS mode moves them). */
typedef enum engine_residency {
    RES_ABSENT = 0, /* not on the device */
    RES_INFLIGHT,   /* a fetch is queued on the H2D stream (event `uploaded`) */
    RES_PRESENT,    /* on the device and fetched by the caller */
    RES_RETIRING,   /* released, kept for reuse until evicted (event `released`) */
} engine_residency;

/* Per-tile partial sums of a group's gradient norm, filled by pool workers
 * after the step's last drain (schedule.c) and added in tile order. */
typedef struct engine_norm_job {
    size_t ntiles;
    double *partial;   /* [ntiles] */
    unsigned char *bad; /* [ntiles] */
} engine_norm_job;

typedef struct engine_group {
    char name[ENGINE_NAME_MAX];
    size_t numel;
    ferry_group_options opts;
    float *init; /* the caller's initial values until setup */

    /* fp32 master weights and Adam moments: host pool (offload modes) or
     * device arena (NONE). */
    float *master, *m, *v;
    /* Host copies in the device type: gradients as drained, weights for upload. */
    void *host_grads, *host_weights;
    /* Device buffers; in PARAMS mode present only while fetched/retiring. */
    void *dev_weights, *dev_grads;

    backend_event *uploaded;   /* H2D of the weights done (h2d stream) */
    backend_event *released;   /* compute done reading the weights (compute stream) */
    backend_event *grads_done; /* compute done writing the gradients (compute stream) */
    backend_event *drained;    /* D2H of the gradients done (d2h stream) */
    backend_event *updated;    /* the CPU update of this group done (h2d stream) */
    backend_event *wait_begin, *wait_end; /* around the compute stream's wait in forward */
    backend_event *miss_begin, *miss_end; /* params mode: around the wait of a fetch off the learned order */
    bool miss_recorded;     /* miss_begin/end hold this step's first such wait */

    engine_residency residency;
    uint64_t last_use;      /* for eviction: the engine's fetch counter */
    bool fetched[2];        /* fetched in phase, not yet released */
    bool grads_acquired;    /* ferry_engine_grads called in this micro-batch */
    int released_backward;  /* micro-batches whose backward released this group */
    bool wait_recorded;     /* wait_begin/end hold this step's forward wait */
    bool wait_on_update;    /* ... and that wait was for the CPU update */

    tp_ticket *norm_ticket; /* the CPU's work on the drained gradients: their fp32 sum
                               (several micro-batches) and the norm's partials */
    float *grad_acc;        /* the fp32 sum of the step's micro-batch gradients, allocated
                               at the first step with several: host pool in the offload
                               modes, device in none */
    engine_norm_job *norm;
    size_t (*no_decay)[2];  /* sorted, disjoint {offset, count} ranges (copied) */
    size_t no_decay_count;
    tp_ticket **update_tickets; /* AdamW jobs of this group (one per decay segment),
                                   not yet handed to a stream */
    int update_count;
    double sumsq;
    bool nonfinite;

    /* Data parallelism (engine/shard.c): this rank's part of the group in
     * optimizer and params modes, [shard_lo, shard_lo + shard_n), inside a
     * slot of shard_cap elements (a whole number of NUMERICS_TILE, so the
     * norm's tiles are the same at every world size); the device weights
     * hold `padded` = world x shard_cap elements, rank r's slot at
     * r x shard_cap. Alone, and in offload none: 0, numel, numel, numel. */
    size_t shard_lo, shard_n, shard_cap, padded;
    backend_event *staged;   /* this rank's slot of the weights is on the device (h2d stream) */
    backend_event *reduced;  /* offload none: the gradients are summed across the ranks (gradient comm stream) */
    backend_event *wait_mid; /* compute stream: a timed weight wait is past the staged part */
    /* The NVMe tier (nvme_update.c): the group's region in the store, and
     * the update whose end its next upload waits for (0: none pending). */
    int nvme_region;
    uint64_t nvme_wait;
    /* The split update (split.c): the device's fp32 master weights and
     * moments of a group updated there, and the fp32 sum of its step's
     * gradients when steps accumulate micro-batches; NULL for a group the
     * CPU updates. The host arrays stay, current only after a pull. */
    float *dev_master, *dev_m, *dev_v, *dev_grad_acc;
} engine_group;

struct ferry_engine {
    ferry_engine_config cfg;
    ferry_dtype act;          /* element type on the device (F32 or BF16) */
    size_t act_size;
    backend *be;
    backend_stream *compute, *h2d, *d2h;
    arena *arena;
    pool *pool;
    tp_pool *threads;
    trace *trace;
    int numa_node;
    char describe[1536];

    engine_group *groups;
    int ngroups, cap_groups;
    bool setup_done;

    /* the step in progress */
    int64_t step;             /* optimizer steps taken */
    int micro_index, micro_count; /* -1 before the first begin_micro_batch of a step */
    bool accumulating;        /* this step has several micro-batches: gradients are summed
                                 in fp32 (grad_acc), each micro-batch's from zero */
    bool inference;           /* between begin_inference and end_inference */
    uint64_t fetch_counter;
    int resident_now, resident_max;
    /* Params mode's residency (schedule.c): where the schedule is (the last
     * fetch's phase and group: eviction reads the order from it), the arena
     * charge of the weights on the device, the room kept for the gradients
     * in flight (the planner's count of them), the largest group's weights,
     * and the groups fetched ahead now (prefetch_groups at least). */
    ferry_phase cur_phase;
    int cur_group;
    uint64_t resident_bytes, grads_reserve, largest_weights;
    int prefetch_depth;
    /* Params mode's learned order (schedule.c): the groups the first step's
     * first micro-batch fetched, per phase, in order; from the second step
     * on the schedule prefetches and evicts by it. order_first/last: each
     * group's first and last place in it (-1: never); order_pos: where the
     * pass under way is (the pass: order_step, order_micro, order_infer). */
    int *order[2], *order_first[2], *order_last[2];
    int order_len[2], order_cap[2], order_pos[2];
    bool order_learned, order_overflow, order_reported;
    int64_t order_step;
    int order_micro;
    bool order_infer;

    /* NONE mode: per-group device sum of squares and its scratch; the
     * backend's matmul workspace (ops_workspace_bytes: all matmuls run on the
     * compute stream, so one is never used by two at once) */
    double *dev_sumsq;
    void *dev_sumsq_scratch;
    void *dev_workspace;
    bool ops_ready;           /* ops_init done; engine_unplace shuts them down */

    /* the CPU update under way: tiles still to run, when it started and ended */
    atomic_size_t update_tiles_left;
    _Atomic uint64_t update_end_us;
    double update_start_ms, last_update_ms;

    /* delayed update: the update of the last step still to be uploaded */
    bool dpu_pending;

    /* what ferry_engine_alloc handed out: ferry_engine_free takes these only */
    void **user_allocs;
    size_t user_count, user_cap;

    /* timing of the last step */
    double last_step_ms;      /* clock_now_ms() of the last step; 0 before the first */
    ferry_step_timing timing, timing_acc;
    char last_error_context[128];

    /* dynamic loss scaling (on with f16 storage by default) and the count
     * of skipped steps; a checkpoint keeps both */
    bool scaling;
    loss_scaler scaler;
    int64_t skipped_steps;    /* steps skipped since the start of training */
    int skips_in_row;         /* consecutive skipped steps up to the last one */
    /* data parallelism across ranks (engine/shard.c); NULL when alone */
    struct engine_shard *dp;
    /* The NVMe tier: the folder (cfg.nvme_path, copied; NULL without a
     * disk), whether offload 'nvme' was asked (the device side then runs as
     * in optimizer mode, cfg.offload says OPTIMIZER), and the store and its
     * update thread, from setup on. */
    char *nvme_dir;
    bool nvme_asked;
    /* Offload auto (auto.c): asked at create (cfg.offload AUTO until
     * setup, then the mode chosen), and its one line. */
    bool auto_asked;
    char auto_reason[3072];
    struct engine_nvme *nvme;

    /* what the device's own software took before the engine's first byte
     * (device_share.c; 0 on the host backend) */
    uint64_t dev_total_bytes, dev_context_bytes, dev_library_bytes;

    /* The split update (split.c): groups 0..split_groups-1 are updated on
     * the device; whether the choice is made (forced, or auto after the
     * warm-up), the warm-up steps timed so far, and how many fitted the
     * spare budget when auto chose. */
    int split_groups;
    bool split_decided;
    int split_steps_timed;
    int split_auto_fit;
};

/* engine.c */
const char *engine_phase_name(ferry_phase phase);
ferry_status engine_check_group(const ferry_engine *e, int group, const char *what);

/* layout.c: what the engine holds, per offload mode — the one list that
 * placement allocates and the planner (plan.c) counts. */
typedef struct engine_buffer {
    bool device;            /* device arena; else the pinned host pool */
    ferry_mem_category cat;
    size_t elem_bytes;      /* bytes per parameter of the group (4: fp32; else the device type's) */
    const char *what;       /* "weights", "adam m", ... in names and traces */
    size_t slot;            /* offsetof(engine_group, field) of the pointer */
} engine_buffer;
#define ENGINE_GROUP_BUFFERS_MAX 8
/* The buffers every group holds from setup on in `mode`; returns the count. */
int engine_group_buffers(ferry_offload mode, size_t act_size, engine_buffer out[ENGINE_GROUP_BUFFERS_MAX]);
/* Which of those the NVMe tier holds on disk instead (bit i: b[i]; the
 * group's pointer stays NULL): with `disk`, the Adam moments, and with
 * `master_on_disk` the fp32 master weights too. */
unsigned engine_disk_buffers(const engine_buffer *b, int n, bool disk, bool master_on_disk);
/* The buffers of this engine's groups (its mode and device type), and in
 * *on_disk which of them its NVMe tier holds. */
/* Offload auto at setup, before anything is placed: sets cfg.offload (and
 * nvme_asked, nvme_dir) to the mode chosen (auto.c). */
ferry_status engine_auto_resolve(ferry_engine *e);

int engine_layout_buffers(const ferry_engine *e, engine_buffer out[ENGINE_GROUP_BUFFERS_MAX], unsigned *on_disk);
/* The engine's own device buffers (all of them workspace), in setup order. */
typedef struct engine_global_buffer {
    ferry_mem_category cat;
    size_t bytes;
    const char *what;
    size_t slot; /* offsetof(struct ferry_engine, field) */
} engine_global_buffer;
#define ENGINE_GLOBAL_BUFFERS_MAX 4
int engine_global_buffers(ferry_backend_kind kind, ferry_offload mode, int ngroups,
                          engine_global_buffer out[ENGINE_GLOBAL_BUFFERS_MAX]);
/* Params mode: groups whose weights may be on the device at once (the one
 * being computed, the ones fetched ahead, one retiring), and other groups
 * whose gradients may still be draining when one more is asked for. */
int engine_weight_window(int prefetch_groups);
/* The fp32 sum of a step's micro-batch gradients, when a step has several:
 * on the device in offload none, in the host pool otherwise. */
engine_buffer engine_accumulator_buffer(ferry_offload mode);
int engine_drain_window(int prefetch_groups);

/* placement.c: allocates the state of every group for the mode. */
ferry_status engine_place(ferry_engine *e);
void engine_unplace(ferry_engine *e);
/* Bytes per parameter the mode keeps on the device and the host. */
void engine_bytes_per_param(const ferry_engine *e, double *device, double *host);
/* Frees the device weights of the RETIRING group (not keep_group) needed
 * furthest in the future, if that is later than `after` fetches from now
 * (-1: any); *evicted says whether one went. The weights are freed only
 * after the wait for their last use succeeds: when that wait fails, they
 * stay, and so does the error. */
ferry_status engine_evict_after(ferry_engine *e, int keep_group, long after, bool *evicted);
/* Evicts as engine_evict_after does, the one needed furthest in the future
 * first, until at most max_resident groups hold device weights or none is
 * left to evict; *evicted (may be NULL) says how many. */
ferry_status engine_evict(ferry_engine *e, int keep_group, int max_resident, int *evicted);
/* Fetches from now until group h is next needed: by the learned order once
 * there is one; before, forward ascends, backward descends, then the next
 * step's forward. */
long engine_next_use(const ferry_engine *e, int h);
/* The arena charge of a group's device weights. */
uint64_t engine_weight_charge(const ferry_engine *e, const engine_group *g);
/* Allocates every group's grad_acc (engine_accumulator_buffer) that is not
 * there yet: the first step with several micro-batches does. */
ferry_status engine_ensure_accumulators(ferry_engine *e);
/* The gradients the update and the norm read: the fp32 sum when the step
 * accumulated micro-batches, else the storage type's (device in none, the
 * drained host copy otherwise). */
const void *engine_step_grads(const ferry_engine *e, const engine_group *g, ferry_dtype *dtype);
/* The device (params mode: upload) copy of a group's weights from its master
 * weights, after setup, set_weights or a load. Synchronous. */
ferry_status engine_write_device_weights(ferry_engine *e, engine_group *g);

/* schedule.c */
ferry_status engine_fetch(ferry_engine *e, int group, ferry_phase phase, backend_stream *s,
                          void **weights);
ferry_status engine_grads(ferry_engine *e, int group, backend_stream *s, void **grads);
ferry_status engine_release(ferry_engine *e, int group, ferry_phase phase, backend_stream *s);
/* Hands a group's pending update ticket to the h2d stream and records
 * `updated` after it: every later wait on the update goes through that event. */
ferry_status engine_update_barrier(ferry_engine *e, engine_group *g);
/* Waits on the host until every group's update is done. */
ferry_status engine_wait_updates(ferry_engine *e);
/* Drops every RETIRING device copy (weights changed). */
ferry_status engine_retire_all(ferry_engine *e);
/* Params mode between steps: every group's copy on the device becomes
 * RETIRING (a prefetch lands first) and stays; none may be fetched. */
ferry_status engine_settle_resident(ferry_engine *e);
/* Params mode after the update is queued: each group kept on the device is
 * rewritten in place from its upload copy, behind its own update and after
 * the compute stream's last read, in forward order. */
ferry_status engine_refresh_resident(ferry_engine *e);
/* Params mode after a step: one group deeper fetch-ahead when the step's
 * forward stalled on fetches, while the deeper window fits the room. */
void engine_adapt_prefetch(ferry_engine *e, const ferry_step_timing *t);
/* Params mode at the first step: what was recorded becomes the order later
 * steps prefetch by (out of host memory: the assumed order stays). */
void engine_order_learn(ferry_engine *e);
/* Forgets a record not yet learned (an abandoned step); frees it at teardown. */
void engine_order_reset(ferry_engine *e, bool free_learned);

/* step.c */
ferry_status engine_step(ferry_engine *e, const ferry_step_options *o, ferry_step_report *r);
/* The loss scale's first state and the skip counts' (engine.c, at create;
 * checkpoint.c restores them). */
void engine_scaling_reset(ferry_engine *e);

/* layout.c, data parallelism: the group buffers of `mode` when the state
 * is sharded across ranks (the drained gradients arrive summed, in fp32),
 * and how many elements each buffer holds for a group: the device weights
 * `padded`, the other device buffers `numel`, the host buffers `shard_cap`. */
int engine_group_buffers_sharded(ferry_offload mode, size_t act_size, bool sharded,
                                 engine_buffer out[ENGINE_GROUP_BUFFERS_MAX]);
size_t engine_buffer_elems(const engine_buffer *b, bool sharded, size_t numel, size_t shard_cap, size_t padded);
/* A rank's slot of a group of numel elements among `world` ranks. */
size_t engine_shard_cap(size_t numel, int world);
/* Elements of every rank's slot reduced at once (a multiple of 256, at most
 * the largest slot): the reduce buffers hold world x that, and that. */
size_t engine_reduce_chunk(int world, size_t most_cap);
/* nvme_update.c: the NVMe tier, when e->nvme_dir is set. */
/* Creates the store with a region per group (the arrays layout.c puts on
 * disk), opens it and starts the update thread. */
ferry_status engine_nvme_open(ferry_engine *e);
/* Stops the thread, removes the file, gives the window back. */
void engine_nvme_close(ferry_engine *e);
/* Reserves, in one slab of the host pool, exactly what setup is about to
 * allocate there (the planner's count), so --host-mem holds what memprof
 * plan says. */
ferry_status engine_nvme_reserve_host(ferry_engine *e);
/* Writes a group's initial state to disk: zero moments, and the master
 * weights from g->init when they live there. */
ferry_status engine_nvme_fill(ferry_engine *e, engine_group *g);
/* Hands the step's update to the thread and, in optimizer mode, queues each
 * group's upload behind its own update. */
ferry_status engine_nvme_update(ferry_engine *e, const ferry_step_options *o, float clip);
/* engine_update_barrier for a group whose update is on the thread. */
ferry_status engine_nvme_barrier(ferry_engine *e, engine_group *g);
/* Waits until the thread has finished the update (its writes included);
 * returns the tier's failure, if any. */
ferry_status engine_nvme_wait_idle(ferry_engine *e);
/* The tier's failure (sticky), FERRY_OK while none. */
ferry_status engine_nvme_check(ferry_engine *e);
/* host_weights (the device type) from the master weights on disk. */
ferry_status engine_nvme_convert_master(ferry_engine *e, engine_group *g);
/* A group's master weights on disk to or from `host` (numel floats). */
ferry_status engine_nvme_master_io(ferry_engine *e, engine_group *g, float *host, bool to_engine);
/* The chunks of one of a group's fp32 arrays on disk (0 master, 1 m, 2 v),
 * as checkpoint.c walks them: fn gets a pointer into the window for each
 * piece of at most `chunk` bytes, in order; `to_engine`: the pieces are
 * written back to disk after fn fills them. */
typedef ferry_status (*engine_chunk_fn)(void *ctx, void *state, bool on_device, void *buf, size_t bytes);
ferry_status engine_nvme_chunks(ferry_engine *e, engine_group *g, int array, bool to_engine, void *buf,
                                size_t chunk, engine_chunk_fn fn, void *ctx);
/* Adds the disk's figures to memory stats, and a sentence to describe. */
void engine_nvme_stats(const ferry_engine *e, ferry_memory_stats *st);
void engine_nvme_describe(const ferry_engine *e, char *buf, size_t cap);
/* split.c: the split update of optimizer mode. */
/* The config's split fields in range (at create). */
ferry_status engine_split_check_config(const ferry_engine_config *c);
/* Before placement: a forced split where the mode allows it, and no more
 * groups than the engine has. */
ferry_status engine_split_setup(ferry_engine *e);
/* After placement: the forced groups' state on the device, or an error
 * saying what they need and what the budget has left. */
ferry_status engine_split_place_forced(ferry_engine *e);
/* At the end of a step: auto's choice once the warm-up steps are timed
 * (moves state to the device once, with nothing in flight). */
ferry_status engine_split_after_step(ferry_engine *e);
/* The smallest number of leading groups whose device update lets the CPU
 * update every later group before the forward reaches it (cpu_share: each
 * group's share of the parameters), at most `fit`. Pure: tested alone. */
int engine_split_auto_choice(const double *cpu_share, int ngroups, double update_ms, double forward_ms, int fit);
/* The device groups' state, host arrays to device (after a load or
 * set_weights) and back (before a save or get_weights). Synchronous. */
ferry_status engine_split_push(ferry_engine *e);
ferry_status engine_split_pull(ferry_engine *e);
/* The device groups' fp32 gradient sums, at the first accumulating step. */
ferry_status engine_split_ensure_accumulators(ferry_engine *e);
/* Frees every device group's arrays: all updates go back to the CPU. */
void engine_split_release(ferry_engine *e);

/* device_share.c: what the CUDA context and libraries take of the card, so
 * that a budget emulating a smaller card can be told from the card itself.
 * Each is a no-op on the host backend, and best effort (a failed
 * cudaMemGetInfo leaves 0). */
/* At create, right after the backend opened: the card's total, and what is
 * in use once the context exists. */
void engine_device_share_open(ferry_engine *e);
/* The device's free bytes now (0 on host); before ops_init... */
uint64_t engine_device_free(ferry_engine *e);
/* ...and after it: what starting the libraries took. */
void engine_device_share_libraries(ferry_engine *e, uint64_t free_before);
/* Fills the device_total/context/library/outside fields of st. */
void engine_device_share_stats(ferry_engine *e, ferry_memory_stats *st);
/* Appends "; on the card ..." to buf (a sentence of describe), cuda only. */
void engine_device_share_note(const ferry_engine *e, char *buf, size_t cap);

#endif
