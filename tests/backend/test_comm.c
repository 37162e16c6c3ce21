/* backend/comm.h in one process: the timeout parser against a table of
 * accepted and refused texts, the timeouts in force and their description,
 * joining refused on an invalid FERRY_COMM_TIMEOUT, the device a rank
 * takes under each launcher's environment (refused where two ranks would
 * share a GPU), the ledger's entries, words and the naming of the first
 * collective that differs across synthetic ranks' views, and the wakers:
 * called once when the world fails, on a waiting thread too, never after
 * removal, refused after the failure. (The same under mpirun, with real
 * ranks stopped, killed and diverging: test_comm.sh.) */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/comm.h"
#include "backend/comm_impl.h"
#include "common/error.h"
#include "tap.h"

static void parser(void)
{
    const struct {
        const char *text;
        double seconds;
    } good[] = {{"90", 90}, {"2.5", 2.5}, {"20s", 20}, {"15m", 900}, {"1.5h", 5400}, {"0.5m", 30}, {"168h", 604800}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        double s = -1;
        ferry_status st = comm_parse_timeout(good[i].text, "FERRY_COMM_TIMEOUT", &s);
        tap_ok(st == FERRY_OK && s == good[i].seconds, "'%s' is %g s (got %g, status %d: %s)", good[i].text,
               good[i].seconds, s, (int)st, st ? ferry_last_error() : "");
    }
    const struct {
        const char *text, *why;
    } bad[] = {{"", "it is empty"},
               {"inf", "it is not a number of seconds"},
               {"nan", "it is not a number of seconds"},
               {"abc", "it is not a number of seconds"},
               {"0", "a timeout must be above zero"},
               {"0s", "a timeout must be above zero"},
               {"-5", "a timeout must be above zero"},
               {"10x", "'x' is not a unit (s, m or h; a bare number is seconds)"},
               {"20sec", "'ec' is not a unit"},
               {"5 m", "' m' is not a unit"},
               {"169h", "it is longer than a week"},
               {"1e300", "it is longer than a week"},
               {"1e999", "it is not a number of seconds"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double s = 7;
        ferry_status st = comm_parse_timeout(bad[i].text, "FERRY_COMM_TIMEOUT", &s);
        char want[160];
        snprintf(want, sizeof want, "FERRY_COMM_TIMEOUT='%s' is refused: ", bad[i].text);
        const char *msg = ferry_last_error();
        tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && s == 7 && strstr(msg, want) && strstr(msg, bad[i].why) &&
                   strstr(msg, "give seconds, or a number with a unit: 90, 20s, 15m, 1.5h"),
               "'%s' is refused, saying %s (status %d, seconds left %g): %s", bad[i].text, bad[i].why, (int)st, s,
               msg);
    }
}

static void timeouts(void)
{
    unsetenv("FERRY_COMM_TIMEOUT");
    unsetenv("FERRY_COMM_SAVE_TIMEOUT");
    tap_ok(comm_world_timeout() == 600 && comm_world_save_timeout() == 1800,
           "defaults: collectives 600 s, saves 1800 s (got %g, %g)", comm_world_timeout(), comm_world_save_timeout());
    setenv("FERRY_COMM_TIMEOUT", "15m", 1);
    char d[512];
    comm_world_describe_timeouts(d, sizeof d);
    tap_ok(comm_world_timeout() == 900 && strstr(d, "collectives time out after 15 min (FERRY_COMM_TIMEOUT=15m)") &&
               strstr(d, "checkpoint saves after 30 min without progress (the default; FERRY_COMM_SAVE_TIMEOUT "
                         "sets it)"),
           "FERRY_COMM_TIMEOUT=15m is 900 s, and said so: %s", d);
    setenv("FERRY_COMM_TIMEOUT", "1h", 1);
    tap_ok(comm_world_save_timeout() == 3600, "the save timeout is at least the collective one (1h: got %g)",
           comm_world_save_timeout());
    setenv("FERRY_COMM_SAVE_TIMEOUT", "90", 1);
    comm_world_describe_timeouts(d, sizeof d);
    tap_ok(comm_world_save_timeout() == 90 && strstr(d, "checkpoint saves after 1.5 min without progress "
                                                        "(FERRY_COMM_SAVE_TIMEOUT=90)"),
           "FERRY_COMM_SAVE_TIMEOUT=90 is 90 s, and said so: %s", d);
    /* Joining refuses what the parser refuses, and joins nothing. */
    setenv("FERRY_COMM_TIMEOUT", "inf", 1);
    ferry_world_info w;
    ferry_status st = comm_world_join(&w);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "FERRY_COMM_TIMEOUT='inf' is refused") &&
               !comm_world_joined(),
           "joining with FERRY_COMM_TIMEOUT=inf is refused (status %d): %s", (int)st, ferry_last_error());
    setenv("FERRY_COMM_TIMEOUT", "20s", 1);
    setenv("FERRY_COMM_SAVE_TIMEOUT", "-1", 1);
    st = comm_world_join(&w);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "FERRY_COMM_SAVE_TIMEOUT='-1' is refused"),
           "so is FERRY_COMM_SAVE_TIMEOUT=-1 (status %d): %s", (int)st, ferry_last_error());
    unsetenv("FERRY_COMM_SAVE_TIMEOUT");
    tap_ok(comm_world_timeout() == 20, "an invalid value is never in force: 20s is (got %g)", comm_world_timeout());
    unsetenv("FERRY_COMM_TIMEOUT");
}

