/* cuda_mlp.cu: the ferry engine inside a CUDA trainer of your own.
 *
 * The model and data of mlp.c (a two-layer perceptron fitting a smooth
 * function of 4 inputs), computed by this program's own CUDA kernels on the
 * GPU. The engine owns the weights, the AdamW state and where they live;
 * this program launches every kernel on the engine's compute stream
 * (ferry_engine_compute_stream()), reads the weights and writes the
 * gradients in the engine's device type (ferry_engine_dtype(): bf16 from
 * sm_80, f16 on sm_70 and sm_75), and scales its loss's gradient by
 * ferry_engine_loss_scale() (1 unless the type is f16). Its activations
 * come from the engine's device budget (ferry_engine_alloc()).
 *
 * Built outside the tree against the installed library:
 *   nvcc -O2 -o cuda_mlp cuda_mlp.cu $(pkg-config --cflags --libs ferry)
 *
 *   usage: cuda_mlp [none|optimizer|params]
 *
 * Exit status: 0 if the loss fell below a tenth of its first value, 1 if not
 * or on an error, 77 (a test runner's "skipped") where no GPU can be used. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <ferry.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { D = 4, H = 32, N = 256, STEPS = 300, PRINT_EVERY = 50 };
/* Group 0: W1 [H][D], then b1 [H]. Group 1: W2 [H], then b2. */
enum { L1_SIZE = H * D + H, L2_SIZE = H + 1 };

/* ---- the device element type ---- */

static __host__ __device__ inline float to_f32(float v) { return v; }
static __host__ __device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
static __host__ __device__ inline float to_f32(__half v) { return __half2float(v); }
template <typename T> static __host__ __device__ inline T from_f32(float v);
template <> __host__ __device__ inline float from_f32<float>(float v) { return v; }
template <> __host__ __device__ inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __host__ __device__ inline __half from_f32<__half>(float v) { return __float2half(v); }

/* ---- the kernels: one thread per output, sums in a fixed order ---- */

/* hid[n][j] = tanh(b1[j] + W1[j] . x[n]) */
template <typename T>
__global__ void layer1_forward(const T *w, const float *x, float *hid)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H) return;
    int n = i / H, j = i % H;
    float a = to_f32(w[H * D + j]);
    for (int k = 0; k < D; k++) a += to_f32(w[j * D + k]) * x[n * D + k];
    hid[i] = tanhf(a);
}

/* out[n] = b2 + W2 . hid[n]; sqerr[n] = (out[n] - y[n])^2 */
template <typename T>
__global__ void layer2_forward(const T *w, const float *hid, const float *y, float *out, float *sqerr)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float a = to_f32(w[H]);
    for (int j = 0; j < H; j++) a += to_f32(w[j]) * hid[n * H + j];
    out[n] = a;
    sqerr[n] = (a - y[n]) * (a - y[n]);
}

/* dout[n] = scale * d(mean squared error)/d out[n]; dhid = dout W2 (1 - hid^2) */
template <typename T>
__global__ void layer2_backward_input(const T *w, const float *hid, const float *out, const float *y, float scale,
                                      float *dout, float *dhid)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H) return;
    int n = i / H, j = i % H;
    float d = scale * 2.0f * (out[n] - y[n]) / N;
    if (j == 0) dout[n] = d;
    dhid[i] = d * to_f32(w[j]) * (1.0f - hid[i] * hid[i]);
}

/* g[j] += sum_n dout[n] hid[n][j]; g[H] += sum_n dout[n] */
template <typename T>
__global__ void layer2_backward_weights(const float *hid, const float *dout, T *g)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j > H) return;
    float s = 0;
    for (int n = 0; n < N; n++) s += dout[n] * (j < H ? hid[n * H + j] : 1.0f);
    g[j] = from_f32<T>(to_f32(g[j]) + s);
}

/* g[j][k] += sum_n dhid[n][j] x[n][k]; g[H D + j] += sum_n dhid[n][j] */
template <typename T>
__global__ void layer1_backward_weights(const float *x, const float *dhid, T *g)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= L1_SIZE) return;
    int j = i < H * D ? i / D : i - H * D, k = i < H * D ? i % D : -1;
    float s = 0;
    for (int n = 0; n < N; n++) s += dhid[n * H + j] * (k >= 0 ? x[n * D + k] : 1.0f);
    g[i] = from_f32<T>(to_f32(g[i]) + s);
}

/* ---- the trainer ---- */

