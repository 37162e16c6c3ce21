/* The engine setup that the tests training through the engine share: a
 * configuration from FERRY_ENGINE_CONFIG_INIT; a GPT-2 on an engine (its
 * groups from a seed, set up, activations from the engine's budget, the
 * engine's hooks and stream, a token buffer of one micro-batch);
 * micro-batches through it; its master weights read back; the bitwise
 * comparisons of two runs' losses and weights; the teardown. And an engine
 * of plain groups of seeded values, for the tests that fetch, write
 * gradients and release by hand. It holds no test's model, batches, steps
 * or optimizer settings, nor what a test expects: those stay in each test.
 * Header-only and plain C: the CUDA builds (tests/gpu, tests/cudasim)
 * include it too. */
#ifndef FERRY_TESTS_ENGINE_ENGINE_FIXTURE_H
#define FERRY_TESTS_ENGINE_ENGINE_FIXTURE_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "tap.h"

/* FERRY_ENGINE_CONFIG_INIT with the fields every test sets; threads 0 is
 * the default (every core of the node), dtype FERRY_DTYPE_AUTO the
 * backend's. The rest is the test's to set. */
static inline ferry_engine_config efix_config(ferry_backend_kind kind, ferry_offload mode, ferry_dtype dtype,
                                              int threads)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = kind;
    c.offload = mode;
    c.dtype = dtype;
    c.optimizer_threads = threads;
    return c;
}

/* FERRY_STEP_OPTIONS_INIT with a test's learning rate, weight decay and
 * clipping norm. */
static inline ferry_step_options efix_options(float lr, float weight_decay, float max_grad_norm)
{
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = lr;
    o.weight_decay = weight_decay;
    o.max_grad_norm = max_grad_norm;
    return o;
}

/* ---- a GPT-2 on an engine ---- */

typedef struct efix {
    gpt2_model *m;
    ferry_engine *e;
    gpt2_activations *act;
    gpt2_allocator alloc;
    gpt2_hooks hooks;  /* the engine's; a test may put a wrapper of them here */
    backend_stream *s; /* the engine's compute stream */
    int B, T;
    bool recompute;
    int32_t *tokens, *targets; /* B x T each */
} efix;

/* The device bytes of the activations of GPT-2 cfg at B x T in type t (0
 * when cfg makes no model): what a test declares to the engine's plan as
 * auto_activation_bytes. */
static inline uint64_t efix_acts_bytes(const gpt2_config *cfg, ferry_dtype t, int B, int T, bool recompute)
{
    gpt2_model *m = NULL;
    uint64_t bytes = gpt2_create(cfg, &m) == FERRY_OK ? gpt2_activations_bytes(m, t, B, T, recompute) : 0;
    gpt2_destroy(m);
    return bytes;
}

/* The first half of opening: the token buffers, the model from cfg, the
 * engine from ec, the groups initialised from seed, the setup. A test may
 * load a checkpoint or read the engine's choices before efix_acts. */
