/* toolcall.c: the tool-call parser of the chatml family, Llama 3, Mistral, Harmony,
 * Gemma 4 and GLM (the rules are in toolcall.h).
 *
 * Two states over the reply's bytes, which all pass through `pend`:
 *   TEXT   text is released as it comes, except a tail that may be the start of the
 *          opening tag ("<tool_call>", Mistral's "[TOOL_CALLS]") and the whitespace
 *          before it, which wait for more bytes;
 *   BLOCK  pend holds the block since its opening tag; it ends at the closing tag
 *          ("</tool_call>", Gemma 4's "<tool_call|>"; Mistral has none), at a new opening
 *          tag or at the end of the reply, and is then parsed whole.
 * Each decision depends on the bytes alone, never on where a push ended, which is what
 * makes streamed and whole replies give the same events. A block is parsed only once
 * it ends, so a call's arguments come as one piece: a client of the OpenAI stream gets
 * the name and the arguments in one delta.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "server/toolcall.h"

static const char k_open[] = "<tool_call>", k_close[] = "</tool_call>";
static const char k_mistral[] = "[TOOL_CALLS]";
static const char k_gemma4_open[] = "<|tool_call>", k_gemma4_close[] = "<tool_call|>";

typedef struct tc_rec { /* an event, with offsets into out until the call returns */
    srv_tc_kind kind;
    size_t off, len; /* text */
    int index;
    size_t name_off, args_off;
} tc_rec;

struct srv_tc {
    const json_t *tools;
    const char *open, *close; /* the block's tags; close NULL: none (Mistral) */
    size_t open_len, close_len;
    bool in_block, after_call, done, failed;
    bool bare;      /* a reply of bare JSON calls is calls too (Llama 3) */
    int bare_state; /* 0 only whitespace so far, 1 JSON held to the end, 2 decided: text */
    bool mistral;   /* [TOOL_CALLS] blocks */
    bool gemma4;    /* <|tool_call>call:NAME{...}<tool_call|> blocks */
    bool glm;       /* <tool_call> blocks may be NAME<arg_key>K</arg_key><arg_value>... */
    bool harmony;   /* pieces of al_harmony in, not text */
    srv_buf call;   /* Harmony: the arguments of the call being read */
    char *call_to;  /* ... its recipient ("functions.NAME", call_to_len bytes), NULL: none */
    size_t call_to_len;
    al_channel call_channel;
    srv_buf pend;
    size_t scanned; /* BLOCK: pend[0, scanned) holds no tag */
    int n_calls;
    srv_buf out; /* this call's text and call strings */
    tc_rec *recs;
    srv_tc_event *events;
    int n_recs, cap;
};

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* ---- events ----------------------------------------------------------------------------- */

static bool grow_recs(srv_tc *p) {
    if (p->n_recs < p->cap) return true;
    int cap = p->cap ? 2 * p->cap : 8;
    tc_rec *r = realloc(p->recs, (size_t)cap * sizeof *r);
    if (r) p->recs = r;
    srv_tc_event *e = r ? realloc(p->events, (size_t)cap * sizeof *e) : NULL;
    if (e) p->events = e;
    if (!r || !e) return p->failed = true, false;
    p->cap = cap;
    return true;
}

static void emit_text(srv_tc *p, const char *s, size_t n) {
    if (!n || p->failed) return;
    p->after_call = false;
    tc_rec *last = p->n_recs ? &p->recs[p->n_recs - 1] : NULL;
    if (!srv_buf_add(&p->out, s, n)) {
        p->failed = true;
        return;
    }
    if (last && last->kind == SRV_TC_TEXT) {
        last->len += n;
        return;
    }
    if (!grow_recs(p)) return;
    p->recs[p->n_recs++] = (tc_rec){.kind = SRV_TC_TEXT, .off = p->out.len - n, .len = n};
}

