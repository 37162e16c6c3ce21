/* The host backend: "device" memory is ordinary memory, each stream is a
 * worker thread running its queue in order, and events are real cross-thread
 * signals. It runs truly asynchronously, so an engine that forgets an event
 * wait races here exactly as it would on a GPU, and ThreadSanitizer sees it. */
#include "backend/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "common/hostmem.h"

typedef enum task_kind { TASK_FN, TASK_COPY, TASK_MEMSET, TASK_RECORD, TASK_WAIT } task_kind;

typedef struct host_event {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t recorded;  /* generation of the latest record call */
    uint64_t completed; /* highest generation whose work has run */
    struct timespec when; /* time the latest completed record ran */
} host_event;

typedef struct task {
    struct task *next;
    task_kind kind;
    union {
        struct { backend_host_fn fn; void *args; } fn;
        struct { void *dst; const void *src; size_t bytes; } copy;
        struct { void *dst; int value; size_t bytes; } set;
        struct { host_event *ev; uint64_t gen; } event;
    } u;
} task;

typedef struct host_stream {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work;  /* signalled when a task is queued or on shutdown */
    pthread_cond_t idle;  /* signalled when a task finishes */
    task *head, *tail;
    uint64_t submitted, finished;
    bool shutdown;
    ferry_status error;   /* first failure since the last synchronize */
    char error_message[ERR_MESSAGE_MAX];
} host_stream;

static void event_complete(host_event *ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->lock);
    if (gen > ev->completed)
        ev->completed = gen;
    clock_gettime(CLOCK_MONOTONIC, &ev->when);
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->lock);
}

static void event_wait_for(host_event *ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->lock);
    while (ev->completed < gen)
        pthread_cond_wait(&ev->cond, &ev->lock);
    pthread_mutex_unlock(&ev->lock);
}

static ferry_status run_task(task *t)
{
    switch (t->kind) {
    case TASK_FN: return t->u.fn.fn(t->u.fn.args);
    case TASK_COPY: memmove(t->u.copy.dst, t->u.copy.src, t->u.copy.bytes); return FERRY_OK;
    case TASK_MEMSET: memset(t->u.set.dst, t->u.set.value, t->u.set.bytes); return FERRY_OK;
    case TASK_RECORD: event_complete(t->u.event.ev, t->u.event.gen); return FERRY_OK;
    case TASK_WAIT: event_wait_for(t->u.event.ev, t->u.event.gen); return FERRY_OK;
    }
    return FERRY_OK;
}

static void *stream_worker(void *arg)
{
    host_stream *hs = arg;
    pthread_mutex_lock(&hs->lock);
    for (;;) {
        while (!hs->head && !hs->shutdown)
            pthread_cond_wait(&hs->work, &hs->lock);
        if (!hs->head)
            break;
        task *t = hs->head;
        hs->head = t->next;
        if (!hs->head)
            hs->tail = NULL;
        pthread_mutex_unlock(&hs->lock);

        err_clear();
        ferry_status st = run_task(t);

        pthread_mutex_lock(&hs->lock);
        if (st != FERRY_OK && hs->error == FERRY_OK) {
            hs->error = st;
            strncpy(hs->error_message, ferry_last_error(), sizeof hs->error_message - 1);
        }
        hs->finished++;
        pthread_cond_broadcast(&hs->idle);
        if (t->kind == TASK_FN)
            free(t->u.fn.args);
        free(t);
    }
    pthread_mutex_unlock(&hs->lock);
    return NULL;
}

static ferry_status enqueue(backend_stream *s, task *t)
{
    host_stream *hs = s->impl;
    t->next = NULL;
    pthread_mutex_lock(&hs->lock);
    if (hs->tail)
        hs->tail->next = t;
    else
        hs->head = t;
    hs->tail = t;
    hs->submitted++;
    pthread_cond_signal(&hs->work);
    pthread_mutex_unlock(&hs->lock);
    return FERRY_OK;
}

static task *task_new(backend_stream *s, task_kind kind)
{
    task *t = calloc(1, sizeof *t);
    if (!t)
        err_set(FERRY_ERR_OUT_OF_MEMORY, "stream '%s': out of host memory for a queued task", s->name);
    else
        t->kind = kind;
    return t;
}

/* ---- streams ---- */

