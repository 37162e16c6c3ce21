/* The engine's lifetime and its public face: configuration checks, creation
 * of the backend, streams, arena, pool and optimizer threads (placed on the
 * NUMA node nearest the GPU), parameter groups, micro-batches, activation
 * memory, weights in and out, statistics. Where bytes live is placement.c's
 * business; moving them is schedule.c's and step.c's. */
#include "engine/engine.h"
#include "engine/shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/sized.h"
#include "common/units.h"
#include "optim/half.h"

const char *engine_phase_name(ferry_phase phase)
{
    return phase == FERRY_PHASE_FORWARD ? "forward" : "backward";
}

const char *ferry_offload_name(ferry_offload mode)
{
    switch (mode) {
    case FERRY_OFFLOAD_NONE: return "none";
    case FERRY_OFFLOAD_OPTIMIZER: return "optimizer";
    case FERRY_OFFLOAD_PARAMS: return "params";
    case FERRY_OFFLOAD_NVME: return "nvme";
    case FERRY_OFFLOAD_AUTO: return "auto";
    }
    return "unknown";
}

ferry_status ferry_offload_parse(const char *name, ferry_offload *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_offload_parse: NULL argument");
    for (int m = FERRY_OFFLOAD_NONE; m <= FERRY_OFFLOAD_AUTO; m++) {
        if (strcmp(name, ferry_offload_name((ferry_offload)m)) == 0) {
            *out = (ferry_offload)m;
            return FERRY_OK;
        }
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "unknown offload mode '%s': use none, optimizer, params, nvme or auto", name);
}

ferry_status engine_check_group(const ferry_engine *e, int group, const char *what)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: engine is NULL", what);
    if (!e->setup_done)
        return err_set(FERRY_ERR_STATE, "%s: call ferry_engine_setup() first", what);
    if (group < 0 || group >= e->ngroups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: group %d does not exist (the engine has %d)",
                       what, group, e->ngroups);
    return FERRY_OK;
}

/* Every field of the versioned input structs, for sized_read. */
static const size_t config_fields[] = {
    SIZED_END(ferry_engine_config, backend),           SIZED_END(ferry_engine_config, device_budget_bytes),
    SIZED_END(ferry_engine_config, host_budget_bytes), SIZED_END(ferry_engine_config, offload),
    SIZED_END(ferry_engine_config, prefetch_groups),   SIZED_END(ferry_engine_config, optimizer_threads),
    SIZED_END(ferry_engine_config, numa_node),         SIZED_END(ferry_engine_config, dtype),
    SIZED_END(ferry_engine_config, delayed_update),    SIZED_END(ferry_engine_config, trace_path),
    SIZED_END(ferry_engine_config, verbose),           SIZED_END(ferry_engine_config, reserved),
    SIZED_END(ferry_engine_config, loss_scaling),      SIZED_END(ferry_engine_config, loss_scale_init),
    SIZED_END(ferry_engine_config, loss_scale_growth), SIZED_END(ferry_engine_config, loss_scale_backoff),
    SIZED_END(ferry_engine_config, loss_scale_interval), SIZED_END(ferry_engine_config, loss_scale_max_skips),
    SIZED_END(ferry_engine_config, nvme_path),         SIZED_END(ferry_engine_config, nvme_window_bytes),
    SIZED_END(ferry_engine_config, nvme_block_bytes),  SIZED_END(ferry_engine_config, nvme_queue_depth),
    SIZED_END(ferry_engine_config, nvme_master),
    SIZED_END(ferry_engine_config, data_parallel),     SIZED_END(ferry_engine_config, comm_timeout_s),
    SIZED_END(ferry_engine_config, device_update_groups), SIZED_END(ferry_engine_config, device_update_warmup),
    SIZED_END(ferry_engine_config, auto_activation_bytes), SIZED_END(ferry_engine_config, auto_micro_batches),
    SIZED_END(ferry_engine_config, reserved_auto),
};
SIZED_NO_TAIL_PADDING(ferry_engine_config, reserved_auto);

static const size_t group_option_fields[] = {
    SIZED_END(ferry_group_options, lr_scale), SIZED_END(ferry_group_options, weight_decay),
    SIZED_END(ferry_group_options, no_decay), SIZED_END(ferry_group_options, no_decay_count),
};
SIZED_NO_TAIL_PADDING(ferry_group_options, no_decay_count);

