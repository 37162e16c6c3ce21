/* The update of the NVMe tier: which of a group's arrays live on disk is
 * layout.c's table (Adam m and v; the master weights with nvme_master);
 * this implementation puts them in the store (offload/nvme.h, one region a
 * group: array 0 m, 1 v, 2 master; the moments in the engine's form,
 * engine_disk_forms), fills them at setup, and runs the update through the
 * store's window. Compact moments run one job a tile (update_compact), and
 * a checkpoint's 8bit moment (every code, then every absmax) is streamed
 * codes first, the absmax kept aside.
 *
 * The update runs on a thread of its own, one step at a time: it sweeps the
 * groups in forward order, tile by tile. While a pool of its own runs AdamW
 * on tile k (the same element update as optimizer mode's, so the same
 * bits), the store's own thread keeps the reads of the tiles after it and
 * the writes of the ones before it in flight; the same pool verifies each
 * tile's CRC-32Cs as it is handed over and computes them as it is put, a
 * block a task (the store's `parallel`); the thread waits for the disk only
 * when the disk is the slower. When a
 * group's last tile is updated its upload copy is whole, and the group's
 * barrier opens: a host function on the h2d stream waits for exactly that
 * group, so each upload (optimizer mode) or fetch (params mode) waits for
 * its own group only, as in optimizer mode.
 *
 * A failure of the disk (EIO, ENOSPC, a file removed or truncated, a
 * checksum mismatch) is kept: every later barrier, step, micro-batch,
 * synchronize and save returns it, so training never goes on from damaged
 * state and no checkpoint is written from it. Owns the thread and its
 * hand-over; what a group's buffers are is placement.c's. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/units.h"
#include "engine/intree.h"
#include "engine/update_impl.h"
#include "offload/nvme.h"
#include "optim/half.h"
#include "optim/moments.h"

enum { ARRAY_M = 0, ARRAY_V = 1, ARRAY_MASTER = 2 };

/* One step's update, as the thread gets it. */
typedef struct nvme_job {
    ferry_step_options o;
    float clip;
    int64_t step;        /* the step being taken, 1-based */
    uint64_t generation; /* 1, 2, ...: which barrier waits for it */
} nvme_job;

typedef struct nvme_state {
    nvme_store *store;
    /* The update's own CPU threads: the engine's pool may hold the next
     * step's drain jobs, whose tiles wait for gradients that wait (through
     * the forward) for this update, so AdamW here must not queue behind them. */
    tp_pool *threads;
    int narrays; /* 2, or 3 with the master weights on disk (ctx->mode) */
    nvme_span *spans;       /* every group, all of its arrays, in forward order */
    const void **grads;     /* per group: the gradients the job reads (taken at hand-over) */
    ferry_dtype grad_dtype;

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, job_ready;
    nvme_job job;
    uint64_t generation;    /* of the last job handed over */
    uint64_t current;       /* of the job the thread runs (or ran last) */
    int groups_done;        /* of `current`: groups whose update is whole */
    uint64_t finished;      /* of the last job that ended, writes included */
    uint64_t failed_gen;    /* the job that failed (0: none) ... */
    int failed_done;        /* ... and how many of its groups were whole */
    ferry_status failed;
    char failure[ERR_MESSAGE_MAX];
    /* per group: its region in the store, and the update whose end its next
     * upload waits for (0: none pending) */
    int *region;
    uint64_t *wait;
} nvme_state;

static nvme_state *N(engine_update *u) { return update_state(u); }
static const nvme_state *NC(const engine_update *u) { return update_state_c(u); }

static ferry_status failure_of(nvme_state *n)
{
    return err_set(n->failed, "%s", n->failure);
}

/* ---- the update of one tile ---- */

typedef struct tile_ctx {
    engine_update *u;
    engine_group *g;
    const nvme_tile *t;
    const nvme_job *job;
    const void *grads;
    ferry_dtype gt;
    float *master; /* the tile's first master weight */
} tile_ctx;

