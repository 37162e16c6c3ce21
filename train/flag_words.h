/* The library's words for its settings, said in train_gpt2's flags. The
 * library's messages name what an embedder sets (device_budget_bytes,
 * offload FERRY_OFFLOAD_PARAMS); a person at the trainer's command line
 * sets flags (--gpu-mem, --offload params). One table, train/flag_words.c,
 * holds every translation; train_gpt2 and memprof plan print every library
 * message through it. */
#ifndef FERRY_TRAIN_FLAG_WORDS_H
#define FERRY_TRAIN_FLAG_WORDS_H

#include <stdbool.h>
#include <stddef.h>

#include "ferry.h"

/* One translation: the library's words and the trainer's. `example` is a
 * command line fragment train_gpt2 accepts that uses the flag (the table's
 * test parses it, so a renamed flag cannot leave the table behind); NULL
 * where the trainer's words are no flag but what to do instead (a setting
 * that is the launcher's, such as the world of ranks). */
typedef struct train_flag_word {
    const char *api, *flag, *example;
} train_flag_word;

/* The table, and its length. */
const train_flag_word *train_flag_words(size_t *count);

/* Writes `msg` into out[cap] with each of the table's library words, where
 * it stands as a whole word, replaced by the trainer's; cut to fit (always
 * terminated). Returns out. */
char *train_flag_words_translate(const char *msg, char *out, size_t cap);

/* The calling thread's ferry_last_error(), translated, in a thread-local
 * buffer valid until the next call on this thread. */
const char *train_last_error(void);

/* What a run already does, so that advice can leave out what is done: the
 * library's messages offer every way out they know (offload
 * FERRY_OFFLOAD_PARAMS, recompute, the NVMe tier), not knowing which the
 * run has taken. */
typedef struct train_situation {
    ferry_offload offload; /* the mode in use (AUTO: not settled yet) */
    bool recompute;        /* activations recomputed in backward (or tried: auto planned with it) */
    bool on_disk;          /* the optimizer state is on disk (offload nvme, or params with --nvme-path) */
    int ranks;             /* processes training together (1 alone) */
    int batch;             /* sequences per micro-batch (0: not known) */
} train_situation;

/* train_flag_words_translate, then each piece of advice the situation has
 * already taken, or cannot take, left out or said as what is left: no
 * "use --offload params" in params mode, no "--recompute" with it on, no
 * "the optimizer state to NVMe" in the NVMe tier or with several ranks (the
 * tier trains alone), no smaller batch than 1; elsewhere the disk tier is
 * said as the flags. Returns out. */
char *train_advice_translate(const char *msg, const train_situation *s, char *out, size_t cap);

/* train_last_error() for a run in situation s. */
const char *train_last_error_in(const train_situation *s);

#endif
