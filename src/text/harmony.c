/* harmony.c: the reply parser of OpenAI's Harmony format (gpt-oss): generated text in,
 * pieces by channel out, as it streams (the rules are in anyllm.h, al_harmony).
 *
 * The parser is a three-state machine over the text:
 *   HEADER  the text is held: it names the channel of the body to come, which is not
 *           known before <|message|>. The reply starts here, as the prompt ended with
 *           "<|start|>assistant". Text in a header that no <|start|> or <|channel|>
 *           opened is "loose": the model is not writing the format, and that text is
 *           the answer (final channel) unless <|message|> turns it into a header.
 *   BODY    the text belongs to the channel (and recipient) and is released at once.
 *   DONE    the reply is complete; the rest is ignored.
 * A tail of the input that may be the start of a marker ("<", "<|ret", ...) is kept
 * back until more text decides it. A header's recipient ("to=functions.f") is read when
 * it ends, from its text and the places of the markers in it, which end a name. Every decision depends on the bytes alone, never on
 * where one push ends, so cutting the input differently gives the same text per channel.
 * Spec: github.com/openai/harmony, docs/format.md.
 */
#include <string.h>

#include "anyllm.h"
#include "util.h"

enum {
    HEADER_MAX = 256, /* header bytes (markers left out) held before giving up on it */
    PEND_MAX = 16,    /* longer than the longest marker */
    BOUND_MAX = 8,    /* marker places remembered per header */
};

typedef enum marker {
    M_START, M_END, M_MESSAGE, M_CHANNEL, M_CONSTRAIN, M_RETURN, M_CALL, N_MARKERS,
} marker;

static const char *const k_marker[N_MARKERS] = {
    [M_START] = "<|start|>",     [M_END] = "<|end|>",       [M_MESSAGE] = "<|message|>",
    [M_CHANNEL] = "<|channel|>", [M_CONSTRAIN] = "<|constrain|>",
    [M_RETURN] = "<|return|>",   [M_CALL] = "<|call|>",
};

typedef enum state { S_HEADER, S_BODY, S_DONE } state;

struct al_harmony {
    const al_vocab *vocab; /* for push_token; not owned; may be NULL */
    al_detok *detok;       /* push_token's detokenizer, when there is a vocabulary */
    state st;
    al_channel channel;    /* of the body (S_BODY) */

    /* the header being read (S_HEADER) */
    char hdr[HEADER_MAX];  /* its text, markers left out */
    size_t n_hdr;
    bool opened;           /* a <|start|> or <|channel|> began it: not loose text */
    int chan_at, chan_end; /* the channel name is hdr[chan_at, chan_end); -1: none / open */
    size_t bound[BOUND_MAX]; /* where markers were in hdr: a name ends there */
    int n_bound;

    char recip[HEADER_MAX]; /* the body's recipient (S_BODY), n_recip bytes; 0: none */
    size_t n_recip;

    char pend[PEND_MAX];   /* a possible marker's start, held over to the next push */
    size_t n_pend;

    /* what one call produces: pieces[i].text points into out once the call ends */
    char *out;
    size_t n_out, cap_out;
    al_chat_piece *pieces; /* text and recipient pointers set when the call ends */
    int n_pieces, cap_pieces;
    char *rout;            /* the pieces' recipients, one after the other */
    size_t n_rout, cap_rout;
    char *work;            /* pend + the pushed text, scanned as one */
    size_t cap_work;
    bool failed;           /* out of memory: the parser is unusable */
};

/* ---- output ------------------------------------------------------------------------------- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = al_realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Appends text to the call's output, to the last piece if it has the same channel and
 * recipient. Body text has the body's recipient; text outside a message has none. */
