/* optim/threadpool.h: the engine's persistent CPU thread pool. Owns its worker
 * threads (created once, bound with hwloc to the cores of one NUMA node), a
 * FIFO of jobs, and the helpers that place host memory on the pool's node
 * (first touch, hwloc membind, huge-page allocation). It knows nothing of what
 * the jobs compute.
 *
 * A job is `ntiles` calls of fn(ctx, tile, worker), tile = 0..ntiles-1, in no
 * particular order and on any worker. Callers make results independent of the
 * number of threads by giving every tile a fixed slice of the work and, where
 * tiles produce partial results, combining them in tile order afterwards.
 *
 * Jobs run in submission order (a job's tiles are all claimed before the next
 * job starts). tp_submit returns at once with a ticket; tp_wait blocks until
 * every tile has returned and then frees the ticket, so the engine can overlap
 * a CPU job with GPU work. Every ticket must be waited exactly once.
 *
 * Threads: tp_submit, tp_wait, tp_poll and tp_parallel_for may be called from
 * any thread, concurrently, except from inside a tile function of the same
 * pool (tp_wait there would deadlock and is refused with FERRY_ERR_STATE).
 * tp_pool_create / tp_pool_destroy: one thread, with no job outstanding. */
#ifndef FERRY_OPTIM_THREADPOOL_H
#define FERRY_OPTIM_THREADPOOL_H

#include <stdbool.h>
#include <stddef.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tp_pool tp_pool;
typedef struct tp_ticket tp_ticket;

/* One tile of a job. `worker` is 0..tp_pool_threads()-1 (0 when the job runs
 * on the calling thread because the pool is NULL): an index for per-thread
 * scratch, never an input to the result. */
typedef void (*tp_tile_fn)(void *ctx, size_t tile, int worker);

/* Most threads a pool accepts. */
#define TP_MAX_THREADS 1024

/* Creates a pool of `threads` workers (0 = one per core of the node) bound to
 * the cores of NUMA node `numa_node` (-1 = every core of the machine). Worker
 * i is bound to one hardware thread: the first hardware thread of each core
 * first, then the second ones, round robin if threads exceed them. A binding
 * the OS refuses (a restricted container) is not an error: the pool runs
 * unbound and tp_pool_binding() says so. On success *out owns the threads;
 * release with tp_pool_destroy(). FERRY_ERR_INVALID_ARGUMENT on threads < 0 or
 * > TP_MAX_THREADS or a node that does not exist; FERRY_ERR_BACKEND when hwloc
 * or pthreads fail; FERRY_ERR_OUT_OF_MEMORY. */
ferry_status tp_pool_create(int threads, int numa_node, tp_pool **out);

/* Waits for every queued job, stops and joins the workers, frees the pool.
 * Tickets not yet waited must be waited before this call. NULL is a no-op. */
void tp_pool_destroy(tp_pool *pool);

/* Number of workers (1 for a NULL pool: the calling thread). */
int tp_pool_threads(const tp_pool *pool);
/* The NUMA node the pool was bound to (-1 = whole machine). */
int tp_pool_numa_node(const tp_pool *pool);
/* A sentence on how the workers are bound ("2 threads bound to 2 cores of the
 * machine", or why binding failed). Owned by the pool. */
const char *tp_pool_binding(const tp_pool *pool);

/* Queues fn over ntiles tiles and returns at once. ctx must stay valid until
 * tp_wait() returns; if release is not NULL, tp_wait calls release(ctx) after
 * the last tile (so a caller can hand over a heap-allocated context).
 * ntiles == 0 gives a ticket that is already done. pool must not be NULL.
 * FERRY_ERR_INVALID_ARGUMENT on NULL pool/fn/out; FERRY_ERR_OUT_OF_MEMORY. */
ferry_status tp_submit(tp_pool *pool, size_t ntiles, tp_tile_fn fn, void *ctx,
                       void (*release)(void *ctx), tp_ticket **out);

/* Blocks until every tile of the ticket's job has returned, then frees the
 * ticket. FERRY_ERR_STATE (ticket kept) when called from one of the pool's
 * own workers; FERRY_ERR_INVALID_ARGUMENT on NULL. */
ferry_status tp_wait(tp_ticket *ticket);

/* true once every tile of the job has returned (tp_wait will not block). */
bool tp_poll(tp_ticket *ticket);

/* Runs fn over ntiles tiles and returns when all are done (tp_submit +
 * tp_wait). A NULL pool runs the tiles in order on the calling thread. */
ferry_status tp_parallel_for(tp_pool *pool, size_t ntiles, tp_tile_fn fn, void *ctx);

/* Binds [ptr, ptr+bytes) to the pool's NUMA node with hwloc (pages not yet
 * touched will be placed there). OK without doing anything on a machine with
 * one NUMA node or a pool bound to the whole machine; FERRY_ERR_UNSUPPORTED
 * when the OS refuses. */
ferry_status tp_membind(tp_pool *pool, void *ptr, size_t bytes);

/* Zeroes [ptr, ptr+bytes) from the pool's own threads, in 2 MiB tiles, so
 * that freshly allocated pages are first touched — and placed — on the pool's
 * node. Call it on fresh memory before anything else uses it. */
ferry_status tp_first_touch(tp_pool *pool, void *ptr, size_t bytes);

/* Allocates `bytes` of zeroed memory for optimizer state: anonymous mmap,
 * transparent huge pages asked for, bound to the pool's node and first-touched
 * by its threads. Release with tp_free(ptr, bytes). pool may be NULL (no
 * binding, touched by the caller). FERRY_ERR_OUT_OF_MEMORY with the size. */
ferry_status tp_alloc(tp_pool *pool, size_t bytes, void **out);
void tp_free(void *ptr, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
