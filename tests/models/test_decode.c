/* Generation with the key/value cache (models/lmodel_decode.h) against the
 * full recompute (lmodel_forward + lmodel_logits over the whole sequence)
 * on the host backend, for the Llama family (grouped-query heads, tied and
 * untied heads, q/k/v biases) and GPT-2: greedy tokens equal token for
 * token and logits within a tight tolerance at every step, over a prompt
 * prefilled in several chunks and two batch rows of different prompts;
 * then the cache's refusals (a full cache, a prompt longer than it, a
 * step before any prompt, a cache past the model's context); and through
 * the engine's hooks in offload none, optimizer and params, the same
 * tokens and logits as resident weights.
 * Usage: test_decode [cuda]: with `cuda`, the families' comparisons on the
 * cuda backend in bf16 (the recompute's flash attention against the
 * cache's kernels, both rounding to bf16): logits within 1e-1 of their
 * largest and greedy tokens equal at all but 4 of the 34 steps (a position
 * or a head out of place misses by more than 1 at most steps); exit 77
 * without a usable device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "common/error.h"
#include "models/lmodel_decode.h"
#include "models/model_engine.h"
#include "model_fixture.h"

enum { B = 2, P = 7, N_NEW = 17, TMAX = P + N_NEW };

static ferry_backend_kind kind = FERRY_BACKEND_HOST;
static ferry_dtype act = FERRY_DTYPE_AUTO;

/* The spec's model with its seeded init scaled by `gain` (larger weights
 * than the init's 0.02 make the logits spread, so greedy picks are not
 * near ties). */
static ferry_status fixture_open(lfix *f, const model_spec *spec, float gain)
{
    return lfix_open(f, kind, act, spec, "decode test", 1234, gain);
}

static int argmax(const float *l, int V)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

