/* The update's interface: chooses the implementation for the mode at
 * setup, dispatches to it, and holds what the implementations share: the
 * decay segments of a group, the CPU's AdamW jobs and the h2d stream's wait
 * for them, the uploads that follow each group's update (optimizer mode),
 * the rewrite in place of the copies params mode keeps on the device, the
 * delayed update's uploads, and the host arrays' side of reading and
 * writing master weights. Which gradients the update reads is the group
 * table's rule (group_step_grads); when the update runs is the step's. */
#include "engine/update_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "optim/half.h"

/* Why the split update cannot run with this engine's config; NULL when it can. */
static const char *split_unavailable(const update_env *env)
{
    const ferry_engine_config *cfg = env->ctx->cfg;
    if (ctx_disk(env->ctx))
        return "the NVMe tier keeps the optimizer state on disk";
    if (ctx_mode(env->ctx) != FERRY_OFFLOAD_OPTIMIZER)
        return "it splits offload 'optimizer' only";
    if (cfg->delayed_update)
        return "the delayed update overlaps the whole update with the next step";
    if (env->dp)
        return "with data parallelism each rank owns a part of the host state";
    if (cfg->moments != FERRY_MOMENTS_F32)
        return "the device's update holds fp32 moments, not compact ones";
    return NULL;
}

ferry_status update_open(const update_env *env, engine_update **out)
{
    const update_ops *ops;
    ferry_offload mode = ctx_mode(env->ctx);
    ferry_moments form = env->ctx->cfg->moments;
    if (form != FERRY_MOMENTS_F32 && mode == FERRY_OFFLOAD_NONE)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "ferry_engine_setup: moments %s with offload 'none' (the device's update holds fp32 moments); "
                       "compact moments train in offload 'optimizer' or 'params' (alone, with data parallelism or "
                       "with the NVMe tier); use moments f32 here",
                       ferry_moments_name(form));
    if (mode == FERRY_OFFLOAD_NONE)
        ops = &update_resident_ops;
    else if (ctx_disk(env->ctx))
        ops = &update_nvme_ops;
    else if (!split_unavailable(env) && env->ctx->cfg->device_update_groups != 0)
        ops = &update_split_ops; /* the CPU's, until the split takes the first groups */
    else
        ops = &update_cpu_ops;
    engine_update *u = calloc(1, sizeof *u + ops->state_bytes);
    if (u)
        u->tickets = calloc((size_t)(env->groups->n > 0 ? env->groups->n : 1), sizeof *u->tickets);
    if (!u || !u->tickets) {
        free(u);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    }
    u->ops = ops;
    u->env = *env;
    *out = u;
    return ops->start ? ops->start(u) : FERRY_OK;
}

void update_close(engine_update *u)
{
    if (!u)
        return;
    for (int i = 0; i < u->env.groups->n; i++) {
        update_tickets *t = &u->tickets[i];
        for (int k = 0; k < t->count; k++)
            tp_wait(t->t[k]);
        free(t->t);
    }
    if (u->ops->stop)
        u->ops->stop(u);
    free(u->tickets);
    free(u);
}

ferry_status update_fill(engine_update *u, engine_group *g) { return u->ops->fill(u, g); }
ferry_status update_setup_done(engine_update *u)
{
    int n = u->env.ctx->cfg->device_update_groups;
    const char *why = split_unavailable(&u->env);
    if (n > 0 && why)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "device_update_groups %d: the split update is not available here (%s); use 0, or -1 "
                       "(auto, which then keeps every update where the mode puts it)",
                       n, why);
    return u->ops->setup_done ? u->ops->setup_done(u) : FERRY_OK;
}

ferry_status update_write_weights(engine_update *u, engine_group *g)
{
    return u->ops->write_weights ? u->ops->write_weights(u, g) : update_write_offloaded(u, g);
}

ferry_status update_master_io(engine_update *u, engine_group *g, float *host, bool to_engine)
{
    if (u->ops->master_io)
        return u->ops->master_io(u, g, host, to_engine);
    if (dp_partitioned(u->env.dp, update_mode(u)))
        return to_engine ? dp_set_master(u->env.dp, g, host) : dp_get_master(u->env.dp, g, host);
    size_t bytes = g->numel * sizeof(float);
    if (to_engine)
        memcpy(g->master, host, bytes);
    else
        memcpy(host, g->master, bytes);
    return FERRY_OK;
}

