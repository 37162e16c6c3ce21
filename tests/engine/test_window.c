/* The upload window (engine config upload_window): over the split fixture's
 * steps (four groups, the largest 200001 elements, micro-batches, clipping,
 * weight decay with exempt parts), window on and off give bitwise the same
 * losses (a sum over the weights each forward read), master weights and
 * device weights, in optimizer and params mode, with f32, bf16 and 8bit
 * moments, in fp32 and bf16 storage, through rings of 4 and 2 small chunks
 * (the largest group passes through them many times) and of one chunk, and
 * with the delayed update; the
 * device weights are the scalar round-to-nearest-even conversion of the
 * master weights; the host pool holds the ring (by hand) instead of the
 * upload copies, and exactly what the plan counts, both ways; the default
 * policy; a GPT-2 trained through the engine the same losses and weights
 * with the window as without; bad values and the places the window cannot serve are refused
 * with a sentence; an older config without the fields gets the default. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/layout.h"
#include "engine/split_fixture.h"
#include "offload/pool.h"

enum { RING_CHUNKS = 4, RING_CHUNK_BYTES = 4096, ONE_CHUNK_BYTES = 1024 };

typedef struct run_cfg {
    ferry_dtype dtype;
    ferry_offload mode;
    ferry_moments form;
    int window, chunks;
    uint64_t chunk_bytes;
} run_cfg;

static bool delayed_case; /* the cases run with the delayed update */

static ferry_engine_config config_of(const run_cfg *r)
{
    ferry_engine_config cfg = config_on(FERRY_BACKEND_HOST, r->dtype, 0);
    cfg.offload = r->mode;
    cfg.moments = r->form;
    cfg.moments_seed = 5;
    cfg.upload_window = r->window;
    cfg.upload_window_chunks = r->chunks;
    cfg.upload_window_chunk_bytes = r->chunk_bytes;
    cfg.delayed_update = delayed_case;
    return cfg;
}

/* The weights a fetch hands out, read through the engine's stream. */
static ferry_status read_weights(ferry_engine *e, int g, const void *w, float *out)
{
    backend_stream *q = engine_embed_stream(e);
    ferry_dtype t = ferry_engine_dtype(e);
    size_t bytes = numel[g] * dtype_size(t);
    char *h = malloc(bytes);
    ferry_status st = h ? backend_memcpy_async(q, h, w, bytes, BACKEND_COPY_D2H) : FERRY_ERR_OUT_OF_MEMORY;
    if (st == FERRY_OK)
        st = backend_stream_synchronize(q);
    for (size_t i = 0; i < numel[g] && st == FERRY_OK; i++)
        out[i] = dtype_load_f32(h, t, i);
    free(h);
    return st;
}

/* One forward over the groups: the loss 1/2 sum (w - sin i)^2 of what it
 * read, and the weights themselves when `weights` is not NULL. */
static ferry_status forward(ferry_engine *e, double *loss, float *weights[GROUPS])
{
    ferry_status st = FERRY_OK;
    *loss = 0;
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++) {
        void *w;
        float *v = malloc(numel[g] * sizeof *v);
        if ((st = ferry_engine_fetch(e, g, FERRY_PHASE_FORWARD, &w)) == FERRY_OK)
            st = read_weights(e, g, w, v);
        for (size_t i = 0; i < numel[g] && st == FERRY_OK; i++)
            *loss += 0.5 * ((double)v[i] - sin((double)i)) * ((double)v[i] - sin((double)i));
        if (st == FERRY_OK)
            st = ferry_engine_release(e, g, FERRY_PHASE_FORWARD);
        if (weights && st == FERRY_OK)
            memcpy(weights[g], v, numel[g] * sizeof *v);
        free(v);
    }
    return st;
}

typedef struct run_result {
    ferry_status st;
    double loss[STEPS];
    float *master[GROUPS], *device[GROUPS];
    uint64_t host_in_use, staging;
    bool window;
} run_result;

