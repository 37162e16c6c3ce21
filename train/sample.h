/* Text generation from a model on the engine (models/lmodel.h, either
 * family; the text through its tokenizer, train/tokenizer.h):
 * the sampler (temperature, top-k, top-p, a seeded generator) over
 * next-token logits, and the loop that feeds each token back, through the
 * key/value cache (models/lmodel_decode.h: one forward of the prompt, then
 * one token at a time) or, as the reference the tests and the bench compare
 * it with, by recomputing the whole window for every token. Generation
 * stops after n tokens, at the end-of-sequence token, or when the text
 * generated holds the stop string. */
#ifndef FERRY_TRAIN_SAMPLE_H
#define FERRY_TRAIN_SAMPLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "models/lmodel.h"
#include "models/lmodel_decode.h"
#include "train/tokenizer.h"

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
    /* Nucleus sampling: after top-k, the likeliest tokens whose
     * probabilities (at the temperature) first sum to top_p or more; <= 0
     * or >= 1 keeps them all. */
    float top_p;
    int eos;               /* the end-of-sequence token: generation ends there (not kept); -1 = none */
    const char *stop_text; /* NULL or "", or generation ends where the new text holds it (the text is cut before it) */
} sampler;

/* The tokens sampler_pick draws from, likeliest first, into idx (V
 * entries), their probabilities (summing to 1) into p: top-k, then top-p,
 * at the temperature (temperature 0: the first largest logit alone).
 * Returns how many. */
int sampler_kept(const sampler *s, const float *logits, int V, int *idx, double *p);
/* Picks the next token from logits[V]; -1 only when out of memory. */
int sampler_pick(sampler *s, const float *logits, int V);

/* The k (at most V) likeliest tokens into idx, likeliest first; equal logits
 * in index order, NaN last. O(V log k) (a heap), so k near V is fast too.
 * Returns how many it wrote. */
int sampler_top_k(const float *logits, int V, int k, int *idx);

/* Generates up to n tokens after ids (the prompt, at least one token),
 * appending them to ids: the prompt prefilled into kv (batch row 0 of a
 * cache of one row), then a decode step a token. The prompt and the n
 * tokens must fit the cache: more is FERRY_ERR_INVALID_ARGUMENT naming
 * both, before anything runs. Ends early at s->eos, at s->stop_text (tok
 * decodes the new tokens; NULL when there is no stop text), at s->stop or
 * when s->before_token says so. */
ferry_status sample_generate(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *stream,
                             const tok_tokenizer *tok, tok_ids *ids, int n, sampler *s);
/* The same by recomputing: for each token one forward over the last T
 * tokens (activations a of B >= 1 rows and sequence T), the logits of row 0
 * at the last one. The reference the cache is held to. */
ferry_status sample_generate_recompute(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *stream,
                                       int B, int T, const tok_tokenizer *tok, tok_ids *ids, int n, sampler *s);

/* Generates n tokens after `prompt` with the
 * model on engine e through the cache kv (one row), or, when kv is NULL or
 * the prompt and the n tokens do not fit it (and a is given), by
 * recomputing the last T tokens for each one over activations a (B rows,
 * sequence T: a sample of any length, as long as it is not stopped), and
 * returns the
 * decoded text (prompt included, up to a stop text) in *text (malloc'd).
 * The prompt starts with the tokenizer's BOS when it has one that is not
 * also its EOS (Llama 2 and 3 add theirs, as their tokenizers do), and an
 * empty prompt is the BOS alone (GPT-2's <|endoftext|>); the text leaves
 * out the token added.
 * Runs between steps: it brackets itself with
 * ferry_engine_begin/end_inference. When s->stop is set, or s->before_token
 * says to stop, it ends after the token under way, with the text so far. */
ferry_status sample_text(ferry_engine *e, const lmodel *m, lmodel_kv *kv, lmodel_acts *a, int B, int T, tok_tokenizer *tok,
                         const char *prompt, int n, sampler *s, char **text);
/* The same with weights of the caller's (model_resident's hooks, say), on
 * `stream`, without an engine: what sampling alone needs. */
ferry_status sample_text_hooks(const lmodel *m, lmodel_kv *kv, lmodel_acts *a, const model_hooks *hooks,
                               backend_stream *stream, int B, int T, tok_tokenizer *tok, const char *prompt, int n,
                               sampler *s, char **text);

#endif
