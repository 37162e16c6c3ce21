/* Library words to trainer flags: the table and the whole-word replacement.
 * The library (common/ .. engine/) names config fields and enum values
 * because ferry.h is what an embedder has; the tests of this table provoke
 * each library message and check that the trainer's version names only
 * flags train_gpt2 takes. */
#include "train/flag_words.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
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

/* Advice of the library's messages (in the trainer's words) that a
 * situation has already taken or cannot take: `when` says whether it
 * applies, and the words become `then`. */
typedef struct advice_rule {
    const char *words, *then;
    bool (*when)(const train_situation *s);
} advice_rule;

static bool recomputing(const train_situation *s) { return s->recompute; }
static bool in_params(const train_situation *s) { return s->offload == FERRY_OFFLOAD_PARAMS; }
static bool no_disk_tier(const train_situation *s)
{
    return s->offload == FERRY_OFFLOAD_NVME || s->on_disk || s->ranks > 1;
}
static bool disk_tier_open(const train_situation *s) { return !no_disk_tier(s); }
static bool batch_one(const train_situation *s) { return s->batch == 1; }
static bool always(const train_situation *s) { return s != NULL; }

static const advice_rule rules[] = {
    /* offload/arena.c, offload/pool.c, engine/auto.c, as translated. */
    {"(a smaller --batch, or --recompute)", "(a smaller --batch or --seq)", recomputing},
    {"(a smaller batch or sequence, recompute)", "(a smaller batch or sequence)", recomputing},
    {"(a smaller --batch or --seq)", "(a shorter --seq)", batch_one},
    {"(a smaller --batch, or --recompute)", "(a shorter --seq, or --recompute)", batch_one},
    {"(a smaller batch or sequence)", "(a shorter sequence)", batch_one},
    {"(a smaller batch or sequence, recompute)", "(a shorter sequence, or recompute)", batch_one},
    {", use --offload params,", ",", in_params},
    {", or offload optimizer state to NVMe", "", no_disk_tier},
    {"offload optimizer state to NVMe", "put the optimizer state on disk (--offload nvme --nvme-path DIR)",
     disk_tier_open},
    /* engine/placement.c: an embedder's groups are its own; train_gpt2's are GPT-2's. */
    {"raise --gpu-mem or split the group", "raise --gpu-mem (the groups are GPT-2's: the embeddings, each block)",
     always},
};

char *train_advice_translate(const char *msg, const train_situation *s, char *out, size_t cap)
{
    char in[2048];
    train_flag_words_translate(msg, in, sizeof in);
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        if (!rules[r].when(s))
            continue;
        char next[2048];
        size_t o = 0, n = strlen(rules[r].words), k = strlen(rules[r].then);
        for (const char *p = in; *p && o + 1 < sizeof next;) {
            if (strncmp(p, rules[r].words, n) == 0 && o + k < sizeof next) {
                memcpy(next + o, rules[r].then, k);
                o += k;
                p += n;
            } else {
                next[o++] = *p++;
            }
        }
        next[o] = '\0';
        memcpy(in, next, o + 1);
    }
    snprintf(out, cap, "%s", in);
    return out;
}

const char *train_last_error_in(const train_situation *s)
{
    static _Thread_local char buf[2048];
    return train_advice_translate(ferry_last_error(), s, buf, sizeof buf);
}
