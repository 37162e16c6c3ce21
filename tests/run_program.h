/* A program of the build run by a test through the shell, with stdout and
 * stderr captured in files of the test's folder and read back (their first
 * 64 KiB and 4 KiB, stderr without its last newlines), and its exit status
 * (-1 when it did not exit: a signal); for the tests that check a program's
 * words and exit status (memprof's). Header-only. */
#ifndef FERRY_TESTS_RUN_PROGRAM_H
#define FERRY_TESTS_RUN_PROGRAM_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef struct program_run {
    int status;
    char out[65536];
    char err[4096];
} program_run;

/* The first cap - 1 bytes of a file, NUL-terminated ("" when unreadable). */
static inline void program_slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
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
