/* tools/bench/engine/bench_engine.c: how well the engine hides its offload.
 * Trains a model of either family, GPT-2 or the Llama family (models/lmodel.h),
 * through the engine in each offload mode and, per
 * mode, measures in the same run:
 *   - the step time of ordinary, pipelined training (median after warm-up),
 *     hence tokens/s and the ratio to mode 'none';
 *   - the compute alone: forward + backward with everything else finished
 *     before it and a synchronize after it (so the CPU update cannot overlap);
 *   - the update alone: ferry_engine_step + synchronize right after that
 *     (norm, AdamW, upload), beside the engine's own timing.optimizer_ms;
 * and reports the step against max(compute, update), the floor that perfect
 * overlap of the two would reach, and against bwd + max(fwd, update), the floor of
 * the exact schedule. The modes' rounds alternate so that the machine's load
 * falls on all alike. It does not own the engine, the model or the ops; it
 * only drives them. --find-max-batch searches the largest batch the device
 * budget holds (doubling, then bisecting, until the engine reports
 * FERRY_ERR_OUT_OF_MEMORY) and measures that batch; --confirm-max-batch
 * takes --batch as the largest (from memprof plan, say), measures it, then
 * requires one step at --batch + 1 to run out of device memory cleanly.
 * --card SIZE emulates a card of SIZE on a larger one: the device budget is
 * SIZE less what the CUDA context and cuBLASLt take of this card (measured
 * by an engine opened for the purpose); with --confirm-max-batch and no
 * --batch, the batch confirmed is the planner's largest at that budget
 * (models/gpt2_plan.h). After each mode it prints what a card of SIZE would
 * have held: the arena's reserve plus everything else on the device.
 *
 * It prints as it goes: the time each engine took to set up and to finish
 * its first step, each measured round, each mode's result, then the table.
 * MFU counts the model's flops (6 N + 12 L C T per token, recompute not
 * counted) against --peak-tflops (the kernel lab's measured cuBLASLt rate,
 * say); without it only the model TFLOP/s is printed.
 *
 * The backend asked for is the one that runs: --backend cuda on a machine
 * where CUDA cannot start is an error, never a run on the host.
 * Exit status: 0 when every mode ran (and --confirm-max-batch held); 1 when
 * one failed, or batch + 1 fitted; 2 on a bad command line; 77 when
 * --backend cuda was asked for and there is no GPU (no driver, no device);
 * a GPU that is there but cannot start is 1. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/fileio.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/units.h"
#include "engine/intree.h"
#include "models/gpt2_plan.h"
#include "models/lmodel.h"
#include "models/model_engine.h"
#include "train/flag_words.h"

#define MAX_STEPS 256
#define MAX_BATCH 65536
#define MAX_BUDGETS 4
#define MAX_SPLITS 4
#define MAX_RUNS (3 + MAX_BUDGETS + 1 + MAX_SPLITS + 2)
/* A run's device_update_groups left to the engine (its default, auto). */
#define SPLIT_DEFAULT (-1000)

typedef struct bench_opts {
    const char *model;
    int B, T, steps, warmup, threads;
    ferry_offload modes[3];
    int nmodes;
    ferry_backend_kind backend;
    uint64_t gpu_mem;
    double peak_tflops; /* for MFU; 0 = not given */
    bool recompute, find_max, delayed, confirm_max;
    double lr;          /* AdamW's learning rate; default 1e-4 */
    uint64_t card; /* --card: the card emulated; 0 = none */
    /* --params-budgets: params mode again for each, with a device budget
     * that leaves residency that percent of the model's weights */
    int budget_pct[MAX_BUDGETS];
    int nbudgets;
    /* what runs: the modes, then the params budgets (main fills these) */
    ferry_offload run_mode[MAX_RUNS];
    uint64_t run_budget[MAX_RUNS];
    int run_pct[MAX_RUNS]; /* 0: a plain mode */
    int nruns;
    /* --split-groups: optimizer mode again with each device_update_groups,
     * and once with 0 (every update on the CPU), the peer they are put
     * against; run_split: each run's (SPLIT_DEFAULT: the engine's default) */
    int splits[MAX_SPLITS];
    int nsplits;
    int run_split[MAX_RUNS];
    /* --card with --confirm-max-batch and no --batch: the planner's largest
     * batch of each mode (by the index in modes), and each run's batch */
    int mode_B[3];
    int run_B[MAX_RUNS];
    /* --moments, --dtype: the engine's; --upload-window-both: optimizer and
     * params mode with the upload window off (the plain runs) and on */
    ferry_moments moments;
    ferry_dtype dtype;
    bool window_both;
    int run_window[MAX_RUNS]; /* each run's upload_window */
} bench_opts;

/* One engine with the model on it, and activations for one batch shape. */
typedef struct bench_run {
    const bench_opts *o;
    int run; /* its index in o's runs */
    ferry_offload mode;
    lmodel *m;
    ferry_engine *e;
    lmodel_acts *act;
    model_allocator alloc;
    model_hooks hooks;
    backend_stream *s;
    int32_t *tokens, *targets;
    int B;
    float first_loss, last_loss;
    double started_ms; /* before ferry_engine_create */
    int64_t skips;     /* steps the engine skipped (non-finite gradients) */
    int pct;           /* --params-budgets: the percent of the weights the budget holds; 0 otherwise */
    int split;         /* --split-groups: the run's device_update_groups; SPLIT_DEFAULT otherwise */
    int window;        /* the run's upload_window */
} bench_run;

/* What one mode measured (medians, milliseconds). */
typedef struct bench_result {
    ferry_offload mode;
    int B;
    double step, fwd, compute, update, engine_opt, wait_opt, wait_xfer, tok_s;
    double dev_peak, host_peak;
    float first_loss, last_loss;
    int64_t skips;
    int pct;            /* as bench_run's */
    double h2d, fetched; /* bytes up in a step, and of them what fetches uploaded (medians) */
    int split;           /* as bench_run's */
    int split_chosen;    /* groups updated on the device at the end */
    int window;          /* as bench_run's */
} bench_result;

/* A run's name: the mode, params mode's budget when one was set, and the
 * split update's groups when --split-groups set them. */
