/* The host memory available (common/hostmem.c) read from fake trees of
 * /proc and /sys/fs/cgroup, one per case of the machines users run on:
 * MemAvailable alone; a systemd user slice's limit (v2, no cgroup
 * namespace: the process's own path from /proc/self/cgroup); a Slurm job's
 * nested limits in v2 and in v1 (the tightest level up the tree wins, not
 * the innermost nor the root); page cache at the limit (v2 inactive_file,
 * v1 total_inactive_file taken back); a container with a cgroup namespace
 * (the mount is its own cgroup) and a Docker container without one (v1, the
 * mount's root is the container's path); the hybrid layout (v2 without the
 * memory controller beside v1's); memory.high below memory.max; "max" and
 * v1's 2^63 as no limit; a cgroup past its limit; no meminfo; nothing
 * readable; an escaped mount point; RLIMIT_MEMLOCK and CAP_IPC_LOCK in the
 * words. Every expectation is the files' numbers worked out here, the
 * headroom (1/16 of the bound, within 64 MiB .. 1 GiB) included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hostmem.h"
#include "tap.h"

static char root[] = "/tmp/ferry-test-hostmem-XXXXXX";

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

static void put(const char *path, const char *text)
{
    char full[1024], dir[1024];
    snprintf(full, sizeof full, "%s%s", root, path);
    snprintf(dir, sizeof dir, "%s", full);
    for (char *p = dir + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    FILE *f = fopen(full, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void putu(const char *path, uint64_t v)
{
    char t[32];
    snprintf(t, sizeof t, "%llu\n", (unsigned long long)v);
    put(path, t);
}

static void clear(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s/proc %s/sys", root, root);
    if (system(cmd) != 0)
        tap_diag("could not clear %s", root);
}

/* 16 GiB available of 32 GiB: the machine's own headroom is the 1 GiB cap. */
static void machine(void)
{
    clear();
    put("/proc/meminfo", "MemTotal:       33554432 kB\nMemFree:         1000000 kB\nMemAvailable:   16777216 kB\n");
}

static uint64_t headroom_of(uint64_t bound)
{
    uint64_t h = bound / 16;
    return h < 64 * MIB ? 64 * MIB : h > GIB ? GIB : h;
}

static void v2_mount(const char *at)
{
    char m[512];
    snprintf(m, sizeof m,
             "22 1 0:20 / /proc rw - proc proc rw\n"
             "30 1 0:26 / %s rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
             at);
    put("/proc/self/mountinfo", m);
}

/* Checks got == want and that the words hold `word` (NULL: not checked). */
static void expect(uint64_t got, uint64_t want, const hostmem_figures *h, const char *word, const char *what)
{
    char words[600];
    hostmem_describe(h, words, sizeof words);
    tap_ok(got == want && h->available == got && (!word || strstr(words, word)),
           "%s: %llu bytes (want %llu); \"%s\"", what, (unsigned long long)got, (unsigned long long)want, words);
}

static void test_machine_only(void)
{
    hostmem_figures h;
    machine();
    uint64_t got = hostmem_available(root, &h);
    expect(got, 15 * GIB, &h, "MemAvailable 16.0 GiB", "MemAvailable alone, less the 1 GiB headroom");
    tap_ok(h.mem_total == 32 * GIB && h.cgroup_version == 0, "MemTotal read, no cgroup: %llu, v%d",
           (unsigned long long)h.mem_total, h.cgroup_version);
}

/* A user session under systemd, no cgroup namespace: the limit is on the
 * user's slice, two levels above the process's scope. */
