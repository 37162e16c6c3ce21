/* Checkpoint folders of a run: see run_state.h. */
#include "train/run_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "train/hf_checkpoint.h"

ferry_status run_state_join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the path '%s/%s' is too long", dir, name);
    return FERRY_OK;
}

/* ---- the run state, field by field ---- */

#define RUN_STATE_MAGIC "FERRYRUN"
enum { RUN_STATE_U64S = 6, RUN_STATE_I32S = 9 };
_Static_assert(RUN_STATE_BYTES == 8 + 4 + 8 * RUN_STATE_U64S + 4 * RUN_STATE_I32S, "the documented layout");

static unsigned char *put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + bytes;
}

static uint64_t get_le(const unsigned char **p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)(*p)[i] << (8 * i);
    *p += bytes;
    return v;
}

void run_state_encode(const train_resume *r, unsigned char out[RUN_STATE_BYTES])
{
    const gpt2_config *m = &r->model;
    const uint64_t u64s[RUN_STATE_U64S] = {(uint64_t)r->step, (uint64_t)r->engine_step, r->data.epoch,
                                           r->data.index, r->data.layout, r->sample_rng};
    const int32_t i32s[RUN_STATE_I32S] = {m->n_layer, m->n_head, m->n_embd, m->vocab_size, m->padded_vocab_size,
                                          m->max_seq_len, r->batch, r->seq, r->grad_accum};
    memcpy(out, RUN_STATE_MAGIC, 8);
    unsigned char *p = put_le(out + 8, RUN_STATE_VERSION, 4);
    for (int i = 0; i < RUN_STATE_U64S; i++)
        p = put_le(p, u64s[i], 8);
    for (int i = 0; i < RUN_STATE_I32S; i++)
        p = put_le(p, (uint32_t)i32s[i], 4);
}

/* Every field of a decoded run state is one a run can have. */
static ferry_status check_resume(const train_resume *r, const char *where)
{
    if (r->step < 0 || r->step == INT64_MAX)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state's step %lld is outside 0..2^63-2: it is damaged", where,
                       (long long)r->step);
    if (r->engine_step < 0 || r->engine_step > r->step)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state records %lld optimizer steps in %lld steps (at most "
                                         "one per step): it is damaged",
                       where, (long long)r->engine_step, (long long)r->step);
    if (gpt2_config_validate(&r->model) != FERRY_OK)
        return err_wrap(FERRY_ERR_FORMAT, "'%s': the run state's model is damaged", where);
    if (r->batch < 1 || r->seq < 1 || r->grad_accum < 1 || r->seq > r->model.max_seq_len)
        return err_set(FERRY_ERR_FORMAT, "'%s': the run state's batch %d, sequence %d and accumulation %d do not "
                                         "fit its model (context %d): it is damaged",
                       where, r->batch, r->seq, r->grad_accum, r->model.max_seq_len);
    return FERRY_OK;
}

ferry_status run_state_decode(const unsigned char *in, size_t len, const char *where, train_resume *out)
{
    if (len < 12 || memcmp(in, RUN_STATE_MAGIC, 8) != 0)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds no train_gpt2 run state (was it saved by another program?)",
                       where);
    const unsigned char *p = in + 8;
    uint32_t version = (uint32_t)get_le(&p, 4);
    if (version != RUN_STATE_VERSION)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds run state version %u; this train_gpt2 reads version %u", where,
                       version, RUN_STATE_VERSION);
    if (len != RUN_STATE_BYTES)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds %zu bytes of run state; version %u has %u: it is damaged", where,
                       len, RUN_STATE_VERSION, RUN_STATE_BYTES);
    uint64_t u64s[RUN_STATE_U64S];
    int32_t i32s[RUN_STATE_I32S];
    for (int i = 0; i < RUN_STATE_U64S; i++)
        u64s[i] = get_le(&p, 8);
    for (int i = 0; i < RUN_STATE_I32S; i++)
        i32s[i] = (int32_t)(uint32_t)get_le(&p, 4);
    train_resume r = {(int64_t)u64s[0], (int64_t)u64s[1], {u64s[2], u64s[3], u64s[4]}, u64s[5],
                      {i32s[0], i32s[1], i32s[2], i32s[3], i32s[4], i32s[5]}, i32s[6], i32s[7], i32s[8]};
    ferry_status st = check_resume(&r, where);
    if (st == FERRY_OK)
        *out = r;
    return st;
}

