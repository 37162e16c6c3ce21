/* tools/bench/adam/bench_adam.c: how close the CPU AdamW comes to the memory
 * bandwidth it needs. In one run, on the same threads and buffers, it times:
 *   - a STREAM-style triad (a = b + s*c),
 *   - an "ideal Adam traffic" kernel that reads p, m, v, g and writes p, m, v
 *     and the 16-bit weight copy — exactly AdamW's bytes, almost no math,
 *   - AdamW through optim/adamw.h at every SIMD level this CPU has,
 *   - a straightforward scalar AdamW loop on one thread (no optim layer),
 * round-robin in each of --steps rounds after a warm-up (medians; ratios are
 * medians of per-round ratios, so bandwidth drift cancels), and prints parameters/s,
 * GB/s (bytes AdamW must read plus write) and the ratio to the ceilings.
 * Then, again round-robin with the triad and the ideal kernel, AdamW at
 * the best level with each form of the moments (optim/moments.h: f32,
 * bf16, 8bit), each as a ratio to its own ideal-traffic ceiling: the
 * memory bandwidth measured in the round (the better of the triad's and
 * the ideal kernel's) over the bytes the form moves per parameter (p read
 * and written, g, the copy, and m and v each read and written in the form,
 * 8bit's absmax included).
 * Usage: bench_adam [--params N] [--threads T] [--steps S] [--grad f32|bf16|f16] */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/clock.h"
#include "optim/adamw.h"

typedef struct bench {
    tp_pool *pool;
    size_t n;
    float *p, *m, *v;
    void *g, *copy;
    ferry_dtype gt;
} bench;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void tile_range(const bench *b, size_t tile, size_t *off, size_t *len)
{
    *off = tile * OPTIM_TILE;
    *len = b->n - *off < OPTIM_TILE ? b->n - *off : OPTIM_TILE;
}

static void triad_tile(void *arg, size_t tile, int worker)
{
    (void)worker;
    const bench *b = arg;
    size_t off, len;
    tile_range(b, tile, &off, &len);
    float *a = b->p + off;
    const float *x = b->m + off, *y = b->v + off;
    for (size_t i = 0; i < len; i++)
        a[i] = x[i] + 0.5f * y[i];
}

