/* A masked batch through a model: a batch of packed instruction examples
 * from the loader (train/dataloader.c over a masked shard) trains a tiny
 * Llama on the host backend in fp32, and
 * - its loss is the mean of the per-token losses over the unmasked targets
 *   only, as PyTorch's cross_entropy(ignore_index=-1) computes it, each
 *   per-token loss computed here in double from the logits of a run with
 *   every target kept;
 * - its gradient is the mean of the gradients of one kept target at a time;
 * - masked positions cost no gradient: the inputs after each row's last
 *   target changed, the loss and every gradient are the same to the bit,
 *   and a batch with every target masked has loss 0 and zero gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferry.h"
#include "tests/tap.h"
#include "tests/test_files.h"
#include "tests/models/llama_fixture.h"
#include "train/dataloader.h"
#include "train/token_shard.h"

enum { B = 2, T = 12, V = 300 };
static const uint64_t SEED = 2468;

static llama_config tiny(void)
{
    llama_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.n_layer = 2;
    c.n_embd = 32;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 8;
    c.intermediate_size = 48;
    c.vocab_size = V;
    c.padded_vocab_size = 384;
    c.max_seq_len = 32;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.initializer_range = 0.2f; /* large enough that the per-token losses differ */
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

/* A masked shard of five examples (prompt tokens, then answer tokens) and
 * its first packed batch of B x T. */
static ferry_status packed_batch(const char *dir, int32_t *in, int32_t *tg)
{
    uint32_t tok[64], starts[5];
    uint8_t flag[64];
    static const int len[5] = {5, 4, 6, 3, 7}, answer[5] = {2, 1, 3, 2, 3};
    size_t n = 0;
    uint64_t rs = SEED;
    for (int e = 0; e < 5; e++) {
        starts[e] = (uint32_t)n;
        for (int i = 0; i < len[e]; i++, n++) {
            tok[n] = (uint32_t)(tap_rand_u64(&rs) % V);
            flag[n] = i >= len[e] - answer[e];
        }
    }
    char path[512];
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    tok_shard_examples ex = {tok, flag, n, starts, 5};
    ferry_status st = tok_shard_write_masked(path, TOK_SHARD_MASKED16, &ex);
    const char *paths[1] = {path};
    tok_loader_config c = {paths, 1, B, T, V, 0, 0, 0, TOK_TOO_LONG_REFUSE};
    tok_loader *l = NULL;
    if (st == FERRY_OK) st = tok_loader_open(&c, &l);
    if (st == FERRY_OK) st = tok_loader_next(l, in, tg);
    tok_loader_close(l);
    return st;
}

static ferry_status run(llama_fixture *f, const int32_t *in, const int32_t *tg, float *loss, float **grads)
{
    ferry_status st = model_resident_zero_grads(f->r, f->s);
    if (st == FERRY_OK) st = llama_fixture_step(f, in, tg, 1.0f, loss);
    *grads = st == FERRY_OK ? llama_fixture_all(f, true) : NULL;
    return st == FERRY_OK && !*grads ? FERRY_ERR_OUT_OF_MEMORY : st;
}

/* -log softmax(logits)[y] in double. */
static double token_loss(const float *logits, int y)
{
    double m = logits[0], s = 0;
    for (int v = 1; v < V; v++)
        m = logits[v] > m ? logits[v] : m;
    for (int v = 0; v < V; v++)
        s += exp((double)logits[v] - m);
    return m + log(s) - (double)logits[y];
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs((double)a[i]) > m ? fabs((double)a[i]) : m;
    return m;
}

