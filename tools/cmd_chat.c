/* cmd_chat.c: `anyllm chat`, a conversation in the model's chat template. Each turn
 * renders the whole conversation and reuses the KV cache for the prefix it shares with
 * the last prompt, so only the new turn is evaluated.
 *
 * On a terminal: line editing and history (chat_input.c), commands (/help), Ctrl-C
 * stops a reply (what it wrote stays in the conversation, as in llama-cli) and, at an
 * empty prompt, twice in a row ends the chat. When the conversation outgrows the
 * context, the oldest turns are dropped before the next one (or, with
 * --no-context-shift, the chat ends). On a pipe each line is a message (commands
 * too) and Ctrl-C ends the program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "gen.h"
#include "split.h"

typedef struct chat_session {
    const cli_opts *o;
    al_context *c;
    const al_vocab *v;
    al_sampler *smp;
    const char *tmpl_name, *tmpl;
    chat_conv conv;
    int32_t *cached; /* the tokens of the last prompt that the KV cache starts with */
    int n_cached;    /* how many of them it holds: fewer if the prompt was interrupted */
    int n_vocab;     /* logits per position */
    al_context *decode; /* the generated tokens' context, on another backend (split.h) */
    bool recurrent;  /* the model has a recurrent state: each prompt is checkpointed */
    spec_state spec, *specp; /* --spec: drafts (specp NULL: none) */
} chat_session;

/* ---- fitting the conversation into the context ---------------------------------------- */

/* Positions kept free for the reply when deciding whether a conversation fits: -n, but
 * at most a quarter of the context, so that a long -n (or -1, until the end) does not
 * leave a small context room for only a turn or two. A reply longer than the reserve
 * may still fill the context; it is then cut and old turns go before the next turn. */
static int reply_reserve(const chat_session *s) {
    int quarter = al_context_n_ctx(s->c) / 4;
    int n = s->o->n_predict > 0 && s->o->n_predict < quarter ? s->o->n_predict : quarter;
    return n > 0 ? n : 1;
}

static int render(const chat_session *s, const al_chat_message *msgs, int n_msgs, int32_t **ids,
                  int *n) {
    al_status st = al_chat_tokenize(s->v, s->tmpl_name, s->tmpl, msgs, n_msgs, true, ids, n);
    return st == AL_OK ? 0 : cli_fail_status(st);
}

/* The tokens of the system messages and the newest message alone: what is left when
 * every older turn is dropped. -1 on failure (message printed). */
static int newest_alone(const chat_session *s) {
    const chat_conv *cv = &s->conv;
    al_chat_message *msgs = malloc((size_t)cv->n * sizeof *msgs);
    int k = 0, n = -1;
    int32_t *ids = NULL;
    if (!msgs) return cli_fail("out of memory"), -1;
    for (int i = 0; i < cv->n - 1; i++)
        if (!strcmp(cv->msgs[i].role, "system")) msgs[k++] = cv->msgs[i];
    msgs[k++] = cv->msgs[cv->n - 1];
    if (render(s, msgs, k, &ids, &n)) n = -1;
    al_free_tokens(ids);
    free(msgs);
    return n;
}

enum { FIT_OK, FIT_SKIP, FIT_FAIL };

/* Renders the conversation (ending with the new user message) into *ids so that it
 * and the reply reserve fit the context, dropping the oldest turns if need be, with
 * one line saying so. FIT_SKIP: the new message is too long even alone, said in one
 * line and taken out of the conversation. FIT_FAIL: an error or --no-context-shift
 * (message printed). */
static int fit_context(chat_session *s, int32_t **ids, int *n) {
    int n_ctx = al_context_n_ctx(s->c), reserve = reply_reserve(s);
    if (render(s, s->conv.msgs, s->conv.n, ids, n)) return FIT_FAIL;
    if (*n + reserve <= n_ctx) return FIT_OK;
    int alone = newest_alone(s);
    if (alone < 0) return FIT_FAIL;
    if (alone + reserve > n_ctx) {
        fprintf(stderr, "anyllm: chat: this message is too long for the context: %d tokens "
                "with room for a %d-token reply exceed -c %d; it is skipped\n",
                alone, reserve, n_ctx);
        conv_remove(&s->conv, s->conv.n - 1, 1);
        return FIT_SKIP;
    }
    if (s->o->no_context_shift) {
        cli_fail("chat: the conversation no longer fits the context (%d tokens and room for "
                 "a %d-token reply exceed -c %d); --no-context-shift ends the chat here "
                 "instead of dropping the oldest turns", *n, reserve, n_ctx);
        return FIT_FAIL;
    }
    int n_before = *n, turns = 0;
    while (*n + reserve > n_ctx && conv_drop_turn(&s->conv)) {
        turns++;
        al_free_tokens(*ids);
        *ids = NULL;
        if (render(s, s->conv.msgs, s->conv.n, ids, n)) return FIT_FAIL;
    }
    if (turns == 1)
        fprintf(stderr, "[context full: dropped the oldest turn (%d tokens) to make room]\n",
                n_before - *n);
    else
        fprintf(stderr, "[context full: dropped the %d oldest turns (%d tokens) to make room]\n",
                turns, n_before - *n);
    return FIT_OK;
}

