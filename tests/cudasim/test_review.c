/* What a reading of the cuda code found, each checked on the simulated
 * device where a GPU would be needed:
 *   - the encoder backward's shared-memory check counts the kernel's static
 *     shared memory: the widest C it accepts launches, the next is refused
 *     by the op with a sentence (it used to reach the launch, which a card
 *     refuses, and come back as a backend error);
 *   - the encoder backward keeps a token outside [0, V) inside dwte (as the
 *     forward reads it: row 0) instead of writing past the buffer;
 *   - CUDA_CHECK leaves no recovered error behind: after an op fails on a
 *     CUDA call, the next op's launch check does not report that error as
 *     its own;
 *   - params mode: a failed wait for a group's last use before its weights
 *     are freed is an error of the fetch that needed the room, not ignored;
 *   - the delayed update's upload waits for each group's own backward: an
 *     embedder that releases group 0 first in backward trains exactly as one
 *     that releases it last (its weights are not replaced while its backward
 *     may still read them).
 * The host waits are checked in test_engine_sim (no spinning wait). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dev/cudasim/cudasim.h"
#include "engine/intree.h"
#include "dev/ops/opcheck.h"
#include "backend/ops/ops_host.h"
#include "tests/gpu/gpu_util.h"
#include "tests/tap.h"

static backend *be;
static backend_stream *st;
static uint64_t rng = 0x7e51ee;

/* ---- the encoder ---- */

static void encoder_case(int C, int V, const int32_t *tok, int BT, const char *what)
{
    float *dout = gpu_rand_array(&rng, (size_t)BT * C, -1, 1);
    float *dwte = gpu_rand_array(&rng, (size_t)V * C, -1, 1), *dwpe = gpu_rand_array(&rng, (size_t)BT * C, -1, 1);
    void *d_dout = gpu_upload_bf16(be, st, dout, (size_t)BT * C), *d_dwte = gpu_upload_bf16(be, st, dwte, (size_t)V * C);
    void *d_dwpe = gpu_upload_bf16(be, st, dwpe, (size_t)BT * C), *d_tok = gpu_upload(be, st, tok, (size_t)BT * 4);
    /* The reference: tokens outside [0, V) count as token 0, as the forward reads them. */
    int32_t *clamped = malloc((size_t)BT * sizeof *clamped);
    for (int i = 0; i < BT; i++)
        clamped[i] = tok[i] < 0 || tok[i] >= V ? 0 : tok[i];
    hostop_encoder_backward(dwte, dwpe, dout, clamped, 1, BT, C, V, NULL);
    ferry_status s = ops_encoder_backward(st, d_dwte, d_dwpe, d_dout, d_tok, 1, BT, C, V, NULL);
    if (tap_is_status(s, FERRY_OK, "%s: encoder_backward runs", what)) {
        TAP_IS_STATUS(backend_stream_synchronize(st), FERRY_OK, "%s: and the device is well", what);
        tap_ok(cudasim_last_failure()[0] == '\0', "%s: nothing was written outside a buffer (%s)", what,
               cudasim_last_failure());
        float *got = gpu_download_bf16(st, d_dwte, (size_t)V * C);
        opcheck_err e = opcheck_compare(got, dwte, (size_t)V * C);
        tap_ok(e.rel <= 1e-2, "%s: dwte against the host reference, relative error %.2g", what, e.rel);
        free(got);
    }
    backend_free(be, d_dout), backend_free(be, d_dwte), backend_free(be, d_dwpe), backend_free(be, d_tok);
    free(dout), free(dwte), free(dwpe), free(clamped);
}

