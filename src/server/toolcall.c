/* toolcall.c: the tool-call parser of the chatml family (the rules are in toolcall.h).
 *
 * Two states over the reply's bytes, which all pass through `pend`:
 *   TEXT   text is released as it comes, except a tail that may be the start of
 *          "<tool_call>" and the whitespace before it, which wait for more bytes;
 *   BLOCK  pend holds the block since its "<tool_call>"; it ends at "</tool_call>", at
 *          a new "<tool_call>" or at the end of the reply, and is then parsed whole.
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
enum { OPEN_LEN = sizeof k_open - 1, CLOSE_LEN = sizeof k_close - 1 };

typedef struct tc_rec { /* an event, with offsets into out until the call returns */
    srv_tc_kind kind;
    size_t off, len; /* text */
    int index;
    size_t name_off, args_off;
} tc_rec;

struct srv_tc {
    const json_t *tools;
    bool in_block, after_call, done, failed;
    bool bare;      /* a reply of bare JSON calls is calls too (Llama 3) */
    int bare_state; /* 0 only whitespace so far, 1 JSON held to the end, 2 decided: text */
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

/* One XML parameter's value: a string where the tool says so or it is not JSON. */
static json_t *param_value(const srv_tc *p, const char *fn, const char *param, const char *v,
                           size_t n) {
    if (n >= 2 && !memcmp(v, "\r\n", 2))
        v += 2, n -= 2;
    else if (n && v[0] == '\n')
        v++, n--;
    if (n >= 2 && !memcmp(v + n - 2, "\r\n", 2))
        n -= 2;
    else if (n && v[n - 1] == '\n')
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
        json_t *v = close ? param_value(p, *name, param, s, (size_t)(close - s)) : NULL;
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

/* The block pend[0, n) (without its tags): a call, or text with its tags (closed tells
 * whether it had its closing tag; a block over SRV_TC_BLOCK_MAX is not parsed). */
static void end_block(srv_tc *p, size_t n, bool closed) {
    const char *s = skip_ws(p->pend.s, p->pend.s + n), *end = p->pend.s + n;
    while (end > s && is_ws(end[-1]))
        end--;
    char *name = NULL, *text = NULL;
    json_t *args = NULL;
    bool ok = false;
    const bool fits = n <= SRV_TC_BLOCK_MAX;
    if (fits && starts(s, end, "{")) {
        ok = parse_json(s, end, &name, &args);
    } else if (fits && starts(s, end, "<function=")) {
        args = json_object();
        ok = args && parse_xml(p, s, end, &name, args);
    }
    if (ok) ok = name && (text = json_dumps(args, JSON_COMPACT)) != NULL;
    if (ok) {
        emit_call(p, name, text);
    } else {
        emit_text(p, k_open, OPEN_LEN);
        emit_text(p, p->pend.s, n);
        if (closed) emit_text(p, k_close, CLOSE_LEN);
    }
    free(name), free(text);
    json_decref(args);
}

static void pend_drop(srv_tc *p, size_t n);

/* Llama 3: the whole reply as call objects separated by whitespace or ';'. All of them
 * parse (and are emitted) or none is. */
static bool bare_calls(srv_tc *p) {
    const char *s = p->pend.s, *end = s + p->pend.len;
    enum { MAX_BARE = 64 };
    char *names[MAX_BARE], *texts[MAX_BARE];
    int n = 0;
    bool ok = true;
    for (;;) {
        while (s < end && (is_ws(*s) || *s == ';')) s++;
        if (s == end || !ok) break;
        json_error_t je;
        json_t *j = *s == '{' ? json_loadb(s, (size_t)(end - s), JSON_DISABLE_EOF_CHECK |
                                           JSON_REJECT_DUPLICATES, &je) : NULL;
        json_t *args = NULL;
        ok = j && n < MAX_BARE && call_of(json_incref(j), &names[n], &args);
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

/* Bytes at the end of s[0, n) that may begin "<tool_call>" or precede it as whitespace. */
static size_t held_tail(const char *s, size_t n) {
    size_t k = n < OPEN_LEN ? n : OPEN_LEN - 1;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, k_open, k)) break;
    while (k < n && is_ws(s[n - k - 1]))
        k++;
    return k;
}

/* TEXT: consumes from pend[*at]; true when a block opened. */
static bool scan_text(srv_tc *p, size_t *at, bool at_end) {
    const char *s = p->pend.s + *at, *end = p->pend.s + p->pend.len;
    if (p->after_call) { /* whitespace and a duplicated closing tag are the call's */
        for (;;) {
            s = skip_ws(s, end);
            if (!starts(s, end, k_close)) break;
            s += CLOSE_LEN;
        }
        *at = (size_t)(s - p->pend.s);
        if (!at_end && (size_t)(end - s) < CLOSE_LEN && !memcmp(s, k_close, (size_t)(end - s)))
            return false; /* may still become a closing tag */
    }
    const char *open = find(s, end, k_open);
    if (open) {
        const char *t = open;
        while (t > s && is_ws(t[-1]))
            t--;
        emit_text(p, s, (size_t)(t - s));
        *at = (size_t)(open + OPEN_LEN - p->pend.s);
        p->in_block = true;
        p->scanned = 0;
        return true;
    }
    const size_t hold = at_end ? 0 : held_tail(s, (size_t)(end - s));
    emit_text(p, s, (size_t)(end - s) - hold);
    *at = p->pend.len - hold;
    return false;
}

/* BLOCK (pend starts at the block): true when it ended. */
static bool scan_block(srv_tc *p, bool at_end) {
    const char *s = p->pend.s, *end = s + p->pend.len;
    const char *from = s + p->scanned;
    const char *close = find(from, end, k_close), *open = find(from, end, k_open);
    size_t n, skip;
    bool closed = false;
    if (close && (!open || close < open)) {
        n = (size_t)(close - s), skip = n + CLOSE_LEN, closed = true;
    } else if (open) {
        n = (size_t)(open - s), skip = n; /* the new block's tag stays for scan_text */
    } else if (at_end || p->pend.len > SRV_TC_BLOCK_MAX) {
        n = skip = p->pend.len;
    } else {
        p->scanned = p->pend.len > CLOSE_LEN ? p->pend.len - CLOSE_LEN : 0;
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
    if (p) p->tools = tools;
    return p;
}

void srv_tc_bare(srv_tc *p) {
    if (p) p->bare = true;
}

void srv_tc_destroy(srv_tc *p) {
    if (!p) return;
    free(p->pend.s), free(p->out.s), free(p->recs), free(p->events);
    free(p);
}

static bool step(srv_tc *p, const char *s, size_t n, bool at_end, const srv_tc_event **ev,
                 int *n_ev) {
    p->n_recs = 0;
    p->out.len = 0;
    if (p->done || p->failed) return results(p, ev, n_ev);
    /* the empty add allocates pend on a first push of nothing: the scans need its NUL */
    if (!srv_buf_add(&p->pend, s, n) || !srv_buf_add(&p->pend, "", 0)) p->failed = true;
    if (!p->failed) run(p, at_end);
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
