/* Tests of memprof's trace reader and analyzer in-process
 * (tools/memprof/mp_read.c, mp_analyze.c, mp_svg.c, linked into this test):
 * every byte of a trace the writer made (with and without the records of a
 * memory plan), changed in turn (the new value from a seeded generator), is
 * caught and named by record, with exactly the records before it kept; a
 * role only on a planned buffer, even under a checksum made over it; a
 * trace without checksums (the older layout) still reads; hostile traces
 * get figures or a refusal, never a crash, a hang or an infinite
 * coordinate: allocations at the top of the 64-bit address space, a record
 * at 2^64 - 1 ns, a plan past the end of the address space with lifetimes
 * that are no numbers, /dev/zero, a folder, a FIFO, a cut header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "offload/trace.h"
#include "tap.h"
#include "test_files.h"
#include "tools/memprof/memprof.h"

static char dir[] = "/tmp/ferry_memprof_read_XXXXXX";

static void read_bytes(const unsigned char *b, size_t len, mp_trace *t)
{
    FILE *f = fmemopen((void *)b, len, "rb");
    if (!f) {
        memset(t, 0, sizeof *t);
        t->status = FERRY_ERR_IO;
        return;
    }
    mp_read_file(f, "mem", t);
    fclose(f);
}

/* A trace from the writer: 3 steps of phases, allocs, frees and timings;
 * with `planned`, version 3's records of a plan too (a region, a planned
 * buffer, a slot and a group's stay in it). */
static unsigned char *write_trace(size_t *len, bool planned)
{
    char path[600];
    snprintf(path, sizeof path, "%s/written.fmt", dir);
    trace *t = NULL;
    if (trace_open(path, &t) != FERRY_OK)
        return NULL;
    trace_limit(t, TRACE_POOL_DEVICE, 1 << 30);
    if (planned) {
        trace_region(t, (void *)(uintptr_t)0x100000, 8192);
        trace_planned(t, FERRY_MEM_PARAMS, "weights slot 0", 0, 4096, 0, INT32_MAX, TRACE_ROLE_WSLOT);
        trace_planned(t, FERRY_MEM_WORKSPACE, "workspace", 4096, 4096, 0, 5, TRACE_ROLE_BUFFER);
        trace_occupy(t, FERRY_MEM_PARAMS, "block 0", 1, 4000, (void *)(uintptr_t)0x100000);
        trace_vacate(t, FERRY_MEM_PARAMS, "block 0", 1, 4000, (void *)(uintptr_t)0x100000);
    }
    for (int step = 1; step <= 3; step++) {
        trace_phase(t, step, "forward");
        trace_alloc(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "acts", 4096u * step, (void *)(uintptr_t)0x1000);
        trace_alloc(t, TRACE_POOL_HOST, FERRY_MEM_GRADS, "grads", 8192, (void *)(uintptr_t)0x2000);
        trace_phase(t, step, "backward");
        trace_free(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "acts", 4096u * step, (void *)(uintptr_t)0x1000);
        trace_free(t, TRACE_POOL_HOST, FERRY_MEM_GRADS, "grads", 8192, (void *)(uintptr_t)0x2000);
        trace_step_timing(t, step, "optimizer_ms", 0.5 * step);
    }
    if (trace_close(t) != FERRY_OK)
        return NULL;
    FILE *f = fopen(path, "rb");
    unsigned char *b = malloc(1 << 16);
    *len = f && b ? fread(b, 1, 1 << 16, f) : 0;
    if (f)
        fclose(f);
    return b;
}

static unsigned char *written_trace(size_t *len) { return write_trace(len, false); }

/* A trace cut between two records, or with no END record (a killed run, a
 * full disk): told from a whole one. */
