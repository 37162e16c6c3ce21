/* Text generation from a model on the engine (models/lmodel.h, either
 * family; the text through the GPT-2 tokenizer, the only one ferry reads):
 * top-k sampling with a temperature from next-token logits, a seeded
 * generator, and the loop that feeds each token back (a window of the last
 * T tokens; no KV cache, so each token costs one forward pass over the
 * window). */
#ifndef FERRY_TRAIN_SAMPLE_H
#define FERRY_TRAIN_SAMPLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "models/lmodel.h"
#include "train/bpe.h"

typedef struct sampler {
    uint64_t rng;
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = every token */
    const atomic_int *stop; /* NULL, or a flag (a signal's) that ends generation after the token under way */
    /* NULL, or asked before each token (the first too) whether to end
     * generation there: processes that sample alike, whose forwards are
     * collectives (data parallel ranks), decide together. An error it
     * returns ends generation with that error. */
    ferry_status (*before_token)(void *ctx, bool *stop);
    void *before_token_ctx;
} sampler;

/* Picks the next token from logits[V]. */
int sampler_pick(sampler *s, const float *logits, int V);

/* The k (at most V) likeliest tokens into idx, likeliest first; equal logits
 * in index order, NaN last. O(V log k) (a heap), so k near V is fast too.
 * Returns how many it wrote. */
int sampler_top_k(const float *logits, int V, int k, int *idx);

/* Generates n tokens after `prompt` (NULL or "" = <|endoftext|>) with the
 * model on engine e (activations a of batch B >= 1 and sequence T), and
 * returns the decoded text (prompt included) in *text (malloc'd). Runs
 * between steps: it brackets itself with ferry_engine_begin/end_inference.
 * When s->stop is set, or s->before_token says to stop, it ends after the
 * token under way, with the text so far. */
ferry_status sample_text(ferry_engine *e, const lmodel *m, lmodel_acts *a, int B, int T, tok_bpe *tok,
                         const char *prompt, int n, sampler *s, char **text);
/* The same with weights of the caller's (model_resident's hooks, say), on
 * `stream`, without an engine: what sampling alone needs. */
ferry_status sample_text_hooks(const lmodel *m, lmodel_acts *a, const model_hooks *hooks, backend_stream *stream,
                               int B, int T, tok_bpe *tok, const char *prompt, int n, sampler *s, char **text);

#endif