/* The launcher's variables of one case, set before it and cleared after. */
static const char *launcher_vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
                                      "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID",
                                      "CUDA_VISIBLE_DEVICES", "FERRY_SHARE_GPUS"};

static void clear_launcher(void)
{
    for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++)
        unsetenv(launcher_vars[i]);
}

static void ompi(int rank, int size, int local, int local_size)
{
    char v[4][16];
    snprintf(v[0], 16, "%d", rank);
    snprintf(v[1], 16, "%d", size);
    snprintf(v[2], 16, "%d", local);
    snprintf(v[3], 16, "%d", local_size);
    setenv("OMPI_COMM_WORLD_RANK", v[0], 1);
    setenv("OMPI_COMM_WORLD_SIZE", v[1], 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", v[2], 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", v[3], 1);
}

static void device(int count, int want, const char *refusal, const char *what)
{
    int d = -1;
    ferry_status st = comm_world_device(count, &d);
    if (refusal)
        tap_ok(st != FERRY_OK && strstr(ferry_last_error(), refusal), "%s: refused (status %d): %s", what, (int)st,
               ferry_last_error());
    else
        tap_ok(st == FERRY_OK && d == want, "%s: device %d (got %d, status %d: %s)", what, want, d, (int)st,
               st ? ferry_last_error() : "");
}

static void devices(void)
{
    clear_launcher();
    device(8, 0, NULL, "alone, 8 GPUs");
    device(0, 0, "sees no GPU", "alone, no GPU");
    ompi(3, 4, 1, 2);
    tap_ok(comm_world_local_rank() == 1 && comm_world_local_size() == 2 && !comm_world_joined(),
           "mpirun's local rank before any join: 1 of 2 (got %d of %d)", comm_world_local_rank(),
           comm_world_local_size());
    device(2, 1, NULL, "mpirun, local rank 1 of 2, 2 GPUs");
    device(8, 1, NULL, "mpirun, local rank 1 of 2, 8 GPUs");
    device(1, 0,
           "rank 3 is local rank 1 of 2 on this machine, which shows 1 GPU: ranks would share a GPU, each planning "
           "with all its memory; start at most 1 rank per machine",
           "mpirun, local rank 1 of 2, 1 GPU");
    ompi(3, 4, 3, 4);
    device(2, 0, "local rank 3 of 4 on this machine, which shows 2 GPUs", "mpirun, local rank 3 of 4, 2 GPUs");
    setenv("FERRY_SHARE_GPUS", "1", 1);
    device(2, 1, NULL, "the same with FERRY_SHARE_GPUS=1 (3 mod 2)");
    unsetenv("FERRY_SHARE_GPUS");
    setenv("CUDA_VISIBLE_DEVICES", "3", 1);
    device(1, 0, NULL, "one GPU of its own (CUDA_VISIBLE_DEVICES=3), local rank 3 of 4");
    clear_launcher();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    device(2, 1, NULL, "srun, local rank 1, tasks per node not said, 2 GPUs");
    device(1, 0, "local rank 1 of 2 or more on this machine, which shows 1 GPU", "the same with 1 GPU");
    setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)", 1);
    setenv("SLURM_NODEID", "1", 1);
    device(4, 1, NULL, "srun, local rank 1 of 4, 4 GPUs");
    device(3, 0, "local rank 1 of 4 on this machine, which shows 3 GPUs", "srun, local rank 1 of 4, 3 GPUs");
    clear_launcher();
}

