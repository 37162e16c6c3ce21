/* Instruction data to masked shards, what `tokenize --jsonl` runs: every
 * record of a JSON Lines file (jsonl.h) rendered by a chat template and
 * encoded (chat_template.h) into one example, an example over --seq + 1
 * tokens truncated or refused, then the examples split into validation
 * (the first whole examples holding ceil(val_fraction * tokens) tokens) and
 * training, and written as masked shards (token_shard.h) of at most
 * shard_tokens tokens each, an example never split between shards. Owns
 * the examples it reads; the shard set and the tokenizer are the caller's. */
#ifndef FERRY_TRAIN_INSTRUCT_H
#define FERRY_TRAIN_INSTRUCT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"
#include "train/chat_template.h"
#include "train/dataloader.h"
#include "train/token_shard.h"

typedef struct tok_instruct_options {
    chat_template_id tpl;
    int seq;                /* 0: no length limit; else an example of L tokens needs L-1 <= seq */
    tok_too_long too_long;  /* what an example over seq + 1 tokens gets */
    double val_fraction;    /* in [0, 1) */
    uint64_t shard_tokens;  /* 1..TOK_SHARD_MAX_TOKENS */
} tok_instruct_options;

/* The examples of a file, back to back. */
typedef struct tok_examples {
    tok_ids ids;
    tok_flags target;
    uint32_t *starts;       /* n example starts into ids */
    size_t n, cap;
    size_t *lines;          /* each example's line in the file */
} tok_examples;

void tok_examples_free(tok_examples *ex);

typedef struct tok_instruct_report {
    size_t bytes, examples, tokens, targets;
    size_t truncated;       /* examples cut to seq + 1 tokens */
    size_t untargeted;      /* examples left with no target (all prompt after truncation) */
    size_t val_examples, val_tokens, train_examples, train_tokens;
    int val_shards, train_shards;
} tok_instruct_report;

/* Reads every record of `path` into *ex (appended), encoding with enc.
 * FERRY_ERR_FORMAT naming the file and line for every refusal of jsonl.h
 * and chat_render, and for an example over o->seq + 1 tokens under
 * TOK_TOO_LONG_REFUSE (with its length); FERRY_ERR_INVALID_ARGUMENT for a
 * special token the template needs and the tokenizer lacks, or more tokens
 * than a shard format counts. */
ferry_status tok_instruct_read(const char *path, const tok_text_encoder *enc, const tok_instruct_options *o,
                               tok_examples *ex, tok_instruct_report *rep);

/* The masked format for a vocabulary: uint16 tokens up to 65,536 ids,
 * uint32 above. */
tok_shard_format tok_instruct_format(uint32_t vocab_size);

/* Splits ex into val and train and adds their shards to `set` (format f);
 * each shard's path and size are printed to `say` (may be NULL).
 * FERRY_ERR_INVALID_ARGUMENT when the split leaves no training example. */
ferry_status tok_instruct_write(const tok_examples *ex, const tok_instruct_options *o, tok_shard_format f,
                                tok_shard_set *set, tok_instruct_report *rep, FILE *say);

#endif
