/* llm.c token shards: a 256 x int32 little-endian header (magic 20240520,
 * version 1, token count) followed by the tokens as uint16. Owns writing a
 * shard atomically and checking a header against the file it heads; reading
 * batches is dataloader.h's job. */
#ifndef FERRY_TOKENIZE_SHARD_H
#define FERRY_TOKENIZE_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

#define TOK_SHARD_MAGIC 20240520
#define TOK_SHARD_VERSION 1
#define TOK_SHARD_HEADER_BYTES 1024
#define TOK_SHARD_MAX_TOKENS 0x7FFFFFFFu /* the count is an int32 */

/* Writes tokens[0..n) as a shard at `path`, atomically (temp, fsync, rename).
 * FERRY_ERR_INVALID_ARGUMENT if n exceeds TOK_SHARD_MAX_TOKENS; FERRY_ERR_IO
 * (disk full included) leaves any old file at `path` as it was. */
ferry_status tok_shard_write(const char *path, const uint16_t *tokens, size_t n);

/* Checks the first `have` bytes of a shard (`head`, at least what the file
 * has up to 1024) against the file's size: magic, version, and count * 2 +
 * 1024 == file_size. FERRY_ERR_FORMAT naming `path` and what is wrong;
 * *count is the token count on success. */
ferry_status tok_shard_check_header(const char *path, const void *head, size_t have, uint64_t file_size,
                                    uint64_t *count);

#endif
