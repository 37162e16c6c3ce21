/* A Hugging Face tokenizer.json of the BPE model, read and run: byte-level
 * BPE (GPT-2, Llama 3, Qwen2: a ByteLevel pre-tokenizer, each file's Split
 * pattern, merges by rank, ignore_merges) and SentencePiece-style BPE
 * (Llama 2, Mistral, TinyLlama: "▁" for a space by the Prepend + Replace
 * normalizers or the Metaspace pre-tokenizer, byte fallback to <0xNN>
 * tokens, merges by rank), with added tokens, BOS/EOS from the file and
 * the decoders these files use. What is not one of these (another model
 * type, pattern, normalizer, pre-tokenizer or decoder) is refused by name.
 * Owns the vocabulary, the merges, the added tokens and a word cache.
 * train/tokenizer.h is the face callers use; this is internal to train/. */
#ifndef FERRY_TRAIN_HF_TOKENIZER_H
#define FERRY_TRAIN_HF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "train/bpe.h"

typedef struct hf_tok hf_tok;

/* Loads `path`. FERRY_ERR_IO if it cannot be read; FERRY_ERR_FORMAT naming
 * the file and what is wrong or unsupported. *out is the caller's, freed
 * with hf_tok_destroy. */
ferry_status hf_tok_load(const char *path, hf_tok **out);
void hf_tok_destroy(hf_tok *t);

/* Appends the ids of text[0..len). special: added tokens marked special
 * are recognised in the text too (the others always are). Not thread-safe
 * (the word cache). */
ferry_status hf_tok_encode(hf_tok *t, const char *text, size_t len, int special, tok_ids *out);
ferry_status hf_tok_decode(const hf_tok *t, const uint32_t *ids, size_t n, char **out, size_t *out_len);
int64_t hf_tok_token_id(const hf_tok *t, const char *text, size_t len);
int64_t hf_tok_bos(const hf_tok *t);
int64_t hf_tok_eos(const hf_tok *t);
uint32_t hf_tok_vocab_size(const hf_tok *t);
/* "byte-level BPE, Llama 3 pattern" and the like, for messages. */
const char *hf_tok_describe(const hf_tok *t);

#endif
