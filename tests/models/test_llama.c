/* The Llama family's model on the host backend:
 * - each named shape has the parameter count its publisher states (Llama
 *   3.1 8B: 8,030,261,248; Qwen2.5 0.5B: 494,032,768; ...), and the fused
 *   q/k/v and gate/up runs are contiguous;
 * - a config out of range is refused naming the field; a sequence past
 *   Mistral's sliding window is refused before anything is allocated;
 * - the rotary frequencies with llama3 scaling equal a hand computation in
 *   double of transformers' formula;
 * - recompute gives bitwise the gradients of no recompute;
 * - through the engine, offload none, optimizer, params and NVMe give
 *   bitwise the same losses and final weights (f32), for a tied head with
 *   q/k/v biases (Qwen2) and an untied one with grouped-query heads (Llama
 *   3), and the engine's first loss is the resident model's;
 * - the planner's prediction (memprof plan's) is the engine's measured host
 *   pool and device peak in every mode.
 * Correctness against an outside model is tests/models/test_llama_oracle.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "common/error.h"
#include "engine/engine_fixture.h"
#include "engine/intree.h"
#include "models/llama.h"
#include "models/gpt2_plan.h"
#include "models/llama_engine.h"
#include "llama_fixture.h"
#include "tap.h"
#include "token_batches.h"

enum { STEPS = 6, B = 2, T = 16 };
static const uint64_t SEED = 4321;

static llama_config small_config(bool qwen)
{
    llama_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "%s", qwen ? "qwen2" : "llama");
    c.n_layer = 2;
    c.n_embd = 64;
    c.n_head = 4;
    c.n_kv_head = qwen ? 4 : 2;
    c.head_dim = 16;
    c.intermediate_size = 96;
    c.vocab_size = 300;
    c.padded_vocab_size = 384;
    c.max_seq_len = 64;
    c.rms_norm_eps = qwen ? 1e-6f : 1e-5f;
    c.rope_theta = qwen ? 1e6f : 500000.0f;
    c.qkv_bias = qwen;
    c.tied_embeddings = qwen;
    c.initializer_range = 0.02f;
    c.bos_token_id = c.eos_token_id = -1;
    if (!qwen)
        c.rope_scaling = (llama_rope_scaling){LLAMA_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
    return c;
}

static void test_presets(void)
{
    static const struct {
        const char *name;
        uint64_t params;
    } want[] = {
        {"smollm2-135m", 134515008ull},  {"tinyllama-1.1b", 1100048384ull}, {"llama3.2-1b", 1235814400ull},
        {"llama3.2-3b", 3212749824ull},  {"llama3.1-8b", 8030261248ull},    {"llama2-7b", 6738415616ull},
        {"mistral-7b", 7241732096ull},   {"qwen2.5-0.5b", 494032768ull},    {"qwen2.5-1.5b", 1543714304ull},
        {"qwen2.5-7b", 7615616512ull},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        llama_config c;
        llama_model *m = NULL;
        ferry_status st = llama_config_preset(want[i].name, &c);
        if (st == FERRY_OK)
            st = llama_create(&c, &m);
        TAP_IS_INT(st, FERRY_OK, "%s: created (%s)", want[i].name, st ? ferry_last_error() : "ok");
        TAP_IS_INT((long long)(m ? llama_num_params(m) : 0), (long long)want[i].params,
                   "%s: %llu parameters, as published", want[i].name, (unsigned long long)want[i].params);
        llama_destroy(m);
    }
    llama_config c;
    TAP_IS_INT(llama_config_preset("llama-d4", &c), FERRY_OK, "llama-d4 is a shape");
    tap_ok(c.n_layer == 4 && c.n_embd == 256 && c.n_head == 4 && c.n_kv_head == 2 && c.intermediate_size == 704,
           "llama-d4: 4 layers, 256 wide, 4 heads, 2 kv heads, I 704 (got %d %d %d %d %d)", c.n_layer, c.n_embd,
           c.n_head, c.n_kv_head, c.intermediate_size);
    ferry_status st = llama_config_preset("llama-9b", &c);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "llama3.1-8b"),
           "an unknown name lists the known ones: %s", ferry_last_error());
}

static void test_layout(void)
{
    llama_config c = small_config(true);
    llama_model *m = NULL;
    TAP_IS_INT(llama_create(&c, &m), FERRY_OK, "qwen2-like model created");
    if (!m)
        return;
    int gq, iq, gk, ik, gv, iv;
    llama_tensor_info q, k, v;
    llama_find_tensor(m, "model.layers.1.self_attn.q_proj.weight", &gq, &iq);
    llama_find_tensor(m, "model.layers.1.self_attn.k_proj.weight", &gk, &ik);
    llama_find_tensor(m, "model.layers.1.self_attn.v_proj.weight", &gv, &iv);
    llama_group_tensor(m, gq, iq, &q);
    llama_group_tensor(m, gk, ik, &k);
    llama_group_tensor(m, gv, iv, &v);
    tap_ok(gq == 2 && gk == 2 && gv == 2, "layer 1's projections are in group 2");
    tap_ok(k.offset == q.offset + q.numel && v.offset == k.offset + k.numel && q.offset % LLAMA_ALIGN_ELEMS == 0,
           "q, k, v lie back to back from an aligned offset (%zu, %zu, %zu)", q.offset, k.offset, v.offset);
    tap_ok(q.shape[0] == 64 && q.shape[1] == 64 && k.shape[0] == 64 && q.decay, "q_proj [64, 64], decayed");
    int gb, ib;
    llama_tensor_info bias;
    TAP_IS_INT(llama_find_tensor(m, "model.layers.0.self_attn.k_proj.bias", &gb, &ib), FERRY_OK, "qwen2 has k bias");
    llama_group_tensor(m, gb, ib, &bias);
    tap_ok(!bias.decay && bias.ndim == 1, "biases are not decayed");
    TAP_IS_INT(llama_find_tensor(m, "lm_head.weight", &gb, &ib), FERRY_ERR_INVALID_ARGUMENT,
               "a tied model has no lm_head");
    llama_tensor_info emb;
    llama_group_tensor(m, 0, 0, &emb);
    tap_ok(emb.shape[0] == 384 && emb.hf_rows == 300, "embedding: 384 rows here, 300 in the checkpoint");
    float *init = malloc(llama_group_numel(m, 0) * sizeof *init);
    llama_init_group(m, 0, SEED, init);
    bool pad_zero = true;
    for (size_t i = (size_t)300 * 64; i < (size_t)384 * 64; i++)
        pad_zero &= init[i] == 0.0f;
    double ss = 0;
    for (size_t i = 0; i < (size_t)300 * 64; i++)
        ss += (double)init[i] * init[i];
    double std = sqrt(ss / (300.0 * 64));
    tap_ok(pad_zero && fabs(std - 0.02) < 0.001, "embedding init: padded rows 0, std %.5f (0.02)", std);
    free(init);
    llama_destroy(m);
}

static void test_refusals(void)
{
    llama_config c = small_config(false);
    c.n_kv_head = 3;
    ferry_status st = llama_config_validate(&c);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "num_key_value_heads = 3"),
           "kv heads not dividing the heads: %s", ferry_last_error());
    c = small_config(false);
    c.head_dim = 15;
    st = llama_config_validate(&c);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "head_dim = 15"), "odd head_dim: %s",
           ferry_last_error());
    c = small_config(false);
    c.rope_scaling.high_freq_factor = 0.5f;
    st = llama_config_validate(&c);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "low_freq_factor"),
           "llama3 scaling with high < low: %s", ferry_last_error());
    c = small_config(false);
    snprintf(c.model_type, sizeof c.model_type, "gemma");
    st = llama_config_validate(&c);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "gemma"), "model_type gemma: %s",
           ferry_last_error());
    c = small_config(false);
    snprintf(c.model_type, sizeof c.model_type, "mistral");
    c.sliding_window = 8;
    llama_model *m = NULL;
    llama_create(&c, &m);
    TAP_IS_INT((long long)llama_activations_bytes(m, FERRY_DTYPE_F32, 1, 16, false), 0,
               "a sequence past the sliding window plans nothing");
    backend *be = NULL;
    backend_open(FERRY_BACKEND_HOST, &be);
    model_allocator alloc = model_backend_allocator(be);
    llama_activations *a = NULL;
    st = llama_activations_create(m, be, 1, 16, false, &alloc, &a);
    tap_ok(st == FERRY_ERR_UNSUPPORTED && strstr(ferry_last_error(), "sliding_window = 8") && !a,
           "and is refused naming the window: %s", ferry_last_error());
    backend_close(be);
    llama_destroy(m);
}

/* transformers' _compute_llama3_parameters, in double. */
static void test_rope_frequencies(void)
{
    llama_config c = small_config(false);
    float got[8];
    llama_rope_inv_freq(&c, got);
    double worst = 0;
    int bands[3] = {0};
    for (int i = 0; i < 8; i++) {
        double f = 1.0 / pow(500000.0, (2.0 * i) / 16.0), wl = 2 * M_PI / f, want;
        double low = 64.0 / 1.0, high = 64.0 / 4.0;
        if (wl > low) {
            want = f / 8.0;
            bands[0]++;
        } else if (wl < high) {
            want = f;
            bands[2]++;
        } else {
            double s = (64.0 / wl - 1.0) / (4.0 - 1.0);
            want = (1 - s) * f / 8.0 + s * f;
            bands[1]++;
        }
        double e = fabs(got[i] - want) / want;
        worst = e > worst ? e : worst;
    }
    tap_ok(worst < 1e-5, "llama3 inv_freq within 1e-5 of the double formula (worst %.2e)", worst);
    tap_ok(bands[0] && bands[1] && bands[2], "the shape meets all three bands (%d scaled, %d smoothed, %d kept)",
           bands[0], bands[1], bands[2]);
}

