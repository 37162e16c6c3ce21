/* tests/optim/test_adamw_torch.c: the optimizer step as the engine runs it —
 * gradnorm_sumsq of every group, gradnorm_decide, adamw_run with the clip
 * coefficient — against torch.optim.AdamW with clip_grad_norm_ (Debian's
 * python3-torch through /usr/bin/python3, or the python given as argv[1]).
 * Three parameter groups with their own hyperparameters (one with weight
 * decay off) and gradient types (fp32, bf16, fp16), clipping by global norm,
 * and one step with a NaN gradient that both sides skip. Weights and moments
 * after every step must agree to a relative error of 1e-6 per element. Skips
 * (77) when torch cannot be imported.
 *
 * Input file (little-endian): int32 groups, int32 steps, f64 max_norm; per
 * group: int64 n, f64 lr, beta1, beta2, eps, weight_decay; per group: n f32
 * initial weights; per step, per group: n f32 gradients (exactly
 * representable in the group's gradient type).
 * Output: per step: int32 stepped; per group: n f32 weights, exp_avg, exp_avg_sq. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "optim/adamw.h"
#include "optim/gradnorm.h"
#include "tests/tap.h"

enum { G = 3, STEPS = 6, NAN_STEP = 3 };

static double gauss(uint64_t *rng)
{
    double u = tap_rand_unit(rng) + 1e-300, w = tap_rand_unit(rng);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

static int run_oracle(const char *python, const char *in, const char *out)
{
    const char *root = getenv("FERRY_SOURCE_ROOT");
    char script[4096], cmd[8192];
    snprintf(script, sizeof script, "%s/tests/optim/adamw_oracle.py", root ? root : ".");
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' 2>/dev/null", python);
    if (system(cmd) != 0)
        tap_plan_skip("python with torch not available");
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", python, script, in, out);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* max over elements of |got - want| / |want|, with |want| floored at 1e-3 of
 * the buffer's RMS (a moment that cancels to near zero is compared on the
 * buffer's scale). */
static double rel_err(const float *got, const float *want, size_t n)
{
    double rms = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        rms += (double)want[i] * want[i];
    rms = sqrt(rms / (double)n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]), s = fmax(fabs((double)want[i]), 1e-3 * rms);
        double e = s > 0 ? d / s : d;
        if (!(e <= worst))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

