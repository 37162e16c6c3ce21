/* GPT-2 on the host backend against PyTorch (tests/models/gpt2_oracle.py,
 * float64): a tiny model (2 layers, 4 heads, 64 wide, context 64, vocab 500
 * padded to 512) from our seeded init, on fixed random tokens with some
 * ignored targets.
 * - step 0: the loss, and every parameter's gradient: the relative error of
 *   each tensor (||ours - torch|| / ||torch||) must be <= 1e-5; the largest
 *   elementwise error is printed;
 * - 10 steps of AdamW (torch.optim.AdamW there; here a double-precision
 *   AdamW written below, same formula) on the same batch: each step's loss
 *   within 1e-5 relative.
 * Usage: test_gpt2_oracle PYTHON SCRIPT. Exit 77 (skip) when PYTHON is missing
 * or cannot import torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "tests/models/gpt2_fixture.h"
#include "tests/models/oracle_files.h"
#include "tests/tap.h"

#define STEPS 10
#define B_ 4
#define T_ 64

static const double LR = 3e-3, BETA1 = 0.9, BETA2 = 0.95, EPS = 1e-8, WD = 0.1;


static int write_input(const char *path, fixture *fx, float **groups, const int32_t *tok,
                       const int32_t *tgt)
{
    const gpt2_config *c = gpt2_get_config(fx->m);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    int G = gpt2_num_groups(fx->m), ntensors = 0;
    for (int g = 0; g < G; g++)
        ntensors += gpt2_group_tensor_count(fx->m, g);
    oracle_put(f, "FERRYGPT", 8);
    int32_t hdr[11] = {1, c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->padded_vocab_size,
                       c->max_seq_len, B_, T_, STEPS, ntensors};
    oracle_put(f, hdr, sizeof hdr);
    const double opt[5] = {LR, BETA1, BETA2, EPS, WD};
    oracle_put_run(f, opt, tok, tgt, STEPS, B_ * T_);
    for (int g = 0; g < G; g++)
        for (int i = 0; i < gpt2_group_tensor_count(fx->m, g); i++) {
            gpt2_tensor_info t;
            gpt2_group_tensor(fx->m, g, i, &t);
            oracle_put_tensor(f, t.name, t.ndim, t.shape, -1, groups[g] + t.offset, t.numel);
        }
    return fclose(f) == 0;
}

typedef struct reference {
    double losses[STEPS];
    double *grads; /* all tensors, table order */
    size_t count;
} reference;

static int read_reference(const char *path, reference *ref, size_t total)
{
    ref->grads = malloc(total * sizeof *ref->grads);
    ref->count = total;
    const int32_t want[2] = {STEPS, -1};
    double *const arrays[2] = {ref->losses, ref->grads};
    const size_t counts[2] = {STEPS, total};
    return oracle_read(path, "FERRYREF", want, 2, arrays, counts, 2);
}

/* torch.optim.AdamW, in double, on every element of every group. */
typedef struct adamw {
    double **master, **m, **v;
} adamw;

static void adamw_step(adamw *o, float **params, float **grads, const size_t *numel, int G,
                       int step)
{
    const oracle_adamw cfg = {LR, BETA1, BETA2, EPS};
    for (int g = 0; g < G; g++)
        for (size_t i = 0; i < numel[g]; i++)
            params[g][i] = oracle_adamw_element(&cfg, &o->master[g][i], &o->m[g][i], &o->v[g][i], grads[g][i], WD,
                                                step);
}

