/* memprof's planner: the peak memory of GPT-2 training through the engine,
 * computed from the same sizes the engine and the model allocate (see
 * plan.h). It owns only arithmetic; when placement.c, schedule.c or
 * gpt2.c's activation plan change, this file changes with them, and
 * tests/offload/test_memplan.c catches a drift by training for real. */
#include "tools/memprof/plan.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"

/* models/gpt2.c: the classifier's scratch holds this many bytes of logits. */
#define PLAN_CLASSIFIER_SCRATCH_BYTES (32u << 20)
/* kernels/adamw_device.cu: SUMSQ_BLOCKS doubles (offload none on cuda). */
#define PLAN_CUDA_SUMSQ_SCRATCH_BYTES (512u * 8u)
#define PLAN_MAX_BATCH 65536

static uint64_t round_up(uint64_t bytes, uint64_t granule)
{
    if (bytes == 0)
        bytes = 1; /* both allocators hand out one granule for 0 bytes */
    return (bytes + granule - 1) / granule * granule;
}

static uint64_t dev(uint64_t bytes) { return round_up(bytes, MEMPLAN_ARENA_GRANULE); }
static uint64_t host(uint64_t bytes) { return round_up(bytes, MEMPLAN_POOL_GRANULE); }

/* The model's group sizes, from the model's own layout. */
typedef struct plan_model {
    gpt2_config cfg;
    int ngroups;
    uint64_t *numel;
    uint64_t num_params;
} plan_model;

static ferry_status model_open(const gpt2_config *cfg, plan_model *pm)
{
    memset(pm, 0, sizeof *pm);
    if (!cfg)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "memplan: the model configuration is NULL");
    gpt2_model *m = NULL;
    ferry_status st = gpt2_create(cfg, &m);
    if (st != FERRY_OK)
        return err_wrap(st, "memplan: model");
    pm->cfg = *cfg;
    pm->ngroups = gpt2_num_groups(m);
    pm->numel = calloc((size_t)pm->ngroups, sizeof *pm->numel);
    if (!pm->numel) {
        gpt2_destroy(m);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memplan: out of host memory");
    }
    for (int g = 0; g < pm->ngroups; g++)
        pm->numel[g] = gpt2_group_numel(m, g);
    pm->num_params = gpt2_num_params(m);
    gpt2_destroy(m);
    return FERRY_OK;
}

static void model_close(plan_model *pm)
{
    free(pm->numel);
    pm->numel = NULL;
}

static int act_size_of(ferry_backend_kind backend) { return backend == FERRY_BACKEND_CUDA ? 2 : 4; }

static ferry_status check_args(const gpt2_config *cfg, int B, int T, ferry_offload mode, int prefetch,
                               ferry_backend_kind backend)
{
    if (B < 1 || T < 1 || T > cfg->max_seq_len)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "memplan: batch %d x sequence %d; need batch >= 1 and 1 <= sequence <= the "
                       "model's context (%d)",
                       B, T, cfg->max_seq_len);
    if ((int64_t)B * T > INT32_MAX)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "memplan: batch x sequence = %lld tokens is more than one micro-batch can hold "
                       "(2^31 - 1)",
                       (long long)B * T);
    if (mode < FERRY_OFFLOAD_NONE || mode > FERRY_OFFLOAD_PARAMS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "memplan: offload %d is not none, optimizer or params",
                       (int)mode);
    if (prefetch < 0 || prefetch > 64)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "memplan: prefetch %d is outside 0..64", prefetch);
    if (backend != FERRY_BACKEND_HOST && backend != FERRY_BACKEND_CUDA)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "memplan: backend %d; plan for host (fp32) or cuda (bf16)", (int)backend);
    return FERRY_OK;
}

/* One block's saved activations, as models/gpt2.c plan_block() takes them. */
static uint64_t block_bytes(uint64_t N, uint64_t C, uint64_t NH, uint64_t B, uint64_t T, uint64_t es)
{
    return 4 * dev(N * C * es)        /* ln1, attention out, residual 2, ln2 */
           + 4 * dev(N * 4)           /* ln1 and ln2 mean and rstd */
           + dev(N * 3 * C * es)      /* qkv */
           + dev(B * NH * T * 4)      /* attention lse */
           + 2 * dev(N * 4 * C * es); /* mlp fc, gelu */
}

/* models/gpt2.c classifier_chunk(): rows of logits per classifier pass. */
static uint64_t classifier_scratch(uint64_t N, uint64_t Vp, uint64_t scratch_es)
{
    uint64_t rows = PLAN_CLASSIFIER_SCRATCH_BYTES / (Vp * scratch_es);
    if (rows < 1)
        rows = 1;
    uint64_t chunk = rows < N ? rows : N;
    return dev(chunk * Vp * scratch_es);
}