ferry_status update_run(engine_update *u, const ferry_step_options *o, float clip)
{
    ferry_status st = u->ops->run(u, o, clip);
    if (st == FERRY_OK)
        u->dpu_pending = u->env.ctx->cfg->delayed_update;
    return st;
}

ferry_status update_barrier(engine_update *u, engine_group *g)
{
    return u->ops->barrier ? u->ops->barrier(u, g) : update_ticket_barrier(u, g);
}

ferry_status update_wait(engine_update *u)
{
    engine_groups *gs = u->env.groups;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < gs->n && st == FERRY_OK; i++)
        st = update_barrier(u, &gs->g[i]);
    for (int i = 0; i < gs->n && st == FERRY_OK; i++)
        st = backend_event_synchronize(gs->g[i].updated);
    if (st == FERRY_OK && u->ops->wait_idle)
        st = u->ops->wait_idle(u); /* the update's last writes too */
    return st;
}

ferry_status update_check(engine_update *u) { return u->ops->check ? u->ops->check(u) : FERRY_OK; }

ferry_status update_after_step(engine_update *u, const ferry_step_timing *t)
{
    return u->ops->after_step ? u->ops->after_step(u, t) : FERRY_OK;
}

ferry_status update_accumulators(engine_update *u)
{
    return u->ops->accumulators ? u->ops->accumulators(u) : FERRY_OK;
}

double update_last_ms(const engine_update *u) { return u->last_ms; }
int update_device_groups(const engine_update *u) { return u->ops->device_groups ? u->ops->device_groups(u) : 0; }

void update_set_note(engine_update *u, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(u->note, sizeof u->note, fmt, ap);
    va_end(ap);
    u->note_new = true;
}

const char *update_take_note(engine_update *u)
{
    if (!u || !u->note_new)
        return NULL;
    u->note_new = false;
    return u->note;
}

ferry_status update_pull(engine_update *u) { return u->ops->pull ? u->ops->pull(u) : FERRY_OK; }
ferry_status update_push(engine_update *u) { return u->ops->push ? u->ops->push(u) : FERRY_OK; }
bool update_delayed_pending(const engine_update *u) { return u->dpu_pending; }
void update_set_delayed_pending(engine_update *u, bool pending) { u->dpu_pending = pending; }

ferry_status update_state_chunks(engine_update *u, engine_group *g, int array, bool to_engine, void *buf,
                                 size_t chunk, update_chunk_fn fn, void *ctx)
{
    if (!u->ops->state_chunks)
        return err_set(FERRY_ERR_STATE, "group '%s': its optimizer state is in memory, not in a store", g->name);
    return u->ops->state_chunks(u, g, array, to_engine, buf, chunk, fn, ctx);
}

void update_stats(const engine_update *u, ferry_memory_stats *st)
{
    if (u && u->ops->stats)
        u->ops->stats(u, st);
}

void update_describe(const engine_update *u, char *buf, size_t cap)
{
    if (u && u->ops->describe)
        u->ops->describe(u, buf, cap);
}

/* ---- shared by the implementations ---- */

adamw_hparams update_hparams(const engine_group *g, const ferry_step_options *o, bool decay)
{
    adamw_hparams hp = {o->lr * g->opts.lr_scale, o->beta1, o->beta2, o->eps,
                        g->opts.weight_decay && decay ? o->weight_decay : 0.0f};
    return hp;
}

size_t update_clip_ranges(const size_t (*in)[2], size_t n, size_t lo, size_t len, size_t (*out)[2])
{
    size_t k = 0;
    for (size_t r = 0; r < n; r++) {
        size_t a = in[r][0], b = a + in[r][1];
        a = a > lo ? a : lo;
        b = b < lo + len ? b : lo + len;
        if (a < b) {
            out[k][0] = a - lo;
            out[k++][1] = b - a;
        }
    }
    return k;
}

static ferry_status own_part(engine_update *u, engine_group *g, size_t first, size_t n, adamw_hparams hp, float clip,
                             update_segment_fn fn)
{
    size_t lo = g->part_lo, hi = g->part_lo + g->part_n;
    size_t a = first > lo ? first : lo, b = first + n < hi ? first + n : hi;
    return a < b ? fn(u, g, a, b - a, hp, clip) : FERRY_OK;
}

