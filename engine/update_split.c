/* The split update of optimizer mode, the CPU's update with a twist: which groups keep their fp32 master
 * weights and Adam moments on the device and are updated there by the
 * backend's AdamW op, and the moves of that state. Owns the choice (forced
 * at setup, or made once after the warm-up steps from their timings and
 * the budget's spare room), the device arrays of the chosen groups, and
 * their copies to and from the host arrays, which stay allocated as the
 * place checkpoints, get_weights and set_weights read and write. The rest
 * of the step's update is the CPU's (update.c's shared jobs).
 *
 * The groups on the device are always the first ones in forward order:
 * backward releases them last and the CPU would update them first, so the
 * next forward, which needs group 0 first, waits on exactly them. With them
 * updated on the device, the forward over them is the window in which the
 * CPU updates the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops/ops.h"
#include "common/error.h"
#include "common/units.h"
#include "engine/update_impl.h"

#define SPLIT_WARMUP_DEFAULT 2

/* The device's fp32 master weights and moments of a group updated there,
 * and the fp32 sum of its step's gradients when steps accumulate
 * micro-batches; NULL for a group the CPU updates. */
typedef struct split_group {
    float *master, *m, *v, *grad_acc;
} split_group;

typedef struct split_state {
    split_group *dev;  /* per group */
    int groups;        /* 0..groups-1 are updated on the device */
    bool decided;      /* forced, or auto's choice made */
    int steps_timed;   /* auto: warm-up steps timed so far */
    int auto_fit;      /* auto: how many fitted the spare budget when it chose */
} split_state;

static split_state *S(engine_update *u) { return update_state(u); }
static const split_state *SC(const engine_update *u) { return update_state_c(u); }

static ferry_status split_open(engine_update *u)
{
    split_state *s = S(u);
    s->dev = calloc((size_t)(u->env.groups->n > 0 ? u->env.groups->n : 1), sizeof *s->dev);
    if (!s->dev)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    s->decided = u->env.ctx->cfg->device_update_groups >= 0;
    return FERRY_OK;
}

static void split_close(engine_update *u) { free(S(u)->dev); }

/* Device bytes of one group's state: master, m, v, and the fp32 sum of the
 * step's gradients once steps accumulate micro-batches. */
static uint64_t group_bytes(const engine_group *g, bool acc)
{
    return (uint64_t)(acc ? 4 : 3) * arena_charge(g->numel * sizeof(float));
}

static bool any_accumulator(const engine_update *u) { return u->env.groups->n > 0 && u->env.groups->g[0].grad_acc; }

/* A device array of the split: the plan's when it planned the split
 * (forced), else from the arena's dynamic region (auto). */
static ferry_status alloc_one(engine_update *u, engine_group *g, const char *what, float **out)
{
    static const char *const whats[4] = {"master", "adam m", "adam v", "grad sum"};
    const engine_placement *pl = u->env.placement;
    int gi = (int)(g - u->env.groups->g);
    for (int k = 0; pl && pl->split && k < 4; k++)
        if (strcmp(whats[k], what) == 0 && pl->split[gi][k]) {
            *out = pl->split[gi][k];
            return FERRY_OK;
        }
    char name[ENGINE_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s device %s", g->name, what);
    void *p = NULL;
    ferry_status st = arena_alloc(u->env.ctx->arena, g->numel * sizeof(float), FERRY_MEM_OPTIMIZER, name, &p);
    *out = p;
    return st;
}

static void free_one(engine_update *u, float **p)
{
    const engine_placement *pl = u->env.placement;
    bool planned = false;
    for (int g = 0; pl && pl->split && g < u->env.groups->n && *p; g++)
        for (int k = 0; k < 4; k++)
            planned |= pl->split[g][k] == *p;
    if (*p && !planned) /* the plan's stay placed: the region is the plan's */
        arena_free(u->env.ctx->arena, *p);
    *p = NULL;
}

/* Frees every device group's arrays: all updates go back to the CPU. */
static void release_all(engine_update *u)
{
    split_state *s = S(u);
    for (int i = 0; i < u->env.groups->n; i++) {
        free_one(u, &s->dev[i].master);
        free_one(u, &s->dev[i].m);
        free_one(u, &s->dev[i].v);
        free_one(u, &s->dev[i].grad_acc);
    }
    s->groups = 0;
}

/* Host arrays to the device arrays of one group, synchronously. */
static ferry_status push_group(engine_update *u, int i)
{
    const engine_ctx *c = u->env.ctx;
    engine_group *g = &u->env.groups->g[i];
    split_group *d = &S(u)->dev[i];
    size_t bytes = g->numel * sizeof(float);
    ferry_status st;
    if ((st = backend_memcpy_async(c->compute, d->master, g->master, bytes, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memcpy_async(c->compute, d->m, g->m, bytes, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memcpy_async(c->compute, d->v, g->v, bytes, BACKEND_COPY_H2D)) != FERRY_OK)
        return st;
    return backend_stream_synchronize(c->compute);
}

static ferry_status split_push(engine_update *u)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < S(u)->groups && st == FERRY_OK; i++)
        st = push_group(u, i);
    return st;
}

static ferry_status split_pull(engine_update *u)
{
    const engine_ctx *c = u->env.ctx;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < S(u)->groups && st == FERRY_OK; i++) {
        engine_group *g = &u->env.groups->g[i];
        split_group *d = &S(u)->dev[i];
        size_t bytes = g->numel * sizeof(float);
        if ((st = backend_memcpy_async(c->compute, g->master, d->master, bytes, BACKEND_COPY_D2H)) == FERRY_OK &&
            (st = backend_memcpy_async(c->compute, g->m, d->m, bytes, BACKEND_COPY_D2H)) == FERRY_OK)
            st = backend_memcpy_async(c->compute, g->v, d->v, bytes, BACKEND_COPY_D2H);
    }
    return st == FERRY_OK ? backend_stream_synchronize(c->compute) : st;
}

