/* Either family behind one face (models/lmodel.h): every call dispatches
 * on the spec's family. */
#include "models/lmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "models/gpt2_engine.h"
#include "models/llama_engine.h"

struct lmodel {
    model_spec spec;
    gpt2_model *g;
    llama_model *l;
};

struct lmodel_acts {
    gpt2_activations *g;
    llama_activations *l;
};

ferry_status model_spec_preset(const char *name, model_spec *out)
{
    if (!name || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "model_spec_preset: NULL argument");
    memset(out, 0, sizeof *out);
    if (llama_is_preset(name)) {
        out->family = MODEL_FAMILY_LLAMA;
        return llama_config_preset(name, &out->llama);
    }
    out->family = MODEL_FAMILY_GPT2;
    ferry_status st = gpt2_config_preset(name, &out->gpt2);
    if (st != FERRY_OK)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "unknown model '%s': GPT-2's are gpt2, gpt2-medium, gpt2-large, gpt2-xl and dN; the Llama "
                       "family's are smollm2-135m, smollm2-360m, tinyllama-1.1b, llama3.2-1b, llama3.2-3b, "
                       "llama3.1-8b, llama2-7b, mistral-7b, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b and llama-dN; "
                       "or start from a Hugging Face folder with --init-from",
                       name);
    return st;
}

const char *model_spec_type(const model_spec *s)
{
    return s->family == MODEL_FAMILY_LLAMA ? s->llama.model_type : "gpt2";
}

int model_spec_vocab(const model_spec *s)
{
    return s->family == MODEL_FAMILY_LLAMA ? s->llama.vocab_size : s->gpt2.vocab_size;
}

int model_spec_context(const model_spec *s)
{
    return s->family == MODEL_FAMILY_LLAMA ? s->llama.max_seq_len : s->gpt2.max_seq_len;
}

void model_spec_plan_request(const model_spec *s, gpt2_plan_request *rq)
{
    rq->cfg = s->family == MODEL_FAMILY_GPT2 ? &s->gpt2 : NULL;
    rq->llama = s->family == MODEL_FAMILY_LLAMA ? &s->llama : NULL;
}

ferry_status lmodel_create(const model_spec *spec, lmodel **out)
{
    if (!spec || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "lmodel_create: NULL argument");
    *out = NULL;
    lmodel *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "lmodel_create: out of host memory");
    m->spec = *spec;
    ferry_status st = spec->family == MODEL_FAMILY_LLAMA ? llama_create(&spec->llama, &m->l)
                                                          : gpt2_create(&spec->gpt2, &m->g);
    if (st != FERRY_OK) {
        free(m);
        return st;
    }
    *out = m;
    return FERRY_OK;
}

void lmodel_destroy(lmodel *m)
{
    if (!m)
        return;
    gpt2_destroy(m->g);
    llama_destroy(m->l);
    free(m);
}

const model_spec *lmodel_spec(const lmodel *m) { return &m->spec; }
const gpt2_model *lmodel_gpt2(const lmodel *m) { return m->g; }
const llama_model *lmodel_llama(const lmodel *m) { return m->l; }
model_desc lmodel_desc(const lmodel *m) { return m->l ? llama_desc(m->l) : gpt2_desc(m->g); }
int lmodel_num_groups(const lmodel *m) { return m->l ? llama_num_groups(m->l) : gpt2_num_groups(m->g); }

size_t lmodel_group_numel(const lmodel *m, int group)
{
    return m->l ? llama_group_numel(m->l, group) : gpt2_group_numel(m->g, group);
}

int lmodel_group_tensor_count(const lmodel *m, int group)
{
    return m->l ? llama_group_tensor_count(m->l, group) : gpt2_group_tensor_count(m->g, group);
}

