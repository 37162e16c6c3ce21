/* The collective ledger of this rank (backend/comm.h, "the ledger"): the
 * running hash of every collective issued, the ring of the last ones, the
 * words a caller's all-reduce carries to compare the ranks' hashes, and,
 * when they differ, the gather of the rings that names the first
 * collective that differs. Owns nothing but that state; who writes an
 * entry is the collectives' business (comm_host.c, comm_nccl.c and the
 * control plane of comm_world.c). */
#include "backend/comm_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"

static struct {
    pthread_mutex_t lock;
    uint64_t count, hash;
    uint64_t offered; /* the hash comm_ledger_words gave last: the caller's all-reduce comes after it */
    comm_entry ring[COMM_LEDGER_RING];
} L = {PTHREAD_MUTEX_INITIALIZER, 0, 0x6c65646765722121ull, 0, {{0}}};

/* splitmix64's finalizer: every input bit moves every output bit. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t fold(uint64_t h, uint64_t v) { return mix(h ^ mix(v + 0x9e3779b97f4a7c15ull)); }

uint64_t comm_entry_hash(uint64_t h, const comm_entry *e)
{
    h = fold(h, e->seq);
    h = fold(h, (uint64_t)(uint32_t)e->op | (uint64_t)(uint32_t)e->dtype << 32);
    h = fold(h, (uint64_t)(uint32_t)e->tag | (uint64_t)(uint32_t)e->root << 32);
    h = fold(h, e->count);
    for (size_t i = 0; i < sizeof e->channel && e->channel[i]; i++)
        h = fold(h, (unsigned char)e->channel[i]);
    return h;
}

comm_entry comm_ledger_write(const char *channel, comm_op op, int tag, uint64_t count, int dtype, int root)
{
    comm_entry e;
    memset(&e, 0, sizeof e);
    e.op = op;
    e.dtype = dtype;
    e.tag = tag < 0 ? -1 : tag;
    e.root = root < 0 ? -1 : root;
    e.count = count;
    snprintf(e.channel, sizeof e.channel, "%s", channel ? channel : "");
    pthread_mutex_lock(&L.lock);
    e.seq = L.count++;
    e.hash_before = L.hash;
    L.hash = comm_entry_hash(L.hash, &e);
    L.ring[e.seq % COMM_LEDGER_RING] = e;
    pthread_mutex_unlock(&L.lock);
    return e;
}

void comm_ledger_state(uint64_t *count, uint64_t *hash)
{
    pthread_mutex_lock(&L.lock);
    if (count)
        *count = L.count;
    if (hash)
        *hash = L.hash;
    pthread_mutex_unlock(&L.lock);
}

static const char *op_words(int op)
{
    static const char *words[COMM_OP_COUNT] = {"an all-reduce", "a reduce-scatter", "an all-gather", "a broadcast",
                                               "an all-gather"};
    return op >= 0 && op < COMM_OP_COUNT ? words[op] : "an unknown collective";
}

static void describe(const comm_entry *e, const char *number, char *out, size_t cap)
{
    char tag[32] = "", root[32] = "";
    if (e->tag >= 0)
        snprintf(tag, sizeof tag, ", group %d", (int)e->tag);
    if (e->root >= 0)
        snprintf(root, sizeof root, " from rank %d", (int)e->root);
    if (e->dtype == 0)
        snprintf(out, cap, "%s%s of '%s' (%s%llu bytes%s)", op_words(e->op), root, e->channel, number,
                 (unsigned long long)e->count, tag);
    else
        snprintf(out, cap, "%s%s of '%s' (%s%llu %s%s)", op_words(e->op), root, e->channel, number,
                 (unsigned long long)e->count, dtype_name((ferry_dtype)e->dtype), tag);
}

void comm_entry_describe(const comm_entry *e, char *out, size_t cap)
{
    char number[48];
    snprintf(number, sizeof number, "collective #%llu: ", (unsigned long long)e->seq);
    describe(e, number, out, cap);
}

/* ---- comparing the ranks' ledgers ---- */

static uint64_t piece(uint64_t h, int i) { return (h >> (16 * i)) & 0xffffu; }

void comm_ledger_words(double *words)
{
    pthread_mutex_lock(&L.lock);
    uint64_t h = L.offered = L.hash;
    pthread_mutex_unlock(&L.lock);
    for (int i = 0; i < 4; i++) {
        double x = (double)piece(h, i);
        words[2 * i] = x;
        words[2 * i + 1] = x * x;
    }
}

/* Rank p's entry number s, or NULL when p does not have it (beyond its
 * count, or older than its ring). */
static const comm_entry *entry_at(const comm_ledger_view *v, uint64_t s)
{
    if (s >= v->count || v->count - s > COMM_LEDGER_RING)
        return NULL;
    const comm_entry *e = &v->ring[s % COMM_LEDGER_RING];
    return e->seq == s ? e : NULL;
}

static bool same_entry(const comm_entry *a, const comm_entry *b)
{
    if (!a || !b)
        return a == b;
    return a->op == b->op && a->dtype == b->dtype && a->tag == b->tag && a->root == b->root &&
           a->count == b->count && a->hash_before == b->hash_before && strcmp(a->channel, b->channel) == 0;
}

/* "ranks 0, 2 issued X; rank 1 issued nothing more (57 collectives in
 * all)": the ranks grouped by what they have at number s. */