ferry_status update_for_each_segment(engine_update *u, engine_group *g, const ferry_step_options *o, float clip,
                                     update_segment_fn fn)
{
    adamw_hparams hp = update_hparams(g, o, true), plain = hp;
    plain.weight_decay = 0.0f;
    size_t at = 0;
    ferry_status st = FERRY_OK;
    bool split = hp.weight_decay > 0.0f;
    for (size_t r = 0; split && r < g->no_decay_count && st == FERRY_OK; r++) {
        size_t off = g->no_decay[r][0], n = g->no_decay[r][1];
        if (off > at)
            st = own_part(u, g, at, off - at, hp, clip, fn);
        if (st == FERRY_OK && n > 0)
            st = own_part(u, g, off, n, plain, clip, fn);
        at = off + n;
    }
    if (st == FERRY_OK && at < g->numel)
        st = own_part(u, g, at, g->numel - at, hp, clip, fn);
    return st;
}

/* The last update's wall time, once all of it has run. */
static void note_finished_update(engine_update *u)
{
    uint64_t end = atomic_load(&u->end_us);
    if (u->start_ms > 0 && atomic_load(&u->tiles_left) == 0 && end > 0)
        u->last_ms = (double)end / 1e3 - u->start_ms;
}

ferry_status update_begin_offloaded(engine_update *u)
{
    note_finished_update(u);
    u->start_ms = clock_now_ms();
    atomic_store(&u->end_us, 0);
    /* Params mode: the groups on the device stay there and are rewritten in
     * place once their update is done (the weights change every step). */
    return update_mode(u) == FERRY_OFFLOAD_PARAMS ? res_settle(u->env.res) : FERRY_OK;
}

ferry_status update_copy_up(const engine_ctx *c, const engine_group *g)
{
    if (c->window) /* converted from the master weights as it streams */
        return engine_window_upload(c->window, c, g, g->dev_weights);
    return backend_memcpy_async(c->h2d, g->dev_weights, g->host_weights, g->numel * c->act_size, BACKEND_COPY_H2D);
}

/* One group's upload queued on the h2d stream behind `wait_for` (when not
 * NULL) and its own update. */
static ferry_status upload(engine_update *u, engine_group *g, backend_event *wait_for)
{
    const engine_ctx *c = u->env.ctx;
    ferry_status st = update_barrier(u, g);
    if (st != FERRY_OK)
        return st;
    if (u->env.dp)
        return dp_upload(u->env.dp, c, u->env.prog, g, (int)(g - u->env.groups->g), wait_for);
    size_t bytes = g->numel * c->act_size;
    u->env.prog->acc.transfer_h2d_bytes += (double)bytes;
    if ((wait_for && (st = backend_stream_wait_event(c->h2d, wait_for)) != FERRY_OK) ||
        (st = update_copy_up(c, g)) != FERRY_OK)
        return st;
    return backend_event_record(g->uploaded, c->h2d);
}

ferry_status update_upload_after(engine_update *u, int first)
{
    ferry_status st = FERRY_OK;
    for (int i = first; i < u->env.groups->n && st == FERRY_OK; i++)
        st = upload(u, &u->env.groups->g[i], NULL);
    return st;
}

ferry_status update_refresh_resident(engine_update *u)
{
    engine_groups *gs = u->env.groups;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < gs->n && st == FERRY_OK; i++)
        if (res_state(u->env.res, i) == RES_RETIRING)
            /* this rank's slot up (the others' gathered), after the compute stream's last read */
            st = upload(u, &gs->g[i], gs->g[i].released);
    return st;
}

/* Delayed update (DPU): the update of step t runs while step t+1 computes
 * with the weights of step t-1; each group's upload waits for that group's
 * backward in step t+1 to finish (the compute stream must not read weights
 * while they change). Its own release, not group 0's: an embedder may
 * release groups in any order. */
ferry_status update_prepare(engine_update *u)
{
    if (!u->env.ctx->cfg->delayed_update || !u->dpu_pending)
        return FERRY_OK;
    engine_groups *gs = u->env.groups;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < gs->n && st == FERRY_OK; i++)
        st = upload(u, &gs->g[i], gs->g[i].grads_done);
    /* The next update rewrites host_weights and master: the uploads must have read them. */
    for (int i = 0; i < gs->n && st == FERRY_OK; i++)
        st = backend_event_synchronize(gs->g[i].uploaded);
    u->dpu_pending = false;
    return st;
}

