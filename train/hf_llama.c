/* The Llama family's Hugging Face folders (see hf_llama.h): config.json in
 * both directions, and the weights, one file or shards with their index,
 * on top of the safetensors reader (its pread path) and writer. Owns the
 * mapping from the family's tensor table to the files; the names and
 * shapes are models/llama_layout.c's. */
#include "train/hf_llama.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/fileio.h"
#include "optim/half.h"
#include "train/hf_json.h"
#include "train/safetensors.h"

#define PATH_CAP 4096
#define CHUNK_ELEMS ((size_t)1 << 20) /* elements converted per piece: 2 MiB of bf16, 4 MiB of fp32 */
#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define CONFIG_EXAMPLE "{\"model_type\": \"llama\", \"num_hidden_layers\": 16, ...}"

/* What transformers assumes of each type when config.json leaves a key out. */
typedef struct family {
    const char *type, *arch;
    int max_pos;  /* max_position_embeddings */
    int kv_heads; /* num_key_value_heads; 0: the attention heads */
    int bos, eos;
} family;

static const family families[] = {
    {"llama", "LlamaForCausalLM", 2048, 0, 1, 2},
    {"mistral", "MistralForCausalLM", 131072, 8, 1, 2},
    {"qwen2", "Qwen2ForCausalLM", 32768, 32, -1, -1},
};

static const family *family_of(const char *type)
{
    for (size_t i = 0; type && i < sizeof families / sizeof families[0]; i++)
        if (strcmp(type, families[i].type) == 0)
            return &families[i];
    return NULL;
}

/* ---- config.json: reading ---- */

static const cJSON *get(const cJSON *j, const char *key) { return cJSON_GetObjectItemCaseSensitive(j, key); }

/* FERRY_ERR_FORMAT: key holds v, and ferry supports `supported`. */
static ferry_status refuse(const char *path, const char *key, const cJSON *v, const char *supported)
{
    char what[64];
    hf_json_describe(v, what, sizeof what);
    return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s; ferry supports %s", path, key, what,
                   supported);
}

/* j[key] as a whole number in [lo, hi]. Absent (or null, when null_ok):
 * *out = fallback, or FERRY_ERR_FORMAT when required. */
static ferry_status read_int(const char *path, const cJSON *j, const char *key, int lo, int hi, bool required,
                             bool null_ok, int fallback, int *out)
{
    const cJSON *v = get(j, key);
    if (!v || (null_ok && cJSON_IsNull(v))) {
        *out = fallback;
        if (!v && required)
            return err_set(FERRY_ERR_FORMAT, "model config '%s' has no \"%s\"; a Llama-family config.json gives "
                           "num_hidden_layers, num_attention_heads, hidden_size, intermediate_size and vocab_size "
                           "as whole numbers", path, key);
        return FERRY_OK;
    }
    if (!hf_json_whole(v, lo, hi)) {
        char what[64];
        hf_json_describe(v, what, sizeof what);
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s, not a whole number from %d to %d", path,
                       key, what, lo, hi);
    }
    *out = (int)v->valuedouble;
    return FERRY_OK;
}

/* j[key] as a finite number > 0 (>= 0 when zero_ok) that a float holds;
 * fallback when absent. */
static ferry_status read_float(const char *path, const cJSON *j, const char *key, bool zero_ok, float fallback,
                               float *out)
{
    const cJSON *v = get(j, key);
    if (!v) {
        *out = fallback;
        return FERRY_OK;
    }
    float f = cJSON_IsNumber(v) ? (float)v->valuedouble : NAN;
    if (!isfinite(f) || !(f > 0 || (zero_ok && f == 0))) {
        char what[64];
        hf_json_describe(v, what, sizeof what);
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s, not a finite number %s 0", path, key,
                       what, zero_ok ? ">=" : ">");
    }
    *out = f;
    return FERRY_OK;
}

static ferry_status read_bool(const char *path, const cJSON *j, const char *key, bool fallback, bool *out)
{
    const cJSON *v = get(j, key);
    *out = fallback;
    if (!v)
        return FERRY_OK;
    if (!cJSON_IsBool(v))
        return refuse(path, key, v, "true or false");
    *out = cJSON_IsTrue(v);
    return FERRY_OK;
}

/* A key that must be absent or hold `fine` (a bool); `why` says what the
 * other value would compute. */
static ferry_status expect_bool(const char *path, const cJSON *j, const char *key, bool fine, const char *why)
{
    bool b;
    ferry_status st = read_bool(path, j, key, fine, &b);
    if (st != FERRY_OK || b == fine)
        return st;
    return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" is %s: %s; ferry supports only %s", path, key,
                   b ? "true" : "false", why, fine ? "true" : "false");
}

/* bos_token_id / eos_token_id: a token id, null (none), or for eos a list
 * of them (its first is kept, the others only checked). */
static ferry_status read_token(const char *path, const cJSON *j, const char *key, bool list_ok, int fallback,
                               int *out)
{
    const cJSON *v = get(j, key);
    *out = fallback;
    if (!v)
        return FERRY_OK;
    if (cJSON_IsNull(v)) {
        *out = -1;
        return FERRY_OK;
    }
    bool ok = hf_json_whole(v, 0, 2147483647.0);
    if (list_ok && cJSON_IsArray(v)) {
        ok = true;
        for (const cJSON *e = v->child; e; e = e->next)
            ok &= hf_json_whole(e, 0, 2147483647.0);
        v = v->child;
        *out = -1;
    }
    if (!ok)
        return refuse(path, key, get(j, key), list_ok ? "a token id (a whole number >= 0), a list of them, or null"
                                                      : "a token id (a whole number >= 0) or null");
    if (v)
        *out = (int)v->valuedouble;
    return FERRY_OK;
}

/* The rotary embedding: rope_theta, and rope_scaling (or transformers 5's
 * rope_parameters, which holds rope_theta too). */
