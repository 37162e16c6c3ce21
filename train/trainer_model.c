/* Which model the trainer trains and on what: a preset or the model flags
 * (GPT-2's, or with a program that trains it the Llama family's presets),
 * --init-from's Hugging Face weights and the config.json beside them, or
 * --resume's checkpoint with the settings it was trained with (what the
 * command line may change of them and what it may not); the families a
 * program refuses, and sampling a model whose tokenizer ferry cannot read;
 * the tokenizer, and the training and validation data. Not the weights
 * themselves (trainer_engine.c reads them into the engine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "train/hf_checkpoint.h"
#include "train/hf_llama.h"
#include "train/tok_find.h"
#include "train/trainer_internal.h"

/* ---- the families a program trains ---- */

int trainer_refuse_family(const trainer *t)
{
    const train_options *o = &t->o;
    if (t->spec.family != MODEL_FAMILY_LLAMA)
        return 0;
    char what[PATH_MAX + 32];
    if (o->resume || o->init_from)
        snprintf(what, sizeof what, "%s '%s' holds", o->resume ? "--resume" : "--init-from",
                 o->resume ? o->resume : o->init_from);
    else
        snprintf(what, sizeof what, "--model %s is", o->model);
    return train_options_refuse_llama(o, what);
}

/* ---- --resume: the checkpoint's model and settings ---- */

/* The shape the model flags name: layers, heads, width, vocabulary, context. */
static void shape_of(const model_spec *s, int out[5])
{
    const llama_config *l = &s->llama;
    const gpt2_config *g = &s->gpt2;
    bool llama = s->family == MODEL_FAMILY_LLAMA;
    const int f[5] = {llama ? l->n_layer : g->n_layer, llama ? l->n_head : g->n_head, llama ? l->n_embd : g->n_embd,
                      llama ? l->vocab_size : g->vocab_size, llama ? l->max_seq_len : g->max_seq_len};
    memcpy(out, f, sizeof f);
}

/* With --resume the model is the checkpoint's: model flags given as well
 * must agree with it. */
static ferry_status check_model_flags(const trainer *t)
{
    const train_options *o = &t->o;
    int c[5], p[5];
    shape_of(&t->spec, c);
    const struct { const char *flag; int given, want; } f[] = {
        {"--layers", o->layers, c[0]}, {"--heads", o->heads, c[1]},     {"--width", o->width, c[2]},
        {"--vocab", o->vocab, c[3]},   {"--context", o->context, c[4]},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (train_options_given(o, f[i].flag) && f[i].given != f[i].want)
            return err_set(FERRY_ERR_INVALID_ARGUMENT, "%s %d differs from the checkpoint's model (%d); with --resume "
                                                       "the model is the checkpoint's: leave out the model flags or "
                                                       "give its values",
                           f[i].flag, f[i].given, f[i].want);
    model_spec preset;
    memset(&preset, 0, sizeof preset);
    ferry_status known = FERRY_ERR_INVALID_ARGUMENT;
    if (train_options_given(o, "--model") && o->model)
        known = t->prog->llama ? model_spec_preset(o->model, &preset) : gpt2_config_preset(o->model, &preset.gpt2);
    shape_of(&preset, p);
    if (train_options_given(o, "--model") && o->model &&
        (known != FERRY_OK || preset.family != t->spec.family || p[0] != c[0] || p[1] != c[1] || p[2] != c[2]))
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--model %s is not the checkpoint's model (%d layers, %d heads, %d "
                                                   "wide); with --resume leave out --model",
                       o->model, c[0], c[1], c[2]);
    return FERRY_OK;
}

/* A setting the command line gave differently from the checkpoint, for
 * the one line that says what changed. */
static void note_change(char *buf, size_t cap, const char *flag, const char *now, const char *was)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s %s (was %s)", n ? ", " : "", flag, now, was);
}

/* The device type, the offload mode and the delayed update of the
 * checkpoint (of one that records its settings), as take_checkpoint_settings
 * says; and its moments' form, from the engine's checkpoint. */
