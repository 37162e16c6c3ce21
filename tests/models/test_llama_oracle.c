/* The Llama family on the host backend (fp32) against PyTorch
 * (tests/models/llama_oracle.py, float64, written from Hugging Face's model
 * definitions): six small 2-layer layouts, each from our seeded init with
 * the norm weights moved off 1 and the q/k/v biases (Qwen2) given values,
 * on fixed random tokens with some ignored targets:
 *   gqa      Llama 3: 4 heads, 2 key/value heads, llama3 rope scaling with
 *            original context 40 so that its three bands (kept, blended,
 *            divided) all have frequencies at head size 16; untied
 *   mqa      one key/value head, default rope, theta 10000
 *   qwen2    q/k/v biases, tied embeddings, theta 1e6, eps 1e-6
 *   mistral  plain multi-head (NKV = NH), linear scaling by 2
 *   hs64     one head of 64 (C = 64)
 *   hs128    two heads of 128 sharing one key/value head, C = 128 (so the
 *            attention's width NH HS = 256 is not C: head_dim set apart)
 * For each:
 * - a forward without targets: llama_logits at (0, T-1) against torch's,
 *   relative norm error <= 1e-5; with targets and no backward: the loss;
 * - step 0 forward + backward: the loss within 1e-5 relative and every
 *   tensor's gradient, ||ours - torch|| / ||torch|| <= 1e-5 (the largest
 *   elementwise error printed too);
 * - 3 steps of AdamW (torch.optim.AdamW there, decay on the tensors whose
 *   llama_tensor_info.decay is set; here a double-precision AdamW written
 *   below, the same formula) on the same batch: each step's loss within
 *   1e-5 relative.
 * Usage: test_llama_oracle PYTHON SCRIPT [LAYOUT]. Exit 77 (skip) when PYTHON
 * is missing or cannot import torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "common/error.h"
#include "models/llama.h"
#include "models/model.h"
#include "tests/models/llama_fixture.h"
#include "tests/models/oracle_files.h"
#include "tests/tap.h"

#define STEPS 3
#define B_ 2
#define T_ 32

static const double LR = 3e-3, BETA1 = 0.9, BETA2 = 0.95, EPS = 1e-8, WD = 0.1;

typedef struct layout {
    const char *name;
    const char *model_type;
    int nh, nkv, c, hs, inter;
    float theta, eps;
    llama_rope_scaling rope;
    bool qkv_bias, tied;
} layout;

static const layout LAYOUTS[] = {
    {"gqa", "llama", 4, 2, 64, 16, 176, 500000.0f, 1e-5f, {LLAMA_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 40}, false, false},
    {"mqa", "llama", 4, 1, 64, 16, 128, 10000.0f, 1e-5f, {LLAMA_ROPE_DEFAULT, 0, 0, 0, 0}, false, false},
    {"qwen2", "qwen2", 4, 2, 64, 16, 96, 1000000.0f, 1e-6f, {LLAMA_ROPE_DEFAULT, 0, 0, 0, 0}, true, true},
    {"mistral", "mistral", 4, 4, 64, 16, 160, 10000.0f, 1e-5f, {LLAMA_ROPE_LINEAR, 2.0f, 0, 0, 0}, false, false},
    {"hs64", "llama", 1, 1, 64, 64, 112, 10000.0f, 1e-5f, {LLAMA_ROPE_DEFAULT, 0, 0, 0, 0}, false, false},
    {"hs128", "llama", 2, 1, 128, 128, 128, 10000.0f, 1e-5f, {LLAMA_ROPE_DEFAULT, 0, 0, 0, 0}, false, false},
};
#define NLAYOUTS (int)(sizeof LAYOUTS / sizeof LAYOUTS[0])

static void config_for(const layout *ly, llama_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "%s", ly->model_type);
    c->n_layer = 2;
    c->n_head = ly->nh;
    c->n_kv_head = ly->nkv;
    c->n_embd = ly->c;
    c->head_dim = ly->hs;
    c->intermediate_size = ly->inter;
    c->vocab_size = 300;
    c->padded_vocab_size = 384;
    c->max_seq_len = 64;
    c->rms_norm_eps = ly->eps;
    c->rope_theta = ly->theta;
    c->rope_scaling = ly->rope;
    c->qkv_bias = ly->qkv_bias;
    c->tied_embeddings = ly->tied;
    c->sliding_window = strcmp(ly->model_type, "mistral") == 0 ? 4096 : 0;
    /* wider than Hugging Face's 0.02 so that the attention is far from
     * uniform and a wrong rotation or mask moves the numbers */
    c->initializer_range = 0.1f;
    c->bos_token_id = c->eos_token_id = -1;
}

