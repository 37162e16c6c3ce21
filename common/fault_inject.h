/* Forced into every C file of a -Dfault_injection=true build (the root
 * meson.build passes `-include common/fault_inject.h`): sends ferry's own
 * allocations, opens, reads, writes, syncs, renames, mappings, page locks,
 * thread starts, space reservations, io_uring setups and completions to the counting wrappers of common/fault.h, so a test can
 * make the Nth of them fail without one call site in the product changing.
 * Owns only the redirection; counting and failing are common/fault.c's.
 *
 * The system headers that declare these functions come first, so their
 * declarations are read before the names become macros. The macros are
 * function-like: a name not followed by "(" (a function pointer, a struct
 * member in an initializer) stays what it was. A struct member called like
 * a function would be caught too, so no redirected name may be one (free and
 * close are members of ferry's function tables: they are not redirected,
 * and neither is anything that only releases). Libraries ferry links (libc,
 * OpenBLAS, hwloc, cJSON) are not compiled with this header: their own
 * calls are not counted. */
#ifndef FERRY_COMMON_FAULT_INJECT_H
#define FERRY_COMMON_FAULT_INJECT_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* By its own folder: this header is forced into programs (examples/) whose
 * include path holds only include/. */
#include "fault.h"

#define malloc(...) fault_malloc(__VA_ARGS__)
#define calloc(...) fault_calloc(__VA_ARGS__)
#define realloc(...) fault_realloc(__VA_ARGS__)
#define strdup(...) fault_strdup(__VA_ARGS__)
#define strndup(...) fault_strndup(__VA_ARGS__)
#define posix_memalign(...) fault_posix_memalign(__VA_ARGS__)
#define aligned_alloc(...) fault_aligned_alloc(__VA_ARGS__)
#define open(...) fault_open(__VA_ARGS__)
#define openat(...) fault_openat(__VA_ARGS__)
#define fopen(...) fault_fopen(__VA_ARGS__)
#define opendir(...) fault_opendir(__VA_ARGS__)
#define read(...) fault_read(__VA_ARGS__)
#define pread(...) fault_pread(__VA_ARGS__)
#define write(...) fault_write(__VA_ARGS__)
#define pwrite(...) fault_pwrite(__VA_ARGS__)
#define fsync(...) fault_fsync(__VA_ARGS__)
#define fdatasync(...) fault_fdatasync(__VA_ARGS__)
#define rename(...) fault_rename(__VA_ARGS__)
#define renameat(...) fault_renameat(__VA_ARGS__)
#define renameat2(...) fault_renameat2(__VA_ARGS__)
#define mmap(...) fault_mmap(__VA_ARGS__)
#define mlock(...) fault_mlock(__VA_ARGS__)
#define pthread_create(...) fault_pthread_create(__VA_ARGS__)
#define fallocate(...) fault_fallocate(__VA_ARGS__)
/* Not a system call: the hook offload/nvme_io.c passes each io_uring
 * completion's result through (offload/nvme_impl.h defines it as the result
 * itself when this header is not forced in). */
#define io_completion_result(...) fault_io_result(__VA_ARGS__)
/* The NVMe store's other hooks (offload/nvme_impl.h): io_uring's setup
 * (counted) and a submission refused before they are made, the O_DIRECT
 * alignment the kernel gave. */
#define io_uring_refusal(...) fault_io_uring_refusal(__VA_ARGS__)
#define io_submit_refusal(...) fault_io_submit(__VA_ARGS__)
#define io_dio_align(...) fault_dio_align(__VA_ARGS__)
/* Pads syscall's arguments to six, each passed as a long as the kernel takes
 * them; the padding beyond what the call gave is never read by the kernel. */
#define syscall(...) FAULT_SYSCALL7_(__VA_ARGS__, 0L, 0L, 0L, 0L, 0L, 0L)
#define FAULT_SYSCALL7_(nr, a, b, c, d, e, f, ...) \
    fault_syscall((long)(nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

#endif