static ferry_status read_rope(const char *path, const cJSON *j, llama_config *c)
{
    const cJSON *params = get(j, "rope_parameters");
    bool in_params = params && !cJSON_IsNull(params);
    const char *key = in_params ? "rope_parameters" : "rope_scaling";
    const cJSON *rs = in_params ? params : get(j, "rope_scaling");
    const cJSON *inner = in_params && cJSON_IsObject(rs) ? rs : NULL; /* may hold the next two */
    ferry_status st = read_float(path, j, "rope_theta", false, 10000.0f, &c->rope_theta);
    if (st == FERRY_OK && inner && get(inner, "rope_theta"))
        st = read_float(path, inner, "rope_theta", false, 10000.0f, &c->rope_theta);
    float partial = 1.0f;
    if (st == FERRY_OK)
        st = read_float(path, inner && get(inner, "partial_rotary_factor") ? inner : j, "partial_rotary_factor",
                        false, 1.0f, &partial);
    if (st == FERRY_OK && partial != 1.0f)
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"partial_rotary_factor\" is %g: the rotation would "
                       "cover only part of each head; ferry supports 1 (all of it)", path, (double)partial);
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    if (st != FERRY_OK || !rs || cJSON_IsNull(rs))
        return st;
    if (!cJSON_IsObject(rs))
        return refuse(path, key, rs, "null or an object with \"rope_type\" \"linear\" or \"llama3\"");
    const cJSON *type = get(rs, "rope_type");
    if (!type)
        type = get(rs, "type");
    if (!type || !cJSON_IsString(type)) {
        char what[64];
        hf_json_describe(type, what, sizeof what);
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" has no \"rope_type\" (or \"type\") string%s%s; "
                       "ferry supports \"default\", \"linear\" and \"llama3\"", path, key, type ? ": it is " : "",
                       type ? what : "");
    }
    const char *t = type->valuestring;
    llama_rope_scaling *r = &c->rope_scaling;
    if (strcmp(t, "default") == 0)
        return FERRY_OK;
    if (strcmp(t, "linear") != 0 && strcmp(t, "llama3") != 0)
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" has type \"%.40s\"; ferry implements rope "
                       "scaling \"linear\" and \"llama3\" (Llama 3.1's), or none (null or \"default\")", path, key,
                       t);
    static const char *const needed[] = {"factor", "low_freq_factor", "high_freq_factor",
                                         "original_max_position_embeddings"};
    size_t need = strcmp(t, "linear") == 0 ? 1 : 4;
    for (size_t i = 0; i < need; i++)
        if (!get(rs, needed[i]))
            return err_set(FERRY_ERR_FORMAT, "model config '%s': \"%s\" of type \"%s\" has no \"%s\"", path, key, t,
                           needed[i]);
    r->kind = need == 1 ? LLAMA_ROPE_LINEAR : LLAMA_ROPE_LLAMA3;
    st = read_float(path, rs, "factor", false, 0, &r->factor);
    if (st == FERRY_OK && need == 4)
        st = read_float(path, rs, "low_freq_factor", false, 0, &r->low_freq_factor);
    if (st == FERRY_OK && need == 4)
        st = read_float(path, rs, "high_freq_factor", false, 0, &r->high_freq_factor);
    if (st == FERRY_OK && need == 4)
        st = read_int(path, rs, "original_max_position_embeddings", 1, 1 << 30, true, false, 0,
                      &r->original_max_position_embeddings);
    return st;
}

/* Which layers attend through a window: Mistral's sliding_window applies to
 * all of them; Qwen2's only with use_sliding_window, to layers from
 * max_window_layers on (or those layer_types marks); ferry runs one window
 * for every layer or none. Llama has no window. */
static ferry_status read_window_size(const char *path, const cJSON *j, int *out)
{
    const cJSON *v = get(j, "sliding_window");
    *out = !v ? 4096 : cJSON_IsNull(v) ? 0 : (int)(hf_json_whole(v, 1, 1 << 30) ? v->valuedouble : -1);
    return *out >= 0 ? FERRY_OK : refuse(path, "sliding_window", v, "null (no window) or a whole number >= 1");
}

static ferry_status read_window(const char *path, const cJSON *j, llama_config *c)
{
    c->sliding_window = 0;
    if (strcmp(c->model_type, "mistral") == 0)
        return read_window_size(path, j, &c->sliding_window);
    if (strcmp(c->model_type, "qwen2") != 0)
        return FERRY_OK;
    bool use = false;
    int window = 0, from = 0;
    ferry_status st = read_bool(path, j, "use_sliding_window", false, &use);
    if (st == FERRY_OK)
        st = read_window_size(path, j, &window);
    if (st == FERRY_OK)
        st = read_int(path, j, "max_window_layers", 0, 1 << 30, false, false, 28, &from);
    if (st != FERRY_OK || !use || window == 0)
        return st;
    const cJSON *types = get(j, "layer_types");
    int sliding = 0;
    if (types && !(cJSON_IsArray(types) && cJSON_GetArraySize(types) == c->n_layer))
        return refuse(path, "layer_types", types, "a list of one string per layer");
    for (int l = 0; l < c->n_layer; l++) {
        const cJSON *e = types ? cJSON_GetArrayItem(types, l) : NULL;
        if (e && !(cJSON_IsString(e) && (strcmp(e->valuestring, "full_attention") == 0 ||
                                         strcmp(e->valuestring, "sliding_attention") == 0)))
            return refuse(path, "layer_types", e, "\"full_attention\" and \"sliding_attention\" entries");
        sliding += e ? strcmp(e->valuestring, "sliding_attention") == 0 : l >= from;
    }
    if (sliding != 0 && sliding != c->n_layer)
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"use_sliding_window\" is true and %d of the %d layers "
                       "attend through the %d-token window (max_window_layers %d%s); ferry supports a window on "
                       "every layer or on none", path, sliding, c->n_layer, window, from,
                       types ? ", layer_types" : "");
    c->sliding_window = sliding ? window : 0;
    return FERRY_OK;
}

/* The keys whose other values change what the model computes. */
static ferry_status read_semantics(const char *path, const cJSON *j, llama_config *c)
{
    bool llama = strcmp(c->model_type, "llama") == 0;
    const cJSON *act = get(j, "hidden_act");
    if (act && !(cJSON_IsString(act) && strcmp(act->valuestring, "silu") == 0))
        return refuse(path, "hidden_act", act, "only \"silu\" (SwiGLU's gate)");
    ferry_status st = expect_bool(path, j, "mlp_bias", false, "the MLP's projections would have biases");
    if (st == FERRY_OK && llama)
        st = expect_bool(path, j, "attention_bias", false, "q_proj, k_proj, v_proj and o_proj would have biases; "
                         "ferry's layers have q/k/v biases only (Qwen2's), never one on o_proj");
    if (st == FERRY_OK)
        st = expect_bool(path, j, "use_mrope", false, "Qwen2-VL's multimodal rotary embedding");
    int tp = 1;
    if (st == FERRY_OK)
        st = read_int(path, j, "pretraining_tp", 1, 1 << 20, false, true, 1, &tp);
    if (st == FERRY_OK && tp != 1)
        return err_set(FERRY_ERR_FORMAT, "model config '%s': \"pretraining_tp\" is %d: transformers would split "
                       "the projections %d ways; ferry supports 1", path, tp, tp);
    const cJSON *q = get(j, "quantization_config");
    if (st == FERRY_OK && q && !cJSON_IsNull(q))
        return refuse(path, "quantization_config", q, "unquantized weights only (no quantization_config)");
    c->qkv_bias = strcmp(c->model_type, "qwen2") == 0;
    return st;
}

