/* Ranks and collectives: the world of processes a launcher started (mpirun,
 * srun), and communicators of a backend whose collectives run on its
 * streams like copies (backend/ops/ops.h: ops_reduce_scatter, ops_all_gather,
 * ops_all_reduce).
 *
 * The world is one per process. Joining it starts MPI (only when the
 * launcher started more than one rank); MPI is then the control plane: the
 * small blocking collectives of the calling thread below (norm partials,
 * losses, checkpoint shards), the bootstrap of NCCL, and the channel on
 * which a failing rank tells the others. The data plane is a backend_comm:
 * on the host backend MPI point-to-point messages run by the stream's worker
 * thread, summing in rank order (so every result is the same bits on every
 * rank and at every world size); on the cuda backend NCCL on the CUDA
 * stream.
 *
 * Nothing outside backend/ sees MPI or NCCL: this header is the whole
 * interface. Every wait here is bounded, by one watchdog thread per rank
 * (below): a collective older than the timeout, a peer whose heartbeat
 * stops, or another rank's failure (comm_world_abort) fails the world, and
 * every wait returns that failure. A failed world stays failed: every later
 * collective fails at once with the first failure's message.
 *
 * Every collective is also written in the rank's ledger (below), so ranks
 * that issue different collectives are caught by comparing a hash instead
 * of hanging or pairing one rank's data with another's. */
#ifndef FERRY_BACKEND_COMM_H
#define FERRY_BACKEND_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the world ---- */

/* The launcher's environment (or the world as joined); see ferry_world_probe. */
ferry_status comm_world_probe(ferry_world_info *out);
/* Joins the launcher's world (ferry_world_join): starts MPI for a world of
 * several ranks; a world of one rank needs nothing. */
ferry_status comm_world_join(ferry_world_info *out);
bool comm_world_joined(void);
/* 0 and 1 before joining or alone. */
int comm_world_rank(void);
int comm_world_size(void);
/* This rank's place among the ranks on its machine: from MPI
 * (MPI_Comm_split_type) once joined, else from the launcher's environment
 * (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID), so a rank
 * that trains alone under a launcher (data_parallel -1) knows it too; 0 and
 * 1 without a launcher. The size is -1 when the launcher does not say
 * (Slurm without SLURM_STEP_TASKS_PER_NODE) and the world was not joined. */
int comm_world_local_rank(void);
int comm_world_local_size(void);
/* The device this rank takes among the `count` this process sees: its
 * local rank. More local ranks than devices would put two ranks on one
 * GPU, each planning with the whole card's memory: refused with a sentence
 * unless $FERRY_SHARE_GPUS=1 asks for it (then local rank modulo count).
 * One device each, given by the launcher (CUDA_VISIBLE_DEVICES set per
 * rank, as Slurm's gpus-per-task option does), is device 0 of each; a joined
 * world refuses it when ranks of one machine were given the same list. */
ferry_status comm_world_device(int count, int *device);

/* ---- timeouts ---- */

/* Parses a timeout: seconds as a plain number ("90", "2.5") or a number
 * with a unit, s, m or h ("20s", "15m", "1.5h"). Anything else (empty, not
 * a number, inf or nan, zero or less, another unit, over a week) is
 * FERRY_ERR_INVALID_ARGUMENT with a sentence that names `what` (the
 * variable's name) and the text. */
ferry_status comm_parse_timeout(const char *text, const char *what, double *seconds);

/* Seconds a collective may run (and a peer stay silent) before the watchdog
 * fails the world. In force: the value set here (an engine's comm_timeout_s),
 * else $FERRY_COMM_TIMEOUT, else 600. Joining refuses an invalid
 * $FERRY_COMM_TIMEOUT or $FERRY_COMM_SAVE_TIMEOUT with the parser's
 * sentence; seconds <= 0 here changes nothing. */
void comm_world_set_timeout(double seconds);
double comm_world_timeout(void);
/* Seconds the ranks wait at a checkpoint without the writer showing
 * progress (comm_world_save_begin): $FERRY_COMM_SAVE_TIMEOUT, else the
 * larger of 1800 and the collective timeout. */
double comm_world_save_timeout(void);
/* The timeouts in force and where each comes from, for a program to print
 * at start: "collectives time out after 10 s (FERRY_COMM_TIMEOUT=10s),
 * checkpoint saves after 30 min without progress (the default)". */
