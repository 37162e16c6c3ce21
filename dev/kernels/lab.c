/* The kernel lab: every cuda op (and each numbered variant of it) checked
 * against its host version on small random inputs, then timed with CUDA
 * events (median of several runs after warm-up) at GPT-2 XL sizes (B*T = 8 x
 * 1024 tokens, C = 1600, NH = 25, V = 50257 padded to 50304) and printed as
 * TFLOP/s or GB/s beside the ceiling measured in the same run: a cuBLASLt
 * matmul (8192^3) of the storage type and a device-to-device copy. Owns the
 * harness of lab.h and main; the ops live in one file each beside it.
 *
 *   kernel_lab [--quick | --check] [--dtype bf16|f16] [--op NAME]...
 *     --quick  B*T = 2 x 256, C = 768, NH = 12 (a smoke run)
 *     --check  the checks only, no ceilings: each timed op runs once,
 *              untimed, at B*T = 64, C = 128 (what the simulated device,
 *              dev/cudasim, runs in CI)
 *     --dtype  the storage type (default: the card's, bf16 from sm_80)
 *     --op     only this op family (registry: every op of the registry
 *              checked over dev/ops/op_shapes.h; encoder, layernorm, matmul,
 *              gelu, residual, attention, classifier, optimizer); repeatable
 *   FERRY_TEST_SEED sets the seed (printed either way).
 *
 * Exit status: 0 when every check passed; 1 when one failed or the setup
 * did; 77 when there is no GPU (no driver, or no device: the cuda backend
 * reports FERRY_ERR_UNSUPPORTED); 2 on a bad command line. */
#include "common/fileio.h"
#include "dev/kernels/lab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/ops/opdrive.h"
#include "backend/ops/ops.h"

void lab_must(ferry_status st, const char *what)
{
    if (st == FERRY_OK)
        return;
    fprintf(stderr, "kernel_lab: %s: %s\n", what, ferry_last_error());
    exit(1);
}

void *lab_alloc(lab *L, size_t bytes)
{
    void *p = NULL;
    lab_must(backend_alloc(L->be, bytes ? bytes : 1, &p), "device allocation");
    return p;
}

void *lab_zeros(lab *L, size_t bytes)
{
    void *p = lab_alloc(L, bytes);
    lab_must(backend_memset_async(L->s, p, 0, bytes), "device memset");
    return p;
}

float *lab_rand(lab *L, size_t n, float lo, float hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x)
        lab_must(err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory for %zu floats", n), "host array");
    opcheck_rand_fill(&L->rng, x, n, lo, hi);
    return x;
}

