/* Sampling: see sample.h. */
#include "train/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/embed.h"
#include "models/gpt2_engine.h"


static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Indices of the k largest logits, largest first (insertion into a short list). */
static int top_indices(const float *logits, int V, int k, int *idx)
{
    int n = 0;
    for (int i = 0; i < V; i++) {
        if (n == k && logits[i] <= logits[idx[n - 1]])
            continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && logits[idx[at - 1]] < logits[i]) {
            idx[at] = idx[at - 1];
            at--;
        }
        idx[at] = i;
    }
    return n;
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
    int n = top_indices(logits, V, k, idx);
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

static ferry_status generate(ferry_engine *e, const gpt2_model *m, gpt2_activations *a, int B, int T,
                             tok_ids *ids, int n, sampler *s)
{
    int V = gpt2_get_config(m)->vocab_size;
    gpt2_hooks hooks = gpt2_engine_hooks(e);
    backend_stream *stream = engine_embed_stream(e);
    int32_t *tokens = malloc((size_t)B * (size_t)T * sizeof *tokens);
    float *logits = malloc((size_t)V * sizeof *logits);
    ferry_status st = tokens && logits ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        size_t len = ids->len, start = len > (size_t)T ? len - (size_t)T : 0, used = len - start;
        for (size_t j = 0; j < (size_t)B * (size_t)T; j++)
            tokens[j] = (int32_t)TOK_GPT2_EOT;
        for (size_t j = 0; j < used; j++)
            tokens[j] = (int32_t)ids->ids[start + j];
        st = gpt2_forward(m, a, &hooks, stream, tokens, NULL, false);
        if (st == FERRY_OK)
            st = gpt2_logits(m, a, &hooks, stream, 0, (int)used - 1, logits);
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

ferry_status sample_text(ferry_engine *e, const gpt2_model *m, gpt2_activations *a, int B, int T, tok_bpe *tok,
                         const char *prompt, int n, sampler *s, char **text)
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
    if (st == FERRY_OK && (st = ferry_engine_begin_inference(e)) == FERRY_OK) {
        st = generate(e, m, a, B, T, &ids, n, s);
        ferry_status end = ferry_engine_end_inference(e);
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
