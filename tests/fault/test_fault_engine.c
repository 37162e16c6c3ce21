/* Fault walks of the engine (tests/fault/walk.h): every allocation, open,
 * read, write, sync, rename and page lock of
 * - setup MODE: ferry_engine_create + the groups of a tiny GPT-2 +
 *   ferry_engine_setup on the host backend (MODE none, optimizer, params;
 *   optimizer also writes a memory trace; split is optimizer with the first
 *   two groups' state on the device, the split update), then destroy. A
 *   success must hold the initial values (the split's read from the device).
 * - save: ferry_engine_save over an earlier checkpoint file. A failure must
 *   leave the earlier file byte-identical and no temporary; a success must be
 *   byte-identical to a fault-free save of the same state.
 * - load: ferry_engine_load of a checkpoint into an engine holding other
 *   values. The file is never changed; a success restores the values, the
 *   step and the blob; after a failure the engine still loads the file
 *   whole, fault off.
 * made to fail in turn, one-shot and then persistent (that call and every
 * later one fail).
 *
 *   usage: test_fault_engine setup-none|setup-optimizer|setup-params|setup-split|save|load */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fault/fixture.h"
#include "tests/fault/walk.h"

static fixture fx;
static char dir[] = "/tmp/ferry-fault-engine-XXXXXX";
static const char blob[] = "the embedder's blob: rng 12345, data position 678";

/* ---- setup ---- */

typedef struct setup_ctx {
    ferry_engine_config cfg;
    ferry_engine *e;
} setup_ctx;

static ferry_status setup_act(void *p, uint64_t at, bool persistent)
{
    (void)at, (void)persistent;
    setup_ctx *c = p;
    return fixture_engine(&fx, &c->cfg, 0, &c->e);
}

static bool setup_check(void *p, ferry_status st, char *why, size_t cap)
{
    setup_ctx *c = p;
    if (st != FERRY_OK)
        return true; /* nothing was whole before; finish destroys what is there */
    return fixture_holds(&fx, c->e, 0, why, cap);
}

static void setup_finish(void *p)
{
    setup_ctx *c = p;
    ferry_engine_destroy(c->e);
    c->e = NULL;
}

static int walk_setup(const char *mode_name)
{
    char trace[300];
    setup_ctx c = {fixture_config(FERRY_OFFLOAD_NONE), NULL};
    bool split = strcmp(mode_name, "split") == 0; /* optimizer mode, 2 groups updated on the device */
    if (split) {
        c.cfg.offload = FERRY_OFFLOAD_OPTIMIZER;
        c.cfg.device_update_groups = 2;
    } else if (ferry_offload_parse(mode_name, &c.cfg.offload) != FERRY_OK) {
        fprintf(stderr, "%s\n", ferry_last_error());
        return 2;
    }
    if (c.cfg.offload == FERRY_OFFLOAD_OPTIMIZER) {
        snprintf(trace, sizeof trace, "%s/setup.trace", dir);
        c.cfg.trace_path = trace;
    }
    char name[64];
    snprintf(name, sizeof name, "engine setup, offload %s", mode_name);
    walk_scenario s = {.name = name, .ctx = &c, .act = setup_act, .check = setup_check, .finish = setup_finish};
    walk(&s, false);
    walk(&s, true);
    return 0;
}

/* ---- save over an earlier file ---- */

typedef struct save_ctx {
    ferry_engine *e;
    char path[300], earlier[300], reference[300];
} save_ctx;

static ferry_status save_prepare(void *p)
{
    save_ctx *c = p;
    return file_copy(c->earlier, c->path) ? FERRY_OK : FERRY_ERR_IO;
}

static ferry_status save_act(void *p, uint64_t at, bool persistent)
{
    (void)at, (void)persistent;
    save_ctx *c = p;
    return ferry_engine_save(c->e, c->path, blob, sizeof blob);
}

/* Entries of the test's folder: the checkpoint and the test's 2 copies, no
 * temporary beside them. */
