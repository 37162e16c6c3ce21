/* Every op of the registry (backend/ops/op_list.h), driven over the shape table
 * (dev/ops/op_shapes.h) on the host backend, with no code per op here but
 * its double-precision reference (tests/ops/op_refs.h):
 * - the table covers every op, and names only ops of the registry;
 * - each row in fp32 storage against the op's reference in double, by
 *   relative norm: 2e-6 (sums in fp32 over at most a few thousand terms; about
 *   ten times the largest error seen);
 * - each row in bf16 and in f16 storage against the same row in fp32 (the
 *   16-bit emulation widens, runs the fp32 reference and rounds where the
 *   CUDA ops store: the outputs agree to the type's rounding; the inputs are
 *   exact in every type), by relative norm: bf16 1e-2 (2e-2 where a 16-bit
 *   intermediate enters), f16 2e-3 (4e-3);
 * - the front's contract, for each row and each argument: a NULL stream, a
 *   NULL tensor (refused, named; allowed where the argument is optional), a
 *   tensor one element too small (refused, named), a size of 0 (refused,
 *   named; a count that may be 0 makes the op do nothing, its outputs
 *   untouched);
 * - backend/ops/ops.h names every generated ops_<name>, so grep finds it:
 *   its list holds the registry's names in FERRY_OPS's order, nothing more
 *   (the comparison proven first on a registry with an op the list lacks and
 *   on a list with an op the registry lacks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fileio.h"
#include "backend/backend.h"
#include "dev/ops/opdrive.h"
#include "tests/ops/op_refs.h"
#include "tests/tap.h"

static opinfo all[OPINFO_OPS];

static void coverage(void)
{
    for (int i = 0; i < OPINFO_OPS; i++) {
        size_t rows = 0;
        for (size_t k = 0; k < OP_SHAPES; k++)
            rows += strcmp(op_shapes[k].op, all[i].name) == 0;
        tap_ok(rows > 0, "ops_%s has %zu rows in the shape table", all[i].name, rows);
    }
    size_t unknown = 0;
    for (size_t k = 0; k < OP_SHAPES; k++)
        if (!opinfo_find(all, op_shapes[k].op)) {
            unknown++;
            tap_diag("row %zu names '%s', no op of the registry", k, op_shapes[k].op);
        }
    TAP_IS_INT(unknown, 0, "every row names an op of the registry (%d ops, %zu rows)", OPINFO_OPS, OP_SHAPES);
}

/* ops.h's list of the generated ops: after the line that holds LIST_MARK,
 * one " *   ops_<name>  what it does" line each. */
#define LIST_MARK "in FERRY_OPS's order"
#define LIST_ITEM " *   ops_"
enum { LIST_MAX = 2 * OPINFO_OPS + 8, NAME_MAX_LEN = 64 };

/* The names ops.h lists (without "ops_"), into names[]; their count, or -1
 * (said why) where the list is not found. */
