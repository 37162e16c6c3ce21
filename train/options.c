/* The trainer's flags: one table gives parsing, checking and --help, so the
 * documentation of a flag and its default cannot drift from the code; the
 * program (train_gpt2, ferry-train) gives its name and the words that are
 * its own. */
#include "train/options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/units.h"
#include "models/llama.h"

typedef enum opt_kind { OPT_INT, OPT_FLOAT, OPT_STR, OPT_BOOL, OPT_BYTES, OPT_U64, OPT_OFFLOAD, OPT_BACKEND, OPT_DTYPE, OPT_MOMENTS, OPT_WINDOW } opt_kind;

typedef struct opt_spec {
    const char *flag;
    opt_kind kind;
    size_t field;
    const char *def;  /* shown in --help and applied before parsing */
    double min, max;  /* numeric range (inclusive) */
    const char *help;
} opt_spec;

#define F(name) offsetof(train_options, name)

static const opt_spec specs[] = {
    {"--model", OPT_STR, F(model), "d6", 0, 0, "model preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl, or dN (N layers, 64N wide)"},
    {"--layers", OPT_INT, F(layers), "0", 0, 4096, "custom model: layers (with --heads and --width; overrides --model)"},
    {"--heads", OPT_INT, F(heads), "0", 0, 4096, "custom model: attention heads"},
    {"--width", OPT_INT, F(width), "0", 0, 65536, "custom model: embedding width"},
    {"--vocab", OPT_INT, F(vocab), "50257", 1, 65536, "vocabulary size (GPT-2: 50257; padded to a multiple of 128)"},
    {"--context", OPT_INT, F(context), "1024", 1, 1048576, "longest sequence the model supports (rows of wpe)"},
    {"--init-from", OPT_STR, F(init_from), "", 0, 0, "start from Hugging Face GPT-2 weights (model.safetensors)"},
    {"--data", OPT_STR, F(data), "", 0, 0, "training shards: a file or a glob such as 'data/train_*.bin'"},
    {"--val-data", OPT_STR, F(val_data), "", 0, 0, "validation shards (for --eval-every)"},
    {"--tokenizer", OPT_STR, F(tokenizer), "", 0, 0, "a tokenizer.json, GPT-2's encoder.json (vocab.bpe beside it), or their "
                                                     "folder (default: the checkpoint's or --init-from's own, "
                                                     "$FERRY_TOKENIZER_DIR, for GPT-2 the install's share/ferry/gpt2 "
                                                     "and the source tree's)"},
    {"--batch", OPT_INT, F(batch), "4", 1, 65536, "sequences per micro-batch (B)"},
    {"--seq", OPT_INT, F(seq), "256", 1, 1048576, "tokens per sequence (T), at most --context"},
    {"--no-pack", OPT_BOOL, F(no_pack), "off", 0, 0, "instruction data (masked shards): one example per sequence, "
                                                    "padded, instead of packing examples into each --seq window"},
    {"--too-long", OPT_STR, F(too_long), "refuse", 0, 0, "instruction data: refuse or truncate: an example longer than --seq + 1 tokens is "
                                                        "refused (naming it) or truncated to its first --seq + 1"},
    {"--grad-accum", OPT_INT, F(grad_accum), "1", 1, 65536, "micro-batches per optimizer step"},
    {"--steps", OPT_INT, F(steps), "100", 1, 100000000, "optimizer steps to take"},
    {"--seed", OPT_U64, F(seed), "1337", 0, 0, "seed of the initialisation, the data order and sampling"},
    {"--lr", OPT_FLOAT, F(lr), "6e-4", 0, 10, "peak learning rate"},
    {"--warmup", OPT_INT, F(warmup), "10", 0, 100000000, "steps of linear warmup"},
    {"--lr-min-frac", OPT_FLOAT, F(lr_min_frac), "0.1", 0, 1, "cosine decay ends at lr x this"},
    {"--weight-decay", OPT_FLOAT, F(weight_decay), "0.1", 0, 10, "AdamW weight decay (2-D weights only)"},
    {"--beta1", OPT_FLOAT, F(beta1), "0.9", 0, 0.999999, "AdamW beta1"},
    {"--beta2", OPT_FLOAT, F(beta2), "0.95", 0, 0.999999, "AdamW beta2"},
    {"--eps", OPT_FLOAT, F(eps), "1e-8", 0, 1, "AdamW epsilon"},
    {"--clip", OPT_FLOAT, F(clip), "1.0", 0, 1e9, "clip the global gradient norm to this (0 = off)"},
    {"--backend", OPT_BACKEND, F(backend), "auto", 0, 0, "auto, host or cuda (auto: cuda if a GPU is present)"},
    {"--offload", OPT_OFFLOAD, F(offload), "auto", 0, 0, "auto (the first of none, optimizer, params that fits --gpu-mem "
                                                         "and the host memory, the NVMe tier with --nvme-path when the host "
                                                         "cannot hold the state, and --recompute only when nothing fits "
                                                         "without it; one line says which and why), none, optimizer "
                                                         "(ZeRO-Offload), params (ZeRO-3 style) or nvme (as optimizer, with "
                                                         "the Adam moments on disk: --nvme-path); a resumed run keeps its "
                                                         "checkpoint's mode unless this is given"},
    {"--find-max-batch", OPT_BOOL, F(find_max_batch), "off", 0, 0, "train with the largest --batch that fits --gpu-mem "
                                                                  "(by the planner, across modes and recompute with "
                                                                  "--offload auto), and say which"},
    {"--dtype", OPT_DTYPE, F(dtype), "auto", 0, 0, "device storage: auto (on cuda bf16 from sm_80, f16 on sm_70/75; f32 on "
                                                   "host), f32 (host only), bf16, or f16 (with dynamic loss scaling); on the "
                                                   "host backend 16-bit types round where the CUDA ops store them"},
    {"--moments", OPT_MOMENTS, F(moments), "f32", 0, 0, "how the Adam moments are stored on the host: f32 (8 bytes a "
                                                       "parameter), bf16 (4, stochastic rounding seeded by --seed) or "
                                                       "8bit (2, bitsandbytes' blockwise 8-bit); bf16 and 8bit need "
                                                       "--offload optimizer or params (auto picks optimizer), with "
                                                       "or without mpirun; "
                                                       "checkpoints keep the form, and a resume with another "
                                                       "converts, with a warning"},
    {"--upload-window", OPT_WINDOW, F(upload_window), "auto", 0, 0, "convert the master weights into a small pinned "
                                                                   "ring as each upload streams instead of keeping a "
                                                                   "host copy in the device type (2 bytes a parameter "
                                                                   "less; offload optimizer or params, alone): auto (on "
                                                                   "with --moments bf16 or 8bit), on, off, or SIZE (on, "
                                                                   "4 chunks of SIZE; default 16MiB)"},
    {"--loss-scale", OPT_FLOAT, F(loss_scale), "65536", 0, 1e38, "first dynamic loss scale with f16 storage (torch "
                                                               "GradScaler's rule); 0 = no loss scaling"},
    {"--gpu-mem", OPT_BYTES, F(gpu_mem), "0", 0, 0, "hard device memory budget, e.g. 24GiB (0 = what is free)"},
    {"--host-mem", OPT_BYTES, F(host_mem), "0", 0, 0, "cap on the engine's pinned host memory (0 = none)"},
    {"--prefetch", OPT_INT, F(prefetch), "2", 0, 64, "params mode: groups fetched ahead"},
    {"--threads", OPT_INT, F(threads), "0", 0, 1024, "CPU AdamW threads (0 = every core of the chosen NUMA node)"},
    {"--recompute", OPT_BOOL, F(recompute), "off", 0, 0, "keep only block inputs; recompute activations in backward"},
    {"--delayed-update", OPT_BOOL, F(delayed_update), "off", 0, 0, "one-step delayed update (optimizer mode): faster, "
                                                                  "gradients are one step stale"},
    {"--eval-every", OPT_INT, F(eval_every), "0", 0, 100000000, "evaluate on --val-data every N steps (0 = never)"},
    {"--eval-batches", OPT_INT, F(eval_batches), "10", 1, 1000000, "validation batches per evaluation"},
    {"--sample-every", OPT_INT, F(sample_every), "0", 0, 100000000, "print a text sample every N steps (0 = never)"},
    {"--sample-tokens", OPT_INT, F(sample_tokens), "64", 1, 1000000, "tokens to generate per sample"},
    {"--temperature", OPT_FLOAT, F(temperature), "1.0", 0, 100, "sampling temperature (0 = greedy)"},
    {"--top-k", OPT_INT, F(top_k), "40", 0, 65536, "sample among the k likeliest tokens (0 = all)"},
    {"--top-p", OPT_FLOAT, F(top_p), "1.0", 0, 1, "nucleus sampling: after top-k, sample among the likeliest tokens "
                                                   "whose probabilities first sum to p (1 = all)"},
    {"--stop", OPT_STR, F(stop_text), "", 0, 0, "a sample ends where its new text holds this string (cut before it); "
                                                 "it also ends at the model's end-of-sequence token"},
    {"--prompt", OPT_STR, F(prompt), "", 0, 0, "text the samples start from (default: <|endoftext|>)"},
    {"--checkpoint-dir", OPT_STR, F(checkpoint_dir), "", 0, 0, "folder for checkpoints (model.safetensors, config.json, "
                                                               "state.ferry); with --resume, the checkpoint's run "
                                                               "folder unless this is given"},
    {"--checkpoint-every", OPT_INT, F(checkpoint_every), "0", 0, 100000000, "save every N steps, and at the end (0 = only "
                                                                          "at the end; a resumed run keeps its "
                                                                          "checkpoint's unless this is given)"},
    {"--keep-last", OPT_INT, F(keep_last), "3", 0, 100000000, "after each save keep the N newest step folders, delete older ones (0 = keep all)"},
    {"--resume", OPT_STR, F(resume), "", 0, 0, "continue from a checkpoint folder (or its parent: the latest in it) "
                                               "to --steps, with the checkpoint's settings, saving into its run folder"},
    {"--trace", OPT_STR, F(trace), "", 0, 0, "write a memory trace for memprof to this file (each run, a resumed "
                                             "one too, writes it anew)"},
    {"--log", OPT_STR, F(log), "", 0, 0, "append a JSON Lines record of every step to this file (a resumed run "
                                         "goes on with it)"},
    {"--peak-tflops", OPT_FLOAT, F(peak_tflops), "0", 0, 100000, "the GPU's dense bf16 peak for MFU (0 = from its name)"},
    {"--sample", OPT_BOOL, F(sample_only), "off", 0, 0, "generate text from --resume or --init-from and exit"},
    {"--eval-only", OPT_BOOL, F(eval_only), "off", 0, 0, "evaluate the initial (or --resume, --init-from) weights on "
                                                        "--val-data over --eval-batches batches, log and print the "
                                                        "loss, and exit without training"},
    {"--quiet", OPT_BOOL, F(quiet), "off", 0, 0, "no progress lines (errors and the summary only)"},
    {"--max-skips", OPT_INT, F(max_skips), "20", 0, 1000000000, "stop after this many steps in a row skipped for "
                                                               "non-finite gradients (0 = never)"},
    {"--nvme-path", OPT_STR, F(nvme_path), "", 0, 0, "folder on a fast disk for the optimizer state (--offload nvme, params "
                                                     "with the state on disk, or auto when the host cannot hold it)"},
    {"--nvme-master", OPT_BOOL, F(nvme_master), "off", 0, 0, "put the fp32 master weights on disk too (not only the Adam moments)"},
    {"--nvme-window", OPT_BYTES, F(nvme_window), "256MiB", 12288, 0, "pinned host memory the on-disk state streams through"},
    {"--nvme-block", OPT_BYTES, F(nvme_block), "1MiB", 4096, 67108864, "bytes per disk I/O and per checksum (a multiple of 4KiB, at most 64MiB)"},
    {"--nvme-queue-depth", OPT_INT, F(nvme_queue_depth), "16", 1, 1024, "disk I/Os in flight"},
};