static void emit_call(srv_tc *p, const char *name, const char *args) {
    if (p->failed || !grow_recs(p)) return;
    tc_rec r = {.kind = SRV_TC_CALL, .index = p->n_calls, .name_off = p->out.len};
    srv_buf_add(&p->out, name, strlen(name) + 1);
    r.args_off = p->out.len;
    srv_buf_add(&p->out, args, strlen(args) + 1);
    if (p->out.failed) {
        p->failed = true;
        return;
    }
    p->recs[p->n_recs++] = r;
    p->n_calls++;
    p->after_call = true;
}

/* ---- parsing a block ---------------------------------------------------------------------- */

/* The type the request's tool `fn` gives its parameter `param`, or NULL. */
static const char *param_type(const json_t *tools, const char *fn, const char *param) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        const json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        return json_string_value(json_object_get(json_object_get(props, param), "type"));
    }
    return NULL;
}

static bool starts(const char *s, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - s) >= n && !memcmp(s, lit, n);
}

static const char *find(const char *s, const char *end, const char *lit) {
    size_t n = strlen(lit);
    for (; (size_t)(end - s) >= n; s++)
        if (*s == *lit && !memcmp(s, lit, n)) return s;
    return NULL;
}

static const char *skip_ws(const char *s, const char *end) {
    while (s < end && is_ws(*s))
        s++;
    return s;
}

/* "NAME>" at s: the name trimmed, into a new string; *s past the '>'. */
static char *tag_name(const char **s, const char *end) {
    const char *gt = memchr(*s, '>', (size_t)(end - *s));
    if (!gt) return NULL;
    const char *a = skip_ws(*s, gt), *b = gt;
    while (b > a && is_ws(b[-1]))
        b--;
    if (a == b || memchr(a, '<', (size_t)(b - a)) || memchr(a, '\n', (size_t)(b - a))) return NULL;
    *s = gt + 1;
    return strndup(a, (size_t)(b - a));
}

/* One XML parameter's value: a string where the tool says so or it is not JSON. Qwen's
 * values (trim_nl) lose the newline their template writes at each end. */
static json_t *param_value(const srv_tc *p, const char *fn, const char *param, const char *v,
                           size_t n, bool trim_nl) {
    if (trim_nl && n >= 2 && !memcmp(v, "\r\n", 2))
        v += 2, n -= 2;
    else if (trim_nl && n && v[0] == '\n')
        v++, n--;
    if (trim_nl && n >= 2 && !memcmp(v + n - 2, "\r\n", 2))
        n -= 2;
    else if (trim_nl && n && v[n - 1] == '\n')
        n--;
    const char *type = param_type(p->tools, fn, param);
    if (!type || strcmp(type, "string")) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        if (j) return j;
    }
    return json_stringn(v, n);
}

/* <function=NAME> (<parameter=P>VALUE</parameter>)* [</function>] */
static bool parse_xml(const srv_tc *p, const char *s, const char *end, char **name, json_t *args) {
    s += strlen("<function=");
    if (!(*name = tag_name(&s, end))) return false;
    for (;;) {
        s = skip_ws(s, end);
        if (s == end) return true; /* </function> left out */
        if (starts(s, end, "</function>")) return skip_ws(s + strlen("</function>"), end) == end;
        if (!starts(s, end, "<parameter=")) return false;
        s += strlen("<parameter=");
        char *param = tag_name(&s, end);
        const char *close = param ? find(s, end, "</parameter>") : NULL;
        json_t *v = close ? param_value(p, *name, param, s, (size_t)(close - s), true) : NULL;
        bool ok = false;
        if (v && !json_object_get(args, param))
            ok = !json_object_set_new(args, param, v); /* takes v, also on failure */
        else
            json_decref(v); /* a parameter twice */
        free(param);
        if (!ok) return false;
        s = close + strlen("</parameter>");
    }
}

/* A call object: {"name": N, "arguments": {...} or "{...}"} ("parameters" also names
 * them); takes j. */
static bool call_of(json_t *j, char **name, json_t **args) {
    const char *n = json_string_value(json_object_get(j, "name"));
    json_t *a = json_object_get(j, "arguments");
    if (!a) a = json_object_get(j, "parameters");
    json_t *parsed = NULL;
    bool ok = n && *n;
    if (json_is_string(a)) {
        a = parsed = json_loads(json_string_value(a), JSON_REJECT_DUPLICATES, NULL);
        ok = ok && a;
    }
    ok = ok && (!a || json_is_object(a));
    if (ok) {
        *name = strdup(n);
        *args = a ? json_incref(a) : json_object();
    }
    json_decref(parsed);
    json_decref(j);
    return ok;
}

