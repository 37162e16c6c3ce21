/* What the engine holds, per offload mode, as one table: placement.c
 * allocates from it and plan.c counts from it, so a prediction cannot drift
 * from what setup allocates. Arithmetic only.
 *
 *   mode       device (per parameter)            host pool (per parameter)
 *   none       weights, grads (act), master, m, v  -
 *   optimizer  weights, grads (act)              master, m, v (fp32), grads, weights (act)
 *   params     a window of weights/grads at      master, m, v (fp32), grads, weights (act)
 *              least; released weights stay
 *              while the budget holds them
 *
 * With bf16 on the device that is 16 bytes per parameter on the host in the
 * offload modes (12 fp32 + 2 drained gradient + 2 upload copy), and 4 on the
 * device in optimizer mode. Compact moments (engine config `moments`) hold
 * m and v in 4 bytes (bf16) or 2 + 8/256 (8bit) instead of 8: 12 and
 * about 10.03 bytes per parameter on the host.
 *
 * The upload window (engine config `upload_window`; on by default with
 * compact moments) holds no upload copy (weights (act) above): the master
 * weights are converted into a ring of a few chunks (STAGING, bounded by the
 * config and the largest group) as each upload streams, so 2 bytes less per
 * parameter: 14 with fp32 moments, 10 with bf16, about 8.03 with 8bit.
 *
 * The NVMe tier (offload nvme, or params with a disk) moves Adam m and v
 * (8 bytes per parameter with fp32 moments, 4 with bf16, about 2.03 with
 * 8bit, in the same layout: engine_disk_forms), and with nvme_master the
 * fp32 master weights too (4 more), from the host pool to the store's file;
 * the host keeps the drained gradients, the upload copy and the store's
 * window. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/layout.h"

#include "backend/ops/ops.h"
#include "common/error.h"
#include "common/numerics.h"
#include "optim/moments.h"

#define SLOT(field) offsetof(engine_group, field)

int engine_group_buffers(ferry_offload mode, size_t act, engine_buffer out[ENGINE_GROUP_BUFFERS_MAX])
{
    int n = 0;
    if (mode == FERRY_OFFLOAD_NONE) {
        out[n++] = (engine_buffer){true, FERRY_MEM_PARAMS, act, "weights", SLOT(dev_weights), FERRY_MOMENTS_F32};
        out[n++] = (engine_buffer){true, FERRY_MEM_GRADS, act, "grads", SLOT(dev_grads), FERRY_MOMENTS_F32};
        out[n++] = (engine_buffer){true, FERRY_MEM_PARAMS, 4, "master", SLOT(master), FERRY_MOMENTS_F32};
        out[n++] = (engine_buffer){true, FERRY_MEM_OPTIMIZER, 4, "adam m", SLOT(m), FERRY_MOMENTS_F32};
        out[n++] = (engine_buffer){true, FERRY_MEM_OPTIMIZER, 4, "adam v", SLOT(v), FERRY_MOMENTS_F32};
        return n;
    }
    out[n++] = (engine_buffer){false, FERRY_MEM_PARAMS, 4, "master", SLOT(master), FERRY_MOMENTS_F32};
    out[n++] = (engine_buffer){false, FERRY_MEM_OPTIMIZER, 4, "adam m", SLOT(m), FERRY_MOMENTS_F32};
    out[n++] = (engine_buffer){false, FERRY_MEM_OPTIMIZER, 4, "adam v", SLOT(v), FERRY_MOMENTS_F32};
    out[n++] = (engine_buffer){false, FERRY_MEM_GRADS, act, "grads", SLOT(host_grads), FERRY_MOMENTS_F32};
    out[n++] = (engine_buffer){false, FERRY_MEM_STAGING, act, "weights", SLOT(host_weights), FERRY_MOMENTS_F32};
    if (mode == FERRY_OFFLOAD_OPTIMIZER) {
        out[n++] = (engine_buffer){true, FERRY_MEM_PARAMS, act, "weights", SLOT(dev_weights), FERRY_MOMENTS_F32};
        out[n++] = (engine_buffer){true, FERRY_MEM_GRADS, act, "grads", SLOT(dev_grads), FERRY_MOMENTS_F32};
    }
    return n;
}

void engine_buffers_moments(engine_buffer *b, int n, ferry_moments form)
{
    for (int i = 0; form != FERRY_MOMENTS_F32 && i < n; i++) {
        if (b[i].device || (b[i].slot != SLOT(m) && b[i].slot != SLOT(v)))
            continue;
        b[i].slot = b[i].slot == SLOT(m) ? SLOT(mq) : SLOT(vq);
        b[i].elem_bytes = form == FERRY_MOMENTS_BF16 ? 2 : 1;
        b[i].form = form;
    }
}

bool engine_window_on(int setting, ferry_moments form, ferry_offload device_mode, bool disk)
{
    bool offloaded = device_mode == FERRY_OFFLOAD_OPTIMIZER || device_mode == FERRY_OFFLOAD_PARAMS;
    if (setting == FERRY_UPLOAD_WINDOW_OFF || !offloaded || disk)
        return false;
    return setting == FERRY_UPLOAD_WINDOW_ON || form != FERRY_MOMENTS_F32;
}

void engine_window_shape(int chunks, uint64_t chunk_bytes, size_t act_size, size_t largest, size_t *chunk_elems,
                         int *count)
{
    size_t want = chunks > 0 ? (size_t)chunks : ENGINE_WINDOW_CHUNKS;
    size_t per = (size_t)(chunk_bytes ? chunk_bytes : ENGINE_WINDOW_CHUNK_BYTES) / (act_size ? act_size : 1);
    per = per ? per : 1;
    if (per > largest)
        per = largest;
    size_t need = per ? (largest + per - 1) / per : 0; /* chunks the largest group fills */
    *chunk_elems = per;
    *count = (int)(need < want ? need : want);
}

