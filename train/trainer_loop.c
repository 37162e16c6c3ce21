/* The trainer's loop: a step (each rank's micro-batches of the step's
 * windows, gradients summed, the engine's update, the figures), the
 * evaluation on the validation set (ranks taking batches in turn), a
 * sample, a save (the checkpoint and retention), and the loop that runs
 * them to --steps or to a signal, saving what a stop keeps; --eval-only's
 * one evaluation. What is printed and logged is trainer_report.c's; where
 * the ranks agree is trainer_ranks.c's. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "engine/intree.h"
#include "train/flag_words.h"
#include "train/trainer_internal.h"

/* A phase marker in the memory trace; the trace is written out there, so a
 * full disk under it is found here, with the training state untouched. */
static ferry_status mark(trainer *t, int64_t step, const char *phase)
{
    ferry_status st = ferry_engine_mark(t->engine, step, phase);
    if (st != FERRY_OK)
        t->failed_output = "the memory trace";
    return st;
}

/* With several ranks: the step's loss over all of them, and whether any
 * rank has had a signal (then no evaluation or sample follows the step). */
/* The step's losses summed over the ranks, in rank order, in double: each
 * rank's sum is of its micro-batches in order, in double too, so N ranks
 * and one process with N times the micro-batches add the same numbers in
 * the same order and report the same loss. */
static ferry_status agree_on_step(trainer *t, double *sum) { return trainer_agree(t, sum, 1); }

/* The next batch of `l` into the trainer's buffers: inputs, targets (-1
 * where the data's mask says no target) and positions; *targets counts the
 * targets. The positions restart at each example of packed instruction
 * data (0..T-1 for token streams); batch_forward hands them to the model,
 * so a packed row's examples never see each other. */
static ferry_status next_batch(trainer *t, tok_loader *l, double *targets)
{
    ferry_status st = tok_loader_next_ex(l, t->inputs, t->targets, t->positions);
    if (st == FERRY_OK)
        *targets += (double)tok_loader_last(l).targets;
    return st;
}

/* The forward of the batch next_batch read, with its positions where the
 * data is masked (packed examples: each attends to itself and its
 * positions restart); token streams take none, the model bit for bit as
 * without packing. */
static ferry_status batch_forward(trainer *t, lmodel_acts *acts, const model_hooks *h, backend_stream *s,
                                  bool for_backward)
{
    ferry_status st = lmodel_set_positions(acts, t->masked ? t->positions : NULL);
    return st != FERRY_OK ? st : lmodel_forward(t->model, acts, h, s, t->inputs, t->targets, for_backward);
}

