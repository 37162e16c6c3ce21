/* Reading a tokenizer.json (see hf_tokenizer.h): the model (vocabulary,
 * merges, byte fallback), the added tokens, the normalizer, pre-tokenizer,
 * decoder and post-processor, each checked against what ferry runs and
 * refused by name otherwise. Encoding and decoding are hf_tok_encode.c's. */
#include "train/hf_tok_internal.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"

static const char meta[] = "\xE2\x96\x81"; /* ▁ U+2581 */

/* ---- GPT-2's byte <-> code point map ---------------------------------------- */

static uint32_t byte_cp[256];
static int16_t cp_byte[0x200];
static pthread_once_t bytes_once = PTHREAD_ONCE_INIT;

static void build_byte_map(void)
{
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

/* Raw bytes of a byte-level token's text into raw (room for strlen(key));
 * -1 if a character is not one of the 256 byte stand-ins. */
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

/* ---- the model: vocabulary and merges --------------------------------------------- */

static ferry_status check_model_fields(const char *path, const cJSON *m)
{
    const char *ty = hf_type_of(m);
    if (!cJSON_IsObject(m))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' has no \"model\" object; %s", path, hf_supported);
    if (!ty || strcmp(ty, "BPE"))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': model type \"%s\" is not supported; %s (model type "
                       "\"BPE\"), not WordPiece, Unigram or WordLevel", path, ty ? ty : "(none)", hf_supported);
    const cJSON *drop = hf_get(m, "dropout");
    const char *pre = hf_str_or_null(m, "continuing_subword_prefix"), *suf = hf_str_or_null(m, "end_of_word_suffix");
    if (cJSON_IsNumber(drop) && drop->valuedouble != 0)
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': BPE dropout %g is not supported (ferry encodes "
                       "deterministically); set \"dropout\": null", path, drop->valuedouble);
    if ((pre && *pre) || (suf && *suf))
        return hf_refuse(path, "a BPE subword prefix or word suffix", pre && *pre ? pre : suf,
                      "none (the GPT-2, Llama and Qwen2 files have none)");
    if (!cJSON_IsObject(hf_get(m, "vocab")))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': model.vocab is missing or not an object of token -> "
                       "id", path);
    if (!cJSON_IsArray(hf_get(m, "merges")))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': model.merges is missing or not an array: a BPE "
                       "tokenizer.json lists its merges (\"a b\" or [\"a\", \"b\"])", path);
    return FERRY_OK;
}

/* A vocabulary key as the map holds it: a byte-level token's raw bytes, a
 * SentencePiece token's text. raw has room for strlen(key). */
static long vocab_key(const hf_tok *t, const char *key, unsigned char *raw)
{
    if (t->kind == HF_SENTENCEPIECE) {
        size_t n = strlen(key);
        memcpy(raw, key, n);
        return (long)n;
    }
    return byte_decode(key, raw);
}

static int id_ok(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 2147483647.0 &&
                                          v->valuedouble == (double)(uint32_t)v->valuedouble; }

