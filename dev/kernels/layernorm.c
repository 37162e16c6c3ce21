/* Kernel lab: layernorm, forward (with the saved mean and rstd) and the
 * accumulating backward. Reference: hostop_layernorm_*; production:
 * ops_layernorm_* (backend/ops/layernorm.cu: dinp with the row in
 * registers, dweight/dbias in 16-column strips). Backward variants
 * (dev/kernels/reduce_variants.cu, bf16 storage only) built from the
 * previous production pair (measured at 13.4% of copy on the H200), each
 * changing one of its kernels: 1 dinp with its per-thread arrays in
 * registers (the previous kernel's, of run-time length, live in local
 * memory; 25.0%), 2 dweight/dbias with the rows split over LAB_ROW_SLICES
 * blocks per 32 columns (the previous kernel has C / 32 blocks: 50 at C =
 * 1600; 15.8%); 3 the previous pair itself. */
#include "dev/kernels/lab.h"

#include <stdlib.h>
#include <string.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"

typedef struct ln {
    int N, C;
    void *out, *inp, *w, *b, *dout, *dinp, *dw, *db;
    float *mean, *rstd;
} ln;

static void forward(lab *L, void *p)
{
    ln *k = p;
    lab_must(ops_layernorm_forward(L->s, k->out, k->mean, k->rstd, k->inp, k->w, k->b, k->N, k->C), "layernorm");
}

static void backward(lab *L, void *p)
{
    ln *k = p;
    lab_must(ops_layernorm_backward(L->s, k->dinp, k->dw, k->db, k->dout, k->inp, k->w, k->mean, k->rstd,
                                    k->N, k->C),
             "layernorm bwd");
}

static void check(lab *L)
{
    const int N = 131, C = 96;
    const size_t n = (size_t)N * C;
    float *inp = lab_rand(L, n, -2, 3), *w = lab_rand(L, C, 0.5f, 1.5f), *b = lab_rand(L, C, -0.5f, 0.5f);
    float *dout = lab_rand(L, n, -1, 1), *dinp = lab_rand(L, n, -1, 1);
    float *dw = lab_rand(L, C, -1, 1), *db = lab_rand(L, C, -1, 1);
    float *out = malloc(n * 4), *stat = malloc((size_t)N * 8);
    ln k = {N, C, lab_alloc(L, n * 2), lab_up_16(L, inp, n), lab_up_16(L, w, C), lab_up_16(L, b, C),
            lab_up_16(L, dout, n), lab_up_16(L, dinp, n), lab_up_16(L, dw, C), lab_up_16(L, db, C),
            lab_alloc(L, (size_t)N * 4), lab_alloc(L, (size_t)N * 4)};
    hostop_layernorm_forward(out, stat, stat + N, inp, w, b, N, C);
    forward(L, &k);
    lab_check_16(L, "layernorm_forward", "0 production", k.out, out, n, 1e-2);
    hostop_layernorm_backward(dinp, dw, db, dout, inp, w, stat, stat + N, N, C);
    backward(L, &k);
    lab_check_16(L, "layernorm_backward dinp", "0 production", k.dinp, dinp, n, 1e-2);
    lab_check_16(L, "layernorm_backward dweight", "0 production", k.dw, dw, C, 1e-2);
    LAB_FREE(L, k.out, k.inp, k.w, k.b, k.dout, k.dinp, k.dw, k.db, k.mean, k.rstd);
    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out), free(stat);
}

static const struct {
    const char *name;
    int dinp, dparams;
} variants[] = {{"1 dinp in registers", 1, 0}, {"2 dparams row slices", 0, 1}, {"3 previous production", 0, 0}};

typedef struct ln_variant {
    ln *k;
    int v;
    void *scratch;
} ln_variant;

static void backward_variant(lab *L, void *p)
{
    ln_variant *a = p;
    ln *k = a->k;
    lab_must(lab_layernorm_backward_v(L->stream, variants[a->v].dinp, variants[a->v].dparams, k->dinp, k->dw, k->db,
                                      k->dout, k->inp, k->w, k->mean, k->rstd, k->N, k->C, a->scratch),
             variants[a->v].name);
}

