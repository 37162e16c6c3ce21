/* ferry: the public C API of the ZeRO-style CPU-offload training engine.
 *
 * Conventions, for every function in this header:
 * - Every call that can fail returns a ferry_status; FERRY_OK (0) is success.
 *   On failure, ferry_last_error() returns a sentence for a person: what was
 *   wrong, the value seen, and what to do. The message is thread-local.
 * - Handles are opaque. Whoever creates a handle destroys it with the matching
 *   _destroy function; destroy functions accept NULL.
 * - Versioned structs start with `size` and are initialised by their _INIT
 *   macro, which stamps the sizeof the caller was compiled against. Fields are
 *   only ever added at the end, and a struct the caller fills never ends in
 *   padding, so a size names one version: the library reads a caller's older,
 *   smaller struct and takes its own defaults for the fields it lacks, and
 *   writes only the fields an older caller has room for. A size that is no
 *   version's, or larger than the library knows (a newer header than the
 *   library), is FERRY_ERR_INVALID_ARGUMENT.
 * - The library never calls exit() or abort() on a caller's error. */
#ifndef FERRY_H
#define FERRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's exported symbols; everything else is hidden. */
#if defined(FERRY_BUILDING_LIBRARY)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0
#define FERRY_VERSION_STRING "0.1.0"

/* Status of every call that can fail. */
typedef enum ferry_status {
    FERRY_OK = 0,
    FERRY_ERR_INVALID_ARGUMENT, /* a value outside its documented range */
    FERRY_ERR_OUT_OF_MEMORY,    /* device budget or host memory exhausted */
    FERRY_ERR_IO,               /* a file could not be read or written */
    FERRY_ERR_FORMAT,           /* a file is not what its header claims */
    FERRY_ERR_BACKEND,          /* CUDA, cuBLAS, NCCL or the host backend failed */
    FERRY_ERR_STATE,            /* a call out of order (e.g. step before grads) */
    FERRY_ERR_UNSUPPORTED,      /* asked for something this build or machine lacks */
} ferry_status;

/* A constant name for a status ("FERRY_ERR_IO"); never NULL. Any thread. */
FERRY_API const char *ferry_status_string(ferry_status status);

/* The message of the last failed call on this thread, or "" if none. The
 * string is owned by the library and valid until the next ferry_ call on this
 * thread. Any thread. */
FERRY_API const char *ferry_last_error(void);

/* The library's version as "MAJOR.MINOR.PATCH"; compare with
 * FERRY_VERSION_STRING to detect a header/library mismatch. Any thread. */
FERRY_API const char *ferry_version(void);

/* Which implementation of the backend runs the work. */
typedef enum ferry_backend_kind {
    FERRY_BACKEND_AUTO = 0, /* $FERRY_BACKEND if set, else cuda if a GPU is present, else host */
    FERRY_BACKEND_HOST,     /* CPU threads emulate device streams; plain memory */
    FERRY_BACKEND_CUDA,     /* CUDA streams, cuBLASLt, hand-written kernels */
} ferry_backend_kind;

/* "auto", "host" or "cuda"; never NULL. */
FERRY_API const char *ferry_backend_name(ferry_backend_kind kind);

/* Parses "host", "cuda" or "auto". FERRY_ERR_INVALID_ARGUMENT on anything else. */
FERRY_API ferry_status ferry_backend_parse(const char *name, ferry_backend_kind *out);

/* What the library found on this machine. Initialise with
 * FERRY_SYSTEM_INFO_INIT before calling ferry_system_probe(). */
typedef struct ferry_system_info {
    size_t size;                  /* sizeof(ferry_system_info), stamped by the macro */
    ferry_backend_kind backend;   /* what FERRY_BACKEND_AUTO resolves to here */
    int cuda_compiled;            /* 1 if this library was built with CUDA */
    int gpu_count;                /* CUDA devices visible (0 without a driver) */
    char gpu_name[128];           /* device 0's name, or "" */
    uint64_t gpu_memory_bytes;    /* device 0's total memory, or 0 */
    int gpu_numa_node;            /* NUMA node nearest device 0, or -1 if unknown */
    int numa_nodes;               /* NUMA nodes (1 on a machine without NUMA) */
    int cores;                    /* physical cores */
    int pus;                      /* hardware threads */
    uint64_t host_memory_bytes;   /* total host memory */
    char simd[16];                /* best CPU SIMD level: "avx512", "avx2" or "scalar" */
} ferry_system_info;

#define FERRY_SYSTEM_INFO_INIT                                                                \
    {                                                                                         \
        sizeof(ferry_system_info), /* size */                                                 \
        FERRY_BACKEND_AUTO,        /* backend */                                              \
        0,                         /* cuda_compiled */                                        \
        0,                         /* gpu_count */                                            \
        "",                        /* gpu_name */                                             \
        0,                         /* gpu_memory_bytes */                                     \
        -1,                        /* gpu_numa_node */                                        \
        0,                         /* numa_nodes */                                           \
        0,                         /* cores */                                                \
        0,                         /* pus */                                                  \
        0,                         /* host_memory_bytes */                                    \
        "",                        /* simd */                                                 \
    }

/* Fills *info with the backend, GPU and topology this machine offers. A
 * missing GPU or driver is not an error (gpu_count = 0). Any thread. */
FERRY_API ferry_status ferry_system_probe(ferry_system_info *info);

/* ---- memory ---- */
/* What an allocation is for. Every device allocation, and every allocation of
 * the pinned host pool, carries one; memprof breaks peaks down by it. */
typedef enum ferry_mem_category {
    FERRY_MEM_PARAMS = 0,   /* parameters (bf16 on the device, fp32 master on the host) */
    FERRY_MEM_GRADS,        /* gradients */
    FERRY_MEM_OPTIMIZER,    /* optimizer state (Adam moments) */
    FERRY_MEM_ACTIVATIONS,  /* activations kept for backward, and their gradients */
    FERRY_MEM_STAGING,      /* transfer buffers between host and device */
    FERRY_MEM_WORKSPACE,    /* scratch of the ops (cuBLAS workspace, reductions) */
    FERRY_MEM_OTHER,        /* anything else */
    FERRY_MEM_NVME,         /* the pinned window the NVMe tier streams optimizer state through */
    FERRY_MEM_CATEGORY_COUNT
} ferry_mem_category;

