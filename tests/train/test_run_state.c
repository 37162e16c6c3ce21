/* The trainer's checkpoint folders (train/run_state.c): a save
 * killed at any moment leaves DIR/latest on a whole checkpoint.
 * - Kill rounds: a child sets up an engine (host backend, optimizer offload)
 *   with a GPT-2 of ~3.4M parameters (~55 MB per checkpoint) and saves in a
 *   loop, each save with new weights (version v: init * (1 + v/1024)) and
 *   the version in the resume blob; the parent SIGKILLs it after a seeded
 *   random delay spread over one save's duration. Then latest must name a
 *   step_N folder (never a temporary), its state.ferry must load into a fresh
 *   engine with the weights of the version it claims, its model.safetensors
 *   must hold the same weights, and N must be the last save the child
 *   reported or the one after. Some rounds save the same step again and
 *   again (latest points at the folder being replaced).
 * - A save that cannot write (file size limit, a folder under a regular
 *   file, a read-only folder when not root) fails with FERRY_ERR_IO and
 *   leaves latest as it was, and no temporary behind.
 * - run_state_locate on a checkpoint folder, a run folder, a dangling
 *   latest; run_state_load of a state.ferry from another program.
 * - The run state's encoding, byte by byte (GPT-2's version 4, the Llama
 *   family's version 5), and the decoder's refusal of every field a run
 *   cannot have; a state.ferry whose engine step and run state disagree; a
 *   config.json edited after the save.
 * - The run folder's lock: a second holder is refused naming the first, and
 *   temporaries of killed saves go once the lock is held. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "engine/intree.h"
#include "models/gpt2_engine.h"
#include "models/lmodel.h"
#include "tests/tap.h"
#include "tests/test_files.h"
#include "train/hf_checkpoint.h"
#include "train/run_state.h"

#define ROUNDS 8
static const uint64_t SEED = 20240612;
static char dir[] = "/tmp/ferry-runstate-XXXXXX";
static char run[300];

static gpt2_model *model;
static lmodel *saved; /* the same model, as run_state_save takes it */
static float **init; /* the seeded init of every group */


/* The weights of save version v: every element scaled, so zeros (padded
 * vocabulary rows, alignment gaps) stay zero as the HF file has them. */
static void version_values(int g, uint64_t v, float *out)
{
    float k = 1.0f + (float)v / 1024.0f;
    for (size_t i = 0; i < gpt2_group_numel(model, g); i++)
        out[i] = init[g][i] * k;
}

static ferry_engine *make_engine(void)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = FERRY_OFFLOAD_OPTIMIZER;
    c.optimizer_threads = 1;
    ferry_engine *e = NULL;
    ferry_status st = ferry_engine_create(&c, &e);
    if (st == FERRY_OK) st = gpt2_engine_add_groups(model, e, SEED, init);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    if (st != FERRY_OK) {
        fprintf(stderr, "engine: %s\n", ferry_last_error());
        ferry_engine_destroy(e);
        return NULL;
    }
    return e;
}

#define RUN_ID "0123456789abcdef0123456789abcdef"

/* Settings a run can have (train_gpt2's defaults). */
static train_settings some_settings(void)
{
    return (train_settings){1, 1337, FERRY_DTYPE_F32, FERRY_OFFLOAD_OPTIMIZER, 0, 10, 100, 6e-4f, 0.1f, 0.1f, 0.9f,
                            0.95f, 1e-8f, 1.0f, 25};
}

