/* The cuda ops (backend/ops/<op>.cu) against the host ones on the same random
 * inputs (exact in both 16-bit types), in one storage type (the argument:
 * bf16, the default, or f16): every op of the registry over the shape table
 * (dev/ops/op_shapes.h) against the host backend storing the same type;
 * then what is particular to some (encoder_backward gives the same bits
 * twice, conversion bits, unaligned elementwise and matmul pointers, attention with
 * each tile size, the classifier's ignored targets and loss scale), and the
 * device AdamW and sum of squares against double-precision references.
 * Skips (77) without a GPU, and for bf16 on a card without bf16 (sm_70,
 * sm_75). Tolerances are norms of the error relative to the reference's
 * norm, set by the type's mantissa: for bf16 (8 bits) 1e-2 for elementwise
 * and normalising ops, 2e-2 where a 16-bit intermediate (logits, P in
 * attention) enters; for f16 (11 bits) 2e-3 and 4e-3; the fp32 statistics
 * a row of the table names are held closer. Under f16 the classifier also
 * runs with a loss scale's grad_scale, and with one so large that its
 * gradient overflows fp16: the sum of squares the step makes must then say
 * so.
 *   test_ops_gpu [bf16|f16]      the registry's shapes, every code path of every op
 *   test_ops_gpu [bf16|f16] xl   GPT-2 XL's widths (C = 1600, 25 heads of 64,
 *                                the 50257-token vocabulary padded to 50304)
 *                                with a small batch whose T is not a multiple
 *                                of the 64-row tile
 * FERRY_TEST_ONLY=WORD[,WORD...] runs only the parts whose name holds one of
 * the words: the registry's ops by name (attention_forward,
 * rmsnorm_backward, ...), and attention, classifier, convert, elementwise,
 * matmul, adamw, sumsq (a planted bug's test, narrowed to its op:
 * dev/cudasim/mutations.py --ci). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "backend/ops/ops_cuda.h"
#include "backend/ops/ops_host.h"
#include "dev/ops/opdrive.h"
#include "tests/gpu/gpu_util.h"
#include "tests/tap.h"

static backend *be;
static backend_stream *st;
static uint64_t rng;
static ferry_dtype act = FERRY_DTYPE_BF16; /* the storage type under test */
static double TOL_ELEM = 1e-2, TOL_MIXED = 2e-2;

static void check(const char *what, const float *got, const float *want, size_t n, double tol)
{
    opcheck_err e = opcheck_compare(got, want, n);
    if (!tap_ok(e.rel <= tol, "%s: relative error %.3g <= %.0e (max abs %.3g, %zu values)", what,
                e.rel, tol, e.max_abs, n))
        for (size_t i = 0; i < n && i < 4; i++)
            tap_diag("  [%zu] got %.6g want %.6g", i, got[i], want[i]);
}

static void *dev(const float *x, size_t n) { return gpu_upload_as(be, st, x, n, act); }
static void *dev_raw(const void *x, size_t bytes) { return gpu_upload(be, st, x, bytes); }
static float *back(const void *d, size_t n) { return gpu_download_as(st, d, n, act); }
/* The 16-bit bits of x in the type under test, and whether bits h are a NaN. */
static uint16_t bits16(float x) { return act == FERRY_DTYPE_F16 ? dtype_f32_to_f16(x) : opcheck_bf16_bits(x); }
static bool nan16(uint16_t h) { return (h & 0x7fffu) > (act == FERRY_DTYPE_F16 ? 0x7c00u : 0x7f80u); }
static void release(void *d) { backend_free(be, d); }

#define OK(call) TAP_IS_STATUS((call), FERRY_OK, "%s", #call)

/* Whether the part `name` runs: FERRY_TEST_ONLY unset, or one of its
 * comma-separated words in the name. */
static bool wanted(const char *name)
{
    const char *only = getenv("FERRY_TEST_ONLY");
    if (!only || !*only)
        return true;
    for (const char *w = only; *w;) {
        size_t n = strcspn(w, ",");
        char word[64];
        if (n > 0 && n < sizeof word) {
            memcpy(word, w, n);
            word[n] = 0;
            if (strstr(name, word))
                return true;
        }
        w += n + (w[n] == ',');
    }
    return false;
}

static void test_convert(void)
{
    const size_t n = 4099;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)opcheck_rand_next(&rng);
        memcpy(&x[i], &u, 4); /* every bit pattern: ties, subnormals, inf, NaN */
    }
    /* ties and their neighbours in both types, overflow past fp16's 65504, fp16 subnormals */
    float specials[] = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-9f, -0.0f, INFINITY, NAN, 0x1p-130f,
                        1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-12f, 65519.0f, 65520.0f, 0x1p-25f, 0x1.8p-24f};
    memcpy(x, specials, sizeof specials);
    float *d32 = dev_raw(x, n * 4);
    void *d16 = NULL;
    backend_alloc(be, n * 2, &d16);
    OK(ops_convert_from_f32(st, d16, d32, n));
    uint16_t *h = malloc(n * 2);
    backend_memcpy_async(st, h, d16, n * 2, BACKEND_COPY_D2H);
    backend_stream_synchronize(st);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        uint16_t want = bits16(x[i]);
        bool both_nan = isnan(x[i]) && nan16(h[i]);
        if (h[i] != want && !both_nan && bad++ == 0)
            first = i;
    }
    if (!tap_ok(bad == 0, "convert_from_f32 (%s): all %zu values round to nearest even", dtype_name(act), n))
        tap_diag("  %zu differ; first [%zu] %a -> 0x%04x, want 0x%04x", bad, first, x[first],
                 h[first], bits16(x[first]));
    float *back32 = NULL;
    backend_alloc(be, n * 4, (void **)&back32);
    OK(ops_convert_to_f32(st, back32, d16, n));
    float *y = gpu_download_f32(st, back32, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = dtype_load_f32(h, act, i);
        if (memcmp(&want, &y[i], 4) != 0 && !(isnan(want) && isnan(y[i])))
            bad++;
    }
    TAP_IS_INT(bad, 0, "convert_to_f32 widens exactly");
    release(d32), release(d16), release(back32);
    free(x), free(h), free(y);
}

