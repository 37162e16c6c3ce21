/* The world of ranks, one per process: what the launcher's environment says
 * (Open MPI, Slurm, MPICH), the rank's device, the timeouts, joining the
 * world through MPI, the control plane (small blocking collectives of the
 * calling thread, written in the ledger), the failure channel, the
 * heartbeats and a checkpoint writer's progress the watchdog's thread
 * pulses, and the message engine every MPI wait goes through: watched by
 * the watchdog (comm_watch.c) and ended as soon as the world fails. Owns
 * MPI's lifetime in the process (when ferry started it) and the world's
 * communicators. Does not own the backend communicators (comm_host.c,
 * comm_nccl.c).
 *
 * Without MPI in the build, a world of one rank works as everywhere else
 * and a launched world is refused with a sentence on how to get MPI. */
#include "backend/comm_impl.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#define COMM_DEFAULT_SAVE_TIMEOUT_S 1800.0
#define COMM_MAX_TIMEOUT_S (7.0 * 24 * 3600)
#define COMM_ABORT_GRACE_S 2.0 /* a live rank's watchdog answers a failure within a tick */
#define COMM_PROGRESS_EVERY_S 1.0 /* a writer's progress goes out at most this often */
#define COMM_PROGRESS_SLOTS 4
#define COMM_PIECE_BYTES ((size_t)1 << 30) /* MPI counts are int: messages go in pieces */

#define COMM_POOL 8 /* communicators made at join, so opening one never blocks */

enum { TAG_DATA = 11, TAG_ABORT = 12, TAG_ACK = 13, TAG_BEAT = 14, TAG_PROGRESS = 15 };

/* A heartbeat's word: alive, or leaving (the world ends: stop watching). */
enum { BEAT_ALIVE = 0, BEAT_LEAVING = 1 };

/* A checkpoint writer's progress, as sent. */
typedef struct save_note {
    uint64_t save, bytes;
} save_note;

static struct {
    pthread_mutex_t lock;    /* guards the failure state, the timeouts, the heartbeats and the save */
    bool joined, mpi, we_started_mpi, left;
    ferry_world_info info;   /* as joined (or probed, before) */
    double timeout_s;        /* set by comm_world_set_timeout; 0: the environment's */
    atomic_bool failed;
    bool failed_by_peer;
    char failure[ERR_MESSAGE_MAX];
    bool shared_devices;     /* joined: another rank of this machine has our CUDA_VISIBLE_DEVICES */
    /* The heartbeats (the watchdog's thread) */
    double beat_sent_s, heard_s;
    bool pred_left;
    /* A checkpoint save (comm_world_save_begin .. _end) */
    bool save_active;
    int save_writer;
    uint64_t save_seq, save_bytes;
    double save_progress_s, save_sent_s;
#ifdef FERRY_HAVE_MPI
    MPI_Comm ctl;            /* the control plane: one thread, program order */
    MPI_Comm abort_comm;     /* failure messages and their acknowledgements only */
    MPI_Comm watch_comm;     /* heartbeats and a writer's progress */
    char abort_message[ERR_MESSAGE_MAX];
    MPI_Comm pool[COMM_POOL]; /* for backend communicators, handed out in order */
    bool pool_used[COMM_POOL];
    MPI_Request *note_req[COMM_PROGRESS_SLOTS]; /* a note's sends to every rank, in flight */
    save_note notes[COMM_PROGRESS_SLOTS];
    int next_note;
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

/* The world as joined, else as the launcher's environment says (a
 * malformed one: alone). */
static ferry_world_info local_view(void)
{
    if (W.joined)
        return W.info;
    ferry_world_info w;
    if (probe_env(&w) != FERRY_OK) {
        err_clear();
        ferry_world_info alone = FERRY_WORLD_INFO_INIT;
        w = alone;
    }
    return w;
}

int comm_world_local_rank(void) { return local_view().local_rank; }

int comm_world_local_size(void)
{
    ferry_world_info w = local_view();
    return w.local_size > 0 ? w.local_size : 1;
}

ferry_status comm_world_device(int count, int *device)
{
    if (!device)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "comm_world_device: device is NULL");
    *device = 0;
    ferry_world_info w = local_view();
    int lr = w.local_rank, ls = w.local_size > 0 ? w.local_size : lr + 1;
    if (count < 1)
        return err_set(FERRY_ERR_UNSUPPORTED, "rank %d: this process sees no GPU", w.rank);
    if (ls <= count) {
        *device = lr;
        return FERRY_OK;
    }
    const char *share = getenv("FERRY_SHARE_GPUS"), *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (share && strcmp(share, "1") == 0) {
        *device = lr % count;
        return FERRY_OK;
    }
    if (count == 1 && visible && *visible && !W.shared_devices)
        return FERRY_OK; /* the launcher gave each rank its own device */
    if (count == 1 && visible && *visible)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "rank %d: CUDA_VISIBLE_DEVICES='%s' is the same for two ranks of this machine, so they "
                       "would share one GPU, each planning with all its memory: give each rank its own (as "
                       "Slurm's gpus-per-task option does), or set FERRY_SHARE_GPUS=1 to share it on purpose",
                       w.rank, visible);
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "rank %d is local rank %d of %d%s on this machine, which shows %d GPU%s: ranks would share a "
                   "GPU, each planning with all its memory; start at most %d rank%s per machine, give each rank "
                   "its own GPU (CUDA_VISIBLE_DEVICES per rank, as Slurm's gpus-per-task option sets it), or "
                   "set FERRY_SHARE_GPUS=1 to share on purpose",
                   w.rank, lr, ls, w.local_size > 0 ? "" : " or more", count, count == 1 ? "" : "s", count,
                   count == 1 ? "" : "s");
}

