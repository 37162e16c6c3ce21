/* optim/kernels.h (internal to optim/): the per-ISA element kernels behind
 * adamw.h, gradnorm.h and half.h, and the constants they share. Each kernel
 * works on one contiguous range on the calling thread; splitting into tiles
 * and threads is the callers' business. All three ISAs compute bitwise the
 * same results (same fp32 operations, same fused multiply-adds, same
 * summation order). Where torch rounds a product before adding it, the vector
 * kernels put OPTIM_NO_CONTRACT on the product, so the compiler (which may
 * fuse a multiply and an add under -ffp-contract=fast) cannot fuse it. */
#ifndef FERRY_OPTIM_KERNELS_H
#define FERRY_OPTIM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/cpu.h"
#include "common/numerics.h"
#include "optim/half.h"
#include "optim/moments.h"

/* An empty asm that claims to change x: the product is materialised, never
 * fused into the add that follows. */
#define OPTIM_NO_CONTRACT(x) __asm__("" : "+v"(x))

/* Where the updated weights go besides master: none, or a copy of type ct. */
typedef struct adamw_span {
    float *p, *m, *v;
    const void *g;
    ferry_dtype gt;
    void *copy; /* NULL: no copy */
    ferry_dtype ct;
    size_t n;
} adamw_span;

/* A range of a job with compact moments (optim/moments.h). */
typedef struct adamw_cspan {
    float *p;
    void *m, *v;          /* BF16: uint16 values; 8BIT: codes */
    const void *g;
    ferry_dtype gt;
    void *copy;           /* NULL: no copy */
    ferry_dtype ct;
    size_t n;
    uint32_t key_m, key_v; /* BF16: moments_key of the step */
    uint64_t index0;      /* BF16: the global index of element 0 */
    const float *map_m, *map_v; /* 8BIT: the signed and unsigned maps */
    float m_absmax, v_absmax;   /* 8BIT: the block's absmax before the update */
    float *m_new, *v_new; /* 8BIT: the block's updated fp32 moments, n each */
} adamw_cspan;

void optim_adamw_scalar(const adamw_consts *c, const adamw_span *s);
void optim_adamw_avx2(const adamw_consts *c, const adamw_span *s);
void optim_adamw_avx512(const adamw_consts *c, const adamw_span *s);

/* BF16: the update, its moments stored with stochastic rounding. */
void optim_adamw_bf16_scalar(const adamw_consts *c, const adamw_cspan *s);
void optim_adamw_bf16_avx2(const adamw_consts *c, const adamw_cspan *s);
/* 8BIT, part of one block: dequantize, update (weights and copy written),
 * the new fp32 moments into m_new / v_new; max_out[0], [1] raised to the
 * largest |m|, |v| (NaN ignored). */
void optim_adamw_q8_scalar(const adamw_consts *c, const adamw_cspan *s, float max_out[2]);
void optim_adamw_q8_avx2(const adamw_consts *c, const adamw_cspan *s, float max_out[2]);
/* 8BIT: n values into codes by absmax (0: every code of 0 / 0 -> 0.0f). */
void optim_q8_quantize_scalar(uint8_t *codes, const float *x, size_t n, float absmax, const moments_q8_buckets *q);
void optim_q8_quantize_avx2(uint8_t *codes, const float *x, size_t n, float absmax, const moments_q8_buckets *q);

/* Sum of squares of one tile, in the order of numerics_sumsq_tile (common/
 * numerics.h), which every ISA follows. */
double optim_sumsq_scalar(const void *g, ferry_dtype t, size_t n);
double optim_sumsq_avx2(const void *g, ferry_dtype t, size_t n);
double optim_sumsq_avx512(const void *g, ferry_dtype t, size_t n);

/* dst (dt) <- src (st), n elements; types already checked. */
void optim_convert_scalar(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n);
void optim_convert_avx2(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n);
void optim_convert_avx512(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n);

/* FERRY_OK when `level` is a known SIMD level this CPU has; otherwise
 * FERRY_ERR_UNSUPPORTED naming `who`, the level and what the CPU offers. */
ferry_status optim_check_level(cpu_simd level, const char *who);

#endif
