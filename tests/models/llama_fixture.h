/* A Llama-family model on a backend for the model tests: backend (storing
 * a chosen type), stream, model, resident params/grads from the seeded
 * init, activations; one training micro-batch, and every group read back.
 * The backend, the resident state and the teardown are model_fixture.h's. */
#ifndef FERRY_TESTS_MODELS_LLAMA_FIXTURE_H
#define FERRY_TESTS_MODELS_LLAMA_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "models/llama.h"
#include "models/llama_engine.h"
#include "models/model.h"
#include "model_fixture.h"

typedef struct llama_fixture {
    backend *be;
    backend_stream *s;
    llama_model *m;
    model_resident *r;
    llama_activations *a;
    model_hooks h;
    model_allocator alloc;
    size_t total; /* elements of every group */
} llama_fixture;

static inline void llama_fixture_close(llama_fixture *f)
{
    mfix_wait(f->s);
    llama_activations_destroy(f->a);
    llama_destroy(f->m);
    mfix_close(f->be, f->s, f->r);
    memset(f, 0, sizeof *f);
}

/* The fixture on backend `kind` storing `act` (AUTO: the backend's own). */
static inline ferry_status llama_fixture_open(llama_fixture *f, ferry_backend_kind kind, ferry_dtype act,
                                              const llama_config *cfg, int B, int T, bool recompute, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    ferry_status st = mfix_backend(kind, act, "llama test", &f->be, &f->s);
    if (st == FERRY_OK) st = llama_create(cfg, &f->m);
    model_desc d = f->m ? llama_desc(f->m) : (model_desc){0};
    if (st == FERRY_OK) st = mfix_resident(&d, f->be, "llama", &f->r, &f->total);
    if (st == FERRY_OK) st = mfix_init(&d, f->r, f->s, seed, 1.0f);
    if (f->be)
        f->alloc = model_backend_allocator(f->be);
    if (st == FERRY_OK) st = llama_activations_create(f->m, f->be, B, T, recompute, &f->alloc, &f->a);
    if (st == FERRY_OK) f->h = model_resident_hooks(f->r);
    return st;
}

/* One micro-batch: forward, backward of grad_scale x the mean loss, loss. */
static inline ferry_status llama_fixture_step(llama_fixture *f, const int32_t *tokens, const int32_t *targets,
                                              float grad_scale, float *loss)
{
    ferry_status st = llama_forward(f->m, f->a, &f->h, f->s, tokens, targets, true);
    if (st == FERRY_OK) st = llama_backward(f->m, f->a, &f->h, f->s, grad_scale);
    if (st == FERRY_OK) st = llama_loss(f->a, f->s, loss);
    return st;
}

/* Every group's grads (or params) into one malloc'd array, groups in order. */
static inline float *llama_fixture_all(llama_fixture *f, bool grads)
{
    float *out = malloc((f->total ? f->total : 1) * sizeof *out);
    size_t at = 0;
    for (int g = 0; out && g < llama_num_groups(f->m); at += llama_group_numel(f->m, g), g++) {
        ferry_status st = grads ? model_resident_get_grads(f->r, f->s, g, out + at)
                                : model_resident_get_params(f->r, f->s, g, out + at);
        if (st != FERRY_OK) {
            free(out);
            return NULL;
        }
    }
    return out;
}

#endif