/* The NVMe tier's fields: a folder for offload nvme (or params), nothing
 * of it otherwise; the sizes in range (the store checks the folder). */
static ferry_status check_nvme_config(const ferry_engine_config *c)
{
    bool disk = c->nvme_path != NULL;
    if (c->offload == FERRY_OFFLOAD_NVME && (!disk || !c->nvme_path[0]))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: offload 'nvme' needs nvme_path, a folder on a fast disk "
                       "for the optimizer state");
    if (disk && !c->nvme_path[0])
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: nvme_path is empty; name a folder, or leave it NULL");
    if (disk && c->offload != FERRY_OFFLOAD_NVME && c->offload != FERRY_OFFLOAD_PARAMS &&
        c->offload != FERRY_OFFLOAD_AUTO)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: nvme_path '%s' with offload '%s': the state goes to disk with offload "
                       "'nvme' (the device as in 'optimizer'), 'params', or 'auto' when the host cannot hold it",
                       c->nvme_path, ferry_offload_name(c->offload));
    if (!disk && (c->nvme_window_bytes || c->nvme_block_bytes || c->nvme_queue_depth || c->nvme_master))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: NVMe window, block, queue depth or master set without nvme_path; name the "
                       "folder (offload 'nvme'), or leave them 0");
    if (c->nvme_block_bytes % 4096 || c->nvme_block_bytes > ((uint64_t)64 << 20))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: nvme_block_bytes %llu; give a multiple of 4096 up to 64 MiB (0 = 1 MiB)",
                       (unsigned long long)c->nvme_block_bytes);
    if (c->nvme_queue_depth < 0 || c->nvme_queue_depth > 1024)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: nvme_queue_depth %d is outside 0..1024 (0 = 16)",
                       c->nvme_queue_depth);
    if (c->nvme_master != 0 && c->nvme_master != 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: nvme_master %d; 1 puts the master weights on "
                       "disk, 0 keeps them in host memory", c->nvme_master);
    return FERRY_OK;
}

