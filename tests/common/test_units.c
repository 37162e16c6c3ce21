/* Byte-count parsing and printing, error messages and status names, each
 * checked against hand-computed values. */
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "tap.h"

int main(void)
{
    /* Each unit means what it says: binary with "i", decimal without. */
    static const struct { const char *text; uint64_t bytes; } good[] = {
        {"4096", 4096},
        {"17B", 17},
        {"24GiB", 24ull << 30},
        {"24GB", 24000000000ull},
        {"24 gib", 24ull << 30},
        {"500MiB", 500ull << 20},
        {"500MB", 500000000ull},
        {"1.5GiB", 3ull << 29},
        {"64KiB", 64ull << 10},
        {"64kB", 64000},
        {"2 TB", 2000000000000ull},
        {"2TiB", 2ull << 40},
        {"0", 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t got = 0;
        ferry_status st = units_parse_bytes(good[i].text, &got);
        tap_ok(st == FERRY_OK && got == good[i].bytes, "'%s' parses to %llu (got %llu, %s)", good[i].text,
               (unsigned long long)good[i].bytes, (unsigned long long)got, ferry_last_error());
    }
    static const char *const bad[] = {"", "-1GiB", "12XB", "GiB", "1e30TiB", "nan", "24 GiBs", "24GiBB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t got = 7;
        ferry_status st = units_parse_bytes(bad[i], &got);
        tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && got == 7 && strstr(ferry_last_error(), "24GiB") &&
                   strstr(ferry_last_error(), "24GB"),
               "'%s' is refused with a hint, and the output is untouched", bad[i]);
    }
    /* A bare letter is written for both: refused, with both spellings. */
    static const struct { const char *text, *bin, *dec; } ambiguous[] = {
        {"24G", "24GiB", "24GB"}, {"64k", "64KiB", "64kB"}, {"1.5 M", "1.5MiB", "1.5MB"}, {"2T", "2TiB", "2TB"},
    };
    for (size_t i = 0; i < sizeof ambiguous / sizeof ambiguous[0]; i++) {
        uint64_t got = 7;
        ferry_status st = units_parse_bytes(ambiguous[i].text, &got);
        tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && got == 7 && strstr(ferry_last_error(), "ambiguous") &&
                   strstr(ferry_last_error(), ambiguous[i].bin) && strstr(ferry_last_error(), ambiguous[i].dec),
               "'%s' is refused as ambiguous, offering %s and %s: %s", ambiguous[i].text, ambiguous[i].bin,
               ambiguous[i].dec, ferry_last_error());
    }
    /* The size flags' one rule: 0 (the flag's meaning), or at least 1 MiB. */
    uint64_t v = 7;
    TAP_IS_STATUS(units_parse_size_flag("--gpu-mem", "0", "what the device has free", &v), FERRY_OK, "0 is taken");
    TAP_IS_INT(v, 0, "as 0");
    TAP_IS_STATUS(units_parse_size_flag("--gpu-mem", "1MiB", "x", &v), FERRY_OK, "1MiB is taken");
    TAP_IS_INT(v, 1 << 20, "as 2^20");
    v = 7;
    tap_ok(units_parse_size_flag("--host-mem", "1000", "no cap", &v) == FERRY_ERR_INVALID_ARGUMENT && v == 7 &&
               strstr(ferry_last_error(), "--host-mem '1000' is 1000 bytes") &&
               strstr(ferry_last_error(), "at least 1MiB") && strstr(ferry_last_error(), "0 for no cap"),
           "a size under 1 MiB is a unit mistake: %s", ferry_last_error());
    tap_ok(units_parse_size_flag("--gpu-mem", "0.1B", "x", &v) == FERRY_ERR_INVALID_ARGUMENT && v == 7 &&
               strstr(ferry_last_error(), "is 0 bytes"),
           "a size that rounds to 0 is not the flag's 0: %s", ferry_last_error());
    tap_ok(units_parse_size_flag("--gpu-mem", "24G", "x", &v) == FERRY_ERR_INVALID_ARGUMENT && v == 7 &&
               strncmp(ferry_last_error(), "--gpu-mem: '24G' is ambiguous", 29) == 0,
           "the flag is named: %s", ferry_last_error());
    tap_ok(strstr(UNITS_SIZE_HELP, "24GiB") && strstr(UNITS_SIZE_HELP, "24GB") && strstr(UNITS_SIZE_HELP, "24G)"),
           "the help text names both units and the refused form");
    char buf[32];
    tap_ok(strcmp(units_fmt_bytes(buf, sizeof buf, 17), "17 B") == 0, "17 bytes prints as '%s'", buf);
    tap_ok(strcmp(units_fmt_bytes(buf, sizeof buf, 512ull << 20), "512.0 MiB") == 0, "512 MiB prints as '%s'", buf);
    tap_ok(strcmp(units_fmt_bytes(buf, sizeof buf, (uint64_t)(23.8 * (1ull << 30))), "23.8 GiB") == 0,
           "23.8 GiB prints as '%s'", buf);

    ferry_status st = err_set(FERRY_ERR_IO, "cannot open '%s'", "x.bin");
    TAP_IS_INT(st, FERRY_ERR_IO, "err_set returns its status");
    err_wrap(st, "loading checkpoint");
    tap_ok(strcmp(ferry_last_error(), "loading checkpoint: cannot open 'x.bin'") == 0, "err_wrap prefixes: %s",
           ferry_last_error());
    tap_ok(strcmp(ferry_status_string(FERRY_ERR_OUT_OF_MEMORY), "FERRY_ERR_OUT_OF_MEMORY") == 0,
           "status names");
    tap_ok(strcmp(ferry_version(), FERRY_VERSION_STRING) == 0, "library and header versions agree: %s",
           ferry_version());
    ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
    TAP_IS_STATUS(ferry_system_probe(&info), FERRY_OK, "system probe");
    tap_ok(info.cores >= 1 && info.pus >= info.cores && info.numa_nodes >= 1 && info.host_memory_bytes > 0,
           "topology: %d cores, %d PUs, %d NUMA nodes", info.cores, info.pus, info.numa_nodes);
    ferry_system_info old = info;
    old.size = 8;
    TAP_IS_STATUS(ferry_system_probe(&old), FERRY_ERR_INVALID_ARGUMENT, "a struct without its size is refused");
    return tap_done();
}
