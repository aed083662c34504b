/* chat.c: chat templates, recognised from the model's Jinja text and rendered in C.
 *
 * A model file carries its prompt format as a Jinja template. Running arbitrary Jinja
 * would need an interpreter; instead each common format is recognised by the special
 * tokens its template writes, and rendered here. Recognition is by markers that only
 * that format uses, and an unrecognised template is an error, so a prompt is never
 * formatted silently wrong.
 */
#include <stdarg.h>
#include <string.h>

#include "anyllm.h"
#include "util.h"

/* ---- a growable string ---------------------------------------------------------- */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool failed; /* out of memory: further appends are ignored */
} strbuf;

static void sb_append_n(strbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = al_realloc(b->s, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_append(strbuf *b, const char *s) { sb_append_n(b, s, strlen(s)); }

/* Appends the concatenation of the NULL-terminated list of strings. */
static void sb_cat(strbuf *b, ...) {
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));) sb_append(b, s);
    va_end(ap);
}

/* ---- recognition ------------------------------------------------------------------ */

al_status al_chat_template_detect(const char *tmpl, const char **name) {
    *name = NULL;
    if (!tmpl || !*tmpl) return al_error(AL_ERR_ARG, "the model has no chat template; "
                                         "name one with --chat-template");
    if (strstr(tmpl, "<|im_start|>")) *name = "chatml";
    else if (strstr(tmpl, "<|start_header_id|>")) *name = "llama3";
    else if (strstr(tmpl, "<start_of_turn>")) *name = "gemma";
    else if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>")) *name = "phi3";
    else if (strstr(tmpl, "[INST]") && strstr(tmpl, "<<SYS>>")) *name = "llama2";
    else if (strstr(tmpl, "[INST]")) *name = "mistral";
    if (*name) return AL_OK;
    return al_error(AL_ERR_UNSUPPORTED, "the model's chat template is not one anyllm can "
                    "render (chatml, llama3, llama2, mistral, gemma, phi3); name one with "
                    "--chat-template");
}

/* A ChatML template may write a default system turn as a string literal, e.g.
 * '<|im_start|>system\nYou are ...<|im_end|>\n'. Returns that text, unescaped, or
 * NULL if the template has none. A system turn built from a message
 * ("'<|im_start|>system\n' + message...") is not a default. */
