/* GPT-2 byte-level BPE (see bpe.h). Owns: loading encoder.json/vocab.bpe, the
 * hand-written pre-tokenizer that reproduces the JS regex, the merge loop,
 * the word cache, and the tables every tokenizer shares (character classes,
 * GPT-2's byte map), built once per process. The merge loop follows the
 * gpt-3-encoder package exactly: each round takes the lowest-ranked pair (the
 * rightmost one among equal ranks), merges every occurrence of that exact
 * pair left to right, and repeats. Its merge table is a JS object keyed by
 * "first,second", so a pair whose joined key equals a merge's key (e.g.
 * ["\",", "\""] vs ["\"", ",\""]) gets that merge's rank too; we add those
 * aliases at load. */
#include "train/bpe.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"
#include "train/tok_map.h"
#include "train/unicode_tables.h"

enum { CLS_OTHER = 0, CLS_LETTER = 1, CLS_NUMBER = 2, CLS_SPACE = 3 };

#define NO_RANK UINT32_MAX
#define CACHE_MAX_WORD 128          /* bytes; longer words are not cached */
#define CACHE_MAX_ENTRIES (1u << 20) /* then the cache starts over */

struct tok_bpe {
    uint32_t vocab_size;
    uint32_t byte_id[256];  /* token of each single byte */
    uint32_t *tok_off;      /* vocab_size + 1 offsets into tok_bytes */
    char *tok_bytes;        /* raw bytes of every token, back to back */
    tok_map vocab;          /* byte-encoded token text (as in encoder.json) -> id */
    tok_map pairs;          /* (id a, id b) as 8 bytes -> rank << 32 | merged id */
    tok_map cache;          /* word bytes -> offset << 16 | count in cache_ids */
    tok_ids cache_ids;
    /* scratch of the merge loop */
    uint32_t *sym, *rank, *merged;
    uint8_t *fresh;
    size_t scratch_cap;
};

void tok_ids_free(tok_ids *ids)
{
    if (!ids)
        return;
    free(ids->ids);
    ids->ids = NULL;
    ids->len = ids->cap = 0;
}

static ferry_status ids_reserve(tok_ids *v, size_t extra)
{
    if (v->len + extra <= v->cap)
        return FERRY_OK;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->len + extra)
        cap *= 2;
    uint32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot grow a token array to %zu ids", cap);
    v->ids = p;
    v->cap = cap;
    return FERRY_OK;
}

/* ---- Unicode classes ---------------------------------------------------- */

