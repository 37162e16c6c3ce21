/* GPT-2 weights in Hugging Face's layout: model.safetensors with
 * GPT2LMHeadModel's tensor names (transformer.h.0.attn.c_attn.weight as
 * Conv1D [in, out], wte with the real vocabulary rows only) and a config.json,
 * so transformers loads what we save, and we start from what it saved. */
#ifndef FERRY_TRAIN_HF_CHECKPOINT_H
#define FERRY_TRAIN_HF_CHECKPOINT_H

#include <stdint.h>

#include "ferry.h"
#include "models/gpt2.h"
#include "train/safetensors.h"

/* What binds a checkpoint's files to their run and step: config.json's
 * "ferry": {"run": ..., "step": ...} and the safetensors metadata ferry_run
 * and ferry_step. */
typedef struct hf_ferry_info {
    char run[33];  /* the run's identity, 32 lowercase hex digits; "" = none recorded */
    int64_t step;  /* -1 = none recorded */
} hf_ferry_info;

/* Writes DIR/model.safetensors (F32) and DIR/config.json from the fp32
 * values of every group (groups[g] holds gpt2_group_numel(g) floats), with
 * `ferry` (may be NULL) in both. Both files are written atomically. */
ferry_status hf_save(const char *dir, const gpt2_model *m, float *const *groups, const hf_ferry_info *ferry);

/* Reads a GPT-2 safetensors file (names with or without the "transformer."
 * prefix; F32, F16 or BF16) into groups[g] (our layout, padded rows and gaps
 * zero). Every tensor of the model must be there with its shape; a missing,
 * misshapen or unknown tensor is FERRY_ERR_FORMAT naming it. */
ferry_status hf_load(const char *path, const gpt2_model *m, float *const *groups);

/* Reads a config.json beside a checkpoint, for --init-from and --resume,
 * all of it: n_layer, n_head, n_embd, vocab_size and n_positions give the
 * shape; every other key that changes what GPT-2 computes must hold the one
 * value ferry implements (activation_function gelu_new, layer_norm_epsilon
 * 1e-05, tie_word_embeddings true, n_ctx = n_positions, n_inner null or
 * 4 n_embd, model_type gpt2, ...), bos_token_id and eos_token_id whole
 * numbers, torch_dtype one of float32, float16, bfloat16, else
 * FERRY_ERR_FORMAT naming the key, its
 * value and the one supported; dropout rates are read and not applied. Not
 * one JSON object, a key given twice, or bytes after the object are
 * FERRY_ERR_FORMAT too. FERRY_ERR_IO if there is no file. */
ferry_status hf_read_config(const char *config_json, gpt2_config *out);
/* config.json's torch_dtype (when it gives one) against the type every
 * GPT-2 weight of the safetensors file is stored in: a config saying
 * "bfloat16" beside F32 weights is FERRY_ERR_FORMAT naming both. */
ferry_status hf_check_torch_dtype(const char *config_json, const char *safetensors);
/* The same, also giving the "ferry" fields (run "" and step -1 when absent;
 * damaged ones are FERRY_ERR_FORMAT). ferry may be NULL. */
ferry_status hf_read_config_ferry(const char *config_json, gpt2_config *out, hf_ferry_info *ferry);
/* The ferry_run and ferry_step metadata of a safetensors file (run "" and
 * step -1 when absent), from its header alone. */
ferry_status hf_read_ferry_meta(const char *safetensors, hf_ferry_info *out);
/* The same, and *sum (may be NULL) the checksum of part `part` of `parts`
 * of its tensors' bytes (sft_data_checksum_part; 0 of 1: all of them). */
ferry_status hf_read_weights_identity(const char *safetensors, hf_ferry_info *out, sft_checksum *sum, int part,
                                      int parts);

#endif
