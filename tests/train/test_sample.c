/* The sampler (train/sample.c): sampler_top_k against a full sort of every
 * token (larger logit first, equal logits in index order), for k from 1 to
 * beyond the vocabulary, on logits with many ties and on GPT-2's
 * vocabulary size; sampler_pick at temperature 0 is the first argmax; the
 * kept set and its probabilities under temperature, top-k and top-p
 * against softmax computed here by hand; the frequencies of many seeded
 * draws within a binomial bound of those probabilities, nothing outside
 * the kept set drawn; the same seed the same draws. Seeded; the seed is
 * printed. */
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

/* softmax(l / t) over the first n of l, by hand, in double. */
static void softmax(const double *l, int n, double t, double *p)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += p[i] = exp(l[i] / t);
    for (int i = 0; i < n; i++)
        p[i] /= sum;
}

static const float five[5] = {1.0f, 2.0f, -1.0f, 0.5f, 0.0f}; /* ranks: 1, 0, 3, 4, 2 */
static const double five_sorted[5] = {2.0, 1.0, 0.5, 0.0, -1.0};
static const int five_order[5] = {1, 0, 3, 4, 2};

/* sampler_kept against the expected tokens (in order) and probabilities. */
static void expect_kept(const sampler *s, int n_want, const double *p_want, const char *what)
{
    int idx[5];
    double p[5];
    int n = sampler_kept(s, five, 5, idx, p);
    int bad = n != n_want;
    double worst = 0;
    for (int i = 0; i < n && i < n_want; i++) {
        bad |= idx[i] != five_order[i];
        worst = fmax(worst, fabs(p[i] - p_want[i]));
    }
    tap_ok(!bad && worst < 1e-12, "%s: keeps %d tokens (want %d) in rank order, probabilities within %.2g", what, n,
           n_want, worst);
}

static void check_kept(void)
{
    double p[5], q[5];
    sampler s = {.temperature = 1.0f, .eos = -1};
    softmax(five_sorted, 5, 1.0, p);
    expect_kept(&s, 5, p, "temperature 1, no top-k, no top-p");
    s.temperature = 2.0f;
    softmax(five_sorted, 5, 2.0, q);
    expect_kept(&s, 5, q, "temperature 2");
    s.temperature = 0.5f;
    s.top_k = 3;
    softmax(five_sorted, 3, 0.5, q);
    expect_kept(&s, 3, q, "temperature 0.5, top-k 3: the three likeliest, renormalised");
    /* at temperature 1 the sorted probabilities are .5630 .2071 .1256 .0762 .0280: cumulative .563 .770 .896 .972 */
    s.temperature = 1.0f;
    s.top_k = 0;
    s.top_p = 0.8f;
    softmax(five_sorted, 3, 1.0, q);
    expect_kept(&s, 3, q, "top-p 0.8: the three whose sum first reaches it (0.896)");
    s.top_p = 0.5f;
    double one = 1.0;
    expect_kept(&s, 1, &one, "top-p 0.5: the likeliest alone (0.563)");
    s.top_p = 0.95f;
    s.top_k = 2;
    softmax(five_sorted, 2, 1.0, q);
    expect_kept(&s, 2, q, "top-k 2 before top-p 0.95: both (their renormalised sum is 1)");
    s.top_k = 0;
    s.top_p = 1.0f;
    softmax(five_sorted, 5, 1.0, q);
    expect_kept(&s, 5, q, "top-p 1: every token");
    s.temperature = 0.0f;
    expect_kept(&s, 1, &one, "temperature 0: the argmax alone");
}

/* Draws of sampler_pick against the kept probabilities: each count within
 * 5 standard deviations of N p, none outside the kept set. */
static void draws(sampler *s, int n_kept, const double *p, const char *what)
{
    enum { N = 200000 };
    long count[5] = {0};
    for (int i = 0; i < N; i++) {
        int t = sampler_pick(s, five, 5);
        if (t >= 0 && t < 5)
            count[t]++;
    }
    int bad = 0;
    double worst = 0;
    for (int r = 0; r < 5; r++) {
        int tok = five_order[r];
        double want = r < n_kept ? N * p[r] : 0, sd = sqrt(N * (r < n_kept ? p[r] * (1 - p[r]) : 0));
        double z = sd > 0 ? fabs(count[tok] - want) / sd : (count[tok] ? INFINITY : 0);
        bad |= z > 5;
        worst = fmax(worst, z);
    }
    tap_ok(!bad, "%s: %d draws: every count within 5 sigma of N p (worst %.2f sigma), none outside the kept %d",
           what, N, worst, n_kept);
    if (bad)
        for (int r = 0; r < 5; r++)
            tap_diag("  token %d: %ld draws, want %.0f", five_order[r], count[five_order[r]],
                     r < n_kept ? N * p[r] : 0.0);
}

static void check_frequencies(void)
{
    double p[5];
    sampler s = {.rng = SEED, .temperature = 1.0f, .eos = -1};
    softmax(five_sorted, 5, 1.0, p);
    draws(&s, 5, p, "temperature 1");
    s.temperature = 0.7f;
    s.top_k = 3;
    softmax(five_sorted, 3, 0.7, p);
    draws(&s, 3, p, "temperature 0.7, top-k 3");
    s.temperature = 1.5f;
    s.top_k = 0;
    s.top_p = 0.6f; /* at 1.5 the sorted probabilities are .439 .225 .161 .116 .059: .439 .664 */
    softmax(five_sorted, 2, 1.5, p);
    draws(&s, 2, p, "temperature 1.5, top-p 0.6");
}

static void check_seeded(void)
{
    sampler a = {.rng = 77, .temperature = 1.0f, .top_p = 0.9f, .eos = -1}, b = a, c = a;
    c.rng = 78;
    int same = 1, differs = 0;
    for (int i = 0; i < 1000; i++) {
        int x = sampler_pick(&a, five, 5), y = sampler_pick(&b, five, 5), z = sampler_pick(&c, five, 5);
        same &= x == y;
        differs |= x != z;
    }
    tap_ok(same && differs, "the same seed draws the same 1000 tokens, another seed others");
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
    sampler greedy = {.rng = SEED, .temperature = 0.0f, .top_k = 40, .eos = -1};
    TAP_IS_INT(sampler_pick(&greedy, peaks, 6), 1, "temperature 0 picks the first of the largest logits");
    free(logits);
    check_kept();
    check_frequencies();
    check_seeded();
    return tap_done();
}