static void test_encoder(int B, int T, int C, int V)
{
    const size_t BT = (size_t)B * T;
    int32_t *tok = malloc(BT * sizeof *tok);
    for (size_t i = 0; i < BT; i++)
        tok[i] = (int32_t)(opcheck_rand_next(&rng) % (uint64_t)V); /* V small: many repeats */
    float *wte = gpu_rand_array(&rng, (size_t)V * C, -1, 1);
    float *wpe = gpu_rand_array(&rng, (size_t)T * C, -1, 1);
    float *dout = gpu_rand_array(&rng, BT * C, -1, 1);
    float *dwte = gpu_rand_array(&rng, (size_t)V * C, -1, 1);
    float *dwpe = gpu_rand_array(&rng, (size_t)T * C, -1, 1);
    float *out = malloc(BT * C * sizeof *out);
    void *d_tok = dev_raw(tok, BT * 4), *d_wte = dev(wte, (size_t)V * C),
         *d_wpe = dev(wpe, (size_t)T * C), *d_dout = dev(dout, BT * C),
         *d_dwte = dev(dwte, (size_t)V * C), *d_dwpe = dev(dwpe, (size_t)T * C), *d_out = NULL;
    backend_alloc(be, BT * C * 2, &d_out);
    char what[96];
    TAP_IS_STATUS(hostop_encoder_forward(out, tok, wte, wpe, B, T, C, V, NULL), FERRY_OK, "host encoder");
    OK(ops_encoder_forward(st, d_out, d_tok, d_wte, d_wpe, B, T, C, V, NULL));
    float *g = back(d_out, BT * C);
    snprintf(what, sizeof what, "encoder_forward B=%d T=%d C=%d", B, T, C);
    check(what, g, out, BT * C, TOL_ELEM);
    free(g);
    hostop_encoder_backward(dwte, dwpe, dout, tok, B, T, C, V, NULL);
    OK(ops_encoder_backward(st, d_dwte, d_dwpe, d_dout, d_tok, B, T, C, V, NULL));
    g = back(d_dwte, (size_t)V * C);
    snprintf(what, sizeof what, "encoder_backward dwte (V=%d, repeated tokens)", V);
    check(what, g, dwte, (size_t)V * C, TOL_ELEM);
    free(g);
    g = back(d_dwpe, (size_t)T * C);
    check("encoder_backward dwpe", g, dwpe, (size_t)T * C, TOL_ELEM);
    free(g);
    /* Determinism: a second backward from the same start gives the same bits
     * (and not the start's: the backward really ran), with dwpe given. */
    void *d_dwte2 = dev(dwte, (size_t)V * C), *d_dwte3 = dev(dwte, (size_t)V * C);
    void *d_dwpe2 = dev(dwpe, (size_t)T * C);
    OK(ops_encoder_backward(st, d_dwte2, d_dwpe2, d_dout, d_tok, B, T, C, V, NULL));
    OK(ops_encoder_backward(st, d_dwte3, d_dwpe2, d_dout, d_tok, B, T, C, V, NULL));
    float *g2 = back(d_dwte2, (size_t)V * C), *g3 = back(d_dwte3, (size_t)V * C);
    TAP_IS_INT(memcmp(g2, g3, (size_t)V * C * 4), 0, "encoder_backward is deterministic");
    tap_ok(memcmp(g2, dwte, (size_t)V * C * 4) != 0, "encoder_backward changed dwte");
    free(g2), free(g3);
    release(d_dwpe2);
    release(d_tok), release(d_wte), release(d_wpe), release(d_dout), release(d_dwte);
    release(d_dwpe), release(d_out), release(d_dwte2), release(d_dwte3);
    free(tok), free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(out);
}

