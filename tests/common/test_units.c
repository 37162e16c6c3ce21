/* Byte-count parsing and printing, error messages and status names, each
 * checked against hand-computed values. */
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "tap.h"

int main(void)
{
    static const struct { const char *text; uint64_t bytes; } good[] = {
        {"4096", 4096},
        {"24GiB", 24ull << 30},
        {"500MiB", 500ull << 20},
        {"1.5G", 3ull << 29},
        {"64k", 64ull << 10},
        {"2 TB", 2ull << 40},
        {"0", 0},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t got = 0;
        ferry_status st = units_parse_bytes(good[i].text, &got);
        tap_ok(st == FERRY_OK && got == good[i].bytes, "'%s' parses to %llu (got %llu, %s)", good[i].text,
               (unsigned long long)good[i].bytes, (unsigned long long)got, ferry_last_error());
    }
    static const char *const bad[] = {"", "-1GiB", "12XB", "GiB", "1e30T", "nan", "24 GiBs"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t got = 7;
        ferry_status st = units_parse_bytes(bad[i], &got);
        tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && got == 7 && strstr(ferry_last_error(), "24GiB"),
               "'%s' is refused with a hint, and the output is untouched", bad[i]);
    }
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
