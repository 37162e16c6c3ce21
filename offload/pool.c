/* The pinned host pool and the span heap it shares with the device arena.
 * The heap: regions cut into address-ordered blocks; free blocks sit on one
 * list searched best-fit; live blocks are found by address through a hash
 * table; a freed block merges with free neighbours at once, so a region with
 * nothing live is one free block again. The pool: mmap'd slabs (2 MiB
 * aligned for transparent huge pages), bound to a NUMA node with hwloc,
 * page-locked with mlock or the cuda backend's host registration. */
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

/* ---------------------------------------------------------------- heap */

typedef struct hregion hregion;
typedef struct hblock hblock;

struct hblock {
    uintptr_t addr;
    size_t size;
    hblock *prev, *next;   /* neighbours in address order within the region */
    hblock *fprev, *fnext; /* the free list, while free */
    hblock *hnext;         /* the hash chain, while live */
    hregion *region;
    bool live;
    ferry_mem_category category;
    char name[POOL_HEAP_NAME_MAX];
};

struct hregion {
    uintptr_t base;
    size_t size;
    void *cookie;
    size_t live;
    hblock *first;
    hregion *prev, *next;
};

struct pool_heap {
    size_t granule;
    hregion *regions;
    hblock *free_head;
    hblock **buckets;
    size_t bucket_bits;
    size_t live;
    hblock *spare; /* recycled block nodes, chained through `next` */
    uint64_t reserved, in_use;
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }
static bool is_pow2(size_t v) { return v && !(v & (v - 1)); }

static size_t bucket_of(const pool_heap *h, uintptr_t addr)
{
    return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> (64 - h->bucket_bits));
}

ferry_status pool_heap_create(size_t granule, pool_heap **out)
{
    if (!out || !is_pow2(granule))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pool_heap_create: granule %zu is not a power of two",
                       granule);
    pool_heap *h = calloc(1, sizeof *h);
    if (h) {
        h->bucket_bits = 10;
        h->buckets = calloc((size_t)1 << h->bucket_bits, sizeof *h->buckets);
    }
    if (!h || !h->buckets) {
        free(h);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "span heap: cannot allocate its bookkeeping");
    }
    h->granule = granule;
    *out = h;
    return FERRY_OK;
}

static hblock *node_new(pool_heap *h)
{
    hblock *b = h->spare;
    if (b)
        h->spare = b->next;
    else
        b = malloc(sizeof *b);
    if (b)
        memset(b, 0, offsetof(hblock, name) + 1);
    return b;
}

static void node_recycle(pool_heap *h, hblock *b)
{
    b->next = h->spare;
    h->spare = b;
}

static void free_list_push(pool_heap *h, hblock *b)
{
    b->fprev = NULL;
    b->fnext = h->free_head;
    if (h->free_head)
        h->free_head->fprev = b;
    h->free_head = b;
}