static ferry_status check_config(const ferry_engine_config *c)
{
    if (c->backend < FERRY_BACKEND_AUTO || c->backend > FERRY_BACKEND_CUDA)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: backend %d is not a ferry_backend_kind",
                       (int)c->backend);
    if (c->offload < FERRY_OFFLOAD_NONE || c->offload > FERRY_OFFLOAD_AUTO)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: offload %d is not none, optimizer, params, nvme or auto", (int)c->offload);
    if (c->auto_micro_batches < 0 || c->reserved_auto != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: auto_micro_batches %d (0 = 1, else the micro-batches per step) or "
                       "reserved_auto %d (leave it 0)",
                       c->auto_micro_batches, c->reserved_auto);
    if (c->prefetch_groups < 0 || c->prefetch_groups > 64)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: prefetch_groups %d is outside 0..64", c->prefetch_groups);
    if (c->optimizer_threads < 0 || c->optimizer_threads > TP_MAX_THREADS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: optimizer_threads %d is outside 0..%d (0 = all cores)",
                       c->optimizer_threads, TP_MAX_THREADS);
    if (c->numa_node < -1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: numa_node %d is invalid (-1 = nearest the GPU)", c->numa_node);
    if (c->dtype < FERRY_DTYPE_AUTO || c->dtype > FERRY_DTYPE_F16)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: dtype %d is not auto, f32, bf16 or f16",
                       (int)c->dtype);
    if (c->reserved != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: reserved is %d; leave it 0 (FERRY_ENGINE_CONFIG_INIT)",
                       c->reserved);
    if (c->loss_scaling < FERRY_LOSS_SCALING_AUTO || c->loss_scaling > FERRY_LOSS_SCALING_DYNAMIC)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: loss_scaling %d is not auto, off or dynamic",
                       (int)c->loss_scaling);
    ferry_status st = loss_scale_check(c->loss_scale_init, c->loss_scale_growth, c->loss_scale_backoff,
                                       c->loss_scale_interval, "engine config");
    if (st != FERRY_OK)
        return st;
    if (c->loss_scale_max_skips < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: loss_scale_max_skips %d is negative (0 = never "
                       "stop on skipped steps; 20 is the default)", c->loss_scale_max_skips);
    if ((st = check_nvme_config(c)) != FERRY_OK)
        return st;
    if (c->data_parallel < -1 || c->data_parallel > 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: data_parallel %d is not -1 (each rank alone), 0 (join a launcher's world) "
                       "or 1 (always through the collectives)",
                       c->data_parallel);
    if (c->comm_timeout_s < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: comm_timeout_s %d is negative (0 = $FERRY_COMM_TIMEOUT, else 600 s)",
                       c->comm_timeout_s);
    if ((st = engine_split_check_config(c)) != FERRY_OK)
        return st;
    if (c->delayed_update && c->offload != FERRY_OFFLOAD_OPTIMIZER)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: the delayed update needs offload 'optimizer' (it overlaps the "
                       "CPU update with the next forward; 'auto' may choose another mode); got '%s'",
                       ferry_offload_name(c->offload));
    return FERRY_OK;
}

/* The NUMA node nearest the GPU where the topology says, else -1 (all). */
static int choose_numa_node(const ferry_engine_config *c, ferry_backend_kind kind)
{
    if (c->numa_node >= 0)
        return c->numa_node;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (ferry_system_probe(&info) != FERRY_OK || info.numa_nodes <= 1)
        return -1;
    if (kind == FERRY_BACKEND_CUDA && info.gpu_numa_node >= 0)
        return info.gpu_numa_node;
    return -1;
}

static ferry_status resolve_dtype(ferry_engine *e)
{
    ferry_status st = backend_set_act_dtype(e->be, e->cfg.dtype);
    if (st != FERRY_OK)
        return err_wrap(st, "engine config: dtype %s", dtype_name(e->cfg.dtype));
    e->act = backend_act_dtype(e->be);
    e->act_size = dtype_size(e->act);
    e->scaling = e->cfg.loss_scaling == FERRY_LOSS_SCALING_DYNAMIC ||
                 (e->cfg.loss_scaling == FERRY_LOSS_SCALING_AUTO && e->act == FERRY_DTYPE_F16);
    engine_scaling_reset(e);
    return FERRY_OK;
}

void engine_scaling_reset(ferry_engine *e)
{
    /* the settings were checked with the config */
    loss_scale_init(&e->scaler, e->cfg.loss_scale_init, e->cfg.loss_scale_growth, e->cfg.loss_scale_backoff,
                    e->cfg.loss_scale_interval);
    e->skipped_steps = 0;
    e->skips_in_row = 0;
}

static ferry_status open_parts(ferry_engine *e)
{
    ferry_status st = shard_join(e); /* first: the rank picks the GPU */
    if (st == FERRY_OK)
        st = backend_open(e->cfg.backend, &e->be);
    if (st != FERRY_OK)
        return st;
    engine_device_share_open(e);
    if ((st = resolve_dtype(e)) != FERRY_OK)
        return st;
    if ((st = backend_stream_create(e->be, "compute", &e->compute)) != FERRY_OK ||
        (st = backend_stream_create(e->be, "h2d", &e->h2d)) != FERRY_OK ||
        (st = backend_stream_create(e->be, "d2h", &e->d2h)) != FERRY_OK ||
        (st = shard_open(e)) != FERRY_OK)
        return st;
    if (e->cfg.trace_path && (st = trace_open(e->cfg.trace_path, &e->trace)) != FERRY_OK)
        return err_wrap(st, "opening the memory trace");
    arena_config ac = ARENA_CONFIG_INIT;
    ac.budget_bytes = e->cfg.device_budget_bytes;
    ac.trace = e->trace;
    if ((st = arena_create(e->be, &ac, &e->arena)) != FERRY_OK)
        return st;
    e->numa_node = choose_numa_node(&e->cfg, backend_kind(e->be));
    if ((st = tp_pool_create(shard_optimizer_threads(e), e->numa_node, &e->threads)) != FERRY_OK)
        return st;
    pool_config pc = POOL_CONFIG_INIT;
    pc.limit_bytes = e->cfg.host_budget_bytes;
    pc.numa_node = e->numa_node;
    pc.be = e->be;
    pc.trace = e->trace;
    return pool_create(&pc, &e->pool);
}

ferry_status ferry_engine_create(const ferry_engine_config *cfg, ferry_engine **out)
{
    if (!cfg || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_create: NULL argument");
    *out = NULL;
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    ferry_status st = sized_read(&c, sizeof c, cfg, config_fields, sizeof config_fields / sizeof config_fields[0],
                                 "ferry_engine_config");
    if (st == FERRY_OK)
        st = check_config(&c);
    if (st != FERRY_OK)
        return st;
    ferry_engine *e = calloc(1, sizeof *e);
    if (!e)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_create: out of host memory");
    e->cfg = c;
    e->micro_index = -1;
    e->timing.world_size = 1;
    /* Offload 'nvme' places the device side as 'optimizer' does; what goes to
     * disk is nvme_update.c's business. */
    e->nvme_asked = c.offload == FERRY_OFFLOAD_NVME;
    e->auto_asked = c.offload == FERRY_OFFLOAD_AUTO; /* chosen at setup (auto.c) */
    if (e->nvme_asked)
        e->cfg.offload = FERRY_OFFLOAD_OPTIMIZER;
    e->nvme_dir = c.nvme_path ? strdup(c.nvme_path) : NULL;
    e->cfg.nvme_path = NULL; /* the copy is kept, not the caller's string */
    st = c.nvme_path && !e->nvme_dir ? err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_create: out of host memory")
                                     : open_parts(e);
    e->cfg.trace_path = NULL; /* the caller's string is used once, not kept */
    if (st != FERRY_OK) {
        ferry_engine_destroy(e);
        return st;
    }
    *out = e;
    return FERRY_OK;
}

void ferry_engine_destroy(ferry_engine *e) { (void)ferry_engine_close(e); }

/* The trace is closed last, after the allocators that record into it have
 * recorded their last frees. */
ferry_status ferry_engine_close(ferry_engine *e)
{
    if (!e)
        return FERRY_OK;
    trace *t = e->trace;
    if (e->be) {
        if (e->setup_done)
            engine_wait_updates(e);
        if (e->compute) backend_stream_synchronize(e->compute);
        if (e->h2d) backend_stream_synchronize(e->h2d);
        if (e->d2h) backend_stream_synchronize(e->d2h);
        shard_synchronize(e);
    }
    engine_unplace(e);
    for (int g = 0; g < e->ngroups; g++) {
        free(e->groups[g].init);
        free(e->groups[g].no_decay);
    }
    free(e->groups);
    free(e->user_allocs);
    free(e->nvme_dir);
    pool_destroy(e->pool);
    tp_pool_destroy(e->threads);
    arena_destroy(e->arena);
    backend_stream_destroy(e->compute);
    backend_stream_destroy(e->h2d);
    backend_stream_destroy(e->d2h);
    shard_close(e);
    backend_close(e->be);
    free(e);
    return trace_close(t);
}

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

static ferry_status take_initial_values(ferry_engine *e, engine_group *g, const float *init)
{
    size_t ntiles = (g->numel + OPTIM_TILE - 1) / OPTIM_TILE;
    take_job j = {init, g->init, g->numel, malloc(ntiles * sizeof(size_t))};
    if (!j.first_bad)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_add_group('%s'): out of host memory", g->name);
    ferry_status st = tp_parallel_for(e->threads, ntiles, take_tile, &j);
    for (size_t t = 0; t < ntiles && st == FERRY_OK; t++)
        if (j.first_bad[t] != SIZE_MAX)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT,
                         "ferry_engine_add_group('%s'): initial value %zu is %g; weights must be finite (check "
                         "the file or the initialisation they come from)",
                         g->name, j.first_bad[t], (double)init[j.first_bad[t]]);
    free(j.first_bad);
    return st;
}

ferry_status ferry_engine_add_group(ferry_engine *e, const char *name, size_t numel,
                                    const float *init, const ferry_group_options *opts,
                                    int *group_id)
{
    if (!e || !init || !name)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group: NULL %s; give the engine, a name "
                                                   "(for messages and traces) and the initial values",
                       !e ? "engine" : !name ? "name" : "initial values");
    if (e->setup_done)
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_add_group('%s'): the engine is already set up; add every group "
                       "before ferry_engine_setup()",
                       name);
    if (numel == 0 || numel > ((size_t)1 << 40))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group('%s'): numel %zu is outside 1..2^40",
                       name, numel);
    ferry_group_options o = FERRY_GROUP_OPTIONS_INIT;
    ferry_status st = opts ? sized_read(&o, sizeof o, opts, group_option_fields,
                                         sizeof group_option_fields / sizeof group_option_fields[0],
                                         "ferry_group_options") : FERRY_OK;
    if (st != FERRY_OK)
        return err_wrap(st, "ferry_engine_add_group('%s')", name);
    if (!(o.lr_scale >= 0.0f) || !isfinite(o.lr_scale))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group: lr_scale %g must be finite and >= 0",
                       (double)o.lr_scale);
    if (e->ngroups >= ENGINE_MAX_GROUPS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_add_group: at most %d groups", ENGINE_MAX_GROUPS);
    if (e->ngroups == e->cap_groups) {
        int cap = e->cap_groups ? 2 * e->cap_groups : 16;
        engine_group *grown = realloc(e->groups, (size_t)cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_add_group: out of host memory");
        e->groups = grown;
        e->cap_groups = cap;
    }
    engine_group *g = &e->groups[e->ngroups];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->numel = numel;
    g->opts = o;
    g->init = malloc(numel * sizeof(float));
    if (!g->init)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_add_group('%s'): out of host memory for its %zu "
                       "initial values", g->name, numel);
    st = take_initial_values(e, g, init);
    if (st == FERRY_OK)
        st = copy_no_decay(g, &o);
    if (st != FERRY_OK) {
        free(g->init);
        return st;
    }
    if (group_id)
        *group_id = e->ngroups;
    e->ngroups++;
    return FERRY_OK;
}

