/* The device's memory plan as a trace carries it (version 3: the planned
 * region, every planned buffer, params mode's slot occupancies), and the run
 * checked against it in the order of its records. The rules are the plan's
 * own (two buffers alive at once never overlap; the arena places each at its
 * offset; a slot holds one group at a time), computed here from the records
 * alone, never by calling the engine's planner, so a wrong plan and a run
 * that strays from a right one are both caught. Owns what it allocates into
 * an mp_plan; reads an mp_trace; draws nothing (mp_svg.c does). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "offload/arena.h"
#include "tools/memprof/memprof.h"

#define NONE ((size_t)-1)
#define LIVE_END UINT64_MAX /* t_freed, t1: still live at the end of the trace */

static void say(mp_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One mismatch: counted, and said in words while there is room. */
static void say(mp_plan *p, const char *fmt, ...)
{
    if (p->mismatches < MP_PLAN_SAID) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->said[p->mismatches], sizeof p->said[0], fmt, ap);
        va_end(ap);
    }
    p->mismatches++;
}

static ferry_status out_of_memory(void) { return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory"); }

static const char *cat_name(int c) { return ferry_mem_category_name((ferry_mem_category)c); }

static bool grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? 2 * *cap : 64;
    void *g = realloc(*v, ncap * size);
    if (!g)
        return false;
    *v = g;
    *cap = ncap;
    return true;
}

/* ---- intervals alive at once, by where they start ----
 * A sorted array: a new interval is checked against its two neighbours, so
 * among intervals that do not overlap, any overlap is found. */

typedef struct span {
    uint64_t lo, hi; /* [lo, hi) */
    size_t id;
} span;

typedef struct span_set {
    span *v;
    size_t n, cap;
    bool full; /* MP_PLAN_LIVE_MAX reached: no more are followed */
} span_set;

/* The first of n spans sorted by lo whose lo is not below `lo`. */
static size_t lower_in(const span *v, size_t n, uint64_t lo)
{
    size_t a = 0, b = n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (v[m].lo < lo)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static size_t lower(const span_set *s, uint64_t lo) { return lower_in(s->v, s->n, lo); }

static uint64_t end_of(uint64_t lo, uint64_t bytes) { return bytes > UINT64_MAX - lo ? UINT64_MAX : lo + bytes; }

/* Inserts x; *clash is a live span it overlaps (NULL: none). false when out
 * of memory, or when the set is full (s->full tells which). */
static bool span_add(span_set *s, span x, span *clash, bool *clashed)
{
    *clashed = false;
    if (s->n >= MP_PLAN_LIVE_MAX) {
        s->full = true;
        return false;
    }
    if (!grow((void **)&s->v, &s->cap, s->n, sizeof *s->v))
        return false;
    size_t i = lower(s, x.lo);
    if (i > 0 && s->v[i - 1].hi > x.lo) {
        *clash = s->v[i - 1];
        *clashed = true;
    } else if (i < s->n && s->v[i].lo < x.hi && x.hi > x.lo) {
        *clash = s->v[i];
        *clashed = true;
    }
    memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof *s->v);
    s->v[i] = x;
    s->n++;
    return true;
}

/* The live span starting at lo (with id `id`, or any id: NONE); its index or NONE. */
static size_t span_find(const span_set *s, uint64_t lo, size_t id)
{
    for (size_t i = lower(s, lo); i < s->n && s->v[i].lo == lo; i++)
        if (id == NONE || s->v[i].id == id)
            return i;
    return NONE;
}

static void span_drop(span_set *s, size_t i)
{
    memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof *s->v);
    s->n--;
}

/* ---- pass 1: the region and the planned buffers ---- */