static void compare_grads(fixture *fx, float **grads, const reference *ref)
{
    size_t k = 0;
    double worst_rel = 0;
    for (int g = 0; g < gpt2_num_groups(fx->m); g++)
        for (int i = 0; i < gpt2_group_tensor_count(fx->m, g); i++) {
            gpt2_tensor_info t;
            gpt2_group_tensor(fx->m, g, i, &t);
            double diff2 = 0, ref2 = 0, maxabs = 0, refmax = 0;
            for (size_t e = 0; e < t.numel; e++) {
                double ours = grads[g][t.offset + e], want = ref->grads[k + e];
                diff2 += (ours - want) * (ours - want);
                ref2 += want * want;
                maxabs = fabs(ours - want) > maxabs ? fabs(ours - want) : maxabs;
                refmax = fabs(want) > refmax ? fabs(want) : refmax;
            }
            k += t.numel;
            double rel = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
            worst_rel = rel > worst_rel ? rel : worst_rel;
            tap_ok(rel <= 1e-5, "grad %-36s rel. norm error %.2e <= 1e-5 (max abs err %.2e, "
                                "max |torch| %.2e)", t.name, rel, maxabs, refmax);
        }
    tap_diag("worst relative gradient error %.3g", worst_rel);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PYTHON gpt2_oracle.py\n", argv[0]);
        return 1;
    }
    uint64_t seed = 20240603;
    tap_diag("seed %llu", (unsigned long long)seed);
    uint64_t rng = seed;
    gpt2_config cfg;
    gpt2_config_from_fields(2, 4, 64, 500, 512, 64, &cfg);
    fixture fx;
    if (fixture_open(&fx, &cfg, B_, T_, false, seed) != FERRY_OK) {
        tap_ok(0, "fixture opens: %s", ferry_last_error());
        return tap_done();
    }
    int G = gpt2_num_groups(fx.m);
    float *params[G], *grads[G];
    size_t numel[G], total = 0;
    for (int g = 0; g < G; g++) {
        numel[g] = gpt2_group_numel(fx.m, g);
        params[g] = malloc(numel[g] * 4);
        grads[g] = malloc(numel[g] * 4);
        gpt2_resident_get_params(fx.r, fx.s, g, params[g]);
        for (int i = 0; i < gpt2_group_tensor_count(fx.m, g); i++) {
            gpt2_tensor_info t;
            gpt2_group_tensor(fx.m, g, i, &t);
            total += t.numel;
        }
    }
    int32_t tok[B_ * T_], tgt[B_ * T_];
    for (int i = 0; i < B_ * T_; i++) {
        tok[i] = (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
        tgt[i] = i % 11 == 10 ? -1 : (int32_t)(tap_rand_unit(&rng) * cfg.vocab_size);
    }
    char dir[] = "/tmp/ferry-oracle-XXXXXX", in[64], out[64], cmd[1024];
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary directory");
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(out, sizeof out, "%s/ref.bin", dir);
    tap_ok(write_input(in, &fx, params, tok, tgt), "input for the oracle written to %s", in);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", argv[1], argv[2], in, out);
    int rc = system(cmd);
    if (WIFEXITED(rc) && (WEXITSTATUS(rc) == 77 || WEXITSTATUS(rc) == 127)) {
        remove(in), rmdir(dir);
        tap_plan_skip("the oracle python is missing or cannot import torch");
    }
    TAP_IS_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 0, "the PyTorch oracle ran: %s", cmd);
    reference ref = {0};
    if (!tap_ok(read_reference(out, &ref, total), "the oracle's output reads back")) {
        remove(in), remove(out), rmdir(dir);
        return tap_done();
    }

    adamw opt;
    opt.master = calloc((size_t)G, sizeof(double *));
    opt.m = calloc((size_t)G, sizeof(double *));
    opt.v = calloc((size_t)G, sizeof(double *));
    for (int g = 0; g < G; g++) {
        opt.master[g] = malloc(numel[g] * sizeof(double));
        opt.m[g] = calloc(numel[g], sizeof(double));
        opt.v[g] = calloc(numel[g], sizeof(double));
        for (size_t i = 0; i < numel[g]; i++)
            opt.master[g][i] = params[g][i];
    }
    double worst_loss = 0;
    for (int step = 0; step < STEPS; step++) {
        float loss = 0;
        gpt2_resident_zero_grads(fx.r, fx.s);
        if (fixture_step(&fx, tok, tgt, &loss) != FERRY_OK) {
            tap_ok(0, "step %d runs: %s", step, ferry_last_error());
            break;
        }
        for (int g = 0; g < G; g++)
            gpt2_resident_get_grads(fx.r, fx.s, g, grads[g]);
        if (step == 0)
            compare_grads(&fx, grads, &ref);
        double rel = fabs(loss - ref.losses[step]) / fabs(ref.losses[step]);
        worst_loss = rel > worst_loss ? rel : worst_loss;
        TAP_IS_CLOSE(loss, ref.losses[step], 0.0, 1e-5, "step %d loss %.7f vs torch %.7f", step,
                     loss, ref.losses[step]);
        adamw_step(&opt, params, grads, numel, G, step + 1);
        for (int g = 0; g < G; g++)
            gpt2_resident_set_params(fx.r, fx.s, g, params[g]);
    }
    tap_diag("worst relative loss error over %d steps %.3g; loss %.5f -> %.5f (torch)", STEPS,
             worst_loss, ref.losses[0], ref.losses[STEPS - 1]);
    tap_ok(ref.losses[STEPS - 1] < ref.losses[0] - 0.1, "training lowers the loss");
    for (int g = 0; g < G; g++) {
        free(params[g]), free(grads[g]);
        free(opt.master[g]), free(opt.m[g]), free(opt.v[g]);
    }
    free(opt.master), free(opt.m), free(opt.v), free(ref.grads);
    remove(in), remove(out), rmdir(dir);
    fixture_close(&fx);
    return tap_done();
}