static void emit(al_harmony *h, al_channel ch, bool body, const char *s, size_t n) {
    if (n == 0 || h->failed) return;
    const size_t n_r = body ? h->n_recip : 0;
    size_t cap_pieces = (size_t)h->cap_pieces;
    if (!grow((void **)&h->out, &h->cap_out, h->n_out + n, 1) ||
        !grow((void **)&h->rout, &h->cap_rout, h->n_rout + n_r, 1) ||
        !grow((void **)&h->pieces, &cap_pieces, (size_t)h->n_pieces + 1, sizeof *h->pieces)) {
        h->failed = true;
        return;
    }
    h->cap_pieces = (int)cap_pieces;
    memcpy(h->out + h->n_out, s, n);
    h->n_out += n;
    al_chat_piece *last = h->n_pieces ? &h->pieces[h->n_pieces - 1] : NULL;
    if (last && last->channel == ch && last->recipient_len == n_r &&
        (n_r == 0 || !memcmp(h->rout + h->n_rout - n_r, h->recip, n_r))) {
        last->len += n;
        return;
    }
    if (n_r) memcpy(h->rout + h->n_rout, h->recip, n_r);
    h->n_rout += n_r;
    h->pieces[h->n_pieces++] =
        (al_chat_piece){.channel = ch, .text = NULL, .len = n, .recipient_len = n_r};
}

/* Ends a call: points the pieces into the output (which no longer moves). */
static al_status results(al_harmony *h, const al_chat_piece **pieces, int *n_pieces) {
    if (h->failed) {
        *pieces = NULL;
        *n_pieces = 0;
        return al_error(AL_ERR_NOMEM, "al_harmony: out of memory");
    }
    size_t at = 0, r_at = 0;
    for (int i = 0; i < h->n_pieces; i++) {
        al_chat_piece *p = &h->pieces[i];
        p->text = h->out + at;
        at += p->len;
        p->recipient = p->recipient_len ? h->rout + r_at : NULL;
        r_at += p->recipient_len;
    }
    *pieces = h->pieces;
    *n_pieces = h->n_pieces;
    return AL_OK;
}

/* ---- headers ------------------------------------------------------------------------------ */

