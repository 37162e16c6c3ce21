/* The split update of optimizer mode: which groups keep their fp32 master
 * weights and Adam moments on the device and are updated there by the
 * backend's AdamW op, and the moves of that state. Owns the choice (forced
 * at setup, or made once after the warm-up steps from their timings and
 * the budget's spare room), the device arrays of the chosen groups, and
 * their copies to and from the host arrays, which stay allocated as the
 * place checkpoints, get_weights and set_weights read and write. Does not
 * run the update (step.c launches it) nor decide anything else.
 *
 * The groups on the device are always the first ones in forward order:
 * backward releases them last and the CPU would update them first, so the
 * next forward, which needs group 0 first, waits on exactly them. With them
 * updated on the device, the forward over them is the window in which the
 * CPU updates the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "engine/engine.h"
#include "engine/shard.h"

#define SPLIT_WARMUP_DEFAULT 2

/* Why the split cannot run with this engine's config; NULL when it can. */
static const char *split_unavailable(const ferry_engine *e)
{
    if (e->nvme_asked || e->nvme_dir)
        return "the NVMe tier keeps the optimizer state on disk";
    if (e->cfg.offload != FERRY_OFFLOAD_OPTIMIZER)
        return "it splits offload 'optimizer' only";
    if (e->cfg.delayed_update)
        return "the delayed update overlaps the whole update with the next step";
    if (e->dp)
        return "with data parallelism each rank owns a shard of the host state";
    return NULL;
}

ferry_status engine_split_check_config(const ferry_engine_config *c)
{
    if (c->device_update_groups < -1 || c->device_update_groups > ENGINE_MAX_GROUPS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: device_update_groups %d; -1 = auto, 0 = every update on the CPU, N > 0 = "
                       "the first N groups on the device",
                       c->device_update_groups);
    if (c->device_update_warmup < 0 || c->device_update_warmup > 1000)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: device_update_warmup %d is outside 0..1000 (0 = %d steps)",
                       c->device_update_warmup, SPLIT_WARMUP_DEFAULT);
    return FERRY_OK;
}

/* Device bytes of one group's state: master, m, v, and the fp32 sum of the
 * step's gradients once steps accumulate micro-batches. */
static uint64_t group_bytes(const ferry_engine *e, const engine_group *g, bool acc)
{
    (void)e;
    return (uint64_t)(acc ? 4 : 3) * arena_charge(g->numel * sizeof(float));
}

static bool any_accumulator(const ferry_engine *e) { return e->ngroups > 0 && e->groups[0].grad_acc != NULL; }

static ferry_status alloc_one(ferry_engine *e, engine_group *g, const char *what, float **out)
{
    char name[ENGINE_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s device %s", g->name, what);
    void *p = NULL;
    ferry_status st = arena_alloc(e->arena, g->numel * sizeof(float), FERRY_MEM_OPTIMIZER, name, &p);
    *out = p;
    return st;
}

static void free_one(ferry_engine *e, float **p)
{
    if (*p)
        arena_free(e->arena, *p);
    *p = NULL;
}

static void free_group(ferry_engine *e, engine_group *g)
{
    free_one(e, &g->dev_master);
    free_one(e, &g->dev_m);
    free_one(e, &g->dev_v);
    free_one(e, &g->dev_grad_acc);
}

void engine_split_release(ferry_engine *e)
{
    for (int i = 0; i < e->ngroups; i++)
        free_group(e, &e->groups[i]);
    e->split_groups = 0;
}

/* Host arrays to the device arrays of one group, synchronously. */
static ferry_status push_group(ferry_engine *e, engine_group *g)
{
    size_t bytes = g->numel * sizeof(float);
    ferry_status st;
    if ((st = backend_memcpy_async(e->compute, g->dev_master, g->master, bytes, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memcpy_async(e->compute, g->dev_m, g->m, bytes, BACKEND_COPY_H2D)) != FERRY_OK ||
        (st = backend_memcpy_async(e->compute, g->dev_v, g->v, bytes, BACKEND_COPY_H2D)) != FERRY_OK)
        return st;
    return backend_stream_synchronize(e->compute);
}

ferry_status engine_split_push(ferry_engine *e)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->split_groups && st == FERRY_OK; i++)
        st = push_group(e, &e->groups[i]);
    return st;
}

ferry_status engine_split_pull(ferry_engine *e)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->split_groups && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        size_t bytes = g->numel * sizeof(float);
        if ((st = backend_memcpy_async(e->compute, g->master, g->dev_master, bytes, BACKEND_COPY_D2H)) == FERRY_OK &&
            (st = backend_memcpy_async(e->compute, g->m, g->dev_m, bytes, BACKEND_COPY_D2H)) == FERRY_OK)
            st = backend_memcpy_async(e->compute, g->v, g->dev_v, bytes, BACKEND_COPY_D2H);
    }
    return st == FERRY_OK ? backend_stream_synchronize(e->compute) : st;
}

ferry_status engine_split_ensure_accumulators(ferry_engine *e)
{
    for (int i = 0; i < e->split_groups; i++) {
        engine_group *g = &e->groups[i];
        ferry_status st = g->dev_grad_acc ? FERRY_OK : alloc_one(e, g, "grad sum", &g->dev_grad_acc);
        if (st != FERRY_OK)
            return err_wrap(st, "the split update: group %d ('%s') needs the fp32 sum of its gradients on the "
                                "device; lower device_update_groups (or -1, auto)",
                            i, g->name);
    }
    return FERRY_OK;
}

/* Appends the split to the engine's description. */
static void describe_split(ferry_engine *e, const char *how)
{
    size_t at = strlen(e->describe);
    if (at < sizeof e->describe)
        snprintf(e->describe + at, sizeof e->describe - at,
                 "; split update (%s): groups 0..%d keep master weights and moments on the device and are "
                 "updated there",
                 how, e->split_groups - 1);
}

