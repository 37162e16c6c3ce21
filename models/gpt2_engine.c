/* GPT-2 over the engine: its groups described to models/model_engine.c. */
#include "models/gpt2_engine.h"

static int d_num_groups(const void *m) { return gpt2_num_groups(m); }
static size_t d_group_numel(const void *m, int g) { return gpt2_group_numel(m, g); }
static void d_group_label(const void *m, int g, char *buf, size_t cap) { gpt2_group_label(m, g, buf, cap); }
static int d_tensor_count(const void *m, int g) { return gpt2_group_tensor_count(m, g); }
static ferry_status d_init_group(const void *m, int g, uint64_t seed, float *out)
{
    return gpt2_init_group(m, g, seed, out);
}

static ferry_status d_tensor_span(const void *m, int g, int i, size_t *offset, size_t *numel, bool *decay)
{
    gpt2_tensor_info info;
    ferry_status st = gpt2_group_tensor(m, g, i, &info);
    *offset = info.offset;
    *numel = info.numel;
    *decay = info.decay;
    return st;
}

model_desc gpt2_desc(const gpt2_model *m)
{
    return (model_desc){m, "gpt2", d_num_groups, d_group_numel, d_group_label, d_tensor_count, d_tensor_span,
                        d_init_group};
}

gpt2_hooks gpt2_engine_hooks(ferry_engine *e) { return model_engine_hooks(e); }
gpt2_allocator gpt2_engine_allocator(ferry_engine *e) { return model_engine_allocator(e); }

/* GPT-2 recipes decay only the 2-D weights: biases and layernorms are exempt
 * (gpt2_tensor_info.decay). */
ferry_status gpt2_engine_add_groups(const gpt2_model *m, ferry_engine *e, uint64_t seed, float *const *values)
{
    model_desc d = gpt2_desc(m);
    return model_engine_add_groups(&d, e, seed, values);
}
