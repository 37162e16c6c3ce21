/* Encoding and decoding with a loaded tokenizer.json (see hf_tokenizer.h).
 * The text is cut at added tokens first; each piece between them is
 * normalized ("▁" for SentencePiece), pre-tokenized, and each pre-token
 * merged by rank: the pair of lowest rank first, the leftmost among equal
 * ranks, as the Hugging Face tokenizers library and the JavaScript
 * references do. Pre-tokens up to CACHE_MAX_WORD bytes are cached. */
#include "train/hf_tok_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define CACHE_MAX_WORD 128
#define CACHE_MAX_ENTRIES (1u << 20)
#define NO_RANK UINT32_MAX

static const char meta[] = "\xE2\x96\x81"; /* ▁ */

static ferry_status ids_push(tok_ids *v, const uint32_t *ids, size_t n)
{
    if (v->len + n > v->cap) {
        size_t cap = v->cap ? v->cap : 1024;
        while (cap < v->len + n)
            cap *= 2;
        uint32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot grow a token array to %zu ids", cap);
        v->ids = p;
        v->cap = cap;
    }
    memcpy(v->ids + v->len, ids, n * sizeof *ids);
    v->len += n;
    return FERRY_OK;
}

static ferry_status scratch(hf_tok *t, size_t n)
{
    if (n <= t->scratch_cap)
        return FERRY_OK;
    size_t cap = t->scratch_cap ? t->scratch_cap : 256;
    while (cap < n)
        cap *= 2;
    uint32_t *sym = realloc(t->sym, cap * sizeof *sym);
    if (sym)
        t->sym = sym;
    int32_t *nxt = realloc(t->nxt, cap * sizeof *nxt);
    if (nxt)
        t->nxt = nxt;
    int32_t *prv = realloc(t->prv, cap * sizeof *prv);
    if (prv)
        t->prv = prv;
    if (!sym || !nxt || !prv || cap > (size_t)INT32_MAX)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate merge scratch for a %zu-symbol pre-token", n);
    t->scratch_cap = cap;
    return FERRY_OK;
}

/* ---- the merge loop: a heap of (rank, left position) ------------------------- */

static uint32_t pair_rank(const hf_tok *t, uint32_t a, uint32_t b, uint32_t *merged)
{
    uint32_t key[2] = {a, b};
    uint64_t v;
    if (!tok_map_get(&t->pairs, key, sizeof key, &v))
        return NO_RANK;
    *merged = (uint32_t)v;
    return (uint32_t)(v >> 32);
}

static void heap_up(uint64_t *h, size_t i)
{
    while (i > 0 && h[(i - 1) / 2] > h[i]) {
        uint64_t x = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = x;
        i = (i - 1) / 2;
    }
}

static void heap_down(uint64_t *h, size_t n)
{
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] < h[m])
            m = l;
        if (r < n && h[r] < h[m])
            m = r;
        if (m == i)
            return;
        uint64_t x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

static ferry_status heap_push(hf_tok *t, size_t *n, int32_t left)
{
    int32_t right = t->nxt[left];
    uint32_t merged = HF_NO_ID;
    if (right < 0)
        return FERRY_OK;
    uint32_t r = pair_rank(t, t->sym[left], t->sym[right], &merged);
    if (r == NO_RANK)
        return FERRY_OK;
    if (*n == t->heap_cap) {
        size_t cap = t->heap_cap ? t->heap_cap * 2 : 256;
        uint64_t *h = realloc(t->heap, cap * sizeof *h);
        if (!h)
            return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot grow the merge queue to %zu entries", cap);
        t->heap = h;
        t->heap_cap = cap;
    }
    t->heap[*n] = (uint64_t)r << 32 | (uint32_t)left;
    heap_up(t->heap, (*n)++);
    return FERRY_OK;
}

/* Merges t->sym[0..n) in place and appends the result. */
static ferry_status merge_symbols(hf_tok *t, size_t n, tok_ids *out)
{
    uint32_t *sym = t->sym;
    int32_t *nxt = t->nxt, *prv = t->prv;
    for (size_t i = 0; i < n; i++) {
        nxt[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prv[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    ferry_status st = FERRY_OK;
    for (size_t i = 0; st == FERRY_OK && i + 1 < n; i++)
        st = heap_push(t, &hn, (int32_t)i);
    while (st == FERRY_OK && hn > 0) {
        uint64_t top = t->heap[0];
        t->heap[0] = t->heap[--hn];
        heap_down(t->heap, hn);
        int32_t left = (int32_t)(uint32_t)top, right = nxt[left];
        uint32_t merged = HF_NO_ID;
        /* A stale entry: the left symbol was merged away, or its pair changed. */
        if (sym[left] == HF_NO_ID || right < 0 || pair_rank(t, sym[left], sym[right], &merged) != top >> 32)
            continue;
        sym[left] = merged;
        sym[right] = HF_NO_ID;
        nxt[left] = nxt[right];
        if (nxt[right] >= 0)
            prv[nxt[right]] = left;
        if (prv[left] >= 0)
            st = heap_push(t, &hn, prv[left]);
        if (st == FERRY_OK)
            st = heap_push(t, &hn, left);
    }
    for (int32_t i = 0; st == FERRY_OK && i >= 0; i = nxt[i])
        st = ids_push(out, &sym[i], 1);
    return st;
}

/* ---- one pre-token ---------------------------------------------------------------- */

/* The first symbols of a SentencePiece pre-token: each character's token,
 * or its bytes' <0xNN> tokens (byte fallback), or unk. */
static ferry_status sp_symbols(hf_tok *t, const unsigned char *w, size_t n, size_t *count)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = hf_utf8_next(w, n, i, &cp);
        uint64_t id;
        if (cp != 0xFFFFFFFFu && tok_map_get(&t->vocab, w + i, l, &id)) {
            t->sym[k++] = (uint32_t)id;
        } else if (t->byte_fallback) {
            for (size_t b = 0; b < l; b++)
                t->sym[k++] = t->byte_id[w[i + b]];
        } else if (t->unk != HF_NO_ID) {
            t->sym[k++] = t->unk;
        } else {
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "the text holds a character (byte 0x%02X at offset %zu of a "
                           "pre-token) that the vocabulary lacks, and the tokenizer has neither byte fallback nor an "
                           "unk token", w[i], i);
        }
        i += l;
    }
    *count = k;
    return FERRY_OK;
}

