/* The batch loader over token shards of every format (see dataloader.h):
 * opening and checking shards, the window index (for masked shards, the
 * rows the examples are packed into), the per-epoch permutation and the
 * saved/restored position. Shards are read
 * with pread into a buffer, never mapped: a shard cut short or rewritten
 * while training is an error message, not a SIGBUS. */
#include "train/dataloader.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "train/token_shard.h"

typedef struct loader_shard {
    char *path;
    int fd;             /* open for the loader's life: batches are read with pread */
    uint64_t size;      /* bytes when opened; any change later is an error */
    struct timespec mtime;
    uint64_t count;
    tok_shard_format format;
    size_t tok_bytes;   /* 2 or 4, as the format says */
    uint64_t hash;      /* of the tokens' bytes, taken while checking them at open */
    uint64_t first_window; /* global index of its first window */
    uint64_t windows;
    tok_shard_header hdr;  /* masked: the examples and targets its header claims */
    uint32_t *starts;      /* masked: hdr.examples starts and the token count after them */
} loader_shard;

/* Masked shards: the examples first..first+count-1 of a shard fill one row. */
typedef struct loader_row {
    uint32_t shard, first, count;
} loader_row;

struct tok_loader {
    tok_loader_config cfg;
    loader_shard *shards;
    size_t nshards, cap_shards;
    uint64_t windows, tokens, layout;
    uint64_t epoch, index;
    uint32_t *perm;     /* this epoch's window order (shuffled mode) */
    uint64_t perm_epoch;
    uint32_t vocab;     /* every token is below it: cfg.vocab_size, or the format's range when that is 0 */
    void *window;       /* B*T+1 tokens read for one batch, as the shards hold them (masked: one row's) */
    tok_loader_batch_info last;
    /* masked shards */
    bool masked;
    loader_row *rows;
    uint64_t nrows, examples, truncated, targets;
    size_t span;        /* the most tokens one row reads */
    uint8_t *flags;     /* one row's flags */
};

#define SCAN_TOKENS ((size_t)1 << 16) /* tokens read at a time when checking a shard */
#define INT32_RANGE 0x80000000u       /* tokens come out as int32: a uint32 one must be below 2^31 */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Folds n bytes (a multiple of 8 except at the end of a shard) into h. */
static uint64_t hash_bytes(uint64_t h, const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix64(h ^ w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = mix64(h ^ w ^ ((uint64_t)(n - i) << 56));
    }
    return h;
}

static ferry_status grow_shards(tok_loader *l)
{
    if (l->nshards < l->cap_shards)
        return FERRY_OK;
    size_t cap = l->cap_shards ? l->cap_shards * 2 : 8;
    loader_shard *s = realloc(l->shards, cap * sizeof *s);
    if (!s)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot grow the shard list to %zu", cap);
    l->shards = s;
    l->cap_shards = cap;
    return FERRY_OK;
}

/* Opens a shard without blocking on a FIFO, and keeps only regular files. */
static ferry_status open_regular(loader_shard *s, struct stat *sb)
{
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (s->fd < 0)
        return err_set(FERRY_ERR_IO, "cannot open token shard '%s': %s%s", s->path, strerror(errno),
                       errno == EMFILE ? " (one descriptor per shard: raise ulimit -n or merge shards)" : "");
    if (fstat(s->fd, sb) != 0)
        return err_set(FERRY_ERR_IO, "cannot read token shard '%s': %s", s->path, strerror(errno));
    if (!S_ISREG(sb->st_mode))
        return err_set(FERRY_ERR_IO, "token shard '%s' is not a regular file (a folder, FIFO or device); "
                       "give shard files", s->path);
    return FERRY_OK;
}

