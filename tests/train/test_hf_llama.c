/* The Llama family's Hugging Face folders (train/hf_llama.c), on small
 * hand-made configs (2 layers, 64 wide, 4 heads of 16 with 2 key/value
 * heads, MLP 96, vocabulary 300 padded to 384): a Llama with Llama 3.1's
 * rope scaling and its own head, a tied Qwen2 with q/k/v biases, a Mistral
 * with a window and linear rope scaling.
 * - save then load: F32 gives the bits back; BF16 and F16 give the values
 *   rounded to nearest even (against a reference of frexp and nearbyint,
 *   and hand-computed ties); padded rows and gaps come back zero; sharded
 *   saves make several files and an index that load back the same, and a
 *   save over an earlier one of the other kind leaves no stale file;
 * - config.json round trip, and config.json files as Llama 3.2 1B, Qwen2.5
 *   0.5B and Mistral 7B publish them, read to their fields;
 * - refusals, each with its status and a word of its message: a missing
 *   tensor, a wrong shape, an I32 tensor, an extra tensor, lm_head.weight
 *   in a tied model, a truncated file, an index naming a missing shard or
 *   the wrong one, a deeper model's folder, a config.json beside the
 *   weights that disagrees with them; configs of model_type bert, rope
 *   type yarn, hidden_act gelu, attention_bias true on llama and more;
 * - the writer's order rules: a group twice, a commit with a group missing,
 *   an abort leaving nothing. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/llama.h"
#include "tests/tap.h"
#include "train/hf_llama.h"
#include "train/safetensors.h"
#include "tests/train/sft_edit.h"

static char work[] = "/tmp/ferry-hf-llama-XXXXXX";
static uint64_t seed = 20250301;

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", work, name); }

static void new_dir(char *out, size_t cap, const char *name)
{
    path_in(out, cap, name);
    mkdir(out, 0755);
}

static int exists(const char *dir, const char *name)
{
    char p[600];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

/* ---- configs and values ---- */

static llama_config base_config(const char *type)
{
    llama_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "%s", type);
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 64;
    c.head_dim = 16;
    c.intermediate_size = 96;
    c.vocab_size = 300;
    c.padded_vocab_size = 384;
    c.max_seq_len = 128;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.initializer_range = 0.02f;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
    return c;
}

static llama_config llama_cfg(void)
{
    llama_config c = base_config("llama");
    c.rope_theta = 500000.0f;
    c.rope_scaling = (llama_rope_scaling){LLAMA_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
    return c;
}

static llama_config qwen_cfg(void)
{
    llama_config c = base_config("qwen2");
    c.qkv_bias = true;
    c.tied_embeddings = true;
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 1000000.0f;
    c.bos_token_id = -1;
    c.eos_token_id = 299;
    return c;
}

static llama_config mistral_cfg(void)
{
    llama_config c = base_config("mistral");
    c.n_kv_head = 4;
    c.sliding_window = 64;
    c.rope_scaling = (llama_rope_scaling){LLAMA_ROPE_LINEAR, 2.0f, 0, 0, 0};
    return c;
}

/* Field by field, naming the first that differs. */
static int same_config(const llama_config *a, const llama_config *b, char *why, size_t cap)
{
#define FIELD(f)                                                                                                      \
    if (a->f != b->f) {                                                                                                \
        snprintf(why, cap, #f " %g vs %g", (double)a->f, (double)b->f);                                              \
        return 0;                                                                                                      \
    }
    if (strcmp(a->model_type, b->model_type) != 0) {
        snprintf(why, cap, "model_type %s vs %s", a->model_type, b->model_type);
        return 0;
    }
    FIELD(n_layer) FIELD(n_head) FIELD(n_kv_head) FIELD(n_embd) FIELD(head_dim) FIELD(intermediate_size)
    FIELD(vocab_size) FIELD(padded_vocab_size) FIELD(max_seq_len) FIELD(rms_norm_eps) FIELD(rope_theta)
    FIELD(rope_scaling.kind) FIELD(rope_scaling.factor) FIELD(rope_scaling.low_freq_factor)
    FIELD(rope_scaling.high_freq_factor) FIELD(rope_scaling.original_max_position_embeddings) FIELD(qkv_bias)
    FIELD(tied_embeddings) FIELD(sliding_window) FIELD(initializer_range) FIELD(bos_token_id) FIELD(eos_token_id)
#undef FIELD
    snprintf(why, cap, "all fields equal");
    return 1;
}

static size_t hf_elems(const llama_tensor_info *t)
{
    return t->ndim == 2 ? (size_t)t->hf_rows * (size_t)t->shape[1] : t->numel;
}

static int tensor_count(const llama_model *m)
{
    int n = 0;
    for (int g = 0; g < llama_num_groups(m); g++)
        n += llama_group_tensor_count(m, g);
    return n;
}

static float **groups_alloc(const llama_model *m, float fill)
{
    int G = llama_num_groups(m);
    float **g = calloc((size_t)G, sizeof *g);
    for (int i = 0; i < G; i++) {
        size_t n = llama_group_numel(m, i);
        g[i] = malloc(n * sizeof(float));
        for (size_t k = 0; k < n; k++)
            g[i][k] = fill;
    }
    return g;
}

static void groups_free(const llama_model *m, float **g)
{
    for (int i = 0; g && i < llama_num_groups(m); i++)
        free(g[i]);
    free(g);
}

/* Seeded values in every tensor's checkpoint elements, zero elsewhere
 * (gaps, padded rows); layer 0's q_proj starts with ties of bf16 and f16. */
static float **seeded_groups(const llama_model *m, uint64_t s)
{
    float **g = groups_alloc(m, 0.0f);
    for (int gi = 0; gi < llama_num_groups(m); gi++)
        for (int t = 0; t < llama_group_tensor_count(m, gi); t++) {
            llama_tensor_info info;
            llama_group_tensor(m, gi, t, &info);
            for (size_t i = 0; i < hf_elems(&info); i++)
                g[gi][info.offset + i] = (float)(4.0 * tap_rand_unit(&s) - 2.0);
            if (strcmp(info.name, "model.layers.0.self_attn.q_proj.weight") == 0) {
                float *q = g[gi] + info.offset;
                q[0] = 1.0f + 0x1p-8f;     /* bf16 tie between 1 and 1 + 2^-7: to 1 (even) */
                q[1] = 1.0f + 3 * 0x1p-8f; /* bf16 tie between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6 */
                q[2] = 1.0f + 0x1p-11f;    /* f16 tie: to 1 */
                q[3] = 1.0f + 3 * 0x1p-11f; /* f16 tie: to 1 + 2^-9 */
            }
        }
    return g;
}

/* x rounded to `bits` significant bits, ties to even (nearbyint in the
 * default rounding mode), with fp16's fixed step of 2^-24 below 2^-14. */
static float round_ref(float x, ferry_dtype d)
{
    if (d == FERRY_DTYPE_F32 || x == 0 || !isfinite(x))
        return x;
    int bits = d == FERRY_DTYPE_BF16 ? 8 : 11;
    if (d == FERRY_DTYPE_F16 && fabs(x) < 0x1p-14)
        return (float)(nearbyint((double)x * 0x1p24) * 0x1p-24);
    int e;
    double mant = frexp(x, &e);
    return (float)ldexp(nearbyint(ldexp(mant, bits)), e - bits);
}

/* Elements of `got` that differ in their bits from src rounded to d. */
static size_t count_wrong(const llama_model *m, float **src, float **got, ferry_dtype d, char *first, size_t cap)
{
    size_t bad = 0;
    first[0] = '\0';
    for (int g = 0; g < llama_num_groups(m); g++)
        for (size_t i = 0; i < llama_group_numel(m, g); i++) {
            float want = round_ref(src[g][i], d);
            if (memcmp(&want, &got[g][i], sizeof want) != 0 && bad++ == 0)
                snprintf(first, cap, "group %d element %zu: got %.9g, want %.9g (from %.9g)", g, i,
                         (double)got[g][i], (double)want, (double)src[g][i]);
        }
    return bad;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f)
        ok &= fclose(f) == 0;
    return ok;
}

/* A whole small file as a string (empty when it cannot be read); free it. */
static char *read_text(const char *path)
{
    char *text = calloc(1, 1 << 16);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fread(text, 1, (1 << 16) - 1, f) == 0)
            text[0] = '\0';
        fclose(f);
    }
    return text;
}

