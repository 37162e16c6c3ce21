/* The trainer's signals and what its ranks agree on: the first SIGINT or
 * SIGTERM asks the run to stop at the next agreed point, a second ends the
 * process; under mpirun or srun every decision a signal changes is agreed
 * by all ranks at the same point (before each micro-batch, evaluation
 * round and sampled token, after setup and after each step), so a signal
 * to any rank stops all of them at the same place and the collectives never
 * mismatch. Also the run identity and tokenizer agreed after setup, the
 * smallest batch of --find-max-batch, each rank's trace file, and the lines
 * that say where a stopped run stopped. Not the collectives of training
 * (the engine's) nor where a run stops (trainer_loop.c asks here). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "train/trainer_internal.h"

/* The first SIGINT or SIGTERM asks the run to stop after the micro-batch,
 * evaluation batch or sampled token under way; a second one (of either)
 * ends the process at once. Any thread may take a signal: the exchange makes
 * exactly one of two the first. */
static atomic_int stop_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may use only lock-free atomics");
static char stop_msg[160]; /* written once, before the handler is installed */
static size_t stop_msg_len;

static void on_stop_signal(int sig)
{
    if (atomic_exchange(&stop_signal, sig) != 0) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    ssize_t w = write(STDERR_FILENO, stop_msg, stop_msg_len);
    (void)w;
}

void trainer_catch_signals(const trainer_program *p)
{
    int n = snprintf(stop_msg, sizeof stop_msg,
                     "\n%s: stopping after the batch under way (a second signal stops at once)\n", p->name);
    stop_msg_len = n > 0 && (size_t)n < sizeof stop_msg ? (size_t)n : strlen(stop_msg);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* reads and writes under way go on, not EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A file size limit makes writes fail with EFBIG, reported like a full
     * disk, instead of killing the run. */
    signal(SIGXFSZ, SIG_IGN);
}

const atomic_int *trainer_stop_flag(void) { return &stop_signal; }

/* Whether the run stops: alone, whether this process had a signal (read
 * anywhere, at once); with several ranks, whether any rank had one by the
 * last agreement, which every rank reached at the same point, so every
 * rank takes the same path and the collectives never mismatch. */
bool trainer_stopping(const trainer *t) { return t->world > 1 ? t->stop : atomic_load(&stop_signal) != 0; }

/* The signal the run stops for: this process's, or, when only another
 * rank had one, SIGTERM if any rank had it, else SIGINT. It is kept apart
 * from stop_signal: a signal that then reaches this rank too (a launcher
 * passes it on to every rank, a moment apart) is a first one, not the
 * second that would end the process at once. */
static int peer_signal;
int trainer_stop_sig(void)
{
    int s = atomic_load(&stop_signal);
    return s ? s : peer_signal;
}

/* With several ranks: every rank calls this at the same point (a
 * collective); afterwards t->stop says whether any rank has had a signal,
 * the same on every rank. `extra` (n <= 5 doubles, may be NULL) is summed
 * across the ranks in the same collective. Alone it does nothing. */
enum { AGREE_EXTRA = 5 };
ferry_status trainer_agree(trainer *t, double *extra, size_t n)
{
    if (t->world == 1)
        return FERRY_OK;
    double v[2 + AGREE_EXTRA] = {0};
    n = n < AGREE_EXTRA ? n : AGREE_EXTRA;
    int s = atomic_load(&stop_signal);
    v[0] = s == SIGINT;
    v[1] = s != 0 && s != SIGINT;
    for (size_t i = 0; i < n; i++)
        v[2 + i] = extra[i];
    ferry_status st = ferry_world_all_reduce(v, 2 + n);
    if (st != FERRY_OK)
        return st; /* its message names the rank that failed or did not answer */
    t->stop = v[0] > 0 || v[1] > 0;
    if (t->stop && !peer_signal)
        peer_signal = v[1] > 0 ? SIGTERM : SIGINT;
    for (size_t i = 0; i < n; i++)
        extra[i] = v[2 + i];
    return FERRY_OK;
}

/* With several ranks, after every rank's prepare(), in the collective
 * that agrees on a signal during setup: rank 0's run identity to every
 * rank (its 32 hex digits as 4 doubles of 32 bits, summed with the others'
 * zeros), and the tokenizer: the final sample, which every rank takes part
 * in, is taken only where every rank has found one. Alone it does
 * nothing. */