static void test_cut(void)
{
    size_t len = 0;
    unsigned char *b = written_trace(&len);
    mp_trace t;
    size_t n = (len - 32) / 96 - 1;
    read_bytes(b, len, &t);
    tap_ok(t.status == FERRY_OK && t.ended && t.version == TRACE_VERSION,
           "a whole trace: its end record read (version %u)", t.version);
    mp_trace_free(&t);
    read_bytes(b, len - 96, &t);
    tap_ok(t.status == FERRY_ERR_FORMAT && t.header_ok && t.n == n && !t.ended && strstr(t.error, "no end record"),
           "without its end record: cut, with all %zu records kept (%s)", n, t.error);
    mp_trace_free(&t);
    read_bytes(b, 32 + 5 * 96, &t);
    tap_ok(t.status == FERRY_ERR_FORMAT && t.n == 5 && strstr(t.error, "no end record"),
           "cut after 5 records, at a record boundary: cut (%s)", t.error);
    mp_trace_free(&t);
    /* A record after the end: the file was appended to. */
    unsigned char *more = malloc(len + 96);
    memcpy(more, b, len);
    memcpy(more + len, b + len - 96, 96);
    read_bytes(more, len + 96, &t);
    tap_ok(t.status == FERRY_ERR_FORMAT && strstr(t.error, "a record after the end record"),
           "a record after the end record: refused (%s)", t.error);
    mp_trace_free(&t);
    free(more);
    /* An end record that miscounts. */
    b[len - 96 + 16] ^= 1;
    uint32_t crc = trace_record_crc((const trace_record *)(b + len - 96), n);
    memcpy(b + len - 96 + 12, &crc, 4);
    read_bytes(b, len, &t);
    tap_ok(t.status == FERRY_ERR_FORMAT && strstr(t.error, "counts"), "an end record that miscounts: refused (%s)",
           t.error);
    mp_trace_free(&t);
    /* Version 1 had no end record: a whole file is read as complete. */
    b[8] = 1;
    uint32_t hcrc = trace_header_crc(b);
    memcpy(b + 28, &hcrc, 4);
    read_bytes(b, len - 96, &t);
    tap_ok(t.status == FERRY_OK && t.version == 1 && t.n == n, "a version-1 trace without an end record: read whole");
    mp_trace_free(&t);
    free(b);
}

/* Each byte of a written trace changed in turn (with `planned`: one with
 * the records of a plan among them). */
static void test_every_byte(bool planned)
{
    size_t len = 0;
    unsigned char *b = write_trace(&len, planned);
    mp_trace t;
    read_bytes(b, len, &t);
    size_t n = (len - 32) / 96 - 1; /* the END record closes the file; it is no event */
    tap_diag("%s:", planned ? "a trace with the records of a plan" : "a trace of allocations");
    if (!tap_is_status(t.status, FERRY_OK, "the written trace reads whole (%zu records)", n) || !t.checksummed) {
        tap_ok(0, "and carries checksums");
        free(b);
        mp_trace_free(&t);
        return;
    }
    mp_trace_free(&t);
    uint64_t seed = 20261202;
    tap_diag("new byte values from seed %llu", (unsigned long long)seed);
    int header_refused = 1, caught = 1, named = 1, kept = 1;
    for (size_t at = 0; at < len; at++) {
        unsigned char old = b[at];
        b[at] ^= (unsigned char)(1 + tap_rand_u64(&seed) % 255);
        read_bytes(b, len, &t);
        b[at] = old;
        if (at < 32) {
            header_refused &= t.status == FERRY_ERR_FORMAT && !t.header_ok && t.n == 0;
        } else {
            size_t rec = (at - 32) / 96 + 1;
            char want[64];
            snprintf(want, sizeof want, "corrupt at record %zu ", rec);
            caught &= t.status == FERRY_ERR_FORMAT;
            named &= strstr(t.error, want) != NULL;
            kept &= t.n == rec - 1;
            if (t.status != FERRY_ERR_FORMAT || !strstr(t.error, want))
                tap_diag("  byte %zu (record %zu): %s", at, rec, t.error);
        }
        mp_trace_free(&t);
    }
    tap_ok(header_refused, "each of the 32 header bytes changed: refused, no records");
    tap_ok(caught, "each of the %zu record bytes changed: FERRY_ERR_FORMAT", len - 32);
    tap_ok(named, "and the message names the record holding it");
    tap_ok(kept, "and exactly the records before it are kept");
    /* Two whole records swapped: each is valid alone, not at its place. */
    unsigned char r3[96];
    memcpy(r3, b + 32 + 3 * 96, 96);
    memcpy(b + 32 + 3 * 96, b + 32 + 4 * 96, 96);
    memcpy(b + 32 + 4 * 96, r3, 96);
    read_bytes(b, len, &t);
    tap_ok(t.status == FERRY_ERR_FORMAT && t.n == 3, "records 4 and 5 swapped: stopped at record 4 (%s)", t.error);
    mp_trace_free(&t);
    memcpy(b + 32 + 4 * 96, b + 32 + 3 * 96, 96);
    memcpy(b + 32 + 3 * 96, r3, 96);
    /* The older layout: no flags, no header CRC, no record CRCs. */
    memset(b + 24, 0, 8);
    for (size_t at = 32; at + 96 <= len; at += 96)
        memset(b + at + 12, 0, 4);
    read_bytes(b, len, &t);
    tap_ok(t.status == FERRY_OK && t.n == n && !t.checksummed,
           "without checksums (the older layout) all %zu records read, said to be unchecked", n);
    mp_trace_free(&t);
    free(b);
}

