/* GPT-2's forward and backward on a backend stream, and the activations they
 * use. Parameters and gradients come group by group from the caller's hooks
 * (models/gpt2.h); activation memory comes from the caller's allocator.
 * Everything runs through ops_* and backend copies, so it runs unchanged on
 * the host and the cuda backend. Layout and init: models/gpt2_layout.c. */
#include "models/gpt2_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Classifier scratch target: chunk rows of Vp logits fit in this many bytes. */
#define GPT2_CLASSIFIER_SCRATCH_BYTES (32u << 20)

#define CHECK(expr)                                                                             \
    do {                                                                                        \
        ferry_status st_ = (expr);                                                              \
        if (st_ != FERRY_OK)                                                                    \
            return st_;                                                                         \
    } while (0)

/* One block's saved activations. */
typedef struct block_acts {
    act_t *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} block_acts;

struct gpt2_activations {
    backend *be;       /* NULL when only planning */
    ferry_dtype act;   /* the storage type */
    size_t es;         /* bytes of one act_t */
    int B, T;
    bool recompute;
    /* the buffers, allocated or (planning) only counted and named */
    model_take tk;
    char who[64];

    act_t **x;          /* [L + 1] residual stream: block l's input is x[l] */
    block_acts *blocks; /* [L], or [1] shared when recomputing */
    act_t *proj;        /* the attention and MLP projections before their residual add */
    act_t *lnf;
    float *lnf_mean, *lnf_rstd;
    float *losses;
    int32_t *tokens, *targets, *pos;
    void *cls_scratch;
    int chunk;
    act_t *logits;
    float *logits_f32;
    act_t *dres, *dbig1, *dbig2, *dsmall; /* backward: residual gradient and scratch */

    int32_t *h_tokens, *h_targets, *h_pos; /* host staging (backend_host_alloc) */
    int32_t *set_pos; /* gpt2_set_positions' copy (malloc'd), or NULL: one example a row */
    bool fwd_packed;  /* the last forward uploaded set_pos to pos (its backward and recompute use it) */
    float *h_losses, *h_logits;
    backend_event *staged; /* the H2D copies out of the staging */

    bool have_forward, have_targets, losses_enqueued;
    int n_valid;
};

/* The positions the ops of the last forward and its backward take: NULL
 * for one example a row (the plain ops, bit for bit). */
static const int32_t *positions(const gpt2_activations *a) { return a->fwd_packed ? a->pos : NULL; }

/* ---- allocation ---- */

#define take(a, out, bytes, ...) model_take_buf(&(a)->tk, (out), (bytes), __VA_ARGS__)

static ferry_status plan_block(gpt2_activations *a, block_acts *k, const gpt2_config *c,
                               const char *who)
{
    size_t N = (size_t)a->B * a->T, C = (size_t)c->n_embd, es = a->es;
    CHECK(take(a, &k->ln1, N * C * es, "%s ln1", who));
    CHECK(take(a, &k->ln1_mean, N * 4, "%s ln1 mean", who));
    CHECK(take(a, &k->ln1_rstd, N * 4, "%s ln1 rstd", who));
    CHECK(take(a, &k->qkv, N * 3 * C * es, "%s qkv", who));
    CHECK(take(a, &k->atty, N * C * es, "%s attention out", who));
    CHECK(take(a, &k->lse, (size_t)a->B * c->n_head * a->T * 4, "%s attention lse", who));
    CHECK(take(a, &k->res2, N * C * es, "%s residual 2", who));
    CHECK(take(a, &k->ln2, N * C * es, "%s ln2", who));
    CHECK(take(a, &k->ln2_mean, N * 4, "%s ln2 mean", who));
    CHECK(take(a, &k->ln2_rstd, N * 4, "%s ln2 rstd", who));
    CHECK(take(a, &k->fch, N * 4 * C * es, "%s mlp fc", who));
    CHECK(take(a, &k->fch_gelu, N * 4 * C * es, "%s mlp gelu", who));
    return FERRY_OK;
}