static ferry_status split_accumulators(engine_update *u)
{
    split_state *s = S(u);
    for (int i = 0; i < s->groups; i++) {
        engine_group *g = &u->env.groups->g[i];
        ferry_status st = s->dev[i].grad_acc ? FERRY_OK : alloc_one(u, g, "grad sum", &s->dev[i].grad_acc);
        if (st != FERRY_OK)
            return err_wrap(st, "the split update: group %d ('%s') needs the fp32 sum of its gradients on the "
                                "device; lower device_update_groups (or -1, auto)",
                            i, g->name);
    }
    return FERRY_OK;
}

/* The engine's description gets the split. */
static void describe_split(engine_update *u, const char *how)
{
    update_set_note(u,
                    "; split update (%s): groups 0..%d keep master weights and moments on the device and are "
                    "updated there",
                    how, S(u)->groups - 1);
}

/* Puts the first n groups' state on the device, from the host arrays. All
 * or nothing: a failure frees what it took. No step may be in flight. */
static ferry_status place(engine_update *u, int n)
{
    split_state *s = S(u);
    bool acc = any_accumulator(u);
    ferry_status st = FERRY_OK;
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        engine_group *g = &u->env.groups->g[i];
        split_group *d = &s->dev[i];
        if ((st = alloc_one(u, g, "master", &d->master)) == FERRY_OK &&
            (st = alloc_one(u, g, "adam m", &d->m)) == FERRY_OK &&
            (st = alloc_one(u, g, "adam v", &d->v)) == FERRY_OK && acc)
            st = alloc_one(u, g, "grad sum", &d->grad_acc);
    }
    s->groups = n;
    if (st == FERRY_OK)
        st = split_push(u);
    if (st != FERRY_OK)
        release_all(u);
    return st;
}

/* The device budget left beside what is in use now. */
static uint64_t spare_now(const engine_update *u, uint64_t in_use)
{
    uint64_t budget = arena_budget(u->env.ctx->arena);
    return budget > in_use ? budget - in_use : 0;
}

/* The most leading groups whose state fits in `spare` bytes. */
static int groups_fitting(const engine_update *u, uint64_t spare, bool acc)
{
    const engine_groups *gs = u->env.groups;
    uint64_t sum = 0;
    int n = 0;
    while (n < gs->n && (sum += group_bytes(&gs->g[n], acc)) <= spare)
        n++;
    return n;
}

static ferry_status split_setup_done(engine_update *u)
{
    int n = u->env.ctx->cfg->device_update_groups, ngroups = u->env.groups->n;
    if (n <= 0)
        return FERRY_OK;
    if (n > ngroups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "device_update_groups %d: the engine has %d parameter groups; give at most %d, or -1 (auto)",
                       n, ngroups, ngroups);
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(u->env.ctx->arena, &ms);
    bool planned = u->env.placement && u->env.placement->split && u->env.placement->split[n - 1][0];
    ferry_status room = planned ? FERRY_OK
                                : update_split_check_room(u->env.groups, n, false,
                                                          spare_now(u, ms.device_total_current_bytes),
                                                          arena_budget(u->env.ctx->arena));
    if (room != FERRY_OK)
        return room;
    ferry_status st = place(u, n);
    if (st != FERRY_OK)
        return err_wrap(st, "device_update_groups %d", n);
    describe_split(u, "forced");
    return FERRY_OK;
}

