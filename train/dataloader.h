/* Batches of tokens for training and evaluation, read from token shards of
 * llm.c's formats, GPT-2's (uint16 tokens) or Llama 3's (uint32), or of
 * ferry's masked format (instruction data: a target flag per token and the
 * example starts), told apart by each header's magic and version (see
 * token_shard.h); one loader's shards are all of one format.
 * Token streams (llm.c's formats): the dataset is cut into windows of B*T+1
 * tokens, each starting B*T tokens after the previous one inside a shard (a
 * shard's tail shorter than a window is not used); a batch is one window:
 * inputs are its first B*T tokens, targets the same shifted by one, as int32,
 * row-major B x T; positions are 0..T-1 in every row.
 * Masked shards: an example of L tokens fills L-1 slots of a row (inputs its
 * tokens 0..L-2, targets its tokens 1..L-1, each -1 where its flag says it
 * is no target; positions 0..L-2). Packed (the default), the examples fill
 * rows of T slots greedily in file order: an example that does not fit in
 * what is left of a row starts the next one, and is never split. With
 * no_pack each row holds one example. An example of more than T+1 tokens is
 * refused at open (naming the shard and the example), or with
 * TOK_TOO_LONG_TRUNCATE keeps its first T+1 tokens, alone in its row. A row's
 * unused slots are padding: input 0, target -1, positions counting 0, 1, ...
 * again (a segment of its own). Rows do not cross shards; a batch is B rows
 * in order (the last batch's missing rows all padding), so an epoch has
 * ceil(rows / B) batches. Positions restart at 0 at every example and at
 * the padding: a model keeps the examples of a row apart by them (a segment
 * starts where the position is 0).
 * Shuffled mode visits every window once per epoch in an order drawn from
 * (seed, epoch); sequential mode visits them in file order, the same every
 * epoch (use it for validation). The position is a small struct that can be
 * saved and restored, so a resumed run sees exactly the batches it would have.
 * Owns the open shards (one descriptor each) and the epoch's order; not
 * thread-safe. */
#ifndef FERRY_TOKENIZE_DATALOADER_H
#define FERRY_TOKENIZE_DATALOADER_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"
#include "train/token_shard.h"

typedef struct tok_loader tok_loader;

typedef enum tok_too_long { TOK_TOO_LONG_REFUSE = 0, TOK_TOO_LONG_TRUNCATE } tok_too_long;

/* "refuse" or "truncate" -> *out; FERRY_ERR_INVALID_ARGUMENT otherwise. */
ferry_status tok_too_long_parse(const char *s, tok_too_long *out);

typedef struct tok_loader_config {
    const char *const *paths; /* shard files or glob patterns ("data/train_*.bin"); each pattern's
                                 matches are taken in sorted order, entries in the order given */
    size_t npaths;
    int batch;                /* B >= 1 */
    int seq_len;              /* T >= 1 */
    uint32_t vocab_size;      /* the model's vocabulary, at most 2^31: a token >= vocab_size is a format
                                 error; 0: the shards' whole range (65536 for uint16 tokens, 2^31 for
                                 uint32 ones, the most an int32 batch holds) */
    int shuffle;              /* 1: shuffled windows per epoch; 0: sequential */
    uint64_t seed;            /* the shuffle's seed (unused when sequential) */
    int no_pack;              /* masked shards: 1 = one example per row; 0 = examples packed (the default) */
    tok_too_long too_long;    /* masked shards: an example of more than T+1 tokens refused (0) or truncated */
} tok_loader_config;

/* Where the loader is: save it with a checkpoint, restore with tok_loader_seek. */
typedef struct tok_loader_pos {
    uint64_t epoch;  /* completed passes over the data */
    uint64_t index;  /* batches already served in this epoch */
    uint64_t layout; /* fingerprint of every shard's size and content (a hash of its
                        tokens, and of a masked shard's flags and starts, taken while
                        they are checked at open), B, T, shuffle and seed (and for
                        masked shards no_pack and too_long) */
} tok_loader_pos;

