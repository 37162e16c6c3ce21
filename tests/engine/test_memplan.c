/* The static memory planner (engine/memplan.c) against expectations made
 * here: hand-worked plans, and seeded random sets of buffers checked by a
 * conflict test of this file's own (two buffers alive at one position never
 * share a byte) and by the lower bound (the most bytes alive at one
 * position, counted here by walking every position). */
#include <stdlib.h>
#include <string.h>

#include "engine/memplan.h"
#include "tap.h"

static uint64_t up(uint64_t x) { return (x + 255) / 256 * 256; }

/* Two buffers alive at a common position that share a byte; -1 if none. */
static int first_clash(const memplan_buffer *b, int n, int *other)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int32_t s = b[i].start > b[j].start ? b[i].start : b[j].start;
            int32_t e = b[i].end < b[j].end ? b[i].end : b[j].end;
            uint64_t lo = b[i].offset > b[j].offset ? b[i].offset : b[j].offset;
            uint64_t hi = b[i].offset + b[i].bytes < b[j].offset + b[j].bytes ? b[i].offset + b[i].bytes
                                                                                : b[j].offset + b[j].bytes;
            if (s < e && lo < hi) {
                *other = j;
                return i;
            }
        }
    return -1;
}

/* The most bytes alive at one position, walking the positions one by one. */
static uint64_t live_max_walk(const memplan_buffer *b, int n, int32_t horizon)
{
    uint64_t most = 0;
    for (int32_t t = 0; t < horizon; t++) {
        uint64_t live = 0;
        for (int i = 0; i < n; i++)
            if (b[i].start <= t && t < b[i].end)
                live += up(b[i].bytes);
        most = live > most ? live : most;
    }
    return most;
}

static void hand_worked(void)
{
    /* Whole-run buffers pack end to end: the peak is their sum. */
    memplan_buffer w[3] = {{"a", FERRY_MEM_PARAMS, 1000, 0, MEMPLAN_FOREVER, 0},
                           {"b", FERRY_MEM_GRADS, 300, 0, MEMPLAN_FOREVER, 0},
                           {"c", FERRY_MEM_WORKSPACE, 5000, 0, MEMPLAN_FOREVER, 0}};
    uint64_t peak = 0;
    TAP_IS_STATUS(memplan_assign(w, 3, &peak), FERRY_OK, "three whole-run buffers plan");
    TAP_IS_INT((long long)peak, (long long)(1024 + 512 + 5120), "their peak is their sum, each rounded to 256");
    TAP_IS_INT((long long)w[2].offset, 0, "the largest goes first, at 0");
    TAP_IS_INT((long long)w[0].offset, 5120, "the next after it");
    TAP_IS_INT((long long)w[1].offset, 5120 + 1024, "the smallest last");
    /* A lives [0,2), B [1,3), C [2,4): C can take A's place. */
    memplan_buffer s[3] = {{"A", FERRY_MEM_ACTIVATIONS, 256, 0, 2, 0},
                           {"B", FERRY_MEM_ACTIVATIONS, 256, 1, 3, 0},
                           {"C", FERRY_MEM_ACTIVATIONS, 256, 2, 4, 0}};
    TAP_IS_STATUS(memplan_assign(s, 3, &peak), FERRY_OK, "three staggered buffers plan");
    TAP_IS_INT((long long)peak, 512, "staggered lifetimes share: two at a time, so 512 bytes");
    TAP_IS_INT((long long)s[2].offset, (long long)s[0].offset, "C reuses A's bytes once A is dead");
    /* Best fit: at position 5 the buffers that died at 3 (B, 768 bytes, and
     * D, 256) left two gaps; a late 256-byte buffer takes D's, the tighter,
     * and a late 768-byte one B's. */
    memplan_buffer g[7] = {{"A", FERRY_MEM_OTHER, 2048, 0, 10, 0}, {"B", FERRY_MEM_OTHER, 768, 0, 3, 0},
                           {"C", FERRY_MEM_OTHER, 512, 0, 10, 0},  {"D", FERRY_MEM_OTHER, 256, 0, 3, 0},
                           {"E", FERRY_MEM_OTHER, 256, 0, 10, 0},  {"L", FERRY_MEM_OTHER, 256, 5, 6, 0},
                           {"M", FERRY_MEM_OTHER, 768, 6, 7, 0}};
    TAP_IS_STATUS(memplan_assign(g, 7, &peak), FERRY_OK, "a set with two gaps plans");
    int other = -1, clash = first_clash(g, 7, &other);
    TAP_IS_INT(clash, -1, "no two live buffers share a byte");
    TAP_IS_INT((long long)g[5].offset, (long long)g[3].offset, "the late 256 bytes take D's 256-byte gap, the best fit");
    TAP_IS_INT((long long)g[6].offset, (long long)g[1].offset, "the late 768 bytes take B's place");
    TAP_IS_INT((long long)peak, 2048 + 768 + 512 + 256 + 256, "the peak is the most alive at once (position 0)");
    memplan_buffer bad = {"empty", FERRY_MEM_OTHER, 256, 3, 3, 0};
    TAP_IS_STATUS(memplan_assign(&bad, 1, &peak), FERRY_ERR_INVALID_ARGUMENT, "an empty lifetime is refused");
}

static void random_sets(void)
{
    uint64_t seed = 20261204;
    tap_diag("seed %llu", (unsigned long long)seed);
    int worst_case = -1;
    double worst = 0;
    int clashes = 0, below = 0, drift = 0;
    for (int round = 0; round < 200; round++) {
        int n = 2 + (int)(tap_rand_u64(&seed) % 60);
        int32_t horizon = 1 + (int32_t)(tap_rand_u64(&seed) % 40);
        memplan_buffer b[64], again[64];
        for (int i = 0; i < n; i++) {
            int32_t s = (int32_t)(tap_rand_u64(&seed) % (uint64_t)horizon);
            int32_t e = s + 1 + (int32_t)(tap_rand_u64(&seed) % (uint64_t)(horizon - s));
            if (tap_rand_u64(&seed) % 8 == 0)
                s = 0, e = MEMPLAN_FOREVER;
            b[i] = (memplan_buffer){"r", FERRY_MEM_ACTIVATIONS, 1 + tap_rand_u64(&seed) % (1u << 20), s, e, 0};
        }
        memcpy(again, b, sizeof b);
        uint64_t peak = 0, peak2 = 0;
        if (memplan_assign(b, n, &peak) != FERRY_OK || memplan_assign(again, n, &peak2) != FERRY_OK) {
            tap_ok(0, "round %d: the plan failed: %s", round, ferry_last_error());
            return;
        }
        int other;
        clashes += first_clash(b, n, &other) >= 0;
        uint64_t lb = live_max_walk(b, n, horizon + 1);
        below += peak < lb;
        drift += peak != peak2 || memcmp(b, again, (size_t)n * sizeof *b) != 0;
        double ratio = (double)peak / (double)lb;
        if (ratio > worst) {
            worst = ratio;
            worst_case = round;
        }
        if (memplan_live_max(b, n) != lb)
            drift++;
    }
    TAP_IS_INT(clashes, 0, "200 random sets: no two buffers alive at once share a byte");
    TAP_IS_INT(below, 0, "no plan is below the most bytes alive at one position (impossible)");
    TAP_IS_INT(drift, 0, "the same buffers give the same offsets, and memplan_live_max agrees with the walk");
    tap_diag("worst peak / lower bound %.3f (round %d)", worst, worst_case);
}

int main(void)
{
    hand_worked();
    random_sets();
    return tap_done();
}