/* STEPS steps, the loss of each step's weights read before its training
 * micro-batches; then the master weights and what a forward reads. */
static run_result run(const run_cfg *r)
{
    run_result out = {.st = FERRY_ERR_STATE};
    for (int g = 0; g < GROUPS; g++) {
        out.master[g] = calloc(numel[g], sizeof(float));
        out.device[g] = calloc(numel[g], sizeof(float));
    }
    ferry_engine_config cfg = config_of(r);
    ferry_engine *e = make_cfg(&cfg);
    if (!e)
        return out;
    out.window = e->ctx.window != NULL;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(e, &ms);
    out.host_in_use = ms.host_in_use_bytes;
    out.staging = pool_category_bytes(e->ctx.pool, FERRY_MEM_STAGING);
    ferry_status st = FERRY_OK;
    for (int s = 0; s < STEPS && st == FERRY_OK; s++) {
        if ((st = ferry_engine_begin_inference(e)) == FERRY_OK && (st = forward(e, &out.loss[s], NULL)) == FERRY_OK)
            st = ferry_engine_end_inference(e);
        if (st == FERRY_OK)
            st = train(e, s, s + 1);
    }
    double last;
    if (st == FERRY_OK && (st = ferry_engine_begin_inference(e)) == FERRY_OK &&
        (st = forward(e, &last, out.device)) == FERRY_OK)
        st = ferry_engine_end_inference(e);
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++)
        st = ferry_engine_get_weights(e, g, out.master[g]);
    if (st != FERRY_OK)
        tap_diag("run: %s", ferry_last_error());
    out.st = st;
    ferry_engine_destroy(e);
    return out;
}

static void result_free(run_result *x)
{
    for (int g = 0; g < GROUPS; g++)
        free(x->master[g]), free(x->device[g]);
}

/* The device weights are the master weights rounded to the device type
 * by the scalar conversion (round to nearest, ties to even). */
static size_t rounding_misses(const run_result *x, ferry_dtype t)
{
    size_t bad = 0;
    for (int g = 0; g < GROUPS; g++)
        for (size_t i = 0; i < numel[g]; i++) {
            float m = x->master[g][i], want = t == FERRY_DTYPE_BF16 ? dtype_round_bf16(m) : m;
            bad += memcmp(&want, &x->device[g][i], sizeof want) != 0;
        }
    return bad;
}

static size_t state_diffs(const run_result *a, const run_result *b)
{
    size_t bad = memcmp(a->loss, b->loss, sizeof a->loss) != 0;
    for (int g = 0; g < GROUPS; g++)
        bad += memcmp(a->master[g], b->master[g], numel[g] * 4) != 0 ||
               memcmp(a->device[g], b->device[g], numel[g] * 4) != 0;
    return bad;
}

static size_t largest(void)
{
    size_t n = 0;
    for (int g = 0; g < GROUPS; g++)
        n = numel[g] > n ? numel[g] : n;
    return n;
}

/* The host pool by the plan, for this run's config. */
static uint64_t planned_host(const run_cfg *r, uint64_t *staging)
{
    size_t n[GROUPS];
    memcpy(n, numel, sizeof n);
    engine_plan_request rq = {.backend = FERRY_BACKEND_HOST, .dtype = r->dtype, .offload = r->mode,
                              .prefetch_groups = 2, .micro_batches = 1, .group_numel = n, .ngroups = GROUPS,
                              .moments = r->form, .upload_window = r->window, .upload_window_chunks = r->chunks,
                              .upload_window_chunk_bytes = r->chunk_bytes};
    engine_memory_plan plan;
    if (engine_plan_memory(&rq, &plan) != FERRY_OK) {
        tap_diag("plan: %s", ferry_last_error());
        return 0;
    }
    uint64_t total = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        total += plan.host_bytes[c];
    *staging = plan.host_bytes[FERRY_MEM_STAGING];
    return total;
}