static void test_layernorm(int N, int C)
{
    const size_t n = (size_t)N * C;
    float *inp = gpu_rand_array(&rng, n, -2, 3);
    float *w = gpu_rand_array(&rng, C, 0.5f, 1.5f), *b = gpu_rand_array(&rng, C, -0.5f, 0.5f);
    float *dout = gpu_rand_array(&rng, n, -1, 1);
    float *dinp = gpu_rand_array(&rng, n, -1, 1);
    float *dw = gpu_rand_array(&rng, C, -1, 1), *db = gpu_rand_array(&rng, C, -1, 1);
    float *out = malloc(n * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    void *d_inp = dev(inp, n), *d_w = dev(w, C), *d_b = dev(b, C), *d_dout = dev(dout, n),
         *d_dinp = dev(dinp, n), *d_dw = dev(dw, C), *d_db = dev(db, C), *d_out = NULL;
    float *d_mean = NULL, *d_rstd = NULL;
    backend_alloc(be, n * 2, &d_out);
    backend_alloc(be, N * 4, (void **)&d_mean);
    backend_alloc(be, N * 4, (void **)&d_rstd);
    hostop_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    OK(ops_layernorm_forward(st, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C));
    char what[96];
    float *g = back(d_out, n);
    snprintf(what, sizeof what, "layernorm_forward N=%d C=%d out", N, C);
    check(what, g, out, n, TOL_ELEM);
    free(g);
    g = gpu_download_f32(st, d_mean, N);
    check("layernorm_forward mean (fp32)", g, mean, N, 1e-5);
    free(g);
    g = gpu_download_f32(st, d_rstd, N);
    check("layernorm_forward rstd (fp32)", g, rstd, N, 1e-4);
    free(g);
    hostop_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    OK(ops_layernorm_backward(st, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C));
    g = back(d_dinp, n);
    check("layernorm_backward dinp", g, dinp, n, TOL_ELEM);
    free(g);
    g = back(d_dw, C);
    check("layernorm_backward dweight", g, dw, C, TOL_ELEM);
    free(g);
    g = back(d_db, C);
    check("layernorm_backward dbias", g, db, C, TOL_ELEM);
    free(g);
    release(d_inp), release(d_w), release(d_b), release(d_dout), release(d_dinp), release(d_dw);
    release(d_db), release(d_out), release(d_mean), release(d_rstd);
    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
    free(mean), free(rstd);
}

static void test_matmul(int N, int C, int OC, bool with_bias)
{
    float *inp = gpu_rand_array(&rng, (size_t)N * C, -1, 1);
    float *w = gpu_rand_array(&rng, (size_t)OC * C, -0.2f, 0.2f);
    float *b = gpu_rand_array(&rng, OC, -1, 1);
    float *dout = gpu_rand_array(&rng, (size_t)N * OC, -1, 1);
    float *dinp = gpu_rand_array(&rng, (size_t)N * C, -1, 1);
    float *dw = gpu_rand_array(&rng, (size_t)OC * C, -1, 1);
    float *db = gpu_rand_array(&rng, OC, -1, 1);
    float *out = malloc((size_t)N * OC * 4);
    void *d_inp = dev(inp, (size_t)N * C), *d_w = dev(w, (size_t)OC * C), *d_b = dev(b, OC),
         *d_dout = dev(dout, (size_t)N * OC), *d_dinp = dev(dinp, (size_t)N * C),
         *d_dw = dev(dw, (size_t)OC * C), *d_db = dev(db, OC), *d_out = NULL;
    backend_alloc(be, (size_t)N * OC * 2, &d_out);
    char what[128];
    hostop_matmul_forward(out, inp, w, with_bias ? b : NULL, N, C, OC);
    OK(ops_matmul_forward(st, d_out, d_inp, d_w, with_bias ? d_b : NULL, N, C, OC));
    float *g = back(d_out, (size_t)N * OC);
    snprintf(what, sizeof what, "matmul_forward N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);
    check(what, g, out, (size_t)N * OC, TOL_ELEM);
    free(g);
    hostop_matmul_backward(dinp, dw, with_bias ? db : NULL, dout, inp, w, N, C, OC);
    OK(ops_matmul_backward(st, d_dinp, d_dw, with_bias ? d_db : NULL, d_dout, d_inp, d_w, N, C,
                           OC));
    g = back(d_dinp, (size_t)N * C);
    check("matmul_backward dinp (+=)", g, dinp, (size_t)N * C, TOL_ELEM);
    free(g);
    g = back(d_dw, (size_t)OC * C);
    check("matmul_backward dweight (+=)", g, dw, (size_t)OC * C, TOL_ELEM);
    free(g);
    if (with_bias) {
        g = back(d_db, OC);
        check("matmul_backward dbias (+=)", g, db, OC, TOL_ELEM);
        free(g);
    }
    release(d_inp), release(d_w), release(d_b), release(d_dout), release(d_dinp), release(d_dw);
    release(d_db), release(d_out);
    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
}

/* A matmul whose operands are not 16-byte aligned (rows of a larger tensor
 * at an odd element, as a chunk of rows with an odd width is): cuBLASLt must
 * be told the alignment the pointers have, no more. */
static void test_matmul_unaligned(int N, int C, int OC, size_t offset)
{
    float *inp = gpu_rand_array(&rng, (size_t)N * C, -1, 1);
    float *w = gpu_rand_array(&rng, (size_t)OC * C, -0.2f, 0.2f);
    float *out = malloc((size_t)N * OC * 4), *pad = calloc((size_t)N * (C + OC) + offset, sizeof *pad);
    uint16_t *d_inp = dev(pad, (size_t)N * C + offset), *d_out = dev(pad, (size_t)N * OC + offset);
    void *t_inp = dev(inp, (size_t)N * C), *d_w = dev(w, (size_t)OC * C);
    backend_memcpy_async(st, d_inp + offset, t_inp, (size_t)N * C * 2, BACKEND_COPY_D2D);
    hostop_matmul_forward(out, inp, w, NULL, N, C, OC);
    OK(ops_matmul_forward(st, d_out + offset, d_inp + offset, d_w, NULL, N, C, OC));
    float *g = back(d_out + offset, (size_t)N * OC);
    char what[128];
    snprintf(what, sizeof what, "matmul_forward N=%d C=%d OC=%d, input and output %zu element(s) off 16-byte "
             "alignment", N, C, OC, offset);
    check(what, g, out, (size_t)N * OC, TOL_ELEM);
    free(g);
    release(d_inp), release(d_out), release(t_inp), release(d_w);
    free(inp), free(w), free(out), free(pad);
}

/* offset: elements to shift the device pointers by, to exercise the
 * unaligned (scalar) path. */
static void test_elementwise(size_t n, size_t offset)
{
    float *x = gpu_rand_array(&rng, n, -4, 4), *y = gpu_rand_array(&rng, n, -4, 4);
    float *dinp = gpu_rand_array(&rng, n, -1, 1), *out = malloc(n * 4);
    float *pad = calloc(n + offset, sizeof *pad);
    uint16_t *dx = dev(pad, n + offset), *dy = dev(pad, n + offset), *dd = dev(pad, n + offset),
             *dout = dev(pad, n + offset);
    void *tx = dev(x, n), *ty = dev(y, n), *td = dev(dinp, n);
    backend_memcpy_async(st, dx + offset, tx, n * 2, BACKEND_COPY_D2D);
    backend_memcpy_async(st, dy + offset, ty, n * 2, BACKEND_COPY_D2D);
    backend_memcpy_async(st, dd + offset, td, n * 2, BACKEND_COPY_D2D);
    char what[96];
    hostop_gelu_forward(out, x, n);
    OK(ops_gelu_forward(st, dout + offset, dx + offset, n));
    float *g = back(dout + offset, n);
    snprintf(what, sizeof what, "gelu_forward n=%zu offset=%zu", n, offset);
    check(what, g, out, n, TOL_ELEM);
    free(g);
    hostop_gelu_backward(dinp, x, y, n);
    OK(ops_gelu_backward(st, dd + offset, dx + offset, dy + offset, n));
    g = back(dd + offset, n);
    snprintf(what, sizeof what, "gelu_backward n=%zu offset=%zu (+=)", n, offset);
    check(what, g, dinp, n, TOL_ELEM);
    free(g);
    hostop_residual_forward(out, x, y, n);
    OK(ops_residual_forward(st, dout + offset, dx + offset, dy + offset, n));
    g = back(dout + offset, n);
    snprintf(what, sizeof what, "residual_forward n=%zu offset=%zu", n, offset);
    check(what, g, out, n, TOL_ELEM);
    free(g);
    release(dx), release(dy), release(dd), release(dout), release(tx), release(ty), release(td);
    free(x), free(y), free(dinp), free(out), free(pad);
}

/* One kernel family with one tile size, or a skip line when the card
 * cannot hold it or lacks the kernel: "mma" (attention.cu) with `tile`
 * queries per forward block (0: the card's choice, 64 or 128; its backward
 * has one shape, run when `backward`), "wmma" (attention_wmma.cu: Volta's,
 * and the lab's earlier variants) with `tile` queries per block (32 or 64). */
static void test_attention_kernel(int B, int T, int C, int NH, const char *kernel, int tile, bool backward)
{
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C,
                 nlse = (size_t)B * NH * T;
    const bool mma = strcmp(kernel, "mma") == 0;
    float *qkv = gpu_rand_array(&rng, nqkv, -2, 2), *dout = gpu_rand_array(&rng, nout, -1, 1);
    float *dqkv = gpu_rand_array(&rng, nqkv, -1, 1);
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4), *delta = malloc(nlse * 4);
    void *d_qkv = dev(qkv, nqkv), *d_dout = dev(dout, nout), *d_dqkv = dev(dqkv, nqkv),
         *d_out = NULL;
    float *d_lse = NULL, *d_delta = NULL;
    backend_alloc(be, nout * 2, &d_out);
    backend_alloc(be, nlse * 4, (void **)&d_lse);
    backend_alloc(be, nlse * 4, (void **)&d_delta);
    char what[128];
    snprintf(what, sizeof what, "B=%d T=%d C=%d NH=%d (HS %d), %s tiles %d", B, T, C, NH, C / NH, kernel, tile);
    void *cs = backend_stream_native(st);
    ferry_status fs = mma ? cudaop_attention_forward_mma(cs, act, tile, d_out, d_lse, d_qkv, B, T, C, NH, NULL)
                          : cudaop_attention_forward_wmma(cs, act, tile, d_out, d_lse, d_qkv, B, T, C, NH, NULL);
    if (fs == FERRY_ERR_UNSUPPORTED && (tile || !mma)) {
        tap_skip("attention %s: this card cannot run it: %s", what, ferry_last_error());
        goto done;
    }
    TAP_IS_STATUS(hostop_attention_forward(out, lse, qkv, B, T, C, NH, NULL), FERRY_OK, "host attention");
    TAP_IS_STATUS(fs, FERRY_OK, "attention_forward %s", what);
    float *g = back(d_out, nout);
    char name[192];
    snprintf(name, sizeof name, "attention_forward out %s", what);
    check(name, g, out, nout, TOL_MIXED);
    free(g);
    g = gpu_download_f32(st, d_lse, nlse);
    snprintf(name, sizeof name, "attention_forward lse %s", what);
    check(name, g, lse, nlse, TOL_ELEM);
    free(g);
    if (!backward)
        goto done;
    /* The backward from the device's own forward output, as training does:
     * the host gets the same (16-bit) out and lse. */
    float *out_dev = back(d_out, nout), *lse_dev = gpu_download_f32(st, d_lse, nlse);
    TAP_IS_STATUS(hostop_attention_backward(dqkv, dout, qkv, out_dev, lse_dev, delta, B, T, C, NH, NULL),
                  FERRY_OK, "host attention backward");
    fs = mma ? cudaop_attention_backward_mma(cs, act, d_dqkv, d_dout, d_qkv, d_out, d_lse, d_delta, B, T, C, NH, NULL)
             : cudaop_attention_backward_wmma(cs, act, tile, d_dqkv, d_dout, d_qkv, d_out, d_lse, d_delta, B, T, C,
                                              NH, NULL);
    if (fs == FERRY_ERR_UNSUPPORTED && !mma) { /* the backward's tiles are larger than the forward's */
        tap_skip("attention backward %s: this card cannot hold the tile: %s", what, ferry_last_error());
        free(out_dev), free(lse_dev);
        goto done;
    }
    TAP_IS_STATUS(fs, FERRY_OK, "attention_backward %s", what);
    g = back(d_dqkv, nqkv);
    snprintf(name, sizeof name, "attention_backward dqkv (+=) %s", what);
    check(name, g, dqkv, nqkv, TOL_MIXED);
    free(g);
    g = gpu_download_f32(st, d_delta, nlse);
    snprintf(name, sizeof name, "attention_backward delta %s", what);
    check(name, g, delta, nlse, TOL_ELEM);
    free(g);
    free(out_dev), free(lse_dev);
done:
    release(d_qkv), release(d_dout), release(d_dqkv), release(d_out), release(d_lse), release(d_delta);
    free(qkv), free(dout), free(dqkv), free(out), free(lse), free(delta);
}

/* Each kernel and tile size (the op front, the card's own choice, is the registry's). */
static void test_attention(int B, int T, int C, int NH)
{
    test_attention_kernel(B, T, C, NH, "mma", 128, true);
    test_attention_kernel(B, T, C, NH, "mma", 64, false);
    test_attention_kernel(B, T, C, NH, "wmma", 64, true);
    test_attention_kernel(B, T, C, NH, "wmma", 32, true);
}

/* Every op of the registry (backend/ops/op_list.h) over the shape table
 * (dev/ops/op_shapes.h): cuda against the host backend storing the same
 * type, from the same inputs, through the same fronts. */
static void report(void *ctx, const opdrive_result *r)
{
    const op_shape *shape = ctx;
    double tol = op_shape_tol(shape, r->tensor, TOL_ELEM, TOL_MIXED);
    tap_ok(r->err.rel <= tol, "%s %s: %s, cuda against the host backend (%s): relative error %.3g <= %.0e "
           "(max abs %.3g, %zu values)", r->op, shape->sizes, r->tensor, dtype_name(act), r->err.rel, tol,
           r->err.max_abs, r->n);
}

static void test_registry(void)
{
    static opinfo all[OPINFO_OPS];
    opinfo_all(all);
    backend *host = NULL;
    backend_stream *hs = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &host) != FERRY_OK || backend_set_act_dtype(host, act) != FERRY_OK ||
        backend_stream_create(host, "host", &hs) != FERRY_OK || ops_init(host, NULL, 0) != FERRY_OK) {
        tap_ok(0, "a host backend storing %s: %s", dtype_name(act), ferry_last_error());
        backend_close(host);
        return;
    }
    for (size_t k = 0; k < OP_SHAPES; k++) {
        if (!wanted(op_shapes[k].op))
            continue;
        ferry_status fs = opdrive_compare(all, &op_shapes[k], be, st, host, hs, rng + k, report, (void *)&op_shapes[k]);
        if (fs != FERRY_OK)
            tap_ok(0, "%s %s: %s", op_shapes[k].op, op_shapes[k].sizes, ferry_last_error());
    }
    backend_stream_destroy(hs);
    backend_close(host);
}

