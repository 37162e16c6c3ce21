/* Hugging Face GPT-2 checkpoints: name mapping, the Conv1D transpose and the
 * vocabulary rows, on top of the safetensors reader and writer. */
#include "train/hf_checkpoint.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "optim/half.h"
#include "train/bpe.h"
#include "train/hf_json.h"
#include "train/safetensors.h"

/* Our [rows, cols] tensor to its HF form (transposed, or only the first rows). */
static void to_hf(const gpt2_tensor_info *t, const float *ours, float *hf)
{
    int rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
    if (t->hf_transposed) {
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                hf[(size_t)c * rows + r] = ours[(size_t)r * cols + c];
        return;
    }
    size_t keep = t->hf_rows_prefix ? (size_t)t->hf_shape[0] * cols : t->numel;
    memcpy(hf, ours, keep * sizeof(float));
}

static void from_hf(const gpt2_tensor_info *t, const float *hf, float *ours)
{
    int rows = t->ndim == 2 ? t->shape[0] : 1, cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
    if (t->hf_transposed) {
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                ours[(size_t)r * cols + c] = hf[(size_t)c * rows + r];
        return;
    }
    size_t keep = t->hf_rows_prefix ? (size_t)t->hf_shape[0] * cols : t->numel;
    memcpy(ours, hf, keep * sizeof(float));
    memset(ours + keep, 0, (t->numel - keep) * sizeof(float));
}

static size_t hf_numel(const gpt2_tensor_info *t)
{
    return t->ndim == 2 ? (size_t)t->hf_shape[0] * (size_t)t->hf_shape[1] : (size_t)t->hf_shape[0];
}

/* What a GPT-2 config.json looks like, for messages. */
#define GPT2_EXAMPLE "{\"n_layer\": 12, ...}"

static int count_tensors(const gpt2_model *m)
{
    int n = 0;
    for (int g = 0; g < gpt2_num_groups(m); g++)
        n += gpt2_group_tensor_count(m, g);
    return n;
}

static ferry_status write_config(const char *dir, const gpt2_model *m, const hf_ferry_info *ferry)
{
    const gpt2_config *c = gpt2_get_config(m);
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNumberToObject(j, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq_len);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    if (c->vocab_size > (int)TOK_GPT2_EOT) { /* GPT-2's <|endoftext|>, where the vocabulary has it */
        cJSON_AddNumberToObject(j, "bos_token_id", TOK_GPT2_EOT);
        cJSON_AddNumberToObject(j, "eos_token_id", TOK_GPT2_EOT);
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    hf_json_add_ferry(j, ferry);
    char path[4096];
    ferry_status st = hf_path(path, sizeof path, dir, "config.json");
    if (st == FERRY_OK)
        st = hf_json_write(path, j);
    cJSON_Delete(j);
    return st;
}

ferry_status hf_save(const char *dir, const gpt2_model *m, float *const *groups, const hf_ferry_info *ferry)
{
    int n = count_tensors(m);
    sft_tensor *ts = calloc((size_t)n, sizeof *ts);
    gpt2_tensor_info *info = calloc((size_t)n, sizeof *info);
    int *group_of = calloc((size_t)n, sizeof *group_of);
    if (!ts || !info || !group_of) {
        free(ts); free(info); free(group_of);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "saving model weights: out of memory");
    }
    int k = 0;
    for (int g = 0; g < gpt2_num_groups(m); g++)
        for (int t = 0; t < gpt2_group_tensor_count(m, g); t++, k++) {
            gpt2_group_tensor(m, g, t, &info[k]);
            group_of[k] = g;
            ts[k].name = info[k].name;
            ts[k].dtype = FERRY_DTYPE_F32;
            ts[k].ndim = info[k].ndim;
            ts[k].shape[0] = info[k].hf_shape[0];
            ts[k].shape[1] = info[k].ndim == 2 ? info[k].hf_shape[1] : 0;
        }
    char path[4096];
    char step[24];
    const char *meta[8];
    size_t n_meta = hf_ferry_metadata(ferry, "ferry train_gpt2", meta, step);
    sft_writer *w = NULL;
    ferry_status st = hf_path(path, sizeof path, dir, "model.safetensors");
    if (st == FERRY_OK)
        st = sft_writer_begin(path, ts, (size_t)n, meta, n_meta, &w);
    for (k = 0; k < n && st == FERRY_OK; k++) {
        size_t count = hf_numel(&info[k]);
        float *buf = malloc(count * sizeof(float));
        if (!buf) {
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "saving %s: out of memory", info[k].name);
            break;
        }
        to_hf(&info[k], groups[group_of[k]] + info[k].offset, buf);
        st = sft_writer_put(w, (size_t)k, 0, buf, count * sizeof(float));
        free(buf);
    }
    if (st == FERRY_OK)
        st = sft_writer_commit(w);
    else
        sft_writer_abort(w);
    free(ts); free(info); free(group_of);
    return st == FERRY_OK ? write_config(dir, m, ferry) : st;
}

