/* Tests of the host ops (backend/ops/ops_host.h) and their dispatch through
 * backend/ops/ops.h on the host backend:
 * - each forward against a double-precision reference written here;
 * - each backward against central finite differences in double of the fp32
 *   forward (objective f = sum(out * R) for a random R, so d f / d out = R);
 * - backward ops add into their outputs; ops_* gives the bits of hostop_*;
 * - misuse (NULL, pointers outside live buffers, bad tokens and targets) is
 *   an error with a message, never a crash.
 * Tolerances: forwards 1e-5 relative (+1e-6 absolute); finite differences
 * with step h = 1e-3 (5e-3 for the classifier) pass when
 * |analytic - numeric| <= 5e-4 + 5e-4 |numeric| for every checked element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"
#include "tests/tap.h"

static uint64_t rng;

static float *randv(size_t n, double scale)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((2.0 * tap_rand_unit(&rng) - 1.0) * scale);
    return p;
}

static float *zerov(size_t n) { return calloc(n, sizeof(float)); }

static double dot(const float *a, const float *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * r[i];
    return s;
}

/* Largest |a - b| relative to (abs + rel |b|); <= 1 means within tolerance. */
static double worst_ratio(const float *a, const double *b, size_t n, double tabs, double trel,
                          size_t *where)
{
    double worst = 0.0;
    *where = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs(a[i] - b[i]) / (tabs + trel * fabs(b[i]));
        if (r > worst || isnan(r)) {
            worst = isnan(r) ? INFINITY : r;
            *where = i;
        }
    }
    return worst;
}

static void check_forward(const char *what, const float *got, const double *want, size_t n)
{
    size_t at;
    double w = worst_ratio(got, want, n, 1e-6, 1e-5, &at);
    if (!tap_ok(w <= 1.0, "%s matches the double reference (worst %.3g of tolerance)",
                what, w))
        tap_diag("  element %zu: got %.9g, want %.9g", at, got[at], want[at]);
}

/* ---- finite differences ---- */

typedef double (*objective_fn)(void *ctx);

static void fd_check(const char *what, float *x, size_t n, const float *grad, objective_fn f,
                     void *ctx, double h, int max_checks)
{
    double worst = 0.0, worst_num = 0.0, worst_ana = 0.0;
    size_t worst_i = 0;
    int checks = (size_t)max_checks < n ? max_checks : (int)n;
    for (int c = 0; c < checks; c++) {
        size_t i = (size_t)max_checks < n ? (size_t)(tap_rand_unit(&rng) * n) : (size_t)c;
        float keep = x[i];
        x[i] = keep + (float)h;
        double fp = f(ctx);
        x[i] = keep - (float)h;
        double fm = f(ctx);
        double hh = (double)(keep + (float)h) - (double)(keep - (float)h);
        x[i] = keep;
        double num = (fp - fm) / hh;
        double r = fabs(grad[i] - num) / (5e-4 + 5e-4 * fabs(num));
        if (r > worst || isnan(r)) {
            worst = isnan(r) ? INFINITY : r;
            worst_i = i;
            worst_num = num;
            worst_ana = grad[i];
        }
    }
    if (!tap_ok(worst <= 1.0, "%s backward matches finite differences (%d elements, worst %.3g "
                              "of tolerance)", what, checks, worst))
        tap_diag("  element %zu: analytic %.9g, numeric %.9g", worst_i, worst_ana, worst_num);
}

/* ---- encoder ---- */

