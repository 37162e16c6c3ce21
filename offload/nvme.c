/* The NVMe store (see nvme.h): the file and its layout, the I/O paths (the
 * io_uring ring and its thread, or the threads of pread/pwrite), the
 * window's slots, the sweeps that stream tiles through them, the CRC-32C of
 * every block, and the probe of a folder. This file is its face: the
 * config's and the folder's checks (nvme_create), the regions, nvme_open,
 * which takes the file, the layout, the window and the I/O path in that
 * order, and its description, nvme_destroy, what the store chose, and the
 * sticky failure. It moves no bytes and computes no checksum: the parts it
 * calls are nvme_format.c's, nvme_file.c's, nvme_io.c's and nvme_sweep.c's
 * (nvme_impl.h says what they share). */
#include "offload/nvme_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/error.h"
#include "common/units.h"

const char *nvme_path(const nvme_store *s) { return s && s->path ? s->path : ""; }
size_t nvme_tile_elems(const nvme_store *s) { return s ? s->tile_elems : 0; }
size_t nvme_region_tiles(const nvme_store *s, int r) { return s && r >= 0 && r < s->nregions ? s->regions[r].ntiles : 0; }
uint64_t nvme_file_bytes(const nvme_store *s) { return s ? s->file_bytes : 0; }
uint64_t nvme_window_bytes(const nvme_store *s) { return s ? s->window_bytes : 0; }
int nvme_slots(const nvme_store *s) { return s ? s->nslots : 0; }
const char *nvme_describe(const nvme_store *s) { return s ? s->describe : ""; }

void nvme_io_bytes(const nvme_store *s, uint64_t *read, uint64_t *written)
{
    *read = *written = 0;
    if (!s)
        return;
    nvme_store *m = (nvme_store *)s; /* the lock only */
    pthread_mutex_lock(&m->mu);
    *read = s->bytes_read;
    *written = s->bytes_written;
    pthread_mutex_unlock(&m->mu);
}

nvme_io_path nvme_io_path_of(const nvme_store *s) { return s ? s->io : NVME_IO_AUTO; }
size_t nvme_align(const nvme_store *s) { return s ? s->align : NVME_ALIGN; }

/* Makes the failure sticky: the first one is kept and repeated. */
ferry_status nvme_fail(nvme_store *s, ferry_status st, const char *fmt, ...)
{
    if (s->failed == FERRY_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->failure, sizeof s->failure, fmt, ap);
        va_end(ap);
        s->failed = st;
    }
    return err_set(s->failed, "%s", s->failure);
}

ferry_status nvme_repeat_failure(const nvme_store *s)
{
    return err_set(s->failed, "%s", s->failure);
}