/* ---- save and load ---- */

static const char *dt_name(ferry_dtype d)
{
    return d == FERRY_DTYPE_F32 ? "F32" : d == FERRY_DTYPE_BF16 ? "BF16" : "F16";
}

static void check_config_file(const char *dir, const llama_config *cfg, ferry_dtype d, const hf_ferry_info *ferry)
{
    char p[600], why[128];
    snprintf(p, sizeof p, "%s/config.json", dir);
    llama_config back;
    ferry_dtype td = FERRY_DTYPE_AUTO;
    hf_ferry_info fi;
    if (tap_is_status(hf_llama_read_config_ferry(p, &back, &td, &fi), FERRY_OK, "%s: config.json reads", dir)) {
        tap_ok(same_config(&back, cfg, why, sizeof why), "%s: config.json gives the config back (%s)", dir, why);
        tap_ok(td == d, "%s: its torch_dtype is the weights' %s", dir, dt_name(d));
        tap_ok(strcmp(fi.run, ferry->run) == 0 && fi.step == ferry->step, "%s: its ferry fields: run %s step %lld",
               dir, fi.run, (long long)fi.step);
    }
    char *text = read_text(p);
    cJSON *j = cJSON_Parse(text);
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "architectures"), 0);
    const char *want = strcmp(cfg->model_type, "llama") == 0     ? "LlamaForCausalLM"
                       : strcmp(cfg->model_type, "mistral") == 0 ? "MistralForCausalLM"
                                                                 : "Qwen2ForCausalLM";
    tap_ok(cJSON_IsString(arch) && strcmp(arch->valuestring, want) == 0, "%s: architectures names %s", dir, want);
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "rms_norm_eps");
    tap_ok(eps && strstr(text, cfg->rms_norm_eps == 1e-5f ? "\"rms_norm_eps\":\t1e-05" : "\"rms_norm_eps\":\t1e-06"),
           "%s: rms_norm_eps is written as its shortest decimal", dir);
    cJSON_Delete(j);
    free(text);
}