int main(int argc, char **argv)
{
    const char *python = argc > 1 ? argv[1] : "/usr/bin/python3";
    uint64_t seed = 0x70c4u, rng = seed;
    tap_diag("seed %llu, python %s", (unsigned long long)seed, python);
    const size_t n[G] = {5003, 70001, 257};
    const ferry_dtype gt[G] = {FERRY_DTYPE_F32, FERRY_DTYPE_BF16, FERRY_DTYPE_F16};
    const adamw_hparams hp[G] = {{1e-3, 0.9, 0.999, 1e-8, 0.01},
                                 {2e-3, 0.8, 0.99, 1e-6, 0.0}, /* weight decay off */
                                 {5e-4, 0.95, 0.98, 1e-7, 0.1}};
    const double max_norm = 1.0;
    char dir[] = "/tmp/ferry_adamw_torch_XXXXXX";
    if (!mkdtemp(dir))
        tap_plan_skip("cannot make a temp dir");
    char in_path[128], out_path[128];
    snprintf(in_path, sizeof in_path, "%s/in.bin", dir);
    snprintf(out_path, sizeof out_path, "%s/out.bin", dir);

    FILE *f = fopen(in_path, "wb");
    int32_t hdr[2] = {G, STEPS};
    fwrite(hdr, 4, 2, f);
    fwrite(&max_norm, 8, 1, f);
    float *p[G], *m[G], *v[G], *g32[G][STEPS];
    void *g[G];
    for (int i = 0; i < G; i++) {
        int64_t ni = (int64_t)n[i];
        fwrite(&ni, 8, 1, f);
        fwrite(&hp[i], sizeof(double), 5, f);
    }
    for (int i = 0; i < G; i++) {
        p[i] = malloc(n[i] * 4);
        m[i] = calloc(n[i], 4);
        v[i] = calloc(n[i], 4);
        g[i] = malloc(n[i] * 4);
        for (size_t k = 0; k < n[i]; k++)
            p[i][k] = (float)gauss(&rng);
        fwrite(p[i], 4, n[i], f);
    }
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < G; i++) {
            g32[i][s] = malloc(n[i] * 4);
            for (size_t k = 0; k < n[i]; k++) {
                float x = (float)(0.05 * gauss(&rng));
                if (gt[i] == FERRY_DTYPE_BF16)
                    x = dtype_bf16_to_f32(dtype_f32_to_bf16(x));
                else if (gt[i] == FERRY_DTYPE_F16)
                    x = dtype_f16_to_f32(dtype_f32_to_f16(x));
                g32[i][s][k] = x;
            }
            if (s == NAN_STEP && i == 2)
                g32[i][s][7] = NAN;
            fwrite(g32[i][s], 4, n[i], f);
        }
    fclose(f);
    int rc = run_oracle(python, in_path, out_path);
    if (rc == 77)
        tap_plan_skip("torch not importable by the oracle");
    TAP_IS_INT(rc, 0, "oracle script ran");
    f = fopen(out_path, "rb");
    if (!f)
        return tap_done();

    tp_pool *pool = NULL;
    tp_pool_create(2, -1, &pool);
    int64_t taken = 0;
    float *want = malloc(70001 * 4 * 3);
    for (int s = 0; s < STEPS; s++) {
        double sums[G];
        bool bad[G];
        for (int i = 0; i < G; i++) {
            if (gt[i] == FERRY_DTYPE_F32)
                memcpy(g[i], g32[i][s], n[i] * 4);
            else
                half_convert(g[i], gt[i], g32[i][s], FERRY_DTYPE_F32, n[i]);
            gradnorm_sumsq(pool, g[i], gt[i], n[i], &sums[i], &bad[i]);
        }
        gradnorm_decision r = gradnorm_decide(sums, bad, G, (float)max_norm);
        ferry_status st = FERRY_OK;
        for (int i = 0; i < G && !r.skipped && st == FERRY_OK; i++) {
            adamw_job job = {p[i], m[i], v[i], g[i], gt[i], n[i], taken + 1, hp[i], r.clip_coef, NULL, FERRY_DTYPE_BF16, .moments = FERRY_MOMENTS_F32};
            st = adamw_run(pool, &job);
        }
        TAP_IS_STATUS(st, FERRY_OK, "step %d", s);
        int32_t stepped = -1;
        if (fread(&stepped, 4, 1, f) != 1)
            break;
        TAP_IS_INT(!r.skipped, stepped, "step %d: skipped by us exactly when torch skipped it", s);
        if (!r.skipped)
            taken++;
        else
            TAP_IS_INT(r.bad_group, 2, "step %d: the NaN is reported in group 2", s);
        for (int i = 0; i < G; i++) {
            if (fread(want, 4, n[i] * 3, f) != n[i] * 3)
                break;
            double ep = rel_err(p[i], want, n[i]), em = rel_err(m[i], want + n[i], n[i]),
                   ev = rel_err(v[i], want + 2 * n[i], n[i]);
            TAP_IS_INT(ep <= 1e-6 && em <= 1e-6 && ev <= 1e-6, 1,
                       "step %d group %d (%s grads, wd %g): weights, exp_avg, exp_avg_sq within 1e-6 of torch", s,
                       i, dtype_name(gt[i]), hp[i].weight_decay);
            tap_diag("  max relative error: p %.3g, m %.3g, v %.3g (clip coef %.6g, norm %.6g)", ep, em, ev,
                     (double)r.clip_coef, r.grad_norm);
        }
    }
    fclose(f);
    tp_pool_destroy(pool);
    remove(in_path);
    remove(out_path);
    rmdir(dir);
    for (int i = 0; i < G; i++) {
        free(p[i]); free(m[i]); free(v[i]); free(g[i]);
        for (int s = 0; s < STEPS; s++)
            free(g32[i][s]);
    }
    free(want);
    return tap_done();
}