/* ---- the ledger ---- */

static void ledger(void)
{
    uint64_t c0, h0, c1, h1;
    comm_ledger_state(&c0, &h0);
    comm_entry e = comm_ledger_write("weights", COMM_OP_ALL_GATHER, 5, 1024, FERRY_DTYPE_BF16, -1);
    comm_ledger_state(&c1, &h1);
    tap_ok(e.seq == c0 && c1 == c0 + 1 && h1 != h0 && e.hash_before == h0,
           "an entry takes the next number (%llu), and changes the hash", (unsigned long long)e.seq);
    char d[256], want[256];
    comm_entry_describe(&e, d, sizeof d);
    snprintf(want, sizeof want, "an all-gather of 'weights' (collective #%llu: 1024 bf16, group 5)",
             (unsigned long long)e.seq);
    tap_ok(strcmp(d, want) == 0, "described: %s", d);
    e = comm_ledger_write("world", COMM_OP_BROADCAST, -1, 64, 0, 0);
    comm_entry_describe(&e, d, sizeof d);
    snprintf(want, sizeof want, "a broadcast from rank 0 of 'world' (collective #%llu: 64 bytes)",
             (unsigned long long)e.seq);
    tap_ok(strcmp(d, want) == 0, "described: %s", d);
    /* Each field of an entry moves the hash. */
    comm_entry base = {.seq = 7, .count = 4096, .hash_before = 99, .op = COMM_OP_ALL_REDUCE, .dtype = FERRY_DTYPE_F32,
                       .tag = 3, .root = -1, .channel = "gradients"};
    uint64_t hb = comm_entry_hash(0x1234, &base);
    comm_entry v[7];
    for (int i = 0; i < 7; i++)
        v[i] = base;
    v[0].seq = 8;
    v[1].count = 4097;
    v[2].op = COMM_OP_REDUCE_SCATTER;
    v[3].dtype = FERRY_DTYPE_BF16;
    v[4].tag = 4;
    v[5].root = 0;
    snprintf(v[6].channel, sizeof v[6].channel, "weights");
    int moved = 0;
    for (int i = 0; i < 7; i++)
        moved += comm_entry_hash(0x1234, &v[i]) != hb;
    tap_ok(moved == 7 && comm_entry_hash(0x1234, &base) == hb && comm_entry_hash(0x1235, &base) != hb,
           "every field moves the hash, and the hash before does too (%d of 7 fields)", moved);
    double words[COMM_LEDGER_WORDS];
    comm_ledger_words(words);
    comm_ledger_state(NULL, &h1);
    int right = 0;
    for (int i = 0; i < 4; i++)
        right += words[2 * i] == (double)((h1 >> (16 * i)) & 0xffff) && words[2 * i + 1] == words[2 * i] * words[2 * i];
    tap_ok(right == 4, "the words are the hash's four 16-bit pieces and their squares (%d of 4)", right);
    tap_ok(comm_ledger_verify(words) == FERRY_OK, "alone, the ledger agrees with itself");
}

/* A synthetic rank's view: `count` entries, all of group g0 but entry
 * `odd` of group g1 (odd < 0: none). */
static void fake_view(comm_ledger_view *v, uint64_t count, int odd, int g1)
{
    memset(v, 0, sizeof *v);
    uint64_t h = 1;
    for (uint64_t s = 0; s < count; s++) {
        comm_entry e = {.seq = s, .count = 1024, .hash_before = h, .op = COMM_OP_ALL_GATHER,
                        .dtype = FERRY_DTYPE_BF16, .tag = (int)s == odd ? g1 : (int)(s % 4), .root = -1};
        snprintf(e.channel, sizeof e.channel, "weights");
        h = comm_entry_hash(h, &e);
        v->ring[s % COMM_LEDGER_RING] = e;
    }
    v->count = count;
    v->hash = h;
}

