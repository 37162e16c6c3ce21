/* The Llama family's forward and backward on a backend stream, and the
 * activations they use. Parameters and gradients come group by group from
 * the caller's hooks (models/llama.h); activation memory from the caller's
 * allocator. Everything runs through ops_* and backend copies, so it runs
 * unchanged on the host and the cuda backend. Layout and init:
 * models/llama_layout.c. */
#include "models/llama_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Classifier scratch target: chunk rows of Vp logits fit in this many bytes. */
#define LLAMA_CLASSIFIER_SCRATCH_BYTES (32u << 20)

#define CHECK(expr)                                                                                                    \
    do {                                                                                                               \
        ferry_status st_ = (expr);                                                                                     \
        if (st_ != FERRY_OK)                                                                                           \
            return st_;                                                                                                \
    } while (0)

/* One layer's saved activations. */
typedef struct layer_acts {
    act_t *norm1, *qkv, *atty, *res2, *norm2, *gu, *act;
    float *rstd1, *rstd2, *lse;
} layer_acts;

struct llama_activations {
    backend *be;
    ferry_dtype act;
    size_t es;
    int B, T;
    bool recompute;
    model_take tk;
    char who[64];

    act_t **x;          /* [L + 1] residual stream: layer l's input is x[l] */
    layer_acts *layers; /* [L], or [1] shared when recomputing */
    act_t *qkvg;        /* the fused q/k/v projection before rope (forward only) */
    act_t *proj;        /* the attention and MLP projections before their residual add */
    act_t *normf;
    float *rstdf;
    float *losses, *inv_freq;
    int32_t *tokens, *targets, *pos;
    void *cls_scratch;
    int chunk;
    act_t *logits;
    float *logits_f32;
    act_t *dres, *dbig1, *dbig2, *dsmall; /* backward: residual gradient and scratch */

    int32_t *h_tokens, *h_targets, *h_pos; /* host staging (backend_host_alloc) */
    int32_t *set_pos; /* llama_set_positions' copy (malloc'd), or NULL: 0..T-1 in each row */
    bool fwd_packed;  /* the last forward uploaded set_pos (its backward and recompute use it) */
    float *h_losses, *h_logits, *h_freq;
    backend_event *staged;

    bool have_forward, have_targets, losses_enqueued;
    int n_valid;
};

#define take(a, out, bytes, ...) model_take_buf(&(a)->tk, (out), (bytes), __VA_ARGS__)

/* ---- sizes ---- */

static size_t q_width(const llama_config *c) { return (size_t)c->n_head * c->head_dim; }
static size_t qkv_width(const llama_config *c) { return (size_t)(c->n_head + 2 * c->n_kv_head) * c->head_dim; }
static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* ---- allocation ---- */

static ferry_status plan_layer(llama_activations *a, layer_acts *k, const llama_config *c, const char *who)
{
    size_t N = (size_t)a->B * a->T, C = (size_t)c->n_embd, Q = q_width(c), I = (size_t)c->intermediate_size;
    size_t es = a->es;
    CHECK(take(a, &k->norm1, N * C * es, "%s norm 1", who));
    CHECK(take(a, &k->rstd1, N * 4, "%s norm 1 rstd", who));
    CHECK(take(a, &k->qkv, N * 3 * Q * es, "%s qkv (rotated, per query head)", who));
    CHECK(take(a, &k->atty, N * Q * es, "%s attention out", who));
    CHECK(take(a, &k->lse, (size_t)a->B * c->n_head * a->T * 4, "%s attention lse", who));
    CHECK(take(a, &k->res2, N * C * es, "%s residual 2", who));
    CHECK(take(a, &k->norm2, N * C * es, "%s norm 2", who));
    CHECK(take(a, &k->rstd2, N * 4, "%s norm 2 rstd", who));
    CHECK(take(a, &k->gu, N * 2 * I * es, "%s mlp gate and up", who));
    CHECK(take(a, &k->act, N * I * es, "%s mlp activation", who));
    return FERRY_OK;
}

