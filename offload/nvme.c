/* The NVMe store (see nvme.h): the file and its layout, the I/O paths (the
 * io_uring ring and its thread, or the threads of pread/pwrite), the
 * window's slots, the sweeps that stream tiles through them, the CRC-32C of
 * every block, and the probe of a folder. */
#include "offload/nvme.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/error.h"
#include "common/units.h"

/* Every completion's result passes through here; a fault-injection build
 * (common/fault_inject.h) counts it and may turn it into an error or a
 * short transfer. */
#ifndef io_completion_result
#define io_completion_result(res, len, is_write) (res)
#endif
/* The same build's other hooks: io_uring refused before io_uring_queue_init
 * or io_uring_submit is called (0 or -errno); the O_DIRECT alignment the
 * kernel gave. Elsewhere they change nothing. */
#ifndef io_uring_refusal
#define io_uring_refusal() 0
#endif
#ifndef io_submit_refusal
#define io_submit_refusal() 0
#endif
#ifndef io_dio_align
#define io_dio_align(kernel) (kernel)
#endif

#define NVME_NAME_MAX 64
#define NVME_ARRAY_NAME_MAX 32
#define FILE_PREFIX "ferry-state-"
#define FILE_SUFFIX ".swap"

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- the arithmetic ---- */

static uint64_t window_or_default(uint64_t w) { return w ? w : NVME_DEFAULT_WINDOW; }
static size_t block_or_default(size_t b) { return b ? b : NVME_DEFAULT_BLOCK; }

/* Bytes per array per slot: the window over NVME_TARGET_SLOTS slots, in
 * whole blocks where a block fits, else in units of `align`; 0 if fewer
 * than NVME_MIN_SLOTS slots of one unit fit. */
static uint64_t per_array_bytes(uint64_t window, size_t block, int arrays, size_t align)
{
    window = window_or_default(window);
    block = block_or_default(block);
    if (arrays < 1)
        arrays = 1;
    uint64_t per = window / ((uint64_t)arrays * NVME_TARGET_SLOTS);
    per = per >= block ? per / block * block : per / align * align;
    if (per < align)
        per = align;
    if (window / ((uint64_t)arrays * per) < NVME_MIN_SLOTS)
        return 0;
    return per;
}

/* Slots of `arrays` x `per` bytes: what the window holds, at most
 * NVME_MAX_SLOTS, and no more than the state fills. */
static int slots_for(uint64_t window, uint64_t per, int arrays, uint64_t state)
{
    uint64_t slot = (uint64_t)arrays * per;
    uint64_t n = window_or_default(window) / slot, fill = (state + slot - 1) / slot;
    if (n > fill)
        n = fill < NVME_MIN_SLOTS ? NVME_MIN_SLOTS : fill;
    return n > NVME_MAX_SLOTS ? NVME_MAX_SLOTS : (int)n;
}

size_t nvme_tile_elems_for(uint64_t window_bytes, size_t block_bytes, int max_arrays)
{
    return (size_t)(per_array_bytes(window_bytes, block_bytes, max_arrays, NVME_ALIGN) / sizeof(float));
}

static uint64_t region_bytes(size_t numel, int narrays, size_t tile_elems, size_t align)
{
    if (!tile_elems || !numel)
        return 0;
    size_t ntiles = (numel + tile_elems - 1) / tile_elems;
    size_t last = numel - (ntiles - 1) * tile_elems;
    return (uint64_t)(ntiles - 1) * (uint64_t)narrays * tile_elems * sizeof(float) +
           (uint64_t)narrays * round_up(last * sizeof(float), align);
}

uint64_t nvme_region_bytes(size_t numel, int narrays, size_t tile_elems)
{
    return region_bytes(numel, narrays, tile_elems, NVME_ALIGN);
}

uint64_t nvme_window_charge(uint64_t window_bytes, size_t block_bytes, int max_arrays, uint64_t state_bytes)
{
    if (max_arrays < 1)
        max_arrays = 1;
    uint64_t per = per_array_bytes(window_bytes, block_bytes, max_arrays, NVME_ALIGN);
    if (!per)
        return 0;
    int slots = slots_for(window_bytes, per, max_arrays, state_bytes);
    return pool_charge((size_t)((uint64_t)slots * (uint64_t)max_arrays * per));
}

/* ---- the store ---- */

typedef struct nvme_region {
    char name[NVME_NAME_MAX];
    char array_names[NVME_MAX_ARRAYS][NVME_ARRAY_NAME_MAX];
    ferry_mem_category cats[NVME_MAX_ARRAYS];
    size_t numel, ntiles;
    int narrays;
    uint64_t offset, bytes;
    uint64_t first_block; /* global number of its first block, for messages */
    uint32_t *crc;        /* [ntiles][narrays][blocks per full segment] */
    bool written[NVME_MAX_ARRAYS];
} nvme_region;

typedef enum slot_state {
    SLOT_FREE = 0,
    SLOT_READING, /* reads queued or in flight (pending > 0), or all landed, not yet handed over */
    SLOT_HELD,    /* the caller has it */
    SLOT_WRITING, /* writes queued or in flight */
} slot_state;

/* One block's transfer, resumed where a short one stopped. */
/* One block's transfer, resumed where a short one stopped. */
typedef struct nvme_io {
    int slot;
    bool write;
    char *buf;        /* where the rest goes / comes from */
    uint64_t off;     /* file offset of the rest */
    uint32_t len;     /* bytes left */
    uint64_t start;   /* the block's first byte in the file */
    uint32_t full;    /* the block's length */
    uint64_t block;   /* its global number */
    int region, array;
    size_t elem0, elems; /* the elements it holds */
    bool resumed;        /* submitted again (the kernel asked to retry, or moved part of it) */
    int again;           /* EAGAIN answers in a row */
} nvme_io;

typedef struct nvme_slot {
    char *buf; /* max_arrays segments of seg_bytes */
    slot_state state;
    int pending; /* I/Os not yet completed */
    size_t seq;  /* position in the sweep */
    int region;
    size_t tile;
    unsigned arrays;
    nvme_io *ios; /* max_arrays x bps */
    int nios;
    uint32_t *crc; /* the CRCs of its blocks as computed, in `ios` order */
} nvme_slot;

struct nvme_store {
    char *dir, *path;
    uint64_t window_asked;
    size_t block;
    int qd;
    pool *pool;
    trace *trace;
    nvme_io_path io_asked, io;
    nvme_parallel_fn parallel;
    void *parallel_ctx;

    nvme_region *regions;
    int nregions, cap_regions, max_arrays;
    size_t align;                      /* O_DIRECT's: offsets, segments and slots are multiples of it */
    bool align_told;                   /* the kernel said it (STATX_DIOALIGN) */
    size_t tile_elems, seg_bytes, bps; /* elements per tile; bytes of a full segment; blocks per full segment */
    uint64_t file_bytes, blocks;

    int fd;
    bool opened, direct, fixed_file, fixed_bufs, ring_ok, fallocated;
    struct io_uring ring;
    char *window;
    uint64_t window_bytes;
    int nslots;
    nvme_slot slots[NVME_MAX_SLOTS];

    /* The store's threads: the ring's (reaps and resubmits) or the
     * pread/pwrite workers. Everything below is under mu. */
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* an I/O completed, or the store failed: the caller may go on */
    pthread_cond_t work_cv; /* work was queued, or stop: the store's threads may go on */
    pthread_t threads[NVME_MAX_IO_THREADS];
    int nthreads;
    bool sync_ok, stop;

