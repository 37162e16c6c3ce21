/* The key/value cache and its runs (models/lmodel_decode.h): allocation
 * (one planner both counts and takes the buffers), the tokens' checks and
 * staging, the prompt's chunks, the capacity's checks and the logits' way
 * back to the host. The layers are each family's (models/llama_decode.c,
 * models/gpt2_decode.c). */
#include "models/lmodel_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "models/model_kv.h"

#define CHECK(expr)                                                                                                    \
    do {                                                                                                               \
        ferry_status st_ = (expr);                                                                                     \
        if (st_ != FERRY_OK)                                                                                           \
            return st_;                                                                                                \
    } while (0)

#define DEFAULT_CHUNK 64

#define take(kv, out, bytes, ...) model_take_buf(&(kv)->tk, (out), (bytes), __VA_ARGS__)

static model_kv_shape shape_of(const lmodel *m)
{
    return lmodel_llama(m) ? llama_kv_shape(lmodel_llama(m)) : gpt2_kv_shape(lmodel_gpt2(m));
}

static ferry_status check_args(const lmodel *m, int B, int Tmax, int chunk)
{
    if (!m)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "kv cache: model is NULL");
    if (B < 1 || Tmax < 1 || Tmax > lmodel_context(m))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "kv cache: B = %d rows of Tmax = %d positions; need B >= 1 and 1 <= Tmax <= the model's "
                       "context, %d", B, Tmax, lmodel_context(m));
    if (chunk < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "kv cache: prefill chunk %d; give 0 (the default) or more", chunk);
    model_kv_shape sh = shape_of(m);
    if (sh.HS > 256)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "kv cache: head size %d; the cache's attention takes heads of at most 256", sh.HS);
    const llama_model *l = lmodel_llama(m);
    if (l && llama_get_config(l)->sliding_window > 0 && Tmax > llama_get_config(l)->sliding_window)
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "kv cache: %d positions is more than the model's sliding_window = %d, and the cache's "
                       "attention is full causal: generate at most %d positions",
                       Tmax, llama_get_config(l)->sliding_window, llama_get_config(l)->sliding_window);
    return FERRY_OK;
}

static void init_shape(lmodel_kv *kv, const lmodel *m, ferry_dtype act, int B, int Tmax, int chunk)
{
    kv->act = act;
    kv->es = dtype_size(act);
    kv->sh = shape_of(m);
    kv->B = B;
    kv->Tmax = Tmax;
    kv->chunk = chunk > 0 ? (chunk < Tmax ? chunk : Tmax) : (Tmax < DEFAULT_CHUNK ? Tmax : DEFAULT_CHUNK);
    snprintf(kv->who, sizeof kv->who, "kv cache (B=%d, Tmax=%d)", B, Tmax);
    kv->tk.who = kv->who;
}

static ferry_status plan(lmodel_kv *kv)
{
    const model_kv_shape *sh = &kv->sh;
    size_t es = kv->es, R = (size_t)kv->B * kv->chunk, C = (size_t)sh->C, Q = (size_t)sh->NH * sh->HS;
    size_t cache = (size_t)kv->B * sh->NKV * kv->Tmax * sh->HS * es;
    for (int l = 0; l < sh->L; l++) {
        CHECK(take(kv, &kv->k[l], cache, "layer %d keys", l));
        CHECK(take(kv, &kv->v[l], cache, "layer %d values", l));
    }
    CHECK(take(kv, &kv->x, R * C * es, "residual"));
    CHECK(take(kv, &kv->res, R * C * es, "residual after attention"));
    CHECK(take(kv, &kv->norm, R * C * es, "norm"));
    CHECK(take(kv, &kv->qkv, R * sh->qkv * es, "qkv projection"));
    CHECK(take(kv, &kv->q, R * Q * es, "queries"));
    CHECK(take(kv, &kv->att, R * Q * es, "attention out"));
    CHECK(take(kv, &kv->proj, R * C * es, "projection"));
    CHECK(take(kv, &kv->mlp1, R * sh->mlp1 * es, "mlp 1"));
    CHECK(take(kv, &kv->mlp2, R * sh->mlp2 * es, "mlp 2"));
    CHECK(take(kv, &kv->mean, R * 4, "norm mean"));
    CHECK(take(kv, &kv->rstd, R * 4, "norm rstd"));
    CHECK(take(kv, &kv->last, (size_t)kv->B * C * es, "last positions"));
    CHECK(take(kv, &kv->logits, (size_t)kv->B * sh->V * es, "logits"));
    CHECK(take(kv, &kv->logits_f32, (size_t)kv->B * sh->V * 4, "logits fp32"));
    CHECK(take(kv, &kv->inv_freq, (size_t)(sh->HS / 2 > 0 ? sh->HS / 2 : 1) * 4, "rotary frequencies"));
    return take(kv, &kv->tokens, R * 4, "tokens");
}