/* "params", "grads", "optimizer", "activations", "staging", "workspace",
 * "other", "nvme window"; "unknown" for a value outside the enum. Never NULL. Any thread. */
FERRY_API const char *ferry_mem_category_name(ferry_mem_category category);

/* Slots of the per-category arrays below: room for categories added later
 * without moving the fields that follow. Slots past FERRY_MEM_CATEGORY_COUNT
 * stay 0. */
#define FERRY_MEM_CATEGORY_SLOTS 16

/* Where the bytes of an engine are, now and at their worst. Initialise with
 * FERRY_MEMORY_STATS_INIT. Device figures count what was handed out (rounded
 * to the arena's 256-byte granule); host figures are the pinned pool's. */
typedef struct ferry_memory_stats {
    size_t size;                                        /* sizeof(ferry_memory_stats), stamped by the macro */
    uint64_t device_budget_bytes;                       /* the hard cap on device memory */
    uint64_t device_reserved_bytes;                     /* obtained from the device (<= budget) */
    uint64_t device_current_bytes[FERRY_MEM_CATEGORY_SLOTS]; /* in use now, by category */
    uint64_t device_peak_bytes[FERRY_MEM_CATEGORY_SLOTS];    /* each category's own high-water mark */
    uint64_t device_total_current_bytes;                /* in use now, all categories */
    uint64_t device_total_peak_bytes;                   /* high-water mark of the total */
    double device_fragmentation;                        /* 1 - largest free block / free bytes, in reserved memory */
    uint64_t host_limit_bytes;                          /* the pinned memory budget; 0 = none */
    uint64_t host_reserved_bytes;                       /* slabs obtained from the OS */
    uint64_t host_in_use_bytes;                         /* handed out now */
    uint64_t host_peak_bytes;                           /* high-water mark of host_in_use_bytes */
    uint64_t host_pinned_bytes;                         /* reserved bytes that are page-locked */
    uint64_t host_unpinned_bytes;                       /* reserved bytes pinning was refused for */
    double host_fragmentation;                          /* 1 - largest free block / free bytes, in the slabs */
    uint64_t disk_bytes;                                /* the NVMe tier's state file (0 without one) */
    uint64_t disk_window_bytes;                         /* its pinned window (also in the host figures) */
    /* What a card of a given size leaves to the engine (cuda; all 0 on the
     * host backend), measured with cudaMemGetInfo: */
    uint64_t device_total_bytes;                        /* the device's memory */
    uint64_t device_context_bytes;                      /* in use once the CUDA context existed, at
                                                           ferry_engine_create: the context, and any
                                                           other process's memory */
    uint64_t device_library_bytes;                      /* taken by starting cuBLASLt, at setup */
    uint64_t device_outside_bytes;                      /* now: in use on the device outside the
                                                           engine's reserve (the context, library code
                                                           loaded since, the caller's own allocations,
                                                           other processes) */
    uint64_t device_comm_bytes;                         /* taken by starting NCCL's communicators (data
                                                           parallelism), at create */
    uint64_t device_margin_bytes;                       /* with device_budget_bytes 0: the free memory
                                                           left out of the budget for what loads on
                                                           first use (kernel code, a kernel's stack) */
} ferry_memory_stats;

#define FERRY_MEMORY_STATS_INIT                                                               \
    {                                                                                         \
        sizeof(ferry_memory_stats), /* size */                                                \
        0,                          /* device_budget_bytes */                                 \
        0,                          /* device_reserved_bytes */                               \
        {0},                        /* device_current_bytes */                                \
        {0},                        /* device_peak_bytes */                                   \
        0,                          /* device_total_current_bytes */                          \
        0,                          /* device_total_peak_bytes */                             \
        0.0,                        /* device_fragmentation */                                \
        0,                          /* host_limit_bytes */                                    \
        0,                          /* host_reserved_bytes */                                 \
        0,                          /* host_in_use_bytes */                                   \
        0,                          /* host_peak_bytes */                                     \
        0,                          /* host_pinned_bytes */                                   \
        0,                          /* host_unpinned_bytes */                                 \
        0.0,                        /* host_fragmentation */                                  \
        0,                          /* disk_bytes */                                          \
        0,                          /* disk_window_bytes */                                   \
        0,                          /* device_total_bytes */                                  \
        0,                          /* device_context_bytes */                                \
        0,                          /* device_library_bytes */                                \
        0,                          /* device_outside_bytes */                                \
        0,                          /* device_comm_bytes */                                   \
        0,                          /* device_margin_bytes */                                 \
    }
/* ---- end memory ---- */

/* ---- engine ---- */
/* ======================================================================
 * The engine: ZeRO-style offload of training state on one GPU.
 *
 * A model is a list of parameter groups (for GPT-2: the embeddings, each
 * transformer block, the final layernorm), each one contiguous buffer. The
 * embedder adds its groups with their initial fp32 values; from then on the
 * engine owns the master weights and the optimizer state and decides where
 * every byte lives. Each training step:
 *
 *   for each micro-batch k of n:
 *     ferry_engine_begin_micro_batch(e, k, n);
 *     forward:  for each group g in order: ferry_engine_fetch(e, g, FERRY_PHASE_FORWARD, &w);
 *               ... compute with w on the compute stream ...;
 *               ferry_engine_release(e, g, FERRY_PHASE_FORWARD);
 *     backward: for each group g (any order): ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
 *               ferry_engine_grads(e, g, &dw);  ... add gradients into dw ...;
 *               ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
 *   ferry_engine_step(e, &hyper, &report);
 *
 * Device pointers are valid for work submitted to the engine's compute stream
 * (ferry_engine_compute_stream) after the call that returned them; an embedder
 * that computes on the calling thread (the host backend) calls
 * ferry_engine_synchronize() first. A release tells the engine the group is no
 * longer read (forward) or that its gradients for this micro-batch are complete
 * (backward): from that point the engine may move or free its memory.
 *
 * Threads: create, use and destroy an engine from one thread; the engine runs
 * its own threads (streams, the CPU optimizer pool).
 * ====================================================================== */