static ferry_status read_dtype(const char *path, const cJSON *j, ferry_dtype *out)
{
    const char *key = get(j, "torch_dtype") ? "torch_dtype" : "dtype";
    const cJSON *v = get(j, key);
    *out = FERRY_DTYPE_AUTO;
    if (!v || cJSON_IsNull(v) || (cJSON_IsString(v) && hf_torch_dtype_parse(v->valuestring, out)))
        return FERRY_OK;
    return refuse(path, key, v, "\"float32\", \"float16\" and \"bfloat16\" weights");
}

static ferry_status read_config(const char *path, const cJSON *j, llama_config *c)
{
    memset(c, 0, sizeof *c);
    const cJSON *type = get(j, "model_type");
    const family *fam = cJSON_IsString(type) ? family_of(type->valuestring) : NULL;
    if (!type)
        return err_set(FERRY_ERR_FORMAT, "model config '%s' has no \"model_type\"; ferry reads the Llama family: "
                       "\"llama\", \"mistral\" and \"qwen2\"", path);
    if (!fam)
        return refuse(path, "model_type", type, "the Llama family: \"llama\", \"mistral\" and \"qwen2\"");
    snprintf(c->model_type, sizeof c->model_type, "%s", fam->type);
    const int big = 1 << 30;
    ferry_status st = read_int(path, j, "num_hidden_layers", 1, big, true, false, 0, &c->n_layer);
    if (st == FERRY_OK) st = read_int(path, j, "num_attention_heads", 1, big, true, false, 0, &c->n_head);
    if (st == FERRY_OK) st = read_int(path, j, "hidden_size", 1, big, true, false, 0, &c->n_embd);
    if (st == FERRY_OK) st = read_int(path, j, "intermediate_size", 1, big, true, false, 0, &c->intermediate_size);
    if (st == FERRY_OK) st = read_int(path, j, "vocab_size", 1, big, true, false, 0, &c->vocab_size);
    if (st == FERRY_OK && get(j, "num_key_value_heads") && cJSON_IsNull(get(j, "num_key_value_heads")))
        c->n_kv_head = c->n_head; /* null: as many as the heads, whatever the type's default */
    else if (st == FERRY_OK)
        st = read_int(path, j, "num_key_value_heads", 1, big, false, false, fam->kv_heads ? fam->kv_heads : c->n_head,
                      &c->n_kv_head);
    if (st == FERRY_OK)
        st = read_int(path, j, "head_dim", 1, big, false, true, c->n_embd / c->n_head, &c->head_dim);
    if (st == FERRY_OK)
        st = read_int(path, j, "max_position_embeddings", 1, big, false, false, fam->max_pos, &c->max_seq_len);
    if (st == FERRY_OK) st = read_float(path, j, "rms_norm_eps", false, 1e-6f, &c->rms_norm_eps);
    if (st == FERRY_OK) st = read_float(path, j, "initializer_range", true, 0.02f, &c->initializer_range);
    if (st == FERRY_OK) st = read_rope(path, j, c);
    if (st == FERRY_OK) st = read_bool(path, j, "tie_word_embeddings", false, &c->tied_embeddings);
    if (st == FERRY_OK) st = read_window(path, j, c);
    if (st == FERRY_OK) st = read_semantics(path, j, c);
    if (st == FERRY_OK) st = read_token(path, j, "bos_token_id", false, fam->bos, &c->bos_token_id);
    if (st == FERRY_OK) st = read_token(path, j, "eos_token_id", true, fam->eos, &c->eos_token_id);
    if (st != FERRY_OK)
        return st;
    if (c->n_embd > (1 << 24) || c->vocab_size > (1 << 24))
        return err_set(FERRY_ERR_FORMAT, "model config '%s': hidden_size %d / vocab_size %d is beyond what ferry "
                       "holds (2^24)", path, c->n_embd, c->vocab_size);
    c->padded_vocab_size = (c->vocab_size + LLAMA_VOCAB_PAD - 1) / LLAMA_VOCAB_PAD * LLAMA_VOCAB_PAD;
    st = llama_config_validate(c);
    return st == FERRY_OK ? FERRY_OK : err_wrap(FERRY_ERR_FORMAT, "model config '%s'", path);
}

ferry_status hf_llama_read_config_ferry(const char *config_json, llama_config *out, ferry_dtype *torch_dtype,
                                        hf_ferry_info *ferry)
{
    if (!config_json || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_read_config: no path or no config to fill");
    hf_ferry_info none;
    ferry_dtype dt;
    cJSON *j = NULL;
    ferry_status st = hf_json_read_object(config_json, "model config", CONFIG_EXAMPLE, &j);
    if (st == FERRY_OK)
        st = read_config(config_json, j, out);
    if (st == FERRY_OK)
        st = read_dtype(config_json, j, torch_dtype ? torch_dtype : &dt);
    if (st == FERRY_OK)
        st = hf_json_read_ferry(config_json, j, ferry ? ferry : &none);
    cJSON_Delete(j);
    return st;
}

ferry_status hf_llama_read_config(const char *config_json, llama_config *out)
{
    return hf_llama_read_config_ferry(config_json, out, NULL, NULL);
}

/* ---- config.json: writing ---- */

/* f as Python writes a float: a whole one with ".0" (500000.0), any other
 * as the shortest decimal that reads back as f (1e-05, not the
 * 9.99999974737875e-06 that (double)1e-5f prints as), so that transformers
 * reads a float where it checks for one. */
static void add_float(cJSON *j, const char *key, float f)
{
    char buf[40];
    if (f == floorf(f) && fabsf(f) < 1e15f)
        snprintf(buf, sizeof buf, "%.1f", (double)f);
    else
        for (int p = 1; p <= 9; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, (double)f);
            if ((float)strtod(buf, NULL) == f)
                break;
        }
    cJSON_AddRawToObject(j, key, buf);
}

static void add_token(cJSON *j, const char *key, int id)
{
    if (id >= 0)
        cJSON_AddNumberToObject(j, key, id);
    else
        cJSON_AddNullToObject(j, key);
}

/* Whether the format can say cfg: Qwen2 always has the q/k/v biases, the
 * others never (llama's attention_bias would put one on o_proj too); only
 * Mistral and Qwen2 have a window. */
