/* The group table: adding a group (its initial values copied and checked,
 * its no-decay ranges sorted and checked), freeing it, and the facts every
 * component asks of it. Allocates nothing on the device; where a group's
 * buffers go is placement.c's business. */
#include "engine/groups.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/sized.h"
#include "optim/adamw.h"

const char *engine_phase_name(ferry_phase phase)
{
    return phase == FERRY_PHASE_FORWARD ? "forward" : "backward";
}

static const size_t group_option_fields[] = {
    SIZED_END(ferry_group_options, lr_scale), SIZED_END(ferry_group_options, weight_decay),
    SIZED_END(ferry_group_options, no_decay), SIZED_END(ferry_group_options, no_decay_count),
};
SIZED_NO_TAIL_PADDING(ferry_group_options, no_decay_count);

static int range_less(const void *a, const void *b)
{
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Copies, sorts and checks the group's ranges exempt from weight decay. */
static ferry_status copy_no_decay(engine_group *g, const ferry_group_options *o)
{
    g->no_decay = NULL;
    g->no_decay_count = 0;
    if (!o->no_decay_count)
        return FERRY_OK;
    if (!o->no_decay)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "group '%s': no_decay_count %zu with no ranges", g->name,
                       o->no_decay_count);
    g->no_decay = malloc(o->no_decay_count * sizeof *g->no_decay);
    if (!g->no_decay)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "group '%s': out of host memory", g->name);
    memcpy(g->no_decay, o->no_decay, o->no_decay_count * sizeof *g->no_decay);
    qsort(g->no_decay, o->no_decay_count, sizeof *g->no_decay, range_less);
    size_t end = 0;
    for (size_t r = 0; r < o->no_decay_count; r++) {
        size_t off = g->no_decay[r][0], n = g->no_decay[r][1];
        if (off < end || n > g->numel || off > g->numel - n) {
            free(g->no_decay);
            g->no_decay = NULL;
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "group '%s': no-decay range {%zu, %zu} overlaps another or passes the group's "
                           "end (%zu elements)",
                           g->name, off, n, g->numel);
        }
        end = off + n;
    }
    g->no_decay_count = o->no_decay_count;
    return FERRY_OK;
}

/* The copy of the initial values and the check that each is finite, in one
 * pass on the engine's threads (GPT-2 XL hands over 6.2 GB). */
typedef struct take_job {
    const float *src;
    float *dst;
    size_t n;
    size_t *first_bad; /* per tile: the first non-finite index, or SIZE_MAX */
} take_job;

static void take_tile(void *ctx, size_t tile, int worker)
{
    (void)worker;
    take_job *j = ctx;
    size_t at = tile * OPTIM_TILE, n = j->n - at < OPTIM_TILE ? j->n - at : OPTIM_TILE;
    memcpy(j->dst + at, j->src + at, n * sizeof(float));
    j->first_bad[tile] = SIZE_MAX;
    for (size_t i = at; i < at + n; i++)
        if (!isfinite(j->dst[i])) {
            j->first_bad[tile] = i;
            break;
        }
}

static ferry_status take_initial_values(tp_pool *threads, engine_group *g, const float *init)
{
    size_t ntiles = (g->numel + OPTIM_TILE - 1) / OPTIM_TILE;
    take_job j = {init, g->init, g->numel, malloc(ntiles * sizeof(size_t))};
    if (!j.first_bad)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_add_group('%s'): out of host memory", g->name);
    ferry_status st = tp_parallel_for(threads, ntiles, take_tile, &j);
    for (size_t t = 0; t < ntiles && st == FERRY_OK; t++)
        if (j.first_bad[t] != SIZE_MAX)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT,
                         "ferry_engine_add_group('%s'): initial value %zu is %g; weights must be finite (check "
                         "the file or the initialisation they come from)",
                         g->name, j.first_bad[t], (double)init[j.first_bad[t]]);
    free(j.first_bad);
    return st;
}

ferry_status groups_add(engine_groups *t, tp_pool *threads, const char *name, size_t numel, const float *init,
                        const ferry_group_options *opts, int *group_id)
{
    if (numel == 0 || numel > ((size_t)1 << 40))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group('%s'): numel %zu is outside 1..2^40",
                       name, numel);
    ferry_group_options o = FERRY_GROUP_OPTIONS_INIT;
    ferry_status st = opts ? sized_read(&o, sizeof o, opts, group_option_fields,
                                         sizeof group_option_fields / sizeof group_option_fields[0],
                                         "ferry_group_options")
                           : FERRY_OK;
    if (st != FERRY_OK)
        return err_wrap(st, "ferry_engine_add_group('%s')", name);
    if (!(o.lr_scale >= 0.0f) || !isfinite(o.lr_scale))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group: lr_scale %g must be finite and >= 0",
                       (double)o.lr_scale);
    if (t->n >= ENGINE_MAX_GROUPS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group: at most %d groups", ENGINE_MAX_GROUPS);
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        engine_group *grown = realloc(t->g, (size_t)cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_add_group: out of host memory");
        t->g = grown;
        t->cap = cap;
    }
    engine_group *g = &t->g[t->n];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->numel = numel;
    g->opts = o;
    g->init = malloc(numel * sizeof(float));
    if (!g->init)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_add_group('%s'): out of host memory for its %zu "
                       "initial values", g->name, numel);
    st = take_initial_values(threads, g, init);
    if (st == FERRY_OK)
        st = copy_no_decay(g, &o);
    if (st != FERRY_OK) {
        free(g->init);
        return st;
    }
    if (group_id)
        *group_id = t->n;
    t->n++;
    return FERRY_OK;
}

void groups_drop_init(engine_groups *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->g[i].init);
        t->g[i].init = NULL;
    }
}

void groups_free(engine_groups *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->g[i].init);
        free(t->g[i].no_decay);
    }
    free(t->g);
    t->g = NULL;
    t->n = t->cap = 0;
}

size_t groups_total(const engine_groups *t)
{
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->g[i].numel;
    return n;
}

size_t groups_largest(const engine_groups *t)
{
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->g[i].numel > n)
            n = t->g[i].numel;
    return n;
}

const void *group_step_grads(const engine_group *g, ferry_offload mode, bool accumulating, bool ranks,
                             ferry_dtype act, ferry_dtype *dtype)
{
    /* With data parallelism the gradients are summed across ranks in fp32:
     * in the fp32 sum (offload none), or drained as fp32 (partitioned modes). */
    bool acc = accumulating || (ranks && mode == FERRY_OFFLOAD_NONE);
    *dtype = acc || ranks ? FERRY_DTYPE_F32 : act;
    if (acc)
        return g->grad_acc;
    return mode == FERRY_OFFLOAD_NONE ? g->dev_grads : g->host_grads;
}