ferry_status trainer_agree_after_prepare(trainer *t)
{
    double v[5] = {0, 0, 0, 0, t->tok ? 1 : 0};
    for (int i = 0; i < 4 && trainer_leader(t); i++) {
        char part[9];
        memcpy(part, t->run + 8 * i, 8);
        part[8] = '\0';
        v[i] = (double)strtoul(part, NULL, 16);
    }
    ferry_status st = trainer_agree(t, v, 5);
    if (st != FERRY_OK || t->world == 1)
        return st;
    for (int i = 0; i < 4; i++)
        snprintf(t->run + 8 * i, 9, "%08x", (unsigned)(uint32_t)v[i]);
    if (v[4] < t->world) {
        tok_close(t->tok);
        t->tok = NULL;
    }
    return FERRY_OK;
}

/* With several ranks: the sampler's question before each token. */
ferry_status trainer_agree_before_token(void *ctx, bool *stop)
{
    trainer *t = ctx;
    ferry_status st = trainer_agree(t, NULL, 0);
    *stop = trainer_stopping(t);
    return st;
}

/* The smallest of the ranks' batches, so that every rank trains the same. */
ferry_status trainer_agree_batch(const trainer *t, int *B)
{
    if (t->world <= 1)
        return FERRY_OK;
    double *all = calloc((size_t)t->world, sizeof *all);
    if (!all)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "out of host memory");
    all[t->rank] = *B;
    ferry_status st = ferry_world_all_reduce(all, (size_t)t->world);
    for (int k = 0; k < t->world && st == FERRY_OK; k++)
        *B = all[k] < *B ? (int)all[k] : *B;
    free(all);
    return st;
}

/* Rank 0 writes the trace it was asked for; rank R, FILE.rankR. */
void trainer_trace_path(trainer *t)
{
    if (!t->o.trace || t->world == 1)
        return;
    if (t->rank > 0) {
        snprintf(t->trace, sizeof t->trace, "%s.rank%d", t->o.trace, t->rank);
        t->o.trace = t->trace;
    }
}

/* After a SIGINT/SIGTERM (to this rank or, agreed, to another): says where
 * the run stopped and what it kept (rank 0 alone, for every rank: they
 * stopped at the same point); returns rc, or 128 + the signal if nothing
 * else failed. */
int trainer_report_stop(const trainer *t, int rc)
{
    int sig = trainer_stop_sig();
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM", *prog = t->prog->name;
    if (!trainer_leader(t))
        ;
    else if (t->cut_micro && t->world > 1)
        fprintf(stderr, "%s: %s came in step %lld, after %d of each rank's %d micro-batches: that step was "
                        "cut short on every rank and its gradients dropped\n",
                prog, name, (long long)t->step + 1, t->cut_micro, t->o.grad_accum);
    else if (t->cut_micro)
        fprintf(stderr, "%s: %s came in step %lld, after %d of its %d micro-batches: that step was cut "
                        "short and its gradients dropped\n",
                prog, name, (long long)t->step + 1, t->cut_micro, t->o.grad_accum);
    if (!trainer_leader(t))
        ;
    else if (!t->started_ms)
        fprintf(stderr, "%s: stopped by %s during setup; nothing was trained or saved\n", prog, name);
    else if (t->o.sample_only)
        fprintf(stderr, "%s: stopped by %s while sampling; the text so far is above\n", prog, name);
    else if (t->o.eval_only)
        fprintf(stderr, "%s: stopped by %s while evaluating; no loss is reported\n", prog, name);
    else if (t->step == t->start_step)
        fprintf(stderr, "%s: stopped by %s before a step was complete; nothing was trained or saved\n", prog,
                name);
    else if (!t->o.checkpoint_dir)
        fprintf(stderr, "%s: stopped by %s at step %lld; nothing was saved (no --checkpoint-dir)\n", prog, name,
                (long long)t->step);
    else if (t->saved_step == t->step)
        fprintf(stderr, "%s: stopped by %s at step %lld; the checkpoint of this step is in %s\n", prog, name,
                (long long)t->step, t->o.checkpoint_dir);
    else
        fprintf(stderr, "%s: stopped by %s at step %lld; the checkpoint could not be saved\n", prog, name,
                (long long)t->step);
    return rc ? rc : 128 + sig;
}