typedef struct ferry_engine ferry_engine;

/* Where the training state lives. */
typedef enum ferry_offload {
    FERRY_OFFLOAD_NONE = 0,  /* everything on the device; AdamW on the device */
    FERRY_OFFLOAD_OPTIMIZER, /* ZeRO-Offload: weights on the device; master weights,
                                moments and the update on the host */
    FERRY_OFFLOAD_PARAMS,    /* ZeRO-3 style: weights too live on the host and are
                                fetched group by group */
    FERRY_OFFLOAD_NVME,      /* ZeRO-Infinity's third tier: the device as in OPTIMIZER; the Adam
                                moments (and with nvme_master the fp32 master weights) in a
                                file in nvme_path, streamed through a pinned window; PARAMS
                                with nvme_path puts the same state on disk */
    FERRY_OFFLOAD_AUTO,      /* chosen at ferry_engine_setup() from byte counts (see "offload
                                auto" below); ferry_engine_offload() then says which */
} ferry_offload;

/* "none", "optimizer", "params", "nvme", "auto"; never NULL. */
FERRY_API const char *ferry_offload_name(ferry_offload mode);
/* Parses those names; FERRY_ERR_INVALID_ARGUMENT on anything else. */
FERRY_API ferry_status ferry_offload_parse(const char *name, ferry_offload *out);

/* How the Adam moments are stored in host memory (and in checkpoints and
 * the NVMe tier), per parameter:
 *   F32   both moments fp32: 8 bytes; torch.optim.AdamW to the last bit.
 *   BF16  both moments bf16, stochastically rounded from the fp32 update
 *         with random bits hashed from (moments_seed, step, element
 *         index): 4 bytes; deterministic whatever the threads, bitwise on
 *         resume.
 *   8BIT  bitsandbytes' blockwise 8-bit Adam: one byte a moment through a
 *         dynamic map (signed for m, unsigned for v) and an fp32 absmax per
 *         block of 256 elements: 2 bytes + 8/256.
 * optim/moments.h documents the maps, the rounding and the layout. */
typedef enum ferry_moments {
    FERRY_MOMENTS_F32 = 0,
    FERRY_MOMENTS_BF16,
    FERRY_MOMENTS_8BIT,
} ferry_moments;

/* "f32", "bf16", "8bit"; never NULL. */
FERRY_API const char *ferry_moments_name(ferry_moments form);
/* Parses those names; FERRY_ERR_INVALID_ARGUMENT on anything else. */
FERRY_API ferry_status ferry_moments_parse(const char *name, ferry_moments *out);

/* Element types. The engine stores weights, gradients and activations on
 * the device in F32, BF16 or F16; I32 and I64 are for files and
 * conversions. */
typedef enum ferry_dtype {
    FERRY_DTYPE_AUTO = 0, /* the backend's: fp32 on host; on cuda bf16 from sm_80, f16 on sm_70/75 */
    FERRY_DTYPE_F32,
    FERRY_DTYPE_BF16,     /* bfloat16: needs sm_80 or newer on cuda */
    FERRY_DTYPE_F16,      /* IEEE half: with dynamic loss scaling (see ferry_loss_scaling) */
    FERRY_DTYPE_I32,      /* integers in files (token ids) */
    FERRY_DTYPE_I64,
} ferry_dtype;

/* "auto", "f32", "bf16", "f16", "i32", "i64"; "unknown" outside the enum. */
FERRY_API const char *ferry_dtype_name(ferry_dtype dtype);
/* Parses those names; FERRY_ERR_INVALID_ARGUMENT on anything else. */
FERRY_API ferry_status ferry_dtype_parse(const char *name, ferry_dtype *out);

/* Dynamic loss scaling, as torch's GradScaler: fp16 gradients underflow
 * unless the loss is multiplied by a large scale before backward. The
 * embedder multiplies its loss's gradient by ferry_engine_loss_scale(); the
 * step divides it back out before the norm, the clipping and the update; a
 * step whose gradients overflowed (inf/NaN) is skipped and the scale
 * multiplied by the backoff factor; after growth_interval clean steps in a
 * row it is multiplied by the growth factor. */
typedef enum ferry_loss_scaling {
    FERRY_LOSS_SCALING_AUTO = 0, /* dynamic with F16 storage, off otherwise */
    FERRY_LOSS_SCALING_OFF,      /* never (ferry_engine_loss_scale() is 1) */
    FERRY_LOSS_SCALING_DYNAMIC,  /* whatever the storage type */
} ferry_loss_scaling;

