/* What the decode files of models/ share: the key/value cache of generation and the
 * scratch its forward over a few new tokens runs in (models/lmodel_decode.h
 * is the face; lmodel_decode.c allocates and stages, each family's
 * <family>_decode.c runs its layers over it). Not for use outside models/. */
#ifndef FERRY_MODELS_MODEL_KV_H
#define FERRY_MODELS_MODEL_KV_H

#include "models/lmodel_decode.h"

/* The widths a family's decode runs at. */
typedef struct model_kv_shape {
    int L, C, NH, NKV, HS;
    int qkv;        /* the fused projection's width, (NH + 2 NKV) HS */
    int mlp1, mlp2; /* the MLP's two intermediates: GPT-2's 4C and 4C, Llama's 2I and I */
    int V;          /* logits per row */
} model_kv_shape;

struct lmodel_kv {
    backend *be;
    ferry_dtype act;
    size_t es;
    model_kv_shape sh;
    int B, Tmax, chunk; /* chunk: new tokens a row per forward (a prompt goes by chunks) */
    int len;            /* positions filled, the same in every row */
    model_take tk;
    char who[64];

    act_t **k, **v;     /* [L] each [B, NKV, Tmax, HS] */
    /* scratch for B x chunk rows */
    act_t *x, *res, *norm, *qkv, *q, *att, *proj, *mlp1, *mlp2;
    float *mean, *rstd;
    act_t *last;        /* [B, C]: each row's last new position, normed */
    act_t *logits;      /* [B, V] */
    float *logits_f32, *inv_freq;
    int32_t *tokens;    /* [B x n] of the forward under way, row-major by batch row */

    int32_t *h_tokens;  /* host staging (backend_host_alloc) */
    float *h_logits, *h_freq;
};

/* Byte offset of tensor `offset` (elements) in a group buffer. */
static inline act_t *model_kv_at(const lmodel_kv *kv, const act_t *base, size_t offset)
{
    return (char *)base + offset * kv->es;
}

/* The family's forward of n new tokens a row (staged in kv->tokens, at
 * positions kv->len .. kv->len + n - 1): every layer, the cache appended,
 * then the final norm of each row's last position into kv->last and its
 * logits into kv->logits_f32 (device, [B, V] fp32), on stream s. */
ferry_status llama_decode_rows(const llama_model *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                               int n);
ferry_status gpt2_decode_rows(const gpt2_model *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                              int n);
model_kv_shape llama_kv_shape(const llama_model *m);
model_kv_shape gpt2_kv_shape(const gpt2_model *m);

#endif