static bool only_three(char *why, size_t cap)
{
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;)
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, ".."))
            entries++;
    if (d)
        closedir(d);
    if (entries != 3)
        snprintf(why, cap, "'%s' holds %d entries, not the checkpoint and the test's 2 copies: a temporary was left",
                 dir, entries);
    return entries == 3;
}

static bool save_check(void *p, ferry_status st, char *why, size_t cap)
{
    save_ctx *c = p;
    if (st == FERRY_OK && !file_same(c->path, c->reference)) {
        snprintf(why, cap, "the save succeeded, but '%s' differs from a fault-free save", c->path);
        return false;
    }
    /* A failure after the rename (syncing the folder) leaves the new file,
     * whole; any other outcome is a broken checkpoint. */
    if (st != FERRY_OK && !file_same(c->path, c->earlier) && !file_same(c->path, c->reference)) {
        snprintf(why, cap, "the save failed and '%s' is neither the earlier checkpoint nor the new one", c->path);
        return false;
    }
    return only_three(why, cap);
}

static int walk_save(void)
{
    save_ctx c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s/state.ferry", dir);
    snprintf(c.earlier, sizeof c.earlier, "%s/earlier.copy", dir);
    snprintf(c.reference, sizeof c.reference, "%s/reference.copy", dir);
    ferry_engine_config cfg = fixture_config(FERRY_OFFLOAD_OPTIMIZER);
    ferry_status st = fixture_engine(&fx, &cfg, 0, &c.e);
    if (st == FERRY_OK) st = ferry_engine_save(c.e, c.earlier, blob, sizeof blob);
    if (st == FERRY_OK) st = fixture_set(&fx, c.e, 1);
    if (st == FERRY_OK) st = ferry_engine_save(c.e, c.reference, blob, sizeof blob);
    if (!tap_is_status(st, FERRY_OK, "save: an engine, an earlier checkpoint and a fault-free reference")) {
        ferry_engine_destroy(c.e);
        return 1;
    }
    tap_ok(!file_same(c.earlier, c.reference), "save: the earlier checkpoint and the new state differ");
    walk_scenario s = {.name = "engine save over an earlier checkpoint", .ctx = &c, .prepare = save_prepare,
                       .act = save_act, .check = save_check};
    walk(&s, false);
    walk(&s, true);
    ferry_engine_destroy(c.e);
    return 0;
}

/* ---- load ---- */

typedef struct load_ctx {
    ferry_engine *e;
    char path[300], pristine[300];
    char user[128];
    size_t user_bytes;
} load_ctx;

static ferry_status load_prepare(void *p)
{
    load_ctx *c = p;
    memset(c->user, 0, sizeof c->user);
    c->user_bytes = 0;
    return fixture_set(&fx, c->e, 0);
}

static ferry_status load_act(void *p, uint64_t at, bool persistent)
{
    (void)at, (void)persistent;
    load_ctx *c = p;
    return ferry_engine_load(c->e, c->path, c->user, sizeof c->user, &c->user_bytes);
}

/* The engine holds the checkpoint (version 1, step 2, the blob). */
static bool load_right(load_ctx *c, char *why, size_t cap)
{
    if (!fixture_holds(&fx, c->e, 1, why, cap))
        return false;
    if (ferry_engine_steps(c->e) != 2 || c->user_bytes != sizeof blob || memcmp(c->user, blob, sizeof blob) != 0) {
        snprintf(why, cap, "loaded step %lld and a %zu-byte blob, want step 2 and the %zu-byte blob",
                 (long long)ferry_engine_steps(c->e), c->user_bytes, sizeof blob);
        return false;
    }
    return true;
}