    /* I/Os waiting for room in the queue depth, oldest first */
    nvme_io **queue;
    size_t qcap, qhead, qlen;
    int inflight; /* submitted to the kernel (or taken by a worker), not yet completed */
    int prepared; /* in the submission ring, not yet submitted */
    int refusals; /* submissions refused in a row with nothing in flight */
    bool again;   /* a transfer came back EAGAIN: pause before the next submission */
    unsigned pause_us;

    /* the open sweep */
    bool sweeping;
    nvme_mode mode;
    nvme_span *spans;
    int nspans;
    size_t total, issued, handed; /* tiles: in the sweep, given a slot, handed to the caller */
    int cur_span;                 /* the next tile to give a slot */
    size_t cur_tile;

    ferry_status failed;
    char failure[ERR_MESSAGE_MAX];
    uint64_t bytes_read, bytes_written, resumed;
    char io_note[256];
    char describe[1024];
};

static atomic_flag direct_warned = ATOMIC_FLAG_INIT;

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
static ferry_status fail(nvme_store *s, ferry_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ferry_status fail(nvme_store *s, ferry_status st, const char *fmt, ...)
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

static ferry_status repeat_failure(const nvme_store *s)
{
    return err_set(s->failed, "%s", s->failure);
}

ferry_status nvme_failure(const nvme_store *s)
{
    if (!s)
        return FERRY_OK;
    nvme_store *m = (nvme_store *)s; /* the lock only */
    pthread_mutex_lock(&m->mu);
    ferry_status st = s->failed != FERRY_OK ? repeat_failure(s) : FERRY_OK;
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* ---- the folder's file system ---- */

/* File systems that are not a disk, by statfs magic: those that keep their
 * files in memory, and the kernel's pseudo ones. */
static const struct {
    long magic;
    const char *name;
    bool memory; /* in memory (else: a pseudo file system) */
} not_disks[] = {
    {TMPFS_MAGIC, "tmpfs", true},       {RAMFS_MAGIC, "ramfs", true},     {HUGETLBFS_MAGIC, "hugetlbfs", true},
    {PROC_SUPER_MAGIC, "proc", false},  {SYSFS_MAGIC, "sysfs", false},    {DEVPTS_SUPER_MAGIC, "devpts", false},
    {CGROUP_SUPER_MAGIC, "cgroup", false}, {CGROUP2_SUPER_MAGIC, "cgroup2", false},
    {DEBUGFS_MAGIC, "debugfs", false},  {TRACEFS_MAGIC, "tracefs", false}, {SECURITYFS_MAGIC, "securityfs", false},
    {PSTOREFS_MAGIC, "pstore", false},  {BPF_FS_MAGIC, "bpf", false},
};

static const struct {
    long magic;
    const char *name;
} disks[] = {
    {EXT4_SUPER_MAGIC, "ext4"}, {XFS_SUPER_MAGIC, "xfs"},     {BTRFS_SUPER_MAGIC, "btrfs"},
    {0x2fc12fc1, "zfs"},        {F2FS_SUPER_MAGIC, "f2fs"},   {NFS_SUPER_MAGIC, "nfs"},
    {OVERLAYFS_SUPER_MAGIC, "overlay"}, {0x65735546, "fuse"}, {0x01021997, "9p"},
};

/* The file system under `dir` into out; its sentence into why (and true)
 * when it is not a disk. Unknown magic numbers are disks. */
static bool not_a_disk(const char *dir, const struct statfs *fs, char *name, size_t ncap, char *why, size_t wcap)
{
    snprintf(name, ncap, "0x%lx", (unsigned long)fs->f_type);
    for (size_t i = 0; i < sizeof disks / sizeof disks[0]; i++)
        if ((unsigned long)fs->f_type == (unsigned long)disks[i].magic)
            snprintf(name, ncap, "%s", disks[i].name);
    for (size_t i = 0; i < sizeof not_disks / sizeof not_disks[0]; i++) {
        if ((unsigned long)fs->f_type != (unsigned long)not_disks[i].magic)
            continue;
        snprintf(name, ncap, "%s", not_disks[i].name);
        if (not_disks[i].memory)
            snprintf(why, wcap,
                     "NVMe folder '%s' is on %s, which keeps its files in host memory: the state there would take "
                     "the memory the NVMe tier exists to spare (and count against the job's memory limit); name a "
                     "folder on a disk",
                     dir, not_disks[i].name);
        else
            snprintf(why, wcap, "NVMe folder '%s' is on %s, the kernel's pseudo file system, not a disk; name a "
                     "folder on a disk", dir, not_disks[i].name);
        return true;
    }
    return false;
}

/* The path asked for: the config's, or $FERRY_NVME_IO's when it says auto. */
static ferry_status io_path_asked(nvme_io_path cfg, nvme_io_path *out)
{
    *out = cfg;
    const char *env = getenv("FERRY_NVME_IO");
    if (cfg != NVME_IO_AUTO || !env || !*env || !strcmp(env, "auto"))
        return FERRY_OK;
    if (!strcmp(env, "uring"))
        *out = NVME_IO_URING;
    else if (!strcmp(env, "threads"))
        *out = NVME_IO_THREADS;
    else
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "FERRY_NVME_IO='%s': give uring, threads or auto", env);
    return FERRY_OK;
}

ferry_status nvme_create(const nvme_config *cfg, nvme_store **out)
{
    if (!cfg || !out || !cfg->dir || !cfg->pool)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme store: NULL config, folder or pool");
    *out = NULL;
    size_t block = block_or_default(cfg->block_bytes);
    if (block % NVME_ALIGN || block > NVME_MAX_BLOCK)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "NVMe block size %zu bytes: give a multiple of 4 KiB from 4 KiB to 64 MiB (1 MiB is the "
                       "default)",
                       block);
    int qd = cfg->queue_depth ? cfg->queue_depth : NVME_DEFAULT_QUEUE_DEPTH;
    if (qd < 1 || qd > NVME_MAX_QUEUE_DEPTH)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "NVMe queue depth %d is outside 1..%d (%d is the default)", qd,
                       NVME_MAX_QUEUE_DEPTH, NVME_DEFAULT_QUEUE_DEPTH);
    struct stat sb;
    if (stat(cfg->dir, &sb) != 0)
        return err_set(FERRY_ERR_IO, "NVMe folder '%s': %s; create it on a fast disk, or name another", cfg->dir,
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return err_set(FERRY_ERR_IO, "NVMe folder '%s' is not a folder; name a folder on a fast disk", cfg->dir);
    if (access(cfg->dir, W_OK | X_OK) != 0)
        return err_set(FERRY_ERR_IO, "NVMe folder '%s' is not writable: %s", cfg->dir, strerror(errno));
    struct statfs fs;
    char fsname[32], why[320];
    if (statfs(cfg->dir, &fs) == 0 && not_a_disk(cfg->dir, &fs, fsname, sizeof fsname, why, sizeof why))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s", why);
    nvme_io_path io;
    ferry_status st = io_path_asked(cfg->io, &io);
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
    s->window_asked = window_or_default(cfg->window_bytes);
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
    if (!s || !name || !array_names || !cats)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_add_region: NULL argument");
    if (s->opened)
        return err_set(FERRY_ERR_STATE, "nvme_add_region('%s'): the store is already open", name);
    if (narrays < 1 || narrays > NVME_MAX_ARRAYS || numel == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_add_region('%s'): %d arrays of %zu elements", name, narrays,
                       numel);
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

/* ---- the layout ---- */

static size_t tile_len(const nvme_store *s, const nvme_region *r, size_t tile)
{
    size_t first = tile * s->tile_elems;
    return r->numel - first < s->tile_elems ? r->numel - first : s->tile_elems;
}

static uint64_t seg_bytes_of(const nvme_store *s, const nvme_region *r, size_t tile)
{
    return round_up(tile_len(s, r, tile) * sizeof(float), s->align);
}

/* File offset of array a of tile `tile` of r. */
static uint64_t seg_offset(const nvme_store *s, const nvme_region *r, size_t tile, int a)
{
    return r->offset + (uint64_t)tile * (uint64_t)r->narrays * s->seg_bytes + (uint64_t)a * seg_bytes_of(s, r, tile);
}

static size_t crc_index(const nvme_store *s, const nvme_region *r, size_t tile, int a, size_t block)
{
    return (tile * (size_t)r->narrays + (size_t)a) * s->bps + block;
}

static ferry_status lay_out(nvme_store *s)
{
    if (s->nregions == 0)
        return err_set(FERRY_ERR_STATE, "nvme_open: no region was added");
    if (s->block % s->align)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "NVMe block size %zu bytes is not a multiple of the O_DIRECT alignment of '%s' (%zu bytes, as "
                       "the file system says); give a multiple of it",
                       s->block, s->path, s->align);
    s->tile_elems = (size_t)(per_array_bytes(s->window_asked, s->block, s->max_arrays, s->align) / sizeof(float));
    if (!s->tile_elems) {
        char w[32], need[32];
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "NVMe window %s is too small: it must hold %d tiles of %d arrays of %zu bytes, at least %s",
                       units_fmt_bytes(w, sizeof w, s->window_asked), NVME_MIN_SLOTS, s->max_arrays, s->align,
                       units_fmt_bytes(need, sizeof need, (uint64_t)NVME_MIN_SLOTS * (uint64_t)s->max_arrays * s->align));
    }
    s->seg_bytes = s->tile_elems * sizeof(float);
    s->bps = (s->seg_bytes + s->block - 1) / s->block;
    uint64_t at = 0, blocks = 0;
    for (int i = 0; i < s->nregions; i++) {
        nvme_region *r = &s->regions[i];
        r->ntiles = (r->numel + s->tile_elems - 1) / s->tile_elems;
        r->offset = at;
        r->bytes = region_bytes(r->numel, r->narrays, s->tile_elems, s->align);
        r->first_block = blocks;
        size_t ncrc = r->ntiles * (size_t)r->narrays * s->bps;
        r->crc = calloc(ncrc, sizeof *r->crc);
        if (!r->crc)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for the checksums of '%s'",
                           r->name);
        at += r->bytes;
        blocks += ncrc;
    }
    s->file_bytes = at;
    s->blocks = blocks;
    uint64_t per = s->seg_bytes;
    s->nslots = slots_for(s->window_asked, per, s->max_arrays, s->file_bytes);
    s->window_bytes = (uint64_t)s->nslots * (uint64_t)s->max_arrays * per;
    return FERRY_OK;
}

