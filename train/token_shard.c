/* Writing and checking llm.c token shards in both formats, and replacing a
 * folder's shard set as a whole (see token_shard.h). */
#include "train/token_shard.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"

static const struct {
    int32_t magic, version;
    size_t token_bytes;
    const char *name;
} formats[] = {
    [TOK_SHARD_GPT2] = {TOK_SHARD_MAGIC, TOK_SHARD_VERSION, 2, "GPT-2 (uint16 tokens)"},
    [TOK_SHARD_LLAMA3] = {TOK_SHARD_LLAMA3_MAGIC, TOK_SHARD_LLAMA3_VERSION, 4, "Llama 3 (uint32 tokens)"},
    [TOK_SHARD_MASKED16] = {TOK_SHARD_MASKED_MAGIC, TOK_SHARD_MASKED_VERSION, 2, "masked (uint16 tokens)"},
    [TOK_SHARD_MASKED32] = {TOK_SHARD_MASKED_MAGIC, TOK_SHARD_MASKED_VERSION, 4, "masked (uint32 tokens)"},
};
#define NFORMATS (sizeof formats / sizeof *formats)
#define MASKED_WORDS 6 /* header words the masked format uses; the rest are zero */

size_t tok_shard_token_bytes(tok_shard_format f) { return formats[f].token_bytes; }
const char *tok_shard_format_name(tok_shard_format f) { return formats[f].name; }
int tok_shard_is_masked(tok_shard_format f) { return f == TOK_SHARD_MASKED16 || f == TOK_SHARD_MASKED32; }

static ferry_status write_shard(const char *path, tok_shard_format f, const void *tokens, size_t n)
{
    if (n > TOK_SHARD_MAX_TOKENS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "shard '%s': %zu tokens exceed the format's %u per shard; "
                       "use a smaller --shard-tokens", path, n, TOK_SHARD_MAX_TOKENS);
    int32_t header[256];
    memset(header, 0, sizeof header);
    header[0] = formats[f].magic;
    header[1] = formats[f].version;
    header[2] = (int32_t)n;
    fileio_atomic a;
    ferry_status st = fileio_atomic_open(&a, path);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, header, sizeof header);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, tokens, n * formats[f].token_bytes);
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    return st;
}

ferry_status tok_shard_write(const char *path, const uint16_t *tokens, size_t n)
{
    return write_shard(path, TOK_SHARD_GPT2, tokens, n);
}

ferry_status tok_shard_write_u32(const char *path, const uint32_t *tokens, size_t n)
{
    return write_shard(path, TOK_SHARD_LLAMA3, tokens, n);
}

/* Examples the masked format can hold, checked before a byte is written. */
static ferry_status check_examples(const char *path, tok_shard_format f, const tok_shard_examples *ex)
{
    if (ex->n > TOK_SHARD_MAX_TOKENS || ex->nexamples > ex->n || (ex->n > 0 && ex->nexamples == 0))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "masked shard '%s': %zu tokens in %zu examples; a shard holds "
                       "1..%u tokens in 1..tokens examples (or none of either)", path, ex->n, ex->nexamples,
                       TOK_SHARD_MAX_TOKENS);
    tok_shard_header h = {f, ex->n, ex->nexamples, 0};
    ferry_status st = tok_shard_check_starts(path, &h, ex->starts);
    size_t next = 0;
    if (st == FERRY_OK)
        st = tok_shard_check_flags(path, &h, ex->starts, ex->target, ex->n, 0, &next, &h.targets);
    for (size_t i = 0; st == FERRY_OK && f == TOK_SHARD_MASKED16 && i < ex->n; i++)
        if (ex->tokens[i] > UINT16_MAX)
            st = err_set(FERRY_ERR_INVALID_ARGUMENT, "masked shard '%s': token %u at %zu does not fit uint16; "
                         "write the uint32 format", path, ex->tokens[i], i);
    return st == FERRY_OK ? st : err_set(FERRY_ERR_INVALID_ARGUMENT, "%s", ferry_last_error());
}

