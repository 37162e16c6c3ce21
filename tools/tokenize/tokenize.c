/* tokenize: text files -> llm.c token shards (train_NNNNNN.bin, val_NNNNNN.bin).
 * Every document starts with <|endoftext|> (50256), as in llm.c. The first
 * ceil(val_fraction * total) tokens of the stream form the validation split
 * (llm.c's convention: the first shard is validation); the rest is training.
 * Owns the command line only; tokenizing is bpe.c, writing is shard.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "ferry.h"
#include "common/error.h"
#include "train/bpe.h"
#include "common/fileio.h"
#include "train/shard.h"

typedef struct opts {
    const char *encoder, *vocab, *out_dir;
    double val_fraction;
    uint64_t shard_tokens;
    int doc_blank_lines; /* 0: each file is one document */
    int bench;
    char **inputs;
    int ninputs;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tokenize --encoder encoder.json --vocab vocab.bpe --out-dir DIR\n"
            "                [--val-fraction F] [--shard-tokens N] [--doc-sep file|blank-lines] INPUT...\n"
            "       tokenize --encoder encoder.json --vocab vocab.bpe --bench INPUT...\n"
            "Writes DIR/val_000000.bin, DIR/train_000000.bin, ... (llm.c shards: 1024-byte header, uint16\n"
            "tokens). Each document starts with <|endoftext|>; documents are whole files (--doc-sep file,\n"
            "the default) or paragraphs separated by blank lines. --val-fraction (default 0.01): the first\n"
            "ceil(F * total) tokens go to val. --shard-tokens (default 100000000) caps a shard.\n"
            "--bench tokenizes the inputs and prints MB/s without writing.\n"
            "encoder.json and vocab.bpe: tools/setup/fetch_tokenizer.sh installs them.\n");
}

static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.val_fraction = 0.01, .shard_tokens = 100000000};
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "--bench")) {
            o->bench = 1;
            continue;
        } else if (!v) {
            fprintf(stderr, "tokenize: %s needs a value\n", a);
            return -1;
        } else if (!strcmp(a, "--encoder")) {
            o->encoder = v;
        } else if (!strcmp(a, "--vocab")) {
            o->vocab = v;
        } else if (!strcmp(a, "--out-dir")) {
            o->out_dir = v;
        } else if (!strcmp(a, "--val-fraction")) {
            o->val_fraction = strtod(v, &end);
            if (*end || !(o->val_fraction >= 0 && o->val_fraction < 1)) {
                fprintf(stderr, "tokenize: --val-fraction '%s' must be a number in [0, 1)\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--shard-tokens")) {
            o->shard_tokens = strtoull(v, &end, 10);
            if (*end || v[0] == '-' || o->shard_tokens < 1 || o->shard_tokens > TOK_SHARD_MAX_TOKENS) {
                fprintf(stderr, "tokenize: --shard-tokens '%s' must be an integer in 1..%u\n", v, TOK_SHARD_MAX_TOKENS);
                return -1;
            }
        } else if (!strcmp(a, "--doc-sep")) {
            if (strcmp(v, "file") && strcmp(v, "blank-lines")) {
                fprintf(stderr, "tokenize: --doc-sep '%s' must be 'file' or 'blank-lines'\n", v);
                return -1;
            }
            o->doc_blank_lines = !strcmp(v, "blank-lines");
        } else {
            fprintf(stderr, "tokenize: unknown option '%s'\n", a);
            return -1;
        }
        i++;
    }
    o->inputs = argv + i;
    o->ninputs = argc - i;
    if (!o->encoder || !o->vocab || o->ninputs == 0 || (!o->bench && !o->out_dir)) {
        fprintf(stderr, "tokenize: --encoder, --vocab, %sand at least one INPUT are required\n",
                o->bench ? "" : "--out-dir ");
        return -1;
    }
    return 0;
}

/* Length of the blank-line run starting at a line start s[i], or 0 if the
 * line at i is not blank. A blank line holds only spaces, tabs and '\r'. */
static size_t blank_run(const char *s, size_t n, size_t i)
{
    size_t j = i, end = 0;
    while (j < n) {
        size_t k = j;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
            k++;
        if (k < n && s[k] != '\n')
            break;
        end = k < n ? k + 1 : k;
        j = end;
    }
    return end ? end - i : 0;
}