static ferry_status check_expressible(const llama_config *c)
{
    ferry_status st = llama_config_validate(c);
    if (st != FERRY_OK)
        return st;
    bool qwen = strcmp(c->model_type, "qwen2") == 0;
    if (c->qkv_bias != qwen)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "a %s config.json cannot say q/k/v biases %s: Qwen2 always has "
                       "them, Llama and Mistral never", c->model_type, c->qkv_bias ? "on" : "off");
    if (c->sliding_window > 0 && strcmp(c->model_type, "llama") == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "a llama config.json cannot say a sliding window (%d); use "
                       "model_type mistral for one", c->sliding_window);
    return FERRY_OK;
}

static cJSON *config_json(const llama_config *c, ferry_dtype dtype, const hf_ferry_info *ferry)
{
    const family *fam = family_of(c->model_type);
    bool llama = fam == &families[0], qwen = fam == &families[2];
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(fam->arch));
    if (llama)
        cJSON_AddFalseToObject(j, "attention_bias");
    add_float(j, "attention_dropout", 0.0f);
    add_token(j, "bos_token_id", c->bos_token_id);
    add_token(j, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", c->n_embd);
    add_float(j, "initializer_range", c->initializer_range);
    cJSON_AddNumberToObject(j, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_seq_len);
    if (qwen) /* layers from max_window_layers on use the window: all of them, or (no window) none */
        cJSON_AddNumberToObject(j, "max_window_layers", c->sliding_window ? 0 : c->n_layer);
    if (llama)
        cJSON_AddFalseToObject(j, "mlp_bias");
    cJSON_AddStringToObject(j, "model_type", fam->type);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_head);
    if (llama)
        cJSON_AddNumberToObject(j, "pretraining_tp", 1);
    add_float(j, "rms_norm_eps", c->rms_norm_eps);
    const llama_rope_scaling *r = &c->rope_scaling;
    if (r->kind == LLAMA_ROPE_DEFAULT) {
        cJSON_AddNullToObject(j, "rope_scaling");
    } else {
        cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
        add_float(rs, "factor", r->factor);
        if (r->kind == LLAMA_ROPE_LLAMA3) {
            add_float(rs, "high_freq_factor", r->high_freq_factor);
            add_float(rs, "low_freq_factor", r->low_freq_factor);
            cJSON_AddNumberToObject(rs, "original_max_position_embeddings", r->original_max_position_embeddings);
        }
        cJSON_AddStringToObject(rs, "rope_type", r->kind == LLAMA_ROPE_LINEAR ? "linear" : "llama3");
    }
    add_float(j, "rope_theta", c->rope_theta);
    if (!llama) {
        if (c->sliding_window > 0)
            cJSON_AddNumberToObject(j, "sliding_window", c->sliding_window);
        else
            cJSON_AddNullToObject(j, "sliding_window");
    }
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tied_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", hf_torch_dtype_name(dtype));
    cJSON_AddTrueToObject(j, "use_cache");
    if (qwen)
        cJSON_AddBoolToObject(j, "use_sliding_window", c->sliding_window > 0);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    hf_json_add_ferry(j, ferry);
    return j;
}

ferry_status hf_llama_write_config(const char *config_json_path, const llama_config *cfg, ferry_dtype dtype,
                                   const hf_ferry_info *ferry)
{
    if (!config_json_path || !cfg)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_write_config: no path or no config");
    if (!hf_torch_dtype_name(dtype))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_write_config: weights are stored as F32, BF16 or "
                       "F16, not %s", dtype_name(dtype));
    ferry_status st = check_expressible(cfg);
    if (st != FERRY_OK)
        return st;
    cJSON *j = config_json(cfg, dtype, ferry);
    st = j ? hf_json_write(config_json_path, j)
           : err_set(FERRY_ERR_OUT_OF_MEMORY, "writing '%s': out of memory", config_json_path);
    cJSON_Delete(j);
    return st;
}

/* ---- the tensor table ---- */

/* Every tensor of m, in group order: slot first[g] + i is tensor i of
 * group g. */
typedef struct table {
    int groups, slots;
    int *first; /* [groups + 1] */
    llama_tensor_info *info;
} table;

static void table_free(table *t)
{
    free(t->first);
    free(t->info);
    memset(t, 0, sizeof *t);
}

static ferry_status table_build(const llama_model *m, table *t)
{
    memset(t, 0, sizeof *t);
    t->groups = llama_num_groups(m);
    t->first = calloc((size_t)t->groups + 1, sizeof *t->first);
    for (int g = 0; t->first && g < t->groups; g++)
        t->first[g + 1] = t->first[g] + llama_group_tensor_count(m, g);
    t->slots = t->first ? t->first[t->groups] : 0;
    t->info = t->first ? calloc((size_t)t->slots + 1, sizeof *t->info) : NULL;
    if (!t->info) {
        table_free(t);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the Llama tensor table: out of host memory");
    }
    for (int g = 0; g < t->groups; g++)
        for (int i = t->first[g]; i < t->first[g + 1]; i++)
            llama_group_tensor(m, g, i - t->first[g], &t->info[i]);
    return FERRY_OK;
}

/* Elements of a tensor in the file: hf_rows rows of shape[1]. */
static size_t hf_numel(const llama_tensor_info *t)
{
    return t->ndim == 2 ? (size_t)t->hf_rows * (size_t)t->shape[1] : t->numel;
}

/* The model in words, for messages. */
static void describe_model(const llama_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "a %d-layer %s model (hidden %d, %d heads of %d, %d key/value heads, MLP %d, vocabulary "
             "%d%s%s)", c->n_layer, c->model_type, c->n_embd, c->n_head, c->head_dim, c->n_kv_head,
             c->intermediate_size, c->vocab_size, c->qkv_bias ? ", q/k/v biases" : "",
             c->tied_embeddings ? ", head tied" : "");
}

/* The arguments every opening call takes; a folder name with room for a
 * file name after it. */
static ferry_status check_args(const char *who, const char *dir, const llama_model *m, const void *out)
{
    if (!out || !dir || !m)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: no folder, no model or no place for the result", who);
    if (strlen(dir) >= PATH_CAP - 64)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the folder name '%s' is too long", dir);
    return FERRY_OK;
}

/* ---- reading ---- */

struct hf_llama_reader {
    const llama_model *m;
    char dir[PATH_CAP];
    table tab;
    int n_files;
    char **names;              /* the files, as the folder names them */
    sft_file **files;
    int *where;                /* per slot: its file */
    const sft_tensor **tensor; /* per slot: its tensor there */
};

