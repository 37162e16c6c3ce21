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

/* Parses a number with an optional unit, each unit meaning what it says:
 * none or B = bytes; KiB, MiB, GiB, TiB, PiB = powers of 1024 ("24GiB" =
 * 24 x 2^30); kB (or KB), MB, GB, TB, PB = powers of 1000 ("24GB" = 24 x
 * 10^9, what a card's box says). Case is not significant. A bare letter
 * ("24G") is refused as ambiguous, the message giving both spellings.
 * FERRY_ERR_INVALID_ARGUMENT with a message naming the text on anything
 * else, negative or overflowing; *out is untouched then. */
ferry_status units_parse_bytes(const char *text, uint64_t *out);

/* The smallest nonzero size a size flag takes: smaller is a unit mistake
 * ("--gpu-mem 0.5" meant GiB), and one that rounds to 0 would silently mean
 * the flag's 0. */
#define UNITS_SIZE_FLAG_MIN ((uint64_t)1 << 20)

/* The one rule for the size flags of every program (train_gpt2, memprof
 * plan, the benchmarks): units_parse_bytes' syntax, then 0 (whose meaning
 * the flag states: `zero_means`, e.g. "what the device has free") or at
 * least UNITS_SIZE_FLAG_MIN. The message names `flag`. */
ferry_status units_parse_size_flag(const char *flag, const char *text, const char *zero_means, uint64_t *out);

/* What --help says of a SIZE value, the same words in every program. */
#define UNITS_SIZE_HELP                                                                                   \
    "SIZE is a number with a unit: KiB, MiB, GiB, TiB are powers of 1024 (24GiB = 24 x 2^30 bytes);\n"  \
    "kB, MB, GB, TB are powers of 1000 (24GB = 24 x 10^9 bytes, as disks are sold); no unit is bytes;\n" \
    "a bare K, M, G or T (24G) is refused as ambiguous.\n"

#ifdef __cplusplus
}
#endif

#endif
