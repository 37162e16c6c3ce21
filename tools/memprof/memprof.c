/* memprof: reads a ferry memory trace and says where the memory went and
 * whether the run kept the device's memory plan, or predicts it before a run.
 *   memprof [report] [--json] [--svg FILE] [--top N] [--check-plan] TRACE
 *   memprof dump TRACE          (the records as JSON Lines)
 *   memprof plan [options]      (predicted peaks of a GPT-2 run: models/gpt2_plan.h)
 * Subcommands are dispatched from main(); their options are parsed in
 * mp_args.c. A damaged trace still gets the figures of what could be read,
 * with the problem on stderr and exit status 1; a file that is not a trace
 * (missing, a folder, a cut header) gets only the problem. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "common/units.h"
#include "tools/memprof/memprof.h"
#include "train/flag_words.h"
#include "models/gpt2_plan.h"

#define TIMELINE_COLUMNS 600

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

static void print_text(FILE *f, const char *path, const mp_trace *t, const mp_report *r)
{
    fprintf(f, "trace %s: %zu records over %.3f ms, %zu phase markers%s%s\n", path, r->records,
            (double)r->t_end / 1e6, r->nmarks,
            t->checksummed ? "" : " (an older trace without checksums: damage inside a record may go unseen)",
            t->version >= 2 ? ""
                            : " (a version-1 trace, without an end record: a cut between two records goes unseen)");
    for (int p = 0; p < MP_POOLS; p++)
        if (p != TRACE_POOL_DISK || r->pool[p].seen) /* the disk only in runs with the NVMe tier */
            print_pool(f, r, p);
    if (r->ntimings) {
        /* The key column is as wide as the widest key, so the figures line up. */
        int width = 20;
        for (size_t i = 0; i < r->ntimings; i++) {
            int n = (int)strnlen(r->timings[i].key, TRACE_NAME_MAX);
            width = n > width ? n : width;
        }
        fprintf(f, "timings (ms):%*s %10s %10s %8s\n", width - 11, "", "mean", "max", "records");
        for (size_t i = 0; i < r->ntimings; i++) {
            const mp_timing *t = &r->timings[i];
            fprintf(f, "  %-*.*s %10.3f %10.3f %8llu\n", width, (int)TRACE_NAME_MAX, t->key,
                    t->sum / (double)t->count, t->max, (unsigned long long)t->count);
        }
    }
}

static void print_plan(FILE *f, const mp_plan *p, bool partial)
{
    char a[32], b[32], c[32];
    if (!p->present) {
        fprintf(f, "plan: none in this trace (%s)\n", p->absent);
        return;
    }
    fprintf(f, "plan: a region of %s at 0x%llx, %zu buffers", fmt(a, p->region_bytes), (unsigned long long)p->base,
            p->nbuf);
    if (p->slots)
        fprintf(f, ", %zu of them params mode's slots (%zu stays of groups in them)", p->slots, p->nocc);
    if (p->ranges)
        fprintf(f, ", %zu the range%s the embedder's allocations fill", p->ranges, p->ranges == 1 ? "" : "s");
    fputc('\n', f);
    bool kept = p->device_peak == p->region_bytes + p->dynamic_peak;
    fprintf(f, "  device peak %s (%llu bytes) %s the region %s + the dynamic heap's peak %s\n",
            fmt(a, p->device_peak), (unsigned long long)p->device_peak, kept ? "=" : "is not", fmt(b, p->region_bytes),
            fmt(c, p->dynamic_peak));
    if (!p->mismatches) {
        fprintf(f, "  the run kept its plan: every allocation in the region at its planned offset, size and category, "
                   "none overlapping another alive, each slot held by one group at a time%s\n",
                partial ? " (in the records read)" : "");
        return;
    }
    fprintf(f, "  %zu mismatch%s with the plan%s:\n", p->mismatches, p->mismatches == 1 ? "" : "es",
            partial ? " (in the records read)" : "");
    for (size_t i = 0; i < p->mismatches && i < MP_PLAN_SAID; i++)
        fprintf(f, "    %s\n", p->said[i]);
    if (p->mismatches > MP_PLAN_SAID)
        fprintf(f, "    ... and %zu more\n", p->mismatches - MP_PLAN_SAID);
}