/* AdamW on elements [a, b) of the group, clipped to the tile. */
static ferry_status run_range(const tile_ctx *c, size_t a, size_t b, adamw_hparams hp)
{
    size_t t0 = c->t->first, t1 = c->t->first + c->t->n;
    if (a < t0)
        a = t0;
    if (b > t1)
        b = t1;
    if (a >= b)
        return FERRY_OK;
    size_t k = a - t0;
    const engine_ctx *x = c->u->env.ctx;
    adamw_job j = {c->master + k, c->t->array[ARRAY_M] + k, c->t->array[ARRAY_V] + k,
                   (const char *)c->grads + a * dtype_size(c->gt), c->gt, b - a, c->job->step, hp, c->job->clip,
                   (char *)c->g->host_weights + a * x->act_size, x->act, .moments = FERRY_MOMENTS_F32};
    return adamw_run(N(c->u)->threads, &j);
}

/* Compact moments: one job over the tile as submit_compact's over the
 * group, its no-decay ranges clipped to it (an 8-bit block may span a
 * weight and a bias), the rounding's counter the element's index in the
 * whole model; a tile starts on an 8-bit block, so its blocks are the
 * group's. The same bits as the in-memory update. */
static ferry_status update_compact(const tile_ctx *c)
{
    const engine_group *g = c->g;
    const engine_ctx *x = c->u->env.ctx;
    size_t t0 = c->t->first, n = c->t->n, count = 0;
    adamw_hparams hp = update_hparams(g, &c->job->o, true);
    size_t ranges[g->no_decay_count ? g->no_decay_count : 1][2];
    if (hp.weight_decay > 0.0f)
        count = update_clip_ranges((const size_t(*)[2])g->no_decay, g->no_decay_count, t0, n, ranges);
    uint64_t index0 = t0;
    for (const engine_group *h = c->u->env.groups->g; h < g; h++)
        index0 += h->numel;
    adamw_job j = {
        .master = c->master, .grad = (const char *)c->grads + t0 * dtype_size(c->gt), .grad_dtype = c->gt, .n = n,
        .step = c->job->step, .hp = hp, .grad_scale = c->job->clip,
        .copy_out = (char *)g->host_weights + t0 * x->act_size, .copy_dtype = x->act, .moments = x->cfg->moments,
        .mq = c->t->array[ARRAY_M], .vq = c->t->array[ARRAY_V], .seed = x->cfg->moments_seed, .index0 = index0,
        .no_decay = (const size_t(*)[2])ranges, .no_decay_count = count,
    };
    if (j.moments == FERRY_MOMENTS_8BIT) { /* the tile's layout: n codes, then their absmax */
        j.m_absmax = moments_q8_absmax(j.mq, n);
        j.v_absmax = moments_q8_absmax(j.vq, n);
    }
    return adamw_run(N(c->u)->threads, &j);
}

/* The decayed parts and the ranges exempt from weight decay, as
 * update_for_each_segment splits them; element-wise, so the split changes
 * no bit. */
static ferry_status update_tile(const tile_ctx *c)
{
    const engine_group *g = c->g;
    if (c->u->env.ctx->cfg->moments != FERRY_MOMENTS_F32)
        return update_compact(c);
    adamw_hparams hp = update_hparams(g, &c->job->o, true), plain = update_hparams(g, &c->job->o, false);
    bool split = hp.weight_decay > 0.0f;
    size_t at = 0;
    ferry_status st = FERRY_OK;
    for (size_t r = 0; split && r < g->no_decay_count && st == FERRY_OK; r++) {
        size_t off = g->no_decay[r][0], n = g->no_decay[r][1];
        if (off > at)
            st = run_range(c, at, off, hp);
        if (st == FERRY_OK && n > 0)
            st = run_range(c, off, off + n, plain);
        at = off + n;
    }
    if (st == FERRY_OK && at < g->numel)
        st = run_range(c, at, g->numel, hp);
    return st;
}

/* ---- the thread ---- */

static void group_done(nvme_state *n, int i)
{
    pthread_mutex_lock(&n->mu);
    n->groups_done = i + 1;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
}

