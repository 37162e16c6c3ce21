/* The Llama family's Hugging Face folders (Llama, Mistral, Qwen2): reading
 * and writing config.json, and the weights as transformers keeps them,
 * model.safetensors or shards model-00001-of-0000N.safetensors listed by
 * model.safetensors.index.json, with LlamaForCausalLM's tensor names
 * (models/llama.h). Both ways stream: the reader reads one group at a time
 * through pread, the writer takes one group at a time, so a 16 GB folder is
 * never resident whole (peak: the caller's buffers and a few MiB). Knows
 * nothing of training: the run and step it records are the caller's
 * (hf_ferry_info, train/hf_checkpoint.h). A reader or a writer is used from
 * one thread at a time. */
#ifndef FERRY_TRAIN_HF_LLAMA_H
#define FERRY_TRAIN_HF_LLAMA_H

#include <stdint.h>

#include "ferry.h"
#include "models/llama.h"
#include "train/hf_checkpoint.h"

/* transformers' default max_shard_size, "5GB" (5 x 10^9 bytes). */
#define HF_LLAMA_SHARD_BYTES 5000000000ull

/* ---- config.json ---- */

/* Reads a config.json of model_type "llama", "mistral" or "qwen2" into
 * *out, as transformers reads it: num_hidden_layers, num_attention_heads,
 * hidden_size, intermediate_size and vocab_size are required; every other
 * key takes transformers' default for the type when absent
 * (num_key_value_heads: the heads for llama, 8 for mistral, 32 for qwen2,
 * and the heads when null; head_dim: hidden_size / heads when absent or
 * null; rope_theta 10000; rms_norm_eps 1e-06; tie_word_embeddings false;
 * max_position_embeddings 2048, 131072, 32768; Mistral's sliding_window
 * 4096; bos/eos 1 and 2 for llama and mistral, none for qwen2).
 * eos_token_id may be a list (its first is kept). rope_scaling (or
 * transformers 5's rope_parameters) is null, "default", {"rope_type" (or
 * "type"): "linear", "factor"} or Llama 3.1's "llama3" with its four
 * fields. Qwen2 always has q/k/v biases; its use_sliding_window false means
 * no window, true a window on every layer (max_window_layers 0, or
 * layer_types all "sliding_attention"). Every key that changes what the
 * model computes with a value ferry does not implement is FERRY_ERR_FORMAT
 * naming the key, its value and what is supported: another model_type, a
 * rope type such as "yarn", "dynamic" or "longrope", hidden_act other than
 * "silu", attention_bias true for llama (o_proj would have a bias too),
 * mlp_bias true, pretraining_tp > 1, partial_rotary_factor other than 1, a
 * sliding window on some layers only, use_mrope true, a
 * quantization_config; so is a value of the wrong JSON type, a key given
 * twice, or anything but one JSON object. Other keys (architectures,
 * transformers_version, use_cache, attention_dropout, ...) are ignored.
 * padded_vocab_size is vocab_size rounded up to LLAMA_VOCAB_PAD; the
 * result passes llama_config_validate (else FERRY_ERR_FORMAT with its
 * message). FERRY_ERR_IO if the file cannot be read. */
ferry_status hf_llama_read_config(const char *config_json, llama_config *out);
/* The same, also giving torch_dtype (or transformers 5's "dtype": F32, F16
 * or BF16; FERRY_DTYPE_AUTO when absent or null) and the "ferry" fields
 * (run "" and step -1 when absent). torch_dtype and ferry may be NULL. */
ferry_status hf_llama_read_config_ferry(const char *config_json, llama_config *out, ferry_dtype *torch_dtype,
                                        hf_ferry_info *ferry);
/* Writes config.json for cfg atomically at `config_json`: model_type,
 * architectures (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM),
 * every field hf_llama_read_config reads (so that it and transformers read
 * back cfg), torch_dtype naming `dtype` (F32, BF16 or F16) and "ferry":
 * {"run", "step"} when `ferry` (may be NULL) records them. A config the
 * format cannot say (q/k/v biases on llama or mistral, none on qwen2, a
 * sliding window on llama) is FERRY_ERR_INVALID_ARGUMENT. */
ferry_status hf_llama_write_config(const char *config_json, const llama_config *cfg, ferry_dtype dtype,
                                   const hf_ferry_info *ferry);

