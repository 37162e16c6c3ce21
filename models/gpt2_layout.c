/* GPT-2's configuration (presets, custom fields, validation), its parameter
 * layout (groups, tensors, Hugging Face names) and its seeded
 * initialisation, drawn on every core in fixed chunks whose streams depend
 * only on (seed, group, tensor, chunk). Owns no device memory; models/gpt2.c
 * runs the model. */
#include "models/gpt2_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define GPT2_VOCAB 50257
#define GPT2_CTX 1024

/* ---- configuration ---- */

ferry_status gpt2_config_validate(const gpt2_config *c)
{
    if (!c)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2 config is NULL");
    if (c->n_layer < 1 || c->n_layer > 4096)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: n_layer = %d; it must be in [1, 4096]", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 65536)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: n_embd = %d; it must be in [1, 65536]", c->n_embd);
    if (c->n_head < 1 || c->n_head > c->n_embd)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: n_head = %d; it must be in [1, n_embd = %d]", c->n_head,
                       c->n_embd);
    if (c->n_embd % c->n_head != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: n_embd = %d is not divisible by n_head = %d; pick a width "
                       "that is a multiple of the head count",
                       c->n_embd, c->n_head);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: vocab_size = %d; it must be in [1, 16777216]", c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size > (1 << 24))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: padded_vocab_size = %d; it must be in [vocab_size = %d, "
                       "16777216] (0 in gpt2_config_from_fields rounds up to a multiple of %d)",
                       c->padded_vocab_size, c->vocab_size, GPT2_VOCAB_PAD);
    if (c->max_seq_len < 1 || c->max_seq_len > (1 << 20))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "gpt2 config: max_seq_len = %d; it must be in [1, 1048576]", c->max_seq_len);
    return FERRY_OK;
}

ferry_status gpt2_config_from_fields(int n_layer, int n_head, int n_embd, int vocab_size,
                                     int padded_vocab_size, int max_seq_len, gpt2_config *out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_config_from_fields: out is NULL");
    gpt2_config c = {n_layer, n_head, n_embd, vocab_size, padded_vocab_size, max_seq_len};
    if (padded_vocab_size == 0 && vocab_size > 0 && vocab_size <= (1 << 24))
        c.padded_vocab_size = (vocab_size + GPT2_VOCAB_PAD - 1) / GPT2_VOCAB_PAD * GPT2_VOCAB_PAD;
    ferry_status st = gpt2_config_validate(&c);
    if (st == FERRY_OK)
        *out = c;
    return st;
}

static const struct {
    const char *name;
    int L, NH, C;
} gpt2_presets[] = {
    {"gpt2", 12, 12, 768},
    {"gpt2-medium", 24, 16, 1024},
    {"gpt2-large", 36, 20, 1280},
    {"gpt2-xl", 48, 25, 1600},
};

ferry_status gpt2_config_preset(const char *name, gpt2_config *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_config_preset: NULL argument");
    for (size_t i = 0; i < sizeof gpt2_presets / sizeof gpt2_presets[0]; i++)
        if (strcmp(name, gpt2_presets[i].name) == 0)
            return gpt2_config_from_fields(gpt2_presets[i].L, gpt2_presets[i].NH,
                                           gpt2_presets[i].C, GPT2_VOCAB, 0, GPT2_CTX, out);
    if (name[0] == 'd' && name[1] >= '1' && name[1] <= '9') {
        char *end = NULL;
        errno = 0;
        long n = strtol(name + 1, &end, 10);
        if (errno == 0 && *end == '\0' && n >= 1 && n <= 256)
            return gpt2_config_from_fields((int)n, (int)n, 64 * (int)n, GPT2_VOCAB, 0, GPT2_CTX,
                                           out);
    }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "unknown GPT-2 model '%s': use gpt2, gpt2-medium, gpt2-large, gpt2-xl, or "
                   "d<N> with N in [1, 256] (N layers, N heads, 64 N wide)",
                   name);
}

/* ---- layout ---- */

typedef struct block_spec {
    const char *suffix; /* after "transformer.h.<l>." */
    int rows_mul;       /* shape[0] = rows_mul * C (0: a vector of vec_mul * C) */
    int cols_mul;       /* shape[1] = cols_mul * C */
    int vec_mul;
    init_kind init;
} block_spec;

