/* Tests of the memory trace writer (offload/trace.c): the bytes on disk are
 * decoded here by hand from the layout documented in docs/memprof.md, not
 * through the writer's struct, and their checksums recomputed with the
 * tests' bit-by-bit CRC-32C (tests/ref_crc32c.h; common/crc32c.c itself is
 * tests/common/test_crc32c.c's), version 3's records of the memory plan
 * and of the slots among them; NULL traces are no-ops; records from
 * several threads all arrive in time order; write failures are reported. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "offload/trace.h"
#include "ref_crc32c.h"
#include "tap.h"
#include "test_files.h"

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static uint64_t u64_at(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t u32_at(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static uint32_t ref_record_crc(const unsigned char *rec, uint64_t index)
{
    unsigned char buf[8 + 96];
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(index >> (8 * i));
    memcpy(buf + 8, rec, 96);
    memset(buf + 8 + 12, 0, 4);
    return ref_crc32c(0, buf, sizeof buf);
}

static void test_checksums(const char *path)
{
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    if (!tap_ok(b && len >= 32 && (len - 32) % 96 == 0, "checksums: a whole trace to check (%zu bytes)", len)) {
        free(b);
        return;
    }
    TAP_IS_INT(u32_at(b + 24), 1, "checksums: header flags say records carry a CRC (bit 0)");
    TAP_IS_INT(u32_at(b + 28), ref_crc32c(0, b, 28), "checksums: header CRC of bytes 0..27");
    size_t bad = 0, n = (len - 32) / 96;
    for (size_t i = 0; i < n; i++)
        bad += u32_at(b + 32 + i * 96 + 12) != ref_record_crc(b + 32 + i * 96, i);
    TAP_IS_INT(bad, 0, "checksums: all %zu records carry the CRC of their index and bytes", n);
    TAP_IS_INT(b[32 + 11], 0, "checksums: byte 11 of a record stays 0");
    free(b);
}

static void test_layout(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/layout.fmt", dir);
    trace *t = NULL;
    TAP_IS_STATUS(trace_open(path, &t), FERRY_OK, "layout: open");
    trace_phase(t, 3, "backward");
    trace_alloc(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "block 17 attn", 512u << 20, (void *)0x7f0000001000);
    trace_free(t, TRACE_POOL_HOST, FERRY_MEM_OPTIMIZER,
               "a name that is much longer than the forty-seven bytes a record keeps", 4096, (void *)0x2000);
    trace_step_timing(t, 3, "gpu_wait_transfers", 1.75);
    trace_limit(t, TRACE_POOL_DEVICE, 24ull << 30);
    trace_reserve(t, TRACE_POOL_HOST, 256u << 20);
    TAP_IS_INT(trace_record_count(t), 6, "layout: six records counted");
    TAP_IS_STATUS(trace_close(t), FERRY_OK, "layout: close");
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    TAP_IS_INT(len, 32 + 7 * 96, "layout: 32-byte header + 6 records of 96 bytes + the end record");
    if (!b || len != 32 + 7 * 96) {
        free(b);
        return;
    }
    tap_ok(memcmp(b, "FERRYMEM", 8) == 0, "layout: magic");
    TAP_IS_INT(u32_at(b + 8), 3, "layout: version 3");
    TAP_IS_INT(u32_at(b + 12), 96, "layout: record size 96");
    tap_ok(u64_at(b + 16) > 1600000000ull * 1000000000ull, "layout: wall-clock start after 2020");
    const unsigned char *r = b + 32;
    TAP_IS_INT(r[8], 3, "phase: kind 3");
    TAP_IS_INT((int64_t)u64_at(r + 32), 3, "phase: step 3");
    tap_ok(strcmp((const char *)r + 48, "backward") == 0, "phase: name 'backward'");
    r += 96;
    TAP_IS_INT(r[8], 1, "alloc: kind 1");
    TAP_IS_INT(r[9], 0, "alloc: pool device (0)");
    TAP_IS_INT(r[10], FERRY_MEM_ACTIVATIONS, "alloc: category");
    TAP_IS_INT(u64_at(r + 16), 512u << 20, "alloc: bytes");
    TAP_IS_INT(u64_at(r + 24), 0x7f0000001000, "alloc: address");
    tap_ok(strcmp((const char *)r + 48, "block 17 attn") == 0, "alloc: name");
    tap_ok(u64_at(r) >= u64_at(r - 96), "alloc: time does not go backwards");
    r += 96;
    TAP_IS_INT(r[8], 2, "free: kind 2");
    TAP_IS_INT(r[9], 1, "free: pool host (1)");
    TAP_IS_INT(strlen((const char *)r + 48), 47, "free: a long name is cut to 47 bytes");
    tap_ok(r[95] == 0, "free: the name field ends with NUL");
    r += 96;
    double ms;
    memcpy(&ms, r + 40, 8);
    TAP_IS_INT(r[8], 4, "timing: kind 4");
    TAP_IS_CLOSE(ms, 1.75, 0, 0, "timing: value 1.75 ms");
    tap_ok(strcmp((const char *)r + 48, "gpu_wait_transfers") == 0, "timing: key");
    r += 96;
    TAP_IS_INT(r[8], 5, "limit: kind 5");
    TAP_IS_INT(u64_at(r + 16), 24ull << 30, "limit: 24 GiB");
    r += 96;
    TAP_IS_INT(r[8], 6, "reserve: kind 6");
    TAP_IS_INT(u64_at(r + 16), 256u << 20, "reserve: bytes");
    r += 96;
    TAP_IS_INT(r[8], 7, "end: kind 7, the last record");
    TAP_IS_INT(u64_at(r + 16), 6, "end: counts the 6 records before it");
    tap_ok(strcmp((const char *)r + 48, "end") == 0, "end: name 'end'");
    free(b);
    test_checksums(path);
}

static double f64_at(const unsigned char *p)
{
    uint64_t v = u64_at(p);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

/* Version 3's records: the region, planned buffers (one to the run's end,
 * one for positions [3, 9), a slot, a range), a group's stay in a slot. */