static bool parse_json(const char *s, const char *end, char **name, json_t **args) {
    return call_of(json_loadb(s, (size_t)(end - s), JSON_REJECT_DUPLICATES, NULL), name, args);
}

enum { MAX_CALLS = 64 }; /* in one Mistral block, or one Llama 3 reply */

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* Mistral's newer form at s: NAME[ARGS]{...} or NAME[CALL_ID]ID[ARGS]{...}; *rest is
 * where what follows the arguments starts. */
static bool args_form(const char *s, const char *end, char **name, char **text,
                      const char **rest) {
    const char *a = find(s, end, "[ARGS]"), *ne = a;
    if (!a) return false;
    const char *id = find(s, a, "[CALL_ID]");
    if (id) ne = id;
    while (ne > s && is_ws(ne[-1]))
        ne--;
    for (const char *c = s; c < ne; c++)
        if (!name_char(*c)) return false;
    const char *j = skip_ws(a + strlen("[ARGS]"), end);
    json_error_t je;
    json_t *args = ne > s ? json_loadb(j, (size_t)(end - j), JSON_DISABLE_EOF_CHECK |
                                       JSON_REJECT_DUPLICATES, &je) : NULL;
    bool ok = json_is_object(args);
    if (ok) {
        *name = strndup(s, (size_t)(ne - s));
        *text = json_dumps(args, JSON_COMPACT);
        ok = *name && *text;
        if (!ok) free(*name), free(*text);
        *rest = j + je.position;
    }
    json_decref(args);
    return ok;
}

/* Mistral's JSON form at s: an array of call objects, or one; all of them or none. */
static int array_form(const char *s, const char *end, char **names, char **texts,
                      const char **rest) {
    json_error_t je;
    json_t *j = json_loadb(s, (size_t)(end - s), JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES,
                           &je);
    if (json_is_object(j)) { /* one call, not in an array */
        json_t *a = json_array();
        if (a && json_array_append(a, j)) json_decref(a), a = NULL;
        json_decref(j);
        j = a;
    }
    int k = 0;
    bool ok = json_array_size(j) > 0 && json_array_size(j) <= MAX_CALLS;
    for (size_t i = 0; ok && i < json_array_size(j); i++) {
        json_t *args = NULL;
        ok = call_of(json_incref(json_array_get(j, i)), &names[k], &args);
        if (ok && !(texts[k] = json_dumps(args, JSON_COMPACT))) free(names[k]), ok = false;
        if (ok) k++;
        json_decref(args);
    }
    json_decref(j);
    if (!ok) {
        for (int i = 0; i < k; i++) free(names[i]), free(texts[i]);
        return 0;
    }
    *rest = s + je.position;
    return k;
}

/* Mistral: what follows one [TOOL_CALLS], pend[0, n). Calls, then what follows them as
 * text; a block of neither form is text, tag included; a blank one (the marker alone)
 * is dropped. */
static void mistral_block(srv_tc *p, size_t n) {
    const char *s = skip_ws(p->pend.s, p->pend.s + n), *end = p->pend.s + n, *rest = end;
    if (s == end) return;
    char *names[MAX_CALLS], *texts[MAX_CALLS];
    int k = 0;
    if (n <= SRV_TC_BLOCK_MAX && (*s == '[' || *s == '{'))
        k = array_form(s, end, names, texts, &rest);
    else if (n <= SRV_TC_BLOCK_MAX)
        k = args_form(s, end, &names[0], &texts[0], &rest) ? 1 : 0;
    if (k == 0) {
        emit_text(p, p->open, p->open_len);
        emit_text(p, p->pend.s, n);
        return;
    }
    for (int i = 0; i < k; i++) {
        emit_call(p, names[i], texts[i]);
        free(names[i]), free(texts[i]);
    }
    rest = skip_ws(rest, end);
    while (end > rest && is_ws(end[-1]))
        end--;
    emit_text(p, rest, (size_t)(end - rest));
}

