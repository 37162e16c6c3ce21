/* Kernel lab: the residual add, out = a + b. Reference:
 * hostop_residual_forward; production: ops_residual_forward
 * (backend/ops/residual.cu). No variants yet. */
#include "dev/kernels/lab.h"

#include <stdlib.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"

typedef struct res {
    size_t n;
    void *out, *a, *b;
} res;

static void forward(lab *L, void *p)
{
    res *k = p;
    lab_must(ops_residual_forward(L->s, k->out, k->a, k->b, k->n), "residual");
}

void lab_residual(lab *L)
{
    const size_t m = 10001;
    float *a = lab_rand(L, m, -4, 4), *b = lab_rand(L, m, -4, 4), *want = malloc(m * 4);
    res c = {m, lab_alloc(L, m * 2), lab_up_16(L, a, m), lab_up_16(L, b, m)};
    hostop_residual_forward(want, a, b, m);
    forward(L, &c);
    lab_check_16(L, "residual_forward", "0 production", c.out, want, m, 1e-2);
    LAB_FREE(L, c.out, c.a, c.b);
    free(a), free(b), free(want);

    const size_t n = (size_t)L->z.B * L->z.T * L->z.C;
    res k = {n, lab_zeros(L, n * 2), lab_random_16(L, n, 1), lab_random_16(L, n, 1)};
    lab_time(L, "residual_forward", "0 production", forward, &k, 3.0 * n * 2, LAB_BYTES);
    LAB_FREE(L, k.out, k.a, k.b);
}