/* The tokens in the format's width, a block at a time. */
static ferry_status write_tokens(fileio_atomic *a, tok_shard_format f, const uint32_t *t, size_t n)
{
    if (formats[f].token_bytes == 4)
        return fileio_atomic_write(a, t, n * 4);
    uint16_t buf[4096];
    ferry_status st = FERRY_OK;
    for (size_t at = 0; st == FERRY_OK && at < n; at += 4096) {
        size_t k = n - at < 4096 ? n - at : 4096;
        for (size_t i = 0; i < k; i++)
            buf[i] = (uint16_t)t[at + i];
        st = fileio_atomic_write(a, buf, k * 2);
    }
    return st;
}

ferry_status tok_shard_write_masked(const char *path, tok_shard_format f, const tok_shard_examples *ex)
{
    if (!tok_shard_is_masked(f))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "masked shard '%s': format %s is not a masked one", path,
                       formats[f].name);
    ferry_status st = check_examples(path, f, ex);
    if (st != FERRY_OK)
        return st;
    size_t targets = 0;
    for (size_t i = 0; i < ex->n; i++)
        targets += ex->target[i];
    int32_t header[256];
    memset(header, 0, sizeof header);
    header[0] = TOK_SHARD_MASKED_MAGIC;
    header[1] = TOK_SHARD_MASKED_VERSION;
    header[2] = (int32_t)ex->n;
    header[3] = (int32_t)formats[f].token_bytes;
    header[4] = (int32_t)ex->nexamples;
    header[5] = (int32_t)targets;
    fileio_atomic a;
    st = fileio_atomic_open(&a, path);
    if (st == FERRY_OK) st = fileio_atomic_write(&a, header, sizeof header);
    if (st == FERRY_OK) st = write_tokens(&a, f, ex->tokens, ex->n);
    if (st == FERRY_OK) st = fileio_atomic_write(&a, ex->target, ex->n);
    if (st == FERRY_OK) st = fileio_atomic_write(&a, ex->starts, ex->nexamples * 4);
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    return st;
}

/* The head of a file is text: printable ASCII, blanks, or bytes of UTF-8
 * above 0x7F, and no NUL (a shard's header is mostly zeros). */