static ferry_status run_job(engine_update *u, const nvme_job *job)
{
    nvme_state *n = N(u);
    engine_groups *gs = u->env.groups;
    ferry_status st = nvme_sweep_begin(n->store, NVME_UPDATE, n->spans, gs->n);
    if (st != FERRY_OK)
        return st;
    for (int i = 0; i < gs->n && st == FERRY_OK; i++) {
        engine_group *g = &gs->g[i];
        size_t tiles = nvme_region_tiles(n->store, n->region[i]);
        for (size_t k = 0; k < tiles && st == FERRY_OK; k++) {
            nvme_tile t;
            bool done = false;
            if ((st = nvme_sweep_next(n->store, &t, &done)) != FERRY_OK)
                break;
            tile_ctx c = {.u = u, .g = g, .t = &t, .job = job, .grads = n->grads[i], .gt = n->grad_dtype,
                          .master = u->env.ctx->mode.master_on_disk ? t.array[ARRAY_MASTER] : g->master + t.first};
            st = update_tile(&c);
            ferry_status put = nvme_sweep_put(n->store, &t);
            if (st == FERRY_OK)
                st = put;
        }
        if (st == FERRY_OK)
            group_done(n, i);
    }
    ferry_status end = nvme_sweep_end(n->store);
    atomic_store(&u->end_us, (uint64_t)(clock_now_ms() * 1e3));
    return st != FERRY_OK ? st : end;
}