/* ---- one turn ------------------------------------------------------------------------- */

/* After a reply: the reply (or the partial one) joins the conversation. A reply stopped
 * before it said anything takes its message with it: the model never answered it. */
static int end_turn(chat_session *s, const gen_stats *gs, const reply_buf *reply) {
    if (gs->end == GEN_INTERRUPTED && (!reply->s || !reply->len)) {
        conv_remove(&s->conv, s->conv.n - 1, 1);
        return 0;
    }
    if (gs->end == GEN_FULL)
        fprintf(stderr, "[context full at %d tokens: the reply is cut here%s]\n",
                al_context_n_ctx(s->c),
                s->o->no_context_shift ? "" : "; the oldest turns go before the next message");
    return conv_add(&s->conv, "assistant", reply->s ? reply->s : "");
}

/* One turn: fit the conversation, reuse the KV cache for the prefix it shares with the
 * last prompt, generate the reply and add it to the conversation. 0 also when the
 * message was skipped; an exit status on errors. */
static int chat_turn(chat_session *s) {
    int32_t *ids = NULL;
    int n = 0, rc;
    int fit = fit_context(s, &ids, &n);
    if (fit != FIT_OK) {
        al_free_tokens(ids);
        return fit == FIT_SKIP ? 0 : 1;
    }
    reply_buf reply = {0};
    gen_sink sink = {.reply = &reply, .show_reasoning = s->o->show_reasoning, .shown = -1};
    /* a Harmony reply: the answer is its final channel, and only that is kept */
    al_status st;
    if (!strcmp(s->tmpl_name, "harmony") && (st = al_harmony_create(s->v, &sink.harmony)) != AL_OK) {
        al_free_tokens(ids);
        return cli_fail_status(st);
    }
    int keep = 0;
    while (keep < s->n_cached && keep < n - 1 && s->cached[keep] == ids[keep]) keep++;
    /* keep <= n_cached <= what the cache holds, so this cannot fail; if it did, the
     * prompt is evaluated whole rather than appended at the wrong position */
    if (al_context_truncate(s->c, keep) != AL_OK) al_context_reset(s->c);
    keep = al_context_n_past(s->c); /* a sliding window may keep less */
    al_sampler_reset(s->smp);
    gen_stats gs = {0};
    gen_params gp = {.n_max = s->o->n_predict, .ignore_eos = s->o->ignore_eos, .quiet_full = true,
                     .decode = s->decode, .hand_back = true, .checkpoint = s->recurrent,
                     .spec = s->specp, .held = ids, .n_held = keep};
    rc = generate(s->c, s->v, s->n_vocab, s->smp, ids + keep, n - keep, &gp, &sink, &gs);
    al_harmony_destroy(sink.harmony);
    printf("\n");
    fflush(stdout);
    /* the cache holds the prompt (all of it, or what was read before Ctrl-C) and the
     * reply's tokens; the next turn re-renders the reply, so only the prompt counts */
    int n_past = al_context_n_past(s->c);
    al_free_tokens(s->cached);
    s->cached = ids;
    s->n_cached = n_past < n ? n_past : n;
    if (!rc) rc = end_turn(s, &gs, &reply);
    free(reply.s);
    return rc;
}

/* ---- commands ------------------------------------------------------------------------- */

static void print_help(void) {
    fprintf(stderr,
            "/help         this list\n"
            "/clear        forget the conversation (the system prompt stays)\n"
            "/save FILE    write the conversation to FILE as JSON {\"messages\": [...]}\n"
            "/load FILE    replace the conversation with the one in FILE\n"
            "/exit         end the chat (as do Ctrl-D, and Ctrl-C twice at an empty prompt)\n"
            "//text        send \"/text\" as a message\n"
            "Ctrl-C stops a reply; what it wrote so far stays in the conversation.\n");
}

static void cmd_clear(chat_session *s) {
    conv_clear(&s->conv, true);
    al_context_reset(s->c);
    s->n_cached = 0;
    fprintf(stderr, "[conversation cleared%s]\n", s->conv.n ? "; the system prompt stays" : "");
}

/* Loads a conversation in place of this one; on any error this one stays. */
static void cmd_load(chat_session *s, const char *path) {
    chat_conv loaded = {0};
    if (conv_load(&loaded, path)) return;
    /* a conversation the template cannot render would fail every later turn */
    char *text = NULL;
    al_status st = al_chat_render(s->tmpl_name, s->tmpl, loaded.msgs, loaded.n, true, &text);
    al_string_free(text);
    if (st != AL_OK) {
        cli_fail("/load: %s: %s", path, al_last_error());
        conv_free(&loaded);
        return;
    }
    conv_free(&s->conv);
    s->conv = loaded;
    /* the KV cache stays: the next turn reuses whatever prefix it shares */
    fprintf(stderr, "[loaded %d messages from %s]\n", s->conv.n, path);
}