static ferry_status take_engine_settings(trainer *t, char *changed, size_t cap)
{
    train_options *o = &t->o;
    const train_settings *c = &t->from.settings;
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
        note_change(changed, cap, "--offload", ferry_offload_name(o->offload),
                    ferry_offload_name((ferry_offload)c->offload));
    char state[PATH_MAX];
    ferry_moments form = FERRY_MOMENTS_F32;
    ferry_status st = run_state_join(state, sizeof state, t->ckpt, "state.ferry");
    if (st == FERRY_OK)
        st = ferry_engine_checkpoint_moments(state, &form);
    if (st != FERRY_OK)
        return st;
    if (!train_options_given(o, "--moments"))
        o->moments = form; /* the run goes on in its own form, exactly */
    else if (o->moments != form)
        note_change(changed, cap, "--moments", ferry_moments_name(o->moments), ferry_moments_name(form));
    if (c->delayed_update && !o->delayed_update)
        o->delayed_update = true; /* a flag can only turn it on: the checkpoint's stays */
    else if (!c->delayed_update && o->delayed_update)
        note_change(changed, cap, "--delayed-update", "on", "off");
    if (o->delayed_update && o->offload != FERRY_OFFLOAD_OPTIMIZER)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--offload %s: the checkpoint runs the delayed update, which needs "
                       "--offload optimizer (its pending update is continued exactly only there)",
                       ferry_offload_name(o->offload));
    return FERRY_OK;
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
    ferry_status st = take_engine_settings(t, changed, sizeof changed);
    if (st != FERRY_OK)
        return st;
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

/* --eval-only of a checkpoint evaluates it as its run did: batches of its
 * --batch x --seq unless given (no data position to keep), on the device
 * type, offload mode and delayed update it was saved with. */
static ferry_status take_eval_settings(trainer *t)
{
    train_options *o = &t->o;
    char changed[1024] = "";
    if (!train_options_given(o, "--batch"))
        o->batch = t->from.batch;
    if (!train_options_given(o, "--seq"))
        o->seq = t->from.seq;
    return t->from.settings.known ? take_engine_settings(t, changed, sizeof changed) : FERRY_OK;
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

/* ---- --init-from ---- */

/* --init-from of the Llama family: PATH, a folder, or the folder of a file
 * PATH, whose config.json names a model_type of the family. */
static bool llama_folder(const char *path, char *dir, size_t cap)
{
    struct stat sb;
    snprintf(dir, cap, "%s", path);
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, cap, ".");
    }
    return run_state_folder_family(dir) == MODEL_FAMILY_LLAMA;
}

/* The Llama family's folder: its config.json is the model (the weights
 * are read into the engine, group by group, by trainer_engine.c). */
static ferry_status choose_llama_init(trainer *t)
{
    char cfg[PATH_MAX];
    ferry_status st = run_state_check_weights(t->init_dir);
    if (st == FERRY_OK)
        st = run_state_join(cfg, sizeof cfg, t->init_dir, "config.json");
    return st == FERRY_OK ? hf_llama_read_config(cfg, &t->spec.llama) : st;
}

/* GPT-2's safetensors file: a config.json beside it says the model's shape,
 * else the model flags do (*decided false). */