static cJSON *plan_json(const mp_plan *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "present", p->present);
    if (!p->present) {
        cJSON_AddStringToObject(o, "absent", p->absent);
        cJSON_AddNullToObject(o, "kept");
        return o;
    }
    char base[24];
    snprintf(base, sizeof base, "0x%llx", (unsigned long long)p->base);
    cJSON_AddNullToObject(o, "absent");
    cJSON_AddBoolToObject(o, "kept", p->mismatches == 0);
    cJSON_AddStringToObject(o, "base", base);
    cJSON_AddNumberToObject(o, "region_bytes", (double)p->region_bytes);
    cJSON_AddNumberToObject(o, "buffers", (double)p->nbuf);
    cJSON_AddNumberToObject(o, "slots", (double)p->slots);
    cJSON_AddNumberToObject(o, "ranges", (double)p->ranges);
    cJSON_AddNumberToObject(o, "occupancies", (double)p->nocc);
    cJSON_AddNumberToObject(o, "device_peak_bytes", (double)p->device_peak);
    cJSON_AddNumberToObject(o, "dynamic_peak_bytes", (double)p->dynamic_peak);
    cJSON_AddNumberToObject(o, "region_peak_bytes", (double)p->region_peak);
    cJSON_AddNumberToObject(o, "mismatch_count", (double)p->mismatches);
    cJSON *m = cJSON_AddArrayToObject(o, "mismatches");
    for (size_t i = 0; i < p->mismatches && i < MP_PLAN_SAID; i++)
        cJSON_AddItemToArray(m, cJSON_CreateString(p->said[i]));
    return o;
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

static void print_json(FILE *f, const char *path, const mp_trace *t, const mp_report *r, const mp_plan *plan)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "trace", path);
    cJSON_AddBoolToObject(o, "complete", t->status == FERRY_OK);
    cJSON_AddBoolToObject(o, "checksummed", t->checksummed);
    cJSON_AddNumberToObject(o, "format_version", t->version);
    cJSON_AddBoolToObject(o, "ended", t->ended);
    if (t->status == FERRY_OK)
        cJSON_AddNullToObject(o, "error");
    else
        cJSON_AddStringToObject(o, "error", t->error);
    cJSON_AddNumberToObject(o, "records", (double)r->records);
    cJSON_AddNumberToObject(o, "duration_ms", (double)r->t_end / 1e6);
    for (int p = 0; p < MP_POOLS; p++)
        cJSON_AddItemToObject(o, mp_pool_name(p), pool_json(&r->pool[p]));
    cJSON_AddItemToObject(o, "plan", plan_json(plan));
    cJSON *tm = cJSON_AddObjectToObject(o, "timings_ms");
    for (size_t i = 0; i < r->ntimings; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "count", (double)r->timings[i].count);
        cJSON_AddNumberToObject(e, "mean", r->timings[i].sum / (double)r->timings[i].count);
        cJSON_AddNumberToObject(e, "max", r->timings[i].max);
        cJSON_AddItemToObject(tm, r->timings[i].key, e);
    }
    char *s = cJSON_Print(o);
    if (s && fprintf(f, "%s\n", s) < 0)
        fileio_note_stdout_error();
    cJSON_free(s);
    cJSON_Delete(o);
}

static const char *const kind_name[] = {"?", "alloc", "free", "phase", "timing", "limit", "reserve", "end",
                                        "region", "planned", "occupy", "vacate"};
_Static_assert(sizeof kind_name / sizeof kind_name[0] == TRACE_VACATE + 1, "a name per record kind");
static const char *const role_name[TRACE_ROLES] = {"buffer", "weights slot", "grads slot", "embedder range"};

/* The fields of a record of the plan (version 3), into a dump line. */
static void dump_plan_record(cJSON *o, const trace_record *r)
{
    char addr[24];
    snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)r->addr);
    if (r->kind == TRACE_REGION) {
        cJSON_AddStringToObject(o, "base", addr);
        return;
    }
    cJSON_AddStringToObject(o, "category", ferry_mem_category_name((ferry_mem_category)r->category));
    cJSON_AddStringToObject(o, "name", r->name);
    if (r->kind == TRACE_PLANNED) {
        cJSON_AddNumberToObject(o, "offset", (double)r->addr);
        cJSON_AddStringToObject(o, "role", role_name[r->role]);
        cJSON_AddNumberToObject(o, "start", (double)r->step);
        if (r->value == TRACE_FOREVER)
            cJSON_AddNullToObject(o, "end");
        else
            cJSON_AddNumberToObject(o, "end", r->value);
        return;
    }
    cJSON_AddNumberToObject(o, "group", (double)r->step);
    cJSON_AddStringToObject(o, "addr", addr);
}

