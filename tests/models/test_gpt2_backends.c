/* GPT-2 runs unchanged on the cuda backend: the same tiny model, seed and
 * batch on host (fp32) and cuda (bf16 storage, fp32 math); the loss must
 * agree within 2e-2 relative and each tensor's gradient within 5e-2 relative
 * norm error (bf16 keeps 8 bits of mantissa: about 4e-3 per rounding).
 * Usage: test_gpt2_backends. Exit 77 only when the cuda backend does not
 * open for want of a GPU (FERRY_ERR_UNSUPPORTED from backend_open: no
 * driver, no device, a card below sm_80); any other failure to set up the
 * cuda fixture on a GPU is a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "tests/models/gpt2_fixture.h"
#include "tests/tap.h"

int main(void)
{
    gpt2_config cfg;
    gpt2_config_from_fields(2, 4, 64, 500, 512, 64, &cfg);
    fixture host, dev;
    ferry_status st = fixture_open_on(&dev, FERRY_BACKEND_CUDA, &cfg, 4, 64, false, 11);
    if (st == FERRY_ERR_UNSUPPORTED && !dev.be) { /* backend_open: no GPU here */
        tap_diag("cuda: %s", ferry_last_error());
        tap_plan_skip("no usable CUDA device");
    }
    if (!tap_is_status(st, FERRY_OK, "the cuda fixture sets up on the GPU")) {
        fixture_close(&dev);
        return tap_done();
    }
    if (!tap_ok(fixture_open(&host, &cfg, 4, 64, false, 11) == FERRY_OK, "host fixture opens"))
        return tap_done();
    uint64_t rng = 20240604;
    tap_diag("seed %llu", (unsigned long long)rng);
    int32_t tok[256], tgt[256];
    for (int i = 0; i < 256; i++) {
        tok[i] = (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
        tgt[i] = i % 9 == 8 ? -1 : (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
    }
    float lh = 0, ld = 0;
    TAP_IS_STATUS(fixture_step(&host, tok, tgt, &lh), FERRY_OK, "host step");
    TAP_IS_STATUS(fixture_step(&dev, tok, tgt, &ld), FERRY_OK, "cuda step: %s", ferry_last_error());
    TAP_IS_CLOSE(ld, lh, 0.0, 2e-2, "cuda loss %.6f vs host %.6f", ld, lh);
    size_t n = 0;
    float *gh = fixture_all(&host, true, &n), *gd = fixture_all(&dev, true, &n);
    for (int g = 0, base = 0; g < gpt2_num_groups(host.m); g++) {
        for (int i = 0; i < gpt2_group_tensor_count(host.m, g); i++) {
            gpt2_tensor_info t;
            gpt2_group_tensor(host.m, g, i, &t);
            double d2 = 0, r2 = 0;
            for (size_t e = 0; e < t.numel; e++) {
                double a = gd[base + t.offset + e], b = gh[base + t.offset + e];
                d2 += (a - b) * (a - b);
                r2 += b * b;
            }
            double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
            tap_ok(rel <= 5e-2, "grad %-36s cuda vs host rel. norm error %.2e <= 5e-2", t.name,
                   rel);
        }
        base += (int)gpt2_group_numel(host.m, g);
    }
    free(gh), free(gd);
    fixture_close(&dev);
    fixture_close(&host);
    return tap_done();
}