/* Byte 11 is a planned buffer's role: 0 to 3 there, 0 in any other record,
 * even one whose checksum was made over it. */
static void test_roles(void)
{
    size_t len = 0;
    unsigned char *b = write_trace(&len, true);
    static const struct {
        size_t record; /* 1: the region, 2: the slot's PLANNED, 4: the OCCUPY */
        unsigned char role;
        const char *want;
    } cases[] = {{2, 3, NULL}, {2, 4, "role 4 in a record of kind 9"}, {1, 1, "role 1 in a record of kind 8"},
                 {4, 2, "role 2 in a record of kind 10"}};
    for (size_t i = 0; b && i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *copy = malloc(len);
        memcpy(copy, b, len);
        trace_record *r = (trace_record *)(copy + 32 + cases[i].record * 96);
        r->role = cases[i].role;
        r->crc = trace_record_crc(r, cases[i].record);
        mp_trace t;
        read_bytes(copy, len, &t);
        if (cases[i].want)
            tap_ok(t.status == FERRY_ERR_FORMAT && t.n == cases[i].record && strstr(t.error, cases[i].want),
                   "role %u on record %zu (checksum made over it): refused (%s)", cases[i].role, cases[i].record + 1,
                   t.error);
        else
            tap_ok(t.status == FERRY_OK && t.rec[cases[i].record].role == cases[i].role,
                   "role %u on a planned buffer: read", cases[i].role);
        mp_trace_free(&t);
        free(copy);
    }
    free(b);
}

static trace_record rec(uint64_t t_ns, int kind, int pool, uint64_t bytes, uint64_t addr)
{
    trace_record r;
    memset(&r, 0, sizeof r);
    r.t_ns = t_ns;
    r.kind = (uint8_t)kind;
    r.pool = (uint8_t)pool;
    r.bytes = bytes;
    r.addr = addr;
    r.step = -1;
    strcpy(r.name, "x");
    return r;
}

/* Records after a header of the older layout (traces written before the
 * checksums existed), of format `version` (3 needs its end record). */
static void read_records_of(const trace_record *recs, size_t n, unsigned version, mp_trace *t)
{
    unsigned char b[32 + 16 * 96] = "FERRYMEM";
    b[8] = (unsigned char)version;
    b[12] = 96;
    memcpy(b + 32, recs, n * sizeof *recs);
    read_bytes(b, 32 + n * 96, t);
}

static void read_records(const trace_record *recs, size_t n, mp_trace *t) { read_records_of(recs, n, 1, t); }

/* The first 256 KiB of a picture written ("" when there is none). */
static const char *read_picture(const char *path)
{
    static char picture[1 << 18];
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(picture, 1, sizeof picture - 1, f) : 0;
    picture[got] = '\0';
    if (f)
        fclose(f);
    return picture;
}

