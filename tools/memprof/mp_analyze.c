/* Replaying a trace: live allocations by address, bytes in use by category,
 * the peak of each pool with the phase it fell in, the allocations live at
 * that moment, the timeline for the picture, and the timing records. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tools/memprof/memprof.h"

const char *mp_pool_name(int pool)
{
    return pool == TRACE_POOL_HOST ? "host" : pool == TRACE_POOL_DISK ? "disk" : "device";
}

/* An open-addressing map from address (any 64-bit value) to the index of
 * its alloc record; a slot's state says whether it is empty, used or a
 * deleted entry, so no address is reserved as a marker. */
typedef struct live_map {
    uint64_t *key;
    size_t *val;
    unsigned char *state; /* MAP_EMPTY, MAP_USED, MAP_TOMB */
    size_t cap, used, tomb;
} live_map;

enum { MAP_EMPTY = 0, MAP_USED = 1, MAP_TOMB = 2 };

static size_t slot_of(const live_map *m, uint64_t k)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & (m->cap - 1);
}

static int map_init(live_map *m, size_t cap)
{
    m->cap = cap;
    m->used = m->tomb = 0;
    m->key = malloc(cap * sizeof *m->key);
    m->val = malloc(cap * sizeof *m->val);
    m->state = calloc(cap, 1);
    return m->key && m->val && m->state;
}

static void map_free(live_map *m)
{
    free(m->key);
    free(m->val);
    free(m->state);
}

static int map_put(live_map *m, uint64_t k, size_t v);

static int map_rehash(live_map *m, size_t cap)
{
    live_map n;
    if (!map_init(&n, cap)) {
        map_free(&n);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->state[i] == MAP_USED)
            map_put(&n, m->key[i], m->val[i]);
    map_free(m);
    *m = n;
    return 1;
}

/* Returns the slot of k, or of where k would go. */
static size_t map_find(const live_map *m, uint64_t k, int *found)
{
    size_t i = slot_of(m, k), tomb = (size_t)-1;
    for (;;) {
        if (m->state[i] == MAP_USED && m->key[i] == k) {
            *found = 1;
            return i;
        }
        if (m->state[i] == MAP_EMPTY) {
            *found = 0;
            return tomb != (size_t)-1 ? tomb : i;
        }
        if (m->state[i] == MAP_TOMB && tomb == (size_t)-1)
            tomb = i;
        i = (i + 1) & (m->cap - 1);
    }
}

static int map_put(live_map *m, uint64_t k, size_t v)
{
    if ((m->used + m->tomb + 1) * 2 > m->cap && !map_rehash(m, m->used * 4 > m->cap ? m->cap * 2 : m->cap))
        return 0;
    int found;
    size_t i = map_find(m, k, &found);
    if (!found) {
        if (m->state[i] == MAP_TOMB)
            m->tomb--;
        m->used++;
    }
    m->key[i] = k;
    m->val[i] = v;
    m->state[i] = MAP_USED;
    return 1;
}

static int map_take(live_map *m, uint64_t k, size_t *v)
{
    int found;
    size_t i = map_find(m, k, &found);
    if (!found)
        return 0;
    *v = m->val[i];
    m->state[i] = MAP_TOMB;
    m->used--;
    m->tomb++;
    return 1;
}

typedef struct replay {
    live_map live;
    uint64_t cur[FERRY_MEM_CATEGORY_COUNT];
    uint64_t total;
} replay;

/* Applies record i of pool p to the replay state; returns 1 if it changed
 * the bytes in use, -1 when out of memory for the map. */
static int apply(replay *s, const mp_trace *t, size_t i, mp_pool_report *pr)
{
    const trace_record *r = &t->rec[i];
    size_t j;
    if (r->kind == TRACE_ALLOC) {
        if (map_take(&s->live, r->addr, &j)) { /* a free we never saw */
            pr->reused_addrs++;
            s->cur[t->rec[j].category] -= t->rec[j].bytes;
            s->total -= t->rec[j].bytes;
        }
        if (!map_put(&s->live, r->addr, i))
            return -1;
        s->cur[r->category] += r->bytes;
        s->total += r->bytes;
        pr->allocs++;
        return 1;
    }
    if (r->kind == TRACE_FREE) {
        pr->frees++;
        if (!map_take(&s->live, r->addr, &j)) {
            pr->unknown_frees++;
            return 0;
        }
        s->cur[t->rec[j].category] -= t->rec[j].bytes;
        s->total -= t->rec[j].bytes;
        return 1;
    }
    return 0;
}

