/* GPT-2 weights in Hugging Face's layout: model.safetensors with
 * GPT2LMHeadModel's tensor names (transformer.h.0.attn.c_attn.weight as
 * Conv1D [in, out], wte with the real vocabulary rows only) and a config.json,
 * so transformers loads what we save, and we start from what it saved. */
#ifndef FERRY_TRAIN_HF_CHECKPOINT_H
#define FERRY_TRAIN_HF_CHECKPOINT_H

#include "ferry.h"
#include "models/gpt2.h"

/* Writes DIR/model.safetensors (F32) and DIR/config.json from the fp32
 * values of every group (groups[g] holds gpt2_group_numel(g) floats). Both
 * files are written atomically. */
ferry_status hf_save(const char *dir, const gpt2_model *m, float *const *groups);

/* Reads a GPT-2 safetensors file (names with or without the "transformer."
 * prefix; F32, F16 or BF16) into groups[g] (our layout, padded rows and gaps
 * zero). Every tensor of the model must be there with its shape; a missing,
 * misshapen or unknown tensor is FERRY_ERR_FORMAT naming it. */
ferry_status hf_load(const char *path, const gpt2_model *m, float *const *groups);

/* Reads n_layer, n_head, n_embd, vocab_size and n_positions from a
 * config.json beside a checkpoint, for --init-from and --resume without
 * model flags. FERRY_ERR_IO if there is none. */
ferry_status hf_read_config(const char *config_json, gpt2_config *out);

#endif