static void test_round_trip(const char *what, const llama_config *cfg)
{
    llama_model *m = NULL;
    if (!tap_is_status(llama_create(cfg, &m), FERRY_OK, "%s: llama_create", what))
        return;
    float **src = seeded_groups(m, seed);
    static const ferry_dtype dts[] = {FERRY_DTYPE_F32, FERRY_DTYPE_BF16, FERRY_DTYPE_F16};
    for (size_t k = 0; k < 3; k++) {
        ferry_dtype d = dts[k];
        char name[64], dir[400], file[500], first[200];
        snprintf(name, sizeof name, "%s-%s", what, dt_name(d));
        new_dir(dir, sizeof dir, name);
        hf_ferry_info ferry = {"0123456789abcdef0123456789abcdef", 42};
        if (!tap_is_status(hf_llama_save(dir, m, src, d, 0, &ferry), FERRY_OK, "%s: hf_llama_save", name))
            continue;
        tap_ok(exists(dir, "model.safetensors") && !exists(dir, "model.safetensors.index.json"),
               "%s: one model.safetensors, no index", name);
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        sft_file *f = NULL;
        if (tap_is_status(sft_open(file, &f), FERRY_OK, "%s: a valid safetensors file", name)) {
            TAP_IS_INT(sft_count(f), tensor_count(m), "%s: every tensor of the model, no more", name);
            const sft_tensor *e = sft_find(f, "model.embed_tokens.weight");
            tap_ok(e && e->dtype == d && e->ndim == 2 && e->shape[0] == cfg->vocab_size && e->shape[1] == cfg->n_embd,
                   "%s: model.embed_tokens.weight is %s [V=%d, C=%d], the real rows of the %d", name, dt_name(d),
                   cfg->vocab_size, cfg->n_embd, cfg->padded_vocab_size);
            tap_ok((sft_find(f, "lm_head.weight") != NULL) == !cfg->tied_embeddings, "%s: lm_head.weight %s", name,
                   cfg->tied_embeddings ? "absent (tied)" : "present");
            tap_ok((sft_find(f, "model.layers.1.self_attn.k_proj.bias") != NULL) == cfg->qkv_bias,
                   "%s: q/k/v biases %s", name, cfg->qkv_bias ? "present" : "absent");
            const char *producer = sft_metadata(f, "producer"), *step = sft_metadata(f, "ferry_step");
            tap_ok(producer && step && strcmp(step, "42") == 0 && strcmp(sft_metadata(f, "format"), "pt") == 0,
                   "%s: metadata format pt, producer %s, ferry_step %s", name, producer ? producer : "-",
                   step ? step : "-");
            sft_close(f);
        }
        float **back = groups_alloc(m, NAN); /* the reader must write every element */
        if (tap_is_status(hf_llama_load(dir, m, back), FERRY_OK, "%s: hf_llama_load reads it back", name)) {
            size_t bad = count_wrong(m, src, back, d, first, sizeof first);
            tap_ok(bad == 0, "%s: every element is the saved value %s, padded rows and gaps zero (%zu wrong) %s",
                   name, d == FERRY_DTYPE_F32 ? "bit for bit" : "rounded to nearest even", bad, first);
            int gq, tq;
            llama_tensor_info q;
            llama_find_tensor(m, "model.layers.0.self_attn.q_proj.weight", &gq, &tq);
            llama_group_tensor(m, gq, tq, &q);
            const float *v = back[gq] + q.offset;
            if (d == FERRY_DTYPE_BF16)
                tap_ok(v[0] == 1.0f && v[1] == 1.0f + 0x1p-6f, "BF16 ties go to even: 1+2^-8 -> %.9g, 1+3*2^-8 -> %.9g",
                       (double)v[0], (double)v[1]);
            if (d == FERRY_DTYPE_F16)
                tap_ok(v[2] == 1.0f && v[3] == 1.0f + 0x1p-9f,
                       "F16 ties go to even: 1+2^-11 -> %.9g, 1+3*2^-11 -> %.9g", (double)v[2], (double)v[3]);
        }
        groups_free(m, back);
        check_config_file(dir, cfg, d, &ferry);
    }
    groups_free(m, src);
    llama_destroy(m);
}

/* The shards of a folder: count, and every one within the limit unless it
 * holds a single tensor. */
static int check_shards(const char *dir, uint64_t limit, int *files)
{
    DIR *d = opendir(dir);
    int ok = d != NULL;
    *files = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        int i, n;
        char tail[64];
        if (sscanf(e->d_name, "model-%5d-of-%5d.%63s", &i, &n, tail) != 3)
            continue;
        (*files)++;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        sft_file *f = NULL;
        if (sft_open(p, &f) != FERRY_OK) {
            ok = 0;
            continue;
        }
        uint64_t bytes = 0;
        for (size_t k = 0; k < sft_count(f); k++)
            bytes += sft_tensor_at(f, k)->nbytes;
        ok &= bytes <= limit || sft_count(f) == 1;
        sft_close(f);
    }
    if (d)
        closedir(d);
    return ok;
}