static bool looks_like_text(const void *head, size_t have)
{
    const unsigned char *p = head;
    size_t n = have < 512 ? have : 512;
    for (size_t i = 0; i < n; i++)
        if (!(p[i] >= 0x20 || p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
            return false;
    return n > 0;
}

/* The format whose magic heads the file, or NFORMATS for none. */
static size_t format_of_magic(const void *head, size_t have)
{
    int32_t magic;
    if (have < sizeof magic)
        return NFORMATS;
    memcpy(&magic, head, sizeof magic);
    size_t f = 0;
    while (f < NFORMATS && formats[f].magic != magic)
        f++;
    return f;
}

/* A masked header past its magic and version: the token width, the counts,
 * the reserved words and the size. */
static ferry_status check_masked(const char *path, const int32_t *h, uint64_t file_size, tok_shard_header *out)
{
    if (h[3] != 2 && h[3] != 4)
        return err_set(FERRY_ERR_FORMAT, "masked token shard '%s' says %d bytes per token; the format has 2 or 4",
                       path, h[3]);
    for (int k = MASKED_WORDS; k < 256; k++)
        if (h[k] != 0)
            return err_set(FERRY_ERR_FORMAT, "masked token shard '%s' has %d in reserved header word %d, which "
                           "version %d keeps 0: a damaged header, or a newer ferry's", path, h[k], k,
                           TOK_SHARD_MASKED_VERSION);
    if (h[2] < 0 || h[4] < 0 || h[5] < 0)
        return err_set(FERRY_ERR_FORMAT, "masked token shard '%s' claims a negative count (tokens %d, examples %d, "
                       "targets %d)", path, h[2], h[4], h[5]);
    if (h[4] > h[2] || h[5] > h[2] || (h[2] > 0 && h[4] == 0))
        return err_set(FERRY_ERR_FORMAT, "masked token shard '%s' claims %d examples and %d targets for %d tokens: "
                       "every token belongs to an example, and there are no more examples or targets than tokens",
                       path, h[4], h[5], h[2]);
    out->format = h[3] == 2 ? TOK_SHARD_MASKED16 : TOK_SHARD_MASKED32;
    out->count = (uint64_t)h[2];
    out->examples = (uint64_t)h[4];
    out->targets = (uint64_t)h[5];
    uint64_t want = tok_shard_starts_offset(out) + 4 * out->examples;
    if (want != file_size)
        return err_set(FERRY_ERR_FORMAT, "masked token shard '%s' claims %d tokens (%d bytes each, and a flag byte "
                       "each) and %d example starts, %llu bytes with the header, but the file has %llu bytes: %s",
                       path, h[2], h[3], h[4], (unsigned long long)want, (unsigned long long)file_size,
                       want > file_size ? "the tokens, the mask or the starts are cut short"
                                        : "trailing bytes after the example starts");
    return FERRY_OK;
}

ferry_status tok_shard_read_header(const char *path, const void *head, size_t have, uint64_t file_size,
                                   tok_shard_header *out)
{
    *out = (tok_shard_header){0};
    size_t f = format_of_magic(head, have);
    if (file_size == 0)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' is empty; expected a 1024-byte header and uint16 or "
                       "uint32 tokens", path);
    if (f == NFORMATS && looks_like_text(head, have))
        return err_set(FERRY_ERR_FORMAT, "'%s' is text, not token shards: run tokenize on it first (build/tools/"
                       "tokenize/tokenize --out-dir DIR %s) and give the shards it writes", path, path);
    if (file_size < TOK_SHARD_HEADER_BYTES || have < TOK_SHARD_HEADER_BYTES)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' has %llu bytes, shorter than the 1024-byte header; "
                       "the file is truncated or not a shard", path, (unsigned long long)file_size);
    int32_t h[256];
    memcpy(h, head, sizeof h);
    if (f == NFORMATS)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' has magic %d, not %d (GPT-2, uint16 tokens), %d "
                       "(Llama 3, uint32 tokens) or %d (masked): not a token shard", path, h[0], TOK_SHARD_MAGIC,
                       TOK_SHARD_LLAMA3_MAGIC, TOK_SHARD_MASKED_MAGIC);
    if (h[1] != formats[f].version)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' has magic %d and version %d; that magic's version is %d "
                       "(%s), the only one read", path, h[0], h[1], formats[f].version,
                       tok_shard_is_masked((tok_shard_format)f) ? "the masked format" : formats[f].name);
    if (tok_shard_is_masked((tok_shard_format)f))
        return check_masked(path, h, file_size, out);
    if (h[2] < 0)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' claims a negative token count %d", path, h[2]);
    uint64_t want = (uint64_t)h[2] * formats[f].token_bytes + TOK_SHARD_HEADER_BYTES;
    if (want != file_size)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' claims %d tokens (%llu bytes with the header, %zu per "
                       "token) but the file has %llu bytes: %s", path, h[2], (unsigned long long)want,
                       formats[f].token_bytes, (unsigned long long)file_size,
                       want > file_size ? "truncated" : "trailing bytes after the tokens");
    out->format = (tok_shard_format)f;
    out->count = out->targets = (uint64_t)h[2];
    return FERRY_OK;
}

ferry_status tok_shard_check_header(const char *path, const void *head, size_t have, uint64_t file_size,
                                    uint64_t *count, tok_shard_format *format)
{
    tok_shard_header h;
    ferry_status st = tok_shard_read_header(path, head, have, file_size, &h);
    *count = h.count;
    if (st == FERRY_OK && format)
        *format = h.format;
    return st;
}

uint64_t tok_shard_flags_offset(const tok_shard_header *h)
{
    return TOK_SHARD_HEADER_BYTES + h->count * formats[h->format].token_bytes;
}

uint64_t tok_shard_starts_offset(const tok_shard_header *h) { return tok_shard_flags_offset(h) + h->count; }

