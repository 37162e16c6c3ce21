/* Dynamic loss scaling, against torch's GradScaler (tests/engine/
 * loss_scale_oracle.py runs the real class through Debian's python3-torch,
 * or the python given as argv[1]):
 *   - optim/loss_scale on four sequences of overflows: torch's defaults over
 *     4,600 steps (three backoffs, a growth after exactly 2,000 clean steps,
 *     none after 1,999), random overflows with odd factors (growth 3,
 *     backoff 0.25, interval 5; and 1.5, 0.3, 3 from 1000, whose products
 *     round), and a scale at fp32's top that must not grow to inf: every
 *     step's scale and skip, and the final scale and growth count, equal;
 *   - the engine with f16 storage on the host backend, in every offload
 *     mode, fed the scaled gradients (an inf on the overflow steps): its
 *     report's scale and skip at every step equal torch's, its counts of
 *     skipped steps are right, and its final weights equal bitwise those of
 *     an fp32 engine without loss scaling fed the unscaled gradients on the
 *     steps taken (unscaling and clipping exact for a power-of-two scale);
 *   - a scale that collapses (max skips in a row) fails the step with a
 *     clear error; resume from a checkpoint continues the scale exactly;
 *     bad settings are refused naming the field.
 * Without torch the oracle comparisons are skipped one by one; the rest
 * runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/dtype.h"
#include "ferry.h"
#include "optim/gradnorm.h"
#include "optim/loss_scale.h"
#include "tests/tap.h"
#include "tests/test_files.h"

static const char *python = "/usr/bin/python3";
static int have_torch = -1;
static char dir[] = "/tmp/ferry_loss_scale_XXXXXX";

/* torch's scale and skip at each step of `flags` (1: overflow), and its
 * final scale and growth count; false when torch is not there. */
typedef struct oracle {
    int steps;
    double *scale;
    int *skipped;
    double final_scale;
    int final_tracker;
} oracle;

static bool run_oracle(const char *head, const char *flags, oracle *o)
{
    memset(o, 0, sizeof *o);
    char cmd[8192], in[256], out[256];
    if (have_torch < 0) {
        snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' 2>/dev/null", python);
        have_torch = system(cmd) == 0;
        if (!have_torch)
            tap_diag("%s cannot import torch: the comparisons with GradScaler are skipped", python);
    }
    if (!have_torch)
        return false;
    const char *root = getenv("FERRY_SOURCE_ROOT");
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    FILE *f = fopen(in, "w");
    if (!f)
        return false;
    fprintf(f, "%s\n%s\n", head, flags);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/engine/loss_scale_oracle.py' '%s' '%s'", python, root ? root : ".",
             in, out);
    int rc = system(cmd);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
        tap_ok(0, "the GradScaler oracle ran (status %d)", rc);
        return false;
    }
    o->steps = (int)strlen(flags);
    o->scale = calloc((size_t)o->steps, sizeof *o->scale);
    o->skipped = calloc((size_t)o->steps, sizeof *o->skipped);
    f = fopen(out, "r");
    int read = 0;
    char word[64];
    for (int i = 0; f && i < o->steps; i++)
        read += fscanf(f, "%63s %d", word, &o->skipped[i]) == 2 && (o->scale[i] = strtod(word, NULL), 1);
    bool tail = f && fscanf(f, " final %63s %d", word, &o->final_tracker) == 2;
    if (tail)
        o->final_scale = strtod(word, NULL);
    if (f)
        fclose(f);
    return tap_ok(read == o->steps && tail, "the oracle answered for %d steps", o->steps);
}

static void oracle_free(oracle *o)
{
    free(o->scale);
    free(o->skipped);
}

/* ---- optim/loss_scale against torch ---- */

