/* train_gpt2's Hugging Face checkpoints (train/hf_checkpoint.c)
 * against a GPT-2 of PyTorch built with transformers' module structure and
 * names (tests/train/hf_gpt2.py), on a tiny model (2 layers, 4 heads, 64
 * wide, context 64, vocab 500 padded to 512, so only wte's real rows are
 * saved):
 * - ours -> HF: hf_save of our seeded init; the script loads it with
 *   load_state_dict(strict=True) and its float64 logits for fixed tokens
 *   must match ours (relative error of the norm <= 1e-5);
 * - HF -> ours: the script writes files as the official gpt2 one is laid out
 *   (no "transformer." prefix, attn.bias / attn.masked_bias buffers) in F32,
 *   F16 and BF16; hf_load (what --init-from does) must give our model the
 *   script's logits;
 * - save then load gives the bits back, padded rows zero; config.json too;
 * - bad files (a tensor in our layout instead of Conv1D's, a missing one,
 *   an integer one, a deeper or shallower model, a truncated file) are
 *   FERRY_ERR_FORMAT (or _IO) naming the tensor.
 * Usage: test_hf_checkpoint PYTHON hf_gpt2.py. TAP lines for reading; judged
 * by exit code: 77 (skip) when PYTHON cannot import torch and nothing else
 * failed. */
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "tests/models/gpt2_fixture.h"
#include "tests/tap.h"
#include "train/safetensors.h"
#include "train/hf_checkpoint.h"
#include "tests/train/sft_edit.h"

#define B_ 2
#define T_ 64

static char work[] = "/tmp/ferry-hf-XXXXXX";


static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", work, name); }

static float **groups_alloc(const gpt2_model *m)
{
    int G = gpt2_num_groups(m);
    float **g = calloc((size_t)G, sizeof *g);
    for (int i = 0; i < G; i++)
        g[i] = calloc(gpt2_group_numel(m, i), sizeof(float));
    return g;
}

static void groups_free(const gpt2_model *m, float **g)
{
    for (int i = 0; g && i < gpt2_num_groups(m); i++)
        free(g[i]);
    free(g);
}

/* Logits of every position, [B, T, V], of the params now in the fixture. */
static ferry_status logits_all(fixture *fx, const int32_t *tok, float *out)
{
    int V = gpt2_get_config(fx->m)->vocab_size;
    ferry_status st = gpt2_forward(fx->m, fx->a, &fx->h, fx->s, tok, NULL, false);
    for (int b = 0; b < B_ && st == FERRY_OK; b++)
        for (int t = 0; t < T_ && st == FERRY_OK; t++)
            st = gpt2_logits(fx->m, fx->a, &fx->h, fx->s, b, t, out + ((size_t)b * T_ + t) * V);
    return st;
}

static ferry_status set_params(fixture *fx, float **groups)
{
    ferry_status st = FERRY_OK;
    for (int g = 0; g < gpt2_num_groups(fx->m) && st == FERRY_OK; g++)
        st = gpt2_resident_set_params(fx->r, fx->s, g, groups[g]);
    return st;
}

static double *read_f64(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    double *v = malloc(n * sizeof *v);
    int ok = f && v && fread(v, sizeof *v, n, f) == n && fgetc(f) == EOF;
    if (f)
        fclose(f);
    if (!ok) {
        free(v);
        return NULL;
    }
    return v;
}

static void compare_logits(const float *ours, const double *want, size_t n, const char *what)
{
    double d2 = 0, w2 = 0, maxerr = 0, maxref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = ours[i] - want[i];
        d2 += d * d;
        w2 += want[i] * want[i];
        maxerr = fabs(d) > maxerr ? fabs(d) : maxerr;
        maxref = fabs(want[i]) > maxref ? fabs(want[i]) : maxref;
    }
    double rel = w2 > 0 ? sqrt(d2 / w2) : sqrt(d2);
    tap_ok(rel <= 1e-5 && w2 > 0, "%s: logits rel. norm error %.2e <= 1e-5 (max abs err %.2e, max |torch| %.3g)",
           what, rel, maxerr, maxref);
}

