/* The pinned host pool (see pool.h): mmap'd slabs (2 MiB aligned for
 * transparent huge pages), bound to a NUMA node with hwloc, page-locked with
 * mlock or the cuda backend's host registration, cut up by the span heap. */
#include "offload/pool.h"

#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/error.h"
#include "common/units.h"

static size_t round_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }
static bool is_pow2(size_t v) { return v && !(v & (v - 1)); }

uint64_t pool_charge(size_t bytes) { return heap_charge_for(POOL_MIN_ALIGN, bytes); }



#define SLAB_DEFAULT ((size_t)256 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct slab {
    bool pinned;
    bool cuda_registered;
} slab;

struct pool {
    pthread_mutex_t mu;
    heap *heap;
    pool_config cfg;
    size_t slab_bytes;
    hwloc_topology_t topo;
    hwloc_obj_t node; /* NULL: first touch */
    uint64_t peak, pinned, unpinned;
    uint64_t cat[FERRY_MEM_CATEGORY_COUNT];
    char note[512];
};

static atomic_flag pin_warned = ATOMIC_FLAG_INIT;

static ferry_status bind_numa_node(pool *p, int node)
{
    if (hwloc_topology_init(&p->topo) != 0 || hwloc_topology_load(p->topo) != 0)
        return err_set(FERRY_ERR_BACKEND, "pinned host pool: hwloc cannot read this machine's topology");
    int n = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_NUMANODE);
    p->node = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_NUMANODE, (unsigned)node);
    if (!p->node)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "pinned host pool: NUMA node %d does not exist; this machine has %d (0..%d), "
                       "or pass -1 to place memory where it is first touched",
                       node, n, n - 1);
    return FERRY_OK;
}

ferry_status pool_create(const pool_config *cfg, pool **out)
{
    if (!cfg || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pool_create: NULL config or out");
    *out = NULL;
    if (cfg->numa_node < -1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "pinned host pool: NUMA node %d is not valid (a node index, or -1 for first touch)",
                       cfg->numa_node);
    if (cfg->pin != POOL_PIN_TRY && cfg->pin != POOL_PIN_NEVER)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pinned host pool: pin mode %d unknown", (int)cfg->pin);
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "pinned host pool: cannot allocate its bookkeeping");
    p->cfg = *cfg;
    size_t s = cfg->slab_bytes ? cfg->slab_bytes : SLAB_DEFAULT;
    p->slab_bytes = round_up(s, s >= HUGE_PAGE ? HUGE_PAGE : POOL_MIN_ALIGN);
    ferry_status st = heap_create(POOL_MIN_ALIGN, &p->heap);
    if (st == FERRY_OK && cfg->numa_node >= 0)
        st = bind_numa_node(p, cfg->numa_node);
    if (st != FERRY_OK) {
        if (p->topo)
            hwloc_topology_destroy(p->topo);
        heap_destroy(p->heap);
        free(p);
        return st;
    }
    pthread_mutex_init(&p->mu, NULL);
    trace_limit(cfg->trace, TRACE_POOL_HOST, cfg->limit_bytes);
    *out = p;
    return FERRY_OK;
}

static void note_refusal(pool *p, size_t bytes, const char *how, int e)
{
    if (p->note[0])
        return;
    char b[32], lim[32] = "unlimited";
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        units_fmt_bytes(lim, sizeof lim, (uint64_t)rl.rlim_cur);
    units_fmt_bytes(b, sizeof b, bytes);
    snprintf(p->note, sizeof p->note,
             "ferry: pinned host pool: %s of %s refused (%s; RLIMIT_MEMLOCK is %s), so host memory "
             "stays pageable and copies to the GPU are slower; raise the limit with `ulimit -l "
             "unlimited` or a memlock line in /etc/security/limits.conf, or run as root / with "
             "CAP_IPC_LOCK",
             how, b, strerror(e), lim);
    if (!atomic_flag_test_and_set(&pin_warned))
        fprintf(stderr, "%s\n", p->note);
}

