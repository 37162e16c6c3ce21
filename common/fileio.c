/* Whole-file reads, checked inputs and outputs, and atomic writes (see
 * fileio.h). */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

/* ---- what a path names ---- */

const char *fileio_type_name(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a folder";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "neither a file nor a folder";
}

/* "WHAT 'PATH'" or "'PATH'" when what is NULL or empty, for messages. */
static const char *named(char *buf, size_t cap, const char *what, const char *path)
{
    if (what && *what)
        snprintf(buf, cap, "%s '%s'", what, path);
    else
        snprintf(buf, cap, "'%s'", path);
    return buf;
}

/* A symbolic link whose target does not exist: says where it points. */
static ferry_status dangling(const char *what, const char *path)
{
    char target[PATH_MAX], name[PATH_MAX + 64];
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    return err_set(FERRY_ERR_IO, "%s is a symbolic link to '%s', which does not exist; give the file itself, or "
                                 "create what the link names first",
                   named(name, sizeof name, what, path), target);
}

/* lstat and stat of an existing path: 0, or FERRY_ERR_IO for a link to
 * nothing or an error other than ENOENT; *exists says whether it is there. */
static ferry_status look(const char *path, const char *what, struct stat *sb, bool *exists)
{
    struct stat lsb;
    char name[PATH_MAX + 64];
    *exists = false;
    if (lstat(path, &lsb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return FERRY_OK;
        return err_set(FERRY_ERR_IO, "%s: %s", named(name, sizeof name, what, path), strerror(errno));
    }
    if (stat(path, sb) != 0) {
        if (S_ISLNK(lsb.st_mode) && errno == ENOENT)
            return dangling(what, path);
        return err_set(FERRY_ERR_IO, "%s: %s", named(name, sizeof name, what, path), strerror(errno));
    }
    *exists = true;
    return FERRY_OK;
}

static ferry_status refuse_output(const char *what, const char *path, mode_t mode)
{
    char name[PATH_MAX + 64];
    if (S_ISDIR(mode))
        return err_set(FERRY_ERR_IO, "%s is a folder; give a file name", named(name, sizeof name, what, path));
    return err_set(FERRY_ERR_IO, "%s is %s, which ferry does not write to (it could block, or keep only part of "
                                 "what is written); give a regular file, or a character device such as /dev/null",
                   named(name, sizeof name, what, path), fileio_type_name(mode));
}

ferry_status fileio_open_input(const char *path, const char *what, int *fd, struct stat *sb)
{
    struct stat own;
    char name[PATH_MAX + 64];
    if (!sb)
        sb = &own;
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO to read would wait for a writer forever. */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f < 0)
        return err_set(FERRY_ERR_IO, "cannot open %s: %s", named(name, sizeof name, what, path), strerror(errno));
    if (fstat(f, sb) != 0) {
        int e = errno;
        close(f);
        return err_set(FERRY_ERR_IO, "cannot read %s: %s", named(name, sizeof name, what, path), strerror(e));
    }
    if (!S_ISREG(sb->st_mode)) {
        close(f);
        return err_set(FERRY_ERR_IO, "%s is %s, not a regular file; give the file itself",
                       named(name, sizeof name, what, path), fileio_type_name(sb->st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return err_set(FERRY_ERR_IO, "cannot read %s: %s", named(name, sizeof name, what, path), strerror(e));
    }
    *fd = f;
    return FERRY_OK;
}

ferry_status fileio_read(const char *path, const char *what, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd;
    struct stat sb;
    ferry_status st = fileio_open_input(path, what, &fd, &sb);
    if (st != FERRY_OK)
        return st;
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

/* ---- outputs: checked, folders made, opened ---- */

/* path without trailing slashes (except "/"), into out. */
static ferry_status trimmed(char *out, size_t cap, const char *path)
{
    int n = snprintf(out, cap, "%s", path);
    if (n < 0 || (size_t)n >= cap)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the path '%s' is too long", path);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    return FERRY_OK;
}

/* The folder `path` would be made in, with every missing folder between: the
 * nearest one that exists must be a folder and writable. */
static ferry_status check_ancestor(const char *path, const char *what)
{
    char buf[PATH_MAX], name[PATH_MAX + 64];
    ferry_status st = trimmed(buf, sizeof buf, path);
    if (st != FERRY_OK)
        return st;
    for (;;) {
        char *slash = strrchr(buf, '/');
        const char *parent = buf;
        if (!slash)
            parent = ".";
        else if (slash == buf)
            buf[1] = '\0';
        else
            *slash = '\0';
        struct stat sb;
        bool exists;
        if ((st = look(parent, NULL, &sb, &exists)) != FERRY_OK)
            return err_wrap(st, "%s", named(name, sizeof name, what, path));
        if (!exists) {
            if (strcmp(parent, "/") == 0 || strcmp(parent, ".") == 0)
                return err_set(FERRY_ERR_IO, "%s: the folder '%s' it would go in cannot be found",
                               named(name, sizeof name, what, path), parent);
            continue;
        }
        if (!S_ISDIR(sb.st_mode))
            return err_set(FERRY_ERR_IO, "%s: '%s' is %s, not a folder", named(name, sizeof name, what, path), parent,
                           fileio_type_name(sb.st_mode));
        if (access(parent, W_OK | X_OK) != 0)
            return err_set(FERRY_ERR_IO, "%s cannot be created: the folder '%s' is not writable (%s)",
                           named(name, sizeof name, what, path), parent, strerror(errno));
        return FERRY_OK;
    }
}

ferry_status fileio_check_output(const char *path, const char *what)
{
    struct stat sb;
    bool exists;
    char name[PATH_MAX + 64];
    ferry_status st = look(path, what, &sb, &exists);
    if (st != FERRY_OK)
        return st;
    if (!exists)
        return check_ancestor(path, what);
    if (!S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode))
        return refuse_output(what, path, sb.st_mode);
    if (access(path, W_OK) != 0)
        return err_set(FERRY_ERR_IO, "%s cannot be written: %s", named(name, sizeof name, what, path),
                       strerror(errno));
    return FERRY_OK;
}

ferry_status fileio_check_output_dir(const char *path, const char *what)
{
    struct stat sb;
    bool exists;
    char name[PATH_MAX + 64];
    ferry_status st = look(path, what, &sb, &exists);
    if (st != FERRY_OK)
        return st;
    if (!exists)
        return check_ancestor(path, what);
    if (!S_ISDIR(sb.st_mode))
        return err_set(FERRY_ERR_IO, "%s is %s; give a folder (it is created if missing)",
                       named(name, sizeof name, what, path), fileio_type_name(sb.st_mode));
    if (access(path, W_OK | X_OK) != 0)
        return err_set(FERRY_ERR_IO, "%s cannot be written: %s", named(name, sizeof name, what, path),
                       strerror(errno));
    return FERRY_OK;
}

/* Makes one folder `dir` on the way to `path`; one that is there already
 * (or a link to one) is fine. */
static ferry_status make_one(const char *dir, const char *path)
{
    if (mkdir(dir, 0755) == 0)
        return FERRY_OK;
    int e = errno;
    struct stat sb;
    bool exists;
    if (e != EEXIST)
        return err_set(FERRY_ERR_IO, "cannot create folder '%s': %s", dir, strerror(e));
    ferry_status st = look(dir, NULL, &sb, &exists);
    if (st != FERRY_OK)
        return err_wrap(st, "cannot create folder '%s'", path);
    if (!exists || !S_ISDIR(sb.st_mode))
        return err_set(FERRY_ERR_IO, "cannot create folder '%s': '%s' is %s, not a folder", path, dir,
                       exists ? fileio_type_name(sb.st_mode) : "in the way");
    return FERRY_OK;
}

ferry_status fileio_make_dirs(const char *path)
{
    char buf[PATH_MAX];
    ferry_status st = trimmed(buf, sizeof buf, path);
    for (char *p = buf + 1; st == FERRY_OK && *p; p++) {
        if (*p != '/' || p[-1] == '/')
            continue;
        *p = '\0';
        st = make_one(buf, path);
        *p = '/';
    }
    return st == FERRY_OK ? make_one(buf, path) : st;
}

ferry_status fileio_make_parents(const char *path)
{
    char buf[PATH_MAX];
    ferry_status st = trimmed(buf, sizeof buf, path);
    char *slash = st == FERRY_OK ? strrchr(buf, '/') : NULL;
    if (!slash || slash == buf)
        return st; /* in "." or "/" */
    *slash = '\0';
    return fileio_make_dirs(buf);
}

/* Clears O_NONBLOCK, so the writes and reads that follow wait as usual. */
static int make_blocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ? errno : 0;
}

ferry_status fileio_open_output(const char *path, const char *what, bool append, int *fd)
{
    struct stat sb;
    bool exists;
    char name[PATH_MAX + 64];
    *fd = -1;
    ferry_status st = look(path, what, &sb, &exists);
    if (st != FERRY_OK)
        return st;
    if (exists && !S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode))
        return refuse_output(what, path, sb.st_mode);
    /* Non-blocking: whatever the path has become since the check, the open
     * does not wait (a FIFO without a reader is ENXIO), and fstat decides. */
    int f = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : 0), 0644);
    if (f < 0)
        return err_set(FERRY_ERR_IO, "cannot open %s to write: %s", named(name, sizeof name, what, path),
                       strerror(errno));
    int e = fstat(f, &sb) != 0 ? errno : 0;
    if (!e && !S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode)) {
        close(f);
        return refuse_output(what, path, sb.st_mode);
    }
    if (!e && S_ISREG(sb.st_mode) && !append && ftruncate(f, 0) != 0)
        e = errno;
    if (!e)
        e = make_blocking(f);
    if (e) {
        close(f);
        return err_set(FERRY_ERR_IO, "cannot write %s: %s", named(name, sizeof name, what, path), strerror(e));
    }
    *fd = f;
    return FERRY_OK;
}