/* ---- save / load round trip ---- */

static int same_groups(const gpt2_model *m, float **a, float **b)
{
    for (int g = 0; g < gpt2_num_groups(m); g++)
        if (memcmp(a[g], b[g], gpt2_group_numel(m, g) * sizeof(float)) != 0)
            return 0;
    return 1;
}

static void test_round_trip(fixture *fx, float **groups, const gpt2_config *cfg)
{
    char dir[300], file[340], conf[340];
    path_in(dir, sizeof dir, "ours");
    mkdir(dir, 0755);
    tap_is_status(hf_save(dir, fx->m, groups, NULL), FERRY_OK, "hf_save writes %s", dir);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    snprintf(conf, sizeof conf, "%s/config.json", dir);

    /* torch_dtype against the weights: ours says float32 and stores F32;
     * the same weights beside a config saying bfloat16 are refused. */
    TAP_IS_STATUS(hf_check_torch_dtype(conf, file), FERRY_OK, "its config.json's torch_dtype is the weights' type");
    char edited[360];
    snprintf(edited, sizeof edited, "%s/bf16-config.json", dir);
    FILE *ef = fopen(edited, "w");
    if (ef)
        fprintf(ef, "{\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"torch_dtype\": \"bfloat16\"}", cfg->n_layer,
                cfg->n_head, cfg->n_embd), fclose(ef);
    ferry_status dst = hf_check_torch_dtype(edited, file);
    tap_ok(dst == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "says torch_dtype \"bfloat16\"") &&
               strstr(ferry_last_error(), "as F32"),
           "a config saying torch_dtype bfloat16 beside F32 weights is refused, naming both: %s", ferry_last_error());

    sft_file *f = NULL;
    if (tap_is_status(sft_open(file, &f), FERRY_OK, "model.safetensors is a valid safetensors file")) {
        int want = 0;
        for (int g = 0; g < gpt2_num_groups(fx->m); g++)
            want += gpt2_group_tensor_count(fx->m, g);
        TAP_IS_INT(sft_count(f), want, "it holds every tensor of the model, no more");
        const sft_tensor *wte = sft_find(f, "transformer.wte.weight");
        const sft_tensor *fc = sft_find(f, "transformer.h.1.mlp.c_fc.weight");
        tap_ok(wte && wte->ndim == 2 && wte->shape[0] == cfg->vocab_size && wte->shape[1] == cfg->n_embd,
               "transformer.wte.weight is [V=%d, C=%d] (the real rows of the %d)", cfg->vocab_size, cfg->n_embd,
               cfg->padded_vocab_size);
        tap_ok(fc && fc->ndim == 2 && fc->shape[0] == cfg->n_embd && fc->shape[1] == 4 * cfg->n_embd,
               "transformer.h.1.mlp.c_fc.weight is Conv1D [in=%d, out=%d]", cfg->n_embd, 4 * cfg->n_embd);
        if (fc) { /* Conv1D element [i, o] is our fcw[o, i] */
            gpt2_tensor_info t;
            int gi, ti;
            gpt2_find_tensor(fx->m, "transformer.h.1.mlp.c_fc.weight", &gi, &ti);
            gpt2_group_tensor(fx->m, gi, ti, &t);
            const float *hf = fc->data;
            int bad = 0;
            for (int o = 0; o < t.shape[0]; o++)
                for (int i = 0; i < t.shape[1]; i++)
                    bad += hf[(size_t)i * t.shape[0] + o] != groups[gi][t.offset + (size_t)o * t.shape[1] + i];
            TAP_IS_INT(bad, 0, "c_fc.weight holds the transpose of our [4C, C] weight");
        }
        sft_close(f);
    }

    float **back = groups_alloc(fx->m);
    for (int g = 0; g < gpt2_num_groups(fx->m); g++)
        for (size_t i = 0; i < gpt2_group_numel(fx->m, g); i++)
            back[g][i] = NAN; /* hf_load must write every element, gaps and padded rows too */
    tap_is_status(hf_load(file, fx->m, back), FERRY_OK, "hf_load reads it back");
    tap_ok(same_groups(fx->m, back, groups), "save then load gives every group back bit for bit (padded rows 0)");
    groups_free(fx->m, back);

    gpt2_config c2;
    memset(&c2, 0xff, sizeof c2);
    tap_is_status(hf_read_config(conf, &c2), FERRY_OK, "hf_read_config reads config.json");
    tap_ok(memcmp(&c2, cfg, sizeof c2) == 0, "config.json gives the model back: L %d H %d C %d V %d Vp %d T %d",
           c2.n_layer, c2.n_head, c2.n_embd, c2.vocab_size, c2.padded_vocab_size, c2.max_seq_len);
}