/* ---- the file ---- */

/* Files of runs that ended without removing theirs: a live store holds an
 * exclusive lock on its file, so one whose lock is free is stale. */
static void remove_stale(const nvme_store *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return; /* only housekeeping: the store's own open says what is wrong */
    char p[4096];
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        size_t n = strlen(ent->d_name), np = strlen(FILE_PREFIX), ns = strlen(FILE_SUFFIX);
        if (n <= np + ns || strncmp(ent->d_name, FILE_PREFIX, np) != 0 || strcmp(ent->d_name + n - ns, FILE_SUFFIX) != 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", s->dir, ent->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            continue;
        struct stat sb;
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(p) == 0) {
            char b[32];
            fprintf(stderr, "ferry: removed '%s' (%s), the state file of a run that ended without removing it\n", p,
                    units_fmt_bytes(b, sizeof b, (uint64_t)sb.st_size));
        }
        close(fd);
    }
    closedir(d);
}

/* O_DIRECT's alignment for this file: statx's STATX_DIOALIGN (Linux 6.1),
 * the larger of the memory and the offset alignment, never less than 4 KiB;
 * 4 KiB where the kernel does not say. */
static void dio_alignment(nvme_store *s)
{
    struct statx stx;
    size_t told = 0;
    memset(&stx, 0, sizeof stx);
    if (s->direct && statx(s->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN))
        told = stx.stx_dio_offset_align > stx.stx_dio_mem_align ? stx.stx_dio_offset_align : stx.stx_dio_mem_align;
    told = (size_t)io_dio_align(told);
    s->align_told = told > 0;
    s->align = told > NVME_ALIGN ? told : NVME_ALIGN;
}

static ferry_status create_file(nvme_store *s)
{
    static atomic_uint serial;
    char p[4096];
    int n = snprintf(p, sizeof p, "%s/" FILE_PREFIX "%ld-%u" FILE_SUFFIX, s->dir, (long)getpid(),
                     atomic_fetch_add(&serial, 1));
    if (n < 0 || (size_t)n >= sizeof p)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "NVMe folder '%s': the path is too long", s->dir);
    s->path = strdup(p);
    if (!s->path)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory");
    s->fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (s->fd < 0) {
        int e = errno;
        free(s->path);
        s->path = NULL;
        return err_set(FERRY_ERR_IO, "cannot create the state file '%s': %s", p, strerror(e));
    }
    /* O_DIRECT after creation: a file system without it (ramfs) refuses
     * here, where an open with it would have left the file behind. */
    int fl = fcntl(s->fd, F_GETFL);
    s->direct = fl >= 0 && fcntl(s->fd, F_SETFL, fl | O_DIRECT) == 0;
    if (!s->direct && !atomic_flag_test_and_set(&direct_warned))
        fprintf(stderr, "ferry: the file system of '%s' does not take O_DIRECT (%s); the NVMe store uses buffered "
                        "I/O there (through the page cache: slower, and it takes host memory)\n",
                s->dir, strerror(errno));
    if (flock(s->fd, LOCK_EX | LOCK_NB) != 0)
        return err_set(FERRY_ERR_IO, "cannot lock the state file '%s': %s", p, strerror(errno));
    dio_alignment(s);
    return FERRY_OK;
}

/* The advice is what the store knows to be true: the caller (engine) adds
 * its own (the master weights, when it put them there). */
static ferry_status no_room(const nvme_store *s, uint64_t free_bytes, const char *why)
{
    char need[32], have[32];
    if (free_bytes == UINT64_MAX)
        return err_set(FERRY_ERR_IO,
                       "the NVMe folder '%s' is too small%s: the state needs %s (%llu bytes); free space there, or "
                       "name a larger disk with nvme_path",
                       s->dir, why, units_fmt_bytes(need, sizeof need, s->file_bytes), (unsigned long long)s->file_bytes);
    return err_set(FERRY_ERR_IO,
                   "the NVMe folder '%s' is too small%s: the state needs %s (%llu bytes) and the disk has %s "
                   "(%llu bytes) free; free space there, or name a larger disk with nvme_path",
                   s->dir, why, units_fmt_bytes(need, sizeof need, s->file_bytes), (unsigned long long)s->file_bytes,
                   units_fmt_bytes(have, sizeof have, free_bytes), (unsigned long long)free_bytes);
}