static int cmd_dump(int argc, char **argv)
{
    const char *path;
    int rc = mp_parse_dump_args(argc, argv, &path);
    if (rc)
        return rc == 1 ? 0 : 2;
    mp_trace t;
    mp_read(path, &t);
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
        if (r->kind >= TRACE_REGION)
            dump_plan_record(o, r);
        char *s = cJSON_PrintUnformatted(o);
        if (s && printf("%s\n", s) < 0)
            fileio_note_stdout_error();
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
    mp_report_args a;
    int rc = mp_parse_report_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : 2;
    /* The picture's path is checked before any work: a refused one (a
     * FIFO, a folder, a link to nothing) ends the run with nothing printed. */
    if (a.svg && fileio_check_output(a.svg, "--svg") != FERRY_OK) {
        fprintf(stderr, "memprof: %s\n", ferry_last_error());
        return 2;
    }
    mp_trace t;
    mp_read(a.path, &t);
    if (t.status != FERRY_OK)
        fprintf(stderr, "memprof: %s\n", t.error);
    if (!t.header_ok && !a.json) { /* not a trace: no figures (--json still says why, for scripts) */
        mp_trace_free(&t);
        return 1;
    }
    mp_report r;
    mp_plan plan;
    if (mp_analyze(&t, (size_t)a.top, TIMELINE_COLUMNS, &r) != FERRY_OK) {
        fprintf(stderr, "memprof: %s\n", ferry_last_error());
        mp_trace_free(&t);
        return 1;
    }
    if (mp_plan_check(&t, &plan) != FERRY_OK) {
        fprintf(stderr, "memprof: %s\n", ferry_last_error());
        mp_report_free(&r);
        mp_trace_free(&t);
        return 1;
    }
    rc = t.status == FERRY_OK ? 0 : 1;
    if (a.json) {
        print_json(stdout, a.path, &t, &r, &plan);
    } else {
        print_text(stdout, a.path, &t, &r);
        print_plan(stdout, &plan, t.status != FERRY_OK);
    }
    /* --check-plan: a run that strayed from its plan is exit 3 (a damaged trace stays 1) */
    if (a.check_plan && plan.mismatches && rc == 0)
        rc = 3;
    if (a.svg && t.header_ok) {
        char title[600];
        snprintf(title, sizeof title, "memory over time: %s%s", a.path,
                 t.status == FERRY_OK ? "" : " (damaged: partial)");
        mp_report zoom;
        const mp_report *pic = &r;
        ferry_status st = FERRY_OK;
        if (a.step >= 0) { /* one step: its window of the timeline */
            uint64_t t0 = 0, t1 = 0;
            st = mp_step_window(&t, a.step, &t0, &t1);
            if (st == FERRY_OK)
                st = mp_analyze_window(&t, 0, TIMELINE_COLUMNS, t0, t1, &zoom);
            if (st == FERRY_OK) {
                pic = &zoom;
                snprintf(title, sizeof title, "memory within step %lld (%.3f to %.3f s into the run): %s%s", a.step,
                         (double)t0 / 1e9, (double)t1 / 1e9, a.path, t.status == FERRY_OK ? "" : " (damaged: partial)");
            }
        }
        if (st == FERRY_OK)
            st = mp_write_svg(pic, &plan, a.svg, title);
        if (st != FERRY_OK) {
            fprintf(stderr, "memprof: %s\n", ferry_last_error());
            rc = rc ? rc : st == FERRY_ERR_INVALID_ARGUMENT ? 2 : 1;
        }
        if (pic == &zoom)
            mp_report_free(&zoom);
    }
    mp_plan_free(&plan);
    mp_report_free(&r);
    mp_trace_free(&t);
    return rc;
}

/* ---- memprof plan ---- */

static const char *const plan_cats[] = {"params", "grads", "optimizer", "activations", "staging", "workspace",
                                        "other", "nvme_window"};
_Static_assert(sizeof plan_cats / sizeof plan_cats[0] == FERRY_MEM_CATEGORY_COUNT, "a JSON name per category");

/* The largest dN that fits the budgets given (layers 0: none given, or none fits). */
typedef struct plan_largest {
    bool asked;
    int layers;
    gpt2_plan plan;
} plan_largest;

