/* CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, as iSCSI, ext4 and
 * SCTP use), the one implementation of the tree: the NVMe store's block
 * checksums, the memory trace's record checksums and the checkpoints' come
 * from here.
 * Chosen once at run time from what the CPU has:
 *   x86-64   three crc32 (SSE4.2) streams over a buffer's thirds, folded
 *            together with carry-less multiplication (PCLMULQDQ); SSE4.2's
 *            crc32 alone on a CPU without PCLMULQDQ;
 *   aarch64  the same with the CRC32C instructions and PMULL; the CRC32C
 *            instructions alone without PMULL;
 *   else     a byte table (slicing by 8), the reference the others are
 *            tested against.
 * Every form gives the same value for the same bytes. Owns no state but the
 * tables and the choice, both made once; thread-safe. Knows nothing of what
 * is checksummed. */
#ifndef FERRY_COMMON_CRC32C_H
#define FERRY_COMMON_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum crc32c_impl {
    CRC32C_TABLE = 0,     /* any CPU: tables, 8 bytes a round */
    CRC32C_SSE42,         /* x86-64: the crc32 instruction, one stream */
    CRC32C_SSE42_PCLMUL,  /* x86-64: three crc32 streams folded with PCLMULQDQ */
    CRC32C_ARMV8,         /* aarch64: the CRC32C instructions, one stream */
    CRC32C_ARMV8_PMULL,   /* aarch64: three streams folded with PMULL */
    CRC32C_IMPLS
} crc32c_impl;

/* CRC-32C of n bytes continuing from `crc` (0 to start; the result of the
 * bytes before, to go on): crc32c(0, "123456789", 9) is 0xE3069283, and
 * crc32c(crc32c(0, a, k), a + k, n - k) is crc32c(0, a, n). With the
 * fastest form this CPU has. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

/* The CRC-32C of a + b from crc1 = crc32c(0, a, len1) and crc2 =
 * crc32c(0, b, len2), without the bytes: parts of one file checksummed
 * apart (by several processes) give the file's. O(log len2). */
uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* The same with a given form; false from crc32c_supported (and the table is
 * used instead) when this CPU lacks it. For tests and benchmarks. */
uint32_t crc32c_with(crc32c_impl impl, uint32_t crc, const void *data, size_t n);
bool crc32c_supported(crc32c_impl impl);
/* The form crc32c() uses, and the words for a form ("sse4.2+pclmul"). */
crc32c_impl crc32c_active(void);
const char *crc32c_name(crc32c_impl impl);

#ifdef __cplusplus
}
#endif

#endif
