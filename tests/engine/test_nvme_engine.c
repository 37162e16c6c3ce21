/* The NVMe tier on the host backend with the tiny GPT-2 and a window about
 * a twentieth of the state on disk:
 * - offload nvme (moments on disk; moments and master weights; several
 *   micro-batches; params mode with a disk) gives bitwise the losses and
 *   final weights of optimizer mode over 20 steps (in f32, and in bf16
 *   storage with FERRY_TEST_DTYPE=bf16);
 * - the host pool holds what the layout says and no moment, the file what
 *   the store's layout says; a host budget too small for optimizer mode
 *   fits nvme mode;
 * - a checkpoint holds the state itself: saved in nvme mode it is the same
 *   bytes as optimizer mode's, and resumes in optimizer, params and nvme
 *   modes (and back) exactly as an unbroken run;
 * - a flipped byte, the file removed or truncated underneath end the run
 *   with an error naming the file; no later step, synchronize or save goes
 *   on, and the checkpoint saved before is whole;
 * - bad configurations are refused with a sentence. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "models/gpt2_plan.h"
#include "offload/nvme.h"
#include "engine_fixture.h"
#include "tap.h"
#include "token_batches.h"
#include "test_dtype.h"

enum { STEPS = 20, HALF = 10, B = 2, T = 32 };

static gpt2_config tiny;
static const uint64_t SEED = 4321;
static char dir[] = "/tmp/ferry-test-nvme-engine-XXXXXX";
static char ckpt[4200], ckpt2[4200];

typedef struct run_opts {
    ferry_offload mode;
    bool disk, master;
    int accum, prefetch;
    uint64_t host_budget;
    const char *load;     /* a checkpoint to start from (after step HALF) */
    const char *save;     /* save after step HALF and stop there */
    /* called after step `at` (1-based), before the next; a non-OK status ends the run there */
    ferry_status (*between)(ferry_engine *e, int at);
} run_opts;

typedef struct run_result {
    float loss[STEPS];
    float *weights;
    size_t nweights;
    ferry_memory_stats ms;
    char describe[1600];
    ferry_status failed;   /* the status that ended the run early (FERRY_OK: it ran whole) */
    char message[1200];
    int failed_at;         /* the step whose call failed */
} run_result;

static void batch_tokens(int step, int micro, int32_t *tokens, int32_t *targets)
{
    static const token_recipe recipe = {91, 131, 17, 5, 1, 0, 89, 4};
    token_batch(&recipe, step, micro, B * T, tiny.vocab_size, tokens, targets);
}

static ferry_engine_config config_of(const run_opts *ro)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, ro->mode, test_dtype(), 2);
    cfg.prefetch_groups = ro->prefetch;
    cfg.host_budget_bytes = ro->host_budget;
    if (ro->disk) {
        cfg.nvme_path = dir;
        cfg.nvme_window_bytes = 96 << 10; /* 8 tiles of 1024 elements, 3 arrays */
        cfg.nvme_block_bytes = 4096;
        cfg.nvme_queue_depth = 4;
        cfg.nvme_master = ro->master;
    }
    return cfg;
}

/* Runs steps [first, last) (0-based), loading before and saving after as asked. */
static ferry_status run(const run_opts *ro, run_result *out)
{
    memset(out, 0, sizeof *out);
    ferry_engine_config cfg = config_of(ro);
    efix f;
    ferry_status st = efix_engine(&f, &tiny, &cfg, SEED, B, T, false);
    if (st == FERRY_OK) snprintf(out->describe, sizeof out->describe, "%s", ferry_engine_describe(f.e));
    if (st == FERRY_OK) st = efix_acts(&f);
    ferry_step_options o = efix_options(3e-3f, 0.01f, 1.0f);
    int first = ro->load ? HALF : 0, last = ro->save ? HALF : STEPS;
    if (st == FERRY_OK && ro->load)
        st = ferry_engine_load(f.e, ro->load, NULL, 0, NULL);
    if (st != FERRY_OK)
        tap_diag("setup failed: %s", ferry_last_error());
    for (int step = first; step < last && st == FERRY_OK; step++) {
        st = efix_micro_batches(&f, batch_tokens, step, 0, ro->accum, 1.0f / (float)ro->accum, NULL, &out->loss[step]);
        if (st == FERRY_OK) st = ferry_engine_step(f.e, &o, NULL);
        if (st == FERRY_OK && ro->between) st = ro->between(f.e, step + 1);
        if (st != FERRY_OK) {
            out->failed = st;
            out->failed_at = step + 1;
            snprintf(out->message, sizeof out->message, "%s", ferry_last_error());
        }
    }
    if (st == FERRY_OK && ro->save)
        st = ferry_engine_save(f.e, ro->save, "blob", 4);
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->weights, &out->nweights);
    if (st == FERRY_OK)
        out->ms = efix_memory(&f);
    if (st != FERRY_OK && out->failed == FERRY_OK) {
        out->failed = st;
        snprintf(out->message, sizeof out->message, "%s", ferry_last_error());
    }
    efix_close(&f);
    return st;
}

