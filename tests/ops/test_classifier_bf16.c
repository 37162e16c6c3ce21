/* The classifier's embedding gradient in bf16 storage, against a float64
 * reference: dwte is accumulated over every chunk of rows in fp32 and rounded
 * to bf16 once per call, so its error stays within a fixed bound however many
 * chunks the rows take; rounding it once per chunk instead (as the classifier
 * did, and as calling it chunk by chunk still does) loses several times more.
 * Runs on the host backend storing bf16, which rounds where the CUDA
 * classifier stores bf16 (logits, their gradient, dwte).
 *
 * The bound, per element of dwte: |got - exact| <= 2^-7 x sum over rows of
 * |dlogits[r][v] x inp[r][c]|: one bf16 rounding of the logits (2^-9
 * relative, entering the softmax through |logit| <= 1 here), one of their
 * gradient (2^-9), one of the result (2^-9), with room to spare. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "tap.h"

enum { N = 2048, C = 32, V = 250, VP = 256, CHUNK = 8 };

static uint16_t *bf16_random(uint64_t *rng, size_t n, double scale, double *wide)
{
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        h[i] = dtype_f32_to_bf16((float)((tap_rand_unit(rng) * 2 - 1) * scale));
        wide[i] = dtype_bf16_to_f32(h[i]);
    }
    return h;
}

/* dwte[v][c] in float64 from the bf16 inputs, and the sum of |terms|. */
static void reference(const double *x, const double *w, const int32_t *tgt, double scale, double *ref,
                      double *mag)
{
    double *z = malloc(V * sizeof *z);
    for (int r = 0; r < N; r++) {
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) {
            double d = 0;
            for (int c = 0; c < C; c++)
                d += x[r * C + c] * w[v * C + c];
            z[v] = d;
            mx = d > mx ? d : mx;
        }
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        for (int v = 0; v < V; v++) {
            double g = scale * (exp(z[v] - mx) / sum - (v == tgt[r]));
            for (int c = 0; c < C; c++) {
                ref[v * C + c] += g * x[r * C + c];
                mag[v * C + c] += fabs(g * x[r * C + c]);
            }
        }
    }
    free(z);
}

typedef struct dev {
    backend *be;
    backend_stream *s;
    uint16_t *inp, *wte, *dinp, *dwte;
    int32_t *tgt;
    float *losses;
    void *scratch;
} dev;

static void *dev_copy(dev *d, const void *src, size_t bytes)
{
    void *p = NULL;
    backend_alloc(d->be, bytes, &p);
    memcpy(p, src, bytes); /* host backend: device memory is host memory */
    return p;
}

/* dwte after the rows go through the classifier in calls of `rows_per_call`
 * rows each (the op chunks them by CHUNK inside each call). */
static ferry_status run(dev *d, int rows_per_call, uint16_t *out)
{
    memset(d->dwte, 0, (size_t)VP * C * 2);
    memset(d->dinp, 0, (size_t)N * C * 2);
    ferry_status st = FERRY_OK;
    for (int r0 = 0; r0 < N && st == FERRY_OK; r0 += rows_per_call)
        st = ops_classifier(d->s, d->losses + r0, d->dinp + (size_t)r0 * C, d->dwte, d->inp + (size_t)r0 * C,
                            d->wte, d->tgt + r0, 1.0f / N, rows_per_call, C, V, VP, d->scratch, CHUNK);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(d->s);
    memcpy(out, d->dwte, (size_t)VP * C * 2);
    return st;
}

/* max over elements of |got - ref| / mag. */
static double worst(const uint16_t *got, const double *ref, const double *mag)
{
    double w = 0;
    for (int i = 0; i < V * C; i++) {
        double e = fabs(dtype_bf16_to_f32(got[i]) - ref[i]) / (mag[i] + 1e-30);
        w = e > w ? e : w;
    }
    return w;
}

int main(void)
{
    uint64_t seed = 0xc1a55u, rng = seed;
    tap_diag("seed %llu; N=%d rows, C=%d, V=%d (Vp %d), chunk %d rows: %d chunks", (unsigned long long)seed, N, C,
             V, VP, CHUNK, N / CHUNK);
    static double x[N * C], w[VP * C], ref[V * C], mag[V * C];
    uint16_t *hx = bf16_random(&rng, (size_t)N * C, 1.0 / sqrt(C), x);
    uint16_t *hw = bf16_random(&rng, (size_t)VP * C, 1.0, w);
    int32_t *tgt = malloc(N * sizeof *tgt);
    for (int r = 0; r < N; r++)
        tgt[r] = (int32_t)(tap_rand_u64(&rng) % V);
    reference(x, w, tgt, 1.0 / N, ref, mag);

    dev d = {0};
    if (backend_open(FERRY_BACKEND_HOST, &d.be) != FERRY_OK ||
        !tap_ok(backend_set_act_dtype(d.be, FERRY_DTYPE_BF16) == FERRY_OK, "the host backend stores bf16") ||
        backend_stream_create(d.be, "cls", &d.s) != FERRY_OK || ops_init(d.be, NULL, 0) != FERRY_OK) {
        tap_diag("%s", ferry_last_error());
        return tap_done();
    }
    d.inp = dev_copy(&d, hx, (size_t)N * C * 2);
    d.wte = dev_copy(&d, hw, (size_t)VP * C * 2);
    d.tgt = dev_copy(&d, tgt, N * sizeof *tgt);
    backend_alloc(d.be, (size_t)N * C * 2, (void **)&d.dinp);
    backend_alloc(d.be, (size_t)VP * C * 2, (void **)&d.dwte);
    backend_alloc(d.be, N * sizeof(float), (void **)&d.losses);
    backend_alloc(d.be, ops_classifier_scratch_bytes(d.be, CHUNK, VP, C), &d.scratch);
    TAP_IS_INT(ops_classifier_scratch_bytes(d.be, CHUNK, VP, C),
               ops_classifier_accumulator_offset(FERRY_DTYPE_BF16, CHUNK, VP) + (size_t)VP * C * 4,
               "the bf16 scratch holds the bf16 logits and a Vp x C fp32 accumulator");

    static uint16_t once[VP * C], per_chunk[VP * C];
    TAP_IS_STATUS(run(&d, N, once), FERRY_OK, "one call over %d chunks", N / CHUNK);
    TAP_IS_STATUS(run(&d, CHUNK, per_chunk), FERRY_OK, "%d calls of one chunk each", N / CHUNK);
    double e_once = worst(once, ref, mag), e_chunk = worst(per_chunk, ref, mag);
    tap_diag("worst |dwte - exact| / sum|terms|: %.3g accumulated in fp32, %.3g rounded per chunk "
             "(2^-9 = %.3g)", e_once, e_chunk, ldexp(1, -9));
    tap_ok(e_once <= ldexp(1, -7), "fp32 accumulation: dwte within 2^-7 of the float64 reference (%.3g)", e_once);
    tap_ok(e_chunk >= 4 * e_once,
           "rounding per chunk instead loses at least 4x more (%.3g vs %.3g): what the accumulator buys", e_chunk,
           e_once);
    double total = 0;
    for (int i = 0; i < V * C; i++)
        total += fabs(dtype_bf16_to_f32(once[i]) - ref[i]);
    tap_ok(total > 0, "and bf16 is really in play (the result is not exact: %.3g summed error)", total);

    backend_stream_destroy(d.s);
    backend_close(d.be);
    free(hx);
    free(hw);
    free(tgt);
    return tap_done();
}
