/* The split update on the cuda backend (the product's AdamW kernel and cuda
 * backend, on the simulated device):
 * - the op: ops_adamw over fp32 master weights and moments, from fp32 and
 *   from bf16 gradients, gives bitwise the CPU optimizer's (optim/adamw_run)
 *   master weights, moments and bf16 copy, three steps in a row, with
 *   weight decay and a clip coefficient;
 * - the engine: the split test model (tests/engine/split_fixture.h) in bf16
 *   with 2 groups and with auto on the device gives bitwise the master
 *   weights and checkpoint of the same run with every update on the CPU
 *   (both on cuda: the same element math, the same gradients), and agrees
 *   with the host backend's all-CPU run within bf16's tolerance (the
 *   backends round the gradients' products alike but not the weights read
 *   back: 1e-2 relative norm of the change of each group). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/error.h"
#include "engine/split_fixture.h"
#include "backend/backend.h"
#include "backend/ops/ops.h"
#include "optim/adamw.h"
#include "tap.h"

#define TOL_UPDATE 1e-2

static backend *be;
static backend_stream *q;

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    if (backend_alloc(be, bytes, &d) != FERRY_OK ||
        backend_memcpy_async(q, d, host, bytes, BACKEND_COPY_H2D) != FERRY_OK || backend_stream_synchronize(q) != FERRY_OK)
        return NULL;
    return d;
}

static int same_back(const void *dev, const void *host, size_t bytes)
{
    void *got = malloc(bytes);
    int same = got && backend_memcpy_async(q, got, dev, bytes, BACKEND_COPY_D2H) == FERRY_OK &&
               backend_stream_synchronize(q) == FERRY_OK && memcmp(got, host, bytes) == 0;
    free(got);
    return same;
}

/* ops_adamw on the device against the CPU optimizer, bitwise. */
static void test_op(ferry_dtype grad_dtype)
{
    const size_t n = 70003;
    uint64_t rng = 31337;
    tap_diag("op: seed %llu, n %zu, gradients %s", (unsigned long long)rng, n, dtype_name(grad_dtype));
    float *p = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    void *g = malloc(n * 4);
    uint16_t *copy = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(tap_rand_unit(&rng) - 0.5);
    float *dp = dev_copy(p, n * 4), *dm = dev_copy(m, n * 4), *dv = dev_copy(v, n * 4);
    void *dg = NULL, *dout = NULL;
    backend_alloc(be, n * 4, &dg);
    backend_alloc(be, n * 2, &dout);
    const adamw_hparams hp = {3e-3, 0.9, 0.95, 1e-8, 0.1};
    int ok = dp && dm && dv && dg && dout;
    for (int64_t step = 1; step <= 3 && ok; step++) {
        for (size_t i = 0; i < n; i++)
            dtype_store_f32(g, grad_dtype, i, (float)(tap_rand_unit(&rng) - 0.5) * 3.0f);
        float clip = 0.37f;
        adamw_job job = {p, m, v, g, grad_dtype, n, step, hp, clip, copy, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
        ok = adamw_run(NULL, &job) == FERRY_OK &&
             backend_memcpy_async(q, dg, g, n * dtype_size(grad_dtype), BACKEND_COPY_H2D) == FERRY_OK &&
             ops_adamw(q, dp, dm, dv, dg, grad_dtype, dout, n, &hp, step, clip) == FERRY_OK &&
             backend_stream_synchronize(q) == FERRY_OK;
    }
    tap_ok(ok, "op: 3 steps ran (%s)", ok ? "" : ferry_last_error());
    tap_ok(ok && same_back(dp, p, n * 4), "op, %s gradients: master weights bitwise the CPU optimizer's",
           dtype_name(grad_dtype));
    tap_ok(ok && same_back(dm, m, n * 4) && same_back(dv, v, n * 4),
           "op, %s gradients: both moments bitwise the CPU optimizer's", dtype_name(grad_dtype));
    tap_ok(ok && same_back(dout, copy, n * 2), "op, %s gradients: the bf16 weights bitwise the CPU's copy",
           dtype_name(grad_dtype));
    backend_free(be, dp), backend_free(be, dm), backend_free(be, dv), backend_free(be, dg), backend_free(be, dout);
    free(p), free(m), free(v), free(g), free(copy);
}

static size_t total(void)
{
    size_t n = 0;
    for (int g = 0; g < GROUPS; g++)
        n += numel[g];
    return n;
}

/* Trains the split model; its master weights after (NULL on failure) and,
 * when `path`, its checkpoint. */
static float *run(ferry_backend_kind kind, int split, const char *path, int *chose)
{
    ferry_engine_config cfg = config_on(kind, FERRY_DTYPE_BF16, split);
    ferry_engine *e = make_cfg(&cfg);
    float *w = malloc(total() * sizeof(float)), *at = w;
    ferry_status st = e && w ? train(e, 0, STEPS) : FERRY_ERR_STATE;
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++, at += numel[g - 1])
        st = ferry_engine_get_weights(e, g, at);
    if (st == FERRY_OK && path)
        st = ferry_engine_save(e, path, NULL, 0);
    *chose = ferry_engine_device_update_groups(e);
    if (st == FERRY_OK && ferry_engine_backend(e) != kind)
        st = err_set(FERRY_ERR_STATE, "the engine opened backend %d, not %d", (int)ferry_engine_backend(e), (int)kind);
    if (st != FERRY_OK) {
        tap_diag("run on %s, split %d: %s", kind == FERRY_BACKEND_CUDA ? "cuda" : "host", split, ferry_last_error());
        free(w);
        w = NULL;
    }
    ferry_engine_destroy(e);
    return w;
}

