/* Tests of models/gpt2: configurations (the published parameter counts of
 * the four GPT-2 sizes), the tensor table, the seeded init (its statistics,
 * its determinism), and the model on the host backend: loss at init ~ ln V,
 * recompute on/off giving bitwise the same gradients, padded vocab rows never
 * mattering, the classifier's loss against gpt2_logits' logits, the hook
 * order, accumulation, and errors on bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/models/gpt2_fixture.h"
#include "tests/tap.h"

static uint64_t rng;

static void random_batch(int32_t *tokens, int32_t *targets, int n, int V, int ignore_every)
{
    for (int i = 0; i < n; i++) {
        tokens[i] = (int32_t)(tap_rand_unit(&rng) * V);
        targets[i] = (int32_t)(tap_rand_unit(&rng) * V);
        if (ignore_every && i % ignore_every == ignore_every - 1)
            targets[i] = -1;
    }
}

/* ---- configurations ---- */

static void test_presets(void)
{
    static const struct {
        const char *name;
        int L, NH, C;
        uint64_t params; /* as published for the Hugging Face checkpoints */
    } want[] = {
        {"gpt2", 12, 12, 768, 124439808ull},
        {"gpt2-medium", 24, 16, 1024, 354823168ull},
        {"gpt2-large", 36, 20, 1280, 774030080ull},
        {"gpt2-xl", 48, 25, 1600, 1557611200ull},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        gpt2_config c;
        gpt2_model *m = NULL;
        TAP_IS_STATUS(gpt2_config_preset(want[i].name, &c), FERRY_OK, "preset %s", want[i].name);
        tap_ok(c.n_layer == want[i].L && c.n_head == want[i].NH && c.n_embd == want[i].C &&
                   c.vocab_size == 50257 && c.padded_vocab_size == 50304 && c.max_seq_len == 1024,
               "%s is %d layers, %d heads, %d wide, vocab 50257 padded to 50304, context 1024",
               want[i].name, want[i].L, want[i].NH, want[i].C);
        TAP_IS_STATUS(gpt2_create(&c, &m), FERRY_OK, "%s model builds", want[i].name);
        TAP_IS_INT(gpt2_num_params(m), want[i].params, "%s has the published parameter count",
                   want[i].name);
        size_t total = 0;
        for (int g = 0; g < gpt2_num_groups(m); g++)
            total += gpt2_group_numel(m, g);
        TAP_IS_INT(total, want[i].params + (uint64_t)(50304 - 50257) * want[i].C,
                   "%s group buffers hold the params plus the padded wte rows", want[i].name);
        gpt2_destroy(m);
    }
    gpt2_config d12, g, d4;
    gpt2_config_preset("d12", &d12);
    gpt2_config_preset("gpt2", &g);
    tap_ok(memcmp(&d12, &g, sizeof g) == 0, "d12 is gpt2");
    TAP_IS_STATUS(gpt2_config_preset("d4", &d4), FERRY_OK, "d4 parses");
    tap_ok(d4.n_layer == 4 && d4.n_head == 4 && d4.n_embd == 256, "d4 is 4 layers, 4 heads, 256");
    const char *bad[] = {"gpt3", "d0", "d", "d12x", "d257", "D12", "d-1", "", "gpt2-XL"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        TAP_IS_STATUS(gpt2_config_preset(bad[i], &g), FERRY_ERR_INVALID_ARGUMENT,
                      "preset '%s' is rejected", bad[i]);
    tap_diag("message: %s", ferry_last_error());

    gpt2_config c;
    TAP_IS_STATUS(gpt2_config_from_fields(2, 4, 64, 500, 0, 64, &c), FERRY_OK, "custom config");
    TAP_IS_INT(c.padded_vocab_size, 512, "vocab 500 pads to 512");
    TAP_IS_STATUS(gpt2_config_from_fields(2, 5, 64, 500, 0, 64, &c), FERRY_ERR_INVALID_ARGUMENT,
                  "64 wide with 5 heads is rejected: %s", ferry_last_error());
    TAP_IS_STATUS(gpt2_config_from_fields(2, 4, 64, 500, 499, 64, &c), FERRY_ERR_INVALID_ARGUMENT,
                  "Vp < V is rejected: %s", ferry_last_error());
    TAP_IS_STATUS(gpt2_config_from_fields(0, 4, 64, 500, 0, 64, &c), FERRY_ERR_INVALID_ARGUMENT,
                  "0 layers is rejected");
    TAP_IS_STATUS(gpt2_config_from_fields(2, 4, 64, 0, 0, 64, &c), FERRY_ERR_INVALID_ARGUMENT,
                  "vocab 0 is rejected");
    TAP_IS_STATUS(gpt2_config_from_fields(2, 4, 64, 500, 0, 0, &c), FERRY_ERR_INVALID_ARGUMENT,
                  "context 0 is rejected");
    TAP_IS_STATUS(gpt2_config_from_fields(2, -4, 64, 500, 0, 64, &c), FERRY_ERR_INVALID_ARGUMENT,
                  "negative heads are rejected");
    TAP_IS_STATUS(gpt2_create(NULL, NULL), FERRY_ERR_INVALID_ARGUMENT, "NULL create is rejected");
}

/* ---- tensor table ---- */

static void test_table(void)
{
    gpt2_config c;
    gpt2_model *m = NULL;
    gpt2_config_from_fields(3, 2, 40, 70, 0, 16, &c); /* 40 wide: tensors need alignment gaps */
    gpt2_create(&c, &m);
    TAP_IS_INT(gpt2_num_groups(m), 5, "3 layers make 5 groups");
    gpt2_tensor_info t;
    gpt2_group_tensor(m, 3, 2, &t);
    tap_ok(strcmp(t.name, "transformer.h.2.attn.c_attn.weight") == 0 && t.shape[0] == 120 &&
               t.shape[1] == 40 && t.hf_shape[0] == 40 && t.hf_shape[1] == 120 &&
               t.hf_transposed && t.decay,
           "group 3 tensor 2 is h.2 c_attn.weight, ours [3C, C], HF Conv1D [C, 3C] (got '%s')",
           t.name);
    gpt2_group_tensor(m, 0, 0, &t);
    tap_ok(strcmp(t.name, "transformer.wte.weight") == 0 && t.shape[0] == 128 &&
               t.hf_shape[0] == 70 && t.hf_rows_prefix && !t.hf_transposed,
           "wte is [Vp = 128, C] here, [V = 70, C] in the checkpoint");
    gpt2_group_tensor(m, 4, 1, &t);
    tap_ok(strcmp(t.name, "transformer.ln_f.bias") == 0 && t.ndim == 1 && !t.decay,
           "the last group ends with ln_f.bias");
    int ok = 1, found = 1;
    for (int g = 0; g < gpt2_num_groups(m); g++) {
        size_t end = 0;
        for (int i = 0; i < gpt2_group_tensor_count(m, g); i++) {
            gpt2_group_tensor(m, g, i, &t);
            ok &= t.offset % GPT2_ALIGN_ELEMS == 0 && t.offset >= end;
            end = t.offset + t.numel;
            int fg = -1, fi = -1;
            found &= gpt2_find_tensor(m, t.name, &fg, &fi) == FERRY_OK && fg == g && fi == i;
        }
        ok &= end <= gpt2_group_numel(m, g);
    }
    tap_ok(ok, "tensors are aligned, in order, without overlap, inside their group");
    tap_ok(found, "every name is found back at its group and index");
    int g, i;
    TAP_IS_STATUS(gpt2_find_tensor(m, "transformer.h.3.mlp.c_fc.weight", &g, &i),
                  FERRY_ERR_INVALID_ARGUMENT, "h.3 does not exist in 3 layers: %s",
                  ferry_last_error());
    TAP_IS_STATUS(gpt2_group_tensor(m, 5, 0, &t), FERRY_ERR_INVALID_ARGUMENT, "group 5 is rejected");
    TAP_IS_STATUS(gpt2_group_tensor(m, 1, 12, &t), FERRY_ERR_INVALID_ARGUMENT,
                  "tensor 12 of a block is rejected");
    gpt2_destroy(m);
}

/* ---- init ---- */

static void stats(const float *p, size_t n, double *mean, double *std)
{
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++)
        s += p[i], q += (double)p[i] * p[i];
    *mean = s / n;
    *std = sqrt(q / n - *mean * *mean);
}