ferry_status lmodel_group_tensor(const lmodel *m, int group, int index, lmodel_tensor *out)
{
    memset(out, 0, sizeof *out);
    if (m->l) {
        llama_tensor_info t;
        ferry_status st = llama_group_tensor(m->l, group, index, &t);
        if (st == FERRY_OK) {
            *out = (lmodel_tensor){.offset = t.offset, .numel = t.numel, .ndim = t.ndim,
                                   .shape = {t.shape[0], t.shape[1]}, .decay = t.decay};
            snprintf(out->name, sizeof out->name, "%s", t.name);
        }
        return st;
    }
    gpt2_tensor_info t;
    ferry_status st = gpt2_group_tensor(m->g, group, index, &t);
    if (st == FERRY_OK) {
        *out = (lmodel_tensor){.offset = t.offset, .numel = t.numel, .ndim = t.ndim,
                               .shape = {t.shape[0], t.shape[1]}, .decay = t.decay};
        snprintf(out->name, sizeof out->name, "%s", t.name);
    }
    return st;
}

uint64_t lmodel_num_params(const lmodel *m) { return m->l ? llama_num_params(m->l) : gpt2_num_params(m->g); }
int lmodel_vocab(const lmodel *m) { return model_spec_vocab(&m->spec); }
int lmodel_context(const lmodel *m) { return model_spec_context(&m->spec); }

double lmodel_flops_per_token(const lmodel *m, int T)
{
    double n = (double)lmodel_num_params(m);
    if (m->g)
        return 6.0 * n + 12.0 * m->spec.gpt2.n_layer * m->spec.gpt2.n_embd * T;
    const llama_config *c = &m->spec.llama;
    return 6.0 * n + 12.0 * c->n_layer * (double)c->n_head * c->head_dim * T;
}

ferry_status lmodel_acts_create(const lmodel *m, backend *be, int B, int T, bool recompute,
                                const model_allocator *alloc, lmodel_acts **out)
{
    if (!out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "lmodel_acts_create: out is NULL");
    *out = NULL;
    lmodel_acts *a = calloc(1, sizeof *a);
    if (!a)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "lmodel_acts_create: out of host memory");
    ferry_status st = m->l ? llama_activations_create(m->l, be, B, T, recompute, alloc, &a->l)
                           : gpt2_activations_create(m->g, be, B, T, recompute, alloc, &a->g);
    if (st != FERRY_OK) {
        free(a);
        return st;
    }
    *out = a;
    return FERRY_OK;
}

void lmodel_acts_destroy(lmodel_acts *a)
{
    if (!a)
        return;
    gpt2_activations_destroy(a->g);
    llama_activations_destroy(a->l);
    free(a);
}

size_t lmodel_acts_bytes(const lmodel *m, ferry_dtype act, int B, int T, bool recompute)
{
    return m->l ? llama_activations_bytes(m->l, act, B, T, recompute)
                : gpt2_activations_bytes(m->g, act, B, T, recompute);
}

ferry_status lmodel_set_positions(lmodel_acts *a, const int32_t *pos)
{
    if (!a)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "lmodel_set_positions: activations are NULL");
    return a->l ? llama_set_positions(a->l, pos) : gpt2_set_positions(a->g, pos);
}

ferry_status lmodel_forward(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *s,
                            const int32_t *tokens, const int32_t *targets, bool for_backward)
{
    return m->l ? llama_forward(m->l, a->l, h, s, tokens, targets, for_backward)
                : gpt2_forward(m->g, a->g, h, s, tokens, targets, for_backward);
}

ferry_status lmodel_backward(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *s,
                             float grad_scale)
{
    return m->l ? llama_backward(m->l, a->l, h, s, grad_scale) : gpt2_backward(m->g, a->g, h, s, grad_scale);
}

ferry_status lmodel_loss(lmodel_acts *a, backend_stream *s, float *loss)
{
    return a->l ? llama_loss(a->l, s, loss) : gpt2_loss(a->g, s, loss);
}

ferry_status lmodel_logits(const lmodel *m, lmodel_acts *a, const model_hooks *h, backend_stream *s, int b, int t,
                           float *logits)
{
    return m->l ? llama_logits(m->l, a->l, h, s, b, t, logits) : gpt2_logits(m->g, a->g, h, s, b, t, logits);
}
