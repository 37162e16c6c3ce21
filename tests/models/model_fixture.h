/* What the model tests' fixtures share (gpt2_fixture.h, llama_fixture.h,
 * and lfix below for the tests of either family through models/lmodel.h):
 * a backend opened for a model test (storing a chosen type, its ops ready,
 * one stream), resident parameters and gradients for a model of either
 * family through its model_desc (models/model_engine.h), the parameters
 * from the family's seeded init, and the teardown in the order the stream
 * needs; for the tests of a backend against the host: their argument, a
 * random batch, and the gap between two backends' gradients.
 * Activations and what a test runs stay with each test.
 * Header-only and plain C: the CUDA builds compile the model tests too. */
#ifndef FERRY_TESTS_MODELS_MODEL_FIXTURE_H
#define FERRY_TESTS_MODELS_MODEL_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "models/lmodel.h"
#include "models/model.h"
#include "models/model_engine.h"
#include "tests/tap.h"

/* A backend of `kind` storing act (FERRY_DTYPE_AUTO: the backend's own
 * type), its ops initialised, and a stream named `name`. */
static inline ferry_status mfix_backend(ferry_backend_kind kind, ferry_dtype act, const char *name, backend **be,
                                        backend_stream **s)
{
    ferry_status st = backend_open(kind, be);
    if (st == FERRY_OK) st = backend_set_act_dtype(*be, act);
    if (st == FERRY_OK) st = ops_init(*be, NULL, 0);
    if (st == FERRY_OK) st = backend_stream_create(*be, name, s);
    return st;
}

/* Resident parameters and gradients on be for d's groups, in order;
 * *total (when not NULL) gets their elements. */
static inline ferry_status mfix_resident(const model_desc *d, backend *be, const char *who, model_resident **r,
                                         size_t *total)
{
    int G = d->num_groups(d->m);
    size_t *numel = calloc((size_t)(G ? G : 1), sizeof *numel), sum = 0;
    for (int g = 0; numel && g < G; g++)
        sum += numel[g] = d->group_numel(d->m, g);
    if (total)
        *total = sum;
    ferry_status st = numel ? model_resident_create(be, G, numel, who, r) : FERRY_ERR_OUT_OF_MEMORY;
    free(numel);
    return st;
}

/* The resident parameters set, through s, to the family's init from seed,
 * each value times gain. */
static inline ferry_status mfix_init(const model_desc *d, model_resident *r, backend_stream *s, uint64_t seed,
                                     float gain)
{
    ferry_status st = FERRY_OK;
    for (int g = 0; g < d->num_groups(d->m) && st == FERRY_OK; g++) {
        size_t n = d->group_numel(d->m, g);
        float *v = malloc(n * sizeof *v);
        st = v ? d->init_group(d->m, g, seed, v) : FERRY_ERR_OUT_OF_MEMORY;
        for (size_t i = 0; st == FERRY_OK && i < n; i++)
            v[i] *= gain;
        if (st == FERRY_OK) st = model_resident_set_params(r, s, g, v);
        free(v);
    }
    return st;
}

/* The argument of a test of a backend against the host (cuda, the default,
 * host-bf16, cuda-f16, host-f16); bails out on anything else. *on_host and
 * *f16 say what it asks. */
static inline const char *mfix_backends_arg(int argc, char **argv, const char *prog, bool *on_host, bool *f16)
{
    const char *name = argc > 1 ? argv[1] : "cuda";
    *on_host = strncmp(name, "host", 4) == 0;
    *f16 = strstr(name, "-f16") != NULL;
    if (strcmp(name, "cuda") && strcmp(name, "host-bf16") && strcmp(name, "cuda-f16") && strcmp(name, "host-f16")) {
        printf("Bail out! usage: %s [cuda|host-bf16|cuda-f16|host-f16]\n", prog);
        exit(1);
    }
    return name;
}

/* n tokens below V and their targets (every 9th ignored: -1), drawn from
 * *rng in turn. */
static inline void mfix_tokens(int32_t *tok, int32_t *tgt, int n, int V, uint64_t *rng)
{
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(tap_rand_unit(rng) * V);
        tgt[i] = i % 9 == 8 ? -1 : (int32_t)(tap_rand_unit(rng) * V);
    }
}

/* ||dev / scale - host|| / ||host|| over n values (||dev / scale|| where
 * host is all zero): a backend's gradients under a loss scale against the
 * host's. *r2 (when not NULL) gets ||host||^2. */
static inline double mfix_rel_error(const float *dev, const float *host, size_t n, float scale, double *r2)
{
    double d2 = 0, h2 = 0;
    for (size_t e = 0; e < n; e++) {
        double a = dev[e] / scale, b = host[e];
        d2 += (a - b) * (a - b);
        h2 += b * b;
    }
    if (r2)
        *r2 = h2;
    return h2 > 0 ? sqrt(d2 / h2) : sqrt(d2);
}

/* Before anything the stream may still use is freed: waits for it. */
static inline void mfix_wait(backend_stream *s)
{
    if (s)
        backend_stream_synchronize(s);
}

/* After the model and its activations: the resident state (may be NULL),
 * the stream, the ops and the backend. */
static inline void mfix_close(backend *be, backend_stream *s, model_resident *r)
{
    model_resident_destroy(r);
    backend_stream_destroy(s);
    if (be)
        ops_shutdown(be);
    backend_close(be);
}

/* ---- a model of either family, resident on a backend ---- */

typedef struct lfix {
    backend *be;
    backend_stream *s;
    lmodel *m;
    model_resident *r;
    lmodel_acts *a; /* NULL unless the test makes them (lfix_close frees them) */
    model_hooks h;
    model_allocator alloc;
    size_t total; /* elements of every group */
} lfix;

static inline void lfix_close(lfix *f)
{
    mfix_wait(f->s);
    lmodel_acts_destroy(f->a);
    lmodel_destroy(f->m);
    mfix_close(f->be, f->s, f->r);
    memset(f, 0, sizeof *f);
}

/* spec's model on a backend of `kind` storing act, its resident parameters
 * the seeded init times gain; `name` names the stream and the state. */
static inline ferry_status lfix_open(lfix *f, ferry_backend_kind kind, ferry_dtype act, const model_spec *spec,
                                     const char *name, uint64_t seed, float gain)
{
    memset(f, 0, sizeof *f);
    ferry_status st = mfix_backend(kind, act, name, &f->be, &f->s);
    if (st == FERRY_OK) st = lmodel_create(spec, &f->m);
    model_desc d = f->m ? lmodel_desc(f->m) : (model_desc){0};
    if (st == FERRY_OK) st = mfix_resident(&d, f->be, name, &f->r, &f->total);
    if (st == FERRY_OK) st = mfix_init(&d, f->r, f->s, seed, gain);
    if (f->be)
        f->alloc = model_backend_allocator(f->be);
    if (st == FERRY_OK) f->h = model_resident_hooks(f->r);
    return st;
}

#endif