static void test_encoder(void)
{
    /* 12024 floats of accumulator plus the kernel's 1056 bytes of static
     * shared memory are the 48 KiB a block may have without the opt-in. */
    const int32_t tok[3] = {1, 2, 1};
    encoder_case(12024, 3, tok, 3, "C = 12024 (48 KiB of shared memory in all)");
    void *dummy = NULL;
    backend_alloc(be, (size_t)12025 * 8 * 2, &dummy);
    ferry_status s = ops_encoder_backward(st, dummy, dummy, dummy, dummy, 1, 2, 12025, 2, NULL);
    if (tap_is_status(s, FERRY_ERR_INVALID_ARGUMENT, "C = 12025: refused by the op, before any launch"))
        tap_ok(strstr(ferry_last_error(), "12024") != NULL, "... with a sentence naming the widest C: %s",
               ferry_last_error());
    backend_free(be, dummy);
    cudasim_reset_errors();
    const int32_t bad[6] = {3, 7, 0, 8, 2, -1}; /* V = 8: 8 and -1 are outside */
    encoder_case(96, 8, bad, 6, "tokens 8 and -1 with V = 8");
}

/* ---- CUDA_CHECK ---- */

static void test_cuda_check(void)
{
    const int N = 8, C = 32, V = 64;
    float *x = gpu_rand_array(&rng, (size_t)N * C, -1, 1), *w = gpu_rand_array(&rng, (size_t)V * C, -1, 1);
    int32_t tgt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    void *d_x = gpu_upload_bf16(be, st, x, (size_t)N * C), *d_w = gpu_upload_bf16(be, st, w, (size_t)V * C);
    void *d_dx = gpu_upload_bf16(be, st, x, (size_t)N * C), *d_dw = gpu_upload_bf16(be, st, w, (size_t)V * C);
    void *d_t = gpu_upload(be, st, tgt, sizeof tgt), *losses = NULL, *scratch = NULL, *g = NULL;
    backend_alloc(be, N * 4, &losses);
    backend_alloc(be, ops_classifier_scratch_bytes(be, N, V, C), &scratch);
    backend_alloc(be, (size_t)N * C * 2, &g);
    /* The classifier clears its fp32 accumulator with cudaMemsetAsync: make that fail. */
    cudasim_fail("cudaMemsetAsync", 1, 0, cudaErrorInvalidValue);
    ferry_status s = ops_classifier(st, losses, d_dx, d_dw, d_x, d_w, d_t, 1.0f / N, N, C, V, V, scratch, N);
    tap_ok(s == FERRY_ERR_BACKEND && strstr(ferry_last_error(), "cudaMemsetAsync"),
           "an injected cudaMemsetAsync failure fails the classifier, naming the call: %s", ferry_last_error());
    s = ops_gelu_forward(st, g, d_x, (size_t)N * C);
    if (!tap_is_status(s, FERRY_OK, "the next op (gelu) launches fine: the recovered error was cleared"))
        tap_diag("  it reported: %s", ferry_last_error());
    TAP_IS_STATUS(backend_stream_synchronize(st), FERRY_OK, "and the stream is well");
    backend_free(be, d_x), backend_free(be, d_w), backend_free(be, d_dx), backend_free(be, d_dw);
    backend_free(be, d_t), backend_free(be, losses), backend_free(be, scratch), backend_free(be, g);
    free(x), free(w);
}

/* ---- an embedder: a 3-layer network through ferry's ops ----
 * h1 = x W1^T + b1, a1 = gelu(h1), h2 = a1 W2^T + b2, then the classifier
 * over Wout (V x D). Groups: 0 = W1|b1, 1 = W2|b2, 2 = Wout. */
enum { D = 64, V = 96, N = 40 };

typedef struct net {
    ferry_engine *e;
    backend_stream *s;
    void *x, *h1, *a1, *h2, *dh2, *da1, *dh1, *dx, *losses, *scratch, *tgt;
} net;

static const size_t group_numel[3] = {D * D + D, D * D + D, (size_t)V * D};

