/* schema.c: JSON Schema to grammar text (see schema.h for what is supported).
 *
 * Each schema becomes a rule named s<N> (or the caller's name); its expression is
 * built in a buffer of its own while the rules it needs are appended to the grammar,
 * then appended itself. The shared rules (j-ws, j-str, j-int, j-num, j-val, ...) are
 * written once per grammar, on first use.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/schema.h"

enum { MAX_DEPTH = 64, MAX_LEN = 10000, FRAC_DIGITS = 6 };
#define BIG 999999999999999LL /* numbers are written within +-10^15 */

typedef enum prim { P_WS = 1, P_STR = 2, P_INT = 4, P_NUM = 8, P_VAL = 16, P_CHAR = 32 } prim;

static const char *const PRIM_TEXT[] = {
    "j-ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n",
    "j-str ::= \"\\\"\" j-char* \"\\\"\"\n",
    "j-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,14} )\n",
    "j-num ::= j-int ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,3} )?\n",
    "j-val ::= j-obj | j-arr | j-str | j-num | \"true\" | \"false\" | \"null\"\n"
    "j-obj ::= \"{\" j-ws ( j-str j-ws \":\" j-ws j-val j-ws ( \",\" j-ws j-str j-ws \":\" j-ws "
    "j-val j-ws )* )? \"}\"\n"
    "j-arr ::= \"[\" j-ws ( j-val j-ws ( \",\" j-ws j-val j-ws )* )? \"]\"\n",
    "j-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n",
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static bool fail(srv_gram *g, const char *path, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(g->err, sizeof g->err, "%s (at %s)", msg, path[0] ? path : "#");
    return false;
}

/* Names a shared rule, writing it (and what it uses) on first use. */
static const char *use(srv_gram *g, unsigned p) {
    static const char *const names[] = {"j-ws", "j-str", "j-int", "j-num", "j-val", "j-char"};
    unsigned deps = p == P_STR   ? P_CHAR
                    : p == P_NUM ? P_INT
                    : p == P_VAL ? P_WS | P_STR | P_NUM
                                 : 0;
    for (unsigned d = 1; d <= P_CHAR; d <<= 1)
        if (deps & d) use(g, d);
    int i = 0;
    while ((1u << i) != p)
        i++;
    if (!(g->prims & p)) {
        g->prims |= p;
        srv_buf_str(&g->text, PRIM_TEXT[i]);
    }
    return names[i];
}

/* A grammar literal for n bytes of text. */
static void lit(srv_buf *b, const char *s, size_t n) {
    srv_buf_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            srv_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            srv_buf_printf(b, "\\x%02X", c);
        else
            srv_buf_add(b, &s[i], 1);
    }
    srv_buf_str(b, "\"");
}

/* A JSON value as the literal of its compact text. */
static bool lit_json(srv_gram *g, srv_buf *b, const json_t *v, const char *path) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return fail(g, path, "cannot encode an enum or const value");
    lit(b, s, strlen(s));
    free(s);
    return true;
}

/* ---- enums: literals factored by their common prefixes -----------------------------------
 * A flat alternation of n literals leaves n stacks alive in the matcher at the start of
 * the value (and the work of each step grows with n); factored as a trie, one literal's
 * worth of stacks remains. */

typedef struct lit_text {
    char *s;
    size_t n;
} lit_text;

static int by_text(const void *a, const void *b) {
    const lit_text *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* Bytes of the UTF-8 character at s (the texts are valid UTF-8: jansson wrote them). */
static size_t char_len(const char *s) {
    unsigned char c = (unsigned char)*s;
    return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
}

/* t[0..n) sorted, all sharing their first off bytes: the rest of each as a trie. */
static void trie_expr(srv_buf *e, const lit_text *t, size_t n, size_t off, int depth) {
    size_t common = off; /* the run every text shares: one literal, no branching */
    while (n > 1 && t[0].n > common && t[n - 1].n > common) {
        size_t k = char_len(t[0].s + common);
        if (t[n - 1].n < common + k || memcmp(t[0].s + common, t[n - 1].s + common, k)) break;
        common += k; /* sorted: the first and the last agree, so all do */
    }
    if (n == 1) common = t[0].n;
    if (common > off) lit(e, t[0].s + off, common - off);
    if (n == 1) return;
    if (depth > 64) { /* deep branching: the rest as a flat alternation */
        srv_buf_str(e, " (");
        for (size_t i = 0; i < n; i++) {
            srv_buf_str(e, i ? " | " : " ");
            lit(e, t[i].s + common, t[i].n - common);
        }
        srv_buf_str(e, " )");
        return;
    }
    srv_buf_str(e, " (");
    size_t i = 0;
    bool first = true;
    if (t[0].n == common) { /* one text ends here: the empty alternative */
        srv_buf_str(e, " \"\"");
        first = false;
        while (i < n && t[i].n == common)
            i++;
    }
    while (i < n) { /* the texts that go on with the same character */
        size_t k = char_len(t[i].s + common), j = i + 1;
        while (j < n && t[j].n >= common + k && !memcmp(t[j].s + common, t[i].s + common, k))
            j++;
        srv_buf_str(e, first ? " " : " | ");
        first = false;
        lit(e, t[i].s + common, k);
        if (j - i > 1 || t[i].n > common + k) {
            srv_buf_str(e, " ");
            trie_expr(e, t + i, j - i, common + k, depth + 1);
        }
        i = j;
    }
    srv_buf_str(e, " )");
}

static bool gen_enum(srv_gram *g, const json_t *en, const char *path, srv_buf *e) {
    size_t n = json_array_size(en);
    lit_text *t = calloc(n, sizeof *t);
    bool ok = t != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        t[i].s = json_dumps(json_array_get(en, i), JSON_COMPACT | JSON_ENCODE_ANY);
        ok = t[i].s != NULL;
        if (ok) t[i].n = strlen(t[i].s);
    }
    if (ok) {
        qsort(t, n, sizeof *t, by_text);
        srv_buf_str(e, "( ");
        trie_expr(e, t, n, 0, 0);
        srv_buf_str(e, " )");
    }
    for (size_t i = 0; t && i < n; i++)
        free(t[i].s);
    free(t);
    return ok || fail(g, path, "cannot encode an enum value");
}

