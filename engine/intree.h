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
    bool collective;            /* data parallelism on even at one rank (data_parallel 1): the state laid
                                   out and reduced as with several */
    /* The budget the plan must fit (0: none given). Params mode plans the
     * deepest fetch-ahead (up to prefetch_groups) that fits it, and keeps
     * released weights on the device in the room left: every group's when
     * they all fit. */
    uint64_t device_budget;
    /* What the embedder takes through ferry_engine_alloc (its activations):
     * planned in the engine's region, where its allocations are then served
     * end to end (ferry_engine_config's auto_activation_bytes). */
    uint64_t embedder_bytes;
    int split_groups;           /* optimizer mode: the first groups updated on the device (forced; 0: none) */
    const char *const *group_names; /* for the layout's and the trace's names (NULL: "group N") */
    ferry_moments moments;      /* the host moments' form (ferry_engine_config's); F32 = 0 */
    /* The upload window as ferry_engine_config has it (0, 0, 0: the
     * default policy and sizes): the ring instead of the upload copies. */
    int upload_window, upload_window_chunks;
    uint64_t upload_window_chunk_bytes;
} engine_plan_request;

/* What the engine allocates, by category, charged as its allocators charge
 * (arena and pool rounding included), computed from the same layout table
 * setup allocates from (engine/layout.c) by the static memory plan setup
 * places its buffers by (engine/plan.h): every device byte with a place in
 * the step, the embedder's declared bytes included, lies at an offset of one
 * region, so the device peak is the region's size, whatever the order of
 * allocation. */
typedef struct engine_memory_plan {
    uint64_t device_bytes[FERRY_MEM_CATEGORY_COUNT]; /* at the engine's device peak */
    uint64_t host_bytes[FERRY_MEM_CATEGORY_COUNT];   /* the host pool, constant from setup on */
    /* The smallest plan that runs: params mode with no fetch ahead and no
     * weights kept; other modes: the device total. */
    uint64_t device_min_bytes;
    int device_weight_groups; /* groups whose weights can be on the device at once (params: the slots) */
    int device_grad_groups;   /* groups whose gradients can be on the device at once */
    size_t act_size;          /* bytes of a device element */
    uint64_t disk_bytes;      /* the NVMe tier's state file (its window is host_bytes[FERRY_MEM_NVME]) */
    uint64_t region_bytes;    /* the planned region: the device total */
    int prefetch_depth;       /* params mode: the fetch-ahead the plan holds (0..prefetch_groups) */
    int planned_buffers;      /* buffers in the region */
} engine_memory_plan;

/* The plan's byte counts. Params mode is planned for its schedule: per
 * size class of groups, weight slots for the window (prefetch + 2 groups)
 * and gradient slots for the drains in flight, each slot a fixed place in
 * the region (no order of fetches can fragment it), plus kept weights in
 * the room the budget leaves. FERRY_ERR_INVALID_ARGUMENT naming a bad
 * field. */
ferry_status engine_plan_memory(const engine_plan_request *rq, engine_memory_plan *out);

/* One buffer of the plan's region, as engine_plan_layout lists it. */
typedef struct engine_layout_entry {
    char name[112];
    ferry_mem_category cat;
    uint64_t offset, bytes;
    int32_t start, end; /* alive in schedule positions [start, end); end INT32_MAX: to the run's end */
    bool embedder;      /* the embedder's range: its allocations lie in it end to end, first fit */
} engine_layout_entry;

/* The plan's buffers, by offset (*out malloc'd: free() it), and the
 * region's size: where each device byte is and why. */
ferry_status engine_plan_layout(const engine_plan_request *rq, engine_layout_entry **out, int *n, uint64_t *region);

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
