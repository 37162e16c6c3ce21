/* Training's memory, predicted (see gpt2_plan.h), for GPT-2 or the Llama
 * family: the model's group sizes and activation plan, and the engine's
 * memory plan, added up. */
#include "models/gpt2_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/intree.h"
#include "offload/arena.h"

#define PLAN_MAX_BATCH 65536

static ferry_dtype device_dtype(ferry_backend_kind backend, ferry_dtype dtype)
{
    if (dtype != FERRY_DTYPE_AUTO)
        return dtype;
    return backend == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
}

/* The model's share: group sizes (for the engine), parameters, and its
 * activation plan (GPT-2's, or the Llama family's when lm is set). */
typedef struct plan_model {
    gpt2_model *m;
    llama_model *lm;
    int max_seq_len;
    size_t *numel;
    char (*names)[32];
    const char **name_of;
    int ngroups;
} plan_model;

static ferry_status model_open(const gpt2_plan_request *rq, plan_model *pm)
{
    memset(pm, 0, sizeof *pm);
    if (!rq->cfg && !rq->llama)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "plan: the model configuration is NULL");
    ferry_status st = rq->llama ? llama_create(rq->llama, &pm->lm) : gpt2_create(rq->cfg, &pm->m);
    if (st != FERRY_OK)
        return err_wrap(st, "plan: model");
    pm->ngroups = pm->lm ? llama_num_groups(pm->lm) : gpt2_num_groups(pm->m);
    pm->max_seq_len = pm->lm ? llama_get_config(pm->lm)->max_seq_len : gpt2_get_config(pm->m)->max_seq_len;
    pm->numel = calloc((size_t)pm->ngroups, sizeof *pm->numel);
    pm->names = calloc((size_t)pm->ngroups, sizeof *pm->names);
    pm->name_of = calloc((size_t)pm->ngroups, sizeof *pm->name_of);
    if (!pm->numel || !pm->names || !pm->name_of)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "plan: out of host memory");
    for (int g = 0; g < pm->ngroups; g++) {
        pm->numel[g] = pm->lm ? llama_group_numel(pm->lm, g) : gpt2_group_numel(pm->m, g);
        if (pm->lm)
            llama_group_label(pm->lm, g, pm->names[g], sizeof pm->names[g]);
        else
            gpt2_group_label(pm->m, g, pm->names[g], sizeof pm->names[g]);
        pm->name_of[g] = pm->names[g];
    }
    return FERRY_OK;
}

static size_t model_acts(const plan_model *pm, ferry_dtype act, int B, int T, bool recompute,
                         void (*fn)(void *ctx, const char *what, size_t bytes), void *ctx)
{
    return pm->lm ? llama_activations_list(pm->lm, act, B, T, recompute, fn, ctx)
                  : gpt2_activations_list(pm->m, act, B, T, recompute, fn, ctx);
}

static void model_close(plan_model *pm)
{
    free(pm->numel);
    free(pm->names);
    free(pm->name_of);
    gpt2_destroy(pm->m);
    llama_destroy(pm->lm);
    memset(pm, 0, sizeof *pm);
}

static ferry_status check_args(const plan_model *pm, int B, int T)
{
    if (B < 1 || T < 1 || T > pm->max_seq_len)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 plan: batch %d x sequence %d; need batch >= 1 and 1 <= sequence <= the model's "
                       "context (%d)",
                       B, T, pm->max_seq_len);
    if ((int64_t)B * T > INT32_MAX)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 plan: batch x sequence = %lld tokens is more than one micro-batch can hold (2^31 - 1)",
                       (long long)B * T);
    return FERRY_OK;
}

static ferry_status add_up(uint64_t *total, const uint64_t *parts)
{
    *total = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (__builtin_add_overflow(*total, parts[c], total))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2 plan: the model's memory does not fit in 64 bits");
    return FERRY_OK;
}

/* The engine's request for batch B: the model's groups, and its
 * activations as the embedder's declared bytes (*acts). */
