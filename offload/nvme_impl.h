/* Inside the NVMe store: the store's state and the functions its files
 * share (offload/nvme.h says what the store does). Included by nvme.c,
 * nvme_format.c, nvme_file.c, nvme_io.c and nvme_sweep.c alone.
 *
 *   nvme.c         the store's face: create, regions, open, destroy, what it chose, its failure
 *   nvme_format.c  the arithmetic, the file's layout, the CRC-32C of every block
 *   nvme_file.c    the folder and the file: its file system, creation, space, checks, the probe
 *   nvme_io.c      the I/O paths: the io_uring ring and its thread, or the threads of pread/pwrite
 *   nvme_sweep.c   the window's slots and the sweeps that stream tiles through them */
#ifndef FERRY_OFFLOAD_NVME_IMPL_H
#define FERRY_OFFLOAD_NVME_IMPL_H

#include <liburing.h>
#include <pthread.h>
#include <sys/statfs.h>

#include "common/error.h"
#include "offload/nvme.h"

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

/* ---- the store ---- */

typedef struct nvme_region {
    char name[NVME_NAME_MAX];
    char array_names[NVME_MAX_ARRAYS][NVME_ARRAY_NAME_MAX];
    ferry_mem_category cats[NVME_MAX_ARRAYS];
    nvme_form forms[NVME_MAX_ARRAYS];
    size_t numel, ntiles;
    int narrays;
    uint64_t tile_bytes;  /* a whole tile's segments on disk, all arrays */
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

/* The I/Os between the sweeps and the I/O path (under the store's mu). */
typedef struct nvme_queue {
    /* I/Os waiting for room in the queue depth, oldest first */
    nvme_io **ios;
    size_t cap, head, len;
    int inflight; /* submitted to the kernel (or taken by a worker), not yet completed */
    int prepared; /* in the submission ring, not yet submitted */
    int refusals; /* submissions refused in a row with nothing in flight */
    bool again;   /* a transfer came back EAGAIN: pause before the next submission */
    unsigned pause_us;
} nvme_queue;

/* The open sweep (under the store's mu). */
typedef struct nvme_sweep_state {
    bool open;
    nvme_mode mode;
    nvme_span *spans;
    int nspans;
    size_t total, issued, handed; /* tiles: in the sweep, given a slot, handed to the caller */
    int cur_span;                 /* the next tile to give a slot */
    size_t cur_tile;
} nvme_sweep_state;

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

    nvme_queue q;
    nvme_sweep_state sweep;

    ferry_status failed;
    char failure[ERR_MESSAGE_MAX];
    uint64_t bytes_read, bytes_written, resumed;
    char io_note[256];
    char describe[1024];
};

/* ---- the failure (nvme.c) ---- */

/* Makes the failure sticky: the first one is kept and repeated. */
ferry_status nvme_fail(nvme_store *s, ferry_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sets the error to the sticky failure again and returns it. */
ferry_status nvme_repeat_failure(const nvme_store *s);

/* ---- the arithmetic and the layout (nvme_format.c) ---- */

/* The config's window and block, or the defaults for 0. */
uint64_t nvme_window_or_default(uint64_t w);
size_t nvme_block_or_default(size_t b);
/* Lays the regions out in the file (tile size, offsets, checksum arrays)
 * and sizes the window's slots; nvme_open's, after the file gave its
 * alignment. */
ferry_status nvme_lay_out(nvme_store *s);
/* Elements of tile `tile` of r. */
size_t nvme_tile_len(const nvme_store *s, const nvme_region *r, size_t tile);
/* Bytes of array a's segment of tile `tile` of r on disk: padded to s->align. */
uint64_t nvme_seg_bytes(const nvme_store *s, const nvme_region *r, size_t tile, int a);
/* Bytes of array a's elements in tile `tile` of r (unpadded). */
uint64_t nvme_used_bytes(const nvme_store *s, const nvme_region *r, size_t tile, int a);
/* The first element of tile `tile` that byte `at` of array a's segment
 * holds (the tile's end for a byte past the elements' values: a group's
 * bytes), for messages. */
size_t nvme_elem_at(const nvme_store *s, const nvme_region *r, size_t tile, int a, uint64_t at);
/* File offset of array a of tile `tile` of r. */
uint64_t nvme_seg_offset(const nvme_store *s, const nvme_region *r, size_t tile, int a);
/* Index in r->crc of block `block` of array a of tile `tile`. */
size_t nvme_crc_index(const nvme_store *s, const nvme_region *r, size_t tile, int a, size_t block);
/* Bytes of block j of a segment of `seg` bytes. */
uint32_t nvme_block_len(const nvme_store *s, uint64_t seg, size_t j);

/* ---- checksums, on the caller's workers (nvme_format.c) ---- */

/* Computed for writing: kept as the blocks' checksums. */
ferry_status nvme_checksum_tile(nvme_store *s, nvme_slot *slot);
/* Computed for reading: compared with the blocks' checksums, the first
 * difference (array by array, block by block) reported as the store's
 * failure. */
ferry_status nvme_verify_tile(nvme_store *s, nvme_slot *slot);

/* ---- the folder and the file (nvme_file.c) ---- */

/* The file system under `dir` into name; its sentence into why (and true)
 * when it is not a disk. */
bool nvme_not_a_disk(const char *dir, const struct statfs *fs, char *name, size_t ncap, char *why, size_t wcap);
/* Removes the files of runs that ended without removing theirs. */
void nvme_remove_stale(const nvme_store *s);
/* Creates and locks the store's file, O_DIRECT where the file system takes
 * it, and reads its alignment. */
ferry_status nvme_create_file(nvme_store *s);
/* Checks the disk has room for the file and reserves it now. */
ferry_status nvme_reserve(nvme_store *s);
/* Checks the file is still there and whole, under s->mu (a failure is the
 * store's). */
ferry_status nvme_check_file(nvme_store *s);

/* ---- the I/O paths (nvme_io.c) ---- */

/* The path asked for: the config's, or $FERRY_NVME_IO's when it says auto. */
ferry_status nvme_io_path_asked(nvme_io_path cfg, nvme_io_path *out);
/* A ring of `entries`, checked with a NOP round trip: 0, or -errno with
 * `what` the step that failed. */
int nvme_ring_setup(struct io_uring *ring, unsigned entries, const char **what);
/* Why io_uring may be refused, for the sentence. */
void nvme_uring_refusal(int err, const char *what, char *buf, size_t cap);
/* io_uring where it works (or as asked), else the threads; then the
 * store's threads start. What fell back is added to `notes`. */
ferry_status nvme_open_io(nvme_store *s, char *notes, size_t cap);
/* Stops the store's threads and waits for them. */
void nvme_stop_threads(nvme_store *s);

/* Under s->mu, these four. An I/O in at the back of the queue. */
void nvme_queue_push(nvme_store *s, nvme_io *io);
/* Whether any I/O is queued or in flight: waiting can make progress. */
bool nvme_busy(const nvme_store *s);
/* Submits what the queue depth allows (the ring) or wakes the workers. */
void nvme_pump(nvme_store *s);
/* Waits for the store's threads to make progress. */
void nvme_wait_progress(nvme_store *s);

/* ---- the window and the sweeps (nvme_sweep.c) ---- */

/* Takes the window from the pool and gives each slot its I/O list. */
ferry_status nvme_take_window(nvme_store *s);
/* Reads ahead into every free slot of the open sweep, and submits (the
 * store's threads call it after each completion). */
void nvme_read_ahead(nvme_store *s);

#endif
