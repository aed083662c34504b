/* gen.c: the generation loop shared by run and chat, and the helpers of the text
 * commands.
 *
 * Generation is the same loop everywhere: evaluate the prompt (in chunks, so that a
 * long one shows progress and Ctrl-C can stop it), then sample a token from the last
 * logits, stream its text through the detokenizer (which holds back incomplete
 * UTF-8), and evaluate it alone, until an end-of-generation token, the token limit, a
 * full context or Ctrl-C.
 */
#include "gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"

volatile sig_atomic_t cli_interrupted;

/* Logits per position. The model's count, not the tokenizer's: al_eval writes this
 * many (the loader refuses files where the two differ; this keeps a buffer right even
 * so). */
int cli_n_vocab(const al_model *m) {
    al_model_info mi;
    al_model_get_info(m, &mi);
    return mi.n_vocab;
}

const al_vocab *cli_need_vocab(const al_model *m) {
    const al_vocab *v = al_model_vocab(m);
    if (!v) cli_fail("this model file has no usable tokenizer: %s", al_last_error());
    return v;
}

/* The prompt from -p or -f (- is stdin); NULL (message printed) if neither is given. */
char *cli_read_prompt(const cli_opts *o, size_t *len) {
    if (o->prompt) {
        *len = strlen(o->prompt);
        char *s = malloc(*len + 1);
        if (s) memcpy(s, o->prompt, *len + 1);
        return s;
    }
    if (o->prompt_file) return cli_read_file(o->prompt_file, len);
    cli_fail("%s: give the text with -p TEXT or -f FILE", o->command);
    return NULL;
}

int cli_tokenize(const al_vocab *v, const char *text, size_t len, bool add_special,
                 bool parse_special, int32_t **ids, int *n) {
    al_tokenize_params tp = {.add_special = add_special, .parse_special = parse_special};
    al_status st = al_tokenize(v, text, len, &tp, ids, n);
    return st == AL_OK ? 0 : cli_fail_status(st);
}

static void reply_add(reply_buf *r, const char *s, size_t n) {
    if (!r || n == 0) return;
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        while (cap < r->len + n + 1) cap *= 2;
        char *p = realloc(r->s, cap);
        if (!p) return; /* the reply is then cut short; the stream still shows it */
        r->s = p;
        r->cap = cap;
    }
    memcpy(r->s + r->len, s, n);
    r->len += n;
    r->s[r->len] = 0;
}

static const char *channel_name(al_channel c) {
    return c == AL_CHANNEL_FINAL ? "final" : c == AL_CHANNEL_ANALYSIS ? "analysis" : "commentary";
}

