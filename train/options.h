/* The trainer's command line (train_gpt2's, ferry-train's): every flag with
 * its default, parsed and checked before any work starts, and the --help
 * text generated from the same table, naming the program. */
#ifndef FERRY_TRAIN_OPTIONS_H
#define FERRY_TRAIN_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"

#define TRAIN_MAX_PATHS 64

/* A program the trainer serves (train/trainer.h): its name in every message
 * and in --help, and the model families it trains. The texts left NULL are
 * GPT-2's, train_gpt2's words. */
typedef struct trainer_program {
    const char *name;        /* "train_gpt2", "ferry-train" */
    bool llama;              /* trains the Llama family too (--model llama-dN, --init-from DIR) */
    const char *about;       /* --help's line under the usage */
    const char *model_help;  /* --help's words for --model */
    const char *init_help;   /* --help's words for --init-from */
    const char *example;     /* --help's example, the flags after the program's name */
} trainer_program;

typedef struct train_options {
    /* model */
    const char *model;       /* preset name; NULL when layers/heads/width are given */
    int layers, heads, width, vocab, context;
    const char *init_from;   /* Hugging Face GPT-2 safetensors */
    /* data */
    const char *data;        /* train shards (file or glob) */
    const char *val_data;    /* validation shards */
    const char *tokenizer;   /* folder with encoder.json and vocab.bpe */
    int batch, seq, grad_accum, steps;
    bool no_pack;            /* masked shards: one example per row, padded, instead of packed */
    const char *too_long;    /* masked shards: "refuse" or "truncate" an example over --seq + 1 tokens */
    uint64_t seed;
    /* optimizer */
    float lr, lr_min_frac, weight_decay, beta1, beta2, eps, clip;
    int warmup;
    /* engine */
    ferry_backend_kind backend;
    ferry_offload offload;
    ferry_dtype dtype;       /* device storage: AUTO, F32, BF16 or F16 */
    ferry_moments moments;   /* the host Adam moments' form (--moments) */
    int upload_window;       /* --upload-window: ferry_engine_config's upload_window */
    uint64_t upload_window_chunk_bytes; /* --upload-window BYTES: its chunks' size (0 = 16 MiB) */
    uint64_t gpu_mem, host_mem;
    int prefetch, threads;
    bool recompute, delayed_update;
    bool find_max_batch;     /* --find-max-batch: the largest batch the planner fits */
    /* outputs */
    int eval_every, eval_batches;
    int sample_every, sample_tokens, top_k;
    float temperature, top_p;
    const char *stop_text;   /* --stop: generation ends where the sample's new text holds it; "" = none */
    const char *prompt;
    const char *checkpoint_dir;
    int checkpoint_every;
    int keep_last;           /* step folders kept after a save; 0 = all */
    const char *resume;
    const char *trace;
    const char *log;
    double peak_tflops;      /* for MFU; 0 = from the GPU's name */
    bool sample_only;        /* --sample: generate from --resume/--init-from and exit */
    bool eval_only;          /* --eval-only: evaluate the initial or resumed weights on --val-data and exit */
    bool quiet;
    uint64_t given;          /* bit i: the i-th flag of the table was on the command line */
    float loss_scale;        /* first dynamic loss scale with f16 storage; 0 = off */
    int max_skips;           /* skipped steps in a row that stop the run; 0 = never */
    /* the NVMe tier */
    const char *nvme_path;   /* folder for the state on disk; NULL = none */
    bool nvme_master;        /* the master weights on disk too */
    uint64_t nvme_window, nvme_block;
    int nvme_queue_depth;
    const trainer_program *program; /* whose command line it is: messages name it */
} train_options;

/* Fills *o from argv for program p (which must outlive o). Returns 0 to go
 * on, 1 after --help (printed), 2 on a bad flag or value (the message
 * printed to stderr, after the program's name, names it). */
int train_options_parse_for(const trainer_program *p, int argc, char **argv, train_options *o);
/* The same for train_gpt2. */
int train_options_parse(int argc, char **argv, train_options *o);
/* --upload-window's value: auto, on, off, or a size (on, with chunks of that
 * many bytes: a multiple of 64 up to 1GiB). FERRY_ERR_INVALID_ARGUMENT with
 * a sentence otherwise. */
ferry_status train_parse_upload_window(const char *text, int *window, uint64_t *chunk_bytes);

/* Refuses, on stderr, a model of the Llama family where o's program does
 * not train it (train_gpt2: use ferry-train). `what` names the model with
 * its verb ("--model llama-d2 is", "--resume 'runs/x' holds"). Returns 0
 * when it does, else 2. */
int train_options_refuse_llama(const train_options *o, const char *what);

/* The range train_gpt2 accepts for a numeric flag ("--heads"), so other
 * tools that take the same flags (memprof plan) accept exactly the same
 * shapes; false for a flag that is not numeric or not train_gpt2's. */
bool train_option_range(const char *flag, double *min, double *max);

/* Whether `flag` ("--layers") was given on the command line (not defaulted). */
bool train_options_given(const train_options *o, const char *flag);

/* Checks the outputs (--checkpoint-dir, --log, --trace) before any work:
 * a folder must be a folder; a file a regular file or a character device
 * (never a folder, FIFO, socket or link to nothing); each writable, or, not
 * there yet, creatable under the nearest folder that exists (the missing
 * folders between are made when the run starts). Creates nothing. Returns
 * 0, or 2 after printing what is wrong with which flag. */
int train_options_check_outputs(const train_options *o);

/* The learning rate at step s (0-based): linear warmup over `warmup` steps,
 * then cosine decay to lr * lr_min_frac at the last step. */
float train_lr_at(const train_options *o, int step);

#endif