static bool load_check(void *p, ferry_status st, char *why, size_t cap)
{
    load_ctx *c = p;
    if (!file_same(c->path, c->pristine)) {
        snprintf(why, cap, "loading changed '%s'", c->path);
        return false;
    }
    if (st == FERRY_OK)
        return load_right(c, why, cap);
    /* A failure that changed the engine must say so: an embedder that went
     * on training would train a mix of two states. */
    char msg[WALK_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "%s", ferry_last_error());
    if (!fixture_holds(&fx, c->e, 0, why, cap) && !walk_contains(msg, "holds part")) {
        snprintf(why, cap, "the failed load changed the engine's weights, and its message does not say so: \"%s\"",
                 msg);
        return false;
    }
    /* After a failure the engine is still one that loads the file. */
    c->user_bytes = 0;
    ferry_status again = ferry_engine_load(c->e, c->path, c->user, sizeof c->user, &c->user_bytes);
    if (again != FERRY_OK) {
        snprintf(why, cap, "after the failed load, a load without a fault fails too: %s", ferry_last_error());
        return false;
    }
    return load_right(c, why, cap);
}

/* Two optimizer steps, so that the moments and the step count are not zero. */
static ferry_status train_two_steps(ferry_engine *e)
{
    ferry_status st = FERRY_OK;
    for (int step = 0; step < 2 && st == FERRY_OK; step++) {
        st = ferry_engine_begin_micro_batch(e, 0, 1);
        for (int g = 0; g < fx.groups && st == FERRY_OK; g++) {
            void *w, *dw;
            st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
            if (st == FERRY_OK) st = ferry_engine_grads(e, g, &dw);
            if (st == FERRY_OK) st = ferry_engine_synchronize(e);
            for (size_t i = 0; st == FERRY_OK && i < gpt2_group_numel(fx.model, g); i++)
                ((float *)dw)[i] = 0.01f * (float)(i % 7) - 0.03f;
            if (st == FERRY_OK) st = ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
        }
        ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
        o.lr = 0; /* the weights stay version 1; the moments and the step move */
        if (st == FERRY_OK) st = ferry_engine_step(e, &o, NULL);
    }
    return st == FERRY_OK ? ferry_engine_synchronize(e) : st;
}

static int walk_load(void)
{
    load_ctx c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s/state.ferry", dir);
    snprintf(c.pristine, sizeof c.pristine, "%s/pristine.copy", dir);
    ferry_engine_config cfg = fixture_config(FERRY_OFFLOAD_OPTIMIZER);
    ferry_engine *writer = NULL;
    ferry_status st = fixture_engine(&fx, &cfg, 1, &writer);
    if (st == FERRY_OK) st = train_two_steps(writer);
    if (st == FERRY_OK) st = ferry_engine_save(writer, c.path, blob, sizeof blob);
    ferry_engine_destroy(writer);
    if (st == FERRY_OK) st = file_copy(c.path, c.pristine) ? FERRY_OK : FERRY_ERR_IO;
    if (st == FERRY_OK) st = fixture_engine(&fx, &cfg, 0, &c.e);
    if (!tap_is_status(st, FERRY_OK, "load: a checkpoint of version 1 at step 2, and an engine holding version 0")) {
        ferry_engine_destroy(c.e);
        return 1;
    }
    walk_scenario s = {.name = "engine load", .ctx = &c, .prepare = load_prepare, .act = load_act,
                       .check = load_check};
    walk(&s, false);
    walk(&s, true);
    ferry_engine_destroy(c.e);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (!mkdtemp(dir) || !fixture_open(&fx)) {
        fprintf(stderr, "test_fault_engine: cannot make '%s' or the model: %s\n", dir, ferry_last_error());
        return 1;
    }
    int rc = 2;
    if (strncmp(what, "setup-", 6) == 0)
        rc = walk_setup(what + 6);
    else if (strcmp(what, "save") == 0)
        rc = walk_save();
    else if (strcmp(what, "load") == 0)
        rc = walk_load();
    else
        fprintf(stderr, "usage: test_fault_engine setup-none|setup-optimizer|setup-params|setup-split|save|load\n");
    fixture_close(&fx);
    rm_rf(dir);
    return rc == 0 ? tap_done() : rc;
}