void comm_world_describe_timeouts(char *out, size_t cap);

/* ---- failures ---- */

/* FERRY_OK, or FERRY_ERR_BACKEND with the failure that ended the world
 * (another rank's message, a timeout). Polls for messages from other ranks. */
ferry_status comm_world_check(void);
/* true once the world failed (any rank's failure that reached this one):
 * one atomic load, for a waiting loop to test each time it wakes. */
bool comm_world_failed(void);
/* This rank failed: tells the others (see ferry_world_abort). */
void comm_world_abort(const char *message);
/* Finalizes MPI when healthy (ferry_world_leave). */
ferry_status comm_world_leave(void);

/* Blocking collectives of the calling thread (one thread per process calls
 * these, in the same order on every rank). */
ferry_status comm_world_all_reduce_f64(double *values, size_t count);
ferry_status comm_world_broadcast(void *buf, size_t bytes, int root);
ferry_status comm_world_barrier(void);
/* Every rank's `mine` (bytes[rank] bytes) into out, rank p's at
 * out + at[p] (bytes[p] bytes); every rank knows every size. */
ferry_status comm_world_all_gather_v(const void *mine, void *out, const size_t *at, const size_t *bytes);
/* Point to point, in the order posted. */
ferry_status comm_world_send(int to, const void *buf, size_t bytes);
ferry_status comm_world_recv(int from, void *buf, size_t bytes);

/* ---- the watchdog ----
 *
 * Joining a world of several ranks starts one watchdog thread per rank (as
 * PyTorch's ProcessGroupNCCL has). It sees every collective of the rank
 * from the moment it starts to its completion: the host backend's and the
 * control plane's exchanges as they run, NCCL's through events recorded
 * around each call. It sends a heartbeat to the next rank several times per
 * timeout and watches the previous rank's, and reads other ranks' failure
 * messages even while no thread of this rank is in a collective. The world
 * fails, naming the rank, the collective and its age, when
 *   - a collective has run longer than comm_world_timeout() (a checkpoint's
 *     waits: see comm_world_save_begin);
 *   - the previous rank sent no heartbeat for comm_world_timeout() (it was
 *     stopped, it died, or its machine is unreachable);
 *   - another rank reports a failure.
 * Then every NCCL communicator is aborted (ncclCommAbort: kernels waiting
 * for a dead peer end), every MPI wait of the host backend and the control
 * plane returns the failure, the backend's waits on the device return it
 * (they poll comm_world_check), and every waker below is called.
 *
 * Wakers reach the waits ferry's collectives cannot: a condition variable
 * of a thread pool's job that waits for a host function, a host function
 * that waits for the CPU's work. A waiter registers a function that makes
 * its wait return, and tests comm_world_failed() each time it wakes:
 *
 *     comm_waker *w;
 *     if ((st = comm_waker_add(wake_drains, d, &w)) != FERRY_OK)
 *         return st;                      // the world has failed already
 *     pthread_mutex_lock(&d->lock);
 *     while (!d->done && !comm_world_failed())
 *         pthread_cond_wait(&d->cond, &d->lock);
 *     pthread_mutex_unlock(&d->lock);
 *     comm_waker_remove(w);
 *     if (!d->done)
 *         return comm_world_check();      // the failure, in words
 *
 * with wake_drains locking d->lock and broadcasting d->cond. */

typedef struct comm_waker comm_waker;
/* Registers wake(arg), called once when the world fails: from the
 * watchdog's thread (or the failing thread when no watchdog runs), with the
 * registry's lock held, so it must be quick and must not wait, register or
 * remove wakers. FERRY_ERR_BACKEND with the failure, registering nothing,
 * when the world has failed already. Any thread. */
ferry_status comm_waker_add(void (*wake)(void *arg), void *arg, comm_waker **out);
/* Unregisters; once it returns, wake is not running and will not run for
 * it, so arg may be freed. NULL is fine. Any thread. */
void comm_waker_remove(comm_waker *w);

