/* The watchdog of this rank (backend/comm.h, "the watchdog"): its thread,
 * the list of collectives in flight, the wakers and the failure hooks.
 * Each tick the thread pulses the world (heartbeats, other ranks' failure
 * messages, a writer's save progress: comm_world.c, which owns MPI), asks
 * the device's collectives where they are, and fails the world when a
 * collective or a peer's silence is older than its bound. Once the world
 * has failed it runs the hooks (NCCL's abort) and then calls every waker,
 * once. Owns no MPI, no NCCL and no item's storage: the collectives own
 * their items and link them here while they run. */
#include "backend/comm_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/units.h"

#define WATCH_MAX_HOOKS 4

struct comm_waker {
    struct comm_waker *next, *prev;
    void (*wake)(void *arg);
    void *arg;
};

static struct {
    pthread_mutex_t lock;     /* the items and the thread's state */
    pthread_cond_t cond;      /* wakes the thread: a failure, or stop */
    pthread_t thread;
    atomic_bool running;
    bool stop;
    comm_watch_item *items;   /* in flight, newest first */
    pthread_mutex_t wake_lock; /* the wakers; held while they are called */
    struct comm_waker *wakers;
    atomic_bool handled;      /* the failure's hooks and wakers have run */
    void (*hooks[WATCH_MAX_HOOKS])(void);
    atomic_int nhooks;
} WD = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .wake_lock = PTHREAD_MUTEX_INITIALIZER};

bool comm_watch_running(void) { return atomic_load(&WD.running); }

/* ---- items ---- */

static void link_item(comm_watch_item *it)
{
    it->prev = NULL;
    it->next = WD.items;
    if (WD.items)
        WD.items->prev = it;
    WD.items = it;
    it->linked = true;
}

static void unlink_item(comm_watch_item *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        WD.items = it->next;
    if (it->next)
        it->next->prev = it->prev;
    it->next = it->prev = NULL;
    it->linked = false;
}

void comm_watch_begin(comm_watch_item *it, const char *what)
{
    memset(it, 0, sizeof *it);
    snprintf(it->what, sizeof it->what, "%s", what);
    it->started_s = comm_now_s();
    it->save = comm_world_in_save_wait();
    pthread_mutex_lock(&WD.lock);
    if (atomic_load(&WD.running))
        link_item(it);
    pthread_mutex_unlock(&WD.lock);
}

void comm_watch_waiting_for(comm_watch_item *it, const char *peers)
{
    pthread_mutex_lock(&WD.lock);
    snprintf(it->peers, sizeof it->peers, "%s", peers);
    pthread_mutex_unlock(&WD.lock);
}

void comm_watch_end(comm_watch_item *it)
{
    pthread_mutex_lock(&WD.lock);
    if (it->linked)
        unlink_item(it);
    pthread_mutex_unlock(&WD.lock);
}

void comm_watch_track(comm_watch_item *it, const char *what, const void *owner,
                      comm_progress (*progress)(void *ctx), void (*release)(void *ctx), void *ctx)
{
    memset(it, 0, sizeof *it);
    snprintf(it->what, sizeof it->what, "%s", what);
    it->started_s = -1;
    it->owner = owner;
    it->progress = progress;
    it->release = release;
    it->ctx = ctx;
    pthread_mutex_lock(&WD.lock);
    bool watched = atomic_load(&WD.running);
    if (watched)
        link_item(it);
    pthread_mutex_unlock(&WD.lock);
    if (!watched)
        release(ctx);
}

/* Unlinks the device items that `pick` selects into a list of their own,
 * so they are released outside the lock. */
static comm_watch_item *take_device_items(const void *owner, bool all)
{
    comm_watch_item *out = NULL;
    for (comm_watch_item *it = WD.items, *next; it; it = next) {
        next = it->next;
        if (!it->progress || (!all && it->owner != owner))
            continue;
        unlink_item(it);
        it->next = out;
        out = it;
    }
    return out;
}

static void release_list(comm_watch_item *list)
{
    for (comm_watch_item *it = list, *next; it; it = next) {
        next = it->next;
        it->release(it->ctx); /* may reuse the item's storage: read next first */
    }
}

void comm_watch_forget(const void *owner)
{
    pthread_mutex_lock(&WD.lock);
    comm_watch_item *list = take_device_items(owner, false);
    pthread_mutex_unlock(&WD.lock);
    release_list(list);
}

