/* The world of ranks, one per process: what the launcher's environment says
 * (Open MPI, Slurm, MPICH), joining it through MPI, the control plane (small
 * blocking collectives of the calling thread), the failure channel, and the
 * message engine every MPI wait goes through — bounded by the timeout and
 * ended early when another rank reports a failure. Owns MPI's lifetime in
 * the process (when ferry started it) and the world's communicators. Does
 * not own the backend communicators (comm_host.c, comm_nccl.c).
 *
 * Without MPI in the build, a world of one rank works as everywhere else
 * and a launched world is refused with a sentence on how to get MPI. */
#include "backend/comm_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/sized.h"

#ifdef FERRY_HAVE_MPI
#include <mpi.h>
#endif

#define COMM_DEFAULT_TIMEOUT_S 600.0
#define COMM_ABORT_GRACE_S 5.0
#define COMM_PIECE_BYTES ((size_t)1 << 30) /* MPI counts are int: messages go in pieces */

#define COMM_POOL 8 /* communicators made at join, so opening one never blocks */

enum { TAG_DATA = 11, TAG_ABORT = 12, TAG_ACK = 13 };

static struct {
    pthread_mutex_t lock;    /* guards the failure state */
    bool joined, mpi, we_started_mpi, left;
    ferry_world_info info;   /* as joined (or probed, before) */
    double timeout_s;
    bool failed, failed_by_peer;
    char failure[ERR_MESSAGE_MAX];
#ifdef FERRY_HAVE_MPI
    MPI_Comm ctl;            /* the control plane: one thread, program order */
    MPI_Comm abort_comm;     /* failure messages and their acknowledgements only */
    char abort_message[ERR_MESSAGE_MAX];
    MPI_Comm pool[COMM_POOL]; /* for backend communicators, handed out in order */
    bool pool_used[COMM_POOL];
#endif
} W = {PTHREAD_MUTEX_INITIALIZER, .info = FERRY_WORLD_INFO_INIT, .timeout_s = 0};

double comm_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- the launcher's environment ---- */

/* An integer environment variable: 1 found, 0 absent, -1 malformed (message set). */
static int env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 0 || x > 1 << 24) {
        err_set(FERRY_ERR_INVALID_ARGUMENT, "the launcher's environment has %s='%s', which is not a rank or a "
                                            "count; start the program with mpirun or srun, or unset it",
                name, v);
        return -1;
    }
    *out = (int)x;
    return 1;
}

/* Slurm's SLURM_STEP_TASKS_PER_NODE ("2(x3),1": 2 tasks on each of 3 nodes,
 * then 1) at node `node`; -1 when it cannot be read. */
static int slurm_tasks_on_node(const char *spec, int node)
{
    const char *p = spec;
    while (p && *p) {
        char *end;
        long n = strtol(p, &end, 10), reps = 1;
        if (end == p || n < 0)
            return -1;
        if (end[0] == '(' && end[1] == 'x') {
            reps = strtol(end + 2, &end, 10);
            if (*end != ')' || reps < 1)
                return -1;
            end++;
        }
        if (node < reps)
            return (int)n;
        node -= (int)reps;
        p = *end == ',' ? end + 1 : NULL;
    }
    return -1;
}

/* Fills rank, size and local rank from one launcher's variables; 1 when
 * this launcher started the process, 0 when not, -1 on a malformed value. */
static int probe_launcher(ferry_world_info *w, const char *name, const char *rank, const char *size,
                          const char *local, const char *local_size)
{
    int r = 0, n = 1, l = 0, ls = -1;
    int has_rank = env_int(rank, &r), has_size = env_int(size, &n);
    if (has_rank < 0 || has_size < 0)
        return -1;
    if (!has_rank || !has_size)
        return 0;
    if (n < 1 || r >= n) {
        err_set(FERRY_ERR_INVALID_ARGUMENT, "the launcher's environment says rank %d of %d (%s, %s); a rank is "
                                            "below the world size",
                r, n, rank, size);
        return -1;
    }
    if (env_int(local, &l) < 0 || (local_size && env_int(local_size, &ls) < 0))
        return -1;
    w->rank = r;
    w->world_size = n;
    w->local_rank = l;
    w->local_size = ls;
    snprintf(w->launcher, sizeof w->launcher, "%s", name);
    return 1;
}