static void tokens_of(const llama_config *c, int step, int32_t *tokens, int32_t *targets)
{
    static const token_recipe recipe = {31, 97, 13, 5, 1, 0, 61, 3};
    token_batch(&recipe, step, 0, B * T, c->vocab_size, tokens, targets);
}

/* Every gradient of one step on resident buffers, recompute on or off. */
static float *resident_grads(const llama_config *c, bool recompute, float *loss, size_t *total)
{
    llama_fixture f;
    int32_t tok[B * T], tgt[B * T];
    tokens_of(c, 0, tok, tgt);
    ferry_status st = llama_fixture_open(&f, FERRY_BACKEND_HOST, FERRY_DTYPE_AUTO, c, B, T, recompute, SEED);
    if (st == FERRY_OK) st = llama_fixture_step(&f, tok, tgt, 1.0f, loss);
    float *out = st == FERRY_OK ? llama_fixture_all(&f, true) : NULL;
    if (!out)
        tap_diag("resident run failed: %s", ferry_last_error());
    *total = f.total;
    llama_fixture_close(&f);
    return out;
}

static void test_recompute(const llama_config *c, const char *what)
{
    float l0 = 0, l1 = 0;
    size_t n0 = 0, n1 = 0;
    float *g0 = resident_grads(c, false, &l0, &n0), *g1 = resident_grads(c, true, &l1, &n1);
    bool same = g0 && g1 && n0 == n1 && memcmp(g0, g1, n0 * sizeof *g0) == 0 && l0 == l1;
    double norm = 0;
    for (size_t i = 0; g0 && i < n0; i++)
        norm += (double)g0[i] * g0[i];
    tap_ok(same && norm > 0, "%s: recompute's loss and gradients are bitwise those without (loss %.6f, |g| %.4f)", what,
           l0, sqrt(norm));
    tap_ok(fabs(l0 - log(300.0)) < 0.05, "%s: the first loss is near ln(V) = %.4f: %.4f", what, log(300.0), l0);
    free(g0);
    free(g1);
}

