/* common/fileio: what a path may name, for every kind of thing it can name.
 * - The atomic writer: a new file and a regular file are replaced whole; a
 *   link to a regular file has its target replaced and stays a link; a
 *   character device is written in place (a stand-in /dev/null node takes
 *   the bytes and stays a device; a stand-in /dev/full says the device is
 *   full); a folder, a FIFO, a link to nothing are refused at open, without
 *   blocking, and left as they were; a destination that turns into a FIFO
 *   between the open and the commit is not renamed over.
 * - Outputs written in place (the log, the trace) and inputs: the same
 *   kinds, opened without blocking, a regular file truncated only when asked.
 * - The checks of output paths before any work, mkdir -p, and the `latest`
 *   link's replacement, which refuses a folder or a file in its place.
 * Device stand-ins are made with mknod in the test's own folder (root);
 * without root, the real /dev/null and /dev/full are used, which an
 * unprivileged process cannot replace. Every FIFO case runs in a child with
 * an alarm, so a blocking open fails the test instead of hanging it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "tap.h"
#include "test_files.h"

static char dir[] = "/tmp/ferry-fileio-XXXXXX";
static char null_dev[300], full_dev[300];

static const char *in_dir(char *buf, const char *name)
{
    snprintf(buf, 300, "%s/%s", dir, name);
    return buf;
}

/* A character device node (major, minor) usable for writing, at `path` (root)
 * or else the system's own `fallback`; "" if neither can be written. */
static void make_device(char *out, const char *name, unsigned major, unsigned minor, const char *fallback)
{
    in_dir(out, name);
    if (mknod(out, S_IFCHR | 0666, makedev(major, minor)) == 0) {
        int fd = open(out, O_WRONLY);
        if (fd >= 0) {
            close(fd);
            return;
        }
        tap_diag("a device node at %s cannot be opened (%s): a folder on a nodev mount?", out, strerror(errno));
        unlink(out);
    }
    if (geteuid() != 0 && access(fallback, W_OK) == 0) {
        snprintf(out, 300, "%s", fallback); /* an unprivileged process cannot replace it */
        return;
    }
    out[0] = '\0';
}

/* The kind and device number of path (lstat), to show it is unchanged. */
static void kind_of(const char *path, char *buf, size_t cap)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        snprintf(buf, cap, "missing");
    else
        snprintf(buf, cap, "%s %u,%u", fileio_type_name(sb.st_mode), major(sb.st_rdev), minor(sb.st_rdev));
}

static void write_file(const char *path, const char *text) { test_put(path, text, strlen(text)); }

/* The whole atomic write of `text` to path: open, write, commit. */
static ferry_status save(const char *path, const char *text)
{
    fileio_atomic a;
    ferry_status st = fileio_atomic_open(&a, path);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, text, strlen(text));
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    else
        fileio_atomic_abort(&a);
    return st;
}

/* Runs fn(path) in a child with a 10 s alarm: the status it returns, or -1
 * if it was killed (blocked), the child's message in msg. */
