/* Backend conformance: the same checks against every backend (argv[1] =
 * host|cuda). Order within a stream, cross-stream waits, odd copies, many
 * small operations on several streams at once, and misuse that must return a
 * status rather than crash. Exits 77 when the backend is absent (no GPU). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "backend/backend.h"
#include "tap.h"

static backend *be;

/* ---- order within a stream ---- */

typedef struct log_args {
    int *log;
    atomic_int *len;
    int value;
} log_args;

static ferry_status append_log(void *p)
{
    log_args *a = p;
    int at = atomic_fetch_add(a->len, 1);
    a->log[at] = a->value;
    return FERRY_OK;
}

static void test_order_within_stream(void)
{
    enum { N = 500 };
    static int log[N];
    atomic_int len = 0;
    backend_stream *s;
    backend_stream_create(be, "order", &s);
    for (int i = 0; i < N; i++) {
        log_args a = {log, &len, i};
        backend_launch_host(s, append_log, &a, sizeof a);
    }
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_OK, "synchronize after %d host calls", N);
    int in_order = atomic_load(&len) == N;
    for (int i = 0; i < N && in_order; i++)
        in_order = log[i] == i;
    tap_ok(in_order, "%d host calls on one stream ran in submission order", N);

    /* A chain of copies through device memory: each step reads what the last wrote. */
    enum { BYTES = 1 << 16 };
    static unsigned char a[BYTES], b[BYTES];
    void *d0, *d1;
    backend_alloc(be, BYTES, &d0);
    backend_alloc(be, BYTES, &d1);
    for (int i = 0; i < BYTES; i++)
        a[i] = (unsigned char)(i * 7 + 3);
    backend_memcpy_async(s, d0, a, BYTES, BACKEND_COPY_H2D);
    backend_memcpy_async(s, d1, d0, BYTES, BACKEND_COPY_D2D);
    backend_memset_async(s, d0, 0x5a, BYTES);
    backend_memcpy_async(s, b, d1, BYTES, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    tap_ok(memcmp(a, b, BYTES) == 0, "H2D, D2D, memset, D2H chain keeps stream order");
    backend_memcpy_async(s, b, d0, BYTES, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    int all5a = 1;
    for (int i = 0; i < BYTES; i++)
        all5a &= b[i] == 0x5a;
    tap_ok(all5a, "memset wrote every byte");
    backend_free(be, d0);
    backend_free(be, d1);
    backend_stream_destroy(s);
}

/* ---- cross-stream waits ---- */

typedef struct slow_fill_args {
    unsigned char *host;
    size_t bytes;
    unsigned char value;
} slow_fill_args;

/* Sleeps first, so a consumer that does not wait would see the old bytes. */
static ferry_status slow_fill(void *p)
{
    slow_fill_args *a = p;
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
    memset(a->host, a->value, a->bytes);
    return FERRY_OK;
}

static void test_cross_stream_wait(void)
{
    enum { BYTES = 4096, ROUNDS = 5 };
    backend_stream *producer, *consumer;
    backend_event *ready;
    backend_stream_create(be, "producer", &producer);
    backend_stream_create(be, "consumer", &consumer);
    backend_event_create(be, &ready);
    unsigned char *staging, *out;
    backend_host_alloc(be, BYTES, (void **)&staging);
    backend_host_alloc(be, BYTES, (void **)&out);
    void *dev;
    backend_alloc(be, BYTES, &dev);
    int all_seen = 1;
    for (int r = 1; r <= ROUNDS; r++) {
        slow_fill_args fill = {staging, BYTES, (unsigned char)r};
        backend_launch_host(producer, slow_fill, &fill, sizeof fill);
        backend_memcpy_async(producer, dev, staging, BYTES, BACKEND_COPY_H2D);
        backend_event_record(ready, producer);
        backend_stream_wait_event(consumer, ready);
        backend_memcpy_async(consumer, out, dev, BYTES, BACKEND_COPY_D2H);
        backend_stream_synchronize(consumer);
        for (int i = 0; i < BYTES; i++)
            all_seen &= out[i] == (unsigned char)r;
        backend_stream_synchronize(producer);
    }
    tap_ok(all_seen, "consumer never saw data before the producer's event (%d rounds)", ROUNDS);

    bool done = false;
    TAP_IS_STATUS(backend_event_query(ready, &done), FERRY_OK, "event query");
    tap_ok(done, "event reports complete after its stream synchronized");

    backend_event *fresh;
    backend_event_create(be, &fresh);
    TAP_IS_STATUS(backend_event_synchronize(fresh), FERRY_OK, "a never-recorded event counts as complete");
    backend_event_destroy(fresh);

    /* Elapsed time between two events around a 20 ms host call. */
    backend_event *t0, *t1;
    backend_event_create_timed(be, &t0);
    backend_event_create_timed(be, &t1);
    backend_event_record(t0, producer);
    slow_fill_args fill = {staging, BYTES, 9};
    backend_launch_host(producer, slow_fill, &fill, sizeof fill);
    backend_event_record(t1, producer);
    backend_event_synchronize(t1);
    float ms = 0;
    TAP_IS_STATUS(backend_event_elapsed_ms(t0, t1, &ms), FERRY_OK, "elapsed time between events");
    tap_ok(ms >= 15.0f && ms < 2000.0f, "elapsed %.2f ms around a 20 ms sleep", ms);
    TAP_IS_STATUS(backend_event_elapsed_ms(ready, t1, &ms), FERRY_ERR_INVALID_ARGUMENT,
                  "an event from backend_event_create keeps no time to read");
    backend_event_destroy(t0);
    backend_event_destroy(t1);

    backend_free(be, dev);
    backend_host_free(be, staging);
    backend_host_free(be, out);
    backend_event_destroy(ready);
    backend_stream_destroy(producer);
    backend_stream_destroy(consumer);
}

/* ---- odd copies ---- */

static void test_odd_copies(uint64_t *rng)
{
    enum { BYTES = 10007 };
    backend_stream *s;
    backend_stream_create(be, "odd", &s);
    unsigned char *src = malloc(BYTES), *dst = malloc(BYTES), *want = malloc(BYTES);
    void *dev;
    backend_alloc(be, BYTES, &dev);
    for (int i = 0; i < BYTES; i++)
        src[i] = (unsigned char)tap_rand_u64(rng);
    backend_memset_async(s, dev, 0, BYTES);
    memset(want, 0, BYTES);
    int ok = 1;
    for (int trial = 0; trial < 200; trial++) {
        size_t off = tap_rand_u64(rng) % BYTES;
        size_t len = tap_rand_u64(rng) % (BYTES - off + 1);
        size_t soff = tap_rand_u64(rng) % (BYTES - len + 1);
        backend_memcpy_async(s, (char *)dev + off, src + soff, len, BACKEND_COPY_H2D);
        memcpy(want + off, src + soff, len);
    }
    backend_memcpy_async(s, dst, dev, BYTES, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    ok = memcmp(dst, want, BYTES) == 0;
    tap_ok(ok, "200 copies at random odd offsets and sizes into a %d-byte buffer", BYTES);

    memcpy(dst, want, BYTES);
    TAP_IS_STATUS(backend_memcpy_async(s, dev, NULL, 0, BACKEND_COPY_H2D), FERRY_OK,
                  "a zero-length copy is a valid no-op");
    TAP_IS_STATUS(backend_memcpy_async(s, (char *)dev + BYTES, src, 0, BACKEND_COPY_H2D), FERRY_OK,
                  "a zero-length copy at the end of a buffer is valid");
    TAP_IS_STATUS(backend_memcpy_async(s, (char *)dev + BYTES - 1, src, 1, BACKEND_COPY_H2D), FERRY_OK,
                  "a one-byte copy into the last byte is valid");
    backend_stream_synchronize(s);
    backend_free(be, dev);
    free(src);
    free(dst);
    free(want);
    backend_stream_destroy(s);
}

/* ---- many small operations on several streams ---- */

typedef struct bump_args {
    long *counter;
    long add;
} bump_args;

static ferry_status bump(void *p)
{
    bump_args *a = p;
    *a->counter += a->add; /* each counter is touched by one stream only */
    return FERRY_OK;
}

static void test_many_streams(void)
{
    enum { STREAMS = 4, OPS = 300, BYTES = 64 };
    backend_stream *s[STREAMS];
    long counters[STREAMS] = {0};
    void *dev[STREAMS];
    unsigned char host_in[STREAMS][BYTES], host_out[STREAMS][BYTES];
    for (int k = 0; k < STREAMS; k++) {
        backend_stream_create(be, "many", &s[k]);
        backend_alloc(be, BYTES * 2, &dev[k]);
        memset(host_in[k], k + 1, BYTES);
    }
    for (int i = 0; i < OPS; i++) {
        for (int k = 0; k < STREAMS; k++) {
            bump_args a = {&counters[k], i + 1};
            backend_launch_host(s[k], bump, &a, sizeof a);
            backend_memcpy_async(s[k], (char *)dev[k] + (i % 2) * BYTES, host_in[k], BYTES, BACKEND_COPY_H2D);
            backend_memcpy_async(s[k], dev[k], (char *)dev[k] + BYTES, BYTES, BACKEND_COPY_D2D);
        }
    }
    int ok = 1;
    for (int k = 0; k < STREAMS; k++) {
        backend_memcpy_async(s[k], host_out[k], dev[k], BYTES, BACKEND_COPY_D2H);
        ok &= backend_stream_synchronize(s[k]) == FERRY_OK;
        ok &= counters[k] == (long)OPS * (OPS + 1) / 2;
        ok &= memcmp(host_out[k], host_in[k], BYTES) == 0;
        backend_free(be, dev[k]);
        backend_stream_destroy(s[k]);
    }
    tap_ok(ok, "%d streams x %d rounds of host calls and copies, all results right", STREAMS, OPS);
}

/* ---- misuse ---- */

static ferry_status fail_op(void *p)
{
    (void)p;
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "deliberate failure from a test op");
}

static void test_errors(void)
{
    backend_stream *s;
    backend_stream_create(be, "errors", &s);
    void *dev;
    backend_alloc(be, 1024, &dev);
    char host[2048] = {0};

    TAP_IS_STATUS(backend_memcpy_async(s, dev, host, 1025, BACKEND_COPY_H2D), FERRY_ERR_INVALID_ARGUMENT,
                  "a copy one byte past the end is refused");
    tap_ok(strstr(ferry_last_error(), "not inside one live device buffer") != NULL,
           "the message says why: %s", ferry_last_error());
    TAP_IS_STATUS(backend_memcpy_async(s, host, (char *)dev + 512, 513, BACKEND_COPY_D2H),
                  FERRY_ERR_INVALID_ARGUMENT, "a read past the end is refused");
    TAP_IS_STATUS(backend_memcpy_async(s, host, host + 1024, 16, BACKEND_COPY_D2D),
                  FERRY_ERR_INVALID_ARGUMENT, "a device-to-device copy of host memory is refused");
    TAP_IS_STATUS(backend_memcpy_async(s, dev, NULL, 16, BACKEND_COPY_H2D), FERRY_ERR_INVALID_ARGUMENT,
                  "a NULL source is refused");
    TAP_IS_STATUS(backend_memset_async(s, (char *)dev - 1, 0, 8), FERRY_ERR_INVALID_ARGUMENT,
                  "a memset before the buffer is refused");
    TAP_IS_STATUS(backend_free(be, (char *)dev + 8), FERRY_ERR_INVALID_ARGUMENT,
                  "freeing an interior pointer is refused");
    TAP_IS_STATUS(backend_free(be, dev), FERRY_OK, "freeing a live buffer");
    TAP_IS_STATUS(backend_free(be, dev), FERRY_ERR_INVALID_ARGUMENT, "freeing twice is refused");
    tap_ok(strstr(ferry_last_error(), "freed twice") != NULL, "the message names the double free");
    TAP_IS_STATUS(backend_memcpy_async(s, dev, host, 16, BACKEND_COPY_H2D), FERRY_ERR_INVALID_ARGUMENT,
                  "a copy into a freed buffer is refused");
    void *none = (void *)1;
    TAP_IS_STATUS(backend_alloc(be, 0, &none), FERRY_ERR_INVALID_ARGUMENT, "allocating zero bytes is refused");
    tap_ok(none == NULL, "a refused allocation leaves *out NULL");

    backend_launch_host(s, fail_op, NULL, 0);
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_ERR_INVALID_ARGUMENT,
                  "a failing op is reported by the next synchronize");
    tap_ok(strstr(ferry_last_error(), "deliberate failure") && strstr(ferry_last_error(), "errors"),
           "its message names the stream and the op's words: %s", ferry_last_error());
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_OK, "the failure is reported once");
    backend_stream_destroy(s);

    backend *other;
    if (backend_open(FERRY_BACKEND_HOST, &other) == FERRY_OK) {
        backend_stream *os;
        backend_event *e;
        backend_stream_create(other, "other", &os);
        backend_event_create(be, &e);
        TAP_IS_STATUS(backend_event_record(e, os), FERRY_ERR_INVALID_ARGUMENT,
                      "recording an event on another backend's stream is refused");
        backend_event_destroy(e);
        backend_stream_destroy(os);
        backend_close(other);
    }
    ferry_backend_kind k;
    TAP_IS_STATUS(ferry_backend_parse("tpu", &k), FERRY_ERR_INVALID_ARGUMENT, "an unknown backend name is refused");
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "host";
    ferry_backend_kind kind;
    if (ferry_backend_parse(which, &kind) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    ferry_status st = backend_open(kind, &be);
    if (st == FERRY_ERR_UNSUPPORTED)
        tap_plan_skip(ferry_last_error());
    if (st != FERRY_OK) {
        printf("Bail out! cannot open the %s backend: %s\n", which, ferry_last_error());
        return 1;
    }
    uint64_t seed = 20261202, rng = seed;
    tap_diag("backend %s (%s), seed %llu", which, backend_device_name(be), (unsigned long long)seed);
    test_order_within_stream();
    test_cross_stream_wait();
    test_odd_copies(&rng);
    test_many_streams();
    test_errors();
    backend_close(be);
    return tap_done();
}
