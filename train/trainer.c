/* The trainer's main flow (train/trainer.h): the flags, the world of
 * ranks, everything checked before any work starts (the outputs first,
 * then the model, the tokenizer, the data), the engine or sampling's
 * backend, then training, --eval-only's evaluation or --sample's text, and
 * the end: what failed, what a signal stopped, everything closed whole.
 * The checkpoint folder is locked for the run and pruned to the last
 * --keep-last saves; a failed write of the log or the trace fails the run;
 * SIGINT/SIGTERM stop after the micro-batch, evaluation batch or sampled
 * token under way, save the last complete step (the cut step's gradients
 * are dropped) and exit 130/143; during setup they stop before any
 * training and save nothing; a second signal stops at once.
 *
 * Under mpirun -np N or srun every process is a rank training one model
 * with the others (ZeRO data parallelism in the engine): a step's N x
 * --grad-accum micro-batches are consecutive windows of the data, rank r
 * taking the r-th --grad-accum of them; rank 0 alone prints, logs, saves
 * and locks the checkpoint folder (every rank takes part in evaluation,
 * sampling and saving, whose collectives need them all); each rank writes
 * its own memory trace (FILE for rank 0, FILE.rankR for the others). A
 * failure on any rank stops every rank with its message; every decision a
 * signal changes is agreed by all ranks at the same point
 * (trainer_ranks.c). --sample, which needs the weights alone and no
 * collective, runs on rank 0; the other ranks end at once. */
#include "train/trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "backend/ops/ops.h"
#include "train/flag_words.h"
#include "train/trainer_internal.h"

/* Where generation ends by itself: GPT-2's <|endoftext|>, the Llama
 * config's eos_token_id (-1: none). */
/* Where a sample ends: the tokenizer's end of text, the token the chat
 * templates end each answer with (so a model fine-tuned on them stops
 * where it learned to, even a Llama trained on GPT-2's tokens), else the
 * model's own. */
static int trainer_eos_token(const trainer *t)
{
    int64_t eos = t->tok ? tok_eos(t->tok) : -1;
    if (eos >= 0 && eos < model_spec_vocab(&t->spec))
        return (int)eos;
    return t->spec.family == MODEL_FAMILY_GPT2 ? (int)TOK_GPT2_EOT : t->spec.llama.eos_token_id;
}

/* Prints the failure; in a world of several ranks, says which and tells the
 * others, who stop with this message (a failure that came from another rank
 * is not sent back). A failure every rank reached alike (agreed_failure) is
 * said once, by rank 0, and needs no telling. */
int trainer_fail(trainer *t, const char *what)
{
    char line[2400];
    const char *prog = t->prog->name;
    /* Advice names only what the run has not done already (the mode
     * auto settled on, recompute, the disk tier) and can do (the ranks). */
    ferry_offload mode = t->engine ? ferry_engine_offload(t->engine) : t->o.offload;
    train_situation now = {mode, t->o.recompute,
                           mode == FERRY_OFFLOAD_NVME || (mode == FERRY_OFFLOAD_PARAMS && t->o.nvme_path), t->world,
                           t->o.batch};
    snprintf(line, sizeof line, "%s: %s", what, train_last_error_in(&now));
    if (t->world > 1 && t->agreed_failure) {
        if (t->rank == 0)
            fprintf(stderr, "%s: %s\n", prog, line);
        return 1;
    }
    if (t->world > 1) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, t->rank, line);
        ferry_world_abort(line);
    } else {
        fprintf(stderr, "%s: %s\n", prog, line);
    }
    return 1;
}

/* Everything that can be checked before the engine allocates is checked
 * here, the outputs first. Rank 0 alone locks the checkpoint folder and
 * opens the log (it writes both); every rank checks its own trace. */
