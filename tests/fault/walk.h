/* The fault-injection walk, SQLite style, for the tests of tests/fault/:
 * run a scenario once with the counter only counting (how many allocations,
 * opens, reads, writes, syncs, renames and pins it makes), then again and
 * again with call N failing, N = 1, 2, ..., until a run completes with the
 * fault never reached. After every run it requires: a failed run returned a
 * non-OK status whose ferry_last_error() names the cause (the errno the
 * fault gave, or "memory" for an allocation); no leak (LeakSanitizer, in
 * the ASan build CI runs); and whatever the scenario checks (every file that
 * was whole before is still whole, a run that succeeded left the right
 * result). A crash ends the program, which meson reports. Header-only;
 * needs a -Dfault_injection=true build (common/fault.h). */
#ifndef FERRY_TESTS_FAULT_WALK_H
#define FERRY_TESTS_FAULT_WALK_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/fault.h"
#include "ferry.h"
#include "tests/tap.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

/* A walk ends by itself; past this many runs something counts without end. */
#define WALK_MAX_RUNS 100000
/* Violations of one kind printed per scenario (all are counted). */
#define WALK_MAX_DIAG 8
#define WALK_MESSAGE_MAX 1100

typedef struct walk_scenario {
    const char *name;
    void *ctx;
    /* Fault off: puts the world back as it was before the first run (files,
     * the engine's values). NULL: nothing to do. */
    ferry_status (*prepare)(void *ctx);
    /* The counted part; its status is the run's. `at` and `persistent` are
     * the fault's (walk arms this process's counter itself; a scenario that
     * runs a program passes them in its environment, see `child`). */
    ferry_status (*act)(void *ctx, uint64_t at, bool persistent);
    /* Fault off, right after act: false with `why` filled if anything that
     * was whole before is not, or if act returned OK and its result is not
     * right. */
    bool (*check)(void *ctx, ferry_status st, char *why, size_t cap);
    /* Fault off: releases what act made (an engine, a model). NULL: none. */
    void (*finish)(void *ctx);
    /* For a scenario whose runs are another program (tokenize), all
     * non-NULL; this process's counter stays off:
     * - child: what the program counted (*calls) and the call that failed
     *   (its number, 0 if none; where, in `where`), from its FERRY_FAULT_LOG;
     * - message: what it said on failure (its stderr); only success or
     *   failure of its status counts (its exit code);
     * - clean_exit: false, with `why`, if it crashed or a sanitizer reported
     *   (a leak included) in its output. */
    uint64_t (*child)(void *ctx, uint64_t *calls, char *where, size_t cap);
    const char *(*message)(void *ctx);
    bool (*clean_exit)(void *ctx, char *why, size_t cap);
} walk_scenario;

typedef struct walk_result {
    uint64_t sites;     /* counted calls of the fault-free run */
    uint64_t walked;    /* runs in which the fault was reached */
    uint64_t failed;    /* ... and the scenario returned an error */
    uint64_t tolerated; /* ... and it still succeeded (a fallback, e.g. a refused page lock) */
    int unclear, leaks, broken, crashed, endless;
    ferry_status first_status;
} walk_result;

/* The words a message must hold for a fault of this kind, and the status a
 * caller can act on (NULL / FERRY_OK: any). */
static inline void walk_expect(const char *kind, const char **words, const char **alt, ferry_status *status)
{
    static const char *const alloc[] = {"malloc", "calloc", "realloc", "strdup", "strndup", "posix_memalign",
                                        "aligned_alloc", NULL};
    *alt = NULL;
    *status = FERRY_ERR_IO;
    for (int i = 0; alloc[i]; i++)
        if (strncmp(kind, alloc[i], strlen(alloc[i])) == 0 && kind[strlen(alloc[i])] == ' ') {
            *words = "memory";
            *alt = "allocate";
            *status = FERRY_ERR_OUT_OF_MEMORY;
            return;
        }
    if (strncmp(kind, "io_uring_queue_init ", 20) == 0) {
        *words = strerror(EPERM); /* io_uring refused: the store takes its threads instead */
        *alt = "io_uring";
        *status = FERRY_OK;
    } else if (strncmp(kind, "pthread_create ", 15) == 0) {
        *words = "thread"; /* a refused thread start: EAGAIN, as under ulimit -u */
        *status = FERRY_OK;
    } else if (strncmp(kind, "mmap ", 5) == 0 || strncmp(kind, "mlock ", 6) == 0) {
        *words = strerror(ENOMEM);
        *alt = "memory";
        *status = FERRY_OK;
    } else if (strncmp(kind, "open", 4) == 0 || strncmp(kind, "fopen ", 6) == 0) {
        *words = strerror(EACCES);
    } else if (strncmp(kind, "write ", 6) == 0 || strncmp(kind, "pwrite ", 7) == 0 ||
               strncmp(kind, "fallocate ", 10) == 0 || strncmp(kind, "io_uring write ", 15) == 0) {
        *words = strerror(ENOSPC);
        *alt = "disk full";
    } else {
        *words = strerror(EIO); /* read, pread, fsync, fdatasync, rename* */
    }
}

static inline bool walk_contains(const char *s, const char *w)
{
    if (!w)
        return false;
    size_t n = strlen(w);
    for (; *s; s++)
        if (strncasecmp(s, w, n) == 0)
            return true;
    return false;
}

/* Whether a failed run's status and message are clear about the fault
 * (`exact`: the words of its kind; `status`: its ferry_status too). */