/* Buffer order of a block (gpt2_internal.h's BLK_* indices follow it). */
static const block_spec block_specs[BLK_COUNT] = {
    {"ln_1.weight", 0, 0, 1, INIT_ONE},
    {"ln_1.bias", 0, 0, 1, INIT_ZERO},
    {"attn.c_attn.weight", 3, 1, 0, INIT_NORMAL},
    {"attn.c_attn.bias", 0, 0, 3, INIT_ZERO},
    {"attn.c_proj.weight", 1, 1, 0, INIT_NORMAL_RESIDUAL},
    {"attn.c_proj.bias", 0, 0, 1, INIT_ZERO},
    {"ln_2.weight", 0, 0, 1, INIT_ONE},
    {"ln_2.bias", 0, 0, 1, INIT_ZERO},
    {"mlp.c_fc.weight", 4, 1, 0, INIT_NORMAL},
    {"mlp.c_fc.bias", 0, 0, 4, INIT_ZERO},
    {"mlp.c_proj.weight", 1, 4, 0, INIT_NORMAL_RESIDUAL},
    {"mlp.c_proj.bias", 0, 0, 1, INIT_ZERO},
};

static size_t align_up(size_t n)
{
    return (n + GPT2_ALIGN_ELEMS - 1) / GPT2_ALIGN_ELEMS * GPT2_ALIGN_ELEMS;
}

static void set_vector(gpt2_tensor *t, int n)
{
    t->info.ndim = 1;
    t->info.shape[0] = t->info.hf_shape[0] = n;
    t->info.shape[1] = t->info.hf_shape[1] = 0;
    t->info.numel = (size_t)n;
}

static void set_matrix(gpt2_tensor *t, int rows, int cols, bool transposed)
{
    t->info.ndim = 2;
    t->info.shape[0] = rows;
    t->info.shape[1] = cols;
    t->info.hf_shape[0] = transposed ? cols : rows;
    t->info.hf_shape[1] = transposed ? rows : cols;
    t->info.hf_transposed = transposed;
    t->info.decay = true;
    t->info.numel = (size_t)rows * cols;
}

/* Assigns offsets in order and returns the group's element count. */
static size_t place(gpt2_tensor *t, int count)
{
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        t[i].info.offset = off;
        off = align_up(off + t[i].info.numel);
    }
    return off;
}

static ferry_status build_group(gpt2_model *m, int g)
{
    const gpt2_config *c = &m->cfg;
    int C = c->n_embd, L = c->n_layer;
    gpt2_group *grp = &m->groups[g];
    grp->count = g == 0 ? 2 : g == L + 1 ? 2 : BLK_COUNT;
    grp->tensors = calloc((size_t)grp->count, sizeof *grp->tensors);
    if (!grp->tensors)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2: out of host memory for the tensor table");
    gpt2_tensor *t = grp->tensors;
    if (g == 0) {
        snprintf(t[0].info.name, GPT2_NAME_MAX, "transformer.wte.weight");
        set_matrix(&t[0], c->padded_vocab_size, C, false);
        t[0].info.hf_shape[0] = c->vocab_size;
        t[0].info.hf_rows_prefix = c->padded_vocab_size != c->vocab_size;
        t[0].init = INIT_NORMAL;
        snprintf(t[1].info.name, GPT2_NAME_MAX, "transformer.wpe.weight");
        set_matrix(&t[1], c->max_seq_len, C, false);
        t[1].init = INIT_NORMAL;
    } else if (g == L + 1) {
        snprintf(t[0].info.name, GPT2_NAME_MAX, "transformer.ln_f.weight");
        set_vector(&t[0], C);
        t[0].init = INIT_ONE;
        snprintf(t[1].info.name, GPT2_NAME_MAX, "transformer.ln_f.bias");
        set_vector(&t[1], C);
        t[1].init = INIT_ZERO;
    } else {
        for (int i = 0; i < BLK_COUNT; i++) {
            const block_spec *b = &block_specs[i];
            snprintf(t[i].info.name, GPT2_NAME_MAX, "transformer.h.%d.%s", g - 1, b->suffix);
            if (b->rows_mul)
                set_matrix(&t[i], b->rows_mul * C, b->cols_mul * C, true);
            else
                set_vector(&t[i], b->vec_mul * C);
            t[i].init = b->init;
        }
    }
    grp->numel = place(t, grp->count);
    return FERRY_OK;
}

ferry_status gpt2_create(const gpt2_config *cfg, gpt2_model **out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_create: out is NULL");
    *out = NULL;
    ferry_status st = gpt2_config_validate(cfg);
    if (st != FERRY_OK)
        return st;
    gpt2_model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_create: out of host memory");
    m->cfg = *cfg;
    m->num_groups = cfg->n_layer + 2;
    m->groups = calloc((size_t)m->num_groups, sizeof *m->groups);
    if (!m->groups) {
        free(m);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_create: out of host memory");
    }
    for (int g = 0; g < m->num_groups; g++) {
        st = build_group(m, g);
        if (st != FERRY_OK) {
            gpt2_destroy(m);
            return st;
        }
    }
    *out = m;
    return FERRY_OK;
}

