/* The NVMe store: fp32 state too large for host memory, kept in one file on
 * a fast disk and streamed through a bounded window of pinned host buffers
 * with io_uring (O_DIRECT, registered buffers, a fixed file, batched
 * submissions, at most `queue_depth` I/Os in flight). It owns the file, the
 * ring, the window and the checksums; it knows nothing of groups, AdamW or
 * the engine, which decides what lives here (engine/update_nvme.c).
 *
 * What it holds: regions (one per parameter group), each `narrays` arrays
 * of `numel` elements (Adam m and v, optionally the master weights), each
 * array in its own form (nvme_form: fp32 unless the region says otherwise,
 * e.g. compact moments). A region is cut into tiles of nvme_tile_elems()
 * elements; on disk a tile is its arrays' segments one after the other,
 * each the form's bytes for the tile's elements padded to 4 KiB, so a
 * sweep reads or writes one tile as a few large aligned I/Os. The window's
 * slots are sized for fp32 segments whatever the forms (no form takes more
 * than 4 bytes an element over a whole tile). Every segment
 * is split into blocks of `block_bytes` (the last one shorter): one I/O and
 * one CRC-32C each. The checksums of the blocks written last are kept in
 * host memory (4 bytes a block) and every read is verified against them, so
 * neither a flipped byte nor a write the disk lost goes unnoticed; a
 * mismatch names the file, the block, its bytes, the region and the array.
 *
 * Access is by sweeps over whole regions, in a given order:
 *   NVME_READ    tiles are read, verified and handed over; dropped on put;
 *   NVME_WRITE   empty tiles are handed over, the caller fills them, put
 *                checksums and writes them;
 *   NVME_UPDATE  read, verified, handed over, written back on put.
 * While the caller works on tile k the store reads the tiles after it into
 * free window slots and writes those before it back, so the caller waits
 * only when the disk is slower than its work.
 *
 * The disk is kept busy by the store's own thread, not the caller's: it
 * reaps completions and submits what is queued (the reads ahead into every
 * slot a write frees, the writes of every tile put) while the caller
 * computes on the tile it holds, so up to `queue_depth` I/Os stay in flight
 * whatever the caller does. The CRC-32Cs of a tile (verified when it is
 * handed over, computed when it is put) run on the caller's worker threads
 * when the config gives them (`parallel`), one block a task.
 *
 * The I/O path: io_uring, checked at nvme_open with a NOP round trip; where
 * io_uring is refused (a container's seccomp profile, the sysctl
 * kernel.io_uring_disabled, RLIMIT_MEMLOCK too small for the ring) a pool
 * of `queue_depth` threads (at most NVME_MAX_IO_THREADS) issuing pread and
 * pwrite on the same O_DIRECT descriptor does the same I/Os, with the same
 * checksums and the same bytes on disk, announced in one line on stderr.
 * `io` (or $FERRY_NVME_IO=uring|threads when `io` is NVME_IO_AUTO) forces
 * either path. A submission the kernel refuses for want of resources
 * (EAGAIN, EBUSY) with nothing in flight, or a transfer that keeps coming
 * back EAGAIN, is retried after a pause that doubles from 50 us to 50 ms,
 * NVME_EAGAIN_TRIES times at most, then fails with a sentence.
 *
 * The file system: a folder on one that keeps its files in memory (tmpfs,
 * ramfs, hugetlbfs) or on a pseudo file system (proc, sysfs, ...) is
 * refused with a sentence: the NVMe tier exists to spare host memory, and a
 * "disk" in memory takes it (and counts against the job's memory limit).
 * O_DIRECT's alignment is the file's, from statx's STATX_DIOALIGN (4 KiB
 * where the kernel does not say, and never less): segments, blocks and the
 * window's slots are multiples of it. A file system that refuses O_DIRECT
 * (some FUSE, 9p) is used with buffered I/O after one warning on stderr.
 *
 * Failures (EIO, ENOSPC, a short transfer that ends early, a file removed or
 * truncated underneath, a checksum mismatch) are sticky: the store refuses
 * every later sweep with the same sentence, so damaged state is never used.
 * Short transfers are resumed where they stopped.
 *
 * Threads: one sweep at a time, driven by one thread at a time (the calls of
 * a sweep may move between threads if the caller orders them); the store's
 * own threads only move bytes. */
#ifndef FERRY_OFFLOAD_NVME_H
#define FERRY_OFFLOAD_NVME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "offload/pool.h"
#include "offload/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Arrays a region may hold. */
#define NVME_MAX_ARRAYS 4
/* File offsets, segment sizes and window slots are multiples of this at
 * least (of the file's O_DIRECT alignment where that is larger). */