typedef struct ferry_engine_config {
    size_t size;                   /* sizeof(ferry_engine_config), stamped by the macro */
    ferry_backend_kind backend;    /* AUTO: $FERRY_BACKEND, else cuda if a GPU is present */
    uint64_t device_budget_bytes;  /* hard cap on all device memory; 0 = what the device has free */
    uint64_t host_budget_bytes;    /* cap on the engine's host memory; 0 = no cap */
    ferry_offload offload;         /* default FERRY_OFFLOAD_OPTIMIZER; AUTO chooses at setup */
    int prefetch_groups;           /* PARAMS mode: groups fetched ahead; default 2, 0..64 */
    int optimizer_threads;         /* CPU AdamW threads; 0 = every core of the chosen node */
    int numa_node;                 /* node for host state and optimizer threads; -1 = nearest the GPU */
    ferry_dtype dtype;             /* device storage: AUTO (the backend's: f32 host; bf16 on cuda
                                      from sm_80, f16 on sm_70/75), F32 (host only), BF16 (sm_80+), or
                                      F16 (with loss scaling); the host backend stores the 16-bit types
                                      rounded where the CUDA ops store them, so those paths run
                                      without a GPU */
    int delayed_update;            /* 1: one-step delayed update (DPU); changes the math */
    const char *trace_path;        /* memory trace (binary records, docs/memprof.md) for memprof; NULL = off */
    int verbose;                   /* 1: print the placement chosen at setup to stderr */
    int reserved;                  /* 0; keeps the struct free of tail padding (a size names one version) */
    ferry_loss_scaling loss_scaling; /* default AUTO: dynamic with F16 storage */
    float loss_scale_init;         /* the first scale; default 65536 (2^16) */
    double loss_scale_growth;      /* x this after loss_scale_interval clean steps; default 2, > 1 */
    double loss_scale_backoff;     /* x this on a step with inf/NaN gradients; default 0.5, in (0, 1) */
    int loss_scale_interval;       /* clean steps in a row before growing; default 2000, >= 1 */
    int loss_scale_max_skips;      /* with loss scaling on: this many skipped steps in a row (a scale
                                      that collapsed) make ferry_engine_step fail with FERRY_ERR_STATE
                                      instead of training on nothing; default 20; 0 = never */
    /* The NVMe tier (offload NVME, or PARAMS with a path): */
    const char *nvme_path;         /* folder on a fast disk for the state file (copied); NULL = no disk */
    uint64_t nvme_window_bytes;    /* pinned host window the state streams through; 0 = 256 MiB */
    uint64_t nvme_block_bytes;     /* bytes per I/O and per CRC-32C; 0 = 1 MiB; a multiple of 4096 */
    int nvme_queue_depth;          /* I/Os in flight; 0 = 16, 1..1024 */
    int nvme_master;               /* 1: the fp32 master weights on disk too; 0: only the Adam moments */
    /* Data parallelism (see "data parallelism" below): 0 = join the world a
     * launcher (mpirun, srun) started when it has more than one rank, else
     * train alone; 1 = always go through the collectives, even at world size
     * 1 (the sharded paths on one GPU); -1 = never (every rank trains alone). */
    int data_parallel;
    int comm_timeout_s;            /* a collective waiting longer fails the run; 0 = $FERRY_COMM_TIMEOUT,
                                      else 600 */
    /* The split update (offload OPTIMIZER alone, without the NVMe tier or
     * the delayed update): the first groups in forward order keep their
     * fp32 master weights and Adam moments on the device and are updated
     * there, bitwise as the CPU would. -1 = auto: after the first two steps,
     * as many as make the CPU update of the rest fit in the forward that
     * overlaps it, within the device budget left after weights, gradients
     * and activations (0 where the split is not available); 0 = every
     * update on the CPU; N > 0 = the first N groups (setup fails when they
     * do not fit the budget, or where the split is not available). */
    int device_update_groups;
    int device_update_warmup;      /* auto: the steps timed before the split is chosen; 0 = 2, 1..1000 */
    /* Offload AUTO's view of the embedder (ignored by the other modes): */
    uint64_t auto_activation_bytes; /* device bytes the embedder will take with ferry_engine_alloc
                                       at its peak (activations, scratch); 0 = none */
    int auto_micro_batches;        /* micro-batches per step it will run; 0 = 1 */
    int reserved_auto;             /* 0; keeps the struct free of tail padding */
    /* How the Adam moments are stored (ferry_moments above). F32 (the
     * default) is bitwise what it always was. BF16 and 8BIT are read and
     * written by the CPU AdamW as they are, so they need the state on the
     * host: offload OPTIMIZER or PARAMS, alone or with data parallelism
     * (not NONE, the NVMe tier or a forced split; the split's auto keeps
     * every update on the CPU). With data parallelism each rank holds its
     * part in the compact form, and N ranks with one micro-batch each train
     * bitwise as one process with N on the host backend. Checkpoints save
     * the form as it is (a resume is bitwise, at any world size); loading a
     * file of another form converts it, with a warning on stderr (with
     * data parallelism each rank converts its part, as one process
     * converts the whole). */
    ferry_moments moments;
    int reserved_moments;          /* 0 */
    uint64_t moments_seed;         /* BF16: the stochastic rounding's seed */
    /* The upload window (offload OPTIMIZER and PARAMS): instead of a whole
     * second host copy of the weights in the device type (2 bytes per
     * parameter with bf16), the master weights are converted into a small
     * ring of pinned chunks as each upload streams: after a group's CPU
     * update (optimizer mode) and at every fetch (params mode). The device
     * weights are bitwise the same either way (the same round-to-nearest-
     * even conversion); the host pool holds the ring instead of the copies.
     *   upload_window  FERRY_UPLOAD_WINDOW_AUTO (0, the default): on with
     *                  compact moments (BF16, 8BIT: memory was asked for),
     *                  with data parallelism too (each rank's slot), off
     *                  with F32 moments and with the NVMe tier; _ON: on
     *                  (refused with offload NONE or the NVMe tier); _OFF:
     *                  off.
     *   upload_window_chunks      chunks in the ring; 0 = 4, 1..64
     *   upload_window_chunk_bytes bytes of a chunk; 0 = 16 MiB, else a
     *                  multiple of 64 from 64 bytes to 1 GiB.
     * The ring never holds more than the largest group needs. */
    int upload_window;
    int upload_window_chunks;
    uint64_t upload_window_chunk_bytes;
} ferry_engine_config;

/* Values of ferry_engine_config.upload_window. */
enum {
    FERRY_UPLOAD_WINDOW_AUTO = 0,
    FERRY_UPLOAD_WINDOW_ON = 1,
    FERRY_UPLOAD_WINDOW_OFF = -1,
};