#define NSPECS (sizeof specs / sizeof specs[0])
_Static_assert(NSPECS <= 64, "train_options.given has a bit per flag");

/* What a flag's value is, as --help shows it. */
static const char *placeholder(const opt_spec *s)
{
    switch (s->kind) {
    case OPT_BOOL: return "";
    case OPT_INT:
    case OPT_U64: return " N";
    case OPT_FLOAT: return " X";
    case OPT_BYTES: return " SIZE";
    case OPT_OFFLOAD: return " MODE";
    case OPT_BACKEND: return " NAME";
    case OPT_DTYPE: return " TYPE";
    case OPT_MOMENTS: return " FORM";
    case OPT_WINDOW: return " auto|on|off|SIZE";
    case OPT_STR: break;
    }
    if (s->field == F(model))
        return " NAME";
    if (s->field == F(too_long))
        return " MODE";
    return s->field == F(prompt) ? " TEXT" : " PATH";
}

static void print_help(const trainer_program *p)
{
    printf("usage: %s [flags]\n%s\n\n", p->name,
           p->about ? p->about : "Trains GPT-2 on one GPU (or the CPU host backend) with ferry's ZeRO-style offload.");
    for (size_t i = 0; i < NSPECS; i++) {
        const opt_spec *s = &specs[i];
        const char *help = s->field == F(model) && p->model_help       ? p->model_help
                           : s->field == F(init_from) && p->init_help ? p->init_help
                                                                      : s->help;
        char left[48];
        snprintf(left, sizeof left, "%s%s", s->flag, placeholder(s));
        /* A flag whose help says its default (one that depends on others) gets no second one. */
        if (strstr(help, "(default:"))
            printf("  %-24s %s\n", left, help);
        else
            printf("  %-24s %s (default: %s)\n", left, help, *s->def ? s->def : "none");
    }
    printf("\n" UNITS_SIZE_HELP);
    printf("\nExample: %s %s\n", p->name,
           p->example ? p->example
                      : "--data 'data/train_*.bin' --val-data 'data/val_*.bin' --model gpt2 --batch 8 --seq 1024 "
                        "--gpu-mem 24GiB");
}

