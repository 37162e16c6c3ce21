/* The Llama family's forward over a few new tokens a row against the
 * key/value cache (models/lmodel_decode.h, models/model_kv.h): the layers
 * of llama.c's forward with the rotation and the cache's append fused
 * (ops_kv_append_rope, rope's angles) and the attention against the cache
 * with the key/value heads as they are (ops_attention_decode), then the
 * final norm and the head on each row's last position. Groups are asked
 * for in llama_forward's order. */
#include "models/llama_internal.h"
#include "models/model_kv.h"

#include "common/error.h"

#define CHECK(expr)                                                                                                    \
    do {                                                                                                               \
        ferry_status st_ = (expr);                                                                                     \
        if (st_ != FERRY_OK)                                                                                           \
            return st_;                                                                                                \
    } while (0)

static const char WHO[] = "llama decode";

model_kv_shape llama_kv_shape(const llama_model *m)
{
    const llama_config *c = &m->cfg;
    return (model_kv_shape){.L = c->n_layer, .C = c->n_embd, .NH = c->n_head, .NKV = c->n_kv_head,
                            .HS = c->head_dim, .qkv = (c->n_head + 2 * c->n_kv_head) * c->head_dim,
                            .mlp1 = 2 * c->intermediate_size, .mlp2 = c->intermediate_size, .V = c->vocab_size};
}

static act_t *tensor_at(const llama_model *m, const lmodel_kv *kv, const act_t *base, int g, int i)
{
    return model_kv_at(kv, base, m->groups[g].tensors[i].info.offset);
}

static const act_t *role(const llama_model *m, const lmodel_kv *kv, const act_t *base, int g, int r)
{
    return m->block_index[r] < 0 ? NULL : tensor_at(m, kv, base, g, m->block_index[r]);
}

/* Layer l over R = B n rows at positions kv->len..: kv->x in, kv->x out. */
static ferry_status layer(const llama_model *m, lmodel_kv *kv, backend_stream *s, int l, const act_t *p, int n)
{
    const llama_config *c = &m->cfg;
    const model_kv_shape *sh = &kv->sh;
    int g = l + 1, R = kv->B * n, C = sh->C, Q = sh->NH * sh->HS, I = c->intermediate_size;
    size_t RC = (size_t)R * C;
    CHECK(ops_rmsnorm_forward(s, kv->norm, kv->rstd, kv->x, role(m, kv, p, g, LB_NORM1), R, C, c->rms_norm_eps));
    CHECK(ops_matmul_forward(s, kv->qkv, kv->norm, role(m, kv, p, g, LB_Q), role(m, kv, p, g, LB_QB), R, C, sh->qkv));
    CHECK(ops_kv_append_rope(s, kv->q, kv->k[l], kv->v[l], kv->qkv, kv->inv_freq, kv->len, kv->B, n, sh->NH,
                             sh->NKV, sh->HS, kv->Tmax));
    CHECK(ops_attention_decode(s, kv->att, kv->q, kv->k[l], kv->v[l], kv->len, kv->B, n, sh->NH, sh->NKV, sh->HS,
                               kv->Tmax));
    CHECK(ops_matmul_forward(s, kv->proj, kv->att, role(m, kv, p, g, LB_O), NULL, R, Q, C));
    CHECK(ops_residual_forward(s, kv->res, kv->x, kv->proj, RC));
    CHECK(ops_rmsnorm_forward(s, kv->norm, kv->rstd, kv->res, role(m, kv, p, g, LB_NORM2), R, C, c->rms_norm_eps));
    CHECK(ops_matmul_forward(s, kv->mlp1, kv->norm, role(m, kv, p, g, LB_GATE), NULL, R, C, 2 * I));
    CHECK(ops_swiglu_forward(s, kv->mlp2, kv->mlp1, R, I));
    CHECK(ops_matmul_forward(s, kv->proj, kv->mlp2, role(m, kv, p, g, LB_DOWN), NULL, R, I, C));
    return ops_residual_forward(s, kv->x, kv->res, kv->proj, RC);
}

/* Each row's last position normed into kv->last, then the logits. */
static ferry_status head(const llama_model *m, lmodel_kv *kv, backend_stream *s, const act_t *norm_w,
                         const act_t *w, int n)
{
    const llama_config *c = &m->cfg;
    int C = c->n_embd, V = c->vocab_size;
    for (int b = 0; b < kv->B; b++) {
        const act_t *row = model_kv_at(kv, kv->x, ((size_t)b * n + (size_t)(n - 1)) * C);
        CHECK(ops_rmsnorm_forward(s, model_kv_at(kv, kv->last, (size_t)b * C), kv->rstd, row, norm_w, 1, C,
                                  c->rms_norm_eps));
    }
    CHECK(ops_matmul_forward(s, kv->logits, kv->last, w, NULL, kv->B, C, V));
    return ops_convert_to_f32(s, kv->logits_f32, kv->logits, (size_t)kv->B * V);
}

ferry_status llama_decode_rows(const llama_model *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s, int n)
{
    const llama_config *c = &m->cfg;
    int L = c->n_layer, last = m->num_groups - 1;
    bool tied = m->head_index < 0;
    const act_t *emb, *pf;
    CHECK(model_acquire(h, WHO, 0, FERRY_PHASE_FORWARD, s, &emb));
    CHECK(ops_encoder_forward(s, kv->x, kv->tokens, tensor_at(m, kv, emb, 0, 0), NULL, kv->B, n, c->n_embd,
                              c->vocab_size, NULL));
    if (!tied)
        CHECK(model_release(h, WHO, 0, FERRY_PHASE_FORWARD, s));
    for (int l = 0; l < L; l++) {
        const act_t *pb;
        CHECK(model_acquire(h, WHO, l + 1, FERRY_PHASE_FORWARD, s, &pb));
        CHECK(layer(m, kv, s, l, pb, n));
        CHECK(model_release(h, WHO, l + 1, FERRY_PHASE_FORWARD, s));
    }
    CHECK(model_acquire(h, WHO, last, FERRY_PHASE_FORWARD, s, &pf));
    const act_t *w = tied ? tensor_at(m, kv, emb, 0, 0) : tensor_at(m, kv, pf, last, m->head_index);
    CHECK(head(m, kv, s, tensor_at(m, kv, pf, last, 0), w, n));
    CHECK(model_release(h, WHO, last, FERRY_PHASE_FORWARD, s));
    if (tied)
        CHECK(model_release(h, WHO, 0, FERRY_PHASE_FORWARD, s));
    return FERRY_OK;
}