static train_resume resume_of(int64_t step, uint64_t version)
{
    train_resume r;
    memset(&r, 0, sizeof r);
    r.step = step;
    r.sample_rng = version;
    r.model = (model_spec){.family = MODEL_FAMILY_GPT2, .gpt2 = *gpt2_get_config(model)};
    r.batch = 1, r.seq = 64, r.grad_accum = 1;
    snprintf(r.run, sizeof r.run, "%s", RUN_ID);
    r.settings = some_settings();
    return r;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- the child: save in a loop until killed ---- */

typedef struct report {
    int64_t step;
    uint64_t version;
} report;

static void put(int fd, const report *r)
{
    if (write(fd, r, sizeof *r) != (ssize_t)sizeof *r)
        _exit(3);
}

/* Saves steps first, first+1, ... (or first again and again), version
 * first_version, +1, ...; reports each finished save on fd. Nothing else
 * between saves, so that most kills find one under way. */
static void child(int fd, int64_t first, uint64_t first_version, int same_step)
{
    ferry_engine *e = make_engine();
    if (!e)
        _exit(2);
    int G = gpt2_num_groups(model);
    float *buf = malloc(gpt2_group_numel(model, 0) * sizeof(float));
    report ready = {-1, 0};
    put(fd, &ready);
    for (uint64_t v = first_version;; v++) {
        int64_t step = same_step ? first : first + (int64_t)(v - first_version);
        for (int g = 0; g < G; g++) {
            version_values(g, v, buf);
            if (ferry_engine_set_weights(e, g, buf) != FERRY_OK)
                _exit(4);
        }
        train_resume r = resume_of(step, v);
        if (run_state_save(run, step, e, saved, &r) != FERRY_OK) {
            fprintf(stderr, "child: save of step %lld: %s\n", (long long)step, ferry_last_error());
            _exit(5);
        }
        report done = {step, v};
        put(fd, &done);
    }
}

/* ---- the parent's checks ---- */

/* latest's target as a step number; -1 if it is not "step_NNNNNNNN". */
static int64_t latest_step(char *target, size_t cap)
{
    char link[400];
    snprintf(link, sizeof link, "%s/latest", run);
    ssize_t n = readlink(link, target, cap - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    long long s;
    char tail;
    if (strncmp(target, "step_", 5) != 0 || strlen(target) != 13 || sscanf(target + 5, "%lld%c", &s, &tail) != 1)
        return -1;
    return s;
}

static int weights_are(float *const *got, uint64_t v, float *want)
{
    for (int g = 0; g < gpt2_num_groups(model); g++) {
        version_values(g, v, want);
        if (memcmp(got[g], want, gpt2_group_numel(model, g) * sizeof(float)) != 0)
            return 0;
    }
    return 1;
}

/* latest is whole: state.ferry loads with the weights of the version it
 * records, model.safetensors holds the same. Returns the step, or -1. */
static int64_t check_latest(ferry_engine *e, const char *when, uint64_t *version)
{
    char target[300], ckpt[600], file[700];
    int64_t step = latest_step(target, sizeof target);
    if (!tap_ok(step >= 0, "%s: latest names a step folder ('%s'), not a temporary", when,
                step >= 0 ? target : "?"))
        return -1;
    if (!tap_is_status(run_state_locate(run, ckpt, sizeof ckpt), FERRY_OK, "%s: run_state_locate finds %s", when,
                   target))
        return -1;
    tap_ok(strstr(ckpt, target) != NULL, "%s: it resolves latest to the folder itself: %s", when, ckpt);
    train_resume r;
    int G = gpt2_num_groups(model), ok = 1;
    if (!tap_is_status(run_state_load(ckpt, e, &r), FERRY_OK, "%s: its state.ferry loads into a fresh engine", when))
        return -1;
    TAP_IS_INT(r.step, step, "%s: the resume blob's step is the folder's", when);
    *version = r.sample_rng;
    float **got = calloc((size_t)G, sizeof *got), *want = malloc(gpt2_group_numel(model, 0) * sizeof(float));
    for (int g = 0; g < G; g++) {
        got[g] = malloc(gpt2_group_numel(model, g) * sizeof(float));
        ok &= ferry_engine_get_weights(e, g, got[g]) == FERRY_OK;
    }
    tap_ok(ok && weights_are(got, r.sample_rng, want), "%s: state.ferry holds the weights of save version %llu",
           when, (unsigned long long)r.sample_rng);
    snprintf(file, sizeof file, "%s/model.safetensors", ckpt);
    if (tap_is_status(hf_load(file, model, got), FERRY_OK, "%s: its model.safetensors loads", when))
        tap_ok(weights_are(got, r.sample_rng, want), "%s: model.safetensors holds the same weights", when);
    model_spec c;
    if (tap_is_status(run_state_config(ckpt, &c), FERRY_OK, "%s: its config.json reads", when))
        tap_ok(c.family == MODEL_FAMILY_GPT2 && memcmp(&c.gpt2, gpt2_get_config(model), sizeof c.gpt2) == 0,
               "%s: config.json is the model's", when);
    for (int g = 0; g < G; g++)
        free(got[g]);
    free(got);
    free(want);
    return step;
}

/* Every visible step_ folder is whole (the three files are there). Returns
 * how many temporaries (".step_N.tmp") the kill left, and removes them and
 * the aside folders, so the next round counts only its own; removes every
 * step folder but keep (latest's). */
static int check_folders(const char *when, const char *keep)
{
    DIR *d = opendir(run);
    int bad = 0, seen = 0, temps = 0;
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", run, ent->d_name);
        if (ent->d_name[0] == '.' && (strstr(ent->d_name, ".tmp") || strstr(ent->d_name, ".old") ||
                                      strncmp(ent->d_name, ".trash_", 7) == 0) &&
            strcmp(ent->d_name, ".latest.tmp") != 0) {
            temps += strstr(ent->d_name, ".tmp") != NULL;
            rm_rf(p);
        }
        if (strncmp(ent->d_name, "step_", 5) != 0)
            continue;
        seen++;
        static const char *const files[] = {"model.safetensors", "config.json", "state.ferry"};
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "%s/%s/%s", run, ent->d_name, files[i]);
            if (access(p, R_OK) != 0) {
                tap_diag("  %s lacks %s", ent->d_name, files[i]);
                bad++;
            }
        }
        if (strcmp(ent->d_name, keep) != 0) { /* the disk holds one checkpoint between rounds */
            snprintf(p, sizeof p, "%s/%s", run, ent->d_name);
            rm_rf(p);
        }
    }
    if (d)
        closedir(d);
    tap_ok(bad == 0 && seen > 0, "%s: all %d step folders hold their three files", when, seen);
    return temps;
}

/* The child is dead: reads what it reported to EOF. */
static report read_reports(int fd, report last)
{
    report r;
    while (read(fd, &r, sizeof r) == (ssize_t)sizeof r)
        last = r;
    return last;
}

