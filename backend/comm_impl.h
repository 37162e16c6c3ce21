/* Inside backend/ only: what a communicator is, the MPI message engine of
 * the world (comm_world.c) the host backend's collectives run on
 * (comm_host.c), and the two backends' comm entries of their op tables
 * (comm_host.c, comm_nccl.c). No MPI or NCCL type appears here. */
#ifndef FERRY_KERNELS_COMM_IMPL_H
#define FERRY_KERNELS_COMM_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend_impl.h"
#include "backend/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct backend_comm {
    backend *be;
    char name[32];
    int rank, size;
    char transport[48];
    void *impl; /* host: an MPI communicator of its own (NULL alone); cuda: an NCCL one */
};

/* One message of an exchange: `bytes` at buf sent to, or received from, `peer`. */
typedef struct comm_xfer {
    void *buf;
    size_t bytes;
    int peer;
    bool send;
} comm_xfer;

/* A communicator of the world's ranks for one backend_comm (MPI_Comm_dup),
 * and its release (`abandon` after a failure: nothing is waited for). */
ferry_status comm_mpi_dup(void **out);
void comm_mpi_free(void *comm, bool abandon);
/* Posts every receive, then every send, and waits for all of them, bounded
 * by the world's timeout and ended early by another rank's failure. `what`
 * names the collective in messages. A failure fails the world. */
ferry_status comm_mpi_exchange(void *comm, comm_xfer *x, int n, const char *what);

/* Marks the world failed by this rank (the first failure wins) and tells
 * the other ranks; returns FERRY_ERR_BACKEND with the message. */
ferry_status comm_world_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool comm_world_failed(void);
double comm_now_s(void);

/* The host backend's comm entries (comm_host.c). */
ferry_status comm_host_open(backend_comm *c);
void comm_host_close(backend_comm *c);
ferry_status comm_host_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                      size_t count, ferry_dtype t);
ferry_status comm_host_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                  size_t count, ferry_dtype t);
ferry_status comm_host_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                  size_t count, ferry_dtype t);

/* The cuda backend's (comm_nccl.c; in a CUDA build without NCCL, open says so). */
ferry_status comm_nccl_open(backend_comm *c);
void comm_nccl_close(backend_comm *c);
ferry_status comm_nccl_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                      size_t count, ferry_dtype t);
ferry_status comm_nccl_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                  size_t count, ferry_dtype t);
ferry_status comm_nccl_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                  size_t count, ferry_dtype t);

#ifdef __cplusplus
}
#endif
#endif