static void scaler_vs_torch(const char *what, const char *head, float init, double growth, double backoff,
                            int interval, const char *flags)
{
    oracle o;
    if (!run_oracle(head, flags, &o)) {
        tap_skip("%s: needs torch", what);
        return;
    }
    loss_scaler ls;
    TAP_IS_STATUS(loss_scale_init(&ls, init, growth, backoff, interval), FERRY_OK, "%s: scaler", what);
    int first = -1;
    float ours = 0;
    for (int i = 0; i < o.steps; i++) {
        bool overflow = flags[i] == '1';
        if (first < 0 && ((double)ls.scale != o.scale[i] || (int)overflow != o.skipped[i])) {
            first = i;
            ours = ls.scale;
        }
        loss_scale_update(&ls, overflow);
    }
    if (!tap_ok(first < 0, "%s: %d steps, every scale and skip equal torch's", what, o.steps))
        tap_diag("  step %d: scale %a skipped %d; torch %a skipped %d", first, (double)ours, flags[first] == '1',
                 o.scale[first], o.skipped[first]);
    tap_ok((double)ls.scale == o.final_scale && ls.tracker == o.final_tracker,
           "%s: final scale %a, growth count %d (torch %a, %d)", what, (double)ls.scale, (int)ls.tracker,
           o.final_scale, o.final_tracker);
    oracle_free(&o);
}

static char *random_flags(uint64_t *rng, int n, double p)
{
    char *f = malloc((size_t)n + 1);
    for (int i = 0; i < n; i++)
        f[i] = tap_rand_unit(rng) < p ? '1' : '0';
    f[n] = '\0';
    return f;
}

static void test_scaler(void)
{
    /* Defaults: three overflows (65536 -> 8192), 2,000 clean steps (grows
     * at the last), an overflow after 1,999 clean ones (no growth), 500 more. */
    int n = 3 + 2000 + 100 + 1 + 1999 + 1 + 500;
    char *f = malloc((size_t)n + 1);
    memset(f, '0', (size_t)n);
    f[0] = f[1] = f[2] = '1';
    f[3 + 2000 + 100] = '1';
    f[3 + 2000 + 100 + 1 + 1999] = '1';
    f[n] = '\0';
    scaler_vs_torch("torch's defaults", "defaults", LOSS_SCALE_INIT_DEFAULT, LOSS_SCALE_GROWTH_DEFAULT,
                    LOSS_SCALE_BACKOFF_DEFAULT, LOSS_SCALE_INTERVAL_DEFAULT, f);
    free(f);
    uint64_t rng = 0x5ca1e;
    tap_diag("seed %llu", (unsigned long long)rng);
    f = random_flags(&rng, 300, 0.25);
    scaler_vs_torch("growth 3, backoff 0.25, interval 5", "3.0 3.0 0.25 5", 3.0f, 3.0, 0.25, 5, f);
    free(f);
    f = random_flags(&rng, 200, 0.2);
    scaler_vs_torch("growth 1.5, backoff 0.3, interval 3 from 1000", "1000 1.5 0.3 3", 1000.0f, 1.5, 0.3, 3, f);
    free(f);
    scaler_vs_torch("a scale at fp32's top never grows to inf", "0x1p127 2.0 0.5 1", 0x1p127f, 2.0, 0.5, 1,
                    "0000");

    loss_scaler ls;
    TAP_IS_STATUS(loss_scale_init(&ls, 0.0f, 2.0, 0.5, 10), FERRY_ERR_INVALID_ARGUMENT, "init 0 is refused");
    tap_ok(strstr(ferry_last_error(), "initial loss scale 0") != NULL, "naming it: %s", ferry_last_error());
    TAP_IS_STATUS(loss_scale_init(&ls, NAN, 2.0, 0.5, 10), FERRY_ERR_INVALID_ARGUMENT, "init NaN is refused");
    TAP_IS_STATUS(loss_scale_init(&ls, 8.0f, 1.0, 0.5, 10), FERRY_ERR_INVALID_ARGUMENT, "growth 1 is refused");
    TAP_IS_STATUS(loss_scale_init(&ls, 8.0f, 2.0, 1.0, 10), FERRY_ERR_INVALID_ARGUMENT, "backoff 1 is refused");
    TAP_IS_STATUS(loss_scale_init(&ls, 8.0f, 2.0, 0.5, 0), FERRY_ERR_INVALID_ARGUMENT, "interval 0 is refused");
    loss_scale_init(&ls, 8.0f, 2.0, 0.5, 10);
    TAP_IS_STATUS(loss_scale_restore(&ls, INFINITY, 0), FERRY_ERR_FORMAT, "restoring an infinite scale is refused");
    TAP_IS_STATUS(loss_scale_restore(&ls, 4.0f, -1), FERRY_ERR_FORMAT, "restoring a negative count is refused");
    tap_ok(ls.scale == 8.0f && ls.tracker == 0, "and leaves the scaler as it was");
    /* A scale backed off to nothing: its inverse is inf (not an undefined
     * conversion), and a step under it is skipped, not applied as NaN. */
    loss_scale_init(&ls, 0x1p-140f, 2.0, 0.5, 10);
    tap_ok(isinf(loss_scale_inverse(&ls)), "the inverse of a scale of 2^-140 is inf (%g)",
           (double)loss_scale_inverse(&ls));
    double sums[2] = {1.0, 4.0};
    bool flags[2] = {false, false};
    gradnorm_decision d = gradnorm_decide_unscaled(sums, flags, 2, 1.0f, loss_scale_inverse(&ls));
    tap_ok(d.skipped && d.bad_group == -1, "a step unscaled by inf is skipped (bad group %d)", d.bad_group);
    d = gradnorm_decide_unscaled(sums, flags, 2, 1.0f, 0x1p-4f);
    tap_ok(!d.skipped && d.grad_norm == sqrt(5.0) / 16 && d.clip_coef == gradnorm_clip_coef(sqrt(5.0) / 16, 1.0f) &&
               d.grad_scale == d.clip_coef * 0x1p-4f,
           "under a scale of 16 the norm is the unscaled one (%.9g), the update's factor clip / 16", d.grad_norm);
    loss_scale_init(&ls, 8.0f, 2.0, 0.5, 10);
    TAP_IS_STATUS(loss_scale_restore(&ls, 4.0f, 25), FERRY_OK, "a count past a shorter interval is restored");
    TAP_IS_INT(ls.tracker, 9, "as interval - 1");
    loss_scale_update(&ls, false);
    tap_ok(ls.scale == 8.0f, "so the next clean step grows the scale (%g)", (double)ls.scale);
}

