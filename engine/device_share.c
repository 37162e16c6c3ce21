/* What the device's own software takes of the card before the engine's
 * first byte: the CUDA context (made when the backend opens) and cuBLASLt
 * (started with the op set at setup), measured with cudaMemGetInfo (through
 * backend_mem_info) against the card's total, and, at any later moment,
 * what is in use on the device outside the engine's arena. A budget
 * (device_budget_bytes) that emulates a smaller card must leave that share
 * out; these figures say how large it is on this card. Owns the three
 * figures; does not decide any placement. */
#include <stdio.h>

#include "common/error.h"
#include "common/units.h"
#include "engine/device_share.h"

static bool on_device(backend *be) { return be && backend_kind(be) == FERRY_BACKEND_CUDA; }

void engine_device_share_open(engine_device_share *s, backend *be)
{
    uint64_t free_b = 0, total_b = 0;
    if (!on_device(be))
        return;
    if (backend_mem_info(be, &free_b, &total_b) != FERRY_OK || free_b > total_b) {
        err_clear();
        return;
    }
    s->total_bytes = total_b;
    s->context_bytes = total_b - free_b;
}

uint64_t engine_device_free(backend *be)
{
    uint64_t free_b = 0, total_b = 0;
    if (!on_device(be))
        return 0;
    if (backend_mem_info(be, &free_b, &total_b) != FERRY_OK) {
        err_clear();
        return 0;
    }
    return free_b;
}

void engine_device_share_libraries(engine_device_share *s, backend *be, uint64_t free_before)
{
    uint64_t now = engine_device_free(be);
    if (free_before > now && now > 0)
        s->library_bytes += free_before - now;
}

void engine_device_share_stats(const engine_device_share *s, backend *be, ferry_memory_stats *st)
{
    st->device_total_bytes = s->total_bytes;
    st->device_context_bytes = s->context_bytes;
    st->device_library_bytes = s->library_bytes;
    uint64_t free_b = engine_device_free(be), used = s->total_bytes - (free_b < s->total_bytes ? free_b : 0);
    st->device_outside_bytes = free_b && used > st->device_reserved_bytes ? used - st->device_reserved_bytes : 0;
}

void engine_device_share_note(const engine_device_share *s, backend *be, char *buf, size_t cap)
{
    if (!on_device(be) || cap == 0 || s->total_bytes == 0)
        return;
    char total[32], ctx[32], lib[32], left[32];
    uint64_t taken = s->context_bytes + s->library_bytes;
    snprintf(buf, cap, "; of the card's %s, the CUDA context (and any other process) took %s and cuBLASLt %s "
             "before the engine's first byte, leaving %s",
             units_fmt_bytes(total, sizeof total, s->total_bytes),
             units_fmt_bytes(ctx, sizeof ctx, s->context_bytes),
             units_fmt_bytes(lib, sizeof lib, s->library_bytes),
             units_fmt_bytes(left, sizeof left, taken < s->total_bytes ? s->total_bytes - taken : 0));
}