/* ---- checkpoint saves ----
 *
 * While one rank writes a checkpoint the others wait for it longer than a
 * collective may last, and must not call that a death. Between
 * comm_world_save_begin(writer) and comm_world_save_end(), on every rank,
 * the control plane's waits of the ranks other than the writer (the
 * broadcast of its outcome, the sends of their shards to it) are bounded by
 * the writer's progress instead of the collective timeout: the writer calls
 * comm_world_save_progress as it writes, which reaches the others at most
 * once a second, and a wait fails when the writer showed no progress for
 * comm_world_save_timeout() seconds. A writer that dies or is stopped is
 * still caught by its heartbeat within comm_world_timeout(). Neither call
 * communicates; call both on every rank, in the same places. */
ferry_status comm_world_save_begin(int writer);
/* The writer's bytes written so far; cheap, any thread. Outside a save, or
 * on another rank, it does nothing. */
void comm_world_save_progress(uint64_t bytes_done);
void comm_world_save_end(void);

/* ---- the ledger ----
 *
 * Each rank folds every collective it issues, in the order issued, into a
 * running 64-bit hash: its operation, its communicator ("gradients",
 * "weights"; "world" for the control plane), the caller's tag (the engine's
 * group; see backend_comm_set_tag), element count, type and root, and its
 * number. Ranks that issued the same collectives in the same order have the
 * same hash. Comparing hashes catches ranks that diverged (a group evicted
 * and fetched again on one rank only) before the mismatch hangs, or pairs
 * one rank's group with another's of the same size and corrupts the weights
 * without an error. The last COMM_LEDGER_RING entries are kept, so that the
 * first collective that differs can be named. Point-to-point sends and
 * receives are not collectives and are not written. Issue the collectives
 * from one thread (the order written is the order of the calls). */

#define COMM_LEDGER_RING 64
/* Doubles the comparison adds to an all-reduce. */
#define COMM_LEDGER_WORDS 8

/* Writes this rank's ledger into `words` (COMM_LEDGER_WORDS doubles) of an
 * all-reduce of doubles the caller does anyway, which must sum exactly in
 * any order (comm_world_all_reduce_f64, ferry_world_all_reduce): the hash
 * as four 16-bit pieces and their squares, integers below 2^53 at any world
 * size up to 2^21 ranks. */
void comm_ledger_words(double *words);
/* After that all-reduce, with the summed words: FERRY_OK when every rank's
 * hash, as comm_ledger_words gave it, is this rank's (x summed to N x mine
 * and x^2 to N x mine^2 for each piece holds only then). Call the two in
 * pairs from one thread, nothing of the ledger's between them but the
 * all-reduce. Otherwise every rank sees the difference and
 * calls this alike: it gathers the ranks' recent entries (a collective),
 * names the first collective that differs, fails the world with it and
 * returns FERRY_ERR_BACKEND. Collective; calling thread. */
ferry_status comm_ledger_verify(const double *summed);
/* Both, in an all-reduce of its own: where no all-reduce is at hand (a
 * save). `where` names the place in the message. Collective. */
ferry_status comm_ledger_check(const char *where);
/* This rank's count of collectives written and its hash. */
void comm_ledger_state(uint64_t *count, uint64_t *hash);

/* ---- communicators of a backend ---- */

typedef struct backend_comm backend_comm;

/* Opens a communicator over the whole world for collectives on be's
 * streams (`name` for messages: "gradients", "weights"). Collective: every
 * rank opens its communicators in the same order. Use each communicator
 * from one stream only, and issue its collectives in the same order on
 * every rank. FERRY_ERR_UNSUPPORTED when this build cannot (the cuda
 * backend without NCCL; a world of several ranks without MPI). */
ferry_status backend_comm_open(backend *be, const char *name, backend_comm **out);
/* Waits for nothing: close after the streams that use it are synchronized.
 * After a failure the communicator is abandoned (aborted), never waited on.
 * NULL is fine. */
void backend_comm_close(backend_comm *c);
int backend_comm_rank(const backend_comm *c);
int backend_comm_size(const backend_comm *c);
/* "MPI" or "NCCL 2.28.9". */
const char *backend_comm_transport(const backend_comm *c);
/* The tag the ledger writes for the next collectives issued on c: the
 * engine's group, so ranks that gather or reduce different groups of one
 * size differ there. tag < 0: none. Set from the thread that issues. */
void backend_comm_set_tag(backend_comm *c, int tag);

#ifdef __cplusplus
}
#endif
#endif
