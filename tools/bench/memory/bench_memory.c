/* bench_memory: allocation throughput of the pinned host pool and the device
 * arena (host backend), against glibc malloc/free running the same sequence
 * in the same run, and the cost of the memory trace (the same arena loop
 * with the trace off and on). Each figure is the median of 5 runs after a
 * warm-up run.
 *   bench_memory [ITERATIONS] [TRACE_DIR]   (defaults: 200000, $TMPDIR or /tmp) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/error.h"
#include "offload/arena.h"
#include "offload/pool.h"
#include "offload/trace.h"

#define SLOTS 128
#define RUNS 5

typedef enum { USE_MALLOC, USE_POOL, USE_ARENA } allocator;

typedef struct ctx {
    allocator kind;
    pool *p;
    arena *a;
    const size_t *sizes; /* one per iteration, drawn once */
    size_t n;
} ctx;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *get(ctx *c, size_t bytes)
{
    void *ptr = NULL;
    ferry_status st = FERRY_OK;
    if (c->kind == USE_MALLOC)
        ptr = malloc(bytes);
    else if (c->kind == USE_POOL)
        st = pool_alloc(c->p, bytes, 0, FERRY_MEM_OPTIMIZER, "bench", &ptr);
    else
        st = arena_alloc(c->a, bytes, FERRY_MEM_ACTIVATIONS, "bench", &ptr);
    if (st != FERRY_OK || !ptr) {
        fprintf(stderr, "bench_memory: allocation failed: %s\n", ferry_last_error());
        exit(1);
    }
    return ptr;
}

static void put(ctx *c, void *ptr)
{
    if (c->kind == USE_MALLOC)
        free(ptr);
    else if (c->kind == USE_POOL)
        pool_free(c->p, ptr);
    else
        arena_free(c->a, ptr);
}

/* SLOTS live blocks; each iteration frees a random slot and refills it:
 * one free and one alloc. Returns (alloc + free) operations per second. */
static double run_once(ctx *c)
{
    void *slot[SLOTS] = {0};
    uint64_t r = 12345;
    double t0 = now_s();
    for (size_t i = 0; i < c->n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        size_t k = (size_t)(r >> 33) % SLOTS;
        if (slot[k])
            put(c, slot[k]);
        slot[k] = get(c, c->sizes[i]);
    }
    for (int k = 0; k < SLOTS; k++)
        if (slot[k])
            put(c, slot[k]);
    return 2.0 * (double)c->n / (now_s() - t0);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_rate(ctx *c)
{
    double v[RUNS];
    run_once(c); /* warm-up: slabs and chunks obtained, pages touched */
    for (int i = 0; i < RUNS; i++)
        v[i] = run_once(c);
    qsort(v, RUNS, sizeof v[0], cmp);
    return v[RUNS / 2];
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("bench_memory"); /* a full disk or /dev/full on stdout is exit 1 */
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 200000;
    const char *dir = argc > 2 ? argv[2] : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (n == 0) {
        fprintf(stderr, "usage: bench_memory [ITERATIONS] [TRACE_DIR]\n");
        return 2;
    }
    /* Sizes from 256 B to 4 MiB, log-uniform: tensors of small and large layers. */
    size_t *sizes = malloc(n * sizeof *sizes);
    uint64_t r = 99;
    for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        sizes[i] = (size_t)256 << ((r >> 40) % 15);
        sizes[i] += (size_t)((r >> 20) & 0xff) * 16;
    }
    backend *be = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK) {
        fprintf(stderr, "bench_memory: %s\n", ferry_last_error());
        return 1;
    }
    pool_config pc = POOL_CONFIG_INIT;
    pc.slab_bytes = (size_t)256 << 20;
    pc.pin = POOL_PIN_NEVER; /* the bench measures bookkeeping, not mlock */
    pool *p = NULL;
    arena_config ac = ARENA_CONFIG_INIT;
    ac.budget_bytes = (uint64_t)1 << 30;
    arena *a = NULL;
    if (pool_create(&pc, &p) != FERRY_OK || arena_create(be, &ac, &a) != FERRY_OK) {
        fprintf(stderr, "bench_memory: %s\n", ferry_last_error());
        return 1;
    }
    ctx c = {USE_MALLOC, p, a, sizes, n};
    double malloc_rate = median_rate(&c);
    c.kind = USE_POOL;
    double pool_rate = median_rate(&c);
    c.kind = USE_ARENA;
    double arena_rate = median_rate(&c);
    arena_destroy(a);

    char path[4096];
    snprintf(path, sizeof path, "%s/bench_memory_trace.%d.fmt", dir, (int)getpid());
    trace *t = NULL;
    if (trace_open(path, &t) != FERRY_OK) {
        fprintf(stderr, "bench_memory: %s\n", ferry_last_error());
        return 1;
    }
    ac.trace = t;
    arena_create(be, &ac, &a);
    c.a = a;
    double traced_rate = median_rate(&c);
    uint64_t records = trace_record_count(t);
    arena_destroy(a);
    ferry_status st = trace_close(t);
    unlink(path);
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_memory: %s\n", ferry_last_error());
        return 1;
    }
    printf("bench_memory: %zu alloc+free pairs per run, %d live slots, sizes 256 B..4 MiB, median of %d\n", n,
           SLOTS, RUNS);
    printf("reference  glibc malloc/free      %8.2f Mop/s\n", malloc_rate / 1e6);
    printf("pool       pool_alloc/pool_free   %8.2f Mop/s   %.2fx malloc\n", pool_rate / 1e6,
           pool_rate / malloc_rate);
    printf("arena      arena_alloc/arena_free %8.2f Mop/s   %.2fx malloc\n", arena_rate / 1e6,
           arena_rate / malloc_rate);
    printf("arena+trace (on, %llu records)  %8.2f Mop/s   %.1f ns per traced op\n",
           (unsigned long long)records, traced_rate / 1e6, (1.0 / traced_rate - 1.0 / arena_rate) * 1e9);
    /* What the trace costs a training step: GPT-2 XL allocates and frees on
     * the order of 2000 traced blocks per step, and a step takes far more
     * than 100 ms, so this bounds the overhead of a real run from above. */
    double per_event_s = 1.0 / traced_rate - 1.0 / arena_rate;
    printf("trace cost for a 100 ms step with 2000 traced events: %.3f%%\n",
           100.0 * 2000.0 * (per_event_s > 0 ? per_event_s : 0) / 0.1);
    printf("summary: pool %.2f Mop/s (%.2fx malloc), arena %.2f Mop/s (%.2fx malloc), trace on/off time ratio %.3f\n",
           pool_rate / 1e6, pool_rate / malloc_rate, arena_rate / 1e6, arena_rate / malloc_rate,
           arena_rate / traced_rate);
    pool_destroy(p);
    backend_close(be);
    free(sizes);
    return 0;
}