#define CHECK(call)                                                                             \
    do {                                                                                        \
        ferry_status st_ = (call);                                                              \
        if (st_ != FERRY_OK) {                                                                  \
            fprintf(stderr, "cuda_mlp: %s: %s\n", ferry_status_string(st_), ferry_last_error()); \
            goto done;                                                                          \
        }                                                                                       \
    } while (0)
#define CUDA(call)                                                                              \
    do {                                                                                        \
        cudaError_t rc_ = (call);                                                               \
        if (rc_ != cudaSuccess) {                                                               \
            fprintf(stderr, "cuda_mlp: %s: %s\n", #call, cudaGetErrorString(rc_));              \
            goto done;                                                                          \
        }                                                                                       \
    } while (0)

static float uniform(uint64_t *s)
{
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 4503599627370496.0 - 1.0);
}

static unsigned blocks(int n) { return (unsigned)((n + 127) / 128); }

/* The device buffers this program allocates from the engine's budget. */
typedef struct buffers {
    float *x, *y, *hid, *out, *dout, *dhid, *sqerr;
} buffers;

/* One training step: forward and backward, group by group; the loss is
 * left in *loss. T is the engine's device type. */
template <typename T>
static ferry_status train_step(ferry_engine *e, cudaStream_t s, const buffers *b, int g1, int g2, float *loss)
{
    static float sqerr[N];
    void *w, *g;
    ferry_status st;
    float scale = ferry_engine_loss_scale(e);
    if ((st = ferry_engine_begin_micro_batch(e, 0, 1)) != FERRY_OK) return st;
    /* Forward: each group's weights are ready for work on s after its fetch. */
    if ((st = ferry_engine_fetch(e, g1, FERRY_PHASE_FORWARD, &w)) != FERRY_OK) return st;
    layer1_forward<T><<<blocks(N * H), 128, 0, s>>>((const T *)w, b->x, b->hid);
    if ((st = ferry_engine_release(e, g1, FERRY_PHASE_FORWARD)) != FERRY_OK) return st;
    if ((st = ferry_engine_fetch(e, g2, FERRY_PHASE_FORWARD, &w)) != FERRY_OK) return st;
    layer2_forward<T><<<blocks(N), 128, 0, s>>>((const T *)w, b->hid, b->y, b->out, b->sqerr);
    if ((st = ferry_engine_release(e, g2, FERRY_PHASE_FORWARD)) != FERRY_OK) return st;
    /* Backward, last layer first; a release hands the group's gradients to
     * the engine (drained to the host in the offload modes meanwhile). */
    if ((st = ferry_engine_fetch(e, g2, FERRY_PHASE_BACKWARD, &w)) != FERRY_OK) return st;
    if ((st = ferry_engine_grads(e, g2, &g)) != FERRY_OK) return st;
    layer2_backward_input<T><<<blocks(N * H), 128, 0, s>>>((const T *)w, b->hid, b->out, b->y, scale, b->dout,
                                                           b->dhid);
    layer2_backward_weights<T><<<1, 64, 0, s>>>(b->hid, b->dout, (T *)g);
    if ((st = ferry_engine_release(e, g2, FERRY_PHASE_BACKWARD)) != FERRY_OK) return st;
    if ((st = ferry_engine_fetch(e, g1, FERRY_PHASE_BACKWARD, &w)) != FERRY_OK) return st;
    if ((st = ferry_engine_grads(e, g1, &g)) != FERRY_OK) return st;
    layer1_backward_weights<T><<<blocks(L1_SIZE), 128, 0, s>>>(b->x, b->dhid, (T *)g);
    if ((st = ferry_engine_release(e, g1, FERRY_PHASE_BACKWARD)) != FERRY_OK) return st;
    /* The loss, read back on the same stream. */
    cudaError_t rc = cudaGetLastError();
    if (rc == cudaSuccess) rc = cudaMemcpyAsync(sqerr, b->sqerr, sizeof sqerr, cudaMemcpyDeviceToHost, s);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(s);
    if (rc != cudaSuccess) {
        fprintf(stderr, "cuda_mlp: a kernel or the loss's copy failed: %s\n", cudaGetErrorString(rc));
        return FERRY_ERR_BACKEND;
    }
    double sum = 0;
    for (int n = 0; n < N; n++) sum += sqerr[n];
    *loss = (float)(sum / N);
    return FERRY_OK;
}