#define FERRY_ENGINE_CONFIG_INIT                                                              \
    {                                                                                         \
        sizeof(ferry_engine_config), /* size */                                               \
        FERRY_BACKEND_AUTO,          /* backend */                                            \
        0,                           /* device_budget_bytes: all free device memory */        \
        0,                           /* host_budget_bytes: no cap */                          \
        FERRY_OFFLOAD_OPTIMIZER,     /* offload */                                            \
        2,                           /* prefetch_groups */                                    \
        0,                           /* optimizer_threads: every core of the node */          \
        -1,                          /* numa_node: nearest the GPU */                         \
        FERRY_DTYPE_AUTO,            /* dtype */                                              \
        0,                           /* delayed_update: off */                                \
        NULL,                        /* trace_path: no trace */                               \
        0,                           /* verbose: quiet */                                     \
        0,                           /* reserved */                                           \
        FERRY_LOSS_SCALING_AUTO,     /* loss_scaling: dynamic with f16 */                     \
        65536.0f,                    /* loss_scale_init */                                    \
        2.0,                         /* loss_scale_growth */                                  \
        0.5,                         /* loss_scale_backoff */                                 \
        2000,                        /* loss_scale_interval */                                \
        20,                          /* loss_scale_max_skips */                               \
        NULL,                        /* nvme_path: no disk */                                 \
        0,                           /* nvme_window_bytes: 256 MiB */                         \
        0,                           /* nvme_block_bytes: 1 MiB */                            \
        0,                           /* nvme_queue_depth: 16 */                               \
        0,                           /* nvme_master: moments only */                          \
        0,                           /* data_parallel: join a launcher's world */             \
        0,                           /* comm_timeout_s: $FERRY_COMM_TIMEOUT, else 600 */      \
        -1,                          /* device_update_groups: auto */                         \
        0,                           /* device_update_warmup: 2 steps */                      \
        0,                           /* auto_activation_bytes: none */                        \
        0,                           /* auto_micro_batches: 1 */                              \
        0,                           /* reserved_auto */                                      \
        FERRY_MOMENTS_F32,           /* moments: fp32 */                                      \
        0,                           /* reserved_moments */                                   \
        0,                           /* moments_seed */                                       \
        FERRY_UPLOAD_WINDOW_AUTO,    /* upload_window: on with compact moments */             \
        0,                           /* upload_window_chunks: 4 */                            \
        0,                           /* upload_window_chunk_bytes: 16 MiB */                  \
    }

/* Creates an engine: opens the backend, its streams and the optimizer thread
 * pool. Checks every field and fails with FERRY_ERR_INVALID_ARGUMENT naming a
 * bad one. On success *out owns all it allocates; free with
 * ferry_engine_destroy(). */
FERRY_API ferry_status ferry_engine_create(const ferry_engine_config *cfg, ferry_engine **out);
/* Waits for outstanding work and frees everything. NULL is fine. */
FERRY_API void ferry_engine_destroy(ferry_engine *e);
/* ferry_engine_destroy() that also says whether what the engine wrote on its
 * way was written whole: FERRY_ERR_IO naming the memory trace when any of its
 * writes failed (a full disk; the trace then ends early). The engine is gone
 * either way. NULL is fine. */
FERRY_API ferry_status ferry_engine_close(ferry_engine *e);

/* Options of one parameter group. */
typedef struct ferry_group_options {
    size_t size;          /* sizeof(ferry_group_options) */
    float lr_scale;       /* the group's lr = step lr x lr_scale; default 1 */
    int weight_decay;     /* 1: apply the step's weight decay to this group; 0: never */
    /* Ranges of the group exempt from weight decay (biases, layernorms), as
     * {offset, count} pairs in elements; copied. Ignored when weight_decay is 0. */
    const size_t (*no_decay)[2];
    size_t no_decay_count;
} ferry_group_options;

#define FERRY_GROUP_OPTIONS_INIT                                                              \
    {                                                                                         \
        sizeof(ferry_group_options), /* size */                                               \
        1.0f,                        /* lr_scale */                                           \
        1,                           /* weight_decay: on */                                   \
        NULL,                        /* no_decay: no exempt ranges */                         \
        0,                           /* no_decay_count */                                     \
    }

/* Adds a group of `numel` parameters with initial values `init` (copied; the
 * caller keeps its buffer; every value must be finite). opts may be NULL for
 * the defaults. Groups are numbered 0, 1, ... in the order added. Only before
 * ferry_engine_setup(): after it, FERRY_ERR_STATE. `name` (not NULL) is copied
 * (for messages and traces). */
FERRY_API ferry_status ferry_engine_add_group(ferry_engine *e, const char *name, size_t numel,
                                              const float *init, const ferry_group_options *opts,
                                              int *group_id);

/* Places every group for the chosen offload mode: allocates device and host
 * state within the budgets, uploads the initial weights. A budget too small
 * fails here with FERRY_ERR_OUT_OF_MEMORY and a message that says what to
 * change. Once. */
FERRY_API ferry_status ferry_engine_setup(ferry_engine *e);

/* Offload AUTO: setup counts, from the same layout table it allocates from,
 * the device and host bytes of each mode for this rank (under data
 * parallelism the sharded host state is 1/N of it), adds
 * auto_activation_bytes to the device side, and takes the first that fits:
 *   none       weights, gradients, fp32 master, Adam moments and the
 *              activations fit the device budget;
 *   optimizer  weights, gradients and activations fit the device, and the
 *              host state fits the host memory available;
 *   params     its window of groups (prefetch_groups ahead) and the
 *              activations fit the device, the host state fits the host;
 *   nvme       with nvme_path, alone (not under data parallelism), when the
 *              host cannot hold the state: offload NVME if optimizer's device
 *              side fits, else PARAMS with the state on disk.
 * The host memory available is the smallest of /proc/meminfo's MemAvailable,
 * the cgroup's memory limit less its usage, and host_budget_bytes when set,
 * shared by the ranks on the machine. Under data parallelism every rank
 * takes the most offloaded of the ranks' choices, so all agree. The choice
 * uses byte counts only, never timings: it is made once, and since every
 * mode computes the same values (see "Numerics"), it changes where bytes
 * live, not the results. Nothing fitting is FERRY_ERR_OUT_OF_MEMORY naming
 * each mode's bytes against the budgets. The delayed update needs offload
 * OPTIMIZER and is refused with AUTO. */
/* The one line offload AUTO wrote at setup: what it chose and why, with the
 * byte counts (printed to stderr with verbose). "" for the other modes or
 * before setup; NULL engine: "". Owned by the engine. */
FERRY_API const char *ferry_engine_auto_reason(const ferry_engine *e);

typedef enum ferry_phase {
    FERRY_PHASE_FORWARD = 0,
    FERRY_PHASE_BACKWARD = 1,
} ferry_phase;

/* Starts micro-batch `index` (0-based) of `count` of the current step. The
 * first one zeroes the gradients. */
FERRY_API ferry_status ferry_engine_begin_micro_batch(ferry_engine *e, int index, int count);
/* Forward passes without gradients (evaluation, sampling), between steps:
 * fetch and release in FERRY_PHASE_FORWARD only. The weights are those of
 * the last step (waiting for its update). */