static ferry_status plan(gpt2_activations *a, const gpt2_config *c)
{
    size_t N = (size_t)a->B * a->T, C = (size_t)c->n_embd, es = a->es;
    int L = c->n_layer;
    for (int l = 0; l <= L; l++)
        CHECK(take(a, &a->x[l], N * C * es, "residual %d", l));
    if (a->recompute) {
        CHECK(plan_block(a, &a->blocks[0], c, "block (recomputed, shared)"));
    } else {
        for (int l = 0; l < L; l++) {
            char who[32];
            snprintf(who, sizeof who, "block %d", l);
            CHECK(plan_block(a, &a->blocks[l], c, who));
        }
    }
    CHECK(take(a, &a->proj, N * C * es, "projection"));
    CHECK(take(a, &a->lnf, N * C * es, "final ln"));
    CHECK(take(a, &a->lnf_mean, N * 4, "final ln mean"));
    CHECK(take(a, &a->lnf_rstd, N * 4, "final ln rstd"));
    CHECK(take(a, &a->losses, N * 4, "losses"));
    CHECK(take(a, &a->tokens, N * 4, "tokens"));
    CHECK(take(a, &a->targets, N * 4, "targets"));
    CHECK(take(a, &a->pos, N * 4, "positions"));
    CHECK(take(a, &a->cls_scratch,
               ops_classifier_scratch_bytes_for(a->act, a->chunk, c->padded_vocab_size, c->n_embd),
               "classifier logits (%d rows)", a->chunk));
    CHECK(take(a, &a->logits, (size_t)c->vocab_size * es, "sampling logits"));
    CHECK(take(a, &a->logits_f32, (size_t)c->vocab_size * 4, "sampling logits fp32"));
    CHECK(take(a, &a->dres, N * C * es, "grad residual"));
    CHECK(take(a, &a->dbig1, N * 4 * C * es, "grad scratch 1"));
    CHECK(take(a, &a->dbig2, N * 4 * C * es, "grad scratch 2"));
    CHECK(take(a, &a->dsmall, N * C * es, "grad scratch 3"));
    return FERRY_OK;
}

static int classifier_chunk(size_t es_scratch_per_row, int N)
{
    size_t rows = GPT2_CLASSIFIER_SCRATCH_BYTES / (es_scratch_per_row ? es_scratch_per_row : 1);
    if (rows < 1)
        rows = 1;
    return rows < (size_t)N ? (int)rows : N;
}

static ferry_status check_shape(const gpt2_model *m, int B, int T)
{
    if (!m)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2 activations: model is NULL");
    if (B < 1 || T < 1 || T > m->cfg.max_seq_len)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 activations: B = %d, T = %d; need B >= 1 and 1 <= T <= max_seq_len "
                       "= %d",
                       B, T, m->cfg.max_seq_len);
    if ((long long)B * T > INT32_MAX) /* ops take the row count as an int */
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 activations: B x T = %lld tokens is too many for one micro-batch",
                       (long long)B * T);
    return FERRY_OK;
}

static void init_shape(gpt2_activations *a, const gpt2_model *m, ferry_dtype act, int B, int T,
                       bool recompute)
{
    a->act = act;
    a->es = dtype_size(act);
    a->B = B;
    a->T = T;
    a->recompute = recompute;
    snprintf(a->who, sizeof a->who, "gpt2 activations (B=%d, T=%d%s)", B, T, recompute ? ", recompute" : "");
    a->tk.who = a->who;
    size_t per_row = (size_t)m->cfg.padded_vocab_size * dtype_size(act); /* one row of logits */
    a->chunk = classifier_chunk(per_row, B * T);
}

size_t gpt2_activations_bytes(const gpt2_model *m, ferry_dtype act, int B, int T, bool recompute)
{
    return gpt2_activations_list(m, act, B, T, recompute, NULL, NULL);
}