/* Puts the first n groups' state on the device, from the host arrays. All
 * or nothing: a failure frees what it took. No step may be in flight. */
static ferry_status place(ferry_engine *e, int n)
{
    bool acc = any_accumulator(e);
    ferry_status st = FERRY_OK;
    for (int i = 0; i < n && st == FERRY_OK; i++) {
        engine_group *g = &e->groups[i];
        if ((st = alloc_one(e, g, "master", &g->dev_master)) == FERRY_OK &&
            (st = alloc_one(e, g, "adam m", &g->dev_m)) == FERRY_OK &&
            (st = alloc_one(e, g, "adam v", &g->dev_v)) == FERRY_OK && acc)
            st = alloc_one(e, g, "grad sum", &g->dev_grad_acc);
    }
    e->split_groups = n;
    if (st == FERRY_OK)
        st = engine_split_push(e);
    if (st != FERRY_OK)
        engine_split_release(e);
    return st;
}

/* The device budget left beside what is in use now. */
static uint64_t spare_now(ferry_engine *e, uint64_t in_use)
{
    uint64_t budget = arena_budget(e->arena);
    return budget > in_use ? budget - in_use : 0;
}

/* The most leading groups whose state fits in `spare` bytes. */
static int groups_fitting(const ferry_engine *e, uint64_t spare, bool acc)
{
    uint64_t sum = 0;
    int n = 0;
    while (n < e->ngroups && (sum += group_bytes(e, &e->groups[n], acc)) <= spare)
        n++;
    return n;
}

ferry_status engine_split_setup(ferry_engine *e)
{
    int n = e->cfg.device_update_groups;
    e->split_decided = n >= 0;
    if (n <= 0)
        return FERRY_OK;
    const char *why = split_unavailable(e);
    if (why)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "device_update_groups %d: the split update is not available here (%s); use 0, or -1 "
                       "(auto, which then keeps every update where the mode puts it)",
                       n, why);
    if (n > e->ngroups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "device_update_groups %d: the engine has %d parameter groups; give at most %d, or -1 (auto)",
                       n, e->ngroups, e->ngroups);
    return FERRY_OK;
}

ferry_status engine_split_place_forced(ferry_engine *e)
{
    int n = e->cfg.device_update_groups;
    if (n <= 0)
        return FERRY_OK;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(e->arena, &ms);
    uint64_t spare = spare_now(e, ms.device_total_current_bytes), need = 0;
    for (int i = 0; i < n; i++)
        need += group_bytes(e, &e->groups[i], false);
    if (need > spare) {
        char nb[32], sb[32], bb[32];
        units_fmt_bytes(nb, sizeof nb, need);
        units_fmt_bytes(sb, sizeof sb, spare);
        units_fmt_bytes(bb, sizeof bb, arena_budget(e->arena));
        return err_set(FERRY_ERR_OUT_OF_MEMORY,
                       "device_update_groups %d: the master weights and Adam moments of the first %d groups "
                       "need %s on the device, and the budget %s has %s left beside the weights and gradients; "
                       "%d groups fit: lower device_update_groups, use -1 (auto), or raise device_budget_bytes",
                       n, n, nb, bb, sb, groups_fitting(e, spare, false));
    }
    ferry_status st = place(e, n);
    if (st != FERRY_OK)
        return err_wrap(st, "device_update_groups %d", n);
    describe_split(e, "forced");
    return FERRY_OK;
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

ferry_status engine_split_after_step(ferry_engine *e)
{
    if (e->split_decided)
        return FERRY_OK;
    int warmup = e->cfg.device_update_warmup ? e->cfg.device_update_warmup : SPLIT_WARMUP_DEFAULT;
    if (split_unavailable(e) || e->ngroups == 0) {
        e->split_decided = true;
        return FERRY_OK;
    }
    if (++e->split_steps_timed < warmup)
        return FERRY_OK;
    e->split_decided = true;
    double *share = malloc((size_t)e->ngroups * sizeof *share), total = 0;
    if (!share)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the split update's choice: out of host memory");
    for (int i = 0; i < e->ngroups; i++)
        total += (double)e->groups[i].numel;
    for (int i = 0; i < e->ngroups; i++)
        share[i] = (double)e->groups[i].numel / total;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    arena_stats(e->arena, &ms);
    bool acc = any_accumulator(e);
    /* The warm-up's peak holds its activations: only room above it is spare. */
    int fit = groups_fitting(e, spare_now(e, ms.device_total_peak_bytes), acc);
    int k = engine_split_auto_choice(share, e->ngroups, e->timing.optimizer_ms, forward_estimate(&e->timing), fit);
    free(share);
    e->split_auto_fit = fit;
    if (k == 0)
        return FERRY_OK;
    /* Between steps: the CPU's last update and its uploads must be done
     * before their state moves. */
    ferry_status st = ferry_engine_synchronize(e);
    if (st == FERRY_OK && (st = place(e, k)) == FERRY_ERR_OUT_OF_MEMORY) {
        err_clear(); /* the arena's pieces did not fit after all: all on the CPU, as before */
        return FERRY_OK;
    }
    if (st == FERRY_OK)
        describe_split(e, "auto");
    if (st == FERRY_OK && e->cfg.verbose)
        fprintf(stderr, "ferry: split update: groups 0..%d updated on the device (%d fit the spare budget; CPU "
                        "update %.1f ms against a forward of %.1f ms)\n",
                k - 1, fit, e->timing.optimizer_ms, forward_estimate(&e->timing));
    return st;
}

int ferry_engine_device_update_groups(const ferry_engine *e) { return e ? e->split_groups : -1; }
