/* Tests of the device arena (offload/arena.c) on the host backend: random
 * sequences against a shadow model (alignment, no overlap, inside a live
 * backend buffer, budget, per-category current and peak), the refusal
 * message and that a refusal changes nothing, fragmentation across chunks,
 * bad frees, the largest-allocations query, and several threads. */
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "offload/arena.h"
#include "shadow.h"
#include "tap.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static size_t charged_of(size_t bytes) { return ((bytes ? bytes : 1) + 255) & ~(size_t)255; }

static void test_random(backend *be, uint64_t seed)
{
    static const size_t sizes[] = {0, 1, 255, 256, 1000, 4096, 70000, 512 * KiB, 3 * MiB + 17, 9 * MiB};
    const uint64_t budget = 48 * MiB;
    arena_config cfg = ARENA_CONFIG_INIT;
    cfg.budget_bytes = budget;
    cfg.chunk_bytes = 8 * MiB;
    arena *a = NULL;
    TAP_IS_STATUS(arena_create(be, &cfg, &a), FERRY_OK, "random: create an arena with a 48 MiB budget");
    if (!a)
        return;
    enum { OPS = 6000, MAXLIVE = 300 };
    static shadow_block live[MAXLIVE];
    shadow_set set = {live, 0, MAXLIVE};
    uint64_t cur[FERRY_MEM_CATEGORY_COUNT] = {0}, peak[FERRY_MEM_CATEGORY_COUNT] = {0}, total = 0, total_peak = 0;
    uint64_t state = seed;
    int bad_align = 0, overlap = 0, not_owned = 0, corrupt = 0, over = 0, stats_off = 0, changed = 0, wrong = 0,
        refused = 0;
    for (int op = 0; op < OPS; op++) {
        if (shadow_next_alloc(&set, &state, 0.55)) {
            shadow_block b = {0};
            b.size = sizes[tap_rand_u64(&state) % 10];
            b.charged = charged_of(b.size);
            b.cat = (ferry_mem_category)(tap_rand_u64(&state) % FERRY_MEM_CATEGORY_COUNT);
            b.fill = (uint8_t)(op * 13 + 5);
            ferry_memory_stats before = FERRY_MEMORY_STATS_INIT, after = FERRY_MEMORY_STATS_INIT;
            arena_stats(a, &before);
            void *ptr = NULL;
            ferry_status st = arena_alloc(a, b.size, b.cat, "random", &ptr);
            if (st != FERRY_OK) {
                refused++;
                arena_stats(a, &after);
                if (memcmp(&before, &after, sizeof before) != 0)
                    changed++;
                /* A refusal is right only when the budget has no room for a
                 * new chunk holding the request. */
                if (st != FERRY_ERR_OUT_OF_MEMORY || before.device_reserved_bytes + b.charged <= budget)
                    wrong++;
                continue;
            }
            b.ptr = ptr;
            if ((uintptr_t)ptr % 256)
                bad_align++;
            if (!backend_owns(be, ptr, b.charged))
                not_owned++;
            overlap += shadow_add(&set, b);
            cur[b.cat] += b.charged;
            total += b.charged;
            if (cur[b.cat] > peak[b.cat])
                peak[b.cat] = cur[b.cat];
            if (total > total_peak)
                total_peak = total;
        } else {
            shadow_block b;
            if (!shadow_take(&set, &state, &b) || arena_free(a, b.ptr) != FERRY_OK)
                corrupt++;
            cur[b.cat] -= b.charged;
            total -= b.charged;
        }
        ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
        arena_stats(a, &s);
        if (s.device_reserved_bytes > budget)
            over++;
        int off = s.device_total_current_bytes != total || s.device_total_peak_bytes != total_peak;
        for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
            off |= s.device_current_bytes[c] != cur[c] || s.device_peak_bytes[c] != peak[c];
        stats_off += off;
    }
    tap_diag("random: %d ops, %d refused, total peak %llu bytes", OPS, refused, (unsigned long long)total_peak);
    TAP_IS_INT(bad_align, 0, "random: every allocation 256-byte aligned");
    TAP_IS_INT(not_owned, 0, "random: every allocation lies inside a live backend buffer");
    TAP_IS_INT(overlap, 0, "random: no two live allocations overlap");
    TAP_IS_INT(corrupt, 0, "random: no allocation overwritten, every free succeeded");
    TAP_IS_INT(over, 0, "random: reserved bytes never exceed the budget");
    TAP_IS_INT(stats_off, 0, "random: per-category current/peak and totals match the shadow model");
    TAP_IS_INT(changed, 0, "random: a refused request leaves every figure unchanged");
    TAP_IS_INT(wrong, 0, "random: refusals only when the budget has no room for a chunk holding the request");
    for (size_t i = 0; i < set.n; i++)
        arena_free(a, live[i].ptr);
    /* Everything reusable: the whole budget in one piece, which needs the
     * empty 8 MiB chunks given back and one 48 MiB chunk obtained. */
    void *all = NULL;
    TAP_IS_STATUS(arena_alloc(a, budget, FERRY_MEM_ACTIVATIONS, "everything", &all), FERRY_OK,
                  "random: after freeing, the whole budget is one allocation");
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    arena_stats(a, &s);
    TAP_IS_INT(s.device_reserved_bytes, budget, "random: reserved is exactly the budget");
    tap_ok(backend_owns(be, all, budget), "random: the 48 MiB block is inside one backend buffer");
    arena_destroy(a);
}