/* Ends the rule whose expression is e: appends `name ::= e`, frees e. */
static bool define(srv_gram *g, const char *name, srv_buf *e) {
    srv_buf_printf(&g->text, "%s ::= %s\n", name, e->s ? e->s : "\"\"");
    bool failed = e->failed;
    srv_buf_free(e);
    if (failed || g->text.failed) return fail(g, "", "out of memory building the grammar");
    if (g->text.len > SRV_SCHEMA_MAX)
        return fail(g, "", "the schema makes a grammar over %d bytes", SRV_SCHEMA_MAX);
    return true;
}

static void fresh(srv_gram *g, char name[32]) {
    snprintf(name, 32, "s%d", g->n_rules++);
}

static bool gen(srv_gram *g, const json_t *s, const char *path, int depth, char name[32]);

/* ---- integers and numbers in a range ------------------------------------------------------ */

/* Digits x..y of equal length n (as strings), written as an expression. */
static void same_len(srv_buf *b, const char *x, const char *y, int n) {
    if (n == 0) return;
    int z = 0;
    while (z < n && x[z] == '0' && y[z] == '9')
        z++;
    if (z == n) { /* 00..0 to 99..9: any digits; without this the recursion is exponential */
        srv_buf_printf(b, "[0-9]{%d}", n);
        return;
    }
    if (!strncmp(x, y, (size_t)n)) {
        srv_buf_printf(b, "\"%.*s\"", n, x);
        return;
    }
    if (x[0] == y[0]) {
        srv_buf_printf(b, "\"%c\" ", x[0]);
        same_len(b, x + 1, y + 1, n - 1);
        return;
    }
    if (n == 1) {
        srv_buf_printf(b, "[%c-%c]", x[0], y[0]);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    srv_buf_printf(b, "( \"%c\" ( ", x[0]);
    same_len(b, x + 1, nines, n - 1);
    srv_buf_str(b, " )");
    if (x[0] + 1 <= y[0] - 1) srv_buf_printf(b, " | [%c-%c] [0-9]{%d}", x[0] + 1, y[0] - 1, n - 1);
    srv_buf_printf(b, " | \"%c\" ( ", y[0]);
    same_len(b, zeros, y + 1, n - 1);
    srv_buf_str(b, " ) )");
}

/* The non-negative integers in [a, b], without leading zeros. */
static void uint_range(srv_buf *out, long long a, long long b) {
    srv_buf_str(out, "( ");
    long long lo_len = 1;
    bool first = true;
    for (int len = 1; len <= 18; len++, lo_len *= 10) {
        long long hi_len = lo_len * 10 - 1,
                  lo = a > (len == 1 ? 0 : lo_len) ? a : (len == 1 ? 0 : lo_len);
        long long hi = b < hi_len ? b : hi_len;
        if (lo > hi) continue;
        char x[24], y[24];
        snprintf(x, sizeof x, "%lld", lo);
        snprintf(y, sizeof y, "%lld", hi);
        srv_buf_str(out, first ? "( " : " | ( ");
        same_len(out, x, y, len);
        srv_buf_str(out, " )");
        first = false;
    }
    srv_buf_str(out, " )");
}

/* The integers in [lo, hi] (lo <= hi). */
static void int_range(srv_buf *b, long long lo, long long hi) {
    bool neg = lo < 0, pos = hi >= 0;
    srv_buf_str(b, "( ");
    if (neg) {
        srv_buf_str(b, "\"-\" ");
        uint_range(b, hi < 0 ? -hi : 1, -lo);
    }
    if (neg && pos) srv_buf_str(b, " | ");
    if (pos) uint_range(b, lo > 0 ? lo : 0, hi);
    srv_buf_str(b, " )");
}

/* A bound: -1 when the keyword is absent, 0 when read, 1 when refused. */
static int bound(srv_gram *g, const json_t *s, const char *key, const char *path, double *v) {
    const json_t *x = json_object_get(s, key);
    if (!x) return -1;
    if (!json_is_number(x)) return fail(g, path, "%s must be a number", key), 1;
    *v = json_number_value(x);
    return 0;
}

static bool gen_number(srv_gram *g, const json_t *s, bool integer, const char *path, srv_buf *e) {
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    int a = bound(g, s, "minimum", path, &mn), b = bound(g, s, "maximum", path, &mx);
    int c = bound(g, s, "exclusiveMinimum", path, &xmn),
        d = bound(g, s, "exclusiveMaximum", path, &xmx);
    if (a > 0 || b > 0 || c > 0 || d > 0) return false;
    if (a < 0 && b < 0 && c < 0 && d < 0) {
        srv_buf_str(e, use(g, integer ? P_INT : P_NUM));
        return true;
    }
    /* the integers in range: the smallest above every lower bound, the largest below every
     * upper bound, each within +-BIG */
    double lo = -(double)BIG, hi = (double)BIG;
    if (a == 0) lo = fmax(lo, ceil(mn));
    if (c == 0) lo = fmax(lo, floor(xmn) + 1);
    if (b == 0) hi = fmin(hi, floor(mx));
    if (d == 0) hi = fmin(hi, ceil(xmx) - 1);
    bool any = false;
    if (lo <= hi) {
        int_range(e, (long long)lo, (long long)hi);
        any = true;
    }
    if (!integer) {
        /* a fraction ends in a non-zero digit, so "I.f" lies strictly between I and I + 1
         * and "-I.f" between -I - 1 and -I: it is written after an I whose whole open
         * interval is in range, whether the bounds are inclusive or not */
        double ub = (double)BIG, lb = -(double)BIG;
        if (b == 0) ub = fmin(ub, mx);
        if (d == 0) ub = fmin(ub, xmx);
        if (a == 0) lb = fmax(lb, mn);
        if (c == 0) lb = fmax(lb, xmn);
        double p_lo = fmax(0, ceil(lb)), p_hi = floor(ub) - 1;
        double n_lo = fmax(0, ceil(-ub)), n_hi = floor(-lb) - 1;
        if (p_lo <= p_hi) {
            srv_buf_str(e, any ? " | " : "");
            uint_range(e, (long long)p_lo, (long long)p_hi);
            srv_buf_printf(e, " \".\" [0-9]{0,%d} [1-9]", FRAC_DIGITS - 1);
            any = true;
        }
        if (n_lo <= n_hi) {
            srv_buf_str(e, any ? " | \"-\" " : "\"-\" ");
            uint_range(e, (long long)n_lo, (long long)n_hi);
            srv_buf_printf(e, " \".\" [0-9]{0,%d} [1-9]", FRAC_DIGITS - 1);
            any = true;
        }
    }
    if (!any)
        return fail(g, path, "no %s lies within the bounds (or within +-10^15)",
                    integer ? "integer" : "number");
    return true;
}

/* ---- strings ------------------------------------------------------------------------------- */

static bool gen_pattern(srv_gram *g, const char *re, const char *path, srv_buf *e);

static bool gen_string(srv_gram *g, const json_t *s, const char *path, srv_buf *e) {
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    long long mn = 0, mx = -1;
    const json_t *x;
    if ((x = json_object_get(s, "minLength"))) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > MAX_LEN)
            return fail(g, path, "minLength must be an integer in [0, %d]", MAX_LEN);
        mn = json_integer_value(x);
    }
    if ((x = json_object_get(s, "maxLength"))) {
        if (!json_is_integer(x) || json_integer_value(x) < mn)
            return fail(g, path, "maxLength must be an integer >= minLength (%lld)", mn);
        mx = json_integer_value(x) > MAX_LEN ? MAX_LEN : json_integer_value(x);
    }
    if ((fmt || pat) && (mn > 0 || mx >= 0))
        return fail(g, path, "minLength/maxLength beside %s is not supported",
                    fmt ? "format" : "pattern");
    if (fmt && pat) return fail(g, path, "format beside pattern is not supported");
    if (pat) {
        if (!json_is_string(pat)) return fail(g, path, "pattern must be a string");
        return gen_pattern(g, json_string_value(pat), path, e);
    }
    if (fmt) {
        static const char *const fmts[][2] = {
            /* days by month; February to the 28th, which every year has */
            {"date",
             "[0-9]{3} [1-9] \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | "
             "[12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | "
             "[12] [0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )"},
            {"time",
             "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
             "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )"},
            {"uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                     "[0-9a-f]{12}"},
        };
        const char *f = json_string_value(fmt);
        if (!f) return fail(g, path, "format must be a string");
        bool dt = !strcmp(f, "date-time");
        for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++)
            if (!strcmp(f, fmts[i][0]) || (dt && i < 2)) {
                srv_buf_str(e, i == 0 ? "\"\\\"\" " : dt ? " \"T\" " : "\"\\\"\" ");
                srv_buf_str(e, fmts[i][1]);
                if (!dt || i == 1) {
                    srv_buf_str(e, " \"\\\"\"");
                    return true;
                }
            }
        return fail(g, path, "format '%s' is not supported (date, time, date-time, uuid are)", f);
    }
    use(g, P_CHAR);
    if (mx < 0)
        srv_buf_printf(e, "\"\\\"\" j-char{%lld,} \"\\\"\"", mn);
    else
        srv_buf_printf(e, "\"\\\"\" j-char{%lld,%lld} \"\\\"\"", mn, mx);
    return true;
}

