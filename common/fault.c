/* The fault-injection counter and its wrappers (see fault.h). Compiled only
 * in a -Dfault_injection=true build. This file is the one place where the
 * redirected names mean the real calls again. */
#include "common/fault.h"

#undef malloc
#undef calloc
#undef realloc
#undef strdup
#undef strndup
#undef posix_memalign
#undef aligned_alloc
#undef open
#undef openat
#undef fopen
#undef opendir
#undef read
#undef pread
#undef write
#undef pwrite
#undef fsync
#undef fdatasync
#undef rename
#undef renameat
#undef renameat2
#undef mmap
#undef mlock
#undef syscall
#undef pthread_create
#undef fallocate

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h>
#define FAULT_SYMBOLIZE 1
#endif

static _Atomic bool armed;
static _Atomic bool persist;
static _Atomic uint64_t target; /* 0: count only */
static _Atomic uint64_t calls;
static _Atomic uint64_t fired_at; /* 0: not yet */
static const char *fired_kind;
static void *fired_pc;
static char log_path[4096];
static const char *_Atomic refused_kind; /* a static string */
static _Atomic int refused_errno;
static _Atomic bool short_io;
static _Atomic int again_left;
static _Atomic size_t dio_align;
static _Atomic long write_delay_ms; /* FERRY_FAULT_WRITE_DELAY_MS */

/* "KIND at FILE:LINE FUNCTION", or the address where no symbolizer is. */
static void describe(const char *kind, void *pc, char *out, size_t cap)
{
    char place[512] = "";
#ifdef FAULT_SYMBOLIZE
    /* pc - 1: the call instruction, not the one after it. */
    __sanitizer_symbolize_pc((char *)pc - 1, "%s:%l %f", place, sizeof place);
#endif
    if (!place[0])
        snprintf(place, sizeof place, "%p", pc);
    snprintf(out, cap, "%s at %s", kind, place);
}

/* One line for the test that started this process: the fault was reached. */
static void log_fired(uint64_t n)
{
    char line[640], what[600];
    describe(fired_kind, fired_pc, what, sizeof what);
    int len = snprintf(line, sizeof line, "%llu %s\n", (unsigned long long)n, what);
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (write(fd, line, (size_t)len) != len)
        fprintf(stderr, "fault injection: could not log to '%s'\n", log_path);
    close(fd);
}

/* The errno this call, of `kind` from `pc`, fails with (`err` when it is
 * the one, or one of those, to fail; a refused kind's own); 0: it proceeds. */
static int should_fail(const char *kind, void *pc, int err)
{
    const char *refused = atomic_load(&refused_kind);
    if (refused && strcmp(refused, kind) == 0)
        return atomic_load(&refused_errno);
    if (!atomic_load_explicit(&armed, memory_order_acquire))
        return 0;
    uint64_t n = atomic_fetch_add(&calls, 1) + 1;
    uint64_t at = atomic_load(&target);
    if (at == 0 || n < at || (n > at && !atomic_load(&persist)))
        return 0;
    uint64_t none = 0;
    if (atomic_compare_exchange_strong(&fired_at, &none, n)) {
        fired_kind = kind;
        fired_pc = pc;
        if (log_path[0])
            log_fired(n);
    }
    return err;
}

#define PC __builtin_return_address(0)

/* The body of a wrapper: fail with errno set and `failed` returned, or make
 * the real call. */
#define FAULT_CALL(kind, err, failed, call)             \
    do {                                                \
        int e_ = should_fail(kind, PC, err);            \
        if (e_)                                         \
            return errno = e_, failed;                  \
        return call;                                    \
    } while (0)

void fault_arm(uint64_t at, bool persistent)
{
    atomic_store(&armed, false);
    atomic_store(&calls, 0);
    atomic_store(&fired_at, 0);
    atomic_store(&target, at);
    atomic_store(&persist, persistent);
    atomic_store_explicit(&armed, true, memory_order_release);
}