ferry_status update_split_check_room(const engine_groups *gs, int n, bool accumulates, uint64_t spare,
                                     uint64_t budget)
{
    uint64_t need = 0;
    for (int i = 0; i < n && i < gs->n; i++)
        need += group_bytes(&gs->g[i], accumulates);
    if (need <= spare)
        return FERRY_OK;
    uint64_t sum = 0;
    int fit = 0;
    while (fit < gs->n && (sum += group_bytes(&gs->g[fit], accumulates)) <= spare)
        fit++;
    char nb[32], sb[32], bb[32];
    units_fmt_bytes(nb, sizeof nb, need);
    units_fmt_bytes(sb, sizeof sb, spare);
    units_fmt_bytes(bb, sizeof bb, budget);
    return err_set(FERRY_ERR_OUT_OF_MEMORY,
                   "device_update_groups %d: the master weights and Adam moments of the first %d groups "
                   "need %s on the device, and the budget %s has %s left beside the weights and gradients; "
                   "%d groups fit: lower device_update_groups, use -1 (auto), or raise device_budget_bytes",
                   n, n, nb, bb, sb, fit);
}

int engine_split_auto_choice(const double *cpu_share, int ngroups, double update_ms, double forward_ms, int fit)
{
    /* k groups on the device leave groups k.. to the CPU. Group j's CPU
     * update must be done when the forward reaches it: the CPU's work on
     * groups k..j, update_ms x their share, within the forward of groups
     * 0..j-1, forward_ms x their share. The smallest k for which every
     * j >= k holds; the most that fit when none does. */
    for (int k = 0; k <= fit && k <= ngroups; k++) {
        double before = 0, cpu = 0;
        bool ok = true;
        for (int j = 0; j < ngroups && ok; j++) {
            if (j >= k) {
                cpu += update_ms * cpu_share[j];
                ok = cpu <= forward_ms * before;
            }
            before += cpu_share[j];
        }
        if (ok)
            return k;
    }
    return fit < ngroups ? fit : ngroups;
}

/* The forward's time in a step: the step's compute (its time less what the
 * compute stream waited for updates) is a forward and a backward, and a
 * backward costs two forwards. */
static double forward_estimate(const ferry_step_timing *t)
{
    double busy = t->step_ms - t->compute_wait_optimizer_ms;
    return busy > 0 ? busy / 3.0 : 0;
}

/* Nothing in flight: the CPU's last update, its uploads, every stream. */
static ferry_status quiesce(engine_update *u)
{
    const engine_ctx *c = u->env.ctx;
    ferry_status st = update_wait(u);
    if (st == FERRY_OK) st = backend_stream_synchronize(c->compute);
    if (st == FERRY_OK) st = backend_stream_synchronize(c->h2d);
    if (st == FERRY_OK) st = backend_stream_synchronize(c->d2h);
    return st;
}

static ferry_status split_after_step(engine_update *u, const ferry_step_timing *t)
{
    split_state *s = S(u);
    const engine_groups *gs = u->env.groups;
    if (s->decided)
        return FERRY_OK;
    int warmup = u->env.ctx->cfg->device_update_warmup ? u->env.ctx->cfg->device_update_warmup : SPLIT_WARMUP_DEFAULT;
    if (gs->n == 0) {
        s->decided = true;
        return FERRY_OK;
    }
    if (++s->steps_timed < warmup)
        return FERRY_OK;
    s->decided = true;
    double *share = malloc((size_t)gs->n * sizeof *share), total = 0;
    if (!share)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the split update's choice: out of host memory");
    for (int i = 0; i < gs->n; i++)
        total += (double)gs->g[i].numel;
    for (int i = 0; i < gs->n; i++)
        share[i] = (double)gs->g[i].numel / total;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(u->env.ctx->arena, &ms);
    bool acc = any_accumulator(u);
    /* The warm-up's peak holds its activations: only room above it is spare. */
    int fit = groups_fitting(u, spare_now(u, ms.device_total_peak_bytes), acc);
    int k = engine_split_auto_choice(share, gs->n, t->optimizer_ms, forward_estimate(t), fit);
    free(share);
    s->auto_fit = fit;
    if (k == 0)
        return FERRY_OK;
    /* Between steps: the CPU's last update and its uploads must be done
     * before their state moves. */
    ferry_status st = quiesce(u);
    if (st == FERRY_OK && (st = place(u, k)) == FERRY_ERR_OUT_OF_MEMORY) {
        err_clear(); /* the arena's pieces did not fit after all: all on the CPU, as before */
        return FERRY_OK;
    }
    if (st == FERRY_OK)
        describe_split(u, "auto");
    if (st == FERRY_OK && u->env.ctx->cfg->verbose)
        fprintf(stderr, "ferry: split update: groups 0..%d updated on the device (%d fit the spare budget; CPU "
                        "update %.1f ms against a forward of %.1f ms)\n",
                k - 1, fit, t->optimizer_ms, forward_estimate(t));
    return st;
}

