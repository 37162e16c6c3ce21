/* Tests of the pinned host pool (offload/pool.c) and its span heap: random
 * alloc/free sequences checked against a shadow model kept here (no overlap,
 * alignment, limit, stats), coalescing and reuse, the limit's message, bad
 * frees, NUMA placement, and several threads at once. */
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "offload/pool.h"
#include "shadow.h"
#include "tap.h"

#define MiB ((size_t)1 << 20)

static size_t charged_of(size_t bytes) { return ((bytes ? bytes : 1) + 4095) & ~(size_t)4095; }

static void test_random(uint64_t seed)
{
    static const size_t sizes[] = {1, 100, 4096, 10000, 65536, 300000, MiB + 3, 3 * MiB};
    static const size_t aligns[] = {0, 64, 4096, 65536, 2 * MiB};
    const uint64_t limit = 64 * MiB;
    pool_config cfg = POOL_CONFIG_INIT;
    cfg.limit_bytes = limit;
    cfg.slab_bytes = 4 * MiB;
    pool *p = NULL;
    TAP_IS_STATUS(pool_create(&cfg, &p), FERRY_OK, "random: create a pool with a 64 MiB limit");
    if (!p)
        return;
    enum { OPS = 6000, MAXLIVE = 400 };
    static shadow_block live[MAXLIVE];
    shadow_set set = {live, 0, MAXLIVE};
    uint64_t in_use = 0, peak = 0, state = seed;
    int bad_align = 0, overlap = 0, corrupt = 0, over_limit = 0, stats_off = 0, wrong_oom = 0, ooms = 0;
    for (int op = 0; op < OPS; op++) {
        if (shadow_next_alloc(&set, &state, 0.55)) {
            shadow_block b = {0};
            b.size = sizes[tap_rand_u64(&state) % 8];
            b.align = aligns[tap_rand_u64(&state) % 5];
            b.charged = charged_of(b.size);
            b.fill = (uint8_t)(op * 7 + 1);
            void *ptr = NULL;
            ferry_memory_stats before = FERRY_MEMORY_STATS_INIT;
            pool_stats(p, &before);
            ferry_status st = pool_alloc(p, b.size, b.align, FERRY_MEM_OPTIMIZER, "random", &ptr);
            if (st != FERRY_OK) {
                ooms++;
                /* A refusal is right only when no slab could be added within the limit. */
                if (st != FERRY_ERR_OUT_OF_MEMORY || before.host_reserved_bytes + b.charged <= limit - 2 * MiB)
                    wrong_oom++;
                continue;
            }
            b.ptr = ptr;
            size_t want_align = b.align > 4096 ? b.align : 4096;
            if ((uintptr_t)ptr % want_align)
                bad_align++;
            overlap += shadow_add(&set, b);
            in_use += b.charged;
            if (in_use > peak)
                peak = in_use;
        } else {
            shadow_block b;
            if (!shadow_take(&set, &state, &b))
                corrupt++;
            if (pool_free(p, b.ptr) != FERRY_OK)
                corrupt++;
            in_use -= b.charged;
        }
        ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
        pool_stats(p, &s);
        if (s.host_reserved_bytes > limit)
            over_limit++;
        if (s.host_in_use_bytes != in_use || s.host_peak_bytes != peak ||
            s.host_pinned_bytes + s.host_unpinned_bytes != s.host_reserved_bytes)
            stats_off++;
    }
    tap_diag("random: %d ops, %d refused at the limit, peak %llu bytes", OPS, ooms, (unsigned long long)peak);
    TAP_IS_INT(bad_align, 0, "random: every block aligned to max(asked, 4096)");
    TAP_IS_INT(overlap, 0, "random: no two live blocks overlap");
    TAP_IS_INT(corrupt, 0, "random: no block was overwritten, every free succeeded");
    TAP_IS_INT(over_limit, 0, "random: reserved bytes never exceed the limit");
    TAP_IS_INT(stats_off, 0, "random: in use, peak and pinned+unpinned agree with the shadow model");
    TAP_IS_INT(wrong_oom, 0, "random: refusals only when the limit leaves no room for a slab");
    for (size_t i = 0; i < set.n; i++)
        pool_free(p, live[i].ptr);
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    pool_stats(p, &s);
    TAP_IS_INT(s.host_in_use_bytes, 0, "random: nothing in use after freeing everything");
    /* Every slab is one free span again, so trimming gives all of them back. */
    uint64_t reserved = s.host_reserved_bytes;
    TAP_IS_INT(pool_trim(p), reserved, "random: after freeing everything, every slab is empty and trimmed");
    pool_stats(p, &s);
    TAP_IS_INT(s.host_reserved_bytes + s.host_pinned_bytes + s.host_unpinned_bytes, 0,
               "random: nothing reserved after the trim");
    /* Everything is reusable: the whole limit as 16 blocks of one slab each. */
    void *blocks[17];
    int got = 0;
    for (int i = 0; i < 16; i++)
        got += pool_alloc(p, 4 * MiB, 0, FERRY_MEM_PARAMS, "whole slab", &blocks[i]) == FERRY_OK;
    TAP_IS_INT(got, 16, "random: after freeing, the full 64 MiB limit can be handed out again");
    TAP_IS_STATUS(pool_alloc(p, 4096, 0, FERRY_MEM_PARAMS, "one more", &blocks[16]), FERRY_ERR_OUT_OF_MEMORY,
                  "random: one page past the limit is refused");
    pool_destroy(p);
}