static ferry_status open_shard(tok_loader *l, const char *path)
{
    ferry_status st = grow_shards(l);
    if (st != FERRY_OK)
        return st;
    loader_shard *s = &l->shards[l->nshards];
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->path = strdup(path);
    if (!s->path)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot copy the path '%s'", path);
    l->nshards++; /* owned from here on: tok_loader_close releases it */
    struct stat sb;
    if ((st = open_regular(s, &sb)) != FERRY_OK)
        return st;
    char head[TOK_SHARD_HEADER_BYTES];
    ssize_t got = pread(s->fd, head, sizeof head, 0);
    if (got < 0)
        return err_set(FERRY_ERR_IO, "cannot read token shard '%s': %s", path, strerror(errno));
    s->size = (uint64_t)sb.st_size;
    s->mtime = sb.st_mtim;
    if ((st = tok_shard_read_header(path, head, (size_t)got, s->size, &s->hdr)) != FERRY_OK)
        return st;
    s->count = s->hdr.count;
    s->format = s->hdr.format;
    s->tok_bytes = tok_shard_token_bytes(s->format);
    const loader_shard *first = &l->shards[0];
    if (s->format != first->format)
        return err_set(FERRY_ERR_FORMAT, "token shards '%s' (%s) and '%s' (%s) are of two formats; one loader "
                       "reads shards of one format, written with one tokenizer: give shards of one kind",
                       first->path, tok_shard_format_name(first->format), path, tok_shard_format_name(s->format));
    return FERRY_OK;
}

/* Reads n tokens from token index `first` of s into buf; FERRY_ERR_IO naming
 * the shard when the file no longer has them. */
static ferry_status read_tokens(const loader_shard *s, uint64_t first, size_t n, void *buf)
{
    size_t want = n * s->tok_bytes, done = 0;
    off_t at = (off_t)(TOK_SHARD_HEADER_BYTES + s->tok_bytes * first);
    while (done < want) {
        ssize_t r = pread(s->fd, (char *)buf + done, want - done, at + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return err_set(FERRY_ERR_IO, "token shard '%s': cannot read tokens %llu..%llu: %s; the file was "
                           "cut short or changed after it was opened (%llu bytes then); restore it, or start "
                           "again on data that does not change", s->path, (unsigned long long)first,
                           (unsigned long long)(first + n - 1), r < 0 ? strerror(errno) : "end of file",
                           (unsigned long long)s->size);
        done += (size_t)r;
    }
    return FERRY_OK;
}

static uint32_t token_at(const void *t, size_t tok_bytes, size_t i)
{
    return tok_bytes == 2 ? ((const uint16_t *)t)[i] : ((const uint32_t *)t)[i];
}

/* Every token of t[0..n), the shard's tokens from index `first` on, must be
 * below the loader's bound; FERRY_ERR_FORMAT naming the first that is not. */
static ferry_status check_range(const tok_loader *l, const loader_shard *s, const void *t, size_t n, uint64_t first)
{
    size_t i = 0;
    if (s->tok_bytes == 2)
        for (const uint16_t *p = t; i < n && p[i] < l->vocab; i++)
            ;
    else
        for (const uint32_t *p = t; i < n && p[i] < l->vocab; i++)
            ;
    if (i == n)
        return FERRY_OK;
    uint64_t k = first + i;
    return err_set(FERRY_ERR_FORMAT, "token shard '%s': token %u at index %llu (byte offset %llu) is not below %s "
                   "%u; wrong tokenizer or a corrupt file", s->path, token_at(t, s->tok_bytes, i),
                   (unsigned long long)k, (unsigned long long)(TOK_SHARD_HEADER_BYTES + s->tok_bytes * k),
                   l->cfg.vocab_size ? "the vocabulary size" : "2^31, the range of the loader's int32 batches",
                   l->vocab);
}

/* Reads n bytes at `offset` of a masked shard's `part` ("flags", "example
 * starts"); FERRY_ERR_IO naming the shard when the file no longer has them. */
static ferry_status read_part(const loader_shard *s, uint64_t offset, size_t n, void *buf, const char *part)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(s->fd, (char *)buf + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return err_set(FERRY_ERR_IO, "masked token shard '%s': cannot read %zu bytes of its %s at byte %llu: "
                           "%s; the file was cut short or changed after it was opened (%llu bytes then)", s->path, n,
                           part, (unsigned long long)offset, r < 0 ? strerror(errno) : "end of file",
                           (unsigned long long)s->size);
        done += (size_t)r;
    }
    return FERRY_OK;
}