static ferry_status plan(llama_activations *a, const llama_config *c)
{
    size_t N = (size_t)a->B * a->T, C = (size_t)c->n_embd, es = a->es, Q = q_width(c), I = (size_t)c->intermediate_size;
    int L = c->n_layer;
    for (int l = 0; l <= L; l++)
        CHECK(take(a, &a->x[l], N * C * es, "residual %d", l));
    if (a->recompute) {
        CHECK(plan_layer(a, &a->layers[0], c, "block (recomputed, shared)"));
    } else {
        for (int l = 0; l < L; l++) {
            char who[32];
            snprintf(who, sizeof who, "block %d", l);
            CHECK(plan_layer(a, &a->layers[l], c, who));
        }
    }
    CHECK(take(a, &a->qkvg, N * qkv_width(c) * es, "qkv projection"));
    CHECK(take(a, &a->proj, N * C * es, "projection"));
    CHECK(take(a, &a->normf, N * C * es, "final norm"));
    CHECK(take(a, &a->rstdf, N * 4, "final norm rstd"));
    CHECK(take(a, &a->losses, N * 4, "losses"));
    CHECK(take(a, &a->tokens, N * 4, "tokens"));
    CHECK(take(a, &a->targets, N * 4, "targets"));
    CHECK(take(a, &a->pos, N * 4, "positions"));
    CHECK(take(a, &a->inv_freq, (size_t)c->head_dim / 2 * 4, "rotary frequencies"));
    CHECK(take(a, &a->cls_scratch, ops_classifier_scratch_bytes_for(a->act, a->chunk, c->padded_vocab_size, c->n_embd),
               "classifier logits (%d rows)", a->chunk));
    CHECK(take(a, &a->logits, (size_t)c->vocab_size * es, "sampling logits"));
    CHECK(take(a, &a->logits_f32, (size_t)c->vocab_size * 4, "sampling logits fp32"));
    CHECK(take(a, &a->dres, N * C * es, "grad residual"));
    CHECK(take(a, &a->dbig1, N * max2(I, 3 * Q) * es, "grad scratch 1"));
    CHECK(take(a, &a->dbig2, N * max2(2 * I, qkv_width(c)) * es, "grad scratch 2"));
    return take(a, &a->dsmall, N * max2(C, Q) * es, "grad scratch 3");
}

static ferry_status check_shape(const llama_model *m, int B, int T)
{
    if (!m)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama activations: model is NULL");
    const llama_config *c = &m->cfg;
    if (B < 1 || T < 1 || T > c->max_seq_len)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "llama activations: B = %d, T = %d; need B >= 1 and 1 <= T <= max_position_embeddings = %d",
                       B, T, c->max_seq_len);
    if (c->sliding_window > 0 && T > c->sliding_window)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "llama activations: sequence %d is longer than the model's sliding_window = %d, and ferry's "
                       "attention is full causal: train with --seq %d or less",
                       T, c->sliding_window, c->sliding_window);
    if ((long long)B * T > INT32_MAX)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama activations: B x T = %lld tokens is too many for one batch",
                       (long long)B * T);
    return FERRY_OK;
}

static void init_shape(llama_activations *a, const llama_model *m, ferry_dtype act, int B, int T, bool recompute)
{
    a->act = act;
    a->es = dtype_size(act);
    a->B = B;
    a->T = T;
    a->recompute = recompute;
    snprintf(a->who, sizeof a->who, "llama activations (B=%d, T=%d%s)", B, T, recompute ? ", recompute" : "");
    a->tk.who = a->who;
    size_t per_row = (size_t)m->cfg.padded_vocab_size * dtype_size(act);
    size_t rows = LLAMA_CLASSIFIER_SCRATCH_BYTES / (per_row ? per_row : 1);
    a->chunk = rows < 1 ? 1 : rows < (size_t)B * T ? (int)rows : B * T;
}

static bool alloc_tables(llama_activations *a, const llama_model *m)
{
    a->x = calloc((size_t)m->cfg.n_layer + 1, sizeof *a->x);
    a->layers = calloc(a->recompute ? 1 : (size_t)m->cfg.n_layer, sizeof *a->layers);
    return a->x && a->layers;
}

