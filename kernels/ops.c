/* The op front: checks every op's arguments on the caller's thread (NULL
 * stream, non-positive sizes, tensors that do not lie inside live device
 * buffers), then forwards to the op table of the stream's backend
 * (backend_ops, kernels/backend_impl.h), so both backends report misuse the
 * same way and no caller branches on the backend. Owns no memory. */
#include "kernels/ops.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "kernels/backend_impl.h"
#include "kernels/comm_impl.h"

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

static size_t mul2(int a, int b) { return (size_t)a * (size_t)b; }
static size_t mul3(int a, int b, int c) { return (size_t)a * (size_t)b * (size_t)c; }

/* ---- encoder ---- */

ferry_status ops_encoder_forward(backend_stream *s, act_t *out, const int32_t *tokens,
                                 const act_t *wte, const act_t *wpe, int B, int T, int C, int V)
{
    const char *op = "ops_encoder_forward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "B", B));
    CHECK(check_positive(op, "T", T));
    CHECK(check_positive(op, "C", C));
    CHECK(check_positive(op, "V", V));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "out", out, mul3(B, T, C), es));
    CHECK(check_tensor(op, s, "tokens", tokens, mul2(B, T), sizeof(int32_t)));
    CHECK(check_tensor(op, s, "wte", wte, mul2(V, C), es));
    CHECK(check_tensor(op, s, "wpe", wpe, mul2(T, C), es));
    return s->be->ops->encoder_forward(s, out, tokens, wte, wpe, B, T, C, V);
}

ferry_status ops_encoder_backward(backend_stream *s, act_t *dwte, act_t *dwpe, const act_t *dout,
                                  const int32_t *tokens, int B, int T, int C, int V)
{
    const char *op = "ops_encoder_backward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "B", B));
    CHECK(check_positive(op, "T", T));
    CHECK(check_positive(op, "C", C));
    CHECK(check_positive(op, "V", V));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "dwte", dwte, mul2(V, C), es));
    CHECK(check_tensor(op, s, "dwpe", dwpe, mul2(T, C), es));
    CHECK(check_tensor(op, s, "dout", dout, mul3(B, T, C), es));
    CHECK(check_tensor(op, s, "tokens", tokens, mul2(B, T), sizeof(int32_t)));
    return s->be->ops->encoder_backward(s, dwte, dwpe, dout, tokens, B, T, C, V);
}

/* ---- layernorm ---- */

ferry_status ops_layernorm_forward(backend_stream *s, act_t *out, float *mean, float *rstd,
                                   const act_t *inp, const act_t *weight, const act_t *bias,
                                   int N, int C)
{
    const char *op = "ops_layernorm_forward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "N", N));
    CHECK(check_positive(op, "C", C));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "out", out, mul2(N, C), es));
    CHECK(check_tensor(op, s, "mean", mean, (size_t)N, sizeof(float)));
    CHECK(check_tensor(op, s, "rstd", rstd, (size_t)N, sizeof(float)));
    CHECK(check_tensor(op, s, "inp", inp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "weight", weight, (size_t)C, es));
    CHECK(check_tensor(op, s, "bias", bias, (size_t)C, es));
    return s->be->ops->layernorm_forward(s, out, mean, rstd, inp, weight,
                                        bias, N, C);
}

ferry_status ops_layernorm_backward(backend_stream *s, act_t *dinp, act_t *dweight, act_t *dbias,
                                    const act_t *dout, const act_t *inp, const act_t *weight,
                                    const float *mean, const float *rstd, int N, int C)
{
    const char *op = "ops_layernorm_backward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "N", N));
    CHECK(check_positive(op, "C", C));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "dinp", dinp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "dweight", dweight, (size_t)C, es));
    CHECK(check_tensor(op, s, "dbias", dbias, (size_t)C, es));
    CHECK(check_tensor(op, s, "dout", dout, mul2(N, C), es));
    CHECK(check_tensor(op, s, "inp", inp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "weight", weight, (size_t)C, es));
    CHECK(check_tensor(op, s, "mean", mean, (size_t)N, sizeof(float)));
    CHECK(check_tensor(op, s, "rstd", rstd, (size_t)N, sizeof(float)));
    return s->be->ops->layernorm_backward(s, dinp, dweight, dbias, dout, inp,
                                         weight, mean, rstd, N, C);
}

/* ---- matmul ---- */

ferry_status ops_matmul_forward(backend_stream *s, act_t *out, const act_t *inp,
                                const act_t *weight, const act_t *bias, int N, int C, int OC)
{
    const char *op = "ops_matmul_forward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "N", N));
    CHECK(check_positive(op, "C", C));
    CHECK(check_positive(op, "OC", OC));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "out", out, mul2(N, OC), es));
    CHECK(check_tensor(op, s, "inp", inp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "weight", weight, mul2(OC, C), es));
    if (bias)
        CHECK(check_tensor(op, s, "bias", bias, (size_t)OC, es));
    return s->be->ops->matmul_forward(s, out, inp, weight, bias, N, C, OC);
}