/* ---- GLM's and Gemma 4's blocks ----------------------------------------------------------- */

/* [s, end) trimmed, into a new string, when it is one word: not empty, and no whitespace,
 * quotes, colons, braces or angle brackets inside (a function's name, a key); else NULL. */
static char *call_name(const char *s, const char *end) {
    s = skip_ws(s, end);
    while (end > s && is_ws(end[-1]))
        end--;
    for (const char *c = s; c < end; c++)
        if (is_ws(*c) || strchr("<>{}\":", *c)) return NULL;
    return end > s ? strndup(s, (size_t)(end - s)) : NULL;
}

/* GLM: NAME (<arg_key>KEY</arg_key> <arg_value>VALUE</arg_value>)*, whitespace between
 * the parts; each value as a Qwen XML parameter's, its newlines kept. */
static bool parse_glm(const srv_tc *p, const char *s, const char *end, char **name, json_t *args) {
    const char *key = find(s, end, "<arg_key>");
    if (!(*name = call_name(s, key ? key : end))) return false;
    for (s = key ? key : end;;) {
        s = skip_ws(s, end);
        if (s == end) return true;
        if (!starts(s, end, "<arg_key>")) return false;
        s += strlen("<arg_key>");
        const char *ke = find(s, end, "</arg_key>");
        const char *v = ke ? skip_ws(ke + strlen("</arg_key>"), end) : NULL;
        if (!v || !starts(v, end, "<arg_value>")) return false;
        v += strlen("<arg_value>");
        const char *ve = find(v, end, "</arg_value>");
        char *k = ve ? call_name(s, ke) : NULL; /* a key is a name too: one word */
        json_t *val = k ? param_value(p, *name, k, v, (size_t)(ve - v), false) : NULL;
        bool ok = false;
        if (val && !json_object_get(args, k))
            ok = !json_object_set_new(args, k, val); /* takes val, also on failure */
        else
            json_decref(val); /* a key twice */
        free(k);
        if (!ok) return false;
        s = ve + strlen("</arg_value>");
    }
}

/* Gemma 4 writes arguments in its own notation: {key:value,...} with bare keys, strings
 * between <|"|> markers (no escapes), arrays [...], numbers, true, false and null (None,
 * as its template prints null, too). Whitespace is allowed between the parts. */
static const char k_gq[] = "<|\"|>";
enum { G4_DEPTH_MAX = 64 };

static json_t *g4_value(const char **s, const char *end, int depth);

/* A quoted string at *s (its opening marker): its text, *s past the closing one. */
static json_t *g4_string(const char **s, const char *end) {
    const char *a = *s + strlen(k_gq), *b = find(a, end, k_gq);
    if (!b) return NULL;
    *s = b + strlen(k_gq);
    return json_stringn(a, (size_t)(b - a)); /* NULL for invalid UTF-8 */
}

/* A number, true, false, null or None at *s, up to the next delimiter. */
static json_t *g4_scalar(const char **s, const char *end) {
    const char *a = *s, *b = a;
    while (b < end && !is_ws(*b) && *b != ',' && *b != '}' && *b != ']')
        b++;
    *s = b;
    if (b - a == 4 && !memcmp(a, "None", 4)) return json_null();
    json_t *v = json_loadb(a, (size_t)(b - a), JSON_DECODE_ANY, NULL);
    if (json_is_number(v) || json_is_boolean(v) || json_is_null(v)) return v;
    json_decref(v); /* a string or container here is not Gemma's notation */
    return NULL;
}

