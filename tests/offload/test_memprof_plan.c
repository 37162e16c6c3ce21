/* Tests of memprof's check of a trace against the device's memory plan it
 * carries, and of the address-space panel (tools/memprof/mp_plan.c and
 * mp_svg.c, linked in; the program for --check-plan's exit status and the
 * report): a scripted run written through the trace writer, with a plan
 * laid out by hand below (two scratch buffers sharing an offset at
 * different schedule positions, three slots, the embedder's range, twenty
 * thin buffers of two categories in turn), is kept, every figure equal to the hand-computed one; each
 * fault planted in it (a buffer moved by 256 bytes, its size or category
 * changed, two groups in one slot, a slot given back by a group that does
 * not hold it, a slot too small for its group or none where a group goes,
 * two planned buffers overlapping while both alive, a buffer never placed,
 * an allocation of the embedder outside its range, a range left half
 * empty) is found and named with the planned and the traced values; traces
 * without a plan pass, saying why; the panel has a rectangle for every
 * planned buffer (the thin ones drawn as one, counted, striped in their
 * categories' colours), every slot, every
 * stay of a group and the dynamic heap's allocation, at their offsets.
 * argv[1]: the memprof program; argv[2]: a Python for the XML check. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "offload/trace.h"
#include "run_program.h"
#include "tap.h"
#include "tools/memprof/memprof.h"

#define RB 0x10000000ull  /* the region's base */
#define DYN 0x20000000ull /* the dynamic heap's one allocation */
#define FOREVER INT32_MAX
enum { THIN = 20 };

static const char *memprof, *python;
static char dir[] = "/tmp/ferry_memprof_plan_XXXXXX";

/* The plan, by hand: offsets are the sums of the sizes before them. */
typedef struct planned_row {
    const char *name;
    ferry_mem_category cat;
    uint64_t off, bytes;
    int32_t start, end;
    trace_plan_role role;
} planned_row;

static const planned_row plan[] = {
    {"workspace", FERRY_MEM_WORKSPACE, 0, 4096, 0, FOREVER, TRACE_ROLE_BUFFER},
    {"wte weights", FERRY_MEM_PARAMS, 4096, 8192, 0, FOREVER, TRACE_ROLE_BUFFER},
    {"scratch a", FERRY_MEM_ACTIVATIONS, 12288, 2048, 0, 2, TRACE_ROLE_BUFFER},
    {"scratch b", FERRY_MEM_ACTIVATIONS, 12288, 2048, 2, 4, TRACE_ROLE_BUFFER}, /* scratch a's place, later */
    {"weights slot 0", FERRY_MEM_PARAMS, 14336, 4096, 0, FOREVER, TRACE_ROLE_WSLOT},
    {"weights slot 1", FERRY_MEM_PARAMS, 18432, 4096, 0, FOREVER, TRACE_ROLE_WSLOT},
    {"grads slot 0", FERRY_MEM_GRADS, 22528, 4096, 0, FOREVER, TRACE_ROLE_GSLOT},
    {"the embedder's activations", FERRY_MEM_ACTIVATIONS, 26624, 8192, 0, FOREVER, TRACE_ROLE_RANGE},
};
#define NPLAN (sizeof plan / sizeof plan[0])
#define THIN_AT 34816ull                 /* THIN buffers of 256 bytes from here */
#define REGION (THIN_AT + THIN * 256ull) /* 39936 */
/* At the peak every planned buffer is alive (scratch b in scratch a's
 * place) with the embedder's 8192 bytes, and the dynamic heap's 1024. */
#define PEAK (REGION + 1024ull)

typedef enum fault {
    KEPT,
    MOVED,           /* 'wte weights' allocated 256 bytes above its offset */
    RESIZED,         /* ... with 8448 bytes */
    RECATEGORISED,   /* 'workspace' allocated as grads */
    TWO_IN_SLOT,     /* 'block 1' in weights slot 0 while 'block 0' holds it */
    VACATE_UNHELD,   /* group 3 gives back weights slot 1, which group 2 holds */
    TOO_BIG,         /* 'block 1' puts 5000 bytes in a 4096-byte slot */
    NO_SLOT,         /* 'block 1' goes where no slot is planned */
    PLANNED_OVERLAP, /* 'scratch b' planned from position 1, while 'scratch a' lives */
    NEVER_PLACED,    /* 'workspace' never allocated */
    STRAY,           /* the embedder's 'acts 1' inside 'wte weights', not its range */
    RANGE_UNFILLED,  /* the embedder allocates half its range */
    FAULTS
} fault;

