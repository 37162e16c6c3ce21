/* The simplest placement of GPT-2's parameters: every group's params and
 * grads in plain device buffers for the whole run (no offload), with hooks
 * that just hand them out, and fp32 transfers through a small staging buffer
 * converted by ops_convert_*. The baseline the tests compare the engine's
 * modes with (GPT-2 with nothing offloaded, no engine between); the engine
 * has its own placement. */
#include "models/gpt2_internal.h"

#include <stdlib.h>

#include "common/error.h"

#define RESIDENT_STAGING_ELEMS ((size_t)1 << 20)

struct gpt2_resident {
    const gpt2_model *m;
    backend *be;
    size_t es;
    act_t **params, **grads;
    float *staging; /* device, fp32 */
};

#define CHECK(expr)                                                                             \
    do {                                                                                        \
        ferry_status st_ = (expr);                                                              \
        if (st_ != FERRY_OK)                                                                    \
            return st_;                                                                         \
    } while (0)

static ferry_status alloc_groups(gpt2_resident *r)
{
    for (int g = 0; g < r->m->num_groups; g++) {
        size_t bytes = gpt2_group_numel(r->m, g) * r->es;
        ferry_status st = backend_alloc(r->be, bytes, &r->params[g]);
        if (st == FERRY_OK)
            st = backend_alloc(r->be, bytes, &r->grads[g]);
        if (st != FERRY_OK)
            return err_wrap(st, "gpt2 resident params and grads of group %d", g);
    }
    return backend_alloc(r->be, RESIDENT_STAGING_ELEMS * sizeof(float), (void **)&r->staging);
}

ferry_status gpt2_resident_create(const gpt2_model *m, backend *be, gpt2_resident **out)
{
    if (!m || !be || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_create: NULL argument");
    *out = NULL;
    gpt2_resident *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_resident_create: out of host memory");
    r->m = m;
    r->be = be;
    r->es = dtype_size(backend_act_dtype(be));
    r->params = calloc((size_t)m->num_groups, sizeof *r->params);
    r->grads = calloc((size_t)m->num_groups, sizeof *r->grads);
    ferry_status st = r->params && r->grads
                          ? alloc_groups(r)
                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "gpt2_resident_create: out of host memory");
    backend_stream *s = NULL;
    if (st == FERRY_OK)
        st = backend_stream_create(be, "gpt2 resident", &s);
    if (st == FERRY_OK)
        st = gpt2_resident_zero_grads(r, s);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(s);
    backend_stream_destroy(s);
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
    for (int g = 0; g < r->m->num_groups; g++) {
        if (r->params && r->params[g])
            backend_free(r->be, r->params[g]);
        if (r->grads && r->grads[g])
            backend_free(r->be, r->grads[g]);
    }
    if (r->staging)
        backend_free(r->be, r->staging);
    free(r->params);
    free(r->grads);
    free(r);
}

static ferry_status check_group(const gpt2_resident *r, int group, const char *who)
{
    if (group < 0 || group >= r->m->num_groups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: group %d does not exist (0..%d)", who,
                       group, r->m->num_groups - 1);
    return FERRY_OK;
}

static ferry_status hook_params(void *ctx, int group, ferry_phase phase, backend_stream *s,
                                const act_t **params)
{
    (void)phase;
    (void)s;
    gpt2_resident *r = ctx;
    CHECK(check_group(r, group, "gpt2 resident acquire_params"));
    *params = r->params[group];
    return FERRY_OK;
}

static ferry_status hook_grads(void *ctx, int group, backend_stream *s, act_t **grads)
{
    (void)s;
    gpt2_resident *r = ctx;
    CHECK(check_group(r, group, "gpt2 resident acquire_grads"));
    *grads = r->grads[group];
    return FERRY_OK;
}

static ferry_status hook_release(void *ctx, int group, ferry_phase phase, backend_stream *s)
{
    (void)phase;
    (void)s;
    return check_group(ctx, group, "gpt2 resident release");
}

gpt2_hooks gpt2_resident_hooks(gpt2_resident *r)
{
    return (gpt2_hooks){r, hook_params, hook_grads, hook_release};
}

