/* The simplest placement of a model's parameters: every group's params and
 * grads in plain device buffers for the whole run (no offload), with hooks
 * that just hand them out, and fp32 transfers through a small staging buffer
 * converted by ops_convert_*. The baseline the tests compare the engine's
 * modes with (a model with nothing offloaded, no engine between); the engine
 * has its own placement. Knows group sizes only, not the family. */
#include "models/model.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "common/error.h"

#define RESIDENT_STAGING_ELEMS ((size_t)1 << 20)

struct model_resident {
    int ngroups;
    size_t *numel;
    char who[32];
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

static ferry_status alloc_groups(model_resident *r)
{
    for (int g = 0; g < r->ngroups; g++) {
        size_t bytes = r->numel[g] * r->es;
        ferry_status st = backend_alloc(r->be, bytes, &r->params[g]);
        if (st == FERRY_OK)
            st = backend_alloc(r->be, bytes, &r->grads[g]);
        if (st != FERRY_OK)
            return err_wrap(st, "%s resident params and grads of group %d", r->who, g);
    }
    return backend_alloc(r->be, RESIDENT_STAGING_ELEMS * sizeof(float), (void **)&r->staging);
}

ferry_status model_resident_create(backend *be, int ngroups, const size_t *numel, const char *who,
                                   model_resident **out)
{
    if (!be || !out || !numel || ngroups < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "model_resident_create: NULL argument or no groups");
    *out = NULL;
    model_resident *r = calloc(1, sizeof *r);
    if (!r)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "model_resident_create: out of host memory");
    r->ngroups = ngroups;
    snprintf(r->who, sizeof r->who, "%s", who ? who : "model");
    r->numel = malloc((size_t)ngroups * sizeof *r->numel);
    if (r->numel)
        memcpy(r->numel, numel, (size_t)ngroups * sizeof *r->numel);
    r->be = be;
    r->es = dtype_size(backend_act_dtype(be));
    r->params = calloc((size_t)ngroups, sizeof *r->params);
    r->grads = calloc((size_t)ngroups, sizeof *r->grads);
    ferry_status st = r->numel && r->params && r->grads
                          ? alloc_groups(r)
                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "model_resident_create: out of host memory");
    backend_stream *s = NULL;
    if (st == FERRY_OK)
        st = backend_stream_create(be, "resident", &s);
    if (st == FERRY_OK)
        st = model_resident_zero_grads(r, s);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(s);
    backend_stream_destroy(s);
    if (st != FERRY_OK) {
        model_resident_destroy(r);
        return st;
    }
    *out = r;
    return FERRY_OK;
}

void model_resident_destroy(model_resident *r)
{
    if (!r)
        return;
    for (int g = 0; g < r->ngroups; g++) {
        if (r->params && r->params[g])
            backend_free(r->be, r->params[g]);
        if (r->grads && r->grads[g])
            backend_free(r->be, r->grads[g]);
    }
    if (r->staging)
        backend_free(r->be, r->staging);
    free(r->params);
    free(r->grads);
    free(r->numel);
    free(r);
}

static ferry_status check_group(const model_resident *r, int group, const char *who)
{
    if (group < 0 || group >= r->ngroups)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: group %d does not exist (0..%d)", who,
                       group, r->ngroups - 1);
    return FERRY_OK;
}

static ferry_status hook_params(void *ctx, int group, ferry_phase phase, backend_stream *s,
                                const act_t **params)
{
    (void)phase;
    (void)s;
    model_resident *r = ctx;
    CHECK(check_group(r, group, "resident acquire_params"));
    *params = r->params[group];
    return FERRY_OK;
}

static ferry_status hook_grads(void *ctx, int group, backend_stream *s, act_t **grads)
{
    (void)s;
    model_resident *r = ctx;
    CHECK(check_group(r, group, "resident acquire_grads"));
    *grads = r->grads[group];
    return FERRY_OK;
}

static ferry_status hook_release(void *ctx, int group, ferry_phase phase, backend_stream *s)
{
    (void)phase;
    (void)s;
    return check_group(ctx, group, "resident release");
}

model_hooks model_resident_hooks(model_resident *r)
{
    return (model_hooks){r, hook_params, hook_grads, hook_release};
}

act_t *model_resident_params(model_resident *r, int group)
{
    return r && group >= 0 && group < r->ngroups ? r->params[group] : NULL;
}

act_t *model_resident_grads(model_resident *r, int group)
{
    return r && group >= 0 && group < r->ngroups ? r->grads[group] : NULL;
}

ferry_status model_resident_zero_grads(model_resident *r, backend_stream *s)
{
    if (!r || !s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "model_resident_zero_grads: NULL argument");
    for (int g = 0; g < r->ngroups; g++)
        CHECK(backend_memset_async(s, r->grads[g], 0, r->numel[g] * r->es));
    return FERRY_OK;
}

/* Host fp32 -> staging -> storage type, a staging-full at a time; the stream
 * orders each chunk's copy after the previous chunk's conversion. */
static ferry_status upload(model_resident *r, backend_stream *s, act_t *dst, const float *host,
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

static ferry_status download(model_resident *r, backend_stream *s, float *host, const act_t *src,
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

static ferry_status check_io(model_resident *r, backend_stream *s, int group, const void *host,
                             const char *who)
{
    if (!r || !s || !host)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: NULL argument", who);
    return check_group(r, group, who);
}

ferry_status model_resident_set_params(model_resident *r, backend_stream *s, int group,
                                      const float *host)
{
    CHECK(check_io(r, s, group, host, "model_resident_set_params"));
    return upload(r, s, r->params[group], host, r->numel[group]);
}

ferry_status model_resident_get_params(model_resident *r, backend_stream *s, int group, float *host)
{
    CHECK(check_io(r, s, group, host, "model_resident_get_params"));
    return download(r, s, host, r->params[group], r->numel[group]);
}

ferry_status model_resident_get_grads(model_resident *r, backend_stream *s, int group, float *host)
{
    CHECK(check_io(r, s, group, host, "model_resident_get_grads"));
    return download(r, s, host, r->grads[group], r->numel[group]);
}

