/* One rank of a world under mpirun, for tests/backend/test_comm.sh: the
 * backend's collectives (host or cuda) over groups of one size, the
 * ledger compared each step on the step's all-reduce, and one scenario of
 * what real clusters do to ranks. Each rank says what happened on stderr,
 * one line at a time, "rank R: WORD ...", with the wall-clock time where
 * the script needs it, and exits 0 only when its scenario went as it
 * should on this rank; the script judges the ranks together (who said
 * what, and how long the others took after one rank stopped).
 *
 *   comm_ranks BACKEND SCENARIO   (BACKEND host or cuda)
 *
 *   ok          three steps; then a checkpoint save whose writer (rank 0)
 *               takes 2.5 collective timeouts, showing progress: no rank
 *               may call that a death
 *   diverge     in step 1 the last rank reduces and gathers group 3 where
 *               the others do group 2 (same size: the data moves, silently
 *               wrong): the step's ledger comparison must stop every rank,
 *               naming the first collective that differs
 *   stop        the last rank stops itself (SIGSTOP) before step 2's
 *               collectives, which the others start
 *   kill        the same with SIGKILL
 *   stop-idle   the last rank stops after step 1, while the others issue
 *               no collective: only its heartbeat's silence can tell
 *   hang        the last rank sleeps three timeouts before step 2's
 *               collectives, its heartbeat on time (a rank stuck in its
 *               own work): only the age of the others' collectives can
 *               tell
 * In every scenario a thread of each rank waits on a condition variable
 * that only the end of the run or a waker can end.
 *   save-stall  rank 0 "writes" a checkpoint without showing progress,
 *               heartbeats alive, for longer than the save timeout
 *   start-hang  the last rank opens its communicator only after the
 *               collective timeout (its heartbeat alive)
 *   start-fail  like ok, for a rank whose communicator start fails by
 *               fault injection (the script sets it on one rank) */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/comm.h"
#include "backend/ops/ops.h"
#include "common/error.h"

#define GROUPS 6
#define NUMEL 4096 /* every group's size: ranks that mix groups up move data without an error */

static int rank, world;

static double wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s\n", rank, line);
    fflush(stderr);
}

static void nap(double s) { nanosleep(&(struct timespec){(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, NULL); }

/* Rank p's value i of group g at step k: small integers, so every sum is exact. */
static float value(int p, int g, int k, size_t i) { return (float)((int)(i % 7) + p * 3 + g * 5 + k); }

typedef struct ring {
    backend *be;
    backend_stream *s;
    backend_comm *c;
    float *dev, *dev_out, *host, *host_out;
} ring;

static ferry_status ring_open(ring *r, ferry_backend_kind kind)
{
    ferry_status st;
    size_t bytes = (size_t)NUMEL * world * sizeof(float);
    if ((st = backend_open(kind, &r->be)) != FERRY_OK || (st = backend_stream_create(r->be, "collectives", &r->s)) ||
        (st = backend_alloc(r->be, bytes, (void **)&r->dev)) != FERRY_OK ||
        (st = backend_alloc(r->be, bytes, (void **)&r->dev_out)) != FERRY_OK)
        return st;
    r->host = malloc(bytes);
    r->host_out = malloc(bytes);
    return r->host && r->host_out ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "out of host memory");
}

/* One step: for each group an all-reduce (checked against the sums), an
 * all-gather and a reduce-scatter, tagged with the group (the last rank
 * tags group 2's as group `odd` when odd >= 0). */
static ferry_status step(ring *r, int k, int odd)
{
    ferry_status st = FERRY_OK;
    size_t n = NUMEL, bytes = n * sizeof(float);
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++) {
        int tag = g == 2 && odd >= 0 && rank == world - 1 ? odd : g;
        backend_comm_set_tag(r->c, tag);
        for (size_t i = 0; i < n * (size_t)world; i++)
            r->host[i] = value(rank, g, k, i);
        if ((st = backend_memcpy_async(r->s, r->dev, r->host, bytes * (size_t)world, BACKEND_COPY_H2D)) != FERRY_OK ||
            (st = ops_all_reduce(r->s, r->c, r->dev, r->dev_out, n, FERRY_DTYPE_F32)) != FERRY_OK ||
            (st = backend_memcpy_async(r->s, r->host_out, r->dev_out, bytes, BACKEND_COPY_D2H)) != FERRY_OK ||
            (st = backend_stream_synchronize(r->s)) != FERRY_OK)
            break;
        for (size_t i = 0; i < n && st == FERRY_OK; i++) {
            double want = 0;
            for (int p = 0; p < world; p++)
                want += value(p, g, k, i);
            if (r->host_out[i] != (float)want)
                st = err_set(FERRY_ERR_STATE, "step %d group %d: all-reduce element %zu is %g, the sum is %g", k, g, i,
                             (double)r->host_out[i], want);
        }
        if (st != FERRY_OK ||
            (st = ops_all_gather(r->s, r->c, r->dev, r->dev_out, n, FERRY_DTYPE_F32)) != FERRY_OK ||
            (st = ops_reduce_scatter(r->s, r->c, r->dev, r->dev, n, FERRY_DTYPE_F32)) != FERRY_OK ||
            (st = backend_stream_synchronize(r->s)) != FERRY_OK)
            break;
    }
    backend_comm_set_tag(r->c, -1);
    return st;
}