static void test_plan_records(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/plan.fmt", dir);
    trace *t = NULL;
    TAP_IS_STATUS(trace_open(path, &t), FERRY_OK, "plan: open");
    trace_region(t, (void *)0x7f0000100000, 3u << 20);
    trace_planned(t, FERRY_MEM_WORKSPACE, "workspace", 0, 1u << 20, 0, INT32_MAX, TRACE_ROLE_BUFFER);
    trace_planned(t, FERRY_MEM_ACTIVATIONS, "scratch", 1u << 20, 4096, 3, 9, TRACE_ROLE_BUFFER);
    trace_planned(t, FERRY_MEM_PARAMS, "weights slot 0 of 'block 0' and its kind", (1u << 20) + 4096, 8192, 0,
                  INT32_MAX, TRACE_ROLE_WSLOT);
    trace_planned(t, FERRY_MEM_ACTIVATIONS, "the embedder's activations", 2u << 20, 1u << 20, 0, INT32_MAX,
                  TRACE_ROLE_RANGE);
    trace_occupy(t, FERRY_MEM_PARAMS, "block 7", 7, 8000, (void *)(0x7f0000100000 + (1u << 20) + 4096));
    trace_vacate(t, FERRY_MEM_PARAMS, "block 7", 7, 8000, (void *)(0x7f0000100000 + (1u << 20) + 4096));
    TAP_IS_STATUS(trace_close(t), FERRY_OK, "plan: close");
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    if (!tap_ok(b && len == 32 + 8 * 96, "plan: 7 records and the end record (%zu bytes)", len)) {
        free(b);
        return;
    }
    const unsigned char *r = b + 32;
    TAP_IS_INT(r[8], 8, "region: kind 8");
    TAP_IS_INT(u64_at(r + 24), 0x7f0000100000, "region: its base");
    TAP_IS_INT(u64_at(r + 16), 3u << 20, "region: its bytes");
    TAP_IS_INT(r[11], 0, "region: role byte 0");
    r += 96;
    TAP_IS_INT(r[8], 9, "planned: kind 9");
    TAP_IS_INT(r[10], FERRY_MEM_WORKSPACE, "planned: category");
    TAP_IS_INT(u64_at(r + 24), 0, "planned: offset 0 in the region");
    TAP_IS_INT(u64_at(r + 16), 1u << 20, "planned: bytes");
    TAP_IS_INT((int64_t)u64_at(r + 32), 0, "planned: from position 0");
    TAP_IS_CLOSE(f64_at(r + 40), 2147483647.0, 0, 0, "planned: to the run's end (INT32_MAX)");
    TAP_IS_INT(r[11], 0, "planned: role 0, a buffer");
    tap_ok(strcmp((const char *)r + 48, "workspace") == 0, "planned: name");
    r += 96;
    TAP_IS_INT(u64_at(r + 24), 1u << 20, "planned, finite: offset");
    TAP_IS_INT((int64_t)u64_at(r + 32), 3, "planned, finite: from position 3");
    TAP_IS_CLOSE(f64_at(r + 40), 9.0, 0, 0, "planned, finite: to position 9");
    r += 96;
    TAP_IS_INT(r[11], 1, "planned slot: role 1, a weights slot");
    r += 96;
    TAP_IS_INT(r[11], 3, "planned range: role 3, the embedder's");
    r += 96;
    TAP_IS_INT(r[8], 10, "occupy: kind 10");
    TAP_IS_INT(u64_at(r + 24), 0x7f0000100000 + (1u << 20) + 4096, "occupy: the slot's address");
    TAP_IS_INT((int64_t)u64_at(r + 32), 7, "occupy: the group's index");
    TAP_IS_INT(u64_at(r + 16), 8000, "occupy: the group's bytes");
    TAP_IS_INT(r[10], FERRY_MEM_PARAMS, "occupy: category params (weights)");
    tap_ok(strcmp((const char *)r + 48, "block 7") == 0, "occupy: the group's name");
    r += 96;
    TAP_IS_INT(r[8], 11, "vacate: kind 11");
    tap_ok(memcmp(r + 9, r - 96 + 9, 3) == 0 && memcmp(r + 16, r - 96 + 16, 80) == 0,
           "vacate: the fields of its occupy");
    r += 96;
    TAP_IS_INT(u64_at(r + 16), 7, "end: counts the 7 records before it");
    free(b);
    test_checksums(path);
}

