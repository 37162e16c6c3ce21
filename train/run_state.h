/* A training run's checkpoints on disk. Each save is a folder
 * DIR/step_NNNNNNNN holding the model's Hugging Face folder (GPT-2's
 * model.safetensors + config.json, train/hf_checkpoint.h; the Llama
 * family's config.json + model.safetensors or its shards and their
 * model.safetensors.index.json, train/hf_llama.h) and state.ferry (the
 * engine's master weights, Adam moments and step, plus train_resume below
 * as its user blob). The folder is filled under
 * a temporary name and renamed into place, then DIR/latest (a symlink) is
 * swapped atomically, so a crash mid-save leaves the previous checkpoint as
 * the latest, whole. */
#ifndef FERRY_TRAIN_RUN_STATE_H
#define FERRY_TRAIN_RUN_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "ferry.h"
#include "models/lmodel.h"
#include "train/dataloader.h"
#include "train/safetensors.h"

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
    int32_t checkpoint_every; /* -1 in a run state from before it was kept (version 3) */
} train_settings;

/* What besides the engine state a resumed run needs to continue exactly. */
typedef struct train_resume {
    int64_t step;          /* steps done (skipped ones included) */
    int64_t engine_step;   /* the engine's optimizer steps then (skipped ones not); run_state_save fills it */
    tok_loader_pos data;   /* the next training batch (the loader's, stored as it is) */
    uint64_t sample_rng;   /* the sampler's generator */
    model_spec model;      /* the model it was trained with (of the Llama family: its shape alone, the rest of
                              its config is config.json's) */
    int32_t batch, seq, grad_accum;
    char run[33];          /* the run's identity: 32 lowercase hex digits ("" in a version-2 run state) */
    train_settings settings;
    /* The tensors' bytes of the model.safetensors saved beside it (run_state_save
     * fills it); weights_known is 0 in a run state from before it was kept. */
    int weights_known;
    sft_checksum weights;
} train_resume;

/* The run state as state.ferry stores it (the engine checkpoint's user blob),
 * little-endian, field by field:
 *   magic "FERRYRUN", u32 version (4 or 5),
 *   i64 step, i64 engine_step, u64 data.epoch, u64 data.index, u64 data.layout,
 *   u64 sample_rng, i32 n_layer, n_head, n_embd, vocab_size, padded_vocab_size,
 *   max_seq_len, i32 batch, seq, grad_accum,          (version 2 ends here: 96 bytes)
 *   u8 run[16], u64 seed, i32 dtype, offload, delayed_update, warmup, steps,
 *   f32 lr, lr_min_frac, weight_decay, beta1, beta2, eps, clip,
 *                                                     (version 3 ends here: 168 bytes)
 *   u64 weights.bytes, u32 weights.crc32c, i32 checkpoint_every
 *                                                     (version 4 ends here: 184 bytes)
 *   u32 family (0 GPT-2, 1 the Llama family), u8 model_type[16] (NUL-padded),
 *   i32 n_kv_head, head_dim, intermediate_size, qkv_bias, tied_embeddings
 *                                                     (version 5: 224 bytes)
 * The model's six fields after sample_rng are its layers, heads, width,
 * vocabulary, padded vocabulary and context in either family. A GPT-2
 * run's state is written as version 4 (what version 5 adds says nothing
 * of GPT-2, and earlier ferry reads it); a Llama-family run's as version 5,
 * whose shape fields make a resume with another model refused. The engine
 * checksums it. Versions 2 (no run, settings unknown) and 3 (no weights
 * checksum, --checkpoint-every unknown) are read too, as GPT-2's. */
#define RUN_STATE_VERSION 5u
#define RUN_STATE_V5_BYTES 224u
#define RUN_STATE_BYTES 184u /* version 4: a GPT-2 run's */
#define RUN_STATE_V3_BYTES 168u
#define RUN_STATE_V2_BYTES 96u
#define RUN_STATE_MAX_BYTES RUN_STATE_V5_BYTES

/* A new run's identity: 128 random bits as 32 lowercase hex digits. */
void run_state_new_run(char out[33]);

/* Writes the run state into out, which has room for RUN_STATE_MAX_BYTES;
 * returns the bytes written (RUN_STATE_BYTES for GPT-2, RUN_STATE_V5_BYTES
 * for the Llama family). */
size_t run_state_encode(const train_resume *r, unsigned char *out);
/* Decodes and checks every field (a step count that can be, a model its
 * family can have, a batch that fits it); FERRY_ERR_FORMAT naming the first
 * bad one and `where` (the file) otherwise. The data position is the
 * loader's to check. */
ferry_status run_state_decode(const unsigned char *in, size_t len, const char *where, train_resume *out);

/* FERRY_ERR_FORMAT naming the first field where the model `r` was trained with
 * differs from `spec` (read from config_json), with both values: the family,
 * then the shape (for the Llama family, the fields version 5 records). */
ferry_status run_state_check_model(const train_resume *r, const model_spec *spec, const char *config_json);

/* The family a Hugging Face folder's config.json says (model_type "llama",
 * "mistral" or "qwen2": MODEL_FAMILY_LLAMA); GPT-2 for anything else, a
 * missing or unreadable file too, whose reader then says what is wrong. */
model_family run_state_folder_family(const char *dir);

/* out = dir + "/" + name; FERRY_ERR_INVALID_ARGUMENT if it does not fit. */
ferry_status run_state_join(char *out, size_t cap, const char *dir, const char *name);

