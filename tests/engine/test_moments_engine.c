/* Compact Adam moments in the engine (engine config `moments`): with bf16
 * and 8bit, optimizer and params modes give bitwise the same master
 * weights, moments and upload copies over the split fixture's steps
 * (clipping, weight decay with an exempt group and range, micro-batches),
 * a second run and another thread count the same bits, the weights within
 * a tenth of what the steps can move them of the fp32 moments' run; the
 * host pool holds the compact moments (by hand: moments_bytes of each group, pool-rounded) and
 * exactly what the plan counts; f32 keeps fp32 moments; the combinations
 * the CPU's update cannot serve (offload none, the NVMe tier, a forced
 * split) are refused with a sentence; a checkpoint saves the compact state
 * as it is and resumes bitwise, and resuming with another form converts.
 * With data parallelism on in a world of one (data_parallel 1: each group a
 * slot of whole norm tiles, padded past its end, the partitioned update and
 * the gathered save) the state is bitwise the one alone, the host pool the
 * plan's for a ranked run, and the saved file byte for byte the one alone
 * writes. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/engine.h"
#include "engine/split_fixture.h"
#include "offload/pool.h"
#include "optim/moments.h"
#include "tap.h"
#include "tests/test_files.h"

static ferry_engine *make_form(ferry_moments form, ferry_offload mode, int threads)
{
    ferry_engine_config cfg = config_on(FERRY_BACKEND_HOST, FERRY_DTYPE_F32, 0);
    cfg.moments = form;
    cfg.offload = mode;
    cfg.optimizer_threads = threads;
    cfg.moments_seed = 99;
    return make_cfg(&cfg);
}

static bool same_state(ferry_engine *a, ferry_engine *b, ferry_moments form)
{
    if (ferry_engine_synchronize(a) != FERRY_OK || ferry_engine_synchronize(b) != FERRY_OK)
        return false;
    for (int g = 0; g < GROUPS; g++) {
        engine_group *x = &a->groups.g[g], *y = &b->groups.g[g];
        size_t mb = moments_bytes(form, numel[g]);
        if (memcmp(x->master, y->master, numel[g] * 4) || memcmp(x->mq, y->mq, mb) || memcmp(x->vq, y->vq, mb) ||
            (x->host_weights && y->host_weights &&
             memcmp(x->host_weights, y->host_weights, numel[g] * a->ctx.act_size))) {
            tap_diag("  group %d differs", g);
            return false;
        }
    }
    return true;
}

static void test_resume(ferry_moments form, ferry_engine *ref);
static void test_world_of_one(ferry_moments form, ferry_engine *alone);
static void test_nvme(ferry_moments form);

static void test_form(ferry_moments form, ferry_engine *f32)
{
    const char *name = ferry_moments_name(form);
    ferry_engine *opt = make_form(form, FERRY_OFFLOAD_OPTIMIZER, 2);
    tap_ok(opt != NULL, "%s: optimizer mode sets up", name);
    if (!opt)
        return;
    bool compact = true;
    uint64_t want = 0;
    for (int g = 0; g < GROUPS; g++) {
        compact &= opt->groups.g[g].m == NULL && opt->groups.g[g].mq != NULL && opt->groups.g[g].vq != NULL;
        want += 2 * pool_charge(moments_bytes(form, numel[g]));
    }
    tap_ok(compact, "%s: the groups hold compact moments, no fp32 ones", name);
    engine_memory_plan plan;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    size_t n[GROUPS];
    memcpy(n, numel, sizeof n);
    engine_plan_request rq = {.backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_F32,
                              .offload = FERRY_OFFLOAD_OPTIMIZER, .prefetch_groups = 2, .micro_batches = 1,
                              .group_numel = n, .ngroups = GROUPS, .moments = form};
    ferry_status st = engine_plan_memory(&rq, &plan);
    uint64_t planned = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        planned += plan.host_bytes[c];
    ferry_engine_memory_stats(opt, &ms);
    tap_ok(st == FERRY_OK && plan.host_bytes[FERRY_MEM_OPTIMIZER] == want,
           "%s: the plan's host moments %llu bytes, by hand %llu", name,
           (unsigned long long)plan.host_bytes[FERRY_MEM_OPTIMIZER], (unsigned long long)want);
    tap_ok(ms.host_in_use_bytes == planned, "%s: the engine allocates what the plan says: %llu host bytes, planned %llu",
           name, (unsigned long long)ms.host_in_use_bytes, (unsigned long long)planned);
    ferry_engine *par = make_form(form, FERRY_OFFLOAD_PARAMS, 2), *one = make_form(form, FERRY_OFFLOAD_OPTIMIZER, 1);
    ferry_engine *again = make_form(form, FERRY_OFFLOAD_OPTIMIZER, 2);
    st = train(opt, 0, STEPS);
    tap_ok(st == FERRY_OK, "%s: optimizer mode trains %d steps", name, STEPS);
    tap_ok(par && train(par, 0, STEPS) == FERRY_OK && same_state(opt, par, form),
           "%s: params mode bitwise as optimizer mode", name);
    tap_ok(one && train(one, 0, STEPS) == FERRY_OK && same_state(opt, one, form),
           "%s: one optimizer thread bitwise as two", name);
    tap_ok(again && train(again, 0, STEPS) == FERRY_OK && same_state(opt, again, form),
           "%s: a second run bitwise as the first", name);
    /* close to the fp32 moments' run: within a tenth of the most the steps can move a weight */
    double diff = 0;
    if (st == FERRY_OK && (st = ferry_engine_synchronize(f32)) == FERRY_OK) /* their last updates landed */
        st = ferry_engine_synchronize(opt);
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++)
        for (size_t i = 0; i < numel[g]; i++)
            diff = fmax(diff, fabs((double)opt->groups.g[g].master[i] - f32->groups.g[g].master[i]));
    double lr_steps = 0.01 * STEPS; /* Adam moves each weight by at most about lr per step */
    tap_ok(st == FERRY_OK && diff > 0 && diff < 0.1 * lr_steps, "%s: weights within %.2g of the fp32 moments' run (%d steps of lr 0.01 move them up "
                                  "to %.2g)", name, diff, STEPS, lr_steps);
    ferry_engine_destroy(par), ferry_engine_destroy(one), ferry_engine_destroy(again);
    test_world_of_one(form, opt);
    test_resume(form, opt);
    test_nvme(form);
    ferry_engine_destroy(opt);
}

