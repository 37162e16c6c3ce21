/* The trainer's engine and the weights in it: the engine made for the
 * flags (offload auto made again with recompute when nothing fits without
 * it), the model's groups added from its initialisation or --init-from
 * (GPT-2's file read whole; the Llama family's folder streamed a group at a
 * time, so only one group's fp32 values are ever held besides the
 * engine's), every value checked finite, the activations, a checkpoint's
 * state restored; the weights alone on a backend of their own for
 * --sample; and --find-max-batch's largest batch, from the planner. Not
 * what runs on the engine (trainer_loop.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/hostmem.h"
#include "common/units.h"
#include "engine/intree.h"
#include "backend/ops/ops.h"
#include "models/gpt2_plan.h"
#include "train/hf_checkpoint.h"
#include "train/hf_llama.h"
#include "train/trainer_internal.h"

/* ---- the weights ---- */

/* Every weight of group g is finite, or the first tensor holding one that
 * is not is named. */
static ferry_status check_finite_group(const lmodel *m, int g, const float *values, const char *path)
{
    for (int k = 0; k < lmodel_group_tensor_count(m, g); k++) {
        lmodel_tensor ti;
        size_t bad = 0;
        float first = 0;
        if (lmodel_group_tensor(m, g, k, &ti) != FERRY_OK)
            return FERRY_ERR_INVALID_ARGUMENT;
        for (size_t i = 0; i < ti.numel; i++)
            if (!isfinite(values[ti.offset + i]) && bad++ == 0)
                first = values[ti.offset + i];
        if (bad)
            return err_set(FERRY_ERR_FORMAT, "'%s': tensor '%s' holds %zu values that are not finite (the first: "
                                             "%g); training cannot start from them: use weights saved before "
                                             "the run diverged",
                           path, ti.name, bad, (double)first);
    }
    return FERRY_OK;
}

static void free_groups(float **groups, int G)
{
    for (int g = 0; groups && g < G; g++)
        free(groups[g]);
    free(groups);
}

/* GPT-2's weights from the safetensors file `path`, every group at once,
 * checked finite; *out (G arrays) is the caller's to free_groups, also
 * after a failure. */
static ferry_status load_gpt2(const lmodel *m, const char *path, float ***out)
{
    int G = lmodel_num_groups(m);
    float **groups = calloc((size_t)G, sizeof *groups);
    ferry_status st = groups ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
    for (int g = 0; g < G && st == FERRY_OK; g++)
        if (!(groups[g] = malloc(lmodel_group_numel(m, g) * sizeof(float))))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory for group %d", g);
    if (st == FERRY_OK)
        st = hf_load(path, lmodel_gpt2(m), groups);
    for (int g = 0; g < G && st == FERRY_OK; g++)
        st = check_finite_group(m, g, groups[g], path);
    *out = groups;
    return st;
}

/* The Llama family's folder streamed into the engine: the model's own
 * description, whose initialisation of a group is that group read from the
 * folder (and checked finite), so model_engine_add_groups holds one group's
 * values at a time. */
typedef struct folder_groups {
    model_desc model;
    const lmodel *m;
    hf_llama_reader *reader;
    const char *dir;
} folder_groups;

static int fg_num_groups(const void *c)
{
    const folder_groups *f = c;
    return f->model.num_groups(f->model.m);
}

static size_t fg_group_numel(const void *c, int g)
{
    const folder_groups *f = c;
    return f->model.group_numel(f->model.m, g);
}

static void fg_group_label(const void *c, int g, char *buf, size_t cap)
{
    const folder_groups *f = c;
    f->model.group_label(f->model.m, g, buf, cap);
}

static int fg_tensor_count(const void *c, int g)
{
    const folder_groups *f = c;
    return f->model.tensor_count(f->model.m, g);
}

static ferry_status fg_tensor_span(const void *c, int g, int i, size_t *offset, size_t *numel, bool *decay)
{
    const folder_groups *f = c;
    return f->model.tensor_span(f->model.m, g, i, offset, numel, decay);
}

static ferry_status fg_read_group(const void *c, int g, uint64_t seed, float *out)
{
    const folder_groups *f = c;
    (void)seed;
    ferry_status st = hf_llama_read_group(f->reader, g, out);
    return st == FERRY_OK ? check_finite_group(f->m, g, out, f->dir) : st;
}

static ferry_status add_folder(trainer *t)
{
    folder_groups f = {lmodel_desc(t->model), t->model, NULL, t->init_dir};
    ferry_status st = hf_llama_open(t->init_dir, lmodel_llama(t->model), &f.reader);
    if (st == FERRY_OK) {
        model_desc d = {&f, f.model.family, fg_num_groups, fg_group_numel, fg_group_label, fg_tensor_count,
                        fg_tensor_span, fg_read_group};
        st = model_engine_add_groups(&d, t->engine, t->o.seed, NULL);
    }
    hf_llama_close(f.reader);
    return st;
}