ferry_status tok_shard_check_starts(const char *path, const tok_shard_header *h, const uint32_t *starts)
{
    for (uint64_t k = 0; k < h->examples; k++) {
        uint64_t lo = k == 0 ? 0 : (uint64_t)starts[k - 1] + 1;
        if ((k == 0 && starts[0] != 0) || starts[k] < lo || starts[k] >= h->count)
            return err_set(FERRY_ERR_FORMAT, "masked token shard '%s': example %llu starts at token %u; %s", path,
                           (unsigned long long)k, starts[k],
                           k == 0 && starts[0] != 0 ? "the first example starts at 0"
                           : starts[k] >= h->count ? "past the shard's tokens"
                                                   : "the starts must increase, one example after the other");
    }
    return FERRY_OK;
}

ferry_status tok_shard_check_flags(const char *path, const tok_shard_header *h, const uint32_t *starts,
                                   const uint8_t *flags, size_t n, uint64_t first, size_t *next, uint64_t *targets)
{
    uint64_t ones = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = first + i;
        while (*next < h->examples && starts[*next] < k)
            (*next)++;
        bool starts_here = *next < h->examples && starts[*next] == k;
        if (flags[i] > 1 || (starts_here && flags[i]))
            return err_set(FERRY_ERR_FORMAT, "masked token shard '%s': the target flag of token %llu (byte offset "
                           "%llu) is %u; %s", path, (unsigned long long)k,
                           (unsigned long long)(tok_shard_flags_offset(h) + k), flags[i],
                           flags[i] > 1 ? "a flag is 0 or 1: a damaged mask"
                                        : "it starts an example, and nothing in its example predicts it: a mask "
                                          "that does not match its tokens");
        ones += flags[i];
    }
    *targets += ones;
    return FERRY_OK;
}

/* ---- a folder's shard set ---- */

static const char *const set_splits[] = {"val", "train"};
#define SET_SPLITS 2

struct tok_shard_set {
    char *dir, *staging;
    char **names; /* final paths, DIR/NAME, in the order added */
    size_t n, cap;
    int count[SET_SPLITS];
    tok_shard_format format; /* of the shards added so far (when n > 0) */
};

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static const char *base_of(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* "val_000012.bin", "train_1000000.bin": a name of a shard set. */
static int is_set_name(const char *name)
{
    for (int k = 0; k < SET_SPLITS; k++) {
        size_t len = strlen(set_splits[k]), digits = 0;
        if (strncmp(name, set_splits[k], len) != 0 || name[len] != '_')
            continue;
        const char *p = name + len + 1;
        while (p[digits] >= '0' && p[digits] <= '9')
            digits++;
        if (digits >= 6 && strcmp(p + digits, ".bin") == 0)
            return 1;
    }
    return 0;
}

/* Unlinks every entry of the staging folder `dir` (it is ours alone).
 * Returns 0, or the errno of the first failure with *what naming it. */
static int empty_folder(const char *dir, const char **what)
{
    DIR *d = opendir(dir);
    if (!d) {
        *what = ".";
        return errno;
    }
    int e = 0;
    for (struct dirent *ent; !e && (ent = readdir(d)) != NULL;)
        if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..") && unlinkat(dirfd(d), ent->d_name, 0) != 0) {
            e = errno;
            *what = ent->d_name;
        }
    closedir(d);
    return e;
}

/* The output folder, made with the folders above it (mkdir -p); a link to
 * a folder is fine. */
static ferry_status make_out_dir(const char *dir)
{
    ferry_status st = fileio_check_output_dir(dir, "the output folder");
    if (st == FERRY_OK)
        st = fileio_make_dirs(dir);
    return st;
}

/* The staging folder is emptied: it must be a real folder, never a link,
 * whose target's files the emptying would remove. */
static ferry_status make_staging(const char *dir)
{
    struct stat sb;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return err_set(FERRY_ERR_IO, "cannot create the staging folder '%s': %s", dir, strerror(errno));
    if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return err_set(FERRY_ERR_IO, "the staging folder '%s' exists and is %s, not a folder; it is left as it is: "
                       "move it away", dir, fileio_type_name(sb.st_mode));
    if (access(dir, W_OK | X_OK) != 0)
        return err_set(FERRY_ERR_IO, "cannot write into the staging folder '%s': %s", dir, strerror(errno));
    return FERRY_OK;
}

