/* Reading a memory trace: checks the header, then takes whole records until
 * the file ends, a record is cut short, a record holds values no writer
 * produces, or its checksum does not match; what was read before a problem
 * is kept, and the problem is described with its record number and byte
 * offset. The file is read as a stream, header first, so a file that is not
 * a trace is refused before anything else is read; a path that is not a
 * regular file (a FIFO, a device such as /dev/zero, a folder) is refused
 * without being opened for reading in a way that could block. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
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

/* Reads up to n bytes; returns how many (less only at the end of the file).
 * *err is the errno of a read error, else 0. */
static size_t read_up_to(FILE *f, void *buf, size_t n, int *err)
{
    size_t got = fread(buf, 1, n, f);
    *err = got < n && ferror(f) ? (errno ? errno : EIO) : 0;
    return got;
}

static ferry_status read_error(mp_trace *t, const char *name, int e)
{
    return fail(t, FERRY_ERR_IO, "cannot read trace '%s': %s", name, strerror(e));
}

/* Checks the 32-byte header; sets t->checksummed and *rsize. */
static ferry_status check_header(mp_trace *t, const char *name, const unsigned char *h, size_t have,
                                 uint32_t *rsize)
{
    if (have < 8 || memcmp(h, TRACE_MAGIC, 8) != 0)
        return fail(t, FERRY_ERR_FORMAT,
                    "'%s' is not a ferry memory trace: %s (a trace starts with \"" TRACE_MAGIC
                    "\" and a %u-byte header)",
                    name, have < 8 ? "the file is shorter than its magic" : "wrong magic", TRACE_HEADER_SIZE);
    if (have < TRACE_HEADER_SIZE)
        return fail(t, FERRY_ERR_FORMAT,
                    "trace '%s' ends inside its %u-byte header, after %zu bytes (was the run stopped as the "
                    "trace was created?); it holds no records",
                    name, TRACE_HEADER_SIZE, have);
    uint32_t version, flags, hcrc;
    memcpy(&version, h + 8, 4);
    memcpy(rsize, h + 12, 4);
    memcpy(&t->start_unix_ns, h + 16, 8);
    memcpy(&flags, h + 24, 4);
    memcpy(&hcrc, h + 28, 4);
    if (version < 1 || version > TRACE_VERSION)
        return fail(t, FERRY_ERR_FORMAT, "trace '%s' has format version %u; this memprof reads versions 1 to %u",
                    name, version, TRACE_VERSION);
    t->version = version;
    if (*rsize < TRACE_RECORD_SIZE || *rsize > 4096)
        return fail(t, FERRY_ERR_FORMAT, "trace '%s' claims %u-byte records; version %u records are %u bytes",
                    name, *rsize, version, TRACE_RECORD_SIZE);
    if (flags == 0 && hcrc == 0) /* written before records carried checksums */
        return FERRY_OK;
    uint32_t want = trace_header_crc(h);
    if (flags != TRACE_FLAG_CRC || hcrc != want)
        return fail(t, FERRY_ERR_FORMAT,
                    "trace '%s' has a damaged header: flags 0x%08x, checksum 0x%08x where its bytes give 0x%08x; "
                    "the file was changed after it was written",
                    name, flags, hcrc, want);
    t->checksummed = true;
    return FERRY_OK;
}

/* Why a record cannot have come from the writer, or NULL. */
static const char *record_problem(const mp_trace *t, const trace_record *r, uint64_t prev_t, char *buf,
                                  size_t cap)
{
    uint32_t crc = t->checksummed ? trace_record_crc(r, t->n) : 0;
    unsigned last_kind = t->version >= 3 ? TRACE_VACATE : t->version == 2 ? TRACE_END : TRACE_RESERVE;
    if (t->ended)
        snprintf(buf, cap, "a record after the end record");
    else if (r->kind < TRACE_ALLOC || r->kind > last_kind)
        snprintf(buf, cap, "unknown record kind %u", r->kind);
    else if (t->version >= 3 && r->role != 0 && (r->kind != TRACE_PLANNED || r->role >= TRACE_ROLES))
        snprintf(buf, cap, "role %u in a record of kind %u (only a planned buffer has one, 0 to %d)", r->role,
                 r->kind, TRACE_ROLES - 1);
    else if (r->kind == TRACE_END && r->bytes != t->n)
        snprintf(buf, cap, "the end record counts %llu records before it, but %zu were read",
                 (unsigned long long)r->bytes, t->n);
    else if (r->pool >= MP_POOLS)
        snprintf(buf, cap, "unknown pool %u", r->pool);
    else if (r->category >= FERRY_MEM_CATEGORY_COUNT)
        snprintf(buf, cap, "unknown category %u", r->category);
    else if (r->t_ns < prev_t)
        snprintf(buf, cap, "time goes backwards (%llu ns after %llu ns)", (unsigned long long)r->t_ns,
                 (unsigned long long)prev_t);
    else if (memchr(r->name, '\0', TRACE_NAME_MAX) == NULL)
        snprintf(buf, cap, "name is not NUL-terminated");
    else if (crc != r->crc)
        snprintf(buf, cap, "checksum 0x%08x, but its bytes give 0x%08x (a changed byte, or a record lost "
                 "or moved)", r->crc, crc);
    else
        return NULL;
    return buf;
}