size_t llama_activations_bytes(const llama_model *m, ferry_dtype act, int B, int T, bool recompute)
{
    return llama_activations_list(m, act, B, T, recompute, NULL, NULL);
}

size_t llama_activations_list(const llama_model *m, ferry_dtype act, int B, int T, bool recompute,
                              void (*fn)(void *ctx, const char *what, size_t bytes), void *ctx)
{
    if (!dtype_is_float(act) || check_shape(m, B, T) != FERRY_OK) {
        err_clear();
        return 0;
    }
    llama_activations a = {0};
    a.tk.dry = true;
    a.tk.list = fn;
    a.tk.list_ctx = ctx;
    init_shape(&a, m, act, B, T, recompute);
    size_t bytes = alloc_tables(&a, m) && plan(&a, &m->cfg) == FERRY_OK ? a.tk.bytes : 0;
    free(a.x);
    free(a.layers);
    err_clear();
    return bytes;
}

static ferry_status host_staging(llama_activations *a, const llama_config *c)
{
    size_t N = (size_t)a->B * a->T;
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_tokens));
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_targets));
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_pos));
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_losses));
    CHECK(backend_host_alloc(a->be, (size_t)c->vocab_size * 4, (void **)&a->h_logits));
    CHECK(backend_host_alloc(a->be, (size_t)c->head_dim / 2 * 4, (void **)&a->h_freq));
    for (size_t i = 0; i < N; i++)
        a->h_pos[i] = (int32_t)(i % (size_t)a->T);
    llama_rope_inv_freq(c, a->h_freq);
    return backend_event_create(a->be, &a->staged);
}

ferry_status llama_activations_create(const llama_model *m, backend *be, int B, int T, bool recompute,
                                      const model_allocator *alloc, llama_activations **out)
{
    if (!out || !be || !alloc || !alloc->alloc || !alloc->free)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_activations_create: NULL argument (out, backend or allocator)");
    *out = NULL;
    CHECK(check_shape(m, B, T));
    llama_activations *a = calloc(1, sizeof *a);
    if (!a)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "llama activations: out of host memory");
    a->be = be;
    a->tk.alloc = *alloc;
    init_shape(a, m, backend_act_dtype(be), B, T, recompute);
    ferry_status st = alloc_tables(a, m) ? plan(a, &m->cfg)
                                         : err_set(FERRY_ERR_OUT_OF_MEMORY, "llama activations: out of host memory");
    if (st == FERRY_OK)
        st = host_staging(a, &m->cfg);
    if (st != FERRY_OK) {
        llama_activations_destroy(a);
        return st;
    }
    *out = a;
    return FERRY_OK;
}

void llama_activations_destroy(llama_activations *a)
{
    if (!a)
        return;
    model_take_free(&a->tk);
    void *staging[] = {a->h_tokens, a->h_targets, a->h_pos, a->h_losses, a->h_logits, a->h_freq};
    for (size_t i = 0; i < sizeof staging / sizeof staging[0]; i++)
        if (staging[i])
            backend_host_free(a->be, staging[i]);
    backend_event_destroy(a->staged);
    free(a->set_pos);
    free(a->x);
    free(a->layers);
    free(a);
}

/* ---- parameter views ---- */

typedef struct layer_view {
    act_t *t[LB_COUNT]; /* NULL for a role the layer does not have */
} layer_view;

static act_t *tensor_at(const llama_model *m, const llama_activations *a, const act_t *base, int g, int i)
{
    return (char *)base + m->groups[g].tensors[i].info.offset * a->es;
}

static layer_view layer_of(const llama_model *m, const llama_activations *a, const act_t *base, int g)
{
    layer_view v;
    for (int r = 0; r < LB_COUNT; r++)
        v.t[r] = m->block_index[r] < 0 ? NULL : tensor_at(m, a, base, g, m->block_index[r]);
    return v;
}

