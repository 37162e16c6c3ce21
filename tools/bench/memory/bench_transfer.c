/* bench_transfer: host <-> device bandwidth as the engine uses it — its
 * weight uploads and gradient drains go through page-locked memory, either
 * from cudaHostAlloc (staging) or from mmap'd slabs pinned with
 * cudaHostRegister (the host pool) — beside pageable memory and a
 * device-to-device copy measured in the same run. Each figure is the median
 * of 7 copies after a warm-up, timed with backend events on one stream;
 * "both" runs an upload and a download at once on two streams (the engine
 * overlaps them) and counts the bytes of both. Each line is printed as soon
 * as it is measured; the pinned H2D and D2H rates are the ceilings of the
 * engine's transfers.
 *
 *   bench_transfer [--backend cuda|host] [--mib N]   (defaults: cuda, 256)
 *
 * Exit status: 0 when every copy ran and the data came back intact; 1 on a
 * failure; 2 on a bad command line; 77 when --backend cuda (the default) is
 * asked for and there is no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/fileio.h"
#include "common/error.h"
#include "backend/backend.h"

#define REPS 7

typedef struct bench {
    backend *be;
    backend_stream *up, *down;
    backend_event *t0, *t1, *landed;
    size_t bytes;
    void *dev_a, *dev_b;
} bench;

static void must(ferry_status st, const char *what)
{
    if (st == FERRY_OK)
        return;
    fprintf(stderr, "bench_transfer: %s: %s\n", what, ferry_last_error());
    exit(1);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Submits one copy (or, with both, an upload and a download at once) of b->bytes. */
static void submit(bench *b, void *host, backend_copy_kind kind, bool both)
{
    backend_stream *s = kind == BACKEND_COPY_D2H ? b->down : b->up;
    if (kind == BACKEND_COPY_D2D) {
        must(backend_memcpy_async(s, b->dev_b, b->dev_a, b->bytes, kind), "device copy");
        return;
    }
    void *dev = kind == BACKEND_COPY_H2D ? b->dev_a : b->dev_b;
    must(backend_memcpy_async(s, kind == BACKEND_COPY_H2D ? dev : host, kind == BACKEND_COPY_H2D ? host : dev,
                              b->bytes, kind),
         "copy");
    if (both) /* the download reads dev_b while the upload writes dev_a */
        must(backend_memcpy_async(b->down, (char *)host + b->bytes, b->dev_b, b->bytes, BACKEND_COPY_D2H),
             "concurrent download");
}

/* Median GB/s of REPS runs after one warm-up, timed on the upload stream. */
static double rate(bench *b, void *host, backend_copy_kind kind, bool both)
{
    float ms[REPS];
    for (int i = -1; i < REPS; i++) {
        must(backend_event_record(b->t0, b->up), "event");
        must(backend_stream_wait_event(b->down, b->t0), "event wait");
        submit(b, host, kind, both);
        must(backend_event_record(b->landed, b->down), "event");
        must(backend_stream_wait_event(b->up, b->landed), "event wait");
        must(backend_event_record(b->t1, b->up), "event");
        must(backend_event_synchronize(b->t1), "event sync");
        if (i >= 0)
            must(backend_event_elapsed_ms(b->t0, b->t1, &ms[i]), "elapsed time");
    }
    qsort(ms, REPS, sizeof ms[0], cmp_float);
    double bytes = (double)b->bytes * (both ? 2 : 1) * (kind == BACKEND_COPY_D2D ? 2 : 1);
    return bytes / (ms[REPS / 2] * 1e-3) / 1e9;
}

static void report(const char *what, double gbs, double ref, const char *ref_name)
{
    if (ref > 0)
        printf("%-44s %8.1f GB/s   %.2fx %s\n", what, gbs, gbs / ref, ref_name);
    else
        printf("%-44s %8.1f GB/s\n", what, gbs);
    fflush(stdout);
}

/* Pinned-by-registration host memory, as the host pool makes it. */
static void *registered(bench *b, size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        must(err_set(FERRY_ERR_OUT_OF_MEMORY, "mmap of %zu bytes failed", bytes), "registered memory");
    memset(p, 1, bytes);
    must(backend_host_register(b->be, p, bytes), "cudaHostRegister");
    return p;
}

/* The data of the last upload comes back whole through a download. */
static void check_round_trip(bench *b, unsigned char *host)
{
    for (size_t i = 0; i < b->bytes; i++)
        host[i] = (unsigned char)(i * 131u + 7u);
    must(backend_memcpy_async(b->up, b->dev_a, host, b->bytes, BACKEND_COPY_H2D), "upload");
    must(backend_stream_synchronize(b->up), "upload");
    must(backend_memcpy_async(b->down, host + b->bytes, b->dev_a, b->bytes, BACKEND_COPY_D2H), "download");
    must(backend_stream_synchronize(b->down), "download");
    if (memcmp(host, host + b->bytes, b->bytes) != 0)
        must(err_set(FERRY_ERR_BACKEND, "the %zu bytes that came back differ from those sent", b->bytes),
             "round trip");
}