size_t lmodel_kv_bytes(const lmodel *m, ferry_dtype act, int B, int Tmax, int chunk)
{
    if (!dtype_is_float(act) || check_args(m, B, Tmax, chunk) != FERRY_OK) {
        err_clear();
        return 0;
    }
    lmodel_kv kv = {0};
    kv.tk.dry = true;
    init_shape(&kv, m, act, B, Tmax, chunk);
    kv.k = calloc((size_t)kv.sh.L, sizeof *kv.k);
    kv.v = calloc((size_t)kv.sh.L, sizeof *kv.v);
    size_t bytes = kv.k && kv.v && plan(&kv) == FERRY_OK ? kv.tk.bytes : 0;
    free(kv.k);
    free(kv.v);
    err_clear();
    return bytes;
}

static ferry_status host_staging(lmodel_kv *kv, const lmodel *m, backend_stream *s)
{
    size_t R = (size_t)kv->B * kv->chunk, half = (size_t)kv->sh.HS / 2;
    CHECK(backend_host_alloc(kv->be, R * 4, (void **)&kv->h_tokens));
    CHECK(backend_host_alloc(kv->be, (size_t)kv->B * kv->sh.V * 4, (void **)&kv->h_logits));
    if (!lmodel_llama(m))
        return FERRY_OK;
    CHECK(backend_host_alloc(kv->be, half * 4, (void **)&kv->h_freq));
    llama_rope_inv_freq(llama_get_config(lmodel_llama(m)), kv->h_freq);
    CHECK(backend_memcpy_async(s, kv->inv_freq, kv->h_freq, half * 4, BACKEND_COPY_H2D));
    return backend_stream_synchronize(s);
}

ferry_status lmodel_kv_create(const lmodel *m, backend *be, int B, int Tmax, int chunk, const model_allocator *alloc,
                              lmodel_kv **out)
{
    if (!out || !be || !alloc || !alloc->alloc || !alloc->free)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "lmodel_kv_create: NULL argument (out, backend or allocator)");
    *out = NULL;
    CHECK(check_args(m, B, Tmax, chunk));
    lmodel_kv *kv = calloc(1, sizeof *kv);
    if (!kv)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "kv cache: out of host memory");
    kv->be = be;
    kv->tk.alloc = *alloc;
    init_shape(kv, m, backend_act_dtype(be), B, Tmax, chunk);
    kv->k = calloc((size_t)kv->sh.L, sizeof *kv->k);
    kv->v = calloc((size_t)kv->sh.L, sizeof *kv->v);
    ferry_status st = kv->k && kv->v ? plan(kv) : err_set(FERRY_ERR_OUT_OF_MEMORY, "kv cache: out of host memory");
    backend_stream *s = NULL;
    if (st == FERRY_OK)
        st = backend_stream_create(be, "kv cache setup", &s);
    if (st == FERRY_OK)
        st = host_staging(kv, m, s);
    backend_stream_destroy(s);
    if (st != FERRY_OK) {
        lmodel_kv_destroy(kv);
        return st;
    }
    *out = kv;
    return FERRY_OK;
}

void lmodel_kv_destroy(lmodel_kv *kv)
{
    if (!kv)
        return;
    model_take_free(&kv->tk);
    void *staging[] = {kv->h_tokens, kv->h_logits, kv->h_freq};
    for (size_t i = 0; i < sizeof staging / sizeof staging[0]; i++)
        if (staging[i])
            backend_host_free(kv->be, staging[i]);
    free(kv->k);
    free(kv->v);
    free(kv);
}