static void test_systemd_slice(void)
{
    hostmem_figures h;
    machine();
    v2_mount("/sys/fs/cgroup");
    put("/proc/self/cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n");
    put("/sys/fs/cgroup/memory.max", "max\n"); /* not at the root */
    put("/sys/fs/cgroup/user.slice/memory.max", "max\n");
    put("/sys/fs/cgroup/user.slice/memory.current", "9000000000\n");
    putu("/sys/fs/cgroup/user.slice/user-1000.slice/memory.max", 4 * GIB);
    putu("/sys/fs/cgroup/user.slice/user-1000.slice/memory.current", GIB);
    put("/sys/fs/cgroup/user.slice/user-1000.slice/memory.stat", "anon 1000\nfile 0\ninactive_file 0\n");
    put("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/memory.max", "max\n");
    put("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/memory.current", "536870912\n");
    uint64_t got = hostmem_available(root, &h);
    expect(got, 3 * GIB - headroom_of(4 * GIB), &h, "cgroup v2 memory.max of /sys/fs/cgroup/user.slice/user-1000.slice",
           "systemd user slice, 4 GiB limit two levels up, 1 GiB used");
}

/* Slurm under v2: the job's limit is tighter than the step's own. */
static void test_slurm_v2(void)
{
    hostmem_figures h;
    machine();
    v2_mount("/sys/fs/cgroup");
    const char *job = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_5";
    char p[512];
    put("/proc/self/cgroup", "0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n");
    snprintf(p, sizeof p, "%s/memory.max", job), putu(p, 8 * GIB);
    snprintf(p, sizeof p, "%s/memory.current", job), putu(p, 6 * GIB);
    snprintf(p, sizeof p, "%s/step_0/memory.max", job), putu(p, 4 * GIB);
    snprintf(p, sizeof p, "%s/step_0/memory.current", job), putu(p, GIB);
    snprintf(p, sizeof p, "%s/step_0/user/task_0/memory.max", job), put(p, "max\n");
    snprintf(p, sizeof p, "%s/step_0/user/task_0/memory.current", job), putu(p, GIB);
    uint64_t got = hostmem_available(root, &h);
    expect(got, 2 * GIB - headroom_of(8 * GIB), &h, "memory.max of /sys/fs/cgroup/system.slice/slurmstepd.scope/job_5:",
           "Slurm v2: job 8 GiB with 6 used (2 left) above a step of 4 with 1 used (3 left): the job's");
}

/* Slurm under v1 (cgroup.conf ConstrainRAMSpace): the limit on the job. */
static void test_slurm_v1(void)
{
    hostmem_figures h;
    machine();
    put("/proc/self/mountinfo", "25 20 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                                "26 25 0:23 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                                "27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    put("/proc/self/cgroup", "5:cpu,cpuacct:/slurm/uid_1000/job_7/step_0/task_0\n"
                             "4:memory:/slurm/uid_1000/job_7/step_0/task_0\n");
    const char *base = "/sys/fs/cgroup/memory/slurm/uid_1000";
    char p[512];
    snprintf(p, sizeof p, "%s/memory.limit_in_bytes", base), put(p, "9223372036854771712\n");
    snprintf(p, sizeof p, "%s/memory.usage_in_bytes", base), putu(p, 3 * GIB);
    snprintf(p, sizeof p, "%s/job_7/memory.limit_in_bytes", base), putu(p, 2 * GIB);
    snprintf(p, sizeof p, "%s/job_7/memory.usage_in_bytes", base), putu(p, 1536 * MIB);
    snprintf(p, sizeof p, "%s/job_7/step_0/task_0/memory.limit_in_bytes", base), put(p, "9223372036854771712\n");
    snprintf(p, sizeof p, "%s/job_7/step_0/task_0/memory.usage_in_bytes", base), putu(p, 1536 * MIB);
    uint64_t got = hostmem_available(root, &h);
    expect(got, 512 * MIB - headroom_of(2 * GIB), &h, "cgroup v1 memory.limit_in_bytes of /sys/fs/cgroup/memory/slurm/uid_1000/job_7",
           "Slurm v1: the job's 2 GiB with 1.5 GiB used, under an unlimited user and task");
}