size_t gpt2_activations_list(const gpt2_model *m, ferry_dtype act, int B, int T, bool recompute,
                             void (*fn)(void *ctx, const char *what, size_t bytes), void *ctx)
{
    if (!dtype_is_float(act) || check_shape(m, B, T) != FERRY_OK) {
        err_clear();
        return 0;
    }
    gpt2_activations a = {0};
    a.tk.dry = true;
    a.tk.list = fn;
    a.tk.list_ctx = ctx;
    init_shape(&a, m, act, B, T, recompute);
    a.x = calloc((size_t)m->cfg.n_layer + 1, sizeof *a.x);
    a.blocks = calloc(recompute ? 1 : (size_t)m->cfg.n_layer, sizeof *a.blocks);
    size_t bytes = a.x && a.blocks && plan(&a, &m->cfg) == FERRY_OK ? a.tk.bytes : 0;
    free(a.x);
    free(a.blocks);
    return bytes;
}

gpt2_allocator gpt2_backend_allocator(backend *be) { return model_backend_allocator(be); }

static ferry_status host_staging(gpt2_activations *a, const gpt2_config *c)
{
    size_t N = (size_t)a->B * a->T;
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_tokens));
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_targets));
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_pos));
    CHECK(backend_host_alloc(a->be, N * 4, (void **)&a->h_losses));
    CHECK(backend_host_alloc(a->be, (size_t)c->vocab_size * 4, (void **)&a->h_logits));
    return backend_event_create(a->be, &a->staged);
}

ferry_status gpt2_activations_create(const gpt2_model *m, backend *be, int B, int T,
                                     bool recompute, const gpt2_allocator *alloc,
                                     gpt2_activations **out)
{
    if (!out || !be || !alloc || !alloc->alloc || !alloc->free)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2_activations_create: NULL argument (out, backend or allocator)");
    *out = NULL;
    CHECK(check_shape(m, B, T));
    gpt2_activations *a = calloc(1, sizeof *a);
    if (!a)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2 activations: out of host memory");
    a->be = be;
    a->tk.alloc = *alloc;
    init_shape(a, m, backend_act_dtype(be), B, T, recompute);
    a->x = calloc((size_t)m->cfg.n_layer + 1, sizeof *a->x);
    a->blocks = calloc(recompute ? 1 : (size_t)m->cfg.n_layer, sizeof *a->blocks);
    ferry_status st = a->x && a->blocks
                          ? FERRY_OK
                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2 activations: out of host memory");
    if (st == FERRY_OK)
        st = plan(a, &m->cfg);
    if (st == FERRY_OK)
        st = host_staging(a, &m->cfg);
    if (st != FERRY_OK) {
        gpt2_activations_destroy(a);
        return st;
    }
    *out = a;
    return FERRY_OK;
}

void gpt2_activations_destroy(gpt2_activations *a)
{
    if (!a)
        return;
    model_take_free(&a->tk);
    if (a->h_tokens)
        backend_host_free(a->be, a->h_tokens);
    if (a->h_targets)
        backend_host_free(a->be, a->h_targets);
    if (a->h_pos)
        backend_host_free(a->be, a->h_pos);
    free(a->set_pos);
    if (a->h_losses)
        backend_host_free(a->be, a->h_losses);
    if (a->h_logits)
        backend_host_free(a->be, a->h_logits);
    backend_event_destroy(a->staged);
    free(a->x);
    free(a->blocks);
    free(a);
}

/* ---- parameter views ---- */

/* Pointer to tensor i of group g inside a group buffer. */
static act_t *tensor_at(const gpt2_model *m, const gpt2_activations *a, const act_t *base, int g,
                        int i)
{
    return (char *)base + m->groups[g].tensors[i].info.offset * a->es;
}

typedef struct block_view {
    act_t *t[BLK_COUNT];
} block_view;

static block_view block_of(const gpt2_model *m, const gpt2_activations *a, const act_t *base,
                           int g)
{
    block_view v;
    for (int i = 0; i < BLK_COUNT; i++)
        v.t[i] = tensor_at(m, a, base, g, i);
    return v;
}

