/* The engine's own checkpoint: every group's fp32 master weights and Adam
 * moments, the step count and an opaque blob of the embedder's (RNG, data
 * position), in one file written atomically through common/fileio.h
 * (temporary file, fsync, rename, fsync of the directory), so a crash
 * mid-save leaves the previous file.
 *
 * Layout (little-endian):
 *   header   56 bytes: magic "FERRYCKP", u32 version (1), u32 groups,
 *            i64 step, u64 user_bytes, u64 payload_bytes, u64 checksum,
 *            u32 dtype of the device copy, u32 reserved
 *   groups   groups x {char name[64]; u64 numel}
 *   payload  for each group: master, m, v (numel fp32 each); then the blob
 * checksum: a 64-bit multiply-xor hash of the payload, checked before any of
 * it is applied, so a damaged file changes nothing. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "engine/engine.h"

#define CKPT_MAGIC "FERRYCKP"
#define CKPT_VERSION 1u
#define CKPT_CHUNK ((size_t)8 << 20)

typedef struct ckpt_header {
    char magic[8];
    uint32_t version, groups;
    int64_t step;
    uint64_t user_bytes, payload_bytes, checksum;
    uint32_t dtype, reserved;
} ckpt_header;

typedef struct ckpt_group {
    char name[ENGINE_NAME_MAX];
    uint64_t numel;
} ckpt_group;

_Static_assert(sizeof(ckpt_header) == 56, "checkpoint header is 56 bytes");

static uint64_t hash_update(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

/* The three fp32 arrays of a group, where they are (host or device). */
static float *state_array(engine_group *g, int which)
{
    return which == 0 ? g->master : which == 1 ? g->m : g->v;
}

static bool state_on_device(const ferry_engine *e)
{
    return e->cfg.offload == FERRY_OFFLOAD_NONE && backend_kind(e->be) == FERRY_BACKEND_CUDA;
}

/* Copies a chunk of state between the engine and a host buffer. */
static ferry_status state_chunk(ferry_engine *e, float *state, float *host, size_t n, bool to_engine)
{
    if (!state_on_device(e)) {
        memcpy(to_engine ? state : host, to_engine ? host : state, n * sizeof(float));
        return FERRY_OK;
    }
    ferry_status st = backend_memcpy_async(e->compute, to_engine ? (void *)state : (void *)host,
                                           to_engine ? (void *)host : (void *)state, n * sizeof(float),
                                           to_engine ? BACKEND_COPY_H2D : BACKEND_COPY_D2H);
    return st != FERRY_OK ? st : backend_stream_synchronize(e->compute);
}

static ferry_status read_all(int fd, void *data, size_t n, const char *path)
{
    char *p = data;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return err_set(FERRY_ERR_IO, "reading checkpoint '%s': %s", path, strerror(errno));
        if (r == 0)
            return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is truncated: it ends %zu bytes early", path, n);
        p += r;
        n -= (size_t)r;
    }
    return FERRY_OK;
}

/* Streams every group's state (and the blob) through fn in file order. */
typedef ferry_status (*chunk_fn)(void *ctx, float *state, float *buf, size_t n);

static ferry_status for_each_chunk(ferry_engine *e, float *buf, chunk_fn fn, void *ctx)
{
    size_t per = CKPT_CHUNK / sizeof(float);
    for (int i = 0; i < e->ngroups; i++) {
        engine_group *g = &e->groups[i];
        for (int which = 0; which < 3; which++) {
            float *arr = state_array(g, which);
            for (size_t at = 0; at < g->numel; at += per) {
                size_t n = g->numel - at < per ? g->numel - at : per;
                ferry_status st = fn(ctx, arr + at, buf, n);
                if (st != FERRY_OK)
                    return st;
            }
        }
    }
    return FERRY_OK;
}

typedef struct save_ctx {
    ferry_engine *e;
    fileio_atomic *file;
    uint64_t hash;
} save_ctx;

