/* The engine's own checkpoint: every group's fp32 master weights and Adam
 * moments, the step count, the device weights a delayed update has yet to
 * replace, the loss scale and the count of skipped steps, and an opaque blob
 * of the embedder's (RNG, data position), in one
 * file written atomically through common/fileio.h (temporary file, fsync,
 * rename, fsync of the directory), so a crash mid-save leaves the previous
 * file. It also reads the blob alone, without an engine. It owns the file
 * format; where each array lives is the update's business (update.h), what
 * the blob means the embedder's.
 *
 * Layout (little-endian):
 *   header   72 bytes: magic "FERRYCKP", u32 version (4), u32 groups,
 *            i64 step, u64 user_bytes, u64 payload_bytes, u64 checksum,
 *            u64 user_checksum, u32 dtype of the device copy, u32 flags,
 *            u32 head_crc, u32 reserved (0)
 *   groups   groups x {char name[64]; u64 numel}
 *   payload  for each group: master (numel fp32), m, v (numel fp32 each, or
 *            with flag bits 8..15 a compact form: those bits are the
 *            ferry_moments, each moment in optim/moments.h's layout, as the
 *            engine holds it: bf16 2 x numel bytes; 8bit numel codes padded
 *            to 4, then an fp32 absmax per 256); then, with flag
 *            1 (a delayed update pending), each group's device weights
 *            (numel elements of the dtype): what the next forward reads,
 *            one update behind the master weights; then, with flag 2, the
 *            loss scale section (32 bytes: f32 scale, 0 when scaling was
 *            off; i32 growth tracker; i64 skipped steps; i32 skips in a
 *            row; 12 bytes 0); then the blob
 * head_crc is the CRC-32 (zlib's) of header bytes 0..63, then 68..71 (the
 * reserved word), then the group table, so no byte of the header (the step
 * count included) changes unnoticed; version 2 files, whose CRC left out
 * bytes 68..71, are still read, with the reserved word required to be 0;
 * checksum is the CRC-32C of the payload before the blob (common/crc32c.h,
 * in the low 32 bits), user_checksum that of the blob; versions 2 and 3
 * hold a 64-bit multiply-xor hash in both places, still read. All are
 * checked before anything is applied, so a damaged file changes nothing.
 *
 * With data parallelism no rank reads the whole file twice: from version 4
 * on (a CRC of parts combines into the whole's, crc32c_combine), each rank
 * checks 1/N of the payload's bytes, the ranks agree on the file's CRC, and
 * each then reads what it keeps (its slot of every array in the partitioned
 * modes: its part of each run of the array, dp.h; of a moment in another
 * form, its part in that form, converted). Older files are read whole by
 * every rank, as before. */
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"

#include "common/crc32c.h"
#include "common/error.h"
#include "common/fileio.h"
#include "optim/moments.h"

#define CKPT_MAGIC "FERRYCKP"
#define CKPT_VERSION 4u
#define CKPT_VERSION_OLDEST 2u /* read too: the same layout, its CRC without bytes 68..71 */
#define CKPT_VERSION_CRC 4u    /* from here the payload's and the blob's checksums are CRC-32C */
#define CKPT_FLAG_DELAYED 1u
#define CKPT_FLAG_SCALING 2u
#define CKPT_FLAG_FORM_SHIFT 8
#define CKPT_FLAG_FORM_MASK (0xffu << CKPT_FLAG_FORM_SHIFT)
#define CKPT_FLAGS_KNOWN (CKPT_FLAG_DELAYED | CKPT_FLAG_SCALING | CKPT_FLAG_FORM_MASK)
#define CKPT_CHUNK ((size_t)8 << 20)
#define CKPT_HASH_SEED 0x51ED2701A3F9C4B5ull

typedef struct ckpt_header {
    char magic[8];
    uint32_t version, groups;
    int64_t step;
    uint64_t user_bytes, payload_bytes, checksum, user_checksum;
    uint32_t dtype, flags;
    uint32_t head_crc, reserved;
} ckpt_header;

typedef struct ckpt_group {
    char name[ENGINE_NAME_MAX];
    uint64_t numel;
} ckpt_group;

/* The loss scale section (flag 2). */
typedef struct ckpt_scaling {
    float scale;           /* 0: the run had loss scaling off */
    int32_t tracker;       /* clean steps since the scale last changed */
    int64_t skipped_steps;
    int32_t skips_in_row;
    uint32_t reserved[3];  /* 0 */
} ckpt_scaling;

_Static_assert(sizeof(ckpt_scaling) == 32, "the loss scale section is 32 bytes");
_Static_assert(sizeof(ckpt_header) == 72, "checkpoint header is 72 bytes");
_Static_assert(offsetof(ckpt_header, head_crc) == 64, "head_crc covers the 64 bytes before it");
_Static_assert(sizeof(ckpt_group) == 72, "a group entry is 72 bytes");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checkpoint format is little-endian");

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

/* The payload's and the blob's checksum as a file of `version` computes
 * it: start from sum_seed, go on with sum_update. */
static uint64_t sum_seed(uint32_t version) { return version >= CKPT_VERSION_CRC ? 0 : CKPT_HASH_SEED; }

static uint64_t sum_update(uint32_t version, uint64_t sum, const void *data, size_t n)
{
    return version >= CKPT_VERSION_CRC ? crc32c((uint32_t)sum, data, n) : hash_update(sum, data, n);
}

/* CRC-32 as zlib computes it (reflected polynomial 0xEDB88320), four bits
 * at a time: the header is small, a table of 16 is enough. */
static uint32_t crc32_update(uint32_t crc, const void *data, size_t n)
{
    static const uint32_t nibble[16] = {
        0x00000000, 0x1DB71064, 0x3B6E20C8, 0x26D930AC, 0x76DC4190, 0x6B6B51F4, 0x4DB26158, 0x5005713C,
        0xEDB88320, 0xF00F9344, 0xD6D6A3E8, 0xCB61B38C, 0x9B64C2B0, 0x86D3D2D4, 0xA00AE278, 0xBDBDF21C};
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = (crc >> 4) ^ nibble[crc & 15];
        crc = (crc >> 4) ^ nibble[crc & 15];
    }
    return ~crc;
}

static uint32_t head_crc(const ckpt_header *h, const ckpt_group *table)
{
    uint32_t crc = crc32_update(0, h, offsetof(ckpt_header, head_crc));
    if (h->version >= 3)
        crc = crc32_update(crc, &h->reserved, sizeof h->reserved);
    return crc32_update(crc, table, (size_t)h->groups * sizeof *table);
}