ferry_status nvme_failure(const nvme_store *s)
{
    if (!s)
        return FERRY_OK;
    nvme_store *m = (nvme_store *)s; /* the lock only */
    pthread_mutex_lock(&m->mu);
    ferry_status st = s->failed != FERRY_OK ? nvme_repeat_failure(s) : FERRY_OK;
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* The folder exists, is writable, and is on a disk. */
static ferry_status check_folder(const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return err_set(FERRY_ERR_IO, "NVMe folder '%s': %s; create it on a fast disk, or name another", dir,
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return err_set(FERRY_ERR_IO, "NVMe folder '%s' is not a folder; name a folder on a fast disk", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return err_set(FERRY_ERR_IO, "NVMe folder '%s' is not writable: %s", dir, strerror(errno));
    struct statfs fs;
    char fsname[32], why[320];
    if (statfs(dir, &fs) == 0 && nvme_not_a_disk(dir, &fs, fsname, sizeof fsname, why, sizeof why))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s", why);
    return FERRY_OK;
}

ferry_status nvme_create(const nvme_config *cfg, nvme_store **out)
{
    if (!cfg || !out || !cfg->dir || !cfg->pool)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme store: NULL config, folder or pool");
    *out = NULL;
    size_t block = nvme_block_or_default(cfg->block_bytes);
    if (block % NVME_ALIGN || block > NVME_MAX_BLOCK)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "NVMe block size %zu bytes: give a multiple of 4 KiB from 4 KiB to 64 MiB (1 MiB is the "
                       "default)",
                       block);
    int qd = cfg->queue_depth ? cfg->queue_depth : NVME_DEFAULT_QUEUE_DEPTH;
    if (qd < 1 || qd > NVME_MAX_QUEUE_DEPTH)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "NVMe queue depth %d is outside 1..%d (%d is the default)", qd,
                       NVME_MAX_QUEUE_DEPTH, NVME_DEFAULT_QUEUE_DEPTH);
    ferry_status st = check_folder(cfg->dir);
    if (st != FERRY_OK)
        return st;
    nvme_io_path io;
    st = nvme_io_path_asked(cfg->io, &io);
    if (st != FERRY_OK)
        return st;
    nvme_store *s = calloc(1, sizeof *s);
    char *dir = strdup(cfg->dir);
    if (!s || !dir) {
        free(s);
        free(dir);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory");
    }
    s->dir = dir;
    s->window_asked = nvme_window_or_default(cfg->window_bytes);
    s->block = block;
    s->qd = qd;
    s->pool = cfg->pool;
    s->trace = cfg->trace;
    s->io_asked = io;
    s->parallel = cfg->parallel;
    s->parallel_ctx = cfg->parallel_ctx;
    s->align = NVME_ALIGN;
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    s->sync_ok = true;
    *out = s;
    return FERRY_OK;
}

ferry_status nvme_add_region(nvme_store *s, const char *name, size_t numel, int narrays,
                             const char *const *array_names, const ferry_mem_category *cats, int *id)
{
    return nvme_add_region_as(s, name, numel, narrays, array_names, cats, NULL, id);
}

/* A form the layout can hold: no more than fp32's bytes over a tile. */
static ferry_status check_form(const char *name, int a, nvme_form f)
{
    bool group_ok = f.group == 0 ? f.group_bytes == 0 : 1024 % f.group == 0;
    if (f.elem_bytes < 1 || f.elem_bytes > 4 || !group_ok ||
        (uint64_t)f.elem_bytes * f.group + f.group_bytes > 4 * (uint64_t)(f.group ? f.group : 1))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "nvme_add_region('%s'): array %d's form (%u bytes an element, %u bytes per %u elements) "
                       "takes more than 4 bytes an element or groups that do not divide 1024",
                       name, a, f.elem_bytes, f.group_bytes, f.group);
    return FERRY_OK;
}

ferry_status nvme_add_region_as(nvme_store *s, const char *name, size_t numel, int narrays,
                                const char *const *array_names, const ferry_mem_category *cats,
                                const nvme_form *forms, int *id)
{
    if (!s || !name || !array_names || !cats)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_add_region: NULL argument");
    if (s->opened)
        return err_set(FERRY_ERR_STATE, "nvme_add_region('%s'): the store is already open", name);
    if (narrays < 1 || narrays > NVME_MAX_ARRAYS || numel == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_add_region('%s'): %d arrays of %zu elements", name, narrays,
                       numel);
    for (int a = 0; forms && a < narrays; a++) {
        ferry_status st = check_form(name, a, forms[a]);
        if (st != FERRY_OK)
            return st;
    }
    if (s->nregions == s->cap_regions) {
        int cap = s->cap_regions ? 2 * s->cap_regions : 16;
        nvme_region *grown = realloc(s->regions, (size_t)cap * sizeof *grown);
        if (!grown)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for region '%s'", name);
        s->regions = grown;
        s->cap_regions = cap;
    }
    nvme_region *r = &s->regions[s->nregions];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    for (int a = 0; a < narrays; a++) {
        snprintf(r->array_names[a], sizeof r->array_names[a], "%s", array_names[a]);
        r->cats[a] = cats[a];
        r->forms[a] = forms ? forms[a] : NVME_FORM_F32;
    }
    r->numel = numel;
    r->narrays = narrays;
    if (narrays > s->max_arrays)
        s->max_arrays = narrays;
    if (id)
        *id = s->nregions;
    s->nregions++;
    return FERRY_OK;
}