FERRY_API ferry_status ferry_engine_begin_inference(ferry_engine *e);
FERRY_API ferry_status ferry_engine_end_inference(ferry_engine *e);

/* The device weights of a group, ready for work on the compute stream
 * submitted after this call. In PARAMS mode this also fetches the next
 * groups ahead. A group fetched twice in one phase without a release between
 * is FERRY_ERR_STATE. */
FERRY_API ferry_status ferry_engine_fetch(ferry_engine *e, int group, ferry_phase phase, void **weights);
/* The device gradient buffer of a group (backward only, after its fetch):
 * add this micro-batch's gradients into it. */
FERRY_API ferry_status ferry_engine_grads(ferry_engine *e, int group, void **grads);
/* The caller is done with the group in this phase (see above). */
FERRY_API ferry_status ferry_engine_release(ferry_engine *e, int group, ferry_phase phase);

/* Hyperparameters of one optimizer step (AdamW, as torch.optim.AdamW). */
typedef struct ferry_step_options {
    size_t size;
    float lr, beta1, beta2, eps, weight_decay;
    float max_grad_norm; /* clip the global L2 norm to this; <= 0: no clipping */
} ferry_step_options;

#define FERRY_STEP_OPTIONS_INIT                                                               \
    {                                                                                         \
        sizeof(ferry_step_options), /* size */                                                \
        1e-3f,                      /* lr */                                                  \
        0.9f,                       /* beta1 */                                               \
        0.999f,                     /* beta2 */                                               \
        1e-8f,                      /* eps */                                                 \
        0.0f,                       /* weight_decay */                                        \
        0.0f,                       /* max_grad_norm: no clipping */                          \
    }

typedef struct ferry_step_report {
    size_t size;
    int64_t step;       /* optimizer steps taken so far (skipped ones not counted) */
    double grad_norm;   /* global L2 norm before clipping (inf/NaN when skipped); of the
                           unscaled gradients when a loss scale is on */
    float clip_coef;    /* 1 = not clipped */
    int skipped;        /* 1: a gradient held inf/NaN; weights and moments untouched */
    int bad_group;      /* the first group with a non-finite gradient, when skipped */
    float loss_scale;   /* the loss scale this step's gradients carried; 0: loss scaling off */
    int64_t skipped_steps; /* steps skipped since the start of training (a checkpoint keeps it) */
    int skips_in_row;   /* consecutive skipped steps up to this one (0 after a step taken) */
    int reserved;       /* 0 */
} ferry_step_report;

#define FERRY_STEP_REPORT_INIT                                                                \
    {                                                                                         \
        sizeof(ferry_step_report), /* size */                                                 \
        0,                         /* step */                                                 \
        0.0,                       /* grad_norm */                                            \
        1.0f,                      /* clip_coef */                                            \
        0,                         /* skipped */                                              \
        -1,                        /* bad_group */                                            \
        0.0f,                      /* loss_scale */                                           \
        0,                         /* skipped_steps */                                        \
        0,                         /* skips_in_row */                                         \
        0,                         /* reserved */                                             \
    }

/* Ends the step: the loss scale divided out, global-norm clipping, the
 * inf/NaN check (and with loss scaling, the scale's update), and the AdamW
 * update of every group. Returns once the update is under way: the CPU
 * update and the upload overlap the next step's forward, whose fetch of each
 * group waits for exactly that group. Every group must have been released in
 * backward since the last step (else FERRY_ERR_STATE). report may be NULL.
 * With loss scaling on, the step that makes loss_scale_max_skips skipped
 * steps in a row fails with FERRY_ERR_STATE saying the scale collapsed (it
 * is still skipped and counted, and the report is filled). */
FERRY_API ferry_status ferry_engine_step(ferry_engine *e, const ferry_step_options *opts,
                                         ferry_step_report *report);

/* Blocks until all work of the engine submitted so far (compute, transfers,
 * CPU update) has finished. */
FERRY_API ferry_status ferry_engine_synchronize(ferry_engine *e);

/* The compute stream's native handle (cudaStream_t on cuda, NULL on host). */
FERRY_API void *ferry_engine_compute_stream(ferry_engine *e);
/* The getters below accept NULL and then return a value no engine has:
 * FERRY_BACKEND_AUTO, (ferry_offload)-1 (ferry_offload_name says "unknown"),
 * FERRY_DTYPE_AUTO, 0 groups, -1 steps. */
/* The backend in use (AUTO resolved). */
FERRY_API ferry_backend_kind ferry_engine_backend(const ferry_engine *e);
/* The mode in use; with offload AUTO, the mode it chose (AUTO before setup). */
FERRY_API ferry_offload ferry_engine_offload(const ferry_engine *e);
/* The device element type (after AUTO is resolved). */
FERRY_API ferry_dtype ferry_engine_dtype(const ferry_engine *e);
FERRY_API int ferry_engine_group_count(const ferry_engine *e);
/* Optimizer steps taken (skipped ones not counted), as a checkpoint restores them. */
FERRY_API int64_t ferry_engine_steps(const ferry_engine *e);
/* Groups whose update runs on the device now (the split update: groups 0
 * to this minus 1); 0 before auto has chosen, or where nothing is split. -1
 * for NULL. */
FERRY_API int ferry_engine_device_update_groups(const ferry_engine *e);
/* The factor to multiply the loss (the gradient the backward starts from)
 * by for the next step: the dynamic loss scale, or 1 when loss scaling is
 * off (and for NULL). A checkpoint restores it. */
FERRY_API float ferry_engine_loss_scale(const ferry_engine *e);

/* Device memory for activations and scratch, from the same budget as the
 * weights. `category` is FERRY_MEM_ACTIVATIONS, _WORKSPACE or _OTHER. */
FERRY_API ferry_status ferry_engine_alloc(ferry_engine *e, ferry_mem_category category,
                                          const char *name, size_t bytes, void **ptr);
/* Frees what ferry_engine_alloc returned; NULL is fine. Any other pointer (the
 * weights or gradients of a group, one freed already) is
 * FERRY_ERR_INVALID_ARGUMENT and changes nothing. */
FERRY_API ferry_status ferry_engine_free(ferry_engine *e, void *ptr);