static ferry_status push(mp_trace *t, const char *name, const trace_record *r, size_t *cap)
{
    if (t->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 1024;
        trace_record *nr = realloc(t->rec, ncap * sizeof *nr);
        if (!nr)
            return fail(t, FERRY_ERR_OUT_OF_MEMORY, "trace '%s': no memory for %zu records; the figures cover "
                        "the first %zu", name, ncap, t->n);
        t->rec = nr;
        *cap = ncap;
    }
    t->rec[t->n++] = *r;
    return FERRY_OK;
}

/* Takes records until the end of the file or the first problem. */
static ferry_status read_records(FILE *f, const char *name, uint32_t rsize, mp_trace *t)
{
    unsigned char *buf = malloc(rsize);
    if (!buf)
        return fail(t, FERRY_ERR_OUT_OF_MEMORY, "trace '%s': no memory for a record", name);
    ferry_status st = FERRY_OK;
    size_t cap = 0;
    uint64_t prev_t = 0;
    for (;;) {
        size_t off = TRACE_HEADER_SIZE + t->n * (size_t)rsize;
        int e;
        size_t got = read_up_to(f, buf, rsize, &e);
        if (e) {
            st = read_error(t, name, e);
            break;
        }
        if (got == 0)
            break;
        if (got < rsize) {
            st = fail(t, FERRY_ERR_FORMAT,
                      "trace '%s' is truncated: record %zu (byte offset %zu) has %zu of its %u bytes (was the "
                      "run stopped before the trace was closed?); the figures cover the %zu complete records",
                      name, t->n + 1, off, got, rsize, t->n);
            break;
        }
        trace_record r;
        memcpy(&r, buf, sizeof r);
        char why[200];
        if (record_problem(t, &r, prev_t, why, sizeof why)) {
            st = fail(t, FERRY_ERR_FORMAT,
                      "trace '%s' is corrupt at record %zu (byte offset %zu): %s; the figures cover "
                      "the %zu records before it",
                      name, t->n + 1, off, why, t->n);
            break;
        }
        prev_t = r.t_ns;
        if (r.kind == TRACE_END) {
            t->ended = true; /* not kept: it is no event */
            continue;
        }
        if ((st = push(t, name, &r, &cap)) != FERRY_OK)
            break;
    }
    free(buf);
    /* A whole file without its end record: the writer never closed it. */
    if (st == FERRY_OK && t->version >= 2 && !t->ended)
        st = fail(t, FERRY_ERR_FORMAT,
                  "trace '%s' has no end record: the run that wrote it was killed, or its disk filled, before the "
                  "trace was closed; the figures cover the %zu records it has",
                  name, t->n);
    return st;
}

ferry_status mp_read_file(FILE *f, const char *name, mp_trace *t)
{
    memset(t, 0, sizeof *t);
    unsigned char h[TRACE_HEADER_SIZE];
    int e;
    size_t have = read_up_to(f, h, sizeof h, &e);
    if (e)
        return read_error(t, name, e);
    uint32_t rsize = 0;
    ferry_status st = check_header(t, name, h, have, &rsize);
    if (st != FERRY_OK)
        return st;
    t->header_ok = true;
    return read_records(f, name, rsize, t);
}

ferry_status mp_read(const char *path, mp_trace *t)
{
    memset(t, 0, sizeof *t);
    /* A regular file only, opened without blocking: a FIFO would wait for a
     * writer forever, a device never ends. */
    int fd;
    ferry_status st = fileio_open_input(path, "trace", &fd, NULL);
    FILE *f = st == FERRY_OK ? fdopen(fd, "rb") : NULL;
    if (st == FERRY_OK && !f) {
        int e = errno;
        close(fd);
        return read_error(t, path, e);
    }
    if (st != FERRY_OK)
        return fail(t, st, "%s", ferry_last_error());
    st = mp_read_file(f, path, t);
    fclose(f);
    return st;
}

void mp_trace_free(mp_trace *t)
{
    free(t->rec);
    t->rec = NULL;
    t->n = 0;
}