static ferry_status probe_env(ferry_world_info *w)
{
    ferry_world_info fresh = FERRY_WORLD_INFO_INIT;
    *w = fresh;
#ifdef FERRY_HAVE_MPI
    w->mpi_compiled = 1;
#endif
#ifdef FERRY_HAVE_NCCL
    w->nccl_compiled = 1;
#endif
    int found = probe_launcher(w, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                               "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
    /* srun sets SLURM_STEP_NUM_TASKS for the tasks of a job step; a batch
     * script has SLURM_NTASKS and SLURM_PROCID too, but is one process. */
    if (found == 0 && (found = probe_launcher(w, "srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
                                              NULL)) == 1) {
        int node = 0;
        const char *per_node = getenv("SLURM_STEP_TASKS_PER_NODE");
        if (per_node && env_int("SLURM_NODEID", &node) >= 0)
            w->local_size = slurm_tasks_on_node(per_node, node);
    }
    if (found == 0)
        found = probe_launcher(w, "mpi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    if (found < 0)
        return FERRY_ERR_INVALID_ARGUMENT;
    if (found == 0)
        w->local_size = 1;
    return FERRY_OK;
}

ferry_status comm_world_probe(ferry_world_info *out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_world_probe: info is NULL");
    if (W.joined) {
        *out = W.info;
        return FERRY_OK;
    }
    return probe_env(out);
}

bool comm_world_joined(void) { return W.joined; }
int comm_world_rank(void) { return W.joined ? W.info.rank : 0; }
int comm_world_size(void) { return W.joined ? W.info.world_size : 1; }
int comm_world_local_rank(void) { return W.joined ? W.info.local_rank : 0; }
int comm_world_local_size(void) { return W.joined && W.info.local_size > 0 ? W.info.local_size : 1; }

void comm_world_set_timeout(double seconds)
{
    if (seconds > 0)
        W.timeout_s = seconds;
}

double comm_world_timeout(void)
{
    if (W.timeout_s > 0)
        return W.timeout_s;
    const char *v = getenv("FERRY_COMM_TIMEOUT");
    char *end = NULL;
    double t = v ? strtod(v, &end) : 0;
    return v && end != v && !*end && t > 0 ? t : COMM_DEFAULT_TIMEOUT_S;
}

/* ---- failures ---- */

bool comm_world_failed(void)
{
    pthread_mutex_lock(&W.lock);
    bool f = W.failed;
    pthread_mutex_unlock(&W.lock);
    return f;
}

/* Records the first failure; later ones keep it. Returns true if this one
 * was the first. */
static bool record_failure(const char *message, bool by_peer)
{
    pthread_mutex_lock(&W.lock);
    bool first = !W.failed;
    if (first) {
        W.failed = true;
        W.failed_by_peer = by_peer;
        snprintf(W.failure, sizeof W.failure, "%s", message);
    }
    pthread_mutex_unlock(&W.lock);
    return first;
}

static ferry_status failure_status(void)
{
    pthread_mutex_lock(&W.lock);
    char message[ERR_MESSAGE_MAX];
    memcpy(message, W.failure, sizeof message);
    pthread_mutex_unlock(&W.lock);
    return err_set(FERRY_ERR_BACKEND, "%s", message);
}

#ifdef FERRY_HAVE_MPI
static void mpi_text(int rc, char *out, size_t cap)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(out, cap, "%s", s);
}

/* A failure message from another rank, if one has arrived. */
static void poll_abort(void)
{
    if (!W.mpi)
        return;
    int flag = 0;
    MPI_Message m;
    MPI_Status s;
    if (MPI_Improbe(MPI_ANY_SOURCE, TAG_ABORT, W.abort_comm, &flag, &m, &s) != MPI_SUCCESS || !flag)
        return;
    int n = 0;
    MPI_Get_count(&s, MPI_CHAR, &n);
    char *text = calloc((size_t)n + 1, 1);
    char line[ERR_MESSAGE_MAX];
    if (text && MPI_Mrecv(text, n, MPI_CHAR, &m, MPI_STATUS_IGNORE) == MPI_SUCCESS)
        snprintf(line, sizeof line, "rank %d failed: %s", s.MPI_SOURCE, text);
    else
        snprintf(line, sizeof line, "rank %d failed (its message could not be read)", s.MPI_SOURCE);
    free(text);
    if (record_failure(line, true)) { /* the sender waits for this before it ends */
        static int ack;
        MPI_Request r;
        if (MPI_Isend(&ack, 0, MPI_INT, s.MPI_SOURCE, TAG_ACK, W.abort_comm, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

/* Sends this rank's failure to every other rank and waits, a few seconds
 * at most, until each has acknowledged it: a rank that ends at once could
 * have the launcher stop the others before they say why. */
static void tell_others(const char *message)
{
    int n = W.info.world_size, me = W.info.rank, k = 0;
    static int acks[1024];
    snprintf(W.abort_message, sizeof W.abort_message, "%s", message);
    MPI_Request *req = calloc((size_t)(2 * n), sizeof *req);
    if (!req)
        return;
    for (int p = 0; p < n; p++) {
        if (p == me)
            continue;
        if (MPI_Isend(W.abort_message, (int)strlen(W.abort_message) + 1, MPI_CHAR, p, TAG_ABORT, W.abort_comm,
                      &req[k]) == MPI_SUCCESS)
            k++;
        if (MPI_Irecv(&acks[p % 1024], 0, MPI_INT, p, TAG_ACK, W.abort_comm, &req[k]) == MPI_SUCCESS)
            k++;
    }
    double t0 = comm_now_s();
    int done = 0;
    while (!done && comm_now_s() - t0 < COMM_ABORT_GRACE_S) {
        if (MPI_Testall(k, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            break;
        if (!done)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    for (int i = 0; !done && i < k; i++)
        if (req[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&req[i]);
            MPI_Request_free(&req[i]);
        }
    free(req);
}
#endif

ferry_status comm_world_check(void)
{
#ifdef FERRY_HAVE_MPI
    if (!comm_world_failed())
        poll_abort();
#endif
    return comm_world_failed() ? failure_status() : FERRY_OK;
}

void comm_world_abort(const char *message)
{
    if (!W.mpi || W.info.world_size < 2)
        return; /* alone: nobody to tell, and nothing waits */
    char line[ERR_MESSAGE_MAX];
    snprintf(line, sizeof line, "%s", message && *message ? message : "(no message)");
    if (!record_failure(line, false))
        return; /* already failed: a peer's failure is not sent back, ours went out then */
#ifdef FERRY_HAVE_MPI
    tell_others(line);
#endif
}

ferry_status comm_world_fail(const char *fmt, ...)
{
    char line[ERR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!record_failure(line, false))
        return failure_status();
#ifdef FERRY_HAVE_MPI
    if (W.mpi && W.info.world_size > 1)
        tell_others(line);
#endif
    return failure_status();
}

/* ---- joining ---- */

#ifdef FERRY_HAVE_MPI
static void leave_at_exit(void) { (void)comm_world_leave(); }

static ferry_status mpi_fail(int rc, const char *what)
{
    char text[256];
    mpi_text(rc, text, sizeof text);
    return err_set(FERRY_ERR_BACKEND, "joining the world: %s failed: %s", what, text);
}

static ferry_status join_mpi(const ferry_world_info *env)
{
    int started = 0, provided = 0, rc;
    MPI_Initialized(&started);
    if (!started) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Init_thread");
        W.we_started_mpi = true;
    } else {
        MPI_Query_thread(&provided);
    }
    W.mpi = true;
    if (provided < MPI_THREAD_MULTIPLE)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "joining the world: this MPI gives thread level %d, ferry needs MPI_THREAD_MULTIPLE (%d): "
                       "its streams and its main thread communicate at once; use an MPI built with thread "
                       "support (Open MPI 3 or newer has it)",
                       provided, MPI_THREAD_MULTIPLE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != env->world_size || rank != env->rank)
        return err_set(FERRY_ERR_BACKEND,
                       "joining the world: the launcher (%s) started rank %d of %d, but MPI sees rank %d of %d: this "
                       "MPI cannot reach the launcher's ranks (under Slurm, srun --mpi=pmix; or start with this "
                       "MPI's own mpirun)",
                       env->launcher, env->rank, env->world_size, rank, size);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &W.ctl)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &W.abort_comm)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_dup");
    for (int i = 0; i < COMM_POOL; i++)
        if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &W.pool[i])) != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Comm_dup");
    MPI_Comm local;
    int lr = env->local_rank, ls = env->local_size;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &lr);
        MPI_Comm_size(local, &ls);
        MPI_Comm_free(&local);
    }
    W.info.local_rank = lr;
    W.info.local_size = ls;
    atexit(leave_at_exit);
    return FERRY_OK;
}
#endif

