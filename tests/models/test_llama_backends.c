/* The Llama family runs unchanged in bf16 and in f16: the same small
 * models (Llama 3's grouped-query heads and untied head; Qwen2's biases and
 * tied head; one head of 128), seed and batch on the host backend in fp32
 * and on the backend under test in 16-bit storage with fp32 math — cuda
 * (the simulated device in CI), or the host backend storing the type,
 * which rounds where the CUDA ops do. The tolerances are GPT-2's
 * (tests/models/test_gpt2_backends.c says why): bf16 loss within 2e-2 and
 * each tensor's gradient within 5e-2 relative norm error; f16 under a loss
 * scale of 1024, 3e-3 and 1e-2.
 * Usage: test_llama_backends [cuda|host-bf16|cuda-f16|host-f16]. Exit 77
 * only when the cuda backend does not open for want of a GPU or, for cuda
 * bf16, the card has no bf16. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/models/llama_fixture.h"
#include "tests/tap.h"

enum { B = 2, T = 40 };

static llama_config layout(int which)
{
    llama_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "%s", which == 1 ? "qwen2" : "llama");
    c.n_layer = 2;
    c.n_embd = which == 2 ? 128 : 64;
    c.n_head = which == 2 ? 2 : 4;
    c.n_kv_head = which == 0 ? 2 : which == 1 ? 4 : 1;
    c.head_dim = which == 2 ? 128 : 16;
    c.intermediate_size = 176;
    c.vocab_size = 500;
    c.padded_vocab_size = 512;
    c.max_seq_len = 64;
    c.rms_norm_eps = 1e-5f;
    c.rope_theta = which == 1 ? 1e6f : 500000.0f;
    c.qkv_bias = which == 1;
    c.tied_embeddings = which == 1;
    c.initializer_range = 0.05f;
    c.bos_token_id = c.eos_token_id = -1;
    if (which == 0)
        c.rope_scaling = (llama_rope_scaling){LLAMA_ROPE_LLAMA3, 8.0f, 1.0f, 4.0f, 64};
    return c;
}

static const char *const names[] = {"llama3 (GQA, untied)", "qwen2 (biases, tied)", "head 128 (MQA)"};

static void compare(const char *name, int which, bool on_host, bool f16)
{
    const float loss_scale = f16 ? 1024.0f : 1.0f;
    const double tol_loss = f16 ? 3e-3 : 2e-2, tol_grad = f16 ? 1e-2 : 5e-2;
    llama_config cfg = layout(which);
    llama_fixture host, dev;
    ferry_status st = llama_fixture_open(&dev, on_host ? FERRY_BACKEND_HOST : FERRY_BACKEND_CUDA,
                                         f16 ? FERRY_DTYPE_F16 : FERRY_DTYPE_BF16, &cfg, B, T, false, 11);
    if (!on_host && st == FERRY_ERR_UNSUPPORTED && (!dev.be || !f16)) { /* no GPU here, or no bf16 on it */
        tap_diag("cuda: %s", ferry_last_error());
        llama_fixture_close(&dev);
        tap_plan_skip("no usable CUDA device for this type");
    }
    if (!tap_is_status(st, FERRY_OK, "%s: the %s fixture sets up", names[which], name)) {
        llama_fixture_close(&dev);
        return;
    }
    if (!tap_ok(llama_fixture_open(&host, FERRY_BACKEND_HOST, FERRY_DTYPE_AUTO, &cfg, B, T, false, 11) == FERRY_OK,
                "%s: host fixture opens", names[which])) {
        llama_fixture_close(&dev);
        return;
    }
    uint64_t rng = 20261206 + (uint64_t)which;
    tap_diag("%s: seed %llu", names[which], (unsigned long long)rng);
    int32_t tok[B * T], tgt[B * T];
    mfix_tokens(tok, tgt, B * T, cfg.vocab_size, &rng);
    float lh = 0, ld = 0;
    TAP_IS_STATUS(llama_fixture_step(&host, tok, tgt, 1.0f, &lh), FERRY_OK, "host step");
    TAP_IS_STATUS(llama_fixture_step(&dev, tok, tgt, loss_scale, &ld), FERRY_OK, "%s step: %s", name,
                  ferry_last_error());
    TAP_IS_CLOSE(ld, lh, 0.0, tol_loss, "%s: %s loss %.6f vs host fp32 %.6f", names[which], name, ld, lh);
    tap_ok(ld != lh, "%s: %s is really 16-bit: the losses differ (%.9g vs %.9g)", names[which], name, ld, lh);
    float *gh = llama_fixture_all(&host, true), *gd = llama_fixture_all(&dev, true);
    for (int g = 0, base = 0; gh && gd && g < llama_num_groups(host.m); g++) {
        for (int i = 0; i < llama_group_tensor_count(host.m, g); i++) {
            llama_tensor_info t;
            llama_group_tensor(host.m, g, i, &t);
            double r2 = 0;
            double rel = mfix_rel_error(gd + base + t.offset, gh + base + t.offset, t.numel, loss_scale, &r2);
            tap_ok(rel <= tol_grad && r2 > 0, "grad %-44s %s vs host rel. norm error %.2e <= %.0e", t.name, name,
                   rel, tol_grad);
        }
        base += (int)llama_group_numel(host.m, g);
    }
    tap_ok(gh && gd, "%s: gradients read back", names[which]);
    free(gh), free(gd);
    llama_fixture_close(&dev);
    llama_fixture_close(&host);
}

int main(int argc, char **argv)
{
    bool on_host, f16;
    const char *name = mfix_backends_arg(argc, argv, "test_llama_backends", &on_host, &f16);
    for (int which = 0; which < 3; which++)
        compare(name, which, on_host, f16);
    return tap_done();
}
