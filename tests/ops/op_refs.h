/* The double-precision references of the registry's ops (backend/ops/op_list.h),
 * written here from each op's definition and from nothing of backend/: the
 * expectation the host backend is held to over the shape table
 * (tests/ops/test_op_registry.c). One ref_<name> per op, taking the op's
 * arguments as dev/ops/opinfo.h's opref_<name> holds them (float tensors as
 * doubles) and writing what the op must write: forward ops overwrite their
 * outputs, backward ops add into theirs. An op of the registry without a
 * reference here does not compile (op_refs below names every one). */
#ifndef FERRY_TESTS_KERNELS_OP_REFS_H
#define FERRY_TESTS_KERNELS_OP_REFS_H

#include <math.h>

#include "dev/ops/opdrive.h"

/* The row of wpe (b, t) reads: its position, or t without positions. */
static size_t ref_wpe_row(const int32_t *pos, int T, int b, int t)
{
    return pos ? (size_t)pos[(size_t)b * T + t] : (size_t)t;
}

/* The first key query i of row b sees: i - pos (by hand from the rule:
 * back from i while the positions count down to 0), or 0 without them. */
static int ref_first_key(const int32_t *pos, int T, int b, int i)
{
    if (!pos)
        return 0;
    int j = i;
    while (j > 0 && pos[(size_t)b * T + j] != 0)
        j--;
    return j;
}

static void ref_encoder_forward(opref_encoder_forward *a)
{
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->T; t++) {
            size_t bt = (size_t)b * a->T + t;
            for (int c = 0; c < a->C; c++)
                a->out[bt * a->C + c] = a->wte[(size_t)a->tokens[bt] * a->C + c] +
                                        (a->wpe ? a->wpe[ref_wpe_row(a->pos, a->T, b, t) * a->C + c] : 0.0);
        }
}

static void ref_encoder_backward(opref_encoder_backward *a)
{
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->T; t++) {
            size_t bt = (size_t)b * a->T + t;
            for (int c = 0; c < a->C; c++) {
                double d = a->dout[bt * a->C + c];
                a->dwte[(size_t)a->tokens[bt] * a->C + c] += d;
                if (a->dwpe)
                    a->dwpe[ref_wpe_row(a->pos, a->T, b, t) * a->C + c] += d;
            }
        }
}

static void ref_layernorm_forward(opref_layernorm_forward *a)
{
    int C = a->C;
    for (int i = 0; i < a->N; i++) {
        const double *x = a->inp + (size_t)i * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += x[c];
        mean /= C;
        for (int c = 0; c < C; c++)
            var += (x[c] - mean) * (x[c] - mean);
        double rstd = 1.0 / sqrt(var / C + 1e-5);
        for (int c = 0; c < C; c++)
            a->out[(size_t)i * C + c] = (x[c] - mean) * rstd * a->weight[c] + a->bias[c];
        a->mean[i] = mean;
        a->rstd[i] = rstd;
    }
}

/* With the saved mean and rstd as given: norm = (x - mean) rstd,
 * dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dout w. */
static void ref_layernorm_backward(opref_layernorm_backward *a)
{
    int C = a->C;
    for (int i = 0; i < a->N; i++) {
        const double *x = a->inp + (size_t)i * C, *dy = a->dout + (size_t)i * C;
        double m = a->mean[i], r = a->rstd[i], dmean = 0, dnmean = 0;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - m) * r, dnorm = dy[c] * a->weight[c];
            dmean += dnorm;
            dnmean += dnorm * norm;
        }
        dmean /= C;
        dnmean /= C;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - m) * r, dnorm = dy[c] * a->weight[c];
            a->dbias[c] += dy[c];
            a->dweight[c] += dy[c] * norm;
            a->dinp[(size_t)i * C + c] += r * (dnorm - dmean - norm * dnmean);
        }
    }
}

static void ref_matmul_forward(opref_matmul_forward *a)
{
    for (int n = 0; n < a->N; n++)
        for (int o = 0; o < a->OC; o++) {
            double sum = a->bias ? a->bias[o] : 0.0;
            for (int c = 0; c < a->C; c++)
                sum += a->inp[(size_t)n * a->C + c] * a->weight[(size_t)o * a->C + c];
            a->out[(size_t)n * a->OC + o] = sum;
        }
}

static void ref_matmul_backward(opref_matmul_backward *a)
{
    int N = a->N, C = a->C, OC = a->OC;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double d = a->dout[(size_t)n * OC + o];
            if (a->dbias)
                a->dbias[o] += d;
            for (int c = 0; c < C; c++) {
                a->dinp[(size_t)n * C + c] += d * a->weight[(size_t)o * C + c];
                a->dweight[(size_t)o * C + c] += d * a->inp[(size_t)n * C + c];
            }
        }
}

