/* ferry_engine_abandon_step: a step dropped between its micro-batches leaves
 * the engine exactly as the last step left it, in every offload mode and with
 * the delayed update.
 * - Engine A takes steps 1 and 2 (3 micro-batches each). Engine B takes
 *   step 1, then begins step 2 with gradients 10^4 times larger (1 or all 3
 *   of its micro-batches, or stopped halfway through a backward), abandons
 *   it, saves, and takes the real step 2: its weights must equal A's bit
 *   for bit, and the file saved after the abandon, loaded into a fresh
 *   engine, must give A's weights after step 1 and its step count.
 * - With a group still fetched the call is refused and changes nothing;
 *   during inference it is refused; between steps it does nothing. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/error.h"
#include "engine_fixture.h"
#include "tap.h"
#include "test_dtype.h"

enum { GROUPS = 2, MICRO = 3 };
static const size_t numel[GROUPS] = {5000, 777};
static char dir[] = "/tmp/ferry-abandon-XXXXXX";

static ferry_engine *make(ferry_offload mode, int delayed)
{
    ferry_engine_config cfg = efix_config(FERRY_BACKEND_HOST, mode, test_dtype(), 2);
    cfg.delayed_update = delayed;
    return efix_plain(&cfg, GROUPS, numel, 2024);
}

/* Backward of group g in micro-batch k: dw += (w - sin(i)) * (1 + k/10) * scale. */
static ferry_status backward(ferry_engine *e, int g, int k, float scale)
{
    void *w, *dw;
    ferry_status st = ferry_engine_fetch(e, g, FERRY_PHASE_BACKWARD, &w);
    if (st == FERRY_OK) st = ferry_engine_grads(e, g, &dw);
    if (st == FERRY_OK) st = ferry_engine_synchronize(e);
    ferry_dtype t = ferry_engine_dtype(e);
    for (size_t i = 0; i < numel[g] && st == FERRY_OK; i++)
        dtype_store_f32(dw, t, i,
                        dtype_load_f32(dw, t, i) +
                            (dtype_load_f32(w, t, i) - sinf((float)i)) * (1.0f + 0.1f * (float)k) * scale);
    return st == FERRY_OK ? ferry_engine_release(e, g, FERRY_PHASE_BACKWARD) : st;
}

/* Micro-batch k: forward reads every group, backward writes each. */
static ferry_status micro_batch(ferry_engine *e, int k, float scale, int groups_in_backward)
{
    ferry_status st = ferry_engine_begin_micro_batch(e, k, MICRO);
    for (int g = 0; g < GROUPS && st == FERRY_OK; g++) {
        void *w;
        st = ferry_engine_fetch(e, g, FERRY_PHASE_FORWARD, &w);
        if (st == FERRY_OK) st = ferry_engine_release(e, g, FERRY_PHASE_FORWARD);
    }
    for (int g = GROUPS - 1; g >= GROUPS - groups_in_backward && st == FERRY_OK; g--)
        st = backward(e, g, k, scale);
    return st;
}

static ferry_status full_step(ferry_engine *e)
{
    ferry_status st = FERRY_OK;
    for (int k = 0; k < MICRO && st == FERRY_OK; k++)
        st = micro_batch(e, k, 1.0f, GROUPS);
    ferry_step_options o = FERRY_STEP_OPTIONS_INIT;
    o.lr = 0.01f;
    o.weight_decay = 0.1f;
    return st == FERRY_OK ? ferry_engine_step(e, &o, NULL) : st;
}

static float *weights(ferry_engine *e) { return efix_plain_weights(e, GROUPS, numel); }

static size_t bytes(void) { return (numel[0] + numel[1]) * sizeof(float); }

/* B, loaded with A's step 1 (the file `step1`), begins step 2 with huge
 * gradients (`micros` micro-batches, the last of them with `groups` groups
 * through backward), abandons it, saves, and takes step 2 again; C loads
 * what B saved. */