/* ---- pattern: a regular-expression subset --------------------------------------------------
 * The grammar matches the string as JSON writes it, so each character of the regular
 * expression stands for its JSON form: '"' is \", a backslash \\, a newline \n. */

typedef struct rx {
    srv_gram *g;
    const char *p, *path;
    srv_buf *e;
    int depth;
} rx;

static bool rx_unsupported(rx *r, const char *what) {
    return fail(r->g, r->path, "pattern: %s is not supported", what);
}

/* A code point as a class member. */
static void cls_cp(srv_buf *b, uint32_t c) {
    if (c <= 0xFFFF)
        srv_buf_printf(b, "\\u%04X", c);
    else
        srv_buf_printf(b, "\\U%08X", c);
}

/* JSON's form of a character outside a plain class: '"', '\\' and controls. */
static void json_escaped(srv_buf *b, uint32_t c) {
    if (c == '"')
        srv_buf_str(b, "\"\\\\\\\"\"");
    else if (c == '\\')
        srv_buf_str(b, "\"\\\\\\\\\"");
    else if (c == '\n')
        srv_buf_str(b, "\"\\\\n\"");
    else if (c == '\t')
        srv_buf_str(b, "\"\\\\t\"");
    else if (c == '\r')
        srv_buf_str(b, "\"\\\\r\"");
    else
        srv_buf_printf(b, "\"\\\\u%04X\"", c);
}

