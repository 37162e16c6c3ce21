/* Inside backend/ only: what a communicator is, the MPI message engine of
 * the world (comm_world.c) the host backend's collectives run on
 * (comm_host.c), the ledger's entries (comm_ledger.c), the watchdog's view
 * of collectives in flight (comm_watch.c), and the two backends' comm
 * entries of their op tables (comm_host.c, comm_nccl.c). No MPI or NCCL
 * type appears here. */
#ifndef FERRY_BACKEND_COMM_IMPL_H
#define FERRY_BACKEND_COMM_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    int tag;    /* the ledger's tag of the next collectives (backend_comm_set_tag) */
    bool tagged;
};

/* ---- the ledger (comm_ledger.c) ---- */

typedef enum comm_op {
    COMM_OP_ALL_REDUCE,
    COMM_OP_REDUCE_SCATTER,
    COMM_OP_ALL_GATHER,
    COMM_OP_BROADCAST,   /* the control plane's, root given */
    COMM_OP_ALL_GATHER_V,
    COMM_OP_COUNT
} comm_op;

/* One collective as the ledger writes it. */
typedef struct comm_entry {
    uint64_t seq;         /* its number on this rank, from 0 */
    uint64_t count;       /* elements (bytes for the control plane's) */
    uint64_t hash_before; /* the ledger's hash before it */
    int32_t op;           /* comm_op */
    int32_t dtype;        /* ferry_dtype; 0 for the control plane's bytes */
    int32_t tag;          /* -1: none */
    int32_t root;         /* -1: none */
    char channel[24];     /* "gradients", "weights", "world" */
} comm_entry;

/* Writes one collective (tag and root -1 when none) and returns its entry,
 * the number filled in. */
comm_entry comm_ledger_write(const char *channel, comm_op op, int tag, uint64_t count, int dtype, int root);
/* "an all-reduce of 'gradients' (collective #57: 4096 f32, group 3)" */
void comm_entry_describe(const comm_entry *e, char *out, size_t cap);
/* The ledger's hash h with entry e folded in. */
uint64_t comm_entry_hash(uint64_t h, const comm_entry *e);

/* One rank's ledger as the ranks gather it when their hashes differ. */
typedef struct comm_ledger_view {
    uint64_t count, hash;
    comm_entry ring[COMM_LEDGER_RING];
} comm_ledger_view;
/* The first collective that differs across n ranks' views, in words:
 * "the first that differs is collective #90: ranks 0, 2 issued ...; rank 1
 * issued ...", or that they differ before the oldest entry kept. */
void comm_ledger_first_difference(const comm_ledger_view *v, int n, char *out, size_t cap);

/* ---- the watchdog's view (comm_watch.c) ---- */

/* What a tracked collective reports when asked (one driven by the device). */
typedef enum comm_progress { COMM_QUEUED, COMM_RUNNING, COMM_DONE } comm_progress;

/* A collective in flight, as the watchdog sees it. The caller owns the
 * storage (on its stack for an exchange, beside its events for a device
 * collective); the watchdog links it into its list and reads it under its
 * lock only. */
typedef struct comm_watch_item {
    struct comm_watch_item *next, *prev;
    bool linked;
    bool save;         /* begun in a save on a rank that is not the writer */
    double started_s;  /* comm_now_s() when it started; < 0 while queued */
    char what[200];    /* "an all-reduce of 'gradients' (collective #57: 4096 f32, group 3)" */
    char peers[64];    /* the ranks it still waits for, when known: "1, 3" */
    const void *owner; /* device items: the communicator */
    comm_progress (*progress)(void *ctx);
    void (*release)(void *ctx);
    void *ctx;
} comm_watch_item;

/* A collective that runs on the calling thread from now until
 * comm_watch_end: an exchange of the host backend or the control plane.
 * Not linked (it->linked false) when no watchdog runs. */
void comm_watch_begin(comm_watch_item *it, const char *what);
/* The ranks it still waits for ("1, 3"), for the message if it times out. */
void comm_watch_waiting_for(comm_watch_item *it, const char *peers);
void comm_watch_end(comm_watch_item *it);
/* A collective the device runs: progress(ctx) tells where it is (the
 * watchdog's thread asks each tick, with the watchdog's lock held),
 * release(ctx) is called once it is done or forgotten, outside that lock.
 * `owner` groups the items of one communicator. Without a watchdog,
 * release(ctx) is called at once. */
void comm_watch_track(comm_watch_item *it, const char *what, const void *owner,
                      comm_progress (*progress)(void *ctx), void (*release)(void *ctx), void *ctx);
/* Drops (releasing) every tracked item of owner: before its events go. */
void comm_watch_forget(const void *owner);
/* Called once when the world fails, before the wakers: what ends the
 * waits of a communicator's kind (comm_nccl.c aborts its communicators).
 * At most a few; registered for the process's life. */
void comm_watch_on_failure(void (*fn)(void));

/* The thread (comm_world.c starts it at join, stops it at leave). */
ferry_status comm_watch_start(void);
void comm_watch_stop(void);
bool comm_watch_running(void);
/* The world has just failed: wake the watchdog to run the failure's
 * hooks and the wakers (or run them here when no watchdog runs). */
void comm_watch_failed(void);
/* The oldest collective in flight here, for a failure's message: "an
 * all-reduce of 'gradients' (collective #57: 4096 f32) for 9.8 s", or ""
 * when none. */
void comm_watch_in_flight(char *out, size_t cap);

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
/* The same for a failure every rank finds alike at once (the ledgers
 * differ): recorded here, nobody told. */
ferry_status comm_world_fail_agreed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double comm_now_s(void);

/* What the watchdog's thread does each tick through the world's MPI
 * (comm_world.c): sends this rank's heartbeat to the next rank, reads the
 * previous rank's, the writer's save progress and other ranks' failure
 * messages. */
void comm_world_pulse(void);
/* Seconds since the previous rank was last heard (0: none is watched, or
 * it has left), and which rank it is. */
double comm_world_silence(int *peer);
/* In a save, on a rank that is not the writer: seconds since the writer
 * last showed progress (or since the save began), the writer and its bytes
 * so far; false outside a save. */
bool comm_world_save_stall(double *seconds, int *writer, uint64_t *bytes);
/* In a save, on a rank that is not the writer (its waits are the save's). */
bool comm_world_in_save_wait(void);
/* "10 s", "15 min", "1.5 h" */
void comm_fmt_seconds(double s, char *out, size_t cap);

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