typedef ferry_status (*path_fn)(const char *path);
static int bounded(path_fn fn, const char *path, char *msg, size_t cap)
{
    int pfd[2];
    msg[0] = '\0';
    if (pipe(pfd) != 0)
        return -2;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        alarm(10);
        ferry_status st = fn(path);
        const char *e = ferry_last_error();
        ssize_t w = write(pfd[1], e, strlen(e));
        (void)w;
        _exit((int)st);
    }
    close(pfd[1]);
    ssize_t n = read(pfd[0], msg, cap - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(pfd[0]);
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static ferry_status save_hello(const char *path) { return save(path, "hello"); }
static ferry_status open_out_append(const char *path)
{
    int fd;
    ferry_status st = fileio_open_output(path, "the log", true, &fd);
    if (st == FERRY_OK)
        close(fd);
    return st;
}
static ferry_status open_in(const char *path)
{
    int fd;
    ferry_status st = fileio_open_input(path, "the input", &fd, NULL);
    if (st == FERRY_OK)
        close(fd);
    return st;
}
static ferry_status read_whole(const char *path)
{
    char *data;
    size_t len;
    ferry_status st = fileio_read(path, "config.json", &data, &len);
    if (st == FERRY_OK)
        free(data);
    return st;
}

static void test_atomic_regular(void)
{
    char p[300], q[300], link[300], got[64];
    TAP_IS_STATUS(save(in_dir(p, "new.txt"), "one"), FERRY_OK, "a new file is written");
    tap_ok(strcmp(test_read(p, got, sizeof got), "one") == 0, "with its bytes ('%s')", got);
    TAP_IS_STATUS(save(p, "two"), FERRY_OK, "a regular file is replaced");
    tap_ok(strcmp(test_read(p, got, sizeof got), "two") == 0, "whole ('%s')", got);
    in_dir(q, ".new.txt.tmp");
    tap_ok(access(q, F_OK) != 0, "and no temporary is left");

    /* A link to a regular file: the file it names is replaced, the link stays. */
    in_dir(q, "target.txt");
    write_file(q, "old");
    if (symlink("target.txt", in_dir(link, "link.txt")) != 0)
        tap_diag("symlink: %s", strerror(errno));
    TAP_IS_STATUS(save(link, "new"), FERRY_OK, "a link to a regular file is written through");
    struct stat sb;
    tap_ok(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link is still a link");
    tap_ok(strcmp(test_read(q, got, sizeof got), "new") == 0, "its target holds the new bytes ('%s')", got);

    /* A temporary name that is a link: never written through. */
    in_dir(q, "victim.txt");
    write_file(q, "keep");
    if (symlink("victim.txt", in_dir(link, ".dest.txt.tmp")) != 0)
        tap_diag("symlink: %s", strerror(errno));
    TAP_IS_STATUS(save(in_dir(p, "dest.txt"), "fresh"), FERRY_OK, "a link at the temporary's name does not stop a save");
    tap_ok(strcmp(test_read(q, got, sizeof got), "keep") == 0, "and the file it named is untouched ('%s')", got);
}

/* Every kind of thing that is not a regular file, for the atomic writer. */
static void test_atomic_others(void)
{
    char p[300], after[64], msg[1024];
    /* A folder. */
    ferry_status st = save(in_dir(p, "adir"), "x");
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a folder"), "a folder is refused: %s",
           ferry_last_error());
    kind_of(p, after, sizeof after);
    tap_ok(strncmp(after, "a folder", 8) == 0, "and stays a folder (%s)", after);
    /* A FIFO: refused without waiting for a reader. */
    int rc = bounded(save_hello, in_dir(p, "fifo"), msg, sizeof msg);
    tap_ok(rc == FERRY_ERR_IO && strstr(msg, "FIFO"), "a FIFO is refused at once (status %d): %s", rc, msg);
    kind_of(p, after, sizeof after);
    tap_ok(strncmp(after, "a FIFO", 6) == 0, "and stays a FIFO (%s)", after);
    /* A link to nothing. */
    st = save(in_dir(p, "dangling"), "x");
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "symbolic link") &&
               strstr(ferry_last_error(), "nowhere/at/all"),
           "a link to nothing is refused, naming its target: %s", ferry_last_error());
    char target[64] = "";
    ssize_t n = readlink(p, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    tap_ok(strcmp(target, "nowhere/at/all") == 0 && access(in_dir(msg, "nowhere"), F_OK) != 0,
           "and stays that link, its target not created (%s)", target);
    /* A destination that becomes a FIFO after the open: not renamed over. */
    write_file(in_dir(p, "swapped"), "old");
    fileio_atomic a;
    st = fileio_atomic_open(&a, p);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, "new", 3);
    unlink(p);
    if (mkfifo(p, 0600) != 0)
        tap_diag("mkfifo: %s", strerror(errno));
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    else
        fileio_atomic_abort(&a);
    kind_of(p, after, sizeof after);
    tap_ok(st == FERRY_ERR_IO && strncmp(after, "a FIFO", 6) == 0 && strstr(ferry_last_error(), "became"),
           "a destination that became a FIFO is not replaced (%s): %s", after, ferry_last_error());
    in_dir(p, ".swapped.tmp");
    tap_ok(access(p, F_OK) != 0, "and the temporary is removed");
}