/* A group updated on the device: its master weights there, and the host
 * array (what a checkpoint reads) kept alike when they are written. */
static ferry_status split_master_io(engine_update *u, engine_group *g, float *host, bool to_engine)
{
    const engine_ctx *c = u->env.ctx;
    float *dev = S(u)->dev[g - u->env.groups->g].master;
    size_t bytes = g->numel * sizeof(float);
    if (!dev) {
        if (to_engine)
            memcpy(g->master, host, bytes);
        else
            memcpy(host, g->master, bytes);
        return FERRY_OK;
    }
    if (to_engine)
        memcpy(g->master, host, bytes);
    ferry_status st = backend_memcpy_async(c->compute, to_engine ? (void *)dev : (void *)host,
                                           to_engine ? (void *)host : (void *)dev, bytes,
                                           to_engine ? BACKEND_COPY_H2D : BACKEND_COPY_D2H);
    return st != FERRY_OK ? st : backend_stream_synchronize(c->compute);
}

/* A group whose state is on the device is updated there by the backend's
 * AdamW (the CPU's element math, bit for bit), on the compute stream, which
 * the next forward runs on after it. Its gradients: the device copy the
 * drain read, or, when the step accumulated micro-batches, their fp32 sum
 * the CPU made, sent up. */
static ferry_status run_segment(engine_update *u, engine_group *g, size_t first, size_t n, adamw_hparams hp,
                                float clip)
{
    const engine_ctx *c = u->env.ctx;
    split_group *d = &S(u)->dev[g - u->env.groups->g];
    bool acc = u->env.prog->accumulating;
    ferry_dtype gt = acc ? FERRY_DTYPE_F32 : c->act;
    const char *grads = acc ? (const char *)d->grad_acc : (const char *)g->dev_grads;
    return ops_adamw(c->compute, d->master + first, d->m + first, d->v + first, grads + first * dtype_size(gt), gt,
                     (char *)g->dev_weights + first * c->act_size, n, &hp, u->env.prog->step + 1, clip);
}

static ferry_status run_device(engine_update *u, const ferry_step_options *o, float clip)
{
    const engine_ctx *c = u->env.ctx;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < S(u)->groups && st == FERRY_OK; i++) {
        engine_group *g = &u->env.groups->g[i];
        if (u->env.prog->accumulating)
            st = backend_memcpy_async(c->compute, S(u)->dev[i].grad_acc, g->grad_acc, g->numel * sizeof(float),
                                      BACKEND_COPY_H2D);
        if (st == FERRY_OK)
            st = update_for_each_segment(u, g, o, clip, run_segment);
        /* The forward's wait for the weights is on this event. */
        if (st == FERRY_OK)
            st = backend_event_record(g->uploaded, c->compute);
    }
    return st;
}

/* The CPU's update of the groups after the split, then the device's of
 * the split's own; each CPU group's upload follows its own update. */
static ferry_status split_run(engine_update *u, const ferry_step_options *o, float clip)
{
    int first = S(u)->groups;
    ferry_status st = update_begin_offloaded(u);
    if (st == FERRY_OK)
        st = update_submit_cpu(u, o, clip, first);
    if (st == FERRY_OK)
        st = run_device(u, o, clip);
    return st == FERRY_OK ? update_upload_after(u, first) : st;
}

static int split_device_groups(const engine_update *u) { return SC(u)->groups; }

const update_ops update_split_ops = {
    .name = "split",
    .state_bytes = sizeof(split_state),
    .start = split_open,
    .stop = split_close,
    .fill = update_fill_offloaded,
    .run = split_run,
    .master_io = split_master_io,
    .setup_done = split_setup_done,
    .after_step = split_after_step,
    .accumulators = split_accumulators,
    .pull = split_pull,
    .push = split_push,
    .device_groups = split_device_groups,
};