#define REF_GELU_K 0.79788456080286535588 /* sqrt(2 / pi) */

static void ref_gelu_forward(opref_gelu_forward *a)
{
    for (size_t i = 0; i < a->n; i++) {
        double x = a->inp[i];
        a->out[i] = 0.5 * x * (1 + tanh(REF_GELU_K * (x + 0.044715 * x * x * x)));
    }
}

static void ref_gelu_backward(opref_gelu_backward *a)
{
    for (size_t i = 0; i < a->n; i++) {
        double x = a->inp[i], th = tanh(REF_GELU_K * (x + 0.044715 * x * x * x));
        double dudx = REF_GELU_K * (1 + 3 * 0.044715 * x * x);
        a->dinp[i] += a->dout[i] * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * dudx);
    }
}

static void ref_residual_forward(opref_residual_forward *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->out[i] = a->a[i] + a->b[i];
}

/* q, k, v of (b, t, head h): qkv is [B, T, 3C], heads HS apart inside each third. */
static const double *ref_qkv(const double *qkv, int T, int C, int HS, int b, int t, int which, int h)
{
    return qkv + ((size_t)b * T + t) * 3 * C + (size_t)which * C + (size_t)h * HS;
}

static double ref_dot(const double *x, const double *y, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static void ref_attention_forward(opref_attention_forward *a)
{
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc((size_t)T * sizeof *p);
    if (!p)
        return; /* the outputs stay as filled, and fail the comparison */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = ref_qkv(a->qkv, T, C, HS, b, i, 0, h);
                const int lo = ref_first_key(a->pos, T, b, i);
                double mx = -INFINITY, sum = 0;
                for (int j = lo; j <= i; j++) {
                    p[j] = scale * ref_dot(q, ref_qkv(a->qkv, T, C, HS, b, j, 1, h), HS);
                    mx = fmax(mx, p[j]);
                }
                for (int j = lo; j <= i; j++)
                    sum += exp(p[j] - mx);
                double lse = mx + log(sum);
                double *o = a->out + ((size_t)b * T + i) * C + (size_t)h * HS;
                for (int d = 0; d < HS; d++)
                    o[d] = 0;
                for (int j = lo; j <= i; j++) {
                    const double *v = ref_qkv(a->qkv, T, C, HS, b, j, 2, h);
                    for (int d = 0; d < HS; d++)
                        o[d] += exp(p[j] - lse) * v[d];
                }
                a->lse[((size_t)b * NH + h) * T + i] = lse;
            }
    free(p);
}

/* With out and lse as given (the forward's, in training): delta_i = D =
 * dout_i . out_i, P_ij = exp(S_ij - lse_i) over j <= i, dS_ij = P_ij
 * (dout_i . v_j - D),
 * dq_i += scale sum_j dS_ij k_j, dk_j += scale sum_i dS_ij q_i,
 * dv_j += sum_i P_ij dout_i. */
static void ref_attention_backward(opref_attention_backward *a)
{
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = ref_qkv(a->qkv, T, C, HS, b, i, 0, h);
                const double *dy = a->dout + ((size_t)b * T + i) * C + (size_t)h * HS;
                const double *y = a->out + ((size_t)b * T + i) * C + (size_t)h * HS;
                double D = ref_dot(dy, y, HS), lse = a->lse[((size_t)b * NH + h) * T + i];
                a->delta[((size_t)b * NH + h) * T + i] = D;
                double *dq = (double *)ref_qkv(a->dqkv, T, C, HS, b, i, 0, h);
                for (int j = ref_first_key(a->pos, T, b, i); j <= i; j++) {
                    const double *k = ref_qkv(a->qkv, T, C, HS, b, j, 1, h), *v = ref_qkv(a->qkv, T, C, HS, b, j, 2, h);
                    double *dk = (double *)ref_qkv(a->dqkv, T, C, HS, b, j, 1, h);
                    double *dv = (double *)ref_qkv(a->dqkv, T, C, HS, b, j, 2, h);
                    double P = exp(scale * ref_dot(q, k, HS) - lse), dS = P * (ref_dot(dy, v, HS) - D);
                    for (int d = 0; d < HS; d++) {
                        dq[d] += scale * dS * k[d];
                        dk[d] += scale * dS * q[d];
                        dv[d] += P * dy[d];
                    }
                }
            }
}