int main(int argc, char **argv)
{
    int rc = 1;
    ferry_engine *e = NULL;
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_CUDA;
    cfg.device_budget_bytes = 64 << 20; /* a hard cap, whatever the card has */
    static float l1[L1_SIZE], l2[L2_SIZE], x[N * D], y[N];
    buffers b = {};
    float first = 0, loss = 0;
    int g1 = 0, g2 = 0;
    cudaStream_t s;
    ferry_dtype dt;
    ferry_step_options opt = FERRY_STEP_OPTIONS_INIT;
    uint64_t seed = 2026;

    CHECK(ferry_offload_parse(argc > 1 ? argv[1] : "optimizer", &cfg.offload));
    {
        ferry_status st = ferry_engine_create(&cfg, &e);
        if (st == FERRY_ERR_UNSUPPORTED) { /* no GPU, or a ferry built without CUDA */
            fprintf(stderr, "cuda_mlp: skipped: %s\n", ferry_last_error());
            return 77;
        }
        CHECK(st);
    }
    s = (cudaStream_t)ferry_engine_compute_stream(e);
    dt = ferry_engine_dtype(e);

    /* The data and the initial weights, from mlp.c's seeds. */
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < D; k++) x[n * D + k] = uniform(&seed);
        y[n] = sinf(3.0f * x[n * D]) + x[n * D + 1] * x[n * D + 2] - 0.5f * x[n * D + 3];
    }
    for (int i = 0; i < H * D; i++) l1[i] = uniform(&seed);
    for (int i = 0; i < H; i++) l2[i] = uniform(&seed) / sqrtf(H);
    CHECK(ferry_engine_add_group(e, "layer 1", L1_SIZE, l1, NULL, &g1));
    CHECK(ferry_engine_add_group(e, "layer 2", L2_SIZE, l2, NULL, &g2));
    CHECK(ferry_engine_setup(e));
    printf("%s\n", ferry_engine_describe(e));

    /* Inputs and activations from the engine's device budget. */
    CHECK(ferry_engine_alloc(e, FERRY_MEM_OTHER, "x", sizeof x, (void **)&b.x));
    CHECK(ferry_engine_alloc(e, FERRY_MEM_OTHER, "y", sizeof y, (void **)&b.y));
    CHECK(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "hidden", sizeof(float) * N * H, (void **)&b.hid));
    CHECK(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "out", sizeof(float) * N, (void **)&b.out));
    CHECK(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "dout", sizeof(float) * N, (void **)&b.dout));
    CHECK(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "dhidden", sizeof(float) * N * H, (void **)&b.dhid));
    CHECK(ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "squared error", sizeof(float) * N, (void **)&b.sqerr));
    CUDA(cudaMemcpyAsync(b.x, x, sizeof x, cudaMemcpyHostToDevice, s));
    CUDA(cudaMemcpyAsync(b.y, y, sizeof y, cudaMemcpyHostToDevice, s));

    opt.lr = 1e-2f;
    opt.max_grad_norm = 1.0f;
    for (int step = 0; step < STEPS; step++) {
        if (dt == FERRY_DTYPE_BF16) CHECK(train_step<__nv_bfloat16>(e, s, &b, g1, g2, &loss));
        else if (dt == FERRY_DTYPE_F16) CHECK(train_step<__half>(e, s, &b, g1, g2, &loss));
        else CHECK(train_step<float>(e, s, &b, g1, g2, &loss));
        ferry_step_report rep = FERRY_STEP_REPORT_INIT;
        CHECK(ferry_engine_step(e, &opt, &rep)); /* returns while the update is under way */
        if (step == 0) first = loss;
        if (step % PRINT_EVERY == 0 || step == STEPS - 1)
            printf("step %4d  loss %.5f  grad norm %.4f%s\n", step, loss, rep.grad_norm,
                   rep.skipped ? "  (skipped: non-finite gradient)" : "");
    }
    CHECK(ferry_engine_synchronize(e));
    rc = loss < 0.1f * first ? 0 : 1;
    printf("%s storage: loss %.5f -> %.5f: %s\n", ferry_dtype_name(dt), first, loss,
           rc == 0 ? "learned" : "did NOT fall below a tenth");
done:
    if (e) {
        ferry_engine_free(e, b.x); ferry_engine_free(e, b.y); ferry_engine_free(e, b.hid);
        ferry_engine_free(e, b.out); ferry_engine_free(e, b.dout); ferry_engine_free(e, b.dhid);
        ferry_engine_free(e, b.sqerr);
    }
    ferry_engine_destroy(e);
    return rc;
}