/* Rows of `op` run twice on cuda from the same inputs give the same bits
 * in every tensor the op writes. */
static void test_deterministic(const char *op)
{
    static opinfo all[OPINFO_OPS];
    opinfo_all(all);
    const opinfo *info = opinfo_find(all, op);
    for (size_t k = 0; info && k < OP_SHAPES; k++) {
        if (strcmp(op_shapes[k].op, op) != 0)
            continue;
        opdrive_run a, b;
        memset(&b, 0, sizeof b);
        ferry_status fs = opdrive_setup(&a, info, op_shapes[k].sizes, be, st);
        if (fs == FERRY_OK)
            fs = opdrive_setup(&b, info, op_shapes[k].sizes, be, st);
        if (fs == FERRY_OK)
            fs = opdrive_fill(&a, rng + k);
        if (fs == FERRY_OK)
            fs = opdrive_fill(&b, rng + k);
        if (fs == FERRY_OK)
            fs = opdrive_call(&a);
        if (fs == FERRY_OK)
            fs = opdrive_call(&b);
        for (int i = 0; fs == FERRY_OK && i < info->nargs; i++) {
            if (!opinfo_is_written(info->args[i].kind) || a.none[i])
                continue;
            size_t n = a.extent[i];
            float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
            if (ga && gb && opdrive_read(&a, i, ga) == FERRY_OK && opdrive_read(&b, i, gb) == FERRY_OK)
                TAP_IS_INT(memcmp(ga, gb, n * sizeof *ga), 0, "%s %s: %s is the same bits on a second run", op,
                           op_shapes[k].sizes, info->args[i].name);
            else
                tap_ok(0, "%s %s: reading %s back: %s", op, op_shapes[k].sizes, info->args[i].name, ferry_last_error());
            free(ga), free(gb);
        }
        if (fs != FERRY_OK)
            tap_ok(0, "%s %s twice: %s", op, op_shapes[k].sizes, ferry_last_error());
        opdrive_free(&a);
        opdrive_free(&b);
    }
}