static void test_encoder(void)
{
    int B = 2, T = 3, C = 5, V = 4;
    int32_t tokens[6] = {1, 3, 1, 0, 1, 2}; /* token 1 three times */
    float *wte = randv((size_t)V * C, 1.0), *wpe = randv((size_t)T * C, 1.0);
    float *out = zerov((size_t)B * T * C);
    TAP_IS_STATUS(hostop_encoder_forward(out, tokens, wte, wpe, B, T, C, V, NULL), FERRY_OK,
                  "encoder forward runs");
    double want[30];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++)
                want[(b * T + t) * C + i] =
                    (double)wte[tokens[b * T + t] * C + i] + wpe[t * C + i];
    check_forward("encoder forward", out, want, 30);
    /* backward: hand-computed scatter, on top of a non-zero start (adds) */
    float *dout = randv(30, 1.0), *dwte = randv((size_t)V * C, 1.0), *dwpe = randv(15, 1.0);
    double ewte[20], ewpe[15];
    for (int i = 0; i < 20; i++)
        ewte[i] = dwte[i];
    for (int i = 0; i < 15; i++)
        ewpe[i] = dwpe[i];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++) {
                ewte[tokens[b * T + t] * C + i] += dout[(b * T + t) * C + i];
                ewpe[t * C + i] += dout[(b * T + t) * C + i];
            }
    hostop_encoder_backward(dwte, dwpe, dout, tokens, B, T, C, V, NULL);
    check_forward("encoder backward dwte (scatter-add)", dwte, ewte, 20);
    check_forward("encoder backward dwpe (sum over batch)", dwpe, ewpe, 15);
    int32_t bad[6] = {1, 3, 4, 0, 1, 2};
    TAP_IS_STATUS(hostop_encoder_forward(out, bad, wte, wpe, B, T, C, V, NULL),
                  FERRY_ERR_INVALID_ARGUMENT, "token 4 with V = 4 is rejected: %s",
                  ferry_last_error());
    bad[2] = -1;
    TAP_IS_STATUS(hostop_encoder_forward(out, bad, wte, wpe, B, T, C, V, NULL),
                  FERRY_ERR_INVALID_ARGUMENT, "token -1 is rejected");
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
}

/* ---- layernorm ---- */

typedef struct ln_ctx {
    float *out, *mean, *rstd, *inp, *w, *b, *R;
    int N, C;
} ln_ctx;

static double ln_objective(void *p)
{
    ln_ctx *c = p;
    hostop_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(void)
{
    int N = 6, C = 24;
    size_t NC = (size_t)N * C;
    ln_ctx c = {zerov(NC), zerov(N), zerov(N), randv(NC, 2.0), randv(C, 1.0), randv(C, 1.0),
                randv(NC, 1.0), N, C};
    for (size_t i = 0; i < NC; i++)
        c.inp[i] += 0.5f; /* a non-zero mean */
    ln_objective(&c);
    double *want = malloc(NC * sizeof *want), wmean[6], wrstd[6];
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++)
            m += c.inp[r * C + i];
        m /= C;
        for (int i = 0; i < C; i++)
            v += (c.inp[r * C + i] - m) * (c.inp[r * C + i] - m);
        v /= C;
        wmean[r] = m;
        wrstd[r] = 1.0 / sqrt(v + 1e-5);
        for (int i = 0; i < C; i++)
            want[r * C + i] = (c.inp[r * C + i] - m) * wrstd[r] * c.w[i] + c.b[i];
    }
    check_forward("layernorm forward", c.out, want, NC);
    check_forward("layernorm mean forward", c.mean, wmean, (size_t)N);
    check_forward("layernorm rstd forward", c.rstd, wrstd, (size_t)N);
    float *dinp = zerov(NC), *dw = zerov(C), *db = zerov(C);
    hostop_layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, N, C);
    fd_check("layernorm dinp", c.inp, NC, dinp, ln_objective, &c, 1e-3, 60);
    fd_check("layernorm dweight", c.w, C, dw, ln_objective, &c, 1e-3, 60);
    fd_check("layernorm dbias", c.b, C, db, ln_objective, &c, 1e-3, 60);
    free(want), free(dinp), free(dw), free(db);
    free(c.out), free(c.mean), free(c.rstd), free(c.inp), free(c.w), free(c.b), free(c.R);
}

/* ---- matmul ---- */

typedef struct mm_ctx {
    float *out, *inp, *w, *b, *R;
    int N, C, OC;
} mm_ctx;

static double mm_objective(void *p)
{
    mm_ctx *c = p;
    hostop_matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}

