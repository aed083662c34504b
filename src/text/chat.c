/* chat.c: chat templates, recognised from the model's Jinja text and rendered in C.
 *
 * A model file carries its prompt format as a Jinja template. Running arbitrary Jinja
 * would need an interpreter; instead each common format is recognised by the special
 * tokens its template writes, and rendered here. Recognition is by markers that only
 * that format uses, and an unrecognised template is an error, so a prompt is never
 * formatted silently wrong. A file with no template at all gets the format of its
 * architecture when that is fixed (Gemma, gpt-oss), else an error. The replies of
 * Harmony (gpt-oss), which come on channels, are parsed in harmony.c.
 *
 * Conversations with tools (al_chat_render_turns): Mistral, Harmony, Gemma 4 and GLM
 * write tools, calls and results with control tokens, so they are rendered from the
 * turns' JSON (read by text/json.c), written as the models' own templates write them:
 * Mistral and Harmony here, Gemma 4 in chat_gemma4.c, GLM in chat_glm.c. Every byte
 * that comes from the caller (names, descriptions, arguments, results, ids) is message
 * text, which al_chat_tokenize_turns never turns into control tokens.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "anyllm.h"
#include "text/chat.h"
#include "text/json.h"
#include "text/tokenizer.h"
#include "util.h"

/* ---- a growable string ---------------------------------------------------------- */

