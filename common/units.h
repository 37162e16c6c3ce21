/* Byte counts as people write and read them: "24GiB" in, "23.8 GiB" out. */
#ifndef FERRY_COMMON_UNITS_H
#define FERRY_COMMON_UNITS_H

#include <stddef.h>
#include <stdint.h>
#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Formats bytes with a binary unit: "512.0 MiB", "23.8 GiB", "17 B". Returns buf. */
char *units_fmt_bytes(char *buf, size_t cap, uint64_t bytes);

/* Parses "24GiB", "500MiB", "1.5G", "64k", "4096" (no unit = bytes; K/M/G/T
 * with or without "iB"/"B" are binary). FERRY_ERR_INVALID_ARGUMENT with a
 * message naming the text on anything else, negative or overflowing. */
ferry_status units_parse_bytes(const char *text, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif
