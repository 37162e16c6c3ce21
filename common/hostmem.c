/* Host memory available (see hostmem.h): finds the process's memory
 * cgroups, walks each up to its hierarchy's root reading limits, usage and
 * page cache, and takes the smallest room. Parses small text files; no
 * state, no allocation beyond the stack. */
#include "common/hostmem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/units.h"

#define HOSTMEM_PATH 1024

/* A limit this large means none (v1 writes 2^63 rounded to pages). */
#define HOSTMEM_NO_LIMIT ((uint64_t)1 << 62)

static FILE *open_in(const char *root, const char *path)
{
    char full[HOSTMEM_PATH + 256];
    snprintf(full, sizeof full, "%s%s", root ? root : "", path);
    return fopen(full, "r");
}

/* The first number in the file at root/path; false when absent or not one
 * ("max" included). */
static bool read_u64(const char *root, const char *path, uint64_t *out)
{
    FILE *f = open_in(root, path);
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

/* The value of `key` in a file of "key value" lines (memory.stat). */
static bool read_keyed(const char *root, const char *path, const char *key, uint64_t *out)
{
    FILE *f = open_in(root, path);
    if (!f)
        return false;
    char line[256];
    size_t n = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ' ')
            found = sscanf(line + n, "%" SCNu64, out) == 1;
    fclose(f);
    return found;
}

static void meminfo(const char *root, hostmem_figures *h)
{
    FILE *f = open_in(root, "/proc/meminfo");
    if (!f)
        return;
    char line[256];
    unsigned long long kib;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            h->mem_available = (uint64_t)kib * 1024;
        else if (sscanf(line, "MemTotal: %llu kB", &kib) == 1)
            h->mem_total = (uint64_t)kib * 1024;
    }
    fclose(f);
}

/* RLIMIT_MEMLOCK from /proc/self/limits, and CAP_IPC_LOCK (bit 14 of
 * CapEff) from /proc/self/status. */
static void memlock(const char *root, hostmem_figures *h)
{
    FILE *f = open_in(root, "/proc/self/limits");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        char soft[64];
        if (strncmp(line, "Max locked memory", 17) == 0 && sscanf(line + 17, "%63s", soft) == 1)
            h->memlock = strcmp(soft, "unlimited") == 0 ? UINT64_MAX : strtoull(soft, NULL, 10);
    }
    if (f)
        fclose(f);
    f = open_in(root, "/proc/self/status");
    unsigned long long caps;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            h->lock_any = (caps >> 14) & 1;
    if (f)
        fclose(f);
}

/* ---- where the cgroups are ---- */

typedef struct hierarchy {
    int version;
    char path[HOSTMEM_PATH];  /* the process's cgroup, from /proc/self/cgroup */
    char mount[HOSTMEM_PATH]; /* where the hierarchy is mounted ... */
    char mroot[HOSTMEM_PATH]; /* ... and which of its cgroups the mount shows */
} hierarchy;

/* Whether `list` (comma-separated) holds `word`. */
static bool has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, word, n) == 0 && (p[n] == ',' || p[n] == '\0' || p[n] == '\n'))
            return true;
    return false;
}

/* /proc/self/cgroup: "0::/path" (v2) and "N:memory,...:/path" (v1). */
static void own_paths(const char *root, hierarchy *v2, hierarchy *v1)
{
    FILE *f = open_in(root, "/proc/self/cgroup");
    char line[HOSTMEM_PATH + 128];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        if (strncmp(line, "0:", 2) == 0 && c1[1] == '\0')
            snprintf(v2->path, sizeof v2->path, "%s", c2 + 1);
        else if (has_word(c1 + 1, "memory"))
            snprintf(v1->path, sizeof v1->path, "%s", c2 + 1);
    }
    if (f)
        fclose(f);
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++, w++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
            *w = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w = *r;
        }
    }
    *w = '\0';
}

/* The mounts of the v2 hierarchy and of v1's memory controller, from
 * /proc/self/mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - TYPE
 * SOURCE SUPEROPTS". Without the file, the usual places. */