static void sink_text(gen_sink *o, const char *text, size_t len) {
    reply_add(o->reply, text, len);
    if (o->silent) return;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* Prints the parser's pieces: the final channel, and the others with --show-reasoning,
 * each change of channel marked. Only the final channel goes into the reply. */
static void sink_pieces(gen_sink *o, const al_chat_piece *p, int n) {
    for (int i = 0; i < n; i++) {
        bool final = p[i].channel == AL_CHANNEL_FINAL;
        if (o->silent) {
            if (final) reply_add(o->reply, p[i].text, p[i].len);
            continue;
        }
        if (!final && !o->show_reasoning) continue;
        if (o->show_reasoning && (int)p[i].channel != o->shown) {
            printf("%s[%s] ", o->shown >= 0 ? "\n" : "", channel_name(p[i].channel));
            o->shown = (int)p[i].channel;
        }
        fwrite(p[i].text, 1, p[i].len, stdout);
        if (final) reply_add(o->reply, p[i].text, p[i].len);
    }
    fflush(stdout);
}

/* One generated token to the sink. */
static al_status sink_token(gen_sink *o, al_detok *dt, int32_t tok) {
    const char *text;
    size_t len;
    if (!o->harmony) {
        al_status st = al_detok_push(dt, tok, &text, &len);
        if (st == AL_OK) sink_text(o, text, len);
        return st;
    }
    const al_chat_piece *p;
    int n;
    al_status st = al_harmony_push_token(o->harmony, tok, &p, &n);
    if (st == AL_OK) sink_pieces(o, p, n);
    return st;
}

/* The end of generation: what the detokenizer or the parser held back. */
static al_status sink_end(gen_sink *o, al_detok *dt) {
    const char *text;
    size_t len;
    al_detok_flush(dt, &text, &len);
    if (!o->harmony) {
        sink_text(o, text, len);
        return AL_OK;
    }
    const al_chat_piece *p;
    int n;
    al_status st = al_harmony_finish(o->harmony, &p, &n);
    if (st == AL_OK) sink_pieces(o, p, n);
    return st;
}

/* Rows of the prompt per al_eval: small enough that progress moves and Ctrl-C is
 * seen within a fraction of a second, large enough to keep the batched matmuls fast.
 * The logits do not depend on it: every position's activations are its own. */
enum { PROMPT_CHUNK = 256 };

static int eval_prompt(al_context *c, const int32_t *prompt, int n_prompt, bool checkpoint,
                       float *logits, gen_stats *gs) {
    progress pr;
    progress_start(&pr, "prompt", "tokens", n_prompt);
    al_status st = AL_OK;
    int done = 0;
    /* a checkpoint before the last token: a chunk ends there */
    const int stop = checkpoint && n_prompt > 1 ? n_prompt - 1 : n_prompt;
    while (done < n_prompt && !cli_interrupted) {
        const int end = done < stop ? stop : n_prompt;
        int nb = end - done < PROMPT_CHUNK ? end - done : PROMPT_CHUNK;
        if ((st = al_eval(c, prompt + done, nb, logits, false)) != AL_OK) break;
        done += nb;
        /* without room for one, the next turn evaluates more: nothing is lost */
        if (done == stop && stop < n_prompt && al_context_checkpoint(c) != AL_OK)
            fprintf(stderr, "anyllm: no checkpoint of the state: %s\n", al_last_error());
        progress_update(&pr, done);
    }
    progress_end(&pr);
    gs->n_prompt_done = done;
    return st == AL_OK ? 0 : cli_fail_status(st);
}

/* The ids the tokenizer marks as ending a generation, for --ignore-eos. */
static int32_t *eog_ids(const al_vocab *v, int n_vocab, int *n) {
    int32_t *ids = malloc((size_t)n_vocab * sizeof *ids);
    *n = 0;
    for (int i = 0; ids && i < n_vocab && i < al_vocab_n_tokens(v); i++)
        if (al_vocab_is_eog(v, i)) ids[(*n)++] = i;
    return ids;
}

/* Hands the sequence from src to dst, timed, and notes how (gen_stats). */
static int hand_over(al_context *dst, al_context *src, gen_stats *gs) {
    double t0 = cli_now_s();
    al_context_info before, after, from;
    al_context_get_info(dst, &before);
    al_status st = al_context_handoff(dst, src);
    gs->t_handoff += cli_now_s() - t0;
    al_context_get_info(dst, &after);
    al_context_get_info(src, &from);
    gs->prefill_on = from.backend;
    gs->decode_on = after.backend;
    gs->kv_shared = after.kv_shared || from.kv_shared; /* either may be the owner */
    gs->kv_bytes_copied += after.kv_bytes_copied - before.kv_bytes_copied;
    return st == AL_OK ? 0 : cli_fail_status(st);
}

/* The state of one generation, for the steps below. */
typedef struct gen_run {
    al_context *dc;       /* where the tokens are evaluated */
    const al_vocab *v;
    al_sampler *smp;
    const gen_params *gp;
    gen_sink *out;
    al_detok *dt;
    gen_stats *gs;
    int n_vocab;
    int32_t *eog;         /* masked with --ignore-eos */
    int n_eog;
    int32_t *hist;        /* prompt and output, for drafts */
    int n_hist, cap_hist;
    double t0;
} gen_run;

static int32_t sample_row(gen_run *g, float *row) {
    for (int i = 0; i < g->n_eog; i++) row[g->eog[i]] = -INFINITY;
    return al_sampler_sample(g->smp, row);
}

static bool hist_add(gen_run *g, int32_t tok) {
    if (g->n_hist == g->cap_hist) {
        int cap = g->cap_hist ? 2 * g->cap_hist : 1024;
        int32_t *p = realloc(g->hist, (size_t)cap * sizeof *p);
        if (!p) return false;
        g->hist = p;
        g->cap_hist = cap;
    }
    g->hist[g->n_hist++] = tok;
    return true;
}

/* A sampled token: the end, or its text out. false when generation ends here (gs->end
 * set) or fails (*st set). */
static bool take(gen_run *g, int32_t tok, al_status *st) {
    gen_stats *gs = g->gs;
    if (gs->n_gen == 0) gs->t_first = cli_now_s() - g->t0;
    if (al_vocab_is_eog(g->v, tok)) {
        gs->end = GEN_EOG;
        return false;
    }
    gs->n_gen++;
    al_sampler_accept(g->smp, tok);
    if ((*st = sink_token(g->out, g->dt, tok)) != AL_OK) return false;
    if (g->gp->spec && !hist_add(g, tok)) return *st = AL_ERR_NOMEM, false;
    /* Harmony's <|end|> after the answer ends the reply, though it is no EOG token */
    if (g->out->harmony && al_harmony_done(g->out->harmony)) {
        gs->end = GEN_DONE;
        return false;
    }
    long n_max = g->gp->n_max;
    if (n_max >= 0 && gs->n_gen >= n_max) return false; /* GEN_LIMIT */
    if (cli_interrupted) {
        gs->end = GEN_INTERRUPTED;
        return false;
    }
    return true;
}

/* Evaluates the token taken, and with --spec a draft after it, checking the draft
 * against the model: the draft's tokens the sampler draws too are taken, the first it
 * does not is the next token (in *next). Drawing from the model's distribution and
 * keeping the draft's token where the draw equals it is the rejection rule for a draft
 * that proposes one token with certainty, so the tokens are distributed, and with a
 * seed drawn, exactly as without a draft. Rejected positions are cut from the cache
 * (a recurrent state goes back to the checkpoint made before, and the kept tokens are
 * evaluated again). false when generation ends. */
static bool step(gen_run *g, int32_t tok, float **logits, int *cap_rows, int32_t *next,
                 al_status *st) {
    al_context *dc = g->dc;
    int base = al_context_n_past(dc), room = al_context_n_ctx(dc) - base - 1;
    if (room < 0) {
        g->gs->end = GEN_FULL;
        if (!g->gp->quiet_full)
            fprintf(stderr, "\n[context full at %d tokens]\n", al_context_n_ctx(dc));
        return false;
    }
    int32_t seq[1 + SPEC_DRAFT_LIMIT];
    seq[0] = tok;
    long left = g->gp->n_max < 0 ? room : g->gp->n_max - g->gs->n_gen;
    int max = (int)(left < room ? left : room), k = 0;
    double t1 = cli_now_s(); /* drafting is decoding time too (a draft model's steps) */
    if (g->gp->spec) k = spec_draft(g->gp->spec, g->hist, g->n_hist, max, seq + 1);
    g->gs->t_gen += cli_now_s() - t1;
    if (k < 0) return *st = AL_ERR_IO, false; /* al_last_error() says why */
    if (k + 1 > *cap_rows) {
        float *p = realloc(*logits, (size_t)(k + 1) * (size_t)g->n_vocab * sizeof(float));
        if (!p) return *st = AL_ERR_NOMEM, false;
        *logits = p;
        *cap_rows = k + 1;
    }
    /* a recurrent state goes back only to a checkpoint (a no-op for other models);
     * without room for one, no draft */
    if (k > 0 && al_context_checkpoint(dc) != AL_OK) k = 0;
    t1 = cli_now_s();
    *st = al_eval(dc, seq, k + 1, *logits, k > 0);
    g->gs->t_gen += cli_now_s() - t1;
    if (*st != AL_OK) return false;
    int i = 0;
    *next = sample_row(g, *logits);
    while (i < k && *next == seq[1 + i]) {
        i++;
        if (!take(g, *next, st)) break;
        *next = sample_row(g, *logits + (size_t)i * g->n_vocab);
    }
    if (k > 0) spec_result(g->gp->spec, k, i);
    if (*st != AL_OK) return false;
    if (i < k) { /* cut the refused positions; a recurrent state re-evaluates the kept */
        int want = base + 1 + i;
        t1 = cli_now_s();
        if ((*st = al_context_truncate(dc, want)) == AL_OK && al_context_n_past(dc) < want) {
            int have = al_context_n_past(dc);
            *st = have >= base ? al_eval(dc, seq + (have - base), want - have, NULL, false)
                               : AL_ERR_ARG;
        }
        g->gs->t_gen += cli_now_s() - t1;
        if (*st != AL_OK) return false;
    }
    return g->gs->end == GEN_LIMIT && (g->gp->n_max < 0 || g->gs->n_gen < g->gp->n_max);
}

int generate(al_context *c, const al_vocab *v, int n_vocab, al_sampler *smp,
             const int32_t *prompt, int n_prompt, const gen_params *gp, gen_sink *out,
             gen_stats *gs) {
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    int cap_rows = 1;
    gen_run g = {.dc = gp->decode ? gp->decode : c, .v = v, .smp = smp, .gp = gp, .out = out,
                 .gs = gs, .n_vocab = n_vocab};
    g.eog = gp->ignore_eos ? eog_ids(v, n_vocab, &g.n_eog) : NULL;
    al_status st = logits && (g.eog || !gp->ignore_eos) ? al_detok_create(v, &g.dt) : AL_ERR_NOMEM;
    for (int i = 0; st == AL_OK && gp->spec && i < gp->n_held; i++)
        if (!hist_add(&g, gp->held[i])) st = AL_ERR_NOMEM;
    for (int i = 0; st == AL_OK && gp->spec && i < n_prompt; i++)
        if (!hist_add(&g, prompt[i])) st = AL_ERR_NOMEM;
    if (st != AL_OK) {
        free(logits);
        free(g.eog);
        free(g.hist);
        al_detok_destroy(g.dt);
        return cli_fail_status(st);
    }
    *gs = (gen_stats){.n_prompt = n_prompt, .end = GEN_LIMIT};
    for (int i = 0; i < n_prompt; i++) al_sampler_accept(smp, prompt[i]);
    g.t0 = cli_now_s();
    int rc = eval_prompt(c, prompt, n_prompt, gp->checkpoint, logits, gs);
    /* a draft model reads the prompt too: prompt time, before the first token */
    if (!rc && gp->spec && (st = spec_sync(gp->spec, g.hist, g.n_hist)) != AL_OK)
        rc = cli_fail_status(st);
    gs->t_prompt = cli_now_s() - g.t0;
    if (!rc && gp->decode) rc = hand_over(g.dc, c, gs);
    if (cli_interrupted && !rc) gs->end = GEN_INTERRUPTED;
    int32_t tok = rc || gs->end != GEN_LIMIT || gp->n_max == 0 ? -1 : sample_row(&g, logits);
    while (tok >= 0 && take(&g, tok, &st) && step(&g, tok, &logits, &cap_rows, &tok, &st)) {}
    if (cli_interrupted && gs->n_prompt_done < n_prompt) gs->end = GEN_INTERRUPTED;
    if (gp->decode && gp->hand_back && al_context_n_past(g.dc) > 0) {
        al_status st_back = al_context_handoff(c, g.dc);
        if (st == AL_OK) st = st_back;
    }
    al_status st_end = sink_end(out, g.dt);
    if (st == AL_OK) st = st_end;
    al_detok_destroy(g.dt);
    free(logits);
    free(g.eog);
    free(g.hist);
    if (rc) return rc;
    return st == AL_OK ? 0 : cli_fail_status(st);
}

/* The draft model of --model-draft, on a context as long as the model's, checked to
 * share its vocabulary. */
static int load_draft(const cli_opts *o, const al_model *m, int n_ctx, spec_state *s) {
    cli_opts d = *o;
    d.model = o->model_draft;
    al_model *dm = NULL;
    al_status st = cli_model_load(&d, &dm);
    if (st != AL_OK) return cli_fail_status(st);
    char why[160];
    int rc = 0;
    if (!spec_same_vocab(m, dm, why, sizeof why))
        rc = cli_fail("%s: --model-draft %s: its vocabulary is not the model's: %s", o->command,
                      o->model_draft, why);
    if (!rc && (st = spec_init_draft(s, o->draft_max ? o->draft_max : 8, dm, n_ctx)) != AL_OK)
        rc = cli_fail_status(st);
    if (rc) {
        spec_free(s);
        al_model_destroy(dm);
        return rc;
    }
    s->draft_model = dm;
    return 0;
}

int gen_spec_setup(const cli_opts *o, const al_model *m, al_context *c, spec_state *s,
                   spec_state **out) {
    const int n_ctx = al_context_n_ctx(c);
    *out = NULL;
    const char *kind = o->spec ? o->spec : o->model_draft ? "draft" : "none";
    if (!strcmp(kind, "none")) {
        if (o->draft_max) return cli_fail("%s: --draft-max needs --spec", o->command);
        return 0;
    }
    if (strcmp(kind, "ngram") && strcmp(kind, "draft") && strcmp(kind, "mtp"))
        return cli_fail("%s: --spec %s: the kinds are ngram, draft (with --model-draft FILE), "
                        "mtp (the file's next-token-prediction block) and none", o->command, kind);
    if (!strcmp(kind, "draft") != (o->model_draft != NULL))
        return cli_fail("%s: --model-draft FILE %s", o->command,
                        o->model_draft ? "drafts by itself: it does not go with --spec ngram"
                                       : "is what --spec draft drafts with");
    if (!strcmp(kind, "ngram")) spec_init(s, o->draft_max ? o->draft_max : 8);
    else if (!strcmp(kind, "mtp")) spec_init_mtp(s, o->draft_max ? o->draft_max : 8, c);
    else {
        int rc = load_draft(o, m, n_ctx, s);
        if (rc) return rc;
    }
    *out = s;
    return 0;
}

void gen_spec_free(spec_state *s) {
    if (!s) return;
    al_model *dm = s->draft_model;
    spec_free(s);
    al_model_destroy(dm);
}

void gen_print_spec(const spec_state *s) {
    if (!s) return;
    fprintf(stderr, "spec %s: %ld drafts, %ld tokens drafted, %ld accepted (%.1f%%)\n",
            spec_kind_name(s), s->n_drafts, s->n_drafted, s->n_accepted,
            s->n_drafted ? 100.0 * s->n_accepted / s->n_drafted : 0.0);
}

void gen_print_stats(const gen_stats *g) {
    /* the last token sampled needs no evaluation, so n_gen tokens took n_gen - 1 evals */
    int n_evals = g->n_gen > 0 ? g->n_gen - 1 : 0;
    fprintf(stderr,
            "\nprompt %d tokens, pp %.1f t/s, TTFT %.0f ms | generated %d tokens, tg %.1f t/s\n",
            g->n_prompt, g->t_prompt > 0 ? g->n_prompt_done / g->t_prompt : 0, 1000 * g->t_first,
            g->n_gen, g->t_gen > 0 ? n_evals / g->t_gen : 0);
    if (g->decode_on)
        fprintf(stderr, "split: prompt on %s, tokens on %s; KV hand-off %.2f ms (in TTFT), %s "
                "(%llu bytes copied)\n", g->prefill_on, g->decode_on, 1000 * g->t_handoff,
                g->kv_shared ? "shared memory" : "a copy", (unsigned long long)g->kv_bytes_copied);
}