static ferry_status host_stream_create(backend_stream *s)
{
    host_stream *hs = calloc(1, sizeof *hs);
    if (!hs)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "stream '%s': out of host memory", s->name);
    pthread_mutex_init(&hs->lock, NULL);
    pthread_cond_init(&hs->work, NULL);
    pthread_cond_init(&hs->idle, NULL);
    int rc = pthread_create(&hs->thread, NULL, stream_worker, hs);
    if (rc != 0) {
        char why[160];
        err_thread_refusal(rc, why, sizeof why);
        pthread_cond_destroy(&hs->idle);
        pthread_cond_destroy(&hs->work);
        pthread_mutex_destroy(&hs->lock);
        free(hs);
        return err_set(FERRY_ERR_BACKEND,
                       "stream '%s': the system refused to start its worker thread: %s; raise the limit",
                       s->name, why);
    }
    s->impl = hs;
    return FERRY_OK;
}

static ferry_status host_stream_synchronize(backend_stream *s)
{
    host_stream *hs = s->impl;
    pthread_mutex_lock(&hs->lock);
    uint64_t target = hs->submitted;
    while (hs->finished < target)
        pthread_cond_wait(&hs->idle, &hs->lock);
    ferry_status st = hs->error;
    char message[ERR_MESSAGE_MAX];
    memcpy(message, hs->error_message, sizeof message);
    hs->error = FERRY_OK;
    hs->error_message[0] = '\0';
    pthread_mutex_unlock(&hs->lock);
    if (st != FERRY_OK)
        return err_set(st, "on stream '%s': %s", s->name, message);
    return FERRY_OK;
}

static void host_stream_destroy(backend_stream *s)
{
    host_stream *hs = s->impl;
    pthread_mutex_lock(&hs->lock);
    hs->shutdown = true;
    pthread_cond_signal(&hs->work);
    pthread_mutex_unlock(&hs->lock);
    pthread_join(hs->thread, NULL);
    pthread_cond_destroy(&hs->idle);
    pthread_cond_destroy(&hs->work);
    pthread_mutex_destroy(&hs->lock);
    free(hs);
}

static void *host_stream_native(const backend_stream *s)
{
    (void)s;
    return NULL;
}

/* ---- events ---- */

static ferry_status host_event_create(backend_event *e)
{
    host_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_event_create: out of host memory");
    pthread_mutex_init(&ev->lock, NULL);
    pthread_cond_init(&ev->cond, NULL);
    e->impl = ev;
    return FERRY_OK;
}

static void host_event_destroy(backend_event *e)
{
    host_event *ev = e->impl;
    pthread_cond_destroy(&ev->cond);
    pthread_mutex_destroy(&ev->lock);
    free(ev);
}

static ferry_status host_event_record(backend_event *e, backend_stream *s)
{
    host_event *ev = e->impl;
    task *t = task_new(s, TASK_RECORD);
    if (!t)
        return FERRY_ERR_OUT_OF_MEMORY;
    pthread_mutex_lock(&ev->lock);
    t->u.event.gen = ++ev->recorded;
    pthread_mutex_unlock(&ev->lock);
    t->u.event.ev = ev;
    return enqueue(s, t);
}

static uint64_t latest_record(host_event *ev)
{
    pthread_mutex_lock(&ev->lock);
    uint64_t gen = ev->recorded;
    pthread_mutex_unlock(&ev->lock);
    return gen;
}

static ferry_status host_stream_wait_event(backend_stream *s, backend_event *e)
{
    host_event *ev = e->impl;
    task *t = task_new(s, TASK_WAIT);
    if (!t)
        return FERRY_ERR_OUT_OF_MEMORY;
    t->u.event.ev = ev;
    t->u.event.gen = latest_record(ev);
    return enqueue(s, t);
}

static ferry_status host_event_synchronize(backend_event *e)
{
    host_event *ev = e->impl;
    event_wait_for(ev, latest_record(ev));
    return FERRY_OK;
}

static ferry_status host_event_query(backend_event *e, bool *done)
{
    host_event *ev = e->impl;
    pthread_mutex_lock(&ev->lock);
    *done = ev->completed >= ev->recorded;
    pthread_mutex_unlock(&ev->lock);
    return FERRY_OK;
}

