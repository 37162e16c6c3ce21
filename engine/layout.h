/* What the engine holds, per offload mode, as one table (engine/layout.c):
 * placement allocates from it and the plan counts from it, so a prediction
 * cannot drift from what setup allocates. Arithmetic only. Floor 1. */
#ifndef FERRY_ENGINE_LAYOUT_H
#define FERRY_ENGINE_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/groups.h"
#include "offload/nvme.h"
#include "ferry.h"

/* One buffer every group holds from setup on. */
typedef struct engine_buffer {
    bool device;            /* device arena; else the pinned host pool */
    ferry_mem_category cat;
    size_t elem_bytes;      /* bytes per parameter of the group (4: fp32; else the device type's) */
    const char *what;       /* "weights", "adam m", ... in names and traces */
    size_t slot;            /* offsetof(engine_group, field) of the pointer */
    ferry_moments form;     /* a moment in a compact form (its bytes: engine_buffer_bytes); else F32 */
} engine_buffer;
#define ENGINE_GROUP_BUFFERS_MAX 8
/* The upload window's default ring: 4 chunks of 16 MiB. */
#define ENGINE_WINDOW_CHUNKS 4
#define ENGINE_WINDOW_CHUNK_BYTES ((size_t)16 << 20)

/* The buffers every group holds from setup on in `mode`; returns the count. */
int engine_group_buffers(ferry_offload mode, size_t act_size, engine_buffer out[ENGINE_GROUP_BUFFERS_MAX]);
/* Data parallelism: the group buffers of `mode` when the state is partitioned
 * across ranks (the drained gradients arrive summed, in fp32). */
int engine_group_buffers_partitioned(ferry_offload mode, size_t act_size, bool partitioned,
                                     engine_buffer out[ENGINE_GROUP_BUFFERS_MAX]);
/* Which of those the NVMe tier holds on disk instead (bit i: b[i]; the
 * group's pointer stays NULL): with `disk`, the Adam moments, and with
 * `master_on_disk` the fp32 master weights too. */
unsigned engine_disk_buffers(const engine_buffer *b, int n, bool disk, bool master_on_disk);
/* The forms the NVMe tier's arrays of a group take on disk, in the store's
 * order (Adam m, Adam v, the master weights): each moment in `form`'s layout
 * (optim/moments.h), the master weights fp32. */
#define ENGINE_DISK_ARRAYS 3
void engine_disk_forms(ferry_moments form, nvme_form out[ENGINE_DISK_ARRAYS]);
/* The buffers of an engine's groups (its mode, device type, partitioning and
 * disk), and in *on_disk which of them its NVMe tier holds. */
int engine_layout_buffers(ferry_offload mode, size_t act_size, bool partitioned, bool disk, bool master_on_disk,
                          engine_buffer out[ENGINE_GROUP_BUFFERS_MAX], unsigned *on_disk);
/* The host pool's Adam moments in `form`: with BF16 or 8BIT each host m
 * and v buffer of b[0..n) becomes the form's (slot mq, vq; its bytes the
 * layout of optim/moments.h). F32 changes nothing. */
void engine_buffers_moments(engine_buffer *b, int n, ferry_moments form);
/* The upload window (ferry_engine_config's upload_window): whether it is
 * on for this setting, moments' form and run. AUTO is on with compact
 * moments in offload optimizer or params without the NVMe tier (with data
 * parallelism too: each rank's slot streams through its ring); ON is on
 * wherever it can be (engine.c refuses it where it cannot); OFF is off. */
bool engine_window_on(int setting, ferry_moments form, ferry_offload device_mode, bool disk);
/* The ring for groups of at most `largest` elements of `act_size` bytes:
 * elements per chunk and chunks (`chunks`, `chunk_bytes` as configured,
 * 0 = the defaults: 4 chunks of 16 MiB), never more than the largest group
 * needs. Its host bytes are chunk_elems x act_size x count. */
void engine_window_shape(int chunks, uint64_t chunk_bytes, size_t act_size, size_t largest, size_t *chunk_elems,
                         int *count);
/* With the window on: the host upload copy (host_weights) not held, its
 * elem_bytes 0 (the allocators and the planner skip it). */
void engine_buffers_window(engine_buffer *b, int n);
/* The bytes of `elems` elements of buffer b. */
size_t engine_buffer_bytes(const engine_buffer *b, size_t elems);
/* How many elements buffer b holds for a group: the device weights
 * `padded`, the other device buffers `numel`, the host buffers `part_cap`
 * (all numel alone). */
size_t engine_buffer_elems(const engine_buffer *b, bool partitioned, size_t numel, size_t part_cap, size_t padded);
/* The fp32 sum of a step's micro-batch gradients, when a step has several:
 * on the device in offload none, in the host pool otherwise. */
engine_buffer engine_accumulator_buffer(ferry_offload mode);

/* The engine's own device buffers (all of them workspace), in setup order. */
typedef enum engine_global_id {
    ENGINE_GLOBAL_WORKSPACE = 0,   /* the backend's matmul workspace */
    ENGINE_GLOBAL_SUMSQ,           /* offload none: per-group sums of squares */
    ENGINE_GLOBAL_SUMSQ_SCRATCH,   /* ... and their scratch */
    ENGINE_GLOBALS,
} engine_global_id;
typedef struct engine_global_buffer {
    ferry_mem_category cat;
    size_t bytes;
    const char *what;
    engine_global_id id;
} engine_global_buffer;
#define ENGINE_GLOBAL_BUFFERS_MAX ENGINE_GLOBALS
int engine_global_buffers(ferry_backend_kind kind, ferry_offload mode, int ngroups,
                          engine_global_buffer out[ENGINE_GLOBAL_BUFFERS_MAX]);

/* Params mode: groups whose weights may be on the device at once (the one
 * being computed, the ones fetched ahead, one retiring), and other groups
 * whose gradients may still be draining when one more is asked for. */
int engine_weight_window(int prefetch_groups);
int engine_drain_window(int prefetch_groups);

/* A rank's slot of a group of numel elements among `world` ranks. */
size_t engine_part_cap(size_t numel, int world);
/* Elements of every rank's slot reduced at once (a multiple of 256, at most
 * the largest slot): the reduce buffers hold world x that, and that. */
size_t engine_reduce_chunk(int world, size_t most_cap);

#endif
