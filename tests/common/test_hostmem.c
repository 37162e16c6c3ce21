/* The host memory available (common/hostmem.c) read from fake trees: only
 * /proc/meminfo; a cgroup v2 limit below it; v2 with no limit ("max"); a
 * v1 limit; v1's "no limit" (2^63 rounded to pages); a cgroup at its limit;
 * nothing readable. The expectations are the files' numbers, worked out
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hostmem.h"
#include "tap.h"

static char root[] = "/tmp/ferry-test-hostmem-XXXXXX";

static void put(const char *path, const char *text)
{
    char full[512], dir[512];
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

static void clear(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s/proc %s/sys", root, root);
    if (system(cmd) != 0)
        tap_diag("could not clear %s", root);
}

#define GIB ((uint64_t)1 << 30)

int main(void)
{
    if (!mkdtemp(root)) {
        printf("Bail out! no temporary folder\n");
        return 1;
    }
    const char *meminfo = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   16777216 kB\n";
    hostmem_figures h;

    put("/proc/meminfo", meminfo);
    uint64_t got = hostmem_available(root, &h);
    tap_ok(got == 16 * GIB && h.mem_available == 16 * GIB && h.cgroup_left == 0,
           "MemAvailable alone: %llu (16 GiB)", (unsigned long long)got);

    put("/sys/fs/cgroup/memory.max", "8589934592\n");
    put("/sys/fs/cgroup/memory.current", "1073741824\n");
    got = hostmem_available(root, &h);
    tap_ok(got == 7 * GIB && h.cgroup_left == 7 * GIB, "a v2 limit of 8 GiB with 1 GiB used: %llu (7 GiB)",
           (unsigned long long)got);

    put("/sys/fs/cgroup/memory.max", "max\n");
    got = hostmem_available(root, &h);
    tap_ok(got == 16 * GIB && h.cgroup_left == 0, "v2 \"max\" is no limit: %llu (16 GiB)", (unsigned long long)got);

    put("/sys/fs/cgroup/memory.max", "68719476736\n"); /* 64 GiB, above what the machine has */
    got = hostmem_available(root, NULL);
    tap_ok(got == 16 * GIB, "a v2 limit above MemAvailable: the smaller, %llu (16 GiB)", (unsigned long long)got);

    put("/sys/fs/cgroup/memory.max", "1073741824\n");
    put("/sys/fs/cgroup/memory.current", "2147483648\n");
    got = hostmem_available(root, NULL);
    tap_ok(got == 1, "a cgroup past its limit leaves nearly nothing (not 'unknown'): %llu", (unsigned long long)got);

    clear();
    put("/proc/meminfo", meminfo);
    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "4294967296\n");
    put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "1073741824\n");
    got = hostmem_available(root, &h);
    tap_ok(got == 3 * GIB && h.cgroup_left == 3 * GIB, "a v1 limit of 4 GiB with 1 GiB used: %llu (3 GiB)",
           (unsigned long long)got);

    put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    got = hostmem_available(root, NULL);
    tap_ok(got == 16 * GIB, "v1's 2^63 rounded to pages is no limit: %llu (16 GiB)", (unsigned long long)got);

    clear();
    put("/sys/fs/cgroup/memory.max", "2147483648\n");
    put("/sys/fs/cgroup/memory.current", "0\n");
    got = hostmem_available(root, &h);
    tap_ok(got == 2 * GIB && h.mem_available == 0, "no meminfo: the cgroup's figure, %llu (2 GiB)",
           (unsigned long long)got);

    clear();
    got = hostmem_available(root, &h);
    tap_ok(got == 0 && h.mem_available == 0 && h.cgroup_left == 0, "nothing readable: 0 (unknown)");

    got = hostmem_available(NULL, &h);
    tap_ok(got > 0, "this machine: %llu bytes available (MemAvailable %llu, cgroup %llu)", (unsigned long long)got,
           (unsigned long long)h.mem_available, (unsigned long long)h.cgroup_left);
    rmdir(root);
    return tap_done();
}