static void pin_slab(pool *p, void *base, size_t bytes, slab *s)
{
    backend *be = p->cfg.be;
    if (be && backend_kind(be) == FERRY_BACKEND_CUDA) {
        if (backend_host_register(be, base, bytes) == FERRY_OK) {
            s->pinned = s->cuda_registered = true;
            return;
        }
        note_refusal(p, bytes, "cudaHostRegister", ENOMEM);
        return;
    }
    /* The raw system call: sanitizer runtimes replace mlock() with a no-op
     * that reports success, which would hide a refusal. */
    if (syscall(SYS_mlock, base, bytes) == 0)
        s->pinned = true;
    else
        note_refusal(p, bytes, "mlock", errno);
}

static ferry_status map_slab(pool *p, size_t bytes, void **base_out)
{
    size_t slack = bytes >= HUGE_PAGE ? HUGE_PAGE : 0;
    char *m = mmap(NULL, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        char b[32];
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "pinned host pool: the OS refused a slab of %s: %s",
                       units_fmt_bytes(b, sizeof b, bytes), strerror(errno));
    }
    char *base = m;
    if (slack) {
        /* Trim to a 2 MiB boundary so transparent huge pages can back it. */
        base = (char *)round_up((uintptr_t)m, HUGE_PAGE);
        if (base > m)
            munmap(m, (size_t)(base - m));
        size_t after = (size_t)((m + bytes + slack) - (base + bytes));
        if (after)
            munmap(base + bytes, after);
        madvise(base, bytes, MADV_HUGEPAGE); /* a hint: refused on kernels without THP */
    }
    if (p->node) /* before mlock, which faults the pages in; failure leaves first touch */
        hwloc_set_area_membind(p->topo, base, bytes, p->node->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET);
    *base_out = base;
    return FERRY_OK;
}

static void unmap_slab(void *ctx, void *base, size_t bytes, void *cookie)
{
    pool *p = ctx;
    slab *s = cookie;
    if (s->cuda_registered)
        backend_host_unregister(p->cfg.be, base);
    if (s->pinned)
        p->pinned -= bytes;
    else
        p->unpinned -= bytes;
    munmap(base, bytes); /* also unlocks */
    free(s);
}

/* Faults a fresh slab's pages in on every core at once before it is pinned:
 * mlock and cudaHostRegister fault them in on one thread, which for GPT-2
 * XL's 23 GiB of host state is most of setup. Placement still follows the
 * slab's NUMA binding. Best effort: a thread that cannot start leaves its
 * share to the pin. */
typedef struct prefault_part {
    char *base;
    size_t bytes;
} prefault_part;

static void *prefault_run(void *arg)
{
    prefault_part *part = arg;
    for (size_t at = 0; at < part->bytes; at += POOL_MIN_ALIGN)
        ((volatile char *)part->base)[at] = 0;
    return NULL;
}

enum { PREFAULT_MIN_BYTES = 64 << 20, PREFAULT_MAX_THREADS = 64 };

static void prefault(void *base, size_t bytes)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = bytes / PREFAULT_MIN_BYTES;
    if (cpus < 2 || n < 2)
        return;
    if (n > (size_t)cpus)
        n = (size_t)cpus;
    if (n > PREFAULT_MAX_THREADS)
        n = PREFAULT_MAX_THREADS;
    pthread_t tid[PREFAULT_MAX_THREADS];
    prefault_part part[PREFAULT_MAX_THREADS];
    bool started[PREFAULT_MAX_THREADS] = {false};
    size_t share = (bytes / n + POOL_MIN_ALIGN - 1) / POOL_MIN_ALIGN * POOL_MIN_ALIGN;
    for (size_t i = 0; i < n; i++) {
        size_t at = i * share;
        part[i] = (prefault_part){(char *)base + at, at >= bytes ? 0 : (bytes - at < share ? bytes - at : share)};
        started[i] = pthread_create(&tid[i], NULL, prefault_run, &part[i]) == 0;
    }
    for (size_t i = 0; i < n; i++)
        if (started[i])
            pthread_join(tid[i], NULL);
}