static void name_groups(const comm_ledger_view *v, int n, uint64_t s, char *out, size_t cap)
{
    bool *said = calloc((size_t)n, sizeof *said);
    size_t at = 0;
    out[0] = '\0';
    for (int p = 0; p < n && said && at + 64 < cap; p++) {
        if (said[p])
            continue;
        const comm_entry *e = entry_at(&v[p], s);
        int members = 0;
        char ranks[256] = "";
        size_t rl = 0;
        for (int q = p; q < n; q++) {
            if (said[q] || !same_entry(e, entry_at(&v[q], s)))
                continue;
            said[q] = true;
            members++;
            if (rl + 16 < sizeof ranks)
                rl += (size_t)snprintf(ranks + rl, sizeof ranks - rl, "%s%d", rl ? ", " : "", q);
        }
        char what[256];
        if (e)
            describe(e, "", what, sizeof what);
        else
            snprintf(what, sizeof what, "nothing more (%llu collectives in all)", (unsigned long long)v[p].count);
        at += (size_t)snprintf(out + at, cap - at, "%srank%s %s issued %s", at ? "; " : "", members > 1 ? "s" : "",
                               ranks, what);
    }
    free(said);
}

void comm_ledger_first_difference(const comm_ledger_view *v, int n, char *out, size_t cap)
{
    uint64_t lo = 0, hi = 0;
    for (int p = 0; p < n; p++) {
        uint64_t first = v[p].count > COMM_LEDGER_RING ? v[p].count - COMM_LEDGER_RING : 0;
        lo = first > lo ? first : lo;
        hi = v[p].count > hi ? v[p].count : hi;
    }
    for (uint64_t s = lo; s < hi; s++) {
        const comm_entry *e0 = entry_at(&v[0], s);
        bool differ = false;
        for (int p = 1; p < n && !differ; p++)
            differ = !same_entry(e0, entry_at(&v[p], s));
        if (!differ)
            continue;
        bool fields_equal = true;
        for (int p = 1; p < n && fields_equal; p++) {
            const comm_entry *e = entry_at(&v[p], s);
            fields_equal = e0 && e && e0->op == e->op && e0->dtype == e->dtype && e0->tag == e->tag &&
                           e0->root == e->root && e0->count == e->count && strcmp(e0->channel, e->channel) == 0;
        }
        if (!fields_equal) {
            char groups[ERR_MESSAGE_MAX - 160];
            name_groups(v, n, s, groups, sizeof groups);
            snprintf(out, cap, "the first that differs is collective #%llu: %s", (unsigned long long)s, groups);
            return;
        }
        break; /* alike here, different before: older than the rings */
    }
    snprintf(out, cap,
             "they differ before collective #%llu, older than the last %d each rank keeps (counts: rank 0 %llu, "
             "rank %d %llu)",
             (unsigned long long)lo, COMM_LEDGER_RING, (unsigned long long)v[0].count, n - 1,
             (unsigned long long)v[n - 1].count);
}

ferry_status comm_ledger_verify(const double *summed)
{
    int n = comm_world_size();
    if (n == 1)
        return FERRY_OK;
    comm_ledger_view mine;
    pthread_mutex_lock(&L.lock);
    mine.count = L.count;
    mine.hash = L.hash;
    uint64_t offered = L.offered;
    memcpy(mine.ring, L.ring, sizeof mine.ring);
    pthread_mutex_unlock(&L.lock);
    bool alike = true;
    for (int i = 0; i < 4 && alike; i++) {
        double x = (double)piece(offered, i);
        alike = summed[2 * i] == (double)n * x && summed[2 * i + 1] == (double)n * x * x;
    }
    if (alike)
        return FERRY_OK;
    /* Every rank is here: gather the views and name the difference. */
    comm_ledger_view *all = calloc((size_t)n, sizeof *all);
    size_t *at = calloc((size_t)n, sizeof *at), *bytes = calloc((size_t)n, sizeof *bytes);
    ferry_status st = all && at && bytes ? FERRY_OK
                                         : err_set(FERRY_ERR_OUT_OF_MEMORY,
                                                   "comparing the ranks' collectives: out of host memory");
    for (int p = 0; p < n && st == FERRY_OK; p++) {
        at[p] = (size_t)p * sizeof *all;
        bytes[p] = sizeof *all;
    }
    if (st == FERRY_OK)
        st = comm_world_all_gather_v(&mine, all, at, bytes);
    char diff[ERR_MESSAGE_MAX - 200] = "their recent collectives could not be gathered";
    if (st == FERRY_OK)
        comm_ledger_first_difference(all, n, diff, sizeof diff);
    free(all);
    free(at);
    free(bytes);
    return comm_world_fail_agreed("the ranks issued different collectives (their ledgers differ): %s; every rank "
                                  "must issue the same collectives in the same order",
                                  diff);
}

ferry_status comm_ledger_check(const char *where)
{
    if (comm_world_size() == 1)
        return comm_world_check();
    double words[COMM_LEDGER_WORDS];
    comm_ledger_words(words);
    ferry_status st = comm_world_all_reduce_f64(words, COMM_LEDGER_WORDS);
    if (st == FERRY_OK)
        st = comm_ledger_verify(words);
    return st != FERRY_OK ? err_wrap(st, "%s", where) : FERRY_OK;
}

void backend_comm_set_tag(backend_comm *c, int tag)
{
    if (!c)
        return;
    c->tag = tag;
    c->tagged = tag >= 0;
}