static void check_variants(lab *L)
{
    const int N = 301, C = 96; /* N over several row slices, not a multiple of 8 rows */
    const size_t n = (size_t)N * C;
    float *inp = lab_rand(L, n, -2, 3), *w = lab_rand(L, C, 0.5f, 1.5f), *b = lab_rand(L, C, -0.5f, 0.5f);
    float *dout = lab_rand(L, n, -1, 1), *dinp = lab_rand(L, n, -1, 1);
    float *dw = lab_rand(L, C, -1, 1), *db = lab_rand(L, C, -1, 1);
    float *out = malloc(n * 4), *stat = malloc((size_t)N * 8);
    float *rdinp = malloc(n * 4), *rdw = malloc((size_t)C * 4), *rdb = malloc((size_t)C * 4);
    memcpy(rdinp, dinp, n * 4), memcpy(rdw, dw, (size_t)C * 4), memcpy(rdb, db, (size_t)C * 4);
    hostop_layernorm_forward(out, stat, stat + N, inp, w, b, N, C);
    hostop_layernorm_backward(rdinp, rdw, rdb, dout, inp, w, stat, stat + N, N, C);
    void *scratch = lab_alloc(L, (size_t)LAB_ROW_SLICES * C * 8);
    for (int v = 0; v < (int)(sizeof variants / sizeof variants[0]); v++) {
        if (!lab_bf16_variant(L, "layernorm_backward", variants[v].name))
            continue;
        ln k = {N, C, lab_alloc(L, n * 2), lab_up_16(L, inp, n), lab_up_16(L, w, C), lab_up_16(L, b, C),
                lab_up_16(L, dout, n), lab_up_16(L, dinp, n), lab_up_16(L, dw, C), lab_up_16(L, db, C),
                lab_alloc(L, (size_t)N * 4), lab_alloc(L, (size_t)N * 4)};
        forward(L, &k); /* the device's own mean and rstd */
        ln_variant a = {&k, v, scratch};
        backward_variant(L, &a);
        lab_check_16(L, "layernorm_backward dinp", variants[v].name, k.dinp, rdinp, n, 1e-2);
        lab_check_16(L, "layernorm_backward dweight", variants[v].name, k.dw, rdw, C, 1e-2);
        lab_check_16(L, "layernorm_backward dbias", variants[v].name, k.db, rdb, C, 1e-2);
        LAB_FREE(L, k.out, k.inp, k.w, k.b, k.dout, k.dinp, k.dw, k.db, k.mean, k.rstd);
    }
    LAB_FREE(L, scratch);
    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out), free(stat);
    free(rdinp), free(rdw), free(rdb);
}

void lab_layernorm(lab *L)
{
    check(L);
    check_variants(L);
    const int N = L->z.B * L->z.T, C = L->z.C;
    const size_t nc = (size_t)N * C;
    ln k = {N, C, lab_zeros(L, nc * 2), lab_random_16(L, nc, 1), lab_random_16(L, C, 1),
            lab_random_16(L, C, 1), lab_random_16(L, nc, 1), lab_zeros(L, nc * 2), lab_zeros(L, (size_t)C * 2),
            lab_zeros(L, (size_t)C * 2), lab_zeros(L, (size_t)N * 4), lab_zeros(L, (size_t)N * 4)};
    forward(L, &k); /* the statistics the backward reads */
    lab_time(L, "layernorm_forward", "0 production", forward, &k, 2.0 * nc * 2, LAB_BYTES);
    /* bytes: read inp, dout and dinp, write dinp */
    lab_time(L, "layernorm_backward", "0 production", backward, &k, 4.0 * nc * 2, LAB_BYTES);
    void *scratch = lab_alloc(L, (size_t)LAB_ROW_SLICES * C * 8);
    for (int v = 0; v < (int)(sizeof variants / sizeof variants[0]); v++) {
        if (!lab_bf16_variant(L, "layernorm_backward", variants[v].name))
            continue;
        ln_variant a = {&k, v, scratch};
        lab_time(L, "layernorm_backward", variants[v].name, backward_variant, &a, 4.0 * nc * 2, LAB_BYTES);
    }
    LAB_FREE(L, scratch);
    LAB_FREE(L, k.out, k.inp, k.w, k.b, k.dout, k.dinp, k.dw, k.db, k.mean, k.rstd);
}
