/* The NVMe store's I/O paths: the io_uring ring (set up and checked with a
 * NOP, the window and the file registered where the kernel lets them) and
 * its thread, which reaps completions and submits; or, where io_uring is
 * refused or the threads are asked for, threads of pread/pwrite on the same
 * descriptor. Also the queue of block I/Os both paths drain: short
 * transfers resumed, EAGAIN paused and tried again, failures made the
 * store's. It knows blocks, not tiles: which tiles are read or written, and
 * when, is the sweeps' business (nvme_sweep.c). */
#include "offload/nvme_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

/* The path asked for: the config's, or $FERRY_NVME_IO's when it says auto. */
ferry_status nvme_io_path_asked(nvme_io_path cfg, nvme_io_path *out)
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

/* ---- the I/O paths: setting up ---- */

static void *ring_thread(void *p);
static void *worker_thread(void *p);

/* A ring of `entries`, checked with a NOP round trip: 0, or -errno with
 * `what` the step that failed. */
int nvme_ring_setup(struct io_uring *ring, unsigned entries, const char **what)
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
void nvme_uring_refusal(int err, const char *what, char *buf, size_t cap)
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

/* s->io: io_uring where it works (or as asked), else the threads. */
static ferry_status choose_path(nvme_store *s)
{
    s->io = NVME_IO_THREADS;
    if (s->io_asked == NVME_IO_THREADS)
        return FERRY_OK;
    const char *what;
    int r = nvme_ring_setup(&s->ring, (unsigned)s->qd, &what);
    if (r == 0) {
        s->ring_ok = true;
        s->io = NVME_IO_URING;
        return FERRY_OK;
    }
    nvme_uring_refusal(r, what, s->io_note, sizeof s->io_note);
    if (s->io_asked == NVME_IO_URING)
        return err_set(FERRY_ERR_UNSUPPORTED, "io_uring is refused here (%s), and the NVMe store was asked "
                       "to use it alone", s->io_note);
    if (!atomic_flag_test_and_set(&uring_warned))
        fprintf(stderr, "ferry: io_uring is refused here (%s); the NVMe store reads and writes with %d "
                "threads of pread/pwrite on its O_DIRECT file instead (the same checksums, the same bytes)\n",
                s->io_note, s->qd < NVME_MAX_IO_THREADS ? s->qd : NVME_MAX_IO_THREADS);
    return FERRY_OK;
}

/* io_uring where it works (or as asked), else the threads; then the
 * store's threads start. */
