/* progress.c: see progress.h. */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "util.h"

void progress_start(progress *p, const char *what, const char *unit, long total) {
    double now = al_time_s();
    *p = (progress){.what = what, .unit = unit, .total = total, .t0 = now, .last = now,
                    .tty = isatty(2) == 1};
}

void progress_update(progress *p, long done) {
    if (!p->tty) return;
    double now = al_time_s(), el = now - p->t0;
    if (el < 1.0 || (p->shown && now - p->last < 0.25)) return;
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