static void kill_rounds(ferry_engine *e, uint64_t *rng)
{
    int64_t next_step = 1;
    uint64_t next_version = 1;
    double save_ms = 0;
    int mid_save = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int same = round % 3 == 2, fds[2];
        if (pipe(fds) != 0) {
            tap_ok(0, "pipe: %s", strerror(errno));
            return;
        }
        int64_t first = same ? next_step - 1 : next_step;
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a killed test */
            close(fds[0]);
            child(fds[1], first, next_version, same);
        }
        close(fds[1]);
        report ready, done;
        if (read(fds[0], &ready, sizeof ready) != (ssize_t)sizeof ready) {
            int status;
            waitpid(pid, &status, 0);
            tap_ok(0, "round %d: the child sets up (status %d)", round, status);
            close(fds[0]);
            return;
        }
        double t1 = clock_now_ms();
        report first_done;
        if (read(fds[0], &first_done, sizeof first_done) != (ssize_t)sizeof first_done) {
            int status;
            waitpid(pid, &status, 0);
            tap_ok(0, "round %d: the child's first save (exit status %d)", round, status);
            close(fds[0]);
            return;
        }
        double took = clock_now_ms() - t1;
        save_ms = save_ms > 0 ? (save_ms + took) / 2 : took;
        /* Kill somewhere in the next one or two saves. */
        double delay = tap_rand_unit(rng) * 1.5 * save_ms;
        usleep((useconds_t)(delay * 1e3));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        done = read_reports(fds[0], first_done);
        close(fds[0]);
        char when[96];
        snprintf(when, sizeof when, "round %d (%s, killed %.0f ms after save %llu, one save %.0f ms)", round,
                 same ? "same step" : "new steps", delay, (unsigned long long)first_done.version, save_ms);
        tap_ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "%s: the child died of SIGKILL", when);
        uint64_t version = 0;
        int64_t step = check_latest(e, when, &version);
        tap_ok(version == done.version || version == done.version + 1,
               "%s: latest holds save version %llu: the last one reported (%llu) or the one after", when,
               (unsigned long long)version, (unsigned long long)done.version);
        if (!same)
            tap_ok(step == done.step || step == done.step + 1, "%s: latest is step %lld: the last one reported "
                   "(%lld) or the one after", when, (long long)step, (long long)done.step);
        char target[300] = "";
        latest_step(target, sizeof target);
        int inside = check_folders(when, target) > 0;
        mid_save += inside;
        tap_diag("round %d: the kill landed %s", round, inside ? "inside a save" : "between saves");
        next_step = (step > done.step ? step : done.step) + 1;
        next_version = (version > done.version ? version : done.version) + 1;
    }
    /* Delays spread over 1.5 saves: most kills must find a save under way,
     * or the rounds above tested little. */
    tap_ok(mid_save * 2 >= ROUNDS, "%d of %d kills landed inside a save (a temporary was left)", mid_save, ROUNDS);
}

/* ---- saves that cannot write ---- */

static void test_failed_saves(ferry_engine *e)
{
    char before[300], after[300];
    int64_t step0 = latest_step(before, sizeof before);
    train_resume r = resume_of(99999, 0);

    /* A full disk: the file size limit stops the writes part way. */
    struct rlimit old, small = {1 << 20, 0};
    getrlimit(RLIMIT_FSIZE, &old);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
    ferry_status st = run_state_save(run, 99999, e, saved, &r);
    setrlimit(RLIMIT_FSIZE, &old);
    tap_is_status(st, FERRY_ERR_IO, "a save that hits the file size limit (a full disk) fails: %s", ferry_last_error());
    TAP_IS_INT(latest_step(after, sizeof after), step0, "latest still names %s", before);
    char p[400];
    snprintf(p, sizeof p, "%s/.step_00099999.tmp", run);
    tap_ok(access(p, F_OK) != 0, "the failed save left no temporary folder behind");
    snprintf(p, sizeof p, "%s/step_00099999", run);
    tap_ok(access(p, F_OK) != 0, "nor a step_00099999 folder");
    uint64_t v;
    check_latest(e, "after the failed save", &v);

    /* A run folder under a regular file. */
    char file[400], under[450];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    snprintf(under, sizeof under, "%s/run", file);
    r.step = 1;
    st = run_state_save(under, 1, e, saved, &r);
    tap_is_status(st, FERRY_ERR_IO, "a run folder under a regular file: %s", ferry_last_error());
    tap_ok(strstr(ferry_last_error(), under) != NULL, "the message names the folder: %s", ferry_last_error());

    /* A read-only folder (root may write anywhere: then this case is moot). */
    if (geteuid() != 0) {
        chmod(run, 0555);
        r.step = 99998;
        st = run_state_save(run, 99998, e, saved, &r);
        chmod(run, 0755);
        tap_is_status(st, FERRY_ERR_IO, "a save into a read-only run folder fails: %s", ferry_last_error());
        TAP_IS_INT(latest_step(after, sizeof after), step0, "latest still names %s", before);
    } else {
        tap_diag("running as root: the read-only folder case is skipped (root writes anyway)");
    }
}