static ferry_status net_open(net *n, ferry_offload mode, int delayed, int prefetch, uint64_t budget)
{
    memset(n, 0, sizeof *n);
    ferry_engine_config ec = FERRY_ENGINE_CONFIG_INIT;
    ec.backend = FERRY_BACKEND_CUDA;
    ec.offload = mode;
    ec.delayed_update = delayed;
    ec.prefetch_groups = prefetch;
    ec.device_budget_bytes = budget;
    ferry_status s = ferry_engine_create(&ec, &n->e);
    uint64_t seed = 31337;
    for (int g = 0; g < 3 && s == FERRY_OK; g++) {
        float *init = gpu_floats(group_numel[g]);
        for (size_t i = 0; i < group_numel[g]; i++)
            init[i] = (float)(tap_rand_unit(&seed) - 0.5) * 0.25f;
        char name[16];
        snprintf(name, sizeof name, "layer %d", g);
        int id;
        s = ferry_engine_add_group(n->e, name, group_numel[g], init, NULL, &id);
        free(init);
    }
    if (s == FERRY_OK)
        s = ferry_engine_setup(n->e);
    if (s != FERRY_OK)
        return s;
    n->s = engine_embed_stream(n->e);
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {{&n->x, N * D * 2}, {&n->h1, N * D * 2},   {&n->a1, N * D * 2},  {&n->h2, N * D * 2},
                {&n->dh2, N * D * 2}, {&n->da1, N * D * 2}, {&n->dh1, N * D * 2}, {&n->dx, N * D * 2},
                {&n->losses, N * 4},  {&n->tgt, N * 4},
                {&n->scratch, ops_classifier_scratch_bytes(engine_embed_backend(n->e), N, V, D)}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && s == FERRY_OK; i++)
        s = ferry_engine_alloc(n->e, FERRY_MEM_ACTIVATIONS, "net", bufs[i].bytes, bufs[i].p);
    if (s != FERRY_OK)
        return s;
    float xs[N * D];
    int32_t t[N];
    uint64_t ds = 4711;
    for (int i = 0; i < N * D; i++)
        xs[i] = (float)tap_rand_unit(&ds) * 2 - 1;
    for (int i = 0; i < N; i++)
        t[i] = (int32_t)(tap_rand_unit(&ds) * V);
    uint16_t xb[N * D];
    for (int i = 0; i < N * D; i++)
        xb[i] = opcheck_bf16_bits(xs[i]);
    if ((s = backend_memcpy_async(n->s, n->x, xb, sizeof xb, BACKEND_COPY_H2D)) == FERRY_OK &&
        (s = backend_memcpy_async(n->s, n->tgt, t, sizeof t, BACKEND_COPY_H2D)) == FERRY_OK)
        s = backend_stream_synchronize(n->s);
    return s;
}

#define TRY(call)                                                                                                \
    do {                                                                                                         \
        ferry_status try_ = (call);                                                                              \
        if (try_ != FERRY_OK)                                                                                    \
            return try_;                                                                                         \
    } while (0)

