/* GPT-2 runs unchanged in bf16: the same tiny model, seed and batch on the
 * host backend in fp32 and on the backend under test in bf16 storage with
 * fp32 math — cuda, or (argument "host-bf16") the host backend storing bf16,
 * which rounds where the CUDA ops do and so runs GPT-2's bf16 paths in CI.
 * The loss must agree within 2e-2 relative and each tensor's gradient within
 * 5e-2 relative norm error (bf16 keeps 8 bits of mantissa: about 4e-3 per
 * rounding).
 * Usage: test_gpt2_backends [cuda|host-bf16]. Exit 77 only when the cuda
 * backend does not open for want of a GPU (FERRY_ERR_UNSUPPORTED from
 * backend_open: no driver, no device, a card below sm_80); any other failure
 * to set up the cuda fixture on a GPU is a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/models/gpt2_fixture.h"
#include "tests/tap.h"

int main(int argc, char **argv)
{
    bool host_bf16 = argc > 1 && strcmp(argv[1], "host-bf16") == 0;
    const char *name = host_bf16 ? "host-bf16" : "cuda";
    gpt2_config cfg;
    gpt2_config_from_fields(2, 4, 64, 500, 512, 64, &cfg);
    fixture host, dev;
    ferry_status st = fixture_open_as(&dev, host_bf16 ? FERRY_BACKEND_HOST : FERRY_BACKEND_CUDA, FERRY_DTYPE_BF16,
                                      &cfg, 4, 64, false, 11);
    if (!host_bf16 && st == FERRY_ERR_UNSUPPORTED && !dev.be) { /* backend_open: no GPU here */
        tap_diag("cuda: %s", ferry_last_error());
        tap_plan_skip("no usable CUDA device");
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
    for (int i = 0; i < 256; i++) {
        tok[i] = (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
        tgt[i] = i % 9 == 8 ? -1 : (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
    }
    float lh = 0, ld = 0;
    TAP_IS_STATUS(fixture_step(&host, tok, tgt, &lh), FERRY_OK, "host step");
    TAP_IS_STATUS(fixture_step(&dev, tok, tgt, &ld), FERRY_OK, "%s step: %s", name, ferry_last_error());
    TAP_IS_CLOSE(ld, lh, 0.0, 2e-2, "%s loss %.6f vs host fp32 %.6f", name, ld, lh);
    tap_ok(ld != lh, "%s is really bf16: the losses differ (%.9g vs %.9g)", name, ld, lh);
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
            tap_ok(rel <= 5e-2, "grad %-36s %s vs host rel. norm error %.2e <= 5e-2", t.name, name,
                   rel);
        }
        base += (int)gpt2_group_numel(host.m, g);
    }
    free(gh), free(gd);
    fixture_close(&dev);
    fixture_close(&host);
    return tap_done();
}
