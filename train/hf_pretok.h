/* The pre-tokenizers of the Hugging Face tokenizer.json files ferry reads:
 * the Split patterns of GPT-2, Llama 3 and Qwen2, each recognised by its
 * exact regex string and run as a hand-written matcher on the character
 * classes of train/unicode_tables.h (node's \p{L}, \p{N}, \s), the way the
 * JavaScript reference encoders apply them; and the check that text needs
 * nothing from an NFC normalizer. Owns the classes' lookup table (built once
 * per process); knows nothing of vocabularies. Internal to train/. */
#ifndef FERRY_TRAIN_HF_PRETOK_H
#define FERRY_TRAIN_HF_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef enum hf_split {
    HF_SPLIT_NONE = 0, /* the whole text is one pre-token */
    HF_SPLIT_GPT2,     /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    HF_SPLIT_LLAMA3,   /* Llama 3's: case-blind contractions, \p{N}{1,3}, newlines kept apart */
    HF_SPLIT_QWEN2,    /* Llama 3's with \p{N} (one digit a pre-token) */
} hf_split;

/* The pattern strings as tokenizer.json files spell them. */
extern const char hf_pattern_gpt2[], hf_pattern_llama3[], hf_pattern_qwen2[];

/* The split a Split pre-tokenizer's regex names, or -1 for any other string. */
int hf_split_from_pattern(const char *regex);
/* "GPT-2", "Llama 3", "Qwen2" or "none", for messages. */
const char *hf_split_name(hf_split s);

/* End (exclusive byte offset) of the pre-token that starts at `pos` (pos <
 * n) under split s. A byte that does not start valid UTF-8 is a one-byte
 * character of no class (as U+FFFD is to the JavaScript regex). */
size_t hf_pretoken_end(hf_split s, const char *text, size_t n, size_t pos);

/* 1 when NFC normalization leaves text[0..n) as it is by a conservative
 * test: no character that changes alone or composes with the one before
 * it, and no combining mark right after a mark or a decomposable
 * character. 0 otherwise, with *at the byte offset and *cp the code point
 * of the first character that failed the test. */
int hf_nfc_stable(const char *text, size_t n, size_t *at, uint32_t *cp);

/* Decodes one UTF-8 character at s[i] (i < n); returns its length (1 for
 * a byte that is not valid UTF-8, *cp then 0xFFFFFFFF). */
size_t hf_utf8_next(const unsigned char *s, size_t n, size_t i, uint32_t *cp);

#endif