/* ---- the oracle's files ---- */

static int write_input(const char *path, const llama_model *m, float **groups, const int32_t *tok,
                       const int32_t *tgt)
{
    const llama_config *c = llama_get_config(m);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int G = llama_num_groups(m), ntensors = 0;
    for (int g = 0; g < G; g++)
        ntensors += llama_group_tensor_count(m, g);
    oracle_put(f, "FERRYLLM", 8);
    int32_t hdr[18] = {1, c->n_layer, c->n_head, c->n_kv_head, c->n_embd, c->head_dim,
                       c->intermediate_size, c->vocab_size, c->padded_vocab_size, c->max_seq_len,
                       c->qkv_bias, c->tied_embeddings, (int32_t)c->rope_scaling.kind,
                       c->rope_scaling.original_max_position_embeddings, B_, T_, STEPS, ntensors};
    oracle_put(f, hdr, sizeof hdr);
    double rope[5] = {c->rms_norm_eps, c->rope_theta, c->rope_scaling.factor, c->rope_scaling.low_freq_factor,
                      c->rope_scaling.high_freq_factor};
    oracle_put(f, rope, sizeof rope);
    const double opt[5] = {LR, BETA1, BETA2, EPS, WD};
    oracle_put_run(f, opt, tok, tgt, STEPS, B_ * T_);
    for (int g = 0; g < G; g++)
        for (int i = 0; i < llama_group_tensor_count(m, g); i++) {
            llama_tensor_info t;
            llama_group_tensor(m, g, i, &t);
            oracle_put_tensor(f, t.name, t.ndim, t.shape, t.decay, groups[g] + t.offset, t.numel);
        }
    return fclose(f) == 0;
}

typedef struct reference {
    double losses[STEPS];
    double *logits; /* [V] at (0, T-1) */
    double *grads;  /* all tensors, table order */
} reference;

static int read_reference(const char *path, reference *ref, int ntensors, int V, size_t total)
{
    ref->logits = malloc((size_t)V * sizeof *ref->logits);
    ref->grads = malloc(total * sizeof *ref->grads);
    const int32_t want[3] = {STEPS, ntensors, V};
    double *const arrays[3] = {ref->losses, ref->logits, ref->grads};
    const size_t counts[3] = {STEPS, (size_t)V, total};
    return oracle_read(path, "FERRYLRF", want, 3, arrays, counts, 3);
}

/* ---- torch.optim.AdamW in double, decay per tensor ---- */

typedef struct adamw {
    double **master, **m, **v;
} adamw;

static void adamw_step(adamw *o, const llama_model *mod, float **params, float **grads, int step)
{
    const oracle_adamw cfg = {LR, BETA1, BETA2, EPS};
    for (int g = 0; g < llama_num_groups(mod); g++)
        for (int i = 0; i < llama_group_tensor_count(mod, g); i++) {
            llama_tensor_info t;
            llama_group_tensor(mod, g, i, &t);
            double wd = t.decay ? WD : 0.0;
            for (size_t e = t.offset; e < t.offset + t.numel; e++)
                params[g][e] = oracle_adamw_element(&cfg, &o->master[g][e], &o->m[g][e], &o->v[g][e], grads[g][e], wd,
                                                    step);
        }
}

/* ||ours - want|| / ||want|| over n elements, and the largest |ours - want|. */
static double rel_error(const float *ours, const double *want, size_t n, double *maxabs, double *wantmax)
{
    double diff2 = 0, ref2 = 0;
    *maxabs = *wantmax = 0;
    for (size_t e = 0; e < n; e++) {
        double d = ours[e] - want[e];
        diff2 += d * d;
        ref2 += want[e] * want[e];
        *maxabs = fabs(d) > *maxabs ? fabs(d) : *maxabs;
        *wantmax = fabs(want[e]) > *wantmax ? fabs(want[e]) : *wantmax;
    }
    return ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
}