static void test_matmul(void)
{
    int N = 7, C = 9, OC = 11;
    mm_ctx c = {zerov((size_t)N * OC), randv((size_t)N * C, 1.0), randv((size_t)OC * C, 1.0),
                randv(OC, 1.0), randv((size_t)N * OC, 1.0), N, C, OC};
    mm_objective(&c);
    double want[77];
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++) {
            double s = c.b[o];
            for (int i = 0; i < C; i++)
                s += (double)c.inp[r * C + i] * c.w[o * C + i];
            want[r * OC + o] = s;
        }
    check_forward("matmul forward", c.out, want, 77);
    hostop_matmul_forward(c.out, c.inp, c.w, NULL, N, C, OC);
    for (int r = 0; r < N; r++)
        for (int o = 0; o < OC; o++)
            want[r * OC + o] -= c.b[o];
    check_forward("matmul without bias forward", c.out, want, 77);
    float *dinp = zerov((size_t)N * C), *dw = zerov((size_t)OC * C), *db = zerov(OC);
    hostop_matmul_backward(dinp, dw, db, c.R, c.inp, c.w, N, C, OC);
    fd_check("matmul dinp", c.inp, (size_t)N * C, dinp, mm_objective, &c, 1e-3, 80);
    fd_check("matmul dweight", c.w, (size_t)OC * C, dw, mm_objective, &c, 1e-3, 80);
    fd_check("matmul dbias", c.b, OC, db, mm_objective, &c, 1e-3, 80);
    /* adds: a second backward doubles the gradients */
    float *dw2 = malloc((size_t)OC * C * sizeof *dw2);
    memcpy(dw2, dw, (size_t)OC * C * sizeof *dw2);
    hostop_matmul_backward(dinp, dw, NULL, c.R, c.inp, c.w, N, C, OC);
    double *twice = malloc((size_t)OC * C * sizeof *twice);
    for (int i = 0; i < OC * C; i++)
        twice[i] = 2.0 * dw2[i];
    check_forward("matmul backward accumulates (dweight doubled)", dw, twice, (size_t)OC * C);
    free(dw2), free(twice), free(dinp), free(dw), free(db);
    free(c.out), free(c.inp), free(c.w), free(c.b), free(c.R);
}

/* ---- gelu ---- */

typedef struct gelu_ctx {
    float *out, *inp, *R;
    size_t n;
} gelu_ctx;

static double gelu_objective(void *p)
{
    gelu_ctx *c = p;
    hostop_gelu_forward(c->out, c->inp, c->n);
    return dot(c->out, c->R, c->n);
}