ferry_status comm_world_join(ferry_world_info *out)
{
    ferry_status st = FERRY_OK;
    if (!W.joined) {
        ferry_world_info env;
        if ((st = probe_env(&env)) != FERRY_OK)
            return st;
        W.info = env;
        if (env.world_size > 1) {
#ifdef FERRY_HAVE_MPI
            st = join_mpi(&env);
#else
            st = err_set(FERRY_ERR_UNSUPPORTED,
                         "the launcher (%s) started %d ranks, but this ferry was built without MPI and cannot join "
                         "them: install Open MPI (libopenmpi-dev) and rebuild with -Dmpi=enabled, or start a "
                         "single process",
                         env.launcher, env.world_size);
#endif
            if (st != FERRY_OK) {
                W.info.world_size = 1; /* nothing was joined */
                W.info.rank = 0;
                return st;
            }
        }
        W.info.joined = 1;
        W.joined = true;
    }
    if (out)
        *out = W.info;
    return st;
}

ferry_status comm_world_leave(void)
{
    if (!W.joined || W.left)
        return comm_world_failed() ? failure_status() : FERRY_OK;
    W.left = true;
    if (comm_world_failed())
        return failure_status(); /* MPI_Finalize would wait for the ranks that failed */
#ifdef FERRY_HAVE_MPI
    if (W.mpi) {
        MPI_Comm_free(&W.ctl);
        MPI_Comm_free(&W.abort_comm);
        for (int i = 0; i < COMM_POOL; i++)
            MPI_Comm_free(&W.pool[i]);
        if (W.we_started_mpi)
            MPI_Finalize();
    }
#endif
    return FERRY_OK;
}

