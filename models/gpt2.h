/* GPT-2 as a list of parameter groups, forward and backward on a backend
 * stream. The model is an embedder of the engine, not part of it: it owns its
 * configuration, its parameter layout (with Hugging Face names for
 * checkpoints), its initialisation, and the activations it asks its caller to
 * allocate; it never owns parameter or gradient memory. Those it gets, one
 * group at a time and in schedule order, through the caller's gpt2_hooks, so
 * the engine decides where every byte lives (resident, fetched, offloaded).
 *
 * Groups: 0 = embeddings (wte [Vp, C], wpe [maxT, C]); 1..L = transformer
 * block l-1 (ln1w, ln1b, qkvw [3C, C], qkvb, attprojw [C, C], attprojb, ln2w,
 * ln2b, fcw [4C, C], fcb, fcprojw [C, 4C], fcprojb); L+1 = final layernorm
 * (lnfw, lnfb). A group is one contiguous buffer of backend_act_dtype()
 * elements; each tensor starts at a multiple of GPT2_ALIGN_ELEMS elements (the
 * gaps, if any, hold zeros). The language-model head is tied to wte.
 *
 * Only ops_* calls and backend copies touch device memory, so the same code
 * runs on the host and the cuda backend. Not thread-safe per activations
 * object: one thread drives one gpt2_activations at a time. */
#ifndef FERRY_MODELS_GPT2_H
#define FERRY_MODELS_GPT2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPT2_ALIGN_ELEMS 64  /* tensor offsets inside a group: 128 bytes of bf16 */
#define GPT2_VOCAB_PAD 128   /* default padding of the vocabulary */
#define GPT2_NAME_MAX 64

/* ---- configuration ---- */

typedef struct gpt2_config {
    int n_layer;           /* L */
    int n_head;            /* NH; n_embd % n_head == 0 */
    int n_embd;            /* C */
    int vocab_size;        /* V: real tokens (50257 for GPT-2) */
    int padded_vocab_size; /* Vp >= V: rows of wte; rows V..Vp-1 never enter the softmax */
    int max_seq_len;       /* maxT: rows of wpe */
} gpt2_config;

/* Fills *out from a name: "gpt2" (124M: 12 layers, 12 heads, 768 wide),
 * "gpt2-medium" (24/16/1024), "gpt2-large" (36/20/1280), "gpt2-xl"
 * (48/25/1600), or "d<N>" for 1 <= N <= 256 (llm.c's depth scaling: N
 * layers, N heads, 64 N wide; d12 is gpt2). Vocab 50257 padded to 50304,
 * context 1024. Unknown names are FERRY_ERR_INVALID_ARGUMENT listing the
 * known ones. */
ferry_status gpt2_config_preset(const char *name, gpt2_config *out);
/* A custom configuration, validated. padded_vocab_size 0 rounds vocab_size up
 * to a multiple of GPT2_VOCAB_PAD. */
ferry_status gpt2_config_from_fields(int n_layer, int n_head, int n_embd, int vocab_size,
                                     int padded_vocab_size, int max_seq_len, gpt2_config *out);
/* FERRY_OK, or FERRY_ERR_INVALID_ARGUMENT naming the first bad field and its
 * value. Limits: 1 <= L <= 4096, 1 <= NH, C % NH == 0, 1 <= C <= 65536,
 * 1 <= V <= Vp <= 2^24, 1 <= maxT <= 2^20. */
ferry_status gpt2_config_validate(const gpt2_config *cfg);

/* ---- the model: layout, names, initialisation ---- */

typedef struct gpt2_model gpt2_model;

/* Validates cfg and builds the parameter tables. Destroy with gpt2_destroy. */
ferry_status gpt2_create(const gpt2_config *cfg, gpt2_model **out);
void gpt2_destroy(gpt2_model *m);
const gpt2_config *gpt2_get_config(const gpt2_model *m);

int gpt2_num_groups(const gpt2_model *m); /* L + 2 */
/* Elements of group g's buffer (its tensors plus alignment gaps); 0 if g is
 * out of range. */
size_t gpt2_group_numel(const gpt2_model *m, int group);
/* The group's name as the engine knows it: "embeddings", "block N", "final layernorm". */
void gpt2_group_label(const gpt2_model *m, int group, char *buf, size_t cap);
/* Parameters as Hugging Face counts them: wte with V rows, no gaps (124439808
 * for "gpt2"). */