static void check_planned(mp_plan *p, const mp_planned *b)
{
    if (b->offset % ARENA_ALIGN || b->bytes % ARENA_ALIGN || b->bytes == 0)
        say(p, "'%s': planned at offset %llu with %llu bytes, not multiples of %u (the arena's alignment)", b->name,
            (unsigned long long)b->offset, (unsigned long long)b->bytes, ARENA_ALIGN);
    if (p->region_bytes && (b->offset > p->region_bytes || b->bytes > p->region_bytes - b->offset))
        say(p, "'%s': planned at [%llu, +%llu), past the end of the region of %llu bytes", b->name,
            (unsigned long long)b->offset, (unsigned long long)b->bytes, (unsigned long long)p->region_bytes);
    if (b->start < 0 || b->end <= b->start)
        say(p, "'%s': planned for schedule positions [%lld, %lld), an empty or negative lifetime", b->name,
            (long long)b->start, (long long)b->end);
}

static ferry_status add_planned(mp_plan *p, const trace_record *r, size_t *cap)
{
    if (!grow((void **)&p->buf, cap, p->nbuf, sizeof *p->buf))
        return out_of_memory();
    mp_planned *b = &p->buf[p->nbuf++];
    memset(b, 0, sizeof *b);
    b->offset = r->addr;
    b->bytes = r->bytes;
    b->category = r->category;
    b->role = r->role;
    b->start = r->step;
    /* the end is a whole position up to INT32_MAX (TRACE_FOREVER), held in a double */
    b->end = isfinite(r->value) && r->value >= -1.0 && r->value <= TRACE_FOREVER && r->value == floor(r->value)
                 ? (int64_t)r->value
                 : -1;
    memcpy(b->name, r->name, TRACE_NAME_MAX);
    b->t_freed = LIVE_END;
    p->slots += b->role == TRACE_ROLE_WSLOT || b->role == TRACE_ROLE_GSLOT;
    p->ranges += b->role == TRACE_ROLE_RANGE;
    return FERRY_OK;
}

static ferry_status read_plan(const mp_trace *t, mp_plan *p)
{
    size_t cap = 0;
    bool region = false, early = false;
    for (size_t i = 0; i < t->n; i++) {
        const trace_record *r = &t->rec[i];
        if (r->kind == TRACE_REGION && region) {
            say(p, "a second planned region (%llu bytes at 0x%llx): an engine reserves one",
                (unsigned long long)r->bytes, (unsigned long long)r->addr);
        } else if (r->kind == TRACE_REGION) {
            region = true;
            p->base = r->addr;
            p->region_bytes = r->bytes;
            p->t_region = r->t_ns;
        } else if (r->kind == TRACE_PLANNED) {
            if (!region && !early) {
                say(p, "planned buffer '%s' comes before the region's record", r->name);
                early = true;
            }
            ferry_status st = add_planned(p, r, &cap);
            if (st != FERRY_OK)
                return st;
        }
    }
    p->present = region || p->nbuf > 0;
    for (size_t i = 0; i < p->nbuf; i++)
        check_planned(p, &p->buf[i]);
    if (region && p->base > UINT64_MAX - p->region_bytes)
        say(p, "the region of %llu bytes at 0x%llx runs past the end of the address space",
            (unsigned long long)p->region_bytes, (unsigned long long)p->base);
    return FERRY_OK;
}

/* ---- pass 1b: no two planned buffers alive together overlap ---- */

typedef struct event {
    int64_t pos;
    int starts; /* 0: an end, 1: a start (ends first: lifetimes are [start, end)) */
    size_t id;
} event;

static int by_position(const void *a, const void *b)
{
    const event *x = a, *y = b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    if (x->starts != y->starts)
        return x->starts - y->starts;
    return (x->id > y->id) - (x->id < y->id);
}