static void compare(const run_result *a, const run_result *b, int from, const char *what)
{
    efix_same_losses(a->loss, b->loss, from, STEPS, "%s: losses of steps %d..%d bitwise equal (last %.7f)", what,
                     from + 1, STEPS, (double)a->loss[STEPS - 1]);
    efix_same_weights(a->weights, a->nweights, b->weights, b->nweights, what);
}

/* The state file of the one engine running in dir ("" if none). */
static void state_file(char *out, size_t cap)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;)
        if (strncmp(ent->d_name, "ferry-state-", 12) == 0)
            snprintf(out, cap, "%s/%s", dir, ent->d_name);
    if (d)
        closedir(d);
}

static size_t total_params(void)
{
    gpt2_model *m = NULL;
    size_t n = 0;
    if (gpt2_create(&tiny, &m) == FERRY_OK)
        for (int g = 0; g < gpt2_num_groups(m); g++)
            n += gpt2_group_numel(m, g);
    gpt2_destroy(m);
    return n;
}

static run_result opt1, opt2;

static void test_modes_agree(void)
{
    run_opts o1 = {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 2, 0, NULL, NULL, NULL};
    run_opts o2 = o1;
    o2.accum = 2;
    tap_ok(run(&o1, &opt1) == FERRY_OK && run(&o2, &opt2) == FERRY_OK, "optimizer mode ran, 1 and 2 micro-batches");
    tap_ok(opt1.loss[STEPS - 1] < opt1.loss[0] - 0.3f, "and learns: loss %.4f -> %.4f", (double)opt1.loss[0],
           (double)opt1.loss[STEPS - 1]);
    static const struct {
        ferry_offload mode;
        bool master;
        int accum, prefetch;
        const char *name;
    } runs[] = {
        {FERRY_OFFLOAD_NVME, false, 1, 2, "nvme (moments on disk)"},
        {FERRY_OFFLOAD_NVME, true, 1, 2, "nvme (moments and master weights on disk)"},
        {FERRY_OFFLOAD_NVME, true, 2, 2, "nvme with master, 2 micro-batches"},
        {FERRY_OFFLOAD_PARAMS, true, 1, 1, "params with a disk (prefetch 1)"},
        {FERRY_OFFLOAD_PARAMS, false, 2, 0, "params with a disk (prefetch 0), 2 micro-batches"},
    };
    size_t n = total_params();
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        run_opts ro = {runs[i].mode, true, runs[i].master, runs[i].accum, runs[i].prefetch, 0, NULL, NULL, NULL};
        run_result got;
        if (run(&ro, &got) != FERRY_OK) {
            tap_ok(0, "%s ran: %s", runs[i].name, got.message);
            continue;
        }
        compare(&got, runs[i].accum == 1 ? &opt1 : &opt2, 0, runs[i].name);
        int arrays = runs[i].master ? 3 : 2;
        /* The state is far larger than the window it streams through. */
        tap_ok(got.ms.disk_bytes >= (uint64_t)n * 4 * (uint64_t)arrays && got.ms.disk_window_bytes == 96 << 10 &&
                   got.ms.disk_bytes > 10 * got.ms.disk_window_bytes,
               "%s: %llu bytes on disk through a %llu-byte window", runs[i].name,
               (unsigned long long)got.ms.disk_bytes, (unsigned long long)got.ms.disk_window_bytes);
        tap_ok(strstr(got.describe, "NVMe") && strstr(got.describe, dir), "%s: describe says so: %s", runs[i].name,
               got.describe);
        /* The planner, from the same layout tables, predicts it exactly. */
        gpt2_plan_request rq = {.cfg = &tiny, .batch = B, .seq = T, .offload = runs[i].mode, .recompute = false,
                                .prefetch_groups = runs[i].prefetch, .micro_batches = runs[i].accum,
                                .backend = FERRY_BACKEND_HOST, .dtype = test_dtype(), .ranks = 1, .device_budget = 0};
        gpt2_plan_disk disk = {runs[i].master, 96 << 10, 4096};
        gpt2_plan p;
        ferry_status st = gpt2_plan_predict_disk(&rq, &disk, &p);
        tap_ok(st == FERRY_OK && p.disk_bytes == got.ms.disk_bytes && p.host_bytes[FERRY_MEM_NVME] ==
                   got.ms.disk_window_bytes && p.host_total == got.ms.host_peak_bytes,
               "%s: memprof plan predicts the disk (%llu, measured %llu), the window (%llu, %llu) and the host pool "
               "(%llu, %llu)", runs[i].name, (unsigned long long)p.disk_bytes, (unsigned long long)got.ms.disk_bytes,
               (unsigned long long)p.host_bytes[FERRY_MEM_NVME], (unsigned long long)got.ms.disk_window_bytes,
               (unsigned long long)p.host_total, (unsigned long long)got.ms.host_peak_bytes);
        if (runs[i].mode == FERRY_OFFLOAD_NVME)
            tap_ok(p.device_total - p.activations + got.ms.device_peak_bytes[FERRY_MEM_ACTIVATIONS] ==
                       got.ms.device_total_peak_bytes,
                   "%s: and the device's weights, gradients and workspace (%llu with the measured activations, %llu)",
                   runs[i].name,
                   (unsigned long long)(p.device_total - p.activations + got.ms.device_peak_bytes[FERRY_MEM_ACTIVATIONS]),
                   (unsigned long long)got.ms.device_total_peak_bytes);
        free(got.weights);
    }
    char left[4200];
    state_file(left, sizeof left);
    tap_ok(left[0] == '\0', "no state file is left behind (%s)", left);
}