static void pause_ms(void) { usleep(2000); }

static void *at(uint64_t off) { return (void *)(uintptr_t)(RB + off); }

/* The thin buffers alternate, as a group's weights and gradients do. */
static ferry_mem_category thin_cat(int i) { return i % 2 ? FERRY_MEM_GRADS : FERRY_MEM_PARAMS; }

/* The scripted run with one fault (or none) into `path`. */
static void script(const char *path, fault f)
{
    trace *t = NULL;
    if (trace_open(path, &t) != FERRY_OK)
        return;
    trace_limit(t, TRACE_POOL_DEVICE, 48 * 1024);
    trace_phase(t, 0, "setup");
    trace_region(t, at(0), REGION);
    for (size_t i = 0; i < NPLAN; i++)
        trace_planned(t, plan[i].cat, plan[i].name, plan[i].off, plan[i].bytes,
                      f == PLANNED_OVERLAP && i == 3 ? 1 : plan[i].start, plan[i].end, plan[i].role);
    char name[16];
    for (int i = 0; i < THIN; i++) {
        snprintf(name, sizeof name, "ln %d", i);
        trace_planned(t, thin_cat(i), name, THIN_AT + 256u * i, 256, 0, FOREVER, TRACE_ROLE_BUFFER);
    }
    for (size_t i = 0; i < NPLAN; i++) {
        const planned_row *p = &plan[i];
        if (i == 3 || p->role == TRACE_ROLE_RANGE || (f == NEVER_PLACED && i == 0))
            continue; /* scratch b later; the range is the embedder's to fill */
        uint64_t off = p->off + (f == MOVED && i == 1 ? 256 : 0), bytes = p->bytes + (f == RESIZED && i == 1 ? 256 : 0);
        trace_alloc(t, TRACE_POOL_DEVICE, f == RECATEGORISED && i == 0 ? FERRY_MEM_GRADS : p->cat, p->name, bytes,
                    at(off));
    }
    for (int i = 0; i < THIN; i++) {
        snprintf(name, sizeof name, "ln %d", i);
        trace_alloc(t, TRACE_POOL_DEVICE, thin_cat(i), name, 256, at(THIN_AT + 256u * i));
    }
    pause_ms();
    trace_phase(t, 1, "forward");
    trace_alloc(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "acts 0", 4096, at(26624));
    if (f != RANGE_UNFILLED)
        trace_alloc(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "acts 1", 4096, at(f == STRAY ? 5120 : 30720));
    trace_occupy(t, FERRY_MEM_PARAMS, "block 0", 1, 3000, at(14336));
    pause_ms();
    uint64_t slot1 = f == TWO_IN_SLOT ? 14336 : f == NO_SLOT ? 4096 : 18432, bytes1 = f == TOO_BIG ? 5000 : 3000;
    trace_occupy(t, FERRY_MEM_PARAMS, "block 1", 2, bytes1, at(slot1));
    pause_ms();
    trace_phase(t, 1, "backward");
    trace_free(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "scratch a", 2048, at(12288));
    trace_alloc(t, TRACE_POOL_DEVICE, FERRY_MEM_ACTIVATIONS, "scratch b", 2048, at(12288));
    trace_occupy(t, FERRY_MEM_GRADS, "block 1", 2, 3000, at(22528));
    pause_ms();
    trace_vacate(t, FERRY_MEM_GRADS, "block 1", 2, 3000, at(22528));
    trace_occupy(t, FERRY_MEM_GRADS, "block 0", 1, 3000, at(22528));
    pause_ms();
    trace_vacate(t, FERRY_MEM_GRADS, "block 0", 1, 3000, at(22528));
    trace_alloc(t, TRACE_POOL_DEVICE, FERRY_MEM_OTHER, "user", 1024, (void *)(uintptr_t)DYN);
    pause_ms();
    trace_phase(t, 1, "optimizer");
    trace_vacate(t, FERRY_MEM_PARAMS, "block 0", 1, 3000, at(14336));
    if (f == VACATE_UNHELD)
        trace_vacate(t, FERRY_MEM_PARAMS, "block 2", 3, 3000, at(18432));
    else
        trace_vacate(t, FERRY_MEM_PARAMS, "block 1", 2, bytes1, at(slot1));
    pause_ms();
    trace_free(t, TRACE_POOL_DEVICE, FERRY_MEM_OTHER, "user", 1024, (void *)(uintptr_t)DYN);
    trace_close(t);
}