static inline bool walk_clear(const char *where, ferry_status st, const char *msg, bool exact, bool status, char *why,
                              size_t cap)
{
    if (!msg || !msg[0]) {
        snprintf(why, cap, "%s with no message", ferry_status_string(st));
        return false;
    }
    if (!exact)
        return true;
    const char *words, *alt;
    ferry_status want;
    walk_expect(where, &words, &alt, &want);
    if (!walk_contains(msg, words) && !walk_contains(msg, alt)) {
        snprintf(why, cap, "the message does not say '%s'%s%s%s: \"%s\"", words, alt ? " or '" : "", alt ? alt : "",
                 alt ? "'" : "", msg);
        return false;
    }
    if (status && want != FERRY_OK && st != want) {
        snprintf(why, cap, "status %s, not %s: \"%s\"", ferry_status_string(st), ferry_status_string(want), msg);
        return false;
    }
    return true;
}

/* Leaks since the last call; false without LeakSanitizer. */
static inline bool walk_leaked(void)
{
#ifdef __SANITIZE_ADDRESS__
    return __lsan_do_recoverable_leak_check() != 0;
#else
    return false;
#endif
}

static inline void walk_diag(int *count, uint64_t n, const char *where, const char *what)
{
    if ((*count)++ < WALK_MAX_DIAG)
        tap_diag("  site %llu (%s): %s", (unsigned long long)n, where, what);
}

/* One run with call `at` failing (0: counting only); returns whether the
 * fault was reached. */
static inline bool walk_run(const walk_scenario *s, uint64_t at, bool persistent, walk_result *r)
{
    char where[600], why[WALK_MESSAGE_MAX + 800], msg[WALK_MESSAGE_MAX];
    ferry_status st = s->prepare ? s->prepare(s->ctx) : FERRY_OK;
    if (st != FERRY_OK) {
        snprintf(why, sizeof why, "preparing the run failed: %s", ferry_last_error());
        walk_diag(&r->broken, at, "before the fault", why);
        return false;
    }
    uint64_t calls = 0, fired = 0;
    if (!s->child)
        fault_arm(at, persistent);
    st = s->act(s->ctx, at, persistent);
    if (!s->child) {
        calls = fault_disarm();
        fired = fault_fired(where, sizeof where);
    } else {
        fired = s->child(s->ctx, &calls, where, sizeof where);
    }
    snprintf(msg, sizeof msg, "%s", s->message ? s->message(s->ctx) : ferry_last_error());
    if (at == 0) {
        r->sites = calls;
        r->first_status = st;
        snprintf(where, sizeof where, "no fault");
    }
    bool reached = at && fired == at;
    if (reached) {
        r->walked++;
        if (st != FERRY_OK)
            r->failed++;
        else if (r->tolerated++ < WALK_MAX_DIAG)
            tap_diag("  site %llu (%s) failed and the run still succeeded", (unsigned long long)at, where);
    }
    if (s->clean_exit && !s->clean_exit(s->ctx, why, sizeof why))
        walk_diag(strstr(why, "LeakSanitizer") || strstr(why, "memory leaks") ? &r->leaks : &r->crashed, at, where,
                  why);
    if (reached && st != FERRY_OK && !walk_clear(where, st, msg, !persistent, !s->child, why, sizeof why))
        walk_diag(&r->unclear, at, where, why);
    if (at && !reached && st != FERRY_OK) {
        snprintf(why, sizeof why, "the fault was never reached, yet the run failed: %s", msg);
        walk_diag(&r->broken, at, "no fault", why);
    }
    if (!s->check(s->ctx, st, why, sizeof why))
        walk_diag(&r->broken, at, where, why);
    if (s->finish)
        s->finish(s->ctx);
    if (!s->child && r->leaks == 0 && walk_leaked()) /* LeakSanitizer printed the stacks above */
        walk_diag(&r->leaks, at, where, "memory leaked (the report is in the test's stderr)");
    return reached;
}

/* The whole walk of one scenario, then its TAP lines. */
static inline walk_result walk(const walk_scenario *s, bool persistent)
{
    walk_result r;
    memset(&r, 0, sizeof r);
    const char *mode = persistent ? "persistent" : "one-shot";
    tap_diag("%s (%s faults)", s->name, mode);
    walk_run(s, 0, false, &r);
    tap_ok(r.first_status == FERRY_OK && r.sites > 0, "%s: without a fault it succeeds, reaching %llu sites",
           s->name, (unsigned long long)r.sites);
    uint64_t n = 1;
    while (walk_run(s, n, persistent, &r))
        if (++n > WALK_MAX_RUNS) {
            r.endless = 1;
            break;
        }
    /* Every call the fault-free run counted was made to fail once, no more
     * and no fewer (the scenario's calls do not depend on thread timing). */
    tap_ok(!r.endless && r.walked == r.sites, "%s, %s: the walk failed %llu sites in turn and ended; the fault-free "
           "run counted %llu", s->name, mode, (unsigned long long)r.walked, (unsigned long long)r.sites);
    tap_ok(r.unclear == 0, "%s, %s: every failure has a status and a message naming its cause (%llu failed, %llu "
           "absorbed by a fallback)", s->name, mode, (unsigned long long)r.failed,
           (unsigned long long)r.tolerated);
    /* In this process a crash or a sanitizer report ends the program. */
    if (s->child)
        tap_ok(r.crashed == 0, "%s, %s: no crash and no sanitizer report at any site", s->name, mode);
#ifdef __SANITIZE_ADDRESS__
    tap_ok(r.leaks == 0, "%s, %s: no leak at any site%s", s->name, mode,
           s->child ? " (LeakSanitizer at the program's exit)" : "");
#else
    tap_diag("%s: not an ASan build, leaks not checked", s->name);
#endif
    tap_ok(r.broken == 0, "%s, %s: every file whole before is whole after every site, and every success is right",
           s->name, mode);
    return r;
}

#endif
