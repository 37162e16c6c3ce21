/* The one way ferry opens a path a person named, and the one way it saves a
 * file: read a whole file; write one atomically (a temporary beside the
 * destination, fsync, rename, fsync of the directory), so a crash or a full
 * disk never leaves a broken destination: the old file, if any, stays as it
 * was. Every file the project writes (engine checkpoints, safetensors,
 * config.json, token shards, memprof's picture) goes through here; the run
 * folder's `latest` link through fileio_replace_symlink; the log and the
 * memory trace through fileio_open_output.
 *
 * What a path may name: an input is a regular file (or a link to one); an
 * output is a regular file, a link to one, or a character device (/dev/null,
 * /dev/full, a terminal), which is written in place. A folder, a FIFO, a
 * socket, a block device or a link to nothing is refused with its type named,
 * before anything is written; nothing here ever opens a path in a way that
 * can block (a FIFO without a writer or a reader) or renames over anything
 * but a regular file. Owns no state. */
#ifndef FERRY_COMMON_FILEIO_H
#define FERRY_COMMON_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "ferry.h"

/* Reads all of `path` into a malloc'd buffer with a NUL after the last byte
 * (*len excludes it). `what` names the file's role in messages ("encoder.json"). */
ferry_status fileio_read(const char *path, const char *what, char **data, size_t *len);

/* "a regular file", "a folder", "a character device", "a block device",
 * "a FIFO (named pipe)", "a socket", "a symbolic link"; never NULL. */
const char *fileio_type_name(mode_t mode);

/* Opens `path` to read without blocking (a FIFO would wait for a writer
 * forever) and keeps it only if it is a regular file; anything else is
 * FERRY_ERR_IO naming `what`, the path and its type. On success *fd is a
 * blocking descriptor (close it) and *sb (may be NULL) its fstat. */
ferry_status fileio_open_input(const char *path, const char *what, int *fd, struct stat *sb);

/* Checks an output file before any work, creating nothing: a regular file,
 * a link to one, or a character device that can be written; or missing, when
 * the nearest folder above it that exists is a writable folder (the folders
 * missing between are made by fileio_make_parents). Anything else is
 * FERRY_ERR_IO naming `what` ("--log"), the path, what it is and what to do. */
ferry_status fileio_check_output(const char *path, const char *what);
/* The same for an output folder: a writable folder, or missing under a
 * writable folder. */
ferry_status fileio_check_output_dir(const char *path, const char *what);
/* mkdir -p of `path` itself (fileio_make_dirs) or of the folders above it
 * (fileio_make_parents), mode 0755; an existing folder is fine, a file or
 * a link to nothing in the way is FERRY_ERR_IO naming it. */
ferry_status fileio_make_dirs(const char *path);
ferry_status fileio_make_parents(const char *path);

/* Opens an output for writing in place (not atomically; the log, the memory
 * trace): a regular file, created 0644 if missing, truncated unless
 * `append`; or a character device. Refuses what fileio_check_output
 * refuses, without blocking, and never truncates anything but a regular
 * file. *fd is a blocking descriptor. */
ferry_status fileio_open_output(const char *path, const char *what, bool append, int *fd);

typedef struct fileio_atomic {
    int fd;
    char *path; /* destination: the path given, or the regular file a link there names */
    char *tmp;  /* DIR/.NAME.tmp; NULL when `direct` */
    int direct; /* 1: the path is a character device, written in place (no temporary, no rename) */
    int replaces; /* 1: a file was at the path when opened (a failed write leaves it as it was) */
} fileio_atomic;

/* Creates DIR/.NAME.tmp for `path`; for a symbolic link to a regular file,
 * beside the file it names, which the commit replaces (the link stays). A
 * character device is opened to be written directly. Anything else
 * (a folder, a FIFO, a socket, a block device, a link to nothing) is
 * FERRY_ERR_IO naming its type. On failure nothing is left behind. */
ferry_status fileio_atomic_open(fileio_atomic *a, const char *path);
/* Writes n bytes at the current end / at `offset`. On ENOSPC, EDQUOT or
 * EFBIG the message says the disk is full and how many bytes were asked. */
ferry_status fileio_atomic_write(fileio_atomic *a, const void *buf, size_t n);
ferry_status fileio_atomic_pwrite(fileio_atomic *a, const void *buf, size_t n, uint64_t offset);
/* fsync, rename over the destination, fsync the directory (a device: its
 * fsync, where it has one, and close). The destination is checked again just
 * before the rename: if it has become anything but a regular file, nothing is
 * renamed. On failure the temporary is removed and the destination is
 * untouched. */
ferry_status fileio_atomic_commit(fileio_atomic *a);
/* Removes the temporary; safe after a failed call, and on a zeroed struct. */
void fileio_atomic_abort(fileio_atomic *a);

/* fsync of a directory, so the renames inside it survive a crash. */
ferry_status fileio_sync_dir(const char *dir);
/* Points the symbolic link `link` at `target` atomically (a temporary link
 * beside it, renamed over it, the directory synced): at every moment `link`
 * names either the old target or the new one. `link` must be missing or a
 * symbolic link: anything else there (a folder, a file) is FERRY_ERR_IO
 * naming it, and is left as it is. */
ferry_status fileio_replace_symlink(const char *target, const char *link);

/* Registers, once per process, a check at exit that everything written to
 * stdout reached it: if stdout had a write error, or flushing or closing it
 * fails (a full disk, /dev/full), says so on stderr ("PROGRAM: writing to
 * stdout failed: REASON; the output is incomplete") and exits 1 instead of
 * the status the program returned. `program` must outlive the process.
 * Called again with NULL (the program has said why stdout failed), the
 * check still exits 1 but prints nothing. */
void fileio_check_stdout_at_exit(const char *program);
/* Keeps errno as the reason stdout failed, for that check: call it right
 * after a write to stdout that failed. A write larger than stdio's buffer
 * fails at once and leaves nothing for the check's flush to fail on, so the
 * reason would otherwise be lost. */
void fileio_note_stdout_error(void);

#endif