static int prepare(trainer *t)
{
    const char *prog = t->prog->name;
    trainer_default_checkpoint_dir(t);
    train_options outputs = t->o;
    if (!trainer_leader(t))
        outputs.checkpoint_dir = NULL, outputs.log = NULL; /* rank 0's to check */
    if (train_options_check_outputs(&outputs) != 0)
        return 2;
    if (trainer_leader(t) && t->o.checkpoint_dir && run_state_lock(t->o.checkpoint_dir, &t->lock_fd) != FERRY_OK)
        return trainer_fail(t, "--checkpoint-dir");
    if (trainer_leader(t) && trainer_open_log(t) != FERRY_OK)
        return trainer_fail(t, "--log");
    if (t->o.trace && fileio_make_parents(t->o.trace) != FERRY_OK)
        return trainer_fail(t, "--trace");
    if (trainer_choose_model(t) != FERRY_OK)
        return trainer_fail(t, t->o.resume ? "--resume" : "model");
    int refused = trainer_refuse_family(t);
    if (refused)
        return refused;
    if (trainer_claim_run_folder(t) != FERRY_OK)
        return trainer_fail(t, "--checkpoint-dir");
    bool trains = !t->o.sample_only && !t->o.eval_only;
    if (t->o.resume && trains && trainer_leader(t)) {
        trainer_say_resume(t);
        if (trainer_stdout_written(t) != FERRY_OK)
            return trainer_fail(t, "--resume");
    }
    int context = model_spec_context(&t->spec);
    if (t->o.seq > context) {
        fprintf(stderr, "%s: --seq %d is longer than the model's context %d\n", prog, t->o.seq, context);
        return 2;
    }
    if (t->o.find_max_batch && trains && trainer_find_max_batch(t) != FERRY_OK)
        return trainer_fail(t, "--find-max-batch");
    /* Samples need the model's tokenizer; without one, a run that asked
     * for none just skips the final sample (and its checkpoints keep no
     * tokenizer). --eval-only takes none. */
    if (!t->o.eval_only && trainer_open_tokenizer(t) != FERRY_OK && (t->o.sample_every || t->o.sample_only))
        return trainer_fail(t, "tokenizer");
    err_clear();
    if (trains && trainer_open_loader(t, t->o.data, 1, &t->train) != FERRY_OK)
        return trainer_fail(t, "training data");
    if (t->train)
        t->pos = tok_loader_tell(t->train);
    if (t->o.val_data && trainer_open_validation(t) != FERRY_OK)
        return trainer_fail(t, "validation data");
    size_t n = (size_t)t->o.batch * (size_t)t->o.seq;
    t->inputs = malloc(n * sizeof *t->inputs);
    t->targets = malloc(n * sizeof *t->targets);
    t->positions = malloc(n * sizeof *t->positions);
    t->masked = (t->train && tok_shard_is_masked(tok_loader_format(t->train))) ||
                (t->val && tok_shard_is_masked(tok_loader_format(t->val)));
    if (!t->inputs || !t->targets || !t->positions) {
        fprintf(stderr, "%s: out of memory for a batch of %zu tokens\n", prog, n);
        return 1;
    }
    /* Alone, a signal ends sampling after the token under way; with
     * several ranks, which sample alike through collectives, they agree on
     * it before each token. */
    t->smp = (sampler){.rng = t->o.seed ^ 0x5A5A5A5Aull, .temperature = t->o.temperature, .top_k = t->o.top_k,
                       .stop = t->world > 1 ? NULL : trainer_stop_flag(),
                       .before_token = t->world > 1 ? trainer_agree_before_token : NULL, .before_token_ctx = t,
                       .top_p = t->o.top_p, .eos = trainer_eos_token(t), .stop_text = t->o.stop_text};
    train_skips_init(&t->skips, t->o.max_skips);
    return 0;
}

/* Frees everything and closes the outputs; returns rc, or 1 when the trace
 * or the log could not be written whole (said on stderr). The trace is
 * advertised only once it is known whole. */