static void test_hostile(void)
{
    /* 128 bytes that once crashed memprof: a host free of 2^64 - 2 alone. On
     * the device, allocations at the very top and at 0, allocated and freed. */
    const uint64_t top = 0xFFFFFFFFFFFFFFFFull;
    trace_record recs[6] = {rec(1, TRACE_ALLOC, TRACE_POOL_DEVICE, 7, top - 1),
                            rec(2, TRACE_ALLOC, TRACE_POOL_DEVICE, 5, top),
                            rec(3, TRACE_ALLOC, TRACE_POOL_DEVICE, 3, 0),
                            rec(4, TRACE_FREE, TRACE_POOL_DEVICE, 7, top - 1),
                            rec(5, TRACE_FREE, TRACE_POOL_DEVICE, 3, 0),
                            rec(6, TRACE_FREE, TRACE_POOL_HOST, 0, top - 1)};
    mp_trace t;
    mp_report r;
    read_records(recs, 6, &t);
    TAP_IS_STATUS(t.status, FERRY_OK, "top addresses: read");
    if (tap_is_status(mp_analyze(&t, 10, 600, &r), FERRY_OK, "top addresses: analyzed")) {
        TAP_IS_INT(r.pool[TRACE_POOL_DEVICE].peak, 15, "top addresses: the device peak is 7 + 5 + 3 bytes");
        TAP_IS_INT(r.pool[TRACE_POOL_DEVICE].final_bytes, 5, "top addresses: 5 bytes (at 2^64-1) live at the end");
        TAP_IS_INT(r.pool[TRACE_POOL_DEVICE].unknown_frees, 0, "top addresses: every device free found its alloc");
        TAP_IS_INT(r.pool[TRACE_POOL_HOST].unknown_frees, 1, "top addresses: the lone host free is unknown");
        mp_report_free(&r);
    }
    mp_trace_free(&t);

    /* The last nanosecond of 64 bits (t_end + 1 overflowed; a float-to-int UB). */
    trace_record late[2] = {rec(0, TRACE_ALLOC, TRACE_POOL_DEVICE, 64, 0x1000),
                            rec(UINT64_MAX, TRACE_ALLOC, TRACE_POOL_DEVICE, 64, 0x2000)};
    read_records(late, 2, &t);
    char svg[600];
    snprintf(svg, sizeof svg, "%s/late.svg", dir);
    if (tap_is_status(mp_analyze(&t, 10, 600, &r), FERRY_OK, "t = 2^64-1 ns: analyzed")) {
        const mp_pool_report *d = &r.pool[TRACE_POOL_DEVICE];
        tap_ok(d->peak == 128 && d->peak_t_ns == UINT64_MAX, "t = 2^64-1 ns: the 128-byte peak falls there");
        TAP_IS_INT(d->bucket[599][FERRY_MEM_PARAMS], 128, "t = 2^64-1 ns: in the last timeline column");
        TAP_IS_INT(d->bucket[0][FERRY_MEM_PARAMS], 64, "t = 0: the first column holds the first 64 bytes");
        TAP_IS_STATUS(mp_write_svg(&r, NULL, svg, "late"), FERRY_OK, "t = 2^64-1 ns: the timeline is drawn");
        mp_report_free(&r);
    }
    mp_trace_free(&t);
    const char *picture = read_picture(svg);
    tap_ok(strstr(picture, "<svg") && !strstr(picture, "inf") && !strstr(picture, "nan"),
           "t = 2^64-1 ns: with finite coordinates only");
}

/* A plan no engine writes: a buffer before the region, the region running
 * past 2^64 and given twice, sizes of 0 and 2^63, a lifetime that is no
 * number, a stay at the top address by a group of INT64_MIN and a vacate of
 * nothing. Checked and drawn: every problem said, every coordinate finite. */
