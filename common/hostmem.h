/* Host memory this process may still take, as the machine and the job's own
 * cgroup say it: /proc/meminfo's MemAvailable, and every memory limit on
 * the way from the process's cgroup (/proc/self/cgroup, found through
 * /proc/self/mountinfo; cgroup v2 and v1, so a Slurm job, a systemd slice
 * or a container without a cgroup namespace is seen as itself, not as the
 * whole node) up to the hierarchy's root, the smallest room left wins. A
 * level's room is its limit (v2 memory.max, or memory.high when lower; v1
 * memory.limit_in_bytes) less its usage (memory.current, or v1's
 * memory.usage_in_bytes), the inactive page cache of memory.stat
 * (inactive_file; v1 total_inactive_file) taken back out of the usage,
 * since the kernel reclaims it before it kills (as the kubelet counts).
 *
 * The headroom: ferry's host state is pinned (mlock), which the kernel can
 * neither swap nor reclaim, so a plan that fills the room to the byte ends
 * with the OOM killer the moment the process's own heap, thread stacks or
 * libraries' buffers grow. HOSTMEM_HEADROOM_FRACTION of the bound used (the
 * limit, or MemTotal) is kept back, at least HOSTMEM_HEADROOM_MIN and at
 * most HOSTMEM_HEADROOM_MAX.
 *
 * Also read, to be said: RLIMIT_MEMLOCK (/proc/self/limits) and whether the
 * process may lock memory past it (CAP_IPC_LOCK, /proc/self/status).
 * Reads files only; decides nothing; no state. */
#ifndef FERRY_COMMON_HOSTMEM_H
#define FERRY_COMMON_HOSTMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The headroom: 1/16 of the bound, within [64 MiB, 1 GiB]. */
#define HOSTMEM_HEADROOM_FRACTION 16
#define HOSTMEM_HEADROOM_MIN ((uint64_t)64 << 20)
#define HOSTMEM_HEADROOM_MAX ((uint64_t)1 << 30)

/* What was read; 0 where a source is absent ("max", or a v1 limit near
 * 2^63, counts as absent). */
typedef struct hostmem_figures {
    uint64_t mem_available, mem_total; /* /proc/meminfo */
    /* The cgroup level with the least room (cgroup_version 0: none limits). */
    int cgroup_version;                /* 1 or 2 */
    uint64_t cgroup_limit;             /* its limit */
    uint64_t cgroup_usage;             /* its usage, page cache included ... */
    uint64_t cgroup_reclaimable;       /* ... of which inactive page cache */
    uint64_t cgroup_left;              /* limit - (usage - reclaimable); 1 at or past the limit */
    char cgroup_dir[256];              /* the level's folder, as the process sees it */
    char cgroup_file[24];              /* the limit's file: memory.max, memory.high, memory.limit_in_bytes */
    uint64_t memlock;                  /* RLIMIT_MEMLOCK's soft limit; UINT64_MAX unlimited; 0 unknown */
    bool lock_any;                     /* CAP_IPC_LOCK: the limit does not apply */
    uint64_t headroom;                 /* kept back from the bound */
    uint64_t available;                /* the answer, as hostmem_available returns it */
} hostmem_figures;

/* The room left, less the headroom: the smaller of MemAvailable's and the
 * tightest cgroup level's; 1 when the headroom takes it all (nearly
 * nothing, not "unknown"); 0 when nothing could be read. `root` (NULL for
 * "/") prefixes every path read, so tests can give a fake tree. */
uint64_t hostmem_available(const char *root, hostmem_figures *figures);

/* One phrase for a person: the bytes available and which limit gave them,
 * "3.1 GiB available (cgroup v1 memory.limit_in_bytes of /slurm/uid_1000/
 * job_5: 4.0 GiB, 700.0 MiB in use of which 100.0 MiB page cache; less
 * 256.0 MiB headroom)". */
void hostmem_describe(const hostmem_figures *f, char *buf, size_t cap);

#endif
