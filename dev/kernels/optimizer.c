/* Kernel lab: what the engine runs on the device besides the model — the
 * fp32 -> 16-bit conversion of the weights, the device AdamW (offload none)
 * and the gradient sum of squares for the global norm — at the size of one
 * GPT-2 MLP weight (4 C^2). References: round to nearest even
 * (opcheck_bf16_bits), torch's AdamW in double (opcheck_adamw_ref), a sum
 * in double; production: ops_convert_from_f32, ops_adamw, ops_sumsq
 * (backend/ops/convert.cu, kernels/adamw_device.cu). No variants yet. */
#include "dev/kernels/lab.h"

#include <stdlib.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_cuda.h"

typedef struct opt {
    size_t n;
    float *master, *m, *v;
    void *grad, *param;
    double *sumsq;
    void *scratch;
} opt;

static void convert(lab *L, void *p)
{
    opt *k = p;
    lab_must(ops_convert_from_f32(L->s, k->param, k->master, k->n), "convert");
}

static void adamw(lab *L, void *p)
{
    opt *k = p;
    const adamw_hparams hp = {1e-4, 0.9, 0.95, 1e-8, 0.1};
    lab_must(ops_adamw(L->s, k->master, k->m, k->v, k->grad, L->act, k->param, k->n, &hp, 10, 1.0f),
             "adamw");
}

static void sumsq(lab *L, void *p)
{
    opt *k = p;
    lab_must(ops_sumsq(L->s, k->grad, L->act, k->n, k->sumsq, k->scratch), "sumsq");
}

static opt open_opt(lab *L, const float *p, const float *g, size_t n)
{
    opt k = {n, lab_up(L, p, n * 4), lab_zeros(L, n * 4), lab_zeros(L, n * 4), lab_up_16(L, g, n),
             lab_alloc(L, n * 2), lab_zeros(L, 8), lab_alloc(L, ops_sumsq_scratch_bytes())};
    return k;
}

static void close_opt(lab *L, opt *k) { LAB_FREE(L, k->master, k->m, k->v, k->grad, k->param, k->sumsq, k->scratch); }

static void check(lab *L)
{
    const size_t n = 10007;
    float *p = lab_rand(L, n, -1, 1), *g = lab_rand(L, n, -0.5f, 0.5f), *want = malloc(n * 4);
    double *rp = malloc(n * 8), *rm = calloc(n, 8), *rv = calloc(n, 8), sum = 0;
    opt k = open_opt(L, p, g, n);
    convert(L, &k);
    lab_check_16(L, "convert_from_f32 (exact)", "0 production", k.param, p, n, 0); /* p is exact in both types */
    for (size_t i = 0; i < n; i++)
        rp[i] = p[i], sum += (double)g[i] * g[i];
    opcheck_adamw_ref(rp, rm, rv, g, n, 1e-4, 0.9, 0.95, 1e-8, 0.1, 10, 1.0);
    adamw(L, &k);
    for (size_t i = 0; i < n; i++)
        want[i] = (float)rp[i];
    lab_check_f32(L, "adamw (fp32 master)", "0 production", k.master, want, n, 1e-6);
    sumsq(L, &k);
    double dev = 0;
    lab_must(backend_memcpy_async(L->s, &dev, k.sumsq, 8, BACKEND_COPY_D2H), "download");
    lab_must(backend_stream_synchronize(L->s), "sumsq");
    float gotf = (float)dev, wantf = (float)sum;
    lab_check(L, "sumsq (fp64)", "0 production", &gotf, &wantf, 1, 1e-6);
    close_opt(L, &k);
    free(p), free(g), free(want), free(rp), free(rm), free(rv);
}

void lab_optimizer(lab *L)
{
    check(L);
    const size_t n = (size_t)4 * L->z.C * L->z.C;
    float *p = lab_rand(L, n, -0.1f, 0.1f), *g = lab_rand(L, n, -0.01f, 0.01f);
    opt k = open_opt(L, p, g, n);
    lab_time(L, "convert_from_f32 (4C^2)", "0 production", convert, &k, 6.0 * n, LAB_BYTES);
    /* read and write master, m, v; read the 16-bit gradient; write the 16-bit copy */
    lab_time(L, "adamw (device, 4C^2)", "0 production", adamw, &k, 28.0 * n, LAB_BYTES);
    lab_time(L, "sumsq (4C^2)", "0 production", sumsq, &k, 2.0 * n, LAB_BYTES);
    close_opt(L, &k);
    free(p), free(g);
}