/* Saved after 3 steps in `form`, resumed by a new engine of the same form:
 * the next 3 steps bitwise those of the run that went on (`ref`, 6 steps).
 * Resumed with the other forms: converted, the moments those of the file's
 * values in the new form. */
static void test_resume(ferry_moments form, ferry_engine *ref)
{
    const char *name = ferry_moments_name(form);
    char path[128];
    snprintf(path, sizeof path, "/tmp/ferry-moments-%d-%s.ckpt", (int)getpid(), name);
    ferry_engine *a = make_form(form, FERRY_OFFLOAD_OPTIMIZER, 2), *b = make_form(form, FERRY_OFFLOAD_PARAMS, 2);
    ferry_status st = a ? train(a, 0, 3) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = ferry_engine_save(a, path, "u", 1);
    tap_ok(st == FERRY_OK, "%s: saved after 3 steps (%s)", name, st == FERRY_OK ? "ok" : ferry_last_error());
    st = b ? ferry_engine_load(b, path, NULL, 0, NULL) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = train(b, 3, STEPS);
    tap_ok(st == FERRY_OK && same_state(ref, b, form), "%s: resumed (in params mode) at step 3, steps 4..%d bitwise "
                                                       "the run that went on", name, STEPS);
    for (int other = FERRY_MOMENTS_F32; other <= FERRY_MOMENTS_8BIT; other++) {
        if (other == (int)form)
            continue;
        ferry_engine *c = make_form((ferry_moments)other, FERRY_OFFLOAD_OPTIMIZER, 2);
        st = c ? ferry_engine_load(c, path, NULL, 0, NULL) : FERRY_ERR_STATE;
        size_t bad = 0;
        for (int g = 0; g < GROUPS && st == FERRY_OK; g++) {
            engine_group *x = &a->groups.g[g], *y = &c->groups.g[g];
            size_t n = numel[g], fb = moments_bytes((ferry_moments)other, n);
            unsigned char *want = malloc(fb);
            moments_convert(want, (ferry_moments)other, x->mq, form, n, 1);
            const void *got = other == FERRY_MOMENTS_F32 ? (void *)y->m : y->mq;
            bad += memcmp(want, got, fb) != 0 || memcmp(x->master, y->master, n * 4) != 0;
            free(want);
        }
        tap_ok(st == FERRY_OK && bad == 0, "%s checkpoint resumed with moments %s: converted (%s)", name,
               ferry_moments_name((ferry_moments)other), st == FERRY_OK ? "master and m as converted" : ferry_last_error());
        tap_ok(c && train(c, 3, 4) == FERRY_OK, "... and trains on");
        ferry_engine_destroy(c);
    }
    unlink(path);
    ferry_engine_destroy(a), ferry_engine_destroy(b);
}

