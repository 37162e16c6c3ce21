/* One face for every tokenizer ferry reads: a Hugging Face tokenizer.json
 * of the BPE model (byte-level: GPT-2, Llama 3, Qwen2; SentencePiece-style
 * with byte fallback: Llama 2, Mistral, TinyLlama; train/hf_tokenizer.h)
 * and GPT-2's encoder.json + vocab.bpe (train/bpe.h). Owns the tokenizer it
 * opens. One tok_tokenizer per thread: encoding uses its word cache.
 *
 * Invalid UTF-8 in text never fails: for byte-level vocabularies (and
 * GPT-2's old files) a byte that is not part of valid UTF-8 stands for
 * itself; for SentencePiece-style vocabularies with byte fallback it
 * becomes its <0xNN> token. Either way decode gives the bytes back. One
 * exception: a tokenizer.json with an NFC normalizer (Qwen2's) refuses
 * text that NFC could change (FERRY_ERR_INVALID_ARGUMENT naming the
 * character), since ferry does not implement NFC.
 *
 * The pre-tokenizers follow the JavaScript reference encoders the tests
 * compare with: node's character classes (train/unicode_tables.h) and, in
 * Llama 3's and Qwen2's (?i:'s|'t|...), ASCII case only. Hugging Face's
 * Rust library can split differently on rare characters (Unicode case
 * folding such as "'ſ", white space such as U+0085).
 *
 * Usage:
 *     tok_tokenizer *t;
 *     if (tok_open("tokenizer.json", NULL, &t) != FERRY_OK) ... ferry_last_error()
 *     tok_ids ids = {0};
 *     ids.len = 0; push tok_bos(t) yourself if wanted (tok_encode never adds BOS or EOS)
 *     tok_encode(t, text, strlen(text), &ids);          user text: "<|eot_id|>" stays text
 *     int64_t eot = tok_token_id(t, "<|eot_id|>", 10);  -1 if absent
 *     tok_ids_free(&ids); tok_close(t); */
#ifndef FERRY_TRAIN_TOKENIZER_H
#define FERRY_TRAIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"
#include "train/bpe.h" /* tok_ids, tok_ids_free */

typedef struct tok_tokenizer tok_tokenizer;

/* Opens a tokenizer: `path` a tokenizer.json and vocab_bpe NULL, or `path`
 * GPT-2's encoder.json and vocab_bpe its vocab.bpe. FERRY_ERR_IO if a file
 * cannot be read; FERRY_ERR_FORMAT naming the file and what is malformed or
 * unsupported (another model type, pre-tokenizer pattern, normalizer or
 * decoder is refused by name). *out is the caller's; free with tok_close. */
ferry_status tok_open(const char *path, const char *vocab_bpe, tok_tokenizer **out);
void tok_close(tok_tokenizer *t); /* accepts NULL */

/* Appends the ids of text[0..len) (UTF-8, any bytes) to *out: plain text,
 * in which special tokens are not recognised ("<|eot_id|>" or "<s>" in the
 * text is encoded as those characters; added tokens that the file does not
 * mark special still are, as Hugging Face does). Never adds BOS or EOS.
 * FERRY_ERR_OUT_OF_MEMORY if *out cannot grow. */
ferry_status tok_encode(tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
/* The same, recognising every added and special token in the text (the
 * longest at each place), as the file's tokenizer does by default. */
ferry_status tok_encode_special(tok_tokenizer *t, const char *text, size_t len, tok_ids *out);

/* Decodes ids to bytes in a malloc'd, NUL-terminated buffer (*out, length
 * *out_len, the caller's to free): special tokens as their text, the
 * decoder's rules applied (SentencePiece: "▁" is a space, the leading space
 * stripped, <0xNN> a byte). FERRY_ERR_INVALID_ARGUMENT naming the position
 * of an id the tokenizer does not have. */
ferry_status tok_decode(const tok_tokenizer *t, const uint32_t *ids, size_t n, char **out, size_t *out_len);

/* The id of a token given as its text, or -1: an added or special token's
 * content ("<|eot_id|>", "<s>", "<|im_start|>"), else a vocabulary entry by
 * the text it decodes to (" the"; for SentencePiece spaces are looked up as
 * "▁"). */
int64_t tok_token_id(const tok_tokenizer *t, const char *text, size_t len);

/* The BOS and EOS ids, or -1 if the tokenizer has none: from the file's
 * TemplateProcessing post-processor where it has one, else the first of
 * "<|begin_of_text|>", "<s>", "<|endoftext|>" (BOS) and "<|end_of_text|>",
 * "</s>", "<|endoftext|>" (EOS) that is a token. GPT-2: both 50256. */
int64_t tok_bos(const tok_tokenizer *t);
int64_t tok_eos(const tok_tokenizer *t);

/* Number of ids: one past the largest id (50257 GPT-2, 128256 Llama 3,
 * 32000 Llama 2). */
uint32_t tok_vocab_size(const tok_tokenizer *t);
/* What was opened, for messages: "byte-level BPE (Llama 3 pattern), 128256 tokens". */
const char *tok_describe(const tok_tokenizer *t);

#endif