/* A size, by the rule every program's size flags share (common/units.h). */
static int apply_bytes(const char *prog, const opt_spec *s, const char *text, uint64_t *field)
{
    uint64_t v = 0;
    if (s->min > 0) { /* a size with a range of its own (the disk's block and window) */
        if (units_parse_bytes(text, &v) != FERRY_OK) {
            fprintf(stderr, "%s: %s: %s\n", prog, s->flag, ferry_last_error());
            return 2;
        }
        bool block = s->field == F(nvme_block);
        if (v < (uint64_t)s->min || (s->max > 0 && v > (uint64_t)s->max) || (block && v % 4096)) {
            char lo[32], hi[32], range[96];
            units_fmt_bytes(lo, sizeof lo, (uint64_t)s->min);
            if (s->max > 0)
                snprintf(range, sizeof range, "from %s to %s", lo, units_fmt_bytes(hi, sizeof hi, (uint64_t)s->max));
            else
                snprintf(range, sizeof range, "at least %s", lo);
            fprintf(stderr, "%s: %s '%s' is %llu bytes; give %s%s\n", prog, s->flag, text, (unsigned long long)v,
                    block ? "a multiple of 4KiB " : "", range);
            return 2;
        }
        *field = v;
        return 0;
    }
    /* The rule every program's size flags share (common/units.h). */
    if (units_parse_size_flag(s->flag, text, s->field == F(gpu_mem) ? "what the device has free" : "no cap", &v) !=
        FERRY_OK) {
        fprintf(stderr, "%s: %s\n", prog, ferry_last_error());
        return 2;
    }
    *field = v;
    return 0;
}