static uint64_t activations(const gpt2_config *c, int B, int T, bool recompute, ferry_backend_kind backend)
{
    uint64_t N = (uint64_t)B * (uint64_t)T, C = (uint64_t)c->n_embd, es = (uint64_t)act_size_of(backend);
    uint64_t L = (uint64_t)c->n_layer, V = (uint64_t)c->vocab_size, Vp = (uint64_t)c->padded_vocab_size;
    uint64_t nc = dev(N * C * es), n4 = dev(N * 4), big = dev(N * 4 * C * es);
    uint64_t total = (L + 1) * nc; /* the residual stream: each block's input, and the last output */
    total += (recompute ? 1 : L) * block_bytes(N, C, (uint64_t)c->n_head, (uint64_t)B, (uint64_t)T, es);
    total += 2 * nc + 5 * n4; /* projection, final ln; its mean, rstd; losses, tokens, targets */
    /* the classifier's scratch is fp32 on the host backend, bf16 on cuda: es either way */
    total += classifier_scratch(N, Vp, es);
    total += dev(V * es) + dev(V * 4); /* sampling logits, and as fp32 */
    total += 2 * nc + 2 * big;         /* backward: residual gradient, scratch 3; scratch 1, 2 */
    return total;
}

uint64_t memplan_activation_bytes(const gpt2_config *cfg, int B, int T, bool recompute,
                                  ferry_backend_kind backend)
{
    if (!cfg || gpt2_config_validate(cfg) != FERRY_OK ||
        check_args(cfg, B, T, FERRY_OFFLOAD_NONE, 0, backend) != FERRY_OK) {
        err_clear();
        return 0;
    }
    return activations(cfg, B, T, recompute, backend);
}

/* Sum of the `count` largest groups other than group 0, each as f(numel). */
static uint64_t largest_others(const plan_model *pm, int count, uint64_t each_bytes_per_elem)
{
    int n = pm->ngroups - 1;
    uint64_t *sizes = malloc((size_t)n * sizeof *sizes);
    if (!sizes)
        return UINT64_MAX;
    for (int i = 0; i < n; i++)
        sizes[i] = dev(pm->numel[i + 1] * each_bytes_per_elem);
    uint64_t sum = 0;
    for (int k = 0; k < count && k < n; k++) { /* count is small: selection, not a sort */
        int best = k;
        for (int i = k + 1; i < n; i++)
            if (sizes[i] > sizes[best])
                best = i;
        uint64_t t = sizes[k];
        sizes[k] = sizes[best];
        sizes[best] = t;
        sum += sizes[k];
    }
    free(sizes);
    return sum;
}

/* engine/placement.c: what setup places, per mode (the host pool, and the
 * device state of modes none and optimizer). */
static void place_static(const plan_model *pm, ferry_offload mode, ferry_backend_kind backend, memplan_result *r)
{
    uint64_t es = (uint64_t)r->act_size;
    uint64_t *d = r->device_bytes, *h = r->host_bytes;
    for (int g = 0; g < pm->ngroups; g++) {
        uint64_t n = pm->numel[g];
        if (mode == FERRY_OFFLOAD_NONE) {
            d[FERRY_MEM_PARAMS] += dev(n * es) + dev(n * 4); /* weights, fp32 master */
            d[FERRY_MEM_GRADS] += dev(n * es);
            d[FERRY_MEM_OPTIMIZER] += 2 * dev(n * 4); /* Adam m, v */
            continue;
        }
        h[FERRY_MEM_PARAMS] += host(n * 4);
        h[FERRY_MEM_OPTIMIZER] += 2 * host(n * 4);
        h[FERRY_MEM_GRADS] += host(n * es);   /* drained gradients */
        h[FERRY_MEM_STAGING] += host(n * es); /* the upload copy of the weights */
        if (mode == FERRY_OFFLOAD_OPTIMIZER) {
            d[FERRY_MEM_PARAMS] += dev(n * es);
            d[FERRY_MEM_GRADS] += dev(n * es);
        }
    }
    if (mode == FERRY_OFFLOAD_NONE)
        d[FERRY_MEM_WORKSPACE] += dev((uint64_t)pm->ngroups * 8) + dev(ops_sumsq_scratch_bytes());
    if (ops_workspace_bytes(backend))
        d[FERRY_MEM_WORKSPACE] += dev(ops_workspace_bytes(backend));
    r->device_weight_groups = mode == FERRY_OFFLOAD_PARAMS ? 0 : pm->ngroups;
    r->device_grad_groups = r->device_weight_groups;
}