static double compare_grads(const layout *ly, const llama_model *m, float **grads, const reference *ref,
                            char *worst_name, size_t cap)
{
    size_t k = 0;
    double worst = -1;
    for (int g = 0; g < llama_num_groups(m); g++)
        for (int i = 0; i < llama_group_tensor_count(m, g); i++) {
            llama_tensor_info t;
            llama_group_tensor(m, g, i, &t);
            double maxabs, refmax;
            double rel = rel_error(grads[g] + t.offset, ref->grads + k, t.numel, &maxabs, &refmax);
            k += t.numel;
            if (rel > worst) {
                worst = rel;
                snprintf(worst_name, cap, "%s", t.name);
            }
            tap_ok(rel <= 1e-5, "%s: grad %-44s rel. norm error %.2e <= 1e-5 (max abs err %.2e, max |torch| %.2e)",
                   ly->name, t.name, rel, maxabs, refmax);
        }
    return worst;
}

/* ---- the model on the host backend ---- */

static bool is_norm(const char *name) { return strstr(name, "norm.weight") != NULL; }
static bool is_bias(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".bias") == 0;
}

/* The seeded init, then the norms moved to 1 + U(-0.2, 0.2) and the biases
 * to U(-0.1, 0.1) so that a forgotten weight or bias shows. */
static ferry_status init_params(const llama_model *m, uint64_t seed, float **params)
{
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ull;
    for (int g = 0; g < llama_num_groups(m); g++) {
        ferry_status st = llama_init_group(m, g, seed, params[g]);
        if (st != FERRY_OK)
            return st;
        for (int i = 0; i < llama_group_tensor_count(m, g); i++) {
            llama_tensor_info t;
            llama_group_tensor(m, g, i, &t);
            if (is_norm(t.name))
                for (size_t e = 0; e < t.numel; e++)
                    params[g][t.offset + e] = (float)(1.0 + 0.4 * (tap_rand_unit(&rng) - 0.5));
            else if (is_bias(t.name))
                for (size_t e = 0; e < t.numel; e++)
                    params[g][t.offset + e] = (float)(0.2 * (tap_rand_unit(&rng) - 0.5));
        }
    }
    return FERRY_OK;
}

/* Runs the oracle: 0 when it ran, 77 when it cannot (no python or torch), else 1. */
static int run_oracle(const char *python, const char *script, const char *in, const char *out)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", python, script, in, out);
    int rc = system(cmd);
    if (WIFEXITED(rc) && (WEXITSTATUS(rc) == 77 || WEXITSTATUS(rc) == 127))
        return 77;
    TAP_IS_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0, "the PyTorch oracle ran: %s", cmd);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 ? 0 : 1;
}

typedef struct summary {
    double loss_err, logits_err, grad_err;
    char grad_worst[LLAMA_NAME_MAX];
    bool ran;
} summary;