static ferry_status bpe_word(hf_tok *t, const unsigned char *w, size_t n, tok_ids *out)
{
    ferry_status st = scratch(t, n);
    if (st != FERRY_OK)
        return st;
    size_t k = n;
    if (t->kind == HF_BYTE_LEVEL)
        for (size_t i = 0; i < n; i++)
            t->sym[i] = t->byte_id[w[i]];
    else
        st = sp_symbols(t, w, n, &k);
    return st == FERRY_OK ? merge_symbols(t, k, out) : st;
}

static ferry_status encode_word(hf_tok *t, const unsigned char *w, size_t n, tok_ids *out)
{
    uint64_t v;
    if (n == 0)
        return FERRY_OK;
    if (t->ignore_merges && tok_map_get(&t->vocab, w, n, &v))
        return ids_push(out, &(uint32_t){(uint32_t)v}, 1);
    if (n > CACHE_MAX_WORD)
        return bpe_word(t, w, n, out);
    uint64_t h = tok_hash(w, n);
    if (tok_map_get_h(&t->cache, w, n, h, &v))
        return ids_push(out, t->cache_ids.ids + (v >> 16), (size_t)(v & 0xFFFF));
    size_t before = out->len;
    ferry_status st = bpe_word(t, w, n, out);
    if (st != FERRY_OK)
        return st;
    if (t->cache.count >= CACHE_MAX_ENTRIES) {
        tok_map_clear(&t->cache);
        t->cache_ids.len = 0;
    }
    uint64_t off = t->cache_ids.len;
    size_t cnt = out->len - before;
    if (ids_push(&t->cache_ids, out->ids + before, cnt) != FERRY_OK) /* a cache that cannot grow is only slower */
        return FERRY_OK;
    if (tok_map_put(&t->cache, w, n, off << 16 | cnt) != FERRY_OK)
        t->cache_ids.len = off;
    return FERRY_OK;
}

/* ---- one piece of text between added tokens ---------------------------------------- */

static ferry_status norm_reserve(hf_tok *t, size_t n)
{
    if (n <= t->norm_cap)
        return FERRY_OK;
    char *p = realloc(t->norm, n);
    if (!p)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to normalize the text", n);
    t->norm = p;
    t->norm_cap = n;
    return FERRY_OK;
}

static ferry_status encode_byte_level(hf_tok *t, const char *s, size_t n, size_t at, tok_ids *out)
{
    size_t bad;
    uint32_t cp;
    if (t->nfc && !hf_nfc_stable(s, n, &bad, &cp))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "the text holds U+%04X at byte %zu, which this tokenizer's NFC "
                       "normalizer could change, and ferry does not implement NFC: normalize the text to NFC first "
                       "(python3: unicodedata.normalize('NFC', text))", cp, at + bad);
    if (t->prefix_space && n > 0 && s[0] != ' ') {
        ferry_status st = norm_reserve(t, n + 1);
        if (st != FERRY_OK)
            return st;
        t->norm[0] = ' ';
        memcpy(t->norm + 1, s, n);
        s = t->norm;
        n++;
    }
    for (size_t pos = 0; pos < n;) {
        size_t end = hf_pretoken_end(t->split, s, n, pos);
        ferry_status st = encode_word(t, (const unsigned char *)s + pos, end - pos, out);
        if (st != FERRY_OK)
            return st;
        pos = end;
    }
    return FERRY_OK;
}

/* Encodes s[0..n) as one pre-token, exactly, by cutting it where no merge
 * can join the characters on either side (t->junctions): merges on one side
 * never change the pairs on the other, so the pieces merge as the whole
 * would, and short pieces come from the cache. */
