/* Generation with a key/value cache, for either family (models/lmodel.h):
 * the cache (per layer the keys and values of up to Tmax positions of B
 * batch rows, on the model's backend, the Llama family's with its own
 * key/value heads), a prefill (one forward of the prompt, by chunks of at
 * most lmodel_kv_chunk tokens a row, filling the cache and giving the last
 * position's logits) and a decode step (one token a row through every
 * layer, appended to the cache, giving its logits). Parameters come from
 * the caller's hooks group by group, in the order lmodel_forward asks for
 * them, so the engine's weights work in every offload mode; device memory
 * from the caller's allocator. Every row of the batch is at the same
 * position. Not thread-safe per cache. */
#ifndef FERRY_MODELS_LMODEL_DECODE_H
#define FERRY_MODELS_LMODEL_DECODE_H

#include "models/lmodel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lmodel_kv lmodel_kv;

/* A cache of B rows and Tmax positions (1 <= Tmax <= the model's context)
 * with the scratch of a forward of `chunk` new tokens a row (0: min(Tmax,
 * 64)). */
ferry_status lmodel_kv_create(const lmodel *m, backend *be, int B, int Tmax, int chunk, const model_allocator *alloc,
                              lmodel_kv **out);
void lmodel_kv_destroy(lmodel_kv *kv);
/* Device bytes lmodel_kv_create asks for on a backend storing `act` (0 on
 * invalid arguments). */
size_t lmodel_kv_bytes(const lmodel *m, ferry_dtype act, int B, int Tmax, int chunk);
int lmodel_kv_len(const lmodel_kv *kv);      /* positions filled */
int lmodel_kv_capacity(const lmodel_kv *kv); /* Tmax */
int lmodel_kv_batch(const lmodel_kv *kv);    /* B */
/* Forgets every position (the next prefill starts at 0). */
void lmodel_kv_reset(lmodel_kv *kv);

/* tokens[B T] (row b's T tokens at tokens[b T ..]) from position 0: the
 * cache is reset and filled with positions 0 .. T-1, logits[B V] (host,
 * fp32) are those of each row's position T-1. T > Tmax is refused
 * (FERRY_ERR_INVALID_ARGUMENT naming both), before anything runs. */
ferry_status lmodel_prefill(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                            const int32_t *tokens, int T, float *logits);
/* tokens[B], one a row, at position lmodel_kv_len: appended, logits[B V] of
 * that position. A full cache is refused (FERRY_ERR_INVALID_ARGUMENT saying
 * its capacity), as is a step before any prefill (FERRY_ERR_STATE). */
ferry_status lmodel_decode_step(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s,
                                const int32_t *tokens, float *logits);

#ifdef __cplusplus
}
#endif
#endif