/* One layout, start to end. Returns 77 when the oracle cannot run. */
static int run_layout(const layout *ly, const char *python, const char *script, const char *dir, uint64_t seed,
                      summary *sum)
{
    memset(sum, 0, sizeof *sum);
    llama_config cfg;
    config_for(ly, &cfg);
    tap_diag("layout %s: %s, L=%d NH=%d NKV=%d C=%d HS=%d I=%d V=%d Vp=%d, theta %g, eps %g, rope kind %d%s%s; seed %llu",
             ly->name, cfg.model_type, cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd, cfg.head_dim,
             cfg.intermediate_size, cfg.vocab_size, cfg.padded_vocab_size, (double)cfg.rope_theta,
             (double)cfg.rms_norm_eps, (int)cfg.rope_scaling.kind, cfg.qkv_bias ? ", q/k/v biases" : "",
             cfg.tied_embeddings ? ", tied" : ", untied", (unsigned long long)seed);
    llama_fixture b;
    ferry_status st = llama_fixture_open(&b, FERRY_BACKEND_HOST, FERRY_DTYPE_F32, &cfg, B_, T_, false, seed);
    if (!tap_ok(st == FERRY_OK, "%s: the model opens on the host backend%s%s", ly->name,
                st == FERRY_OK ? "" : ": ", st == FERRY_OK ? "" : ferry_last_error())) {
        llama_fixture_close(&b);
        return 1;
    }
    int G = llama_num_groups(b.m), ntensors = 0, V = cfg.vocab_size;
    float *params[G], *grads[G];
    size_t total = 0;
    for (int g = 0; g < G; g++) {
        params[g] = calloc(llama_group_numel(b.m, g), sizeof(float));
        grads[g] = calloc(llama_group_numel(b.m, g), sizeof(float));
        for (int i = 0; i < llama_group_tensor_count(b.m, g); i++, ntensors++) {
            llama_tensor_info t;
            llama_group_tensor(b.m, g, i, &t);
            total += t.numel;
        }
    }
    st = init_params(b.m, seed, params);
    for (int g = 0; g < G && st == FERRY_OK; g++)
        st = model_resident_set_params(b.r, b.s, g, params[g]);
    tap_ok(st == FERRY_OK, "%s: seeded init (seed %llu) into the resident groups%s%s", ly->name,
           (unsigned long long)seed, st == FERRY_OK ? "" : ": ", st == FERRY_OK ? "" : ferry_last_error());

    uint64_t rng = seed + 1;
    int32_t tok[B_ * T_], tgt[B_ * T_];
    for (int i = 0; i < B_ * T_; i++) {
        tok[i] = (int32_t)(tap_rand_unit(&rng) * V);
        tgt[i] = i % 7 == 6 ? -1 : (int32_t)(tap_rand_unit(&rng) * V);
    }
    char in[256], out[256];
    snprintf(in, sizeof in, "%s/%s.in", dir, ly->name);
    snprintf(out, sizeof out, "%s/%s.ref", dir, ly->name);
    int rc = 1;
    reference ref = {0};
    if (!tap_ok(st == FERRY_OK && write_input(in, b.m, params, tok, tgt), "%s: input for the oracle written to %s",
                ly->name, in))
        goto done;
    rc = run_oracle(python, script, in, out);
    if (rc != 0)
        goto done;
    rc = 1;
    if (!tap_ok(read_reference(out, &ref, ntensors, V, total), "%s: the oracle's output reads back", ly->name))
        goto done;
    rc = 0;
    sum->ran = true;

    /* the sampling path: a forward without targets, then the logits */
    float *logits = malloc((size_t)V * sizeof *logits);
    st = llama_forward(b.m, b.a, &b.h, b.s, tok, NULL, false);
    if (st == FERRY_OK)
        st = llama_logits(b.m, b.a, &b.h, b.s, 0, T_ - 1, logits);
    if (tap_ok(st == FERRY_OK, "%s: forward without targets and llama_logits(0, %d) run%s%s", ly->name, T_ - 1,
               st == FERRY_OK ? "" : ": ", st == FERRY_OK ? "" : ferry_last_error())) {
        double maxabs, refmax;
        sum->logits_err = rel_error(logits, ref.logits, (size_t)V, &maxabs, &refmax);
        tap_ok(sum->logits_err <= 1e-5, "%s: logits at (0, %d) rel. norm error %.2e <= 1e-5 (max abs err %.2e, "
               "max |torch| %.2e)", ly->name, T_ - 1, sum->logits_err, maxabs, refmax);
    }
    free(logits);
    /* the evaluation path: targets, no backward */
    float loss = 0;
    st = llama_forward(b.m, b.a, &b.h, b.s, tok, tgt, false);
    if (st == FERRY_OK)
        st = llama_loss(b.a, b.s, &loss);
    if (tap_ok(st == FERRY_OK, "%s: forward with targets, no backward%s%s", ly->name, st == FERRY_OK ? "" : ": ",
               st == FERRY_OK ? "" : ferry_last_error()))
        TAP_IS_CLOSE(loss, ref.losses[0], 0.0, 1e-5, "%s: evaluation loss %.7f vs torch %.7f", ly->name, loss,
                     ref.losses[0]);

    adamw opt = {calloc((size_t)G, sizeof(double *)), calloc((size_t)G, sizeof(double *)),
                 calloc((size_t)G, sizeof(double *))};
    for (int g = 0; g < G; g++) {
        size_t n = llama_group_numel(b.m, g);
        opt.master[g] = malloc(n * sizeof(double));
        opt.m[g] = calloc(n, sizeof(double));
        opt.v[g] = calloc(n, sizeof(double));
        for (size_t i = 0; i < n; i++)
            opt.master[g][i] = params[g][i];
    }
    for (int step = 0; step < STEPS; step++) {
        st = model_resident_zero_grads(b.r, b.s);
        if (st == FERRY_OK)
            st = llama_forward(b.m, b.a, &b.h, b.s, tok, tgt, true);
        if (st == FERRY_OK)
            st = llama_backward(b.m, b.a, &b.h, b.s, 1.0f);
        if (st == FERRY_OK)
            st = llama_loss(b.a, b.s, &loss);
        for (int g = 0; g < G && st == FERRY_OK; g++)
            st = model_resident_get_grads(b.r, b.s, g, grads[g]);
        if (!tap_ok(st == FERRY_OK, "%s: step %d runs%s%s", ly->name, step, st == FERRY_OK ? "" : ": ",
                    st == FERRY_OK ? "" : ferry_last_error()))
            break;
        if (step == 0)
            sum->grad_err = compare_grads(ly, b.m, grads, &ref, sum->grad_worst, sizeof sum->grad_worst);
        double rel = fabs(loss - ref.losses[step]) / fabs(ref.losses[step]);
        sum->loss_err = rel > sum->loss_err ? rel : sum->loss_err;
        TAP_IS_CLOSE(loss, ref.losses[step], 0.0, 1e-5, "%s: step %d loss %.7f vs torch %.7f (rel. error %.2e)",
                     ly->name, step, loss, ref.losses[step], rel);
        adamw_step(&opt, b.m, params, grads, step + 1);
        for (int g = 0; g < G && st == FERRY_OK; g++)
            st = model_resident_set_params(b.r, b.s, g, params[g]);
    }
    tap_diag("%s: worst loss rel. error %.3g over %d steps (torch %.5f -> %.5f), logits %.3g, worst gradient %.3g (%s)",
             ly->name, sum->loss_err, STEPS, ref.losses[0], ref.losses[STEPS - 1], sum->logits_err,
             sum->grad_err, sum->grad_worst);
    for (int g = 0; g < G; g++)
        free(opt.master[g]), free(opt.m[g]), free(opt.v[g]);
    free(opt.master), free(opt.m), free(opt.v);
done:
    for (int g = 0; g < G; g++)
        free(params[g]), free(grads[g]);
    free(ref.logits), free(ref.grads);
    remove(in), remove(out);
    llama_fixture_close(&b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s PYTHON llama_oracle.py [LAYOUT]\n", argv[0]);
        return 1;
    }
    const char *only = argc == 4 ? argv[3] : NULL;
    char dir[] = "/tmp/ferry-llama-oracle-XXXXXX";
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary directory");
    uint64_t seed = 20250611;
    tap_diag("seed %llu (layout i uses seed + 17 i)", (unsigned long long)seed);
    summary sums[NLAYOUTS];
    int matched = 0;
    for (int i = 0; i < NLAYOUTS; i++) {
        sums[i].ran = false;
        if (only && strcmp(only, LAYOUTS[i].name) != 0)
            continue;
        matched++;
        if (run_layout(&LAYOUTS[i], argv[1], argv[2], dir, seed + 17 * (uint64_t)i, &sums[i]) == 77) {
            rmdir(dir);
            tap_plan_skip("the oracle python is missing or cannot import torch");
        }
    }
    rmdir(dir);
    if (only && !matched) {
        fprintf(stderr, "%s: no layout '%s'; the layouts:", argv[0], only);
        for (int i = 0; i < NLAYOUTS; i++)
            fprintf(stderr, " %s", LAYOUTS[i].name);
        fprintf(stderr, "\n");
        return 1;
    }
    for (int i = 0; i < NLAYOUTS; i++)
        if (sums[i].ran)
            tap_diag("%-8s loss %.2e  logits %.2e  worst gradient %.2e (%s)", LAYOUTS[i].name, sums[i].loss_err,
                     sums[i].logits_err, sums[i].grad_err, sums[i].grad_worst);
    return tap_done();
}