/* The classifier's weights: the embedding (tied) or lm_head (group L+1). */
static act_t *head_of(const llama_model *m, const llama_activations *a, const act_t *emb, const act_t *last)
{
    return m->head_index < 0 ? tensor_at(m, a, emb, 0, 0) : tensor_at(m, a, last, m->num_groups - 1, m->head_index);
}

static const char WHO[] = "llama";

/* ---- forward ---- */

static layer_acts *acts_of(llama_activations *a, int l) { return a->recompute ? &a->layers[0] : &a->layers[l]; }

/* Layer l from its input x[l]; with write_out also its output x[l+1]. */
/* The positions attention takes: NULL for one example a row (the plain
 * op, bit for bit); rope always takes pos (0..T-1 a row by default). */
static const int32_t *attn_positions(const llama_activations *a) { return a->fwd_packed ? a->pos : NULL; }

static ferry_status layer_forward(const llama_model *m, llama_activations *a, backend_stream *s, int l,
                                  const layer_view *p, bool write_out)
{
    const llama_config *c = &m->cfg;
    int B = a->B, T = a->T, N = B * T, C = c->n_embd, NH = c->n_head, HS = c->head_dim, I = c->intermediate_size;
    int Q = (int)q_width(c);
    size_t NC = (size_t)N * C;
    layer_acts *k = acts_of(a, l);
    const act_t *x = a->x[l];
    CHECK(ops_rmsnorm_forward(s, k->norm1, k->rstd1, x, p->t[LB_NORM1], N, C, c->rms_norm_eps));
    CHECK(ops_matmul_forward(s, a->qkvg, k->norm1, p->t[LB_Q], p->t[LB_QB], N, C, (int)qkv_width(c)));
    CHECK(ops_rope_forward(s, k->qkv, a->qkvg, a->inv_freq, a->pos, B, T, NH, c->n_kv_head, HS));
    CHECK(ops_attention_forward(s, k->atty, k->lse, k->qkv, B, T, Q, NH, attn_positions(a)));
    CHECK(ops_matmul_forward(s, a->proj, k->atty, p->t[LB_O], NULL, N, Q, C));
    CHECK(ops_residual_forward(s, k->res2, x, a->proj, NC));
    CHECK(ops_rmsnorm_forward(s, k->norm2, k->rstd2, k->res2, p->t[LB_NORM2], N, C, c->rms_norm_eps));
    CHECK(ops_matmul_forward(s, k->gu, k->norm2, p->t[LB_GATE], NULL, N, C, 2 * I));
    CHECK(ops_swiglu_forward(s, k->act, k->gu, N, I));
    if (!write_out)
        return FERRY_OK;
    CHECK(ops_matmul_forward(s, a->proj, k->act, p->t[LB_DOWN], NULL, N, I, C));
    return ops_residual_forward(s, a->x[l + 1], k->res2, a->proj, NC);
}

/* Checks tokens and targets on the host, then copies them (and the
 * positions and frequencies) to the device through the staging. */
static ferry_status stage_inputs(const llama_model *m, llama_activations *a, backend_stream *s, const int32_t *tokens,
                                 const int32_t *targets)
{
    int N = a->B * a->T, n_valid = 0;
    CHECK(model_check_batch("llama_forward", tokens, targets, a->B, a->T, m->cfg.vocab_size, &n_valid));
    CHECK(backend_event_synchronize(a->staged));
    size_t bytes = (size_t)N * sizeof(int32_t);
    memcpy(a->h_tokens, tokens, bytes);
    CHECK(backend_memcpy_async(s, a->tokens, a->h_tokens, bytes, BACKEND_COPY_H2D));
    if (a->set_pos)
        memcpy(a->h_pos, a->set_pos, bytes);
    else
        for (size_t i = 0; a->fwd_packed && i < (size_t)N; i++)
            a->h_pos[i] = (int32_t)(i % (size_t)a->T); /* back to one example a row */
    a->fwd_packed = a->set_pos != NULL;
    CHECK(backend_memcpy_async(s, a->pos, a->h_pos, bytes, BACKEND_COPY_H2D));
    CHECK(backend_memcpy_async(s, a->inv_freq, a->h_freq, (size_t)m->cfg.head_dim / 2 * 4, BACKEND_COPY_H2D));
    if (targets) {
        memcpy(a->h_targets, targets, bytes);
        CHECK(backend_memcpy_async(s, a->targets, a->h_targets, bytes, BACKEND_COPY_H2D));
    }
    CHECK(backend_event_record(a->staged, s));
    a->n_valid = n_valid;
    a->have_targets = targets != NULL;
    return FERRY_OK;
}