static void test_init(void)
{
    gpt2_config c;
    gpt2_model *m = NULL;
    gpt2_config_from_fields(8, 4, 128, 1000, 0, 64, &c);
    gpt2_create(&c, &m);
    size_t n1 = gpt2_group_numel(m, 1), n0 = gpt2_group_numel(m, 0);
    float *a = malloc(n1 * sizeof *a), *b = malloc(n1 * sizeof *b), *e = malloc(n0 * sizeof *e);
    gpt2_init_group(m, 1, 7, a);
    gpt2_tensor_info t;
    double mean, std;
    gpt2_group_tensor(m, 1, 2, &t);
    stats(a + t.offset, t.numel, &mean, &std);
    TAP_IS_CLOSE(std, 0.02, 0.0, 0.02, "c_attn.weight std is 0.02 (%zu draws)", t.numel);
    TAP_IS_CLOSE(mean, 0.0, 0.02 * 4 / sqrt((double)t.numel), 0.0, "c_attn.weight mean is 0");
    gpt2_group_tensor(m, 1, 10, &t);
    stats(a + t.offset, t.numel, &mean, &std);
    TAP_IS_CLOSE(std, 0.02 / sqrt(16.0), 0.0, 0.02, "mlp.c_proj.weight std is 0.02/sqrt(2L)");
    gpt2_group_tensor(m, 1, 0, &t);
    int ones = 1;
    for (size_t i = 0; i < t.numel; i++)
        ones &= a[t.offset + i] == 1.0f;
    tap_ok(ones, "ln_1.weight is 1");
    gpt2_group_tensor(m, 1, 3, &t);
    int zeros = 1;
    for (size_t i = 0; i < t.numel; i++)
        zeros &= a[t.offset + i] == 0.0f;
    tap_ok(zeros, "c_attn.bias is 0");
    gpt2_init_group(m, 2, 7, b);
    gpt2_init_group(m, 1, 7, b);
    tap_ok(memcmp(a, b, n1 * sizeof *a) == 0, "init is bitwise repeatable, in any group order");
    gpt2_init_group(m, 1, 8, b);
    tap_ok(memcmp(a, b, n1 * sizeof *a) != 0, "another seed gives other values");
    gpt2_init_group(m, 0, 7, e);
    gpt2_group_tensor(m, 0, 0, &t);
    stats(e, (size_t)1000 * 128, &mean, &std);
    TAP_IS_CLOSE(std, 0.02, 0.0, 0.02, "wte std is 0.02");
    zeros = 1;
    for (size_t i = (size_t)1000 * 128; i < (size_t)1024 * 128; i++)
        zeros &= e[i] == 0.0f;
    tap_ok(zeros, "padded wte rows 1000..1023 are 0");
    free(a), free(b), free(e);
    gpt2_destroy(m);
}