static ferry_status engine_request(const plan_model *pm, const gpt2_plan_request *r, const gpt2_plan_disk *disk, int B,
                                   engine_plan_request *rq, uint64_t *acts)
{
    ferry_status st = check_args(pm, B, r->seq);
    if (st != FERRY_OK)
        return st;
    ferry_dtype act = device_dtype(r->backend, r->dtype);
    *acts = model_acts(pm, act, B, r->seq, r->recompute, NULL, NULL);
    if (*acts == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "plan: the activations of batch %d x %d do not fit in 64 bits (or the sequence is past the model's sliding window)", B, r->seq);
    *rq = (engine_plan_request){.backend = r->backend,
                                .dtype = act,
                                .offload = r->offload,
                                .prefetch_groups = r->prefetch_groups,
                                .micro_batches = r->micro_batches,
                                .group_numel = pm->numel,
                                .ngroups = pm->ngroups,
                                .disk = disk != NULL,
                                .disk_master = disk && disk->master,
                                .disk_window_bytes = disk ? disk->window_bytes : 0,
                                .disk_block_bytes = disk ? disk->block_bytes : 0,
                                .ranks = r->ranks,
                                .device_budget = r->device_budget,
                                .embedder_bytes = *acts,
                                .split_groups = r->split_groups,
                                .group_names = pm->name_of,
                                .moments = r->moments,
                                .upload_window = r->upload_window,
                                .upload_window_chunks = r->upload_window_chunks,
                                .upload_window_chunk_bytes = r->upload_window_chunk_bytes};
    return FERRY_OK;
}

static ferry_status predict(const plan_model *pm, const gpt2_plan_request *r, const gpt2_plan_disk *disk, int B,
                            gpt2_plan *out)
{
    ferry_offload mode = r->offload;
    engine_plan_request rq;
    uint64_t acts;
    ferry_status st = engine_request(pm, r, disk, B, &rq, &acts);
    if (st != FERRY_OK)
        return st;
    engine_memory_plan ep;
    if ((st = engine_plan_memory(&rq, &ep)) != FERRY_OK)
        return err_wrap(st, "gpt2 plan");
    gpt2_plan p;
    memset(&p, 0, sizeof p);
    memcpy(p.device_bytes, ep.device_bytes, sizeof p.device_bytes);
    memcpy(p.host_bytes, ep.host_bytes, sizeof p.host_bytes);
    p.activations = acts; /* in the engine's plan, the embedder's range: the model's takes end to end */
    if ((st = add_up(&p.device_total, p.device_bytes)) != FERRY_OK ||
        (st = add_up(&p.host_total, p.host_bytes)) != FERRY_OK)
        return st;
    p.device_min_bytes = mode == FERRY_OFFLOAD_PARAMS ? ep.device_min_bytes : p.device_total;
    p.region_bytes = ep.region_bytes;
    p.prefetch_depth = ep.prefetch_depth;
    p.num_params = pm->lm ? llama_num_params(pm->lm) : gpt2_num_params(pm->m);
    for (int g = 0; g < pm->ngroups; g++)
        p.group_elems += pm->numel[g];
    p.groups = pm->ngroups;
    p.device_weight_groups = ep.device_weight_groups;
    p.device_grad_groups = ep.device_grad_groups;
    p.act_size = (int)ep.act_size;
    p.disk_bytes = ep.disk_bytes;
    *out = p;
    return FERRY_OK;
}

static ferry_status check_request(const gpt2_plan_request *rq, const char *who)
{
    if (!rq)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: the request is NULL", who);
    if (rq->offload == FERRY_OFFLOAD_AUTO && strncmp(who, "gpt2_plan_auto", 14) != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: offload auto is a choice, not a mode to plan; ask "
                       "gpt2_plan_auto which mode it takes", who);
    if (rq->micro_batches < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: %d micro-batches per step; at least 1", who,
                       rq->micro_batches);
    return FERRY_OK;
}

ferry_status gpt2_plan_predict(const gpt2_plan_request *rq, gpt2_plan *out)
{
    return gpt2_plan_predict_disk(rq, NULL, out);
}

ferry_status gpt2_plan_predict_disk(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, gpt2_plan *out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_plan_predict: out is NULL");
    ferry_status st = check_request(rq, "gpt2_plan_predict");
    plan_model pm = {0};
    if (st == FERRY_OK)
        st = model_open(rq, &pm);
    if (st == FERRY_OK)
        st = predict(&pm, rq, disk, rq->batch, out);
    model_close(&pm);
    return st;
}

