/* Host memory this process may still take: /proc/meminfo's MemAvailable and
 * the memory limit of its cgroup (v2 memory.max less memory.current, or v1
 * memory.limit_in_bytes less memory.usage_in_bytes), whichever is smaller.
 * Reads those files only; decides nothing. */
#ifndef FERRY_COMMON_HOSTMEM_H
#define FERRY_COMMON_HOSTMEM_H

#include <stdint.h>

/* The figures read, each 0 where its source is absent ("max" or a v1 limit
 * near 2^63 counts as absent). */
typedef struct hostmem_figures {
    uint64_t mem_available; /* MemAvailable */
    uint64_t cgroup_left;   /* the cgroup's limit less its usage */
} hostmem_figures;

/* The smaller of the figures present; 0 when none could be read. `root`
 * (NULL for "/") prefixes every path read, so tests can give a fake tree. */
uint64_t hostmem_available(const char *root, hostmem_figures *figures);

#endif