static uint64_t head_bytes(uint32_t groups) { return sizeof(ckpt_header) + (uint64_t)groups * sizeof(ckpt_group); }

static bool state_on_device(const ckpt_env *e)
{
    return ctx_mode(e->ctx) == FERRY_OFFLOAD_NONE && backend_kind(e->ctx->be) == FERRY_BACKEND_CUDA;
}

/* Nothing in flight: every update, every stream, every collective. */
static ferry_status quiesce(const ckpt_env *e)
{
    const engine_ctx *c = e->ctx;
    ferry_status st = update_wait(e->update);
    if (st == FERRY_OK) st = backend_stream_synchronize(c->compute);
    if (st == FERRY_OK) st = backend_stream_synchronize(c->h2d);
    if (st == FERRY_OK) st = backend_stream_synchronize(c->d2h);
    if (st == FERRY_OK) st = dp_synchronize(e->dp);
    return st;
}

/* Copies a chunk of state between the engine (host or device memory) and a
 * host buffer. */
static ferry_status copy_chunk(const ckpt_env *e, void *state, bool on_device, void *host, size_t bytes,
                               bool to_engine)
{
    if (!on_device) {
        memcpy(to_engine ? state : host, to_engine ? host : state, bytes);
        return FERRY_OK;
    }
    ferry_status st = backend_memcpy_async(e->ctx->compute, to_engine ? state : host, to_engine ? host : state, bytes,
                                           to_engine ? BACKEND_COPY_H2D : BACKEND_COPY_D2H);
    return st != FERRY_OK ? st : backend_stream_synchronize(e->ctx->compute);
}

/* n bytes at offset `at`, or from the file position (which they advance)
 * when `at` is negative. */