ferry_status gpt2_plan_max_batch(const gpt2_plan_request *rq, uint64_t device_budget, int *max_B)
{
    if (!max_B)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_plan_max_batch: max_B is NULL");
    *max_B = 0;
    ferry_status st = check_request(rq, "gpt2_plan_max_batch");
    plan_model pm = {0};
    if (st == FERRY_OK)
        st = model_open(rq, &pm);
    gpt2_plan r;
    if (st == FERRY_OK)
        st = predict(&pm, rq, NULL, 1, &r);
    /* The peak grows with B (every activation is B x T x something), so bisect
     * on the largest B that fits; B beyond 2^31 / T is not a micro-batch. */
    int T = rq ? rq->seq : 0, lo = 0, hi = PLAN_MAX_BATCH;
    if (T > 0 && hi > INT32_MAX / T)
        hi = INT32_MAX / T;
    if (st == FERRY_OK && r.device_total <= device_budget) {
        lo = 1;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            ferry_status one = predict(&pm, rq, NULL, mid, &r);
            if (one == FERRY_OK && r.device_total <= device_budget) {
                lo = mid;
            } else {
                err_clear(); /* too large to count is as good as too large to fit */
                hi = mid - 1;
            }
        }
    }
    model_close(&pm);
    if (st == FERRY_OK)
        *max_B = lo;
    return st;
}

/* dN with rq's vocabulary and context: fits the budgets given? *fits false
 * also when it is too large to count. */
static ferry_status fits_dn(const gpt2_plan_request *rq, const gpt2_plan_disk *tier, int n, uint64_t dev,
                            uint64_t host, uint64_t disk, bool *fits, gpt2_plan *out)
{
    gpt2_config c;
    *fits = false;
    ferry_status st = gpt2_config_from_fields(n, n, 64 * n, rq->cfg->vocab_size, 0, rq->cfg->max_seq_len, &c);
    if (st != FERRY_OK)
        return st;
    gpt2_plan_request r = *rq;
    r.cfg = &c;
    gpt2_plan p;
    st = gpt2_plan_predict_disk(&r, tier, &p);
    if (st == FERRY_ERR_INVALID_ARGUMENT) { /* past 64 bits: too large for any budget */
        err_clear();
        return FERRY_OK;
    }
    if (st != FERRY_OK)
        return st;
    *fits = (!dev || p.device_total <= dev) && (!host || p.host_total <= host) && (!disk || p.disk_bytes <= disk);
    if (*fits && out)
        *out = p;
    return FERRY_OK;
}

ferry_status gpt2_plan_largest_model(const gpt2_plan_request *rq, const gpt2_plan_disk *tier, uint64_t device_budget,
                                     uint64_t host_budget, uint64_t disk_budget, int *layers, gpt2_plan *plan)
{
    if (!layers || !rq || !rq->cfg)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2_plan_largest_model: NULL argument (it searches GPT-2's dN shapes: a GPT-2 cfg is needed)");
    *layers = 0;
    ferry_status st = check_request(rq, "gpt2_plan_largest_model");
    if (st != FERRY_OK)
        return st;
    if (!device_budget && !host_budget && !disk_budget)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_plan_largest_model: no budget to fit");
    bool fits = false;
    int lo = 0, hi = 256; /* the largest dN train_gpt2 takes (824B parameters) */
    if ((st = fits_dn(rq, tier, 1, device_budget, host_budget, disk_budget, &fits, plan)) != FERRY_OK || !fits)
        return st;
    lo = 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if ((st = fits_dn(rq, tier, mid, device_budget, host_budget, disk_budget, &fits, NULL)) != FERRY_OK)
            return st;
        if (fits)
            lo = mid;
        else
            hi = mid - 1;
    }
    *layers = lo;
    return fits_dn(rq, tier, lo, device_budget, host_budget, disk_budget, &fits, plan);
}

/* ---- offload auto ---- */

