/* The op front: checks every op's arguments on the caller's thread (NULL
 * stream, non-positive sizes, tensors that do not lie inside live device
 * buffers), then forwards to the op table of the stream's backend
 * (backend_ops, backend/backend_impl.h), so both backends report misuse the
 * same way and no caller branches on the backend. The fronts are made from
 * the registry (backend/ops/op_list.h): what each checks is what its argument
 * list says. Owns no memory. */
#include "backend/ops/ops.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "backend/backend_impl.h"
#include "backend/comm_impl.h"

ferry_dtype backend_act_dtype(const backend *be) { return be->act; }

ferry_status backend_set_act_dtype(backend *be, ferry_dtype act)
{
    if (!be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_set_act_dtype: backend is NULL");
    if (act == FERRY_DTYPE_AUTO || act == be->act)
        return FERRY_OK;
    if ((unsigned)act > 31 || !(be->ops->act_dtypes & (1u << act)))
        return err_set(FERRY_ERR_UNSUPPORTED,
                       "the %s backend cannot store tensors as %s (its ops store %s); use dtype auto",
                       ferry_backend_name(be->kind), dtype_name(act), dtype_name(be->act));
    if (be->act_refused & (1u << act))
        return err_set(FERRY_ERR_UNSUPPORTED, "%s", be->act_refusal);
    pthread_mutex_lock(&be->lock);
    size_t live = be->buffer_count;
    if (live == 0)
        be->act = act;
    pthread_mutex_unlock(&be->lock);
    if (live)
        return err_set(FERRY_ERR_STATE,
                       "backend_set_act_dtype: the backend already holds %zu device buffers; choose the "
                       "storage type right after opening it", live);
    return FERRY_OK;
}

ferry_status ops_check_positions(const char *who, const int32_t *pos, int B, int T)
{
    for (int b = 0; pos && b < B; b++) {
        const int32_t *row = pos + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            int32_t p = row[t];
            if (p == 0 || (t > 0 && (int64_t)p == (int64_t)row[t - 1] + 1))
                continue;
            if (t == 0)
                return err_set(FERRY_ERR_INVALID_ARGUMENT,
                               "%s: position %d at batch row %d, index 0: a row starts an example, so its first "
                               "position must be 0; positions count each token's place in its example",
                               who, (int)p, b);
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "%s: position %d at batch row %d, index %d follows %d: a position is 0 (an example "
                           "starts) or the previous one + 1 (here %lld)",
                           who, (int)p, b, t, (int)row[t - 1], (long long)row[t - 1] + 1);
        }
    }
    return FERRY_OK;
}

ferry_status ops_init(backend *be, void *workspace, size_t workspace_bytes)
{
    if (!be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ops_init: backend is NULL");
    if (workspace_bytes && !backend_owns(be, workspace, workspace_bytes))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "ops_init: the workspace [%p, +%zu bytes) is not inside one live device buffer",
                       workspace, workspace_bytes);
    return be->ops->init(be, workspace, workspace_bytes);
}

void ops_shutdown(backend *be)
{
    if (be)
        be->ops->shutdown(be);
}

size_t ops_classifier_accumulator_offset(ferry_dtype act, int chunk, int Vp)
{
    if (chunk <= 0 || Vp <= 0 || !dtype_is_float(act))
        return 0;
    size_t logits = (size_t)chunk * (size_t)Vp * dtype_size(act);
    return (logits + 255) / 256 * 256; /* the accumulator keeps cuBLASLt's best alignment */
}

size_t ops_classifier_scratch_bytes_for(ferry_dtype act, int chunk, int Vp, int C)
{
    size_t at = ops_classifier_accumulator_offset(act, chunk, Vp);
    if (!at || C <= 0)
        return 0;
    return act == FERRY_DTYPE_F32 ? (size_t)chunk * (size_t)Vp * 4 : at + (size_t)Vp * (size_t)C * sizeof(float);
}

