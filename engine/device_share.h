/* What the device's own software takes of the card before the engine's
 * first byte (engine/device_share.c): the CUDA context and cuBLASLt. Each
 * call is a no-op on the host backend, and best effort (a failed
 * cudaMemGetInfo leaves 0). Floor 1. */
#ifndef FERRY_ENGINE_DEVICE_SHARE_H
#define FERRY_ENGINE_DEVICE_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ferry.h"

typedef struct engine_device_share {
    uint64_t total_bytes, context_bytes, library_bytes;
} engine_device_share;

/* At create, right after the backend opened: the card's total, and what is
 * in use once the context exists. */
void engine_device_share_open(engine_device_share *s, backend *be);
/* The device's free bytes now (0 on host); before ops_init... */
uint64_t engine_device_free(backend *be);
/* ...and after it: what starting the libraries took. */
void engine_device_share_libraries(engine_device_share *s, backend *be, uint64_t free_before);
/* Fills the device_total/context/library/outside fields of st. */
void engine_device_share_stats(const engine_device_share *s, backend *be, ferry_memory_stats *st);
/* Appends "; on the card ..." to buf (a sentence of describe), cuda only. */
void engine_device_share_note(const engine_device_share *s, backend *be, char *buf, size_t cap);

#endif
