/* What the libFuzzer harnesses share: the input as a file (a memfd, so no
 * disk is touched and the parsers open it by path as they would a user's
 * file), and the input cut into an argv at NUL bytes. Header-only; each
 * harness includes it once. */
#ifndef FERRY_TESTS_FUZZ_UTIL_H
#define FERRY_TESTS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The input as the file at the returned path (the same memfd every call,
 * rewritten to hold exactly these bytes). */
static inline const char *fuzz_as_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("ferry-fuzz", MFD_CLOEXEC);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("writing the fuzz input to its memfd");
        abort();
    }
    return path;
}

#define FUZZ_MAX_ARGS 64

/* argv[0] = `prog`, then the input's NUL-separated pieces (at most
 * FUZZ_MAX_ARGS - 2 of them). The strings live in *copy; free it. */
static inline int fuzz_argv(const char *prog, const uint8_t *data, size_t size, char **argv, char **copy)
{
    *copy = malloc(size + 1);
    if (!*copy)
        abort();
    memcpy(*copy, data, size);
    (*copy)[size] = '\0';
    int argc = 0;
    argv[argc++] = (char *)prog;
    for (size_t at = 0; at < size && argc < FUZZ_MAX_ARGS - 1;) {
        argv[argc++] = *copy + at;
        at += strlen(*copy + at) + 1;
    }
    argv[argc] = NULL;
    return argc;
}

#endif