/* Rows with a target in [0, V): loss = log sum_v exp(l_v) - l_target over
 * the V real rows of wte; dlogits = grad_scale (softmax - onehot). */
static void ref_classifier(opref_classifier *a)
{
    int N = a->N, C = a->C, V = a->V;
    double *l = malloc((size_t)V * sizeof *l);
    if (!l)
        return;
    for (int i = 0; i < N; i++) {
        const double *x = a->inp + (size_t)i * C;
        int t = a->targets[i];
        if (t < 0) {
            a->losses[i] = 0;
            continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) {
            l[v] = ref_dot(x, a->wte + (size_t)v * C, C);
            mx = fmax(mx, l[v]);
        }
        for (int v = 0; v < V; v++)
            sum += exp(l[v] - mx);
        double lse = mx + log(sum);
        a->losses[i] = lse - l[t];
        if (!a->dinp)
            continue;
        for (int v = 0; v < V; v++) {
            double d = a->grad_scale * (exp(l[v] - lse) - (v == t));
            for (int c = 0; c < C; c++) {
                a->dinp[(size_t)i * C + c] += d * a->wte[(size_t)v * C + c];
                a->dwte[(size_t)v * C + c] += d * x[c];
            }
        }
    }
    free(l);
}

/* The reference's values are those of the storage type already (the inputs
 * are exact in it), so converting either way copies. */
static void ref_convert_from_f32(opref_convert_from_f32 *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->dst[i] = a->src[i];
}

static void ref_convert_to_f32(opref_convert_to_f32 *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->dst[i] = a->src[i];
}

/* torch.optim.AdamW, one step. */
static void ref_adamw(opref_adamw *a)
{
    const adamw_hparams *hp = a->hp;
    double bc1 = 1 - pow(hp->beta1, (double)a->step), bc2 = 1 - pow(hp->beta2, (double)a->step);
    for (size_t i = 0; i < a->n; i++) {
        double g = a->grad[i] * a->grad_scale, p = a->master[i] * (1 - hp->lr * hp->weight_decay);
        a->m[i] = hp->beta1 * a->m[i] + (1 - hp->beta1) * g;
        a->v[i] = hp->beta2 * a->v[i] + (1 - hp->beta2) * g * g;
        p -= hp->lr / bc1 * a->m[i] / (sqrt(a->v[i]) / sqrt(bc2) + hp->eps);
        a->master[i] = p;
        if (a->param_out)
            a->param_out[i] = p;
    }
}

static void ref_sumsq(opref_sumsq *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->sumsq[0] += a->grad[i] * a->grad[i];
}

static void ref_accumulate(opref_accumulate *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->acc[i] = (a->first ? 0.0 : a->acc[i]) + a->g[i];
}

/* rstd = (mean(x^2) + eps)^-1/2, out = x rstd w. */
static void ref_rmsnorm_forward(opref_rmsnorm_forward *a)
{
    int C = a->C;
    for (int i = 0; i < a->N; i++) {
        const double *x = a->inp + (size_t)i * C;
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + (double)a->eps);
        for (int c = 0; c < C; c++)
            a->out[(size_t)i * C + c] = x[c] * r * a->weight[c];
        a->rstd[i] = r;
    }
}

/* With the saved rstd r as given: y_c = w_c x_c r and dr/dx_c = -r^3 x_c / C,
 * so dinp_c += r w_c dy_c - x_c r^3 (sum_k w_k dy_k x_k) / C; dweight_c +=
 * dy_c x_c r. */
static void ref_rmsnorm_backward(opref_rmsnorm_backward *a)
{
    int C = a->C;
    for (int i = 0; i < a->N; i++) {
        const double *x = a->inp + (size_t)i * C, *dy = a->dout + (size_t)i * C;
        double r = a->rstd[i], dot = 0;
        for (int c = 0; c < C; c++)
            dot += a->weight[c] * dy[c] * x[c];
        for (int c = 0; c < C; c++) {
            a->dinp[(size_t)i * C + c] += r * a->weight[c] * dy[c] - x[c] * r * r * r * dot / C;
            a->dweight[c] += dy[c] * x[c] * r;
        }
    }
}

/* The angle of frequency i at position p: the fp32 product the definition
 * names (a product of two floats is exact in double, so rounding it to
 * float is the fp32 multiply), its cosine and sine then in double. */
static double ref_rope_angle(int32_t p, double inv_freq) { return (double)(float)((double)p * inv_freq); }

/* dst (+)= R(sign a) src over one head: with h = HS/2, for i < h,
 * dst_i = src_i cos - src_{i+h} sin, dst_{i+h} = src_{i+h} cos + src_i sin. */
