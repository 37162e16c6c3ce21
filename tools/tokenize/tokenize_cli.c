/* tokenize's options (see tokenize_cli.h): every value is checked here, so a
 * bad one is refused before a byte of the corpus is read. */
#include "tools/tokenize/tokenize_cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/token_shard.h"

void tokenize_usage(FILE *f)
{
    fprintf(f,
            "usage: tokenize --tokenizer tokenizer.json --out-dir DIR\n"
            "                [--val-fraction F] [--shard-tokens N] [--doc-sep file|blank-lines] INPUT...\n"
            "       tokenize --encoder encoder.json --vocab vocab.bpe --out-dir DIR [...] INPUT...\n"
            "       tokenize (--tokenizer FILE | --encoder FILE --vocab FILE) --bench INPUT...\n"
            "       tokenize (--tokenizer FILE | --encoder FILE --vocab FILE) --out-dir DIR --jsonl FILE\n"
            "                [--template plain|llama3|chatml|mistral] [--seq N [--too-long refuse|truncate]]\n"
            "Writes DIR/val_000000.bin, DIR/train_000000.bin, ... (llm.c shards: 1024-byte header, then\n"
            "uint16 tokens, or uint32 tokens in Llama 3's format when the vocabulary passes 65,536).\n"
            "--tokenizer: a Hugging Face tokenizer.json of the BPE model (GPT-2, Llama 3, Qwen2; Llama 2,\n"
            "Mistral, TinyLlama); --encoder and --vocab: GPT-2's two files. Each document starts with the\n"
            "tokenizer's BOS (<|endoftext|> GPT-2, <|begin_of_text|> Llama 3, <s> Llama 2); its text is\n"
            "plain: special tokens written in it are not recognised. Documents are whole files (--doc-sep\n"
            "file, the default) or paragraphs separated by blank lines. --val-fraction (default 0.01): the\n"
            "first ceil(F * total) tokens go to val. --shard-tokens (default 100000000) caps a shard.\n"
            "A run replaces the shard set of DIR as a whole: the new shards are written aside and put in\n"
            "place together, shards of an earlier run that the new set does not have are removed, and a\n"
            "failure leaves the earlier set as it was. Options may come before or after the INPUTs;\n"
            "after -- every argument is an INPUT (regular files only).\n"
            "--bench tokenizes the inputs and prints MB/s without writing.\n"
            "Tokenizer files: tools/setup/fetch_tokenizer.sh installs GPT-2's encoder.json and vocab.bpe;\n"
            "tools/setup/fetch_tokenizer.sh llama3 (or llama2, gpt2-json) writes a tokenizer.json; a model\n"
            "folder's own tokenizer.json works as it is.\n"
            "--jsonl FILE: instruction data, one JSON object a line, {\"prompt\": ..., \"completion\": ...} or\n"
            "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]}, each record one example rendered with\n"
            "--template (plain: BOS prompt completion EOS; see docs/data.md) into masked shards whose only\n"
            "targets are the completion and the assistant's tokens. --seq N: an example of more than N + 1\n"
            "tokens is refused naming its line (--too-long refuse, the default) or cut to N + 1 (truncate).\n");
}

static int bad(const char *fmt, const char *a)
{
    fputs("tokenize: ", stderr);
    fprintf(stderr, fmt, a);
    fputs("\n", stderr);
    return 2;
}

static int parse_fraction(const char *v, double *out)
{
    char *end = NULL;
    errno = 0;
    double f = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(f) || !(f >= 0 && f < 1))
        return bad("--val-fraction '%s' must be a number in [0, 1), such as 0.01", v);
    *out = f;
    return 0;
}

static int parse_shard_tokens(const char *v, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || n < 1 || n > TOK_SHARD_MAX_TOKENS) {
        fprintf(stderr, "tokenize: --shard-tokens '%s' must be a whole number in 1..%u\n", v, TOK_SHARD_MAX_TOKENS);
        return 2;
    }
    *out = n;
    return 0;
}

static int is_instruct(const char *a)
{
    return !strcmp(a, "--jsonl") || !strcmp(a, "--template") || !strcmp(a, "--seq") || !strcmp(a, "--too-long");
}

/* The instruction data's options: --jsonl, --template, --seq, --too-long. */
static int instruct_value(tokenize_opts *o, const char *a, const char *v)
{
    if (!strcmp(a, "--jsonl"))
        o->jsonl = v;
    else if (!strcmp(a, "--template") && strcmp(v, "plain") && strcmp(v, "llama3") && strcmp(v, "chatml") &&
             strcmp(v, "mistral"))
        return bad("--template '%s' must be plain, llama3, chatml or mistral", v);
    else if (!strcmp(a, "--template"))
        o->template_name = v;
    else if (!strcmp(a, "--too-long") && strcmp(v, "refuse") && strcmp(v, "truncate"))
        return bad("--too-long '%s' must be 'refuse' or 'truncate'", v);
    else if (!strcmp(a, "--too-long"))
        o->too_long = v;
    else {
        char *end = NULL;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < 1 || n > 1048576)
            return bad("--seq '%s' must be a whole number in 1..1048576", v);
        o->seq = (int)n;
    }
    return 0;
}