static void test_sharded(void)
{
    llama_config cfg = llama_cfg();
    llama_model *m = NULL;
    if (!tap_is_status(llama_create(&cfg, &m), FERRY_OK, "sharded: llama_create"))
        return;
    float **src = seeded_groups(m, seed + 1);
    char dir[400], p[600], first[200];
    new_dir(dir, sizeof dir, "sharded");
    const uint64_t limit = 20000; /* bf16: the embedding (38400 bytes) alone, layers in several pieces */
    /* A single file first: the sharded save over it must remove it. */
    tap_is_status(hf_llama_save(dir, m, src, FERRY_DTYPE_BF16, 0, NULL), FERRY_OK, "sharded: a single-file save first");
    if (tap_is_status(hf_llama_save(dir, m, src, FERRY_DTYPE_BF16, limit, NULL), FERRY_OK,
                      "sharded: hf_llama_save with shards of %llu bytes", (unsigned long long)limit)) {
        int files = 0, within = check_shards(dir, limit, &files);
        tap_ok(within && files > 2, "sharded: %d shard files, each within %llu bytes or one tensor", files,
               (unsigned long long)limit);
        tap_ok(!exists(dir, "model.safetensors") && exists(dir, "model.safetensors.index.json"),
               "sharded: the earlier model.safetensors is gone, the index is there");
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        char *text = read_text(p);
        cJSON *j = cJSON_Parse(text);
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
        const cJSON *total = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "metadata"),
                                                              "total_size");
        uint64_t want_total = 0;
        for (int g = 0; g < llama_num_groups(m); g++)
            for (int t = 0; t < llama_group_tensor_count(m, g); t++) {
                llama_tensor_info info;
                llama_group_tensor(m, g, t, &info);
                want_total += 2 * hf_elems(&info);
            }
        TAP_IS_INT(cJSON_GetArraySize(map), tensor_count(m), "sharded: the weight_map lists every tensor once");
        tap_ok(cJSON_IsNumber(total) && total->valuedouble == (double)want_total,
               "sharded: metadata.total_size is the tensors' %llu bytes", (unsigned long long)want_total);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(map, "model.embed_tokens.weight");
        char want_name[64];
        snprintf(want_name, sizeof want_name, "model-00001-of-%05d.safetensors", files);
        tap_ok(cJSON_IsString(e) && strcmp(e->valuestring, want_name) == 0, "sharded: the embedding is in %s",
               want_name);
        cJSON_Delete(j);
        free(text);
        float **back = groups_alloc(m, NAN);
        if (tap_is_status(hf_llama_load(dir, m, back), FERRY_OK, "sharded: hf_llama_load reads the shards")) {
            size_t bad = count_wrong(m, src, back, FERRY_DTYPE_BF16, first, sizeof first);
            tap_ok(bad == 0, "sharded: every element back as saved (%zu wrong) %s", bad, first);
        }
        groups_free(m, back);
    }
    /* The folder the refusals below edit: a copy of this one. */
    char edit[400];
    new_dir(edit, sizeof edit, "sharded-bigger");
    tap_is_status(hf_llama_save(edit, m, src, FERRY_DTYPE_BF16, limit * 2, NULL), FERRY_OK,
                  "sharded: a save with fewer, larger shards");
    tap_is_status(hf_llama_save(edit, m, src, FERRY_DTYPE_BF16, limit, NULL), FERRY_OK,
                  "sharded: and over it one with more, smaller ones");
    int files_small = 0, files_now = 0;
    check_shards(dir, limit, &files_small);
    check_shards(edit, limit, &files_now);
    TAP_IS_INT(files_now, files_small, "sharded: the larger shards of the earlier save are gone");
    /* And a single file over shards: the index and every shard go. */
    tap_is_status(hf_llama_save(edit, m, src, FERRY_DTYPE_F32, 0, NULL), FERRY_OK, "sharded: a single file over them");
    check_shards(edit, limit, &files_now);
    tap_ok(files_now == 0 && !exists(edit, "model.safetensors.index.json") && exists(edit, "model.safetensors"),
           "sharded: then only model.safetensors remains (%d shards left)", files_now);
    groups_free(m, src);
    llama_destroy(m);
}

/* ---- bad folders ---- */

/* Opens dir for m: must be refused with `want`, the message naming every
 * one of the words. */
static void expect_refused(const char *dir, const llama_model *m, ferry_status want, const char *w1, const char *w2,
                           const char *what)
{
    hf_llama_reader *r = NULL;
    ferry_status st = hf_llama_open(dir, m, &r);
    const char *msg = ferry_last_error();
    tap_is_status(st, want, "%s: hf_llama_open refuses it", what);
    tap_ok(st != FERRY_OK && strstr(msg, w1) && (!w2 || strstr(msg, w2)), "%s: the message names %s%s%s: \"%s\"",
           what, w1, w2 ? " and " : "", w2 ? w2 : "", msg);
    hf_llama_close(r);
}

static void copy_file(const char *src, const char *dst, long keep)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char buf[4096];
    for (long left = keep; in && out && left > 0;) {
        size_t got = fread(buf, 1, left < (long)sizeof buf ? (size_t)left : sizeof buf, in);
        if (got == 0)
            break;
        fwrite(buf, 1, got, out);
        left -= (long)got;
    }
    if (in)
        fclose(in);
    if (out)
        fclose(out);
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void copy_dir(const char *src, const char *dst)
{
    mkdir(dst, 0755);
    DIR *d = opendir(src);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, e->d_name);
        copy_file(a, b, file_size(a));
    }
    if (d)
        closedir(d);
}

