/* The timeline picture: for each pool, bytes in use stacked by category
 * over time (the whole run, or one step: mp_analyze_window), the budget as
 * a dashed line, the peak marked, and the phase markers as vertical lines,
 * thinned to where there is room and labelled only where the label fits
 * inside the frame and clear of the last one; and with a plan (mp_plan.c),
 * the device's address space over the same window: each planned buffer at
 * its offset over its lifetime, params mode's slots split by the groups
 * that held them, the embedder's allocations in its range, the dynamic
 * heap's above the region, the budget. Plain SVG 1.1 (the rectangles carry
 * data- attributes for scripts), readable in any browser. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/units.h"
#include "tools/memprof/memprof.h"

#define W 1000.0
#define PANEL_H 260.0
#define LEFT 80.0
#define RIGHT 170.0
#define TOP 40.0
#define GAP 70.0
#define MARK_GAP 6.0   /* px between two phase lines drawn */
#define STEP_GAP 40.0  /* px between step lines when there is no room for every marker */
#define LABEL_PX 6.5   /* px per character of a 10 px label: DejaVu Sans and Helvetica digits and most
                          lowercase letters are at most 0.65 em */

static const char *const colour[FERRY_MEM_CATEGORY_COUNT] = {
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
};

static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f)
                fputc(*s, f);
            else
                fputc('?', f); /* keeps the file valid XML whatever the names hold */
        }
    }
}

/* A tick step of 1, 2 or 5 times a power of ten, for about 5 ticks. */
static double nice_step(double range)
{
    double raw = range / 5.0, mag = pow(10.0, floor(log10(raw)));
    double m = raw / mag;
    return (m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0) * mag;
}

static void axis_y(FILE *f, double y0, double h, double ymax)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double scale = 1.0;
    while (ymax / scale >= 1024.0 && u < 4) {
        scale *= 1024.0;
        u++;
    }
    double step = nice_step(ymax / scale);
    for (double v = 0; v * scale <= ymax * 1.0001; v += step) {
        double y = y0 + h - v * scale / ymax * h;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, y,
                W - RIGHT, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g %s</text>\n",
                LEFT - 6, y + 4, v, unit[u]);
    }
}

/* The x of time t in the window. */
static double x_of(const mp_report *r, uint64_t t)
{
    double span = (double)(r->t_end - r->t_start) + 1.0;
    return LEFT + (double)(t - r->t_start) / span * (W - LEFT - RIGHT);
}

/* Times from the start of the window. */
static void axis_x(FILE *f, double y0, double h, uint64_t t_end)
{
    double end_ms = (double)t_end / 1e6;
    bool secs = end_ms >= 5000.0;
    double range = secs ? end_ms / 1000.0 : end_ms;
    if (range <= 0)
        range = 1;
    double step = nice_step(range);
    for (double v = 0; v <= range * 1.0001; v += step) {
        double x = LEFT + v / range * (W - LEFT - RIGHT);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\">%g %s</text>\n", x,
                y0 + h + 16, v, secs ? "s" : "ms");
    }
}

/* Whether marker i starts a step (its step differs from the marker before). */
static bool starts_step(const mp_report *r, size_t i)
{
    return i == 0 || r->marks[i].step != r->marks[i - 1].step;
}

/* Every k-th step's first marker, k of 1, 2, 5 x 10^n: the smallest k that
 * keeps the lines STEP_GAP apart. */
static int64_t step_stride(const mp_report *r)
{
    size_t steps = 0;
    for (size_t i = 0; i < r->nmarks; i++)
        if (r->marks[i].t_ns >= r->t_start && r->marks[i].t_ns <= r->t_end && starts_step(r, i))
            steps++;
    double room = (W - LEFT - RIGHT) / STEP_GAP;
    for (int64_t k = 1;; k *= 10)
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3)
            if ((double)steps / (double)(k * m) <= room || k > ((int64_t)1 << 50))
                return k * m;
}

/* The phase markers in the window: every one where each can be told apart
 * (MARK_GAP), else the starts of every k-th step. A line is drawn only
 * MARK_GAP clear of the last; a label only where it ends inside the frame
 * and starts clear of the last label. */