/* ---- atomic writes ---- */

static char *dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return NULL;
    char *d = strdup(dirname(copy));
    free(copy);
    return d;
}

/* A character device is written where it is: no temporary, no rename. */
static ferry_status open_direct(fileio_atomic *a, const char *path)
{
    a->direct = 1;
    if (!(a->path = strdup(path)))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a path for '%s'", path);
    a->fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    int e = a->fd < 0 ? errno : fstat(a->fd, &sb) != 0 ? errno : 0;
    ferry_status st = FERRY_OK;
    if (e)
        st = err_set(FERRY_ERR_IO, "cannot open '%s' to write: %s", path, strerror(e));
    else if (!S_ISCHR(sb.st_mode))
        st = refuse_output(NULL, path, sb.st_mode);
    else if ((e = make_blocking(a->fd)) != 0)
        st = err_set(FERRY_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    if (st != FERRY_OK)
        fileio_atomic_abort(a);
    return st;
}

ferry_status fileio_atomic_open(fileio_atomic *a, const char *path)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    struct stat lsb, sb;
    bool exists;
    ferry_status st = look(path, NULL, &sb, &exists);
    if (st != FERRY_OK)
        return st;
    char *resolved = NULL;
    if (exists) {
        if (S_ISCHR(sb.st_mode))
            return open_direct(a, path);
        if (!S_ISREG(sb.st_mode))
            return refuse_output(NULL, path, sb.st_mode);
        /* A link to a regular file: the file it names is replaced, and the
         * link stays a link. */
        if (lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode) && !(resolved = realpath(path, NULL)))
            return err_set(FERRY_ERR_IO, "cannot follow the symbolic link '%s': %s", path, strerror(errno));
    }
    a->replaces = exists;
    const char *dest = resolved ? resolved : path;
    char *copy = strdup(dest);
    char *dir = dir_of(dest);
    a->path = strdup(dest);
    free(resolved);
    if (!copy || !dir || !a->path) {
        free(copy);
        free(dir);
        fileio_atomic_abort(a);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a path for '%s'", path);
    }
    char *base = basename(copy);
    size_t n = strlen(dir) + strlen(base) + 8;
    a->tmp = malloc(n);
    if (!a->tmp) {
        free(copy);
        free(dir);
        fileio_atomic_abort(a);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a path for '%s'", path);
    }
    snprintf(a->tmp, n, "%s/.%s.tmp", dir, base);
    free(copy);
    free(dir);
    /* A temporary a killed writer left is ours to replace; O_EXCL and
     * O_NOFOLLOW make sure that what is written is a new file, never what a
     * link of that name points at. */
    unlink(a->tmp);
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        ferry_status e = err_set(FERRY_ERR_IO, "cannot create '%s' (to write '%s'): %s", a->tmp, a->path,
                                 strerror(errno));
        free(a->tmp); /* not ours: never unlinked by the abort */
        a->tmp = NULL;
        fileio_atomic_abort(a);
        return e;
    }
    return FERRY_OK;
}