static ferry_status read_vocab(hf_tok *t, const char *path, const cJSON *vocab, uint32_t max_added)
{
    uint32_t max_id = max_added;
    size_t count = 0;
    for (const cJSON *it = vocab->child; it; it = it->next, count++) {
        if (!id_ok(it))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': model.vocab gives token \"%.60s\" the id %s; ids "
                           "are whole numbers from 0", path, it->string, cJSON_IsNumber(it) ? "out of range" : "that "
                           "is not a number");
        max_id = (uint32_t)it->valuedouble > max_id || max_id == HF_NO_ID ? (uint32_t)it->valuedouble : max_id;
    }
    if (count == 0)
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': model.vocab is empty", path);
    if ((uint64_t)max_id >= 2 * ((uint64_t)count + t->nadded) + 1024)
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' gives id %u with only %zu tokens (and %zu added): ids "
                       "are numbered from 0 with few gaps; is the file damaged?", path, max_id, count, t->nadded);
    t->vocab_size = max_id + 1;
    t->tok_off = calloc((size_t)t->vocab_size + 1, sizeof *t->tok_off);
    t->known = calloc(t->vocab_size, 1);
    size_t total = 0;
    for (const cJSON *it = vocab->child; it; it = it->next)
        total += strlen(it->string);
    t->tok_bytes = malloc(total + 1);
    unsigned char *raw = malloc(total + 1);
    uint32_t *len = calloc(t->vocab_size, sizeof *len);
    uint32_t *at = calloc(t->vocab_size, sizeof *at);
    ferry_status st = t->tok_off && t->known && t->tok_bytes && raw && len && at ? tok_map_init(&t->vocab, count)
                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate a vocabulary of %zu tokens", count);
    size_t used = 0;
    for (const cJSON *it = vocab->child; st == FERRY_OK && it; it = it->next) {
        uint32_t id = (uint32_t)it->valuedouble;
        long n = vocab_key(t, it->string, raw + used);
        uint64_t old;
        if (n < 0)
            st = err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': token \"%.60s\" (id %u) is not byte-level text, yet "
                         "the pre-tokenizer is ByteLevel", path, it->string, id);
        else if (t->known[id])
            st = err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': id %u is given to two tokens (\"%.60s\" and another)",
                         path, id, it->string);
        else if (tok_map_get(&t->vocab, raw + used, (size_t)n, &old))
            st = err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': token \"%.60s\" appears twice in model.vocab (ids "
                         "%u and %u)", path, it->string, (uint32_t)old, id);
        else {
            t->known[id] = 1;
            at[id] = (uint32_t)used;
            len[id] = (uint32_t)n;
            st = tok_map_put(&t->vocab, raw + used, (size_t)n, id);
            used += (size_t)n;
        }
    }
    if (st == FERRY_OK) { /* decoded bytes: SentencePiece's are filled in by finish_sentencepiece */
        for (uint32_t id = 0; id < t->vocab_size; id++)
            t->tok_off[id + 1] = t->tok_off[id] + len[id];
        for (uint32_t id = 0; id < t->vocab_size; id++)
            memcpy(t->tok_bytes + t->tok_off[id], raw + at[id], len[id]);
    }
    free(raw);
    free(len);
    free(at);
    return st;
}

/* The pair of one merge entry: "a b" or ["a", "b"]. */
static int merge_parts(const cJSON *m, char *buf, size_t cap, const char **a, const char **b)
{
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
        cJSON_IsString(m->child->next)) {
        *a = m->child->valuestring;
        *b = m->child->next->valuestring;
        return 1;
    }
    if (!cJSON_IsString(m) || strlen(m->valuestring) + 1 > cap)
        return 0;
    strcpy(buf, m->valuestring);
    char *sp = strchr(buf, ' ');
    if (!sp || sp == buf || !sp[1] || strchr(sp + 1, ' '))
        return 0;
    *sp = '\0';
    *a = buf;
    *b = sp + 1;
    return 1;
}

/* Records where merge (a, b) joins two characters: a's last, b's first. */
static ferry_status add_junction(hf_tok *t, const unsigned char *a, size_t na, const unsigned char *b, size_t nb)
{
    size_t from = na - 1, blen = 1;
    while (from > 0 && (a[from] & 0xC0) == 0x80 && na - from < 4)
        from--;
    while (blen < nb && blen < 4 && (b[blen] & 0xC0) == 0x80)
        blen++;
    unsigned char key[8];
    memcpy(key, a + from, na - from);
    memcpy(key + (na - from), b, blen);
    return tok_map_put(&t->junctions, key, na - from + blen, 1);
}

/* A symbol whose characters are not its text: a <0xNN> token or unk. */
static int stands_for_bytes(const hf_tok *t, uint32_t id, const char *text, const char *unk)
{
    for (unsigned b = 0; b < 256; b++)
        if (t->byte_id[b] == id)
            return 1;
    return unk && !strcmp(text, unk);
}

