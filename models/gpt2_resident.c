/* GPT-2's parameters placed resident (models/model_resident.c: every
 * group's params and grads in plain device buffers, no offload), and its
 * initialisation uploaded: the baseline the tests compare the engine's modes
 * with. */
#include "models/gpt2_internal.h"

#include <stdlib.h>

#include "common/error.h"

struct gpt2_resident {
    const gpt2_model *m;
    model_resident *r;
};

ferry_status gpt2_resident_create(const gpt2_model *m, backend *be, gpt2_resident **out)
{
    if (!m || !be || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_create: NULL argument");
    *out = NULL;
    gpt2_resident *r = calloc(1, sizeof *r);
    size_t *numel = calloc((size_t)m->num_groups, sizeof *numel);
    ferry_status st = r && numel ? FERRY_OK
                                 : err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_resident_create: out of host memory");
    for (int g = 0; st == FERRY_OK && g < m->num_groups; g++)
        numel[g] = gpt2_group_numel(m, g);
    if (st == FERRY_OK) {
        r->m = m;
        st = model_resident_create(be, m->num_groups, numel, "gpt2", &r->r);
    }
    free(numel);
    if (st != FERRY_OK) {
        gpt2_resident_destroy(r);
        return st;
    }
    *out = r;
    return FERRY_OK;
}

void gpt2_resident_destroy(gpt2_resident *r)
{
    if (!r)
        return;
    model_resident_destroy(r->r);
    free(r);
}

gpt2_hooks gpt2_resident_hooks(gpt2_resident *r) { return model_resident_hooks(r->r); }
act_t *gpt2_resident_params(gpt2_resident *r, int group) { return r ? model_resident_params(r->r, group) : NULL; }
act_t *gpt2_resident_grads(gpt2_resident *r, int group) { return r ? model_resident_grads(r->r, group) : NULL; }

ferry_status gpt2_resident_zero_grads(gpt2_resident *r, backend_stream *s)
{
    if (!r)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_zero_grads: NULL argument");
    return model_resident_zero_grads(r->r, s);
}

ferry_status gpt2_resident_set_params(gpt2_resident *r, backend_stream *s, int group, const float *host)
{
    if (!r)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_set_params: NULL argument");
    return model_resident_set_params(r->r, s, group, host);
}

ferry_status gpt2_resident_get_params(gpt2_resident *r, backend_stream *s, int group, float *host)
{
    if (!r)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_get_params: NULL argument");
    return model_resident_get_params(r->r, s, group, host);
}

ferry_status gpt2_resident_get_grads(gpt2_resident *r, backend_stream *s, int group, float *host)
{
    if (!r)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_get_grads: NULL argument");
    return model_resident_get_grads(r->r, s, group, host);
}

ferry_status gpt2_resident_init(gpt2_resident *r, backend_stream *s, uint64_t seed)
{
    if (!r || !s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_init: NULL argument");
    for (int g = 0; g < r->m->num_groups; g++) {
        size_t n = gpt2_group_numel(r->m, g);
        float *host = malloc(n * sizeof *host);
        if (!host)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_resident_init: out of host memory for group %d (%zu floats)",
                           g, n);
        ferry_status st = gpt2_init_group(r->m, g, seed, host);
        if (st == FERRY_OK)
            st = model_resident_set_params(r->r, s, g, host);
        free(host);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}
