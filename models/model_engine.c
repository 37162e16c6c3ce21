/* A model's hooks answered by the engine, and its groups added to it; see
 * model_engine.h. */
#include "models/model_engine.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"

/* The model launches on the stream it is given; the engine's buffers may
 * only be used on the engine's compute stream (engine/intree.h). */
static ferry_status check_stream(ferry_engine *e, backend_stream *s)
{
    if (s == engine_embed_stream(e))
        return FERRY_OK;
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "a model on the engine runs on a stream other than the engine's compute "
                   "stream; pass engine_embed_stream(e) to its forward and backward");
}

static ferry_status hook_acquire_params(void *ctx, int group, ferry_phase phase, backend_stream *s,
                                        const act_t **params)
{
    void *w = NULL;
    ferry_status st = check_stream(ctx, s);
    if (st == FERRY_OK)
        st = ferry_engine_fetch(ctx, group, phase, &w);
    *params = w;
    return st;
}

static ferry_status hook_acquire_grads(void *ctx, int group, backend_stream *s, act_t **grads)
{
    void *g = NULL;
    ferry_status st = check_stream(ctx, s);
    if (st == FERRY_OK)
        st = ferry_engine_grads(ctx, group, &g);
    *grads = g;
    return st;
}

static ferry_status hook_release(void *ctx, int group, ferry_phase phase, backend_stream *s)
{
    ferry_status st = check_stream(ctx, s);
    return st == FERRY_OK ? ferry_engine_release(ctx, group, phase) : st;
}

model_hooks model_engine_hooks(ferry_engine *e)
{
    model_hooks h = {e, hook_acquire_params, hook_acquire_grads, hook_release};
    return h;
}

static ferry_status engine_alloc_activation(void *ctx, const char *what, size_t bytes, void **out)
{
    return ferry_engine_alloc(ctx, FERRY_MEM_ACTIVATIONS, what, bytes, out);
}

static void engine_free_activation(void *ctx, void *ptr) { ferry_engine_free(ctx, ptr); }

model_allocator model_engine_allocator(ferry_engine *e)
{
    model_allocator a = {e, engine_alloc_activation, engine_free_activation};
    return a;
}

ferry_status model_engine_add_groups(const model_desc *d, ferry_engine *e, uint64_t seed, float *const *values)
{
    for (int g = 0; g < d->num_groups(d->m); g++) {
        size_t n = d->group_numel(d->m, g);
        int count = d->tensor_count(d->m, g);
        float *init = values ? NULL : malloc(n * sizeof(float));
        size_t(*ranges)[2] = calloc((size_t)count + 1, sizeof *ranges);
        char name[32];
        d->group_label(d->m, g, name, sizeof name);
        ferry_group_options opts = FERRY_GROUP_OPTIONS_INIT;
        ferry_status st = !ranges || (!values && !init)
                              ? err_set(FERRY_ERR_OUT_OF_MEMORY,
                                        "%s: initialising group %d: out of host memory (%zu floats)", d->family, g, n)
                          : values ? FERRY_OK
                                   : d->init_group(d->m, g, seed, init);
        for (int t = 0; st == FERRY_OK && t < count; t++) {
            size_t off, numel;
            bool decay;
            st = d->tensor_span(d->m, g, t, &off, &numel, &decay);
            if (st == FERRY_OK && !decay) {
                ranges[opts.no_decay_count][0] = off;
                ranges[opts.no_decay_count][1] = numel;
                opts.no_decay_count++;
            }
        }
        opts.no_decay = (const size_t(*)[2])ranges;
        if (st == FERRY_OK)
            st = ferry_engine_add_group(e, name, n, values ? values[g] : init, &opts, NULL);
        free(ranges);
        free(init);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}