static ferry_status check_conflicts(mp_plan *p)
{
    event *ev = malloc((2 * p->nbuf + 1) * sizeof *ev);
    if (!ev)
        return out_of_memory();
    size_t n = 0;
    for (size_t i = 0; i < p->nbuf; i++)
        if (p->buf[i].start >= 0 && p->buf[i].end > p->buf[i].start) {
            ev[n++] = (event){p->buf[i].start, 1, i};
            ev[n++] = (event){p->buf[i].end, 0, i};
        }
    qsort(ev, n, sizeof *ev, by_position);
    span_set s = {0};
    ferry_status st = FERRY_OK;
    for (size_t k = 0; k < n && st == FERRY_OK; k++) {
        const mp_planned *b = &p->buf[ev[k].id];
        if (!ev[k].starts) {
            size_t at = span_find(&s, b->offset, ev[k].id);
            if (at != NONE)
                span_drop(&s, at);
            continue;
        }
        span clash;
        bool clashed;
        if (!span_add(&s, (span){b->offset, end_of(b->offset, b->bytes), ev[k].id}, &clash, &clashed)) {
            if (!s.full)
                st = out_of_memory();
            else
                say(p, "more than %u planned buffers alive at once: their overlaps are not checked", MP_PLAN_LIVE_MAX);
            break;
        }
        if (clashed) {
            const mp_planned *o = &p->buf[clash.id];
            say(p, "'%s' [%llu, +%llu) and '%s' [%llu, +%llu) are planned to overlap while both alive (positions "
                "[%lld, %lld) and [%lld, %lld))",
                b->name, (unsigned long long)b->offset, (unsigned long long)b->bytes, o->name,
                (unsigned long long)o->offset, (unsigned long long)o->bytes, (long long)b->start, (long long)b->end,
                (long long)o->start, (long long)o->end);
        }
    }
    free(s.v);
    free(ev);
    return st;
}

/* ---- pass 2: the run against the plan ---- */

typedef struct run {
    mp_plan *p;
    span *by_offset;      /* the planned buffers sorted by offset: lo = the offset, id = the index */
    span_set live;        /* the device's live allocations by address: id = planned index, or nbuf + block */
    bool gave_up;         /* too many alive at once: allocations are followed no more */
    uint64_t total, in_region, dynamic;
    uint64_t *range_live, *range_peak; /* per planned buffer: what its range holds now and at most */
    size_t *open;         /* occupancies not yet vacated */
    size_t nopen, cap_open, cap_occ, cap_blocks;
} run;