static void measure(bench *b)
{
    size_t two = 2 * b->bytes; /* room for an upload source and a download target */
    void *pinned = NULL, *pageable = malloc(two), *reg = registered(b, two);
    must(pageable ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory"), "pageable memory");
    must(backend_host_alloc(b->be, two, &pinned), "cudaHostAlloc");
    memset(pinned, 1, two), memset(pageable, 1, two);
    check_round_trip(b, pinned);
    double d2d = rate(b, NULL, BACKEND_COPY_D2D, false);
    report("device to device (read + write)", d2d, 0, "");
    double h2d = rate(b, pinned, BACKEND_COPY_H2D, false);
    report("H2D pinned (cudaHostAlloc)", h2d, 0, "");
    double d2h = rate(b, pinned, BACKEND_COPY_D2H, false);
    report("D2H pinned (cudaHostAlloc)", d2h, 0, "");
    report("H2D + D2H at once, pinned (both counted)", rate(b, pinned, BACKEND_COPY_H2D, true), h2d + d2h,
           "the sum of the two alone");
    report("H2D registered (mmap + cudaHostRegister)", rate(b, reg, BACKEND_COPY_H2D, false), h2d, "pinned H2D");
    report("D2H registered (mmap + cudaHostRegister)", rate(b, reg, BACKEND_COPY_D2H, false), d2h, "pinned D2H");
    double ph = rate(b, pageable, BACKEND_COPY_H2D, false), pd = rate(b, pageable, BACKEND_COPY_D2H, false);
    report("H2D pageable (malloc)", ph, h2d, "pinned H2D");
    report("D2H pageable (malloc)", pd, d2h, "pinned D2H");
    printf("summary: pinned H2D %.1f GB/s, D2H %.1f GB/s; pageable %.2fx / %.2fx of pinned; device copy %.0f GB/s\n",
           h2d, d2h, ph / h2d, pd / d2h, d2d);
    backend_host_unregister(b->be, reg);
    munmap(reg, two);
    backend_host_free(b->be, pinned);
    free(pageable);
}

static bool parse(int argc, char **argv, ferry_backend_kind *kind, size_t *mib)
{
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return false;
        if (strcmp(argv[i], "--backend") == 0) {
            if (ferry_backend_parse(argv[++i], kind) != FERRY_OK || *kind == FERRY_BACKEND_AUTO)
                return false;
        } else if (strcmp(argv[i], "--mib") == 0) {
            char *end;
            unsigned long long v = strtoull(argv[++i], &end, 10);
            if (*end || v < 1 || v > 16384)
                return false;
            *mib = (size_t)v;
        } else {
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("bench_transfer"); /* a full disk or /dev/full on stdout is exit 1 */
    ferry_backend_kind kind = FERRY_BACKEND_CUDA;
    size_t mib = 256;
    if (!parse(argc, argv, &kind, &mib)) {
        fprintf(stderr, "usage: bench_transfer [--backend cuda|host] [--mib N]  (N in 1..16384, default 256)\n");
        return 2;
    }
    bench b = {0};
    b.bytes = mib << 20;
    ferry_status st = backend_open(kind, &b.be);
    if (st == FERRY_ERR_UNSUPPORTED && kind == FERRY_BACKEND_CUDA) {
        fprintf(stderr, "bench_transfer: --backend cuda: %s\n", ferry_last_error());
        return 77;
    }
    must(st, "opening the backend");
    must(backend_stream_create(b.be, "up", &b.up), "stream");
    must(backend_stream_create(b.be, "down", &b.down), "stream");
    must(backend_event_create_timed(b.be, &b.t0), "event");
    must(backend_event_create_timed(b.be, &b.t1), "event");
    must(backend_event_create(b.be, &b.landed), "event");
    must(backend_alloc(b.be, b.bytes, &b.dev_a), "device memory");
    must(backend_alloc(b.be, b.bytes, &b.dev_b), "device memory");
    printf("bench_transfer: %s, %zu MiB per copy, median of %d after a warm-up\n", backend_device_name(b.be),
           mib, REPS);
    fflush(stdout);
    measure(&b);
    backend_event_destroy(b.t0), backend_event_destroy(b.t1), backend_event_destroy(b.landed);
    backend_stream_destroy(b.up), backend_stream_destroy(b.down);
    backend_close(b.be); /* frees the device buffers */
    return 0;
}
