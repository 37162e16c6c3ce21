/* libFuzzer harness: the safetensors reader (train/safetensors.c). The input
 * is a whole file; whatever it holds, sft_open must accept it with every
 * tensor inside the file or refuse it with a message, and nothing it
 * accepts may be read out of bounds (each tensor's bytes are summed). */
#include "tests/fuzz/fuzz_util.h"
#include "train/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sft_file *f = NULL;
    if (sft_open(fuzz_as_file(data, size), &f) != FERRY_OK)
        return 0;
    unsigned sum = 0;
    for (size_t i = 0; i < sft_count(f); i++) {
        const sft_tensor *t = sft_tensor_at(f, i);
        for (uint64_t b = 0; b < t->nbytes; b++)
            sum += ((const unsigned char *)t->data)[b];
        const sft_tensor *same = NULL;
        if (sft_find(f, t->name) != t || sft_expect(f, t->name, t->dtype, t->ndim, t->shape, &same) != FERRY_OK)
            abort(); /* a tensor the reader listed must be found by its name and shape */
        char shape[256];
        sft_format_shape(t->shape, t->ndim, shape, sizeof shape);
    }
    (void)sft_metadata(f, "format");
    sft_close(f);
    return (int)(sum & 0);
}