static ferry_status choose_gpt2_init(trainer *t, bool *decided)
{
    const train_options *o = &t->o;
    *decided = false;
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
    if (run_state_join(cfg, sizeof cfg, dir, "config.json") != FERRY_OK || access(cfg, F_OK) != 0)
        return FERRY_OK;
    *decided = true;
    /* Saved together, they name the same run and step (when they name any). */
    hf_ferry_info conf, meta;
    ferry_status st = hf_read_config_ferry(cfg, &t->spec.gpt2, &conf);
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

/* ---- the model ---- */

/* A preset of the Llama family, with --vocab and --context when given. */
static ferry_status choose_llama_preset(trainer *t)
{
    const train_options *o = &t->o;
    ferry_status st = model_spec_preset(o->model, &t->spec);
    llama_config *l = &t->spec.llama;
    bool vocab = train_options_given(o, "--vocab"), context = train_options_given(o, "--context");
    if (st != FERRY_OK || (!vocab && !context))
        return st;
    if (vocab) {
        l->vocab_size = o->vocab;
        l->padded_vocab_size = (o->vocab + LLAMA_VOCAB_PAD - 1) / LLAMA_VOCAB_PAD * LLAMA_VOCAB_PAD;
    }
    if (context)
        l->max_seq_len = o->context;
    return llama_config_validate(l);
}

ferry_status trainer_choose_model(trainer *t)
{
    const train_options *o = &t->o;
    memset(&t->spec, 0, sizeof t->spec);
    if (o->resume) {
        ferry_status st = run_state_locate(o->resume, t->ckpt, sizeof t->ckpt);
        if (st == FERRY_OK) st = run_state_inspect(t->ckpt, &t->spec, &t->from);
        /* A family the program does not train is refused by trainer_refuse_family, with its own words. */
        if (st == FERRY_OK && t->spec.family == MODEL_FAMILY_LLAMA && !t->prog->llama)
            return FERRY_OK;
        bool trains = !t->o.sample_only && !t->o.eval_only;
        if (st == FERRY_OK) st = check_model_flags(t);
        if (st == FERRY_OK && trains) st = take_checkpoint_settings(t);
        if (st == FERRY_OK && trains) st = check_steps_left(t);
        if (st == FERRY_OK && t->o.eval_only) st = take_eval_settings(t);
        if (st == FERRY_OK && t->o.sample_only && !train_options_given(o, "--seq"))
            t->o.seq = t->from.seq; /* the window the model was trained with */
        return st;
    }
    if (o->init_from && llama_folder(o->init_from, t->init_dir, sizeof t->init_dir)) {
        t->spec.family = MODEL_FAMILY_LLAMA; /* a program that does not train it refuses it, unread */
        return t->prog->llama ? choose_llama_init(t) : FERRY_OK;
    }
    t->init_dir[0] = '\0';
    t->spec.family = MODEL_FAMILY_GPT2;
    gpt2_config *cfg = &t->spec.gpt2;
    if (o->init_from) {
        bool decided;
        ferry_status st = choose_gpt2_init(t, &decided);
        if (st != FERRY_OK || decided)
            return st;
    }
    if (o->model && t->prog->llama && llama_is_preset(o->model) && o->init_from)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "--init-from '%s' is no folder of the Llama family (its "
                                                   "config.json, with model_type llama, mistral or qwen2, says so), "
                                                   "but --model %s is of that family: give the model's Hugging Face "
                                                   "folder", o->init_from, o->model);
    if (o->model && t->prog->llama && llama_is_preset(o->model))
        return choose_llama_preset(t);
    if (o->model) {
        ferry_status st = t->prog->llama ? model_spec_preset(o->model, &t->spec) : gpt2_config_preset(o->model, cfg);
        if (st == FERRY_OK && o->context != 1024)
            st = gpt2_config_from_fields(cfg->n_layer, cfg->n_head, cfg->n_embd, o->vocab, 0, o->context, cfg);
        else if (st == FERRY_OK && o->vocab != 50257)
            st = gpt2_config_from_fields(cfg->n_layer, cfg->n_head, cfg->n_embd, o->vocab, 0, cfg->max_seq_len, cfg);
        return st;
    }
    return gpt2_config_from_fields(o->layers, o->heads, o->width, o->vocab, 0, o->context, cfg);
}

/* ---- the tokenizer and the data ---- */

/* The model's tokenizer, found where train/tok_find.h says: --tokenizer,
 * the checkpoint's (or --init-from's) folder, $FERRY_TOKENIZER_DIR, and
 * for GPT-2 the install's share/ferry/gpt2 and the source tree. A model of
 * the Llama family takes GPT-2's files only where they are named or kept
 * beside it. */
