/* The registry's ops (backend/ops/op_list.h) as data, for the programs that
 * drive them over shape tables (the op tests, the kernel lab; never the
 * library): each op's arguments in order, with their kind, name and place
 * in an argument struct; the call of ops_<name> with such a struct; for
 * given sizes, each tensor's extent and each argument's `aux` (an int32
 * tensor's bound, a typed tensor's type); and opref_<name>, the same
 * arguments as a double-precision reference takes them (every float tensor
 * as doubles, token ids and positions as they are, the scratch NULL).
 * Header-only. */
#ifndef FERRY_DEV_OPS_OPINFO_H
#define FERRY_DEV_OPS_OPINFO_H

#include <stddef.h>
#include <string.h>

#include "backend/ops/ops.h"

typedef enum opinfo_kind {
    OPINFO_DIM, OPINFO_COUNT, OPINFO_COUNT0, OPINFO_INT, OPINFO_F32V, OPINFO_I64V, OPINFO_BOOLV, OPINFO_DTYPE,
    OPINFO_HPARAMS, OPINFO_ACT_IN, OPINFO_ACT_OUT, OPINFO_ACT_ADD, OPINFO_ACT_IN_OPT, OPINFO_ACT_OUT_OPT,
    OPINFO_ACT_ADD_OPT, OPINFO_F32_IN, OPINFO_F32_OUT, OPINFO_F32_ADD, OPINFO_F64_ADD, OPINFO_I32_IN, OPINFO_RAW,
    OPINFO_TYPED_IN, OPINFO_POS_IN_OPT,
} opinfo_kind;

typedef struct opinfo_arg {
    opinfo_kind kind;
    const char *name;
    size_t offset;     /* in the op's argument struct */
    size_t size;       /* of the argument there */
    size_t ref_offset; /* in its opref_ struct */
} opinfo_arg;

#define OPINFO_MAX_ARGS 16

typedef struct opinfo {
    const char *name;  /* ops_<name> */
    size_t args_size;  /* its argument struct */
    size_t ref_size;   /* its opref_ struct */
    int nargs;
    opinfo_arg args[OPINFO_MAX_ARGS];
    /* ops_<name>(s, the struct's fields) */
    ferry_status (*call)(backend_stream *s, const void *args);
    /* For the sizes in `args`: extent[i], the elements tensor i must hold
     * (bytes for RAW; 0 for a scalar), and aux[i] (op_list.h). */
    void (*extents)(backend_stream *s, const void *args, size_t *extent, long long *aux);
} opinfo;

/* Whether a kind is a tensor, and which tensors an op writes. */
static inline bool opinfo_is_tensor(opinfo_kind k) { return k >= OPINFO_ACT_IN; }
static inline bool opinfo_is_written(opinfo_kind k)
{
    return k == OPINFO_ACT_OUT || k == OPINFO_ACT_ADD || k == OPINFO_ACT_OUT_OPT || k == OPINFO_ACT_ADD_OPT ||
           k == OPINFO_F32_OUT || k == OPINFO_F32_ADD || k == OPINFO_F64_ADD;
}
static inline bool opinfo_is_optional(opinfo_kind k)
{
    return k == OPINFO_ACT_IN_OPT || k == OPINFO_ACT_OUT_OPT || k == OPINFO_ACT_ADD_OPT || k == OPINFO_POS_IN_OPT;
}
static inline bool opinfo_is_act(opinfo_kind k) { return k >= OPINFO_ACT_IN && k <= OPINFO_ACT_ADD_OPT; }

/* The type of an argument of each kind in a reference's view. */
#define OPR_TYPE_DIM int
#define OPR_TYPE_COUNT size_t
#define OPR_TYPE_COUNT0 size_t
#define OPR_TYPE_INT int
#define OPR_TYPE_F32V float
#define OPR_TYPE_I64V int64_t
#define OPR_TYPE_BOOLV bool
#define OPR_TYPE_DTYPE ferry_dtype
#define OPR_TYPE_HPARAMS const adamw_hparams *
#define OPR_TYPE_ACT_IN const double *
#define OPR_TYPE_ACT_OUT double *
#define OPR_TYPE_ACT_ADD double *
#define OPR_TYPE_ACT_IN_OPT const double *
#define OPR_TYPE_ACT_OUT_OPT double *
#define OPR_TYPE_ACT_ADD_OPT double *
#define OPR_TYPE_F32_IN const double *
#define OPR_TYPE_F32_OUT double *
#define OPR_TYPE_F32_ADD double *
#define OPR_TYPE_F64_ADD double *
#define OPR_TYPE_I32_IN const int32_t *
#define OPR_TYPE_POS_IN_OPT const int32_t *
#define OPR_TYPE_RAW void *
#define OPR_TYPE_TYPED_IN const double *

