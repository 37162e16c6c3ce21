/* memprof's library (memprof_lib, which the program, its tests and the fuzz
 * harnesses link): reading a memory trace (offload/trace.h format),
 * replaying it into peak figures and a timeline, checking it against the
 * device's memory plan it carries, writing them as text, JSON and SVG, and
 * the command lines. Owns nothing of ferry's library; reads files only. */
#ifndef FERRY_TOOLS_MEMPROF_H
#define FERRY_TOOLS_MEMPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"
#include "engine/intree.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "offload/trace.h"

#define MP_POOLS 3 /* device, host, disk (trace_pool) */
#define MP_TOP_MAX 64

/* A trace as read: the records before the first problem, and the problem. */
typedef struct mp_trace {
    trace_record *rec;
    size_t n;
    uint64_t start_unix_ns;
    bool header_ok;      /* the file is a trace: its header was read and is whole */
    bool checksummed;    /* its records carry checksums (TRACE_FLAG_CRC), all checked */
    uint32_t version;    /* the header's format version (1, 2 or 3) */
    bool ended;          /* the END record was read (version 2 on: the trace is whole) */
    ferry_status status; /* FERRY_OK, or why reading stopped early */
    char error[512];
} mp_trace;

/* Reads `path`. Always fills *t (n may be 0); returns t->status. A missing
 * or unreadable file is FERRY_ERR_IO; a file that is not a whole trace
 * header FERRY_ERR_FORMAT with header_ok false; damage after the header, or
 * a version-2 or later trace without its END record (cut), FERRY_ERR_FORMAT with
 * header_ok true and the records before it kept. The END record itself is
 * not among t->rec. */
ferry_status mp_read(const char *path, mp_trace *t);
/* The same from an open stream; `name` is used in messages. */
ferry_status mp_read_file(FILE *f, const char *name, mp_trace *t);
void mp_trace_free(mp_trace *t);

typedef struct mp_alloc {
    uint64_t bytes;
    uint64_t addr;
    int category;
    char name[TRACE_NAME_MAX];
} mp_alloc;

typedef struct mp_pool_report {
    bool seen;                /* the pool has events */
    uint64_t limit;           /* its budget (0 = none or not recorded) */
    uint64_t reserved_peak;
    uint64_t peak;            /* bytes in use at the worst moment */
    uint64_t peak_t_ns;
    size_t peak_record;       /* index of the record that reached the peak */
    int64_t peak_step;        /* step of the last phase marker before it; -1 if none */
    char peak_phase[TRACE_NAME_MAX];
    uint64_t peak_by_cat[FERRY_MEM_CATEGORY_COUNT];
    uint64_t cat_peak[FERRY_MEM_CATEGORY_COUNT]; /* each category's own maximum */
    mp_alloc largest[MP_TOP_MAX];
    size_t nlargest;
    size_t live_at_peak;
    uint64_t final_bytes;
    uint64_t allocs, frees;
    uint64_t unknown_frees;   /* frees of an address with no live alloc */
    uint64_t reused_addrs;    /* allocs of an address already live */
    /* timeline: per bucket, the by-category bytes at the bucket's highest moment */
    uint64_t (*bucket)[FERRY_MEM_CATEGORY_COUNT];
} mp_pool_report;

typedef struct mp_timing {
    char key[TRACE_NAME_MAX];
    uint64_t count;
    double sum, max;
} mp_timing;

typedef struct mp_mark {
    uint64_t t_ns;
    int64_t step;
    char name[TRACE_NAME_MAX];
} mp_mark;

typedef struct mp_report {
    mp_pool_report pool[MP_POOLS];
    mp_timing *timings;
    size_t ntimings;
    mp_mark *marks;
    size_t nmarks;
    size_t nbuckets;
    uint64_t t_end;
    size_t records;
    uint64_t t_start; /* the timeline's window is [t_start, t_end]: 0 and the last record, or a step */
    bool window;      /* the timeline is a window of the run (mp_analyze_window), not all of it */
} mp_report;