static ferry_status train_step(trainer *t, step_figures *f)
{
    model_hooks hooks = model_engine_hooks(t->engine);
    backend_stream *s = engine_embed_stream(t->engine);
    double t0 = clock_now_ms();
    double sum = 0;
    /* The step's world x --grad-accum windows, rank r taking the r-th
     * --grad-accum; every rank reads them all, so every loader stays where
     * one process's would be. Gradients are summed over all of them: the
     * loss scale (1 without loss scaling), over the step's micro-batches of
     * every rank, rides on the backward's start. */
    int K = t->o.grad_accum, M = K * t->world, read = 0;
    f->targets = 0;
    float grad_scale = ferry_engine_loss_scale(t->engine) / (float)M;
    ferry_status st = FERRY_OK;
    for (int k = 0; k < K && st == FERRY_OK; k++) {
        float loss = 0;
        /* A signal: the step stops between micro-batches, and what it has
         * done is dropped; the last complete step is what a save keeps.
         * With several ranks they agree on it before each micro-batch, so
         * every rank drops the step after the same micro-batch, with the
         * same collectives issued. */
        if (k > 0 && (st = trainer_agree(t, NULL, 0)) != FERRY_OK)
            break;
        if (k > 0 && trainer_stopping(t)) {
            t->cut_micro = k;
            return ferry_engine_abandon_step(t->engine);
        }
        for (; read <= t->rank * K + k && st == FERRY_OK; read++) /* up to this rank's k-th window */
            st = next_batch(t, t->train, &f->targets);
        if (st == FERRY_OK) st = ferry_engine_begin_micro_batch(t->engine, k, K);
        /* Each pass marked in the trace (memprof --step shows them); a
         * failed trace stops the run. */
        if (st == FERRY_OK) st = mark(t, t->step + 1, "forward");
        if (st == FERRY_OK) st = batch_forward(t, t->acts, &hooks, s, true);
        if (st == FERRY_OK) st = mark(t, t->step + 1, "backward");
        if (st == FERRY_OK) st = lmodel_backward(t->model, t->acts, &hooks, s, grad_scale);
        if (st == FERRY_OK) st = lmodel_loss(t->acts, s, &loss);
        sum += loss;
    }
    for (; read < M && st == FERRY_OK; read++) /* the later ranks' windows */
        st = next_batch(t, t->train, &f->targets);
    double t1 = clock_now_ms();
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.lr = f->lr = train_lr_at(&t->o, (int)t->step);
    so.beta1 = t->o.beta1;
    so.beta2 = t->o.beta2;
    so.eps = t->o.eps;
    so.weight_decay = t->o.weight_decay;
    so.max_grad_norm = t->o.clip;
    ferry_step_report rep = FERRY_STEP_REPORT_INIT;
    if (st == FERRY_OK)
        st = mark(t, t->step + 1, "optimizer");
    if (st == FERRY_OK)
        st = ferry_engine_step(t->engine, &so, &rep);
    if (st == FERRY_OK)
        st = agree_on_step(t, &sum);
    if (st != FERRY_OK)
        return st;
    t->step++;
    f->loss_scale = rep.loss_scale;
    f->skipped_steps = rep.skipped_steps;
    t->pos = tok_loader_tell(t->train);
    double t2 = clock_now_ms();
    f->loss = (float)(sum / M);
    f->grad_norm = rep.grad_norm;
    f->skipped = rep.skipped;
    char group[48] = "";
    if (rep.skipped && rep.bad_group >= 0 && rep.bad_group < lmodel_num_groups(t->model)) {
        model_desc d = lmodel_desc(t->model);
        d.group_label(d.m, rep.bad_group, group, sizeof group);
    }
    /* Said after the step's line and log record: the run stops there. */
    f->too_many_skips = train_skips_count(&t->skips, t->step, &rep, group[0] ? group : NULL) != FERRY_OK;
    ferry_step_timing tm = FERRY_STEP_TIMING_INIT;
    ferry_engine_step_timing(t->engine, &tm);
    f->timing = tm;
    f->step_ms = t2 - t0;
    f->compute_ms = (t1 - t0) - tm.compute_wait_transfer_ms - tm.compute_wait_optimizer_ms;
    double tokens = (double)t->o.batch * t->o.seq * M;
    t->tokens_done += tokens;
    t->targets_done += f->targets;
    f->tokens = tokens;
    f->tokens_per_s = tokens / (f->step_ms / 1e3);
    double peak = trainer_peak_tflops(&t->o);
    f->mfu = peak > 0 && ferry_engine_backend(t->engine) == FERRY_BACKEND_CUDA
                 ? trainer_flops_per_token(t) * f->tokens_per_s / t->world / (peak * 1e12)
                 : 0;
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(t->engine, &ms);
    f->mem = ms;
    return FERRY_OK;
}

/* The validation loss over --eval-batches batches; *cut when a signal ended
 * it early (the loss is then of the batches done, and not reported).
 * Rank r evaluates batches r, r + N, ...: in rounds of N batches, every
 * rank runs one forward a round (the last batch again, uncounted, when it
 * has none left), since a forward may need every rank (params mode gathers
 * weights); the ranks agree on a signal before each round. */
static ferry_status evaluate(trainer *t, float *val_loss, bool *cut)
{
    model_hooks hooks = model_engine_hooks(t->engine);
    backend_stream *s = engine_embed_stream(t->engine);
    ferry_status st = ferry_engine_begin_inference(t->engine);
    if (st != FERRY_OK)
        return st;
    if ((st = mark(t, t->step, "eval")) != FERRY_OK) {
        ferry_engine_end_inference(t->engine);
        return st;
    }
    tok_loader_reset(t->val);
    lmodel_acts *acts = t->eval_acts ? t->eval_acts : t->acts;
    int E = trainer_eval_batches(t), W = t->world, rounds = (E + W - 1) / W, mine = 0;
    double v[2] = {0, 0}; /* loss sum, batches (masked data: loss x targets, targets) */
    *cut = false;
    for (int i = 0; i < E && st == FERRY_OK; i++) {
        float loss = 0;
        if (i % W == 0 && (st = trainer_agree(t, NULL, 0)) != FERRY_OK)
            break;
        if (i % W == 0 && trainer_stopping(t)) {
            *cut = true;
            break;
        }
        double n = 0;
        st = next_batch(t, t->val, &n);
        if (st != FERRY_OK || i % W != t->rank)
            continue;
        if (st == FERRY_OK) st = batch_forward(t, acts, &hooks, s, false);
        if (st == FERRY_OK) st = lmodel_loss(acts, s, &loss);
        /* Masked data: the mean over every target of the batches (a batch
         * holds as many as its examples' answers); token streams: the mean
         * of the batches' means, as before (each has B*T targets). */
        v[0] += t->masked ? (double)loss * n : loss;
        v[1] += t->masked ? n : 1;
        mine++;
    }
    for (; !*cut && mine < rounds && st == FERRY_OK; mine++)
        st = batch_forward(t, acts, &hooks, s, false);
    ferry_status end = ferry_engine_end_inference(t->engine);
    if (st == FERRY_OK && end == FERRY_OK && W > 1 && !*cut)
        st = ferry_world_all_reduce(v, 2);
    *val_loss = v[1] > 0 ? (float)(v[0] / v[1]) : 0;
    t->val_targets = t->masked ? v[1] : 0;
    return st != FERRY_OK ? st : end;
}

