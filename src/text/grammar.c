/* grammar.c: grammar text to rules (see grammar.h and the syntax in anyllm.h).
 *
 * The parser is recursive descent over the text. A rule's body runs until the next
 * `name ::=` or the end of the text, so a rule may span lines freely. While parsing,
 * each rule keeps its alternatives as growable element lists; at the end they are laid
 * out in one code[] array, and the grammar is checked: every rule used is defined, a
 * rule named root exists, and no rule can reach itself without consuming a character
 * (left recursion would make the matcher expand forever).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_INTERNAL
#include "text/grammar.h"
#include "text/vocab.h"
#include "util.h"

enum {
    MAX_REPEAT = 10000,    /* x{m,n}: m and n at most this */
    MAX_CODE = 1 << 20,    /* elements in all: bounds the memory of a huge grammar (~60 MB) */
    MAX_NEST = 200,        /* parentheses inside parentheses */
    MAX_LEFT_CHAIN = 2000, /* rules whose first element is the next rule, in a row */
};

typedef struct alt_vec {
    g_elem *e;
    int32_t n, cap;
} alt_vec;

typedef struct p_rule {
    char *name; /* NULL for the rules made from groups and repetitions */
    alt_vec *alts;
    int32_t n_alts, cap_alts;
    int line; /* where it was defined, or first used */
    bool defined;
} p_rule;

typedef struct parser {
    const char *p;
    int line, nest;
    p_rule *rules;
    int32_t n_rules, cap_rules;
    int32_t *names; /* open-addressing hash of named rule ids, -1 empty */
    uint32_t names_mask;
    g_set *sets;
    int32_t n_sets, cap_sets;
    uint32_t *ranges;
    int32_t n_ranges, cap_ranges; /* in uint32 units */
    long long n_code;
    al_status st;
} parser;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static bool fail(parser *ps, const char *fmt, ...) {
    if (ps->st != AL_OK) return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ps->st = al_error(AL_ERR_ARG, "grammar, line %d: %s", ps->line, msg);
    return false;
}

static bool nomem(parser *ps) {
    if (ps->st == AL_OK) ps->st = al_error(AL_ERR_NOMEM, "out of memory compiling a grammar");
    return false;
}

/* Grows *a (elements of size sz) to hold n + 1. */
static bool grow(parser *ps, void **a, int32_t *cap, int32_t n, size_t sz) {
    if (n < *cap) return true;
    int32_t c = *cap ? *cap * 2 : 2; /* most alternatives and rules are short */
    void *b = al_realloc(*a, (size_t)c * sz);
    if (!b) return nomem(ps);
    *a = b;
    *cap = c;
    return true;
}

/* ---- rules and sets ------------------------------------------------------------------- */

