/* A model of any family over the ferry engine: the hooks answered by the
 * engine's fetch/grads/release (so the engine's offload mode decides where
 * every parameter byte is), activations allocated from the engine's device
 * budget, and the model's groups handed to the engine through a
 * family-neutral description of them. */
#ifndef FERRY_MODELS_MODEL_ENGINE_H
#define FERRY_MODELS_MODEL_ENGINE_H

#include "engine/intree.h"
#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the engine needs to know of a model's groups, whatever its family. */
typedef struct model_desc {
    const void *m;
    const char *family; /* "gpt2", "llama": errors name it */
    int (*num_groups)(const void *m);
    size_t (*group_numel)(const void *m, int g);
    void (*group_label)(const void *m, int g, char *buf, size_t cap);
    int (*tensor_count)(const void *m, int g);
    /* Tensor i of group g: where it lies and whether weight decay applies. */
    ferry_status (*tensor_span)(const void *m, int g, int i, size_t *offset, size_t *numel, bool *decay);
    ferry_status (*init_group)(const void *m, int g, uint64_t seed, float *out);
} model_desc;

/* Hooks that route every acquire/release through engine e. */
model_hooks model_engine_hooks(ferry_engine *e);
/* An allocator on the engine's arena (category activations). */
model_allocator model_engine_allocator(ferry_engine *e);
/* Adds the model's groups to e (before ferry_engine_setup), with weight
 * decay off for every tensor whose span says so. Values: values[g] when
 * values is not NULL (e.g. loaded from a checkpoint), else the family's
 * init_group(seed). Group i of the engine is group i of the model. */
ferry_status model_engine_add_groups(const model_desc *d, ferry_engine *e, uint64_t seed, float *const *values);

#ifdef __cplusplus
}
#endif
#endif
