/* Fault walks of train_gpt2's checkpoint folders (train/run_state.c,
 * train/hf_checkpoint.c; tests/fault/walk.h): every allocation, open, read,
 * write, sync and rename of
 * - save: run_state_save of step 2 into a run folder whose latest is step 1.
 *   Step 1 must stay byte-identical; latest must name step 1, or step 2 when
 *   step 2 is there whole (byte-identical to a fault-free save); a success
 *   must leave step 2 and latest on it; nothing else may be left behind.
 * - resave: run_state_save of step 1 again, with new weights, over the step 1
 *   that latest names (the atomic exchange, or its fallback). Step 1 must be
 *   the old checkpoint or the new one, whole, and latest on it.
 * - load: what train_gpt2 --resume and --init-from read: run_state_config,
 *   run_state_load into an engine holding other values, hf_load of
 *   model.safetensors. The checkpoint is never changed; a success gives the
 *   saved weights, run state and config; a failure that changed the engine
 *   says so, and a load without a fault then succeeds.
 * made to fail in turn, one-shot and then persistent; the saves once more
 * on a file system without RENAME_EXCHANGE (renameat2 refused with EINVAL),
 * where persistent faults over the step latest names are judged as the next
 * run finds the folder (the lock puts back an earlier step left aside).
 *
 *   usage: test_fault_run save|resave|load */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fault/fixture.h"
#include "tests/fault/walk.h"
#include "train/hf_checkpoint.h"
#include "models/lmodel.h"
#include "train/run_state.h"

#define RUN_ID "0123456789abcdef0123456789abcdef" /* the run every save here belongs to */

static fixture fx;
static lmodel *saved; /* fx.model, as run_state_save takes it */
static char dir[] = "/tmp/ferry-fault-run-XXXXXX";
static char run[300], pristine[300], reference[300];

static train_resume resume_at(int64_t step)
{
    train_resume r;
    memset(&r, 0, sizeof r);
    r.step = step;
    r.data.epoch = 1;
    r.data.index = 40 + (uint64_t)step;
    r.sample_rng = 777;
    r.model = (model_spec){.family = MODEL_FAMILY_GPT2, .gpt2 = *gpt2_get_config(fx.model)};
    r.batch = 2, r.seq = 16, r.grad_accum = 1;
    snprintf(r.run, sizeof r.run, "%s", RUN_ID);
    r.settings = (train_settings){1, 1337, FERRY_DTYPE_F32, FERRY_OFFLOAD_OPTIMIZER, 0, 10, 100, 6e-4f, 0.1f, 0.1f,
                                  0.9f, 0.95f, 1e-8f, 1.0f, 0};
    return r;
}

/* A fault-free save of version v at step into folder d. */
static ferry_status save_into(ferry_engine *e, const char *d, int v, int64_t step)
{
    train_resume r = resume_at(step);
    ferry_status st = fixture_set(&fx, e, v);
    return st == FERRY_OK ? run_state_save(d, step, e, saved, &r) : st;
}

static bool link_is(const char *link, const char *want)
{
    char got[PATH_MAX];
    ssize_t n = readlink(link, got, sizeof got - 1);
    return n > 0 && (got[n] = '\0', strcmp(got, want) == 0);
}

/* ".step_N.tmp" or ".step_N.old": what a save that could not clean up
 * after itself (a refused opendir) leaves, as a killed save does. */
static bool is_temporary(const char *name)
{
    size_t n = strlen(name);
    return strncmp(name, ".step_", 6) == 0 && n > 10 &&
           (strcmp(name + n - 4, ".tmp") == 0 || strcmp(name + n - 4, ".old") == 0);
}

/* Entries of the run folder besides those in `allowed` (NULL-ended) and
 * temporaries: names the first; *temps counts the temporaries. */
static bool only(const char *const *allowed, int *temps, char *why, size_t cap)
{
    DIR *dd = opendir(run);
    bool ok = dd != NULL;
    *temps = 0;
    for (struct dirent *ent; dd && ok && (ent = readdir(dd)) != NULL;) {
        bool known = !strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..") || !strcmp(ent->d_name, ".lock");
        for (int i = 0; allowed[i] && !known; i++)
            known = strcmp(allowed[i], ent->d_name) == 0;
        *temps += !known && is_temporary(ent->d_name);
        if (!known && !is_temporary(ent->d_name)) {
            snprintf(why, cap, "'%s/%s' was left behind", run, ent->d_name);
            ok = false;
        }
    }
    if (dd)
        closedir(dd);
    return ok;
}

