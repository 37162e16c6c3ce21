/* What the trainer says: the setup lines (the engine, the ranks, the
 * model), a step's progress line (loss, throughput, MFU, memory, where the
 * time went, ETA), the JSON Lines log's records, the summary, and after a
 * failure what is kept and what is lost; every write to stdout and to the
 * log checked, so that a full disk stops the run instead of cutting its
 * record. Not the log file itself (trainer_folder.c opens and repairs it). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/units.h"
#include "backend/comm.h"
#include "train/flag_words.h"
#include "train/trainer_internal.h"

/* Dense bf16 peak of well-known GPUs, TFLOP/s, for MFU. */
double trainer_peak_tflops(const train_options *o)
{
    if (o->peak_tflops > 0)
        return o->peak_tflops;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (ferry_system_probe(&info) != FERRY_OK || info.gpu_count == 0)
        return 0;
    static const struct { const char *name; double tflops; } table[] = {
        {"H200", 989}, {"H100", 989}, {"H800", 989}, {"A100", 312}, {"A800", 312}, {"L40S", 362},
        {"4090", 165}, {"3090", 71}, {"A10", 125}, {"L4", 121}, {"V100", 125},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(info.gpu_name, table[i].name))
            return table[i].tflops;
    return 0;
}

double trainer_flops_per_token(const trainer *t) { return lmodel_flops_per_token(t->model, t->o.seq); }

static void fmt_duration(char *buf, size_t cap, double seconds)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(buf, cap, "%lds", s);
}

/* What the engine's device memory is called on the progress line and in the
 * summary: "gpu" on a GPU; "device" on the host backend, whose device is the
 * machine's own memory standing in for one. */
static const char *device_word(const trainer *t)
{
    return ferry_engine_backend(t->engine) == FERRY_BACKEND_CUDA ? "gpu" : "device";
}

void trainer_progress_line(trainer *t, const step_figures *f)
{
    char gpu[32], gpu_peak[32], host[32], host_peak[32], eta[32], mfu[32] = "", scale[64] = "";
    units_fmt_bytes(gpu, sizeof gpu, f->mem.device_total_current_bytes);
    units_fmt_bytes(gpu_peak, sizeof gpu_peak, f->mem.device_total_peak_bytes);
    units_fmt_bytes(host, sizeof host, f->mem.host_in_use_bytes);
    units_fmt_bytes(host_peak, sizeof host_peak, f->mem.host_peak_bytes);
    double done = (double)(t->step - t->start_step);
    double per_step = done > 0 ? (clock_now_ms() - t->started_ms) / done : f->step_ms;
    fmt_duration(eta, sizeof eta, per_step * (double)(t->o.steps - t->step) / 1e3);
    if (f->mfu > 0)
        snprintf(mfu, sizeof mfu, " | MFU %4.1f%%", f->mfu * 100);
    if (f->loss_scale > 0)
        snprintf(scale, sizeof scale, " | scale %g", (double)f->loss_scale);
    /* Several ranks: their world size, throughput per rank, and the wait on collectives. */
    char ranks[64] = "", comm[48] = "";
    if (t->world > 1) {
        snprintf(ranks, sizeof ranks, " (%.0f/rank) | %d ranks", f->tokens_per_s / t->world, t->world);
        snprintf(comm, sizeof comm, ", comm wait %.0f", f->timing.compute_wait_comm_ms);
    }
    char skips[64], targets[64] = "";
    if (t->masked)
        snprintf(targets, sizeof targets, " | %.0f of %.0f tokens targets", f->targets, f->tokens);
    printf("step %*lld/%d | loss %7.4f%s%s%s%s | %7.0f tok/s%s%s | %s %s (peak %s) | host %s (peak %s) | "
           "%.0f ms: compute %.0f, xfer wait %.0f, opt wait %.0f%s | ETA %s\n",
           (int)snprintf(NULL, 0, "%d", t->o.steps), (long long)t->step, t->o.steps, (double)f->loss,
           f->skipped ? " (skipped: inf/nan)" : "", scale, train_skips_describe(&t->skips, skips, sizeof skips),
           targets, f->tokens_per_s, ranks, mfu, device_word(t), gpu, gpu_peak, host, host_peak, f->step_ms, f->compute_ms,
           f->timing.compute_wait_transfer_ms, f->timing.compute_wait_optimizer_ms, comm, eta);
    fflush(stdout);
}

