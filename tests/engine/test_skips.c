/* The engine's count of skipped steps (ferry_step_report.skips_in_row and
 * skipped_steps): a step whose gradient holds a NaN or an inf is skipped and
 * counted, a finite one resets the run; a checkpoint keeps both, so a load
 * puts back the counts of the step it saved. Every offload mode, on the host
 * backend. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/error.h"
#include "tap.h"
#include "test_dtype.h"

enum { N = 1000 };

static ferry_engine *make(ferry_offload mode)
{
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.offload = mode;
    cfg.optimizer_threads = 2;
    cfg.dtype = test_dtype();
    ferry_engine *e = NULL;
    float w[N];
    for (int i = 0; i < N; i++)
        w[i] = 0.01f * (float)(i % 17);
    if (ferry_engine_create(&cfg, &e) != FERRY_OK || ferry_engine_add_group(e, "g", N, w, NULL, NULL) != FERRY_OK ||
        ferry_engine_setup(e) != FERRY_OK) {
        ferry_engine_destroy(e);
        return NULL;
    }
    return e;
}

/* One step whose gradient is 1 everywhere, or `bad` (NaN, inf) at element 7. */
static ferry_status step(ferry_engine *e, float bad, ferry_step_report *rep)
{
    void *w, *g;
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    if (st == FERRY_OK) st = ferry_engine_fetch(e, 0, FERRY_PHASE_BACKWARD, &w);
    if (st == FERRY_OK) st = ferry_engine_grads(e, 0, &g);
    if (st == FERRY_OK) st = ferry_engine_synchronize(e);
    for (int i = 0; i < N && st == FERRY_OK; i++)
        dtype_store_f32(g, ferry_engine_dtype(e), (size_t)i, i == 7 ? bad : 1.0f);
    if (st == FERRY_OK) st = ferry_engine_release(e, 0, FERRY_PHASE_BACKWARD);
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    return st == FERRY_OK ? ferry_engine_step(e, &o, rep) : st;
}

int main(void)
{
    tap_diag("device storage %s", test_dtype_name());
    const ferry_offload modes[] = {FERRY_OFFLOAD_NONE, FERRY_OFFLOAD_OPTIMIZER, FERRY_OFFLOAD_PARAMS};
    /* gradient at element 7, then the counts the report must give */
    const struct { float bad; int skipped; long long row, total; } seq[] = {
        {NAN, 1, 1, 1}, {INFINITY, 1, 2, 2}, {1.0f, 0, 0, 2}, {-INFINITY, 1, 1, 3}, {1.0f, 0, 0, 3},
    };
    char path[] = "/tmp/ferry-skips-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0)
        close(fd);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        const char *name = ferry_offload_name(modes[m]);
        ferry_engine *e = make(modes[m]);
        if (!e) {
            tap_ok(0, "%s: engine: %s", name, ferry_last_error());
            continue;
        }
        for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
            ferry_step_report rep = FERRY_STEP_REPORT_INIT;
            ferry_status st = step(e, seq[i].bad, &rep);
            tap_ok(st == FERRY_OK && rep.skipped == seq[i].skipped && rep.skips_in_row == seq[i].row &&
                       rep.skipped_steps == seq[i].total,
                   "%s: step %zu (%g at element 7): skipped %d, %lld in a row, %lld in all (want %d, %lld, %lld)",
                   name, i + 1, (double)seq[i].bad, rep.skipped, (long long)rep.skips_in_row,
                   (long long)rep.skipped_steps, seq[i].skipped, seq[i].row, seq[i].total);
        }
        /* A load puts back the counts saved: the last entry of seq, then
         * the skip after the load adds one to each. */
        const long long row = seq[sizeof seq / sizeof seq[0] - 1].row, total = seq[sizeof seq / sizeof seq[0] - 1].total;
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        ferry_status st = ferry_engine_save(e, path, NULL, 0);
        if (st == FERRY_OK) st = step(e, NAN, &rep);
        if (st == FERRY_OK) st = step(e, NAN, &rep);
        if (st == FERRY_OK) st = ferry_engine_load(e, path, NULL, 0, NULL);
        if (st == FERRY_OK) st = step(e, NAN, &rep);
        tap_ok(st == FERRY_OK && rep.skips_in_row == row + 1 && rep.skipped_steps == total + 1,
               "%s: after a load the counts go on from the checkpoint's (%lld in a row, %lld in all; want %lld, %lld)",
               name, (long long)rep.skips_in_row, (long long)rep.skipped_steps, row + 1, total + 1);
        ferry_engine_destroy(e);
    }
    unlink(path);
    return tap_done();
}
