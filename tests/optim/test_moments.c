/* tests/optim/test_moments.c: AdamW over compact moments (optim/moments.h)
 * against a double-precision reference of the same quantized algorithm,
 * written here: dequantize exactly, update in double with the job's fp32
 * factors, requantize in double (bf16: the same random bits; 8bit: the
 * block's absmax, the nearest map value for m, the first not below for v).
 * The fp32 update and the double
 * one differ by a few fp32 ulps, so a stored value may differ exactly where
 * that can move it across a rounding point, by one step: bf16 where the
 * double moment lies within the fp32 update's error bound (a few fp32 ulps
 * of the terms b * m and (1 - b) * g summed) of its stochastic threshold or
 * of a bf16 value, 8bit where the normalized value lies within that bound
 * (over the block's absmax, whose error it adds) of its rounding point
 * (m: the midpoint between two codes; v: a map value). Every other element must
 * match, and the test counts and prints the exceptions. Then: the maps'
 * hand-computed values, the scalar and AVX2 paths and 1, 2, 3 threads
 * bitwise equal, a job split in two bitwise equal to one, no-decay ranges
 * equal to separate jobs, conversions, and bad jobs refused. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/adamw.h"
#include "tests/tap.h"

typedef struct cstate {
    ferry_moments form;
    size_t n;
    float *p;
    float *g;
    uint16_t *copy;
    unsigned char *m, *v; /* the layout of optim/moments.h */
} cstate;