/* Temporaries are the next run's to remove: taking the folder's lock and
 * claiming it (the same run, resumed) must. */
static bool lock_cleans(int temps, char *why, size_t cap)
{
    const char *const none[] = {NULL};
    int fd = -1, left = 0;
    if (temps == 0)
        return true;
    if (run_state_lock(run, &fd) != FERRY_OK || run_state_claim(run, RUN_ID, true) != FERRY_OK) {
        snprintf(why, cap, "the folder holds %d temporaries and cannot be locked and claimed: %s", temps,
                 ferry_last_error());
        run_state_unlock(fd);
        return false;
    }
    run_state_unlock(fd);
    only(none, &left, why, cap);
    if (left)
        snprintf(why, cap, "%d temporaries are still there once the next run takes the folder's lock", left);
    return left == 0;
}

/* ---- save a new step, and save a step again ---- */

typedef struct save_ctx {
    ferry_engine *e;
    int64_t step;
    bool next_run; /* judge the folder as the next run finds it, once it holds the lock */
} save_ctx;

static ferry_status save_prepare(void *p)
{
    (void)p;
    rm_rf(run);
    return tree_copy(pristine, run) ? FERRY_OK : FERRY_ERR_IO;
}

static ferry_status save_act(void *p, uint64_t at, bool persistent)
{
    (void)at, (void)persistent;
    save_ctx *c = p;
    train_resume r = resume_at(c->step);
    return run_state_save(run, c->step, c->e, saved, &r);
}

/* Whether run/name is the step folder of `from` (pristine or reference). */
static bool step_is(const char *name, const char *from, char *why, size_t cap)
{
    char a[PATH_MAX], b[PATH_MAX];
    snprintf(a, sizeof a, "%s/%s", run, name);
    snprintf(b, sizeof b, "%s/%s", from, name);
    return tree_same(a, b, NULL, why, cap);
}

static bool save_new_check(void *p, ferry_status st, char *why, size_t cap)
{
    (void)p;
    const char *const allowed[] = {"step_00000001", "step_00000002", "latest", NULL};
    char path[PATH_MAX];
    struct stat sb;
    int temps = 0;
    if (!step_is("step_00000001", pristine, why, cap) || !only(allowed, &temps, why, cap))
        return false;
    snprintf(path, sizeof path, "%s/step_00000002", run);
    bool has_new = lstat(path, &sb) == 0;
    if (has_new && !step_is("step_00000002", reference, why, cap))
        return false;
    snprintf(path, sizeof path, "%s/latest", run);
    bool on_new = link_is(path, "step_00000002"), on_old = link_is(path, "step_00000001");
    if (st == FERRY_OK ? !(has_new && on_new) : !(on_old || (on_new && has_new))) {
        snprintf(why, cap, "the save %s, and latest names %s with step 2 %s", st == FERRY_OK ? "succeeded" : "failed",
                 on_new ? "step 2" : on_old ? "step 1" : "neither step", has_new ? "there" : "absent");
        return false;
    }
    return lock_cleans(temps, why, cap);
}

static bool save_again_check(void *p, ferry_status st, char *why, size_t cap)
{
    save_ctx *c = p;
    const char *const allowed[] = {"step_00000001", "latest", NULL};
    char path[PATH_MAX], why_old[512];
    int temps = 0;
    if (!only(allowed, &temps, why, cap))
        return false;
    if (c->next_run && !lock_cleans(temps, why, cap))
        return false;
    bool is_new = step_is("step_00000001", reference, why, cap);
    bool is_old = !is_new && step_is("step_00000001", pristine, why_old, sizeof why_old);
    if (st == FERRY_OK ? !is_new : !(is_new || is_old)) {
        snprintf(why + strlen(why), cap - strlen(why), " (the save %s; as the earlier checkpoint: %s)",
                 st == FERRY_OK ? "succeeded" : "failed", is_old ? "whole" : why_old);
        return false;
    }
    snprintf(path, sizeof path, "%s/latest", run);
    if (!link_is(path, "step_00000001")) {
        snprintf(why, cap, "latest no longer names step_00000001");
        return false;
    }
    return lock_cleans(temps, why, cap);
}

