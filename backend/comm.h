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
 * interface. Every wait here is bounded: it fails after the timeout
 * (comm_world_timeout) naming the ranks it waited for, or as soon as
 * another rank reported a failure (comm_world_abort). A failed world stays
 * failed: every later collective fails at once with the first failure's
 * message. */
#ifndef FERRY_KERNELS_COMM_H
#define FERRY_KERNELS_COMM_H

#include <stdbool.h>
#include <stddef.h>

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
/* The GPU of this rank among the devices this process sees. */
int comm_world_local_rank(void);
int comm_world_local_size(void);

/* Seconds a wait may last before it fails; set once by whoever knows
 * (an engine's comm_timeout_s, else $FERRY_COMM_TIMEOUT, else 600). */
void comm_world_set_timeout(double seconds);
double comm_world_timeout(void);

/* FERRY_OK, or FERRY_ERR_BACKEND with the failure that ended the world
 * (another rank's message, a timeout). Polls for messages from other ranks. */
ferry_status comm_world_check(void);
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

#ifdef __cplusplus
}
#endif
#endif
