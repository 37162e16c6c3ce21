/* The device's layout as a picture (memprof plan --layout-svg FILE): the
 * card's memory as one column, address 0 at the bottom, the static plan's
 * buffers at their offsets, coloured by category, then what the budget
 * leaves beside the plan (the arena's dynamic region), then, with --card,
 * what the CUDA context and the libraries take; runs of like buffers (the
 * 49 residual streams of GPT-2 XL, each block's weights and gradients) are
 * one band with one label, so the picture says where every byte is and
 * what grows with the batch. Owns the drawing only: the layout is
 * gpt2_plan_layout's (engine_plan_layout's). */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "common/units.h"
#include "tools/memprof/memprof.h"

#define COL_X 130
#define COL_W 170
#define TOP 70
#define HEIGHT 860
#define LABEL_X (COL_X + COL_W + 40)
#define LINE_H 15

/* Categories' colours, as in the timeline (mp_svg.c), by ferry_mem_category. */
static const char *cat_colour(ferry_mem_category c)
{
    static const char *const colours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                          "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
    return colours[(unsigned)c % (sizeof colours / sizeof colours[0])];
}

/* A buffer's family: its name with every number taken out ("block 7
 * weights" and "block 8 weights" are one family). */
static void family_of(const char *name, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < cap; p++) {
        if (isdigit((unsigned char)*p)) {
            while (isdigit((unsigned char)p[1]))
                p++;
            if (n + 1 < cap)
                out[n++] = '#';
            continue;
        }
        out[n++] = *p;
    }
    out[n] = '\0';
}

typedef struct band {
    uint64_t lo, hi;    /* bytes [lo, hi) of the card */
    const char *fill;
    char label[320];
} band;

static bool same_family(const engine_layout_entry *a, const engine_layout_entry *b)
{
    char fa[112], fb[112];
    family_of(a->name, fa, sizeof fa);
    family_of(b->name, fb, sizeof fb);
    return a->cat == b->cat && !strcmp(fa, fb);
}

/* Whether two names share a qualifier: the same words up to a ')' ("block
 * (recomputed, shared) qkv" and "block (recomputed, shared) ln1"). */
static bool same_qualifier(const char *a, const char *b)
{
    const char *close = strchr(a, ')');
    return close && close - a >= 8 && !strncmp(a, b, (size_t)(close - a + 1));
}

/* The labels: runs of buffers that repeat with a period of one or two (the
 * residual streams; each block's weights then its gradients), that share
 * a qualifier, or that each take under a 200th of the column, are one label
 * each. */
static int layout_bands(const engine_layout_entry *e, int n, uint64_t scale, band *out, int cap)
{
    int nb = 0;
    uint64_t small = scale / 200;
    for (int i = 0; i < n && nb < cap;) {
        int period = 0, j = i + 1;
        if (j < n && same_family(&e[i], &e[j]))
            period = 1;
        else if (i + 3 < n && same_family(&e[i + 2], &e[i]) && same_family(&e[i + 3], &e[i + 1]))
            period = 2, j = i + 4;
        while (j < n && ((period && same_family(&e[j], &e[j - period])) ||
                         (!period && same_qualifier(e[i].name, e[j].name)) ||
                         (e[j].bytes < small && e[j - 1].bytes < small && e[j].cat == e[j - 1].cat)))
            j++;
        band *b = &out[nb++];
        b->lo = e[i].offset;
        b->hi = e[j - 1].offset + e[j - 1].bytes;
        b->fill = cat_colour(e[i].cat);
        char sz[32], each[32];
        units_fmt_bytes(sz, sizeof sz, b->hi - b->lo);
        if (j - i == 1)
            snprintf(b->label, sizeof b->label, "%.110s: %s", e[i].name, sz);
        else if (period == 1 && e[i].bytes == e[j - 1].bytes)
            snprintf(b->label, sizeof b->label, "%.110s .. %.110s: %d x %s = %s", e[i].name, e[j - 1].name, j - i,
                     units_fmt_bytes(each, sizeof each, e[i].bytes), sz);
        else
            snprintf(b->label, sizeof b->label, "%.110s .. %.110s (%d buffers): %s", e[i].name, e[j - 1].name, j - i, sz);
        i = j;
    }
    return nb;
}

static double y_of(uint64_t at, uint64_t scale) { return TOP + HEIGHT - (double)at / (double)scale * HEIGHT; }

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* Labels at their bands' middles, pushed apart downwards then upwards so
 * no two overlap, each tied to its band by a line. */
static void draw_labels(FILE *f, const band *b, int nb, uint64_t scale)
{
    double y[256];
    for (int i = 0; i < nb; i++)
        y[i] = (y_of(b[i].lo, scale) + y_of(b[i].hi, scale)) / 2 + 4;
    /* bands go up the column: label i sits above label i-1 */
    for (int i = 1; i < nb; i++)
        if (y[i] > y[i - 1] - LINE_H)
            y[i] = y[i - 1] - LINE_H;
    for (int i = nb - 1; i >= 0; i--) {
        if (y[i] < TOP + 4)
            y[i] = TOP + 4;
        if (i > 0 && y[i - 1] < y[i] + LINE_H)
            y[i - 1] = y[i] + LINE_H;
    }
    for (int i = 0; i < nb; i++) {
        double mid = (y_of(b[i].lo, scale) + y_of(b[i].hi, scale)) / 2;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#999\" stroke-width=\"0.6\"/>\n",
                COL_X + COL_W, mid, LABEL_X - 4, y[i] - 4);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\">", LABEL_X, y[i]);
        xml_text(f, b[i].label);
        fputs("</text>\n", f);
    }
}