static ferry_status read_bytes(int fd, void *data, size_t n, int64_t at, const char *path)
{
    char *p = data;
    while (n > 0) {
        ssize_t r = at < 0 ? read(fd, p, n) : pread(fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return err_set(FERRY_ERR_IO, "reading checkpoint '%s': %s", path, strerror(errno));
        if (r == 0)
            return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is truncated: it ends %zu bytes early", path, n);
        p += r;
        n -= (size_t)r;
        at += at < 0 ? 0 : r;
    }
    return FERRY_OK;
}

static ferry_status read_all(int fd, void *data, size_t n, const char *path) { return read_bytes(fd, data, n, -1, path); }

static ferry_status read_at(int fd, void *data, size_t n, uint64_t at, const char *path)
{
    return read_bytes(fd, data, n, (int64_t)at, path);
}

/* ---- walking the payload ---- */

/* Called for each chunk of the payload in file order: `state` is where the
 * chunk lives in the engine (NULL: nowhere, a load skips it), `buf` a host
 * buffer of CKPT_CHUNK bytes. */
typedef ferry_status (*chunk_fn)(void *ctx, void *state, bool on_device, void *buf, size_t bytes);

static ferry_status for_each_chunk_of(void *base, size_t bytes, bool on_device, void *buf, chunk_fn fn, void *ctx)
{
    for (size_t at = 0; at < bytes; at += CKPT_CHUNK) {
        size_t n = bytes - at < CKPT_CHUNK ? bytes - at : CKPT_CHUNK;
        ferry_status st = fn(ctx, base ? (char *)base + at : NULL, on_device, buf, n);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

static ferry_status for_each_state_chunk_partitioned(const ckpt_env *e, void *buf, chunk_fn fn, void *ctx);

/* Array k (0 master, 1 m, 2 v) of group g in form ff as the file holds it,
 * cut into runs each rank owns a part of (dp.h), and where this rank keeps
 * them: one run, or for 8bit the codes, *pad zero bytes (to 4), then the
 * absmax, one per 256 codes (a slot starts on a block). Returns the runs. */
static int state_runs(const engine_group *g, int k, ferry_moments ff, dp_run out[2], size_t *pad)
{
    void *arr = k == 0 ? (void *)g->master : ff == FERRY_MOMENTS_F32 ? (void *)(k == 1 ? g->m : g->v)
                                                                      : (k == 1 ? g->mq : g->vq);
    *pad = 0;
    if (k == 0 || ff != FERRY_MOMENTS_8BIT) {
        out[0] = (dp_run){arr, k == 0 || ff == FERRY_MOMENTS_F32 ? 4 : 2, g->numel, g->part_cap};
        return 1;
    }
    out[0] = (dp_run){arr, 1, g->numel, g->part_cap};
    *pad = moments_q8_codes_bytes(g->numel) - g->numel;
    out[1] = (dp_run){arr ? moments_q8_absmax(arr, g->part_cap) : NULL, sizeof(float), moments_q8_blocks(g->numel),
                      g->part_cap / MOMENTS_Q8_BLOCK};
    return 2;
}

static ferry_moments engine_form(const ckpt_env *e) { return e->ctx->cfg->moments; }

/* A chunk taken from host memory (`p` a cursor into it), as load_chunk
 * takes one from the file: the converted moment on its way to the disk. */
static ferry_status from_memory(void *p, void *state, bool on_device, void *buf, size_t bytes)
{
    (void)on_device, (void)buf;
    char **at = p;
    memcpy(state, *at, bytes);
    *at += bytes;
    return FERRY_OK;
}

/* One moment of a group read in the file's form `ff` and converted to the
 * engine's through a scratch of the file's bytes (a resume with another
 * form; the state in host memory or on the NVMe tier, never on the device,
 * checked before). On the NVMe tier the group's moment is converted in a
 * second scratch and written to the disk from it. */
static ferry_status load_converted(const ckpt_env *e, engine_group *g, int k, ferry_moments ff, void *buf,
                                   chunk_fn fn, void *ctx)
{
    ferry_moments ef = engine_form(e);
    void *dst = ef == FERRY_MOMENTS_F32 ? (void *)(k == 1 ? g->m : g->v) : (k == 1 ? g->mq : g->vq);
    size_t bytes = moments_bytes(ff, g->numel), out = dst ? 0 : moments_bytes(ef, g->numel);
    void *scratch = malloc(bytes ? bytes : 1), *converted = out ? malloc(out) : NULL;
    ferry_status st = FERRY_OK;
    if (!scratch || (out && !converted))
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory for %zu bytes converting group '%s' "
                     "'s moments", bytes + out, g->name);
    if (st == FERRY_OK)
        st = for_each_chunk_of(scratch, bytes, false, buf, fn, ctx);
    if (st == FERRY_OK)
        st = moments_convert(dst ? dst : converted, ef, scratch, ff, g->numel, k == 1);
    char *at = converted;
    if (st == FERRY_OK && !dst)
        st = update_state_chunks(e->update, g, k, true, buf, CKPT_CHUNK, from_memory, &at);
    free(scratch);
    free(converted);
    return st;
}

/* Every group's master weights, then m, then v, the moments in the file's
 * form `ff` (saving: the engine's). Arrays the NVMe tier holds are read
 * from disk (`disk` 1: saving), written to it (2: loading), or only walked
 * (0: the file's bytes alone); a load of another form converts. */
static ferry_status for_each_state_chunk(const ckpt_env *e, void *buf, chunk_fn fn, void *ctx, int disk,
                                         ferry_moments ff)
{
    if (dp_partitioned(e->dp, ctx_mode(e->ctx))) /* each rank holds part of every array */
        return for_each_state_chunk_partitioned(e, buf, fn, ctx);
    ferry_status st = FERRY_OK;
    bool compact = engine_form(e) != FERRY_MOMENTS_F32;
    for (int i = 0; i < e->groups->n && st == FERRY_OK; i++) {
        engine_group *g = &e->groups->g[i];
        void *arrays[3] = {g->master, compact ? g->mq : (void *)g->m, compact ? g->vq : (void *)g->v};
        for (int k = 0; k < 3 && st == FERRY_OK; k++) {
            size_t bytes = k == 0 ? g->numel * sizeof(float) : moments_bytes(ff, g->numel);
            if (k > 0 && disk == 2 && ff != engine_form(e))
                st = load_converted(e, g, k, ff, buf, fn, ctx);
            else if (!arrays[k] && disk)
                st = update_state_chunks(e->update, g, k, disk == 2, buf, CKPT_CHUNK, fn, ctx);
            else
                st = for_each_chunk_of(disk ? arrays[k] : NULL, bytes, state_on_device(e), buf, fn, ctx);
        }
    }
    return st;
}

/* Every group's device weights (`apply` false: their place in the file only). */
static ferry_status for_each_weight_chunk(const ckpt_env *e, size_t elem, bool apply, void *buf, chunk_fn fn,
                                          void *ctx)
{
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->groups->n && st == FERRY_OK; i++) {
        engine_group *g = &e->groups->g[i];
        st = for_each_chunk_of(apply ? g->dev_weights : NULL, g->numel * elem, true, buf, fn, ctx);
    }
    return st;
}

/* The bytes of every group's master weights and moments in form ff. */
static uint64_t state_bytes(const ckpt_env *e, ferry_moments ff)
{
    uint64_t n = 0;
    for (int i = 0; i < e->groups->n; i++)
        n += (uint64_t)e->groups->g[i].numel * sizeof(float) + 2 * (uint64_t)moments_bytes(ff, e->groups->g[i].numel);
    return n;
}

static ferry_moments file_form(const ckpt_header *h)
{
    return (ferry_moments)((h->flags & CKPT_FLAG_FORM_MASK) >> CKPT_FLAG_FORM_SHIFT);
}

static uint64_t weight_bytes(const ckpt_env *e, size_t elem)
{
    uint64_t n = 0;
    for (int i = 0; i < e->groups->n; i++)
        n += (uint64_t)e->groups->g[i].numel * elem;
    return n;
}

/* ---- save ---- */

typedef struct save_ctx {
    const ckpt_env *e;
    fileio_atomic *file;
    uint64_t hash;
    uint64_t written; /* payload bytes so far: the writer's progress the other ranks see */
} save_ctx;

static ferry_status save_chunk(void *p, void *state, bool on_device, void *buf, size_t bytes)
{
    save_ctx *c = p;
    ferry_status st = copy_chunk(c->e, state, on_device, buf, bytes, false);
    if (st != FERRY_OK)
        return st;
    c->hash = sum_update(CKPT_VERSION, c->hash, buf, bytes);
    c->written += bytes;
    dp_save_progress(c->e->dp, c->written);
    return fileio_atomic_write(c->file, buf, bytes);
}

static ckpt_group *group_table(const ckpt_env *e)
{
    ckpt_group *table = calloc((size_t)e->groups->n, sizeof *table);
    for (int i = 0; table && i < e->groups->n; i++) {
        snprintf(table[i].name, sizeof table[i].name, "%s", e->groups->g[i].name);
        table[i].numel = e->groups->g[i].numel;
    }
    return table;
}

/* The payload before the blob; returns its hash in c->hash. */
static ferry_status save_payload(const ckpt_env *e, save_ctx *c, bool delayed)
{
    void *buf = malloc(CKPT_CHUNK);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "saving a checkpoint: out of host memory");
    ferry_status st = for_each_state_chunk(e, buf, save_chunk, c, 1, engine_form(e));
    if (st == FERRY_OK && delayed)
        st = for_each_weight_chunk(e, e->ctx->act_size, true, buf, save_chunk, c);
    free(buf);
    if (st != FERRY_OK)
        return st;
    const engine_scaling *es = e->scaling;
    ckpt_scaling sc = {es->on ? es->scaler.scale : 0.0f, es->on ? es->scaler.tracker : 0, es->skipped_steps,
                       es->skips_in_row, {0, 0, 0}};
    c->hash = sum_update(CKPT_VERSION, c->hash, &sc, sizeof sc);
    return fileio_atomic_write(c->file, &sc, sizeof sc);
}

/* Header first with zero checksums, then the real one once known. On
 * failure the temporary is already gone (fileio_atomic aborts itself). */