static void test_coalesce(void)
{
    pool_config cfg = POOL_CONFIG_INIT;
    cfg.slab_bytes = 4 * MiB;
    pool *p = NULL;
    pool_create(&cfg, &p);
    void *a, *b, *c, *d;
    pool_alloc(p, MiB, 0, FERRY_MEM_PARAMS, "a", &a);
    pool_alloc(p, MiB, 0, FERRY_MEM_PARAMS, "b", &b);
    pool_alloc(p, MiB, 0, FERRY_MEM_PARAMS, "c", &c);
    TAP_IS_INT((char *)b - (char *)a, MiB, "coalesce: a fresh slab is carved from its start (b right after a)");
    pool_free(p, b);
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    pool_stats(p, &s);
    /* free spans: b (1 MiB) and the tail (1 MiB) -> 1 - 1/2 */
    TAP_IS_CLOSE(s.host_fragmentation, 0.5, 1e-12, 0, "coalesce: two separate 1 MiB holes -> fragmentation 0.5");
    pool_free(p, a);
    pool_stats(p, &s);
    TAP_IS_CLOSE(s.host_fragmentation, 1.0 - 2.0 / 3.0, 1e-12, 0,
                 "coalesce: a merges with b -> holes of 2 and 1 MiB -> 1/3");
    TAP_IS_STATUS(pool_alloc(p, 2 * MiB, 0, FERRY_MEM_PARAMS, "d", &d), FERRY_OK, "coalesce: 2 MiB fits");
    TAP_IS_INT((intptr_t)d, (intptr_t)a, "coalesce: the 2 MiB block reuses the merged hole at a");
    TAP_IS_INT(s.host_reserved_bytes, 4 * MiB, "coalesce: still one slab reserved");
    TAP_IS_STATUS(pool_free(p, d), FERRY_OK, "coalesce: free d");
    TAP_IS_STATUS(pool_free(p, d), FERRY_ERR_INVALID_ARGUMENT, "coalesce: a double free is refused");
    TAP_IS_STATUS(pool_free(p, (char *)c + 64), FERRY_ERR_INVALID_ARGUMENT, "coalesce: a pointer inside a block is refused");
    TAP_IS_STATUS(pool_free(p, c), FERRY_OK, "coalesce: c is still freeable after the refusals");
    TAP_IS_STATUS(pool_free(p, NULL), FERRY_OK, "coalesce: freeing NULL is a no-op");
    TAP_IS_STATUS(pool_alloc(p, 10, 3, FERRY_MEM_PARAMS, "x", &a), FERRY_ERR_INVALID_ARGUMENT,
                  "coalesce: alignment 3 is refused");
    TAP_IS_STATUS(pool_alloc(p, 10, 0, (ferry_mem_category)42, "x", &a), FERRY_ERR_INVALID_ARGUMENT,
                  "coalesce: an unknown category is refused");
    TAP_IS_INT(pool_trim(p), 4 * MiB, "coalesce: trim gives the empty slab back");
    pool_destroy(p);
}