ferry_status ferry_engine_setup(ferry_engine *e)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_setup: engine is NULL");
    if (e->setup_done)
        return err_set(FERRY_ERR_STATE, "ferry_engine_setup: already set up");
    if (e->ngroups == 0)
        return err_set(FERRY_ERR_STATE, "ferry_engine_setup: add parameter groups first");
    /* The split's check reads the mode, which offload auto settles in
     * engine_place. */
    ferry_status st = engine_place(e);
    if (st == FERRY_OK)
        st = engine_split_setup(e);
    if (st == FERRY_OK)
        st = engine_split_place_forced(e);
    if (st != FERRY_OK) {
        engine_unplace(e); /* what was allocated goes with the engine */
        return st;
    }
    for (int g = 0; g < e->ngroups; g++) {
        free(e->groups[g].init);
        e->groups[g].init = NULL;
    }
    e->setup_done = true;
    size_t at = strlen(e->describe);
    if (e->scaling && at < sizeof e->describe)
        snprintf(e->describe + at, sizeof e->describe - at, "; %s storage, dynamic loss scale from %g",
                 dtype_name(e->act), (double)e->scaler.scale);
    at = strlen(e->describe);
    engine_device_share_note(e, e->describe + at, sizeof e->describe - at);
    if (e->cfg.verbose)
        fprintf(stderr, "ferry: %s\n", e->describe);
    return FERRY_OK;
}

