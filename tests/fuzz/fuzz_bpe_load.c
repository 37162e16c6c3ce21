/* libFuzzer harness: loading a tokenizer (tok_bpe_load in train/bpe.c). The
 * input is encoder.json, a NUL byte, then vocab.bpe (no NUL: all of it is
 * encoder.json and vocab.bpe is empty). A tokenizer that loads must then
 * encode and decode a sentence and the input itself unchanged. */
#include "tests/fuzz/fuzz_util.h"
#include "train/bpe.h"

static char dir[] = "/tmp/ferry-fuzz-bpe-XXXXXX";
static char enc_path[64], voc_path[64];

static void clean_up(void)
{
    unlink(enc_path);
    unlink(voc_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(dir))
        abort();
    atexit(clean_up);
    snprintf(enc_path, sizeof enc_path, "%s/encoder.json", dir);
    snprintf(voc_path, sizeof voc_path, "%s/vocab.bpe", dir);
    return 0;
}

static void put(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
}

static void round_trip(tok_bpe *t, const char *text, size_t len)
{
    tok_ids ids = {0};
    char *back = NULL;
    size_t n = 0;
    if (tok_bpe_encode(t, text, len, &ids) != FERRY_OK ||
        tok_bpe_decode(t, ids.ids, ids.len, &back, &n) != FERRY_OK || n != len || memcmp(back, text, len))
        abort();
    free(back);
    tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t a = nul ? (size_t)(nul - data) : size;
    put(enc_path, data, a);
    put(voc_path, nul ? nul + 1 : data, nul ? size - a - 1 : 0);
    tok_bpe *t = NULL;
    if (tok_bpe_load(enc_path, voc_path, &t) != FERRY_OK)
        return 0;
    const char sentence[] = "In the beginning God created the heaven and the earth. \xe2\x80\x99s 123 \xff";
    round_trip(t, sentence, sizeof sentence - 1);
    round_trip(t, (const char *)data, size < 512 ? size : 512);
    tok_bpe_destroy(t);
    return 0;
}