static int in_ranges(const tok_uni_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

#define NRANGES(a) (sizeof(a) / sizeof((a)[0]))

static int class_slow(uint32_t cp)
{
    if (in_ranges(tok_uni_letter, NRANGES(tok_uni_letter), cp))
        return CLS_LETTER;
    if (in_ranges(tok_uni_number, NRANGES(tok_uni_number), cp))
        return CLS_NUMBER;
    if (in_ranges(tok_uni_space, NRANGES(tok_uni_space), cp))
        return CLS_SPACE;
    return CLS_OTHER;
}

/* Tables every tokenizer shares, built once per process (tables_once):
 * the class of each BMP code point, and GPT-2's byte <-> code point maps. */
static uint8_t cls_bmp[0x10000];
static uint32_t byte_cp[256];
static int16_t cp_byte[0x200];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
 * other 68 take the code points 256, 257, ... in byte order. */
static void build_tables(void)
{
    for (uint32_t cp = 0; cp < 0x10000; cp++)
        cls_bmp[cp] = (uint8_t)class_slow(cp);
    uint32_t next = 256;
    for (unsigned x = 0; x < 256; x++) {
        int keep = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
        byte_cp[x] = keep ? x : next++;
    }
    for (unsigned i = 0; i < 0x200; i++)
        cp_byte[i] = -1;
    for (unsigned b = 0; b < 256; b++)
        cp_byte[byte_cp[b]] = (int16_t)b;
}

/* Decodes one UTF-8 character at s[i] (i < n). Returns its length; *cls is its
 * class. A byte that does not start valid UTF-8 is a one-byte "other". */
static size_t next_char(const unsigned char *s, size_t n, size_t i, int *cls)
{
    unsigned b0 = s[i];
    if (b0 < 0x80) {
        *cls = cls_bmp[b0];
        return 1;
    }
    uint32_t cp;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        cp = b0 & 0x0F;
        if (b0 == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (b0 == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        cp = b0 & 0x07;
        if (b0 == 0xF0)
            lo = 0x90;
        if (b0 == 0xF4)
            hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        *cls = CLS_OTHER;
        return 1;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) {
        *cls = CLS_OTHER;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if (k > 1 && (s[i + k] & 0xC0) != 0x80) {
            *cls = CLS_OTHER;
            return 1;
        }
        cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    *cls = cp < 0x10000 ? cls_bmp[cp] : class_slow(cp);
    return len;
}

/* ---- pre-tokenizer --------------------------------------------------------- */

static size_t run_of(const unsigned char *s, size_t n, size_t i, int want)
{
    while (i < n) {
        int c;
        size_t l = next_char(s, n, i, &c);
        if (c != want)
            break;
        i += l;
    }
    return i;
}

static size_t contraction_len(const unsigned char *s, size_t n, size_t i)
{
    if (s[i] != '\'' || i + 1 >= n)
        return 0;
    unsigned c1 = s[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return 2;
    if (i + 2 < n) {
        unsigned c2 = s[i + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
            return 3;
    }
    return 0;
}

size_t tok_pretoken_end(const tok_bpe *t, const char *text, size_t n, size_t pos)
{
    (void)t; /* loaded, so the shared class table is built */
    const unsigned char *s = (const unsigned char *)text;
    size_t k = contraction_len(s, n, pos);
    if (k)
        return pos + k;
    int cls;
    size_t l = next_char(s, n, pos, &cls);
    /* " ?X+" for X = letter, number, other: an optional ASCII space first. */
    if (s[pos] == ' ' && pos + 1 < n) {
        int c2;
        next_char(s, n, pos + 1, &c2);
        if (c2 != CLS_SPACE)
            return run_of(s, n, pos + 1, c2);
    }
    if (cls != CLS_SPACE)
        return run_of(s, n, pos + l, cls);
    /* \s+(?!\S): the whole run at the end of text, else the run less its last
     * character; a lone space before non-space falls to \s+ (one char). */
    size_t end = pos, last = pos;
    while (end < n) {
        int c;
        size_t cl = next_char(s, n, end, &c);
        if (c != CLS_SPACE)
            break;
        last = end;
        end += cl;
    }
    if (end == n || last == pos)
        return end;
    return last;
}

/* ---- merges ---------------------------------------------------------------- */

static uint32_t pair_lookup(const tok_bpe *t, uint32_t a, uint32_t b, uint32_t *merged)
{
    uint32_t key[2] = {a, b};
    uint64_t v;
    if (!tok_map_get(&t->pairs, key, sizeof key, &v))
        return NO_RANK;
    *merged = (uint32_t)v;
    return (uint32_t)(v >> 32);
}

static ferry_status scratch_reserve(tok_bpe *t, size_t n)
{
    if (n <= t->scratch_cap)
        return FERRY_OK;
    size_t cap = t->scratch_cap ? t->scratch_cap : 256;
    while (cap < n)
        cap *= 2;
    uint32_t *sym = realloc(t->sym, cap * sizeof *sym);
    if (sym)
        t->sym = sym;
    uint32_t *rank = realloc(t->rank, cap * sizeof *rank);
    if (rank)
        t->rank = rank;
    uint32_t *merged = realloc(t->merged, cap * sizeof *merged);
    if (merged)
        t->merged = merged;
    uint8_t *fresh = realloc(t->fresh, cap);
    if (fresh)
        t->fresh = fresh;
    if (!sym || !rank || !merged || !fresh)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate BPE scratch for a %zu-byte word", n);
    t->scratch_cap = cap;
    return FERRY_OK;
}

/* One round: merge every occurrence of (a, b) into m, left to right; then
 * re-rank only the pairs that touch a new symbol (the others kept theirs). */
static size_t merge_round(tok_bpe *t, size_t n, uint32_t a, uint32_t b, uint32_t m)
{
    uint32_t *sym = t->sym, *rank = t->rank, *merged = t->merged;
    uint8_t *fresh = t->fresh;
    size_t j = 0;
    for (size_t i = 0; i < n; j++) {
        if (i + 1 < n && sym[i] == a && sym[i + 1] == b) {
            sym[j] = m;
            fresh[j] = 1;
            i += 2;
        } else {
            sym[j] = sym[i];
            rank[j] = rank[i];
            merged[j] = merged[i];
            fresh[j] = 0;
            i += 1;
        }
    }
    for (size_t k = 0; k + 1 < j; k++)
        if (fresh[k] || fresh[k + 1])
            rank[k] = pair_lookup(t, sym[k], sym[k + 1], &merged[k]);
    return j;
}

static ferry_status bpe_word(tok_bpe *t, const unsigned char *w, size_t n, tok_ids *out)
{
    ferry_status st = scratch_reserve(t, n);
    if (st != FERRY_OK)
        return st;
    uint32_t *sym = t->sym, *rank = t->rank, *merged = t->merged;
    for (size_t i = 0; i < n; i++)
        sym[i] = t->byte_id[w[i]];
    for (size_t i = 0; i + 1 < n; i++)
        rank[i] = pair_lookup(t, sym[i], sym[i + 1], &merged[i]);
    while (n > 1) {
        size_t best_i = 0;
        uint32_t best = NO_RANK;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] <= best) { /* ties: the rightmost, as the JS object keeps the last */
                best = rank[i];
                best_i = i;
            }
        if (best == NO_RANK)
            break;
        n = merge_round(t, n, sym[best_i], sym[best_i + 1], merged[best_i]);
    }
    st = ids_reserve(out, n);
    if (st != FERRY_OK)
        return st;
    memcpy(out->ids + out->len, sym, n * sizeof *sym);
    out->len += n;
    return FERRY_OK;
}

static ferry_status encode_word(tok_bpe *t, const unsigned char *w, size_t n, tok_ids *out)
{
    if (n > CACHE_MAX_WORD)
        return bpe_word(t, w, n, out);
    uint64_t h = tok_hash(w, n), v;
    if (tok_map_get_h(&t->cache, w, n, h, &v)) {
        size_t off = (size_t)(v >> 16), cnt = (size_t)(v & 0xFFFF);
        ferry_status st = ids_reserve(out, cnt);
        if (st != FERRY_OK)
            return st;
        memcpy(out->ids + out->len, t->cache_ids.ids + off, cnt * sizeof(uint32_t));
        out->len += cnt;
        return FERRY_OK;
    }
    size_t before = out->len;
    ferry_status st = bpe_word(t, w, n, out);
    if (st != FERRY_OK)
        return st;
    if (t->cache.count >= CACHE_MAX_ENTRIES) {
        tok_map_clear(&t->cache);
        t->cache_ids.len = 0;
    }
    size_t cnt = out->len - before;
    if (ids_reserve(&t->cache_ids, cnt) != FERRY_OK) /* a cache that cannot grow is only slower */
        return FERRY_OK;
    uint64_t off = t->cache_ids.len;
    memcpy(t->cache_ids.ids + off, out->ids + before, cnt * sizeof(uint32_t));
    t->cache_ids.len += cnt;
    if (tok_map_put(&t->cache, w, n, off << 16 | cnt) != FERRY_OK)
        t->cache_ids.len = off;
    return FERRY_OK;
}

ferry_status tok_bpe_encode(tok_bpe *t, const char *text, size_t len, tok_ids *out)
{
    size_t pos = 0;
    while (pos < len) {
        size_t end = tok_pretoken_end(t, text, len, pos);
        ferry_status st = encode_word(t, (const unsigned char *)text + pos, end - pos, out);
        if (st != FERRY_OK)
            return st;
        pos = end;
    }
    return FERRY_OK;
}

/* ---- decode ------------------------------------------------------------------ */

uint32_t tok_bpe_vocab_size(const tok_bpe *t) { return t->vocab_size; }

const char *tok_bpe_token_bytes(const tok_bpe *t, uint32_t id, size_t *len)
{
    if (id >= t->vocab_size)
        return NULL;
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

ferry_status tok_bpe_decode(const tok_bpe *t, const uint32_t *ids, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->vocab_size)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "cannot decode token %u at position %zu: the vocabulary has %u tokens",
                           ids[i], i, t->vocab_size);
        total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to decode %zu tokens", total + 1, n);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        memcpy(buf + at, t->tok_bytes + t->tok_off[ids[i]], l);
        at += l;
    }
    buf[at] = '\0';
    *out = buf;
    *out_len = at;
    return FERRY_OK;
}

/* Byte-encoded form of raw bytes, UTF-8 (what encoder.json keys hold). */
static size_t byte_encode(const unsigned char *raw, size_t len, char *enc)
{
    size_t at = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = byte_cp[raw[i]];
        if (cp < 0x80) {
            enc[at++] = (char)cp;
        } else {
            enc[at++] = (char)(0xC0 | (cp >> 6));
            enc[at++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return at;
}

int64_t tok_bpe_lookup(const tok_bpe *t, const char *text, size_t len)
{
    char *enc = malloc(len * 2 + 1);
    if (!enc)
        return -1;
    size_t n = byte_encode((const unsigned char *)text, len, enc);
    uint64_t v;
    int found = tok_map_get(&t->vocab, enc, n, &v);
    free(enc);
    return found ? (int64_t)v : -1;
}

/* ---- loading ------------------------------------------------------------------ */

/* Raw bytes of a byte-encoded key; -1 if a character is not a byte stand-in. */
static long byte_decode(const char *key, unsigned char *raw)
{
    const unsigned char *s = (const unsigned char *)key;
    long n = 0;
    while (*s) {
        uint32_t cp;
        if (s[0] < 0x80) {
            cp = s[0];
            s += 1;
        } else if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80) {
            cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
            s += 2;
        } else {
            return -1;
        }
        if (cp >= 0x200 || cp_byte[cp] < 0)
            return -1;
        raw[n++] = (unsigned char)cp_byte[cp];
    }
    return n;
}

static ferry_status load_encoder(tok_bpe *t, const char *path)
{
    char *text;
    size_t len;
    ferry_status st = fileio_read(path, "encoder.json", &text, &len);
    if (st != FERRY_OK)
        return st;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(FERRY_ERR_FORMAT, "encoder.json '%s' is not a JSON object of token -> id", path);
    }
    size_t count = (size_t)cJSON_GetArraySize(root);
    uint32_t *lens = calloc(count + 1, sizeof *lens);
    unsigned char *raw = malloc(2048);
    st = (lens && raw) ? tok_map_init(&t->vocab, count) : err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the vocabulary");
    size_t total = 0;
    for (cJSON *it = root->child; st == FERRY_OK && it; it = it->next) {
        double d = it->valuedouble;
        long n = strlen(it->string) < 2048 ? byte_decode(it->string, raw) : -1;
        if (!cJSON_IsNumber(it) || d < 0 || d >= (double)count || d != (double)(uint32_t)d)
            st = err_set(FERRY_ERR_FORMAT, "encoder.json '%s': token \"%s\" has id %s; ids must be integers 0..%zu",
                         path, it->string, cJSON_IsNumber(it) ? "out of range" : "that is not a number", count - 1);
        else if (n <= 0)
            st = err_set(FERRY_ERR_FORMAT, "encoder.json '%s': token \"%s\" (id %u) is not GPT-2 byte-encoded text",
                         path, it->string, (uint32_t)d);
        else if (lens[(uint32_t)d])
            st = err_set(FERRY_ERR_FORMAT, "encoder.json '%s': id %u is given to two tokens (\"%s\" and another)",
                         path, (uint32_t)d, it->string);
        else {
            lens[(uint32_t)d] = (uint32_t)n;
            total += (size_t)n;
            st = tok_map_put(&t->vocab, it->string, strlen(it->string), (uint64_t)d);
        }
    }
    if (st == FERRY_OK) {
        t->vocab_size = (uint32_t)count;
        t->tok_off = malloc((count + 1) * sizeof *t->tok_off);
        t->tok_bytes = malloc(total + 1);
        if (!t->tok_off || !t->tok_bytes)
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of token text", total);
    }
    if (st == FERRY_OK) {
        t->tok_off[0] = 0;
        for (size_t i = 0; i < count; i++)
            t->tok_off[i + 1] = t->tok_off[i] + lens[i];
        for (cJSON *it = root->child; it; it = it->next)
            byte_decode(it->string, (unsigned char *)t->tok_bytes + t->tok_off[(uint32_t)it->valuedouble]);
    }
    free(lens);
    free(raw);
    cJSON_Delete(root);
    return st;
}

static int is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Adds every split of the JS key "first,second" at a comma into two vocab
 * tokens x, y (with x+y in the vocab) as pair (x, y) -> rank: the primary
 * split, and the aliases the JS object keying creates. */
static ferry_status add_merge(tok_bpe *t, const char *key, size_t klen, size_t comma, uint32_t rank,
                              const char *path, size_t line)
{
    char joined[1024];
    for (size_t p = 0; p < klen; p++) {
        if (key[p] != ',' || p == 0 || p + 1 == klen)
            continue;
        uint64_t x, y, xy;
        int primary = p == comma;
        int have = tok_map_get(&t->vocab, key, p, &x) && tok_map_get(&t->vocab, key + p + 1, klen - p - 1, &y);
        memcpy(joined, key, p);
        memcpy(joined + p, key + p + 1, klen - p - 1);
        have = have && tok_map_get(&t->vocab, joined, klen - 1, &xy);
        if (!have) {
            if (primary)
                return err_set(FERRY_ERR_FORMAT, "vocab.bpe '%s' line %zu: merge \"%.*s\" + \"%.*s\" uses or makes a token "
                               "that encoder.json lacks; are the two files from the same tokenizer?",
                               path, line, (int)p, key, (int)(klen - p - 1), key + p + 1);
            continue;
        }
        uint32_t pair[2] = {(uint32_t)x, (uint32_t)y};
        ferry_status st = tok_map_put(&t->pairs, pair, sizeof pair, (uint64_t)rank << 32 | xy);
        if (st != FERRY_OK)
            return st;
    }
    return FERRY_OK;
}

static ferry_status load_merges(tok_bpe *t, const char *path)
{
    char *text;
    size_t len;
    ferry_status st = fileio_read(path, "vocab.bpe", &text, &len);
    if (st != FERRY_OK)
        return st;
    st = tok_map_init(&t->pairs, 65536);
    /* As the JS package: lines split on '\n', the first ("#version") and the
     * last (empty after the final newline) dropped. */
    const char *first_nl = memchr(text, '\n', len);
    if (st == FERRY_OK && (!first_nl || strncmp(text, "#version", 8) != 0))
        st = err_set(FERRY_ERR_FORMAT, "vocab.bpe '%s' does not start with a \"#version\" line", path);
    const char *p = first_nl ? first_nl + 1 : text + len;
    uint32_t rank = 0;
    for (size_t line = 2; st == FERRY_OK; line++) {
        const char *nl = memchr(p, '\n', (size_t)(text + len - p));
        if (!nl)
            break; /* the last piece, dropped like the JS slice(1, -1) */
        const char *part[3];
        size_t plen[3], nparts = 0;
        for (const char *q = p; q < nl;) {
            while (q < nl && is_ascii_space(*q))
                q++;
            const char *b = q;
            while (q < nl && !is_ascii_space(*q))
                q++;
            if (q > b && nparts < 3) {
                part[nparts] = b;
                plen[nparts++] = (size_t)(q - b);
            }
        }
        if (nparts != 2 || plen[0] + plen[1] + 1 > 1024)
            st = err_set(FERRY_ERR_FORMAT, "vocab.bpe '%s' line %zu: expected two tokens separated by a space, got \"%.*s\"",
                         path, line, (int)(nl - p > 80 ? 80 : nl - p), p);
        else {
            char key[1024];
            memcpy(key, part[0], plen[0]);
            key[plen[0]] = ',';
            memcpy(key + plen[0] + 1, part[1], plen[1]);
            st = add_merge(t, key, plen[0] + plen[1] + 1, plen[0], rank++, path, line);
        }
        p = nl + 1;
    }
    free(text);
    return st;
}

ferry_status tok_bpe_load(const char *encoder_json, const char *vocab_bpe, tok_bpe **out)
{
    *out = NULL;
    if (!encoder_json || !vocab_bpe)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "tok_bpe_load needs the paths of encoder.json and vocab.bpe");
    tok_bpe *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the tokenizer");
    pthread_once(&tables_once, build_tables);
    ferry_status st = load_encoder(t, encoder_json);
    for (unsigned b = 0; st == FERRY_OK && b < 256; b++) {
        char enc[2];
        size_t n = byte_encode((const unsigned char *)&(unsigned char){(unsigned char)b}, 1, enc);
        uint64_t id = 0;
        if (!tok_map_get(&t->vocab, enc, n, &id))
            st = err_set(FERRY_ERR_FORMAT, "encoder.json '%s' has no token for byte 0x%02X; "
                         "GPT-2 vocabularies have one per byte", encoder_json, b);
        t->byte_id[b] = (uint32_t)id;
    }
    if (st == FERRY_OK)
        st = load_merges(t, vocab_bpe);
    if (st == FERRY_OK)
        st = tok_map_init(&t->cache, 1 << 16);
    if (st != FERRY_OK) {
        tok_bpe_destroy(t);
        return st;
    }
    *out = t;
    return FERRY_OK;
}

void tok_bpe_destroy(tok_bpe *t)
{
    if (!t)
        return;
    tok_map_free(&t->vocab);
    tok_map_free(&t->pairs);
    tok_map_free(&t->cache);
    tok_ids_free(&t->cache_ids);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->sym);
    free(t->rank);
    free(t->merged);
    free(t->fresh);
    free(t);
}