static void *update_thread(void *p)
{
    engine_update *u = p;
    nvme_state *n = N(u);
    pthread_mutex_lock(&n->mu);
    for (;;) {
        while (!n->stop && !n->job_ready)
            pthread_cond_wait(&n->cv, &n->mu);
        if (n->stop)
            break;
        nvme_job job = n->job;
        n->job_ready = false;
        n->current = job.generation;
        n->groups_done = 0;
        bool failed = n->failed != FERRY_OK;
        pthread_mutex_unlock(&n->mu);
        /* After a failure the state on disk is not to be trusted: no more updates. */
        ferry_status st = failed ? FERRY_OK : run_job(u, &job);
        pthread_mutex_lock(&n->mu);
        if (st != FERRY_OK && n->failed == FERRY_OK) {
            n->failed = st;
            snprintf(n->failure, sizeof n->failure, "%s", ferry_last_error());
            n->failed_gen = job.generation;
            n->failed_done = n->groups_done;
        }
        n->finished = job.generation;
        pthread_cond_broadcast(&n->cv);
    }
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

/* Whether group i's update of generation gen is whole; *bad when it never
 * will be. Under n->mu. */
static bool group_ready(const nvme_state *n, int i, uint64_t gen, bool *bad)
{
    *bad = n->failed != FERRY_OK && n->failed_gen <= gen && !(n->failed_gen == gen && n->failed_done > i);
    return *bad || n->finished >= gen || (n->current == gen && n->groups_done > i);
}

/* ---- the update's calls ---- */

static ferry_status nvme_check(engine_update *u)
{
    nvme_state *n = N(u);
    pthread_mutex_lock(&n->mu);
    ferry_status st = n->failed != FERRY_OK ? failure_of(n) : FERRY_OK;
    pthread_mutex_unlock(&n->mu);
    return st;
}

typedef struct barrier_args {
    nvme_state *n;
    int group;
    uint64_t generation;
} barrier_args;

static ferry_status wait_group(void *p)
{
    barrier_args *a = p;
    nvme_state *n = a->n;
    bool bad = false;
    pthread_mutex_lock(&n->mu);
    while (!group_ready(n, a->group, a->generation, &bad))
        pthread_cond_wait(&n->cv, &n->mu);
    ferry_status st = bad ? failure_of(n) : FERRY_OK;
    pthread_mutex_unlock(&n->mu);
    return st;
}

static ferry_status nvme_barrier(engine_update *u, engine_group *g)
{
    int gi = (int)(g - u->env.groups->g);
    nvme_state *n = N(u);
    if (!n->wait[gi])
        return update_ticket_barrier(u, g);
    barrier_args a = {n, gi, n->wait[gi]};
    ferry_status st = backend_launch_host(u->env.ctx->h2d, wait_group, &a, sizeof a);
    if (st != FERRY_OK)
        return st;
    n->wait[gi] = 0; /* the stream waits for it now */
    return backend_event_record(g->updated, u->env.ctx->h2d);
}

static ferry_status nvme_wait_idle(engine_update *u)
{
    nvme_state *n = N(u);
    pthread_mutex_lock(&n->mu);
    while (n->started && (n->job_ready || n->finished < n->generation))
        pthread_cond_wait(&n->cv, &n->mu);
    ferry_status st = n->failed != FERRY_OK ? failure_of(n) : FERRY_OK;
    pthread_mutex_unlock(&n->mu);
    return st;
}

/* Hands the step's update to the thread and, in optimizer mode, queues
 * each group's upload behind its own update. */
static ferry_status hand_over(engine_update *u, const ferry_step_options *o, float clip)
{
    nvme_state *n = N(u);
    engine_groups *gs = u->env.groups;
    const engine_ctx *c = u->env.ctx;
    ferry_status st;
    if ((st = nvme_check(u)) != FERRY_OK)
        return st;
    pthread_mutex_lock(&n->mu);
    while (n->job_ready) /* the last step's job not yet taken: never in practice */
        pthread_cond_wait(&n->cv, &n->mu);
    for (int i = 0; i < gs->n; i++)
        n->grads[i] = group_step_grads(&gs->g[i], ctx_mode(c), u->env.prog->accumulating, false, c->act,
                                       &n->grad_dtype);
    uint64_t gen = ++n->generation;
    n->job = (nvme_job){*o, clip, u->env.prog->step + 1, gen};
    n->job_ready = true;
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    for (int i = 0; i < gs->n; i++)
        n->wait[i] = gen;
    if (ctx_mode(c) != FERRY_OFFLOAD_OPTIMIZER)
        return FERRY_OK; /* params mode: each fetch waits for its group */
    /* Each group's upload follows its own update, in forward order. */
    st = update_upload_after(u, 0);
    if (st != FERRY_OK) {
        /* The update runs on regardless, but the step will not be counted
         * and some uploads are missing: the engine's state no longer adds
         * up, so nothing may go on from it, a save included. */
        pthread_mutex_lock(&n->mu);
        if (n->failed == FERRY_OK) {
            n->failed = st;
            snprintf(n->failure, sizeof n->failure, "the step's update could not be queued whole, so the engine "
                     "stops (checkpoints saved before are whole): %s", ferry_last_error());
            n->failed_gen = gen + 1;
        }
        pthread_mutex_unlock(&n->mu);
        return failure_of(n);
    }
    return FERRY_OK;
}

static ferry_status nvme_run(engine_update *u, const ferry_step_options *o, float clip)
{
    ferry_status st = update_begin_offloaded(u);
    if (st == FERRY_OK)
        st = hand_over(u, o, clip);
    return st == FERRY_OK && update_mode(u) == FERRY_OFFLOAD_PARAMS ? update_refresh_resident(u) : st;
}

/* ---- setup and teardown ---- */

static ferry_status start_thread(engine_update *u)
{
    nvme_state *n = N(u);
    int rc = pthread_create(&n->thread, NULL, update_thread, u);
    if (rc != 0) {
        char why[256];
        err_thread_refusal(rc, why, sizeof why);
        return err_set(FERRY_ERR_BACKEND, "starting the NVMe update thread: %s", why);
    }
    n->started = true;
    return FERRY_OK;
}

static ferry_status add_regions(engine_update *u)
{
    nvme_state *n = N(u);
    engine_groups *gs = u->env.groups;
    static const char *const names[3] = {"adam m", "adam v", "master"};
    static const ferry_mem_category cats[3] = {FERRY_MEM_OPTIMIZER, FERRY_MEM_OPTIMIZER, FERRY_MEM_PARAMS};
    nvme_form forms[ENGINE_DISK_ARRAYS];
    engine_disk_forms(u->env.ctx->cfg->moments, forms);
    for (int i = 0; i < gs->n; i++) {
        engine_group *g = &gs->g[i];
        ferry_status st = nvme_add_region_as(n->store, g->name, g->numel, n->narrays, names, cats, forms,
                                             &n->region[i]);
        if (st != FERRY_OK)
            return st;
        n->spans[i] = (nvme_span){n->region[i], (1u << n->narrays) - 1};
    }
    return FERRY_OK;
}

/* Reserves, in one slab of the host pool, exactly what setup is about to
 * allocate there (the planner's count), so host_budget_bytes holds what the
 * plan says. */
static ferry_status reserve_host(engine_update *u)
{
    const engine_ctx *x = u->env.ctx;
    const ferry_engine_config *cfg = x->cfg;
    engine_groups *gs = u->env.groups;
    size_t *numel = malloc((size_t)gs->n * sizeof *numel);
    if (!numel)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the NVMe tier: out of host memory");
    for (int i = 0; i < gs->n; i++)
        numel[i] = gs->g[i].numel;
    engine_plan_request rq = {
        .backend = backend_kind(x->be),
        .dtype = x->act,
        .offload = x->mode.asked,
        .moments = cfg->moments,
        .prefetch_groups = cfg->prefetch_groups,
        .micro_batches = 1,
        .group_numel = numel,
        .ngroups = gs->n,
        .disk = true,
        .disk_master = x->mode.master_on_disk,
        .disk_window_bytes = cfg->nvme_window_bytes,
        .disk_block_bytes = cfg->nvme_block_bytes,
        .ranks = 1,
        .device_budget = 0,
        .embedder_bytes = 0,
    };
    engine_memory_plan p;
    ferry_status st = engine_plan_memory(&rq, &p);
    free(numel);
    uint64_t total = 0;
    for (int c = 0; st == FERRY_OK && c < FERRY_MEM_CATEGORY_COUNT; c++)
        total += p.host_bytes[c];
    if (st == FERRY_OK && (st = pool_reserve(x->pool, (size_t)total, "the host state of every group and the NVMe window")) !=
                              FERRY_OK) {
        char w[32];
        return err_wrap(st, "offload nvme keeps the drained gradients, the upload copy%s and a %s window in host "
                        "memory; raise host_budget_bytes, %sor give nvme_window_bytes less",
                        x->mode.master_on_disk ? "" : ", the fp32 master weights",
                        units_fmt_bytes(w, sizeof w, p.host_bytes[FERRY_MEM_NVME]),
                        x->mode.master_on_disk ? "" : "put the master weights on disk too (nvme_master), ");
    }
    return st;
}

/* The store's checksums on the update's pool. */
static ferry_status on_pool(void *ctx, size_t n, void (*task)(void *arg, size_t i, int worker), void *arg)
{
    return tp_parallel_for(ctx, n, task, arg);
}

/* Creates the store with a region per group (the arrays layout.c puts on
 * disk), opens it and starts the update thread. */
static ferry_status nvme_open_store(engine_update *u)
{
    const engine_ctx *x = u->env.ctx;
    nvme_state *n = N(u);
    int ng = u->env.groups->n > 0 ? u->env.groups->n : 1;
    n->narrays = x->mode.master_on_disk ? 3 : 2;
    n->spans = calloc((size_t)ng, sizeof *n->spans);
    n->grads = calloc((size_t)ng, sizeof *n->grads);
    n->region = calloc((size_t)ng, sizeof *n->region);
    n->wait = calloc((size_t)ng, sizeof *n->wait);
    if (!n->spans || !n->grads || !n->region || !n->wait)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the NVMe tier: out of host memory");
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = ctx_disk(u->env.ctx);
    c.window_bytes = x->cfg->nvme_window_bytes;
    c.block_bytes = (size_t)x->cfg->nvme_block_bytes;
    c.queue_depth = x->cfg->nvme_queue_depth;
    c.pool = x->pool;
    c.trace = x->trace;
    ferry_status st = tp_pool_create(x->cfg->optimizer_threads, x->numa_node, &n->threads);
    c.parallel = on_pool;
    c.parallel_ctx = n->threads;
    if (st == FERRY_OK)
        st = nvme_create(&c, &n->store);
    if (st == FERRY_OK)
        st = add_regions(u);
    if (st == FERRY_OK)
        st = nvme_open(n->store);
    if (st == FERRY_OK)
        st = start_thread(u);
    if (st == FERRY_ERR_IO && x->mode.master_on_disk && strstr(ferry_last_error(), "is too small")) {
        /* The store's advice is its own; the engine knows it put the master
         * weights there too, so they can come back to host memory. */
        char keep[ERR_MESSAGE_MAX];
        snprintf(keep, sizeof keep, "%s", ferry_last_error());
        return err_set(st, "setting up the NVMe tier in '%s': %s; or keep the master weights in host memory (leave "
                       "nvme_master unset), which takes a third off the state on disk", ctx_disk(u->env.ctx), keep);
    }
    if (st != FERRY_OK)
        return err_wrap(st, "setting up the NVMe tier in '%s'", ctx_disk(u->env.ctx));
    return FERRY_OK;
}

static ferry_status nvme_update_open(engine_update *u)
{
    pthread_mutex_init(&N(u)->mu, NULL);
    pthread_cond_init(&N(u)->cv, NULL);
    ferry_status st = reserve_host(u);
    return st == FERRY_OK ? nvme_open_store(u) : st;
}

static void nvme_close(engine_update *u)
{
    nvme_state *n = N(u);
    if (n->started) {
        pthread_mutex_lock(&n->mu);
        while (n->job_ready || n->finished < n->generation)
            pthread_cond_wait(&n->cv, &n->mu);
        n->stop = true;
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->thread, NULL);
    }
    tp_pool_destroy(n->threads);
    nvme_destroy(n->store);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n->spans);
    free(n->grads);
    free(n->region);
    free(n->wait);
}