static ferry_status save_chunk(void *p, float *state, float *buf, size_t n)
{
    save_ctx *c = p;
    ferry_status st = state_chunk(c->e, state, buf, n, false);
    if (st != FERRY_OK)
        return st;
    c->hash = hash_update(c->hash, buf, n * sizeof(float));
    return fileio_atomic_write(c->file, buf, n * sizeof(float));
}

static uint64_t payload_bytes(const ferry_engine *e, size_t user_bytes)
{
    uint64_t n = user_bytes;
    for (int i = 0; i < e->ngroups; i++)
        n += 3 * (uint64_t)e->groups[i].numel * sizeof(float);
    return n;
}

/* Header first with a zero checksum, then the real one once known. On
 * failure the temporary is already gone (fileio_atomic aborts itself). */
static ferry_status save_body(ferry_engine *e, fileio_atomic *file, const void *user, size_t user_bytes)
{
    ckpt_header h = {{0}, CKPT_VERSION, (uint32_t)e->ngroups, e->step, user_bytes,
                     payload_bytes(e, user_bytes), 0, (uint32_t)e->act, 0};
    memcpy(h.magic, CKPT_MAGIC, 8);
    ferry_status st = fileio_atomic_write(file, &h, sizeof h);
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++) {
        ckpt_group cg = {{0}, e->groups[i].numel};
        snprintf(cg.name, sizeof cg.name, "%s", e->groups[i].name);
        st = fileio_atomic_write(file, &cg, sizeof cg);
    }
    float *buf = st == FERRY_OK ? malloc(CKPT_CHUNK) : NULL;
    if (st == FERRY_OK && !buf)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "saving a checkpoint: out of host memory");
    save_ctx c = {e, file, 0x51ED2701A3F9C4B5ull};
    if (st == FERRY_OK)
        st = for_each_chunk(e, buf, save_chunk, &c);
    free(buf);
    if (st == FERRY_OK && user_bytes) {
        c.hash = hash_update(c.hash, user, user_bytes);
        st = fileio_atomic_write(file, user, user_bytes);
    }
    h.checksum = c.hash;
    if (st == FERRY_OK)
        st = fileio_atomic_pwrite(file, &h, sizeof h, 0);
    return st;
}

ferry_status ferry_engine_save(ferry_engine *e, const char *path, const void *user, size_t user_bytes)
{
    ferry_status st = engine_check_group(e, 0, "ferry_engine_save");
    if (st != FERRY_OK)
        return st;
    if (!path || (user_bytes && !user))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_save: NULL path or user blob");
    if ((st = ferry_engine_synchronize(e)) != FERRY_OK)
        return st;
    fileio_atomic file;
    if ((st = fileio_atomic_open(&file, path)) != FERRY_OK)
        return err_wrap(st, "saving the engine checkpoint");
    st = save_body(e, &file, user, user_bytes);
    if (st == FERRY_OK)
        return fileio_atomic_commit(&file);
    fileio_atomic_abort(&file);
    return err_wrap(st, "saving the engine checkpoint (any earlier '%s' is intact)", path);
}

/* ---- load ---- */

typedef struct load_ctx {
    ferry_engine *e;
    int fd;
    const char *path;
    uint64_t hash;
    bool apply; /* first pass: only hash; second: copy into the engine */
} load_ctx;

static ferry_status load_chunk(void *p, float *state, float *buf, size_t n)
{
    load_ctx *c = p;
    ferry_status st = read_all(c->fd, buf, n * sizeof(float), c->path);
    if (st != FERRY_OK)
        return st;
    if (!c->apply) {
        c->hash = hash_update(c->hash, buf, n * sizeof(float));
        return FERRY_OK;
    }
    return state_chunk(c->e, state, buf, n, true);
}