static void test_bad_folders(void)
{
    llama_config cfg = llama_cfg(), qcfg = qwen_cfg();
    llama_model *m = NULL, *q = NULL;
    if (llama_create(&cfg, &m) != FERRY_OK || llama_create(&qcfg, &q) != FERRY_OK) {
        tap_ok(0, "bad folders: models: %s", ferry_last_error());
        llama_destroy(m);
        return;
    }
    char ours[400], bad[400], file[600], p[600];
    path_in(ours, sizeof ours, "llama-F32/model.safetensors");
    static const struct {
        sft_edit e;
        const char *w1, *w2, *what;
    } cases[] = {
        {{.drop = "model.layers.1.mlp.down_proj.weight"}, "has no tensor model.layers.1.mlp.down_proj.weight",
         "model.safetensors", "a missing tensor"},
        {{.reshape = "model.layers.0.self_attn.q_proj.weight", .s0 = 32, .s1 = 128}, "shape [32, 128]",
         "q_proj.weight", "a wrong shape"},
        {{.reshape = "model.embed_tokens.weight", .s0 = 150, .s1 = 128}, "model.embed_tokens.weight",
         "expects [300, 64]", "an embedding of another shape"},
        {{.retype = "model.norm.weight"}, "model.norm.weight is I32", "F32, BF16 or F16", "an I32 tensor"},
        {{.add = "model.layers.0.self_attn.rotary_scale", .add_rows = 2, .add_cols = 64}, "model.layers.0.self_attn.rotary_scale",
         "does not have", "an extra unknown tensor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad-%zu", i);
        new_dir(bad, sizeof bad, name);
        snprintf(file, sizeof file, "%s/model.safetensors", bad);
        if (tap_is_status(sft_rewrite(ours, file, &cases[i].e), FERRY_OK, "bad folder: %s written", cases[i].what))
            expect_refused(bad, m, FERRY_ERR_FORMAT, cases[i].w1, cases[i].w2, cases[i].what);
    }
    /* lm_head.weight in a tied model's file. */
    path_in(p, sizeof p, "qwen2-F32/model.safetensors");
    new_dir(bad, sizeof bad, "bad-tied-head");
    snprintf(file, sizeof file, "%s/model.safetensors", bad);
    sft_edit head = {.add = "lm_head.weight", .add_rows = 300, .add_cols = 64};
    if (tap_is_status(sft_rewrite(p, file, &head), FERRY_OK, "bad folder: a tied model's file with lm_head.weight"))
        expect_refused(bad, q, FERRY_ERR_FORMAT, "lm_head.weight", "tie_word_embeddings", "lm_head in a tied model");
    /* A rotary inv_freq buffer, as older transformers saved: skipped. */
    new_dir(bad, sizeof bad, "inv-freq");
    snprintf(file, sizeof file, "%s/model.safetensors", bad);
    sft_edit inv = {.add = "model.layers.0.self_attn.rotary_emb.inv_freq", .add_rows = 1, .add_cols = 8};
    hf_llama_reader *r = NULL;
    if (tap_is_status(sft_rewrite(ours, file, &inv), FERRY_OK, "a file with a rotary_emb.inv_freq buffer written"))
        tap_is_status(hf_llama_open(bad, m, &r), FERRY_OK, "it opens: the buffer is not a parameter");
    hf_llama_close(r);

    /* Truncated: half of model.safetensors. */
    new_dir(bad, sizeof bad, "bad-truncated");
    snprintf(file, sizeof file, "%s/model.safetensors", bad);
    copy_file(ours, file, file_size(ours) / 2);
    hf_llama_reader *rt = NULL;
    ferry_status st = hf_llama_open(bad, m, &rt);
    tap_ok((st == FERRY_ERR_FORMAT || st == FERRY_ERR_IO) && strstr(ferry_last_error(), "model.safetensors"),
           "a file cut at %ld bytes is refused naming it: %s: %s", file_size(ours) / 2, ferry_status_string(st),
           ferry_last_error());
    hf_llama_close(rt);

    /* An index naming a shard that is not there; one putting a tensor in the wrong shard. */
    char sharded[400];
    path_in(sharded, sizeof sharded, "sharded");
    path_in(bad, sizeof bad, "bad-no-shard");
    copy_dir(sharded, bad);
    DIR *d = opendir(bad);
    char gone[64] = "";
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, "model-00002-of-", 15) == 0)
            snprintf(gone, sizeof gone, "%.63s", e->d_name);
    if (d)
        closedir(d);
    snprintf(file, sizeof file, "%s/%s", bad, gone);
    tap_ok(gone[0] && unlink(file) == 0, "bad folder: shard %s removed", gone);
    expect_refused(bad, m, FERRY_ERR_FORMAT, gone, "not a file", "an index naming a missing shard");

    path_in(bad, sizeof bad, "bad-wrong-shard");
    copy_dir(sharded, bad);
    snprintf(file, sizeof file, "%s/model.safetensors.index.json", bad);
    char *text = read_text(file);
    cJSON *j = cJSON_Parse(text);
    cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    cJSON_ReplaceItemInObjectCaseSensitive(map, "model.norm.weight", cJSON_CreateString(gone));
    char *out = cJSON_Print(j);
    tap_ok(out && write_text(file, out), "bad folder: an index putting model.norm.weight in %s", gone);
    expect_refused(bad, m, FERRY_ERR_FORMAT, "puts tensor model.norm.weight", gone, "an index naming the wrong shard");
    free(out);
    cJSON_Delete(j);
    free(text);

    /* A deeper model's folder. */
    llama_config dc = cfg;
    dc.n_layer = 3;
    llama_model *deep = NULL;
    new_dir(bad, sizeof bad, "deep");
    st = llama_create(&dc, &deep);
    float **dg = deep ? seeded_groups(deep, seed + 2) : NULL;
    if (st == FERRY_OK)
        st = hf_llama_save(bad, deep, dg, FERRY_DTYPE_BF16, 0, NULL);
    if (tap_is_status(st, FERRY_OK, "a 3-layer llama saved to %s", bad)) {
        expect_refused(bad, m, FERRY_ERR_FORMAT, "model.layers.2.", "2-layer", "a deeper model's folder");
        path_in(p, sizeof p, "llama-F32");
        expect_refused(p, deep, FERRY_ERR_FORMAT, "has no tensor model.layers.2.", "3-layer",
                       "a shallower model's folder");
    }
    groups_free(deep, dg);
    llama_destroy(deep);

    /* The tensors fit a model of 8 heads of 8 with 4 key/value heads too;
     * config.json beside them says 4 heads of 16. */
    llama_config other = cfg;
    other.n_head = 8;
    other.head_dim = 8;
    other.n_kv_head = 4;
    llama_model *om = NULL;
    path_in(p, sizeof p, "llama-F32");
    if (tap_is_status(llama_create(&other, &om), FERRY_OK, "a model of 8 heads of 8 (the same tensor shapes)"))
        expect_refused(p, om, FERRY_ERR_FORMAT, "num_attention_heads 4", "config.json",
                       "a config.json that disagrees with the model");
    llama_destroy(om);
    /* torch_dtype against the tensors. */
    path_in(bad, sizeof bad, "bad-dtype");
    copy_dir(p, bad);
    llama_config same = cfg;
    snprintf(file, sizeof file, "%s/config.json", bad);
    tap_is_status(hf_llama_write_config(file, &same, FERRY_DTYPE_BF16, NULL), FERRY_OK,
                  "a config.json saying bfloat16 beside F32 weights");
    expect_refused(bad, m, FERRY_ERR_FORMAT, "torch_dtype \"bfloat16\"", "as F32", "torch_dtype against the weights");

    new_dir(bad, sizeof bad, "empty");
    expect_refused(bad, m, FERRY_ERR_IO, "neither model.safetensors", NULL, "an empty folder");
    llama_destroy(q);
    llama_destroy(m);
}

