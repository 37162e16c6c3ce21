/* What models/gpt2*.c share: the model's tables and the index of each tensor
 * inside a block group. Not for use outside models/. */
#ifndef FERRY_MODELS_GPT2_INTERNAL_H
#define FERRY_MODELS_GPT2_INTERNAL_H

#include "models/gpt2.h"

typedef enum init_kind { INIT_ZERO, INIT_ONE, INIT_NORMAL, INIT_NORMAL_RESIDUAL } init_kind;

/* Tensor order inside a block group. */
enum {
    BLK_LN1W, BLK_LN1B, BLK_QKVW, BLK_QKVB, BLK_ATTPROJW, BLK_ATTPROJB,
    BLK_LN2W, BLK_LN2B, BLK_FCW, BLK_FCB, BLK_FCPROJW, BLK_FCPROJB,
    BLK_COUNT
};
/* Group 0: wte, wpe. Group L+1: lnfw, lnfb. */
enum { EMB_WTE, EMB_WPE };
enum { LNF_W, LNF_B };

typedef struct gpt2_tensor {
    gpt2_tensor_info info;
    init_kind init;
} gpt2_tensor;

typedef struct gpt2_group {
    gpt2_tensor *tensors;
    int count;
    size_t numel;
} gpt2_group;

struct gpt2_model {
    gpt2_config cfg;
    int num_groups;
    gpt2_group *groups;
};

#endif