static bool plan_disk(const mp_plan_args *a)
{
    return a->offload == FERRY_OFFLOAD_NVME || (a->offload == FERRY_OFFLOAD_PARAMS && a->nvme_path);
}

static void plan_print_text(const mp_plan_args *a, const gpt2_config *c, const gpt2_plan *p, int max_b,
                            const plan_largest *big)
{
    char x[32], y[32], z[32];
    if (a->llama)
        printf("model: %s (%s), %d layers, %d heads (%d key/value), %d wide, vocab %d (padded %d), context %d: "
               "%.1fM parameters\n",
               a->model, a->llama_cfg.model_type, c->n_layer, c->n_head, a->llama_cfg.n_kv_head, c->n_embd,
               c->vocab_size, c->padded_vocab_size, c->max_seq_len, (double)p->num_params / 1e6);
    else
        printf("model: %d layers, %d heads, %d wide, vocab %d (padded %d), context %d: %.1fM parameters\n",
               c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->padded_vocab_size, c->max_seq_len,
               (double)p->num_params / 1e6);
    bool f16 = p->act_size == 2 && a->dtype == FERRY_DTYPE_F16;
    if (a->auto_asked)
        printf("auto: %s\n", a->auto_reason);
    printf("run: batch %d x seq %d, offload %s, %s backend (%s on the device%s), recompute %s", a->batch, a->seq,
           ferry_offload_name(a->offload), ferry_backend_name(a->backend),
           p->act_size == 4 ? "fp32" : f16 ? "f16" : "bf16", f16 ? ", dynamic loss scaling" : "",
           a->recompute ? "on" : "off");
    if (a->offload == FERRY_OFFLOAD_PARAMS)
        printf(", prefetch %d", a->prefetch);
    if (a->ranks > 1)
        printf("\nranks: %d (data parallel); the figures below are each rank's (rank 0's, the largest), the\n"
               "  batch is per rank: %d x %d sequences per step across the ranks",
               a->ranks, a->batch * a->grad_accum * a->ranks, a->seq);
    printf("\ndevice peak (predicted): %s\n", units_fmt_bytes(x, sizeof x, p->device_total));
    for (int k = 0; k < FERRY_MEM_CATEGORY_COUNT; k++)
        if (p->device_bytes[k])
            printf("    %-12s %12s %6.1f%%\n", plan_cats[k], units_fmt_bytes(x, sizeof x, p->device_bytes[k]),
                   100.0 * (double)p->device_bytes[k] / (double)p->device_total);
    if (a->offload == FERRY_OFFLOAD_PARAMS)
        printf("  weights of %d of %d groups and gradients of %d at the peak (a bound; with --gpu-mem the\n"
               "  weights kept on the device fill the budget); under a smaller budget the engine skips\n"
               "  prefetches and waits for drains, down to a floor of %s\n",
               p->device_weight_groups, p->groups, p->device_grad_groups,
               units_fmt_bytes(y, sizeof y, p->device_min_bytes));
    printf("host pinned pool (predicted): %s\n", units_fmt_bytes(x, sizeof x, p->host_total));
    for (int k = 0; k < FERRY_MEM_CATEGORY_COUNT; k++)
        if (p->host_bytes[k])
            printf("    %-12s %12s %6.1f%%\n", plan_cats[k], units_fmt_bytes(x, sizeof x, p->host_bytes[k]),
                   100.0 * (double)p->host_bytes[k] / (double)p->host_total);
    if (plan_disk(a))
        printf("disk (predicted): %s, the NVMe tier's file: Adam moments%s, streamed through the %s nvme window "
               "above\n",
               units_fmt_bytes(x, sizeof x, p->disk_bytes), a->nvme_master ? " and fp32 master weights" : "",
               units_fmt_bytes(y, sizeof y, p->host_bytes[FERRY_MEM_NVME]));
    if (a->gpu_mem) {
        bool fits = p->device_total <= a->gpu_mem;
        if (a->card) {
            char r[32];
            printf("--card %s less %s for the CUDA context and libraries (--card-reserve): ",
                   units_fmt_bytes(y, sizeof y, a->card), units_fmt_bytes(r, sizeof r, a->card_reserve));
        }
        printf("--gpu-mem %s: %s (%.1f%% of it)", units_fmt_bytes(x, sizeof x, a->gpu_mem),
               fits ? "fits" : "does not fit", 100.0 * (double)p->device_total / (double)a->gpu_mem);
        if (max_b > 0)
            printf("; largest batch that fits: %d%s\n", max_b,
                   a->auto_asked ? " (across modes, with recompute if need be)" : "");
        else
            printf("; largest batch that fits: none (not even batch 1 at seq %d)\n", a->seq);
    }
    if (a->host_mem)
        printf("--host-mem %s: %s (%.1f%% of it)\n", units_fmt_bytes(x, sizeof x, a->host_mem),
               p->host_total <= a->host_mem ? "fits" : "does not fit",
               100.0 * (double)p->host_total / (double)a->host_mem);
    if (a->disk)
        printf("--disk %s: %s (%.1f%% of it)\n", units_fmt_bytes(x, sizeof x, a->disk),
               p->disk_bytes <= a->disk ? "fits" : "does not fit", 100.0 * (double)p->disk_bytes / (double)a->disk);
    if (big->asked && big->layers > 0)
        printf("largest GPT-2-shaped model that fits: d%d (%d layers, %d heads, %d wide): %.2fB parameters "
               "(device %s, host %s%s%s)\n",
               big->layers, big->layers, big->layers, 64 * big->layers, (double)big->plan.num_params / 1e9,
               units_fmt_bytes(x, sizeof x, big->plan.device_total), units_fmt_bytes(y, sizeof y, big->plan.host_total),
               plan_disk(a) ? ", disk " : "", plan_disk(a) ? units_fmt_bytes(z, sizeof z, big->plan.disk_bytes) : "");
    else if (big->asked)
        printf("largest GPT-2-shaped model that fits: none (not even d1)\n");
}