static ferry_status add_slab(pool *p, size_t bytes)
{
    slab *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "pinned host pool: cannot allocate its bookkeeping");
    void *base = NULL;
    ferry_status st = map_slab(p, bytes, &base);
    if (st != FERRY_OK) {
        free(s);
        return st;
    }
    if (p->cfg.pin == POOL_PIN_TRY) {
        prefault(base, bytes);
        pin_slab(p, base, bytes, s);
    }
    st = heap_add_region(p->heap, base, bytes, s);
    if (st != FERRY_OK) {
        if (s->cuda_registered)
            backend_host_unregister(p->cfg.be, base);
        munmap(base, bytes);
        free(s);
        return st;
    }
    if (s->pinned)
        p->pinned += bytes;
    else
        p->unpinned += bytes;
    trace_reserve(p->cfg.trace, TRACE_POOL_HOST, heap_reserved(p->heap));
    return FERRY_OK;
}

static ferry_status refuse(pool *p, size_t bytes, ferry_mem_category cat, const char *name)
{
    char lim[32], ask[32], use[32], res[32];
    char parts[512] = "";
    size_t len = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT && len < sizeof parts; c++) {
        if (!p->cat[c])
            continue;
        char b[32];
        len += (size_t)snprintf(parts + len, sizeof parts - len, "%s%s %s", len ? ", " : "",
                                ferry_mem_category_name((ferry_mem_category)c),
                                units_fmt_bytes(b, sizeof b, p->cat[c]));
    }
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "pinned host pool limit %s exhausted: %s '%s' asked %s with %s in use (%s; %s "
                   "reserved); raise host_budget_bytes, or offload optimizer state to NVMe",
                   units_fmt_bytes(lim, sizeof lim, p->cfg.limit_bytes), ferry_mem_category_name(cat), name,
                   units_fmt_bytes(ask, sizeof ask, bytes), units_fmt_bytes(use, sizeof use, heap_in_use(p->heap)),
                   len ? parts : "nothing else", units_fmt_bytes(res, sizeof res, heap_reserved(p->heap)));
}

/* Obtains a slab that fits `need` bytes, within the limit. Empty slabs are
 * given back first when that is what makes the request fit. */
static ferry_status grow(pool *p, size_t need, size_t bytes, ferry_mem_category cat, const char *name)
{
    size_t slab = need > p->slab_bytes ? round_up(need, need >= HUGE_PAGE ? HUGE_PAGE : POOL_MIN_ALIGN)
                                       : p->slab_bytes;
    uint64_t limit = p->cfg.limit_bytes;
    if (limit) {
        uint64_t room = limit > heap_reserved(p->heap) ? limit - heap_reserved(p->heap) : 0;
        if (need > room) {
            heap_usage u;
            heap_usage_get(p->heap, &u);
            if (need > room + u.empty_regions_bytes)
                return refuse(p, bytes, cat, name);
            heap_release_regions(p->heap, true, unmap_slab, p);
            trace_reserve(p->cfg.trace, TRACE_POOL_HOST, heap_reserved(p->heap));
            room = limit - heap_reserved(p->heap);
        }
        if (slab > room)
            slab = (size_t)room & ~(size_t)(POOL_MIN_ALIGN - 1);
    }
    return add_slab(p, slab);
}

