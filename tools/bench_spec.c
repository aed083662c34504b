/* bench_spec.c: decode speed with and without speculative decoding (bench_spec.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_spec.h"
#include "gen.h"

typedef struct spec_row {
    double plain[2], spec[2]; /* mean and sd of tg, t/s */
    double accepted;          /* % of drafted tokens taken */
    bool same;                /* the two texts agree */
} spec_row;

/* One greedy run of n tokens; *ts its tg, *text (freed by the caller) its text. */
static int one_run(al_context *c, const al_vocab *v, int n_vocab, al_sampler *smp,
                   const int32_t *ids, int n_ids, int n_gen, spec_state *spec, double *ts,
                   char **text) {
    al_context_reset(c);
    al_sampler_reset(smp);
    reply_buf reply = {0};
    gen_sink sink = {.reply = &reply, .shown = -1, .silent = true};
    gen_params gp = {.n_max = n_gen, .ignore_eos = true, .quiet_full = true, .spec = spec};
    gen_stats gs;
    int rc = generate(c, v, n_vocab, smp, ids, n_ids, &gp, &sink, &gs);
    *ts = gs.t_gen > 0 && gs.n_gen > 1 ? (gs.n_gen - 1) / gs.t_gen : 0;
    *text = reply.s;
    return rc;
}

static void mean_sd(const double *x, int n, double out[2]) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++)
        s += x[i], s2 += x[i] * x[i];
    out[0] = s / n;
    out[1] = n > 1 ? sqrt(fmax(0, (s2 - n * out[0] * out[0]) / (n - 1))) : 0;
}

/* The timed pairs on a loaded model and its context, the drafts from sg. */
static int measure(const spec_bench *b, al_context *c, const al_vocab *v, int n_vocab,
                   const int32_t *ids, int n_ids, spec_state *sg, spec_row *row) {
    al_sampler_params sp = al_sampler_default_params();
    sp.temperature = 0;
    al_sampler *smp = NULL;
    if (al_sampler_create(&sp, n_vocab, &smp) != AL_OK) return cli_fail_status(AL_ERR_NOMEM);
    double plain[100], spec[100];
    char *text[2] = {NULL, NULL};
    int rc = 0;
    /* a warm-up of each, whose texts are compared */
    for (int m = 0; m < 2 && !rc; m++) {
        spec_restart(sg);
        rc = one_run(c, v, n_vocab, smp, ids, n_ids, b->n_gen, m ? sg : NULL, &plain[0], &text[m]);
    }
    row->same = !rc && text[0] && text[1] && !strcmp(text[0], text[1]);
    sg->n_drafts = sg->n_drafted = sg->n_accepted = 0;
    for (int r = 0; r < b->reps && !rc; r++)
        for (int k = 0; k < 2 && !rc; k++) { /* which goes first alternates */
            bool with = (r + k) % 2 == 1;
            char *t = NULL;
            spec_restart(sg);
            rc = one_run(c, v, n_vocab, smp, ids, n_ids, b->n_gen, with ? sg : NULL,
                         with ? &spec[r] : &plain[r], &t);
            free(t);
        }
    if (!rc) {
        mean_sd(plain, b->reps, row->plain);
        mean_sd(spec, b->reps, row->spec);
        row->accepted = sg->n_drafted ? 100.0 * sg->n_accepted / sg->n_drafted : 0;
    }
    free(text[0]);
    free(text[1]);
    al_sampler_destroy(smp);
    return rc;
}

/* The drafter for a loaded model: n-gram, or the draft model on a context of n_ctx. */
static int drafter(const spec_bench *b, const al_model *m, const al_model_params *mp,
                   al_context *c, al_model **dm, spec_state *sg) {
    const int n_ctx = al_context_n_ctx(c);
    if (!strcmp(b->kind, "mtp")) {
        spec_init_mtp(sg, b->draft_max, c);
        return 0;
    }
    if (strcmp(b->kind, "draft")) {
        spec_init(sg, b->draft_max);
        return 0;
    }
    al_status st = al_model_load(b->draft, mp, dm);
    if (st != AL_OK) return cli_fail_status(st);
    char why[160];
    if (!spec_same_vocab(m, *dm, why, sizeof why))
        return cli_fail("bench: --model-draft %s: its vocabulary is not the model's: %s", b->draft,
                        why);
    if ((st = spec_init_draft(sg, b->draft_max, *dm, n_ctx)) != AL_OK) return cli_fail_status(st);
    return 0;
}

