/* Top-k selection of the sampler (train/sample.c): sampler_top_k against a
 * full sort of every token (larger logit first, equal logits in index order),
 * for k from 1 to beyond the vocabulary, on logits with many ties and on
 * GPT-2's vocabulary size; sampler_pick at temperature 0 is the first
 * argmax. Seeded; the seed is printed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "train/sample.h"

static const uint64_t SEED = 20240707;
static const float *sort_logits;

static int by_rank(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    float x = sort_logits[a], y = sort_logits[b];
    if (x != y)
        return x > y ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The reference: every index sorted, the first k. */
static void reference_top(const float *logits, int V, int *all)
{
    for (int i = 0; i < V; i++)
        all[i] = i;
    sort_logits = logits;
    qsort(all, (size_t)V, sizeof *all, by_rank);
}

static void check(const float *logits, int V, int k, const char *what)
{
    int *got = malloc((size_t)V * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    reference_top(logits, V, want);
    int n = sampler_top_k(logits, V, k, got);
    int expect = k < V ? k : V, first_diff = -1;
    for (int i = 0; i < expect && n == expect && first_diff < 0; i++)
        if (got[i] != want[i])
            first_diff = i;
    tap_ok(n == expect && first_diff < 0, "%s, V %d, k %d: the %d likeliest in rank order (first difference at %d)",
           what, V, k, n, first_diff);
    free(got);
    free(want);
}

int main(void)
{
    uint64_t rng = SEED;
    tap_diag("seed %llu", (unsigned long long)SEED);
    enum { V = 50257 };
    float *logits = malloc(V * sizeof *logits);
    /* Values on a coarse grid: hundreds of ties at every rank. */
    for (int i = 0; i < V; i++)
        logits[i] = (float)(int)(tap_rand_unit(&rng) * 64.0) * 0.25f - 8.0f;
    static const int ks[] = {1, 2, 40, 1000, V - 1, V, V + 5};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        check(logits, V, ks[i], "ties");
    for (int i = 0; i < V; i++)
        logits[i] = (float)(tap_rand_unit(&rng) * 20.0 - 10.0);
    check(logits, V, 40, "distinct");
    check(logits, V, V - 7, "distinct");
    for (int v = 1; v <= 9; v++)
        for (int k = 1; k <= v + 1; k++)
            check(logits, v, k, "small");
    float flat[5] = {3, 3, 3, 3, 3};
    int idx[5];
    sampler_top_k(flat, 5, 5, idx);
    tap_ok(idx[0] == 0 && idx[1] == 1 && idx[2] == 2 && idx[3] == 3 && idx[4] == 4,
           "all equal: index order (%d %d %d %d %d)", idx[0], idx[1], idx[2], idx[3], idx[4]);
    float with_nan[4] = {1, NAN, 5, 2};
    sampler_top_k(with_nan, 4, 4, idx);
    tap_ok(idx[0] == 2 && idx[1] == 3 && idx[2] == 0 && idx[3] == 1, "NaN ranks last (%d %d %d %d)", idx[0], idx[1],
           idx[2], idx[3]);
    float peaks[6] = {0, 7, 1, 7, -3, 2};
    sampler greedy = {SEED, 0.0f, 40, NULL, NULL, NULL};
    TAP_IS_INT(sampler_pick(&greedy, peaks, 6), 1, "temperature 0 picks the first of the largest logits");
    free(logits);
    return tap_done();
}
