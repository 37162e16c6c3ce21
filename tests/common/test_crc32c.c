/* CRC-32C (common/crc32c.h), every form this CPU has, against the test's
 * own bit-at-a-time CRC written from the definition (reflected polynomial
 * 0x82F63B78, inverted in and out): the standard check value; seeded
 * buffers of every length around the forms' edges (the thirds of 256 bytes
 * and 8 KiB, their rounds, the 8-byte words) at every alignment; a CRC
 * continued from a partial one; a flipped bit changing the value. A form
 * the CPU lacks is reported skipped, never counted as passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "ref_crc32c.h"
#include "tap.h"

static const size_t lengths[] = {0,    1,    7,    8,    9,    15,   255,  256,  767,  768,   769,   1023,
                                 1536, 2304, 2311, 4096, 24575, 24576, 24577, 25344, 49152, 49160, 65536,
                                 100003};

int main(void)
{
    const uint64_t seed = 20261231;
    tap_diag("seed %llu; this CPU's form: %s", (unsigned long long)seed, crc32c_name(crc32c_active()));
    size_t cap = 100003 + 16;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        printf("Bail out! no memory\n");
        return 1;
    }
    uint64_t rng = seed;
    for (size_t i = 0; i < cap; i++)
        buf[i] = (unsigned char)tap_rand_u64(&rng);
    const unsigned char check[] = "123456789";
    TAP_IS_INT(ref_crc32c(0, check, 9), 0xE3069283u, "the test's bitwise reference gives the standard 0xE3069283");
    TAP_IS_INT(crc32c(0, check, 9), 0xE3069283u, "crc32c gives it too");
    tap_ok(crc32c_supported(CRC32C_TABLE), "the table form is always there");
    tap_ok(crc32c_supported(crc32c_active()), "the form chosen is one this CPU has (%s)", crc32c_name(crc32c_active()));
#if defined(__x86_64__)
    tap_ok(crc32c_active() != CRC32C_TABLE || !crc32c_supported(CRC32C_SSE42),
           "on x86-64 with SSE4.2 a hardware form is chosen (%s)", crc32c_name(crc32c_active()));
#endif
    for (int f = 0; f < CRC32C_IMPLS; f++) {
        crc32c_impl impl = (crc32c_impl)f;
        if (!crc32c_supported(impl)) {
            tap_skip("%s: this CPU lacks it", crc32c_name(impl));
            continue;
        }
        TAP_IS_INT(crc32c_with(impl, 0, check, 9), 0xE3069283u, "%s: the check value", crc32c_name(impl));
        size_t bad = 0, tried = 0;
        uint32_t got = 0, want = 0;
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
            for (size_t off = 0; off < 8; off++) {
                uint32_t start = (uint32_t)tap_rand_u64(&rng);
                uint32_t g = crc32c_with(impl, start, buf + off, lengths[l]);
                uint32_t w = ref_crc32c(start, buf + off, lengths[l]);
                tried++;
                if (g != w && bad++ == 0) {
                    got = g;
                    want = w;
                    tap_diag("%s: %zu bytes at offset %zu from 0x%08x: 0x%08x, the reference 0x%08x",
                             crc32c_name(impl), lengths[l], off, start, g, w);
                }
            }
        tap_ok(bad == 0, "%s: %zu of %zu buffers (lengths 0..100003, 8 alignments) equal the reference "
               "(first difference 0x%08x vs 0x%08x)", crc32c_name(impl), tried - bad, tried, got, want);
        uint32_t parts = crc32c_with(impl, crc32c_with(impl, 0, buf, 24577), buf + 24577, 75426);
        TAP_IS_INT(parts, ref_crc32c(0, buf, 100003), "%s: continuing from a partial CRC gives the whole one",
                   crc32c_name(impl));
        uint32_t before = crc32c_with(impl, 0, buf, 65536);
        buf[40000] ^= 0x08;
        uint32_t after = crc32c_with(impl, 0, buf, 65536);
        buf[40000] ^= 0x08;
        tap_ok(before != after && after == ref_crc32c(0, (buf[40000] ^= 0x08, buf), 65536),
               "%s: one flipped bit in the middle third changes it (0x%08x to 0x%08x), as the reference says",
               crc32c_name(impl), before, after);
        buf[40000] ^= 0x08;
    }
    /* Parts checksummed apart, combined: the whole one, at every cut
     * (empty parts included) and across three parts. */
    int cuts_bad = 0;
    uint32_t whole = ref_crc32c(0, buf, 100003);
    for (size_t cut = 0; cut <= 100003; cut += cut < 64 ? 1 : 997) {
        uint32_t a = ref_crc32c(0, buf, cut), b = ref_crc32c(0, buf + cut, 100003 - cut);
        if (crc32c_combine(a, b, 100003 - cut) != whole) {
            if (!cuts_bad)
                tap_diag("cut at %zu: 0x%08x, the whole 0x%08x", cut, crc32c_combine(a, b, 100003 - cut), whole);
            cuts_bad++;
        }
    }
    tap_ok(cuts_bad == 0, "combining two parts' CRCs gives the whole one at every cut tried (%d differ)", cuts_bad);
    uint32_t three = crc32c_combine(crc32c_combine(ref_crc32c(0, buf, 33333), ref_crc32c(0, buf + 33333, 33334), 33334),
                                    ref_crc32c(0, buf + 66667, 33336), 33336);
    TAP_IS_INT(three, whole, "three parts combined in order give the whole one");
    TAP_IS_INT(crc32c_combine(0xE3069283u, 0, 0), 0xE3069283u, "an empty second part changes nothing");
    free(buf);
    return tap_done();
}
