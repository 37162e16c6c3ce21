/* optim/moments.h: the compact forms of the Adam moments (ferry_moments in
 * ferry.h): their layout and sizes, the 8-bit maps, the counter-based hash
 * behind bf16's stochastic rounding, and whole-buffer conversion between
 * the forms (a checkpoint resumed with another form, the engine's zero
 * state). The update itself reads and writes the compact form directly
 * (optim/adamw.h); nothing here keeps an fp32 copy of a moment. Owns no
 * buffer; any thread.
 *
 * BF16: m and v each an array of n bf16 (uint16) values. The update
 * computes the new moment in fp32 exactly as the F32 form does, then rounds
 * it to bf16 stochastically: with u the fp32 bits and r the low 16 bits of
 * moments_random(key, index), the result is the top 16 bits of u + r (NaN
 * stays a quiet NaN). A value between two bf16 neighbours goes up with a
 * probability equal to its distance from the lower one, so the moments do
 * not stall where beta2 * v rounds back to v. key is moments_key(seed,
 * step, 0 for m or 1 for v); index the element's global index, so the bits
 * depend on neither threads, tiles nor the split into jobs.
 *
 * 8BIT: bitsandbytes' blockwise 8-bit Adam (Dettmers et al., "8-bit
 * Optimizers via Block-wise Quantization", 2022). Each moment is n uint8
 * codes and one fp32 absmax per block of MOMENTS_Q8_BLOCK elements (block b
 * covers elements [b * 256, (b + 1) * 256) of the array); an element's
 * value is map[code] * absmax. m uses the signed dynamic map, v the
 * unsigned one, both exactly bitsandbytes' create_dynamic_map(signed,
 * max_exponent_bits 7, total_bits 8): for i = 0..6, the midpoints of
 * linspace(0.1, 1, k + 1) times 10^(i - 6), with k = 2^i (signed: each
 * value and its negative) or 2^(i + 1) (unsigned), plus 0 and 1; 256
 * values, sorted, computed in double and rounded to fp32. The update
 * dequantizes a block, updates it in fp32 as the F32 form does (the weights
 * step with these fp32 moments), takes the new absmax of each moment over
 * the block, and stores for m the code nearest to value / absmax (the
 * quotient in fp32; ties to the lower code) and for v the smallest code
 * not below it (an all-zero block keeps absmax 0). v rounding up is our
 * one departure from bitsandbytes, which rounds v to nearest too: v's
 * range is the square of m's, so in a block of large values a small v
 * rounds to 0 while its m does not, and m / (sqrt(v) + eps) blows the
 * step up (d6 GPT-2 spiked at step 15 with it, docs/perf.md); rounded up,
 * no stored v is below the fp32 update's, so no step is larger than the
 * fp32 moments would take with the same m. Zeroed codes and absmax are
 * zero moments.
 *
 * Layout of one moment of n elements in a buffer (what the engine
 * allocates, checkpoints and streams): F32 n floats; BF16 n uint16; 8BIT n
 * codes, padded to 4 bytes, then moments_q8_blocks(n) fp32 absmax. */
#ifndef FERRY_OPTIM_MOMENTS_H
#define FERRY_OPTIM_MOMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 256, not 2048: bitsandbytes' blockwise optimizers have used both. With
 * 2048, d6 GPT-2 on the demo corpus diverged at step 9 (loss 89.7 where
 * fp32 moments give 13.7): a block then spans five rows of the token
 * embedding, and in a row of rare tokens v, whose range is the square of
 * m's, rounds to 0 while m does not, so m / (sqrt(v) + eps) explodes; with
 * 256 (a block within a row) the step is fp32's to 3 digits (docs/perf.md).
 * It costs 8/256 bytes a parameter for both moments' absmax. */
#define MOMENTS_Q8_BLOCK ((size_t)256)

static inline size_t moments_q8_blocks(size_t n) { return (n + MOMENTS_Q8_BLOCK - 1) / MOMENTS_Q8_BLOCK; }
static inline size_t moments_q8_codes_bytes(size_t n) { return (n + 3) & ~(size_t)3; }

/* Bytes of one moment of n elements in `form` (the layout above). */
static inline size_t moments_bytes(ferry_moments form, size_t n)
{
    switch (form) {
    case FERRY_MOMENTS_BF16: return 2 * n;
    case FERRY_MOMENTS_8BIT: return moments_q8_codes_bytes(n) + 4 * moments_q8_blocks(n);
    case FERRY_MOMENTS_F32: break;
    }
    return 4 * n;
}

