/* What every model family of models/ shares (GPT-2, the Llama family): the
 * caller's hooks that hand out parameters and gradients group by group, the
 * caller's allocator for activations, the seeded chunked initialisation,
 * the planner of activation buffers (one function both allocates and, dry,
 * counts them), and the resident placement the tests run a model on without
 * the engine. A family owns its configuration, layout and forward/backward;
 * none owns parameter memory. */
#ifndef FERRY_MODELS_MODEL_H
#define FERRY_MODELS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the caller's hooks: where the parameters and gradients are ---- */

typedef struct model_hooks {
    void *ctx;
    /* Device pointer of group g's params (act_t, the family's layout), after
     * making stream s wait until they are there. */
    ferry_status (*acquire_params)(void *ctx, int group, ferry_phase phase, backend_stream *s,
                                   const act_t **params);
    /* Group g's device gradient buffer: zeroed by the caller before the first
     * micro-batch, accumulated into by backward. */
    ferry_status (*acquire_grads)(void *ctx, int group, backend_stream *s, act_t **grads);
    /* The model is done with group g in this phase (forward: params not
     * needed until backward; backward: params and grads complete for this
     * micro-batch): the caller may record an event on s and release/drain. */
    ferry_status (*release)(void *ctx, int group, ferry_phase phase, backend_stream *s);
} model_hooks;

/* Device memory for activations comes from the caller, so its arena can
 * account for it. `what` names the tensor ("block 3 qkv"); the memory must be
 * valid device memory of the backend, 256-byte aligned. */
typedef struct model_allocator {
    void *ctx;
    ferry_status (*alloc)(void *ctx, const char *what, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
} model_allocator;

/* An allocator on backend_alloc/backend_free of `be` (tests, tools). */
model_allocator model_backend_allocator(backend *be);

/* The hooks checked for completeness; `who` names the family in the error. */
ferry_status model_check_hooks(const model_hooks *h, const char *who);
/* acquire_params / acquire_grads / release through h, with errors naming
 * `who` and the group, and a NULL pointer from a hook refused. */
ferry_status model_acquire(const model_hooks *h, const char *who, int g, ferry_phase phase, backend_stream *s,
                           const act_t **p);
ferry_status model_acquire_grads(const model_hooks *h, const char *who, int g, backend_stream *s, act_t **p);
ferry_status model_release(const model_hooks *h, const char *who, int g, ferry_phase phase, backend_stream *s);

/* ---- a batch's inputs and its loss ---- */

/* A batch's per-token positions (B x T, checked by ops_check_positions)
 * kept in *keep, a host copy allocated on first use; pos NULL frees it
 * (the positions 0..T-1 of every row again). On error *keep is as before. */
ferry_status model_keep_positions(const char *who, int32_t **keep, const int32_t *pos, int B, int T);
/* Checks tokens[B T] (each in [0, V)) and targets (NULL, or each < V;
 * negative ones are ignored) before anything is launched:
 * FERRY_ERR_INVALID_ARGUMENT naming `who`, the value, its batch row and
 * position. *n_valid counts the targets that are not ignored. */
ferry_status model_check_batch(const char *who, const int32_t *tokens, const int32_t *targets, int B, int T, int V,
                               int *n_valid);
/* The mean of losses[N] over n_valid valid targets, summed in double in
 * order (0 when none is valid). */
float model_mean_loss(const float *losses, int N, int n_valid);
/* A run's arguments: model, activations and stream given, the stream of the
 * activations' backend `be`, the hooks complete. */
ferry_status model_check_run(const char *who, const void *m, const void *a, backend_stream *s, const backend *be,
                             const model_hooks *h);

/* ---- activation buffers: allocated, or only counted ---- */

/* One planner for both: with `dry`, model_take only adds up the bytes (and
 * names each to `list`); else it allocates through `alloc` and keeps the
 * pointer for model_take_free. Sizes are rounded up to 256 bytes. */
typedef struct model_take {
    model_allocator alloc;
    bool dry;
    void (*list)(void *ctx, const char *what, size_t bytes);
    void *list_ctx;
    size_t bytes;
    void **owned;
    size_t owned_count, owned_cap;
    const char *who; /* "llama activations (B=2, T=64)": the errors' prefix */
} model_take;

ferry_status model_take_buf(model_take *t, void *out_ptr, size_t bytes, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Frees every buffer taken (not dry). */
void model_take_free(model_take *t);

/* ---- initialisation: seeded, chunked, the same bits on any thread count ---- */

typedef enum model_init_kind { MODEL_INIT_ZERO, MODEL_INIT_ONE, MODEL_INIT_NORMAL } model_init_kind;

/* One tensor of a group buffer: elements [offset, offset + numel), of which
 * the first `drawn` are drawn (a padded vocabulary's rows past the real
 * ones stay 0). */
typedef struct model_init_tensor {
    size_t offset, numel, drawn;
    model_init_kind kind;
    double std;
} model_init_tensor;

/* Fills out[group_numel]: each tensor as its kind says, everything between
 * and after them 0. Each 65536-element chunk of tensor i draws from its own
 * splitmix64 stream derived from (seed, group, i, chunk) and the chunks are
 * filled on every core ($FERRY_INIT_THREADS to choose how many), so the bits
 * never depend on the number of threads or on the order groups are filled. */
ferry_status model_init_fill(const model_init_tensor *tensors, int count, size_t group_numel, uint64_t seed,
                             int group, float *out);

/* ---- everything resident: plain device buffers, no offload ---- */

typedef struct model_resident model_resident;

/* Params and grads of `ngroups` groups of numel[g] elements of the backend's
 * storage type, allocated with backend_alloc (grads zeroed), plus a small
 * fp32 staging buffer for conversions. `who` ("gpt2", "llama") names errors. */
ferry_status model_resident_create(backend *be, int ngroups, const size_t *numel, const char *who,
                                   model_resident **out);
void model_resident_destroy(model_resident *r);
/* Hooks that hand out the resident buffers (nothing to wait for, nothing to
 * release). Valid while r lives. */
model_hooks model_resident_hooks(model_resident *r);
/* fp32 host values (numel[g] elements) to or from group g, converted to or
 * from the storage type. Synchronize s before returning. */
ferry_status model_resident_set_params(model_resident *r, backend_stream *s, int group, const float *host);
ferry_status model_resident_get_params(model_resident *r, backend_stream *s, int group, float *host);
ferry_status model_resident_get_grads(model_resident *r, backend_stream *s, int group, float *host);
/* Zeroes every gradient buffer (async on s). */
ferry_status model_resident_zero_grads(model_resident *r, backend_stream *s);
act_t *model_resident_params(model_resident *r, int group);
act_t *model_resident_grads(model_resident *r, int group);

#ifdef __cplusplus
}
#endif

#endif
