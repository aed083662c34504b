/* bench_spec.h: `anyllm bench --spec ngram -f PROMPT`: decode speed with and without
 * speculative decoding, on a real prompt (drafts only pay where the text repeats, so
 * the synthetic tokens of tg measure nothing here).
 *
 * Per model and backend: the prompt's greedy continuation of -n tokens (end-of-turn
 * tokens masked, so every run generates as many), generated without drafts and with
 * them, alternating which goes first in each repetition after a warm-up of each. It
 * reports tg (tokens after the first per second of decoding, as run's summary) of
 * both, their ratio, the share of drafted tokens the model took, and whether the two
 * texts agree (they must: the drafts are checked against the model's own choice).
 */
#ifndef AL_BENCH_SPEC_H
#define AL_BENCH_SPEC_H

typedef struct spec_bench {
    const char *const *models;
    int n_models;
    const char *const *backends;
    int n_backends;
    int n_threads;
    int n_gen;          /* tokens per run (-n) */
    int reps;           /* timed pairs of runs (-r) */
    int draft_max;      /* --draft-max */
    const char *kind;   /* --spec: "ngram" or "draft" */
    const char *draft;  /* --model-draft FILE (kind "draft") */
    const char *prompt; /* -f FILE */
} spec_bench;

/* Runs and prints the table (markdown). 0 or an exit status (message printed). */
int bench_spec(const spec_bench *b);

#endif