static ferry_status read_merges(hf_tok *t, const char *path, const cJSON *merges, const char *unk)
{
    t->junctions_exact = t->kind == HF_SENTENCEPIECE;
    ferry_status st = tok_map_init(&t->pairs, (size_t)cJSON_GetArraySize(merges) + 16);
    if (st == FERRY_OK && t->kind == HF_SENTENCEPIECE)
        st = tok_map_init(&t->junctions, 4096);
    char buf[1024];
    unsigned char ka[1024], kb[1024], kab[2048];
    uint32_t rank = 0;
    for (const cJSON *m = merges->child; st == FERRY_OK && m; m = m->next, rank++) {
        const char *a, *b;
        if (!merge_parts(m, buf, sizeof buf, &a, &b) || strlen(a) >= sizeof ka || strlen(b) >= sizeof kb)
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': merge %u is not \"a b\" (two tokens, one space) "
                           "or [\"a\", \"b\"]", path, rank);
        long na = vocab_key(t, a, ka), nb = vocab_key(t, b, kb);
        uint64_t x, y, xy;
        int have = na > 0 && nb > 0 && tok_map_get(&t->vocab, ka, (size_t)na, &x) &&
                   tok_map_get(&t->vocab, kb, (size_t)nb, &y);
        if (have) {
            memcpy(kab, ka, (size_t)na);
            memcpy(kab + na, kb, (size_t)nb);
            have = tok_map_get(&t->vocab, kab, (size_t)(na + nb), &xy);
        }
        if (!have)
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': merge %u (\"%.60s\" + \"%.60s\") uses or makes a "
                           "token that model.vocab lacks", path, rank, a, b);
        uint32_t pair[2] = {(uint32_t)x, (uint32_t)y};
        uint64_t old;
        if (t->junctions_exact && (stands_for_bytes(t, (uint32_t)x, a, unk) || stands_for_bytes(t, (uint32_t)y, b, unk)))
            t->junctions_exact = 0;
        if (t->junctions_exact) {
            st = add_junction(t, ka, (size_t)na, kb, (size_t)nb);
            if (st != FERRY_OK)
                return st;
        }
        if (!tok_map_get(&t->pairs, pair, sizeof pair, &old)) /* a repeated merge keeps its first rank */
            st = tok_map_put(&t->pairs, pair, sizeof pair, (uint64_t)rank << 32 | xy);
    }
    return st;
}

/* ---- added tokens ------------------------------------------------------------------ */

static int by_length_desc(const void *pa, const void *pb)
{
    const hf_added *a = pa, *b = pb;
    return a->len < b->len ? 1 : a->len > b->len ? -1 : 0;
}

static ferry_status read_added(hf_tok *t, const char *path, const cJSON *list, uint32_t *max_id)
{
    *max_id = HF_NO_ID;
    if (!list || cJSON_IsNull(list))
        return FERRY_OK;
    if (!cJSON_IsArray(list))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': added_tokens is not an array", path);
    size_t n = (size_t)cJSON_GetArraySize(list), total = 0;
    for (const cJSON *it = list->child; it; it = it->next) {
        const char *c = hf_str_or_null(it, "content");
        if (!c || !*c || !id_ok(hf_get(it, "id")))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': an added token lacks its \"content\" (a non-empty "
                           "string) or its \"id\" (a whole number)", path);
        if (hf_is_true(it, "single_word") || hf_is_true(it, "lstrip") || hf_is_true(it, "rstrip"))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': added token \"%.60s\" sets single_word, lstrip or "
                           "rstrip, which ferry does not implement (the GPT-2, Llama and Qwen2 files set none)", path, c);
        total += strlen(c);
    }
    t->added = calloc(n ? n : 1, sizeof *t->added);
    t->added_text = malloc(total + 1);
    if (!t->added || !t->added_text)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate %zu added tokens", n);
    size_t used = 0;
    for (const cJSON *it = list->child; it; it = it->next) {
        const char *c = hf_str_or_null(it, "content");
        hf_added *a = &t->added[t->nadded++];
        a->id = (uint32_t)hf_get(it, "id")->valuedouble;
        a->off = (uint32_t)used;
        a->len = (uint32_t)strlen(c);
        a->special = hf_is_true(it, "special");
        memcpy(t->added_text + used, c, a->len);
        used += a->len;
        *max_id = *max_id == HF_NO_ID || a->id > *max_id ? a->id : *max_id;
        t->added_first[(unsigned char)c[0]] = 1;
        t->any_plain_added |= !a->special;
    }
    qsort(t->added, t->nadded, sizeof *t->added, by_length_desc);
    return FERRY_OK;
}