static ferry_status write_error(fileio_atomic *a, int e, size_t n)
{
    ferry_status st;
    if (a->direct)
        st = err_set(FERRY_ERR_IO, "cannot write %zu bytes to the device '%s': %s", n, a->path, strerror(e));
    else if (e == ENOSPC || e == EDQUOT || e == EFBIG)
        st = err_set(FERRY_ERR_IO, "disk full writing '%s' (%s while writing %zu bytes); free space and retry: %s%s%s",
                     a->path, strerror(e), n, a->replaces ? "the previous '" : "nothing was written there (it did not "
                     "exist before)", a->replaces ? a->path : "", a->replaces ? "' was left as it was" : "");
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

/* A device: its own fsync where it has one (/dev/null and terminals have
 * none: EINVAL), then close. */
static ferry_status commit_direct(fileio_atomic *a)
{
    int e = 0;
    if (fsync(a->fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP)
        e = errno;
    if (close(a->fd) != 0 && !e && errno != EINTR)
        e = errno;
    a->fd = -1;
    ferry_status st = e ? err_set(FERRY_ERR_IO, "cannot write the device '%s': %s", a->path, strerror(e)) : FERRY_OK;
    fileio_atomic_abort(a);
    return st;
}

ferry_status fileio_atomic_commit(fileio_atomic *a)
{
    if (a->direct)
        return commit_direct(a);
    if (fsync(a->fd) != 0)
        return write_error(a, errno, 0);
    if (close(a->fd) != 0) {
        a->fd = -1;
        return write_error(a, errno, 0);
    }
    a->fd = -1;
    /* Checked again at the last moment: a rename replaces whatever has the
     * name, and only a regular file may be replaced. */
    struct stat sb;
    if (lstat(a->path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        ferry_status st = err_set(FERRY_ERR_IO, "'%s' became %s while it was written; it was left as it is, and "
                                                "nothing was saved",
                                  a->path, fileio_type_name(sb.st_mode));
        fileio_atomic_abort(a);
        return st;
    }
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
    a->direct = 0;
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
    struct stat sb;
    if (lstat(link, &sb) == 0 && !S_ISLNK(sb.st_mode))
        return err_set(FERRY_ERR_IO, "cannot point '%s' at '%s': '%s' is %s, not a symbolic link; move it away "
                                     "(it is left as it is)",
                       link, target, link, fileio_type_name(sb.st_mode));
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

/* ---- stdout at exit ---- */

static const char *stdout_program;
static bool stdout_quiet; /* the program has said why stdout failed */
static int stdout_errno;  /* the first failed write's errno, when noted */

void fileio_note_stdout_error(void)
{
    if (!stdout_errno)
        stdout_errno = errno ? errno : EIO;
}

static void check_stdout(void)
{
    bool bad = ferror(stdout) != 0;
    int e = 0;
    errno = 0;
    if (fflush(stdout) != 0) {
        bad = true;
        e = errno;
    }
    /* EBADF with nothing written: stdout was closed by the caller (>&-). */
    if (fclose(stdout) != 0 && (bad || errno != EBADF)) {
        if (!e)
            e = errno;
        bad = true;
    }
    if (!e)
        e = stdout_errno;
    if (!bad && !e)
        return;
    if (!stdout_quiet)
        fprintf(stderr, "%s: writing to stdout failed: %s; the output is incomplete\n", stdout_program,
                e ? strerror(e) : "a write error");
    _exit(1);
}

void fileio_check_stdout_at_exit(const char *program)
{
    if (!program) {
        stdout_quiet = true;
        return;
    }
    if (!stdout_program)
        atexit(check_stdout);
    stdout_program = program;
}