static int bench_one(const spec_bench *b, const char *model, const char *backend, const char *text,
                     size_t len) {
    al_model_params mp = al_model_default_params();
    cli_settings_from_env(&mp);
    mp.n_threads = b->n_threads;
    mp.backend = backend;
    al_model *m = NULL, *dm = NULL;
    al_context *c = NULL;
    int32_t *ids = NULL;
    int n_ids = 0, rc = 0;
    al_status st = al_model_load(model, &mp, &m);
    const al_vocab *v = st == AL_OK ? cli_need_vocab(m) : NULL;
    if (st != AL_OK) return cli_fail_status(st);
    if (!v || (rc = cli_tokenize(v, text, len, true, true, &ids, &n_ids))) {
        al_model_destroy(m);
        return rc ? rc : 1;
    }
    al_context_params cp = al_context_default_params();
    cp.n_ctx = n_ids + b->n_gen + b->draft_max + 1;
    cp.mtp = !strcmp(b->kind, "mtp");
    spec_row row = {0};
    spec_state sg = {0};
    if ((st = al_context_create(m, &cp, &c)) != AL_OK) rc = cli_fail_status(st);
    if (!rc) rc = drafter(b, m, &mp, c, &dm, &sg);
    if (!rc) rc = measure(b, c, v, cli_n_vocab(m), ids, n_ids, &sg, &row);
    al_model_info info;
    al_model_get_info(m, &info);
    const char *slash = strrchr(model, '/');
    if (!rc)
        printf("| %s | %s | %d | %d | %.2f ± %.2f | %.2f ± %.2f | %.2fx | %.1f%% | %s |\n",
               slash ? slash + 1 : model, info.backend, n_ids, b->n_gen, row.plain[0], row.plain[1],
               row.spec[0], row.spec[1], row.plain[0] > 0 ? row.spec[0] / row.plain[0] : 0,
               row.accepted, row.same ? "yes" : "NO");
    fflush(stdout);
    spec_free(&sg);
    al_model_destroy(dm);
    al_free_tokens(ids);
    al_context_destroy(c);
    al_model_destroy(m);
    if (!rc && !row.same)
        rc = cli_fail("bench: the text with --spec %s differs from the text without", b->kind);
    return rc;
}

int bench_spec(const spec_bench *b) {
    if (strcmp(b->kind, "ngram") && strcmp(b->kind, "draft") && strcmp(b->kind, "mtp"))
        return cli_fail("bench: --spec %s: the kinds are ngram, draft (with --model-draft "
                        "FILE) and mtp (the file's next-token-prediction block)", b->kind);
    if (!strcmp(b->kind, "draft") != (b->draft != NULL))
        return cli_fail("bench: --model-draft FILE %s", b->draft
                                                            ? "drafts by itself: it does "
                                                              "not go with --spec ngram"
                                                            : "is what --spec draft drafts with");
    if (!b->prompt)
        return cli_fail("bench: --spec needs a prompt: -f FILE (text that the "
                        "model's reply repeats, such as code to edit)");
    size_t len;
    char *text = cli_read_file(b->prompt, &len);
    if (!text) return 1;
    printf("| model | backend | prompt | n | tg t/s | tg --spec %s t/s | speed-up | drafts "
           "taken | same text |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n",
           b->kind);
    int rc = 0;
    for (int mi = 0; mi < b->n_models && !rc; mi++)
        for (int bi = 0; bi < b->n_backends && !rc; bi++)
            rc = bench_one(b, b->models[mi], b->backends[bi], text, len);
    free(text);
    return rc;
}