static int by_start(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The first planned buffer at `off` in the offset order, or p->nbuf. */
static size_t first_at(const run *x, uint64_t off) { return lower_in(x->by_offset, x->p->nbuf, off); }

static bool is_live(const mp_planned *b) { return b->placed && b->t_freed == LIVE_END; }

/* The planned buffer (not a range) an allocation at `off` takes: of those
 * starting there and not alive, the one of its name, else of its size and
 * category, else the first; NONE when none starts there. */
static size_t match_planned(const run *x, uint64_t off, const trace_record *r)
{
    size_t best = NONE, rank = 0;
    for (size_t k = first_at(x, off); k < x->p->nbuf && x->by_offset[k].lo == off; k++) {
        size_t i = x->by_offset[k].id;
        const mp_planned *b = &x->p->buf[i];
        if (b->role == TRACE_ROLE_RANGE)
            continue;
        size_t score = 1 + !is_live(b) * 4 + (strcmp(b->name, r->name) == 0) * 2 +
                       (b->bytes == r->bytes && b->category == r->category);
        if (score > rank) {
            best = i;
            rank = score;
        }
    }
    return best;
}

/* The embedder's range an allocation of [off, +bytes) lies in, or NONE. */
static size_t range_of(const mp_plan *p, uint64_t off, uint64_t bytes)
{
    for (size_t i = 0; i < p->nbuf; i++) {
        const mp_planned *b = &p->buf[i];
        if (b->role == TRACE_ROLE_RANGE && off >= b->offset && off - b->offset <= b->bytes &&
            bytes <= b->bytes - (off - b->offset))
            return i;
    }
    return NONE;
}

/* Says where an allocation that matches no planned buffer should have been. */
static void say_misplaced(mp_plan *p, const trace_record *r, uint64_t off)
{
    if (p->mismatches >= MP_PLAN_SAID) { /* counted only: no search */
        p->mismatches++;
        return;
    }
    size_t same = NONE, below = NONE;
    for (size_t i = 0; i < p->nbuf; i++) {
        const mp_planned *b = &p->buf[i];
        if (b->role != TRACE_ROLE_RANGE && strcmp(b->name, r->name) == 0 && (same == NONE || !b->placed))
            same = i;
        if (b->offset <= off && (below == NONE || b->offset > p->buf[below].offset))
            below = i;
    }
    if (same != NONE) {
        const mp_planned *b = &p->buf[same];
        say(p, "'%s': planned at offset %llu (%llu bytes, %s), traced at offset %llu (%llu bytes, %s)", r->name,
            (unsigned long long)b->offset, (unsigned long long)b->bytes, cat_name(b->category),
            (unsigned long long)off, (unsigned long long)r->bytes, cat_name(r->category));
    } else {
        say(p, "'%s' (%llu bytes, %s) at offset %llu of the region: no planned buffer starts there%s%s%s", r->name,
            (unsigned long long)r->bytes, cat_name(r->category), (unsigned long long)off,
            below != NONE ? " (the nearest below: '" : "", below != NONE ? p->buf[below].name : "",
            below != NONE ? "')" : "");
    }
}

static ferry_status add_block(run *x, const trace_record *r, bool in_region, size_t *out)
{
    mp_plan *p = x->p;
    if (!grow((void **)&p->blocks, &x->cap_blocks, p->nblocks, sizeof *p->blocks))
        return out_of_memory();
    mp_block *k = &p->blocks[p->nblocks];
    memset(k, 0, sizeof *k);
    k->addr = r->addr;
    k->bytes = r->bytes;
    k->category = r->category;
    k->in_region = in_region;
    k->t0 = r->t_ns;
    k->t1 = LIVE_END;
    memcpy(k->name, r->name, TRACE_NAME_MAX);
    *out = p->nblocks++;
    return FERRY_OK;
}

static const char *live_name(const run *x, size_t id)
{
    return id < x->p->nbuf ? x->p->buf[id].name : x->p->blocks[id - x->p->nbuf].name;
}

/* Adds or takes bytes (never below 0: a hostile trace may free more than it allocated). */
static void move(uint64_t *v, uint64_t bytes, bool add) { *v = add ? *v + bytes : *v - (bytes < *v ? bytes : *v); }

static void account(run *x, bool in_region, size_t range, uint64_t bytes, bool add)
{
    move(&x->total, bytes, add);
    move(in_region ? &x->in_region : &x->dynamic, bytes, add);
    if (range != NONE) {
        move(&x->range_live[range], bytes, add);
        if (x->range_live[range] > x->range_peak[range])
            x->range_peak[range] = x->range_live[range];
    }
    mp_plan *p = x->p;
    if (x->total > p->device_peak)
        p->device_peak = x->total;
    if (x->dynamic > p->dynamic_peak)
        p->dynamic_peak = x->dynamic;
    if (x->in_region > p->region_peak)
        p->region_peak = x->in_region;
}

static bool in_region(const mp_plan *p, uint64_t addr)
{
    return p->present && p->region_bytes && addr >= p->base && addr - p->base < p->region_bytes;
}

static void release(run *x, size_t at, uint64_t t_ns);

/* An allocation on the device: a planned buffer at its offset, the
 * embedder's inside its range, or the dynamic heap's outside the region. */
static ferry_status on_alloc(run *x, const trace_record *r)
{
    mp_plan *p = x->p;
    bool inside = in_region(p, r->addr);
    uint64_t end = end_of(r->addr, r->bytes), off = r->addr - p->base;
    if (p->present && p->region_bytes &&
        ((inside && r->bytes > p->region_bytes - off) || (!inside && r->addr < p->base && end > p->base)))
        say(p, "'%s' (%llu bytes at 0x%llx) straddles the edge of the planned region [0x%llx, +%llu)", r->name,
            (unsigned long long)r->bytes, (unsigned long long)r->addr, (unsigned long long)p->base,
            (unsigned long long)p->region_bytes);
    size_t at = span_find(&x->live, r->addr, NONE); /* a free the trace never had: the older one goes */
    if (at != NONE)
        release(x, at, r->t_ns);
    size_t id = NONE, range = NONE, block = NONE;
    ferry_status st = FERRY_OK;
    if (inside) {
        id = match_planned(x, off, r);
        mp_planned *b = id != NONE ? &p->buf[id] : NULL;
        if (b && (b->bytes != r->bytes || b->category != r->category))
            say(p, "'%s' at offset %llu: planned with %llu bytes of %s, traced with %llu bytes of %s ('%s')", b->name,
                (unsigned long long)off, (unsigned long long)b->bytes, cat_name(b->category),
                (unsigned long long)r->bytes, cat_name(r->category), r->name);
        if (b) {
            if (!b->placed)
                b->t_placed = r->t_ns;
            b->placed = true;
            b->t_freed = LIVE_END;
        } else if ((range = range_of(p, off, r->bytes)) == NONE) {
            say_misplaced(p, r, off);
        }
    }
    if (id == NONE) {
        if ((st = add_block(x, r, inside, &block)) != FERRY_OK)
            return st;
        id = p->nbuf + block;
    }
    account(x, inside, range, r->bytes, true);
    span clash;
    bool clashed;
    if (!span_add(&x->live, (span){r->addr, end, id}, &clash, &clashed)) {
        if (!x->live.full)
            return out_of_memory();
        say(p, "more than %u device allocations alive at once: the check follows no more of them", MP_PLAN_LIVE_MAX);
        x->gave_up = true;
        return FERRY_OK;
    }
    if (clashed)
        say(p, "'%s' [0x%llx, +%llu) overlaps '%s' [0x%llx, +%llu), both alive", r->name, (unsigned long long)r->addr,
            (unsigned long long)r->bytes, live_name(x, clash.id), (unsigned long long)clash.lo,
            (unsigned long long)(clash.hi - clash.lo));
    return FERRY_OK;
}

/* The live allocation at index `at` of the live set goes. */
static void release(run *x, size_t at, uint64_t t_ns)
{
    mp_plan *p = x->p;
    span s = x->live.v[at];
    span_drop(&x->live, at);
    bool inside;
    uint64_t bytes;
    size_t range = NONE;
    if (s.id < p->nbuf) {
        p->buf[s.id].t_freed = t_ns;
        inside = true;
        bytes = s.hi - s.lo;
    } else {
        mp_block *k = &p->blocks[s.id - p->nbuf];
        k->t1 = t_ns;
        inside = k->in_region;
        bytes = k->bytes;
        if (inside)
            range = range_of(p, k->addr - p->base, k->bytes);
    }
    account(x, inside, range, bytes, false);
}

static void on_free(run *x, const trace_record *r)
{
    size_t at = span_find(&x->live, r->addr, NONE);
    if (at != NONE)
        release(x, at, r->t_ns);
}

/* The slot at addr: a planned slot (*slot), or a live dynamic allocation (*block). */
static bool slot_at(const run *x, uint64_t addr, size_t *slot, size_t *block)
{
    const mp_plan *p = x->p;
    *slot = *block = NONE;
    if (in_region(p, addr)) {
        uint64_t off = addr - p->base;
        for (size_t k = first_at(x, off); k < p->nbuf && x->by_offset[k].lo == off; k++) {
            const mp_planned *b = &p->buf[x->by_offset[k].id];
            if (b->role == TRACE_ROLE_WSLOT || b->role == TRACE_ROLE_GSLOT) {
                *slot = x->by_offset[k].id;
                return true;
            }
        }
        return false;
    }
    size_t at = x->gave_up ? NONE : span_find(&x->live, addr, NONE);
    if (at != NONE && x->live.v[at].id >= p->nbuf)
        *block = x->live.v[at].id - p->nbuf;
    return *block != NONE;
}

static void slot_words(const run *x, const mp_occupancy *o, char *buf, size_t cap)
{
    if (o->slot != NONE)
        snprintf(buf, cap, "'%s' at offset %llu", x->p->buf[o->slot].name,
                 (unsigned long long)x->p->buf[o->slot].offset);
    else
        snprintf(buf, cap, "'%s' at 0x%llx (outside the region)", x->p->blocks[o->block].name,
                 (unsigned long long)o->addr);
}

/* What an occupancy asks of its slot: it is one, of its kind, with room,
 * placed, and held by no one else; the group holds no other of its kind. */
static void check_occupy(run *x, const mp_occupancy *o)
{
    mp_plan *p = x->p;
    char where[200];
    slot_words(x, o, where, sizeof where);
    uint64_t room = o->slot != NONE ? p->buf[o->slot].bytes : p->blocks[o->block].bytes;
    int cat = o->slot != NONE ? p->buf[o->slot].category : p->blocks[o->block].category;
    if (cat != o->category)
        say(p, "'%s' puts its %s in slot %s, a slot of %s", o->name, cat_name(o->category), where, cat_name(cat));
    if (o->bytes > room)
        say(p, "'%s' puts %llu bytes in slot %s of %llu bytes", o->name, (unsigned long long)o->bytes, where,
            (unsigned long long)room);
    if (o->slot != NONE && !is_live(&p->buf[o->slot]))
        say(p, "'%s' takes slot %s, which is not placed then", o->name, where);
    for (size_t k = 0; k < x->nopen; k++) {
        const mp_occupancy *h = &p->occ[x->open[k]];
        if (h->addr == o->addr)
            say(p, "'%s' (group %lld) takes slot %s at %.3f ms while '%s' (group %lld) holds it since %.3f ms",
                o->name, (long long)o->group, where, (double)o->t0 / 1e6, h->name, (long long)h->group,
                (double)h->t0 / 1e6);
        else if (h->group == o->group && h->category == o->category) {
            char other[200];
            slot_words(x, h, other, sizeof other);
            say(p, "'%s' (group %lld) takes slot %s while it holds slot %s", o->name, (long long)o->group, where,
                other);
        }
    }
}

static ferry_status on_occupy(run *x, const trace_record *r)
{
    mp_plan *p = x->p;
    size_t slot, block;
    if (!slot_at(x, r->addr, &slot, &block)) {
        say(p, "'%s' (group %lld) takes a %s slot at 0x%llx (offset %lld of the region), where no slot is planned",
            r->name, (long long)r->step, cat_name(r->category), (unsigned long long)r->addr,
            in_region(p, r->addr) ? (long long)(r->addr - p->base) : -1LL);
        return FERRY_OK;
    }
    if (!grow((void **)&p->occ, &x->cap_occ, p->nocc, sizeof *p->occ) ||
        !grow((void **)&x->open, &x->cap_open, x->nopen, sizeof *x->open))
        return out_of_memory();
    mp_occupancy *o = &p->occ[p->nocc];
    *o = (mp_occupancy){.slot = slot, .block = block, .addr = r->addr, .bytes = r->bytes, .category = r->category,
                        .group = r->step, .t0 = r->t_ns, .t1 = LIVE_END};
    memcpy(o->name, r->name, TRACE_NAME_MAX);
    check_occupy(x, o);
    x->open[x->nopen++] = p->nocc++;
    return FERRY_OK;
}

static void on_vacate(run *x, const trace_record *r)
{
    mp_plan *p = x->p;
    for (size_t k = 0; k < x->nopen; k++) {
        mp_occupancy *o = &p->occ[x->open[k]];
        if (o->addr != r->addr || o->group != r->step)
            continue;
        if (o->bytes != r->bytes || o->category != r->category)
            say(p, "'%s' (group %lld) gives back %llu bytes of %s from the slot at 0x%llx, having taken %llu of %s",
                r->name, (long long)r->step, (unsigned long long)r->bytes, cat_name(r->category),
                (unsigned long long)r->addr, (unsigned long long)o->bytes, cat_name(o->category));
        o->t1 = r->t_ns;
        x->open[k] = x->open[--x->nopen];
        return;
    }
    say(p, "'%s' (group %lld) gives back the slot at 0x%llx at %.3f ms, which it does not hold", r->name,
        (long long)r->step, (unsigned long long)r->addr, (double)r->t_ns / 1e6);
}

/* Every planned buffer placed; the peak the region plus the dynamic heap's. */
static void check_end(run *x)
{
    mp_plan *p = x->p;
    for (size_t i = 0; i < p->nbuf; i++) {
        const mp_planned *b = &p->buf[i];
        if (b->role != TRACE_ROLE_RANGE && !b->placed)
            say(p, "'%s' (%llu bytes of %s at offset %llu) is planned but was never placed", b->name,
                (unsigned long long)b->bytes, cat_name(b->category), (unsigned long long)b->offset);
    }
    if (x->gave_up || p->device_peak == p->region_bytes + p->dynamic_peak)
        return;
    char why[200] = "";
    size_t len = 0;
    if (p->region_peak < p->region_bytes)
        len += (size_t)snprintf(why, sizeof why, "; the region held at most %llu of its bytes at once",
                                (unsigned long long)p->region_peak);
    else
        len += (size_t)snprintf(why, sizeof why, "; the dynamic heap's peak came while part of the region was free");
    for (size_t i = 0; i < p->nbuf && len < sizeof why; i++)
        if (p->buf[i].role == TRACE_ROLE_RANGE && x->range_peak[i] < p->buf[i].bytes)
            len += (size_t)snprintf(why + len, sizeof why - len, " ('%s' held at most %llu of its %llu)",
                                    p->buf[i].name, (unsigned long long)x->range_peak[i],
                                    (unsigned long long)p->buf[i].bytes);
    say(p, "the device peak of %llu bytes is not the planned region's %llu plus the dynamic heap's peak of %llu%s",
        (unsigned long long)p->device_peak, (unsigned long long)p->region_bytes,
        (unsigned long long)p->dynamic_peak, why);
}

static ferry_status replay(const mp_trace *t, mp_plan *p)
{
    run x = {.p = p};
    x.by_offset = malloc((p->nbuf + 1) * sizeof *x.by_offset);
    x.range_live = calloc(p->nbuf + 1, sizeof *x.range_live);
    x.range_peak = calloc(p->nbuf + 1, sizeof *x.range_peak);
    ferry_status st = x.by_offset && x.range_live && x.range_peak ? FERRY_OK : out_of_memory();
    for (size_t i = 0; st == FERRY_OK && i < p->nbuf; i++)
        x.by_offset[i] = (span){p->buf[i].offset, end_of(p->buf[i].offset, p->buf[i].bytes), i};
    if (st == FERRY_OK)
        qsort(x.by_offset, p->nbuf, sizeof *x.by_offset, by_start);
    for (size_t i = 0; st == FERRY_OK && i < t->n; i++) {
        const trace_record *r = &t->rec[i];
        if (r->kind == TRACE_OCCUPY)
            st = on_occupy(&x, r);
        else if (r->kind == TRACE_VACATE)
            on_vacate(&x, r);
        else if (r->pool != TRACE_POOL_DEVICE || x.gave_up)
            continue;
        else if (r->kind == TRACE_ALLOC)
            st = on_alloc(&x, r);
        else if (r->kind == TRACE_FREE)
            on_free(&x, r);
    }
    if (st == FERRY_OK)
        check_end(&x);
    free(x.by_offset);
    free(x.range_live);
    free(x.range_peak);
    free(x.live.v);
    free(x.open);
    return st;
}

ferry_status mp_plan_check(const mp_trace *t, mp_plan *p)
{
    memset(p, 0, sizeof *p);
    ferry_status st = read_plan(t, p);
    if (st == FERRY_OK && !p->present) {
        if (t->version < 3)
            snprintf(p->absent, sizeof p->absent,
                     "a version-%u trace: traces carry the device's memory plan from version 3 on", t->version);
        else
            snprintf(p->absent, sizeof p->absent,
                     "the engine planned no device buffer: the trace has no region record");
        return FERRY_OK;
    }
    if (st == FERRY_OK)
        st = check_conflicts(p);
    if (st == FERRY_OK)
        st = replay(t, p);
    if (st != FERRY_OK)
        mp_plan_free(p);
    return st;
}

void mp_plan_free(mp_plan *p)
{
    free(p->buf);
    free(p->occ);
    free(p->blocks);
    memset(p, 0, sizeof *p);
}