static void test_message(backend *be)
{
    arena_config cfg = ARENA_CONFIG_INIT;
    cfg.budget_bytes = 4 * MiB;
    cfg.chunk_bytes = MiB;
    arena *a = NULL;
    arena_create(be, &cfg, &a);
    void *p1, *p2, *p3, *p4 = (void *)0x1;
    arena_alloc(a, MiB, FERRY_MEM_PARAMS, "wte", &p1);
    arena_alloc(a, MiB, FERRY_MEM_GRADS, "wte grad", &p2);
    arena_alloc(a, 3 * MiB / 2, FERRY_MEM_ACTIVATIONS, "block 0 attn", &p3);
    ferry_memory_stats before = FERRY_MEMORY_STATS_INIT, after = FERRY_MEMORY_STATS_INIT;
    arena_stats(a, &before);
    TAP_IS_STATUS(arena_alloc(a, MiB, FERRY_MEM_ACTIVATIONS, "block 17 attn", &p4), FERRY_ERR_OUT_OF_MEMORY,
                  "message: 1 MiB more than a 4 MiB budget holds is refused");
    const char *m = ferry_last_error();
    tap_diag("message: %s", m);
    tap_ok(strstr(m, "device budget 4.0 MiB exhausted") != NULL, "message: names the budget");
    tap_ok(strstr(m, "activations 'block 17 attn' asked 1.0 MiB") != NULL, "message: names category, name and bytes");
    tap_ok(strstr(m, "with 3.5 MiB in use") != NULL, "message: says the bytes in use");
    tap_ok(strstr(m, "params 1.0 MiB, grads 1.0 MiB, activations 1.5 MiB") != NULL, "message: breaks them down by category");
    tap_ok(strstr(m, "offload FERRY_OFFLOAD_PARAMS") && strstr(m, "device_budget_bytes") && !strstr(m, "--"),
           "message: says what to do, in the API's words (no trainer flag)");
    tap_ok(p4 == NULL, "message: *out is NULL after a refusal");
    arena_stats(a, &after);
    tap_ok(memcmp(&before, &after, sizeof before) == 0, "message: the arena is unchanged by the refusal");
    heap_live top[5];
    size_t n = arena_largest(a, top, 5);
    TAP_IS_INT(n, 3, "largest: three live allocations");
    tap_ok(n == 3 && top[0].bytes == 3 * MiB / 2 && strcmp(top[0].name, "block 0 attn") == 0 &&
               top[0].category == FERRY_MEM_ACTIVATIONS,
           "largest: the 1.5 MiB activation comes first");
    tap_ok(n == 3 && top[1].bytes == MiB && top[2].bytes == MiB, "largest: then the two 1 MiB ones");
    TAP_IS_STATUS(arena_alloc(a, MiB / 2, FERRY_MEM_ACTIVATIONS, "fits", &p4), FERRY_OK,
                  "message: the remaining 0.5 MiB can still be used");
    TAP_IS_STATUS(arena_free(a, (char *)p1 + 256), FERRY_ERR_INVALID_ARGUMENT, "free: an inner pointer is refused");
    TAP_IS_STATUS(arena_free(a, p1), FERRY_OK, "free: by pointer");
    TAP_IS_STATUS(arena_free(a, p1), FERRY_ERR_INVALID_ARGUMENT, "free: a double free is refused");
    TAP_IS_STATUS(arena_free(a, NULL), FERRY_OK, "free: NULL is a no-op");
    TAP_IS_STATUS(arena_alloc(a, 64, (ferry_mem_category)-1, "x", &p1), FERRY_ERR_INVALID_ARGUMENT,
                  "alloc: an unknown category is refused");
    TAP_IS_STATUS(arena_alloc(a, SIZE_MAX, FERRY_MEM_OTHER, "huge", &p1), FERRY_ERR_OUT_OF_MEMORY,
                  "alloc: SIZE_MAX bytes is refused cleanly");
    arena_destroy(a);
}

