/* The trainer: one policy for every program that trains a language model
 * through the ferry engine (tools/train_gpt2: GPT-2; tools/ferry_train:
 * GPT-2 and the Llama family). Data from llm.c token shards, progress a
 * person reads at a glance, a JSON Lines log, evaluation, samples,
 * checkpoints in Hugging Face layout, exact resume, --find-max-batch,
 * --eval-only, SIGINT/SIGTERM, and ranks under mpirun or srun that agree on
 * every decision. A program is a main that describes itself
 * (trainer_program, train/options.h) and calls trainer_main; the policy is
 * in train/trainer*.c, each file saying what it owns. */
#ifndef FERRY_TRAIN_TRAINER_H
#define FERRY_TRAIN_TRAINER_H

#include "train/options.h"

/* Runs the program described by `prog` (which must outlive the call) on
 * its command line: parses the flags (train/options.h), trains, evaluates,
 * samples or evaluates alone as they say, and returns the process's exit
 * status: 0 done (after --help too), 1 a failure (said on stderr), 2 a
 * flag refused, 128 + the signal after SIGINT or SIGTERM. Call it once per
 * process, from main: it installs signal handlers, joins the world of
 * ranks a launcher started and leaves it before it returns. */
int trainer_main(int argc, char **argv, const trainer_program *prog);

#endif