ferry_status train_parse_upload_window(const char *text, int *window, uint64_t *chunk_bytes)
{
    static const struct { const char *name; int value; } words[] = {
        {"auto", FERRY_UPLOAD_WINDOW_AUTO}, {"on", FERRY_UPLOAD_WINDOW_ON}, {"off", FERRY_UPLOAD_WINDOW_OFF}};
    *chunk_bytes = 0;
    for (size_t i = 0; text && i < sizeof words / sizeof words[0]; i++)
        if (strcmp(text, words[i].name) == 0) {
            *window = words[i].value;
            return FERRY_OK;
        }
    uint64_t bytes = 0;
    if (!text || units_parse_bytes(text, &bytes) != FERRY_OK || bytes == 0 || bytes % 64 || bytes > ((uint64_t)1 << 30))
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "--upload-window '%s': use auto, on, off, or the size of its chunks (a multiple of 64 bytes "
                       "up to 1GiB, e.g. 16MiB)",
                       text ? text : "(null)");
    *window = FERRY_UPLOAD_WINDOW_ON;
    *chunk_bytes = bytes;
    return FERRY_OK;
}

/* Stores `text` into the field of spec s. 0 on success, 2 with a message. */
static int apply(const opt_spec *s, const char *text, train_options *o)
{
    const char *prog = o->program->name;
    char *field = (char *)o + s->field;
    char *end = NULL;
    errno = 0;
    switch (s->kind) {
    case OPT_STR:
        *(const char **)field = *text ? text : NULL;
        return 0;
    case OPT_BOOL:
        *(bool *)field = strcmp(text, "on") == 0;
        return 0;
    case OPT_INT: {
        long v = strtol(text, &end, 10);
        if (errno || end == text || *end || v < s->min || v > s->max) {
            fprintf(stderr, "%s: %s '%s' is not a whole number in %.0f..%.0f\n", prog, s->flag, text, s->min, s->max);
            return 2;
        }
        *(int *)field = (int)v;
        return 0;
    }
    case OPT_U64: {
        /* Digits only: strtoull would skip blanks and wrap " -1" to 2^64-1. */
        unsigned long long v = strtoull(text, &end, 10);
        if (errno || !isdigit((unsigned char)*text) || *end) {
            fprintf(stderr, "%s: %s '%s' is not a whole number in 0..18446744073709551615 (digits only)\n", prog,
                    s->flag, text);
            return 2;
        }
        *(uint64_t *)field = v;
        return 0;
    }
    case OPT_FLOAT: {
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v) || v < s->min || v > s->max) {
            fprintf(stderr, "%s: %s '%s' is not a number in %g..%g\n", prog, s->flag, text, s->min, s->max);
            return 2;
        }
        if (s->field == F(peak_tflops))
            *(double *)field = v;
        else
            *(float *)field = (float)v;
        return 0;
    }
    case OPT_BYTES:
        return apply_bytes(prog, s, text, (uint64_t *)field);
    case OPT_OFFLOAD:
        if (ferry_offload_parse(text, (ferry_offload *)field) != FERRY_OK) {
            fprintf(stderr, "%s: %s: %s\n", prog, s->flag, ferry_last_error());
            return 2;
        }
        return 0;
    case OPT_MOMENTS:
        if (ferry_moments_parse(text, (ferry_moments *)field) != FERRY_OK) {
            fprintf(stderr, "%s: %s: %s\n", prog, s->flag, ferry_last_error());
            return 2;
        }
        return 0;
    case OPT_WINDOW:
        if (train_parse_upload_window(text, (int *)field, &o->upload_window_chunk_bytes) != FERRY_OK) {
            fprintf(stderr, "%s: %s: %s\n", prog, s->flag, ferry_last_error());
            return 2;
        }
        return 0;
    case OPT_BACKEND:
        if (ferry_backend_parse(text, (ferry_backend_kind *)field) != FERRY_OK) {
            fprintf(stderr, "%s: %s: %s\n", prog, s->flag, ferry_last_error());
            return 2;
        }
        return 0;
    case OPT_DTYPE: {
        ferry_dtype t;
        if (ferry_dtype_parse(text, &t) != FERRY_OK || (t != FERRY_DTYPE_AUTO && t != FERRY_DTYPE_F32 &&
                                                         t != FERRY_DTYPE_BF16 && t != FERRY_DTYPE_F16)) {
            fprintf(stderr, "%s: %s '%s': use auto, f32, bf16 or f16\n", prog, s->flag, text);
            return 2;
        }
        *(ferry_dtype *)field = t;
        return 0;
    }
    }
    return 2;
}

