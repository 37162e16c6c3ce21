/* The span heap (see heap.h). */
#include "offload/heap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"


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
    char name[HEAP_NAME_MAX];
};

struct hregion {
    uintptr_t base;
    size_t size;
    void *cookie;
    size_t live;
    hblock *first;
    hregion *prev, *next;
};

struct heap {
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

static size_t bucket_of(const heap *h, uintptr_t addr)
{
    return (size_t)(((uint64_t)addr * 0x9E3779B97F4A7C15ull) >> (64 - h->bucket_bits));
}

ferry_status heap_create(size_t granule, heap **out)
{
    if (!out || !is_pow2(granule))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "heap_create: granule %zu is not a power of two",
                       granule);
    heap *h = calloc(1, sizeof *h);
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

static hblock *node_new(heap *h)
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

static void node_recycle(heap *h, hblock *b)
{
    b->next = h->spare;
    h->spare = b;
}

static void free_list_push(heap *h, hblock *b)
{
    b->fprev = NULL;
    b->fnext = h->free_head;
    if (h->free_head)
        h->free_head->fprev = b;
    h->free_head = b;
}

static void free_list_remove(heap *h, hblock *b)
{
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        h->free_head = b->fnext;
    if (b->fnext)
        b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

static void hash_grow(heap *h)
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

static void hash_insert(heap *h, hblock *b)
{
    if (h->live + 1 > ((size_t)1 << h->bucket_bits))
        hash_grow(h);
    size_t k = bucket_of(h, b->addr);
    b->hnext = h->buckets[k];
    h->buckets[k] = b;
    h->live++;
}

static hblock *hash_remove(heap *h, uintptr_t addr)
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

ferry_status heap_add_region(heap *h, void *base, size_t bytes, void *cookie)
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

uint64_t heap_charge_for(size_t granule, size_t bytes)
{
    return round_up(bytes ? bytes : 1, granule);
}

uint64_t heap_charge(const heap *h, size_t bytes) { return heap_charge_for(h->granule, bytes); }
uint64_t heap_reserved(const heap *h) { return h->reserved; }
uint64_t heap_in_use(const heap *h) { return h->in_use; }

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

static hblock *best_fit(heap *h, size_t size, size_t align)
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

ferry_status heap_alloc(heap *h, size_t bytes, size_t align, ferry_mem_category category,
                             const char *name, void **out)
{
    *out = NULL;
    if (align < h->granule)
        align = h->granule;
    size_t size = heap_charge(h, bytes);
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

ferry_status heap_free(heap *h, void *ptr, heap_live *freed)
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

void heap_usage_get(const heap *h, heap_usage *u)
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

size_t heap_largest(const heap *h, heap_live *out, size_t max)
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

uint64_t heap_release_regions(heap *h, bool only_empty,
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

void heap_destroy(heap *h)
{
    if (!h)
        return;
    heap_release_regions(h, false, NULL, NULL);
    for (hblock *b = h->spare, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    free(h->buckets);
    free(h);
}