/* The compact state of a partitioned engine (slots of part_cap elements in
 * the compact layout) against one alone: master, the moments' values and
 * the upload copy (where both keep one: alone, compact moments go through
 * the upload window) of every group's numel elements, and the slots'
 * padding zero. */
static size_t differing_slots(ferry_engine *dp, ferry_engine *alone, ferry_moments form)
{
    size_t bad = 0;
    for (int g = 0; g < GROUPS; g++) {
        engine_group *x = &dp->groups.g[g], *y = &alone->groups.g[g];
        size_t n = numel[g], cap = x->part_cap, esz = form == FERRY_MOMENTS_BF16 ? 2 : 1;
        bool same = memcmp(x->master, y->master, n * 4) == 0 && memcmp(x->mq, y->mq, n * esz) == 0 &&
                    memcmp(x->vq, y->vq, n * esz) == 0 &&
                    (!x->host_weights || !y->host_weights || /* the upload window keeps none */
                     memcmp(x->host_weights, y->host_weights, n * dp->ctx.act_size) == 0);
        if (form == FERRY_MOMENTS_8BIT) {
            size_t blocks = moments_q8_blocks(n) * sizeof(float);
            same &= memcmp(moments_q8_absmax(x->mq, cap), moments_q8_absmax(y->mq, n), blocks) == 0 &&
                    memcmp(moments_q8_absmax(x->vq, cap), moments_q8_absmax(y->vq, n), blocks) == 0;
        }
        for (size_t i = n; i < cap; i++) /* the padding */
            same &= x->master[i] == 0.0f && ((unsigned char *)x->mq)[i * esz] == 0;
        if (!same)
            tap_diag("  group %d differs (slot of %zu for %zu elements)", g, cap, n);
        bad += !same;
    }
    return bad;
}