static int cleanup(trainer *t, int rc)
{
    if (t->engine)
        ferry_engine_synchronize(t->engine);
    lmodel_acts_destroy(t->acts);
    lmodel_acts_destroy(t->eval_acts);
    model_resident_destroy(t->resident);
    backend_stream_destroy(t->sample_stream);
    if (t->sample_be)
        ops_shutdown(t->sample_be);
    backend_close(t->sample_be);
    bool traced = t->engine && t->o.trace;
    /* Closed here, failed or not: trainer_fail below must not ask the
     * closed engine its mode, so the mode it ran in is kept in the options. */
    ferry_engine *e = t->engine;
    if (e)
        t->o.offload = ferry_engine_offload(e);
    t->engine = NULL;
    if (ferry_engine_close(e) != FERRY_OK)
        rc = trainer_fail(t, "the memory trace is incomplete");
    else if (traced && t->world > 1 && trainer_leader(t))
        printf("memory traces: %s for rank 0, %s.rankR for rank R (read them with: memprof %s)\n", t->o.trace,
               t->o.trace, t->o.trace);
    else if (traced && trainer_leader(t))
        printf("memory trace: %s (read it with: memprof %s)\n", t->o.trace, t->o.trace);
    lmodel_destroy(t->model);
    tok_loader_close(t->train);
    tok_loader_close(t->val);
    tok_close(t->tok);
    if (t->log && fclose(t->log) != 0) {
        fprintf(stderr, "%s: closing the log '%s': %s; it may be incomplete\n", t->prog->name, t->o.log,
                strerror(errno));
        rc = 1;
    }
    run_state_unlock(t->lock_fd);
    free(t->inputs);
    free(t->targets);
    free(t->positions);
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

/* Joins the world of ranks (--sample: only learns this process's rank,
 * needing no collective); 0 to go on, else the exit status (the other
 * ranks of --sample end at once with 0). */
static int join_world(trainer *t)
{
    ferry_world_info world = FERRY_WORLD_INFO_INIT;
    if (t->o.sample_only) {
        /* The weights alone, no collective: rank 0 samples as one process
         * would, and the other ranks a launcher started have nothing to do. */
        if (ferry_world_probe(&world) != FERRY_OK)
            return trainer_fail(t, "the launcher's environment");
        t->world_info = world;
        return world.rank > 0 ? -1 : 0;
    }
    /* First, so that a failure of any rank from here on reaches the others. */
    if (ferry_world_join(&world) != FERRY_OK) {
        fprintf(stderr, "%s: joining the ranks the launcher started: %s\n", t->prog->name, ferry_last_error());
        return 1;
    }
    t->world_info = world;
    t->rank = world.rank;
    t->world = world.world_size;
    return 0;
}

int trainer_main(int argc, char **argv, const trainer_program *prog)
{
    fileio_check_stdout_at_exit(prog->name); /* a full disk or /dev/full on stdout is exit 1 */
    trainer t = {0};
    t.prog = prog;
    t.lock_fd = -1;
    t.saved_step = -1;
    t.world = 1;
    int rc = train_options_parse_for(prog, argc, argv, &t.o);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    trainer_catch_signals(prog);
    if ((rc = join_world(&t)) != 0)
        return rc < 0 ? 0 : rc;
    trainer_trace_path(&t);
    if ((rc = prepare(&t)) != 0) {
        if (t.world > 1)
            ferry_world_abort("its setup was refused (its own message says why)");
        return finish(&t, rc);
    }
    /* Several ranks: rank 0's run identity, and a signal any rank had by now. */
    if (trainer_agree_after_prepare(&t) != FERRY_OK)
        return finish(&t, trainer_fail(&t, "setup"));
    if (trainer_stopping(&t))
        return finish(&t, trainer_report_stop(&t, 0));
    if (t.o.sample_only ? trainer_setup_sampling(&t) != FERRY_OK
                        : trainer_setup_engine(&t) != FERRY_OK || trainer_restore(&t) != FERRY_OK)
        return finish(&t, trainer_stop_sig() ? trainer_report_stop(&t, trainer_fail(&t, "setup"))
                                             : trainer_fail(&t, "setup"));
    if (trainer_agree(&t, NULL, 0) != FERRY_OK)
        return finish(&t, trainer_fail(&t, "setup"));
    if (trainer_stopping(&t)) /* during setup: nothing is trained, nothing saved (on any rank) */
        return finish(&t, trainer_report_stop(&t, 0));
    if (trainer_say_setup(&t) != FERRY_OK)
        return finish(&t, trainer_fail(&t, "setup"));
    bool trains = !t.o.sample_only && !t.o.eval_only;
    if (t.ckpt[0] && trains && trainer_leader(&t) && trainer_log_resume(&t) != FERRY_OK)
        return finish(&t, trainer_fail(&t, "--log"));
    t.started_ms = clock_now_ms();
    t.start_step = t.step;
    ferry_status st = t.o.sample_only ? trainer_print_sample(&t)
                      : t.o.eval_only ? trainer_eval_only(&t)
                                      : trainer_train(&t);
    if (st != FERRY_OK) {
        rc = trainer_fail(&t, t.o.sample_only ? "sampling" : t.o.eval_only ? "evaluation" : "training");
        if (trains)
            trainer_keep_what_can_be_kept(&t);
    } else if (trains) {
        if (!trainer_stopping(&t) && t.o.sample_every == 0 && t.tok && (st = trainer_print_sample(&t)) != FERRY_OK)
            rc = trainer_fail(&t, "sampling");
        trainer_summary(&t);
    }
    /* Several ranks: a signal that came after the last agreement is agreed
     * too, so that every rank ends with the same status. */
    if (rc == 0 && trainer_agree(&t, NULL, 0) != FERRY_OK)
        rc = trainer_fail(&t, "finishing");
    if (trainer_stopping(&t))
        rc = trainer_report_stop(&t, rc);
    return finish(&t, rc);
}
