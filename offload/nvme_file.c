/* The NVMe store's folder and file: which file systems are not a disk, the
 * files that crashed runs left, the file's creation (O_DIRECT where the file
 * system takes it, the alignment statx gives), the space reserved for it,
 * the check before each sweep that it is still there and whole, and the
 * probe of a folder before any store. It does not move the state's bytes
 * (the I/O paths of nvme_io.c do) nor decide where they lie in the file
 * (nvme_format.c does). */
#include "offload/nvme_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
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

#include "common/error.h"
#include "common/units.h"

#define FILE_PREFIX "ferry-state-"
#define FILE_SUFFIX ".swap"

static atomic_flag direct_warned = ATOMIC_FLAG_INIT;

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
bool nvme_not_a_disk(const char *dir, const struct statfs *fs, char *name, size_t ncap, char *why, size_t wcap)
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

/* ---- the file ---- */

/* Files of runs that ended without removing theirs: a live store holds an
 * exclusive lock on its file, so one whose lock is free is stale. */
void nvme_remove_stale(const nvme_store *s)
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

ferry_status nvme_create_file(nvme_store *s)
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
ferry_status nvme_reserve(nvme_store *s)
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

/* Before a sweep (under s->mu): the file is still there and whole. */
ferry_status nvme_check_file(nvme_store *s)
{
    struct stat sb;
    if (fstat(s->fd, &sb) != 0)
        return nvme_fail(s, FERRY_ERR_IO, "the state file '%s' cannot be checked: %s", s->path, strerror(errno));
    if (sb.st_nlink == 0)
        return nvme_fail(s, FERRY_ERR_IO,
                         "the state file '%s' was removed while the run used it; the optimizer state in it cannot be "
                         "trusted, so the run stops (checkpoints saved before are whole)",
                         s->path);
    if ((uint64_t)sb.st_size < s->file_bytes)
        return nvme_fail(s, FERRY_ERR_IO,
                         "the state file '%s' was truncated underneath to %lld bytes; it holds %llu, so the run stops "
                         "(checkpoints saved before are whole)",
                         s->path, (long long)sb.st_size, (unsigned long long)s->file_bytes);
    return FERRY_OK;
}

/* ---- a folder, before any store ---- */

/* The probe's one region written whole, then read whole. */
static ferry_status write_then_read(nvme_store *s)
{
    ferry_status st = FERRY_OK;
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
    return st;
}

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
    if (st == FERRY_OK)
        st = write_then_read(s);
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
    out->memory = nvme_not_a_disk(dir, &fs, out->fs, sizeof out->fs, out->why, sizeof out->why);
    if (out->memory)
        return FERRY_OK;
    nvme_io_path asked;
    ferry_status st = nvme_io_path_asked(NVME_IO_AUTO, &asked);
    if (st != FERRY_OK)
        return st;
    struct io_uring ring;
    const char *what;
    int r = asked == NVME_IO_THREADS ? -EPERM : nvme_ring_setup(&ring, 4, &what);
    out->uring = r == 0;
    if (r == 0)
        io_uring_queue_exit(&ring);
    else if (asked == NVME_IO_THREADS)
        snprintf(out->uring_why, sizeof out->uring_why, "FERRY_NVME_IO=threads");
    else
        nvme_uring_refusal(r, what, out->uring_why, sizeof out->uring_why);
    out->path = out->uring ? NVME_IO_URING : NVME_IO_THREADS;
    if (!measure)
        return FERRY_OK;
    return measure_path(dir, measure_bytes ? measure_bytes : (uint64_t)64 << 20, block_bytes, queue_depth,
                        &out->path, &out->rate);
}