/* The absmax array of an 8BIT moment of n elements at `buf`. */
static inline float *moments_q8_absmax(void *buf, size_t n)
{
    return (float *)(void *)((unsigned char *)buf + moments_q8_codes_bytes(n));
}

/* FERRY_OK for a known form, else FERRY_ERR_INVALID_ARGUMENT naming `who`. */
ferry_status moments_check_form(ferry_moments form, const char *who);

/* The 256 values of the signed (m) or unsigned (v) map, ascending. */
const float *moments_q8_map(int is_signed);
/* The 255 thresholds between neighbours of a map. Signed (m, nearest):
 * threshold[k] is the largest fp32 not above the exact midpoint of map[k]
 * and map[k + 1], so that for every fp32 x, x > threshold[k] exactly when
 * x is nearer map[k + 1] than map[k] (a tie stays at map[k]). Unsigned (v,
 * up): threshold[k] = map[k], so x goes to the first value not below it. */
const float *moments_q8_thresholds(int is_signed);
/* The search for a code in two steps: x clamped to [-1, 1] (NaN to -1),
 * its top 16 bits name a bucket (sign, exponent, 7 bits of mantissa);
 * base[bucket] is the number of thresholds below the bucket's lowest
 * value, and at most MOMENTS_Q8_BUCKET_MAX thresholds lie inside any
 * bucket, so the code is base plus how many of the next ones x exceeds:
 * a table and a few independent comparisons where a binary search takes
 * 8 dependent ones. thr holds the 255 thresholds then +inf. */
#define MOMENTS_Q8_BUCKET_MAX 1
typedef struct moments_q8_buckets {
    uint8_t base[65536 + 4]; /* + 4: a vector gather reads 4 bytes at each */
    float thr[255 + MOMENTS_Q8_BUCKET_MAX + 1];
} moments_q8_buckets;
const moments_q8_buckets *moments_q8_buckets_of(int is_signed);
/* The most thresholds inside one bucket (<= MOMENTS_Q8_BUCKET_MAX; tests). */
int moments_q8_bucket_fill(int is_signed);

/* The code of normalized value x, the number of thresholds below x: the
 * nearest map value (ties to the lower code) for m's map, the first not
 * below x for v's; NaN -> 0. */
static inline uint8_t moments_q8_code(const moments_q8_buckets *q, float x)
{
    x = x >= -1.0f ? x : -1.0f;
    x = x > 1.0f ? 1.0f : x;
    uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    unsigned idx = q->base[u >> 16];
    for (int k = 0, b = (int)idx; k < MOMENTS_Q8_BUCKET_MAX; k++)
        idx += x > q->thr[b + k];
    return (uint8_t)idx;
}

/* The stochastic rounding's bits (the BF16 form, above). */
static inline uint32_t moments_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}
static inline uint64_t moments_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static inline uint32_t moments_key(uint64_t seed, int64_t step, int which)
{
    return (uint32_t)moments_splitmix64(seed ^ moments_splitmix64((uint64_t)step * 2 + (uint64_t)which));
}
static inline uint32_t moments_random(uint32_t key, uint64_t index)
{
    return moments_mix32((uint32_t)index ^ moments_mix32((uint32_t)(index >> 32) ^ key));
}
/* fp32 -> bf16 bits, rounded up with the low 16 bits of r as the threshold. */
static inline uint16_t moments_bf16_round(float x, uint32_t r)
{
    uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    if ((u & 0x7fffffffU) > 0x7f800000U)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + (r & 0xffffU)) >> 16);
}
static inline float moments_bf16_load(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    __builtin_memcpy(&x, &u, 4);
    return x;
}

/* One moment of n elements from `src` in form sf to `dst` in form df (both
 * in the layout above; dst must not overlap src). Into BF16 the rounding is
 * to nearest even (a conversion has no step to seed it); into 8BIT as the
 * update quantizes. Same-form is a copy. `signed_map`: 1 for m, 0 for v
 * (8BIT). FERRY_ERR_INVALID_ARGUMENT on a NULL buffer or an unknown form. */
ferry_status moments_convert(void *dst, ferry_moments df, const void *src, ferry_moments sf, size_t n,
                             int signed_map);

#ifdef __cplusplus
}
#endif
#endif
