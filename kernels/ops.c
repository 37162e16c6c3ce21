/* The op dispatcher: checks every op's arguments on the caller's thread (NULL
 * stream, non-positive sizes, tensors that do not lie inside live device
 * buffers), then launches the host version (kernels/<op>.c, through
 * backend_launch_host on the stream's worker) or the CUDA version
 * (kernels/<op>.cu, through kernels/ops_cuda.h) of the op. Owns the storage
 * type of each backend; owns no memory. */
#include "kernels/ops.h"

#include <stdlib.h>

#include "common/error.h"
#include "kernels/ops_host.h"
#ifdef FERRY_HAVE_CUDA
#include "kernels/ops_cuda.h"
#endif

ferry_dtype backend_act_dtype(const backend *be)
{
    return backend_kind(be) == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
}

ferry_status ops_init(backend *be, void *workspace, size_t workspace_bytes)
{
    if (!be)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ops_init: backend is NULL");
#ifdef FERRY_HAVE_CUDA
    if (backend_kind(be) == FERRY_BACKEND_CUDA)
        return cudaop_init(be, workspace, workspace_bytes);
#endif
    (void)workspace;
    (void)workspace_bytes;
    return FERRY_OK;
}

void ops_shutdown(backend *be)
{
#ifdef FERRY_HAVE_CUDA
    if (be && backend_kind(be) == FERRY_BACKEND_CUDA)
        cudaop_shutdown(be);
#else
    (void)be;
#endif
}

size_t ops_classifier_scratch_bytes(const backend *be, int chunk, int Vp)
{
    if (!be || chunk <= 0 || Vp <= 0)
        return 0;
#ifdef FERRY_HAVE_CUDA
    if (backend_kind(be) == FERRY_BACKEND_CUDA)
        return cudaop_classifier_scratch_bytes(chunk, Vp);
#endif
    return (size_t)chunk * (size_t)Vp * sizeof(float);
}

/* ---- argument checks ---- */

#ifdef FERRY_HAVE_CUDA
static bool is_host(backend_stream *s)
{
    return backend_kind(backend_stream_backend(s)) != FERRY_BACKEND_CUDA;
}
#endif

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

static size_t act_size(backend_stream *s)
{
    return dtype_size(backend_act_dtype(backend_stream_backend(s)));
}

#define CHECK(expr)                                                                             \
    do {                                                                                        \
        ferry_status st_ = (expr);                                                              \
        if (st_ != FERRY_OK)                                                                    \
            return st_;                                                                         \
    } while (0)

static size_t mul2(int a, int b) { return (size_t)a * (size_t)b; }
static size_t mul3(int a, int b, int c) { return (size_t)a * (size_t)b * (size_t)c; }

/* ---- encoder ---- */

typedef struct encoder_fwd_args {
    float *out;
    const int32_t *tokens;
    const float *wte, *wpe;
    int B, T, C, V;
} encoder_fwd_args;

static ferry_status encoder_fwd_run(void *p)
{
    encoder_fwd_args *a = p;
    return hostop_encoder_forward(a->out, a->tokens, a->wte, a->wpe, a->B, a->T, a->C, a->V);
}

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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_encoder_forward(backend_stream_native(s), out, tokens, wte, wpe, B, T, C, V);
#endif
    encoder_fwd_args a = {out, tokens, wte, wpe, B, T, C, V};
    return backend_launch_host(s, encoder_fwd_run, &a, sizeof a);
}

typedef struct encoder_bwd_args {
    float *dwte, *dwpe;
    const float *dout;
    const int32_t *tokens;
    int B, T, C;
} encoder_bwd_args;

static ferry_status encoder_bwd_run(void *p)
{
    encoder_bwd_args *a = p;
    hostop_encoder_backward(a->dwte, a->dwpe, a->dout, a->tokens, a->B, a->T, a->C);
    return FERRY_OK;
}

ferry_status ops_encoder_backward(backend_stream *s, act_t *dwte, act_t *dwpe, const act_t *dout,
                                  const int32_t *tokens, int B, int T, int C)
{
    const char *op = "ops_encoder_backward";
    CHECK(check_stream(op, s));
    CHECK(check_positive(op, "B", B));
    CHECK(check_positive(op, "T", T));
    CHECK(check_positive(op, "C", C));
    size_t es = act_size(s);
    CHECK(check_tensor(op, s, "dwte", dwte, (size_t)C, es));
    CHECK(check_tensor(op, s, "dwpe", dwpe, mul2(T, C), es));
    CHECK(check_tensor(op, s, "dout", dout, mul3(B, T, C), es));
    CHECK(check_tensor(op, s, "tokens", tokens, mul2(B, T), sizeof(int32_t)));
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_encoder_backward(backend_stream_native(s), dwte, dwpe, dout, tokens, B, T,
                                       C);
#endif
    encoder_bwd_args a = {dwte, dwpe, dout, tokens, B, T, C};
    return backend_launch_host(s, encoder_bwd_run, &a, sizeof a);
}