void fault_refuse(const char *kind, int err)
{
    atomic_store(&refused_errno, err);
    atomic_store(&refused_kind, kind);
}

uint64_t fault_disarm(void)
{
    atomic_store(&armed, false);
    return atomic_load(&calls);
}

uint64_t fault_fired(char *where, size_t cap)
{
    uint64_t n = atomic_load(&fired_at);
    if (where && cap)
        where[0] = '\0';
    if (n && where && cap)
        describe(fired_kind, fired_pc, where, cap);
    return n;
}

/* At the exit of a program a test started: "calls N", what it counted. */
static void log_calls(void)
{
    char line[64];
    int len = snprintf(line, sizeof line, "calls %llu\n", (unsigned long long)atomic_load(&calls));
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && write(fd, line, (size_t)len) != len)
        fprintf(stderr, "fault injection: could not log to '%s'\n", log_path);
    if (fd >= 0)
        close(fd);
}

/* The environment of a program a test started (see fault.h); FERRY_FAULT_AT=0
 * only counts. */
__attribute__((constructor)) static void arm_from_environment(void)
{
    const char *at = getenv("FERRY_FAULT_AT"), *p = getenv("FERRY_FAULT_PERSIST");
    const char *logfile = getenv("FERRY_FAULT_LOG"), *delay = getenv("FERRY_FAULT_WRITE_DELAY_MS");
    if (logfile)
        snprintf(log_path, sizeof log_path, "%s", logfile);
    if (delay && *delay)
        atomic_store(&write_delay_ms, strtol(delay, NULL, 10));
    if (!at || !*at)
        return;
    fault_arm(strtoull(at, NULL, 10), p && strcmp(p, "1") == 0);
    if (log_path[0])
        atexit(log_calls);
}

/* ---- allocation: NULL and ENOMEM ---- */

void *fault_malloc(size_t n)
{
    FAULT_CALL("malloc", ENOMEM, NULL, malloc(n));
}

void *fault_calloc(size_t count, size_t size)
{
    FAULT_CALL("calloc", ENOMEM, NULL, calloc(count, size));
}

void *fault_realloc(void *p, size_t n)
{
    FAULT_CALL("realloc", ENOMEM, NULL, realloc(p, n));
}

char *fault_strdup(const char *s)
{
    FAULT_CALL("strdup", ENOMEM, NULL, strdup(s));
}

char *fault_strndup(const char *s, size_t n)
{
    FAULT_CALL("strndup", ENOMEM, NULL, strndup(s, n));
}

int fault_posix_memalign(void **out, size_t align, size_t n)
{
    int e = should_fail("posix_memalign", PC, ENOMEM);
    if (e)
        return e;
    return posix_memalign(out, align, n);
}

void *fault_aligned_alloc(size_t align, size_t n)
{
    FAULT_CALL("aligned_alloc", ENOMEM, NULL, aligned_alloc(align, n));
}

/* ---- opening: -1 / NULL and EACCES ---- */

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int fault_open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    FAULT_CALL("open", EACCES, -1, open(path, flags, mode));
}

int fault_openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    FAULT_CALL("openat", EACCES, -1, openat(dirfd, path, flags, mode));
}

FILE *fault_fopen(const char *path, const char *mode)
{
    FAULT_CALL("fopen", EACCES, NULL, fopen(path, mode));
}

DIR *fault_opendir(const char *path)
{
    FAULT_CALL("opendir", EACCES, NULL, opendir(path));
}

/* ---- reading: EIO; writing: ENOSPC, the full disk ---- */

ssize_t fault_read(int fd, void *buf, size_t n)
{
    FAULT_CALL("read", EIO, -1, read(fd, buf, n));
}

/* Half of a transfer of 8 KiB or more, in 4 KiB units, while short
 * transfers are on. */
static size_t short_len(size_t n)
{
    return atomic_load(&short_io) && n >= 8192 ? (n / 2) & ~(size_t)4095 : n;
}