static ferry_status save_body(const ckpt_env *e, fileio_atomic *file, const void *user, size_t user_bytes)
{
    bool delayed = update_delayed_pending(e->update);
    uint64_t payload =
        state_bytes(e, engine_form(e)) + (delayed ? weight_bytes(e, e->ctx->act_size) : 0) + sizeof(ckpt_scaling) +
        user_bytes;
    uint32_t flags = (delayed ? CKPT_FLAG_DELAYED : 0) | CKPT_FLAG_SCALING |
                     (uint32_t)engine_form(e) << CKPT_FLAG_FORM_SHIFT; /* f32: 0, the files as before */
    ckpt_header h = {{0}, CKPT_VERSION, (uint32_t)e->groups->n, e->prog->step, user_bytes, payload, 0, 0,
                     (uint32_t)e->ctx->act, flags, 0, 0};
    memcpy(h.magic, CKPT_MAGIC, 8);
    ckpt_group *table = group_table(e);
    if (!table)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "saving a checkpoint: out of host memory for the group table");
    save_ctx c = {.e = e, .file = file, .hash = sum_seed(CKPT_VERSION)};
    ferry_status st = fileio_atomic_write(file, &h, sizeof h);
    if (st == FERRY_OK)
        st = fileio_atomic_write(file, table, (size_t)e->groups->n * sizeof *table);
    if (st == FERRY_OK)
        st = save_payload(e, &c, delayed);
    if (st == FERRY_OK && user_bytes)
        st = fileio_atomic_write(file, user, user_bytes);
    h.checksum = c.hash;
    h.user_checksum = sum_update(CKPT_VERSION, sum_seed(CKPT_VERSION), user, user_bytes);
    h.head_crc = head_crc(&h, table);
    free(table);
    if (st == FERRY_OK)
        st = fileio_atomic_pwrite(file, &h, sizeof h, 0);
    return st;
}

/* The file of one engine holding the whole state, or of rank 0 gathering it. */
static ferry_status save_file(const ckpt_env *e, const char *path, const void *user, size_t user_bytes)
{
    ferry_status st;
    if (!path || (user_bytes && !user))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_save: NULL path or user blob");
    /* The split update's groups: their state from the device first. */
    if ((st = quiesce(e)) != FERRY_OK || (st = update_pull(e->update)) != FERRY_OK)
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

/* ---- reading: the header, checked on its own ---- */

typedef struct ckpt_file {
    int fd;
    const char *path;
    ckpt_header h;
    ckpt_group *table;
} ckpt_file;

static void ckpt_close(ckpt_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->table);
    f->fd = -1;
    f->table = NULL;
}

static ferry_status read_table(ckpt_file *f)
{
    if (f->h.groups == 0 || f->h.groups > ENGINE_MAX_GROUPS)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: it claims %u parameter groups (1..%d are possible)",
                       f->path, f->h.groups, ENGINE_MAX_GROUPS);
    f->table = malloc((size_t)f->h.groups * sizeof *f->table);
    if (!f->table)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "checkpoint '%s': out of host memory for its group table", f->path);
    return read_all(f->fd, f->table, (size_t)f->h.groups * sizeof *f->table, f->path);
}

/* What the header says, once its checksum holds. */
static ferry_status check_fields(const ckpt_file *f)
{
    const ckpt_header *h = &f->h;
    if (h->step < 0)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' records step %lld; a step count is never negative: the "
                                         "file was not written by ferry_engine_save",
                       f->path, (long long)h->step);
    if (h->step == INT64_MAX)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' records step %lld, the largest a step count can be: one "
                                         "more step would overflow it",
                       f->path, (long long)h->step);
    if (h->reserved != 0)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' has 0x%08x in its reserved header word, which is always "
                                         "0: it is damaged",
                       f->path, h->reserved);
    if (h->flags & ~CKPT_FLAGS_KNOWN)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' has flags 0x%x, of which this ferry knows only 0x%x: it "
                                         "is from a newer ferry",
                       f->path, h->flags, CKPT_FLAGS_KNOWN);
    if (moments_check_form(file_form(h), "checkpoint") != FERRY_OK)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' records moments form %u, which this ferry does not know: it "
                                         "is from a newer ferry or damaged",
                       f->path, (unsigned)file_form(h));
    struct stat sb;
    uint64_t want = head_bytes(h->groups) + h->payload_bytes;
    if (fstat(f->fd, &sb) != 0)
        return err_set(FERRY_ERR_IO, "checkpoint '%s': cannot read its size: %s", f->path, strerror(errno));
    if (h->user_bytes > h->payload_bytes || (uint64_t)sb.st_size != want)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is %lld bytes, its header says %llu: it is truncated or "
                                         "damaged",
                       f->path, (long long)sb.st_size, (unsigned long long)want);
    return FERRY_OK;
}

/* Opens a checkpoint and checks its header and group table against their
 * CRC and the file's size. On failure nothing is left open. */
static ferry_status ckpt_open(const char *path, ckpt_file *f)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    /* Never blocks on a FIFO; anything but a regular file is refused. */
    ferry_status st = fileio_open_input(path, "checkpoint", &f->fd, NULL);
    if (st != FERRY_OK)
        return st;
    st = read_all(f->fd, &f->h, sizeof f->h, path);
    if (st == FERRY_OK && memcmp(f->h.magic, CKPT_MAGIC, 8) != 0)
        st = err_set(FERRY_ERR_FORMAT, "'%s' is not a ferry engine checkpoint (bad magic)", path);
    if (st == FERRY_OK && (f->h.version < CKPT_VERSION_OLDEST || f->h.version > CKPT_VERSION))
        st = err_set(FERRY_ERR_FORMAT, "checkpoint '%s' has version %u; this ferry reads versions %u to %u", path,
                     f->h.version, CKPT_VERSION_OLDEST, CKPT_VERSION);
    if (st == FERRY_OK)
        st = read_table(f);
    if (st == FERRY_OK && head_crc(&f->h, f->table) != f->h.head_crc)
        st = err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: the checksum of its header and group table "
                                       "(step count, sizes, names) does not match; nothing was loaded",
                     path);
    if (st == FERRY_OK)
        st = check_fields(f);
    if (st != FERRY_OK)
        ckpt_close(f);
    return st;
}

/* The engine's groups against the file's; *weight_elem is the element size
 * of the device weights the file holds (0: none). */