static cJSON *plan_pool_json(const uint64_t *by, uint64_t total)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total_bytes", (double)total);
    cJSON *c = cJSON_AddObjectToObject(o, "by_category");
    for (int k = 0; k < FERRY_MEM_CATEGORY_COUNT; k++)
        cJSON_AddNumberToObject(c, plan_cats[k], (double)by[k]);
    return o;
}

/* The plan's device layout, when --layout asks for it. */
typedef struct plan_layout {
    engine_layout_entry *e;
    int n;
    uint64_t region;
} plan_layout;

static const char *lifetime_words(const engine_layout_entry *x, char *buf, size_t cap)
{
    if (x->start == 0 && x->end == INT32_MAX)
        snprintf(buf, cap, "the whole run");
    else
        snprintf(buf, cap, "positions %d..%d", (int)x->start, (int)x->end - 1);
    return buf;
}

static void layout_print_text(const plan_layout *l)
{
    char b[32], o[32], life[48];
    printf("\nthe device's layout: %d buffers in a planned region of %s (offset, size, category, lifetime, name)\n",
           l->n, units_fmt_bytes(b, sizeof b, l->region));
    for (int i = 0; i < l->n; i++) {
        const engine_layout_entry *x = &l->e[i];
        printf("  %14llu  %-10s  %-11s  %-15s  %s\n", (unsigned long long)x->offset,
               units_fmt_bytes(o, sizeof o, x->bytes), ferry_mem_category_name(x->cat),
               lifetime_words(x, life, sizeof life), x->name);
    }
}

static cJSON *layout_json(const plan_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "region_bytes", (double)l->region);
    cJSON *arr = cJSON_AddArrayToObject(o, "buffers");
    for (int i = 0; i < l->n; i++) {
        const engine_layout_entry *x = &l->e[i];
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "name", x->name);
        cJSON_AddStringToObject(b, "category", ferry_mem_category_name(x->cat));
        cJSON_AddNumberToObject(b, "offset", (double)x->offset);
        cJSON_AddNumberToObject(b, "bytes", (double)x->bytes);
        cJSON_AddNumberToObject(b, "start", x->start);
        if (x->end == INT32_MAX)
            cJSON_AddNullToObject(b, "end");
        else
            cJSON_AddNumberToObject(b, "end", x->end);
        cJSON_AddItemToArray(arr, b);
    }
    return o;
}

/* --layout-svg: the picture, titled with the run it is the plan of; 0, or
 * 1 with the reason on stderr. */
