/* optim/threadpool.c: the persistent worker pool behind optim/threadpool.h.
 * Owns the worker threads, their hwloc binding, the job queue and the tickets.
 * Synchronisation: one mutex guards the queue, ticket completion and worker
 * bookkeeping; tiles are claimed with an atomic counter so the mutex is taken
 * twice per job per worker, not per tile. */
#include "optim/threadpool.h"

#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/error.h"

struct tp_ticket {
    size_t ntiles;
    tp_tile_fn fn;
    void *ctx;
    void (*release)(void *ctx);
    tp_pool *pool;
    atomic_size_t next; /* next tile to claim */
    atomic_size_t done; /* tiles returned */
    /* guarded by pool->mu */
    int users;          /* workers holding a pointer to this ticket */
    bool finished;      /* every tile returned */
    tp_ticket *qnext;
};

typedef struct tp_worker {
    tp_pool *pool;
    int index;
    pthread_t thread;
} tp_worker;

struct tp_pool {
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* a job was queued, or stop */
    pthread_cond_t done_cv;  /* a ticket finished, or a worker started */
    tp_ticket *head, *tail;  /* FIFO of jobs with tiles left to claim */
    bool stop;
    int started;             /* workers that finished binding */
    int bind_failures;
    int nthreads;
    int numa_node;
    tp_worker *workers;
    hwloc_topology_t topo;
    hwloc_bitmap_t *bind_sets; /* one PU cpuset per worker */
    hwloc_nodeset_t nodeset;
    int multi_node;            /* the machine has more than one NUMA node */
    char binding[192];
};

/* The pool whose worker this thread is (NULL elsewhere): refuses tp_wait from
 * inside a tile, which would wait on itself. */
static _Thread_local tp_pool *tp_self;

static void tp_run_ticket(tp_ticket *t, int worker)
{
    for (;;) {
        size_t i = atomic_fetch_add(&t->next, 1);
        if (i >= t->ntiles)
            return;
        t->fn(t->ctx, i, worker);
        atomic_fetch_add(&t->done, 1);
    }
}

static void *tp_worker_main(void *arg)
{
    tp_worker *w = arg;
    tp_pool *pool = w->pool;
    tp_self = pool;
    int rc = hwloc_set_cpubind(pool->topo, pool->bind_sets[w->index], HWLOC_CPUBIND_THREAD);

    pthread_mutex_lock(&pool->mu);
    pool->started++;
    if (rc != 0)
        pool->bind_failures++;
    pthread_cond_broadcast(&pool->done_cv);
    for (;;) {
        while (!pool->head && !pool->stop)
            pthread_cond_wait(&pool->work_cv, &pool->mu);
        if (!pool->head)
            break; /* stop, and the queue is drained */
        tp_ticket *t = pool->head;
        t->users++;
        pthread_mutex_unlock(&pool->mu);

        tp_run_ticket(t, w->index);

        pthread_mutex_lock(&pool->mu);
        if (pool->head == t) { /* all tiles claimed: the next job may start */
            pool->head = t->qnext;
            if (!pool->head)
                pool->tail = NULL;
        }
        t->users--;
        if (atomic_load(&t->done) == t->ntiles)
            t->finished = true;
        if (t->finished && t->users == 0)
            pthread_cond_broadcast(&pool->done_cv);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

/* The hardware threads to bind workers to, inside `cpuset`: the first PU of
 * every core, then the second ones, and so on. Returns the count found. */
static int tp_collect_pus(tp_pool *pool, hwloc_const_cpuset_t cpuset, hwloc_bitmap_t **out)
{
    hwloc_topology_t topo = pool->topo;
    int npu = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpuset, HWLOC_OBJ_PU);
    int ncore = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpuset, HWLOC_OBJ_CORE);
    if (npu <= 0)
        return 0;
    hwloc_bitmap_t *sets = calloc((size_t)npu, sizeof *sets);
    if (!sets)
        return -1;
    int n = 0;
    if (ncore > 0) {
        for (int round = 0; n < npu; round++) {
            int added = 0;
            for (int c = 0; c < ncore && n < npu; c++) {
                hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topo, cpuset, HWLOC_OBJ_CORE, (unsigned)c);
                hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, (unsigned)round);
                if (!pu || !hwloc_bitmap_isincluded(pu->cpuset, cpuset))
                    continue;
                sets[n++] = hwloc_bitmap_dup(pu->cpuset);
                added++;
            }
            if (!added)
                break;
        }
    }
    for (int i = 0; n < npu && i < npu; i++) { /* PUs outside any core */
        hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(topo, cpuset, HWLOC_OBJ_PU, (unsigned)i);
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = hwloc_bitmap_isequal(sets[j], pu->cpuset);
        if (!seen)
            sets[n++] = hwloc_bitmap_dup(pu->cpuset);
    }
    *out = sets;
    return n;
}

