/* chat_gemma4.c: Gemma 4's chat format, as its template writes it
 * (google-gemma-4-31B-it.jinja, the version with "OpenAI Chat Completions" results).
 *
 * Turns are <|turn>ROLE\n ... <turn|>\n, the assistant's role being "model". The system
 * turn holds the first system message and the tools, each <|tool>declaration:NAME{...}
 * <tool|>. Declarations, calls and results are written in Gemma's own notation, not
 * JSON: keys bare, strings between <|"|> markers, objects and arrays with no spaces,
 * keys sorted (Jinja's dictsort: case-insensitive). A turn of calls is
 *   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>
 * followed in the same turn by the results of the tool messages right after it,
 *   <|tool_response>response:NAME{value:<|"|>TEXT<|"|>}<tool_response|>
 * then the turn's text; with results but no text the model's turn goes on (no <turn|>).
 * The generation prompt closes an empty thought channel (thinking off):
 *   <|turn>model\n<|channel>thought\n<channel|>
 * Values print as Jinja prints them (transformers' rendering): null as None, numbers as
 * their JSON text. Where the template and this file part: a result whose id matches no
 * call is named by the call at its place (the template compares missing ids as equal,
 * naming every such result after the last call); and as llama.cpp does, a generation
 * prompt after a finished turn of calls, results and text opens a model turn, where the
 * template writes nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "util.h"

/* The template's string delimiter, a control token of Gemma 4's vocabulary. */
static const char k_quote[] = "<|\"|>";

static void g4_str_n(strbuf *b, const char *s, size_t n) {
    sb_append(b, k_quote);
    sb_content_n(b, s, n);
    sb_append(b, k_quote);
}

static void g4_str(strbuf *b, const char *s) {
    g4_str_n(b, s, strlen(s));
}