ferry_status run_state_check_model(const train_resume *r, const gpt2_config *cfg, const char *config_json)
{
    static const struct { const char *name; size_t at; } fields[] = {
        {"n_layer", offsetof(gpt2_config, n_layer)},       {"n_head", offsetof(gpt2_config, n_head)},
        {"n_embd", offsetof(gpt2_config, n_embd)},         {"vocab_size", offsetof(gpt2_config, vocab_size)},
        {"n_positions", offsetof(gpt2_config, max_seq_len)}, {"padded vocabulary", offsetof(gpt2_config, padded_vocab_size)},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int said, trained;
        memcpy(&said, (const char *)cfg + fields[i].at, sizeof said);
        memcpy(&trained, (const char *)&r->model + fields[i].at, sizeof trained);
        if (said != trained)
            return err_set(FERRY_ERR_FORMAT, "'%s' says %s %d, but the state.ferry beside it was trained with %s %d: "
                                             "config.json was edited or comes from another checkpoint; put back the "
                                             "one saved with it",
                           config_json, fields[i].name, said, fields[i].name, trained);
    }
    return FERRY_OK;
}

static ferry_status make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return FERRY_OK;
    return err_set(FERRY_ERR_IO, "cannot create folder '%s': %s", path, strerror(errno));
}

/* Removes a checkpoint folder and every file in it, also the temporaries a
 * killed save left behind (".model.safetensors.tmp", ...), so that the name
 * can be used again. Returns 0, or the errno of the folder's removal. */
static int remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    char path[PATH_MAX];
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0 &&
            run_state_join(path, sizeof path, dir, ent->d_name) == FERRY_OK)
            unlink(path);
    if (d)
        closedir(d);
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : errno;
}

/* ---- the run folder: lock, temporaries, retention ---- */

/* A save stopped between moving an earlier step_N aside and renaming the
 * new one in (killed, or both renames refused) leaves step_N missing and the
 * whole earlier save at ".step_N.old": puts it back. Whether it did. */
static bool restore_aside(const char *dir, const char *name, const char *aside)
{
    char step[64], final[PATH_MAX];
    size_t n = strlen(name);
    struct stat sb;
    if (strcmp(name + n - 4, ".old") != 0 || n - 5 >= sizeof step)
        return false;
    snprintf(step, sizeof step, "%.*s", (int)(n - 5), name + 1);
    return run_state_join(final, sizeof final, dir, step) == FERRY_OK && lstat(final, &sb) != 0 && errno == ENOENT &&
           rename(aside, final) == 0;
}

/* Removes what killed saves left (".step_N.tmp", ".step_N.old", unless it
 * is the only copy of step_N); only called with the folder's lock held,
 * when no save can be under way. */
static void remove_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    char path[PATH_MAX];
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;) {
        size_t n = strlen(ent->d_name);
        bool temp = strncmp(ent->d_name, ".step_", 6) == 0 && n > 4 &&
                    (strcmp(ent->d_name + n - 4, ".tmp") == 0 || strcmp(ent->d_name + n - 4, ".old") == 0);
        if (temp && run_state_join(path, sizeof path, dir, ent->d_name) == FERRY_OK &&
            !restore_aside(dir, ent->d_name, path))
            remove_tree(path);
    }
    if (d)
        closedir(d);
}

/* Who holds the lock, as its file says ("" if unknown). */
static void lock_holder(int fd, char *out, size_t cap)
{
    char buf[32] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
    if (pid > 0)
        snprintf(out, cap, " (process %ld)", pid);
    else
        out[0] = '\0';
}