static const char *run_label(ferry_offload mode, int pct, int split, int window, char *buf, size_t cap)
{
    if (window == FERRY_UPLOAD_WINDOW_ON || window == FERRY_UPLOAD_WINDOW_OFF) {
        snprintf(buf, cap, "%s/%s", ferry_offload_name(mode), window == FERRY_UPLOAD_WINDOW_ON ? "window" : "copy");
        return buf;
    }
    if (pct > 0)
        snprintf(buf, cap, "%s@%d%%", ferry_offload_name(mode), pct);
    else if (split == 0)
        snprintf(buf, cap, "%s/cpu", ferry_offload_name(mode));
    else if (split == -1)
        snprintf(buf, cap, "%s/split=auto", ferry_offload_name(mode));
    else if (split != SPLIT_DEFAULT)
        snprintf(buf, cap, "%s/split=%d", ferry_offload_name(mode), split);
    else
        snprintf(buf, cap, "%s", ferry_offload_name(mode));
    return buf;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static ferry_step_options step_options(const bench_opts *o)
{
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.lr = (float)o->lr;
    so.weight_decay = 0.1f;
    so.max_grad_norm = 1.0f;
    return so;
}

/* ---- setting up ---- */

static void run_close(bench_run *r)
{
    if (r->e)
        ferry_engine_synchronize(r->e);
    lmodel_acts_destroy(r->act);
    ferry_engine_destroy(r->e);
    free(r->tokens);
    free(r->targets);
    r->act = NULL;
    r->e = NULL;
    r->tokens = r->targets = NULL;
}

/* The device's storage type the engine will pick: bf16 (or f16, the same
 * bytes) on cuda, f32 on the host backend. */
static ferry_dtype device_dtype(ferry_backend_kind kind)
{
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (kind == FERRY_BACKEND_AUTO)
        kind = ferry_system_probe(&info) == FERRY_OK ? info.backend : FERRY_BACKEND_HOST;
    return kind == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
}

static ferry_status run_open(const bench_opts *o, int run, lmodel *m, bench_run *r)
{
    ferry_offload mode = o->run_mode[run];
    memset(r, 0, sizeof *r);
    r->o = o;
    r->run = run;
    r->mode = mode;
    r->m = m;
    r->pct = o->run_pct[run];
    r->split = o->run_split[run];
    r->window = o->run_window[run];
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.moments = o->moments;
    cfg.dtype = o->dtype;
    cfg.upload_window = r->window;
    if (r->split != SPLIT_DEFAULT)
        cfg.device_update_groups = r->split;
    cfg.backend = o->backend;
    cfg.offload = mode;
    cfg.device_budget_bytes = o->run_budget[run];
    cfg.optimizer_threads = o->threads;
    cfg.delayed_update = o->delayed && mode == FERRY_OFFLOAD_OPTIMIZER;
    /* The batch measured is known (not searched): its activations are
     * declared, so they lie in the engine's static memory plan, as
     * train_gpt2's do. --find-max-batch tries batches on one engine, whose
     * activations then go to the arena's dynamic region. */
    if (!o->find_max && o->run_B[run] > 0)
        cfg.auto_activation_bytes =
            lmodel_acts_bytes(m, device_dtype(o->backend), o->run_B[run], o->T, o->recompute);
    r->started_ms = clock_now_ms();
    ferry_status st = ferry_engine_create(&cfg, &r->e);
    if (st == FERRY_OK && ferry_engine_backend(r->e) != o->backend && o->backend != FERRY_BACKEND_AUTO)
        st = err_set(FERRY_ERR_BACKEND, "the engine opened the %s backend, not the %s one asked for",
                     ferry_backend_name(ferry_engine_backend(r->e)), ferry_backend_name(o->backend));
    model_desc desc = lmodel_desc(m);
    if (st == FERRY_OK) st = model_engine_add_groups(&desc, r->e, 1337, NULL);
    double added = clock_now_ms();
    if (st == FERRY_OK) st = ferry_engine_setup(r->e);
    if (st != FERRY_OK)
        return st;
    printf("offload %s: engine ready %.2f s after creation (parameters drawn and added %.2f s, "
           "ferry_engine_setup %.2f s)\n",
           ferry_offload_name(mode), (clock_now_ms() - r->started_ms) / 1e3, (added - r->started_ms) / 1e3,
           (clock_now_ms() - added) / 1e3);
    fflush(stdout);
    r->alloc = model_engine_allocator(r->e);
    r->hooks = model_engine_hooks(r->e);
    r->s = engine_embed_stream(r->e);
    return FERRY_OK;
}

/* Activations and a fixed batch of tokens (the same every step, so the loss
 * visibly falls: a sanity check that training happens). */
static ferry_status run_set_batch(bench_run *r, int B)
{
    uint64_t V = (uint64_t)lmodel_vocab(r->m);
    int T = r->o->T;
    lmodel_acts_destroy(r->act);
    r->act = NULL;
    free(r->tokens);
    free(r->targets);
    r->tokens = malloc((size_t)B * (size_t)T * sizeof(int32_t));
    r->targets = malloc((size_t)B * (size_t)T * sizeof(int32_t));
    if (!r->tokens || !r->targets)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "bench_engine: no host memory for %d x %d tokens", B, T);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < (size_t)B * (size_t)T + 1; i++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int32_t tok = (int32_t)(rng % V);
        if (i < (size_t)B * (size_t)T) r->tokens[i] = tok;
        if (i > 0) r->targets[i - 1] = tok;
    }
    r->B = B;
    return lmodel_acts_create(r->m, engine_embed_backend(r->e), B, T, r->o->recompute, &r->alloc, &r->act);
}

/* Forward and backward of one micro-batch; waits for the compute stream. */
static ferry_status run_fwd_bwd(bench_run *r, float *loss)
{
    ferry_status st = ferry_engine_begin_micro_batch(r->e, 0, 1);
    if (st == FERRY_OK) st = lmodel_forward(r->m, r->act, &r->hooks, r->s, r->tokens, r->targets, true);
    if (st == FERRY_OK) st = lmodel_backward(r->m, r->act, &r->hooks, r->s, ferry_engine_loss_scale(r->e));
    if (st == FERRY_OK) st = lmodel_loss(r->act, r->s, loss);
    return st;
}

/* ---- measuring ---- */

/* One round's figures, milliseconds. */
typedef struct bench_sample {
    double step, fwd, compute, update, eng_opt, wait_opt, wait_xfer;
    double h2d, fetched; /* the timed step's bytes up, and what fetches uploaded */
} bench_sample;

/* The engine's step, counting the steps it skips. */
static ferry_status engine_step(bench_run *r)
{
    ferry_step_options so = step_options(r->o);
    ferry_step_report rep = FERRY_STEP_REPORT_INIT;
    ferry_status st = ferry_engine_step(r->e, &so, &rep);
    if (st == FERRY_OK)
        r->skips += rep.skipped ? 1 : 0;
    return st;
}

static ferry_status pipelined_step(bench_run *r, float *loss)
{
    ferry_status st = run_fwd_bwd(r, loss);
    return st == FERRY_OK ? engine_step(r) : st;
}

/* A round: two ordinary steps, the second timed from the end of the first
 * (the update of the first overlaps the second's forward, as in training),
 * then one step in parts, each alone between synchronizes. */