static void marks(FILE *f, const mp_report *r, double y0, double h)
{
    size_t in = 0;
    for (size_t i = 0; i < r->nmarks; i++)
        in += r->marks[i].t_ns >= r->t_start && r->marks[i].t_ns <= r->t_end;
    bool all = (double)in * MARK_GAP <= W - LEFT - RIGHT;
    int64_t k = all ? 1 : step_stride(r);
    double last_line = -1e9, label_end = -1e9;
    for (size_t i = 0; i < r->nmarks; i++) {
        const mp_mark *m = &r->marks[i];
        if (m->t_ns < r->t_start || m->t_ns > r->t_end)
            continue;
        if (!all && (!starts_step(r, i) || m->step < 0 || m->step % k != 0))
            continue;
        double x = x_of(r, m->t_ns);
        if (x - last_line < MARK_GAP)
            continue;
        last_line = x;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" "
                   "stroke-width=\"0.5\" stroke-dasharray=\"2,3\"/>\n",
                x, y0, x, y0 + h);
        char label[TRACE_NAME_MAX + 32];
        if (!all)
            snprintf(label, sizeof label, "step %lld", (long long)m->step);
        else if (m->step >= 0)
            snprintf(label, sizeof label, "%lld %s", (long long)m->step, m->name);
        else
            snprintf(label, sizeof label, "%s", m->name);
        double w = LABEL_PX * (double)strlen(label);
        if (x + 2 < label_end + 6 || x + 2 + w > W - RIGHT)
            continue;
        label_end = x + 2 + w;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">", x + 2, y0 + 10);
        put_escaped(f, label);
        fputs("</text>\n", f);
    }
}

static void panel(FILE *f, const mp_report *r, int p, double y0)
{
    const mp_pool_report *pr = &r->pool[p];
    char b[32], l[32] = "", w[32];
    /* The highest column: the window's own peak (the whole run's when the
     * window is the run). */
    uint64_t top = 0;
    for (size_t k = 0; k < r->nbuckets; k++) {
        uint64_t sum = 0;
        for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
            sum += pr->bucket[k][c];
        top = sum > top ? sum : top;
    }
    uint64_t shown = r->window ? top : pr->peak;
    double ymax = (double)shown * 1.1;
    if (pr->limit && (double)pr->limit < (double)shown * 3.0 && (double)pr->limit * 1.05 > ymax)
        ymax = (double)pr->limit * 1.05;
    if (ymax <= 0)
        ymax = 1;
    if (r->window)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s memory: up to %s here "
                   "(the run's peak %s)",
                LEFT, y0 - 10, mp_pool_name(p), units_fmt_bytes(w, sizeof w, top),
                units_fmt_bytes(b, sizeof b, pr->peak));
    else
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s memory: peak %s",
                LEFT, y0 - 10, mp_pool_name(p), units_fmt_bytes(b, sizeof b, pr->peak));
    if (pr->limit)
        fprintf(f, " of %s budget", units_fmt_bytes(l, sizeof l, pr->limit));
    fputs("</text>\n", f);
    axis_y(f, y0, PANEL_H, ymax);
    double pw = W - LEFT - RIGHT, colw = pw / (double)r->nbuckets;
    for (int c = FERRY_MEM_CATEGORY_COUNT - 1; c >= 0; c--) {
        if (!pr->cat_peak[c])
            continue;
        /* the top edge of category c is the sum of categories 0..c */
        fprintf(f, "<path fill=\"%s\" stroke=\"none\" d=\"M%.1f %.1f", colour[c], LEFT, y0 + PANEL_H);
        /* A step outline: a corner only where a column's value changes. */
        double prev_y = y0 + PANEL_H;
        for (size_t k = 0; k < r->nbuckets; k++) {
            uint64_t sum = 0;
            for (int d = 0; d <= c; d++)
                sum += pr->bucket[k][d];
            double y = y0 + PANEL_H - (double)sum / ymax * PANEL_H;
            if (k == 0 || fabs(y - prev_y) >= 0.05)
                fprintf(f, " L%.1f %.1f L%.1f %.1f", LEFT + (double)k * colw, prev_y, LEFT + (double)k * colw, y);
            prev_y = y;
        }
        fprintf(f, " L%.1f %.1f L%.1f %.1f Z\"/>\n", W - RIGHT, prev_y, W - RIGHT, y0 + PANEL_H);
    }
    if (pr->limit && (double)pr->limit <= ymax) {
        double y = y0 + PANEL_H - (double)pr->limit / ymax * PANEL_H;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" "
                   "stroke-dasharray=\"6,3\"/>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
                   "text-anchor=\"end\" fill=\"#c00\">budget %s</text>\n",
                LEFT, y, W - RIGHT, y, W - RIGHT - 4, y + 13, l);
    }
    if (pr->peak_t_ns >= r->t_start && pr->peak_t_ns <= r->t_end) {
        double px = x_of(r, pr->peak_t_ns);
        double py = y0 + PANEL_H - (double)pr->peak / ymax * PANEL_H;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"none\" stroke=\"#000\" "
                   "stroke-width=\"1.5\"/>\n",
                px, py);
    }
    marks(f, r, y0, PANEL_H);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
            LEFT, y0, pw, PANEL_H);
    axis_x(f, y0, PANEL_H, r->t_end - r->t_start);
    for (int c = 0, row = 0; c < FERRY_MEM_CATEGORY_COUNT; c++) {
        if (!pr->cat_peak[c])
            continue;
        double ly = y0 + 20 + 18 * row++;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", W - RIGHT + 10,
                ly - 10, colour[c]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", W - RIGHT + 28, ly,
                ferry_mem_category_name((ferry_mem_category)c));
    }
}

