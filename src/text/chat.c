/* chat.c: chat templates, recognised from the model's Jinja text and rendered in C.
 *
 * A model file carries its prompt format as a Jinja template. Running arbitrary Jinja
 * would need an interpreter; instead each common format is recognised by the special
 * tokens its template writes, and rendered here. Recognition is by markers that only
 * that format uses, and an unrecognised template is an error, so a prompt is never
 * formatted silently wrong. A file with no template at all gets the format of its
 * architecture when that is fixed (Gemma, gpt-oss), else an error. The replies of
 * Harmony (gpt-oss), which come on channels, are parsed in harmony.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "anyllm.h"
#include "text/tokenizer.h"
#include "util.h"

/* ---- a growable string ---------------------------------------------------------- */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool failed;     /* out of memory: further appends are ignored */
    tok_span *spans; /* where message content was written, in order */
    int n_spans, cap_spans;
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

/* Appends a message's text and records where it went: only the template's own text
 * may become control tokens (al_chat_tokenize). */
static void sb_content(strbuf *b, const char *s) {
    size_t n = strlen(s), at = b->len;
    sb_append_n(b, s, n);
    if (b->failed || n == 0) return;
    if (b->n_spans == b->cap_spans) {
        int cap = b->cap_spans ? 2 * b->cap_spans : 16;
        tok_span *p = al_realloc(b->spans, (size_t)cap * sizeof *p);
        if (!p) {
            b->failed = true;
            return;
        }
        b->spans = p;
        b->cap_spans = cap;
    }
    b->spans[b->n_spans++] = (tok_span){at, n};
}

/* Appends the concatenation of the NULL-terminated list of strings. */
static void sb_cat(strbuf *b, ...) {
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));) sb_append(b, s);
    va_end(ap);
}

/* ---- recognition ------------------------------------------------------------------ */

al_status al_chat_template_detect(const char *tmpl, const char **name) {
    if (!name) return al_error(AL_ERR_ARG, "al_chat_template_detect: name is NULL");
    *name = NULL;
    if (!tmpl || !*tmpl) return al_error(AL_ERR_ARG, "the model has no chat template; "
                                         "name one with --chat-template");
    /* first: Harmony's template also writes <|end|>, which phi3's check looks for */
    if (strstr(tmpl, "<|start|>") && strstr(tmpl, "<|channel|>")) *name = "harmony";
    else if (strstr(tmpl, "<|im_start|>")) *name = "chatml";
    else if (strstr(tmpl, "<|start_header_id|>")) *name = "llama3";
    else if (strstr(tmpl, "<start_of_turn>")) *name = "gemma";
    else if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>")) *name = "phi3";
    else if (strstr(tmpl, "[INST]") && strstr(tmpl, "<<SYS>>")) *name = "llama2";
    else if (strstr(tmpl, "[INST]")) *name = "mistral";
    if (*name) return AL_OK;
    return al_error(AL_ERR_UNSUPPORTED, "the model's chat template is not one anyllm can "
                    "render (chatml, llama3, llama2, mistral, gemma, phi3, harmony); name one "
                    "with --chat-template");
}

/* Architectures whose GGUF files often carry no template, and the format their models
 * were trained on: Gemma's turn format is fixed by the model family (Google's Gemma 3
 * 270M file, for one, has no tokenizer.chat_template), and gpt-oss works only in
 * Harmony (OpenAI: "should not be used without using the harmony format"). */
static const struct {
    const char *arch, *name;
} k_builtin[] = {
    {"gemma", "gemma"},
    {"gemma2", "gemma"},
    {"gemma3", "gemma"},
    {"gpt-oss", "harmony"},
};

const char *al_chat_template_builtin(const char *arch) {
    for (size_t i = 0; arch && i < sizeof k_builtin / sizeof k_builtin[0]; i++)
        if (!strcmp(arch, k_builtin[i].arch)) return k_builtin[i].name;
    return NULL;
}

al_status al_chat_template_choose(const char *tmpl, const char *arch, const char **name) {
    if (!name) return al_error(AL_ERR_ARG, "al_chat_template_choose: NULL name");
    if (tmpl && *tmpl) return al_chat_template_detect(tmpl, name);
    *name = al_chat_template_builtin(arch);
    if (*name) return AL_OK;
    return al_error(AL_ERR_ARG, "the model has no chat template and anyllm has no built-in one "
                    "for its architecture (%s); name one with --chat-template",
                    arch ? arch : "unknown");
}

/* The text of a Jinja string literal, s[0..end) between its quotes, with its escapes
 * undone; NULL when empty or out of memory. */