/* The disk has room, and the room is taken now, not at the first write. */
static ferry_status reserve(nvme_store *s)
{
    struct statvfs vs;
    uint64_t free_bytes = UINT64_MAX;
    /* A file system that counts no blocks (ramfs) has no limit to check. */
    if (fstatvfs(s->fd, &vs) == 0 && vs.f_blocks > 0)
        free_bytes = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    if (free_bytes < s->file_bytes)
        return no_room(s, free_bytes, "");
    if (fallocate(s->fd, 0, 0, (off_t)s->file_bytes) == 0) {
        s->fallocated = true;
        return FERRY_OK;
    }
    int e = errno;
    if (e == ENOSPC || e == EDQUOT || e == EFBIG) {
        char why[96];
        snprintf(why, sizeof why, " (fallocate: %s)", strerror(e));
        return no_room(s, free_bytes, why);
    }
    if (e != EOPNOTSUPP && e != ENOSYS)
        return err_set(FERRY_ERR_IO, "reserving %llu bytes for the state file '%s': %s",
                       (unsigned long long)s->file_bytes, s->path, strerror(e));
    /* No fallocate on this file system: the size now, the blocks as the
     * setup writes every one of them. */
    if (ftruncate(s->fd, (off_t)s->file_bytes) != 0)
        return err_set(FERRY_ERR_IO, "sizing the state file '%s' to %llu bytes: %s", s->path,
                       (unsigned long long)s->file_bytes, strerror(errno));
    return FERRY_OK;
}

/* ---- the window ---- */

static ferry_status take_window(nvme_store *s)
{
    void *w = NULL;
    ferry_status st = pool_alloc(s->pool, (size_t)s->window_bytes, s->align, FERRY_MEM_NVME, "nvme window", &w);
    if (st != FERRY_OK)
        return err_wrap(st, "the NVMe window (%d tiles of %d arrays of %zu bytes)", s->nslots, s->max_arrays,
                        s->seg_bytes);
    s->window = w;
    size_t slot_bytes = (size_t)s->max_arrays * s->seg_bytes;
    int per_slot = s->max_arrays * (int)s->bps;
    for (int i = 0; i < s->nslots; i++) {
        s->slots[i].buf = s->window + (size_t)i * slot_bytes;
        s->slots[i].ios = calloc((size_t)per_slot, sizeof(nvme_io));
        s->slots[i].crc = calloc((size_t)per_slot, sizeof(uint32_t));
        if (!s->slots[i].ios || !s->slots[i].crc)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for its I/O list");
    }
    s->qcap = (size_t)s->nslots * (size_t)per_slot;
    s->queue = calloc(s->qcap, sizeof *s->queue);
    if (!s->queue)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme store: out of host memory for its I/O queue");
    return FERRY_OK;
}

/* ---- the I/O paths: setting up ---- */

static void *ring_thread(void *p);
static void *worker_thread(void *p);

/* A ring of `entries`, checked with a NOP round trip: 0, or -errno with
 * `what` the step that failed. */
static int ring_setup(struct io_uring *ring, unsigned entries, const char **what)
{
    *what = "io_uring_setup";
    int r = io_uring_refusal();
    if (r == 0)
        r = io_uring_queue_init(entries, ring, 0);
    if (r < 0)
        return r;
    *what = "a NOP through the ring";
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    struct io_uring_cqe *cqe = NULL;
    if (!sqe)
        r = -EBUSY;
    if (r == 0) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, NULL);
        r = io_uring_submit(ring);
        r = r == 1 ? 0 : r < 0 ? r : -EIO;
    }
    if (r == 0) {
        struct __kernel_timespec ts = {5, 0}; /* a NOP comes back at once, or never */
        r = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
        if (r == 0) {
            r = cqe->res < 0 ? cqe->res : 0;
            io_uring_cqe_seen(ring, cqe);
        }
    }
    if (r < 0)
        io_uring_queue_exit(ring);
    return r;
}

/* Why io_uring may be refused, for the sentence. */
static void uring_refusal(int err, const char *what, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %s: a container's seccomp profile (Docker's and containerd's default refuse io_uring), "
             "the sysctl kernel.io_uring_disabled, or an RLIMIT_MEMLOCK too small for the ring",
             what, strerror(-err));
}

static ferry_status open_ring(nvme_store *s, char *notes, size_t cap)
{
    s->fixed_file = io_uring_register_files(&s->ring, &s->fd, 1) == 0;
    struct iovec iov[NVME_MAX_SLOTS];
    size_t slot_bytes = (size_t)s->max_arrays * s->seg_bytes;
    for (int i = 0; i < s->nslots; i++)
        iov[i] = (struct iovec){s->slots[i].buf, slot_bytes};
    int r = io_uring_register_buffers(&s->ring, iov, (unsigned)s->nslots);
    s->fixed_bufs = r == 0;
    size_t len = strlen(notes);
    if (!s->fixed_bufs)
        snprintf(notes + len, cap - len, "; the window could not be registered (%s): plain buffers", strerror(-r));
    len = strlen(notes);
    if (!s->fixed_file)
        snprintf(notes + len, cap - len, "; the file could not be registered: plain descriptor");
    return FERRY_OK;
}

static atomic_flag uring_warned = ATOMIC_FLAG_INIT;

/* io_uring where it works (or as asked), else the threads; then the
 * store's threads start. */
static ferry_status open_io(nvme_store *s, char *notes, size_t cap)
{
    s->io = NVME_IO_THREADS;
    if (s->io_asked != NVME_IO_THREADS) {
        const char *what;
        int r = ring_setup(&s->ring, (unsigned)s->qd, &what);
        if (r == 0) {
            s->ring_ok = true;
            s->io = NVME_IO_URING;
        } else {
            uring_refusal(r, what, s->io_note, sizeof s->io_note);
            if (s->io_asked == NVME_IO_URING)
                return err_set(FERRY_ERR_UNSUPPORTED, "io_uring is refused here (%s), and the NVMe store was asked "
                               "to use it alone", s->io_note);
            if (!atomic_flag_test_and_set(&uring_warned))
                fprintf(stderr, "ferry: io_uring is refused here (%s); the NVMe store reads and writes with %d "
                        "threads of pread/pwrite on its O_DIRECT file instead (the same checksums, the same bytes)\n",
                        s->io_note, s->qd < NVME_MAX_IO_THREADS ? s->qd : NVME_MAX_IO_THREADS);
        }
    }
    if (s->io == NVME_IO_URING)
        open_ring(s, notes, cap);
    int want = s->io == NVME_IO_URING ? 1 : s->qd < NVME_MAX_IO_THREADS ? s->qd : NVME_MAX_IO_THREADS;
    for (int i = 0; i < want; i++) {
        int rc = pthread_create(&s->threads[i], NULL, s->io == NVME_IO_URING ? ring_thread : worker_thread, s);
        if (rc != 0) {
            char why[256];
            err_thread_refusal(rc, why, sizeof why);
            return err_set(FERRY_ERR_BACKEND, "starting the NVMe store's I/O thread %d of %d: %s", i + 1, want, why);
        }
        s->nthreads++;
    }
    return FERRY_OK;
}

static void trace_regions(nvme_store *s, bool alloc)
{
    for (int i = 0; s->trace && i < s->nregions; i++) {
        nvme_region *r = &s->regions[i];
        uint64_t per = r->bytes / (uint64_t)r->narrays;
        for (int a = 0; a < r->narrays; a++) {
            char name[NVME_NAME_MAX + NVME_ARRAY_NAME_MAX + 2];
            snprintf(name, sizeof name, "%s %s", r->name, r->array_names[a]);
            /* The identity of a disk allocation: its array's place in the file, + 1. */
            const void *id = (const void *)(uintptr_t)(r->offset + (uint64_t)a * per + 1);
            if (alloc)
                trace_alloc(s->trace, TRACE_POOL_DISK, r->cats[a], name, per, id);
            else
                trace_free(s->trace, TRACE_POOL_DISK, r->cats[a], name, per, id);
        }
    }
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
    remove_stale(s);
    ferry_status st = create_file(s);
    if (st == FERRY_OK)
        st = lay_out(s);
    if (st == FERRY_OK)
        st = reserve(s);
    if (st == FERRY_OK)
        st = take_window(s);
    if (st == FERRY_OK)
        st = open_io(s, notes, sizeof notes);
    if (st != FERRY_OK)
        return st;
    s->opened = true;
    trace_regions(s, true);
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
    return FERRY_OK;
}

