/* The host backend's collectives: each runs as a host function on the
 * stream's worker thread, in stream order, exchanging chunks with the other
 * ranks through MPI point-to-point messages (the world's message engine,
 * bounded by its timeout) on a communicator of its own.
 *
 * Sums are taken in rank order, in fp32: for each element, rank 0's value,
 * plus rank 1's, plus rank 2's, ..., each addition rounded to fp32 (bf16
 * and fp16 are widened first and the sum rounded back once). That is the
 * order in which one process adds its micro-batches' gradients, so N ranks
 * with one micro-batch each give the same bits as one process with N, at
 * every N; and every rank gets the same bits, because each chunk is summed
 * by one rank and sent to the others. Large operations go in chunks of
 * COMM_HOST_CHUNK elements per rank, so temporaries stay bounded.
 *
 * Each collective is written in the ledger when it is issued (on the
 * caller's thread, in program order), and named by its entry in messages;
 * its exchanges are watched by the watchdog as they run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "backend/comm_impl.h"

#define COMM_HOST_CHUNK ((size_t)1 << 22)

ferry_status comm_host_open(backend_comm *c)
{
    snprintf(c->transport, sizeof c->transport, "MPI");
    if (c->size == 1) {
        c->impl = NULL; /* alone: every collective is a local copy */
        return FERRY_OK;
    }
    return comm_mpi_dup(&c->impl);
}

void comm_host_close(backend_comm *c)
{
    comm_mpi_free(c->impl, comm_world_failed());
    c->impl = NULL;
}

typedef struct coll_args {
    backend_comm *c;
    const char *send;
    char *recv;
    size_t count;
    ferry_dtype t;
    char what[200];
} coll_args;

/* out[i] = sum over ranks p in order of part(p)[i], n elements, where rank
 * `me`'s part is `mine` and the others' are consecutive in `others`. `out`
 * may be `mine` (each element is read before it is written). */
static void sum_in_rank_order(char *out, const char *mine, const char *others, int nranks, int me, size_t n,
                              ferry_dtype t)
{
    size_t es = dtype_size(t);
    for (size_t i = 0; i < n; i++) {
        float acc = 0;
        for (int p = 0, slot = 0; p < nranks; p++) {
            const char *src = p == me ? mine : others + (size_t)slot++ * n * es;
            float x = dtype_load_f32(src, t, i);
            acc = p == 0 ? x : acc + x;
        }
        dtype_store_f32(out, t, i, acc);
    }
}

/* Rank p's piece of `count` elements split in nranks nearly equal pieces. */
static void piece(size_t count, int nranks, int p, size_t *at, size_t *n)
{
    size_t lo = count * (size_t)p / (size_t)nranks, hi = count * (size_t)(p + 1) / (size_t)nranks;
    *at = lo;
    *n = hi - lo;
}

/* Each rank sends part p of `send` (part_n[p] elements at part_at[p]) to
 * rank p, and sums the contributions it receives for its own part into
 * `out` (part_n[rank] elements). */
static ferry_status reduce_parts(backend_comm *c, const char *send, const size_t *part_at, const size_t *part_n,
                                 char *out, ferry_dtype t, const char *what)
{
    int N = c->size, me = c->rank;
    size_t es = dtype_size(t), n = part_n[me];
    char *tmp = malloc((size_t)(N - 1) * n * es + 1);
    comm_xfer *x = malloc((size_t)(2 * N) * sizeof *x);
    if (!tmp || !x) {
        free(tmp);
        free(x);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory for %zu elements from each rank", what, n);
    }
    int k = 0;
    for (int p = 0, slot = 0; p < N; p++) {
        if (p == me)
            continue;
        x[k++] = (comm_xfer){tmp + (size_t)slot++ * n * es, n * es, p, false};
        x[k++] = (comm_xfer){(void *)(send + part_at[p] * es), part_n[p] * es, p, true};
    }
    ferry_status st = comm_mpi_exchange(c->impl, x, k, what);
    if (st == FERRY_OK)
        sum_in_rank_order(out, send + part_at[me] * es, tmp, N, me, n, t);
    free(tmp);
    free(x);
    return st;
}

/* Sends `mine` (n elements) to every rank and receives rank p's into
 * out + out_at(p). */
static ferry_status gather_parts(backend_comm *c, const char *mine, char *out, const size_t *out_at,
                                 const size_t *out_n, ferry_dtype t, const char *what)
{
    int N = c->size, me = c->rank;
    size_t es = dtype_size(t);
    comm_xfer *x = malloc((size_t)(2 * N) * sizeof *x);
    if (!x)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    int k = 0;
    for (int p = 0; p < N; p++) {
        if (p == me)
            continue;
        x[k++] = (comm_xfer){out + out_at[p] * es, out_n[p] * es, p, false};
        x[k++] = (comm_xfer){(void *)mine, out_n[me] * es, p, true};
    }
    ferry_status st = comm_mpi_exchange(c->impl, x, k, what);
    free(x);
    return st;
}

