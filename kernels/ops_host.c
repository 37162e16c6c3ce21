/* The host backend's op table (backend_host_ops): each op packs its
 * (already checked) arguments and runs the reference of kernels/<op>.c as a
 * host function on the stream's worker thread, in stream order. Storage is
 * fp32. Owns no memory. */
#include "kernels/backend_impl.h"
#include "kernels/ops_host.h"

static ferry_status host_init(backend *be, void *workspace, size_t workspace_bytes)
{
    (void)be;
    (void)workspace;
    (void)workspace_bytes;
    return FERRY_OK;
}

static void host_shutdown(backend *be) { (void)be; }

/* ---- encoder ---- */

typedef struct encoder_args {
    float *out, *dwte, *dwpe;
    const float *wte, *wpe, *dout;
    const int32_t *tokens;
    int B, T, C, V;
} encoder_args;

static ferry_status encoder_fwd_run(void *p)
{
    encoder_args *a = p;
    return hostop_encoder_forward(a->out, a->tokens, a->wte, a->wpe, a->B, a->T, a->C, a->V);
}

static ferry_status host_encoder_forward(backend_stream *s, act_t *out, const int32_t *tokens,
                                         const act_t *wte, const act_t *wpe, int B, int T, int C,
                                         int V)
{
    encoder_args a = {.out = out, .wte = wte, .wpe = wpe, .tokens = tokens, .B = B, .T = T, .C = C, .V = V};
    return backend_launch_host(s, encoder_fwd_run, &a, sizeof a);
}

static ferry_status encoder_bwd_run(void *p)
{
    encoder_args *a = p;
    hostop_encoder_backward(a->dwte, a->dwpe, a->dout, a->tokens, a->B, a->T, a->C);
    return FERRY_OK;
}

static ferry_status host_encoder_backward(backend_stream *s, act_t *dwte, act_t *dwpe,
                                          const act_t *dout, const int32_t *tokens, int B, int T,
                                          int C)
{
    encoder_args a = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tokens = tokens, .B = B, .T = T, .C = C};
    return backend_launch_host(s, encoder_bwd_run, &a, sizeof a);
}

/* ---- layernorm ---- */

typedef struct layernorm_args {
    float *out, *mean, *rstd, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout, *fmean, *frstd;
    int N, C;
} layernorm_args;

static ferry_status layernorm_fwd_run(void *p)
{
    layernorm_args *a = p;
    hostop_layernorm_forward(a->out, a->mean, a->rstd, a->inp, a->weight, a->bias, a->N, a->C);
    return FERRY_OK;
}

static ferry_status host_layernorm_forward(backend_stream *s, act_t *out, float *mean, float *rstd,
                                           const act_t *inp, const act_t *weight, const act_t *bias,
                                           int N, int C)
{
    layernorm_args a = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .weight = weight,
                        .bias = bias, .N = N, .C = C};
    return backend_launch_host(s, layernorm_fwd_run, &a, sizeof a);
}

static ferry_status layernorm_bwd_run(void *p)
{
    layernorm_args *a = p;
    hostop_layernorm_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->fmean,
                              a->frstd, a->N, a->C);
    return FERRY_OK;
}

static ferry_status host_layernorm_backward(backend_stream *s, act_t *dinp, act_t *dweight,
                                            act_t *dbias, const act_t *dout, const act_t *inp,
                                            const act_t *weight, const float *mean,
                                            const float *rstd, int N, int C)
{
    layernorm_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout, .inp = inp,
                        .weight = weight, .fmean = mean, .frstd = rstd, .N = N, .C = C};
    return backend_launch_host(s, layernorm_bwd_run, &a, sizeof a);
}

/* ---- matmul ---- */

typedef struct matmul_args {
    float *out, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    int N, C, OC;
} matmul_args;

static ferry_status matmul_fwd_run(void *p)
{
    matmul_args *a = p;
    hostop_matmul_forward(a->out, a->inp, a->weight, a->bias, a->N, a->C, a->OC);
    return FERRY_OK;
}

static ferry_status host_matmul_forward(backend_stream *s, act_t *out, const act_t *inp,
                                        const act_t *weight, const act_t *bias, int N, int C, int OC)
{
    matmul_args a = {.out = out, .inp = inp, .weight = weight, .bias = bias, .N = N, .C = C, .OC = OC};
    return backend_launch_host(s, matmul_fwd_run, &a, sizeof a);
}

static ferry_status matmul_bwd_run(void *p)
{
    matmul_args *a = p;
    hostop_matmul_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->N, a->C,
                           a->OC);
    return FERRY_OK;
}

static ferry_status host_matmul_backward(backend_stream *s, act_t *dinp, act_t *dweight,
                                         act_t *dbias, const act_t *dout, const act_t *inp,
                                         const act_t *weight, int N, int C, int OC)
{
    matmul_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout, .inp = inp,
                     .weight = weight, .N = N, .C = C, .OC = OC};
    return backend_launch_host(s, matmul_bwd_run, &a, sizeof a);
}