static int plan_draw_layout(const mp_plan_args *a, const gpt2_config *c, const gpt2_plan *p, const plan_layout *l)
{
    char title[256], card[32] = "";
    if (a->card)
        snprintf(card, sizeof card, ", a %.0f GiB card", (double)a->card / 1073741824.0);
    snprintf(title, sizeof title, "%d layers x %d wide (%.1fM parameters): batch %d x seq %d, offload %s%s, %s%s",
             c->n_layer, c->n_embd, (double)p->num_params / 1e6, a->batch, a->seq,
             ferry_offload_name(a->offload), a->recompute ? ", recompute" : "", ferry_backend_name(a->backend), card);
    ferry_status st = mp_write_layout_svg(a->layout_svg, l->e, l->n, l->region, a->gpu_mem, a->card, title);
    if (st != FERRY_OK) {
        fprintf(stderr, "memprof plan: %s\n", train_last_error());
        return 1;
    }
    if (!a->json)
        printf("the device's layout drawn in %s\n", a->layout_svg);
    return 0;
}

static void plan_print_json(const mp_plan_args *a, const gpt2_config *c, const gpt2_plan *p, int max_b,
                            const plan_largest *big, const plan_layout *layout)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddStringToObject(m, "family", a->llama ? a->llama_cfg.model_type : "gpt2");
    if (a->llama)
        cJSON_AddNumberToObject(m, "kv_heads", a->llama_cfg.n_kv_head);
    cJSON_AddNumberToObject(m, "layers", c->n_layer);
    cJSON_AddNumberToObject(m, "heads", c->n_head);
    cJSON_AddNumberToObject(m, "width", c->n_embd);
    cJSON_AddNumberToObject(m, "vocab", c->vocab_size);
    cJSON_AddNumberToObject(m, "padded_vocab", c->padded_vocab_size);
    cJSON_AddNumberToObject(m, "context", c->max_seq_len);
    cJSON_AddNumberToObject(m, "parameters", (double)p->num_params);
    cJSON_AddNumberToObject(o, "batch", a->batch);
    cJSON_AddNumberToObject(o, "seq", a->seq);
    cJSON_AddStringToObject(o, "offload", ferry_offload_name(a->offload));
    if (a->auto_asked) {
        cJSON *au = cJSON_AddObjectToObject(o, "auto");
        cJSON_AddStringToObject(au, "chose", ferry_offload_name(a->offload));
        cJSON_AddBoolToObject(au, "disk", plan_disk(a));
        cJSON_AddBoolToObject(au, "recompute", a->recompute);
        cJSON_AddStringToObject(au, "reason", a->auto_reason);
    } else {
        cJSON_AddNullToObject(o, "auto");
    }
    cJSON_AddStringToObject(o, "backend", ferry_backend_name(a->backend));
    cJSON_AddBoolToObject(o, "recompute", a->recompute);
    cJSON_AddNumberToObject(o, "prefetch", a->prefetch);
    cJSON_AddNumberToObject(o, "ranks", a->ranks);
    cJSON *d = plan_pool_json(p->device_bytes, p->device_total);
    cJSON_AddNumberToObject(d, "min_bytes", (double)p->device_min_bytes);
    cJSON_AddNumberToObject(d, "weight_groups", p->device_weight_groups);
    cJSON_AddNumberToObject(d, "grad_groups", p->device_grad_groups);
    cJSON_AddItemToObject(o, "device", d);
    cJSON_AddItemToObject(o, "host", plan_pool_json(p->host_bytes, p->host_total));
    if (a->card) {
        cJSON_AddNumberToObject(o, "card_bytes", (double)a->card);
        cJSON_AddNumberToObject(o, "card_reserve_bytes", (double)a->card_reserve);
    } else {
        cJSON_AddNullToObject(o, "card_bytes");
        cJSON_AddNullToObject(o, "card_reserve_bytes");
    }
    if (a->gpu_mem) {
        cJSON_AddNumberToObject(o, "gpu_mem_bytes", (double)a->gpu_mem);
        cJSON_AddBoolToObject(o, "fits", p->device_total <= a->gpu_mem);
        cJSON_AddNumberToObject(o, "max_batch", max_b);
    } else {
        cJSON_AddNullToObject(o, "gpu_mem_bytes");
        cJSON_AddNullToObject(o, "fits");
        cJSON_AddNullToObject(o, "max_batch");
    }
    if (a->host_mem) {
        cJSON_AddNumberToObject(o, "host_mem_bytes", (double)a->host_mem);
        cJSON_AddBoolToObject(o, "host_fits", p->host_total <= a->host_mem);
    } else {
        cJSON_AddNullToObject(o, "host_mem_bytes");
        cJSON_AddNullToObject(o, "host_fits");
    }
    if (plan_disk(a)) {
        cJSON *k = cJSON_AddObjectToObject(o, "disk");
        cJSON_AddNumberToObject(k, "total_bytes", (double)p->disk_bytes);
        cJSON_AddNumberToObject(k, "window_bytes", (double)p->host_bytes[FERRY_MEM_NVME]);
        cJSON_AddBoolToObject(k, "master_weights", a->nvme_master);
    } else {
        cJSON_AddNullToObject(o, "disk");
    }
    if (a->disk) {
        cJSON_AddNumberToObject(o, "disk_bytes", (double)a->disk);
        cJSON_AddBoolToObject(o, "disk_fits", p->disk_bytes <= a->disk);
    } else {
        cJSON_AddNullToObject(o, "disk_bytes");
        cJSON_AddNullToObject(o, "disk_fits");
    }
    if (big->asked && big->layers > 0) {
        cJSON *l = cJSON_AddObjectToObject(o, "largest_model");
        cJSON_AddStringToObject(l, "family", "dN: N layers, N heads, 64N wide");
        cJSON_AddNumberToObject(l, "layers", big->layers);
        cJSON_AddNumberToObject(l, "heads", big->layers);
        cJSON_AddNumberToObject(l, "width", 64 * big->layers);
        cJSON_AddNumberToObject(l, "parameters", (double)big->plan.num_params);
        cJSON_AddNumberToObject(l, "device_bytes", (double)big->plan.device_total);
        cJSON_AddNumberToObject(l, "host_bytes", (double)big->plan.host_total);
        cJSON_AddNumberToObject(l, "disk_bytes", (double)big->plan.disk_bytes);
    } else {
        cJSON_AddNullToObject(o, "largest_model");
    }
    if (layout->e)
        cJSON_AddItemToObject(o, "layout", layout_json(layout));
    char *s = cJSON_Print(o);
    if (s && printf("%s\n", s) < 0)
        fileio_note_stdout_error();
    cJSON_free(s);
    cJSON_Delete(o);
}

