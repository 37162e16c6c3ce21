/* The engine's orchestrator and its public face: configuration checks,
 * creation of the backend, streams, arena, pool and optimizer threads
 * (placed on the NUMA node nearest the GPU), parameter groups, the order of
 * setup and teardown of the components (engine/context.h lists them floor
 * by floor), micro-batches, activation memory, weights in and out,
 * statistics. Each decision is a component's; this file calls down into
 * them and nothing calls back up into it. */
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/comm.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/sized.h"
#include "common/units.h"
#include "engine/auto.h"
#include "engine/layout.h"
#include "engine/window.h"

static ferry_status check_group(const ferry_engine *e, int group, const char *what)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: engine is NULL", what);
    if (!e->setup_done)
        return err_set(FERRY_ERR_STATE, "%s: call ferry_engine_setup() first", what);
    if (group < 0 || group >= e->groups.n)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: group %d does not exist (the engine has %d)",
                       what, group, e->groups.n);
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
    SIZED_END(ferry_engine_config, reserved_auto),     SIZED_END(ferry_engine_config, moments),
    SIZED_END(ferry_engine_config, reserved_moments),  SIZED_END(ferry_engine_config, moments_seed),
    SIZED_END(ferry_engine_config, upload_window),     SIZED_END(ferry_engine_config, upload_window_chunks),
    SIZED_END(ferry_engine_config, upload_window_chunk_bytes),
};
SIZED_NO_TAIL_PADDING(ferry_engine_config, upload_window_chunk_bytes);

/* The upload window's fields in range, and not asked for where nothing can
 * use it (offload auto's choice is seen at setup). */
static ferry_status check_window_config(const ferry_engine_config *c)
{
    if (c->upload_window != FERRY_UPLOAD_WINDOW_AUTO && c->upload_window != FERRY_UPLOAD_WINDOW_ON &&
        c->upload_window != FERRY_UPLOAD_WINDOW_OFF)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: upload_window %d; use FERRY_UPLOAD_WINDOW_AUTO (0), _ON (1) or _OFF (-1)",
                       c->upload_window);
    if (c->upload_window_chunks < 0 || c->upload_window_chunks > 64)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: upload_window_chunks %d is outside 0..64 (0 = %d)",
                       c->upload_window_chunks, ENGINE_WINDOW_CHUNKS);
    if (c->upload_window_chunk_bytes % 64 || c->upload_window_chunk_bytes > ((uint64_t)1 << 30))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: upload_window_chunk_bytes %llu; give a multiple of 64 up to 1 GiB (0 = 16 MiB)",
                       (unsigned long long)c->upload_window_chunk_bytes);
    if (c->upload_window != FERRY_UPLOAD_WINDOW_ON)
        return FERRY_OK;
    const char *why = c->offload == FERRY_OFFLOAD_NONE ? "offload 'none' keeps the weights on the device"
                      : c->offload == FERRY_OFFLOAD_NVME || c->nvme_path
                          ? "the NVMe tier converts the master weights from its file into the upload copy"
                          : NULL;
    if (why)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: upload_window on is not available here (%s); use FERRY_UPLOAD_WINDOW_AUTO or "
                       "_OFF",
                       why);
    return FERRY_OK;
}

/* The moments' form known, and where the CPU's update can hold it. */
static ferry_status check_moments_config(const ferry_engine_config *c)
{
    if (c->moments != FERRY_MOMENTS_F32 && c->moments != FERRY_MOMENTS_BF16 && c->moments != FERRY_MOMENTS_8BIT)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: moments %d; use FERRY_MOMENTS_F32, _BF16 or _8BIT",
                       (int)c->moments);
    if (c->reserved_moments != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "engine config: reserved_moments %d; leave it 0",
                       c->reserved_moments);
    if (c->moments == FERRY_MOMENTS_F32)
        return FERRY_OK;
    if (c->offload != FERRY_OFFLOAD_OPTIMIZER && c->offload != FERRY_OFFLOAD_PARAMS &&
        c->offload != FERRY_OFFLOAD_NVME)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: moments %s with offload '%s': compact moments are read and written by the "
                       "CPU AdamW, so they need the state in host memory or on its disk; use offload 'optimizer', "
                       "'params' or 'nvme', or moments f32",
                       ferry_moments_name(c->moments), ferry_offload_name(c->offload));
    if (c->device_update_groups > 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: moments %s with device_update_groups %d: the device's update holds fp32 "
                       "moments; use 0 or -1 (auto keeps every update on the CPU), or moments f32",
                       ferry_moments_name(c->moments), c->device_update_groups);
    return FERRY_OK;
}

