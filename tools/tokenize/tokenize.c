/* tokenize: text files -> llm.c token shards (train_NNNNNN.bin, val_NNNNNN.bin);
 * --jsonl: instruction data -> masked shards (train/instruct.h does the work).
 * Every document starts with the tokenizer's BOS (<|endoftext|> for GPT-2, as
 * in llm.c; <|begin_of_text|> Llama 3; <s> Llama 2). A vocabulary above
 * 65,536 writes Llama 3's shard format (uint32 tokens). The first
 * ceil(val_fraction * total) tokens of the stream form the validation split
 * (llm.c's convention: the first shard is validation); the rest is training.
 * Owns the run's order: every check that can fail early (the options, the
 * inputs are regular files, the output folder is writable) before the corpus
 * is read; the new shard set replaces the folder's old one only when all of
 * it is written. Options are tokenize_cli.c's; tokenizing is
 * train/tokenizer.h's (a tokenizer.json, or GPT-2's encoder.json +
 * vocab.bpe), writing the set is token_shard.c's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "ferry.h"
#include "common/error.h"
#include "train/instruct.h"
#include "common/fileio.h"
#include "train/token_shard.h"
#include "train/tokenizer.h"
#include "tools/tokenize/tokenize_cli.h"

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

/* Appends the BOS and the tokens of one document (plain text). */
static ferry_status add_doc(tok_tokenizer *t, const char *s, size_t n, tok_ids *out)
{
    if (n == 0)
        return FERRY_OK;
    uint32_t bos = (uint32_t)tok_bos(t);
    if (out->len == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : (size_t)1 << 20;
        uint32_t *p = realloc(out->ids, cap * sizeof *p);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory holding %zu tokens", out->len);
        out->ids = p;
        out->cap = cap;
    }
    out->ids[out->len++] = bos;
    return tok_encode(t, s, n, out);
}

static ferry_status add_file(tok_tokenizer *t, const char *path, int blank_lines, tok_ids *out, size_t *bytes)
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

static ferry_status write_split(const tokenize_opts *o, tok_shard_set *set, const char *name, const uint32_t *ids,
                                size_t n, int wide, int *shards)
{
    uint16_t *buf = wide ? NULL : malloc((o->shard_tokens < n ? o->shard_tokens : n) * sizeof *buf + 2);
    if (!wide && !buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a %llu-token shard buffer",
                       (unsigned long long)o->shard_tokens);
    ferry_status st = FERRY_OK;
    *shards = 0;
    for (size_t at = 0; st == FERRY_OK && at < n; at += o->shard_tokens) {
        size_t k = n - at < o->shard_tokens ? n - at : o->shard_tokens;
        const char *path = NULL;
        if (wide) {
            st = tok_shard_set_add_u32(set, name, ids + at, k, &path);
        } else {
            for (size_t i = 0; i < k; i++)
                buf[i] = (uint16_t)ids[at + i];
            st = tok_shard_set_add(set, name, buf, k, &path);
        }
        if (st == FERRY_OK) {
            printf("%s: %zu tokens\n", path, k);
            (*shards)++;
        }
    }
    free(buf);
    return st;
}

/* Every input must be a regular file: a FIFO would block the read forever,
 * a folder or a device is not text. Checked before any work. */
static ferry_status check_inputs(const tokenize_opts *o)
{
    for (int i = 0; i < o->ninputs; i++) {
        struct stat sb;
        if (stat(o->inputs[i], &sb) != 0)
            return err_set(FERRY_ERR_IO, "cannot read input '%s': %s", o->inputs[i], strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return err_set(FERRY_ERR_IO, "input '%s' is not a regular file (a folder, FIFO or device); give text "
                           "files", o->inputs[i]);
    }
    return FERRY_OK;
}

/* The shards of the corpus, val first, then the set replaces the old one. */
static ferry_status write_shards(const tokenize_opts *o, tok_shard_set *set, const tok_ids *ids, int wide)
{
    size_t nval = (size_t)ceil(o->val_fraction * (double)ids->len);
    if (ids->len == nval)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the corpus is %zu tokens, and --val-fraction %g takes all of "
                       "them for validation, leaving no training shard; give more text or a smaller "
                       "--val-fraction", ids->len, o->val_fraction);
    int nv = 0, nt = 0;
    ferry_status st = write_split(o, set, "val", ids->ids, nval, wide, &nv);
    if (st == FERRY_OK)
        st = write_split(o, set, "train", ids->ids + nval, ids->len - nval, wide, &nt);
    if (st != FERRY_OK)
        return st;
    printf("val: %zu tokens in %d shard(s); train: %zu tokens in %d shard(s), %s\n", nval, nv, ids->len - nval, nt,
           tok_shard_format_name(wide ? TOK_SHARD_LLAMA3 : TOK_SHARD_GPT2));
    return FERRY_OK;
}