/* ---- the engine ---- */

enum { N = 96, STEPS = 22 };
/* Overflows of the engine runs: two at the start, a growth after 4 clean
 * steps, then more. */
static const char engine_flags[STEPS + 1] = "1100000001000010000001";

/* The true gradient of step s: multiples of 2^-20, exact in fp16 times any
 * scale used here, and in fp32. */
static float true_grad(int s, int i) { return (float)(((i * 37 + s * 11) % 61) - 30) * 0x1p-20f; }

typedef struct run_out {
    float scale[STEPS];
    int skipped[STEPS];
    int64_t skipped_steps;
    int skips_in_row;
    float w[N];
    float next_scale;
} run_out;

static ferry_engine *open_engine(ferry_dtype dtype, ferry_offload mode, ferry_loss_scaling scaling, int interval)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    c.backend = FERRY_BACKEND_HOST;
    c.offload = mode;
    c.dtype = dtype;
    c.optimizer_threads = 1;
    c.loss_scaling = scaling;
    c.loss_scale_interval = interval;
    float init[N];
    for (int i = 0; i < N; i++)
        init[i] = (float)(i % 13) * 0.0625f - 0.375f;
    ferry_engine *e = NULL;
    ferry_status st = ferry_engine_create(&c, &e);
    if (st == FERRY_OK)
        st = ferry_engine_add_group(e, "w", N, init, NULL, NULL);
    if (st == FERRY_OK)
        st = ferry_engine_setup(e);
    if (st != FERRY_OK) {
        tap_diag("engine: %s", ferry_last_error());
        ferry_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* One step: the gradient of step s times the engine's loss scale in the
 * engine's type (an inf at element 5 when `overflow`). */
static ferry_status one_step(ferry_engine *e, int s, bool overflow, ferry_step_report *rep)
{
    void *w, *g;
    float scale = ferry_engine_loss_scale(e);
    ferry_dtype t = ferry_engine_dtype(e);
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    if (st == FERRY_OK) st = ferry_engine_fetch(e, 0, FERRY_PHASE_BACKWARD, &w);
    if (st == FERRY_OK) st = ferry_engine_grads(e, 0, &g);
    if (st == FERRY_OK) st = ferry_engine_synchronize(e);
    for (int i = 0; st == FERRY_OK && i < N; i++)
        dtype_store_f32(g, t, (size_t)i, overflow && i == 5 ? INFINITY : true_grad(s, i) * scale);
    if (st == FERRY_OK) st = ferry_engine_release(e, 0, FERRY_PHASE_BACKWARD);
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 1e-2f;
    o.weight_decay = 0.1f;
    o.max_grad_norm = 2e-4f; /* the gradients' norm is about 1e-4 to 3e-4: some steps clip */
    if (st == FERRY_OK) st = ferry_engine_step(e, &o, rep);
    return st;
}

/* Steps [from, to) of engine_flags; `feed`: gradients only on the steps the
 * scaled run takes (the unscaled fp32 reference). */
static ferry_status run_steps(ferry_engine *e, int from, int to, const int *taken, run_out *r)
{
    ferry_status st = FERRY_OK;
    for (int s = from; s < to && st == FERRY_OK; s++) {
        if (taken && !taken[s])
            continue;
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        st = one_step(e, s, !taken && engine_flags[s] == '1', &rep);
        r->scale[s] = rep.loss_scale;
        r->skipped[s] = rep.skipped;
        r->skipped_steps = rep.skipped_steps;
        r->skips_in_row = rep.skips_in_row;
    }
    if (st == FERRY_OK)
        st = ferry_engine_get_weights(e, 0, r->w);
    r->next_scale = ferry_engine_loss_scale(e);
    return st;
}

static void test_engine_vs_torch(void)
{
    oracle o;
    bool have = run_oracle("65536 2.0 0.5 4", engine_flags, &o);
    static const ferry_offload modes[] = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS};
    for (int m = 0; m < 3; m++) {
        const char *mode = ferry_offload_name(modes[m]);
        ferry_engine *e = open_engine(FERRY_DTYPE_F16, modes[m], FERRY_LOSS_SCALING_AUTO, 4);
        run_out got = {0}, ref = {0};
        int taken[STEPS];
        if (!tap_ok(e != NULL, "%s: an f16 engine", mode))
            continue;
        TAP_IS_STATUS(run_steps(e, 0, STEPS, NULL, &got), FERRY_OK, "%s: %d steps with loss scaling", mode, STEPS);
        ferry_engine_destroy(e);
        int overflows = 0;
        for (int s = 0; s < STEPS; s++) {
            overflows += engine_flags[s] == '1';
            taken[s] = !got.skipped[s];
        }
        if (have) {
            int first = -1;
            for (int s = 0; s < STEPS && first < 0; s++)
                if ((double)got.scale[s] != o.scale[s] || got.skipped[s] != o.skipped[s])
                    first = s;
            if (!tap_ok(first < 0, "%s: every step's scale and skip equal torch's GradScaler", mode))
                tap_diag("  step %d: scale %g skipped %d; torch %g skipped %d", first, (double)got.scale[first],
                         got.skipped[first], o.scale[first], o.skipped[first]);
            tap_ok((double)got.next_scale == o.final_scale, "%s: the next scale %g is torch's (%g)", mode,
                   (double)got.next_scale, o.final_scale);
        } else {
            tap_skip("%s: the comparison with GradScaler needs torch", mode);
        }
        TAP_IS_INT(got.skipped_steps, overflows, "%s: %d skipped steps counted", mode, overflows);
        TAP_IS_INT(got.skips_in_row, engine_flags[STEPS - 1] == '1', "%s: the last step's run of skips", mode);
        /* The same updates without scaling, in fp32, on the steps taken. */
        e = open_engine(FERRY_DTYPE_F32, modes[m], FERRY_LOSS_SCALING_AUTO, 4);
        TAP_IS_INT(ferry_engine_loss_scale(e), 1, "%s: an f32 engine scales nothing", mode);
        TAP_IS_STATUS(run_steps(e, 0, STEPS, taken, &ref), FERRY_OK, "%s: the unscaled fp32 run", mode);
        ferry_engine_destroy(e);
        size_t diff = 0;
        for (int i = 0; i < N; i++)
            diff += memcmp(&got.w[i], &ref.w[i], 4) != 0;
        if (!tap_ok(diff == 0, "%s: final weights bitwise those of the unscaled fp32 run (%zu of %d differ)", mode,
                    diff, N))
            tap_diag("  w[0] %.9g vs %.9g", (double)got.w[0], (double)ref.w[0]);
    }
    if (have)
        oracle_free(&o);
}