static void test_locate(ferry_engine *e)
{
    char out[1200], target[300], ckpt[700];
    latest_step(target, sizeof target);
    snprintf(ckpt, sizeof ckpt, "%s/%s", run, target);
    if (tap_is_status(run_state_locate(ckpt, out, sizeof out), FERRY_OK, "run_state_locate takes a checkpoint folder"))
        tap_ok(strstr(out, target) != NULL, "and names it: %s", out);

    /* latest pointing nowhere. */
    char lonely[400], link[450];
    snprintf(lonely, sizeof lonely, "%s/dangling", dir);
    mkdir(lonely, 0755);
    snprintf(link, sizeof link, "%s/latest", lonely);
    if (symlink("step_00000007", link) != 0)
        tap_diag("symlink: %s", strerror(errno));
    ferry_status st = run_state_locate(lonely, out, sizeof out);
    tap_is_status(st, FERRY_ERR_IO, "a latest that points nowhere is FERRY_ERR_IO: %s", ferry_last_error());
    st = run_state_locate(dir, out, sizeof out);
    tap_is_status(st, FERRY_ERR_IO, "a folder without a checkpoint is FERRY_ERR_IO: %s", ferry_last_error());

    /* A state.ferry whose blob is not train_gpt2's. */
    char other[400], state[450];
    snprintf(other, sizeof other, "%s/other", dir);
    mkdir(other, 0755);
    snprintf(state, sizeof state, "%s/state.ferry", other);
    train_resume r;
    if (tap_is_status(ferry_engine_save(e, state, "not a run", 9), FERRY_OK, "an engine state with a foreign blob")) {
        st = run_state_load(other, e, &r);
        tap_is_status(st, FERRY_ERR_FORMAT, "run_state_load refuses it: %s", ferry_last_error());
    }
}

/* ---- the run state's encoding ---- */

/* Field by field: the struct has padding, which memcmp would read. */
static int same_settings(const train_settings *a, const train_settings *b)
{
    return a->known == b->known && a->seed == b->seed && a->dtype == b->dtype && a->offload == b->offload &&
           a->delayed_update == b->delayed_update && a->warmup == b->warmup && a->steps == b->steps &&
           a->lr == b->lr && a->lr_min_frac == b->lr_min_frac && a->weight_decay == b->weight_decay &&
           a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps && a->clip == b->clip &&
           a->checkpoint_every == b->checkpoint_every;
}

static int same_resume(const train_resume *a, const train_resume *b)
{
    return a->step == b->step && a->engine_step == b->engine_step && a->data.epoch == b->data.epoch &&
           a->data.index == b->data.index && a->data.layout == b->data.layout && a->sample_rng == b->sample_rng &&
           memcmp(&a->model, &b->model, sizeof a->model) == 0 && a->batch == b->batch && a->seq == b->seq &&
           a->grad_accum == b->grad_accum && strcmp(a->run, b->run) == 0 && same_settings(&a->settings, &b->settings) &&
           a->weights_known == b->weights_known && a->weights.bytes == b->weights.bytes &&
           a->weights.crc32c == b->weights.crc32c;
}

