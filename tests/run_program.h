/* A program of the build run by a test through the shell, with stdout and
 * stderr captured in files of the test's folder and read back (their first
 * 64 KiB and 4 KiB, stderr without its last newlines), and its exit status
 * (-1 when it did not exit: a signal); for the tests that check a program's
 * words and exit status (memprof's), with the start they share: the
 * program from the command line and the folder made. Header-only. */
#ifndef FERRY_TESTS_RUN_PROGRAM_H
#define FERRY_TESTS_RUN_PROGRAM_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tap.h"
#include "test_files.h"

typedef struct program_run {
    int status;
    char out[65536];
    char err[4096];
} program_run;

/* The first cap - 1 bytes of a file, NUL-terminated ("" when unreadable). */
static inline void program_slurp(const char *path, char *buf, size_t cap) { test_read(path, buf, cap); }

/* The program under test, argv[1], with the folder dir (a mkdtemp
 * template) made; the test is skipped (exit 77) with `usage` when it has
 * fewer than `need` arguments, or when the folder cannot be made. */
static inline const char *program_setup(int argc, char **argv, int need, const char *usage, char *dir)
{
    if (argc < need)
        tap_plan_skip(usage);
    if (!mkdtemp(dir))
        tap_plan_skip("no temporary directory");
    return argv[1];
}

/* `program` with `args` (shell words, quoted by the caller), its output in
 * dir/out.txt and dir/err.txt. */
static inline void program_run_in(const char *dir, const char *program, const char *args, program_run *r)
{
    char cmd[4096], out[600], err[600];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", program, args, out, err);
    int st = system(cmd);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    program_slurp(out, r->out, sizeof r->out);
    program_slurp(err, r->err, sizeof r->err);
    size_t n = strlen(r->err);
    while (n && r->err[n - 1] == '\n')
        r->err[--n] = '\0';
}

#endif