static ferry_status measure_round(bench_run *r, bench_sample *out)
{
    float loss = 0;
    ferry_status st = pipelined_step(r, &loss);
    double t0 = clock_now_ms();
    if (st == FERRY_OK) st = pipelined_step(r, &loss);
    if (st != FERRY_OK)
        return st;
    out->step = clock_now_ms() - t0;
    ferry_step_timing tm = FERRY_STEP_TIMING_INIT;
    ferry_engine_step_timing(r->e, &tm);
    out->eng_opt = tm.optimizer_ms;
    out->wait_opt = tm.compute_wait_optimizer_ms;
    out->wait_xfer = tm.compute_wait_transfer_ms;
    out->h2d = tm.transfer_h2d_bytes;
    out->fetched = tm.fetch_h2d_bytes;

    if ((st = ferry_engine_synchronize(r->e)) != FERRY_OK)
        return st;
    double a = clock_now_ms();
    st = ferry_engine_begin_micro_batch(r->e, 0, 1);
    if (st == FERRY_OK) st = lmodel_forward(r->m, r->act, &r->hooks, r->s, r->tokens, r->targets, true);
    if (st == FERRY_OK) st = backend_stream_synchronize(r->s);
    double b = clock_now_ms();
    if (st == FERRY_OK) st = lmodel_backward(r->m, r->act, &r->hooks, r->s, ferry_engine_loss_scale(r->e));
    if (st == FERRY_OK) st = lmodel_loss(r->act, r->s, &loss);
    if (st == FERRY_OK) st = ferry_engine_synchronize(r->e);
    double c = clock_now_ms();
    if (st == FERRY_OK) st = engine_step(r);
    if (st == FERRY_OK) st = ferry_engine_synchronize(r->e);
    if (st != FERRY_OK)
        return st;
    out->fwd = b - a;
    out->compute = c - a;
    out->update = clock_now_ms() - c;
    r->last_loss = loss;
    return FERRY_OK;
}

static ferry_status warm_up(bench_run *r, int steps)
{
    float loss = 0;
    ferry_status st = FERRY_OK;
    for (int i = 0; i < steps && st == FERRY_OK; i++) {
        st = pipelined_step(r, &loss);
        if (i == 0 && st == FERRY_OK) st = ferry_engine_synchronize(r->e);
        if (i == 0 && st == FERRY_OK) {
            r->first_loss = loss;
            printf("offload %s, batch %d: first step done %.2f s after engine creation, loss %.4f\n",
                   ferry_offload_name(r->mode), r->B, (clock_now_ms() - r->started_ms) / 1e3, (double)loss);
            fflush(stdout);
        }
    }
    return st;
}

/* Medians of a mode's samples, and its memory peaks. */
static void summarize(bench_run *r, const bench_sample *smp, int n, bench_result *out)
{
    static double v[9][MAX_STEPS];
    for (int i = 0; i < n; i++) {
        v[0][i] = smp[i].step; v[1][i] = smp[i].fwd; v[2][i] = smp[i].compute; v[3][i] = smp[i].update;
        v[4][i] = smp[i].eng_opt; v[5][i] = smp[i].wait_opt; v[6][i] = smp[i].wait_xfer;
        v[7][i] = smp[i].h2d; v[8][i] = smp[i].fetched;
    }
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(r->e, &ms);
    bench_result res = {r->mode, r->B, median(v[0], n), median(v[1], n), median(v[2], n), median(v[3], n),
                        median(v[4], n), median(v[5], n), median(v[6], n), 0,
                        (double)ms.device_total_peak_bytes, (double)ms.host_peak_bytes, r->first_loss,
                        r->last_loss, r->skips, r->pct, median(v[7], n), median(v[8], n), r->split,
                        ferry_engine_device_update_groups(r->e), r->window};
    res.tok_s = (double)r->B * r->o->T / (res.step * 1e-3);
    *out = res;
}

/* One mode's figures on one line, printed the moment they are known. */
static void print_result_line(const bench_opts *o, const lmodel *m, const bench_result *r)
{
    double tflops = r->tok_s * lmodel_flops_per_token(m, o->T) / 1e12;
    char mfu[64] = "MFU n/a: no --peak-tflops";
    if (o->peak_tflops > 0)
        snprintf(mfu, sizeof mfu, "MFU %.3f of %.1f TFLOP/s", tflops / o->peak_tflops, o->peak_tflops);
    char budget[32] = "all free", name[32];
    uint64_t cap = o->gpu_mem;
    for (int i = 0; i < o->nruns; i++)
        if (o->run_mode[i] == r->mode && o->run_pct[i] == r->pct && o->run_split[i] == r->split &&
            o->run_window[i] == r->window)
            cap = o->run_budget[i];
    if (cap)
        units_fmt_bytes(budget, sizeof budget, cap);
    printf("result offload %s, batch %d x %d: %.0f tokens/s, %.2f model TFLOP/s (%s); step %.1f ms = %.2f x "
           "max(compute %.1f, update %.1f); device peak %.2f GiB (budget %s), host peak %.2f GiB; %.0f bytes "
           "up a step, %.0f of them fetched\n",
           run_label(r->mode, r->pct, r->split, r->window, name, sizeof name), r->B, o->T, r->tok_s, tflops, mfu, r->step,
           r->step / fmax(r->compute, r->update), r->compute, r->update, r->dev_peak / 1073741824.0, budget,
           r->host_peak / 1073741824.0, r->h2d, r->fetched);
    fflush(stdout);
}

/* --confirm-max-batch: the batch just measured is claimed to be the largest
 * the budget holds, so one step at one more must fail with
 * FERRY_ERR_OUT_OF_MEMORY. Returns true when it did. */
static bool confirm_above(bench_run *r)
{
    int B = r->B + 1;
    float loss = 0;
    ferry_step_options so = step_options(r->o);
    ferry_status st = run_set_batch(r, B);
    if (st == FERRY_OK) st = run_fwd_bwd(r, &loss);
    if (st == FERRY_OK) st = ferry_engine_step(r->e, &so, NULL);
    if (st == FERRY_OK) st = ferry_engine_synchronize(r->e);
    if (st == FERRY_ERR_OUT_OF_MEMORY)
        printf("confirm: batch %d does not fit, as predicted (a clean out-of-memory): %s\n", B, train_last_error());
    else if (st == FERRY_OK)
        printf("confirm: batch %d FITS: %d is not the largest batch; the prediction is off\n", B, B - 1);
    else
        printf("confirm: batch %d failed with %s, not out-of-memory: %s\n", B, ferry_status_string(st),
               train_last_error());
    fflush(stdout);
    return st == FERRY_ERR_OUT_OF_MEMORY;
}

