/* The library's words for its settings, said in train_gpt2's flags. The
 * library's messages name what an embedder sets (device_budget_bytes,
 * offload FERRY_OFFLOAD_PARAMS); a person at the trainer's command line
 * sets flags (--gpu-mem, --offload params). One table, train/flag_words.c,
 * holds every translation; train_gpt2 and memprof plan print every library
 * message through it. */
#ifndef FERRY_TRAIN_FLAG_WORDS_H
#define FERRY_TRAIN_FLAG_WORDS_H

#include <stddef.h>

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

#endif