/* Python's str.strip() whitespace, its ASCII part */
static bool is_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* s[0, *n) without the whitespace at its ends (Jinja's trim); returns the new start. */
static const char *trim(const char *s, size_t *n) {
    while (*n && is_space(*s))
        s++, (*n)--;
    while (*n && is_space(s[*n - 1]))
        (*n)--;
    return s;
}

/* Whether a value is true for Jinja's `if`: present, and not false, 0, "" or empty. */
static bool truthy(const json_val *v) {
    if (!v) return false;
    switch (v->type) {
    case JSON_T_NULL:
        return false;
    case JSON_T_BOOL:
        return v->b;
    case JSON_T_NUMBER:
        return strspn(v->s, "-+0.eE") != v->len; /* 0, -0.0, 0e5: false */
    case JSON_T_STRING:
        return v->len > 0;
    default:
        return v->n_items > 0;
    }
}

/* ---- dictsort --------------------------------------------------------------------------- */

static int cmp_ci(const char *a, const char *b) {
    for (;; a++, b++) {
        int x = (unsigned char)*a, y = (unsigned char)*b;
        x = x >= 'A' && x <= 'Z' ? x + 32 : x;
        y = y >= 'A' && y <= 'Z' ? y + 32 : y;
        if (x != y || !x) return x - y;
    }
}

typedef struct member {
    const char *key;
    int at; /* its index in the object */
} member;

static int cmp_member(const void *pa, const void *pb) {
    const member *a = pa, *b = pb;
    int d = cmp_ci(a->key, b->key);
    return d ? d : a->at - b->at; /* stable, as Python's sort */
}

/* The members of an object in Jinja's dictsort order (case-insensitive by key): indexes
 * into obj->items, freed with al_free; NULL when out of memory (b then fails). */
static int *dictsort(strbuf *b, const json_val *obj) {
    const size_t n = (size_t)obj->n_items;
    member *m = al_malloc((n + 1) * sizeof *m);
    int *ix = m ? al_malloc((n + 1) * sizeof *ix) : NULL;
    if (!ix) {
        al_free(m);
        b->failed = true;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        m[i] = (member){obj->items[i].key, (int)i};
    qsort(m, n, sizeof *m, cmp_member);
    for (size_t i = 0; i < n; i++)
        ix[i] = m[i].at;
    al_free(m);
    return ix;
}

/* ---- values: format_argument ------------------------------------------------------------ */

/* A value as the template's format_argument writes it: strings quoted with <|"|>,
 * objects with sorted keys (quoted when escape_keys), no spaces. */
static void g4_value(strbuf *b, const json_val *v, bool escape_keys) {
    switch (v->type) {
    case JSON_T_STRING:
        g4_str_n(b, v->s, v->len);
        break;
    case JSON_T_BOOL:
        sb_content(b, v->b ? "true" : "false");
        break;
    case JSON_T_NUMBER:
        sb_content_n(b, v->s, v->len);
        break;
    case JSON_T_NULL: /* Jinja prints Python's None */
        sb_content(b, "None");
        break;
    case JSON_T_ARRAY:
        sb_append(b, "[");
        for (int i = 0; i < v->n_items; i++) {
            if (i) sb_append(b, ",");
            g4_value(b, &v->items[i], escape_keys);
        }
        sb_append(b, "]");
        break;
    case JSON_T_OBJECT: {
        int *ix = dictsort(b, v);
        sb_append(b, "{");
        for (int i = 0; ix && i < v->n_items; i++) {
            const json_val *m = &v->items[ix[i]];
            if (i) sb_append(b, ",");
            if (escape_keys)
                g4_str_n(b, m->key, m->key_len);
            else
                sb_content_n(b, m->key, m->key_len);
            sb_append(b, ":");
            g4_value(b, m, escape_keys);
        }
        sb_append(b, "}");
        al_free(ix);
        break;
    }
    }
}

/* ---- tool declarations: format_parameters, format_function_declaration ------------------ */

/* A value as `{{ v }}` prints it: a string's text, Python's None, True and False, a
 * number as written, anything else as JSON. */
static void jinja_print(strbuf *b, const json_val *v) {
    if (v->type == JSON_T_STRING)
        sb_content_n(b, v->s, v->len);
    else if (v->type == JSON_T_NULL)
        sb_content(b, "None");
    else if (v->type == JSON_T_BOOL)
        sb_content(b, v->b ? "True" : "False");
    else
        json_write(v, sb_put_content, b);
}

/* <|"|>{{ v }}<|"|> */
static void quoted_print(strbuf *b, const json_val *v) {
    sb_append(b, k_quote);
    if (v) jinja_print(b, v);
    sb_append(b, k_quote);
}

/* A schema's "type" upper-cased as Jinja's `upper` prints it: a string's letters, a list
 * as Python writes one (['STRING', 'NULL']), nothing when there is none. */
static void upper_type(strbuf *b, const json_val *t) {
    if (t && t->type == JSON_T_STRING) {
        for (size_t i = 0; i < t->len; i++) {
            char ch = t->s[i] >= 'a' && t->s[i] <= 'z' ? (char)(t->s[i] - 32) : t->s[i];
            sb_content_n(b, &ch, 1);
        }
    } else if (t && t->type == JSON_T_ARRAY) {
        sb_content(b, "[");
        for (int i = 0; i < t->n_items; i++) {
            sb_content(b, i ? ", '" : "'");
            upper_type(b, &t->items[i]);
            sb_content(b, "'");
        }
        sb_content(b, "]");
    }
}

static bool type_is(const json_val *spec, const char *upper) {
    const json_val *t = json_get(spec, "type");
    return t && t->type == JSON_T_STRING && t->len == strlen(upper) && !cmp_ci(t->s, upper);
}

/* required:[<|"|>a<|"|>,...] */
static void g4_required(strbuf *b, const json_val *req) {
    sb_append(b, "required:[");
    for (int i = 0; req->type == JSON_T_ARRAY && i < req->n_items; i++) {
        if (i) sb_append(b, ",");
        quoted_print(b, &req->items[i]);
    }
    sb_append(b, "]");
}

/* The template's `{% if add_comma %},{% else %}{% set add_comma = true %}{% endif %}`. */
static void comma(strbuf *b, bool *add) {
    if (*add) sb_append(b, ",");
    *add = true;
}

static void g4_properties(strbuf *b, const json_val *props);

/* An array's items:{...}, each member of the items schema in dictsort order. */
static void g4_items(strbuf *b, const json_val *items) {
    int *ix = dictsort(b, items);
    bool add = false;
    sb_append(b, "items:{");
    for (int i = 0; ix && i < items->n_items; i++) {
        const json_val *m = &items->items[ix[i]];
        if (m->type == JSON_T_NULL) continue;
        comma(b, &add);
        if (!strcmp(m->key, "properties")) {
            sb_append(b, "properties:{");
            if (m->type == JSON_T_OBJECT) g4_properties(b, m);
            sb_append(b, "}");
        } else if (!strcmp(m->key, "required")) {
            g4_required(b, m);
        } else if (!strcmp(m->key, "type")) {
            sb_append(b, "type:");
            if (m->type == JSON_T_STRING) {
                sb_append(b, k_quote);
                upper_type(b, m);
                sb_append(b, k_quote);
            } else { /* a list of types: each upper-cased, quoted */
                sb_append(b, "[");
                for (int k = 0; m->type == JSON_T_ARRAY && k < m->n_items; k++) {
                    if (k) sb_append(b, ",");
                    sb_append(b, k_quote);
                    upper_type(b, &m->items[k]);
                    sb_append(b, k_quote);
                }
                sb_append(b, "]");
            }
        } else {
            sb_content_n(b, m->key, m->key_len);
            sb_append(b, ":");
            g4_value(b, m, true);
        }
    }
    sb_append(b, "}");
    al_free(ix);
}

/* One property: NAME:{description,enum|items,nullable,properties,required,type}. */
static void g4_property(strbuf *b, const json_val *v) {
    const json_val *desc = json_get(v, "description"), *e = json_get(v, "enum");
    const json_val *items = json_get(v, "items"), *props = json_get(v, "properties");
    const json_val *req = json_get(v, "required");
    bool add = false;
    sb_content_n(b, v->key, v->key_len);
    sb_append(b, ":{");
    if (truthy(desc)) {
        sb_append(b, "description:");
        quoted_print(b, desc);
        add = true;
    }
    if (type_is(v, "STRING") && truthy(e)) {
        comma(b, &add);
        sb_append(b, "enum:");
        g4_value(b, e, true);
    } else if (type_is(v, "ARRAY") && items && items->type == JSON_T_OBJECT && items->n_items) {
        comma(b, &add);
        g4_items(b, items);
    }
    if (truthy(json_get(v, "nullable"))) {
        comma(b, &add);
        sb_append(b, "nullable:true");
    }
    if (type_is(v, "OBJECT")) {
        /* without "properties", the object's own members stand for them */
        comma(b, &add);
        sb_append(b, "properties:{");
        g4_properties(b, props && props->type == JSON_T_OBJECT ? props : v);
        sb_append(b, "}");
        if (truthy(req)) {
            comma(b, &add);
            g4_required(b, req);
        }
    }
    comma(b, &add);
    sb_append(b, "type:");
    sb_append(b, k_quote);
    upper_type(b, json_get(v, "type"));
    sb_append(b, k_quote);
    sb_append(b, "}");
}

/* format_parameters: the properties in dictsort order, those named like the schema's
 * own keywords left out (as the template does). */
static void g4_properties(strbuf *b, const json_val *props) {
    static const char *const standard[] = {"description", "type", "properties", "required",
                                           "nullable"};
    int *ix = dictsort(b, props);
    bool first = true;
    for (int i = 0; ix && i < props->n_items; i++) {
        const json_val *v = &props->items[ix[i]];
        bool skip = false;
        for (size_t k = 0; k < sizeof standard / sizeof *standard; k++)
            skip |= !strcmp(v->key, standard[k]);
        if (skip) continue;
        if (!first) sb_append(b, ",");
        first = false;
        g4_property(b, v);
    }
    al_free(ix);
}

/* <|tool>declaration:NAME{description:...,parameters:{...}}<tool|> */
static void g4_declaration(strbuf *b, const json_val *tool) {
    const json_val *f = json_get(tool, "function"), *desc = json_get(f, "description");
    const json_val *params = json_get(f, "parameters"), *resp = json_get(f, "response");
    sb_append(b, "<|tool>declaration:");
    sb_content(b, json_get_str(f, "name")); /* there is one: parse_tools checked */
    sb_append(b, "{description:");
    quoted_print(b, desc);
    if (truthy(params)) {
        const json_val *props = json_get(params, "properties"), *req = json_get(params, "required");
        sb_append(b, ",parameters:{");
        if (truthy(props) && props->type == JSON_T_OBJECT) {
            sb_append(b, "properties:{");
            g4_properties(b, props);
            sb_append(b, "},");
        }
        if (truthy(req)) {
            g4_required(b, req);
            sb_append(b, ",");
        }
        /* the template closes the parameters only when they have a type */
        if (truthy(json_get(params, "type"))) {
            sb_append(b, "type:");
            sb_append(b, k_quote);
            upper_type(b, json_get(params, "type"));
            sb_append(b, k_quote);
            sb_append(b, "}");
        }
    }
    if (resp) {
        const json_val *rdesc = json_get(resp, "description");
        sb_append(b, ",response:{");
        if (truthy(rdesc)) {
            sb_append(b, "description:");
            quoted_print(b, rdesc);
            sb_append(b, ",");
        }
        if (type_is(resp, "OBJECT")) {
            sb_append(b, "type:");
            sb_append(b, k_quote);
            sb_content(b, "OBJECT");
            sb_append(b, k_quote);
            sb_append(b, "}");
        }
    }
    sb_append(b, "}<tool|>");
}

/* ---- turns ------------------------------------------------------------------------------- */

/* A model turn's text as the template's strip_thinking leaves it: what lies between
 * <|channel> and the next <channel|> dropped, the rest joined and trimmed. */
static void strip_thinking(strbuf *b, const char *s) {
    strbuf out = {0};
    for (;;) {
        const char *close = strstr(s, "<channel|>");
        size_t n = close ? (size_t)(close - s) : strlen(s);
        const char *open = strstr(s, "<|channel>");
        if (open && open < s + n) n = (size_t)(open - s);
        sb_append_n(&out, s, n);
        if (!close) break;
        s = close + strlen("<channel|>");
    }
    b->failed |= out.failed;
    size_t n = out.len;
    const char *t = out.s ? trim(out.s, &n) : "";
    sb_content_n(b, t, n);
    al_free(out.s);
}

static void trimmed(strbuf *b, const char *s) {
    size_t n = strlen(s);
    s = trim(s, &n);
    sb_content_n(b, s, n);
}

/* The function the tool result at turn k, after the calls of turn i, comes from: the
 * call of turn i its id names, else its own name, else the call at its place, else
 * "unknown" (template text). */
static void result_name(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int i, int k) {
    const chat_call *by_id = NULL;
    for (int j = 0; m[k].tool_call_id && j < c->n_calls[i]; j++)
        if (c->calls[i][j].id && !strcmp(c->calls[i][j].id, m[k].tool_call_id))
            by_id = &c->calls[i][j];
    const chat_call *at = k - i - 1 < c->n_calls[i] ? &c->calls[i][k - i - 1] : NULL;
    const char *name = by_id ? by_id->name : m[k].name ? m[k].name : at ? at->name : NULL;
    if (name)
        sb_content(b, name);
    else
        sb_append(b, "unknown");
}

/* The calls of turn i, then the results of the tool turns right after it; true when
 * there were results. */
static bool g4_calls(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, int i) {
    for (int k = 0; k < c->n_calls[i]; k++) {
        const chat_call *call = &c->calls[i][k];
        int *ix = dictsort(b, call->args);
        sb_append(b, "<|tool_call>call:");
        sb_content(b, call->name);
        sb_append(b, "{");
        for (int a = 0; ix && a < call->args->n_items; a++) {
            const json_val *v = &call->args->items[ix[a]];
            if (a) sb_append(b, ",");
            sb_content_n(b, v->key, v->key_len);
            sb_append(b, ":");
            g4_value(b, v, false);
        }
        sb_append(b, "}<tool_call|>");
        al_free(ix);
    }
    bool results = false;
    for (int k = i + 1; k < n && !strcmp(m[k].role, "tool"); k++) {
        sb_append(b, "<|tool_response>response:");
        result_name(b, c, m, i, k);
        sb_append(b, "{value:");
        g4_str(b, m[k].content);
        sb_append(b, "}<tool_response|>");
        results = true;
    }
    return results;
}

/* What the last turn left for the generation prompt (the template's prev_message_type). */
enum { G4_NONE, G4_CALL, G4_RESULT };

void chat_render_gemma4(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, bool gen) {
    int i = 0, last_user = -1, prev = G4_NONE;
    const bool sys = n > 0 && !strcmp(m[0].role, "system");
    if (sys || c->tools) {
        sb_append(b, "<|turn>system\n");
        if (sys) trimmed(b, m[0].content);
        for (int k = 0; c->tools && k < c->tools->n_items; k++)
            g4_declaration(b, &c->tools->items[k]);
        sb_append(b, "<turn|>\n");
        i = sys ? 1 : 0;
    }
    for (int k = i; k < n; k++)
        if (!strcmp(m[k].role, "user")) last_user = k;
    for (int first = i; i < n; i++) {
        if (!strcmp(m[i].role, "tool")) continue; /* written after their calls */
        const bool model = !strcmp(m[i].role, "assistant");
        int j = i - 1; /* the previous turn that is not a result */
        while (j >= first && !strcmp(m[j].role, "tool"))
            j--;
        /* a model turn right after one (its results between) goes on in the same turn */
        if (!(model && j >= first && !strcmp(m[j].role, "assistant")))
            sb_cat(b, "<|turn>", model ? "model" : m[i].role, "\n", NULL);
        prev = G4_NONE;
        if (m[i].reasoning && *m[i].reasoning && i > last_user && c->n_calls[i] > 0) {
            sb_append(b, "<|channel>thought\n");
            sb_content(b, m[i].reasoning);
            sb_append(b, "\n<channel|>");
        }
        bool results = false;
        if (c->n_calls[i] > 0) {
            prev = G4_CALL;
            if ((results = g4_calls(b, c, m, n, i))) prev = G4_RESULT;
        }
        if (model)
            strip_thinking(b, m[i].content);
        else
            trimmed(b, m[i].content);
        if (prev == G4_CALL)
            sb_append(b, "<|tool_response>"); /* the model's cue to wait */
        else if (!(results && !*m[i].content))
            sb_append(b, "<turn|>\n");
    }
    if (!gen) return;
    if (prev == G4_NONE)
        sb_append(b, "<|turn>model\n<|channel>thought\n<channel|>");
    else if (b->len >= 8 && !strcmp(b->s + b->len - 8, "<turn|>\n"))
        sb_append(b, "<|turn>model\n");
}