size_t ops_classifier_scratch_bytes(const backend *be, int chunk, int Vp, int C)
{
    return be ? ops_classifier_scratch_bytes_for(be->act, chunk, Vp, C) : 0;
}

size_t ops_sumsq_scratch_bytes(void) { return OPS_SUMSQ_PARTIALS * sizeof(double); }

size_t ops_workspace_bytes(ferry_backend_kind kind)
{
    return kind == FERRY_BACKEND_CUDA ? OPS_CUDA_MATMUL_WORKSPACE : 0;
}

/* ---- argument checks ---- */

static ferry_status check_stream(const char *op, backend_stream *s)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: stream is NULL", op);
    return FERRY_OK;
}

static ferry_status check_positive(const char *op, const char *what, long long v)
{
    if (v <= 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: %s is %lld; it must be positive", op,
                       what, v);
    return FERRY_OK;
}

static ferry_status check_count(const char *op, const char *what, size_t n)
{
    if (n == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: %s is 0; it must be positive", op, what);
    return FERRY_OK;
}

/* `count` elements of `elem` bytes at ptr must lie inside one live buffer. */
static ferry_status check_tensor(const char *op, backend_stream *s, const char *name,
                                 const void *ptr, size_t count, size_t elem)
{
    if (!ptr)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is NULL", op, name);
    size_t bytes = count * elem;
    if (elem && bytes / elem != count)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: tensor '%s' of %zu elements overflows",
                       op, name, count);
    if (!backend_owns(backend_stream_backend(s), ptr, bytes))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: tensor '%s' [%p, +%zu bytes) is not inside one live device buffer "
                       "of this backend (wrong size, freed, or host memory)",
                       op, name, ptr, bytes);
    return FERRY_OK;
}

static size_t act_size(backend_stream *s) { return dtype_size(s->be->act); }

#define CHECK(expr)                                                                             \
    do {                                                                                        \
        ferry_status st_ = (expr);                                                              \
        if (st_ != FERRY_OK)                                                                    \
            return st_;                                                                         \
    } while (0)


/* ---- the optimizer of offload none ---- */

static ferry_status check_adamw_hparams(const char *op, const adamw_hparams *hp, int64_t step,
                                        float grad_scale)
{
    if (!hp)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: hyperparameters are NULL", op);
    if (step < 1)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: step %lld; steps count from 1", op,
                       (long long)step);
    if (!(hp->lr >= 0 && hp->lr <= 1e30) || !(hp->eps >= 0 && hp->eps <= 1e30) ||
        !(hp->weight_decay >= 0 && hp->weight_decay <= 1e30))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: lr %g, eps %g, weight_decay %g; each must be finite and >= 0", op,
                       hp->lr, hp->eps, hp->weight_decay);
    if (!(hp->beta1 >= 0 && hp->beta1 < 1) || !(hp->beta2 >= 0 && hp->beta2 < 1))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: betas (%g, %g); each must be in [0, 1)", op,
                       hp->beta1, hp->beta2);
    if (!(grad_scale >= 0 && grad_scale <= 1e30f))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: grad_scale %g; it must be finite and >= 0",
                       op, (double)grad_scale);
    return FERRY_OK;
}

/* A gradient buffer is of the storage type or fp32 (a micro-batch sum). */
static ferry_status check_grad_dtype(const char *op, backend_stream *s, ferry_dtype t)
{
    if (t != s->be->act && t != FERRY_DTYPE_F32)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: gradients of type %s; use the storage type (%s) or f32",
                       op, dtype_name(t), dtype_name(s->be->act));
    return FERRY_OK;
}