static void path_of(char *buf, size_t cap, const char *what) { snprintf(buf, cap, "%s/%s.fmt", dir, what); }

static bool read_plan(const char *path, mp_trace *t, mp_plan *p)
{
    if (mp_read(path, t) != FERRY_OK) {
        tap_diag("%s: %s", path, t->error);
        return false;
    }
    if (mp_plan_check(t, p) != FERRY_OK) {
        tap_diag("%s: %s", path, ferry_last_error());
        mp_trace_free(t);
        return false;
    }
    return true;
}

/* Whether a mismatch said contains `want`; prints them all when not. */
static bool said(const mp_plan *p, const char *want)
{
    for (size_t i = 0; i < p->mismatches && i < MP_PLAN_SAID; i++)
        if (strstr(p->said[i], want))
            return true;
    tap_diag("no mismatch says \"%s\"; the %zu said:", want, p->mismatches);
    for (size_t i = 0; i < p->mismatches && i < MP_PLAN_SAID; i++)
        tap_diag("  %s", p->said[i]);
    return false;
}

static void check_kept(void)
{
    char path[600];
    path_of(path, sizeof path, "kept");
    script(path, KEPT);
    mp_trace t;
    mp_plan p;
    if (!tap_ok(read_plan(path, &t, &p), "kept: read and checked"))
        return;
    tap_ok(p.present, "kept: the trace carries a plan");
    TAP_IS_INT(p.base, RB, "kept: the region's base");
    TAP_IS_INT(p.region_bytes, REGION, "kept: the region's bytes");
    TAP_IS_INT(p.nbuf, NPLAN + THIN, "kept: every planned buffer read");
    TAP_IS_INT(p.slots, 3, "kept: three slots");
    TAP_IS_INT(p.ranges, 1, "kept: one range of the embedder's");
    TAP_IS_INT(p.nocc, 4, "kept: four stays of groups in slots");
    TAP_IS_INT(p.device_peak, PEAK, "kept: the device peak, every planned byte and the dynamic 1024");
    TAP_IS_INT(p.dynamic_peak, 1024, "kept: the dynamic heap's peak");
    TAP_IS_INT(p.region_peak, REGION, "kept: the region wholly in use at its peak");
    TAP_IS_INT(p.nblocks, 3, "kept: two allocations of the embedder and one of the dynamic heap");
    if (!tap_ok(p.mismatches == 0, "kept: no mismatch (scratch a and b share an offset at different positions)"))
        said(&p, "(none expected)");
    bool placed = true;
    for (size_t i = 0; i < p.nbuf; i++)
        placed &= p.buf[i].role == TRACE_ROLE_RANGE ? !p.buf[i].placed : p.buf[i].placed;
    tap_ok(placed, "kept: every planned buffer but the range placed");
    const mp_occupancy *o = &p.occ[1];
    tap_ok(p.nocc == 4 && o->group == 2 && o->slot == 5 && o->bytes == 3000 && o->t1 != UINT64_MAX &&
               p.occ[0].t1 > o->t0,
           "kept: 'block 1' in weights slot 1 (planned buffer 5) from forward to the optimizer, beside 'block 0'");
    mp_plan_free(&p);
    mp_trace_free(&t);
}