/* The split update's fields in range. */
static ferry_status check_split_config(const ferry_engine_config *c)
{
    if (c->device_update_groups < -1 || c->device_update_groups > ENGINE_MAX_GROUPS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: device_update_groups %d; -1 = auto, 0 = every update on the CPU, N > 0 = "
                       "the first N groups on the device",
                       c->device_update_groups);
    if (c->device_update_warmup < 0 || c->device_update_warmup > 1000)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "engine config: device_update_warmup %d is outside 0..1000 (0 = %d steps)",
                       c->device_update_warmup, 2);
    return FERRY_OK;
}

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
    if ((st = check_split_config(c)) != FERRY_OK || (st = check_moments_config(c)) != FERRY_OK ||
        (st = check_window_config(c)) != FERRY_OK)
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
    ferry_status st = backend_set_act_dtype(e->ctx.be, e->cfg.dtype);
    if (st != FERRY_OK)
        return err_wrap(st, "engine config: dtype %s", dtype_name(e->cfg.dtype));
    e->ctx.act = backend_act_dtype(e->ctx.be);
    e->ctx.act_size = dtype_size(e->ctx.act);
    step_scaling_init(&e->scaling, &e->cfg, e->ctx.act);
    return FERRY_OK;
}

/* NCCL's communicators and cuBLASLt start before the budget is measured, so
 * a budget of 0 (what is free) leaves what they take out; each one's share
 * is measured as it starts. The op set is started again with the planned
 * workspace at setup (ops_init takes a new workspace on a started backend). */
static ferry_status start_libraries(ferry_engine *e)
{
    engine_ctx *c = &e->ctx;
    uint64_t free_before = engine_device_free(c->be);
    ferry_status st = dp_open(e->dp, c);
    if (st != FERRY_OK)
        return st;
    engine_device_share_comm(&e->share, c->be, free_before);
    free_before = engine_device_free(c->be);
    if ((st = ops_init(c->be, NULL, 0)) != FERRY_OK)
        return st;
    e->ops_started = true;
    engine_device_share_libraries(&e->share, c->be, free_before);
    return FERRY_OK;
}

static ferry_status open_parts(ferry_engine *e)
{
    engine_ctx *c = &e->ctx;
    ferry_status st = dp_join(&e->cfg, ctx_disk(c) || c->mode.asked == FERRY_OFFLOAD_NVME, &e->dp); /* first: the rank picks the GPU */
    if (st == FERRY_OK)
        st = backend_open(e->cfg.backend, &c->be);
    if (st != FERRY_OK)
        return st;
    engine_device_share_open(&e->share, c->be);
    if ((st = resolve_dtype(e)) != FERRY_OK)
        return st;
    if ((st = backend_stream_create(c->be, "compute", &c->compute)) != FERRY_OK ||
        (st = backend_stream_create(c->be, "h2d", &c->h2d)) != FERRY_OK ||
        (st = backend_stream_create(c->be, "d2h", &c->d2h)) != FERRY_OK)
        return st;
    if ((st = start_libraries(e)) != FERRY_OK)
        return st;
    if (e->cfg.trace_path && (st = trace_open(e->cfg.trace_path, &c->trace)) != FERRY_OK)
        return err_wrap(st, "opening the memory trace");
    arena_config ac = ARENA_CONFIG_INIT;
    ac.budget_bytes = e->cfg.device_budget_bytes;
    if (!ac.budget_bytes && (st = engine_device_share_budget(&e->share, c->be, &ac.budget_bytes)) != FERRY_OK)
        return err_wrap(st, "ferry_engine_create");
    ac.trace = c->trace;
    if ((st = arena_create(c->be, &ac, &c->arena)) != FERRY_OK)
        return st;
    c->numa_node = choose_numa_node(&e->cfg, backend_kind(c->be));
    if ((st = tp_pool_create(dp_optimizer_threads(e->dp, &e->cfg), c->numa_node, &c->threads)) != FERRY_OK)
        return st;
    pool_config pc = POOL_CONFIG_INIT;
    pc.limit_bytes = e->cfg.host_budget_bytes;
    pc.numa_node = c->numa_node;
    pc.be = c->be;
    pc.trace = c->trace;
    return pool_create(&pc, &c->pool);
}

/* The mode asked and the device side's (offload nvme places the device side
 * as optimizer mode does; what goes to disk is the update's business,
 * update_nvme.c). */
