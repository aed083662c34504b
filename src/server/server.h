/* server.h: `anyllm serve`, an OpenAI-compatible HTTP server over one loaded model.
 *
 * The pieces, each one module:
 *   http.c     libmicrohttpd glue: routes, API key, body limit, timeouts, SSE streams
 *   api.c      the OpenAI request fields (validated) and response objects (jansson)
 *   anthropic.c /v1/messages: Anthropic's requests as chat requests, replies as messages
 *   responses.c /v1/responses: OpenAI's Responses requests as chat requests, replies as
 *              response objects, and the responses kept for previous_response_id
 *   reply.c    identifiers and finish reasons the reply writers share
 *   engine.c   ONE thread owns the model and every context: it admits queued jobs into
 *              free sequence slots and runs one decode step for all active slots at once
 *              (al_eval_multi), which is continuous batching
 *   schema.c   JSON Schema to grammar text, for response_format
 *   tools.c    tools, tool_choice and the conversation's calls and results, as prompt text
 *   toolcall.c tool calls parsed out of a reply as it streams
 *   metrics.c  counters and the time-to-first-token histogram, as Prometheus text
 *   buf.c      the growable byte buffer the others share
 *   chat.html  the chat page served at /, compiled into the binary by the Makefile
 *
 * Threads: one libmicrohttpd thread per connection parses, validates and tokenizes the
 * request (the vocabulary may be shared by threads), then hands a job to the engine and
 * waits on the job's condition variable for text. Only the engine thread calls al_eval.
 * The server's public calls are in include/anyllm_server.h; this header is private to
 * src/server.
 */
#ifndef AL_SERVER_H
#define AL_SERVER_H

#include "anyllm_server.h"

/* ---- a growable byte buffer, always NUL-terminated ------------------------------------- */

typedef struct srv_buf {
    char *s;     /* NULL until the first append */
    size_t len;  /* bytes held, not counting the NUL */
    size_t cap;
    bool failed; /* an allocation failed: the content is cut short */
} srv_buf;

/* Appends n bytes; false (and failed set) when memory runs out. */
bool srv_buf_add(srv_buf *b, const void *p, size_t n);
bool srv_buf_str(srv_buf *b, const char *s);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
bool srv_buf_printf(srv_buf *b, const char *fmt, ...);
/* Appends text with every invalid UTF-8 sequence replaced by U+FFFD, so that what the
 * model produced can always be put into a JSON string. */
bool srv_buf_add_utf8(srv_buf *b, const char *p, size_t n);
void srv_buf_free(srv_buf *b);

/* True if the n bytes are valid UTF-8 (no overlongs, surrogates or values > U+10FFFF). */
bool srv_utf8_valid(const char *p, size_t n);

/* The chat page (src/server/chat.html), generated into the build by the Makefile. */
extern const unsigned char srv_chat_html[];
extern const size_t srv_chat_html_len;

#endif /* AL_SERVER_H */
