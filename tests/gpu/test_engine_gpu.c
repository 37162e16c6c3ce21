/* The engine judged on the cuda backend (suite gpu): a small GPT-2 (2
 * layers, 4 heads, 128 wide, GPT-2's vocabulary, batch 4 x 64) trained 20
 * steps on one fixed batch in each offload mode, none, optimizer, params
 * and nvme, from the same seed. nvme runs optimizer mode's device side and
 * the same CPU AdamW on the moments it streams from disk: its losses and
 * weights are optimizer mode's to the bit.
 * (a) The modes agree: every step's loss within 1e-2 relative of mode
 *     none's, and the 20 steps' change of the fp32 master weights within
 *     5e-2 relative norm of none's. The modes run the same 16-bit forward and
 *     backward and differ only in where the fp32 AdamW runs (device in none,
 *     CPU otherwise); their results can part only where a master weight
 *     that differs in its last fp32 bits rounds to another 16-bit value
 *     (bf16: 2^-8 relative), so the tolerances are those of bf16, not of
 *     fp32 (the card's type: bf16 from sm_80; f16, under its loss scale, on
 *     sm_70 and sm_75, where the same bounds hold with room). And the
 *     loss falls: the last step's is below 0.8 x the first's.
 * (b) The device peak (ferry_engine_memory_stats) stays within the budget in
 *     every mode; the budget is memprof's prediction for the run plus an
 *     eighth (at least 8 MiB), and the device holds at least the 16-bit
 *     weights of every group in modes none and optimizer.
 *
 *   test_engine_gpu [cuda|host] [auto|f32|bf16|f16]
 *     backend: default cuda; host runs the same checks in fp32 on any
 *     machine. dtype: the device storage, default auto (the card's); f16
 *     runs Volta and Turing's type, under its dynamic loss scale, on any
 *     card (suite gpu: engine-gpu-f16), or the host backend's fp16 rounding.
 * Exit 77 only when cuda is asked for and there is no GPU (no driver, no
 * device, a card below sm_70); a fixture that fails on a GPU is a failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/gpu/engine_fixture.h"
#include "models/gpt2_plan.h"

#define STEPS 20
#define B_ 4
#define T_ 64
#define SEED 20260101u
#define BATCH_SEED 77u
#define TOL_LOSS 1e-2
#define TOL_UPDATE 5e-2

static ferry_dtype dtype = FERRY_DTYPE_AUTO; /* argv[2] */

typedef struct mode_run {
    ferry_offload mode;
    float loss[STEPS];
    float *w0, *w; /* master weights before and after */
    size_t n;
} mode_run;

static gpt2_config model_config(void)
{
    gpt2_config c;
    gpt2_config_from_fields(2, 4, 128, 50257, 0, T_, &c);
    return c;
}

static ferry_step_options options(void) { return efix_options(2e-3f, 0.1f, 1.0f); }

/* memprof's predicted device peak plus an eighth (at least 8 MiB). */
static uint64_t budget_for(const gpt2_config *c, ferry_backend_kind kind, ferry_offload mode)
{
    gpt2_plan p;
    if (gpt2_plan_predict(&(gpt2_plan_request){.cfg = c, .batch = B_, .seq = T_, .offload = mode, .recompute = false,
                                               .prefetch_groups = 2, .micro_batches = 1, .backend = kind,
                                               .dtype = dtype, .ranks = 1, .device_budget = 0}, &p) != FERRY_OK) {
        printf("Bail out! gpt2 plan: %s\n", ferry_last_error());
        exit(1);
    }
    uint64_t margin = p.device_total / 8 > (8u << 20) ? p.device_total / 8 : (8u << 20);
    tap_diag("offload %s: predicted device peak %.2f MiB; budget %.2f MiB", ferry_offload_name(mode),
             p.device_total / 1048576.0, (p.device_total + margin) / 1048576.0);
    return p.device_total + margin;
}

