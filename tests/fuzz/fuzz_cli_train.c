/* libFuzzer harness: train_gpt2's command line (train_options_parse in
 * train/options.c). The input is argv, NUL-separated. */
#include "tests/fuzz/fuzz_util.h"
#include "train/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[FUZZ_MAX_ARGS], *copy;
    int argc = fuzz_argv("train_gpt2", data, size, argv, &copy);
    train_options o;
    int rc = train_options_parse(argc, argv, &o);
    if (rc < 0 || rc > 2)
        abort(); /* documented: 0 go on, 1 help, 2 refused */
    free(copy);
    return 0;
}
