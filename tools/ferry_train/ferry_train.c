/* ferry-train: trains GPT-2 or a model of the Llama family (Llama 2 and 3,
 * Mistral, Qwen2) on one GPU (or the host backend) through the ferry
 * engine, with the trainer of train/trainer.h and train_gpt2's flags: a
 * preset of either family (--model gpt2-xl, --model llama3.2-1b), or a
 * Hugging Face folder to start from (--init-from); a Llama run's
 * checkpoints are Hugging Face folders that transformers loads. */
#include "train/trainer.h"

int main(int argc, char **argv)
{
    static const trainer_program ferry_train = {
        .name = "ferry-train",
        .llama = true,
        .about = "Trains GPT-2 or a model of the Llama family (Llama 2 and 3, Mistral, Qwen2) on one GPU (or the CPU "
                 "host backend) with ferry's ZeRO-style offload.",
        .model_help = "model preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl, or dN (GPT-2: N layers, 64N wide); "
                      "smollm2-135m, smollm2-360m, tinyllama-1.1b, llama3.2-1b, llama3.2-3b, llama3.1-8b, "
                      "llama2-7b, mistral-7b, qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, or llama-dN (a Llama 3 "
                      "shape with N layers, 64N wide)",
        .init_help = "start from Hugging Face weights: GPT-2's model.safetensors, or a folder of the Llama family "
                     "(config.json of model_type llama, mistral or qwen2, and model.safetensors or its shards)",
        .example = "--data 'data/train_*.bin' --val-data 'data/val_*.bin' --init-from models/Llama-3.2-1B "
                   "--batch 4 --seq 1024 --gpu-mem 24GiB",
    };
    return trainer_main(argc, argv, &ferry_train);
}