void engine_buffers_window(engine_buffer *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!b[i].device && b[i].slot == SLOT(host_weights))
            b[i].elem_bytes = 0;
}

size_t engine_buffer_bytes(const engine_buffer *b, size_t elems)
{
    return b->form == FERRY_MOMENTS_F32 ? elems * b->elem_bytes : moments_bytes(b->form, elems);
}

unsigned engine_disk_buffers(const engine_buffer *b, int n, bool disk, bool master_on_disk)
{
    unsigned mask = 0;
    for (int i = 0; disk && i < n; i++)
        if (!b[i].device && (b[i].slot == SLOT(m) || b[i].slot == SLOT(v) || (master_on_disk && b[i].slot == SLOT(master))))
            mask |= 1u << i;
    return mask;
}

void engine_disk_forms(ferry_moments form, nvme_form out[ENGINE_DISK_ARRAYS])
{
    nvme_form m = form == FERRY_MOMENTS_BF16   ? (nvme_form){2, 0, 0}
                  : form == FERRY_MOMENTS_8BIT ? (nvme_form){1, MOMENTS_Q8_BLOCK, sizeof(float)}
                                               : NVME_FORM_F32;
    out[0] = out[1] = m;
    out[2] = NVME_FORM_F32;
}

int engine_layout_buffers(ferry_offload mode, size_t act_size, bool partitioned, bool disk, bool master_on_disk,
                          engine_buffer out[ENGINE_GROUP_BUFFERS_MAX], unsigned *on_disk)
{
    int n = engine_group_buffers_partitioned(mode, act_size, partitioned, out);
    *on_disk = engine_disk_buffers(out, n, disk, master_on_disk);
    return n;
}

int engine_global_buffers(ferry_backend_kind kind, ferry_offload mode, int ngroups,
                          engine_global_buffer out[ENGINE_GLOBAL_BUFFERS_MAX])
{
    int n = 0;
    size_t ws = ops_workspace_bytes(kind);
    if (ws)
        out[n++] = (engine_global_buffer){FERRY_MEM_WORKSPACE, ws, "matmul workspace", ENGINE_GLOBAL_WORKSPACE};
    if (mode == FERRY_OFFLOAD_NONE) {
        out[n++] = (engine_global_buffer){FERRY_MEM_WORKSPACE, (size_t)ngroups * sizeof(double),
                                          "gradient norm partials", ENGINE_GLOBAL_SUMSQ};
        out[n++] = (engine_global_buffer){FERRY_MEM_WORKSPACE, ops_sumsq_scratch_bytes(), "gradient norm scratch",
                                          ENGINE_GLOBAL_SUMSQ_SCRATCH};
    }
    return n;
}