/* ---- bad files ---- */

static void expect_refused(const char *file, const gpt2_model *m, const char *names, const char *what)
{
    float **g = groups_alloc(m);
    ferry_status st = hf_load(file, m, g);
    const char *msg = ferry_last_error();
    tap_is_status(st, FERRY_ERR_FORMAT, "%s: hf_load refuses it", what);
    tap_ok(st != FERRY_OK && strstr(msg, names) != NULL, "%s: the message names %s: \"%s\"", what, names, msg);
    groups_free(m, g);
}

/* config.json values that are not whole numbers are refused with the key
 * named; "n_layer": "2" read as 0 and 2.7 as 2 before. */
static void test_bad_configs(void)
{
    static const struct { const char *json, *key, *shown; } cases[] = {
        {"{\"n_layer\": \"2\", \"n_head\": 4, \"n_embd\": 64}", "\"n_layer\"", "the string \"2\""},
        {"{\"n_layer\": 2.7, \"n_head\": 4, \"n_embd\": 64}", "\"n_layer\"", "2.7"},
        {"{\"n_layer\": 2, \"n_head\": true, \"n_embd\": 64}", "\"n_head\"", "true"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": null}", "\"n_embd\"", "null"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 1e12}", "\"vocab_size\"", "1000000000000"},
        {"{\"n_layer\": -3, \"n_head\": 4, \"n_embd\": 64}", "\"n_layer\"", "-3"},
        {"{\"n_head\": 4, \"n_embd\": 64}", "no \"n_layer\"", ""},
        {"[2, 4, 64]", "not a JSON object", ""},
        /* Keys that change what the model computes: each to the one value ferry implements. */
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"layer_norm_epsilon\": 0.1}", "layer_norm_epsilon", "1e-05"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"layer_norm_epsilon\": 1e-6}", "layer_norm_epsilon", "1e-06"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"layer_norm_epsilon\": \"x\"}", "layer_norm_epsilon",
         "the string \"x\""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"layer_norm_epsilon\": -1}", "layer_norm_epsilon", "-1"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"activation_function\": \"relu\"}", "activation_function",
         "gelu_new"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"tie_word_embeddings\": false}", "tie_word_embeddings",
         "false"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"n_positions\": 64, \"n_ctx\": 32}", "\"n_ctx\" 32",
         "\"n_positions\" 64"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"n_inner\": 100}", "n_inner", "256"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"model_type\": \"bert\"}", "model_type", "\"gpt2\""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"resid_pdrop\": 2}", "resid_pdrop", "2"},
        /* Malformed JSON: a key twice, bytes after the object, cut short. */
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_layer\": 3, \"n_embd\": 64}", "\"n_layer\" twice", ""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"ferry\": {\"step\": 1, \"step\": 2}}", "\"step\" twice",
         ""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64} trailing", "bytes after its JSON object", ""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64}{}", "2 bytes after", ""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\":", "not valid JSON", ""},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"ferry\": {\"run\": \"xyz\"}}", "\"ferry\" fields",
         "damaged"},
        /* Token ids are whole numbers of the vocabulary; torch_dtype a type weights are stored in. */
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"bos_token_id\": 50256.5}", "bos_token_id", "50256.5"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"eos_token_id\": -1}", "eos_token_id", "-1"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"bos_token_id\": \"50256\"}", "bos_token_id", "the string"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"torch_dtype\": \"float64\"}", "torch_dtype", "float64"},
        {"{\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"torch_dtype\": 32}", "torch_dtype", "32"},
    };
    char p[300];
    path_in(p, sizeof p, "config_case.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(p, "w");
        if (f)
            fputs(cases[i].json, f), fclose(f);
        gpt2_config c;
        tap_is_status(hf_read_config(p, &c), FERRY_ERR_FORMAT, "config %s is refused", cases[i].json);
        const char *m = ferry_last_error();
        tap_ok(strstr(m, cases[i].key) && strstr(m, cases[i].shown), "and the message names %s and %s: %s",
               cases[i].key, cases[i].shown[0] ? cases[i].shown : "the problem", m);
    }
    FILE *f;
    gpt2_config c;
    /* Hugging Face's own GPT-2 config.json, as transformers writes it: read. */
    f = fopen(p, "w");
    if (f)
        fputs("{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], "
              "\"attn_pdrop\": 0.1, \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, "
              "\"initializer_range\": 0.02, \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", "
              "\"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12, \"n_inner\": null, \"n_layer\": 12, "
              "\"n_positions\": 1024, \"reorder_and_upcast_attn\": false, \"resid_pdrop\": 0.1, "
              "\"scale_attn_by_inverse_layer_idx\": false, \"scale_attn_weights\": true, "
              "\"summary_activation\": null, \"summary_first_dropout\": 0.1, \"summary_proj_to_labels\": true, "
              "\"summary_type\": \"cls_index\", \"summary_use_proj\": true, "
              "\"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}}, "
              "\"transformers_version\": \"4.26.0\", \"use_cache\": true, \"vocab_size\": 50257}\n", f),
            fclose(f);
    if (tap_is_status(hf_read_config(p, &c), FERRY_OK, "Hugging Face's gpt2 config.json reads"))
        tap_ok(c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 && c.vocab_size == 50257 && c.max_seq_len == 1024,
               "as GPT-2 124M");
    f = fopen(p, "w");
    if (f)
        fputs("{\"n_layer\": 2.0, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 500, \"n_positions\": 64}", f),
            fclose(f);
    if (tap_is_status(hf_read_config(p, &c), FERRY_OK, "a config with \"n_layer\": 2.0 (a whole number) reads"))
        tap_ok(c.n_layer == 2 && c.n_head == 4 && c.n_embd == 64 && c.vocab_size == 500 && c.max_seq_len == 64,
               "with every field as written (%d %d %d %d %d)", c.n_layer, c.n_head, c.n_embd, c.vocab_size,
               c.max_seq_len);
}