/* ---- the writer's rules ---- */

static void test_writer_rules(void)
{
    llama_config cfg = llama_cfg();
    llama_model *m = NULL;
    if (!tap_is_status(llama_create(&cfg, &m), FERRY_OK, "writer: llama_create"))
        return;
    float **src = seeded_groups(m, seed + 3);
    char dir[400];
    new_dir(dir, sizeof dir, "writer");
    hf_llama_writer *w = NULL;
    if (tap_is_status(hf_llama_save_begin(dir, m, FERRY_DTYPE_BF16, 0, NULL, &w), FERRY_OK, "writer: begins")) {
        TAP_IS_STATUS(hf_llama_save_group(w, 2, src[2]), FERRY_OK, "writer: group 2 first (any order)");
        TAP_IS_STATUS(hf_llama_save_group(w, 2, src[2]), FERRY_ERR_STATE, "writer: group 2 again is refused");
        TAP_IS_STATUS(hf_llama_save_group(w, 0, src[0]), FERRY_OK, "writer: group 0");
        ferry_status st = hf_llama_save_commit(w);
        tap_ok(st == FERRY_ERR_STATE && strstr(ferry_last_error(), "group 1 (block 0)"),
               "writer: a commit with groups 1 and 3 missing is refused naming the first: %s", ferry_last_error());
        tap_ok(!exists(dir, "model.safetensors") && !exists(dir, ".model.safetensors.tmp") &&
                   !exists(dir, "config.json"),
               "writer: and leaves nothing in the folder");
    }
    w = NULL;
    if (tap_is_status(hf_llama_save_begin(dir, m, FERRY_DTYPE_F32, 1000, NULL, &w), FERRY_OK, "writer: begins again")) {
        for (int g = 0; g < llama_num_groups(m); g++)
            hf_llama_save_group(w, g, src[g]);
        hf_llama_save_abort(w);
        DIR *d = opendir(dir);
        int left = 0;
        for (struct dirent *e; d && (e = readdir(d));)
            left += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
        if (d)
            closedir(d);
        TAP_IS_INT(left, 0, "writer: an abort after every group leaves no file");
    }
    TAP_IS_STATUS(hf_llama_save_begin(dir, m, FERRY_DTYPE_I32, 0, NULL, &w), FERRY_ERR_INVALID_ARGUMENT,
                  "writer: I32 weights are refused");
    llama_config biased = cfg;
    biased.qkv_bias = true;
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ferry_status st = hf_llama_write_config(p, &biased, FERRY_DTYPE_F32, NULL);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "biases"),
           "writer: a llama config with q/k/v biases cannot be said: %s", ferry_last_error());
    groups_free(m, src);
    llama_destroy(m);
}

/* ---- config.json ---- */

static void test_config_refusals(void)
{
    static const struct {
        const char *type, *extra, *w1, *w2;
    } cases[] = {
        {"bert", "", "\"model_type\"", "\"qwen2\""},
        {"llama", ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", "rope_scaling", "\"yarn\""},
        {"llama", ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}", "rope_scaling", "\"dynamic\""},
        {"llama", ", \"rope_scaling\": {\"rope_type\": \"longrope\"}", "rope_scaling", "\"longrope\""},
        {"llama", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"high_freq_factor\": 4.0, "
                  "\"original_max_position_embeddings\": 8192}", "rope_scaling", "low_freq_factor"},
        {"llama", ", \"rope_scaling\": \"linear\"", "rope_scaling", "the string \"linear\""},
        {"llama", ", \"hidden_act\": \"gelu\"", "\"hidden_act\"", "\"gelu\""},
        {"llama", ", \"attention_bias\": true", "\"attention_bias\" is true", "o_proj"},
        {"llama", ", \"mlp_bias\": true", "\"mlp_bias\" is true", "false"},
        {"llama", ", \"pretraining_tp\": 2", "\"pretraining_tp\" is 2", "supports 1"},
        {"llama", ", \"partial_rotary_factor\": 0.5", "partial_rotary_factor", "0.5"},
        {"llama", ", \"quantization_config\": {\"quant_method\": \"gptq\"}", "quantization_config", "unquantized"},
        {"llama", ", \"tie_word_embeddings\": \"yes\"", "tie_word_embeddings", "the string \"yes\""},
        {"llama", ", \"torch_dtype\": \"float64\"", "torch_dtype", "float64"},
        {"llama", ", \"eos_token_id\": [2.5]", "eos_token_id", "an array"},
        {"llama", ", \"num_key_value_heads\": 3", "num_key_value_heads = 3", "divide"},
        {"llama", ", \"head_dim\": \"16\"", "\"head_dim\"", "the string \"16\""},
        {"llama", ", \"rms_norm_eps\": 0", "rms_norm_eps", "> 0"},
        {"llama", ", \"bos_token_id\": 300", "bos_token_id 300", "vocab_size = 300"},
        {"llama", ", \"vocab_size\": 300", "\"vocab_size\" twice", NULL},
        {"mistral", ", \"sliding_window\": 0", "sliding_window", "null (no window)"},
        {"qwen2", ", \"use_sliding_window\": true, \"sliding_window\": 32, \"max_window_layers\": 1",
         "use_sliding_window", "1 of the 2 layers"},
        {"qwen2", ", \"use_sliding_window\": true, \"sliding_window\": 32, \"layer_types\": [\"full_attention\", "
                  "\"sliding_attention\"]", "1 of the 2 layers", "layer_types"},
        {"qwen2", ", \"use_mrope\": true", "use_mrope", "multimodal"},
    };
    char p[400], json[1024];
    path_in(p, sizeof p, "config_case.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json, "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                 "\"hidden_size\": 64, \"intermediate_size\": 96, \"vocab_size\": 300%s}", cases[i].type,
                 cases[i].extra);
        write_text(p, json);
        llama_config c;
        ferry_status st = hf_llama_read_config(p, &c);
        const char *m = ferry_last_error();
        tap_is_status(st, FERRY_ERR_FORMAT, "config %s%s is refused", cases[i].type, cases[i].extra);
        tap_ok(st != FERRY_OK && strstr(m, cases[i].w1) && (!cases[i].w2 || strstr(m, cases[i].w2)),
               "and the message names %s%s%s: %s", cases[i].w1, cases[i].w2 ? " and " : "",
               cases[i].w2 ? cases[i].w2 : "", m);
    }
    write_text(p, "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                  "\"hidden_size\": 64, \"intermediate_size\": 96}");
    llama_config c;
    ferry_status st = hf_llama_read_config(p, &c);
    tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "no \"vocab_size\""),
           "a config without vocab_size is refused naming it: %s", ferry_last_error());
    path_in(p, sizeof p, "no-such-config.json");
    TAP_IS_STATUS(hf_llama_read_config(p, &c), FERRY_ERR_IO, "a missing config.json is FERRY_ERR_IO");
}