/* The model's initialisation, or the values of --init-from. */
static ferry_status add_weights(trainer *t)
{
    model_desc d = lmodel_desc(t->model);
    if (!t->o.init_from)
        return model_engine_add_groups(&d, t->engine, t->o.seed, NULL);
    if (lmodel_llama(t->model))
        return add_folder(t);
    float **groups = NULL;
    ferry_status st = load_gpt2(t->model, t->o.init_from, &groups);
    if (st == FERRY_OK)
        st = model_engine_add_groups(&d, t->engine, t->o.seed, groups);
    free_groups(groups, lmodel_num_groups(t->model));
    return st;
}

/* A Llama-family model's Hugging Face folder onto the sampling backend, a
 * group at a time (each checked finite). */
static ferry_status resident_from_folder(trainer *t, const char *dir)
{
    hf_llama_reader *r = NULL;
    size_t most = 0;
    for (int g = 0; g < lmodel_num_groups(t->model); g++)
        if (lmodel_group_numel(t->model, g) > most)
            most = lmodel_group_numel(t->model, g);
    float *buf = malloc(most * sizeof *buf);
    ferry_status st = buf ? hf_llama_open(dir, lmodel_llama(t->model), &r)
                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory for a group of %zu values", most);
    for (int g = 0; g < lmodel_num_groups(t->model) && st == FERRY_OK; g++) {
        st = hf_llama_read_group(r, g, buf);
        if (st == FERRY_OK) st = check_finite_group(t->model, g, buf, dir);
        if (st == FERRY_OK) st = model_resident_set_params(t->resident, t->sample_stream, g, buf);
    }
    hf_llama_close(r);
    free(buf);
    return st;
}

/* --sample needs the weights only: they go on a backend of their own
 * (model_resident), from the checkpoint's weights or --init-from's (GPT-2's
 * model.safetensors, the Llama family's Hugging Face folder), with
 * activations for one sequence; no engine, so no optimizer state, no master
 * copy, no pinned pool. */
ferry_status trainer_setup_sampling(trainer *t)
{
    char weights[PATH_MAX];
    ferry_status st = FERRY_OK;
    if (t->o.init_from)
        snprintf(weights, sizeof weights, "%s", t->o.init_from);
    else
        st = run_state_join(weights, sizeof weights, t->ckpt, "model.safetensors");
    if (st == FERRY_OK) st = backend_open(t->o.backend, &t->sample_be);
    if (st == FERRY_OK) st = backend_set_act_dtype(t->sample_be, t->o.dtype);
    if (st == FERRY_OK) st = ops_init(t->sample_be, NULL, 0);
    if (st == FERRY_OK) st = backend_stream_create(t->sample_be, "sampling", &t->sample_stream);
    if (st == FERRY_OK) st = lmodel_create(&t->spec, &t->model);
    int G = t->model ? lmodel_num_groups(t->model) : 0;
    size_t *numel = st == FERRY_OK ? calloc((size_t)G, sizeof *numel) : NULL;
    if (st == FERRY_OK && !numel)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
    for (int g = 0; g < G && st == FERRY_OK; g++)
        numel[g] = lmodel_group_numel(t->model, g);
    if (st == FERRY_OK) st = model_resident_create(t->sample_be, G, numel, lmodel_llama(t->model) ? "llama" : "gpt2",
                                                         &t->resident);
    free(numel);
    if (st == FERRY_OK && lmodel_llama(t->model))
        st = resident_from_folder(t, t->o.init_from ? t->init_dir : t->ckpt);
    else if (st == FERRY_OK) {
        float **groups = NULL;
        st = load_gpt2(t->model, weights, &groups);
        for (int g = 0; g < G && st == FERRY_OK; g++)
            st = model_resident_set_params(t->resident, t->sample_stream, g, groups[g]);
        free_groups(groups, G);
    }
    model_allocator alloc = model_backend_allocator(t->sample_be);
    if (st == FERRY_OK)
        st = lmodel_acts_create(t->model, t->sample_be, 1, t->o.seq, false, &alloc, &t->acts);
    if (st == FERRY_OK && t->o.resume)
        t->step = t->from.step, t->smp.rng = t->from.sample_rng;
    return st;
}

/* ---- the engine ---- */

/* The device element type the engine will take (its AUTO resolved as it
 * resolves it: f32 on host, 16-bit on cuda): what the activations' bytes
 * are counted in before the engine exists. */
ferry_dtype trainer_planned_dtype(const trainer *t)
{
    if (t->o.dtype != FERRY_DTYPE_AUTO)
        return t->o.dtype;
    ferry_backend_kind kind = t->o.backend;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (kind == FERRY_BACKEND_AUTO)
        kind = ferry_system_probe(&info) == FERRY_OK ? info.backend : FERRY_BACKEND_HOST;
    return kind == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
}