/* ---- timeouts ---- */

/* A duration in seconds: true, or false with why (a phrase) in `why`. */
static bool parse_duration(const char *text, double *seconds, char *why, size_t cap)
{
    if (!text || !*text) {
        snprintf(why, cap, "it is empty");
        return false;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v) || errno == ERANGE) {
        snprintf(why, cap, "it is not a number of seconds");
        return false;
    }
    double unit = 1;
    if (*end == 's')
        end++;
    else if (*end == 'm')
        unit = 60, end++;
    else if (*end == 'h')
        unit = 3600, end++;
    if (*end) {
        snprintf(why, cap, "'%s' is not a unit (s, m or h; a bare number is seconds)", end);
        return false;
    }
    v *= unit;
    if (!(v > 0)) {
        snprintf(why, cap, "a timeout must be above zero");
        return false;
    }
    if (v > COMM_MAX_TIMEOUT_S) {
        snprintf(why, cap, "it is longer than a week (168h), which no wait should be");
        return false;
    }
    *seconds = v;
    return true;
}

ferry_status comm_parse_timeout(const char *text, const char *what, double *seconds)
{
    char why[160];
    if (!seconds)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "comm_parse_timeout: seconds is NULL");
    if (parse_duration(text, seconds, why, sizeof why))
        return FERRY_OK;
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "%s='%s' is refused: %s; give seconds, or a number with a unit: 90, 20s, 15m, 1.5h",
                   what, text ? text : "", why);
}

/* The environment's value of `name`, or `fallback` when it is unset or
 * invalid (joining refuses an invalid one). */
static double env_timeout(const char *name, double fallback)
{
    const char *v = getenv(name);
    double t;
    char why[160];
    return v && *v && parse_duration(v, &t, why, sizeof why) ? t : fallback;
}

void comm_world_set_timeout(double seconds)
{
    if (seconds > 0) {
        pthread_mutex_lock(&W.lock);
        W.timeout_s = seconds;
        pthread_mutex_unlock(&W.lock);
    }
}

double comm_world_timeout(void)
{
    pthread_mutex_lock(&W.lock);
    double t = W.timeout_s;
    pthread_mutex_unlock(&W.lock);
    return t > 0 ? t : env_timeout("FERRY_COMM_TIMEOUT", COMM_DEFAULT_TIMEOUT_S);
}

double comm_world_save_timeout(void)
{
    double t = comm_world_timeout();
    return env_timeout("FERRY_COMM_SAVE_TIMEOUT", t > COMM_DEFAULT_SAVE_TIMEOUT_S ? t : COMM_DEFAULT_SAVE_TIMEOUT_S);
}

void comm_fmt_seconds(double s, char *out, size_t cap)
{
    if (s >= 3600 && fmod(s, 360) == 0)
        snprintf(out, cap, "%g h", s / 3600);
    else if (s >= 60 && fmod(s, 6) == 0)
        snprintf(out, cap, "%g min", s / 60);
    else
        snprintf(out, cap, "%g s", s);
}