static uint64_t le_at(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static train_resume sample_resume(void)
{
    train_resume r = {0x0000000102030405ll, 77, {3, 41, 0xA1B2C3D4E5F60718ull}, 0xFEDCBA9876543210ull,
                      {.family = MODEL_FAMILY_GPT2, .gpt2 = *gpt2_get_config(model)}, 4, 64, 2, RUN_ID, some_settings(), 1, {0x1122334455ull, 0xCAFEF00Du}};
    return r;
}

static void test_encoding(void)
{
    train_resume r = sample_resume(), back;
    unsigned char b[RUN_STATE_BYTES];
    run_state_encode(&r, b);
    tap_ok(memcmp(b, "FERRYRUN", 8) == 0 && le_at(b + 8, 4) == 4, "the encoding starts with FERRYRUN, version 4");
    tap_ok(le_at(b + 12, 8) == 0x0000000102030405ull && le_at(b + 20, 8) == 77,
           "step and engine_step follow, little-endian");
    tap_ok(le_at(b + 28, 8) == 3 && le_at(b + 36, 8) == 41 && le_at(b + 44, 8) == 0xA1B2C3D4E5F60718ull,
           "then the data position: epoch, index, layout");
    tap_ok(le_at(b + 52, 8) == 0xFEDCBA9876543210ull, "then the sampler's generator");
    tap_ok(le_at(b + 60, 4) == 2 && le_at(b + 64, 4) == 2 && le_at(b + 68, 4) == 64 && le_at(b + 72, 4) == 50257 &&
               le_at(b + 76, 4) == 50304 && le_at(b + 80, 4) == 1024,
           "then the model: 2 layers, 2 heads, 64 wide, vocab 50257 padded to 50304, context 1024");
    tap_ok(le_at(b + 84, 4) == 4 && le_at(b + 88, 4) == 64 && le_at(b + 92, 4) == 2, "then batch, seq, grad_accum");
    tap_ok(b[96] == 0x01 && b[97] == 0x23 && b[111] == 0xef, "then the run's identity, 16 bytes from its hex digits");
    float lr;
    uint32_t lr_bits = (uint32_t)le_at(b + 140, 4);
    memcpy(&lr, &lr_bits, 4);
    tap_ok(le_at(b + 112, 8) == 1337 && le_at(b + 120, 4) == FERRY_DTYPE_F32 && le_at(b + 124, 4) == 1 &&
               le_at(b + 128, 4) == 0 && le_at(b + 132, 4) == 10 && le_at(b + 136, 4) == 100 && lr == 6e-4f,
           "then the settings: seed 1337, dtype f32, offload optimizer, no delayed update, warmup 10, 100 steps, "
           "lr 6e-4");
    tap_ok(le_at(b + 168, 8) == 0x1122334455ull && le_at(b + 176, 4) == 0xCAFEF00Du && le_at(b + 180, 4) == 25,
           "then the weights' bytes and CRC-32C, and --checkpoint-every 25");
    TAP_IS_STATUS(run_state_decode(b, sizeof b, "test", &back), FERRY_OK, "it decodes");
    tap_ok(same_resume(&r, &back), "to every field it was made from");

    static const struct { int at, bytes; int64_t value; const char *says; } bad[] = {
        {0, 1, 'X', "no train_gpt2 run state"}, {8, 4, 5, "version 5"},
        {8, 4, 1, "version 1"},                 {180, 4, -3, "--checkpoint-every -3"},
        {12, 8, -1, "step -1"},                 {20, 8, 0x0000000102030406ll, "optimizer steps"},
        {64, 4, 3, "n_head"},                   {84, 4, 0, "batch 0"},
        {88, 4, 2048, "sequence 2048"},         {92, 4, -2, "accumulation -2"},
        {120, 4, 99, "dtype 99"},
        {124, 4, 7, "offload 7"},               {136, 4, 0, "steps 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char c[RUN_STATE_BYTES];
        memcpy(c, b, sizeof c);
        for (int k = 0; k < bad[i].bytes; k++)
            c[bad[i].at + k] = (unsigned char)((uint64_t)bad[i].value >> (8 * k));
        ferry_status st = run_state_decode(c, sizeof c, "test", &back);
        tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), bad[i].says),
               "bytes %d..%d set to %lld are refused, saying '%s': %s", bad[i].at, bad[i].at + bad[i].bytes - 1,
               (long long)bad[i].value, bad[i].says, ferry_last_error());
    }
    unsigned char z[RUN_STATE_BYTES];
    memcpy(z, b, sizeof z);
    memset(z + 96, 0, 16);
    ferry_status zst = run_state_decode(z, sizeof z, "test", &back);
    tap_ok(zst == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "run identity"),
           "a run identity of all zeros is refused: %s", ferry_last_error());
    TAP_IS_STATUS(run_state_decode(b, sizeof b - 1, "test", &back), FERRY_ERR_FORMAT, "a run state a byte short");
    tap_ok(strstr(ferry_last_error(), "183 bytes") != NULL, "is refused with its size: %s", ferry_last_error());
    /* Version 3 (168 bytes, before the weights' checksum and --checkpoint-every) is still read. */
    unsigned char v3[RUN_STATE_V3_BYTES];
    memcpy(v3, b, sizeof v3);
    v3[8] = 3;
    TAP_IS_STATUS(run_state_decode(v3, sizeof v3, "test", &back), FERRY_OK, "a version-3 run state decodes");
    tap_ok(back.step == r.step && strcmp(back.run, RUN_ID) == 0 && back.settings.known && back.settings.steps == 100 &&
               !back.weights_known && back.settings.checkpoint_every == -1,
           "with its run and settings, no weights checksum and --checkpoint-every unknown (-1)");
    TAP_IS_STATUS(run_state_decode(b, RUN_STATE_V3_BYTES, "test", &back), FERRY_ERR_FORMAT,
                  "a version-4 run state cut to version 3's size is refused");
    /* Version 2 (96 bytes, before runs had an identity) is still read. */
    unsigned char v2[RUN_STATE_V2_BYTES];
    memcpy(v2, b, sizeof v2);
    v2[8] = 2;
    TAP_IS_STATUS(run_state_decode(v2, sizeof v2, "test", &back), FERRY_OK, "a version-2 run state decodes");
    tap_ok(back.step == r.step && back.batch == r.batch && back.run[0] == '\0' && !back.settings.known,
           "with no run identity and its settings unknown");
    tap_ok(back.model.family == MODEL_FAMILY_GPT2 && memcmp(&back.model.gpt2, &r.model.gpt2, sizeof r.model.gpt2) == 0,
           "versions 2 to 4 are GPT-2's");

    /* A Llama-family run: version 5, the family and the shape after version 4's fields. */
    train_resume l = sample_resume();
    memset(&l.model, 0, sizeof l.model);
    l.model.family = MODEL_FAMILY_LLAMA;
    if (!tap_is_status(llama_config_preset("llama-d2", &l.model.llama), FERRY_OK, "a Llama shape to record"))
        return;
    l.model.llama.qkv_bias = true; /* not llama-d2's: the field is written, not assumed */
    unsigned char v5[RUN_STATE_MAX_BYTES];
    size_t n5 = run_state_encode(&l, v5);
    tap_ok(n5 == RUN_STATE_V5_BYTES && n5 == 224 && le_at(v5 + 8, 4) == 5, "a Llama run state is version 5, %zu bytes",
           n5);
    tap_ok(memcmp(v5 + 12, b + 12, 48) == 0 && memcmp(v5 + 84, b + 84, RUN_STATE_BYTES - 84) == 0,
           "with version 4's fields in their places");
    tap_ok(le_at(v5 + 60, 4) == 2 && le_at(v5 + 64, 4) == 2 && le_at(v5 + 68, 4) == 128 && le_at(v5 + 72, 4) == 128256 &&
               le_at(v5 + 76, 4) == 128256 && le_at(v5 + 80, 4) == 131072,
           "the model's layers, heads, width, vocabulary, padded vocabulary and context where GPT-2's are");
    tap_ok(le_at(v5 + 184, 4) == 1 && memcmp(v5 + 188, "llama\0", 6) == 0 && le_at(v5 + 204, 4) == 1 &&
               le_at(v5 + 208, 4) == 64 && le_at(v5 + 212, 4) == 384 && le_at(v5 + 216, 4) == 1 &&
               le_at(v5 + 220, 4) == 0,
           "then family 1, model_type, key/value heads, head size, MLP width, q/k/v bias and tied embeddings");
    TAP_IS_STATUS(run_state_decode(v5, n5, "test", &back), FERRY_OK, "it decodes");
    const llama_config *got = &back.model.llama, *want = &l.model.llama;
    tap_ok(back.model.family == MODEL_FAMILY_LLAMA && strcmp(got->model_type, "llama") == 0 &&
               got->n_layer == want->n_layer && got->n_head == want->n_head && got->n_kv_head == want->n_kv_head &&
               got->n_embd == want->n_embd && got->head_dim == want->head_dim &&
               got->intermediate_size == want->intermediate_size && got->vocab_size == want->vocab_size &&
               got->padded_vocab_size == want->padded_vocab_size && got->max_seq_len == want->max_seq_len &&
               got->qkv_bias && !got->tied_embeddings && back.step == l.step && strcmp(back.run, RUN_ID) == 0 &&
               back.weights.crc32c == l.weights.crc32c,
           "to the family, the shape and every other field it was made from");
    static const struct { int at, bytes; int64_t value; const char *says; } bad5[] = {
        {184, 4, 2, "model family 2"}, {204, 4, 3, "damaged"}, {188, 1, 'x', "model_type"},
        {216, 4, 2, "q/k/v bias 2"},
    };
    for (size_t i = 0; i < sizeof bad5 / sizeof bad5[0]; i++) {
        unsigned char c[RUN_STATE_MAX_BYTES];
        memcpy(c, v5, n5);
        for (int k = 0; k < bad5[i].bytes; k++)
            c[bad5[i].at + k] = (unsigned char)((uint64_t)bad5[i].value >> (8 * k));
        ferry_status st = run_state_decode(c, n5, "test", &back);
        tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), bad5[i].says),
               "version 5: bytes %d..%d set to %lld are refused, saying '%s': %s", bad5[i].at,
               bad5[i].at + bad5[i].bytes - 1, (long long)bad5[i].value, bad5[i].says, ferry_last_error());
    }
    TAP_IS_STATUS(run_state_decode(v5, RUN_STATE_BYTES, "test", &back), FERRY_ERR_FORMAT,
                  "a version-5 run state cut to version 4's size is refused");
}

