/* The engine as an in-tree embedder sees it: the public API (ferry.h) plus
 * the two kernels-layer handles an embedder needs to launch ferry's own ops
 * (backend/ops/ops.h) on the engine's compute stream, and the planner that says
 * what an engine will allocate before one exists. models/, train/, tools/ and
 * tests above engine/ include this, never engine/engine.h (the engine's
 * private state).
 *
 * An embedder outside this tree brings its own kernels and needs only
 * ferry.h: ferry_engine_compute_stream() is the native stream
 * (cudaStream_t), ferry_engine_dtype() the element type of the weights and
 * gradients it gets, ferry_engine_fetch/grads/release the buffers.
 *
 * Contract: work that uses a pointer from ferry_engine_fetch() or
 * ferry_engine_grads() goes on engine_embed_stream(e) and nowhere else, after
 * the call that returned the pointer and before the matching release. The
 * handles live as long as the engine. */
#ifndef FERRY_ENGINE_INTREE_H
#define FERRY_ENGINE_INTREE_H

#include "ferry.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's backend: open it once with ferry_engine_create(); ops and
 * activation sizes (gpt2_activations_create) are asked of it. */
backend *engine_embed_backend(ferry_engine *e);
/* The engine's compute stream: the one stream every op on the engine's
 * buffers is launched on; ferry_engine_fetch() makes it wait for the weights. */
backend_stream *engine_embed_stream(ferry_engine *e);

/* ---- planning: what an engine will allocate, without opening one ---- */

/* The engine and the groups to plan for. */
typedef struct engine_plan_request {
    ferry_backend_kind backend; /* HOST or CUDA: decides the matmul workspace */
    ferry_dtype dtype;          /* the device type; AUTO = the backend's (f32 host, bf16 cuda) */
    ferry_offload offload;
    int prefetch_groups;        /* as ferry_engine_config's, 0..64 */
    int micro_batches;          /* per step; more than one adds the fp32 sum of their gradients */
    const size_t *group_numel;  /* every group's size, in order */
    int ngroups;
    /* The NVMe tier: offload NVME, or PARAMS with `disk`. */
    bool disk;                  /* PARAMS: the state on disk (NVME implies it) */
    bool disk_master;           /* the master weights on disk too */
    uint64_t disk_window_bytes; /* as ferry_engine_config's nvme_window_bytes (0: the default) */
    uint64_t disk_block_bytes;  /* as nvme_block_bytes (0: the default) */
    int ranks;                  /* data parallel ranks; 0 or 1 = alone. Each rank's figures, rank 0's (the
                                   largest) */
    /* Params mode's residency: released weights stay on the device while
     * the budget less everything else (and the gradients' room) holds them. */
    uint64_t device_budget;     /* the engine's device budget; 0: count only the window the schedule needs */
    uint64_t embedder_bytes;    /* what the embedder takes from that budget (activations) */
} engine_plan_request;

/* What the engine allocates, by category, charged as its allocators charge
 * (arena and pool rounding included), computed from the same layout table
 * setup allocates from (engine/layout.c). */
typedef struct engine_memory_plan {
    uint64_t device_bytes[FERRY_MEM_CATEGORY_COUNT]; /* at the engine's device peak */
    uint64_t host_bytes[FERRY_MEM_CATEGORY_COUNT];   /* the host pool, constant from setup on */
    /* Params mode: the engine's part of the floor below which no schedule
     * fits: the two largest groups, weights and gradients each (setup's
     * buffers aside). Other modes: the device total. */
    uint64_t device_min_bytes;
    int device_weight_groups; /* groups whose weights are on the device at the peak */
    int device_grad_groups;   /* groups whose gradients are on the device at the peak */
    size_t act_size;          /* bytes of a device element */
    uint64_t disk_bytes;      /* the NVMe tier's state file (its window is host_bytes[FERRY_MEM_NVME]) */
} engine_memory_plan;

/* Params mode is planned for its worst schedule: at most
 * engine_weight_window groups' weights and engine_drain_window + 2 groups'
 * gradients at once, taken as the largest groups; with a device_budget,
 * residency's weights on top: every group's when they all fit the budget
 * beside the rest (exact), else up to the budget (the peak is then the
 * budget, a bound). FERRY_ERR_INVALID_ARGUMENT naming a bad field. */
ferry_status engine_plan_memory(const engine_plan_request *rq, engine_memory_plan *out);

/* ---- offload auto: the choice, from the plan's byte counts ---- */

/* The candidates in the order offload auto tries them. */
typedef enum engine_auto_candidate {
    ENGINE_AUTO_NONE = 0,
    ENGINE_AUTO_OPTIMIZER,
    ENGINE_AUTO_PARAMS,
    ENGINE_AUTO_NVME,        /* offload NVME: the device as in optimizer, moments on disk */
    ENGINE_AUTO_PARAMS_DISK, /* offload PARAMS with the state on disk */
    ENGINE_AUTO_CANDIDATES,
} engine_auto_candidate;

typedef struct engine_auto_request {
    /* The groups, backend, dtype, prefetch, micro-batches, ranks and the
     * embedder's device bytes (its activations); offload, disk and
     * device_budget are set per candidate. */
    engine_plan_request plan;
    uint64_t device_budget;  /* the engine's device budget */
    uint64_t host_available; /* host memory this rank may take; 0 = unknown (not checked) */
    bool nvme;               /* a folder for the NVMe tier is given (alone only) */
} engine_auto_request;

typedef struct engine_auto_choice {
    engine_auto_candidate pick;      /* ENGINE_AUTO_CANDIDATES when nothing fits */
    ferry_offload offload;           /* the mode to run: NONE, OPTIMIZER, PARAMS or NVME */
    bool disk;                       /* PARAMS with the state on disk */
    bool considered[ENGINE_AUTO_CANDIDATES];
    uint64_t device_bytes[ENGINE_AUTO_CANDIDATES]; /* engine + embedder, at the device peak */
    uint64_t host_bytes[ENGINE_AUTO_CANDIDATES];   /* the host pool */
    char reason[1024];               /* one line: what was chosen and why, the bytes */
} engine_auto_choice;

/* The first candidate from `first` on that fits the device budget and the
 * host memory (see ferry.h's "offload auto"). Nothing fitting is
 * FERRY_ERR_OUT_OF_MEMORY with a message naming every candidate's bytes
 * (out is filled either way); a bad request FERRY_ERR_INVALID_ARGUMENT. */
ferry_status engine_auto_choose(const engine_auto_request *rq, engine_auto_candidate first, engine_auto_choice *out);

/* "none", "optimizer", "params", "nvme", "params with the state on disk". */
const char *engine_auto_candidate_name(engine_auto_candidate c);

#ifdef __cplusplus
}
#endif
#endif