static ferry_status acquire(const gpt2_hooks *h, int g, ferry_phase phase, backend_stream *s, const act_t **p)
{
    return model_acquire(h, "gpt2", g, phase, s, p);
}

static ferry_status acquire_grads(const gpt2_hooks *h, int g, backend_stream *s, act_t **p)
{
    return model_acquire_grads(h, "gpt2", g, s, p);
}

static ferry_status release(const gpt2_hooks *h, int g, ferry_phase phase, backend_stream *s)
{
    return model_release(h, "gpt2", g, phase, s);
}

/* ---- forward ---- */

static block_acts *acts_of(gpt2_activations *a, int l)
{
    return a->recompute ? &a->blocks[0] : &a->blocks[l];
}

/* Block l from its input x[l]. With write_out, also its output x[l+1]
 * (recomputation in backward needs only the saved activations). */
static ferry_status block_forward(const gpt2_model *m, gpt2_activations *a, backend_stream *s,
                                  int l, const block_view *p, bool write_out)
{
    int B = a->B, T = a->T, N = B * T, C = m->cfg.n_embd, NH = m->cfg.n_head;
    size_t NC = (size_t)N * C;
    block_acts *k = acts_of(a, l);
    const act_t *x = a->x[l];
    CHECK(ops_layernorm_forward(s, k->ln1, k->ln1_mean, k->ln1_rstd, x, p->t[BLK_LN1W],
                                p->t[BLK_LN1B], N, C));
    CHECK(ops_matmul_forward(s, k->qkv, k->ln1, p->t[BLK_QKVW], p->t[BLK_QKVB], N, C, 3 * C));
    CHECK(ops_attention_forward(s, k->atty, k->lse, k->qkv, B, T, C, NH, positions(a)));
    CHECK(ops_matmul_forward(s, a->proj, k->atty, p->t[BLK_ATTPROJW], p->t[BLK_ATTPROJB], N, C, C));
    CHECK(ops_residual_forward(s, k->res2, x, a->proj, NC));
    CHECK(ops_layernorm_forward(s, k->ln2, k->ln2_mean, k->ln2_rstd, k->res2, p->t[BLK_LN2W],
                                p->t[BLK_LN2B], N, C));
    CHECK(ops_matmul_forward(s, k->fch, k->ln2, p->t[BLK_FCW], p->t[BLK_FCB], N, C, 4 * C));
    CHECK(ops_gelu_forward(s, k->fch_gelu, k->fch, NC * 4));
    if (!write_out)
        return FERRY_OK;
    CHECK(ops_matmul_forward(s, a->proj, k->fch_gelu, p->t[BLK_FCPROJW], p->t[BLK_FCPROJB], N,
                             4 * C, C));
    return ops_residual_forward(s, a->x[l + 1], k->res2, a->proj, NC);
}

/* Checks tokens and targets on the host, then copies them to the device
 * through the staging (after the previous copies out of it are done). */
static ferry_status stage_inputs(const gpt2_model *m, gpt2_activations *a, backend_stream *s,
                                 const int32_t *tokens, const int32_t *targets)
{
    int N = a->B * a->T, n_valid = 0;
    CHECK(model_check_batch("gpt2_forward", tokens, targets, a->B, a->T, m->cfg.vocab_size, &n_valid));
    CHECK(backend_event_synchronize(a->staged));
    size_t bytes = (size_t)N * sizeof(int32_t);
    memcpy(a->h_tokens, tokens, bytes);
    CHECK(backend_memcpy_async(s, a->tokens, a->h_tokens, bytes, BACKEND_COPY_H2D));
    if (targets) {
        memcpy(a->h_targets, targets, bytes);
        CHECK(backend_memcpy_async(s, a->targets, a->h_targets, bytes, BACKEND_COPY_H2D));
    }
    if (a->set_pos) {
        memcpy(a->h_pos, a->set_pos, bytes);
        CHECK(backend_memcpy_async(s, a->pos, a->h_pos, bytes, BACKEND_COPY_H2D));
    }
    a->fwd_packed = a->set_pos != NULL;
    CHECK(backend_event_record(a->staged, s));
    a->n_valid = n_valid;
    a->have_targets = targets != NULL;
    return FERRY_OK;
}