static void test_hostile_plan(void)
{
    const uint64_t top = 0xFFFFFFFFFFFFFFFFull;
    trace_record recs[10] = {rec(1, TRACE_PLANNED, TRACE_POOL_DEVICE, 1ull << 63, top - 255),
                             rec(2, TRACE_REGION, TRACE_POOL_DEVICE, 1ull << 63, top - 4095),
                             rec(3, TRACE_REGION, TRACE_POOL_DEVICE, 4096, 0),
                             rec(4, TRACE_PLANNED, TRACE_POOL_DEVICE, 0, 0),
                             rec(5, TRACE_ALLOC, TRACE_POOL_DEVICE, top, top - 4095),
                             rec(6, TRACE_OCCUPY, TRACE_POOL_DEVICE, top, top - 4095),
                             rec(7, TRACE_VACATE, TRACE_POOL_DEVICE, 1, 12345),
                             rec(8, TRACE_FREE, TRACE_POOL_DEVICE, top, top - 4095),
                             rec(9, TRACE_ALLOC, TRACE_POOL_DEVICE, 256, top - 255),
                             rec(10, TRACE_END, TRACE_POOL_DEVICE, 9, 0)};
    recs[0].value = NAN;
    recs[0].step = INT64_MIN;
    recs[3].role = TRACE_ROLE_WSLOT;
    recs[3].value = TRACE_FOREVER;
    recs[5].step = INT64_MIN;
    mp_trace t;
    read_records_of(recs, 10, 3, &t);
    TAP_IS_STATUS(t.status, FERRY_OK, "hostile plan: read (%s)", t.error);
    mp_plan p;
    mp_report r;
    if (!tap_is_status(mp_plan_check(&t, &p), FERRY_OK, "hostile plan: checked")) {
        mp_trace_free(&t);
        return;
    }
    bool all_said = p.mismatches > 0;
    for (size_t i = 0; i < p.mismatches && i < MP_PLAN_SAID; i++)
        all_said &= p.said[i][0] != '\0';
    tap_ok(p.present && all_said, "hostile plan: %zu mismatches, each said (the first: %s)", p.mismatches,
           p.mismatches ? p.said[0] : "");
    char svg[600];
    snprintf(svg, sizeof svg, "%s/hostile-plan.svg", dir);
    if (tap_is_status(mp_analyze(&t, 10, 600, &r), FERRY_OK, "hostile plan: analyzed")) {
        TAP_IS_STATUS(mp_write_svg(&r, &p, svg, "hostile plan"), FERRY_OK, "hostile plan: drawn");
        mp_report_free(&r);
    }
    mp_plan_free(&p);
    mp_trace_free(&t);
    const char *picture = read_picture(svg);
    tap_ok(strstr(picture, "device address space") && !strstr(picture, "inf") && !strstr(picture, "nan"),
           "hostile plan: the address space drawn with finite coordinates only");
}

static void test_not_traces(void)
{
    mp_trace t;
    /* A device never ends, a FIFO would block the open: neither is read. */
    TAP_IS_STATUS(mp_read("/dev/zero", &t), FERRY_ERR_IO, "/dev/zero: refused");
    tap_ok(!t.header_ok && strstr(t.error, "character device"), "/dev/zero: a device, said so (%s)", t.error);
    mp_trace_free(&t);
    TAP_IS_STATUS(mp_read(dir, &t), FERRY_ERR_IO, "a folder: an I/O error");
    tap_ok(strstr(t.error, "is a folder") != NULL, "a folder: said so (%s)", t.error);
    mp_trace_free(&t);
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo.trace", dir);
    if (mkfifo(fifo, 0600) == 0) {
        pid_t pid = fork();
        if (pid == 0) { /* a blocking open would hang: the alarm ends it */
            alarm(10);
            mp_trace c;
            ferry_status st = mp_read(fifo, &c);
            _exit(st == FERRY_ERR_IO && strstr(c.error, "FIFO") ? 0 : 1);
        }
        int ws = 0;
        waitpid(pid, &ws, 0);
        tap_ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "a FIFO: refused at once, said so (%s)",
               WIFSIGNALED(ws) ? "blocked until the alarm" : "exited");
        unlink(fifo);
    }
    TAP_IS_STATUS(mp_read("/nonexistent/x.fmt", &t), FERRY_ERR_IO, "missing: an I/O error");
    mp_trace_free(&t);
    const unsigned char cut[16] = "FERRYMEM\1\0\0\0`\0\0\0";
    read_bytes(cut, sizeof cut, &t);
    tap_ok(t.status == FERRY_ERR_FORMAT && !t.header_ok &&
               strstr(t.error, "ends inside its 32-byte header, after 16 bytes") && !strstr(t.error, "wrong magic"),
           "a header cut after 16 bytes: said so, not 'wrong magic' (%s)", t.error);
    mp_trace_free(&t);
}

int main(void)
{
    if (!mkdtemp(dir))
        tap_plan_skip("no temporary directory");
    test_every_byte(false);
    test_every_byte(true);
    test_roles();
    test_cut();
    test_hostile();
    test_hostile_plan();
    test_not_traces();
    test_dir_remove(dir);
    return tap_done();
}
