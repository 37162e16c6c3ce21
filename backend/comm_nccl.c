/* The cuda backend's collectives through NCCL, on the CUDA stream like any
 * kernel. A communicator is bootstrapped through the world: rank 0 draws
 * the unique id (ncclGetUniqueId) and the world's control plane broadcasts
 * it (MPI; a world of one rank needs nothing), then every rank starts its
 * side with ncclCommInitRankConfig, non-blocking (config.blocking = 0), on
 * the GPU of its local rank, and polls it until it is up: bounded by the
 * collective timeout and ended by another rank's failure, so a rank that
 * fails or hangs at start cannot hold the others. A collective on the
 * non-blocking communicator that returns ncclInProgress (NCCL still
 * enqueueing it, while it connects) is polled the same way.
 *
 * A collective waits on the GPU, where a dead peer would hold it forever.
 * Each is written in the ledger when issued, and two events recorded
 * around it let the watchdog (comm_watch.c) see it start and complete;
 * one that runs longer than the timeout, a peer's silence or another
 * rank's failure fails the world, and the watchdog then aborts every
 * communicator (ncclCommAbort), which ends the kernels that wait. While a
 * communicator is open the backend's waits poll (backend/backend_cuda.cu
 * calls comm_nccl_poll), so they return that failure, and an asynchronous
 * NCCL error found there fails the world too.
 *
 * Calls only ncclGetUniqueId, ncclCommInitRankConfig, ncclCommDestroy,
 * ncclCommAbort, ncclCommGetAsyncError, ncclGetErrorString, ncclGetVersion,
 * ncclReduceScatter, ncclAllGather and ncclAllReduce, with ncclFloat32,
 * ncclBfloat16, ncclFloat16 and ncclSum. Built with CUDA; without NCCL,
 * opening a communicator says how to get it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "backend/comm_impl.h"

#ifdef FERRY_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#define MAX_OPEN_COMMS 8

/* The events around one collective, with the watchdog's item: taken from
 * the communicator's free list when issued, back on it when done. */
typedef struct nccl_track {
    comm_watch_item item;
    cudaEvent_t start, end;
    struct nccl_comm *owner;
    struct nccl_track *next;
} nccl_track;

typedef struct nccl_comm {
    ncclComm_t comm;
    bool aborted;
    pthread_mutex_t lock; /* the free list */
    nccl_track *free_tracks;
    int tracks;           /* made, free or in flight */
} nccl_comm;

/* Every open communicator of the process, for the poll; held while a
 * collective is issued, so that the watchdog's abort (from its own thread)
 * never frees a communicator under a call. */
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

/* Aborts every open communicator: the collectives waiting on the GPU end.
 * The watchdog calls it once the world fails. */
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
    (void)waited_s; /* the watchdog bounds each collective: a long wait is not a failure by itself */
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
    if (st != FERRY_OK)
        abort_all();
    return st;
}

/* ---- starting a communicator ---- */

/* Polls a non-blocking communicator until NCCL has done what a call
 * returned ncclInProgress for (its start; a collective's enqueue while it
 * connects): bounded by the collective timeout, ended by the world's
 * failure. `doing` names it: "start", "take an all-reduce of ...". */
static ferry_status wait_settled(backend_comm *c, nccl_comm *n, const char *doing)
{
    double t0 = comm_now_s();
    long nap_ns = 100000;
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t rc = ncclCommGetAsyncError(n->comm, &state);
        if (rc != ncclSuccess)
            state = rc;
        if (state == ncclSuccess)
            return FERRY_OK;
        if (state != ncclInProgress)
            return comm_world_fail("NCCL communicator '%s' (rank %d of %d) failed to %s: %s (code %d)", c->name,
                                   c->rank, c->size, doing, ncclGetErrorString(state), (int)state);
        ferry_status st = comm_world_check();
        if (st != FERRY_OK)
            return err_wrap(st, "NCCL communicator '%s' waiting to %s", c->name, doing);
        double waited = comm_now_s() - t0, timeout = comm_world_timeout();
        if (waited > timeout) {
            char limit[32];
            comm_fmt_seconds(timeout, limit, sizeof limit);
            return comm_world_fail("NCCL communicator '%s' (rank %d of %d) did not %s in %.0f s: a rank failed or "
                                   "hangs, or cannot reach this one (collectives time out after %s: "
                                   "FERRY_COMM_TIMEOUT)",
                                   c->name, c->rank, c->size, doing, waited, limit);
        }
        nanosleep(&(struct timespec){0, nap_ns}, NULL);
        if (nap_ns < 10000000)
            nap_ns *= 2;
    }
}