/* {key:value,...} at *s; keys bare (up to ':') or quoted. */
static json_t *g4_object(const char **s, const char *end, int depth) {
    json_t *o = json_object();
    const char *c = skip_ws(*s + 1, end);
    bool ok = o != NULL;
    if (ok && c < end && *c == '}') {
        *s = c + 1;
        return o;
    }
    while (ok) {
        char *key = NULL;
        if (starts(c, end, k_gq)) {
            json_t *k = g4_string(&c, end);
            key = k ? strdup(json_string_value(k)) : NULL;
            json_decref(k);
        } else {
            const char *colon = c;
            while (colon < end && *colon != ':' && *colon != '}' && *colon != '{')
                colon++;
            key = colon < end && *colon == ':' ? call_name(c, colon) : NULL;
            c = colon;
        }
        c = key ? skip_ws(c, end) : end;
        json_t *v = c < end && *c == ':' ? (c = skip_ws(c + 1, end), g4_value(&c, end, depth))
                                         : NULL;
        if (!v || !key || json_object_get(o, key)) /* a key twice fails too */
            ok = false, json_decref(v);
        else
            ok = !json_object_set_new(o, key, v); /* takes v, also on failure */
        free(key);
        c = skip_ws(c, end);
        if (ok && c < end && *c == '}') {
            *s = c + 1;
            return o;
        }
        if (!(ok = ok && c < end && *c == ',')) break;
        c = skip_ws(c + 1, end);
    }
    json_decref(o);
    return NULL;
}

/* [value,...] at *s. */
static json_t *g4_array(const char **s, const char *end, int depth) {
    json_t *a = json_array();
    const char *c = skip_ws(*s + 1, end);
    bool ok = a != NULL;
    if (ok && c < end && *c == ']') {
        *s = c + 1;
        return a;
    }
    while (ok) {
        ok = !json_array_append_new(a, g4_value(&c, end, depth)); /* NULL: fails */
        c = skip_ws(c, end);
        if (ok && c < end && *c == ']') {
            *s = c + 1;
            return a;
        }
        if (!(ok = ok && c < end && *c == ',')) break;
        c = skip_ws(c + 1, end);
    }
    json_decref(a);
    return NULL;
}

static json_t *g4_value(const char **s, const char *end, int depth) {
    if (*s >= end || depth >= G4_DEPTH_MAX) return NULL;
    if (starts(*s, end, k_gq)) return g4_string(s, end);
    if (**s == '{') return g4_object(s, end, depth + 1);
    if (**s == '[') return g4_array(s, end, depth + 1);
    return g4_scalar(s, end);
}

/* Gemma 4: call:NAME{arguments} */
static bool parse_gemma4(const char *s, const char *end, char **name, json_t **args) {
    if (!starts(s, end, "call:")) return false;
    s += strlen("call:");
    const char *brace = memchr(s, '{', (size_t)(end - s));
    if (!brace || !(*name = call_name(s, brace))) return false;
    *args = g4_object(&brace, end, 1);
    return *args && skip_ws(brace, end) == end;
}

/* The block pend[0, n) (without its tags): a call, or text with its tags (closed tells
 * whether it had its closing tag; a block over SRV_TC_BLOCK_MAX is not parsed). */
static void end_block(srv_tc *p, size_t n, bool closed) {
    if (p->mistral) {
        mistral_block(p, n);
        return;
    }
    const char *s = skip_ws(p->pend.s, p->pend.s + n), *end = p->pend.s + n;
    while (end > s && is_ws(end[-1]))
        end--;
    char *name = NULL, *text = NULL;
    json_t *args = NULL;
    bool ok = false;
    const bool fits = n <= SRV_TC_BLOCK_MAX;
    if (fits && p->gemma4) {
        ok = parse_gemma4(s, end, &name, &args);
    } else if (fits && starts(s, end, "{")) {
        ok = parse_json(s, end, &name, &args);
    } else if (fits && starts(s, end, "<function=")) {
        args = json_object();
        ok = args && parse_xml(p, s, end, &name, args);
    } else if (fits && p->glm) {
        args = json_object();
        ok = args && parse_glm(p, s, end, &name, args);
    }
    if (ok) ok = name && (text = json_dumps(args, JSON_COMPACT)) != NULL;
    if (ok) {
        emit_call(p, name, text);
    } else {
        emit_text(p, p->open, p->open_len);
        emit_text(p, p->pend.s, n);
        if (closed) emit_text(p, p->close, p->close_len);
    }
    free(name), free(text);
    json_decref(args);
}

static void pend_drop(srv_tc *p, size_t n);