/* ---- the device's address space, with a plan ---- */

#define ADDR_H 440.0   /* the panel's height */
#define SMALL_PX 3.0   /* buffers thinner than this are drawn together with their like neighbours */
#define THIN_PX 1.0    /* occupancies narrower than this are drawn together */
#define LABEL_H 10.0   /* a rectangle this tall holds a label (9 px) */
#define EMPTY_SLOT "#f2f2f2"

/* One rectangle to draw: bytes [lo, lo + bytes) of the panel's y over [x0, x1]. */
typedef struct box {
    uint64_t lo, bytes;
    uint64_t key;        /* the data- attribute: the offset in the region, or the address */
    double x0, x1;
    int cat;
    bool ghost;          /* planned, never placed: an outline */
    const char *name;
} box;

typedef struct addr_view {
    const mp_report *r;
    const mp_plan *p;
    double y0, ymax;
    size_t mixes; /* the striped fills defined so far */
} addr_view;

static double ay(const addr_view *v, double bytes) { return v->y0 + ADDR_H - bytes / v->ymax * ADDR_H; }

static bool in_window(const mp_report *r, uint64_t t0, uint64_t t1) { return t0 <= r->t_end && t1 >= r->t_start; }

/* The x of a time clamped to the window (UINT64_MAX: its end). */
static double ax(const mp_report *r, uint64_t t)
{
    return x_of(r, t < r->t_start ? r->t_start : t > r->t_end ? r->t_end : t);
}

static int box_order(const void *a, const void *b)
{
    const box *x = a, *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    return (x->x0 > y->x0) - (x->x0 < y->x0);
}

static void label_in(FILE *f, double x0, double x1, double top, double bottom, const char *text)
{
    size_t room = (size_t)((x1 - x0 - 4) / (LABEL_PX * 0.9));
    if (bottom - top < LABEL_H || room < 4)
        return;
    char cut[TRACE_NAME_MAX + 32];
    snprintf(cut, sizeof cut, "%.*s", (int)(room < sizeof cut - 1 ? room : sizeof cut - 1), text);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"#111\" pointer-events=\"none\">", x0 + 2,
            (top + bottom) / 2 + 3.2);
    put_escaped(f, cut);
    fputs("</text>\n", f);
}

/* The fill of a run of boxes: their category's colour, or for categories
 * interleaved, diagonal stripes of each as wide as its share of the bytes
 * (a pattern of the run's own, defined where it is first used). */