ferry_status ferry_engine_begin_micro_batch(ferry_engine *e, int index, int count)
{
    ferry_status st = engine_check_group(e, 0, "ferry_engine_begin_micro_batch");
    if (st != FERRY_OK)
        return st;
    if (count < 1 || index < 0 || index >= count)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "ferry_engine_begin_micro_batch: index %d of %d (want 0 <= index < count)", index, count);
    if (e->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_begin_micro_batch: inference is on; call "
                                        "ferry_engine_end_inference() first");
    int expected = e->micro_index < 0 ? 0 : e->micro_index + 1;
    if (index != expected || (index > 0 && count != e->micro_count))
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_begin_micro_batch: got micro-batch %d of %d, expected %d of %d; "
                       "call ferry_engine_step() after the last micro-batch",
                       index, count, expected, index > 0 ? e->micro_count : count);
    if (e->nvme && (st = engine_nvme_check(e)) != FERRY_OK)
        return st;
    for (int g = 0; g < e->ngroups; g++) {
        engine_group *gr = &e->groups[g];
        if (gr->fetched[0] || gr->fetched[1])
            return err_set(FERRY_ERR_STATE,
                           "ferry_engine_begin_micro_batch: group %d ('%s') is still fetched; release it first",
                           g, gr->name);
        if (index > 0 && gr->released_backward != index)
            return err_set(FERRY_ERR_STATE,
                           "ferry_engine_begin_micro_batch(%d): group %d ('%s') has no gradients from "
                           "micro-batch %d; run its backward and release it first",
                           index, g, gr->name, index - 1);
        gr->grads_acquired = false;
    }
    if (index == 0 && count > 1 && (st = engine_ensure_accumulators(e)) != FERRY_OK)
        return st;
    e->micro_index = index;
    e->micro_count = count;
    e->accumulating = count > 1;
    if (e->cfg.offload == FERRY_OFFLOAD_PARAMS)
        return FERRY_OK;
    /* Resident gradients start each micro-batch at zero (several micro-batches
     * are summed in fp32, grad_acc), once the last drain has read them. */
    for (int g = 0; g < e->ngroups; g++) {
        engine_group *gr = &e->groups[g];
        if ((st = backend_stream_wait_event(e->compute, gr->drained)) != FERRY_OK ||
            (st = backend_memset_async(e->compute, gr->dev_grads, 0, gr->numel * e->act_size)) != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

ferry_status ferry_engine_begin_inference(ferry_engine *e)
{
    ferry_status st = engine_check_group(e, 0, "ferry_engine_begin_inference");
    if (st != FERRY_OK)
        return st;
    if (e->inference || e->micro_index >= 0)
        return err_set(FERRY_ERR_STATE, "ferry_engine_begin_inference: %s; finish it first",
                       e->inference ? "inference is already on" : "a training step is in progress");
    e->inference = true;
    return FERRY_OK;
}

ferry_status ferry_engine_end_inference(ferry_engine *e)
{
    ferry_status st = engine_check_group(e, 0, "ferry_engine_end_inference");
    if (st != FERRY_OK)
        return st;
    if (!e->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_end_inference: inference is not on");
    for (int g = 0; g < e->ngroups; g++)
        if (e->groups[g].fetched[FERRY_PHASE_FORWARD])
            return err_set(FERRY_ERR_STATE, "ferry_engine_end_inference: group %d is still fetched; release it", g);
    e->inference = false;
    return FERRY_OK;
}

ferry_status ferry_engine_fetch(ferry_engine *e, int group, ferry_phase phase, void **weights)
{
    return engine_fetch(e, group, phase, e ? e->compute : NULL, weights);
}

ferry_status ferry_engine_grads(ferry_engine *e, int group, void **grads)
{
    return engine_grads(e, group, e ? e->compute : NULL, grads);
}

ferry_status ferry_engine_release(ferry_engine *e, int group, ferry_phase phase)
{
    return engine_release(e, group, phase, e ? e->compute : NULL);
}

ferry_status ferry_engine_step(ferry_engine *e, const ferry_step_options *opts, ferry_step_report *report)
{
    return engine_step(e, opts, report);
}

ferry_status ferry_engine_synchronize(ferry_engine *e)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_synchronize: engine is NULL");
    ferry_status st = e->setup_done ? engine_wait_updates(e) : FERRY_OK;
    if (st == FERRY_OK) st = backend_stream_synchronize(e->compute);
    if (st == FERRY_OK) st = backend_stream_synchronize(e->h2d);
    if (st == FERRY_OK) st = backend_stream_synchronize(e->d2h);
    if (st == FERRY_OK) st = shard_synchronize(e);
    return st;
}

void *ferry_engine_compute_stream(ferry_engine *e) { return e ? backend_stream_native(e->compute) : NULL; }
ferry_backend_kind ferry_engine_backend(const ferry_engine *e) { return e ? backend_kind(e->be) : FERRY_BACKEND_AUTO; }
ferry_offload ferry_engine_offload(const ferry_engine *e)
{
    return !e ? (ferry_offload)-1 : e->nvme_asked ? FERRY_OFFLOAD_NVME : e->cfg.offload;
}
ferry_dtype ferry_engine_dtype(const ferry_engine *e) { return e ? e->act : FERRY_DTYPE_AUTO; }
int ferry_engine_group_count(const ferry_engine *e) { return e ? e->ngroups : 0; }
int64_t ferry_engine_steps(const ferry_engine *e) { return e ? e->step : -1; }
float ferry_engine_loss_scale(const ferry_engine *e) { return e && e->scaling ? e->scaler.scale : 1.0f; }
int ferry_engine_rank(const ferry_engine *e) { return !e ? -1 : e->dp ? comm_world_rank() : 0; }
int ferry_engine_world_size(const ferry_engine *e) { return !e ? -1 : e->dp ? comm_world_size() : 1; }
backend *engine_embed_backend(ferry_engine *e) { return e ? e->be : NULL; }
backend_stream *engine_embed_stream(ferry_engine *e) { return e ? e->compute : NULL; }

ferry_status ferry_engine_alloc(ferry_engine *e, ferry_mem_category category, const char *name, size_t bytes,
                                void **ptr)
{
    if (!e || !ptr)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_alloc: NULL argument");
    if (category != FERRY_MEM_ACTIVATIONS && category != FERRY_MEM_WORKSPACE && category != FERRY_MEM_OTHER)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "ferry_engine_alloc('%s'): category '%s' belongs to the engine; ask for "
                       "activations, workspace or other",
                       name ? name : "", ferry_mem_category_name(category));
    if (e->user_count == e->user_cap) {
        size_t cap = e->user_cap ? 2 * e->user_cap : 64;
        void **grown = realloc(e->user_allocs, cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_alloc('%s'): out of host memory", name ? name : "");
        e->user_allocs = grown;
        e->user_cap = cap;
    }
    ferry_status st = arena_alloc(e->arena, bytes, category, name ? name : "user", ptr);
    if (st == FERRY_ERR_OUT_OF_MEMORY && e->cfg.offload == FERRY_OFFLOAD_PARAMS) {
        st = engine_evict(e, -1, 0, NULL);
        if (st == FERRY_OK)
            st = arena_alloc(e->arena, bytes, category, name ? name : "user", ptr);
    }
    if (st == FERRY_OK)
        e->user_allocs[e->user_count++] = *ptr;
    return st;
}

ferry_status ferry_engine_free(ferry_engine *e, void *ptr)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_free: engine is NULL");
    if (!ptr)
        return FERRY_OK;
    for (size_t i = e->user_count; i-- > 0;) {
        if (e->user_allocs[i] != ptr)
            continue;
        e->user_allocs[i] = e->user_allocs[--e->user_count];
        return arena_free(e->arena, ptr);
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "ferry_engine_free: %p was not returned by ferry_engine_alloc, or is freed already; weights "
                   "and gradients belong to the engine (give them back with ferry_engine_release)",
                   ptr);
}

/* A group updated on the device: its master weights there, and the host
 * array (what a checkpoint reads) kept alike when they are written. */
static ferry_status split_master_copy(ferry_engine *e, engine_group *g, float *host, bool to_engine)
{
    size_t bytes = g->numel * sizeof(float);
    if (to_engine)
        memcpy(g->master, host, bytes);
    ferry_status st = backend_memcpy_async(e->compute, to_engine ? (void *)g->dev_master : (void *)host,
                                           to_engine ? (void *)host : (void *)g->dev_master, bytes,
                                           to_engine ? BACKEND_COPY_H2D : BACKEND_COPY_D2H);
    return st != FERRY_OK ? st : backend_stream_synchronize(e->compute);
}

/* Master weights are read and written on the host; on NONE/cuda they sit on
 * the device and travel through a temporary buffer. */
static ferry_status master_copy(ferry_engine *e, engine_group *g, float *host, bool to_engine)
{
    size_t bytes = g->numel * sizeof(float);
    bool on_device = e->cfg.offload == FERRY_OFFLOAD_NONE;
    if (shard_sharded(e))
        return to_engine ? shard_set_master(e, g, host) : shard_get_master(e, g, host);
    if (!on_device && !g->master) /* on disk */
        return engine_nvme_master_io(e, g, host, to_engine);
    if (!on_device && g->dev_master) /* the split update: the device holds the master weights */
        return split_master_copy(e, g, host, to_engine);
    if (!on_device) {
        if (to_engine)
            memcpy(g->master, host, bytes);
        else
            memcpy(host, g->master, bytes);
        return FERRY_OK;
    }
    ferry_status st = backend_memcpy_async(e->compute, to_engine ? (void *)g->master : (void *)host,
                                           to_engine ? (void *)host : (void *)g->master, bytes,
                                           to_engine ? BACKEND_COPY_H2D : BACKEND_COPY_D2H);
    return st != FERRY_OK ? st : backend_stream_synchronize(e->compute);
}

ferry_status ferry_engine_get_weights(ferry_engine *e, int group, float *out)
{
    ferry_status st = engine_check_group(e, group, "ferry_engine_get_weights");
    if (st != FERRY_OK)
        return st;
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_get_weights: out is NULL");
    if ((st = ferry_engine_synchronize(e)) != FERRY_OK)
        return st;
    return master_copy(e, &e->groups[group], out, false);
}

ferry_status ferry_engine_set_weights(ferry_engine *e, int group, const float *values)
{
    ferry_status st = engine_check_group(e, group, "ferry_engine_set_weights");
    if (st != FERRY_OK)
        return st;
    if (!values)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_set_weights: values is NULL");
    for (size_t i = 0; i < e->groups[group].numel; i++)
        if (!isfinite(values[i]))
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "ferry_engine_set_weights: group %d value %zu is %g; weights must be finite",
                           group, i, (double)values[i]);
    if ((st = ferry_engine_synchronize(e)) != FERRY_OK)
        return st;
    if ((st = engine_retire_all(e)) != FERRY_OK)
        return st;
    engine_group *g = &e->groups[group];
    if ((st = master_copy(e, g, (float *)values, true)) != FERRY_OK)
        return st;
    return engine_write_device_weights(e, g);
}

