/* The memory trace writer: fixed-size binary records, each with its CRC-32C,
 * buffered under a mutex and written in large chunks from whichever thread
 * fills the buffer; and the records' checksums that the writer and
 * tools/memprof share (CRC-32C from common/crc32c.h). The records of the
 * device's memory plan and of params mode's slots are written here too; what
 * they mean is the engine's (engine/plan.h), and their check memprof's.
 * The format is in trace.h and docs/memprof.md; the reader is tools/memprof. */
#include "offload/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/fileio.h"

_Static_assert(sizeof(trace_record) == TRACE_RECORD_SIZE, "trace_record is the documented 96 bytes");
_Static_assert(offsetof(trace_record, name) == 48, "trace_record layout is documented");
_Static_assert(offsetof(trace_record, crc) == 12, "trace_record layout is documented");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the trace format is little-endian");

#define TRACE_BUFFER_RECORDS 4096 /* 384 KiB per write */

uint32_t trace_record_crc(const trace_record *r, uint64_t index)
{
    trace_record copy = *r;
    copy.crc = 0;
    return crc32c(crc32c(0, &index, sizeof index), &copy, sizeof copy);
}

uint32_t trace_header_crc(const unsigned char header[TRACE_HEADER_SIZE])
{
    return crc32c(0, header, 28);
}

/* ---- the writer ---- */

struct trace {
    pthread_mutex_t mu;
    int fd;
    struct timespec t0;
    trace_record *buf;
    size_t n;
    uint64_t records;
    ferry_status failure;     /* first write failure, FERRY_OK if none */
    char failure_msg[512];
    char *path;
};

static uint64_t elapsed_ns(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)(now.tv_sec - t0->tv_sec) * 1000000000ull + (uint64_t)now.tv_nsec -
           (uint64_t)t0->tv_nsec;
}

static int write_all(int fd, const void *data, size_t bytes)
{
    const char *p = data;
    while (bytes > 0) {
        ssize_t w = write(fd, p, bytes);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        p += w;
        bytes -= (size_t)w;
    }
    return 0;
}

/* Called with the mutex held. A failure is latched, and later records are
 * dropped: a half-written trace is better than a stalled run. */
static void flush_locked(trace *t)
{
    if (t->n == 0)
        return;
    if (t->failure == FERRY_OK) {
        int e = write_all(t->fd, t->buf, t->n * sizeof(trace_record));
        if (e) {
            t->failure = FERRY_ERR_IO;
            snprintf(t->failure_msg, sizeof t->failure_msg,
                     "memory trace '%s': write failed: %s; the trace ends early", t->path, strerror(e));
        }
    }
    t->n = 0;
}