/* The folder's present shards are replaced by rename and removed by unlink:
 * each must be a regular file. A link, a device or a folder with a shard's
 * name is refused before any work, and left as it is. */
static ferry_status check_present(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return err_set(FERRY_ERR_IO, "cannot list the output folder '%s': %s", dir, strerror(errno));
    ferry_status st = FERRY_OK;
    struct stat sb;
    for (struct dirent *e; st == FERRY_OK && (e = readdir(d)) != NULL;)
        if (is_set_name(e->d_name) && fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            !S_ISREG(sb.st_mode))
            st = err_set(FERRY_ERR_IO, "'%s/%s' is %s, not a shard file; a new shard set would replace it: move it "
                         "away (it is left as it is), or give another --out-dir", dir, e->d_name,
                         fileio_type_name(sb.st_mode));
    closedir(d);
    return st;
}

static void set_free(tok_shard_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->names[i]);
    free(s->names);
    free(s->dir);
    free(s->staging);
    free(s);
}

ferry_status tok_shard_set_begin(const char *dir, tok_shard_set **out)
{
    *out = NULL;
    tok_shard_set *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(dir)) || !(s->staging = join(dir, TOK_SHARD_STAGING))) {
        if (s)
            set_free(s);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a shard set for '%s'", dir);
    }
    ferry_status st = make_out_dir(dir);
    if (st == FERRY_OK)
        st = check_present(dir);
    if (st == FERRY_OK)
        st = make_staging(s->staging);
    const char *what = NULL;
    int e = st == FERRY_OK ? empty_folder(s->staging, &what) : 0;
    if (e)
        st = err_set(FERRY_ERR_IO, "cannot empty the staging folder '%s' (at '%s'), left by an earlier run: %s",
                     s->staging, what, strerror(e));
    if (st != FERRY_OK) {
        set_free(s);
        return st;
    }
    *out = s;
    return FERRY_OK;
}

static ferry_status add_name(tok_shard_set *s, const char *name)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        char **p = realloc(s->names, cap * sizeof *p);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot list %zu shards", cap);
        s->names = p;
        s->cap = cap;
    }
    if (!(s->names[s->n] = join(s->dir, name)))
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot hold the name of shard '%s'", name);
    s->n++;
    return FERRY_OK;
}

static ferry_status set_add(tok_shard_set *s, const char *split, tok_shard_format f, const void *tokens,
                            size_t n, const tok_shard_examples *ex, const char **name)
{
    int k = 0;
    while (k < SET_SPLITS && strcmp(split, set_splits[k]) != 0)
        k++;
    if (k == SET_SPLITS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "shard split '%s': a shard set has 'val' and 'train'", split);
    if (s->n > 0 && f != s->format)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "shard set '%s': a %s shard after %s ones; a set holds one "
                       "format", s->dir, formats[f].name, formats[s->format].name);
    s->format = f;
    char base[64];
    snprintf(base, sizeof base, "%s_%06d.bin", set_splits[k], s->count[k]);
    char *staged = join(s->staging, base);
    ferry_status st = staged ? add_name(s, base) : err_set(FERRY_ERR_OUT_OF_MEMORY, "shard path '%s'", base);
    if (st == FERRY_OK && (st = ex ? tok_shard_write_masked(staged, f, ex) : write_shard(staged, f, tokens, n)) !=
                              FERRY_OK)
        st = err_wrap(st, "staging %s of the new shard set of '%s' (the folder's earlier shards are left as they "
                      "were)", base, s->dir);
    free(staged);
    if (st != FERRY_OK)
        return st;
    s->count[k]++;
    if (name)
        *name = s->names[s->n - 1];
    return FERRY_OK;
}

