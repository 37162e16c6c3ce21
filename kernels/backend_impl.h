/* What a backend implementation provides, and the state every backend shares
 * (its kind, its name, the registry of live device buffers). Only
 * kernels/backend*.c and backend_cuda.cu include this; everyone else sees the
 * opaque handles of kernels/backend.h. */
#ifndef FERRY_KERNELS_BACKEND_IMPL_H
#define FERRY_KERNELS_BACKEND_IMPL_H

#include <pthread.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct backend_vtable {
    void (*close)(backend *be);
    ferry_status (*mem_info)(backend *be, uint64_t *free_bytes, uint64_t *total_bytes);
    ferry_status (*alloc)(backend *be, size_t bytes, void **out);
    void (*free)(backend *be, void *ptr);
    ferry_status (*host_alloc)(backend *be, size_t bytes, void **out);
    void (*host_free)(backend *be, void *ptr);
    ferry_status (*host_register)(backend *be, void *ptr, size_t bytes);
    void (*host_unregister)(backend *be, void *ptr);
    ferry_status (*stream_create)(backend_stream *s);
    void (*stream_destroy)(backend_stream *s);
    ferry_status (*stream_synchronize)(backend_stream *s);
    void *(*stream_native)(const backend_stream *s);
    ferry_status (*event_create)(backend_event *e);
    void (*event_destroy)(backend_event *e);
    ferry_status (*event_record)(backend_event *e, backend_stream *s);
    ferry_status (*stream_wait_event)(backend_stream *s, backend_event *e);
    ferry_status (*event_synchronize)(backend_event *e);
    ferry_status (*event_query)(backend_event *e, bool *done);
    ferry_status (*event_elapsed_ms)(backend_event *start, backend_event *end, float *ms);
    ferry_status (*memcpy_async)(backend_stream *s, void *dst, const void *src, size_t bytes,
                                 backend_copy_kind kind);
    ferry_status (*memset_async)(backend_stream *s, void *dst, int value, size_t bytes);
    ferry_status (*launch_host)(backend_stream *s, backend_host_fn fn, const void *args,
                                size_t args_size);
} backend_vtable;

typedef struct backend_buffer_entry {
    uintptr_t base;
    size_t bytes;
} backend_buffer_entry;

struct backend {
    const backend_vtable *vt;
    ferry_backend_kind kind;
    char device_name[384];
    void *impl;
    pthread_mutex_t lock; /* guards the buffer registry */
    backend_buffer_entry *buffers;
    size_t buffer_count, buffer_cap;
};

struct backend_stream {
    backend *be;
    char name[32];
    void *impl;
};

struct backend_event {
    backend *be;
    void *impl;
};

/* Implementations: fill be->vt, be->impl and be->device_name, or fail with
 * FERRY_ERR_UNSUPPORTED when the backend cannot run here. */
ferry_status backend_host_init(backend *be);
ferry_status backend_cuda_init(backend *be);

#ifdef __cplusplus
}
#endif
#endif