/* Host memory: the moments leave the pool; a budget optimizer mode cannot
 * meet, nvme mode can, to the byte memprof plan predicts. */
static void test_host_budget(void)
{
    gpt2_plan_request rq = {.cfg = &tiny, .batch = B, .seq = T, .offload = FERRY_OFFLOAD_NVME, .recompute = false,
                            .prefetch_groups = 2, .micro_batches = 1, .backend = FERRY_BACKEND_HOST,
                            .dtype = test_dtype(), .ranks = 1, .device_budget = 0};
    gpt2_plan_disk disk = {true, 96 << 10, 4096};
    gpt2_plan p;
    if (gpt2_plan_predict_disk(&rq, &disk, &p) != FERRY_OK) {
        tap_ok(0, "plan: %s", ferry_last_error());
        return;
    }
    run_opts ro = {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 2, p.host_total, NULL, NULL, NULL};
    run_result got;
    ferry_status st = run(&ro, &got);
    TAP_IS_STATUS(st, FERRY_ERR_OUT_OF_MEMORY, "optimizer mode does not fit a %llu-byte host budget",
                  (unsigned long long)ro.host_budget);
    ro.mode = FERRY_OFFLOAD_NVME;
    ro.disk = ro.master = true;
    st = run(&ro, &got);
    TAP_IS_STATUS(st, FERRY_OK, "nvme mode with the master weights on disk fits it, exactly what memprof plan "
                  "predicts (%s)", st ? got.message : "");
    tap_ok(got.ms.host_reserved_bytes == p.host_total && got.ms.host_peak_bytes == p.host_total,
           "its host pool reserved %llu bytes and used %llu: the plan's %llu", (unsigned long long)got.ms.host_reserved_bytes,
           (unsigned long long)got.ms.host_peak_bytes, (unsigned long long)p.host_total);
    compare(&got, &opt1, 0, "nvme under that budget");
    free(got.weights);
    ro.host_budget = p.host_total - 4096;
    st = run(&ro, &got);
    TAP_IS_STATUS(st, FERRY_ERR_OUT_OF_MEMORY, "4 KiB less and setup refuses");
    tap_ok(strstr(got.message, "pinned host pool limit") != NULL, "naming the budget: %s", got.message);
}

