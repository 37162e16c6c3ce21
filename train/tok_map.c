/* Open-addressing (linear probing) map from byte strings to uint64 values:
 * the hash is stored per slot so probing rarely touches the key bytes. */
#include "train/tok_map.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

uint64_t tok_hash(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (len * 0xC2B2AE3D27D4EB4Full);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, len);
    h = (h ^ w ^ ((uint64_t)len << 56)) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

static ferry_status map_alloc_slots(tok_map *m, size_t cap)
{
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "tokenizer map: cannot allocate %zu slots", cap);
    m->cap = cap;
    return FERRY_OK;
}

ferry_status tok_map_init(tok_map *m, size_t expect)
{
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < expect * 2)
        cap *= 2;
    return map_alloc_slots(m, cap);
}

void tok_map_free(tok_map *m)
{
    if (!m)
        return;
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

void tok_map_clear(tok_map *m)
{
    memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
    m->keys_len = 0;
}

static tok_map_slot *map_find(const tok_map *m, const void *key, size_t len, uint64_t hash)
{
    size_t mask = m->cap - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        tok_map_slot *s = &m->slots[i];
        if (s->hash == 0)
            return s;
        if (s->hash == hash && s->key_len == len &&
            (len == 0 || memcmp(m->keys + s->key_off, key, len) == 0)) /* an empty key has no bytes stored */
            return s;
    }
}

static ferry_status map_grow(tok_map *m)
{
    tok_map old = *m;
    ferry_status st = map_alloc_slots(m, old.cap * 2);
    if (st != FERRY_OK) {
        *m = old;
        return st;
    }
    size_t mask = m->cap - 1;
    for (size_t i = 0; i < old.cap; i++) {
        if (old.slots[i].hash == 0)
            continue;
        size_t j = old.slots[i].hash & mask;
        while (m->slots[j].hash != 0)
            j = (j + 1) & mask;
        m->slots[j] = old.slots[i];
    }
    free(old.slots);
    return FERRY_OK;
}

static ferry_status map_store_key(tok_map *m, const void *key, size_t len, uint32_t *off)
{
    if (len > UINT32_MAX || m->keys_len + len > UINT32_MAX)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "tokenizer map: keys exceed 4 GiB");
    if (m->keys_len + len > m->keys_cap) {
        size_t cap = m->keys_cap ? m->keys_cap : 4096;
        while (cap < m->keys_len + len)
            cap *= 2;
        char *k = realloc(m->keys, cap);
        if (!k)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "tokenizer map: out of memory growing its keys to %zu bytes", cap);
        m->keys = k;
        m->keys_cap = cap;
    }
    if (len)
        memcpy(m->keys + m->keys_len, key, len);
    *off = (uint32_t)m->keys_len;
    m->keys_len += len;
    return FERRY_OK;
}

ferry_status tok_map_put(tok_map *m, const void *key, size_t len, uint64_t value)
{
    uint64_t hash = tok_hash(key, len);
    tok_map_slot *s = map_find(m, key, len, hash);
    if (s->hash != 0) {
        s->value = value;
        return FERRY_OK;
    }
    if ((m->count + 1) * 2 > m->cap) {
        ferry_status st = map_grow(m);
        if (st != FERRY_OK)
            return st;
        s = map_find(m, key, len, hash);
    }
    uint32_t off = 0;
    ferry_status st = map_store_key(m, key, len, &off);
    if (st != FERRY_OK)
        return st;
    s->hash = hash;
    s->value = value;
    s->key_off = off;
    s->key_len = (uint32_t)len;
    m->count++;
    return FERRY_OK;
}

int tok_map_get_h(const tok_map *m, const void *key, size_t len, uint64_t hash, uint64_t *value)
{
    const tok_map_slot *s = map_find(m, key, len, hash);
    if (s->hash == 0)
        return 0;
    *value = s->value;
    return 1;
}