static int walk_save(bool again)
{
    save_ctx c = {NULL, again ? 1 : 2, false};
    ferry_engine_config cfg = fixture_config(FERRY_OFFLOAD_OPTIMIZER);
    ferry_status st = fixture_engine(&fx, &cfg, 0, &c.e);
    if (st == FERRY_OK) st = save_into(c.e, pristine, 0, 1);
    if (st == FERRY_OK) st = save_into(c.e, reference, 1, c.step);
    if (!tap_is_status(st, FERRY_OK, "%s: a run folder with step 1, and a fault-free save of version 1 at step %lld",
                       again ? "resave" : "save", (long long)c.step)) {
        ferry_engine_destroy(c.e);
        return 1;
    }
    walk_scenario s = {.name = again ? "run_state_save over the step latest names" : "run_state_save of a new step",
                       .ctx = &c, .prepare = save_prepare, .act = save_act,
                       .check = again ? save_again_check : save_new_check};
    walk(&s, false);
    walk(&s, true);
    /* Where the file system cannot exchange two names, the save moves the
     * earlier folder aside first: walk that path too. */
    fault_refuse("renameat2", EINVAL);
    s.name = again ? "run_state_save over the step latest names, without RENAME_EXCHANGE"
                   : "run_state_save of a new step, without RENAME_EXCHANGE";
    walk(&s, false);
    /* Both renames refused leave the earlier step aside, as a save killed
     * between them does: the next run must find it back in place. */
    c.next_run = again;
    walk(&s, true);
    fault_refuse(NULL, 0);
    ferry_engine_destroy(c.e);
    return 0;
}

/* ---- load ---- */

typedef struct load_ctx {
    ferry_engine *e;
    char ckpt[PATH_MAX];
    model_spec cfg;
    train_resume resume;
    float **groups; /* what hf_load read */
    int failed_in;  /* 0: run_state_config, 1: run_state_load, 2: hf_load */
} load_ctx;

static ferry_status load_prepare(void *p)
{
    load_ctx *c = p;
    memset(&c->cfg, 0, sizeof c->cfg);
    memset(&c->resume, 0, sizeof c->resume);
    for (int g = 0; g < fx.groups; g++)
        memset(c->groups[g], 0, gpt2_group_numel(fx.model, g) * sizeof(float));
    return fixture_set(&fx, c->e, 0);
}

static ferry_status load_act(void *p, uint64_t at, bool persistent)
{
    (void)at, (void)persistent;
    load_ctx *c = p;
    char st_path[PATH_MAX];
    c->failed_in = 0;
    ferry_status st = run_state_config(c->ckpt, &c->cfg);
    if (st != FERRY_OK)
        return st;
    c->failed_in = 1;
    if ((st = run_state_load(c->ckpt, c->e, &c->resume)) != FERRY_OK)
        return st;
    c->failed_in = 2;
    st = run_state_join(st_path, sizeof st_path, c->ckpt, "model.safetensors");
    return st == FERRY_OK ? hf_load(st_path, fx.model, c->groups) : st;
}

static bool load_right(load_ctx *c, char *why, size_t cap)
{
    train_resume want = resume_at(2);
    const gpt2_config *m = gpt2_get_config(fx.model);
    const gpt2_config *read = &c->cfg.gpt2;
    if (c->cfg.family != MODEL_FAMILY_GPT2 || read->n_layer != m->n_layer || read->n_embd != m->n_embd ||
        read->vocab_size != m->vocab_size) {
        snprintf(why, cap, "config.json read as %d layers, %d wide, %d tokens", read->n_layer, read->n_embd,
                 read->vocab_size);
        return false;
    }
    if (c->resume.step != 2 || c->resume.data.index != want.data.index || c->resume.sample_rng != want.sample_rng) {
        snprintf(why, cap, "the run state read back is step %lld, data index %llu", (long long)c->resume.step,
                 (unsigned long long)c->resume.data.index);
        return false;
    }
    for (int g = 0; g < fx.groups; g++)
        if (memcmp(c->groups[g], fx.values[1][g], gpt2_group_numel(fx.model, g) * sizeof(float)) != 0) {
            snprintf(why, cap, "hf_load read group %d wrong", g);
            return false;
        }
    return fixture_holds(&fx, c->e, 1, why, cap);
}

