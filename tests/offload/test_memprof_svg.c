/* memprof's picture and text, read back (the memprof library, linked in;
 * the program for the text report): a run of 200 steps with two phase
 * markers each (400 markers) is drawn with few enough phase lines to leave
 * the areas readable and with no label running into the next or past the
 * frame; one step drawn alone (--step) shows what moves within it, columns
 * checked against the hand-placed allocations; a step the trace does not
 * have is refused naming the steps it has; the text report's timing
 * figures line up under a long key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/error.h"
#include "offload/trace.h"
#include "tap.h"
#include "test_files.h"
#include "tools/memprof/memprof.h"

#define MS 1000000ull
#define MiB (1ull << 20)
#define STEPS 200
#define FRAME_LEFT 80.0   /* mp_svg.c's frame: x from LEFT to W - RIGHT */
#define FRAME_RIGHT 830.0
#define CHAR_PX 6.5       /* a 10 px sans-serif label's characters are at most 0.65 em */

static const char *const long_key = "time_the_cpu_spent_waiting_for_the_last_drains";

/* One record appended to the trace being built (every field set). */
static void put(mp_trace *t, uint64_t t_ns, int kind, int pool, int cat, uint64_t bytes, uint64_t addr,
                int64_t step, double value, const char *name)
{
    trace_record *r = &t->rec[t->n++];
    memset(r, 0, sizeof *r);
    r->t_ns = t_ns;
    r->kind = (uint8_t)kind;
    r->pool = (uint8_t)pool;
    r->category = (uint8_t)cat;
    r->bytes = bytes;
    r->addr = addr;
    r->step = step;
    r->value = value;
    snprintf(r->name, sizeof r->name, "%s", name);
}

/* Step s (0..199) at [10 s ms, 10 (s + 1) ms): "forward+backward" at +0,
 * 1 MiB of activations from +2 ms to +6 ms, "optimizer" at +7 ms; 4 MiB of
 * weights from 0.5 ms on, for good. */