/* "transformer.h.0.ln_1.weight" may be stored as "h.0.ln_1.weight". */
static const sft_tensor *find_hf(const sft_file *f, const char *name)
{
    const sft_tensor *t = sft_find(f, name);
    if (!t && strncmp(name, "transformer.", 12) == 0)
        t = sft_find(f, name + 12);
    return t;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Buffers and tied heads that a GPT-2 file may carry and we rebuild
 * ("h.0.attn.bias" is the causal mask; "h.0.attn.c_attn.bias" is a weight). */
static bool ignorable(const char *name)
{
    return strcmp(name, "lm_head.weight") == 0 || ends_with(name, ".attn.bias") ||
           ends_with(name, ".attn.masked_bias");
}

static ferry_status read_tensor(const char *path, const sft_tensor *t, const gpt2_tensor_info *info, float *out)
{
    int64_t want[2] = {info->hf_shape[0], info->ndim == 2 ? info->hf_shape[1] : 0};
    if (t->ndim != info->ndim || t->shape[0] != want[0] || (info->ndim == 2 && t->shape[1] != want[1])) {
        char got_s[160], want_s[64];
        return err_set(FERRY_ERR_FORMAT, "'%s': tensor %s has shape %s, the model expects %s; is the file for "
                       "another GPT-2 size?", path, info->name, sft_format_shape(t->shape, t->ndim, got_s, sizeof got_s),
                       sft_format_shape(want, info->ndim, want_s, sizeof want_s));
    }
    size_t count = hf_numel(info);
    float *hf = malloc(count * sizeof(float));
    if (!hf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "loading %s: out of memory", info->name);
    ferry_status st = FERRY_OK;
    if (t->dtype == FERRY_DTYPE_F32)
        memcpy(hf, t->data, count * sizeof(float));
    else if (t->dtype == FERRY_DTYPE_BF16 || t->dtype == FERRY_DTYPE_F16)
        st = half_convert(hf, FERRY_DTYPE_F32, t->data, t->dtype, count);
    else
        st = err_set(FERRY_ERR_FORMAT, "'%s': tensor %s is %s; GPT-2 weights must be F32, F16 or BF16", path,
                     info->name, sft_dtype_name(t->dtype));
    if (st == FERRY_OK)
        from_hf(info, hf, out + info->offset);
    free(hf);
    return st;
}

ferry_status hf_load(const char *path, const gpt2_model *m, float *const *groups)
{
    sft_file *f = NULL;
    ferry_status st = sft_open(path, &f);
    if (st != FERRY_OK)
        return st;
    int used = 0; /* tensors read, for the count check below */
    for (int g = 0; g < gpt2_num_groups(m) && st == FERRY_OK; g++) {
        memset(groups[g], 0, gpt2_group_numel(m, g) * sizeof(float));
        for (int t = 0; t < gpt2_group_tensor_count(m, g) && st == FERRY_OK; t++) {
            gpt2_tensor_info info;
            gpt2_group_tensor(m, g, t, &info);
            const sft_tensor *tensor = find_hf(f, info.name);
            if (!tensor)
                st = err_set(FERRY_ERR_FORMAT, "'%s' has no tensor %s: it is not a GPT-2 checkpoint of this shape",
                             path, info.name);
            else if ((st = read_tensor(path, tensor, &info, groups[g])) == FERRY_OK)
                used++;
        }
    }
    for (size_t i = 0; i < sft_count(f) && st == FERRY_OK; i++) {
        const sft_tensor *t = sft_tensor_at(f, i);
        int gi, ti;
        char full[256];
        snprintf(full, sizeof full, "transformer.%s", t->name);
        if (!ignorable(t->name) && gpt2_find_tensor(m, t->name, &gi, &ti) != FERRY_OK &&
            gpt2_find_tensor(m, full, &gi, &ti) != FERRY_OK)
            st = err_set(FERRY_ERR_FORMAT, "'%s' has a tensor %s that this GPT-2 does not have (a deeper model?)",
                         path, t->name);
    }
    sft_close(f);
    (void)used;
    return st;
}

/* config[key] as a whole number in 1..2^30; `fallback` when absent (or
 * FERRY_ERR_FORMAT if fallback < 0: the key is required). */
static ferry_status json_int(const char *path, const cJSON *j, const char *key, int fallback, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) {
        *out = fallback;
        return fallback >= 0 ? FERRY_OK
                             : err_set(FERRY_ERR_FORMAT, "model config '%s' has no \"%s\"; a GPT-2 config.json gives "
                                       "n_layer, n_head and n_embd as whole numbers", path, key);
    }
    if (!hf_json_whole(v, 1, (double)(1 << 30))) {
        char what[64];
        hf_json_describe(v, what, sizeof what);
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s, not a whole number from 1 to 2^30; "
                       "write it as a JSON number, e.g. \"%s\": 12", path, key, what, key);
    }
    *out = (int)v->valuedouble;
    return FERRY_OK;
}

