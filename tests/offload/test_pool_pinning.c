/* The pinned host pool where pinning is refused: this test really takes
 * CAP_IPC_LOCK away from its own process (capset) and lowers RLIMIT_MEMLOCK
 * to 64 KiB, then checks that the pool still works, reports its bytes as
 * unpinned, and warns once on stderr with the limit and how to raise it. */
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/error.h"
#include "offload/pool.h"
#include "tap.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static int has_ipc_lock(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    return (d[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1;
}

static int drop_ipc_lock(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        return -1;
    unsigned bit = 1u << (CAP_IPC_LOCK % 32);
    d[CAP_IPC_LOCK / 32].effective &= ~bit;
    d[CAP_IPC_LOCK / 32].permitted &= ~bit;
    d[CAP_IPC_LOCK / 32].inheritable &= ~bit;
    return (int)syscall(SYS_capset, &h, d);
}

/* Runs one allocation with stderr sent to a file; returns what it printed. */
static ferry_status alloc_capturing_stderr(pool *p, size_t bytes, void **out, char *err, size_t cap)
{
    char path[] = "/tmp/ferry_pinning_XXXXXX";
    int fd = mkstemp(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    ferry_status st = pool_alloc(p, bytes, 0, FERRY_MEM_OPTIMIZER, "adam m", out);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, err, cap - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return st;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

int main(void)
{
    struct rlimit rl;
    getrlimit(RLIMIT_MEMLOCK, &rl);
    int cap0 = has_ipc_lock();
    tap_diag("start: CAP_IPC_LOCK %d, RLIMIT_MEMLOCK %lld", cap0, (long long)rl.rlim_cur);

    /* Control: where the limit allows it (or the capability is held), the
     * slab is locked. */
    pool_config cfg = POOL_CONFIG_INIT;
    cfg.slab_bytes = MiB;
    pool *p = NULL;
    pool_create(&cfg, &p);
    void *a = NULL;
    TAP_IS_STATUS(pool_alloc(p, 100 * KiB, 0, FERRY_MEM_PARAMS, "control", &a), FERRY_OK, "control: allocate");
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    pool_stats(p, &s);
    if (cap0 == 1 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 4 * MiB)
        TAP_IS_INT(s.host_pinned_bytes, MiB, "control: the 1 MiB slab is pinned");
    else
        tap_diag("control: the limit here is too low to expect pinning");
    pool_destroy(p);

    if (drop_ipc_lock() != 0 || has_ipc_lock() != 0)
        tap_plan_skip("cannot drop CAP_IPC_LOCK from this process");
    struct rlimit low = {64 * KiB, 64 * KiB};
    if (setrlimit(RLIMIT_MEMLOCK, &low) != 0)
        tap_plan_skip("cannot lower RLIMIT_MEMLOCK");
    tap_diag("dropped CAP_IPC_LOCK, RLIMIT_MEMLOCK now 64 KiB");

    p = NULL;
    TAP_IS_STATUS(pool_create(&cfg, &p), FERRY_OK, "refused: create the pool");
    char err[2048];
    void *b = NULL;
    TAP_IS_STATUS(alloc_capturing_stderr(p, 300 * KiB, &b, err, sizeof err), FERRY_OK,
                  "refused: the allocation still succeeds");
    tap_diag("stderr: %s", err);
    TAP_IS_INT(count_lines(err), 1, "refused: one line on stderr");
    tap_ok(strstr(err, "ulimit -l") && strstr(err, "limits.conf") && strstr(err, "CAP_IPC_LOCK"),
           "refused: the warning says how to raise the limit");
    tap_ok(strstr(err, "RLIMIT_MEMLOCK is 64.0 KiB") != NULL, "refused: the warning names the limit");
    pool_stats(p, &s);
    TAP_IS_INT(s.host_pinned_bytes, 0, "refused: no pinned bytes");
    TAP_IS_INT(s.host_unpinned_bytes, MiB, "refused: the 1 MiB slab is reported unpinned");
    memset(b, 0x5a, 300 * KiB);
    TAP_IS_INT(((unsigned char *)b)[300 * KiB - 1], 0x5a, "refused: the memory is usable");
    void *c = NULL;
    TAP_IS_STATUS(alloc_capturing_stderr(p, 2 * MiB, &c, err, sizeof err), FERRY_OK,
                  "refused: a second slab is obtained");
    TAP_IS_INT(count_lines(err), 0, "refused: no second warning");
    pool_stats(p, &s);
    TAP_IS_INT(s.host_unpinned_bytes, 3 * MiB, "refused: both slabs (1 + 2 MiB) unpinned");
    char note[600];
    tap_ok(strstr(pool_pinning_note(p, note, sizeof note), "mlock") != NULL, "refused: pool_pinning_note says so");
    TAP_IS_STATUS(pool_free(p, b), FERRY_OK, "refused: free");
    TAP_IS_STATUS(pool_free(p, c), FERRY_OK, "refused: free");
    pool_destroy(p);

    cfg.pin = POOL_PIN_NEVER;
    pool_create(&cfg, &p);
    TAP_IS_STATUS(pool_alloc(p, 4096, 0, FERRY_MEM_STAGING, "pageable", &b), FERRY_OK, "never: allocate");
    pool_stats(p, &s);
    TAP_IS_INT(s.host_unpinned_bytes, MiB, "never: reported unpinned");
    TAP_IS_INT(pool_pinning_note(p, note, sizeof note)[0], 0, "never: no note when unpinned by request");
    pool_destroy(p);
    return tap_done();
}