/* Character devices: written in place, never replaced. */
static void test_atomic_devices(void)
{
    char before[64], after[64];
    if (!null_dev[0]) {
        tap_diag("no writable character device could be made or used: the device cases are not run");
        return;
    }
    kind_of(null_dev, before, sizeof before);
    TAP_IS_STATUS(save(null_dev, "to the bin"), FERRY_OK, "a null device takes a save");
    kind_of(null_dev, after, sizeof after);
    tap_ok(strcmp(before, after) == 0 && strstr(after, "character device 1,3"),
           "and is still the same character device (%s, was %s)", after, before);
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, "null");
    tap_ok(access(tmp, F_OK) != 0, "no temporary was made beside it");
    /* In place: pwrite too (the checkpoint writer rewrites its header). */
    fileio_atomic a;
    ferry_status st = fileio_atomic_open(&a, null_dev);
    if (st == FERRY_OK)
        st = fileio_atomic_pwrite(&a, "abc", 3, 0);
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    else
        fileio_atomic_abort(&a);
    TAP_IS_STATUS(st, FERRY_OK, "a null device takes a write at an offset");
    if (full_dev[0]) {
        kind_of(full_dev, before, sizeof before);
        st = save(full_dev, "no room");
        kind_of(full_dev, after, sizeof after);
        tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "No space left on device") &&
                   strstr(ferry_last_error(), full_dev),
               "a full device fails the save, saying so: %s", ferry_last_error());
        tap_ok(strcmp(before, after) == 0 && strstr(after, "character device 1,7"),
               "and is still the same character device (%s)", after);
    }
    /* A link to a device: written in place through it, the link stays. */
    char link[300];
    if (symlink(null_dev, in_dir(link, "to-null")) == 0) {
        TAP_IS_STATUS(save(link, "x"), FERRY_OK, "a link to a null device takes a save");
        kind_of(link, after, sizeof after);
        tap_ok(strncmp(after, "a symbolic link", 15) == 0, "and stays a link (%s)", after);
        kind_of(null_dev, after, sizeof after);
        tap_ok(strstr(after, "character device 1,3") != NULL, "to a device still (%s)", after);
    }
}

/* Outputs written in place (log, trace) and inputs, for each kind. */
static void test_in_place(void)
{
    char p[300], got[64], msg[1024], after[64];
    int fd = -1;
    /* A regular file: appended to, or truncated. */
    write_file(in_dir(p, "log"), "first\n");
    ferry_status st = fileio_open_output(p, "the log", true, &fd);
    if (st == FERRY_OK) {
        ssize_t w = write(fd, "second\n", 7);
        (void)w;
        close(fd);
    }
    tap_ok(st == FERRY_OK && strcmp(test_read(p, got, sizeof got), "first\nsecond\n") == 0,
           "a log is appended to ('%s')", got);
    st = fileio_open_output(p, "the trace", false, &fd);
    if (st == FERRY_OK)
        close(fd);
    tap_ok(st == FERRY_OK && strcmp(test_read(p, got, sizeof got), "") == 0, "a trace is truncated");
    /* A FIFO: neither opened to write (no reader) nor to read (no writer). */
    in_dir(p, "fifo");
    int rc = bounded(open_out_append, p, msg, sizeof msg);
    tap_ok(rc == FERRY_ERR_IO && strstr(msg, "FIFO"), "an output FIFO is refused at once (status %d): %s", rc, msg);
    rc = bounded(open_in, p, msg, sizeof msg);
    tap_ok(rc == FERRY_ERR_IO && strstr(msg, "FIFO"), "an input FIFO is refused at once (status %d): %s", rc, msg);
    rc = bounded(read_whole, p, msg, sizeof msg);
    tap_ok(rc == FERRY_ERR_IO && strstr(msg, "FIFO") && strstr(msg, "config.json"),
           "a FIFO read whole is refused at once, naming its role (status %d): %s", rc, msg);
    /* A folder, a link to nothing. */
    st = fileio_open_output(in_dir(p, "adir"), "--log", true, &fd);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "--log") && strstr(ferry_last_error(), "is a folder"),
           "an output folder is refused: %s", ferry_last_error());
    st = fileio_open_output(in_dir(p, "dangling"), "--trace", false, &fd);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "does not exist") && access(in_dir(msg, "nowhere"), F_OK),
           "an output link to nothing is refused, its target not created: %s", ferry_last_error());
    st = fileio_open_input(in_dir(p, "adir"), "the trace", &fd, NULL);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a folder"), "an input folder is refused: %s",
           ferry_last_error());
    if (null_dev[0]) {
        st = fileio_open_output(null_dev, "the log", false, &fd);
        if (st == FERRY_OK)
            close(fd);
        kind_of(null_dev, after, sizeof after);
        tap_ok(st == FERRY_OK && strstr(after, "character device 1,3"), "a null device is an output, kept (%s)",
               after);
        st = fileio_open_input(null_dev, "the trace", &fd, NULL);
        tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "character device"),
               "a device is not an input: %s", ferry_last_error());
    }
}