/* Bytes of array a of r in the file: its segments of every tile. */
static uint64_t array_bytes(const nvme_store *s, const nvme_region *r, int a)
{
    if (r->ntiles == 0)
        return 0;
    return (uint64_t)(r->ntiles - 1) * nvme_seg_bytes(s, r, 0, a) + nvme_seg_bytes(s, r, r->ntiles - 1, a);
}

static void trace_regions(nvme_store *s, bool alloc)
{
    for (int i = 0; s->trace && i < s->nregions; i++) {
        nvme_region *r = &s->regions[i];
        uint64_t at = 0;
        for (int a = 0; a < r->narrays; a++) {
            char name[NVME_NAME_MAX + NVME_ARRAY_NAME_MAX + 2];
            snprintf(name, sizeof name, "%s %s", r->name, r->array_names[a]);
            uint64_t per = array_bytes(s, r, a);
            /* The identity of a disk allocation: its array's place in the file, + 1. */
            const void *id = (const void *)(uintptr_t)(r->offset + at + 1);
            at += per;
            if (alloc)
                trace_alloc(s->trace, TRACE_POOL_DISK, r->cats[a], name, per, id);
            else
                trace_free(s->trace, TRACE_POOL_DISK, r->cats[a], name, per, id);
        }
    }
}

/* The sentence nvme_describe gives, with what fell back (`notes`). */
static void describe(nvme_store *s, const char *notes)
{
    char fb[32], wb[32], bb[32], path[300], al[32];
    if (s->io == NVME_IO_URING)
        snprintf(path, sizeof path, "io_uring");
    else if (s->io_note[0])
        snprintf(path, sizeof path, "%d threads of pread/pwrite (io_uring refused: %.200s)", s->nthreads, s->io_note);
    else
        snprintf(path, sizeof path, "%d threads of pread/pwrite, as asked", s->nthreads);
    snprintf(al, sizeof al, "%s%s", units_fmt_bytes(fb, sizeof fb, s->align),
             s->align_told ? "" : ", the kernel does not say");
    snprintf(s->describe, sizeof s->describe,
             "'%s': %s on disk (%s aligned to %s, %s), window %s (%d tiles of %zu elements), blocks of %s, queue "
             "depth %d, through %s%s",
             s->path, units_fmt_bytes(fb, sizeof fb, s->file_bytes), s->direct ? "O_DIRECT" : "buffered", al,
             s->fallocated ? "reserved" : "not reserved: no fallocate", units_fmt_bytes(wb, sizeof wb, s->window_bytes),
             s->nslots, s->tile_elems, units_fmt_bytes(bb, sizeof bb, s->block), s->qd, path, notes);
}

ferry_status nvme_open(nvme_store *s)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_open: store is NULL");
    if (s->opened)
        return err_set(FERRY_ERR_STATE, "nvme_open: already open");
    if (s->nregions == 0)
        return err_set(FERRY_ERR_STATE, "nvme_open: no region was added");
    char notes[512] = "";
    nvme_remove_stale(s);
    ferry_status st = nvme_create_file(s);
    if (st == FERRY_OK)
        st = nvme_lay_out(s);
    if (st == FERRY_OK)
        st = nvme_reserve(s);
    if (st == FERRY_OK)
        st = nvme_take_window(s);
    if (st == FERRY_OK)
        st = nvme_open_io(s, notes, sizeof notes);
    if (st != FERRY_OK)
        return st;
    s->opened = true;
    trace_regions(s, true);
    describe(s, notes);
    return FERRY_OK;
}

void nvme_destroy(nvme_store *s)
{
    if (!s)
        return;
    if (s->sweep.open)
        nvme_sweep_end(s);
    nvme_stop_threads(s);
    if (s->opened)
        trace_regions(s, false);
    if (s->ring_ok)
        io_uring_queue_exit(&s->ring);
    if (s->fd >= 0)
        close(s->fd);
    if (s->path)
        unlink(s->path);
    if (s->window)
        pool_free(s->pool, s->window);
    for (int i = 0; i < s->nslots; i++) {
        free(s->slots[i].ios);
        free(s->slots[i].crc);
    }
    for (int i = 0; i < s->nregions; i++)
        free(s->regions[i].crc);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->regions);
    free(s->q.ios);
    free(s->sweep.spans);
    free(s->path);
    free(s->dir);
    free(s);
}