/* ---- the largest batch ---- */

/* 1: batch B fits (activations and two whole steps); 0: out of memory;
 * -1: another error (the message is set). An out-of-memory inside a step
 * may leave the engine mid-step, so it is reopened. */
static int try_batch(bench_run *r, lmodel *m, int B)
{
    ferry_status st = run_set_batch(r, B);
    float loss;
    bool in_step = false;
    if (st == FERRY_OK) {
        in_step = true;
        ferry_step_options so = step_options(r->o);
        /* Two steps: the second allocates after the first's frees. */
        for (int i = 0; i < 2 && st == FERRY_OK; i++) {
            st = run_fwd_bwd(r, &loss);
            if (st == FERRY_OK) st = ferry_engine_step(r->e, &so, NULL);
        }
        if (st == FERRY_OK) st = ferry_engine_synchronize(r->e);
    }
    if (st == FERRY_OK)
        return 1;
    if (st != FERRY_ERR_OUT_OF_MEMORY)
        return -1;
    fprintf(stderr, "  batch %5d: does not fit: %s\n", B, train_last_error());
    lmodel_acts_destroy(r->act);
    r->act = NULL;
    if (in_step) {
        const bench_opts *o = r->o;
        int run = r->run;
        run_close(r);
        if (run_open(o, run, m, r) != FERRY_OK)
            return -1;
    }
    return 0;
}

static ferry_status find_max_batch(bench_run *r, lmodel *m, int *best)
{
    int good = 0, bad = 0, B = r->o->B;
    while (B <= MAX_BATCH) {
        int fit = try_batch(r, m, B);
        if (fit < 0)
            return FERRY_ERR_BACKEND;
        if (!fit) { bad = B; break; }
        fprintf(stderr, "  batch %5d: fits\n", B);
        good = B;
        B *= 2;
    }
    if (bad == 0)
        bad = MAX_BATCH + 1;
    if (good == 0)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "even --batch %d does not fit the device budget; start lower, add "
                                                "--recompute or use another offload mode", r->o->B);
    while (bad - good > 1) {
        int mid = good + (bad - good) / 2;
        int fit = try_batch(r, m, mid);
        if (fit < 0)
            return FERRY_ERR_BACKEND;
        if (fit) fprintf(stderr, "  batch %5d: fits\n", mid);
        if (fit) good = mid; else bad = mid;
    }
    *best = good;
    return run_set_batch(r, good);
}

/* ---- the command line ---- */

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_engine [--model NAME] [--batch B] [--seq T] [--steps S] [--warmup W]\n"
            "                    [--modes none,optimizer,params | --offload MODE] [--backend host|cuda|auto]\n"
            "                    [--gpu-mem SIZE] [--threads N] [--recompute] [--delayed] [--find-max-batch]\n"
            "                    [--confirm-max-batch] [--peak-tflops X] [--lr X] [--card SIZE] [--params-budgets P,...]\n"
            "                    [--split-groups N,...] [--upload-window-both] [--moments f32|bf16|8bit]\n"
            "                    [--dtype auto|f32|bf16|f16]\n"
            "  defaults: host: --model d4 --batch 4 --seq 64; cuda: --model gpt2 --batch 8 --seq 1024;\n"
            "            --steps 7 rounds, --warmup 1, --modes none,optimizer,params, budget all free\n"
            "  --model: gpt2, gpt2-medium, gpt2-large, gpt2-xl or dN (N layers, N heads, 64 N wide); or of\n"
            "           the Llama family: llama3.2-1b, llama3.2-3b, llama3.1-8b, mistral-7b, qwen2.5-7b, ...,\n"
            "           llama-dN (models/llama.h; docs/llama.md lists them)\n"
            "  --find-max-batch: the largest batch (from --batch up, default 1) that fits --gpu-mem, and its\n"
            "                    speed; one mode at a time\n"
            "  --confirm-max-batch: --batch is the largest that fits (memprof plan says so): measure it, then one\n"
            "                    step at --batch + 1 must run out of device memory\n"
            "  --peak-tflops: the bf16 matmul rate MFU is a fraction of (the kernel lab's ceiling)\n"
            "  --lr: AdamW's learning rate (default 1e-4). Every mode must learn: the loss of the same tokens\n"
            "        must fall, finite, with no step skipped, or the exit status is 1 whatever the speed\n"
            "  --backend cuda: CUDA must start; without a GPU the exit status is 77, never a host run\n"
            "  --params-budgets: params mode once more for each percent (1..100, at most 4): a device budget\n"
            "                    whose room for weights kept on the device is that share of the model's\n"
            "                    (memprof's plan; never below the window params mode is planned for)\n"
            "  --gpu-mem: the device budget (0: what the device has free)\n"
            "  --split-groups: optimizer mode once more for each N (at most 4; -1 = auto): the first N groups\n"
            "                  updated on the device (the split update), each against optimizer mode with every\n"
            "                  update on the CPU, measured in the same run\n"
            "  --upload-window-both: optimizer and params mode each twice, the upload window off (the host\n"
            "                  copy in the device type) and on (converted as each upload streams), in the\n"
            "                  same rounds; the last lines give the ratio\n"
            "  --moments, --dtype: the engine's Adam moments' form and device storage (default f32, auto)\n"
            "  --card: emulate a card of SIZE (as nvidia-smi prints it: 24GiB for an RTX 4090): the budget is SIZE\n"
            "          less what the CUDA context and cuBLASLt take here; with --confirm-max-batch and no\n"
            "          --batch, the batch is the planner's largest at that budget\n"
            UNITS_SIZE_HELP);
}

static ferry_status parse_modes(const char *list, bench_opts *o)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", list);
    o->nmodes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->nmodes == 3)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "--modes '%s': at most 3 modes", list);
        ferry_status st = ferry_offload_parse(tok, &o->modes[o->nmodes++]);
        if (st != FERRY_OK)
            return st;
    }
    return o->nmodes ? FERRY_OK : err_set(FERRY_ERR_INVALID_ARGUMENT, "--modes is empty");
}

static ferry_status parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end || x < lo || x > hi)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s '%s': want an integer in %d..%d", flag, v, lo, hi);
    *out = (int)x;
    return FERRY_OK;
}

static ferry_status parse_positive(const char *flag, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (*v == 0 || *end || !(x > 0) || x > 1e6)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s '%s': want a positive number (TFLOP/s)", flag, v);
    *out = x;
    return FERRY_OK;
}

#define VALUED_FLAGS                                                                                 \
    " --model --batch --seq --steps --warmup --threads --modes --offload --backend --gpu-mem --peak-tflops --lr " \
    "--card --params-budgets --split-groups --moments --dtype "