/* Gives each added token its bytes (its content) in the per-id table. */
static ferry_status place_added(hf_tok *t)
{
    size_t extra = 0;
    for (size_t i = 0; i < t->nadded; i++)
        extra += t->added[i].len;
    size_t old_total = t->tok_off[t->vocab_size];
    char *bytes = malloc(old_total + extra + 1);
    uint32_t *off = malloc(((size_t)t->vocab_size + 1) * sizeof *off);
    uint32_t *alen = calloc(t->vocab_size, sizeof *alen), *aoff = calloc(t->vocab_size, sizeof *aoff);
    ferry_status st = bytes && off && alen && aoff ? FERRY_OK
                          : err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the added tokens' text");
    for (size_t i = 0; st == FERRY_OK && i < t->nadded; i++) {
        alen[t->added[i].id] = t->added[i].len + 1; /* +1: set */
        aoff[t->added[i].id] = t->added[i].off;
        t->known[t->added[i].id] = 1;
    }
    if (st == FERRY_OK) {
        off[0] = 0;
        for (uint32_t id = 0; id < t->vocab_size; id++) {
            const char *src = alen[id] ? t->added_text + aoff[id] : t->tok_bytes + t->tok_off[id];
            uint32_t l = alen[id] ? alen[id] - 1 : t->tok_off[id + 1] - t->tok_off[id];
            memcpy(bytes + off[id], src, l);
            off[id + 1] = off[id] + l;
        }
        free(t->tok_bytes);
        free(t->tok_off);
        t->tok_bytes = bytes;
        t->tok_off = off;
        bytes = NULL;
        off = NULL;
    }
    free(bytes);
    free(off);
    free(alen);
    free(aoff);
    return st;
}

/* SentencePiece: <0xNN> tokens, and each token's decoded bytes (▁ as a
 * space when the decoder says so, <0xNN> as its byte with ByteFallback). */
static ferry_status finish_sentencepiece(hf_tok *t, const char *path, const hf_dec_flags *f)
{
    for (unsigned b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        uint64_t id;
        t->byte_id[b] = tok_map_get(&t->vocab, name, 6, &id) ? (uint32_t)id : HF_NO_ID;
        if (t->byte_fallback && t->byte_id[b] == HF_NO_ID)
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' sets byte_fallback but has no token %s; such "
                           "vocabularies hold all 256 <0xNN> tokens", path, name);
    }
    size_t total = t->tok_off[t->vocab_size];
    char *out = malloc(total + 1);
    uint32_t *off = malloc(((size_t)t->vocab_size + 1) * sizeof *off);
    if (!out || !off) {
        free(out);
        free(off);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the vocabulary's text");
    }
    off[0] = 0;
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        const char *s = t->tok_bytes + t->tok_off[id];
        size_t n = t->tok_off[id + 1] - t->tok_off[id], o = off[id];
        unsigned v;
        if (f->byte_fallback && n == 6 && sscanf(s, "<0x%2X>", &v) == 1 && s[5] == '>') {
            out[o++] = (char)v;
        } else {
            for (size_t i = 0; i < n; i++) {
                if (f->meta && i + 3 <= n && !memcmp(s + i, meta, 3)) {
                    out[o++] = ' ';
                    i += 2;
                } else {
                    out[o++] = s[i];
                }
            }
        }
        off[id + 1] = (uint32_t)o;
    }
    free(t->tok_bytes);
    free(t->tok_off);
    t->tok_bytes = out;
    t->tok_off = off;
    return FERRY_OK;
}

static ferry_status finish_byte_level(hf_tok *t, const char *path)
{
    for (unsigned b = 0; b < 256; b++) {
        uint64_t id;
        unsigned char c = (unsigned char)b;
        if (!tok_map_get(&t->vocab, &c, 1, &id))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' has no token for byte 0x%02X; byte-level "
                           "vocabularies have one per byte", path, b);
        t->byte_id[b] = (uint32_t)id;
    }
    return FERRY_OK;
}

static int64_t first_known(const hf_tok *t, const char *const *names)
{
    for (; *names; names++) {
        int64_t id = hf_tok_token_id(t, *names, strlen(*names));
        if (id >= 0)
            return id;
    }
    return -1;
}

