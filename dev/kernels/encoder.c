/* Kernel lab: the encoder (token + position embedding), forward and the
 * accumulating backward. Reference: hostop_encoder_*; production:
 * ops_encoder_* (backend/ops/encoder.cu). No variants yet. */
#include "dev/kernels/lab.h"

#include <stdlib.h>

#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"

typedef struct enc {
    int B, T, C, V;
    int32_t *tok; /* device */
    void *out, *wte, *wpe, *dout, *dwte, *dwpe;
} enc;

static void forward(lab *L, void *p)
{
    enc *k = p;
    lab_must(ops_encoder_forward(L->s, k->out, k->tok, k->wte, k->wpe, k->B, k->T, k->C, k->V, NULL), "encoder");
}

static void backward(lab *L, void *p)
{
    enc *k = p;
    lab_must(ops_encoder_backward(L->s, k->dwte, k->dwpe, k->dout, k->tok, k->B, k->T, k->C, k->V, NULL), "encoder bwd");
}

/* Small sizes with a small vocabulary, so token ids repeat (the backward's hard case). */
static void check(lab *L)
{
    const int B = 2, T = 67, C = 96, V = 50;
    const size_t n = (size_t)B * T * C;
    int32_t *tok = lab_tokens(L, (size_t)B * T, V);
    float *wte = lab_rand(L, (size_t)V * C, -1, 1), *wpe = lab_rand(L, (size_t)T * C, -1, 1);
    float *dout = lab_rand(L, n, -1, 1), *dwte = lab_rand(L, (size_t)V * C, -1, 1);
    float *dwpe = lab_rand(L, (size_t)T * C, -1, 1), *out = malloc(n * sizeof *out);
    enc k = {B, T, C, V, lab_up(L, tok, (size_t)B * T * 4), lab_alloc(L, n * 2), lab_up_16(L, wte, (size_t)V * C),
             lab_up_16(L, wpe, (size_t)T * C), lab_up_16(L, dout, n), lab_up_16(L, dwte, (size_t)V * C),
             lab_up_16(L, dwpe, (size_t)T * C)};
    lab_must(hostop_encoder_forward(out, tok, wte, wpe, B, T, C, V, NULL), "host encoder");
    forward(L, &k);
    lab_check_16(L, "encoder_forward", "0 production", k.out, out, n, 1e-2);
    hostop_encoder_backward(dwte, dwpe, dout, tok, B, T, C, V, NULL);
    backward(L, &k);
    lab_check_16(L, "encoder_backward dwte", "0 production", k.dwte, dwte, (size_t)V * C, 1e-2);
    lab_check_16(L, "encoder_backward dwpe", "0 production", k.dwpe, dwpe, (size_t)T * C, 1e-2);
    LAB_FREE(L, k.tok, k.out, k.wte, k.wpe, k.dout, k.dwte, k.dwpe);
    free(tok), free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(out);
}

void lab_encoder(lab *L)
{
    check(L);
    const lab_sizes z = L->z;
    const size_t N = (size_t)z.B * z.T, nc = N * z.C;
    int32_t *tok = lab_tokens(L, N, z.V);
    enc k = {z.B, z.T, z.C, z.V, lab_up(L, tok, N * 4), lab_zeros(L, nc * 2),
             lab_random_16(L, (size_t)z.Vp * z.C, 0.02f), lab_random_16(L, (size_t)z.T * z.C, 0.02f),
             lab_random_16(L, nc, 1), lab_zeros(L, (size_t)z.Vp * z.C * 2), lab_zeros(L, (size_t)z.T * z.C * 2)};
    /* bytes: read a wte row and a wpe row and write an output row per token */
    lab_time(L, "encoder_forward", "0 production", forward, &k, 3.0 * nc * 2, LAB_BYTES);
    lab_time(L, "encoder_backward", "0 production", backward, &k,
             3.0 * nc * 2 + 2.0 * z.T * z.C * 2, LAB_BYTES);
    LAB_FREE(L, k.tok, k.out, k.wte, k.wpe, k.dout, k.dwte, k.dwpe);
    free(tok);
}