/* A comma-separated list of at most `max` integers in lo..hi. */
static ferry_status parse_int_list(const char *flag, const char *list, int lo, int hi, int max, int *out, int *n)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == max)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s '%s': at most %d", flag, list, max);
        ferry_status st = parse_int(flag, tok, lo, hi, &out[(*n)++]);
        if (st != FERRY_OK)
            return st;
    }
    return *n ? FERRY_OK : err_set(FERRY_ERR_INVALID_ARGUMENT, "%s is empty", flag);
}

static ferry_status parse_args(int argc, char **argv, bench_opts *o)
{
    ferry_status st = FERRY_OK;
    for (int i = 1; i < argc && st == FERRY_OK; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes = true;
        if (!strcmp(a, "--recompute")) { o->recompute = true; takes = false; }
        else if (!strcmp(a, "--delayed")) { o->delayed = true; takes = false; }
        else if (!strcmp(a, "--find-max-batch")) { o->find_max = true; takes = false; }
        else if (!strcmp(a, "--confirm-max-batch")) { o->confirm_max = true; takes = false; }
        else if (!strcmp(a, "--upload-window-both")) { o->window_both = true; takes = false; }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); exit(0); }
        else if (!strstr(VALUED_FLAGS, a) || a[0] != '-' || strchr(a, ' '))
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "unknown flag '%s'; see --help", a);
        else if (!v) return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s needs a value; see --help", a);
        else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--batch")) st = parse_int(a, v, 1, MAX_BATCH, &o->B);
        else if (!strcmp(a, "--seq")) st = parse_int(a, v, 1, 1 << 20, &o->T);
        else if (!strcmp(a, "--steps")) st = parse_int(a, v, 1, MAX_STEPS, &o->steps);
        else if (!strcmp(a, "--warmup")) st = parse_int(a, v, 0, 1000, &o->warmup);
        else if (!strcmp(a, "--threads")) st = parse_int(a, v, 0, 1024, &o->threads);
        else if (!strcmp(a, "--modes") || !strcmp(a, "--offload")) st = parse_modes(v, o);
        else if (!strcmp(a, "--backend")) st = ferry_backend_parse(v, &o->backend);
        else if (!strcmp(a, "--gpu-mem")) st = units_parse_size_flag(a, v, "what the device has free", &o->gpu_mem);
        else if (!strcmp(a, "--peak-tflops")) st = parse_positive(a, v, &o->peak_tflops);
        else if (!strcmp(a, "--lr")) st = parse_positive(a, v, &o->lr);
        else if (!strcmp(a, "--card")) st = units_parse_size_flag(a, v, "no card to emulate", &o->card);
        else if (!strcmp(a, "--params-budgets"))
            st = parse_int_list(a, v, 1, 100, MAX_BUDGETS, o->budget_pct, &o->nbudgets);
        else if (!strcmp(a, "--moments")) st = ferry_moments_parse(v, &o->moments);
        else if (!strcmp(a, "--dtype")) st = ferry_dtype_parse(v, &o->dtype);
        else if (!strcmp(a, "--split-groups"))
            st = parse_int_list(a, v, -1, 65536, MAX_SPLITS, o->splits, &o->nsplits);
        else return err_set(FERRY_ERR_INVALID_ARGUMENT, "unknown flag '%s'; see --help", a);
        if (takes) i++;
    }
    return st;
}

/* ---- printing ---- */

static void print_header(void)
{
    printf("%-11s %5s %9s %7s %8s %8s %8s %8s %8s %7s %9s %7s %8s %8s %13s\n", "mode", "batch", "tokens/s",
           "vs none", "step ms", "fwd", "bwd", "update", "eng.opt", "floor x", "exact fl.", "exact x", "wait upd",
           "wait xfr", "dev/host GiB");
}

static void print_row(const bench_result *r, double none_tok_s)
{
    double bwd = r->compute - r->fwd;
    double floor = fmax(r->compute, r->update);
    double exact = bwd + fmax(r->fwd, r->update);
    char vs[16] = "-", name[32];
    if (none_tok_s > 0)
        snprintf(vs, sizeof vs, "%.2fx", r->tok_s / none_tok_s);
    printf("%-11s %5d %9.0f %7s %8.1f %8.1f %8.1f %8.1f %8.1f %7.2f %9.1f %7.2f %8.1f %8.1f %6.2f/%-6.2f\n",
           run_label(r->mode, r->pct, r->split, r->window, name, sizeof name), r->B, r->tok_s, vs, r->step, r->fwd, bwd, r->update, r->engine_opt,
           floor > 0 ? r->step / floor : 0, exact, exact > 0 ? r->step / exact : 0, r->wait_opt, r->wait_xfer,
           r->dev_peak / 1073741824.0, r->host_peak / 1073741824.0);
}

static void print_legend(void)
{
    printf("step: one training step as trained (median); fwd, bwd: forward and backward alone; update:\n"
           "ferry_engine_step + synchronize alone (norm, AdamW, upload); eng.opt: the engine's\n"
           "timing.optimizer_ms. floor x = step / max(fwd+bwd, update), the floor of perfect overlap;\n"
           "exact fl. = bwd + max(fwd, update), the floor of the exact schedule (the update waits for the\n"
           "whole backward, for the global norm, and overlaps only the next forward); exact x = step /\n"
           "exact fl. wait upd / wait xfr: the compute stream stalled on the CPU update / on weight fetches.\n");
}

/* ---- running the modes ---- */

static ferry_status open_mode(const bench_opts *o, lmodel *m, int run, bench_run *r)
{
    ferry_offload mode = o->run_mode[run];
    ferry_status st = run_open(o, run, m, r);
    if (st == FERRY_OK && o->find_max) {
        fprintf(stderr, "searching the largest batch for offload %s...\n", ferry_offload_name(mode));
        int best = 0;
        st = find_max_batch(r, m, &best);
    } else if (st == FERRY_OK) {
        st = run_set_batch(r, o->run_B[run]);
    }
    if (st == FERRY_OK)
        fprintf(stderr, "%s\n", ferry_engine_describe(r->e));
    if (st == FERRY_OK)
        st = warm_up(r, o->warmup + 1);
    return st;
}

static void report_failure(const bench_run *r, ferry_offload mode, ferry_status st)
{
    fprintf(stderr, "bench_engine: offload %s, batch %d: %s: %s\n", ferry_offload_name(mode), r->B,
            ferry_status_string(st), train_last_error());
}

/* One measured round, printed as it lands. */
static void print_round(const bench_run *r, int k, int n, const bench_sample *x)
{
    printf("round %d/%d offload %s: step %.1f ms; alone: forward+backward %.1f ms, update %.1f ms\n", k + 1, n,
           ferry_offload_name(r->mode), x->step, x->compute, x->update);
    fflush(stdout);
}