static ferry_status check_model(const ckpt_env *e, const ckpt_file *f, size_t *weight_elem)
{
    if (f->h.groups != (uint32_t)e->groups->n)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' has %u parameter groups, the engine has %d: it is "
                                         "from another model",
                       f->path, f->h.groups, e->groups->n);
    for (int i = 0; i < e->groups->n; i++)
        if (f->table[i].numel != e->groups->g[i].numel)
            return err_set(FERRY_ERR_FORMAT,
                           "checkpoint '%s': group %d ('%.*s') has %llu parameters, the engine's '%s' has %zu: "
                           "it is from another model",
                           f->path, i, ENGINE_NAME_MAX, f->table[i].name, (unsigned long long)f->table[i].numel,
                           e->groups->g[i].name, e->groups->g[i].numel);
    ferry_moments ff = file_form(&f->h), ef = engine_form(e);
    /* under the ranks each converts its part, read from the file's own place (version 4 on) */
    bool parts_unread = dp_partitioned(e->dp, ctx_mode(e->ctx)) && f->h.version < CKPT_VERSION_CRC;
    if (ff != ef && (parts_unread || state_on_device(e)))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "checkpoint '%s' holds %s moments and this engine keeps %s ones %s; resume with moments %s "
                       "(or convert it in a run alone in offload optimizer, params or nvme)",
                       f->path, ferry_moments_name(ff), ferry_moments_name(ef),
                       state_on_device(e) ? "on the device" : "partitioned across ranks (from a file of version 2 or 3)",
                       ferry_moments_name(ff));
    uint64_t scaling = f->h.flags & CKPT_FLAG_SCALING ? sizeof(ckpt_scaling) : 0;
    uint64_t states = state_bytes(e, file_form(&f->h)), numel = weight_bytes(e, 1);
    uint64_t fixed = states + scaling + f->h.user_bytes;
    uint64_t rest = f->h.payload_bytes >= fixed ? f->h.payload_bytes - fixed : UINT64_MAX;
    bool delayed = (f->h.flags & CKPT_FLAG_DELAYED) != 0;
    *weight_elem = delayed && rest % numel == 0 ? (size_t)(rest / numel) : 0;
    bool fits = delayed ? *weight_elem >= 1 && *weight_elem <= 8 : rest == 0;
    if (!fits)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' holds %llu bytes of state, which the engine's groups "
                                         "(%llu parameters%s) cannot fill exactly: it is damaged",
                       f->path, (unsigned long long)f->h.payload_bytes, (unsigned long long)numel,
                       delayed ? ", with device weights" : "");
    return FERRY_OK;
}

/* Reads the blob (at the end of the file) and checks its hash; copies up to
 * cap bytes into user when user is not NULL. */
static ferry_status read_blob(const ckpt_file *f, void *user, size_t cap)
{
    off_t at = (off_t)(head_bytes(f->h.groups) + f->h.payload_bytes - f->h.user_bytes);
    if (lseek(f->fd, at, SEEK_SET) != at)
        return err_set(FERRY_ERR_IO, "seeking in checkpoint '%s': %s", f->path, strerror(errno));
    char *blob = malloc(f->h.user_bytes ? f->h.user_bytes : 1);
    if (!blob)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "checkpoint '%s': out of host memory for its %llu-byte user blob",
                       f->path, (unsigned long long)f->h.user_bytes);
    ferry_status st = read_all(f->fd, blob, f->h.user_bytes, f->path);
    if (st == FERRY_OK && sum_update(f->h.version, sum_seed(f->h.version), blob, f->h.user_bytes) != f->h.user_checksum)
        st = err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: the checksum of its user blob does not match; "
                                       "nothing was loaded",
                     f->path);
    if (st == FERRY_OK && user)
        memcpy(user, blob, f->h.user_bytes < cap ? f->h.user_bytes : cap);
    free(blob);
    return st;
}

ferry_status ferry_engine_load_user(const char *path, void *user, size_t user_cap, size_t *user_bytes)
{
    if (!path || (user_cap && !user))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_load_user: NULL path, or NULL user with a capacity");
    ckpt_file f;
    ferry_status st = ckpt_open(path, &f);
    if (st == FERRY_OK)
        st = read_blob(&f, user, user_cap);
    if (st == FERRY_OK && user_bytes)
        *user_bytes = f.h.user_bytes;
    ckpt_close(&f);
    return st;
}

ferry_status ferry_engine_checkpoint_moments(const char *path, ferry_moments *out)
{
    if (!path || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_checkpoint_moments: NULL path or out");
    ckpt_file f;
    ferry_status st = ckpt_open(path, &f);
    if (st == FERRY_OK)
        *out = file_form(&f.h);
    ckpt_close(&f);
    return st;
}

/* ---- load ---- */

typedef struct load_ctx {
    const ckpt_env *e;
    const ckpt_file *f;
    uint64_t hash;
    bool apply;      /* first pass: only hash; second: copy into the engine */
    size_t weight_elem; /* element size of the device weights in the file; 0: none */
    bool use_weights;   /* this engine takes them (delayed update on, same device type) */
    bool has_scaling;   /* the file has the loss scale section (flag 2) */
    ckpt_scaling scaling; /* read by the first pass */
    bool parts;         /* several ranks, a CRC-32C file: each checks a part and reads what it keeps */
} load_ctx;

static ferry_status load_chunk(void *p, void *state, bool on_device, void *buf, size_t bytes)
{
    load_ctx *c = p;
    ferry_status st = read_all(c->f->fd, buf, bytes, c->f->path);
    if (st != FERRY_OK)
        return st;
    if (!c->apply) {
        c->hash = sum_update(c->f->h.version, c->hash, buf, bytes);
        return FERRY_OK;
    }
    return state ? copy_chunk(c->e, state, on_device, buf, bytes, true) : FERRY_OK;
}

static ferry_status take_converted(const load_ctx *c, engine_group *g, int k, uint64_t at);

/* This rank's slot of every array, straight from where the file holds it
 * (the partitioned modes, applying a checked file): the rank reads its 1/N of
 * the state, nothing else of it. */
static ferry_status take_own_slots(const load_ctx *c, void *buf)
{
    const ckpt_env *e = c->e;
    uint64_t at = head_bytes(c->f->h.groups);
    ferry_moments ff = file_form(&c->f->h);
    int rank = dp_rank(e->dp);
    ferry_status st = FERRY_OK;
    for (int i = 0; i < e->groups->n && st == FERRY_OK; i++) {
        engine_group *g = &e->groups->g[i];
        for (int k = 0; k < 3 && st == FERRY_OK; k++) {
            if (k > 0 && ff != engine_form(e)) {
                st = take_converted(c, g, k, at);
                at += moments_bytes(ff, g->numel);
                continue;
            }
            dp_run runs[2];
            size_t pad;
            int nr = state_runs(g, k, ff, runs, &pad);
            for (int q = 0; q < nr && st == FERRY_OK; q++) {
                const dp_run *r = &runs[q];
                size_t lo = (size_t)rank * r->cap < r->len ? (size_t)rank * r->cap : r->len;
                size_t n = r->len - lo < r->cap ? r->len - lo : r->cap; /* the last slot may be padded */
                size_t own = n * r->esize;
                for (size_t done = 0; done < own && st == FERRY_OK; done += CKPT_CHUNK) {
                    size_t bytes = own - done < CKPT_CHUNK ? own - done : CKPT_CHUNK;
                    st = read_at(c->f->fd, buf, bytes, at + lo * r->esize + done, c->f->path);
                    if (st == FERRY_OK)
                        memcpy((char *)r->local + done, buf, bytes);
                }
                at += r->len * r->esize + (q == 0 ? pad : 0);
            }
        }
    }
    return st;
}

/* This rank's part of moment k of g from a file in another form, at `at`
 * in it (a resume in another form under the ranks): the part read in the
 * file's layout for its part_n elements, converted as a single process
 * converts the whole group (element by element, or per block of 256, on
 * which every slot starts), and laid into the slot's layout. */
static ferry_status take_converted(const load_ctx *c, engine_group *g, int k, uint64_t at)
{
    ferry_moments ff = file_form(&c->f->h), ef = engine_form(c->e);
    size_t n = g->part_n;
    unsigned char *from = calloc(1, moments_bytes(ff, n) + 1), *to = malloc(moments_bytes(ef, n) + 1);
    ferry_status st = FERRY_OK;
    if (!from || !to)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "checkpoint: out of host memory converting this rank's part of group "
                                              "'%s''s moments", g->name);
    dp_run runs[2];
    size_t pad, into = 0;
    int nr = state_runs(g, k, ff, runs, &pad);
    for (int q = 0; q < nr && st == FERRY_OK; q++) {
        const dp_run *r = &runs[q];
        size_t lo = (size_t)dp_rank(c->e->dp) * r->cap < r->len ? (size_t)dp_rank(c->e->dp) * r->cap : r->len;
        size_t own = r->len - lo < r->cap ? r->len - lo : r->cap;
        if (own)
            st = read_at(c->f->fd, from + into, own * r->esize, at + lo * r->esize, c->f->path);
        into = moments_q8_codes_bytes(n); /* 8bit: the absmax after the part's codes, padded */
        at += r->len * r->esize + (q == 0 ? pad : 0);
    }
    if (st == FERRY_OK)
        st = moments_convert(to, ef, from, ff, n, k == 1);
    if (st == FERRY_OK) {
        void *slot = ef == FERRY_MOMENTS_F32 ? (void *)(k == 1 ? g->m : g->v) : (k == 1 ? g->mq : g->vq);
        memcpy(slot, to, ef == FERRY_MOMENTS_8BIT ? n : moments_bytes(ef, n));
        if (ef == FERRY_MOMENTS_8BIT)
            memcpy(moments_q8_absmax(slot, g->part_cap), moments_q8_absmax(to, n),
                   moments_q8_blocks(n) * sizeof(float));
    }
    free(from);
    free(to);
    return st;
}

