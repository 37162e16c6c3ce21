/* Running an op of the registry from its description (dev/ops/opinfo.h)
 * and a row of a shape table (dev/ops/op_shapes.h), on any backend: the
 * sizes and scalars set from the row, every tensor allocated at its extent
 * and filled from a seed (the same seed, the same values on every backend
 * and storage type: 16-bit-exact floats in [-1, 1), fp32 statistics in
 * [0, 1), token ids below their bound, positions (an optional tensor a row
 * names "pos=packed"; NULL otherwise) restarting at examples of random
 * lengths), the op launched through its checked
 * front, and each tensor it writes read back as floats. The op tests and
 * the kernel lab compare two such runs (cuda against the host backend, or
 * the host backend's 16-bit storage against its fp32), or one run against
 * a double-precision reference of the op (opdrive_reference), which is what
 * holds the host backend itself to the op's definition. Header-only; not
 * used by the library. */
#ifndef FERRY_DEV_OPS_OPDRIVE_H
#define FERRY_DEV_OPS_OPDRIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "backend/backend.h"
#include "dev/ops/op_shapes.h"
#include "dev/ops/opcheck.h"
#include "dev/ops/opinfo.h"

/* One op with its arguments on one backend. */
typedef struct opdrive_run {
    const opinfo *info;
    backend *be;
    backend_stream *s;
    ferry_dtype act;                          /* the backend's storage type */
    _Alignas(16) unsigned char args[256];     /* the op's argument struct */
    size_t extent[OPINFO_MAX_ARGS];           /* elements of each tensor (bytes for RAW) */
    long long aux[OPINFO_MAX_ARGS];
    size_t elem[OPINFO_MAX_ARGS];             /* bytes per element */
    void *buf[OPINFO_MAX_ARGS];               /* its device buffer, or NULL */
    bool none[OPINFO_MAX_ARGS];               /* an optional tensor the row passes as NULL */
} opdrive_run;

/* The hyperparameters adamw runs with. */
static const adamw_hparams opdrive_hparams = {1e-3, 0.9, 0.999, 1e-8, 0.01};

static inline void opdrive_set(opdrive_run *r, int i, const void *v, size_t n)
{
    memcpy(r->args + r->info->args[i].offset, v, n);
}

/* `text` into argument i (a size or a scalar). */
static inline ferry_status opdrive_set_text(opdrive_run *r, int i, const char *text)
{
    const opinfo_arg *a = &r->info->args[i];
    if (opinfo_is_optional(a->kind) && strncmp(text, "none", 4) == 0 && (!text[4] || text[4] == ' ')) {
        r->none[i] = true;
        return FERRY_OK;
    }
    if (a->kind == OPINFO_POS_IN_OPT && strncmp(text, "packed", 6) == 0 && (!text[6] || text[6] == ' ')) {
        r->none[i] = false;
        return FERRY_OK;
    }
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || (*end && *end != ' '))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: %s=%s is not a number", a->name, text);
    int iv = (int)v;
    size_t zv = (size_t)v;
    float fv = (float)v;
    int64_t lv = (int64_t)v;
    bool bv = v != 0;
    switch (a->kind) {
    case OPINFO_DIM: case OPINFO_INT: opdrive_set(r, i, &iv, sizeof iv); break;
    case OPINFO_COUNT: case OPINFO_COUNT0: opdrive_set(r, i, &zv, sizeof zv); break;
    case OPINFO_F32V: opdrive_set(r, i, &fv, sizeof fv); break;
    case OPINFO_I64V: opdrive_set(r, i, &lv, sizeof lv); break;
    case OPINFO_BOOLV: opdrive_set(r, i, &bv, sizeof bv); break;
    default:
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: %s of %s is not a size or a scalar", a->name,
                       r->info->name);
    }
    return FERRY_OK;
}

/* Sets every size and scalar (the row's, else the defaults: floats 1, steps
 * 1, bools false, a typed tensor's type the storage type, positions NULL
 * unless "pos=packed"), then allocates
 * every tensor at its extent (uninitialised). */
