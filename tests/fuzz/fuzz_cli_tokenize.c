/* libFuzzer harness: tokenize's command line (tools/tokenize/tokenize_cli.c).
 * The input is argv, NUL-separated; accepted options must be in range, with
 * one tokenizer (a tokenizer.json, or encoder.json and vocab.bpe), and one
 * kind of input: text INPUTs, or --jsonl FILE alone with the instruction
 * options (--template, --seq, --too-long) only beside it. */
#include "tests/fuzz/fuzz_util.h"
#include "tools/tokenize/tokenize_cli.h"
#include "train/token_shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[FUZZ_MAX_ARGS], *copy;
    int argc = fuzz_argv("tokenize", data, size, argv, &copy);
    tokenize_opts o;
    int rc = tokenize_parse_args(argc, argv, &o);
    if (rc == 0) {
        if (!(o.val_fraction >= 0 && o.val_fraction < 1) || o.shard_tokens < 1 ||
            o.shard_tokens > TOK_SHARD_MAX_TOKENS || (o.jsonl ? o.ninputs != 0 : o.ninputs < 1) ||
            (!o.jsonl && (o.template_name || o.seq || o.too_long)) || (o.too_long && !o.seq) ||
            (o.seq < 0 || o.seq > 1048576) || (!o.bench && !o.out_dir) ||
            (o.tokenizer ? o.encoder || o.vocab : !o.encoder || !o.vocab))
            abort();
        free(o.inputs);
    } else if (rc != 1 && rc != 2) {
        abort();
    }
    free(copy);
    return 0;
}