/* A key ferry reads that must hold one value (what its GPT-2 computes), or
 * be absent. */
static ferry_status expect_string(const char *path, const cJSON *j, const char *key, const char *const *allowed,
                                  const char *says)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v)
        return FERRY_OK;
    for (int i = 0; cJSON_IsString(v) && allowed[i]; i++)
        if (strcmp(v->valuestring, allowed[i]) == 0)
            return FERRY_OK;
    char what[64];
    hf_json_describe(v, what, sizeof what);
    return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s; ferry implements only \"%s\" (%s)", path, key,
                   what, allowed[0], says);
}

static ferry_status expect_bool(const char *path, const cJSON *j, const char *key, bool want, const char *says)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || (cJSON_IsBool(v) && (bool)cJSON_IsTrue(v) == want))
        return FERRY_OK;
    char what[64];
    hf_json_describe(v, what, sizeof what);
    return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s; ferry implements only %s (%s)", path, key,
                   what, want ? "true" : "false", says);
}

/* torch_dtype, when given, names a type GPT-2 weights are stored in; *dtype
 * gets it (F32 when absent; *given says whether it was). */
static ferry_status read_torch_dtype(const char *path, const cJSON *j, ferry_dtype *dtype, bool *given)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "torch_dtype");
    *dtype = FERRY_DTYPE_F32;
    *given = v != NULL;
    if (!v || (cJSON_IsString(v) && hf_torch_dtype_parse(v->valuestring, dtype)))
        return FERRY_OK;
    char what[64];
    hf_json_describe(v, what, sizeof what);
    return err_set(FERRY_ERR_FORMAT, "model config '%s': \"torch_dtype\" is %s; GPT-2 weights are \"float32\", "
                   "\"float16\" or \"bfloat16\"", path, what);
}