/* What the trainer will take of the engine's budget: the activations of a
 * batch, and those of the evaluation batch when it is smaller. */
static uint64_t activation_bytes(const trainer *t)
{
    ferry_dtype d = trainer_planned_dtype(t);
    uint64_t a = lmodel_acts_bytes(t->model, d, t->o.batch, t->o.seq, t->o.recompute);
    if (t->val && t->eval_batch < t->o.batch)
        a += lmodel_acts_bytes(t->model, d, t->eval_batch, t->o.seq, t->o.recompute);
    return a;
}

static ferry_status create_engine(trainer *t)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = t->o.backend;
    c.offload = t->o.offload;
    c.dtype = t->o.dtype;
    c.moments = t->o.moments;
    c.moments_seed = t->o.seed;
    c.upload_window = t->o.upload_window;
    c.upload_window_chunk_bytes = t->o.upload_window_chunk_bytes;
    c.loss_scaling = t->o.loss_scale > 0 ? FERRY_LOSS_SCALING_AUTO : FERRY_LOSS_SCALING_OFF;
    if (t->o.loss_scale > 0)
        c.loss_scale_init = t->o.loss_scale;
    /* The engine's collapse stop and the trainer's --max-skips are one limit. */
    c.loss_scale_max_skips = t->o.max_skips;
    c.device_budget_bytes = t->o.gpu_mem;
    c.host_budget_bytes = t->o.host_mem;
    c.prefetch_groups = t->o.prefetch;
    c.optimizer_threads = t->o.threads;
    c.delayed_update = t->o.delayed_update;
    c.trace_path = t->o.trace;
    if (t->o.nvme_path) {
        c.nvme_path = t->o.nvme_path;
        c.nvme_master = t->o.nvme_master;
        c.nvme_window_bytes = t->o.nvme_window;
        c.nvme_block_bytes = t->o.nvme_block;
        c.nvme_queue_depth = t->o.nvme_queue_depth;
    }
    ferry_status st = lmodel_create(&t->spec, &t->model);
    c.auto_activation_bytes = st == FERRY_OK && !t->o.sample_only ? activation_bytes(t) : 0;
    c.auto_micro_batches = t->o.grad_accum;
    if (st == FERRY_OK) st = ferry_engine_create(&c, &t->engine);
    char setup[64] = "setup"; /* each rank's trace says whose it is */
    if (t->world > 1)
        snprintf(setup, sizeof setup, "setup (rank %d of %d)", t->rank, t->world);
    if (st == FERRY_OK) st = ferry_engine_mark(t->engine, 0, setup);
    if (st == FERRY_OK) st = add_weights(t);
    if (st == FERRY_OK) st = ferry_engine_setup(t->engine);
    if (st != FERRY_OK)
        return st;
    model_allocator alloc = model_engine_allocator(t->engine);
    int B = t->o.sample_only ? 1 : t->o.batch;
    st = lmodel_acts_create(t->model, engine_embed_backend(t->engine), B, t->o.seq, t->o.recompute, &alloc,
                            &t->acts);
    if (st == FERRY_OK && t->val && t->eval_batch < B)
        st = lmodel_acts_create(t->model, engine_embed_backend(t->engine), t->eval_batch, t->o.seq, t->o.recompute,
                                &alloc, &t->eval_acts);
    if (st == FERRY_ERR_OUT_OF_MEMORY)
        return err_wrap(st, "activations for batch %d x %d tokens%s", B, t->o.seq,
                        t->o.recompute ? "" : " (try --recompute, a smaller --batch or --seq)");
    return st;
}

/* Offload auto recomputes only when no mode fits without it: a setup that
 * found nothing to fit is made again with recompute on (every rank fails
 * alike, the choice being agreed). */
ferry_status trainer_setup_engine(trainer *t)
{
    ferry_status st = create_engine(t);
    if (st != FERRY_ERR_OUT_OF_MEMORY || t->o.offload != FERRY_OFFLOAD_AUTO || t->o.recompute || t->o.sample_only ||
        !strstr(ferry_last_error(), "offload auto: no mode fits"))
        return st;
    ferry_engine_destroy(t->engine);
    lmodel_destroy(t->model);
    t->engine = NULL;
    t->model = NULL;
    t->o.recompute = true;
    st = create_engine(t);
    if (st == FERRY_OK && trainer_leader(t) && !t->o.quiet)
        printf("offload auto: no mode fits without recompute; recomputing activations in backward\n");
    return st;
}