ferry_status trace_open(const char *path, trace **out)
{
    if (!path || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "trace_open: NULL path or out");
    *out = NULL;
    trace *t = calloc(1, sizeof *t);
    if (t)
        t->buf = malloc(TRACE_BUFFER_RECORDS * sizeof(trace_record));
    if (t)
        t->path = strdup(path);
    if (!t || !t->buf || !t->path) {
        if (t) {
            free(t->buf);
            free(t->path);
        }
        free(t);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memory trace: cannot allocate its buffer");
    }
    /* A regular file (truncated) or a character device; never a FIFO, which
     * would block the open, nor a folder. */
    ferry_status opened = fileio_open_output(path, "memory trace", false, &t->fd);
    if (opened != FERRY_OK) {
        ferry_status st = err_wrap(opened, "cannot create the memory trace");
        free(t->buf);
        free(t->path);
        free(t);
        return st;
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    unsigned char header[TRACE_HEADER_SIZE] = {0};
    uint32_t version = TRACE_VERSION, rsize = TRACE_RECORD_SIZE;
    uint64_t start = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec;
    memcpy(header, TRACE_MAGIC, 8);
    memcpy(header + 8, &version, 4);
    memcpy(header + 12, &rsize, 4);
    uint32_t flags = TRACE_FLAG_CRC;
    memcpy(header + 16, &start, 8);
    memcpy(header + 24, &flags, 4);
    uint32_t hcrc = trace_header_crc(header);
    memcpy(header + 28, &hcrc, 4);
    int e = write_all(t->fd, header, sizeof header);
    if (e) {
        ferry_status st = err_set(FERRY_ERR_IO, "cannot write memory trace '%s': %s", path, strerror(e));
        close(t->fd);
        free(t->buf);
        free(t->path);
        free(t);
        return st;
    }
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return FERRY_OK;
}

static ferry_status report_failure(trace *t)
{
    if (t->failure == FERRY_OK)
        return FERRY_OK;
    return err_set(t->failure, "%s", t->failure_msg);
}

ferry_status trace_flush(trace *t)
{
    if (!t)
        return FERRY_OK;
    pthread_mutex_lock(&t->mu);
    flush_locked(t);
    ferry_status st = report_failure(t);
    pthread_mutex_unlock(&t->mu);
    return st;
}

/* A record's fields but its time and checksum, which put() fills. */
typedef struct trace_fields {
    trace_kind kind;
    trace_pool pool;
    int category, role;
    const char *name;
    uint64_t bytes, addr;
    int64_t step;
    double value;
} trace_fields;

static void put(trace *t, const trace_fields *f);

ferry_status trace_close(trace *t)
{
    if (!t)
        return FERRY_OK;
    /* The END record says the trace is whole: its count is the records before it. */
    put(t, &(trace_fields){.kind = TRACE_END, .name = "end", .step = -1});
    pthread_mutex_lock(&t->mu);
    flush_locked(t);
    pthread_mutex_unlock(&t->mu);
    if (close(t->fd) != 0 && t->failure == FERRY_OK) {
        t->failure = FERRY_ERR_IO;
        snprintf(t->failure_msg, sizeof t->failure_msg, "memory trace '%s': close failed: %s", t->path,
                 strerror(errno));
    }
    ferry_status st = report_failure(t);
    pthread_mutex_destroy(&t->mu);
    free(t->buf);
    free(t->path);
    free(t);
    return st;
}

/* Fills the record in place in the buffer: the timestamp is taken under the
 * mutex so the file's order is the timestamps' order. */
static void put(trace *t, const trace_fields *f)
{
    pthread_mutex_lock(&t->mu);
    trace_record *r = &t->buf[t->n];
    memset(r, 0, sizeof *r);
    r->t_ns = elapsed_ns(&t->t0);
    r->kind = (uint8_t)f->kind;
    r->pool = (uint8_t)f->pool;
    r->category = (uint8_t)f->category;
    r->role = (uint8_t)f->role;
    r->bytes = f->kind == TRACE_END ? t->records : f->bytes;
    r->addr = f->addr;
    r->step = f->step;
    r->value = f->value;
    if (f->name) {
        size_t len = strnlen(f->name, TRACE_NAME_MAX - 1);
        memcpy(r->name, f->name, len);
    }
    r->crc = trace_record_crc(r, t->records);
    t->records++;
    if (++t->n == TRACE_BUFFER_RECORDS)
        flush_locked(t);
    pthread_mutex_unlock(&t->mu);
}

static uint64_t addr_of(const void *p) { return (uint64_t)(uintptr_t)p; }

void trace_alloc(trace *t, trace_pool pool, ferry_mem_category category, const char *name,
                 uint64_t bytes, const void *addr)
{
    if (t)
        put(t, &(trace_fields){TRACE_ALLOC, pool, (int)category, 0, name, bytes, addr_of(addr), -1, 0.0});
}

void trace_free(trace *t, trace_pool pool, ferry_mem_category category, const char *name,
                uint64_t bytes, const void *addr)
{
    if (t)
        put(t, &(trace_fields){TRACE_FREE, pool, (int)category, 0, name, bytes, addr_of(addr), -1, 0.0});
}

void trace_limit(trace *t, trace_pool pool, uint64_t bytes)
{
    if (t)
        put(t, &(trace_fields){.kind = TRACE_LIMIT, .pool = pool, .bytes = bytes, .step = -1});
}

void trace_reserve(trace *t, trace_pool pool, uint64_t reserved_bytes)
{
    if (t)
        put(t, &(trace_fields){.kind = TRACE_RESERVE, .pool = pool, .bytes = reserved_bytes, .step = -1});
}

void trace_phase(trace *t, int64_t step, const char *phase)
{
    if (t)
        put(t, &(trace_fields){.kind = TRACE_PHASE, .name = phase ? phase : "", .step = step});
}

void trace_step_timing(trace *t, int64_t step, const char *key, double ms)
{
    if (t)
        put(t, &(trace_fields){.kind = TRACE_TIMING, .name = key ? key : "", .step = step, .value = ms});
}

void trace_region(trace *t, const void *base, uint64_t bytes)
{
    if (t)
        put(t, &(trace_fields){.kind = TRACE_REGION, .name = "planned region", .bytes = bytes,
                               .addr = addr_of(base), .step = -1});
}

void trace_planned(trace *t, ferry_mem_category category, const char *name, uint64_t offset, uint64_t bytes,
                   int32_t start, int32_t end, trace_plan_role role)
{
    if (t)
        put(t, &(trace_fields){TRACE_PLANNED, TRACE_POOL_DEVICE, (int)category, (int)role, name, bytes, offset, start,
                               (double)end}); /* INT32_MAX is TRACE_FOREVER */
}

void trace_occupy(trace *t, ferry_mem_category category, const char *name, int group, uint64_t bytes,
                  const void *slot)
{
    if (t)
        put(t, &(trace_fields){TRACE_OCCUPY, TRACE_POOL_DEVICE, (int)category, 0, name, bytes, addr_of(slot), group,
                               0.0});
}

void trace_vacate(trace *t, ferry_mem_category category, const char *name, int group, uint64_t bytes,
                  const void *slot)
{
    if (t)
        put(t, &(trace_fields){TRACE_VACATE, TRACE_POOL_DEVICE, (int)category, 0, name, bytes, addr_of(slot), group,
                               0.0});
}

uint64_t trace_record_count(trace *t)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mu);
    uint64_t n = t->records;
    pthread_mutex_unlock(&t->mu);
    return n;
}