/* A masked shard's starts (kept, with the token count after them) and
 * flags (checked a block at a time, hashed into *h). */
static ferry_status scan_masked(loader_shard *s, uint64_t *h)
{
    const tok_shard_header *hd = &s->hdr;
    if (!(s->starts = malloc((hd->examples + 1) * sizeof *s->starts)))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold the %llu example starts of '%s'",
                       (unsigned long long)hd->examples, s->path);
    ferry_status st = read_part(s, tok_shard_starts_offset(hd), hd->examples * 4, s->starts, "example starts");
    if (st == FERRY_OK)
        st = tok_shard_check_starts(s->path, hd, s->starts);
    s->starts[hd->examples] = (uint32_t)hd->count;
    *h = hash_bytes(*h, (const unsigned char *)s->starts, hd->examples * 4);
    uint8_t *buf = st == FERRY_OK ? malloc(SCAN_TOKENS) : NULL;
    if (st == FERRY_OK && !buf)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a buffer to check the mask of '%s'", s->path);
    uint64_t targets = 0;
    size_t next = 0;
    for (uint64_t at = 0; st == FERRY_OK && at < hd->count; at += SCAN_TOKENS) {
        size_t n = hd->count - at < SCAN_TOKENS ? (size_t)(hd->count - at) : SCAN_TOKENS;
        st = read_part(s, tok_shard_flags_offset(hd) + at, n, buf, "flags");
        if (st == FERRY_OK)
            st = tok_shard_check_flags(s->path, hd, s->starts, buf, n, at, &next, &targets);
        *h = hash_bytes(*h, buf, n);
    }
    free(buf);
    if (st == FERRY_OK && targets != hd->targets)
        st = err_set(FERRY_ERR_FORMAT, "masked token shard '%s': the header claims %llu targets, and the mask flags "
                     "%llu tokens: a mask that does not match its header", s->path,
                     (unsigned long long)hd->targets, (unsigned long long)targets);
    return st;
}

/* Reads every token once: each must be below the vocabulary, and their bytes
 * give the shard's content hash (part of the loader's layout; GPT-2 shards'
 * hash is what it was before Llama 3's format was read, so saved positions
 * still seek). */
static ferry_status scan_shard(const tok_loader *l, loader_shard *s)
{
    void *buf = malloc(SCAN_TOKENS * s->tok_bytes);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a buffer to check token shard '%s'", s->path);
    ferry_status st = FERRY_OK;
    uint64_t h = mix64(s->count ^ 0x5EED5EED5EED5EEDull ^ ((uint64_t)s->format << 62));
    for (uint64_t at = 0; st == FERRY_OK && at < s->count; at += SCAN_TOKENS) {
        size_t n = s->count - at < SCAN_TOKENS ? (size_t)(s->count - at) : SCAN_TOKENS;
        st = read_tokens(s, at, n, buf);
        if (st == FERRY_OK)
            st = check_range(l, s, buf, n, at);
        h = hash_bytes(h, buf, n * s->tok_bytes);
    }
    free(buf);
    if (st == FERRY_OK && tok_shard_is_masked(s->format))
        st = scan_masked(s, &h);
    s->hash = h;
    return st;
}

static ferry_status add_pattern(tok_loader *l, const char *pattern)
{
    glob_t g;
    int rc = glob(pattern, GLOB_NOCHECK, NULL, &g);
    if (rc != 0) {
        globfree(&g);
        return err_set(FERRY_ERR_IO, "cannot expand the shard pattern '%s'", pattern);
    }
    ferry_status st = FERRY_OK;
    /* GLOB_NOCHECK gives the pattern back when nothing matches: a pattern with
     * wildcards that is not itself a file matched nothing. */
    struct stat sb;
    if (g.gl_pathc == 1 && strcmp(g.gl_pathv[0], pattern) == 0 && strpbrk(pattern, "*?[") &&
        stat(pattern, &sb) != 0)
        st = err_set(FERRY_ERR_IO, "no file matches the shard pattern '%s': check the folder and the names (tokenize "
                     "writes train_NNNNNN.bin and val_NNNNNN.bin)", pattern);
    for (size_t i = 0; st == FERRY_OK && i < g.gl_pathc; i++)
        st = open_shard(l, g.gl_pathv[i]);
    globfree(&g);
    return st;
}