uint64_t gpt2_num_params(const gpt2_model *m);

typedef struct gpt2_tensor_info {
    char name[GPT2_NAME_MAX]; /* Hugging Face name: "transformer.h.3.attn.c_attn.weight" */
    size_t offset;            /* elements from the start of the group */
    size_t numel;             /* shape[0] * shape[1] (ndim 1: shape[0]) */
    int ndim;                 /* 1 or 2 */
    int shape[2];             /* ours, row-major; linear weights are [out, in] */
    int hf_shape[2];          /* the checkpoint's: wte [V, C]; Conv1D weights [in, out] */
    bool hf_transposed;       /* the HF tensor is Conv1D [in, out]: the transpose of ours */
    bool hf_rows_prefix;      /* only the first hf_shape[0] rows are saved (wte: V of Vp) */
    bool decay;               /* a 2-D weight (gets weight decay in GPT-2 recipes) */
} gpt2_tensor_info;

/* Tensors of group g, in buffer order: 2 for group 0, 12 for a block, 2 for
 * the final layernorm; 0 if g is out of range. */
int gpt2_group_tensor_count(const gpt2_model *m, int group);
ferry_status gpt2_group_tensor(const gpt2_model *m, int group, int index, gpt2_tensor_info *out);
/* Finds a tensor by its Hugging Face name; FERRY_ERR_INVALID_ARGUMENT if no
 * tensor has that name. */
ferry_status gpt2_find_tensor(const gpt2_model *m, const char *name, int *group, int *index);

/* GPT-2's initialisation of group g into out[gpt2_group_numel(g)] (fp32):
 * weights normal(0, 0.02), the residual projections (attn.c_proj and
 * mlp.c_proj weights) normal(0, 0.02 / sqrt(2 L)), wte and wpe normal(0,
 * 0.02) as Hugging Face and llm.c do, biases 0, layernorm weights 1, padded
 * wte rows and alignment gaps 0. Each 65536-element chunk of a tensor draws
 * from its own stream derived from (seed, group, tensor, chunk), and the
 * chunks are filled on every core ($FERRY_INIT_THREADS to choose how many),
 * so groups may be filled in any order or in parallel and the bits never
 * depend on the number of threads. */
ferry_status gpt2_init_group(const gpt2_model *m, int group, uint64_t seed, float *out);

/* ---- the caller's hooks: where the parameters and gradients are ---- */

/* Order of calls. Forward: acquire_params(0), blocks 1..L each acquired and
 * released, L+1 acquired and released, release(0) last (the classifier reads
 * wte). Backward: acquire_params(0) and acquire_grads(0) first (the tied head
 * reads wte and adds into its gradient), then L+1, then blocks L..1 (each
 * acquire_params, acquire_grads, ..., release), release(0) last. */
typedef model_hooks gpt2_hooks;

/* ---- activations ---- */

/* Device memory for activations comes from the caller (models/model.h). */
typedef model_allocator gpt2_allocator;

/* An allocator on backend_alloc/backend_free of `be` (tests, tools). */
gpt2_allocator gpt2_backend_allocator(backend *be);

typedef struct gpt2_activations gpt2_activations;

/* Allocates every activation for batch B and sequence T (1 <= T <= maxT)
 * once, through `alloc` (copied; its ctx must outlive the activations), plus
 * small host staging for tokens, targets, losses and logits. With recompute,
 * only each block's input (the residual stream) is kept per layer and one
 * shared set of block activations is recomputed in backward; the gradients
 * are bitwise those of recompute off. */
ferry_status gpt2_activations_create(const gpt2_model *m, backend *be, int B, int T,
                                     bool recompute, const gpt2_allocator *alloc,
                                     gpt2_activations **out);
/* Waits for nothing: the caller synchronizes the streams that used it. */
void gpt2_activations_destroy(gpt2_activations *a);
/* Device bytes gpt2_activations_create asks for on a backend storing `act`
 * (f32 or bf16), computed by the same code without allocating (planners);
 * 0 on invalid arguments. */
size_t gpt2_activations_bytes(const gpt2_model *m, ferry_dtype act, int B, int T, bool recompute);
/* The same, naming each buffer to fn (its name and the bytes asked, in the
 * order gpt2_activations_create asks for them). */
size_t gpt2_activations_list(const gpt2_model *m, ferry_dtype act, int B, int T, bool recompute,
                             void (*fn)(void *ctx, const char *what, size_t bytes), void *ctx);

