/* The host backend storing f16 (backend_set_act_dtype), the storage of
 * Volta and Turing cards, as the CUDA ops store it:
 *   - the conversions round to nearest even into fp16 and widen exactly,
 *     bit for bit common/dtype.h's (ties, fp16 subnormals, 65519 -> 65504
 *     and 65520 -> inf, NaN), checked against values worked out by hand;
 *   - an op writes, or adds into, its 16-bit outputs once: its result is
 *     the fp32 reference (backend/ops/ops_host.h) on the same fp16 inputs with
 *     each output rounded to fp16 once — not to bf16, not twice;
 *   - the classifier keeps its logits and their gradient in fp16, and a
 *     loss scale large enough to pass 65504 turns the gradient into inf,
 *     which the step's sum of squares flags, while the losses stay finite;
 *   - a storage type the backend cannot keep is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"
#include "tests/tap.h"

static backend *be;
static backend_stream *s;
static uint64_t rng;

/* n values uniform in [-a, a), exact in fp16. */
static float *rand16(size_t n, float a)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = dtype_round_f16((float)((tap_rand_unit(&rng) * 2 - 1) * a));
    return x;
}

/* A device buffer of n fp16 values from floats, and its values read back. */
static void *dev16(const float *x, size_t n)
{
    uint16_t *h = malloc(n * 2);
    void *d = NULL;
    for (size_t i = 0; i < n; i++)
        h[i] = dtype_f32_to_f16(x[i]);
    backend_alloc(be, n * 2, &d);
    backend_memcpy_async(s, d, h, n * 2, BACKEND_COPY_H2D);
    backend_stream_synchronize(s);
    free(h);
    return d;
}

static uint16_t *bits16(const void *d, size_t n)
{
    uint16_t *h = malloc(n * 2);
    backend_memcpy_async(s, h, d, n * 2, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    return h;
}

/* got (device fp16) equals want (fp32) rounded to fp16 once, bit for bit. */
static void same_bits(const char *what, const void *got_dev, const float *want, size_t n)
{
    uint16_t *got = bits16(got_dev, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != dtype_f32_to_f16(want[i]) && bad++ == 0)
            first = i;
    if (!tap_ok(bad == 0, "%s: %zu values, each the fp32 result rounded to fp16 once", what, n))
        tap_diag("  %zu differ; [%zu] 0x%04x, want 0x%04x (%.9g)", bad, first, got[first],
                 dtype_f32_to_f16(want[first]), (double)want[first]);
    free(got);
}

static void test_convert(void)
{
    /* value, the fp16 it rounds to (worked out from fp16's 10-bit mantissa) */
    static const struct { float x; uint16_t h; } cases[] = {
        {1.0f, 0x3c00},
        {1.0f + 0x1p-11f, 0x3c00},              /* a tie: to the even 1.0 */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},   /* just past it: up */
        {1.0f + 3 * 0x1p-11f, 0x3c02},          /* a tie between 0x3c01 and 0x3c02: even */
        {65504.0f, 0x7bff},                     /* the largest finite */
        {65519.0f, 0x7bff},                     /* rounds down to it */
        {65520.0f, 0x7c00},                     /* the tie past it: inf */
        {-1e6f, 0xfc00},
        {0x1p-24f, 0x0001},                     /* the smallest subnormal */
        {0x1p-25f, 0x0000},                     /* a tie with 0: even */
        {0x1.8p-25f, 0x0001},
        {0x1p-14f, 0x0400},                     /* the smallest normal */
        {-0.0f, 0x8000},
    };
    const size_t n = sizeof cases / sizeof cases[0];
    float x[16];
    for (size_t i = 0; i < n; i++)
        x[i] = cases[i].x;
    void *d32 = NULL, *d16 = NULL, *back = NULL;
    backend_alloc(be, sizeof x, &d32);
    backend_alloc(be, n * 2, &d16);
    backend_alloc(be, sizeof x, &back);
    backend_memcpy_async(s, d32, x, n * 4, BACKEND_COPY_H2D);
    TAP_IS_STATUS(ops_convert_from_f32(s, d16, d32, n), FERRY_OK, "convert_from_f32 in f16");
    uint16_t *h = bits16(d16, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i] != cases[i].h) {
            bad++;
            tap_diag("  %a -> 0x%04x, want 0x%04x", (double)cases[i].x, h[i], cases[i].h);
        }
    TAP_IS_INT(bad, 0, "convert_from_f32: %zu worked cases (ties, subnormals, overflow to inf)", n);
    TAP_IS_STATUS(ops_convert_to_f32(s, back, d16, n), FERRY_OK, "convert_to_f32 in f16");
    float y[16];
    backend_memcpy_async(s, y, back, n * 4, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = dtype_f16_to_f32(cases[i].h);
        bad += memcmp(&want, &y[i], 4) != 0;
    }
    TAP_IS_INT(bad, 0, "convert_to_f32 widens exactly");
    free(h);
    backend_free(be, d32), backend_free(be, d16), backend_free(be, back);
}