typedef struct run_result {
    float loss[STEPS];
    float *weights;
    size_t n;
    uint64_t device_peak, host_peak; /* the engine's high-water marks */
} run_result;

#define BUDGET ((uint64_t)1 << 30)

static ferry_status run_engine(const llama_config *c, ferry_offload mode, const char *nvme_dir, run_result *out)
{
    llama_model *m = NULL;
    ferry_engine *e = NULL;
    llama_activations *act = NULL;
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, mode, FERRY_DTYPE_AUTO, 2);
    cfg.nvme_path = nvme_dir;
    cfg.device_budget_bytes = BUDGET;
    /* The plan is the placement without the split update (docs/engine.md). */
    cfg.device_update_groups = 0;
    ferry_status st = llama_create(c, &m);
    if (st == FERRY_OK)
        cfg.auto_activation_bytes = llama_activations_bytes(m, FERRY_DTYPE_F32, B, T, false);
    if (st == FERRY_OK) st = ferry_engine_create(&cfg, &e);
    if (st == FERRY_OK) st = llama_engine_add_groups(m, e, SEED, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    model_allocator alloc = e ? model_engine_allocator(e) : (model_allocator){0};
    if (st == FERRY_OK) st = llama_activations_create(m, engine_embed_backend(e), B, T, false, &alloc, &act);
    model_hooks hooks = e ? model_engine_hooks(e) : (model_hooks){0};
    backend_stream *s = e ? engine_embed_stream(e) : NULL;
    ferry_step_options o = efix_options(3e-3f, 0.1f, 1.0f);
    int32_t tok[B * T], tgt[B * T];
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        tokens_of(c, step, tok, tgt);
        st = ferry_engine_begin_micro_batch(e, 0, 1);
        if (st == FERRY_OK) st = llama_forward(m, act, &hooks, s, tok, tgt, true);
        if (st == FERRY_OK) st = llama_backward(m, act, &hooks, s, 1.0f);
        if (st == FERRY_OK) st = llama_loss(act, s, &out->loss[step]);
        if (st == FERRY_OK) st = ferry_engine_step(e, &o, NULL);
    }
    out->n = 0;
    for (int g = 0; m && g < llama_num_groups(m); g++)
        out->n += llama_group_numel(m, g);
    out->weights = st == FERRY_OK ? malloc(out->n * sizeof(float)) : NULL;
    size_t at = 0;
    for (int g = 0; out->weights && g < llama_num_groups(m) && st == FERRY_OK; g++) {
        st = ferry_engine_get_weights(e, g, out->weights + at);
        at += llama_group_numel(m, g);
    }
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (st == FERRY_OK) st = ferry_engine_synchronize(e);
    if (st == FERRY_OK) st = ferry_engine_memory_stats(e, &ms);
    out->device_peak = ms.device_total_peak_bytes;
    out->host_peak = ms.host_peak_bytes;
    if (st != FERRY_OK)
        tap_diag("%s run failed: %s", ferry_offload_name(mode), ferry_last_error());
    if (e)
        ferry_engine_synchronize(e);
    llama_activations_destroy(act);
    ferry_engine_destroy(e);
    llama_destroy(m);
    return st;
}