/* Replays the records of t into *r: peaks, breakdowns, the `top` largest
 * live allocations at each peak, and a timeline of `buckets` columns. On
 * failure (out of memory) nothing is left to free. */
ferry_status mp_analyze(const mp_trace *t, size_t top, size_t buckets, mp_report *r);
/* The same with the timeline drawn over [t0, t1] only (the state at t0
 * carried in from the records before it); peaks and breakdowns are still
 * those of the whole trace. */
ferry_status mp_analyze_window(const mp_trace *t, size_t top, size_t buckets, uint64_t t0, uint64_t t1,
                               mp_report *r);
/* The window of step `step`: from its first phase marker to just before the
 * first marker of a later step (or to the last record). FERRY_ERR_INVALID_ARGUMENT
 * naming the steps the trace has when it has no such step. */
ferry_status mp_step_window(const mp_trace *t, int64_t step, uint64_t *t0, uint64_t *t1);
void mp_report_free(mp_report *r);

const char *mp_pool_name(int pool); /* "device", "host" */

/* ---- the device's memory plan, read back and checked (mp_plan.c) ---- */

#define MP_PLAN_SAID 32   /* mismatches said in words; the rest are counted */
#define MP_PLAN_LIVE_MAX (1u << 15) /* allocations (or planned buffers) alive at once that the check follows */

/* A buffer of the plan (a PLANNED record), and what the run did with it. */
typedef struct mp_planned {
    uint64_t offset, bytes;   /* in the region */
    int category, role;       /* role: trace_plan_role */
    int64_t start, end;       /* its lifetime in schedule positions, [start, end); end INT32_MAX: the run's end */
    char name[TRACE_NAME_MAX];
    bool placed;              /* an allocation was traced at its offset (a buffer or a slot) */
    uint64_t t_placed, t_freed; /* when; t_freed UINT64_MAX: live at the end */
} mp_planned;

/* A group in one of params mode's slots, from OCCUPY to VACATE. */
typedef struct mp_occupancy {
    size_t slot;              /* index in mp_plan.buf; SIZE_MAX: a slot outside the plan (in mp_plan.blocks) */
    size_t block;             /* ... then its index in mp_plan.blocks */
    uint64_t addr, bytes;
    int category;
    int64_t group;
    uint64_t t0, t1;          /* t1 UINT64_MAX: still there at the end */
    char name[TRACE_NAME_MAX];
} mp_occupancy;

/* A device allocation that is no planned buffer: the embedder's, inside its
 * range of the region, or the dynamic heap's, outside the region. */
typedef struct mp_block {
    uint64_t addr, bytes;
    int category;
    bool in_region;
    uint64_t t0, t1;          /* t1 UINT64_MAX: live at the end */
    char name[TRACE_NAME_MAX];
} mp_block;

typedef struct mp_plan {
    bool present;             /* the trace holds a plan: a REGION record */
    char absent[160];         /* when not, why ("a version-2 trace, ...") */
    uint64_t base, region_bytes, t_region;
    mp_planned *buf;
    size_t nbuf, slots, ranges;
    mp_occupancy *occ;
    size_t nocc;
    mp_block *blocks;
    size_t nblocks;
    /* The device's bytes in use: at their peak, and the dynamic heap's and
     * the region's own peaks. A run keeps its plan when the peak is the
     * region plus the dynamic heap's peak. */
    uint64_t device_peak, dynamic_peak, region_peak;
    size_t mismatches;        /* every disagreement with the plan found */
    char said[MP_PLAN_SAID][320]; /* the first of them in words */
} mp_plan;

/* Reads the plan a trace carries and checks the run against it: every
 * device allocation inside the region at a planned buffer's offset with its
 * size and category, or inside the embedder's range; no two allocations
 * alive together overlapping; no two planned buffers alive together
 * overlapping (their lifetimes and offsets, checked here, not by the
 * engine's code); every planned buffer placed; each slot held by one group
 * at a time, by a group of its kind, with room for it; the device peak the
 * region plus the dynamic heap's peak. A trace without a plan is no
 * failure: p->present says so, p->absent why. FERRY_ERR_OUT_OF_MEMORY only
 * when memprof runs out of memory (nothing left to free then). */