void hf_llama_close(hf_llama_reader *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_files; i++) {
        sft_close(r->files ? r->files[i] : NULL);
        free(r->names ? r->names[i] : NULL);
    }
    free(r->files);
    free(r->names);
    free(r->where);
    free(r->tensor);
    table_free(&r->tab);
    free(r);
}

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Adds a file name, once; returns its index or -1 (out of memory). */
static int add_file(hf_llama_reader *r, const char *name)
{
    for (int i = 0; i < r->n_files; i++)
        if (strcmp(r->names[i], name) == 0)
            return i;
    char **names = realloc(r->names, ((size_t)r->n_files + 1) * sizeof *names);
    if (!names)
        return -1;
    r->names = names;
    if (!(names[r->n_files] = strdup(name)))
        return -1;
    return r->n_files++;
}

/* The shard names of an index's weight_map: each a plain file of the folder. */
static ferry_status read_index(hf_llama_reader *r, const char *index_path, cJSON **map_out)
{
    cJSON *j = NULL;
    ferry_status st = hf_json_read_object(index_path, "safetensors index", "{\"metadata\": {\"total_size\": N}, "
                                          "\"weight_map\": {\"model.embed_tokens.weight\": "
                                          "\"model-00001-of-00002.safetensors\", ...}}", &j);
    if (st != FERRY_OK)
        return st;
    cJSON *map = cJSON_DetachItemFromObjectCaseSensitive(j, "weight_map");
    cJSON_Delete(j);
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(map);
        return err_set(FERRY_ERR_FORMAT, "safetensors index '%s' has no \"weight_map\" object (tensor name -> file "
                       "name)", index_path);
    }
    char path[PATH_CAP];
    for (const cJSON *e = map->child; e && st == FERRY_OK; e = e->next) {
        const char *f = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!f || !f[0] || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
            st = err_set(FERRY_ERR_FORMAT, "safetensors index '%s' puts tensor %s in %s%s%s, not the name of a file "
                         "of the folder", index_path, e->string, f ? "'" : "", f ? f : "a value that is not a string",
                         f ? "'" : "");
        else if ((st = hf_path(path, sizeof path, r->dir, f)) == FERRY_OK && !is_file(path))
            st = err_set(FERRY_ERR_FORMAT, "safetensors index '%s' puts tensor %s in '%s', which is not a file in "
                         "'%s' (a download cut short, or a shard left out?)", index_path, e->string, f, r->dir);
        else if (st == FERRY_OK && add_file(r, f) < 0)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "reading '%s': out of host memory", index_path);
    }
    if (st == FERRY_OK && r->n_files == 0)
        st = err_set(FERRY_ERR_FORMAT, "safetensors index '%s' lists no tensors", index_path);
    if (st != FERRY_OK) {
        cJSON_Delete(map);
        return st;
    }
    *map_out = map;
    return FERRY_OK;
}

/* Buffers older transformers saved with the weights, computed from the
 * config: not parameters. */
static bool skipped(const char *name)
{
    size_t n = strlen(name), k = strlen(".rotary_emb.inv_freq");
    return n > k && strcmp(name + n - k, ".rotary_emb.inv_freq") == 0;
}

/* Places every tensor of every file in its slot. */
static ferry_status place_tensors(hf_llama_reader *r, const cJSON *map, const char *index_path)
{
    const llama_config *c = llama_get_config(r->m);
    char model[256], path[PATH_CAP];
    describe_model(c, model, sizeof model);
    for (int fi = 0; fi < r->n_files; fi++) {
        hf_path(path, sizeof path, r->dir, r->names[fi]);
        for (size_t i = 0; i < sft_count(r->files[fi]); i++) {
            const sft_tensor *t = sft_tensor_at(r->files[fi], i);
            int g, k;
            if (skipped(t->name))
                continue;
            if (llama_find_tensor(r->m, t->name, &g, &k) != FERRY_OK) {
                if (strcmp(t->name, "lm_head.weight") == 0 && c->tied_embeddings)
                    return err_set(FERRY_ERR_FORMAT, "'%s' holds lm_head.weight, but the model ties its head to "
                                   "model.embed_tokens.weight (tie_word_embeddings true): a head of its own would "
                                   "be dropped; if it is one, set tie_word_embeddings false", path);
                return err_set(FERRY_ERR_FORMAT, "'%s' holds tensor %s, which %s does not have: the weights are of "
                               "another model, or config.json is not theirs", path, t->name, model);
            }
            int slot = r->tab.first[g] + k;
            if (r->tensor[slot]) {
                char other[PATH_CAP];
                hf_path(other, sizeof other, r->dir, r->names[r->where[slot]]);
                return err_set(FERRY_ERR_FORMAT, "tensor %s is in both '%s' and '%s': which one is meant cannot be "
                               "told", t->name, other, path);
            }
            const cJSON *listed = map ? get(map, t->name) : NULL;
            if (map && !listed)
                return err_set(FERRY_ERR_FORMAT, "'%s' holds tensor %s, which the safetensors index '%s' does not "
                               "list: the index is not the one saved with the shards", path, t->name, index_path);
            if (listed && strcmp(listed->valuestring, r->names[fi]) != 0)
                return err_set(FERRY_ERR_FORMAT, "the safetensors index '%s' puts tensor %s in '%s', but it is in "
                               "'%s'", index_path, t->name, listed->valuestring, path);
            r->where[slot] = fi;
            r->tensor[slot] = t;
        }
    }
    for (int slot = 0; slot < r->tab.slots; slot++) {
        const char *name = r->tab.info[slot].name;
        const cJSON *listed = map ? get(map, name) : NULL;
        if (r->tensor[slot])
            continue;
        if (listed)
            return err_set(FERRY_ERR_FORMAT, "the safetensors index '%s' puts tensor %s in '%s', which does not "
                           "hold it", index_path, name, listed->valuestring);
        if (map)
            return err_set(FERRY_ERR_FORMAT, "no file of '%s' holds tensor %s (the index does not list it), which "
                           "%s has: the weights are of another model, or config.json is not theirs", r->dir, name,
                           model);
        return err_set(FERRY_ERR_FORMAT, "'%s' has no tensor %s, which %s has: the weights are of another model, or "
                       "config.json is not theirs", path, name, model);
    }
    /* An index entry for a tensor no file holds and the model lacks. */
    for (const cJSON *e = map ? map->child : NULL; e; e = e->next) {
        int g, k;
        if (!skipped(e->string) && llama_find_tensor(r->m, e->string, &g, &k) != FERRY_OK)
            return err_set(FERRY_ERR_FORMAT, "the safetensors index '%s' lists tensor %s, which %s does not have "
                           "and '%s' does not hold", index_path, e->string, model, e->valuestring);
    }
    return FERRY_OK;
}