static void case_abandoned(ferry_engine *b, ferry_engine *c, const char *mode_name, const char *step1, int micros,
                           int groups, const float *a1, const float *a2)
{
    char name[128], path[300];
    snprintf(name, sizeof name, "%s, abandoned after %d micro-batch(es), the last with %d of %d groups", mode_name,
             micros, groups, GROUPS);
    snprintf(path, sizeof path, "%s/abandoned.ckpt", dir);
    ferry_status st = ferry_engine_load(b, step1, NULL, 0, NULL);
    for (int k = 0; k < micros && st == FERRY_OK; k++)
        st = micro_batch(b, k, 1e4f, k == micros - 1 ? groups : GROUPS);
    TAP_IS_STATUS(st, FERRY_OK, "%s: step 1 and the start of step 2", name);
    TAP_IS_STATUS(ferry_engine_abandon_step(b), FERRY_OK, "%s: abandoned", name);
    TAP_IS_INT(ferry_engine_steps(b), 1, "%s: the step count is the last step's", name);
    TAP_IS_STATUS(ferry_engine_save(b, path, "x", 1), FERRY_OK, "%s: saved after the abandon", name);
    TAP_IS_STATUS(full_step(b), FERRY_OK, "%s: step 2 again, from micro-batch 0", name);
    float *wb = weights(b);
    tap_ok(memcmp(wb, a2, bytes()) == 0, "%s: then equal, bitwise, to two steps without the abandon", name);
    TAP_IS_STATUS(ferry_engine_load(c, path, NULL, 0, NULL), FERRY_OK, "%s: the save loads", name);
    TAP_IS_INT(ferry_engine_steps(c), 1, "%s: at step 1", name);
    float *wc = weights(c);
    tap_ok(memcmp(wc, a1, bytes()) == 0, "%s: with step 1's weights, bitwise", name);
    free(wb);
    free(wc);
}

static void test_mode(ferry_offload mode, int delayed)
{
    char name[64], step1[300];
    snprintf(name, sizeof name, "%s%s", ferry_offload_name(mode), delayed ? " + delayed update" : "");
    snprintf(step1, sizeof step1, "%s/step1.ckpt", dir);
    ferry_engine *a = make(mode, delayed), *b = make(mode, delayed), *c = make(mode, delayed);
    ferry_status st = a && b && c ? full_step(a) : FERRY_ERR_STATE;
    if (st == FERRY_OK)
        st = ferry_engine_save(a, step1, NULL, 0);
    float *a1 = st == FERRY_OK ? weights(a) : NULL;
    if (st == FERRY_OK)
        st = full_step(a);
    if (tap_is_status(st, FERRY_OK, "%s: the reference, two steps, with a save after the first", name)) {
        float *a2 = weights(a);
        case_abandoned(b, c, name, step1, 1, GROUPS, a1, a2);
        case_abandoned(b, c, name, step1, MICRO, GROUPS, a1, a2);
        case_abandoned(b, c, name, step1, 2, 1, a1, a2);
        free(a2);
    }
    free(a1);
    unlink(step1);
    ferry_engine_destroy(a);
    ferry_engine_destroy(b);
    ferry_engine_destroy(c);
}

/* What the call refuses, and what it leaves. */
static void test_refusals(void)
{
    ferry_engine *e = make(FERRY_OFFLOAD_OPTIMIZER, 0);
    if (!e) {
        tap_ok(0, "engine: %s", ferry_last_error());
        return;
    }
    TAP_IS_STATUS(ferry_engine_abandon_step(e), FERRY_OK, "between steps: nothing to do");
    TAP_IS_INT(ferry_engine_steps(e), 0, "and the step count is unchanged");
    void *w;
    ferry_status st = ferry_engine_begin_micro_batch(e, 0, 1);
    if (st == FERRY_OK)
        st = ferry_engine_fetch(e, 0, FERRY_PHASE_FORWARD, &w);
    TAP_IS_STATUS(st, FERRY_OK, "a micro-batch with group 0 fetched");
    st = ferry_engine_abandon_step(e);
    tap_ok(st == FERRY_ERR_STATE && strstr(ferry_last_error(), "still fetched"),
           "with a group fetched: refused: %s", ferry_last_error());
    st = ferry_engine_release(e, 0, FERRY_PHASE_FORWARD);
    if (st == FERRY_OK)
        st = ferry_engine_abandon_step(e);
    TAP_IS_STATUS(st, FERRY_OK, "released, then abandoned");
    TAP_IS_STATUS(ferry_engine_begin_inference(e), FERRY_OK, "inference may begin after an abandon");
    st = ferry_engine_abandon_step(e);
    tap_ok(st == FERRY_ERR_STATE && strstr(ferry_last_error(), "inference"), "during inference: refused: %s",
           ferry_last_error());
    TAP_IS_STATUS(ferry_engine_end_inference(e), FERRY_OK, "inference ends");
    st = ferry_engine_abandon_step(NULL);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT, "a NULL engine: refused (%s)", ferry_last_error());
    ferry_engine_destroy(e);
}

int main(void)
{
    if (!mkdtemp(dir))
        tap_plan_skip("cannot create a temporary folder");
    tap_diag("device storage %s", test_dtype_name());
    test_mode(FERRY_OFFLOAD_NONE, 0);
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 0);
    test_mode(FERRY_OFFLOAD_OPTIMIZER, 1);
    test_mode(FERRY_OFFLOAD_PARAMS, 0);
    test_refusals();
    char path[300];
    snprintf(path, sizeof path, "%s/abandoned.ckpt", dir);
    unlink(path);
    rmdir(dir);
    return tap_done();
}