ferry_status ferry_engine_mark(ferry_engine *e, int64_t step, const char *phase)
{
    if (!e || !phase)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_mark: NULL argument");
    trace_phase(e->trace, step, phase);
    /* The trace is written out at each marker, so a write that fails (a
     * full disk) is said here, at the next phase, not only at the close. */
    return trace_flush(e->trace);
}

ferry_status ferry_engine_memory_stats(ferry_engine *e, ferry_memory_stats *out)
{
    if (!e || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_memory_stats: NULL argument");
    ferry_memory_stats st = FERRY_MEMORY_STATS_INIT;
    arena_stats(e->arena, &st);
    pool_stats(e->pool, &st);
    if (e->nvme)
        engine_nvme_stats(e, &st);
    engine_device_share_stats(e, &st);
    return sized_write(out, &st, sizeof st, "ferry_memory_stats");
}

ferry_status ferry_engine_step_timing(ferry_engine *e, ferry_step_timing *out)
{
    if (!e || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step_timing: NULL argument");
    return sized_write(out, &e->timing, sizeof e->timing, "ferry_step_timing");
}

const char *ferry_engine_describe(ferry_engine *e) { return e ? e->describe : ""; }

/* ---- abandoning a step (a stop between micro-batches) ---- */

ferry_status ferry_engine_abandon_step(ferry_engine *e)
{
    ferry_status st = engine_check_group(e, 0, "ferry_engine_abandon_step");
    if (st != FERRY_OK)
        return st;
    if (e->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_abandon_step: inference is on, and no step is in progress; "
                                        "call ferry_engine_end_inference() instead");
    if (e->micro_index < 0)
        return FERRY_OK;
    for (int i = 0; i < e->ngroups; i++)
        if (e->groups[i].fetched[0] || e->groups[i].fetched[1])
            return err_set(FERRY_ERR_STATE, "ferry_engine_abandon_step: group %d ('%s') is still fetched; release "
                                            "it first",
                           i, e->groups[i].name);
    /* Every drain and the CPU's sums of the drained gradients finish; their
     * results are then dropped: the next micro-batch 0 starts each sum anew. */
    st = ferry_engine_synchronize(e);
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        if (g->norm_ticket) {
            ferry_status w = tp_wait(g->norm_ticket);
            g->norm_ticket = NULL;
            if (st == FERRY_OK)
                st = w;
        }
        g->released_backward = 0;
        g->grads_acquired = false;
        g->wait_recorded = false;
    }
    if (st == FERRY_OK && e->cfg.offload == FERRY_OFFLOAD_PARAMS)
        st = engine_retire_all(e);
    engine_order_reset(e, false); /* a first step cut short recorded only part of the order */
    e->micro_index = -1;
    memset(&e->timing_acc, 0, sizeof e->timing_acc);
    return st;
}