static void check_faults(void)
{
    static const struct {
        fault f;
        const char *what, *want;
    } cases[] = {
        {MOVED, "a buffer moved by 256 bytes",
         "'wte weights': planned at offset 4096 (8192 bytes, params), traced at offset 4352 (8192 bytes, params)"},
        {RESIZED, "a buffer's size changed",
         "'wte weights' at offset 4096: planned with 8192 bytes of params, traced with 8448 bytes of params"},
        {RECATEGORISED, "a buffer's category changed",
         "'workspace' at offset 0: planned with 4096 bytes of workspace, traced with 4096 bytes of grads"},
        {TWO_IN_SLOT, "two groups in one slot at once",
         "'block 1' (group 2) takes slot 'weights slot 0' at offset 14336 at"},
        {VACATE_UNHELD, "a slot given back by a group not in it",
         "'block 2' (group 3) gives back the slot at 0x10004800"},
        {TOO_BIG, "a group too big for its slot", "'block 1' puts 5000 bytes in slot 'weights slot 1' at offset 18432 "
                                                  "of 4096 bytes"},
        {NO_SLOT, "a group where no slot is planned",
         "'block 1' (group 2) takes a params slot at 0x10001000 (offset 4096 of the region), where no slot is planned"},
        {PLANNED_OVERLAP, "two planned buffers overlapping while alive",
         "'scratch b' [12288, +2048) and 'scratch a' [12288, +2048) are planned to overlap while both alive "
         "(positions [1, 4) and [0, 2))"},
        {NEVER_PLACED, "a planned buffer never placed",
         "'workspace' (4096 bytes of workspace at offset 0) is planned but was never placed"},
        {STRAY, "the embedder's allocation outside its range",
         "'acts 1' (4096 bytes, activations) at offset 5120 of the region: no planned buffer starts there (the "
         "nearest below: 'wte weights')"},
        {RANGE_UNFILLED, "a range half empty: the peak is not the plan's",
         "the device peak of 36864 bytes is not the planned region's 39936 plus the dynamic heap's peak of 1024; "
         "the region held at most 35840 of its bytes at once ('the embedder's activations' held at most 4096 of "
         "its 8192)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[600], name[32];
        snprintf(name, sizeof name, "fault%zu", i);
        path_of(path, sizeof path, name);
        script(path, cases[i].f);
        mp_trace t;
        mp_plan p;
        if (!tap_ok(read_plan(path, &t, &p), "%s: read and checked", cases[i].what))
            continue;
        tap_ok(p.present && p.mismatches > 0 && said(&p, cases[i].want), "%s: found and named (%zu mismatches)",
               cases[i].what, p.mismatches);
        mp_plan_free(&p);
        mp_trace_free(&t);
    }
    /* A STRAY allocation also overlaps the buffer it landed in. */
    char path[600];
    path_of(path, sizeof path, "fault9");
    mp_trace t;
    mp_plan p;
    if (read_plan(path, &t, &p)) {
        tap_ok(said(&p, "'acts 1' [0x10001400, +4096) overlaps 'wte weights' [0x10001000, +8192), both alive"),
               "the stray allocation overlaps the live buffer it landed in: said");
        mp_plan_free(&p);
        mp_trace_free(&t);
    }
}

/* A trace whose writer planned nothing, in version 3 and as version 2. */
static void check_without_plan(void)
{
    char path[600];
    path_of(path, sizeof path, "unplanned");
    trace *w = NULL;
    if (trace_open(path, &w) != FERRY_OK)
        return;
    trace_alloc(w, TRACE_POOL_DEVICE, FERRY_MEM_PARAMS, "weights", 4096, (void *)0x1000);
    trace_free(w, TRACE_POOL_DEVICE, FERRY_MEM_PARAMS, "weights", 4096, (void *)0x1000);
    trace_close(w);
    mp_trace t;
    mp_plan p;
    if (tap_ok(read_plan(path, &t, &p), "no plan, version 3: read")) {
        tap_ok(!p.present && p.mismatches == 0 && strstr(p.absent, "planned no device buffer"),
               "no plan, version 3: none, and why (%s)", p.absent);
        mp_plan_free(&p);
        mp_trace_free(&t);
    }
    /* The same records as version 2 (it had every kind they use). */
    FILE *f = fopen(path, "r+b");
    unsigned char h[32];
    if (f && fread(h, 1, 32, f) == 32) {
        h[8] = 2;
        uint32_t crc = trace_header_crc(h);
        memcpy(h + 28, &crc, 4);
        fseek(f, 0, SEEK_SET);
        fwrite(h, 1, 32, f);
    }
    if (f)
        fclose(f);
    if (tap_ok(read_plan(path, &t, &p), "no plan, version 2: read")) {
        tap_ok(!p.present && p.mismatches == 0 && strstr(p.absent, "a version-2 trace"),
               "no plan, version 2: none, and why (%s)", p.absent);
        mp_plan_free(&p);
        mp_trace_free(&t);
    }
    /* Version 2 had no record of the plan: a REGION there is damage. */
    char kept[600];
    path_of(kept, sizeof kept, "kept");
    f = fopen(kept, "rb");
    unsigned char b[32 + 3 * 96];
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    b[8] = 2;
    uint32_t crc = trace_header_crc(b);
    memcpy(b + 28, &crc, 4);
    FILE *m = got == sizeof b ? fmemopen(b, sizeof b, "rb") : NULL;
    if (m) {
        mp_read_file(m, "v2", &t);
        fclose(m);
        tap_ok(t.status == FERRY_ERR_FORMAT && strstr(t.error, "unknown record kind 8"),
               "a region record in a version-2 trace is refused (%s)", t.error);
        mp_trace_free(&t);
    }
}

static void run_memprof(const char *args, program_run *r) { program_run_in(dir, memprof, args, r); }

/* The program: the report's plan section, --check-plan's exit status, --json. */
static void check_cli(void)
{
    static program_run r;
    char kept[600], moved[600], unplanned[600], args[1400];
    path_of(kept, sizeof kept, "kept");
    path_of(moved, sizeof moved, "fault0");
    path_of(unplanned, sizeof unplanned, "unplanned");
    snprintf(args, sizeof args, "--check-plan '%s'", kept);
    run_memprof(args, &r);
    tap_ok(r.status == 0 && strstr(r.out, "plan: a region of 39.0 KiB at 0x10000000, 28 buffers") &&
               strstr(r.out, "device peak 40.0 KiB (40960 bytes) = the region 39.0 KiB + the dynamic heap's peak "
                             "1.0 KiB") &&
               strstr(r.out, "the run kept its plan"),
           "cli: --check-plan on the kept run: exit 0 (%d), the plan's figures said", r.status);
    snprintf(args, sizeof args, "--check-plan '%s'", moved);
    run_memprof(args, &r);
    tap_ok(r.status == 3 && strstr(r.out, "mismatches with the plan:") &&
               strstr(r.out, "'wte weights': planned at offset 4096 (8192 bytes, params), traced at offset 4352"),
           "cli: --check-plan on the moved buffer: exit 3 (%d), named", r.status);
    snprintf(args, sizeof args, "'%s'", moved);
    run_memprof(args, &r);
    tap_ok(r.status == 0 && strstr(r.out, "traced at offset 4352"),
           "cli: without --check-plan the report names the mismatch and exits 0 (%d)", r.status);
    snprintf(args, sizeof args, "--json '%s'", moved);
    run_memprof(args, &r);
    cJSON *j = cJSON_Parse(r.out), *pl = cJSON_GetObjectItemCaseSensitive(j, "plan");
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pl, "mismatches"), 0);
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(pl, "mismatch_count");
    tap_ok(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pl, "kept")) && cJSON_IsNumber(count) &&
               count->valuedouble >= 1 && cJSON_IsString(first) && strstr(first->valuestring, "'wte weights'"),
           "cli: --json has plan.kept false, the count and the words");
    cJSON_Delete(j);
    snprintf(args, sizeof args, "--json '%s'", kept);
    run_memprof(args, &r);
    j = cJSON_Parse(r.out);
    pl = cJSON_GetObjectItemCaseSensitive(j, "plan");
    const cJSON *region = cJSON_GetObjectItemCaseSensitive(pl, "region_bytes");
    tap_ok(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pl, "kept")) && cJSON_IsNumber(region) &&
               region->valuedouble == (double)REGION,
           "cli: --json on the kept run: plan.kept true, region_bytes %llu", (unsigned long long)REGION);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "--check-plan '%s'", unplanned);
    run_memprof(args, &r);
    tap_ok(r.status == 0 && strstr(r.out, "plan: none in this trace (a version-2 trace"),
           "cli: --check-plan on a trace without a plan: exit 0 (%d), saying so", r.status);
    /* A damaged trace stays exit 1, whatever the plan says. */
    char cut[600];
    path_of(cut, sizeof cut, "cut");
    snprintf(args, sizeof args, "head -c 3500 '%s' > '%s'", moved, cut);
    if (system(args) == 0) {
        snprintf(args, sizeof args, "--check-plan '%s'", cut);
        run_memprof(args, &r);
        TAP_IS_INT(r.status, 1, "cli: a cut trace with a wrong plan: exit 1, the damage first");
    }
    snprintf(args, sizeof args, "dump '%s'", kept);
    run_memprof(args, &r);
    tap_ok(r.status == 0 && strstr(r.out, "\"kind\":\"region\"") &&
               strstr(r.out, "\"name\":\"scratch b\",\"offset\":12288,\"role\":\"buffer\",\"start\":2,\"end\":4") &&
               strstr(r.out, "\"role\":\"embedder range\",\"start\":0,\"end\":null") &&
               strstr(r.out, "\"kind\":\"occupy\"") && strstr(r.out, "\"group\":2,\"addr\":\"0x10004800\""),
           "cli: dump prints the plan's records with their fields");
}

