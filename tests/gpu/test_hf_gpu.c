/* A checkpoint written on the cuda backend, read by Hugging Face (suite
 * gpu): a small GPT-2 (2 layers, 4 heads, 128 wide, GPT-2's vocabulary
 * padded to 50304, context 64) trained 10 steps on the cuda engine, saved
 * the way train_gpt2 saves (run_state_save: model.safetensors + config.json
 * beside state.ferry, and a `latest` link), then loaded by transformers'
 * GPT2LMHeadModel.from_pretrained (tests/gpu/hf_transformers.py) and asked
 * for its loss on the batch ferry trained on, where 10 steps moved the loss
 * far from its start, so only the trained weights can give it. It must
 * equal the loss ferry reports for the same tokens within 2e-2 relative: ferry computes
 * with bf16 weights and activations (2^-8 per rounding), transformers in
 * float32 from the fp32 master weights.
 *
 * The checkpoint is a run's: it carries a run identity, as train_gpt2's do.
 *
 *   test_hf_gpu PYTHON hf_transformers.py [cuda|host] [transformers-optional]
 * PYTHON must import torch and transformers (the GPU machine's python3 does;
 * missing them there is a failure). Exit 77 only when cuda is asked for and
 * there is no GPU; with host (a check of this program's own logic) a PYTHON
 * without transformers is a skip. With transformers-optional (the simulated
 * device's run in CI, on a machine without transformers) ferry's half runs
 * and must pass, and a PYTHON that cannot import transformers skips the
 * comparison alone (a TAP skip), not the program. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/gpu/engine_fixture.h"
#include "train/run_state.h"

#define STEPS 10
#define B_ 4
#define T_ 64
#define TOL_LOSS 2e-2
#define BUDGET ((uint64_t)2 << 30) /* device bytes: a small card's worth */

static char work[] = "/tmp/ferry-hf-gpu-XXXXXX";

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* The batch ferry trained on (B, T, inputs, targets): the loss there has
 * moved far from the initial one, so only the trained weights give it. */
static bool write_tokens(const char *path, const efix *f)
{
    int32_t head[2] = {B_, T_};
    FILE *fp = fopen(path, "wb");
    bool ok = fp && fwrite(head, sizeof head, 1, fp) == 1 && fwrite(f->tokens, 4, B_ * T_, fp) == B_ * T_ &&
              fwrite(f->targets, 4, B_ * T_, fp) == B_ * T_;
    return fp && fclose(fp) == 0 && ok;
}