/* The reproduction: a shell moved into a v1 group of 300M. */
static void test_v1_small_group(void)
{
    hostmem_figures h;
    machine();
    put("/proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                                "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    put("/proc/self/cgroup", "4:memory:/ferry-300m\n0::/\n");
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "20000000000\n");
    putu("/sys/fs/cgroup/memory/ferry-300m/memory.limit_in_bytes", 300 * MIB);
    putu("/sys/fs/cgroup/memory/ferry-300m/memory.usage_in_bytes", 80 * MIB);
    put("/sys/fs/cgroup/memory/ferry-300m/memory.stat", "cache 0\ninactive_file 0\ntotal_inactive_file 0\n");
    uint64_t got = hostmem_available(root, &h);
    expect(got, 220 * MIB - 64 * MIB, &h, "less 64.0 MiB headroom",
           "a v1 group of 300 MiB with 80 used, beside a v2 hierarchy without memory (hybrid): 220 MiB less 64");
}

static void test_page_cache(void)
{
    hostmem_figures h;
    machine();
    v2_mount("/sys/fs/cgroup");
    put("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
    putu("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", 4 * GIB);
    putu("/sys/fs/cgroup/kubepods/pod1/c1/memory.current", 4 * GIB);
    put("/sys/fs/cgroup/kubepods/pod1/c1/memory.stat", "anon 1073741824\nfile 3221225472\nactive_file 0\n"
                                                       "inactive_file 3221225472\n");
    uint64_t got = hostmem_available(root, &h);
    expect(got, 3 * GIB - headroom_of(4 * GIB), &h, "of which 3.0 GiB page cache",
           "v2 at its 4 GiB limit, 3 GiB of it inactive page cache: 3 GiB left");
    tap_ok(h.cgroup_usage == 4 * GIB && h.cgroup_reclaimable == 3 * GIB, "usage %llu, reclaimable %llu",
           (unsigned long long)h.cgroup_usage, (unsigned long long)h.cgroup_reclaimable);

    /* v1 counts the hierarchy's page cache as total_inactive_file. */
    machine();
    put("/proc/self/cgroup", "4:memory:/job\n");
    putu("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", 2 * GIB);
    putu("/sys/fs/cgroup/memory/job/memory.usage_in_bytes", 2 * GIB);
    put("/sys/fs/cgroup/memory/job/memory.stat", "inactive_file 1\ntotal_cache 2000\ntotal_inactive_file 1073741824\n");
    got = hostmem_available(root, &h);
    expect(got, GIB - headroom_of(2 * GIB), &h, "of which 1.0 GiB page cache",
           "v1 at its 2 GiB limit, 1 GiB of total_inactive_file (no mountinfo: the usual mount)");
}

static void test_containers(void)
{
    hostmem_figures h;
    /* A cgroup namespace: the process is at its mount's root. */
    machine();
    v2_mount("/sys/fs/cgroup");
    put("/proc/self/cgroup", "0::/\n");
    putu("/sys/fs/cgroup/memory.max", 8 * GIB);
    putu("/sys/fs/cgroup/memory.current", GIB);
    uint64_t got = hostmem_available(root, &h);
    expect(got, 7 * GIB - headroom_of(8 * GIB), &h, "memory.max of /sys/fs/cgroup:", "a container with a cgroup namespace");

    /* Docker without one (v1): the mount shows the container's cgroup. */
    machine();
    put("/proc/self/mountinfo", "40 31 0:37 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
    put("/proc/self/cgroup", "4:memory:/docker/abc\n");
    putu("/sys/fs/cgroup/memory/memory.limit_in_bytes", 4 * GIB);
    putu("/sys/fs/cgroup/memory/memory.usage_in_bytes", GIB);
    got = hostmem_available(root, &h);
    expect(got, 3 * GIB - headroom_of(4 * GIB), &h, "of /sys/fs/cgroup/memory:",
           "Docker without a namespace: the mount's root is the container's path");

    /* A mount point with a space, escaped in mountinfo. */
    machine();
    put("/proc/self/mountinfo", "30 1 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n");
    put("/proc/self/cgroup", "0::/a\n");
    putu("/sys/fs/my cgroup/a/memory.max", 2 * GIB);
    putu("/sys/fs/my cgroup/a/memory.current", 0);
    got = hostmem_available(root, &h);
    expect(got, 2 * GIB - headroom_of(2 * GIB), &h, "/sys/fs/my cgroup/a", "a mount point written \\040 in mountinfo");
}

static void test_limits_and_edges(void)
{
    hostmem_figures h;
    machine();
    v2_mount("/sys/fs/cgroup");
    put("/proc/self/cgroup", "0::/svc\n");
    putu("/sys/fs/cgroup/svc/memory.max", 8 * GIB);
    putu("/sys/fs/cgroup/svc/memory.high", 6 * GIB);
    putu("/sys/fs/cgroup/svc/memory.current", GIB);
    uint64_t got = hostmem_available(root, &h);
    expect(got, 5 * GIB - headroom_of(6 * GIB), &h, "memory.high", "memory.high below memory.max is the limit");

    put("/sys/fs/cgroup/svc/memory.high", "max\n");
    put("/sys/fs/cgroup/svc/memory.max", "max\n");
    got = hostmem_available(root, &h);
    expect(got, 15 * GIB, &h, "MemAvailable", "\"max\" everywhere is no limit: MemAvailable");

    putu("/sys/fs/cgroup/svc/memory.max", 64 * GIB);
    got = hostmem_available(root, &h);
    expect(got, 15 * GIB, &h, "below every cgroup limit", "a limit above MemAvailable: MemAvailable is the smaller");

    putu("/sys/fs/cgroup/svc/memory.max", GIB);
    putu("/sys/fs/cgroup/svc/memory.current", 2 * GIB);
    got = hostmem_available(root, &h);
    expect(got, 1, &h, NULL, "a cgroup past its limit leaves nearly nothing (1, not 0 for 'unknown')");

    putu("/sys/fs/cgroup/svc/memory.max", GIB);
    putu("/sys/fs/cgroup/svc/memory.current", GIB - 32 * MIB);
    got = hostmem_available(root, &h);
    expect(got, 1, &h, NULL, "32 MiB left under a 64 MiB headroom: nearly nothing");

    clear();
    put("/sys/fs/cgroup/memory.max", "2147483648\n");
    put("/sys/fs/cgroup/memory.current", "0\n");
    got = hostmem_available(root, &h);
    expect(got, 2 * GIB - headroom_of(2 * GIB), &h, NULL, "no meminfo and no /proc/self: the cgroup at the usual mount");

    clear();
    got = hostmem_available(root, &h);
    expect(got, 0, &h, "unknown", "nothing readable: 0 (unknown)");
}

static void test_memlock(void)
{
    hostmem_figures h;
    char words[600];
    machine();
    put("/proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units     \n"
                             "Max locked memory         8388608              8388608              bytes     \n");
    put("/proc/self/status", "Name:\tx\nCapEff:\t0000000000000000\n");
    hostmem_available(root, &h);
    hostmem_describe(&h, words, sizeof words);
    tap_ok(h.memlock == 8 * MIB && !h.lock_any && strstr(words, "RLIMIT_MEMLOCK 8.0 MiB"),
           "RLIMIT_MEMLOCK of 8 MiB without CAP_IPC_LOCK is said: \"%s\"", words);
    put("/proc/self/status", "Name:\tx\nCapEff:\t000001ffffffffff\n");
    hostmem_available(root, &h);
    hostmem_describe(&h, words, sizeof words);
    tap_ok(h.lock_any && !strstr(words, "MEMLOCK"), "with CAP_IPC_LOCK it does not apply: \"%s\"", words);
    put("/proc/self/limits", "Max locked memory         unlimited            unlimited            bytes     \n");
    hostmem_available(root, &h);
    tap_ok(h.memlock == UINT64_MAX, "\"unlimited\" reads as unlimited");
}

int main(void)
{
    if (!mkdtemp(root)) {
        printf("Bail out! no temporary folder\n");
        return 1;
    }
    test_machine_only();
    test_systemd_slice();
    test_slurm_v2();
    test_slurm_v1();
    test_v1_small_group();
    test_page_cache();
    test_containers();
    test_limits_and_edges();
    test_memlock();
    clear();
    hostmem_figures h;
    char words[600];
    uint64_t got = hostmem_available(NULL, &h);
    hostmem_describe(&h, words, sizeof words);
    tap_ok(got > 0, "this machine: %s", words);
    rmdir(root);
    return tap_done();
}