/* What the run prints goes to stdout, flushed as it goes: a write that
 * fails (a full disk, /dev/full) stops the run, as the log's does. Rank 0
 * alone prints, so it alone checks. */
ferry_status trainer_stdout_written(trainer *t)
{
    if (!trainer_leader(t))
        return FERRY_OK;
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return FERRY_OK;
    fileio_check_stdout_at_exit(NULL); /* said here; the exit's check need not say it again */
    t->failed_output = "stdout";
    return err_set(FERRY_ERR_IO, "writing the progress to stdout: %s; the run stops (is the disk full?)",
                   errno ? strerror(errno) : "a write error");
}

/* Writes one record (and frees it), flushed: a write that fails (a full
 * disk) is an error, so the log is never silently cut. */
static ferry_status log_write(trainer *t, cJSON *j)
{
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!line)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the log '%s': out of memory for a record", t->o.log);
    errno = 0;
    bool written = fprintf(t->log, "%s\n", line) >= 0 && fflush(t->log) == 0;
    free(line);
    if (!written) {
        t->failed_output = "the log";
        return err_set(FERRY_ERR_IO, "writing the log '%s': %s; the log is incomplete (is the disk full?)", t->o.log,
                       errno ? strerror(errno) : "write error");
    }
    return FERRY_OK;
}

/* One record of the JSON Lines log: a step's figures, or (f NULL) an
 * evaluation's loss. */
ferry_status trainer_log_record(trainer *t, const char *kind, const step_figures *f, double val_loss)
{
    if (!t->log)
        return FERRY_OK;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", kind);
    cJSON_AddNumberToObject(j, "step", (double)t->step);
    if (f) {
        cJSON_AddNumberToObject(j, "loss", f->loss);
        cJSON_AddNumberToObject(j, "lr", f->lr);
        cJSON_AddNumberToObject(j, "grad_norm", isfinite(f->grad_norm) ? f->grad_norm : -1);
        cJSON_AddBoolToObject(j, "skipped", f->skipped);
        cJSON_AddNumberToObject(j, "skips_in_a_row", (double)t->skips.in_a_row);
        cJSON_AddNumberToObject(j, "skips_total", (double)t->skips.total); /* in this run */
        cJSON_AddNumberToObject(j, "skipped_steps", (double)f->skipped_steps); /* since training began */
        if (f->loss_scale > 0)
            cJSON_AddNumberToObject(j, "loss_scale", f->loss_scale);
        cJSON_AddNumberToObject(j, "step_ms", f->step_ms);
        cJSON_AddNumberToObject(j, "compute_ms", f->compute_ms);
        cJSON_AddNumberToObject(j, "transfer_wait_ms", f->timing.compute_wait_transfer_ms);
        cJSON_AddNumberToObject(j, "optimizer_wait_ms", f->timing.compute_wait_optimizer_ms);
        cJSON_AddNumberToObject(j, "optimizer_ms", f->timing.optimizer_ms);
        cJSON_AddNumberToObject(j, "tokens_per_s", f->tokens_per_s);
        cJSON_AddNumberToObject(j, "tokens", f->tokens);   /* the step's, of every micro-batch and rank */
        cJSON_AddNumberToObject(j, "targets", f->targets); /* of them, the targets the loss is the mean over */
        cJSON_AddNumberToObject(j, "mfu", f->mfu);
        cJSON_AddNumberToObject(j, "gpu_bytes", (double)f->mem.device_total_current_bytes);
        cJSON_AddNumberToObject(j, "gpu_peak_bytes", (double)f->mem.device_total_peak_bytes);
        cJSON_AddNumberToObject(j, "host_bytes", (double)f->mem.host_in_use_bytes);
        cJSON_AddNumberToObject(j, "host_peak_bytes", (double)f->mem.host_peak_bytes);
        cJSON_AddNumberToObject(j, "world_size", t->world);
        cJSON_AddNumberToObject(j, "comm_wait_ms", f->timing.compute_wait_comm_ms);
        cJSON_AddNumberToObject(j, "comm_bytes", f->timing.comm_bytes);
    } else {
        cJSON_AddNumberToObject(j, "val_loss", val_loss);
        if (t->masked)
            cJSON_AddNumberToObject(j, "targets", t->val_targets); /* the loss is the mean over them */
    }
    return log_write(t, j);
}