static inline ferry_status efix_engine(efix *f, const gpt2_config *cfg, const ferry_engine_config *ec, uint64_t seed,
                                       int B, int T, bool recompute)
{
    memset(f, 0, sizeof *f);
    f->B = B;
    f->T = T;
    f->recompute = recompute;
    f->tokens = malloc((size_t)B * T * sizeof *f->tokens);
    f->targets = malloc((size_t)B * T * sizeof *f->targets);
    ferry_status st = f->tokens && f->targets ? gpt2_create(cfg, &f->m)
                                              : err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory for tokens");
    if (st == FERRY_OK) st = ferry_engine_create(ec, &f->e);
    if (st == FERRY_OK) st = gpt2_engine_add_groups(f->m, f->e, seed, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(f->e);
    return st;
}

/* The second half: the activations for B x T from the engine's budget,
 * the engine's hooks and its compute stream. */
static inline ferry_status efix_acts(efix *f)
{
    f->alloc = gpt2_engine_allocator(f->e);
    f->hooks = gpt2_engine_hooks(f->e);
    f->s = engine_embed_stream(f->e);
    return gpt2_activations_create(f->m, engine_embed_backend(f->e), f->B, f->T, f->recompute, &f->alloc, &f->act);
}

/* Both halves. */
static inline ferry_status efix_start(efix *f, const gpt2_config *cfg, const ferry_engine_config *ec, uint64_t seed,
                                      int B, int T, bool recompute)
{
    ferry_status st = efix_engine(f, cfg, ec, seed, B, T, recompute);
    return st == FERRY_OK ? efix_acts(f) : st;
}

/* Waits for an engine that trained (set up, its activations made), then
 * frees all of it; f may be half open. An engine that did not get so far
 * is not waited for, so that the error it stopped with stays the last. */
static inline void efix_close(efix *f)
{
    if (f->e && f->act)
        ferry_engine_synchronize(f->e);
    gpt2_activations_destroy(f->act);
    ferry_engine_destroy(f->e);
    gpt2_destroy(f->m);
    free(f->tokens);
    free(f->targets);
    memset(f, 0, sizeof *f);
}

/* Micro-batch k of `count` on f->tokens and f->targets: the forward, the
 * backward scaled by grad_scale, and (loss not NULL) its mean loss. */
static inline ferry_status efix_micro_batch(efix *f, int k, int count, float grad_scale, float *loss)
{
    ferry_status st = ferry_engine_begin_micro_batch(f->e, k, count);
    if (st == FERRY_OK) st = gpt2_forward(f->m, f->act, &f->hooks, f->s, f->tokens, f->targets, true);
    if (st == FERRY_OK) st = gpt2_backward(f->m, f->act, &f->hooks, f->s, grad_scale);
    if (st == FERRY_OK && loss) st = gpt2_loss(f->act, f->s, loss);
    return st;
}

/* Fills tokens and targets (B x T each) with micro-batch `micro` of `step`. */
typedef void (*efix_tokens_fn)(int step, int micro, int32_t *tokens, int32_t *targets);

/* The `count` micro-batches of one step, micro-batch k on what
 * batch(step, first + k) gives, each backward scaled by grad_scale, until
 * one fails. losses[k] (when not NULL) gets micro-batch k's loss (0 for
 * those not run), *mean (when not NULL) their sum, added in order, over
 * count; with neither, the losses are not read. */
static inline ferry_status efix_micro_batches(efix *f, efix_tokens_fn batch, int step, int first, int count,
                                              float grad_scale, float *losses, float *mean)
{
    float sum = 0;
    ferry_status st = FERRY_OK;
    for (int k = 0; k < count; k++) {
        float loss = 0;
        if (st == FERRY_OK) {
            batch(step, first + k, f->tokens, f->targets);
            st = efix_micro_batch(f, k, count, grad_scale, losses || mean ? &loss : NULL);
            sum += loss;
        }
        if (losses)
            losses[k] = loss;
    }
    if (mean)
        *mean = sum / (float)count;
    return st;
}

/* Every group's fp32 master weights, concatenated: *out malloc'd (NULL
 * unless FERRY_OK), *n elements. */
static inline ferry_status efix_get_weights(efix *f, float **out, size_t *n)
{
    size_t total = 0;
    for (int g = 0; g < gpt2_num_groups(f->m); g++)
        total += gpt2_group_numel(f->m, g);
    *n = total;
    *out = malloc(total * sizeof **out);
    ferry_status st = *out ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "no host memory for the weights");
    size_t at = 0;
    for (int g = 0; g < gpt2_num_groups(f->m) && st == FERRY_OK; g++) {
        st = ferry_engine_get_weights(f->e, g, *out + at);
        at += gpt2_group_numel(f->m, g);
    }
    if (st != FERRY_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* The same, NULL on failure. */
static inline float *efix_weights(efix *f, size_t *n)
{
    float *w = NULL;
    return efix_get_weights(f, &w, n) == FERRY_OK ? w : NULL;
}

/* The engine's memory figures now (FERRY_MEMORY_STATS_INIT where it
 * cannot say). */
static inline ferry_memory_stats efix_memory(const efix *f)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(f->e, &ms);
    return ms;
}

/* The last step's timing and traffic (FERRY_STEP_TIMING_INIT where the
 * engine cannot say). */
static inline ferry_step_timing efix_timing(const efix *f)
{
    ferry_step_timing t = FERRY_STEP_TIMING_INIT;
    ferry_engine_step_timing(f->e, &t);
    return t;
}

/* ---- data parallelism ---- */

/* Joins the world and bails out unless it has min to max ranks; the ranks
 * but 0 write nothing to stdout (TAP comes from rank 0 alone). */
static inline ferry_world_info efix_join(int min, int max)
{
    ferry_world_info w = FERRY_WORLD_INFO_INIT;
    if (ferry_world_join(&w) != FERRY_OK) {
        printf("Bail out! joining the world: %s\n", ferry_last_error());
        exit(1);
    }
    if (w.world_size < min || w.world_size > max) {
        if (w.rank == 0)
            printf("Bail out! %d ranks; this test runs with %d to %d\n", w.world_size, min, max);
        exit(1);
    }
    if (w.rank != 0 && !freopen("/dev/null", "w", stdout))
        exit(1);
    return w;
}

/* Every rank's 0/1 summed on every rank: how many ranks saw `ok` (0 when
 * the sum itself fails). */
static inline int efix_ranks_ok(int ok)
{
    double v = ok ? 1 : 0;
    return ferry_world_all_reduce(&v, 1) == FERRY_OK ? (int)v : 0;
}

/* ---- two runs compared bit for bit ---- */

/* The first i in [from, n) where a[i] and b[i] differ in a bit; -1: none. */
static inline int efix_first_diff(const float *a, const float *b, int from, int n)
{
    for (int i = from; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return i;
    return -1;
}

/* One assertion: the losses a[from..n) are b's, bit for bit (fmt describes
 * it); the first that differs is shown. */
static inline int efix_same_losses(const float *a, const float *b, int from, int n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static inline int efix_same_losses(const float *a, const float *b, int from, int n, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int bad = efix_first_diff(a, b, from, n);
    if (!tap_ok(bad < 0, "%s", what)) {
        tap_diag("  step %d: %.9g vs %.9g", bad, (double)a[bad], (double)b[bad]);
        return 0;
    }
    return 1;
}

/* One assertion: both runs have weights, as many, and the same bits. */
static inline int efix_same_weights(const float *a, size_t na, const float *b, size_t nb, const char *what)
{
    size_t diff = 0, first = 0;
    for (size_t i = 0; a && b && i < na && i < nb; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && diff++ == 0)
            first = i;
    if (!tap_ok(a && b && na == nb && diff == 0, "%s: final weights bitwise equal (%zu of %zu differ)", what, diff,
                na)) {
        if (diff)
            tap_diag("  first at %zu: %.9g vs %.9g", first, (double)a[first], (double)b[first]);
        return 0;
    }
    return 1;
}

/* The largest relative difference |a[i] - b[i]| / |b[i]| over i < n, and
 * in *at (may be NULL) its index; a NaN counts as the largest. */
static inline double efix_worst_rel(const float *a, const float *b, int n, int *at)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fabs((double)b[i]);
        if (!(d <= worst)) {
            worst = d;
            if (at)
                *at = i;
        }
    }
    return worst;
}

/* Whether files a and b can be read and hold the same bytes. */
static inline bool efix_same_file(const char *a, const char *b)
{
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    bool same = x && y;
    while (same) {
        int cx = fgetc(x), cy = fgetc(y);
        same = cx == cy;
        if (cx == EOF)
            break;
    }
    if (x)
        fclose(x);
    if (y)
        fclose(y);
    return same;
}

/* ---- plain groups ---- */

/* An engine from cfg holding `groups` groups named "g", of numel[g] values
 * each, drawn in order from one generator seeded with seed, uniform in
 * [-0.5, 0.5); set up. NULL when any of it fails. */
static inline ferry_engine *efix_plain(const ferry_engine_config *cfg, int groups, const size_t *numel, uint64_t seed)
{
    ferry_engine *e = NULL;
    if (ferry_engine_create(cfg, &e) != FERRY_OK)
        return NULL;
    uint64_t rng = seed;
    ferry_status st = FERRY_OK;
    for (int g = 0; g < groups && st == FERRY_OK; g++) {
        float *w = malloc(numel[g] * sizeof(float));
        if (!w) {
            st = FERRY_ERR_OUT_OF_MEMORY;
            break;
        }
        for (size_t i = 0; i < numel[g]; i++)
            w[i] = (float)(tap_rand_unit(&rng) - 0.5);
        st = ferry_engine_add_group(e, "g", numel[g], w, NULL, NULL);
        free(w);
    }
    if (st == FERRY_OK)
        st = ferry_engine_setup(e);
    if (st != FERRY_OK) {
        ferry_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* The master weights of the plain groups, concatenated (malloc'd). */
static inline float *efix_plain_weights(ferry_engine *e, int groups, const size_t *numel)
{
    size_t total = 0;
    for (int g = 0; g < groups; g++)
        total += numel[g];
    float *all = malloc(total * sizeof(float)), *at = all;
    for (int g = 0; all && g < groups; g++) {
        ferry_engine_get_weights(e, g, at);
        at += numel[g];
    }
    return all;
}

#endif
