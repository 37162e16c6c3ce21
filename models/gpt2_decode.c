/* GPT-2's forward over a few new tokens a row against the key/value cache
 * (models/lmodel_decode.h, models/model_kv.h): the token embedding plus row
 * p of wpe for the token at position p, gpt2.c's blocks with the keys and
 * values appended to the cache (ops_kv_append) and the attention against
 * it (ops_attention_decode), then the final layernorm and the tied head on
 * each row's last position. Groups are asked for in gpt2_forward's order. */
#include "models/gpt2_internal.h"
#include "models/model_kv.h"

#include "common/error.h"

#define CHECK(expr)                                                                                                    \
    do {                                                                                                               \
        ferry_status st_ = (expr);                                                                                     \
        if (st_ != FERRY_OK)                                                                                           \
            return st_;                                                                                                \
    } while (0)

static const char WHO[] = "gpt2 decode";

model_kv_shape gpt2_kv_shape(const gpt2_model *m)
{
    const gpt2_config *c = &m->cfg;
    return (model_kv_shape){.L = c->n_layer, .C = c->n_embd, .NH = c->n_head, .NKV = c->n_head,
                            .HS = c->n_embd / c->n_head, .qkv = 3 * c->n_embd, .mlp1 = 4 * c->n_embd,
                            .mlp2 = 4 * c->n_embd, .V = c->vocab_size};
}

static act_t *tensor_at(const gpt2_model *m, const lmodel_kv *kv, const act_t *base, int g, int i)
{
    return model_kv_at(kv, base, m->groups[g].tensors[i].info.offset);
}

/* Block l over R = B n rows at positions kv->len..: kv->x in, kv->x out. */
static ferry_status block(const gpt2_model *m, lmodel_kv *kv, backend_stream *s, int l, const act_t *p, int n)
{
    const model_kv_shape *sh = &kv->sh;
    int g = l + 1, R = kv->B * n, C = sh->C;
    size_t RC = (size_t)R * C;
#define T_(i) tensor_at(m, kv, p, g, (i))
    CHECK(ops_layernorm_forward(s, kv->norm, kv->mean, kv->rstd, kv->x, T_(BLK_LN1W), T_(BLK_LN1B), R, C));
    CHECK(ops_matmul_forward(s, kv->qkv, kv->norm, T_(BLK_QKVW), T_(BLK_QKVB), R, C, 3 * C));
    CHECK(ops_kv_append(s, kv->q, kv->k[l], kv->v[l], kv->qkv, kv->len, kv->B, n, sh->NH, sh->NKV, sh->HS,
                        kv->Tmax));
    CHECK(ops_attention_decode(s, kv->att, kv->q, kv->k[l], kv->v[l], kv->len, kv->B, n, sh->NH, sh->NKV, sh->HS,
                               kv->Tmax));
    CHECK(ops_matmul_forward(s, kv->proj, kv->att, T_(BLK_ATTPROJW), T_(BLK_ATTPROJB), R, C, C));
    CHECK(ops_residual_forward(s, kv->res, kv->x, kv->proj, RC));
    CHECK(ops_layernorm_forward(s, kv->norm, kv->mean, kv->rstd, kv->res, T_(BLK_LN2W), T_(BLK_LN2B), R, C));
    CHECK(ops_matmul_forward(s, kv->mlp1, kv->norm, T_(BLK_FCW), T_(BLK_FCB), R, C, 4 * C));
    CHECK(ops_gelu_forward(s, kv->mlp2, kv->mlp1, RC * 4));
    CHECK(ops_matmul_forward(s, kv->proj, kv->mlp2, T_(BLK_FCPROJW), T_(BLK_FCPROJB), R, 4 * C, C));
#undef T_
    return ops_residual_forward(s, kv->x, kv->res, kv->proj, RC);
}

ferry_status gpt2_decode_rows(const gpt2_model *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s, int n)
{
    const gpt2_config *c = &m->cfg;
    int L = c->n_layer, C = c->n_embd, V = c->vocab_size;
    const act_t *emb, *pf;
    CHECK(model_acquire(h, WHO, 0, FERRY_PHASE_FORWARD, s, &emb));
    const act_t *wte = tensor_at(m, kv, emb, 0, EMB_WTE);
    /* wpe's rows from the first new position: the encoder adds row t of what it is given */
    const act_t *wpe = model_kv_at(kv, tensor_at(m, kv, emb, 0, EMB_WPE), (size_t)kv->len * C);
    CHECK(ops_encoder_forward(s, kv->x, kv->tokens, wte, wpe, kv->B, n, C, V, NULL));
    for (int l = 0; l < L; l++) {
        const act_t *pb;
        CHECK(model_acquire(h, WHO, l + 1, FERRY_PHASE_FORWARD, s, &pb));
        CHECK(block(m, kv, s, l, pb, n));
        CHECK(model_release(h, WHO, l + 1, FERRY_PHASE_FORWARD, s));
    }
    CHECK(model_acquire(h, WHO, L + 1, FERRY_PHASE_FORWARD, s, &pf));
    for (int b = 0; b < kv->B; b++) {
        const act_t *row = model_kv_at(kv, kv->x, ((size_t)b * n + (size_t)(n - 1)) * C);
        CHECK(ops_layernorm_forward(s, model_kv_at(kv, kv->last, (size_t)b * C), kv->mean, kv->rstd, row,
                                    tensor_at(m, kv, pf, L + 1, LNF_W), tensor_at(m, kv, pf, L + 1, LNF_B), 1, C));
    }
    CHECK(model_release(h, WHO, L + 1, FERRY_PHASE_FORWARD, s));
    CHECK(ops_matmul_forward(s, kv->logits, kv->last, wte, NULL, kv->B, C, V));
    CHECK(ops_convert_to_f32(s, kv->logits_f32, kv->logits, (size_t)kv->B * V));
    return model_release(h, WHO, 0, FERRY_PHASE_FORWARD, s);
}