/* ---- whole sweeps from the caller's thread (the update thread is idle) ---- */

typedef ferry_status (*tile_fn)(engine_update *u, engine_group *g, nvme_tile *t, void *ctx);

static ferry_status sweep_group(engine_update *u, engine_group *g, nvme_mode mode, unsigned arrays, tile_fn fn,
                                void *ctx)
{
    nvme_state *n = N(u);
    ferry_status st = nvme_wait_idle(u);
    nvme_span span = {n->region[g - u->env.groups->g], arrays};
    if (st == FERRY_OK)
        st = nvme_sweep_begin(n->store, mode, &span, 1);
    if (st != FERRY_OK)
        return st;
    for (;;) {
        nvme_tile t;
        bool done = false;
        if ((st = nvme_sweep_next(n->store, &t, &done)) != FERRY_OK || done)
            break;
        st = fn(u, g, &t, ctx);
        ferry_status put = nvme_sweep_put(n->store, &t);
        if (st == FERRY_OK)
            st = put;
        if (st != FERRY_OK)
            break;
    }
    ferry_status end = nvme_sweep_end(n->store);
    st = st != FERRY_OK ? st : end;
    if (st != FERRY_OK && nvme_failure(n->store) != FERRY_OK) {
        /* The disk failed under this call: keep it, as the thread does, so
         * that no step goes on from the state it left. */
        pthread_mutex_lock(&n->mu);
        if (n->failed == FERRY_OK) {
            n->failed = st;
            snprintf(n->failure, sizeof n->failure, "%s", ferry_last_error());
            n->failed_gen = n->generation + 1; /* every update so far was whole */
        }
        pthread_mutex_unlock(&n->mu);
        err_set(st, "%s", n->failure);
    }
    return st;
}