static void test_world_of_one(ferry_moments form, ferry_engine *alone)
{
    const char *name = ferry_moments_name(form);
    ferry_engine_config cfg = config_on(FERRY_BACKEND_HOST, FERRY_DTYPE_F32, 0);
    cfg.moments = form;
    cfg.optimizer_threads = 2;
    cfg.moments_seed = 99;
    cfg.data_parallel = 1;
    ferry_engine *dp = make_cfg(&cfg);
    tap_ok(dp && dp->dp && dp->groups.g[0].part_cap > numel[0], "%s, data_parallel 1: sets up partitioned (group 0 a "
           "slot of %zu for %zu)", name, dp ? dp->groups.g[0].part_cap : 0, numel[0]);
    if (!dp)
        return;
    engine_memory_plan plan;
    size_t n[GROUPS];
    memcpy(n, numel, sizeof n);
    engine_plan_request rq = {.backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_F32,
                              .offload = FERRY_OFFLOAD_OPTIMIZER, .prefetch_groups = 2, .micro_batches = 1,
                              .group_numel = n, .ngroups = GROUPS, .moments = form, .ranks = 1, .collective = true};
    ferry_status st = engine_plan_memory(&rq, &plan);
    uint64_t planned = 0, want = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        planned += plan.host_bytes[c];
    for (int g = 0; g < GROUPS; g++)
        want += 2 * pool_charge(moments_bytes(form, dp->groups.g[g].part_cap));
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(dp, &ms);
    tap_ok(st == FERRY_OK && plan.host_bytes[FERRY_MEM_OPTIMIZER] == want && ms.host_in_use_bytes == planned,
           "%s, data_parallel 1: the engine allocates the ranked plan's %llu host bytes (%llu in use; moments %llu, "
           "by hand %llu)", name, (unsigned long long)planned, (unsigned long long)ms.host_in_use_bytes,
           (unsigned long long)plan.host_bytes[FERRY_MEM_OPTIMIZER], (unsigned long long)want);
    st = train(dp, 0, STEPS);
    if (st == FERRY_OK && (st = ferry_engine_synchronize(dp)) == FERRY_OK)
        st = ferry_engine_synchronize(alone);
    tap_ok(st == FERRY_OK && differing_slots(dp, alone, form) == 0,
           "%s, data_parallel 1: %d steps bitwise as alone, the slots' padding zero (%s)", name, STEPS,
           st == FERRY_OK ? "ok" : ferry_last_error());
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "/tmp/ferry-moments-%d-%s-dp.ckpt", (int)getpid(), name);
    snprintf(pb, sizeof pb, "/tmp/ferry-moments-%d-%s-alone.ckpt", (int)getpid(), name);
    long na = -1, nb = -1;
    unsigned char *a = NULL, *b = NULL;
    if (st == FERRY_OK && (st = ferry_engine_save(dp, pa, "u", 1)) == FERRY_OK &&
        (st = ferry_engine_save(alone, pb, "u", 1)) == FERRY_OK) {
        a = test_slurp(pa, &na);
        b = test_slurp(pb, &nb);
    }
    tap_ok(a && b && na == nb && memcmp(a, b, (size_t)na) == 0,
           "%s, data_parallel 1: the gathered checkpoint is byte for byte the one alone writes (%ld and %ld bytes)",
           name, na, nb);
    free(a), free(b);
    /* and it loads back into the slots: a resave is the same file */
    ferry_engine *back = make_cfg(&cfg);
    st = back ? ferry_engine_load(back, pb, NULL, 0, NULL) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = ferry_engine_save(back, pa, "u", 1);
    a = test_slurp(pa, &na);
    b = test_slurp(pb, &nb);
    tap_ok(st == FERRY_OK && a && b && na == nb && memcmp(a, b, (size_t)na) == 0,
           "%s, data_parallel 1: loaded into the slots and saved again, the same bytes (%s)", name,
           st == FERRY_OK ? "ok" : ferry_last_error());
    free(a), free(b);
    unlink(pa), unlink(pb);
    ferry_engine_destroy(back);
    ferry_engine_destroy(dp);
}

static void test_refusals(void)
{
    static const char *what[] = {"offload none", "a forced split", "an unknown form"};
    for (int k = 0; k < 3; k++) {
        ferry_engine_config cfg = config_on(FERRY_BACKEND_HOST, FERRY_DTYPE_F32, 0);
        cfg.moments = k == 2 ? (ferry_moments)7 : FERRY_MOMENTS_8BIT;
        if (k == 0)
            cfg.offload = FERRY_OFFLOAD_NONE;
        if (k == 1)
            cfg.device_update_groups = 1;
        ferry_engine *e = NULL;
        ferry_status st = ferry_engine_create(&cfg, &e);
        if (st == FERRY_OK && (st = add_groups(e)) == FERRY_OK)
            st = ferry_engine_setup(e);
        tap_ok(st == FERRY_ERR_INVALID_ARGUMENT, "8bit with %s refused: %s", what[k], ferry_last_error());
        ferry_engine_destroy(e);
    }
}

/* ---- the NVMe tier ----
 *
 * The moments on disk in their compact form (and the master weights with
 * nvme_master), a window of 8 tiles of 4096 or 6144 elements, so a group
 * is up to 49 tiles and an 8-bit block of mixed decay (the exempt range) is
 * updated inside a tile: over the fixture's steps the checkpoint, which
 * holds master, m and v as the engine keeps them, is byte for byte the
 * in-memory optimizer run's, and so are the device weights; saved and
 * resumed on the disk it goes on bitwise; a file of another form converts
 * through the disk as in memory; a truncated file ends the run. The file
 * and the planner's count are the compact forms' bytes, by hand. */