static ferry_status check_shapes(const hf_llama_reader *r)
{
    char path[PATH_CAP], got[96], want[96];
    for (int slot = 0; slot < r->tab.slots; slot++) {
        const llama_tensor_info *info = &r->tab.info[slot];
        const sft_tensor *t = r->tensor[slot];
        hf_path(path, sizeof path, r->dir, r->names[r->where[slot]]);
        if (!dtype_is_float(t->dtype))
            return err_set(FERRY_ERR_FORMAT, "'%s': tensor %s is %s; weights must be F32, BF16 or F16", path,
                           info->name, sft_dtype_name(t->dtype));
        int64_t shape[2] = {info->ndim == 2 ? info->hf_rows : info->shape[0], info->shape[1]};
        bool same = t->ndim == info->ndim && t->shape[0] == shape[0] && (info->ndim == 1 || t->shape[1] == shape[1]);
        if (!same)
            return err_set(FERRY_ERR_FORMAT, "'%s': tensor %s has shape %s, the model expects %s: the weights are of "
                           "another shape, or config.json is not theirs", path, info->name,
                           sft_format_shape(t->shape, t->ndim, got, sizeof got),
                           sft_format_shape(shape, info->ndim, want, sizeof want));
    }
    return FERRY_OK;
}

/* config.json beside the weights, when there is one: its shape is the
 * model's (heads against head_dim cannot be told from the tensors), and
 * its torch_dtype, when given, the tensors' type. */
static ferry_status check_config(const hf_llama_reader *r)
{
    char path[PATH_CAP];
    ferry_status st = hf_path(path, sizeof path, r->dir, "config.json");
    if (st != FERRY_OK || !is_file(path))
        return st;
    llama_config file;
    ferry_dtype dtype;
    if ((st = hf_llama_read_config_ferry(path, &file, &dtype, NULL)) != FERRY_OK)
        return st;
    const llama_config *c = llama_get_config(r->m);
    const struct {
        const char *key;
        int file, model;
    } fields[] = {
        {"num_hidden_layers", file.n_layer, c->n_layer},
        {"num_attention_heads", file.n_head, c->n_head},
        {"num_key_value_heads", file.n_kv_head, c->n_kv_head},
        {"head_dim", file.head_dim, c->head_dim},
        {"hidden_size", file.n_embd, c->n_embd},
        {"intermediate_size", file.intermediate_size, c->intermediate_size},
        {"vocab_size", file.vocab_size, c->vocab_size},
        {"tie_word_embeddings", file.tied_embeddings, c->tied_embeddings},
        {"q/k/v biases (model_type qwen2)", file.qkv_bias, c->qkv_bias},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].file != fields[i].model)
            return err_set(FERRY_ERR_FORMAT, "'%s' says %s %d, but the model loading these weights has %d: the "
                           "config is not the one saved with them, or the model was built from another", path,
                           fields[i].key, fields[i].file, fields[i].model);
    for (int slot = 0; dtype != FERRY_DTYPE_AUTO && slot < r->tab.slots; slot++)
        if (r->tensor[slot]->dtype != dtype) {
            char file_path[PATH_CAP];
            hf_path(file_path, sizeof file_path, r->dir, r->names[r->where[slot]]);
            return err_set(FERRY_ERR_FORMAT, "'%s' says torch_dtype \"%s\", but '%s' stores %s as %s: the config is "
                           "not the one saved with these weights", path, hf_torch_dtype_name(dtype), file_path,
                           r->tab.info[slot].name, sft_dtype_name(r->tensor[slot]->dtype));
        }
    return FERRY_OK;
}

ferry_status hf_llama_open(const char *dir, const llama_model *m, hf_llama_reader **out)
{
    ferry_status st = check_args("hf_llama_open", dir, m, out);
    if (st != FERRY_OK)
        return st;
    *out = NULL;
    hf_llama_reader *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "opening '%s': out of host memory", dir);
    r->m = m;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    char single[PATH_CAP], index[PATH_CAP];
    cJSON *map = NULL;
    st = hf_path(single, sizeof single, dir, SINGLE_NAME);
    if (st == FERRY_OK)
        st = hf_path(index, sizeof index, dir, INDEX_NAME);
    if (st == FERRY_OK)
        st = table_build(m, &r->tab);
    if (st == FERRY_OK && is_file(single))
        st = add_file(r, SINGLE_NAME) < 0 ? err_set(FERRY_ERR_OUT_OF_MEMORY, "opening '%s': out of memory", dir)
                                          : FERRY_OK;
    else if (st == FERRY_OK && is_file(index))
        st = read_index(r, index, &map);
    else if (st == FERRY_OK)
        st = err_set(FERRY_ERR_IO, "'%s' holds neither %s nor %s: not a Hugging Face model folder (or not one "
                     "saved as safetensors)", dir, SINGLE_NAME, INDEX_NAME);
    if (st == FERRY_OK) {
        r->files = calloc((size_t)r->n_files, sizeof *r->files);
        r->where = calloc((size_t)r->tab.slots + 1, sizeof *r->where);
        r->tensor = calloc((size_t)r->tab.slots + 1, sizeof *r->tensor);
        if (!r->files || !r->where || !r->tensor)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "opening '%s': out of host memory", dir);
    }
    char path[PATH_CAP];
    for (int i = 0; st == FERRY_OK && i < r->n_files; i++)
        if ((st = hf_path(path, sizeof path, dir, r->names[i])) == FERRY_OK)
            st = sft_open(path, &r->files[i]);
    if (st == FERRY_OK)
        st = place_tensors(r, map, index);
    if (st == FERRY_OK)
        st = check_shapes(r);
    if (st == FERRY_OK)
        st = check_config(r);
    cJSON_Delete(map);
    if (st != FERRY_OK) {
        hf_llama_close(r);
        return st;
    }
    *out = r;
    return FERRY_OK;
}