/* Greedy generation both ways, compared step by step. */
static void check_family(const char *name, const model_spec *spec)
{
    lfix f;
    ferry_status st = fixture_open(&f, spec, 4.0f);
    if (kind == FERRY_BACKEND_CUDA && st == FERRY_ERR_UNSUPPORTED) {
        tap_diag("cuda: %s", ferry_last_error());
        lfix_close(&f);
        tap_plan_skip("no usable CUDA device");
    }
    if (!tap_ok(st == FERRY_OK, "%s: model on the %s backend", name, kind == FERRY_BACKEND_CUDA ? "cuda" : "host")) {
        tap_diag("%s", ferry_last_error());
        lfix_close(&f);
        return;
    }
    int V = lmodel_vocab(f.m);
    lmodel_kv *kv = NULL;
    lmodel_acts *a = NULL;
    st = lmodel_kv_create(f.m, f.be, B, TMAX, 3, &f.alloc, &kv); /* chunks of 3: the prompt in 3 forwards */
    if (st == FERRY_OK)
        st = lmodel_acts_create(f.m, f.be, B, TMAX, false, &f.alloc, &a);
    int32_t seq[B][TMAX], prompt[B * P], step_tok[B];
    float *lk = malloc((size_t)B * V * sizeof *lk), *lr = malloc((size_t)V * sizeof *lr);
    int32_t *full = malloc((size_t)B * TMAX * sizeof *full);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < P; t++)
            prompt[b * P + t] = seq[b][t] = (int32_t)((b * 131 + t * 37 + 5) % V);
    if (st == FERRY_OK)
        st = lmodel_prefill(f.m, kv, &f.h, f.s, prompt, P, lk);
    TAP_IS_STATUS(st, FERRY_OK, "%s: prefill of %d prompt tokens in %d rows", name, P, B);
    double worst = 0;
    int mismatched = -1, mismatches = 0, len = P;
    for (int i = 0; i < N_NEW && st == FERRY_OK; i++, len++) {
        for (int j = 0; j < B * TMAX; j++)
            full[j] = 0;
        for (int b = 0; b < B; b++)
            memcpy(full + b * TMAX, seq[b], (size_t)len * sizeof(int32_t));
        st = lmodel_forward(f.m, a, &f.h, f.s, full, NULL, false);
        for (int b = 0; b < B && st == FERRY_OK; b++) {
            st = lmodel_logits(f.m, a, &f.h, f.s, b, len - 1, lr);
            double scale = 0, diff = 0;
            for (int v = 0; v < V; v++) {
                scale = fmax(scale, fabs(lr[v]));
                diff = fmax(diff, fabs(lr[v] - lk[(size_t)b * V + v]));
            }
            worst = fmax(worst, diff / fmax(scale, 1e-30));
            int tk = argmax(lk + (size_t)b * V, V), tr = argmax(lr, V);
            mismatches += tk != tr;
            if (tk != tr && mismatched < 0)
                mismatched = i;
            seq[b][len] = step_tok[b] = tr;
        }
        if (st == FERRY_OK && len < TMAX)
            st = lmodel_decode_step(f.m, kv, &f.h, f.s, step_tok, lk);
    }
    TAP_IS_STATUS(st, FERRY_OK, "%s: %d greedy tokens by decode steps and by recompute", name, N_NEW);
    bool wide = kind == FERRY_BACKEND_CUDA;
    int allowed = wide ? 4 : 0;
    double tol = wide ? 1e-1 : 2e-5;
    tap_ok(mismatches <= allowed, "%s: the cache's greedy tokens equal the recompute's, token for token (%d of %d "
           "steps differ, %d allowed; the first at step %d, -1 = none)", name, mismatches, N_NEW * B, allowed,
           mismatched);
    tap_ok(worst < tol, "%s: logits at every step within %.0e of the largest (worst %.3g)", name, tol, worst);
    TAP_IS_INT(lmodel_kv_len(kv), TMAX, "%s: the cache holds the prompt and every new token", name);
    /* the cache's capacity */
    st = lmodel_decode_step(f.m, kv, &f.h, f.s, step_tok, lk);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "full") &&
               strstr(ferry_last_error(), "24 positions"),
           "%s: a step on a full cache is refused, saying its capacity (%s)", name, ferry_last_error());
    int32_t *longp = calloc((size_t)B * (TMAX + 1), sizeof *longp);
    st = lmodel_prefill(f.m, kv, &f.h, f.s, longp, TMAX + 1, lk);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "25 tokens"),
           "%s: a prompt longer than the cache is refused (%s)", name, ferry_last_error());
    free(longp);
    lmodel_kv_reset(kv);
    st = lmodel_decode_step(f.m, kv, &f.h, f.s, step_tok, lk);
    TAP_IS_STATUS(st, FERRY_ERR_STATE, "%s: a step on an empty cache is refused", name);
    step_tok[1] = V;
    prompt[0] = 0;
    st = lmodel_prefill(f.m, kv, &f.h, f.s, prompt, 1, lk);
    if (st == FERRY_OK)
        st = lmodel_decode_step(f.m, kv, &f.h, f.s, step_tok, lk);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && lmodel_kv_len(kv) == 1,
           "%s: a token outside the vocabulary is refused and nothing is appended (%s)", name, ferry_last_error());
    lmodel_kv *big = NULL;
    st = lmodel_kv_create(f.m, f.be, 1, lmodel_context(f.m) + 1, 0, &f.alloc, &big);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && !big, "%s: a cache past the model's context is refused (%s)", name,
           ferry_last_error());
    size_t bytes = lmodel_kv_bytes(f.m, FERRY_DTYPE_F32, B, TMAX, 3);
    tap_ok(bytes > 0, "%s: the cache's bytes are counted (%zu)", name, bytes);
    backend_stream_synchronize(f.s);
    lmodel_kv_destroy(kv);
    lmodel_acts_destroy(a);
    free(lk);
    free(lr);
    free(full);
    lfix_close(&f);
}

/* Greedy tokens and last logits of `steps` decode steps after a prompt. */
static ferry_status greedy_run(const lmodel *m, lmodel_kv *kv, const model_hooks *h, backend_stream *s, int steps,
                               int32_t *tokens, float *logits)
{
    int V = lmodel_vocab(m);
    int32_t prompt[P];
    for (int t = 0; t < P; t++)
        prompt[t] = (int32_t)((t * 37 + 5) % V);
    ferry_status st = lmodel_prefill(m, kv, h, s, prompt, P, logits);
    for (int i = 0; i < steps && st == FERRY_OK; i++) {
        tokens[i] = argmax(logits, V);
        st = lmodel_decode_step(m, kv, h, s, &tokens[i], logits);
    }
    return st;
}

/* The cache through the engine in `mode` against resident weights of the
 * same init: the engine hands the groups out as its mode places them. */