static void test_collapse(void)
{
    ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
    TAP_IS_INT(c.loss_scale_max_skips, 20, "a run stops after 20 skipped steps in a row by default");
    ferry_engine *e = open_engine(FERRY_DTYPE_F16, FERRY_OFFLOAD_OPTIMIZER, FERRY_LOSS_SCALING_AUTO, 2000);
    if (!tap_ok(e != NULL, "an f16 engine"))
        return;
    ferry_step_report rep = FERRY_STEP_REPORT_INIT;
    ferry_status st = FERRY_OK;
    int s = 0;
    for (; s < 19 && st == FERRY_OK; s++)
        st = one_step(e, s, true, &rep);
    TAP_IS_STATUS(st, FERRY_OK, "19 overflows in a row are skipped steps");
    TAP_IS_INT(rep.skips_in_row, 19, "counted in a row");
    float before[N], after[N];
    ferry_engine_get_weights(e, 0, before);
    st = one_step(e, s, true, &rep);
    TAP_IS_STATUS(st, FERRY_ERR_STATE, "the 20th fails the step");
    const char *msg = ferry_last_error();
    tap_ok(strstr(msg, "loss scale collapsed") && strstr(msg, "20 steps in a row") && strstr(msg, "learning rate"),
           "saying the scale collapsed, how, and what to do: %s", msg);
    tap_ok(rep.skipped == 1 && rep.skips_in_row == 20 && rep.skipped_steps == 20,
           "the report is filled (skipped %d, %d in a row, %lld in all)", rep.skipped, rep.skips_in_row,
           (long long)rep.skipped_steps);
    TAP_IS_CLOSE(rep.loss_scale, 65536.0 / (1 << 19), 0, 0, "the 20th step used 2^16 / 2^19");
    ferry_engine_get_weights(e, 0, after);
    tap_ok(memcmp(before, after, sizeof before) == 0, "nothing was trained");
    TAP_IS_STATUS(one_step(e, s + 1, false, &rep), FERRY_OK, "a clean step after it trains again");
    tap_ok(rep.skipped == 0 && rep.skips_in_row == 0, "and ends the run of skips");
    ferry_engine_destroy(e);

    /* Loss scaling off: skips are the embedder's to count, not the scale's. */
    e = open_engine(FERRY_DTYPE_F16, FERRY_OFFLOAD_OPTIMIZER, FERRY_LOSS_SCALING_OFF, 2000);
    TAP_IS_INT(ferry_engine_loss_scale(e), 1, "f16 with loss scaling off scales nothing");
    st = FERRY_OK;
    for (s = 0; s < 25 && st == FERRY_OK; s++)
        st = one_step(e, s, true, &rep);
    TAP_IS_STATUS(st, FERRY_OK, "without loss scaling, 25 skips in a row fail nothing");
    tap_ok(rep.loss_scale == 0.0f && rep.skipped_steps == 25, "the report says scaling is off (%g), 25 skipped",
           (double)rep.loss_scale);
    ferry_engine_destroy(e);
}

