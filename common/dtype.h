/* Element types: the one enum (ferry_dtype, public in ferry.h) and what every
 * layer needs of it: sizes, names, and the scalar conversions between fp32
 * and the 16-bit formats, bit-exact with the x86 hardware conversions (the
 * optimizer's SIMD converters, the host backend's bf16 storage mode and the
 * safetensors reader all round through these). Owns no state; any thread.
 *
 * Rounding: fp32 -> bf16 and fp32 -> fp16 round to nearest, ties to even;
 * values past the largest finite result become inf; inf stays inf; a NaN stays
 * a NaN and comes out quiet (the top payload bits are kept, as vcvtps2ph does).
 * bf16/fp16 -> fp32 is exact (a signalling NaN comes out quiet). */
#ifndef FERRY_COMMON_DTYPE_H
#define FERRY_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes per element: 4 (f32, i32), 2 (bf16, f16), 8 (i64); 0 for AUTO or a
 * value outside the enum. */
size_t dtype_size(ferry_dtype t);
/* "f32", "bf16", "f16", "i32", "i64", "auto", or "?" outside the enum. */
const char *dtype_name(ferry_dtype t);
/* True for the floating-point types a buffer of weights may hold. */
static inline int dtype_is_float(ferry_dtype t)
{
    return t == FERRY_DTYPE_F32 || t == FERRY_DTYPE_BF16 || t == FERRY_DTYPE_F16;
}

static inline uint32_t dtype_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float dtype_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u = dtype_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; overflow carries into inf */
    return (uint16_t)(u >> 16);
}

static inline float dtype_bf16_to_f32(uint16_t h) { return dtype_bits_f32((uint32_t)h << 16); }

/* fp32 rounded to the nearest bf16 and back: what storing into bf16 keeps. */
static inline float dtype_round_bf16(float f) { return dtype_bf16_to_f32(dtype_f32_to_bf16(f)); }

static inline uint16_t dtype_f32_to_f16(float f)
{
    uint32_t u = dtype_f32_bits(f);
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

static inline float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf, or NaN made quiet (as vcvtph2ps) */
        return dtype_bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    if (exp != 0)
        return dtype_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    if (mant == 0)
        return dtype_bits_f32(sign);
    uint32_t e = 113; /* subnormal: normalise the mantissa */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return dtype_bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

/* fp32 rounded to the nearest fp16 and back: what storing into fp16 keeps. */
static inline float dtype_round_f16(float f) { return dtype_f16_to_f32(dtype_f32_to_f16(f)); }

/* fp32 rounded to type t (f32: unchanged) and back. */
static inline float dtype_round(float f, ferry_dtype t)
{
    return t == FERRY_DTYPE_BF16 ? dtype_round_bf16(f) : t == FERRY_DTYPE_F16 ? dtype_round_f16(f) : f;
}

/* Element i of a float buffer of type t (f32, bf16 or f16) as fp32. */
static inline float dtype_load_f32(const void *src, ferry_dtype t, size_t i)
{
    switch (t) {
    case FERRY_DTYPE_BF16: return dtype_bf16_to_f32(((const uint16_t *)src)[i]);
    case FERRY_DTYPE_F16: return dtype_f16_to_f32(((const uint16_t *)src)[i]);
    default: break;
    }
    return ((const float *)src)[i];
}

/* Stores x, rounded to type t (f32, bf16 or f16), as element i of dst. */
static inline void dtype_store_f32(void *dst, ferry_dtype t, size_t i, float x)
{
    switch (t) {
    case FERRY_DTYPE_BF16: ((uint16_t *)dst)[i] = dtype_f32_to_bf16(x); return;
    case FERRY_DTYPE_F16: ((uint16_t *)dst)[i] = dtype_f32_to_f16(x); return;
    default: break;
    }
    ((float *)dst)[i] = x;
}

#ifdef __cplusplus
}
#endif
#endif
