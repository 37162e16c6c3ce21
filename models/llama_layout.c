/* The Llama family's configuration (the published shapes, the scaled-down
 * test shapes, validation, the rotary frequencies), its parameter layout
 * (groups, tensors, Hugging Face names, the fused q/k/v and gate/up runs)
 * and its seeded initialisation. Owns no device memory; models/llama.c runs
 * the model, train/hf_llama.c reads and writes its folders. */
#include "models/llama_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* ---- configuration ---- */

/* FERRY_ERR_INVALID_ARGUMENT, the message naming the field (config.json's
 * name for it) and the value seen. */
static ferry_status bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static ferry_status bad(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama config: %s", msg);
}

static ferry_status validate_rope(const llama_config *c)
{
    const llama_rope_scaling *r = &c->rope_scaling;
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return bad("rope_theta = %g; it must be a finite number > 0", c->rope_theta);
    switch (r->kind) {
    case LLAMA_ROPE_DEFAULT:
        return FERRY_OK;
    case LLAMA_ROPE_LINEAR:
    case LLAMA_ROPE_LLAMA3:
        if (!(r->factor > 0.0f) || !isfinite(r->factor))
            return bad("rope_scaling.factor = %g; it must be a finite number > 0", r->factor);
        if (r->kind == LLAMA_ROPE_LINEAR)
            return FERRY_OK;
        if (!(r->low_freq_factor > 0.0f) || !(r->high_freq_factor > r->low_freq_factor) ||
            !isfinite(r->high_freq_factor))
            return bad("llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor; got %g and %g",
                       r->low_freq_factor, r->high_freq_factor);
        if (r->original_max_position_embeddings < 1)
            return bad("llama3 rope scaling: original_max_position_embeddings = %d; it must be >= 1",
                       r->original_max_position_embeddings);
        return FERRY_OK;
    }
    return bad("rope scaling kind %d is not one ferry implements (default, linear, llama3)",
               (int)r->kind);
}

ferry_status llama_config_validate(const llama_config *c)
{
    if (!c)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama config is NULL");
    if (strcmp(c->model_type, "llama") != 0 && strcmp(c->model_type, "mistral") != 0 &&
        strcmp(c->model_type, "qwen2") != 0)
        return bad("model_type '%.15s' is not one of llama, mistral, qwen2", c->model_type);
    if (c->n_layer < 1 || c->n_layer > 4096)
        return bad("num_hidden_layers = %d; it must be in [1, 4096]", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 65536)
        return bad("hidden_size = %d; it must be in [1, 65536]", c->n_embd);
    if (c->n_head < 1 || c->n_head > 1024)
        return bad("num_attention_heads = %d; it must be in [1, 1024]", c->n_head);
    if (c->n_kv_head < 1 || c->n_kv_head > c->n_head || c->n_head % c->n_kv_head != 0)
        return bad("num_key_value_heads = %d; it must divide num_attention_heads = %d (grouped-query attention)",
                   c->n_kv_head, c->n_head);
    if (c->head_dim < 2 || c->head_dim > 256 || c->head_dim % 2 != 0)
        return bad("head_dim = %d; it must be even and in [2, 256] (attention's largest head)",
                   c->head_dim);
    if (c->intermediate_size < 1 || c->intermediate_size > (1 << 20))
        return bad("intermediate_size = %d; it must be in [1, 1048576]", c->intermediate_size);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
        return bad("vocab_size = %d; it must be in [1, 16777216]", c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > (1 << 24))
        return bad("padded_vocab_size = %d; it must be in [vocab_size = %d, 16777216]",
                   c->padded_vocab_size, c->vocab_size);
    if (c->max_seq_len < 1 || c->max_seq_len > (1 << 20))
        return bad("max_position_embeddings = %d; it must be in [1, 1048576]", c->max_seq_len);
    if (!(c->rms_norm_eps > 0.0f) || !isfinite(c->rms_norm_eps))
        return bad("rms_norm_eps = %g; it must be a finite number > 0", c->rms_norm_eps);
    if (!(c->initializer_range >= 0.0f) || !isfinite(c->initializer_range))
        return bad("initializer_range = %g; it must be a finite number >= 0",
                   c->initializer_range);
    if (c->sliding_window < 0)
        return bad("sliding_window = %d; it must be >= 0 (0: none)", c->sliding_window);
    if (c->bos_token_id >= c->vocab_size || c->eos_token_id >= c->vocab_size)
        return bad("bos_token_id %d / eos_token_id %d must be below vocab_size = %d (-1: none)",
                   c->bos_token_id, c->eos_token_id, c->vocab_size);
    return validate_rope(c);
}