static void free_list_remove(pool_heap *h, hblock *b)
{
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        h->free_head = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

static void hash_grow(pool_heap *h)
{
    size_t old_n = (size_t)1 << h->bucket_bits;
    hblock **nb = calloc(old_n * 2, sizeof *nb);
    if (!nb)
        return; /* longer chains, still correct */
    hblock **old = h->buckets;
    h->buckets = nb;
    h->bucket_bits++;
    for (size_t i = 0; i < old_n; i++) {
        for (hblock *b = old[i], *nx; b; b = nx) {
            nx = b->hnext;
            size_t k = bucket_of(h, b->addr);
            b->hnext = h->buckets[k];
            h->buckets[k] = b;
        }
    }
    free(old);
}

static void hash_insert(pool_heap *h, hblock *b)
{
    if (h->live + 1 > ((size_t)1 << h->bucket_bits))
        hash_grow(h);
    size_t k = bucket_of(h, b->addr);
    b->hnext = h->buckets[k];
    h->buckets[k] = b;
    h->live++;
}

static hblock *hash_remove(pool_heap *h, uintptr_t addr)
{
    hblock **pp = &h->buckets[bucket_of(h, addr)];
    for (; *pp; pp = &(*pp)->hnext) {
        if ((*pp)->addr == addr) {
            hblock *b = *pp;
            *pp = b->hnext;
            b->hnext = NULL;
            h->live--;
            return b;
        }
    }
    return NULL;
}

ferry_status pool_heap_add_region(pool_heap *h, void *base, size_t bytes, void *cookie)
{
    uintptr_t a = (uintptr_t)base;
    if (!h || !base || bytes == 0 || (a & (h->granule - 1)) || (bytes & (h->granule - 1)))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "span heap: region %p of %zu bytes is not aligned to the granule %zu", base, bytes,
                       h ? h->granule : 0);
    hregion *r = calloc(1, sizeof *r);
    hblock *b = node_new(h);
    if (!r || !b) {
        free(r);
        if (b)
            node_recycle(h, b);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "span heap: cannot allocate its bookkeeping");
    }
    r->base = a;
    r->size = bytes;
    r->cookie = cookie;
    r->first = b;
    r->next = h->regions;
    if (h->regions)
        h->regions->prev = r;
    h->regions = r;
    b->addr = a;
    b->size = bytes;
    b->region = r;
    free_list_push(h, b);
    h->reserved += bytes;
    return FERRY_OK;
}

uint64_t pool_heap_charge(const pool_heap *h, size_t bytes)
{
    return round_up(bytes ? bytes : 1, h->granule);
}

/* Links a fresh node n into the address list right after b. */
static void insert_after(hblock *b, hblock *n)
{
    n->region = b->region;
    n->prev = b;
    n->next = b->next;
    if (b->next)
        b->next->prev = n;
    b->next = n;
}

static hblock *best_fit(pool_heap *h, size_t size, size_t align)
{
    hblock *best = NULL;
    for (hblock *b = h->free_head; b; b = b->fnext) {
        uintptr_t a = (b->addr + align - 1) & ~(uintptr_t)(align - 1);
        if (a + size > b->addr + b->size)
            continue;
        if (!best || b->size < best->size) {
            best = b;
            if (b->size == size && a == b->addr)
                break;
        }
    }
    return best;
}

ferry_status pool_heap_alloc(pool_heap *h, size_t bytes, size_t align, ferry_mem_category category,
                             const char *name, void **out)
{
    *out = NULL;
    if (align < h->granule)
        align = h->granule;
    size_t size = pool_heap_charge(h, bytes);
    hblock *b = best_fit(h, size, align);
    if (!b)
        return FERRY_OK;
    uintptr_t a = (b->addr + align - 1) & ~(uintptr_t)(align - 1);
    size_t lead = a - b->addr, tail = b->size - lead - size;
    /* Take both possible nodes before changing anything, so a failure leaves
     * the heap as it was. */
    hblock *ln = lead ? node_new(h) : NULL;
    hblock *tn = tail ? node_new(h) : NULL;
    if ((lead && !ln) || (tail && !tn)) {
        if (ln)
            node_recycle(h, ln);
        if (tn)
            node_recycle(h, tn);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "span heap: cannot allocate its bookkeeping");
    }
    if (lead) {
        /* ln takes b's place in the address order as the free lead gap. */
        ln->addr = b->addr;
        ln->size = lead;
        ln->region = b->region;
        ln->prev = b->prev;
        ln->next = b;
        if (b->prev)
            b->prev->next = ln;
        else
            b->region->first = ln;
        b->prev = ln;
        free_list_push(h, ln);
        b->addr = a;
        b->size -= lead;
    }
    if (tail) {
        tn->addr = a + size;
        tn->size = tail;
        insert_after(b, tn);
        free_list_push(h, tn);
        b->size = size;
    }
    free_list_remove(h, b);
    b->live = true;
    b->category = category;
    snprintf(b->name, sizeof b->name, "%s", name ? name : "");
    hash_insert(h, b);
    b->region->live++;
    h->in_use += size;
    *out = (void *)a;
    return FERRY_OK;
}

static void unlink_block(hblock *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        b->region->first = b->next;
    if (b->next)
        b->next->prev = b->prev;
}

