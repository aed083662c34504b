/* plot.c: see plot.h. Axes start at zero, so that lines of different backends compare
 * by height at a glance; ticks fall on 1, 2 or 5 times a power of ten. */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

enum { PANEL_W = 420, H = 440, LEFT = 70, GAP = 30, TOP = 56, BOTTOM = 60, LEGEND = 28 };

typedef struct frame {
    double x0, y0, w, h;     /* the plotting area in pixels */
    double x_max, y_max;     /* the data at its right and top edges */
} frame;

/* A step of 1, 2 or 5 times a power of ten giving about 5 ticks up to max. */
static double nice_step(double max) {
    double raw = max / 5, p = pow(10, floor(log10(raw)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

/* Text for SVG: the characters XML gives a meaning to, escaped. */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

static double px(const frame *fr, double x) { return fr->x0 + fr->w * x / fr->x_max; }
static double py(const frame *fr, double y) { return fr->y0 + fr->h - fr->h * y / fr->y_max; }

/* The frame, grid, tick labels and titles of one panel; fills fr's data range. */
static void draw_axes(FILE *f, const plot_panel *p, frame *fr) {
    double x_max = 0, y_max = 0;
    for (int i = 0; i < p->n_series; i++)
        for (int k = 0; k < p->s[i].n; k++) {
            if (p->s[i].x[k] > x_max) x_max = p->s[i].x[k];
            if (p->s[i].y[k] > y_max) y_max = p->s[i].y[k];
        }
    const double xs = nice_step(x_max > 0 ? x_max : 1), ys = nice_step(y_max > 0 ? y_max : 1);
    fr->x_max = xs * ceil((x_max > 0 ? x_max : 1) / xs);
    fr->y_max = ys * ceil((y_max > 0 ? y_max * 1.05 : 1) / ys);
    fprintf(f, "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='#888'/>\n",
            fr->x0, fr->y0, fr->w, fr->h);
    for (double v = 0; v <= fr->x_max * 1.0001; v += xs)
        fprintf(f, "<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' stroke='#ddd'/>\n"
                   "<text x='%.1f' y='%.0f' text-anchor='middle'>%g</text>\n",
                px(fr, v), fr->y0, px(fr, v), fr->y0 + fr->h, px(fr, v), fr->y0 + fr->h + 16, v);
    for (double v = 0; v <= fr->y_max * 1.0001; v += ys)
        fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='#ddd'/>\n"
                   "<text x='%.0f' y='%.1f' text-anchor='end'>%g</text>\n",
                fr->x0, py(fr, v), fr->x0 + fr->w, py(fr, v), fr->x0 - 6, py(fr, v) + 4, v);
    fprintf(f, "<text x='%.0f' y='%.0f' text-anchor='middle' font-weight='bold'>",
            fr->x0 + fr->w / 2, fr->y0 - 8);
    put_text(f, p->title);
    fprintf(f, "</text>\n<text x='%.0f' y='%.0f' text-anchor='middle'>", fr->x0 + fr->w / 2,
            fr->y0 + fr->h + 36);
    put_text(f, p->x_label);
    fprintf(f, "</text>\n<text x='%.0f' y='%.0f' text-anchor='middle' "
               "transform='rotate(-90 %.0f %.0f)'>",
            fr->x0 - 48, fr->y0 + fr->h / 2, fr->x0 - 48, fr->y0 + fr->h / 2);
    put_text(f, p->y_label);
    fprintf(f, "</text>\n");
}

static const char *const dash[] = {"", " stroke-dasharray='6 4'"};

static void draw_series(FILE *f, const frame *fr, const plot_series *s, const char *color,
                        int panel) {
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2'%s points='", color,
            dash[panel % 2]);
    for (int k = 0; k < s->n; k++) fprintf(f, "%.1f,%.1f ", px(fr, s->x[k]), py(fr, s->y[k]));
    fprintf(f, "'/>\n");
    for (int k = 0; k < s->n; k++)
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", px(fr, s->x[k]),
                py(fr, s->y[k]), color);
}

int plot_svg(const char *path, const char *title, const plot_panel *p, int n_panels) {
    static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                         "#9467bd", "#8c564b", "#e377c2", "#17becf"};
    const char *keys[PLOT_MAX_SERIES * 4];
    int n_keys = 0;
    FILE *f = fopen(path, "w");
    if (!f) return cli_fail("cannot write %s: %s", path, strerror(errno));
    const int w = LEFT + n_panels * (PANEL_W + GAP + LEFT);
    int n_legend = 0;
    for (int i = 0; i < n_panels; i++) n_legend += p[i].n_series;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
               "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
               "fill='white'/>\n<text x='%d' y='22' font-size='15'>", w, H + 18 * n_legend + 8,
            LEFT);
    put_text(f, title);
    fprintf(f, "</text>\n");
    int row = 0;
    for (int i = 0; i < n_panels; i++) {
        frame fr = {.x0 = LEFT + i * (PANEL_W + GAP + LEFT), .y0 = TOP, .w = PANEL_W,
                    .h = H - TOP - BOTTOM};
        draw_axes(f, &p[i], &fr);
        for (int k = 0; k < p[i].n_series; k++, row++) {
            const plot_series *s = &p[i].s[k];
            int c = 0;
            while (c < n_keys && strcmp(keys[c], s->key)) c++;
            if (c == n_keys && n_keys < (int)(sizeof keys / sizeof *keys)) keys[n_keys++] = s->key;
            draw_series(f, &fr, s, colors[c % 8], i);
            const int y = H + 4 + 18 * row;
            fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='2'%s/>"
                       "<text x='%d' y='%d'>", LEFT, y, LEFT + 24, y, colors[c % 8], dash[i % 2],
                    LEFT + 30, y + 4);
            put_text(f, s->label);
            fprintf(f, "</text>\n");
        }
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) return cli_fail("cannot write %s: %s", path, strerror(errno));
    return 0;
}