static ferry_status tokenize_all(const tokenize_opts *o, tok_tokenizer *t, tok_ids *ids)
{
    size_t bytes = 0;
    ferry_status st = FERRY_OK;
    double t0 = clock_now_ms() / 1e3;
    for (int i = 0; st == FERRY_OK && i < o->ninputs; i++)
        st = add_file(t, o->inputs[i], o->doc_blank_lines, ids, &bytes);
    double dt = clock_now_ms() / 1e3 - t0;
    if (st != FERRY_OK)
        return st;
    if (ids->len == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the %d input(s) hold no text (%zu bytes in all): nothing to "
                       "tokenize, and no shards were written", o->ninputs, bytes);
    printf("tokenized %zu bytes into %zu tokens in %.3f s: %.1f MB/s\n", bytes, ids->len, dt,
           dt > 0 ? (double)bytes / dt / 1e6 : 0.0);
    return FERRY_OK;
}

/* --jsonl: the records to examples, then (unless --bench) to masked shards. */
static ferry_status tokenize_jsonl(const tokenize_opts *o, const tok_text_encoder *enc, tok_shard_set *set)
{
    tok_instruct_options io = {CHAT_PLAIN, o->seq, TOK_TOO_LONG_REFUSE, o->val_fraction, o->shard_tokens};
    ferry_status st = chat_template_parse(o->template_name ? o->template_name : "plain", &io.tpl);
    if (st == FERRY_OK && o->too_long)
        st = tok_too_long_parse(o->too_long, &io.too_long);
    tok_examples ex = {0};
    tok_instruct_report rep = {0};
    double t0 = clock_now_ms() / 1e3;
    if (st == FERRY_OK)
        st = tok_instruct_read(o->jsonl, enc, &io, &ex, &rep);
    double dt = clock_now_ms() / 1e3 - t0;
    if (st == FERRY_OK)
        printf("tokenized %zu examples (%zu bytes of text, template %s) into %zu tokens, %zu of them targets, in "
               "%.3f s: %.1f MB/s\n", rep.examples, rep.bytes, chat_template_name(io.tpl), rep.tokens, rep.targets,
               dt, dt > 0 ? (double)rep.bytes / dt / 1e6 : 0.0);
    if (st == FERRY_OK && rep.truncated)
        printf("truncated %zu example(s) to --seq %d + 1 tokens; %zu example(s) have no target left\n",
               rep.truncated, o->seq, rep.untargeted);
    if (st == FERRY_OK && set)
        st = tok_instruct_write(&ex, &io, tok_instruct_format(enc->vocab_size), set, &rep, stdout);
    if (st == FERRY_OK && set)
        printf("val: %zu examples, %zu tokens in %d shard(s); train: %zu examples, %zu tokens in %d shard(s)\n",
               rep.val_examples, rep.val_tokens, rep.val_shards, rep.train_examples, rep.train_tokens,
               rep.train_shards);
    tok_examples_free(&ex);
    return st;
}

static int fail(ferry_status st)
{
    fprintf(stderr, "tokenize: %s (%s)\n", ferry_last_error(), ferry_status_string(st));
    return 1;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("tokenize"); /* a full disk or /dev/full on stdout is exit 1 */
    tokenize_opts o;
    int rc = tokenize_parse_args(argc, argv, &o);
    if (rc) {
        if (rc == 2)
            tokenize_usage(stderr);
        return rc == 1 ? 0 : 2;
    }
    tok_tokenizer *t = NULL;
    tok_shard_set *set = NULL;
    tok_ids ids = {0};
    ferry_status st = check_inputs(&o);
    if (st == FERRY_OK)
        st = o.tokenizer ? tok_open(o.tokenizer, NULL, &t) : tok_open(o.encoder, o.vocab, &t);
    if (st == FERRY_OK && tok_bos(t) < 0)
        st = err_set(FERRY_ERR_FORMAT, "the tokenizer '%s' has no BOS token (no TemplateProcessing BOS, and none of "
                     "<|begin_of_text|>, <s>, <|endoftext|>), and each document starts with one",
                     o.tokenizer ? o.tokenizer : o.encoder);
    int wide = st == FERRY_OK && tok_vocab_size(t) > 65536;
    if (st == FERRY_OK)
        printf("tokenizer: %s; documents start with token %lld\n", tok_describe(t), (long long)tok_bos(t));
    if (st == FERRY_OK && !o.bench)
        st = tok_shard_set_begin(o.out_dir, &set);
    tok_text_encoder enc;
    if (st == FERRY_OK && o.jsonl)
        tok_text_encoder_of(t, &enc);
    if (st == FERRY_OK && o.jsonl)
        st = tokenize_jsonl(&o, &enc, set);
    else if (st == FERRY_OK)
        st = tokenize_all(&o, t, &ids);
    if (st == FERRY_OK && !o.bench && !o.jsonl)
        st = write_shards(&o, set, &ids, wide);
    if (st == FERRY_OK && !o.bench) {
        size_t replaced = 0, removed = 0;
        st = tok_shard_set_commit(set, &replaced, &removed);
        set = NULL;
        if (st == FERRY_OK && replaced + removed == 0)
            printf("put the new shards in place in '%s'\n", o.out_dir);
        else if (st == FERRY_OK)
            printf("put the new shards in place in '%s' (of an earlier run's shards there, %zu were replaced and "
                   "%zu removed)\n", o.out_dir, replaced, removed);
    }
    tok_shard_set_abort(set);
    tok_ids_free(&ids);
    tok_close(t);
    free(o.inputs);
    return st == FERRY_OK ? 0 : fail(st);
}