/* ---- element-wise: gelu, residual ---- */

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

static ferry_status host_gelu_forward(backend_stream *s, act_t *out, const act_t *inp, size_t n)
{
    eltwise_args a = {out, inp, NULL, n};
    return backend_launch_host(s, gelu_fwd_run, &a, sizeof a);
}

static ferry_status host_gelu_backward(backend_stream *s, act_t *dinp, const act_t *inp,
                                       const act_t *dout, size_t n)
{
    eltwise_args a = {dinp, inp, dout, n};
    return backend_launch_host(s, gelu_bwd_run, &a, sizeof a);
}

static ferry_status host_residual_forward(backend_stream *s, act_t *out, const act_t *x,
                                          const act_t *y, size_t n)
{
    eltwise_args a = {out, x, y, n};
    return backend_launch_host(s, residual_fwd_run, &a, sizeof a);
}

/* ---- attention ---- */

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

static ferry_status host_attention_forward(backend_stream *s, act_t *out, float *lse,
                                           const act_t *qkv, int B, int T, int C, int NH)
{
    attention_args a = {.out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH};
    return backend_launch_host(s, attention_fwd_run, &a, sizeof a);
}

static ferry_status host_attention_backward(backend_stream *s, act_t *dqkv, const act_t *dout,
                                            const act_t *qkv, const act_t *out, const float *lse,
                                            int B, int T, int C, int NH)
{
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

static ferry_status host_classifier(backend_stream *s, float *losses, act_t *dinp, act_t *dwte,
                                    const act_t *inp, const act_t *wte, const int32_t *targets,
                                    float grad_scale, int N, int C, int V, int Vp, void *scratch,
                                    int chunk)
{
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

static ferry_status host_convert_from_f32(backend_stream *s, act_t *dst, const float *src, size_t n)
{
    convert_args a = {dst, src, n};
    return backend_launch_host(s, convert_run, &a, sizeof a);
}

static ferry_status host_convert_to_f32(backend_stream *s, float *dst, const act_t *src, size_t n)
{
    convert_args a = {dst, src, n};
    return backend_launch_host(s, convert_run, &a, sizeof a);
}

/* ---- the optimizer of offload none ---- */

typedef struct adamw_args {
    float *master, *m, *v;
    const void *grad;
    void *param_out;
    ferry_dtype act;
    size_t n;
    adamw_hparams hp;
    int64_t step;
    float grad_scale;
} adamw_args;

static ferry_status adamw_run(void *p)
{
    adamw_args *a = p;
    hostop_adamw(a->master, a->m, a->v, a->grad, a->param_out, a->act, a->n, &a->hp, a->step,
                 a->grad_scale);
    return FERRY_OK;
}

static ferry_status host_adamw(backend_stream *s, float *master, float *m, float *v,
                               const act_t *grad, act_t *param_out, size_t n,
                               const adamw_hparams *hp, int64_t step, float grad_scale)
{
    adamw_args a = {master, m, v, grad, param_out, s->be->act, n, *hp, step, grad_scale};
    return backend_launch_host(s, adamw_run, &a, sizeof a);
}

typedef struct sumsq_args {
    const void *grad;
    ferry_dtype act;
    size_t n;
    double *sumsq;
} sumsq_args;

static ferry_status sumsq_run(void *p)
{
    sumsq_args *a = p;
    *a->sumsq += hostop_sumsq(a->grad, a->act, a->n);
    return FERRY_OK;
}

static ferry_status host_sumsq(backend_stream *s, const act_t *grad, size_t n, double *sumsq,
                               void *scratch)
{
    (void)scratch; /* the host sums tile partials on the worker's stack */
    sumsq_args a = {grad, s->be->act, n, sumsq};
    return backend_launch_host(s, sumsq_run, &a, sizeof a);
}

const backend_ops backend_host_ops = {
    .init = host_init,
    .shutdown = host_shutdown,
    .encoder_forward = host_encoder_forward,
    .encoder_backward = host_encoder_backward,
    .layernorm_forward = host_layernorm_forward,
    .layernorm_backward = host_layernorm_backward,
    .matmul_forward = host_matmul_forward,
    .matmul_backward = host_matmul_backward,
    .gelu_forward = host_gelu_forward,
    .gelu_backward = host_gelu_backward,
    .residual_forward = host_residual_forward,
    .attention_forward = host_attention_forward,
    .attention_backward = host_attention_backward,
    .classifier = host_classifier,
    .convert_from_f32 = host_convert_from_f32,
    .convert_to_f32 = host_convert_to_f32,
    .adamw = host_adamw,
    .sumsq = host_sumsq,
};