/* The planner (what memprof plan prints) against the engine's measured
 * peaks: the host pool exactly, the device exactly but in params mode
 * (where the plan is a bound that the timing of drains decides). */
static void check_plan(const llama_config *c, ferry_offload mode, const run_result *r, const char *what)
{
    gpt2_plan p;
    gpt2_plan_request rq = {.llama = c, .batch = B, .seq = T, .offload = mode, .prefetch_groups = 2,
                            .micro_batches = 1, .backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                            .device_budget = BUDGET};
    gpt2_plan_disk disk = {0};
    ferry_status st = gpt2_plan_predict_disk(&rq, mode == FERRY_OFFLOAD_NVME ? &disk : NULL, &p);
    TAP_IS_INT(st, FERRY_OK, "%s %s: planned (%s)", what, ferry_offload_name(mode), st ? ferry_last_error() : "ok");
    TAP_IS_INT((long long)r->host_peak, (long long)p.host_total, "%s %s: host pool as planned (%llu bytes)", what,
               ferry_offload_name(mode), (unsigned long long)p.host_total);
    if (mode == FERRY_OFFLOAD_PARAMS)
        tap_ok(r->device_peak <= p.device_total, "%s params: device peak %llu within the plan's bound %llu", what,
               (unsigned long long)r->device_peak, (unsigned long long)p.device_total);
    else
        TAP_IS_INT((long long)r->device_peak, (long long)p.device_total, "%s %s: device peak as planned", what,
                   ferry_offload_name(mode));
}