/* Where a timeout in force comes from. */
static void timeout_source(const char *name, bool set_here, char *out, size_t cap)
{
    const char *v = getenv(name);
    if (set_here)
        snprintf(out, cap, "the engine's comm_timeout_s");
    else if (v && *v)
        snprintf(out, cap, "%s=%s", name, v);
    else
        snprintf(out, cap, "the default; %s sets it", name);
}

void comm_world_describe_timeouts(char *out, size_t cap)
{
    pthread_mutex_lock(&W.lock);
    bool set_here = W.timeout_s > 0;
    pthread_mutex_unlock(&W.lock);
    char t[32], st[32], ts[96], sts[96];
    comm_fmt_seconds(comm_world_timeout(), t, sizeof t);
    comm_fmt_seconds(comm_world_save_timeout(), st, sizeof st);
    timeout_source("FERRY_COMM_TIMEOUT", set_here, ts, sizeof ts);
    const char *sv = getenv("FERRY_COMM_SAVE_TIMEOUT");
    if (sv && *sv)
        snprintf(sts, sizeof sts, "FERRY_COMM_SAVE_TIMEOUT=%s", sv);
    else
        snprintf(sts, sizeof sts, "the default; FERRY_COMM_SAVE_TIMEOUT sets it");
    snprintf(out, cap, "collectives time out after %s (%s), checkpoint saves after %s without progress (%s)", t, ts,
             st, sts);
}

/* Joining refuses a timeout the environment gets wrong. */
static ferry_status check_env_timeouts(void)
{
    const char *names[] = {"FERRY_COMM_TIMEOUT", "FERRY_COMM_SAVE_TIMEOUT"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        double t;
        if (v && *v && comm_parse_timeout(v, names[i], &t) != FERRY_OK)
            return FERRY_ERR_INVALID_ARGUMENT;
    }
    return FERRY_OK;
}

/* ---- failures ---- */

bool comm_world_failed(void) { return atomic_load(&W.failed); }

/* Records the first failure; later ones keep it. Returns true if this one
 * was the first, which sets the watchdog on the failure's consequences
 * (NCCL's abort, the wakers). */
static bool record_failure(const char *message, bool by_peer)
{
    pthread_mutex_lock(&W.lock);
    bool first = !atomic_load(&W.failed);
    if (first) {
        W.failed_by_peer = by_peer;
        snprintf(W.failure, sizeof W.failure, "%s", message);
        atomic_store(&W.failed, true);
    }
    pthread_mutex_unlock(&W.lock);
    if (first)
        comm_watch_failed();
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
    char here[320];
    comm_watch_in_flight(here, sizeof here);
    if (here[0]) {
        size_t at = strlen(line);
        snprintf(line + at, sizeof line - at, " (rank %d was in %s)", W.info.rank, here);
    }
    record_failure(line, true);
    /* The sender waits for this before it ends; a rank that failed on its
     * own meanwhile answers too. */
    static const int ack = 0;
    MPI_Request r;
    if (MPI_Isend(&ack, 0, MPI_INT, s.MPI_SOURCE, TAG_ACK, W.abort_comm, &r) == MPI_SUCCESS)
        MPI_Request_free(&r);
}

/* Sends this rank's failure to every other rank and waits, a few seconds
 * at most, until each has acknowledged it: a rank that ends at once could
 * have the launcher stop the others before they say why. The previous
 * rank, when its heartbeat has stopped, is not waited for. */
static void tell_others(const char *message)
{
    int n = W.info.world_size, me = W.info.rank, k = 0, silent = -1;
    static int acks[1024];
    if (comm_world_silence(&silent) <= comm_world_timeout() / 2)
        silent = -1;
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
        if (p != silent && MPI_Irecv(&acks[p % 1024], 0, MPI_INT, p, TAG_ACK, W.abort_comm, &req[k]) == MPI_SUCCESS)
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

/* Records this rank's failure and, when `tell` and it is the first, tells
 * the other ranks. */
static ferry_status fail_here(bool tell, const char *fmt, va_list ap)
{
    char line[ERR_MESSAGE_MAX];
    vsnprintf(line, sizeof line, fmt, ap);
    bool first = record_failure(line, false);
#ifdef FERRY_HAVE_MPI
    if (first && tell && W.mpi && W.info.world_size > 1)
        tell_others(line);
#else
    (void)first, (void)tell;
#endif
    return failure_status();
}

ferry_status comm_world_fail_agreed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ferry_status st = fail_here(false, fmt, ap);
    va_end(ap);
    return st;
}