/* Copies a group's fp32 master weights into out (numel floats) / replaces them
 * (and the device copy) from values. Waits for the update under way. */
FERRY_API ferry_status ferry_engine_get_weights(ferry_engine *e, int group, float *out);
FERRY_API ferry_status ferry_engine_set_weights(ferry_engine *e, int group, const float *values);

/* Marks a phase in the memory trace ("forward", "step 12", ...); free when
 * tracing is off. The trace is written out up to the marker: once a write of
 * it has failed (a full disk), this returns FERRY_ERR_IO naming the trace,
 * so a caller can stop then rather than learn it at ferry_engine_close. */
FERRY_API ferry_status ferry_engine_mark(ferry_engine *e, int64_t step, const char *phase);

/* Device and host memory, by category, now and at peak. */
FERRY_API ferry_status ferry_engine_memory_stats(ferry_engine *e, ferry_memory_stats *out);

/* Where the last step's time went. Durations in milliseconds. */
typedef struct ferry_step_timing {
    size_t size;
    double step_ms;             /* wall time between the last two ferry_engine_step calls */
    double compute_wait_transfer_ms;  /* compute stream stalled on weight fetches */
    double compute_wait_optimizer_ms; /* compute stream stalled on the CPU update + upload */
    double optimizer_ms;        /* wall time of the most recent finished optimizer update, from
                                   ferry_engine_step() to its last group done (in the offload modes
                                   the update runs on after the call returns, so this is the
                                   previous step's) */
    double optimizer_wait_grads_ms;   /* the CPU update waited for gradients to land */
    double transfer_h2d_bytes, transfer_d2h_bytes;
    int max_resident_groups;    /* most groups' weights on the device at once */
    int world_size;             /* ranks training together (1: alone) */
    double compute_wait_comm_ms; /* compute stream stalled on collectives (gathered weights,
                                    reduced gradients) */
    double comm_bytes;          /* bytes this rank sent through collectives in the step */
    double fetch_h2d_bytes;     /* params mode: of transfer_h2d_bytes, what fetches and prefetches
                                   uploaded (groups not on the device when needed); the rest
                                   refreshed the groups kept on the device after the update */
    int prefetch_depth;         /* params mode: groups fetched ahead in the step (adapts from
                                   prefetch_groups up) */
    int demand_fetches;         /* params mode: fetches that found their group neither on the device
                                   nor on its way (the compute stream waited for a whole transfer) */
    int order_misses;           /* params mode: fetches off the order the first step recorded (the
                                   schedule prefetches by it; a miss waits, and is still exact) */
    double order_wait_ms;       /* compute stream stalled on those fetches */
} ferry_step_timing;

#define FERRY_STEP_TIMING_INIT                                                                \
    {                                                                                         \
        sizeof(ferry_step_timing), /* size */                                                 \
        0,                         /* step_ms */                                              \
        0,                         /* compute_wait_transfer_ms */                             \
        0,                         /* compute_wait_optimizer_ms */                            \
        0,                         /* optimizer_ms */                                         \
        0,                         /* optimizer_wait_grads_ms */                              \
        0,                         /* transfer_h2d_bytes */                                   \
        0,                         /* transfer_d2h_bytes */                                   \
        0,                         /* max_resident_groups */                                  \
        1,                         /* world_size */                                           \
        0,                         /* compute_wait_comm_ms */                                 \
        0,                         /* comm_bytes */                                           \
        0,                         /* fetch_h2d_bytes */                                      \
        0,                         /* prefetch_depth */                                       \
        0,                         /* demand_fetches */                                       \
        0,                         /* order_misses */                                         \
        0,                         /* order_wait_ms */                                        \
    }

FERRY_API ferry_status ferry_engine_step_timing(ferry_engine *e, ferry_step_timing *out);

/* A sentence on what the engine chose at setup: backend, mode, NUMA node and
 * threads, bytes per parameter on device and host. Owned by the engine. */
FERRY_API const char *ferry_engine_describe(ferry_engine *e);

/* Saves the whole training state (master weights, moments, step, every
 * group's name and size, and with the delayed update the device weights the
 * next forward reads) to `path` atomically: a temporary file, fsync, rename;
 * a failure leaves any earlier file intact. Every byte is checksummed.
 * `user`/`user_bytes`: an opaque blob stored alongside (the trainer's RNG and
 * data position). A character device (/dev/null) is written in place; a
 * folder, a FIFO or a link to nothing at `path` is FERRY_ERR_IO, left as it is. */
FERRY_API ferry_status ferry_engine_save(ferry_engine *e, const char *path, const void *user,
                                         size_t user_bytes);
/* Restores what ferry_engine_save wrote, after setup with the same groups.
 * FERRY_ERR_FORMAT naming the mismatch for another model or a damaged file
 * (any changed byte, a negative step count or one that cannot grow), and then
 * nothing is changed. A read that fails after every check has passed (an I/O
 * error while the state is copied in) leaves the engine holding part of the
 * file, and its message says so: load again before training. A delayed update pending in the file continues exactly
 * when this engine runs the delayed update on the same device type; otherwise
 * the next forward reads the master weights. If user is not NULL, copies up
 * to user_cap bytes of the blob; user_bytes (may be NULL) gets its full size. */
FERRY_API ferry_status ferry_engine_load(ferry_engine *e, const char *path, void *user,
                                         size_t user_cap, size_t *user_bytes);
/* Reads only the user blob of a file ferry_engine_save wrote, without an
 * engine (to check a checkpoint before building one): the header, the group
 * table and the blob are checked against their checksums, the training state
 * is not read. Copies and sizes as ferry_engine_load. Any thread. */
FERRY_API ferry_status ferry_engine_load_user(const char *path, void *user, size_t user_cap,
                                              size_t *user_bytes);
/* The form of the Adam moments a checkpoint written by ferry_engine_save
 * holds (its header and group table checked), without an engine: what a
 * resume passes as config `moments` to go on exactly. */
