/* The host backend's op table (backend_host_ops): each op packs its
 * (already checked) arguments and runs the reference of backend/ops/<op>.c as a
 * host function on the stream's worker thread, in stream order.
 *
 * Storage is fp32, or bf16 or fp16 when the backend was asked to store one
 * of them (backend_set_act_dtype): then each op widens its 16-bit tensors
 * into fp32 temporaries, runs the same fp32 reference, and rounds back to
 * the storage type exactly the tensors it writes (where the CUDA ops store
 * bf16 or fp16), so the engine's 16-bit paths run without a GPU. The
 * temporaries are the emulation's own (malloc'd on the worker, freed before
 * the op returns), not device memory: the arena's figures stay those of the
 * 16-bit tensors. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "backend/backend_impl.h"
#include "backend/ops/blas.h"
#include "backend/comm_impl.h"
#include "backend/ops/ops_host.h"

/* ---- 16-bit storage: fp32 views of an op's tensors ---- */

typedef enum view_role {
    VIEW_IN,   /* read: widened */
    VIEW_OUT,  /* written whole: rounded back */
    VIEW_ADD,  /* added into: widened, then rounded back */
    VIEW_TEMP, /* the op's scratch: fp32 of its own, never copied */
} view_role;

/* The address of a tensor pointer inside an op's argument struct, how many
 * elements the op touches there, and how. */
typedef struct view {
    void *slot;
    size_t n;
    view_role role;
} view;

enum { MAX_VIEWS = 8 };

static void *slot_get(const view *v)
{
    void *p;
    memcpy(&p, v->slot, sizeof p);
    return p;
}

static void slot_set(const view *v, void *p) { memcpy(v->slot, &p, sizeof p); }

/* Swaps every tensor of `args` stored as `act` (bf16 or f16) for an fp32
 * copy, runs the fp32 op, rounds back what it wrote, and puts the pointers
 * back. */
static ferry_status run_widened(void *args, backend_host_fn fp32_run, const view *views, int count, ferry_dtype act)
{
    void *orig[MAX_VIEWS] = {0};
    float *wide[MAX_VIEWS] = {0};
    ferry_status st = FERRY_OK;
    for (int i = 0; i < count && st == FERRY_OK; i++) {
        orig[i] = slot_get(&views[i]);
        if (!orig[i] || views[i].n == 0)
            continue;
        wide[i] = malloc(views[i].n * sizeof(float));
        if (!wide[i]) {
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "host backend (%s storage): no memory for an fp32 copy of "
                         "%zu elements", dtype_name(act), views[i].n);
            break;
        }
        if (views[i].role == VIEW_IN || views[i].role == VIEW_ADD)
            for (size_t k = 0; k < views[i].n; k++)
                wide[i][k] = dtype_load_f32(orig[i], act, k);
        slot_set(&views[i], wide[i]);
    }
    if (st == FERRY_OK)
        st = fp32_run(args);
    for (int i = 0; i < count; i++) {
        if (!wide[i])
            continue;
        if (st == FERRY_OK && (views[i].role == VIEW_OUT || views[i].role == VIEW_ADD))
            for (size_t k = 0; k < views[i].n; k++)
                dtype_store_f32(orig[i], act, k, wide[i][k]);
        slot_set(&views[i], orig[i]);
        free(wide[i]);
    }
    return st;
}

static bool stores_16bit(const backend_stream *s) { return s->be->act != FERRY_DTYPE_F32; }

/* Launches the fp32 run, or its 16-bit twin when the backend stores bf16 or
 * f16 (the twin finds the type in the arguments' `act`). */
static ferry_status launch(backend_stream *s, backend_host_fn fp32_run, backend_host_fn narrow_run,
                           const void *args, size_t bytes)
{
    return backend_launch_host(s, stores_16bit(s) ? narrow_run : fp32_run, args, bytes);
}

/* OpenBLAS gets its address space now, or setup says what is missing. */
static ferry_status host_init(backend *be, void *workspace, size_t workspace_bytes)
{
    (void)be;
    (void)workspace;
    (void)workspace_bytes;
    return blas_prepare();
}

static void host_shutdown(backend *be) { (void)be; }

/* Positions that break op_list.h's rule fail the op, by row, index and value. */
#define CHECK_POSITIONS(who, pos, B, T)                                                         \
    do {                                                                                        \
        ferry_status pst_ = ops_check_positions((who), (pos), (B), (T));                        \
        if (pst_ != FERRY_OK)                                                                   \
            return pst_;                                                                        \
    } while (0)

