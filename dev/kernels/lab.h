/* The kernel lab's harness (dev/kernels/lab.c), in the manner of llm.c's
 * dev/cuda: the cuda backend and one stream, the two ceilings measured at the
 * start of the run (a cuBLASLt 8192^3 matmul in the lab's storage type and a
 * device-to-device copy), and the two steps each op file takes for every way
 * it computes an op — check it against the host reference
 * (backend/ops/ops_host.h) on small random inputs, then time it at the lab's
 * sizes and print its rate as a fraction of its ceiling. Each result is
 * printed the moment it is known. The lab runs in one storage type, bf16 or
 * f16 (--dtype; by default the card's own, f16 on sm_70 and sm_75).
 *
 * An op file (dev/kernels/<op>.c) owns one op family: the call of its host
 * reference, its production kernel (variant 0: the ops_* entry point the
 * engine runs) and numbered variants (1, 2, ...: other kernels for the same
 * op, kept beside the production one so a change is measured against it).
 * Every helper here ends the program on a failed backend call: the lab
 * cannot go on without its buffers. */
#ifndef FERRY_DEV_KERNELS_LAB_H
#define FERRY_DEV_KERNELS_LAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "dev/ops/opcheck.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GPT-2 sizes the lab times at. */
typedef struct lab_sizes {
    int B, T, C, NH, V, Vp, chunk;
} lab_sizes;

typedef struct lab {
    backend *be;
    backend_stream *s;
    void *stream;             /* the native cudaStream_t of s */
    backend_event *ev0, *ev1;
    uint64_t rng;             /* seeded; printed at the start */
    lab_sizes z;
    int reps;                 /* timed runs per figure (median) */
    double tflops;            /* ceiling: cuBLASLt matmul of the storage type, TFLOP/s */
    double gbs;               /* ceiling: device copy, GB/s counting read + write */
    int checks, failures;
    bool check_only;          /* --check: checks only; each timed op runs once, untimed, at tiny sizes */
    ferry_dtype act;          /* the storage type: bf16 or f16 */
} lab;

typedef enum lab_unit {
    LAB_FLOPS, /* work in floating-point operations, against the matmul ceiling */
    LAB_BYTES, /* work in bytes moved (each input read once, each output written once), against the copy */
} lab_unit;

/* Ends the program (exit 1) when st is not FERRY_OK, naming what failed. */
void lab_must(ferry_status st, const char *what);

/* Device memory: uninitialised, zeroed, or uniform in [-scale, scale) in
 * the storage type. */
void *lab_alloc(lab *L, size_t bytes);
void *lab_zeros(lab *L, size_t bytes);
void *lab_random_16(lab *L, size_t n, float scale);
/* Host arrays (malloc'd): uniform in [lo, hi), exact in bf16 and f16. */
float *lab_rand(lab *L, size_t n, float lo, float hi);
/* Device copies of host data, and host copies (malloc'd) of device data. */
void *lab_up(lab *L, const void *src, size_t bytes);
void *lab_up_16(lab *L, const float *x, size_t n);
float *lab_down_16(lab *L, const void *d, size_t n);
float *lab_down_f32(lab *L, const void *d, size_t n);
/* Frees device buffers: LAB_FREE(L, a, b, c). */
void lab_free_list(lab *L, void *const *bufs, size_t n);
#define LAB_FREE(L, ...)                                                                       \
    lab_free_list((L), (void *const[]){__VA_ARGS__}, sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))
/* Random token ids in [0, V). */
int32_t *lab_tokens(lab *L, size_t n, int V);

/* Compares got with the host reference by relative norm error; prints one
 * "check" line and counts a failure when the error exceeds tol (or is NaN). */
bool lab_check(lab *L, const char *op, const char *variant, const float *got, const float *want,
               size_t n, double tol);

/* lab_check of n device values (the storage type, or fp32) against the host
 * reference. Tolerances are written for bf16 (8-bit mantissa); under f16
 * (11 bits) the 16-bit checks hold to a fifth of them. */