/* Appends <|endoftext|> and the tokens of one document. */
static ferry_status add_doc(tok_bpe *t, const char *s, size_t n, tok_ids *out)
{
    if (n == 0)
        return FERRY_OK;
    uint32_t eot = TOK_GPT2_EOT;
    if (out->len == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : (size_t)1 << 20;
        uint32_t *p = realloc(out->ids, cap * sizeof *p);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory holding %zu tokens", out->len);
        out->ids = p;
        out->cap = cap;
    }
    out->ids[out->len++] = eot;
    return tok_bpe_encode(t, s, n, out);
}

static ferry_status add_file(tok_bpe *t, const char *path, int blank_lines, tok_ids *out, size_t *bytes)
{
    char *s;
    size_t n;
    ferry_status st = fileio_read(path, "input text", &s, &n);
    if (st != FERRY_OK)
        return st;
    *bytes += n;
    if (!blank_lines) {
        st = add_doc(t, s, n, out);
        free(s);
        return st;
    }
    size_t doc = 0, i = 0;
    while (st == FERRY_OK && i < n) {
        size_t run = (i == 0 || s[i - 1] == '\n') ? blank_run(s, n, i) : 0;
        if (run) {
            st = add_doc(t, s + doc, i - doc, out);
            i += run;
            doc = i;
        } else {
            i++;
        }
    }
    if (st == FERRY_OK)
        st = add_doc(t, s + doc, n - doc, out);
    free(s);
    return st;
}

static ferry_status write_split(const opts *o, const char *name, const uint32_t *ids, size_t n, int *shards)
{
    uint16_t *buf = malloc((o->shard_tokens < n ? o->shard_tokens : n) * sizeof *buf + 2);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a %llu-token shard buffer",
                       (unsigned long long)o->shard_tokens);
    ferry_status st = FERRY_OK;
    *shards = 0;
    for (size_t at = 0; st == FERRY_OK && at < n; at += o->shard_tokens) {
        size_t k = n - at < o->shard_tokens ? n - at : o->shard_tokens;
        for (size_t i = 0; i < k; i++)
            buf[i] = (uint16_t)ids[at + i];
        char path[4096];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", o->out_dir, name, *shards);
        st = tok_shard_write(path, buf, k);
        if (st == FERRY_OK)
            printf("wrote %s: %zu tokens\n", path, k);
        (*shards)++;
    }
    free(buf);
    return st;
}

static int fail(ferry_status st)
{
    fprintf(stderr, "tokenize: %s (%s)\n", ferry_last_error(), ferry_status_string(st));
    return 1;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    tok_bpe *t;
    ferry_status st = tok_bpe_load(o.encoder, o.vocab, &t);
    if (st != FERRY_OK)
        return fail(st);
    if (tok_bpe_vocab_size(t) > 65536) {
        fprintf(stderr, "tokenize: vocabulary of %u tokens does not fit uint16 shards\n", tok_bpe_vocab_size(t));
        return 1;
    }
    tok_ids ids = {0};
    size_t bytes = 0;
    double t0 = (clock_now_ms() / 1e3);
    for (int i = 0; st == FERRY_OK && i < o.ninputs; i++)
        st = add_file(t, o.inputs[i], o.doc_blank_lines, &ids, &bytes);
    double dt = (clock_now_ms() / 1e3) - t0;
    if (st != FERRY_OK)
        return fail(st);
    printf("tokenized %zu bytes into %zu tokens in %.3f s: %.1f MB/s\n", bytes, ids.len, dt,
           dt > 0 ? (double)bytes / dt / 1e6 : 0.0);
    if (!o.bench) {
        if (mkdir(o.out_dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "tokenize: cannot create --out-dir '%s': %s\n", o.out_dir, strerror(errno));
            return 1;
        }
        size_t nval = (size_t)ceil(o.val_fraction * (double)ids.len);
        int nv = 0, nt = 0;
        st = write_split(&o, "val", ids.ids, nval, &nv);
        if (st == FERRY_OK)
            st = write_split(&o, "train", ids.ids + nval, ids.len - nval, &nt);
        if (st != FERRY_OK)
            return fail(st);
        printf("val: %zu tokens in %d shard(s); train: %zu tokens in %d shard(s)\n", nval, nv, ids.len - nval, nt);
    }
    tok_ids_free(&ids);
    tok_bpe_destroy(t);
    return 0;
}