FERRY_API ferry_status ferry_engine_checkpoint_moments(const char *path, ferry_moments *out);
/* Drops the step in progress, for a stop between its micro-batches (a
 * signal) that should not wait for the rest: the gradients of every
 * micro-batch begun since the last ferry_engine_step() are discarded, once
 * their transfers and the CPU's work on them have finished (it blocks until
 * then). The engine is then between steps, as the last step left it: master
 * weights, moments, the step count and a delayed update still to be
 * uploaded are untouched, so ferry_engine_save() writes that step, and the
 * next step starts at micro-batch 0. Every group must be released first
 * (else FERRY_ERR_STATE, and nothing changes); during inference it is
 * FERRY_ERR_STATE; between steps it does nothing. With several ranks it
 * starts no collective, but waits for those the dropped micro-batches began
 * (their reduce-scatters or all-reduces): every rank must drop the step
 * after the same micro-batch, so agree on the stop first (as train_gpt2
 * does with ferry_world_all_reduce before each micro-batch). */
FERRY_API ferry_status ferry_engine_abandon_step(ferry_engine *e);
/* ---- data parallelism ---- */
/* ======================================================================
 * Several processes training one model together (ZeRO data parallelism).
 *
 * Start the same program once per GPU with a launcher: `mpirun -np 8 prog`
 * or Slurm's `srun --ntasks 8 prog`. Each process (a rank) finds its rank,
 * the world size and its local rank (its GPU on this machine) in the
 * launcher's environment, takes GPU local_rank, and joins the others
 * through MPI, which also bootstraps NCCL. Without a launcher the world has
 * one rank and neither MPI nor NCCL is touched.
 *
 * Every rank creates its engine with the same groups and calls the same
 * engine functions in the same order with its own part of the data;
 * ferry_engine_setup, _fetch (params mode), _release (backward), _step,
 * _get_weights, _set_weights, _save and _load are then collective. The
 * engine reduces the gradients across ranks and keeps the ranks' weights
 * identical: offload none all-reduces them; optimizer and params modes
 * reduce-scatter them, each rank owning 1/N of the master weights, moments
 * and CPU update (and in params mode of the weights, gathered on fetch).
 * Gradients are summed across ranks, so an embedder scales its loss by
 * 1 / (micro-batches per step x world size) to train as one process with
 * all the micro-batches would. Checkpoints hold the whole state and load
 * at any world size.
 *
 * Failures: a collective that waits longer than the timeout fails with a
 * message naming the ranks it waited for; a rank that fails calls
 * ferry_world_abort() so that every other rank's next collective fails
 * with its message instead of waiting. After a failure, end the process
 * (the world cannot be joined again). The watchdog, FERRY_COMM_TIMEOUT
 * (comm_timeout_s), FERRY_COMM_SAVE_TIMEOUT and what a rank that dies,
 * hangs or diverges (during a save or a load too) does to the others:
 * docs/scaling.md, "When a rank dies, hangs or diverges".
 * ====================================================================== */

typedef struct ferry_world_info {
    size_t size;          /* sizeof(ferry_world_info), stamped by the macro */
    int rank;             /* 0 .. world_size - 1 */
    int world_size;       /* 1 without a launcher */
    int local_rank;       /* rank among the ranks on this machine: picks the GPU */
    int local_size;       /* ranks on this machine (-1 if the launcher does not say before joining) */
    int joined;           /* 1 once ferry_world_join has joined (a world of 1 is joined at once) */
    int mpi_compiled;     /* 1 if this library was built with MPI */
    int nccl_compiled;    /* 1 if this library was built with NCCL */
    int reserved;         /* 0 */
    char launcher[16];    /* "mpirun", "srun", "mpi" (another MPI launcher) or "none" */
} ferry_world_info;

#define FERRY_WORLD_INFO_INIT                                                                 \
    {                                                                                         \
        sizeof(ferry_world_info), /* size */                                                  \
        0,                        /* rank */                                                  \
        1,                        /* world_size */                                            \
        0,                        /* local_rank */                                            \
        1,                        /* local_size */                                            \
        0,                        /* joined */                                                \
        0,                        /* mpi_compiled */                                          \
        0,                        /* nccl_compiled */                                         \
        0,                        /* reserved */                                              \
        "none",                   /* launcher */                                              \
    }

/* What the launcher's environment says (Open MPI's OMPI_COMM_WORLD_*,
 * Slurm's SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_LOCALID, MPICH's
 * PMI_*), without starting anything; after ferry_world_join, the world as
 * joined. Any thread. */
FERRY_API ferry_status ferry_world_probe(ferry_world_info *info);

/* Joins the world the launcher started: starts MPI once per process (with
 * MPI_THREAD_MULTIPLE) and checks that it sees the ranks the launcher
 * announced. A world of one rank needs nothing and is joined at once.
 * Idempotent; ferry_engine_create joins by itself unless data_parallel is
 * -1. info may be NULL. FERRY_ERR_UNSUPPORTED for a launched world in a
 * build without MPI; FERRY_ERR_BACKEND when MPI cannot join it. Call from
 * the thread that will call the other ferry_world_ functions. */
FERRY_API ferry_status ferry_world_join(ferry_world_info *info);

/* Sums `count` doubles across the ranks, in rank order (every rank gets the
 * same bits). Collective; blocking on the calling thread. */
FERRY_API ferry_status ferry_world_all_reduce(double *values, size_t count);
/* Returns once every rank has called it. Collective. */
FERRY_API ferry_status ferry_world_barrier(void);

/* This rank has failed with `message`: tells every other rank, whose
 * current or next collective then fails with "rank R failed: message".
 * Returns once the message is sent (at most a few seconds); the world is
 * unusable afterwards. A no-op in a world of one rank, or when the failure
 * came from another rank. Any thread. */
FERRY_API void ferry_world_abort(const char *message);

/* Leaves the world at the end of the process: finalizes MPI when every
 * rank is healthy. After a failure it returns the failure (MPI is left to
 * the launcher, which ends the other ranks). Idempotent. */
FERRY_API ferry_status ferry_world_leave(void);

/* The engine's place in the world: its rank (0 alone) and the number of
 * ranks it trains with (1 alone); -1 for NULL. */
FERRY_API int ferry_engine_rank(const ferry_engine *e);
FERRY_API int ferry_engine_world_size(const ferry_engine *e);
/* ---- end engine ---- */

#ifdef __cplusplus
}
#endif
#endif /* FERRY_H */