/* ---- the message engine ---- */

#ifdef FERRY_HAVE_MPI
/* Every rank opens and closes its communicators in the same order, so the
 * first free one of the pool is the same on every rank. */
ferry_status comm_mpi_dup(void **out)
{
    *out = NULL;
    if (!W.mpi)
        return err_set(FERRY_ERR_STATE, "a communicator of several ranks before the world was joined");
    pthread_mutex_lock(&W.lock);
    for (int i = 0; i < COMM_POOL && !*out; i++)
        if (!W.pool_used[i]) {
            W.pool_used[i] = true;
            *out = &W.pool[i];
        }
    pthread_mutex_unlock(&W.lock);
    if (!*out)
        return err_set(FERRY_ERR_STATE, "more than %d communicators open at once: close an engine first", COMM_POOL);
    return FERRY_OK;
}

void comm_mpi_free(void *comm, bool abandon)
{
    (void)abandon; /* the pool's communicators live until the world is left */
    pthread_mutex_lock(&W.lock);
    for (int i = 0; i < COMM_POOL; i++)
        if (comm == &W.pool[i])
            W.pool_used[i] = false;
    pthread_mutex_unlock(&W.lock);
}

/* The peers of the requests still open, as "1, 3" */
static void open_peers(const MPI_Request *r, const int *peer, int n, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    int last = -1;
    for (int i = 0; i < n && at + 16 < cap; i++)
        if (r[i] != MPI_REQUEST_NULL && peer[i] != last) {
            at += (size_t)snprintf(out + at, cap - at, "%s%d", at ? ", " : "", peer[i]);
            last = peer[i];
        }
}

