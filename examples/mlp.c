/* mlp.c: the ferry engine inside a trainer of your own, in one file.
 *
 * Trains a two-layer perceptron, y = W2 tanh(W1 x + b1) + b2, to fit a smooth
 * function of 4 inputs. The engine owns the weights, the AdamW state and
 * where they live (the offload mode); this program only computes. Its math
 * is plain C on the calling thread, so it needs the host backend, where
 * "device" memory is ordinary memory (on a GPU you would launch kernels on
 * ferry_engine_compute_stream() instead).
 *
 *   usage: mlp [none|optimizer|params]
 *
 * Exit status: 0 if the loss fell below a tenth of its first value, 1 if not
 * or on an error, 77 (a test runner's "skipped") on a non-host backend. */
#include <ferry.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { D = 4, H = 32, N = 256, STEPS = 300, PRINT_EVERY = 50 };

/* Group 0 holds layer 1 (W1 [H][D], then b1 [H]); group 1 holds layer 2
 * (W2 [H], then b2). A group is one contiguous buffer of floats. */
enum { L1_SIZE = H * D + H, L2_SIZE = H + 1 };

static float x[N][D], y[N];      /* the data set */
static float hid[N][H], out[N];  /* activations kept for backward */
static float dhid[N][H];         /* gradient flowing from layer 2 into layer 1 */

/* A seeded generator (xorshift64): uniform in [-1, 1). */
static float uniform(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 4503599627370496.0 - 1.0);
}

static void layer1_forward(const float *w)
{
    const float *W1 = w, *b1 = w + H * D;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < H; j++) {
            float a = b1[j];
            for (int k = 0; k < D; k++) a += W1[j * D + k] * x[n][k];
            hid[n][j] = tanhf(a);
        }
}

/* Returns the mean squared error. */
static float layer2_forward(const float *w)
{
    const float *W2 = w, b2 = w[H];
    double loss = 0;
    for (int n = 0; n < N; n++) {
        float a = b2;
        for (int j = 0; j < H; j++) a += W2[j] * hid[n][j];
        out[n] = a;
        loss += (double)(a - y[n]) * (a - y[n]);
    }
    return (float)(loss / N);
}

/* Adds dLoss/dW2, dLoss/db2 into g and leaves dLoss/dhid for layer 1. */
static void layer2_backward(const float *w, float *g)
{
    for (int n = 0; n < N; n++) {
        float dout = 2.0f * (out[n] - y[n]) / N;
        for (int j = 0; j < H; j++) {
            g[j] += dout * hid[n][j];
            dhid[n][j] = dout * w[j] * (1.0f - hid[n][j] * hid[n][j]); /* through tanh */
        }
        g[H] += dout;
    }
}

static void layer1_backward(float *g)
{
    for (int n = 0; n < N; n++)
        for (int j = 0; j < H; j++) {
            for (int k = 0; k < D; k++) g[j * D + k] += dhid[n][j] * x[n][k];
            g[H * D + j] += dhid[n][j];
        }
}

/* On a failed call: print the library's sentence and go to cleanup. */
#define CHECK(call)                                                                  \
    do {                                                                             \
        ferry_status st_ = (call);                                                   \
        if (st_ != FERRY_OK) {                                                       \
            fprintf(stderr, "mlp: %s: %s\n", ferry_status_string(st_), ferry_last_error()); \
            goto done;                                                               \
        }                                                                            \
    } while (0)