/* ---- encoder ---- */

typedef struct encoder_args {
    float *out, *dwte, *dwpe;
    const float *wte, *wpe, *dout;
    const int32_t *tokens, *pos;
    int B, T, C, V;
    ferry_dtype act;
} encoder_args;

static ferry_status encoder_fwd_run(void *p)
{
    encoder_args *a = p;
    CHECK_POSITIONS("ops_encoder_forward", a->pos, a->B, a->T);
    return hostop_encoder_forward(a->out, a->tokens, a->wte, a->wpe, a->B, a->T, a->C, a->V, a->pos);
}

static ferry_status encoder_fwd_run_narrow(void *p)
{
    encoder_args *a = p;
    size_t BT = (size_t)a->B * a->T, C = (size_t)a->C;
    view v[] = {{&a->out, BT * C, VIEW_OUT}, {&a->wte, (size_t)a->V * C, VIEW_IN}, {&a->wpe, (size_t)a->T * C, VIEW_IN}};
    return run_widened(a, encoder_fwd_run, v, 3, a->act);
}

static ferry_status host_encoder_forward(backend_stream *s, act_t *out, const int32_t *tokens,
                                         const act_t *wte, const act_t *wpe, int B, int T, int C,
                                         int V, const int32_t *pos)
{
    encoder_args a = {.out = out, .wte = wte, .wpe = wpe, .tokens = tokens, .pos = pos, .B = B, .T = T, .C = C,
                      .V = V, .act = s->be->act};
    return launch(s, encoder_fwd_run, encoder_fwd_run_narrow, &a, sizeof a);
}

static ferry_status encoder_bwd_run(void *p)
{
    encoder_args *a = p;
    CHECK_POSITIONS("ops_encoder_backward", a->pos, a->B, a->T);
    hostop_encoder_backward(a->dwte, a->dwpe, a->dout, a->tokens, a->B, a->T, a->C, a->V, a->pos);
    return FERRY_OK;
}

/* The rows of dwte the tokens reach: those below V (any other adds into row 0). */
static ferry_status encoder_bwd_run_narrow(void *p)
{
    encoder_args *a = p;
    size_t BT = (size_t)a->B * a->T, C = (size_t)a->C, rows = 1;
    for (size_t i = 0; i < BT; i++)
        if (a->tokens[i] >= 0 && a->tokens[i] < a->V && (size_t)a->tokens[i] + 1 > rows)
            rows = (size_t)a->tokens[i] + 1;
    view v[] = {{&a->dwte, rows * C, VIEW_ADD}, {&a->dwpe, (size_t)a->T * C, VIEW_ADD}, {&a->dout, BT * C, VIEW_IN}};
    return run_widened(a, encoder_bwd_run, v, 3, a->act);
}

static ferry_status host_encoder_backward(backend_stream *s, act_t *dwte, act_t *dwpe,
                                          const act_t *dout, const int32_t *tokens, int B, int T,
                                          int C, int V, const int32_t *pos)
{
    encoder_args a = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tokens = tokens, .pos = pos, .B = B, .T = T,
                      .C = C, .V = V, .act = s->be->act};
    return launch(s, encoder_bwd_run, encoder_bwd_run_narrow, &a, sizeof a);
}

/* ---- layernorm ---- */

typedef struct layernorm_args {
    float *out, *mean, *rstd, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout, *fmean, *frstd;
    int N, C;
    ferry_dtype act;
} layernorm_args;

static ferry_status layernorm_fwd_run(void *p)
{
    layernorm_args *a = p;
    hostop_layernorm_forward(a->out, a->mean, a->rstd, a->inp, a->weight, a->bias, a->N, a->C);
    return FERRY_OK;
}

static ferry_status layernorm_fwd_run_narrow(void *p)
{
    layernorm_args *a = p;
    size_t NC = (size_t)a->N * a->C, C = (size_t)a->C;
    view v[] = {{&a->out, NC, VIEW_OUT}, {&a->inp, NC, VIEW_IN}, {&a->weight, C, VIEW_IN}, {&a->bias, C, VIEW_IN}};
    return run_widened(a, layernorm_fwd_run, v, 4, a->act);
}