static char nvme_dir[] = "/tmp/ferry-test-moments-nvme-XXXXXX";
/* 8 slots: tiles of 16 KiB of fp32 an array with the master on disk (4096
 * elements), 24 KiB without (6144), so a compact segment is smaller than an
 * fp32 one even padded to 4 KiB. */
#define NVME_WINDOW ((uint64_t)384 << 10)

static ferry_engine *make_nvme(ferry_moments form, ferry_offload mode, bool master)
{
    ferry_engine_config cfg = config_on(FERRY_BACKEND_HOST, FERRY_DTYPE_F32, 0);
    cfg.moments = form;
    cfg.offload = mode;
    cfg.nvme_path = nvme_dir;
    cfg.nvme_master = master;
    cfg.nvme_window_bytes = NVME_WINDOW;
    cfg.nvme_block_bytes = 4096;
    cfg.optimizer_threads = 2;
    cfg.moments_seed = 99;
    return make_cfg(&cfg);
}

static void ckpt_path(char *buf, size_t cap, const char *what)
{
    snprintf(buf, cap, "/tmp/ferry-moments-nvme-%d-%s.ckpt", (int)getpid(), what);
}

/* Whether files a and b hold the same bytes (sizes in the diagnostics). */
static bool same_file(const char *a, const char *b)
{
    long na = 0, nb = 0;
    unsigned char *x = test_slurp(a, &na), *y = test_slurp(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, (size_t)na) == 0;
    if (!same)
        tap_diag("  '%s' (%ld bytes) and '%s' (%ld bytes) differ", a, na, b, nb);
    free(x), free(y);
    return same;
}

static bool same_device_weights(ferry_engine *a, ferry_engine *b)
{
    if (ferry_engine_synchronize(a) != FERRY_OK || ferry_engine_synchronize(b) != FERRY_OK)
        return false;
    for (int g = 0; g < GROUPS; g++)
        if (memcmp(a->groups.g[g].dev_weights, b->groups.g[g].dev_weights, numel[g] * a->ctx.act_size)) {
            tap_diag("  group %d's device weights differ", g);
            return false;
        }
    return true;
}

static ferry_status train_save(ferry_engine *e, int from, int to, const char *path)
{
    ferry_status st = e ? train(e, from, to) : FERRY_ERR_STATE;
    return st == FERRY_OK ? ferry_engine_save(e, path, "u", 1) : st;
}

/* The in-memory run's checkpoints at step 3 and STEPS ("mem3", "memN"). */
static ferry_status reference_files(ferry_moments form, char *mem3, char *memn, size_t cap)
{
    ckpt_path(mem3, cap, "mem3");
    ckpt_path(memn, cap, "memN");
    ferry_engine *ref = make_form(form, FERRY_OFFLOAD_OPTIMIZER, 2);
    ferry_status st = train_save(ref, 0, 3, mem3);
    if (st == FERRY_OK)
        st = train_save(ref, 3, STEPS, memn);
    ferry_engine_destroy(ref);
    return st;
}

/* The file's bytes by hand: per group, tiles of 4096 (master on disk) or
 * 6144 elements, each array's segment of a tile the form's bytes
 * (moments_bytes; fp32 master) padded to 4 KiB. */
static uint64_t disk_by_hand(ferry_moments form, bool master)
{
    uint64_t bytes = 0;
    size_t tile = master ? 4096 : 6144;
    for (int g = 0; g < GROUPS; g++)
        for (size_t at = 0; at < numel[g]; at += tile) {
            size_t len = numel[g] - at < tile ? numel[g] - at : tile;
            bytes += 2 * ((moments_bytes(form, len) + 4095) / 4096 * 4096) + (master ? (4 * len + 4095) / 4096 * 4096 : 0);
        }
    return bytes;
}

