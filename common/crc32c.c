/* CRC-32C (see crc32c.h): the table form, the hardware forms of x86-64 and
 * aarch64, and the choice between them, made once.
 *
 * The three-stream forms: a buffer of 3L bytes is cut in thirds; the CRC
 * instruction runs over the three at once (three independent dependency
 * chains keep the instruction's pipeline full: one chain waits out its
 * latency), the first from the running CRC, the others from 0. A CRC
 * without its pre- and post-inversion is linear, so the CRC of A then B is
 * shift(crc(A), |B|) ^ crc0(B), where shift(c, L) = c * x^(8L) mod P. The
 * shift is one carry-less multiplication by the constant x^(8L-33) mod P
 * and one CRC instruction over the 64-bit product: the instruction computes
 * d * x^32 mod P of a 64-bit d, and a carry-less product of two reflected
 * 32-bit values reads as the true product times x, which makes the 33. */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_acle.h>
#include <arm_neon.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#define CRC32C_POLY 0x82F63B78u /* Castagnoli, reflected */

/* The thirds of the three-stream forms: long buffers in rounds of 3 x 8 KiB,
 * what is left in rounds of 3 x 256 bytes, the rest one stream. */
#define CRC_LONG 8192
#define CRC_SHORT 256

static uint32_t table[8][256]; /* table[k][b]: byte b followed by k zero bytes */
static uint32_t k_long, k_short; /* x^(8L-33) mod P for the two thirds */
static crc32c_impl chosen;
static bool have[CRC32C_IMPLS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* a * b mod P, both reflected (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    if (!a)
        return 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^n mod P, reflected. */
static uint32_t xpow(uint64_t n)
{
    uint32_t r = 1u << 31, sq = 1u << 30; /* x^0, x^1 */
    for (; n; n >>= 1) {
        if (n & 1)
            r = multmodp(sq, r);
        sq = multmodp(sq, sq);
    }
    return r;
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* ---- the table form (slicing by 8) ---- */

static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w = load64(p) ^ c;
        c = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^
            table[4][(w >> 24) & 0xFF] ^ table[3][(w >> 32) & 0xFF] ^ table[2][(w >> 40) & 0xFF] ^
            table[1][(w >> 48) & 0xFF] ^ table[0][w >> 56];
    }
#endif
    for (; n; p++, n--)
        c = table[0][(c ^ *p) & 0xFF] ^ (c >> 8);
    return c;
}

/* ---- x86-64: SSE4.2's crc32, and PCLMULQDQ to fold streams ---- */

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    for (; n >= 8; p += 8, n -= 8)
        c64 = _mm_crc32_u64(c64, load64(p));
    c = (uint32_t)c64;
    for (; n; p++, n--)
        c = _mm_crc32_u8(c, *p);
    return c;
}

__attribute__((target("sse4.2,pclmul"))) static inline uint32_t shift_clmul(uint32_t c, uint32_t k)
{
    __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)c), _mm_cvtsi32_si128((int)k), 0);
    return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(prod));
}

/* One round over 3 x len bytes from c. */
__attribute__((target("sse4.2,pclmul"))) static inline uint32_t three_clmul(uint32_t c, const unsigned char *p,
                                                                             size_t len, uint32_t k)
{
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < len; i += 8) {
        c0 = _mm_crc32_u64(c0, load64(p + i));
        c1 = _mm_crc32_u64(c1, load64(p + len + i));
        c2 = _mm_crc32_u64(c2, load64(p + 2 * len + i));
    }
    uint32_t ab = shift_clmul((uint32_t)c0, k) ^ (uint32_t)c1;
    return shift_clmul(ab, k) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t crc_sse42_pclmul(uint32_t c, const unsigned char *p,
                                                                          size_t n)
{
    for (; n >= 3 * CRC_LONG; p += 3 * CRC_LONG, n -= 3 * CRC_LONG)
        c = three_clmul(c, p, CRC_LONG, k_long);
    for (; n >= 3 * CRC_SHORT; p += 3 * CRC_SHORT, n -= 3 * CRC_SHORT)
        c = three_clmul(c, p, CRC_SHORT, k_short);
    return crc_sse42(c, p, n);
}
#endif

/* ---- aarch64: the CRC32C instructions, and PMULL to fold streams ---- */

#if defined(__aarch64__)
__attribute__((target("+crc"))) static uint32_t crc_armv8(uint32_t c, const unsigned char *p, size_t n)
{
    for (; n >= 8; p += 8, n -= 8)
        c = __crc32cd(c, load64(p));
    for (; n; p++, n--)
        c = __crc32cb(c, *p);
    return c;
}

