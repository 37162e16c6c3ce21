/* Kernel lab: GELU (tanh form), forward and the accumulating backward.
 * Reference: hostop_gelu_*; production: ops_gelu_* (backend/ops/gelu.cu: 8
 * elements per 16-byte access, a grid-stride loop). Forward variant 1
 * (dev/kernels/gelu_variants.cu) is the plain kernel, one element per
 * thread: the distance between the two is what the vector accesses buy
 * (bf16 runs only). */
#include "dev/kernels/lab.h"

#include <stdio.h>
#include <stdlib.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"

typedef struct gelu {
    size_t n;
    void *out, *inp, *dout, *dinp;
} gelu;

static ferry_status production_forward(lab *L, void *out, const void *inp, size_t n)
{
    return ops_gelu_forward(L->s, out, inp, n);
}

static ferry_status variant1_forward(lab *L, void *out, const void *inp, size_t n)
{
    return lab_gelu_forward1(L->stream, out, inp, n);
}

/* The variants this run's storage type has: variant 1 is bf16's only. */
static int variant_count(const lab *L) { return L->act == FERRY_DTYPE_BF16 ? 2 : 1; }

static const struct {
    const char *name;
    ferry_status (*forward)(lab *L, void *out, const void *inp, size_t n);
} variants[] = {
    {"0 production", production_forward},
    {"1 one element per thread", variant1_forward},
};

static int current; /* the variant being timed */

static void forward(lab *L, void *p)
{
    gelu *k = p;
    lab_must(variants[current].forward(L, k->out, k->inp, k->n), variants[current].name);
}

static void backward(lab *L, void *p)
{
    gelu *k = p;
    lab_must(ops_gelu_backward(L->s, k->dinp, k->inp, k->dout, k->n), "gelu bwd");
}

static void check(lab *L)
{
    const size_t n = 10001; /* not a multiple of 8: the tail path too */
    float *x = lab_rand(L, n, -4, 4), *dy = lab_rand(L, n, -1, 1), *dx = lab_rand(L, n, -1, 1);
    float *out = malloc(n * 4);
    gelu k = {n, lab_alloc(L, n * 2), lab_up_16(L, x, n), lab_up_16(L, dy, n), lab_up_16(L, dx, n)};
    hostop_gelu_forward(out, x, n);
    for (current = 0; current < variant_count(L); current++) {
        lab_must(backend_memset_async(L->s, k.out, 0xff, n * 2), "poison"); /* NaN until written */
        forward(L, &k);
        lab_check_16(L, "gelu_forward", variants[current].name, k.out, out, n, 1e-2);
    }
    hostop_gelu_backward(dx, x, dy, n);
    backward(L, &k);
    lab_check_16(L, "gelu_backward", "0 production", k.dinp, dx, n, 1e-2);
    LAB_FREE(L, k.out, k.inp, k.dout, k.dinp);
    free(x), free(dy), free(dx), free(out);
}

void lab_gelu(lab *L)
{
    check(L);
    const size_t n = (size_t)L->z.B * L->z.T * 4 * L->z.C; /* the MLP's hidden activations */
    gelu k = {n, lab_zeros(L, n * 2), lab_random_16(L, n, 4), lab_random_16(L, n, 1), lab_zeros(L, n * 2)};
    for (current = 0; current < variant_count(L); current++)
        lab_time(L, "gelu_forward", variants[current].name, forward, &k, 2.0 * n * 2, LAB_BYTES);
    lab_time(L, "gelu_backward", "0 production", backward, &k, 4.0 * n * 2, LAB_BYTES);
    LAB_FREE(L, k.out, k.inp, k.dout, k.dinp);
}