static void index_windows(tok_loader *l)
{
    uint64_t bt = (uint64_t)l->cfg.batch * (uint64_t)l->cfg.seq_len;
    uint64_t h = mix64(bt ^ ((uint64_t)l->cfg.seq_len << 40) ^ (uint64_t)l->cfg.shuffle);
    h = mix64(h ^ (l->cfg.shuffle ? l->cfg.seed : 0));
    l->windows = l->tokens = 0;
    for (size_t i = 0; i < l->nshards; i++) {
        loader_shard *s = &l->shards[i];
        s->first_window = l->windows;
        s->windows = s->count > bt ? (s->count - 1) / bt : 0;
        l->windows += s->windows;
        l->tokens += s->count;
        h = mix64(h ^ s->count);
        h = mix64(h ^ s->hash);
    }
    l->layout = h;
}

static ferry_status push_row(tok_loader *l, uint64_t *cap, loader_row r)
{
    if (l->nrows == *cap) {
        uint64_t n = *cap ? 2 * *cap : 64;
        loader_row *p = realloc(l->rows, n * sizeof *p);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold the index of %llu rows", (unsigned long long)n);
        l->rows = p;
        *cap = n;
    }
    l->rows[l->nrows++] = r;
    return FERRY_OK;
}

static ferry_status too_long(const tok_loader *l, const loader_shard *s, uint64_t k, uint64_t len)
{
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "masked token shard '%s': example %llu (tokens %u..%llu) has %llu "
                   "tokens, more than --seq %d + 1 (an example of L tokens fills L-1 positions); give --too-long "
                   "truncate to keep its first %d, a larger --seq, or tokenize with --seq", s->path,
                   (unsigned long long)k, s->starts[k], (unsigned long long)(s->starts[k] + len - 1),
                   (unsigned long long)len, l->cfg.seq_len, l->cfg.seq_len + 1);
}

/* One shard's examples into rows of T slots: greedy in order, one a row
 * with no_pack; an example over T+1 tokens alone, truncated, or refused. */
static ferry_status shard_rows(tok_loader *l, uint32_t si, uint64_t *cap)
{
    loader_shard *s = &l->shards[si];
    uint64_t T = (uint64_t)l->cfg.seq_len, used = 0;
    loader_row cur = {si, 0, 0};
    ferry_status st = FERRY_OK;
    for (uint64_t k = 0; st == FERRY_OK && k < s->hdr.examples; k++) {
        uint64_t len = (uint64_t)s->starts[k + 1] - s->starts[k], slots = len - 1;
        bool over = slots > T;
        if (over && l->cfg.too_long == TOK_TOO_LONG_REFUSE)
            return too_long(l, s, k, len);
        if (cur.count > 0 && (over || l->cfg.no_pack || used + slots > T)) {
            st = push_row(l, cap, cur);
            cur.count = 0;
        }
        if (st == FERRY_OK && over) { /* its first T+1 tokens, alone in a row */
            l->truncated++;
            l->span = (size_t)T + 1 > l->span ? (size_t)T + 1 : l->span;
            st = push_row(l, cap, (loader_row){si, (uint32_t)k, 1});
            continue;
        }
        if (cur.count == 0) {
            cur.first = (uint32_t)k;
            used = 0;
        }
        cur.count++;
        used += slots;
        uint64_t span = (uint64_t)s->starts[k + 1] - s->starts[cur.first];
        l->span = span > l->span ? (size_t)span : l->span;
    }
    if (st == FERRY_OK && cur.count > 0)
        st = push_row(l, cap, cur);
    return st;
}

