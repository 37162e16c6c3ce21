/* What the device's own software takes of the card before the engine's
 * first byte: the CUDA context (made when the backend opens), NCCL's
 * communicators and cuBLASLt (both started at create, before the budget is
 * measured), measured with cudaMemGetInfo (through
 * backend_mem_info) against the card's total, and, at any later moment,
 * what is in use on the device outside the engine's arena. A budget
 * (device_budget_bytes) that emulates a smaller card must leave that share
 * out; these figures say how large it is on this card. With no budget
 * given, the budget is what is free once all three are up, less a margin
 * (ENGINE_FREE_MARGIN_BYTES). Owns those figures; does not decide any
 * placement. */
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

void engine_device_share_comm(engine_device_share *s, backend *be, uint64_t free_before)
{
    uint64_t now = engine_device_free(be);
    if (free_before > now && now > 0)
        s->comm_bytes += free_before - now;
}

ferry_status engine_device_share_budget(engine_device_share *s, backend *be, uint64_t *budget)
{
    *budget = 0;
    if (!on_device(be))
        return FERRY_OK;
    uint64_t free_b = engine_device_free(be), margin = ENGINE_FREE_MARGIN_BYTES(free_b);
    char f[32], m[32], ctx[32];
    if (free_b <= margin + (64ull << 20))
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device_budget_bytes 0 takes what the device has free: %s once the CUDA context, NCCL "
                       "and cuBLASLt started (they and any other process hold %s), less a margin of %s for what "
                       "loads on first use, leaves nothing; free the device of other processes, or give "
                       "device_budget_bytes",
                       units_fmt_bytes(f, sizeof f, free_b),
                       units_fmt_bytes(ctx, sizeof ctx, s->total_bytes > free_b ? s->total_bytes - free_b : 0),
                       units_fmt_bytes(m, sizeof m, margin));
    s->margin_bytes = margin;
    *budget = free_b - margin;
    return FERRY_OK;
}

void engine_device_share_stats(const engine_device_share *s, backend *be, ferry_memory_stats *st)
{
    st->device_total_bytes = s->total_bytes;
    st->device_context_bytes = s->context_bytes;
    st->device_library_bytes = s->library_bytes;
    st->device_comm_bytes = s->comm_bytes;
    st->device_margin_bytes = s->margin_bytes;
    uint64_t free_b = engine_device_free(be), used = s->total_bytes - (free_b < s->total_bytes ? free_b : 0);
    st->device_outside_bytes = free_b && used > st->device_reserved_bytes ? used - st->device_reserved_bytes : 0;
}

void engine_device_share_note(const engine_device_share *s, backend *be, char *buf, size_t cap)
{
    if (!on_device(be) || cap == 0 || s->total_bytes == 0)
        return;
    char total[32], ctx[32], lib[32], comm[32], left[32], margin[32], nccl[64] = "", kept[96] = "";
    uint64_t taken = s->context_bytes + s->library_bytes + s->comm_bytes;
    if (s->comm_bytes)
        snprintf(nccl, sizeof nccl, ", NCCL's communicators %s", units_fmt_bytes(comm, sizeof comm, s->comm_bytes));
    if (s->margin_bytes)
        snprintf(kept, sizeof kept, " (the budget leaves %s of it free for what loads on first use)",
                 units_fmt_bytes(margin, sizeof margin, s->margin_bytes));
    snprintf(buf, cap, "; of the card's %s, the CUDA context (and any other process) took %s%s and cuBLASLt %s "
             "before the engine's first byte, leaving %s%s",
             units_fmt_bytes(total, sizeof total, s->total_bytes),
             units_fmt_bytes(ctx, sizeof ctx, s->context_bytes), nccl,
             units_fmt_bytes(lib, sizeof lib, s->library_bytes),
             units_fmt_bytes(left, sizeof left, taken < s->total_bytes ? s->total_bytes - taken : 0), kept);
}