static ferry_status encode_unjoined(hf_tok *t, const unsigned char *s, size_t n, tok_ids *out)
{
    size_t start = 0, prev = 0, prev_len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = hf_utf8_next(s, n, i, &cp);
        uint64_t v;
        if (prev_len && (prev_len + l > 8 || !tok_map_get(&t->junctions, s + prev, prev_len + l, &v))) {
            ferry_status st = encode_word(t, s + start, i - start, out);
            if (st != FERRY_OK)
                return st;
            start = i;
        }
        prev = i;
        prev_len = l;
        i += l;
    }
    return encode_word(t, s + start, n - start, out);
}

static ferry_status encode_sentencepiece(hf_tok *t, const char *s, size_t n, size_t at, tok_ids *out)
{
    if (n == 0)
        return FERRY_OK;
    ferry_status st = norm_reserve(t, 3 * n + 3);
    if (st != FERRY_OK)
        return st;
    char *d = t->norm;
    size_t k = 0;
    int starts_meta = (t->meta_replace && s[0] == ' ') || (n >= 3 && !memcmp(s, meta, 3));
    if (t->prepend == HF_PREPEND_NORMALIZER || (t->prepend == HF_PREPEND_ALWAYS && !starts_meta) ||
        (t->prepend == HF_PREPEND_FIRST && at == 0 && !starts_meta)) {
        memcpy(d, meta, 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (t->meta_replace && s[i] == ' ') {
            memcpy(d + k, meta, 3);
            k += 3;
        } else {
            d[k++] = s[i];
        }
    }
    if (!t->meta_split)
        return t->junctions_exact ? encode_unjoined(t, (const unsigned char *)d, k, out)
                                  : encode_word(t, (const unsigned char *)d, k, out);
    size_t start = 0; /* Metaspace split: a pre-token starts at each ▁ */
    for (size_t i = 1; st == FERRY_OK && i + 3 <= k; i++)
        if (!memcmp(d + i, meta, 3)) {
            st = encode_word(t, (const unsigned char *)d + start, i - start, out);
            start = i;
        }
    return st == FERRY_OK ? encode_word(t, (const unsigned char *)d + start, k - start, out) : st;
}

static ferry_status encode_piece(hf_tok *t, const char *s, size_t n, size_t at, tok_ids *out)
{
    return t->kind == HF_BYTE_LEVEL ? encode_byte_level(t, s, n, at, out) : encode_sentencepiece(t, s, n, at, out);
}

/* The longest added token at s[pos] (special ones only when `special`). */
static const hf_added *added_at(const hf_tok *t, const char *s, size_t n, size_t pos, int special)
{
    for (size_t i = 0; i < t->nadded; i++) {
        const hf_added *a = &t->added[i];
        if ((special || !a->special) && a->len <= n - pos && !memcmp(s + pos, t->added_text + a->off, a->len))
            return a;
    }
    return NULL;
}

ferry_status hf_tok_encode(hf_tok *t, const char *text, size_t len, int special, tok_ids *out)
{
    if (!special && !t->any_plain_added)
        return encode_piece(t, text, len, 0, out);
    size_t start = 0;
    ferry_status st = FERRY_OK;
    for (size_t pos = 0; st == FERRY_OK && pos < len; pos++) {
        if (!t->added_first[(unsigned char)text[pos]])
            continue;
        const hf_added *a = added_at(t, text, len, pos, special);
        if (!a)
            continue;
        st = encode_piece(t, text + start, pos - start, start, out);
        if (st == FERRY_OK)
            st = ids_push(out, &a->id, 1);
        pos += a->len - 1;
        start = pos + 1;
    }
    return st == FERRY_OK ? encode_piece(t, text + start, len - start, start, out) : st;
}

/* ---- decoding and look-ups ------------------------------------------------------------ */

ferry_status hf_tok_decode(const hf_tok *t, const uint32_t *ids, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->vocab_size || !t->known[ids[i]])
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "cannot decode token %u at position %zu: %s", ids[i], i,
                           ids[i] >= t->vocab_size ? "the vocabulary is smaller" : "the tokenizer has no such id");
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
    size_t skip = 0;
    while ((int)skip < t->dec_strip && skip < at && buf[skip] == ' ')
        skip++;
    memmove(buf, buf + skip, at - skip);
    at -= skip;
    buf[at] = '\0';
    *out = buf;
    *out_len = at;
    return FERRY_OK;
}

int64_t hf_tok_token_id(const hf_tok *t, const char *text, size_t len)
{
    for (size_t i = 0; i < t->nadded; i++)
        if (t->added[i].len == len && !memcmp(t->added_text + t->added[i].off, text, len))
            return t->added[i].id;
    uint64_t v;
    if (t->kind == HF_BYTE_LEVEL)
        return tok_map_get(&t->vocab, text, len, &v) ? (int64_t)v : -1;
    char *k = malloc(3 * len + 1); /* SentencePiece: a space is spelled ▁ */
    size_t n = 0;
    for (size_t i = 0; k && i < len; i++) {
        if (text[i] == ' ' && t->meta_replace) {
            memcpy(k + n, meta, 3);
            n += 3;
        } else {
            k[n++] = text[i];
        }
    }
    int found = k && tok_map_get(&t->vocab, k, n, &v);
    free(k);
    return found ? (int64_t)v : -1;
}