ferry_status hf_llama_read_group(hf_llama_reader *r, int group, float *out)
{
    if (!r || !out || group < 0 || group >= r->tab.groups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_read_group: no reader, no buffer, or group %d outside "
                       "0..%d", group, r ? r->tab.groups - 1 : -1);
    memset(out, 0, llama_group_numel(r->m, group) * sizeof(float));
    uint16_t *stage = NULL;
    ferry_status st = FERRY_OK;
    for (int slot = r->tab.first[group]; slot < r->tab.first[group + 1] && st == FERRY_OK; slot++) {
        const llama_tensor_info *info = &r->tab.info[slot];
        const sft_tensor *t = r->tensor[slot];
        const sft_file *f = r->files[r->where[slot]];
        float *dst = out + info->offset;
        size_t n = hf_numel(info);
        if (t->dtype == FERRY_DTYPE_F32) {
            st = sft_read(f, t, 0, dst, (uint64_t)n * sizeof(float));
            continue;
        }
        if (!stage && !(stage = malloc(CHUNK_ELEMS * sizeof *stage)))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "reading %s: out of host memory", info->name);
        for (size_t at = 0; at < n && st == FERRY_OK; at += CHUNK_ELEMS) {
            size_t k = n - at < CHUNK_ELEMS ? n - at : CHUNK_ELEMS;
            st = sft_read(f, t, (uint64_t)at * sizeof *stage, stage, (uint64_t)k * sizeof *stage);
            if (st == FERRY_OK)
                st = half_convert(dst + at, FERRY_DTYPE_F32, stage, t->dtype, k);
        }
    }
    free(stage);
    return st;
}

ferry_status hf_llama_load(const char *dir, const llama_model *m, float *const *groups)
{
    hf_llama_reader *r = NULL;
    ferry_status st = groups ? hf_llama_open(dir, m, &r)
                             : err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_load: no group buffers");
    for (int g = 0; st == FERRY_OK && g < llama_num_groups(m); g++)
        st = hf_llama_read_group(r, g, groups[g]);
    hf_llama_close(r);
    return st;
}

/* ---- writing ---- */

struct hf_llama_writer {
    const llama_model *m;
    char dir[PATH_CAP];
    ferry_dtype dtype;
    hf_ferry_info ferry;
    bool has_ferry;
    table tab;
    int *shard;      /* per slot: its file */
    size_t *index;   /* per slot: its place in that file */
    bool *saved;     /* per group */
    int n_shards;
    sft_writer **w;  /* per file; NULL once committed or aborted */
    char (*names)[48];
    uint64_t total;  /* the tensors' bytes */
};

void hf_llama_save_abort(hf_llama_writer *w)
{
    if (!w)
        return;
    for (int s = 0; w->w && s < w->n_shards; s++)
        sft_writer_abort(w->w[s]);
    free(w->w);
    free(w->names);
    free(w->shard);
    free(w->index);
    free(w->saved);
    table_free(&w->tab);
    free(w);
}

/* Splits the slots into files of at most `limit` bytes (0: one file). */
static void plan_shards(hf_llama_writer *w, uint64_t limit)
{
    size_t es = dtype_size(w->dtype);
    w->total = 0;
    for (int slot = 0; slot < w->tab.slots; slot++)
        w->total += (uint64_t)hf_numel(&w->tab.info[slot]) * es;
    bool one = limit == 0 || w->total <= limit;
    uint64_t used = 0;
    w->n_shards = 1;
    size_t in_shard = 0;
    for (int slot = 0; slot < w->tab.slots; slot++) {
        uint64_t b = (uint64_t)hf_numel(&w->tab.info[slot]) * es;
        if (!one && in_shard > 0 && used + b > limit) {
            w->n_shards++;
            used = 0;
            in_shard = 0;
        }
        w->shard[slot] = w->n_shards - 1;
        w->index[slot] = in_shard++;
        used += b;
    }
}

ferry_status hf_llama_save_begin(const char *dir, const llama_model *m, ferry_dtype dtype, uint64_t shard_bytes,
                                 const hf_ferry_info *ferry, hf_llama_writer **out)
{
    ferry_status st = check_args("hf_llama_save_begin", dir, m, out);
    if (st != FERRY_OK)
        return st;
    *out = NULL;
    if (!hf_torch_dtype_name(dtype))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "saving '%s': weights are stored as F32, BF16 or F16, not %s", dir,
                       dtype_name(dtype));
    st = check_expressible(llama_get_config(m));
    if (st != FERRY_OK)
        return err_wrap(st, "saving '%s'", dir);
    hf_llama_writer *w = calloc(1, sizeof *w);
    if (!w)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "saving '%s': out of host memory", dir);
    w->m = m;
    w->dtype = dtype;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    if (ferry) {
        w->ferry = *ferry;
        w->has_ferry = true;
    }
    st = table_build(m, &w->tab);
    if (st == FERRY_OK) {
        w->shard = calloc((size_t)w->tab.slots + 1, sizeof *w->shard);
        w->index = calloc((size_t)w->tab.slots + 1, sizeof *w->index);
        w->saved = calloc((size_t)w->tab.groups, sizeof *w->saved);
        if (!w->shard || !w->index || !w->saved)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "saving '%s': out of host memory", dir);
    }
    if (st == FERRY_OK) {
        plan_shards(w, shard_bytes);
        if (w->n_shards > 99999)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "saving '%s': shards of %llu bytes would make %d files, more "
                         "than the 99999 the names can number", dir, (unsigned long long)shard_bytes, w->n_shards);
    }
    if (st == FERRY_OK) {
        w->w = calloc((size_t)w->n_shards, sizeof *w->w);
        w->names = calloc((size_t)w->n_shards, sizeof *w->names);
        if (!w->w || !w->names)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "saving '%s': out of host memory", dir);
    }
    sft_tensor *ts = st == FERRY_OK ? calloc((size_t)w->tab.slots + 1, sizeof *ts) : NULL;
    if (st == FERRY_OK && !ts)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "saving '%s': out of host memory", dir);
    char step[24], path[PATH_CAP];
    const char *meta[8];
    size_t n_meta = hf_ferry_metadata(ferry, "ferry", meta, step);
    for (int s = 0; s < w->n_shards && st == FERRY_OK; s++) {
        if (w->n_shards == 1)
            snprintf(w->names[s], sizeof w->names[s], "%s", SINGLE_NAME);
        else
            snprintf(w->names[s], sizeof w->names[s], "model-%05d-of-%05d.safetensors", s + 1, w->n_shards);
        size_t n = 0;
        for (int slot = 0; slot < w->tab.slots; slot++) {
            const llama_tensor_info *info = &w->tab.info[slot];
            if (w->shard[slot] != s)
                continue;
            ts[n] = (sft_tensor){.name = info->name, .dtype = dtype, .ndim = info->ndim};
            ts[n].shape[0] = info->ndim == 2 ? info->hf_rows : info->shape[0];
            ts[n].shape[1] = info->ndim == 2 ? info->shape[1] : 0;
            n++;
        }
        st = hf_path(path, sizeof path, dir, w->names[s]);
        if (st == FERRY_OK)
            st = sft_writer_begin(path, ts, n, meta, n_meta, &w->w[s]);
    }
    free(ts);
    if (st != FERRY_OK) {
        hf_llama_save_abort(w);
        return st;
    }
    *out = w;
    return FERRY_OK;
}