/* ---- layernorm ---- */

typedef struct layernorm_fwd_args {
    float *out, *mean, *rstd;
    const float *inp, *weight, *bias;
    int N, C;
} layernorm_fwd_args;

static ferry_status layernorm_fwd_run(void *p)
{
    layernorm_fwd_args *a = p;
    hostop_layernorm_forward(a->out, a->mean, a->rstd, a->inp, a->weight, a->bias, a->N, a->C);
    return FERRY_OK;
}

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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_layernorm_forward(backend_stream_native(s), out, mean, rstd, inp, weight,
                                        bias, N, C);
#endif
    layernorm_fwd_args a = {out, mean, rstd, inp, weight, bias, N, C};
    return backend_launch_host(s, layernorm_fwd_run, &a, sizeof a);
}

typedef struct layernorm_bwd_args {
    float *dinp, *dweight, *dbias;
    const float *dout, *inp, *weight, *mean, *rstd;
    int N, C;
} layernorm_bwd_args;

static ferry_status layernorm_bwd_run(void *p)
{
    layernorm_bwd_args *a = p;
    hostop_layernorm_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->mean,
                              a->rstd, a->N, a->C);
    return FERRY_OK;
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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_layernorm_backward(backend_stream_native(s), dinp, dweight, dbias, dout, inp,
                                         weight, mean, rstd, N, C);
#endif
    layernorm_bwd_args a = {dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C};
    return backend_launch_host(s, layernorm_bwd_run, &a, sizeof a);
}

/* ---- matmul ---- */

typedef struct matmul_fwd_args {
    float *out;
    const float *inp, *weight, *bias;
    int N, C, OC;
} matmul_fwd_args;

static ferry_status matmul_fwd_run(void *p)
{
    matmul_fwd_args *a = p;
    hostop_matmul_forward(a->out, a->inp, a->weight, a->bias, a->N, a->C, a->OC);
    return FERRY_OK;
}

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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_matmul_forward(backend_stream_native(s), out, inp, weight, bias, N, C, OC);
#endif
    matmul_fwd_args a = {out, inp, weight, bias, N, C, OC};
    return backend_launch_host(s, matmul_fwd_run, &a, sizeof a);
}

typedef struct matmul_bwd_args {
    float *dinp, *dweight, *dbias;
    const float *dout, *inp, *weight;
    int N, C, OC;
} matmul_bwd_args;

static ferry_status matmul_bwd_run(void *p)
{
    matmul_bwd_args *a = p;
    hostop_matmul_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->N, a->C,
                           a->OC);
    return FERRY_OK;
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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_matmul_backward(backend_stream_native(s), dinp, dweight, dbias, dout, inp,
                                      weight, N, C, OC);
#endif
    matmul_bwd_args a = {dinp, dweight, dbias, dout, inp, weight, N, C, OC};
    return backend_launch_host(s, matmul_bwd_run, &a, sizeof a);
}

/* ---- gelu, residual ---- */

typedef struct eltwise_args {
    float *out;
    const float *a, *b;
    size_t n;
} eltwise_args;

static ferry_status gelu_fwd_run(void *p)
{
    eltwise_args *a = p;
    hostop_gelu_forward(a->out, a->a, a->n);
    return FERRY_OK;
}

static ferry_status gelu_bwd_run(void *p)
{
    eltwise_args *a = p;
    hostop_gelu_backward(a->out, a->a, a->b, a->n);
    return FERRY_OK;
}

static ferry_status residual_fwd_run(void *p)
{
    eltwise_args *a = p;
    hostop_residual_forward(a->out, a->a, a->b, a->n);
    return FERRY_OK;
}

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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_gelu_forward(backend_stream_native(s), out, inp, n);
#endif
    eltwise_args a = {out, inp, NULL, n};
    return backend_launch_host(s, gelu_fwd_run, &a, sizeof a);
}