/* An evaluation said: its line, then its log record (or, cut short by a
 * signal, that it is not reported; *cut says so). */
static ferry_status evaluate_and_say(trainer *t, bool *cut)
{
    float val = 0;
    ferry_status st = evaluate(t, &val, cut);
    if (st != FERRY_OK)
        return st;
    if (*cut) {
        if (trainer_leader(t) && !t->o.eval_only)
            fprintf(stderr, "%s: the evaluation at step %lld was cut short by the signal; it is not "
                            "reported\n", t->prog->name, (long long)t->step);
        return FERRY_OK;
    }
    if (trainer_leader(t) && t->masked)
        printf("step %lld | val loss %.4f over %.0f targets\n", (long long)t->step, (double)val, t->val_targets);
    else if (trainer_leader(t))
        printf("step %lld | val loss %.4f\n", (long long)t->step, (double)val);
    if ((st = trainer_stdout_written(t)) != FERRY_OK)
        return st;
    return trainer_log_record(t, "eval", NULL, val);
}

ferry_status trainer_eval_only(trainer *t)
{
    bool cut = false;
    return evaluate_and_say(t, &cut);
}

/* The key/value cache of one sample: the prompt and the new tokens within
 * the training sequence plus --sample-tokens (at most the model's context
 * and sliding window), on the sampling backend or the engine's arena. In
 * the engine's arena it may not fit beside training's buffers, and a head
 * above 256 has no cache attention: then NULL, said once, and the sample
 * recomputes over the training activations. */
static ferry_status sample_cache(trainer *t, lmodel_kv **kv)
{
    *kv = NULL;
    long long want = (long long)t->o.seq + t->o.sample_tokens;
    int ctx = lmodel_context(t->model);
    const llama_model *l = lmodel_llama(t->model);
    if (l && llama_get_config(l)->sliding_window > 0 && llama_get_config(l)->sliding_window < ctx)
        ctx = llama_get_config(l)->sliding_window;
    int Tmax = want < ctx ? (int)want : ctx;
    model_allocator alloc = t->resident ? model_backend_allocator(t->sample_be) : model_engine_allocator(t->engine);
    backend *be = t->resident ? t->sample_be : engine_embed_backend(t->engine);
    ferry_status st = lmodel_kv_create(t->model, be, 1, Tmax, 0, &alloc, kv);
    if ((st == FERRY_ERR_OUT_OF_MEMORY && !t->resident) || st == FERRY_ERR_UNSUPPORTED) {
        if (!t->kv_refused && trainer_leader(t))
            fprintf(stderr, "%s: no key/value cache for samples (%d positions): %s; samples recompute the "
                            "sequence for each token\n", t->prog->name, Tmax, ferry_last_error());
        t->kv_refused = true;
        err_clear();
        return FERRY_OK;
    }
    return st;
}

ferry_status trainer_print_sample(trainer *t)
{
    char *text = NULL;
    lmodel_kv *kv = NULL;
    ferry_status st = sample_cache(t, &kv);
    if (st == FERRY_OK) /* a sample is one sequence from position 0: no packed batch's positions */
        st = lmodel_set_positions(t->acts, NULL);
    if (st == FERRY_OK && t->resident) {
        model_hooks hooks = model_resident_hooks(t->resident);
        st = sample_text_hooks(t->model, kv, t->acts, &hooks, t->sample_stream, 1, t->o.seq, t->tok, t->o.prompt,
                               t->o.sample_tokens, &t->smp, &text);
    } else if (st == FERRY_OK) {
        st = sample_text(t->engine, t->model, kv, t->acts, t->o.batch, t->o.seq, t->tok, t->o.prompt,
                         t->o.sample_tokens, &t->smp, &text);
    }
    lmodel_kv_destroy(kv);
    if (st == FERRY_OK && trainer_leader(t)) { /* every rank samples alike; one prints */
        printf("---- sample at step %lld (temperature %.2f, top-k %d, top-p %.2f) ----\n%s\n----\n",
               (long long)t->step, (double)t->o.temperature, t->o.top_k, (double)t->o.top_p, text);
        st = trainer_stdout_written(t);
    }
    free(text);
    return st;
}