static ferry_status check_header(ferry_engine *e, int fd, const char *path, ckpt_header *h)
{
    ferry_status st = read_all(fd, h, sizeof *h, path);
    if (st != FERRY_OK)
        return st;
    if (memcmp(h->magic, CKPT_MAGIC, 8) != 0)
        return err_set(FERRY_ERR_FORMAT, "'%s' is not a ferry engine checkpoint (bad magic)", path);
    if (h->version != CKPT_VERSION)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' has version %u; this ferry reads version %u", path,
                       h->version, CKPT_VERSION);
    if (h->groups != (uint32_t)e->ngroups)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' has %u parameter groups, the engine has %d: it is "
                                         "from another model",
                       path, h->groups, e->ngroups);
    for (int i = 0; i < e->ngroups; i++) {
        ckpt_group cg;
        if ((st = read_all(fd, &cg, sizeof cg, path)) != FERRY_OK)
            return st;
        if (cg.numel != e->groups[i].numel)
            return err_set(FERRY_ERR_FORMAT,
                           "checkpoint '%s': group %d ('%.*s') has %llu parameters, the engine's '%s' has %zu: "
                           "it is from another model",
                           path, i, ENGINE_NAME_MAX, cg.name, (unsigned long long)cg.numel, e->groups[i].name,
                           e->groups[i].numel);
    }
    uint64_t want = payload_bytes(e, h->user_bytes);
    struct stat sb;
    uint64_t head = sizeof *h + (uint64_t)e->ngroups * sizeof(ckpt_group);
    if (h->payload_bytes != want || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != head + want)
        return err_set(FERRY_ERR_FORMAT,
                       "checkpoint '%s' is %lld bytes, expected %llu: it is truncated or damaged", path,
                       (long long)sb.st_size, (unsigned long long)(head + want));
    return FERRY_OK;
}

static ferry_status load_pass(ferry_engine *e, load_ctx *c, const ckpt_header *h, void *user, size_t user_cap)
{
    off_t start = (off_t)(sizeof *h + (size_t)e->ngroups * sizeof(ckpt_group));
    if (lseek(c->fd, start, SEEK_SET) != start)
        return err_set(FERRY_ERR_IO, "seeking in checkpoint '%s': %s", c->path, strerror(errno));
    float *buf = malloc(CKPT_CHUNK);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "loading a checkpoint: out of host memory");
    ferry_status st = for_each_chunk(e, buf, load_chunk, c);
    free(buf);
    if (st != FERRY_OK || !h->user_bytes)
        return st;
    char *blob = malloc(h->user_bytes);
    if (!blob)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "loading a checkpoint: out of host memory for the user blob");
    st = read_all(c->fd, blob, h->user_bytes, c->path);
    if (st == FERRY_OK && !c->apply)
        c->hash = hash_update(c->hash, blob, h->user_bytes);
    if (st == FERRY_OK && c->apply && user)
        memcpy(user, blob, h->user_bytes < user_cap ? h->user_bytes : user_cap);
    free(blob);
    return st;
}

ferry_status ferry_engine_load(ferry_engine *e, const char *path, void *user, size_t user_cap, size_t *user_bytes)
{
    ferry_status st = engine_check_group(e, 0, "ferry_engine_load");
    if (st != FERRY_OK)
        return st;
    if (!path)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_load: path is NULL");
    if ((st = ferry_engine_synchronize(e)) != FERRY_OK || (st = engine_retire_all(e)) != FERRY_OK)
        return st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(FERRY_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
    ckpt_header h;
    load_ctx c = {e, fd, path, 0x51ED2701A3F9C4B5ull, false};
    st = check_header(e, fd, path, &h);
    if (st == FERRY_OK)
        st = load_pass(e, &c, &h, NULL, 0);
    if (st == FERRY_OK && c.hash != h.checksum)
        st = err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: its checksum does not match its contents; "
                                       "nothing was loaded",
                     path);
    if (st == FERRY_OK) {
        c.apply = true;
        st = load_pass(e, &c, &h, user, user_cap);
    }
    close(fd);
    for (int i = 0; i < e->ngroups && st == FERRY_OK; i++)
        st = engine_write_device_weights(e, &e->groups[i]);
    if (st == FERRY_OK) {
        e->step = h.step;
        e->micro_index = -1;
        if (user_bytes)
            *user_bytes = h.user_bytes;
    }
    return st;
}