/* ---- the CPU's AdamW jobs ---- */

typedef struct update_wait_args {
    tp_ticket **tickets; /* owned by the host function, freed when waited */
    int count;
} update_wait_args;

static ferry_status wait_update(void *p)
{
    update_wait_args *a = p;
    ferry_status st = FERRY_OK;
    for (int k = 0; k < a->count; k++) {
        ferry_status one = tp_wait(a->tickets[k]);
        if (st == FERRY_OK)
            st = one;
    }
    free(a->tickets);
    return st;
}

ferry_status update_ticket_barrier(engine_update *u, engine_group *g)
{
    update_tickets *t = &u->tickets[g - u->env.groups->g];
    if (!t->t)
        return FERRY_OK;
    update_wait_args a = {t->t, t->count};
    ferry_status st = backend_launch_host(u->env.ctx->h2d, wait_update, &a, sizeof a);
    if (st != FERRY_OK)
        return st;
    t->t = NULL; /* the stream owns them now */
    t->count = 0;
    return backend_event_record(g->updated, u->env.ctx->h2d);
}

/* One segment's update on the pool, tile by tile; the tile that finishes the
 * whole step's update stamps the time, for the figure of the update's cost. */
typedef struct segment_job {
    engine_update *u;
    adamw_job job;
    size_t ranges[][2]; /* job.no_decay_count no-decay ranges, from the job's first element */
} segment_job;

static void segment_tile(void *ctx, size_t tile, int worker)
{
    (void)worker;
    segment_job *sj = ctx;
    adamw_job part = sj->job;
    size_t first = tile * OPTIM_TILE, esize = dtype_size(part.grad_dtype);
    part.n = sj->job.n - first < OPTIM_TILE ? sj->job.n - first : OPTIM_TILE;
    part.master += first;
    if (part.moments == FERRY_MOMENTS_F32) {
        part.m += first;
        part.v += first;
    } else {
        size_t esz = part.moments == FERRY_MOMENTS_BF16 ? 2 : 1;
        part.mq = (char *)part.mq + first * esz;
        part.vq = (char *)part.vq + first * esz;
        part.index0 += first;
        if (part.moments == FERRY_MOMENTS_8BIT) {
            part.m_absmax += first / MOMENTS_Q8_BLOCK;
            part.v_absmax += first / MOMENTS_Q8_BLOCK;
        }
    }
    /* the no-decay ranges of this tile, from its first element */
    size_t len = sj->job.n - first < OPTIM_TILE ? sj->job.n - first : OPTIM_TILE;
    size_t ranges[sj->job.no_decay_count > 0 ? sj->job.no_decay_count : 1][2];
    size_t k = update_clip_ranges((const size_t(*)[2])sj->ranges, sj->job.no_decay_count, first, len, ranges);
    part.no_decay = (const size_t(*)[2])ranges;
    part.no_decay_count = k;
    part.grad = (const char *)part.grad + first * esize;
    if (part.copy_out) /* none with the upload window */
        part.copy_out = (char *)part.copy_out + first * dtype_size(part.copy_dtype);
    adamw_run(NULL, &part); /* checked whole before submission */
    if (atomic_fetch_sub(&sj->u->tiles_left, 1) == 1)
        atomic_store(&sj->u->end_us, (uint64_t)(clock_now_ms() * 1e3));
}

/* Queues one job on the pool, tile by tile (`ranges`: its no-decay ranges). */
static ferry_status submit_job(engine_update *u, engine_group *g, adamw_job job, const size_t (*ranges)[2])
{
    const engine_ctx *c = u->env.ctx;
    size_t n = job.n, nr = job.no_decay_count;
    job.no_decay = ranges;
    ferry_status st = adamw_check(&job);
    if (st != FERRY_OK)
        return st;
    job.no_decay = NULL; /* the tiles take theirs from sj->ranges */
    update_tickets *t = &u->tickets[g - u->env.groups->g];
    tp_ticket **grown = realloc(t->t, (size_t)(t->count + 1) * sizeof *grown);
    segment_job *sj = malloc(sizeof *sj + nr * sizeof sj->ranges[0]);
    if (grown)
        t->t = grown;
    if (!grown || !sj) {
        free(sj);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "update of group '%s': out of host memory", g->name);
    }
    sj->u = u;
    sj->job = job;
    if (nr && ranges)
        memcpy(sj->ranges, ranges, nr * sizeof sj->ranges[0]);
    size_t ntiles = (n + OPTIM_TILE - 1) / OPTIM_TILE;
    atomic_fetch_add(&u->tiles_left, ntiles);
    st = tp_submit(c->threads, ntiles, segment_tile, sj, free, &t->t[t->count]);
    if (st == FERRY_OK)
        t->count++;
    else
        free(sj);
    return st;
}