/* A state.ferry whose engine step and run state disagree (written by hand:
 * run_state_save takes the step from the engine). */
static void test_engine_step_mismatch(ferry_engine *e)
{
    char folder[400], state[450];
    snprintf(folder, sizeof folder, "%s/mismatch", dir);
    mkdir(folder, 0755);
    snprintf(state, sizeof state, "%s/state.ferry", folder);
    train_resume r = sample_resume(), back;
    r.step = 10;
    r.engine_step = 5;
    unsigned char b[RUN_STATE_BYTES];
    run_state_encode(&r, b);
    TAP_IS_INT(ferry_engine_steps(e), 0, "the checking engine has taken no step");
    if (!tap_is_status(ferry_engine_save(e, state, b, sizeof b), FERRY_OK, "a state.ferry at engine step 0 whose "
                                                                            "run state says 5"))
        return;
    ferry_status st = run_state_load(folder, e, &back);
    tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "step 0") && strstr(ferry_last_error(), "says 5"),
           "run_state_load refuses it, naming both steps: %s", ferry_last_error());
    r.engine_step = 0;
    run_state_encode(&r, b);
    ferry_engine_save(e, state, b, sizeof b);
    TAP_IS_STATUS(run_state_load(folder, e, &back), FERRY_OK, "with the steps agreeing it loads");
    tap_ok(same_resume(&r, &back), "and gives back the run state");
}

/* Rewrites one number in a checkpoint's config.json. */
static void edit_config(const char *ckpt, const char *key, int value)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", ckpt);
    char *text = NULL;
    size_t len = 0;
    if (fileio_read(path, "config.json", &text, &len) != FERRY_OK)
        return;
    cJSON *j = cJSON_Parse(text);
    cJSON_ReplaceItemInObject(j, key, cJSON_CreateNumber(value));
    char *out = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    free(out);
    cJSON_Delete(j);
    free(text);
}

/* config.json must describe the model state.ferry was trained with. */
static void test_edited_config(ferry_engine *e)
{
    char folder[400], ckpt[450];
    snprintf(folder, sizeof folder, "%s/edited", dir);
    snprintf(ckpt, sizeof ckpt, "%s/step_00000003", folder);
    train_resume r = resume_of(3, 0);
    model_spec c;
    if (!tap_is_status(run_state_save(folder, 3, e, saved, &r), FERRY_OK, "a checkpoint to edit"))
        return;
    TAP_IS_STATUS(run_state_config(ckpt, &c), FERRY_OK, "its config.json checks out against its state.ferry");
    edit_config(ckpt, "n_head", 4);
    ferry_status st = run_state_config(ckpt, &c);
    tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "n_head 4") && strstr(ferry_last_error(), "n_head 2"),
           "n_head edited from 2 to 4 is refused, naming both: %s", ferry_last_error());
    edit_config(ckpt, "n_head", 2);
    edit_config(ckpt, "vocab_size", 50000);
    st = run_state_config(ckpt, &c);
    tap_ok(st == FERRY_ERR_FORMAT && strstr(ferry_last_error(), "vocab_size 50000") &&
               strstr(ferry_last_error(), "config.json"),
           "vocab_size edited is refused, blaming config.json: %s", ferry_last_error());
}

