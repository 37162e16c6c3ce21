/* File helpers of the tokenize layer: read a whole file, and write one
 * atomically (a temporary beside the destination, fsync, rename, fsync of the
 * directory), so a crash or a full disk never leaves a broken destination:
 * the old file, if any, stays as it was. */
#ifndef FERRY_TOKENIZE_FILEIO_H
#define FERRY_TOKENIZE_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

/* Reads all of `path` into a malloc'd buffer with a NUL after the last byte
 * (*len excludes it). `what` names the file's role in messages ("encoder.json"). */
ferry_status tok_read_file(const char *path, const char *what, char **data, size_t *len);

typedef struct tok_atomic {
    int fd;
    char *path; /* destination */
    char *tmp;  /* DIR/.NAME.tmp */
} tok_atomic;

/* Creates DIR/.NAME.tmp for `path`. On failure nothing is left behind. */
ferry_status tok_atomic_open(tok_atomic *a, const char *path);
/* Writes n bytes at the current end / at `offset`. On ENOSPC, EDQUOT or
 * EFBIG the message says the disk is full and how many bytes were asked. */
ferry_status tok_atomic_write(tok_atomic *a, const void *buf, size_t n);
ferry_status tok_atomic_pwrite(tok_atomic *a, const void *buf, size_t n, uint64_t offset);
/* fsync, rename over the destination, fsync the directory. On failure the
 * temporary is removed and the destination is untouched. */
ferry_status tok_atomic_commit(tok_atomic *a);
/* Removes the temporary; safe after a failed call, and on a zeroed struct. */
void tok_atomic_abort(tok_atomic *a);

#endif
