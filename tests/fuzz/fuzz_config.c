/* libFuzzer harness: a checkpoint's config.json (hf_read_config in
 * train/hf_checkpoint.c). Whatever the file holds, the result is a checked
 * GPT-2 config or a refusal with a message. */
#include "tests/fuzz/fuzz_util.h"
#include "train/hf_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gpt2_config c;
    if (hf_read_config(fuzz_as_file(data, size), &c) == FERRY_OK &&
        (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.n_embd % c.n_head || c.vocab_size < 1))
        abort(); /* accepted means usable */
    return 0;
}
