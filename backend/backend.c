/* The backend front: picks an implementation, keeps the registry of live
 * device buffers, and checks every argument (bounds of copies, double frees,
 * NULL handles) before the implementation sees it, so both backends report
 * misuse the same way. */
#include "backend/backend_impl.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

const char *ferry_backend_name(ferry_backend_kind kind)
{
    switch (kind) {
    case FERRY_BACKEND_HOST: return "host";
    case FERRY_BACKEND_CUDA: return "cuda";
    case FERRY_BACKEND_AUTO: return "auto";
    }
    return "unknown";
}

ferry_status ferry_backend_parse(const char *name, ferry_backend_kind *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_backend_parse: NULL argument");
    if (strcmp(name, "host") == 0)
        *out = FERRY_BACKEND_HOST;
    else if (strcmp(name, "cuda") == 0)
        *out = FERRY_BACKEND_CUDA;
    else if (strcmp(name, "auto") == 0)
        *out = FERRY_BACKEND_AUTO;
    else
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "unknown backend '%s': use host, cuda or auto", name);
    return FERRY_OK;
}

/* AUTO -> $FERRY_BACKEND -> cuda if a GPU is present -> host. */
static ferry_status resolve_kind(ferry_backend_kind kind, ferry_backend_kind *out)
{
    if (kind == FERRY_BACKEND_AUTO) {
        const char *env = getenv("FERRY_BACKEND");
        if (env && *env) {
            ferry_status st = ferry_backend_parse(env, &kind);
            if (st != FERRY_OK)
                return err_wrap(st, "FERRY_BACKEND");
        }
    }
    if (kind == FERRY_BACKEND_AUTO)
        kind = backend_cuda_device_count() > 0 ? FERRY_BACKEND_CUDA : FERRY_BACKEND_HOST;
    *out = kind;
    return FERRY_OK;
}

ferry_status backend_open(ferry_backend_kind kind, backend **out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_open: out is NULL");
    *out = NULL;
    ferry_status st = resolve_kind(kind, &kind);
    if (st != FERRY_OK)
        return st;
    backend *be = calloc(1, sizeof *be);
    if (!be)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_open: out of host memory");
    be->kind = kind;
    pthread_mutex_init(&be->lock, NULL);
    st = kind == FERRY_BACKEND_CUDA ? backend_cuda_init(be) : backend_host_init(be);
    if (st != FERRY_OK) {
        pthread_mutex_destroy(&be->lock);
        free(be);
        return st;
    }
    *out = be;
    return FERRY_OK;
}

void backend_close(backend *be)
{
    if (!be)
        return;
    for (size_t i = 0; i < be->buffer_count; i++)
        be->vt->free(be, (void *)be->buffers[i].base);
    be->vt->close(be);
    free(be->buffers);
    pthread_mutex_destroy(&be->lock);
    free(be);
}

ferry_backend_kind backend_kind(const backend *be) { return be->kind; }
const char *backend_device_name(const backend *be) { return be->device_name; }

ferry_status backend_mem_info(backend *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (!be || !free_bytes || !total_bytes)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_mem_info: NULL argument");
    return be->vt->mem_info(be, free_bytes, total_bytes);
}

/* ---- the registry of live buffers ---- */

static ferry_status registry_add(backend *be, void *ptr, size_t bytes)
{
    pthread_mutex_lock(&be->lock);
    if (be->buffer_count == be->buffer_cap) {
        size_t cap = be->buffer_cap ? 2 * be->buffer_cap : 16;
        backend_buffer_entry *grown = realloc(be->buffers, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&be->lock);
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend: out of host memory for the buffer registry");
        }
        be->buffers = grown;
        be->buffer_cap = cap;
    }
    be->buffers[be->buffer_count++] = (backend_buffer_entry){(uintptr_t)ptr, bytes};
    pthread_mutex_unlock(&be->lock);
    return FERRY_OK;
}

/* Removes the entry whose base is ptr; false if there is none. */
static bool registry_remove(backend *be, void *ptr)
{
    bool found = false;
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < be->buffer_count; i++) {
        if (be->buffers[i].base == (uintptr_t)ptr) {
            be->buffers[i] = be->buffers[--be->buffer_count];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&be->lock);
    return found;
}