ferry_status comm_world_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ferry_status st = fail_here(true, fmt, ap);
    va_end(ap);
    return st;
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

/* Whether another rank of this machine (`local`, where this one is lr of
 * ls) was given the same non-empty CUDA_VISIBLE_DEVICES: then one device
 * each is not the launcher's doing. */
static bool same_devices_here(MPI_Comm local, int lr, int ls)
{
    enum { LIST = 128 };
    char mine[LIST] = "";
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(mine, sizeof mine, "%s", v ? v : "");
    char *all = calloc((size_t)ls, LIST);
    bool same = false;
    if (all && MPI_Allgather(mine, LIST, MPI_CHAR, all, LIST, MPI_CHAR, local) == MPI_SUCCESS)
        for (int p = 0; p < ls && mine[0]; p++)
            same |= p != lr && strncmp(all + (size_t)p * LIST, mine, LIST) == 0;
    free(all);
    return same;
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
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &W.abort_comm)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &W.watch_comm)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_dup");
    for (int i = 0; i < COMM_POOL; i++)
        if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &W.pool[i])) != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Comm_dup");
    for (int i = 0; i < COMM_PROGRESS_SLOTS; i++) {
        if (!(W.note_req[i] = malloc((size_t)size * sizeof(MPI_Request))))
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "joining the world: out of host memory");
        for (int p = 0; p < size; p++)
            W.note_req[i][p] = MPI_REQUEST_NULL;
    }
    MPI_Comm local;
    int lr = env->local_rank, ls = env->local_size;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &lr);
        MPI_Comm_size(local, &ls);
        W.shared_devices = same_devices_here(local, lr, ls);
        MPI_Comm_free(&local);
    }
    W.info.local_rank = lr;
    W.info.local_size = ls;
    W.heard_s = W.beat_sent_s = comm_now_s();
    atexit(leave_at_exit);
    return FERRY_OK;
}
#endif