ferry_status gpt2_set_positions(gpt2_activations *a, const int32_t *pos)
{
    if (!a)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_set_positions: activations are NULL");
    return model_keep_positions("gpt2_set_positions", &a->set_pos, pos, a->B, a->T);
}

static float loss_grad_scale(const gpt2_activations *a, float grad_scale)
{
    return a->n_valid > 0 ? grad_scale / (float)a->n_valid : 0.0f;
}

static ferry_status check_run(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h, backend_stream *s, const char *who)
{
    return model_check_run(who, m, a, s, a ? a->be : NULL, h);
}

ferry_status gpt2_forward(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h,
                          backend_stream *s, const int32_t *tokens, const int32_t *targets,
                          bool for_backward)
{
    CHECK(check_run(m, a, h, s, "gpt2_forward"));
    if (!tokens)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_forward: tokens is NULL");
    const gpt2_config *c = &m->cfg;
    int L = c->n_layer, N = a->B * a->T, C = c->n_embd;
    a->have_forward = false;
    a->losses_enqueued = false;
    CHECK(stage_inputs(m, a, s, tokens, targets));

    const act_t *emb;
    CHECK(acquire(h, 0, FERRY_PHASE_FORWARD, s, &emb));
    CHECK(ops_encoder_forward(s, a->x[0], a->tokens, tensor_at(m, a, emb, 0, EMB_WTE),
                              tensor_at(m, a, emb, 0, EMB_WPE), a->B, a->T, C, m->cfg.vocab_size, positions(a)));
    for (int l = 0; l < L; l++) {
        const act_t *pb;
        CHECK(acquire(h, l + 1, FERRY_PHASE_FORWARD, s, &pb));
        block_view p = block_of(m, a, pb, l + 1);
        CHECK(block_forward(m, a, s, l, &p, true));
        CHECK(release(h, l + 1, FERRY_PHASE_FORWARD, s));
    }
    const act_t *pf;
    CHECK(acquire(h, L + 1, FERRY_PHASE_FORWARD, s, &pf));
    CHECK(ops_layernorm_forward(s, a->lnf, a->lnf_mean, a->lnf_rstd, a->x[L],
                                tensor_at(m, a, pf, L + 1, LNF_W), tensor_at(m, a, pf, L + 1, LNF_B),
                                N, C));
    CHECK(release(h, L + 1, FERRY_PHASE_FORWARD, s));
    if (targets && !for_backward) {
        CHECK(ops_classifier(s, a->losses, NULL, NULL, a->lnf, tensor_at(m, a, emb, 0, EMB_WTE),
                             a->targets, 0.0f, N, C, c->vocab_size, c->padded_vocab_size,
                             a->cls_scratch, a->chunk));
        CHECK(backend_memcpy_async(s, a->h_losses, a->losses, (size_t)N * 4, BACKEND_COPY_D2H));
        a->losses_enqueued = true;
    }
    CHECK(release(h, 0, FERRY_PHASE_FORWARD, s));
    a->have_forward = true;
    return FERRY_OK;
}

/* ---- backward ---- */

static ferry_status zero(backend_stream *s, act_t *p, size_t bytes)
{
    return backend_memset_async(s, p, 0, bytes);
}

/* On entry a->dres holds the gradient of block l's output; on exit, of its
 * input. Parameter gradients add into g. */