ferry_status nvme_open_io(nvme_store *s, char *notes, size_t cap)
{
    ferry_status st = choose_path(s);
    if (st != FERRY_OK)
        return st;
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

/* ---- I/O: the queue (everything from here under s->mu) ---- */

void nvme_queue_push(nvme_store *s, nvme_io *io)
{
    s->q.ios[(s->q.head + s->q.len) % s->q.cap] = io;
    s->q.len++;
}

static nvme_io *queue_pop(nvme_store *s)
{
    nvme_io *io = s->q.ios[s->q.head];
    s->q.head = (s->q.head + 1) % s->q.cap;
    s->q.len--;
    return io;
}

/* Whether any I/O is queued or in flight: waiting can make progress. */
bool nvme_busy(const nvme_store *s) { return s->q.inflight > 0 || s->q.prepared > 0 || s->q.len > 0; }

/* Moves queued I/Os into the submission ring, as many as the queue depth
 * and the ring allow. */
static void prepare(nvme_store *s)
{
    while (s->failed == FERRY_OK && s->q.len > 0 && s->q.inflight + s->q.prepared < s->qd) {
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
        s->q.prepared++;
    }
}

/* Prepares what the queue depth allows and submits it in one call (the
 * ring), or wakes the workers (threads). A refusal for want of resources
 * is left to the ring's thread, which pauses and tries again. */
void nvme_pump(nvme_store *s)
{
    if (s->io == NVME_IO_THREADS) {
        if (s->q.len > 0)
            pthread_cond_broadcast(&s->work_cv);
        return;
    }
    prepare(s);
    if (s->q.prepared == 0 || (s->q.again && s->q.inflight == 0))
        return; /* nothing, or the ring's thread pauses first */
    int r;
    do
        r = io_submit_refusal();
    while (r == 0 && (r = io_uring_submit(&s->ring)) == -EINTR);
    if (r > 0) {
        s->q.prepared -= r;
        s->q.inflight += r;
        s->q.refusals = 0;
        s->q.pause_us = 0;
        s->q.again = false;
    } else if (r == -EAGAIN || r == -EBUSY) {
        s->q.again = true; /* the kernel is short of memory for requests, or its completion queue is full */
    } else if (r < 0) {
        /* What was prepared is never submitted: the store is done. */
        s->q.prepared = 0;
        nvme_fail(s, FERRY_ERR_IO, "submitting I/O on the state file '%s': %s", s->path, strerror(-r));
    }
    pthread_cond_broadcast(&s->work_cv);
}

/* The pause before trying again what the kernel answered EAGAIN: 50 us,
 * doubling to 50 ms; false (the store failed) after NVME_EAGAIN_TRIES in a
 * row. Unlocks s->mu while it sleeps. */
static bool pause_again(nvme_store *s)
{
    if (++s->q.refusals > NVME_EAGAIN_TRIES) {
        nvme_fail(s, FERRY_ERR_IO,
                  "I/O on the state file '%s' was refused %d times in a row with nothing in flight (EAGAIN: the kernel "
                  "had no memory for the requests); the run cannot go on, and checkpoints saved before are whole",
                  s->path, NVME_EAGAIN_TRIES);
        s->q.len = 0;
        s->q.prepared = 0;
        pthread_cond_broadcast(&s->done_cv);
        return false;
    }
    s->q.pause_us = s->q.pause_us ? s->q.pause_us * 2 : 50;
    if (s->q.pause_us > 50000)
        s->q.pause_us = 50000;
    struct timespec ts = {0, (long)s->q.pause_us * 1000};
    pthread_mutex_unlock(&s->mu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&s->mu);
    s->q.again = false;
    return true;
}

/* ---- I/O: completions ---- */

static void io_failed(nvme_store *s, const nvme_io *io, int err)
{
    const nvme_region *r = &s->regions[io->region];
    if (io->write && (err == ENOSPC || err == EDQUOT))
        nvme_fail(s, FERRY_ERR_IO,
                  "writing the state file '%s' block %llu (bytes %llu..%llu, '%s' %s): %s: the disk is full; the "
                  "run cannot go on, and checkpoints saved before are whole",
                  s->path, (unsigned long long)io->block, (unsigned long long)io->start,
                  (unsigned long long)(io->start + io->full), r->name, r->array_names[io->array], strerror(err));
    else
        nvme_fail(s, FERRY_ERR_IO,
                  "%s the state file '%s' block %llu (bytes %llu..%llu, '%s' %s): %s%s; the run cannot go on, and the "
                  "checkpoints saved before are whole",
                  io->write ? "writing" : "reading", s->path, (unsigned long long)io->block,
                  (unsigned long long)io->start, (unsigned long long)(io->start + io->full), r->name,
                  r->array_names[io->array], strerror(err), err == EAGAIN ? " again and again" : "");
}

/* A read that moved nothing: the file ends before the block does. */
static void truncated(nvme_store *s, const nvme_io *io)
{
    const nvme_region *r = &s->regions[io->region];
    struct stat sb;
    long long size = fstat(s->fd, &sb) == 0 ? (long long)sb.st_size : -1;
    nvme_fail(s, FERRY_ERR_IO,
              "%s the state file '%s' block %llu (bytes %llu..%llu, '%s' %s) stopped at byte %llu: the file is %lld "
              "bytes, it was %llu: it was truncated underneath; the run cannot go on, and checkpoints saved "
              "before are whole",
              "reading", s->path, (unsigned long long)io->block,
              (unsigned long long)io->start, (unsigned long long)(io->start + io->full), r->name,
              r->array_names[io->array], (unsigned long long)io->off, size, (unsigned long long)s->file_bytes);
}

/* `res` bytes moved: counted; after a short transfer the rest is queued
 * again (true) unless the store failed. */
static bool moved(nvme_store *s, nvme_io *io, int res)
{
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
            nvme_queue_push(s, io);
            return true;
        }
    }
    return false;
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
            s->q.again = res == -EAGAIN;
            nvme_queue_push(s, io); /* nothing moved: ask again */
            return;
        }
    } else if (res < 0) {
        io_failed(s, io, -res);
    } else if (res == 0 && io->write) {
        io_failed(s, io, EIO); /* a write that made no progress will never finish */
    } else if (res == 0) {
        truncated(s, io);
    } else if (moved(s, io, res)) {
        return;
    }
    if (--slot->pending == 0 && slot->state == SLOT_WRITING)
        slot->state = SLOT_FREE;
}

/* Takes every completion the ring holds. */
static void reap(nvme_store *s)
{
    struct io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&s->ring, head, cqe)
    {
        complete(s, io_uring_cqe_get_data(cqe), cqe->res);
        n++;
    }
    io_uring_cq_advance(&s->ring, n);
    s->q.inflight -= (int)n;
}

/* The ring's thread: waits for completions (without the lock: the ring's
 * completion side is this thread's alone), takes them, resubmits and reads
 * ahead into the slots freed, and wakes the caller. Submissions happen
 * under the lock, from either thread. */
static void *ring_thread(void *p)
{
    nvme_store *s = p;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->q.inflight == 0) {
            if (s->failed == FERRY_OK && (s->q.len > 0 || s->q.prepared > 0)) {
                if (s->q.again && !pause_again(s))
                    continue;
                nvme_pump(s);
                if (s->q.inflight > 0 || s->q.again)
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
            nvme_fail(s, FERRY_ERR_IO, "waiting for I/O on the state file '%s': %s", s->path, strerror(-r));
            s->q.inflight = 0; /* the ring is unusable: its teardown cancels what is left */
            s->q.len = 0;
            pthread_cond_broadcast(&s->done_cv);
            continue;
        }
        reap(s);
        if (s->sweep.open)
            nvme_read_ahead(s); /* pumps too */
        else
            nvme_pump(s);
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
        if (s->q.len == 0 || s->failed != FERRY_OK) {
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        if (s->q.again && s->q.inflight == 0 && !pause_again(s))
            continue;
        nvme_io *io = queue_pop(s);
        s->q.inflight++;
        pthread_mutex_unlock(&s->mu);
        ssize_t n = io->write ? pwrite(s->fd, io->buf, io->len, (off_t)io->off)
                              : pread(s->fd, io->buf, io->len, (off_t)io->off);
        int res = n >= 0 ? (int)n : -errno;
        pthread_mutex_lock(&s->mu);
        s->q.inflight--;
        complete(s, io, res);
        if (s->sweep.open)
            nvme_read_ahead(s);
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Waits (under s->mu) for the store's threads to make progress. */
void nvme_wait_progress(nvme_store *s)
{
    pthread_cond_wait(&s->done_cv, &s->mu);
}

/* Stops the store's threads and waits for them. */
void nvme_stop_threads(nvme_store *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    s->nthreads = 0;
}

