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
#include "common/numerics.h"
#include "optim/half.h"

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

void optim_adamw_scalar(const adamw_consts *c, const adamw_span *s);
void optim_adamw_avx2(const adamw_consts *c, const adamw_span *s);
void optim_adamw_avx512(const adamw_consts *c, const adamw_span *s);

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
