/* Checkpoint folders of a run: see run_state.h. */
#include "train/run_state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static ferry_status make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return FERRY_OK;
    return err_set(FERRY_ERR_IO, "cannot create folder '%s': %s", path, strerror(errno));
}

/* Removes a checkpoint folder and every file in it, also the temporaries a
 * killed save left behind (".model.safetensors.tmp", ...), so that the name
 * can be used again. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    char path[PATH_MAX];
    for (struct dirent *ent; d && (ent = readdir(d)) != NULL;)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0 &&
            run_state_join(path, sizeof path, dir, ent->d_name) == FERRY_OK)
            unlink(path);
    if (d)
        closedir(d);
    rmdir(dir);
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
 * for an instant, and the aside copy behind). */
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
    if (rename(tmp, final) != 0)
        return err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
    remove_tree(aside);
    return FERRY_OK;
}

ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const gpt2_model *m,
                            const train_resume *resume)
{
    char name[64], hidden[80], old[80], tmp[PATH_MAX], final[PATH_MAX], aside[PATH_MAX], state[PATH_MAX];
    if (step < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "checkpoint step %lld is negative", (long long)step);
    snprintf(name, sizeof name, "step_%08lld", (long long)step);
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
        st = ferry_engine_save(e, state, resume, sizeof *resume);
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

ferry_status run_state_config(const char *ckpt_dir, gpt2_config *out)
{
    char path[PATH_MAX];
    ferry_status st = run_state_join(path, sizeof path, ckpt_dir, "config.json");
    return st == FERRY_OK ? hf_read_config(path, out) : st;
}

ferry_status run_state_load(const char *ckpt_dir, ferry_engine *e, train_resume *resume)
{
    char path[PATH_MAX];
    size_t got = 0;
    memset(resume, 0, sizeof *resume);
    ferry_status st = run_state_join(path, sizeof path, ckpt_dir, "state.ferry");
    if (st == FERRY_OK)
        st = ferry_engine_load(e, path, resume, sizeof *resume, &got);
    if (st != FERRY_OK)
        return st;
    if (got != sizeof *resume || resume->magic != TRAIN_RESUME_MAGIC || resume->version != 1)
        return err_set(FERRY_ERR_FORMAT, "'%s' holds no train_gpt2 run state (was it saved by another program?)",
                       path);
    return FERRY_OK;
}