static ferry_status block_backward(const gpt2_model *m, gpt2_activations *a, backend_stream *s,
                                   int l, const block_view *p, const block_view *g)
{
    int B = a->B, T = a->T, N = B * T, C = m->cfg.n_embd, NH = m->cfg.n_head;
    size_t NC = (size_t)N * C, es = a->es;
    block_acts *k = acts_of(a, l);
    if (a->recompute)
        CHECK(block_forward(m, a, s, l, p, false));
    /* MLP: out = x2 + fcproj(gelu(fc(ln2(x2)))) with x2 = res2 */
    CHECK(zero(s, a->dbig1, NC * 4 * es));
    CHECK(ops_matmul_backward(s, a->dbig1, g->t[BLK_FCPROJW], g->t[BLK_FCPROJB], a->dres,
                              k->fch_gelu, p->t[BLK_FCPROJW], N, 4 * C, C));
    CHECK(zero(s, a->dbig2, NC * 4 * es));
    CHECK(ops_gelu_backward(s, a->dbig2, k->fch, a->dbig1, NC * 4));
    CHECK(zero(s, a->dsmall, NC * es));
    CHECK(ops_matmul_backward(s, a->dsmall, g->t[BLK_FCW], g->t[BLK_FCB], a->dbig2, k->ln2,
                              p->t[BLK_FCW], N, C, 4 * C));
    CHECK(ops_layernorm_backward(s, a->dres, g->t[BLK_LN2W], g->t[BLK_LN2B], a->dsmall, k->res2,
                                 p->t[BLK_LN2W], k->ln2_mean, k->ln2_rstd, N, C));
    /* attention: x2 = x + attproj(attn(qkv(ln1(x)))) */
    CHECK(zero(s, a->dsmall, NC * es));
    CHECK(ops_matmul_backward(s, a->dsmall, g->t[BLK_ATTPROJW], g->t[BLK_ATTPROJB], a->dres,
                              k->atty, p->t[BLK_ATTPROJW], N, C, C));
    CHECK(zero(s, a->dbig1, NC * 3 * es));
    /* dbig2 (the MLP's gradient, spent) holds the backward's delta: B NH T floats <= N 4C of 16 bits. */
    CHECK(ops_attention_backward(s, a->dbig1, a->dsmall, k->qkv, k->atty, k->lse, (float *)a->dbig2, B,
                                 T, C, NH, positions(a)));
    CHECK(zero(s, a->dsmall, NC * es));
    CHECK(ops_matmul_backward(s, a->dsmall, g->t[BLK_QKVW], g->t[BLK_QKVB], a->dbig1, k->ln1,
                              p->t[BLK_QKVW], N, C, 3 * C));
    return ops_layernorm_backward(s, a->dres, g->t[BLK_LN1W], g->t[BLK_LN1B], a->dsmall, a->x[l],
                                  p->t[BLK_LN1W], k->ln1_mean, k->ln1_rstd, N, C);
}