/* One pass over the payload before the blob. Applying, the device copies
 * are written from the master weights, then (a delayed update pending) the
 * device weights of the file replace them: the next forward reads those,
 * the next step uploads the master weights' copy. */
static ferry_status load_pass(load_ctx *c)
{
    const ckpt_env *e = c->e;
    off_t start = (off_t)head_bytes(c->f->h.groups), weights = start + (off_t)state_bytes(e, file_form(&c->f->h));
    if (lseek(c->f->fd, start, SEEK_SET) != start)
        return err_set(FERRY_ERR_IO, "seeking in checkpoint '%s': %s", c->f->path, strerror(errno));
    void *buf = malloc(CKPT_CHUNK);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "loading a checkpoint: out of host memory");
    ferry_status st = c->apply && c->parts && dp_partitioned(e->dp, ctx_mode(e->ctx))
                          ? take_own_slots(c, buf)
                          : for_each_state_chunk(e, buf, load_chunk, c, c->apply ? 2 : 0, file_form(&c->f->h));
    for (int i = 0; c->apply && i < e->groups->n && st == FERRY_OK; i++)
        st = update_write_weights(e->update, &e->groups->g[i]);
    if (st == FERRY_OK && lseek(c->f->fd, weights, SEEK_SET) != weights)
        st = err_set(FERRY_ERR_IO, "seeking in checkpoint '%s': %s", c->f->path, strerror(errno));
    if (st == FERRY_OK && c->weight_elem)
        st = for_each_weight_chunk(e, c->weight_elem, c->apply && c->use_weights, buf, load_chunk, c);
    free(buf);
    if (st == FERRY_OK && c->has_scaling && !c->apply) {
        st = read_all(c->f->fd, &c->scaling, sizeof c->scaling, c->f->path);
        c->hash = sum_update(c->f->h.version, c->hash, &c->scaling, sizeof c->scaling);
    }
    return st;
}

/* The bytes before the blob, cut into one part per rank: part r is
 * [P r / N, P (r + 1) / N). */
static uint64_t part_start(const ckpt_file *f, int r, int n)
{
    uint64_t p = f->h.payload_bytes - f->h.user_bytes;
    return p / (uint64_t)n * (uint64_t)r + p % (uint64_t)n * (uint64_t)r / (uint64_t)n;
}

/* The checking pass of a rank that checks its part only: its part's CRC
 * into *crc, and the loss scale section (whose bytes some part covers). */
static ferry_status check_part(load_ctx *c, uint32_t *crc)
{
    const ckpt_file *f = c->f;
    int r = dp_rank(c->e->dp), n = dp_world(c->e->dp);
    uint64_t base = head_bytes(f->h.groups), lo = part_start(f, r, n), hi = part_start(f, r + 1, n);
    void *buf = malloc(CKPT_CHUNK);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "loading a checkpoint: out of host memory");
    ferry_status st = FERRY_OK;
    *crc = 0;
    for (uint64_t at = lo; at < hi && st == FERRY_OK; at += CKPT_CHUNK) {
        size_t bytes = hi - at < CKPT_CHUNK ? (size_t)(hi - at) : CKPT_CHUNK;
        st = read_at(f->fd, buf, bytes, base + at, f->path);
        if (st == FERRY_OK)
            *crc = crc32c(*crc, buf, bytes);
    }
    free(buf);
    if (st == FERRY_OK && c->has_scaling)
        st = read_at(f->fd, &c->scaling, sizeof c->scaling, base + part_start(f, n, n) - sizeof c->scaling, f->path);
    return st;
}