/* The published shapes (their config.json files' values). */
typedef struct llama_preset {
    const char *name, *type;
    int L, C, NH, NKV, HS, I, V, maxT;
    float theta, eps;
    bool tied, bias;
    llama_rope_scaling rope;
    int window, bos, eos;
} llama_preset;

#define ROPE_NONE {LLAMA_ROPE_DEFAULT, 0, 0, 0, 0}
static const llama_preset presets[] = {
    {"smollm2-135m", "llama", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f, 1e-5f, true, false, ROPE_NONE, 0,
     1, 2},
    {"smollm2-360m", "llama", 32, 960, 15, 5, 64, 2560, 49152, 8192, 100000.0f, 1e-5f, true, false, ROPE_NONE, 0,
     1, 2},
    {"tinyllama-1.1b", "llama", 22, 2048, 32, 4, 64, 5632, 32000, 2048, 10000.0f, 1e-5f, false, false, ROPE_NONE,
     0, 1, 2},
    {"llama3.2-1b", "llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false,
     {LLAMA_ROPE_LLAMA3, 32.0f, 1.0f, 4.0f, 8192}, 0, 128000, 128001},
    {"llama3.2-3b", "llama", 28, 3072, 24, 8, 128, 8192, 128256, 131072, 500000.0f, 1e-5f, true, false,
     {LLAMA_ROPE_LLAMA3, 32.0f, 1.0f, 4.0f, 8192}, 0, 128000, 128001},
    {"llama3.1-8b", "llama", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f, 1e-5f, false, false,
     {LLAMA_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 8192}, 0, 128000, 128001},
    {"llama2-7b", "llama", 32, 4096, 32, 32, 128, 11008, 32000, 4096, 10000.0f, 1e-5f, false, false, ROPE_NONE, 0,
     1, 2},
    {"mistral-7b", "mistral", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 10000.0f, 1e-5f, false, false, ROPE_NONE,
     4096, 1, 2},
    {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true, true, ROPE_NONE,
     0, 151643, 151643},
    {"qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1000000.0f, 1e-6f, true, true, ROPE_NONE,
     0, 151643, 151643},
    {"qwen2.5-7b", "qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 131072, 1000000.0f, 1e-6f, false, true,
     ROPE_NONE, 0, 151643, 151643},
};
#define PRESET_COUNT (sizeof presets / sizeof presets[0])

static void from_preset(const llama_preset *p, llama_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "%s", p->type);
    c->n_layer = p->L;
    c->n_embd = p->C;
    c->n_head = p->NH;
    c->n_kv_head = p->NKV;
    c->head_dim = p->HS;
    c->intermediate_size = p->I;
    c->vocab_size = p->V;
    c->padded_vocab_size = (p->V + LLAMA_VOCAB_PAD - 1) / LLAMA_VOCAB_PAD * LLAMA_VOCAB_PAD;
    c->max_seq_len = p->maxT;
    c->rms_norm_eps = p->eps;
    c->rope_theta = p->theta;
    c->rope_scaling = p->rope;
    c->qkv_bias = p->bias;
    c->tied_embeddings = p->tied;
    c->sliding_window = p->window;
    c->initializer_range = 0.02f;
    c->bos_token_id = p->bos;
    c->eos_token_id = p->eos;
}

/* "llama-d<N>": Llama 3.1's vocabulary, rope and context at a test's size. */
static bool scaled(const char *name, llama_config *c)
{
    if (strncmp(name, "llama-d", 7) != 0 || name[7] < '1' || name[7] > '9')
        return false;
    char *end = NULL;
    errno = 0;
    long n = strtol(name + 7, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > 128)
        return false;
    from_preset(&presets[5], c); /* llama3.1-8b */
    c->n_layer = (int)n;
    c->n_head = (int)n;
    c->n_kv_head = n % 2 == 0 ? (int)n / 2 : (int)n;
    c->head_dim = 64;
    c->n_embd = 64 * (int)n;
    c->intermediate_size = (64 * (int)n * 8 / 3 + 63) / 64 * 64;
    return true;
}

bool llama_is_preset(const char *name)
{
    llama_config c;
    if (!name)
        return false;
    for (size_t i = 0; i < PRESET_COUNT; i++)
        if (strcmp(name, presets[i].name) == 0)
            return true;
    return scaled(name, &c);
}

ferry_status llama_config_preset(const char *name, llama_config *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_config_preset: NULL argument");
    for (size_t i = 0; i < PRESET_COUNT; i++)
        if (strcmp(name, presets[i].name) == 0) {
            from_preset(&presets[i], out);
            return llama_config_validate(out);
        }
    if (scaled(name, out))
        return llama_config_validate(out);
    char known[512] = "";
    for (size_t i = 0; i < PRESET_COUNT; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", presets[i].name);
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "unknown Llama-family model '%s': use %s, or llama-d<N> with N in [1, 128] (a Llama 3 shape with "
                   "N layers of N heads, 64 N wide), or an HF folder with --init-from",
                   name, known);
}

