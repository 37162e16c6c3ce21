/* Library words to trainer flags: the table and the whole-word replacement.
 * The library (common/ .. engine/) names config fields and enum values
 * because ferry.h is what an embedder has; the tests of this table provoke
 * each library message and check that the trainer's version names only
 * flags train_gpt2 takes. */
#include "train/flag_words.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "ferry.h"

/* Longer library words first where one contains another. */
static const train_flag_word words[] = {
    {"offload FERRY_OFFLOAD_NONE", "--offload none", "--offload none"},
    {"offload FERRY_OFFLOAD_OPTIMIZER", "--offload optimizer", "--offload optimizer"},
    {"offload FERRY_OFFLOAD_PARAMS", "--offload params", "--offload params"},
    {"offload FERRY_OFFLOAD_NVME", "--offload nvme", "--offload nvme --nvme-path /tmp"},
    {"backend FERRY_BACKEND_HOST", "--backend host", "--backend host"},
    {"backend FERRY_BACKEND_CUDA", "--backend cuda", "--backend cuda"},
    {"dtype FERRY_DTYPE_F32", "--dtype f32", "--dtype f32"},
    {"dtype FERRY_DTYPE_BF16", "--dtype bf16", "--dtype bf16"},
    {"dtype FERRY_DTYPE_F16", "--dtype f16", "--dtype f16"},
    {"a smaller batch, or activations recomputed in backward", "a smaller --batch, or --recompute",
     "--batch 1 --recompute"},
    {"device_budget_bytes", "--gpu-mem", "--gpu-mem 24GiB"},
    {"host_budget_bytes", "--host-mem", "--host-mem 64GiB"},
    {"prefetch_groups", "--prefetch", "--prefetch 2"},
    {"optimizer_threads", "--threads", "--threads 4"},
    {"delayed_update", "--delayed-update", "--delayed-update"},
    {"loss_scale_init", "--loss-scale", "--loss-scale 1024"},
    {"trace_path", "--trace", "--trace memory.trace"},
    {"nvme_path", "--nvme-path", "--offload nvme --nvme-path /tmp"},
    {"nvme_window_bytes", "--nvme-window", "--offload nvme --nvme-path /tmp --nvme-window 64MiB"},
    {"nvme_block_bytes", "--nvme-block", "--offload nvme --nvme-path /tmp --nvme-block 1MiB"},
    {"nvme_queue_depth", "--nvme-queue-depth", "--offload nvme --nvme-path /tmp --nvme-queue-depth 8"},
    {"nvme_master", "--nvme-master", "--offload nvme --nvme-path /tmp --nvme-master"},
    /* A world of ranks is the launcher's (mpirun, srun), not a flag's. */
    {"data_parallel -1 trains each rank alone", "one process started without mpirun or srun trains alone", NULL},
    {"set data_parallel -1", "start one process (without mpirun or srun)", NULL},
};

const train_flag_word *train_flag_words(size_t *count)
{
    *count = sizeof words / sizeof words[0];
    return words;
}

static bool word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The table entry that starts at s as a whole word, or NULL. */
static const train_flag_word *word_at(const char *start, const char *s)
{
    if (s > start && word_char(s[-1]))
        return NULL;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].api);
        if (strncmp(s, words[i].api, n) == 0 && !word_char(s[n]))
            return &words[i];
    }
    return NULL;
}

char *train_flag_words_translate(const char *msg, char *out, size_t cap)
{
    if (!out || cap == 0)
        return out;
    size_t o = 0;
    for (const char *s = msg ? msg : ""; *s && o + 1 < cap;) {
        const train_flag_word *w = word_at(msg, s);
        if (w) {
            for (const char *f = w->flag; *f && o + 1 < cap; f++)
                out[o++] = *f;
            s += strlen(w->api);
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = '\0';
    return out;
}

const char *train_last_error(void)
{
    static _Thread_local char buf[2048];
    return train_flag_words_translate(ferry_last_error(), buf, sizeof buf);
}
