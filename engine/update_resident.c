/* The update of offload none: every group's fp32 master weights and Adam
 * moments on the device beside its weights and gradients, updated there by
 * the backend's AdamW on the compute stream, which the next forward runs on
 * after it: no barrier is needed. With data parallelism every rank updates
 * the whole model from the same all-reduced gradients. */
#include "engine/update_impl.h"

#include <string.h>

#include "backend/ops/ops.h"
#include "common/clock.h"

/* Fills master (from init), zero moments, and the device weights. */
static ferry_status resident_fill(engine_update *u, engine_group *g)
{
    const engine_ctx *c = u->env.ctx;
    size_t f32 = g->numel * sizeof(float), act = g->numel * c->act_size;
    ferry_status st;
    if ((st = backend_memcpy_async(c->compute, g->master, g->init, f32, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memset_async(c->compute, g->m, 0, f32)) != FERRY_OK ||
        (st = backend_memset_async(c->compute, g->v, 0, f32)) != FERRY_OK ||
        (st = backend_memset_async(c->compute, g->dev_grads, 0, act)) != FERRY_OK ||
        (st = ops_convert_from_f32(c->compute, g->dev_weights, g->master, g->numel)) != FERRY_OK)
        return st;
    /* init is freed after setup: the copy must have happened. */
    return backend_stream_synchronize(c->compute);
}

static ferry_status resident_write_weights(engine_update *u, engine_group *g)
{
    const engine_ctx *c = u->env.ctx;
    ferry_status st = ops_convert_from_f32(c->compute, g->dev_weights, g->master, g->numel);
    return st != FERRY_OK ? st : backend_stream_synchronize(c->compute);
}

/* Master weights are read and written on the host; here they sit on the
 * device and travel through the caller's buffer. */
static ferry_status resident_master_io(engine_update *u, engine_group *g, float *host, bool to_engine)
{
    const engine_ctx *c = u->env.ctx;
    size_t bytes = g->numel * sizeof(float);
    ferry_status st = backend_memcpy_async(c->compute, to_engine ? (void *)g->master : (void *)host,
                                           to_engine ? (void *)host : (void *)g->master, bytes,
                                           to_engine ? BACKEND_COPY_H2D : BACKEND_COPY_D2H);
    return st != FERRY_OK ? st : backend_stream_synchronize(c->compute);
}

static ferry_status run_segment(engine_update *u, engine_group *g, size_t first, size_t n, adamw_hparams hp,
                                float clip)
{
    const engine_ctx *c = u->env.ctx;
    size_t off = first * c->act_size;
    ferry_dtype gt;
    const char *grads = group_step_grads(g, ctx_mode(c), u->env.prog->accumulating, u->env.dp != NULL, c->act, &gt);
    return ops_adamw(c->compute, g->master + first, g->m + first, g->v + first, grads + first * dtype_size(gt), gt,
                     (char *)g->dev_weights + off, n, &hp, u->env.prog->step + 1, clip);
}

static ferry_status resident_run(engine_update *u, const ferry_step_options *o, float clip)
{
    ferry_status st = FERRY_OK;
    double t0 = clock_now_ms();
    for (int i = 0; i < u->env.groups->n && st == FERRY_OK; i++)
        st = update_for_each_segment(u, &u->env.groups->g[i], o, clip, run_segment);
    /* On cuda the kernels run on after this; the figure is then their launch. */
    u->last_ms = clock_now_ms() - t0;
    return st;
}

const update_ops update_resident_ops = {
    .name = "device",
    .fill = resident_fill,
    .run = resident_run,
    .write_weights = resident_write_weights,
    .master_io = resident_master_io,
};
