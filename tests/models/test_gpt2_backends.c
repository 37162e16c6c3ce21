/* GPT-2 runs unchanged in bf16 and in f16: the same tiny model, seed and
 * batch on the host backend in fp32 and on the backend under test in 16-bit
 * storage with fp32 math — cuda, or the host backend storing the type,
 * which rounds where the CUDA ops do and so runs GPT-2's 16-bit paths in
 * CI. In bf16 the loss must agree within 2e-2 relative and each tensor's
 * gradient within 5e-2 relative norm error (bf16 keeps 8 bits of mantissa:
 * about 4e-3 per rounding). In f16 (11 bits, 8 times finer) the backward
 * starts from the loss times 1024, as a loss scale makes it, so the small
 * gradients stay clear of fp16's subnormals, and the gradients are divided
 * by it before the comparison: the loss within 3e-3, the gradients within
 * 1e-2.
 * Usage: test_gpt2_backends [cuda|host-bf16|cuda-f16|host-f16]. Exit 77 only
 * when the cuda backend does not open for want of a GPU
 * (FERRY_ERR_UNSUPPORTED from backend_open: no driver, no device, a card
 * below sm_70) or, for cuda bf16, the card has no bf16 (sm_70, sm_75); any
 * other failure to set up the cuda fixture on a GPU is a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/models/gpt2_fixture.h"
#include "tests/tap.h"

int main(int argc, char **argv)
{
    bool on_host, f16;
    const char *name = mfix_backends_arg(argc, argv, "test_gpt2_backends", &on_host, &f16);
    const float loss_scale = f16 ? 1024.0f : 1.0f;
    const double tol_loss = f16 ? 3e-3 : 2e-2, tol_grad = f16 ? 1e-2 : 5e-2;
    gpt2_config cfg;
    gpt2_config_from_fields(2, 4, 64, 500, 512, 64, &cfg);
    fixture host, dev;
    ferry_status st = fixture_open_as(&dev, on_host ? FERRY_BACKEND_HOST : FERRY_BACKEND_CUDA,
                                      f16 ? FERRY_DTYPE_F16 : FERRY_DTYPE_BF16, &cfg, 4, 64, false, 11);
    if (!on_host && st == FERRY_ERR_UNSUPPORTED && (!dev.be || !f16)) { /* no GPU here, or no bf16 on it */
        tap_diag("cuda: %s", ferry_last_error());
        fixture_close(&dev);
        tap_plan_skip("no usable CUDA device for this type");
    }
    if (!tap_is_status(st, FERRY_OK, "the %s fixture sets up", name)) {
        fixture_close(&dev);
        return tap_done();
    }
    if (!tap_ok(fixture_open(&host, &cfg, 4, 64, false, 11) == FERRY_OK, "host fixture opens"))
        return tap_done();
    uint64_t rng = 20240604;
    tap_diag("seed %llu", (unsigned long long)rng);
    int32_t tok[256], tgt[256];
    mfix_tokens(tok, tgt, 256, cfg.vocab_size, &rng);
    float lh = 0, ld = 0;
    TAP_IS_STATUS(fixture_step(&host, tok, tgt, &lh), FERRY_OK, "host step");
    TAP_IS_STATUS(fixture_step_scaled(&dev, tok, tgt, &ld, loss_scale), FERRY_OK, "%s step: %s", name,
                  ferry_last_error());
    TAP_IS_CLOSE(ld, lh, 0.0, tol_loss, "%s loss %.6f vs host fp32 %.6f", name, ld, lh);
    tap_ok(ld != lh, "%s is really 16-bit: the losses differ (%.9g vs %.9g)", name, ld, lh);
    size_t n = 0;
    float *gh = fixture_all(&host, true, &n), *gd = fixture_all(&dev, true, &n);
    for (int g = 0, base = 0; g < gpt2_num_groups(host.m); g++) {
        for (int i = 0; i < gpt2_group_tensor_count(host.m, g); i++) {
            gpt2_tensor_info t;
            gpt2_group_tensor(host.m, g, i, &t);
            double rel = mfix_rel_error(gd + base + t.offset, gh + base + t.offset, t.numel, loss_scale, NULL);
            tap_ok(rel <= tol_grad, "grad %-36s %s vs host rel. norm error %.2e <= %.0e", t.name, name, rel,
                   tol_grad);
        }
        base += (int)gpt2_group_numel(host.m, g);
    }
    free(gh), free(gd);
    fixture_close(&dev);
    fixture_close(&host);
    return tap_done();
}
