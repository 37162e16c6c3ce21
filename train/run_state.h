/* A training run's checkpoints on disk. Each save is a folder
 * DIR/step_NNNNNNNN holding model.safetensors + config.json (Hugging Face
 * layout) and state.ferry (the engine's master weights, Adam moments and
 * step, plus train_resume below as its user blob). The folder is filled under
 * a temporary name and renamed into place, then DIR/latest (a symlink) is
 * swapped atomically, so a crash mid-save leaves the previous checkpoint as
 * the latest, whole. */
#ifndef FERRY_TRAIN_RUN_STATE_H
#define FERRY_TRAIN_RUN_STATE_H

#include <stdint.h>

#include "ferry.h"
#include "models/gpt2.h"
#include "train/dataloader.h"

#define TRAIN_RESUME_MAGIC 0x46525259544e5552ull /* "RUNTYRRF" */

/* What besides the engine state a resumed run needs to continue exactly. */
typedef struct train_resume {
    uint64_t magic;
    uint32_t version, reserved;
    int64_t step;              /* optimizer steps done */
    tok_loader_pos data;       /* the next training batch */
    uint64_t sample_rng;       /* the sampler's generator */
    gpt2_config model;         /* the model it was trained with */
    int32_t batch, seq, grad_accum, reserved2;
} train_resume;

/* out = dir + "/" + name; FERRY_ERR_INVALID_ARGUMENT if it does not fit. */
ferry_status run_state_join(char *out, size_t cap, const char *dir, const char *name);

/* Saves a checkpoint at `step` into dir (created if missing). */
ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const gpt2_model *m,
                            const train_resume *resume);

/* Resolves --resume PATH: a checkpoint folder itself, or a run folder whose
 * `latest` points at one. Writes the checkpoint folder into out. */
ferry_status run_state_locate(const char *path, char *out, size_t cap);

/* Reads the model config of a checkpoint folder (its config.json). */
ferry_status run_state_config(const char *ckpt_dir, gpt2_config *out);

/* Loads state.ferry into an engine set up for the same model; fills *resume. */
ferry_status run_state_load(const char *ckpt_dir, ferry_engine *e, train_resume *resume);

#endif
