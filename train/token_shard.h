/* llm.c token shards, in its two formats: a 256 x int32 little-endian
 * header (magic, version, token count; the rest zeros) followed by the
 * tokens, as uint16 in GPT-2's format (magic 20240520, version 1) and as
 * uint32 in Llama 3's (magic 20240801, version 7), whose vocabularies (Llama
 * 3's 128,256, Qwen2's 151,936) do not fit 16 bits. And ferry's masked
 * format for instruction data (magic 20261206, version 1): the same header
 * with the token width, the example count and the target count, then the
 * tokens, a target flag per token and the example starts (byte layout in
 * docs/data.md). Owns writing a shard
 * atomically, replacing a folder's whole set of shards at once (what
 * tokenize writes), and checking a header against the file it heads; reading
 * batches is dataloader.h's job. */
#ifndef FERRY_TOKENIZE_SHARD_H
#define FERRY_TOKENIZE_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

#define TOK_SHARD_MAGIC 20240520        /* GPT-2's format: uint16 tokens */
#define TOK_SHARD_VERSION 1
#define TOK_SHARD_LLAMA3_MAGIC 20240801 /* Llama 3's format: uint32 tokens */
#define TOK_SHARD_LLAMA3_VERSION 7
#define TOK_SHARD_HEADER_BYTES 1024
#define TOK_SHARD_MAX_TOKENS 0x7FFFFFFFu /* the count is an int32 */

#define TOK_SHARD_MASKED_MAGIC 20261206 /* ferry's masked format: tokens, target flags, example starts */
#define TOK_SHARD_MASKED_VERSION 1

typedef enum tok_shard_format {
    TOK_SHARD_GPT2 = 0, /* magic 20240520, version 1, uint16 tokens */
    TOK_SHARD_LLAMA3,   /* magic 20240801, version 7, uint32 tokens */
    TOK_SHARD_MASKED16, /* magic 20261206, version 1, uint16 tokens, flags, starts */
    TOK_SHARD_MASKED32, /* the same with uint32 tokens */
} tok_shard_format;

/* Bytes per token: 2 or 4. */
size_t tok_shard_token_bytes(tok_shard_format f);
/* "GPT-2 (uint16 tokens)", "Llama 3 (uint32 tokens)", "masked (uint16
 * tokens)", "masked (uint32 tokens)", for messages. */
const char *tok_shard_format_name(tok_shard_format f);
/* Whether shards of f carry target flags and example starts. */
int tok_shard_is_masked(tok_shard_format f);

/* Writes tokens[0..n) as a shard at `path`, atomically (temp, fsync, rename).
 * FERRY_ERR_INVALID_ARGUMENT if n exceeds TOK_SHARD_MAX_TOKENS; FERRY_ERR_IO
 * (disk full included) leaves any old file at `path` as it was. */
ferry_status tok_shard_write(const char *path, const uint16_t *tokens, size_t n);
/* The same in Llama 3's format (uint32 tokens). */
ferry_status tok_shard_write_u32(const char *path, const uint32_t *tokens, size_t n);

/* Checks the first `have` bytes of a shard (`head`, at least what the file
 * has up to 1024) against the file's size: a known magic with its version,
 * and count * token bytes + 1024 == file_size. FERRY_ERR_FORMAT naming
 * `path` and what is wrong; on success *count is the token count and
 * *format (may be NULL) the format. */
ferry_status tok_shard_check_header(const char *path, const void *head, size_t have, uint64_t file_size,
                                    uint64_t *count, tok_shard_format *format);

/* ---- the masked format ----
 * Header words (int32, little-endian): [0] magic 20261206, [1] version 1,
 * [2] N tokens, [3] bytes per token (2 or 4), [4] E examples, [5] the
 * number of tokens flagged as targets; [6..255] zero. Then N tokens, N
 * flag bytes (1: the token is a target, 0: context; 0 at every example's
 * first token, which nothing before it in its example predicts), and E
 * uint32 example starts (token indices: the first 0, strictly increasing,
 * each below N). The file is exactly 1024 + N * (bytes + 1) + 4 * E bytes. */

typedef struct tok_shard_header {
    tok_shard_format format;
    uint64_t count;    /* tokens */
    uint64_t examples; /* masked: example starts; 0 for the stream formats */
    uint64_t targets;  /* masked: tokens flagged as targets; the stream formats: count */
} tok_shard_header;

/* tok_shard_check_header for every format, with the masked header's fields:
 * a masked header's token width, reserved words, and size (N tokens, N
 * flags, E starts) are checked against the file, each refusal a
 * FERRY_ERR_FORMAT naming `path` and the field. */