/* The measured rounds of modes first..last-1, alternating between them; a
 * mode that fails is reported, closed and marked dead. */
static void measure_modes(const bench_opts *o, bench_run *runs, bench_sample (*smp)[MAX_STEPS], bool *alive,
                          int first, int last)
{
    for (int k = 0; k < o->steps; k++)
        for (int i = first; i < last; i++) {
            if (!alive[i])
                continue;
            ferry_status st = measure_round(&runs[i], &smp[i][k]);
            if (st == FERRY_OK) {
                print_round(&runs[i], k, o->steps, &smp[i][k]);
                continue;
            }
            report_failure(&runs[i], o->run_mode[i], st);
            alive[i] = false;
            run_close(&runs[i]);
        }
}

/* --card: what the CUDA context and cuBLASLt take of this card, from an
 * engine opened (and set up, which starts cuBLASLt) for the purpose; the
 * budget is the card less that. With --confirm-max-batch and no --batch,
 * the batch is the planner's largest at that budget. 0, or 1 with a
 * message. */
static int card_budget(bench_opts *o, const lmodel *m)
{
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_CUDA;
    cfg.device_budget_bytes = 256u << 20;
    ferry_engine *e = NULL;
    static const float probe[1024];
    int g = 0;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_status st = ferry_engine_create(&cfg, &e);
    if (st == FERRY_OK) st = ferry_engine_add_group(e, "probe", 1024, probe, NULL, &g);
    if (st == FERRY_OK) st = ferry_engine_setup(e);
    if (st == FERRY_OK) st = ferry_engine_memory_stats(e, &ms);
    ferry_engine_destroy(e);
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_engine: --card: measuring the CUDA context's share: %s\n", train_last_error());
        return 1;
    }
    uint64_t share = ms.device_context_bytes + ms.device_library_bytes;
    char card[32], ctx[32], lib[32], total[32], budget[32];
    units_fmt_bytes(card, sizeof card, o->card);
    if (o->card <= share + UNITS_SIZE_FLAG_MIN) {
        fprintf(stderr, "bench_engine: --card %s leaves nothing once the CUDA context and cuBLASLt take %s\n", card,
                units_fmt_bytes(ctx, sizeof ctx, share));
        return 1;
    }
    o->gpu_mem = o->card - share;
    printf("card %s emulated on this one (%s): the CUDA context (and any other process) takes %s and cuBLASLt %s "
           "here, so the budget is %s (card_reserve_bytes=%llu)\n",
           card, units_fmt_bytes(total, sizeof total, ms.device_total_bytes),
           units_fmt_bytes(ctx, sizeof ctx, ms.device_context_bytes),
           units_fmt_bytes(lib, sizeof lib, ms.device_library_bytes),
           units_fmt_bytes(budget, sizeof budget, o->gpu_mem), (unsigned long long)share);
    if (o->confirm_max && !o->B) {
        printf("the planner's largest batch at that budget:");
        for (int i = 0; i < o->nmodes; i++) {
            gpt2_plan_request rq = {.batch = 1, .seq = o->T, .offload = o->modes[i], .recompute = o->recompute,
                                    .prefetch_groups = 2, .micro_batches = 1, .backend = FERRY_BACKEND_CUDA,
                                    .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                    .device_budget = 0}; /* the largest batch: the window only */
            model_spec_plan_request(lmodel_spec(m), &rq);
            st = gpt2_plan_max_batch(&rq, o->gpu_mem, &o->mode_B[i]);
            if (st != FERRY_OK || o->mode_B[i] < 1) {
                printf("\n");
                fprintf(stderr, "bench_engine: --card %s, offload %s: %s\n", card, ferry_offload_name(o->modes[i]),
                        st != FERRY_OK ? train_last_error() : "the planner fits not even batch 1 in that budget");
                return 1;
            }
            printf("%s offload %s %d", i ? "," : "", ferry_offload_name(o->modes[i]), o->mode_B[i]);
        }
        printf(" (each confirmed below)\n");
        o->B = o->mode_B[0];
    }
    fflush(stdout);
    return 0;
}

/* --card: what a card of that size would have had to hold at the end of
 * this mode's run: the arena's reserve plus everything else on the device
 * (the context, library code loaded since, other processes). */
static void print_card_fit(const bench_opts *o, bench_run *r)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (!r->e || ferry_engine_memory_stats(r->e, &ms) != FERRY_OK)
        return;
    uint64_t need = ms.device_reserved_bytes + ms.device_outside_bytes;
    char card[32], res[32], out[32], n[32];
    printf("card %s: the arena reserved %s, everything else on the device %s: %s in all, %s\n",
           units_fmt_bytes(card, sizeof card, o->card), units_fmt_bytes(res, sizeof res, ms.device_reserved_bytes),
           units_fmt_bytes(out, sizeof out, ms.device_outside_bytes), units_fmt_bytes(n, sizeof n, need),
           need <= o->card ? "within the card" : "MORE than the card holds (library code loaded after setup)");
}

/* Without --find-max-batch every mode's engine stays open and the rounds
 * alternate between them, so a change in the machine's load (other jobs,
 * memory bandwidth swings) falls on every mode alike. With it, one mode at a
 * time: each search fills the device budget. Returns the modes that ran;
 * *confirmed turns false when --confirm-max-batch found batch + 1 fitting
 * (or failing otherwise than out of memory). */
static int run_modes(const bench_opts *o, lmodel *m, bench_result *res, bool *confirmed)
{
    static bench_run runs[MAX_RUNS];
    static bench_sample smp[MAX_RUNS][MAX_STEPS];
    bool alive[MAX_RUNS] = {false};
    int ok = 0;
    int batch = o->find_max ? 1 : o->nruns;
    for (int first = 0; first < o->nruns; first += batch) {
        int last = first + batch < o->nruns ? first + batch : o->nruns;
        for (int i = first; i < last; i++) {
            ferry_status st = open_mode(o, m, i, &runs[i]);
            alive[i] = st == FERRY_OK;
            if (!alive[i]) {
                report_failure(&runs[i], o->run_mode[i], st);
                run_close(&runs[i]);
            }
        }
        measure_modes(o, runs, smp, alive, first, last);
        for (int i = first; i < last; i++) {
            if (!alive[i])
                continue;
            summarize(&runs[i], smp[i], o->steps, &res[ok]);
            print_result_line(o, m, &res[ok++]);
            if (o->card)
                print_card_fit(o, &runs[i]);
            if (o->confirm_max && !confirm_above(&runs[i]))
                *confirmed = false;
            run_close(&runs[i]);
        }
    }
    return ok;
}

/* --backend cuda: CUDA must start here, or the run ends before any work:
 * 77 when there is no GPU (no driver, no device), 1 when one is there but
 * cannot start; 0 when it opens. */
