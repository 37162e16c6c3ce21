/* The tests' shadow of an allocator: each live block carries a fill byte in
 * its first and last bytes, so a block that overlaps another overwrites a
 * neighbour's marks and is caught. Shared by the pool and arena tests. */
#ifndef FERRY_TESTS_OFFLOAD_SHADOW_H
#define FERRY_TESTS_OFFLOAD_SHADOW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHADOW_MARK_BYTES 64

static inline void shadow_stamp(uint8_t *ptr, size_t size, uint8_t fill)
{
    size_t n = size < SHADOW_MARK_BYTES ? size : SHADOW_MARK_BYTES;
    memset(ptr, fill, n);
    memset(ptr + size - n, fill, n);
}

static inline int shadow_intact(const uint8_t *ptr, size_t size, uint8_t fill)
{
    size_t n = size < SHADOW_MARK_BYTES ? size : SHADOW_MARK_BYTES;
    for (size_t i = 0; i < n; i++)
        if (ptr[i] != fill || ptr[size - 1 - i] != fill)
            return 0;
    return 1;
}

#endif
