/* json.c: the chat templates' JSON reader and writer (see json.h).
 *
 * A recursive-descent parser over the bytes, bounded in depth. Every block it
 * allocates (decoded strings, the arrays of items) is recorded in the document, which
 * frees them all at once: a value never outlives its document.
 */
#include <string.h>

#include "text/json.h"
#include "util.h"

struct json_doc {
    void **blocks; /* every allocation of the values, freed with the document */
    int n_blocks, cap_blocks;
    json_val root;
};

typedef struct parser {
    json_doc *doc;
    const char *s, *end, *start;
    const char *what; /* names the text in error messages */
    al_status st;     /* the first failure */
} parser;

static bool fail(parser *p, const char *why) {
    if (p->st == AL_OK)
        p->st = al_error(AL_ERR_ARG, "%s is not valid JSON: %s at byte %zu", p->what, why,
                         (size_t)(p->s - p->start));
    return false;
}

/* An allocation owned by the document. */
static void *doc_alloc(parser *p, size_t n) {
    json_doc *d = p->doc;
    if (d->n_blocks == d->cap_blocks) {
        int cap = d->cap_blocks ? 2 * d->cap_blocks : 16;
        void **b = al_realloc(d->blocks, (size_t)cap * sizeof *b);
        if (!b) goto nomem;
        d->blocks = b;
        d->cap_blocks = cap;
    }
    void *m = al_malloc(n ? n : 1);
    if (!m) goto nomem;
    d->blocks[d->n_blocks++] = m;
    return m;
nomem:
    if (p->st == AL_OK) p->st = al_error(AL_ERR_NOMEM, "out of memory reading %s", p->what);
    return NULL;
}

static void skip_ws(parser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static bool literal(parser *p, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, lit, n)) return fail(p, "unknown word");
    p->s += n;
    return true;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63));
        return o[2] = (char)(0x80 | (cp & 63)), 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63));
    o[2] = (char)(0x80 | (cp >> 6 & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A \u escape at p->s (past the backslash and the u): its code point, a surrogate pair
 * joined; -1 when malformed. */
static long unicode_escape(parser *p) {
    if (p->end - p->s < 4) return -1;
    long cp = hex4(p->s);
    p->s += 4;
    if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return -1;
    if (cp < 0xD800 || cp > 0xDBFF) return cp;
    if (p->end - p->s < 6 || p->s[0] != '\\' || p->s[1] != 'u') return -1;
    long lo = hex4(p->s + 2);
    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
    p->s += 6;
    return 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
}

/* A string at p->s (its opening quote): decoded into a new block. */
static bool string(parser *p, const char **out, size_t *out_len) {
    const char *q = ++p->s;
    while (q < p->end && *q != '"')
        q += *q == '\\' && q + 1 < p->end ? 2 : 1;
    if (q >= p->end) return fail(p, "an unterminated string");
    /* decoding never lengthens: "\uXXXX" (6 bytes) gives at most 3, a pair 4 of 12 */
    char *o = doc_alloc(p, (size_t)(q - p->s) + 1);
    if (!o) return false;
    size_t n = 0;
    while (*p->s != '"') {
        unsigned char c = (unsigned char)*p->s++;
        if (c < 0x20) return fail(p, "a control character in a string");
        if (c != '\\') {
            o[n++] = (char)c;
            continue;
        }
        char e = *p->s++;
        const char *plain = strchr("\"\\/bfnrt", e);
        if (e == 'u') {
            long cp = unicode_escape(p);
            if (cp < 0) return fail(p, "a bad \\u escape");
            n += put_utf8(o + n, (unsigned)cp);
        } else if (e && plain) {
            o[n++] = "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"];
        } else {
            return fail(p, "a bad escape");
        }
    }
    p->s++;
    o[n] = 0;
    *out = o;
    *out_len = n;
    return true;
}

static bool number(parser *p, json_val *v) {
    const char *a = p->s;
    if (p->s < p->end && *p->s == '-') p->s++;
    const char *d = p->s;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
        p->s++;
    if (p->s == d || (*d == '0' && p->s - d > 1)) return fail(p, "a bad number");
    if (p->s < p->end && *p->s == '.') {
        d = ++p->s;
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
        if (p->s == d) return fail(p, "a bad number");
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-')) p->s++;
        d = p->s;
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
        if (p->s == d) return fail(p, "a bad number");
    }
    char *o = doc_alloc(p, (size_t)(p->s - a) + 1);
    if (!o) return false;
    memcpy(o, a, (size_t)(p->s - a));
    o[p->s - a] = 0;
    *v = (json_val){.type = JSON_T_NUMBER, .s = o, .len = (size_t)(p->s - a)};
    return true;
}

static bool value(parser *p, json_val *v, int depth);

/* An array or an object at p->s: items parsed into a growing block, then kept. */
static bool container(parser *p, json_val *v, int depth) {
    const bool obj = *p->s == '{';
    const char close = obj ? '}' : ']';
    if (depth >= JSON_DEPTH_MAX) return fail(p, "too deeply nested");
    p->s++;
    *v = (json_val){.type = obj ? JSON_T_OBJECT : JSON_T_ARRAY};
    int cap = 0;
    skip_ws(p);
    if (p->s < p->end && *p->s == close) return p->s++, true;
    for (;;) {
        if (v->n_items == cap) { /* the old block stays in the document until it is freed */
            cap = cap ? 2 * cap : 4;
            json_val *items = doc_alloc(p, (size_t)cap * sizeof *items);
            if (!items) return false;
            if (v->n_items) memcpy(items, v->items, (size_t)v->n_items * sizeof *items);
            v->items = items;
        }
        json_val *it = &v->items[v->n_items];
        skip_ws(p);
        if (obj) {
            const char *k;
            size_t kn;
            if (p->s >= p->end || *p->s != '"') return fail(p, "a key expected");
            if (!string(p, &k, &kn)) return false;
            for (int i = 0; i < v->n_items; i++)
                if (v->items[i].key_len == kn && !memcmp(v->items[i].key, k, kn))
                    return fail(p, "a duplicate key");
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':') return fail(p, "':' expected");
            p->s++;
            if (!value(p, it, depth + 1)) return false;
            it->key = k, it->key_len = kn;
        } else if (!value(p, it, depth + 1)) {
            return false;
        }
        v->n_items++;
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == close) return p->s++, true;
        return fail(p, obj ? "',' or '}' expected" : "',' or ']' expected");
    }
}