ferry_status trainer_open_tokenizer(trainer *t)
{
    bool llama = t->spec.family == MODEL_FAMILY_LLAMA;
    char model_dir[PATH_MAX] = "";
    if (t->ckpt[0])
        snprintf(model_dir, sizeof model_dir, "%s", t->ckpt);
    else if (t->init_dir[0])
        snprintf(model_dir, sizeof model_dir, "%s", t->init_dir);
    else if (t->o.init_from) {
        snprintf(model_dir, sizeof model_dir, "%s", t->o.init_from);
        char *slash = strrchr(model_dir, '/');
        if (slash)
            *slash = '\0'; /* GPT-2's --init-from names its model.safetensors */
        else
            snprintf(model_dir, sizeof model_dir, ".");
    }
    tok_places where = {.given = t->o.tokenizer, .model_dir = model_dir[0] ? model_dir : NULL, .no_gpt2_places = llama};
    tok_found *found = &t->tok_found;
    ferry_status st = tok_find(&where, found);
    if (st == FERRY_OK)
        st = found->json[0] ? tok_open(found->json, NULL, &t->tok) : tok_open(found->encoder, found->vocab_bpe, &t->tok);
    if (st == FERRY_OK && tok_vocab_size(t->tok) > (uint32_t)model_spec_vocab(&t->spec)) {
        st = err_set(FERRY_ERR_INVALID_ARGUMENT, "%s has %u tokens, more than the model's vocabulary of %d: it is "
                     "another model's tokenizer", tok_describe(t->tok), tok_vocab_size(t->tok),
                     model_spec_vocab(&t->spec));
        tok_close(t->tok);
        t->tok = NULL;
    }
    if (st != FERRY_OK)
        return err_wrap(st, "the model's tokenizer");
    if ((t->o.sample_only || t->o.sample_every) && trainer_leader(t) && !t->o.quiet)
        printf("tokenizer: %s, '%s' (%s)\n", tok_describe(t->tok), found->json[0] ? found->json : found->encoder,
               found->place);
    return FERRY_OK;
}

/* The tokenizer's files a checkpoint keeps (a tokenizer.json with the
 * tokenizer_config.json and special_tokens_map.json beside it, or GPT-2's
 * two files), into files[]; how many. */
int trainer_tokenizer_files(const trainer *t, const char **files, char (*buf)[PATH_MAX + 32], int cap)
{
    const tok_found *f = &t->tok_found;
    int n = 0;
    if (!t->tok || cap < 3)
        return 0;
    if (!f->json[0]) {
        files[n++] = f->encoder;
        files[n++] = f->vocab_bpe;
        return n;
    }
    files[n++] = f->json;
    const char *slash = strrchr(f->json, '/');
    int dir = slash ? (int)(slash - f->json) : 0;
    static const char *const beside[] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int i = 0; i < 2 && n < cap; i++) {
        snprintf(buf[i], sizeof buf[i], "%.*s%s%s", dir, f->json, dir ? "/" : "", beside[i]);
        if (access(buf[i], R_OK) == 0)
            files[n++] = buf[i];
    }
    return n;
}

static ferry_status open_loader_rows(trainer *t, const char *pattern, int rows, int shuffle, tok_loader **out)
{
    const char *paths[1] = {pattern};
    tok_too_long too_long = TOK_TOO_LONG_REFUSE;
    ferry_status st = tok_too_long_parse(t->o.too_long, &too_long);
    tok_loader_config c = {paths, 1, rows, t->o.seq, (uint32_t)model_spec_vocab(&t->spec), shuffle, t->o.seed,
                           t->o.no_pack, too_long};
    return st == FERRY_OK ? tok_loader_open(&c, out) : st;
}

ferry_status trainer_open_loader(trainer *t, const char *pattern, int shuffle, tok_loader **out)
{
    return open_loader_rows(t, pattern, t->o.batch, shuffle, out);
}

/* The batches an evaluation takes: --eval-batches; of masked data, at
 * most one pass over the validation set, since its evaluation is the mean
 * over the set's targets and must not count an example twice (every rank
 * holds the same set, so the same count on all). */
int trainer_eval_batches(const trainer *t)
{
    uint64_t epoch = t->val ? tok_loader_batches_per_epoch(t->val) : 0;
    if (t->masked && epoch > 0 && epoch < (uint64_t)t->o.eval_batches)
        return (int)epoch;
    return t->o.eval_batches;
}

/* The validation set: in batches of --batch rows, or, when it is shorter
 * than one such batch, of the most rows it holds (at least one sequence),
 * said once: a short validation set is evaluated on what it has. */
ferry_status trainer_open_validation(trainer *t)
{
    t->eval_batch = t->o.batch;
    ferry_status st = trainer_open_loader(t, t->o.val_data, 0, &t->val);
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
    if (st == FERRY_OK && trainer_leader(t))
        printf("validation data '%s' holds fewer tokens than one batch of %d x %d: evaluating on batches of %d x %d\n",
               t->o.val_data, t->o.batch, t->o.seq, lo, t->o.seq);
    return st;
}