static ferry_status fill_tile(engine_update *u, engine_group *g, nvme_tile *t, void *ctx)
{
    (void)ctx;
    size_t bytes = moments_bytes(u->env.ctx->cfg->moments, t->n); /* zero bytes: zero moments in every form */
    memset(t->array[ARRAY_M], 0, bytes);
    memset(t->array[ARRAY_V], 0, bytes);
    if (u->env.ctx->mode.master_on_disk)
        memcpy(t->array[ARRAY_MASTER], g->init + t->first, t->n * sizeof(float));
    return FERRY_OK;
}

/* Writes a group's initial state to disk: zero moments, and the master
 * weights from g->init when they live there. */
static ferry_status nvme_fill(engine_update *u, engine_group *g)
{
    ferry_status st = sweep_group(u, g, NVME_WRITE, (1u << N(u)->narrays) - 1, fill_tile, NULL);
    if (st == FERRY_OK && u->env.ctx->mode.master_on_disk) {
        /* The initial values are on disk now: give their copy back at once,
         * not at the end of setup, so the host never holds the whole model
         * twice (its copy and the pool growing group by group). */
        free(g->init);
        g->init = NULL;
    }
    return st;
}

static ferry_status convert_tile(engine_update *u, engine_group *g, nvme_tile *t, void *ctx)
{
    (void)ctx;
    const engine_ctx *x = u->env.ctx;
    return half_convert_pool(x->threads, (char *)g->host_weights + t->first * x->act_size, x->act,
                             t->array[ARRAY_MASTER], FERRY_DTYPE_F32, t->n);
}