static void set_mode(engine_mode *m, ferry_offload asked, bool master_on_disk)
{
    m->asked = asked;
    m->device = asked == FERRY_OFFLOAD_NVME ? FERRY_OFFLOAD_OPTIMIZER : asked;
    m->master_on_disk = master_on_disk;
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
    e->ctx.cfg = &e->cfg;
    e->prog.micro_index = -1;
    e->how.auto_asked = c.offload == FERRY_OFFLOAD_AUTO; /* chosen at setup (auto.c) */
    set_mode(&e->ctx.mode, c.offload, c.nvme_master != 0);
    e->ctx.mode.disk_dir = c.nvme_path ? strdup(c.nvme_path) : NULL;
    e->cfg.nvme_path = NULL; /* the copy is kept (ctx.mode), not the caller's string */
    st = c.nvme_path && !ctx_disk(&e->ctx) ? err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_create: out of host memory")
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

/* Every component placed at setup, top floor first. */
static void unplace(ferry_engine *e)
{
    step_close(e->step);
    sched_close(e->sched);
    drain_close(e->drain);
    update_close(e->update);
    res_close(e->res);
    e->step = NULL;
    e->sched = NULL;
    e->drain = NULL;
    e->update = NULL;
    e->res = NULL;
    dp_unplace(e->dp);
    engine_window_close(e->ctx.window, e->ctx.h2d);
    e->ctx.window = NULL;
    if (e->ctx.be)
        placement_unplace(&e->placement, &e->ctx, &e->groups);
}

/* The trace is closed last, after the allocators that record into it have
 * recorded their last frees. */
ferry_status ferry_engine_close(ferry_engine *e)
{
    if (!e)
        return FERRY_OK;
    engine_ctx *c = &e->ctx;
    trace *t = c->trace;
    if (c->be) {
        if (e->setup_done)
            update_wait(e->update);
        if (c->compute) backend_stream_synchronize(c->compute);
        if (c->h2d) backend_stream_synchronize(c->h2d);
        if (c->d2h) backend_stream_synchronize(c->d2h);
        dp_synchronize(e->dp);
    }
    unplace(e);
    groups_free(&e->groups);
    free(e->user.p);
    free(e->ctx.mode.disk_dir);
    pool_destroy(c->pool);
    tp_pool_destroy(c->threads);
    arena_destroy(c->arena);
    backend_stream_destroy(c->compute);
    backend_stream_destroy(c->h2d);
    backend_stream_destroy(c->d2h);
    if (e->ops_started)
        ops_shutdown(c->be);
    dp_close(e->dp);
    backend_close(c->be);
    free(e);
    return trace_close(t);
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
    return groups_add(&e->groups, e->ctx.threads, name, numel, init, opts, group_id);
}

/* ---- setup ---- */

/* Offload auto: the mode, before any byte is placed. */
static ferry_status resolve_auto(ferry_engine *e)
{
    if (!e->how.auto_asked)
        return FERRY_OK;
    engine_auto_setup in = {.groups = &e->groups, .cfg = &e->cfg, .backend = backend_kind(e->ctx.be),
                            .act = e->ctx.act, .device_budget = arena_budget(e->ctx.arena),
                            .ranks = e->dp ? comm_world_size() : 1, .ranked = e->dp != NULL,
                            .nvme_dir = ctx_disk(&e->ctx)};
    engine_auto_choice c;
    ferry_status st = engine_auto_resolve(&in, &c, e->how.auto_reason, sizeof e->how.auto_reason);
    if (st != FERRY_OK)
        return st;
    engine_mode *m = &e->ctx.mode;
    if (c.offload != FERRY_OFFLOAD_NVME && !c.disk) { /* the folder was only in case the disk were needed */
        free(m->disk_dir);
        m->disk_dir = NULL;
    }
    set_mode(m, c.offload, m->disk_dir && m->master_on_disk);
    if (e->cfg.verbose)
        fprintf(stderr, "ferry: %s\n", e->how.auto_reason);
    return FERRY_OK;
}

static engine_where where(const ferry_engine *e)
{
    return (engine_where){dp_partitioned(e->dp, ctx_mode(&e->ctx)), ctx_disk(&e->ctx) != NULL,
                          e->ctx.mode.master_on_disk};
}

static void describe_more(ferry_engine *e, const char *more);

static void describe(ferry_engine *e)
{
    const engine_ctx *c = &e->ctx;
    double dev_pp, host_pp;
    placement_rank_bytes_per_param(c, &e->groups, where(e), &dev_pp, &host_pp);
    char budget[32], pin[256] = "";
    units_fmt_bytes(budget, sizeof budget, arena_budget(c->arena));
    pool_pinning_note(c->pool, pin, sizeof pin);
    char rank[64] = "";
    if (e->dp)
        snprintf(rank, sizeof rank, "; rank %d of %d", ferry_engine_rank(e), ferry_engine_world_size(e));
    snprintf(e->describe, sizeof e->describe,
             "%s backend (%s), offload %s, %d groups, %zu parameters; device budget %s, %.0f B/param "
             "on the device, %.*f B/param on the host%s; optimizer: %s%s%s",
             ferry_backend_name(backend_kind(c->be)), backend_device_name(c->be),
             ferry_offload_name(ferry_engine_offload(e)), e->groups.n, groups_total(&e->groups), budget, dev_pp,
             host_pp < 10 && host_pp > 0 && host_pp != (int)host_pp ? 1 : 0, host_pp, rank,
             tp_pool_binding(c->threads), pin[0] ? "; " : "", pin);
    update_describe(e->update, e->describe, sizeof e->describe);
    if (c->window) {
        char ring[32], note[96];
        units_fmt_bytes(ring, sizeof ring, engine_window_bytes(c->window));
        snprintf(note, sizeof note, "; upload window of %d chunk%s (%s) in place of the upload copies",
                 engine_window_chunks(c->window), engine_window_chunks(c->window) == 1 ? "" : "s", ring);
        describe_more(e, note);
    }
}

/* Appends a sentence to the description. */
static void describe_more(ferry_engine *e, const char *more)
{
    size_t at = strlen(e->describe);
    if (more && at < sizeof e->describe)
        snprintf(e->describe + at, sizeof e->describe - at, "%s", more);
}

/* The components that run the step, each handed what it works on. */
static ferry_status open_step_parts(ferry_engine *e)
{
    engine_ctx *c = &e->ctx;
    update_env ue = {.ctx = c, .groups = &e->groups, .prog = &e->prog, .dp = e->dp, .res = e->res,
                     .placement = &e->placement};
    ferry_status st = update_open(&ue, &e->update);
    if (st != FERRY_OK)
        return st;
    drain_env de = {.ctx = c, .groups = &e->groups, .prog = &e->prog, .dp = e->dp, .update = e->update,
                    .placement = &e->placement};
    if ((st = drain_open(&de, &e->drain)) != FERRY_OK)
        return st;
    sched_env se = {.ctx = c, .groups = &e->groups, .prog = &e->prog, .dp = e->dp, .res = e->res,
                    .update = e->update, .drain = e->drain};
    if ((st = sched_open(&se, &e->sched)) != FERRY_OK)
        return st;
    step_env te = {.ctx = c, .groups = &e->groups, .prog = &e->prog, .dp = e->dp, .res = e->res,
                   .update = e->update, .drain = e->drain, .sched = e->sched, .placement = &e->placement};
    return step_open(&te, &e->scaling, &e->step);
}

/* Whether the split update will take the config's forced groups (the
 * update's own checks say why not, at setup's end). */
static int forced_split(const ferry_engine *e)
{
    int n = e->cfg.device_update_groups;
    bool available = e->ctx.mode.asked == FERRY_OFFLOAD_OPTIMIZER && !ctx_disk(&e->ctx) &&
                     !e->cfg.delayed_update && !e->dp;
    return available && n > 0 && n <= e->groups.n ? n : 0;
}

/* The plan's request: this engine's groups, mode and budget, and the
 * embedder's declared bytes (auto_activation_bytes). */
static ferry_status plan_request(ferry_engine *e, engine_plan_request *rq, size_t **numel, const char ***names)
{
    *numel = malloc((size_t)e->groups.n * sizeof **numel);
    *names = malloc((size_t)e->groups.n * sizeof **names);
    if (!*numel || !*names)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_setup: out of host memory");
    for (int g = 0; g < e->groups.n; g++) {
        (*numel)[g] = e->groups.g[g].numel;
        (*names)[g] = e->groups.g[g].name;
    }
    *rq = (engine_plan_request){
        .backend = backend_kind(e->ctx.be),
        .dtype = e->ctx.act,
        .offload = e->ctx.mode.asked,
        .prefetch_groups = e->cfg.prefetch_groups,
        .micro_batches = e->cfg.auto_micro_batches > 0 ? e->cfg.auto_micro_batches : 1,
        .group_numel = *numel,
        .ngroups = e->groups.n,
        .disk = ctx_disk(&e->ctx) != NULL,
        .disk_master = e->ctx.mode.master_on_disk,
        .disk_window_bytes = e->cfg.nvme_window_bytes,
        .disk_block_bytes = e->cfg.nvme_block_bytes,
        .ranks = dp_world(e->dp),
        .collective = e->dp != NULL,
        .device_budget = arena_budget(e->ctx.arena),
        .embedder_bytes = e->cfg.auto_activation_bytes,
        .split_groups = forced_split(e),
        .group_names = *names,
        .moments = e->cfg.moments,
        .upload_window = e->cfg.upload_window,
        .upload_window_chunks = e->cfg.upload_window_chunks,
        .upload_window_chunk_bytes = e->cfg.upload_window_chunk_bytes,
    };
    if (!rq->split_groups)
        return FERRY_OK;
    /* A forced split the budget cannot hold is said as the split's. */
    engine_plan_request alone = *rq;
    alone.split_groups = 0;
    engine_memory_plan m;
    ferry_status st = engine_plan_memory(&alone, &m);
    uint64_t budget = rq->device_budget;
    return st != FERRY_OK ? st
                          : update_split_check_room(&e->groups, rq->split_groups, rq->micro_batches > 1,
                                                    m.region_bytes < budget ? budget - m.region_bytes : 0, budget);
}

/* The upload window's ring, where the mode resolved lets it be on (an
 * explicit on where it cannot is refused with the reason). */
static ferry_status open_window(ferry_engine *e)
{
    engine_ctx *c = &e->ctx;
    bool on = engine_window_on(e->cfg.upload_window, e->cfg.moments, ctx_mode(c), ctx_disk(c) != NULL);
    if (!on && e->cfg.upload_window == FERRY_UPLOAD_WINDOW_ON)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "ferry_engine_setup: upload_window on with offload '%s'%s: the window serves offload "
                       "'optimizer' and 'params' alone, without the NVMe tier; use FERRY_UPLOAD_WINDOW_AUTO or _OFF",
                       ferry_offload_name(c->mode.asked), ctx_disk(c) ? " and the NVMe tier" : "");
    return on ? engine_window_open(c, groups_largest(&e->groups), &c->window) : FERRY_OK;
}