static int parse_list(const char *text, char names[][NAME_MAX_LEN])
{
    const char *p = strstr(text, LIST_MARK);
    if (!p) {
        tap_diag("no line holding \"%s\" in backend/ops/ops.h", LIST_MARK);
        return -1;
    }
    int n = 0;
    for (p = strchr(p, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        const char *line = p + 1;
        if (strncmp(line, LIST_ITEM, strlen(LIST_ITEM)) != 0) {
            if (n > 0 || strncmp(line, " */", 3) == 0)
                break;
            continue;
        }
        const char *name = line + strlen(LIST_ITEM);
        size_t len = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (n == LIST_MAX || len == 0 || len >= NAME_MAX_LEN) {
            tap_diag("backend/ops/ops.h: list line %d is no ops_<name> or one too many", n + 1);
            return -1;
        }
        memcpy(names[n], name, len);
        names[n++][len] = '\0';
    }
    return n;
}

/* How many places the list and the registry's names differ in, position by
 * position (a name missing from the list shifts what follows); each told
 * when `say`. */
static int list_drift(const char *const *reg, int nreg, char listed[][NAME_MAX_LEN], int nlisted, bool say)
{
    int bad = 0;
    for (int i = 0; i < nreg || i < nlisted; i++) {
        const char *want = i < nreg ? reg[i] : NULL, *got = i < nlisted ? listed[i] : NULL;
        if (want && got && strcmp(want, got) == 0)
            continue;
        bad++;
        if (say)
            tap_diag("place %d: the registry has %s%s, backend/ops/ops.h's list %s%s", i + 1, want ? "ops_" : "",
                     want ? want : "nothing", got ? "ops_" : "", got ? got : "nothing");
    }
    return bad;
}

static void listed(void)
{
    const char *root = getenv("FERRY_SOURCE_ROOT");
    char path[4096], *text = NULL;
    size_t len;
    if (!root || snprintf(path, sizeof path, "%s/backend/ops/ops.h", root) >= (int)sizeof path ||
        fileio_read(path, "backend/ops/ops.h", &text, &len) != FERRY_OK) {
        tap_ok(0, "backend/ops/ops.h read (FERRY_SOURCE_ROOT %s): %s", root ? root : "unset",
               root ? ferry_last_error() : "meson test sets it");
        return;
    }
    static char names[LIST_MAX][NAME_MAX_LEN];
    int n = parse_list(text, names);
    free(text);
    if (!tap_ok(n >= 0, "backend/ops/ops.h's list of the generated ops found (%d names)", n))
        return;
    const char *reg[OPINFO_OPS + 1];
    for (int i = 0; i < OPINFO_OPS; i++)
        reg[i] = all[i].name;
    /* The comparison itself: an op added to the registry alone, and one
     * listed that the registry lacks, are both differences. */
    reg[OPINFO_OPS] = "not_listed";
    tap_ok(list_drift(reg, OPINFO_OPS + 1, names, n, false) > 0,
           "a registry with an op the list lacks differs from the list");
    if (n < LIST_MAX) {
        strcpy(names[n], "not_registered");
        tap_ok(list_drift(reg, OPINFO_OPS, names, n + 1, false) > 0,
               "a list with an op the registry lacks differs from the registry");
    }
    tap_ok(list_drift(reg, OPINFO_OPS, names, n, true) == 0,
           "backend/ops/ops.h lists the %d ops of FERRY_OPS, in its order, and no other", OPINFO_OPS);
}

typedef struct cmp_ctx {
    const op_shape *shape;
    ferry_dtype t;
    double elem, mixed; /* the tolerances of the two classes in t */
} cmp_ctx;

static void report(void *p, const opdrive_result *r)
{
    cmp_ctx *c = p;
    double tol = op_shape_tol(c->shape, r->tensor, c->elem, c->mixed);
    tap_ok(r->err.rel <= tol, "%s %s: %s in %s against fp32: relative error %.2g <= %.0e (max abs %.2g, %zu values)",
           r->op, c->shape->sizes, r->tensor, dtype_name(c->t), r->err.rel, tol, r->err.max_abs, r->n);
}

static void report_ref(void *p, const opdrive_result *r)
{
    const op_shape *shape = p;
    double tol = 2e-6; /* about ten times the largest error seen */
    if (!tap_ok(r->err.rel <= tol, "%s %s: %s in fp32 against the reference in double: relative error %.2g <= %.0e "
                "(max abs %.2g, %zu values)", r->op, shape->sizes, r->tensor, r->err.rel, tol, r->err.max_abs, r->n))
        tap_diag("  the host op does not compute what backend/ops/op_list.h says it does");
}

static void references(backend *f32, backend_stream *s32)
{
    for (size_t k = 0; k < OP_SHAPES; k++) {
        opdrive_ref_fn ref = op_ref_find(op_shapes[k].op);
        ferry_status st = ref ? opdrive_reference(all, &op_shapes[k], f32, s32, 0x7e5eedull + k, ref, report_ref,
                                                  (void *)&op_shapes[k])
                              : err_set(FERRY_ERR_INVALID_ARGUMENT, "no reference");
        if (st != FERRY_OK)
            tap_ok(0, "%s %s against its reference: %s", op_shapes[k].op, op_shapes[k].sizes, ferry_last_error());
    }
}

static void storage_types(backend *f32, backend_stream *s32)
{
    const ferry_dtype types[] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F16};
    for (size_t t = 0; t < 2; t++) {
        backend *be = NULL;
        backend_stream *s = NULL;
        if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK || backend_set_act_dtype(be, types[t]) != FERRY_OK ||
            backend_stream_create(be, "narrow", &s) != FERRY_OK || ops_init(be, NULL, 0) != FERRY_OK) {
            tap_ok(0, "a host backend storing %s: %s", dtype_name(types[t]), ferry_last_error());
            backend_close(be);
            continue;
        }
        for (size_t k = 0; k < OP_SHAPES; k++) {
            bool bf16 = types[t] == FERRY_DTYPE_BF16;
            cmp_ctx c = {&op_shapes[k], types[t], bf16 ? 1e-2 : 2e-3, bf16 ? 2e-2 : 4e-3};
            ferry_status st = opdrive_compare(all, &op_shapes[k], be, s, f32, s32, 0x0b5eedull + k, report, &c);
            if (st != FERRY_OK)
                tap_ok(0, "%s %s in %s: %s", op_shapes[k].op, op_shapes[k].sizes, dtype_name(types[t]),
                       ferry_last_error());
        }
        backend_stream_destroy(s);
        backend_close(be);
    }
}

/* ---- the front's contract ---- */

static bool message_names(const char *name)
{
    char quoted[80];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    return strstr(ferry_last_error(), quoted) != NULL;
}

/* A fresh run of the row, filled; false (reported) when it cannot be made. */
static bool fresh(opdrive_run *r, const opinfo *info, const op_shape *shape, backend *be, backend_stream *s)
{
    ferry_status st = opdrive_setup(r, info, shape->sizes, be, s);
    if (st == FERRY_OK)
        st = opdrive_fill(r, 7);
    if (st != FERRY_OK) {
        tap_ok(0, "%s %s: setup: %s", shape->op, shape->sizes, ferry_last_error());
        opdrive_free(r);
    }
    return st == FERRY_OK;
}