/* The step's all-reduce of a figure, with the ledger riding along. */
static ferry_status agree(int k)
{
    double v[1 + COMM_LEDGER_WORDS];
    v[0] = rank + k;
    comm_ledger_words(v + 1);
    ferry_status st = comm_world_all_reduce_f64(v, 1 + COMM_LEDGER_WORDS);
    double want = (double)world * (world - 1) / 2 + (double)world * k;
    if (st == FERRY_OK && v[0] != want)
        return err_set(FERRY_ERR_STATE, "the step's figure summed to %g, not %g", v[0], want);
    return st == FERRY_OK ? comm_ledger_verify(v + 1) : st;
}

/* A wait only a waker can end, as a thread pool's job that waits for a
 * host function queued behind a collective. */
typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done, woke;
    double woke_at;
    comm_waker *w;
} waiter;

static void wake(void *arg)
{
    waiter *x = arg;
    pthread_mutex_lock(&x->lock);
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

static void *wait_main(void *arg)
{
    waiter *x = arg;
    pthread_mutex_lock(&x->lock);
    while (!x->done && !comm_world_failed())
        pthread_cond_wait(&x->cond, &x->lock);
    x->woke = !x->done;
    x->woke_at = wall();
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

/* Rank 0 writes a checkpoint for `seconds`, showing progress or not,
 * while the others wait for its outcome. */
static ferry_status save(double seconds, bool progress)
{
    ferry_status st = comm_world_save_begin(0);
    if (st != FERRY_OK)
        return st;
    double t0 = wall();
    say("save begins at %.3f", t0);
    if (rank == 0)
        for (uint64_t b = 0; wall() - t0 < seconds; b += 1 << 20) {
            nap(0.1);
            if (progress)
                comm_world_save_progress(b);
        }
    int word = rank == 0 ? 42 : 0;
    st = comm_world_broadcast(&word, sizeof word, 0);
    comm_world_save_end();
    if (st == FERRY_OK && word != 42)
        st = err_set(FERRY_ERR_STATE, "the writer's word came as %d, not 42", word);
    if (st == FERRY_OK)
        say("saved: the save took %.1f s with the collective timeout %.1f s", wall() - t0, comm_world_timeout());
    return st;
}

static int failed_here(const char *what, ferry_status st)
{
    say("failed at %.3f: %s (status %d): %s", wall(), what, (int)st, ferry_last_error());
    return 1;
}

static bool is(const char *scenario, const char *name) { return strcmp(scenario, name) == 0; }

static int run(ring *r, const char *scenario)
{
    ferry_status st;
    bool last = rank == world - 1, stops = is(scenario, "stop") || is(scenario, "kill") || is(scenario, "stop-idle");
    waiter x = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, 0, NULL};
    pthread_t waiting;
    if ((st = comm_waker_add(wake, &x, &x.w)) != FERRY_OK)
        return failed_here("registering a waker", st);
    pthread_create(&waiting, NULL, wait_main, &x);
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        if (stops && k == 2 && last) {
            say("stopping at %.3f (pid %d, %s)", wall(), (int)getpid(), scenario);
            raise(is(scenario, "kill") ? SIGKILL : SIGSTOP);
        }
        if (is(scenario, "stop-idle") && k == 2)
            break; /* no collective: only the heartbeat, and the waker, can end the wait below */
        if (is(scenario, "hang") && k == 2 && last) {
            say("hanging at %.3f for %.0f s, heartbeats on", wall(), 3 * comm_world_timeout());
            nap(3 * comm_world_timeout());
        }
        int odd = is(scenario, "diverge") && k == 1 ? 3 : -1;
        if ((st = step(r, k, odd)) != FERRY_OK || (st = agree(k)) != FERRY_OK)
            rc = failed_here("a step", st);
        else
            say("step %d: every collective summed right, ledgers alike", k);
    }
    if (!stops) { /* the job waited for is done */
        pthread_mutex_lock(&x.lock);
        x.done = true;
        pthread_cond_broadcast(&x.cond);
        pthread_mutex_unlock(&x.lock);
    }
    pthread_join(waiting, NULL);
    comm_waker_remove(x.w);
    if (x.woke && rc == 0)
        rc = failed_here("a wait that only a failure could end", comm_world_check());
    if (x.woke)
        say("waker: the waiting thread woke at %.3f", x.woke_at);
    if (rc)
        return rc;
    if (is(scenario, "ok") && (st = save(2.5 * comm_world_timeout(), true)) != FERRY_OK)
        return failed_here("a slow save", st);
    if (is(scenario, "save-stall") && (st = save(3 * comm_world_save_timeout(), false)) != FERRY_OK)
        return failed_here("a save", st);
    if ((st = comm_ledger_check("the end")) != FERRY_OK)
        return failed_here("the last comparison", st);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr,
                "usage: comm_ranks host|cuda ok|diverge|stop|kill|stop-idle|hang|save-stall|start-hang|start-fail\n");
        return 2;
    }
    ferry_backend_kind kind = strcmp(argv[1], "cuda") == 0 ? FERRY_BACKEND_CUDA : FERRY_BACKEND_HOST;
    const char *scenario = argv[2];
    ferry_world_info w;
    if (comm_world_join(&w) != FERRY_OK) {
        fprintf(stderr, "rank ?: refused at join: %s\n", ferry_last_error());
        return 3;
    }
    rank = w.rank;
    world = w.world_size;
    char timeouts[512];
    comm_world_describe_timeouts(timeouts, sizeof timeouts);
    say("joined %d ranks: %s", world, timeouts);
    ring r = {0};
    ferry_status st = ring_open(&r, kind);
    if (st != FERRY_OK)
        return failed_here("opening the backend", st);
    if (strcmp(scenario, "start-hang") == 0 && rank == world - 1) {
        say("opening the communicator late, at %.3f", wall() + comm_world_timeout() + 3);
        nap(comm_world_timeout() + 3);
    }
    double t0 = wall();
    if ((st = backend_comm_open(r.be, "weights", &r.c)) != FERRY_OK)
        return failed_here("opening the communicator", st);
    say("communicator open (%s) in %.1f s", backend_comm_transport(r.c), wall() - t0);
    int rc = run(&r, scenario);
    if (rc == 0) {
        uint64_t count = 0, hash = 0;
        comm_ledger_state(&count, &hash);
        say("done: %llu collectives, ledger %016llx", (unsigned long long)count, (unsigned long long)hash);
    }
    backend_stream_synchronize(r.s);
    backend_comm_close(r.c);
    free(r.host);
    free(r.host_out);
    backend_stream_destroy(r.s);
    backend_close(r.be);
    if (comm_world_leave() != FERRY_OK && rc == 0)
        rc = failed_here("leaving", FERRY_ERR_BACKEND);
    say("exit at %.3f with %d", wall(), rc);
    return rc;
}