/* Each group's change from `init` in `w` against `ref`'s, relative norm. */
static double worst_update(const float *init, const float *w, const float *ref)
{
    double worst = 0;
    size_t at = 0;
    for (int g = 0; g < GROUPS; g++) {
        double d = 0, r = 0;
        for (size_t i = at; i < at + numel[g]; i++) {
            double a = (double)w[i] - init[i], b = (double)ref[i] - init[i];
            d += (a - b) * (a - b);
            r += b * b;
        }
        worst = fmax(worst, sqrt(d / r));
        at += numel[g];
    }
    return worst;
}

static void test_engine(const char *dir)
{
    char p_cpu[300], p_split[300];
    snprintf(p_cpu, sizeof p_cpu, "%s/cpu.ckpt", dir);
    snprintf(p_split, sizeof p_split, "%s/split.ckpt", dir);
    int chose = 0;
    float *host = run(FERRY_BACKEND_HOST, 0, NULL, &chose);
    float *cpu = run(FERRY_BACKEND_CUDA, 0, p_cpu, &chose);
    float *split = run(FERRY_BACKEND_CUDA, 2, p_split, &chose);
    tap_ok(split && chose == 2, "cuda: 2 groups updated on the device (%d)", chose);
    float *aut = run(FERRY_BACKEND_CUDA, -1, NULL, &chose);
    tap_diag("cuda: auto chose %d groups", chose);
    tap_ok(host && cpu && split && aut, "every run trained %d steps", STEPS);
    if (!host || !cpu || !split || !aut)
        goto done;
    tap_ok(memcmp(cpu, split, total() * sizeof(float)) == 0,
           "cuda: the split's master weights are bitwise the all-CPU update's");
    tap_ok(efix_same_file(p_cpu, p_split), "cuda: and so is its checkpoint (master weights, moments, weights), byte for byte");
    tap_ok(memcmp(cpu, aut, total() * sizeof(float)) == 0, "cuda: auto's master weights too");
    /* The initial weights: the fixture's generator. */
    float *init = malloc(total() * sizeof(float)), *at = init;
    uint64_t rng = 7;
    for (int g = 0; g < GROUPS; g++)
        for (size_t i = 0; i < numel[g]; i++)
            *at++ = (float)(tap_rand_unit(&rng) - 0.5);
    double d = worst_update(init, split, host);
    tap_ok(d <= TOL_UPDATE, "cuda split against the host backend's all-CPU run: each group's update within %g "
                            "relative norm (worst %.3g)", TOL_UPDATE, d);
    free(init);
done:
    free(host), free(cpu), free(split), free(aut);
    unlink(p_cpu);
    unlink(p_split);
}

int main(void)
{
    ferry_status rc = backend_open(FERRY_BACKEND_CUDA, &be);
    if (rc == FERRY_ERR_UNSUPPORTED)
        tap_plan_skip("no (simulated) GPU");
    if (rc != FERRY_OK || backend_set_act_dtype(be, FERRY_DTYPE_BF16) != FERRY_OK ||
        backend_stream_create(be, "split", &q) != FERRY_OK || ops_init(be, NULL, 0) != FERRY_OK) {
        printf("Bail out! cuda backend: %s\n", ferry_last_error());
        return 1;
    }
    test_op(FERRY_DTYPE_F32);
    test_op(FERRY_DTYPE_BF16);
    ops_shutdown(be);
    backend_stream_destroy(q);
    backend_close(be);
    char dir[] = "/tmp/ferry-split-sim-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("Bail out! cannot make a temporary directory\n");
        return 1;
    }
    test_engine(dir);
    rmdir(dir);
    return tap_done();
}