static inline ferry_status opdrive_setup(opdrive_run *r, const opinfo *info, const char *sizes, backend *be,
                                         backend_stream *s)
{
    memset(r, 0, sizeof *r);
    r->info = info;
    r->be = be;
    r->s = s;
    r->act = backend_act_dtype(be);
    if (info->args_size > sizeof r->args)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: %s's arguments take %zu bytes", info->name,
                       info->args_size);
    float one = 1.0f;
    int64_t step = 1;
    const adamw_hparams *hp = &opdrive_hparams;
    for (int i = 0; i < info->nargs; i++) {
        opinfo_kind k = info->args[i].kind;
        if (k == OPINFO_F32V) opdrive_set(r, i, &one, sizeof one);
        if (k == OPINFO_I64V) opdrive_set(r, i, &step, sizeof step);
        if (k == OPINFO_DTYPE) opdrive_set(r, i, &r->act, sizeof r->act);
        if (k == OPINFO_HPARAMS) opdrive_set(r, i, &hp, sizeof hp);
        if (k == OPINFO_POS_IN_OPT) r->none[i] = true;
    }
    for (const char *p = sizes; p && *p;) {
        while (*p == ' ')
            p++;
        const char *eq = strchr(p, '=');
        if (!*p)
            break;
        if (!eq)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: '%s' is not name=value", p);
        int i = 0;
        while (i < info->nargs && (strlen(info->args[i].name) != (size_t)(eq - p) ||
                                   strncmp(info->args[i].name, p, (size_t)(eq - p)) != 0))
            i++;
        if (i == info->nargs)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: %s has no argument '%.*s'", info->name,
                           (int)(eq - p), p);
        ferry_status st = opdrive_set_text(r, i, eq + 1);
        if (st != FERRY_OK)
            return st;
        p = strchr(eq, ' ');
    }
    info->extents(s, r->args, r->extent, r->aux);
    for (int i = 0; i < info->nargs; i++) {
        opinfo_kind k = info->args[i].kind;
        if (!opinfo_is_tensor(k) || r->none[i])
            continue;
        r->elem[i] = opinfo_is_act(k) ? dtype_size(r->act)
                     : k == OPINFO_F64_ADD ? sizeof(double)
                     : k == OPINFO_RAW ? 1
                     : k == OPINFO_TYPED_IN ? dtype_size((ferry_dtype)r->aux[i])
                                            : 4;
        size_t bytes = r->extent[i] * r->elem[i];
        ferry_status st = backend_alloc(be, bytes ? bytes : 1, &r->buf[i]);
        if (st != FERRY_OK)
            return st;
        opdrive_set(r, i, &r->buf[i], sizeof(void *));
    }
    return FERRY_OK;
}

/* The element type of tensor i (not RAW, I32_IN, POS_IN_OPT or F64_ADD). */
static inline ferry_dtype opdrive_type(const opdrive_run *r, int i)
{
    opinfo_kind k = r->info->args[i].kind;
    return opinfo_is_act(k) ? r->act : k == OPINFO_TYPED_IN ? (ferry_dtype)r->aux[i] : FERRY_DTYPE_F32;
}

/* The values of tensor i for `seed`, as the host holds them before the
 * upload (extent x elem bytes, malloc'd). */
static inline void *opdrive_values(const opdrive_run *r, int i, uint64_t seed)
{
    size_t n = r->extent[i], bytes = n * r->elem[i];
    unsigned char *h = (unsigned char *)calloc(bytes ? bytes : 1, 1);
    float *f = (float *)malloc((n ? n : 1) * sizeof *f);
    if (!h || !f) {
        free(h);
        free(f);
        return NULL;
    }
    uint64_t rng = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1));
    opinfo_kind k = r->info->args[i].kind;
    if (k == OPINFO_I32_IN) {
        long long bound = r->aux[i] > 0 ? r->aux[i] : 1;
        for (size_t j = 0; j < n; j++)
            ((int32_t *)h)[j] = (int32_t)(opcheck_rand_next(&rng) % (uint64_t)bound);
    } else if (k == OPINFO_POS_IN_OPT) {
        /* Rows of aux tokens, each cut into examples of 1 to aux / 2 + 1
         * tokens (long ones cross tiles; some of one token). */
        size_t row = r->aux[i] > 0 ? (size_t)r->aux[i] : 1, left = 0;
        int32_t p = 0;
        for (size_t j = 0; j < n; j++) {
            if (j % row == 0 || left == 0) {
                left = 1 + (size_t)(opcheck_rand_next(&rng) % (row / 2 + 1));
                p = 0;
            }
            ((int32_t *)h)[j] = p++;
            left--;
        }
    } else if (k == OPINFO_F64_ADD) {
        for (size_t j = 0; j < n; j++)
            ((double *)h)[j] = 0.5;
    } else if (k != OPINFO_RAW) {
        bool stats = k == OPINFO_F32_IN || k == OPINFO_F32_OUT || k == OPINFO_F32_ADD;
        opcheck_rand_fill(&rng, f, n, stats ? 0.0f : -1.0f, 1.0f);
        ferry_dtype t = opdrive_type(r, i);
        for (size_t j = 0; j < n; j++)
            dtype_store_f32(h, t, j, f[j]);
    }
    free(f);
    return h;
}