/* Llama 3: the whole reply as call objects separated by whitespace or ';'. All of them
 * parse (and are emitted) or none is. */
static bool bare_calls(srv_tc *p) {
    const char *s = p->pend.s, *end = s + p->pend.len;
    char *names[MAX_CALLS], *texts[MAX_CALLS];
    int n = 0;
    bool ok = true;
    for (;;) {
        while (s < end && (is_ws(*s) || *s == ';')) s++;
        if (s == end || !ok) break;
        json_error_t je;
        json_t *j = *s == '{' ? json_loadb(s, (size_t)(end - s), JSON_DISABLE_EOF_CHECK |
                                           JSON_REJECT_DUPLICATES, &je) : NULL;
        json_t *args = NULL;
        ok = j && n < MAX_CALLS && call_of(json_incref(j), &names[n], &args);
        if (ok) {
            texts[n] = json_dumps(args, JSON_COMPACT);
            ok = texts[n] != NULL;
            if (!ok) free(names[n]);
            else n++;
            s += je.position;
        }
        json_decref(args);
        json_decref(j);
    }
    ok = ok && n > 0;
    for (int i = 0; i < n; i++) {
        if (ok) emit_call(p, names[i], texts[i]);
        free(names[i]), free(texts[i]);
    }
    return ok;
}

/* Bare mode: true while the reply is held (it may be only calls), after which it is
 * either calls (pend emptied) or text, decided from all of it. */
static bool bare_hold(srv_tc *p, bool at_end) {
    if (p->bare_state == 0) {
        const char *s = skip_ws(p->pend.s, p->pend.s + p->pend.len);
        if (s == p->pend.s + p->pend.len) {
            if (!at_end) return true; /* only whitespace: undecided */
            p->bare_state = 2;
        } else {
            p->bare_state = *s == '{' ? 1 : 2;
        }
    }
    if (p->bare_state != 1) return false;
    if (!at_end && p->pend.len <= SRV_TC_BLOCK_MAX) return true;
    p->bare_state = 2;
    if (at_end && bare_calls(p)) {
        pend_drop(p, p->pend.len);
        return true;
    }
    return false;
}

/* ---- the two states -------------------------------------------------------------------- */

/* pend loses its first n bytes (keeping its NUL). */
static void pend_drop(srv_tc *p, size_t n) {
    memmove(p->pend.s, p->pend.s + n, p->pend.len - n + 1);
    p->pend.len -= n;
}

/* Bytes at the end of s[0, n) that may begin the opening tag or precede it as
 * whitespace. */
static size_t held_tail(const srv_tc *p, const char *s, size_t n) {
    size_t k = n < p->open_len ? n : p->open_len - 1;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, p->open, k)) break;
    while (k < n && is_ws(s[n - k - 1]))
        k++;
    return k;
}

/* TEXT: consumes from pend[*at]; true when a block opened. */
static bool scan_text(srv_tc *p, size_t *at, bool at_end) {
    const char *s = p->pend.s + *at, *end = p->pend.s + p->pend.len;
    if (p->after_call && p->close) { /* whitespace and a duplicated closing tag are the call's */
        for (;;) {
            s = skip_ws(s, end);
            if (!starts(s, end, p->close)) break;
            s += p->close_len;
        }
        *at = (size_t)(s - p->pend.s);
        if (!at_end && (size_t)(end - s) < p->close_len &&
            !memcmp(s, p->close, (size_t)(end - s)))
            return false; /* may still become a closing tag */
    }
    const char *open = find(s, end, p->open);
    if (open) {
        const char *t = open;
        while (t > s && is_ws(t[-1]))
            t--;
        emit_text(p, s, (size_t)(t - s));
        *at = (size_t)(open + p->open_len - p->pend.s);
        p->in_block = true;
        p->scanned = 0;
        return true;
    }
    const size_t hold = at_end ? 0 : held_tail(p, s, (size_t)(end - s));
    emit_text(p, s, (size_t)(end - s) - hold);
    *at = p->pend.len - hold;
    return false;
}