engine_buffer engine_accumulator_buffer(ferry_offload mode)
{
    return (engine_buffer){mode == FERRY_OFFLOAD_NONE, FERRY_MEM_GRADS, 4, "grads fp32 sum", SLOT(grad_acc), FERRY_MOMENTS_F32};
}

int engine_weight_window(int prefetch_groups) { return prefetch_groups + 2; }
int engine_drain_window(int prefetch_groups) { return prefetch_groups + 1; }

/* ---- data parallelism ----
 *
 *   mode       device (per parameter)                host pool (per parameter, 1/N of them)
 *   none       as alone, plus the fp32 gradient sum  -
 *   optimizer  weights (N x slot), grads (act)       master, m, v, grads (fp32, summed), weights (act)
 *   params     a window of weights (N x slot), grads as optimizer
 *
 * A rank's slot is a whole number of NUMERICS_TILE: ceil(tiles / N) tiles.
 * Compact moments take the slot in their layout (bf16 2 x slot bytes; 8bit
 * the slot's codes, then its absmax), and a slot starts on an 8-bit block.
 * The gradients are reduced a chunk of every rank's slot at a time through
 * two pairs of device buffers (N x chunk fp32 to send, chunk fp32 received),
 * the chunk sized so the send buffer holds 64 MiB ($FERRY_REDUCE_KIB). */
_Static_assert(NUMERICS_TILE % MOMENTS_Q8_BLOCK == 0,
               "a rank's part starts on an 8-bit block of the compact moments");
size_t engine_part_cap(size_t numel, int world)
{
    size_t tiles = (numel + NUMERICS_TILE - 1) / NUMERICS_TILE, n = world > 0 ? (size_t)world : 1;
    return (tiles + n - 1) / n * NUMERICS_TILE;
}

int engine_group_buffers_partitioned(ferry_offload mode, size_t act, bool partitioned,
                                     engine_buffer out[ENGINE_GROUP_BUFFERS_MAX])
{
    int n = engine_group_buffers(mode, act, out);
    for (int i = 0; partitioned && i < n; i++)
        if (!out[i].device && out[i].slot == SLOT(host_grads))
            out[i].elem_bytes = 4; /* the reduced part arrives as fp32 */
    return n;
}

size_t engine_reduce_chunk(int world, size_t most_cap)
{
    size_t bytes = (size_t)64 << 20;
    const char *v = getenv("FERRY_REDUCE_KIB");
    char *end = NULL;
    unsigned long long kib = v ? strtoull(v, &end, 10) : 0;
    if (v && end != v && !*end && kib > 0 && kib < (1ull << 30))
        bytes = (size_t)kib << 10;
    size_t per = bytes / sizeof(float) / (size_t)(world > 0 ? world : 1) / 256 * 256;
    per = per < 256 ? 256 : per;
    return per < most_cap ? per : most_cap;
}

size_t engine_buffer_elems(const engine_buffer *b, bool partitioned, size_t numel, size_t part_cap, size_t padded)
{
    if (!partitioned)
        return numel;
    if (b->device)
        return b->slot == SLOT(dev_weights) ? padded : numel;
    return part_cap;
}

/* ---- the modes' names ---- */

const char *ferry_offload_name(ferry_offload mode)
{
    switch (mode) {
    case FERRY_OFFLOAD_NONE: return "none";
    case FERRY_OFFLOAD_OPTIMIZER: return "optimizer";
    case FERRY_OFFLOAD_PARAMS: return "params";
    case FERRY_OFFLOAD_NVME: return "nvme";
    case FERRY_OFFLOAD_AUTO: return "auto";
    }
    return "unknown";
}

ferry_status ferry_offload_parse(const char *name, ferry_offload *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_offload_parse: NULL argument");
    for (int m = FERRY_OFFLOAD_NONE; m <= FERRY_OFFLOAD_AUTO; m++) {
        if (strcmp(name, ferry_offload_name((ferry_offload)m)) == 0) {
            *out = (ferry_offload)m;
            return FERRY_OK;
        }
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "unknown offload mode '%s': use none, optimizer, params, nvme or auto", name);
}