bool backend_owns(backend *be, const void *ptr, size_t bytes)
{
    uintptr_t p = (uintptr_t)ptr;
    bool inside = false;
    pthread_mutex_lock(&be->lock);
    for (size_t i = 0; i < be->buffer_count && !inside; i++) {
        const backend_buffer_entry *b = &be->buffers[i];
        inside = p >= b->base && p - b->base <= b->bytes && bytes <= b->bytes - (p - b->base);
    }
    pthread_mutex_unlock(&be->lock);
    return inside;
}

ferry_status backend_alloc(backend *be, size_t bytes, void **out)
{
    if (!be || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_alloc: NULL argument");
    *out = NULL;
    if (bytes == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_alloc: zero bytes asked");
    void *ptr = NULL;
    ferry_status st = be->vt->alloc(be, bytes, &ptr);
    if (st != FERRY_OK)
        return st;
    st = registry_add(be, ptr, bytes);
    if (st != FERRY_OK) {
        be->vt->free(be, ptr);
        return st;
    }
    *out = ptr;
    return FERRY_OK;
}

ferry_status backend_free(backend *be, void *ptr)
{
    if (!be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_free: backend is NULL");
    if (!ptr)
        return FERRY_OK;
    if (!registry_remove(be, ptr))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "backend_free: %p is not a live device buffer of the %s backend "
                       "(freed twice, or not from backend_alloc)",
                       ptr, ferry_backend_name(be->kind));
    be->vt->free(be, ptr);
    return FERRY_OK;
}

ferry_status backend_host_alloc(backend *be, size_t bytes, void **out)
{
    if (!be || !out || bytes == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_host_alloc: NULL argument or zero bytes");
    return be->vt->host_alloc(be, bytes, out);
}

void backend_host_free(backend *be, void *ptr)
{
    if (be && ptr)
        be->vt->host_free(be, ptr);
}

ferry_status backend_host_register(backend *be, void *ptr, size_t bytes)
{
    if (!be || !ptr || bytes == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_host_register: NULL argument or zero bytes");
    return be->vt->host_register(be, ptr, bytes);
}

void backend_host_unregister(backend *be, void *ptr)
{
    if (be && ptr)
        be->vt->host_unregister(be, ptr);
}

/* ---- streams and events ---- */

ferry_status backend_stream_create(backend *be, const char *name, backend_stream **out)
{
    if (!be || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_stream_create: NULL argument");
    backend_stream *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_stream_create: out of host memory");
    s->be = be;
    strncpy(s->name, name ? name : "stream", sizeof s->name - 1);
    ferry_status st = be->vt->stream_create(s);
    if (st != FERRY_OK) {
        free(s);
        return st;
    }
    *out = s;
    return FERRY_OK;
}

void backend_stream_destroy(backend_stream *s)
{
    if (!s)
        return;
    s->be->vt->stream_destroy(s);
    free(s);
}

backend *backend_stream_backend(const backend_stream *s) { return s->be; }

ferry_status backend_stream_synchronize(backend_stream *s)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_stream_synchronize: stream is NULL");
    return s->be->vt->stream_synchronize(s);
}

static ferry_status event_create(backend *be, backend_event **out, bool timed)
{
    if (!be || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_event_create: NULL argument");
    backend_event *e = calloc(1, sizeof *e);
    if (!e)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_event_create: out of host memory");
    e->be = be;
    e->timed = timed;
    ferry_status st = be->vt->event_create(e);
    if (st != FERRY_OK) {
        free(e);
        return st;
    }
    *out = e;
    return FERRY_OK;
}

ferry_status backend_event_create(backend *be, backend_event **out) { return event_create(be, out, false); }

ferry_status backend_event_create_timed(backend *be, backend_event **out) { return event_create(be, out, true); }

void backend_event_destroy(backend_event *e)
{
    if (!e)
        return;
    e->be->vt->event_destroy(e);
    free(e);
}

static ferry_status check_pair(const backend_event *e, const backend_stream *s, const char *what)
{
    if (!e || !s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: NULL event or stream", what);
    if (e->be != s->be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: the event and the stream belong to different backends", what);
    return FERRY_OK;
}

ferry_status backend_event_record(backend_event *e, backend_stream *s)
{
    ferry_status st = check_pair(e, s, "backend_event_record");
    return st != FERRY_OK ? st : e->be->vt->event_record(e, s);
}

ferry_status backend_stream_wait_event(backend_stream *s, backend_event *e)
{
    ferry_status st = check_pair(e, s, "backend_stream_wait_event");
    return st != FERRY_OK ? st : s->be->vt->stream_wait_event(s, e);
}

ferry_status backend_event_synchronize(backend_event *e)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_event_synchronize: event is NULL");
    return e->be->vt->event_synchronize(e);
}

ferry_status backend_event_query(backend_event *e, bool *done)
{
    if (!e || !done)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_event_query: NULL argument");
    return e->be->vt->event_query(e, done);
}

ferry_status backend_event_elapsed_ms(backend_event *start, backend_event *end, float *ms)
{
    if (!start || !end || !ms || start->be != end->be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "backend_event_elapsed_ms: NULL argument or events of different backends");
    if (!start->timed || !end->timed)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "backend_event_elapsed_ms: the %s event keeps no time; make events whose time is read "
                       "with backend_event_create_timed", !start->timed ? "start" : "end");
    return start->be->vt->event_elapsed_ms(start, end, ms);
}

/* ---- copies ---- */

static ferry_status check_device_range(backend_stream *s, const void *ptr, size_t bytes,
                                       const char *side)
{
    if (backend_owns(s->be, ptr, bytes))
        return FERRY_OK;
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "copy on stream '%s': the %s range [%p, +%zu bytes) is not inside one live "
                   "device buffer (out of bounds, or freed)",
                   s->name, side, ptr, bytes);
}

ferry_status backend_memcpy_async(backend_stream *s, void *dst, const void *src, size_t bytes,
                                  backend_copy_kind kind)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_memcpy_async: stream is NULL");
    if (bytes == 0)
        return FERRY_OK;
    if (!dst || !src)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "backend_memcpy_async on stream '%s': NULL %s pointer for %zu bytes",
                       s->name, dst ? "source" : "destination", bytes);
    ferry_status st = FERRY_OK;
    if (kind == BACKEND_COPY_H2D || kind == BACKEND_COPY_D2D)
        st = check_device_range(s, dst, bytes, "destination");
    if (st == FERRY_OK && (kind == BACKEND_COPY_D2H || kind == BACKEND_COPY_D2D))
        st = check_device_range(s, src, bytes, "source");
    if (st != FERRY_OK)
        return st;
    return s->be->vt->memcpy_async(s, dst, src, bytes, kind);
}

ferry_status backend_memset_async(backend_stream *s, void *dst, int value, size_t bytes)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_memset_async: stream is NULL");
    if (bytes == 0)
        return FERRY_OK;
    ferry_status st = check_device_range(s, dst, bytes, "destination");
    return st != FERRY_OK ? st : s->be->vt->memset_async(s, dst, value, bytes);
}

void *backend_stream_native(const backend_stream *s)
{
    return s ? s->be->vt->stream_native(s) : NULL;
}

ferry_status backend_launch_host(backend_stream *s, backend_host_fn fn, const void *args,
                                 size_t args_size)
{
    if (!s || !fn || (args_size && !args))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_launch_host: NULL argument");
    return s->be->vt->launch_host(s, fn, args, args_size);
}

#ifndef FERRY_HAVE_CUDA
/* A build without CUDA: the cuda backend is simply not there. */
int backend_cuda_device_count(void) { return 0; }

ferry_status backend_cuda_init(backend *be)
{
    (void)be;
    return err_set(FERRY_ERR_UNSUPPORTED,
                   "the cuda backend was asked for, but this ferry was built without CUDA; "
                   "rebuild with -Dcuda=enabled, or use backend FERRY_BACKEND_HOST");
}

ferry_status backend_cuda_describe(char *name, size_t name_cap, uint64_t *memory_bytes,
                                   char *pci_bus_id, size_t pci_cap)
{
    (void)name; (void)name_cap; (void)memory_bytes; (void)pci_bus_id; (void)pci_cap;
    return err_set(FERRY_ERR_UNSUPPORTED, "this ferry was built without CUDA");
}
#endif
