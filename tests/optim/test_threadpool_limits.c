/* The thread pool under a system limit: when the OS refuses a worker thread
 * (here: an address-space limit with no room for a thread's stack), the
 * pool fails with a status and a message that counts the workers it meant to
 * start and names the limit, never "worker 0 of 0". Each case runs in a
 * child process, so the limit does not reach the test itself. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "optim/threadpool.h"
#include "tap.h"

/* Bytes of address space this process uses now (/proc/self/statm). */
static unsigned long long address_space(void)
{
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%llu", &pages) != 1)
        pages = 0;
    if (f)
        fclose(f);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* In a child: limits the address space to what is used plus 3 MiB (room for
 * hwloc, not for an 8 MiB thread stack), creates a pool of `threads`, and
 * writes the status and message into the pipe. */
static void child(int fd, int threads)
{
    struct rlimit lim = {address_space() + (3u << 20), RLIM_INFINITY};
    setrlimit(RLIMIT_AS, &lim);
    tp_pool *pool = NULL;
    ferry_status st = tp_pool_create(threads, -1, &pool);
    char out[1200];
    int n = snprintf(out, sizeof out, "%d %s", (int)st, st == FERRY_OK ? "started" : ferry_last_error());
    if (write(fd, out, (size_t)n) != n)
        _exit(3);
    _exit(0);
}

/* Runs child() and returns its status; its message goes into got. */
static int limited(int threads, char *got, size_t cap)
{
    int fds[2], status = 0, st = -1;
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child(fds[1], threads);
    }
    close(fds[1]);
    memset(got, 0, cap);
    ssize_t n = read(fds[0], got, cap - 1);
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (n > 0 && WIFEXITED(status))
        sscanf(got, "%d", &st);
    return st;
}

static void check(int threads, int st, const char *got, int want_count)
{
    TAP_IS_INT(st, FERRY_ERR_BACKEND, "%d threads under a tight address-space limit: tp_pool_create fails with a "
                                      "status: %s", threads, got);
    char count[32];
    snprintf(count, sizeof count, "worker 1 of %d", want_count);
    tap_ok(strstr(got, count) != NULL, "%d threads: the message counts the workers ('%s')", threads, count);
    tap_ok(strstr(got, "ulimit -v") != NULL, "%d threads: and names the limit", threads);
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    tap_plan_skip("the sanitizer reserves terabytes of address space: an address-space limit cannot be set under it");
#endif
    /* Both children run before this process starts any thread: glibc keeps
     * the stacks of finished threads for reuse, which the limit would not see. */
    char three[1200], all[1200];
    int st3 = limited(3, three, sizeof three), st0 = limited(0, all, sizeof all);
    check(3, st3, three, 3);
    /* 0 = one per core: the count is the pool's, not the 0 asked. */
    tp_pool *pool = NULL;
    if (tap_is_status(tp_pool_create(0, -1, &pool), FERRY_OK, "a pool of one worker per core, without limits")) {
        check(0, st0, all, tp_pool_threads(pool));
        tp_pool_destroy(pool);
    }
    return tap_done();
}
