/* What the fault walks share: a tiny GPT-2 (one layer, 32 wide, a 64-token
 * vocabulary) and its seeded values in two versions, an engine on the host
 * backend that holds them, and file helpers that compare a folder with a
 * snapshot of it. Everything here runs with the fault off. Header-only. */
#ifndef FERRY_TESTS_FAULT_FIXTURE_H
#define FERRY_TESTS_FAULT_FIXTURE_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"

#define FIX_SEED 20261202ull

typedef struct fixture {
    gpt2_model *model;
    int groups;
    float **values[2]; /* version 0 and version 1 of every group */
} fixture;

/* Version v of group g: the seeded init scaled by (1 + v/8), so that zeros
 * (padded vocabulary rows, gaps) stay zero as a Hugging Face file has them. */
static inline bool fixture_open(fixture *f)
{
    memset(f, 0, sizeof *f);
    gpt2_config cfg;
    if (gpt2_config_from_fields(1, 2, 32, 64, 0, 16, &cfg) != FERRY_OK || gpt2_create(&cfg, &f->model) != FERRY_OK)
        return false;
    f->groups = gpt2_num_groups(f->model);
    for (int v = 0; v < 2; v++) {
        f->values[v] = calloc((size_t)f->groups, sizeof(float *));
        for (int g = 0; g < f->groups; g++) {
            size_t n = gpt2_group_numel(f->model, g);
            f->values[v][g] = malloc(n * sizeof(float));
            if (gpt2_init_group(f->model, g, FIX_SEED, f->values[v][g]) != FERRY_OK)
                return false;
            for (size_t i = 0; i < n; i++)
                f->values[v][g][i] *= 1.0f + (float)v / 8.0f;
        }
    }
    return true;
}

static inline void fixture_close(fixture *f)
{
    for (int v = 0; v < 2; v++) {
        for (int g = 0; f->values[v] && g < f->groups; g++)
            free(f->values[v][g]);
        free(f->values[v]);
    }
    gpt2_destroy(f->model);
    memset(f, 0, sizeof *f);
}

static inline ferry_engine_config fixture_config(ferry_offload mode)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = mode;
    c.optimizer_threads = 1;
    c.device_budget_bytes = 16 << 20; /* small slabs and chunks: each run maps and locks them anew */
    c.host_budget_bytes = 4 << 20;
    return c;
}

/* Create, add the groups (version v), set up: the engine setup of the walk. */
static inline ferry_status fixture_engine(const fixture *f, const ferry_engine_config *c, int v, ferry_engine **out)
{
    *out = NULL;
    ferry_status st = ferry_engine_create(c, out);
    if (st == FERRY_OK)
        st = gpt2_engine_add_groups(f->model, *out, FIX_SEED, f->values[v]);
    if (st == FERRY_OK)
        st = ferry_engine_setup(*out);
    return st;
}

static inline ferry_status fixture_set(const fixture *f, ferry_engine *e, int v)
{
    ferry_status st = FERRY_OK;
    for (int g = 0; g < f->groups && st == FERRY_OK; g++)
        st = ferry_engine_set_weights(e, g, f->values[v][g]);
    return st;
}

/* Whether every group of e holds version v exactly; names the first that does not. */
static inline bool fixture_holds(const fixture *f, ferry_engine *e, int v, char *why, size_t cap)
{
    for (int g = 0; g < f->groups; g++) {
        size_t n = gpt2_group_numel(f->model, g);
        float *got = malloc(n * sizeof(float));
        ferry_status st = ferry_engine_get_weights(e, g, got);
        bool same = st == FERRY_OK && memcmp(got, f->values[v][g], n * sizeof(float)) == 0;
        free(got);
        if (!same) {
            snprintf(why, cap, "group %d does not hold version %d (%s)", g, v,
                     st == FERRY_OK ? "values differ" : ferry_last_error());
            return false;
        }
    }
    return true;
}

/* ---- files ---- */

/* The whole file, malloc'd, with a NUL after it (*len excludes it); NULL if
 * it cannot be read. */
static inline char *file_bytes(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != (size_t)sb.st_size) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    *len = got;
    return buf;
}

static inline bool file_write(const char *path, const char *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    bool ok = fp && fwrite(data, 1, len, fp) == len;
    if (fp && fclose(fp) != 0)
        ok = false;
    return ok;
}