/* ---- running ---- */

/* Packed examples: pos[B*T] (host memory, copied before return) gives each
 * token its index within its example, pos[b T + t] = 0 where an example
 * starts (always at t = 0) and the previous + 1 inside it. From the next
 * gpt2_forward on, until set again, the position embedding reads row
 * pos[b T + t] of wpe and attention lets token t see only tokens t -
 * pos[b T + t] .. t, its own example's: each example computes what it
 * would alone at the start of a row (targets crossing an example's end are
 * the caller's to ignore, -1). The backward of that forward, and its
 * recompute, use the same positions. NULL: one example a row (positions
 * 0..T-1, the ops' plain forms, bit for bit). Positions that break the
 * rule are FERRY_ERR_INVALID_ARGUMENT naming row, index and value, and
 * leave the previous ones in force. */
ferry_status gpt2_set_positions(gpt2_activations *a, const int32_t *pos);

/* Forward pass on stream s over tokens[B*T] (host memory, each in [0, V);
 * copied before return). targets[B*T] (host, may be NULL): next tokens,
 * < 0 = ignored, else in [0, V). Bad tokens or targets are
 * FERRY_ERR_INVALID_ARGUMENT before anything is launched.
 * With targets and for_backward false, the losses are computed here (read
 * them with gpt2_loss). With for_backward true, the classifier is left to
 * gpt2_backward, which computes the losses and their gradient in one pass
 * (the logits are formed once per step instead of twice). */
ferry_status gpt2_forward(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h,
                          backend_stream *s, const int32_t *tokens, const int32_t *targets,
                          bool for_backward);
/* Backward of grad_scale * (mean loss over the valid targets of this forward)
 * into every group's gradient buffer (adds). Needs a gpt2_forward with
 * targets on `a` just before (FERRY_ERR_STATE otherwise). grad_scale is 1 for
 * one micro-batch, 1/k to average k micro-batches. */
ferry_status gpt2_backward(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h,
                           backend_stream *s, float grad_scale);
/* Synchronizes s and returns the mean loss over the valid targets of the last
 * forward (0 when none is valid). FERRY_ERR_STATE if the losses were not
 * computed (no targets; or for_backward and no gpt2_backward yet). */
ferry_status gpt2_loss(gpt2_activations *a, backend_stream *s, float *loss);
/* Next-token logits at batch row b, position t of the last forward:
 * logits[V] (host, fp32) = lnf(b, t) @ wte[0:V]^T, through ops_matmul_forward
 * with one row (acquires group 0 in the forward phase and releases it).
 * Synchronizes s. For sampling: run gpt2_forward without targets, then this. */
ferry_status gpt2_logits(const gpt2_model *m, gpt2_activations *a, const gpt2_hooks *h,
                         backend_stream *s, int b, int t, float *logits);

/* ---- everything resident: plain device buffers, no offload ---- */

typedef struct gpt2_resident gpt2_resident;

/* Allocates params and grads of every group with backend_alloc (grads zeroed),
 * plus a small fp32 staging buffer for conversions. */
ferry_status gpt2_resident_create(const gpt2_model *m, backend *be, gpt2_resident **out);
void gpt2_resident_destroy(gpt2_resident *r);
/* Hooks that hand out the resident buffers (nothing to wait for, nothing to
 * release). Valid while r lives. */
gpt2_hooks gpt2_resident_hooks(gpt2_resident *r);
/* gpt2_init_group for every group, uploaded. Synchronizes s. */
ferry_status gpt2_resident_init(gpt2_resident *r, backend_stream *s, uint64_t seed);
/* fp32 host values (gpt2_group_numel elements) to or from group g,
 * converted to or from the storage type. Synchronize s before returning. */
ferry_status gpt2_resident_set_params(gpt2_resident *r, backend_stream *s, int group,
                                      const float *host);
ferry_status gpt2_resident_get_params(gpt2_resident *r, backend_stream *s, int group,
                                      float *host);
ferry_status gpt2_resident_get_grads(gpt2_resident *r, backend_stream *s, int group, float *host);
/* Zeroes every gradient buffer (async on s). */
ferry_status gpt2_resident_zero_grads(gpt2_resident *r, backend_stream *s);
act_t *gpt2_resident_params(gpt2_resident *r, int group);
act_t *gpt2_resident_grads(gpt2_resident *r, int group);

#ifdef __cplusplus
}
#endif

#endif