bool lab_check_16(lab *L, const char *op, const char *variant, const void *dev, const float *want, size_t n,
                    double tol);
bool lab_check_f32(lab *L, const char *op, const char *variant, const void *dev, const float *want, size_t n,
                   double tol);

/* Whether a variant written for bf16 storage only runs in this lab's storage
 * type; prints a "skip" line when it does not. */
bool lab_bf16_variant(lab *L, const char *op, const char *variant);

/* One launch of the op being timed, on L->s. */
typedef void (*lab_fn)(lab *L, void *ctx);
/* Median milliseconds of L->reps runs after two warm-ups, timed with events;
 * then prints one "time" line: ms, TFLOP/s or GB/s, and the ratio to the
 * ceiling of its unit. Returns the milliseconds. */
double lab_time(lab *L, const char *op, const char *variant, lab_fn fn, void *ctx, double work,
                lab_unit unit);

/* The op files. Each checks, then times, its production kernel and variants. */
void lab_encoder(lab *L);
void lab_layernorm(lab *L);
void lab_matmul(lab *L);
void lab_gelu(lab *L);
void lab_residual(lab *L);
void lab_attention(lab *L);
void lab_classifier(lab *L);
void lab_optimizer(lab *L);

/* Numbered variants written in CUDA (dev/kernels/<op>_variants.cu), with the
 * signature of the cudaop_* they stand beside (bf16 only). */
ferry_status lab_gelu_forward1(void *stream, void *out, const void *inp, size_t n);

/* dev/kernels/reduce_variants.cu. Variant 1 of the column reductions splits
 * the rows over LAB_ROW_SLICES blocks per 32 columns; its scratch holds
 * LAB_ROW_SLICES x cols floats (twice that for layernorm's two sums). */
#define LAB_ROW_SLICES 16
/* dst[c] += sum over rows of src (matmul's dbias): variant 0 production, 1 row slices, 2 the previous
 * production (32-column blocks). */
ferry_status lab_colsum_add(void *stream, int variant, void *dst, const void *src, int rows, int cols,
                            void *scratch);
/* layernorm's backward with its dinp kernel (0 the previous production, 1 in
 * registers) and its dweight/dbias kernel (0 the previous production, 1 row
 * slices) chosen apart. */
ferry_status lab_layernorm_backward_v(void *stream, int dinp_variant, int dparams_variant, void *dinp,
                                      void *dweight, void *dbias, const void *dout, const void *inp,
                                      const void *weight, const float *mean, const float *rstd, int N, int C,
                                      void *scratch);
/* dev/kernels/classifier_variants.cu: the classifier adding dwte once per
 * `group` chunks. */
size_t lab_classifier1_scratch_bytes(int chunk, int group, int Vp, int C);
ferry_status lab_classifier1(void *stream, float *losses, void *dinp, void *dwte, const void *inp, const void *wte,
                             const int32_t *targets, float grad_scale, int N, int C, int V, int Vp, void *scratch,
                             int chunk, int group);
/* dev/kernels/attention_variants.cu: the WMMA attention backward reading
 * D = rowsum(dO * O) computed once. */
size_t lab_attention_backward1_scratch_bytes(int B, int T, int NH);
ferry_status lab_attention_backward1(void *stream, void *dqkv, const void *dout, const void *qkv, const void *out,
                                     const float *lse, int B, int T, int C, int NH, void *scratch);
/* dev/kernels/attention_unfused.cu: llm.c's unfused attention (cuBLASLt
 * strided-batched products and a fused causal softmax), bf16 or f16; the
 * backward reads the probabilities its forward left in `scratch`. */
size_t lab_attention_unfused_scratch_bytes(int B, int T, int C, int NH);
ferry_status lab_attention_unfused_forward(void *stream, ferry_dtype act, void *out, float *lse, const void *qkv,
                                           int B, int T, int C, int NH, void *scratch);
ferry_status lab_attention_unfused_backward(void *stream, ferry_dtype act, void *dqkv, const void *dout, int B, int T,
                                            int C, int NH, void *scratch);

#ifdef __cplusplus
}
#endif
#endif
