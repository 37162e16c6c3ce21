/* The Llama family (Llama 2 and 3, Mistral, Qwen2, TinyLlama, SmolLM) as a
 * list of parameter groups, forward and backward on a backend stream. Like
 * GPT-2 (models/gpt2.h) an embedder of the engine, not part of it: it owns
 * its configuration, its parameter layout (with Hugging Face names), its
 * initialisation and the activations it asks its caller to allocate; the
 * parameters and gradients come group by group through the caller's hooks
 * (models/model.h).
 *
 * Groups: 0 = the token embedding (model.embed_tokens.weight [Vp, C]);
 * 1..L = decoder layer l-1: input_layernorm [C], q_proj [NH HS, C], k_proj
 * [NKV HS, C], v_proj [NKV HS, C] (back to back: one fused [(NH + 2 NKV) HS,
 * C] projection), their biases when the family has them (Qwen2; back to
 * back too), o_proj [C, NH HS], post_attention_layernorm [C], gate_proj [I,
 * C] and up_proj [I, C] (back to back: one fused [2 I, C]), down_proj [C,
 * I]; L+1 = the final norm (model.norm.weight [C]) and, when the head is not
 * tied to the embedding, lm_head.weight [Vp, C]. Every weight is stored as
 * Hugging Face stores it ([out, in], no transposes); a group is one
 * contiguous buffer of backend_act_dtype() elements, each tensor (or fused
 * run) starting at a multiple of LLAMA_ALIGN_ELEMS elements.
 *
 * One layer: h = x + o_proj(attn(rope(qkv(rmsnorm(x))))); out = h +
 * down(silu(gate(rmsnorm(h))) * up(rmsnorm(h))), causal attention with
 * grouped-query heads (each key/value head shared by NH / NKV query heads),
 * scale 1/sqrt(HS). Only ops_* calls and backend copies touch device memory,
 * so the same code runs on the host and the cuda backend. Not thread-safe
 * per activations object. */
#ifndef FERRY_MODELS_LLAMA_H
#define FERRY_MODELS_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLAMA_ALIGN_ELEMS 64
#define LLAMA_VOCAB_PAD 128
#define LLAMA_NAME_MAX 80

/* ---- configuration ---- */

typedef enum llama_rope_kind {
    LLAMA_ROPE_DEFAULT = 0, /* inv_freq_i = theta^(-2i / HS) */
    LLAMA_ROPE_LINEAR,      /* inv_freq / factor */
    LLAMA_ROPE_LLAMA3,      /* Llama 3.1's: low frequencies / factor, high kept, a smooth band between */
} llama_rope_kind;

typedef struct llama_rope_scaling {
    llama_rope_kind kind;
    float factor;                     /* LINEAR, LLAMA3: > 0 */
    float low_freq_factor;            /* LLAMA3 */
    float high_freq_factor;           /* LLAMA3: > low_freq_factor */
    int original_max_position_embeddings; /* LLAMA3: > 0 */
} llama_rope_scaling;

typedef struct llama_config {
    char model_type[16];   /* "llama", "mistral" or "qwen2": config.json's model_type */
    int n_layer;           /* L: num_hidden_layers */
    int n_head;            /* NH: num_attention_heads */
    int n_kv_head;         /* NKV: num_key_value_heads; NH % NKV == 0 */
    int n_embd;            /* C: hidden_size */
    int head_dim;          /* HS: C / NH unless config.json says otherwise; even */
    int intermediate_size; /* I */
    int vocab_size;        /* V */
    int padded_vocab_size; /* Vp >= V: rows of the embedding (and head); rows V.. never enter the softmax */
    int max_seq_len;       /* max_position_embeddings */
    float rms_norm_eps;
    float rope_theta;
    llama_rope_scaling rope_scaling;
    bool qkv_bias;         /* q/k/v projections have biases (Qwen2) */
    bool tied_embeddings;  /* tie_word_embeddings: the head is the embedding */
    int sliding_window;    /* Mistral's window; 0 = none (training needs seq <= window) */
    float initializer_range; /* std of the normal init (0.02) */
    int bos_token_id, eos_token_id; /* -1 = none */
} llama_config;

/* Fills *out from a name: "smollm2-135m", "smollm2-360m", "tinyllama-1.1b",
 * "llama3.2-1b", "llama3.2-3b", "llama3.1-8b", "llama2-7b", "mistral-7b",
 * "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b" (the published shapes), or
 * "llama-d<N>" for 1 <= N <= 128, a Llama 3 shape scaled down for tests (N
 * layers, N heads of 64, max(1, N / 2) key/value heads when N is even, else
 * N; I = 4 x 64N x 2/3 rounded up to 64; Llama 3's vocabulary, rope and
 * context). Unknown names are FERRY_ERR_INVALID_ARGUMENT listing the known
 * ones. */