/* A resumed run's first record: the steps logged after it replace those of
 * the same number logged before it (a run killed after its last save had
 * logged steps it did not keep), so a reader takes each step's last record. */
ferry_status trainer_log_resume(trainer *t)
{
    if (!t->log)
        return FERRY_OK;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "resume");
    cJSON_AddNumberToObject(j, "step", (double)t->step);
    cJSON_AddStringToObject(j, "run", t->run);
    cJSON_AddStringToObject(j, "checkpoint", t->ckpt);
    return log_write(t, j);
}

/* The model's shape, as its line says it. */
static void describe_model(const trainer *t, char *buf, size_t cap)
{
    const model_spec *s = &t->spec;
    if (s->family == MODEL_FAMILY_LLAMA) {
        const llama_config *c = &s->llama;
        snprintf(buf, cap, "%s, %d layers, %d heads (%d key/value), %d wide, %d in the MLP, vocab %d, context %d",
                 c->model_type, c->n_layer, c->n_head, c->n_kv_head, c->n_embd, c->intermediate_size, c->vocab_size,
                 c->max_seq_len);
        return;
    }
    const gpt2_config *c = &s->gpt2;
    snprintf(buf, cap, "%d layers, %d heads, %d wide, vocab %d, context %d", c->n_layer, c->n_head, c->n_embd,
             c->vocab_size, c->max_seq_len);
}

/* Masked shards: their examples, how they fill the rows, and the targets. */
static void say_instruction_data(const trainer *t, const char *which, const tok_loader *l)
{
    if (!l || !tok_shard_is_masked(tok_loader_format(l)))
        return;
    uint64_t tokens = tok_loader_tokens(l), targets = tok_loader_target_tokens(l);
    printf("%s data: %llu examples, %llu tokens, %llu of them targets (%.1f%%), in %llu rows of %d (%s)",
           which, (unsigned long long)tok_loader_examples(l), (unsigned long long)tokens,
           (unsigned long long)targets, tokens ? 100.0 * (double)targets / (double)tokens : 0.0,
           (unsigned long long)tok_loader_rows(l), t->o.seq, t->o.no_pack ? "one example a row, --no-pack" : "packed");
    if (tok_loader_truncated(l))
        printf("; %llu truncated to --seq + 1 tokens", (unsigned long long)tok_loader_truncated(l));
    printf("\n");
}

/* The lines before the first step (rank 0's, without --quiet): ferry and
 * the engine (or sampling's backend), offload auto's choice, the ranks,
 * the model and the batch. */
ferry_status trainer_say_setup(trainer *t)
{
    if (t->o.quiet || !trainer_leader(t))
        return FERRY_OK;
    if (t->engine)
        printf("ferry %s | %s\n", ferry_version(), ferry_engine_describe(t->engine));
    else
        printf("ferry %s | %s backend, the weights alone (no engine, no optimizer state)\n", ferry_version(),
               ferry_backend_name(backend_kind(t->sample_be)));
    if (t->engine && ferry_engine_auto_reason(t->engine)[0]) /* offload auto: what it chose and why */
        printf("%s\n", ferry_engine_auto_reason(t->engine));
    if (t->world > 1) {
        char timeouts[400];
        comm_world_describe_timeouts(timeouts, sizeof timeouts);
        printf("data parallel: %d ranks (%s), %d micro-batches of %d x %d per step, rank r taking the r-th %d\n",
               t->world, t->world_info.launcher, t->world * t->o.grad_accum, t->o.batch, t->o.seq, t->o.grad_accum);
        printf("data parallel: %s\n", timeouts);
    }
    say_instruction_data(t, "training", t->train);
    say_instruction_data(t, "validation", t->val);
    char model[256];
    describe_model(t, model, sizeof model);
    printf("model: %s: %.1fM parameters", model, (double)lmodel_num_params(t->model) / 1e6);
    if (t->o.sample_only)
        printf(" | sampling with a window of %d tokens\n", t->o.seq);
    else if (t->o.eval_only) {
        int e = trainer_eval_batches(t);
        printf(" | evaluating %d batch%s of %d x %d\n", e, e == 1 ? "" : "es", t->eval_batch, t->o.seq);
    } else if (t->world > 1)
        printf(" | batch %d x %d x %d accum x %d ranks = %lld tokens/step%s\n", t->o.batch, t->o.seq,
               t->o.grad_accum, t->world, (long long)t->o.batch * t->o.seq * t->o.grad_accum * t->world,
               t->o.recompute ? " | recompute" : "");
    else
        printf(" | batch %d x %d x %d accum = %lld tokens/step%s\n", t->o.batch, t->o.seq, t->o.grad_accum,
               (long long)t->o.batch * t->o.seq * t->o.grad_accum, t->o.recompute ? " | recompute" : "");
    return trainer_stdout_written(t);
}

