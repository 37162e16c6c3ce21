/* Kernel lab: the fused classifier (logits, softmax cross-entropy, and the
 * gradients into the input and the tied wte), chunk rows at a time.
 * Reference: hostop_classifier; production: ops_classifier
 * (backend/ops/classifier.cu, cuBLASLt for the three products). Variant 1
 * (dev/kernels/classifier_variants.cu, bf16 storage only) adds dwte's share once per group of
 * chunks instead of once per chunk, reading and writing the Vp x C fp32
 * accumulator (322 MB at GPT-2 XL) that many times less. */
#include "dev/kernels/lab.h"

#include <stdlib.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"

typedef struct cls {
    int N, C, V, Vp, chunk;
    int32_t *tgt;
    float *losses;
    void *inp, *wte, *dinp, *dwte, *scratch;
} cls;

enum { GROUP = 4 }; /* chunks per dwte product in variant 1 */

static void fused1(lab *L, void *p);

static void fused(lab *L, void *p)
{
    cls *k = p;
    lab_must(ops_classifier(L->s, k->losses, k->dinp, k->dwte, k->inp, k->wte, k->tgt, 1.0f / k->N, k->N,
                            k->C, k->V, k->Vp, k->scratch, k->chunk),
             "classifier");
}

static void check(lab *L)
{
    const int N = 37, C = 64, V = 1000, Vp = 1024, chunk = 16;
    float *inp = lab_rand(L, (size_t)N * C, -1, 1), *wte = lab_rand(L, (size_t)Vp * C, -0.3f, 0.3f);
    float *dinp = lab_rand(L, (size_t)N * C, -1, 1), *dwte = lab_rand(L, (size_t)Vp * C, -1, 1);
    int32_t *tgt = lab_tokens(L, N, V);
    tgt[3] = -1; /* an ignored position */
    float *losses = malloc((size_t)N * 4), *scratch = malloc((size_t)chunk * Vp * 4);
    cls k = {N, C, V, Vp, chunk, lab_up(L, tgt, (size_t)N * 4), lab_alloc(L, (size_t)N * 4),
             lab_up_16(L, inp, (size_t)N * C), lab_up_16(L, wte, (size_t)Vp * C),
             lab_up_16(L, dinp, (size_t)N * C), lab_up_16(L, dwte, (size_t)Vp * C),
             lab_alloc(L, ops_classifier_scratch_bytes(L->be, chunk, Vp, C))};
    lab_must(hostop_classifier(losses, dinp, dwte, inp, wte, tgt, 1.0f / N, N, C, V, Vp, scratch, chunk),
             "host classifier");
    fused(L, &k);
    lab_check_f32(L, "classifier losses", "0 production", k.losses, losses, N, 1e-2);
    lab_check_16(L, "classifier dinp", "0 production", k.dinp, dinp, (size_t)N * C, 2e-2);
    lab_check_16(L, "classifier dwte", "0 production", k.dwte, dwte, (size_t)Vp * C, 2e-2);
    LAB_FREE(L, k.tgt, k.losses, k.inp, k.wte, k.dinp, k.dwte, k.scratch);
    free(inp), free(wte), free(dinp), free(dwte), free(tgt), free(losses), free(scratch);
}

static void fused1(lab *L, void *p)
{
    cls *k = p;
    lab_must(lab_classifier1(L->stream, k->losses, k->dinp, k->dwte, k->inp, k->wte, k->tgt, 1.0f / k->N, k->N,
                             k->C, k->V, k->Vp, k->scratch, k->chunk, GROUP),
             "classifier variant 1");
}

/* Variant 1 against the host reference: 37 rows in chunks of 8 make groups
 * of 4 chunks and a partial one. */
static void check1(lab *L)
{
    if (!lab_bf16_variant(L, "classifier", "1 dwte per 4 chunks"))
        return;
    const int N = 37, C = 64, V = 1000, Vp = 1024, chunk = 8;
    float *inp = lab_rand(L, (size_t)N * C, -1, 1), *wte = lab_rand(L, (size_t)Vp * C, -0.3f, 0.3f);
    float *dinp = lab_rand(L, (size_t)N * C, -1, 1), *dwte = lab_rand(L, (size_t)Vp * C, -1, 1);
    int32_t *tgt = lab_tokens(L, N, V);
    tgt[5] = -1;
    float *losses = malloc((size_t)N * 4), *scratch = malloc((size_t)chunk * Vp * 4);
    cls k = {N, C, V, Vp, chunk, lab_up(L, tgt, (size_t)N * 4), lab_alloc(L, (size_t)N * 4),
             lab_up_16(L, inp, (size_t)N * C), lab_up_16(L, wte, (size_t)Vp * C),
             lab_up_16(L, dinp, (size_t)N * C), lab_up_16(L, dwte, (size_t)Vp * C),
             lab_alloc(L, lab_classifier1_scratch_bytes(chunk, GROUP, Vp, C))};
    lab_must(hostop_classifier(losses, dinp, dwte, inp, wte, tgt, 1.0f / N, N, C, V, Vp, scratch, chunk),
             "host classifier");
    fused1(L, &k);
    lab_check_f32(L, "classifier losses", "1 dwte per 4 chunks", k.losses, losses, N, 1e-2);
    lab_check_16(L, "classifier dinp", "1 dwte per 4 chunks", k.dinp, dinp, (size_t)N * C, 2e-2);
    lab_check_16(L, "classifier dwte", "1 dwte per 4 chunks", k.dwte, dwte, (size_t)Vp * C, 2e-2);
    LAB_FREE(L, k.tgt, k.losses, k.inp, k.wte, k.dinp, k.dwte, k.scratch);
    free(inp), free(wte), free(dinp), free(dwte), free(tgt), free(losses), free(scratch);
}

void lab_classifier(lab *L)
{
    check(L);
    check1(L);
    const lab_sizes z = L->z;
    const int N = z.B * z.T;
    const size_t nc = (size_t)N * z.C, wc = (size_t)z.Vp * z.C;
    int32_t *tgt = lab_tokens(L, (size_t)N, z.V);
    cls k = {N, z.C, z.V, z.Vp, z.chunk, lab_up(L, tgt, (size_t)N * 4), lab_zeros(L, (size_t)N * 4),
             lab_random_16(L, nc, 1), lab_random_16(L, wc, 0.02f), lab_zeros(L, nc * 2),
             lab_zeros(L, wc * 2), lab_alloc(L, ops_classifier_scratch_bytes(L->be, z.chunk, z.Vp, z.C))};
    /* three products of N x C x Vp: logits, dinp, dwte */
    lab_time(L, "classifier fwd+bwd", "0 production", fused, &k, 6.0 * N * z.C * (double)z.Vp, LAB_FLOPS);
    if (lab_bf16_variant(L, "classifier fwd+bwd", "1 dwte per 4 chunks")) {
        LAB_FREE(L, k.scratch);
        k.scratch = lab_alloc(L, lab_classifier1_scratch_bytes(z.chunk, GROUP, z.Vp, z.C));
        lab_time(L, "classifier fwd+bwd", "1 dwte per 4 chunks", fused1, &k, 6.0 * N * z.C * (double)z.Vp,
                 LAB_FLOPS);
    }
    LAB_FREE(L, k.tgt, k.losses, k.inp, k.wte, k.dinp, k.dwte, k.scratch);
    free(tgt);
}