static void test_bad_files(const gpt2_model *m)
{
    char ours[300], bad[300];
    path_in(ours, sizeof ours, "ours/model.safetensors");
    path_in(bad, sizeof bad, "bad.safetensors");
    static const struct { sft_edit e; const char *name, *what; } cases[] = {
        {{.reshape = "transformer.h.1.mlp.c_fc.weight", .s0 = 256, .s1 = 64}, "transformer.h.1.mlp.c_fc.weight",
         "a Conv1D weight stored [out, in]"},
        {{.reshape = "transformer.wte.weight", .s0 = 250, .s1 = 128}, "transformer.wte.weight", "wte of another shape"},
        {{.drop = "transformer.h.1.ln_2.bias"}, "transformer.h.1.ln_2.bias", "a missing tensor"},
        {{.retype = "transformer.ln_f.weight"}, "transformer.ln_f.weight", "an I32 tensor"},
        /* A 1-D tensor stored 2-D: the message printed [8, 8] and "[640]" for [64]. */
        {{.reshape = "transformer.ln_f.weight", .s0 = 8, .s1 = 8}, "has shape [8, 8], the model expects [64]",
         "a 1-D weight stored as 8 x 8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!tap_is_status(sft_rewrite(ours, bad, &cases[i].e), FERRY_OK, "bad file: %s written", cases[i].what))
            continue;
        expect_refused(bad, m, cases[i].name, cases[i].what);
    }

    /* A deeper model's file, and ours into the deeper model. */
    gpt2_config dc;
    gpt2_model *deep = NULL;
    char dir[300], deep_file[340];
    path_in(dir, sizeof dir, "deep");
    mkdir(dir, 0755);
    snprintf(deep_file, sizeof deep_file, "%s/model.safetensors", dir);
    ferry_status st = gpt2_config_from_fields(3, 4, 64, 500, 0, 64, &dc);
    if (st == FERRY_OK) st = gpt2_create(&dc, &deep);
    float **dg = deep ? groups_alloc(deep) : NULL;
    for (int g = 0; dg && g < gpt2_num_groups(deep) && st == FERRY_OK; g++)
        st = gpt2_init_group(deep, g, 7, dg[g]);
    if (st == FERRY_OK) st = hf_save(dir, deep, dg, NULL);
    if (tap_is_status(st, FERRY_OK, "a 3-layer GPT-2 saved to %s", dir)) {
        expect_refused(deep_file, m, "transformer.h.2.", "a deeper model's file");
        expect_refused(ours, deep, "transformer.h.2.ln_1.weight", "a shallower model's file");
    }
    groups_free(deep, dg);
    gpt2_destroy(deep);

    /* Truncated: the safetensors reader sees it; the status is not OK. */
    FILE *in = fopen(ours, "rb"), *out = fopen(bad, "wb");
    char buf[4096];
    long keep = 0;
    if (in && out) {
        fseek(in, 0, SEEK_END);
        keep = ftell(in) / 2;
        fseek(in, 0, SEEK_SET);
        for (long left = keep; left > 0;) {
            size_t got = fread(buf, 1, left < (long)sizeof buf ? (size_t)left : sizeof buf, in);
            if (got == 0)
                break;
            fwrite(buf, 1, got, out);
            left -= (long)got;
        }
    }
    if (in) fclose(in);
    if (out) fclose(out);
    float **g = groups_alloc(m);
    st = hf_load(bad, m, g);
    tap_ok(st == FERRY_ERR_FORMAT || st == FERRY_ERR_IO, "a file cut at %ld bytes is refused: %s: %s", keep,
           ferry_status_string(st), ferry_last_error());
    path_in(bad, sizeof bad, "no-such.safetensors");
    st = hf_load(bad, m, g);
    tap_is_status(st, FERRY_ERR_IO, "a missing file is FERRY_ERR_IO: %s", ferry_last_error());
    groups_free(m, g);

    gpt2_config c;
    path_in(bad, sizeof bad, "bad.json");
    FILE *j = fopen(bad, "w");
    if (j) fputs("{\"n_layer\": 2, ", j), fclose(j);
    st = hf_read_config(bad, &c);
    tap_is_status(st, FERRY_ERR_FORMAT, "a cut config.json is FERRY_ERR_FORMAT: %s", ferry_last_error());
    path_in(bad, sizeof bad, "no-such.json");
    tap_is_status(hf_read_config(bad, &c), FERRY_ERR_IO, "a missing config.json is FERRY_ERR_IO");
    test_bad_configs();
}

/* ---- against the script ---- */

static void test_hf_files(fixture *fx, const int32_t *tok, const gpt2_config *cfg)
{
    size_t n = (size_t)B_ * T_ * cfg->vocab_size;
    float *ours = malloc(n * sizeof *ours);
    static const char *const dts[] = {"f32", "f16", "bf16"};
    for (int d = 0; d < 3; d++) {
        char file[300], conf[300], ref[300];
        snprintf(file, sizeof file, "%s/hf_%s/model.safetensors", work, dts[d]);
        snprintf(conf, sizeof conf, "%s/hf_%s/config.json", work, dts[d]);
        snprintf(ref, sizeof ref, "%s/hf_%s_logits.bin", work, dts[d]);
        gpt2_config c;
        if (tap_is_status(hf_read_config(conf, &c), FERRY_OK, "HF %s: config.json reads", dts[d]))
            tap_ok(memcmp(&c, cfg, sizeof c) == 0, "HF %s: config.json gives our shape", dts[d]);
        float **g = groups_alloc(fx->m);
        ferry_status st = hf_load(file, fx->m, g);
        tap_is_status(st, FERRY_OK, "HF %s: hf_load reads the official layout (no prefix, attn.bias buffers)",
                      dts[d]);
        int gi, ti;
        gpt2_tensor_info wte;
        gpt2_find_tensor(fx->m, "transformer.wte.weight", &gi, &ti);
        gpt2_group_tensor(fx->m, gi, ti, &wte);
        int nonzero = 0;
        for (size_t i = (size_t)cfg->vocab_size * cfg->n_embd; i < wte.numel; i++)
            nonzero += g[gi][wte.offset + i] != 0;
        TAP_IS_INT(nonzero, 0, "HF %s: wte rows %d..%d (padding) are zero", dts[d], cfg->vocab_size,
                   cfg->padded_vocab_size - 1);
        double *want = read_f64(ref, n);
        if (st == FERRY_OK && tap_ok(want != NULL, "HF %s: the script's logits read", dts[d])) {
            st = set_params(fx, g);
            if (st == FERRY_OK) st = logits_all(fx, tok, ours);
            if (tap_is_status(st, FERRY_OK, "HF %s: our forward runs", dts[d])) {
                char what[64];
                snprintf(what, sizeof what, "HF %s file -> ours", dts[d]);
                compare_logits(ours, want, n, what);
            }
        }
        free(want);
        groups_free(fx->m, g);
    }
    free(ours);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PYTHON hf_gpt2.py\n", argv[0]);
        return 1;
    }
    uint64_t seed = 20240611, rng = seed;
    tap_diag("seed %llu", (unsigned long long)seed);
    gpt2_config cfg;
    gpt2_config_from_fields(2, 4, 64, 500, 0, 64, &cfg);
    fixture fx;
    if (fixture_open(&fx, &cfg, B_, T_, false, seed) != FERRY_OK) {
        tap_ok(0, "fixture opens: %s", ferry_last_error());
        return tap_done();
    }
    if (!mkdtemp(work))
        tap_plan_skip("cannot create a temporary directory");
    float **groups = groups_alloc(fx.m);
    for (int g = 0; g < gpt2_num_groups(fx.m); g++)
        gpt2_resident_get_params(fx.r, fx.s, g, groups[g]);
    int32_t tok[2 + B_ * T_] = {B_, T_};
    for (int i = 0; i < B_ * T_; i++)
        tok[2 + i] = (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
    tok[2] = cfg.vocab_size - 1; /* the last real row of wte */

    test_round_trip(&fx, groups, &cfg);
    test_bad_files(fx.m);

    size_t n = (size_t)B_ * T_ * cfg.vocab_size;
    float *ours = malloc(n * sizeof *ours);
    tap_is_status(logits_all(&fx, tok + 2, ours), FERRY_OK, "our forward on the seeded init runs");
    char path[300], cmd[1024];
    path_in(path, sizeof path, "tokens.bin");
    FILE *f = fopen(path, "wb");
    tap_ok(f && fwrite(tok, sizeof tok, 1, f) == 1 && fclose(f) == 0, "tokens written to %s", path);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' %llu", argv[1], argv[2], work, (unsigned long long)seed + 1);
    int rc = system(cmd), skipped = 0;
    if (WIFEXITED(rc) && (WEXITSTATUS(rc) == 77 || WEXITSTATUS(rc) == 127)) {
        tap_diag("SKIP the PyTorch parts: %s cannot import torch", argv[1]);
        skipped = 1;
    } else if (tap_ok(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "the HF-layout script ran (exit %d): %s",
                      WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, cmd)) {
        path_in(path, sizeof path, "ours_logits.bin");
        double *want = read_f64(path, n);
        if (tap_ok(want != NULL, "the script's logits of our checkpoint read back"))
            compare_logits(ours, want, n, "our checkpoint -> GPT2LMHeadModel (strict load)");
        free(want);
        test_hf_files(&fx, tok + 2, &cfg);
    }
    free(ours);
    groups_free(fx.m, groups);
    fixture_close(&fx);
    nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    int code = tap_done();
    return code == 0 && skipped ? 77 : code;
}