/* The rows of every masked shard; batches of B rows; the layout. */
static ferry_status index_rows(tok_loader *l)
{
    uint64_t B = (uint64_t)l->cfg.batch, cap = 0;
    uint64_t h = mix64(B * (uint64_t)l->cfg.seq_len ^ ((uint64_t)l->cfg.seq_len << 40) ^ (uint64_t)l->cfg.shuffle);
    h = mix64(h ^ (l->cfg.shuffle ? l->cfg.seed : 0));
    h = mix64(h ^ 0x4D41534Bull ^ ((uint64_t)(l->cfg.no_pack != 0) << 8) ^ ((uint64_t)l->cfg.too_long << 9));
    ferry_status st = FERRY_OK;
    for (size_t i = 0; st == FERRY_OK && i < l->nshards; i++) {
        loader_shard *s = &l->shards[i];
        st = shard_rows(l, (uint32_t)i, &cap);
        l->tokens += s->count;
        l->examples += s->hdr.examples;
        l->targets += s->hdr.targets;
        h = mix64(h ^ s->count);
        h = mix64(h ^ s->hash);
    }
    l->windows = (l->nrows + B - 1) / B;
    l->layout = h;
    return st;
}

/* Fisher-Yates from a generator seeded by (seed, epoch). */
static void build_perm(tok_loader *l, uint64_t epoch)
{
    uint64_t state = mix64(l->cfg.seed ^ mix64(epoch + 0x9E3779B97F4A7C15ull));
    for (uint64_t i = 0; i < l->windows; i++)
        l->perm[i] = (uint32_t)i;
    for (uint64_t i = l->windows; i > 1; i--) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t r = mix64(state);
        uint64_t j = (uint64_t)(((unsigned __int128)r * i) >> 64);
        uint32_t t = l->perm[i - 1];
        l->perm[i - 1] = l->perm[j];
        l->perm[j] = t;
    }
    l->perm_epoch = epoch;
}

static ferry_status check_config(const tok_loader_config *c)
{
    if (!c || !c->paths || c->npaths == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the loader needs at least one shard path or pattern");
    if (c->batch < 1 || c->seq_len < 1 || (uint64_t)c->batch * (uint64_t)c->seq_len > (1ull << 31))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "batch %d x seq_len %d: both must be >= 1 and B*T <= 2^31",
                       c->batch, c->seq_len);
    if (c->too_long != TOK_TOO_LONG_REFUSE && c->too_long != TOK_TOO_LONG_TRUNCATE)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "too_long %d is not TOK_TOO_LONG_REFUSE or _TRUNCATE",
                       (int)c->too_long);
    if (c->vocab_size > INT32_RANGE)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "vocab_size %u must be at most 2^31 (tokens come out as int32), "
                       "or 0 for the shards' whole range", c->vocab_size);
    return FERRY_OK;
}