static void test_classifier(int N, int C, int V, int Vp, int chunk, bool grad, float loss_scale)
{
    float *inp = gpu_rand_array(&rng, (size_t)N * C, -1, 1);
    float *wte = gpu_rand_array(&rng, (size_t)Vp * C, -0.3f, 0.3f);
    float *dinp = gpu_rand_array(&rng, (size_t)N * C, -1, 1);
    float *dwte = gpu_rand_array(&rng, (size_t)Vp * C, -1, 1);
    int32_t *tgt = malloc(N * sizeof *tgt);
    for (int i = 0; i < N; i++)
        tgt[i] = i % 7 == 3 ? -1 : (int32_t)(opcheck_rand_next(&rng) % (uint64_t)V);
    float *losses = malloc(N * 4), *scratch = malloc((size_t)chunk * Vp * 4);
    void *d_inp = dev(inp, (size_t)N * C), *d_wte = dev(wte, (size_t)Vp * C),
         *d_dinp = dev(dinp, (size_t)N * C), *d_dwte = dev(dwte, (size_t)Vp * C),
         *d_tgt = dev_raw(tgt, N * 4), *d_scratch = NULL;
    float *d_losses = NULL;
    backend_alloc(be, N * 4, (void **)&d_losses);
    backend_alloc(be, ops_classifier_scratch_bytes(be, chunk, Vp, C), &d_scratch);
    const float scale = loss_scale / N;
    TAP_IS_STATUS(hostop_classifier(losses, grad ? dinp : NULL, grad ? dwte : NULL, inp, wte, tgt,
                                    scale, N, C, V, Vp, scratch, chunk),
                  FERRY_OK, "host classifier");
    OK(ops_classifier(st, d_losses, grad ? d_dinp : NULL, grad ? d_dwte : NULL, d_inp, d_wte,
                      d_tgt, scale, N, C, V, Vp, d_scratch, chunk));
    char what[160];
    float *g = gpu_download_f32(st, d_losses, N);
    snprintf(what, sizeof what, "classifier losses N=%d C=%d V=%d Vp=%d chunk=%d grad=%d scale=%g", N, C, V,
             Vp, chunk, grad, (double)loss_scale);
    check(what, g, losses, N, TOL_ELEM);
    free(g);
    if (grad) {
        g = back(d_dinp, (size_t)N * C);
        check("classifier dinp (+=)", g, dinp, (size_t)N * C, TOL_MIXED);
        free(g);
        g = back(d_dwte, (size_t)Vp * C);
        check("classifier dwte (+=, padded rows unchanged)", g, dwte, (size_t)Vp * C, TOL_MIXED);
        free(g);
    }
    release(d_inp), release(d_wte), release(d_dinp), release(d_dwte), release(d_tgt);
    release(d_scratch), release(d_losses);
    free(inp), free(wte), free(dinp), free(dwte), free(tgt), free(losses), free(scratch);
}

