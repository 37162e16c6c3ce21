/* The static memory planner: offsets for buffers with lifetimes, the
 * largest first, each at the best-fitting gap left by the buffers already
 * placed that are alive at the same time. A buffer that lives the whole run
 * conflicts with everything, so a plan of such buffers only is their sum
 * packed end to end; shorter lifetimes share room. Arithmetic only: it
 * allocates nothing but its scratch. */
#include "engine/memplan.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static uint64_t round_up(uint64_t x) { return (x + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

static int overlaps(const memplan_buffer *a, const memplan_buffer *b) { return a->start < b->end && b->start < a->end; }

/* Larger first; among equals the earlier start, then the earlier index
 * (the sort is made stable by the index). */
typedef struct order_key {
    uint64_t bytes;
    int32_t start;
    int index;
} order_key;

static int by_size(const void *pa, const void *pb)
{
    const order_key *a = pa, *b = pb;
    if (a->bytes != b->bytes)
        return a->bytes > b->bytes ? -1 : 1;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

typedef struct span {
    uint64_t lo, hi;
} span;

static int by_lo(const void *pa, const void *pb)
{
    const span *a = pa, *b = pb;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

ferry_status memplan_assign(memplan_buffer *b, int n, uint64_t *peak)
{
    *peak = 0;
    if (n <= 0)
        return FERRY_OK;
    for (int i = 0; i < n; i++) {
        if (b[i].start >= b[i].end || b[i].start < 0)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "memory plan: buffer '%s' lives [%d, %d), an empty lifetime",
                           b[i].name ? b[i].name : "?", (int)b[i].start, (int)b[i].end);
        if (b[i].bytes > ((uint64_t)1 << 62))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "memory plan: buffer '%s' of %llu bytes is past 2^62",
                           b[i].name ? b[i].name : "?", (unsigned long long)b[i].bytes);
        b[i].bytes = round_up(b[i].bytes);
    }
    order_key *key = malloc((size_t)n * sizeof *key);
    int *placed = malloc((size_t)n * sizeof *placed);
    span *busy = malloc((size_t)n * sizeof *busy);
    if (!key || !placed || !busy) {
        free(key);
        free(placed);
        free(busy);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memory plan of %d buffers: out of host memory", n);
    }
    for (int i = 0; i < n; i++)
        key[i] = (order_key){b[i].bytes, b[i].start, i};
    qsort(key, (size_t)n, sizeof *key, by_size);
    int nplaced = 0;
    uint64_t top = 0;
    for (int k = 0; k < n; k++) {
        memplan_buffer *x = &b[key[k].index];
        int nb = 0;
        for (int p = 0; p < nplaced; p++)
            if (overlaps(&b[placed[p]], x))
                busy[nb++] = (span){b[placed[p]].offset, b[placed[p]].offset + b[placed[p]].bytes};
        qsort(busy, (size_t)nb, sizeof *busy, by_lo);
        /* The smallest gap that holds x, scanning the busy spans in order;
         * past the last one, the region's end. */
        uint64_t at = 0, best = 0, best_gap = 0;
        bool found = false;
        for (int s = 0; s <= nb; s++) {
            uint64_t gap_end = s < nb ? busy[s].lo : UINT64_MAX;
            if (gap_end > at && gap_end - at >= x->bytes) {
                uint64_t gap = gap_end - at;
                if (!found || gap < best_gap) {
                    best_gap = gap;
                    best = at;
                    found = true;
                }
            }
            if (s < nb && busy[s].hi > at)
                at = busy[s].hi;
        }
        x->offset = best;
        if (x->offset + x->bytes > top)
            top = x->offset + x->bytes;
        placed[nplaced++] = key[k].index;
    }
    free(key);
    free(placed);
    free(busy);
    *peak = top;
    return FERRY_OK;
}

uint64_t memplan_live_max(const memplan_buffer *b, int n)
{
    /* The live sum only changes at a start: the maximum is at one of them. */
    uint64_t most = 0;
    for (int i = 0; i < n; i++) {
        uint64_t live = 0;
        for (int j = 0; j < n; j++)
            if (b[j].start <= b[i].start && b[i].start < b[j].end)
                live += round_up(b[j].bytes);
        most = live > most ? live : most;
    }
    return most;
}

int memplan_conflict(const memplan_buffer *b, int n, int *i, int *j)
{
    for (int x = 0; x < n; x++)
        for (int y = x + 1; y < n; y++)
            if (overlaps(&b[x], &b[y]) && b[x].offset < b[y].offset + b[y].bytes &&
                b[y].offset < b[x].offset + b[x].bytes) {
                *i = x;
                *j = y;
                return 1;
            }
    return 0;
}
