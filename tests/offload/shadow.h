/* The tests' shadow of an allocator: each live block carries a fill byte in
 * its first and last bytes, so a block that overlaps another overwrites a
 * neighbour's marks and is caught. Shared by the pool and arena tests: the
 * marks, the set of live blocks a random sequence keeps (which op comes
 * next, overlaps, a random block taken out), and the threads that
 * allocate and free at once through either allocator. What each allocator
 * charges, aligns, counts and refuses stays in its own test. */
#ifndef FERRY_TESTS_OFFLOAD_SHADOW_H
#define FERRY_TESTS_OFFLOAD_SHADOW_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"
#include "tap.h"

#define SHADOW_MARK_BYTES 64

static inline void shadow_stamp(uint8_t *ptr, size_t size, uint8_t fill)
{
    size_t n = size < SHADOW_MARK_BYTES ? size : SHADOW_MARK_BYTES;
    memset(ptr, fill, n);
    memset(ptr + size - n, fill, n);
}

static inline int shadow_intact(const uint8_t *ptr, size_t size, uint8_t fill)
{
    size_t n = size < SHADOW_MARK_BYTES ? size : SHADOW_MARK_BYTES;
    for (size_t i = 0; i < n; i++)
        if (ptr[i] != fill || ptr[size - 1 - i] != fill)
            return 0;
    return 1;
}

/* A live block as the shadow knows it: `charged` is what the allocator
 * takes for `size` (its rounding), the span no other block may touch. */
typedef struct shadow_block {
    uint8_t *ptr;
    size_t size, charged, align;
    ferry_mem_category cat;
    uint8_t fill;
} shadow_block;

/* The live blocks of a random sequence, at most cap of them. */
typedef struct shadow_set {
    shadow_block *live;
    size_t n, cap;
} shadow_set;

/* Whether the next op allocates: always with nothing live, never with cap
 * blocks live, else with probability p (a draw from state only then). */
static inline bool shadow_next_alloc(const shadow_set *s, uint64_t *state, double p)
{
    return s->n == 0 || (s->n < s->cap && tap_rand_unit(state) < p);
}

/* Adds b, stamped with its fill, and returns how many live blocks its
 * charged span overlaps. */
static inline int shadow_add(shadow_set *s, shadow_block b)
{
    int overlap = 0;
    for (size_t i = 0; i < s->n; i++)
        if (b.ptr < s->live[i].ptr + s->live[i].charged && s->live[i].ptr < b.ptr + b.charged)
            overlap++;
    shadow_stamp(b.ptr, b.size, b.fill);
    s->live[s->n++] = b;
    return overlap;
}

/* Takes a random live block out into *b (not freed); whether its marks were
 * intact. */
static inline bool shadow_take(shadow_set *s, uint64_t *state, shadow_block *b)
{
    size_t k = tap_rand_u64(state) % s->n;
    *b = s->live[k];
    s->live[k] = s->live[--s->n];
    return shadow_intact(b->ptr, b->size, b->fill);
}

/* ---- several threads at once ---- */

/* One allocator as the threads use it. */
typedef struct shadow_allocator {
    void *ctx;
    ferry_status (*alloc)(void *ctx, size_t bytes, void **out);
    ferry_status (*free)(void *ctx, void *ptr);
    uint64_t (*in_use)(void *ctx); /* the bytes its figures say are in use */
} shadow_allocator;

typedef struct shadow_worker {
    const shadow_allocator *a;
    uint64_t seed;
    size_t max_live, max_bytes;
    int errors;
} shadow_worker;

/* 3000 random allocations (1 to max_bytes bytes, at most max_live live) and
 * frees, each block's marks checked before its free, then the rest freed;
 * a failed call or a mark overwritten is an error. */
static inline void *shadow_work(void *arg)
{
    shadow_worker *w = arg;
    shadow_set set = {malloc(w->max_live * sizeof(shadow_block)), 0, w->max_live};
    if (!set.live) {
        w->errors++;
        return NULL;
    }
    uint64_t state = w->seed;
    for (int op = 0; op < 3000; op++) {
        if (shadow_next_alloc(&set, &state, 0.5)) {
            size_t size = 1 + tap_rand_u64(&state) % w->max_bytes;
            void *ptr;
            if (w->a->alloc(w->a->ctx, size, &ptr) != FERRY_OK) {
                w->errors++;
                continue;
            }
            shadow_block b = {ptr, size, 0, 0, FERRY_MEM_OTHER, (uint8_t)(w->seed + op)};
            shadow_add(&set, b); /* the marks only: charged 0 spans nothing */
        } else {
            shadow_block b;
            if (!shadow_take(&set, &state, &b) || w->a->free(w->a->ctx, b.ptr) != FERRY_OK)
                w->errors++;
        }
    }
    for (size_t i = 0; i < set.n; i++)
        if (!shadow_intact(set.live[i].ptr, set.live[i].size, set.live[i].fill) ||
            w->a->free(w->a->ctx, set.live[i].ptr) != FERRY_OK)
            w->errors++;
    free(set.live);
    return NULL;
}

/* Four threads through one allocator at once, thread i seeded with
 * seed + i * seed_step; two assertions: no call failed and no `what` (the
 * allocator's word for a block) was overwritten, and at the end nothing is
 * in use. */
static inline void shadow_threads(const shadow_allocator *a, size_t max_live, size_t max_bytes, uint64_t seed,
                                  uint64_t seed_step, const char *what)
{
    shadow_worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (shadow_worker){a, seed + seed_step * (uint64_t)i, max_live, max_bytes, 0};
        pthread_create(&th[i], NULL, shadow_work, &w[i]);
    }
    int errors = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        errors += w[i].errors;
    }
    TAP_IS_INT(errors, 0, "threads: 4 threads x 3000 ops, no failure and no overwritten %s", what);
    TAP_IS_INT(a->in_use(a->ctx), 0, "threads: nothing in use at the end");
}

#endif