int main(int argc, char **argv)
{
    int rc = 1;
    ferry_engine *e = NULL;
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;          /* unless $FERRY_BACKEND says otherwise */
    if (getenv("FERRY_BACKEND")) CHECK(ferry_backend_parse(getenv("FERRY_BACKEND"), &cfg.backend));
    CHECK(ferry_offload_parse(argc > 1 ? argv[1] : "optimizer", &cfg.offload));
    cfg.device_budget_bytes = 16 << 20;        /* a hard cap, as a GPU's memory would be */
    CHECK(ferry_engine_create(&cfg, &e));
    if (ferry_engine_backend(e) != FERRY_BACKEND_HOST) {
        fprintf(stderr, "mlp: computes in plain C on the host, so it needs the host backend "
                        "(got %s); run it with FERRY_BACKEND=host\n",
                ferry_backend_name(ferry_engine_backend(e)));
        rc = 77;
        goto done;
    }

    /* The data and the initial weights, from fixed seeds. */
    uint64_t seed = 2026;
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < D; k++) x[n][k] = uniform(&seed);
        y[n] = sinf(3.0f * x[n][0]) + x[n][1] * x[n][2] - 0.5f * x[n][3];
    }
    static float l1[L1_SIZE], l2[L2_SIZE];     /* biases start at 0 */
    for (int i = 0; i < H * D; i++) l1[i] = uniform(&seed);
    for (int i = 0; i < H; i++) l2[i] = uniform(&seed) / sqrtf(H);
    int g1, g2;
    CHECK(ferry_engine_add_group(e, "layer 1", L1_SIZE, l1, NULL, &g1));  /* values are copied */
    CHECK(ferry_engine_add_group(e, "layer 2", L2_SIZE, l2, NULL, &g2));
    CHECK(ferry_engine_setup(e));
    printf("%s\n", ferry_engine_describe(e));

    ferry_step_options opt = FERRY_STEP_OPTIONS_INIT;
    opt.lr = 1e-2f;
    opt.max_grad_norm = 1.0f;                  /* clip the global gradient norm */
    float first = 0, loss = 0;
    void *w, *g;
    for (int step = 0; step < STEPS; step++) {
        CHECK(ferry_engine_begin_micro_batch(e, 0, 1)); /* one micro-batch per step */
        /* Forward, group by group: fetch, wait for the weights, compute, release. */
        CHECK(ferry_engine_fetch(e, g1, FERRY_PHASE_FORWARD, &w));
        CHECK(ferry_engine_synchronize(e));    /* we compute on this thread, not on a stream */
        layer1_forward(w);
        CHECK(ferry_engine_release(e, g1, FERRY_PHASE_FORWARD));
        CHECK(ferry_engine_fetch(e, g2, FERRY_PHASE_FORWARD, &w));
        CHECK(ferry_engine_synchronize(e));
        loss = layer2_forward(w);
        CHECK(ferry_engine_release(e, g2, FERRY_PHASE_FORWARD));
        /* Backward, last layer first: add each group's gradients into its
         * buffer; the release hands them to the engine (drained to the host
         * in the offload modes while the next group computes). */
        CHECK(ferry_engine_fetch(e, g2, FERRY_PHASE_BACKWARD, &w));
        CHECK(ferry_engine_grads(e, g2, &g));
        CHECK(ferry_engine_synchronize(e));
        layer2_backward(w, g);
        CHECK(ferry_engine_release(e, g2, FERRY_PHASE_BACKWARD));
        CHECK(ferry_engine_fetch(e, g1, FERRY_PHASE_BACKWARD, &w));
        CHECK(ferry_engine_grads(e, g1, &g));
        CHECK(ferry_engine_synchronize(e));
        layer1_backward(g);
        CHECK(ferry_engine_release(e, g1, FERRY_PHASE_BACKWARD));
        /* AdamW on every group; returns while the update is still under way. */
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        CHECK(ferry_engine_step(e, &opt, &rep));
        if (step == 0) first = loss;
        if (step % PRINT_EVERY == 0 || step == STEPS - 1)
            printf("step %4d  loss %.5f  grad norm %.4f%s\n", step, loss, rep.grad_norm,
                   rep.skipped ? "  (skipped: non-finite gradient)" : "");
    }
    CHECK(ferry_engine_synchronize(e));

    /* Where the bytes were and where the time went. */
    ferry_memory_stats ms = FERRY_MEMORY_STATS_INIT;
    ferry_step_timing t = FERRY_STEP_TIMING_INIT;
    CHECK(ferry_engine_memory_stats(e, &ms));
    CHECK(ferry_engine_step_timing(e, &t));
    printf("device peak %llu bytes of a %llu-byte budget:", (unsigned long long)ms.device_total_peak_bytes,
           (unsigned long long)ms.device_budget_bytes);
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (ms.device_peak_bytes[c])
            printf(" %s %llu", ferry_mem_category_name((ferry_mem_category)c),
                   (unsigned long long)ms.device_peak_bytes[c]);
    printf("\nhost peak %llu bytes\n", (unsigned long long)ms.host_peak_bytes);
    printf("last step %.3f ms: optimizer %.3f ms; compute waited %.3f ms for the update, %.3f ms "
           "for weight fetches\n", t.step_ms, t.optimizer_ms, t.compute_wait_optimizer_ms,
           t.compute_wait_transfer_ms);
    rc = loss < 0.1f * first ? 0 : 1;
    printf("loss %.5f -> %.5f: %s\n", first, loss, rc == 0 ? "learned" : "did NOT fall below a tenth");
done:
    ferry_engine_destroy(e);
    return rc;
}
