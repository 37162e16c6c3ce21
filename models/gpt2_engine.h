/* GPT-2 over the ferry engine: the model's hooks answered by the engine's
 * fetch/grads/release (so the engine's offload mode decides where every
 * parameter byte is), activations allocated from the engine's device budget,
 * and the model's groups handed to the engine with GPT-2's initialisation. */
#ifndef FERRY_MODELS_GPT2_ENGINE_H
#define FERRY_MODELS_GPT2_ENGINE_H

#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/model_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPT-2 described for models/model_engine.c (m must outlive it). */
model_desc gpt2_desc(const gpt2_model *m);
/* Hooks that route every acquire/release through engine e. */
gpt2_hooks gpt2_engine_hooks(ferry_engine *e);
/* An allocator on the engine's arena (category activations). */
gpt2_allocator gpt2_engine_allocator(ferry_engine *e);
/* Adds the model's groups to e (before ferry_engine_setup), with GPT-2's
 * weight-decay exemptions (biases, layernorms). Values: values[g] when values
 * is not NULL (e.g. loaded from a checkpoint), else gpt2_init_group(seed).
 * Group i of the engine is group i of the model. */
ferry_status gpt2_engine_add_groups(const gpt2_model *m, ferry_engine *e, uint64_t seed, float *const *values);

#ifdef __cplusplus
}
#endif
#endif