static const opt_spec *find(const char *flag)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (strcmp(specs[i].flag, flag) == 0)
            return &specs[i];
    return NULL;
}

bool train_option_range(const char *flag, double *min, double *max)
{
    const opt_spec *s = find(flag);
    if (!s || (s->kind != OPT_INT && s->kind != OPT_FLOAT))
        return false;
    *min = s->min;
    *max = s->max;
    return true;
}

/* "--checkpoint-dir --quiet": the value is missing and the next flag would
 * become a folder. Only --prompt takes text that may start with "--". */
static bool looks_like_flag(const char *prog, const opt_spec *s, const char *value)
{
    if (strncmp(value, "--", 2) != 0 || s->field == F(prompt))
        return false;
    fprintf(stderr, "%s: %s needs a value, but the next argument is '%s', which looks like a flag; give the "
                    "value (a path that starts with '--' can be written ./%s)\n", prog,
            s->flag, value, value);
    return true;
}

int train_options_refuse_llama(const train_options *o, const char *what)
{
    const char *prog = o->program->name;
    if (o->program->llama)
        return 0;
    fprintf(stderr, "%s: %s a model of the Llama family, which %s does not train: use ferry-train, which takes "
                    "the same flags and trains GPT-2 too\n",
            prog, what, prog);
    return 2;
}

