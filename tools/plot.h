/* plot.h: line charts written as SVG, side by side: bench's t/s against context
 * depth, prefill in one panel and decode in the other, each on its own scale. */
#ifndef AL_PLOT_H
#define AL_PLOT_H

#include <stdbool.h>

enum { PLOT_MAX_POINTS = 16, PLOT_MAX_SERIES = 16 };

typedef struct plot_series {
    char label[96];
    char key[96]; /* series with the same key have the same colour (one backend) */
    double x[PLOT_MAX_POINTS], y[PLOT_MAX_POINTS];
    int n;
} plot_series;

typedef struct plot_panel {
    const char *title, *x_label, *y_label;
    plot_series s[PLOT_MAX_SERIES];
    int n_series;
} plot_panel;

/* Writes the panels, left to right, to path; series of the same key have one colour
 * and a line style per panel (solid, then dashed). 0, or an exit status with the message printed. */
int plot_svg(const char *path, const char *title, const plot_panel *p, int n_panels);

#endif /* AL_PLOT_H */
