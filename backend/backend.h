/* The backend interface: device buffers, streams, events, async copies and
 * host functions launched on a stream. Two implementations sit behind it:
 * backend/backend_host.c (worker threads and plain memory) and
 * backend/backend_cuda.cu (CUDA streams and events). Ops (backend/ops/ops.h) are
 * launched on a backend_stream and dispatch on backend_kind().
 *
 * Semantics are CUDA's, on both backends:
 * - work submitted to one stream runs in submission order, asynchronously to
 *   the caller;
 * - backend_event_record() captures the work submitted to the stream so far;
 *   backend_stream_wait_event() makes later work on another stream wait for
 *   it; an event never recorded counts as complete;
 * - host memory handed to an async copy must stay valid (and unmodified, for
 *   a host-to-device copy) until the copy is known complete.
 * Device pointers are plain pointers into buffers from backend_alloc(); every
 * copy is checked against the live buffers, so a copy out of bounds or into a
 * freed buffer returns FERRY_ERR_INVALID_ARGUMENT instead of corrupting memory.
 *
 * Threads: a backend and its streams may be used from several threads, but
 * one stream's submissions must come from one thread at a time. */
#ifndef FERRY_BACKEND_BACKEND_H
#define FERRY_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct backend backend;
typedef struct backend_stream backend_stream;
typedef struct backend_event backend_event;

typedef enum backend_copy_kind {
    BACKEND_COPY_H2D,
    BACKEND_COPY_D2H,
    BACKEND_COPY_D2D,
} backend_copy_kind;

/* A host function run on a stream, in order with the stream's other work.
 * On the host backend it runs on the stream's worker thread; on the cuda
 * backend through cudaLaunchHostFunc. It returns FERRY_OK or a status whose
 * message it set with err_set(); the first failure of a stream is reported by
 * the next backend_stream_synchronize() on it. */
typedef ferry_status (*backend_host_fn)(void *args);

/* Number of usable CUDA devices; 0 without a driver, a GPU or a CUDA build. */
int backend_cuda_device_count(void);
/* Device 0's name, memory, and PCI address ("0000:3b:00.0"). */
ferry_status backend_cuda_describe(char *name, size_t name_cap, uint64_t *memory_bytes,
                                   char *pci_bus_id, size_t pci_cap);

/* Opens a backend. FERRY_BACKEND_AUTO honours $FERRY_BACKEND, then picks cuda
 * when a GPU is present and host otherwise. Asking for cuda on a machine
 * without a GPU (or a build without CUDA) is FERRY_ERR_UNSUPPORTED. */
ferry_status backend_open(ferry_backend_kind kind, backend **out);
/* Waits for all streams, frees every buffer still live, closes. NULL is fine. */
void backend_close(backend *be);

ferry_backend_kind backend_kind(const backend *be);
const char *backend_device_name(const backend *be);
/* Total and free device memory as the device reports it (host backend: host RAM). */
ferry_status backend_mem_info(backend *be, uint64_t *free_bytes, uint64_t *total_bytes);

/* Device memory. Alignment is at least 256 bytes. Freeing a pointer that is
 * not a live buffer's base (a double free, a stray pointer) returns
 * FERRY_ERR_INVALID_ARGUMENT and changes nothing. */
ferry_status backend_alloc(backend *be, size_t bytes, void **out);
ferry_status backend_free(backend *be, void *ptr);
/* True if [ptr, ptr+bytes) lies inside one live buffer. */
bool backend_owns(backend *be, const void *ptr, size_t bytes);

/* Page-locked host memory where the backend supports it (cudaHostAlloc on
 * cuda; plain aligned memory on host). For staging buffers; the big host
 * state lives in the pinned pool (offload/). */
ferry_status backend_host_alloc(backend *be, size_t bytes, void **out);
void backend_host_free(backend *be, void *ptr);
/* Page-locks memory the caller mapped (cudaHostRegister on cuda; a no-op on
 * host, where offload/ uses mlock). */
ferry_status backend_host_register(backend *be, void *ptr, size_t bytes);
void backend_host_unregister(backend *be, void *ptr);

ferry_status backend_stream_create(backend *be, const char *name, backend_stream **out);
/* Waits for the stream's work, then destroys it. NULL is fine. */
void backend_stream_destroy(backend_stream *s);
backend *backend_stream_backend(const backend_stream *s);
/* Blocks (sleeping, not spinning) until all work submitted so far has run.
 * Returns the stream's first failure since the last synchronize, if any. */
ferry_status backend_stream_synchronize(backend_stream *s);
/* The native handle: cudaStream_t on cuda, NULL on host. */
void *backend_stream_native(const backend_stream *s);

/* A thread waiting for an event sleeps; it does not spin a CPU core, which
 * the CPU optimizer wants while the device computes (on cuda the event is
 * made with cudaEventBlockingSync, and cudaEventDisableTiming unless timed).
 * backend_event_elapsed_ms reads only events from backend_event_create_timed. */
ferry_status backend_event_create(backend *be, backend_event **out);
ferry_status backend_event_create_timed(backend *be, backend_event **out);
void backend_event_destroy(backend_event *e);
ferry_status backend_event_record(backend_event *e, backend_stream *s);
ferry_status backend_stream_wait_event(backend_stream *s, backend_event *e);
ferry_status backend_event_synchronize(backend_event *e);
/* *done = true when the work captured by the last record has run. */
ferry_status backend_event_query(backend_event *e, bool *done);
/* Milliseconds between two completed events (both recorded and synchronized),
 * both from backend_event_create_timed. */
ferry_status backend_event_elapsed_ms(backend_event *start, backend_event *end, float *ms);

/* Copies `bytes` asynchronously on `s`. Zero bytes is a valid no-op. The
 * device side(s) must lie inside live buffers of this backend. */
ferry_status backend_memcpy_async(backend_stream *s, void *dst, const void *src, size_t bytes,
                                  backend_copy_kind kind);
ferry_status backend_memset_async(backend_stream *s, void *dst, int value, size_t bytes);

/* Runs fn(args) on the stream after the work before it. `args_size` bytes of
 * `args` are copied, so the caller's struct may go out of scope at once. */
ferry_status backend_launch_host(backend_stream *s, backend_host_fn fn, const void *args,
                                 size_t args_size);

#ifdef __cplusplus
}
#endif

#endif