/* One run per folder: the lock, and the temporaries the claim lets go. */
static void test_lock(void)
{
    char folder[400], temp[450], file[500], want[64];
    snprintf(folder, sizeof folder, "%s/locked", dir);
    snprintf(temp, sizeof temp, "%s/.step_00000003.tmp", folder);
    snprintf(file, sizeof file, "%s/state.ferry", temp);
    mkdir(folder, 0755);
    mkdir(temp, 0755);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    int a = -1, b = -1;
    TAP_IS_STATUS(run_state_lock(folder, &a), FERRY_OK, "the first lock of a folder is granted");
    tap_ok(access(temp, F_OK) == 0, "the lock alone changes nothing in the folder");
    TAP_IS_STATUS(run_state_claim(folder, RUN_ID, false), FERRY_OK, "a new run claims it (it holds no step folder)");
    tap_ok(access(temp, F_OK) != 0, "and the temporary a killed save left there is removed");
    ferry_status st = run_state_lock(folder, &b);
    snprintf(want, sizeof want, "process %ld", (long)getpid());
    tap_ok(st == FERRY_ERR_STATE && strstr(ferry_last_error(), want) && strstr(ferry_last_error(), "in use"),
           "a second lock is refused, naming the holder: %s", ferry_last_error());
    TAP_IS_INT(b, -1, "and hands out no descriptor");
    run_state_unlock(a);
    TAP_IS_STATUS(run_state_lock(folder, &b), FERRY_OK, "once released, the folder can be locked again");
    run_state_unlock(b);
    snprintf(file, sizeof file, "%s/new/run", dir);
    struct stat sb;
    st = run_state_lock(file, &b);
    tap_ok(st == FERRY_OK && stat(file, &sb) == 0 && S_ISDIR(sb.st_mode),
           "a folder whose parent is missing is made with its parent, as mkdir -p would (%s)",
           st == FERRY_OK ? "made" : ferry_last_error());
    run_state_unlock(b);
}

/* A config.json of RUN_ID's checkpoint at `step`: what tells a folder's run
 * when its state.ferry does not. */
static void put_config(const char *path, int step)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64, \"ferry\": {\"run\": \"%s\", \"step\": %d}}",
                RUN_ID, step);
        fclose(f);
    }
}

/* What killed retention leaves (a step folder holding only config.json, a
 * .step_N.del) is removed when the run claims the folder; a whole step
 * folder, and an incomplete one that latest names, are kept. */
