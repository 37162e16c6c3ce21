/* Offload auto on the host backend with a small GPT-2 (6 layers, 64 wide):
 * for device budgets chosen from byte counts worked out here by hand (f32:
 * 20 bytes a parameter on the device in none, 8 in optimizer, params a
 * window of 2 groups' weights and 3 groups' gradients at prefetch 0; 20 on
 * the host in the offload modes, 12 with the moments on disk), auto picks
 * none, optimizer, params, nvme and params with the state on disk; each run
 * is bitwise equal to offload none over several steps; the device peak
 * stays within the budget; the planner (gpt2_plan_auto) predicts the same
 * choice as the engine makes; a budget too small for anything is refused
 * with the sizes named. The line names the host limit it used and how the
 * disk is reached: io_uring, or (FERRY_NVME_IO=threads, as where io_uring
 * is refused) the threads of pread/pwrite with their measured rate, still
 * bitwise equal to offload none; an nvme_path on tmpfs is never a
 * candidate, and the refusal says so. */
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/error.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "models/gpt2_plan.h"
#include "engine_fixture.h"
#include "tap.h"
#include "token_batches.h"

enum { STEPS = 4, B = 2, T = 32, LAYERS = 6, C = 64 };

static gpt2_config small;
static char dir[] = "/tmp/ferry-test-auto-XXXXXX";
static const char *disk_dir = dir; /* nvme_path when a run has one */

typedef struct run_result {
    float loss[STEPS];
    float *weights;
    size_t nweights;
    uint64_t device_peak, budget;
    ferry_offload chosen;
    char reason[3072];
} run_result;

typedef struct run_opts {
    ferry_offload mode;
    uint64_t budget, host;
    bool nvme;
} run_opts;

static void batch_tokens(int step, int micro, int32_t *tokens, int32_t *targets)
{
    static const token_recipe recipe = {91, 131, 0, 5, 1, 0, 89, 4};
    token_batch(&recipe, step, micro, B * T, small.vocab_size, tokens, targets);
}

static uint64_t activations(void) { return efix_acts_bytes(&small, FERRY_DTYPE_F32, B, T, false); }

static ferry_engine_config config(const run_opts *ro)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, ro->mode, FERRY_DTYPE_F32, 2);
    cfg.prefetch_groups = 0;
    cfg.device_budget_bytes = ro->budget;
    cfg.host_budget_bytes = ro->host;
    cfg.auto_activation_bytes = activations();
    if (ro->nvme) {
        cfg.nvme_path = disk_dir;
        cfg.nvme_window_bytes = 96 << 10;
        cfg.nvme_block_bytes = 4096;
    }
    return cfg;
}

/* STEPS steps of one micro-batch each, then the update landed. */
static ferry_status train(efix *f, run_result *out)
{
    ferry_status st = efix_acts(f);
    ferry_step_options o = efix_options(3e-3f, 0.01f, 1.0f);
    for (int step = 0; step < STEPS && st == FERRY_OK; step++) {
        st = efix_micro_batches(f, batch_tokens, step, 0, 1, 1.0f, &out->loss[step], NULL);
        if (st == FERRY_OK) st = ferry_engine_step(f->e, &o, NULL);
    }
    if (st == FERRY_OK)
        st = ferry_engine_synchronize(f->e);
    return st;
}

static ferry_status run(const run_opts *ro, run_result *out)
{
    memset(out, 0, sizeof *out);
    ferry_engine_config cfg = config(ro);
    efix f;
    ferry_status st = efix_engine(&f, &small, &cfg, 1234, B, T, false);
    if (st == FERRY_OK) {
        out->chosen = ferry_engine_offload(f.e);
        snprintf(out->reason, sizeof out->reason, "%s", ferry_engine_auto_reason(f.e));
        st = train(&f, out);
    }
    if (st == FERRY_OK) st = efix_get_weights(&f, &out->weights, &out->nweights);
    if (st == FERRY_OK) {
        ferry_memory_stats ms = efix_memory(&f);
        out->device_peak = ms.device_total_peak_bytes;
        out->budget = ms.device_budget_bytes;
    }
    efix_close(&f);
    return st;
}

static void compare(const run_result *a, const run_result *b, const char *what)
{
    efix_same_losses(a->loss, b->loss, 0, STEPS, "%s: %d losses bitwise equal to none's (last %.7f)", what, STEPS,
                     (double)a->loss[STEPS - 1]);
    efix_same_weights(a->weights, a->nweights, b->weights, b->nweights, what);
}

/* The hand figures: parameters, the largest group, and each mode's bytes. */
typedef struct hand {
    uint64_t n, block, acts;
    uint64_t none, optimizer, params;          /* device, activations included */
    uint64_t host_offload, host_nvme;          /* host */
} hand;