static int by_bytes_desc(const void *a, const void *b)
{
    const mp_alloc *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Second pass: replays up to the peak record and lists what is live then. */
static ferry_status live_at_peak(const mp_trace *t, int p, size_t top, mp_pool_report *pr)
{
    replay s;
    memset(&s, 0, sizeof s);
    if (!map_init(&s.live, 1024))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
    mp_pool_report scratch;
    memset(&scratch, 0, sizeof scratch);
    for (size_t i = 0; i <= pr->peak_record; i++)
        if (t->rec[i].pool == p && apply(&s, t, i, &scratch) < 0) {
            map_free(&s.live);
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
        }
    mp_alloc *all = malloc((s.live.used ? s.live.used : 1) * sizeof *all);
    if (!all) {
        map_free(&s.live);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
    }
    size_t n = 0;
    for (size_t k = 0; k < s.live.cap; k++) {
        if (s.live.state[k] != MAP_USED)
            continue;
        const trace_record *r = &t->rec[s.live.val[k]];
        all[n].bytes = r->bytes;
        all[n].addr = r->addr;
        all[n].category = r->category;
        memcpy(all[n].name, r->name, TRACE_NAME_MAX);
        n++;
    }
    qsort(all, n, sizeof *all, by_bytes_desc);
    pr->live_at_peak = n;
    pr->nlargest = n < top ? n : top;
    memcpy(pr->largest, all, pr->nlargest * sizeof *all);
    free(all);
    map_free(&s.live);
    return FERRY_OK;
}

static ferry_status add_timing(mp_report *r, const trace_record *rec)
{
    for (size_t i = 0; i < r->ntimings; i++) {
        mp_timing *tm = &r->timings[i];
        if (strcmp(tm->key, rec->name) == 0) {
            tm->count++;
            tm->sum += rec->value;
            if (rec->value > tm->max)
                tm->max = rec->value;
            return FERRY_OK;
        }
    }
    mp_timing *nt = realloc(r->timings, (r->ntimings + 1) * sizeof *nt);
    if (!nt)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
    r->timings = nt;
    mp_timing *tm = &nt[r->ntimings++];
    memcpy(tm->key, rec->name, TRACE_NAME_MAX);
    tm->count = 1;
    tm->sum = tm->max = rec->value;
    return FERRY_OK;
}

static ferry_status add_mark(mp_report *r, const trace_record *rec)
{
    if ((r->nmarks & (r->nmarks - 1)) == 0) { /* grow at powers of two */
        mp_mark *nm = realloc(r->marks, (r->nmarks ? r->nmarks * 2 : 16) * sizeof *nm);
        if (!nm)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
        r->marks = nm;
    }
    mp_mark *m = &r->marks[r->nmarks++];
    m->t_ns = rec->t_ns;
    m->step = rec->step;
    memcpy(m->name, rec->name, TRACE_NAME_MAX);
    return FERRY_OK;
}

/* The timeline column of time t (t_start <= t <= t_end) among n columns
 * over [t_start, t_end + 1). Exact integer arithmetic, so any 64-bit time
 * is fine. */
static size_t bucket_of(uint64_t t, uint64_t t_start, uint64_t t_end, size_t n)
{
    size_t b = (size_t)((unsigned __int128)(t - t_start) * n / ((unsigned __int128)(t_end - t_start) + 1));
    return b < n ? b : n - 1;
}

/* First pass over one pool: peak, the marker it fell in, the timeline. */
static ferry_status scan_pool(const mp_trace *t, int p, mp_report *r)
{
    mp_pool_report *pr = &r->pool[p];
    replay s;
    memset(&s, 0, sizeof s);
    pr->bucket = calloc(r->nbuckets, sizeof *pr->bucket);
    uint64_t *best = calloc(r->nbuckets, sizeof *best);
    uint64_t(*end)[FERRY_MEM_CATEGORY_COUNT] = calloc(r->nbuckets, sizeof *end);
    unsigned char *have = calloc(r->nbuckets, 1);
    ferry_status st = FERRY_OK;
    if (!pr->bucket || !best || !end || !have || !map_init(&s.live, 1024)) {
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
        goto out;
    }
    int64_t step = -1;
    const char *phase = "";
    pr->peak_step = -1;
    uint64_t at_start[FERRY_MEM_CATEGORY_COUNT] = {0}; /* the state the window opens with */
    bool started = false;
    for (size_t i = 0; i < t->n; i++) {
        const trace_record *rec = &t->rec[i];
        if (!started && rec->t_ns >= r->t_start) {
            memcpy(at_start, s.cur, sizeof s.cur);
            started = true;
        }
        if (rec->kind == TRACE_PHASE) {
            step = rec->step;
            phase = rec->name;
            continue;
        }
        if (rec->pool != p)
            continue;
        pr->seen = true;
        if (rec->kind == TRACE_LIMIT)
            pr->limit = rec->bytes;
        if (rec->kind == TRACE_RESERVE && rec->bytes > pr->reserved_peak)
            pr->reserved_peak = rec->bytes;
        int changed = apply(&s, t, i, pr);
        if (changed < 0) {
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
            goto out;
        }
        if (!changed)
            continue;
        for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
            if (s.cur[c] > pr->cat_peak[c])
                pr->cat_peak[c] = s.cur[c];
        if (s.total > pr->peak) {
            pr->peak = s.total;
            pr->peak_t_ns = rec->t_ns;
            pr->peak_record = i;
            pr->peak_step = step;
            snprintf(pr->peak_phase, sizeof pr->peak_phase, "%s", phase);
            memcpy(pr->peak_by_cat, s.cur, sizeof s.cur);
        }
        if (rec->t_ns < r->t_start || rec->t_ns > r->t_end)
            continue;
        size_t b = bucket_of(rec->t_ns, r->t_start, r->t_end, r->nbuckets);
        if (!have[b] || s.total > best[b]) {
            best[b] = s.total;
            memcpy(pr->bucket[b], s.cur, sizeof s.cur);
        }
        have[b] = 1;
        memcpy(end[b], s.cur, sizeof s.cur);
    }
    pr->final_bytes = s.total;
    if (!started)
        memcpy(at_start, s.cur, sizeof s.cur);
    /* A column with no event shows the state the previous column ended in
     * (the first, the state the window opened with). */
    if (!have[0]) {
        memcpy(pr->bucket[0], at_start, sizeof at_start);
        memcpy(end[0], at_start, sizeof at_start);
    }
    for (size_t b = 1; b < r->nbuckets; b++)
        if (!have[b]) {
            memcpy(pr->bucket[b], end[b - 1], sizeof end[b]);
            memcpy(end[b], end[b - 1], sizeof end[b]);
        }
out:
    free(best);
    free(end);
    free(have);
    map_free(&s.live);
    return st;
}

static ferry_status analyze(const mp_trace *t, size_t top, size_t buckets, uint64_t t0, uint64_t t1,
                            mp_report *r);

ferry_status mp_analyze(const mp_trace *t, size_t top, size_t buckets, mp_report *r)
{
    return analyze(t, top, buckets, 0, t->n ? t->rec[t->n - 1].t_ns : 0, r);
}

ferry_status mp_analyze_window(const mp_trace *t, size_t top, size_t buckets, uint64_t t0, uint64_t t1,
                               mp_report *r)
{
    ferry_status st = analyze(t, top, buckets, t0, t1, r);
    r->window = st == FERRY_OK;
    return st;
}

ferry_status mp_step_window(const mp_trace *t, int64_t step, uint64_t *t0, uint64_t *t1)
{
    int64_t lo = INT64_MAX, hi = -1;
    bool in = false;
    for (size_t i = 0; i < t->n; i++) {
        const trace_record *rec = &t->rec[i];
        if (rec->kind != TRACE_PHASE)
            continue;
        lo = rec->step < lo ? rec->step : lo;
        hi = rec->step > hi ? rec->step : hi;
        if (!in && rec->step == step) {
            *t0 = rec->t_ns;
            in = true;
        } else if (in && rec->step > step) {
            *t1 = rec->t_ns > *t0 ? rec->t_ns - 1 : *t0; /* up to the next step's first marker, not it */
            return FERRY_OK;
        }
    }
    if (in) {
        *t1 = t->rec[t->n - 1].t_ns;
        return FERRY_OK;
    }
    if (hi < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "step %lld: the trace has no phase markers, so no steps to show",
                       (long long)step);
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "step %lld: the trace's phase markers name steps %lld to %lld",
                   (long long)step, (long long)lo, (long long)hi);
}