ferry_status tok_loader_open(const tok_loader_config *cfg, tok_loader **out)
{
    *out = NULL;
    ferry_status st = check_config(cfg);
    if (st != FERRY_OK)
        return st;
    tok_loader *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the data loader");
    l->cfg = *cfg;
    l->cfg.paths = NULL; /* not kept: the caller's array may go away */
    for (size_t i = 0; st == FERRY_OK && i < cfg->npaths; i++)
        st = add_pattern(l, cfg->paths[i]);
    if (st == FERRY_OK) {
        l->vocab = cfg->vocab_size ? cfg->vocab_size : l->shards[0].tok_bytes == 2 ? 65536 : INT32_RANGE;
        l->masked = tok_shard_is_masked(l->shards[0].format);
    }
    for (size_t i = 0; st == FERRY_OK && i < l->nshards; i++)
        st = scan_shard(l, &l->shards[i]);
    if (st == FERRY_OK && l->masked) {
        st = index_rows(l);
        if (st == FERRY_OK && l->windows == 0)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "%zu masked shard(s) ('%s'%s) hold no example; tokenize some "
                         "instruction data (tokenize --jsonl)", l->nshards, l->shards[0].path,
                         l->nshards > 1 ? ", ..." : "");
        else if (st == FERRY_OK && l->windows > UINT32_MAX)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "%llu batches per epoch exceed 2^32; use a larger batch",
                         (unsigned long long)l->windows);
        if (st == FERRY_OK && (!(l->window = malloc(l->span * l->shards[0].tok_bytes)) ||
                               !(l->flags = malloc(l->span))))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a row of %zu tokens", l->span);
    } else if (st == FERRY_OK) {
        index_windows(l);
        if (l->windows == 0)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "%zu shard(s) ('%s'%s) with %llu tokens hold no batch of "
                         "B*T+1 = %llu tokens within one shard; use a smaller --batch or --seq, or more data", l->nshards,
                         l->shards[0].path, l->nshards > 1 ? ", ..." : "",
                         (unsigned long long)l->tokens, (unsigned long long)cfg->batch * cfg->seq_len + 1);
        else if (l->windows > UINT32_MAX)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "%llu batches per epoch exceed 2^32; use a larger batch",
                         (unsigned long long)l->windows);
    }
    if (st == FERRY_OK && !l->masked &&
        !(l->window = malloc(((size_t)cfg->batch * (size_t)cfg->seq_len + 1) * l->shards[0].tok_bytes)))
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a batch of %d x %d tokens", cfg->batch, cfg->seq_len);
    if (st == FERRY_OK && cfg->shuffle) {
        l->perm = malloc(l->windows * sizeof *l->perm);
        if (!l->perm)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the order of %llu batches",
                         (unsigned long long)l->windows);
        else
            build_perm(l, 0);
    }
    if (st != FERRY_OK) {
        tok_loader_close(l);
        return st;
    }
    *out = l;
    return FERRY_OK;
}

void tok_loader_close(tok_loader *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->nshards; i++) {
        if (l->shards[i].fd >= 0)
            close(l->shards[i].fd);
        free(l->shards[i].path);
        free(l->shards[i].starts);
    }
    free(l->shards);
    free(l->perm);
    free(l->window);
    free(l->flags);
    free(l->rows);
    free(l);
}

uint64_t tok_loader_batches_per_epoch(const tok_loader *l) { return l->windows; }
tok_shard_format tok_loader_format(const tok_loader *l) { return l->shards[0].format; }
uint64_t tok_loader_tokens(const tok_loader *l) { return l->tokens; }
uint64_t tok_loader_target_tokens(const tok_loader *l) { return l->masked ? l->targets : l->tokens; }
uint64_t tok_loader_examples(const tok_loader *l) { return l->examples; }
uint64_t tok_loader_truncated(const tok_loader *l) { return l->truncated; }
uint64_t tok_loader_rows(const tok_loader *l) { return l->nrows; }

ferry_status tok_too_long_parse(const char *s, tok_too_long *out)
{
    if (s && strcmp(s, "refuse") == 0)
        *out = TOK_TOO_LONG_REFUSE;
    else if (s && strcmp(s, "truncate") == 0)
        *out = TOK_TOO_LONG_TRUNCATE;
    else
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--too-long '%s' must be 'truncate' or 'refuse'", s ? s : "");
    return FERRY_OK;
}
size_t tok_loader_shard_count(const tok_loader *l) { return l->nshards; }
tok_loader_batch_info tok_loader_last(const tok_loader *l) { return l->last; }

static const loader_shard *shard_of_window(const tok_loader *l, uint64_t w)
{
    size_t lo = 0, hi = l->nshards;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (l->shards[mid].first_window <= w)
            lo = mid;
        else
            hi = mid;
    }
    while (l->shards[lo].windows == 0 || w >= l->shards[lo].first_window + l->shards[lo].windows)
        lo++; /* skip shards without windows that share a first_window */
    return &l->shards[lo];
}

/* The shard must still be the file that was checked at open: same size,
 * same modification time. Rewriting it in place changes one or the other. */