/* One step; `zero_first`: release group 0 first in backward (else last). */
static ferry_status net_step(net *n, bool zero_first, float *loss)
{
    ferry_engine *e = n->e;
    backend_stream *s = n->s;
    uint16_t *w[3], *g[3];
    TRY(ferry_engine_begin_micro_batch(e, 0, 1));
    TRY(ferry_engine_fetch(e, 0, FERRY_PHASE_FORWARD, (void **)&w[0]));
    TRY(ops_matmul_forward(s, n->h1, n->x, w[0], w[0] + D * D, N, D, D));
    TRY(ops_gelu_forward(s, n->a1, n->h1, (size_t)N * D));
    TRY(ferry_engine_release(e, 0, FERRY_PHASE_FORWARD));
    TRY(ferry_engine_fetch(e, 1, FERRY_PHASE_FORWARD, (void **)&w[1]));
    TRY(ops_matmul_forward(s, n->h2, n->a1, w[1], w[1] + D * D, N, D, D));
    TRY(ferry_engine_release(e, 1, FERRY_PHASE_FORWARD));
    /* Backward: every group fetched first, gradients computed, then released. */
    for (int k = 2; k >= 0; k--) {
        TRY(ferry_engine_fetch(e, k, FERRY_PHASE_BACKWARD, (void **)&w[k]));
        TRY(ferry_engine_grads(e, k, (void **)&g[k]));
    }
    TRY(backend_memset_async(s, n->dh2, 0, N * D * 2));
    TRY(backend_memset_async(s, n->da1, 0, N * D * 2));
    TRY(backend_memset_async(s, n->dh1, 0, N * D * 2));
    TRY(backend_memset_async(s, n->dx, 0, N * D * 2));
    TRY(ops_classifier(s, n->losses, n->dh2, g[2], n->h2, w[2], n->tgt, 1.0f / N, N, D, V, V, n->scratch, N));
    TRY(ops_matmul_backward(s, n->da1, g[1], g[1] + D * D, n->dh2, n->a1, w[1], N, D, D));
    TRY(ops_gelu_backward(s, n->dh1, n->h1, n->da1, (size_t)N * D));
    TRY(ops_matmul_backward(s, n->dx, g[0], g[0] + D * D, n->dh1, n->x, w[0], N, D, D));
    const int order[2][3] = {{2, 1, 0}, {0, 1, 2}};
    for (int k = 0; k < 3; k++) {
        int gi = order[zero_first][k];
        if (zero_first && gi == 1) /* group 1 is still fetched: its weights are still the embedder's */
            TRY(ops_matmul_forward(s, n->h2, n->a1, w[1], w[1] + D * D, N, D, D));
        TRY(ferry_engine_release(e, gi, FERRY_PHASE_BACKWARD));
    }
    float l[N];
    TRY(backend_memcpy_async(s, l, n->losses, sizeof l, BACKEND_COPY_D2H));
    TRY(backend_stream_synchronize(s));
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += l[i];
    *loss = (float)(sum / N);
    ferry_step_options so = FERRY_STEP_OPTIONS_INIT;
    so.lr = 1e-2f;
    return ferry_engine_step(e, &so, NULL);
}

static void net_close(net *n)
{
    ferry_engine_destroy(n->e);
    memset(n, 0, sizeof *n);
}

static float *net_weights(net *n)
{
    float *w = gpu_floats(group_numel[0] + group_numel[1] + group_numel[2]);
    size_t at = 0;
    for (int g = 0; g < 3; g++) {
        if (ferry_engine_get_weights(n->e, g, w + at) != FERRY_OK)
            return w;
        at += group_numel[g];
    }
    return w;
}

static void test_release_order(void)
{
    enum { STEPS = 5 };
    float loss[2][STEPS];
    float *w[2] = {NULL, NULL};
    bool ok = true;
    for (int zero_first = 0; zero_first < 2 && ok; zero_first++) {
        net n;
        ok = tap_is_status(net_open(&n, FERRY_OFFLOAD_OPTIMIZER, 1, 2, 0), FERRY_OK,
                           "the embedder on cuda with the delayed update sets up");
        for (int s = 0; ok && s < STEPS; s++)
            ok = tap_is_status(net_step(&n, zero_first, &loss[zero_first][s]), FERRY_OK, "%s: step %d",
                               zero_first ? "group 0 released first" : "group 0 released last", s);
        if (ok)
            ok = tap_is_status(ferry_engine_synchronize(n.e), FERRY_OK, "the last update lands");
        if (ok)
            w[zero_first] = net_weights(&n);
        net_close(&n);
    }
    if (ok) {
        tap_ok(memcmp(loss[0], loss[1], sizeof loss[0]) == 0,
               "the release order changes no loss (last %.6f and %.6f)", loss[0][STEPS - 1], loss[1][STEPS - 1]);
        tap_ok(loss[0][STEPS - 1] < loss[0][0], "the embedder learns (%.4f -> %.4f)", loss[0][0], loss[0][STEPS - 1]);
        size_t all = group_numel[0] + group_numel[1] + group_numel[2];
        tap_ok(memcmp(w[0], w[1], all * sizeof(float)) == 0, "nor any weight, bit for bit (%zu of them)", all);
    }
    free(w[0]), free(w[1]);
}