/* After a failure: receives still open must not land in memory the caller
 * frees; cancel them, and let sends go. */
static void abandon_requests(MPI_Request *r, int n, const bool *is_recv)
{
    for (int i = 0; i < n; i++) {
        if (r[i] == MPI_REQUEST_NULL)
            continue;
        if (is_recv[i])
            MPI_Cancel(&r[i]);
        MPI_Request_free(&r[i]);
    }
}

/* Waits for every request: bounded by the timeout, ended by another rank's
 * failure. */
static ferry_status wait_requests(MPI_Request *r, const int *peer, const bool *is_recv, int n, const char *what)
{
    double t0 = comm_now_s(), timeout = comm_world_timeout();
    long nap_ns = 20000;
    int open = n, *done = malloc((size_t)(n > 0 ? n : 1) * sizeof *done);
    if (!done)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    ferry_status st = FERRY_OK;
    for (;;) {
        int k = 0;
        int rc = open > 0 ? MPI_Testsome(n, r, &k, done, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
        if (rc != MPI_SUCCESS) {
            char text[256];
            mpi_text(rc, text, sizeof text);
            st = comm_world_fail("%s: MPI failed: %s", what, text);
            break;
        }
        if (k != MPI_UNDEFINED)
            open -= k;
        if (open == 0)
            break;
        poll_abort();
        if (comm_world_failed()) {
            st = failure_status();
            break;
        }
        double waited = comm_now_s() - t0;
        if (waited > timeout) {
            char peers[256];
            open_peers(r, peer, n, peers, sizeof peers);
            st = comm_world_fail("%s waited %.0f s for rank%s %s without an answer: a rank died, hangs, or runs "
                                 "another schedule (set FERRY_COMM_TIMEOUT to wait longer)",
                                 what, waited, strchr(peers, ',') ? "s" : "", peers);
            break;
        }
        nanosleep(&(struct timespec){0, nap_ns}, NULL);
        if (nap_ns < 1000000)
            nap_ns *= 2;
    }
    if (st != FERRY_OK)
        abandon_requests(r, n, is_recv);
    free(done);
    return st;
}

ferry_status comm_mpi_exchange(void *comm, comm_xfer *x, int n, const char *what)
{
    if (comm_world_failed())
        return failure_status();
    MPI_Comm c = *(MPI_Comm *)comm;
    int pieces = 0;
    for (int i = 0; i < n; i++)
        pieces += x[i].bytes ? (int)((x[i].bytes + COMM_PIECE_BYTES - 1) / COMM_PIECE_BYTES) : 1;
    MPI_Request *r = malloc((size_t)(pieces ? pieces : 1) * sizeof *r);
    int *peer = malloc((size_t)(pieces ? pieces : 1) * sizeof *peer);
    bool *is_recv = malloc((size_t)(pieces ? pieces : 1) * sizeof *is_recv);
    ferry_status st = r && peer && is_recv ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    int k = 0;
    /* Receives first, so that no send waits on a receive not yet posted. */
    for (int pass = 0; pass < 2 && st == FERRY_OK; pass++)
        for (int i = 0; i < n && st == FERRY_OK; i++) {
            if (x[i].send != (pass == 1))
                continue;
            size_t at = 0;
            do {
                size_t len = x[i].bytes - at < COMM_PIECE_BYTES ? x[i].bytes - at : COMM_PIECE_BYTES;
                char *p = (char *)x[i].buf + at;
                int rc = x[i].send ? MPI_Isend(p, (int)len, MPI_BYTE, x[i].peer, TAG_DATA, c, &r[k])
                                   : MPI_Irecv(p, (int)len, MPI_BYTE, x[i].peer, TAG_DATA, c, &r[k]);
                if (rc != MPI_SUCCESS) {
                    char text[256];
                    mpi_text(rc, text, sizeof text);
                    abandon_requests(r, k, is_recv);
                    st = comm_world_fail("%s: posting a message to rank %d failed: %s", what, x[i].peer, text);
                    break;
                }
                peer[k] = x[i].peer;
                is_recv[k++] = !x[i].send;
                at += len;
            } while (at < x[i].bytes);
        }
    if (st == FERRY_OK)
        st = wait_requests(r, peer, is_recv, k, what);
    free(r);
    free(peer);
    free(is_recv);
    return st;
}
#else
ferry_status comm_mpi_dup(void **out)
{
    *out = NULL;
    return err_set(FERRY_ERR_UNSUPPORTED, "this ferry was built without MPI: rebuild with -Dmpi=enabled");
}

void comm_mpi_free(void *comm, bool abandon)
{
    (void)comm;
    (void)abandon;
}

ferry_status comm_mpi_exchange(void *comm, comm_xfer *x, int n, const char *what)
{
    (void)comm;
    (void)x;
    return n == 0 ? FERRY_OK
                  : err_set(FERRY_ERR_UNSUPPORTED, "%s: this ferry was built without MPI: rebuild with -Dmpi=enabled",
                            what);
}
#endif

/* ---- the control plane ---- */

static void *ctl_comm(void)
{
#ifdef FERRY_HAVE_MPI
    return &W.ctl;
#else
    return NULL;
#endif
}

static ferry_status ctl_ready(const char *what)
{
    if (comm_world_failed())
        return failure_status();
    if (!W.joined && W.info.world_size > 1)
        return err_set(FERRY_ERR_STATE, "%s: join the world first (ferry_world_join)", what);
    return FERRY_OK;
}

ferry_status comm_world_all_reduce_f64(double *values, size_t count)
{
    ferry_status st = ctl_ready("an all-reduce of the ranks' figures");
    int n = comm_world_size(), me = comm_world_rank();
    if (st != FERRY_OK || n == 1 || count == 0)
        return st;
    double *all = malloc((size_t)n * count * sizeof *all);
    comm_xfer *x = malloc((size_t)(2 * n) * sizeof *x);
    if (!all || !x) {
        free(all);
        free(x);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "an all-reduce of %zu figures: out of host memory", count);
    }
    int k = 0;
    for (int p = 0; p < n; p++) {
        if (p == me)
            continue;
        x[k++] = (comm_xfer){all + (size_t)p * count, count * sizeof *all, p, false};
        x[k++] = (comm_xfer){values, count * sizeof *values, p, true};
    }
    st = comm_mpi_exchange(ctl_comm(), x, k, "an all-reduce of the ranks' figures");
    memcpy(all + (size_t)me * count, values, count * sizeof *values);
    for (size_t i = 0; st == FERRY_OK && i < count; i++) {
        double s = all[i];
        for (int p = 1; p < n; p++)
            s += all[(size_t)p * count + i];
        values[i] = s;
    }
    free(all);
    free(x);
    return st;
}