act_t *gpt2_resident_params(gpt2_resident *r, int group)
{
    return r && group >= 0 && group < r->m->num_groups ? r->params[group] : NULL;
}

act_t *gpt2_resident_grads(gpt2_resident *r, int group)
{
    return r && group >= 0 && group < r->m->num_groups ? r->grads[group] : NULL;
}

ferry_status gpt2_resident_zero_grads(gpt2_resident *r, backend_stream *s)
{
    if (!r || !s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_zero_grads: NULL argument");
    for (int g = 0; g < r->m->num_groups; g++)
        CHECK(backend_memset_async(s, r->grads[g], 0, gpt2_group_numel(r->m, g) * r->es));
    return FERRY_OK;
}

/* Host fp32 -> staging -> storage type, a staging-full at a time; the stream
 * orders each chunk's copy after the previous chunk's conversion. */
static ferry_status upload(gpt2_resident *r, backend_stream *s, act_t *dst, const float *host,
                           size_t n)
{
    for (size_t off = 0; off < n; off += RESIDENT_STAGING_ELEMS) {
        size_t k = n - off < RESIDENT_STAGING_ELEMS ? n - off : RESIDENT_STAGING_ELEMS;
        CHECK(backend_memcpy_async(s, r->staging, host + off, k * sizeof(float),
                                   BACKEND_COPY_H2D));
        CHECK(ops_convert_from_f32(s, (char *)dst + off * r->es, r->staging, k));
    }
    return backend_stream_synchronize(s);
}

static ferry_status download(gpt2_resident *r, backend_stream *s, float *host, const act_t *src,
                             size_t n)
{
    for (size_t off = 0; off < n; off += RESIDENT_STAGING_ELEMS) {
        size_t k = n - off < RESIDENT_STAGING_ELEMS ? n - off : RESIDENT_STAGING_ELEMS;
        CHECK(ops_convert_to_f32(s, r->staging, (const char *)src + off * r->es, k));
        CHECK(backend_memcpy_async(s, host + off, r->staging, k * sizeof(float),
                                   BACKEND_COPY_D2H));
    }
    return backend_stream_synchronize(s);
}

static ferry_status check_io(gpt2_resident *r, backend_stream *s, int group, const void *host,
                             const char *who)
{
    if (!r || !s || !host)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    return check_group(r, group, who);
}

ferry_status gpt2_resident_set_params(gpt2_resident *r, backend_stream *s, int group,
                                      const float *host)
{
    CHECK(check_io(r, s, group, host, "gpt2_resident_set_params"));
    return upload(r, s, r->params[group], host, gpt2_group_numel(r->m, group));
}

ferry_status gpt2_resident_get_params(gpt2_resident *r, backend_stream *s, int group, float *host)
{
    CHECK(check_io(r, s, group, host, "gpt2_resident_get_params"));
    return download(r, s, host, r->params[group], gpt2_group_numel(r->m, group));
}

ferry_status gpt2_resident_get_grads(gpt2_resident *r, backend_stream *s, int group, float *host)
{
    CHECK(check_io(r, s, group, host, "gpt2_resident_get_grads"));
    return download(r, s, host, r->grads[group], gpt2_group_numel(r->m, group));
}

ferry_status gpt2_resident_init(gpt2_resident *r, backend_stream *s, uint64_t seed)
{
    if (!r || !s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "gpt2_resident_init: NULL argument");
    for (int g = 0; g < r->m->num_groups; g++) {
        size_t n = gpt2_group_numel(r->m, g);
        float *host = malloc(n * sizeof *host);
        if (!host)
            return err_set(FERRY_ERR_OUT_OF_MEMORY,
                           "gpt2_resident_init: out of host memory for group %d (%zu floats)", g,
                           n);
        ferry_status st = gpt2_init_group(r->m, g, seed, host);
        if (st == FERRY_OK)
            st = gpt2_resident_set_params(r, s, g, host);
        free(host);
        CHECK(st);
    }
    return FERRY_OK;
}
