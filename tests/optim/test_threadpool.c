/* tests/optim/test_threadpool.c: the persistent pool — every tile runs once,
 * async tickets, concurrent submitters, refusal of a wait from a worker, the
 * thread count hwloc implies, memory helpers, bad arguments. Also in the
 * 'tsan' suite. */
#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/error.h"
#include "optim/threadpool.h"
#include "tests/tap.h"

typedef struct count_ctx {
    atomic_int *calls;
    size_t *value;
    atomic_int bad_worker;
    int nthreads;
} count_ctx;

static void count_tile(void *arg, size_t tile, int worker)
{
    count_ctx *c = arg;
    atomic_fetch_add(&c->calls[tile], 1);
    c->value[tile] = tile * 3 + 1;
    if (worker < 0 || worker >= c->nthreads)
        atomic_store(&c->bad_worker, 1);
}

static void check_parallel_for(tp_pool *pool, size_t ntiles, const char *what)
{
    atomic_int *calls = calloc(ntiles ? ntiles : 1, sizeof *calls);
    size_t *value = calloc(ntiles ? ntiles : 1, sizeof *value);
    count_ctx c = {calls, value, 0, tp_pool_threads(pool)};
    TAP_IS_STATUS(tp_parallel_for(pool, ntiles, count_tile, &c), FERRY_OK, "%s: parallel_for %zu tiles", what, ntiles);
    size_t wrong = 0, first = (size_t)-1;
    for (size_t i = 0; i < ntiles; i++)
        if (atomic_load(&calls[i]) != 1 || value[i] != i * 3 + 1) {
            if (first == (size_t)-1)
                first = i;
            wrong++;
        }
    TAP_IS_INT(wrong, 0, "%s: every tile ran exactly once with its own index", what);
    if (wrong)
        tap_diag("  first wrong tile %zu: %d calls, value %zu", first, atomic_load(&calls[first]), value[first]);
    TAP_IS_INT(atomic_load(&c.bad_worker), 0, "%s: worker index within 0..threads-1", what);
    free(calls);
    free(value);
}

/* a tile slow enough that the submitter can see the job still running */
typedef struct slow_ctx {
    atomic_int *gate; /* tiles spin until it opens */
    double *out;
} slow_ctx;

static void slow_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    slow_ctx *c = arg;
    while (!atomic_load(c->gate))
        ;
    double s = 0;
    for (int k = 1; k <= 1000; k++)
        s += 1.0 / ((double)k + (double)tile);
    c->out[tile] = s;
}

static double slow_expect(size_t tile)
{
    double s = 0;
    for (int k = 1; k <= 1000; k++)
        s += 1.0 / ((double)k + (double)tile);
    return s;
}

static void check_async(tp_pool *pool)
{
    atomic_int gate = 0;
    double a[64], b[64];
    slow_ctx ca = {&gate, a}, cb = {&gate, b};
    tp_ticket *ta, *tb;
    TAP_IS_STATUS(tp_submit(pool, 64, slow_tile, &ca, NULL, &ta), FERRY_OK, "async: submit A");
    TAP_IS_STATUS(tp_submit(pool, 64, slow_tile, &cb, NULL, &tb), FERRY_OK, "async: submit B");
    TAP_IS_INT(tp_poll(ta), 0, "async: A not done while its tiles are held back");
    atomic_store(&gate, 1);
    TAP_IS_STATUS(tp_wait(tb), FERRY_OK, "async: wait B first");
    TAP_IS_STATUS(tp_wait(ta), FERRY_OK, "async: then A");
    int bad = 0;
    for (size_t i = 0; i < 64; i++)
        bad += a[i] != slow_expect(i) || b[i] != slow_expect(i);
    TAP_IS_INT(bad, 0, "async: both jobs computed every tile");
    tp_ticket *empty;
    TAP_IS_STATUS(tp_submit(pool, 0, slow_tile, &ca, NULL, &empty), FERRY_OK, "async: empty job");
    TAP_IS_INT(tp_poll(empty), 1, "async: an empty job is done at once");
    TAP_IS_STATUS(tp_wait(empty), FERRY_OK, "async: wait empty job");
}

static int released;
static void release_ctx(void *p)
{
    released++;
    free(p);
}

typedef struct submitter_arg {
    tp_pool *pool;
    int id;
    int bad;
} submitter_arg;

static void *submitter(void *arg)
{
    submitter_arg *s = arg;
    for (int round = 0; round < 20; round++) {
        size_t ntiles = 50 + (size_t)(round * 7 + s->id * 13) % 90;
        atomic_int *calls = calloc(ntiles, sizeof *calls);
        size_t *value = calloc(ntiles, sizeof *value);
        count_ctx c = {calls, value, 0, tp_pool_threads(s->pool)};
        if (tp_parallel_for(s->pool, ntiles, count_tile, &c) != FERRY_OK)
            s->bad++;
        for (size_t i = 0; i < ntiles; i++)
            s->bad += atomic_load(&calls[i]) != 1 || value[i] != i * 3 + 1;
        free(calls);
        free(value);
    }
    return NULL;
}

typedef struct nested_ctx {
    tp_ticket *other;
    ferry_status seen;
} nested_ctx;

