/* What the device's own software takes of the card before the engine's
 * first byte (engine/device_share.c): the CUDA context, NCCL's
 * communicators and cuBLASLt; and, with no budget given, the budget itself:
 * what is free once they are up, less a margin. Each
 * call is a no-op on the host backend, and best effort (a failed
 * cudaMemGetInfo leaves 0). Floor 1. */
#ifndef FERRY_ENGINE_DEVICE_SHARE_H
#define FERRY_ENGINE_DEVICE_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ferry.h"

typedef struct engine_device_share {
    uint64_t total_bytes, context_bytes, library_bytes, comm_bytes, margin_bytes;
} engine_device_share;

/* What a budget of 0 leaves out of the free memory measured after the
 * context, the communicators and cuBLASLt started: what loads on first use
 * (the kernels' code, loaded lazily since CUDA 12.2; the local memory a
 * kernel's stack asks of every resident thread; NCCL's proxy buffers).
 * 256 MiB and 1% of the free memory. */
#define ENGINE_FREE_MARGIN_BYTES(free_b) ((256ull << 20) + (free_b) / 100)

/* At create, right after the backend opened: the card's total, and what is
 * in use once the context exists. */
void engine_device_share_open(engine_device_share *s, backend *be);
/* The device's free bytes now (0 on host); before ops_init... */
uint64_t engine_device_free(backend *be);
/* ...and after it: what starting the libraries took (cuBLASLt; NCCL's
 * communicators: engine_device_share_comm). */
void engine_device_share_libraries(engine_device_share *s, backend *be, uint64_t free_before);
void engine_device_share_comm(engine_device_share *s, backend *be, uint64_t free_before);
/* The budget for device_budget_bytes 0 on cuda: what is free now less the
 * margin (recorded in s). FERRY_ERR_OUT_OF_MEMORY when nothing is left;
 * *budget 0 on the host backend (the arena asks the backend itself). */
ferry_status engine_device_share_budget(engine_device_share *s, backend *be, uint64_t *budget);
/* Fills the device_total/context/library/comm/margin/outside fields of st. */
void engine_device_share_stats(const engine_device_share *s, backend *be, ferry_memory_stats *st);
/* Appends "; on the card ..." to buf (a sentence of describe), cuda only. */
void engine_device_share_note(const engine_device_share *s, backend *be, char *buf, size_t cap);

#endif