static void run_fill(FILE *f, addr_view *v, const box *b, size_t n, char *buf, size_t cap)
{
    uint64_t by[FERRY_MEM_CATEGORY_COUNT] = {0};
    double total = 0;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        k += by[b[i].cat] == 0;
        by[b[i].cat] += b[i].bytes ? b[i].bytes : 1;
        total += (double)(b[i].bytes ? b[i].bytes : 1);
    }
    if (k == 1) {
        snprintf(buf, cap, "%s", colour[b[0].cat]);
        return;
    }
    snprintf(buf, cap, "url(#mix-%zu)", v->mixes);
    double width[FERRY_MEM_CATEGORY_COUNT], sum = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++) {
        width[c] = by[c] ? 1.5 + 10.0 * (double)by[c] / total : 0; /* each seen, however small */
        sum += width[c];
    }
    fprintf(f, "<defs><pattern id=\"mix-%zu\" width=\"%.2f\" height=\"8\" patternUnits=\"userSpaceOnUse\" "
               "patternTransform=\"rotate(45)\">",
            v->mixes++, sum);
    double at = 0;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++)
        if (by[c]) {
            fprintf(f, "<rect x=\"%.2f\" y=\"0\" width=\"%.2f\" height=\"8\" fill=\"%s\"/>", at, width[c],
                    colour[c]);
            at += width[c];
        }
    fputs("</pattern></defs>\n", f);
}

/* What a run of several boxes holds, in words: "params 2.9 GiB, grads 2.9 GiB". */
static void run_words(const box *b, size_t n, char *buf, size_t cap, bool sizes)
{
    uint64_t by[FERRY_MEM_CATEGORY_COUNT] = {0};
    size_t count[FERRY_MEM_CATEGORY_COUNT] = {0};
    for (size_t k = 0; k < n; k++) {
        by[b[k].cat] += b[k].bytes;
        count[b[k].cat]++;
    }
    size_t len = 0;
    buf[0] = '\0';
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT && len < cap; c++) {
        if (!count[c])
            continue;
        char sz[32];
        const char *name = ferry_mem_category_name((ferry_mem_category)c);
        if (sizes)
            len += (size_t)snprintf(buf + len, cap - len, "%s%zu of %s (%s)", len ? ", " : "", count[c], name,
                                    units_fmt_bytes(sz, sizeof sz, by[c]));
        else
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", name);
    }
}

/* Boxes b[0..n) as one rectangle (several when they are thin neighbours). */
static void draw_run(FILE *f, addr_view *v, const char *cls, const char *key, const box *b, size_t n)
{
    uint64_t bytes = 0;
    for (size_t k = 0; k < n; k++)
        bytes += b[k].bytes;
    double top = ay(v, (double)b[0].lo + (double)bytes), bottom = ay(v, (double)b[0].lo);
    double h = bottom - top < 0.2 ? 0.2 : bottom - top;
    char fill[32];
    if (!b[0].ghost)
        run_fill(f, v, b, n, fill, sizeof fill);
    fprintf(f, "<rect class=\"%s\" data-%s=\"%llu\" data-bytes=\"%llu\" data-count=\"%zu\" x=\"%.2f\" y=\"%.2f\" "
               "width=\"%.2f\" height=\"%.2f\" ",
            cls, key, (unsigned long long)b[0].key, (unsigned long long)bytes, n, b[0].x0, top,
            b[0].x1 - b[0].x0 > 0.2 ? b[0].x1 - b[0].x0 : 0.2, h);
    if (b[0].ghost)
        fprintf(f, "fill=\"none\" stroke=\"%s\" stroke-dasharray=\"3,2\">", colour[b[0].cat]);
    else
        fprintf(f, "fill=\"%s\"%s>", fill, h >= 2 ? " stroke=\"#fff\" stroke-width=\"0.4\"" : "");
    char label[256], sz[32], what[200];
    units_fmt_bytes(sz, sizeof sz, bytes);
    fputs("<title>", f);
    if (n == 1) {
        put_escaped(f, b[0].name);
        fprintf(f, ": %s of %s at %s %llu%s", sz, ferry_mem_category_name((ferry_mem_category)b[0].cat), key,
                (unsigned long long)b[0].key, b[0].ghost ? ", planned but never placed" : "");
        snprintf(label, sizeof label, "%s", b[0].name);
    } else {
        run_words(b, n, what, sizeof what, true);
        fprintf(f, "%zu buffers, %s from %s %llu: %s; '", n, sz, key, (unsigned long long)b[0].key, what);
        put_escaped(f, b[0].name);
        fputs("' to '", f);
        put_escaped(f, b[n - 1].name);
        fputs("'", f);
        run_words(b, n, what, sizeof what, false);
        snprintf(label, sizeof label, "%zu buffers (%s)", n, what);
    }
    fputs("</title></rect>\n", f);
    label_in(f, b[0].x0, b[0].x1, top, bottom, label);
}