static void tp_free_topology(tp_pool *pool)
{
    if (pool->bind_sets) {
        for (int i = 0; i < pool->nthreads; i++)
            hwloc_bitmap_free(pool->bind_sets[i]);
        free(pool->bind_sets);
    }
    if (pool->nodeset)
        hwloc_bitmap_free(pool->nodeset);
    if (pool->topo)
        hwloc_topology_destroy(pool->topo);
}

/* Loads the topology and picks one PU cpuset per worker. */
static ferry_status tp_plan_binding(tp_pool *pool, int threads, int numa_node)
{
    if (hwloc_topology_init(&pool->topo) != 0 || hwloc_topology_load(pool->topo) != 0)
        return err_set(FERRY_ERR_BACKEND, "thread pool: hwloc could not read the machine topology: %s",
                       strerror(errno));
    int nodes = hwloc_get_nbobjs_by_type(pool->topo, HWLOC_OBJ_NUMANODE);
    pool->multi_node = nodes > 1;
    hwloc_const_cpuset_t cpuset;
    if (numa_node >= 0) {
        hwloc_obj_t node = hwloc_get_obj_by_type(pool->topo, HWLOC_OBJ_NUMANODE, (unsigned)numa_node);
        if (!node)
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "thread pool: NUMA node %d does not exist (this machine has %d); "
                           "pass -1 for the whole machine", numa_node, nodes);
        cpuset = node->cpuset;
        pool->nodeset = hwloc_bitmap_dup(node->nodeset);
    } else {
        cpuset = hwloc_topology_get_allowed_cpuset(pool->topo);
        pool->nodeset = hwloc_bitmap_dup(hwloc_topology_get_allowed_nodeset(pool->topo));
    }
    hwloc_bitmap_t *pus = NULL;
    int npu = tp_collect_pus(pool, cpuset, &pus);
    if (npu < 0 || !pool->nodeset)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "thread pool: out of memory planning the binding");
    if (npu == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "thread pool: NUMA node %d has no usable cores", numa_node);
    int ncore = hwloc_get_nbobjs_inside_cpuset_by_type(pool->topo, cpuset, HWLOC_OBJ_CORE);
    if (threads == 0)
        threads = ncore > 0 ? ncore : npu;
    pool->bind_sets = calloc((size_t)threads, sizeof *pool->bind_sets);
    if (!pool->bind_sets) {
        for (int i = 0; i < npu; i++)
            hwloc_bitmap_free(pus[i]);
        free(pus);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "thread pool: out of memory planning the binding");
    }
    pool->nthreads = threads;
    for (int i = 0; i < threads; i++)
        pool->bind_sets[i] = hwloc_bitmap_dup(pus[i % npu]);
    for (int i = 0; i < npu; i++)
        hwloc_bitmap_free(pus[i]);
    free(pus);
    snprintf(pool->binding, sizeof pool->binding, "%d threads bound to %d hardware threads (%d cores) of %s",
             threads, threads < npu ? threads : npu, ncore, numa_node >= 0 ? "one NUMA node" : "the machine");
    return FERRY_OK;
}

