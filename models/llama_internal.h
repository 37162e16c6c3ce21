/* What models/llama*.c share: the model's tables and the tensors of a layer
 * by role. Not for use outside models/. */
#ifndef FERRY_MODELS_LLAMA_INTERNAL_H
#define FERRY_MODELS_LLAMA_INTERNAL_H

#include "models/llama.h"

/* The tensors of a decoder layer by role; a layer without biases has no
 * LB_QB..LB_VB (their index is -1). */
enum {
    LB_NORM1, LB_Q, LB_K, LB_V, LB_QB, LB_KB, LB_VB, LB_O, LB_NORM2, LB_GATE, LB_UP, LB_DOWN,
    LB_COUNT
};

typedef struct llama_tensor {
    llama_tensor_info info;
    model_init_kind init;
} llama_tensor;

typedef struct llama_group {
    llama_tensor *tensors;
    int count;
    size_t numel;
} llama_group;

struct llama_model {
    llama_config cfg;
    int num_groups;
    llama_group *groups;
    int block_index[LB_COUNT]; /* role -> index in a layer group, -1 if absent */
    int head_index;            /* lm_head's index in the last group, -1 when tied */
};

#endif