/* The loss scale section's values make sense (its checksum held). */
static ferry_status check_scaling(const load_ctx *c)
{
    const ckpt_scaling *s = &c->scaling;
    if (!c->has_scaling)
        return FERRY_OK;
    bool ok = s->skipped_steps >= 0 && s->skips_in_row >= 0 && s->skips_in_row <= s->skipped_steps &&
              s->tracker >= 0 && (s->scale == 0.0f || (s->scale > 0 && s->scale <= FLT_MAX));
    if (!ok)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: its loss scale section holds scale %g, growth "
                                         "count %d, %lld skipped steps, %d in a row; nothing was loaded",
                       c->f->path, (double)s->scale, (int)s->tracker, (long long)s->skipped_steps,
                       (int)s->skips_in_row);
    return FERRY_OK;
}

/* The saved loss scale continues where this engine scales too; a run that
 * had none (or a file from before the section) starts from the initial
 * scale. The skip counts carry over either way. */
static void apply_scaling(const ckpt_env *e, const load_ctx *c)
{
    engine_scaling *es = e->scaling;
    step_scaling_reset(es, e->ctx->cfg);
    if (!c->has_scaling)
        return;
    es->skipped_steps = c->scaling.skipped_steps;
    es->skips_in_row = c->scaling.skips_in_row;
    if (es->on && c->scaling.scale > 0)
        loss_scale_restore(&es->scaler, c->scaling.scale, c->scaling.tracker); /* checked above */
}
static ferry_status load_agree(const ckpt_env *e, ferry_status st, const char *path, const ckpt_file *f, bool parts,
                               uint32_t part_crc);

/* Both passes, the hash check between them. */
static ferry_status load_checked(const ckpt_env *e, const ckpt_file *f, void *user, size_t user_cap)
{
    load_ctx c = {e, f, sum_seed(f->h.version), false, 0, false, (f->h.flags & CKPT_FLAG_SCALING) != 0,
                  {0, 0, 0, 0, {0, 0, 0}}, e->dp && f->h.version >= CKPT_VERSION_CRC};
    uint32_t part_crc = 0;
    ferry_status st = check_model(e, f, &c.weight_elem);
    if (st == FERRY_OK)
        st = c.parts ? check_part(&c, &part_crc) : load_pass(&c);
    if (st == FERRY_OK && !c.parts && c.hash != f->h.checksum)
        st = err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: its checksum does not match its contents; "
                                       "nothing was loaded",
                     f->path);
    if (st == FERRY_OK && !c.parts)
        st = check_scaling(&c);
    if (st == FERRY_OK)
        st = read_blob(f, NULL, 0);
    if (e->dp) /* every rank checked the file (or its part) before any applies it */
        st = load_agree(e, st, f->path, f, c.parts, part_crc);
    if (st == FERRY_OK && c.parts) /* its bytes are checked now */
        st = check_scaling(&c);
    if (st != FERRY_OK)
        return st;
    c.apply = true;
    c.use_weights = e->ctx->cfg->delayed_update && f->h.dtype == (uint32_t)e->ctx->act &&
                    c.weight_elem == e->ctx->act_size;
    if ((st = load_pass(&c)) != FERRY_OK || (st = update_push(e->update)) != FERRY_OK ||
        (st = read_blob(f, user, user_cap)) != FERRY_OK)
        return err_wrap(st, "loading '%s' failed midway, so the engine now holds part of it and part of its "
                            "earlier state; load a checkpoint again before training", f->path);
    if (file_form(&f->h) != engine_form(e) && dp_writes_files(e->dp)) /* said once, by rank 0 */
        fprintf(stderr, "ferry: warning: checkpoint '%s' holds %s Adam moments and this engine keeps %s ones: "
                        "converted, so the run goes on close to, not bitwise as, the one saved\n",
                f->path, ferry_moments_name(file_form(&f->h)), ferry_moments_name(engine_form(e)));
    e->prog->step = f->h.step;
    e->prog->micro_index = -1;
    update_set_delayed_pending(e->update, c.use_weights);
    apply_scaling(e, &c);
    return FERRY_OK;
}

static ferry_status load_file(const ckpt_env *e, const char *path, void *user, size_t user_cap, size_t *user_bytes)
{
    ferry_status st;
    if (!path)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "ferry_engine_load: path is NULL");
    if ((st = quiesce(e)) != FERRY_OK || (st = sched_retire_all(e->sched)) != FERRY_OK)
        return st;
    ckpt_file f;
    if ((st = ckpt_open(path, &f)) != FERRY_OK)
        return st;
    st = load_checked(e, &f, user, user_cap);
    if (st == FERRY_OK && user_bytes)
        *user_bytes = f.h.user_bytes;
    ckpt_close(&f);
    return st;
}

/* ---- data parallelism: one whole file at any world size ----
 *
 * Rank 0 writes the file a single process would write, byte for byte: in
 * the partitioned modes each chunk of each array (of each run of it, with
 * compact moments: state_runs) is gathered from the ranks that own it
 * (dp_gather_run) in the order the file holds it, the other ranks sending
 * their parts; in offload none every rank holds the
 * whole state and rank 0 writes its own. Every rank loads the whole file,
 * checks it whole, and keeps its part. So a checkpoint saved by N ranks
 * loads at M, and the format is the one-process format. Every rank returns
 * rank 0's status of a save, and a load fails everywhere if it failed
 * anywhere. */

/* The gathers of a partitioned save all ran (rank 0 keeps receiving after a
 * failed write, so the other ranks are never left sending). */
static _Thread_local bool gathered_whole;

/* The same chunks as for_each_state_chunk, in the same order: saving (fn
 * is save_chunk), each is first gathered from the ranks into a scratch;
 * loading (load_chunk), each is read whole and this rank keeps its part. A
 * failure of fn stops calling it but not the gathers. */