static void test_case(ferry_dtype dtype, ferry_offload mode, ferry_moments form, int chunks, uint64_t chunk_bytes)
{
    char name[96];
    snprintf(name, sizeof name, "%s storage, offload %s%s, moments %s, ring %d x %llu B", dtype_name(dtype),
             ferry_offload_name(mode), delayed_case ? " (delayed update)" : "", ferry_moments_name(form), chunks,
             (unsigned long long)chunk_bytes);
    run_cfg off = {dtype, mode, form, FERRY_UPLOAD_WINDOW_OFF, 0, 0};
    run_cfg on = {dtype, mode, form, FERRY_UPLOAD_WINDOW_ON, chunks, chunk_bytes};
    run_result a = run(&off), b = run(&on);
    tap_ok(a.st == FERRY_OK && b.st == FERRY_OK && !a.window && b.window, "%s: both run, the window off and on",
           name);
    size_t diffs = state_diffs(&a, &b);
    tap_ok(a.st == FERRY_OK && b.st == FERRY_OK && diffs == 0,
           "%s: losses (last %.17g and %.17g), master and device weights bitwise alike (%zu differ)", name,
           a.loss[STEPS - 1], b.loss[STEPS - 1], diffs);
    size_t miss = rounding_misses(&b, dtype);
    if (!delayed_case) /* there the device holds the weights of the update before */
        tap_ok(b.st == FERRY_OK && miss == 0,
               "%s: the device weights are the master's rounded to nearest even (%zu not)", name, miss);
    /* the pool: the ring (by hand) instead of the upload copies, as planned */
    size_t act = dtype_size(dtype), per = chunk_bytes / act, big = largest();
    per = per > big ? big : per;
    size_t count = (big + per - 1) / per < (size_t)chunks ? (big + per - 1) / per : (size_t)chunks;
    uint64_t copies = 0;
    for (int g = 0; g < GROUPS; g++)
        copies += pool_charge(numel[g] * act);
    uint64_t ps_off, ps_on, plan_off = planned_host(&off, &ps_off), plan_on = planned_host(&on, &ps_on);
    uint64_t ring = pool_charge(per * act * count);
    tap_ok(ps_on == ring && ps_off == copies && plan_off - plan_on == copies - ring,
           "%s: the plan's staging %llu B with the window (by hand %llu: %zu chunks of %zu elements), %llu without "
           "(by hand %llu)",
           name, (unsigned long long)ps_on, (unsigned long long)ring, count, per, (unsigned long long)ps_off,
           (unsigned long long)copies);
    tap_ok(a.host_in_use == plan_off && b.host_in_use == plan_on && b.staging == ring,
           "%s: the engine's host pool is the plan's: %llu = %llu off, %llu = %llu on", name,
           (unsigned long long)a.host_in_use, (unsigned long long)plan_off, (unsigned long long)b.host_in_use,
           (unsigned long long)plan_on);
    result_free(&a), result_free(&b);
}

/* The default: off with f32 moments (the upload copies held), on with
 * compact ones at the default shape (one chunk: the largest group is
 * smaller than 16 MiB). */