static bool special(uint32_t c) {
    return c < 0x20 || c == '"' || c == '\\';
}

/* A class of ranges (negated or not) as an expression: a grammar class of the plain
 * characters, and the escaped forms of the special ones it holds. */
static void rx_class(srv_buf *e, const uint32_t *rg, int n, bool neg) {
    srv_buf cls = {0};
    if (neg) srv_buf_str(&cls, "^\\u0000-\\u001F\\u0022\\u005C");
    for (int i = 0; i < n; i++) {
        uint32_t lo = rg[2 * i], hi = rg[2 * i + 1];
        if (neg) { /* excluded as they are; the specials are excluded already */
            cls_cp(&cls, lo), srv_buf_str(&cls, "-"), cls_cp(&cls, hi);
            continue;
        }
        for (uint32_t a = lo; a <= hi;) { /* the runs between specials */
            while (a <= hi && special(a))
                a++;
            if (a > hi) break;
            uint32_t b = a;
            while (b < hi && !special(b + 1))
                b++;
            cls_cp(&cls, a), srv_buf_str(&cls, "-"), cls_cp(&cls, b);
            a = b + 1;
        }
    }
    srv_buf_str(e, "( ");
    bool first = cls.len == 0; /* a class of specials only has no plain part to write */
    if (!first) srv_buf_printf(e, "[%s]", cls.s);
    srv_buf_free(&cls);
    const uint32_t sp[] = {'"', '\\', '\n', '\t', '\r'};
    for (size_t k = 0; k < sizeof sp / sizeof *sp; k++) {
        bool in = false;
        for (int i = 0; i < n && !in; i++)
            in = sp[k] >= rg[2 * i] && sp[k] <= rg[2 * i + 1];
        if (in == neg) continue;
        srv_buf_str(e, first ? "" : " | ");
        json_escaped(e, sp[k]);
        first = false;
    }
    if (first) srv_buf_str(e, "\"\""); /* nothing at all: never reached by a valid class */
    srv_buf_str(e, " )");
}

static bool rx_char(rx *r, uint32_t *c) {
    const unsigned char *s = (const unsigned char *)r->p;
    size_t n = 1;
    if (s[0] >= 0xC0) n = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    uint32_t v = n == 1 ? s[0] : n == 2 ? s[0] & 0x1fu : n == 3 ? s[0] & 0x0fu : s[0] & 7u;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return rx_unsupported(r, "invalid UTF-8");
        v = v << 6 | (s[i] & 0x3fu);
    }
    r->p += n;
    *c = v;
    return true;
}