static void naming(void)
{
    comm_ledger_view *v = calloc(3, sizeof *v);
    char out[1024];
    fake_view(&v[0], 100, -1, 0);
    fake_view(&v[1], 100, 90, 7);
    fake_view(&v[2], 100, -1, 0);
    comm_ledger_first_difference(v, 3, out, sizeof out);
    tap_ok(strcmp(out, "the first that differs is collective #90: ranks 0, 2 issued an all-gather of 'weights' (1024 "
                       "bf16, group 2); rank 1 issued an all-gather of 'weights' (1024 bf16, group 7)") == 0,
           "3 ranks, rank 1's group differs at #90: %s", out);
    fake_view(&v[1], 97, -1, 0);
    comm_ledger_first_difference(v, 3, out, sizeof out);
    tap_ok(strcmp(out, "the first that differs is collective #97: ranks 0, 2 issued an all-gather of 'weights' (1024 "
                       "bf16, group 1); rank 1 issued nothing more (97 collectives in all)") == 0,
           "rank 1 issued 3 fewer: %s", out);
    fake_view(&v[1], 100, 10, 7);
    comm_ledger_first_difference(v, 3, out, sizeof out);
    tap_ok(strcmp(out, "they differ before collective #36, older than the last 64 each rank keeps (counts: rank 0 "
                       "100, rank 2 100)") == 0,
           "a difference older than the ring: %s", out);
    free(v);
}

/* ---- wakers ---- */

typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls;
    bool woke;
} waiter;

static void wake(void *arg)
{
    waiter *x = arg;
    pthread_mutex_lock(&x->lock);
    x->calls++;
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
}

static void *wait_main(void *arg)
{
    waiter *x = arg;
    pthread_mutex_lock(&x->lock);
    while (!comm_world_failed())
        pthread_cond_wait(&x->cond, &x->lock);
    x->woke = true;
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

static void wakers(void)
{
    waiter a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false};
    waiter b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false};
    comm_waker *wa = NULL, *wb = NULL;
    tap_ok(comm_waker_add(wake, &a, &wa) == FERRY_OK && comm_waker_add(wake, &b, &wb) == FERRY_OK && wa && wb,
           "two wakers registered");
    tap_ok(comm_waker_add(NULL, &a, &wb) == FERRY_ERR_INVALID_ARGUMENT, "a NULL function is refused");
    comm_waker_remove(wb);
    comm_waker_remove(NULL);
    pthread_t t;
    pthread_create(&t, NULL, wait_main, &a);
    struct timespec brief = {0, 50 * 1000 * 1000};
    nanosleep(&brief, NULL);
    tap_ok(!comm_world_failed() && a.calls == 0 && !a.woke, "nothing fails, nothing wakes");
    ferry_status st = comm_world_fail("a planted failure");
    pthread_join(t, NULL);
    tap_ok(st == FERRY_ERR_BACKEND && comm_world_failed() && a.calls == 1 && a.woke && b.calls == 0,
           "the failure called the registered waker once (%d), which woke its thread (%d), and not the removed "
           "one (%d)",
           a.calls, (int)a.woke, b.calls);
    comm_world_fail("a second failure");
    tap_ok(a.calls == 1, "a second failure calls no waker again (%d)", a.calls);
    comm_waker *late = NULL;
    st = comm_waker_add(wake, &b, &late);
    tap_ok(st == FERRY_ERR_BACKEND && !late && strstr(ferry_last_error(), "a planted failure"),
           "registering after the failure returns it (status %d): %s", (int)st, ferry_last_error());
    st = comm_world_check();
    tap_ok(st == FERRY_ERR_BACKEND && strcmp(ferry_last_error(), "a planted failure") == 0,
           "the world stays failed with the first message: %s", ferry_last_error());
    comm_waker_remove(wa);
}

int main(void)
{
    parser();
    timeouts();
    devices();
    ledger();
    naming();
    ferry_world_info w;
    tap_ok(comm_world_join(&w) == FERRY_OK && w.world_size == 1, "joined alone");
    wakers(); /* last: the world has failed after it */
    return tap_done();
}