static ferry_status host_layernorm_forward(backend_stream *s, act_t *out, float *mean, float *rstd,
                                           const act_t *inp, const act_t *weight, const act_t *bias,
                                           int N, int C)
{
    layernorm_args a = {.out = out, .mean = mean, .rstd = rstd, .inp = inp, .weight = weight,
                        .bias = bias, .N = N, .C = C, .act = s->be->act};
    return launch(s, layernorm_fwd_run, layernorm_fwd_run_narrow, &a, sizeof a);
}

static ferry_status layernorm_bwd_run(void *p)
{
    layernorm_args *a = p;
    hostop_layernorm_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->fmean,
                              a->frstd, a->N, a->C);
    return FERRY_OK;
}

static ferry_status layernorm_bwd_run_narrow(void *p)
{
    layernorm_args *a = p;
    size_t NC = (size_t)a->N * a->C, C = (size_t)a->C;
    view v[] = {{&a->dinp, NC, VIEW_ADD},  {&a->dweight, C, VIEW_ADD}, {&a->dbias, C, VIEW_ADD},
                {&a->dout, NC, VIEW_IN},   {&a->inp, NC, VIEW_IN},     {&a->weight, C, VIEW_IN}};
    return run_widened(a, layernorm_bwd_run, v, 6, a->act);
}

static ferry_status host_layernorm_backward(backend_stream *s, act_t *dinp, act_t *dweight,
                                            act_t *dbias, const act_t *dout, const act_t *inp,
                                            const act_t *weight, const float *mean,
                                            const float *rstd, int N, int C)
{
    layernorm_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout, .inp = inp,
                        .weight = weight, .fmean = mean, .frstd = rstd, .N = N, .C = C, .act = s->be->act};
    return launch(s, layernorm_bwd_run, layernorm_bwd_run_narrow, &a, sizeof a);
}

/* ---- matmul ---- */

typedef struct matmul_args {
    float *out, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    int N, C, OC;
    ferry_dtype act;
} matmul_args;

static ferry_status matmul_fwd_run(void *p)
{
    matmul_args *a = p;
    hostop_matmul_forward(a->out, a->inp, a->weight, a->bias, a->N, a->C, a->OC);
    return FERRY_OK;
}

static ferry_status matmul_fwd_run_narrow(void *p)
{
    matmul_args *a = p;
    size_t N = (size_t)a->N, C = (size_t)a->C, OC = (size_t)a->OC;
    view v[] = {{&a->out, N * OC, VIEW_OUT}, {&a->inp, N * C, VIEW_IN}, {&a->weight, OC * C, VIEW_IN},
                {&a->bias, OC, VIEW_IN}};
    return run_widened(a, matmul_fwd_run, v, 4, a->act);
}

static ferry_status host_matmul_forward(backend_stream *s, act_t *out, const act_t *inp,
                                        const act_t *weight, const act_t *bias, int N, int C, int OC)
{
    matmul_args a = {.out = out, .inp = inp, .weight = weight, .bias = bias, .N = N, .C = C, .OC = OC,
                     .act = s->be->act};
    return launch(s, matmul_fwd_run, matmul_fwd_run_narrow, &a, sizeof a);
}

static ferry_status matmul_bwd_run(void *p)
{
    matmul_args *a = p;
    hostop_matmul_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->N, a->C,
                           a->OC);
    return FERRY_OK;
}

static ferry_status matmul_bwd_run_narrow(void *p)
{
    matmul_args *a = p;
    size_t N = (size_t)a->N, C = (size_t)a->C, OC = (size_t)a->OC;
    view v[] = {{&a->dinp, N * C, VIEW_ADD}, {&a->dweight, OC * C, VIEW_ADD}, {&a->dbias, OC, VIEW_ADD},
                {&a->dout, N * OC, VIEW_IN}, {&a->inp, N * C, VIEW_IN},       {&a->weight, OC * C, VIEW_IN}};
    return run_widened(a, matmul_bwd_run, v, 6, a->act);
}

static ferry_status host_matmul_backward(backend_stream *s, act_t *dinp, act_t *dweight,
                                         act_t *dbias, const act_t *dout, const act_t *inp,
                                         const act_t *weight, int N, int C, int OC)
{
    matmul_args a = {.dinp = dinp, .dweight = dweight, .dbias = dbias, .dout = dout, .inp = inp,
                     .weight = weight, .N = N, .C = C, .OC = OC, .act = s->be->act};
    return launch(s, matmul_bwd_run, matmul_bwd_run_narrow, &a, sizeof a);
}