static void test_resume(void)
{
    char path[256];
    snprintf(path, sizeof path, "%s/state.ferry", dir);
    run_out whole = {0}, first = {0}, second = {0};
    ferry_engine *e = open_engine(FERRY_DTYPE_F16, FERRY_OFFLOAD_OPTIMIZER, FERRY_LOSS_SCALING_AUTO, 3);
    if (!tap_ok(e != NULL, "an f16 engine"))
        return;
    ferry_status st = run_steps(e, 0, 8, NULL, &first);
    if (st == FERRY_OK) st = ferry_engine_save(e, path, NULL, 0);
    if (st == FERRY_OK) st = run_steps(e, 8, STEPS, NULL, &whole);
    TAP_IS_STATUS(st, FERRY_OK, "%d steps with a save after 8", STEPS);
    float scale_at_save = first.next_scale;
    ferry_engine_destroy(e);
    e = open_engine(FERRY_DTYPE_F16, FERRY_OFFLOAD_OPTIMIZER, FERRY_LOSS_SCALING_AUTO, 3);
    st = e ? ferry_engine_load(e, path, NULL, 0, NULL) : FERRY_ERR_STATE;
    TAP_IS_STATUS(st, FERRY_OK, "a new engine loads the checkpoint");
    tap_ok(ferry_engine_loss_scale(e) == scale_at_save, "the loss scale comes back: %g (saved %g)",
           (double)ferry_engine_loss_scale(e), (double)scale_at_save);
    if (st == FERRY_OK) st = run_steps(e, 8, STEPS, NULL, &second);
    TAP_IS_STATUS(st, FERRY_OK, "and continues");
    ferry_engine_destroy(e);
    tap_ok(memcmp(whole.scale + 8, second.scale + 8, (STEPS - 8) * sizeof(float)) == 0 &&
               memcmp(whole.skipped + 8, second.skipped + 8, (STEPS - 8) * sizeof(int)) == 0,
           "every later step's scale and skip equal the uninterrupted run's (the growth count came back too)");
    tap_ok(whole.skipped_steps == second.skipped_steps && whole.skips_in_row == second.skips_in_row,
           "the skip counts too (%lld, %d)", (long long)second.skipped_steps, second.skips_in_row);
    tap_ok(memcmp(whole.w, second.w, sizeof whole.w) == 0, "the final weights are bitwise the same");
    /* An engine without loss scaling takes the counts, not the scale. */
    e = open_engine(FERRY_DTYPE_F32, FERRY_OFFLOAD_OPTIMIZER, FERRY_LOSS_SCALING_AUTO, 3);
    TAP_IS_STATUS(ferry_engine_load(e, path, NULL, 0, NULL), FERRY_OK, "an f32 engine loads the f16 checkpoint");
    TAP_IS_INT(ferry_engine_loss_scale(e), 1, "and keeps scaling off");
    ferry_engine_destroy(e);
    unlink(path);
}