/* Boxes by offset; neighbours thinner than SMALL_PX that touch and share a
 * lifetime go in one rectangle (striped when their categories differ), so
 * that a model of hundreds of small buffers stays readable. Sorts b. */
static void draw_boxes(FILE *f, addr_view *v, const char *cls, const char *key, box *b, size_t n)
{
    qsort(b, n, sizeof *b, box_order);
    double px_per_byte = ADDR_H / v->ymax;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        bool small = (double)b[i].bytes * px_per_byte < SMALL_PX;
        while (small && j < n && (double)b[j].bytes * px_per_byte < SMALL_PX && b[j].ghost == b[i].ghost &&
               b[j].lo == b[j - 1].lo + b[j - 1].bytes && fabs(b[j].x0 - b[i].x0) < 0.5 &&
               fabs(b[j].x1 - b[i].x1) < 0.5)
            j++;
        draw_run(f, v, cls, key, b + i, j - i);
        i = j;
    }
}

/* One slot's occupancies at bytes [lo, ...) of the panel: a rectangle per
 * group's stay, stays narrower than THIN_PX drawn together. */
static void draw_stays(FILE *f, const addr_view *v, uint64_t lo, size_t slot, size_t block)
{
    const mp_plan *p = v->p;
    const mp_report *r = v->r;
    size_t pending = 0;
    double px0 = 0, px1 = 0;
    uint64_t pbytes = 0, pt0 = 0, pt1 = 0;
    int pcat = 0;
    for (size_t i = 0; i <= p->nocc; i++) {
        const mp_occupancy *o = i < p->nocc ? &p->occ[i] : NULL;
        if (o && (o->slot != slot || o->block != block || !in_window(r, o->t0, o->t1)))
            continue;
        double x0 = o ? ax(r, o->t0) : 0, x1 = o ? ax(r, o->t1) : 0;
        bool thin = o && x1 - x0 < THIN_PX;
        if (pending && (!thin || x0 > px1 + THIN_PX)) { /* the thin stays so far, as one */
            double top = ay(v, (double)lo + (double)pbytes), bottom = ay(v, (double)lo);
            fprintf(f, "<rect class=\"occupancy\" data-offset=\"%llu\" data-count=\"%zu\" x=\"%.2f\" y=\"%.2f\" "
                       "width=\"%.2f\" height=\"%.2f\" fill=\"%s\"><title>%zu stays of groups, %.3f to %.3f ms"
                       "</title></rect>\n",
                    (unsigned long long)lo, pending, px0, top, px1 - px0 > 0.2 ? px1 - px0 : 0.2, bottom - top,
                    colour[pcat], pending, (double)pt0 / 1e6, (double)pt1 / 1e6);
            pending = 0;
        }
        if (!o)
            break;
        if (thin) {
            px0 = pending ? px0 : x0;
            pt0 = pending ? pt0 : o->t0;
            px1 = x1;
            pt1 = o->t1;
            pbytes = o->bytes > pbytes ? o->bytes : pbytes;
            pcat = o->category;
            pending++;
            continue;
        }
        double top = ay(v, (double)lo + (double)o->bytes), bottom = ay(v, (double)lo);
        fprintf(f, "<rect class=\"occupancy\" data-offset=\"%llu\" data-group=\"%lld\" data-count=\"1\" x=\"%.2f\" "
                   "y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" fill-opacity=\"%s\" stroke=\"#fff\" "
                   "stroke-width=\"0.6\"><title>",
                (unsigned long long)lo, (long long)o->group, x0, top, x1 - x0, bottom - top, colour[o->category],
                o->group % 2 ? "0.75" : "1");
        put_escaped(f, o->name);
        fprintf(f, " (group %lld): %llu bytes of %s, %.3f ms to ", (long long)o->group, (unsigned long long)o->bytes,
                ferry_mem_category_name((ferry_mem_category)o->category), (double)o->t0 / 1e6);
        if (o->t1 == UINT64_MAX)
            fputs("the end</title></rect>\n", f);
        else
            fprintf(f, "%.3f ms</title></rect>\n", (double)o->t1 / 1e6);
        label_in(f, x0, x1, top, bottom, o->name);
    }
}