/* Checks that need several flags at once. */
static int check_together(train_options *o)
{
    const trainer_program *p = o->program;
    const char *prog = p->name;
    bool custom = o->layers || o->heads || o->width;
    if (custom && !(o->layers && o->heads && o->width)) {
        fprintf(stderr, "%s: a custom model needs all of --layers, --heads and --width\n", prog);
        return 2;
    }
    if (custom)
        o->model = NULL;
    char what[128];
    snprintf(what, sizeof what, "--model %s is", o->model ? o->model : "");
    if (o->model && llama_is_preset(o->model) && train_options_refuse_llama(o, what) != 0)
        return 2;
    /* --context is GPT-2's: a model of the Llama family (a preset, or one a
     * folder or checkpoint names) has its own, checked once it is read. */
    bool own_context = p->llama && !train_options_given(o, "--context") &&
                       (o->resume || o->init_from || (o->model && llama_is_preset(o->model)));
    if (o->seq > o->context && !own_context) {
        fprintf(stderr, "%s: --seq %d is longer than the model's --context %d\n", prog, o->seq, o->context);
        return 2;
    }
    /* Sizes are products of these: computed in 64 bits, each range-checked. */
    int64_t per_micro = (int64_t)o->batch * o->seq;
    if (per_micro > INT32_MAX) {
        fprintf(stderr, "%s: --batch %d x --seq %d is %lld tokens per micro-batch; at most %d fit (the "
                        "kernels count rows in 32 bits): lower --batch and raise --grad-accum for the same step\n", prog,
                o->batch, o->seq, (long long)per_micro, INT32_MAX);
        return 2;
    }
    if (o->eval_only && (o->sample_only || !o->val_data || o->checkpoint_dir || o->checkpoint_every ||
                         o->find_max_batch)) {
        fprintf(stderr, "%s: --eval-only %s\n", prog,
                o->sample_only      ? "and --sample exclude each other: one evaluates, the other generates text"
                : !o->val_data      ? "needs --val-data, the token shards it evaluates on"
                : o->find_max_batch ? "trains nothing, so --find-max-batch has no training batch to size: give "
                                      "--batch"
                                    : "trains nothing and saves nothing: leave out --checkpoint-dir and "
                                      "--checkpoint-every");
        return 2;
    }
    if (!o->sample_only && !o->eval_only && !o->data) {
        fprintf(stderr, "%s: --data is required (token shards; make them with the tokenize program)\n", prog);
        return 2;
    }
    if (o->sample_only && !o->resume && !o->init_from) {
        fprintf(stderr, "%s: --sample needs a model: --resume DIR or --init-from FILE.safetensors\n", prog);
        return 2;
    }
    if (o->eval_every && !o->val_data) {
        fprintf(stderr, "%s: --eval-every needs --val-data\n", prog);
        return 2;
    }
    if (o->checkpoint_every && !o->checkpoint_dir && (!o->resume || o->sample_only)) {
        fprintf(stderr, "%s: --checkpoint-every needs --checkpoint-dir (or --resume, which saves into the "
                        "checkpoint's run folder)\n", prog);
        return 2;
    }
    if (o->delayed_update && o->offload == FERRY_OFFLOAD_AUTO && !train_options_given(o, "--offload"))
        o->offload = FERRY_OFFLOAD_OPTIMIZER; /* the delayed update runs in optimizer mode only */
    if (o->delayed_update && o->offload != FERRY_OFFLOAD_OPTIMIZER) {
        fprintf(stderr, "%s: --delayed-update needs --offload optimizer\n", prog);
        return 2;
    }
    if (o->moments != FERRY_MOMENTS_F32 && o->offload == FERRY_OFFLOAD_AUTO && !train_options_given(o, "--offload"))
        o->offload = FERRY_OFFLOAD_OPTIMIZER; /* compact moments are the CPU update's */
    if (o->moments != FERRY_MOMENTS_F32 && o->offload != FERRY_OFFLOAD_OPTIMIZER &&
        o->offload != FERRY_OFFLOAD_PARAMS && o->offload != FERRY_OFFLOAD_NVME) {
        fprintf(stderr, "%s: --moments %s needs --offload optimizer, params or nvme (the CPU AdamW reads and writes "
                        "them, in host memory or streamed from the disk); got --offload %s\n",
                prog, ferry_moments_name(o->moments), ferry_offload_name(o->offload));
        return 2;
    }
    if (o->offload == FERRY_OFFLOAD_NVME && !o->nvme_path) {
        fprintf(stderr, "%s: --offload nvme needs --nvme-path, a folder on a fast disk for the optimizer state\n", prog);
        return 2;
    }
    if (o->nvme_path && o->offload != FERRY_OFFLOAD_NVME && o->offload != FERRY_OFFLOAD_PARAMS &&
        o->offload != FERRY_OFFLOAD_AUTO) {
        fprintf(stderr, "%s: --nvme-path puts the state on disk with --offload nvme (or params, or auto), not with "
                        "--offload %s\n", prog, ferry_offload_name(o->offload));
        return 2;
    }
    if (o->init_from && o->resume) {
        fprintf(stderr, "%s: --init-from and --resume exclude each other (a resumed run has its weights)\n", prog);
        return 2;
    }
    if (!o->too_long || (strcmp(o->too_long, "refuse") != 0 && strcmp(o->too_long, "truncate") != 0)) {
        fprintf(stderr, "%s: --too-long '%s' must be 'truncate' or 'refuse'\n", prog, o->too_long ? o->too_long : "");
        return 2;
    }
    if (o->warmup > o->steps)
        o->warmup = o->steps;
    return 0;
}