ferry_status llama_set_positions(llama_activations *a, const int32_t *pos)
{
    if (!a)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_set_positions: activations are NULL");
    return model_keep_positions("llama_set_positions", &a->set_pos, pos, a->B, a->T);
}

static ferry_status check_run(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s, const char *who)
{
    return model_check_run(who, m, a, s, a ? a->be : NULL, h);
}

ferry_status llama_forward(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s,
                           const int32_t *tokens, const int32_t *targets, bool for_backward)
{
    CHECK(check_run(m, a, h, s, "llama_forward"));
    if (!tokens)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_forward: tokens is NULL");
    const llama_config *c = &m->cfg;
    int L = c->n_layer, N = a->B * a->T, C = c->n_embd, last = m->num_groups - 1;
    bool tied = m->head_index < 0;
    a->have_forward = false;
    a->losses_enqueued = false;
    CHECK(stage_inputs(m, a, s, tokens, targets));

    const act_t *emb, *pf;
    CHECK(model_acquire(h, WHO, 0, FERRY_PHASE_FORWARD, s, &emb));
    CHECK(ops_encoder_forward(s, a->x[0], a->tokens, tensor_at(m, a, emb, 0, 0), NULL, a->B, a->T, C, c->vocab_size,
                              NULL));
    if (!tied) /* the embedding is read once: let it go */
        CHECK(model_release(h, WHO, 0, FERRY_PHASE_FORWARD, s));
    for (int l = 0; l < L; l++) {
        const act_t *pb;
        CHECK(model_acquire(h, WHO, l + 1, FERRY_PHASE_FORWARD, s, &pb));
        layer_view p = layer_of(m, a, pb, l + 1);
        CHECK(layer_forward(m, a, s, l, &p, true));
        CHECK(model_release(h, WHO, l + 1, FERRY_PHASE_FORWARD, s));
    }
    CHECK(model_acquire(h, WHO, last, FERRY_PHASE_FORWARD, s, &pf));
    CHECK(ops_rmsnorm_forward(s, a->normf, a->rstdf, a->x[L], tensor_at(m, a, pf, last, 0), N, C, c->rms_norm_eps));
    if (targets && !for_backward) {
        CHECK(ops_classifier(s, a->losses, NULL, NULL, a->normf, head_of(m, a, emb, pf), a->targets, 0.0f, N, C,
                             c->vocab_size, c->padded_vocab_size, a->cls_scratch, a->chunk));
        CHECK(backend_memcpy_async(s, a->h_losses, a->losses, (size_t)N * 4, BACKEND_COPY_D2H));
        a->losses_enqueued = true;
    }
    CHECK(model_release(h, WHO, last, FERRY_PHASE_FORWARD, s));
    if (tied)
        CHECK(model_release(h, WHO, 0, FERRY_PHASE_FORWARD, s));
    a->have_forward = true;
    return FERRY_OK;
}

/* ---- backward ---- */

static ferry_status zero(backend_stream *s, void *p, size_t bytes) { return backend_memset_async(s, p, 0, bytes); }

/* On entry a->dres holds the gradient of layer l's output; on exit, of its
 * input. Parameter gradients add into g. */
