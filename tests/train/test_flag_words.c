/* The library speaks ferry.h's words and train_gpt2 its flags: each library
 * message that says what to set is provoked through the public API (host
 * backend), checked to name no trainer flag, and checked to come out of
 * train/flag_words' table naming only flags train_gpt2 accepts, with no
 * library word left. Every entry of the table is a command line train_gpt2
 * parses. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "train/flag_words.h"
#include "train/options.h"
#include "tap.h"

/* Library words that must not survive the translation. */
static const char *const api_words[] = {"device_budget_bytes", "host_budget_bytes", "FERRY_OFFLOAD_",
                                        "FERRY_BACKEND_", "prefetch_groups", "loss_scale_init"};

static bool has_api_word(const char *s)
{
    for (size_t i = 0; i < sizeof api_words / sizeof api_words[0]; i++)
        if (strstr(s, api_words[i]))
            return true;
    return false;
}

/* The library's message (already in ferry_last_error()) names no flag; the
 * trainer's version holds each of `want` (NULL-terminated) and no library
 * word. */
static void check_message(const char *what, const char *const *want)
{
    char lib[2048], out[2048];
    snprintf(lib, sizeof lib, "%s", ferry_last_error());
    tap_ok(strstr(lib, "--") == NULL && has_api_word(lib), "%s: the library names its config, no flag: %s", what, lib);
    train_flag_words_translate(lib, out, sizeof out);
    bool all = true;
    for (const char *const *w = want; *w; w++)
        all &= strstr(out, *w) != NULL;
    tap_ok(all && !has_api_word(out), "%s: the trainer says its flags: %s", what, out);
    tap_ok(strcmp(train_last_error(), out) == 0, "%s: train_last_error() is the same sentence", what);
}

static ferry_engine *engine(ferry_offload mode, uint64_t device, uint64_t host)
{
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.offload = mode;
    cfg.device_budget_bytes = device;
    cfg.host_budget_bytes = host;
    ferry_engine *e = NULL;
    if (ferry_engine_create(&cfg, &e) != FERRY_OK)
        return NULL;
    return e;
}

/* Adds one group of n zeros and sets up; the status of setup. */
static ferry_status setup_with(ferry_engine *e, size_t n)
{
    float *w = calloc(n, sizeof *w);
    int id = 0;
    ferry_status st = w ? ferry_engine_add_group(e, "layer", n, w, NULL, &id) : FERRY_ERR_OUT_OF_MEMORY;
    free(w);
    return st == FERRY_OK ? ferry_engine_setup(e) : st;
}