/* A token id key (bos_token_id, eos_token_id): a whole number, when given
 * (not checked against the vocabulary: ferry before this one wrote GPT-2's
 * 50256 for smaller vocabularies too, and trains without reading them). */
static ferry_status check_token_id(const char *path, const cJSON *j, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v) ||
        (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2147483648.0 &&
         v->valuedouble == (double)(int32_t)v->valuedouble))
        return FERRY_OK;
    char what[64];
    hf_json_describe(v, what, sizeof what);
    return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s, not a token id (a whole number >= 0); "
                   "GPT-2's is 50256", path, key, what);
}

static ferry_status check_semantics(const char *path, const cJSON *j, int n_embd, int n_positions)
{
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    static const char *const gpt2[] = {"gpt2", NULL};
    ferry_status st = expect_string(path, j, "activation_function", gelu, "GPT-2's tanh GELU");
    if (st == FERRY_OK) st = expect_string(path, j, "model_type", gpt2, "GPT-2");
    if (st == FERRY_OK) st = expect_bool(path, j, "tie_word_embeddings", true, "the output layer is wte");
    if (st == FERRY_OK) st = expect_bool(path, j, "scale_attn_weights", true, "attention scaled by 1/sqrt(head size)");
    if (st == FERRY_OK) st = expect_bool(path, j, "scale_attn_by_inverse_layer_idx", false, "no per-layer scaling");
    if (st == FERRY_OK) st = expect_bool(path, j, "add_cross_attention", false, "a decoder without cross-attention");
    if (st == FERRY_OK) st = check_token_id(path, j, "bos_token_id");
    if (st == FERRY_OK) st = check_token_id(path, j, "eos_token_id");
    ferry_dtype dtype;
    bool given;
    if (st == FERRY_OK) st = read_torch_dtype(path, j, &dtype, &given);
    if (st != FERRY_OK)
        return st;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (eps && !(cJSON_IsNumber(eps) && fabs(eps->valuedouble - 1e-5) <= 1e-12)) {
        char what[64];
        hf_json_describe(eps, what, sizeof what);
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"layer_norm_epsilon\" is %s; ferry's layer norm uses "
                       "1e-05 (GPT-2's), and a model trained with another would compute differently here", path, what);
    }
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    if (inner && !cJSON_IsNull(inner) && !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * n_embd)) {
        char what[64];
        hf_json_describe(inner, what, sizeof what);
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"n_inner\" is %s; ferry's MLP is 4 x n_embd = %d wide "
                       "(null means that too)", path, what, 4 * n_embd);
    }
    int ctx = 0;
    if (cJSON_GetObjectItemCaseSensitive(j, "n_ctx")) {
        if ((st = json_int(path, j, "n_ctx", -1, &ctx)) != FERRY_OK)
            return st;
        if (ctx != n_positions)
            return err_set(FERRY_ERR_FORMAT, "model config '%s': \"n_ctx\" %d differs from \"n_positions\" %d; "
                           "GPT-2 has one context length: make them equal", path, ctx, n_positions);
    }
    static const char *const rates[] = {"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, rates[i]);
        if (v && !(cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1)) {
            char what[64];
            hf_json_describe(v, what, sizeof what);
            return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s, not a rate in [0, 1)", path, rates[i],
                           what);
        }
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    if (arch) {
        bool lm = false;
        for (const cJSON *a = cJSON_IsArray(arch) ? arch->child : NULL; a; a = a->next)
            lm |= cJSON_IsString(a) && (strcmp(a->valuestring, "GPT2LMHeadModel") == 0 ||
                                         strcmp(a->valuestring, "GPT2Model") == 0);
        if (!lm)
            return err_set(FERRY_ERR_FORMAT, "model config '%s': \"architectures\" does not name GPT2LMHeadModel "
                           "(or GPT2Model); ferry trains GPT-2's language model", path);
    }
    return FERRY_OK;
}

