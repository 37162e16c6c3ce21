/* The files a test keeps in its temporary folder: the folder made from the
 * test's own mkdtemp template, the path of a name in it (several at once),
 * a text written whole, a file's first bytes read back as a string, a
 * whole file read into memory, and the folder removed with all it holds at the end. The folder's name and
 * what goes in it stay each test's own. Header-only. */
#ifndef FERRY_TESTS_TEST_FILES_H
#define FERRY_TESTS_TEST_FILES_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

/* Makes the folder of dir, a mkdtemp template, and says where it is; the
 * test is skipped (exit 77) where no folder can be made. */
static inline void test_dir_make(char *dir)
{
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary directory");
    tap_diag("working in %s", dir);
}

/* Removes dir and everything in it (rm -rf); says so where it cannot. */
static inline void test_dir_remove(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
}

/* dir/name, in one of 8 buffers used in turn: the 8 latest stay valid. */
static inline const char *test_path(const char *dir, const char *name)
{
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Writes the n bytes of text to path, replacing it; whether all of it was
 * written and closed. */
static inline bool test_put(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* The first cap - 1 bytes of path into buf, NUL-terminated ("" when it
 * cannot be read); returns buf. */
static inline const char *test_read(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return buf;
}

/* The whole of path in a malloc'd buffer (one byte more than *size, so it
 * may be ended), *size its bytes; NULL and *size -1 where it cannot be
 * read whole. */
static inline unsigned char *test_slurp(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b = NULL;
    *size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc((size_t)*size + 1)) && fread(b, 1, (size_t)*size, f) != (size_t)*size) {
        free(b);
        b = NULL;
    }
    if (!b)
        *size = -1;
    if (f)
        fclose(f);
    return b;
}

#endif
