/* The Llama family over the engine: its groups described to
 * models/model_engine.c. */
#include "models/llama_engine.h"

static int d_num_groups(const void *m) { return llama_num_groups(m); }
static size_t d_group_numel(const void *m, int g) { return llama_group_numel(m, g); }
static void d_group_label(const void *m, int g, char *buf, size_t cap) { llama_group_label(m, g, buf, cap); }
static int d_tensor_count(const void *m, int g) { return llama_group_tensor_count(m, g); }
static ferry_status d_init_group(const void *m, int g, uint64_t seed, float *out)
{
    return llama_init_group(m, g, seed, out);
}

static ferry_status d_tensor_span(const void *m, int g, int i, size_t *offset, size_t *numel, bool *decay)
{
    llama_tensor_info info;
    ferry_status st = llama_group_tensor(m, g, i, &info);
    *offset = info.offset;
    *numel = info.numel;
    *decay = info.decay;
    return st;
}

model_desc llama_desc(const llama_model *m)
{
    return (model_desc){m, "llama", d_num_groups, d_group_numel, d_group_label, d_tensor_count, d_tensor_span,
                        d_init_group};
}

ferry_status llama_engine_add_groups(const llama_model *m, ferry_engine *e, uint64_t seed, float *const *values)
{
    model_desc d = llama_desc(m);
    return model_engine_add_groups(&d, e, seed, values);
}