/* The ideal kernel: AdamW's loads and stores (normal stores for p, m, v;
 * streaming stores for the copy, as the kernel does), one add each. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx2"))) static void ideal_tile512(void *arg, size_t tile, int worker)
{
    (void)worker;
    const bench *b = arg;
    size_t off, len;
    tile_range(b, tile, &off, &len);
    float *p = b->p + off, *m = b->m + off, *v = b->v + off;
    const char *g = (const char *)b->g + off * dtype_size(b->gt);
    uint16_t *c = (uint16_t *)b->copy + off;
    for (size_t i = 0; i + 16 <= len; i += 16) {
        __m512 gv = b->gt == FERRY_DTYPE_F32 ? _mm512_loadu_ps((const float *)g + i)
                                       : _mm512_castsi512_ps(_mm512_slli_epi32(
                                             _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i))), 16));
        __m512 pv = _mm512_add_ps(_mm512_loadu_ps(p + i), gv);
        _mm512_storeu_ps(p + i, pv);
        _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), gv));
        _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), gv));
        _mm256_stream_si256((__m256i *)(c + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(pv), 16)));
    }
    _mm_sfence();
}

__attribute__((target("avx2"))) static void ideal_tile256(void *arg, size_t tile, int worker)
{
    (void)worker;
    const bench *b = arg;
    size_t off, len;
    tile_range(b, tile, &off, &len);
    float *p = b->p + off, *m = b->m + off, *v = b->v + off;
    const char *g = (const char *)b->g + off * dtype_size(b->gt);
    uint16_t *c = (uint16_t *)b->copy + off;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        __m256 gv = b->gt == FERRY_DTYPE_F32 ? _mm256_loadu_ps((const float *)g + i)
                                       : _mm256_castsi256_ps(_mm256_slli_epi32(
                                             _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)g + i))), 16));
        __m256 pv = _mm256_add_ps(_mm256_loadu_ps(p + i), gv);
        _mm256_storeu_ps(p + i, pv);
        _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_loadu_ps(m + i), gv));
        _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(v + i), gv));
        __m256i h = _mm256_srli_epi32(_mm256_castps_si256(pv), 16);
        h = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
        _mm_stream_si128((__m128i *)(c + i), _mm256_castsi256_si128(h));
    }
    _mm_sfence();
}

static void ideal_tile_scalar(void *arg, size_t tile, int worker)
{
    (void)worker;
    const bench *b = arg;
    size_t off, len;
    tile_range(b, tile, &off, &len);
    for (size_t i = off; i < off + len; i++) {
        float gv = b->gt == FERRY_DTYPE_F32 ? ((const float *)b->g)[i] : dtype_bf16_to_f32(((const uint16_t *)b->g)[i]);
        b->p[i] += gv;
        b->m[i] += gv;
        b->v[i] += gv;
        ((uint16_t *)b->copy)[i] = (uint16_t)(dtype_f32_bits(b->p[i]) >> 16);
    }
}

/* AdamW as one would first write it: one thread, one element at a time. */
static void naive_adamw(bench *b, int64_t step)
{
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    uint16_t *c = b->copy;
    for (size_t i = 0; i < b->n; i++) {
        float g = b->gt == FERRY_DTYPE_F32 ? ((const float *)b->g)[i]
                  : b->gt == FERRY_DTYPE_BF16 ? dtype_bf16_to_f32(((const uint16_t *)b->g)[i])
                                        : dtype_f16_to_f32(((const uint16_t *)b->g)[i]);
        b->p[i] *= 1.0f - lr * wd;
        b->m[i] = b1 * b->m[i] + (1.0f - b1) * g;
        b->v[i] = b2 * b->v[i] + (1.0f - b2) * g * g;
        b->p[i] -= lr / bc1 * b->m[i] / (sqrtf(b->v[i] / bc2) + eps);
        c[i] = dtype_f32_to_bf16(b->p[i]);
    }
}

typedef void (*bench_fn)(bench *b, int level, int64_t step);

static void run_triad(bench *b, int level, int64_t step)
{
    (void)level;
    (void)step;
    tp_parallel_for(b->pool, (b->n + OPTIM_TILE - 1) / OPTIM_TILE, triad_tile, b);
}

static void run_ideal(bench *b, int level, int64_t step)
{
    (void)step; /* the ideal kernel has no step */
    tp_tile_fn f = level == CPU_SIMD_AVX512 ? ideal_tile512 : level == CPU_SIMD_AVX2 ? ideal_tile256 : ideal_tile_scalar;
    tp_parallel_for(b->pool, (b->n + OPTIM_TILE - 1) / OPTIM_TILE, f, b);
}

