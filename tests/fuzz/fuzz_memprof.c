/* libFuzzer harness: memprof's trace reader and analyzer
 * (tools/memprof/mp_read.c, mp_analyze.c, mp_svg.c). The input is a trace
 * file read from memory; what is read is replayed, and the timeline drawn
 * to /dev/null. */
#include <stdio.h>

#include "tests/fuzz/fuzz_util.h"
#include "tools/memprof/memprof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return 0; /* fmemopen refuses a zero-length buffer on some libcs */
    mp_trace t;
    mp_read_file(f, "fuzz", &t);
    fclose(f);
    if (!t.header_ok && t.n)
        abort(); /* records without a whole header */
    mp_report r;
    if (mp_analyze(&t, 10, 50, &r) == FERRY_OK) {
        mp_write_svg(&r, "/dev/null", "fuzz");
        mp_report_free(&r);
    }
    mp_trace_free(&t);
    return 0;
}