static void test_checks_and_dirs(void)
{
    char p[300], q[300];
    write_file(in_dir(q, "plain"), "x");
    TAP_IS_STATUS(fileio_check_output(in_dir(p, "a/b/c/out.log"), "--log"), FERRY_OK,
                  "an output under missing folders is fine (they are made)");
    ferry_status st = fileio_check_output(in_dir(p, "plain/out.log"), "--log");
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a regular file, not a folder"),
           "an output under a file is refused: %s", ferry_last_error());
    st = fileio_check_output(in_dir(p, "fifo"), "--trace");
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "--trace") && strstr(ferry_last_error(), "FIFO"),
           "an output FIFO is refused by the check: %s", ferry_last_error());
    st = fileio_check_output_dir(in_dir(p, "plain"), "--checkpoint-dir");
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a regular file; give a folder"),
           "a folder output that is a file is refused: %s", ferry_last_error());
    st = fileio_check_output_dir(in_dir(p, "dangling"), "--checkpoint-dir");
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "symbolic link"),
           "a folder output that is a link to nothing is refused: %s", ferry_last_error());
    if (null_dev[0]) {
        TAP_IS_STATUS(fileio_check_output(null_dev, "--log"), FERRY_OK, "a device passes the output check");
        st = fileio_check_output_dir(null_dev, "--checkpoint-dir");
        tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "character device; give a folder"),
               "a device is not a folder output: %s", ferry_last_error());
    }
    struct stat sb;
    TAP_IS_STATUS(fileio_make_dirs(in_dir(p, "x/y/z/")), FERRY_OK, "mkdir -p of x/y/z/");
    tap_ok(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode), "made");
    TAP_IS_STATUS(fileio_make_parents(in_dir(p, "m/n/file")), FERRY_OK, "the parents of m/n/file");
    tap_ok(stat(in_dir(q, "m/n"), &sb) == 0 && S_ISDIR(sb.st_mode) && access(p, F_OK) != 0,
           "made, and not the file itself");
    st = fileio_make_dirs(in_dir(p, "plain/sub"));
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a regular file, not a folder"),
           "mkdir -p through a file is refused: %s", ferry_last_error());
    /* latest: a link is replaced; a folder or a file there is not. */
    mkdir(in_dir(p, "run"), 0755);
    TAP_IS_STATUS(fileio_replace_symlink("step_1", in_dir(p, "run/latest")), FERRY_OK, "latest made");
    TAP_IS_STATUS(fileio_replace_symlink("step_2", p), FERRY_OK, "latest moved");
    char target[32] = "";
    ssize_t n = readlink(p, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    tap_ok(strcmp(target, "step_2") == 0, "to step_2 (%s)", target);
    unlink(p);
    mkdir(p, 0755);
    st = fileio_replace_symlink("step_3", p);
    tap_ok(st == FERRY_ERR_IO && strstr(ferry_last_error(), "is a folder, not a symbolic link") &&
               lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode),
           "a folder named latest is refused and left: %s", ferry_last_error());
}

int main(void)
{
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary folder");
    make_device(null_dev, "null", 1, 3, "/dev/null");
    make_device(full_dev, "full", 1, 7, "/dev/full");
    tap_diag("devices: '%s' and '%s'", null_dev, full_dev);
    char p[300];
    if (mkfifo(in_dir(p, "fifo"), 0600) != 0)
        tap_diag("mkfifo: %s", strerror(errno));
    if (symlink("nowhere/at/all", in_dir(p, "dangling")) != 0)
        tap_diag("symlink: %s", strerror(errno));
    mkdir(in_dir(p, "adir"), 0755);
    test_atomic_regular();
    test_atomic_others();
    test_atomic_devices();
    test_in_place();
    test_checks_and_dirs();
    test_dir_remove(dir);
    return tap_done();
}