ferry_status hf_read_config_ferry(const char *config_json, gpt2_config *out, hf_ferry_info *ferry)
{
    hf_ferry_info none;
    if (!ferry)
        ferry = &none;
    cJSON *j = NULL;
    ferry_status st = hf_json_read_object(config_json, "model config", GPT2_EXAMPLE, &j);
    if (st != FERRY_OK)
        return st;
    int L = 0, H = 0, C = 0, V = 0, T = 0;
    st = json_int(config_json, j, "n_layer", -1, &L);
    if (st == FERRY_OK)
        st = json_int(config_json, j, "n_head", -1, &H);
    if (st == FERRY_OK)
        st = json_int(config_json, j, "n_embd", -1, &C);
    if (st == FERRY_OK)
        st = json_int(config_json, j, "vocab_size", 50257, &V);
    if (st == FERRY_OK)
        st = json_int(config_json, j, "n_positions", 1024, &T);
    if (st == FERRY_OK)
        st = check_semantics(config_json, j, C, T);
    if (st == FERRY_OK)
        st = hf_json_read_ferry(config_json, j, ferry);
    cJSON_Delete(j);
    if (st != FERRY_OK)
        return st;
    st = gpt2_config_from_fields(L, H, C, V, 0, T, out);
    return st == FERRY_OK ? FERRY_OK : err_wrap(st, "model config '%s'", config_json);
}

ferry_status hf_check_torch_dtype(const char *config_json, const char *safetensors)
{
    cJSON *j = NULL;
    ferry_dtype want;
    bool given = false;
    ferry_status st = hf_json_read_object(config_json, "model config", GPT2_EXAMPLE, &j);
    if (st == FERRY_OK)
        st = read_torch_dtype(config_json, j, &want, &given);
    cJSON_Delete(j);
    if (st != FERRY_OK || !given)
        return st;
    sft_file *f = NULL;
    if ((st = sft_open(safetensors, &f)) != FERRY_OK)
        return st;
    const char *said = hf_torch_dtype_name(want);
    for (size_t i = 0; i < sft_count(f) && st == FERRY_OK; i++) {
        const sft_tensor *t = sft_tensor_at(f, i);
        if (!ignorable(t->name) && t->dtype != want)
            st = err_set(FERRY_ERR_FORMAT, "model config '%s' says torch_dtype \"%s\", but '%s' stores %s as %s: "
                         "the config is not the one saved with these weights; put back the config.json saved with "
                         "them (or set torch_dtype to the weights' type)", config_json, said, safetensors, t->name,
                         sft_dtype_name(t->dtype));
    }
    sft_close(f);
    return st;
}

ferry_status hf_read_config(const char *config_json, gpt2_config *out)
{
    return hf_read_config_ferry(config_json, out, NULL);
}

ferry_status hf_read_ferry_meta(const char *safetensors, hf_ferry_info *out)
{
    return hf_read_weights_identity(safetensors, out, NULL, 0, 1);
}

ferry_status hf_read_weights_identity(const char *safetensors, hf_ferry_info *out, sft_checksum *sum, int part,
                                      int parts)
{
    sft_file *f = NULL;
    out->run[0] = '\0';
    out->step = -1;
    ferry_status st = sft_open(safetensors, &f);
    if (st != FERRY_OK)
        return st;
    if (sum && (st = sft_data_checksum_part(f, part, parts, sum)) != FERRY_OK) {
        sft_close(f);
        return st;
    }
    const char *run = sft_metadata(f, "ferry_run"), *step = sft_metadata(f, "ferry_step");
    char *end = NULL;
    long long v = step ? strtoll(step, &end, 10) : -1;
    if ((run && !hf_is_run_id(run)) || (step && (!*step || *end || v < 0)))
        st = err_set(FERRY_ERR_FORMAT, "'%s': its ferry_run / ferry_step metadata are damaged (\"%s\", \"%s\")",
                     safetensors, run ? run : "", step ? step : "");
    else {
        if (run)
            snprintf(out->run, sizeof out->run, "%s", run);
        out->step = step ? v : -1;
    }
    sft_close(f);
    return st;
}
