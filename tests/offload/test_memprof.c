/* Tests of memprof (tools/memprof) on traces written by the real allocators:
 * a scripted run whose peaks, phases and breakdowns are computed by hand
 * below must come back exactly from `memprof --json`; the SVG must parse as
 * XML; truncated, corrupt and foreign files must give a clear error, exit
 * status 1 and the figures of what could be read; a file that is not a
 * trace gets no report. (The reader's checks byte by byte, and hostile
 * traces, are test_memprof_read.c's, in-process.)
 * argv[1]: the memprof program; argv[2]: a Python for the XML check.
 * $FERRY_KEEP_TRACE=PATH keeps the scripted trace (docs/memprof.md's example). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "offload/arena.h"
#include "offload/pool.h"
#include "offload/trace.h"
#include "json_path.h"
#include "run_program.h"
#include "tap.h"

#define MiB ((uint64_t)1 << 20)

static const char *memprof;
static char dir[] = "/tmp/ferry_memprof_XXXXXX";

typedef program_run run;

static void run_memprof(const char *args, run *r) { program_run_in(dir, memprof, args, r); }

static double num(const cJSON *o, const char *path) { return json_num(o, path); }

static const char *str(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : "(missing)";
}

static void pause_ms(void) { usleep(1500); }

/* The scripted run. Device: params 12 MiB throughout; each step's forward
 * keeps two activations (6 MiB, and 6/10/6 MiB in steps 1/2/3); backward adds
 * a 4 MiB grad and 2 MiB of workspace before the first activation is freed.
 * So the device peak is step 2 backward: 12 + 16 + 4 + 2 = 34 MiB.
 * Host: 12 MiB master + 24 MiB moments + 8 MiB of grads in every backward:
 * 44 MiB, first reached in step 1 backward. Returns the record count at the
 * end of step 1 (for the damaged copies). */
static uint64_t script(const char *path, backend *be)
{
    trace *t = NULL;
    trace_open(path, &t);
    arena_config ac = ARENA_CONFIG_INIT;
    ac.budget_bytes = 64 * MiB;
    ac.chunk_bytes = 16 * MiB;
    ac.trace = t;
    arena *a = NULL;
    arena_create(be, &ac, &a);
    pool_config pc = POOL_CONFIG_INIT;
    pc.slab_bytes = 16 * MiB;
    pc.pin = POOL_PIN_NEVER;
    pc.trace = t;
    pool *p = NULL;
    pool_create(&pc, &p);
    void *wte, *blk, *master, *m, *v;
    trace_phase(t, 0, "setup");
    arena_alloc(a, 8 * MiB, FERRY_MEM_PARAMS, "wte", &wte);
    arena_alloc(a, 4 * MiB, FERRY_MEM_PARAMS, "block 0", &blk);
    pool_alloc(p, 12 * MiB, 0, FERRY_MEM_PARAMS, "master", &master);
    pool_alloc(p, 12 * MiB, 0, FERRY_MEM_OPTIMIZER, "adam m", &m);
    pool_alloc(p, 12 * MiB, 0, FERRY_MEM_OPTIMIZER, "adam v", &v);
    pause_ms();
    uint64_t after_step1 = 0;
    for (int step = 1; step <= 3; step++) {
        void *a0, *a1, *g1, *g0, *ws, *hg;
        trace_phase(t, step, "forward");
        arena_alloc(a, 6 * MiB, FERRY_MEM_ACTIVATIONS, "block 0 acts", &a0);
        pause_ms();
        arena_alloc(a, (step == 2 ? 10 : 6) * MiB, FERRY_MEM_ACTIVATIONS, "block 1 acts", &a1);
        pause_ms();
        trace_phase(t, step, "backward");
        pool_alloc(p, 8 * MiB, 0, FERRY_MEM_GRADS, "host grads", &hg);
        arena_alloc(a, 4 * MiB, FERRY_MEM_GRADS, "block 1 grad", &g1);
        arena_alloc(a, 2 * MiB, FERRY_MEM_WORKSPACE, "cublas", &ws);
        pause_ms();
        arena_free(a, a1);
        arena_alloc(a, 4 * MiB, FERRY_MEM_GRADS, "block 0 grad", &g0);
        pause_ms();
        arena_free(a, a0);
        arena_free(a, ws);
        trace_phase(t, step, "optimizer");
        arena_free(a, g1);
        arena_free(a, g0);
        pause_ms();
        pool_free(p, hg);
        trace_step_timing(t, step, "gpu_wait_transfers", 1.0 * step);
        trace_step_timing(t, step, "optimizer_wait_grads", 0.5);
        pause_ms();
        if (step == 1)
            after_step1 = trace_record_count(t);
    }
    pool_destroy(p);
    arena_destroy(a);
    trace_close(t);
    return after_step1;
}