static char *default_system(const char *tmpl) {
    static const char open[] = "<|im_start|>system";
    for (const char *p = tmpl ? strstr(tmpl, open) : NULL; p; p = strstr(p + 1, open)) {
        const char *q = p + sizeof open - 1;
        if (*q == '\n') q++;
        else if (q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *end = strstr(q, "<|im_end|>");
        const char *quote = strpbrk(q, "'\"");
        if (!end || (quote && quote < end)) continue; /* the literal ends first: not a default */
        strbuf b = {0};
        for (const char *c = q; c < end; c++) {
            if (c[0] == '\\' && c + 1 < end) { /* Jinja string escapes */
                char e = c[1] == 'n' ? '\n' : c[1] == 't' ? '\t' : c[1];
                sb_append_n(&b, &e, 1);
                c++;
            } else {
                sb_append_n(&b, c, 1);
            }
        }
        if (b.failed) {
            al_free(b.s);
            return NULL;
        }
        return b.s ? b.s : NULL;
    }
    return NULL;
}

/* ---- rendering -------------------------------------------------------------------- */

static bool is_role(const char *r, const char *want) { return strcmp(r, want) == 0; }

static void render_chatml(strbuf *b, const char *tmpl, const al_chat_message *m, int n, bool gen) {
    if (n == 0 || !is_role(m[0].role, "system")) {
        char *sys = default_system(tmpl);
        if (sys) sb_cat(b, "<|im_start|>system\n", sys, "<|im_end|>\n", NULL);
        al_free(sys);
    }
    for (int i = 0; i < n; i++)
        sb_cat(b, "<|im_start|>", m[i].role, "\n", m[i].content, "<|im_end|>\n", NULL);
    if (gen) sb_append(b, "<|im_start|>assistant\n");
}

static void render_llama3(strbuf *b, const al_chat_message *m, int n, bool gen) {
    for (int i = 0; i < n; i++)
        sb_cat(b, "<|start_header_id|>", m[i].role, "<|end_header_id|>\n\n", m[i].content,
               "<|eot_id|>", NULL);
    if (gen) sb_append(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 puts the system prompt inside the first [INST] block; Mistral prepends it to
 * the first user message. */
static void render_inst(strbuf *b, const al_chat_message *m, int n, bool llama2) {
    const char *sys = NULL;
    bool first = true;
    for (int i = 0; i < n; i++) {
        if (is_role(m[i].role, "system")) {
            sys = m[i].content;
        } else if (is_role(m[i].role, "user")) {
            sb_append(b, first ? "[INST] " : "<s>[INST] ");
            if (sys && llama2) sb_cat(b, "<<SYS>>\n", sys, "\n<</SYS>>\n\n", NULL);
            else if (sys) sb_cat(b, sys, "\n\n", NULL);
            sys = NULL;
            sb_cat(b, m[i].content, " [/INST]", NULL);
            first = false;
        } else {
            sb_cat(b, " ", m[i].content, " </s>", NULL);
        }
    }
}

/* Gemma has no system role: the system text leads the first user turn. */
static void render_gemma(strbuf *b, const al_chat_message *m, int n, bool gen) {
    const char *sys = NULL;
    for (int i = 0; i < n; i++) {
        if (is_role(m[i].role, "system")) {
            sys = m[i].content;
            continue;
        }
        const char *role = is_role(m[i].role, "assistant") ? "model" : "user";
        sb_cat(b, "<start_of_turn>", role, "\n", NULL);
        if (sys && !strcmp(role, "user")) sb_cat(b, sys, "\n\n", NULL), sys = NULL;
        sb_cat(b, m[i].content, "<end_of_turn>\n", NULL);
    }
    if (gen) sb_append(b, "<start_of_turn>model\n");
}

static void render_phi3(strbuf *b, const al_chat_message *m, int n, bool gen) {
    for (int i = 0; i < n; i++) sb_cat(b, "<|", m[i].role, "|>\n", m[i].content, "<|end|>\n", NULL);
    if (gen) sb_append(b, "<|assistant|>\n");
}

al_status al_chat_render(const char *name, const char *tmpl, const al_chat_message *msgs, int n,
                         bool add_generation_prompt, char **out) {
    *out = NULL;
    if (!name || n < 0 || (n > 0 && !msgs)) return al_error(AL_ERR_ARG, "al_chat_render: bad arguments");
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return al_error(AL_ERR_ARG, "chat message %d has no role or content", i);
        if (!is_role(msgs[i].role, "system") && !is_role(msgs[i].role, "user") &&
            !is_role(msgs[i].role, "assistant"))
            return al_error(AL_ERR_ARG, "chat message %d: role '%s' is not system, user or "
                            "assistant", i, msgs[i].role);
    }
    strbuf b = {0};
    bool gen = add_generation_prompt;
    if (!strcmp(name, "chatml")) render_chatml(&b, tmpl, msgs, n, gen);
    else if (!strcmp(name, "llama3")) render_llama3(&b, msgs, n, gen);
    else if (!strcmp(name, "llama2")) render_inst(&b, msgs, n, true);
    else if (!strcmp(name, "mistral")) render_inst(&b, msgs, n, false);
    else if (!strcmp(name, "gemma")) render_gemma(&b, msgs, n, gen);
    else if (!strcmp(name, "phi3")) render_phi3(&b, msgs, n, gen);
    else
        return al_error(AL_ERR_UNSUPPORTED, "chat template '%s' is not known (chatml, llama3, "
                        "llama2, mistral, gemma, phi3)", name);
    sb_append(&b, ""); /* an empty conversation is still a string */
    if (b.failed) {
        al_free(b.s);
        return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    }
    *out = b.s;
    return AL_OK;
}

void al_string_free(char *s) { al_free(s); }