/* An escape after '\': a class (\d \w \s, \D \W \S) into rg, or one character. */
static bool rx_escape(rx *r, uint32_t *rg, int *n, bool *neg) {
    char c = *r->p++;
    static const uint32_t digit[] = {'0', '9'}, word[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'},
                          space[] = {' ', ' ', '\t', '\r', 0x0B, 0x0C};
    const uint32_t *src = NULL;
    int k = 0;
    switch (c) {
    case 'd':
    case 'D':
        src = digit, k = 1;
        break;
    case 'w':
    case 'W':
        src = word, k = 4;
        break;
    case 's':
    case 'S':
        src = space, k = 3;
        break;
    case 'n':
        rg[0] = rg[1] = '\n', *n = 1;
        return true;
    case 't':
        rg[0] = rg[1] = '\t', *n = 1;
        return true;
    case 'r':
        rg[0] = rg[1] = '\r', *n = 1;
        return true;
    default:
        if (c == 0 || (c >= '0' && c <= '9') || c == 'b' || c == 'B' || c == 'p' || c == 'P' ||
            c == 'u' || c == 'x' || c == 'k')
            return rx_unsupported(r, "this escape (backreferences, \\b, \\p, \\u, \\x)");
        r->p--;
        uint32_t ch;
        if (!rx_char(r, &ch)) return false;
        rg[0] = rg[1] = ch, *n = 1;
        return true;
    }
    memcpy(rg, src, (size_t)k * 2 * sizeof *rg);
    if (c == 's') rg[2 * k] = rg[2 * k + 1] = '\n', k++;
    *n = k;
    *neg = c >= 'A' && c <= 'Z';
    return true;
}

/* [...] into rg (at most 64 ranges). */
static bool rx_bracket(rx *r, uint32_t *rg, int *n, bool *neg) {
    r->p++;
    *neg = *r->p == '^';
    if (*neg) r->p++;
    *n = 0;
    bool first = true;
    while (*r->p != ']' || first) {
        first = false;
        if (!*r->p) return rx_unsupported(r, "an unclosed '['");
        if (*n >= 56) return rx_unsupported(r, "a class of more than 56 ranges");
        uint32_t lo, hi;
        if (*r->p == '\\') {
            r->p++;
            uint32_t sub[16];
            int k;
            bool sneg = false;
            if (!rx_escape(r, sub, &k, &sneg)) return false;
            if (sneg) return rx_unsupported(r, "\\D, \\W or \\S inside a class");
            memcpy(rg + 2 * *n, sub, (size_t)k * 2 * sizeof *sub);
            *n += k;
            continue;
        }
        if (!rx_char(r, &lo)) return false;
        hi = lo;
        if (r->p[0] == '-' && r->p[1] != ']' && r->p[1]) {
            r->p++;
            if (*r->p == '\\') return rx_unsupported(r, "an escape as a range's end");
            if (!rx_char(r, &hi)) return false;
            if (hi < lo) return rx_unsupported(r, "a reversed range");
        }
        rg[2 * *n] = lo, rg[2 * *n + 1] = hi, (*n)++;
    }
    r->p++;
    return true;
}

static bool rx_alt(rx *r);

static bool rx_atom(rx *r) {
    uint32_t rg[128];
    int n = 0;
    bool neg = false;
    char c = *r->p;
    if (c == '(') {
        r->p++;
        if (r->p[0] == '?') {
            if (r->p[1] != ':') return rx_unsupported(r, "lookaround and named groups");
            r->p += 2;
        }
        if (++r->depth > 50) return rx_unsupported(r, "groups nested deeper than 50");
        srv_buf_str(r->e, "( ");
        if (!rx_alt(r)) return false;
        if (*r->p != ')') return rx_unsupported(r, "an unclosed '('");
        r->p++;
        r->depth--;
        srv_buf_str(r->e, " )");
        return true;
    }
    if (c == '^' || c == '$') return rx_unsupported(r, "'^' or '$' inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_unsupported(r, "a quantifier with nothing before it");
    if (c == '[') {
        if (!rx_bracket(r, rg, &n, &neg)) return false;
    } else if (c == '.') {
        r->p++;
        rg[0] = rg[1] = '\n', n = 1, neg = true;
    } else if (c == '\\') {
        r->p++;
        if (!rx_escape(r, rg, &n, &neg)) return false;
    } else {
        uint32_t ch;
        if (!rx_char(r, &ch)) return false;
        if (special(ch))
            json_escaped(r->e, ch);
        else {
            srv_buf_str(r->e, "[");
            cls_cp(r->e, ch);
            srv_buf_str(r->e, "]");
        }
        return true;
    }
    rx_class(r->e, rg, n, neg);
    return true;
}

static bool rx_seq(rx *r) {
    bool empty = true;
    while (*r->p && *r->p != '|' && *r->p != ')' && !(r->p[0] == '$' && r->p[1] == 0)) {
        srv_buf_str(r->e, empty ? "( " : " ( ");
        empty = false;
        if (!rx_atom(r)) return false;
        srv_buf_str(r->e, " )");
        char q = *r->p;
        if (q == '*' || q == '+' || q == '?') {
            srv_buf_add(r->e, &q, 1);
            r->p++;
        } else if (q == '{') {
            char *end;
            long m = strtol(r->p + 1, &end, 10), x = m;
            if (end == r->p + 1 || m < 0 || m > 1000)
                return rx_unsupported(r, "a {m,n} beyond 1000");
            if (*end == ',') {
                x = end[1] == '}' ? -1 : strtol(end + 1, &end, 10);
                if (x == -1)
                    end++;
                else if (x < m || x > 1000)
                    return rx_unsupported(r, "a {m,n} beyond 1000");
            }
            if (*end != '}') return rx_unsupported(r, "a malformed {m,n}");
            r->p = end + 1;
            if (x < 0)
                srv_buf_printf(r->e, "{%ld,}", m);
            else
                srv_buf_printf(r->e, "{%ld,%ld}", m, x);
        }
        if (*r->p == '?') r->p++; /* lazy or greedy: the same strings */
        if (*r->p == '*' || *r->p == '+' || *r->p == '{')
            return rx_unsupported(r, "a quantifier after a quantifier");
    }
    if (empty) srv_buf_str(r->e, "\"\"");
    return true;
}

static bool rx_alt(rx *r) {
    if (!rx_seq(r)) return false;
    while (*r->p == '|') {
        r->p++;
        srv_buf_str(r->e, " | ");
        if (!rx_seq(r)) return false;
    }
    return true;
}

static bool gen_pattern(srv_gram *g, const char *re, const char *path, srv_buf *e) {
    rx r = {.g = g, .p = re, .path = path, .e = e};
    bool start = *r.p == '^';
    if (start) r.p++;
    const char *chr = use(g, P_CHAR);
    srv_buf_str(e, "\"\\\"\" ");
    if (!start) srv_buf_printf(e, "%s* ", chr);
    srv_buf_str(e, "( ");
    if (!rx_alt(&r)) return false;
    srv_buf_str(e, " )");
    bool end = r.p[0] == '$' && r.p[1] == 0;
    if (end) r.p++;
    if (*r.p) return rx_unsupported(&r, *r.p == ')' ? "an unmatched ')'" : "this pattern");
    if (!end) srv_buf_printf(e, " %s*", chr);
    srv_buf_str(e, " \"\\\"\"");
    return true;
}

/* ---- objects and arrays -------------------------------------------------------------------- */

/* Properties in order: B_i (none written yet) and A_i (some written) over i..n. */
static bool gen_object(srv_gram *g, const json_t *s, const char *path, int depth, srv_buf *e) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    if (props && !json_is_object(props)) return fail(g, path, "properties must be an object");
    if (req && !json_is_array(req)) return fail(g, path, "required must be an array of names");
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (!r) return fail(g, path, "required[%zu] must be a string", i);
        if (!json_object_get(props, r))
            return fail(g, path, "required property '%s' is not in properties", r);
    }
    const char *ws = use(g, P_WS);
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0) { /* any object (additionalProperties: its values' schema) */
        const json_t *ap = json_object_get(s, "additionalProperties");
        char vname[32] = "j-val";
        if (ap && json_is_object(ap) && !gen(g, ap, path, depth + 1, vname)) return false;
        if (!ap || !json_is_object(ap)) use(g, P_VAL);
        const char *str = use(g, P_STR);
        srv_buf_printf(e,
                       "\"{\" %s ( %s %s \":\" %s %s %s ( \",\" %s %s %s \":\" %s %s %s )* )? "
                       "\"}\"",
                       ws, str, ws, ws, vname, ws, ws, str, ws, ws, vname, ws);
        return true;
    }
    int base = g->n_rules;
    g->n_rules += 2 * (int)n + 2;
    size_t i = 0;
    const char *key;
    const json_t *sub;
    json_object_foreach((json_t *)props, key, sub) {
        char p2[256], vname[32];
        snprintf(p2, sizeof p2, "%s/properties/%s", path, key);
        if (!gen(g, sub, p2, depth + 1, vname)) return false;
        bool required = false;
        for (size_t k = 0; req && k < json_array_size(req); k++)
            required |= !strcmp(json_string_value(json_array_get(req, k)), key);
        json_t *kj = json_string(key);
        char *k = kj ? json_dumps(kj, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(kj);
        srv_buf klit = {0};
        if (!k) return fail(g, p2, "cannot encode the property name");
        lit(&klit, k, strlen(k));
        free(k);
        srv_buf b = {0}, a = {0};
        int bi = base + 2 * (int)i, ai = bi + 1, bn = bi + 2, an = bi + 3;
        srv_buf_printf(&b, "%s %s \":\" %s %s %s s%d", klit.s, ws, ws, vname, ws, an);
        if (!required) srv_buf_printf(&b, " | s%d", bn);
        srv_buf_printf(&a,
                       required ? "\",\" %s %s %s \":\" %s %s %s s%d"
                                : "( \",\" %s %s %s \":\" %s %s %s )? s%d",
                       ws, klit.s, ws, ws, vname, ws, an);
        srv_buf_free(&klit);
        char nb[32], na[32];
        snprintf(nb, sizeof nb, "s%d", bi);
        snprintf(na, sizeof na, "s%d", ai);
        if (!define(g, nb, &b) || !define(g, na, &a)) return false;
        i++;
    }
    srv_buf end = {0}, end2 = {0};
    char nb[32], na[32];
    snprintf(nb, sizeof nb, "s%d", base + 2 * (int)n);
    snprintf(na, sizeof na, "s%d", base + 2 * (int)n + 1);
    if (!define(g, nb, &end) || !define(g, na, &end2)) return false;
    srv_buf_printf(e, "\"{\" %s s%d \"}\"", ws, base);
    return true;
}