static void tp_stop_workers(tp_pool *pool, int started)
{
    pthread_mutex_lock(&pool->mu);
    pool->stop = true;
    pthread_cond_broadcast(&pool->work_cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < started; i++)
        pthread_join(pool->workers[i].thread, NULL);
}

static void tp_release(tp_pool *pool)
{
    free(pool->workers);
    tp_free_topology(pool);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool);
}

ferry_status tp_pool_create(int threads, int numa_node, tp_pool **out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_pool_create: out is NULL");
    *out = NULL;
    if (threads < 0 || threads > TP_MAX_THREADS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "thread pool: %d threads asked; give 1..%d, or 0 for one per core", threads, TP_MAX_THREADS);
    if (numa_node < -1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "thread pool: NUMA node %d; give a node index or -1", numa_node);
    tp_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "thread pool: out of memory");
    pool->numa_node = numa_node;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->work_cv, NULL);
    pthread_cond_init(&pool->done_cv, NULL);
    ferry_status st = tp_plan_binding(pool, threads, numa_node);
    if (st != FERRY_OK) {
        tp_release(pool);
        return st;
    }
    pool->workers = calloc((size_t)pool->nthreads, sizeof *pool->workers);
    if (!pool->workers) {
        int n = pool->nthreads;
        tp_release(pool);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "thread pool: out of memory for %d workers", n);
    }
    for (int i = 0; i < pool->nthreads; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].index = i;
        int rc = pthread_create(&pool->workers[i].thread, NULL, tp_worker_main, &pool->workers[i]);
        if (rc != 0) {
            char why[160];
            int n = pool->nthreads;
            err_thread_refusal(rc, why, sizeof why);
            tp_stop_workers(pool, i);
            tp_release(pool);
            return err_set(FERRY_ERR_BACKEND, "thread pool: the system refused to start worker %d of %d: %s; ask "
                                              "for fewer optimizer threads or raise the limit",
                           i + 1, n, why);
        }
    }
    pthread_mutex_lock(&pool->mu); /* workers bind before the pool is used */
    while (pool->started < pool->nthreads)
        pthread_cond_wait(&pool->done_cv, &pool->mu);
    if (pool->bind_failures)
        snprintf(pool->binding, sizeof pool->binding,
                 "%d threads, unbound: the OS refused binding for %d of them (restricted cpuset?)",
                 pool->nthreads, pool->bind_failures);
    pthread_mutex_unlock(&pool->mu);
    *out = pool;
    return FERRY_OK;
}

void tp_pool_destroy(tp_pool *pool)
{
    if (!pool)
        return;
    tp_stop_workers(pool, pool->nthreads);
    tp_release(pool);
}

int tp_pool_threads(const tp_pool *pool) { return pool ? pool->nthreads : 1; }
int tp_pool_numa_node(const tp_pool *pool) { return pool ? pool->numa_node : -1; }
const char *tp_pool_binding(const tp_pool *pool) { return pool ? pool->binding : "no pool: the calling thread"; }

ferry_status tp_submit(tp_pool *pool, size_t ntiles, tp_tile_fn fn, void *ctx,
                       void (*release)(void *ctx), tp_ticket **out)
{
    if (!pool || !fn || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_submit: pool, fn and out must not be NULL");
    *out = NULL;
    tp_ticket *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "tp_submit: out of memory for a ticket");
    t->ntiles = ntiles;
    t->fn = fn;
    t->ctx = ctx;
    t->release = release;
    t->pool = pool;
    atomic_init(&t->next, 0);
    atomic_init(&t->done, 0);
    pthread_mutex_lock(&pool->mu);
    if (ntiles == 0) {
        t->finished = true;
    } else {
        if (pool->tail)
            pool->tail->qnext = t;
        else
            pool->head = t;
        pool->tail = t;
        pthread_cond_broadcast(&pool->work_cv);
    }
    pthread_mutex_unlock(&pool->mu);
    *out = t;
    return FERRY_OK;
}

