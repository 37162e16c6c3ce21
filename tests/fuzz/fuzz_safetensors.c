/* libFuzzer harness: the safetensors reader (train/safetensors.c). The input
 * is a whole file; whatever it holds, st_open must accept it with every
 * tensor inside the file or refuse it with a message, and nothing it
 * accepts may be read out of bounds (each tensor's bytes are summed). */
#include "tests/fuzz/fuzz_util.h"
#include "train/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file *f = NULL;
    if (st_open(fuzz_as_file(data, size), &f) != FERRY_OK)
        return 0;
    unsigned sum = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_tensor_at(f, i);
        for (uint64_t b = 0; b < t->nbytes; b++)
            sum += ((const unsigned char *)t->data)[b];
        const st_tensor *same = NULL;
        if (st_find(f, t->name) != t || st_expect(f, t->name, t->dtype, t->ndim, t->shape, &same) != FERRY_OK)
            abort(); /* a tensor the reader listed must be found by its name and shape */
        char shape[256];
        st_format_shape(t->shape, t->ndim, shape, sizeof shape);
    }
    (void)st_metadata(f, "format");
    st_close(f);
    return (int)(sum & 0);
}