/* The engine's choice at batch B with recompute on or off. */
static ferry_status auto_at(const plan_model *pm, const gpt2_plan_request *r, const gpt2_plan_disk *disk,
                            uint64_t budget, uint64_t host, int B, bool recompute, gpt2_plan_auto_result *out)
{
    ferry_status st = check_args(pm, B, r->seq);
    if (st != FERRY_OK)
        return st;
    ferry_dtype act = device_dtype(r->backend, r->dtype);
    uint64_t acts = model_acts(pm, act, B, r->seq, recompute, NULL, NULL);
    if (acts == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "plan: the activations of batch %d x %d do not fit in 64 bits (or the sequence is past the model's sliding window)", B, r->seq);
    engine_auto_request rq = {
        .plan = {.backend = r->backend,
                 .dtype = act,
                 .offload = FERRY_OFFLOAD_NONE,
                 .prefetch_groups = r->prefetch_groups,
                 .micro_batches = r->micro_batches,
                 .group_numel = pm->numel,
                 .ngroups = pm->ngroups,
                 .disk_master = disk && disk->master,
                 .disk_window_bytes = disk ? disk->window_bytes : 0,
                 .disk_block_bytes = disk ? disk->block_bytes : 0,
                 .ranks = r->ranks,
                 .embedder_bytes = acts},
        .device_budget = budget,
        .host_available = host,
        .nvme = disk != NULL,
    };
    engine_auto_choice ch;
    if ((st = engine_auto_choose(&rq, ENGINE_AUTO_NONE, &ch)) != FERRY_OK)
        return st;
    gpt2_plan_request pr = *r;
    pr.batch = B;
    pr.offload = ch.offload;
    pr.recompute = recompute;
    pr.device_budget = budget;
    gpt2_plan_disk tier = disk ? *disk : (gpt2_plan_disk){0};
    bool on_disk = ch.offload == FERRY_OFFLOAD_NVME || ch.disk;
    if ((st = predict(pm, &pr, on_disk ? &tier : NULL, B, &out->plan)) != FERRY_OK)
        return st;
    out->offload = ch.offload;
    out->disk = ch.disk;
    out->recompute = recompute;
    out->activations = acts;
    snprintf(out->reason, sizeof out->reason, "%s", ch.reason);
    return FERRY_OK;
}

/* Without recompute first; with it only when nothing fits without. */
static ferry_status auto_pick(const plan_model *pm, const gpt2_plan_request *r, const gpt2_plan_disk *disk,
                              uint64_t budget, uint64_t host, int B, gpt2_plan_auto_result *out)
{
    ferry_status st = FERRY_ERR_OUT_OF_MEMORY;
    if (!r->recompute) {
        st = auto_at(pm, r, disk, budget, host, B, false, out);
        if (st != FERRY_ERR_OUT_OF_MEMORY)
            return st;
        err_clear();
    }
    st = auto_at(pm, r, disk, budget, host, B, true, out);
    if (st == FERRY_ERR_OUT_OF_MEMORY && !r->recompute)
        return err_wrap(st, "even with recompute");
    if (st == FERRY_OK && !r->recompute) {
        size_t at = strlen(out->reason);
        snprintf(out->reason + at, sizeof out->reason - at, "; with recompute (no mode fits without it)");
    }
    return st;
}

static ferry_status auto_check(const gpt2_plan_request *rq, uint64_t device_budget, const char *who)
{
    ferry_status st = check_request(rq, who);
    if (st == FERRY_OK && !device_budget)
        st = err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: offload auto chooses for a device budget; give one (--gpu-mem "
                     "or --card)", who);
    return st;
}

ferry_status gpt2_plan_auto(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, uint64_t device_budget,
                            uint64_t host_available, gpt2_plan_auto_result *out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_plan_auto: out is NULL");
    ferry_status st = auto_check(rq, device_budget, "gpt2_plan_auto");
    plan_model pm = {0};
    if (st == FERRY_OK)
        st = model_open(rq, &pm);
    if (st == FERRY_OK)
        st = auto_pick(&pm, rq, disk, device_budget, host_available, rq->batch, out);
    model_close(&pm);
    return st;
}