/* host_weights (the device type) from the master weights on disk. */
static ferry_status nvme_convert_master(engine_update *u, engine_group *g)
{
    return sweep_group(u, g, NVME_READ, 1u << ARRAY_MASTER, convert_tile, NULL);
}

static ferry_status master_out_tile(engine_update *u, engine_group *g, nvme_tile *t, void *ctx)
{
    (void)u, (void)g;
    memcpy((float *)ctx + t->first, t->array[ARRAY_MASTER], t->n * sizeof(float));
    return FERRY_OK;
}

static ferry_status master_in_tile(engine_update *u, engine_group *g, nvme_tile *t, void *ctx)
{
    (void)u, (void)g;
    memcpy(t->array[ARRAY_MASTER], (const float *)ctx + t->first, t->n * sizeof(float));
    return FERRY_OK;
}

/* A group's master weights on disk to or from `host` (numel floats); in
 * host memory otherwise. */
static ferry_status nvme_master_io(engine_update *u, engine_group *g, float *host, bool to_engine)
{
    size_t bytes = g->numel * sizeof(float);
    if (g->master) {
        if (to_engine)
            memcpy(g->master, host, bytes);
        else
            memcpy(host, g->master, bytes);
        return FERRY_OK;
    }
    return sweep_group(u, g, to_engine ? NVME_WRITE : NVME_READ, 1u << ARRAY_MASTER,
                       to_engine ? master_in_tile : master_out_tile, host);
}

typedef struct chunk_ctx {
    int array;
    ferry_moments form; /* the array's: the master weights are fp32 */
    bool to_engine;
    void *buf;
    size_t chunk;
    update_chunk_fn fn;
    void *ctx;
    float *absmax; /* 8bit: the absmax of every tile, in the file's order */
} chunk_ctx;

