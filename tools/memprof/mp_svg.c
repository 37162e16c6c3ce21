/* The timeline picture: for each pool, bytes in use stacked by category
 * over time, the budget as a dashed line, the peak marked, and the phase
 * markers as vertical lines labelled where there is room. Plain SVG 1.1,
 * readable in any browser. */
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

static void marks(FILE *f, const mp_report *r, double y0)
{
    double last_label = -1e9;
    for (size_t i = 0; i < r->nmarks; i++) {
        double x = LEFT + (double)r->marks[i].t_ns / ((double)r->t_end + 1.0) * (W - LEFT - RIGHT);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
                   "stroke-width=\"0.6\" stroke-dasharray=\"2,2\"/>\n",
                x, y0, x, y0 + PANEL_H);
        if (x - last_label < 70.0)
            continue;
        last_label = x;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">", x + 2, y0 + 10);
        if (r->marks[i].step >= 0)
            fprintf(f, "%lld ", (long long)r->marks[i].step);
        put_escaped(f, r->marks[i].name);
        fputs("</text>\n", f);
    }
}

static void panel(FILE *f, const mp_report *r, int p, double y0)
{
    const mp_pool_report *pr = &r->pool[p];
    char b[32], l[32] = "";
    double ymax = (double)pr->peak * 1.1;
    if (pr->limit && (double)pr->limit < (double)pr->peak * 3.0 && (double)pr->limit * 1.05 > ymax)
        ymax = (double)pr->limit * 1.05;
    if (ymax <= 0)
        ymax = 1;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">%s memory: peak %s",
            LEFT, y0 - 10, p == TRACE_POOL_HOST ? "host" : "device", units_fmt_bytes(b, sizeof b, pr->peak));
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
    double px = LEFT + (double)pr->peak_t_ns / ((double)r->t_end + 1.0) * pw;
    double py = y0 + PANEL_H - (double)pr->peak / ymax * PANEL_H;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"/>\n",
            px, py);
    marks(f, r, y0);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
            LEFT, y0, pw, PANEL_H);
    axis_x(f, y0, r->t_end);
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
