/* Whole-file reads and atomic writes (see fileio.h). */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

ferry_status fileio_read(const char *path, const char *what, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(FERRY_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(FERRY_ERR_IO, "%s '%s' is not a regular file", what, path);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read %s '%s'", size + 1, what, path);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            free(buf);
            close(fd);
            return err_set(FERRY_ERR_IO, "reading %s '%s': %s after %zu of %zu bytes", what, path,
                           e ? strerror(e) : "file shrank", got, size);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *data = buf;
    *len = size;
    return FERRY_OK;
}

static char *dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    char *d = strdup(dirname(copy));
    free(copy);
    return d;
}

ferry_status fileio_atomic_open(fileio_atomic *a, const char *path)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    char *copy = strdup(path);
    char *dir = dir_of(path);
    if (!copy || !dir) {
        free(copy);
        free(dir);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a path for '%s'", path);
    }
    char *base = basename(copy);
    size_t n = strlen(dir) + strlen(base) + 8;
    a->tmp = malloc(n);
    a->path = strdup(path);
    if (!a->tmp || !a->path) {
        free(copy);
        free(dir);
        fileio_atomic_abort(a);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a path for '%s'", path);
    }
    snprintf(a->tmp, n, "%s/.%s.tmp", dir, base);
    free(copy);
    free(dir);
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        ferry_status st = err_set(FERRY_ERR_IO, "cannot create '%s' (to write '%s'): %s", a->tmp, path,
                                  strerror(errno));
        fileio_atomic_abort(a);
        return st;
    }
    return FERRY_OK;
}

static ferry_status write_error(fileio_atomic *a, int e, size_t n)
{
    ferry_status st;
    if (e == ENOSPC || e == EDQUOT || e == EFBIG)
        st = err_set(FERRY_ERR_IO, "disk full writing '%s' (%s while writing %zu bytes); "
                     "free space and retry: the previous '%s' was left as it was",
                     a->path, strerror(e), n, a->path);
    else
        st = err_set(FERRY_ERR_IO, "cannot write '%s': %s", a->tmp, strerror(e));
    fileio_atomic_abort(a);
    return st;
}

ferry_status fileio_atomic_pwrite(fileio_atomic *a, const void *buf, size_t n, uint64_t offset)
{
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(a->fd, p + done, n - done, (off_t)(offset + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return write_error(a, w < 0 ? errno : ENOSPC, n);
        done += (size_t)w;
    }
    return FERRY_OK;
}

ferry_status fileio_atomic_write(fileio_atomic *a, const void *buf, size_t n)
{
    const char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(a->fd, p + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return write_error(a, w < 0 ? errno : ENOSPC, n);
        done += (size_t)w;
    }
    return FERRY_OK;
}

ferry_status fileio_atomic_commit(fileio_atomic *a)
{
    if (fsync(a->fd) != 0)
        return write_error(a, errno, 0);
    if (close(a->fd) != 0) {
        a->fd = -1;
        return write_error(a, errno, 0);
    }
    a->fd = -1;
    if (rename(a->tmp, a->path) != 0) {
        ferry_status st = err_set(FERRY_ERR_IO, "cannot rename '%s' to '%s': %s", a->tmp, a->path, strerror(errno));
        fileio_atomic_abort(a);
        return st;
    }
    /* The rename is durable only once the directory itself is synced. */
    char *dir = dir_of(a->path);
    ferry_status st = dir ? fileio_sync_dir(dir) : err_set(FERRY_ERR_OUT_OF_MEMORY, "syncing '%s': out of memory", a->path);
    if (st != FERRY_OK)
        st = err_wrap(st, "wrote '%s'", a->path);
    free(dir);
    free(a->tmp);
    a->tmp = NULL;
    fileio_atomic_abort(a);
    return st;
}

void fileio_atomic_abort(fileio_atomic *a)
{
    /* A zeroed struct (fd 0, no paths) owns nothing: never close stdin. */
    if (a->fd >= 0 && (a->tmp || a->path))
        close(a->fd);
    a->fd = -1;
    if (a->tmp)
        unlink(a->tmp);
    free(a->tmp);
    free(a->path);
    a->tmp = NULL;
    a->path = NULL;
}

ferry_status fileio_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_set(FERRY_ERR_IO, "cannot open folder '%s' to sync it: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) /* EINVAL: a file system without directory fsync */
        return err_set(FERRY_ERR_IO, "cannot sync folder '%s': %s", dir, strerror(e));
    return FERRY_OK;
}

ferry_status fileio_replace_symlink(const char *target, const char *link)
{
    char *dir = dir_of(link);
    char *copy = strdup(link);
    size_t n = (dir ? strlen(dir) : 0) + (copy ? strlen(copy) : 0) + 16;
    char *tmp = malloc(n);
    ferry_status st = FERRY_OK;
    if (!dir || !copy || !tmp) {
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "pointing '%s' at '%s': out of memory", link, target);
    } else {
        snprintf(tmp, n, "%s/.%s.tmp", dir, basename(copy));
        unlink(tmp);
        if (symlink(target, tmp) != 0 || rename(tmp, link) != 0) {
            int e = errno;
            unlink(tmp);
            st = err_set(FERRY_ERR_IO, "cannot point '%s' at '%s': %s", link, target, strerror(e));
        } else {
            st = fileio_sync_dir(dir);
        }
    }
    free(tmp);
    free(copy);
    free(dir);
    return st;
}
