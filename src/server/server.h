/* server.h: `anyllm serve`, an OpenAI-compatible HTTP server over one loaded model.
 *
 * The pieces, each one module:
 *   http.c     libmicrohttpd glue: routes, API key, body limit, timeouts, SSE streams
 *   api.c      the OpenAI request fields (validated) and response objects (jansson)
 *   engine.c   ONE thread owns the model and every context: it admits queued jobs into
 *              free sequence slots and runs one decode step for all active slots at once
 *              (al_eval_multi), which is continuous batching
 *   metrics.c  counters and the time-to-first-token histogram, as Prometheus text
 *   buf.c      the growable byte buffer the others share
 *   chat.html  the chat page served at /, compiled into the binary by the Makefile
 *
 * Threads: one libmicrohttpd thread per connection parses, validates and tokenizes the
 * request (the vocabulary may be shared by threads), then hands a job to the engine and
 * waits on the job's condition variable for text. Only the engine thread calls al_eval.
 * This header is private to src/server and tools/cmd_serve.c; it is not the library API.
 */
#ifndef AL_SERVER_H
#define AL_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "anyllm.h"

/* ---- the server ---------------------------------------------------------------------- */

typedef struct srv_params {
    const char *host;          /* numeric address or host name to bind; "127.0.0.1"    */
    int port;                  /* TCP port; 0 picks a free one (srv_port tells which)  */
    int n_parallel;            /* sequences decoded together                           */
    int n_ctx;                 /* positions per sequence                               */
    int n_checkpoints;         /* a recurrent state's checkpoints per sequence (0: the
                                  library's default; -1: none): al_context_params     */
    int n_queue;               /* requests that may wait for a free sequence           */
    int timeout_s;             /* idle time before a connection is dropped             */
    int head_timeout_s;        /* a request's head and body must arrive within this,
                                  however steadily the bytes trickle in               */
    int max_conns_per_ip;      /* connections one client address may hold; 0: no cap  */
    const char *const *allowed_hosts; /* Host names accepted besides loopback, IP
                                  literals and --host; "*" accepts any (see http.c)    */
    int n_allowed_hosts;
    size_t max_body_bytes;     /* larger request bodies get 413                        */
    int max_tokens_default;    /* when a request gives no max_tokens (capped by ctx)   */
    const char *api_key;       /* NULL: no key; else every route but /health needs it  */
    const char *model_name;    /* what /v1/models lists and responses carry            */
    const char *chat_template; /* NULL: recognise the model's own                      */
    const char *replica_id;    /* X-Replica on every answer; NULL: HOSTNAME:PORT       */
    int prefix_hash_tokens;    /* K: X-Prefix-Hash hashes a prompt's first K tokens;
                                  0: no header                                        */
    bool verbose;              /* one stderr line per request, libmicrohttpd's errors  */
    const al_model *decode_model; /* set by srv_start: NULL, or the same file on another
                                  backend: each prompt is evaluated on the model's
                                  context and handed (al_context_handoff) to this
                                  one's, which generates                              */
} srv_params;

srv_params srv_default_params(void);

typedef struct srv_server srv_server;

/* Binds and listens; the server is loading: /health and /metrics answer (503 for
 * /health), completions get 503 with Retry-After until srv_start. On failure *out is
 * NULL and al_last_error() says why (e.g. the port is taken). */
al_status srv_create(const srv_params *p, srv_server **out);

/* Puts the model behind the server, with n_ctx positions per sequence (the value that
 * replaces p->n_ctx once the model's training context is known), starts the engine and
 * makes the server ready. The model must outlive the server. On failure the server
 * stays loading; srv_destroy it. */
al_status srv_start(srv_server *s, const al_model *m, const al_model *decode_model, int n_ctx);

/* The TCP port the server listens on (useful with port 0). */
int srv_port(const srv_server *s);

/* Starts a drain: new completions get 503 with Retry-After and /health 503, while the
 * requests already accepted, queued or running, go on to their end. */
void srv_drain_begin(srv_server *s);

/* True when no request is in flight: every accepted one has been answered in full. */
bool srv_drained(srv_server *s);

/* Stops accepting, ends every request still in flight (each client still gets a
 * complete answer: a 503 error object, or a stream's error event and [DONE]), waits a
 * bounded time for those answers to be written, joins the threads, frees everything.
 * NULL is a no-op. */
void srv_destroy(srv_server *s);

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
