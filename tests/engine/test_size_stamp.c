/* The size-stamp promise of ferry.h, through the public API only: a caller
 * compiled against an older, smaller header (modelled here by structs that
 * are prefixes of today's) is accepted — the library reads the fields it
 * has and takes its defaults for the rest, and writes only the fields it has
 * room for — while a size larger than the library knows, or one that holds
 * no field, is refused. The expectations are the same calls made with
 * today's full structs. */
#include <ferry.h>
#include <stddef.h>
#include <string.h>

#include "tap.h"

/* ferry_engine_config as a header that ended after `prefetch_groups` would
 * have it (a released struct never ends in padding: ferry.h's rule). */
typedef struct old_engine_config {
    size_t size;
    ferry_backend_kind backend;
    uint64_t device_budget_bytes;
    uint64_t host_budget_bytes;
    ferry_offload offload;
    int prefetch_groups;
} old_engine_config;

/* ferry_step_options as a header that ended after `beta1` would have it. */
typedef struct old_step_options {
    size_t size;
    float lr, beta1;
} old_step_options;

/* ferry_memory_stats ending after device_reserved_bytes, then a canary. */
typedef struct old_memory_stats {
    size_t size;
    uint64_t device_budget_bytes;
    uint64_t device_reserved_bytes;
} old_memory_stats;

_Static_assert(sizeof(old_engine_config) ==
                   offsetof(ferry_engine_config, prefetch_groups) + sizeof(int),
               "the old config is a prefix of today's, without padding");
_Static_assert(sizeof(old_step_options) == offsetof(ferry_step_options, beta1) + sizeof(float),
               "the old options are a prefix of today's, without padding");
_Static_assert(offsetof(old_memory_stats, device_reserved_bytes) ==
                   offsetof(ferry_memory_stats, device_reserved_bytes),
               "the old stats are a prefix of today's");

enum { N = 4096 };
static float init[N], grads[N];

/* One step of AdamW on one group with the given options; the weights after. */
static ferry_status one_step(ferry_engine *e, const void *opts, float *out)
{
    void *w, *g;
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    if (st == FERRY_OK) st = ferry_engine_fetch(e, 0, FERRY_PHASE_BACKWARD, &w);
    if (st == FERRY_OK) st = ferry_engine_grads(e, 0, &g);
    if (st == FERRY_OK) st = ferry_engine_synchronize(e);
    if (st == FERRY_OK) memcpy(g, grads, sizeof grads);
    if (st == FERRY_OK) st = ferry_engine_release(e, 0, FERRY_PHASE_BACKWARD);
    if (st == FERRY_OK) st = ferry_engine_step(e, opts, NULL);
    if (st == FERRY_OK) st = ferry_engine_get_weights(e, 0, out);
    return st;
}

static ferry_engine *make(const void *cfg)
{
    ferry_engine *e = NULL;
    if (ferry_engine_create(cfg, &e) != FERRY_OK)
        return NULL;
    if (ferry_engine_add_group(e, "w", N, init, NULL, NULL) != FERRY_OK || ferry_engine_setup(e) != FERRY_OK) {
        ferry_engine_destroy(e);
        return NULL;
    }
    return e;
}

static void test_engine_config_and_step(void)
{
    old_engine_config old = {sizeof old, FERRY_BACKEND_HOST, 8 << 20, 0, FERRY_OFFLOAD_PARAMS, 2};
    ferry_engine *e_old = make(&old);
    tap_ok(e_old != NULL, "an engine config from an older header is accepted (%s)", e_old ? "" : ferry_last_error());
    ferry_engine_config full = FERRY_ENGINE_CONFIG_INIT;
    full.backend = FERRY_BACKEND_HOST;
    full.device_budget_bytes = 8 << 20;
    full.offload = FERRY_OFFLOAD_PARAMS;
    ferry_engine *e_full = make(&full);
    if (!e_old || !e_full) {
        ferry_engine_destroy(e_old);
        ferry_engine_destroy(e_full);
        return;
    }
    TAP_IS_INT(ferry_engine_offload(e_old), FERRY_OFFLOAD_PARAMS, "its fields are read");
    tap_ok(strcmp(ferry_engine_describe(e_old), ferry_engine_describe(e_full)) == 0,
           "the fields it lacks take the defaults (optimizer threads, NUMA node, dtype): '%s'",
           ferry_engine_describe(e_old));

    old_step_options so_old = {sizeof so_old, 1e-2f, 0.9f};
    ferry_step_options so_full = FERRY_STEP_OPTIONS_INIT;
    so_full.lr = 1e-2f;
    static float w_old[N], w_full[N];
    TAP_IS_STATUS(one_step(e_old, &so_old, w_old), FERRY_OK, "step options from an older header are accepted");
    TAP_IS_STATUS(one_step(e_full, &so_full, w_full), FERRY_OK, "the same step with today's options");
    tap_ok(memcmp(w_old, w_full, sizeof w_old) == 0 && memcmp(w_old, init, sizeof w_old) != 0,
           "the step took lr from the old options and the defaults for the rest (bitwise equal weights)");

    ferry_step_options too_new[2];
    memcpy(&too_new[0], &so_full, sizeof so_full);
    too_new[0].size = sizeof(ferry_step_options) + 8;
    TAP_IS_STATUS(ferry_engine_step(e_full, &too_new[0], NULL), FERRY_ERR_INVALID_ARGUMENT,
                  "options from a newer header than the library are refused");
    tap_ok(strstr(ferry_last_error(), "newer ferry.h") != NULL, "saying why: %s", ferry_last_error());
    too_new[0].size = offsetof(ferry_step_options, lr) + 2;
    TAP_IS_STATUS(ferry_engine_step(e_full, &too_new[0], NULL), FERRY_ERR_INVALID_ARGUMENT,
                  "a size that is no version's (it cuts a field) is refused");
    old.size = sizeof old + 4; /* the end of optimizer_threads: no version ends there */
    ferry_engine *e_bad = NULL;
    TAP_IS_STATUS(ferry_engine_create((const ferry_engine_config *)(const void *)&old, &e_bad),
                  FERRY_ERR_INVALID_ARGUMENT, "a config size that would end in padding is refused");
    ferry_engine_destroy(e_bad);

    /* An output struct: only the caller's bytes are written. */
    struct {
        old_memory_stats s;
        unsigned char canary[64];
    } out;
    memset(&out, 0xA5, sizeof out);
    out.s.size = sizeof out.s;
    ferry_memory_stats full_stats = FERRY_MEMORY_STATS_INIT;
    TAP_IS_STATUS(ferry_engine_memory_stats(e_old, (ferry_memory_stats *)(void *)&out.s), FERRY_OK,
                  "memory stats into an older, smaller struct");
    TAP_IS_STATUS(ferry_engine_memory_stats(e_old, &full_stats), FERRY_OK, "memory stats into today's struct");
    TAP_IS_INT(out.s.device_budget_bytes, full_stats.device_budget_bytes, "the fields it has are filled");
    TAP_IS_INT(out.s.size, sizeof out.s, "its size stays the caller's");
    int canary_whole = 1;
    for (size_t i = 0; i < sizeof out.canary; i++)
        canary_whole &= out.canary[i] == 0xA5;
    tap_ok(canary_whole, "nothing is written past it");
    ferry_engine_destroy(e_old);
    ferry_engine_destroy(e_full);
}