/* ---- the model on the host backend ---- */

static gpt2_config small_config(void)
{
    gpt2_config c;
    gpt2_config_from_fields(2, 2, 32, 70, 0, 16, &c);
    return c;
}

static void test_loss_and_logits(void)
{
    gpt2_config c = small_config();
    fixture f;
    int B = 2, T = 8, N = B * T;
    if (!tap_ok(fixture_open(&f, &c, B, T, false, 1) == FERRY_OK, "fixture opens"))
        return;
    int32_t tok[16], tgt[16];
    random_batch(tok, tgt, N, c.vocab_size, 5);
    float loss_eval = 0, loss_train = 0;
    TAP_IS_STATUS(gpt2_forward(f.m, f.a, &f.h, f.s, tok, tgt, false), FERRY_OK, "eval forward");
    TAP_IS_STATUS(gpt2_loss(f.a, f.s, &loss_eval), FERRY_OK, "eval loss");
    TAP_IS_CLOSE(loss_eval, log(70.0), 0.15, 0.0,
                 "loss at init is about ln V (small logits; the oracle test checks exactly)");

    /* the classifier's mean loss equals the one computed from gpt2_logits */
    double sum = 0;
    int valid = 0;
    float logits[70];
    for (int i = 0; i < N; i++) {
        TAP_IS_STATUS(gpt2_logits(f.m, f.a, &f.h, f.s, i / T, i % T, logits), FERRY_OK,
                      "logits at (%d, %d)", i / T, i % T);
        if (tgt[i] < 0)
            continue;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < 70; v++)
            mx = logits[v] > mx ? logits[v] : mx;
        for (int v = 0; v < 70; v++)
            s += exp(logits[v] - mx);
        sum += mx + log(s) - logits[tgt[i]];
        valid++;
    }
    TAP_IS_CLOSE(loss_eval, sum / valid, 1e-6, 1e-6,
                 "mean loss over %d valid targets equals log-softmax of gpt2_logits", valid);
    TAP_IS_STATUS(fixture_step(&f, tok, tgt, &loss_train), FERRY_OK, "train step");
    tap_ok(loss_train == loss_eval, "training forward+backward gives the eval loss bitwise "
                                    "(%.9g vs %.9g)", loss_train, loss_eval);

    /* errors */
    int32_t bad[16];
    memcpy(bad, tok, sizeof bad);
    bad[5] = 70;
    TAP_IS_STATUS(gpt2_forward(f.m, f.a, &f.h, f.s, bad, tgt, false), FERRY_ERR_INVALID_ARGUMENT,
                  "token 70 with V = 70 is rejected: %s", ferry_last_error());
    bad[5] = -3;
    TAP_IS_STATUS(gpt2_forward(f.m, f.a, &f.h, f.s, bad, tgt, false), FERRY_ERR_INVALID_ARGUMENT,
                  "token -3 is rejected");
    memcpy(bad, tgt, sizeof bad);
    bad[0] = 71;
    TAP_IS_STATUS(gpt2_forward(f.m, f.a, &f.h, f.s, tok, bad, false), FERRY_ERR_INVALID_ARGUMENT,
                  "target 71 is rejected: %s", ferry_last_error());
    TAP_IS_STATUS(gpt2_backward(f.m, f.a, &f.h, f.s, 1.0f), FERRY_ERR_STATE,
                  "backward without a forward is a state error: %s", ferry_last_error());
    TAP_IS_STATUS(gpt2_forward(f.m, f.a, &f.h, f.s, tok, NULL, false), FERRY_OK,
                  "forward without targets (sampling)");
    TAP_IS_STATUS(gpt2_loss(f.a, f.s, &loss_eval), FERRY_ERR_STATE,
                  "no loss without targets: %s", ferry_last_error());
    TAP_IS_STATUS(gpt2_backward(f.m, f.a, &f.h, f.s, 1.0f), FERRY_ERR_STATE,
                  "no backward without targets");
    TAP_IS_STATUS(gpt2_logits(f.m, f.a, &f.h, f.s, 2, 0, logits), FERRY_ERR_INVALID_ARGUMENT,
                  "logits at batch row 2 of 2 is rejected");
    gpt2_hooks broken = f.h;
    broken.release = NULL;
    TAP_IS_STATUS(gpt2_forward(f.m, f.a, &broken, f.s, tok, tgt, false),
                  FERRY_ERR_INVALID_ARGUMENT, "incomplete hooks are rejected");
    gpt2_activations *a2 = NULL;
    TAP_IS_STATUS(gpt2_activations_create(f.m, f.be, 1, 17, false, &f.alloc, &a2),
                  FERRY_ERR_INVALID_ARGUMENT, "T = 17 > context 16 is rejected: %s",
                  ferry_last_error());
    fixture_close(&f);
}