/* The region: each planned buffer over its lifetime in the trace, slots
 * with their stays, the embedder's range with its allocations. */
static ferry_status draw_region(FILE *f, addr_view *v)
{
    const mp_plan *p = v->p;
    const mp_report *r = v->r;
    box *b = malloc((p->nbuf + p->nblocks + 1) * sizeof *b);
    if (!b)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < p->nbuf; i++) {
        const mp_planned *x = &p->buf[i];
        /* a range (never placed itself) from the region's reservation; so a buffer never placed, in outline */
        uint64_t t0 = x->placed ? x->t_placed : p->t_region, t1 = x->placed ? x->t_freed : UINT64_MAX;
        if (!in_window(r, t0, t1))
            continue;
        double x0 = ax(r, t0), x1 = ax(r, t1);
        if (x->role == TRACE_ROLE_BUFFER) {
            b[n++] = (box){x->offset, x->bytes, x->offset, x0, x1, x->category, !x->placed, x->name};
            continue;
        }
        bool range = x->role == TRACE_ROLE_RANGE;
        double top = ay(v, (double)x->offset + (double)x->bytes), bottom = ay(v, (double)x->offset);
        fprintf(f, "<rect class=\"%s\" data-offset=\"%llu\" data-bytes=\"%llu\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                   "height=\"%.2f\" fill=\"%s\" stroke=\"%s\" stroke-width=\"0.6\"%s><title>",
                range ? "range" : "slot", (unsigned long long)x->offset, (unsigned long long)x->bytes, x0, top,
                x1 - x0, bottom - top, range ? "none" : EMPTY_SLOT, range ? colour[x->category] : "#bbb",
                range ? " stroke-dasharray=\"4,3\"" : "");
        put_escaped(f, x->name);
        fprintf(f, ": %llu bytes at offset %llu</title></rect>\n", (unsigned long long)x->bytes,
                (unsigned long long)x->offset);
        if (!range)
            draw_stays(f, v, x->offset, i, (size_t)-1);
    }
    draw_boxes(f, v, "planned", "offset", b, n);
    n = 0;
    for (size_t i = 0; i < p->nblocks; i++) {
        const mp_block *k = &p->blocks[i];
        if (k->in_region && in_window(r, k->t0, k->t1))
            b[n++] = (box){k->addr - p->base, k->bytes, k->addr - p->base, ax(r, k->t0), ax(r, k->t1), k->category,
                           false, k->name};
    }
    draw_boxes(f, v, "suballoc", "offset", b, n);
    free(b);
    return FERRY_OK;
}

/* The dynamic heap's allocations in the window, by address, packed above
 * the region with the gaps between them left out: *top is where they end. */
typedef struct dyn_layout {
    box *b;          /* lo: the packed offset; key: the address */
    size_t n;
    uint64_t top;    /* the packed bytes above the region */
} dyn_layout;