static void header_reset(al_harmony *h, bool opened) {
    h->st = S_HEADER;
    h->n_hdr = 0;
    h->opened = opened;
    h->chan_at = h->chan_end = -1;
    h->n_bound = 0;
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool at_bound(const al_harmony *h, size_t i) {
    for (int k = 0; k < h->n_bound; k++)
        if (h->bound[k] == i) return true;
    return false;
}

/* The recipient the header names: the first "to=NAME" at its start, after a blank or
 * after a marker, NAME up to a blank or a marker. Becomes the body's. */
static void header_recipient(al_harmony *h) {
    h->n_recip = 0;
    for (size_t i = 0; i + 3 <= h->n_hdr; i++) {
        if ((i > 0 && !is_blank(h->hdr[i - 1]) && !at_bound(h, i)) || memcmp(h->hdr + i, "to=", 3))
            continue;
        size_t e = i + 3;
        while (e < h->n_hdr && !is_blank(h->hdr[e]) && !at_bound(h, e)) e++;
        h->n_recip = e - (i + 3);
        memcpy(h->recip, h->hdr + i + 3, h->n_recip);
        return;
    }
}

/* The channel the header names: the word after <|channel|>; final when there is none. */
static al_channel header_channel(const al_harmony *h) {
    if (h->chan_at < 0) return AL_CHANNEL_FINAL;
    const char *s = h->hdr + h->chan_at;
    size_t n = (size_t)((h->chan_end >= 0 ? h->chan_end : (int)h->n_hdr) - h->chan_at);
    while (n && *s == ' ') s++, n--;
    const char *space = memchr(s, ' ', n);
    if (space) n = (size_t)(space - s);
    if (n == 5 && !memcmp(s, "final", 5)) return AL_CHANNEL_FINAL;
    if (n == 8 && !memcmp(s, "analysis", 8)) return AL_CHANNEL_ANALYSIS;
    return AL_CHANNEL_COMMENTARY; /* "commentary", or a name Harmony does not define */
}

/* The header ends without <|message|>: loose text is the answer, a real header (a role,
 * a recipient) is dropped. True if loose text was released. */
static bool header_end(al_harmony *h) {
    bool loose = !h->opened && h->n_hdr > 0;
    if (loose) emit(h, AL_CHANNEL_FINAL, false, h->hdr, h->n_hdr);
    header_reset(h, false);
    return loose;
}

/* Text inside a header. Past HEADER_MAX it is no header: loose text is released, and
 * the rest goes on as the body of the channel named so far. */
static void header_text(al_harmony *h, const char *s, size_t n) {
    size_t room = HEADER_MAX - h->n_hdr, k = n < room ? n : room;
    memcpy(h->hdr + h->n_hdr, s, k);
    h->n_hdr += k;
    if (k == n) return;
    al_channel ch = h->opened ? header_channel(h) : AL_CHANNEL_FINAL;
    if (h->opened) header_recipient(h);
    else h->n_recip = 0;
    header_end(h);
    h->st = S_BODY;
    h->channel = ch;
    emit(h, ch, true, s + k, n - k);
}

/* ---- the state machine -------------------------------------------------------------------- */

static void on_text(al_harmony *h, const char *s, size_t n) {
    if (h->st == S_HEADER) header_text(h, s, n);
    else if (h->st == S_BODY) emit(h, h->channel, true, s, n);
}

static void on_marker(al_harmony *h, marker m) {
    if (h->st == S_DONE) return;
    if (m == M_RETURN || m == M_CALL) { /* the reply is over, whatever it was in */
        if (h->st == S_HEADER) header_end(h);
        h->st = S_DONE;
        return;
    }
    if (h->st == S_BODY) {
        if (m == M_END) { /* the message is complete; the final one completes the reply */
            if (h->channel == AL_CHANNEL_FINAL) h->st = S_DONE;
            else header_reset(h, false);
        } else if (m == M_START) {
            header_reset(h, true); /* the body was cut short by the next message */
        } else if (m == M_CHANNEL) {
            header_reset(h, true);
            h->chan_at = 0;
        } /* <|message|>, <|constrain|>: stray in a body, dropped */
        return;
    }
    if ((m == M_CHANNEL || m == M_CONSTRAIN) && h->n_bound < BOUND_MAX)
        h->bound[h->n_bound++] = h->n_hdr;
    switch (m) { /* S_HEADER */
    case M_START:
        header_end(h);
        h->opened = true;
        break;
    case M_CHANNEL:
        h->opened = true;
        h->chan_at = (int)h->n_hdr;
        h->chan_end = -1;
        break;
    case M_CONSTRAIN: /* "<|channel|>commentary<|constrain|>json": the name ends here */
        if (h->chan_at >= 0 && h->chan_end < 0) h->chan_end = (int)h->n_hdr;
        break;
    case M_MESSAGE:
        h->channel = header_channel(h);
        header_recipient(h);
        header_reset(h, false);
        h->st = S_BODY;
        break;
    case M_END: /* no body: loose text ended here is a complete answer */
        if (header_end(h)) h->st = S_DONE;
        break;
    default:
        break;
    }
}

/* Which marker starts s[0..n): *partial when s is shorter than a marker it begins. */
static int match_marker(const char *s, size_t n, bool *partial) {
    *partial = false;
    for (int m = 0; m < N_MARKERS; m++) {
        size_t len = strlen(k_marker[m]);
        if (n >= len && !memcmp(s, k_marker[m], len)) return m;
        if (n < len && !memcmp(s, k_marker[m], n)) *partial = true;
    }
    return -1;
}

/* Scans s[0..n): text and markers in order. Unless at_end, a tail that may begin a
 * marker is kept in pend for the next call. */
static void scan(al_harmony *h, const char *s, size_t n, bool at_end) {
    size_t i = 0;
    while (i < n && h->st != S_DONE) {
        const char *lt = memchr(s + i, '<', n - i);
        size_t p = lt ? (size_t)(lt - s) : n;
        on_text(h, s + i, p - i);
        if (p == n) return;
        bool partial;
        int m = match_marker(s + p, n - p, &partial);
        if (m >= 0) {
            on_marker(h, (marker)m);
            i = p + strlen(k_marker[m]);
        } else if (partial && !at_end) {
            memcpy(h->pend, s + p, n - p); /* shorter than a marker: fits */
            h->n_pend = n - p;
            return;
        } else {
            on_text(h, "<", 1);
            i = p + 1;
        }
    }
}

/* Scans what pend holds back, then the text, as one piece of input. */
static void feed(al_harmony *h, const char *text, size_t len, bool at_end) {
    if (h->failed) return;
    if (h->n_pend == 0) {
        scan(h, text, len, at_end);
        return;
    }
    if (!grow((void **)&h->work, &h->cap_work, h->n_pend + len, 1)) {
        h->failed = true;
        return;
    }
    memcpy(h->work, h->pend, h->n_pend);
    if (len) memcpy(h->work + h->n_pend, text, len);
    size_t n = h->n_pend + len;
    h->n_pend = 0;
    scan(h, h->work, n, at_end);
}

/* Each call of the API starts with no pieces: they are valid until the next call. */
static void begin_call(al_harmony *h) {
    h->n_out = 0;
    h->n_rout = 0;
    h->n_pieces = 0;
}

/* ---- the API ---------------------------------------------------------------------------- */

al_status al_harmony_create(const al_vocab *v, al_harmony **out) {
    if (!out) return al_error(AL_ERR_ARG, "al_harmony_create: NULL argument");
    *out = NULL;
    al_harmony *h = al_calloc(1, sizeof *h);
    if (!h) return al_error(AL_ERR_NOMEM, "al_harmony_create: out of memory");
    h->vocab = v;
    header_reset(h, false);
    if (v) {
        al_status st = al_detok_create(v, &h->detok);
        if (st != AL_OK) {
            al_harmony_destroy(h);
            return st;
        }
    }
    *out = h;
    return AL_OK;
}

void al_harmony_destroy(al_harmony *h) {
    if (!h) return;
    al_detok_destroy(h->detok);
    al_free(h->out);
    al_free(h->pieces);
    al_free(h->rout);
    al_free(h->work);
    al_free(h);
}

al_status al_harmony_push(al_harmony *h, const char *text, size_t len,
                          const al_chat_piece **pieces, int *n_pieces) {
    if (pieces) *pieces = NULL;
    if (n_pieces) *n_pieces = 0;
    if (!h || (!text && len) || !pieces || !n_pieces)
        return al_error(AL_ERR_ARG, "al_harmony_push: NULL argument");
    begin_call(h);
    feed(h, text, len, false);
    return results(h, pieces, n_pieces);
}

/* A control token's text, if it is one of the markers; -1 otherwise. */
static int marker_of(const char *s, int n) {
    for (int m = 0; m < N_MARKERS; m++)
        if ((size_t)n == strlen(k_marker[m]) && !memcmp(s, k_marker[m], (size_t)n)) return m;
    return -1;
}

al_status al_harmony_push_token(al_harmony *h, int32_t id, const al_chat_piece **pieces,
                                int *n_pieces) {
    if (pieces) *pieces = NULL;
    if (n_pieces) *n_pieces = 0;
    if (!h || !pieces || !n_pieces)
        return al_error(AL_ERR_ARG, "al_harmony_push_token: NULL argument");
    if (!h->vocab)
        return al_error(AL_ERR_ARG, "al_harmony_push_token: the parser has no vocabulary");
    if (id < 0 || id >= al_vocab_n_tokens(h->vocab))
        return al_error(AL_ERR_ARG, "al_harmony_push_token: token %d is not in the vocabulary "
                        "of %d", id, al_vocab_n_tokens(h->vocab));
    begin_call(h);
    const char *t;
    size_t n;
    if (al_vocab_is_control(h->vocab, id)) {
        /* a marker's text; other control tokens (BOS, <|endoftext|>) print as nothing */
        char buf[PEND_MAX];
        int k = al_token_to_bytes(h->vocab, id, true, buf, sizeof buf);
        if (k <= (int)sizeof buf && marker_of(buf, k) >= 0) {
            al_detok_flush(h->detok, &t, &n); /* an unfinished character ends here */
            feed(h, t, n, false);
            feed(h, buf, (size_t)k, false);
        }
    } else {
        al_status st = al_detok_push(h->detok, id, &t, &n);
        if (st != AL_OK) return st;
        feed(h, t, n, false);
    }
    return results(h, pieces, n_pieces);
}

al_status al_harmony_finish(al_harmony *h, const al_chat_piece **pieces, int *n_pieces) {
    if (pieces) *pieces = NULL;
    if (n_pieces) *n_pieces = 0;
    if (!h || !pieces || !n_pieces) return al_error(AL_ERR_ARG, "al_harmony_finish: NULL argument");
    begin_call(h);
    const char *t = NULL;
    size_t n = 0;
    if (h->detok) al_detok_flush(h->detok, &t, &n);
    feed(h, t, n, true);
    if (h->st == S_HEADER) header_end(h);
    h->st = S_DONE;
    return results(h, pieces, n_pieces);
}

bool al_harmony_done(const al_harmony *h) { return h && h->st == S_DONE; }