/* ---- I/O: the queue (everything from here under s->mu) ---- */

static void queue_push(nvme_store *s, nvme_io *io)
{
    s->queue[(s->qhead + s->qlen) % s->qcap] = io;
    s->qlen++;
}

static nvme_io *queue_pop(nvme_store *s)
{
    nvme_io *io = s->queue[s->qhead];
    s->qhead = (s->qhead + 1) % s->qcap;
    s->qlen--;
    return io;
}

/* Whether any I/O is queued or in flight: waiting can make progress. */
static bool busy(const nvme_store *s) { return s->inflight > 0 || s->prepared > 0 || s->qlen > 0; }

/* Prepares what the queue depth allows and submits it in one call (the
 * ring), or wakes the workers (threads). A refusal for want of resources
 * is left to the ring's thread, which pauses and tries again. */
static void pump(nvme_store *s)
{
    if (s->io == NVME_IO_THREADS) {
        if (s->qlen > 0)
            pthread_cond_broadcast(&s->work_cv);
        return;
    }
    while (s->failed == FERRY_OK && s->qlen > 0 && s->inflight + s->prepared < s->qd) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
        if (!sqe)
            break;
        nvme_io *io = queue_pop(s);
        int fd = s->fixed_file ? 0 : s->fd;
        if (s->fixed_bufs && io->write)
            io_uring_prep_write_fixed(sqe, fd, io->buf, io->len, io->off, io->slot);
        else if (s->fixed_bufs)
            io_uring_prep_read_fixed(sqe, fd, io->buf, io->len, io->off, io->slot);
        else if (io->write)
            io_uring_prep_write(sqe, fd, io->buf, io->len, io->off);
        else
            io_uring_prep_read(sqe, fd, io->buf, io->len, io->off);
        if (s->fixed_file)
            sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data(sqe, io);
        s->prepared++;
    }
    if (s->prepared == 0 || (s->again && s->inflight == 0))
        return; /* nothing, or the ring's thread pauses first */
    int r;
    do
        r = io_submit_refusal();
    while (r == 0 && (r = io_uring_submit(&s->ring)) == -EINTR);
    if (r > 0) {
        s->prepared -= r;
        s->inflight += r;
        s->refusals = 0;
        s->pause_us = 0;
        s->again = false;
    } else if (r == -EAGAIN || r == -EBUSY) {
        s->again = true; /* the kernel is short of memory for requests, or its completion queue is full */
    } else if (r < 0) {
        /* What was prepared is never submitted: the store is done. */
        s->prepared = 0;
        fail(s, FERRY_ERR_IO, "submitting I/O on the state file '%s': %s", s->path, strerror(-r));
    }
    pthread_cond_broadcast(&s->work_cv);
}

/* The pause before trying again what the kernel answered EAGAIN: 50 us,
 * doubling to 50 ms; false (the store failed) after NVME_EAGAIN_TRIES in a
 * row. Unlocks s->mu while it sleeps. */
static bool pause_again(nvme_store *s)
{
    if (++s->refusals > NVME_EAGAIN_TRIES) {
        fail(s, FERRY_ERR_IO,
             "I/O on the state file '%s' was refused %d times in a row with nothing in flight (EAGAIN: the kernel "
             "had no memory for the requests); the run cannot go on, and checkpoints saved before are whole",
             s->path, NVME_EAGAIN_TRIES);
        s->qlen = 0;
        s->prepared = 0;
        pthread_cond_broadcast(&s->done_cv);
        return false;
    }
    s->pause_us = s->pause_us ? s->pause_us * 2 : 50;
    if (s->pause_us > 50000)
        s->pause_us = 50000;
    struct timespec ts = {0, (long)s->pause_us * 1000};
    pthread_mutex_unlock(&s->mu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&s->mu);
    s->again = false;
    return true;
}

/* ---- I/O: completions ---- */

static void io_failed(nvme_store *s, const nvme_io *io, int err)
{
    const nvme_region *r = &s->regions[io->region];
    if (io->write && (err == ENOSPC || err == EDQUOT))
        fail(s, FERRY_ERR_IO,
             "writing the state file '%s' block %llu (bytes %llu..%llu, '%s' %s): %s: the disk is full; the "
             "run cannot go on, and checkpoints saved before are whole",
             s->path, (unsigned long long)io->block, (unsigned long long)io->start,
             (unsigned long long)(io->start + io->full), r->name, r->array_names[io->array], strerror(err));
    else
        fail(s, FERRY_ERR_IO,
             "%s the state file '%s' block %llu (bytes %llu..%llu, '%s' %s): %s%s; the run cannot go on, and the "
             "checkpoints saved before are whole",
             io->write ? "writing" : "reading", s->path, (unsigned long long)io->block,
             (unsigned long long)io->start, (unsigned long long)(io->start + io->full), r->name,
             r->array_names[io->array], strerror(err), err == EAGAIN ? " again and again" : "");
}

/* One I/O came back with `raw` (bytes moved, or -errno). */
static void complete(nvme_store *s, nvme_io *io, int raw)
{
    nvme_slot *slot = &s->slots[io->slot];
    /* A block's first completion on the ring goes through the hook; its
     * resubmissions, which the kernel's timing decides, do not, so the calls
     * a fault test counts are the same in every run. The threads' pread and
     * pwrite are counted where they are called. */
    int res = io->resumed || s->io != NVME_IO_URING ? raw : io_completion_result(raw, io->len, io->write);
    if ((res == -EINTR || res == -EAGAIN) && s->failed == FERRY_OK) {
        io->resumed = true;
        if (res == -EAGAIN && ++io->again > NVME_EAGAIN_TRIES) {
            io_failed(s, io, EAGAIN);
        } else {
            s->again = res == -EAGAIN;
            queue_push(s, io); /* nothing moved: ask again */
            return;
        }
    } else if (res < 0) {
        io_failed(s, io, -res);
    } else if (res == 0 && io->write) {
        io_failed(s, io, EIO); /* a write that made no progress will never finish */
    } else if (res == 0) {
        const nvme_region *r = &s->regions[io->region];
        struct stat sb;
        long long size = fstat(s->fd, &sb) == 0 ? (long long)sb.st_size : -1;
        fail(s, FERRY_ERR_IO,
             "%s the state file '%s' block %llu (bytes %llu..%llu, '%s' %s) stopped at byte %llu: the file is %lld "
             "bytes, it was %llu: it was truncated underneath; the run cannot go on, and checkpoints saved "
             "before are whole",
             "reading", s->path, (unsigned long long)io->block,
             (unsigned long long)io->start, (unsigned long long)(io->start + io->full), r->name,
             r->array_names[io->array], (unsigned long long)io->off, size, (unsigned long long)s->file_bytes);
    } else {
        io->again = 0;
        if (io->write)
            s->bytes_written += (uint64_t)res;
        else
            s->bytes_read += (uint64_t)res;
        if ((uint32_t)res < io->len) {
            /* A short transfer: the rest from where it stopped. */
            io->buf += res;
            io->off += (uint64_t)res;
            io->len -= (uint32_t)res;
            s->resumed++;
            io->resumed = true;
            if (s->failed == FERRY_OK) {
                queue_push(s, io);
                return;
            }
        }
    }
    if (--slot->pending == 0 && slot->state == SLOT_WRITING)
        slot->state = SLOT_FREE;
}

static void read_ahead(nvme_store *s);

/* The ring's thread: waits for completions (without the lock: the ring's
 * completion side is this thread's alone), takes them, resubmits and reads
 * ahead into the slots freed, and wakes the caller. Submissions happen
 * under the lock, from either thread. */