static void check_engine(const char *name, const model_spec *spec, ferry_offload mode)
{
    enum { STEPS = 10 };
    lfix f;
    ferry_status st = fixture_open(&f, spec, 1.0f);
    int V = f.m ? lmodel_vocab(f.m) : 1;
    int32_t want[STEPS], got[STEPS];
    float *lw = malloc((size_t)V * sizeof *lw), *lg = malloc((size_t)V * sizeof *lg);
    lmodel_kv *kv = NULL;
    if (st == FERRY_OK) st = lmodel_kv_create(f.m, f.be, 1, TMAX, 0, &f.alloc, &kv);
    if (st == FERRY_OK) st = greedy_run(f.m, kv, &f.h, f.s, STEPS, want, lw);
    lmodel_kv_destroy(kv);
    kv = NULL;
    ferry_engine *e = NULL;
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.offload = mode;
    cfg.optimizer_threads = 1;
    cfg.device_budget_bytes = (uint64_t)1 << 30;
    cfg.device_update_groups = 0;
    model_desc d = f.m ? lmodel_desc(f.m) : (model_desc){0};
    if (st == FERRY_OK) st = ferry_engine_create(&cfg, &e);
    if (st == FERRY_OK) st = model_engine_add_groups(&d, e, 1234, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    model_allocator alloc = e ? model_engine_allocator(e) : (model_allocator){0};
    model_hooks hooks = e ? model_engine_hooks(e) : (model_hooks){0};
    if (st == FERRY_OK) st = lmodel_kv_create(f.m, engine_embed_backend(e), 1, TMAX, 0, &alloc, &kv);
    if (st == FERRY_OK) st = ferry_engine_begin_inference(e);
    if (st == FERRY_OK) {
        st = greedy_run(f.m, kv, &hooks, engine_embed_stream(e), STEPS, got, lg);
        ferry_status end = ferry_engine_end_inference(e);
        st = st == FERRY_OK ? end : st;
    }
    double diff = 0;
    for (int v = 0; st == FERRY_OK && v < V; v++)
        diff = fmax(diff, fabs(lw[v] - lg[v]));
    tap_ok(st == FERRY_OK && memcmp(want, got, sizeof want) == 0 && diff <= 1e-6,
           "%s through the engine, offload %s: the same %d greedy tokens and last logits (max diff %.3g) as resident "
           "weights%s%s", name, ferry_offload_name(mode), STEPS, diff, st == FERRY_OK ? "" : ": ",
           st == FERRY_OK ? "" : ferry_last_error());
    if (e)
        ferry_engine_synchronize(e);
    lmodel_kv_destroy(kv);
    ferry_engine_destroy(e);
    free(lw);
    free(lg);
    lfix_close(&f);
}

static model_spec llama_spec(const char *preset, int V, bool bias, bool tied)
{
    model_spec s;
    if (model_spec_preset(preset, &s) != FERRY_OK)
        abort();
    s.llama.vocab_size = V;
    s.llama.padded_vocab_size = (V + 127) / 128 * 128;
    s.llama.max_seq_len = 256;
    s.llama.qkv_bias = bias;
    s.llama.tied_embeddings = tied;
    s.llama.rope_theta = 10000.0f;
    s.llama.bos_token_id = 1;
    s.llama.eos_token_id = 2;
    s.llama.rope_scaling.kind = LLAMA_ROPE_DEFAULT;
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "cuda") != 0) {
        printf("Bail out! usage: test_decode [cuda]\n");
        return 1;
    }
    if (argc > 1) {
        kind = FERRY_BACKEND_CUDA;
        act = FERRY_DTYPE_BF16;
    }
    model_spec l4 = llama_spec("llama-d4", 1000, false, false); /* 4 query heads, 2 key/value heads */
    TAP_IS_INT(l4.llama.n_head / l4.llama.n_kv_head, 2, "llama-d4 groups 2 query heads on each key/value head");
    check_family("llama-d4 (GQA, untied head)", &l4);
    model_spec l2 = llama_spec("llama-d2", 515, true, true); /* one key/value head, biases, tied head */
    check_family("llama-d2 (MQA, q/k/v biases, tied head)", &l2);
    model_spec g;
    memset(&g, 0, sizeof g);
    g.family = MODEL_FAMILY_GPT2;
    if (gpt2_config_from_fields(2, 2, 128, 700, 0, 64, &g.gpt2) != FERRY_OK)
        abort();
    check_family("gpt2 d2", &g);
    if (kind == FERRY_BACKEND_CUDA)
        return tap_done();
    model_spec wide;
    memset(&wide, 0, sizeof wide);
    wide.family = MODEL_FAMILY_GPT2;
    if (gpt2_config_from_fields(1, 2, 600, 50, 0, 16, &wide.gpt2) != FERRY_OK) /* heads of 300 */
        abort();
    lfix fw;
    lmodel_kv *none = NULL;
    ferry_status st = fixture_open(&fw, &wide, 1.0f);
    if (st == FERRY_OK)
        st = lmodel_kv_create(fw.m, fw.be, 1, 16, 0, &fw.alloc, &none);
    tap_ok(st == FERRY_ERR_UNSUPPORTED && !none && strstr(ferry_last_error(), "300"),
           "heads of 300 get no cache, said so (%s)", ferry_last_error());
    lfix_close(&fw);
    const ferry_offload modes[] = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS};
    for (int i = 0; i < 3; i++) {
        check_engine("llama-d4", &l4, modes[i]);
        check_engine("gpt2 d2", &g, modes[i]);
    }
    return tap_done();
}
