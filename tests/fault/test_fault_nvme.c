/* The NVMe tier under fault injection (a -Dfault_injection=true build):
 * - io: the store alone, through io_uring and through the threads of
 *   pread/pwrite. Every transfer coming back short is resumed and every
 *   byte is right; a read failing with EIO, a write with ENOSPC and a
 *   refused fallocate each end with a sentence naming the file (and the
 *   block and its bytes, or the bytes needed and free), kept for every
 *   later sweep. io_uring refused at setup (EPERM, as seccomp answers):
 *   the threads take over with the same bytes, said in the description, or
 *   the store fails naming seccomp when io_uring alone was asked for.
 *   Submissions refused with EAGAIN: a few are waited out, endless ones
 *   fail with a sentence instead of spinning. A file system asking 8 KiB
 *   O_DIRECT alignment: segments padded to it, a 4 KiB block refused.
 * - setup: the walk (walk.h) of creating an engine in offload nvme (master
 *   weights on disk too) with a tiny GPT-2 and setting it up: every
 *   allocation, open, fallocate, mapping, thread start and io_uring
 *   completion failed in turn. A success holds the initial values.
 * - step: the walk of one optimizer step (ferry_engine_step, then
 *   ferry_engine_synchronize) of such an engine, the gradients in place:
 *   every allocation and every read and write of the update failed in turn.
 *   After a failure, a save over the earlier checkpoint either is refused
 *   and leaves it byte for byte, or writes exactly the state before the
 *   step or after it, never a mixture; a success is the fault-free step.
 *
 *   usage: test_fault_nvme io|setup|step */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "offload/nvme.h"
#include "offload/pool.h"
#include "tests/fault/fixture.h"
#include "tests/fault/walk.h"

static fixture fx;
static char dir[] = "/tmp/ferry-fault-nvme-XXXXXX";

static ferry_engine_config engine_config(void)
{
    ferry_engine_config c = fixture_config(FERRY_OFFLOAD_NVME);
    c.nvme_path = dir;
    c.nvme_window_bytes = 96 << 10;
    c.nvme_block_bytes = 4096;
    c.nvme_queue_depth = 4;
    c.nvme_master = 1;
    return c;
}

/* ---- io: the store alone ---- */

static const char *const names[3] = {"m", "v", "master"};
static const ferry_mem_category cats[3] = {FERRY_MEM_OPTIMIZER, FERRY_MEM_OPTIMIZER, FERRY_MEM_PARAMS};
enum { IO_N = 20000 };
static float io_ref[3][IO_N];

static nvme_io_path IO = NVME_IO_AUTO;

static ferry_status io_open(pool *p, nvme_store **s)
{
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.window_bytes = 768 << 10; /* 32 KiB segments: 4 blocks of 8 KiB */
    c.block_bytes = 8192;
    c.queue_depth = 4;
    c.pool = p;
    c.io = IO;
    ferry_status st = nvme_create(&c, s);
    if (st == FERRY_OK) st = nvme_add_region(*s, "r", IO_N, 3, names, cats, NULL);
    if (st == FERRY_OK) st = nvme_open(*s);
    return st;
}

/* One sweep over the region; WRITE fills from io_ref, READ compares (*same). */
static ferry_status io_sweep(nvme_store *s, nvme_mode mode, bool *same)
{
    nvme_span span = {0, 7};
    ferry_status st = nvme_sweep_begin(s, mode, &span, 1);
    if (same)
        *same = true;
    for (bool done = false; st == FERRY_OK;) {
        nvme_tile t;
        if ((st = nvme_sweep_next(s, &t, &done)) != FERRY_OK || done)
            break;
        for (int a = 0; a < 3; a++) {
            if (mode == NVME_WRITE)
                memcpy(t.array[a], io_ref[a] + t.first, t.n * sizeof(float));
            else if (same && memcmp(t.array[a], io_ref[a] + t.first, t.n * sizeof(float)) != 0)
                *same = false;
        }
        st = nvme_sweep_put(s, &t);
    }
    if (st != FERRY_OK) {
        char keep[1200];
        snprintf(keep, sizeof keep, "%s", ferry_last_error());
        nvme_sweep_end(s);
        return err_set(st, "%s", keep);
    }
    return nvme_sweep_end(s);
}