/* Configs that read, with transformers' defaults and spellings. */
static void test_config_accepted(void)
{
    static const struct {
        const char *type, *extra, *what;
        int kv, hs, window, bos, eos, maxT;
        llama_rope_kind rope;
        float theta;
        ferry_dtype dtype;
    } cases[] = {
        {"llama", "", "llama defaults", 4, 16, 0, 1, 2, 2048, LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_AUTO},
        {"llama", ", \"num_key_value_heads\": null, \"head_dim\": null, \"eos_token_id\": [5, 6], \"bos_token_id\": "
                  "null", "nulls and an eos list", 4, 16, 0, -1, 5, 2048, LLAMA_ROPE_DEFAULT, 10000.0f,
         FERRY_DTYPE_AUTO},
        {"llama", ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 5000.0}, "
                  "\"dtype\": \"bfloat16\"", "transformers 5's rope_parameters and dtype", 4, 16, 0, 1, 2, 2048,
         LLAMA_ROPE_LINEAR, 5000.0f, FERRY_DTYPE_BF16},
        {"llama", ", \"rope_scaling\": {\"rope_type\": \"default\"}, \"head_dim\": 32", "rope_type default, head_dim",
         4, 32, 0, 1, 2, 2048, LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_AUTO},
        {"mistral", ", \"num_key_value_heads\": 2", "mistral's default window", 2, 16, 4096, 1, 2, 131072,
         LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_AUTO},
        {"mistral", ", \"num_key_value_heads\": 2, \"sliding_window\": null, \"attention_bias\": false",
         "mistral without a window", 2, 16, 0, 1, 2, 131072, LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_AUTO},
        {"qwen2", ", \"num_key_value_heads\": 2, \"use_sliding_window\": true, \"sliding_window\": 32, "
                  "\"max_window_layers\": 0", "qwen2 with a window on every layer", 2, 16, 32, -1, -1, 32768,
         LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_AUTO},
        {"qwen2", ", \"num_key_value_heads\": 2, \"use_sliding_window\": true, \"sliding_window\": 32, "
                  "\"max_window_layers\": 2", "qwen2 whose window starts past the last layer", 2, 16, 0, -1, -1, 32768,
         LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_AUTO},
        {"qwen2", ", \"num_key_value_heads\": 2, \"use_sliding_window\": false, \"sliding_window\": 32, "
                  "\"max_window_layers\": 0, \"torch_dtype\": \"float16\"", "qwen2 with use_sliding_window false", 2,
         16, 0, -1, -1, 32768, LLAMA_ROPE_DEFAULT, 10000.0f, FERRY_DTYPE_F16},
    };
    char p[400], json[1024];
    path_in(p, sizeof p, "config_ok.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json, "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                 "\"hidden_size\": 64, \"intermediate_size\": 96, \"vocab_size\": 300, \"unknown_key\": [1, 2]%s}",
                 cases[i].type, cases[i].extra);
        write_text(p, json);
        llama_config c;
        ferry_dtype td;
        if (!tap_is_status(hf_llama_read_config_ferry(p, &c, &td, NULL), FERRY_OK, "%s reads", cases[i].what))
            continue;
        tap_ok(c.n_kv_head == cases[i].kv && c.head_dim == cases[i].hs && c.sliding_window == cases[i].window &&
                   c.bos_token_id == cases[i].bos && c.eos_token_id == cases[i].eos && c.max_seq_len == cases[i].maxT &&
                   c.rope_scaling.kind == cases[i].rope && c.rope_theta == cases[i].theta && td == cases[i].dtype &&
                   c.padded_vocab_size == 384 && c.qkv_bias == (strcmp(cases[i].type, "qwen2") == 0),
               "%s: kv %d hs %d window %d bos %d eos %d maxT %d rope %d theta %g dtype %d Vp %d bias %d", cases[i].what,
               c.n_kv_head, c.head_dim, c.sliding_window, c.bos_token_id, c.eos_token_id, c.max_seq_len,
               (int)c.rope_scaling.kind, (double)c.rope_theta, (int)td, c.padded_vocab_size, c.qkv_bias);
    }
}