static void run_adamw(bench *b, int level, int64_t step)
{
    adamw_job j = {b->p, b->m, b->v, b->g, b->gt, b->n, step, ADAMW_HPARAMS_DEFAULT, 1.0f, b->copy, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
    if (adamw_run_level(b->pool, &j, (cpu_simd)level) != FERRY_OK) {
        fprintf(stderr, "bench_adam: adamw failed: %s\n", ferry_last_error());
        exit(1);
    }
}

/* AdamW with the moments in `form`, held in b->m and b->v's memory (the
 * compact forms take less than the fp32 arrays). */
static void run_form(bench *b, int level, int64_t step, ferry_moments form)
{
    adamw_job j = {b->p, b->m, b->v, b->g, b->gt, b->n, step, ADAMW_HPARAMS_DEFAULT, 1.0f, b->copy, FERRY_DTYPE_BF16,
                   .moments = form};
    if (form != FERRY_MOMENTS_F32) {
        j.m = j.v = NULL;
        j.mq = b->m, j.vq = b->v;
        if (form == FERRY_MOMENTS_8BIT) {
            j.m_absmax = moments_q8_absmax(b->m, b->n);
            j.v_absmax = moments_q8_absmax(b->v, b->n);
        }
    }
    if (adamw_run_level(b->pool, &j, (cpu_simd)level) != FERRY_OK) {
        fprintf(stderr, "bench_adam: adamw (%s moments) failed: %s\n", ferry_moments_name(form), ferry_last_error());
        exit(1);
    }
}

/* The bytes one parameter's update moves with moments in `form`. */
static double form_bytes(ferry_moments form, size_t gsz)
{
    double moments = 2.0 * 2.0 * (double)moments_bytes(form, MOMENTS_Q8_BLOCK) / (double)MOMENTS_Q8_BLOCK;
    return 8.0 + (double)gsz + 2.0 + moments;
}

/* Round-robin rounds of the triad and each form; prints each form's figure
 * and its ratio to its ceiling (medians of per-round ratios). */
static void bench_forms(bench *b, int level, int steps, size_t gsz)
{
    double tt[64], bw[64], tf[3][64], r[3][64];
    for (int f = 0; f < 3; f++) { /* zero moments in each form, then a warm-up */
        memset(b->m, 0, b->n * 4);
        memset(b->v, 0, b->n * 4);
        run_form(b, level, 1, (ferry_moments)f);
    }
    for (int s = 0; s < steps; s++) {
        double t0 = clock_now_ms() / 1e3;
        run_triad(b, 0, 0);
        tt[s] = clock_now_ms() / 1e3 - t0;
        t0 = clock_now_ms() / 1e3;
        run_ideal(b, level, 0);
        double ti = clock_now_ms() / 1e3 - t0, triad = 12.0 / tt[s], ideal = (28.0 + (double)gsz) / ti;
        bw[s] = (triad > ideal ? triad : ideal) * (double)b->n; /* bytes/s */
        for (int f = 0; f < 3; f++) {
            memset(b->m, 0, b->n * 4); /* each form from zero moments: the buffers are shared */
            memset(b->v, 0, b->n * 4);
            t0 = clock_now_ms() / 1e3;
            run_form(b, level, s + 2, (ferry_moments)f);
            tf[f][s] = clock_now_ms() / 1e3 - t0;
            double ceiling = bw[s] / form_bytes((ferry_moments)f, gsz); /* params/s at the round's bandwidth */
            r[f][s] = ((double)b->n / tf[f][s]) / ceiling;
        }
    }
    qsort(bw, (size_t)steps, sizeof(double), cmp_double);
    double bw_gbs = bw[steps / 2] / 1e9;
    printf("moments forms at %s, against %.2f GB/s (the better of the triad and the ideal kernel, median of the same "
           "rounds):\n", cpu_simd_name((cpu_simd)level), bw_gbs);
    for (int f = 0; f < 3; f++) {
        qsort(tf[f], (size_t)steps, sizeof(double), cmp_double);
        qsort(r[f], (size_t)steps, sizeof(double), cmp_double);
        double t = tf[f][steps / 2], bytes = form_bytes((ferry_moments)f, gsz);
        printf("  adamw %-4s moments %6.2f B/param  %8.3f s  %6.2f Gparam/s  ceiling %6.2f Gparam/s  %.2f of it\n",
               ferry_moments_name((ferry_moments)f), bytes, t, (double)b->n / t / 1e9, bw_gbs / bytes,
               r[f][steps / 2]);
    }
}

static void run_naive(bench *b, int level, int64_t step)
{
    (void)level;
    naive_adamw(b, step);
}

/* Median seconds of `steps` runs after one warm-up. */
static double time_median(bench *b, bench_fn fn, int level, int steps)
{
    double t[64];
    fn(b, level, 1);
    for (int s = 0; s < steps; s++) {
        double t0 = (clock_now_ms() / 1e3);
        fn(b, level, s + 2);
        t[s] = (clock_now_ms() / 1e3) - t0;
    }
    qsort(t, (size_t)steps, sizeof t[0], cmp_double);
    return t[steps / 2];
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_adam [--params N] [--threads T] [--steps S (1..64)] [--grad f32|bf16|f16]\n"
                    "  N parameters (default 268435456 = 256M; k/M/G suffixes allowed),\n"
                    "  T threads (default: every hardware thread of the machine)\n");
}