ferry_status gpt2_plan_auto_max_batch(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, uint64_t device_budget,
                                      uint64_t host_available, int *max_B, gpt2_plan_auto_result *out)
{
    if (!max_B)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_plan_auto_max_batch: max_B is NULL");
    *max_B = 0;
    ferry_status st = auto_check(rq, device_budget, "gpt2_plan_auto_max_batch");
    plan_model pm = {0};
    if (st == FERRY_OK)
        st = model_open(rq, &pm);
    gpt2_plan_auto_result r;
    int lo = 0, hi = PLAN_MAX_BATCH;
    if (st == FERRY_OK && hi > INT32_MAX / rq->seq)
        hi = INT32_MAX / rq->seq;
    /* Every mode's peak grows with B, so "some mode fits" holds up to a largest B. */
    if (st == FERRY_OK) {
        ferry_status one = auto_pick(&pm, rq, disk, device_budget, host_available, 1, &r);
        if (one == FERRY_OK)
            lo = 1;
        else if (one == FERRY_ERR_OUT_OF_MEMORY)
            err_clear(), hi = 0;
        else
            st = one;
    }
    while (st == FERRY_OK && lo >= 1 && lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (auto_pick(&pm, rq, disk, device_budget, host_available, mid, &r) == FERRY_OK) {
            lo = mid;
        } else {
            err_clear(); /* too large to count is as good as too large to fit */
            hi = mid - 1;
        }
    }
    if (st == FERRY_OK && lo >= 1 && out)
        st = auto_pick(&pm, rq, disk, device_budget, host_available, lo, out);
    model_close(&pm);
    if (st == FERRY_OK)
        *max_B = lo;
    return st;
}

/* ---- the layout ---- */

typedef struct layout_acc {
    engine_layout_entry *e;
    int n, cap;
    uint64_t at; /* the next activation's offset in the embedder's range */
    ferry_status st;
} layout_acc;

static void add_entry(layout_acc *l, const engine_layout_entry *x)
{
    if (l->st != FERRY_OK)
        return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 128;
        engine_layout_entry *grown = realloc(l->e, (size_t)cap * sizeof *grown);
        if (!grown) {
            l->st = err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2 plan layout: out of host memory");
            return;
        }
        l->e = grown;
        l->cap = cap;
    }
    l->e[l->n++] = *x;
}

static void add_activation(void *ctx, const char *what, size_t bytes)
{
    layout_acc *l = ctx;
    engine_layout_entry x = {.cat = FERRY_MEM_ACTIVATIONS, .offset = l->at, .bytes = arena_charge(bytes),
                             .start = 0, .end = INT32_MAX};
    snprintf(x.name, sizeof x.name, "%s", what);
    l->at += x.bytes;
    add_entry(l, &x);
}

ferry_status gpt2_plan_layout(const gpt2_plan_request *rq, const gpt2_plan_disk *disk, engine_layout_entry **out,
                              int *n, uint64_t *region)
{
    if (!out || !n || !region)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_plan_layout: NULL argument");
    *out = NULL;
    *n = 0;
    ferry_status st = check_request(rq, "gpt2_plan_layout");
    plan_model pm = {0};
    if (st == FERRY_OK)
        st = model_open(rq, &pm);
    engine_plan_request er;
    uint64_t acts;
    engine_layout_entry *eng = NULL;
    int ne = 0;
    if (st == FERRY_OK)
        st = engine_request(&pm, rq, disk, rq->batch, &er, &acts);
    if (st == FERRY_OK)
        st = engine_plan_layout(&er, &eng, &ne, region);
    layout_acc l = {NULL, 0, 0, 0, st};
    for (int i = 0; i < ne && l.st == FERRY_OK; i++) {
        if (!eng[i].embedder) {
            add_entry(&l, &eng[i]);
            continue;
        }
        /* The embedder's range: GPT-2's activations in the order it asks for them. */
        l.at = eng[i].offset;
        model_acts(&pm, er.dtype, rq->batch, rq->seq, rq->recompute, add_activation, &l);
    }
    free(eng);
    model_close(&pm);
    if (l.st != FERRY_OK) {
        free(l.e);
        return l.st;
    }
    *out = l.e;
    *n = l.n;
    return FERRY_OK;
}