static hand hand_counts(void)
{
    hand h;
    h.block = 12 * C * C + 13 * C;                             /* a block: 4 matrices, biases, 2 layernorms */
    uint64_t emb = (uint64_t)small.padded_vocab_size * C + 64 * C; /* wte + wpe */
    h.n = emb + LAYERS * h.block + 2 * C;                      /* and the final layernorm */
    h.acts = activations();
    h.none = 20 * h.n + h.acts;                                /* weights, grads, master, m, v: 4 bytes each */
    h.optimizer = 8 * h.n + h.acts;                            /* weights, grads */
    /* Params mode at prefetch 0, slots per size class of groups: the
     * embeddings and the final layernorm one weights and one gradients slot
     * each, the blocks 2 weights (the window) and 3 gradients (the drains). */
    h.params = 2 * 4 * emb + (2 + 3) * 4 * h.block + 2 * 4 * (2 * C) + h.acts;
    h.host_offload = 20 * h.n;                                 /* master, m, v, drained grads, upload copy */
    h.host_nvme = 8 * h.n;                                     /* grads and upload copy; the moments on disk */
    return h;
}

/* Within rounding (256-byte granules, a few small buffers) of the hand figure. */
static bool near(uint64_t got, uint64_t want) { return got >= want && got <= want + want / 50 + (64u << 10); }

/* The planner's choice for the same run (the engine's inputs). */
static void check_planner(const run_opts *ro, const run_result *r, const char *what)
{
    gpt2_plan_request rq = {.cfg = &small, .batch = B, .seq = T, .offload = FERRY_OFFLOAD_AUTO, .recompute = false,
                            .prefetch_groups = 0, .micro_batches = 1, .backend = FERRY_BACKEND_HOST,
                            .dtype = FERRY_DTYPE_F32, .ranks = 1, .device_budget = 0};
    gpt2_plan_disk disk = {false, 96 << 10, 4096};
    gpt2_plan_auto_result p;
    ferry_status st = gpt2_plan_auto(&rq, ro->nvme ? &disk : NULL, r->budget, ro->host, &p);
    if (!tap_ok(st == FERRY_OK && p.offload == r->chosen && !p.recompute,
                "%s: the planner predicts the engine's choice (%s)", what,
                st == FERRY_OK ? ferry_offload_name(p.offload) : ferry_last_error()))
        tap_diag("  engine: %s", r->reason);
}

static void test_choices(void)
{
    hand h = hand_counts();
    tap_diag("by hand: %llu parameters, activations %llu B; device none %llu, optimizer %llu, params %llu; host %llu "
             "(nvme %llu)",
             (unsigned long long)h.n, (unsigned long long)h.acts, (unsigned long long)h.none,
             (unsigned long long)h.optimizer, (unsigned long long)h.params, (unsigned long long)h.host_offload,
             (unsigned long long)h.host_nvme);
    run_opts ref_o = {FERRY_OFFLOAD_NONE, 0, 0, false};
    run_result ref;
    if (!tap_ok(run(&ref_o, &ref) == FERRY_OK, "offload none ran: %s", ferry_last_error()))
        return;
    uint64_t host_tight = (h.host_nvme + h.host_offload) / 2; /* holds the state less its moments, not all of it */
    const struct {
        const char *name;
        run_opts o;
        ferry_offload want;
        uint64_t dev_want;
    } cases[] = {
        {"budget for everything", {FERRY_OFFLOAD_AUTO, h.none + h.none / 10, 0, false}, FERRY_OFFLOAD_NONE, h.none},
        {"budget between optimizer and none", {FERRY_OFFLOAD_AUTO, (h.optimizer + h.none) / 2, 0, false},
         FERRY_OFFLOAD_OPTIMIZER, h.optimizer},
        {"budget between params and optimizer", {FERRY_OFFLOAD_AUTO, (h.params + h.optimizer) / 2, 0, false},
         FERRY_OFFLOAD_PARAMS, h.params},
        {"tight budget, params", {FERRY_OFFLOAD_AUTO, h.params + h.params / 20 + (64u << 10), 0, false},
         FERRY_OFFLOAD_PARAMS, h.params},
        {"optimizer's budget, host short, nvme path",
         {FERRY_OFFLOAD_AUTO, (h.optimizer + h.none) / 2, host_tight, true}, FERRY_OFFLOAD_NVME, h.optimizer},
        {"params' budget, host short, nvme path", {FERRY_OFFLOAD_AUTO, (h.params + h.optimizer) / 2, host_tight, true},
         FERRY_OFFLOAD_PARAMS, h.params},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result got;
        if (!tap_ok(run(&cases[i].o, &got) == FERRY_OK, "%s: ran: %s", cases[i].name, ferry_last_error())) {
            free(got.weights);
            continue;
        }
        tap_diag("%s", got.reason);
        TAP_IS_INT(got.chosen, cases[i].want, "%s: auto chose %s (expected %s)", cases[i].name,
                   ferry_offload_name(got.chosen), ferry_offload_name(cases[i].want));
        char want[64];
        snprintf(want, sizeof want, "chose %s", cases[i].o.nvme && cases[i].want == FERRY_OFFLOAD_PARAMS
                                                    ? "params with the state on disk"
                                                    : ferry_offload_name(cases[i].want));
        tap_ok(strstr(got.reason, want) != NULL, "%s: the line says '%s'", cases[i].name, want);
        /* the line's figure for the mode chosen, against the hand count */
        const char *at = strstr(got.reason, "it needs ");
        tap_ok(at != NULL, "%s: the line gives the bytes", cases[i].name);
        tap_ok(got.device_peak <= got.budget, "%s: device peak %llu within the budget %llu", cases[i].name,
               (unsigned long long)got.device_peak, (unsigned long long)got.budget);
        compare(&got, &ref, cases[i].name);
        check_planner(&cases[i].o, &got, cases[i].name);
        free(got.weights);
    }
    free(ref.weights);
}