int main(void)
{
    char dir[] = "/tmp/ferry_mask_XXXXXX";
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary directory");
    tap_diag("seed %llu, working in %s", (unsigned long long)SEED, dir);
    int32_t in[B * T], tg[B * T], full[B * T];
    if (!tap_is_status(packed_batch(dir, in, tg), FERRY_OK, "a packed batch of masked examples from the loader"))
        return tap_done();
    int kept = 0, masked = 0;
    uint64_t rs = SEED ^ 99;
    for (int i = 0; i < B * T; i++) {
        kept += tg[i] >= 0;
        full[i] = tg[i] >= 0 ? tg[i] : (int)(tap_rand_u64(&rs) % V); /* every position a target */
        masked += tg[i] < 0;
    }
    tap_ok(kept > 3 && masked > 3, "the batch has kept (%d) and masked (%d) targets", kept, masked);
    llama_config cfg = tiny();
    llama_fixture f;
    if (!tap_is_status(llama_fixture_open(&f, FERRY_BACKEND_HOST, FERRY_DTYPE_F32, &cfg, B, T, false, SEED), FERRY_OK,
                       "a tiny Llama on the host backend"))
        return tap_done();

    /* every target kept: the per-token losses from the logits */
    float loss_full = 0, *g_full = NULL, logits[V];
    double per[B * T], sum_all = 0, sum_kept = 0;
    TAP_IS_STATUS(run(&f, in, full, &loss_full, &g_full), FERRY_OK, "the run with every target");
    ferry_status st = llama_forward(f.m, f.a, &f.h, f.s, in, full, false);
    for (int i = 0; i < B * T && st == FERRY_OK; i++) {
        if ((st = llama_logits(f.m, f.a, &f.h, f.s, i / T, i % T, logits)) != FERRY_OK)
            break;
        per[i] = token_loss(logits, full[i]);
        sum_all += per[i];
        sum_kept += tg[i] >= 0 ? per[i] : 0;
    }
    TAP_IS_STATUS(st, FERRY_OK, "the logits of every position, from a forward with every target");
    TAP_IS_CLOSE(loss_full, sum_all / (B * T), 1e-6, 1e-5, "every target: the loss is the mean of the per-token losses");

    /* masked */
    float loss_m = 0, *g_m = NULL;
    TAP_IS_STATUS(run(&f, in, tg, &loss_m, &g_m), FERRY_OK, "the masked run");
    TAP_IS_CLOSE(loss_m, sum_kept / kept, 1e-6, 1e-5, "masked: the loss is the mean over the %d kept targets only",
                 kept);
    tap_ok(fabs(loss_m - sum_all / (B * T)) > 1e-3, "masked: and not the mean over all (%.6f vs %.6f)", (double)loss_m,
           sum_all / (B * T));

    /* the gradient: the mean of one kept target's at a time */
    size_t n = f.total;
    double *sum = calloc(n, sizeof *sum);
    int32_t one[B * T];
    for (int k = 0; k < B * T && sum; k++) {
        if (tg[k] < 0)
            continue;
        for (int i = 0; i < B * T; i++)
            one[i] = i == k ? tg[k] : -1;
        float l1 = 0, *g1 = NULL;
        if (run(&f, in, one, &l1, &g1) != FERRY_OK)
            break;
        for (size_t i = 0; i < n; i++)
            sum[i] += g1[i];
        free(g1);
    }
    double scale = g_m ? max_abs(g_m, n) : 0, worst = 0;
    for (size_t i = 0; sum && g_m && i < n; i++)
        worst = fmax(worst, fabs((double)g_m[i] - sum[i] / kept));
    tap_ok(g_m && scale > 0 && worst <= 1e-5 * scale, "masked: the gradient is the mean of the kept targets' own "
           "(worst %.3g of max |g| %.3g)", worst, scale);
    double diff_full = 0;
    for (size_t i = 0; g_full && g_m && i < n; i++)
        diff_full = fmax(diff_full, fabs((double)g_full[i] - g_m[i]));
    tap_ok(diff_full > 1e-3 * scale, "masked: the gradient differs from every target's (by %.3g)", diff_full);

    /* inputs after each row's last kept target changed: the same bits */
    int32_t in2[B * T];
    memcpy(in2, in, sizeof in2);
    int changed = 0;
    for (int b = 0; b < B; b++) {
        int last = -1;
        for (int t = 0; t < T; t++)
            last = tg[b * T + t] >= 0 ? t : last;
        for (int t = last + 1; t < T; t++, changed++)
            in2[b * T + t] = (in[b * T + t] + 17) % V;
    }
    float loss_2 = 0, *g_2 = NULL;
    TAP_IS_STATUS(run(&f, in2, tg, &loss_2, &g_2), FERRY_OK, "the masked run with %d inputs after the targets changed",
                  changed);
    int same = changed > 0 && g_2 && g_m && loss_2 == loss_m;
    for (size_t i = 0; same && i < n; i++)
        same = g_2[i] == g_m[i];
    tap_ok(same, "masked positions cost no gradient: loss and every gradient the same to the bit");

    /* every target masked */
    int32_t none[B * T];
    for (int i = 0; i < B * T; i++)
        none[i] = -1;
    float loss_0 = 1, *g_0 = NULL;
    TAP_IS_STATUS(run(&f, in, none, &loss_0, &g_0), FERRY_OK, "the run with every target masked");
    TAP_IS_CLOSE(loss_0, 0, 0, 0, "every target masked: loss 0");
    TAP_IS_CLOSE(g_0 ? max_abs(g_0, n) : -1, 0, 0, 0, "every target masked: every gradient 0");

    free(sum);
    free(g_full);
    free(g_m);
    free(g_2);
    free(g_0);
    llama_fixture_close(&f);
    test_dir_remove(dir);
    return tap_done();
}