/* BLOCK (pend starts at the block): true when it ended. */
static bool scan_block(srv_tc *p, bool at_end) {
    const char *s = p->pend.s, *end = s + p->pend.len;
    const char *from = s + p->scanned;
    const char *close = p->close ? find(from, end, p->close) : NULL;
    const char *open = find(from, end, p->open);
    size_t n, skip;
    bool closed = false;
    if (close && (!open || close < open)) {
        n = (size_t)(close - s), skip = n + p->close_len, closed = true;
    } else if (open) {
        n = (size_t)(open - s), skip = n; /* the new block's tag stays for scan_text */
    } else if (at_end || p->pend.len > SRV_TC_BLOCK_MAX) {
        n = skip = p->pend.len;
    } else {
        /* a tag may end in the bytes to come: scan the last tag's length again */
        const size_t tag = p->close_len > p->open_len ? p->close_len : p->open_len;
        p->scanned = p->pend.len > tag ? p->pend.len - tag : 0;
        return false;
    }
    end_block(p, n, closed);
    pend_drop(p, skip);
    p->in_block = false;
    return true;
}

static void run(srv_tc *p, bool at_end) {
    if (p->bare && bare_hold(p, at_end)) return;
    size_t at = 0;
    while (!p->failed) {
        if (p->in_block) {
            pend_drop(p, at); /* the block starts pend */
            at = 0;
            if (!scan_block(p, at_end)) return;
        } else if (!scan_text(p, &at, at_end)) {
            break;
        }
    }
    if (!p->failed) pend_drop(p, at);
}

static bool results(srv_tc *p, const srv_tc_event **ev, int *n_ev) {
    for (int i = 0; !p->failed && i < p->n_recs; i++) {
        const tc_rec *r = &p->recs[i];
        p->events[i] = (srv_tc_event){.kind = r->kind, .index = r->index};
        if (r->kind == SRV_TC_TEXT) {
            p->events[i].text = p->out.s + r->off;
            p->events[i].len = r->len;
        } else {
            p->events[i].name = p->out.s + r->name_off;
            p->events[i].arguments = p->out.s + r->args_off;
        }
    }
    *ev = p->failed ? NULL : p->events;
    *n_ev = p->failed ? 0 : p->n_recs;
    return !p->failed;
}

/* ---- the calls -------------------------------------------------------------------------- */

srv_tc *srv_tc_create(const json_t *tools) {
    srv_tc *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->tools = tools;
    p->open = k_open, p->open_len = sizeof k_open - 1;
    p->close = k_close, p->close_len = sizeof k_close - 1;
    return p;
}

srv_tc *srv_tc_create_for(const json_t *tools, srv_calls how) {
    srv_tc *p = srv_tc_create(tools);
    if (p && how == SRV_CALLS_BARE) srv_tc_bare(p);
    if (p && how == SRV_CALLS_MISTRAL) srv_tc_mistral(p);
    if (p && how == SRV_CALLS_GEMMA4) srv_tc_gemma4(p);
    if (p && how == SRV_CALLS_GLM) srv_tc_glm(p);
    return p;
}

void srv_tc_bare(srv_tc *p) {
    if (p) p->bare = true;
}

void srv_tc_mistral(srv_tc *p) {
    if (!p) return;
    p->mistral = true;
    p->open = k_mistral, p->open_len = sizeof k_mistral - 1;
    p->close = NULL, p->close_len = 0;
}

void srv_tc_gemma4(srv_tc *p) {
    if (!p) return;
    p->gemma4 = true;
    p->open = k_gemma4_open, p->open_len = sizeof k_gemma4_open - 1;
    p->close = k_gemma4_close, p->close_len = sizeof k_gemma4_close - 1;
}

void srv_tc_glm(srv_tc *p) {
    if (p) p->glm = true;
}

void srv_tc_destroy(srv_tc *p) {
    if (!p) return;
    free(p->pend.s), free(p->out.s), free(p->recs), free(p->events);
    free(p->call.s), free(p->call_to);
    free(p);
}

/* ---- Harmony: pieces in -------------------------------------------------------------------- */

/* The call read so far is complete: a call when its body is a JSON object (or blank: no
 * arguments) of at most SRV_TC_BLOCK_MAX bytes and the function has a name, else the
 * body as text. */