void comm_watch_in_flight(char *out, size_t cap)
{
    double now = comm_now_s(), oldest = now;
    out[0] = '\0';
    pthread_mutex_lock(&WD.lock);
    for (comm_watch_item *it = WD.items; it; it = it->next)
        if (it->started_s >= 0 && it->started_s <= oldest) {
            oldest = it->started_s;
            snprintf(out, cap, "%s, under way for %.1f s", it->what, now - it->started_s);
        }
    pthread_mutex_unlock(&WD.lock);
}

/* ---- failures ---- */

void comm_watch_on_failure(void (*fn)(void))
{
    int n = atomic_load(&WD.nhooks);
    for (int i = 0; i < n; i++)
        if (WD.hooks[i] == fn)
            return;
    if (n < WATCH_MAX_HOOKS) {
        WD.hooks[n] = fn;
        atomic_store(&WD.nhooks, n + 1);
    }
}

/* The failure's consequences, once: what ends the device's waits, then
 * every waiter. */
static void handle_failure(void)
{
    if (atomic_exchange(&WD.handled, true))
        return;
    int n = atomic_load(&WD.nhooks);
    for (int i = 0; i < n; i++)
        WD.hooks[i]();
    pthread_mutex_lock(&WD.wake_lock);
    for (struct comm_waker *w = WD.wakers; w; w = w->next)
        w->wake(w->arg);
    pthread_mutex_unlock(&WD.wake_lock);
}

void comm_watch_failed(void)
{
    pthread_mutex_lock(&WD.lock);
    bool running = atomic_load(&WD.running), here = running && pthread_equal(pthread_self(), WD.thread);
    if (running && !here)
        pthread_cond_signal(&WD.cond);
    pthread_mutex_unlock(&WD.lock);
    /* On the watchdog's own thread (it found the failure), or without one:
     * now, before the failing thread tells the other ranks (which waits for
     * their answers). */
    if (!running || here)
        handle_failure();
}

ferry_status comm_waker_add(void (*wake)(void *arg), void *arg, comm_waker **out)
{
    if (!wake || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "comm_waker_add: NULL argument");
    *out = NULL;
    struct comm_waker *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "registering a waiter with the watchdog: out of host memory");
    w->wake = wake;
    w->arg = arg;
    pthread_mutex_lock(&WD.wake_lock);
    /* Under the lock: a failure handled from here on calls this waker. */
    bool failed = atomic_load(&WD.handled) || comm_world_failed();
    if (!failed) {
        w->next = WD.wakers;
        if (WD.wakers)
            WD.wakers->prev = w;
        WD.wakers = w;
    }
    pthread_mutex_unlock(&WD.wake_lock);
    if (failed) {
        free(w);
        return comm_world_check();
    }
    *out = w;
    return FERRY_OK;
}

void comm_waker_remove(comm_waker *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&WD.wake_lock);
    if (w->prev)
        w->prev->next = w->next;
    else
        WD.wakers = w->next;
    if (w->next)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&WD.wake_lock);
    free(w);
}

/* ---- the thread ---- */

/* Seconds between ticks: a twentieth of the timeout, within 20-250 ms. */
static double tick_s(void)
{
    double t = comm_world_timeout() / 20;
    return t < 0.02 ? 0.02 : t > 0.25 ? 0.25 : t;
}

/* The first item past its bound, in words; false when none is. Asks the
 * device's items where they are, and unlinks those that are done. */