static void mounts(const char *root, hierarchy *v2, hierarchy *v1)
{
    FILE *f = open_in(root, "/proc/self/mountinfo");
    char line[4 * HOSTMEM_PATH];
    bool any = false;
    while (f && fgets(line, sizeof line, f)) {
        char mroot[HOSTMEM_PATH], mount[HOSTMEM_PATH], type[64], super[512] = "";
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", mroot, mount) != 2 ||
            sscanf(dash + 3, "%63s %*s %511s", type, super) < 1)
            continue;
        unescape(mroot);
        unescape(mount);
        hierarchy *h = strcmp(type, "cgroup2") == 0                              ? v2
                       : strcmp(type, "cgroup") == 0 && has_word(super, "memory") ? v1
                                                                                 : NULL;
        if (!h || h->mount[0])
            continue;
        snprintf(h->mount, sizeof h->mount, "%s", mount);
        snprintf(h->mroot, sizeof h->mroot, "%s", mroot);
        any = true;
    }
    if (f)
        fclose(f);
    if (!any) {
        snprintf(v2->mount, sizeof v2->mount, "/sys/fs/cgroup");
        snprintf(v1->mount, sizeof v1->mount, "/sys/fs/cgroup/memory");
        snprintf(v2->mroot, sizeof v2->mroot, "/");
        snprintf(v1->mroot, sizeof v1->mroot, "/");
    }
}

/* The process's cgroup as a folder under the mount: its path less the
 * cgroup the mount shows (a container's mount shows its own cgroup as the
 * root). A path outside the mount's (another namespace's view) is read at
 * the mount itself. */
static void cgroup_dir(const hierarchy *h, char *out, size_t cap)
{
    const char *path = h->path[0] ? h->path : "/";
    size_t n = strlen(h->mroot);
    if (strcmp(h->mroot, "/") == 0)
        n = 0;
    else if (strncmp(path, h->mroot, n) != 0 || (path[n] != '/' && path[n] != '\0'))
        path = "/", n = 0;
    int len = snprintf(out, cap, "%s%s", h->mount, strcmp(path + n, "/") == 0 ? "" : path + n);
    if (len < 0 || (size_t)len >= cap)
        snprintf(out, cap, "%s", h->mount); /* a path longer than a cgroup's can be: its mount */
}

/* ---- the walk ---- */

/* One level's room, if it has a limit. */
static bool level(const char *root, int version, const char *dir, hostmem_figures *lv)
{
    char p[HOSTMEM_PATH + 64];
    uint64_t limit = 0, high = 0, usage = 0, cache = 0;
    const char *file;
    if (version == 2) {
        snprintf(p, sizeof p, "%s/memory.max", dir);
        bool has_max = read_u64(root, p, &limit) && limit < HOSTMEM_NO_LIMIT;
        snprintf(p, sizeof p, "%s/memory.high", dir);
        bool has_high = read_u64(root, p, &high) && high < HOSTMEM_NO_LIMIT;
        if (!has_max && !has_high)
            return false;
        file = has_high && (!has_max || high < limit) ? "memory.high" : "memory.max";
        if (!strcmp(file, "memory.high"))
            limit = high;
        snprintf(p, sizeof p, "%s/memory.current", dir);
        if (!read_u64(root, p, &usage))
            return false;
        snprintf(p, sizeof p, "%s/memory.stat", dir);
        read_keyed(root, p, "inactive_file", &cache);
    } else {
        file = "memory.limit_in_bytes";
        snprintf(p, sizeof p, "%s/memory.limit_in_bytes", dir);
        if (!read_u64(root, p, &limit) || limit >= HOSTMEM_NO_LIMIT)
            return false;
        snprintf(p, sizeof p, "%s/memory.usage_in_bytes", dir);
        if (!read_u64(root, p, &usage))
            return false;
        snprintf(p, sizeof p, "%s/memory.stat", dir);
        read_keyed(root, p, "total_inactive_file", &cache);
    }
    if (cache > usage)
        cache = usage;
    uint64_t used = usage - cache;
    lv->cgroup_version = version;
    lv->cgroup_limit = limit;
    lv->cgroup_usage = usage;
    lv->cgroup_reclaimable = cache;
    lv->cgroup_left = limit > used ? limit - used : 1; /* at the limit: nearly nothing, not "unknown" */
    int len = snprintf(lv->cgroup_dir, sizeof lv->cgroup_dir, "%s", dir);
    if (len < 0 || (size_t)len >= sizeof lv->cgroup_dir) /* keep its end, the part that names the job */
        snprintf(lv->cgroup_dir, sizeof lv->cgroup_dir, "...%s", dir + strlen(dir) - (sizeof lv->cgroup_dir - 4));
    snprintf(lv->cgroup_file, sizeof lv->cgroup_file, "%s", file);
    return true;
}