ferry_status comm_world_join(ferry_world_info *out)
{
    ferry_status st = FERRY_OK;
    if (!W.joined) {
        ferry_world_info env;
        if ((st = probe_env(&env)) != FERRY_OK || (st = check_env_timeouts()) != FERRY_OK)
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
#ifdef FERRY_HAVE_MPI
            if (st == FERRY_OK && (st = comm_watch_start()) != FERRY_OK)
                W.mpi = false; /* MPI is left to the launcher */
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

#ifdef FERRY_HAVE_MPI
/* Tells the next rank this one is leaving (its watchdog stops watching),
 * then stops this rank's watchdog, and settles the messages still in
 * flight on the watchdog's communicator. */
static void stop_watching(void)
{
    int n = W.info.world_size;
    static const int leaving = BEAT_LEAVING;
    MPI_Request r = MPI_REQUEST_NULL;
    if (!comm_world_failed())
        MPI_Isend(&leaving, 1, MPI_INT, (W.info.rank + 1) % n, TAG_BEAT, W.watch_comm, &r);
    comm_watch_stop();
    double t0 = comm_now_s();
    int done = r == MPI_REQUEST_NULL;
    while (!done && comm_now_s() - t0 < COMM_ABORT_GRACE_S) {
        if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        if (!done)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (!done) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
    }
    for (int i = 0; i < COMM_PROGRESS_SLOTS; i++) {
        for (int p = 0; W.note_req[i] && p < n; p++)
            if (W.note_req[i][p] != MPI_REQUEST_NULL)
                MPI_Request_free(&W.note_req[i][p]);
        free(W.note_req[i]);
        W.note_req[i] = NULL;
    }
}
#endif

ferry_status comm_world_leave(void)
{
    if (!W.joined || W.left)
        return comm_world_failed() ? failure_status() : FERRY_OK;
    W.left = true;
#ifdef FERRY_HAVE_MPI
    if (W.mpi)
        stop_watching();
#endif
    if (comm_world_failed())
        return failure_status(); /* MPI_Finalize would wait for the ranks that failed */
#ifdef FERRY_HAVE_MPI
    if (W.mpi) {
        MPI_Comm_free(&W.ctl);
        MPI_Comm_free(&W.abort_comm);
        MPI_Comm_free(&W.watch_comm);
        for (int i = 0; i < COMM_POOL; i++)
            MPI_Comm_free(&W.pool[i]);
        if (W.we_started_mpi)
            MPI_Finalize();
    }
#endif
    return FERRY_OK;
}

/* ---- heartbeats and a writer's progress (the watchdog's thread) ---- */

#ifdef FERRY_HAVE_MPI
/* One message of the watchdog's communicator. */
static void take_note(MPI_Message *m, const MPI_Status *s, int pred, double now)
{
    if (s->MPI_TAG == TAG_BEAT) {
        int word = BEAT_ALIVE;
        MPI_Mrecv(&word, 1, MPI_INT, m, MPI_STATUS_IGNORE);
        if (s->MPI_SOURCE == pred) {
            pthread_mutex_lock(&W.lock);
            W.heard_s = now;
            W.pred_left |= word == BEAT_LEAVING;
            pthread_mutex_unlock(&W.lock);
        }
        return;
    }
    save_note note = {0, 0};
    MPI_Mrecv(&note, (int)sizeof note, MPI_BYTE, m, MPI_STATUS_IGNORE);
    pthread_mutex_lock(&W.lock);
    if (W.save_active && note.save == W.save_seq && s->MPI_SOURCE == W.save_writer) {
        W.save_progress_s = now;
        W.save_bytes = note.bytes;
    }
    pthread_mutex_unlock(&W.lock);
}
#endif

void comm_world_pulse(void)
{
#ifdef FERRY_HAVE_MPI
    if (!W.mpi || W.info.world_size < 2)
        return;
    poll_abort();
    int n = W.info.world_size, me = W.info.rank, pred = (me + n - 1) % n;
    double now = comm_now_s();
    static const int alive = BEAT_ALIVE;
    MPI_Request r;
    if (MPI_Isend(&alive, 1, MPI_INT, (me + 1) % n, TAG_BEAT, W.watch_comm, &r) == MPI_SUCCESS)
        MPI_Request_free(&r);
    for (;;) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, W.watch_comm, &flag, &m, &st) != MPI_SUCCESS || !flag)
            break;
        take_note(&m, &st, pred, now);
    }
    pthread_mutex_lock(&W.lock);
    W.beat_sent_s = now;
    pthread_mutex_unlock(&W.lock);
#endif
}

double comm_world_silence(int *peer)
{
    int n = W.info.world_size;
    if (peer)
        *peer = (W.info.rank + n - 1) % (n > 0 ? n : 1);
    if (!W.mpi || n < 2)
        return 0;
    pthread_mutex_lock(&W.lock);
    double s = W.pred_left ? 0 : comm_now_s() - W.heard_s;
    pthread_mutex_unlock(&W.lock);
    return s;
}

ferry_status comm_world_save_begin(int writer)
{
    int n = comm_world_size();
    if (writer < 0 || writer >= n)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "a checkpoint written by rank %d in a world of %d", writer, n);
    pthread_mutex_lock(&W.lock);
    W.save_active = true;
    W.save_writer = writer;
    W.save_seq++;
    W.save_bytes = 0;
    W.save_progress_s = comm_now_s();
    W.save_sent_s = 0;
    pthread_mutex_unlock(&W.lock);
    return FERRY_OK;
}

void comm_world_save_end(void)
{
    pthread_mutex_lock(&W.lock);
    W.save_active = false;
    pthread_mutex_unlock(&W.lock);
}

void comm_world_save_progress(uint64_t bytes_done)
{
#ifdef FERRY_HAVE_MPI
    int n = comm_world_size(), me = comm_world_rank();
    if (!W.mpi || n < 2)
        return;
    double now = comm_now_s();
    pthread_mutex_lock(&W.lock);
    int slot = W.next_note, free_slot = 0;
    bool send = W.save_active && W.save_writer == me && now - W.save_sent_s >= COMM_PROGRESS_EVERY_S;
    /* A slot's words are written again only once every send of them is done. */
    if (send && MPI_Testall(n, W.note_req[slot], &free_slot, MPI_STATUSES_IGNORE) == MPI_SUCCESS && free_slot) {
        W.notes[slot] = (save_note){W.save_seq, bytes_done};
        W.save_sent_s = now;
        W.next_note = (slot + 1) % COMM_PROGRESS_SLOTS;
        for (int p = 0; p < n; p++)
            if (p != me)
                MPI_Isend(&W.notes[slot], (int)sizeof W.notes[slot], MPI_BYTE, p, TAG_PROGRESS, W.watch_comm,
                          &W.note_req[slot][p]);
    }
    pthread_mutex_unlock(&W.lock);
#else
    (void)bytes_done;
#endif
}