ferry_status tp_wait(tp_ticket *t)
{
    if (!t)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_wait: ticket is NULL");
    tp_pool *pool = t->pool;
    if (tp_self == pool)
        return err_set(FERRY_ERR_STATE, "tp_wait called from a worker of the same pool: it would wait "
                                        "on itself; wait from the thread that submitted");
    pthread_mutex_lock(&pool->mu);
    while (!(t->finished && t->users == 0))
        pthread_cond_wait(&pool->done_cv, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
    if (t->release)
        t->release(t->ctx);
    free(t);
    return FERRY_OK;
}

bool tp_poll(tp_ticket *t)
{
    if (!t)
        return true;
    pthread_mutex_lock(&t->pool->mu);
    bool done = t->finished && t->users == 0;
    pthread_mutex_unlock(&t->pool->mu);
    return done;
}

ferry_status tp_parallel_for(tp_pool *pool, size_t ntiles, tp_tile_fn fn, void *ctx)
{
    if (!fn)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_parallel_for: fn is NULL");
    if (!pool) {
        for (size_t i = 0; i < ntiles; i++)
            fn(ctx, i, 0);
        return FERRY_OK;
    }
    tp_ticket *t;
    ferry_status st = tp_submit(pool, ntiles, fn, ctx, NULL, &t);
    if (st != FERRY_OK)
        return st;
    return tp_wait(t);
}

ferry_status tp_membind(tp_pool *pool, void *ptr, size_t bytes)
{
    if (!pool || !pool->multi_node || pool->numa_node < 0 || bytes == 0)
        return FERRY_OK;
    if (!ptr)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_membind: ptr is NULL for %zu bytes", bytes);
    if (hwloc_set_area_membind(pool->topo, ptr, bytes, pool->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET) != 0)
        return err_set(FERRY_ERR_UNSUPPORTED, "tp_membind: binding %zu bytes to NUMA node %d failed: %s",
                       bytes, pool->numa_node, strerror(errno));
    return FERRY_OK;
}

#define TP_TOUCH_TILE ((size_t)2 << 20)

typedef struct tp_touch_ctx {
    unsigned char *base;
    size_t bytes;
} tp_touch_ctx;

static void tp_touch_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    tp_touch_ctx *c = arg;
    size_t off = tile * TP_TOUCH_TILE;
    size_t len = c->bytes - off < TP_TOUCH_TILE ? c->bytes - off : TP_TOUCH_TILE;
    memset(c->base + off, 0, len);
}

ferry_status tp_first_touch(tp_pool *pool, void *ptr, size_t bytes)
{
    if (bytes == 0)
        return FERRY_OK;
    if (!ptr)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_first_touch: ptr is NULL for %zu bytes", bytes);
    tp_touch_ctx c = {ptr, bytes};
    return tp_parallel_for(pool, (bytes + TP_TOUCH_TILE - 1) / TP_TOUCH_TILE, tp_touch_tile, &c);
}

ferry_status tp_alloc(tp_pool *pool, size_t bytes, void **out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_alloc: out is NULL");
    *out = NULL;
    if (bytes == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tp_alloc: 0 bytes asked");
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "tp_alloc: could not map %zu bytes (%.2f GiB): %s",
                       bytes, (double)bytes / (1u << 30), strerror(errno));
    (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fewer TLB misses on a streaming pass */
    ferry_status st = tp_membind(pool, p, bytes);
    if (st == FERRY_ERR_UNSUPPORTED)
        st = FERRY_OK; /* first touch still places the pages */
    if (st == FERRY_OK)
        st = tp_first_touch(pool, p, bytes);
    if (st != FERRY_OK) {
        munmap(p, bytes);
        return st;
    }
    *out = p;
    return FERRY_OK;
}

void tp_free(void *ptr, size_t bytes)
{
    if (ptr && bytes)
        munmap(ptr, bytes);
}