static void test_default(void)
{
    for (int form = FERRY_MOMENTS_F32; form <= FERRY_MOMENTS_8BIT; form++) {
        run_cfg r = {FERRY_DTYPE_BF16, FERRY_OFFLOAD_OPTIMIZER, (ferry_moments)form, FERRY_UPLOAD_WINDOW_AUTO, 0, 0};
        ferry_engine_config cfg = config_of(&r);
        ferry_engine *e = make_cfg(&cfg);
        bool want = form != FERRY_MOMENTS_F32;
        bool held = e && e->groups.g[3].host_weights != NULL;
        tap_ok(e && (e->ctx.window != NULL) == want && held == !want &&
                   (!want || (engine_window_chunks(e->ctx.window) == 1 &&
                              engine_window_bytes(e->ctx.window) == largest() * 2)),
               "default with moments %s: the window %s (a ring of %d chunk of %zu B), upload copies %s",
               ferry_moments_name((ferry_moments)form), want ? "on" : "off",
               e && e->ctx.window ? engine_window_chunks(e->ctx.window) : 0,
               e && e->ctx.window ? engine_window_bytes(e->ctx.window) : 0, held ? "held" : "not held");
        ferry_engine_destroy(e);
    }
    /* an older config, ending at moments_seed: the fields after it unread, the default */
    run_cfg r = {FERRY_DTYPE_BF16, FERRY_OFFLOAD_OPTIMIZER, FERRY_MOMENTS_8BIT, 77, -5, 3};
    ferry_engine_config cfg = config_of(&r);
    cfg.size = offsetof(ferry_engine_config, moments_seed) + sizeof(uint64_t);
    ferry_engine *e = make_cfg(&cfg);
    tap_ok(e && e->ctx.window && engine_window_chunks(e->ctx.window) == 1,
           "a config ending at moments_seed gets the default window (its garbage tail unread)");
    ferry_engine_destroy(e);
}

/* A GPT-2 trained through the engine (its drains, fetches and updates
 * overlapping as in training): window on and off the same losses and
 * master weights, bitwise. */
enum { GPT_STEPS = 4, GPT_B = 2, GPT_T = 16 };

/* The same tokens every step, so the loss falls as it learns them. */
static void gpt_tokens(int step, int micro, int32_t *tokens, int32_t *targets)
{
    (void)step;
    for (int i = 0; i < GPT_B * GPT_T; i++) {
        tokens[i] = (int32_t)((i * 7 + micro * 5) % 97);
        targets[i] = (int32_t)((i * 11 + micro * 3 + 1) % 97);
    }
}

static ferry_status gpt_run(ferry_offload mode, ferry_moments form, int window, float loss[GPT_STEPS], float **w,
                            size_t *n)
{
    gpt2_config cfg;
    gpt2_config_from_fields(3, 2, 32, 97, 128, 32, &cfg);
    ferry_engine_config ec = efix_config(FERRY_BACKEND_HOST, mode, FERRY_DTYPE_BF16, 2);
    ec.moments = form;
    ec.upload_window = window;
    ec.upload_window_chunks = 3;
    ec.upload_window_chunk_bytes = 2048; /* the embedding (128 x 32 + 32 x 32) through it several times */
    ec.auto_activation_bytes = efix_acts_bytes(&cfg, FERRY_DTYPE_BF16, GPT_B, GPT_T, false);
    efix f;
    ferry_status st = efix_start(&f, &cfg, &ec, 99, GPT_B, GPT_T, false);
    ferry_step_options o = efix_options(1e-2f, 0.01f, 1.0f);
    for (int s = 0; s < GPT_STEPS && st == FERRY_OK; s++) {
        st = efix_micro_batches(&f, gpt_tokens, s, 0, 2, 0.5f, NULL, &loss[s]);
        if (st == FERRY_OK)
            st = ferry_engine_step(f.e, &o, NULL);
    }
    if (st == FERRY_OK && (f.e->ctx.window != NULL) != (window == FERRY_UPLOAD_WINDOW_ON))
        st = err_set(FERRY_ERR_STATE, "the window is %s", f.e->ctx.window ? "on" : "off");
    if (st == FERRY_OK)
        st = efix_get_weights(&f, w, n);
    if (st != FERRY_OK)
        tap_diag("gpt2 run: %s", ferry_last_error());
    efix_close(&f);
    return st;
}

