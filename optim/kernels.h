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

#include "common/cpu.h"
#include "optim/half.h"

/* The fp32 factors of one AdamW update (see adamw.h for the formula). */
typedef struct adamw_consts {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float eps;
    float neg_step;  /* -lr / (1 - beta1^t) */
    float decay;     /* 1 - lr * weight_decay */
    float grad_scale;
} adamw_consts;

/* An empty asm that claims to change x: the product is materialised, never
 * fused into the add that follows. */
#define OPTIM_NO_CONTRACT(x) __asm__("" : "+v"(x))

/* Where the updated weights go besides master: none, or a copy of type ct. */
typedef struct adamw_span {
    float *p, *m, *v;
    const void *g;
    optim_dtype gt;
    void *copy; /* NULL: no copy */
    optim_dtype ct;
    size_t n;
} adamw_span;

void optim_adamw_scalar(const adamw_consts *c, const adamw_span *s);
void optim_adamw_avx2(const adamw_consts *c, const adamw_span *s);
void optim_adamw_avx512(const adamw_consts *c, const adamw_span *s);

/* Sum of squares in double over 16 interleaved lanes added in lane order
 * (element i -> lane i % 16), the order every ISA follows. */
#define OPTIM_SUMSQ_LANES 16
double optim_sumsq_scalar(const void *g, optim_dtype t, size_t n);
double optim_sumsq_avx2(const void *g, optim_dtype t, size_t n);
double optim_sumsq_avx512(const void *g, optim_dtype t, size_t n);

/* dst (dt) <- src (st), n elements; types already checked. */
void optim_convert_scalar(void *dst, optim_dtype dt, const void *src, optim_dtype st, size_t n);
void optim_convert_avx2(void *dst, optim_dtype dt, const void *src, optim_dtype st, size_t n);
void optim_convert_avx512(void *dst, optim_dtype dt, const void *src, optim_dtype st, size_t n);

/* FERRY_OK when `level` is a known SIMD level this CPU has; otherwise
 * FERRY_ERR_UNSUPPORTED naming `who`, the level and what the CPU offers. */
ferry_status optim_check_level(cpu_simd level, const char *who);

/* One element of the update, the definition the vector kernels reproduce. */
static inline void optim_adamw_one(const adamw_consts *c, float *p, float *m, float *v, float g)
{
    g = g * c->grad_scale;
    float mm = __builtin_fmaf(c->one_minus_beta1, g, c->beta1 * *m);
    float vv = __builtin_fmaf(c->one_minus_beta2 * g, g, c->beta2 * *v);
    float denom = __builtin_sqrtf(vv) / c->bc2_sqrt + c->eps;
    /* torch: param.mul_(decay), then addcdiv: param + (value * m) / denom */
    *p = *p * c->decay + (c->neg_step * mm) / denom;
    *m = mm;
    *v = vv;
}

static inline float optim_load_one(const void *src, optim_dtype t, size_t i)
{
    switch (t) {
    case OPTIM_BF16: return half_bf16_to_f32(((const uint16_t *)src)[i]);
    case OPTIM_F16: return half_f16_to_f32(((const uint16_t *)src)[i]);
    case OPTIM_F32: break;
    }
    return ((const float *)src)[i];
}

static inline void optim_store_one(void *dst, optim_dtype t, size_t i, float x)
{
    switch (t) {
    case OPTIM_BF16: ((uint16_t *)dst)[i] = half_f32_to_bf16(x); return;
    case OPTIM_F16: ((uint16_t *)dst)[i] = half_f32_to_f16(x); return;
    case OPTIM_F32: break;
    }
    ((float *)dst)[i] = x;
}

#endif