static int test_io_path(void)
{
    pool *p = NULL;
    pool_config pc = POOL_CONFIG_INIT;
    pc.pin = POOL_PIN_NEVER;
    if (pool_create(&pc, &p) != FERRY_OK)
        return 1;
    const char *path = IO == NVME_IO_THREADS ? "threads" : "io_uring";
    const char *rd_kind = IO == NVME_IO_THREADS ? "pread" : "io_uring read";
    const char *wr_kind = IO == NVME_IO_THREADS ? "pwrite" : "io_uring write";

    /* Short transfers: each comes back with half of it done. */
    nvme_store *s = NULL;
    bool same = false;
    fault_short_io(true);
    ferry_status st = io_open(p, &s);
    if (st == FERRY_OK) st = io_sweep(s, NVME_WRITE, NULL);
    if (st == FERRY_OK) st = io_sweep(s, NVME_READ, &same);
    fault_short_io(false);
    TAP_IS_STATUS(st, FERRY_OK, "%s: with every transfer of 8 KiB or more coming back half done, a write and a read sweep "
                  "succeed (%s)", path, st ? ferry_last_error() : "the rest resumed");
    tap_ok(same, "and every byte comes back right");
    uint64_t rd = 0, wr = 0;
    nvme_io_bytes(s, &rd, &wr);
    tap_ok(wr == nvme_file_bytes(s) && rd == nvme_file_bytes(s), "each byte moved once: %llu written, %llu read",
           (unsigned long long)wr, (unsigned long long)rd);
    TAP_IS_STATUS(io_sweep(s, NVME_READ, &same), FERRY_OK, "read again without short transfers");
    tap_ok(same, "still right");

    /* The third read to complete fails with EIO (which block that is, is
     * the disk's order). */
    fault_arm(3, false);
    st = io_sweep(s, NVME_READ, &same);
    char where[600];
    uint64_t fired = fault_fired(where, sizeof where);
    fault_disarm();
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a read failing with EIO fails the sweep");
    tap_ok(fired == 3 && strstr(where, rd_kind), "%s: the fault was the third transfer, a read: %s", path, where);
    const char *msg = ferry_last_error();
    tap_ok(strstr(msg, nvme_path(s)) && strstr(msg, strerror(EIO)) && strstr(msg, "reading"),
           "the message names the file, reading, and EIO: %s", msg);
    TAP_IS_STATUS(io_sweep(s, NVME_READ, &same), FERRY_ERR_IO, "every later sweep repeats it");
    nvme_destroy(s);
    s = NULL;

    /* A write failing with ENOSPC. */
    st = io_open(p, &s);
    fault_arm(5, false);
    if (st == FERRY_OK) st = io_sweep(s, NVME_WRITE, NULL);
    fired = fault_fired(where, sizeof where);
    fault_disarm();
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a write failing with ENOSPC fails the sweep");
    tap_ok(fired == 5 && strstr(where, wr_kind), "%s: at the fifth transfer, a write: %s", path, where);
    msg = ferry_last_error();
    tap_ok(strstr(msg, nvme_path(s)) && strstr(msg, "disk is full") && strstr(msg, "block ") &&
               strstr(msg, strerror(ENOSPC)),
           "the message names the file, the block and the full disk: %s", msg);
    nvme_destroy(s);
    s = NULL;

    /* fallocate refused with ENOSPC (every call of that kind, uncounted):
     * the disk is too small at setup. */
    fault_refuse("fallocate", ENOSPC);
    st = io_open(p, &s);
    fault_refuse(NULL, 0);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a refused fallocate fails nvme_open");
    msg = ferry_last_error();
    char need[64];
    snprintf(need, sizeof need, "(%llu bytes)", (unsigned long long)nvme_region_bytes(IO_N, 3, 8192));
    tap_ok(strstr(msg, "too small") && strstr(msg, need) && strstr(msg, "free") && strstr(msg, dir),
           "saying the folder is too small, the bytes needed %s and free: %s", need, msg);
    nvme_destroy(s);
    pool_destroy(p);
    return 0;
}

/* A read sweep of the whole region compared with io_ref, and the status. */
static ferry_status io_round_trip(pool *p, nvme_store **s, bool *same)
{
    ferry_status st = io_open(p, s);
    if (st == FERRY_OK) st = io_sweep(*s, NVME_WRITE, NULL);
    if (st == FERRY_OK) st = io_sweep(*s, NVME_READ, same);
    return st;
}