ferry_status run_state_lock(const char *dir, int *fd)
{
    char path[PATH_MAX], holder[48], pid[32];
    *fd = -1;
    ferry_status st = make_dir(dir);
    if (st == FERRY_OK)
        st = run_state_join(path, sizeof path, dir, ".lock");
    if (st != FERRY_OK)
        return st;
    int lfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0)
        return err_set(FERRY_ERR_IO, "cannot create the lock '%s' of the checkpoint folder: %s", path, strerror(errno));
    if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        lock_holder(lfd, holder, sizeof holder);
        close(lfd);
        if (e == EWOULDBLOCK)
            return err_set(FERRY_ERR_STATE, "the checkpoint folder '%s' is in use by another run%s, which holds '%s'; "
                                            "wait for it to end, or give another --checkpoint-dir",
                           dir, holder, path);
        return err_set(FERRY_ERR_IO, "cannot lock '%s': %s", path, strerror(e));
    }
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(lfd, 0) != 0 || pwrite(lfd, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(lfd);
        return err_set(FERRY_ERR_IO, "cannot write the lock '%s': %s", path, strerror(e));
    }
    remove_temporaries(dir);
    *fd = lfd;
    return FERRY_OK;
}

void run_state_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

/* A step folder's name, as run_state_save makes it. */
static void step_name(char *out, size_t cap, long long step) { snprintf(out, cap, "step_%08lld", step); }

/* The step of a folder named as run_state_save names them, or -1. */
static long long folder_step(const char *name)
{
    char canonical[64];
    if (strncmp(name, "step_", 5) != 0 || !name[5] || strspn(name + 5, "0123456789") != strlen(name + 5) ||
        strlen(name) > 24)
        return -1;
    long long step = strtoll(name + 5, NULL, 10);
    step_name(canonical, sizeof canonical, step);
    return strcmp(canonical, name) == 0 ? step : -1;
}