ferry_status mp_write_layout_svg(const char *path, const engine_layout_entry *e, int n, uint64_t region,
                                 uint64_t budget, uint64_t card, const char *title)
{
    band b[256];
    uint64_t top = region;
    if (budget > top) top = budget;
    if (card > top) top = card;
    if (top == 0)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "memprof plan --layout-svg: the plan holds no device byte");
    int nb = layout_bands(e, n, top, b, 250), n_planned = nb;
    char sz[32], sz2[32];
    if (budget > region) {
        band *x = &b[nb++];
        x->lo = region, x->hi = budget, x->fill = "#eeeeee";
        snprintf(x->label, sizeof x->label, "free under the budget (the arena's dynamic region): %s",
                 units_fmt_bytes(sz, sizeof sz, budget - region));
    }
    if (card > budget && budget) {
        band *x = &b[nb++];
        x->lo = budget, x->hi = card, x->fill = "#bbbbbb";
        snprintf(x->label, sizeof x->label, "the CUDA context and libraries (--card-reserve): %s",
                 units_fmt_bytes(sz, sizeof sz, card - budget));
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(FERRY_ERR_IO, "memprof plan --layout-svg: cannot create '%s': %s", path, strerror(errno));
    int h = TOP + HEIGHT + 60, w = LABEL_X + 660;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w, h, w, h);
    fprintf(f, "<text x=\"10\" y=\"24\" font-size=\"14\" font-weight=\"bold\">");
    xml_text(f, title);
    fprintf(f, "</text>\n<text x=\"10\" y=\"44\" font-size=\"12\">the static memory plan: %d buffers in a region of "
               "%s, each at its offset, address 0 at the bottom",
            n, units_fmt_bytes(sz, sizeof sz, region));
    fputs("</text>\n", f);
    uint64_t by_cat[FERRY_MEM_CATEGORY_SLOTS] = {0};
    for (int i = 0; i < n; i++)
        if ((unsigned)e[i].cat < FERRY_MEM_CATEGORY_SLOTS)
            by_cat[e[i].cat] += e[i].bytes;
    for (int i = 0; i < n; i++) { /* every planned buffer, its name and size on hover */
        double y0 = y_of(e[i].offset + e[i].bytes, top), y1 = y_of(e[i].offset, top);
        fprintf(f, "<rect class=\"buffer\" x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\" "
                   "stroke=\"white\" stroke-width=\"%s\"><title>",
                COL_X, y0, COL_W, y1 - y0 > 0.3 ? y1 - y0 : 0.3, cat_colour(e[i].cat), y1 - y0 > 3 ? "0.4" : "0");
        xml_text(f, e[i].name);
        fprintf(f, ": %s at offset %llu</title></rect>\n", units_fmt_bytes(sz2, sizeof sz2, e[i].bytes),
                (unsigned long long)e[i].offset);
    }
    for (int i = n_planned; i < nb; i++) { /* what the budget and the card add */
        double y0 = y_of(b[i].hi, top), y1 = y_of(b[i].lo, top);
        fprintf(f, "<rect class=\"outside\" x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\"/>\n",
                COL_X, y0, COL_W, y1 - y0, b[i].fill);
    }
    /* the legend: each category present and its bytes in the plan */
    int lx = 10;
    for (int c = 0; c < FERRY_MEM_CATEGORY_SLOTS; c++)
        if (by_cat[c]) {
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text class=\"legend\" "
                       "x=\"%d\" y=\"%d\" font-size=\"11\">%s %s</text>\n",
                    lx, h - 30, cat_colour((ferry_mem_category)c), lx + 16, h - 20,
                    ferry_mem_category_name((ferry_mem_category)c), units_fmt_bytes(sz, sizeof sz, by_cat[c]));
            lx += 170;
        }
    /* the budget's line and the axis' ticks */
    if (budget) {
        double y = y_of(budget, top);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#c00\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"5,3\"/>\n<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#c00\" "
                   "text-anchor=\"end\">budget %s</text>\n",
                COL_X - 6, y, COL_X + COL_W + 6, y, COL_X - 8, y + 4, units_fmt_bytes(sz, sizeof sz, budget));
    }
    for (int k = 0; k <= 4; k++) {
        uint64_t at = top / 4 * (uint64_t)k;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">%s</text>\n",
                COL_X - 8, y_of(at, top) + (k == 4 ? 10 : k == 0 ? -2 : 4), units_fmt_bytes(sz2, sizeof sz2, at));
    }
    draw_labels(f, b, nb, top);
    fputs("</svg>\n", f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return err_set(FERRY_ERR_IO, "memprof plan --layout-svg: writing '%s' failed", path);
    return FERRY_OK;
}