/* Runs the script; returns its exit status and the loss it printed (NAN if none). */
static int run_script(const char *python, const char *script, const char *ckpt, const char *tokens, double *loss)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s' 2>&1", python, script, ckpt, tokens);
    tap_diag("running %s", cmd);
    *loss = NAN;
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        tap_diag("  %s", line);
        sscanf(line, "loss %lf", loss);
    }
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Trains, saves, and writes the batch; *loss: ferry's loss on it after training. */
static bool train_and_save(ferry_backend_kind kind, const char *run_dir, const char *tokens_path, float *loss)
{
    gpt2_config c;
    gpt2_config_from_fields(2, 4, 128, 50257, 0, T_, &c);
    efix f;
    ferry_status st = efix_open(&f, &c, kind, FERRY_DTYPE_AUTO, FERRY_OFFLOAD_OPTIMIZER, BUDGET, B_, T_, 11, 12);
    bool ok = tap_is_status(st, FERRY_OK, "a GPT-2 on the %s engine sets up", ferry_backend_name(kind));
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.lr = 2e-3f;
    float train_loss = 0, first = 0;
    for (int s = 0; ok && s < STEPS; s++) {
        ferry_status st = efix_step(&f, &so, &train_loss);
        ok = tap_is_status(st, FERRY_OK, "training step %d (loss %.4f)", s, train_loss);
        first = s == 0 ? train_loss : first;
    }
    if (ok)
        ok = tap_ok(write_tokens(tokens_path, &f), "the training batch written to %s", tokens_path);
    if (ok) {
        ferry_status st = efix_eval(&f, f.tokens, f.targets, loss);
        ok = tap_is_status(st, FERRY_OK, "ferry's loss on it after %d steps: %.6f (first step's: %.6f)", STEPS, *loss,
                           first);
    }
    train_resume r;
    memset(&r, 0, sizeof r);
    r.step = STEPS;
    r.model = (model_spec){.family = MODEL_FAMILY_GPT2, .gpt2 = c};
    r.batch = B_, r.seq = T_, r.grad_accum = 1;
    run_state_new_run(r.run);
    /* The run's settings, as train_gpt2 records them: this one's steps, at a
     * constant learning rate. */
    train_settings *t = &r.settings;
    t->known = 1, t->seed = 11, t->offload = FERRY_OFFLOAD_OPTIMIZER, t->delayed_update = 0;
    t->dtype = ok ? ferry_engine_dtype(f.e) : FERRY_DTYPE_F32;
    t->warmup = 0, t->steps = STEPS, t->lr = so.lr, t->lr_min_frac = 1.0f, t->weight_decay = so.weight_decay;
    t->beta1 = so.beta1, t->beta2 = so.beta2, t->eps = so.eps, t->clip = so.max_grad_norm;
    lmodel *saved = NULL; /* f.m, as run_state_save takes it */
    if (ok)
        ok = tap_is_status(lmodel_create(&r.model, &saved), FERRY_OK, "the model as the run state saves it");
    if (ok)
        ok = tap_is_status(run_state_save(run_dir, STEPS, f.e, saved, &r), FERRY_OK, "checkpoint saved in %s", run_dir);
    lmodel_destroy(saved);
    efix_close(&f);
    return ok;
}

int main(int argc, char **argv)
{
    const bool optional = argc > 4 && !strcmp(argv[4], "transformers-optional");
    if (argc < 3 || (argc > 4 && !optional)) {
        printf("Bail out! usage: %s PYTHON hf_transformers.py [cuda|host] [transformers-optional]\n", argv[0]);
        return 2;
    }
    ferry_backend_kind kind = efix_backend_arg(argc - 2, argv + 2);
    efix_require_gpu(kind);
    if (!mkdtemp(work)) {
        printf("Bail out! cannot create a temporary directory\n");
        return 1;
    }
    char run_dir[256], latest[300], tokens[300];
    snprintf(run_dir, sizeof run_dir, "%s/run", work);
    snprintf(latest, sizeof latest, "%s/latest", run_dir);
    snprintf(tokens, sizeof tokens, "%s/tokens.bin", work);
    float ours = 0;
    int code = 0;
    if (train_and_save(kind, run_dir, tokens, &ours)) {
        double theirs = NAN;
        int rc = run_script(argv[1], argv[2], latest, tokens, &theirs);
        if (rc == 3 && optional) {
            tap_skip("transformers' loss: %s cannot import torch, numpy or transformers (optional here; the GPU "
                     "check requires it)", argv[1]);
        } else if (rc == 3 && kind == FERRY_BACKEND_HOST) {
            tap_diag("SKIP: %s cannot import transformers (a skip only off the GPU check)", argv[1]);
            code = 77;
        } else if (tap_ok(rc == 0, "transformers loaded the checkpoint (script exit %d%s)", rc,
                          rc == 3 ? ": torch or transformers is missing, which the GPU check needs" : "")) {
            TAP_IS_CLOSE(theirs, ours, 0.0, TOL_LOSS,
                         "transformers' loss %.6f = ferry's %.6f within %.0e relative (bf16)",
                         theirs, (double)ours, TOL_LOSS);
        }
    }
    nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    int done = tap_done();
    return done == 0 && code == 77 ? 77 : done;
}