/* Where the AdamW writes the device type's copy of element `at` on: the
 * upload copy, or nowhere with the upload window (it converts as it uploads). */
static void *upload_copy(const engine_ctx *c, engine_group *g, size_t at)
{
    return c->window ? NULL : (char *)g->host_weights + at * c->act_size;
}

static ferry_status submit_segment(engine_update *u, engine_group *g, size_t first, size_t n, adamw_hparams hp,
                                   float clip)
{
    const engine_ctx *c = u->env.ctx;
    ferry_dtype gt;
    const char *grads = group_step_grads(g, ctx_mode(c), u->env.prog->accumulating, u->env.dp != NULL, c->act, &gt);
    size_t at = first - g->part_lo; /* the host state holds this rank's part */
    adamw_job job = {g->master + at, g->m + at, g->v + at, grads + at * dtype_size(gt), gt, n,
                     u->env.prog->step + 1, hp, clip, upload_copy(c, g, at), c->act,
                     .moments = FERRY_MOMENTS_F32};
    return submit_job(u, g, job, NULL);
}

/* The no-decay ranges of g inside this rank's part, from part_lo; the
 * count in *count (at most g->no_decay_count). */
static void part_no_decay(const engine_group *g, size_t (*out)[2], size_t *count)
{
    *count = update_clip_ranges((const size_t(*)[2])g->no_decay, g->no_decay_count, g->part_lo, g->part_n, out);
}

/* Compact moments: one job over the group's part this rank owns (the whole
 * group alone), its no-decay tensors as ranges (an 8-bit block may span a
 * weight and a bias); the rounding's counter is the element's index in the
 * whole model, so every rank draws the bits one process draws. A part
 * starts on a whole tile of the norm, so on an 8-bit block: its blocks are
 * the ones a single process quantizes; its slot's padding stays zero. */
static ferry_status submit_compact(engine_update *u, engine_group *g, const ferry_step_options *o, float clip)
{
    const engine_ctx *c = u->env.ctx;
    ferry_moments form = c->cfg->moments;
    ferry_dtype gt;
    const char *grads = group_step_grads(g, ctx_mode(c), u->env.prog->accumulating, u->env.dp != NULL, c->act, &gt);
    if (g->part_n == 0)
        return FERRY_OK; /* a rank past the group's end owns none of it */
    if (g->part_lo % MOMENTS_Q8_BLOCK != 0)
        return err_set(FERRY_ERR_STATE, "update of group '%s': this rank's part starts at element %zu, not on a "
                                        "block of %zu of the compact moments",
                       g->name, g->part_lo, MOMENTS_Q8_BLOCK);
    adamw_hparams hp = update_hparams(g, o, true);
    uint64_t index0 = g->part_lo;
    for (const engine_group *h = u->env.groups->g; h < g; h++)
        index0 += h->numel;
    size_t count = 0;
    size_t(*ranges)[2] = g->no_decay_count ? malloc(g->no_decay_count * sizeof *ranges) : NULL;
    if (g->no_decay_count && !ranges)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "update of group '%s': out of host memory", g->name);
    if (hp.weight_decay > 0.0f)
        part_no_decay(g, ranges, &count);
    adamw_job job = {
        .master = g->master, .grad = grads, .grad_dtype = gt, .n = g->part_n, .step = u->env.prog->step + 1,
        .hp = hp, .grad_scale = clip, .copy_out = upload_copy(c, g, 0), .copy_dtype = c->act,
        .moments = form, .mq = g->mq, .vq = g->vq, .seed = c->cfg->moments_seed, .index0 = index0,
        .no_decay_count = count,
    };
    if (form == FERRY_MOMENTS_8BIT) { /* the slot's layout: part_cap codes, then their absmax */
        job.m_absmax = moments_q8_absmax(g->mq, g->part_cap);
        job.v_absmax = moments_q8_absmax(g->vq, g->part_cap);
    }
    ferry_status st = submit_job(u, g, job, (const size_t(*)[2])ranges);
    free(ranges);
    return st;
}

