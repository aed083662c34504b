/* progress.h: a progress line on stderr for work that takes more than about a second:
 * done / total, rate, ETA. Drawn only when stderr is a terminal, redrawn in place, and
 * erased when the work ends, so pipes and logs never see it. */
#ifndef AL_PROGRESS_H
#define AL_PROGRESS_H

#include <stdbool.h>

typedef struct progress {
    const char *what; /* "prompt", "perplexity", ... */
    const char *unit; /* "tokens" */
    long total;
    double t0, last;  /* start, last redraw (seconds) */
    double after;     /* seconds before the line first appears */
    bool tty, shown;
} progress;

void progress_start(progress *p, const char *what, const char *unit, long total);
/* Redraws at most a few times a second, and not before a second has passed
 * (ANYLLM_PROGRESS_AFTER=S: S seconds). */
void progress_update(progress *p, long done);
/* Erases the line if it was drawn. */
void progress_end(progress *p);

#endif /* AL_PROGRESS_H */