int lmodel_kv_len(const lmodel_kv *kv) { return kv->len; }
int lmodel_kv_capacity(const lmodel_kv *kv) { return kv->Tmax; }
int lmodel_kv_batch(const lmodel_kv *kv) { return kv->B; }
void lmodel_kv_reset(lmodel_kv *kv) { kv->len = 0; }

static ferry_status check_run(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                              const int32_t *tokens, float *logits, const char *who)
{
    CHECK(model_check_run(who, m, kv, s, kv ? kv->be : NULL, h));
    if (!tokens || !logits)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: tokens or logits is NULL", who);
    model_kv_shape sh = shape_of(m);
    if (sh.L != kv->sh.L || sh.C != kv->sh.C || sh.NKV != kv->sh.NKV || sh.HS != kv->sh.HS || sh.V != kv->sh.V)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: the cache was made for another model's shape", who);
    return FERRY_OK;
}

/* n tokens of each row (row b's at src[b stride + t0 ..]) through the
 * family's layers at positions kv->len.., then the logits to the host. */
static ferry_status run_rows(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                             const int32_t *src, int stride, int t0, int n, float *logits)
{
    for (int b = 0; b < kv->B; b++)
        memcpy(kv->h_tokens + (size_t)b * n, src + (size_t)b * stride + t0, (size_t)n * sizeof *src);
    CHECK(backend_memcpy_async(s, kv->tokens, kv->h_tokens, (size_t)kv->B * n * 4, BACKEND_COPY_H2D));
    ferry_status st = lmodel_llama(m) ? llama_decode_rows(lmodel_llama(m), kv, h, s, n)
                                      : gpt2_decode_rows(lmodel_gpt2(m), kv, h, s, n);
    if (st == FERRY_OK && logits)
        st = backend_memcpy_async(s, kv->h_logits, kv->logits_f32, (size_t)kv->B * kv->sh.V * 4, BACKEND_COPY_D2H);
    /* the staging is reused by the next call: the stream drains here */
    ferry_status sync = backend_stream_synchronize(s);
    CHECK(st);
    CHECK(sync);
    kv->len += n;
    if (logits)
        memcpy(logits, kv->h_logits, (size_t)kv->B * kv->sh.V * sizeof *logits);
    return FERRY_OK;
}

ferry_status lmodel_prefill(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                            const int32_t *tokens, int T, float *logits)
{
    CHECK(check_run(m, kv, h, s, tokens, logits, "lmodel_prefill"));
    if (T < 1 || T > kv->Tmax)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "lmodel_prefill: a prompt of %d tokens does not fit the cache's %d positions (give 1 to %d "
                       "tokens, or make the cache larger)", T, kv->Tmax, kv->Tmax);
    int n_valid = 0;
    CHECK(model_check_batch("lmodel_prefill", tokens, NULL, kv->B, T, kv->sh.V, &n_valid));
    kv->len = 0;
    for (int t0 = 0; t0 < T; t0 += kv->chunk) {
        int n = T - t0 < kv->chunk ? T - t0 : kv->chunk;
        ferry_status st = run_rows(m, kv, h, s, tokens, T, t0, n, t0 + n == T ? logits : NULL);
        if (st != FERRY_OK) {
            kv->len = 0; /* a cache half filled is no prompt's */
            return st;
        }
    }
    return FERRY_OK;
}

ferry_status lmodel_decode_step(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                                const int32_t *tokens, float *logits)
{
    CHECK(check_run(m, kv, h, s, tokens, logits, "lmodel_decode_step"));
    if (kv->len == 0)
        return err_set(FERRY_ERR_STATE, "lmodel_decode_step: the cache is empty: run lmodel_prefill first");
    if (kv->len >= kv->Tmax)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "lmodel_decode_step: the cache is full: its %d positions hold the prompt and the tokens so "
                       "far; make it larger (a longer context) or generate fewer tokens", kv->Tmax);
    int n_valid = 0;
    CHECK(model_check_batch("lmodel_decode_step", tokens, NULL, kv->B, 1, kv->sh.V, &n_valid));
    return run_rows(m, kv, h, s, tokens, 1, 0, 1, logits);
}