static ferry_status analyze(const mp_trace *t, size_t top, size_t buckets, uint64_t t0, uint64_t t1,
                            mp_report *r)
{
    memset(r, 0, sizeof *r);
    r->records = t->n;
    r->nbuckets = buckets ? buckets : 1;
    r->t_start = t0;
    r->t_end = t1 > t0 ? t1 : t0;
    if (top > MP_TOP_MAX)
        top = MP_TOP_MAX;
    ferry_status st = FERRY_OK;
    for (size_t i = 0; st == FERRY_OK && i < t->n; i++) {
        if (t->rec[i].kind == TRACE_TIMING)
            st = add_timing(r, &t->rec[i]);
        else if (t->rec[i].kind == TRACE_PHASE)
            st = add_mark(r, &t->rec[i]);
    }
    for (int p = 0; st == FERRY_OK && p < MP_POOLS; p++) {
        st = scan_pool(t, p, r);
        if (st == FERRY_OK && r->pool[p].peak > 0)
            st = live_at_peak(t, p, top, &r->pool[p]);
    }
    if (st != FERRY_OK)
        mp_report_free(r); /* the caller frees only a report it got */
    return st;
}

void mp_report_free(mp_report *r)
{
    for (int p = 0; p < MP_POOLS; p++)
        free(r->pool[p].bucket);
    free(r->timings);
    free(r->marks);
    memset(r, 0, sizeof *r);
}