/* --offload auto: the mode (and recompute) the engine would choose, and
 * the largest batch across modes; then a plan as for that mode. 0, or the
 * exit status. */
static int plan_auto(mp_plan_args *a, const gpt2_config *c, int *max_b)
{
    if (!a->gpu_mem) {
        fprintf(stderr, "memprof plan: --offload auto chooses for a device budget; give --gpu-mem or --card\n");
        return 2;
    }
    gpt2_plan_request rq = {.cfg = c, .llama = a->llama ? &a->llama_cfg : NULL, .batch = a->batch, .seq = a->seq,
                            .offload = FERRY_OFFLOAD_AUTO,
                            .recompute = a->recompute, .prefetch_groups = a->prefetch, .micro_batches = a->grad_accum,
                            .backend = a->backend, .dtype = a->dtype, .ranks = a->ranks, .device_budget = a->gpu_mem,
                            .upload_window = a->upload_window, .upload_window_chunk_bytes = a->upload_window_chunk_bytes};
    gpt2_plan_disk tier = {a->nvme_master, a->nvme_window, a->nvme_block};
    gpt2_plan_auto_result r;
    ferry_status st = gpt2_plan_auto_max_batch(&rq, a->nvme_path ? &tier : NULL, a->gpu_mem, a->host_mem, max_b, NULL);
    if (st == FERRY_OK)
        st = gpt2_plan_auto(&rq, a->nvme_path ? &tier : NULL, a->gpu_mem, a->host_mem, &r);
    if (st != FERRY_OK && st != FERRY_ERR_OUT_OF_MEMORY) {
        fprintf(stderr, "memprof plan: %s\n", train_last_error());
        return st == FERRY_ERR_INVALID_ARGUMENT ? 2 : 1;
    }
    if (st != FERRY_OK) {
        /* Nothing fits this batch, recompute tried too (auto tries it last):
         * the advice leaves recompute out, and says which batch does fit. */
        train_situation tried = {FERRY_OFFLOAD_AUTO, true, false, a->ranks, *max_b > 0 ? a->batch : 1};
        char why[2048];
        snprintf(why, sizeof why, "%s", train_last_error_in(&tried));
        if (*max_b >= a->batch) /* what fits the device alone, short elsewhere at every batch */
            fprintf(stderr, "memprof plan: batch %d x %d does not fit in any mode: %s\n", a->batch, a->seq, why);
        else if (*max_b > 0)
            fprintf(stderr, "memprof plan: batch %d x %d does not fit in any mode: %s; batch %d does (the largest "
                            "that fits, in some mode, with recompute if need be): give --batch %d\n",
                    a->batch, a->seq, why, *max_b, *max_b);
        else
            fprintf(stderr, "memprof plan: not even batch 1 x %d fits in any mode: %s\n", a->seq, why);
        return 1;
    }
    a->auto_asked = true;
    snprintf(a->auto_reason, sizeof a->auto_reason, "%s", r.reason);
    a->offload = r.offload;
    a->recompute = r.recompute;
    if (r.offload != FERRY_OFFLOAD_NVME && !r.disk) { /* the folder was only in case */
        a->nvme_path = NULL;
        a->disk = 0;
    }
    return 0;
}