static void test_config(void)
{
    static const struct { const char *what, *word; } cases[] = {
        {"loss_scaling 7", "loss_scaling 7"},
        {"loss_scale_init -1", "initial loss scale -1"},
        {"loss_scale_growth 1", "growth factor 1"},
        {"loss_scale_backoff 1.5", "backoff factor 1.5"},
        {"loss_scale_interval 0", "growth interval 0"},
        {"loss_scale_max_skips -2", "loss_scale_max_skips -2"},
    };
    for (int i = 0; i < 6; i++) {
        ferry_engine_config c = FERRY_ENGINE_CONFIG_INIT;
        c.backend = FERRY_BACKEND_HOST;
        switch (i) {
        case 0: c.loss_scaling = (ferry_loss_scaling)7; break;
        case 1: c.loss_scale_init = -1.0f; break;
        case 2: c.loss_scale_growth = 1.0; break;
        case 3: c.loss_scale_backoff = 1.5; break;
        case 4: c.loss_scale_interval = 0; break;
        default: c.loss_scale_max_skips = -2; break;
        }
        ferry_engine *e = NULL;
        TAP_IS_STATUS(ferry_engine_create(&c, &e), FERRY_ERR_INVALID_ARGUMENT, "%s is refused", cases[i].what);
        tap_ok(strstr(ferry_last_error(), cases[i].word) != NULL, "naming it: %s", ferry_last_error());
        ferry_engine_destroy(e);
    }
    ferry_engine *e = open_engine(FERRY_DTYPE_F32, FERRY_OFFLOAD_NONE, FERRY_LOSS_SCALING_DYNAMIC, 2000);
    TAP_IS_INT(ferry_engine_loss_scale(e), 65536, "dynamic scaling may be asked for with f32 storage too");
    tap_ok(e && strstr(ferry_engine_describe(e), "dynamic loss scale from 65536") != NULL, "and is described: %s",
           ferry_engine_describe(e));
    ferry_engine_destroy(e);
    TAP_IS_INT(ferry_engine_loss_scale(NULL), 1, "ferry_engine_loss_scale(NULL) is 1");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        python = argv[1];
    if (!mkdtemp(dir)) {
        printf("Bail out! cannot make a temporary folder\n");
        return 1;
    }
    tap_diag("python %s, folder %s", python, dir);
    test_scaler();
    test_engine_vs_torch();
    test_collapse();
    test_resume();
    test_config();
    test_dir_remove(dir);
    return tap_done();
}