static ferry_status host_event_elapsed_ms(backend_event *start, backend_event *end, float *ms)
{
    host_event *a = start->impl, *b = end->impl;
    struct timespec ta, tb;
    bool ready;
    pthread_mutex_lock(&a->lock);
    ready = a->recorded > 0 && a->completed >= a->recorded;
    ta = a->when;
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_lock(&b->lock);
    ready = ready && b->recorded > 0 && b->completed >= b->recorded;
    tb = b->when;
    pthread_mutex_unlock(&b->lock);
    if (!ready)
        return err_set(FERRY_ERR_STATE,
                       "backend_event_elapsed_ms: both events must be recorded and complete; "
                       "synchronize on the later one first");
    *ms = (float)((double)(tb.tv_sec - ta.tv_sec) * 1e3 + (double)(tb.tv_nsec - ta.tv_nsec) * 1e-6);
    return FERRY_OK;
}

/* ---- work ---- */

static ferry_status host_memcpy_async(backend_stream *s, void *dst, const void *src, size_t bytes,
                                      backend_copy_kind kind)
{
    (void)kind;
    task *t = task_new(s, TASK_COPY);
    if (!t)
        return FERRY_ERR_OUT_OF_MEMORY;
    t->u.copy.dst = dst;
    t->u.copy.src = src;
    t->u.copy.bytes = bytes;
    return enqueue(s, t);
}

static ferry_status host_memset_async(backend_stream *s, void *dst, int value, size_t bytes)
{
    task *t = task_new(s, TASK_MEMSET);
    if (!t)
        return FERRY_ERR_OUT_OF_MEMORY;
    t->u.set.dst = dst;
    t->u.set.value = value;
    t->u.set.bytes = bytes;
    return enqueue(s, t);
}

static ferry_status host_launch_host(backend_stream *s, backend_host_fn fn, const void *args,
                                     size_t args_size)
{
    task *t = task_new(s, TASK_FN);
    if (!t)
        return FERRY_ERR_OUT_OF_MEMORY;
    t->u.fn.fn = fn;
    t->u.fn.args = malloc(args_size ? args_size : 1);
    if (!t->u.fn.args) {
        free(t);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "stream '%s': out of host memory for op arguments", s->name);
    }
    if (args_size)
        memcpy(t->u.fn.args, args, args_size);
    return enqueue(s, t);
}

/* ---- memory ---- */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static ferry_status host_alloc(backend *be, size_t bytes, void **out)
{
    (void)be;
    void *p = aligned_alloc(256, round_up(bytes, 256));
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "host backend: cannot allocate %zu bytes of device memory (host RAM)", bytes);
    *out = p;
    return FERRY_OK;
}

static void host_free(backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static ferry_status host_host_alloc(backend *be, size_t bytes, void **out)
{
    (void)be;
    void *p = aligned_alloc(4096, round_up(bytes, 4096));
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "host backend: cannot allocate %zu bytes of staging memory", bytes);
    *out = p;
    return FERRY_OK;
}

static ferry_status host_host_register(backend *be, void *ptr, size_t bytes)
{
    (void)be; (void)ptr; (void)bytes;
    return FERRY_OK;
}

static void host_host_unregister(backend *be, void *ptr)
{
    (void)be; (void)ptr;
}

/* The "device" is host memory: what the process may still take, as its
 * cgroup says (common/hostmem.h, the headroom kept back), not the machine's
 * free pages, which a job under a memory limit would take to its OOM kill. */
static ferry_status host_mem_info(backend *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
    (void)be;
    long page = sysconf(_SC_PAGESIZE);
    uint64_t room = hostmem_available(NULL, NULL);
    *free_bytes = room ? room : (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)page;
    *total_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)page;
    return FERRY_OK;
}

static void host_close(backend *be) { (void)be; }

static const backend_vtable host_vtable = {
    .close = host_close,
    .mem_info = host_mem_info,
    .alloc = host_alloc,
    .free = host_free,
    .host_alloc = host_host_alloc,
    .host_free = host_free,
    .host_register = host_host_register,
    .host_unregister = host_host_unregister,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_synchronize = host_stream_synchronize,
    .stream_native = host_stream_native,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .stream_wait_event = host_stream_wait_event,
    .event_synchronize = host_event_synchronize,
    .event_query = host_event_query,
    .event_elapsed_ms = host_event_elapsed_ms,
    .memcpy_async = host_memcpy_async,
    .memset_async = host_memset_async,
    .launch_host = host_launch_host,
};

ferry_status backend_host_init(backend *be)
{
    be->vt = &host_vtable;
    be->ops = &backend_host_ops;
    be->act = FERRY_DTYPE_F32;
    be->impl = NULL;
    snprintf(be->device_name, sizeof be->device_name, "host (%ld CPUs)", sysconf(_SC_NPROCESSORS_ONLN));
    return FERRY_OK;
}