static void provoke(void)
{
    /* A budget too small for offload none: both offload modes and the budget. */
    ferry_engine *e = engine(FERRY_OFFLOAD_NONE, 1 << 20, 0);
    TAP_IS_STATUS(e ? setup_with(e, 1 << 20) : FERRY_ERR_BACKEND, FERRY_ERR_OUT_OF_MEMORY,
                  "offload none, 1M parameters in 1 MiB: out of memory");
    check_message("none too small", (const char *const[]){"--offload optimizer", "--offload params", "--gpu-mem", NULL});
    ferry_engine_destroy(e);

    /* Optimizer mode too small: params mode and the budget. */
    e = engine(FERRY_OFFLOAD_OPTIMIZER, 1 << 20, 0);
    TAP_IS_STATUS(e ? setup_with(e, 1 << 20) : FERRY_ERR_BACKEND, FERRY_ERR_OUT_OF_MEMORY,
                  "offload optimizer, 1M parameters in 1 MiB: out of memory");
    check_message("optimizer too small", (const char *const[]){"--offload params", "--gpu-mem", NULL});
    ferry_engine_destroy(e);

    /* Params mode: the one group does not fit. */
    e = engine(FERRY_OFFLOAD_PARAMS, 1 << 20, 0);
    TAP_IS_STATUS(e ? setup_with(e, 1 << 20) : FERRY_ERR_BACKEND, FERRY_ERR_OUT_OF_MEMORY,
                  "offload params, a group of 1M parameters in 1 MiB: out of memory");
    check_message("params too small", (const char *const[]){"--gpu-mem", NULL});
    ferry_engine_destroy(e);

    /* Activations past the budget: batch, recompute, params mode, budget. */
    e = engine(FERRY_OFFLOAD_OPTIMIZER, 4 << 20, 0);
    void *p = NULL;
    TAP_IS_STATUS(e ? setup_with(e, 1024) : FERRY_ERR_BACKEND, FERRY_OK, "a small model in 4 MiB sets up");
    TAP_IS_STATUS(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "block 0 attn", 8 << 20, &p), FERRY_ERR_OUT_OF_MEMORY,
                  "8 MiB of activations in a 4 MiB budget: out of memory");
    check_message("activations", (const char *const[]){"--batch", "--recompute", "--offload params", "--gpu-mem", NULL});
    ferry_engine_destroy(e);

    /* A budget that holds nothing. */
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.device_budget_bytes = 100;
    e = NULL;
    TAP_IS_STATUS(ferry_engine_create(&cfg, &e), FERRY_ERR_INVALID_ARGUMENT, "a 100-byte budget is refused");
    check_message("empty budget", (const char *const[]){"--gpu-mem", NULL});
    ferry_engine_destroy(e);

    /* The host pool's cap. */
    e = engine(FERRY_OFFLOAD_OPTIMIZER, 0, 1 << 20);
    TAP_IS_STATUS(e ? setup_with(e, 1 << 20) : FERRY_ERR_BACKEND, FERRY_ERR_OUT_OF_MEMORY,
                  "1M parameters' host state in a 1 MiB host cap: out of memory");
    check_message("host cap", (const char *const[]){"--host-mem", NULL});
    ferry_engine_destroy(e);

    /* The cuda backend where none can start (a build without CUDA, or no
     * GPU): the host backend is named. On a GPU machine it starts. */
    cfg = (ferry_engine_config)FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_CUDA;
    e = NULL;
    ferry_status st = ferry_engine_create(&cfg, &e);
    if (st == FERRY_ERR_UNSUPPORTED)
        check_message("no cuda", (const char *const[]){"--backend host", NULL});
    else
        tap_ok(st == FERRY_OK, "the cuda backend starts here (a GPU is present): %s", ferry_status_string(st));
    ferry_engine_destroy(e);
}

/* Every entry's example is a command line train_gpt2 takes, and uses the
 * entry's flag. */
static void check_table(void)
{
    size_t n = 0;
    const train_flag_word *w = train_flag_words(&n);
    tap_ok(n >= 10, "the table has %zu entries", n);
    for (size_t i = 0; i < n; i++) {
        char buf[256];
        if (!w[i].example) { /* what to do, not a flag: it names none, and no library word */
            tap_ok(!strstr(w[i].flag, "--") && !strstr(w[i].flag, "data_parallel") && !has_api_word(w[i].flag),
                   "'%s' -> '%s': a phrase naming no flag and no library word", w[i].api, w[i].flag);
            continue;
        }
        snprintf(buf, sizeof buf, "%s", w[i].example);
        char *argv[16] = {"train_gpt2", "--data", "x"};
        int argc = 3;
        for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok && argc < 15; tok = strtok_r(NULL, " ", &save))
            argv[argc++] = tok;
        argv[argc] = NULL;
        train_options o;
        int rc = train_options_parse(argc, argv, &o);
        tap_ok(rc == 0, "'%s' -> '%s': train_gpt2 takes '%s' (parse status %d)", w[i].api, w[i].flag, w[i].example,
               rc);
        const char *flag = strstr(w[i].flag, "--");
        char name[64] = "";
        if (flag)
            sscanf(flag, "%63[-a-z0-9]", name);
        tap_ok(flag && strstr(w[i].example, name), "'%s': the example uses %s", w[i].api, name);
    }
}