static void test_recompute_and_padding(void)
{
    gpt2_config c = small_config();
    int B = 2, T = 16, N = B * T;
    int32_t tok[32], tgt[32];
    random_batch(tok, tgt, N, c.vocab_size, 7);
    fixture off, on;
    if (!tap_ok(fixture_open(&off, &c, B, T, false, 3) == FERRY_OK &&
                    fixture_open(&on, &c, B, T, true, 3) == FERRY_OK,
                "fixtures open"))
        return;
    float l_off = 0, l_on = 0;
    TAP_IS_STATUS(fixture_step(&off, tok, tgt, &l_off), FERRY_OK, "step, recompute off");
    TAP_IS_STATUS(fixture_step(&on, tok, tgt, &l_on), FERRY_OK, "step, recompute on");
    size_t n = 0;
    float *g_off = fixture_all(&off, true, &n), *g_on = fixture_all(&on, true, &n);
    tap_ok(l_off == l_on, "recompute: same loss (%.9g, %.9g)", l_off, l_on);
    tap_ok(memcmp(g_off, g_on, n * sizeof *g_off) == 0,
           "recompute: every gradient bitwise the same (%zu values)", n);
    size_t b_off = gpt2_activations_bytes(off.m, backend_act_dtype(off.be), B, T, false);
    size_t b_on = gpt2_activations_bytes(on.m, backend_act_dtype(on.be), B, T, true);
    tap_ok(b_on < b_off, "recompute needs fewer activation bytes (%zu < %zu)", b_on, b_off);

    /* a second micro-batch accumulates: grads double, up to rounding */
    TAP_IS_STATUS(fixture_step(&off, tok, tgt, &l_off), FERRY_OK, "second micro-batch");
    float *g2 = fixture_all(&off, true, &n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs(g2[i] - 2.0 * g_on[i]) / (1e-9 + 1e-5 * fabs(2.0 * g_on[i]));
        worst = r > worst ? r : worst;
    }
    tap_ok(worst <= 1.0, "two micro-batches give twice the gradient (worst %.3g of 1e-5 rel)",
           worst);

    /* padded wte rows hold huge values: losses and gradients do not move */
    size_t n0 = gpt2_group_numel(on.m, 0);
    float *emb = malloc(n0 * sizeof *emb);
    gpt2_resident_get_params(on.r, on.s, 0, emb);
    for (size_t i = (size_t)c.vocab_size * c.n_embd; i < (size_t)c.padded_vocab_size * c.n_embd;
         i++)
        emb[i] = 1e4f;
    gpt2_resident_set_params(on.r, on.s, 0, emb);
    gpt2_resident_zero_grads(on.r, on.s);
    float l_pad = 0;
    TAP_IS_STATUS(fixture_step(&on, tok, tgt, &l_pad), FERRY_OK, "step with huge padded rows");
    float *g_pad = fixture_all(&on, true, &n);
    tap_ok(l_pad == l_on, "padded rows of 1e4 leave the loss bitwise unchanged (%.9g, %.9g)",
           l_pad, l_on);
    tap_ok(memcmp(g_pad, g_on, n * sizeof *g_on) == 0,
           "and every gradient (the padded rows' stay 0)");
    free(emb), free(g_off), free(g_on), free(g2), free(g_pad);
    fixture_close(&off);
    fixture_close(&on);
}