ferry_status pool_heap_free(pool_heap *h, void *ptr, pool_heap_live *freed)
{
    hblock *b = hash_remove(h, (uintptr_t)ptr);
    if (!b)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%p is not a live allocation (freed twice, or never handed out here)", ptr);
    if (freed) {
        freed->ptr = ptr;
        freed->bytes = b->size;
        freed->category = b->category;
        memcpy(freed->name, b->name, sizeof freed->name);
    }
    b->live = false;
    b->region->live--;
    h->in_use -= b->size;
    hblock *prev = b->prev, *next = b->next;
    if (prev && !prev->live) {
        prev->size += b->size;
        unlink_block(b);
        node_recycle(h, b);
        b = prev;
    } else {
        free_list_push(h, b);
    }
    if (next && !next->live) {
        b->size += next->size;
        free_list_remove(h, next);
        unlink_block(next);
        node_recycle(h, next);
    }
    return FERRY_OK;
}

void pool_heap_usage_get(const pool_heap *h, pool_heap_usage *u)
{
    memset(u, 0, sizeof *u);
    u->reserved = h->reserved;
    u->in_use = h->in_use;
    u->free = h->reserved - h->in_use;
    u->live = h->live;
    for (const hblock *b = h->free_head; b; b = b->fnext)
        if (b->size > u->largest_free)
            u->largest_free = b->size;
    for (const hregion *r = h->regions; r; r = r->next) {
        u->regions++;
        if (r->live == 0)
            u->empty_regions_bytes += r->size;
    }
}

size_t pool_heap_largest(const pool_heap *h, pool_heap_live *out, size_t max)
{
    size_t n = 0;
    if (max == 0)
        return 0;
    for (size_t k = 0; k < ((size_t)1 << h->bucket_bits); k++) {
        for (const hblock *b = h->buckets[k]; b; b = b->hnext) {
            if (n == max && b->size <= out[n - 1].bytes)
                continue;
            size_t i = n < max ? n++ : max - 1; /* insertion into the sorted top list */
            while (i > 0 && out[i - 1].bytes < b->size) {
                out[i] = out[i - 1];
                i--;
            }
            out[i].ptr = (void *)b->addr;
            out[i].bytes = b->size;
            out[i].category = b->category;
            memcpy(out[i].name, b->name, sizeof out[i].name);
        }
    }
    return n;
}

uint64_t pool_heap_release_regions(pool_heap *h, bool only_empty,
                                   void (*release)(void *ctx, void *base, size_t bytes, void *cookie),
                                   void *ctx)
{
    uint64_t removed = 0;
    for (hregion *r = h->regions, *nx; r; r = nx) {
        nx = r->next;
        if (only_empty && r->live)
            continue;
        for (hblock *b = r->first, *bn; b; b = bn) {
            bn = b->next;
            if (b->live) {
                hash_remove(h, b->addr);
                h->in_use -= b->size;
            } else {
                free_list_remove(h, b);
            }
            node_recycle(h, b);
        }
        if (r->prev)
            r->prev->next = r->next;
        else
            h->regions = r->next;
        if (r->next)
            r->next->prev = r->prev;
        h->reserved -= r->size;
        removed += r->size;
        if (release)
            release(ctx, (void *)r->base, r->size, r->cookie);
        free(r);
    }
    return removed;
}

void pool_heap_destroy(pool_heap *h)
{
    if (!h)
        return;
    pool_heap_release_regions(h, false, NULL, NULL);
    for (hblock *b = h->spare, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    free(h->buckets);
    free(h);
}

/* ---------------------------------------------------------------- pool */

#define SLAB_DEFAULT ((size_t)256 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct slab {
    bool pinned;
    bool cuda_registered;
} slab;