static cJSON *report_json(const char *trace_path, run *r)
{
    char args[700];
    snprintf(args, sizeof args, "--json '%s'", trace_path);
    run_memprof(args, r);
    cJSON *j = cJSON_Parse(r->out);
    if (!tap_ok(j != NULL, "memprof --json prints JSON"))
        tap_diag("stdout: %s", r->out);
    return j;
}

static void check_full(const char *path, const char *python)
{
    run r;
    cJSON *j = report_json(path, &r);
    TAP_IS_INT(r.status, 0, "full: exit status 0 (stderr: %s)", r.err);
    if (!j)
        return;
    tap_ok(cJSON_IsTrue(cJSON_GetObjectItem(j, "complete")), "full: complete");
    tap_ok(cJSON_IsTrue(cJSON_GetObjectItem(j, "checksummed")), "full: every record's checksum was checked");
    TAP_IS_INT(num(j, "device.peak_bytes"), 34 * MiB, "full: device peak 34 MiB");
    TAP_IS_INT(num(j, "device.peak_step"), 2, "full: device peak in step 2");
    tap_ok(strcmp(str(j, "device", "peak_phase"), "backward") == 0, "full: device peak in backward (%s)",
           str(j, "device", "peak_phase"));
    TAP_IS_INT(num(j, "device.by_category_at_peak.params"), 12 * MiB, "full: device params at peak");
    TAP_IS_INT(num(j, "device.by_category_at_peak.activations"), 16 * MiB, "full: device activations at peak");
    TAP_IS_INT(num(j, "device.by_category_at_peak.grads"), 4 * MiB, "full: device grads at peak");
    TAP_IS_INT(num(j, "device.by_category_at_peak.workspace"), 2 * MiB, "full: device workspace at peak");
    TAP_IS_INT(num(j, "device.category_peaks.grads"), 8 * MiB, "full: device grads' own peak is 8 MiB");
    TAP_IS_INT(num(j, "device.budget_bytes"), 64 * MiB, "full: device budget recorded");
    TAP_IS_INT(num(j, "device.live_at_peak"), 6, "full: 6 device allocations live at the peak");
    const cJSON *big = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "device"), "largest_at_peak");
    const cJSON *first = cJSON_GetArrayItem(big, 0), *second = cJSON_GetArrayItem(big, 1);
    tap_ok(first && strcmp(str(first, "name", NULL), "block 1 acts") == 0 && num(first, "bytes") == 10.0 * MiB,
           "full: the largest live at the peak is 'block 1 acts', 10 MiB");
    tap_ok(second && strcmp(str(second, "name", NULL), "wte") == 0 && num(second, "bytes") == 8.0 * MiB,
           "full: then 'wte', 8 MiB");
    TAP_IS_INT(num(j, "device.final_bytes"), 12 * MiB, "full: 12 MiB of params still live at the end");
    TAP_IS_INT(num(j, "host.peak_bytes"), 44 * MiB, "full: host peak 44 MiB");
    TAP_IS_INT(num(j, "host.peak_step"), 1, "full: host peak first reached in step 1");
    tap_ok(strcmp(str(j, "host", "peak_phase"), "backward") == 0, "full: host peak in backward");
    TAP_IS_INT(num(j, "host.by_category_at_peak.optimizer"), 24 * MiB, "full: host optimizer at peak");
    TAP_IS_INT(num(j, "host.by_category_at_peak.grads"), 8 * MiB, "full: host grads at peak");
    TAP_IS_INT(num(j, "host.by_category_at_peak.params"), 12 * MiB, "full: host params at peak");
    TAP_IS_CLOSE(num(j, "timings_ms.gpu_wait_transfers.mean"), 2.0, 1e-12, 0, "full: mean of 1, 2, 3 ms");
    TAP_IS_INT(num(j, "timings_ms.gpu_wait_transfers.count"), 3, "full: three timing records");
    cJSON_Delete(j);

    char args[1400], svg[600];
    snprintf(svg, sizeof svg, "%s/timeline.svg", dir);
    snprintf(args, sizeof args, "--svg '%s' '%s'", svg, path);
    run_memprof(args, &r);
    TAP_IS_INT(r.status, 0, "svg: exit status 0");
    tap_ok(strstr(r.out, "device: peak 34.0 MiB of 64.0 MiB budget") != NULL, "text: the device peak line");
    tap_ok(strstr(r.out, "step 2, phase 'backward'") != NULL, "text: names the step and phase");
    if (access(python, X_OK) == 0) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "'%s' -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); "
                                  "sys.exit(0 if d.documentElement.tagName == \"svg\" else 3)' '%s'",
                 python, svg);
        TAP_IS_INT(system(cmd), 0, "svg: well-formed XML with an <svg> root (python xml.dom.minidom)");
    } else {
        tap_diag("no %s: XML check skipped", python);
    }
}