static ferry_status start_comm(backend_comm *c, nccl_comm *n, ncclUniqueId id)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&n->comm, c->size, id, c->rank, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        if (n->comm)
            ncclCommAbort(n->comm);
        n->comm = NULL;
        return comm_world_fail("ncclCommInitRankConfig (rank %d of %d, communicator '%s') failed: %s (code %d)",
                               c->rank, c->size, c->name, ncclGetErrorString(rc), (int)rc);
    }
    ferry_status st = wait_settled(c, n, "start");
    if (st != FERRY_OK) {
        ncclCommAbort(n->comm); /* a start under way ends there; NCCL frees it */
        n->comm = NULL;
    }
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
    pthread_mutex_init(&n->lock, NULL);
    if ((st = start_comm(c, n, id)) != FERRY_OK) {
        pthread_mutex_destroy(&n->lock);
        free(n);
        return st;
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
        pthread_mutex_destroy(&n->lock);
        free(n);
        c->impl = NULL;
        return err_set(FERRY_ERR_STATE, "more than %d NCCL communicators open at once", MAX_OPEN_COMMS);
    }
    comm_watch_on_failure(abort_all);
    c->be->comm_poll = nccl_poll;
    return FERRY_OK;
}

/* ---- the watchdog's events ---- */

static comm_progress track_progress(void *ctx)
{
    nccl_track *t = ctx;
    cudaError_t rc = cudaEventQuery(t->end);
    if (rc == cudaErrorNotReady) {
        cudaGetLastError(); /* "not yet" is no error */
        rc = cudaEventQuery(t->start);
        cudaGetLastError();
        return rc == cudaSuccess ? COMM_RUNNING : COMM_QUEUED;
    }
    cudaGetLastError(); /* done, or an error the stream's own wait reports */
    return COMM_DONE;
}

static void track_release(void *ctx)
{
    nccl_track *t = ctx;
    nccl_comm *n = t->owner;
    pthread_mutex_lock(&n->lock);
    t->next = n->free_tracks;
    n->free_tracks = t;
    pthread_mutex_unlock(&n->lock);
}

static ferry_status take_track(nccl_comm *n, nccl_track **out)
{
    pthread_mutex_lock(&n->lock);
    nccl_track *t = n->free_tracks;
    if (t)
        n->free_tracks = t->next;
    pthread_mutex_unlock(&n->lock);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "a collective's events: out of host memory");
        cudaError_t rc = cudaEventCreateWithFlags(&t->start, cudaEventDisableTiming);
        if (rc == cudaSuccess && (rc = cudaEventCreateWithFlags(&t->end, cudaEventDisableTiming)) != cudaSuccess)
            cudaEventDestroy(t->start);
        if (rc != cudaSuccess) {
            free(t);
            return err_set(FERRY_ERR_BACKEND, "a collective's events: cudaEventCreateWithFlags failed: %s",
                           cudaGetErrorString(rc));
        }
        t->owner = n;
        pthread_mutex_lock(&n->lock);
        n->tracks++;
        pthread_mutex_unlock(&n->lock);
    }
    *out = t;
    return FERRY_OK;
}