static void test_modes(const llama_config *c, const char *what)
{
    char dir[] = "/tmp/ferry-llama-XXXXXX";
    if (!mkdtemp(dir)) {
        tap_ok(0, "mkdtemp");
        return;
    }
    run_result base = {0};
    ferry_status st = run_engine(c, FERRY_OFFLOAD_NONE, NULL, &base);
    TAP_IS_INT(st, FERRY_OK, "%s: offload none trains %d steps", what, STEPS);
    check_plan(c, FERRY_OFFLOAD_NONE, &base, what);
    float l_res = 0;
    size_t n = 0;
    free(resident_grads(c, false, &l_res, &n));
    tap_ok(st == FERRY_OK && base.loss[0] == l_res, "%s: the engine's first loss is the resident model's (%.6f, %.6f)",
           what, base.loss[0], l_res);
    tap_ok(st == FERRY_OK && base.loss[STEPS - 1] < base.loss[0], "%s: the loss falls (%.4f -> %.4f)", what,
           base.loss[0], base.loss[STEPS - 1]);
    const ferry_offload modes[] = {FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS, FERRY_OFFLOAD_NVME};
    for (size_t i = 0; i < 3; i++) {
        run_result r = {0};
        st = run_engine(c, modes[i], modes[i] == FERRY_OFFLOAD_NVME ? dir : NULL, &r);
        bool same = st == FERRY_OK && base.weights && r.weights && r.n == base.n &&
                    memcmp(r.loss, base.loss, sizeof r.loss) == 0 &&
                    memcmp(r.weights, base.weights, r.n * sizeof(float)) == 0;
        check_plan(c, modes[i], &r, what);
        tap_ok(same, "%s: offload %s gives bitwise the losses and weights of none (last loss %.6f vs %.6f)", what,
               ferry_offload_name(modes[i]), r.loss[STEPS - 1], base.loss[STEPS - 1]);
        free(r.weights);
    }
    free(base.weights);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
}

/* Runs `memprof plan --model MODEL` with the flags of test_memprof into
 * out[cap]; its exit status. */
static int memprof_plan_json(const char *memprof, const char *model, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "'%s' plan --model '%s' --seq 2048 --gpu-mem 24GiB --offload params --recompute --batch 1 --json 2>&1",
             memprof, model);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, cap - 1, p) : 0;
    out[n] = '\0';
    int status = p ? pclose(p) : -1;
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The same plan from a Hugging Face folder: Llama 3.1 8B's config.json as
 * its model card publishes it, in a folder of its own, plans what the
 * preset plans, byte for byte of the JSON; a GPT-2 folder's config.json is
 * refused naming its model_type. */
