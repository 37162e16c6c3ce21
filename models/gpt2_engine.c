/* GPT-2's hooks answered by the engine; see gpt2_engine.h. */
#include "models/gpt2_engine.h"

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
                   "gpt2 on the engine: the model runs on a stream other than the engine's compute "
                   "stream; pass engine_embed_stream(e) to gpt2_forward/gpt2_backward");
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

gpt2_hooks gpt2_engine_hooks(ferry_engine *e)
{
    gpt2_hooks h = {e, hook_acquire_params, hook_acquire_grads, hook_release};
    return h;
}

static ferry_status engine_alloc_activation(void *ctx, const char *what, size_t bytes, void **out)
{
    return ferry_engine_alloc(ctx, FERRY_MEM_ACTIVATIONS, what, bytes, out);
}

static void engine_free_activation(void *ctx, void *ptr) { ferry_engine_free(ctx, ptr); }

gpt2_allocator gpt2_engine_allocator(ferry_engine *e)
{
    gpt2_allocator a = {e, engine_alloc_activation, engine_free_activation};
    return a;
}

ferry_status gpt2_engine_add_groups(const gpt2_model *m, ferry_engine *e, uint64_t seed, float *const *values)
{
    for (int g = 0; g < gpt2_num_groups(m); g++) {
        size_t n = gpt2_group_numel(m, g);
        float *init = malloc(n * sizeof(float));
        if (!init)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "initialising group %d: out of host memory (%zu floats)", g, n);
        char name[32];
        gpt2_group_label(m, g, name, sizeof name);
        /* GPT-2 recipes decay only the 2-D weights: biases and layernorms are exempt. */
        size_t(*ranges)[2] = calloc((size_t)gpt2_group_tensor_count(m, g) + 1, sizeof *ranges);
        ferry_group_options opts = FERRY_GROUP_OPTIONS_INIT;
        ferry_status st = !ranges  ? err_set(FERRY_ERR_OUT_OF_MEMORY, "initialising group %d: out of host memory", g)
                          : values ? FERRY_OK
                                   : gpt2_init_group(m, g, seed, init);
        for (int t = 0; st == FERRY_OK && t < gpt2_group_tensor_count(m, g); t++) {
            gpt2_tensor_info info;
            st = gpt2_group_tensor(m, g, t, &info);
            if (st == FERRY_OK && !info.decay) {
                ranges[opts.no_decay_count][0] = info.offset;
                ranges[opts.no_decay_count][1] = info.numel;
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
