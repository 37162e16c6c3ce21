/* optim/half.h: the 16-bit float formats the optimizer reads and writes
 * (bf16, IEEE fp16) and their conversion to and from fp32. Owns the scalar
 * conversions (inline, bit-exact with the x86 hardware conversions) and the
 * bulk converters (AVX-512 / AVX2+F16C / scalar, chosen at run time). Owns no
 * memory and knows nothing of CUDA.
 *
 * Rounding: fp32 -> bf16 and fp32 -> fp16 round to nearest, ties to even;
 * values past the largest finite result become inf; inf stays inf; a NaN stays
 * a NaN and comes out quiet (the top payload bits are kept, as vcvtps2ph does).
 * bf16/fp16 -> fp32 is exact (a signalling NaN comes out quiet). */
#ifndef FERRY_OPTIM_HALF_H
#define FERRY_OPTIM_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a buffer the optimizer reads or writes. */
typedef enum optim_dtype {
    OPTIM_F32 = 0,
    OPTIM_BF16 = 1,
    OPTIM_F16 = 2,
} optim_dtype;

/* "f32", "bf16", "f16", or "?" for a value outside the enum. */
const char *optim_dtype_name(optim_dtype t);
/* Bytes per element: 4 or 2; 0 for a value outside the enum. */
size_t optim_dtype_size(optim_dtype t);

static inline uint32_t half_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t half_f32_to_bf16(float f)
{
    uint32_t u = half_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; overflow carries into inf */
    return (uint16_t)(u >> 16);
}

static inline float half_bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline uint16_t half_f32_to_f16(float f)
{
    uint32_t u = half_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, keep the top 9 payload bits (as vcvtps2ph) */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds past 65504: inf (inf included) */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* a normal fp16: rebias the exponent, round 13 bits away */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds to zero (the tie goes to even 0) */
        return (uint16_t)sign;
    /* subnormal fp16: count in units of 2^-24 and round the shifted-out bits */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

static inline float half_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet (as vcvtph2ps) */
        return half_bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    if (exp != 0)
        return half_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return half_bits_f32(sign);
    uint32_t e = 113; /* subnormal: normalise the mantissa */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return half_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

/* Converts n elements from src (type st) to dst (type dt) on the calling
 * thread, with the SIMD level cpu_simd_active() picks. Any pair of types
 * (f32 -> f32 is a copy). dst and src must not overlap. Any thread.
 * FERRY_ERR_INVALID_ARGUMENT on a NULL pointer with n > 0 or an unknown type. */
ferry_status half_convert(void *dst, optim_dtype dt, const void *src, optim_dtype st, size_t n);
/* The same with an explicit SIMD level (tests and benchmarks); a level above
 * cpu_simd_detect() is refused with FERRY_ERR_UNSUPPORTED. */
ferry_status half_convert_level(void *dst, optim_dtype dt, const void *src, optim_dtype st,
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
ferry_status half_convert_pool(tp_pool *pool, void *dst, optim_dtype dt, const void *src, optim_dtype st,
                               size_t n);
#ifdef __cplusplus
}
#endif
#endif