/* Where every byte goes, in order: the mode (offload auto), each group's
 * part (data parallelism), the static plan placed (the engine's own
 * buffers, the op set, every planned device buffer), params mode's
 * residency over the plan's slots, the collectives' events, the update
 * (the NVMe tier's store), then group by group its host buffers and its
 * state. */
static ferry_status place(ferry_engine *e)
{
    engine_ctx *c = &e->ctx;
    ferry_status st = resolve_auto(e);
    if (st == FERRY_OK)
        st = placement_check_fit(c, &e->groups, where(e));
    for (int i = 0; i < e->groups.n && st == FERRY_OK; i++)
        dp_layout(e->dp, ctx_mode(c), &e->groups.g[i]);
    engine_plan_request rq;
    size_t *numel = NULL;
    const char **names = NULL;
    if (st == FERRY_OK && (st = plan_request(e, &rq, &numel, &names)) == FERRY_OK)
        st = placement_plan(&e->placement, c, &e->groups, &rq, &e->share);
    free(numel);
    free(names);
    if (st == FERRY_OK)
        st = res_open(c, &e->groups, &e->prog, &e->placement.plan, e->placement.wslots,
                      e->cfg.auto_activation_bytes == 0, &e->res);
    if (st == FERRY_OK)
        st = dp_place(e->dp, c, &e->groups, e->placement.reduce); /* its events come before the first upload */
    if (st == FERRY_OK && e->dp && ctx_mode(c) == FERRY_OFFLOAD_NONE)
        st = placement_accumulators(c, &e->groups, false); /* the sums the all-reduce works on, from setup on */
    if (st == FERRY_OK)
        st = open_step_parts(e);
    if (st == FERRY_OK)
        st = open_window(e);
    for (int i = 0; i < e->groups.n && st == FERRY_OK; i++) {
        engine_group *g = &e->groups.g[i];
        if ((st = placement_group(c, g, where(e))) == FERRY_OK)
            st = update_fill(e->update, g);
    }
    if (st == FERRY_OK)
        describe(e);
    return st;
}