static void *ring_thread(void *p)
{
    nvme_store *s = p;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->inflight == 0) {
            if (s->failed == FERRY_OK && (s->qlen > 0 || s->prepared > 0)) {
                if (s->again && !pause_again(s))
                    continue;
                pump(s);
                if (s->inflight > 0 || s->again)
                    continue;
            }
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        struct io_uring_cqe *cqe;
        int r;
        do
            r = io_uring_wait_cqe(&s->ring, &cqe);
        while (r == -EINTR);
        pthread_mutex_lock(&s->mu);
        if (r < 0 && r != -EAGAIN) {
            fail(s, FERRY_ERR_IO, "waiting for I/O on the state file '%s': %s", s->path, strerror(-r));
            s->inflight = 0; /* the ring is unusable: its teardown cancels what is left */
            s->qlen = 0;
            pthread_cond_broadcast(&s->done_cv);
            continue;
        }
        unsigned head, n = 0;
        io_uring_for_each_cqe(&s->ring, head, cqe)
        {
            complete(s, io_uring_cqe_get_data(cqe), cqe->res);
            n++;
        }
        io_uring_cq_advance(&s->ring, n);
        s->inflight -= (int)n;
        if (s->sweeping)
            read_ahead(s); /* pumps too */
        else
            pump(s);
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A worker of the threads path: takes the oldest queued I/O, moves it with
 * pread or pwrite on the O_DIRECT descriptor, completes it. */
static void *worker_thread(void *p)
{
    nvme_store *s = p;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->qlen == 0 || s->failed != FERRY_OK) {
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        if (s->again && s->inflight == 0 && !pause_again(s))
            continue;
        nvme_io *io = queue_pop(s);
        s->inflight++;
        pthread_mutex_unlock(&s->mu);
        ssize_t n = io->write ? pwrite(s->fd, io->buf, io->len, (off_t)io->off)
                              : pread(s->fd, io->buf, io->len, (off_t)io->off);
        int res = n >= 0 ? (int)n : -errno;
        pthread_mutex_lock(&s->mu);
        s->inflight--;
        complete(s, io, res);
        if (s->sweeping)
            read_ahead(s);
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Waits (under s->mu) for the store's threads to make progress. */
static void wait_progress(nvme_store *s)
{
    pthread_cond_wait(&s->done_cv, &s->mu);
}

/* ---- checksums, on the caller's workers ---- */

static uint32_t block_len(const nvme_store *s, uint64_t seg, size_t j)
{
    uint64_t at = (uint64_t)j * s->block;
    return (uint32_t)(seg - at < s->block ? seg - at : s->block);
}

/* A slot's blocks as tasks: task i is ios[i]'s block (queue_tile laid them
 * out array by array, block by block, the order the checks report in). */
typedef struct crc_job {
    const nvme_store *s;
    nvme_slot *slot;
} crc_job;

static void slot_blocks(const nvme_store *s, const nvme_slot *slot, size_t *nb, uint64_t *seg)
{
    const nvme_region *r = &s->regions[slot->region];
    *seg = seg_bytes_of(s, r, slot->tile);
    *nb = (size_t)((*seg + s->block - 1) / s->block);
}

static void crc_task(void *arg, size_t i, int worker)
{
    (void)worker;
    crc_job *j = arg;
    const nvme_store *s = j->s;
    nvme_slot *slot = j->slot;
    const nvme_region *r = &s->regions[slot->region];
    size_t nb;
    uint64_t seg;
    slot_blocks(s, slot, &nb, &seg);
    size_t blk = i;
    for (int a = 0; a < r->narrays; a++) {
        if (!(slot->arrays & (1u << a)))
            continue;
        if (blk < nb) {
            const char *base = slot->buf + (size_t)a * s->seg_bytes;
            slot->crc[i] = crc32c(0, base + blk * s->block, block_len(s, seg, blk));
            return;
        }
        blk -= nb;
    }
}

/* The CRC of every block of the slot's arrays into slot->crc; the blocks
 * per array and the segment's bytes into *nb and *seg. */
static ferry_status crc_slot(nvme_store *s, nvme_slot *slot, size_t *nb, uint64_t *seg)
{
    size_t arrays = 0;
    slot_blocks(s, slot, nb, seg);
    for (int a = 0; a < s->regions[slot->region].narrays; a++)
        arrays += (slot->arrays >> a) & 1;
    crc_job j = {s, slot};
    if (s->parallel)
        return s->parallel(s->parallel_ctx, arrays * *nb, crc_task, &j);
    for (size_t i = 0; i < arrays * *nb; i++)
        crc_task(&j, i, 0);
    return FERRY_OK;
}

/* Computed for writing: kept as the blocks' checksums. */
static ferry_status checksum_tile(nvme_store *s, nvme_slot *slot)
{
    size_t nb, i = 0;
    uint64_t seg;
    ferry_status st = crc_slot(s, slot, &nb, &seg);
    if (st != FERRY_OK)
        return st;
    nvme_region *r = &s->regions[slot->region];
    for (int a = 0; a < r->narrays; a++)
        for (size_t j = 0; (slot->arrays & (1u << a)) && j < nb; j++)
            r->crc[crc_index(s, r, slot->tile, a, j)] = slot->crc[i++];
    return FERRY_OK;
}

/* Computed for reading: compared with the blocks' checksums, the first
 * difference (array by array, block by block) reported. */
static ferry_status verify_tile(nvme_store *s, nvme_slot *slot)
{
    size_t nb, i = 0;
    uint64_t seg;
    ferry_status st = crc_slot(s, slot, &nb, &seg);
    if (st != FERRY_OK)
        return st;
    nvme_region *r = &s->regions[slot->region];
    for (int a = 0; a < r->narrays; a++) {
        for (size_t j = 0; (slot->arrays & (1u << a)) && j < nb; j++) {
            size_t idx = crc_index(s, r, slot->tile, a, j);
            uint32_t got = slot->crc[i++], len = block_len(s, seg, j);
            if (got == r->crc[idx])
                continue;
            uint64_t start = seg_offset(s, r, slot->tile, a) + (uint64_t)j * s->block;
            size_t e0 = slot->tile * s->tile_elems + j * (s->block / sizeof(float));
            size_t e1 = e0 + len / sizeof(float);
            if (e1 > slot->tile * s->tile_elems + tile_len(s, r, slot->tile))
                e1 = slot->tile * s->tile_elems + tile_len(s, r, slot->tile);
            pthread_mutex_lock(&s->mu);
            st = fail(s, FERRY_ERR_FORMAT,
                      "checksum mismatch in the state file '%s' block %llu (bytes %llu..%llu: '%s' %s, elements "
                      "%zu..%zu): CRC-32C 0x%08x read, 0x%08x written; the disk gave back other bytes than were "
                      "written, so the state is damaged and the run stops (checkpoints saved before are whole)",
                      s->path, (unsigned long long)(r->first_block + idx), (unsigned long long)start,
                      (unsigned long long)(start + len), r->name, r->array_names[a], e0, e1, got, r->crc[idx]);
            pthread_mutex_unlock(&s->mu);
            return st;
        }
    }
    return FERRY_OK;
}

/* ---- sweeps ---- */

/* Queues the reads or writes of a slot's arrays, block by block. */
static void queue_tile(nvme_store *s, nvme_slot *slot, bool write)
{
    nvme_region *r = &s->regions[slot->region];
    uint64_t seg = seg_bytes_of(s, r, slot->tile);
    size_t nb = (size_t)((seg + s->block - 1) / s->block);
    slot->nios = 0;
    for (int a = 0; a < r->narrays; a++) {
        if (!(slot->arrays & (1u << a)))
            continue;
        uint64_t off = seg_offset(s, r, slot->tile, a);
        for (size_t j = 0; j < nb; j++) {
            nvme_io *io = &slot->ios[slot->nios++];
            uint32_t len = block_len(s, seg, j);
            *io = (nvme_io){(int)(slot - s->slots), write, slot->buf + (size_t)a * s->seg_bytes + j * s->block,
                            off + (uint64_t)j * s->block, len, off + (uint64_t)j * s->block, len,
                            r->first_block + crc_index(s, r, slot->tile, a, j), slot->region, a,
                            slot->tile * s->tile_elems + j * (s->block / sizeof(float)), len / sizeof(float),
                            false, 0};
            queue_push(s, io);
        }
    }
    slot->pending = slot->nios;
    slot->state = write ? SLOT_WRITING : SLOT_READING;
    if (slot->pending == 0)
        slot->state = write ? SLOT_FREE : SLOT_READING;
}

static nvme_slot *free_slot(nvme_store *s)
{
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].state == SLOT_FREE)
            return &s->slots[i];
    return NULL;
}