struct pool {
    pthread_mutex_t mu;
    pool_heap *heap;
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
    ferry_status st = pool_heap_create(POOL_MIN_ALIGN, &p->heap);
    if (st == FERRY_OK && cfg->numa_node >= 0)
        st = bind_numa_node(p, cfg->numa_node);
    if (st != FERRY_OK) {
        if (p->topo)
            hwloc_topology_destroy(p->topo);
        pool_heap_destroy(p->heap);
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
    if (p->cfg.pin == POOL_PIN_TRY)
        pin_slab(p, base, bytes, s);
    st = pool_heap_add_region(p->heap, base, bytes, s);
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
    trace_reserve(p->cfg.trace, TRACE_POOL_HOST, p->heap->reserved);
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
                   "reserved); raise the pinned memory budget, or offload optimizer state to NVMe",
                   units_fmt_bytes(lim, sizeof lim, p->cfg.limit_bytes), ferry_mem_category_name(cat), name,
                   units_fmt_bytes(ask, sizeof ask, bytes), units_fmt_bytes(use, sizeof use, p->heap->in_use),
                   len ? parts : "nothing else", units_fmt_bytes(res, sizeof res, p->heap->reserved));
}

/* Obtains a slab that fits `need` bytes, within the limit. Empty slabs are
 * given back first when that is what makes the request fit. */
static ferry_status grow(pool *p, size_t need, size_t bytes, ferry_mem_category cat, const char *name)
{
    size_t slab = need > p->slab_bytes ? round_up(need, need >= HUGE_PAGE ? HUGE_PAGE : POOL_MIN_ALIGN)
                                       : p->slab_bytes;
    uint64_t limit = p->cfg.limit_bytes;
    if (limit) {
        uint64_t room = limit > p->heap->reserved ? limit - p->heap->reserved : 0;
        if (need > room) {
            pool_heap_usage u;
            pool_heap_usage_get(p->heap, &u);
            if (need > room + u.empty_regions_bytes)
                return refuse(p, bytes, cat, name);
            pool_heap_release_regions(p->heap, true, unmap_slab, p);
            trace_reserve(p->cfg.trace, TRACE_POOL_HOST, p->heap->reserved);
            room = limit - p->heap->reserved;
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
    ferry_status st = pool_heap_alloc(p->heap, bytes, align, category, name, &ptr);
    if (st == FERRY_OK && !ptr) {
        size_t charge = (size_t)pool_heap_charge(p->heap, bytes);
        /* A slab starts 2 MiB (or 4 KiB) aligned; a larger alignment may cost a lead gap. */
        size_t need = charge + (align > POOL_MIN_ALIGN ? align - POOL_MIN_ALIGN : 0);
        st = grow(p, need, bytes, category, name);
        if (st == FERRY_OK)
            st = pool_heap_alloc(p->heap, bytes, align, category, name, &ptr);
        if (st == FERRY_OK && !ptr) /* cannot happen: the new slab fits `need` */
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "pinned host pool: no span fits %zu bytes after growing", bytes);
    }
    if (st == FERRY_OK) {
        uint64_t charge = pool_heap_charge(p->heap, bytes);
        p->cat[category] += charge;
        if (p->heap->in_use > p->peak)
            p->peak = p->heap->in_use;
        trace_alloc(p->cfg.trace, TRACE_POOL_HOST, category, name, charge, ptr);
        *out = ptr;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

ferry_status pool_free(pool *p, void *ptr)
{
    if (!p)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "pool_free: NULL pool");
    if (!ptr)
        return FERRY_OK;
    pool_heap_live f;
    pthread_mutex_lock(&p->mu);
    ferry_status st = pool_heap_free(p->heap, ptr, &f);
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
    pool_heap_usage u;
    pthread_mutex_lock(&p->mu);
    pool_heap_usage_get(p->heap, &u);
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
    uint64_t r = pool_heap_release_regions(p->heap, true, unmap_slab, p);
    if (r)
        trace_reserve(p->cfg.trace, TRACE_POOL_HOST, p->heap->reserved);
    pthread_mutex_unlock(&p->mu);
    return r;
}

void pool_destroy(pool *p)
{
    if (!p)
        return;
    pool_heap_release_regions(p->heap, false, unmap_slab, p);
    pool_heap_destroy(p->heap);
    if (p->topo)
        hwloc_topology_destroy(p->topo);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
