/* The split update's test model, shared by engine-split (host backend)
 * and engine-split-sim (the cuda backend on the simulated device): four
 * groups (the largest last), weight decay on except one group and one
 * range, micro-batch counts that vary by step, gradients the norm of which
 * is clipped every step, read and written through the engine's stream. */
#ifndef FERRY_TESTS_ENGINE_SPLIT_FIXTURE_H
#define FERRY_TESTS_ENGINE_SPLIT_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/dtype.h"
#include "engine/intree.h"
#include "engine_fixture.h"
#include "tap.h"

enum { GROUPS = 4, STEPS = 6 };
/* The largest last: a forced split of the first three fits a budget that
 * holds every weight and gradient, all four do not. */
static const size_t numel[GROUPS] = {1000, 4097, 333, 200001};
static const int micro_of_step[STEPS] = {1, 2, 1, 3, 2, 1};
static const size_t exempt[1][2] = {{100, 900}};

static ferry_engine_config config_on(ferry_backend_kind kind, ferry_dtype dtype, int split)
{
    ferry_engine_config cfg = efix_config(kind, FERRY_OFFLOAD_OPTIMIZER, dtype, 2);
    cfg.device_update_groups = split;
    return cfg;
}

static ferry_status add_groups(ferry_engine *e)
{
    uint64_t rng = 7;
    ferry_status st = FERRY_OK;
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++) {
        float *w = malloc(numel[g] * sizeof(float));
        for (size_t i = 0; i < numel[g]; i++)
            w[i] = (float)(tap_rand_unit(&rng) - 0.5);
        ferry_group_options o = FERRY_GROUP_OPTIONS_INIT;
        o.weight_decay = g != 2; /* group 2: no decay at all */
        if (g == 0) {            /* group 0: a range exempt */
            o.no_decay = exempt;
            o.no_decay_count = 1;
        }
        char name[16];
        snprintf(name, sizeof name, "g%d", g);
        st = ferry_engine_add_group(e, name, numel[g], w, &o, NULL);
        free(w);
    }
    return st;
}

static ferry_engine *make_cfg(const ferry_engine_config *cfg)
{
    ferry_engine *e = NULL;
    if (ferry_engine_create(cfg, &e) != FERRY_OK)
        return NULL;
    if (add_groups(e) != FERRY_OK || ferry_engine_setup(e) != FERRY_OK) {
        tap_diag("setup: %s", ferry_last_error());
        ferry_engine_destroy(e);
        return NULL;
    }
    return e;
}


/* Micro-batch k of step s: a forward over every group, then a backward in
 * reverse adding grad = loss_scale x ((w - sin(i)) x (1 + k) + s / 7) to the
 * gradients; the weights read are the device copy the update wrote, through
 * the engine's stream (device memory on cuda). */
static ferry_status split_grads(ferry_engine *e, int g, const void *w, void *dw, int s, int k)
{
    backend_stream *q = engine_embed_stream(e);
    ferry_dtype t = ferry_engine_dtype(e);
    size_t bytes = numel[g] * dtype_size(t);
    float scale = ferry_engine_loss_scale(e);
    char *hw = malloc(bytes), *hg = malloc(bytes);
    ferry_status st = hw && hg ? FERRY_OK : FERRY_ERR_OUT_OF_MEMORY;
    if (st == FERRY_OK) st = backend_memcpy_async(q, hw, w, bytes, BACKEND_COPY_D2H);
    if (st == FERRY_OK) st = backend_memcpy_async(q, hg, dw, bytes, BACKEND_COPY_D2H);
    if (st == FERRY_OK) st = backend_stream_synchronize(q);
    for (size_t i = 0; i < numel[g] && st == FERRY_OK; i++) {
        float grad = (dtype_load_f32(hw, t, i) - sinf((float)i)) * (float)(1 + k) + (float)s / 7.0f;
        dtype_store_f32(hg, t, i, dtype_load_f32(hg, t, i) + grad * scale);
    }
    if (st == FERRY_OK) st = backend_memcpy_async(q, dw, hg, bytes, BACKEND_COPY_H2D);
    if (st == FERRY_OK) st = backend_stream_synchronize(q);
    free(hw);
    free(hg);
    return st;
}

static ferry_status micro_batch(ferry_engine *e, int s, int k, int count)
{
    ferry_status st = ferry_engine_begin_micro_batch(e, k, count);
    void *w, *dw;
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++)
        if ((st = ferry_engine_fetch(e, g, FERRY_PHASE_FORWARD, &w)) == FERRY_OK)
            st = ferry_engine_release(e, g, FERRY_PHASE_FORWARD);
    for (int g = GROUPS - 1; g >= 0 && st == FERRY_OK; g--) {
        st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
        if (st == FERRY_OK) st = ferry_engine_grads(e, g, &dw);
        if (st == FERRY_OK) st = split_grads(e, g, w, dw, s, k);
        if (st == FERRY_OK) st = ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
    }
    return st;
}

static ferry_status train(ferry_engine *e, int from, int to)
{
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 0.01f;
    o.weight_decay = 0.1f;
    o.max_grad_norm = 1.0f; /* the gradients' norm is in the hundreds: clipped every step */
    ferry_status st = FERRY_OK;
    for (int s = from; s < to && st == FERRY_OK; s++) {
        for (int k = 0; k < micro_of_step[s] && st == FERRY_OK; k++)
            st = micro_batch(e, s, k, micro_of_step[s]);
        ferry_step_report r = FERRY_STEP_REPORT_INIT;
        if (st == FERRY_OK) st = ferry_engine_step(e, &o, &r);
        if (st == FERRY_OK && !r.skipped && !(r.clip_coef < 1.0f)) {
            tap_diag("step %d: clip coefficient %g, expected clipping", s, (double)r.clip_coef);
            st = FERRY_ERR_STATE;
        }
    }
    if (st != FERRY_OK)
        tap_diag("training: %s", ferry_last_error());
    return st;
}

#endif
