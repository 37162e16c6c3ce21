/* Host memory available (see hostmem.h): parses two kinds of small text
 * files; no state, no allocation beyond the stack. */
#include "common/hostmem.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first number in the file at root/path; false when absent or not one
 * ("max" included). */
static bool read_u64(const char *root, const char *path, uint64_t *out)
{
    char full[512];
    snprintf(full, sizeof full, "%s%s", root ? root : "", path);
    FILE *f = fopen(full, "r");
    if (!f)
        return false;
    char line[128] = "";
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    char *end;
    unsigned long long v = ok ? strtoull(line, &end, 10) : 0;
    if (!ok || end == line)
        return false;
    *out = (uint64_t)v;
    return true;
}

static uint64_t mem_available(const char *root)
{
    char full[512];
    snprintf(full, sizeof full, "%s/proc/meminfo", root ? root : "");
    FILE *f = fopen(full, "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(f);
    return found ? (uint64_t)kib * 1024 : 0;
}

/* A limit this large means none (v1 writes 2^63 rounded to pages). */
#define HOSTMEM_NO_LIMIT ((uint64_t)1 << 62)

static uint64_t cgroup_left(const char *root)
{
    uint64_t limit = 0, used = 0;
    bool v2 = read_u64(root, "/sys/fs/cgroup/memory.max", &limit) &&
              read_u64(root, "/sys/fs/cgroup/memory.current", &used);
    if (!v2 && !(read_u64(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", &limit) &&
                 read_u64(root, "/sys/fs/cgroup/memory/memory.usage_in_bytes", &used)))
        return 0;
    if (limit >= HOSTMEM_NO_LIMIT)
        return 0;
    return limit > used ? limit - used : 1; /* at the limit: nearly nothing, not "unknown" */
}

uint64_t hostmem_available(const char *root, hostmem_figures *figures)
{
    hostmem_figures h = {mem_available(root), cgroup_left(root)};
    if (figures)
        *figures = h;
    if (h.mem_available && h.cgroup_left)
        return h.mem_available < h.cgroup_left ? h.mem_available : h.cgroup_left;
    return h.mem_available ? h.mem_available : h.cgroup_left;
}