static int step_desc(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every step folder of dir, newest first; *n of them (malloc'd). */
static ferry_status list_steps(const char *dir, long long **steps, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return err_set(FERRY_ERR_IO, "cannot list the checkpoint folder '%s': %s", dir, strerror(errno));
    size_t cap = 0;
    *steps = NULL;
    *n = 0;
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        long long s = folder_step(ent->d_name);
        if (s < 0)
            continue;
        if (*n == cap) {
            long long *grown = realloc(*steps, (cap = cap ? 2 * cap : 64) * sizeof *grown);
            if (!grown) {
                closedir(d);
                return err_set(FERRY_ERR_OUT_OF_MEMORY, "listing '%s': out of memory", dir);
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    qsort(*steps, *n, sizeof **steps, step_desc);
    return FERRY_OK;
}

ferry_status run_state_prune(const char *dir, int keep)
{
    char link[PATH_MAX], target[PATH_MAX] = "", name[64], path[PATH_MAX];
    long long *steps = NULL;
    size_t n = 0;
    if (keep <= 0)
        return FERRY_OK;
    ferry_status st = run_state_join(link, sizeof link, dir, "latest");
    ssize_t len = st == FERRY_OK ? readlink(link, target, sizeof target - 1) : -1;
    target[len > 0 ? len : 0] = '\0';
    if (st == FERRY_OK)
        st = list_steps(dir, &steps, &n);
    ferry_status failed = FERRY_OK;
    for (size_t i = (size_t)keep; st == FERRY_OK && i < n; i++) {
        step_name(name, sizeof name, steps[i]);
        if (strcmp(name, target) == 0 || run_state_join(path, sizeof path, dir, name) != FERRY_OK)
            continue;
        int e = remove_tree(path);
        if (e && failed == FERRY_OK)
            failed = err_set(FERRY_ERR_IO, "keeping the last %d checkpoints: could not remove '%s': %s", keep, path,
                             strerror(e));
    }
    free(steps);
    return st != FERRY_OK ? st : failed;
}

static ferry_status save_weights(const char *tmp, ferry_engine *e, const gpt2_model *m)
{
    int G = gpt2_num_groups(m);
    float **groups = calloc((size_t)G, sizeof *groups);
    ferry_status st = groups ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory");
    for (int g = 0; g < G && st == FERRY_OK; g++) {
        groups[g] = malloc(gpt2_group_numel(m, g) * sizeof(float));
        st = groups[g] ? ferry_engine_get_weights(e, g, groups[g])
                       : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory for group %d", g);
    }
    if (st == FERRY_OK)
        st = hf_save(tmp, m, groups);
    for (int g = 0; groups && g < G; g++)
        free(groups[g]);
    free(groups);
    return st;
}

static ferry_status point_latest(const char *dir, const char *name)
{
    char link[PATH_MAX];
    ferry_status st = run_state_join(link, sizeof link, dir, "latest");
    return st == FERRY_OK ? fileio_replace_symlink(name, link) : st;
}

/* Moves the filled folder tmp to final. An earlier save of the same step
 * (latest may point at it) is swapped out in one atomic exchange, so at no
 * moment is final missing or half written; where the file system cannot
 * exchange, it is renamed aside first (a crash then may leave final missing
 * for an instant, and the aside copy behind, which the next run_state_lock
 * puts back); if the new one cannot be renamed in, the earlier goes back. */
static ferry_status install(const char *tmp, const char *final, const char *aside)
{
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        remove_tree(tmp); /* now the old checkpoint */
        return FERRY_OK;
    }
    if (errno != ENOENT) { /* ENOENT: no earlier save of this step */
        remove_tree(aside);
        if (rename(final, aside) != 0 && errno != ENOENT)
            return err_set(FERRY_ERR_IO, "cannot move the earlier '%s' aside: %s", final, strerror(errno));
    }
    if (rename(tmp, final) != 0) {
        int e = errno;
        /* Put the earlier save back (ENOENT: there was none). */
        if (rename(aside, final) != 0 && errno != ENOENT)
            return err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s' (%s), nor move the earlier '%s' back from '%s' "
                           "(%s): the next run on this folder puts it back", tmp, final, strerror(e), final,
                           aside, strerror(errno));
        return err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(e));
    }
    remove_tree(aside);
    return FERRY_OK;
}

/* Data parallelism: rank 0 writes the checkpoint; every other rank takes
 * part in the collectives that gather the state to it, in its order (the
 * weights of each group, then the engine's state), and writes nothing. */
static ferry_status save_as_follower(const char *dir, ferry_engine *e, const gpt2_model *m)
{
    size_t most = 0;
    for (int g = 0; g < gpt2_num_groups(m); g++)
        most = gpt2_group_numel(m, g) > most ? gpt2_group_numel(m, g) : most;
    float *buf = malloc(most * sizeof(float));
    ferry_status st = buf ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "saving: out of memory");
    for (int g = 0; g < gpt2_num_groups(m) && st == FERRY_OK; g++)
        st = ferry_engine_get_weights(e, g, buf);
    free(buf);
    if (st == FERRY_OK)
        st = ferry_engine_save(e, dir, NULL, 0);
    return st;
}

ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const gpt2_model *m,
                            const train_resume *resume)
{
    if (ferry_engine_rank(e) > 0)
        return save_as_follower(dir, e, m);
    char name[64], hidden[80], old[80], tmp[PATH_MAX], final[PATH_MAX], aside[PATH_MAX], state[PATH_MAX];
    unsigned char blob[RUN_STATE_BYTES];
    train_resume r = *resume;
    r.engine_step = ferry_engine_steps(e);
    if (step < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "checkpoint step %lld is negative", (long long)step);
    if (check_resume(&r, "the run state to save") != FERRY_OK)
        return err_wrap(FERRY_ERR_INVALID_ARGUMENT, "saving the checkpoint of step %lld", (long long)step);
    run_state_encode(&r, blob);
    step_name(name, sizeof name, (long long)step);
    snprintf(hidden, sizeof hidden, ".%s.tmp", name);
    snprintf(old, sizeof old, ".%s.old", name);
    ferry_status st = run_state_join(tmp, sizeof tmp, dir, hidden);
    if (st == FERRY_OK) st = run_state_join(final, sizeof final, dir, name);
    if (st == FERRY_OK) st = run_state_join(aside, sizeof aside, dir, old);
    if (st == FERRY_OK) st = run_state_join(state, sizeof state, tmp, "state.ferry");
    if (st == FERRY_OK) st = make_dir(dir);
    if (st != FERRY_OK)
        return st;
    remove_tree(tmp);
    if ((st = make_dir(tmp)) != FERRY_OK)
        return st;
    st = save_weights(tmp, e, m);
    if (st == FERRY_OK)
        st = ferry_engine_save(e, state, blob, sizeof blob);
    if (st == FERRY_OK)
        st = install(tmp, final, aside);
    if (st != FERRY_OK) {
        remove_tree(tmp);
        return err_wrap(st, "saving the checkpoint of step %lld (the previous one is intact)", (long long)step);
    }
    return point_latest(dir, name);
}