/* A line starting with '/'. Sets *quit for /exit. */
static void run_command(chat_session *s, char *line, bool *quit) {
    char *arg = line + strcspn(line, " \t");
    if (*arg) *arg++ = 0;
    arg += strspn(arg, " \t");
    for (size_t len = strlen(arg); len && (arg[len - 1] == ' ' || arg[len - 1] == '\t');)
        arg[--len] = 0;
    bool takes_file = !strcmp(line, "/save") || !strcmp(line, "/load");
    if (takes_file && !*arg) {
        cli_fail("%s needs a file name: %s FILE", line, line);
        return;
    }
    if (!strcmp(line, "/help")) print_help();
    else if (!strcmp(line, "/exit")) *quit = true;
    else if (!strcmp(line, "/clear")) cmd_clear(s);
    else if (!strcmp(line, "/load")) cmd_load(s, arg);
    else if (!strcmp(line, "/save")) {
        if (!conv_save(&s->conv, arg))
            fprintf(stderr, "[saved %d messages to %s]\n", s->conv.n, arg);
    } else
        cli_fail("unknown command %s (/help lists them; start a message with // to send a /)",
                 line);
}

/* ---- the session ---------------------------------------------------------------------- */

/* The conversation loop; 0 at the end of input, /exit or a second Ctrl-C in a row. */
static int chat_loop(chat_session *s) {
    chat_input in;
    chat_input_open(&in);
    int rc = 0, n_ctrl_c = 0; /* Ctrl-C at an empty prompt, in a row */
    bool quit = false;
    while (!rc && !quit) {
        chat_read r = chat_input_read(&in);
        if (r == CHAT_EOF) {
            if (in.tty) fputc('\n', stderr);
            break;
        }
        if (r == CHAT_INTERRUPT) {
            fputc('\n', stderr);
            if (in.typed) n_ctrl_c = 0; /* it cancelled the line typed, as in a shell */
            else if (++n_ctrl_c == 2) break;
            else fprintf(stderr, "[press Ctrl-C again or Ctrl-D to exit]\n");
            continue;
        }
        n_ctrl_c = 0;
        char *msg = in.line;
        if (!*msg) continue;
        if (msg[0] == '/' && msg[1] != '/') {
            run_command(s, msg, &quit);
            continue;
        }
        if (msg[0] == '/') msg++; /* "//text" sends "/text" */
        if (!(rc = conv_add(&s->conv, "user", msg))) rc = chat_turn(s);
    }
    chat_input_close(&in);
    return rc;
}

int cmd_chat(const cli_opts *o) {
    chat_session s = {.o = o};
    cli_split sp; /* auto plans for turns of 128 tokens */
    int rc = cli_split_open(o, 128, o->n_ctx, &sp); /* 0: the default context */
    if (rc) return rc;
    al_model *m = sp.m;
    s.c = sp.c;
    s.decode = sp.c_decode;
    s.v = cli_need_vocab(m);
    s.n_vocab = cli_n_vocab(m);
    s.tmpl = al_model_chat_template(m);
    s.tmpl_name = o->chat_template;
    al_model_info mi;
    al_model_get_info(m, &mi);
    s.recurrent = mi.n_recurrent > 0;
    al_status st = AL_OK;
    char *probe = NULL;
    if (!s.v) {
        rc = 1;
        goto done;
    }
    if ((rc = gen_spec_setup(o, m, s.decode ? s.decode : s.c, &s.spec, &s.specp))) goto done;
    /* the file's template, else the built-in format of its architecture (Gemma) */
    if ((!s.tmpl_name && (st = al_chat_template_choose(s.tmpl, mi.arch, &s.tmpl_name)) != AL_OK) ||
        (st = al_chat_render(s.tmpl_name, s.tmpl, NULL, 0, true, &probe)) != AL_OK ||
        (st = al_sampler_create(&o->sampling, s.n_vocab, &s.smp)) != AL_OK) {
        rc = cli_fail_status(st);
        goto done;
    }
    if (o->system && (rc = conv_add(&s.conv, "system", o->system))) goto done;
    bool builtin = !o->chat_template && !(s.tmpl && *s.tmpl);
    if (isatty(0))
        fprintf(stderr, "chat template: %s%s%s%s.%s Type a message; /help lists the commands, "
                "Ctrl-C stops a reply, Ctrl-D ends.\n", s.tmpl_name,
                builtin ? " (built in for " : "", builtin ? mi.arch : "",
                builtin ? "; the file has none)" : "",
                strcmp(s.tmpl_name, "harmony") || o->show_reasoning
                    ? "" : " The reasoning is not shown (--show-reasoning shows it).");
    rc = chat_loop(&s);
done:
    gen_spec_free(s.specp);
    al_string_free(probe);
    conv_free(&s.conv);
    al_free_tokens(s.cached);
    al_sampler_destroy(s.smp);
    cli_split_destroy(&sp);
    return rc;
}