/* Saved in one mode, resumed in another: the same as the unbroken run. */
static void test_checkpoints(void)
{
    static const struct {
        ferry_offload mode;
        bool disk, master;
        const char *name;
    } modes[] = {
        {FERRY_OFFLOAD_OPTIMIZER, false, false, "optimizer"},
        {FERRY_OFFLOAD_NVME, true, false, "nvme"},
        {FERRY_OFFLOAD_NVME, true, true, "nvme with master"},
        {FERRY_OFFLOAD_PARAMS, true, true, "params with a disk"},
        {FERRY_OFFLOAD_PARAMS, false, false, "params"},
    };
    /* Each save is compared byte for byte with optimizer mode's, so every
     * mode that loads optimizer mode's loads these; a sample of the pairs
     * is resumed for real. */
    static const int resumed_in[4][5] = {{0}, {1, 0, 0, 0, 0}, {1, 1, 1, 1, 1}, {1, 0, 0, 0, 1}};
    run_result r;
    run_opts save = {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 2, 0, NULL, ckpt2, NULL};
    tap_ok(run(&save, &r) == FERRY_OK, "optimizer mode saved at step %d", HALF);
    free(r.weights);
    for (size_t i = 1; i < 4; i++) {
        run_opts ro = {modes[i].mode, modes[i].disk, modes[i].master, 1, 1, 0, NULL, ckpt, NULL};
        ferry_status st = run(&ro, &r);
        free(r.weights);
        tap_ok(st == FERRY_OK && efix_same_file(ckpt, ckpt2),
               "%s saved at step %d: byte for byte the checkpoint optimizer mode saves (%s)", modes[i].name, HALF,
               st ? r.message : "the state itself, no pointer to the file");
        for (size_t j = 0; j < sizeof modes / sizeof modes[0]; j++) {
            if (!resumed_in[i][j])
                continue;
            run_opts lo = {modes[j].mode, modes[j].disk, modes[j].master, 1, 1, 0, ckpt, NULL, NULL};
            run_result got;
            char what[160];
            snprintf(what, sizeof what, "saved in %s, resumed in %s", modes[i].name, modes[j].name);
            if (run(&lo, &got) != FERRY_OK) {
                tap_ok(0, "%s: %s", what, got.message);
                continue;
            }
            compare(&got, &opt1, HALF, what);
            free(got.weights);
        }
    }
    run_opts lo = {FERRY_OFFLOAD_NVME, true, true, 1, 1, 0, ckpt2, NULL, NULL};
    run_result got;
    tap_ok(run(&lo, &got) == FERRY_OK, "optimizer mode's checkpoint loads in nvme mode");
    compare(&got, &opt1, HALF, "saved in optimizer, resumed in nvme with master");
    free(got.weights);
}

/* ---- damage underneath ---- */

static enum { FLIP, REMOVE, TRUNCATE } damage;
static int damage_at;