static ferry_status chunks_of(const chunk_ctx *c, char *base, size_t bytes)
{
    for (size_t at = 0; at < bytes; at += c->chunk) {
        size_t len = bytes - at < c->chunk ? bytes - at : c->chunk;
        ferry_status st = c->fn(c->ctx, base + at, false, c->buf, len);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

/* An 8bit tile's absmax (after its codes, padded) and their place in c->absmax. */
static size_t tile_absmax(const chunk_ctx *c, const nvme_tile *t, float **tile, float **all)
{
    *tile = moments_q8_absmax(t->array[c->array], t->n);
    *all = c->absmax + t->first / MOMENTS_Q8_BLOCK; /* a tile starts on a block */
    return moments_q8_blocks(t->n) * sizeof(float);
}

/* A tile's bytes as the file holds them; an 8bit moment's codes alone (the
 * file holds every code, then every absmax): its absmax kept aside
 * (saving), or zero until they are read (loading). */
static ferry_status chunk_tile(engine_update *u, engine_group *g, nvme_tile *t, void *p)
{
    (void)u, (void)g;
    chunk_ctx *c = p;
    char *base = (char *)t->array[c->array];
    if (c->form != FERRY_MOMENTS_8BIT)
        return chunks_of(c, base, moments_bytes(c->form, t->n));
    float *tile, *all;
    size_t bytes = tile_absmax(c, t, &tile, &all);
    if (c->to_engine)
        memset(base + t->n, 0, moments_q8_codes_bytes(t->n) - t->n + bytes);
    else
        memcpy(all, tile, bytes);
    return chunks_of(c, base, t->n);
}

static ferry_status absmax_in_tile(engine_update *u, engine_group *g, nvme_tile *t, void *p)
{
    (void)u, (void)g;
    float *tile, *all;
    size_t bytes = tile_absmax(p, t, &tile, &all);
    memcpy(tile, all, bytes);
    return FERRY_OK;
}

/* After an 8bit moment's codes: the file's padding to 4 bytes, then every
 * absmax, from c->absmax (saving) or into it and then into the tiles on
 * disk (loading). */
static ferry_status absmax_section(engine_update *u, engine_group *g, chunk_ctx *c)
{
    unsigned char pad[4] = {0};
    size_t npad = moments_q8_codes_bytes(g->numel) - g->numel;
    ferry_status st = npad ? c->fn(c->ctx, pad, false, c->buf, npad) : FERRY_OK;
    if (st == FERRY_OK)
        st = chunks_of(c, (char *)c->absmax, moments_q8_blocks(g->numel) * sizeof(float));
    if (st == FERRY_OK && c->to_engine)
        st = sweep_group(u, g, NVME_UPDATE, 1u << c->array, absmax_in_tile, c);
    return st;
}

static ferry_status nvme_chunks(engine_update *u, engine_group *g, int array, bool to_engine, void *buf,
                                size_t chunk, update_chunk_fn fn, void *ctx)
{
    /* The checkpoint's order (master, m, v) to the store's arrays. */
    int a = array == 0 ? ARRAY_MASTER : array == 1 ? ARRAY_M : ARRAY_V;
    ferry_moments form = a == ARRAY_MASTER ? FERRY_MOMENTS_F32 : u->env.ctx->cfg->moments;
    chunk_ctx c = {a, form, to_engine, buf, chunk & ~(size_t)7, fn, ctx, NULL}; /* whole 8-byte words: the file's hash is chunk-blind */
    if (form == FERRY_MOMENTS_8BIT && !(c.absmax = calloc(moments_q8_blocks(g->numel), sizeof(float))))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the NVMe tier: out of host memory for the absmax of group '%s'",
                       g->name);
    ferry_status st = sweep_group(u, g, to_engine ? NVME_WRITE : NVME_READ, 1u << a, chunk_tile, &c);
    if (st == FERRY_OK && form == FERRY_MOMENTS_8BIT)
        st = absmax_section(u, g, &c);
    free(c.absmax);
    return st;
}

static void nvme_stats(const engine_update *u, ferry_memory_stats *st)
{
    st->disk_bytes = nvme_file_bytes(NC(u)->store);
    st->disk_window_bytes = nvme_window_bytes(NC(u)->store);
}

static void nvme_describe_update(const engine_update *u, char *buf, size_t cap)
{
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "; NVMe: Adam moments (%s)%s on disk, %s",
             ferry_moments_name(u->env.ctx->cfg->moments), u->env.ctx->mode.master_on_disk ? " and master weights" : "",
             nvme_describe(NC(u)->store));
}

const update_ops update_nvme_ops = {
    .name = "nvme",
    .state_bytes = sizeof(nvme_state),
    .start = nvme_update_open,
    .stop = nvme_close,
    .fill = update_fill_offloaded,
    .fill_outside = nvme_fill,
    .run = nvme_run,
    .master_io = nvme_master_io,
    .convert_master = nvme_convert_master,
    .barrier = nvme_barrier,
    .wait_idle = nvme_wait_idle,
    .check = nvme_check,
    .state_chunks = nvme_chunks,
    .stats = nvme_stats,
    .describe = nvme_describe_update,
};
