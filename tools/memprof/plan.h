/* The memory planner: predicts, without allocating anything, the peak device
 * and host memory of training GPT-2 through the engine (what train_gpt2
 * allocates: the engine's state from ferry_engine_setup, the activations of
 * gpt2_activations_create through the engine's arena, and the engine's pinned
 * host pool). The figures mirror engine/placement.c, engine/schedule.c and
 * models/gpt2.c byte for byte, rounding included (arena: 256 B, pool: 4 KiB).
 * Owns no memory beyond a call; reads no files.
 *
 * Params mode: the device holds group 0's weights (forward and backward keep
 * it) and at most prefetch + 1 other groups' (eviction keeps the window at
 * prefetch + 2 groups). Gradients: group 0's and those of groups still in
 * backward or draining to the host. The host thread waits for the compute
 * stream only when it evicts weights, which it stops doing for the last
 * prefetch + 1 blocks of backward, so up to prefetch + 2 other groups hold
 * gradients at once; they are freed at the next backward's first request,
 * so the next forward's weights add to them. The prediction takes the
 * largest groups for both, a bound when every D2H drain ends before the next
 * group's backward does (the engine does not cap drains in flight: it waits
 * for them only when the budget is hit). Under a tighter budget the engine
 * skips prefetches and waits for drains; device_min_bytes is the floor below
 * which no schedule fits (group 0 and the largest other group, weights and
 * gradients each, with the activations); near it, fragmentation decides. */
#ifndef FERRY_TOOLS_MEMPROF_PLAN_H
#define FERRY_TOOLS_MEMPROF_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "models/gpt2.h"

#define MEMPLAN_ARENA_GRANULE 256u  /* offload/arena.h ARENA_ALIGN */
#define MEMPLAN_POOL_GRANULE 4096u  /* offload/pool.h POOL_MIN_ALIGN */

typedef struct memplan_result {
    /* Device (the engine's arena), at the predicted peak, by category. */
    uint64_t device_bytes[FERRY_MEM_CATEGORY_COUNT];
    uint64_t device_total;
    /* The floor: no smaller device budget can work. device_total, except in
     * params mode (see the top of this file). */
    uint64_t device_min_bytes;
    /* Host (the engine's pinned pool); constant from setup on. */
    uint64_t host_bytes[FERRY_MEM_CATEGORY_COUNT];
    uint64_t host_total;

    uint64_t num_params;      /* as Hugging Face counts them */
    uint64_t group_elems;     /* elements of every group's buffer (padding included) */
    int groups;               /* L + 2 */
    int device_weight_groups; /* groups whose weights are on the device at the peak */
    int device_grad_groups;   /* groups whose gradients are on the device at the peak */
    int act_size;             /* bytes of a device element: 4 (host, fp32) or 2 (cuda, bf16) */
    uint64_t activations;     /* = device_bytes[FERRY_MEM_ACTIVATIONS] */
} memplan_result;

/* Predicts the peaks of training `cfg` with micro-batch B x T in `mode`.
 * backend: FERRY_BACKEND_HOST (fp32 on the "device") or FERRY_BACKEND_CUDA
 * (bf16); prefetch_groups as ferry_engine_config's (0..64). Bad values (an
 * invalid config, B < 1, T outside 1..max_seq_len, B x T > 2^31 - 1, a mode
 * or backend out of range) are FERRY_ERR_INVALID_ARGUMENT with a message. */
ferry_status memplan_predict(const gpt2_config *cfg, int B, int T, ferry_offload mode, bool recompute,
                             int prefetch_groups, ferry_backend_kind backend, memplan_result *out);

/* The largest B (1..65536) whose predicted device peak fits device_budget;
 * *max_B = 0 when not even B = 1 fits. Same arguments as memplan_predict. */
ferry_status memplan_max_batch(const gpt2_config *cfg, int T, ferry_offload mode, bool recompute,
                               int prefetch_groups, ferry_backend_kind backend, uint64_t device_budget,
                               int *max_B);

/* Device bytes gpt2_activations_create asks the engine for (each request
 * rounded to 256 B), for a backend kind rather than an open backend: the
 * same sum as gpt2_activations_bytes(). 0 on bad arguments. */
uint64_t memplan_activation_bytes(const gpt2_config *cfg, int B, int T, bool recompute,
                                  ferry_backend_kind backend);

#endif