/* The checks of backend/ops/op_list.h's `extra` column. */
static ferry_status opx_heads(const char *op, int C, int NH)
{
    if (C % NH != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: C = %d is not divisible by NH = %d heads", op, C, NH);
    return FERRY_OK;
}

static ferry_status opx_rope(const char *op, int NH, int NKV, int HS)
{
    if (NH % NKV != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: NH = %d query heads are not a multiple of NKV = %d key/value heads", op, NH, NKV);
    if (HS % 2 != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: head size HS = %d is odd; rotary needs two halves", op, HS);
    return FERRY_OK;
}

/* The cache ops' shapes: grouped heads, the new positions inside the
 * cache, a head attention_decode's block covers, and two halves for rope. */
static ferry_status opx_kv(const char *op, int NH, int NKV, int HS, int pos0, int Tq, int Tmax, bool rope)
{
    if (NH % NKV != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: NH = %d query heads are not a multiple of NKV = %d key/value heads", op, NH, NKV);
    if (pos0 < 0 || pos0 > Tmax - Tq)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: positions %d .. %lld do not fit a cache of Tmax = %d positions (pos0 >= 0 and "
                       "pos0 + Tq <= Tmax)", op, pos0, (long long)pos0 + Tq - 1, Tmax);
    if (HS > 256)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: head size HS = %d; the cache's ops take HS <= 256", op, HS);
    if (rope && HS % 2 != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: head size HS = %d is odd; rotary needs two halves", op, HS);
    return FERRY_OK;
}

static ferry_status opx_classifier(const char *op, int V, int Vp, const act_t *dinp, const act_t *dwte)
{
    if (Vp < V)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: padded vocab Vp = %d is smaller than the vocab V = %d", op, Vp, V);
    if (dinp && !dwte)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: dinp is given but dwte is NULL; the gradient needs both",
                       op);
    return FERRY_OK;
}

static ferry_status opx_grad_dtype(const char *op, backend_stream *s, ferry_dtype t)
{
    return check_grad_dtype(op, s, t);
}

static ferry_status opx_adamw(const char *op, backend_stream *s, ferry_dtype grad_dtype, const adamw_hparams *hp,
                              int64_t step, float grad_scale)
{
    CHECK(check_grad_dtype(op, s, grad_dtype));
    return check_adamw_hparams(op, hp, step, grad_scale);
}

/* ---- the fronts, one per op of the registry ----
 * The stream; the sizes (DIM and COUNT: positive); the op's extra check;
 * a COUNT0 of 0, which makes the op do nothing; then every tensor, in
 * order, inside one live buffer of the stream's backend (an _OPT one only
 * when given). Then the stream's backend runs it. */

/* Sizes. */
#define OPC_SIZE_DIM(name) CHECK(check_positive(op, #name, name));
#define OPC_SIZE_COUNT(name) CHECK(check_count(op, #name, name));
#define OPC_SIZE_COUNT0(name)
#define OPC_SIZE_INT(name)
#define OPC_SIZE_F32V(name)
#define OPC_SIZE_I64V(name)
#define OPC_SIZE_BOOLV(name)
#define OPC_SIZE_DTYPE(name)
#define OPC_SIZE_HPARAMS(name)
#define OPC_SIZE_ACT_IN(name)
#define OPC_SIZE_ACT_OUT(name)
#define OPC_SIZE_ACT_ADD(name)
#define OPC_SIZE_ACT_IN_OPT(name)
#define OPC_SIZE_ACT_OUT_OPT(name)
#define OPC_SIZE_ACT_ADD_OPT(name)
#define OPC_SIZE_F32_IN(name)
#define OPC_SIZE_F32_OUT(name)
#define OPC_SIZE_F32_ADD(name)
#define OPC_SIZE_F64_ADD(name)
#define OPC_SIZE_I32_IN(name)
#define OPC_SIZE_POS_IN_OPT(name)
#define OPC_SIZE_RAW(name)
#define OPC_SIZE_TYPED_IN(name)
#define OPA_CHECK_SIZE(kind, name, extent, aux) OPC_SIZE_##kind(name)

/* A count of 0 that makes the op do nothing. */
#define OPA_CHECK_NOOP(kind, name, extent, aux) OPC_NOOP_##kind(name)
#define OPC_NOOP_COUNT0(name)                                                                   \
    if (name == 0)                                                                              \
        return FERRY_OK;
#define OPC_NOOP_DIM(name)
#define OPC_NOOP_COUNT(name)
#define OPC_NOOP_INT(name)
#define OPC_NOOP_F32V(name)
#define OPC_NOOP_I64V(name)
#define OPC_NOOP_BOOLV(name)
#define OPC_NOOP_DTYPE(name)
#define OPC_NOOP_HPARAMS(name)
#define OPC_NOOP_ACT_IN(name)
#define OPC_NOOP_ACT_OUT(name)
#define OPC_NOOP_ACT_ADD(name)
#define OPC_NOOP_ACT_IN_OPT(name)
#define OPC_NOOP_ACT_OUT_OPT(name)
#define OPC_NOOP_ACT_ADD_OPT(name)
#define OPC_NOOP_F32_IN(name)
#define OPC_NOOP_F32_OUT(name)
#define OPC_NOOP_F32_ADD(name)
#define OPC_NOOP_F64_ADD(name)
#define OPC_NOOP_I32_IN(name)
#define OPC_NOOP_POS_IN_OPT(name)
#define OPC_NOOP_RAW(name)
#define OPC_NOOP_TYPED_IN(name)

/* Tensors: `extent` elements of the kind's element size. */
#define OPC_TENSOR(name, extent, elem) CHECK(check_tensor(op, s, #name, name, extent, elem));
#define OPC_TENSOR_OPT(name, extent, elem)                                                      \
    if (name)                                                                                   \
        OPC_TENSOR(name, extent, elem)
#define OPC_TEN_ACT_IN(name, extent, aux) OPC_TENSOR(name, extent, act_size(s))
#define OPC_TEN_ACT_OUT(name, extent, aux) OPC_TENSOR(name, extent, act_size(s))
#define OPC_TEN_ACT_ADD(name, extent, aux) OPC_TENSOR(name, extent, act_size(s))
#define OPC_TEN_ACT_IN_OPT(name, extent, aux) OPC_TENSOR_OPT(name, extent, act_size(s))
#define OPC_TEN_ACT_OUT_OPT(name, extent, aux) OPC_TENSOR_OPT(name, extent, act_size(s))
#define OPC_TEN_ACT_ADD_OPT(name, extent, aux) OPC_TENSOR_OPT(name, extent, act_size(s))
#define OPC_TEN_F32_IN(name, extent, aux) OPC_TENSOR(name, extent, sizeof(float))
#define OPC_TEN_F32_OUT(name, extent, aux) OPC_TENSOR(name, extent, sizeof(float))
#define OPC_TEN_F32_ADD(name, extent, aux) OPC_TENSOR(name, extent, sizeof(float))
#define OPC_TEN_F64_ADD(name, extent, aux) OPC_TENSOR(name, extent, sizeof(double))
#define OPC_TEN_I32_IN(name, extent, aux) OPC_TENSOR(name, extent, sizeof(int32_t))
#define OPC_TEN_POS_IN_OPT(name, extent, aux) OPC_TENSOR_OPT(name, extent, sizeof(int32_t))
#define OPC_TEN_RAW(name, extent, aux) OPC_TENSOR(name, extent, 1)
#define OPC_TEN_TYPED_IN(name, extent, aux) OPC_TENSOR(name, extent, dtype_size(aux))
#define OPC_TEN_DIM(name, extent, aux)
#define OPC_TEN_COUNT(name, extent, aux)
#define OPC_TEN_COUNT0(name, extent, aux)
#define OPC_TEN_INT(name, extent, aux)
#define OPC_TEN_F32V(name, extent, aux)
#define OPC_TEN_I64V(name, extent, aux)
#define OPC_TEN_BOOLV(name, extent, aux)
#define OPC_TEN_DTYPE(name, extent, aux)
#define OPC_TEN_HPARAMS(name, extent, aux)
#define OPA_CHECK_TENSOR(kind, name, extent, aux) OPC_TEN_##kind(name, extent, aux)

#define OPS_FRONT(NAME, CUDA, EXTRA)                                                            \
    ferry_status ops_##NAME(OPS_PARAMS(NAME))                                                   \
    {                                                                                           \
        const char *op = "ops_" #NAME;                                                          \
        CHECK(check_stream(op, s));                                                             \
        FERRY_OP_ARGS_##NAME(OPA_CHECK_SIZE)                                                    \
        CHECK(EXTRA);                                                                           \
        FERRY_OP_ARGS_##NAME(OPA_CHECK_NOOP)                                                    \
        FERRY_OP_ARGS_##NAME(OPA_CHECK_TENSOR)                                                  \
        return s->be->ops->NAME(s FERRY_OP_ARGS_##NAME(OPA_PASS));                              \
    }
FERRY_OPS(OPS_FRONT)

/* ---- collectives ---- */

ferry_status backend_comm_open(backend *be, const char *name, backend_comm **out)
{
    if (!be || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "backend_comm_open: NULL argument");
    *out = NULL;
    ferry_status st = comm_world_check();
    if (st != FERRY_OK)
        return st;
    backend_comm *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "backend_comm_open: out of host memory");
    c->be = be;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "collectives");
    c->rank = comm_world_rank();
    c->size = comm_world_size();
    if ((st = be->ops->comm_open(c)) != FERRY_OK) {
        free(c);
        return err_wrap(st, "opening the communicator '%s' (rank %d of %d)", name ? name : "collectives",
                        comm_world_rank(), comm_world_size());
    }
    *out = c;
    return FERRY_OK;
}

void backend_comm_close(backend_comm *c)
{
    if (!c)
        return;
    c->be->ops->comm_close(c);
    free(c);
}

int backend_comm_rank(const backend_comm *c) { return c ? c->rank : -1; }
int backend_comm_size(const backend_comm *c) { return c ? c->size : -1; }
const char *backend_comm_transport(const backend_comm *c) { return c ? c->transport : ""; }

/* The communicator, the type and the buffers of a collective: send holds
 * send_n elements, recv recv_n, both inside live buffers of the comm's backend. */
static ferry_status check_collective(const char *op, backend_stream *s, backend_comm *c, const void *send,
                                     size_t send_n, void *recv, size_t recv_n, ferry_dtype t)
{
    CHECK(check_stream(op, s));
    if (!c)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: the communicator is NULL", op);
    if (c->be != s->be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: the communicator '%s' belongs to another backend than the "
                                                   "stream '%s'",
                       op, c->name, s->name);
    if (!dtype_is_float(t))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: element type %s; collectives sum f32, bf16 or f16", op,
                       dtype_name(t));
    if (send_n == 0 && recv_n == 0)
        return FERRY_OK;
    CHECK(check_tensor(op, s, "send", send, send_n, dtype_size(t)));
    return check_tensor(op, s, "recv", recv, recv_n, dtype_size(t));
}

ferry_status ops_reduce_scatter(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                                ferry_dtype t)
{
    const char *op = "ops_reduce_scatter";
    size_t n = c ? (size_t)c->size : 0;
    CHECK(check_collective(op, s, c, send, n * count, recv, count, t));
    return count ? s->be->ops->reduce_scatter(s, c, send, recv, count, t) : FERRY_OK;
}

ferry_status ops_all_gather(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                            ferry_dtype t)
{
    const char *op = "ops_all_gather";
    size_t n = c ? (size_t)c->size : 0;
    CHECK(check_collective(op, s, c, send, count, recv, n * count, t));
    return count ? s->be->ops->all_gather(s, c, send, recv, count, t) : FERRY_OK;
}

ferry_status ops_all_reduce(backend_stream *s, backend_comm *c, const void *send, void *recv, size_t count,
                            ferry_dtype t)
{
    const char *op = "ops_all_reduce";
    CHECK(check_collective(op, s, c, send, count, recv, count, t));
    return count ? s->be->ops->all_reduce(s, c, send, recv, count, t) : FERRY_OK;
}