static void test_limit_message(void)
{
    pool_config cfg = POOL_CONFIG_INIT;
    cfg.limit_bytes = 8 * MiB;
    cfg.slab_bytes = 2 * MiB;
    pool *p = NULL;
    pool_create(&cfg, &p);
    void *a = NULL, *b = NULL;
    TAP_IS_STATUS(pool_alloc(p, 6 * MiB, 0, FERRY_MEM_PARAMS, "master weights", &a), FERRY_OK, "limit: 6 of 8 MiB");
    ferry_memory_stats before = FERRY_MEMORY_STATS_INIT, after = FERRY_MEMORY_STATS_INIT;
    pool_stats(p, &before);
    TAP_IS_STATUS(pool_alloc(p, 4 * MiB, 0, FERRY_MEM_OPTIMIZER, "adam m", &b), FERRY_ERR_OUT_OF_MEMORY,
                  "limit: 4 more MiB are refused");
    const char *msg = ferry_last_error();
    tap_diag("message: %s", msg);
    tap_ok(strstr(msg, "optimizer 'adam m' asked 4.0 MiB") != NULL, "limit: message names category, name and bytes");
    tap_ok(strstr(msg, "limit 8.0 MiB") != NULL, "limit: message names the limit");
    tap_ok(strstr(msg, "params 6.0 MiB") != NULL, "limit: message says what holds the memory");
    pool_stats(p, &after);
    tap_ok(memcmp(&before, &after, sizeof before) == 0, "limit: a refused request changes no figure");
    TAP_IS_STATUS(pool_alloc(p, 2 * MiB, 0, FERRY_MEM_OPTIMIZER, "adam v", &b), FERRY_OK, "limit: exactly up to the limit is fine");
    pool_destroy(p);
}

static void test_numa(void)
{
    pool_config cfg = POOL_CONFIG_INIT;
    cfg.numa_node = 0;
    cfg.slab_bytes = 2 * MiB;
    pool *p = NULL;
    TAP_IS_STATUS(pool_create(&cfg, &p), FERRY_OK, "numa: node 0 exists on every machine");
    void *a = NULL;
    TAP_IS_STATUS(pool_alloc(p, MiB, 0, FERRY_MEM_PARAMS, "on node 0", &a), FERRY_OK, "numa: allocate on node 0");
    if (a)
        memset(a, 1, MiB);
    pool_destroy(p);
    cfg.numa_node = 4096;
    p = NULL;
    TAP_IS_STATUS(pool_create(&cfg, &p), FERRY_ERR_INVALID_ARGUMENT, "numa: node 4096 is refused");
    tap_ok(strstr(ferry_last_error(), "4096") != NULL, "numa: the message names the node (%s)", ferry_last_error());
}

static ferry_status thread_alloc(void *p, size_t bytes, void **out)
{
    return pool_alloc(p, bytes, 0, FERRY_MEM_GRADS, "thread", out);
}

static ferry_status thread_free(void *p, void *ptr) { return pool_free(p, ptr); }

static uint64_t thread_in_use(void *p)
{
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    pool_stats(p, &s);
    return s.host_in_use_bytes;
}

static void test_threads(uint64_t seed)
{
    pool_config cfg = POOL_CONFIG_INIT;
    cfg.slab_bytes = 4 * MiB;
    pool *p = NULL;
    pool_create(&cfg, &p);
    shadow_allocator sa = {p, thread_alloc, thread_free, thread_in_use};
    shadow_threads(&sa, 64, 100000, seed, 1000, "block");
    pool_destroy(p);
}

int main(void)
{
    uint64_t seed = 20240611;
    tap_diag("seed %llu", (unsigned long long)seed);
    test_random(seed);
    test_coalesce();
    test_limit_message();
    test_numa();
    test_threads(seed);
    return tap_done();
}