/* engine/schedule.c, params mode. Weights: group 0 (held through forward
 * and backward) and prefetch + 1 others, the window eviction enforces.
 * Gradients: group 0's and prefetch + 2 others. The host thread only waits
 * for the compute stream when it evicts a group's weights, and at the end of
 * backward (groups prefetch + 1 .. 1, already fetched) it evicts nothing, so
 * it asks for the gradients of group 1 while groups 1 .. prefetch + 2 may
 * still be in backward or draining; those buffers stay until the next
 * backward collects them, so the next forward's window adds to them. Taken
 * as the largest of the other groups, an upper bound when each drain ends
 * before the next group's backward does. */
static ferry_status place_window(const plan_model *pm, int prefetch, memplan_result *r)
{
    uint64_t es = (uint64_t)r->act_size;
    int others = pm->ngroups - 1;
    int w = prefetch + 1 < others ? prefetch + 1 : others;
    int gr = prefetch + 2 < others ? prefetch + 2 : others;
    uint64_t g0 = dev(pm->numel[0] * es);
    uint64_t wb = largest_others(pm, w, es), gb = largest_others(pm, gr, es);
    uint64_t one = largest_others(pm, 1, es);
    if (wb == UINT64_MAX || gb == UINT64_MAX || one == UINT64_MAX)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memplan: out of host memory");
    r->device_bytes[FERRY_MEM_PARAMS] = g0 + wb;
    r->device_bytes[FERRY_MEM_GRADS] = g0 + gb;
    r->device_weight_groups = 1 + w;
    r->device_grad_groups = 1 + gr;
    /* The floor: schedule.c's out-of-memory paths (no prefetch, every drain
     * waited for, every other group evicted) still need group 0 and the
     * group in backward, weights and gradients each. */
    r->device_min_bytes = r->activations + 2 * (g0 + one);
    return FERRY_OK;
}

static void sum_up(memplan_result *r)
{
    r->device_total = r->host_total = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++) {
        r->device_total += r->device_bytes[c];
        r->host_total += r->host_bytes[c];
    }
}

static ferry_status predict(const plan_model *pm, int B, int T, ferry_offload mode, bool recompute, int prefetch,
                            ferry_backend_kind backend, memplan_result *out)
{
    ferry_status st = check_args(&pm->cfg, B, T, mode, prefetch, backend);
    if (st != FERRY_OK)
        return st;
    memplan_result r;
    memset(&r, 0, sizeof r);
    r.groups = pm->ngroups;
    r.num_params = pm->num_params;
    for (int g = 0; g < pm->ngroups; g++)
        r.group_elems += pm->numel[g];
    r.act_size = act_size_of(backend);
    r.activations = activations(&pm->cfg, B, T, recompute, backend);
    r.device_bytes[FERRY_MEM_ACTIVATIONS] = r.activations;
    place_static(pm, mode, backend, &r);
    if (mode == FERRY_OFFLOAD_PARAMS && (st = place_window(pm, prefetch, &r)) != FERRY_OK)
        return st;
    sum_up(&r);
    if (mode != FERRY_OFFLOAD_PARAMS)
        r.device_min_bytes = r.device_total;
    *out = r;
    return FERRY_OK;
}

ferry_status memplan_predict(const gpt2_config *cfg, int B, int T, ferry_offload mode, bool recompute,
                             int prefetch_groups, ferry_backend_kind backend, memplan_result *out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "memplan_predict: out is NULL");
    plan_model pm;
    ferry_status st = model_open(cfg, &pm);
    if (st == FERRY_OK)
        st = predict(&pm, B, T, mode, recompute, prefetch_groups, backend, out);
    model_close(&pm);
    return st;
}

ferry_status memplan_max_batch(const gpt2_config *cfg, int T, ferry_offload mode, bool recompute,
                               int prefetch_groups, ferry_backend_kind backend, uint64_t device_budget,
                               int *max_B)
{
    if (!max_B)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "memplan_max_batch: max_B is NULL");
    *max_B = 0;
    plan_model pm;
    ferry_status st = model_open(cfg, &pm);
    memplan_result r;
    if (st == FERRY_OK)
        st = predict(&pm, 1, T, mode, recompute, prefetch_groups, backend, &r);
    /* The peak grows with B (every activation is B x T x something), so bisect
     * on the largest B that fits; B beyond 2^31 / T is not a micro-batch. */
    int lo = 0, hi = PLAN_MAX_BATCH;
    if (T > 0 && hi > INT32_MAX / T)
        hi = INT32_MAX / T;
    if (st == FERRY_OK && r.device_total <= device_budget) {
        lo = 1;
        while (lo < hi) {
            int mid = lo + (hi - lo + 1) / 2;
            if ((st = predict(&pm, mid, T, mode, recompute, prefetch_groups, backend, &r)) != FERRY_OK)
                break;
            if (r.device_total <= device_budget)
                lo = mid;
            else
                hi = mid - 1;
        }
    }
    model_close(&pm);
    if (st == FERRY_OK)
        *max_B = lo;
    return st;
}
