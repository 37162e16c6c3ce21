/* The kernel lab: every cuda op checked against its host version on small
 * random inputs (PASS/FAIL with the error), then timed with CUDA events
 * (median of several runs after warm-up) at GPT-2 XL-ish sizes (B*T = 8 x
 * 1024 tokens, C = 1600, NH = 25, V = 50257 padded to 50304) and printed as
 * TFLOP/s or GB/s beside the ceiling measured in the same run: a cuBLASLt
 * bf16 matmul (8192^3) and a device-to-device copy.
 *
 *   kernel_lab [--quick]     --quick: B*T = 2 x 256, C = 768, NH = 12
 *
 * Exit status: 0 when every check passed, 1 when one failed or the setup
 * did; needs a GPU (says so and exits 1 without one). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"
#include "kernels/ops_host.h"
#include "tests/kernels_gpu/gpu_util.h"

static backend *be;
static backend_stream *st;
static backend_event *ev0, *ev1;
static uint64_t rng = 0x1ab5eedull;
static int failures;

static void die(const char *what)
{
    fprintf(stderr, "kernel_lab: %s: %s\n", what, ferry_last_error());
    exit(1);
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (backend_alloc(be, bytes, &p) != FERRY_OK)
        die("device allocation");
    return p;
}

static void must(ferry_status s, const char *what)
{
    if (s != FERRY_OK)
        die(what);
}

/* ---- checks against the host ops ---- */

static void verdict(const char *what, const float *got, const float *want, size_t n, double tol)
{
    gpu_err e = gpu_compare(got, want, n);
    bool ok = e.rel <= tol;
    failures += !ok;
    printf("  %-4s %-34s rel err %.2e (tol %.0e), max abs %.2e\n", ok ? "PASS" : "FAIL", what,
           e.rel, tol, e.max_abs);
}