/* Where the last batch came from, for logs and error messages. */
typedef struct tok_loader_batch_info {
    const char *shard;     /* path of its shard (owned by the loader) */
    uint64_t token_offset; /* index of its first token in that shard */
    uint64_t epoch, index; /* the position it was served at */
    uint64_t targets;      /* its targets that are not -1 (B*T for token streams) */
    uint64_t examples;     /* masked shards: examples in it, a truncated one included; else 0 */
} tok_loader_batch_info;

/* Opens and checks every shard: header against file size (a known magic with
 * its version, count * 2 or 4 + 1024 == size), every shard of the first's
 * format (a mix names both files), and every token < vocab_size (naming its
 * index, its value and the vocabulary), each a FERRY_ERR_FORMAT naming the
 * file; a missing file or one that is not a regular file (a FIFO is refused,
 * never waited on) is FERRY_ERR_IO; a dataset with no full window (fewer than
 * B*T+1 tokens in every shard) is FERRY_ERR_INVALID_ARGUMENT. A masked
 * shard's starts and flags are checked too (token_shard.h: the starts in
 * order, each flag 0 or 1 and 0 at an example's start, as many targets as
 * the header says), FERRY_ERR_FORMAT naming the file; a masked set with no
 * example, or an example of more than T+1 tokens under TOK_TOO_LONG_REFUSE,
 * is FERRY_ERR_INVALID_ARGUMENT naming the shard and the example. Reads every
 * token once, and hashes them on the way for the layout. On success *out is
 * at epoch 0, batch 0; release it with tok_loader_close. */
ferry_status tok_loader_open(const tok_loader_config *cfg, tok_loader **out);
void tok_loader_close(tok_loader *l);

/* Batches in one epoch (= windows in the dataset), and tokens in all shards. */
uint64_t tok_loader_batches_per_epoch(const tok_loader *l);
/* The format of the loader's shards. */
tok_shard_format tok_loader_format(const tok_loader *l);
uint64_t tok_loader_tokens(const tok_loader *l);
/* Tokens flagged as targets in all shards (masked), or all tokens (streams). */
uint64_t tok_loader_target_tokens(const tok_loader *l);
/* Masked shards: examples in all shards, those truncated to T+1 tokens, and
 * rows they fill; 0 for token streams. */
uint64_t tok_loader_examples(const tok_loader *l);
uint64_t tok_loader_truncated(const tok_loader *l);
uint64_t tok_loader_rows(const tok_loader *l);
size_t tok_loader_shard_count(const tok_loader *l);

/* Fills inputs[B*T] and targets[B*T] with the next batch and advances; after
 * the last batch of an epoch the next epoch begins (with a new order when
 * shuffled). FERRY_ERR_IO naming the shard, and no advance, when the shard
 * was cut short or rewritten since it was opened (its size or modification
 * time changed, or its tokens are gone); FERRY_ERR_FORMAT for a token that is
 * no longer below the vocabulary, found as the batch is converted (inputs and
 * targets may then hold part of it; the position does not advance). */
ferry_status tok_loader_next(tok_loader *l, int32_t *inputs, int32_t *targets);

/* The same, with positions[B*T] (may be NULL): each slot's position in its
 * example (token streams: 0..T-1 in every row). A masked shard whose flags or
 * starts changed since open is FERRY_ERR_IO as its tokens are. */
ferry_status tok_loader_next_ex(tok_loader *l, int32_t *inputs, int32_t *targets, int32_t *positions);

/* Info about the batch the last tok_loader_next returned (zeroed before any). */
tok_loader_batch_info tok_loader_last(const tok_loader *l);

/* The position of the next batch. */
tok_loader_pos tok_loader_tell(const tok_loader *l);

/* Moves to a position from tok_loader_tell. FERRY_ERR_INVALID_ARGUMENT if it
 * was taken on other data (other shards, or the same shards with any token
 * changed) or another B, T, shuffle or seed (layout differs), or if its index
 * is past the epoch's end; the loader is unchanged then. */
ferry_status tok_loader_seek(tok_loader *l, const tok_loader_pos *pos);

/* Back to epoch 0, batch 0 (e.g. before each evaluation over the first N
 * batches of a sequential validation loader). */
void tok_loader_reset(tok_loader *l);

#endif