static int require_cuda(void)
{
    backend *be = NULL;
    ferry_status st = backend_open(FERRY_BACKEND_CUDA, &be);
    backend_close(be);
    if (st == FERRY_OK)
        return 0;
    fprintf(stderr, "bench_engine: --backend cuda: %s\n", train_last_error());
    return st == FERRY_ERR_UNSUPPORTED ? 77 : 1;
}

/* Defaults that take about a minute: a small model on the CPU; GPT-2 124M
 * with a real sequence length on a GPU, where the CPU update and the compute
 * are of a size. Returns 0, or 2 for flags that cannot go together. */
static int settle_options(bench_opts *o, ferry_backend_kind kind)
{
    bool gpu = kind == FERRY_BACKEND_CUDA;
    if (!o->model) o->model = gpu ? "gpt2" : "d4";
    if (!o->B && !(o->card && o->confirm_max)) o->B = o->find_max ? 1 : gpu ? 8 : 4;
    if (!o->T) o->T = gpu ? 1024 : 64;
    if (o->find_max && kind == FERRY_BACKEND_HOST && o->gpu_mem == 0) {
        fprintf(stderr, "bench_engine: --find-max-batch on the host backend needs --gpu-mem (the budget to fill)\n");
        return 2;
    }
    if (o->card && o->gpu_mem) {
        fprintf(stderr, "bench_engine: --card SIZE sets the budget (SIZE less the CUDA context's share); leave out "
                        "--gpu-mem\n");
        return 2;
    }
    if (o->card && !gpu) {
        fprintf(stderr, "bench_engine: --card emulates a GPU's memory: it needs the cuda backend\n");
        return 2;
    }
    if (o->find_max && o->confirm_max) {
        fprintf(stderr, "bench_engine: --find-max-batch searches the batch, --confirm-max-batch checks the one given; "
                        "use one of them\n");
        return 2;
    }
    return 0;
}

static void print_banner(const bench_opts *o, const lmodel *m, const ferry_system_info *info,
                         ferry_backend_kind kind)
{
    char budget[32] = "all free";
    if (o->gpu_mem)
        units_fmt_bytes(budget, sizeof budget, o->gpu_mem);
    const char *blas = getenv("OPENBLAS_NUM_THREADS");
    printf("bench_engine: %s (%.1fM parameters, %d groups), T=%d%s%s, %s backend%s, device budget %s;\n"
           "medians of %d rounds after %d warm-up steps; %d cores, %s; OPENBLAS_NUM_THREADS=%s\n",
           o->model, (double)lmodel_num_params(m) / 1e6, lmodel_num_groups(m), o->T, o->recompute ? ", recompute" : "",
           o->delayed ? ", delayed update" : "", ferry_backend_name(kind),
           o->backend == FERRY_BACKEND_AUTO ? (kind == FERRY_BACKEND_HOST ? " (auto: no GPU found)" : " (auto)") : "",
           budget, o->steps, o->warmup + 1, info->cores, info->gpu_name[0] ? info->gpu_name : "no GPU",
           blas ? blas : "unset");
    fflush(stdout);
}

static void print_result_summary(const bench_opts *o, const lmodel *m, const bench_result *res, int ok,
                                 double none_tok_s)
{
    printf("RESULT");
    for (int i = 0; i < ok; i++) {
        const bench_result *r = &res[i];
        char name[32];
        printf("%s %s %.0f tok/s", i ? ";" : "", run_label(r->mode, r->pct, r->split, r->window, name, sizeof name), r->tok_s);
        if (o->find_max || o->confirm_max)
            printf(" at max batch %d", r->B);
        if (o->peak_tflops > 0)
            printf(", MFU %.3f", r->tok_s * lmodel_flops_per_token(m, o->T) / 1e12 / o->peak_tflops);
        if (none_tok_s > 0 && r->mode != FERRY_OFFLOAD_NONE)
            printf(" = %.2fx none", r->tok_s / none_tok_s);
        if (r->mode != FERRY_OFFLOAD_NONE)
            printf(", step %.2fx overlap floor", r->step / fmax(r->compute, r->update));
    }
    printf("\n");
}

/* --upload-window-both: each mode's step through the window against the
 * same mode with the upload copy, measured in the same rounds. */
static void print_window_summary(const bench_result *res, int ok)
{
    for (int i = 0; i < ok; i++) {
        if (res[i].window != FERRY_UPLOAD_WINDOW_ON)
            continue;
        for (int k = 0; k < ok; k++)
            if (res[k].window == FERRY_UPLOAD_WINDOW_OFF && res[k].mode == res[i].mode && res[k].B == res[i].B)
                printf("upload window, offload %s: step %.1f ms through the window, %.1f ms with the upload copy: "
                       "%.3f x (update alone %.1f / %.1f ms; host peak %.3f / %.3f GiB)\n",
                       ferry_offload_name(res[i].mode), res[i].step, res[k].step, res[i].step / res[k].step,
                       res[i].update, res[k].update, res[i].host_peak / 1073741824.0,
                       res[k].host_peak / 1073741824.0);
    }
}

/* --split-groups: each split's speed against the all-CPU update's run. */
static void print_split_summary(const bench_result *res, int ok)
{
    const bench_result *cpu = NULL;
    for (int i = 0; i < ok; i++)
        if (res[i].split == 0)
            cpu = &res[i];
    for (int i = 0; i < ok && cpu; i++) {
        if (res[i].split == SPLIT_DEFAULT || res[i].split == 0)
            continue;
        char name[32];
        printf("SPLIT %s (%d groups updated on the device): %.0f tok/s = %.2fx the all-CPU update's %.0f tok/s; "
               "the step waited %.1f ms for the CPU update (all-CPU: %.1f ms)\n",
               run_label(res[i].mode, res[i].pct, res[i].split, res[i].window, name, sizeof name), res[i].split_chosen,
               res[i].tok_s, res[i].tok_s / cpu->tok_s, cpu->tok_s, res[i].wait_opt, cpu->wait_opt);
    }
}

/* Whether a mode's run learned: every step applied (none skipped for a
 * non-finite gradient), the loss finite and lower at the end than at the
 * first step (the same tokens every step). A speed of a run that learns
 * nothing is no result. */
static bool learned(const bench_result *r)
{
    return r->skips == 0 && isfinite(r->first_loss) && isfinite(r->last_loss) && r->last_loss < r->first_loss;
}

/* The table of every mode that ran, the losses, and the RESULT line.
 * Returns whether every mode learned. */
