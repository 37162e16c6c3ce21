/* libFuzzer harness: the engine's checkpoint loader (engine/checkpoint.c),
 * through ferry_engine_load on a tiny host-backend engine set up once. The
 * input is a state.ferry; a damaged one must be refused and change nothing,
 * so after every refusal the engine's state must still load from the file
 * it saved at the start.
 * FERRY_FUZZ_WRITE_SEED=PATH: save that engine's state.ferry (with a user
 * blob) to PATH and exit; tests/fuzz/corpus/checkpoint/ holds one. */
#include <ferry.h>

#include "tests/fuzz/fuzz_util.h"

static ferry_engine *engine;
static char saved[] = "/tmp/ferry-fuzz-ckpt-XXXXXX";

static void must(ferry_status st, const char *what)
{
    if (st != FERRY_OK) {
        fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, ferry_last_error());
        abort();
    }
}

static void clean_up(void) { unlink(saved); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.device_budget_bytes = 4 << 20;
    cfg.optimizer_threads = 1;
    must(ferry_engine_create(&cfg, &engine), "create a host engine");
    float a[24], b[8];
    for (int i = 0; i < 24; i++)
        a[i] = 0.25f * (float)(i - 12);
    for (int i = 0; i < 8; i++)
        b[i] = 1.0f / (float)(i + 1);
    int g;
    must(ferry_engine_add_group(engine, "weights", 24, a, NULL, &g), "add group 'weights'");
    must(ferry_engine_add_group(engine, "bias", 8, b, NULL, &g), "add group 'bias'");
    must(ferry_engine_setup(engine), "set up");
    const char blob[] = "ferry fuzz: the trainer's blob";
    const char *seed = getenv("FERRY_FUZZ_WRITE_SEED");
    if (seed) {
        must(ferry_engine_save(engine, seed, blob, sizeof blob), "save the seed");
        exit(0);
    }
    int fd = mkstemp(saved);
    if (fd < 0)
        abort();
    close(fd);
    atexit(clean_up);
    must(ferry_engine_save(engine, saved, blob, sizeof blob), "save the reference state");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char user[64];
    size_t user_bytes = 0;
    if (ferry_engine_load(engine, fuzz_as_file(data, size), user, sizeof user, &user_bytes) == FERRY_OK)
        return 0;
    if (ferry_engine_load(engine, saved, user, sizeof user, &user_bytes) != FERRY_OK)
        abort(); /* a refused file must leave the engine as it was */
    return 0;
}