/* ---- hook order ---- */

typedef struct trace {
    gpt2_hooks inner;
    char log[4096];
} trace;

static void trace_add(trace *t, const char *fmt, int a, int b)
{
    size_t len = strlen(t->log);
    snprintf(t->log + len, sizeof t->log - len, fmt, a, b);
}

static ferry_status tr_params(void *ctx, int g, ferry_phase phase, backend_stream *s, const act_t **p)
{
    trace *t = ctx;
    trace_add(t, "P%d.%d ", g, phase);
    return t->inner.acquire_params(t->inner.ctx, g, phase, s, p);
}

static ferry_status tr_grads(void *ctx, int g, backend_stream *s, act_t **p)
{
    trace *t = ctx;
    trace_add(t, "G%d%.0d ", g, 0);
    return t->inner.acquire_grads(t->inner.ctx, g, s, p);
}

static ferry_status tr_release(void *ctx, int g, ferry_phase phase, backend_stream *s)
{
    trace *t = ctx;
    trace_add(t, "R%d.%d ", g, phase);
    return t->inner.release(t->inner.ctx, g, phase, s);
}

static void test_hook_order(void)
{
    gpt2_config c = small_config();
    fixture f;
    if (!tap_ok(fixture_open(&f, &c, 1, 4, true, 5) == FERRY_OK, "fixture opens"))
        return;
    trace t = {.inner = f.h};
    gpt2_hooks h = {&t, tr_params, tr_grads, tr_release};
    int32_t tok[4] = {1, 2, 3, 4}, tgt[4] = {2, 3, 4, 5};
    gpt2_forward(f.m, f.a, &h, f.s, tok, tgt, true);
    const char *fwd = "P0.0 P1.0 R1.0 P2.0 R2.0 P3.0 R3.0 R0.0 ";
    tap_ok(strcmp(t.log, fwd) == 0, "forward hook order: %s", t.log);
    t.log[0] = '\0';
    gpt2_backward(f.m, f.a, &h, f.s, 1.0f);
    const char *bwd = "P0.1 G0 P3.1 G3 R3.1 P2.1 G2 R2.1 P1.1 G1 R1.1 R0.1 ";
    tap_ok(strcmp(t.log, bwd) == 0, "backward hook order: %s", t.log);
    backend_stream_synchronize(f.s);
    fixture_close(&f);
}

