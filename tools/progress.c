/* progress.c: see progress.h. */
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* Seconds before the line appears: 1, or ANYLLM_PROGRESS_AFTER (tests set 0, so that
 * the line shows however fast the machine reads their prompt). */
static double show_after(void) {
    const char *e = getenv("ANYLLM_PROGRESS_AFTER");
    char *end;
    double s = e && *e ? strtod(e, &end) : 1.0;
    return e && *e && !*end && s >= 0 && s <= 3600 ? s : 1.0;
}

void progress_start(progress *p, const char *what, const char *unit, long total) {
    double now = cli_now_s();
    *p = (progress){.what = what, .unit = unit, .total = total, .t0 = now, .last = now,
                    .after = show_after(), .tty = isatty(2) == 1};
}

void progress_update(progress *p, long done) {
    if (!p->tty) return;
    double now = cli_now_s(), el = now - p->t0;
    if (el < p->after || el <= 0 || (p->shown && now - p->last < 0.25)) return;
    double rate = done / el;
    double eta = rate > 0 && p->total > done ? (p->total - done) / rate : 0;
    fprintf(stderr, "\r\033[K%s: %ld/%ld %s, %.1f %s/s, ETA %.0f s", p->what, done, p->total,
            p->unit, rate, p->unit, eta);
    fflush(stderr);
    p->shown = true;
    p->last = now;
}

void progress_end(progress *p) {
    if (p->shown) fprintf(stderr, "\r\033[K");
    p->shown = false;
}