/* config.json as the published checkpoints have it. */
static const char llama32_1b[] =
    "{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": 128001,\n  \"head_dim\": 64,\n"
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 2048,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 8192,\n  \"max_position_embeddings\": 131072,\n  \"mlp_bias\": false,\n"
    "  \"model_type\": \"llama\",\n  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 16,\n"
    "  \"num_key_value_heads\": 8,\n  \"pretraining_tp\": 1,\n  \"rms_norm_eps\": 1e-05,\n  \"rope_scaling\": {\n"
    "    \"factor\": 32.0,\n    \"high_freq_factor\": 4.0,\n    \"low_freq_factor\": 1.0,\n"
    "    \"original_max_position_embeddings\": 8192,\n    \"rope_type\": \"llama3\"\n  },\n"
    "  \"rope_theta\": 500000.0,\n  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.45.0.dev0\",\n  \"use_cache\": true,\n  \"vocab_size\": 128256\n}\n";
static const char qwen25_05b[] =
    "{\n  \"architectures\": [\n    \"Qwen2ForCausalLM\"\n  ],\n  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151643,\n  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 896,\n  \"initializer_range\": 0.02,\n  \"intermediate_size\": 4864,\n"
    "  \"max_position_embeddings\": 32768,\n  \"max_window_layers\": 24,\n  \"model_type\": \"qwen2\",\n"
    "  \"num_attention_heads\": 14,\n  \"num_hidden_layers\": 24,\n  \"num_key_value_heads\": 2,\n"
    "  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 1000000.0,\n  \"sliding_window\": 32768,\n"
    "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.40.1\",\n"
    "  \"use_cache\": true,\n  \"use_mrope\": false,\n  \"use_sliding_window\": false,\n  \"vocab_size\": 151936\n}\n";
static const char mistral_7b[] =
    "{\n  \"architectures\": [\n    \"MistralForCausalLM\"\n  ],\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
    "  \"hidden_act\": \"silu\",\n  \"hidden_size\": 4096,\n  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 14336,\n  \"max_position_embeddings\": 32768,\n  \"model_type\": \"mistral\",\n"
    "  \"num_attention_heads\": 32,\n  \"num_hidden_layers\": 32,\n  \"num_key_value_heads\": 8,\n"
    "  \"rms_norm_eps\": 1e-05,\n  \"rope_theta\": 10000.0,\n  \"sliding_window\": 4096,\n"
    "  \"tie_word_embeddings\": false,\n  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.34.0.dev0\",\n"
    "  \"use_cache\": true,\n  \"vocab_size\": 32000\n}\n";

static void test_published_configs(void)
{
    llama_config l = base_config("llama"), q = base_config("qwen2"), m = base_config("mistral");
    /* Their fields as the files give them, typed here from the files. */
    l.n_layer = 16, l.n_head = 32, l.n_kv_head = 8, l.n_embd = 2048, l.head_dim = 64, l.intermediate_size = 8192;
    l.vocab_size = l.padded_vocab_size = 128256, l.max_seq_len = 131072, l.rms_norm_eps = 1e-5f;
    l.rope_theta = 500000.0f, l.rope_scaling = (llama_rope_scaling){LLAMA_ROPE_LLAMA3, 32.0f, 1.0f, 4.0f, 8192};
    l.tied_embeddings = true, l.bos_token_id = 128000, l.eos_token_id = 128001;
    q.n_layer = 24, q.n_head = 14, q.n_kv_head = 2, q.n_embd = 896, q.head_dim = 64, q.intermediate_size = 4864;
    q.vocab_size = q.padded_vocab_size = 151936, q.max_seq_len = 32768, q.rms_norm_eps = 1e-6f;
    q.rope_theta = 1000000.0f, q.qkv_bias = true, q.tied_embeddings = true, q.bos_token_id = 151643;
    q.eos_token_id = 151643;
    m.n_layer = 32, m.n_head = 32, m.n_kv_head = 8, m.n_embd = 4096, m.head_dim = 128, m.intermediate_size = 14336;
    m.vocab_size = m.padded_vocab_size = 32000, m.max_seq_len = 32768, m.rms_norm_eps = 1e-5f;
    m.sliding_window = 4096;
    static const struct {
        const char *name, *text, *preset;
    } files[] = {
        {"Llama 3.2 1B", llama32_1b, "llama3.2-1b"},
        {"Qwen2.5 0.5B", qwen25_05b, "qwen2.5-0.5b"},
        {"Mistral 7B v0.1", mistral_7b, "mistral-7b"},
    };
    const llama_config *want[] = {&l, &q, &m};
    char p[400], why[128];
    path_in(p, sizeof p, "published.json");
    for (int i = 0; i < 3; i++) {
        write_text(p, files[i].text);
        llama_config c, preset;
        ferry_dtype td;
        if (!tap_is_status(hf_llama_read_config_ferry(p, &c, &td, NULL), FERRY_OK, "%s's config.json reads",
                           files[i].name))
            continue;
        tap_ok(same_config(&c, want[i], why, sizeof why) && td == FERRY_DTYPE_BF16,
               "%s: every field as the file gives it, torch_dtype bfloat16 (%s)", files[i].name, why);
        if (llama_config_preset(files[i].preset, &preset) == FERRY_OK)
            tap_ok(same_config(&c, &preset, why, sizeof why), "%s: the same as the %s preset (%s)", files[i].name,
                   files[i].preset, why);
    }
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int main(void)
{
    tap_diag("seed %llu", (unsigned long long)seed);
    if (!mkdtemp(work))
        tap_plan_skip("cannot create a temporary directory");
    llama_config cl = llama_cfg(), cq = qwen_cfg(), cm = mistral_cfg();
    test_round_trip("llama", &cl);
    test_round_trip("qwen2", &cq);
    test_round_trip("mistral", &cm);
    test_sharded();
    test_bad_folders();
    test_writer_rules();
    test_config_refusals();
    test_config_accepted();
    test_published_configs();
    nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tap_done();
}