ferry_status trainer_restore(trainer *t)
{
    if (!t->ckpt[0])
        return FERRY_OK;
    train_resume r;
    ferry_status st = run_state_load(t->ckpt, t->engine, &r);
    if (st != FERRY_OK)
        return st;
    if (r.step != t->from.step || strcmp(r.run, t->from.run) != 0)
        return err_set(FERRY_ERR_FORMAT, "--resume: '%s/state.ferry' changed while the run started (step %lld of run "
                       "%s, then step %lld of run %s); resume again", t->ckpt, (long long)t->from.step,
                       t->from.run, (long long)r.step, r.run);
    t->step = t->saved_step = r.step;
    snprintf(t->saved_in, sizeof t->saved_in, "%s", t->ckpt);
    t->smp.rng = r.sample_rng;
    if (t->o.sample_only || t->o.eval_only)
        return FERRY_OK;
    if (r.batch != t->o.batch || r.seq != t->o.seq)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "--resume: the checkpoint was trained with --batch %d --seq %d; the run has %d and %d",
                       r.batch, r.seq, t->o.batch, t->o.seq);
    st = tok_loader_seek(t->train, &r.data);
    if (st != FERRY_OK)
        return err_wrap(st, "--resume: the data position");
    t->pos = tok_loader_tell(t->train);
    return FERRY_OK;
}

/* ---- --find-max-batch ---- */

/* The device budget to fill: --gpu-mem, else a card's memory less what its
 * CUDA context and libraries take (memprof's --card-reserve default). */
static ferry_status max_batch_budget(const trainer *t, uint64_t *budget)
{
    *budget = t->o.gpu_mem;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (!*budget && trainer_planned_dtype(t) != FERRY_DTYPE_F32 && ferry_system_probe(&info) == FERRY_OK &&
        info.gpu_memory_bytes > ((uint64_t)1 << 30))
        *budget = info.gpu_memory_bytes - ((uint64_t)512 << 20);
    if (!*budget)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--find-max-batch fills a device budget: give --gpu-mem (no GPU "
                       "here says how much it has)");
    return FERRY_OK;
}

/* --find-max-batch: the planner's largest batch (across modes and
 * recompute with offload auto), the same on every rank. */
ferry_status trainer_find_max_batch(trainer *t)
{
    uint64_t budget, host = hostmem_available(NULL, NULL);
    ferry_status st = max_batch_budget(t, &budget);
    if (st != FERRY_OK)
        return st;
    if (t->o.host_mem && (!host || t->o.host_mem < host))
        host = t->o.host_mem;
    gpt2_plan_request rq = {.batch = 1, .seq = t->o.seq, .offload = t->o.offload, .recompute = t->o.recompute,
                            .prefetch_groups = t->o.prefetch, .micro_batches = t->o.grad_accum,
                            .backend = t->o.backend, .dtype = trainer_planned_dtype(t), .ranks = t->world,
                            .device_budget = budget, .moments = t->o.moments,
                            .upload_window = t->o.upload_window,
                            .upload_window_chunk_bytes = t->o.upload_window_chunk_bytes};
    model_spec_plan_request(&t->spec, &rq);
    if (rq.backend == FERRY_BACKEND_AUTO)
        rq.backend = rq.dtype == FERRY_DTYPE_F32 ? FERRY_BACKEND_HOST : FERRY_BACKEND_CUDA;
    gpt2_plan_disk tier = {t->o.nvme_master, t->o.nvme_window, t->o.nvme_block};
    gpt2_plan_auto_result r;
    memset(&r, 0, sizeof r);
    int B = 0;
    bool auto_mode = t->o.offload == FERRY_OFFLOAD_AUTO;
    st = auto_mode ? gpt2_plan_auto_max_batch(&rq, t->o.nvme_path ? &tier : NULL, budget, host, &B, NULL)
                   : gpt2_plan_max_batch(&rq, budget, &B);
    if (st == FERRY_OK)
        st = trainer_agree_batch(t, &B);
    if (st != FERRY_OK)
        return st;
    char b[32];
    if (B < 1)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "not even batch 1 x %d fits the device budget of %s%s", t->o.seq,
                       units_fmt_bytes(b, sizeof b, budget), auto_mode ? " in any mode, with recompute" : "");
    rq.batch = B;
    if (auto_mode && (st = gpt2_plan_auto(&rq, t->o.nvme_path ? &tier : NULL, budget, host, &r)) != FERRY_OK)
        return st;
    t->o.batch = B;
    if (auto_mode)
        t->o.recompute = r.recompute;
    if (trainer_leader(t))
        printf("find-max-batch: batch %d x %d fits the device budget of %s (offload %s%s)\n", B, t->o.seq,
               units_fmt_bytes(b, sizeof b, budget), ferry_offload_name(auto_mode ? r.offload : t->o.offload),
               t->o.recompute ? ", recompute" : "");
    return FERRY_OK;
}
