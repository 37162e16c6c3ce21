/* The cuda backend's collectives through NCCL, on the CUDA stream like any
 * kernel. A communicator is bootstrapped through the world: rank 0 draws
 * the unique id (ncclGetUniqueId) and the world's control plane broadcasts
 * it (MPI; a world of one rank needs nothing), then every rank joins with
 * ncclCommInitRank on the GPU of its local rank.
 *
 * A collective waits on the GPU, where a dead peer would hold it forever:
 * while any communicator is open, the backend's waits poll (backend/
 * backend_cuda.cu calls comm_nccl_poll), and an asynchronous NCCL error,
 * another rank's failure or the world's timeout aborts every communicator
 * (ncclCommAbort), which ends the kernels that wait.
 *
 * Calls only ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy,
 * ncclCommAbort, ncclCommGetAsyncError, ncclGetErrorString, ncclGetVersion,
 * ncclReduceScatter, ncclAllGather and ncclAllReduce, with ncclFloat32,
 * ncclBfloat16, ncclFloat16 and ncclSum. Built with CUDA; without NCCL,
 * opening a communicator says how to get it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "backend/comm_impl.h"

#ifdef FERRY_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#define MAX_OPEN_COMMS 8

typedef struct nccl_comm {
    ncclComm_t comm;
    bool aborted;
} nccl_comm;

/* Every open communicator of the process, for the poll. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static backend_comm *open_comms[MAX_OPEN_COMMS];

#define NCCL_TRY(call)                                                                                    \
    do {                                                                                                  \
        ncclResult_t nccl_rc_ = (call);                                                                   \
        if (nccl_rc_ != ncclSuccess)                                                                      \
            return err_set(FERRY_ERR_BACKEND, "%s failed: %s (code %d)", #call, ncclGetErrorString(nccl_rc_), \
                           (int)nccl_rc_);                                                                \
    } while (0)

static ncclDataType_t nccl_type(ferry_dtype t)
{
    return t == FERRY_DTYPE_BF16 ? ncclBfloat16 : t == FERRY_DTYPE_F16 ? ncclFloat16 : ncclFloat32;
}

/* Aborts every open communicator: the collectives waiting on the GPU end. */
static void abort_all(void)
{
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < MAX_OPEN_COMMS; i++) {
        nccl_comm *n = open_comms[i] ? open_comms[i]->impl : NULL;
        if (n && !n->aborted) {
            ncclCommAbort(n->comm);
            n->aborted = true;
        }
    }
    pthread_mutex_unlock(&open_lock);
}

/* Called by the backend's waits while communicators are open. */
static ferry_status nccl_poll(backend *be, double waited_s)
{
    (void)be;
    ferry_status st = comm_world_check();
    char failed[sizeof open_comms[0]->name] = "";
    ncclResult_t async = ncclSuccess;
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < MAX_OPEN_COMMS && st == FERRY_OK && !failed[0]; i++) {
        backend_comm *c = open_comms[i];
        nccl_comm *n = c ? c->impl : NULL;
        if (n && !n->aborted && ncclCommGetAsyncError(n->comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
            snprintf(failed, sizeof failed, "%s", c->name);
    }
    pthread_mutex_unlock(&open_lock);
    if (failed[0])
        st = comm_world_fail("NCCL communicator '%s' failed: %s (code %d)", failed, ncclGetErrorString(async),
                             (int)async);
    else if (st == FERRY_OK && waited_s > comm_world_timeout())
        st = comm_world_fail("a wait on the GPU lasted %.0f s while NCCL collectives were open: a rank died, hangs, "
                             "or runs another schedule (set FERRY_COMM_TIMEOUT to wait longer)",
                             waited_s);
    if (st != FERRY_OK)
        abort_all();
    return st;
}

ferry_status comm_nccl_open(backend_comm *c)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int version = 0;
    NCCL_TRY(ncclGetVersion(&version));
    snprintf(c->transport, sizeof c->transport, "NCCL %d.%d.%d", version / 10000, (version / 100) % 100,
             version % 100);
    if (c->rank == 0)
        NCCL_TRY(ncclGetUniqueId(&id));
    ferry_status st = comm_world_broadcast(&id, sizeof id, 0);
    if (st != FERRY_OK)
        return err_wrap(st, "sharing NCCL's unique id");
    nccl_comm *n = calloc(1, sizeof *n);
    if (!n)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "an NCCL communicator: out of host memory");
    ncclResult_t rc = ncclCommInitRank(&n->comm, c->size, id, c->rank);
    if (rc != ncclSuccess) {
        free(n);
        return err_set(FERRY_ERR_BACKEND, "ncclCommInitRank (rank %d of %d, communicator '%s') failed: %s (code %d)",
                       c->rank, c->size, c->name, ncclGetErrorString(rc), (int)rc);
    }
    c->impl = n;
    pthread_mutex_lock(&open_lock);
    int slot = -1;
    for (int i = 0; i < MAX_OPEN_COMMS && slot < 0; i++)
        if (!open_comms[i])
            slot = i;
    if (slot >= 0)
        open_comms[slot] = c;
    pthread_mutex_unlock(&open_lock);
    if (slot < 0) {
        ncclCommDestroy(n->comm);
        free(n);
        c->impl = NULL;
        return err_set(FERRY_ERR_STATE, "more than %d NCCL communicators open at once", MAX_OPEN_COMMS);
    }
    c->be->comm_poll = nccl_poll;
    return FERRY_OK;
}