#define NVME_ALIGN ((size_t)4096)
/* The pread/pwrite path's threads, at most. */
#define NVME_MAX_IO_THREADS 64
/* Tries of a submission or transfer the kernel answers with EAGAIN. */
#define NVME_EAGAIN_TRIES 16
/* Defaults, measured with tools/bench/nvme on a virtio disk (docs/perf.md). */
#define NVME_DEFAULT_BLOCK ((size_t)1 << 20)
#define NVME_DEFAULT_QUEUE_DEPTH 16
#define NVME_DEFAULT_WINDOW ((uint64_t)256 << 20)
/* Ranges a caller may ask for. */
#define NVME_MAX_BLOCK ((size_t)64 << 20)
#define NVME_MAX_QUEUE_DEPTH 1024
/* Window slots the tiling aims for (read-ahead and write-behind room), and
 * the fewest a pipeline needs: one read ahead, one worked on, one written. */
#define NVME_TARGET_SLOTS 8
#define NVME_MIN_SLOTS 3
/* The most slots a window is cut into. */
#define NVME_MAX_SLOTS 64

/* How the store moves bytes. */
typedef enum nvme_io_path {
    NVME_IO_AUTO = 0, /* io_uring where it works, else threads ($FERRY_NVME_IO may say which) */
    NVME_IO_URING,    /* io_uring or nothing: nvme_open fails where it is refused */
    NVME_IO_THREADS,  /* threads of pread/pwrite */
} nvme_io_path;

/* Runs task(arg, i, worker) for every i in [0, n) on the caller's worker
 * threads and returns when all have returned (optim's tp_parallel_for fits:
 * the store cannot name it, being below optim). */
typedef ferry_status (*nvme_parallel_fn)(void *ctx, size_t n, void (*task)(void *arg, size_t i, int worker),
                                         void *arg);

typedef struct nvme_config {
    const char *dir;       /* the folder for the file (copied) */
    uint64_t window_bytes; /* pinned window from `pool`; 0 = NVME_DEFAULT_WINDOW */
    size_t block_bytes;    /* bytes per I/O and per checksum; 0 = NVME_DEFAULT_BLOCK; a multiple of 4096 */
    int queue_depth;       /* I/Os in flight; 0 = NVME_DEFAULT_QUEUE_DEPTH */
    pool *pool;            /* where the window comes from (category "nvme window"); required */
    trace *trace;          /* the file's regions are recorded as disk allocations; NULL = none */
    nvme_io_path io;       /* NVME_IO_AUTO unless a test or a benchmark forces a path */
    nvme_parallel_fn parallel; /* where the checksums run; NULL = on the calling thread */
    void *parallel_ctx;
} nvme_config;

#define NVME_CONFIG_INIT { NULL, 0, 0, 0, NULL, NULL, NVME_IO_AUTO, NULL, NULL }

typedef struct nvme_store nvme_store;

/* How an array's elements are stored: `elem_bytes` each, and where `group`
 * is not 0, after the values (padded to 4 bytes) `group_bytes` for every
 * `group` elements begun. fp32 {4, 0, 0}; bf16 {2, 0, 0}; 8-bit codes with
 * an fp32 scale per 256 {1, 256, 4}. A tile of such an array holds its
 * elements' bytes in this layout, from the tile's first element. */
typedef struct nvme_form {
    unsigned elem_bytes; /* 1..4 */
    unsigned group;      /* 0, or elements per group (tile sizes are multiples of it: a divisor of 1024) */
    unsigned group_bytes;
} nvme_form;

#define NVME_FORM_F32 ((nvme_form){4, 0, 0})

/* Bytes of n elements in form f (unpadded). */
uint64_t nvme_form_bytes(nvme_form f, size_t n);

/* ---- the arithmetic, for planners without a store ---- */

/* Elements per tile (per array) that a window of `window_bytes` gives
 * regions of at most `max_arrays` arrays with `block_bytes` blocks (0s take
 * the defaults); 0 when the window cannot hold NVME_MIN_SLOTS tiles of 4 KiB
 * per array. A multiple of 1024 (4 KiB of fp32). */
size_t nvme_tile_elems_for(uint64_t window_bytes, size_t block_bytes, int max_arrays);
/* Bytes a region of `numel` elements and `narrays` arrays takes in the file
 * with tiles of `tile_elems`. */
uint64_t nvme_region_bytes(size_t numel, int narrays, size_t tile_elems);
/* The same for arrays in forms[0..narrays) (NULL: all fp32). */
uint64_t nvme_region_bytes_as(size_t numel, int narrays, const nvme_form *forms, size_t tile_elems);
/* The window as the pool charges it: the slots that tile size allows, but
 * no more than a state of `state_bytes` fills (NVME_MIN_SLOTS at least). */
uint64_t nvme_window_charge(uint64_t window_bytes, size_t block_bytes, int max_arrays, uint64_t state_bytes);

/* ---- a store ---- */

/* Checks the config and the folder (it must exist, be writable and be on a
 * file system that is not memory); allocates nothing large. Release with
 * nvme_destroy(). */
ferry_status nvme_create(const nvme_config *cfg, nvme_store **out);
/* Closes the ring, removes the file, gives the window back. NULL is fine. */
void nvme_destroy(nvme_store *s);

/* Adds a region before nvme_open: `narrays` (1..NVME_MAX_ARRAYS) arrays of
 * `numel` fp32 elements, named `name` and `array_names[a]` in messages and
 * in the trace (category cats[a]). Returns its id (0, 1, ...). */