static void copy_prefix(const char *from, const char *to, size_t bytes, long poke_at, int poke)
{
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    char buf[4096];
    size_t left = bytes, n;
    while (f && g && left && (n = fread(buf, 1, left < sizeof buf ? left : sizeof buf, f)) > 0) {
        fwrite(buf, 1, n, g);
        left -= n;
    }
    if (g && poke_at >= 0) {
        fseek(g, poke_at, SEEK_SET);
        fputc(poke, g);
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
}

static void check_damaged(const char *path, uint64_t n1)
{
    char bad[600];
    run r;
    /* Cut in the middle of record n1 + 1: step 1 survives whole. */
    snprintf(bad, sizeof bad, "%s/truncated.fmt", dir);
    copy_prefix(path, bad, 32 + n1 * 96 + 40, -1, 0);
    cJSON *j = report_json(bad, &r);
    TAP_IS_INT(r.status, 1, "truncated: exit status 1");
    char want[64];
    snprintf(want, sizeof want, "record %llu ", (unsigned long long)(n1 + 1));
    tap_ok(strstr(r.err, "truncated") && strstr(r.err, want), "truncated: stderr names the cut record (%s)", r.err);
    if (j) {
        tap_ok(cJSON_IsFalse(cJSON_GetObjectItem(j, "complete")), "truncated: complete is false");
        TAP_IS_INT(num(j, "records"), n1, "truncated: the complete records are read");
        TAP_IS_INT(num(j, "device.peak_bytes"), 30 * MiB, "truncated: step 1's device peak, 12+12+4+2 MiB");
        TAP_IS_INT(num(j, "device.peak_step"), 1, "truncated: in step 1");
        TAP_IS_INT(num(j, "host.peak_bytes"), 44 * MiB, "truncated: the host peak of step 1");
    }
    cJSON_Delete(j);
    /* A record whose kind no writer produces (version 3's last is 11, vacate). */
    snprintf(bad, sizeof bad, "%s/corrupt.fmt", dir);
    copy_prefix(path, bad, (size_t)-1, (long)(32 + n1 * 96 + 8), 12);
    j = report_json(bad, &r);
    TAP_IS_INT(r.status, 1, "corrupt: exit status 1");
    tap_ok(strstr(r.err, "corrupt") && strstr(r.err, want) && strstr(r.err, "kind 12"),
           "corrupt: stderr names the record and what is wrong (%s)", r.err);
    if (j)
        TAP_IS_INT(num(j, "device.peak_bytes"), 30 * MiB, "corrupt: the figures before the damage");
    cJSON_Delete(j);
    /* Not a trace at all, and an empty file. */
    snprintf(bad, sizeof bad, "%s/foreign.fmt", dir);
    FILE *f = fopen(bad, "w");
    fputs("{\"this\": \"is json, not a trace\"}\n", f);
    fclose(f);
    j = report_json(bad, &r);
    TAP_IS_INT(r.status, 1, "foreign: exit status 1");
    tap_ok(strstr(r.err, "not a ferry memory trace") != NULL, "foreign: says so (%s)", r.err);
    if (j)
        TAP_IS_INT(num(j, "records"), 0, "foreign: no records");
    cJSON_Delete(j);
    snprintf(bad, sizeof bad, "%s/empty.fmt", dir);
    fclose(fopen(bad, "w"));
    run_memprof(bad, &r);
    TAP_IS_INT(r.status, 1, "empty: exit status 1");
    tap_ok(strstr(r.err, "shorter than its magic") != NULL, "empty: says the file is too short (%s)", r.err);
    run_memprof("/nonexistent/trace.fmt", &r);
    TAP_IS_INT(r.status, 1, "missing: exit status 1");
    tap_ok(strstr(r.err, "cannot open trace '/nonexistent/trace.fmt'") != NULL, "missing: names the path");
    tap_ok(r.out[0] == '\0', "missing: and prints no report (stdout '%.40s')", r.out);
}

static void check_cli(const char *path)
{
    run r;
    run_memprof("--help", &r);
    TAP_IS_INT(r.status, 0, "cli: --help exits 0");
    tap_ok(strstr(r.out, "usage: memprof") != NULL, "cli: --help prints the usage");
    run_memprof("--bogus x", &r);
    TAP_IS_INT(r.status, 2, "cli: an unknown option exits 2");
    char args[700];
    snprintf(args, sizeof args, "report --top 2 '%s'", path);
    run_memprof(args, &r);
    TAP_IS_INT(r.status, 0, "cli: 'report' subcommand");
    snprintf(args, sizeof args, "dump '%s'", path);
    run_memprof(args, &r);
    TAP_IS_INT(r.status, 0, "cli: dump exits 0");
    char *nl = strchr(r.out, '\n');
    if (nl)
        *nl = '\0';
    cJSON *j = cJSON_Parse(r.out);
    tap_ok(j && strcmp(str(j, "kind", NULL), "limit") == 0, "cli: dump's first line is a JSON limit record (%s)", r.out);
    cJSON_Delete(j);
}

int main(int argc, char **argv)
{
    memprof = program_setup(argc, argv, 3, "usage: test_memprof MEMPROF PYTHON", dir);
    backend *be = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK)
        tap_plan_skip("the host backend cannot open");
    char path[600];
    const char *keep = getenv("FERRY_KEEP_TRACE");
    snprintf(path, sizeof path, "%s", keep ? keep : "");
    if (!keep)
        snprintf(path, sizeof path, "%s/run.fmt", dir);
    uint64_t n1 = script(path, be);
    tap_diag("trace %s: %llu records by the end of step 1", path, (unsigned long long)n1);
    check_full(path, argv[2]);
    check_damaged(path, n1);
    check_cli(path);
    backend_close(be);
    test_dir_remove(dir);
    return tap_done();
}