static int by_addr(const void *a, const void *b)
{
    const box *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

static ferry_status dyn_pack(const addr_view *v, dyn_layout *d)
{
    const mp_plan *p = v->p;
    const mp_report *r = v->r;
    memset(d, 0, sizeof *d);
    d->b = malloc((p->nblocks + 1) * sizeof *d->b);
    if (!d->b)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "memprof: out of memory");
    for (size_t i = 0; i < p->nblocks; i++) {
        const mp_block *k = &p->blocks[i];
        if (!k->in_region && in_window(r, k->t0, k->t1))
            d->b[d->n++] = (box){0, k->bytes, k->addr, ax(r, k->t0), ax(r, k->t1), k->category, false, k->name};
    }
    qsort(d->b, d->n, sizeof *d->b, by_addr);
    uint64_t seg_addr = 0, seg_end = 0, packed = p->region_bytes;
    for (size_t i = 0; i < d->n; i++) {
        box *x = &d->b[i];
        uint64_t end = x->bytes > UINT64_MAX - x->key ? UINT64_MAX : x->key + x->bytes;
        if (i == 0 || x->key >= seg_end) { /* a new stretch of addresses, right above the last */
            packed += seg_end - seg_addr;
            seg_addr = x->key;
            seg_end = end;
        } else if (end > seg_end) {
            seg_end = end;
        }
        x->lo = packed + (x->key - seg_addr);
    }
    d->top = packed + (seg_end - seg_addr) - p->region_bytes;
    return FERRY_OK;
}

/* The occupancies of slots the dynamic heap holds (res_grow's, beyond the plan). */
static void dyn_stays(FILE *f, const addr_view *v, const dyn_layout *d)
{
    const mp_plan *p = v->p;
    for (size_t i = 0; i < p->nblocks; i++) {
        bool held = false;
        for (size_t k = 0; k < p->nocc && !held; k++)
            held = p->occ[k].block == i;
        if (!held)
            continue;
        for (size_t k = 0; k < d->n; k++)
            if (d->b[k].key == p->blocks[i].addr)
                draw_stays(f, v, d->b[k].lo, (size_t)-1, i);
    }
}

static void addr_legend(FILE *f, const addr_view *v, const bool *cats)
{
    double x = W - RIGHT + 10, y = v->y0 + 20;
    char b[32];
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-width=\"1.5\"/>\n"
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">end of the region:</text>\n"
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s planned</text>\n",
            x, y - 4, x + 12, y - 4, x + 18, y, x + 18, y + 13, units_fmt_bytes(b, sizeof b, v->p->region_bytes));
    y += 36;
    for (int c = 0; c < FERRY_MEM_CATEGORY_COUNT; c++) {
        if (!cats[c])
            continue;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x, y - 10, colour[c]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", x + 18, y,
                ferry_mem_category_name((ferry_mem_category)c));
        y += 18;
    }
    if (v->p->slots) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\" stroke=\"#bbb\"/>\n", x, y - 10,
                EMPTY_SLOT);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">a slot, empty</text>\n", x + 18, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">(held: the group's name)</text>\n",
                x + 18, y + 13);
        y += 31;
    }
    if (v->p->ranges) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"none\" stroke=\"#333\" "
                   "stroke-dasharray=\"4,3\"/>\n",
                x, y - 10);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">the embedder's range</text>\n", x + 18, y);
        y += 18;
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">thin neighbours drawn as one;</text>\n"
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">hover for names and sizes</text>\n",
            x, y + 6, x, y + 19);
}

/* The region's end (the dynamic heap's allocations are above it, by
 * address, gaps left out) and the budget. */
static void addr_lines(FILE *f, const addr_view *v, uint64_t limit)
{
    char b[32];
    double y = ay(v, (double)v->p->region_bytes);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-width=\"1.5\"/>\n",
            LEFT, y, W - RIGHT, y);
    if (limit && (double)limit <= v->ymax) {
        y = ay(v, (double)limit);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" stroke-dasharray=\"6,3\"/>\n"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\" fill=\"#c00\">budget %s</text>\n",
                LEFT, y, W - RIGHT, y, W - RIGHT - 4, y + 13, units_fmt_bytes(b, sizeof b, limit));
    }
}

