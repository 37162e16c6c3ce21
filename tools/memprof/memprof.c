/* memprof: reads a ferry memory trace and says where the memory went.
 *   memprof [report] [--json] [--svg FILE] [--top N] TRACE
 *   memprof dump TRACE          (the records as JSON Lines)
 * Subcommands are dispatched from main(), so more (a planner) can join. A
 * damaged trace still gets the figures of what could be read, with the
 * problem on stderr and exit status 1. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/units.h"
#include "tools/memprof/memprof.h"

#define TIMELINE_COLUMNS 600

static void usage(FILE *f)
{
    fputs("usage: memprof [report] [options] TRACE\n"
          "       memprof dump TRACE\n"
          "\n"
          "Reads a memory trace written by ferry (the trainer's --trace FILE, or\n"
          "trace_open() in the API) and prints, for device and host memory: the\n"
          "peak, the step and phase it fell in, the bytes by category at that\n"
          "moment, and the largest allocations live then.\n"
          "\n"
          "report options:\n"
          "  --json       print the figures as JSON instead of text\n"
          "  --svg FILE   draw a stacked-area timeline by category, phases marked\n"
          "  --top N      list the N largest live allocations at each peak (default 10, max 64)\n"
          "  -h, --help   this text\n"
          "\n"
          "dump prints every record as one JSON object per line.\n"
          "\n"
          "Exit status: 0 on success; 1 when the trace is damaged (the figures of\n"
          "the records before the damage are still printed); 2 on a usage error.\n",
          f);
}

static const char *fmt(char *buf, uint64_t bytes) { return units_fmt_bytes(buf, 32, bytes); }

static void print_pool(FILE *f, const mp_report *r, int p)
{
    const mp_pool_report *pr = &r->pool[p];
    char a[32], b[32];
    if (!pr->seen) {
        fprintf(f, "%s: no events\n", mp_pool_name(p));
        return;
    }
    fprintf(f, "%s: peak %s", mp_pool_name(p), fmt(a, pr->peak));
    if (pr->limit)
        fprintf(f, " of %s budget (%.1f%%)", fmt(b, pr->limit), 100.0 * (double)pr->peak / (double)pr->limit);
    fprintf(f, " at %.3f ms", (double)pr->peak_t_ns / 1e6);
    if (pr->peak_step >= 0 || pr->peak_phase[0])
        fprintf(f, ", step %lld, phase '%s'", (long long)pr->peak_step, pr->peak_phase);
    fprintf(f, "\n  reserved peak %s; %llu allocs, %llu frees, %s still live at the end\n",
            fmt(a, pr->reserved_peak), (unsigned long long)pr->allocs, (unsigned long long)pr->frees,
            fmt(b, pr->final_bytes));
    if (pr->unknown_frees || pr->reused_addrs)
        fprintf(f, "  warning: %llu frees of unknown addresses, %llu allocs of live addresses "
                   "(the trace misses events)\n",
                (unsigned long long)pr->unknown_frees, (unsigned long long)pr->reused_addrs);
    if (!pr->peak)
        return;
    fprintf(f, "  at the peak, by category:          (each category's own peak)\n");
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (pr->peak_by_cat[c] || pr->cat_peak[c])
            fprintf(f, "    %-12s %12s %6.1f%%   (%s)\n", ferry_mem_category_name((ferry_mem_category)c),
                    fmt(a, pr->peak_by_cat[c]), 100.0 * (double)pr->peak_by_cat[c] / (double)pr->peak,
                    fmt(b, pr->cat_peak[c]));
    fprintf(f, "  largest of the %zu allocations live at the peak:\n", pr->live_at_peak);
    for (size_t i = 0; i < pr->nlargest; i++)
        fprintf(f, "    %12s  %-12s '%s'\n", fmt(a, pr->largest[i].bytes),
                ferry_mem_category_name((ferry_mem_category)pr->largest[i].category), pr->largest[i].name);
}

static void print_text(FILE *f, const char *path, const mp_report *r)
{
    fprintf(f, "trace %s: %zu records over %.3f ms, %zu phase markers\n", path, r->records,
            (double)r->t_end / 1e6, r->nmarks);
    for (int p = 0; p < MP_POOLS; p++)
        print_pool(f, r, p);
    if (r->ntimings) {
        fprintf(f, "timings (ms):            mean        max  records\n");
        for (size_t i = 0; i < r->ntimings; i++) {
            const mp_timing *t = &r->timings[i];
            fprintf(f, "  %-20s %10.3f %10.3f %8llu\n", t->key, t->sum / (double)t->count, t->max,
                    (unsigned long long)t->count);
        }
    }
}

static cJSON *pool_json(const mp_pool_report *pr)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "seen", pr->seen);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)pr->peak);
    cJSON_AddNumberToObject(o, "peak_time_ms", (double)pr->peak_t_ns / 1e6);
    cJSON_AddNumberToObject(o, "peak_step", (double)pr->peak_step);
    cJSON_AddStringToObject(o, "peak_phase", pr->peak_phase);
    cJSON_AddNumberToObject(o, "budget_bytes", (double)pr->limit);
    cJSON_AddNumberToObject(o, "reserved_peak_bytes", (double)pr->reserved_peak);
    cJSON_AddNumberToObject(o, "final_bytes", (double)pr->final_bytes);
    cJSON_AddNumberToObject(o, "allocs", (double)pr->allocs);
    cJSON_AddNumberToObject(o, "frees", (double)pr->frees);
    cJSON_AddNumberToObject(o, "unknown_frees", (double)pr->unknown_frees);
    cJSON_AddNumberToObject(o, "live_at_peak", (double)pr->live_at_peak);
    cJSON *at = cJSON_AddObjectToObject(o, "by_category_at_peak");
    cJSON *own = cJSON_AddObjectToObject(o, "category_peaks");
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++) {
        const char *n = ferry_mem_category_name((ferry_mem_category)c);
        cJSON_AddNumberToObject(at, n, (double)pr->peak_by_cat[c]);
        cJSON_AddNumberToObject(own, n, (double)pr->cat_peak[c]);
    }
    cJSON *big = cJSON_AddArrayToObject(o, "largest_at_peak");
    for (size_t i = 0; i < pr->nlargest; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", pr->largest[i].name);
        cJSON_AddStringToObject(e, "category", ferry_mem_category_name((ferry_mem_category)pr->largest[i].category));
        cJSON_AddNumberToObject(e, "bytes", (double)pr->largest[i].bytes);
        cJSON_AddItemToArray(big, e);
    }
    return o;
}

static void print_json(FILE *f, const char *path, const mp_trace *t, const mp_report *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "trace", path);
    cJSON_AddBoolToObject(o, "complete", t->status == FERRY_OK);
    if (t->status == FERRY_OK)
        cJSON_AddNullToObject(o, "error");
    else
        cJSON_AddStringToObject(o, "error", t->error);
    cJSON_AddNumberToObject(o, "records", (double)r->records);
    cJSON_AddNumberToObject(o, "duration_ms", (double)r->t_end / 1e6);
    for (int p = 0; p < MP_POOLS; p++)
        cJSON_AddItemToObject(o, mp_pool_name(p), pool_json(&r->pool[p]));
    cJSON *tm = cJSON_AddObjectToObject(o, "timings_ms");
    for (size_t i = 0; i < r->ntimings; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "count", (double)r->timings[i].count);
        cJSON_AddNumberToObject(e, "mean", r->timings[i].sum / (double)r->timings[i].count);
        cJSON_AddNumberToObject(e, "max", r->timings[i].max);
        cJSON_AddItemToObject(tm, r->timings[i].key, e);
    }
    char *s = cJSON_Print(o);
    if (s)
        fprintf(f, "%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

static const char *const kind_name[] = {"?", "alloc", "free", "phase", "timing", "limit", "reserve"};

static int cmd_dump(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        usage(argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? stdout : stderr);
        return argc == 2 && argv[1][0] == '-' && argv[1][1] == 'h' ? 0 : 2;
    }
    mp_trace t;
    mp_read(argv[1], &t);
    for (size_t i = 0; i < t.n; i++) {
        const trace_record *r = &t.rec[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "t_ns", (double)r->t_ns);
        cJSON_AddStringToObject(o, "kind", kind_name[r->kind]);
        if (r->kind == TRACE_PHASE || r->kind == TRACE_TIMING) {
            cJSON_AddNumberToObject(o, "step", (double)r->step);
            cJSON_AddStringToObject(o, r->kind == TRACE_PHASE ? "phase" : "key", r->name);
            if (r->kind == TRACE_TIMING)
                cJSON_AddNumberToObject(o, "ms", r->value);
        } else {
            cJSON_AddStringToObject(o, "pool", mp_pool_name(r->pool));
            cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
        }
        if (r->kind == TRACE_ALLOC || r->kind == TRACE_FREE) {
            char addr[24];
            snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)r->addr);
            cJSON_AddStringToObject(o, "category", ferry_mem_category_name((ferry_mem_category)r->category));
            cJSON_AddStringToObject(o, "name", r->name);
            cJSON_AddStringToObject(o, "addr", addr);
        }
        char *s = cJSON_PrintUnformatted(o);
        if (s)
            printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    }
    if (t.status != FERRY_OK)
        fprintf(stderr, "memprof: %s\n", t.error);
    mp_trace_free(&t);
    return t.status == FERRY_OK ? 0 : 1;
}

static int cmd_report(int argc, char **argv)
{
    const char *path = NULL, *svg = NULL;
    int json = 0;
    long top = 10;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--svg") && i + 1 < argc) {
            svg = argv[++i];
        } else if (!strcmp(argv[i], "--top") && i + 1 < argc) {
            char *end;
            top = strtol(argv[++i], &end, 10);
            if (*end || top < 0 || top > MP_TOP_MAX) {
                fprintf(stderr, "memprof: --top wants a count from 0 to %d, not '%s'\n", MP_TOP_MAX, argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "memprof: unknown option '%s' (or it lacks its value)\n\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (path) {
            fprintf(stderr, "memprof: one trace at a time ('%s' and '%s' given)\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    mp_trace t;
    mp_read(path, &t);
    if (t.status != FERRY_OK)
        fprintf(stderr, "memprof: %s\n", t.error);
    mp_report r;
    if (mp_analyze(&t, (size_t)top, TIMELINE_COLUMNS, &r) != FERRY_OK) {
        fprintf(stderr, "memprof: %s\n", ferry_last_error());
        mp_trace_free(&t);
        return 1;
    }
    int rc = t.status == FERRY_OK ? 0 : 1;
    if (json)
        print_json(stdout, path, &t, &r);
    else
        print_text(stdout, path, &r);
    if (svg) {
        char title[600];
        snprintf(title, sizeof title, "memory over time: %s%s", path, t.status == FERRY_OK ? "" : " (damaged: partial)");
        if (mp_write_svg(&r, svg, title) != FERRY_OK) {
            fprintf(stderr, "memprof: %s\n", ferry_last_error());
            rc = 1;
        }
    }
    mp_report_free(&r);
    mp_trace_free(&t);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "dump"))
        return cmd_dump(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "report"))
        return cmd_report(argc - 1, argv + 1);
    return cmd_report(argc, argv);
}
