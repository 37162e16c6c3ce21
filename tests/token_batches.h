/* The engine tests' token batches: tokens on a fixed stride pattern with a
 * seeded share of random vocabulary ids, and the targets the same stream
 * shifted by one. Each test keeps its own recipe (its bitwise expectations
 * were recorded with it); this header is the one place the stream is made.
 * Uses tap_rand_u64, so include tap.h first. Header-only. */
#ifndef FERRY_TESTS_TOKEN_BATCHES_H
#define FERRY_TESTS_TOKEN_BATCHES_H

#include <stdint.h>

typedef struct token_recipe {
    uint64_t seed, seed_per_step, seed_per_micro; /* the generator's seed */
    int stride, per_step, per_micro, modulus;     /* (i stride + step per_step + micro per_micro) % modulus */
    int rare;                                     /* one token in `rare` is a random id below the vocabulary */
} token_recipe;

/* n tokens and their n targets for (step, micro) under recipe r. */
static inline void token_batch(const token_recipe *r, int step, int micro, int n, int vocab, int32_t *tokens,
                               int32_t *targets)
{
    uint64_t rng = r->seed + (uint64_t)step * r->seed_per_step + (uint64_t)micro * r->seed_per_micro;
    for (int i = 0; i < n + 1; i++) {
        int32_t tok = (int32_t)((i * r->stride + step * r->per_step + micro * r->per_micro) % r->modulus);
        if (tap_rand_u64(&rng) % (uint64_t)r->rare == 0)
            tok = (int32_t)(tap_rand_u64(&rng) % (uint64_t)vocab);
        if (i < n)
            tokens[i] = tok;
        if (i > 0)
            targets[i - 1] = tok;
    }
}

#endif
