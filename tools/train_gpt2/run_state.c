/* Checkpoint folders of a run: see run_state.h. */
#include "run_state.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "hf_checkpoint.h"

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

static void remove_tree(const char *dir)
{
    static const char *const files[] = {"model.safetensors", "config.json", "state.ferry"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (run_state_join(path, sizeof path, dir, files[i]) == FERRY_OK)
            unlink(path);
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
    char link[PATH_MAX], tmp[PATH_MAX];
    ferry_status st = run_state_join(link, sizeof link, dir, "latest");
    if (st == FERRY_OK) st = run_state_join(tmp, sizeof tmp, dir, ".latest.tmp");
    if (st != FERRY_OK)
        return st;
    unlink(tmp);
    if (symlink(name, tmp) != 0 || rename(tmp, link) != 0)
        return err_set(FERRY_ERR_IO, "cannot point '%s' at %s: %s", link, name, strerror(errno));
    return FERRY_OK;
}

ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const gpt2_model *m,
                            const train_resume *resume)
{
    char name[64], hidden[80], tmp[PATH_MAX], final[PATH_MAX], state[PATH_MAX];
    snprintf(name, sizeof name, "step_%08lld", (long long)step);
    snprintf(hidden, sizeof hidden, ".%s.tmp", name);
    ferry_status st = run_state_join(tmp, sizeof tmp, dir, hidden);
    if (st == FERRY_OK) st = run_state_join(final, sizeof final, dir, name);
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
    if (st == FERRY_OK) {
        remove_tree(final); /* an earlier save of the same step */
        if (rename(tmp, final) != 0)
            st = err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
    }
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
    if (run_state_join(probe, sizeof probe, path, "latest/state.ferry") == FERRY_OK && access(probe, R_OK) == 0)
        return run_state_join(out, cap, path, "latest");
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
