/* An open-addressing hash map from byte strings to 64-bit values, used by the
 * tokenizer for the vocabulary, the merge ranks and the word cache. Owns its
 * slots and a copy of every key; knows nothing of tokens. Not thread-safe. */
#ifndef FERRY_TOKENIZE_TOK_MAP_H
#define FERRY_TOKENIZE_TOK_MAP_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

typedef struct tok_map_slot {
    uint64_t hash;  /* 0 marks an empty slot (real hashes are forced nonzero) */
    uint64_t value;
    uint32_t key_off;
    uint32_t key_len;
} tok_map_slot;

typedef struct tok_map {
    tok_map_slot *slots;
    size_t cap;      /* power of two */
    size_t count;
    char *keys;      /* every key, back to back */
    size_t keys_len, keys_cap;
} tok_map;

/* A 64-bit hash of a byte string (never 0). */
uint64_t tok_hash(const void *key, size_t len);

/* Empties *m and reserves room for about `expect` keys. */
ferry_status tok_map_init(tok_map *m, size_t expect);
void tok_map_free(tok_map *m);
/* Forgets every key but keeps the memory. */
void tok_map_clear(tok_map *m);

/* Sets key -> value, replacing an existing value. FERRY_ERR_OUT_OF_MEMORY
 * when it cannot grow; keys are limited to 4 GiB in all. */
ferry_status tok_map_put(tok_map *m, const void *key, size_t len, uint64_t value);

/* 1 and *value when key is present, else 0. `hash` is tok_hash(key, len). */
int tok_map_get_h(const tok_map *m, const void *key, size_t len, uint64_t hash, uint64_t *value);

static inline int tok_map_get(const tok_map *m, const void *key, size_t len, uint64_t *value)
{
    return tok_map_get_h(m, key, len, tok_hash(key, len), value);
}

#endif