static ferry_status layer_backward(const llama_model *m, llama_activations *a, backend_stream *s, int l,
                                   const layer_view *p, const layer_view *g)
{
    const llama_config *c = &m->cfg;
    int B = a->B, T = a->T, N = B * T, C = c->n_embd, NH = c->n_head, HS = c->head_dim, I = c->intermediate_size;
    int Q = (int)q_width(c), QKV = (int)qkv_width(c);
    size_t es = a->es;
    layer_acts *k = acts_of(a, l);
    if (a->recompute)
        CHECK(layer_forward(m, a, s, l, p, false));
    /* MLP: out = h + down(silu(gate(norm2(h))) * up(norm2(h))) */
    CHECK(zero(s, a->dbig1, (size_t)N * I * es));
    CHECK(ops_matmul_backward(s, a->dbig1, g->t[LB_DOWN], NULL, a->dres, k->act, p->t[LB_DOWN], N, I, C));
    CHECK(zero(s, a->dbig2, (size_t)N * 2 * I * es));
    CHECK(ops_swiglu_backward(s, a->dbig2, k->gu, a->dbig1, N, I));
    CHECK(zero(s, a->dsmall, (size_t)N * C * es));
    CHECK(ops_matmul_backward(s, a->dsmall, g->t[LB_GATE], NULL, a->dbig2, k->norm2, p->t[LB_GATE], N, C, 2 * I));
    CHECK(ops_rmsnorm_backward(s, a->dres, g->t[LB_NORM2], a->dsmall, k->res2, p->t[LB_NORM2], k->rstd2, N, C));
    /* attention: h = x + o(attn(rope(qkv(norm1(x))))) */
    CHECK(zero(s, a->dsmall, (size_t)N * Q * es));
    CHECK(ops_matmul_backward(s, a->dsmall, g->t[LB_O], NULL, a->dres, k->atty, p->t[LB_O], N, Q, C));
    CHECK(zero(s, a->dbig1, (size_t)N * 3 * Q * es));
    /* dbig2 (spent) holds the backward's delta, B NH T floats: less than N (NH + 2 NKV) HS of 16 bits. */
    CHECK(ops_attention_backward(s, a->dbig1, a->dsmall, k->qkv, k->atty, k->lse, (float *)a->dbig2, B, T, Q, NH,
                                 attn_positions(a)));
    CHECK(zero(s, a->dbig2, (size_t)N * QKV * es));
    CHECK(ops_rope_backward(s, a->dbig2, a->dbig1, a->inv_freq, a->pos, B, T, NH, c->n_kv_head, HS));
    CHECK(zero(s, a->dsmall, (size_t)N * C * es));
    CHECK(ops_matmul_backward(s, a->dsmall, g->t[LB_Q], g->t[LB_QB], a->dbig2, k->norm1, p->t[LB_Q], N, C, QKV));
    return ops_rmsnorm_backward(s, a->dres, g->t[LB_NORM1], a->dsmall, a->x[l], p->t[LB_NORM1], k->rstd1, N, C);
}