/* ---- reading the weights ---- */

typedef struct hf_llama_reader hf_llama_reader;

/* Opens the weights in folder `dir` for model m (which must outlive the
 * reader): DIR/model.safetensors if it is there (as transformers, which
 * prefers it), else the files DIR/model.safetensors.index.json's
 * weight_map names, each a plain file of the folder. Checks all of it
 * before any group is read: every tensor of m is in exactly one file, as
 * the index says, with its Hugging Face shape ([V, C] for the embedding
 * and the head, whose rows V.. the group pads with zeros) and a float
 * dtype (F32, BF16, F16); no file holds a tensor m does not have (a tied
 * model's file must not hold lm_head.weight; the rotary inv_freq buffers
 * older transformers saved are skipped); and when a config.json is beside
 * them, it reads (hf_llama_read_config), gives m's shape (layers, heads,
 * key/value heads, head_dim, widths, vocabulary, biases, tying) and, when
 * it names a torch_dtype, the type every tensor is stored in. Any of that
 * failing is FERRY_ERR_FORMAT naming the file and the tensor (or the
 * field); a folder with neither file, or a file that cannot be read, is
 * FERRY_ERR_IO. On success *out owns the open files; release it with
 * hf_llama_close. */
ferry_status hf_llama_open(const char *dir, const llama_model *m, hf_llama_reader **out);
/* Fills out[llama_group_numel(group)] (fp32, our layout: padded rows and
 * gaps zero) from the group's tensors, converted from their stored type
 * (exact: bf16 and f16 widen to fp32 without rounding). Reads only that
 * group's bytes, through pread: F32 straight into out, BF16 and F16
 * through a 2 MiB staging buffer. Groups in any order, any number of
 * times. */
ferry_status hf_llama_read_group(hf_llama_reader *r, int group, float *out);
/* Accepts NULL. */
void hf_llama_close(hf_llama_reader *r);
/* One call: open, read every group into groups[g], close. */
ferry_status hf_llama_load(const char *dir, const llama_model *m, float *const *groups);

/* ---- writing the weights ---- */

typedef struct hf_llama_writer hf_llama_writer;

/* Starts saving model m (which must outlive the writer) into the existing
 * folder `dir`, its tensors stored as `dtype` (F32, BF16 or F16; fp32
 * values round to nearest, ties to even): one DIR/model.safetensors when
 * shard_bytes is 0 or the tensors' bytes fit in it, else shards
 * model-0000i-of-0000n.safetensors of at most shard_bytes each (a larger
 * tensor alone in its own; tensors in group order, a new shard when the
 * next would not fit, as transformers splits) with
 * model.safetensors.index.json ({"metadata": {"total_size": bytes},
 * "weight_map": {name: file}}). Each file is written under a temporary
 * name from here on; nothing at the final names changes before
 * hf_llama_save_commit. `ferry` (may be NULL) goes into config.json and
 * every file's metadata. */
ferry_status hf_llama_save_begin(const char *dir, const llama_model *m, ferry_dtype dtype, uint64_t shard_bytes,
                                 const hf_ferry_info *ferry, hf_llama_writer **out);
/* Writes group `group` from values[llama_group_numel(group)] (fp32, our
 * layout; padded rows and gaps are not saved). Groups in any order, each
 * once (again: FERRY_ERR_STATE). After a failure, only
 * hf_llama_save_abort is left to call. */
ferry_status hf_llama_save_group(hf_llama_writer *w, int group, const float *values);
/* Checks every group was saved (else FERRY_ERR_STATE naming the first
 * missing), then puts each file in place atomically (fsync, rename): the
 * weights, then the index, then config.json (hf_llama_write_config), and
 * removes what a previous save left that would now mislead a reader (a
 * model.safetensors beside new shards, an index beside a new single file,
 * shards model-*-of-*.safetensors not of this save). Frees w whatever the
 * outcome. */
ferry_status hf_llama_save_commit(hf_llama_writer *w);
/* Drops the temporaries; every file of the folder stays as it was. Accepts
 * NULL. */
void hf_llama_save_abort(hf_llama_writer *w);
/* One call: begin, every group from groups[g], commit. */
ferry_status hf_llama_save(const char *dir, const llama_model *m, float *const *groups, ferry_dtype dtype,
                           uint64_t shard_bytes, const hf_ferry_info *ferry);

#endif
