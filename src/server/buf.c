/* buf.c: the server's growable byte buffer and UTF-8 checks.
 *
 * Every response body, SSE chunk and generated text passes through an srv_buf. The
 * UTF-8 rules are those of RFC 3629: shortest form only, no UTF-16 surrogates, nothing
 * above U+10FFFF; JSON strings must hold exactly that.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

bool srv_buf_add(srv_buf *b, const void *p, size_t n) {
    if (b->failed) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > ((size_t)1 << 40)) { /* no request gets near this; stop doubling */
                b->failed = true;
                return false;
            }
            cap *= 2;
        }
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return false;
        }
        b->s = s;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
    return true;
}

bool srv_buf_str(srv_buf *b, const char *s) { return srv_buf_add(b, s, strlen(s)); }

bool srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return srv_buf_add(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1); /* rare: a long line, formatted a second time */
    if (!big) return b->failed = true, false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = srv_buf_add(b, big, (size_t)n);
    free(big);
    return ok;
}

void srv_buf_free(srv_buf *b) {
    free(b->s);
    *b = (srv_buf){0};
}

/* Length of the valid UTF-8 character at p (n bytes available), or 0 if invalid. */
static size_t utf8_char(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned min, cp;
    if ((c & 0xe0) == 0xc0) len = 2, min = 0x80, cp = c & 0x1f;
    else if ((c & 0xf0) == 0xe0) len = 3, min = 0x800, cp = c & 0x0f;
    else if ((c & 0xf8) == 0xf0) len = 4, min = 0x10000, cp = c & 0x07;
    else return 0; /* a continuation byte, or 0xf8..0xff */
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

bool srv_utf8_valid(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_char(u + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

bool srv_buf_add_utf8(srv_buf *b, const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    size_t start = 0, i = 0;
    while (i < n) {
        size_t k = utf8_char(u + i, n - i);
        if (k) {
            i += k;
            continue;
        }
        /* flush the valid run, then one replacement character per bad byte */
        if (!srv_buf_add(b, p + start, i - start) || !srv_buf_add(b, "\xef\xbf\xbd", 3))
            return false;
        start = ++i;
    }
    return srv_buf_add(b, p + start, n - start);
}