static void test_gelu(void)
{
    size_t n = 64;
    gelu_ctx c = {zerov(n), randv(n, 4.0), randv(n, 1.0), n};
    gelu_objective(&c);
    double want[64];
    for (size_t i = 0; i < n; i++) {
        double x = c.inp[i];
        want[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    check_forward("gelu forward", c.out, want, n);
    float *dinp = zerov(n);
    hostop_gelu_backward(dinp, c.inp, c.R, n);
    fd_check("gelu dinp", c.inp, n, dinp, gelu_objective, &c, 1e-3, 64);
    float a[3] = {1.5f, -2.0f, 0.25f}, b[3] = {0.5f, 2.0f, 1e-8f}, o[3];
    double w[3] = {2.0, 0.0, 0.25 + 1e-8};
    hostop_residual_forward(o, a, b, 3);
    check_forward("residual forward", o, w, 3);
    free(dinp), free(c.out), free(c.inp), free(c.R);
}

/* ---- attention ---- */

typedef struct att_ctx {
    float *out, *lse, *qkv, *R;
    int B, T, C, NH;
} att_ctx;

static double att_objective(void *p)
{
    att_ctx *c = p;
    hostop_attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH, NULL);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* ---- attention over packed examples ---- */

/* Two rows of 12 tokens: examples of 5, 1 and 6 tokens, then of 3 and 9. */
enum { PK_B = 2, PK_T = 12, PK_C = 12, PK_NH = 3, PK_EX = 5 };
static const int pk_start[PK_EX] = {0, 5, 6, 0, 3}, pk_len[PK_EX] = {5, 1, 6, 3, 9}, pk_row[PK_EX] = {0, 0, 0, 1, 1};
static const int32_t pk_pos[PK_B * PK_T] = {0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5,
                                            0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8};

typedef struct pk_ctx {
    float *out, *lse, *qkv, *R;
    const int32_t *pos;
} pk_ctx;

static double pk_objective(void *p)
{
    pk_ctx *c = p;
    hostop_attention_forward(c->out, c->lse, c->qkv, PK_B, PK_T, PK_C, PK_NH, c->pos);
    return dot(c->out, c->R, (size_t)PK_B * PK_T * PK_C);
}

/* By hand, from the example list (not the positions): each example is
 * causal attention over its own tokens alone, in double. */
static void pk_reference(const float *qkv, double *out, double *lse)
{
    const int C = PK_C, HS = PK_C / PK_NH;
    double scale = 1.0 / sqrt((double)HS), s[PK_T];
    for (int x = 0; x < PK_EX; x++)
        for (int h = 0; h < PK_NH; h++)
            for (int i = 0; i < pk_len[x]; i++) {
                size_t qi = (size_t)pk_row[x] * PK_T + pk_start[x] + i;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    size_t kj = (size_t)pk_row[x] * PK_T + pk_start[x] + j;
                    double d = 0.0;
                    for (int e = 0; e < HS; e++)
                        d += (double)qkv[qi * 3 * C + h * HS + e] * qkv[kj * 3 * C + C + h * HS + e];
                    s[j] = d * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(s[j] - mx);
                lse[((size_t)pk_row[x] * PK_NH + h) * PK_T + pk_start[x] + i] = mx + log(sum);
                for (int e = 0; e < HS; e++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++)
                        o += exp(s[j] - mx) / sum *
                             qkv[((size_t)pk_row[x] * PK_T + pk_start[x] + j) * 3 * C + 2 * C + h * HS + e];
                    out[qi * C + h * HS + e] = o;
                }
            }
}

/* Attention with positions: the forward against the reference by hand,
 * the backward against finite differences of the packed forward, and no
 * example's outputs moved by another example's inputs; through the op
 * front on the host backend, its bits those of the host op, and positions
 * that break the rule refused by row, index and value. */
static void test_attention_packed(void)
{
    size_t nqkv = (size_t)PK_B * PK_T * 3 * PK_C, nout = (size_t)PK_B * PK_T * PK_C,
           nlse = (size_t)PK_B * PK_NH * PK_T;
    pk_ctx c = {zerov(nout), zerov(nlse), randv(nqkv, 1.5), randv(nout, 1.0), pk_pos};
    TAP_IS_STATUS(ops_check_positions("test", pk_pos, PK_B, PK_T), FERRY_OK, "the packed positions follow the rule");
    pk_objective(&c);
    double *wout = malloc(nout * sizeof *wout), *wlse = malloc(nlse * sizeof *wlse);
    pk_reference(c.qkv, wout, wlse);
    check_forward("packed attention out forward (each example alone, by hand)", c.out, wout, nout);
    check_forward("packed attention lse forward", c.lse, wlse, nlse);
    float *dqkv = zerov(nqkv), *delta = zerov(nlse);
    TAP_IS_STATUS(hostop_attention_backward(dqkv, c.R, c.qkv, c.out, c.lse, delta, PK_B, PK_T, PK_C, PK_NH, pk_pos),
                  FERRY_OK, "packed attention backward runs");
    fd_check("packed attention dqkv", c.qkv, nqkv, dqkv, pk_objective, &c, 1e-3, 400);
    /* example 2 of row 0 (tokens 6..11) changed: examples 0 and 1 (tokens 0..5) keep their bits */
    pk_objective(&c);
    float *out0 = malloc(nout * sizeof *out0);
    memcpy(out0, c.out, nout * sizeof *out0);
    for (size_t e = 6 * 3 * PK_C; e < 12 * 3 * PK_C; e++)
        c.qkv[e] += 1.0f;
    pk_objective(&c);
    tap_ok(memcmp(out0, c.out, 6 * PK_C * sizeof *out0) == 0 &&
               memcmp(out0 + PK_T * PK_C, c.out + PK_T * PK_C, PK_T * PK_C * sizeof *out0) == 0,
           "packed attention: an example's inputs do not reach the examples before it or another row");

    backend *be = NULL;
    backend_stream *s = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK || backend_stream_create(be, "ops", &s) != FERRY_OK) {
        tap_ok(0, "host backend opens: %s", ferry_last_error());
        return;
    }
    void *d_qkv = NULL, *d_out = NULL, *d_lse = NULL, *d_pos = NULL;
    backend_alloc(be, nqkv * 4, &d_qkv);
    backend_alloc(be, nout * 4, &d_out);
    backend_alloc(be, nlse * 4, &d_lse);
    backend_alloc(be, sizeof pk_pos, &d_pos);
    backend_memcpy_async(s, d_qkv, c.qkv, nqkv * 4, BACKEND_COPY_H2D);
    backend_memcpy_async(s, d_pos, pk_pos, sizeof pk_pos, BACKEND_COPY_H2D);
    TAP_IS_STATUS(ops_attention_forward(s, d_out, d_lse, d_qkv, PK_B, PK_T, PK_C, PK_NH, d_pos), FERRY_OK,
                  "ops_attention_forward with positions launches");
    float *got = zerov(nout);
    backend_memcpy_async(s, got, d_out, nout * 4, BACKEND_COPY_D2H);
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_OK, "and runs");
    pk_objective(&c);
    tap_ok(memcmp(got, c.out, nout * 4) == 0, "ops_attention_forward with positions gives hostop's bits");
    int32_t bad[PK_B * PK_T];
    memcpy(bad, pk_pos, sizeof bad);
    bad[PK_T + 7] = 9; /* row 1, index 7, after 3 */
    backend_memcpy_async(s, d_pos, bad, sizeof bad, BACKEND_COPY_H2D);
    TAP_IS_STATUS(ops_attention_forward(s, d_out, d_lse, d_qkv, PK_B, PK_T, PK_C, PK_NH, d_pos), FERRY_OK,
                  "a launch with a bad position is accepted (checked on the stream)");
    ferry_status st = backend_stream_synchronize(s);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "position 9 at batch row 1, index 7"),
           "the stream reports the bad position by row, index and value: %s", ferry_last_error());
    void *small = NULL;
    backend_alloc(be, sizeof pk_pos - 4, &small);
    TAP_IS_STATUS(ops_attention_forward(s, d_out, d_lse, d_qkv, PK_B, PK_T, PK_C, PK_NH, small),
                  FERRY_ERR_INVALID_ARGUMENT, "positions one short are refused: %s", ferry_last_error());
    backend_free(be, small), backend_free(be, d_qkv), backend_free(be, d_out), backend_free(be, d_lse);
    backend_free(be, d_pos);
    backend_stream_destroy(s);
    backend_close(be);
    free(got), free(out0), free(wout), free(wlse), free(dqkv), free(delta);
    free(c.out), free(c.lse), free(c.qkv), free(c.R);
}