/* Gives the next tile of the sweep a slot; false when none is free or none is left. */
static bool assign_next(nvme_store *s, nvme_slot **out)
{
    if (s->issued == s->total)
        return false;
    nvme_slot *slot = free_slot(s);
    if (!slot)
        return false;
    while (s->cur_tile >= s->regions[s->spans[s->cur_span].region].ntiles) {
        s->cur_span++;
        s->cur_tile = 0;
    }
    slot->region = s->spans[s->cur_span].region;
    slot->arrays = s->spans[s->cur_span].arrays;
    slot->tile = s->cur_tile++;
    slot->seq = s->issued++;
    *out = slot;
    return true;
}

/* Reads ahead into every free slot, and submits. */
static void read_ahead(nvme_store *s)
{
    nvme_slot *slot;
    while (s->failed == FERRY_OK && s->mode != NVME_WRITE && assign_next(s, &slot))
        queue_tile(s, slot, false);
    pump(s);
}

static ferry_status all_held(void)
{
    return err_set(FERRY_ERR_STATE, "nvme_sweep_next: the caller holds every window slot; put tiles back before "
                                    "asking for more");
}

static nvme_slot *slot_of_seq(nvme_store *s, size_t seq)
{
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].state == SLOT_READING && s->slots[i].seq == seq)
            return &s->slots[i];
    return NULL;
}

static ferry_status check_file(nvme_store *s)
{
    struct stat sb;
    if (fstat(s->fd, &sb) != 0)
        return fail(s, FERRY_ERR_IO, "the state file '%s' cannot be checked: %s", s->path, strerror(errno));
    if (sb.st_nlink == 0)
        return fail(s, FERRY_ERR_IO,
                    "the state file '%s' was removed while the run used it; the optimizer state in it cannot be "
                    "trusted, so the run stops (checkpoints saved before are whole)",
                    s->path);
    if ((uint64_t)sb.st_size < s->file_bytes)
        return fail(s, FERRY_ERR_IO,
                    "the state file '%s' was truncated underneath to %lld bytes; it holds %llu, so the run stops "
                    "(checkpoints saved before are whole)",
                    s->path, (long long)sb.st_size, (unsigned long long)s->file_bytes);
    return FERRY_OK;
}

/* Unlocks s->mu and returns st (the failure repeated when st is the store's). */
static ferry_status unlock_with(nvme_store *s, ferry_status st)
{
    if (st != FERRY_OK && st == s->failed)
        repeat_failure(s);
    pthread_mutex_unlock(&s->mu);
    return st;
}

ferry_status nvme_sweep_begin(nvme_store *s, nvme_mode mode, const nvme_span *spans, int nspans)
{
    if (!s || (nspans > 0 && !spans) || nspans < 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_begin: NULL store or spans");
    if (!s->opened)
        return err_set(FERRY_ERR_STATE, "nvme_sweep_begin: the store is not open");
    pthread_mutex_lock(&s->mu);
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    if (s->sweeping)
        return unlock_with(s, err_set(FERRY_ERR_STATE, "nvme_sweep_begin: another sweep is open"));
    pthread_mutex_unlock(&s->mu);
    if (mode != NVME_READ && mode != NVME_WRITE && mode != NVME_UPDATE)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_begin: mode %d", (int)mode);
    size_t total = 0;
    for (int i = 0; i < nspans; i++) {
        const nvme_span *sp = &spans[i];
        if (sp->region < 0 || sp->region >= s->nregions || sp->arrays == 0 ||
            sp->arrays >= (1u << s->regions[sp->region].narrays))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_begin: span %d (region %d, arrays 0x%x)", i,
                           sp->region, sp->arrays);
        for (int a = 0; mode != NVME_WRITE && a < s->regions[sp->region].narrays; a++)
            if ((sp->arrays & (1u << a)) && !s->regions[sp->region].written[a])
                return err_set(FERRY_ERR_STATE, "nvme_sweep_begin: '%s' %s is read before it was ever written",
                               s->regions[sp->region].name, s->regions[sp->region].array_names[a]);
        total += s->regions[sp->region].ntiles;
    }
    pthread_mutex_lock(&s->mu);
    ferry_status st = check_file(s);
    if (st != FERRY_OK)
        return unlock_with(s, st);
    pthread_mutex_unlock(&s->mu);
    nvme_span *copy = malloc((size_t)(nspans ? nspans : 1) * sizeof *copy);
    if (!copy)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "nvme sweep: out of host memory");
    memcpy(copy, spans, (size_t)nspans * sizeof *copy);
    for (int i = 0; mode != NVME_READ && i < nspans; i++)
        for (int a = 0; a < s->regions[spans[i].region].narrays; a++)
            if (spans[i].arrays & (1u << a))
                s->regions[spans[i].region].written[a] = true;
    pthread_mutex_lock(&s->mu);
    s->spans = copy;
    s->nspans = nspans;
    s->mode = mode;
    s->total = total;
    s->issued = s->handed = 0;
    s->cur_span = 0;
    s->cur_tile = 0;
    s->sweeping = true;
    read_ahead(s);
    pthread_mutex_unlock(&s->mu);
    return FERRY_OK;
}

static void hand_over(nvme_store *s, nvme_slot *slot, nvme_tile *t)
{
    nvme_region *r = &s->regions[slot->region];
    slot->state = SLOT_HELD;
    s->handed++;
    memset(t, 0, sizeof *t);
    t->region = slot->region;
    t->index = slot->tile;
    t->first = slot->tile * s->tile_elems;
    t->n = tile_len(s, r, slot->tile);
    t->slot_ = (int)(slot - s->slots);
    for (int a = 0; a < r->narrays; a++)
        if (slot->arrays & (1u << a))
            t->array[a] = (float *)(slot->buf + (size_t)a * s->seg_bytes);
}