static void test_gpt2(ferry_offload mode, ferry_moments form)
{
    float la[GPT_STEPS], lb[GPT_STEPS], *wa = NULL, *wb = NULL;
    size_t na = 0, nb = 0;
    ferry_status sa = gpt_run(mode, form, FERRY_UPLOAD_WINDOW_OFF, la, &wa, &na);
    ferry_status sb = gpt_run(mode, form, FERRY_UPLOAD_WINDOW_ON, lb, &wb, &nb);
    bool same = sa == FERRY_OK && sb == FERRY_OK && !memcmp(la, lb, sizeof la) && na == nb && na > 0 &&
                !memcmp(wa, wb, na * sizeof *wa);
    tap_ok(same && la[GPT_STEPS - 1] < la[0],
           "gpt2, offload %s, moments %s: window on and off the same losses (%.7g -> %.7g, %.7g -> %.7g) and "
           "%zu master weights, bitwise",
           ferry_offload_name(mode), ferry_moments_name(form), (double)la[0], (double)la[GPT_STEPS - 1],
           (double)lb[0], (double)lb[GPT_STEPS - 1], na);
    free(wa), free(wb);
}

static void test_refusals(void)
{
    static const char *what[] = {"upload_window 2", "upload_window_chunks -1", "upload_window_chunks 65",
                                 "upload_window_chunk_bytes 100", "upload_window_chunk_bytes 2 GiB",
                                 "on with offload none", "on with the NVMe tier"};
    for (int k = 0; k < 7; k++) {
        run_cfg r = {FERRY_DTYPE_F32, FERRY_OFFLOAD_OPTIMIZER, FERRY_MOMENTS_F32, FERRY_UPLOAD_WINDOW_ON, 0, 0};
        ferry_engine_config cfg = config_of(&r);
        if (k == 0) cfg.upload_window = 2;
        if (k == 1) cfg.upload_window_chunks = -1;
        if (k == 2) cfg.upload_window_chunks = 65;
        if (k == 3) cfg.upload_window_chunk_bytes = 100;
        if (k == 4) cfg.upload_window_chunk_bytes = (uint64_t)2 << 30;
        if (k == 5) cfg.offload = FERRY_OFFLOAD_NONE;
        if (k == 6) cfg.offload = FERRY_OFFLOAD_NVME, cfg.nvme_path = "/tmp";
        ferry_engine *e = NULL;
        err_clear();
        ferry_status st = ferry_engine_create(&cfg, &e);
        if (st == FERRY_OK && (st = add_groups(e)) == FERRY_OK)
            st = ferry_engine_setup(e);
        const char *msg = ferry_last_error();
        tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(msg, "upload_window"), "%s refused: %s", what[k], msg);
        ferry_engine_destroy(e);
    }
}

int main(void)
{
    static const ferry_offload modes[] = {FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS};
    for (int m = 0; m < 2; m++)
        for (int form = FERRY_MOMENTS_F32; form <= FERRY_MOMENTS_8BIT; form++)
            test_case(FERRY_DTYPE_BF16, modes[m], (ferry_moments)form, RING_CHUNKS, RING_CHUNK_BYTES);
    for (int m = 0; m < 2; m++)
        test_case(FERRY_DTYPE_BF16, modes[m], FERRY_MOMENTS_8BIT, 1, ONE_CHUNK_BYTES);
    test_case(FERRY_DTYPE_BF16, FERRY_OFFLOAD_PARAMS, FERRY_MOMENTS_BF16, 2, ONE_CHUNK_BYTES);
    test_case(FERRY_DTYPE_F32, FERRY_OFFLOAD_OPTIMIZER, FERRY_MOMENTS_BF16, 1, ONE_CHUNK_BYTES);
    test_case(FERRY_DTYPE_F32, FERRY_OFFLOAD_PARAMS, FERRY_MOMENTS_F32, RING_CHUNKS, RING_CHUNK_BYTES);
    delayed_case = true; /* its uploads wait for the next step's backward */
    test_case(FERRY_DTYPE_BF16, FERRY_OFFLOAD_OPTIMIZER, FERRY_MOMENTS_8BIT, RING_CHUNKS, RING_CHUNK_BYTES);
    delayed_case = false;
    for (int m = 0; m < 2; m++)
        test_gpt2(modes[m], FERRY_MOMENTS_8BIT);
    test_gpt2(FERRY_OFFLOAD_PARAMS, FERRY_MOMENTS_F32);
    test_default();
    test_refusals();
    return tap_done();
}
