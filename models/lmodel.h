/* A language model of either family (GPT-2, the Llama family) behind one
 * face, for the programs that train or plan both (ferry-train, memprof,
 * the trainer's policy in train/): created from a model_spec, described to
 * the engine, planned, run forward and backward, asked for its logits. The
 * families keep their own headers (models/gpt2.h, models/llama.h); this is
 * a dispatch over them and owns nothing but the family's model. */
#ifndef FERRY_MODELS_LMODEL_H
#define FERRY_MODELS_LMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/gpt2.h"
#include "models/gpt2_plan.h"
#include "models/llama.h"
#include "models/model_engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum model_family { MODEL_FAMILY_GPT2 = 0, MODEL_FAMILY_LLAMA = 1 } model_family;

/* Which model: the family and its configuration (the other one unused). */
typedef struct model_spec {
    model_family family;
    gpt2_config gpt2;
    llama_config llama;
} model_spec;

/* A spec from a preset name of either family ("gpt2-xl", "d12",
 * "llama3.1-8b", "llama-d4", ...); FERRY_ERR_INVALID_ARGUMENT naming both
 * families' names when it is neither's. */
ferry_status model_spec_preset(const char *name, model_spec *out);
/* "gpt2" or the Llama config's model_type ("llama", "mistral", "qwen2"). */
const char *model_spec_type(const model_spec *s);
int model_spec_vocab(const model_spec *s);
int model_spec_context(const model_spec *s);
/* Plans the spec's model: rq->cfg or rq->llama pointed into s. */
void model_spec_plan_request(const model_spec *s, gpt2_plan_request *rq);

typedef struct lmodel lmodel;
typedef struct lmodel_acts lmodel_acts;

/* A tensor of either family, as checkpoints name and shape it. */
typedef struct lmodel_tensor {
    char name[80];
    size_t offset, numel;
    int ndim;
    int shape[2]; /* ours, row-major */
    bool decay;
} lmodel_tensor;

ferry_status lmodel_create(const model_spec *spec, lmodel **out);
void lmodel_destroy(lmodel *m);
const model_spec *lmodel_spec(const lmodel *m);
/* The family's own model (a gpt2_model or a llama_model), for the code that
 * is one family's (checkpoint formats). */
const gpt2_model *lmodel_gpt2(const lmodel *m);   /* NULL unless GPT-2 */
const llama_model *lmodel_llama(const lmodel *m); /* NULL unless Llama */
model_desc lmodel_desc(const lmodel *m);

int lmodel_num_groups(const lmodel *m);
size_t lmodel_group_numel(const lmodel *m, int group);
int lmodel_group_tensor_count(const lmodel *m, int group);
ferry_status lmodel_group_tensor(const lmodel *m, int group, int index, lmodel_tensor *out);
uint64_t lmodel_num_params(const lmodel *m);
int lmodel_vocab(const lmodel *m);
int lmodel_context(const lmodel *m);
/* Training FLOPs per token at sequence T with recompute off: 6 N for the
 * parameters' matmuls (N without the embedding's gather) and 12 L T d for
 * attention's two products forward and backward, d the attention width. */
double lmodel_flops_per_token(const lmodel *m, int T);

ferry_status lmodel_acts_create(const lmodel *m, backend *be, int B, int T, bool recompute,
                                const model_allocator *alloc, lmodel_acts **out);
void lmodel_acts_destroy(lmodel_acts *a);
size_t lmodel_acts_bytes(const lmodel *m, ferry_dtype act, int B, int T, bool recompute);

/* Packed examples for the next lmodel_forward (and its backward and
 * recompute), until set again: pos[B*T] (host memory, copied before
 * return), each token's index within its example, 0 where one starts (at
 * t = 0 always) and the previous + 1 inside it. Attention then keeps every
 * example to itself and the positions (GPT-2's wpe rows, Llama's rope
 * angles) restart with each: a packed row computes what its examples
 * would alone, each at the start of a row of its own. NULL: one example a
 * row, the default, bit for bit the model without this call. Bad
 * positions are FERRY_ERR_INVALID_ARGUMENT naming row, index and value
 * (the previous ones stay). gpt2_set_positions, llama_set_positions. */
ferry_status lmodel_set_positions(lmodel_acts *a, const int32_t *pos);
ferry_status lmodel_forward(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *s,
                            const int32_t *tokens, const int32_t *targets, bool for_backward);
ferry_status lmodel_backward(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *s,
                             float grad_scale);
ferry_status lmodel_loss(lmodel_acts *a, backend_stream *s, float *loss);
ferry_status lmodel_logits(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *s, int b, int t,
                           float *logits);

#ifdef __cplusplus
}
#endif
#endif