ferry_status hf_llama_save_group(hf_llama_writer *w, int group, const float *values)
{
    if (!w || !values || group < 0 || group >= w->tab.groups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_save_group: no writer, no values, or group %d outside "
                       "0..%d", group, w ? w->tab.groups - 1 : -1);
    char label[64];
    llama_group_label(w->m, group, label, sizeof label);
    if (w->saved[group])
        return err_set(FERRY_ERR_STATE, "saving '%s': group %d (%s) was saved already", w->dir, group, label);
    size_t es = dtype_size(w->dtype);
    void *stage = NULL;
    ferry_status st = FERRY_OK;
    for (int slot = w->tab.first[group]; slot < w->tab.first[group + 1] && st == FERRY_OK; slot++) {
        const llama_tensor_info *info = &w->tab.info[slot];
        const float *src = values + info->offset;
        sft_writer *sw = w->w[w->shard[slot]];
        size_t n = hf_numel(info);
        if (w->dtype == FERRY_DTYPE_F32) {
            st = sft_writer_put(sw, w->index[slot], 0, src, (uint64_t)n * sizeof(float));
            continue;
        }
        if (!stage && !(stage = malloc(CHUNK_ELEMS * es)))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "saving %s: out of host memory", info->name);
        for (size_t at = 0; at < n && st == FERRY_OK; at += CHUNK_ELEMS) {
            size_t k = n - at < CHUNK_ELEMS ? n - at : CHUNK_ELEMS;
            st = half_convert(stage, w->dtype, src + at, FERRY_DTYPE_F32, k);
            if (st == FERRY_OK)
                st = sft_writer_put(sw, w->index[slot], (uint64_t)at * es, stage, (uint64_t)k * es);
        }
    }
    free(stage);
    if (st != FERRY_OK)
        return err_wrap(st, "saving group %d (%s) to '%s'", group, label, w->dir);
    w->saved[group] = true;
    return FERRY_OK;
}

/* "model-00001-of-00004.safetensors": i and n, or false. */
static bool shard_name(const char *name, int *i, int *n)
{
    static const char pattern[] = "model-#####-of-#####.safetensors";
    if (strlen(name) != sizeof pattern - 1)
        return false;
    for (size_t k = 0; pattern[k]; k++)
        if (pattern[k] == '#' ? name[k] < '0' || name[k] > '9' : name[k] != pattern[k])
            return false;
    *i = atoi(name + 6);
    *n = atoi(name + 15);
    return true;
}

static ferry_status remove_file(const char *dir, const char *name)
{
    char path[PATH_CAP];
    ferry_status st = hf_path(path, sizeof path, dir, name);
    if (st == FERRY_OK && unlink(path) != 0 && errno != ENOENT)
        st = err_set(FERRY_ERR_IO, "cannot remove '%s', left by an earlier save (a reader would take it for part "
                     "of this one): %s", path, strerror(errno));
    return st;
}

/* Shards of an earlier save that are not this one's (all of them when this
 * one is a single file). */
static ferry_status remove_stale_shards(const hf_llama_writer *w)
{
    DIR *d = opendir(w->dir);
    if (!d)
        return err_set(FERRY_ERR_IO, "cannot list '%s' for the files of an earlier save: %s", w->dir, strerror(errno));
    ferry_status st = FERRY_OK;
    int ours = w->n_shards > 1 ? w->n_shards : 0;
    for (struct dirent *e; st == FERRY_OK && (e = readdir(d)) != NULL;) {
        int i, n;
        if (shard_name(e->d_name, &i, &n) && !(n == ours && i >= 1 && i <= n))
            st = remove_file(w->dir, e->d_name);
    }
    closedir(d);
    return st;
}

static ferry_status write_index(const hf_llama_writer *w)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(j, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)w->total);
    cJSON *map = cJSON_AddObjectToObject(j, "weight_map");
    for (int slot = 0; map && slot < w->tab.slots; slot++)
        cJSON_AddStringToObject(map, w->tab.info[slot].name, w->names[w->shard[slot]]);
    char path[PATH_CAP];
    ferry_status st = hf_path(path, sizeof path, w->dir, INDEX_NAME);
    if (st == FERRY_OK)
        st = map ? hf_json_write(path, j) : err_set(FERRY_ERR_OUT_OF_MEMORY, "writing '%s': out of memory", path);
    cJSON_Delete(j);
    return st;
}

ferry_status hf_llama_save_commit(hf_llama_writer *w)
{
    if (!w)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_save_commit: no writer");
    ferry_status st = FERRY_OK;
    for (int g = 0; g < w->tab.groups && st == FERRY_OK; g++)
        if (!w->saved[g]) {
            char label[64];
            llama_group_label(w->m, g, label, sizeof label);
            st = err_set(FERRY_ERR_STATE, "saving '%s': group %d (%s) was not saved; every group must be before the "
                         "commit", w->dir, g, label);
        }
    for (int s = 0; s < w->n_shards && st == FERRY_OK; s++) {
        st = sft_writer_commit(w->w[s]);
        w->w[s] = NULL;
    }
    /* Order: the weights, then what would let a reader take an earlier
     * save's files for this one goes, then the index naming the new ones. */
    bool sharded = w->n_shards > 1;
    if (st == FERRY_OK)
        st = remove_file(w->dir, sharded ? SINGLE_NAME : INDEX_NAME);
    if (st == FERRY_OK && sharded)
        st = write_index(w);
    if (st == FERRY_OK)
        st = remove_stale_shards(w);
    char path[PATH_CAP];
    if (st == FERRY_OK)
        st = hf_path(path, sizeof path, w->dir, "config.json");
    if (st == FERRY_OK)
        st = hf_llama_write_config(path, llama_get_config(w->m), w->dtype, w->has_ferry ? &w->ferry : NULL);
    if (st == FERRY_OK)
        st = fileio_sync_dir(w->dir);
    hf_llama_save_abort(w);
    return st;
}

ferry_status hf_llama_save(const char *dir, const llama_model *m, float *const *groups, ferry_dtype dtype,
                           uint64_t shard_bytes, const hf_ferry_info *ferry)
{
    hf_llama_writer *w = NULL;
    ferry_status st = groups ? hf_llama_save_begin(dir, m, dtype, shard_bytes, ferry, &w)
                             : err_set(FERRY_ERR_INVALID_ARGUMENT, "hf_llama_save: no group values");
    for (int g = 0; st == FERRY_OK && g < llama_num_groups(m); g++)
        st = hf_llama_save_group(w, g, groups[g]);
    if (st != FERRY_OK) {
        hf_llama_save_abort(w);
        return st;
    }
    return hf_llama_save_commit(w);
}