/* From the process's cgroup up to the mount, keeping the level with the
 * least room in h. */
static void walk(const char *root, const hierarchy *hy, hostmem_figures *h)
{
    if (!hy->mount[0])
        return;
    char dir[HOSTMEM_PATH];
    cgroup_dir(hy, dir, sizeof dir);
    size_t top = strlen(hy->mount);
    for (;;) {
        hostmem_figures lv = *h;
        if (level(root, hy->version, dir, &lv) && (!h->cgroup_version || lv.cgroup_left < h->cgroup_left))
            *h = lv;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || (size_t)(slash - dir) < top)
            break;
        *slash = '\0';
    }
}

uint64_t hostmem_available(const char *root, hostmem_figures *figures)
{
    hostmem_figures h;
    memset(&h, 0, sizeof h);
    meminfo(root, &h);
    memlock(root, &h);
    hierarchy v2 = {.version = 2}, v1 = {.version = 1};
    own_paths(root, &v2, &v1);
    mounts(root, &v2, &v1);
    walk(root, &v2, &h);
    walk(root, &v1, &h);
    bool cg = h.cgroup_version != 0 && (!h.mem_available || h.cgroup_left < h.mem_available);
    uint64_t room = cg ? h.cgroup_left : h.mem_available;
    uint64_t bound = cg ? h.cgroup_limit : h.mem_total ? h.mem_total : h.mem_available;
    uint64_t headroom = bound / HOSTMEM_HEADROOM_FRACTION;
    headroom = headroom < HOSTMEM_HEADROOM_MIN ? HOSTMEM_HEADROOM_MIN
               : headroom > HOSTMEM_HEADROOM_MAX ? HOSTMEM_HEADROOM_MAX
                                                 : headroom;
    h.headroom = room ? headroom : 0;
    h.available = !room ? 0 : room > headroom ? room - headroom : 1;
    if (figures)
        *figures = h;
    return h.available;
}

void hostmem_describe(const hostmem_figures *f, char *buf, size_t cap)
{
    char a[32], l[32], u[32], c[32], r[32], m[48] = "";
    units_fmt_bytes(a, sizeof a, f->available);
    units_fmt_bytes(r, sizeof r, f->headroom);
    if (f->memlock && f->memlock != UINT64_MAX && !f->lock_any)
        snprintf(m, sizeof m, "; RLIMIT_MEMLOCK %s", units_fmt_bytes(l, sizeof l, f->memlock));
    if (!f->available) {
        snprintf(buf, cap, "host memory unknown (no /proc/meminfo, no cgroup limit)");
    } else if (f->cgroup_version && (!f->mem_available || f->cgroup_left < f->mem_available)) {
        snprintf(buf, cap, "%s available (cgroup v%d %s of %s: %s, %s in use of which %s page cache; less %s "
                 "headroom%s)",
                 a, f->cgroup_version, f->cgroup_file, f->cgroup_dir, units_fmt_bytes(l, sizeof l, f->cgroup_limit),
                 units_fmt_bytes(u, sizeof u, f->cgroup_usage), units_fmt_bytes(c, sizeof c, f->cgroup_reclaimable),
                 r, m);
    } else {
        snprintf(buf, cap, "%s available (MemAvailable %s%s; less %s headroom%s)", a,
                 units_fmt_bytes(u, sizeof u, f->mem_available), f->cgroup_version ? ", below every cgroup limit" : "",
                 r, m);
    }
}
