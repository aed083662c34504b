/* cmd_text.c: the commands that take text: tokenize, run, chat, perplexity.
 *
 * Generation is the same loop everywhere: evaluate the prompt as one batch, then
 * sample a token from the last logits, stream its text through the detokenizer
 * (which holds back incomplete UTF-8), and evaluate it alone, until an end-of-
 * generation token, the token limit or a full context.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* Logits per position. The model's count, not the tokenizer's: al_eval writes this
 * many (the loader refuses files where the two differ; this keeps a buffer right even
 * so). */
static int model_n_vocab(const al_model *m) {
    al_model_info mi;
    al_model_get_info(m, &mi);
    return mi.n_vocab;
}

static const al_vocab *need_vocab(const al_model *m) {
    const al_vocab *v = al_model_vocab(m);
    if (!v) cli_fail("this model file has no usable tokenizer: %s", al_last_error());
    return v;
}

/* The prompt from -p or -f; NULL (message printed) if neither is given. */
static char *read_prompt(const cli_opts *o, size_t *len) {
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

static int tokenize(const al_vocab *v, const char *text, size_t len, bool add_special,
                    bool parse_special, int32_t **ids, int *n) {
    al_tokenize_params tp = {.add_special = add_special, .parse_special = parse_special};
    al_status st = al_tokenize(v, text, len, &tp, ids, n);
    return st == AL_OK ? 0 : cli_fail_status(st);
}

/* ---- tokenize ------------------------------------------------------------------------ */

int cmd_tokenize(const cli_opts *o) {
    size_t len;
    char *text = read_prompt(o, &len);
    if (!text) return 1;
    al_vocab *v;
    al_status st = al_vocab_load(o->model, &v);
    if (st != AL_OK) {
        free(text);
        return cli_fail_status(st);
    }
    int32_t *ids = NULL;
    int n = 0;
    int rc = tokenize(v, text, len, o->bos, o->special, &ids, &n);
    for (int i = 0; !rc && i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    if (!rc) printf("\n");
    al_free_tokens(ids);
    al_vocab_destroy(v);
    free(text);
    return rc;
}

/* ---- generation ------------------------------------------------------------------------ */

typedef struct gen_stats {
    int n_prompt, n_gen;
    double t_prompt, t_first, t_gen; /* seconds: prompt eval, to first token, decode */
} gen_stats;

typedef struct reply_buf {
    char *s;
    size_t len, cap;
} reply_buf;

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

/* Where generated text goes: to stdout as it comes, or, for a Harmony reply, through
 * the parser, which keeps the answer (final channel) apart from the reasoning. */
typedef struct gen_sink {
    reply_buf *reply;    /* collects the answer; may be NULL                           */
    al_harmony *harmony; /* NULL: all the text is the answer                           */
    bool show_reasoning; /* print the other channels too, each run marked "[analysis] " */
    int shown;           /* the channel of the last text printed; -1 before any        */
} gen_sink;

static const char *channel_name(al_channel c) {
    return c == AL_CHANNEL_FINAL ? "final" : c == AL_CHANNEL_ANALYSIS ? "analysis" : "commentary";
}

static void sink_text(gen_sink *o, const char *text, size_t len) {
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    reply_add(o->reply, text, len);
}

/* Prints the parser's pieces: the final channel, and the others with --show-reasoning,
 * each change of channel marked. Only the final channel goes into the reply. */
static void sink_pieces(gen_sink *o, const al_chat_piece *p, int n) {
    for (int i = 0; i < n; i++) {
        bool final = p[i].channel == AL_CHANNEL_FINAL;
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

/* Evaluates the prompt (appended to what the context holds), then generates up to
 * n_max tokens (n_vocab: logits per position, model_n_vocab) into the sink, until an
 * end-of-generation token, a complete Harmony reply or a full context. */
static int generate(al_context *c, const al_vocab *v, int n_vocab, al_sampler *smp,
                    const int32_t *prompt, int n_prompt, int n_max, gen_sink *out,
                    gen_stats *gs) {
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    al_detok *dt = NULL;
    al_status st = logits ? al_detok_create(v, &dt) : AL_ERR_NOMEM;
    if (st != AL_OK) {
        free(logits);
        return cli_fail_status(st);
    }
    for (int i = 0; i < n_prompt; i++) al_sampler_accept(smp, prompt[i]);
    double t0 = al_time_s();
    st = al_eval(c, prompt, n_prompt, logits, false);
    gs->n_prompt = n_prompt;
    gs->t_prompt = al_time_s() - t0;
    gs->n_gen = 0;
    gs->t_gen = 0;
    while (st == AL_OK && gs->n_gen < n_max) {
        int32_t tok = al_sampler_sample(smp, logits);
        if (gs->n_gen == 0) gs->t_first = al_time_s() - t0;
        if (al_vocab_is_eog(v, tok)) break;
        gs->n_gen++;
        al_sampler_accept(smp, tok);
        if ((st = sink_token(out, dt, tok)) != AL_OK) break;
        /* Harmony's <|end|> after the answer ends the reply, though it is no EOG token */
        if (out->harmony && al_harmony_done(out->harmony)) break;
        if (al_context_n_past(c) >= al_context_n_ctx(c)) {
            fprintf(stderr, "\n[context full at %d tokens]\n", al_context_n_ctx(c));
            break;
        }
        double t1 = al_time_s();
        st = al_eval(c, &tok, 1, logits, false);
        gs->t_gen += al_time_s() - t1;
    }
    al_status st_end = sink_end(out, dt);
    if (st == AL_OK) st = st_end;
    al_detok_destroy(dt);
    free(logits);
    return st == AL_OK ? 0 : cli_fail_status(st);
}

static void print_stats(const gen_stats *g) {
    /* the last token sampled needs no evaluation, so n_gen tokens took n_gen - 1 evals */
    int n_evals = g->n_gen > 0 ? g->n_gen - 1 : 0;
    fprintf(stderr,
            "\nprompt %d tokens, pp %.1f t/s, TTFT %.0f ms | generated %d tokens, tg %.1f t/s\n",
            g->n_prompt, g->t_prompt > 0 ? g->n_prompt / g->t_prompt : 0, 1000 * g->t_first,
            g->n_gen, g->t_gen > 0 ? n_evals / g->t_gen : 0);
}

int cmd_run(const cli_opts *o) {
    size_t len;
    char *text = read_prompt(o, &len);
    if (!text) return 1;
    al_model *m = NULL;
    al_context *c = NULL;
    al_sampler *smp = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 1, n_predict = o->n_predict ? o->n_predict : 128;
    al_model_params mp = al_model_default_params();
    mp.n_threads = o->n_threads;
    mp.backend = o->backend;
    al_status st = al_model_load(o->model, &mp, &m);
    if (st != AL_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    const al_vocab *v = need_vocab(m);
    if (!v || cli_check_ctx(o, m) || tokenize(v, text, len, true, o->special, &ids, &n)) goto done;
    if (n == 0) {
        rc = cli_fail("run: the prompt is empty");
        goto done;
    }
    al_context_params cp = al_context_default_params();
    cp.n_ctx = o->n_ctx ? o->n_ctx : n + n_predict;
    if ((st = al_context_create(m, &cp, &c)) != AL_OK ||
        (st = al_sampler_create(&o->sampling, model_n_vocab(m), &smp)) != AL_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if (n > al_context_n_ctx(c)) {
        rc = cli_fail("run: the prompt has %d tokens, more than the context of %d", n,
                      al_context_n_ctx(c));
        goto done;
    }
    fwrite(text, 1, len, stdout);
    gen_stats gs = {0};
    gen_sink sink = {.shown = -1};
    rc = generate(c, v, model_n_vocab(m), smp, ids, n, n_predict, &sink, &gs);
    printf("\n");
    if (!rc) print_stats(&gs);
done:
    al_free_tokens(ids);
    al_sampler_destroy(smp);
    al_context_destroy(c);
    al_model_destroy(m);
    free(text);
    return rc;
}

/* ---- chat --------------------------------------------------------------------------------- */

typedef struct chat_state {
    al_chat_message *msgs;
    int n_msgs, cap_msgs;
    int32_t *cached; /* the tokens of the last prompt, which the KV cache starts with */
    int n_cached;
    int n_vocab;     /* logits per position */
} chat_state;

static int chat_add(chat_state *cs, const char *role, const char *content) {
    if (cs->n_msgs == cs->cap_msgs) {
        int cap = cs->cap_msgs ? 2 * cs->cap_msgs : 16;
        al_chat_message *p = realloc(cs->msgs, (size_t)cap * sizeof *p);
        if (!p) return cli_fail("out of memory");
        cs->msgs = p;
        cs->cap_msgs = cap;
    }
    char *copy = strdup(content);
    if (!copy) return cli_fail("out of memory");
    cs->msgs[cs->n_msgs++] = (al_chat_message){.role = role, .content = copy};
    return 0;
}

static void chat_free(chat_state *cs) {
    for (int i = 0; i < cs->n_msgs; i++) free((char *)cs->msgs[i].content);
    free(cs->msgs);
    al_free_tokens(cs->cached);
}

/* One turn: render the whole conversation, reuse the KV cache for the prefix it
 * shares with the last prompt, generate the reply and add it to the conversation. */
static int chat_turn(const cli_opts *o, al_context *c, const al_vocab *v, al_sampler *smp,
                     const char *tmpl_name, const char *tmpl, chat_state *cs) {
    int32_t *ids = NULL;
    int n = 0, rc;
    al_status st = al_chat_tokenize(v, tmpl_name, tmpl, cs->msgs, cs->n_msgs, true, &ids, &n);
    if (st != AL_OK) return cli_fail_status(st);
    int n_ctx = al_context_n_ctx(c);
    int n_reply = o->n_predict ? o->n_predict : 512;
    if (n >= n_ctx) {
        al_free_tokens(ids);
        return cli_fail("chat: the conversation has %d tokens and no longer fits the context "
                        "of %d (use --ctx)", n, n_ctx);
    }
    reply_buf reply = {0};
    gen_sink sink = {.reply = &reply, .show_reasoning = o->show_reasoning, .shown = -1};
    /* a Harmony reply: the answer is its final channel, and only that is kept */
    if (!strcmp(tmpl_name, "harmony") && (st = al_harmony_create(v, &sink.harmony)) != AL_OK) {
        al_free_tokens(ids);
        return cli_fail_status(st);
    }
    int keep = 0;
    while (keep < cs->n_cached && keep < n - 1 && cs->cached[keep] == ids[keep]) keep++;
    al_context_truncate(c, keep);
    keep = al_context_n_past(c); /* a sliding window may keep less */
    al_sampler_reset(smp);
    gen_stats gs = {0};
    rc = generate(c, v, cs->n_vocab, smp, ids + keep, n - keep, n_reply, &sink, &gs);
    al_harmony_destroy(sink.harmony);
    printf("\n");
    fflush(stdout);
    al_free_tokens(cs->cached);
    cs->cached = ids;
    cs->n_cached = n;
    if (!rc) rc = chat_add(cs, "assistant", reply.s ? reply.s : "");
    free(reply.s);
    return rc;
}

int cmd_chat(const cli_opts *o) {
    al_model *m = NULL;
    al_context *c = NULL;
    al_sampler *smp = NULL;
    chat_state cs = {0};
    int rc = cli_load(o, o->n_ctx, &m, &c); /* 0: min(training context, 4096) */
    if (rc) return rc;
    const al_vocab *v = need_vocab(m);
    cs.n_vocab = model_n_vocab(m);
    const char *tmpl = al_model_chat_template(m), *name = o->chat_template;
    al_model_info mi;
    al_model_get_info(m, &mi);
    al_status st = AL_OK;
    char *probe = NULL;
    if (!v) {
        rc = 1;
        goto done;
    }
    /* the file's template, else the built-in format of its architecture (Gemma) */
    if ((!name && (st = al_chat_template_choose(tmpl, mi.arch, &name)) != AL_OK) ||
        (st = al_chat_render(name, tmpl, NULL, 0, true, &probe)) != AL_OK ||
        (st = al_sampler_create(&o->sampling, cs.n_vocab, &smp)) != AL_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if (o->system && (rc = chat_add(&cs, "system", o->system))) goto done;
    bool tty = isatty(0);
    bool builtin = !o->chat_template && !(tmpl && *tmpl);
    if (tty)
        fprintf(stderr, "chat template: %s%s%s%s.%s Type a message; Ctrl-D ends.\n", name,
                builtin ? " (built in for " : "", builtin ? mi.arch : "",
                builtin ? "; the file has none)" : "",
                strcmp(name, "harmony") || o->show_reasoning
                    ? "" : " The reasoning is not shown (--show-reasoning shows it).");
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) fprintf(stderr, "> ");
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (got == 0) continue;
        if (memchr(line, 0, (size_t)got)) {
            /* a message is a C string: the bytes after the NUL would vanish unseen */
            fprintf(stderr, "anyllm: chat: this line holds a NUL byte and is skipped\n");
            continue;
        }
        if ((rc = chat_add(&cs, "user", line)) ||
            (rc = chat_turn(o, c, v, smp, name, tmpl, &cs)))
            break;
    }
    free(line);
done:
    al_string_free(probe);
    chat_free(&cs);
    al_sampler_destroy(smp);
    al_context_destroy(c);
    al_model_destroy(m);
    return rc;
}

/* ---- perplexity --------------------------------------------------------------------------- */

/* Negative log-likelihood of target under softmax(logits). */
static double nll(const float *logits, int n_vocab, int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

enum { PPL_BATCH = 64 }; /* positions whose logits are held at once */

/* Scores one window of n_ctx tokens: the predictions of the second half, each with
 * at least n_ctx/2 tokens of context (the scheme llama.cpp's perplexity uses, so the
 * figures compare). */
static int ppl_window(al_context *c, const int32_t *w, int n_ctx, int n_vocab, float *logits,
                      double *sum_nll, int *n_scored) {
    int first = n_ctx / 2;
    al_context_reset(c);
    for (int b = 0; b < n_ctx; b += PPL_BATCH) {
        int nb = n_ctx - b < PPL_BATCH ? n_ctx - b : PPL_BATCH;
        al_status st = al_eval(c, w + b, nb, logits, true);
        if (st != AL_OK) return cli_fail_status(st);
        for (int j = b; j < b + nb; j++) {
            if (j < first || j + 1 >= n_ctx) continue;
            *sum_nll += nll(logits + (size_t)(j - b) * n_vocab, n_vocab, w[j + 1]);
            (*n_scored)++;
        }
    }
    return 0;
}

int cmd_perplexity(const cli_opts *o) {
    size_t len;
    char *text = read_prompt(o, &len);
    if (!text) return 1;
    int n_ctx = o->n_ctx ? o->n_ctx : 512;
    if (n_ctx < 3) { /* a window scores positions n_ctx/2 .. n_ctx-2 */
        free(text);
        return cli_fail("perplexity: --ctx %d is too small: a window scores the predictions of "
                        "its second half, so it needs at least 3 tokens", n_ctx);
    }
    al_model *m = NULL;
    al_context *c = NULL;
    int32_t *ids = NULL, *bos = NULL;
    float *logits = NULL;
    int n = 0, n_bos = 0;
    int rc = cli_load(o, n_ctx, &m, &c);
    const al_vocab *v = rc ? NULL : need_vocab(m);
    if (!v || (rc = tokenize(v, text, len, false, false, &ids, &n)) ||
        (rc = tokenize(v, "", 0, true, false, &bos, &n_bos)))
        goto done;
    int n_chunks = n / n_ctx;
    if (o->n_chunks && o->n_chunks < n_chunks) n_chunks = o->n_chunks;
    if (n_chunks == 0) {
        rc = cli_fail("perplexity: the text has %d tokens, less than one window of %d", n, n_ctx);
        goto done;
    }
    int n_vocab = model_n_vocab(m);
    logits = malloc((size_t)PPL_BATCH * (size_t)n_vocab * sizeof(float));
    if (!logits) {
        rc = cli_fail("out of memory");
        goto done;
    }
    fprintf(stderr, "perplexity: %d tokens, %d windows of %d\n", n, n_chunks, n_ctx);
    double sum = 0, t0 = al_time_s();
    int scored = 0;
    for (int k = 0; k < n_chunks && !rc; k++) {
        int32_t *w = ids + (size_t)k * n_ctx;
        if (n_bos > 0) w[0] = bos[0]; /* each window starts like a document, if BOS is used */
        rc = ppl_window(c, w, n_ctx, n_vocab, logits, &sum, &scored);
        fprintf(stderr, "[%d] %.4f\n", k + 1, exp(sum / scored));
    }
    if (!rc)
        printf("perplexity: %.4f over %d scored tokens (%d windows of %d tokens, %.1f s)\n",
               exp(sum / scored), scored, n_chunks, n_ctx, al_time_s() - t0);
done:
    free(logits);
    al_free_tokens(ids);
    al_free_tokens(bos);
    al_context_destroy(c);
    al_model_destroy(m);
    free(text);
    return rc;
}