static void test_memprof_folder(const char *memprof, const char *preset_json)
{
    static const char config[] =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,\n"
        " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"hidden_act\": \"silu\",\n"
        " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,\n"
        " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\",\n"
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,\n"
        " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0,\n"
        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,\n"
        " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,\n"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.0.dev0\", \"use_cache\": true,\n"
        " \"vocab_size\": 128256}\n";
    char dir[] = "/tmp/ferry-llama-folder-XXXXXX", path[128];
    if (!mkdtemp(dir)) {
        tap_ok(false, "a temporary folder for a config.json: %s", strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    bool wrote = f && fputs(config, f) >= 0;
    if (f && fclose(f) != 0)
        wrote = false;
    static char out[1 << 16];
    int rc = wrote ? memprof_plan_json(memprof, dir, out, sizeof out) : -1;
    tap_ok(rc == 0 && !strcmp(out, preset_json),
           "memprof plan --model FOLDER (Llama 3.1 8B's config.json) plans what --model llama3.1-8b plans (exit %d)",
           rc);
    f = fopen(path, "w");
    wrote = f && fputs("{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_head\": 12, \"n_embd\": 768}\n", f) >= 0;
    if (f && fclose(f) != 0)
        wrote = false;
    rc = wrote ? memprof_plan_json(memprof, path, out, sizeof out) : -1;
    tap_ok(rc == 2 && strstr(out, "model_type") && strstr(out, "gpt2") && strstr(out, "mistral"),
           "a config.json of model_type gpt2 is refused, naming it and what is read (exit %d): %s", rc, out);
    if (remove(path) != 0 || rmdir(dir) != 0)
        tap_diag("could not remove %s", dir);
}

/* memprof plan's answer for Llama 3.1 8B on a 24 GiB card (params mode,
 * recompute, seq 2048): it fits, and its host pool and largest batch are
 * the planner's (the engine allocates the planner's pool: check_plan). */
static void test_memprof(const char *memprof)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "'%s' plan --model llama3.1-8b --seq 2048 --gpu-mem 24GiB --offload params --recompute --batch 1 --json",
             memprof);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = '\0';
    int rc = p ? pclose(p) : -1;
    tap_ok(rc == 0, "memprof plan --model llama3.1-8b --seq 2048 --gpu-mem 24GiB --offload params --recompute: "
                    "exit 0 (fits)");
    llama_config c;
    llama_config_preset("llama3.1-8b", &c);
    gpt2_plan pl;
    gpt2_plan_request rq = {.llama = &c, .batch = 1, .seq = 2048, .offload = FERRY_OFFLOAD_PARAMS, .recompute = true,
                            .prefetch_groups = 2, .micro_batches = 1, .backend = FERRY_BACKEND_CUDA,
                            .dtype = FERRY_DTYPE_AUTO, .ranks = 1, .device_budget = (uint64_t)24 << 30};
    gpt2_plan_predict(&rq, &pl);
    int max_b = 0;
    gpt2_plan_max_batch(&rq, (uint64_t)24 << 30, &max_b);
    char want[160];
    snprintf(want, sizeof want, "\"host\":\t{\n\t\t\"total_bytes\":\t%llu", (unsigned long long)pl.host_total);
    tap_ok(strstr(out, want) != NULL, "its host pool is the planner's: %.1f GiB, %.2f bytes a parameter",
           (double)pl.host_total / (1 << 30), (double)pl.host_total / (double)pl.num_params);
    snprintf(want, sizeof want, "\"max_batch\":\t%d", max_b);
    tap_ok(max_b >= 1 && strstr(out, want) != NULL && strstr(out, "\"fits\":\ttrue"),
           "it fits, largest batch %d x 2048", max_b);
    test_memprof_folder(memprof, out);
}

int main(int argc, char **argv)
{
    tap_diag("seed %llu", (unsigned long long)SEED);
    test_presets();
    test_layout();
    test_refusals();
    test_rope_frequencies();
    llama_config llama3 = small_config(false), qwen2 = small_config(true);
    test_recompute(&llama3, "llama3 (GQA, untied, llama3 rope)");
    test_recompute(&qwen2, "qwen2 (biases, tied)");
    test_modes(&llama3, "llama3");
    test_modes(&qwen2, "qwen2");
    if (argc > 1)
        test_memprof(argv[1]);
    return tap_done();
}