ferry_status ops_matmul_backward(backend_stream *s, act_t *dinp, act_t *dweight, act_t *dbias,
                                 const act_t *dout, const act_t *inp, const act_t *weight, int N,
                                 int C, int OC)
{
    const char *op = "ops_matmul_backward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "N", N));
    CHECK(check_positive(op, "C", C));
    CHECK(check_positive(op, "OC", OC));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "dinp", dinp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "dweight", dweight, mul2(OC, C), es));
    if (dbias)
        CHECK(check_tensor(op, s, "dbias", dbias, (size_t)OC, es));
    CHECK(check_tensor(op, s, "dout", dout, mul2(N, OC), es));
    CHECK(check_tensor(op, s, "inp", inp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "weight", weight, mul2(OC, C), es));
    return s->be->ops->matmul_backward(s, dinp, dweight, dbias, dout, inp,
                                      weight, N, C, OC);
}

/* ---- gelu, residual ---- */

static ferry_status check_eltwise(const char *op, backend_stream *s, const char *n0,
                                  const void *p0, const char *n1, const void *p1, const char *n2,
                                  const void *p2, size_t n)
{
    CHECK(check_stream(op, s));
    if (n == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: n is 0; it must be positive", op);
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, n0, p0, n, es));
    CHECK(check_tensor(op, s, n1, p1, n, es));
    if (n2)
        CHECK(check_tensor(op, s, n2, p2, n, es));
    return FERRY_OK;
}

ferry_status ops_gelu_forward(backend_stream *s, act_t *out, const act_t *inp, size_t n)
{
    CHECK(check_eltwise("ops_gelu_forward", s, "out", out, "inp", inp, NULL, NULL, n));
    return s->be->ops->gelu_forward(s, out, inp, n);
}

ferry_status ops_gelu_backward(backend_stream *s, act_t *dinp, const act_t *inp,
                               const act_t *dout, size_t n)
{
    CHECK(check_eltwise("ops_gelu_backward", s, "dinp", dinp, "inp", inp, "dout", dout, n));
    return s->be->ops->gelu_backward(s, dinp, inp, dout, n);
}

ferry_status ops_residual_forward(backend_stream *s, act_t *out, const act_t *a, const act_t *b,
                                  size_t n)
{
    CHECK(check_eltwise("ops_residual_forward", s, "out", out, "a", a, "b", b, n));
    return s->be->ops->residual_forward(s, out, a, b, n);
}

/* ---- attention ---- */

static ferry_status check_attention_shape(const char *op, backend_stream *s, int B, int T, int C,
                                          int NH)
{
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "B", B));
    CHECK(check_positive(op, "T", T));
    CHECK(check_positive(op, "C", C));
    CHECK(check_positive(op, "NH", NH));
    if (C % NH != 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: C = %d is not divisible by NH = %d heads", op, C, NH);
    return FERRY_OK;
}

ferry_status ops_attention_forward(backend_stream *s, act_t *out, float *lse, const act_t *qkv,
                                   int B, int T, int C, int NH)
{
    const char *op = "ops_attention_forward";
    CHECK(check_attention_shape(op, s, B, T, C, NH));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "out", out, mul3(B, T, C), es));
    CHECK(check_tensor(op, s, "lse", lse, mul3(B, NH, T), sizeof(float)));
    CHECK(check_tensor(op, s, "qkv", qkv, mul3(B, T, 3 * C), es));
    return s->be->ops->attention_forward(s, out, lse, qkv, B, T, C, NH);
}

ferry_status ops_attention_backward(backend_stream *s, act_t *dqkv, const act_t *dout,
                                    const act_t *qkv, const act_t *out, const float *lse, int B,
                                    int T, int C, int NH)
{
    const char *op = "ops_attention_backward";
    CHECK(check_attention_shape(op, s, B, T, C, NH));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "dqkv", dqkv, mul3(B, T, 3 * C), es));
    CHECK(check_tensor(op, s, "dout", dout, mul3(B, T, C), es));
    CHECK(check_tensor(op, s, "qkv", qkv, mul3(B, T, 3 * C), es));
    CHECK(check_tensor(op, s, "out", out, mul3(B, T, C), es));
    CHECK(check_tensor(op, s, "lse", lse, mul3(B, NH, T), sizeof(float)));
    return s->be->ops->attention_backward(s, dqkv, dout, qkv, out, lse, B,
                                         T, C, NH);
}

/* ---- classifier ---- */