ferry_status tok_shard_read_header(const char *path, const void *head, size_t have, uint64_t file_size,
                                   tok_shard_header *h);
/* Byte offsets, in a masked shard, of its flags and of its example starts. */
uint64_t tok_shard_flags_offset(const tok_shard_header *h);
uint64_t tok_shard_starts_offset(const tok_shard_header *h);

/* The starts of a masked shard, as read: the first 0, strictly increasing,
 * each below the token count; FERRY_ERR_FORMAT naming the first that is
 * not. */
ferry_status tok_shard_check_starts(const char *path, const tok_shard_header *h, const uint32_t *starts);

/* Flags flags[0..n) of tokens first..first+n-1 of a masked shard whose
 * (checked) starts are starts[0..h->examples): each 0 or 1, and 0 at an
 * example's first token; FERRY_ERR_FORMAT naming the token otherwise. Adds
 * the 1s to *targets. *next is the index of the first start >= first: 0 at
 * the first call, kept by the caller from chunk to chunk. */
ferry_status tok_shard_check_flags(const char *path, const tok_shard_header *h, const uint32_t *starts,
                                   const uint8_t *flags, size_t n, uint64_t first, size_t *next, uint64_t *targets);

/* A shard's examples, as tokenize builds them: n tokens with a flag each
 * and the starts of nexamples examples. */
typedef struct tok_shard_examples {
    const uint32_t *tokens;
    const uint8_t *target;
    size_t n;
    const uint32_t *starts;
    size_t nexamples;
} tok_shard_examples;

/* Writes ex as a masked shard of format f (TOK_SHARD_MASKED16 or 32) at
 * `path`, atomically. FERRY_ERR_INVALID_ARGUMENT, and nothing written, for
 * examples the format would refuse (starts, flags, a token that does not fit
 * 16 bits), or too many tokens. */
ferry_status tok_shard_write_masked(const char *path, tok_shard_format f, const tok_shard_examples *ex);

/* ---- a folder's shard set ----
 * tokenize's output folder holds one set: val_NNNNNN.bin and
 * train_NNNNNN.bin (six or more digits, from 000000 up). A new set replaces
 * the old as a whole: its shards are written and synced in a staging folder
 * inside DIR (DIR/.tokenize-staging), then renamed into place together, and
 * the old set's shards that the new one lacks are removed. A failure before
 * the commit leaves the old set as it was; after a commit DIR holds exactly
 * the new set (files that are not shards are never touched). Only a crash or
 * a failed rename inside the commit itself, a moment of renames, can leave a
 * mix, and the message then says so. */

#define TOK_SHARD_STAGING ".tokenize-staging"

typedef struct tok_shard_set tok_shard_set;

/* Creates DIR if it does not exist (with the folders above it, as mkdir -p),
 * and the staging folder in it, emptying one that a crashed run left: so an
 * unwritable DIR is found before any work. A shard name in DIR that is not a
 * regular file (a link, a device, a folder), or a staging folder that is not
 * a real folder, is refused and left as it is. FERRY_ERR_IO naming it. */
ferry_status tok_shard_set_begin(const char *dir, tok_shard_set **out);
/* Writes the next shard of `split` ("val" or "train"; numbered from 0 in the
 * order added) to the staging folder, synced. FERRY_ERR_INVALID_ARGUMENT for
 * another split name or too many tokens; FERRY_ERR_IO (a full disk included)
 * naming the file. *name (optional) gets its final path, owned by the set. */
ferry_status tok_shard_set_add(tok_shard_set *s, const char *split, const uint16_t *tokens, size_t n,
                               const char **name);
/* The same in Llama 3's format (uint32 tokens), for a vocabulary above
 * 65,536. A set holds shards of one format: adding one of the other format
 * than the set's first is FERRY_ERR_INVALID_ARGUMENT (the loader refuses
 * such a mix). */
ferry_status tok_shard_set_add_u32(tok_shard_set *s, const char *split, const uint32_t *tokens, size_t n,
                                   const char **name);
/* The same for a masked shard of format f. */
ferry_status tok_shard_set_add_masked(tok_shard_set *s, const char *split, tok_shard_format f,
                                      const tok_shard_examples *ex, const char **name);
/* Puts the staged shards in place, removes the old set's other shards and
 * the staging folder, syncs DIR, and frees s whatever the outcome. *replaced
 * and *removed (each may be NULL) count the earlier set's shards that a new
 * one replaced and that were removed. */
ferry_status tok_shard_set_commit(tok_shard_set *s, size_t *replaced, size_t *removed);
/* Removes the staged shards and the staging folder, leaves DIR's shard set
 * as it was, and frees s. Accepts NULL. */
void tok_shard_set_abort(tok_shard_set *s);

#endif
