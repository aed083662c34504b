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

int generate(al_context *c, const al_vocab *v, int n_vocab, al_sampler *smp,
             const int32_t *prompt, int n_prompt, const gen_params *gp, gen_sink *out,
             gen_stats *gs) {
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    int n_eog = 0;
    int32_t *eog = gp->ignore_eos ? eog_ids(v, n_vocab, &n_eog) : NULL;
    al_detok *dt = NULL;
    al_status st = logits && (eog || !gp->ignore_eos) ? al_detok_create(v, &dt) : AL_ERR_NOMEM;
    if (st != AL_OK) {
        free(logits);
        free(eog);
        return cli_fail_status(st);
    }
    *gs = (gen_stats){.n_prompt = n_prompt, .end = GEN_LIMIT};
    for (int i = 0; i < n_prompt; i++) al_sampler_accept(smp, prompt[i]);
    double t0 = cli_now_s();
    int rc = eval_prompt(c, prompt, n_prompt, gp->checkpoint, logits, gs);
    gs->t_prompt = cli_now_s() - t0;
    al_context *dc = gp->decode ? gp->decode : c; /* where the tokens are evaluated */
    if (!rc && gp->decode) rc = hand_over(dc, c, gs);
    long n_max = gp->n_max < 0 ? -1 : gp->n_max;
    while (!rc && (n_max < 0 || gs->n_gen < n_max)) {
        if (cli_interrupted) {
            gs->end = GEN_INTERRUPTED;
            break;
        }
        for (int i = 0; i < n_eog; i++) logits[eog[i]] = -INFINITY;
        int32_t tok = al_sampler_sample(smp, logits);
        if (gs->n_gen == 0) gs->t_first = cli_now_s() - t0;
        if (al_vocab_is_eog(v, tok)) {
            gs->end = GEN_EOG;
            break;
        }
        gs->n_gen++;
        al_sampler_accept(smp, tok);
        if ((st = sink_token(out, dt, tok)) != AL_OK) break;
        /* Harmony's <|end|> after the answer ends the reply, though it is no EOG token */
        if (out->harmony && al_harmony_done(out->harmony)) {
            gs->end = GEN_DONE;
            break;
        }
        if (al_context_n_past(dc) >= al_context_n_ctx(dc)) {
            gs->end = GEN_FULL;
            if (!gp->quiet_full)
                fprintf(stderr, "\n[context full at %d tokens]\n", al_context_n_ctx(dc));
            break;
        }
        double t1 = cli_now_s();
        st = al_eval(dc, &tok, 1, logits, false);
        gs->t_gen += cli_now_s() - t1;
    }
    if (cli_interrupted && gs->n_prompt_done < n_prompt) gs->end = GEN_INTERRUPTED;
    if (gp->decode && gp->hand_back && al_context_n_past(dc) > 0) {
        al_status st_back = al_context_handoff(c, dc);
        if (st == AL_OK) st = st_back;
    }
    al_status st_end = sink_end(out, dt);
    if (st == AL_OK) st = st_end;
    al_detok_destroy(dt);
    free(logits);
    free(eog);
    if (rc) return rc;
    return st == AL_OK ? 0 : cli_fail_status(st);
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