static int32_t new_rule(parser *ps, const char *name, size_t len) {
    if (!grow(ps, (void **)&ps->rules, &ps->cap_rules, ps->n_rules, sizeof *ps->rules)) return -1;
    p_rule *r = &ps->rules[ps->n_rules];
    *r = (p_rule){.line = ps->line};
    if (name && !(r->name = al_malloc(len + 1))) return nomem(ps), -1;
    if (name) {
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    return ps->n_rules++;
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static bool names_rehash(parser *ps) {
    uint32_t n = ps->names_mask ? 2 * (ps->names_mask + 1) : 64;
    int32_t *t = al_malloc(n * sizeof *t);
    if (!t) return nomem(ps);
    memset(t, 0xff, n * sizeof *t);
    for (int32_t i = 0; i < ps->n_rules; i++) {
        if (!ps->rules[i].name) continue;
        uint32_t h = name_hash(ps->rules[i].name, strlen(ps->rules[i].name)) & (n - 1);
        while (t[h] >= 0)
            h = (h + 1) & (n - 1);
        t[h] = i;
    }
    al_free(ps->names);
    ps->names = t;
    ps->names_mask = n - 1;
    return true;
}

/* The id of the rule named s[0..n), made (undefined) on first sight. */
static int32_t rule_id(parser *ps, const char *s, size_t n) {
    if (!ps->names || (uint32_t)ps->n_rules * 2 >= ps->names_mask) {
        if (!names_rehash(ps)) return -1;
    }
    uint32_t h = name_hash(s, n) & ps->names_mask;
    for (; ps->names[h] >= 0; h = (h + 1) & ps->names_mask) {
        const char *nm = ps->rules[ps->names[h]].name;
        if (strlen(nm) == n && !memcmp(nm, s, n)) return ps->names[h];
    }
    int32_t id = new_rule(ps, s, n);
    if (id >= 0) ps->names[h] = id;
    return id;
}

static alt_vec *new_alt(parser *ps, int32_t rule) {
    p_rule *r = &ps->rules[rule];
    if (!grow(ps, (void **)&r->alts, &r->cap_alts, r->n_alts, sizeof *r->alts)) return NULL;
    r->alts[r->n_alts] = (alt_vec){0};
    return &r->alts[r->n_alts++];
}

static bool push_elem(parser *ps, alt_vec *a, int32_t op, int32_t arg) {
    if (++ps->n_code > MAX_CODE)
        return fail(ps, "the grammar is too large (more than %d elements)", MAX_CODE);
    if (!grow(ps, (void **)&a->e, &a->cap, a->n, sizeof *a->e)) return false;
    a->e[a->n++] = (g_elem){op, arg};
    return true;
}

static bool push_elems(parser *ps, alt_vec *a, const g_elem *e, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (!push_elem(ps, a, e[i].op, e[i].arg)) return false;
    return true;
}

static bool add_range(parser *ps, uint32_t lo, uint32_t hi) {
    if (!grow(ps, (void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + 1, sizeof *ps->ranges))
        return false;
    ps->ranges[ps->n_ranges++] = lo;
    ps->ranges[ps->n_ranges++] = hi;
    return true;
}

/* A new set whose ranges are the ones added from now on. */
static int32_t begin_set(parser *ps, bool negate) {
    if (!grow(ps, (void **)&ps->sets, &ps->cap_sets, ps->n_sets, sizeof *ps->sets)) return -1;
    ps->sets[ps->n_sets] = (g_set){.negate = negate, .first = ps->n_ranges / 2};
    return ps->n_sets++;
}

static void end_set(parser *ps, int32_t set) {
    ps->sets[set].n = ps->n_ranges / 2 - ps->sets[set].first;
}

/* ---- lexing ----------------------------------------------------------------------------- */

static void skip_space(parser *ps) {
    for (;;) {
        char c = *ps->p;
        if (c == '\n') ps->line++;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            ps->p++;
        else if (c == '#')
            while (*ps->p && *ps->p != '\n')
                ps->p++;
        else
            return;
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static size_t name_len(const char *s) {
    size_t n = 0;
    while (is_name_char(s[n]))
        n++;
    return n;
}

/* Whether a `name ::=` starts here (the end of the rule before it). */
static bool at_rule_start(const char *s) {
    size_t n = name_len(s);
    if (n == 0) return false;
    s += n;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    return !strncmp(s, "::=", 3);
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or a class, escapes decoded; false at a malformed one. */
static bool read_char(parser *ps, uint32_t *out) {
    const unsigned char *s = (const unsigned char *)ps->p;
    if (*s == 0 || *s == '\n') return fail(ps, "unterminated literal or character class");
    if (*s != '\\') {
        size_t n = utf8_valid_len(s, strlen((const char *)s));
        if (n == 0) return fail(ps, "invalid UTF-8 in a literal");
        uint32_t c = n == 1 ? s[0] : n == 2 ? s[0] & 0x1fu : n == 3 ? s[0] & 0x0fu : s[0] & 7u;
        for (size_t i = 1; i < n; i++)
            c = c << 6 | (s[i] & 0x3fu);
        ps->p += n;
        *out = c;
        return true;
    }
    char e = (char)s[1];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t c = 0;
        for (int i = 0; i < digits; i++) {
            int h = hex_val((char)s[2 + i]);
            if (h < 0) return fail(ps, "\\%c needs %d hex digits", e, digits);
            c = c << 4 | (uint32_t)h;
        }
        if (c > 0x10FFFF) return fail(ps, "\\%c%.*s is beyond U+10FFFF", e, digits, s + 2);
        ps->p += 2 + digits;
        *out = c;
        return true;
    }
    static const char from[] = "nrt\\\"[]-/^ ", to[] = "\n\r\t\\\"[]-/^ ";
    const char *k = e ? strchr(from, e) : NULL;
    if (!k) return fail(ps, "unknown escape \\%c", e ? e : '0');
    ps->p += 2;
    *out = (uint8_t)to[k - from];
    return true;
}

/* ---- parsing ---------------------------------------------------------------------------- */

static bool parse_alts(parser *ps, int32_t rule, bool nested);

/* "..." into e[] (one single-character set per character). */
static bool parse_literal(parser *ps, alt_vec *piece) {
    ps->p++;
    while (*ps->p != '"') {
        uint32_t c;
        if (!read_char(ps, &c)) return false;
        int32_t set = begin_set(ps, false);
        if (set < 0 || !add_range(ps, c, c)) return false;
        end_set(ps, set);
        if (!push_elem(ps, piece, G_CHARS, set)) return false;
    }
    ps->p++;
    return true;
}

/* [abc], [a-z0-9], [^"\\] */
static bool parse_class(parser *ps, alt_vec *piece) {
    ps->p++;
    bool negate = *ps->p == '^';
    if (negate) ps->p++;
    int32_t set = begin_set(ps, negate);
    if (set < 0) return false;
    while (*ps->p != ']') {
        uint32_t lo, hi;
        if (!read_char(ps, &lo)) return false;
        hi = lo;
        if (ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            if (!read_char(ps, &hi)) return false;
            if (hi < lo) return fail(ps, "character range U+%04X-U+%04X is reversed", lo, hi);
        }
        if (!add_range(ps, lo, hi)) return false;
    }
    ps->p++;
    end_set(ps, set);
    return push_elem(ps, piece, G_CHARS, set);
}

/* {m}, {m,}, {m,n}: *max -1 for no bound. */
static bool parse_braces(parser *ps, long *min, long *max) {
    char *end;
    ps->p++;
    *min = strtol(ps->p, &end, 10);
    if (end == ps->p || *min < 0 || *min > MAX_REPEAT)
        return fail(ps, "a repetition {m,n} needs 0 <= m <= %d", MAX_REPEAT);
    ps->p = end;
    *max = *min;
    if (*ps->p == ',') {
        ps->p++;
        *max = -1;
        if (*ps->p != '}') {
            *max = strtol(ps->p, &end, 10);
            if (end == ps->p || *max < *min || *max > MAX_REPEAT)
                return fail(ps, "a repetition {%ld,n} needs %ld <= n <= %d", *min, *min,
                            MAX_REPEAT);
            ps->p = end;
        }
    }
    if (*ps->p != '}') return fail(ps, "a repetition {m,n} lacks its '}'");
    ps->p++;
    return true;
}

/* Appends x{min,max} (x one element) to a. */
static bool repeat(parser *ps, alt_vec *a, g_elem x, long min, long max) {
    for (long i = 0; i < min; i++)
        if (!push_elem(ps, a, x.op, x.arg)) return false;
    if (max == min) return true;
    int32_t prev = -1; /* x* is R ::= x R | (); a chain of k optionals is O_k ::= x O_k-1 | () */
    for (long k = 0; k < (max < 0 ? 1 : max - min); k++) {
        int32_t r = new_rule(ps, NULL, 0);
        alt_vec *v = r >= 0 ? new_alt(ps, r) : NULL;
        if (!v || !push_elem(ps, v, x.op, x.arg)) return false;
        if ((max < 0 || prev >= 0) && !push_elem(ps, v, G_RULE, max < 0 ? r : prev)) return false;
        if (!new_alt(ps, r)) return false;
        ps->rules[r].defined = true;
        prev = r;
    }
    return push_elem(ps, a, G_RULE, prev);
}

/* One item and its postfix operator, appended to a. */
static bool parse_item(parser *ps, alt_vec *a) {
    alt_vec piece = {0};
    bool ok;
    char c = *ps->p;
    if (c == '"')
        ok = parse_literal(ps, &piece);
    else if (c == '[')
        ok = parse_class(ps, &piece);
    else if (c == '.') {
        int32_t set = begin_set(ps, true);
        ok = set >= 0 && push_elem(ps, &piece, G_CHARS, set);
        if (ok) end_set(ps, set);
        ps->p++;
    } else if (c == '(') {
        if (++ps->nest > MAX_NEST) return fail(ps, "parentheses nested deeper than %d", MAX_NEST);
        ps->p++;
        int32_t r = new_rule(ps, NULL, 0);
        ok = r >= 0 && parse_alts(ps, r, true) && push_elem(ps, &piece, G_RULE, r);
        if (ok) ps->rules[r].defined = true;
        ps->nest--;
    } else if (is_name_char(c)) {
        size_t n = name_len(ps->p);
        int32_t r = rule_id(ps, ps->p, n);
        ps->p += n;
        ok = r >= 0 && push_elem(ps, &piece, G_RULE, r);
    } else {
        ok = fail(ps, "unexpected '%c'", c);
    }
    char op = ok ? *ps->p : 0;
    if (op != '*' && op != '+' && op != '?' && op != '{') {
        ok = ok && push_elems(ps, a, piece.e, piece.n);
        al_free(piece.e);
        return ok;
    }
    g_elem x = piece.n == 1 ? piece.e[0] : (g_elem){G_RULE, -1};
    if (piece.n != 1) { /* a literal of several characters repeats as a whole */
        int32_t r = new_rule(ps, NULL, 0);
        alt_vec *v = r >= 0 ? new_alt(ps, r) : NULL;
        ok = v && push_elems(ps, v, piece.e, piece.n);
        if (ok) ps->rules[r].defined = true;
        x.arg = r;
    }
    al_free(piece.e);
    long min = op == '+', max = op == '?' ? 1 : -1;
    if (op == '{')
        ok = ok && parse_braces(ps, &min, &max);
    else
        ps->p++;
    return ok && repeat(ps, a, x, min, max);
}

/* Alternatives separated by '|', up to ')' when nested, else up to the next rule. */
static bool parse_alts(parser *ps, int32_t rule, bool nested) {
    for (;;) {
        alt_vec *a = new_alt(ps, rule);
        if (!a) return false;
        int32_t idx = ps->rules[rule].n_alts - 1;
        for (;;) {
            skip_space(ps);
            char c = *ps->p;
            if (c == 0 || c == '|' || c == ')' || (!nested && at_rule_start(ps->p))) break;
            /* items may add rules, which moves the rules and their alternatives */
            alt_vec cur = ps->rules[rule].alts[idx];
            bool ok = parse_item(ps, &cur);
            ps->rules[rule].alts[idx] = cur;
            if (!ok) return false;
        }
        if (*ps->p == '|') {
            ps->p++;
            continue;
        }
        if (*ps->p == ')' && !nested) return fail(ps, "')' without '('");
        if (nested) {
            if (*ps->p != ')') return fail(ps, "'(' without ')'");
            ps->p++;
        }
        return true;
    }
}

static bool parse_text(parser *ps) {
    for (;;) {
        skip_space(ps);
        if (!*ps->p) return true;
        size_t n = name_len(ps->p);
        if (n == 0 || !at_rule_start(ps->p)) return fail(ps, "expected a rule: name ::= ...");
        int32_t r = rule_id(ps, ps->p, n);
        if (r < 0) return false;
        if (ps->rules[r].defined) return fail(ps, "rule '%s' is defined twice", ps->rules[r].name);
        ps->rules[r].defined = true;
        ps->rules[r].line = ps->line;
        ps->p += n;
        skip_space(ps);
        ps->p += 3; /* ::= */
        if (!parse_alts(ps, r, false)) return false;
    }
}

/* ---- checks and layout ------------------------------------------------------------------- */

/* Rules that can match the empty text, to a fixed point. */
static bool *nullable_rules(parser *ps) {
    bool *nul = al_calloc((size_t)ps->n_rules + 1, sizeof *nul);
    if (!nul) return nomem(ps), NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < ps->n_rules; r++) {
            for (int32_t a = 0; !nul[r] && a < ps->rules[r].n_alts; a++) {
                const alt_vec *v = &ps->rules[r].alts[a];
                int32_t i = 0;
                while (i < v->n && v->e[i].op == G_RULE && nul[v->e[i].arg])
                    i++;
                if (i == v->n) nul[r] = changed = true;
            }
        }
    }
    return nul;
}

/* Depth-first over "r can start with s without consuming"; color 1 = on the path. The
 * depth is bounded: a chain of rules each starting with the next would otherwise take
 * the thread's stack. */
static bool left_rec(parser *ps, const bool *nul, uint8_t *color, int32_t r, int depth) {
    if (depth > MAX_LEFT_CHAIN)
        return fail(ps, "rules start with rules more than %d deep", MAX_LEFT_CHAIN);
    color[r] = 1;
    for (int32_t a = 0; a < ps->rules[r].n_alts; a++) {
        const alt_vec *v = &ps->rules[r].alts[a];
        for (int32_t i = 0; i < v->n && v->e[i].op == G_RULE; i++) {
            int32_t s = v->e[i].arg;
            if (color[s] == 1) {
                const char *nm = ps->rules[s].name;
                return fail(ps,
                            "rule '%s' is left-recursive (it can reach itself without "
                            "matching a character)",
                            nm ? nm : "(a group or repetition)");
            }
            if (color[s] == 0 && !left_rec(ps, nul, color, s, depth + 1)) return false;
            if (!nul[s]) break;
        }
    }
    color[r] = 2;
    return true;
}

static bool check(parser *ps) {
    for (int32_t r = 0; r < ps->n_rules; r++)
        if (!ps->rules[r].defined) {
            ps->line = ps->rules[r].line;
            return fail(ps, "rule '%s' is used but not defined", ps->rules[r].name);
        }
    bool *nul = nullable_rules(ps);
    uint8_t *color = al_calloc((size_t)ps->n_rules + 1, 1);
    bool ok = nul && color;
    if (!ok) nomem(ps);
    for (int32_t r = 0; ok && r < ps->n_rules; r++)
        if (color[r] == 0) ok = left_rec(ps, nul, color, r, 0);
    al_free(nul);
    al_free(color);
    return ok;
}

static al_status layout(parser *ps, g_rules *out) {
    int32_t n_alts = 0, n_code = 0;
    for (int32_t r = 0; r < ps->n_rules; r++) {
        n_alts += ps->rules[r].n_alts;
        for (int32_t a = 0; a < ps->rules[r].n_alts; a++)
            n_code += ps->rules[r].alts[a].n + 1;
    }
    out->code = al_malloc((size_t)n_code * sizeof *out->code);
    out->alt = al_malloc((size_t)(n_alts ? n_alts : 1) * sizeof *out->alt);
    out->rule_alt = al_malloc((size_t)(ps->n_rules + 1) * sizeof *out->rule_alt);
    if (!out->code || !out->alt || !out->rule_alt) return nomem(ps), ps->st;
    int32_t k = 0, c = 0;
    for (int32_t r = 0; r < ps->n_rules; r++) {
        out->rule_alt[r] = k;
        for (int32_t a = 0; a < ps->rules[r].n_alts; a++) {
            const alt_vec *v = &ps->rules[r].alts[a];
            out->alt[k++] = c;
            if (v->n) memcpy(out->code + c, v->e, (size_t)v->n * sizeof *v->e);
            c += v->n;
            out->code[c++] = (g_elem){G_END, 0};
        }
    }
    out->rule_alt[ps->n_rules] = k;
    out->n_code = n_code;
    out->n_rules = ps->n_rules;
    out->sets = ps->sets;
    out->n_sets = ps->n_sets;
    out->ranges = ps->ranges;
    ps->sets = NULL;
    ps->ranges = NULL;
    return AL_OK;
}

al_status g_compile(const char *text, g_rules *out) {
    *out = (g_rules){0};
    if (!text) return al_error(AL_ERR_ARG, "grammar: the text is NULL");
    parser ps = {.p = text, .line = 1, .st = AL_OK};
    if (parse_text(&ps) && check(&ps)) {
        int32_t root = -1;
        for (int32_t r = 0; r < ps.n_rules && root < 0; r++)
            if (ps.rules[r].name && !strcmp(ps.rules[r].name, "root")) root = r;
        if (root < 0)
            fail(&ps, "no rule named root");
        else if (layout(&ps, out) == AL_OK)
            out->root = root;
    }
    for (int32_t r = 0; r < ps.n_rules; r++) {
        for (int32_t a = 0; a < ps.rules[r].n_alts; a++)
            al_free(ps.rules[r].alts[a].e);
        al_free(ps.rules[r].alts);
        al_free(ps.rules[r].name);
    }
    al_free(ps.rules);
    al_free(ps.names);
    al_free(ps.sets);
    al_free(ps.ranges);
    if (ps.st != AL_OK) g_rules_free(out);
    return ps.st;
}

void g_rules_free(g_rules *r) {
    if (!r) return;
    al_free(r->code);
    al_free(r->alt);
    al_free(r->rule_alt);
    al_free(r->sets);
    al_free(r->ranges);
    *r = (g_rules){0};
}
