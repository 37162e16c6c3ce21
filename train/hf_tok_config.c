/* The parts of a tokenizer.json around its model (see hf_tokenizer.h): the
 * normalizer, the pre-tokenizer, the decoder and the post-processor, each
 * read into the tokenizer's settings or refused by name with what ferry
 * supports. The model itself is hf_tokenizer.c's. */
#include "train/hf_tok_internal.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"

const char hf_supported[] = "ferry reads BPE tokenizer.json files: byte-level (GPT-2, Llama 3, Qwen2) and "
                            "SentencePiece-style with byte fallback (Llama 2, Mistral, TinyLlama)";

static const char meta[] = "\xE2\x96\x81"; /* ▁ U+2581 */

/* ---- small JSON helpers ---------------------------------------------------------- */

const cJSON *hf_get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

const char *hf_type_of(const cJSON *o)
{
    const cJSON *ty = hf_get(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

int hf_is_true(const cJSON *o, const char *k) { return cJSON_IsTrue(hf_get(o, k)); }

/* A string field, or NULL when it is absent or null. */
const char *hf_str_or_null(const cJSON *o, const char *k)
{
    const cJSON *v = hf_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *pattern_string(const cJSON *o, int *is_regex)
{
    const cJSON *p = hf_get(o, "pattern");
    const cJSON *re = hf_get(p, "Regex"), *st = hf_get(p, "String");
    *is_regex = cJSON_IsString(re);
    return cJSON_IsString(re) ? re->valuestring : cJSON_IsString(st) ? st->valuestring : NULL;
}

ferry_status hf_refuse(const char *path, const char *what, const char *name, const char *known)
{
    return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': %s \"%s\" is not supported (ferry knows %s); %s", path,
                   what, name ? name : "(no type)", known, hf_supported);
}

/* ---- normalizer, pre-tokenizer, decoder, post-processor ------------------------- */

ferry_status hf_read_normalizer(hf_tok *t, const char *path, const cJSON *n)
{
    if (!n || cJSON_IsNull(n))
        return FERRY_OK;
    const char *ty = hf_type_of(n);
    static const char known[] = "none, NFC, Prepend \"▁\", Replace \" \" -> \"▁\" and a Sequence of them";
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = hf_get(n, "normalizers");
        if (!cJSON_IsArray(list))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': the Sequence normalizer has no \"normalizers\" "
                           "array", path);
        for (const cJSON *it = list->child; it; it = it->next) {
            ferry_status st = hf_read_normalizer(t, path, it);
            if (st != FERRY_OK)
                return st;
        }
        return FERRY_OK;
    }
    if (ty && !strcmp(ty, "NFC")) {
        t->nfc = 1;
        return FERRY_OK;
    }
    if (ty && !strcmp(ty, "Prepend")) {
        const char *p = hf_str_or_null(n, "prepend");
        if (!p || strcmp(p, meta))
            return hf_refuse(path, "a Prepend normalizer of", p, "Prepend \"▁\" only");
        t->prepend = HF_PREPEND_NORMALIZER;
        return FERRY_OK;
    }
    if (ty && !strcmp(ty, "Replace")) {
        int re;
        const char *p = pattern_string(n, &re), *c = hf_str_or_null(n, "content");
        if (!p || re || strcmp(p, " ") || !c || strcmp(c, meta))
            return hf_refuse(path, "a Replace normalizer of the pattern", p, "Replace the string \" \" with \"▁\" only");
        t->meta_replace = 1;
        return FERRY_OK;
    }
    return hf_refuse(path, "the normalizer", ty, known);
}

static ferry_status set_split(hf_tok *t, const char *path, hf_split s)
{
    if (t->split != HF_SPLIT_NONE)
        return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': two splitting patterns (%s, then %s): ferry runs one; "
                       "%s", path, hf_split_name(t->split), hf_split_name(s), hf_supported);
    t->split = s;
    return FERRY_OK;
}

static ferry_status read_metaspace(hf_tok *t, const char *path, const cJSON *p, int decoder)
{
    const char *rep = hf_str_or_null(p, "replacement");
    if (rep && strcmp(rep, meta))
        return hf_refuse(path, "a Metaspace replacement", rep, "\"▁\" only");
    const char *scheme = hf_str_or_null(p, "prepend_scheme");
    hf_prepend pre = HF_PREPEND_ALWAYS;
    if (scheme && !strcmp(scheme, "first"))
        pre = HF_PREPEND_FIRST;
    else if (scheme && !strcmp(scheme, "never"))
        pre = HF_PREPEND_NEVER;
    else if (scheme && strcmp(scheme, "always"))
        return hf_refuse(path, "a Metaspace prepend_scheme", scheme, "always, first, never");
    else if (!scheme && hf_get(p, "add_prefix_space") && !hf_is_true(p, "add_prefix_space"))
        pre = HF_PREPEND_NEVER;
    if (decoder) {
        t->dec_strip = pre != HF_PREPEND_NEVER;
        return FERRY_OK;
    }
    t->prepend = pre;
    t->meta_replace = 1;
    t->meta_split = !hf_get(p, "split") || hf_is_true(p, "split");
    return FERRY_OK;
}