ferry_status mp_plan_check(const mp_trace *t, mp_plan *p);
void mp_plan_free(mp_plan *p);

/* Writes the stacked-area timeline as a standalone SVG file; with a plan
 * (NULL: none), the device's address space over the same window below it. */
ferry_status mp_write_svg(const mp_report *r, const mp_plan *plan, const char *path, const char *title);
/* Writes the static plan's device layout as a standalone SVG file
 * (mp_layout_svg.c): the card's memory as one column, each planned buffer at
 * its offset, what the budget leaves beside the plan, and what the card
 * keeps for its own software (budget 0, card 0: not drawn). */
ferry_status mp_write_layout_svg(const char *path, const engine_layout_entry *e, int n, uint64_t region,
                                 uint64_t budget, uint64_t card, const char *title);

/* ---- command lines (mp_args.c) ----
 * Each parser returns 0 to go on, 1 after printing --help to stdout, 2 on a
 * bad option or value (the reason printed to stderr); argv[0] is the
 * subcommand (or the program) and is skipped. */

typedef struct mp_report_args {
    const char *path, *svg; /* the trace; --svg FILE or NULL */
    bool json;
    int top;                /* --top N, 0..MP_TOP_MAX */
    long long step;         /* --step N: the picture shows step N alone; -1 = the whole run */
    bool check_plan;        /* --check-plan: exit 3 when the run strayed from the plan it carries */
} mp_report_args;

typedef struct mp_plan_args {
    const char *model;          /* a GPT-2 or Llama-family name, or a Hugging Face folder */
    bool llama;                 /* the model is of the Llama family: llama_cfg (the gpt2_config filled for
                                   the printouts only: layers, heads, width, vocabulary, context) */
    llama_config llama_cfg;
    int layers, heads, width, vocab, context, batch, seq, prefetch, grad_accum;
    ferry_offload offload;
    ferry_backend_kind backend;
    ferry_dtype dtype;
    ferry_moments moments;      /* --moments: the host Adam moments' form */
    int upload_window;          /* --upload-window: ferry_engine_config's upload_window */
    uint64_t upload_window_chunk_bytes; /* --upload-window SIZE: its chunks (0 = 16 MiB) */
    bool recompute, json;
    bool layout;                /* --layout: every planned device buffer's offset, size and lifetime */
    const char *layout_svg;     /* --layout-svg FILE: the layout drawn; NULL = not asked */
    uint64_t gpu_mem, host_mem; /* 0 = not given */
    /* the NVMe tier: --offload nvme, or params with --nvme-path */
    const char *nvme_path;      /* its folder: --disk defaults to the space free there */
    bool nvme_master;
    uint64_t nvme_window, nvme_block;
    uint64_t disk;              /* --disk: the space to check the state file against; 0 = not given */
    uint64_t card;              /* --card: the card's memory; gpu_mem is then card - card_reserve */
    uint64_t card_reserve;      /* --card-reserve, else MP_CARD_RESERVE_DEFAULT */
    bool card_reserve_given;
    int ranks;                  /* data parallel ranks; 1 = alone */
    bool auto_asked;            /* --offload auto: offload and recompute are what it chose */
    char auto_reason[1100];
} mp_plan_args;

/* What `memprof plan --card SIZE` leaves for the CUDA context and the
 * libraries' code (cuBLAS, cuBLASLt) before the engine's first byte, unless
 * --card-reserve says otherwise: 0.5 GiB, docs/memprof.md says why. The
 * engine measures the real share on its card (ferry_memory_stats'
 * device_context_bytes, device_library_bytes, device_outside_bytes). */
#define MP_CARD_RESERVE_DEFAULT ((uint64_t)512 << 20)

void mp_usage(FILE *f);
void mp_plan_usage(FILE *f);
int mp_parse_report_args(int argc, char **argv, mp_report_args *a);
int mp_parse_dump_args(int argc, char **argv, const char **path);
/* Also builds and checks the model's config into *c. */
int mp_parse_plan_args(int argc, char **argv, mp_plan_args *a, gpt2_config *c);

#endif
