/* Reading a memory trace: checks the header, then takes whole records until
 * the file ends, a record is cut short, or a record holds values no writer
 * produces; what was read before a problem is kept, and the problem is
 * described with its record number and byte offset. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tools/memprof/memprof.h"

static ferry_status fail(mp_trace *t, ferry_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ferry_status fail(mp_trace *t, ferry_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    t->status = st;
    return err_set(st, "%s", t->error);
}

static unsigned char *slurp(const char *path, size_t *len, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            if (ferror(f)) {
                *err = errno ? errno : EIO;
                free(buf);
                buf = NULL;
            }
            break;
        }
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            *err = ENOMEM;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Why a record cannot have come from the writer, or NULL. */
static const char *record_problem(const trace_record *r, uint64_t prev_t, char *buf, size_t cap)
{
    if (r->kind < TRACE_ALLOC || r->kind > TRACE_RESERVE)
        snprintf(buf, cap, "unknown record kind %u", r->kind);
    else if (r->pool >= MP_POOLS)
        snprintf(buf, cap, "unknown pool %u", r->pool);
    else if (r->category >= FERRY_MEM_CATEGORY_COUNT)
        snprintf(buf, cap, "unknown category %u", r->category);
    else if (r->t_ns < prev_t)
        snprintf(buf, cap, "time goes backwards (%llu ns after %llu ns)", (unsigned long long)r->t_ns,
                 (unsigned long long)prev_t);
    else if (memchr(r->name, '\0', TRACE_NAME_MAX) == NULL)
        snprintf(buf, cap, "name is not NUL-terminated");
    else
        return NULL;
    return buf;
}

ferry_status mp_read(const char *path, mp_trace *t)
{
    memset(t, 0, sizeof *t);
    int e = 0;
    size_t len = 0;
    unsigned char *buf = slurp(path, &len, &e);
    if (!buf)
        return fail(t, FERRY_ERR_IO, "cannot read trace '%s': %s", path, strerror(e));
    ferry_status st = FERRY_OK;
    uint32_t version = 0, rsize = 0;
    if (len < TRACE_HEADER_SIZE || memcmp(buf, TRACE_MAGIC, 8) != 0) {
        st = fail(t, FERRY_ERR_FORMAT,
                  "'%s' is not a ferry memory trace: %s (a trace starts with \"" TRACE_MAGIC
                  "\" and a %u-byte header)",
                  path, len < 8 ? "the file is shorter than its magic" : "wrong magic", TRACE_HEADER_SIZE);
        goto out;
    }
    memcpy(&version, buf + 8, 4);
    memcpy(&rsize, buf + 12, 4);
    memcpy(&t->start_unix_ns, buf + 16, 8);
    if (version != TRACE_VERSION) {
        st = fail(t, FERRY_ERR_FORMAT, "trace '%s' has format version %u; this memprof reads version %u",
                  path, version, TRACE_VERSION);
        goto out;
    }
    if (rsize < TRACE_RECORD_SIZE || rsize > 4096) {
        st = fail(t, FERRY_ERR_FORMAT, "trace '%s' claims %u-byte records; version %u records are %u bytes",
                  path, rsize, TRACE_VERSION, TRACE_RECORD_SIZE);
        goto out;
    }
    size_t body = len - TRACE_HEADER_SIZE, whole = body / rsize;
    t->rec = malloc((whole ? whole : 1) * sizeof *t->rec);
    if (!t->rec) {
        st = fail(t, FERRY_ERR_OUT_OF_MEMORY, "trace '%s': no memory for %zu records", path, whole);
        goto out;
    }
    uint64_t prev_t = 0;
    for (size_t i = 0; i < whole; i++) {
        size_t off = TRACE_HEADER_SIZE + i * rsize;
        trace_record r;
        memcpy(&r, buf + off, sizeof r);
        char why[160];
        if (record_problem(&r, prev_t, why, sizeof why)) {
            st = fail(t, FERRY_ERR_FORMAT,
                      "trace '%s' is corrupt at record %zu (byte offset %zu): %s; the figures cover "
                      "the %zu records before it",
                      path, i + 1, off, why, i);
            goto out;
        }
        prev_t = r.t_ns;
        t->rec[t->n++] = r;
    }
    if (body % rsize) {
        size_t off = TRACE_HEADER_SIZE + whole * rsize;
        st = fail(t, FERRY_ERR_FORMAT,
                  "trace '%s' is truncated: record %zu (byte offset %zu) has %zu of its %u bytes (was the "
                  "run stopped before the trace was closed?); the figures cover the %zu complete records",
                  path, whole + 1, off, body % rsize, rsize, whole);
    }
out:
    free(buf);
    return st;
}

void mp_trace_free(mp_trace *t)
{
    free(t->rec);
    t->rec = NULL;
    t->n = 0;
}