/* One option taking a value (is_valued(a)): 0 on success, 2 with a message. */
static int option_value(tokenize_opts *o, const char *a, const char *v)
{
    if (!*v)
        return bad("%s needs a non-empty value", a);
    if (!strcmp(a, "--tokenizer"))
        o->tokenizer = v;
    else if (!strcmp(a, "--encoder"))
        o->encoder = v;
    else if (!strcmp(a, "--vocab"))
        o->vocab = v;
    else if (!strcmp(a, "--out-dir"))
        o->out_dir = v;
    else if (!strcmp(a, "--val-fraction"))
        return parse_fraction(v, &o->val_fraction);
    else if (!strcmp(a, "--shard-tokens"))
        return parse_shard_tokens(v, &o->shard_tokens);
    else if (is_instruct(a))
        return instruct_value(o, a, v);
    else if (strcmp(v, "file") && strcmp(v, "blank-lines")) /* --doc-sep */
        return bad("--doc-sep '%s' must be 'file' or 'blank-lines'", v);
    else
        o->doc_blank_lines = !strcmp(v, "blank-lines");
    return 0;
}

static int is_valued(const char *a)
{
    static const char *const valued[] = {"--tokenizer", "--encoder", "--vocab", "--out-dir", "--val-fraction", "--shard-tokens",
                                         "--doc-sep"};
    for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
        if (!strcmp(a, valued[k]))
            return 1;
    return is_instruct(a);
}

/* --jsonl takes its one file; the instruction options need it. */
static int check_instruct(const tokenize_opts *o)
{
    if (o->jsonl && o->ninputs > 0)
        return bad("--jsonl reads its one file; give the text INPUTs ('%s', ...) in a run of their own", o->inputs[0]);
    if (!o->jsonl && (o->template_name || o->seq || o->too_long))
        return bad("%s is for instruction data: give --jsonl FILE",
                   o->template_name ? "--template" : o->seq ? "--seq" : "--too-long");
    if (o->too_long && !o->seq)
        return bad("--too-long %s needs --seq N, the length it applies to", o->too_long);
    return 0;
}

static int check_required(const tokenize_opts *o)
{
    if (check_instruct(o))
        return 2;
    if (o->tokenizer && (o->encoder || o->vocab)) {
        fputs("tokenize: give --tokenizer (a tokenizer.json) or --encoder with --vocab (GPT-2's two files), not "
              "both\n", stderr);
        return 2;
    }
    int have_tok = o->tokenizer || (o->encoder && o->vocab);
    int has_input = o->ninputs > 0 || o->jsonl;
    if (have_tok && has_input && (o->bench || o->out_dir))
        return 0;
    fprintf(stderr, "tokenize: --tokenizer (or --encoder and --vocab), %sand at least one INPUT (or --jsonl FILE) "
            "are required (missing:%s%s%s)\n", o->bench ? "" : "--out-dir ",
            have_tok ? "" : o->encoder ? " --vocab" : o->vocab ? " --encoder" : " --tokenizer",
            o->bench || o->out_dir ? "" : " --out-dir", has_input ? "" : " INPUT");
    return 2;
}

int tokenize_parse_args(int argc, char **argv, tokenize_opts *o)
{
    *o = (tokenize_opts){.val_fraction = 0.01, .shard_tokens = 100000000};
    o->inputs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *o->inputs);
    if (!o->inputs) {
        fputs("tokenize: out of memory reading the command line\n", stderr);
        return 2;
    }
    int rc = 0, only_inputs = 0;
    for (int i = 1; rc == 0 && i < argc; i++) {
        const char *a = argv[i];
        if (only_inputs || strncmp(a, "--", 2) != 0)
            o->inputs[o->ninputs++] = a;
        else if (!strcmp(a, "--"))
            only_inputs = 1;
        else if (!strcmp(a, "--help")) {
            tokenize_usage(stdout);
            rc = 1;
        } else if (!strcmp(a, "--bench"))
            o->bench = 1;
        else if (!is_valued(a))
            rc = bad("unknown option '%s' (tokenize --help lists them)", a);
        else if (i + 1 >= argc)
            rc = bad("%s needs a value", a);
        else
            rc = option_value(o, a, argv[++i]);
    }
    if (rc == 0)
        rc = check_required(o);
    if (rc != 0) {
        free(o->inputs);
        o->inputs = NULL;
    }
    return rc;
}
