/* llm.c token shards, in its two formats: a 256 x int32 little-endian
 * header (magic, version, token count; the rest zeros) followed by the
 * tokens, as uint16 in GPT-2's format (magic 20240520, version 1) and as
 * uint32 in Llama 3's (magic 20240801, version 7), whose vocabularies (Llama
 * 3's 128,256, Qwen2's 151,936) do not fit 16 bits. Owns writing a shard
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

typedef enum tok_shard_format {
    TOK_SHARD_GPT2 = 0, /* magic 20240520, version 1, uint16 tokens */
    TOK_SHARD_LLAMA3,   /* magic 20240801, version 7, uint32 tokens */
} tok_shard_format;

/* Bytes per token: 2 or 4. */
size_t tok_shard_token_bytes(tok_shard_format f);
/* "GPT-2 (uint16 tokens)" or "Llama 3 (uint32 tokens)", for messages. */
const char *tok_shard_format_name(tok_shard_format f);

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
/* Puts the staged shards in place, removes the old set's other shards and
 * the staging folder, syncs DIR, and frees s whatever the outcome. *replaced
 * and *removed (each may be NULL) count the earlier set's shards that a new
 * one replaced and that were removed. */
ferry_status tok_shard_set_commit(tok_shard_set *s, size_t *replaced, size_t *removed);
/* Removes the staged shards and the staging folder, leaves DIR's shard set
 * as it was, and frees s. Accepts NULL. */
void tok_shard_set_abort(tok_shard_set *s);

#endif