/* The disk the engine took and the planner counts, against the hand's count. */
static void nvme_disk_bytes(ferry_engine *e, ferry_moments form, ferry_offload mode, bool master, const char *what)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (e)
        ferry_engine_memory_stats(e, &ms);
    size_t n[GROUPS];
    memcpy(n, numel, sizeof n);
    engine_plan_request rq = {.backend = FERRY_BACKEND_HOST, .dtype = FERRY_DTYPE_F32, .offload = mode,
                              .prefetch_groups = 2, .micro_batches = 1, .group_numel = n, .ngroups = GROUPS,
                              .moments = form, .disk = true, .disk_master = master,
                              .disk_window_bytes = NVME_WINDOW, .disk_block_bytes = 4096, .ranks = 1};
    engine_memory_plan plan;
    ferry_status st = engine_plan_memory(&rq, &plan);
    uint64_t want = disk_by_hand(form, master);
    tap_ok(e && ms.disk_bytes == want && st == FERRY_OK && plan.disk_bytes == want,
           "%s: the file %llu bytes, planned %llu, by hand %llu", what, (unsigned long long)ms.disk_bytes,
           (unsigned long long)plan.disk_bytes, (unsigned long long)want);
}

/* One NVMe layout (mode, master on disk or not) against the in-memory run. */
static void nvme_case(ferry_moments form, ferry_offload mode, bool master, const char *mem3, const char *memn,
                      ferry_engine *opt)
{
    char what[96], got3[160], gotn[160], resumed[160];
    snprintf(what, sizeof what, "%s on the NVMe tier (%s%s)", ferry_moments_name(form), ferry_offload_name(mode),
             master ? ", master on disk" : "");
    ckpt_path(got3, sizeof got3, "nvme3");
    ckpt_path(gotn, sizeof gotn, "nvmeN");
    ckpt_path(resumed, sizeof resumed, "nvmeR");
    ferry_engine *e = make_nvme(form, mode, master);
    bool on_disk = e != NULL;
    for (int g = 0; e && g < GROUPS; g++)
        on_disk &= !e->groups.g[g].mq && !e->groups.g[g].vq && !e->groups.g[g].m && (master == !e->groups.g[g].master);
    tap_ok(on_disk, "%s: sets up, the moments%s in no host buffer", what, master ? " and master weights" : "");
    nvme_disk_bytes(e, form, mode, master, what);
    ferry_status st = train_save(e, 0, 3, got3);
    tap_ok(st == FERRY_OK && same_file(got3, mem3), "%s: the checkpoint after 3 steps is the in-memory run's, byte "
           "for byte (%s)", what, st == FERRY_OK ? "saved" : ferry_last_error());
    st = e ? train_save(e, 3, STEPS, gotn) : FERRY_ERR_STATE;
    tap_ok(st == FERRY_OK && same_file(gotn, memn), "%s: after %d steps too: master, m and v bitwise", what, STEPS);
    if (mode == FERRY_OFFLOAD_NVME)
        tap_ok(e && same_device_weights(e, opt), "%s: the device weights bitwise the in-memory run's", what);
    ferry_engine_destroy(e);
    ferry_engine *r = make_nvme(form, mode, master);
    st = r ? ferry_engine_load(r, got3, NULL, 0, NULL) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = train_save(r, 3, STEPS, resumed);
    tap_ok(st == FERRY_OK && same_file(resumed, memn), "%s: resumed from its step-3 file, steps 4..%d bitwise the "
           "run that went on (%s)", what, STEPS, st == FERRY_OK ? "same file" : ferry_last_error());
    ferry_engine_destroy(r);
    unlink(got3), unlink(gotn), unlink(resumed);
}

/* mem3 (in `form`) resumed by an engine of each other form on the disk and
 * saved at once: the file the same engine in host memory writes. */
static void nvme_convert(ferry_moments form, const char *mem3)
{
    for (int other = FERRY_MOMENTS_F32; other <= FERRY_MOMENTS_8BIT; other++) {
        if (other == (int)form)
            continue;
        char want[160], got[160];
        ckpt_path(want, sizeof want, "convM");
        ckpt_path(got, sizeof got, "convD");
        ferry_engine *m = make_form((ferry_moments)other, FERRY_OFFLOAD_OPTIMIZER, 2);
        ferry_engine *d = make_nvme((ferry_moments)other, FERRY_OFFLOAD_NVME, true);
        ferry_status st = m ? ferry_engine_load(m, mem3, NULL, 0, NULL) : FERRY_ERR_STATE;
        if (st == FERRY_OK)
            st = ferry_engine_save(m, want, "u", 1);
        ferry_status sd = d ? ferry_engine_load(d, mem3, NULL, 0, NULL) : FERRY_ERR_STATE;
        if (sd == FERRY_OK)
            sd = ferry_engine_save(d, got, "u", 1);
        tap_ok(st == FERRY_OK && sd == FERRY_OK && same_file(got, want),
               "%s checkpoint resumed with moments %s on the disk: converted as in host memory (%s)",
               ferry_moments_name(form), ferry_moments_name((ferry_moments)other),
               sd == FERRY_OK ? "same file" : ferry_last_error());
        tap_ok(d && train(d, 3, 4) == FERRY_OK, "... and trains on");
        ferry_engine_destroy(m), ferry_engine_destroy(d);
        unlink(want), unlink(got);
    }
}

