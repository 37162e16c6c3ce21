/* A GPT-2 on the host backend for the model tests: backend, stream, model,
 * resident params/grads, activations; plus reading all groups back. The
 * backend and its teardown are model_fixture.h's. */
#ifndef FERRY_TESTS_MODELS_GPT2_FIXTURE_H
#define FERRY_TESTS_MODELS_GPT2_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "models/gpt2.h"
#include "model_fixture.h"

typedef struct fixture {
    backend *be;
    backend_stream *s;
    gpt2_model *m;
    gpt2_resident *r;
    gpt2_activations *a;
    gpt2_hooks h;
    gpt2_allocator alloc;
    int B, T;
} fixture;

static inline void fixture_close(fixture *f)
{
    mfix_wait(f->s);
    gpt2_activations_destroy(f->a);
    gpt2_resident_destroy(f->r);
    gpt2_destroy(f->m);
    mfix_close(f->be, f->s, NULL);
    memset(f, 0, sizeof *f);
}

/* The fixture on a backend storing `act` (AUTO: the backend's own type). */
static inline ferry_status fixture_open_as(fixture *f, ferry_backend_kind kind, ferry_dtype act,
                                           const gpt2_config *cfg, int B, int T, bool recompute,
                                           uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->B = B;
    f->T = T;
    ferry_status st = mfix_backend(kind, act, "gpt2 test", &f->be, &f->s);
    if (st == FERRY_OK)
        st = gpt2_create(cfg, &f->m);
    if (st == FERRY_OK)
        st = gpt2_resident_create(f->m, f->be, &f->r);
    if (st == FERRY_OK)
        st = gpt2_resident_init(f->r, f->s, seed);
    f->alloc = gpt2_backend_allocator(f->be);
    if (st == FERRY_OK)
        st = gpt2_activations_create(f->m, f->be, B, T, recompute, &f->alloc, &f->a);
    if (st == FERRY_OK)
        f->h = gpt2_resident_hooks(f->r);
    return st;
}

static inline ferry_status fixture_open_on(fixture *f, ferry_backend_kind kind,
                                           const gpt2_config *cfg, int B, int T, bool recompute,
                                           uint64_t seed)
{
    return fixture_open_as(f, kind, FERRY_DTYPE_AUTO, cfg, B, T, recompute, seed);
}

static inline ferry_status fixture_open(fixture *f, const gpt2_config *cfg, int B, int T,
                                        bool recompute, uint64_t seed)
{
    return fixture_open_on(f, FERRY_BACKEND_HOST, cfg, B, T, recompute, seed);
}

/* One micro-batch: forward, backward (its gradient times grad_scale, as a
 * loss scale makes it), loss. */
static inline ferry_status fixture_step_scaled(fixture *f, const int32_t *tokens, const int32_t *targets,
                                               float *loss, float grad_scale)
{
    ferry_status st = gpt2_forward(f->m, f->a, &f->h, f->s, tokens, targets, true);
    if (st == FERRY_OK)
        st = gpt2_backward(f->m, f->a, &f->h, f->s, grad_scale);
    if (st == FERRY_OK)
        st = gpt2_loss(f->a, f->s, loss);
    return st;
}

/* One micro-batch: forward, backward (grad_scale 1), loss. */
static inline ferry_status fixture_step(fixture *f, const int32_t *tokens, const int32_t *targets,
                                 float *loss)
{
    ferry_status st = gpt2_forward(f->m, f->a, &f->h, f->s, tokens, targets, true);
    if (st == FERRY_OK)
        st = gpt2_backward(f->m, f->a, &f->h, f->s, 1.0f);
    if (st == FERRY_OK)
        st = gpt2_loss(f->a, f->s, loss);
    return st;
}

/* Every group's grads (or params) into one malloc'd array, groups in order. */
static inline float *fixture_all(fixture *f, bool grads, size_t *total)
{
    int G = gpt2_num_groups(f->m);
    size_t n = 0;
    for (int g = 0; g < G; g++)
        n += gpt2_group_numel(f->m, g);
    float *out = malloc(n * sizeof *out);
    size_t off = 0;
    for (int g = 0; g < G && out; g++) {
        if (grads)
            gpt2_resident_get_grads(f->r, f->s, g, out + off);
        else
            gpt2_resident_get_params(f->r, f->s, g, out + off);
        off += gpt2_group_numel(f->m, g);
    }
    *total = n;
    return out;
}

#endif