static void build(mp_trace *t)
{
    memset(t, 0, sizeof *t);
    t->rec = calloc(8 * STEPS + 8, sizeof *t->rec);
    t->header_ok = true;
    t->checksummed = true;
    put(t, 0, TRACE_LIMIT, TRACE_POOL_DEVICE, 0, 64 * MiB, 0, -1, 0, "");
    put(t, MS / 2, TRACE_ALLOC, TRACE_POOL_DEVICE, FERRY_MEM_PARAMS, 4 * MiB, 0x10000, -1, 0, "weights");
    for (int s = 0; s < STEPS; s++) {
        uint64_t t0 = (uint64_t)s * 10 * MS + MS;
        put(t, t0, TRACE_PHASE, 0, 0, 0, 0, s, 0, "forward+backward");
        put(t, t0 + 2 * MS, TRACE_ALLOC, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, MiB, 0x900000, -1, 0, "acts");
        put(t, t0 + 6 * MS, TRACE_FREE, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, MiB, 0x900000, -1, 0, "acts");
        put(t, t0 + 7 * MS, TRACE_PHASE, 0, 0, 0, 0, s, 0, "optimizer");
        put(t, t0 + 9 * MS, TRACE_TIMING, 0, 0, 0, 0, s, 1.5, long_key);
        put(t, t0 + 9 * MS, TRACE_TIMING, 0, 0, 0, 0, s, 20.25, "step_ms");
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = calloc(1, 1 << 22);
    if (b && fread(b, 1, (1 << 22) - 1, f) == 0 && ferror(f)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

typedef struct label {
    double x;
    char text[128];
} label;

/* The phase lines (stroke #999) and the 10 px grey labels of an SVG. */
static int read_marks(const char *svg, label *labels, int cap, int *nlabels)
{
    int lines = 0;
    *nlabels = 0;
    for (const char *p = svg; (p = strstr(p, "<line ")) != NULL; p++) {
        const char *end = strchr(p, '>'), *grey = strstr(p, "stroke=\"#999\"");
        lines += end && grey && grey < end;
    }
    for (const char *p = svg; (p = strstr(p, "<text x=\"")) != NULL; p++) {
        const char *end = strchr(p, '>');
        if (!end || !strstr(p, "fill=\"#555\"") || strstr(p, "fill=\"#555\"") > end || *nlabels >= cap)
            continue;
        label *l = &labels[(*nlabels)++];
        l->x = strtod(p + 9, NULL);
        const char *close = strstr(end, "</text>");
        int n = close ? (int)(close - end - 1) : 0;
        snprintf(l->text, sizeof l->text, "%.*s", n < 127 ? n : 127, end + 1);
    }
    return lines;
}

static void check_whole_run(const mp_trace *t, const char *dir)
{
    mp_report r;
    char path[600];
    snprintf(path, sizeof path, "%s/run.svg", dir);
    TAP_IS_STATUS(mp_analyze(t, 10, 600, &r), FERRY_OK, "a run of %d steps, %zu records, analyzed", STEPS, t->n);
    TAP_IS_INT(r.nmarks, 2 * STEPS, "with %d phase markers", 2 * STEPS);
    TAP_IS_STATUS(mp_write_svg(&r, NULL, path, "a run"), FERRY_OK, "drawn");
    mp_report_free(&r);
    char *svg = slurp(path);
    label l[256];
    int n = 0, lines = svg ? read_marks(svg, l, 256, &n) : 0;
    /* two panels? device only here: the lines of one panel */
    int most = (int)((FRAME_RIGHT - FRAME_LEFT) / 40.0) + 1;
    tap_ok(lines >= 5 && lines <= most, "%d phase lines, not 400: at most one per 40 px (%d) and some", lines, most);
    bool inside = n > 0, apart = true;
    for (int i = 0; i < n; i++) {
        double w = CHAR_PX * (double)strlen(l[i].text);
        if (l[i].x + w > FRAME_RIGHT) {
            inside = false;
            tap_diag("label '%s' at x %.1f runs to %.1f, past the frame at %.0f", l[i].text, l[i].x, l[i].x + w,
                     FRAME_RIGHT);
        }
        if (i && l[i].x < l[i - 1].x + CHAR_PX * (double)strlen(l[i - 1].text)) {
            apart = false;
            tap_diag("label '%s' at %.1f starts inside '%s' at %.1f", l[i].text, l[i].x, l[i - 1].text, l[i - 1].x);
        }
    }
    tap_ok(inside, "%d labels, each ending inside the frame", n);
    tap_ok(apart, "no label runs into the next");
    tap_ok(n > 0 && strncmp(l[0].text, "step ", 5) == 0, "dense markers are labelled by step: '%s'",
           n ? l[0].text : "");
    free(svg);
}

/* Step 100 alone: [1001 ms, 1011 ms) in 100 columns of 0.1 ms. */
static void check_zoom(const mp_trace *t, const char *dir)
{
    uint64_t t0 = 0, t1 = 0;
    TAP_IS_STATUS(mp_step_window(t, 100, &t0, &t1), FERRY_OK, "step 100 has a window");
    TAP_IS_INT(t0, 1001 * MS, "from its first marker");
    TAP_IS_INT(t1, 1011 * MS - 1, "to just before step 101's first");
    mp_report r;
    TAP_IS_STATUS(mp_analyze_window(t, 0, 100, t0, t1, &r), FERRY_OK, "analyzed over that window");
    const mp_pool_report *d = &r.pool[TRACE_POOL_DEVICE];
    TAP_IS_INT(d->bucket[0][FERRY_MEM_PARAMS], 4 * MiB, "column 0: the weights allocated before the step, carried in");
    TAP_IS_INT(d->bucket[0][FERRY_MEM_ACTIVATIONS], 0, "column 0: no activations yet");
    bool during = true, after = true;
    for (int k = 21; k < 60; k++)
        during &= d->bucket[k][FERRY_MEM_ACTIVATIONS] == MiB && d->bucket[k][FERRY_MEM_PARAMS] == 4 * MiB;
    for (int k = 61; k < 100; k++)
        after &= d->bucket[k][FERRY_MEM_ACTIVATIONS] == 0;
    tap_ok(during, "columns 21..59 (2.1 to 6 ms into the step): 1 MiB of activations beside the weights");
    tap_ok(after, "columns 61..99: the activations gone");
    TAP_IS_INT(d->peak, 5 * MiB, "the run's peak is still the run's");
    char path[600];
    snprintf(path, sizeof path, "%s/step.svg", dir);
    TAP_IS_STATUS(mp_write_svg(&r, NULL, path, "step 100"), FERRY_OK, "drawn");
    mp_report_free(&r);
    char *svg = slurp(path);
    label l[16];
    int n = 0, lines = svg ? read_marks(svg, l, 16, &n) : 0;
    TAP_IS_INT(lines, 2, "the step's two phase lines");
    tap_ok(n == 2 && !strcmp(l[0].text, "100 forward+backward") && !strcmp(l[1].text, "100 optimizer"),
           "labelled with their phases: '%s', '%s'", n > 0 ? l[0].text : "", n > 1 ? l[1].text : "");
    tap_ok(svg && strstr(svg, "up to 5.0 MiB here (the run's peak 5.0 MiB)"),
           "the panel says the window's own peak beside the run's");
    free(svg);

    t0 = t1 = 7;
    ferry_status st = mp_step_window(t, 999, &t0, &t1);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "steps 0 to 199") && t0 == 7 && t1 == 7,
           "a step the trace lacks is refused, naming the steps it has: %s", ferry_last_error());
    TAP_IS_STATUS(mp_step_window(t, 199, &t0, &t1), FERRY_OK, "the last step");
    TAP_IS_INT(t1, t->rec[t->n - 1].t_ns, "ends at the last record");
}

/* The text report of a trace the writer made with a 46-character timing
 * key: every timing line as long as the header, so the figures line up. */
static void check_text(const char *memprof, const char *dir)
{
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/long.trace", dir);
    trace *t = NULL;
    if (!tap_is_status(trace_open(path, &t), FERRY_OK, "a trace with a long timing key"))
        return;
    for (int s = 0; s < 3; s++) {
        trace_phase(t, s, "step");
        trace_step_timing(t, s, long_key, 1234.5);
        trace_step_timing(t, s, "step_ms", 2.0);
    }
    trace_close(t);
    snprintf(cmd, sizeof cmd, "'%s' '%s'", memprof, path);
    FILE *p = popen(cmd, "r");
    char line[512];
    int header = -1, rows = 0, same = 1;
    bool in = false;
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "timings (ms):", 13)) {
            in = true;
            header = (int)strlen(line);
            tap_diag("%s", line);
            continue;
        }
        if (in && line[0] == ' ') {
            rows++;
            same &= (int)strlen(line) == header;
            tap_diag("%s", line);
        }
    }
    int rc = p ? pclose(p) : -1;
    tap_ok(rc == 0 && rows == 2 && same && header > 60,
           "the key column is as wide as the longest key: %d timing lines as long as the header (%d)", rows, header);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_memprof_svg MEMPROF\n");
        return 2;
    }
    char dir[] = "/tmp/ferry_memprof_svg_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    mp_trace t;
    build(&t);
    check_whole_run(&t, dir);
    check_zoom(&t, dir);
    check_text(argv[1], dir);
    mp_trace_free(&t);
    test_dir_remove(dir);
    return tap_done();
}
