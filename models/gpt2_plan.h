/* The memory of training GPT-2 or a Llama-family model through the engine, predicted without
 * allocating anything: the engine's state from engine_plan_memory (the same
 * layout table setup allocates from) and the activations from
 * gpt2_activations_bytes (the same plan gpt2_activations_create allocates
 * from), for a backend and storage type that need not be present here
 * (plan a 24 GB card on a laptop). What memprof plan prints and the GPU
 * check sizes its batch with. Owns no memory beyond a call; reads no files.
 *
 * The device side is the engine's static memory plan (engine/plan.h): the
 * activations lie in the embedder's range of it, params mode's weights and
 * gradients in slots per size class of groups; the engine places by the
 * same plan, so its device peak is this prediction, byte for byte, and no
 * order of allocations can fragment it. device_min_bytes is the smallest
 * plan that runs (params mode: no fetch ahead, no weights kept). */
#ifndef FERRY_MODELS_GPT2_PLAN_H
#define FERRY_MODELS_GPT2_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/intree.h"
#include "ferry.h"
#include "models/gpt2.h"
#include "models/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpt2_plan {
    /* Device (the engine's arena), at the predicted peak, by category. */
    uint64_t device_bytes[FERRY_MEM_CATEGORY_COUNT];
    uint64_t device_total;
    /* The floor: no smaller device budget can work. device_total, except in
     * params mode. */
    uint64_t device_min_bytes;
    /* Host (the engine's pinned pool); constant from setup on. */
    uint64_t host_bytes[FERRY_MEM_CATEGORY_COUNT];
    uint64_t host_total;

    uint64_t num_params;      /* as Hugging Face counts them */
    uint64_t group_elems;     /* elements of every group's buffer (padding included) */
    int groups;               /* L + 2 */
    int device_weight_groups; /* groups whose weights are on the device at the peak */
    int device_grad_groups;   /* groups whose gradients are on the device at the peak */
    int act_size;             /* bytes of a device element: 4 (f32) or 2 (bf16) */
    uint64_t activations;     /* = device_bytes[FERRY_MEM_ACTIVATIONS] */
    uint64_t disk_bytes;      /* the NVMe tier's state file; its window is host_bytes[FERRY_MEM_NVME] */
    uint64_t region_bytes;    /* the engine's planned region (= device_total: every device byte is in it) */
    int prefetch_depth;       /* params mode: the fetch-ahead the plan holds under the budget */
} gpt2_plan;

/* What to plan: training `cfg` with micro-batch batch x seq in `offload`
 * mode on `backend` (HOST or CUDA) storing `dtype` on the device (AUTO: the
 * backend's, f32 on host and bf16 on cuda); prefetch_groups as
 * ferry_engine_config's (0..64); micro_batches per step (more than one adds
 * the fp32 sum of their gradients, 4 bytes per parameter); ranks sharing
 * the state (data parallelism: each rank's host holds 1/ranks of it in the
 * optimizer and params modes, and the device the reduce buffers). */
typedef struct gpt2_plan_request {
    const gpt2_config *cfg;    /* GPT-2 ... */
    const llama_config *llama; /* ... or, when not NULL, a model of the Llama family (cfg is then ignored) */
    int batch, seq;
    ferry_offload offload;
    bool recompute;
    int prefetch_groups;
    int micro_batches;
    ferry_backend_kind backend;
    ferry_dtype dtype;
    int ranks;         /* data parallel ranks (0 or 1: alone): each rank's figures, rank 0's (the largest) */
    uint64_t device_budget; /* the engine's budget; params mode plans the deepest fetch-ahead that fits it
                               and keeps released weights in what is left (every group's when they all
                               fit); 0: only the window prefetch_groups asks for */
    int split_groups;       /* optimizer mode: the first groups updated on the device (device_update_groups
                               forced; 0: none, or auto, whose choice the plan leaves out) */
    ferry_moments moments;  /* the host Adam moments' form (F32 = 0; BF16, 8BIT: offload optimizer or params) */
    int upload_window;      /* ferry_engine_config's upload_window (0: the default policy) */
    int upload_window_chunks;           /* its chunks (0 = 4) */
    uint64_t upload_window_chunk_bytes; /* its chunks' size (0 = 16 MiB) */
} gpt2_plan_request;

