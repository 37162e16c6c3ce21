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

/* The settings a run was trained with, so that a resumed run takes them
 * from its checkpoint and can say which the command line changes. */
typedef struct train_settings {
    int known;             /* 0 in a run state from before they were kept (version 2) */
    uint64_t seed;
    int32_t dtype;         /* the device storage (ferry_dtype, AUTO resolved) */
    int32_t offload;       /* ferry_offload */
    int32_t delayed_update;
    int32_t warmup, steps;
    float lr, lr_min_frac, weight_decay, beta1, beta2, eps, clip;
} train_settings;

/* What besides the engine state a resumed run needs to continue exactly. */
typedef struct train_resume {
    int64_t step;          /* steps done (skipped ones included) */
    int64_t engine_step;   /* the engine's optimizer steps then (skipped ones not); run_state_save fills it */
    tok_loader_pos data;   /* the next training batch (the loader's, stored as it is) */
    uint64_t sample_rng;   /* the sampler's generator */
    gpt2_config model;     /* the model it was trained with */
    int32_t batch, seq, grad_accum;
    char run[33];          /* the run's identity: 32 lowercase hex digits ("" in a version-2 run state) */
    train_settings settings;
} train_resume;

/* The run state as state.ferry stores it (the engine checkpoint's user blob),
 * little-endian, field by field:
 *   magic "FERRYRUN", u32 version (3),
 *   i64 step, i64 engine_step, u64 data.epoch, u64 data.index, u64 data.layout,
 *   u64 sample_rng, i32 n_layer, n_head, n_embd, vocab_size, padded_vocab_size,
 *   max_seq_len, i32 batch, seq, grad_accum,          (version 2 ends here: 96 bytes)
 *   u8 run[16], u64 seed, i32 dtype, offload, delayed_update, warmup, steps,
 *   f32 lr, lr_min_frac, weight_decay, beta1, beta2, eps, clip
 * The engine checksums it. Version 2 is read too (no run, settings unknown). */
#define RUN_STATE_VERSION 3u
#define RUN_STATE_BYTES 168u
#define RUN_STATE_V2_BYTES 96u

/* A new run's identity: 128 random bits as 32 lowercase hex digits. */
void run_state_new_run(char out[33]);

void run_state_encode(const train_resume *r, unsigned char out[RUN_STATE_BYTES]);
/* Decodes and checks every field (a step count that can be, a model GPT-2 can
 * have, a batch that fits it); FERRY_ERR_FORMAT naming the first bad one and
 * `where` (the file) otherwise. The data position is the loader's to check. */
ferry_status run_state_decode(const unsigned char *in, size_t len, const char *where, train_resume *out);

/* FERRY_ERR_FORMAT naming the first field where the model `r` was trained with
 * differs from `cfg` (read from config_json), with both values. */
ferry_status run_state_check_model(const train_resume *r, const gpt2_config *cfg, const char *config_json);

/* out = dir + "/" + name; FERRY_ERR_INVALID_ARGUMENT if it does not fit. */
ferry_status run_state_join(char *out, size_t cap, const char *dir, const char *name);

/* Saves a checkpoint at `step` into dir (created if missing), with the run
 * state `resume` (its engine_step is taken from the engine). */
ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const gpt2_model *m,
                            const train_resume *resume);

/* Takes the run folder for this process: creates dir if missing (with the
 * folders above it, as mkdir -p) and holds an exclusive lock on dir/.lock
 * (a regular file, never followed through a link) until run_state_unlock,
 * so two runs never write one folder. A folder another run holds is
 * FERRY_ERR_STATE naming its process; a dir/latest that is not a symbolic
 * link (a folder, a file) is FERRY_ERR_IO, before any work. Step folders a
 * killed retention left incomplete (lacking config.json, model.safetensors
 * or state.ferry), other than the one latest names, are removed too. Temporaries a killed save left there
 * (.step_N.tmp, .step_N.old) are removed once the lock is held, except a
 * .step_N.old where step_N is missing (a save stopped between moving the
 * earlier step_N aside and renaming the new one in): that is put back as
 * step_N. *fd gets the lock's descriptor. */
ferry_status run_state_lock(const char *dir, int *fd);
/* Releases the lock (fd < 0 is fine). */
void run_state_unlock(int fd);

/* Retention: deletes the step folders of dir beyond the `keep` newest (by
 * step), never the one `latest` points at, and never anything that is not a
 * real folder (a link named like a step, and what it names, are left); keep
 * 0 keeps all. Each is renamed to .step_N.del first, so a kill midway leaves
 * no step folder half deleted. FERRY_ERR_IO naming a folder that could not
 * be removed (the others are still removed). */
ferry_status run_state_prune(const char *dir, int keep);

/* Resolves --resume PATH: a checkpoint folder itself, or a run folder whose
 * `latest` points at one. Writes the checkpoint folder into out. */
ferry_status run_state_locate(const char *path, char *out, size_t cap);

/* Reads the model config of a checkpoint folder (its config.json) and checks
 * it against the model its state.ferry was trained with (read without an
 * engine): an edited config.json is FERRY_ERR_FORMAT naming both values. */
ferry_status run_state_config(const char *ckpt_dir, gpt2_config *out);
/* run_state_config, and the checkpoint's files bound to one run and one
 * step: the run and step in config.json's "ferry" fields, in
 * model.safetensors' metadata and in state.ferry must agree, and a folder
 * named step_N must hold step N; any mismatch is FERRY_ERR_FORMAT naming
 * both values. *resume (may be NULL) gets the run state, read without an
 * engine. */
ferry_status run_state_inspect(const char *ckpt_dir, gpt2_config *out, train_resume *resume);

/* Loads state.ferry into an engine set up for the same model; fills *resume.
 * The engine's restored step count must be the one the run state recorded. */
ferry_status run_state_load(const char *ckpt_dir, ferry_engine *e, train_resume *resume);

#endif