static char *unescape(const char *s, const char *end) {
    strbuf b = {0};
    for (const char *c = s; c < end; c++) {
        if (c[0] == '\\' && c + 1 < end) {
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
    return b.s;
}

/* A ChatML template may write a default system turn as a string literal, e.g.
 * '<|im_start|>system\nYou are ...<|im_end|>\n'. Returns that text, unescaped, or
 * NULL if the template has none. A system turn built from a message
 * ("'<|im_start|>system\n' + message...") is not a default. */
static char *default_system(const char *tmpl) {
    static const char open[] = "<|im_start|>system";
    /* The next end marker and quote after q only move forward as q does: each is
     * searched again only once q has passed it, so a template repeating the opening
     * marker costs linear time, not a scan to its end per repetition. */
    const char *end = NULL, *quote = NULL;
    bool no_quote = false;
    /* a plain scan, not strstr from each match: sanitizers' strstr measures the whole
     * rest of the string per call, which made this quadratic again under ASan */
    for (const char *p = tmpl; p && *p; p++) {
        if (*p != '<' || strncmp(p, open, sizeof open - 1) != 0) continue;
        const char *q = p + sizeof open - 1;
        if (*q == '\n') q++;
        else if (q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        if (!end || end < q) end = strstr(q, "<|im_end|>");
        if (!end) return NULL; /* no later turn has an end either */
        if (!no_quote && (!quote || quote < q)) no_quote = !(quote = strpbrk(q, "'\""));
        if (quote && quote < end) continue; /* the literal ends first: not a default */
        return unescape(q, end);
    }
    return NULL;
}

/* The string literal a Harmony template assigns to a variable, e.g. the identity in
 * `{%- set model_identity = "You are ..." %}`, unescaped; NULL if there is none. */
static char *harmony_set(const char *tmpl, const char *var) {
    char want[64];
    snprintf(want, sizeof want, "set %s", var);
    const char *p = tmpl ? strstr(tmpl, want) : NULL;
    if (!p) return NULL;
    p += strlen(want);
    while (*p == ' ') p++;
    if (*p++ != '=') return NULL;
    while (*p == ' ') p++;
    char quote = *p;
    if (quote != '"' && quote != '\'') return NULL;
    const char *start = ++p;
    while (*p && *p != quote) p += p[0] == '\\' && p[1] ? 2 : 1;
    return *p ? unescape(start, p) : NULL; /* an unterminated literal is no default */
}

/* The knowledge cutoff a Harmony template writes ("Knowledge cutoff: 2024-06\n"), or
 * NULL: the text up to the escape, quote or brace that ends it, at most 32 bytes. */
static char *harmony_cutoff(const char *tmpl) {
    static const char key[] = "Knowledge cutoff: ";
    const char *p = tmpl ? strstr(tmpl, key) : NULL;
    if (!p) return NULL;
    p += sizeof key - 1;
    size_t n = strcspn(p, "\\\"'{}<\n");
    return n > 0 && n <= 32 ? unescape(p, p + n) : NULL;
}

/* ---- rendering -------------------------------------------------------------------- */

static bool is_role(const char *r, const char *want) { return strcmp(r, want) == 0; }

static void render_chatml(strbuf *b, const char *tmpl, const al_chat_message *m, int n, bool gen) {
    if (n == 0 || !is_role(m[0].role, "system")) {
        /* the model file's own default: template text, not a message */
        char *sys = default_system(tmpl);
        if (sys) sb_cat(b, "<|im_start|>system\n", sys, "<|im_end|>\n", NULL);
        al_free(sys);
    }
    for (int i = 0; i < n; i++) {
        sb_cat(b, "<|im_start|>", m[i].role, "\n", NULL);
        sb_content(b, m[i].content);
        sb_append(b, "<|im_end|>\n");
    }
    if (gen) sb_append(b, "<|im_start|>assistant\n");
}

static void render_llama3(strbuf *b, const al_chat_message *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        /* a tool's result: Llama 3.1's ipython role */
        const char *role = is_role(m[i].role, "tool") ? "ipython" : m[i].role;
        sb_cat(b, "<|start_header_id|>", role, "<|end_header_id|>\n\n", NULL);
        sb_content(b, m[i].content);
        sb_append(b, "<|eot_id|>");
    }
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
            if (sys && llama2) {
                sb_append(b, "<<SYS>>\n");
                sb_content(b, sys);
                sb_append(b, "\n<</SYS>>\n\n");
            } else if (sys) {
                sb_content(b, sys);
                sb_append(b, "\n\n");
            }
            sys = NULL;
            sb_content(b, m[i].content);
            sb_append(b, " [/INST]");
            first = false;
        } else {
            sb_append(b, " ");
            sb_content(b, m[i].content);
            sb_append(b, " </s>");
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
        if (sys && !strcmp(role, "user")) {
            sb_content(b, sys);
            sb_append(b, "\n\n");
            sys = NULL;
        }
        sb_content(b, m[i].content);
        sb_append(b, "<end_of_turn>\n");
    }
    if (gen) sb_append(b, "<start_of_turn>model\n");
}

static void render_phi3(strbuf *b, const al_chat_message *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        sb_cat(b, "<|", m[i].role, "|>\n", NULL);
        sb_content(b, m[i].content);
        sb_append(b, "<|end|>\n");
    }
    if (gen) sb_append(b, "<|assistant|>\n");
}