static void ref_rope_head(double *dst, const double *src, const double *inv_freq, int32_t p, int HS, double sign,
                          bool add)
{
    int h = HS / 2;
    for (int i = 0; i < h; i++) {
        double a = ref_rope_angle(p, inv_freq[i]), c = cos(a), s = sign * sin(a);
        double lo = src[i] * c - src[i + h] * s, hi = src[i + h] * c + src[i] * s;
        dst[i] = add ? dst[i] + lo : lo;
        dst[i + h] = add ? dst[i + h] + hi : hi;
    }
}

/* inp row: NH query heads, NKV key heads, NKV value heads; out row [3][NH][HS]:
 * query head h rotated, key and value head h / (NH / NKV) (rotated, copied). */
static void ref_rope_forward(opref_rope_forward *a)
{
    int NH = a->NH, NKV = a->NKV, HS = a->HS, group = NH / NKV;
    size_t C = (size_t)NH * HS, in_row = (size_t)(NH + 2 * NKV) * HS;
    for (size_t n = 0; n < (size_t)a->B * a->T; n++) {
        const double *x = a->inp + n * in_row;
        double *o = a->out + n * 3 * C;
        for (int h = 0; h < NH; h++) {
            size_t kv = (size_t)(h / group) * HS;
            ref_rope_head(o + (size_t)h * HS, x + (size_t)h * HS, a->inv_freq, a->pos[n], HS, 1.0, false);
            ref_rope_head(o + C + (size_t)h * HS, x + C + kv, a->inv_freq, a->pos[n], HS, 1.0, false);
            for (int i = 0; i < HS; i++)
                o[2 * C + (size_t)h * HS + i] = x[C + (size_t)NKV * HS + kv + i];
        }
    }
}

/* The forward is linear in inp: its transpose rotates each gradient back
 * (R(a)^T = R(-a)) and adds it to the head it came from, so a key or value
 * head gathers the gradients of every query head that read it. */
static void ref_rope_backward(opref_rope_backward *a)
{
    int NH = a->NH, NKV = a->NKV, HS = a->HS, group = NH / NKV;
    size_t C = (size_t)NH * HS, in_row = (size_t)(NH + 2 * NKV) * HS;
    for (size_t n = 0; n < (size_t)a->B * a->T; n++) {
        double *dx = a->dinp + n * in_row;
        const double *d = a->dout + n * 3 * C;
        for (int h = 0; h < NH; h++) {
            size_t kv = (size_t)(h / group) * HS;
            ref_rope_head(dx + (size_t)h * HS, d + (size_t)h * HS, a->inv_freq, a->pos[n], HS, -1.0, true);
            ref_rope_head(dx + C + kv, d + C + (size_t)h * HS, a->inv_freq, a->pos[n], HS, -1.0, true);
            for (int i = 0; i < HS; i++)
                dx[C + (size_t)NKV * HS + kv + i] += d[2 * C + (size_t)h * HS + i];
        }
    }
}

/* silu(g) = g / (1 + e^-g); out = silu(gate) up. */
static void ref_swiglu_forward(opref_swiglu_forward *a)
{
    size_t I = (size_t)a->I;
    for (size_t r = 0; r < (size_t)a->N; r++)
        for (size_t i = 0; i < I; i++) {
            double g = a->inp[r * 2 * I + i], u = a->inp[r * 2 * I + I + i];
            a->out[r * I + i] = g / (1 + exp(-g)) * u;
        }
}

/* d silu(g)/dg = sigma(g) + g sigma(g) (1 - sigma(g)), sigma(g) = 1 / (1 + e^-g). */
static void ref_swiglu_backward(opref_swiglu_backward *a)
{
    size_t I = (size_t)a->I;
    for (size_t r = 0; r < (size_t)a->N; r++)
        for (size_t i = 0; i < I; i++) {
            double g = a->inp[r * 2 * I + i], u = a->inp[r * 2 * I + I + i], d = a->dout[r * I + i];
            double sg = 1 / (1 + exp(-g));
            a->dinp[r * 2 * I + i] += d * u * (sg + g * sg * (1 - sg));
            a->dinp[r * 2 * I + I + i] += d * g * sg;
        }
}

/* Generation's cache ops. Cache index of batch row b, key/value head j,
 * position p: ((b NKV + j) Tmax + p) HS. */
static size_t ref_kv_at(int b, int j, int p, int NKV, int Tmax, int HS)
{
    return (((size_t)b * NKV + (size_t)j) * (size_t)Tmax + (size_t)p) * (size_t)HS;
}

