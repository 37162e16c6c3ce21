/* Sampling: see sample.h. */
#include "train/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/intree.h"
#include "models/model_engine.h"


static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Token a ranks before token b: a larger logit, or the same logit and a
 * smaller index; NaN ranks last. */
static bool ranks_before(const float *l, int a, int b)
{
    float x = l[a], y = l[b];
    if (isnan(x) || isnan(y))
        return isnan(x) == isnan(y) ? a < b : isnan(y);
    return x != y ? x > y : a < b;
}

/* Restores the heap below `at`: every parent ranks after its children, so
 * the root is the kept token that ranks last. */
static void sift_down(const float *l, int *h, int n, int at)
{
    for (;;) {
        int last = at;
        for (int c = 2 * at + 1; c <= 2 * at + 2 && c < n; c++)
            if (ranks_before(l, h[last], h[c]))
                last = c;
        if (last == at)
            return;
        int tmp = h[at];
        h[at] = h[last];
        h[last] = tmp;
        at = last;
    }
}

int sampler_top_k(const float *logits, int V, int k, int *idx)
{
    if (k > V)
        k = V;
    for (int i = 0; i < k; i++)
        idx[i] = i;
    for (int at = k / 2 - 1; at >= 0; at--)
        sift_down(logits, idx, k, at);
    for (int i = k; i < V; i++)
        if (ranks_before(logits, i, idx[0])) {
            idx[0] = i;
            sift_down(logits, idx, k, 0);
        }
    /* Heapsort: the root, ranking last, goes to the end each time. */
    for (int end = k - 1; end > 0; end--) {
        int tmp = idx[0];
        idx[0] = idx[end];
        idx[end] = tmp;
        sift_down(logits, idx, end, 0);
    }
    return k;
}

/* Nucleus cut: the first `keep` of p[n] whose sum reaches top_p. */
static int nucleus(double top_p, const double *p, int n)
{
    double c = 0;
    for (int i = 0; i < n; i++) {
        c += p[i];
        if (c >= top_p)
            return i + 1;
    }
    return n;
}

static int kept_room(const sampler *s, int V)
{
    return s->temperature <= 0.0f ? 1 : s->top_k > 0 && s->top_k < V ? s->top_k : V;
}

int sampler_kept(const sampler *s, const float *logits, int V, int *idx, double *p)
{
    int n = sampler_top_k(logits, V, kept_room(s, V), idx);
    double sum = 0, t = s->temperature > 0.0f ? s->temperature : 1.0f;
    for (int i = 0; i < n; i++)
        sum += p[i] = exp(((double)logits[idx[i]] - (double)logits[idx[0]]) / t);
    for (int i = 0; i < n; i++)
        p[i] /= sum;
    if (s->top_p > 0.0f && s->top_p < 1.0f) {
        n = nucleus(s->top_p, p, n);
        sum = 0;
        for (int i = 0; i < n; i++)
            sum += p[i];
        for (int i = 0; i < n; i++)
            p[i] /= sum;
    }
    return n;
}

int sampler_pick(sampler *s, const float *logits, int V)
{
    int room = kept_room(s, V);
    int *idx = malloc((size_t)room * sizeof *idx);
    double *p = malloc((size_t)room * sizeof *p);
    if (!idx || !p) {
        free(idx);
        free(p);
        return -1;
    }
    int n = sampler_kept(s, logits, V, idx, p);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += p[i];
    double u = (double)(next_u64(&s->rng) >> 11) * 0x1.0p-53 * sum;
    int pick = idx[n - 1];
    for (int i = 0; i < n; i++) {
        if (u < p[i]) {
            pick = idx[i];
            break;
        }
        u -= p[i];
    }
    free(idx);
    free(p);
    return pick;
}