ferry_status ferry_engine_setup(ferry_engine *e)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_setup: engine is NULL");
    if (e->setup_done)
        return err_set(FERRY_ERR_STATE, "ferry_engine_setup: already set up");
    if (e->groups.n == 0)
        return err_set(FERRY_ERR_STATE, "ferry_engine_setup: add parameter groups first");
    ferry_status st = place(e);
    if (st == FERRY_OK)
        st = update_setup_done(e->update); /* the split's forced groups, once the rest is placed */
    if (st != FERRY_OK) {
        unplace(e); /* what was allocated goes with the engine */
        return st;
    }
    groups_drop_init(&e->groups);
    e->setup_done = true;
    describe_more(e, update_take_note(e->update));
    size_t at = strlen(e->describe);
    if (e->scaling.on && at < sizeof e->describe)
        snprintf(e->describe + at, sizeof e->describe - at, "; %s storage, dynamic loss scale from %g",
                 dtype_name(e->ctx.act), (double)e->scaling.scaler.scale);
    at = strlen(e->describe);
    engine_device_share_note(&e->share, e->ctx.be, e->describe + at, sizeof e->describe - at);
    if (e->cfg.verbose)
        fprintf(stderr, "ferry: %s\n", e->describe);
    return FERRY_OK;
}

/* ---- the step's frame ---- */