void trainer_summary(trainer *t)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(t->engine, &ms);
    char dp[32], hp[32];
    double secs = (clock_now_ms() - t->started_ms) / 1e3, rate = secs > 0 ? t->tokens_done / secs : 0;
    char ranks[64] = "";
    if (t->world > 1)
        snprintf(ranks, sizeof ranks, ", %.0f per rank of %d", rate / t->world, t->world);
    if (!trainer_leader(t))
        return;
    char targets[64] = "";
    if (t->masked)
        snprintf(targets, sizeof targets, " (%.0f of them targets)", t->targets_done);
    printf("done: %lld steps, %.0f tokens%s in %.1f s (%.0f tok/s%s); peak memory: %s %s, host %s%s\n",
           (long long)(t->step - t->start_step), t->tokens_done, targets, secs, rate, ranks, device_word(t),
           units_fmt_bytes(dp, sizeof dp, ms.device_total_peak_bytes), units_fmt_bytes(hp, sizeof hp, ms.host_peak_bytes),
           t->world > 1 ? " (rank 0's)" : "");
}

/* After a failure in training, said on stderr below the error: what is
 * kept. When an output failed (the memory trace, the log, stdout: a full
 * disk) the state in memory is whole, so the steps trained since the last
 * save are saved now (one process: with several ranks the failure is
 * rank 0's alone and the others are gone); otherwise (the engine, the NVMe
 * tier, the data) the state may be half updated and is not saved, and the
 * line says which checkpoint is the last, or that there is none, and how
 * many steps are lost. */
void trainer_keep_what_can_be_kept(trainer *t)
{
    const train_options *o = &t->o;
    const char *prog = t->prog->name;
    if (!trainer_leader(t) || !t->started_ms || t->step == t->start_step)
        return; /* nothing trained in this run: nothing to keep or lose */
    bool whole = t->failed_output && t->world == 1 && o->checkpoint_dir && t->step > t->saved_step &&
                 t->step > 0 && ferry_engine_abandon_step(t->engine) == FERRY_OK;
    if (whole && trainer_save(t) == FERRY_OK) {
        fprintf(stderr, "%s: %s failed, not the training: its state was whole, and step %lld is saved in %s; "
                        "resume with --resume %s once %s can be written\n",
                prog, t->failed_output, (long long)t->step, t->saved_in, o->checkpoint_dir, t->failed_output);
        return;
    }
    if (whole)
        fprintf(stderr, "%s: saving step %lld after that failed too: %s\n", prog, (long long)t->step,
                train_last_error());
    long long lost = (long long)(t->step - (t->saved_step > t->start_step ? t->saved_step : t->start_step));
    if (t->saved_step >= 0 && t->saved_step == t->step)
        fprintf(stderr, "%s: nothing is lost: the checkpoint of step %lld, the last one trained, is %s\n", prog,
                (long long)t->step, t->saved_in);
    else if (t->saved_step >= 0)
        fprintf(stderr, "%s: the last checkpoint is step %lld, %s; the %lld step%s trained after it %s lost\n",
                prog, (long long)t->saved_step, t->saved_in, lost, lost == 1 ? "" : "s", lost == 1 ? "is" : "are");
    else
        fprintf(stderr, "%s: nothing was saved (%s): the %lld step%s trained %s lost\n", prog,
                o->checkpoint_dir ? "no checkpoint had been written yet" : "no --checkpoint-dir", lost,
                lost == 1 ? "" : "s", lost == 1 ? "is" : "are");
}