static int cmd_plan(int argc, char **argv)
{
    mp_plan_args a;
    gpt2_config c;
    int rc = mp_parse_plan_args(argc, argv, &a, &c);
    if (rc)
        return rc == 1 ? 0 : 2;
    gpt2_plan p;
    int max_b = 0;
    if (a.offload == FERRY_OFFLOAD_AUTO && (rc = plan_auto(&a, &c, &max_b)) != 0)
        return rc;
    gpt2_plan_request rq = {.cfg = &c, .llama = a.llama ? &a.llama_cfg : NULL, .batch = a.batch, .seq = a.seq,
                            .offload = a.offload, .recompute = a.recompute,
                            .prefetch_groups = a.prefetch, .micro_batches = a.grad_accum, .backend = a.backend,
                            .dtype = a.dtype, .ranks = a.ranks, .device_budget = a.gpu_mem,
                            .moments = a.moments, .upload_window = a.upload_window,
                            .upload_window_chunk_bytes = a.upload_window_chunk_bytes};
    gpt2_plan_disk tier = {a.nvme_master, a.nvme_window, a.nvme_block}, *disk = plan_disk(&a) ? &tier : NULL;
    plan_largest big;
    memset(&big, 0, sizeof big);
    big.asked = !a.llama && (a.gpu_mem || a.host_mem || a.disk); /* the dN search is GPT-2's */
    ferry_status st = gpt2_plan_predict_disk(&rq, disk, &p);
    if (st == FERRY_OK && a.gpu_mem && !a.auto_asked)
        st = gpt2_plan_max_batch(&rq, a.gpu_mem, &max_b);
    if (st == FERRY_OK && big.asked)
        st = gpt2_plan_largest_model(&rq, disk, a.gpu_mem, a.host_mem, a.disk, &big.layers, &big.plan);
    plan_layout layout = {0};
    if (st == FERRY_OK && a.layout_svg)
        st = fileio_check_output(a.layout_svg, "--layout-svg");
    if (st == FERRY_OK && (a.layout || a.layout_svg))
        st = gpt2_plan_layout(&rq, disk, &layout.e, &layout.n, &layout.region);
    if (st != FERRY_OK) {
        fprintf(stderr, "memprof plan: %s\n", train_last_error());
        return st == FERRY_ERR_INVALID_ARGUMENT ? 2 : 1;
    }
    if (a.json) {
        plan_print_json(&a, &c, &p, max_b, &big, &layout);
    } else {
        plan_print_text(&a, &c, &p, max_b, &big);
        if (layout.e && a.layout)
            layout_print_text(&layout);
    }
    if (a.layout_svg && (rc = plan_draw_layout(&a, &c, &p, &layout)) != 0) {
        free(layout.e);
        return rc;
    }
    free(layout.e);
    bool fits = (!a.gpu_mem || p.device_total <= a.gpu_mem) && (!a.host_mem || p.host_total <= a.host_mem) &&
                (!a.disk || p.disk_bytes <= a.disk);
    return fits ? 0 : 1;
}

int main(int argc, char **argv)
{
    fileio_check_stdout_at_exit("memprof"); /* a full disk or /dev/full on stdout is exit 1 */
    if (argc >= 2 && !strcmp(argv[1], "plan"))
        return cmd_plan(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "dump"))
        return cmd_dump(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "report"))
        return cmd_report(argc - 1, argv + 1);
    return cmd_report(argc, argv);
}