static void check_memory(efix *f, ferry_offload mode, uint64_t budget)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    if (!tap_is_status(ferry_engine_memory_stats(f->e, &ms), FERRY_OK, "%s: memory stats", ferry_offload_name(mode)))
        return;
    tap_ok(ms.device_total_peak_bytes <= budget && ms.device_reserved_bytes <= budget,
           "(b) %s: device peak %.2f MiB and reserved %.2f MiB within the %.2f MiB budget",
           ferry_offload_name(mode), ms.device_total_peak_bytes / 1048576.0, ms.device_reserved_bytes / 1048576.0,
           budget / 1048576.0);
    /* The card's share before the engine: measured on cuda, 0 on host. */
    if (ferry_engine_backend(f->e) == FERRY_BACKEND_CUDA)
        tap_ok(ms.device_total_bytes > budget && ms.device_context_bytes > 0 &&
                   ms.device_context_bytes + ms.device_library_bytes < ms.device_total_bytes &&
                   ms.device_outside_bytes > 0 && ms.device_outside_bytes < ms.device_total_bytes,
               "%s: the card's %.1f MiB: context %.1f MiB, cuBLASLt %.1f MiB at setup, outside the arena now %.1f MiB",
               ferry_offload_name(mode), ms.device_total_bytes / 1048576.0, ms.device_context_bytes / 1048576.0,
               ms.device_library_bytes / 1048576.0, ms.device_outside_bytes / 1048576.0);
    else
        tap_ok(!ms.device_total_bytes && !ms.device_context_bytes && !ms.device_library_bytes &&
                   !ms.device_outside_bytes, "%s: no card share on the host backend", ferry_offload_name(mode));
    if (mode == FERRY_OFFLOAD_PARAMS)
        return;
    size_t elems = 0;
    for (int g = 0; g < gpt2_num_groups(f->m); g++)
        elems += gpt2_group_numel(f->m, g);
    size_t act = ferry_engine_dtype(f->e) == FERRY_DTYPE_F32 ? 4 : 2;
    tap_ok(ms.device_peak_bytes[FERRY_MEM_PARAMS] >= elems * act,
           "(b) %s: the device held every group's weights (%.2f MiB >= %zu x %zu bytes)", ferry_offload_name(mode),
           ms.device_peak_bytes[FERRY_MEM_PARAMS] / 1048576.0, elems, act);
}

/* Trains one mode; false when the fixture or a step failed (reported). */
static bool train(ferry_backend_kind kind, ferry_offload mode, mode_run *r)
{
    gpt2_config c = model_config();
    uint64_t budget = budget_for(&c, kind, mode);
    efix f;
    r->mode = mode;
    ferry_status st = efix_open(&f, &c, kind, dtype, mode, budget, B_, T_, SEED, BATCH_SEED);
    bool ok = tap_is_status(st, FERRY_OK, "%s: a GPT-2 on the %s engine sets up", ferry_offload_name(mode),
                            ferry_backend_name(kind));
    if (ok && kind == FERRY_BACKEND_CUDA && dtype == FERRY_DTYPE_AUTO)
        ok = tap_ok(ferry_engine_dtype(f.e) == FERRY_DTYPE_BF16 || ferry_engine_dtype(f.e) == FERRY_DTYPE_F16,
                    "%s: the device dtype is the card's, %s", ferry_offload_name(mode),
                    ferry_dtype_name(ferry_engine_dtype(f.e)));
    else if (ok && dtype != FERRY_DTYPE_AUTO)
        ok = tap_ok(ferry_engine_dtype(f.e) == dtype, "%s: the device dtype is the one asked for, %s (asked %s)",
                    ferry_offload_name(mode), ferry_dtype_name(ferry_engine_dtype(f.e)), ferry_dtype_name(dtype));
    if (ok)
        ok = tap_ok((r->w0 = efix_weights(&f, &r->n)) != NULL, "%s: initial weights read", ferry_offload_name(mode));
    ferry_step_options so = options();
    for (int s = 0; ok && s < STEPS; s++)
        ok = tap_is_status(efix_step(&f, &so, &r->loss[s]), FERRY_OK, "%s: step %d", ferry_offload_name(mode), s);
    if (ok && ferry_engine_dtype(f.e) == FERRY_DTYPE_F16)
        tap_ok(ferry_engine_loss_scale(f.e) > 1.0f, "%s: f16 trained under a dynamic loss scale (now %g)",
               ferry_offload_name(mode), (double)ferry_engine_loss_scale(f.e));
    if (ok)
        ok = tap_ok((r->w = efix_weights(&f, &r->n)) != NULL, "%s: trained weights read", ferry_offload_name(mode));
    if (ok) {
        tap_diag("%s: loss %.4f -> %.4f", ferry_offload_name(mode), r->loss[0], r->loss[STEPS - 1]);
        tap_ok(r->loss[STEPS - 1] < 0.8f * r->loss[0], "(a) %s: the loss falls, %.4f -> %.4f (< 0.8 x)",
               ferry_offload_name(mode), r->loss[0], r->loss[STEPS - 1]);
        check_memory(&f, mode, budget);
    }
    efix_close(&f);
    return ok;
}

