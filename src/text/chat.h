/* chat.h: what the chat renderers share (chat.c, and the formats with files of their own:
 * chat_gemma4.c, chat_glm.c). Private to src/text.
 *
 * A renderer writes into a strbuf: the template's own text with sb_append (its markers
 * may become control tokens), the caller's text with sb_content (names, descriptions,
 * arguments, results: always plain text, however it is spelled). The conversation's JSON
 * (tools, calls) is parsed and checked once, before any renderer runs (chat_ctx).
 */
#ifndef AL_TEXT_CHAT_H
#define AL_TEXT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "anyllm.h"
#include "text/json.h"
#include "text/tokenizer.h"

/* ---- a growable string that knows where message text went ---------------------------- */

typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool failed;     /* out of memory: further appends are ignored */
    tok_span *spans; /* where message content was written, in order */
    int n_spans, cap_spans;
} strbuf;

void sb_append_n(strbuf *b, const char *s, size_t n); /* template text */
void sb_append(strbuf *b, const char *s);
void sb_content_n(strbuf *b, const char *s, size_t n); /* message text */
void sb_content(strbuf *b, const char *s);
void sb_cat(strbuf *b, ...); /* template text: the NULL-terminated list of strings */

/* json_write's output (ctx a strbuf) as message text, or as template text. */
void sb_put_content(void *b, const char *s, size_t n);
void sb_put_plain(void *b, const char *s, size_t n);

/* ---- the conversation's JSON ----------------------------------------------------------- */

/* One call of an assistant turn, checked. */
typedef struct chat_call {
    const char *name;     /* decoded, NUL-terminated */
    const json_val *args; /* an object */
    const char *id;       /* as given, or NULL */
    char mistral_id[10];  /* 9 letters or digits */
} chat_call;

/* What the turns' JSON says, parsed once before rendering. */
typedef struct chat_ctx {
    const json_val *tools; /* a non-empty array, or NULL */
    chat_call **calls;     /* per turn: its calls (n_calls[i]), or NULL */
    int *n_calls;
    json_doc **docs; /* every document the values above live in */
    int n_docs, cap_docs;
} chat_ctx;

/* ---- the formats in files of their own -------------------------------------------------- */

/* Gemma 4 (google-gemma-4-31B-it.jinja): turns m[0, n), contents never NULL. */
void chat_render_gemma4(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, bool gen);

/* GLM-4.5/4.6 (glm47 false) and GLM-4.7 (true): GLM-4.6.jinja, GLM-4.7-Flash.jinja. */
void chat_render_glm(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, bool gen,
                     bool glm47);

#endif /* AL_TEXT_CHAT_H */