static int test_io_refusals(void)
{
    pool *p = NULL;
    pool_config pc = POOL_CONFIG_INIT;
    pc.pin = POOL_PIN_NEVER;
    if (pool_create(&pc, &p) != FERRY_OK)
        return 1;
    nvme_store *s = NULL;
    bool same = false;

    /* io_uring refused at setup: the threads, the same bytes. */
    fault_refuse("io_uring_queue_init", EPERM);
    ferry_status st = io_round_trip(p, &s, &same);
    TAP_IS_STATUS(st, FERRY_OK, "io_uring refused (EPERM): the store opens and sweeps (%s)",
                  st ? ferry_last_error() : nvme_describe(s));
    tap_ok(same && nvme_io_path_of(s) == NVME_IO_THREADS && strstr(nvme_describe(s), "io_uring refused") &&
               strstr(nvme_describe(s), "seccomp"),
           "through the threads, every byte right, and it says why: %s", nvme_describe(s));
    nvme_destroy(s);
    s = NULL;
    IO = NVME_IO_URING;
    st = io_open(p, &s);
    IO = NVME_IO_AUTO;
    fault_refuse(NULL, 0);
    TAP_IS_STATUS(st, FERRY_ERR_UNSUPPORTED, "io_uring refused and asked for alone: nvme_open fails");
    tap_ok(strstr(ferry_last_error(), "seccomp") && strstr(ferry_last_error(), "io_uring_disabled") &&
               strstr(ferry_last_error(), strerror(EPERM)),
           "naming seccomp, the sysctl and EPERM: %s", ferry_last_error());
    nvme_destroy(s);
    s = NULL;

    /* The next submissions refused with EAGAIN, then the kernel recovers. */
    st = io_open(p, &s);
    fault_again(3);
    if (st == FERRY_OK) st = io_sweep(s, NVME_WRITE, NULL);
    if (st == FERRY_OK) st = io_sweep(s, NVME_READ, &same);
    TAP_IS_STATUS(st, FERRY_OK, "three submissions refused with EAGAIN are waited out (%s)",
                  st ? ferry_last_error() : "paused, then submitted");
    tap_ok(same, "and every byte is right");
    /* Refused without end: a sentence, not a spin. */
    fault_again(1 << 30);
    st = io_sweep(s, NVME_READ, &same);
    fault_again(0);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "submissions refused with EAGAIN without end fail the sweep");
    tap_ok(strstr(ferry_last_error(), "EAGAIN") && strstr(ferry_last_error(), nvme_path(s)),
           "saying so: %s", ferry_last_error());
    nvme_destroy(s);
    s = NULL;

    /* A file system that asks 8 KiB O_DIRECT alignment. */
    fault_set_dio_align(8192);
    st = io_round_trip(p, &s, &same);
    TAP_IS_STATUS(st, FERRY_OK, "a file aligned to 8 KiB opens and sweeps (%s)", st ? ferry_last_error() : nvme_describe(s));
    tap_ok(same && nvme_align(s) == 8192 && strstr(nvme_describe(s), "aligned to 8.0 KiB") &&
               nvme_file_bytes(s) % 8192 == 0,
           "every byte right, aligned as asked, the file a multiple of it (%llu bytes)",
           (unsigned long long)nvme_file_bytes(s));
    nvme_destroy(s);
    s = NULL;
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.block_bytes = 4096;
    c.pool = p;
    st = nvme_create(&c, &s);
    if (st == FERRY_OK) st = nvme_add_region(s, "r", IO_N, 3, names, cats, NULL);
    if (st == FERRY_OK) st = nvme_open(s);
    fault_set_dio_align(0);
    TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "a 4 KiB block on a file aligned to 8 KiB is refused");
    tap_ok(strstr(ferry_last_error(), "4096") && strstr(ferry_last_error(), "8192") &&
               strstr(ferry_last_error(), "alignment"),
           "naming both: %s", ferry_last_error());
    nvme_destroy(s);
    pool_destroy(p);
    return 0;
}

static int test_io(void)
{
    uint64_t rng = 77;
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < IO_N; i++)
            io_ref[a][i] = (float)tap_rand_unit(&rng);
    IO = NVME_IO_URING;
    int rc = test_io_path();
    IO = NVME_IO_THREADS;
    if (rc == 0)
        rc = test_io_path();
    IO = NVME_IO_AUTO;
    return rc ? rc : test_io_refusals();
}

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

/* No state file may outlive its engine. */
static bool no_state_file(char *why, size_t cap)
{
    DIR *d = opendir(dir);
    bool none = true;
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;)
        if (strncmp(ent->d_name, "ferry-state-", 12) == 0) {
            snprintf(why, cap, "'%s/%s' was left behind", dir, ent->d_name);
            none = false;
        }
    if (d)
        closedir(d);
    return none;
}

static bool setup_check(void *p, ferry_status st, char *why, size_t cap)
{
    setup_ctx *c = p;
    if (st != FERRY_OK) {
        ferry_engine_destroy(c->e);
        c->e = NULL;
        return no_state_file(why, cap);
    }
    return fixture_holds(&fx, c->e, 0, why, cap);
}

static void setup_finish(void *p)
{
    setup_ctx *c = p;
    ferry_engine_destroy(c->e);
    c->e = NULL;
}

static int walk_setup(void)
{
    setup_ctx c = {engine_config(), NULL};
    walk_scenario s = {.name = "engine setup, offload nvme with the master weights on disk", .ctx = &c,
                       .act = setup_act, .check = setup_check, .finish = setup_finish};
    walk(&s, false);
    walk(&s, true);
    return 0;
}

/* ---- step ---- */

typedef struct step_ctx {
    ferry_engine_config cfg;
    ferry_engine *e;
    char path[300], earlier[300], after[300];
} step_ctx;