/* The chooser's own figures against the hand counts. */
static void test_counts(void)
{
    hand h = hand_counts();
    gpt2_model *m = NULL;
    if (gpt2_create(&small, &m) != FERRY_OK)
        return;
    int G = gpt2_num_groups(m);
    size_t numel[LAYERS + 2];
    for (int g = 0; g < G; g++)
        numel[g] = gpt2_group_numel(m, g);
    gpt2_destroy(m);
    engine_auto_request rq = {
        .plan = {.backend = FERRY_BACKEND_HOST,
                 .dtype = FERRY_DTYPE_F32,
                 .offload = FERRY_OFFLOAD_NONE,
                 .prefetch_groups = 0,
                 .micro_batches = 1,
                 .group_numel = numel,
                 .ngroups = G,
                 .disk_window_bytes = 96 << 10,
                 .disk_block_bytes = 4096,
                 .ranks = 1,
                 .embedder_bytes = h.acts},
        .device_budget = 1,
        .host_available = 0,
        .nvme = true,
    };
    engine_auto_choice c;
    ferry_status st = engine_auto_choose(&rq, ENGINE_AUTO_NONE, &c);
    TAP_IS_INT(st, FERRY_ERR_OUT_OF_MEMORY, "a 1-byte budget fits nothing");
    tap_ok(strstr(ferry_last_error(), "no mode fits") && strstr(ferry_last_error(), "raise the device budget"),
           "the error says so and what to do: %s", ferry_last_error());
    tap_ok(near(c.device_bytes[ENGINE_AUTO_NONE], h.none), "none: %llu device bytes, by hand %llu",
           (unsigned long long)c.device_bytes[ENGINE_AUTO_NONE], (unsigned long long)h.none);
    tap_ok(near(c.device_bytes[ENGINE_AUTO_OPTIMIZER], h.optimizer), "optimizer: %llu device bytes, by hand %llu",
           (unsigned long long)c.device_bytes[ENGINE_AUTO_OPTIMIZER], (unsigned long long)h.optimizer);
    tap_ok(near(c.device_bytes[ENGINE_AUTO_PARAMS], h.params), "params: %llu device bytes, by hand %llu",
           (unsigned long long)c.device_bytes[ENGINE_AUTO_PARAMS], (unsigned long long)h.params);
    tap_ok(near(c.host_bytes[ENGINE_AUTO_OPTIMIZER], h.host_offload), "optimizer: %llu host bytes, by hand %llu",
           (unsigned long long)c.host_bytes[ENGINE_AUTO_OPTIMIZER], (unsigned long long)h.host_offload);
    tap_ok(c.host_bytes[ENGINE_AUTO_NVME] >= h.host_nvme && c.host_bytes[ENGINE_AUTO_NVME] < h.host_offload,
           "nvme: %llu host bytes, by hand %llu and the window", (unsigned long long)c.host_bytes[ENGINE_AUTO_NVME],
           (unsigned long long)h.host_nvme);
    /* Under data parallelism a rank holds a slot of each group: whole tiles
     * of 65536 elements, ceil(tiles / N) of them (here 1 a group), 20 bytes
     * each (fp32 master, m, v, gradients summed in fp32, the upload copy). */
    rq.plan.ranks = 4;
    rq.nvme = false;
    st = engine_auto_choose(&rq, ENGINE_AUTO_NONE, &c);
    uint64_t slot_host = (uint64_t)G * 65536 * 20;
    tap_ok(near(c.host_bytes[ENGINE_AUTO_OPTIMIZER], slot_host), "4 ranks: optimizer's host bytes per rank %llu, by "
           "hand %llu", (unsigned long long)c.host_bytes[ENGINE_AUTO_OPTIMIZER], (unsigned long long)slot_host);
    tap_ok(!c.considered[ENGINE_AUTO_NVME], "4 ranks: the NVMe tier is not a candidate");
}

