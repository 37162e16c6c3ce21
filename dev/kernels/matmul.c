/* Kernel lab: the linear layer, out = inp @ weight^T + bias and its
 * accumulating backward, at the MLP's C -> 4C shape. Reference:
 * hostop_matmul_* (OpenBLAS); production: ops_matmul_* (cuBLASLt,
 * backend/ops/matmul.cu). Variants of dbias, the column sum of dout
 * (dev/kernels/reduce_variants.cu; 1 and 2 for bf16 storage only): 0
 * production (a block per 16-column strip: 100 blocks at C = 1600), 1 the
 * previous production's 32-column blocks with the rows split over
 * LAB_ROW_SLICES blocks too, 2 the previous production (a block per 32
 * columns: 50 blocks at C = 1600), measured at 34.7% of copy on the H200. */
#include "dev/kernels/lab.h"

#include <stdlib.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"

typedef struct mm {
    int N, C, OC;
    void *out, *inp, *w, *b, *dout, *dinp, *dw, *db;
} mm;

static void forward(lab *L, void *p)
{
    mm *k = p;
    lab_must(ops_matmul_forward(L->s, k->out, k->inp, k->w, k->b, k->N, k->C, k->OC), "matmul");
}

static void backward(lab *L, void *p)
{
    mm *k = p;
    lab_must(ops_matmul_backward(L->s, k->dinp, k->dw, k->db, k->dout, k->inp, k->w, k->N, k->C, k->OC),
             "matmul bwd");
}

static void check(lab *L)
{
    const int N = 134, C = 96, OC = 200;
    float *inp = lab_rand(L, (size_t)N * C, -1, 1), *w = lab_rand(L, (size_t)OC * C, -0.2f, 0.2f);
    float *b = lab_rand(L, OC, -1, 1), *dout = lab_rand(L, (size_t)N * OC, -1, 1);
    float *dinp = lab_rand(L, (size_t)N * C, -1, 1), *dw = lab_rand(L, (size_t)OC * C, -1, 1);
    float *db = lab_rand(L, OC, -1, 1), *out = malloc((size_t)N * OC * 4);
    mm k = {N, C, OC, lab_alloc(L, (size_t)N * OC * 2), lab_up_16(L, inp, (size_t)N * C),
            lab_up_16(L, w, (size_t)OC * C), lab_up_16(L, b, OC), lab_up_16(L, dout, (size_t)N * OC),
            lab_up_16(L, dinp, (size_t)N * C), lab_up_16(L, dw, (size_t)OC * C), lab_up_16(L, db, OC)};
    hostop_matmul_forward(out, inp, w, b, N, C, OC);
    forward(L, &k);
    lab_check_16(L, "matmul_forward (bias)", "0 production", k.out, out, (size_t)N * OC, 1e-2);
    hostop_matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    backward(L, &k);
    lab_check_16(L, "matmul_backward dinp", "0 production", k.dinp, dinp, (size_t)N * C, 1e-2);
    lab_check_16(L, "matmul_backward dweight", "0 production", k.dw, dw, (size_t)OC * C, 1e-2);
    LAB_FREE(L, k.out, k.inp, k.w, k.b, k.dout, k.dinp, k.dw, k.db);
    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
}

static const char *const colsum_names[] = {"0 production", "1 row slices", "2 32-column blocks"};

typedef struct colsum_args {
    int rows, cols, variant;
    void *dst, *src, *scratch;
} colsum_args;

static void colsum(lab *L, void *p)
{
    colsum_args *k = p;
    lab_must(lab_colsum_add(L->stream, k->variant, k->dst, k->src, k->rows, k->cols, k->scratch), "column sum");
}

/* db += the column sums of dout, against double precision. */
static void check_colsum(lab *L)
{
    const int rows = 300, cols = 200;
    float *src = lab_rand(L, (size_t)rows * cols, -1, 1), *db = lab_rand(L, cols, -1, 1), *want = malloc(cols * 4);
    for (int c = 0; c < cols; c++) {
        double s = db[c];
        for (int r = 0; r < rows; r++)
            s += src[(size_t)r * cols + c];
        want[c] = (float)s;
    }
    void *d_src = lab_up_16(L, src, (size_t)rows * cols), *scratch = lab_alloc(L, (size_t)LAB_ROW_SLICES * cols * 4);
    for (int v = 0; v < 3; v++) {
        if (!lab_bf16_variant(L, "matmul_backward dbias", colsum_names[v]))
            continue;
        colsum_args k = {rows, cols, v, lab_up_16(L, db, cols), d_src, scratch};
        colsum(L, &k);
        lab_check_16(L, "matmul_backward dbias", colsum_names[v], k.dst, want, cols, 1e-2);
        LAB_FREE(L, k.dst);
    }
    LAB_FREE(L, d_src, scratch);
    free(src), free(db), free(want);
}

void lab_matmul(lab *L)
{
    check(L);
    check_colsum(L);
    const int N = L->z.B * L->z.T, C = L->z.C, OC = 4 * C;
    const size_t nc = (size_t)N * C, no = (size_t)N * OC, w = (size_t)OC * C;
    mm k = {N, C, OC, lab_zeros(L, no * 2), lab_random_16(L, nc, 1), lab_random_16(L, w, 0.02f),
            lab_random_16(L, OC, 1), lab_random_16(L, no, 1), lab_zeros(L, nc * 2), lab_zeros(L, w * 2),
            lab_zeros(L, (size_t)OC * 2)};
    lab_time(L, "matmul_forward C->4C", "0 production", forward, &k, 2.0 * N * C * OC, LAB_FLOPS);
    lab_time(L, "matmul_backward C->4C", "0 production", backward, &k, 4.0 * N * C * OC, LAB_FLOPS);
    /* dbias of the MLP's projection back to C: N x C read, C written */
    void *scratch = lab_alloc(L, (size_t)LAB_ROW_SLICES * C * 4);
    for (int v = 0; v < 3; v++) {
        if (!lab_bf16_variant(L, "matmul dbias (N x C column sum)", colsum_names[v]))
            continue;
        colsum_args c = {N, C, v, k.db, k.dout, scratch};
        lab_time(L, "matmul dbias (N x C column sum)", colsum_names[v], colsum, &c, (double)nc * 2, LAB_BYTES);
    }
    LAB_FREE(L, scratch);
    LAB_FREE(L, k.out, k.inp, k.w, k.b, k.dout, k.dinp, k.dw, k.db);
}