/* Each op's argument struct, call, extents, reference view and description. */
#define OPINFO_FIELD(kind, name, extent, aux) OPK_TYPE_##kind name;
#define OPINFO_REF_FIELD(kind, name, extent, aux) OPR_TYPE_##kind name;
#define OPINFO_GET(kind, name, extent, aux) , opinfo_p_->name
#define OPINFO_LOCAL(kind, name, extent, aux)                                                   \
    OPK_TYPE_##kind name = opinfo_p_->name;                                                     \
    (void)name;
#define OPINFO_EXTENT(kind, name, extent, aux)                                                  \
    opinfo_extent_[opinfo_k_] = (size_t)(extent);                                               \
    opinfo_aux_[opinfo_k_] = (long long)(aux);                                                  \
    opinfo_k_++;
#define OPINFO_DESC_ARG(kind, name, extent, aux)                                                \
    d->args[d->nargs++] = (opinfo_arg){OPINFO_##kind, #name, offsetof(opinfo_t_, name),               \
                                       sizeof(OPK_TYPE_##kind), offsetof(opinfo_r_, name)};
#define OPINFO_DEFINE(NAME, CUDA, EXTRA)                                                        \
    typedef struct opargs_##NAME {                                                              \
        FERRY_OP_ARGS_##NAME(OPINFO_FIELD)                                                      \
    } opargs_##NAME;                                                                            \
    typedef struct opref_##NAME {                                                               \
        FERRY_OP_ARGS_##NAME(OPINFO_REF_FIELD)                                                  \
    } opref_##NAME;                                                                             \
    static inline ferry_status opinfo_call_##NAME(backend_stream *s, const void *p)             \
    {                                                                                           \
        const opargs_##NAME *opinfo_p_ = (const opargs_##NAME *)p;                              \
        return ops_##NAME(s FERRY_OP_ARGS_##NAME(OPINFO_GET));                                  \
    }                                                                                           \
    static inline void opinfo_extents_##NAME(backend_stream *s, const void *p, size_t *opinfo_extent_, \
                                             long long *opinfo_aux_)                            \
    {                                                                                           \
        const opargs_##NAME *opinfo_p_ = (const opargs_##NAME *)p;                              \
        FERRY_OP_ARGS_##NAME(OPINFO_LOCAL)                                                      \
        int opinfo_k_ = 0;                                                                      \
        FERRY_OP_ARGS_##NAME(OPINFO_EXTENT)                                                     \
        (void)s;                                                                                \
        (void)opinfo_k_;                                                                        \
    }                                                                                           \
    static inline void opinfo_describe_##NAME(opinfo *d)                                        \
    {                                                                                           \
        typedef opargs_##NAME opinfo_t_;                                                        \
        typedef opref_##NAME opinfo_r_;                                                         \
        memset(d, 0, sizeof *d);                                                                \
        d->name = #NAME;                                                                        \
        d->args_size = sizeof(opinfo_t_);                                                       \
        d->ref_size = sizeof(opinfo_r_);                                                        \
        FERRY_OP_ARGS_##NAME(OPINFO_DESC_ARG)                                                   \
        d->call = opinfo_call_##NAME;                                                           \
        d->extents = opinfo_extents_##NAME;                                                     \
    }
FERRY_OPS(OPINFO_DEFINE)

#define OPINFO_ONE(NAME, CUDA, EXTRA) +1
enum { OPINFO_OPS = 0 FERRY_OPS(OPINFO_ONE) };

/* Every op of the registry, in its order, into out[OPINFO_OPS]. */
static inline void opinfo_all(opinfo *out)
{
    int n = 0;
#define OPINFO_FILL(NAME, CUDA, EXTRA) opinfo_describe_##NAME(&out[n++]);
    FERRY_OPS(OPINFO_FILL)
#undef OPINFO_FILL
    (void)n;
}

/* The op named `name` (without "ops_"), or NULL. */
static inline const opinfo *opinfo_find(const opinfo *all, const char *name)
{
    for (int i = 0; i < OPINFO_OPS; i++)
        if (strcmp(all[i].name, name) == 0)
            return &all[i];
    return NULL;
}

#endif
