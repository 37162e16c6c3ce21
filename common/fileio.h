/* The one way ferry saves a file: read a whole file, and write one
 * atomically (a temporary beside the destination, fsync, rename, fsync of the
 * directory), so a crash or a full disk never leaves a broken destination:
 * the old file, if any, stays as it was. Every file the project writes (engine
 * checkpoints, safetensors, config.json, token shards) goes through here; the
 * run folder's `latest` link through fileio_replace_symlink. Owns no state. */
#ifndef FERRY_COMMON_FILEIO_H
#define FERRY_COMMON_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

/* Reads all of `path` into a malloc'd buffer with a NUL after the last byte
 * (*len excludes it). `what` names the file's role in messages ("encoder.json"). */
ferry_status fileio_read(const char *path, const char *what, char **data, size_t *len);

typedef struct fileio_atomic {
    int fd;
    char *path; /* destination */
    char *tmp;  /* DIR/.NAME.tmp */
} fileio_atomic;

/* Creates DIR/.NAME.tmp for `path`. On failure nothing is left behind. */
ferry_status fileio_atomic_open(fileio_atomic *a, const char *path);
/* Writes n bytes at the current end / at `offset`. On ENOSPC, EDQUOT or
 * EFBIG the message says the disk is full and how many bytes were asked. */
ferry_status fileio_atomic_write(fileio_atomic *a, const void *buf, size_t n);
ferry_status fileio_atomic_pwrite(fileio_atomic *a, const void *buf, size_t n, uint64_t offset);
/* fsync, rename over the destination, fsync the directory. On failure the
 * temporary is removed and the destination is untouched. */
ferry_status fileio_atomic_commit(fileio_atomic *a);
/* Removes the temporary; safe after a failed call, and on a zeroed struct. */
void fileio_atomic_abort(fileio_atomic *a);

/* fsync of a directory, so the renames inside it survive a crash. */
ferry_status fileio_sync_dir(const char *dir);
/* Points the symbolic link `link` at `target` atomically (a temporary link
 * beside it, renamed over it, the directory synced): at every moment `link`
 * names either the old target or the new one. */
ferry_status fileio_replace_symlink(const char *target, const char *link);

#endif