static ferry_status read_model(hf_tok *t, const char *path, const cJSON *root)
{
    const cJSON *m = hf_get(root, "model");
    ferry_status st = check_model_fields(path, m);
    int byte_level = 0, metaspace = 0;
    hf_dec_flags f = {0};
    if (st == FERRY_OK)
        st = hf_read_normalizer(t, path, hf_get(root, "normalizer"));
    if (st == FERRY_OK)
        st = hf_read_pretok(t, path, hf_get(root, "pre_tokenizer"), &byte_level, &metaspace);
    if (st != FERRY_OK)
        return st;
    t->kind = byte_level ? HF_BYTE_LEVEL : HF_SENTENCEPIECE;
    if (byte_level && (metaspace || t->prepend || t->meta_replace))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' mixes the ByteLevel pre-tokenizer with the \"▁\" "
                       "convention; %s", path, hf_supported);
    if (!byte_level && (t->split != HF_SPLIT_NONE || t->nfc || !t->meta_replace))
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' is neither byte-level (a ByteLevel pre-tokenizer) nor "
                       "SentencePiece-style (Prepend \"▁\" + Replace \" \" -> \"▁\", or Metaspace)%s; %s", path,
                       t->split != HF_SPLIT_NONE ? ": a Split pattern without ByteLevel" : "", hf_supported);
    st = hf_read_decoder(t, path, hf_get(root, "decoder"), &f);
    if (st == FERRY_OK && f.byte_level != byte_level)
        st = err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': the %s decoder does not fit the %s pre-tokenizer", path,
                     f.byte_level ? "ByteLevel" : "non-ByteLevel", byte_level ? "ByteLevel" : "non-ByteLevel");
    t->ignore_merges = hf_is_true(m, "ignore_merges");
    t->byte_fallback = hf_is_true(m, "byte_fallback");
    uint32_t max_added = HF_NO_ID;
    if (st == FERRY_OK)
        st = read_added(t, path, hf_get(root, "added_tokens"), &max_added);
    if (st == FERRY_OK)
        st = read_vocab(t, path, hf_get(m, "vocab"), max_added);
    if (st == FERRY_OK)
        st = byte_level ? finish_byte_level(t, path) : finish_sentencepiece(t, path, &f);
    if (st == FERRY_OK)
        st = place_added(t);
    const char *unk = hf_str_or_null(m, "unk_token");
    if (st == FERRY_OK)
        st = read_merges(t, path, hf_get(m, "merges"), unk);
    if (st != FERRY_OK)
        return st;
    int64_t unk_id = unk ? hf_tok_token_id(t, unk, strlen(unk)) : -1;
    if (unk && unk_id < 0)
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': unk_token \"%.60s\" is not a token", path, unk);
    t->unk = unk_id < 0 ? HF_NO_ID : (uint32_t)unk_id;
    t->bos = t->eos = -1;
    st = hf_read_post(t, path, hf_get(root, "post_processor"));
    static const char *const bos_names[] = {"<|begin_of_text|>", "<s>", "<|endoftext|>", NULL};
    static const char *const eos_names[] = {"<|end_of_text|>", "</s>", "<|endoftext|>", NULL};
    if (t->bos < 0)
        t->bos = first_known(t, bos_names);
    if (t->eos < 0)
        t->eos = first_known(t, eos_names);
    return st;
}

ferry_status hf_tok_load(const char *path, hf_tok **out)
{
    *out = NULL;
    pthread_once(&bytes_once, build_byte_map);
    char *text = NULL;
    size_t len = 0;
    ferry_status st = fileio_read(path, "tokenizer.json", &text, &len);
    if (st != FERRY_OK)
        return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        free(text);
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' is not valid JSON (at byte %zu of %zu): cut short, or "
                       "not a tokenizer.json? Copy the model folder's file again", path, at, len);
    }
    free(text);
    hf_tok *t = calloc(1, sizeof *t);
    if (!t)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "cannot allocate the tokenizer");
    else if (!cJSON_IsObject(root))
        st = err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s' is not a JSON object", path);
    else
        st = read_model(t, path, root);
    cJSON_Delete(root);
    if (st == FERRY_OK)
        st = tok_map_init(&t->cache, 1 << 16);
    if (st != FERRY_OK) {
        hf_tok_destroy(t);
        return st;
    }
    snprintf(t->desc, sizeof t->desc, "%s BPE%s%s%s, %u tokens", t->kind == HF_BYTE_LEVEL ? "byte-level" :
             "SentencePiece-style", t->split != HF_SPLIT_NONE ? " (" : "", t->split != HF_SPLIT_NONE ?
             hf_split_name(t->split) : "", t->split != HF_SPLIT_NONE ? " pattern)" : "", t->vocab_size);
    *out = t;
    return FERRY_OK;
}

void hf_tok_destroy(hf_tok *t)
{
    if (!t)
        return;
    tok_map_free(&t->vocab);
    tok_map_free(&t->pairs);
    tok_map_free(&t->junctions);
    tok_map_free(&t->cache);
    tok_ids_free(&t->cache_ids);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->known);
    free(t->added);
    free(t->added_text);
    free(t->sym);
    free(t->nxt);
    free(t->prv);
    free(t->heap);
    free(t->norm);
    free(t);
}

uint32_t hf_tok_vocab_size(const hf_tok *t) { return t->vocab_size; }
int64_t hf_tok_bos(const hf_tok *t) { return t->bos; }
int64_t hf_tok_eos(const hf_tok *t) { return t->eos; }
const char *hf_tok_describe(const hf_tok *t) { return t->desc; }