ferry_status run_state_locate(const char *path, char *out, size_t cap)
{
    char probe[PATH_MAX];
    if (run_state_join(probe, sizeof probe, path, "state.ferry") == FERRY_OK && access(probe, R_OK) == 0)
        return run_state_join(out, cap, path, ".");
    /* The folder latest names now, not "latest": a later save may swap the
     * link while the caller still reads config.json and state.ferry. */
    char link[PATH_MAX], target[PATH_MAX];
    ssize_t n = -1;
    if (run_state_join(link, sizeof link, path, "latest") == FERRY_OK)
        n = readlink(link, target, sizeof target - 1);
    if (n > 0) {
        target[n] = '\0';
        ferry_status st = target[0] == '/' ? run_state_join(out, cap, "", target + 1)
                                           : run_state_join(out, cap, path, target);
        if (st == FERRY_OK && run_state_join(probe, sizeof probe, out, "state.ferry") == FERRY_OK &&
            access(probe, R_OK) == 0)
            return FERRY_OK;
        return err_set(FERRY_ERR_IO, "--resume '%s': %s points at '%s', which holds no state.ferry", path, link,
                       target);
    }
    return err_set(FERRY_ERR_IO,
                   "--resume '%s': no checkpoint there (neither %s/state.ferry nor %s/latest/state.ferry)", path,
                   path, path);
}

/* The run state of a checkpoint's state.ferry, read without an engine. */
static ferry_status peek(const char *state, train_resume *r)
{
    unsigned char blob[RUN_STATE_BYTES];
    size_t n = 0;
    ferry_status st = ferry_engine_load_user(state, blob, sizeof blob, &n);
    return st == FERRY_OK ? run_state_decode(blob, n, state, r) : st;
}

ferry_status run_state_config(const char *ckpt_dir, gpt2_config *out)
{
    char path[PATH_MAX], state[PATH_MAX];
    train_resume r;
    ferry_status st = run_state_join(path, sizeof path, ckpt_dir, "config.json");
    if (st == FERRY_OK) st = run_state_join(state, sizeof state, ckpt_dir, "state.ferry");
    if (st == FERRY_OK) st = hf_read_config(path, out);
    if (st == FERRY_OK) st = peek(state, &r);
    return st == FERRY_OK ? run_state_check_model(&r, out, path) : st;
}

ferry_status run_state_load(const char *ckpt_dir, ferry_engine *e, train_resume *resume)
{
    char path[PATH_MAX];
    unsigned char blob[RUN_STATE_BYTES];
    size_t got = 0;
    ferry_status st = run_state_join(path, sizeof path, ckpt_dir, "state.ferry");
    if (st == FERRY_OK) st = ferry_engine_load(e, path, blob, sizeof blob, &got);
    if (st == FERRY_OK) st = run_state_decode(blob, got, path, resume);
    if (st == FERRY_OK && ferry_engine_steps(e) != resume->engine_step)
        return err_set(FERRY_ERR_FORMAT, "'%s': the engine state is at optimizer step %lld, but the run state "
                                         "beside it says %lld: the file was altered; resume from another checkpoint",
                       path, (long long)ferry_engine_steps(e), (long long)resume->engine_step);
    return st;
}
