/* train_gpt2: trains GPT-2 on one GPU (or the host backend) through the
 * ferry engine, with the trainer of train/trainer.h: llm.c token shards, a
 * JSON Lines log, evaluation, samples, checkpoints in Hugging Face layout,
 * exact resume, data parallelism under mpirun or srun. GPT-2 alone: the
 * Llama family is ferry-train's (tools/ferry_train). */
#include "train/trainer.h"

int main(int argc, char **argv)
{
    static const trainer_program train_gpt2 = {.name = "train_gpt2"};
    return trainer_main(argc, argv, &train_gpt2);
}