ferry_status ops_classifier(backend_stream *s, float *losses, act_t *dinp, act_t *dwte,
                            const act_t *inp, const act_t *wte, const int32_t *targets,
                            float grad_scale, int N, int C, int V, int Vp, void *scratch,
                            int chunk)
{
    const char *op = "ops_classifier";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "N", N));
    CHECK(check_positive(op, "C", C));
    CHECK(check_positive(op, "V", V));
    CHECK(check_positive(op, "chunk", chunk));
    if (Vp < V)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s: padded vocab Vp = %d is smaller than the vocab V = %d", op, Vp, V);
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "losses", losses, (size_t)N, sizeof(float)));
    CHECK(check_tensor(op, s, "inp", inp, mul2(N, C), es));
    CHECK(check_tensor(op, s, "wte", wte, mul2(Vp, C), es));
    CHECK(check_tensor(op, s, "targets", targets, (size_t)N, sizeof(int32_t)));
    CHECK(check_tensor(op, s, "scratch", scratch,
                       ops_classifier_scratch_bytes(backend_stream_backend(s), chunk, Vp, C), 1));
    if (dinp) {
        if (!dwte)
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "%s: dinp is given but dwte is NULL; the gradient needs both", op);
        CHECK(check_tensor(op, s, "dinp", dinp, mul2(N, C), es));
        CHECK(check_tensor(op, s, "dwte", dwte, mul2(Vp, C), es));
    }
    return s->be->ops->classifier(s, losses, dinp, dwte, inp, wte, targets,
                                 grad_scale, N, C, V, Vp, scratch, chunk);
}

/* ---- conversions ---- */

static ferry_status check_convert(const char *op, backend_stream *s, const void *dst,
                                  size_t dst_elem, const void *src, size_t src_elem, size_t n)
{
    CHECK(check_stream(op, s));
    if (n == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s: n is 0; it must be positive", op);
    CHECK(check_tensor(op, s, "dst", dst, n, dst_elem));
    CHECK(check_tensor(op, s, "src", src, n, src_elem));
    return FERRY_OK;
}

ferry_status ops_convert_from_f32(backend_stream *s, act_t *dst, const float *src, size_t n)
{
    const char *op = "ops_convert_from_f32";
    CHECK(check_stream(op, s));
    CHECK(check_convert(op, s, dst, act_size(s), src, sizeof(float), n));
    return s->be->ops->convert_from_f32(s, dst, src, n);
}

ferry_status ops_convert_to_f32(backend_stream *s, float *dst, const act_t *src, size_t n)
{
    const char *op = "ops_convert_to_f32";
    CHECK(check_stream(op, s));
    CHECK(check_convert(op, s, dst, sizeof(float), src, act_size(s), n));
    return s->be->ops->convert_to_f32(s, dst, src, n);
}

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

ferry_status ops_adamw(backend_stream *s, float *master, float *m, float *v, const void *grad,
                       ferry_dtype grad_dtype, act_t *param_out, size_t n, const adamw_hparams *hp,
                       int64_t step, float grad_scale)
{
    const char *op = "ops_adamw";
    CHECK(check_stream(op, s));
    CHECK(check_grad_dtype(op, s, grad_dtype));
    CHECK(check_adamw_hparams(op, hp, step, grad_scale));
    if (n == 0)
        return FERRY_OK;
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "master", master, n, sizeof(float)));
    CHECK(check_tensor(op, s, "m", m, n, sizeof(float)));
    CHECK(check_tensor(op, s, "v", v, n, sizeof(float)));
    CHECK(check_tensor(op, s, "grad", grad, n, dtype_size(grad_dtype)));
    if (param_out)
        CHECK(check_tensor(op, s, "param_out", param_out, n, es));
    return s->be->ops->adamw(s, master, m, v, grad, grad_dtype, param_out, n, hp, step, grad_scale);
}

ferry_status ops_sumsq(backend_stream *s, const void *grad, ferry_dtype grad_dtype, size_t n, double *sumsq,
                       void *scratch)
{
    const char *op = "ops_sumsq";
    CHECK(check_stream(op, s));
    CHECK(check_grad_dtype(op, s, grad_dtype));
    CHECK(check_tensor(op, s, "sumsq", sumsq, 1, sizeof(double)));
    CHECK(check_tensor(op, s, "scratch", scratch, ops_sumsq_scratch_bytes(), 1));
    if (n == 0)
        return FERRY_OK;
    CHECK(check_tensor(op, s, "grad", grad, n, dtype_size(grad_dtype)));
    return s->be->ops->sumsq(s, grad, grad_dtype, n, sumsq, scratch);
}

ferry_status ops_accumulate(backend_stream *s, float *acc, const act_t *g, size_t n, bool first)
{
    const char *op = "ops_accumulate";
    CHECK(check_stream(op, s));
    if (n == 0)
        return FERRY_OK;
    CHECK(check_tensor(op, s, "acc", acc, n, sizeof(float)));
    CHECK(check_tensor(op, s, "g", g, n, act_size(s)));
    return s->be->ops->accumulate(s, acc, g, n, first);
}

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