static void harmony_flush(srv_tc *p) {
    if (!p->call_to) return;
    const size_t pre = strlen("functions.");
    char *name = strndup(p->call_to + pre, p->call_to_len - pre);
    const char *s = p->call.s ? p->call.s : "", *end = s + p->call.len;
    const char *a = skip_ws(s, end), *b = end;
    while (b > a && is_ws(b[-1]))
        b--;
    json_t *args = a == b                             ? json_object()
                   : p->call.len > SRV_TC_BLOCK_MAX ? NULL /* too long: text, as a block */
                   : json_loadb(a, (size_t)(b - a), JSON_REJECT_DUPLICATES, NULL);
    char *text = name && *name && json_is_object(args) ? json_dumps(args, JSON_COMPACT) : NULL;
    if (!name) p->failed = true;
    else if (text) emit_call(p, name, text);
    else emit_text(p, s, p->call.len);
    free(name), free(text);
    json_decref(args);
    free(p->call_to);
    p->call_to = NULL;
    p->call.len = 0;
}

/* One piece: a run of one recipient "functions.NAME" on one channel is a call's body;
 * final text is text; the rest (reasoning, preambles, other recipients) is not the
 * reply's content and gives nothing. */
static void harmony_piece(srv_tc *p, const al_chat_piece *pc) {
    const size_t pre = strlen("functions."), nr = pc->recipient ? pc->recipient_len : 0;
    const bool call = nr >= pre && !memcmp(pc->recipient, "functions.", pre);
    const bool same = call && p->call_to && pc->channel == p->call_channel &&
                      p->call_to_len == nr && !memcmp(p->call_to, pc->recipient, nr);
    if (!same) harmony_flush(p);
    if (call && !same) {
        if (!(p->call_to = malloc(nr + 1))) {
            p->failed = true;
            return;
        }
        memcpy(p->call_to, pc->recipient, nr);
        p->call_to[nr] = 0;
        p->call_to_len = nr;
        p->call_channel = pc->channel;
    }
    if (call && !srv_buf_add(&p->call, pc->text, pc->len)) p->failed = true;
    else if (!call && pc->channel == AL_CHANNEL_FINAL) emit_text(p, pc->text, pc->len);
}

/* Harmony mode's plain text (srv_tc_push) is final text; the end completes a call. */
static void harmony_text(srv_tc *p, const char *s, size_t n, bool at_end) {
    if (n) {
        harmony_flush(p);
        emit_text(p, s, n);
    }
    if (at_end) harmony_flush(p);
}

void srv_tc_harmony(srv_tc *p) {
    if (p) p->harmony = true;
}

bool srv_tc_pieces(srv_tc *p, const al_chat_piece *pieces, int n, const srv_tc_event **ev,
                   int *n_ev) {
    p->n_recs = 0;
    p->out.len = 0;
    for (int i = 0; p->harmony && !p->done && !p->failed && i < n; i++)
        harmony_piece(p, &pieces[i]);
    return results(p, ev, n_ev);
}

static bool step(srv_tc *p, const char *s, size_t n, bool at_end, const srv_tc_event **ev,
                 int *n_ev) {
    p->n_recs = 0;
    p->out.len = 0;
    if (p->done || p->failed) return results(p, ev, n_ev);
    /* the empty add allocates pend on a first push of nothing: the scans need its NUL */
    if (p->harmony) {
        harmony_text(p, s, n, at_end);
    } else {
        if (!srv_buf_add(&p->pend, s, n) || !srv_buf_add(&p->pend, "", 0)) p->failed = true;
        if (!p->failed) run(p, at_end);
    }
    if (at_end) p->done = true;
    return results(p, ev, n_ev);
}

bool srv_tc_push(srv_tc *p, const char *s, size_t n, const srv_tc_event **ev, int *n_ev) {
    return step(p, s, n, false, ev, n_ev);
}

bool srv_tc_finish(srv_tc *p, const srv_tc_event **ev, int *n_ev) {
    return step(p, "", 0, true, ev, n_ev);
}

int srv_tc_calls(const srv_tc *p) {
    return p->n_calls;
}