static void test_half_deleted(void)
{
    char run_dir[400], path[500];
    snprintf(run_dir, sizeof run_dir, "%s/halfdeleted", dir);
    mkdir(run_dir, 0755);
    const char *files[] = {"config.json", "model.safetensors", "state.ferry"};
    const struct { const char *step; int nfiles; } folders[] = {
        {"step_00000003", 1}, {"step_00000005", 3}, {"step_00000007", 2}, {".step_00000002.del", 1}};
    for (size_t i = 0; i < sizeof folders / sizeof folders[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", run_dir, folders[i].step);
        mkdir(path, 0755);
        for (int k = 0; k < folders[i].nfiles; k++) {
            snprintf(path, sizeof path, "%s/%s/%s", run_dir, folders[i].step, files[k]);
            FILE *f = fopen(path, "w");
            if (f)
                fclose(f);
        }
    }
    snprintf(path, sizeof path, "%s/step_00000005/config.json", run_dir);
    put_config(path, 5);
    snprintf(path, sizeof path, "%s/latest", run_dir);
    if (symlink("step_00000007", path) != 0)
        tap_diag("symlink: %s", strerror(errno));
    int fd = -1;
    TAP_IS_STATUS(run_state_lock(run_dir, &fd), FERRY_OK, "a folder with half-deleted steps locks");
    TAP_IS_STATUS(run_state_claim(run_dir, RUN_ID, true), FERRY_OK, "and the run whose folder it is claims it");
    run_state_unlock(fd);
    const struct { const char *name; bool kept; } want[] = {
        {"step_00000003", false}, {".step_00000002.del", false}, {"step_00000005", true}, {"step_00000007", true}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", run_dir, want[i].name);
        tap_ok((access(path, F_OK) == 0) == want[i].kept, "%s is %s", want[i].name,
               want[i].kept ? "kept (whole, or what latest names)" : "removed (what a killed retention left)");
    }
}

/* Writes `text` into path; reads it back into buf (NUL-terminated, "" if none). */
static void put_text(const char *path, const char *text) { test_put(path, text, strlen(text)); }

/* Nothing the run folder's upkeep removes, truncates or renames is reached
 * through a link, and a `latest` that is not a link is refused before any
 * work: the folder's lock, its temporaries, its retention. */
static void test_links_left_alone(void)
{
    char run_dir[400], outside[400], keep[450], link[450], path[450], got[64];
    snprintf(run_dir, sizeof run_dir, "%s/links", dir);
    snprintf(outside, sizeof outside, "%s/outside", dir);
    snprintf(keep, sizeof keep, "%s/keep.txt", outside);
    mkdir(run_dir, 0755);
    mkdir(outside, 0755);
    put_text(keep, "precious");
    int fd = -1;

    /* .lock a link to a file elsewhere: refused, the file not truncated. */
    snprintf(link, sizeof link, "%s/.lock", run_dir);
    if (symlink(keep, link) != 0)
        tap_diag("symlink: %s", strerror(errno));
    ferry_status st = run_state_lock(run_dir, &fd);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), ".lock"), "a .lock that is a link is refused: %s",
           ferry_last_error());
    tap_ok(strcmp(test_read(keep, got, sizeof got), "precious") == 0,
           "and the file it names is not truncated ('%s')", got);
    run_state_unlock(fd);
    unlink(link);

    /* latest a real folder: refused at the lock, before any work. */
    snprintf(path, sizeof path, "%s/latest", run_dir);
    mkdir(path, 0755);
    st = run_state_lock(run_dir, &fd);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a folder") && strstr(ferry_last_error(), "latest"),
           "a latest that is a real folder is refused at the lock: %s", ferry_last_error());
    tap_ok(fd < 0, "and no lock is held");
    run_state_unlock(fd);
    rmdir(path);

    /* A killed save's temporary name that is a link to a folder: the lock
     * clears temporaries, but not through the link. */
    snprintf(link, sizeof link, "%s/.step_00000002.tmp", run_dir);
    if (symlink(outside, link) != 0)
        tap_diag("symlink: %s", strerror(errno));
    fd = -1;
    TAP_IS_STATUS(run_state_lock(run_dir, &fd), FERRY_OK, "the folder locks with a link among its temporaries");
    TAP_IS_STATUS(run_state_claim(run_dir, RUN_ID, false), FERRY_OK, "and a new run claims it (it holds no step)");
    tap_ok(access(keep, F_OK) == 0, "the files of the folder a temporary's name links to are left");
    run_state_unlock(fd);
    unlink(link);

    /* Retention: a link named like an old step, to a folder elsewhere, is
     * neither pruned nor followed. */
    const char *steps[] = {"step_00000004", "step_00000005"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", run_dir, steps[i]);
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/%s/config.json", run_dir, steps[i]);
        put_config(path, 4 + i);
    }
    snprintf(link, sizeof link, "%s/step_00000001", run_dir);
    if (symlink(outside, link) != 0)
        tap_diag("symlink: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/latest", run_dir);
    if (symlink("step_00000005", path) != 0)
        tap_diag("symlink: %s", strerror(errno));
    TAP_IS_STATUS(run_state_prune(run_dir, 1, RUN_ID), FERRY_OK, "retention with a link named like a step");
    snprintf(path, sizeof path, "%s/step_00000004", run_dir);
    struct stat sb;
    tap_ok(access(path, F_OK) != 0, "the older real step folder is pruned");
    tap_ok(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode) && access(keep, F_OK) == 0,
           "the link named like a step, and the folder it names, are left");
}

int main(void)
{
    uint64_t rng = SEED;
    tap_diag("seed %llu", (unsigned long long)SEED);
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary directory");
    snprintf(run, sizeof run, "%s/run", dir);
    /* GPT-2's vocabulary, 2 layers, 2 heads, 64 wide: ~3.4M params, ~55 MB
     * per checkpoint (safetensors + master weights and moments), so a save
     * takes a few hundred ms and most kills land inside one. */
    gpt2_config cfg;
    ferry_status st = gpt2_config_from_fields(2, 2, 64, 50257, 0, 1024, &cfg);
    if (st == FERRY_OK) st = gpt2_create(&cfg, &model);
    model_spec spec = {.family = MODEL_FAMILY_GPT2, .gpt2 = cfg};
    if (st == FERRY_OK) st = lmodel_create(&spec, &saved);
    int G = model ? gpt2_num_groups(model) : 0;
    init = calloc((size_t)G + 1, sizeof *init);
    for (int g = 0; g < G && st == FERRY_OK; g++) {
        init[g] = malloc(gpt2_group_numel(model, g) * sizeof(float));
        st = gpt2_init_group(model, g, SEED, init[g]);
    }
    if (!tap_ok(st == FERRY_OK, "model of %llu params set up: %s",
                model ? (unsigned long long)gpt2_num_params(model) : 0ULL, ferry_last_error()))
        return tap_done();
    /* The engine that loads what the children saved. Made before the forks:
     * it is idle then (its threads wait on condition variables, holding no
     * lock), and a child never touches it. */
    ferry_engine *e = make_engine();
    if (!tap_ok(e != NULL, "an engine for the checks"))
        return tap_done();
    double t0 = clock_now_ms();
    kill_rounds(e, &rng);
    test_failed_saves(e);
    test_locate(e);
    test_encoding();
    test_engine_step_mismatch(e);
    test_edited_config(e);
    test_lock();
    test_links_left_alone();
    test_half_deleted();
    tap_diag("%.1f s in all", (clock_now_ms() - t0) / 1e3);
    ferry_engine_destroy(e);
    for (int g = 0; g < G; g++)
        free(init[g]);
    free(init);
    gpt2_destroy(model);
    lmodel_destroy(saved);
    rm_rf(dir);
    return tap_done();
}
