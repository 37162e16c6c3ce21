/* Fault injection for tests, SQLite style: counts every allocation, open,
 * read, write, sync, rename, mapping, page lock, thread start, space
 * reservation and io_uring completion that ferry's own code makes, and makes
 * the Nth of them fail with the errno the system would give (ENOMEM, EACCES,
 * EIO, ENOSPC, EAGAIN); it can also make io_uring transfers come back short. Built only with
 * -Dfault_injection=true, where every C file is compiled with
 * common/fault_inject.h forced in, which sends those calls here; no call
 * site in the product names this header.
 * Owns the counter and the record of the call that failed; what a failure
 * should do to the program is the tests' business (tests/fault/).
 *
 * Armed from a test program with fault_arm(), or in a program the test starts
 * through the environment, read once at start:
 *   FERRY_FAULT_AT=N       the Nth counted call fails (1-based; 0 only counts)
 *   FERRY_FAULT_PERSIST=1  that call and every later one fail
 *   FERRY_FAULT_LOG=FILE   the failed call is appended there as one line,
 *                          "N KIND at WHERE", so the test knows it was
 *                          reached, and at exit "calls N", what was counted
 *   FERRY_FAULT_WRITE_DELAY_MS=N  a slow disk: every write and pwrite waits
 *                          N ms first (uncounted, armed or not), so a test
 *                          can act while a checkpoint is being written
 * Thread-safe: calls from every thread are counted, in the order they reach
 * the counter. */
#ifndef FERRY_COMMON_FAULT_H
#define FERRY_COMMON_FAULT_H

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The wrappers are called from the shared library's users too (a test built
 * against libferry.so), so they are visible outside it. */
#define FAULT_API __attribute__((visibility("default")))

/* Counting restarts at 0. The `at`th counted call from now fails (at >= 1);
 * with `persistent`, every call after it fails too. at 0 only counts. */
FAULT_API void fault_arm(uint64_t at, bool persistent);
/* Every call of `kind` ("renameat2", as fault_fired names them) fails with
 * `err`, uncounted, armed or not: a system that lacks something (a file
 * system without RENAME_EXCHANGE: "renameat2", EINVAL). NULL: none. `kind`
 * must outlive the refusal (a string literal). */
FAULT_API void fault_refuse(const char *kind, int err);
/* Stops counting and failing; returns the calls counted since fault_arm. */
FAULT_API uint64_t fault_disarm(void);
/* The number of the call that failed first since fault_arm (0: none did),
 * and in `where` (cap bytes) what it was and where it was called from:
 * "write at engine/checkpoint.c:212 save_body" (source lines in sanitizer
 * builds, an address otherwise). */
FAULT_API uint64_t fault_fired(char *where, size_t cap);

/* ---- the wrappers fault_inject.h redirects to ---- */
FAULT_API void *fault_malloc(size_t n);
FAULT_API void *fault_calloc(size_t count, size_t size);
FAULT_API void *fault_realloc(void *p, size_t n);
FAULT_API char *fault_strdup(const char *s);
FAULT_API char *fault_strndup(const char *s, size_t n);
FAULT_API int fault_posix_memalign(void **out, size_t align, size_t n);
FAULT_API void *fault_aligned_alloc(size_t align, size_t n);
FAULT_API int fault_open(const char *path, int flags, ...);
FAULT_API int fault_openat(int dirfd, const char *path, int flags, ...);
FAULT_API FILE *fault_fopen(const char *path, const char *mode);
FAULT_API DIR *fault_opendir(const char *path);
FAULT_API ssize_t fault_read(int fd, void *buf, size_t n);
FAULT_API ssize_t fault_pread(int fd, void *buf, size_t n, off_t offset);
FAULT_API ssize_t fault_write(int fd, const void *buf, size_t n);
FAULT_API ssize_t fault_pwrite(int fd, const void *buf, size_t n, off_t offset);
FAULT_API int fault_fsync(int fd);
FAULT_API int fault_fdatasync(int fd);
FAULT_API int fault_rename(const char *from, const char *to);
FAULT_API int fault_renameat(int from_dir, const char *from, int to_dir, const char *to);
FAULT_API int fault_renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned flags);
FAULT_API void *fault_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t offset);
FAULT_API int fault_mlock(const void *addr, size_t n);
/* syscall(2): SYS_mlock is counted as a page lock (the pinned pool locks
 * through the raw call); every other number passes straight through. */
FAULT_API long fault_syscall(long number, long a, long b, long c, long d, long e, long f);
/* pthread_create: a refused thread returns EAGAIN, as under RLIMIT_NPROC. */
FAULT_API int fault_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                                   void *arg);
/* fallocate: a refused reservation is ENOSPC, the full disk. */
FAULT_API int fault_fallocate(int fd, int mode, off_t offset, off_t len);
/* An io_uring completion's result, as offload/nvme_io.c reads it (its
 * io_completion_result): counted as "io_uring read" or "io_uring write"; a
 * failing read completes with -EIO, a failing write with -ENOSPC. `len` is
 * the transfer asked for, `res` what the kernel did. */
FAULT_API int fault_io_result(int res, unsigned len, int is_write);
/* While on, every io_uring transfer of 8 KiB or more that completed whole
 * reports half of it (in 4 KiB units), and every pread and pwrite of 8 KiB
 * or more moves half of it, as a short read or write does: the store must
 * resume the rest. Uncounted; armed or not. */
FAULT_API void fault_short_io(bool on);
/* Before offload/nvme_io.c sets up io_uring: 0, or -EPERM when this call is
 * the one to fail (counted as "io_uring_queue_init"; refused with
 * fault_refuse, every time), as a seccomp profile or the sysctl
 * kernel.io_uring_disabled answers. */
FAULT_API int fault_io_uring_refusal(void);
/* Before offload/nvme_io.c calls io_uring_submit: 0, or -EAGAIN for the next
 * `n` submissions after fault_again(n), as when the kernel has no memory
 * for the requests. Uncounted. */
FAULT_API int fault_io_submit(void);
FAULT_API void fault_again(int n);
/* The O_DIRECT alignment statx gave the store (0: none said); with
 * fault_set_dio_align(n > 0), n instead. Uncounted. */
FAULT_API size_t fault_dio_align(size_t kernel);
FAULT_API void fault_set_dio_align(size_t n);

#ifdef __cplusplus
}
#endif

#endif