static ferry_status push(tok_ids *ids, int token)
{
    if (ids->len == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        uint32_t *grown = realloc(ids->ids, cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
        ids->ids = grown;
        ids->cap = cap;
    }
    ids->ids[ids->len++] = (uint32_t)token;
    return FERRY_OK;
}

/* Where s->stop_text starts in the text of ids[from..] (-1: nowhere, or no stop text). */
static ferry_status stop_at(const sampler *s, const tok_tokenizer *tok, const uint32_t *ids, size_t n, long *at)
{
    *at = -1;
    if (!s->stop_text || !*s->stop_text || n == 0)
        return FERRY_OK;
    if (!tok)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sampling: a stop text needs the tokenizer to read the tokens");
    char *text = NULL;
    size_t len = 0;
    ferry_status st = tok_decode(tok, ids, n, &text, &len);
    if (st != FERRY_OK)
        return st;
    const char *hit = strstr(text, s->stop_text);
    *at = hit ? (long)(hit - text) : -1;
    free(text);
    return FERRY_OK;
}

/* Whether to end before the next token: the flag, or the ranks' agreement. */
static ferry_status should_end(sampler *s, bool *end)
{
    *end = s->stop && atomic_load(s->stop);
    if (!*end && s->before_token)
        return s->before_token(s->before_token_ctx, end);
    return FERRY_OK;
}

/* The token picked from logits appended, unless it ends generation (the
 * end-of-sequence token, or the text reaching the stop string). */
static ferry_status take_token(sampler *s, const tok_tokenizer *tok, tok_ids *ids, size_t prompt_len, const float *logits,
                               int V, bool *done)
{
    int next = sampler_pick(s, logits, V);
    if (next < 0)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    *done = next == s->eos;
    if (*done)
        return FERRY_OK;
    ferry_status st = push(ids, next);
    long at = -1;
    if (st == FERRY_OK)
        st = stop_at(s, tok, ids->ids + prompt_len, ids->len - prompt_len, &at);
    *done = at >= 0;
    return st;
}

ferry_status sample_generate(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *stream,
                             const tok_tokenizer *tok, tok_ids *ids, int n, sampler *s)
{
    if (!m || !kv || !h || !stream || !ids || !s || n < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sample_generate: NULL argument or n = %d < 0", n);
    if (lmodel_kv_batch(kv) != 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sample_generate: the cache has %d rows; generation uses one",
                       lmodel_kv_batch(kv));
    size_t prompt_len = ids->len, cap = (size_t)lmodel_kv_capacity(kv);
    if (prompt_len < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "sample_generate: the prompt has no token");
    if (n > 0 && prompt_len + (size_t)n - 1 > cap)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "sampling: a prompt of %zu tokens and %d new ones need %zu positions of the key/value cache, "
                       "which holds %zu: shorten the prompt or generate fewer tokens",
                       prompt_len, n, prompt_len + (size_t)n - 1, cap);
    int V = lmodel_vocab(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *prompt = malloc(prompt_len * sizeof *prompt);
    ferry_status st = logits && prompt ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    for (size_t j = 0; st == FERRY_OK && j < prompt_len; j++)
        prompt[j] = (int32_t)ids->ids[j];
    bool done = false;
    for (int i = 0; i < n && st == FERRY_OK && !done; i++) {
        if ((st = should_end(s, &done)) != FERRY_OK || done)
            break;
        int32_t last = (int32_t)ids->ids[ids->len - 1];
        st = i == 0 ? lmodel_prefill(m, kv, h, stream, prompt, (int)prompt_len, logits)
                    : lmodel_decode_step(m, kv, h, stream, &last, logits);
        if (st == FERRY_OK)
            st = take_token(s, tok, ids, prompt_len, logits, V, &done);
    }
    free(prompt);
    free(logits);
    return st;
}

ferry_status sample_generate_recompute(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *stream,
                                       int B, int T, const tok_tokenizer *tok, tok_ids *ids, int n, sampler *s)
{
    if (!m || !a || !h || !stream || !ids || !s || n < 0 || B < 1 || T < 1 || ids->len < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "sample_generate_recompute: NULL argument, an empty prompt, n = %d < 0 or B = %d, T = %d "
                       "below 1", n, B, T);
    int V = lmodel_vocab(m);
    size_t prompt_len = ids->len;
    int32_t *tokens = malloc((size_t)B * (size_t)T * sizeof *tokens);
    float *logits = malloc((size_t)V * sizeof *logits);
    ferry_status st = tokens && logits ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    bool done = false;
    for (int i = 0; i < n && st == FERRY_OK && !done; i++) {
        if ((st = should_end(s, &done)) != FERRY_OK || done)
            break;
        size_t len = ids->len, start = len > (size_t)T ? len - (size_t)T : 0, used = len - start;
        for (size_t j = 0; j < (size_t)B * (size_t)T; j++)
            tokens[j] = (int32_t)TOK_GPT2_EOT % V;
        for (size_t j = 0; j < used; j++)
            tokens[j] = (int32_t)ids->ids[start + j];
        st = lmodel_forward(m, a, h, stream, tokens, NULL, false);
        if (st == FERRY_OK)
            st = lmodel_logits(m, a, h, stream, 0, (int)used - 1, logits);
        if (st == FERRY_OK)
            st = take_token(s, tok, ids, prompt_len, logits, V, &done);
    }
    free(tokens);
    free(logits);
    return st;
}

/* The text of ids, cut before the stop text in what follows the prompt. */
static ferry_status text_of(const sampler *s, const tok_tokenizer *tok, const tok_ids *ids, size_t skip, size_t prompt_len,
                            char **text)
{
    size_t len = 0, plen = 0;
    char *prompt_text = NULL;
    ferry_status st = tok_decode(tok, ids->ids + skip, prompt_len - skip, &prompt_text, &plen);
    free(prompt_text);
    if (st == FERRY_OK)
        st = tok_decode(tok, ids->ids + skip, ids->len - skip, text, &len);
    long at = -1;
    if (st == FERRY_OK)
        st = stop_at(s, tok, ids->ids + prompt_len, ids->len - prompt_len, &at);
    if (st == FERRY_OK && at >= 0)
        (*text)[plen + (size_t)at] = '\0';
    return st;
}

/* The prompt's tokens, the generation (between begin and end when e is
 * not NULL), and the text. */
static ferry_status sample_on(ferry_engine *e, const lmodel *m, lmodel_kv *kv, lmodel_acts *a, const model_hooks *h,
                              backend_stream *stream, int B, int T, tok_tokenizer *tok, const char *prompt, int n,
                              sampler *s, char **text)
{
    tok_ids ids = {0};
    ferry_status st = FERRY_OK;
    int64_t bos = tok_bos(tok);
    bool empty = !prompt || !*prompt;
    size_t skip = bos >= 0 && (empty || bos != tok_eos(tok)) ? 1 : 0; /* the BOS added: not part of the text */
    if (skip)
        st = push(&ids, (int)bos);
    if (st == FERRY_OK && !empty)
        st = tok_encode(tok, prompt, strlen(prompt), &ids);
    if (st == FERRY_OK && ids.len == 0)
        st = err_set(FERRY_ERR_INVALID_ARGUMENT, "sampling needs a prompt or a tokenizer with a BOS token, and "
                                                 "%s has none", tok_describe(tok));
    size_t prompt_len = ids.len;
    if (st == FERRY_OK && (!e || (st = ferry_engine_begin_inference(e)) == FERRY_OK)) {
        /* More than the cache holds (a long or endless sample) goes by the window, as before the cache. */
        bool fits = kv && (n < 1 || ids.len + (size_t)n - 1 <= (size_t)lmodel_kv_capacity(kv));
        st = fits || !a ? sample_generate(m, kv, h, stream, tok, &ids, n, s)
                        : sample_generate_recompute(m, a, h, stream, B, T, tok, &ids, n, s);
        ferry_status end = e ? ferry_engine_end_inference(e) : FERRY_OK;
        if (st == FERRY_OK)
            st = end;
    }
    if (st == FERRY_OK)
        st = text_of(s, tok, &ids, skip, prompt_len, text);
    tok_ids_free(&ids);
    return st;
}

ferry_status sample_text(ferry_engine *e, const lmodel *m, lmodel_kv *kv, lmodel_acts *a, int B, int T, tok_tokenizer *tok,
                         const char *prompt, int n, sampler *s, char **text)
{
    model_hooks hooks = model_engine_hooks(e);
    return sample_on(e, m, kv, a, &hooks, engine_embed_stream(e), B, T, tok, prompt, n, s, text);
}

ferry_status sample_text_hooks(const lmodel *m, lmodel_kv *kv, lmodel_acts *a, const model_hooks *hooks,
                               backend_stream *stream, int B, int T, tok_tokenizer *tok, const char *prompt, int n,
                               sampler *s, char **text)
{
    return sample_on(NULL, m, kv, a, hooks, stream, B, T, tok, prompt, n, s, text);
}
