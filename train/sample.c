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

int sampler_pick(sampler *s, const float *logits, int V)
{
    int k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (s->temperature <= 0.0f)
        k = 1;
    int *idx = malloc((size_t)k * sizeof *idx);
    double *p = malloc((size_t)k * sizeof *p);
    if (!idx || !p) {
        free(idx);
        free(p);
        return (int32_t)TOK_GPT2_EOT;
    }
    int n = sampler_top_k(logits, V, k, idx);
    double sum = 0, t = s->temperature > 0.0f ? s->temperature : 1.0f;
    for (int i = 0; i < n; i++) {
        p[i] = exp(((double)logits[idx[i]] - (double)logits[idx[0]]) / t);
        sum += p[i];
    }
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

static ferry_status generate(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *stream, int B,
                             int T, tok_ids *ids, int n, sampler *s)
{
    int V = lmodel_vocab(m);
    model_hooks hooks = *h;
    int32_t *tokens = malloc((size_t)B * (size_t)T * sizeof *tokens);
    float *logits = malloc((size_t)V * sizeof *logits);
    ferry_status st = tokens && logits ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    for (int i = 0; i < n && st == FERRY_OK && !(s->stop && atomic_load(s->stop)); i++) {
        bool end = false;
        if (s->before_token && ((st = s->before_token(s->before_token_ctx, &end)) != FERRY_OK || end))
            break;
        size_t len = ids->len, start = len > (size_t)T ? len - (size_t)T : 0, used = len - start;
        for (size_t j = 0; j < (size_t)B * (size_t)T; j++)
            tokens[j] = (int32_t)TOK_GPT2_EOT;
        for (size_t j = 0; j < used; j++)
            tokens[j] = (int32_t)ids->ids[start + j];
        st = lmodel_forward(m, a, &hooks, stream, tokens, NULL, false);
        if (st == FERRY_OK)
            st = lmodel_logits(m, a, &hooks, stream, 0, (int)used - 1, logits);
        if (st != FERRY_OK)
            break;
        if (ids->len == ids->cap) {
            size_t cap = ids->cap ? ids->cap * 2 : 64;
            uint32_t *grown = realloc(ids->ids, cap * sizeof *grown);
            if (!grown) {
                st = err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
                break;
            }
            ids->ids = grown;
            ids->cap = cap;
        }
        ids->ids[ids->len++] = (uint32_t)sampler_pick(s, logits, V);
    }
    free(tokens);
    free(logits);
    return st;
}

/* The prompt's tokens, the generation (between begin and end when e is
 * not NULL), and the text. */
static ferry_status sample_on(ferry_engine *e, const lmodel *m, lmodel_acts *a, const model_hooks *h,
                              backend_stream *stream, int B, int T, tok_bpe *tok, const char *prompt, int n,
                              sampler *s, char **text)
{
    tok_ids ids = {0};
    ferry_status st = FERRY_OK;
    if (prompt && *prompt)
        st = tok_bpe_encode(tok, prompt, strlen(prompt), &ids);
    if (st == FERRY_OK && ids.len == 0) {
        ids.ids = malloc(64 * sizeof *ids.ids);
        ids.cap = ids.ids ? 64 : 0;
        if (ids.ids)
            ids.ids[ids.len++] = (int32_t)TOK_GPT2_EOT;
    }
    size_t prompt_len = ids.len;
    if (st == FERRY_OK && ids.len == 0)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    if (st == FERRY_OK && (!e || (st = ferry_engine_begin_inference(e)) == FERRY_OK)) {
        st = generate(m, a, h, stream, B, T, &ids, n, s);
        ferry_status end = e ? ferry_engine_end_inference(e) : FERRY_OK;
        if (st == FERRY_OK)
            st = end;
    }
    /* The leading <|endoftext|> we added is not part of the text. */
    size_t skip = (!prompt || !*prompt) && prompt_len == 1 ? 1 : 0;
    size_t out_len = 0;
    if (st == FERRY_OK)
        st = tok_bpe_decode(tok, ids.ids + skip, ids.len - skip, text, &out_len);
    tok_ids_free(&ids);
    return st;
}

ferry_status sample_text(ferry_engine *e, const lmodel *m, lmodel_acts *a, int B, int T, tok_bpe *tok,
                         const char *prompt, int n, sampler *s, char **text)
{
    model_hooks hooks = model_engine_hooks(e);
    return sample_on(e, m, a, &hooks, engine_embed_stream(e), B, T, tok, prompt, n, s, text);
}

ferry_status sample_text_hooks(const lmodel *m, lmodel_acts *a, const model_hooks *hooks, backend_stream *stream,
                               int B, int T, tok_bpe *tok, const char *prompt, int n, sampler *s, char **text)
{
    return sample_on(NULL, m, a, hooks, stream, B, T, tok, prompt, n, s, text);
}