static bool gen_array(srv_gram *g, const json_t *s, const char *path, int depth, srv_buf *e) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const json_t *x;
    long long mn = 0, mx = -1;
    if ((x = json_object_get(s, "minItems"))) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1000)
            return fail(g, path, "minItems must be an integer in [0, 1000]");
        mn = json_integer_value(x);
    }
    if ((x = json_object_get(s, "maxItems"))) {
        if (!json_is_integer(x) || json_integer_value(x) < mn)
            return fail(g, path, "maxItems must be an integer >= minItems (%lld)", mn);
        mx = json_integer_value(x) > 1000 ? 1000 : json_integer_value(x);
    }
    const char *ws = use(g, P_WS);
    if (prefix) {
        size_t n = json_array_size(prefix);
        if (!json_is_array(prefix) || n == 0)
            return fail(g, path, "prefixItems must be a non-empty array");
        if ((long long)n < mn || (mx >= 0 && (long long)n > mx))
            return fail(g, path, "prefixItems of %zu outside minItems/maxItems", n);
        srv_buf_printf(e, "\"[\" %s", ws);
        for (size_t i = 0; i < n; i++) {
            char p2[256], nm[32];
            snprintf(p2, sizeof p2, "%s/prefixItems/%zu", path, i);
            if (!gen(g, json_array_get(prefix, i), p2, depth + 1, nm)) return false;
            srv_buf_printf(e, "%s %s %s", i ? " \",\" " : " ", ws, nm);
            srv_buf_printf(e, " %s", ws);
        }
        srv_buf_str(e, " \"]\"");
        return true;
    }
    char nm[32] = "j-val";
    if (items && !json_is_boolean(items) && !gen(g, items, path, depth + 1, nm)) return false;
    if (json_is_false(items)) mx = 0;
    if (!items || json_is_true(items)) use(g, P_VAL);
    if (mx == 0) {
        srv_buf_printf(e, "\"[\" %s \"]\"", ws);
        return true;
    }
    long long rmin = mn > 0 ? mn - 1 : 0, rmax = mx > 0 ? mx - 1 : -1;
    srv_buf_printf(e, "\"[\" %s ( %s %s ( \",\" %s %s %s )", ws, nm, ws, ws, nm, ws);
    if (rmax < 0)
        srv_buf_printf(e, "{%lld,}", rmin);
    else
        srv_buf_printf(e, "{%lld,%lld}", rmin, rmax);
    srv_buf_printf(e, " )%s \"]\"", mn > 0 ? "" : "?");
    return true;
}