static ferry_status check_unchanged(const loader_shard *s)
{
    struct stat sb;
    if (fstat(s->fd, &sb) != 0)
        return err_set(FERRY_ERR_IO, "token shard '%s': %s", s->path, strerror(errno));
    if ((uint64_t)sb.st_size != s->size || sb.st_mtim.tv_sec != s->mtime.tv_sec ||
        sb.st_mtim.tv_nsec != s->mtime.tv_nsec)
        return err_set(FERRY_ERR_IO, "token shard '%s' was changed while training (%llu bytes when opened, %llu "
                       "now%s): its batches are no longer the data the run started with; restore it, or start "
                       "again on data that does not change (write new shards beside it, as tokenize does)",
                       s->path, (unsigned long long)s->size, (unsigned long long)sb.st_size,
                       (uint64_t)sb.st_size == s->size ? ", rewritten in place" : "");
    return FERRY_OK;
}

/* Inputs are w[0..bt), targets w[1..bt]; returns the largest token of
 * w[0..bt], taken in the same pass, for the caller's vocabulary check. */
static uint32_t convert_window(const void *w, size_t tok_bytes, size_t bt, int32_t *inputs, int32_t *targets)
{
    uint32_t top = token_at(w, tok_bytes, 0);
    if (tok_bytes == 2)
        for (const uint16_t *p = w; bt > 0; bt--, p++, inputs++, targets++) {
            *inputs = p[0];
            *targets = p[1];
            top = p[1] > top ? p[1] : top;
        }
    else
        for (const uint32_t *p = w; bt > 0; bt--, p++, inputs++, targets++) {
            *inputs = (int32_t)p[0];
            *targets = (int32_t)p[1];
            top = p[1] > top ? p[1] : top;
        }
    return top;
}

/* Slots j..T-1 of a row: padding, a segment of its own. */
static void pad_row(int T, int j, int32_t *in, int32_t *tg, int32_t *pos)
{
    for (int p = 0; j < T; j++, p++) {
        in[j] = 0;
        tg[j] = -1;
        if (pos)
            pos[j] = p;
    }
}

/* One row of masked examples into in/tg/pos[0..T); *targets counts its
 * targets. The examples' tokens are read with their flags. */
static ferry_status fill_row(tok_loader *l, const loader_row *r, int32_t *in, int32_t *tg, int32_t *pos,
                             uint64_t *targets)
{
    const loader_shard *s = &l->shards[r->shard];
    int T = l->cfg.seq_len, j = 0;
    uint64_t a = s->starts[r->first], end = s->starts[r->first + r->count];
    size_t span = (size_t)(end - a) > (size_t)T + 1 && r->count == 1 ? (size_t)T + 1 : (size_t)(end - a);
    ferry_status st = check_unchanged(s);
    if (st == FERRY_OK) st = read_tokens(s, a, span, l->window);
    if (st == FERRY_OK) st = read_part(s, tok_shard_flags_offset(&s->hdr) + a, span, l->flags, "flags");
    if (st != FERRY_OK)
        return st;
    uint32_t top = 0;
    for (uint32_t e = r->first; e < r->first + r->count; e++) {
        size_t es = s->starts[e] - a, ee = s->starts[e + 1] - a < span ? s->starts[e + 1] - a : span;
        for (size_t i = es; i + 1 < ee && j < T; i++, j++) { /* j < T: only a truncated example reaches it */
            uint32_t x = token_at(l->window, s->tok_bytes, i), y = token_at(l->window, s->tok_bytes, i + 1);
            top = x > top ? x : top;
            top = y > top ? y : top;
            in[j] = (int32_t)x;
            tg[j] = l->flags[i + 1] ? (int32_t)y : -1;
            *targets += l->flags[i + 1];
            if (pos)
                pos[j] = (int32_t)(i - es);
        }
    }
    if (top >= l->vocab)
        return check_range(l, s, l->window, span, a); /* only to name the token: the batch is refused */
    pad_row(T, j, in, tg, pos);
    return FERRY_OK;
}

