/* The state of a loaded tokenizer.json, shared by its loader
 * (hf_tokenizer.c) and its encoder/decoder (hf_tok_encode.c). Internal to
 * those two files. */
#ifndef FERRY_TRAIN_HF_TOK_INTERNAL_H
#define FERRY_TRAIN_HF_TOK_INTERNAL_H

#include <cjson/cJSON.h>

#include "train/hf_pretok.h"
#include "train/hf_tokenizer.h"
#include "train/tok_map.h"

#define HF_NO_ID UINT32_MAX

typedef enum hf_kind { HF_BYTE_LEVEL = 0, HF_SENTENCEPIECE } hf_kind;

/* How "▁" is put before a SentencePiece segment. */
typedef enum hf_prepend {
    HF_PREPEND_NEVER = 0,
    HF_PREPEND_NORMALIZER, /* the Prepend normalizer: every non-empty segment */
    HF_PREPEND_ALWAYS,     /* Metaspace "always": every segment not starting with ▁ */
    HF_PREPEND_FIRST,      /* Metaspace "first": only the segment at the start of the text */
} hf_prepend;

typedef struct hf_added {
    uint32_t id, off, len; /* content at added_text + off */
    int special;
} hf_added;

struct hf_tok {
    hf_kind kind;
    hf_split split;
    int prefix_space;   /* ByteLevel add_prefix_space */
    int nfc;            /* an NFC normalizer: text it would change is refused */
    int ignore_merges;  /* a pre-token that is a vocabulary entry is that token */
    int byte_fallback;
    uint32_t unk;       /* HF_NO_ID if none */
    hf_prepend prepend;
    int meta_replace;   /* ' ' -> ▁ (the Replace normalizer, or Metaspace) */
    int meta_split;     /* Metaspace split: a pre-token starts at each ▁ */
    int dec_strip;      /* spaces the decoder strips from the start */
    uint32_t vocab_size;
    uint32_t *tok_off;  /* vocab_size + 1 offsets of each id's decoded bytes */
    char *tok_bytes;
    uint8_t *known;     /* 1 for the ids the file gives a token */
    tok_map vocab;      /* byte-level: a token's bytes -> id; SentencePiece: its text */
    tok_map pairs;      /* (id a, id b) -> rank << 32 | merged id */
    tok_map junctions;  /* SentencePiece: the characters x y (bytes of x, then of
                         * y) where some merge (A, B) has A ending in x and B
                         * starting with y; no merge crosses between any
                         * other two characters */
    int junctions_exact; /* no merge takes a <0xNN> or unk symbol, whose
                          * characters are not its text: then the junctions
                          * tell where text may be cut */
    uint32_t byte_id[256]; /* byte-level: each byte's token; SentencePiece: <0xNN> */
    hf_added *added;    /* longest content first */
    size_t nadded;
    char *added_text;
    uint8_t added_first[256]; /* bytes that start an added token */
    int any_plain_added;
    int64_t bos, eos;
    char desc[160];
    tok_map cache;      /* pre-token bytes -> offset << 16 | count in cache_ids */
    tok_ids cache_ids;
    /* scratch of the merge loop */
    uint32_t *sym;
    int32_t *nxt, *prv;
    uint64_t *heap;
    size_t scratch_cap, heap_cap;
    char *norm;         /* a normalized segment */
    size_t norm_cap;
};

/* ---- hf_tok_config.c: the parts around the model ---- */

/* What the decoder does, beyond the tokenizer's own fields. */
typedef struct hf_dec_flags {
    int byte_level, meta, byte_fallback, fuse;
} hf_dec_flags;

/* The sentence every refusal ends with: what ferry reads. */
extern const char hf_supported[];

const cJSON *hf_get(const cJSON *o, const char *k);
const char *hf_type_of(const cJSON *o);        /* the "type" string or NULL */
int hf_is_true(const cJSON *o, const char *k);
const char *hf_str_or_null(const cJSON *o, const char *k);
/* FERRY_ERR_FORMAT: "<what> \"<name>\" is not supported (ferry knows <known>)". */
ferry_status hf_refuse(const char *path, const char *what, const char *name, const char *known);

ferry_status hf_read_normalizer(hf_tok *t, const char *path, const cJSON *n);
/* *byte_level, *metaspace: set when a ByteLevel or Metaspace part is seen. */
ferry_status hf_read_pretok(hf_tok *t, const char *path, const cJSON *p, int *byte_level, int *metaspace);
ferry_status hf_read_decoder(hf_tok *t, const char *path, const cJSON *d, hf_dec_flags *f);
/* BOS and EOS from a TemplateProcessing; needs the added tokens loaded. */
ferry_status hf_read_post(hf_tok *t, const char *path, const cJSON *p);

#endif
