/* tokenize's command line: the options, their checks and the --help text.
 * Kept apart from the main so that a fuzzing harness can call the parser.
 * Owns nothing; argv's strings are borrowed. */
#ifndef FERRY_TOOLS_TOKENIZE_CLI_H
#define FERRY_TOOLS_TOKENIZE_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef struct tokenize_opts {
    const char *tokenizer;  /* a tokenizer.json, or */
    const char *encoder, *vocab; /* GPT-2's encoder.json and vocab.bpe */
    const char *out_dir;
    double val_fraction;    /* in [0, 1) */
    uint64_t shard_tokens;  /* 1..TOK_SHARD_MAX_TOKENS */
    int doc_blank_lines;    /* 0: each file is one document */
    int bench;
    /* instruction data: --jsonl FILE, rendered with --template (default plain) */
    const char *jsonl, *template_name, *too_long;
    int seq;                /* --seq: 0 = no length limit */
    const char **inputs;    /* in the order given; options may come before or after them */
    int ninputs;
} tokenize_opts;

void tokenize_usage(FILE *f);

/* Fills *o from argv[1..argc). Options and INPUTs may come in any order;
 * after "--" every argument is an INPUT. Returns 0 to go on, 1 after printing
 * --help to stdout, 2 on a bad option or value (the reason printed to
 * stderr). On 0, o->inputs is a malloc'd array the caller frees. */
int tokenize_parse_args(int argc, char **argv, tokenize_opts *o);

#endif