typedef struct writer {
    trace *t;
    int id;
} writer;

static void *write_many(void *arg)
{
    writer *w = arg;
    for (int i = 0; i < 20000; i++)
        trace_alloc(w->t, TRACE_POOL_HOST, FERRY_MEM_GRADS, "thread", (uint64_t)w->id, (void *)(uintptr_t)(i + 1));
    return NULL;
}

static void test_threads(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/threads.fmt", dir);
    trace *t = NULL;
    trace_open(path, &t);
    pthread_t th[4];
    writer w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (writer){t, i};
        pthread_create(&th[i], NULL, write_many, &w[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    TAP_IS_STATUS(trace_close(t), FERRY_OK, "threads: close");
    size_t len = 0;
    unsigned char *b = read_file(path, &len);
    TAP_IS_INT(len, 32 + 80001 * 96, "threads: all 80000 records written, and the end record");
    int backwards = 0, per[4] = {0};
    for (size_t i = 0; b && i + 1 < (len - 32) / 96; i++) {
        const unsigned char *r = b + 32 + i * 96;
        if (i && u64_at(r) < u64_at(r - 96))
            backwards++;
        per[u64_at(r + 16) & 3]++;
    }
    TAP_IS_INT(backwards, 0, "threads: records are in time order");
    size_t bad = 0;
    for (size_t i = 0; b && i < (len - 32) / 96; i++)
        bad += u32_at(b + 32 + i * 96 + 12) != ref_record_crc(b + 32 + i * 96, i);
    TAP_IS_INT(bad, 0, "threads: every record's CRC matches its position in the file");
    tap_ok(per[0] == 20000 && per[1] == 20000 && per[2] == 20000 && per[3] == 20000,
           "threads: 20000 records from each thread (%d %d %d %d)", per[0], per[1], per[2], per[3]);
    free(b);
}

static void test_errors(void)
{
    trace *t = NULL;
    TAP_IS_STATUS(trace_open("/nonexistent-dir/x.fmt", &t), FERRY_ERR_IO, "errors: unwritable path");
    tap_ok(strstr(ferry_last_error(), "/nonexistent-dir/x.fmt") != NULL, "errors: the message names the path");
    /* NULL is tracing off: every call is a no-op. */
    trace_alloc(NULL, TRACE_POOL_HOST, FERRY_MEM_PARAMS, "x", 1, (void *)1);
    trace_phase(NULL, 1, "forward");
    trace_step_timing(NULL, 1, "k", 1.0);
    trace_region(NULL, (void *)1, 256);
    trace_planned(NULL, FERRY_MEM_PARAMS, "x", 0, 256, 0, INT32_MAX, TRACE_ROLE_BUFFER);
    trace_occupy(NULL, FERRY_MEM_PARAMS, "g", 0, 1, (void *)1);
    trace_vacate(NULL, FERRY_MEM_PARAMS, "g", 0, 1, (void *)1);
    TAP_IS_STATUS(trace_flush(NULL), FERRY_OK, "errors: flush(NULL) is fine");
    TAP_IS_STATUS(trace_close(NULL), FERRY_OK, "errors: close(NULL) is fine");
    if (access("/dev/full", W_OK) != 0) {
        tap_diag("no /dev/full: write failure not checked");
        return;
    }
    /* The header goes to the page cache... /dev/full refuses at once. */
    ferry_status st = trace_open("/dev/full", &t);
    if (st == FERRY_OK) {
        for (int i = 0; i < 10000; i++)
            trace_alloc(t, TRACE_POOL_HOST, FERRY_MEM_PARAMS, "x", 1, (void *)1);
        st = trace_close(t);
    }
    TAP_IS_STATUS(st, FERRY_ERR_IO, "errors: a full disk is reported (%s)", ferry_last_error());
}

int main(void)
{
    char dir[] = "/tmp/ferry_trace_XXXXXX";
    if (!mkdtemp(dir))
        tap_plan_skip("no temporary directory");
    test_layout(dir);
    test_plan_records(dir);
    test_threads(dir);
    test_errors();
    test_dir_remove(dir);
    return tap_done();
}