/* Whole words only, longest first, and a cut that stays terminated. */
static void check_replacing(void)
{
    char out[256];
    train_flag_words_translate("raise device_budget_bytes; my_device_budget_bytes and device_budget_bytes_x stay",
                               out, sizeof out);
    tap_ok(strcmp(out, "raise --gpu-mem; my_device_budget_bytes and device_budget_bytes_x stay") == 0,
           "only whole words are replaced: %s", out);
    train_flag_words_translate("use offload FERRY_OFFLOAD_PARAMS.", out, sizeof out);
    tap_ok(strcmp(out, "use --offload params.") == 0, "an enum value with its field: %s", out);
    train_flag_words_translate("offload FERRY_OFFLOAD_PARAMSX", out, sizeof out);
    tap_ok(strcmp(out, "offload FERRY_OFFLOAD_PARAMSX") == 0, "a longer name is not a word of the table: %s", out);
    char small[8];
    train_flag_words_translate("raise device_budget_bytes", small, sizeof small);
    tap_ok(strcmp(small, "raise -") == 0, "a cut keeps the string terminated: '%s'", small);
    /* The engine's refusal of the NVMe tier under a launcher (engine/dp.c). */
    train_flag_words_translate("the NVMe tier (offload nvme, or nvme_path) trains alone: with 2 ranks each holds a "
                               "part of the state in host memory instead; leave nvme_path unset, or set "
                               "data_parallel -1", out, sizeof out);
    tap_ok(strstr(out, "leave --nvme-path unset, or start one process (without mpirun or srun)") &&
               !strstr(out, "data_parallel"),
           "the world of ranks is said as the launcher's, not as a setting: %s", out);
    train_flag_words_translate(NULL, out, sizeof out);
    tap_ok(out[0] == '\0', "NULL translates to an empty string");
}

/* Advice the situation has taken is left out, and only then. */
static void check_advice(void)
{
    static const char arena[] = "device budget exhausted; make the activations smaller (a smaller batch, or "
                                "activations recomputed in backward), use offload FERRY_OFFLOAD_PARAMS, or raise "
                                "device_budget_bytes";
    static const char pool[] = "pinned host pool limit exhausted; raise host_budget_bytes, or offload optimizer "
                               "state to NVMe";
    static const struct { const char *msg; train_situation s; const char *want; } cases[] = {
        {arena, {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 4},
         "(a smaller --batch, or --recompute), use --offload params, or raise --gpu-mem"},
        {arena, {FERRY_OFFLOAD_PARAMS, false, false, 1, 4}, "(a smaller --batch, or --recompute), or raise --gpu-mem"},
        {arena, {FERRY_OFFLOAD_PARAMS, true, false, 1, 4}, "(a smaller --batch or --seq), or raise --gpu-mem"},
        {arena, {FERRY_OFFLOAD_PARAMS, true, false, 1, 1}, "(a shorter --seq), or raise --gpu-mem"},
        {arena, {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 1}, "(a shorter --seq, or --recompute), use --offload params, or raise --gpu-mem"},
        {pool, {FERRY_OFFLOAD_OPTIMIZER, false, false, 1, 4},
         "raise --host-mem, or put the optimizer state on disk (--offload nvme --nvme-path DIR)"},
        {pool, {FERRY_OFFLOAD_NVME, false, false, 1, 4}, "raise --host-mem"},
        {pool, {FERRY_OFFLOAD_PARAMS, false, true, 1, 4}, "raise --host-mem"},
        {pool, {FERRY_OFFLOAD_OPTIMIZER, false, false, 2, 4}, "raise --host-mem"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[512];
        train_advice_translate(cases[i].msg, &cases[i].s, out, sizeof out);
        const char *at = strstr(out, cases[i].want);
        tap_ok(at && strlen(at) == strlen(cases[i].want), "offload %s, recompute %d, on disk %d, %d ranks, batch %d: "
               "the advice ends '%s': %s", ferry_offload_name(cases[i].s.offload), cases[i].s.recompute,
               cases[i].s.on_disk, cases[i].s.ranks, cases[i].s.batch, cases[i].want, out);
    }
}

int main(void)
{
    check_replacing();
    check_advice();
    check_table();
    provoke();
    return tap_done();
}
