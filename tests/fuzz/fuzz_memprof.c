/* libFuzzer harness: memprof's trace reader, analyzer and plan check
 * (tools/memprof/mp_read.c, mp_analyze.c, mp_plan.c, mp_svg.c). The input is
 * a trace file read from memory; what is read is replayed and checked against
 * the plan it carries, and the timeline (with the address space) drawn
 * into a file of the harness's own (in a fresh folder on /dev/shm, a memory
 * file system where the writer's fsync costs nothing, else in $TMPDIR or
 * /tmp), removed when the harness exits. Never a device: the writer must
 * not be pointed at /dev/null by a test. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_util.h"
#include "tools/memprof/memprof.h"

static char svg_dir[256], svg_path[300];

static void remove_svg(void)
{
    unlink(svg_path);
    rmdir(svg_dir);
}

/* DIR/timeline.svg in a folder made for this process. */
static const char *svg_file(void)
{
    if (svg_path[0])
        return svg_path;
    const char *tmp = getenv("TMPDIR");
    const char *bases[] = {"/dev/shm", tmp && *tmp ? tmp : "/tmp", "/tmp"};
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        snprintf(svg_dir, sizeof svg_dir, "%s/ferry-fuzz-memprof-XXXXXX", bases[i]);
        if (mkdtemp(svg_dir)) {
            snprintf(svg_path, sizeof svg_path, "%s/timeline.svg", svg_dir);
            atexit(remove_svg);
            return svg_path;
        }
    }
    perror("fuzz_memprof: cannot make a folder for the picture");
    abort();
}

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
    mp_plan plan;
    bool planned = mp_plan_check(&t, &plan) == FERRY_OK;
    if (planned && plan.present && plan.mismatches > 0 && plan.said[0][0] == '\0')
        abort(); /* a mismatch counted must be said */
    if (mp_analyze(&t, 10, 50, &r) == FERRY_OK) {
        mp_write_svg(&r, planned ? &plan : NULL, svg_file(), "fuzz");
        mp_report_free(&r);
    }
    if (planned)
        mp_plan_free(&plan);
    mp_trace_free(&t);
    return 0;
}