static void test_fragmentation(backend *be)
{
    arena_config cfg = ARENA_CONFIG_INIT;
    cfg.budget_bytes = 4 * MiB;
    cfg.chunk_bytes = 4 * MiB;
    arena *a = NULL;
    arena_create(be, &cfg, &a);
    void *p[4];
    for (int i = 0; i < 4; i++)
        arena_alloc(a, MiB, FERRY_MEM_ACTIVATIONS, "quarter", &p[i]);
    arena_free(a, p[0]);
    arena_free(a, p[2]);
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    arena_stats(a, &s);
    TAP_IS_CLOSE(s.device_fragmentation, 0.5, 1e-12, 0, "fragmentation: two 1 MiB holes -> 0.5");
    void *big = NULL;
    TAP_IS_STATUS(arena_alloc(a, 2 * MiB, FERRY_MEM_ACTIVATIONS, "two holes", &big), FERRY_ERR_OUT_OF_MEMORY,
                  "fragmentation: 2 MiB does not fit in two 1 MiB holes");
    tap_ok(strstr(ferry_last_error(), "fragmentation") != NULL, "fragmentation: the message says why (%s)",
           ferry_last_error());
    arena_free(a, p[1]);
    arena_stats(a, &s);
    TAP_IS_CLOSE(s.device_fragmentation, 0.0, 1e-12, 0, "fragmentation: the holes coalesced");
    TAP_IS_STATUS(arena_alloc(a, 3 * MiB, FERRY_MEM_ACTIVATIONS, "merged", &big), FERRY_OK,
                  "fragmentation: 3 MiB fits in the merged hole");
    TAP_IS_INT((intptr_t)big, (intptr_t)p[0], "fragmentation: at the chunk's start");
    arena_destroy(a);
}

static void test_default_budget(backend *be)
{
    arena_config cfg = ARENA_CONFIG_INIT;
    arena *a = NULL;
    uint64_t free_b = 0, total_b = 0;
    backend_mem_info(be, &free_b, &total_b);
    TAP_IS_STATUS(arena_create(be, &cfg, &a), FERRY_OK, "budget 0: takes the device's free memory");
    tap_ok(a && arena_budget(a) > 0 && arena_budget(a) <= total_b, "budget 0: budget %llu within total %llu",
           a ? (unsigned long long)arena_budget(a) : 0ull, (unsigned long long)total_b);
    arena_destroy(a);
}

static ferry_status thread_alloc(void *a, size_t bytes, void **out)
{
    return arena_alloc(a, bytes, FERRY_MEM_WORKSPACE, "thread", out);
}

static ferry_status thread_free(void *a, void *ptr) { return arena_free(a, ptr); }

static uint64_t thread_in_use(void *a)
{
    ferry_memory_stats s = FERRY_MEMORY_STATS_INIT;
    arena_stats(a, &s);
    return s.device_total_current_bytes;
}

static void test_threads(backend *be, uint64_t seed)
{
    arena_config cfg = ARENA_CONFIG_INIT;
    cfg.budget_bytes = 64 * MiB;
    cfg.chunk_bytes = 2 * MiB;
    arena *a = NULL;
    arena_create(be, &cfg, &a);
    shadow_allocator sa = {a, thread_alloc, thread_free, thread_in_use};
    shadow_threads(&sa, 48, 50000, seed, 77, "allocation");
    arena_destroy(a);
}

int main(void)
{
    uint64_t seed = 977;
    tap_diag("seed %llu", (unsigned long long)seed);
    tap_ok(strcmp(ferry_mem_category_name(FERRY_MEM_ACTIVATIONS), "activations") == 0 &&
               strcmp(ferry_mem_category_name((ferry_mem_category)99), "unknown") == 0,
           "category names");
    backend *be = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK)
        tap_plan_skip("the host backend cannot open");
    test_random(be, seed);
    test_message(be);
    test_fragmentation(be);
    test_default_budget(be);
    test_threads(be, seed);
    backend_close(be);
    return tap_done();
}