static void attention_reference(const att_ctx *c, double *out, double *lse)
{
    int B = c->B, T = c->T, C = c->C, NH = c->NH, HS = C / NH;
    double scale = 1.0 / sqrt((double)HS), s[64];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *q = c->qkv + ((size_t)b * T + i) * 3 * C + h * HS;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *k = c->qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double d = 0.0;
                    for (int e = 0; e < HS; e++)
                        d += (double)q[e] * k[e];
                    s[j] = d * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + i] = mx + log(sum);
                for (int e = 0; e < HS; e++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++)
                        o += exp(s[j] - mx) / sum *
                             c->qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * HS + e];
                    out[((size_t)b * T + i) * C + h * HS + e] = o;
                }
            }
}

static void test_attention(void)
{
    int B = 2, T = 6, C = 12, NH = 3;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    att_ctx c = {zerov(nout), zerov(nlse), randv(nqkv, 1.5), randv(nout, 1.0), B, T, C, NH};
    att_objective(&c);
    double *wout = malloc(nout * sizeof *wout), *wlse = malloc(nlse * sizeof *wlse);
    attention_reference(&c, wout, wlse);
    check_forward("attention out forward", c.out, wout, nout);
    check_forward("attention lse forward", c.lse, wlse, nlse);
    float *dqkv = zerov(nqkv), *delta = zerov(nlse);
    TAP_IS_STATUS(hostop_attention_backward(dqkv, c.R, c.qkv, c.out, c.lse, delta, B, T, C, NH, NULL),
                  FERRY_OK, "attention backward runs");
    /* delta: each query row's D = dout . out over its head, in double here */
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double d = 0;
                for (int e = 0; e < C / NH; e++) {
                    size_t at = ((size_t)b * T + t) * C + (size_t)h * (C / NH) + e;
                    d += (double)c.R[at] * c.out[at];
                }
                double err = fabs(d - delta[((size_t)b * NH + h) * T + t]);
                worst = err > worst || err != err ? err : worst;
            }
    tap_ok(worst <= 1e-5, "attention backward writes delta = dout . out per row and head (max err %.2g)", worst);
    fd_check("attention dqkv (q, k and v)", c.qkv, nqkv, dqkv, att_objective, &c, 1e-3, 400);
    /* causality: the last position's inputs cannot change earlier outputs */
    float *out0 = malloc(nout * sizeof *out0);
    att_objective(&c); /* the finite differences left a perturbed output behind */
    memcpy(out0, c.out, nout * sizeof *out0);
    for (int e = 0; e < 3 * C; e++)
        c.qkv[(size_t)(T - 1) * 3 * C + e] += 1.0f;
    att_objective(&c);
    int same = memcmp(out0, c.out, (size_t)(T - 1) * C * sizeof *out0) == 0;
    tap_ok(same, "attention is causal: changing position T-1 leaves positions < T-1 unchanged");
    free(out0), free(wout), free(wlse), free(dqkv), free(delta);
    free(c.out), free(c.lse), free(c.qkv), free(c.R);
}