static bool value(parser *p, json_val *v, int depth) {
    skip_ws(p);
    if (p->s >= p->end) return fail(p, "a value expected");
    switch (*p->s) {
    case '{':
    case '[':
        return container(p, v, depth);
    case '"':
        *v = (json_val){.type = JSON_T_STRING};
        return string(p, &v->s, &v->len);
    case 't':
        *v = (json_val){.type = JSON_T_BOOL, .b = true};
        return literal(p, "true");
    case 'f':
        *v = (json_val){.type = JSON_T_BOOL};
        return literal(p, "false");
    case 'n':
        *v = (json_val){.type = JSON_T_NULL};
        return literal(p, "null");
    default:
        return number(p, v);
    }
}

al_status json_parse(const char *what, const char *text, size_t len, json_doc **doc,
                     const json_val **root) {
    if (doc) *doc = NULL;
    if (root) *root = NULL;
    if (!doc || !root || (!text && len)) return al_error(AL_ERR_ARG, "json_parse: NULL argument");
    json_doc *d = al_calloc(1, sizeof *d);
    if (!d) return al_error(AL_ERR_NOMEM, "out of memory reading %s", what);
    parser p = {.doc = d, .s = text, .end = text + len, .start = text, .what = what};
    if (value(&p, &d->root, 0)) {
        skip_ws(&p);
        if (p.s != p.end) fail(&p, "text after the value");
    }
    if (p.st != AL_OK) {
        json_doc_free(d);
        return p.st;
    }
    *doc = d;
    *root = &d->root;
    return AL_OK;
}

void json_doc_free(json_doc *doc) {
    if (!doc) return;
    for (int i = 0; i < doc->n_blocks; i++)
        al_free(doc->blocks[i]);
    al_free(doc->blocks);
    al_free(doc);
}

const json_val *json_get(const json_val *v, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; v && v->type == JSON_T_OBJECT && i < v->n_items; i++)
        if (v->items[i].key_len == n && !memcmp(v->items[i].key, key, n)) return &v->items[i];
    return NULL;
}

const char *json_get_str(const json_val *v, const char *key) {
    const json_val *m = json_get(v, key);
    return m && m->type == JSON_T_STRING ? m->s : NULL;
}

/* ---- writing ------------------------------------------------------------------------------ */

void json_write_str(const char *s, size_t n, json_put put, void *ctx) {
    put(ctx, "\"", 1);
    size_t run = 0; /* bytes written as they are, pending */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        const char *e = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                        : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f"
                                    : NULL;
        if (!e && c >= 0x20) {
            run++;
            continue;
        }
        if (!e) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            e = esc;
        }
        put(ctx, s + i - run, run);
        put(ctx, e, strlen(e));
        run = 0;
    }
    put(ctx, s + n - run, run);
    put(ctx, "\"", 1);
}

void json_write(const json_val *v, json_put put, void *ctx) {
    switch (v->type) {
    case JSON_T_NULL:
        put(ctx, "null", 4);
        break;
    case JSON_T_BOOL:
        put(ctx, v->b ? "true" : "false", v->b ? 4 : 5);
        break;
    case JSON_T_NUMBER:
        put(ctx, v->s, v->len);
        break;
    case JSON_T_STRING:
        json_write_str(v->s, v->len, put, ctx);
        break;
    case JSON_T_ARRAY:
    case JSON_T_OBJECT: {
        const bool obj = v->type == JSON_T_OBJECT;
        put(ctx, obj ? "{" : "[", 1);
        for (int i = 0; i < v->n_items; i++) {
            if (i) put(ctx, ", ", 2);
            if (obj) {
                json_write_str(v->items[i].key, v->items[i].key_len, put, ctx);
                put(ctx, ": ", 2);
            }
            json_write(&v->items[i], put, ctx);
        }
        put(ctx, obj ? "}" : "]", 1);
        break;
    }
    }
}