ssize_t fault_pread(int fd, void *buf, size_t n, off_t offset)
{
    FAULT_CALL("pread", EIO, -1, pread(fd, buf, short_len(n), offset));
}

/* A slow disk: every write and pwrite waits FERRY_FAULT_WRITE_DELAY_MS first. */
static void write_delay(void)
{
    long ms = atomic_load(&write_delay_ms);
    if (ms > 0)
        nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL);
}

ssize_t fault_write(int fd, const void *buf, size_t n)
{
    write_delay();
    FAULT_CALL("write", ENOSPC, -1, write(fd, buf, n));
}

ssize_t fault_pwrite(int fd, const void *buf, size_t n, off_t offset)
{
    write_delay();
    FAULT_CALL("pwrite", ENOSPC, -1, pwrite(fd, buf, short_len(n), offset));
}

/* ---- syncing and renaming: EIO ---- */

int fault_fsync(int fd)
{
    FAULT_CALL("fsync", EIO, -1, fsync(fd));
}

int fault_fdatasync(int fd)
{
    FAULT_CALL("fdatasync", EIO, -1, fdatasync(fd));
}

int fault_rename(const char *from, const char *to)
{
    FAULT_CALL("rename", EIO, -1, rename(from, to));
}

int fault_renameat(int from_dir, const char *from, int to_dir, const char *to)
{
    FAULT_CALL("renameat", EIO, -1, renameat(from_dir, from, to_dir, to));
}

int fault_renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned flags)
{
    FAULT_CALL("renameat2", EIO, -1, renameat2(from_dir, from, to_dir, to, flags));
}

/* ---- mapping and page locks: ENOMEM ---- */

void *fault_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t offset)
{
    FAULT_CALL("mmap", ENOMEM, MAP_FAILED, mmap(addr, n, prot, flags, fd, offset));
}

int fault_mlock(const void *addr, size_t n)
{
    FAULT_CALL("mlock", ENOMEM, -1, mlock(addr, n));
}

long fault_syscall(long number, long a, long b, long c, long d, long e, long f)
{
    int err = number == SYS_mlock ? should_fail("mlock", PC, ENOMEM) : 0;
    if (err)
        return errno = err, -1;
    return syscall(number, a, b, c, d, e, f);
}

/* ---- starting a thread: the error number itself, EAGAIN ---- */

int fault_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    int err = should_fail("pthread_create", PC, EAGAIN);
    if (err)
        return err;
    return pthread_create(thread, attr, start, arg);
}

/* ---- reserving disk space: ENOSPC ---- */

int fault_fallocate(int fd, int mode, off_t offset, off_t len)
{
    FAULT_CALL("fallocate", ENOSPC, -1, fallocate(fd, mode, offset, len));
}

/* ---- io_uring completions: -EIO (read), -ENOSPC (write), or short ---- */

void fault_short_io(bool on) { atomic_store(&short_io, on); }

int fault_io_result(int res, unsigned len, int is_write)
{
    int err = should_fail(is_write ? "io_uring write" : "io_uring read", PC, is_write ? ENOSPC : EIO);
    if (err)
        return -err;
    if (atomic_load(&short_io) && res >= 0 && (unsigned)res == len && len >= 8192)
        return (int)((len / 2) & ~4095u);
    return res;
}

/* ---- io_uring's setup and submissions, O_DIRECT's alignment ---- */

int fault_io_uring_refusal(void)
{
    int err = should_fail("io_uring_queue_init", PC, EPERM);
    return err ? -err : 0;
}

void fault_again(int n) { atomic_store(&again_left, n); }

int fault_io_submit(void)
{
    int left = atomic_load(&again_left);
    while (left > 0 && !atomic_compare_exchange_weak(&again_left, &left, left - 1))
        ;
    return left > 0 ? -EAGAIN : 0;
}

void fault_set_dio_align(size_t n) { atomic_store(&dio_align, n); }

size_t fault_dio_align(size_t kernel)
{
    size_t forced = atomic_load(&dio_align);
    return forced ? forced : kernel;
}