void sb_append_n(strbuf *b, const char *s, size_t n) {
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

void sb_append(strbuf *b, const char *s) { sb_append_n(b, s, strlen(s)); }

/* Appends a message's text and records where it went: only the template's own text
 * may become control tokens (al_chat_tokenize). Text right after the last span extends
 * it, so JSON written piece by piece is one span. */
void sb_content_n(strbuf *b, const char *s, size_t n) {
    size_t at = b->len;
    sb_append_n(b, s, n);
    if (b->failed || n == 0) return;
    tok_span *last = b->n_spans ? &b->spans[b->n_spans - 1] : NULL;
    if (last && last->off + last->len == at) {
        last->len += n;
        return;
    }
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

void sb_content(strbuf *b, const char *s) { sb_content_n(b, s, strlen(s)); }

void sb_put_content(void *b, const char *s, size_t n) { sb_content_n(b, s, n); }
void sb_put_plain(void *b, const char *s, size_t n) { sb_append_n(b, s, n); }

void sb_cat(strbuf *b, ...) {
    va_list ap;
    va_start(ap, b);
    for (const char *s; (s = va_arg(ap, const char *));) sb_append(b, s);
    va_end(ap);
}

/* ---- recognition ------------------------------------------------------------------ */

/* The formats, as error messages list them. */
#define CHAT_NAMES "chatml, llama3, llama2, mistral, gemma, gemma4, phi3, harmony, glm45, glm47"

al_status al_chat_template_detect(const char *tmpl, const char **name) {
    if (!name) return al_error(AL_ERR_ARG, "al_chat_template_detect: name is NULL");
    *name = NULL;
    if (!tmpl || !*tmpl) return al_error(AL_ERR_ARG, "the model has no chat template; "
                                         "name one with --chat-template");
    /* first: Harmony's template also writes <|end|>, which phi3's check looks for */
    if (strstr(tmpl, "<|start|>") && strstr(tmpl, "<|channel|>")) *name = "harmony";
    /* Gemma 4's turns are <|turn>role ... <turn|>, not Gemma 1-3's <start_of_turn> */
    else if (strstr(tmpl, "<|turn>") && strstr(tmpl, "<turn|>")) *name = "gemma4";
    /* GLM-4.5/4.6 open an assistant turn with '\n<think></think>' (the template's
     * escaped newline), GLM-4.7 with '</think>' alone; both write <arg_key> calls and
     * also <|user|>, which phi3's check looks for */
    else if (strstr(tmpl, "[gMASK]") && strstr(tmpl, "<arg_key>"))
        *name = strstr(tmpl, "\\n<think></think>") ? "glm45" : "glm47";
    else if (strstr(tmpl, "<|im_start|>")) *name = "chatml";
    else if (strstr(tmpl, "<|start_header_id|>")) *name = "llama3";
    else if (strstr(tmpl, "<start_of_turn>")) *name = "gemma";
    else if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>")) *name = "phi3";
    else if (strstr(tmpl, "[INST]") && strstr(tmpl, "<<SYS>>")) *name = "llama2";
    else if (strstr(tmpl, "[INST]")) *name = "mistral";
    if (*name) return AL_OK;
    return al_error(AL_ERR_UNSUPPORTED, "the model's chat template is not one anyllm can "
                    "render (" CHAT_NAMES "); name one with --chat-template");
}

/* Architectures whose GGUF files often carry no template, and the format their models
 * were trained on: Gemma's turn format is fixed by the model family (Google's Gemma 3
 * 270M file, for one, has no tokenizer.chat_template; Gemma 4 files say "gemma4", as
 * llama.cpp's converter writes it), and gpt-oss works only in Harmony (OpenAI: "should
 * not be used without using the harmony format"). GLM is no entry: glm4moe files hold
 * GLM-4.5 and GLM-4.7, whose formats differ, and GLM-4.7-Flash's architecture is
 * deepseek2. */
static const struct {
    const char *arch, *name;
} k_builtin[] = {
    {"gemma", "gemma"},
    {"gemma2", "gemma"},
    {"gemma3", "gemma"},
    {"gemma4", "gemma4"},
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

/* ---- tools and calls: the JSON of a conversation with tools ------------------------------ */

static void ctx_free(chat_ctx *c, int n) {
    for (int i = 0; c->calls && i < n; i++) al_free(c->calls[i]);
    for (int i = 0; i < c->n_docs; i++) json_doc_free(c->docs[i]);
    al_free(c->calls);
    al_free(c->n_calls);
    al_free(c->docs);
}

static al_status ctx_parse(chat_ctx *c, const char *what, const char *text, const json_val **v) {
    if (c->n_docs == c->cap_docs) {
        int cap = c->cap_docs ? 2 * c->cap_docs : 8;
        json_doc **d = al_realloc(c->docs, (size_t)cap * sizeof *d);
        if (!d) return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
        c->docs = d;
        c->cap_docs = cap;
    }
    return json_parse(what, text, strlen(text), &c->docs[c->n_docs++], v);
}

static bool alnum(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* Mistral's call id for an id, or for a place when id is NULL: the id itself when it is
 * 9 letters or digits, else 9 of them derived from it (FNV-1a, base 62), so that a call
 * and its result, which carry the same id, get the same one. */
static void mistral_id(const char *id, int place, char out[10]) {
    size_t n = id ? strlen(id) : 0;
    bool ok = n == 9;
    for (size_t i = 0; ok && i < n; i++) ok = alnum(id[i]);
    if (ok) {
        memcpy(out, id, 10);
        return;
    }
    char buf[32];
    if (!id) snprintf(buf, sizeof buf, "call %d", place), id = buf, n = strlen(buf);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 0x100000001b3ull;
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for (int i = 0; i < 9; i++, h /= 62) out[i] = digits[h % 62];
    out[9] = 0;
}

/* The calls of turn i: [{"id", "function": {"name", "arguments"}}] (or name and
 * arguments in the call itself), arguments an object or a string holding one. */
static al_status parse_calls(chat_ctx *c, const al_chat_turn *t, int i, int *n_seen) {
    char what[64];
    snprintf(what, sizeof what, "chat message %d's tool_calls", i);
    const json_val *arr;
    al_status st = ctx_parse(c, what, t->tool_calls, &arr);
    if (st != AL_OK) return st;
    if (arr->type != JSON_T_ARRAY) return al_error(AL_ERR_ARG, "%s is not an array", what);
    if (arr->n_items == 0) return AL_OK;
    if (!(c->calls[i] = al_calloc((size_t)arr->n_items, sizeof *c->calls[i])))
        return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    for (int k = 0; k < arr->n_items; k++) {
        const json_val *call = &arr->items[k], *f = json_get(call, "function");
        if (!f) f = call;
        const json_val *args = json_get(f, "arguments");
        chat_call *cc = &c->calls[i][k];
        cc->name = json_get_str(f, "name");
        cc->id = json_get_str(call, "id");
        if (!cc->name || !*cc->name)
            return al_error(AL_ERR_ARG, "%s[%d] has no function name", what, k);
        if (args && args->type == JSON_T_STRING) {
            char argwhat[96];
            snprintf(argwhat, sizeof argwhat, "%s[%d]'s arguments", what, k);
            if ((st = ctx_parse(c, argwhat, args->s, &args)) != AL_OK) return st;
        }
        if (args && args->type != JSON_T_OBJECT)
            return al_error(AL_ERR_ARG, "%s[%d]'s arguments are not a JSON object", what, k);
        static const json_val empty = {.type = JSON_T_OBJECT};
        cc->args = args ? args : &empty;
        mistral_id(cc->id, (*n_seen)++, cc->mistral_id);
    }
    c->n_calls[i] = arr->n_items;
    return AL_OK;
}

static al_status parse_tools(chat_ctx *c, const char *text) {
    const json_val *arr;
    al_status st = ctx_parse(c, "the tools", text, &arr);
    if (st != AL_OK) return st;
    if (arr->type != JSON_T_ARRAY) return al_error(AL_ERR_ARG, "the tools are not a JSON array");
    for (int k = 0; k < arr->n_items; k++) {
        const json_val *f = json_get(&arr->items[k], "function");
        const char *name = json_get_str(f, "name");
        if (!name || !*name)
            return al_error(AL_ERR_ARG, "tools[%d] is not {\"type\": \"function\", \"function\": "
                            "{\"name\": ...}}", k);
    }
    c->tools = arr->n_items ? arr : NULL;
    return AL_OK;
}

static bool is_role(const char *r, const char *want) { return strcmp(r, want) == 0; }

/* The call a tool result at turn i answers: the latest of its id, else the one at its
 * place in the run of results right after a turn of calls; NULL if none. */
static const chat_call *answered(const chat_ctx *c, const al_chat_turn *t, int i) {
    const chat_call *found = NULL;
    for (int j = 0; t[i].tool_call_id && j < i; j++)
        for (int k = 0; k < c->n_calls[j]; k++)
            if (c->calls[j][k].id && !strcmp(c->calls[j][k].id, t[i].tool_call_id))
                found = &c->calls[j][k];
    if (found) return found;
    int j = i - 1, place = 0;
    for (; j >= 0 && is_role(t[j].role, "tool"); j--) place++;
    return j >= 0 && place < c->n_calls[j] ? &c->calls[j][place] : NULL;
}

/* The function a Harmony result comes from: its name, else the call it answers, else
 * (as OpenAI's template) the first call of the latest turn of calls; NULL if none. */
static const char *result_fn(const chat_ctx *c, const al_chat_turn *t, int i) {
    const chat_call *call = answered(c, t, i);
    if (t[i].name) return t[i].name;
    if (call) return call->name;
    for (int j = i - 1; j >= 0; j--)
        if (c->n_calls[j] > 0) return c->calls[j][0].name;
    return NULL;
}

/* Gemma 4 writes a tool result only right after the turn of calls it answers (the
 * template's forward scan); elsewhere it would vanish: chat message i is such a result. */
static bool gemma4_orphan(const al_chat_turn *t, const chat_ctx *c, int i) {
    int j = i - 1;
    while (j >= 0 && is_role(t[j].role, "tool")) j--;
    return is_role(t[i].role, "tool") && (j < 0 || c->n_calls[j] == 0);
}

/* Checks the turns against what the format renders and parses their JSON. */
static al_status prepare(const char *name, const al_chat_turn *t, int n, const char *tools,
                         chat_ctx *c) {
    const bool mistral = !strcmp(name, "mistral"), harmony = !strcmp(name, "harmony");
    const bool gemma4 = !strcmp(name, "gemma4");
    const bool glm = !strcmp(name, "glm45") || !strcmp(name, "glm47");
    /* the formats that render tools and calls, and those that render reasoning */
    const bool calls = mistral || harmony || gemma4 || glm, thinks = harmony || gemma4 || glm;
    const bool tool_role = calls || !strcmp(name, "llama3");
    for (int i = 0; i < n; i++) {
        if (!t[i].role) return al_error(AL_ERR_ARG, "chat message %d has no role", i);
        if (!is_role(t[i].role, "system") && !is_role(t[i].role, "user") &&
            !is_role(t[i].role, "assistant") && !(tool_role && is_role(t[i].role, "tool")))
            return al_error(AL_ERR_ARG, "chat message %d: role '%s' is not system, user or "
                            "assistant%s", i, t[i].role, tool_role ? " or tool" : "");
        const char *part = t[i].tool_calls && !calls  ? "tool_calls"
                           : t[i].reasoning && !thinks ? "reasoning"
                                                       : NULL;
        if (part)
            return al_error(AL_ERR_UNSUPPORTED, "chat message %d: the '%s' chat format does "
                            "not render %s", i, name, part);
        if (t[i].tool_calls && !is_role(t[i].role, "assistant"))
            return al_error(AL_ERR_ARG, "chat message %d: only assistant messages have "
                            "tool_calls", i);
    }
    if (tools && !calls)
        return al_error(AL_ERR_UNSUPPORTED, "the '%s' chat format does not render tools (mistral, "
                        "harmony, gemma4, glm45 and glm47 do)", name);
    if (tools) {
        al_status st = parse_tools(c, tools);
        if (st != AL_OK) return st;
    }
    if (!(c->calls = al_calloc((size_t)n + 1, sizeof *c->calls)) ||
        !(c->n_calls = al_calloc((size_t)n + 1, sizeof *c->n_calls)))
        return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    int n_seen = 0;
    for (int i = 0; i < n; i++) {
        al_status st = t[i].tool_calls ? parse_calls(c, &t[i], i, &n_seen) : AL_OK;
        if (st != AL_OK) return st;
    }
    for (int i = 0; harmony && i < n; i++)
        if (is_role(t[i].role, "tool") && !result_fn(c, t, i))
            return al_error(AL_ERR_ARG, "chat message %d: a tool result that answers no call "
                            "and has no name", i);
    for (int i = 0; gemma4 && i < n; i++)
        if (gemma4_orphan(t, c, i))
            return al_error(AL_ERR_ARG, "chat message %d: a tool result that does not follow "
                            "a turn of calls (gemma4 writes results after their calls)", i);
    return AL_OK;
}

/* ---- rendering -------------------------------------------------------------------- */

static void render_chatml(strbuf *b, const char *tmpl, const al_chat_turn *m, int n, bool gen) {
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

static void render_llama3(strbuf *b, const al_chat_turn *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        /* a tool's result: Llama 3.1's ipython role */
        const char *role = is_role(m[i].role, "tool") ? "ipython" : m[i].role;
        sb_cat(b, "<|start_header_id|>", role, "<|end_header_id|>\n\n", NULL);
        sb_content(b, m[i].content);
        sb_append(b, "<|eot_id|>");
    }
    if (gen) sb_append(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Mistral's calls and results: JSON as its tokenizer writes it, all of it message text. */
static void mistral_calls(strbuf *b, const chat_call *calls, int n) {
    sb_append(b, "[TOOL_CALLS]");
    sb_content(b, "[");
    for (int k = 0; k < n; k++) {
        sb_content(b, k ? ", {\"name\": " : "{\"name\": ");
        json_write_str(calls[k].name, strlen(calls[k].name), sb_put_content, b);
        sb_content(b, ", \"arguments\": ");
        json_write(calls[k].args, sb_put_content, b);
        sb_content(b, ", \"id\": \"");
        sb_content(b, calls[k].mistral_id);
        sb_content(b, "\"}");
    }
    sb_content(b, "]");
    sb_append(b, "</s>");
}

static void mistral_result(strbuf *b, const chat_ctx *c, const al_chat_turn *t, int i) {
    const chat_call *call = answered(c, t, i);
    char id[10];
    if (t[i].tool_call_id) mistral_id(t[i].tool_call_id, 0, id);
    else if (call) memcpy(id, call->mistral_id, sizeof id);
    else mistral_id(NULL, -1 - i, id); /* answers nothing known: an id of its own */
    sb_append(b, "[TOOL_RESULTS]");
    sb_content(b, "{\"content\": ");
    json_write_str(t[i].content, strlen(t[i].content), sb_put_content, b);
    sb_content(b, ", \"call_id\": \"");
    sb_content(b, id);
    sb_content(b, "\"}");
    sb_append(b, "[/TOOL_RESULTS]");
}

/* Llama 2 puts the system prompt inside the first [INST] block; Mistral prepends it to
 * the first user message, and writes the tools before the last one. */
static void render_inst(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, bool llama2) {
    const char *sys = NULL;
    bool first = true;
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (is_role(m[i].role, "user")) last_user = i;
    for (int i = 0; i < n; i++) {
        if (is_role(m[i].role, "system")) {
            sys = m[i].content;
        } else if (is_role(m[i].role, "user")) {
            if (!first) sb_append(b, "<s>");
            if (c->tools && i == last_user) {
                sb_append(b, "[AVAILABLE_TOOLS]");
                json_write(c->tools, sb_put_content, b);
                sb_append(b, "[/AVAILABLE_TOOLS]");
            }
            sb_append(b, "[INST] ");
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
        } else if (is_role(m[i].role, "tool")) {
            mistral_result(b, c, m, i);
        } else if (c->n_calls[i] > 0) {
            if (*m[i].content) {
                sb_append(b, " ");
                sb_content(b, m[i].content);
            }
            mistral_calls(b, c->calls[i], c->n_calls[i]);
        } else {
            sb_append(b, " ");
            sb_content(b, m[i].content);
            sb_append(b, " </s>");
        }
    }
}

/* Gemma has no system role: the system text leads the first user turn. */
static void render_gemma(strbuf *b, const al_chat_turn *m, int n, bool gen) {
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

static void render_phi3(strbuf *b, const al_chat_turn *m, int n, bool gen) {
    for (int i = 0; i < n; i++) {
        sb_cat(b, "<|", m[i].role, "|>\n", NULL);
        sb_content(b, m[i].content);
        sb_append(b, "<|end|>\n");
    }
    if (gen) sb_append(b, "<|assistant|>\n");
}

/* ---- Harmony's functions as TypeScript ---------------------------------------------------- */
/* As OpenAI's gpt-oss template writes them (its render_typescript_type and
 * render_tool_namespace macros), less the whitespace its Jinja indentation leaves
 * inside nested objects. */

static bool type_is(const json_val *spec, const char *t) {
    const char *s = json_get_str(spec, "type");
    return s && !strcmp(s, t);
}

static bool nonempty(const json_val *v, json_type t) { return v && v->type == t && v->n_items; }

static bool required(const json_val *schema, const char *key) {
    const json_val *r = json_get(schema, "required");
    for (int i = 0; r && r->type == JSON_T_ARRAY && i < r->n_items; i++)
        if (r->items[i].type == JSON_T_STRING && !strcmp(r->items[i].s, key)) return true;
    return false;
}

/* A value as Jinja prints it: a string's text, anything else as JSON. */
static void ts_str(strbuf *b, const json_val *v) {
    if (v->type == JSON_T_STRING) sb_append_n(b, v->s, v->len);
    else json_write(v, sb_put_plain, b);
}

static void ts_type(strbuf *b, const json_val *spec);

static void ts_array(strbuf *b, const json_val *spec) {
    const json_val *items = json_get(spec, "items"), *nullable = json_get(spec, "nullable");
    if (!nonempty(items, JSON_T_OBJECT)) sb_append(b, "any[]");
    else if (type_is(items, "string")) sb_append(b, "string[]");
    else if (type_is(items, "number") || type_is(items, "integer")) sb_append(b, "number[]");
    else if (type_is(items, "boolean")) sb_append(b, "boolean[]");
    else {
        strbuf inner = {0};
        ts_type(&inner, items);
        b->failed |= inner.failed;
        /* a long or doubly-object element type reads as any, as the template has it */
        if (inner.s && (inner.len > 50 || !strcmp(inner.s, "object | object")))
            sb_append(b, "any[]");
        else if (inner.s)
            sb_cat(b, inner.s, "[]", NULL);
        al_free(inner.s);
    }
    if (nullable && nullable->type == JSON_T_BOOL && nullable->b) sb_append(b, " | null");
}

static void ts_object(strbuf *b, const json_val *spec) {
    const json_val *props = json_get(spec, "properties");
    if (!nonempty(props, JSON_T_OBJECT)) {
        sb_append(b, "object");
        return;
    }
    sb_append(b, "{\n");
    for (int i = 0; i < props->n_items; i++) {
        sb_append_n(b, props->items[i].key, props->items[i].key_len);
        sb_append(b, required(spec, props->items[i].key) ? ": " : "?: ");
        ts_type(b, &props->items[i]);
        if (i + 1 < props->n_items) sb_append(b, ", ");
    }
    sb_append(b, "}");
}

static void ts_type(strbuf *b, const json_val *spec) {
    const json_val *type = json_get(spec, "type"), *one = json_get(spec, "oneOf");
    const json_val *e = json_get(spec, "enum"), *nullable = json_get(spec, "nullable");
    if (type_is(spec, "array")) {
        ts_array(b, spec);
    } else if (nonempty(type, JSON_T_ARRAY)) { /* ["string", "null"] */
        for (int i = 0; i < type->n_items; i++) {
            if (i) sb_append(b, " | ");
            ts_str(b, &type->items[i]);
        }
    } else if (nonempty(one, JSON_T_ARRAY)) {
        bool obj = false;
        for (int i = 0; i < one->n_items; i++) obj |= type_is(&one->items[i], "object");
        if (obj && one->n_items > 1) sb_append(b, "any");
        for (int i = 0; !(obj && one->n_items > 1) && i < one->n_items; i++) {
            if (i) sb_append(b, " | ");
            ts_type(b, &one->items[i]);
        }
    } else if (type_is(spec, "string") && nonempty(e, JSON_T_ARRAY)) {
        for (int i = 0; i < e->n_items; i++) {
            sb_append(b, i ? "\" | \"" : "\"");
            ts_str(b, &e->items[i]);
        }
        sb_append(b, "\"");
    } else if (type_is(spec, "string")) {
        sb_append(b, nullable && nullable->type == JSON_T_BOOL && nullable->b ? "string | null"
                                                                              : "string");
    } else if (type_is(spec, "number") || type_is(spec, "integer")) {
        sb_append(b, "number");
    } else if (type_is(spec, "boolean")) {
        sb_append(b, "boolean");
    } else if (type_is(spec, "object")) {
        ts_object(b, spec);
    } else {
        sb_append(b, "any");
    }
}

/* One parameter of a function: its description, name, type and default. */
static void ts_param(strbuf *b, const json_val *params, const json_val *p) {
    const json_val *desc = json_get(p, "description"), *def = json_get(p, "default");
    if (desc && desc->type == JSON_T_STRING && desc->len)
        sb_cat(b, "// ", desc->s, "\n", NULL);
    sb_append_n(b, p->key, p->key_len);
    sb_append(b, required(params, p->key) ? ": " : "?: ");
    ts_type(b, p);
    if (def && (nonempty(json_get(p, "enum"), JSON_T_ARRAY) ||
                nonempty(json_get(p, "oneOf"), JSON_T_ARRAY))) {
        /* the template adds these defaults as text, not as JSON */
        sb_append(b, json_get(p, "enum") ? ", // default: " : "// default: ");
        ts_str(b, def);
    } else if (def) {
        sb_append(b, ", // default: ");
        json_write(def, sb_put_plain, b);
    }
    sb_append(b, ",\n");
}

/* "# Tools\n\n## functions\n\nnamespace functions {...} // namespace functions" */
static void harmony_tools(strbuf *b, const json_val *tools) {
    sb_append(b, "# Tools\n\n## functions\n\nnamespace functions {\n\n");
    for (int i = 0; i < tools->n_items; i++) {
        const json_val *f = json_get(&tools->items[i], "function");
        const json_val *desc = json_get(f, "description"), *params = json_get(f, "parameters");
        const json_val *props = json_get(params, "properties");
        if (desc && desc->type == JSON_T_STRING && desc->len)
            sb_cat(b, "// ", desc->s, "\n", NULL);
        sb_cat(b, "type ", json_get_str(f, "name"), " = ", NULL);
        if (!nonempty(props, JSON_T_OBJECT)) {
            sb_append(b, "() => any;\n\n");
            continue;
        }
        sb_append(b, "(_: {\n");
        for (int k = 0; k < props->n_items; k++) ts_param(b, params, &props->items[k]);
        sb_append(b, "}) => any;\n\n");
    }
    sb_append(b, "} // namespace functions");
}

/* ---- Harmony ------------------------------------------------------------------------------ */

/* An assistant turn of calls: its chain of thought while no later turn answers, a
 * preamble, then each call, which ends a reply. */
static void harmony_calls(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, int i) {
    bool answered_later = false;
    for (int j = i + 1; j < n; j++)
        answered_later |= is_role(m[j].role, "assistant") && c->n_calls[j] == 0;
    const char *r = m[i].reasoning && *m[i].reasoning ? m[i].reasoning : NULL;
    const char *analysis = r ? r : *m[i].content ? m[i].content : NULL;
    if (analysis && !answered_later) {
        sb_append(b, "<|start|>assistant<|channel|>analysis<|message|>");
        sb_content(b, analysis);
        sb_append(b, "<|end|>");
    }
    if (r && *m[i].content) {
        sb_append(b, "<|start|>assistant<|channel|>commentary<|message|>");
        sb_content(b, m[i].content);
        sb_append(b, "<|end|>");
    }
    for (int k = 0; k < c->n_calls[i]; k++) {
        sb_append(b, "<|start|>assistant to=functions.");
        sb_content(b, c->calls[i][k].name);
        sb_append(b, "<|channel|>commentary json<|message|>");
        json_write(c->calls[i][k].args, sb_put_content, b);
        sb_append(b, "<|call|>");
    }
}

static void harmony_result(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int i) {
    sb_append(b, "<|start|>functions.");
    sb_content(b, result_fn(c, m, i)); /* there is one: prepare checked */
    sb_append(b, " to=assistant<|channel|>commentary<|message|>");
    json_write_str(m[i].content, strlen(m[i].content), sb_put_content, b);
    sb_append(b, "<|end|>");
}

/* The developer message of a conversation with tools: the first system turn's text as
 * instructions (true when there is one), then the functions. */
static bool harmony_developer(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n) {
    const bool sys = n > 0 && is_role(m[0].role, "system");
    sb_append(b, "<|start|>developer<|message|>");
    if (sys) {
        sb_append(b, "# Instructions\n\n");
        sb_content(b, m[0].content);
        sb_append(b, "\n\n");
    }
    strbuf ts = {0};
    harmony_tools(&ts, c->tools);
    b->failed |= ts.failed;
    if (ts.s) sb_content_n(b, ts.s, ts.len);
    al_free(ts.s);
    sb_append(b, "<|end|>");
    return sys;
}

/* Harmony (OpenAI's gpt-oss format, github.com/openai/harmony docs/format.md): the
 * system message carries meta data (identity, knowledge cutoff, reasoning effort,
 * channels); what other formats call the system prompt is the developer message's
 * instructions. Past replies keep only their final channel: the chain of thought of
 * earlier turns is dropped, as the model was trained. */
static void render_harmony(strbuf *b, const char *tmpl, const chat_ctx *c, const al_chat_turn *m,
                           int n, bool gen) {
    char *identity = harmony_set(tmpl, "model_identity"), *cutoff = harmony_cutoff(tmpl);
    sb_cat(b, "<|start|>system<|message|>",
           identity ? identity : "You are ChatGPT, a large language model trained by OpenAI.",
           "\nKnowledge cutoff: ", cutoff ? cutoff : "2024-06",
           "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
           "Channel must be included for every message.", NULL);
    if (c->tools) sb_append(b, "\nCalls to these tools must go to the commentary channel: "
                               "'functions'.");
    sb_append(b, "<|end|>");
    al_free(identity);
    al_free(cutoff);
    int i = c->tools && harmony_developer(b, c, m, n) ? 1 : 0;
    for (; i < n; i++) {
        if (is_role(m[i].role, "tool")) {
            harmony_result(b, c, m, i);
            continue;
        }
        if (c->n_calls[i] > 0) {
            harmony_calls(b, c, m, n, i);
            continue;
        }
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

/* ---- the API ------------------------------------------------------------------------------ */

al_chat_params al_chat_default_params(void) {
    return (al_chat_params){.add_generation_prompt = true, .tools = NULL};
}

static al_status dispatch(const char *name, const char *tmpl, const chat_ctx *c,
                          const al_chat_turn *m, int n, bool gen, strbuf *b) {
    if (!strcmp(name, "chatml")) render_chatml(b, tmpl, m, n, gen);
    else if (!strcmp(name, "llama3")) render_llama3(b, m, n, gen);
    else if (!strcmp(name, "llama2")) render_inst(b, c, m, n, true);
    else if (!strcmp(name, "mistral")) render_inst(b, c, m, n, false);
    else if (!strcmp(name, "gemma")) render_gemma(b, m, n, gen);
    else if (!strcmp(name, "phi3")) render_phi3(b, m, n, gen);
    else if (!strcmp(name, "harmony")) render_harmony(b, tmpl, c, m, n, gen);
    else if (!strcmp(name, "gemma4")) chat_render_gemma4(b, c, m, n, gen);
    else if (!strcmp(name, "glm45")) chat_render_glm(b, c, m, n, gen, false);
    else if (!strcmp(name, "glm47")) chat_render_glm(b, c, m, n, gen, true);
    else
        return al_error(AL_ERR_UNSUPPORTED, "chat template '%s' is not known (" CHAT_NAMES ")",
                        name);
    return AL_OK;
}

/* Renders into b (spans included); on failure b holds nothing to free. */
static al_status render(const char *name, const char *tmpl, const al_chat_turn *turns, int n,
                        const al_chat_params *params, strbuf *b) {
    if (!name || n < 0 || (n > 0 && !turns))
        return al_error(AL_ERR_ARG, "al_chat_render: bad arguments");
    const al_chat_params p = params ? *params : al_chat_default_params();
    /* a copy whose contents are never NULL */
    al_chat_turn *m = al_malloc(((size_t)n + 1) * sizeof *m);
    if (!m) return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    for (int i = 0; i < n; i++) {
        m[i] = turns[i];
        if (!m[i].content) m[i].content = "";
    }
    chat_ctx c = {0};
    al_status st = prepare(name, m, n, p.tools, &c);
    if (st == AL_OK) st = dispatch(name, tmpl, &c, m, n, p.add_generation_prompt, b);
    ctx_free(&c, n);
    al_free(m);
    sb_append(b, ""); /* an empty conversation is still a string */
    if (st == AL_OK && b->failed) st = al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    if (st != AL_OK) {
        al_free(b->s);
        al_free(b->spans);
    }
    return st;
}

/* Messages as turns with no tool parts, into *out (freed with al_free). */
static al_status as_turns(const al_chat_message *msgs, int n, al_chat_turn **out) {
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return al_error(AL_ERR_ARG, "al_chat_render: bad arguments");
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return al_error(AL_ERR_ARG, "chat message %d has no role or content", i);
    al_chat_turn *t = al_calloc((size_t)n + 1, sizeof *t);
    if (!t) return al_error(AL_ERR_NOMEM, "out of memory rendering a chat");
    for (int i = 0; i < n; i++)
        t[i] = (al_chat_turn){.role = msgs[i].role, .content = msgs[i].content};
    *out = t;
    return AL_OK;
}

al_status al_chat_render_turns(const char *name, const char *tmpl, const al_chat_turn *turns,
                               int n, const al_chat_params *params, char **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_chat_render: out is NULL");
    *out = NULL;
    strbuf b = {0};
    al_status st = render(name, tmpl, turns, n, params, &b);
    if (st != AL_OK) return st;
    al_free(b.spans);
    *out = b.s;
    return AL_OK;
}

al_status al_chat_render(const char *name, const char *tmpl, const al_chat_message *msgs, int n,
                         bool add_generation_prompt, char **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_chat_render: out is NULL");
    *out = NULL;
    al_chat_turn *t;
    al_status st = as_turns(msgs, n, &t);
    if (st != AL_OK) return st;
    al_chat_params p = {.add_generation_prompt = add_generation_prompt};
    st = al_chat_render_turns(name, tmpl, t, n, &p, out);
    al_free(t);
    return st;
}

al_status al_chat_tokenize_turns(const al_vocab *v, const char *name, const char *tmpl,
                                 const al_chat_turn *turns, int n, const al_chat_params *params,
                                 int32_t **tokens, int *n_tokens) {
    if (tokens) *tokens = NULL;
    if (n_tokens) *n_tokens = 0;
    if (!v || !tokens || !n_tokens) return al_error(AL_ERR_ARG, "al_chat_tokenize: NULL argument");
    strbuf b = {0};
    al_status st = render(name, tmpl, turns, n, params, &b);
    if (st != AL_OK) return st;
    st = vocab_tokenize_guarded(v, b.s, b.len, true, b.spans, b.n_spans, tokens, n_tokens);
    al_free(b.s);
    al_free(b.spans);
    return st;
}

al_status al_chat_tokenize(const al_vocab *v, const char *name, const char *tmpl,
                           const al_chat_message *msgs, int n, bool add_generation_prompt,
                           int32_t **tokens, int *n_tokens) {
    if (tokens) *tokens = NULL;
    if (n_tokens) *n_tokens = 0;
    if (!v || !tokens || !n_tokens) return al_error(AL_ERR_ARG, "al_chat_tokenize: NULL argument");
    al_chat_turn *t;
    al_status st = as_turns(msgs, n, &t);
    if (st != AL_OK) return st;
    al_chat_params p = {.add_generation_prompt = add_generation_prompt};
    st = al_chat_tokenize_turns(v, name, tmpl, t, n, &p, tokens, n_tokens);
    al_free(t);
    return st;
}

void al_string_free(char *s) { al_free(s); }