static void contract(const op_shape *shape, backend *be, backend_stream *s)
{
    const opinfo *info = opinfo_find(all, shape->op);
    if (!info)
        return;
    opdrive_run r;
    if (!fresh(&r, info, shape, be, s))
        return;
    ferry_status st = info->call(NULL, r.args);
    tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "stream is NULL"),
           "ops_%s: a NULL stream is refused: %s", info->name, ferry_last_error());
    TAP_IS_STATUS(opdrive_call(&r), FERRY_OK, "ops_%s %s runs", info->name, shape->sizes);
    opdrive_free(&r);
    int bad = 0;
    for (int i = 0; i < info->nargs; i++) {
        const opinfo_arg *a = &info->args[i];
        if (!fresh(&r, info, shape, be, s))
            return;
        void *none = NULL;
        if (opinfo_is_tensor(a->kind)) {
            /* NULL */
            opdrive_set(&r, i, &none, sizeof none);
            st = info->call(s, r.args);
            if (opinfo_is_optional(a->kind)) {
                if (st == FERRY_OK)
                    st = backend_stream_synchronize(s);
                /* optional: runs, unless another argument needs it (then refused by name) */
                bad += !tap_ok(st == FERRY_OK || (st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), a->name)),
                               "ops_%s: %s may be NULL where nothing else needs it (%s)", info->name, a->name,
                               st == FERRY_OK ? "ran" : ferry_last_error());
            } else {
                bad += !tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && message_names(a->name),
                               "ops_%s: a NULL %s is refused by name: %s", info->name, a->name, ferry_last_error());
            }
            /* one element short (one byte for bytes) */
            size_t bytes = r.extent[i] * r.elem[i], shortb = bytes > r.elem[i] ? bytes - r.elem[i] : 1;
            void *small = NULL;
            if (backend_alloc(be, shortb, &small) == FERRY_OK) {
                opdrive_set(&r, i, &small, sizeof small);
                st = info->call(s, r.args);
                bad += !tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && message_names(a->name),
                               "ops_%s: %s of %zu bytes, %zu short, is refused by name: %s", info->name, a->name,
                               shortb, bytes - shortb, ferry_last_error());
                backend_free(be, small);
            }
        } else if (a->kind == OPINFO_DIM || a->kind == OPINFO_COUNT) {
            size_t zero = 0;
            int izero = 0;
            opdrive_set(&r, i, a->kind == OPINFO_DIM ? (void *)&izero : (void *)&zero,
                        a->kind == OPINFO_DIM ? sizeof izero : sizeof zero);
            char want[80];
            snprintf(want, sizeof want, ": %s is 0", a->name);
            st = info->call(s, r.args);
            bad += !tap_ok(st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), want),
                           "ops_%s: %s = 0 is refused by name: %s", info->name, a->name, ferry_last_error());
        } else if (a->kind == OPINFO_COUNT0) {
            size_t zero = 0;
            opdrive_set(&r, i, &zero, sizeof zero);
            /* nothing may change: every tensor reads back as it was filled */
            st = opdrive_call(&r);
            bool same = st == FERRY_OK;
            for (int j = 0; same && j < info->nargs; j++) {
                if (!opinfo_is_written(info->args[j].kind))
                    continue;
                size_t n = r.extent[j];
                float *got = malloc((n ? n : 1) * sizeof *got);
                opdrive_run again;
                bool ok = got && opdrive_read(&r, j, got) == FERRY_OK &&
                          opdrive_setup(&again, info, shape->sizes, be, s) == FERRY_OK;
                float *want_v = ok ? malloc((n ? n : 1) * sizeof *want_v) : NULL;
                ok = ok && want_v && opdrive_fill(&again, 7) == FERRY_OK && opdrive_read(&again, j, want_v) == FERRY_OK;
                same &= ok && memcmp(got, want_v, n * sizeof *got) == 0;
                opdrive_free(&again);
                free(got);
                free(want_v);
            }
            bad += !tap_ok(same, "ops_%s: %s = 0 does nothing (status %s)", info->name, a->name,
                           ferry_status_string(st));
        }
        opdrive_free(&r);
    }
    tap_diag("ops_%s %s: %d of the contract's checks failed", info->name, shape->sizes, bad);
}

int main(void)
{
    opinfo_all(all);
    coverage();
    listed();
    backend *be = NULL;
    backend_stream *s = NULL;
    if (backend_open(FERRY_BACKEND_HOST, &be) != FERRY_OK || backend_stream_create(be, "f32", &s) != FERRY_OK ||
        ops_init(be, NULL, 0) != FERRY_OK) {
        printf("Bail out! host backend: %s\n", ferry_last_error());
        return 1;
    }
    references(be, s);
    storage_types(be, s);
    /* the contract on one row of each op */
    for (int i = 0; i < OPINFO_OPS; i++)
        for (size_t k = 0; k < OP_SHAPES; k++)
            if (strcmp(op_shapes[k].op, all[i].name) == 0) {
                contract(&op_shapes[k], be, s);
                break;
            }
    backend_stream_destroy(s);
    backend_close(be);
    return tap_done();
}