static void test_system_info(void)
{
    struct {
        size_t size;
        ferry_backend_kind backend;
        int cuda_compiled;
        unsigned char canary[32];
    } old;
    memset(&old, 0x5A, sizeof old);
    old.size = offsetof(ferry_system_info, gpu_count);
    ferry_system_info full = FERRY_SYSTEM_INFO_INIT;
    TAP_IS_STATUS(ferry_system_probe((ferry_system_info *)(void *)&old), FERRY_OK,
                  "system info from an older header is accepted");
    TAP_IS_STATUS(ferry_system_probe(&full), FERRY_OK, "system info into today's struct");
    TAP_IS_INT(old.backend, full.backend, "the backend field is filled");
    TAP_IS_INT(old.cuda_compiled, full.cuda_compiled, "the cuda_compiled field is filled");
    int canary_whole = 1;
    for (size_t i = 0; i < sizeof old.canary; i++)
        canary_whole &= old.canary[i] == 0x5A;
    tap_ok(canary_whole, "nothing is written past the caller's struct");
}

/* A config from the header before the split update (it ended at
 * comm_timeout_s): what lies past its size is never read, so a forced split
 * of 5 groups there (one group: setup would refuse it) is not seen, and the
 * engine takes the default (auto) and steps as today's config with 0. */
static void test_split_fields(void)
{
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.device_update_groups = 5;
    cfg.device_update_warmup = 7;
    ferry_engine *e_full = NULL;
    ferry_status st = ferry_engine_create(&cfg, &e_full);
    if (st == FERRY_OK) st = ferry_engine_add_group(e_full, "w", N, init, NULL, NULL);
    if (st == FERRY_OK) st = ferry_engine_setup(e_full);
    TAP_IS_STATUS(st, FERRY_ERR_INVALID_ARGUMENT, "today's config: a forced split of 5 of 1 group is refused");
    ferry_engine_destroy(e_full);
    cfg.size = offsetof(ferry_engine_config, comm_timeout_s) + sizeof(int);
    ferry_engine *e_old = make(&cfg);
    tap_ok(e_old != NULL, "a config ending at comm_timeout_s is accepted, its tail unread (%s)",
           e_old ? "" : ferry_last_error());
    ferry_engine_config now = FERRY_ENGINE_CONFIG_INIT;
    now.backend = FERRY_BACKEND_HOST;
    now.device_update_groups = 0;
    ferry_engine *e_now = make(&now);
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    static float w_old[N], w_now[N];
    tap_ok(e_old && e_now && one_step(e_old, &so, w_old) == FERRY_OK && one_step(e_now, &so, w_now) == FERRY_OK &&
               memcmp(w_old, w_now, sizeof w_old) == 0,
           "and its step is today's all-CPU step, bitwise");
    ferry_engine_destroy(e_old);
    ferry_engine_destroy(e_now);
}

int main(void)
{
    uint64_t rng = 2026;
    for (int i = 0; i < N; i++) {
        init[i] = (float)(tap_rand_unit(&rng) - 0.5);
        grads[i] = (float)(tap_rand_unit(&rng) - 0.5) * 0.1f;
    }
    test_engine_config_and_step();
    test_system_info();
    test_split_fields();
    return tap_done();
}