/* The NVMe tier, as the engine config's nvme_ fields: with offload NVME (a
 * NULL one there means the defaults, moments only), or PARAMS with the
 * state on disk. */
typedef struct gpt2_plan_disk {
    bool master;                 /* the master weights on disk too */
    uint64_t window_bytes;       /* 0: the default */
    uint64_t block_bytes;        /* 0: the default */
} gpt2_plan_disk;

/* Predicts the peaks. Bad values (an invalid config, batch < 1, seq outside
 * 1..max_seq_len, batch x seq > 2^31 - 1, a mode or backend out of range,
 * micro_batches < 1, a model too large to count in 64 bits) are
 * FERRY_ERR_INVALID_ARGUMENT. */
ferry_status gpt2_plan_predict(const gpt2_plan_request *rq, gpt2_plan *out);
/* The same with the NVMe tier's settings (NULL: no disk, or with offload
 * NVME its defaults). */
ferry_status gpt2_plan_predict_disk(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, gpt2_plan *out);

/* Where every device byte of the run lies: the engine's planned buffers by
 * offset, the activations (the embedder's range) one by one in the order
 * gpt2_activations_create asks for them, end to end as the engine serves
 * them; *region the planned region's size. *out malloc'd: free() it. */
ferry_status gpt2_plan_layout(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, engine_layout_entry **out,
                              int *n, uint64_t *region);

/* The largest batch (1..65536) whose predicted device peak fits
 * device_budget, rq->batch aside; *max_B = 0 when not even 1 fits. */
ferry_status gpt2_plan_max_batch(const gpt2_plan_request *rq, uint64_t device_budget, int *max_B);

/* The largest GPT-2-shaped model of the dN family (N layers, 64N wide, N
 * heads of 64; rq->cfg's vocabulary and context) whose training as `rq`
 * says fits every budget that is not 0: the device peak, the host pool, the
 * NVMe tier's file. *layers = N (0 when not even d1 fits); *plan (may be
 * NULL) its prediction; `disk` as gpt2_plan_predict_disk's. Found by
 * bisection: every figure grows with N. */
ferry_status gpt2_plan_largest_model(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, uint64_t device_budget,
                                     uint64_t host_budget, uint64_t disk_budget, int *layers, gpt2_plan *plan);

/* Offload auto, predicted: what the engine's offload AUTO chooses for this
 * run (engine_auto_choose, the function its setup calls, on the model's
 * groups and activations), and whether to recompute: only when no mode fits
 * without it (rq->recompute true forces it on). rq->offload is ignored.
 * device_budget: the engine's (0: FERRY_ERR_INVALID_ARGUMENT, a choice
 * needs a budget); host_available: the host memory of this rank (0:
 * unknown, not checked; the engine reads it from the machine, see ferry.h);
 * disk: the NVMe tier's settings when a folder is given (NULL: none).
 * Nothing fitting, even with recompute, is FERRY_ERR_OUT_OF_MEMORY with the
 * engine's message. */
typedef struct gpt2_plan_auto_result {
    ferry_offload offload; /* NONE, OPTIMIZER, PARAMS or NVME */
    bool disk;             /* PARAMS with the state on disk */
    bool recompute;
    uint64_t activations;  /* what the engine is told the embedder takes */
    gpt2_plan plan;        /* the chosen mode's prediction (params: its residency under the budget) */
    char reason[1024];     /* the engine's one line, and a word on recompute */
} gpt2_plan_auto_result;

ferry_status gpt2_plan_auto(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, uint64_t device_budget,
                            uint64_t host_available, gpt2_plan_auto_result *out);

/* The largest batch (1..65536) that gpt2_plan_auto fits in some mode, with
 * recompute if needed (rq->batch aside); *max_B = 0 and *out untouched when
 * not even 1 fits; *out (may be NULL) the choice at *max_B. */
ferry_status gpt2_plan_auto_max_batch(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, uint64_t device_budget,
                                      uint64_t host_available, int *max_B, gpt2_plan_auto_result *out);

#ifdef __cplusplus
}
#endif
#endif