/* Fills every tensor from `seed` (written ones too: an op must overwrite
 * or add into what is there). */
static inline ferry_status opdrive_fill(opdrive_run *r, uint64_t seed)
{
    for (int i = 0; i < r->info->nargs; i++) {
        if (!r->buf[i])
            continue;
        void *h = opdrive_values(r, i, seed);
        if (!h)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "opdrive: no host memory");
        ferry_status st = backend_memcpy_async(r->s, r->buf[i], h, r->extent[i] * r->elem[i], BACKEND_COPY_H2D);
        if (st == FERRY_OK)
            st = backend_stream_synchronize(r->s);
        free(h);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

/* Launches the op and waits for it. */
static inline ferry_status opdrive_call(opdrive_run *r)
{
    ferry_status st = r->info->call(r->s, r->args);
    return st == FERRY_OK ? backend_stream_synchronize(r->s) : st;
}

/* Tensor i (written by the op) as floats, out[extent]. */
static inline ferry_status opdrive_read(opdrive_run *r, int i, float *out)
{
    size_t n = r->extent[i], bytes = n * r->elem[i];
    void *h = malloc(bytes ? bytes : 1);
    if (!h)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "opdrive: no host memory");
    ferry_status st = backend_memcpy_async(r->s, h, r->buf[i], bytes, BACKEND_COPY_D2H);
    if (st == FERRY_OK)
        st = backend_stream_synchronize(r->s);
    opinfo_kind k = r->info->args[i].kind;
    for (size_t j = 0; st == FERRY_OK && j < n; j++)
        out[j] = k == OPINFO_F64_ADD ? (float)((double *)h)[j]
                                     : dtype_load_f32(h, opinfo_is_act(k) ? r->act : FERRY_DTYPE_F32, j);
    free(h);
    return st;
}

static inline void opdrive_free(opdrive_run *r)
{
    for (int i = 0; i < OPINFO_MAX_ARGS; i++)
        if (r->buf[i])
            backend_free(r->be, r->buf[i]);
    memset(r->buf, 0, sizeof r->buf);
}

/* What a comparison found for one tensor the op writes. */
typedef struct opdrive_result {
    const char *op, *tensor;
    size_t n;
    opcheck_err err;
} opdrive_result;

/* Runs `shape` on (be_a, s_a) and (be_b, s_b) with the inputs of `seed` and
 * calls `report` for every tensor the op writes, b being the reference.
 * The two backends' storage types must have the same size (so the same
 * tensors fit), f32 against f32 or 16-bit against 16-bit, or the first f32:
 * an op's inputs are exact in every type. Returns the first failure of the
 * setup or a launch (after reporting it), FERRY_OK otherwise. */
typedef void (*opdrive_report_fn)(void *ctx, const opdrive_result *res);
static inline ferry_status opdrive_compare(const opinfo *all, const op_shape *shape, backend *be_a,
                                           backend_stream *s_a, backend *be_b, backend_stream *s_b, uint64_t seed,
                                           opdrive_report_fn report, void *ctx)
{
    const opinfo *info = opinfo_find(all, shape->op);
    if (!info)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: the registry has no op '%s'", shape->op);
    opdrive_run a, b;
    memset(&b, 0, sizeof b); /* freed below even when a's setup fails */
    ferry_status st = opdrive_setup(&a, info, shape->sizes, be_a, s_a);
    if (st == FERRY_OK)
        st = opdrive_setup(&b, info, shape->sizes, be_b, s_b);
    if (st == FERRY_OK)
        st = opdrive_fill(&a, seed);
    if (st == FERRY_OK)
        st = opdrive_fill(&b, seed);
    if (st == FERRY_OK)
        st = opdrive_call(&a);
    if (st == FERRY_OK)
        st = opdrive_call(&b);
    for (int i = 0; st == FERRY_OK && i < info->nargs; i++) {
        if (!opinfo_is_written(info->args[i].kind) || a.none[i])
            continue;
        size_t n = a.extent[i];
        float *ga = (float *)malloc((n ? n : 1) * sizeof(float)), *gb = (float *)malloc((n ? n : 1) * sizeof(float));
        if (!ga || !gb)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "opdrive: no host memory");
        if (st == FERRY_OK)
            st = opdrive_read(&a, i, ga);
        if (st == FERRY_OK)
            st = opdrive_read(&b, i, gb);
        if (st == FERRY_OK) {
            opdrive_result res = {info->name, info->args[i].name, n, opcheck_compare(ga, gb, n)};
            report(ctx, &res);
        }
        free(ga);
        free(gb);
    }
    opdrive_free(&a);
    opdrive_free(&b);
    return st;
}