ferry_status update_submit_cpu(engine_update *u, const ferry_step_options *o, float clip, int first)
{
    ferry_status st = FERRY_OK;
    for (int i = first; i < u->env.groups->n && st == FERRY_OK; i++)
        st = u->env.ctx->cfg->moments != FERRY_MOMENTS_F32
                 ? submit_compact(u, &u->env.groups->g[i], o, clip)
                 : update_for_each_segment(u, &u->env.groups->g[i], o, clip, submit_segment);
    return st;
}

/* ---- setup's fill and the device copy, offload modes ---- */

ferry_status update_fill_offloaded(engine_update *u, engine_group *g)
{
    const engine_ctx *c = u->env.ctx;
    bool ranks = u->env.dp != NULL;
    /* This rank's part: the whole group alone; with data parallelism a slot
     * of part_cap elements holding part_n of the group from part_lo,
     * zero past them, with the gradients drained as fp32. */
    size_t f32 = g->part_cap * sizeof(float), act = g->numel * c->act_size;
    size_t grads = g->part_cap * (ranks ? sizeof(float) : c->act_size);
    ferry_status st;
    /* First touch from the optimizer's threads puts the pages on its node;
     * the master weights are first touched by the copy, on the same threads. */
    size_t mbytes = moments_bytes(c->cfg->moments, g->part_cap); /* zero bytes: zero moments in every form */
    if ((g->m && (st = tp_first_touch(c->threads, g->m, f32)) != FERRY_OK) ||
        (g->v && (st = tp_first_touch(c->threads, g->v, f32)) != FERRY_OK) ||
        (g->mq && (st = tp_first_touch(c->threads, g->mq, mbytes)) != FERRY_OK) ||
        (g->vq && (st = tp_first_touch(c->threads, g->vq, mbytes)) != FERRY_OK) ||
        (st = tp_first_touch(c->threads, g->host_grads, grads)) != FERRY_OK ||
        (ranks && (st = tp_first_touch(c->threads, g->master, f32)) != FERRY_OK) ||
        (ranks && g->host_weights &&
         (st = tp_first_touch(c->threads, g->host_weights, g->part_cap * c->act_size)) != FERRY_OK) ||
        (g->master && (st = half_convert_pool(c->threads, g->master, FERRY_DTYPE_F32, g->init + g->part_lo,
                                              FERRY_DTYPE_F32, g->part_n)) != FERRY_OK) ||
        (u->ops->fill_outside && (st = u->ops->fill_outside(u, g)) != FERRY_OK))
        return st;
    if (ctx_mode(c) == FERRY_OFFLOAD_OPTIMIZER &&
        (st = backend_memset_async(c->compute, g->dev_grads, 0, act)) != FERRY_OK)
        return st;
    return update_write_weights(u, g);
}

/* The host's weights to the device after setup or a load: the upload copy
 * rewritten from the master weights, unless the upload window converts
 * them as they go up; params mode's fetches then take them. Otherwise the
 * device copy now (with data parallelism this rank's slot up and the
 * others' gathered). */
ferry_status update_write_offloaded(engine_update *u, engine_group *g)
{
    const engine_ctx *c = u->env.ctx;
    ferry_status st = FERRY_OK;
    if (!c->window)
        st = g->master ? half_convert_pool(c->threads, g->host_weights, c->act, g->master, FERRY_DTYPE_F32, g->part_n)
                       : u->ops->convert_master(u, g);
    if (st != FERRY_OK || ctx_mode(c) == FERRY_OFFLOAD_PARAMS)
        return st;
    if (u->env.dp) {
        if ((st = upload(u, g, NULL)) != FERRY_OK)
            return st;
        return dp_check(u->env.dp); /* the gather's failure, if any, is the caller's */
    }
    if ((st = update_copy_up(c, g)) != FERRY_OK || (st = backend_event_record(g->uploaded, c->h2d)) != FERRY_OK)
        return st;
    return backend_stream_synchronize(c->h2d);
}