ferry_status hf_read_pretok(hf_tok *t, const char *path, const cJSON *p, int *byte_level, int *metaspace)
{
    if (!p || cJSON_IsNull(p))
        return FERRY_OK;
    const char *ty = hf_type_of(p);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = hf_get(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': the Sequence pre-tokenizer has no "
                           "\"pretokenizers\" array", path);
        for (const cJSON *it = list->child; it; it = it->next) {
            ferry_status st = hf_read_pretok(t, path, it, byte_level, metaspace);
            if (st != FERRY_OK)
                return st;
        }
        return FERRY_OK;
    }
    if (ty && !strcmp(ty, "ByteLevel")) {
        *byte_level = 1;
        t->prefix_space = hf_is_true(p, "add_prefix_space");
        const cJSON *re = hf_get(p, "use_regex");
        return !re || cJSON_IsTrue(re) ? set_split(t, path, HF_SPLIT_GPT2) : FERRY_OK;
    }
    if (ty && !strcmp(ty, "Split")) {
        int is_re;
        const char *pat = pattern_string(p, &is_re);
        const char *beh = hf_str_or_null(p, "behavior");
        int s = pat && is_re ? hf_split_from_pattern(pat) : -1;
        if (s < 0)
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': the Split pattern %s%s%s is not one ferry knows "
                           "(it knows the Regex patterns of GPT-2, Llama 3 and Qwen2, compared as strings); %s", path,
                           pat ? "\"" : "", pat ? pat : "(none)", pat ? "\"" : "", hf_supported);
        if (!beh || strcmp(beh, "Isolated") || hf_is_true(p, "invert"))
            return hf_refuse(path, "a Split behavior", beh, "Isolated, not inverted");
        return set_split(t, path, (hf_split)s);
    }
    if (ty && !strcmp(ty, "Metaspace")) {
        *metaspace = 1;
        return read_metaspace(t, path, p, 0);
    }
    return hf_refuse(path, "the pre-tokenizer", ty, "ByteLevel, Split (GPT-2, Llama 3, Qwen2 patterns), Metaspace and a "
                  "Sequence of them");
}

ferry_status hf_read_decoder(hf_tok *t, const char *path, const cJSON *d, hf_dec_flags *f)
{
    if (!d || cJSON_IsNull(d))
        return FERRY_OK;
    const char *ty = hf_type_of(d);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = hf_get(d, "decoders");
        if (!cJSON_IsArray(list))
            return err_set(FERRY_ERR_FORMAT, "tokenizer.json '%s': the Sequence decoder has no \"decoders\" array",
                           path);
        for (const cJSON *it = list->child; it; it = it->next) {
            ferry_status st = hf_read_decoder(t, path, it, f);
            if (st != FERRY_OK)
                return st;
        }
        return FERRY_OK;
    }
    if (ty && !strcmp(ty, "ByteLevel"))
        f->byte_level = 1;
    else if (ty && !strcmp(ty, "ByteFallback"))
        f->byte_fallback = 1;
    else if (ty && !strcmp(ty, "Fuse"))
        f->fuse = 1;
    else if (ty && !strcmp(ty, "Metaspace")) {
        f->meta = 1;
        return read_metaspace(t, path, d, 1);
    } else if (ty && !strcmp(ty, "Replace")) {
        int re;
        const char *p = pattern_string(d, &re), *c = hf_str_or_null(d, "content");
        if (!p || re || strcmp(p, meta) || !c || strcmp(c, " "))
            return hf_refuse(path, "a Replace decoder of the pattern", p, "Replace \"▁\" with \" \" only");
        f->meta = 1;
    } else if (ty && !strcmp(ty, "Strip")) {
        const char *c = hf_str_or_null(d, "content");
        const cJSON *start = hf_get(d, "start"), *stop = hf_get(d, "stop");
        if (!c || strcmp(c, " ") || !cJSON_IsNumber(start) || start->valuedouble < 0 || start->valuedouble > 8 ||
            (cJSON_IsNumber(stop) && stop->valuedouble != 0))
            return hf_refuse(path, "a Strip decoder of", c, "Strip \" \" from the start (stop 0)");
        t->dec_strip = (int)start->valuedouble;
    } else
        return hf_refuse(path, "the decoder", ty, "ByteLevel, Replace \"▁\" -> \" \", ByteFallback, Fuse, Strip, "
                      "Metaspace and a Sequence of them");
    return FERRY_OK;
}

/* The id of the name a TemplateProcessing gives, from its special_tokens
 * map or the added tokens. */
static int64_t template_id(const hf_tok *t, const cJSON *tp, const char *name)
{
    const cJSON *ids = hf_get(hf_get(hf_get(tp, "special_tokens"), name), "ids");
    if (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) == 1 && cJSON_IsNumber(ids->child))
        return (int64_t)ids->child->valuedouble;
    return hf_tok_token_id(t, name, strlen(name));
}

ferry_status hf_read_post(hf_tok *t, const char *path, const cJSON *p)
{
    if (!p || cJSON_IsNull(p))
        return FERRY_OK;
    const char *ty = hf_type_of(p);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *list = hf_get(p, "processors");
        for (const cJSON *it = cJSON_IsArray(list) ? list->child : NULL; it; it = it->next) {
            ferry_status st = hf_read_post(t, path, it);
            if (st != FERRY_OK)
                return st;
        }
        return FERRY_OK;
    }
    if (ty && !strcmp(ty, "ByteLevel"))
        return FERRY_OK;
    if (!ty || strcmp(ty, "TemplateProcessing"))
        return hf_refuse(path, "the post-processor", ty, "ByteLevel, TemplateProcessing and a Sequence of them");
    const cJSON *single = hf_get(p, "single");
    int seen_a = 0;
    for (const cJSON *it = cJSON_IsArray(single) ? single->child : NULL; it; it = it->next) {
        const char *name = hf_str_or_null(hf_get(it, "SpecialToken"), "id");
        if (hf_get(it, "Sequence"))
            seen_a = 1;
        else if (name && !seen_a)
            t->bos = template_id(t, p, name);
        else if (name)
            t->eos = template_id(t, p, name);
    }
    return FERRY_OK;
}