static void check_all(void)
{
    const int B = 2, T = 96, C = 192, NH = 3, V = 500, Vp = 512, N = B * T;
    const size_t nc = (size_t)N * C;
    printf("checks against the host ops (B=%d T=%d C=%d NH=%d V=%d):\n", B, T, C, NH, V);
    float *x = gpu_rand_array(&rng, nc, -2, 2), *w = gpu_rand_array(&rng, 4 * (size_t)C * C, -.2f, .2f);
    float *b = gpu_rand_array(&rng, 4 * C, -1, 1), *y = gpu_rand_array(&rng, 4 * nc, -1, 1);
    float *ref = malloc(4 * nc * sizeof(float) * 3), *stat = malloc(N * 8);
    void *dx = gpu_upload_bf16(be, st, x, nc), *dw = gpu_upload_bf16(be, st, w, 4 * (size_t)C * C);
    void *db = gpu_upload_bf16(be, st, b, 4 * C), *dy = gpu_upload_bf16(be, st, y, 4 * nc);
    void *dout = dalloc(4 * nc * 2 * 3);
    float *dstat = dalloc(N * 8);
    float *g;

    hostop_matmul_forward(ref, x, w, b, N, C, 4 * C);
    must(ops_matmul_forward(st, dout, dx, dw, db, N, C, 4 * C), "matmul");
    g = gpu_download_bf16(st, dout, 4 * nc);
    verdict("matmul_forward (bias)", g, ref, 4 * nc, 1e-2);
    free(g);

    hostop_layernorm_forward(ref, stat, stat + N, x, w, b, N, C);
    must(ops_layernorm_forward(st, dout, dstat, dstat + N, dx, dw, db, N, C), "layernorm");
    g = gpu_download_bf16(st, dout, nc);
    verdict("layernorm_forward", g, ref, nc, 1e-2);
    free(g);

    hostop_gelu_forward(ref, x, nc);
    must(ops_gelu_forward(st, dout, dx, nc), "gelu");
    g = gpu_download_bf16(st, dout, nc);
    verdict("gelu_forward", g, ref, nc, 1e-2);
    free(g);

    hostop_residual_forward(ref, x, y, nc);
    must(ops_residual_forward(st, dout, dx, dy, nc), "residual");
    g = gpu_download_bf16(st, dout, nc);
    verdict("residual_forward", g, ref, nc, 1e-2);
    free(g);

    /* attention: qkv = y's first 3 nc values */
    float *lse = malloc((size_t)B * NH * T * 4), *dq = calloc(3 * nc, 4);
    void *ddq = dalloc(3 * nc * 2);
    float *dlse = dalloc((size_t)B * NH * T * 4);
    must(backend_memset_async(st, ddq, 0, 3 * nc * 2), "memset");
    if (hostop_attention_forward(ref, lse, y, B, T, C, NH) != FERRY_OK)
        die("host attention");
    must(ops_attention_forward(st, dout, dlse, dy, B, T, C, NH), "attention");
    g = gpu_download_bf16(st, dout, nc);
    verdict("attention_forward", g, ref, nc, 2e-2);
    float *glse = gpu_download_f32(st, dlse, (size_t)B * NH * T);
    if (hostop_attention_backward(dq, x, y, g, glse, B, T, C, NH) != FERRY_OK)
        die("host attention backward");
    must(ops_attention_backward(st, ddq, dx, dy, dout, dlse, B, T, C, NH), "attention bwd");
    free(g);
    g = gpu_download_bf16(st, ddq, 3 * nc);
    verdict("attention_backward", g, dq, 3 * nc, 2e-2);
    free(g), free(glse), free(lse), free(dq);
    backend_free(be, ddq), backend_free(be, dlse);

    /* classifier: wte = w's first Vp x C values */
    int32_t *tgt = malloc(N * 4);
    for (int i = 0; i < N; i++)
        tgt[i] = (int32_t)(gpu_rand_next(&rng) % V);
    void *dtgt = gpu_upload(be, st, tgt, N * 4), *dscr = dalloc(ops_classifier_scratch_bytes(be, 64, Vp, C));
    float *hscr = malloc((size_t)64 * Vp * 4), *dinp = calloc(nc, 4), *dwte = calloc((size_t)Vp * C, 4);
    void *ddinp = dalloc(nc * 2), *ddwte = dalloc((size_t)Vp * C * 2);
    must(backend_memset_async(st, ddinp, 0, nc * 2), "memset");
    must(backend_memset_async(st, ddwte, 0, (size_t)Vp * C * 2), "memset");
    if (hostop_classifier(ref, dinp, dwte, x, w, tgt, 1.0f / N, N, C, V, Vp, hscr, 64) != FERRY_OK)
        die("host classifier");
    must(ops_classifier(st, dstat, ddinp, ddwte, dx, dw, dtgt, 1.0f / N, N, C, V, Vp, dscr, 64),
         "classifier");
    g = gpu_download_f32(st, dstat, N);
    verdict("classifier losses", g, ref, N, 1e-2);
    free(g);
    g = gpu_download_bf16(st, ddwte, (size_t)Vp * C);
    verdict("classifier dwte", g, dwte, (size_t)Vp * C, 2e-2);
    free(g);
    free(tgt), free(hscr), free(dinp), free(dwte);
    backend_free(be, dtgt), backend_free(be, dscr), backend_free(be, ddinp), backend_free(be, ddwte);
    backend_free(be, dx), backend_free(be, dw), backend_free(be, db), backend_free(be, dy);
    backend_free(be, dout), backend_free(be, dstat);
    free(x), free(w), free(b), free(y), free(ref), free(stat);
}

/* ---- timing ---- */