static ferry_status save_then_damage(ferry_engine *e, int at)
{
    if (at == damage_at - 1)
        return ferry_engine_save(e, ckpt, "blob", 4);
    if (at != damage_at)
        return FERRY_OK;
    ferry_status st = ferry_engine_synchronize(e);
    char path[4200];
    state_file(path, sizeof path);
    if (st != FERRY_OK || !path[0])
        return st != FERRY_OK ? st : err_set(FERRY_ERR_STATE, "no state file in '%s'", dir);
    if (damage == REMOVE)
        return unlink(path) == 0 ? FERRY_OK : err_set(FERRY_ERR_IO, "cannot remove '%s'", path);
    if (damage == TRUNCATE)
        return truncate(path, 4096) == 0 ? FERRY_OK : err_set(FERRY_ERR_IO, "cannot truncate '%s'", path);
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    off_t where = 3 * 4096 + 77; /* group 0's tile 1, adam m */
    bool ok = fd >= 0 && pread(fd, &b, 1, where) == 1 && (b ^= 0x01, pwrite(fd, &b, 1, where) == 1);
    if (fd >= 0)
        close(fd);
    return ok ? FERRY_OK : err_set(FERRY_ERR_IO, "cannot flip a byte of '%s'", path);
}

static void test_damage(void)
{
    static const struct {
        int kind;
        const char *name, *word;
        ferry_status status;
    } cases[] = {
        {FLIP, "a flipped byte", "checksum mismatch", FERRY_ERR_FORMAT},
        {REMOVE, "the file removed", "removed", FERRY_ERR_IO},
        {TRUNCATE, "the file truncated", "truncated", FERRY_ERR_IO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        damage = cases[i].kind;
        damage_at = 6;
        unlink(ckpt);
        run_opts ro = {FERRY_OFFLOAD_NVME, true, true, 1, 2, 0, NULL, NULL, save_then_damage};
        run_result got;
        ferry_status st = run(&ro, &got);
        /* Step 7's update reads the damage on its own thread; the first call
         * after it that waits for the update (at the latest step 8's
         * ferry_engine_step, whose forward waited for every group) fails. */
        tap_ok(st == cases[i].status && got.failed_at == damage_at + 2,
               "%s after step %d: step %d's update meets it, step %d fails with %s (got %s at step %d)",
               cases[i].name, damage_at, damage_at + 1, damage_at + 2, ferry_status_string(cases[i].status),
               ferry_status_string(st), got.failed_at);
        tap_ok(strstr(got.message, cases[i].word) && strstr(got.message, dir),
               "%s: the message names the file and what happened: %s", cases[i].name, got.message);
        /* The checkpoint of step 5 is whole. */
        run_opts lo = {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 2, 0, NULL, NULL, NULL};
        ferry_engine_config cfg = config_of(&lo);
        efix f;
        st = efix_engine(&f, &tiny, &cfg, SEED, B, T, false);
        if (st == FERRY_OK) st = ferry_engine_load(f.e, ckpt, NULL, 0, NULL);
        TAP_IS_STATUS(st, FERRY_OK, "%s: the checkpoint saved before it loads whole", cases[i].name);
        TAP_IS_INT(ferry_engine_steps(f.e), damage_at - 1, "%s: at step %d", cases[i].name, damage_at - 1);
        efix_close(&f);
        char left[4200];
        state_file(left, sizeof left);
        tap_ok(left[0] == '\0', "%s: no state file is left behind", cases[i].name);
    }
}

/* A save that meets damage is refused and leaves the earlier file; after
 * it nothing goes on. */
static void test_refusals_after_failure(void)
{
    run_opts c = {FERRY_OFFLOAD_NVME, true, false, 1, 2, 0, NULL, NULL, NULL};
    ferry_engine_config cfg = config_of(&c);
    efix f;
    ferry_status st = efix_engine(&f, &tiny, &cfg, SEED, B, T, false);
    ferry_engine *e = f.e;
    if (st == FERRY_OK) st = ferry_engine_save(e, ckpt2, NULL, 0);
    TAP_IS_STATUS(st, FERRY_OK, "an nvme engine saved its initial state");
    char path[4200];
    state_file(path, sizeof path);
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    bool ok = fd >= 0 && pread(fd, &b, 1, 5) == 1 && (b ^= 0x80, pwrite(fd, &b, 1, 5) == 1);
    if (fd >= 0)
        close(fd);
    tap_ok(ok, "a byte of its state file flipped");
    char before[4300];
    snprintf(before, sizeof before, "%s.copy", ckpt2);
    FILE *in = fopen(ckpt2, "rb"), *out = fopen(before, "wb");
    for (int ch; in && out && (ch = fgetc(in)) != EOF;)
        fputc(ch, out);
    if (in) fclose(in);
    if (out) fclose(out);
    st = ferry_engine_save(e, ckpt2, NULL, 0);
    TAP_IS_STATUS(st, FERRY_ERR_FORMAT, "saving reads the damaged block and is refused");
    tap_ok(strstr(ferry_last_error(), "checksum mismatch") && strstr(ferry_last_error(), "any earlier"),
           "saying why and that the earlier file is intact: %s", ferry_last_error());
    tap_ok(efix_same_file(ckpt2, before), "the earlier checkpoint is byte for byte as it was");
    TAP_IS_STATUS(ferry_engine_synchronize(e), FERRY_ERR_FORMAT, "synchronize repeats the failure");
    TAP_IS_STATUS(ferry_engine_begin_micro_batch(e, 0, 1), FERRY_ERR_FORMAT, "and so does a new micro-batch");
    efix_close(&f);
    unlink(before);
}

static void test_misuse(void)
{
    ferry_engine *e = NULL;
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = FERRY_OFFLOAD_NVME;
    TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "offload nvme without a folder");
    tap_ok(strstr(ferry_last_error(), "nvme_path") != NULL, "names the field: %s", ferry_last_error());
    c.offload = FERRY_OFFLOAD_OPTIMIZER;
    c.nvme_path = dir;
    TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "a folder with offload optimizer");
    tap_ok(strstr(ferry_last_error(), "'nvme'") != NULL, "says to use offload nvme: %s", ferry_last_error());
    c.offload = FERRY_OFFLOAD_NVME;
    c.nvme_block_bytes = 1000;
    TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "a block size of 1000 bytes");
    c.nvme_block_bytes = 0;
    c.nvme_queue_depth = -1;
    TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "a queue depth of -1");
    c.nvme_queue_depth = 0;
    c.delayed_update = 1;
    TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "the delayed update with nvme");
    c.delayed_update = 0;
    c.nvme_path = NULL;
    c.offload = FERRY_OFFLOAD_OPTIMIZER;
    c.nvme_master = 1;
    TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "nvme_master without a folder");
    c.nvme_master = 0;
    c.offload = FERRY_OFFLOAD_NVME;
    c.nvme_path = "/nonexistent/ferry";
    float init[16] = {0};
    ferry_status st = ferry_engine_create(&c, &e);
    if (st == FERRY_OK) st = ferry_engine_add_group(e, "w", 16, init, NULL, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    TAP_IS_STATUS(st, FERRY_ERR_IO, "a folder that does not exist fails at setup");
    tap_ok(strstr(ferry_last_error(), "/nonexistent/ferry") != NULL, "naming it: %s", ferry_last_error());
    ferry_engine_destroy(e);
    e = NULL;
    ferry_offload mode;
    TAP_IS_STATUS(ferry_offload_parse("nvme", &mode), FERRY_OK, "'nvme' parses");
    TAP_IS_INT(mode, FERRY_OFFLOAD_NVME, "as FERRY_OFFLOAD_NVME");
    c.nvme_path = dir;
    st = ferry_engine_create(&c, &e);
    TAP_IS_INT(ferry_engine_offload(e), FERRY_OFFLOAD_NVME, "an nvme engine says so");
    ferry_engine_destroy(e);
}

int main(void)
{
    if (!mkdtemp(dir) || gpt2_config_from_fields(2, 4, 64, 500, 512, 64, &tiny) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    snprintf(ckpt, sizeof ckpt, "%s/a.ferry", dir);
    snprintf(ckpt2, sizeof ckpt2, "%s/b.ferry", dir);
    tap_diag("tiny GPT-2 (%zu parameters), B=%d T=%d, %d steps, %s storage; disk in %s", total_params(), B, T,
             STEPS, test_dtype_name(), dir);
    test_misuse();
    test_modes_agree();
    test_host_budget();
    test_checkpoints();
    test_damage();
    test_refusals_after_failure();
    free(opt1.weights);
    free(opt2.weights);
    unlink(ckpt);
    unlink(ckpt2);
    rmdir(dir);
    return tap_done();
}
