/* tests/optim/test_gradnorm.c: the gradient sum of squares of every SIMD
 * level against a double sum written here; bitwise the same for every level
 * and 1, 2, 3 threads; inf/NaN detection; PyTorch's clip coefficient on hand
 * cases; the step's recipe (gradnorm_decide) skipping a step with a NaN (weights and moments
 * untouched) and clipping otherwise. */
#include <math.h>
#include <string.h>

#include "optim/adamw.h"
#include "optim/gradnorm.h"
#include "tests/tap.h"

static double gauss(uint64_t *rng)
{
    double u = tap_rand_unit(rng) + 1e-300, w = tap_rand_unit(rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

/* Random gradients of type t; *ref gets the fp32 values. */
static void *make_grads(ferry_dtype t, size_t n, uint64_t *rng, float *ref)
{
    void *g = malloc(n * dtype_size(t) + 16);
    for (size_t i = 0; i < n; i++) {
        float x = (float)(gauss(rng) * pow(10.0, (double)(int)(tap_rand_u64(rng) % 5) - 2));
        if (t == FERRY_DTYPE_BF16) {
            ((uint16_t *)g)[i] = dtype_f32_to_bf16(x);
            x = dtype_bf16_to_f32(((uint16_t *)g)[i]);
        } else if (t == FERRY_DTYPE_F16) {
            ((uint16_t *)g)[i] = dtype_f32_to_f16(x);
            x = dtype_f16_to_f32(((uint16_t *)g)[i]);
        } else {
            ((float *)g)[i] = x;
        }
        ref[i] = x;
    }
    return g;
}

static void check_sums(uint64_t *rng)
{
    static const size_t lens[] = {1, 15, 16, 17, 100, 40001, 3 * 65536 + 77};
    tp_pool *pools[3] = {NULL, NULL, NULL};
    for (int t = 0; t < 3; t++)
        tp_pool_create(t + 1, -1, &pools[t]);
    for (int ti = 0; ti < 3; ti++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            ferry_dtype t = (ferry_dtype)(FERRY_DTYPE_F32 + ti); /* f32, bf16, f16 */
            size_t n = lens[li];
            float *ref = malloc(n * 4);
            void *g = make_grads(t, n, rng, ref);
            long double want = 0; /* wider accumulator, independent order */
            for (size_t i = 0; i < n; i++)
                want += (long double)ref[i] * ref[i];
            double first = 0;
            int all_same = 1;
            for (int l = 0; l <= (int)cpu_simd_detect(); l++)
                for (int p = -1; p < 3; p++) {
                    double s = -1;
                    bool bad = true;
                    ferry_status st = gradnorm_sumsq_level(p < 0 ? NULL : pools[p], g, t, n, (cpu_simd)l, &s, &bad);
                    if (st != FERRY_OK || bad)
                        all_same = 0;
                    if (l == 0 && p == -1) {
                        first = s;
                        TAP_IS_CLOSE(s, (double)want, 0, 1e-12, "%s n=%zu: sum of squares equals the long double sum",
                                     dtype_name(t), n);
                    } else if (memcmp(&s, &first, sizeof s) != 0) {
                        all_same = 0;
                        tap_diag("  %s threads=%d: %.17g vs %.17g", cpu_simd_name((cpu_simd)l), p + 1, s, first);
                    }
                }
            TAP_IS_INT(all_same, 1, "%s n=%zu: bitwise the same for every SIMD level and 1, 2, 3 threads",
                       dtype_name(t), n);
            free(g);
            free(ref);
        }
    for (int t = 0; t < 3; t++)
        tp_pool_destroy(pools[t]);
}

static void check_nonfinite(uint64_t *rng)
{
    size_t n = 70001;
    float *ref = malloc(n * 4);
    const size_t where[] = {0, 12345, 65536, n - 1};
    for (int ti = 0; ti < 3; ti++)
        for (int bad_kind = 0; bad_kind < 2; bad_kind++)
            for (size_t w = 0; w < 4; w++) {
                ferry_dtype t = (ferry_dtype)(FERRY_DTYPE_F32 + ti); /* f32, bf16, f16 */
                void *g = make_grads(t, n, rng, ref);
                float bad = bad_kind ? INFINITY : NAN;
                if (t == FERRY_DTYPE_F32)
                    ((float *)g)[where[w]] = bad;
                else
                    ((uint16_t *)g)[where[w]] = t == FERRY_DTYPE_BF16 ? dtype_f32_to_bf16(bad) : dtype_f32_to_f16(bad);
                int ok = 1;
                for (int l = 0; l <= (int)cpu_simd_detect(); l++) {
                    double s;
                    bool nf = false;
                    gradnorm_sumsq_level(NULL, g, t, n, (cpu_simd)l, &s, &nf);
                    ok &= nf && !isfinite(s);
                }
                TAP_IS_INT(ok, 1, "%s: %s at element %zu detected by every level", dtype_name(t),
                           bad_kind ? "inf" : "NaN", where[w]);
                free(g);
            }
    free(ref);
}

static void check_clip(void)
{
    TAP_IS_CLOSE(gradnorm_clip_coef(10.0, 1.0f), 1.0 / (10.0 + 1e-6), 0, 1e-7, "norm 10, max 1: 1/(10+1e-6)");
    TAP_IS_CLOSE(gradnorm_clip_coef(0.5, 1.0f), 1.0, 0, 0, "norm 0.5, max 1: 1 (clamped)");
    TAP_IS_CLOSE(gradnorm_clip_coef(3.0, 0.0f), 1.0, 0, 0, "max_norm 0: clipping off");
    TAP_IS_CLOSE(gradnorm_clip_coef(INFINITY, 1.0f), 0.0, 0, 0, "non-finite norm: 0");
    TAP_IS_CLOSE(gradnorm_clip_coef(2.0, 2.0f), 2.0 / (2.0 + 1e-6), 0, 1e-7, "norm = max_norm: just under 1");
}

/* The step's recipe as the engine runs it: every group's sum of squares,
 * gradnorm_decide, and the update of every group with its clip coefficient. */
static gradnorm_decision recipe(tp_pool *pool, const adamw_job *jobs, int G, float max_norm)
{
    double sums[8];
    bool bad[8];
    for (int i = 0; i < G; i++)
        gradnorm_sumsq(pool, jobs[i].grad, jobs[i].grad_dtype, jobs[i].n, &sums[i], &bad[i]);
    gradnorm_decision d = gradnorm_decide(sums, bad, G, max_norm);
    for (int i = 0; i < G && !d.skipped; i++) {
        adamw_job j = jobs[i];
        j.grad_scale = d.clip_coef;
        adamw_run(pool, &j);
    }
    return d;
}

static void check_step_groups(uint64_t *rng)
{
    enum { G = 3 };
    size_t n[G] = {1000, 70000, 333};
    float *p[G], *m[G], *v[G], *g[G], *p0[G], *m0[G], *v0[G];
    adamw_job jobs[G];
    adamw_hparams hp = ADAMW_HPARAMS_DEFAULT;
    for (int i = 0; i < G; i++) {
        p[i] = malloc(n[i] * 4); m[i] = malloc(n[i] * 4); v[i] = malloc(n[i] * 4); g[i] = malloc(n[i] * 4);
        p0[i] = malloc(n[i] * 4); m0[i] = malloc(n[i] * 4); v0[i] = malloc(n[i] * 4);
        for (size_t k = 0; k < n[i]; k++) {
            p[i][k] = (float)gauss(rng);
            m[i][k] = (float)(0.01 * gauss(rng));
            v[i][k] = (float)(1e-4 * tap_rand_unit(rng));
            g[i][k] = (float)(0.1 * gauss(rng));
        }
        memcpy(p0[i], p[i], n[i] * 4); memcpy(m0[i], m[i], n[i] * 4); memcpy(v0[i], v[i], n[i] * 4);
        jobs[i] = (adamw_job){p[i], m[i], v[i], g[i], FERRY_DTYPE_F32, n[i], 5, hp, 123.0f, NULL, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
    }
    tp_pool *pool = NULL;
    tp_pool_create(2, -1, &pool);
    g[1][4242] = NAN;
    gradnorm_decision r = recipe(pool, jobs, G, 1.0f);
    TAP_IS_INT(r.skipped, 1, "a step with a NaN gradient is skipped");
    TAP_IS_INT(r.bad_group, 1, "group 1 named as the one with a non-finite gradient");
    int untouched = 1;
    for (int i = 0; i < G; i++)
        untouched &= !memcmp(p[i], p0[i], n[i] * 4) && !memcmp(m[i], m0[i], n[i] * 4) && !memcmp(v[i], v0[i], n[i] * 4);
    TAP_IS_INT(untouched, 1, "weights and moments of every group untouched");

    g[1][4242] = 0.5f;
    double want_sumsq = 0; /* over the gradients as they now are */
    for (int i = 0; i < G; i++)
        for (size_t k = 0; k < n[i]; k++)
            want_sumsq += (double)g[i][k] * g[i][k];
    double want_norm = sqrt(want_sumsq);
    r = recipe(pool, jobs, G, 1.0f);
    TAP_IS_INT(r.skipped, 0, "a finite step is not skipped");
    TAP_IS_INT(r.bad_group, -1, "no group is named");
    TAP_IS_CLOSE(r.grad_norm, want_norm, 0, 1e-12, "global norm of the gradients");
    float want_coef = (float)(1.0 / (want_norm + 1e-6));
    TAP_IS_CLOSE(r.clip_coef, want_coef, 0, 1e-6, "clip coefficient max_norm/(norm+1e-6)");
    /* the same update by hand: adamw_run with grad_scale = coef */
    int same = 1;
    for (int i = 0; i < G; i++) {
        adamw_job j = jobs[i];
        j.master = p0[i]; j.m = m0[i]; j.v = v0[i];
        j.grad_scale = r.clip_coef;
        adamw_run(NULL, &j);
        same &= !memcmp(p[i], p0[i], n[i] * 4) && !memcmp(m[i], m0[i], n[i] * 4);
    }
    TAP_IS_INT(same, 1, "the groups were updated with grad_scale = clip_coef");
    double sums[2] = {4.0, 5.0};
    bool bad[2] = {false, false};
    gradnorm_decision off = gradnorm_decide(sums, bad, 2, 0.0f);
    TAP_IS_CLOSE(off.grad_norm, 3.0, 0, 0, "max_norm 0: the norm is still reported (sqrt(4 + 5))");
    TAP_IS_CLOSE(off.clip_coef, 1.0, 0, 0, "max_norm 0: no clipping");
    tp_pool_destroy(pool);
    for (int i = 0; i < G; i++) {
        free(p[i]); free(m[i]); free(v[i]); free(g[i]); free(p0[i]); free(m0[i]); free(v0[i]);
    }
}

int main(void)
{
    uint64_t seed = 0x9a0bu, rng = seed;
    tap_diag("seed %llu", (unsigned long long)seed);
    check_sums(&rng);
    check_nonfinite(&rng);
    check_clip();
    check_step_groups(&rng);
    double s;
    bool nf;
    TAP_IS_STATUS(gradnorm_sumsq(NULL, NULL, FERRY_DTYPE_F32, 5, &s, &nf), FERRY_ERR_INVALID_ARGUMENT, "NULL gradient refused");
    TAP_IS_STATUS(gradnorm_sumsq(NULL, &s, (ferry_dtype)5, 1, &s, &nf), FERRY_ERR_INVALID_ARGUMENT, "unknown type refused");
    TAP_IS_STATUS(gradnorm_sumsq(NULL, NULL, FERRY_DTYPE_F32, 0, &s, &nf), FERRY_OK, "empty buffer: OK");
    TAP_IS_CLOSE(s, 0.0, 0, 0, "empty buffer: sum 0");
    return tap_done();
}