ferry_status trainer_save(trainer *t)
{
    const train_options *o = &t->o;
    train_resume r;
    memset(&r, 0, sizeof r);
    r.step = t->step;
    r.data = t->pos;
    r.sample_rng = t->smp.rng;
    r.model = t->spec;
    r.batch = o->batch, r.seq = o->seq;
    r.grad_accum = o->grad_accum * t->world; /* the step's micro-batches of every rank */
    snprintf(r.run, sizeof r.run, "%s", t->run);
    r.settings = (train_settings){1, o->seed, (int32_t)ferry_engine_dtype(t->engine), (int32_t)ferry_engine_offload(t->engine),
                                  o->delayed_update, o->warmup, o->steps, o->lr, o->lr_min_frac, o->weight_decay,
                                  o->beta1, o->beta2, o->eps, o->clip, o->checkpoint_every};
    ferry_engine_mark(t->engine, t->step, "checkpoint"); /* a failed trace is said at the next step, after the save */
    /* The tokenizer goes with the checkpoint, so that it samples from any folder. */
    const char *tok_files[3];
    char beside[2][PATH_MAX + 32];
    int ntok = trainer_tokenizer_files(t, tok_files, beside, 3);
    ferry_status st = run_state_save_files(t->o.checkpoint_dir, t->step, t->engine, t->model, &r, tok_files, ntok);
    if (st != FERRY_OK)
        return st;
    t->saved_step = t->step;
    snprintf(t->saved_in, sizeof t->saved_in, "%s/step_%08lld", t->o.checkpoint_dir, (long long)t->step);
    if (!trainer_leader(t))
        return FERRY_OK; /* rank 0 wrote it */
    if (!t->o.quiet)
        printf("saved checkpoint %s\n", t->saved_in);
    /* Retention failing is no reason to stop training: say so and go on. */
    if (run_state_prune(t->o.checkpoint_dir, t->o.keep_last, t->run) != FERRY_OK)
        fprintf(stderr, "%s: warning: %s\n", t->prog->name, train_last_error());
    return FERRY_OK;
}

static bool every(int n, int64_t step) { return n > 0 && step % n == 0; }

ferry_status trainer_train(trainer *t)
{
    t->started_ms = clock_now_ms();
    t->start_step = t->step;
    ferry_status st = FERRY_OK;
    while (t->step < t->o.steps && st == FERRY_OK) {
        /* Before each step, and before each micro-batch in it (train_step),
         * the ranks agree on a signal: a stop is then the same on every rank. */
        if ((st = trainer_agree(t, NULL, 0)) != FERRY_OK || trainer_stopping(t))
            break;
        step_figures f = {0};
        st = train_step(t, &f);
        if (st != FERRY_OK || t->cut_micro)
            break;
        if (!t->o.quiet && trainer_leader(t))
            trainer_progress_line(t, &f);
        if ((st = trainer_stdout_written(t)) != FERRY_OK || (st = trainer_log_record(t, "step", &f, 0)) != FERRY_OK)
            break;
        if (f.too_many_skips) {
            t->agreed_failure = true; /* every rank had the same step reports */
            st = FERRY_ERR_STATE;
            break;
        }
        if (!trainer_stopping(t) && (every(t->o.eval_every, t->step) || (t->o.eval_every && t->step == t->o.steps))) {
            bool cut = false;
            if ((st = evaluate_and_say(t, &cut)) != FERRY_OK || cut)
                break;
        }
        if (!trainer_stopping(t) && every(t->o.sample_every, t->step) && (st = trainer_print_sample(t)) != FERRY_OK)
            break;
        if (t->o.checkpoint_dir && (every(t->o.checkpoint_every, t->step) || t->step == t->o.steps))
            st = trainer_save(t);
    }
    /* Stopped by a signal: keep what this run trained since the last save
     * (nothing when it stopped before its first step). */
    if (st == FERRY_OK && trainer_stopping(t) && t->o.checkpoint_dir && t->step > t->start_step &&
        t->step > t->saved_step)
        st = trainer_save(t);
    return st;
}