static ferry_status for_each_state_chunk_partitioned(const ckpt_env *e, void *buf, chunk_fn fn, void *ctx)
{
    bool saving = fn == save_chunk || fn == NULL;
    bool taking = fn == load_chunk && ((load_ctx *)ctx)->apply;
    /* saving: the engine's form; loading: the file's, which is the engine's (check_model) */
    ferry_moments form = fn == load_chunk ? file_form(&((load_ctx *)ctx)->f->h) : engine_form(e);
    char *scratch = malloc(CKPT_CHUNK);
    if (!scratch)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "a checkpoint: out of host memory");
    ferry_status st = FERRY_OK, sent = FERRY_OK;
    for (int i = 0; i < e->groups->n && sent == FERRY_OK; i++) {
        engine_group *g = &e->groups->g[i];
        for (int k = 0; k < 3 && sent == FERRY_OK; k++) {
            dp_run runs[2];
            size_t pad;
            int nr = state_runs(g, k, form, runs, &pad);
            for (int q = 0; q < nr && sent == FERRY_OK; q++) {
                const dp_run *r = &runs[q];
                size_t per = CKPT_CHUNK / r->esize;
                for (size_t at = 0; at < r->len && sent == FERRY_OK; at += per) {
                    size_t n = r->len - at < per ? r->len - at : per;
                    if (saving)
                        sent = dp_gather_run(e->dp, r, at, n, scratch);
                    if (sent == FERRY_OK && st == FERRY_OK && fn)
                        st = fn(ctx, scratch, false, buf, n * r->esize);
                    if (st == FERRY_OK && taking)
                        dp_take_run(e->dp, r, at, n, scratch);
                    if (!saving && st != FERRY_OK)
                        sent = st;
                }
                if (q == 0 && pad && sent == FERRY_OK && st == FERRY_OK && fn) { /* the codes' padding: zeros */
                    memset(scratch, 0, pad);
                    st = fn(ctx, scratch, false, buf, pad);
                    if (!saving && st != FERRY_OK)
                        sent = st;
                }
            }
        }
    }
    free(scratch);
    if (saving && sent == FERRY_OK)
        gathered_whole = true;
    return sent != FERRY_OK ? sent : st;
}

ferry_status ckpt_save(const ckpt_env *e, const char *path, const void *user, size_t user_bytes)
{
    if (!e->dp)
        return save_file(e, path, user, user_bytes);
    ferry_status st = dp_save_begin(e->dp, path);
    if (st != FERRY_OK)
        return err_wrap(st, "saving the checkpoint");
    bool partitioned = dp_partitioned(e->dp, ctx_mode(e->ctx));
    gathered_whole = false;
    if (dp_writes_files(e->dp)) {
        st = save_file(e, path, user, user_bytes);
    } else if (partitioned) {
        /* this rank sends its parts, in the order rank 0 writes them */
        ferry_status ready = quiesce(e);
        st = ready != FERRY_OK ? ready : for_each_state_chunk_partitioned(e, NULL, NULL, NULL);
    }
    /* rank 0 stopped before its gathers (a file it could not open): still take them */
    if (dp_writes_files(e->dp) && partitioned && !gathered_whole) {
        char keep[ERR_MESSAGE_MAX];
        snprintf(keep, sizeof keep, "%s", ferry_last_error());
        ferry_status drained = for_each_state_chunk_partitioned(e, NULL, NULL, NULL);
        if (st == FERRY_OK)
            st = drained;
        else
            err_set(st, "%s", keep);
    }
    st = dp_agree_status(e->dp, st, "saving the checkpoint");
    dp_save_end(e->dp);
    return st;
}

/* Whether this rank took part in its load's agreement yet. */
static _Thread_local bool load_agreed;

/* Every rank read the header `f` has; with `parts`, the ranks' parts
 * combined in rank order make the file's checksum. */
static ferry_status check_parts(const ckpt_file *f, bool parts, const double *crcs, const double *heads, int n)
{
    for (int r = 0; r < n; r++)
        if (heads[r] != (double)f->h.head_crc + 1)
            return err_set(FERRY_ERR_FORMAT, "loading '%s': rank %d read another file there (its header's CRC is "
                                             "%08llx, this rank's %08x); every rank must reach the same checkpoint",
                           f->path, r, heads[r] > 0 ? (unsigned long long)heads[r] - 1 : 0ull, f->h.head_crc);
    if (!parts)
        return FERRY_OK;
    uint32_t crc = (uint32_t)crcs[0];
    for (int r = 1; r < n; r++)
        crc = crc32c_combine(crc, (uint32_t)crcs[r], part_start(f, r + 1, n) - part_start(f, r, n));
    if (crc != (uint32_t)f->h.checksum)
        return err_set(FERRY_ERR_FORMAT, "checkpoint '%s' is damaged: its checksum does not match its contents "
                                         "(CRC-32C %08x, the header says %08x; %d ranks each checked a part); "
                                         "nothing was loaded",
                       f->path, crc, (unsigned)f->h.checksum, n);
    return FERRY_OK;
}

/* Once per load on every rank, before any rank applies the file: if one
 * could not read or check it, none goes on, and every rank read the same
 * header. `f`: the file this rank checked (NULL: it failed first); with
 * `parts` it checked only its part, whose CRC is `part_crc`: the ranks'
 * parts make the file's, checked here on every rank alike. One all-reduce
 * of 1 + 2N values: the ranks that failed, each rank's CRC and its
 * header's (+ 1: 0 is none), each in its own place, so the sum is exact. */
static ferry_status load_agree(const ckpt_env *e, ferry_status st, const char *path, const ckpt_file *f, bool parts,
                               uint32_t part_crc)
{
    load_agreed = true;
    char mine[ERR_MESSAGE_MAX];
    snprintf(mine, sizeof mine, "%s", ferry_last_error());
    int n = dp_world(e->dp), r = dp_rank(e->dp);
    double *v = calloc(1 + 2 * (size_t)n, sizeof *v);
    if (!v) /* this rank cannot agree: its abort tells the others, whose all-reduce fails */
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "loading '%s': out of host memory to agree with the other ranks",
                       path ? path : "");
    v[0] = st != FERRY_OK ? 1 : 0;
    if (st == FERRY_OK && f) {
        v[1 + r] = part_crc;
        v[1 + n + r] = (double)f->h.head_crc + 1;
    }
    ferry_status agreed = ferry_world_all_reduce(v, 1 + 2 * (size_t)n);
    double failed = v[0];
    ferry_status checked =
        agreed == FERRY_OK && failed == 0 && st == FERRY_OK && f ? check_parts(f, parts, v + 1, v + 1 + n, n) : FERRY_OK;
    free(v);
    if (agreed != FERRY_OK)
        return err_wrap(agreed, "loading '%s'", path ? path : "");
    if (st != FERRY_OK)
        return err_set(st, "%s", mine);
    if (failed > 0)
        return err_set(FERRY_ERR_IO, "loading '%s': %.0f other rank%s could not read or check it (see their "
                                     "messages); every rank must reach the same checkpoint",
                       path ? path : "", failed, failed > 1 ? "s" : "");
    return checked;
}

ferry_status ckpt_load(const ckpt_env *e, const char *path, void *user, size_t user_cap, size_t *user_bytes)
{
    load_agreed = false;
    ferry_status st = load_file(e, path, user, user_cap, user_bytes);
    if (!e->dp || load_agreed)
        return st;
    return load_agree(e, st, path, NULL, false, 0); /* failed before checking the file */
}
