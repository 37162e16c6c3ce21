/* Tests of OpenBLAS's address-space guard (backend/ops/blas.c): under an
 * RLIMIT_AS with no room for OpenBLAS's 128 MiB buffer, blas_prepare() is
 * FERRY_ERR_OUT_OF_MEMORY saying what is needed, and so is the host
 * backend's ops_init (what an engine's setup calls before any multiply),
 * where OpenBLAS alone retried its mmap forever at 100% CPU. With room, the
 * matmul gives the hand-computed product. Each case runs in a child that lowers its own limit (and has 60 s
 * before SIGALRM ends a hang). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "backend/backend.h"
#include "backend/ops/blas.h"
#include "backend/ops/ops.h"
#include "backend/ops/ops_host.h"
#include "tap.h"

static uint64_t vm_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1)
            pages = 0;
        fclose(f);
    }
    return (uint64_t)pages * 4096u;
}

/* Lowers this process's address-space limit to what it uses plus `room`. */
static void limit_to(uint64_t room)
{
    struct rlimit rl = {(rlim_t)(vm_bytes() + room), (rlim_t)(vm_bytes() + room)};
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        perror("setrlimit");
        _exit(3);
    }
}

/* out[1x2] = inp[1x3] @ weight[2x3]^T + bias: by hand, {1*1+2*2+3*3+0.5, 1*4+2*5+3*6-1}. */
static int matmul_is_right(void)
{
    const float inp[3] = {1, 2, 3}, weight[6] = {1, 2, 3, 4, 5, 6}, bias[2] = {0.5f, -1};
    float out[2] = {0, 0};
    hostop_matmul_forward(out, inp, weight, bias, 1, 3, 2);
    return out[0] == 14.5f && out[1] == 31.0f;
}

static int child(const char *mode)
{
    alarm(60);
    if (!strcmp(mode, "check-tight")) {
        limit_to(64u << 20);
        ferry_status st = blas_prepare();
        printf("%d %s\n", (int)st, ferry_last_error());
        return 0;
    }
    if (!strcmp(mode, "init-tight")) {
        backend *be = NULL;
        if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK)
            return 6;
        limit_to(64u << 20);
        ferry_status st = ops_init(be, NULL, 0);
        printf("%d %s\n", (int)st, ferry_last_error());
        return 0;
    }
    limit_to(1u << 30); /* "matmul-room" */
    if (blas_prepare() != FERRY_OK) {
        printf("prepare failed: %s\n", ferry_last_error());
        return 4;
    }
    return matmul_is_right() ? 0 : 5;
}

typedef struct outcome {
    int status; /* exit status, or 128 + signal */
    char out[2048], err[2048];
} outcome;

static void run_child(const char *self, const char *mode, outcome *o)
{
    char out[] = "/tmp/ferry_blas_out_XXXXXX", err[] = "/tmp/ferry_blas_err_XXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        setenv("OPENBLAS_NUM_THREADS", "1", 1); /* its constructor must not start workers we cannot afford */
        execl(self, self, "--child", mode, (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    o->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    ssize_t n = pread(fo, o->out, sizeof o->out - 1, 0);
    o->out[n > 0 ? n : 0] = '\0';
    n = pread(fe, o->err, sizeof o->err - 1, 0);
    o->err[n > 0 ? n : 0] = '\0';
    close(fo);
    close(fe);
    unlink(out);
    unlink(err);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1 /* their shadow memory is terabytes of address space: no RLIMIT_AS */
#else
#define UNDER_SANITIZER 0
#endif

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child"))
        return child(argv[2]);
    if (UNDER_SANITIZER) {
        tap_diag("built with ASan or TSan, which cannot run under an address-space limit: only the unlimited case");
        TAP_IS_STATUS(blas_prepare(), FERRY_OK, "no limit here: blas_prepare is OK at once");
        tap_ok(matmul_is_right(), "no limit: the matmul gives the hand-computed product");
        return tap_done();
    }
    outcome o;
    run_child(argv[0], "check-tight", &o);
    char want[32];
    snprintf(want, sizeof want, "%d ", (int)FERRY_ERR_OUT_OF_MEMORY);
    tap_ok(o.status == 0 && !strncmp(o.out, want, strlen(want)),
           "tight limit: blas_prepare is FERRY_ERR_OUT_OF_MEMORY (exit %d, '%s')", o.status, o.out);
    tap_ok(strstr(o.out, "ulimit -v) is") && strstr(o.out, "128.0 MiB more") && strstr(o.out, "raise ulimit -v to at least"),
           "tight limit: the message says the limit, the 128 MiB needed, and what to do");
    run_child(argv[0], "init-tight", &o);
    tap_ok(o.status == 0 && !strncmp(o.out, want, strlen(want)),
           "tight limit: the host backend's ops_init is FERRY_ERR_OUT_OF_MEMORY, no hang (exit %d, '%s')", o.status,
           o.out);
    tap_ok(strstr(o.out, "raise ulimit -v to at least") != NULL, "with the reason: %.200s", o.out);
    run_child(argv[0], "matmul-room", &o);
    TAP_IS_INT(o.status, 0, "1 GiB of room: prepared, and the matmul gives 14.5 and 31 (%s)", o.out);
    TAP_IS_STATUS(blas_prepare(), FERRY_OK, "no limit here: blas_prepare is OK at once");
    tap_ok(matmul_is_right(), "no limit: the matmul gives the hand-computed product");
    return tap_done();
}