/* As transformers computes them: theta^(i / (HS / 2) ... ) in fp32 from
 * arange(0, HS, 2) / HS, then the scaling of the config. */
void llama_rope_inv_freq(const llama_config *c, float *inv_freq)
{
    int half = c->head_dim / 2;
    const llama_rope_scaling *r = &c->rope_scaling;
    for (int i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)c->head_dim;
        float f = 1.0f / powf(c->rope_theta, expo);
        if (r->kind == LLAMA_ROPE_LINEAR) {
            f = f / r->factor;
        } else if (r->kind == LLAMA_ROPE_LLAMA3) {
            float old = (float)r->original_max_position_embeddings;
            float low_wavelen = old / r->low_freq_factor, high_wavelen = old / r->high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / r->factor;
            } else if (!(wavelen < high_wavelen)) {
                float smooth = (old / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                f = (1.0f - smooth) * f / r->factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

/* ---- layout ---- */

static size_t align_up(size_t n) { return (n + LLAMA_ALIGN_ELEMS - 1) / LLAMA_ALIGN_ELEMS * LLAMA_ALIGN_ELEMS; }

/* Appends a tensor; `fused` places it right after the previous one (no
 * alignment gap: the run is one matrix to the ops). */
static void add(llama_group *grp, size_t *off, const char *name, int rows, int cols, model_init_kind init, bool fused)
{
    llama_tensor *t = &grp->tensors[grp->count++];
    snprintf(t->info.name, sizeof t->info.name, "%s", name);
    t->info.ndim = cols ? 2 : 1;
    t->info.shape[0] = rows;
    t->info.shape[1] = cols;
    t->info.hf_rows = rows;
    t->info.numel = (size_t)rows * (cols ? (size_t)cols : 1);
    t->info.decay = cols != 0;
    t->init = init;
    if (!fused)
        *off = align_up(*off);
    t->info.offset = *off;
    *off += t->info.numel;
}

static void build_layer(llama_model *m, llama_group *grp, int l)
{
    const llama_config *c = &m->cfg;
    int C = c->n_embd, q = c->n_head * c->head_dim, kv = c->n_kv_head * c->head_dim, I = c->intermediate_size;
    size_t off = 0;
    char name[LLAMA_NAME_MAX];
    for (int i = 0; i < LB_COUNT; i++)
        m->block_index[i] = -1;
#define ADD(role, suffix, rows, cols, init, fused)                                                                     \
    do {                                                                                                               \
        m->block_index[role] = grp->count;                                                                             \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                                                  \
        add(grp, &off, name, rows, cols, init, fused);                                                                 \
    } while (0)
    ADD(LB_NORM1, "input_layernorm.weight", C, 0, MODEL_INIT_ONE, false);
    ADD(LB_Q, "self_attn.q_proj.weight", q, C, MODEL_INIT_NORMAL, false);
    ADD(LB_K, "self_attn.k_proj.weight", kv, C, MODEL_INIT_NORMAL, true);
    ADD(LB_V, "self_attn.v_proj.weight", kv, C, MODEL_INIT_NORMAL, true);
    if (c->qkv_bias) {
        ADD(LB_QB, "self_attn.q_proj.bias", q, 0, MODEL_INIT_ZERO, false);
        ADD(LB_KB, "self_attn.k_proj.bias", kv, 0, MODEL_INIT_ZERO, true);
        ADD(LB_VB, "self_attn.v_proj.bias", kv, 0, MODEL_INIT_ZERO, true);
    }
    ADD(LB_O, "self_attn.o_proj.weight", C, q, MODEL_INIT_NORMAL, false);
    ADD(LB_NORM2, "post_attention_layernorm.weight", C, 0, MODEL_INIT_ONE, false);
    ADD(LB_GATE, "mlp.gate_proj.weight", I, C, MODEL_INIT_NORMAL, false);
    ADD(LB_UP, "mlp.up_proj.weight", I, C, MODEL_INIT_NORMAL, true);
    ADD(LB_DOWN, "mlp.down_proj.weight", C, I, MODEL_INIT_NORMAL, false);
#undef ADD
    grp->numel = align_up(off);
}

static ferry_status build_group(llama_model *m, int g)
{
    const llama_config *c = &m->cfg;
    int L = c->n_layer;
    llama_group *grp = &m->groups[g];
    grp->tensors = calloc(LB_COUNT, sizeof *grp->tensors);
    if (!grp->tensors)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "llama: out of host memory for the tensor table");
    size_t off = 0;
    if (g == 0) {
        add(grp, &off, "model.embed_tokens.weight", c->padded_vocab_size, c->n_embd, MODEL_INIT_NORMAL, false);
        grp->tensors[0].info.hf_rows = c->vocab_size;
    } else if (g == L + 1) {
        add(grp, &off, "model.norm.weight", c->n_embd, 0, MODEL_INIT_ONE, false);
        m->head_index = -1;
        if (!c->tied_embeddings) {
            m->head_index = grp->count;
            add(grp, &off, "lm_head.weight", c->padded_vocab_size, c->n_embd, MODEL_INIT_NORMAL, false);
            grp->tensors[m->head_index].info.hf_rows = c->vocab_size;
        }
    } else {
        build_layer(m, grp, g - 1);
        return FERRY_OK;
    }
    grp->numel = align_up(off);
    return FERRY_OK;
}

ferry_status llama_create(const llama_config *cfg, llama_model **out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_create: out is NULL");
    *out = NULL;
    ferry_status st = llama_config_validate(cfg);
    if (st != FERRY_OK)
        return st;
    llama_model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "llama_create: out of host memory");
    m->cfg = *cfg;
    m->num_groups = cfg->n_layer + 2;
    m->groups = calloc((size_t)m->num_groups, sizeof *m->groups);
    st = m->groups ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "llama_create: out of host memory");
    for (int g = 0; st == FERRY_OK && g < m->num_groups; g++)
        st = build_group(m, g);
    if (st != FERRY_OK) {
        llama_destroy(m);
        return st;
    }
    *out = m;
    return FERRY_OK;
}