/* Harmony (OpenAI's gpt-oss format, github.com/openai/harmony docs/format.md): the
 * system message carries meta data (identity, knowledge cutoff, reasoning effort,
 * channels); what other formats call the system prompt is the developer message's
 * instructions. Past replies keep only their final channel: the chain of thought of
 * earlier turns is dropped, as the model was trained. */
static void render_harmony(strbuf *b, const char *tmpl, const al_chat_message *m, int n,
                           bool gen) {
    char *identity = harmony_set(tmpl, "model_identity"), *cutoff = harmony_cutoff(tmpl);
    sb_cat(b, "<|start|>system<|message|>",
           identity ? identity : "You are ChatGPT, a large language model trained by OpenAI.",
           "\nKnowledge cutoff: ", cutoff ? cutoff : "2024-06",
           "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
           "Channel must be included for every message.<|end|>", NULL);
    al_free(identity);
    al_free(cutoff);
    for (int i = 0; i < n; i++) {
        if (is_role(m[i].role, "system"))
            sb_append(b, "<|start|>developer<|message|># Instructions\n\n");
        else if (is_role(m[i].role, "user"))
            sb_append(b, "<|start|>user<|message|>");
        else
            sb_append(b, "<|start|>assistant<|channel|>final<|message|>");
        sb_content(b, m[i].content);
        sb_append(b, "<|end|>");
    }
    if (gen) sb_append(b, "<|start|>assistant");
}

/* Renders into b (spans included); on failure b holds nothing to free. */
static al_status render(const char *name, const char *tmpl, const al_chat_message *msgs, int n,
                        bool gen, strbuf *b) {
    if (!name || n < 0 || (n > 0 && !msgs)) return al_error(AL_ERR_ARG, "al_chat_render: bad arguments");
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return al_error(AL_ERR_ARG, "chat message %d has no role or content", i);
        bool tool = is_role(msgs[i].role, "tool") && !strcmp(name, "llama3");
        if (!is_role(msgs[i].role, "system") && !is_role(msgs[i].role, "user") &&
            !is_role(msgs[i].role, "assistant") && !tool)
            return al_error(AL_ERR_ARG, "chat message %d: role '%s' is not system, user or "
                            "assistant%s", i, msgs[i].role,
                            strcmp(name, "llama3") ? "" : " or tool");
    }
    if (!strcmp(name, "chatml")) render_chatml(b, tmpl, msgs, n, gen);
    else if (!strcmp(name, "llama3")) render_llama3(b, msgs, n, gen);
    else if (!strcmp(name, "llama2")) render_inst(b, msgs, n, true);
    else if (!strcmp(name, "mistral")) render_inst(b, msgs, n, false);
    else if (!strcmp(name, "gemma")) render_gemma(b, msgs, n, gen);
    else if (!strcmp(name, "phi3")) render_phi3(b, msgs, n, gen);
    else if (!strcmp(name, "harmony")) render_harmony(b, tmpl, msgs, n, gen);
    else
        return al_error(AL_ERR_UNSUPPORTED, "chat template '%s' is not known (chatml, llama3, "
                        "llama2, mistral, gemma, phi3, harmony)", name);
    sb_append(b, ""); /* an empty conversation is still a string */
    if (b->failed) {
        al_free(b->s);
        al_free(b->spans);
        return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    }
    return AL_OK;
}

al_status al_chat_render(const char *name, const char *tmpl, const al_chat_message *msgs, int n,
                         bool add_generation_prompt, char **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_chat_render: out is NULL");
    *out = NULL;
    strbuf b = {0};
    al_status st = render(name, tmpl, msgs, n, add_generation_prompt, &b);
    if (st != AL_OK) return st;
    al_free(b.spans);
    *out = b.s;
    return AL_OK;
}

al_status al_chat_tokenize(const al_vocab *v, const char *name, const char *tmpl,
                           const al_chat_message *msgs, int n, bool add_generation_prompt,
                           int32_t **tokens, int *n_tokens) {
    if (tokens) *tokens = NULL;
    if (n_tokens) *n_tokens = 0;
    if (!v || !tokens || !n_tokens) return al_error(AL_ERR_ARG, "al_chat_tokenize: NULL argument");
    strbuf b = {0};
    al_status st = render(name, tmpl, msgs, n, add_generation_prompt, &b);
    if (st != AL_OK) return st;
    st = vocab_tokenize_guarded(v, b.s, b.len, true, b.spans, b.n_spans, tokens, n_tokens);
    al_free(b.s);
    al_free(b.spans);
    return st;
}

void al_string_free(char *s) { al_free(s); }