ferry_status tok_shard_set_add(tok_shard_set *s, const char *split, const uint16_t *tokens, size_t n,
                               const char **name)
{
    return set_add(s, split, TOK_SHARD_GPT2, tokens, n, NULL, name);
}

ferry_status tok_shard_set_add_u32(tok_shard_set *s, const char *split, const uint32_t *tokens, size_t n,
                                   const char **name)
{
    return set_add(s, split, TOK_SHARD_LLAMA3, tokens, n, NULL, name);
}

ferry_status tok_shard_set_add_masked(tok_shard_set *s, const char *split, tok_shard_format f,
                                      const tok_shard_examples *ex, const char **name)
{
    if (!tok_shard_is_masked(f))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "shard set '%s': format %s is not a masked one", s->dir,
                       formats[f].name);
    return set_add(s, split, f, NULL, 0, ex, name);
}

static int in_new_set(const tok_shard_set *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(base_of(s->names[i]), name) == 0)
            return 1;
    return 0;
}

/* Removes the shards of DIR that belong to no split of the new set;
 * *removed counts them. */
static ferry_status remove_stale(const tok_shard_set *s, size_t *removed)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return err_set(FERRY_ERR_IO, "cannot list '%s' to remove the earlier run's shards: %s; it now holds the new "
                       "set and any shards of the earlier run beyond it: remove those by hand, or a train_*.bin glob "
                       "reads them too", s->dir, strerror(errno));
    ferry_status st = FERRY_OK;
    for (struct dirent *e; st == FERRY_OK && (e = readdir(d)) != NULL;)
        if (is_set_name(e->d_name) && !in_new_set(s, e->d_name) && unlinkat(dirfd(d), e->d_name, 0) == 0)
            (*removed)++;
        else if (is_set_name(e->d_name) && !in_new_set(s, e->d_name))
            st = err_set(FERRY_ERR_IO, "cannot remove '%s/%s', a shard of an earlier run that the new set does "
                         "not have: %s; remove it by hand, or a train_*.bin glob reads it too",
                         s->dir, e->d_name, strerror(errno));
    closedir(d);
    return st;
}

/* Renames the staged shards into DIR, in order; *replaced counts the
 * earlier run's shards of the same names. */
static ferry_status put_in_place(const tok_shard_set *s, size_t *replaced)
{
    for (size_t i = 0; i < s->n; i++) {
        struct stat sb;
        *replaced += lstat(s->names[i], &sb) == 0;
        char *staged = join(s->staging, base_of(s->names[i]));
        int rc = staged ? rename(staged, s->names[i]) : -1;
        int e = staged ? errno : ENOMEM;
        free(staged);
        if (rc != 0)
            return err_set(FERRY_ERR_IO, "cannot put shard '%s' in place: %s; '%s' now holds the first %zu of the "
                           "new set's %zu shards and the earlier run's others: run tokenize again", s->names[i],
                           strerror(e), s->dir, i, s->n);
    }
    return FERRY_OK;
}

ferry_status tok_shard_set_commit(tok_shard_set *s, size_t *replaced, size_t *removed)
{
    size_t none;
    if (!replaced)
        replaced = &none;
    if (!removed)
        removed = &none;
    *replaced = *removed = 0;
    if (!s)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tok_shard_set_commit: no shard set");
    ferry_status st = put_in_place(s, replaced);
    if (st == FERRY_OK)
        st = remove_stale(s, removed);
    if (st == FERRY_OK && rmdir(s->staging) != 0)
        st = err_set(FERRY_ERR_IO, "cannot remove the staging folder '%s': %s", s->staging, strerror(errno));
    if (st == FERRY_OK)
        st = fileio_sync_dir(s->dir);
    if (st != FERRY_OK) {
        tok_shard_set_abort(s);
        return st;
    }
    set_free(s);
    return FERRY_OK;
}

void tok_shard_set_abort(tok_shard_set *s)
{
    if (!s)
        return;
    const char *what; /* best effort, and quiet: the caller's message says what failed */
    if (empty_folder(s->staging, &what) == 0)
        rmdir(s->staging);
    set_free(s);
}