typedef void (*op_fn)(void *ctx);

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of `reps` runs after 2 warm-ups. */
static double time_ms(op_fn fn, void *ctx, int reps)
{
    float t[32];
    if (reps > 32)
        reps = 32;
    for (int i = 0; i < 2; i++)
        fn(ctx);
    for (int i = 0; i < reps; i++) {
        must(backend_event_record(ev0, st), "event");
        fn(ctx);
        must(backend_event_record(ev1, st), "event");
        must(backend_event_synchronize(ev1), "event sync");
        must(backend_event_elapsed_ms(ev0, ev1, &t[i]), "elapsed");
    }
    must(backend_stream_synchronize(st), "op failed");
    qsort(t, reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

typedef struct sizes {
    int B, T, C, NH, V, Vp, chunk;
} sizes;

typedef struct bufs {
    sizes z;
    int32_t *tok;
    void *x, *y, *out, *dout, *dx, *w, *wb, *dw, *dwb, *qkv, *dqkv, *wte, *wpe, *dwte, *dwpe,
        *scratch, *big_a, *big_c;
    float *mean, *rstd, *lse, *losses, *master, *m, *v;
    double *sumsq;
    void *sumsq_scratch;
    size_t copy_bytes;
} bufs;

#define N_ (k->z.B * k->z.T)
static void f_encoder_fwd(void *p) { bufs *k = p; must(ops_encoder_forward(st, k->out, k->tok, k->wte, k->wpe, k->z.B, k->z.T, k->z.C, k->z.V), "encoder"); }
static void f_encoder_bwd(void *p) { bufs *k = p; must(ops_encoder_backward(st, k->dwte, k->dwpe, k->dout, k->tok, k->z.B, k->z.T, k->z.C), "encoder bwd"); }
static void f_ln_fwd(void *p) { bufs *k = p; must(ops_layernorm_forward(st, k->out, k->mean, k->rstd, k->x, k->wb, k->dwb, N_, k->z.C), "ln"); }
static void f_ln_bwd(void *p) { bufs *k = p; must(ops_layernorm_backward(st, k->dx, k->dwb, (uint16_t *)k->dwb + k->z.C, k->dout, k->x, k->wb, k->mean, k->rstd, N_, k->z.C), "ln bwd"); }
static void f_mm_fwd(void *p) { bufs *k = p; must(ops_matmul_forward(st, k->y, k->x, k->w, k->wb, N_, k->z.C, 4 * k->z.C), "matmul"); }
static void f_mm_bwd(void *p) { bufs *k = p; must(ops_matmul_backward(st, k->dx, k->dw, k->dwb, k->y, k->x, k->w, N_, k->z.C, 4 * k->z.C), "matmul bwd"); }
static void f_gelu_fwd(void *p) { bufs *k = p; must(ops_gelu_forward(st, k->out, k->y, (size_t)N_ * k->z.C), "gelu"); }
static void f_gelu_bwd(void *p) { bufs *k = p; must(ops_gelu_backward(st, k->dx, k->x, k->dout, (size_t)N_ * k->z.C), "gelu bwd"); }
static void f_residual(void *p) { bufs *k = p; must(ops_residual_forward(st, k->out, k->x, k->dout, (size_t)N_ * k->z.C), "residual"); }
static void f_attn_fwd(void *p) { bufs *k = p; must(ops_attention_forward(st, k->out, k->lse, k->qkv, k->z.B, k->z.T, k->z.C, k->z.NH), "attention"); }
static void f_attn_bwd(void *p) { bufs *k = p; must(ops_attention_backward(st, k->dqkv, k->dout, k->qkv, k->out, k->lse, k->z.B, k->z.T, k->z.C, k->z.NH), "attention bwd"); }
static void f_cls(void *p) { bufs *k = p; must(ops_classifier(st, k->losses, k->dx, k->dwte, k->x, k->wte, k->tok, 1.0f / N_, N_, k->z.C, k->z.V, k->z.Vp, k->scratch, k->z.chunk), "classifier"); }
static void f_convert(void *p) { bufs *k = p; must(ops_convert_from_f32(st, k->dx, k->master, (size_t)4 * k->z.C * k->z.C), "convert"); }
static void f_adamw(void *p) { bufs *k = p; must(cudaop_adamw(backend_stream_native(st), k->master, k->m, k->v, k->dw, FERRY_DTYPE_BF16, k->w, (size_t)4 * k->z.C * k->z.C, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 1.0f), "adamw"); }
static void f_sumsq(void *p) { bufs *k = p; must(cudaop_sumsq(backend_stream_native(st), k->dw, FERRY_DTYPE_BF16, (size_t)4 * k->z.C * k->z.C, k->sumsq, k->sumsq_scratch), "sumsq"); }
static void f_ceiling_mm(void *p) { bufs *k = p; must(ops_matmul_forward(st, k->big_c, k->big_a, k->big_a, NULL, 8192, 8192, 8192), "ceiling matmul"); }
static void f_ceiling_copy(void *p) { bufs *k = p; must(backend_memcpy_async(st, k->big_c, k->big_a, k->copy_bytes, BACKEND_COPY_D2D), "ceiling copy"); }

/* Random bf16 in [-1, 1) written straight into device memory in 64 MiB pieces. */
static void *dev_random(size_t n, float scale)
{
    void *d = dalloc(n * 2);
    const size_t piece = 32u << 20;
    uint16_t *h = malloc(piece * 2);
    for (size_t at = 0; at < n; at += piece) {
        size_t m = n - at < piece ? n - at : piece;
        for (size_t i = 0; i < m; i++)
            h[i] = gpu_bf16_bits(scale * ((float)(gpu_rand_next(&rng) >> 40) * 0x1p-23f - 1.0f));
        must(backend_memcpy_async(st, (uint16_t *)d + at, h, m * 2, BACKEND_COPY_H2D), "upload");
        must(backend_stream_synchronize(st), "upload");
    }
    free(h);
    return d;
}

static void *dev_zero(size_t bytes)
{
    void *d = dalloc(bytes);
    must(backend_memset_async(st, d, 0, bytes), "memset");
    return d;
}

int main(int argc, char **argv)
{
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    if (backend_open(FERRY_BACKEND_CUDA, &be) != FERRY_OK) {
        fprintf(stderr, "kernel_lab needs a GPU: %s\n", ferry_last_error());
        return 1;
    }
    const size_t ws_bytes = 64u << 20;
    void *ws = NULL;
    must(backend_stream_create(be, "lab", &st), "stream");
    must(backend_event_create(be, &ev0), "event");
    must(backend_event_create(be, &ev1), "event");
    must(backend_alloc(be, ws_bytes, &ws), "workspace");
    must(ops_init(be, ws, ws_bytes), "ops_init");
    printf("kernel lab on %s\n", backend_device_name(be));
    check_all();

    bufs k;
    memset(&k, 0, sizeof k);
    k.z = quick ? (sizes){2, 256, 768, 12, 50257, 50304, 512}
                : (sizes){8, 1024, 1600, 25, 50257, 50304, 2048};
    const int N = k.z.B * k.z.T, C = k.z.C;
    const size_t nc = (size_t)N * C;
    int32_t *tok = malloc(N * 4);
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)(gpu_rand_next(&rng) % (uint64_t)k.z.V);
    k.tok = gpu_upload(be, st, tok, N * 4);
    free(tok);
    k.x = dev_random(4 * nc, 1), k.y = dev_random(4 * nc, 1), k.dout = dev_random(4 * nc, 1);
    k.out = dev_zero(4 * nc * 2), k.dx = dev_zero(4 * nc * 2);
    k.w = dev_random(4 * (size_t)C * C, 0.02f), k.dw = dev_random(4 * (size_t)C * C, 0.01f);
    k.wb = dev_random(4 * C, 1), k.dwb = dev_zero(4 * C * 2);
    k.qkv = dev_random(3 * nc, 1), k.dqkv = dev_zero(3 * nc * 2);
    k.wte = dev_random((size_t)k.z.Vp * C, 0.02f), k.dwte = dev_zero((size_t)k.z.Vp * C * 2);
    k.wpe = dev_random((size_t)k.z.T * C, 0.02f), k.dwpe = dev_zero((size_t)k.z.T * C * 2);
    k.scratch = dalloc(ops_classifier_scratch_bytes(be, k.z.chunk, k.z.Vp, k.z.C));
    k.mean = dev_zero(N * 4), k.rstd = dev_zero(N * 4), k.losses = dev_zero(N * 4);
    k.lse = dev_zero((size_t)k.z.B * k.z.NH * k.z.T * 4);
    k.master = dev_zero(16 * (size_t)C * C), k.m = dev_zero(16 * (size_t)C * C);
    k.v = dev_zero(16 * (size_t)C * C);
    k.sumsq = dev_zero(8), k.sumsq_scratch = dalloc(cudaop_sumsq_scratch_bytes());
    k.big_a = dev_random((size_t)8192 * 8192, 0.1f), k.big_c = dev_zero((size_t)8192 * 8192 * 2);
    k.copy_bytes = (size_t)8192 * 8192 * 2;
    must(backend_stream_synchronize(st), "setup");

    const int reps = quick ? 5 : 9;
    const double mm_ms = time_ms(f_ceiling_mm, &k, reps);
    const double tflops_ceiling = 2.0 * 8192.0 * 8192.0 * 8192.0 / (mm_ms * 1e-3) / 1e12;
    const double copy_ms = time_ms(f_ceiling_copy, &k, reps);
    const double gbs_ceiling = 2.0 * (double)k.copy_bytes / (copy_ms * 1e-3) / 1e9;
    printf("\nceilings: cuBLASLt bf16 8192^3 %.1f TFLOP/s; device copy %.0f GB/s (read + write)\n",
           tflops_ceiling, gbs_ceiling);
    printf("sizes: B=%d T=%d C=%d NH=%d V=%d Vp=%d (classifier chunk %d)\n\n", k.z.B, k.z.T, C,
           k.z.NH, k.z.V, k.z.Vp, k.z.chunk);

    const double hs = (double)C / k.z.NH, BTT = (double)k.z.B * k.z.NH * k.z.T * k.z.T;
    const double attn_fwd_flops = 2.0 * BTT * hs; /* 4 B NH T^2 HS, halved by the mask */
    const double n4 = 4.0 * C * C;
    struct {
        const char *name;
        op_fn fn;
        double work; /* flops or bytes */
        bool flops;
    } rows[] = {
        {"encoder_forward", f_encoder_fwd, 3.0 * nc * 2, false},
        {"encoder_backward", f_encoder_bwd, 3.0 * nc * 2 + 2.0 * k.z.T * C * 2, false},
        {"layernorm_forward", f_ln_fwd, 2.0 * nc * 2, false},
        {"layernorm_backward", f_ln_bwd, 4.0 * nc * 2, false},
        {"matmul_forward C->4C", f_mm_fwd, 2.0 * N * C * 4.0 * C, true},
        {"matmul_backward C->4C", f_mm_bwd, 4.0 * N * C * 4.0 * C, true},
        {"gelu_forward", f_gelu_fwd, 2.0 * nc * 2, false},
        {"gelu_backward", f_gelu_bwd, 4.0 * nc * 2, false},
        {"residual_forward", f_residual, 3.0 * nc * 2, false},
        {"attention_forward", f_attn_fwd, attn_fwd_flops, true},
        {"attention_backward", f_attn_bwd, 2.5 * attn_fwd_flops, true},
        {"classifier fwd+bwd", f_cls, 6.0 * N * C * (double)k.z.Vp, true},
        {"convert_from_f32 (4C^2)", f_convert, 6.0 * n4, false},
        {"adamw (device, 4C^2)", f_adamw, 28.0 * n4, false},
        {"sumsq (4C^2)", f_sumsq, 2.0 * n4, false},
    };
    printf("%-24s %10s %12s %10s\n", "op", "ms", "figure", "of ceiling");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double ms = time_ms(rows[i].fn, &k, reps);
        double fig = rows[i].work / (ms * 1e-3) / (rows[i].flops ? 1e12 : 1e9);
        double ratio = fig / (rows[i].flops ? tflops_ceiling : gbs_ceiling);
        printf("%-24s %10.3f %7.1f %-5s %9.0f%%\n", rows[i].name, ms, fig,
               rows[i].flops ? "TF/s" : "GB/s", 100.0 * ratio);
    }
    printf("\n%s: %d check(s) failed; matmul ceiling %.1f TFLOP/s, copy ceiling %.0f GB/s\n",
           failures ? "FAIL" : "PASS", failures, tflops_ceiling, gbs_ceiling);
    ops_shutdown(be);
    backend_close(be); /* frees every buffer */
    return failures ? 1 : 0;
}