static bool load_check(void *p, ferry_status st, char *why, size_t cap)
{
    load_ctx *c = p;
    char msg[WALK_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "%s", ferry_last_error());
    if (!tree_same(c->ckpt, pristine, NULL, why, cap))
        return false;
    if (st == FERRY_OK)
        return load_right(c, why, cap);
    /* Before run_state_load the engine is untouched, after it whole; a
     * failed run_state_load that changed it must say so. */
    bool right;
    if (c->failed_in == 2)
        right = fixture_holds(&fx, c->e, 1, why, cap);
    else
        right = fixture_holds(&fx, c->e, 0, why, cap) || (c->failed_in == 1 && walk_contains(msg, "holds part"));
    if (!right) {
        snprintf(why + strlen(why), cap - strlen(why), "; the load failed in %s with \"%s\"",
                 c->failed_in == 0 ? "run_state_config" : c->failed_in == 1 ? "run_state_load" : "hf_load", msg);
        return false;
    }
    ferry_status again = load_act(c, 0, false);
    if (again != FERRY_OK) {
        snprintf(why, cap, "after the failed load, a load without a fault fails too: %s", ferry_last_error());
        return false;
    }
    return load_right(c, why, cap);
}

static int walk_load(void)
{
    load_ctx c;
    memset(&c, 0, sizeof c);
    ferry_engine_config cfg = fixture_config(FERRY_OFFLOAD_OPTIMIZER);
    c.groups = calloc((size_t)fx.groups, sizeof *c.groups);
    for (int g = 0; g < fx.groups; g++)
        c.groups[g] = malloc(gpt2_group_numel(fx.model, g) * sizeof(float));
    snprintf(c.ckpt, sizeof c.ckpt, "%s/step_00000002", run);
    ferry_status st = fixture_engine(&fx, &cfg, 0, &c.e);
    if (st == FERRY_OK) st = save_into(c.e, run, 1, 2);
    if (st == FERRY_OK) {
        snprintf(pristine + strlen(pristine), sizeof pristine - strlen(pristine), "/step_00000002");
        st = tree_copy(c.ckpt, pristine) ? FERRY_OK : FERRY_ERR_IO;
    }
    if (tap_is_status(st, FERRY_OK, "load: a checkpoint of version 1 at step 2, an engine holding version 0")) {
        walk_scenario s = {.name = "resume: run_state_config, run_state_load, hf_load", .ctx = &c,
                           .prepare = load_prepare, .act = load_act, .check = load_check};
        walk(&s, false);
        walk(&s, true);
    }
    ferry_engine_destroy(c.e);
    for (int g = 0; g < fx.groups; g++)
        free(c.groups[g]);
    free(c.groups);
    return st == FERRY_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (!mkdtemp(dir) || !fixture_open(&fx)) {
        fprintf(stderr, "test_fault_run: cannot make '%s' or the model: %s\n", dir, ferry_last_error());
        return 1;
    }
    model_spec spec = {.family = MODEL_FAMILY_GPT2, .gpt2 = *gpt2_get_config(fx.model)};
    if (lmodel_create(&spec, &saved) != FERRY_OK) {
        fprintf(stderr, "test_fault_run: the model as the run state saves it: %s\n", ferry_last_error());
        return 1;
    }
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(pristine, sizeof pristine, "%s/pristine", dir);
    snprintf(reference, sizeof reference, "%s/reference", dir);
    int rc = 2;
    if (strcmp(what, "save") == 0 || strcmp(what, "resave") == 0) {
        rc = walk_save(strcmp(what, "resave") == 0);
    } else if (strcmp(what, "load") == 0) {
        mkdir(pristine, 0755);
        rc = walk_load();
    } else {
        fprintf(stderr, "usage: test_fault_run save|resave|load\n");
    }
    lmodel_destroy(saved);
    fixture_close(&fx);
    rm_rf(dir);
    return rc == 0 ? tap_done() : rc;
}