/* fp16 overflow reaches the step's check: a loss scale so large that the
 * classifier's gradient rows pass 65504 stores inf, and the sum of squares
 * of dinp (what the step's norm pass reads) is not finite. */
static void test_classifier_overflow(void)
{
    const int N = 16, C = 32, V = 100, Vp = 128, chunk = 8;
    float *inp = gpu_rand_array(&rng, (size_t)N * C, -1, 1), *wte = gpu_rand_array(&rng, (size_t)Vp * C, -1, 1);
    float *zeros = calloc((size_t)Vp * C, 4);
    int32_t tgt[16];
    for (int i = 0; i < N; i++)
        tgt[i] = i * 5;
    void *d_inp = dev(inp, (size_t)N * C), *d_wte = dev(wte, (size_t)Vp * C), *d_dinp = dev(zeros, (size_t)N * C),
         *d_dwte = dev(zeros, (size_t)Vp * C), *d_tgt = dev_raw(tgt, sizeof tgt), *d_scratch = NULL, *d_ws = NULL;
    float *d_losses = NULL;
    double zero = 0, got = 0;
    double *d_sum = dev_raw(&zero, 8);
    backend_alloc(be, N * 4, (void **)&d_losses);
    backend_alloc(be, ops_classifier_scratch_bytes(be, chunk, Vp, C), &d_scratch);
    backend_alloc(be, ops_sumsq_scratch_bytes(), &d_ws);
    OK(ops_classifier(st, d_losses, d_dinp, d_dwte, d_inp, d_wte, d_tgt, 1e6f * 65536.0f / N, N, C, V, Vp,
                      d_scratch, chunk));
    OK(ops_sumsq(st, d_dinp, act, (size_t)N * C, d_sum, d_ws));
    backend_memcpy_async(st, &got, d_sum, 8, BACKEND_COPY_D2H);
    backend_stream_synchronize(st);
    tap_ok(!isfinite(got), "f16: a gradient past 65504 is inf, and the step's sum of squares flags it (%g)", got);
    float *loss = gpu_download_f32(st, d_losses, N);
    bool finite = true;
    for (int i = 0; i < N; i++)
        finite &= isfinite(loss[i]) != 0;
    tap_ok(finite, "f16: the losses themselves stay finite (the scale rides on the gradient only)");
    free(loss);
    release(d_inp), release(d_wte), release(d_dinp), release(d_dwte), release(d_tgt), release(d_scratch);
    release(d_ws), release(d_losses), release(d_sum);
    free(inp), free(wte), free(zeros);
}