__attribute__((target("+crc+crypto"))) static inline uint32_t shift_pmull(uint32_t c, uint32_t k)
{
    poly128_t prod = vmull_p64((poly64_t)c, (poly64_t)k);
    return __crc32cd(0, vgetq_lane_u64(vreinterpretq_u64_p128(prod), 0));
}

__attribute__((target("+crc+crypto"))) static inline uint32_t three_pmull(uint32_t c, const unsigned char *p,
                                                                          size_t len, uint32_t k)
{
    uint32_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < len; i += 8) {
        c0 = __crc32cd(c0, load64(p + i));
        c1 = __crc32cd(c1, load64(p + len + i));
        c2 = __crc32cd(c2, load64(p + 2 * len + i));
    }
    return shift_pmull(shift_pmull(c0, k) ^ c1, k) ^ c2;
}

__attribute__((target("+crc+crypto"))) static uint32_t crc_armv8_pmull(uint32_t c, const unsigned char *p, size_t n)
{
    for (; n >= 3 * CRC_LONG; p += 3 * CRC_LONG, n -= 3 * CRC_LONG)
        c = three_pmull(c, p, CRC_LONG, k_long);
    for (; n >= 3 * CRC_SHORT; p += 3 * CRC_SHORT, n -= 3 * CRC_SHORT)
        c = three_pmull(c, p, CRC_SHORT, k_short);
    return crc_armv8(c, p, n);
}
#endif

/* ---- the choice ---- */

typedef uint32_t (*crc_fn)(uint32_t c, const unsigned char *p, size_t n);
static crc_fn fns[CRC32C_IMPLS];

static void init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xFF];
    k_long = xpow(8 * (uint64_t)CRC_LONG - 33);
    k_short = xpow(8 * (uint64_t)CRC_SHORT - 33);
    for (int i = 0; i < CRC32C_IMPLS; i++)
        fns[i] = crc_table;
    have[CRC32C_TABLE] = true;
#if defined(__x86_64__)
    __builtin_cpu_init();
    have[CRC32C_SSE42] = __builtin_cpu_supports("sse4.2");
    have[CRC32C_SSE42_PCLMUL] = have[CRC32C_SSE42] && __builtin_cpu_supports("pclmul");
    if (have[CRC32C_SSE42])
        fns[CRC32C_SSE42] = crc_sse42;
    if (have[CRC32C_SSE42_PCLMUL])
        fns[CRC32C_SSE42_PCLMUL] = crc_sse42_pclmul;
#endif
#if defined(__aarch64__)
    unsigned long hw = getauxval(AT_HWCAP);
    have[CRC32C_ARMV8] = (hw & HWCAP_CRC32) != 0;
    have[CRC32C_ARMV8_PMULL] = have[CRC32C_ARMV8] && (hw & HWCAP_PMULL) != 0;
    if (have[CRC32C_ARMV8])
        fns[CRC32C_ARMV8] = crc_armv8;
    if (have[CRC32C_ARMV8_PMULL])
        fns[CRC32C_ARMV8_PMULL] = crc_armv8_pmull;
#endif
    static const crc32c_impl best_first[] = {CRC32C_SSE42_PCLMUL, CRC32C_ARMV8_PMULL, CRC32C_SSE42, CRC32C_ARMV8};
    chosen = CRC32C_TABLE;
    for (size_t i = 0; i < sizeof best_first / sizeof best_first[0] && chosen == CRC32C_TABLE; i++)
        if (have[best_first[i]])
            chosen = best_first[i];
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&once, init);
    return ~fns[chosen](~crc, data, n);
}

uint32_t crc32c_with(crc32c_impl impl, uint32_t crc, const void *data, size_t n)
{
    pthread_once(&once, init);
    crc_fn fn = impl >= 0 && impl < CRC32C_IMPLS ? fns[impl] : crc_table;
    return ~fn(~crc, data, n);
}

bool crc32c_supported(crc32c_impl impl)
{
    pthread_once(&once, init);
    return impl >= 0 && impl < CRC32C_IMPLS && have[impl];
}

crc32c_impl crc32c_active(void)
{
    pthread_once(&once, init);
    return chosen;
}

uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    /* crc1 moved past len2 zero bytes: the conditioning of both cancels */
    return multmodp(xpow(8 * len2), crc1) ^ crc2;
}

const char *crc32c_name(crc32c_impl impl)
{
    switch (impl) {
    case CRC32C_TABLE: return "table";
    case CRC32C_SSE42: return "sse4.2";
    case CRC32C_SSE42_PCLMUL: return "sse4.2+pclmul";
    case CRC32C_ARMV8: return "armv8 crc";
    case CRC32C_ARMV8_PMULL: return "armv8 crc+pmull";
    case CRC32C_IMPLS: break;
    }
    return "unknown";
}