/* ---- the schema ----------------------------------------------------------------------------- */

static bool known_keyword(const char *k) {
    static const char *const ok[] = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
        "definitions", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
        "maxLength", "pattern", "format",
        /* annotations: no effect on what is valid */
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
        "readOnly", "writeOnly"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(k, ok[i])) return true;
    return false;
}

static bool is_annotation(const char *k) {
    return !strcmp(k, "title") || !strcmp(k, "description") || !strcmp(k, "default") ||
           !strcmp(k, "examples") || !strcmp(k, "$schema") || !strcmp(k, "$id") ||
           !strcmp(k, "$comment") || !strcmp(k, "deprecated") || !strcmp(k, "readOnly") ||
           !strcmp(k, "writeOnly") || !strcmp(k, "$defs") || !strcmp(k, "definitions");
}

/* Whether s has keywords besides the annotations and those listed in allow. */
static const char *other_keyword(const json_t *s, const char *const *allow) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        bool ok = is_annotation(k);
        for (int i = 0; allow[i] && !ok; i++)
            ok = !strcmp(k, allow[i]);
        if (!ok) return k;
    }
    return NULL;
}

static bool gen_ref(srv_gram *g, const json_t *s, const char *path, int depth, srv_buf *e) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return fail(g, path, "$ref must be a string");
    static const char *const allow[] = {"$ref", NULL};
    const char *other = other_keyword(s, allow);
    if (other) return fail(g, path, "'%s' beside $ref is not supported", other);
    const json_t *t = NULL;
    if (!strcmp(ref, "#"))
        t = g->doc;
    else if (!strncmp(ref, "#/$defs/", 8))
        t = json_object_get(json_object_get(g->doc, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14))
        t = json_object_get(json_object_get(g->doc, "definitions"), ref + 14);
    else
        return fail(g, path,
                    "$ref '%.100s' is not supported (only #, #/$defs/NAME and "
                    "#/definitions/NAME)",
                    ref);
    if (!t) return fail(g, path, "$ref '%.100s' points to nothing", ref);
    for (int i = 0; i < g->n_open; i++)
        if (g->open[i] == t) return fail(g, path, "recursive $ref '%.100s' is not supported", ref);
    if (g->n_open == (int)(sizeof g->open / sizeof *g->open))
        return fail(g, path, "$ref chains deeper than 64");
    g->open[g->n_open++] = t;
    char nm[32];
    bool ok = gen(g, t, ref, depth + 1, nm);
    g->n_open--;
    if (ok) srv_buf_str(e, nm);
    return ok;
}

static bool gen_type(srv_gram *g, const json_t *s, const char *type, const char *path, int depth,
                     srv_buf *e) {
    if (!strcmp(type, "object")) return gen_object(g, s, path, depth, e);
    if (!strcmp(type, "array")) return gen_array(g, s, path, depth, e);
    if (!strcmp(type, "string")) return gen_string(g, s, path, e);
    if (!strcmp(type, "integer")) return gen_number(g, s, true, path, e);
    if (!strcmp(type, "number")) return gen_number(g, s, false, path, e);
    if (!strcmp(type, "boolean")) return srv_buf_str(e, "( \"true\" | \"false\" )"), true;
    if (!strcmp(type, "null")) return srv_buf_str(e, "\"null\""), true;
    return fail(g, path, "unknown type '%.40s'", type);
}