ferry_status ferry_engine_begin_micro_batch(ferry_engine *e, int index, int count)
{
    ferry_status st = check_group(e, 0, "ferry_engine_begin_micro_batch");
    if (st != FERRY_OK)
        return st;
    engine_progress *p = &e->prog;
    if (count < 1 || index < 0 || index >= count)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "ferry_engine_begin_micro_batch: index %d of %d (want 0 <= index < count)", index, count);
    if (p->inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_begin_micro_batch: inference is on; call "
                                        "ferry_engine_end_inference() first");
    int expected = p->micro_index < 0 ? 0 : p->micro_index + 1;
    if (index != expected || (index > 0 && count != p->micro_count))
        return err_set(FERRY_ERR_STATE,
                       "ferry_engine_begin_micro_batch: got micro-batch %d of %d, expected %d of %d; "
                       "call ferry_engine_step() after the last micro-batch",
                       index, count, expected, index > 0 ? p->micro_count : count);
    if ((st = update_check(e->update)) != FERRY_OK ||
        (st = sched_micro_ready(e->sched, index, "ferry_engine_begin_micro_batch")) != FERRY_OK)
        return st;
    if (index == 0 && count > 1 &&
        ((st = placement_accumulators(&e->ctx, &e->groups, dp_partitioned(e->dp, ctx_mode(&e->ctx)))) != FERRY_OK ||
         (st = update_accumulators(e->update)) != FERRY_OK))
        return st;
    p->micro_index = index;
    p->micro_count = count;
    p->accumulating = count > 1;
    if (ctx_mode(&e->ctx) == FERRY_OFFLOAD_PARAMS)
        return FERRY_OK;
    /* Resident gradients start each micro-batch at zero (several micro-batches
     * are summed in fp32, grad_acc), once the last drain has read them. */
    for (int g = 0; g < e->groups.n; g++) {
        engine_group *gr = &e->groups.g[g];
        if ((st = backend_stream_wait_event(e->ctx.compute, gr->drained)) != FERRY_OK ||
            (st = backend_memset_async(e->ctx.compute, gr->dev_grads, 0, gr->numel * e->ctx.act_size)) != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

ferry_status ferry_engine_begin_inference(ferry_engine *e)
{
    ferry_status st = check_group(e, 0, "ferry_engine_begin_inference");
    if (st != FERRY_OK)
        return st;
    if (e->prog.inference || e->prog.micro_index >= 0)
        return err_set(FERRY_ERR_STATE, "ferry_engine_begin_inference: %s; finish it first",
                       e->prog.inference ? "inference is already on" : "a training step is in progress");
    e->prog.inference = true;
    return FERRY_OK;
}

ferry_status ferry_engine_end_inference(ferry_engine *e)
{
    ferry_status st = check_group(e, 0, "ferry_engine_end_inference");
    if (st != FERRY_OK)
        return st;
    if (!e->prog.inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_end_inference: inference is not on");
    int g = sched_first_fetched(e->sched, true);
    if (g >= 0)
        return err_set(FERRY_ERR_STATE, "ferry_engine_end_inference: group %d is still fetched; release it", g);
    e->prog.inference = false;
    return FERRY_OK;
}

ferry_status ferry_engine_fetch(ferry_engine *e, int group, ferry_phase phase, void **weights)
{
    ferry_status st = check_group(e, group, "ferry_engine_fetch");
    return st != FERRY_OK ? st : sched_fetch(e->sched, group, phase, e->ctx.compute, weights);
}

ferry_status ferry_engine_grads(ferry_engine *e, int group, void **grads)
{
    ferry_status st = check_group(e, group, "ferry_engine_grads");
    return st != FERRY_OK ? st : sched_grads(e->sched, group, e->ctx.compute, grads);
}

ferry_status ferry_engine_release(ferry_engine *e, int group, ferry_phase phase)
{
    ferry_status st = check_group(e, group, "ferry_engine_release");
    return st != FERRY_OK ? st : sched_release(e->sched, group, phase, e->ctx.compute);
}

ferry_status ferry_engine_step(ferry_engine *e, const ferry_step_options *opts, ferry_step_report *report)
{
    ferry_status st = check_group(e, 0, "ferry_engine_step");
    if (st != FERRY_OK)
        return st;
    st = step_run(e->step, opts, report);
    describe_more(e, update_take_note(e->update)); /* the split, chosen after its warm-up */
    return st;
}

ferry_status ferry_engine_synchronize(ferry_engine *e)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_synchronize: engine is NULL");
    ferry_status st = e->setup_done ? update_wait(e->update) : FERRY_OK;
    if (st == FERRY_OK) st = backend_stream_synchronize(e->ctx.compute);
    if (st == FERRY_OK) st = backend_stream_synchronize(e->ctx.h2d);
    if (st == FERRY_OK) st = backend_stream_synchronize(e->ctx.d2h);
    if (st == FERRY_OK) st = dp_synchronize(e->dp);
    return st;
}

void *ferry_engine_compute_stream(ferry_engine *e) { return e ? backend_stream_native(e->ctx.compute) : NULL; }
ferry_backend_kind ferry_engine_backend(const ferry_engine *e) { return e ? backend_kind(e->ctx.be) : FERRY_BACKEND_AUTO; }
ferry_offload ferry_engine_offload(const ferry_engine *e)
{
    return !e ? (ferry_offload)-1 : e->ctx.mode.asked;
}
ferry_dtype ferry_engine_dtype(const ferry_engine *e) { return e ? e->ctx.act : FERRY_DTYPE_AUTO; }
int ferry_engine_group_count(const ferry_engine *e) { return e ? e->groups.n : 0; }
int64_t ferry_engine_steps(const ferry_engine *e) { return e ? e->prog.step : -1; }
float ferry_engine_loss_scale(const ferry_engine *e) { return e && e->scaling.on ? e->scaling.scaler.scale : 1.0f; }
int ferry_engine_rank(const ferry_engine *e) { return !e ? -1 : e->dp ? comm_world_rank() : 0; }
int ferry_engine_world_size(const ferry_engine *e) { return !e ? -1 : e->dp ? comm_world_size() : 1; }
int ferry_engine_device_update_groups(const ferry_engine *e) { return !e ? -1 : e->update ? update_device_groups(e->update) : 0; }
const char *ferry_engine_auto_reason(const ferry_engine *e) { return e ? e->how.auto_reason : ""; }
backend *engine_embed_backend(ferry_engine *e) { return e ? e->ctx.be : NULL; }
backend_stream *engine_embed_stream(ferry_engine *e) { return e ? e->ctx.compute : NULL; }

/* ---- the embedder's device memory ---- */

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
    engine_user_allocs *u = &e->user;
    if (u->count == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 64;
        void **grown = realloc(u->p, cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "ferry_engine_alloc('%s'): out of host memory", name ? name : "");
        u->p = grown;
        u->cap = cap;
    }
    /* The range the plan gave the embedder first (what it declared in
     * auto_activation_bytes), then the arena's dynamic region. */
    ferry_status st = placement_embedder_alloc(&e->placement, &e->ctx, bytes, category, name ? name : "user", ptr);
    if (st == FERRY_OK && !*ptr)
        st = arena_alloc(e->ctx.arena, bytes, category, name ? name : "user", ptr);
    /* Params mode's kept weights beyond the plan (an embedder that did not
     * declare its bytes) give their room back first. */
    if (st == FERRY_ERR_OUT_OF_MEMORY && e->res && res_shrink(e->res) > 0)
        st = arena_alloc(e->ctx.arena, bytes, category, name ? name : "user", ptr);
    if (st == FERRY_OK)
        u->p[u->count++] = *ptr;
    return st;
}

ferry_status ferry_engine_free(ferry_engine *e, void *ptr)
{
    if (!e)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_free: engine is NULL");
    if (!ptr)
        return FERRY_OK;
    engine_user_allocs *u = &e->user;
    for (size_t i = u->count; i-- > 0;) {
        if (u->p[i] != ptr)
            continue;
        u->p[i] = u->p[--u->count];
        return placement_embedder_free(&e->placement, &e->ctx, ptr) ? FERRY_OK : arena_free(e->ctx.arena, ptr);
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "ferry_engine_free: %p was not returned by ferry_engine_alloc, or is freed already; weights "
                   "and gradients belong to the engine (give them back with ferry_engine_release)",
                   ptr);
}

/* ---- weights in and out ---- */

ferry_status ferry_engine_get_weights(ferry_engine *e, int group, float *out)
{
    ferry_status st = check_group(e, group, "ferry_engine_get_weights");
    if (st != FERRY_OK)
        return st;
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_get_weights: out is NULL");
    if ((st = ferry_engine_synchronize(e)) != FERRY_OK)
        return st;
    return update_master_io(e->update, &e->groups.g[group], out, false);
}

ferry_status ferry_engine_set_weights(ferry_engine *e, int group, const float *values)
{
    ferry_status st = check_group(e, group, "ferry_engine_set_weights");
    if (st != FERRY_OK)
        return st;
    if (!values)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_set_weights: values is NULL");
    for (size_t i = 0; i < e->groups.g[group].numel; i++)
        if (!isfinite(values[i]))
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "ferry_engine_set_weights: group %d value %zu is %g; weights must be finite",
                           group, i, (double)values[i]);
    if ((st = ferry_engine_synchronize(e)) != FERRY_OK)
        return st;
    if ((st = sched_retire_all(e->sched)) != FERRY_OK)
        return st;
    engine_group *g = &e->groups.g[group];
    if ((st = update_master_io(e->update, g, (float *)values, true)) != FERRY_OK)
        return st;
    return update_write_weights(e->update, g);
}