static void test_adamw(void)
{
    const size_t n = 10007;
    const adamw_hparams hp = {1e-3, 0.9, 0.95, 1e-8, 0.1};
    float *p = gpu_rand_array(&rng, n, -1, 1), *zeros = calloc(n, 4);
    double *rp = malloc(n * 8), *rm = calloc(n, 8), *rv = calloc(n, 8);
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i];
    float *d_p = dev_raw(p, n * 4), *d_m = dev_raw(zeros, n * 4), *d_v = dev_raw(zeros, n * 4);
    void *d_out = NULL;
    backend_alloc(be, n * 2, &d_out);
    for (int64_t step = 1; step <= 3; step++) {
        float *g = gpu_rand_array(&rng, n, -0.5f, 0.5f);
        void *d_g = dev(g, n);
        opcheck_adamw_ref(rp, rm, rv, g, n, 1e-3, 0.9, 0.95, 1e-8, 0.1, step, 0.5);
        OK(cudaop_adamw(backend_stream_native(st), act, d_p, d_m, d_v, d_g, act, d_out, n, &hp, step, 0.5f));
        release(d_g);
        free(g);
    }
    float *got = gpu_download_f32(st, d_p, n), *got16 = back(d_out, n);
    double max_err = 0, max16 = 0;
    for (size_t i = 0; i < n; i++) {
        max_err = fmax(max_err, fabs(got[i] - rp[i]));
        /* relative to the value, or below fp16's normal range (2^-14) to
         * its smallest normal: a subnormal's ulp is fixed, 2^-24 */
        max16 = fmax(max16, fabs(got16[i] - got[i]) / fmax(fabs(got[i]), act == FERRY_DTYPE_F16 ? 0x1p-14 : 1e-30));
    }
    /* fp32 state: a few ulps of |p| <= 1 after 3 steps of size 1e-3 */
    tap_ok(max_err <= 1e-6, "adamw: 3 steps match torch AdamW in double, max abs err %.3g <= 1e-6",
           max_err);
    const double half_ulp = act == FERRY_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
    tap_ok(max16 <= half_ulp, "adamw: %s param copy within half an ulp, max rel %.3g", dtype_name(act), max16);
    TAP_IS_STATUS(cudaop_adamw(backend_stream_native(st), act, d_p, d_m, d_v, d_out, act, d_out, n, &hp, 0, 1.0f),
                  FERRY_ERR_INVALID_ARGUMENT, "adamw: step 0 is rejected");
    release(d_p), release(d_m), release(d_v), release(d_out);
    free(p), free(zeros), free(rp), free(rm), free(rv), free(got), free(got16);
}

static void test_sumsq(void)
{
    const size_t n = 3000017;
    float *g = gpu_rand_array(&rng, n, -1, 1);
    double want = 0, zero = 0.5; /* accumulates onto 0.5 */
    for (size_t i = 0; i < n; i++)
        want += (double)g[i] * g[i];
    want += 0.5;
    void *d_g = dev(g, n), *d_scratch = NULL;
    double *d_sum = dev_raw(&zero, 8), *d_sum2 = dev_raw(&zero, 8);
    backend_alloc(be, cudaop_sumsq_scratch_bytes(), &d_scratch);
    OK(cudaop_sumsq(backend_stream_native(st), d_g, act, n, d_sum, d_scratch));
    OK(cudaop_sumsq(backend_stream_native(st), d_g, act, n, d_sum2, d_scratch));
    double got = 0, got2 = 0;
    backend_memcpy_async(st, &got, d_sum, 8, BACKEND_COPY_D2H);
    backend_memcpy_async(st, &got2, d_sum2, 8, BACKEND_COPY_D2H);
    backend_stream_synchronize(st);
    TAP_IS_CLOSE(got, want, 0, 1e-10, "sumsq of %zu %s values accumulates onto *out", n, dtype_name(act));
    tap_ok(memcmp(&got, &got2, 8) == 0, "sumsq is bitwise deterministic (%.17g, %.17g)", got, got2);
    g[n / 2] = NAN;
    void *d_bad = dev(g, n);
    OK(cudaop_sumsq(backend_stream_native(st), d_bad, act, n, d_sum, d_scratch));
    backend_memcpy_async(st, &got, d_sum, 8, BACKEND_COPY_D2H);
    backend_stream_synchronize(st);
    tap_ok(!isfinite(got), "sumsq flags a NaN gradient with a non-finite sum (%g)", got);
    release(d_g), release(d_scratch), release(d_sum), release(d_sum2), release(d_bad);
    free(g);
}