void gpt2_destroy(gpt2_model *m)
{
    if (!m)
        return;
    for (int g = 0; g < m->num_groups && m->groups; g++)
        free(m->groups[g].tensors);
    free(m->groups);
    free(m);
}

const gpt2_config *gpt2_get_config(const gpt2_model *m) { return &m->cfg; }
int gpt2_num_groups(const gpt2_model *m) { return m->num_groups; }

void gpt2_group_label(const gpt2_model *m, int group, char *buf, size_t cap)
{
    int L = m->cfg.n_layer;
    if (group == 0)
        snprintf(buf, cap, "embeddings");
    else if (group == L + 1)
        snprintf(buf, cap, "final layernorm");
    else
        snprintf(buf, cap, "block %d", group - 1);
}

size_t gpt2_group_numel(const gpt2_model *m, int group)
{
    return group >= 0 && group < m->num_groups ? m->groups[group].numel : 0;
}

int gpt2_group_tensor_count(const gpt2_model *m, int group)
{
    return group >= 0 && group < m->num_groups ? m->groups[group].count : 0;
}

uint64_t gpt2_num_params(const gpt2_model *m)
{
    uint64_t n = 0;
    for (int g = 0; g < m->num_groups; g++)
        for (int i = 0; i < m->groups[g].count; i++) {
            const gpt2_tensor_info *t = &m->groups[g].tensors[i].info;
            n += t->ndim == 1 ? (uint64_t)t->hf_shape[0]
                              : (uint64_t)t->hf_shape[0] * (uint64_t)t->hf_shape[1];
        }
    return n;
}

ferry_status gpt2_group_tensor(const gpt2_model *m, int group, int index, gpt2_tensor_info *out)
{
    if (!m || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_group_tensor: NULL argument");
    if (group < 0 || group >= m->num_groups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2: group %d does not exist (0..%d)",
                       group, m->num_groups - 1);
    if (index < 0 || index >= m->groups[group].count)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2: group %d has no tensor %d (0..%d)",
                       group, index, m->groups[group].count - 1);
    *out = m->groups[group].tensors[index].info;
    return FERRY_OK;
}

ferry_status gpt2_find_tensor(const gpt2_model *m, const char *name, int *group, int *index)
{
    if (!m || !name || !group || !index)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_find_tensor: NULL argument");
    for (int g = 0; g < m->num_groups; g++)
        for (int i = 0; i < m->groups[g].count; i++)
            if (strcmp(m->groups[g].tensors[i].info.name, name) == 0) {
                *group = g;
                *index = i;
                return FERRY_OK;
            }
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "gpt2: no tensor named '%s' in a %d-layer model (names look like "
                   "'transformer.h.0.attn.c_attn.weight')",
                   name, m->cfg.n_layer);
}

/* ---- initialisation ---- */

ferry_status gpt2_init_group(const gpt2_model *m, int group, uint64_t seed, float *out)
{
    if (!m || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_init_group: NULL argument");
    if (group < 0 || group >= m->num_groups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_init_group: group %d does not exist (0..%d)",
                       group, m->num_groups - 1);
    const gpt2_group *grp = &m->groups[group];
    model_init_tensor *ts = malloc((size_t)(grp->count ? grp->count : 1) * sizeof *ts);
    if (!ts)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_init_group: out of host memory");
    double residual_std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
    for (int i = 0; i < grp->count; i++) {
        const gpt2_tensor *t = &grp->tensors[i];
        bool normal = t->init == INIT_NORMAL || t->init == INIT_NORMAL_RESIDUAL;
        ts[i] = (model_init_tensor){
            .offset = t->info.offset,
            .numel = t->info.numel,
            /* only real rows are drawn: wte's padded rows stay 0 */
            .drawn = t->info.ndim == 2 ? (size_t)t->info.hf_shape[0] * t->info.hf_shape[1] : t->info.numel,
            .kind = normal ? MODEL_INIT_NORMAL : t->init == INIT_ONE ? MODEL_INIT_ONE : MODEL_INIT_ZERO,
            .std = t->init == INIT_NORMAL_RESIDUAL ? residual_std : 0.02};
    }
    ferry_status st = model_init_fill(ts, grp->count, grp->numel, seed, group, out);
    free(ts);
    return st;
}