/* Saves a checkpoint at `step` into dir (created if missing), with the run
 * state `resume` (its engine_step is taken from the engine, its weights
 * checksum from the model.safetensors written). A step folder of that name
 * that belongs to another run (or whose run cannot be told) is refused and
 * left as it is. On a failure the message says what the folder still holds
 * (its latest checkpoint, or none). */
ferry_status run_state_save(const char *dir, int64_t step, ferry_engine *e, const lmodel *m,
                            const train_resume *resume);
/* The same, with files[0..nfiles) copied into the step folder under their
 * own names before it is put in place (the tokenizer the run was trained
 * with: a checkpoint then samples from any folder). A file that cannot be
 * read fails the save as any other part would. */
ferry_status run_state_save_files(const char *dir, int64_t step, ferry_engine *e, const lmodel *m,
                                  const train_resume *resume, const char *const *files, int nfiles);

/* Takes the run folder for this process: creates dir if missing (with the
 * folders above it, as mkdir -p) and holds an exclusive lock on dir/.lock
 * (a regular file, never followed through a link) until run_state_unlock,
 * so two runs never write one folder. A folder another run holds is
 * FERRY_ERR_STATE naming its process; a dir/latest that is not a symbolic
 * link (a folder, a file) is FERRY_ERR_IO, before any work. Nothing in the
 * folder is changed: run_state_claim does that once the run is known. *fd
 * gets the lock's descriptor. */
ferry_status run_state_lock(const char *dir, int *fd);
/* Releases the lock (fd < 0 is fine). */
void run_state_unlock(int fd);

/* The run a step folder belongs to, from its state.ferry (else its
 * config.json, of either family): *run gets its identity ("" for a checkpoint that recorded
 * none). FERRY_ERR_FORMAT or FERRY_ERR_IO when neither file tells. */
ferry_status run_state_folder_run(const char *step_dir, char run[33]);

/* With the lock held, before anything in dir is written: checks that every
 * step folder in dir is this run's (`run`, the identity of the run being
 * continued, "" for a checkpoint that recorded none) or, for a new run
 * (resumed false), that dir holds none at all, `latest` or not (a copy
 * that dropped the link still holds another run's checkpoints); a folder of
 * another run, or a whole one whose run cannot be told, is FERRY_ERR_STATE
 * naming it and its run, and nothing is changed. Then removes what killed
 * saves and retention left: temporaries (.step_N.tmp, .step_N.old, except a
 * .step_N.old where step_N is missing, which is put back as step_N: a save
 * stopped between moving the earlier step_N aside and renaming the new one
 * in; .step_N.del) and step folders lacking config.json, state.ferry or
 * their weights (model.safetensors, or the index of the shards), other than
 * the one latest names. */
ferry_status run_state_claim(const char *dir, const char *run, bool resumed);

/* Retention: deletes the step folders of dir beyond the `keep` newest (by
 * step), never the one `latest` points at, never one that is not run
 * `run`'s (it is left, and named in the error), and never anything that is
 * not a real folder (a link named like a step, and what it names, are
 * left); keep 0 keeps all. Each is renamed to .step_N.del first, so a kill
 * midway leaves no step folder half deleted. FERRY_ERR_IO naming a folder
 * that could not be removed, FERRY_ERR_STATE one of another run (the
 * others are still removed). */
ferry_status run_state_prune(const char *dir, int keep, const char *run);

/* The run folder a checkpoint belongs to, where a resumed run saves unless
 * told otherwise: `resume` itself when it is a run folder (it has a
 * `latest`), else the folder above `resume` when `resume` is a step folder
 * (step_N, or a run folder's latest). FERRY_ERR_INVALID_ARGUMENT when it is
 * neither (a checkpoint folder copied elsewhere: no run folder to save to). */
ferry_status run_state_run_folder(const char *resume, char *out, size_t cap);

/* Resolves --resume PATH: a checkpoint folder itself, or a run folder whose
 * `latest` points at one. Writes the checkpoint folder into out. */
ferry_status run_state_locate(const char *path, char *out, size_t cap);

/* Reads the model config of a checkpoint folder (its config.json, of the
 * family it names) and checks it against the model its state.ferry was
 * trained with (read without an engine): an edited config.json is
 * FERRY_ERR_FORMAT naming both values. */
ferry_status run_state_config(const char *ckpt_dir, model_spec *out);
/* run_state_config, and the checkpoint's files bound to one run and one
 * step: the run and step in config.json's "ferry" fields, in the weights
 * files' metadata and in state.ferry must agree, a folder named step_N
 * must hold step N, and the weights' tensor data must be what was saved
 * with state.ferry (its length and CRC-32C over the files in order, where
 * the run state records them); the Llama family's weights are opened as
 * hf_llama_open checks them (every tensor, its shape and type); any
 * mismatch is FERRY_ERR_FORMAT naming both values.
 * *resume (may be NULL) gets the run state, read without an engine. In a
 * joined world of several ranks it is collective: each rank reads 1/N of
 * the weights' bytes, and the ranks' CRCs combine into the file's. */
ferry_status run_state_inspect(const char *ckpt_dir, model_spec *out, train_resume *resume);

/* For weights outside a checkpoint read (--init-from): `weights` is GPT-2's
 * safetensors FILE, or a Llama-family folder. When a state.ferry of
 * ferry's lies beside the file (in the folder) and records the checksum of
 * the weights saved with it, their tensor data must match it
 * (FERRY_ERR_FORMAT otherwise); weights with no such state.ferry beside
 * them pass. */
ferry_status run_state_check_weights(const char *weights);

/* Loads state.ferry into an engine set up for the same model; fills *resume.
 * The engine's restored step count must be the one the run state recorded. */
ferry_status run_state_load(const char *ckpt_dir, ferry_engine *e, train_resume *resume);

#endif