static ferry_status next_masked(tok_loader *l, uint64_t w, int32_t *inputs, int32_t *targets, int32_t *positions)
{
    int B = l->cfg.batch, T = l->cfg.seq_len;
    uint64_t count = 0, examples = 0;
    ferry_status st = FERRY_OK;
    for (int b = 0; b < B && st == FERRY_OK; b++) {
        uint64_t ri = w * (uint64_t)B + (uint64_t)b;
        size_t o = (size_t)b * (size_t)T;
        if (ri >= l->nrows) {
            pad_row(T, 0, inputs + o, targets + o, positions ? positions + o : NULL);
            continue;
        }
        st = fill_row(l, &l->rows[ri], inputs + o, targets + o, positions ? positions + o : NULL, &count);
        examples += l->rows[ri].count;
    }
    if (st != FERRY_OK)
        return st;
    const loader_row *r0 = &l->rows[w * (uint64_t)B];
    const loader_shard *s0 = &l->shards[r0->shard];
    l->last = (tok_loader_batch_info){s0->path, s0->starts[r0->first], l->epoch, l->index, count, examples};
    return FERRY_OK;
}

static ferry_status next_stream(tok_loader *l, uint64_t w, int32_t *inputs, int32_t *targets, int32_t *positions)
{
    const loader_shard *s = shard_of_window(l, w);
    size_t bt = (size_t)l->cfg.batch * (size_t)l->cfg.seq_len;
    uint64_t off = (w - s->first_window) * bt;
    ferry_status st = check_unchanged(s);
    if (st == FERRY_OK)
        st = read_tokens(s, off, bt + 1, l->window);
    if (st == FERRY_OK && convert_window(l->window, s->tok_bytes, bt, inputs, targets) >= l->vocab)
        st = check_range(l, s, l->window, bt + 1, off); /* only to name the token: the batch is refused */
    if (st != FERRY_OK)
        return st;
    for (size_t i = 0; positions && i < bt; i++)
        positions[i] = (int32_t)(i % (size_t)l->cfg.seq_len);
    l->last = (tok_loader_batch_info){s->path, off, l->epoch, l->index, bt, 0};
    return FERRY_OK;
}

ferry_status tok_loader_next_ex(tok_loader *l, int32_t *inputs, int32_t *targets, int32_t *positions)
{
    if (!inputs || !targets)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tok_loader_next needs inputs and targets buffers of B*T int32");
    if (l->cfg.shuffle && l->perm_epoch != l->epoch)
        build_perm(l, l->epoch);
    uint64_t w = l->cfg.shuffle ? l->perm[l->index] : l->index;
    ferry_status st = l->masked ? next_masked(l, w, inputs, targets, positions)
                                : next_stream(l, w, inputs, targets, positions);
    if (st != FERRY_OK)
        return st;
    if (++l->index == l->windows) {
        l->index = 0;
        l->epoch++;
    }
    return FERRY_OK;
}

ferry_status tok_loader_next(tok_loader *l, int32_t *inputs, int32_t *targets)
{
    return tok_loader_next_ex(l, inputs, targets, NULL);
}

tok_loader_pos tok_loader_tell(const tok_loader *l)
{
    return (tok_loader_pos){l->epoch, l->index, l->layout};
}

ferry_status tok_loader_seek(tok_loader *l, const tok_loader_pos *pos)
{
    if (!pos || pos->layout != l->layout)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loader position was saved for other data or settings "
                       "(layout %016llx, this loader %016llx): the same shards with the same tokens, batch, "
                       "seq_len, shuffle and seed (and for instruction data the same --no-pack and --too-long) are "
                       "needed",
                       pos ? (unsigned long long)pos->layout : 0ull, (unsigned long long)l->layout);
    if (pos->index >= l->windows)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "loader position batch %llu is past the epoch's %llu batches",
                       (unsigned long long)pos->index, (unsigned long long)l->windows);
    l->epoch = pos->epoch;
    l->index = pos->index;
    return FERRY_OK;
}

void tok_loader_reset(tok_loader *l)
{
    l->epoch = 0;
    l->index = 0;
}