ferry_status nvme_add_region(nvme_store *s, const char *name, size_t numel, int narrays,
                             const char *const *array_names, const ferry_mem_category *cats, int *id);
/* The same with array a in forms[a] (NULL: all fp32); a form with
 * elem_bytes outside 1..4, a group that does not divide 1024, or more than
 * 4 bytes an element over a group is FERRY_ERR_INVALID_ARGUMENT. */
ferry_status nvme_add_region_as(nvme_store *s, const char *name, size_t numel, int narrays,
                                const char *const *array_names, const ferry_mem_category *cats,
                                const nvme_form *forms, int *id);

/* Creates the file (O_DIRECT where the file system allows it, aligned as
 * it says), lays the regions out, checks the free space and reserves it
 * with fallocate (a disk too small fails here with the bytes needed and
 * free), takes the window from the pool, sets up the I/O path (the ring
 * with the window's slots and the file registered, checked with a NOP; or
 * the threads) and starts the store's thread. Removes stale files a crashed
 * run left in the folder. Once. */
ferry_status nvme_open(nvme_store *s);

/* What nvme_open chose. */
size_t nvme_tile_elems(const nvme_store *s);
size_t nvme_region_tiles(const nvme_store *s, int region);
uint64_t nvme_file_bytes(const nvme_store *s);
uint64_t nvme_window_bytes(const nvme_store *s);
int nvme_slots(const nvme_store *s);
const char *nvme_path(const nvme_store *s);
/* A sentence: the file, its size, O_DIRECT or buffered, block, queue depth,
 * window, and anything that fell back (unregistered buffers). */
const char *nvme_describe(const nvme_store *s);
/* Bytes read and written by sweeps since the store was opened. */
void nvme_io_bytes(const nvme_store *s, uint64_t *read, uint64_t *written);
/* The path nvme_open took (NVME_IO_URING or NVME_IO_THREADS), and the
 * O_DIRECT alignment it uses. */
nvme_io_path nvme_io_path_of(const nvme_store *s);
size_t nvme_align(const nvme_store *s);

/* ---- a folder, before any store ---- */

/* What a folder offers the tier: its file system, whether that keeps its
 * files in memory (then `why` says so), and whether io_uring works here
 * (`uring_why` says why not). With `measure`, the I/O path a store would
 * take there moves `measure_bytes` through a file of its own (written, then
 * read, then removed) at the given block size and queue depth, and
 * `rate` is what it moved a second, read and write together. */
typedef struct nvme_probe {
    char fs[32];          /* "ext4", "tmpfs", ... (the statfs magic in hex when unknown) */
    bool memory;          /* a file system in memory, or a pseudo one: not a disk */
    char why[320];        /* the sentence for `memory` */
    bool uring;           /* io_uring set up and a NOP came back */
    char uring_why[200];  /* why not */
    nvme_io_path path;    /* the path a store there would take */
    double rate;          /* bytes a second read + written through it; 0 when not measured */
} nvme_probe;

ferry_status nvme_probe_dir(const char *dir, bool measure, uint64_t measure_bytes, size_t block_bytes,
                            int queue_depth, nvme_probe *out);

/* ---- sweeps ---- */

typedef enum nvme_mode {
    NVME_READ = 0,
    NVME_WRITE,
    NVME_UPDATE,
} nvme_mode;

/* One region in a sweep, and which of its arrays (bit a = array a). */
typedef struct nvme_span {
    int region;
    unsigned arrays;
} nvme_span;

/* A tile handed to the caller: elements [first, first + n) of its region.
 * array[a] points at the n elements in the window for every array of the
 * span, NULL for the others: n fp32 values, or nvme_form_bytes(form, n)
 * bytes in the array's form (cast it). Valid until nvme_sweep_put. */
typedef struct nvme_tile {
    int region;
    size_t index;
    size_t first, n;
    float *array[NVME_MAX_ARRAYS];
    int slot_;   /* the store's */
} nvme_tile;

/* Starts a sweep over `spans` (copied) in order, every tile of each. Checks
 * first that the file is still there and whole. FERRY_ERR_STATE while
 * another sweep is open or after a failure (which it repeats). Reading an
 * array never written is FERRY_ERR_STATE. */
ferry_status nvme_sweep_begin(nvme_store *s, nvme_mode mode, const nvme_span *spans, int nspans);
/* The next tile: *done true (tile untouched) when every tile was handed
 * over. Waits for its reads (and their checks) or for a free slot. */
ferry_status nvme_sweep_next(nvme_store *s, nvme_tile *t, bool *done);
/* The caller is done with t: written back (WRITE, UPDATE) or dropped. */
ferry_status nvme_sweep_put(nvme_store *s, nvme_tile *t);
/* Ends the sweep: waits for every I/O still in flight (also after a failure
 * or when tiles were left unasked), then returns the sweep's first failure. */
ferry_status nvme_sweep_end(nvme_store *s);

/* The sticky failure, FERRY_OK while none; ferry_last_error() then says
 * it. Not while another thread drives a sweep. */
ferry_status nvme_failure(const nvme_store *s);

#ifdef __cplusplus
}
#endif
#endif