void llama_destroy(llama_model *m)
{
    if (!m)
        return;
    for (int g = 0; m->groups && g < m->num_groups; g++)
        free(m->groups[g].tensors);
    free(m->groups);
    free(m);
}

const llama_config *llama_get_config(const llama_model *m) { return &m->cfg; }
int llama_num_groups(const llama_model *m) { return m->num_groups; }

size_t llama_group_numel(const llama_model *m, int group)
{
    return group >= 0 && group < m->num_groups ? m->groups[group].numel : 0;
}

int llama_group_tensor_count(const llama_model *m, int group)
{
    return group >= 0 && group < m->num_groups ? m->groups[group].count : 0;
}

void llama_group_label(const llama_model *m, int group, char *buf, size_t cap)
{
    if (group == 0)
        snprintf(buf, cap, "embeddings");
    else if (group == m->num_groups - 1)
        snprintf(buf, cap, m->cfg.tied_embeddings ? "final norm" : "final norm and head");
    else
        snprintf(buf, cap, "block %d", group - 1);
}

uint64_t llama_num_params(const llama_model *m)
{
    uint64_t n = 0;
    for (int g = 0; g < m->num_groups; g++)
        for (int i = 0; i < m->groups[g].count; i++) {
            const llama_tensor_info *t = &m->groups[g].tensors[i].info;
            n += t->ndim == 2 ? (uint64_t)t->hf_rows * (uint64_t)t->shape[1] : t->numel;
        }
    return n;
}

ferry_status llama_group_tensor(const llama_model *m, int group, int index, llama_tensor_info *out)
{
    if (!m || !out || group < 0 || group >= m->num_groups || index < 0 || index >= m->groups[group].count)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_group_tensor: no tensor %d in group %d", index, group);
    *out = m->groups[group].tensors[index].info;
    return FERRY_OK;
}

ferry_status llama_find_tensor(const llama_model *m, const char *name, int *group, int *index)
{
    for (int g = 0; m && name && g < m->num_groups; g++)
        for (int i = 0; i < m->groups[g].count; i++)
            if (strcmp(m->groups[g].tensors[i].info.name, name) == 0) {
                *group = g;
                *index = i;
                return FERRY_OK;
            }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "llama: no tensor named '%s' in this %d-layer model (names look like "
                   "'model.layers.0.self_attn.q_proj.weight')",
                   name ? name : "(null)", m ? m->cfg.n_layer : 0);
}

/* ---- initialisation ---- */

ferry_status llama_init_group(const llama_model *m, int group, uint64_t seed, float *out)
{
    if (!m || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_init_group: NULL argument");
    if (group < 0 || group >= m->num_groups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "llama_init_group: group %d does not exist (0..%d)", group,
                       m->num_groups - 1);
    const llama_group *grp = &m->groups[group];
    model_init_tensor ts[LB_COUNT];
    for (int i = 0; i < grp->count; i++) {
        const llama_tensor *t = &grp->tensors[i];
        ts[i] = (model_init_tensor){
            .offset = t->info.offset,
            .numel = t->info.numel,
            .drawn = t->info.ndim == 2 ? (size_t)t->info.hf_rows * (size_t)t->info.shape[1] : t->info.numel,
            .kind = t->init,
            .std = m->cfg.initializer_range};
    }
    return model_init_fill(ts, grp->count, grp->numel, seed, group, out);
}