static double gauss(uint64_t *rng)
{
    double u = tap_rand_unit(rng) + 1e-300, w = tap_rand_unit(rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

static cstate cs_alloc(ferry_moments form, size_t n)
{
    cstate s = {form, n, malloc(n * 4 + 4), malloc(n * 4 + 4), malloc(n * 2 + 2),
                calloc(1, moments_bytes(form, n) + 4), calloc(1, moments_bytes(form, n) + 4)};
    return s;
}

static void cs_free(cstate *s)
{
    free(s->p), free(s->g), free(s->copy), free(s->m), free(s->v);
}

static void cs_copy(cstate *d, const cstate *s)
{
    memcpy(d->p, s->p, s->n * 4);
    memcpy(d->g, s->g, s->n * 4);
    memcpy(d->m, s->m, moments_bytes(s->form, s->n));
    memcpy(d->v, s->v, moments_bytes(s->form, s->n));
}

static int cs_same(const cstate *a, const cstate *b)
{
    return !memcmp(a->p, b->p, a->n * 4) && !memcmp(a->copy, b->copy, a->n * 2) &&
           !memcmp(a->m, b->m, moments_bytes(a->form, a->n)) && !memcmp(a->v, b->v, moments_bytes(a->form, a->n));
}

/* Random weights and gradients; moments from a few fp32 steps' worth of
 * values, converted into the form. */
static void cs_fill(cstate *s, uint64_t *rng)
{
    float *m = malloc(s->n * 4), *v = malloc(s->n * 4);
    for (size_t i = 0; i < s->n; i++) {
        s->p[i] = (float)gauss(rng);
        double scale = (i / 3000) % 4 == 3 ? 1e-4 : 1.0; /* blocks of other magnitudes */
        s->g[i] = (float)(gauss(rng) * scale);
        m[i] = (float)(0.3 * gauss(rng) * scale);
        v[i] = (float)(0.01 * fabs(gauss(rng)) * scale * scale);
    }
    if (s->n > 4100)
        for (size_t i = MOMENTS_Q8_BLOCK; i < 2 * MOMENTS_Q8_BLOCK; i++)
            m[i] = v[i] = 0.0f; /* an all-zero block */
    moments_convert(s->m, s->form, m, FERRY_MOMENTS_F32, s->n, 1);
    moments_convert(s->v, s->form, v, FERRY_MOMENTS_F32, s->n, 0);
    free(m), free(v);
}

static adamw_job cs_job(cstate *s, adamw_hparams hp, int64_t step, uint64_t index0)
{
    adamw_job j = {s->p, NULL, NULL, s->g, FERRY_DTYPE_F32, s->n, step, hp, 0.75f, s->copy, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
    j.moments = s->form;
    j.mq = s->m;
    j.vq = s->v;
    if (s->form == FERRY_MOMENTS_8BIT) {
        j.m_absmax = moments_q8_absmax(s->m, s->n);
        j.v_absmax = moments_q8_absmax(s->v, s->n);
    }
    j.seed = 0x5eed;
    j.index0 = index0;
    return j;
}

/* ---- the double reference ---- */

static double ref_load(const cstate *s, const unsigned char *buf, size_t i, int is_signed)
{
    if (s->form == FERRY_MOMENTS_BF16)
        return moments_bf16_load(((const uint16_t *)buf)[i]);
    const float *absmax = moments_q8_absmax((void *)(uintptr_t)buf, s->n);
    return (double)moments_q8_map(is_signed)[buf[i]] * (double)absmax[i / MOMENTS_Q8_BLOCK];
}

/* The update of element i in double with the fp32 factors: new m, v, p,
 * and bounds of the fp32 update's error in m and v (a few fp32 ulps of the
 * terms summed: b1 * m may cancel most of (1 - b1) * g). */
static void ref_update(const adamw_consts *c, double p, double m, double v, double g, double out[5])
{
    g *= c->grad_scale;
    double m1 = (double)c->beta1 * m, m2 = (double)c->one_minus_beta1 * g;
    double v1 = (double)c->beta2 * v, v2 = (double)c->one_minus_beta2 * g * g;
    m = m1 + m2;
    v = v1 + v2;
    out[0] = m;
    out[1] = v;
    out[3] = 2 * FLT_EPSILON * (fabs(m1) + fabs(m2) + fabs(m));
    out[4] = 3 * FLT_EPSILON * (fabs(v1) + fabs(v2) + fabs(v));
    out[2] = p * c->decay + (double)c->neg_step * m / (sqrt(v) / c->bc2_sqrt + c->eps);
}

/* bf16 stochastic rounding of an exact value with threshold bits r; *near:
 * whether x lies within `tol` of the rounding point or of a bf16 value. */
static uint16_t ref_bf16_round(double x, uint32_t r, double tol, int *near)
{
    double a = fabs(x);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    if (e - 1 < -126)
        e = -125;
    double ulp = ldexp(1.0, e - 1 - 7), lo = floor(a / ulp) * ulp, frac = (a - lo) / ulp * 65536.0;
    double cut = 65536.0 - (double)(r & 0xffff);
    double t = lo + cut / 65536.0 * ulp;
    *near = fabs(a - t) <= tol || fabs(a - lo) <= tol || fabs(a - (lo + ulp)) <= tol;
    double q = frac >= cut ? lo + ulp : lo;
    float f = (float)(x < 0 ? -q : q);
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* The nearest map value to x in double, ties to the lower (`up`: the first
 * map value not below x, v's rounding); *near: within `tol` of a rounding
 * point (a midpoint; up: a map value). */
static int ref_code_of(const float *map, double x, double tol, int *near, int up)
{
    int best = 0;
    *near = 0;
    if (up) {
        x = x > 1.0 ? 1.0 : x;
        while (best < 255 && map[best] < x)
            best++;
    } else {
        for (int k = 1; k < 256; k++)
            if (fabs(x - map[k]) < fabs(x - map[best]))
                best = k;
    }
    for (int k = 0; k < 255; k++)
        if (fabs(x - (up ? (double)map[k] : ((double)map[k] + map[k + 1]) / 2.0)) <= tol)
            *near = 1;
    return best;
}

static int ref_code(const float *map, double x, double tol, int *near) { return ref_code_of(map, x, tol, near, 0); }

typedef struct ref_count {
    size_t bad, near_diff, p_bad;
} ref_count;

/* Checks `after` (the kernel's step from `before`) against the reference. */
static ref_count check_step(const cstate *before, const cstate *after, const adamw_job *j)
{
    ref_count rc = {0, 0, 0};
    adamw_consts c = adamw_consts_make(&j->hp, j->step, j->grad_scale);
    uint32_t km = moments_key(j->seed, j->step, 0), kv = moments_key(j->seed, j->step, 1);
    size_t n = before->n;
    double *nm = malloc(n * sizeof(double)), *nv = malloc(n * sizeof(double));
    double *em = malloc(n * sizeof(double)), *ev = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double o[5];
        ref_update(&c, before->p[i], ref_load(before, before->m, i, 1), ref_load(before, before->v, i, 0),
                   before->g[i], o);
        nm[i] = o[0], nv[i] = o[1], em[i] = o[3], ev[i] = o[4];
        double tol = 8 * FLT_EPSILON * (fabs(o[2]) + fabs(before->p[i] - o[2]) + 1e-30);
        if (fabs(after->p[i] - o[2]) > tol) {
            if (rc.p_bad++ < 5)
                tap_diag("  p[%zu] %.9g, reference %.9g", i, (double)after->p[i], o[2]);
        }
    }
    for (size_t i = 0; i < n && before->form == FERRY_MOMENTS_BF16; i++) {
        for (int w = 0; w < 2; w++) {
            int near;
            uint16_t want = ref_bf16_round(w ? nv[i] : nm[i], moments_random(w ? kv : km, j->index0 + i),
                                           w ? ev[i] : em[i], &near);
            uint16_t got = ((const uint16_t *)(w ? after->v : after->m))[i];
            if (got == want)
                continue;
            if (near && abs((int)got - (int)want) == 1)
                rc.near_diff++;
            else if (rc.bad++ < 5)
                tap_diag("  %c[%zu]: bf16 %04x, reference %04x (value %.12g)", w ? 'v' : 'm', i, got, want,
                         w ? nv[i] : nm[i]);
        }
    }
    for (size_t b0 = 0; b0 < n && before->form == FERRY_MOMENTS_8BIT; b0 += MOMENTS_Q8_BLOCK) {
        size_t len = n - b0 < MOMENTS_Q8_BLOCK ? n - b0 : MOMENTS_Q8_BLOCK;
        for (int w = 0; w < 2; w++) {
            const double *x = w ? nv : nm, *e = w ? ev : em;
            double amax = 0, emax = 0;
            for (size_t i = 0; i < len; i++)
                amax = fmax(amax, fabs(x[b0 + i])), emax = fmax(emax, e[b0 + i]);
            float got_amax = moments_q8_absmax(w ? after->v : after->m, n)[b0 / MOMENTS_Q8_BLOCK];
            if (fabs(got_amax - amax) > emax && rc.bad++ < 5)
                tap_diag("  %c block %zu: absmax %.9g, reference %.9g", w ? 'v' : 'm', b0 / MOMENTS_Q8_BLOCK,
                         (double)got_amax, amax);
            const float *map = moments_q8_map(!w);
            for (size_t i = 0; i < len; i++) {
                double xn = amax > 0 ? x[b0 + i] / amax : 0.0;
                double tol = amax > 0 ? (e[b0 + i] + emax) / amax + 2 * FLT_EPSILON * fabs(xn) : 0.0;
                int near, want = ref_code_of(map, xn, tol, &near, w);
                int got = (w ? after->v : after->m)[b0 + i];
                if (got == want)
                    continue;
                if (near && abs(got - want) == 1)
                    rc.near_diff++;
                else if (rc.bad++ < 5)
                    tap_diag("  %c[%zu]: code %d, reference %d (normalized %.12g)", w ? 'v' : 'm', b0 + i, got, want,
                             xn);
            }
        }
    }
    free(nm), free(nv), free(em), free(ev);
    return rc;
}

static void check_reference(ferry_moments form, uint64_t *rng)
{
    static const size_t lens[] = {3 * MOMENTS_Q8_BLOCK + 1001, 70001, 13};
    static const uint64_t index0s[] = {0, (1ull << 32) - 70001 / 2, 5};
    adamw_hparams hp = {1e-3, 0.9, 0.999, 1e-8, 0.1};
    for (int c = 0; c < 3; c++) {
        size_t n = lens[c];
        cstate s = cs_alloc(form, n), before = cs_alloc(form, n);
        cs_fill(&s, rng);
        ref_count total = {0, 0, 0};
        for (int64_t step = 1; step <= 4; step++) {
            cs_copy(&before, &s);
            adamw_job j = cs_job(&s, hp, step, index0s[c]);
            ferry_status st = adamw_run(NULL, &j);
            if (st != FERRY_OK)
                tap_diag("  adamw_run: %s", ferry_last_error());
            ref_count rc = check_step(&before, &s, &j);
            total.bad += rc.bad, total.near_diff += rc.near_diff, total.p_bad += rc.p_bad;
            for (size_t i = 0; i < n; i++)
                s.g[i] = (float)(gauss(rng) * ((i / 3000) % 4 == 3 ? 1e-4 : 1.0));
        }
        TAP_IS_INT(total.bad, 0, "%s n=%zu, 4 steps: every stored moment as the double reference's, or next to it "
                   "where fp32 rounding can move it (%zu such of %zu)",
                   ferry_moments_name(form), n, total.near_diff, 8 * n);
        TAP_IS_INT(total.p_bad, 0, "%s n=%zu: weights within 8 ulp of the double reference", ferry_moments_name(form),
                   n);
        tap_ok(total.near_diff * 1000 <= 8 * n, "%s n=%zu: rounding-point exceptions rare (%zu of %zu)",
               ferry_moments_name(form), n, total.near_diff, 8 * n);
        cs_free(&s), cs_free(&before);
    }
}

/* ---- the maps, by hand ---- */

static void check_maps(void)
{
    const float *sm = moments_q8_map(1), *um = moments_q8_map(0);
    int sorted = 1;
    for (int k = 0; k < 255; k++)
        sorted &= sm[k] < sm[k + 1] && um[k] < um[k + 1];
    tap_ok(sorted, "both maps strictly ascending");
    TAP_IS_CLOSE(um[0], 0.0, 0, 0, "unsigned map starts at 0");
    TAP_IS_CLOSE(um[1], 3.25e-7, 0, 1e-7, "unsigned map: 1e-6 * (0.1 + 0.55) / 2");
    TAP_IS_CLOSE(um[254], 0.996484375, 0, 1e-7, "unsigned map: (0.1 + 0.9 * 127/128 + 1) / 2");
    TAP_IS_CLOSE(um[255], 1.0, 0, 0, "unsigned map ends at 1");
    TAP_IS_CLOSE(sm[255], 1.0, 0, 0, "signed map ends at 1");
    TAP_IS_CLOSE(sm[254], 0.99296875, 0, 1e-7, "signed map: (0.1 + 0.9 * 63/64 + 1) / 2");
    TAP_IS_CLOSE(sm[0], -0.99296875, 0, 1e-7, "signed map starts at -0.99296875 (no -1, as bitsandbytes')");
    int zero = -1;
    for (int k = 0; k < 256; k++)
        if (sm[k] == 0.0f)
            zero = k;
    TAP_IS_INT(zero, 127, "signed map: 0 at code 127");
    TAP_IS_CLOSE(sm[128], 5.5e-7, 0, 1e-7, "signed map: smallest positive 1e-6 * 0.55");
    /* the code is the nearest value, by brute force */
    uint64_t rng = 11;
    size_t bad = 0;
    for (int t = 0; t < 20000; t++) {
        int s = t & 1;
        const float *map = s ? sm : um;
        float x = (float)(s ? 2 * tap_rand_unit(&rng) - 1 : tap_rand_unit(&rng));
        if (t % 3 == 0)
            x = (float)(x * pow(10.0, -6.0 * tap_rand_unit(&rng)));
        if (t % 101 == 0)
            x = moments_q8_thresholds(s)[t % 255]; /* exactly on a threshold: the lower code */
        if (t % 103 == 0 && !s)
            x = map[t % 256]; /* exactly a value: that code */
        int code = moments_q8_code(moments_q8_buckets_of(s), x), best = 0;
        if (s) {
            for (int k = 1; k < 256; k++)
                if (fabs((double)x - map[k]) < fabs((double)x - map[best]))
                    best = k;
        } else {
            while (best < 255 && map[best] < x)
                best++;
        }
        bad += code != best;
    }
    TAP_IS_INT(bad, 0, "codes of 20000 values: m's the nearest map values (ties lower), v's the first not below");
    tap_ok(moments_q8_bucket_fill(1) <= MOMENTS_Q8_BUCKET_MAX && moments_q8_bucket_fill(0) <= MOMENTS_Q8_BUCKET_MAX,
           "at most %d thresholds in a bucket (signed %d, unsigned %d)", MOMENTS_Q8_BUCKET_MAX,
           moments_q8_bucket_fill(1), moments_q8_bucket_fill(0));
    TAP_IS_INT(moments_q8_code(moments_q8_buckets_of(1), NAN), 0, "NaN: code 0");
    TAP_IS_INT(moments_q8_code(moments_q8_buckets_of(1), 3.0f), 255, "above 1: the top code");
}

/* ---- bitwise agreement ---- */

static void check_bitwise(ferry_moments form, uint64_t *rng)
{
    size_t n = 5 * OPTIM_TILE / 2 + 777; /* several tiles, a partial block */
    adamw_hparams hp = {2e-3, 0.9, 0.95, 1e-8, 0.05};
    size_t ranges[3][2] = {{100, 50}, {2040, 20}, {OPTIM_TILE + 5, 3000}};
    cstate base = cs_alloc(form, n), ref = cs_alloc(form, n), t = cs_alloc(form, n);
    cs_fill(&base, rng);
    cs_copy(&ref, &base);
    adamw_job j = cs_job(&ref, hp, 7, 123);
    j.no_decay = (const size_t(*)[2])ranges;
    j.no_decay_count = 3;
    TAP_IS_STATUS(adamw_run_level(NULL, &j, CPU_SIMD_SCALAR), FERRY_OK, "%s: scalar runs", ferry_moments_name(form));
    int maxl = (int)cpu_simd_detect();
    for (int l = 1; l <= maxl; l++) {
        cs_copy(&t, &base);
        adamw_job k = cs_job(&t, hp, 7, 123);
        k.no_decay = j.no_decay, k.no_decay_count = 3;
        adamw_run_level(NULL, &k, (cpu_simd)l);
        TAP_IS_INT(cs_same(&t, &ref), 1, "%s: %s bitwise equal to scalar", ferry_moments_name(form),
                   cpu_simd_name((cpu_simd)l));
    }
    for (int threads = 1; threads <= 3; threads++) {
        tp_pool *pool = NULL;
        if (tp_pool_create(threads, -1, &pool) != FERRY_OK) {
            tap_ok(0, "pool of %d: %s", threads, ferry_last_error());
            continue;
        }
        cs_copy(&t, &base);
        adamw_job k = cs_job(&t, hp, 7, 123);
        k.no_decay = j.no_decay, k.no_decay_count = 3;
        adamw_run(pool, &k);
        TAP_IS_INT(cs_same(&t, &ref), 1, "%s: %d threads bitwise equal to one", ferry_moments_name(form), threads);
        tp_pool_destroy(pool);
    }
    /* two jobs at a block boundary: the bits of one */
    cs_copy(&t, &base);
    size_t cut = 6144 / MOMENTS_Q8_BLOCK * MOMENTS_Q8_BLOCK, esz = form == FERRY_MOMENTS_BF16 ? 2 : 1;
    adamw_job a = cs_job(&t, hp, 7, 123), b = a;
    a.n = cut;
    a.no_decay_count = 2, a.no_decay = j.no_decay;
    b.n = n - cut;
    b.master += cut, b.grad = t.g + cut, b.copy_out = t.copy + cut;
    b.mq = t.m + cut * esz, b.vq = t.v + cut * esz, b.index0 = 123 + cut;
    size_t branges[1][2] = {{OPTIM_TILE + 5 - cut, 3000}};
    b.no_decay = (const size_t(*)[2])branges, b.no_decay_count = 1;
    if (form == FERRY_MOMENTS_8BIT)
        b.m_absmax += cut / MOMENTS_Q8_BLOCK, b.v_absmax += cut / MOMENTS_Q8_BLOCK;
    ferry_status sa = adamw_run(NULL, &a), sb = adamw_run(NULL, &b);
    if (sa != FERRY_OK || sb != FERRY_OK)
        tap_diag("  split jobs: %s", ferry_last_error());
    TAP_IS_INT(sa == FERRY_OK && sb == FERRY_OK && cs_same(&t, &ref), 1, "%s: a job split in two at a block bitwise equal to one",
               ferry_moments_name(form));
    if (form == FERRY_MOMENTS_BF16) { /* element-wise: no-decay ranges are separate jobs with weight decay 0 */
        cs_copy(&t, &base);
        adamw_hparams plain = hp;
        plain.weight_decay = 0;
        size_t at = 0;
        for (int r = 0; r <= 3; r++) {
            size_t off = r < 3 ? ranges[r][0] : n, len = r < 3 ? ranges[r][1] : 0;
            adamw_job d = cs_job(&t, hp, 7, 123), e;
            d.master += at, d.grad = t.g + at, d.copy_out = t.copy + at, d.mq = t.m + 2 * at, d.vq = t.v + 2 * at;
            d.index0 = 123 + at, d.n = off - at;
            adamw_run(NULL, &d);
            e = cs_job(&t, plain, 7, 123);
            e.master += off, e.grad = t.g + off, e.copy_out = t.copy + off, e.mq = t.m + 2 * off, e.vq = t.v + 2 * off;
            e.index0 = 123 + off, e.n = len;
            adamw_run(NULL, &e);
            at = off + len;
        }
        TAP_IS_INT(cs_same(&t, &ref), 1, "bf16: no-decay ranges bitwise equal to separate jobs with weight decay 0");
    }
    /* another seed or step: other rounding (the bits are used) */
    cs_copy(&t, &base);
    adamw_job k = cs_job(&t, hp, 7, 123);
    k.no_decay = j.no_decay, k.no_decay_count = 3;
    k.seed ^= 1;
    adamw_run(NULL, &k);
    if (form == FERRY_MOMENTS_BF16)
        TAP_IS_INT(memcmp(t.m, ref.m, 2 * n) != 0, 1, "bf16: another seed rounds other elements");
    cs_free(&base), cs_free(&ref), cs_free(&t);
}

/* ---- conversions and bad input ---- */

static void check_convert(uint64_t *rng)
{
    size_t n = 5000;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    unsigned char *q = malloc(moments_bytes(FERRY_MOMENTS_8BIT, n)), *h = malloc(2 * n);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)gauss(rng);
    moments_convert(h, FERRY_MOMENTS_BF16, x, FERRY_MOMENTS_F32, n, 1);
    moments_convert(y, FERRY_MOMENTS_F32, h, FERRY_MOMENTS_BF16, n, 1);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += y[i] != dtype_round_bf16(x[i]);
    TAP_IS_INT(bad, 0, "f32 -> bf16 -> f32 rounds to nearest even");
    moments_convert(q, FERRY_MOMENTS_8BIT, x, FERRY_MOMENTS_F32, n, 1);
    moments_convert(y, FERRY_MOMENTS_F32, q, FERRY_MOMENTS_8BIT, n, 1);
    bad = 0;
    const float *map = moments_q8_map(1);
    for (size_t i = 0; i < n; i++) {
        double amax = 0;
        size_t b0 = i / MOMENTS_Q8_BLOCK * MOMENTS_Q8_BLOCK;
        for (size_t k = b0; k < b0 + MOMENTS_Q8_BLOCK && k < n; k++)
            amax = fmax(amax, fabs(x[k]));
        int near, c = ref_code(map, x[i] / amax, 16 * FLT_EPSILON * fabs(x[i] / amax), &near);
        bad += fabs(y[i] - map[c] * amax) > 4 * FLT_EPSILON * amax && !near;
    }
    TAP_IS_INT(bad, 0, "f32 -> 8bit -> f32 gives the nearest map value times the block's absmax");
    TAP_IS_STATUS(moments_convert(y, (ferry_moments)9, x, FERRY_MOMENTS_F32, n, 1), FERRY_ERR_INVALID_ARGUMENT,
                  "unknown form refused");
    TAP_IS_STATUS(moments_convert(NULL, FERRY_MOMENTS_BF16, x, FERRY_MOMENTS_F32, n, 1), FERRY_ERR_INVALID_ARGUMENT,
                  "NULL buffer refused");
    ferry_moments f;
    TAP_IS_STATUS(ferry_moments_parse("8bit", &f), FERRY_OK, "'8bit' parses");
    TAP_IS_INT(f, FERRY_MOMENTS_8BIT, "... as FERRY_MOMENTS_8BIT");
    TAP_IS_STATUS(ferry_moments_parse("fp8", &f), FERRY_ERR_INVALID_ARGUMENT, "'fp8' refused: %s", ferry_last_error());
    free(x), free(y), free(q), free(h);
}

static void check_refusals(void)
{
    cstate s = cs_alloc(FERRY_MOMENTS_8BIT, 10);
    memset(s.p, 0, 40), memset(s.g, 0, 40);
    adamw_hparams hp = ADAMW_HPARAMS_DEFAULT;
    adamw_job j = cs_job(&s, hp, 1, 0);
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_OK, "a good 8bit job runs");
    adamw_job k = j;
    k.m_absmax = NULL;
    TAP_IS_STATUS(adamw_run(NULL, &k), FERRY_ERR_INVALID_ARGUMENT, "8bit without absmax refused");
    k = j, k.mq = NULL;
    TAP_IS_STATUS(adamw_run(NULL, &k), FERRY_ERR_INVALID_ARGUMENT, "compact form with NULL moment refused");
    k = j, k.moments = (ferry_moments)5;
    TAP_IS_STATUS(adamw_run(NULL, &k), FERRY_ERR_INVALID_ARGUMENT, "unknown form refused: %s", ferry_last_error());
    size_t r[2][2] = {{4, 3}, {5, 1}};
    k = j, k.no_decay = (const size_t(*)[2])r, k.no_decay_count = 2;
    TAP_IS_STATUS(adamw_run(NULL, &k), FERRY_ERR_INVALID_ARGUMENT, "overlapping no-decay ranges refused: %s",
                  ferry_last_error());
    size_t r2[1][2] = {{8, 3}};
    k.no_decay = (const size_t(*)[2])r2, k.no_decay_count = 1;
    TAP_IS_STATUS(adamw_run(NULL, &k), FERRY_ERR_INVALID_ARGUMENT, "a no-decay range past n refused");
    cs_free(&s);
}

int main(void)
{
    uint64_t rng = 20261206;
    tap_diag("seed %llu", (unsigned long long)rng);
    check_maps();
    check_reference(FERRY_MOMENTS_BF16, &rng);
    check_reference(FERRY_MOMENTS_8BIT, &rng);
    check_bitwise(FERRY_MOMENTS_BF16, &rng);
    check_bitwise(FERRY_MOMENTS_8BIT, &rng);
    check_convert(&rng);
    check_refusals();
    return tap_done();
}