static int parse_count(const char *s, size_t *out)
{
    char *end;
    double x = strtod(s, &end);
    if (end == s || x <= 0)
        return -1;
    if (*end == 'k' || *end == 'K') x *= 1e3, end++;
    else if (*end == 'M' || *end == 'm') x *= 1e6, end++;
    else if (*end == 'G' || *end == 'g') x *= 1e9, end++;
    if (*end || x > 1e12)
        return -1;
    *out = (size_t)x;
    return 0;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("bench_adam"); /* a full disk or /dev/full on stdout is exit 1 */
    size_t n = (size_t)256 << 20;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), steps = 5;
    ferry_dtype gt = FERRY_DTYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--params") && parse_count(val, &n) == 0) i++;
        else if (!strcmp(a, "--threads") && (threads = atoi(val)) > 0) i++;
        else if (!strcmp(a, "--steps") && (steps = atoi(val)) >= 1 && steps <= 64) i++;
        else if (!strcmp(a, "--grad") && !strcmp(val, "f32")) gt = FERRY_DTYPE_F32, i++;
        else if (!strcmp(a, "--grad") && !strcmp(val, "bf16")) gt = FERRY_DTYPE_BF16, i++;
        else if (!strcmp(a, "--grad") && !strcmp(val, "f16")) gt = FERRY_DTYPE_F16, i++;
        else {
            fprintf(stderr, "bench_adam: bad argument '%s %s'\n", a, val);
            usage();
            return 2;
        }
    }
    bench b = {NULL, n, NULL, NULL, NULL, NULL, NULL, gt};
    if (tp_pool_create(threads, -1, &b.pool) != FERRY_OK) {
        fprintf(stderr, "bench_adam: %s\n", ferry_last_error());
        return 1;
    }
    size_t gsz = dtype_size(gt);
    void *bufs[5];
    size_t sizes[5] = {n * 4, n * 4, n * 4, n * gsz, n * 2};
    for (int i = 0; i < 5; i++)
        if (tp_alloc(b.pool, sizes[i], &bufs[i]) != FERRY_OK) {
            fprintf(stderr, "bench_adam: %s; try a smaller --params\n", ferry_last_error());
            return 1;
        }
    b.p = bufs[0], b.m = bufs[1], b.v = bufs[2], b.g = bufs[3], b.copy = bufs[4];
    for (size_t i = 0; i < n; i++) { /* small values so repeated steps stay finite */
        b.p[i] = 0.01f * (float)(i % 97);
        if (gt == FERRY_DTYPE_F32)
            ((float *)b.g)[i] = 1e-3f * (float)((i % 13) - 6);
        else
            ((uint16_t *)b.g)[i] = 0x3a00; /* a small positive value in both formats */
    }
    double adam_bytes = 28.0 + (double)gsz; /* read p m v g, write p m v, copy */
    int best = (int)cpu_simd_detect();
    printf("bench_adam: %zu parameters, %d threads (%s), %s gradients, bf16 copy, median of %d steps\n", n,
           tp_pool_threads(b.pool), tp_pool_binding(b.pool), dtype_name(gt), steps);
    printf("AdamW moves %.0f bytes per parameter; GB = 1e9 bytes\n", adam_bytes);

    /* The machine's bandwidth drifts (shared VMs swing 2.5x): the ceilings
     * and every AdamW level are timed round-robin within each round, and a
     * ratio is the median of the per-round ratios. */
    for (size_t i = 0; i < n; i++)
        b.m[i] = 0, b.v[i] = 0;
    double t_naive = time_median(&b, run_naive, 0, steps < 3 ? steps : 3);
    double tt[64], ti[64], ta[3][64], r_ideal[3][64], r_triad[3][64];
    run_triad(&b, 0, 1);
    run_ideal(&b, best, 1);
    for (int l = 0; l <= best; l++)
        run_adamw(&b, l, 1);
    for (int s = 0; s < steps; s++) {
        double t0 = (clock_now_ms() / 1e3);
        run_triad(&b, 0, 0);
        tt[s] = (clock_now_ms() / 1e3) - t0;
        t0 = (clock_now_ms() / 1e3);
        run_ideal(&b, best, 0);
        ti[s] = (clock_now_ms() / 1e3) - t0;
        for (int l = 0; l <= best; l++) {
            t0 = (clock_now_ms() / 1e3);
            run_adamw(&b, l, s + 2);
            ta[l][s] = (clock_now_ms() / 1e3) - t0;
            r_ideal[l][s] = ti[s] / ta[l][s];
            r_triad[l][s] = (adam_bytes / ta[l][s]) / (12.0 / tt[s]);
        }
    }
    qsort(tt, (size_t)steps, sizeof(double), cmp_double);
    qsort(ti, (size_t)steps, sizeof(double), cmp_double);
    double t_triad = tt[steps / 2], t_ideal = ti[steps / 2];
    double triad_gbs = 12.0 * (double)n / t_triad / 1e9, ideal_gbs = adam_bytes * (double)n / t_ideal / 1e9;
    printf("%-28s %8.3f s  %8.2f GB/s\n", "triad (a = b + s*c)", t_triad, triad_gbs);
    printf("%-28s %8.3f s  %8.2f GB/s  %6.2f Gparam/s\n", "ideal Adam traffic", t_ideal, ideal_gbs,
           (double)n / t_ideal / 1e9);
    printf("%-28s %8.3f s  %8.2f GB/s  %6.2f Gparam/s\n", "naive scalar loop, 1 thread", t_naive,
           adam_bytes * (double)n / t_naive / 1e9, (double)n / t_naive / 1e9);
    double t_best = 0, ratio_best = 0;
    for (int l = 0; l <= best; l++) {
        qsort(ta[l], (size_t)steps, sizeof(double), cmp_double);
        qsort(r_ideal[l], (size_t)steps, sizeof(double), cmp_double);
        qsort(r_triad[l], (size_t)steps, sizeof(double), cmp_double);
        double t = ta[l][steps / 2], gbs = adam_bytes * (double)n / t / 1e9;
        char name[48];
        snprintf(name, sizeof name, "adamw %s", cpu_simd_name((cpu_simd)l));
        printf("%-28s %8.3f s  %8.2f GB/s  %6.2f Gparam/s  %.2f of ideal  %.2f of triad  %.1fx naive\n", name, t,
               gbs, (double)n / t / 1e9, r_ideal[l][steps / 2], r_triad[l][steps / 2], t_naive / t);
        if (l == best)
            t_best = t, ratio_best = r_ideal[l][steps / 2];
    }
    bench_forms(&b, best, steps, gsz);
    printf("RESULT adamw %s: %.2f Gparam/s, %.1f GB/s = %.2f of the ideal-traffic ceiling (%.1f GB/s), "
           "%.1fx the naive scalar loop\n", cpu_simd_name((cpu_simd)best), (double)n / t_best / 1e9,
           adam_bytes * (double)n / t_best / 1e9, ratio_best, ideal_gbs, t_naive / t_best);
    for (int i = 0; i < 5; i++)
        tp_free(bufs[i], sizes[i]);
    tp_pool_destroy(b.pool);
    return 0;
}
