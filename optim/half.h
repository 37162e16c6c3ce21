/* optim/half.h: bulk conversion between fp32 and the 16-bit float formats
 * (bf16, IEEE fp16): AVX-512 / AVX2+F16C / scalar, chosen at run time, each
 * bit-exact with the scalar conversions of common/dtype.h (which also define
 * the rounding). Owns no memory and knows nothing of CUDA. */
#ifndef FERRY_OPTIM_HALF_H
#define FERRY_OPTIM_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "common/dtype.h"
#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts n elements from src (type st) to dst (type dt) on the calling
 * thread, with the SIMD level cpu_simd_active() picks. Any pair of types
 * (f32 -> f32 is a copy). dst and src must not overlap. Any thread.
 * FERRY_ERR_INVALID_ARGUMENT on a NULL pointer with n > 0 or an unknown type. */
ferry_status half_convert(void *dst, ferry_dtype dt, const void *src, ferry_dtype st, size_t n);
/* The same with an explicit SIMD level (tests and benchmarks); a level above
 * cpu_simd_detect() is refused with FERRY_ERR_UNSUPPORTED. */
ferry_status half_convert_level(void *dst, ferry_dtype dt, const void *src, ferry_dtype st,
                                size_t n, cpu_simd level);

#ifdef __cplusplus
}
#endif

#include "optim/threadpool.h"
#ifdef __cplusplus
extern "C" {
#endif
/* half_convert split in OPTIM_TILE-element tiles over the pool (NULL: the
 * calling thread); for bulk host-side conversion by the engine. */
ferry_status half_convert_pool(tp_pool *pool, void *dst, ferry_dtype dt, const void *src, ferry_dtype st,
                               size_t n);
#ifdef __cplusplus
}
#endif
#endif