ferry_status comm_world_broadcast(void *buf, size_t bytes, int root)
{
    ferry_status st = ctl_ready("a broadcast");
    int n = comm_world_size(), me = comm_world_rank();
    if (st != FERRY_OK || n == 1)
        return st;
    if (root < 0 || root >= n)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "a broadcast from rank %d in a world of %d", root, n);
    comm_xfer *x = malloc((size_t)n * sizeof *x);
    if (!x)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "a broadcast: out of host memory");
    int k = 0;
    if (me == root) {
        for (int p = 0; p < n; p++)
            if (p != me)
                x[k++] = (comm_xfer){buf, bytes, p, true};
    } else {
        x[k++] = (comm_xfer){buf, bytes, root, false};
    }
    st = comm_mpi_exchange(ctl_comm(), x, k, "a broadcast from rank 0");
    free(x);
    return st;
}

ferry_status comm_world_all_gather_v(const void *mine, void *out, const size_t *at, const size_t *bytes)
{
    ferry_status st = ctl_ready("an all-gather of the ranks' figures");
    int n = comm_world_size(), me = comm_world_rank();
    if (st != FERRY_OK)
        return st;
    memmove((char *)out + at[me], mine, bytes[me]);
    if (n == 1)
        return FERRY_OK;
    comm_xfer *x = malloc((size_t)(2 * n) * sizeof *x);
    if (!x)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "an all-gather of the ranks' figures: out of host memory");
    int k = 0;
    for (int p = 0; p < n; p++) {
        if (p == me)
            continue;
        x[k++] = (comm_xfer){(char *)out + at[p], bytes[p], p, false};
        x[k++] = (comm_xfer){(void *)((char *)out + at[me]), bytes[me], p, true};
    }
    st = comm_mpi_exchange(ctl_comm(), x, k, "an all-gather of the ranks' figures");
    free(x);
    return st;
}