static void test_too_small(void)
{
    run_opts o = {FERRY_OFFLOAD_AUTO, 1 << 20, 0, false}; /* below the activations alone */
    hand h = hand_counts();
    tap_ok(h.acts > (1u << 20), "the activations (%llu B) exceed a 1 MiB budget", (unsigned long long)h.acts);
    run_result r;
    ferry_status st = run(&o, &r);
    TAP_IS_INT(st, FERRY_ERR_OUT_OF_MEMORY, "setup refuses a budget too small for any mode");
    const char *msg = ferry_last_error();
    tap_ok(strstr(msg, "none needs") && strstr(msg, "optimizer") && strstr(msg, "params") && strstr(msg, "1.0 MiB"),
           "the message names every mode's bytes and the budget: %s", msg);
    free(r.weights);
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = FERRY_OFFLOAD_AUTO;
    c.delayed_update = 1;
    ferry_engine *e = NULL;
    TAP_IS_INT(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "auto with the delayed update is refused");
    ferry_offload mode = FERRY_OFFLOAD_NONE;
    TAP_IS_INT(ferry_offload_parse("auto", &mode), FERRY_OK, "\"auto\" parses");
    TAP_IS_INT(mode, FERRY_OFFLOAD_AUTO, "as FERRY_OFFLOAD_AUTO");
    tap_ok(strcmp(ferry_offload_name(FERRY_OFFLOAD_AUTO), "auto") == 0, "and is named auto");
}

static void test_disk_words(void)
{
    hand h = hand_counts();
    run_opts ref_o = {FERRY_OFFLOAD_NONE, 0, 0, false};
    run_result ref, got;
    if (!tap_ok(run(&ref_o, &ref) == FERRY_OK, "offload none ran: %s", ferry_last_error()))
        return;
    uint64_t host_tight = (h.host_nvme + h.host_offload) / 2;
    run_opts o = {FERRY_OFFLOAD_AUTO, (h.optimizer + h.none) / 2, host_tight, true};
    ferry_status st = run(&o, &got);
    TAP_IS_STATUS(st, FERRY_OK, "nvme chosen through io_uring");
    tap_ok(strstr(got.reason, "host memory: host_budget_bytes") && strstr(got.reason, "the disk through io_uring"),
           "the line names the host limit used and io_uring: %s", got.reason);
    free(got.weights);

    setenv("FERRY_NVME_IO", "threads", 1);
    st = run(&o, &got);
    unsetenv("FERRY_NVME_IO");
    TAP_IS_STATUS(st, FERRY_OK, "nvme chosen through the threads of pread/pwrite");
    TAP_IS_INT(got.chosen, FERRY_OFFLOAD_NVME, "auto chose nvme");
    const char *m = strstr(got.reason, "threads of pread/pwrite, measured at ");
    double rate = m ? atof(m + strlen("threads of pread/pwrite, measured at ")) : 0;
    tap_ok(m && rate > 0 && strstr(got.reason, "GB/s"), "the line gives the threads' measured rate (%.2f GB/s): %s",
           rate, got.reason);
    if (st == FERRY_OK)
        compare(&got, &ref, "nvme through the threads");
    free(got.weights);

    struct statfs fs;
    if (statfs("/dev/shm", &fs) == 0 && fs.f_type == 0x01021994) {
        disk_dir = "/dev/shm";
        st = run(&o, &got);
        disk_dir = dir;
        TAP_IS_STATUS(st, FERRY_ERR_OUT_OF_MEMORY, "host short and nvme_path on tmpfs: nothing fits");
        tap_ok(strstr(ferry_last_error(), "/dev/shm") && strstr(ferry_last_error(), "tmpfs") &&
                   strstr(ferry_last_error(), "no candidate"),
               "the disk in memory was no candidate, it says: %s", ferry_last_error());
        free(got.weights);
    } else {
        tap_skip("/dev/shm is not a tmpfs here");
    }
    free(ref.weights);
}

int main(void)
{
    if (!mkdtemp(dir) || gpt2_config_from_fields(LAYERS, 4, C, 500, 512, 64, &small) != FERRY_OK) {
        printf("Bail out! %s\n", ferry_last_error());
        return 1;
    }
    tap_diag("GPT-2 of %d layers, %d wide, vocab 500 padded to 512; B=%d T=%d, %d steps, f32; disk in %s", LAYERS, C, B,
             T, STEPS, dir);
    test_counts();
    test_too_small();
    test_choices();
    test_disk_words();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
    return tap_done();
}