/* A double-precision reference of an op: it computes, from the arguments
 * in the op's opref_<name> view (dev/ops/opinfo.h), what the op must
 * write, in place. */
typedef void (*opdrive_ref_fn)(void *ref_args);

/* Tensor i of a run as the reference sees it: its values for `seed` as
 * doubles (int32 ids and positions as they are; NULL for a scratch or a tensor the row
 * passes as NULL). malloc'd; *fail set when memory ran out. */
static inline void *opdrive_ref_tensor(const opdrive_run *r, int i, uint64_t seed, bool *fail)
{
    opinfo_kind k = r->info->args[i].kind;
    if (k == OPINFO_RAW || r->none[i])
        return NULL;
    void *h = opdrive_values(r, i, seed);
    if (!h || k == OPINFO_I32_IN || k == OPINFO_POS_IN_OPT || k == OPINFO_F64_ADD) {
        *fail |= !h;
        return h;
    }
    size_t n = r->extent[i];
    double *d = (double *)malloc((n ? n : 1) * sizeof *d);
    for (size_t j = 0; d && j < n; j++)
        d[j] = dtype_load_f32(h, opdrive_type(r, i), j);
    free(h);
    *fail |= !d;
    return d;
}

/* Runs `shape` on (be, s) with the inputs of `seed`, runs `ref` on the same
 * inputs in double, and calls `report` for every tensor the op writes, the
 * reference's values (rounded to float) being the expectation. Returns the
 * first failure of the setup or the launch (after reporting it), FERRY_OK
 * otherwise. */
static inline ferry_status opdrive_reference(const opinfo *all, const op_shape *shape, backend *be, backend_stream *s,
                                             uint64_t seed, opdrive_ref_fn ref, opdrive_report_fn report, void *ctx)
{
    const opinfo *info = opinfo_find(all, shape->op);
    if (!info)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: the registry has no op '%s'", shape->op);
    _Alignas(16) unsigned char view[256];
    if (info->ref_size > sizeof view)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "opdrive: %s's reference view takes %zu bytes", info->name,
                       info->ref_size);
    memset(view, 0, sizeof view);
    void *held[OPINFO_MAX_ARGS] = {0};
    opdrive_run r;
    ferry_status st = opdrive_setup(&r, info, shape->sizes, be, s);
    if (st == FERRY_OK)
        st = opdrive_fill(&r, seed);
    if (st == FERRY_OK)
        st = opdrive_call(&r);
    bool fail = false;
    for (int i = 0; st == FERRY_OK && i < info->nargs; i++) {
        const opinfo_arg *a = &info->args[i];
        if (opinfo_is_tensor(a->kind)) {
            held[i] = opdrive_ref_tensor(&r, i, seed, &fail);
            memcpy(view + a->ref_offset, &held[i], sizeof(void *));
        } else {
            memcpy(view + a->ref_offset, r.args + a->offset, a->size);
        }
    }
    if (st == FERRY_OK && fail)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "opdrive: no host memory");
    if (st == FERRY_OK)
        ref(view);
    for (int i = 0; st == FERRY_OK && i < info->nargs; i++) {
        if (!opinfo_is_written(info->args[i].kind) || r.none[i])
            continue;
        size_t n = r.extent[i];
        float *got = (float *)malloc((n ? n : 1) * sizeof(float)), *want = (float *)malloc((n ? n : 1) * sizeof(float));
        if (!got || !want)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "opdrive: no host memory");
        if (st == FERRY_OK)
            st = opdrive_read(&r, i, got);
        for (size_t j = 0; st == FERRY_OK && j < n; j++)
            want[j] = (float)((const double *)held[i])[j];
        if (st == FERRY_OK) {
            opdrive_result res = {info->name, info->args[i].name, n, opcheck_compare(got, want, n)};
            report(ctx, &res);
        }
        free(got);
        free(want);
    }
    for (int i = 0; i < OPINFO_MAX_ARGS; i++)
        free(held[i]);
    opdrive_free(&r);
    return st;
}

#endif
