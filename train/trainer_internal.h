/* What the trainer's files share (train/trainer.c and the trainer_*.c
 * beside it): the state of one run, the figures of one step, and each
 * file's calls the others make. Internal to the trainer: train/trainer.h is
 * what a program includes. Every call runs on the thread that runs
 * trainer_main, but for the signal handler of trainer_ranks.c. */
#ifndef FERRY_TRAIN_TRAINER_INTERNAL_H
#define FERRY_TRAIN_TRAINER_INTERNAL_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"
#include "backend/backend.h"
#include "models/lmodel.h"
#include "train/bpe.h"
#include "train/dataloader.h"
#include "train/options.h"
#include "train/run_state.h"
#include "train/sample.h"
#include "train/tok_find.h"
#include "train/skips.h"

typedef struct trainer {
    const trainer_program *prog; /* whose run it is: messages name it */
    train_options o;
    model_spec spec;      /* the model: a preset, the flags, --init-from's config or the checkpoint's */
    char init_dir[PATH_MAX]; /* --init-from of the Llama family: its Hugging Face folder; "" otherwise */
    lmodel *model;
    ferry_engine *engine;
    lmodel_acts *acts;
    lmodel_acts *eval_acts; /* the validation batch's, when it has fewer rows than --batch; else NULL */
    int eval_batch;       /* rows of a validation batch: --batch, or fewer for a short validation set */
    tok_loader *train, *val;
    tok_tokenizer *tok;
    tok_found tok_found; /* where the tokenizer was read from (its files go with each checkpoint) */
    sampler smp;
    bool kv_refused;      /* a sample's key/value cache did not fit the engine's arena (said once) */
    FILE *log;
    int32_t *inputs, *targets;
    int32_t *positions;   /* each input's position in its example (tok_loader_next_ex), for the model */
    bool masked;          /* the training (or validation) data is instruction data: masked shards */
    int64_t step;         /* steps done */
    tok_loader_pos pos;   /* the data position after the last complete step */
    int cut_micro;        /* a step cut short by a signal: the micro-batches it had done; 0: none */
    int64_t saved_step;   /* the step of the last checkpoint (saved or resumed from); -1: none */
    int lock_fd;          /* the checkpoint folder's lock; -1: none */
    double started_ms;
    int64_t start_step;
    double tokens_done;
    double targets_done;  /* of tokens_done, the targets (masked data: fewer) */
    double val_targets;   /* masked data: the targets the last evaluation's loss is the mean over */
    char ckpt[PATH_MAX];  /* checkpoint folder to resume from, or "" */
    train_resume from;    /* its run state (read before setup) */
    char home[PATH_MAX];  /* the run folder the resumed checkpoint is in: the default --checkpoint-dir */
    bool home_taken;      /* --checkpoint-dir is that folder, not given */
    char changed[1200];   /* what a resumed run changes of its checkpoint's settings, said after its first line */
    char saved_in[PATH_MAX]; /* where the checkpoint of saved_step is */
    const char *failed_output; /* the output whose failure stopped the run (the trace, the log, stdout): the
                                  state in memory is whole then; NULL otherwise */
    char run[33];         /* this run's identity: the checkpoint's when resumed, else new */
    train_skips skips;    /* steps skipped for non-finite gradients */
    /* --sample: the weights alone on a backend of their own, no engine */
    backend *sample_be;
    backend_stream *sample_stream;
    model_resident *resident;
    int rank, world;      /* this process's rank among the `world` that train together (0 of 1 alone) */
    ferry_world_info world_info; /* the launcher's */
    bool stop;            /* several ranks: a rank had a signal by the last agreement (the same on every rank) */
    bool agreed_failure;  /* the failure under way is one every rank reached alike: rank 0 says it, none aborts */
    char trace[PATH_MAX]; /* this rank's memory trace */
} trainer;

/* A step's figures, for its progress line and its log record. */
typedef struct step_figures {
    float loss, lr;
    double grad_norm, step_ms, compute_ms, tokens_per_s, mfu;
    double tokens, targets; /* the step's tokens (every micro-batch of every rank) and, of them, targets */
    int skipped;
    bool too_many_skips; /* the skip limit was reached: ferry_last_error() says so */
    ferry_step_timing timing;
    ferry_memory_stats mem;
    float loss_scale;         /* the step's loss scale; 0: loss scaling off */
    int64_t skipped_steps;    /* steps skipped since the start of training */
} step_figures;

/* Rank 0: the one that prints, logs, saves and locks. */
static inline bool trainer_leader(const trainer *t) { return t->rank == 0; }

/* trainer.c: prints the failure `what: <the last error>` (in a world of
 * several ranks, says which rank and tells the others); returns 1. */
int trainer_fail(trainer *t, const char *what);

/* trainer_ranks.c: signals, and what the ranks agree on. */
void trainer_catch_signals(const trainer_program *p);
const atomic_int *trainer_stop_flag(void);
bool trainer_stopping(const trainer *t);
int trainer_stop_sig(void);
ferry_status trainer_agree(trainer *t, double *extra, size_t n);
ferry_status trainer_agree_after_prepare(trainer *t);
ferry_status trainer_agree_before_token(void *ctx, bool *stop);
ferry_status trainer_agree_batch(const trainer *t, int *B);
void trainer_trace_path(trainer *t);
int trainer_report_stop(const trainer *t, int rc);

/* trainer_model.c: which model, the resumed run's settings, the data. */
ferry_status trainer_choose_model(trainer *t);
int trainer_refuse_family(const trainer *t);
int trainer_tokenizer_files(const trainer *t, const char **files, char (*buf)[PATH_MAX + 32], int cap);
ferry_status trainer_open_tokenizer(trainer *t);
ferry_status trainer_open_loader(trainer *t, const char *pattern, int shuffle, tok_loader **out);
ferry_status trainer_open_validation(trainer *t);
int trainer_eval_batches(const trainer *t);

/* trainer_engine.c: the engine, the weights, sampling's backend, the batch that fits. */
ferry_dtype trainer_planned_dtype(const trainer *t);
ferry_status trainer_setup_engine(trainer *t);
ferry_status trainer_restore(trainer *t);
ferry_status trainer_setup_sampling(trainer *t);
ferry_status trainer_find_max_batch(trainer *t);

/* trainer_loop.c: steps, evaluation, samples, saves. */
ferry_status trainer_train(trainer *t);
ferry_status trainer_eval_only(trainer *t);
ferry_status trainer_print_sample(trainer *t);
ferry_status trainer_save(trainer *t);

/* trainer_report.c: what a person and the log read. */
double trainer_flops_per_token(const trainer *t);
double trainer_peak_tflops(const train_options *o);
void trainer_progress_line(trainer *t, const step_figures *f);
ferry_status trainer_stdout_written(trainer *t);
ferry_status trainer_log_record(trainer *t, const char *kind, const step_figures *f, double val_loss);
ferry_status trainer_log_resume(trainer *t);
ferry_status trainer_say_setup(trainer *t);
void trainer_summary(trainer *t);
void trainer_keep_what_can_be_kept(trainer *t);

/* trainer_folder.c: the run folder and the log file. */
void trainer_default_checkpoint_dir(trainer *t);
ferry_status trainer_open_log(trainer *t);
ferry_status trainer_claim_run_folder(trainer *t);
void trainer_say_resume(const trainer *t);

#endif