ferry_status pool_alloc(pool *p, size_t bytes, size_t align, ferry_mem_category category,
                        const char *name, void **out)
{
    if (!p || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pool_alloc: NULL pool or out");
    *out = NULL;
    if ((unsigned)category >= FERRY_MEM_CATEGORY_COUNT)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pinned host pool: category %d is not a ferry_mem_category",
                       (int)category);
    if (align && !is_pow2(align))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "pinned host pool: alignment %zu for '%s' is not a power of two", align,
                       name ? name : "");
    if (bytes > ((size_t)1 << 56))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "pinned host pool: %s '%s' asked %zu bytes, more than any machine has",
                       ferry_mem_category_name(category), name ? name : "", bytes);
    if (!name)
        name = "";
    if (align < POOL_MIN_ALIGN)
        align = POOL_MIN_ALIGN;
    pthread_mutex_lock(&p->mu);
    void *ptr = NULL;
    ferry_status st = heap_alloc(p->heap, bytes, align, category, name, &ptr);
    if (st == FERRY_OK && !ptr) {
        size_t charge = (size_t)heap_charge(p->heap, bytes);
        /* A slab starts 2 MiB (or 4 KiB) aligned; a larger alignment may cost a lead gap. */
        size_t need = charge + (align > POOL_MIN_ALIGN ? align - POOL_MIN_ALIGN : 0);
        st = grow(p, need, bytes, category, name);
        if (st == FERRY_OK)
            st = heap_alloc(p->heap, bytes, align, category, name, &ptr);
        if (st == FERRY_OK && !ptr) /* cannot happen: the new slab fits `need` */
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "pinned host pool: no span fits %zu bytes after growing", bytes);
    }
    if (st == FERRY_OK) {
        uint64_t charge = heap_charge(p->heap, bytes);
        p->cat[category] += charge;
        if (heap_in_use(p->heap) > p->peak)
            p->peak = heap_in_use(p->heap);
        trace_alloc(p->cfg.trace, TRACE_POOL_HOST, category, name, charge, ptr);
        *out = ptr;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

ferry_status pool_reserve(pool *p, size_t bytes, const char *what)
{
    if (!p)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pool_reserve: NULL pool");
    if (!bytes)
        return FERRY_OK;
    pthread_mutex_lock(&p->mu);
    ferry_status st = grow(p, bytes, bytes, FERRY_MEM_OTHER, what ? what : "");
    pthread_mutex_unlock(&p->mu);
    return st;
}

ferry_status pool_free(pool *p, void *ptr)
{
    if (!p)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pool_free: NULL pool");
    if (!ptr)
        return FERRY_OK;
    heap_live f;
    pthread_mutex_lock(&p->mu);
    ferry_status st = heap_free(p->heap, ptr, &f);
    if (st == FERRY_OK) {
        p->cat[f.category] -= f.bytes;
        trace_free(p->cfg.trace, TRACE_POOL_HOST, f.category, f.name, f.bytes, ptr);
    }
    pthread_mutex_unlock(&p->mu);
    if (st != FERRY_OK)
        return err_wrap(st, "pinned host pool: cannot free");
    return FERRY_OK;
}

void pool_stats(pool *p, ferry_memory_stats *st)
{
    heap_usage u;
    pthread_mutex_lock(&p->mu);
    heap_usage_get(p->heap, &u);
    st->host_limit_bytes = p->cfg.limit_bytes;
    st->host_reserved_bytes = u.reserved;
    st->host_in_use_bytes = u.in_use;
    st->host_peak_bytes = p->peak;
    st->host_pinned_bytes = p->pinned;
    st->host_unpinned_bytes = p->unpinned;
    st->host_fragmentation = u.free ? 1.0 - (double)u.largest_free / (double)u.free : 0.0;
    pthread_mutex_unlock(&p->mu);
}

uint64_t pool_category_bytes(pool *p, ferry_mem_category category)
{
    if ((unsigned)category >= FERRY_MEM_CATEGORY_COUNT)
        return 0;
    pthread_mutex_lock(&p->mu);
    uint64_t v = p->cat[category];
    pthread_mutex_unlock(&p->mu);
    return v;
}

const char *pool_pinning_note(pool *p, char *buf, size_t cap)
{
    pthread_mutex_lock(&p->mu);
    snprintf(buf, cap, "%s", p->note);
    pthread_mutex_unlock(&p->mu);
    return buf;
}

uint64_t pool_trim(pool *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t r = heap_release_regions(p->heap, true, unmap_slab, p);
    if (r)
        trace_reserve(p->cfg.trace, TRACE_POOL_HOST, heap_reserved(p->heap));
    pthread_mutex_unlock(&p->mu);
    return r;
}

void pool_destroy(pool *p)
{
    if (!p)
        return;
    heap_release_regions(p->heap, false, unmap_slab, p);
    heap_destroy(p->heap);
    if (p->topo)
        hwloc_topology_destroy(p->topo);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
