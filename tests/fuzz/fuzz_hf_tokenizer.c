/* libFuzzer harness: loading a tokenizer.json (tok_open over
 * train/hf_tokenizer.c) from any bytes. A file that loads must then encode
 * a sentence, some bytes that are not UTF-8 and the input itself, with
 * specials parsed and not, every id below the vocabulary size and
 * decodable; encoding may refuse only with INVALID_ARGUMENT (text an NFC
 * normalizer could change, a character with no token, no byte fallback
 * and no unk). */
#include "tests/fuzz/fuzz_util.h"
#include "train/tokenizer.h"

static void check(tok_tokenizer *t, const char *text, size_t len, int special)
{
    tok_ids ids = {0};
    ferry_status st = special ? tok_encode_special(t, text, len, &ids) : tok_encode(t, text, len, &ids);
    if (st != FERRY_OK && st != FERRY_ERR_INVALID_ARGUMENT)
        abort();
    for (size_t i = 0; st == FERRY_OK && i < ids.len; i++)
        if (ids.ids[i] >= tok_vocab_size(t))
            abort();
    char *back = NULL;
    size_t n = 0;
    if (st == FERRY_OK && tok_decode(t, ids.ids, ids.len, &back, &n) != FERRY_OK)
        abort();
    free(back);
    tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tok_tokenizer *t = NULL;
    if (tok_open(fuzz_as_file(data, size), NULL, &t) != FERRY_OK)
        return 0;
    const char sentence[] = "In the beginning God created the heaven and the earth. \xe2\x80\x99s 123 <s> \xff\xc3";
    for (int special = 0; special < 2; special++) {
        check(t, sentence, sizeof sentence - 1, special);
        check(t, (const char *)data, size < 512 ? size : 512, special);
    }
    tok_token_id(t, "<s>", 3);
    tok_close(t);
    return 0;
}