ferry_status llama_backward(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s,
                            float grad_scale)
{
    CHECK(check_run(m, a, h, s, "llama_backward"));
    if (!a->have_forward || !a->have_targets)
        return err_set(FERRY_ERR_STATE, "llama_backward: needs a llama_forward with targets on these activations first");
    const llama_config *c = &m->cfg;
    int L = c->n_layer, N = a->B * a->T, C = c->n_embd, last = m->num_groups - 1;
    size_t NC = (size_t)N * C, es = a->es;
    bool tied = m->head_index < 0;
    a->have_forward = false;

    const act_t *emb = NULL, *pf;
    act_t *demb = NULL, *gf;
    if (tied) { /* the head reads the embedding and adds into its gradient */
        CHECK(model_acquire(h, WHO, 0, FERRY_PHASE_BACKWARD, s, &emb));
        CHECK(model_acquire_grads(h, WHO, 0, s, &demb));
    }
    CHECK(model_acquire(h, WHO, last, FERRY_PHASE_BACKWARD, s, &pf));
    CHECK(model_acquire_grads(h, WHO, last, s, &gf));
    CHECK(zero(s, a->dsmall, NC * es));
    float scale = a->n_valid > 0 ? grad_scale / (float)a->n_valid : 0.0f;
    CHECK(ops_classifier(s, a->losses, a->dsmall, head_of(m, a, demb, gf), a->normf, head_of(m, a, emb, pf),
                         a->targets, scale, N, C, c->vocab_size, c->padded_vocab_size, a->cls_scratch, a->chunk));
    if (!a->losses_enqueued) {
        CHECK(backend_memcpy_async(s, a->h_losses, a->losses, (size_t)N * 4, BACKEND_COPY_D2H));
        a->losses_enqueued = true;
    }
    CHECK(zero(s, a->dres, NC * es));
    CHECK(ops_rmsnorm_backward(s, a->dres, tensor_at(m, a, gf, last, 0), a->dsmall, a->x[L],
                               tensor_at(m, a, pf, last, 0), a->rstdf, N, C));
    CHECK(model_release(h, WHO, last, FERRY_PHASE_BACKWARD, s));
    for (int l = L - 1; l >= 0; l--) {
        const act_t *pb;
        act_t *gb;
        CHECK(model_acquire(h, WHO, l + 1, FERRY_PHASE_BACKWARD, s, &pb));
        CHECK(model_acquire_grads(h, WHO, l + 1, s, &gb));
        layer_view p = layer_of(m, a, pb, l + 1), g = layer_of(m, a, gb, l + 1);
        CHECK(layer_backward(m, a, s, l, &p, &g));
        CHECK(model_release(h, WHO, l + 1, FERRY_PHASE_BACKWARD, s));
    }
    if (!tied) {
        CHECK(model_acquire(h, WHO, 0, FERRY_PHASE_BACKWARD, s, &emb));
        CHECK(model_acquire_grads(h, WHO, 0, s, &demb));
    }
    CHECK(ops_encoder_backward(s, tensor_at(m, a, demb, 0, 0), NULL, a->dres, a->tokens, a->B, a->T, C,
                               c->vocab_size, NULL));
    return model_release(h, WHO, 0, FERRY_PHASE_BACKWARD, s);
}

ferry_status llama_loss(llama_activations *a, backend_stream *s, float *loss)
{
    if (!a || !s || !loss)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_loss: NULL argument");
    if (!a->losses_enqueued)
        return err_set(FERRY_ERR_STATE,
                       "llama_loss: no losses computed: run llama_forward with targets (and, with for_backward, "
                       "llama_backward) first");
    CHECK(backend_stream_synchronize(s));
    *loss = model_mean_loss(a->h_losses, a->B * a->T, a->n_valid);
    return FERRY_OK;
}

ferry_status llama_logits(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s, int b,
                          int t, float *logits)
{
    CHECK(check_run(m, a, h, s, "llama_logits"));
    if (!logits)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_logits: logits is NULL");
    if (!a->have_forward)
        return err_set(FERRY_ERR_STATE, "llama_logits: run llama_forward on these activations first");
    if (b < 0 || b >= a->B || t < 0 || t >= a->T)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_logits: position (b = %d, t = %d) is outside the batch [%d x %d]",
                       b, t, a->B, a->T);
    int V = m->cfg.vocab_size, C = m->cfg.n_embd, g = m->head_index < 0 ? 0 : m->num_groups - 1;
    const act_t *w;
    CHECK(model_acquire(h, WHO, g, FERRY_PHASE_FORWARD, s, &w));
    const act_t *head = m->head_index < 0 ? tensor_at(m, a, w, 0, 0) : tensor_at(m, a, w, g, m->head_index);
    const act_t *row = (const char *)a->normf + ((size_t)b * a->T + t) * C * a->es;
    CHECK(ops_matmul_forward(s, a->logits, row, head, NULL, 1, C, V));
    CHECK(ops_convert_to_f32(s, a->logits_f32, a->logits, (size_t)V));
    CHECK(backend_memcpy_async(s, a->h_logits, a->logits_f32, (size_t)V * 4, BACKEND_COPY_D2H));
    CHECK(model_release(h, WHO, g, FERRY_PHASE_FORWARD, s));
    CHECK(backend_stream_synchronize(s));
    memcpy(logits, a->h_logits, (size_t)V * sizeof *logits);
    return FERRY_OK;
}
