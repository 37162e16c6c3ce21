/* The timeline picture: for each pool, bytes in use stacked by category
 * over time (the whole run, or one step: mp_analyze_window), the budget as
 * a dashed line, the peak marked, and the phase markers as vertical lines,
 * thinned to where there is room and labelled only where the label fits
 * inside the frame and clear of the last one. Plain SVG 1.1, readable in
 * any browser. */
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

static void axis_y(FILE *f, double y0, double ymax)
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
        double y = y0 + PANEL_H - v * scale / ymax * PANEL_H;
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
static void axis_x(FILE *f, double y0, uint64_t t_end)
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
                y0 + PANEL_H + 16, v, secs ? "s" : "ms");
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
static void marks(FILE *f, const mp_report *r, double y0)
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
                x, y0, x, y0 + PANEL_H);
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
    axis_y(f, y0, ymax);
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
    marks(f, r, y0);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
            LEFT, y0, pw, PANEL_H);
    axis_x(f, y0, r->t_end - r->t_start);
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

/* The picture into `f`. */
static void draw(FILE *f, const mp_report *r, const char *title)
{
    int panels = 0;
    for (int p = 0; p < MP_POOLS; p++)
        panels += r->pool[p].seen;
    double h = TOP + (panels ? panels : 1) * (PANEL_H + GAP);
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
    if (!panels)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\">no allocations in this trace</text>\n", LEFT,
                TOP + 40);
    fputs("</svg>\n", f);
}

/* Drawn in memory, then saved through the one atomic writer: a failed or
 * interrupted write leaves any earlier picture whole. */
ferry_status mp_write_svg(const mp_report *r, const char *path, const char *title)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return err_set(FERRY_ERR_OUT_OF_MEMORY, "drawing '%s': out of memory", path);
    draw(f, r, title);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
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