/* ---- the panel ---- */

typedef struct rects {
    int n;              /* rectangles of the class */
    long long count;    /* their data-count, summed */
    unsigned long long offsets[64];
    long long counts[64];
    unsigned long long bytes[64];
} rects;

static unsigned long long attr(const char *tag, const char *end, const char *name)
{
    char key[40];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *a = strstr(tag, key);
    return a && a < end ? strtoull(a + strlen(key), NULL, 10) : (unsigned long long)-1;
}

static rects count_class(const char *svg, const char *cls)
{
    rects r;
    memset(&r, 0, sizeof r);
    char key[64];
    snprintf(key, sizeof key, "<rect class=\"%s\"", cls);
    for (const char *p = svg; (p = strstr(p, key)) != NULL; p++) {
        const char *end = strchr(p, '>');
        unsigned long long c = attr(p, end, "data-count");
        c = c == (unsigned long long)-1 ? 1 : c;
        if (r.n < 64) {
            r.offsets[r.n] = attr(p, end, strcmp(cls, "dynamic") ? "data-offset" : "data-addr");
            r.counts[r.n] = (long long)c;
            r.bytes[r.n] = attr(p, end, "data-bytes");
        }
        r.n++;
        r.count += (long long)c;
    }
    return r;
}

static bool has(const rects *r, unsigned long long off, long long count, unsigned long long bytes)
{
    for (int i = 0; i < r->n && i < 64; i++)
        if (r->offsets[i] == off && r->counts[i] == count && (bytes == 0 || r->bytes[i] == bytes))
            return true;
    return false;
}