/* recv[count] = sum over ranks of their send[rank * count + ...]. */
static ferry_status reduce_scatter_run(void *p)
{
    coll_args *a = p;
    backend_comm *c = a->c;
    size_t es = dtype_size(a->t);
    if (c->size == 1) {
        sum_in_rank_order(a->recv, a->send, NULL, 1, 0, a->count, a->t);
        return FERRY_OK;
    }
    size_t *at = malloc((size_t)c->size * sizeof *at), *n = malloc((size_t)c->size * sizeof *n);
    ferry_status st = at && n ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", a->what);
    for (size_t o = 0; o < a->count && st == FERRY_OK; o += COMM_HOST_CHUNK) {
        size_t len = a->count - o < COMM_HOST_CHUNK ? a->count - o : COMM_HOST_CHUNK;
        for (int q = 0; q < c->size; q++) {
            at[q] = (size_t)q * a->count + o;
            n[q] = len;
        }
        st = reduce_parts(c, a->send, at, n, a->recv + o * es, a->t, a->what);
    }
    free(at);
    free(n);
    return st;
}

/* recv[p * count ...] = rank p's send[count]; send may be recv + rank * count. */
static ferry_status all_gather_run(void *p)
{
    coll_args *a = p;
    backend_comm *c = a->c;
    size_t es = dtype_size(a->t), N = (size_t)c->size;
    char *own = a->recv + (size_t)c->rank * a->count * es;
    if (own != a->send)
        memmove(own, a->send, a->count * es);
    if (c->size == 1)
        return FERRY_OK;
    size_t *at = malloc(N * sizeof *at), *n = malloc(N * sizeof *n);
    ferry_status st = at && n ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", a->what);
    for (size_t o = 0; o < a->count && st == FERRY_OK; o += COMM_HOST_CHUNK) {
        size_t len = a->count - o < COMM_HOST_CHUNK ? a->count - o : COMM_HOST_CHUNK;
        for (size_t q = 0; q < N; q++) {
            at[q] = q * a->count + o;
            n[q] = len;
        }
        st = gather_parts(c, own + o * es, a->recv, at, n, a->t, a->what);
    }
    free(at);
    free(n);
    return st;
}

/* recv[count] = the sum over ranks of send[count]: a reduce-scatter of
 * nearly equal pieces, each summed by its rank, then an all-gather of the
 * pieces, chunk by chunk. */
static ferry_status all_reduce_run(void *p)
{
    coll_args *a = p;
    backend_comm *c = a->c;
    size_t es = dtype_size(a->t), N = (size_t)c->size;
    if (c->size == 1) {
        sum_in_rank_order(a->recv, a->send, NULL, 1, 0, a->count, a->t);
        return FERRY_OK;
    }
    size_t *at = malloc(N * sizeof *at), *n = malloc(N * sizeof *n);
    ferry_status st = at && n ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", a->what);
    size_t chunk = COMM_HOST_CHUNK * N;
    for (size_t o = 0; o < a->count && st == FERRY_OK; o += chunk) {
        size_t len = a->count - o < chunk ? a->count - o : chunk;
        for (int q = 0; q < c->size; q++) {
            piece(len, c->size, q, &at[q], &n[q]);
            at[q] += o;
        }
        /* The rank's piece is summed into recv (send may be recv: each element
         * is read before it is written), then every piece goes everywhere. */
        char *mine = a->recv + at[c->rank] * es;
        st = reduce_parts(c, a->send, at, n, mine, a->t, a->what);
        if (st == FERRY_OK)
            st = gather_parts(c, mine, a->recv, at, n, a->t, a->what);
    }
    free(at);
    free(n);
    return st;
}

static ferry_status launch(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                           ferry_dtype t, backend_host_fn fn, comm_op op)
{
    coll_args a = {c, send, recv, count, t, ""};
    comm_entry e = comm_ledger_write(c->name, op, c->tagged ? c->tag : -1, count, t, -1);
    comm_entry_describe(&e, a.what, sizeof a.what);
    return backend_launch_host(s, fn, &a, sizeof a);
}

ferry_status comm_host_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv,
                                      size_t count, ferry_dtype t)
{
    return launch(s, c, send, recv, count, t, reduce_scatter_run, COMM_OP_REDUCE_SCATTER);
}

ferry_status comm_host_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    return launch(s, c, send, recv, count, t, all_gather_run, COMM_OP_ALL_GATHER);
}

ferry_status comm_host_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                  ferry_dtype t)
{
    return launch(s, c, send, recv, count, t, all_reduce_run, COMM_OP_ALL_REDUCE);
}