static void free_tracks(nccl_comm *n)
{
    for (nccl_track *t = n->free_tracks, *next; t; t = next) {
        next = t->next;
        cudaEventDestroy(t->start);
        cudaEventDestroy(t->end);
        free(t);
    }
    n->free_tracks = NULL;
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
    bool aborted = n->aborted;
    pthread_mutex_unlock(&open_lock);
    if (!any)
        c->be->comm_poll = NULL;
    comm_watch_forget(n); /* its events go below */
    if (!aborted) { /* ncclCommAbort frees what it aborts */
        if (comm_world_failed())
            ncclCommAbort(n->comm);
        else
            ncclCommDestroy(n->comm);
    }
    free_tracks(n);
    pthread_mutex_destroy(&n->lock);
    free(n);
    c->impl = NULL;
}

/* ---- collectives ---- */

static ferry_status ready(backend_comm *c)
{
    nccl_comm *n = c->impl;
    if (comm_world_failed())
        return comm_world_check();
    if (n->aborted)
        return err_set(FERRY_ERR_BACKEND, "NCCL communicator '%s' was aborted", c->name);
    return FERRY_OK;
}

typedef enum { NCCL_RS, NCCL_AG, NCCL_AR } nccl_kind;

/* One collective: written in the ledger, between two events the watchdog
 * watches. */
static ferry_status issue_locked(nccl_kind kind, backend_stream *s, backend_comm *c, const void *send, void *recv,
                                 size_t count, ferry_dtype t)
{
    ferry_status st = ready(c);
    if (st != FERRY_OK)
        return st;
    nccl_comm *n = c->impl;
    static const comm_op ops[] = {COMM_OP_REDUCE_SCATTER, COMM_OP_ALL_GATHER, COMM_OP_ALL_REDUCE};
    comm_entry e = comm_ledger_write(c->name, ops[kind], c->tagged ? c->tag : -1, count, t, -1);
    char what[200], doing[220];
    comm_entry_describe(&e, what, sizeof what);
    snprintf(doing, sizeof doing, "take %s", what);
    nccl_track *tr = NULL;
    if ((st = take_track(n, &tr)) != FERRY_OK)
        return st;
    cudaStream_t cs = (cudaStream_t)backend_stream_native(s);
    cudaError_t crc = cudaEventRecord(tr->start, cs);
    ncclResult_t rc = ncclSuccess;
    if (crc == cudaSuccess) {
        rc = kind == NCCL_RS   ? ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, n->comm, cs)
             : kind == NCCL_AG ? ncclAllGather(send, recv, count, nccl_type(t), n->comm, cs)
                               : ncclAllReduce(send, recv, count, nccl_type(t), ncclSum, n->comm, cs);
        /* A non-blocking communicator may still be enqueueing it (while it
         * connects): the end event goes after it. */
        if (rc == ncclInProgress && (st = wait_settled(c, n, doing)) != FERRY_OK) {
            track_release(tr);
            return st;
        }
        if (rc == ncclSuccess || rc == ncclInProgress)
            rc = ncclSuccess, crc = cudaEventRecord(tr->end, cs);
    }
    if (crc != cudaSuccess || rc != ncclSuccess) {
        track_release(tr);
        if (crc != cudaSuccess)
            return err_set(FERRY_ERR_BACKEND, "%s: recording its event failed: %s", what, cudaGetErrorString(crc));
        return err_set(FERRY_ERR_BACKEND, "%s: NCCL refused it: %s (code %d)", what, ncclGetErrorString(rc), (int)rc);
    }
    comm_watch_track(&tr->item, what, n, track_progress, track_release, tr);
    return FERRY_OK;
}

/* Under open_lock: the watchdog's abort waits for the call to be made. */
static ferry_status issue(nccl_kind kind, backend_stream *s, backend_comm *c, const void *send, void *recv,
                          size_t count, ferry_dtype t)
{
    pthread_mutex_lock(&open_lock);
    ferry_status st = issue_locked(kind, s, c, send, recv, count, t);
    pthread_mutex_unlock(&open_lock);
    return st;
}

ferry_status comm_nccl_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                      ferry_dtype t)
{
    return issue(NCCL_RS, s, c, send, recv, count, t);
}

ferry_status comm_nccl_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    return issue(NCCL_AG, s, c, send, recv, count, t);
}

ferry_status comm_nccl_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    return issue(NCCL_AR, s, c, send, recv, count, t);
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
