/* Where a program finds the tokenizer of the model it samples or
 * evaluates, the way installed programs find their data, never relative to
 * the working folder. The places, in order:
 *   1. what the user named (--tokenizer FILE or DIR): there or nowhere;
 *   2. beside the model: the checkpoint or --init-from folder, where
 *      ferry's checkpoints keep a copy of the tokenizer they were trained
 *      with, and where a Hugging Face folder holds its tokenizer.json;
 *   3. $FERRY_TOKENIZER_DIR;
 *   4. the install's data folder: share/ferry/gpt2 beside the program's
 *      bin/ (GPT-2's files, which `meson install` puts there);
 *   5. the source tree the program was built from (GPT-2's files from
 *      tools/setup/fetch_tokenizer.sh, in build-deps/).
 * In a folder, a tokenizer.json is taken first, then GPT-2's encoder.json
 * with its vocab.bpe; places 4 and 5 hold GPT-2's alone, so a model of the
 * Llama family (no_gpt2_places) never falls back on them: it takes GPT-2's
 * files only where they are named or kept beside it (a Llama trained on
 * GPT-2's tokens). Owns nothing; opening
 * the files is train/tokenizer.h's job. */
#ifndef FERRY_TRAIN_TOK_FIND_H
#define FERRY_TRAIN_TOK_FIND_H

#include <limits.h>
#include <stdbool.h>

#include "ferry.h"

typedef struct tok_places {
    const char *given;     /* --tokenizer: a tokenizer.json, GPT-2's encoder.json, or a folder; NULL: not given */
    const char *model_dir; /* the checkpoint's or --init-from's folder; NULL: none */
    bool no_gpt2_places;   /* places 4 and 5 are not tried (the Llama family) */
} tok_places;

typedef struct tok_found {
    char json[PATH_MAX];      /* a tokenizer.json, or "" */
    char encoder[PATH_MAX];   /* or GPT-2's encoder.json ... */
    char vocab_bpe[PATH_MAX]; /* ... and vocab.bpe beside it */
    char place[160];          /* which place, for messages: "--tokenizer", "the checkpoint's folder", ... */
} tok_found;

/* Finds the tokenizer. FERRY_ERR_IO when no place has one: the message
 * lists every place tried with what it lacked, and says what to give. */
ferry_status tok_find(const tok_places *p, tok_found *out);

/* The install's data folder for the running program: <bin>/../share/ferry
 * (the program's own path resolved), in *out; false where it cannot be
 * told (no /proc). */
bool tok_find_datadir(char *out, size_t cap);

#endif
