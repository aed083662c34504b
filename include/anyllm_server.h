/* anyllm_server.h: `anyllm serve` as a library of its own (libanyllm_server.a): an
 * OpenAI-compatible HTTP server over a loaded model (anyllm.h), on libmicrohttpd and
 * jansson. A program makes one with srv_create, starts it on a model with srv_start,
 * and ends it with srv_drain_begin / srv_drained / srv_destroy. The pieces behind it
 * are in src/server (server.h).
 */
#ifndef AL_ANYLLM_SERVER_H
#define AL_ANYLLM_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "anyllm.h"

/* ---- the server ---------------------------------------------------------------------- */

/* How a server with several models (srv_add_model) loads and unloads them: the program
 * picks backends and threads, the server picks when. load fills *m (and *dm, the same
 * file on another backend for decoding, or NULL) and *handle, which unload gets back;
 * it is called on the thread of the request that needs the model, never twice at once
 * for one file. */
typedef struct srv_loader {
    al_status (*load)(void *ud, const char *path, const al_model **m, const al_model **dm,
                      void **handle);
    void (*unload)(void *ud, void *handle);
    void *ud;
} srv_loader;

typedef struct srv_params {
    const char *host;          /* numeric address or host name to bind; "127.0.0.1"    */
    int port;                  /* TCP port; 0 picks a free one (srv_port tells which)  */
    int n_parallel;            /* sequences decoded together                           */
    int n_ctx;                 /* positions per sequence                               */
    int n_checkpoints;         /* a recurrent state's checkpoints per sequence (0: the
                                  library's default; -1: none): al_context_params     */
    al_kv_type type_k, type_v; /* the KV cache's types (al_context_params)             */
    bool kv_unrotated;         /* quantized caches without the Hadamard rotation       */
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
    srv_loader loader;         /* several models: how they load (srv_add_model)        */
    int models_max;            /* several models: at most this many loaded; 0: any     */
    long long models_memory;   /* several models: their files' bytes loaded at most;
                                  0: as much as the system says is available          */
    int idle_unload_s;         /* several models: unload one idle this long; 0: never  */
    int draft_max;             /* drafts (serve --spec ngram, --model-draft) of at most
                                  this many tokens per sequence and step; 0: none     */
    bool mtp;                  /* with draft_max: the model's next-token-prediction
                                  block drafts (serve --spec mtp; al_draft_mtp)        */
    const al_model *draft_model; /* with draft_max: a model of the model's vocabulary
                                  that drafts (the model given to srv_start only), or
                                  NULL: n-gram drafts; it must outlive the server;
                                  srv_set_draft_model sets it after srv_create         */
} srv_params;

srv_params srv_default_params(void);

typedef struct srv_server srv_server;

/* Binds and listens; the server is loading: /health and /metrics answer (503 for
 * /health), completions get 503 with Retry-After until srv_start. On failure *out is
 * NULL and al_last_error() says why (e.g. the port is taken). */
al_status srv_create(const srv_params *p, srv_server **out);

/* Puts the model behind the server, with n_ctx positions per sequence (the value that
 * replaces p->n_ctx once the model's training context is known), starts the engine and
 * makes the server ready. decode_model is NULL, or the same file on another backend:
 * each prompt is evaluated on the model's context and handed (al_context_handoff) to
 * this one's, which generates. The models must outlive the server. On failure the
 * server stays loading; srv_destroy it. */
al_status srv_start(srv_server *s, const al_model *m, const al_model *decode_model, int n_ctx);

/* Before srv_start: drafts made by dm (p->draft_model), loaded while the server already
 * answers 503. */
void srv_set_draft_model(srv_server *s, const al_model *dm);

/* Several models instead: names a file the server answers for as `name` (a request's
 * "model"), loaded through p->loader on the first request for it and unloaded when
 * idle or when room is needed (models.h). Before srv_start_models; AL_ERR_ARG for a
 * name given twice, AL_ERR_IO for a path that is not a readable file. */
al_status srv_add_model(srv_server *s, const char *name, const char *path);
/* Makes the server ready with the models added, none loaded yet. */
al_status srv_start_models(srv_server *s);

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

#endif /* AL_ANYLLM_SERVER_H */