/* ---- checkpoints ---- */

static ckpt_env ckpt_of(ferry_engine *e)
{
    return (ckpt_env){&e->ctx, &e->groups, &e->prog, e->dp, e->update, e->sched, &e->scaling};
}

ferry_status ferry_engine_save(ferry_engine *e, const char *path, const void *user, size_t user_bytes)
{
    ferry_status st = check_group(e, 0, "ferry_engine_save");
    if (st != FERRY_OK)
        return st;
    ckpt_env env = ckpt_of(e);
    return ckpt_save(&env, path, user, user_bytes);
}

ferry_status ferry_engine_load(ferry_engine *e, const char *path, void *user, size_t user_cap, size_t *user_bytes)
{
    ferry_status st = check_group(e, 0, "ferry_engine_load");
    if (st != FERRY_OK)
        return st;
    ckpt_env env = ckpt_of(e);
    return ckpt_load(&env, path, user, user_cap, user_bytes);
}

/* ---- figures ---- */

ferry_status ferry_engine_mark(ferry_engine *e, int64_t step, const char *phase)
{
    if (!e || !phase)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_mark: NULL argument");
    trace_phase(e->ctx.trace, step, phase);
    /* The trace is written out at each marker, so a write that fails (a
     * full disk) is said here, at the next phase, not only at the close. */
    return trace_flush(e->ctx.trace);
}

