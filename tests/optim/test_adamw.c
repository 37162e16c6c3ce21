/* tests/optim/test_adamw.c: the AdamW kernels of every SIMD level this CPU
 * has against a double-precision AdamW written here, over tens of thousands
 * of random elements and edge cases (step 1, zero, huge and tiny gradients,
 * weight decay on and off, odd lengths, unaligned buffers, every gradient
 * and copy type); all levels and 1, 2, 3 threads bitwise identical; async
 * submission; bad jobs refused. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "optim/adamw.h"
#include "tests/tap.h"

typedef struct state {
    float *p, *m, *v, *g32; /* g32: the gradient as fp32 (exact value of grad) */
    void *grad;
    void *copy;
    size_t n;
} state;

static double gauss(uint64_t *rng)
{
    double u = tap_rand_unit(rng) + 1e-300, w = tap_rand_unit(rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

/* kind: 0 normal, 1 zero, 2 huge, 3 tiny, 4 mixed magnitudes */
static void fill(state *s, ferry_dtype gt, int kind, uint64_t *rng)
{
    for (size_t i = 0; i < s->n; i++) {
        s->p[i] = (float)gauss(rng);
        s->m[i] = 0;
        s->v[i] = 0;
        double g = gauss(rng);
        if (kind == 1)
            g = 0;
        else if (kind == 2)
            g *= gt == FERRY_DTYPE_F16 ? 3e4 : 1e17; /* g*g stays finite in fp32 */
        else if (kind == 3)
            g *= gt == FERRY_DTYPE_F16 ? 1e-6 : 1e-33;
        else if (kind == 4)
            g *= gt == FERRY_DTYPE_F16 ? pow(10.0, (double)(int)(tap_rand_u64(rng) % 7) - 4) /* stay finite in fp16 */
                                 : pow(10.0, (double)(int)(tap_rand_u64(rng) % 13) - 6);
        float gf = (float)g;
        if (gt == FERRY_DTYPE_BF16) {
            ((uint16_t *)s->grad)[i] = dtype_f32_to_bf16(gf);
            gf = dtype_bf16_to_f32(((uint16_t *)s->grad)[i]);
        } else if (gt == FERRY_DTYPE_F16) {
            ((uint16_t *)s->grad)[i] = dtype_f32_to_f16(gf);
            gf = dtype_f16_to_f32(((uint16_t *)s->grad)[i]);
        } else {
            ((float *)s->grad)[i] = gf;
        }
        s->g32[i] = gf;
    }
}

static state alloc_state(size_t n, size_t misalign)
{
    /* misalign: elements added in front, so the buffers are not vector aligned */
    state s = {0};
    s.n = n;
    s.p = (float *)malloc((n + misalign) * 4) + misalign;
    s.m = (float *)malloc((n + misalign) * 4) + misalign;
    s.v = (float *)malloc((n + misalign) * 4) + misalign;
    s.g32 = malloc(n * 4);
    s.grad = (char *)malloc((n + misalign) * 4) + misalign * 4;
    s.copy = (char *)malloc((n + misalign) * 4) + misalign * 2;
    return s;
}

static void free_state(state *s, size_t misalign)
{
    free(s->p - misalign);
    free(s->m - misalign);
    free(s->v - misalign);
    free(s->g32);
    free((char *)s->grad - misalign * 4);
    free((char *)s->copy - misalign * 2);
}

static void copy_state(state *dst, const state *src, ferry_dtype gt)
{
    memcpy(dst->p, src->p, src->n * 4);
    memcpy(dst->m, src->m, src->n * 4);
    memcpy(dst->v, src->v, src->n * 4);
    memcpy(dst->g32, src->g32, src->n * 4);
    memcpy(dst->grad, src->grad, src->n * dtype_size(gt));
}

/* One AdamW step of element i in double; tolerance bounds from the size of
 * the terms each fp32 result is made of (a few ulp of each). */
typedef struct ref_out {
    double p, m, v, tol_p, tol_m, tol_v;
} ref_out;

static ref_out ref_step(const adamw_job *j, double p, double m, double v, double g)
{
    const adamw_hparams *h = &j->hp;
    double t = (double)j->step;
    g *= j->grad_scale;
    double pd = p * (1.0 - (double)h->lr * h->weight_decay);
    double m_a = h->beta1 * m, m_b = (1.0 - h->beta1) * g;
    double v_a = h->beta2 * v, v_b = (1.0 - h->beta2) * g * g;
    double mn = m_a + m_b, vn = v_a + v_b;
    double bc1 = 1.0 - pow(h->beta1, t), bc2 = 1.0 - pow(h->beta2, t);
    double denom = sqrt(vn) / sqrt(bc2) + h->eps;
    double step = h->lr / bc1;
    double u = mn / denom;
    const double e = 8.0 * FLT_EPSILON; /* 8 ulp of each term */
    ref_out r;
    r.m = mn;
    r.v = vn;
    r.p = pd - step * u;
    r.tol_m = e * (fabs(m_a) + fabs(m_b)) + 1e-44;
    r.tol_v = e * (fabs(v_a) + fabs(v_b)) + 1e-44;
    r.tol_p = e * (fabs(pd) + fabs(step * u)) + step * r.tol_m / denom + 1e-44;
    return r;
}

/* Runs `steps` steps of job on s with `level`, checking each against the
 * reference started from the state the kernel left (so errors cannot pile
 * up). Returns the number of elements out of tolerance. */
static size_t run_and_check(state *s, adamw_job job, int steps, cpu_simd level, tp_pool *pool,
                            const char *what)
{
    size_t bad = 0;
    double *prev = malloc(s->n * 3 * sizeof(double));
    for (int k = 0; k < steps; k++) {
        for (size_t i = 0; i < s->n; i++) {
            prev[3 * i] = s->p[i];
            prev[3 * i + 1] = s->m[i];
            prev[3 * i + 2] = s->v[i];
        }
        job.step = k + 1;
        ferry_status st = adamw_run_level(pool, &job, level);
        if (st != FERRY_OK) {
            tap_diag("  %s: adamw_run_level failed: %s", what, ferry_last_error());
            bad++;
            break;
        }
        for (size_t i = 0; i < s->n; i++) {
            ref_out r = ref_step(&job, prev[3 * i], prev[3 * i + 1], prev[3 * i + 2], s->g32[i]);
            int ok = fabs(s->p[i] - r.p) <= r.tol_p && fabs(s->m[i] - r.m) <= r.tol_m &&
                     fabs(s->v[i] - r.v) <= r.tol_v;
            if (!ok && bad++ < 3)
                tap_diag("  %s step %d elem %zu (g %g): p %.9g want %.9g (tol %.3g); m %.9g want %.9g; "
                         "v %.9g want %.9g", what, k + 1, i, (double)s->g32[i], (double)s->p[i], r.p, r.tol_p,
                         (double)s->m[i], r.m, (double)s->v[i], r.v);
        }
        if (job.copy_out) {
            size_t badc = 0;
            for (size_t i = 0; i < s->n; i++) {
                uint16_t want = job.copy_dtype == FERRY_DTYPE_BF16 ? dtype_f32_to_bf16(s->p[i]) : dtype_f32_to_f16(s->p[i]);
                badc += ((uint16_t *)s->copy)[i] != want;
            }
            if (badc && bad++ < 3)
                tap_diag("  %s step %d: %zu copy elements differ from the rounded weights", what, k + 1, badc);
        }
    }
    free(prev);
    return bad;
}

static adamw_job make_job(state *s, ferry_dtype gt, adamw_hparams hp, float gscale, ferry_dtype ct, bool copy)
{
    adamw_job j = {s->p, s->m, s->v, s->grad, gt, s->n, 1, hp, gscale, copy ? s->copy : NULL, ct, .moments = FERRY_MOMENTS_F32};
    return j;
}

static void check_levels(uint64_t *rng)
{
    static const char *kinds[] = {"normal", "zero", "huge", "tiny", "mixed"};
    static const ferry_dtype gts[] = {FERRY_DTYPE_F32, FERRY_DTYPE_BF16, FERRY_DTYPE_F16};
    static const size_t lens[] = {40013, 1, 7, 15, 17, 33, 65537};
    adamw_hparams decay = {1e-3, 0.9, 0.999, 1e-8, 0.1};
    adamw_hparams nodecay = {3e-3, 0.8, 0.99, 1e-6, 0.0};
    int maxl = (int)cpu_simd_detect();
    for (int kind = 0; kind < 5; kind++)
        for (int gi = 0; gi < 3; gi++) {
            ferry_dtype gt = gts[gi];
            size_t n = lens[(size_t)(kind + gi) % 7];
            if (kind == 0)
                n = 40013;
            size_t mis = (size_t)(kind + gi) % 3; /* 0, 1 or 2 elements off alignment */
            state base = alloc_state(n, mis), out[3], scalar_copy = alloc_state(n, mis);
            fill(&base, gt, kind, rng);
            adamw_hparams hp = (kind + gi) % 2 ? nodecay : decay;
            float gscale = kind == 4 ? 0.25f : (gt == FERRY_DTYPE_F16 && kind == 0 ? 1.0f / 1024 : 1.0f);
            ferry_dtype ct = gi == 2 ? FERRY_DTYPE_F16 : FERRY_DTYPE_BF16;
            for (int l = 0; l <= maxl; l++) {
                out[l] = alloc_state(n, mis);
                copy_state(&out[l], &base, gt);
                adamw_job job = make_job(&out[l], gt, hp, gscale, ct, true);
                char what[96];
                snprintf(what, sizeof what, "%s %s grads %s n=%zu", cpu_simd_name((cpu_simd)l), kinds[kind],
                         dtype_name(gt), n);
                size_t bad = run_and_check(&out[l], job, 3, (cpu_simd)l, NULL, what);
                TAP_IS_INT(bad, 0, "%s, wd %g, 3 steps, %s copy: within 8 ulp of the double reference", what,
                           (double)hp.weight_decay, dtype_name(ct));
                if (l > 0) {
                    int same = !memcmp(out[l].p, out[0].p, n * 4) && !memcmp(out[l].m, out[0].m, n * 4) &&
                               !memcmp(out[l].v, out[0].v, n * 4) && !memcmp(out[l].copy, out[0].copy, n * 2);
                    TAP_IS_INT(same, 1, "%s: bitwise equal to the scalar path", what);
                }
            }
            for (int l = 0; l <= maxl; l++)
                free_state(&out[l], mis);
            free_state(&base, mis);
            free_state(&scalar_copy, mis);
        }
}

/* Step 1 from zero moments, by hand: m = 0.1 g, v = 0.001 g^2, m/bc1 = g,
 * sqrt(v/bc2) = |g|, so p = p (1 - lr wd) - lr g / (|g| + eps). */
static void check_hand_case(void)
{
    float p[3] = {1.0f, -2.0f, 0.5f}, m[3] = {0}, v[3] = {0}, g[3] = {0.5f, -4.0f, 0.0f};
    adamw_hparams hp = {0.01, 0.9, 0.999, 1e-8, 0.1};
    adamw_job j = {p, m, v, g, FERRY_DTYPE_F32, 3, 1, hp, 1.0f, NULL, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_OK, "hand case runs");
    double d = 1.0 - 0.01 * 0.1;
    TAP_IS_CLOSE(p[0], 1.0 * d - 0.01 * 0.5 / (0.5 + 1e-8), 0, 1e-6, "hand case: p[0] after step 1");
    TAP_IS_CLOSE(p[1], -2.0 * d + 0.01 * 4.0 / (4.0 + 1e-8), 0, 1e-6, "hand case: p[1] after step 1");
    TAP_IS_CLOSE(p[2], 0.5 * d, 0, 1e-7, "hand case: zero gradient only decays");
    TAP_IS_CLOSE(m[1], -0.4, 0, 1e-6, "hand case: m = 0.1 g");
    TAP_IS_CLOSE(v[1], 0.016, 0, 1e-6, "hand case: v = 0.001 g^2");
}

static void check_threads(uint64_t *rng)
{
    size_t n = 3 * OPTIM_TILE + 12345;
    state ref = alloc_state(n, 0), s = alloc_state(n, 0);
    fill(&ref, FERRY_DTYPE_BF16, 4, rng);
    state base = alloc_state(n, 0);
    copy_state(&base, &ref, FERRY_DTYPE_BF16);
    adamw_hparams hp = ADAMW_HPARAMS_DEFAULT;
    adamw_job j = make_job(&ref, FERRY_DTYPE_BF16, hp, 0.5f, FERRY_DTYPE_BF16, true);
    for (int k = 1; k <= 2; k++) {
        j.step = k;
        adamw_run(NULL, &j);
    }
    for (int t = 1; t <= 3; t++) {
        tp_pool *pool = NULL;
        tp_pool_create(t, -1, &pool);
        copy_state(&s, &base, FERRY_DTYPE_BF16);
        adamw_job js = make_job(&s, FERRY_DTYPE_BF16, hp, 0.5f, FERRY_DTYPE_BF16, true);
        js.step = 1;
        adamw_run(pool, &js);
        tp_ticket *tk = NULL; /* the second step through the async path */
        js.step = 2;
        TAP_IS_STATUS(adamw_submit(pool, &js, &tk), FERRY_OK, "%d threads: submit step 2", t);
        memset(&js, 0, sizeof js); /* the job was copied */
        TAP_IS_STATUS(tp_wait(tk), FERRY_OK, "%d threads: wait step 2", t);
        int same = !memcmp(s.p, ref.p, n * 4) && !memcmp(s.m, ref.m, n * 4) && !memcmp(s.v, ref.v, n * 4) &&
                   !memcmp(s.copy, ref.copy, n * 2);
        TAP_IS_INT(same, 1, "%d threads: weights, moments and copy bitwise equal to the calling thread's", t);
        tp_pool_destroy(pool);
    }
    free_state(&ref, 0);
    free_state(&s, 0);
    free_state(&base, 0);
}

static void check_bad_jobs(void)
{
    float x[4] = {0};
    adamw_hparams hp = ADAMW_HPARAMS_DEFAULT;
    adamw_job good = {x, x + 1, x + 2, x + 3, FERRY_DTYPE_F32, 1, 1, hp, 1.0f, NULL, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
    adamw_job j;
    j = good; j.step = 0;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "step 0 refused");
    tap_diag("message: %s", ferry_last_error());
    j = good; j.hp.beta1 = 1.0f;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "beta1 = 1 refused");
    j = good; j.hp.lr = NAN;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "lr NaN refused");
    j = good; j.hp.weight_decay = -1;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "negative weight decay refused");
    j = good; j.grad_scale = INFINITY;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "grad_scale inf refused");
    j = good; j.v = NULL;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "NULL moment refused");
    j = good; j.grad_dtype = (ferry_dtype)9;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "unknown gradient type refused");
    j = good; j.copy_out = x; j.copy_dtype = (ferry_dtype)-3;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_ERR_INVALID_ARGUMENT, "unknown copy type refused");
    TAP_IS_STATUS(adamw_run(NULL, NULL), FERRY_ERR_INVALID_ARGUMENT, "NULL job refused");
    j = good; j.n = 0; j.master = NULL;
    TAP_IS_STATUS(adamw_run(NULL, &j), FERRY_OK, "an empty job is fine");
    TAP_IS_STATUS(adamw_run_level(NULL, &good, (cpu_simd)7), FERRY_ERR_INVALID_ARGUMENT, "unknown SIMD level refused");
}

int main(void)
{
    uint64_t seed = 0xada3u, rng = seed;
    tap_diag("seed %llu; SIMD levels tested: scalar..%s (FERRY_SIMD active: %s)", (unsigned long long)seed,
             cpu_simd_name(cpu_simd_detect()), cpu_simd_name(cpu_simd_active()));
    check_hand_case();
    check_levels(&rng);
    check_threads(&rng);
    check_bad_jobs();
    return tap_done();
}