/* The store's file in nvme_dir, or "". */
static void nvme_state_file(char *path, size_t cap)
{
    path[0] = 0;
    DIR *d = opendir(nvme_dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "ferry-state-", 12))
            snprintf(path, cap, "%s/%s", nvme_dir, de->d_name);
    if (d)
        closedir(d);
}

/* The file truncated under a compact run: the next step's update fails
 * with a sentence naming the file, and so does every later call. */
static void nvme_truncated(ferry_moments form)
{
    ferry_engine *e = make_nvme(form, FERRY_OFFLOAD_NVME, true);
    ferry_status st = e ? train(e, 0, 2) : FERRY_ERR_STATE;
    char path[4200];
    if (st == FERRY_OK && (st = ferry_engine_synchronize(e)) == FERRY_OK)
        nvme_state_file(path, sizeof path);
    bool cut = st == FERRY_OK && path[0] && truncate(path, 4096) == 0;
    st = cut ? train(e, 2, 4) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = ferry_engine_synchronize(e);
    char msg[ERR_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "%s", ferry_last_error());
    tap_ok(cut && st != FERRY_OK && strstr(msg, path), "%s: the file truncated underneath ends the run: %s",
           ferry_moments_name(form), msg);
    char p[160];
    ckpt_path(p, sizeof p, "after");
    tap_ok(e && ferry_engine_save(e, p, "u", 1) != FERRY_OK && access(p, F_OK) != 0,
           "%s: and no checkpoint is written from it", ferry_moments_name(form));
    ferry_engine_destroy(e);
}

static void test_nvme(ferry_moments form)
{
    char mem3[160], memn[160];
    ferry_status st = reference_files(form, mem3, memn, sizeof mem3);
    tap_ok(st == FERRY_OK, "%s: the in-memory run's checkpoints at steps 3 and %d (%s)", ferry_moments_name(form),
           STEPS, st == FERRY_OK ? "saved" : ferry_last_error());
    ferry_engine *opt = make_form(form, FERRY_OFFLOAD_OPTIMIZER, 2);
    if (!opt || train(opt, 0, STEPS) != FERRY_OK)
        tap_diag("the in-memory run failed: %s", ferry_last_error());
    nvme_case(form, FERRY_OFFLOAD_NVME, false, mem3, memn, opt);
    nvme_case(form, FERRY_OFFLOAD_NVME, true, mem3, memn, opt);
    nvme_case(form, FERRY_OFFLOAD_PARAMS, false, mem3, memn, opt);
    nvme_case(form, FERRY_OFFLOAD_PARAMS, true, mem3, memn, opt);
    nvme_convert(form, mem3);
    nvme_truncated(form);
    ferry_engine_destroy(opt);
    unlink(mem3), unlink(memn);
}

int main(void)
{
    if (!mkdtemp(nvme_dir)) {
        printf("1..0 # SKIP cannot create a folder in /tmp\n");
        return 77;
    }
    ferry_engine *f32 = make_form(FERRY_MOMENTS_F32, FERRY_OFFLOAD_OPTIMIZER, 2);
    tap_ok(f32 && f32->groups.g[0].m && !f32->groups.g[0].mq, "f32: fp32 moments as before");
    tap_ok(f32 && train(f32, 0, STEPS) == FERRY_OK, "f32: trains");
    test_form(FERRY_MOMENTS_BF16, f32);
    test_form(FERRY_MOMENTS_8BIT, f32);
    test_refusals();
    ferry_engine_destroy(f32);
    rmdir(nvme_dir);
    return tap_done();
}
