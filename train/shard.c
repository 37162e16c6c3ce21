/* Writing and checking llm.c token shards (see shard.h). */
#include "train/shard.h"

#include <string.h>

#include "common/error.h"
#include "common/fileio.h"

ferry_status tok_shard_write(const char *path, const uint16_t *tokens, size_t n)
{
    if (n > TOK_SHARD_MAX_TOKENS)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "shard '%s': %zu tokens exceed the format's %u per shard; "
                       "use a smaller --shard-tokens", path, n, TOK_SHARD_MAX_TOKENS);
    int32_t header[256];
    memset(header, 0, sizeof header);
    header[0] = TOK_SHARD_MAGIC;
    header[1] = TOK_SHARD_VERSION;
    header[2] = (int32_t)n;
    fileio_atomic a;
    ferry_status st = fileio_atomic_open(&a, path);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, header, sizeof header);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, tokens, n * sizeof *tokens);
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    return st;
}

ferry_status tok_shard_check_header(const char *path, const void *head, size_t have, uint64_t file_size,
                                    uint64_t *count)
{
    *count = 0;
    if (file_size == 0)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' is empty; expected a 1024-byte header and uint16 tokens", path);
    if (file_size < TOK_SHARD_HEADER_BYTES || have < TOK_SHARD_HEADER_BYTES)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' has %llu bytes, shorter than the 1024-byte header; "
                       "the file is truncated or not a shard", path, (unsigned long long)file_size);
    int32_t h[3];
    memcpy(h, head, sizeof h);
    if (h[0] != TOK_SHARD_MAGIC)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' has magic %d, not %d: not an llm.c token shard",
                       path, h[0], TOK_SHARD_MAGIC);
    if (h[1] != TOK_SHARD_VERSION)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' has version %d; only version %d (uint16 tokens) is read",
                       path, h[1], TOK_SHARD_VERSION);
    if (h[2] < 0)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' claims a negative token count %d", path, h[2]);
    uint64_t want = (uint64_t)h[2] * 2 + TOK_SHARD_HEADER_BYTES;
    if (want != file_size)
        return err_set(FERRY_ERR_FORMAT, "token shard '%s' claims %d tokens (%llu bytes with the header) but the file has "
                       "%llu bytes: %s", path, h[2], (unsigned long long)want, (unsigned long long)file_size,
                       want > file_size ? "truncated" : "trailing bytes after the tokens");
    *count = (uint64_t)h[2];
    return FERRY_OK;
}