bool comm_world_save_stall(double *seconds, int *writer, uint64_t *bytes)
{
    pthread_mutex_lock(&W.lock);
    bool waiting = W.save_active && W.save_writer != W.info.rank && W.info.world_size > 1;
    if (waiting) {
        *seconds = comm_now_s() - W.save_progress_s;
        *writer = W.save_writer;
        *bytes = W.save_bytes;
    }
    pthread_mutex_unlock(&W.lock);
    return waiting;
}

bool comm_world_in_save_wait(void)
{
    pthread_mutex_lock(&W.lock);
    bool waiting = W.save_active && W.save_writer != W.info.rank && W.info.world_size > 1;
    pthread_mutex_unlock(&W.lock);
    return waiting;
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

/* Waits for every request, watched by the watchdog (which fails the world
 * when it lasts too long) and ended as soon as the world fails. Without a
 * watchdog (its thread stopped at leave) the wait bounds itself. */
static ferry_status wait_requests(MPI_Request *r, const int *peer, const bool *is_recv, int n, const char *what)
{
    double t0 = comm_now_s();
    long nap_ns = 20000;
    int open = n, *done = malloc((size_t)(n > 0 ? n : 1) * sizeof *done);
    if (!done)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    comm_watch_item it;
    comm_watch_begin(&it, what);
    char peers[64];
    open_peers(r, peer, n, peers, sizeof peers);
    comm_watch_waiting_for(&it, peers);
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
        if (k != MPI_UNDEFINED && k > 0) {
            open_peers(r, peer, n, peers, sizeof peers);
            comm_watch_waiting_for(&it, peers);
        }
        poll_abort();
        if (comm_world_failed()) {
            st = failure_status();
            break;
        }
        double waited = comm_now_s() - t0, timeout = comm_world_timeout();
        if (!it.linked && waited > timeout) {
            st = comm_world_fail("%s waited %.0f s for rank%s %s without an answer: a rank died, hangs, or runs "
                                 "another schedule (set FERRY_COMM_TIMEOUT to wait longer)",
                                 what, waited, strchr(peers, ',') ? "s" : "", peers);
            break;
        }
        nanosleep(&(struct timespec){0, nap_ns}, NULL);
        if (nap_ns < 1000000)
            nap_ns *= 2;
    }
    comm_watch_end(&it);
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

/* Writes a collective of the control plane in the ledger and names it:
 * "a broadcast from rank 0 (collective #12 of the world)". */
static void ctl_write(comm_op op, uint64_t bytes, int root, const char *kind, char *what, size_t cap)
{
    comm_entry e = comm_ledger_write("world", op, -1, bytes, 0, root);
    snprintf(what, cap, "%s (collective #%llu of the world: %llu bytes)", kind, (unsigned long long)e.seq,
             (unsigned long long)bytes);
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
    char what[160];
    ctl_write(COMM_OP_ALL_REDUCE, count * sizeof *values, -1, "an all-reduce of the ranks' figures", what,
              sizeof what);
    st = comm_mpi_exchange(ctl_comm(), x, k, what);
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
    char kind[48], what[160];
    snprintf(kind, sizeof kind, "a broadcast from rank %d", root);
    ctl_write(COMM_OP_BROADCAST, bytes, root, kind, what, sizeof what);
    st = comm_mpi_exchange(ctl_comm(), x, k, what);
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
    uint64_t total = 0;
    for (int p = 0; p < n; p++)
        total += bytes[p];
    char what[160];
    ctl_write(COMM_OP_ALL_GATHER_V, total, -1, "an all-gather of the ranks' figures", what, sizeof what);
    st = comm_mpi_exchange(ctl_comm(), x, k, what);
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
