/* The trainer's files on disk before the first step: the run folder (a
 * resumed run's default --checkpoint-dir, its identity, the claim that
 * every step folder in it is this run's, the first line that says where a
 * resumed run goes on and saves) and the JSON Lines log (opened to append,
 * its cut last record repaired). Not the saves (trainer_loop.c, over
 * train/run_state.h) nor what the log's records hold (trainer_report.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "train/trainer_internal.h"

/* Bytes from `off` to the end of the file (at most 64 KiB) into buf. */
static ssize_t read_tail(int fd, off_t off, char *buf, size_t cap)
{
    size_t n = 0;
    for (ssize_t r; n < cap && (r = pread(fd, buf + n, cap - n, off + (off_t)n)) > 0;)
        n += (size_t)r;
    return (ssize_t)n;
}

/* A log whose last line was cut (its disk filled, or the run was killed
 * mid-write) is cut back to its last whole record before anything is
 * appended, and the run says so; a cut line that is not one of our records
 * (another file given as --log) is refused and left as it is. */
static ferry_status repair_log(const char *prog, const char *path, int fd)
{
    struct stat sb, rsb;
    char tail[65536];
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return FERRY_OK;
    /* Read through a descriptor of its own (the log's is write-only), of the same file. */
    int rfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (rfd < 0 || fstat(rfd, &rsb) != 0 || rsb.st_ino != sb.st_ino || rsb.st_dev != sb.st_dev) {
        int e = rfd < 0 ? errno : EAGAIN;
        if (rfd >= 0)
            close(rfd);
        return err_set(FERRY_ERR_IO, "the log '%s': cannot read its last line: %s", path, strerror(e));
    }
    off_t from = sb.st_size > (off_t)sizeof tail ? sb.st_size - (off_t)sizeof tail : 0;
    ssize_t n = read_tail(rfd, from, tail, sizeof tail);
    close(rfd);
    if (n <= 0 || tail[n - 1] == '\n')
        return FERRY_OK;
    ssize_t cut = n;
    while (cut > 0 && tail[cut - 1] != '\n')
        cut--;
    static const char record[] = "{\"kind\":\"";
    bool ours = (cut > 0 || from == 0) && (size_t)(n - cut) >= sizeof record - 1 &&
                memcmp(tail + cut, record, sizeof record - 1) == 0;
    if (!ours)
        return err_set(FERRY_ERR_FORMAT, "the log '%s' ends with an incomplete line that is not a %s record "
                                         "(%lld bytes after its last newline); give another --log, or end that "
                                         "file with a newline; it is left as it is",
                       path, prog, (long long)(n - cut));
    if (ftruncate(fd, from + cut) != 0)
        return err_set(FERRY_ERR_IO, "the log '%s': cannot cut its incomplete last record: %s", path, strerror(errno));
    fprintf(stderr, "%s: the log '%s' ended with an incomplete record (%lld bytes: its disk filled, or the "
                    "run was stopped mid-write); it was removed, and the log goes on from its last whole record\n",
            prog, path, (long long)(n - cut));
    return FERRY_OK;
}

/* The log, appended to: a regular file (its folders made) or a character
 * device, opened without blocking (common/fileio.h). */
ferry_status trainer_open_log(trainer *t)
{
    int fd = -1;
    if (!t->o.log)
        return FERRY_OK;
    ferry_status st = fileio_make_parents(t->o.log);
    if (st == FERRY_OK)
        st = fileio_open_output(t->o.log, "the log", true, &fd);
    if (st == FERRY_OK && (st = repair_log(t->prog->name, t->o.log, fd)) != FERRY_OK)
        close(fd);
    else if (st == FERRY_OK && !(t->log = fdopen(fd, "a"))) {
        st = err_set(FERRY_ERR_IO, "cannot write the log '%s': %s", t->o.log, strerror(errno));
        close(fd);
    }
    return st;
}

/* This run's identity (the checkpoint's when resumed), and a checkpoint
 * folder that is this run's: every step folder in it is checked before
 * anything there is written or pruned (run_state_claim): a new run refuses
 * a folder holding any run's checkpoints (with its latest link or without),
 * a resumed run one holding another run's, so that two runs never prune or
 * overwrite each other's checkpoints. With several ranks, rank 0 (which
 * writes the folder) makes the identity and checks the folder; the others
 * receive it (trainer_agree_after_prepare). */
ferry_status trainer_claim_run_folder(trainer *t)
{
    if (t->o.resume && t->from.run[0])
        snprintf(t->run, sizeof t->run, "%s", t->from.run);
    else if (trainer_leader(t))
        run_state_new_run(t->run);
    if (!trainer_leader(t) || !t->o.checkpoint_dir)
        return FERRY_OK;
    return run_state_claim(t->o.checkpoint_dir, t->o.resume ? t->from.run : t->run, t->o.resume != NULL);
}

/* --resume without --checkpoint-dir saves into the checkpoint's run folder
 * (the folder its step folder is in), as the run it continues did; a
 * checkpoint outside any run folder saves nothing, which its first line
 * says. Before the outputs are checked, so that this folder is checked and
 * locked like a given one. --sample and --eval-only save nothing. */
void trainer_default_checkpoint_dir(trainer *t)
{
    char ckpt[PATH_MAX];
    if (!t->o.resume || t->o.checkpoint_dir || t->o.sample_only || t->o.eval_only ||
        run_state_locate(t->o.resume, ckpt, sizeof ckpt) != FERRY_OK ||
        run_state_run_folder(t->o.resume, t->home, sizeof t->home) != FERRY_OK) {
        err_clear(); /* a checkpoint that cannot be found is said by trainer_choose_model */
        return;
    }
    t->o.checkpoint_dir = t->home;
    t->home_taken = true;
}

/* A resumed run's first line: the run it continues, from where, how many
 * steps are left, and where (and how often) it saves; then what it changes
 * of the checkpoint's settings. */
void trainer_say_resume(const trainer *t)
{
    const train_options *o = &t->o;
    char saves[PATH_MAX + 160], every[48] = "";
    if (o->checkpoint_every > 0)
        snprintf(every, sizeof every, " every %d steps and", o->checkpoint_every);
    if (o->checkpoint_dir)
        snprintf(saves, sizeof saves, "saving into %s%s at the end%s", o->checkpoint_dir, every,
                 t->home_taken ? " (the checkpoint's run folder; --checkpoint-dir DIR saves elsewhere)" : "");
    else
        snprintf(saves, sizeof saves, "saving nothing: the checkpoint is in no run folder, so give --checkpoint-dir DIR "
                 "to keep this run's steps");
    printf("resuming run %s at step %lld from %s: %lld of %d steps left, %s\n", t->run[0] ? t->run : "(unnamed)",
           (long long)t->from.step, t->ckpt, (long long)(o->steps - t->from.step), o->steps, saves);
    if (t->changed[0])
        printf("%s\n", t->changed);
}