ferry_status nvme_sweep_next(nvme_store *s, nvme_tile *t, bool *done)
{
    if (!s || !t || !done)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_next: NULL argument");
    pthread_mutex_lock(&s->mu);
    if (!s->sweeping)
        return unlock_with(s, err_set(FERRY_ERR_STATE, "nvme_sweep_next: no sweep is open"));
    *done = false;
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    if (s->handed == s->total) {
        *done = true;
        return unlock_with(s, FERRY_OK);
    }
    nvme_slot *slot = NULL;
    if (s->mode == NVME_WRITE) {
        while (s->failed == FERRY_OK && !assign_next(s, &slot)) {
            if (!busy(s))
                return unlock_with(s, all_held());
            wait_progress(s);
        }
        if (s->failed != FERRY_OK)
            return unlock_with(s, s->failed);
        hand_over(s, slot, t);
        pthread_mutex_unlock(&s->mu);
        /* The padding of a short last tile is written too: make it zeros. */
        nvme_region *r = &s->regions[slot->region];
        size_t used = tile_len(s, r, slot->tile) * sizeof(float);
        for (int a = 0; a < r->narrays; a++)
            memset(slot->buf + (size_t)a * s->seg_bytes + used, 0, (size_t)seg_bytes_of(s, r, slot->tile) - used);
        return FERRY_OK;
    }
    read_ahead(s);
    while (s->failed == FERRY_OK && (!(slot = slot_of_seq(s, s->handed)) || slot->pending > 0)) {
        if (!busy(s))
            return unlock_with(s, all_held());
        wait_progress(s);
    }
    if (s->failed != FERRY_OK)
        return unlock_with(s, s->failed);
    nvme_tile got;
    hand_over(s, slot, &got);
    pthread_mutex_unlock(&s->mu);
    ferry_status st = verify_tile(s, slot); /* the slot is the caller's now: no I/O touches it */
    if (st == FERRY_OK)
        *t = got;
    return st;
}

ferry_status nvme_sweep_put(nvme_store *s, nvme_tile *t)
{
    if (!s || !t)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_put: not a tile this store handed out");
    pthread_mutex_lock(&s->mu);
    if (t->slot_ < 0 || t->slot_ >= s->nslots || s->slots[t->slot_].state != SLOT_HELD)
        return unlock_with(s, err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_put: not a tile this store handed out"));
    nvme_slot *slot = &s->slots[t->slot_];
    t->slot_ = -1;
    if (s->failed != FERRY_OK || s->mode == NVME_READ) {
        slot->state = SLOT_FREE;
        read_ahead(s);
        return unlock_with(s, s->failed);
    }
    pthread_mutex_unlock(&s->mu);
    ferry_status st = checksum_tile(s, slot);
    pthread_mutex_lock(&s->mu);
    if (st != FERRY_OK) {
        slot->state = SLOT_FREE;
        return unlock_with(s, st);
    }
    queue_tile(s, slot, true);
    read_ahead(s); /* pumps the writes too */
    return unlock_with(s, s->failed);
}

ferry_status nvme_sweep_end(nvme_store *s)
{
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_sweep_end: store is NULL");
    pthread_mutex_lock(&s->mu);
    if (!s->sweeping)
        return unlock_with(s, err_set(FERRY_ERR_STATE, "nvme_sweep_end: no sweep is open"));
    /* Tiles read ahead but never asked for are dropped; every write is
     * waited for; after a failure nothing more is submitted, what is in
     * flight still lands before the window may be reused. */
    for (int i = 0; i < s->nslots; i++)
        if (s->slots[i].state == SLOT_HELD)
            s->slots[i].state = SLOT_FREE;
    s->issued = s->total; /* no more reads ahead */
    for (;;) {
        bool writing = false;
        for (int i = 0; i < s->nslots && !writing; i++)
            writing = s->slots[i].state == SLOT_WRITING && s->slots[i].pending > 0;
        if (s->failed != FERRY_OK)
            s->qlen = 0;
        if (!writing && s->qlen > 0) {
            /* Only reads ahead are queued: drop them, and wait for those in flight. */
            s->qlen = 0;
        }
        if (s->inflight == 0 && s->prepared == 0 && s->qlen == 0)
            break;
        wait_progress(s);
    }
    s->qhead = 0;
    for (int i = 0; i < s->nslots; i++) {
        s->slots[i].state = SLOT_FREE;
        s->slots[i].pending = 0;
    }
    free(s->spans);
    s->spans = NULL;
    s->sweeping = false;
    return unlock_with(s, s->failed);
}

static void stop_threads(nvme_store *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    s->nthreads = 0;
}

void nvme_destroy(nvme_store *s)
{
    if (!s)
        return;
    if (s->sweeping)
        nvme_sweep_end(s);
    stop_threads(s);
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
    free(s->queue);
    free(s->spans);
    free(s->path);
    free(s->dir);
    free(s);
}

/* ---- a folder, before any store ---- */

/* Moves `bytes` through a store of the folder's own, as a store there
 * would: written once, then read once; bytes read + written a second. */
static ferry_status measure_path(const char *dir, uint64_t bytes, size_t block, int qd, nvme_io_path *path,
                                 double *rate)
{
    pool *p = NULL;
    pool_config pc = POOL_CONFIG_INIT;
    pc.pin = POOL_PIN_NEVER;
    nvme_store *s = NULL;
    nvme_config c = NVME_CONFIG_INIT;
    c.dir = dir;
    c.block_bytes = block;
    c.queue_depth = qd;
    c.window_bytes = (uint64_t)NVME_TARGET_SLOTS * (block ? block : NVME_DEFAULT_BLOCK);
    static const char *const names[1] = {"probe"};
    static const ferry_mem_category cats[1] = {FERRY_MEM_OTHER};
    ferry_status st = pool_create(&pc, &p);
    c.pool = p;
    if (st == FERRY_OK) st = nvme_create(&c, &s);
    if (st == FERRY_OK) st = nvme_add_region(s, "probe", (size_t)(bytes / sizeof(float)), 1, names, cats, NULL);
    if (st == FERRY_OK) st = nvme_open(s);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    nvme_span span = {0, 1};
    for (int pass = 0; pass < 2 && st == FERRY_OK; pass++) {
        st = nvme_sweep_begin(s, pass ? NVME_READ : NVME_WRITE, &span, 1);
        for (bool done = false; st == FERRY_OK;) {
            nvme_tile t;
            if ((st = nvme_sweep_next(s, &t, &done)) != FERRY_OK || done)
                break;
            st = nvme_sweep_put(s, &t);
        }
        ferry_status end = s ? nvme_sweep_end(s) : FERRY_OK;
        st = st != FERRY_OK ? st : end;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (st == FERRY_OK) {
        *path = s->io;
        *rate = secs > 0 ? 2.0 * (double)nvme_file_bytes(s) / secs : 0;
    }
    nvme_destroy(s);
    pool_destroy(p);
    return st;
}

ferry_status nvme_probe_dir(const char *dir, bool measure, uint64_t measure_bytes, size_t block_bytes,
                            int queue_depth, nvme_probe *out)
{
    if (!dir || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "nvme_probe_dir: NULL argument");
    memset(out, 0, sizeof *out);
    struct statfs fs;
    if (statfs(dir, &fs) != 0)
        return err_set(FERRY_ERR_IO, "NVMe folder '%s': %s; create it on a fast disk, or name another", dir,
                       strerror(errno));
    out->memory = not_a_disk(dir, &fs, out->fs, sizeof out->fs, out->why, sizeof out->why);
    if (out->memory)
        return FERRY_OK;
    nvme_io_path asked;
    ferry_status st = io_path_asked(NVME_IO_AUTO, &asked);
    if (st != FERRY_OK)
        return st;
    struct io_uring ring;
    const char *what;
    int r = asked == NVME_IO_THREADS ? -EPERM : ring_setup(&ring, 4, &what);
    out->uring = r == 0;
    if (r == 0)
        io_uring_queue_exit(&ring);
    else if (asked == NVME_IO_THREADS)
        snprintf(out->uring_why, sizeof out->uring_why, "FERRY_NVME_IO=threads");
    else
        uring_refusal(r, what, out->uring_why, sizeof out->uring_why);
    out->path = out->uring ? NVME_IO_URING : NVME_IO_THREADS;
    if (!measure)
        return FERRY_OK;
    return measure_path(dir, measure_bytes ? measure_bytes : (uint64_t)64 << 20, block_bytes, queue_depth,
                        &out->path, &out->rate);
}
