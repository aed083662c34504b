/* cmd_chat.c: `anyllm chat`, a conversation in the model's chat template. Each turn
 * renders the whole conversation and reuses the KV cache for the prefix it shares with
 * the last prompt, so only the new turn is evaluated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen.h"
#include "split.h"
typedef struct chat_state {
    al_chat_message *msgs;
    int n_msgs, cap_msgs;
    int32_t *cached; /* the tokens of the last prompt, which the KV cache starts with */
    int n_cached;
    int n_vocab;     /* logits per position */
    al_context *decode; /* the generated tokens' context, on another backend (split.h) */
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
    int n_reply = o->n_predict;
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
    gen_params gp = {.n_max = n_reply, .ignore_eos = o->ignore_eos, .decode = cs->decode,
                     .hand_back = true};
    rc = generate(c, v, cs->n_vocab, smp, ids + keep, n - keep, &gp, &sink, &gs);
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
    al_sampler *smp = NULL;
    chat_state cs = {0};
    cli_split sp; /* auto plans for turns of 128 tokens */
    int rc = cli_split_open(o, 128, o->n_ctx, &sp); /* 0: min(training context, 4096) */
    if (rc) return rc;
    al_model *m = sp.m;
    al_context *c = sp.c;
    cs.decode = sp.c_decode;
    const al_vocab *v = cli_need_vocab(m);
    cs.n_vocab = cli_n_vocab(m);
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
    cli_split_destroy(&sp);
    return rc;
}
