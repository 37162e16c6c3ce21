/* The one tokenizer face (see tokenizer.h): a tokenizer.json through
 * hf_tokenizer.c, GPT-2's encoder.json + vocab.bpe through bpe.c. Owns only
 * the choice between them. */
#include "train/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "train/hf_tokenizer.h"

struct tok_tokenizer {
    hf_tok *hf;   /* a tokenizer.json, or */
    tok_bpe *bpe; /* GPT-2's two files */
    char desc[96];
};

ferry_status tok_open(const char *path, const char *vocab_bpe, tok_tokenizer **out)
{
    *out = NULL;
    if (!path)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tok_open needs the path of a tokenizer.json (or of encoder.json "
                       "with vocab.bpe)");
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the tokenizer");
    ferry_status st = vocab_bpe ? tok_bpe_load(path, vocab_bpe, &t->bpe) : hf_tok_load(path, &t->hf);
    if (st != FERRY_OK) {
        free(t);
        return st;
    }
    if (t->bpe)
        snprintf(t->desc, sizeof t->desc, "GPT-2 byte-level BPE (encoder.json + vocab.bpe), %u tokens",
                 tok_bpe_vocab_size(t->bpe));
    *out = t;
    return FERRY_OK;
}

void tok_close(tok_tokenizer *t)
{
    if (!t)
        return;
    hf_tok_destroy(t->hf);
    tok_bpe_destroy(t->bpe);
    free(t);
}

ferry_status tok_encode(tok_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    return t->hf ? hf_tok_encode(t->hf, text, len, 0, out) : tok_bpe_encode(t->bpe, text, len, out);
}

/* GPT-2's old files know one special token, <|endoftext|>. */
static ferry_status bpe_encode_special(tok_bpe *b, const char *text, size_t len, tok_ids *out)
{
    static const char eot[] = "<|endoftext|>";
    const size_t el = sizeof eot - 1;
    size_t start = 0;
    for (size_t pos = 0; pos + el <= len; pos++) {
        if (memcmp(text + pos, eot, el))
            continue;
        ferry_status st = tok_bpe_encode(b, text + start, pos - start, out);
        if (st == FERRY_OK && out->len == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 1024;
            uint32_t *p = realloc(out->ids, cap * sizeof *p);
            if (!p)
                return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot grow a token array to %zu ids", cap);
            out->ids = p;
            out->cap = cap;
        }
        if (st != FERRY_OK)
            return st;
        out->ids[out->len++] = TOK_GPT2_EOT;
        pos += el - 1;
        start = pos + 1;
    }
    return tok_bpe_encode(b, text + start, len - start, out);
}

ferry_status tok_encode_special(tok_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    return t->hf ? hf_tok_encode(t->hf, text, len, 1, out) : bpe_encode_special(t->bpe, text, len, out);
}

ferry_status tok_decode(const tok_tokenizer *t, const uint32_t *ids, size_t n, char **out, size_t *out_len)
{
    return t->hf ? hf_tok_decode(t->hf, ids, n, out, out_len) : tok_bpe_decode(t->bpe, ids, n, out, out_len);
}

int64_t tok_token_id(const tok_tokenizer *t, const char *text, size_t len)
{
    return t->hf ? hf_tok_token_id(t->hf, text, len) : tok_bpe_lookup(t->bpe, text, len);
}

int64_t tok_bos(const tok_tokenizer *t) { return t->hf ? hf_tok_bos(t->hf) : TOK_GPT2_EOT; }
int64_t tok_eos(const tok_tokenizer *t) { return t->hf ? hf_tok_eos(t->hf) : TOK_GPT2_EOT; }
uint32_t tok_vocab_size(const tok_tokenizer *t)
{
    return t->hf ? hf_tok_vocab_size(t->hf) : tok_bpe_vocab_size(t->bpe);
}
const char *tok_describe(const tok_tokenizer *t) { return t->hf ? hf_tok_describe(t->hf) : t->desc; }