ferry_status gpt2_backward(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h,
                           backend_stream *s, float grad_scale)
{
    CHECK(check_run(m, a, h, s, "gpt2_backward"));
    if (!a->have_forward || !a->have_targets)
        return err_set(FERRY_ERR_STATE,
                       "gpt2_backward: needs a gpt2_forward with targets on these activations "
                       "first");
    const gpt2_config *c = &m->cfg;
    int L = c->n_layer, N = a->B * a->T, C = c->n_embd;
    size_t NC = (size_t)N * C, es = a->es;
    a->have_forward = false; /* saved activations are consumed (and overwritten by recompute) */

    const act_t *emb;
    act_t *demb;
    CHECK(acquire(h, 0, FERRY_PHASE_BACKWARD, s, &emb));
    CHECK(acquire_grads(h, 0, s, &demb));
    const act_t *pf;
    act_t *gf;
    CHECK(acquire(h, L + 1, FERRY_PHASE_BACKWARD, s, &pf));
    CHECK(acquire_grads(h, L + 1, s, &gf));
    /* the tied head: losses and d(lnf) in one pass, d(wte) into group 0 */
    CHECK(zero(s, a->dsmall, NC * es));
    CHECK(ops_classifier(s, a->losses, a->dsmall, tensor_at(m, a, demb, 0, EMB_WTE), a->lnf,
                         tensor_at(m, a, emb, 0, EMB_WTE), a->targets,
                         loss_grad_scale(a, grad_scale), N, C, c->vocab_size,
                         c->padded_vocab_size, a->cls_scratch, a->chunk));
    if (!a->losses_enqueued) {
        CHECK(backend_memcpy_async(s, a->h_losses, a->losses, (size_t)N * 4, BACKEND_COPY_D2H));
        a->losses_enqueued = true;
    }
    CHECK(zero(s, a->dres, NC * es));
    CHECK(ops_layernorm_backward(s, a->dres, tensor_at(m, a, gf, L + 1, LNF_W),
                                 tensor_at(m, a, gf, L + 1, LNF_B), a->dsmall, a->x[L],
                                 tensor_at(m, a, pf, L + 1, LNF_W), a->lnf_mean, a->lnf_rstd, N,
                                 C));
    CHECK(release(h, L + 1, FERRY_PHASE_BACKWARD, s));
    for (int l = L - 1; l >= 0; l--) {
        const act_t *pb;
        act_t *gb;
        CHECK(acquire(h, l + 1, FERRY_PHASE_BACKWARD, s, &pb));
        CHECK(acquire_grads(h, l + 1, s, &gb));
        block_view p = block_of(m, a, pb, l + 1), g = block_of(m, a, gb, l + 1);
        CHECK(block_backward(m, a, s, l, &p, &g));
        CHECK(release(h, l + 1, FERRY_PHASE_BACKWARD, s));
    }
    CHECK(ops_encoder_backward(s, tensor_at(m, a, demb, 0, EMB_WTE),
                               tensor_at(m, a, demb, 0, EMB_WPE), a->dres, a->tokens, a->B, a->T,
                               C, m->cfg.vocab_size, positions(a)));
    return release(h, 0, FERRY_PHASE_BACKWARD, s);
}

ferry_status gpt2_loss(gpt2_activations *a, backend_stream *s, float *loss)
{
    if (!a || !s || !loss)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_loss: NULL argument");
    if (!a->losses_enqueued)
        return err_set(FERRY_ERR_STATE,
                       "gpt2_loss: no losses computed: run gpt2_forward with targets (and, with "
                       "for_backward, gpt2_backward) first");
    CHECK(backend_stream_synchronize(s));
    *loss = model_mean_loss(a->h_losses, a->B * a->T, a->n_valid);
    return FERRY_OK;
}

ferry_status gpt2_logits(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h,
                         backend_stream *s, int b, int t, float *logits)
{
    CHECK(check_run(m, a, h, s, "gpt2_logits"));
    if (!logits)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_logits: logits is NULL");
    if (!a->have_forward)
        return err_set(FERRY_ERR_STATE, "gpt2_logits: run gpt2_forward on these activations first");
    if (b < 0 || b >= a->B || t < 0 || t >= a->T)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2_logits: position (b = %d, t = %d) is outside the batch [%d x %d]", b,
                       t, a->B, a->T);
    int V = m->cfg.vocab_size, C = m->cfg.n_embd;
    const act_t *emb;
    CHECK(acquire(h, 0, FERRY_PHASE_FORWARD, s, &emb));
    const act_t *row = (const char *)a->lnf + ((size_t)b * a->T + t) * C * a->es;
    CHECK(ops_matmul_forward(s, a->logits, row, tensor_at(m, a, emb, 0, EMB_WTE), NULL, 1, C, V));
    CHECK(ops_convert_to_f32(s, a->logits_f32, a->logits, (size_t)V));
    CHECK(backend_memcpy_async(s, a->h_logits, a->logits_f32, (size_t)V * 4, BACKEND_COPY_D2H));
    CHECK(release(h, 0, FERRY_PHASE_FORWARD, s));
    CHECK(backend_stream_synchronize(s));
    memcpy(logits, a->h_logits, (size_t)V * sizeof *logits);
    return FERRY_OK;
}