/* The gradients of one micro-batch, in place (fault off). */
static ferry_status backward(ferry_engine *e)
{
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    for (int g = 0; g < fx.groups && st == FERRY_OK; g++) {
        void *w, *dw;
        st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
        if (st == FERRY_OK) st = ferry_engine_grads(e, g, &dw);
        if (st == FERRY_OK) st = ferry_engine_synchronize(e);
        for (size_t i = 0; st == FERRY_OK && i < gpt2_group_numel(fx.model, g); i++)
            ((float *)dw)[i] = 0.01f * (float)(i % 7) - 0.03f + 0.001f * (float)g;
        if (st == FERRY_OK) st = ferry_engine_release(e, g, FERRY_PHASE_BACKWARD);
    }
    return st;
}

static ferry_status step_act(void *p, uint64_t at, bool persistent)
{
    (void)at, (void)persistent;
    step_ctx *c = p;
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 1e-2f;
    o.weight_decay = 0.1f;
    ferry_status st = ferry_engine_step(c->e, &o, NULL);
    ferry_status sync = ferry_engine_synchronize(c->e);
    return st != FERRY_OK ? st : sync;
}

static ferry_status step_prepare(void *p)
{
    step_ctx *c = p;
    ferry_engine_destroy(c->e);
    c->e = NULL;
    ferry_status st = fixture_engine(&fx, &c->cfg, 0, &c->e);
    if (st == FERRY_OK) st = backward(c->e);
    if (st == FERRY_OK) st = file_copy(c->earlier, c->path) ? FERRY_OK : FERRY_ERR_IO;
    return st;
}

static bool step_check(void *p, ferry_status st, char *why, size_t cap)
{
    step_ctx *c = p;
    ferry_status saved = ferry_engine_save(c->e, c->path, NULL, 0);
    if (saved == FERRY_OK && !file_same(c->path, c->earlier) && !file_same(c->path, c->after)) {
        snprintf(why, cap, "after the %s step, a save succeeded with a state that is neither the one before the "
                           "step nor the one after it", st == FERRY_OK ? "successful" : "failed");
        return false;
    }
    if (saved != FERRY_OK && !file_same(c->path, c->earlier)) {
        snprintf(why, cap, "a refused save changed the earlier checkpoint");
        return false;
    }
    if (st == FERRY_OK && (saved != FERRY_OK || !file_same(c->path, c->after))) {
        snprintf(why, cap, "the step succeeded, but its state is not the fault-free step's (%s)",
                 saved != FERRY_OK ? ferry_last_error() : "the checkpoints differ");
        return false;
    }
    return true;
}

static void step_finish(void *p)
{
    step_ctx *c = p;
    ferry_engine_destroy(c->e);
    c->e = NULL;
}

static int walk_step(void)
{
    step_ctx c;
    memset(&c, 0, sizeof c);
    c.cfg = engine_config();
    snprintf(c.path, sizeof c.path, "%s/state.ferry", dir);
    snprintf(c.earlier, sizeof c.earlier, "%s/earlier.copy", dir);
    snprintf(c.after, sizeof c.after, "%s/after.copy", dir);
    /* The checkpoints before and after a fault-free step. */
    ferry_status st = fixture_engine(&fx, &c.cfg, 0, &c.e);
    if (st == FERRY_OK) st = ferry_engine_save(c.e, c.earlier, NULL, 0);
    if (st == FERRY_OK) st = backward(c.e);
    if (st == FERRY_OK) st = step_act(&c, 0, false);
    if (st == FERRY_OK) st = ferry_engine_save(c.e, c.after, NULL, 0);
    ferry_engine_destroy(c.e);
    c.e = NULL;
    if (!tap_is_status(st, FERRY_OK, "step: the checkpoints before and after a fault-free step"))
        return 1;
    tap_ok(!file_same(c.earlier, c.after), "step: they differ");
    walk_scenario s = {.name = "one optimizer step, offload nvme with the master weights on disk", .ctx = &c,
                       .prepare = step_prepare, .act = step_act, .check = step_check, .finish = step_finish};
    walk(&s, false);
    walk(&s, true);
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (!mkdtemp(dir) || !fixture_open(&fx)) {
        fprintf(stderr, "test_fault_nvme: cannot make '%s' or the model: %s\n", dir, ferry_last_error());
        return 1;
    }
    int rc = 2;
    if (strcmp(what, "io") == 0)
        rc = test_io();
    else if (strcmp(what, "setup") == 0)
        rc = walk_setup();
    else if (strcmp(what, "step") == 0)
        rc = walk_step();
    else
        fprintf(stderr, "usage: test_fault_nvme io|setup|step\n");
    fixture_close(&fx);
    rm_rf(dir);
    return rc == 0 ? tap_done() : rc;
}