static ferry_status addr_panel(FILE *f, const mp_report *r, const mp_plan *p, double y0)
{
    addr_view v = {.r = r, .p = p, .y0 = y0, .ymax = 1};
    dyn_layout d;
    ferry_status st = dyn_pack(&v, &d);
    if (st != FERRY_OK)
        return st;
    uint64_t limit = r->pool[TRACE_POOL_DEVICE].limit, shown = p->region_bytes + d.top;
    for (size_t i = 0; i < p->nbuf; i++) /* a plan past its region (a wrong one) is drawn whole */
        if (p->buf[i].offset < UINT64_MAX - p->buf[i].bytes && p->buf[i].offset + p->buf[i].bytes > shown)
            shown = p->buf[i].offset + p->buf[i].bytes;
    v.ymax = (double)shown * 1.05;
    if (limit && (double)limit < (double)shown * 3.0 && (double)limit * 1.05 > v.ymax)
        v.ymax = (double)limit * 1.05;
    if (v.ymax <= 0)
        v.ymax = 1;
    char rb[32], db[32];
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">device address space: the planned "
               "region (%s, %zu buffers) from offset 0, the dynamic heap above (%s)</text>\n",
            LEFT, y0 - 10, units_fmt_bytes(rb, sizeof rb, p->region_bytes), p->nbuf,
            units_fmt_bytes(db, sizeof db, d.top));
    axis_y(f, y0, ADDR_H, v.ymax);
    fprintf(f, "<g class=\"address-space\">\n");
    st = draw_region(f, &v);
    if (st == FERRY_OK) {
        draw_boxes(f, &v, "dynamic", "addr", d.b, d.n);
        dyn_stays(f, &v, &d);
    }
    fputs("</g>\n", f);
    addr_lines(f, &v, limit);
    marks(f, r, y0, ADDR_H);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", LEFT, y0,
            W - LEFT - RIGHT, ADDR_H);
    axis_x(f, y0, ADDR_H, r->t_end - r->t_start);
    bool cats[FERRY_MEM_CATEGORY_COUNT] = {false};
    for (size_t i = 0; i < p->nbuf; i++)
        cats[p->buf[i].category] = true;
    for (size_t i = 0; i < p->nblocks; i++)
        cats[p->blocks[i].category] = true;
    addr_legend(f, &v, cats);
    free(d.b);
    return st;
}

/* The picture into `f`. */
static ferry_status draw(FILE *f, const mp_report *r, const mp_plan *plan, const char *title)
{
    int panels = 0;
    for (int p = 0; p < MP_POOLS; p++)
        panels += r->pool[p].seen;
    bool address = plan && plan->present;
    double h = TOP + (panels ? panels : 1) * (PANEL_H + GAP) + (address ? ADDR_H + GAP : 0);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%.1f\" y=\"20\" font-size=\"15\">",
            W, h, W, h, LEFT);
    put_escaped(f, title);
    fputs("</text>\n", f);
    double y0 = TOP + 25;
    for (int p = 0; p < MP_POOLS; p++) {
        if (!r->pool[p].seen)
            continue;
        panel(f, r, p, y0);
        y0 += PANEL_H + GAP;
    }
    if (!panels) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">no allocations in this trace</text>\n", LEFT,
                TOP + 40);
        y0 += PANEL_H + GAP;
    }
    ferry_status st = address ? addr_panel(f, r, plan, y0) : FERRY_OK;
    fputs("</svg>\n", f);
    return st;
}

/* Drawn in memory, then saved through the one atomic writer: a failed or
 * interrupted write leaves any earlier picture whole. */
ferry_status mp_write_svg(const mp_report *r, const mp_plan *plan, const char *path, const char *title)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "drawing '%s': out of memory", path);
    ferry_status drawn = draw(f, r, plan, title);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || drawn != FERRY_OK) {
        free(text);
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "drawing '%s': out of memory", path);
    }
    fileio_atomic a;
    ferry_status st = fileio_atomic_open(&a, path);
    if (st == FERRY_OK)
        st = fileio_atomic_write(&a, text, len);
    if (st == FERRY_OK)
        st = fileio_atomic_commit(&a);
    else
        fileio_atomic_abort(&a);
    free(text);
    return st;
}