/* Whether files a and b hold the same bytes (both readable). */
static inline bool file_same(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = file_bytes(a, &na), *y = file_bytes(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static inline bool file_copy(const char *from, const char *to)
{
    size_t n = 0;
    char *data = file_bytes(from, &n);
    bool ok = data && file_write(to, data, n);
    free(data);
    return ok;
}

static inline int rm_entry_(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static inline void rm_rf(const char *path) { nftw(path, rm_entry_, 16, FTW_DEPTH | FTW_PHYS); }

/* Copies folder `from` (files, symbolic links and folders, recursively) to `to`. */
static inline bool tree_copy(const char *from, const char *to)
{
    DIR *d = opendir(from);
    if (!d || mkdir(to, 0755) != 0) {
        if (d)
            closedir(d);
        return false;
    }
    bool ok = true;
    char a[PATH_MAX], b[PATH_MAX], link[PATH_MAX];
    for (struct dirent *ent; ok && (ent = readdir(d)) != NULL;) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
            continue;
        snprintf(a, sizeof a, "%s/%s", from, ent->d_name);
        snprintf(b, sizeof b, "%s/%s", to, ent->d_name);
        struct stat sb;
        if (lstat(a, &sb) != 0) {
            ok = false;
        } else if (S_ISLNK(sb.st_mode)) {
            ssize_t n = readlink(a, link, sizeof link - 1);
            ok = n > 0 && (link[n] = '\0', symlink(link, b) == 0);
        } else if (S_ISDIR(sb.st_mode)) {
            ok = tree_copy(a, b);
        } else {
            ok = file_copy(a, b);
        }
    }
    closedir(d);
    return ok;
}

/* Whether folder `got` holds what `want` holds (same names, same bytes, the
 * same link targets), besides the names `extra` allows in `got` (NULL-ended
 * list; may be NULL). Names the first difference. */
static inline bool tree_same(const char *got, const char *want, const char *const *extra, char *why, size_t cap)
{
    char a[PATH_MAX], b[PATH_MAX];
    DIR *d = opendir(want);
    bool ok = d != NULL;
    if (!d)
        snprintf(why, cap, "cannot list '%s'", want);
    for (struct dirent *ent; ok && d && (ent = readdir(d)) != NULL;) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
            continue;
        snprintf(a, sizeof a, "%s/%s", got, ent->d_name);
        snprintf(b, sizeof b, "%s/%s", want, ent->d_name);
        struct stat sa, sb;
        if (lstat(b, &sb) != 0 || lstat(a, &sa) != 0) {
            snprintf(why, cap, "'%s' is gone", a);
            ok = false;
        } else if (S_ISLNK(sb.st_mode)) {
            char la[PATH_MAX] = "", lb[PATH_MAX] = "";
            ssize_t na = readlink(a, la, sizeof la - 1), nb = readlink(b, lb, sizeof lb - 1);
            ok = na == nb && na > 0 && memcmp(la, lb, (size_t)na) == 0;
            if (!ok)
                snprintf(why, cap, "'%s' points at '%.*s', not '%.*s'", a, (int)(na > 0 ? na : 0), la,
                         (int)(nb > 0 ? nb : 0), lb);
        } else if (S_ISDIR(sb.st_mode)) {
            ok = S_ISDIR(sa.st_mode) && tree_same(a, b, NULL, why, cap);
            if (!S_ISDIR(sa.st_mode))
                snprintf(why, cap, "'%s' is not a folder", a);
        } else {
            ok = file_same(a, b);
            if (!ok)
                snprintf(why, cap, "'%s' is not byte-identical to what it was", a);
        }
    }
    if (d)
        closedir(d);
    /* Nothing in got that want lacks, besides the allowed extras. */
    d = ok ? opendir(got) : NULL;
    for (struct dirent *ent; ok && d && (ent = readdir(d)) != NULL;) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
            continue;
        bool allowed = false;
        for (int i = 0; extra && extra[i] && !allowed; i++)
            allowed = strcmp(extra[i], ent->d_name) == 0;
        snprintf(b, sizeof b, "%s/%s", want, ent->d_name);
        struct stat sb;
        if (!allowed && lstat(b, &sb) != 0) {
            snprintf(why, cap, "'%s/%s' was left behind", got, ent->d_name);
            ok = false;
        }
    }
    if (d)
        closedir(d);
    return ok;
}

#endif
