/* libFuzzer harness: token shards of both formats and the batch loader
 * (train/token_shard.c, train/dataloader.c). The input is a shard file; the
 * loader opens it sequential and shuffled, with a vocabulary bound or with
 * the format's whole range (0), serves batches across an epoch boundary, and
 * seeks back to a saved position, which must give the same batch again. */
#include "tests/fuzz/fuzz_util.h"
#include "train/dataloader.h"
#include "train/token_shard.h"

static void serve(const char *path, int B, int T, uint32_t vocab, int shuffle)
{
    const char *paths[1] = {path};
    tok_loader_config c = {paths, 1, B, T, vocab, shuffle, 42, 0, TOK_TOO_LONG_REFUSE};
    tok_loader *l = NULL;
    if (tok_loader_open(&c, &l) != FERRY_OK)
        return;
    size_t bt = (size_t)B * (size_t)T;
    uint32_t bound = vocab ? vocab : tok_loader_format(l) == TOK_SHARD_GPT2 ? 65536 : 0x80000000u;
    int32_t *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg), *again = malloc(bt * sizeof *again);
    if (!in || !tg || !again)
        abort();
    uint64_t n = tok_loader_batches_per_epoch(l) + 2;
    for (uint64_t k = 0; k < n && k < 64; k++) {
        tok_loader_pos pos = tok_loader_tell(l);
        if (tok_loader_next(l, in, tg) != FERRY_OK)
            abort(); /* the file does not change under the harness */
        for (size_t i = 0; i < bt; i++)
            if (in[i] < 0 || tg[i] < 0 || (uint32_t)in[i] >= bound || (uint32_t)tg[i] >= bound)
                abort();
        if (tok_loader_seek(l, &pos) != FERRY_OK || tok_loader_next(l, again, tg) != FERRY_OK ||
            memcmp(in, again, bt * sizeof *in) != 0)
            abort(); /* a saved position gives the same batch back */
    }
    tok_loader_reset(l);
    free(in);
    free(tg);
    free(again);
    tok_loader_close(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t count;
    tok_shard_format format;
    (void)tok_shard_check_header("fuzz", data, size, size, &count, &format);
    const char *path = fuzz_as_file(data, size);
    serve(path, 1, 4, 50257, 0);
    serve(path, 2, 3, 1000, 1);
    serve(path, 1, 1, 65536, 1);
    serve(path, 2, 2, 151936, 0);
    serve(path, 1, 3, 0, 1);
    return 0;
}