/* ||(w - w0) - (ref.w - ref.w0)|| / ||ref.w - ref.w0||. */
static double update_error(const mode_run *r, const mode_run *ref)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < r->n; i++) {
        double u = (double)r->w[i] - r->w0[i], v = (double)ref->w[i] - ref->w0[i];
        num += (u - v) * (u - v);
        den += v * v;
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

static void compare(const mode_run *r, const mode_run *none)
{
    int at = 0;
    double worst = efix_worst_rel(r->loss, none->loss, STEPS, &at);
    tap_ok(worst <= TOL_LOSS, "(a) %s vs none: every step's loss within %.0e relative (worst %.2e at step %d)",
           ferry_offload_name(r->mode), TOL_LOSS, worst, at);
    tap_ok(r->n == none->n && memcmp(r->w0, none->w0, r->n * sizeof *r->w0) == 0,
           "%s vs none: the same initial weights", ferry_offload_name(r->mode));
    double e = r->n == none->n ? update_error(r, none) : INFINITY;
    tap_ok(e <= TOL_UPDATE, "(a) %s vs none: the 20 steps' weight change within %.0e relative norm (%.2e)",
           ferry_offload_name(r->mode), TOL_UPDATE, e);
}

/* device_budget_bytes 0 on the card: the engine takes what is free once the
 * CUDA context, cuBLASLt (and NCCL) started, less the documented margin of
 * 256 MiB and 1% of that free memory (ferry.h), and trains within it. The
 * expectation is the formula itself: margin = 256 MiB + free / 100, so the
 * free memory lies in [100 (margin - 256 MiB), that + 99], and the budget
 * is that less the margin, rounded down to the arena's 256-byte grain. */
static void budget_zero(ferry_backend_kind kind)
{
    if (kind != FERRY_BACKEND_CUDA)
        return;
    gpt2_config c = model_config();
    efix f;
    ferry_status st = efix_open(&f, &c, kind, dtype, FERRY_OFFLOAD_OPTIMIZER, 0, B_, T_, SEED, BATCH_SEED);
    if (tap_is_status(st, FERRY_OK, "budget 0: a GPT-2 sets up in optimizer mode with device_budget_bytes 0")) {
        ferry_step_options so = options();
        float loss = 0;
        st = efix_step(&f, &so, &loss);
        tap_is_status(st, FERRY_OK, "budget 0: a step trains (loss %.4f)", loss);
        ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
        if (tap_is_status(ferry_engine_memory_stats(f.e, &ms), FERRY_OK, "budget 0: memory stats")) {
            const uint64_t b = ms.device_budget_bytes, m = ms.device_margin_bytes, base = 256ull << 20;
            const uint64_t lo = m > base ? (m - base) * 100 : 0, hi = lo + 99, free_b = b + m;
            tap_ok(b > 0 && m > base && free_b <= hi && free_b + 256 > lo,
                   "budget 0: budget %.1f MiB, margin %.1f MiB = 256 MiB + 1%% of the %.1f MiB free", b / 1048576.0,
                   m / 1048576.0, free_b / 1048576.0);
            tap_ok(free_b + ms.device_context_bytes + ms.device_library_bytes + ms.device_comm_bytes <=
                       ms.device_total_bytes,
                   "budget 0: budget and margin within what the context (%.1f MiB) and cuBLASLt (%.1f MiB) left "
                   "of the card's %.1f MiB",
                   ms.device_context_bytes / 1048576.0, ms.device_library_bytes / 1048576.0,
                   ms.device_total_bytes / 1048576.0);
            tap_ok(ms.device_total_peak_bytes <= b, "budget 0: the device peak %.2f MiB is within it",
                   ms.device_total_peak_bytes / 1048576.0);
        }
    }
    efix_close(&f);
}

int main(int argc, char **argv)
{
    ferry_backend_kind kind = efix_backend_arg(argc, argv);
    if (argc > 2 && ferry_dtype_parse(argv[2], &dtype) != FERRY_OK) {
        printf("Bail out! usage: %s [cuda|host] [auto|f32|bf16|f16]: %s\n", argv[0], ferry_last_error());
        return 2;
    }
    efix_require_gpu(kind);
    tap_diag("backend %s, dtype %s, seed %u, batch seed %u", ferry_backend_name(kind), ferry_dtype_name(dtype), SEED,
             BATCH_SEED);
    mode_run runs[4] = {{0}};
    const ferry_offload modes[4] = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS,
                                    FERRY_OFFLOAD_NVME};
    bool ok[4];
    for (int i = 0; i < 4; i++)
        ok[i] = train(kind, modes[i], &runs[i]);
    for (int i = 1; i < 4; i++)
        if (ok[0] && ok[i])
            compare(&runs[i], &runs[0]);
    if (ok[1] && ok[3])
        tap_ok(memcmp(runs[3].loss, runs[1].loss, sizeof runs[3].loss) == 0 && runs[3].n == runs[1].n &&
                   memcmp(runs[3].w, runs[1].w, runs[3].n * sizeof *runs[3].w) == 0,
               "nvme vs optimizer: every loss and every final weight bitwise equal");
    budget_zero(kind);
    rmdir(efix_nvme_dir());
    for (int i = 0; i < 4; i++)
        free(runs[i].w0), free(runs[i].w);
    return tap_done();
}