void comm_nccl_close(backend_comm *c)
{
    nccl_comm *n = c->impl;
    if (!n)
        return;
    bool any = false;
    pthread_mutex_lock(&open_lock);
    for (int i = 0; i < MAX_OPEN_COMMS; i++) {
        if (open_comms[i] == c)
            open_comms[i] = NULL;
        else if (open_comms[i] && open_comms[i]->be == c->be)
            any = true;
    }
    pthread_mutex_unlock(&open_lock);
    if (!any)
        c->be->comm_poll = NULL;
    if (!n->aborted) { /* ncclCommAbort frees what it aborts */
        if (comm_world_failed())
            ncclCommAbort(n->comm);
        else
            ncclCommDestroy(n->comm);
    }
    free(n);
    c->impl = NULL;
}

static ferry_status ready(backend_comm *c)
{
    nccl_comm *n = c->impl;
    if (comm_world_failed())
        return comm_world_check();
    if (n->aborted)
        return err_set(FERRY_ERR_BACKEND, "NCCL communicator '%s' was aborted", c->name);
    return FERRY_OK;
}

ferry_status comm_nccl_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                      ferry_dtype t)
{
    ferry_status st = ready(c);
    if (st != FERRY_OK)
        return st;
    NCCL_TRY(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, ((nccl_comm *)c->impl)->comm,
                               (cudaStream_t)backend_stream_native(s)));
    return FERRY_OK;
}

ferry_status comm_nccl_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    ferry_status st = ready(c);
    if (st != FERRY_OK)
        return st;
    NCCL_TRY(ncclAllGather(send, recv, count, nccl_type(t), ((nccl_comm *)c->impl)->comm,
                           (cudaStream_t)backend_stream_native(s)));
    return FERRY_OK;
}

ferry_status comm_nccl_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    ferry_status st = ready(c);
    if (st != FERRY_OK)
        return st;
    NCCL_TRY(ncclAllReduce(send, recv, count, nccl_type(t), ncclSum, ((nccl_comm *)c->impl)->comm,
                           (cudaStream_t)backend_stream_native(s)));
    return FERRY_OK;
}

#else /* a CUDA build without NCCL */

ferry_status comm_nccl_open(backend_comm *c)
{
    (void)c;
    return err_set(FERRY_ERR_UNSUPPORTED,
                   "data parallelism on the cuda backend needs NCCL, and this ferry was built without it: install "
                   "NCCL where the CUDA toolkit's libraries are and rebuild (-Dnccl=enabled)");
}

void comm_nccl_close(backend_comm *c) { (void)c; }

static ferry_status no_nccl(void) { return err_set(FERRY_ERR_UNSUPPORTED, "this ferry was built without NCCL"); }

ferry_status comm_nccl_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                      ferry_dtype t)
{
    (void)s, (void)c, (void)send, (void)recv, (void)count, (void)t;
    return no_nccl();
}

ferry_status comm_nccl_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    (void)s, (void)c, (void)send, (void)recv, (void)count, (void)t;
    return no_nccl();
}

ferry_status comm_nccl_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    (void)s, (void)c, (void)send, (void)recv, (void)count, (void)t;
    return no_nccl();
}
#endif