ferry_status llama_config_preset(const char *name, llama_config *out);
/* Whether `name` is one of llama_config_preset's names. */
bool llama_is_preset(const char *name);
/* A config with every field in range, else FERRY_ERR_INVALID_ARGUMENT naming
 * the first bad field and its value (limits: 1 <= L <= 4096, 1 <= NKV <= NH,
 * NH % NKV == 0, HS even and <= 256 (attention's largest head), C <=
 * 65536, 1 <= V <= Vp <= 2^24, 1 <= maxT <= 2^20, eps > 0, theta > 0, and
 * the scaling's fields as llama_rope_scaling says). */
ferry_status llama_config_validate(const llama_config *cfg);
/* inv_freq[HS / 2], the rotary frequencies with the config's scaling
 * applied, computed as transformers computes them (in fp32 from
 * theta^(-2i/HS), then the scaling). */
void llama_rope_inv_freq(const llama_config *cfg, float *inv_freq);

/* ---- the model: layout, names, initialisation ---- */

typedef struct llama_model llama_model;

ferry_status llama_create(const llama_config *cfg, llama_model **out);
void llama_destroy(llama_model *m);
const llama_config *llama_get_config(const llama_model *m);

int llama_num_groups(const llama_model *m); /* L + 2 */
size_t llama_group_numel(const llama_model *m, int group);
/* "embeddings", "block N", "final norm" (or "final norm and head" when untied). */
void llama_group_label(const llama_model *m, int group, char *buf, size_t cap);
/* Parameters as Hugging Face counts them (V rows of the embedding and head). */
uint64_t llama_num_params(const llama_model *m);

typedef struct llama_tensor_info {
    char name[LLAMA_NAME_MAX]; /* Hugging Face name: "model.layers.3.self_attn.q_proj.weight" */
    size_t offset;             /* elements from the start of the group */
    size_t numel;              /* shape[0] * shape[1] (ndim 1: shape[0]) */
    int ndim;                  /* 1 or 2 */
    int shape[2];              /* ours = the checkpoint's, but rows: embedding and head have Vp */
    int hf_rows;               /* rows in the checkpoint: V for the embedding and head, else shape[0] */
    bool decay;                /* a 2-D weight (weight decay applies) */
} llama_tensor_info;

int llama_group_tensor_count(const llama_model *m, int group);
ferry_status llama_group_tensor(const llama_model *m, int group, int index, llama_tensor_info *out);
/* Finds a tensor by its Hugging Face name; FERRY_ERR_INVALID_ARGUMENT if none. */
ferry_status llama_find_tensor(const llama_model *m, const char *name, int *group, int *index);

/* Hugging Face's initialisation of group g into out[llama_group_numel(g)]
 * (fp32): weights normal(0, initializer_range), norms 1, biases 0, padded
 * rows and gaps 0 (models/model.h's chunked streams). */
ferry_status llama_init_group(const llama_model *m, int group, uint64_t seed, float *out);

/* ---- activations ---- */

typedef struct llama_activations llama_activations;

/* Every activation for batch B and sequence T (1 <= T <= maxT, and T <= the
 * sliding window when there is one), through `alloc`; with recompute only
 * each layer's input is kept and one shared set of layer activations is
 * recomputed in backward (bitwise the same gradients). */
ferry_status llama_activations_create(const llama_model *m, backend *be, int B, int T, bool recompute,
                                      const model_allocator *alloc, llama_activations **out);
void llama_activations_destroy(llama_activations *a);
/* Device bytes llama_activations_create asks for on a backend storing `act`,
 * computed by the same code without allocating; 0 on invalid arguments. */
size_t llama_activations_bytes(const llama_model *m, ferry_dtype act, int B, int T, bool recompute);
size_t llama_activations_list(const llama_model *m, ferry_dtype act, int B, int T, bool recompute,
                              void (*fn)(void *ctx, const char *what, size_t bytes), void *ctx);

/* ---- running (as gpt2_forward and friends; positions are 0..T-1 in each row
 * unless llama_set_positions gives others) ---- */

/* As gpt2_set_positions (models/gpt2.h): per-token positions pos[B T] of
 * packed examples for the next forward (rope rotates by them, attention
 * keeps each example to itself); NULL: 0..T-1 a row again. */
ferry_status llama_set_positions(llama_activations *a, const int32_t *pos);

ferry_status llama_forward(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s,
                           const int32_t *tokens, const int32_t *targets, bool for_backward);
ferry_status llama_backward(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s,
                            float grad_scale);
ferry_status llama_loss(llama_activations *a, backend_stream *s, float *loss);
/* Next-token logits[V] (host, fp32) at batch row b, position t of the last forward. */
ferry_status llama_logits(const llama_model *m, llama_activations *a, const model_hooks *h, backend_stream *s,
                          int b, int t, float *logits);

#ifdef __cplusplus
}
#endif

#endif