static bool print_report(const bench_opts *o, const lmodel *m, const bench_result *res, int ok)
{
    double none_tok_s = 0;
    for (int i = 0; i < ok; i++)
        if (res[i].mode == FERRY_OFFLOAD_NONE && res[i].B == o->B)
            none_tok_s = res[i].tok_s;
    print_header();
    for (int i = 0; i < ok; i++)
        print_row(&res[i], none_tok_s);
    print_legend();
    bool all = true;
    for (int i = 0; i < ok; i++) {
        bool good = learned(&res[i]);
        all &= good;
        char name[32];
        printf("loss %s: %.3f -> %.3f (the same tokens every step)%s", run_label(res[i].mode, res[i].pct, res[i].split, res[i].window, name,
               sizeof name), (double)res[i].first_loss, (double)res[i].last_loss, good ? ": falls\n" : "");
        if (!good)
            printf(": FAILED: %s; the speed above is of a run that learns nothing\n",
                   res[i].skips ? "steps were skipped for non-finite gradients"
                   : !isfinite(res[i].first_loss) || !isfinite(res[i].last_loss) ? "the loss is not finite"
                                                                                  : "the loss did not fall");
    }
    print_result_summary(o, m, res, ok, none_tok_s);
    print_split_summary(res, ok);
    print_window_summary(res, ok);
    return all;
}

/* The runs: the modes asked for (with --gpu-mem), then params mode once
 * per --params-budgets percent, its budget from the planner: the peak with
 * every group kept, less the weights the percent leaves out, never below
 * the window the schedule is planned for (GPT-2's tied embedding is one
 * large group: in a small model the window holds most of the weights). */
static ferry_status plan_runs(bench_opts *o, const lmodel *m, ferry_backend_kind kind)
{
    o->nruns = 0;
    for (int i = 0; i < o->nmodes; i++) {
        o->run_B[o->nruns] = o->mode_B[i] ? o->mode_B[i] : o->B;
        o->run_mode[o->nruns] = o->modes[i];
        o->run_budget[o->nruns] = o->gpu_mem;
        o->run_split[o->nruns] = SPLIT_DEFAULT;
        bool pair = o->window_both && o->modes[i] != FERRY_OFFLOAD_NONE;
        o->run_window[o->nruns] = pair ? FERRY_UPLOAD_WINDOW_OFF : FERRY_UPLOAD_WINDOW_AUTO;
        o->run_pct[o->nruns++] = 0;
        if (!pair)
            continue;
        o->run_B[o->nruns] = o->run_B[o->nruns - 1]; /* the same mode through the window, beside it */
        o->run_mode[o->nruns] = o->modes[i];
        o->run_budget[o->nruns] = o->gpu_mem;
        o->run_split[o->nruns] = SPLIT_DEFAULT;
        o->run_window[o->nruns] = FERRY_UPLOAD_WINDOW_ON;
        o->run_pct[o->nruns++] = 0;
    }
    /* The split update's runs: every update on the CPU first, the peer. */
    for (int i = -1; o->nsplits && i < o->nsplits; i++) {
        o->run_B[o->nruns] = o->B;
        o->run_mode[o->nruns] = FERRY_OFFLOAD_OPTIMIZER;
        o->run_budget[o->nruns] = o->gpu_mem;
        o->run_split[o->nruns] = i < 0 ? 0 : o->splits[i];
        o->run_pct[o->nruns++] = 0;
    }
    if (o->nbudgets && o->find_max)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--params-budgets sets the budget; --find-max-batch fills one");
    ferry_engine_config ec = FERRY_ENGINE_CONFIG_INIT;
    for (int i = 0; i < o->nbudgets; i++) {
        gpt2_plan full, window;
        gpt2_plan_request rq = {.batch = o->B, .seq = o->T, .offload = FERRY_OFFLOAD_PARAMS,
                                .recompute = o->recompute, .prefetch_groups = ec.prefetch_groups, .micro_batches = 1,
                                .backend = kind, .dtype = FERRY_DTYPE_AUTO, .ranks = 1,
                                .device_budget = (uint64_t)1 << 62};
        model_spec_plan_request(lmodel_spec(m), &rq);
        ferry_status st = gpt2_plan_predict(&rq, &full);
        rq.device_budget = 0;
        if (st == FERRY_OK)
            st = gpt2_plan_predict(&rq, &window);
        if (st != FERRY_OK)
            return err_wrap(st, "--params-budgets");
        uint64_t all = full.device_bytes[FERRY_MEM_PARAMS];
        uint64_t b = full.device_total - (uint64_t)((double)all * (100 - o->budget_pct[i]) / 100.0);
        o->run_B[o->nruns] = o->B;
        o->run_mode[o->nruns] = FERRY_OFFLOAD_PARAMS;
        o->run_budget[o->nruns] = b > window.device_total ? b : window.device_total;
        o->run_split[o->nruns] = SPLIT_DEFAULT;
        o->run_pct[o->nruns++] = o->budget_pct[i];
    }
    return FERRY_OK;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("bench_engine"); /* a full disk or /dev/full on stdout is exit 1 */
    bench_opts o = {.steps = 7, .warmup = 1,
                    .modes = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS}, .nmodes = 3,
                    .backend = FERRY_BACKEND_AUTO, .lr = 1e-4};
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    ferry_status st = parse_args(argc, argv, &o);
    if (st == FERRY_OK) st = ferry_system_probe(&info);
    if (st != FERRY_OK) {
        fprintf(stderr, "bench_engine: %s\n", train_last_error());
        usage();
        return 2;
    }
    int rc = o.backend == FERRY_BACKEND_CUDA ? require_cuda() : 0;
    ferry_backend_kind kind = o.backend == FERRY_BACKEND_AUTO ? info.backend : o.backend;
    if (rc == 0)
        rc = settle_options(&o, kind);
    if (rc != 0)
        return rc;
    model_spec spec;
    lmodel *m = NULL;
    if ((st = model_spec_preset(o.model, &spec)) != FERRY_OK || (st = lmodel_create(&spec, &m)) != FERRY_OK) {
        fprintf(stderr, "bench_engine: %s\n", train_last_error());
        return 2;
    }
    if (o.card && (rc = card_budget(&o, m)) != 0) {
        lmodel_destroy(m);
        return rc;
    }
    if ((st = plan_runs(&o, m, kind)) != FERRY_OK) {
        fprintf(stderr, "bench_engine: %s\n", train_last_error());
        lmodel_destroy(m);
        return 2;
    }
    print_banner(&o, m, &info, kind);
    bench_result res[MAX_RUNS];
    bool confirmed = true;
    int ok = run_modes(&o, m, res, &confirmed);
    bool learns = false;
    if (ok == 0)
        printf("RESULT: no mode ran (see the messages above)\n");
    else
        learns = print_report(&o, m, res, ok);
    lmodel_destroy(m);
    return ok == o.nruns && confirmed && learns ? 0 : 1;
}