ferry_status comm_world_barrier(void)
{
    double one = 1;
    return comm_world_all_reduce_f64(&one, 1);
}

ferry_status comm_world_send(int to, const void *buf, size_t bytes)
{
    ferry_status st = ctl_ready("a send");
    if (st != FERRY_OK)
        return st;
    if (to < 0 || to >= comm_world_size() || to == comm_world_rank())
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "a send to rank %d from rank %d of %d", to, comm_world_rank(),
                       comm_world_size());
    comm_xfer x = {(void *)buf, bytes, to, true};
    return comm_mpi_exchange(ctl_comm(), &x, 1, "a send of checkpoint state");
}

ferry_status comm_world_recv(int from, void *buf, size_t bytes)
{
    ferry_status st = ctl_ready("a receive");
    if (st != FERRY_OK)
        return st;
    if (from < 0 || from >= comm_world_size() || from == comm_world_rank())
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "a receive from rank %d on rank %d of %d", from,
                       comm_world_rank(), comm_world_size());
    comm_xfer x = {buf, bytes, from, false};
    return comm_mpi_exchange(ctl_comm(), &x, 1, "a receive of checkpoint state");
}

/* ---- the public face ---- */

ferry_status ferry_world_probe(ferry_world_info *info)
{
    if (!info)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_world_probe: info is NULL");
    ferry_world_info w;
    ferry_status st = comm_world_probe(&w);
    if (st != FERRY_OK)
        return st;
    return sized_write(info, &w, sizeof w, "ferry_world_info");
}

ferry_status ferry_world_join(ferry_world_info *info)
{
    ferry_world_info w;
    ferry_status st = comm_world_join(&w);
    if (st != FERRY_OK || !info)
        return st;
    return sized_write(info, &w, sizeof w, "ferry_world_info");
}

ferry_status ferry_world_all_reduce(double *values, size_t count)
{
    if (!values && count)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_world_all_reduce: values is NULL");
    return comm_world_all_reduce_f64(values, count);
}

ferry_status ferry_world_barrier(void) { return comm_world_barrier(); }
void ferry_world_abort(const char *message) { comm_world_abort(message); }
ferry_status ferry_world_leave(void) { return comm_world_leave(); }