int train_options_parse(int argc, char **argv, train_options *o)
{
    static const trainer_program train_gpt2 = {.name = "train_gpt2"};
    return train_options_parse_for(&train_gpt2, argc, argv, o);
}

int train_options_parse_for(const trainer_program *p, int argc, char **argv, train_options *o)
{
    const char *prog = p->name;
    memset(o, 0, sizeof *o);
    o->program = p;
    for (size_t i = 0; i < NSPECS; i++)
        if (apply(&specs[i], specs[i].kind == OPT_BOOL ? "off" : specs[i].def, o) != 0)
            return 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(p);
            return 1;
        }
        const opt_spec *s = find(argv[i]);
        if (!s) {
            fprintf(stderr, "%s: unknown flag '%s'; see %s --help\n", prog, argv[i], prog);
            return 2;
        }
        if (s->kind == OPT_BOOL) {
            apply(s, "on", o);
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", prog, s->flag);
            return 2;
        }
        if (looks_like_flag(prog, s, argv[i + 1]) || apply(s, argv[++i], o) != 0)
            return 2;
        o->given |= (uint64_t)1 << (s - specs);
    }
    return check_together(o);
}

bool train_options_given(const train_options *o, const char *flag)
{
    const opt_spec *s = find(flag);
    return s && (o->given >> (s - specs) & 1);
}