/* Written in 32M-element pieces so the host copy stays small. */
void *lab_random_16(lab *L, size_t n, float scale)
{
    uint16_t *d = lab_alloc(L, n * 2);
    const size_t piece = (size_t)32 << 20;
    uint16_t *h = malloc((n < piece ? n : piece) * 2 + 2);
    if (!h)
        lab_must(err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory for a staging piece"), "random data");
    for (size_t at = 0; at < n; at += piece) {
        size_t m = n - at < piece ? n - at : piece;
        for (size_t i = 0; i < m; i++) {
            float u = (float)(opcheck_rand_next(&L->rng) >> 40) * 0x1p-23f - 1.0f; /* [-1, 1) */
            h[i] = L->act == FERRY_DTYPE_F16 ? dtype_f32_to_f16(scale * u) : opcheck_bf16_bits(scale * u);
        }
        lab_must(backend_memcpy_async(L->s, d + at, h, m * 2, BACKEND_COPY_H2D), "upload");
        lab_must(backend_stream_synchronize(L->s), "upload");
    }
    free(h);
    return d;
}

void *lab_up(lab *L, const void *src, size_t bytes)
{
    void *d = NULL;
    lab_must(opcheck_upload(L->be, L->s, src, bytes, &d), "upload");
    return d;
}

void *lab_up_16(lab *L, const float *x, size_t n)
{
    void *d = NULL;
    lab_must(opcheck_upload_as(L->be, L->s, x, n, L->act, &d), "16-bit upload");
    return d;
}

static float *host_floats(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x)
        lab_must(err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory for %zu floats", n), "download");
    return x;
}

float *lab_down_16(lab *L, const void *d, size_t n)
{
    float *x = host_floats(n);
    lab_must(opcheck_download_as(L->s, d, n, L->act, x), "16-bit download");
    return x;
}

float *lab_down_f32(lab *L, const void *d, size_t n)
{
    float *x = host_floats(n);
    lab_must(opcheck_download_f32(L->s, d, n, x), "download");
    return x;
}

void lab_free_list(lab *L, void *const *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        backend_free(L->be, bufs[i]);
}

int32_t *lab_tokens(lab *L, size_t n, int V)
{
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t)
        lab_must(err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory for %zu tokens", n), "tokens");
    for (size_t i = 0; i < n; i++)
        t[i] = (int32_t)(opcheck_rand_next(&L->rng) % (uint64_t)V);
    return t;
}

bool lab_check(lab *L, const char *op, const char *variant, const float *got, const float *want,
               size_t n, double tol)
{
    opcheck_err e = opcheck_compare(got, want, n);
    bool ok = e.rel <= tol;
    L->checks++;
    L->failures += !ok;
    printf("check  %-30s %-26s rel err %.2e (tol %.0e), max abs %.2e  %s\n", op, variant, e.rel, tol,
           e.max_abs, ok ? "PASS" : "FAIL");
    fflush(stdout);
    return ok;
}

static bool check_device(lab *L, const char *op, const char *variant, const void *dev, bool half,
                         const float *want, size_t n, double tol)
{
    float *got = half ? lab_down_16(L, dev, n) : lab_down_f32(L, dev, n);
    bool ok = lab_check(L, op, variant, got, want, n, tol);
    free(got);
    return ok;
}

bool lab_check_16(lab *L, const char *op, const char *variant, const void *dev, const float *want, size_t n,
                    double tol)
{
    return check_device(L, op, variant, dev, true, want, n, L->act == FERRY_DTYPE_F16 ? tol / 5 : tol);
}

bool lab_check_f32(lab *L, const char *op, const char *variant, const void *dev, const float *want, size_t n,
                   double tol)
{
    return check_device(L, op, variant, dev, false, want, n, tol);
}

bool lab_bf16_variant(lab *L, const char *op, const char *variant)
{
    if (L->act == FERRY_DTYPE_BF16)
        return true;
    printf("skip   %-30s %-26s written for bf16 storage only, this run stores %s\n", op, variant, dtype_name(L->act));
    fflush(stdout);
    return false;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double median_ms(lab *L, lab_fn fn, void *ctx)
{
    float t[64];
    int reps = L->reps < 64 ? L->reps : 64;
    for (int i = 0; i < 2; i++)
        fn(L, ctx);
    for (int i = 0; i < reps; i++) {
        lab_must(backend_event_record(L->ev0, L->s), "event");
        fn(L, ctx);
        lab_must(backend_event_record(L->ev1, L->s), "event");
        lab_must(backend_event_synchronize(L->ev1), "event sync");
        lab_must(backend_event_elapsed_ms(L->ev0, L->ev1, &t[i]), "elapsed time");
    }
    lab_must(backend_stream_synchronize(L->s), "the timed op");
    qsort(t, (size_t)reps, sizeof t[0], cmp_float);
    return t[reps / 2];
}

double lab_time(lab *L, const char *op, const char *variant, lab_fn fn, void *ctx, double work,
                lab_unit unit)
{
    if (L->check_only) {
        fn(L, ctx);
        lab_must(backend_stream_synchronize(L->s), op);
        printf("ran    %-30s %-26s (not timed: --check)\n", op, variant);
        fflush(stdout);
        return 0;
    }
    double ms = median_ms(L, fn, ctx);
    double rate = work / (ms * 1e-3) / (unit == LAB_FLOPS ? 1e12 : 1e9);
    double ceiling = unit == LAB_FLOPS ? L->tflops : L->gbs;
    printf("time   %-30s %-26s %9.3f ms %8.1f %-6s %5.1f%% of %s\n", op, variant, ms, rate,
           unit == LAB_FLOPS ? "TF/s" : "GB/s", 100.0 * rate / ceiling,
           unit == LAB_FLOPS ? "matmul" : "copy");
    fflush(stdout);
    return ms;
}

/* ---- the ceilings ---- */

typedef struct ceiling_bufs {
    void *a, *c;
    size_t bytes;
} ceiling_bufs;

static void ceiling_matmul(lab *L, void *p)
{
    ceiling_bufs *k = p;
    lab_must(ops_matmul_forward(L->s, k->c, k->a, k->a, NULL, 8192, 8192, 8192), "ceiling matmul");
}

static void ceiling_copy(lab *L, void *p)
{
    ceiling_bufs *k = p;
    lab_must(backend_memcpy_async(L->s, k->c, k->a, k->bytes, BACKEND_COPY_D2D), "ceiling copy");
}

static void measure_ceilings(lab *L)
{
    ceiling_bufs k = {lab_random_16(L, (size_t)8192 * 8192, 0.1f), NULL, (size_t)8192 * 8192 * 2};
    k.c = lab_zeros(L, k.bytes);
    L->tflops = 2.0 * 8192.0 * 8192.0 * 8192.0 / (median_ms(L, ceiling_matmul, &k) * 1e-3) / 1e12;
    L->gbs = 2.0 * (double)k.bytes / (median_ms(L, ceiling_copy, &k) * 1e-3) / 1e9;
    printf("ceilings: cuBLASLt %s matmul 8192^3 %.1f TFLOP/s; device copy %.0f GB/s (read + write)\n",
           dtype_name(L->act), L->tflops, L->gbs);
    fflush(stdout);
    backend_free(L->be, k.a);
    backend_free(L->be, k.c);
}

/* ---- every op of the registry ---- */

typedef struct registry_ctx {
    lab *L;
    const op_shape *shape;
} registry_ctx;

static void registry_report(void *p, const opdrive_result *r)
{
    registry_ctx *c = p;
    double f16 = c->L->act == FERRY_DTYPE_F16 ? 0.2 : 1.0;
    double tol = op_shape_tol(c->shape, r->tensor, 1e-2 * f16, 2e-2 * f16);
    bool ok = r->err.rel <= tol;
    c->L->checks++;
    c->L->failures += !ok;
    printf("check  %-30s %-26s rel err %.2e (tol %.0e), max abs %.2e  %s\n", r->op, r->tensor, r->err.rel, tol,
           r->err.max_abs, ok ? "PASS" : "FAIL");
    fflush(stdout);
}

/* Every op of the registry (backend/ops/op_list.h) over the shape table
 * (dev/ops/op_shapes.h): the production kernel, through its front, against
 * the host backend storing the same type, from the same inputs. The op
 * files below time them and their variants. */
static void lab_registry(lab *L)
{
    static opinfo all[OPINFO_OPS];
    opinfo_all(all);
    backend *host = NULL;
    backend_stream *hs = NULL;
    lab_must(backend_open(FERRY_BACKEND_HOST, &host), "opening the host backend");
    lab_must(backend_set_act_dtype(host, L->act), "the host backend's storage type");
    lab_must(backend_stream_create(host, "host", &hs), "host stream");
    lab_must(ops_init(host, NULL, 0), "host ops_init");
    for (size_t k = 0; k < OP_SHAPES; k++) {
        registry_ctx c = {L, &op_shapes[k]};
        ferry_status st = opdrive_compare(all, &op_shapes[k], L->be, L->s, host, hs, L->rng + k, registry_report, &c);
        if (st != FERRY_OK) {
            L->checks++;
            L->failures++;
            printf("check  %-30s %-26s FAIL: %s\n", op_shapes[k].op, op_shapes[k].sizes, ferry_last_error());
        }
    }
    backend_stream_destroy(hs);
    backend_close(host);
}

/* ---- main ---- */

static const struct {
    const char *name;
    void (*run)(lab *L);
} ops[] = {
    {"registry", lab_registry},   {"encoder", lab_encoder},     {"layernorm", lab_layernorm},   {"matmul", lab_matmul},
    {"gelu", lab_gelu},           {"residual", lab_residual},     {"attention", lab_attention},
    {"classifier", lab_classifier}, {"optimizer", lab_optimizer},
};
#define N_OPS (sizeof ops / sizeof ops[0])

static int usage(void)
{
    fprintf(stderr, "usage: kernel_lab [--quick | --check] [--dtype bf16|f16] [--op NAME]...\n  NAME:");
    for (size_t i = 0; i < N_OPS; i++)
        fprintf(stderr, " %s", ops[i].name);
    fprintf(stderr, "\n");
    return 2;
}

/* Marks the ops named by --op in `on` (all when none is named); false on a bad argument. */
/* mode: 0 full, 1 --quick, 2 --check. */
static bool parse_args(int argc, char **argv, int *mode, ferry_dtype *act, bool on[N_OPS])
{
    bool any = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0 || strcmp(argv[i], "--check") == 0) {
            *mode = argv[i][2] == 'q' ? 1 : 2;
            continue;
        }
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            if (ferry_dtype_parse(argv[++i], act) != FERRY_OK || (*act != FERRY_DTYPE_BF16 && *act != FERRY_DTYPE_F16))
                return false;
            continue;
        }
        if (strcmp(argv[i], "--op") != 0 || i + 1 >= argc)
            return false;
        size_t k = 0;
        while (k < N_OPS && strcmp(ops[k].name, argv[i + 1]) != 0)
            k++;
        if (k == N_OPS)
            return false;
        on[k] = any = true;
        i++;
    }
    for (size_t k = 0; !any && k < N_OPS; k++)
        on[k] = true;
    return true;
}

