/* CRC-32C bit by bit, as its definition reads (reflected polynomial
 * 0x82F63B78, inverted in and out): the tests' own reference, independent
 * of common/crc32c.c. Continues from `crc` (0 to start). Header-only. */
#ifndef FERRY_TESTS_REF_CRC32C_H
#define FERRY_TESTS_REF_CRC32C_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t ref_crc32c(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

#endif