/* ---- outputs ---- */

/* Each output path is what it must be (common/fileio.h): a folder, or a file
 * or device that can be written; or missing, under a writable folder (the
 * folders missing between are made when the run starts). */
int train_options_check_outputs(const train_options *o)
{
    const char *prog = o->program ? o->program->name : "train_gpt2";
    ferry_status st = FERRY_OK;
    if (o->checkpoint_dir)
        st = fileio_check_output_dir(o->checkpoint_dir, "--checkpoint-dir");
    if (st == FERRY_OK && o->log)
        st = fileio_check_output(o->log, "--log");
    if (st == FERRY_OK && o->trace)
        st = fileio_check_output(o->trace, "--trace");
    /* The state's folder is not created: it names a disk. The state file
     * is created in it. */
    struct stat sb;
    if (st == FERRY_OK && o->nvme_path && stat(o->nvme_path, &sb) != 0) {
        fprintf(stderr, "%s: --nvme-path '%s': %s; the folder is not created (it names a disk): create it on "
                "a fast disk first, and the state file is made in it\n", prog, o->nvme_path, strerror(errno));
        return 2;
    }
    if (st == FERRY_OK && o->nvme_path && !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "%s: --nvme-path '%s' is %s; give an existing folder on a fast disk: the state file is "
                "created in it\n", prog, o->nvme_path, fileio_type_name(sb.st_mode));
        return 2;
    }
    if (st == FERRY_OK && o->nvme_path)
        st = fileio_check_output_dir(o->nvme_path, "--nvme-path");
    if (st == FERRY_OK)
        return 0;
    fprintf(stderr, "%s: %s\n", prog, ferry_last_error());
    return 2;
}

float train_lr_at(const train_options *o, int step)
{
    if (o->warmup > 0 && step < o->warmup)
        return o->lr * (float)(step + 1) / (float)o->warmup;
    int decay_steps = o->steps - o->warmup;
    if (decay_steps <= 1)
        return o->lr;
    double progress = (double)(step - o->warmup) / (double)(decay_steps - 1);
    double min_lr = (double)o->lr * o->lr_min_frac;
    return (float)(min_lr + 0.5 * (1.0 + cos(M_PI * progress)) * ((double)o->lr - min_lr));
}