static int open_lab(lab *L, int mode, ferry_dtype act)
{
    ferry_status st = backend_open(FERRY_BACKEND_CUDA, &L->be);
    if (st == FERRY_ERR_UNSUPPORTED) {
        fprintf(stderr, "kernel_lab: no GPU: %s\n", ferry_last_error());
        return 77;
    }
    lab_must(st, "opening the cuda backend");
    lab_must(backend_set_act_dtype(L->be, act), "the storage type");
    L->act = backend_act_dtype(L->be);
    const size_t ws_bytes = (size_t)64 << 20;
    lab_must(backend_stream_create(L->be, "lab", &L->s), "stream");
    lab_must(backend_event_create_timed(L->be, &L->ev0), "event");
    lab_must(backend_event_create_timed(L->be, &L->ev1), "event");
    lab_must(ops_init(L->be, lab_alloc(L, ws_bytes), ws_bytes), "ops_init");
    L->stream = backend_stream_native(L->s);
    L->z = mode == 2   ? (lab_sizes){1, 64, 128, 2, 1000, 1024, 64}
           : mode == 1 ? (lab_sizes){2, 256, 768, 12, 50257, 50304, 512}
                       : (lab_sizes){8, 1024, 1600, 25, 50257, 50304, 2048};
    L->reps = mode == 1 ? 5 : 9;
    L->check_only = mode == 2;
    L->rng = 0x1ab5eedull;
    if (getenv("FERRY_TEST_SEED"))
        L->rng = strtoull(getenv("FERRY_TEST_SEED"), NULL, 0);
    return 0;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("lab"); /* a full disk or /dev/full on stdout is exit 1 */
    int mode = 0;
    bool on[N_OPS] = {false};
    ferry_dtype act = FERRY_DTYPE_AUTO;
    if (!parse_args(argc, argv, &mode, &act, on))
        return usage();
    lab L;
    memset(&L, 0, sizeof L);
    int rc = open_lab(&L, mode, act);
    if (rc != 0)
        return rc;
    printf("kernel lab on %s; %s storage; seed 0x%llx; timing at B=%d T=%d C=%d NH=%d V=%d (Vp %d), median of %d\n",
           backend_device_name(L.be), dtype_name(L.act), (unsigned long long)L.rng, L.z.B, L.z.T, L.z.C, L.z.NH,
           L.z.V, L.z.Vp, L.reps);
    if (!L.check_only)
        measure_ceilings(&L);
    for (size_t k = 0; k < N_OPS; k++)
        if (on[k])
            ops[k].run(&L);
    if (L.check_only)
        printf("%s: %d of %d checks failed (--check: nothing timed)\n", L.failures ? "FAIL" : "PASS", L.failures,
               L.checks);
    else
        printf("%s: %d of %d checks failed; ceilings matmul %.1f TFLOP/s, copy %.0f GB/s\n",
               L.failures ? "FAIL" : "PASS", L.failures, L.checks, L.tflops, L.gbs);
    ops_shutdown(L.be);
    backend_event_destroy(L.ev0);
    backend_event_destroy(L.ev1);
    backend_stream_destroy(L.s);
    backend_close(L.be); /* frees every buffer */
    return L.failures ? 1 : 0;
}