static bool scan_items(double now, double timeout, char *why, size_t cap, comm_watch_item **done)
{
    double stall = 0;
    int writer = 0;
    uint64_t written = 0;
    bool in_save = comm_world_save_stall(&stall, &writer, &written);
    double save_timeout = comm_world_save_timeout();
    char limit[32], save_limit[32];
    comm_fmt_seconds(timeout, limit, sizeof limit);
    comm_fmt_seconds(save_timeout, save_limit, sizeof save_limit);
    /* NCCL does not say whom a collective waits for; with two ranks it is the other. */
    char other_rank[48] = "";
    if (comm_world_size() == 2)
        snprintf(other_rank, sizeof other_rank, ", waiting for rank %d", 1 - comm_world_rank());
    bool found = false;
    for (comm_watch_item *it = WD.items, *next; it; it = next) {
        next = it->next;
        if (it->progress) {
            comm_progress p = it->progress(it->ctx);
            if (p == COMM_DONE) {
                unlink_item(it);
                it->next = *done;
                *done = it;
                continue;
            }
            if (p == COMM_RUNNING && it->started_s < 0)
                it->started_s = now;
        }
        if (found || it->started_s < 0)
            continue;
        double age = now - it->started_s;
        if (it->save && in_save) {
            if (stall <= save_timeout)
                continue;
            char bytes[32];
            units_fmt_bytes(bytes, sizeof bytes, written);
            snprintf(why, cap,
                     "%s waited %.0f s while rank %d wrote a checkpoint that showed no progress for %.0f s (%s "
                     "written): its storage may hang (a save may go %s without progress: FERRY_COMM_SAVE_TIMEOUT)",
                     it->what, age, writer, stall, bytes, save_limit);
            found = true;
        } else if (age > timeout) {
            if (it->progress)
                snprintf(why, cap,
                         "%s has run on the device for %.0f s without completing%s: a rank died, hangs, or runs "
                         "another schedule (collectives time out after %s: FERRY_COMM_TIMEOUT)",
                         it->what, age, other_rank, limit);
            else
                snprintf(why, cap,
                         "%s waited %.0f s for rank%s %s without an answer: a rank died, hangs, or runs another "
                         "schedule (collectives time out after %s: FERRY_COMM_TIMEOUT)",
                         it->what, age, strchr(it->peers, ',') ? "s" : "", it->peers[0] ? it->peers : "?", limit);
            found = true;
        }
    }
    return found;
}

static void check(void)
{
    double now = comm_now_s(), timeout = comm_world_timeout();
    char why[ERR_MESSAGE_MAX - 64];
    comm_watch_item *done = NULL;
    pthread_mutex_lock(&WD.lock);
    bool late = scan_items(now, timeout, why, sizeof why, &done);
    pthread_mutex_unlock(&WD.lock);
    release_list(done);
    if (late) {
        comm_world_fail("%s", why);
        return;
    }
    int peer = -1;
    double silent = comm_world_silence(&peer);
    if (silent > timeout) {
        char here[320], limit[32];
        comm_watch_in_flight(here, sizeof here);
        comm_fmt_seconds(timeout, limit, sizeof limit);
        comm_world_fail("rank %d sent no heartbeat for %.0f s: it was stopped, died, or cannot be reached "
                        "(ranks must answer within %s: FERRY_COMM_TIMEOUT)%s%s",
                        peer, silent, limit, here[0] ? "; in flight here: " : "", here);
    }
}

static void *watch_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&WD.lock);
    while (!WD.stop) {
        pthread_mutex_unlock(&WD.lock);
        comm_world_pulse();
        if (!comm_world_failed())
            check();
        if (comm_world_failed())
            handle_failure();
        double t = tick_s();
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ns = until.tv_nsec + (long)(t * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_mutex_lock(&WD.lock);
        if (!WD.stop && !(comm_world_failed() && !atomic_load(&WD.handled)))
            pthread_cond_timedwait(&WD.cond, &WD.lock, &until);
    }
    pthread_mutex_unlock(&WD.lock);
    return NULL;
}

ferry_status comm_watch_start(void)
{
    pthread_mutex_lock(&WD.lock);
    if (atomic_load(&WD.running)) {
        pthread_mutex_unlock(&WD.lock);
        return FERRY_OK;
    }
    WD.stop = false;
    int rc = pthread_create(&WD.thread, NULL, watch_main, NULL);
    if (rc == 0)
        atomic_store(&WD.running, true);
    pthread_mutex_unlock(&WD.lock);
    if (rc != 0) {
        char why[256];
        err_thread_refusal(rc, why, sizeof why);
        return err_set(FERRY_ERR_BACKEND, "joining the world: the watchdog's thread could not start: %s", why);
    }
    return FERRY_OK;
}

void comm_watch_stop(void)
{
    pthread_mutex_lock(&WD.lock);
    if (!atomic_load(&WD.running)) {
        pthread_mutex_unlock(&WD.lock);
        return;
    }
    WD.stop = true;
    pthread_cond_signal(&WD.cond);
    pthread_mutex_unlock(&WD.lock);
    pthread_join(WD.thread, NULL);
    pthread_mutex_lock(&WD.lock);
    atomic_store(&WD.running, false);
    comm_watch_item *list = take_device_items(NULL, true);
    for (comm_watch_item *it = WD.items, *next; it; it = next) { /* exchanges end by themselves */
        next = it->next;
        unlink_item(it);
    }
    pthread_mutex_unlock(&WD.lock);
    release_list(list);
}