/* Forward ops overwrite, backward ops add: both round once. */
static void test_round_once(void)
{
    const int N = 24, C = 40, OC = 56;
    float *x = rand16((size_t)N * C, 2), *w = rand16((size_t)OC * C, 0.3f), *b = rand16(OC, 1);
    float *out = malloc((size_t)N * OC * 4);
    void *dx = dev16(x, (size_t)N * C), *dw = dev16(w, (size_t)OC * C), *db = dev16(b, OC), *dout = NULL;
    backend_alloc(be, (size_t)N * OC * 2, &dout);
    hostop_matmul_forward(out, x, w, b, N, C, OC);
    TAP_IS_STATUS(ops_matmul_forward(s, dout, dx, dw, db, N, C, OC), FERRY_OK, "matmul_forward in f16");
    same_bits("matmul_forward", dout, out, (size_t)N * OC);

    /* gelu backward adds into dinp: fp16 start + fp32 product, rounded once */
    const size_t n = 1001;
    float *u = rand16(n, 4), *g = rand16(n, 1), *acc = rand16(n, 1);
    void *du = dev16(u, n), *dg = dev16(g, n), *dacc = dev16(acc, n);
    hostop_gelu_backward(acc, u, g, n);
    TAP_IS_STATUS(ops_gelu_backward(s, dacc, du, dg, n), FERRY_OK, "gelu_backward in f16");
    same_bits("gelu_backward (+=)", dacc, acc, n);

    /* layernorm forward: fp32 statistics, the output rounded once */
    float *ln = malloc((size_t)N * C * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    float *lw = rand16(C, 1), *lb = rand16(C, 1);
    void *dlw = dev16(lw, C), *dlb = dev16(lb, C), *dln = NULL, *dmean = NULL, *drstd = NULL;
    backend_alloc(be, (size_t)N * C * 2, &dln);
    backend_alloc(be, (size_t)N * 4, &dmean);
    backend_alloc(be, (size_t)N * 4, &drstd);
    hostop_layernorm_forward(ln, mean, rstd, x, lw, lb, N, C);
    TAP_IS_STATUS(ops_layernorm_forward(s, dln, dmean, drstd, dx, dlw, dlb, N, C), FERRY_OK,
                  "layernorm_forward in f16");
    same_bits("layernorm_forward", dln, ln, (size_t)N * C);
    float got_rstd[24];
    backend_memcpy_async(s, got_rstd, drstd, (size_t)N * 4, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    tap_ok(memcmp(got_rstd, rstd, (size_t)N * 4) == 0, "its statistics stay fp32 (rstd bitwise)");
    free(x), free(w), free(b), free(out), free(u), free(g), free(acc), free(ln), free(mean), free(rstd);
    free(lw), free(lb);
    void *all[] = {dx, dw, db, dout, du, dg, dacc, dlw, dlb, dln, dmean, drstd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        backend_free(be, all[i]);
}

/* The classifier in f16 storage: its logits kept in fp16; under a loss
 * scale that passes 65504 the gradient is inf, and the step's check sees it. */
static void test_classifier(void)
{
    const int N = 12, C = 32, V = 90, Vp = 128, chunk = 5;
    float *x = rand16((size_t)N * C, 1), *w = rand16((size_t)Vp * C, 1), *zero = calloc((size_t)Vp * C, 4);
    int32_t tgt[12];
    for (int i = 0; i < N; i++)
        tgt[i] = (i * 7) % V;
    float want_loss[12], *scratch = malloc((size_t)chunk * Vp * 4);
    hostop_classifier_stored(want_loss, NULL, NULL, x, w, tgt, 1.0f, N, C, V, Vp, scratch, chunk, FERRY_DTYPE_F16);
    float bf_loss[12];
    hostop_classifier_stored(bf_loss, NULL, NULL, x, w, tgt, 1.0f, N, C, V, Vp, scratch, chunk, FERRY_DTYPE_BF16);
    void *dx = dev16(x, (size_t)N * C), *dw = dev16(w, (size_t)Vp * C), *ddx = dev16(zero, (size_t)N * C);
    void *ddw = dev16(zero, (size_t)Vp * C), *dt = NULL, *dl = NULL, *dscratch = NULL, *dsum = NULL, *dss = NULL;
    backend_alloc(be, sizeof tgt, &dt);
    backend_alloc(be, sizeof want_loss, &dl);
    backend_alloc(be, ops_classifier_scratch_bytes(be, chunk, Vp, C), &dscratch);
    backend_alloc(be, sizeof(double), &dsum);
    backend_alloc(be, ops_sumsq_scratch_bytes(), &dss);
    backend_memcpy_async(s, dt, tgt, sizeof tgt, BACKEND_COPY_H2D);
    TAP_IS_STATUS(ops_classifier(s, dl, NULL, NULL, dx, dw, dt, 1.0f, N, C, V, Vp, dscratch, chunk), FERRY_OK,
                  "classifier forward in f16");
    float loss[12];
    backend_memcpy_async(s, loss, dl, sizeof loss, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    tap_ok(memcmp(loss, want_loss, sizeof loss) == 0 && memcmp(loss, bf_loss, sizeof loss) != 0,
           "its losses are those of fp16 logits (not of bf16 ones): %.7f", (double)loss[0]);
    TAP_IS_STATUS(ops_classifier(s, dl, ddx, ddw, dx, dw, dt, 4e9f, N, C, V, Vp, dscratch, chunk), FERRY_OK,
                  "classifier backward under a scale that overflows fp16");
    double zero_d = 0, sum = 0;
    backend_memcpy_async(s, dsum, &zero_d, sizeof zero_d, BACKEND_COPY_H2D);
    TAP_IS_STATUS(ops_sumsq(s, ddx, FERRY_DTYPE_F16, (size_t)N * C, dsum, dss), FERRY_OK, "sumsq of its dinp");
    backend_memcpy_async(s, &sum, dsum, sizeof sum, BACKEND_COPY_D2H);
    backend_memcpy_async(s, loss, dl, sizeof loss, BACKEND_COPY_D2H);
    backend_stream_synchronize(s);
    tap_ok(!isfinite(sum), "the overflowed gradient makes the sum of squares non-finite (%g)", sum);
    tap_ok(memcmp(loss, want_loss, sizeof loss) == 0, "while the losses stay what they were");
    free(x), free(w), free(zero), free(scratch);
    void *all[] = {dx, dw, ddx, ddw, dt, dl, dscratch, dsum, dss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        backend_free(be, all[i]);
}

int main(void)
{
    rng = 0xf16f16ull;
    tap_diag("seed %llu", (unsigned long long)rng);
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK) {
        printf("Bail out! host backend: %s\n", ferry_last_error());
        return 1;
    }
    TAP_IS_STATUS(backend_set_act_dtype(be, FERRY_DTYPE_I32), FERRY_ERR_UNSUPPORTED, "i32 storage is refused");
    tap_ok(strstr(ferry_last_error(), "i32") != NULL, "naming it: %s", ferry_last_error());
    TAP_IS_STATUS(backend_set_act_dtype(be, FERRY_DTYPE_F16), FERRY_OK, "the host backend stores f16");
    TAP_IS_INT(backend_act_dtype(be), FERRY_DTYPE_F16, "and says so");
    if (backend_stream_create(be, "f16", &s) != FERRY_OK || ops_init(be, NULL, 0) != FERRY_OK) {
        printf("Bail out! setup: %s\n", ferry_last_error());
        return 1;
    }
    test_convert();
    test_round_once();
    test_classifier();
    backend_stream_destroy(s);
    ops_shutdown(be);
    backend_close(be);
    return tap_done();
}
