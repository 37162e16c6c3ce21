/* What a backend implementation provides — its memory, stream and event
 * functions (backend_vtable) and its op set (backend_ops) — and the state
 * every backend shares (its kind, its storage type, its name, the registry of
 * live device buffers). Only backend/ includes this; every other layer sees
 * the opaque handles of backend/backend.h and the checked front of
 * backend/ops/ops.h. */
#ifndef FERRY_BACKEND_BACKEND_IMPL_H
#define FERRY_BACKEND_BACKEND_IMPL_H

#include <pthread.h>

#include "backend/backend.h"
#include "backend/comm.h"
#include "backend/ops/ops.h"

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

/* The op set as one backend runs it: a slot per op of the registry
 * (backend/ops/op_list.h), each taking the stream and the op's arguments.
 * backend/ops/ops.c checks every argument (streams, sizes, tensors inside live
 * buffers) and then forwards to these, argument for argument; op_list.h
 * says what each computes. The host table (ops_host.c) launches the
 * reference ops of backend/ops/<op>.c on the stream's worker thread; the cuda
 * table (ops_cuda.c) the kernels of backend/ops/<op>.cu on the CUDA stream. A new
 * backend fills a table. Nothing outside backend/ ever branches on the
 * backend to run an op. */
#define OPS_SLOT(NAME, CUDA, EXTRA) ferry_status (*NAME)(OPS_PARAMS(NAME));
typedef struct backend_ops {
    uint32_t act_dtypes; /* storage types the ops can keep tensors in: bit 1 << ferry_dtype */
    ferry_status (*init)(backend *be, void *workspace, size_t workspace_bytes);
    void (*shutdown)(backend *be);
    FERRY_OPS(OPS_SLOT)
    /* Collectives (backend/comm.h): a communicator of the world's ranks for
     * this backend, and the three sums on a stream. */
    ferry_status (*comm_open)(backend_comm *c);
    void (*comm_close)(backend_comm *c);
    ferry_status (*reduce_scatter)(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                   ferry_dtype t);
    ferry_status (*all_gather)(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                               ferry_dtype t);
    ferry_status (*all_reduce)(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                               ferry_dtype t);
} backend_ops;

/* The tables of the two backends (the cuda one only in a CUDA build). */
extern const backend_ops backend_host_ops;
extern const backend_ops backend_cuda_ops;

typedef struct backend_buffer_entry {
    uintptr_t base;
    size_t bytes;
} backend_buffer_entry;

struct backend {
    const backend_vtable *vt;
    const backend_ops *ops;
    ferry_backend_kind kind;
    ferry_dtype act; /* storage type of tensors: F32 on host; BF16 on cuda from sm_80, F16 below */
    char device_name[384];
    void *impl;
    pthread_mutex_t lock; /* guards the buffer registry */
    backend_buffer_entry *buffers;
    size_t buffer_count, buffer_cap;
    uint32_t act_refused;  /* storage types the ops have that this device cannot compute in
                              (bit 1 << ferry_dtype: bf16 below sm_80) */
    char act_refusal[384]; /* why, for backend_set_act_dtype's message */
    /* Set while collectives that wait on the device are open (NCCL): the
     * backend's waits call it as they poll, with the seconds waited so far;
     * a failure it returns ends the wait. NULL: plain waits. */
    ferry_status (*comm_poll)(backend *be, double waited_s);
};

struct backend_stream {
    backend *be;
    char name[32];
    void *impl;
};

struct backend_event {
    backend *be;
    void *impl;
    bool timed; /* from backend_event_create_timed: elapsed times can be read */
};

/* Implementations: fill be->vt, be->ops, be->act, be->impl and
 * be->device_name, or fail with FERRY_ERR_UNSUPPORTED when the backend
 * cannot run here. */
ferry_status backend_host_init(backend *be);
ferry_status backend_cuda_init(backend *be);

#ifdef __cplusplus
}
#endif
#endif
