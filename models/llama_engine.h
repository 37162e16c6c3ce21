/* The Llama family over the ferry engine: its groups described for
 * models/model_engine.c (the hooks and the allocator are model_engine_*). */
#ifndef FERRY_MODELS_LLAMA_ENGINE_H
#define FERRY_MODELS_LLAMA_ENGINE_H

#include "models/llama.h"
#include "models/model_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model described for models/model_engine.c (m must outlive it). */
model_desc llama_desc(const llama_model *m);
/* Adds the model's groups to e (before ferry_engine_setup): weight decay on
 * the 2-D weights only (norms and biases exempt, as Hugging Face's recipes
 * group them); values[g] when given, else llama_init_group(seed). */
ferry_status llama_engine_add_groups(const llama_model *m, ferry_engine *e, uint64_t seed, float *const *values);

#ifdef __cplusplus
}
#endif
#endif