static void nested_tile(void *arg, size_t tile, int worker)
{
    (void)tile;
    (void)worker;
    nested_ctx *c = arg;
    c->seen = tp_wait(c->other);
}

static void noop_tile(void *arg, size_t tile, int worker)
{
    (void)arg;
    (void)tile;
    (void)worker;
}

static int machine_cores(void)
{
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    hwloc_topology_load(t);
    int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    if (n <= 0)
        n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    hwloc_topology_destroy(t);
    return n;
}

static void check_memory(tp_pool *pool)
{
    size_t bytes = (5u << 20) + 123; /* not a multiple of the 2 MiB touch tile */
    unsigned char *p = malloc(bytes);
    memset(p, 0xab, bytes);
    TAP_IS_STATUS(tp_first_touch(pool, p, bytes), FERRY_OK, "first_touch: %zu bytes", bytes);
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++)
        nonzero += p[i] != 0;
    TAP_IS_INT(nonzero, 0, "first_touch: every byte zeroed");
    TAP_IS_STATUS(tp_membind(pool, p, bytes), FERRY_OK, "membind on this machine's node");
    free(p);
    void *q = NULL;
    TAP_IS_STATUS(tp_alloc(pool, bytes, &q), FERRY_OK, "tp_alloc %zu bytes", bytes);
    nonzero = 0;
    for (size_t i = 0; q && i < bytes; i++)
        nonzero += ((unsigned char *)q)[i] != 0;
    TAP_IS_INT(nonzero, 0, "tp_alloc: memory reads as zero");
    tp_free(q, bytes);
    TAP_IS_STATUS(tp_alloc(pool, 0, &q), FERRY_ERR_INVALID_ARGUMENT, "tp_alloc of 0 bytes refused");
    TAP_IS_STATUS(tp_alloc(pool, (size_t)1 << 60, &q), FERRY_ERR_OUT_OF_MEMORY, "tp_alloc of 1 EiB: out of memory");
    tap_diag("message: %s", ferry_last_error());
}

int main(void)
{
    tp_pool *pool = NULL;
    TAP_IS_STATUS(tp_pool_create(0, -1, &pool), FERRY_OK, "create a pool, one thread per core");
    if (!pool)
        return tap_done();
    TAP_IS_INT(tp_pool_threads(pool), machine_cores(), "default thread count = cores hwloc reports");
    tap_diag("binding: %s", tp_pool_binding(pool));
    check_parallel_for(pool, 1000, "default pool");
    check_parallel_for(pool, 1, "default pool");
    check_parallel_for(NULL, 17, "NULL pool");
    check_async(pool);

    submitter_arg s[2] = {{pool, 0, 0}, {pool, 1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, submitter, &s[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    TAP_IS_INT(s[0].bad + s[1].bad, 0, "two threads submitting 20 jobs each at once");

    int *ctx = malloc(sizeof *ctx);
    tp_ticket *t;
    released = 0;
    TAP_IS_STATUS(tp_submit(pool, 3, noop_tile, ctx, release_ctx, &t), FERRY_OK, "submit with a release");
    TAP_IS_STATUS(tp_wait(t), FERRY_OK, "wait");
    TAP_IS_INT(released, 1, "release called once by tp_wait");

    nested_ctx nc = {NULL, FERRY_OK};
    tp_ticket *other, *outer;
    tp_submit(pool, 1, noop_tile, NULL, NULL, &other);
    nc.other = other;
    tp_submit(pool, 1, nested_tile, &nc, NULL, &outer);
    tp_wait(outer);
    TAP_IS_STATUS(nc.seen, FERRY_ERR_STATE, "tp_wait inside a tile is refused");
    TAP_IS_STATUS(tp_wait(other), FERRY_OK, "the ticket is still waitable from outside");
    check_memory(pool);
    tp_pool_destroy(pool);

    for (int n = 1; n <= 3; n++) {
        tp_pool *p = NULL;
        TAP_IS_STATUS(tp_pool_create(n, 0, &p), FERRY_OK, "create %d threads on NUMA node 0", n);
        TAP_IS_INT(tp_pool_threads(p), n, "pool has %d threads", n);
        check_parallel_for(p, 333, "explicit pool");
        tp_pool_destroy(p);
    }

    tp_pool *bad = (tp_pool *)1;
    TAP_IS_STATUS(tp_pool_create(-1, -1, &bad), FERRY_ERR_INVALID_ARGUMENT, "-1 threads refused");
    TAP_IS_INT(bad == NULL, 1, "*out cleared on failure");
    TAP_IS_STATUS(tp_pool_create(TP_MAX_THREADS + 1, -1, &bad), FERRY_ERR_INVALID_ARGUMENT, "too many threads refused");
    TAP_IS_STATUS(tp_pool_create(1, 999, &bad), FERRY_ERR_INVALID_ARGUMENT, "NUMA node 999 refused");
    tap_diag("message: %s", ferry_last_error());
    TAP_IS_STATUS(tp_submit(NULL, 1, noop_tile, NULL, NULL, &t), FERRY_ERR_INVALID_ARGUMENT, "submit to NULL pool refused");
    TAP_IS_STATUS(tp_wait(NULL), FERRY_ERR_INVALID_ARGUMENT, "wait on NULL refused");
    tp_pool_destroy(NULL);
    return tap_done();
}