static void check_panel(void)
{
    char path[600], svg_path[600];
    path_of(path, sizeof path, "kept");
    snprintf(svg_path, sizeof svg_path, "%s/kept.svg", dir);
    mp_trace t;
    mp_plan p;
    mp_report r;
    if (mp_read(path, &t) != FERRY_OK) {
        tap_diag("%s: %s", path, t.error);
        return;
    }
    /* The thin buffers are allocated one after another, as an engine does
     * at setup: at one instant on the panel's time axis, however slowly
     * this process ran (a sanitizer, a busy machine), so that what is
     * checked is how neighbours are merged, not the clock. */
    uint64_t thin_t = UINT64_MAX;
    for (size_t i = 0; i < t.n; i++)
        if (t.rec[i].kind == TRACE_ALLOC && !strncmp(t.rec[i].name, "ln ", 3)) {
            thin_t = thin_t == UINT64_MAX ? t.rec[i].t_ns : thin_t;
            t.rec[i].t_ns = thin_t;
        }
    if (mp_plan_check(&t, &p) != FERRY_OK) {
        tap_diag("%s: %s", path, ferry_last_error());
        mp_trace_free(&t);
        return;
    }
    bool drawn = mp_analyze(&t, 10, 600, &r) == FERRY_OK;
    if (drawn) {
        drawn = mp_write_svg(&r, &p, svg_path, "plan") == FERRY_OK;
        mp_report_free(&r);
    }
    tap_ok(drawn, "panel: drawn");
    static char svg[1 << 20];
    program_slurp(svg_path, svg, sizeof svg);
    rects planned = count_class(svg, "planned"), slot = count_class(svg, "slot"), range = count_class(svg, "range");
    rects stays = count_class(svg, "occupancy"), sub = count_class(svg, "suballoc"), dyn = count_class(svg, "dynamic");
    TAP_IS_INT(planned.count + slot.count + range.count, NPLAN + THIN,
               "panel: every planned buffer drawn (%d buffer rectangles, %d slots, %d range)", planned.n, slot.n,
               range.n);
    TAP_IS_INT(planned.n, 4 + 1, "panel: the %d thin buffers drawn as one, the four others alone", THIN);
    tap_ok(has(&planned, THIN_AT, THIN, THIN * 256ull), "panel: the thin ones at offset %llu, %d of them, %llu bytes",
           THIN_AT, THIN, THIN * 256ull);
    const char *thin = strstr(svg, "data-count=\"20\""), *end = thin ? strchr(thin, '>') : NULL;
    const char *mix = strstr(svg, "<pattern id=\"mix-0\""), *mix_end = mix ? strstr(mix, "</pattern>") : NULL;
    int stripes = 0;
    for (const char *q = mix; q && mix_end && (q = strstr(q + 1, "<rect")) != NULL && q < mix_end;)
        stripes++;
    tap_ok(thin && end && strstr(thin, "fill=\"url(#mix-0)\"") && strstr(thin, "fill=\"url(#mix-0)\"") < end &&
               stripes == 2 && strstr(mix, "#4e79a7") < mix_end && strstr(mix, "#f28e2b") < mix_end,
           "panel: striped in the colours of params and grads (%d stripes)", stripes);
    tap_ok(has(&planned, 0, 1, 4096) && has(&planned, 4096, 1, 8192) && has(&planned, 12288, 1, 2048),
           "panel: workspace, wte weights and the scratch at their offsets with their sizes");
    int scratch = 0;
    for (int i = 0; i < planned.n; i++)
        scratch += planned.offsets[i] == 12288;
    TAP_IS_INT(scratch, 2, "panel: scratch a and b both at offset 12288, one after the other");
    tap_ok(slot.n == 3 && has(&slot, 14336, 1, 4096) && has(&slot, 18432, 1, 4096) && has(&slot, 22528, 1, 4096),
           "panel: the three slots at their offsets");
    tap_ok(range.n == 1 && has(&range, 26624, 1, 8192), "panel: the embedder's range");
    TAP_IS_INT(stays.count, 4, "panel: the four stays of groups in the slots");
    tap_ok(has(&stays, 14336, 1, 0) && has(&stays, 18432, 1, 0), "panel: 'block 0' and 'block 1' in the weights slots");
    tap_ok(sub.count == 2 && has(&sub, 26624, 1, 4096) && has(&sub, 30720, 1, 4096),
           "panel: the embedder's two allocations in its range");
    tap_ok(dyn.count == 1 && has(&dyn, DYN, 1, 1024), "panel: the dynamic heap's allocation, by its address");
    tap_ok(strstr(svg, "budget 48.0 KiB") && strstr(svg, "device address space"),
           "panel: titled, with the budget line");
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "'%s' -c \"import sys, xml.dom.minidom as m; m.parse(sys.argv[1])\" '%s'", python,
             svg_path);
    TAP_IS_INT(system(cmd), 0, "panel: the picture parses as XML");
    mp_plan_free(&p);
    mp_trace_free(&t);
}

int main(int argc, char **argv)
{
    memprof = program_setup(argc, argv, 3, "usage: test_memprof_plan MEMPROF PYTHON", dir);
    python = argv[2];
    check_kept();
    check_faults();
    check_without_plan();
    check_cli();
    check_panel();
    test_dir_remove(dir);
    return tap_done();
}