/* The type a schema without "type" describes, from its keywords; NULL: any value. */
static const char *implied_type(const json_t *s) {
    static const struct {
        const char *key, *type;
    } map[] = {{"properties", "object"},
               {"required", "object"},
               {"additionalProperties", "object"},
               {"items", "array"},
               {"prefixItems", "array"},
               {"minItems", "array"},
               {"maxItems", "array"},
               {"minLength", "string"},
               {"maxLength", "string"},
               {"pattern", "string"},
               {"format", "string"},
               {"minimum", "number"},
               {"maximum", "number"},
               {"exclusiveMinimum", "number"},
               {"exclusiveMaximum", "number"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (json_object_get(s, map[i].key)) return map[i].type;
    return NULL;
}

static bool gen_expr(srv_gram *g, const json_t *s, const char *path, int depth, srv_buf *e) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) if (!known_keyword(k)) return fail(
        g, path, "JSON Schema keyword '%.60s' is not supported", k);
    if (json_object_get(s, "$ref")) return gen_ref(g, s, path, depth, e);
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        static const char *const allow[] = {"enum", "const", "type", NULL};
        const char *other = other_keyword(s, allow);
        if (other) return fail(g, path, "'%s' beside enum/const is not supported", other);
        if (en && (!json_is_array(en) || json_array_size(en) == 0))
            return fail(g, path, "enum must be a non-empty array");
        return cn ? lit_json(g, e, cn, path) : gen_enum(g, en, path, e);
    }
    const char *comb = json_object_get(s, "anyOf")   ? "anyOf"
                       : json_object_get(s, "oneOf") ? "oneOf"
                       : json_object_get(s, "allOf") ? "allOf"
                                                     : NULL;
    if (comb) {
        const json_t *list = json_object_get(s, comb);
        const char *const allow[] = {comb, NULL};
        const char *other = other_keyword(s, allow);
        if (other) return fail(g, path, "'%s' beside %s is not supported", other, comb);
        size_t n = json_array_size(list);
        if (!json_is_array(list) || n == 0)
            return fail(g, path, "%s must be a non-empty array", comb);
        if (!strcmp(comb, "allOf") && n != 1)
            return fail(g, path, "allOf of %zu schemas is not supported (of one is)", n);
        srv_buf_str(e, "( ");
        for (size_t i = 0; i < n; i++) {
            char p2[256], nm[32];
            snprintf(p2, sizeof p2, "%s/%s/%zu", path, comb, i);
            if (!gen(g, json_array_get(list, i), p2, depth + 1, nm)) return false;
            srv_buf_printf(e, "%s%s", i ? " | " : "", nm);
        }
        srv_buf_str(e, " )");
        return true;
    }
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *t = implied_type(s);
        if (t) return gen_type(g, s, t, path, depth, e);
        srv_buf_str(e, use(g, P_VAL));
        return true;
    }
    if (json_is_string(type)) return gen_type(g, s, json_string_value(type), path, depth, e);
    if (!json_is_array(type) || json_array_size(type) == 0)
        return fail(g, path, "type must be a string or a non-empty array of strings");
    srv_buf_str(e, "( ");
    for (size_t i = 0; i < json_array_size(type); i++) {
        const char *t = json_string_value(json_array_get(type, i));
        if (!t) return fail(g, path, "type[%zu] must be a string", i);
        srv_buf_str(e, i ? " | ( " : "( ");
        if (!gen_type(g, s, t, path, depth, e)) return false;
        srv_buf_str(e, " )");
    }
    srv_buf_str(e, " )");
    return true;
}

static bool gen(srv_gram *g, const json_t *s, const char *path, int depth, char name[32]) {
    if (depth > MAX_DEPTH) return fail(g, path, "the schema is nested deeper than %d", MAX_DEPTH);
    if (json_is_true(s)) {
        snprintf(name, 32, "%s", use(g, P_VAL));
        return true;
    }
    if (json_is_false(s)) return fail(g, path, "the schema false accepts nothing");
    if (!json_is_object(s)) return fail(g, path, "a schema must be an object or a boolean");
    srv_buf e = {0};
    fresh(g, name);
    if (!gen_expr(g, s, path, depth, &e)) {
        srv_buf_free(&e);
        return false;
    }
    return define(g, name, &e);
}

bool srv_gram_schema(srv_gram *g, const json_t *schema, const char *name) {
    g->doc = schema;
    g->n_open = 0;
    g->open[g->n_open++] = schema;
    char nm[32];
    if (!gen(g, schema, "#", 0, nm)) return false;
    srv_buf_printf(&g->text, "%s ::= %s\n", name, nm);
    return !g->text.failed || fail(g, "", "out of memory building the grammar");
}

bool srv_gram_literal_rule(srv_gram *g, const char *name, const char *text, size_t len) {
    srv_buf_printf(&g->text, "%s ::= ", name);
    lit(&g->text, text, len);
    srv_buf_str(&g->text, "\n");
    return !g->text.failed || fail(g, "", "out of memory building the grammar");
}

bool srv_gram_raw(srv_gram *g, const char *text) {
    return srv_buf_str(&g->text, text) || fail(g, "", "out of memory building the grammar");
}

void srv_gram_free(srv_gram *g) {
    srv_buf_free(&g->text);
    *g = (srv_gram){0};
}