/* Every op at GPT-2 XL's widths, B x T = 2 x 67 tokens (1 x 67 where a
 * V x C matrix makes the reference slow). */
static void test_xl(void)
{
    const int B = 2, T = 67, C = 1600, NH = 25, V = 50257, Vp = 50304;
    test_encoder(B, T, C, 2048); /* the rows of 1600 matter, not the vocabulary's size */
    test_layernorm(B * T, C);
    test_matmul(B * T, C, 3 * C, true); /* qkv */
    test_matmul(B * T, 4 * C, C, true); /* the MLP's projection */
    test_elementwise((size_t)B * T * 4 * C, 0);
    test_attention(B, T, C, NH);
    test_classifier(T, C, V, Vp, 32, true, 1.0f); /* three chunks, the last partial */
}

int main(int argc, char **argv)
{
    bool xl = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "xl") == 0) {
            xl = true;
            continue;
        }
        if (ferry_dtype_parse(argv[i], &act) != FERRY_OK || (act != FERRY_DTYPE_BF16 && act != FERRY_DTYPE_F16)) {
            printf("Bail out! usage: test_ops_gpu [bf16|f16] [xl]\n");
            return 1;
        }
    }
    if (act == FERRY_DTYPE_F16) {
        TOL_ELEM = 2e-3;
        TOL_MIXED = 4e-3;
    }
    ferry_status rc = backend_open(FERRY_BACKEND_CUDA, &be);
    if (rc == FERRY_ERR_UNSUPPORTED)
        tap_plan_skip("no GPU");
    if (rc != FERRY_OK) {
        printf("Bail out! backend_open(cuda): %s\n", ferry_last_error());
        return 1;
    }
    rc = backend_set_act_dtype(be, act);
    if (rc == FERRY_ERR_UNSUPPORTED) { /* bf16 on a card without it */
        tap_diag("%s", ferry_last_error());
        tap_plan_skip("this card does not compute in the type under test");
    }
    if (rc != FERRY_OK) {
        printf("Bail out! storage type %s: %s\n", dtype_name(act), ferry_last_error());
        return 1;
    }
    rng = 0x5eed2024ull;
    const char *seed = getenv("FERRY_TEST_SEED");
    if (seed)
        rng = strtoull(seed, NULL, 0);
    tap_diag("device %s, storage %s, seed 0x%llx", backend_device_name(be), dtype_name(act),
             (unsigned long long)rng);
    if (getenv("FERRY_TEST_ONLY") && *getenv("FERRY_TEST_ONLY"))
        tap_diag("only the parts named for %s (FERRY_TEST_ONLY)", getenv("FERRY_TEST_ONLY"));
    const size_t ws_bytes = 32u << 20;
    void *ws = NULL;
    if (backend_stream_create(be, "test", &st) != FERRY_OK || backend_alloc(be, ws_bytes, &ws) ||
        ops_init(be, ws, ws_bytes) != FERRY_OK) {
        printf("Bail out! setup: %s\n", ferry_last_error());
        return 1;
    }
    if (xl) {
        test_xl();
        goto done;
    }
    test_registry();
    const char *deterministic[] = {"encoder_backward", /* without atomics, by construction */
                                   "rmsnorm_backward", /* dweight in strip sums */
                                   "rope_backward"};   /* shared key/value heads summed in one thread */
    for (size_t i = 0; i < sizeof deterministic / sizeof *deterministic; i++)
        if (wanted(deterministic[i]))
            test_deterministic(deterministic[i]);
    if (wanted("convert"))
        test_convert();
    if (wanted("elementwise"))
        test_elementwise(1003, 3); /* pointers not aligned to a vector */
    if (wanted("matmul"))
        test_matmul_unaligned(6, 24, 40, 1); /* cuBLASLt told 2-byte alignment */
    if (wanted("attention")) {
        test_attention(2, 67, 96, 2);   /* HS 48: padded to 64; T not a multiple of 64 */
        test_attention(1, 130, 128, 2); /* HS 64, as GPT-2 */
        test_attention(2, 40, 36, 3);   /* HS 12: scalar loads */
        test_attention(1, 70, 256, 2);  /* HS 128 */
        test_attention(1, 200, 128, 2); /* HS 64, 64-key tiles crossing 128-query blocks */
    }
    if (wanted("classifier")) {
        test_classifier(37, 64, 1000, 1024, 16, true, 1.0f); /* with ignored (negative) targets */
        if (act == FERRY_DTYPE_F16) {
            test_classifier(37, 64, 1000, 1024, 16, true, 1024.0f); /* a loss scale's grad_scale */
            test_classifier_overflow();
        }
    }
    if (wanted("adamw"))
        test_adamw();
    if (wanted("sumsq"))
        test_sumsq();
done:
    ops_shutdown(be);
    backend_free(be, ws);
    backend_stream_destroy(st);
    backend_close(be);
    return tap_done();
}