/* ---- element-wise: gelu, residual ---- */

typedef struct eltwise_args {
    float *out;
    const float *a, *b;
    size_t n;
    ferry_dtype act;
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

/* out written (gelu forward, residual) or added into (gelu backward). */
static ferry_status eltwise_narrow(eltwise_args *a, backend_host_fn fp32_run, view_role out_role)
{
    view v[] = {{&a->out, a->n, out_role}, {&a->a, a->n, VIEW_IN}, {&a->b, a->n, VIEW_IN}};
    return run_widened(a, fp32_run, v, 3, a->act);
}

static ferry_status gelu_fwd_run_narrow(void *p) { return eltwise_narrow(p, gelu_fwd_run, VIEW_OUT); }
static ferry_status gelu_bwd_run_narrow(void *p) { return eltwise_narrow(p, gelu_bwd_run, VIEW_ADD); }
static ferry_status residual_fwd_run_narrow(void *p) { return eltwise_narrow(p, residual_fwd_run, VIEW_OUT); }

static ferry_status host_gelu_forward(backend_stream *s, act_t *out, const act_t *inp, size_t n)
{
    eltwise_args a = {out, inp, NULL, n, s->be->act};
    return launch(s, gelu_fwd_run, gelu_fwd_run_narrow, &a, sizeof a);
}

static ferry_status host_gelu_backward(backend_stream *s, act_t *dinp, const act_t *inp,
                                       const act_t *dout, size_t n)
{
    eltwise_args a = {dinp, inp, dout, n, s->be->act};
    return launch(s, gelu_bwd_run, gelu_bwd_run_narrow, &a, sizeof a);
}

static ferry_status host_residual_forward(backend_stream *s, act_t *out, const act_t *x,
                                          const act_t *y, size_t n)
{
    eltwise_args a = {out, x, y, n, s->be->act};
    return launch(s, residual_fwd_run, residual_fwd_run_narrow, &a, sizeof a);
}

/* ---- attention ---- */

typedef struct attention_args {
    float *out, *lse, *dqkv, *delta;
    const float *qkv, *dout, *fwd_out, *fwd_lse;
    const int32_t *pos;
    int B, T, C, NH;
    ferry_dtype act;
} attention_args;

static ferry_status attention_fwd_run(void *p)
{
    attention_args *a = p;
    CHECK_POSITIONS("ops_attention_forward", a->pos, a->B, a->T);
    return hostop_attention_forward(a->out, a->lse, a->qkv, a->B, a->T, a->C, a->NH, a->pos);
}

static ferry_status attention_bwd_run(void *p)
{
    attention_args *a = p;
    CHECK_POSITIONS("ops_attention_backward", a->pos, a->B, a->T);
    return hostop_attention_backward(a->dqkv, a->dout, a->qkv, a->fwd_out, a->fwd_lse, a->delta,
                                     a->B, a->T, a->C, a->NH, a->pos);
}

static ferry_status attention_fwd_run_narrow(void *p)
{
    attention_args *a = p;
    size_t BTC = (size_t)a->B * a->T * a->C;
    view v[] = {{&a->out, BTC, VIEW_OUT}, {&a->qkv, 3 * BTC, VIEW_IN}};
    return run_widened(a, attention_fwd_run, v, 2, a->act);
}

static ferry_status attention_bwd_run_narrow(void *p)
{
    attention_args *a = p;
    size_t BTC = (size_t)a->B * a->T * a->C;
    view v[] = {{&a->dqkv, 3 * BTC, VIEW_ADD}, {&a->dout, BTC, VIEW_IN}, {&a->qkv, 3 * BTC, VIEW_IN},
                {&a->fwd_out, BTC, VIEW_IN}};
    return run_widened(a, attention_bwd_run, v, 4, a->act);
}

static ferry_status host_attention_forward(backend_stream *s, act_t *out, float *lse,
                                           const act_t *qkv, int B, int T, int C, int NH, const int32_t *pos)
{
    attention_args a = {.out = out, .lse = lse, .qkv = qkv, .pos = pos, .B = B, .T = T, .C = C, .NH = NH,
                        .act = s->be->act};
    return launch(s, attention_fwd_run, attention_fwd_run_narrow, &a, sizeof a);
}

static ferry_status host_attention_backward(backend_stream *s, act_t *dqkv, const act_t *dout,
                                            const act_t *qkv, const act_t *out, const float *lse,
                                            float *delta, int B, int T, int C, int NH, const int32_t *pos)
{
    attention_args a = {.dqkv = dqkv, .dout = dout, .qkv = qkv, .fwd_out = out, .fwd_lse = lse,
                        .delta = delta, .pos = pos, .B = B, .T = T, .C = C, .NH = NH, .act = s->be->act};
    return launch(s, attention_bwd_run, attention_bwd_run_narrow, &a, sizeof a);
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
    ferry_dtype act;
} classifier_args;

static ferry_status classifier_run(void *p)
{
    classifier_args *a = p;
    return hostop_classifier(a->losses, a->dinp, a->dwte, a->inp, a->wte, a->targets,
                             a->grad_scale, a->N, a->C, a->V, a->Vp, a->scratch, a->chunk);
}

static ferry_status classifier_rounding_run(void *p)
{
    classifier_args *a = p;
    return hostop_classifier_stored(a->losses, a->dinp, a->dwte, a->inp, a->wte, a->targets, a->grad_scale,
                                    a->N, a->C, a->V, a->Vp, a->scratch, a->chunk, a->act);
}

/* As the CUDA classifier: logits and their gradient kept in the storage
 * type, the products in fp32; the whole op's dwte is widened once and
 * rounded once. */
static ferry_status classifier_run_narrow(void *p)
{
    classifier_args *a = p;
    size_t NC = (size_t)a->N * a->C, VC = (size_t)a->V * a->C;
    view v[] = {{&a->dinp, NC, VIEW_ADD}, {&a->dwte, VC, VIEW_ADD}, {&a->inp, NC, VIEW_IN},
                {&a->wte, VC, VIEW_IN},   {&a->scratch, (size_t)a->chunk * a->Vp, VIEW_TEMP}};
    return run_widened(a, classifier_rounding_run, v, 5, a->act);
}

static ferry_status host_classifier(backend_stream *s, float *losses, act_t *dinp, act_t *dwte,
                                    const act_t *inp, const act_t *wte, const int32_t *targets,
                                    float grad_scale, int N, int C, int V, int Vp, void *scratch,
                                    int chunk)
{
    classifier_args a = {losses, dinp, dinp ? dwte : NULL, inp, wte, targets, grad_scale,
                         N, C, V, Vp, scratch, chunk, s->be->act};
    return launch(s, classifier_run, classifier_run_narrow, &a, sizeof a);
}

/* ---- conversions ---- */

typedef struct convert_args {
    float *dst;
    const float *src;
    size_t n;
    ferry_dtype act;
} convert_args;

static ferry_status convert_run(void *p)
{
    convert_args *a = p;
    hostop_convert_copy(a->dst, a->src, a->n);
    return FERRY_OK;
}

static ferry_status from_f32_run_narrow(void *p)
{
    convert_args *a = p;
    view v[] = {{&a->dst, a->n, VIEW_OUT}};
    return run_widened(a, convert_run, v, 1, a->act);
}

static ferry_status to_f32_run_narrow(void *p)
{
    convert_args *a = p;
    view v[] = {{&a->src, a->n, VIEW_IN}};
    return run_widened(a, convert_run, v, 1, a->act);
}

static ferry_status host_convert_from_f32(backend_stream *s, act_t *dst, const float *src, size_t n)
{
    convert_args a = {dst, src, n, s->be->act};
    return launch(s, convert_run, from_f32_run_narrow, &a, sizeof a);
}

static ferry_status host_convert_to_f32(backend_stream *s, float *dst, const act_t *src, size_t n)
{
    convert_args a = {dst, src, n, s->be->act};
    return launch(s, convert_run, to_f32_run_narrow, &a, sizeof a);
}

/* ---- the optimizer of offload none ---- */

typedef struct adamw_args {
    float *master, *m, *v;
    const void *grad;
    ferry_dtype grad_dtype;
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
    hostop_adamw(a->master, a->m, a->v, a->grad, a->grad_dtype, a->param_out, a->act, a->n, &a->hp, a->step,
                 a->grad_scale);
    return FERRY_OK;
}

static ferry_status host_adamw(backend_stream *s, float *master, float *m, float *v, const void *grad,
                               ferry_dtype grad_dtype, act_t *param_out, size_t n, const adamw_hparams *hp,
                               int64_t step, float grad_scale)
{
    adamw_args a = {master, m, v, grad, grad_dtype, param_out, s->be->act, n, *hp, step, grad_scale};
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

static ferry_status host_sumsq(backend_stream *s, const void *grad, ferry_dtype grad_dtype, size_t n,
                               double *sumsq, void *scratch)
{
    (void)scratch; /* the host sums tile partials on the worker's stack */
    sumsq_args a = {grad, grad_dtype, n, sumsq};
    return backend_launch_host(s, sumsq_run, &a, sizeof a);
}

typedef struct accumulate_args {
    float *acc;
    const void *g;
    ferry_dtype act;
    size_t n;
    bool first;
} accumulate_args;

static ferry_status accumulate_run(void *p)
{
    accumulate_args *a = p;
    numerics_accumulate(a->acc, a->g, a->act, a->n, a->first);
    return FERRY_OK;
}

static ferry_status host_accumulate(backend_stream *s, float *acc, const act_t *g, size_t n, bool first)
{
    accumulate_args a = {acc, g, s->be->act, n, first};
    return backend_launch_host(s, accumulate_run, &a, sizeof a);
}

/* ---- Llama's: rmsnorm, rope, swiglu ---- */

typedef struct rmsnorm_args {
    float *out, *rstd, *dinp, *dweight;
    const float *inp, *weight, *dout, *frstd;
    int N, C;
    float eps;
    ferry_dtype act;
} rmsnorm_args;

static ferry_status rmsnorm_fwd_run(void *p)
{
    rmsnorm_args *a = p;
    hostop_rmsnorm_forward(a->out, a->rstd, a->inp, a->weight, a->N, a->C, a->eps);
    return FERRY_OK;
}

static ferry_status rmsnorm_fwd_run_narrow(void *p)
{
    rmsnorm_args *a = p;
    size_t NC = (size_t)a->N * a->C;
    view v[] = {{&a->out, NC, VIEW_OUT}, {&a->inp, NC, VIEW_IN}, {&a->weight, (size_t)a->C, VIEW_IN}};
    return run_widened(a, rmsnorm_fwd_run, v, 3, a->act);
}

static ferry_status host_rmsnorm_forward(backend_stream *s, act_t *out, float *rstd, const act_t *inp,
                                         const act_t *weight, int N, int C, float eps)
{
    rmsnorm_args a = {.out = out, .rstd = rstd, .inp = inp, .weight = weight, .N = N, .C = C, .eps = eps,
                      .act = s->be->act};
    return launch(s, rmsnorm_fwd_run, rmsnorm_fwd_run_narrow, &a, sizeof a);
}

static ferry_status rmsnorm_bwd_run(void *p)
{
    rmsnorm_args *a = p;
    hostop_rmsnorm_backward(a->dinp, a->dweight, a->dout, a->inp, a->weight, a->frstd, a->N, a->C);
    return FERRY_OK;
}

static ferry_status rmsnorm_bwd_run_narrow(void *p)
{
    rmsnorm_args *a = p;
    size_t NC = (size_t)a->N * a->C, C = (size_t)a->C;
    view v[] = {{&a->dinp, NC, VIEW_ADD}, {&a->dweight, C, VIEW_ADD}, {&a->dout, NC, VIEW_IN},
                {&a->inp, NC, VIEW_IN},   {&a->weight, C, VIEW_IN}};
    return run_widened(a, rmsnorm_bwd_run, v, 5, a->act);
}

static ferry_status host_rmsnorm_backward(backend_stream *s, act_t *dinp, act_t *dweight, const act_t *dout,
                                          const act_t *inp, const act_t *weight, const float *rstd, int N, int C)
{
    rmsnorm_args a = {.dinp = dinp, .dweight = dweight, .dout = dout, .inp = inp, .weight = weight, .frstd = rstd,
                      .N = N, .C = C, .act = s->be->act};
    return launch(s, rmsnorm_bwd_run, rmsnorm_bwd_run_narrow, &a, sizeof a);
}

typedef struct rope_args {
    float *out;      /* forward: [B T 3 NH HS]; backward: dinp, [B T (NH + 2 NKV) HS] */
    const float *in; /* forward: inp; backward: dout */
    const float *inv_freq;
    const int32_t *pos;
    int B, T, NH, NKV, HS;
    ferry_dtype act;
} rope_args;

static ferry_status rope_fwd_run(void *p)
{
    rope_args *a = p;
    hostop_rope_forward(a->out, a->in, a->inv_freq, a->pos, a->B, a->T, a->NH, a->NKV, a->HS);
    return FERRY_OK;
}

static ferry_status rope_bwd_run(void *p)
{
    rope_args *a = p;
    hostop_rope_backward(a->out, a->in, a->inv_freq, a->pos, a->B, a->T, a->NH, a->NKV, a->HS);
    return FERRY_OK;
}

static ferry_status rope_narrow(rope_args *a, backend_host_fn fp32_run, bool forward)
{
    size_t BT = (size_t)a->B * a->T, wide = BT * 3 * a->NH * a->HS, grouped = BT * (a->NH + 2 * a->NKV) * a->HS;
    view v[] = {{&a->out, forward ? wide : grouped, forward ? VIEW_OUT : VIEW_ADD},
                {&a->in, forward ? grouped : wide, VIEW_IN}};
    return run_widened(a, fp32_run, v, 2, a->act);
}

static ferry_status rope_fwd_run_narrow(void *p) { return rope_narrow(p, rope_fwd_run, true); }
static ferry_status rope_bwd_run_narrow(void *p) { return rope_narrow(p, rope_bwd_run, false); }

static ferry_status host_rope_forward(backend_stream *s, act_t *out, const act_t *inp, const float *inv_freq,
                                      const int32_t *pos, int B, int T, int NH, int NKV, int HS)
{
    rope_args a = {out, inp, inv_freq, pos, B, T, NH, NKV, HS, s->be->act};
    return launch(s, rope_fwd_run, rope_fwd_run_narrow, &a, sizeof a);
}

static ferry_status host_rope_backward(backend_stream *s, act_t *dinp, const act_t *dout, const float *inv_freq,
                                       const int32_t *pos, int B, int T, int NH, int NKV, int HS)
{
    rope_args a = {dinp, dout, inv_freq, pos, B, T, NH, NKV, HS, s->be->act};
    return launch(s, rope_bwd_run, rope_bwd_run_narrow, &a, sizeof a);
}

typedef struct swiglu_args {
    float *out;
    const float *inp, *dout;
    int N, I;
    ferry_dtype act;
} swiglu_args;

static ferry_status swiglu_fwd_run(void *p)
{
    swiglu_args *a = p;
    hostop_swiglu_forward(a->out, a->inp, a->N, a->I);
    return FERRY_OK;
}

static ferry_status swiglu_bwd_run(void *p)
{
    swiglu_args *a = p;
    hostop_swiglu_backward(a->out, a->inp, a->dout, a->N, a->I);
    return FERRY_OK;
}

static ferry_status swiglu_fwd_run_narrow(void *p)
{
    swiglu_args *a = p;
    size_t NI = (size_t)a->N * a->I;
    view v[] = {{&a->out, NI, VIEW_OUT}, {&a->inp, 2 * NI, VIEW_IN}};
    return run_widened(a, swiglu_fwd_run, v, 2, a->act);
}

static ferry_status swiglu_bwd_run_narrow(void *p)
{
    swiglu_args *a = p;
    size_t NI = (size_t)a->N * a->I;
    view v[] = {{&a->out, 2 * NI, VIEW_ADD}, {&a->inp, 2 * NI, VIEW_IN}, {&a->dout, NI, VIEW_IN}};
    return run_widened(a, swiglu_bwd_run, v, 3, a->act);
}

static ferry_status host_swiglu_forward(backend_stream *s, act_t *out, const act_t *inp, int N, int I)
{
    swiglu_args a = {.out = out, .inp = inp, .N = N, .I = I, .act = s->be->act};
    return launch(s, swiglu_fwd_run, swiglu_fwd_run_narrow, &a, sizeof a);
}

/* dinp is the args' `out` (added into). */
static ferry_status host_swiglu_backward(backend_stream *s, act_t *dinp, const act_t *inp, const act_t *dout, int N,
                                         int I)
{
    swiglu_args a = {.out = dinp, .inp = inp, .dout = dout, .N = N, .I = I, .act = s->be->act};
    return launch(s, swiglu_bwd_run, swiglu_bwd_run_narrow, &a, sizeof a);
}

/* ---- generation's cache ops ---- */

typedef struct kv_args {
    float *out, *kcache, *vcache; /* kv_append: out is q; attention_decode: kcache and vcache only read */
    const float *in, *inv_freq;   /* kv_append: qkv; attention_decode: q */
    int pos0, B, Tq, NH, NKV, HS, Tmax;
    ferry_dtype act;
} kv_args;

static ferry_status kv_append_run(void *p)
{
    kv_args *a = p;
    hostop_kv_append(a->out, a->kcache, a->vcache, a->in, a->inv_freq, a->pos0, a->B, a->Tq, a->NH, a->NKV, a->HS,
                     a->Tmax);
    return FERRY_OK;
}

static ferry_status attention_decode_run(void *p)
{
    kv_args *a = p;
    return hostop_attention_decode(a->out, a->in, a->kcache, a->vcache, a->pos0, a->B, a->Tq, a->NH, a->NKV, a->HS,
                                   a->Tmax);
}

static size_t kv_rows(const kv_args *a) { return (size_t)a->B * a->Tq; }
static size_t kv_cache_n(const kv_args *a) { return (size_t)a->B * a->NKV * a->Tmax * a->HS; }

static ferry_status kv_append_run_narrow(void *p)
{
    kv_args *a = p;
    size_t Q = (size_t)a->NH * a->HS, row = (size_t)(a->NH + 2 * a->NKV) * a->HS;
    view v[] = {{&a->out, kv_rows(a) * Q, VIEW_OUT}, {&a->kcache, kv_cache_n(a), VIEW_ADD},
                {&a->vcache, kv_cache_n(a), VIEW_ADD}, {&a->in, kv_rows(a) * row, VIEW_IN}};
    return run_widened(a, kv_append_run, v, 4, a->act);
}

static ferry_status attention_decode_run_narrow(void *p)
{
    kv_args *a = p;
    size_t Q = (size_t)a->NH * a->HS;
    view v[] = {{&a->out, kv_rows(a) * Q, VIEW_OUT}, {&a->in, kv_rows(a) * Q, VIEW_IN},
                {&a->kcache, kv_cache_n(a), VIEW_IN}, {&a->vcache, kv_cache_n(a), VIEW_IN}};
    return run_widened(a, attention_decode_run, v, 4, a->act);
}

static ferry_status host_kv_append(backend_stream *s, act_t *q, act_t *kcache, act_t *vcache, const act_t *qkv,
                                   int pos0, int B, int Tq, int NH, int NKV, int HS, int Tmax)
{
    kv_args a = {q, kcache, vcache, qkv, NULL, pos0, B, Tq, NH, NKV, HS, Tmax, s->be->act};
    return launch(s, kv_append_run, kv_append_run_narrow, &a, sizeof a);
}

static ferry_status host_kv_append_rope(backend_stream *s, act_t *q, act_t *kcache, act_t *vcache, const act_t *qkv,
                                        const float *inv_freq, int pos0, int B, int Tq, int NH, int NKV, int HS,
                                        int Tmax)
{
    kv_args a = {q, kcache, vcache, qkv, inv_freq, pos0, B, Tq, NH, NKV, HS, Tmax, s->be->act};
    return launch(s, kv_append_run, kv_append_run_narrow, &a, sizeof a);
}

static ferry_status host_attention_decode(backend_stream *s, act_t *out, const act_t *q, const act_t *kcache,
                                          const act_t *vcache, int pos0, int B, int Tq, int NH, int NKV, int HS,
                                          int Tmax)
{
    kv_args a = {out, (float *)kcache, (float *)vcache, q, NULL, pos0, B, Tq, NH, NKV, HS, Tmax, s->be->act};
    return launch(s, attention_decode_run, attention_decode_run_narrow, &a, sizeof a);
}

#define HOST_ENTRY(NAME, CUDA, EXTRA) .NAME = host_##NAME,
const backend_ops backend_host_ops = {
    .act_dtypes = 1u << FERRY_DTYPE_F32 | 1u << FERRY_DTYPE_BF16 | 1u << FERRY_DTYPE_F16,
    .init = host_init,
    .shutdown = host_shutdown,
    FERRY_OPS(HOST_ENTRY)
    .comm_open = comm_host_open,
    .comm_close = comm_host_close,
    .reduce_scatter = comm_host_reduce_scatter,
    .all_gather = comm_host_all_gather,
    .all_reduce = comm_host_all_reduce,
};