/* q = the query heads, the keys and values into the cache at pos0 + t
 * (rotated by the rope angles when inv_freq is given); the rest of the
 * cache is the input's. */
static void ref_kv_write(double *q, double *kc, double *vc, const double *qkv, const double *inv_freq, int pos0,
                         int B, int Tq, int NH, int NKV, int HS, int Tmax)
{
    size_t row = (size_t)(NH + 2 * NKV) * HS, Q = (size_t)NH * HS;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tq; t++) {
            size_t n = (size_t)b * Tq + t;
            const double *x = qkv + n * row;
            for (int h = 0; h < NH; h++) {
                double *o = q + n * Q + (size_t)h * HS;
                if (inv_freq)
                    ref_rope_head(o, x + (size_t)h * HS, inv_freq, pos0 + t, HS, 1.0, false);
                else
                    for (int i = 0; i < HS; i++)
                        o[i] = x[(size_t)h * HS + i];
            }
            for (int j = 0; j < NKV; j++) {
                size_t at = ref_kv_at(b, j, pos0 + t, NKV, Tmax, HS);
                const double *k = x + Q + (size_t)j * HS, *v = k + (size_t)NKV * HS;
                if (inv_freq)
                    ref_rope_head(kc + at, k, inv_freq, pos0 + t, HS, 1.0, false);
                else
                    for (int i = 0; i < HS; i++)
                        kc[at + i] = k[i];
                for (int i = 0; i < HS; i++)
                    vc[at + i] = v[i];
            }
        }
}

static void ref_kv_append(opref_kv_append *a)
{
    ref_kv_write(a->q, a->kcache, a->vcache, a->qkv, NULL, a->pos0, a->B, a->Tq, a->NH, a->NKV, a->HS, a->Tmax);
}

static void ref_kv_append_rope(opref_kv_append_rope *a)
{
    ref_kv_write(a->q, a->kcache, a->vcache, a->qkv, a->inv_freq, a->pos0, a->B, a->Tq, a->NH, a->NKV, a->HS,
                 a->Tmax);
}

/* softmax(q . k_j / sqrt(HS)) over j <= pos0 + t, in double, of key/value
 * head h / (NH / NKV), weighting its values. */
static void ref_attention_decode(opref_attention_decode *a)
{
    int NH = a->NH, NKV = a->NKV, HS = a->HS, group = NH / NKV;
    size_t Q = (size_t)NH * HS;
    double scale = 1.0 / sqrt((double)HS);
    double *w = (double *)malloc((size_t)a->Tmax * sizeof *w);
    if (!w)
        return;
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->Tq; t++)
            for (int h = 0; h < NH; h++) {
                size_t n = (size_t)b * a->Tq + t;
                const double *q = a->q + n * Q + (size_t)h * HS;
                double *o = a->out + n * Q + (size_t)h * HS, max = -INFINITY, sum = 0;
                int p = a->pos0 + t;
                for (int j = 0; j <= p; j++) {
                    const double *k = a->kcache + ref_kv_at(b, h / group, j, NKV, a->Tmax, HS);
                    double dot = 0;
                    for (int i = 0; i < HS; i++)
                        dot += q[i] * k[i];
                    w[j] = dot * scale;
                    max = w[j] > max ? w[j] : max;
                }
                for (int j = 0; j <= p; j++)
                    sum += (w[j] = exp(w[j] - max));
                for (int i = 0; i < HS; i++)
                    o[i] = 0;
                for (int j = 0; j <= p; j++) {
                    const double *v = a->vcache + ref_kv_at(b, h / group, j, NKV, a->Tmax, HS);
                    for (int i = 0; i < HS; i++)
                        o[i] += w[j] / sum * v[i];
                }
            }
    free(w);
}

/* Every op's reference, in the registry's order. */
#define OP_REF_CALL(NAME, CUDA, EXTRA)                                                          \
    static void ref_call_##NAME(void *p) { ref_##NAME((opref_##NAME *)p); }
FERRY_OPS(OP_REF_CALL)
#define OP_REF_ENTRY(NAME, CUDA, EXTRA) {#NAME, ref_call_##NAME},
static const struct {
    const char *op;
    opdrive_ref_fn ref;
} op_refs[] = {FERRY_OPS(OP_REF_ENTRY)};

static opdrive_ref_fn op_ref_find(const char *op)
{
    for (size_t i = 0; i < sizeof op_refs / sizeof op_refs[0]; i++)
        if (strcmp(op_refs[i].op, op) == 0)
            return op_refs[i].ref;
    return NULL;
}

#endif