/* ---- the allocator sees every byte ---- */

typedef struct budget {
    backend *be;
    size_t used, limit;
    char last[96];
} budget;

static ferry_status budget_alloc(void *ctx, const char *what, size_t bytes, void **out)
{
    budget *b = ctx;
    snprintf(b->last, sizeof b->last, "%s", what);
    if (b->used + bytes > b->limit)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "budget of %zu bytes exhausted by '%s'", b->limit,
                       what);
    b->used += bytes;
    return backend_alloc(b->be, bytes, out);
}

static void budget_free(void *ctx, void *p) { backend_free(((budget *)ctx)->be, p); }

static void test_allocator(void)
{
    gpt2_config c = small_config();
    fixture f;
    if (!tap_ok(fixture_open(&f, &c, 2, 8, false, 5) == FERRY_OK, "fixture opens"))
        return;
    budget b = {f.be, 0, (size_t)1 << 30, ""};
    gpt2_allocator al = {&b, budget_alloc, budget_free};
    gpt2_activations *a = NULL;
    TAP_IS_STATUS(gpt2_activations_create(f.m, f.be, 2, 8, false, &al, &a), FERRY_OK,
                  "activations through a counting allocator");
    TAP_IS_INT(b.used, gpt2_activations_bytes(f.m, backend_act_dtype(f.be), 2, 8, false),
               "gpt2_activations_bytes is what the allocator was asked for");
    gpt2_activations_destroy(a);
    b.used = 0;
    b.limit = 20000;
    TAP_IS_STATUS(gpt2_activations_create(f.m, f.be, 2, 8, false, &al, &a),
                  FERRY_ERR_OUT_OF_MEMORY, "an exhausted budget fails cleanly: %s",
                  ferry_last_error());
    tap_ok(strstr(ferry_last_error(), b.last) != NULL, "the message names the tensor ('%s')",
           b.last);
    fixture_close(&f);
}

int main(void)
{
    const char *env = getenv("FERRY_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 20240602;
    rng = seed;
    tap_diag("seed %llu (set FERRY_TEST_SEED to replay)", (unsigned long long)seed);
    test_presets();
    test_table();
    test_init();
    test_loss_and_logits();
    test_recompute_and_padding();
    test_hook_order();
    test_allocator();
    return tap_done();
}