ferry_status ferry_engine_memory_stats(ferry_engine *e, ferry_memory_stats *out)
{
    if (!e || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_memory_stats: NULL argument");
    ferry_memory_stats st = FERRY_MEMORY_STATS_INIT;
    arena_stats(e->ctx.arena, &st);
    pool_stats(e->ctx.pool, &st);
    update_stats(e->update, &st);
    engine_device_share_stats(&e->share, e->ctx.be, &st);
    return sized_write(out, &st, sizeof st, "ferry_memory_stats");
}

ferry_status ferry_engine_step_timing(ferry_engine *e, ferry_step_timing *out)
{
    if (!e || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_step_timing: NULL argument");
    ferry_step_timing none = FERRY_STEP_TIMING_INIT;
    none.world_size = dp_world(e->dp);
    const ferry_step_timing *t = e->step ? step_timing(e->step) : &none;
    return sized_write(out, t, sizeof *t, "ferry_step_timing");
}

const char *ferry_engine_describe(ferry_engine *e) { return e ? e->describe : ""; }

/* ---- abandoning a step (a stop between micro-batches) ---- */

ferry_status ferry_engine_abandon_step(ferry_engine *e)
{
    ferry_status st = check_group(e, 0, "ferry_engine_abandon_step");
    if (st != FERRY_OK)
        return st;
    if (e->prog.inference)
        return err_set(FERRY_ERR_STATE, "ferry_engine_abandon_step: inference is on, and no step is in progress; "
                                        "call ferry_engine_end_inference() instead");
    if (e->prog.micro_index < 0)
        return FERRY_OK;
    int gi = sched_first_fetched(e->sched, false);
    if (gi >= 0)
        return err_set(FERRY_ERR_STATE, "ferry_engine_abandon_step: group %d ('%s') is still fetched; release "
                                        "it first",
                       gi, e->groups.g[gi].name);
    /* Every drain and the CPU's sums of the drained gradients finish; their
     * results are then dropped: the next micro-batch 0 starts each sum anew. */
    st = ferry_engine_synchronize(e);
    ferry_status w = drain_abandon(e->drain);
    if (st == FERRY_OK)
        st = w;
    sched_abandon(e->sched);
    if (st == FERRY_OK && ctx_mode(&e->ctx) == FERRY_OFFLOAD_PARAMS)
        st = res_retire_all(e->res);
    res_order_reset(e->res, false); /* a first step cut short recorded only part of the order */
    e->prog.micro_index = -1;
    memset(&e->prog.acc, 0, sizeof e->prog.acc);
    return st;
}