/* ---- classifier ---- */

typedef struct cls_ctx {
    float *losses, *inp, *wte, *scratch;
    int32_t *targets;
    float grad_scale;
    int N, C, V, Vp, chunk;
} cls_ctx;

static double cls_objective(void *p)
{
    cls_ctx *c = p;
    hostop_classifier(c->losses, NULL, NULL, c->inp, c->wte, c->targets, 0.0f, c->N, c->C, c->V,
                      c->Vp, c->scratch, c->chunk);
    double s = 0.0;
    for (int i = 0; i < c->N; i++)
        s += c->losses[i];
    return c->grad_scale * s;
}

static void test_classifier(void)
{
    int N = 7, C = 6, V = 13, Vp = 16, chunk = 3;
    int32_t targets[7] = {3, 0, -1, 12, 5, -100, 7};
    cls_ctx c = {zerov(N), randv((size_t)N * C, 1.0), randv((size_t)Vp * C, 1.0),
                 zerov((size_t)chunk * Vp), targets, 0.25f, N, C, V, Vp, chunk};
    for (int i = V * C; i < Vp * C; i++)
        c.wte[i] = 1e30f; /* padded rows: would win any softmax they entered */
    cls_objective(&c);
    double want[7];
    for (int r = 0; r < N; r++) {
        double z[16], mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) {
            z[v] = 0.0;
            for (int i = 0; i < C; i++)
                z[v] += (double)c.inp[r * C + i] * c.wte[v * C + i];
            mx = z[v] > mx ? z[v] : mx;
        }
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        want[r] = targets[r] < 0 ? 0.0 : mx + log(sum) - z[targets[r]];
    }
    check_forward("classifier forward losses (padded rows hold 1e30, ignored targets give 0)", c.losses,
                  want, (size_t)N);
    float *dinp = zerov((size_t)N * C), *dwte = zerov((size_t)Vp * C);
    TAP_IS_STATUS(hostop_classifier(c.losses, dinp, dwte, c.inp, c.wte, targets, c.grad_scale, N,
                                    C, V, Vp, c.scratch, chunk),
                  FERRY_OK, "classifier with gradient runs");
    check_forward("classifier losses are the same with the gradient pass", c.losses, want,
                  (size_t)N);
    for (int i = V * C; i < Vp * C; i++)
        c.wte[i] = 0.0f; /* keep the finite differences finite */
    fd_check("classifier dinp (chunk 3 of 7 rows)", c.inp, (size_t)N * C, dinp, cls_objective, &c,
             5e-3, 42);
    fd_check("classifier dwte", c.wte, (size_t)V * C, dwte, cls_objective, &c, 5e-3, 78);
    int pad_zero = 1;
    for (int i = V * C; i < Vp * C; i++)
        pad_zero &= dwte[i] == 0.0f;
    tap_ok(pad_zero, "classifier leaves the gradient of padded wte rows at 0");
    int ignored_zero = 1;
    for (int i = 0; i < C; i++)
        ignored_zero &= dinp[2 * C + i] == 0.0f && dinp[5 * C + i] == 0.0f;
    tap_ok(ignored_zero, "classifier gives ignored rows (targets < 0) no input gradient");
    /* chunking does not change the losses */
    float *l_all = zerov(N), *scratch_all = zerov((size_t)N * Vp);
    hostop_classifier(l_all, NULL, NULL, c.inp, c.wte, targets, 0.0f, N, C, V, Vp, scratch_all, N);
    cls_objective(&c);
    tap_ok(memcmp(l_all, c.losses, (size_t)N * sizeof *l_all) == 0,
           "classifier losses are bitwise the same with chunk 3 and chunk N");
    int32_t bad[7] = {3, 0, -1, 13, 5, -100, 7};
    TAP_IS_STATUS(hostop_classifier(c.losses, NULL, NULL, c.inp, c.wte, bad, 0.0f, N, C, V, Vp,
                                    c.scratch, chunk),
                  FERRY_ERR_INVALID_ARGUMENT, "target 13 with V = 13 is rejected: %s",
                  ferry_last_error());
    free(l_all), free(scratch_all), free(dinp), free(dwte);
    free(c.losses), free(c.inp), free(c.wte), free(c.scratch);
}