/* A step, then groups 0 and 1 fetched and released for the next forward. */
static ferry_status step_then_two(net *n)
{
    float loss;
    void *w;
    ferry_status s = net_step(n, false, &loss);
    if (s == FERRY_OK) s = ferry_engine_begin_micro_batch(n->e, 0, 1);
    if (s == FERRY_OK) s = ferry_engine_fetch(n->e, 0, FERRY_PHASE_FORWARD, &w);
    if (s == FERRY_OK) s = ferry_engine_release(n->e, 0, FERRY_PHASE_FORWARD);
    if (s == FERRY_OK) s = ferry_engine_fetch(n->e, 1, FERRY_PHASE_FORWARD, &w);
    if (s == FERRY_OK) s = ferry_engine_release(n->e, 1, FERRY_PHASE_FORWARD);
    return s;
}

/* Params mode, every group's weights kept on the device after release (the
 * budget holds them): an allocation that needs their room evicts them, each
 * only after waiting for its last use. */
static void test_eviction(void)
{
    net n;
    if (!tap_is_status(net_open(&n, FERRY_OFFLOAD_PARAMS, 0, 0, 0), FERRY_OK, "the embedder in params mode sets up"))
        return;
    TAP_IS_STATUS(step_then_two(&n), FERRY_OK, "a step in params mode, then groups 0 and 1 fetched and released");
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    TAP_IS_STATUS(ferry_engine_memory_stats(n.e, &ms), FERRY_OK, "the memory stats");
    tap_ok(ms.device_current_bytes[FERRY_MEM_PARAMS] >= (group_numel[0] + group_numel[1] + group_numel[2]) * 2,
           "residency kept every group's weights (%llu bytes)",
           (unsigned long long)ms.device_current_bytes[FERRY_MEM_PARAMS]);
    /* Room for this only once a released group's weights are gone. */
    size_t want = ms.device_budget_bytes - ms.device_total_current_bytes + group_numel[0];
    /* The next event wait is an eviction's wait for a group's last use. */
    cudasim_fail("cudaEventSynchronize", 1, 0, cudaErrorUnknown);
    void *p = NULL;
    ferry_status s = ferry_engine_alloc(n.e, FERRY_MEM_ACTIVATIONS, "big", want, &p);
    if (tap_ok(s != FERRY_OK, "an allocation that needs released weights evicted, when the wait for their last use "
                              "failed, is an error (%s)",
               ferry_status_string(s)))
        tap_diag("  %s", ferry_last_error());
    cudasim_fail(NULL, 0, 0, 0);
    ferry_memory_stats after = FERRY_MEMORY_STATS_INIT;
    TAP_IS_STATUS(ferry_engine_memory_stats(n.e, &after), FERRY_OK, "the memory stats after");
    tap_ok(after.device_current_bytes[FERRY_MEM_PARAMS] == ms.device_current_bytes[FERRY_MEM_PARAMS],
           "the weights whose wait failed stay (%llu bytes before, %llu after)",
           (unsigned long long)ms.device_current_bytes[FERRY_MEM_PARAMS],
           (unsigned long long)after.device_current_bytes[FERRY_MEM_PARAMS]);
    net_close(&n);
}

int main(void)
{
    ferry_status rc = backend_open(FERRY_BACKEND_CUDA, &be);
    if (rc != FERRY_OK) {
        printf("Bail out! backend_open(cuda): %s\n", ferry_last_error());
        return 1;
    }
    const size_t ws_bytes = 8u << 20;
    void *ws = NULL;
    if (backend_stream_create(be, "test", &st) != FERRY_OK || backend_alloc(be, ws_bytes, &ws) != FERRY_OK ||
        ops_init(be, ws, ws_bytes) != FERRY_OK) {
        printf("Bail out! setup: %s\n", ferry_last_error());
        return 1;
    }
    tap_diag("seed 0x%llx; %s", (unsigned long long)rng, backend_device_name(be));
    test_encoder();
    test_cuda_check();
    ops_shutdown(be);
    backend_free(be, ws);
    backend_stream_destroy(st);
    backend_close(be);
    test_release_order();
    test_eviction();
    return tap_done();
}