ferry_status ops_gelu_backward(backend_stream *s, act_t *dinp, const act_t *inp,
                               const act_t *dout, size_t n)
{
    CHECK(check_eltwise("ops_gelu_backward", s, "dinp", dinp, "inp", inp, "dout", dout, n));
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_gelu_backward(backend_stream_native(s), dinp, inp, dout, n);
#endif
    eltwise_args a = {dinp, inp, dout, n};
    return backend_launch_host(s, gelu_bwd_run, &a, sizeof a);
}

ferry_status ops_residual_forward(backend_stream *s, act_t *out, const act_t *a, const act_t *b,
                                  size_t n)
{
    CHECK(check_eltwise("ops_residual_forward", s, "out", out, "a", a, "b", b, n));
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_residual_forward(backend_stream_native(s), out, a, b, n);
#endif
    eltwise_args args = {out, a, b, n};
    return backend_launch_host(s, residual_fwd_run, &args, sizeof args);
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

typedef struct attention_args {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *fwd_out, *fwd_lse;
    int B, T, C, NH;
} attention_args;

static ferry_status attention_fwd_run(void *p)
{
    attention_args *a = p;
    return hostop_attention_forward(a->out, a->lse, a->qkv, a->B, a->T, a->C, a->NH);
}

static ferry_status attention_bwd_run(void *p)
{
    attention_args *a = p;
    return hostop_attention_backward(a->dqkv, a->dout, a->qkv, a->fwd_out, a->fwd_lse, a->B, a->T,
                                     a->C, a->NH);
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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_attention_forward(backend_stream_native(s), out, lse, qkv, B, T, C, NH);
#endif
    attention_args a = {.out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH};
    return backend_launch_host(s, attention_fwd_run, &a, sizeof a);
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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_attention_backward(backend_stream_native(s), dqkv, dout, qkv, out, lse, B,
                                         T, C, NH);
#endif
    attention_args a = {.dqkv = dqkv, .dout = dout, .qkv = qkv, .fwd_out = out, .fwd_lse = lse,
                        .B = B, .T = T, .C = C, .NH = NH};
    return backend_launch_host(s, attention_bwd_run, &a, sizeof a);
}

/* ---- classifier ---- */

typedef struct classifier_args {
    float *losses, *dinp, *dwte;
    const float *inp, *wte;
    const int32_t *targets;
    float grad_scale;
    int N, C, V, Vp;
    float *scratch;
    int chunk;
} classifier_args;

static ferry_status classifier_run(void *p)
{
    classifier_args *a = p;
    return hostop_classifier(a->losses, a->dinp, a->dwte, a->inp, a->wte, a->targets,
                             a->grad_scale, a->N, a->C, a->V, a->Vp, a->scratch, a->chunk);
}

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
                       ops_classifier_scratch_bytes(backend_stream_backend(s), chunk, Vp), 1));
    if (dinp) {
        if (!dwte)
            return err_set(FERRY_ERR_INVALID_ARGUMENT,
                           "%s: dinp is given but dwte is NULL; the gradient needs both", op);
        CHECK(check_tensor(op, s, "dinp", dinp, mul2(N, C), es));
        CHECK(check_tensor(op, s, "dwte", dwte, mul2(Vp, C), es));
    }
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_classifier(backend_stream_native(s), losses, dinp, dwte, inp, wte, targets,
                                 grad_scale, N, C, V, Vp, scratch, chunk);
#endif
    classifier_args a = {losses, dinp, dinp ? dwte : NULL, inp, wte, targets, grad_scale,
                         N, C, V, Vp, scratch, chunk};
    return backend_launch_host(s, classifier_run, &a, sizeof a);
}

/* ---- conversions ---- */

typedef struct convert_args {
    float *dst;
    const float *src;
    size_t n;
} convert_args;

static ferry_status convert_run(void *p)
{
    convert_args *a = p;
    hostop_convert_copy(a->dst, a->src, a->n);
    return FERRY_OK;
}

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
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_convert_from_f32(backend_stream_native(s), dst, src, n);
#endif
    convert_args a = {dst, src, n};
    return backend_launch_host(s, convert_run, &a, sizeof a);
}

ferry_status ops_convert_to_f32(backend_stream *s, float *dst, const act_t *src, size_t n)
{
    const char *op = "ops_convert_to_f32";
    CHECK(check_stream(op, s));
    CHECK(check_convert(op, s, dst, sizeof(float), src, act_size(s), n));
#ifdef FERRY_HAVE_CUDA
    if (!is_host(s))
        return cudaop_convert_to_f32(backend_stream_native(s), dst, src, n);
#endif
    convert_args a = {dst, src, n};
    return backend_launch_host(s, convert_run, &a, sizeof a);
}