/* ---- dispatch on the host backend ---- */

static float *dev_from(backend *be, backend_stream *s, const float *src, size_t n)
{
    void *p = NULL;
    if (backend_alloc(be, n * sizeof(float), &p) != FERRY_OK)
        return NULL;
    backend_memcpy_async(s, p, src, n * sizeof(float), BACKEND_COPY_H2D);
    return p;
}

static void to_host(backend_stream *s, float *dst, const float *src, size_t n)
{
    backend_memcpy_async(s, dst, src, n * sizeof(float), BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
}

static void test_dispatch(void)
{
    backend *be = NULL;
    backend_stream *s = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK ||
        backend_stream_create(be, "ops", &s) != FERRY_OK) {
        tap_ok(0, "host backend opens: %s", ferry_last_error());
        return;
    }
    TAP_IS_STATUS(ops_init(be, NULL, 0), FERRY_OK, "ops_init on host");
    TAP_IS_INT(backend_act_dtype(be), FERRY_DTYPE_F32, "host activations are fp32");
    TAP_IS_INT(dtype_size(FERRY_DTYPE_BF16), 2, "bf16 is 2 bytes");
    TAP_IS_INT(ops_classifier_scratch_bytes(be, 8, 128, 16), 8 * 128 * 4,
               "host classifier scratch is chunk x Vp floats");

    int B = 2, T = 8, C = 16, NH = 4;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = randv(nqkv, 1.0), *R = randv(nout, 1.0);
    float *h_out = zerov(nout), *h_lse = zerov(nlse), *h_dqkv = randv(nqkv, 1.0);
    float *d_qkv = dev_from(be, s, qkv, nqkv), *d_R = dev_from(be, s, R, nout);
    float *d_out = dev_from(be, s, h_out, nout), *d_lse = dev_from(be, s, h_lse, nlse);
    float *d_dqkv = dev_from(be, s, h_dqkv, nqkv), *h_delta = zerov(nlse);
    float *d_delta = dev_from(be, s, h_delta, nlse);
    TAP_IS_STATUS(ops_attention_forward(s, d_out, d_lse, d_qkv, B, T, C, NH, NULL), FERRY_OK,
                  "ops_attention_forward launches");
    TAP_IS_STATUS(ops_attention_backward(s, d_dqkv, d_R, d_qkv, d_out, d_lse, d_delta, B, T, C, NH, NULL),
                  FERRY_OK, "ops_attention_backward launches");
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_OK, "the stream runs them");
    hostop_attention_forward(h_out, h_lse, qkv, B, T, C, NH, NULL);
    hostop_attention_backward(h_dqkv, R, qkv, h_out, h_lse, h_delta, B, T, C, NH, NULL);
    float *got = zerov(nqkv);
    to_host(s, got, d_out, nout);
    tap_ok(memcmp(got, h_out, nout * 4) == 0, "ops_attention_forward gives hostop's bits");
    to_host(s, got, d_dqkv, nqkv);
    tap_ok(memcmp(got, h_dqkv, nqkv * 4) == 0,
           "ops_attention_backward gives hostop's bits (added onto the same start)");
    to_host(s, got, d_delta, nlse);
    tap_ok(memcmp(got, h_delta, nlse * 4) == 0, "ops_attention_backward's delta is hostop's bits");

    /* misuse */
    float stray[16];
    TAP_IS_STATUS(ops_matmul_forward(s, d_out, stray, d_qkv, NULL, 1, 16, 16),
                  FERRY_ERR_INVALID_ARGUMENT, "a host pointer as a tensor is rejected: %s",
                  ferry_last_error());
    TAP_IS_STATUS(ops_matmul_forward(s, d_out, d_qkv, d_qkv, NULL, (int)nout, 16, 16),
                  FERRY_ERR_INVALID_ARGUMENT, "a tensor larger than its buffer is rejected");
    TAP_IS_STATUS(ops_gelu_forward(NULL, d_out, d_qkv, 4), FERRY_ERR_INVALID_ARGUMENT,
                  "a NULL stream is rejected");
    TAP_IS_STATUS(ops_attention_forward(s, d_out, d_lse, d_qkv, B, T, C, 3, NULL),
                  FERRY_ERR_INVALID_ARGUMENT, "C not divisible by NH is rejected: %s",
                  ferry_last_error());
    TAP_IS_STATUS(ops_layernorm_forward(s, d_out, d_lse, d_lse, d_qkv, d_qkv, d_qkv, 0, C),
                  FERRY_ERR_INVALID_ARGUMENT, "N = 0 is rejected");

    /* a token past wte's buffer fails the stream, not the process */
    int32_t htok[2] = {0, 1000};
    void *d_tok = NULL;
    backend_alloc(be, sizeof htok, &d_tok);
    backend_memcpy_async(s, d_tok, htok, sizeof htok, BACKEND_COPY_H2D);
    float *d_wte = dev_from(be, s, R, 4 * (size_t)C);
    TAP_IS_STATUS(ops_encoder_forward(s, d_out, d_tok, d_wte, d_R, 1, 2, C, 4, NULL), FERRY_OK,
                  "encoder launch with a bad token is accepted (checked on the stream)");
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_ERR_INVALID_ARGUMENT,
                  "the stream reports the bad token: %s", ferry_last_error());
    TAP_IS_STATUS(backend_stream_synchronize(s), FERRY_OK, "and is clean afterwards");

    free(got), free(qkv), free(R), free(h_out), free(h_lse), free(h_dqkv), free(h_delta);
    backend_stream_destroy(s);
    ops_shutdown(be);
    backend_close(be);
}

int main(void)
{
    const char *env = getenv("FERRY_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 20240601;
    rng = seed;
    tap_diag("seed %llu (set FERRY_TEST_SEED to replay)", (unsigned long long)seed);
    test_encoder();
    test_layernorm();
    test_matmul();
    test_gelu();
    test_attention();
    test_attention_packed();
    test_classifier();
    test_dispatch();
    return tap_done();
}
