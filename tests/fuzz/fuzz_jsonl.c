/* libFuzzer harness: instruction data (train/jsonl.c, chat_template.c).
 * The input is one line of JSON Lines: parsed into a record and, when it is
 * one, rendered with every template and encoded through a byte-level toy
 * encoder that knows the templates' special tokens; every token must be
 * below the vocabulary and every flag 0 or 1, and a failed encoding must
 * leave the ids as they were. */
#include "tests/fuzz/fuzz_util.h"
#include "train/chat_template.h"
#include "train/jsonl.h"

static const char *const specials[] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                       "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "[INST]"};

static ferry_status bytes_encode(void *ctx, const char *s, size_t n, tok_ids *out)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        if (out->len == out->cap) {
            size_t cap = out->cap ? 2 * out->cap : 64;
            uint32_t *p = realloc(out->ids, cap * sizeof *p);
            if (!p)
                abort();
            out->ids = p;
            out->cap = cap;
        }
        out->ids[out->len++] = (unsigned char)s[i];
    }
    return FERRY_OK;
}

static int64_t special(void *ctx, const char *s, size_t n)
{
    (void)ctx;
    for (size_t k = 0; k < sizeof specials / sizeof *specials; k++)
        if (strlen(specials[k]) == n && memcmp(specials[k], s, n) == 0)
            return 256 + (int64_t)k;
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tok_jsonl *r = NULL;
    if (tok_jsonl_open_text("fuzz.jsonl", &r) != FERRY_OK)
        abort();
    tok_record rec;
    if (tok_jsonl_parse_line(r, (const char *)data, size, 1, &rec) == FERRY_OK) {
        tok_text_encoder enc = {NULL, bytes_encode, special, 256, 262, 300};
        chat_segments segs = {0};
        tok_ids ids = {0};
        tok_flags flags = {0};
        for (int t = CHAT_PLAIN; t <= CHAT_MISTRAL; t++) {
            size_t before = ids.len;
            if (chat_render((chat_template_id)t, &rec, "fuzz.jsonl", &segs) != FERRY_OK)
                continue;
            if (chat_encode(&enc, &segs, &ids, &flags) != FERRY_OK && ids.len != before)
                abort();
            if (flags.len != ids.len)
                abort();
            for (size_t i = 0; i < ids.len; i++)
                if (ids.ids[i] >= 300 || flags.v[i] > 1)
                    abort();
        }
        tok_ids_free(&ids);
        tok_flags_free(&flags);
        chat_segments_free(&segs);
    }
    tok_jsonl_close(r);
    return 0;
}
