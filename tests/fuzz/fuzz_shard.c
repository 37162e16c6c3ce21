/* libFuzzer harness: token shards of every format (llm.c's two, ferry's
 * masked one) and the batch loader (train/token_shard.c,
 * train/dataloader.c). The input is a shard file; the loader opens it
 * sequential and shuffled, with a vocabulary bound or with the format's
 * whole range (0), masked ones packed, one example a row, and truncating,
 * serves batches across an epoch boundary (positions in range, a segment
 * starting at 0 in every row), and seeks back to a saved position, which
 * must give the same batch again. */
#include "tests/fuzz/fuzz_util.h"
#include "train/dataloader.h"
#include "train/token_shard.h"

static void serve_as(const char *path, int B, int T, uint32_t vocab, int shuffle, int no_pack, tok_too_long tl)
{
    const char *paths[1] = {path};
    tok_loader_config c = {paths, 1, B, T, vocab, shuffle, 42, no_pack, tl};
    tok_loader *l = NULL;
    if (tok_loader_open(&c, &l) != FERRY_OK)
        return;
    size_t bt = (size_t)B * (size_t)T;
    tok_shard_format f = tok_loader_format(l);
    int masked = tok_shard_is_masked(f);
    uint32_t bound = vocab ? vocab : tok_shard_token_bytes(f) == 2 ? 65536 : 0x80000000u;
    int32_t *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg), *again = malloc(bt * sizeof *again);
    int32_t *at = malloc(bt * sizeof *at);
    if (!in || !tg || !again || !at)
        abort();
    uint64_t n = tok_loader_batches_per_epoch(l) + 2;
    for (uint64_t k = 0; k < n && k < 64; k++) {
        tok_loader_pos pos = tok_loader_tell(l);
        if (tok_loader_next_ex(l, in, tg, at) != FERRY_OK)
            abort(); /* the file does not change under the harness */
        for (size_t i = 0; i < bt; i++)
            if (in[i] < 0 || (tg[i] < 0 && (!masked || tg[i] != -1)) || (uint32_t)in[i] >= bound ||
                (tg[i] >= 0 && (uint32_t)tg[i] >= bound) || at[i] < 0 || at[i] >= T ||
                (i % (size_t)T == 0 && at[i] != 0) || (i % (size_t)T && at[i] != 0 && at[i] != at[i - 1] + 1))
                abort();
        if (tok_loader_seek(l, &pos) != FERRY_OK || tok_loader_next(l, again, tg) != FERRY_OK ||
            memcmp(in, again, bt * sizeof *in) != 0)
            abort(); /* a saved position gives the same batch back */
    }
    tok_loader_reset(l);
    free(in);
    free(tg);
    free(again);
    free(at);
    tok_loader_close(l);
}

static void serve(const char *path, int B, int T, uint32_t vocab, int shuffle)
{
    serve_as(path, B, T, vocab, shuffle, 0, TOK_TOO_LONG_REFUSE);
    serve_as(path, B, T, vocab, shuffle, 1, TOK_TOO_LONG_TRUNCATE);
    serve_as(path, B, T, vocab, shuffle, 0, TOK_TOO_LONG_TRUNCATE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t count;
    tok_shard_format format;
    (void)tok_shard_check_header("fuzz", data, size, size, &count, &format);
    tok_shard_header h;
    (void)tok_shard_read_header("fuzz", data, size, size, &h);
    const char *path = fuzz_as_file(data, size);
    serve(path, 1, 4, 50257, 0);
    serve(path, 2, 3, 1000, 1);
    serve(path, 1, 1, 65536, 1);
    serve(path, 2, 2, 151936, 0);
    serve(path, 1, 3, 0, 1);
    return 0;
}
