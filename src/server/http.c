/* http.c: the HTTP side of `anyllm serve`, on libmicrohttpd with one thread per
 * connection.
 *
 * A request goes through on_request up to three times, as libmicrohttpd calls it:
 *   1. headers in: Host (400/403), API key (401), route and method (404/405, only after
 *      the key so that a caller without it learns nothing), Content-Type (415),
 *      Content-Length (413, answered once the body is read); GET routes are answered here;
 *   2. body pieces: collected up to max_body_bytes, then counted and dropped;
 *   3. body complete: parsed and validated (api.c), queued in the engine (429 when
 *      full, 503 unless ready), then answered: a stream gets a callback response once
 *      its first text is there (before that a failure is still an HTTP error, which a
 *      balancer may retry elsewhere), a plain request waits here for the end of its job.
 * While a connection's thread waits for the engine it checks, every POLL_MS, whether the
 * client's connection has failed (reset), and if so cancels the job, so the sequence is
 * freed within one decode step. A client that only shut down its sending side
 * (half-close) still reads: it gets its answer.
 * libmicrohttpd's request-completed callback also cancels a job whose request ended for
 * any other reason, and drops the connection's reference to it.
 *
 * Slow clients: libmicrohttpd's idle timeout (timeout_s) restarts with every byte, so a
 * client sending a byte a second would hold its connection forever. Every connection
 * therefore has a deadline for the whole head and body of a request (head_timeout_s);
 * a reaper thread answers 408 to a connection past it and shuts its socket down. One
 * client address may hold at most max_conns_per_ip connections, so a single client
 * cannot take all of them.
 *
 * States (srv_state): the port is bound while the model loads (LOADING), so that a
 * balancer or a readiness probe gets an answer: /health 503, completions 503 with
 * Retry-After. srv_start makes it READY. srv_drain_begin (SIGTERM) makes it DRAINING:
 * completions get 503 again while the requests already accepted run to their end, and
 * answers carry Connection: close so that a balancer's kept-alive connections leave.
 * Every answer names the replica (X-Replica) and, for a prompt of at least
 * prefix_hash_tokens tokens, the hash of that prefix (X-Prefix-Hash), for balancers.
 *
 * Browsers: a web page may send requests to the server, so the Host header must be one
 * of the server's own names (DNS rebinding sends the attacker's name) and a POST must be
 * Content-Type: application/json, which a page on another origin can only send after a
 * CORS preflight that this server never allows (no CORS headers).
 */
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <microhttpd.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/api.h"
#include "server/models.h"
#include "server/responses.h"
#include "server/toolcall.h"
#include "util.h"

enum {
    POLL_MS = 50,          /* how often a waiting thread checks its client's socket    */
    REAP_MS = 100,         /* how often the reaper looks for connections past deadline */
    DISCARD_FACTOR = 4,    /* an oversized body is read (and dropped) up to this many
                              times the limit before the 413, so that a client writing
                              its whole body before reading sees the 413, not a reset  */
    DRAIN_S = 5,           /* at a stop, the most seconds to wait for answers written  */
    STREAM_BLOCK = 16384,  /* bytes handed to libmicrohttpd per stream callback, at most */
};

/* One TCP connection, from libmicrohttpd's connection-started to -closed notice; its
 * fields are under the server's lock (the reaper reads them). */
typedef struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    double deadline;    /* al_time_s() by which the current head and body must be in;
                           0 while a request is being answered                        */
    bool timed_out;     /* the reaper answered 408 and shut the socket down           */
    bool has_request;   /* a request object exists (its completion counts it)         */
} http_conn;

struct srv_server {
    srv_params p;
    char *model_name;   /* the first model's: /metrics' anyllm_info label */
    char *api_key;
    srv_store *store;   /* /v1/responses kept for previous_response_id */
    srv_metrics metrics;
    srv_models models;
    struct MHD_Daemon *mhd;
    int listen_fd;      /* handed back by MHD_quiesce_daemon at a stop; -1 before  */
    pthread_mutex_t lock;
    pthread_cond_t changed;   /* n_inflight fell, or the reaper is to stop          */
    http_conn *conns;
    int n_inflight;     /* requests past their body whose answer is not yet written */
    bool reaper_running, reaper_stop;
    pthread_t reaper;
    int port;
    long long started; /* Unix seconds, what /v1/models says the model was "created" */
    int state;          /* srv_state; written with release, read with acquire, so a
                           thread that sees READY also sees the engine and the api */
    char replica[256];  /* X-Replica */
};

/* One HTTP request, from its headers to libmicrohttpd's completion callback. */
typedef struct http_req {
    srv_server *srv;
    srv_endpoint ep;
    bool headers_seen;  /* on_request has run for it (else libmicrohttpd refused it) */
    bool inflight;      /* counted in n_inflight                                    */
    int status;         /* what was answered, for the metrics; 0 = nothing yet  */
    bool answered;
    srv_buf body;
    size_t n_body;      /* bytes received, kept or not                          */
    bool too_large;
    double t_start;
    srv_job *job;       /* the connection's reference, dropped at completion    */
    srv_model *model;   /* the model answering, held until completion, or NULL  */
    char prefix_hash[24]; /* X-Prefix-Hash of the prompt, or ""                  */
} http_req;

/* The state of one SSE response, owned by the libmicrohttpd response. */
typedef struct stream {
    srv_server *srv;
    srv_model *model;   /* held: its engine runs the job */
    srv_job *job;       /* its own reference */
    srv_resp resp;
    int fd;             /* the client's socket, to notice a hang-up */
    srv_buf out;        /* formatted events not yet handed over */
    size_t out_pos;
    size_t text_from;   /* bytes of the job's text already sent */
    size_t reasoning_from; /* bytes of the job's reasoning already sent */
    bool started, ended;
    srv_buf text, reasoning;
    json_t *tools;      /* its own reference, for tc */
    srv_tc *tc;         /* the reply's tool calls (toolcall.h), or NULL */
    json_t *history;    /* a response to keep (its own reference), or NULL */
    char prev_id[64];
    srv_calls calls;    /* how the reply writes calls, for tc */
} stream;

srv_params srv_default_params(void) {
    return (srv_params){.host = "127.0.0.1", .port = 8080, .n_parallel = 4, .n_ctx = 1024,
                        .n_queue = 2 * 4 + 32, .timeout_s = 10, .head_timeout_s = 30,
                        .max_conns_per_ip = 64, .max_body_bytes = 1 << 20,
                        .max_tokens_default = 512, .prefix_hash_tokens = 64};
}

int srv_port(const srv_server *s) { return s->port; }

static srv_state state_of(srv_server *s) {
    return (srv_state)__atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
}

/* ---- connections: deadlines and the reaper ----------------------------------------------- */

static int client_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static http_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void conn_set_deadline(srv_server *s, struct MHD_Connection *c, double deadline) {
    http_conn *k = conn_of(c);
    if (!k) return;
    pthread_mutex_lock(&s->lock);
    k->deadline = deadline;
    pthread_mutex_unlock(&s->lock);
}

/* The status libmicrohttpd queued on a connection itself (431, 414, 400...), or 0. */
static int mhd_status(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    return ci ? (int)ci->http_status : 0;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_server *s = cls;
    http_conn *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        if (!(k = calloc(1, sizeof *k))) return; /* out of memory: only the idle timeout */
        k->fd = client_fd(c);
        k->deadline = al_time_s() + s->p.head_timeout_s;
        pthread_mutex_lock(&s->lock);
        k->next = s->conns;
        if (s->conns) s->conns->prev = k;
        s->conns = k;
        pthread_mutex_unlock(&s->lock);
        *socket_context = k;
        return;
    }
    if (!k) return;
    /* libmicrohttpd notifies this before it closes the socket, so once k is off the list
     * the reaper can no longer touch a descriptor number that may be reused */
    pthread_mutex_lock(&s->lock);
    if (k->prev) k->prev->next = k->next;
    else s->conns = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&s->lock);
    /* a head cut off before its request line was whole has no request object to
     * count it */
    if (k->timed_out && !k->has_request) srv_metrics_request(&s->metrics, SRV_EP_OTHER, 408);
    free(k);
    *socket_context = NULL;
}

/* Waits on s->changed (s->lock held) for REAP_MS at most. */
static void wait_changed(srv_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += REAP_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->changed, &s->lock, &ts);
}

/* Answers 408 to every connection past its deadline and shuts its socket down, which
 * makes its thread see the end of the stream and close it. */
static void *reaper_main(void *arg) {
    srv_server *s = arg;
    char msg[512];
    const char *body = "{\"error\":{\"message\":\"the request's head and body must arrive "
                       "within the server's --head-timeout\",\"type\":\"invalid_request_error\","
                       "\"param\":null,\"code\":\"request_timeout\"}}";
    int n = snprintf(msg, sizeof msg, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    pthread_mutex_lock(&s->lock);
    while (!s->reaper_stop) {
        double now = al_time_s();
        for (http_conn *k = s->conns; k; k = k->next) {
            if (k->timed_out || k->deadline == 0 || now < k->deadline || k->fd < 0) continue;
            k->timed_out = true;
            /* libmicrohttpd writes nothing until a request's head and body are in, so
             * these bytes cannot mix with its own */
            if (send(k->fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {}
            shutdown(k->fd, SHUT_RDWR);
        }
        /* models idle past --idle-unload go; without the lock, as a connection thread
         * ending a request may need it meanwhile */
        pthread_mutex_unlock(&s->lock);
        srv_models_reap(&s->models);
        pthread_mutex_lock(&s->lock);
        if (!s->reaper_stop) wait_changed(s);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* The request's answer is decided: no deadline while it is written, and a stop waits
 * for it. */
static void request_answering(srv_server *s, struct MHD_Connection *c, http_req *r) {
    conn_set_deadline(s, c, 0);
    if (r->inflight) return;
    r->inflight = true;
    pthread_mutex_lock(&s->lock);
    s->n_inflight++;
    pthread_mutex_unlock(&s->lock);
}

/* ---- answers ---------------------------------------------------------------------------- */

/* The headers of every answer: which replica answered (a balancer's logs and tests
 * tell replicas apart by it), the prompt's prefix hash for balancers that hash on it,
 * and while draining Connection: close, so that a balancer's kept-alive connections
 * move to other replicas. */
static void common_headers(struct MHD_Response *resp, http_req *r) {
    MHD_add_response_header(resp, "X-Replica", r->srv->replica);
    if (r->prefix_hash[0]) MHD_add_response_header(resp, "X-Prefix-Hash", r->prefix_hash);
    if (state_of(r->srv) == SRV_STATE_DRAINING)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

static enum MHD_Result answer(struct MHD_Connection *c, http_req *r, int status, const char *type,
                              const void *body, size_t len, enum MHD_ResponseMemoryMode mode,
                              const char *hdr, const char *hdr_value) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hdr) MHD_add_response_header(resp, hdr, hdr_value);
    common_headers(resp, r);
    enum MHD_Result q = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->answered = true;
    return q;
}

static enum MHD_Result answer_json(struct MHD_Connection *c, http_req *r, int status,
                                   const srv_buf *b) {
    if (b->failed) return MHD_NO;
    return answer(c, r, status, "application/json", b->s, b->len, MHD_RESPMEM_MUST_COPY, NULL,
                  NULL);
}

static enum MHD_Result answer_error(struct MHD_Connection *c, http_req *r, const srv_error *err) {
    srv_buf b = {0};
    srv_api_error_body_for(r->ep == SRV_EP_MESSAGES ? SRV_KIND_MESSAGES : SRV_KIND_CHAT, err, &b);
    const char *hdr = NULL, *val = NULL;
    if (err->status == 401) hdr = MHD_HTTP_HEADER_WWW_AUTHENTICATE, val = "Bearer";
    if (err->status == 405)
        hdr = MHD_HTTP_HEADER_ALLOW, val = r->ep <= SRV_EP_RESPONSES ? "POST" : "GET, HEAD";
    if (err->status == 429 || err->status == 503) hdr = MHD_HTTP_HEADER_RETRY_AFTER, val = "1";
    enum MHD_Result q = b.failed ? MHD_NO
                                 : answer(c, r, err->status, "application/json", b.s, b.len,
                                          MHD_RESPMEM_MUST_COPY, hdr, val);
    srv_buf_free(&b);
    return q;
}

/* ---- waiting for the engine --------------------------------------------------------------- */

/* True if the client's connection has failed: reset, or an error pending. A peer that
 * only shut down its sending side (recv gives 0, POLLRDHUP) still reads, so it is not
 * gone; a peer that closed entirely answers the next write with a reset, which a
 * stream's next text then shows. Only the connection's own thread calls this, so the
 * socket cannot be closed under it. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 0) <= 0) return false;
    if (pf.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static void keep_response(srv_server *s, srv_engine *e, srv_job *job, json_t *history,
                          json_t *tools, srv_calls how, const char *id);

/* Events of the tool-call parser as chunks: text as content deltas, calls as tool_calls
 * deltas. */
static bool emit_tc_events(srv_resp *resp, const srv_tc_event *ev, int n, srv_buf *out) {
    for (int i = 0; i < n; i++) {
        if (ev[i].kind == SRV_TC_TEXT) {
            srv_api_chunk_text(resp, ev[i].text, ev[i].len, NULL, 0, out);
        } else {
            srv_call call = {ev[i].name, ev[i].arguments};
            srv_api_chunk_call(resp, &call, out);
        }
    }
    return !out->failed;
}

/* The new text of a reply parsed for tool calls (and, at its end, what was held). */
static bool stream_calls(stream *st, bool end) {
    const srv_tc_event *ev;
    int n;
    if (!srv_tc_push(st->tc, st->text.s ? st->text.s : "", st->text.len, &ev, &n) ||
        !emit_tc_events(&st->resp, ev, n, &st->out))
        return false;
    return !end || (srv_tc_finish(st->tc, &ev, &n) && emit_tc_events(&st->resp, ev, n, &st->out));
}

/* libmicrohttpd asks for the next bytes of a stream: waits for text or the end of the
 * job, formats them as events, and hands them over; a hang-up cancels the job. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream *st = cls;
    srv_engine *e = st->model->engine;
    while (st->out_pos == st->out.len) {
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        st->out.len = st->out_pos = 0;
        if (!st->started) {
            st->started = true;
            srv_api_chunk_start(&st->resp, &st->out);
            continue;
        }
        srv_job_state js;
        st->text.len = st->reasoning.len = 0;
        if (!srv_job_poll(e, st->job, st->text_from, st->reasoning_from, POLL_MS, &st->text,
                          &st->reasoning, &js)) {
            if (!client_gone(st->fd)) continue;
            srv_job_cancel(e, st->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        bool ok = true;
        if (st->tc) ok = stream_calls(st, js.finish != SRV_FINISH_NONE);
        else if (st->text.len || st->reasoning.len)
            srv_api_chunk_text(&st->resp, st->text.s, st->text.len, st->reasoning.s,
                               st->reasoning.len, &st->out);
        st->text_from = js.text_len;
        st->reasoning_from = js.reasoning_len;
        if (js.finish != SRV_FINISH_NONE) {
            srv_api_chunk_end(&st->resp, &js, &st->out);
            st->ended = true;
            if (st->history && srv_finish_reason(js.finish))
                keep_response(st->srv, e, st->job, st->history, st->tools, st->calls,
                              st->resp.id);
        }
        if (!ok || st->out.failed || st->text.failed || st->reasoning.failed) {
            srv_job_cancel(e, st->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = st->out.len - st->out_pos;
    if (n > max) n = max;
    memcpy(buf, st->out.s + st->out_pos, n);
    st->out_pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    srv_job_release(st->model->engine, st->job);
    srv_models_release(&st->srv->models, st->model);
    srv_buf_free(&st->out);
    srv_buf_free(&st->text);
    srv_buf_free(&st->reasoning);
    srv_tc_destroy(st->tc);
    json_decref(st->tools);
    json_decref(st->history);
    srv_responses_free(&st->resp);
    free(st);
}

static enum MHD_Result answer_stream(srv_server *s, struct MHD_Connection *c, http_req *r,
                                     const srv_request *req) {
    stream *st = calloc(1, sizeof *st);
    if (!st) return MHD_NO;
    st->srv = s;
    st->model = r->model;
    srv_models_hold(&s->models, st->model);
    st->job = req->job;
    srv_job_ref(st->model->engine, st->job); /* the response's own, dropped by stream_free */
    st->fd = client_fd(c);
    srv_resp_init(&st->resp, req->kind, st->model->name, req->include_usage);
    st->resp.n_prompt = req->job->n_prompt;
    snprintf(st->prev_id, sizeof st->prev_id, "%s", req->prev_id);
    st->resp.prev_id = st->prev_id[0] ? st->prev_id : NULL;
    st->resp.store = req->history != NULL;
    st->history = json_incref(req->history);
    st->calls = req->calls;
    if (req->tools &&
        !(st->tools = json_incref(req->tools), st->tc = srv_tc_create_for(st->tools, st->calls))) {
        stream_free(st);
        return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return MHD_NO;
    }
    /* libmicrohttpd counts the time our reader waits (in the queue, or for a slow step)
     * as idleness; the hang-up check above replaces the timeout until the request ends */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    common_headers(resp, r);
    enum MHD_Result q = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp); /* frees st (stream_free) if it was not queued */
    r->status = 200;
    r->answered = true;
    return q;
}

/* A job that ended without an answer: 503 when the server stopped it (a balancer tries
 * another replica), else 500. */
static enum MHD_Result answer_failed(struct MHD_Connection *c, http_req *r,
                                     const srv_job_state *js) {
    srv_error err;
    bool stopping = !strcmp(js->error, SRV_SHUTDOWN_MESSAGE);
    srv_fail(&err, stopping ? 503 : 500, NULL, stopping ? "shutting_down" : NULL,
             "generation failed: %s", js->error[0] ? js->error : "cancelled");
    return answer_error(c, r, &err);
}

/* Waits until the job has text beyond `from` (SIZE_MAX: only its end counts) or has
 * ended; false (the job cancelled) when the client went away first. */
static bool wait_job(srv_engine *e, struct MHD_Connection *c, srv_job *j, size_t from,
                     srv_job_state *js) {
    int fd = client_fd(c);
    while (!srv_job_poll(e, j, from, from, POLL_MS, NULL, NULL, js))
        if (client_gone(fd)) {
            srv_job_cancel(e, j);
            return false;
        }
    return true;
}

static void free_calls(srv_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free((char *)calls[i].name);
        free((char *)calls[i].arguments);
    }
    free(calls);
}

/* A whole reply through the tool-call parser: its text into content, its calls into
 * *calls (names and arguments copied: free_calls). */
static bool tool_calls(srv_tc *tc, const srv_buf *text, srv_buf *content, srv_call **calls,
                       int *n_calls) {
    const srv_tc_event *ev[2];
    int n[2];
    if (!srv_tc_push(tc, text->s ? text->s : "", text->len, &ev[0], &n[0])) return false;
    /* the push's events live until the next call: copy them out first */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n[pass]; i++) {
            const srv_tc_event *x = &ev[pass][i];
            if (x->kind == SRV_TC_TEXT) {
                srv_buf_add(content, x->text, x->len);
                continue;
            }
            srv_call *grown = realloc(*calls, (size_t)(*n_calls + 1) * sizeof **calls);
            if (!grown) return false;
            *calls = grown;
            srv_call cp = {strdup(x->name), strdup(x->arguments)};
            (*calls)[(*n_calls)++] = cp;
            if (!cp.name || !cp.arguments) return false;
        }
        if (pass == 0 && !srv_tc_finish(tc, &ev[1], &n[1])) return false;
    }
    return !content->failed;
}

/* A streamed response, finished: its conversation kept for previous_response_id (the
 * whole reply read again from the job and parsed once more for calls). */
static void keep_response(srv_server *s, srv_engine *e, srv_job *job, json_t *history,
                          json_t *tools, srv_calls how, const char *id) {
    srv_buf text = {0}, content = {0};
    srv_job_state js;
    srv_job_poll(e, job, 0, 0, 0, &text, NULL, &js);
    srv_tc *tc = tools ? srv_tc_create_for(tools, how) : NULL;
    srv_call *calls = NULL;
    int n_calls = 0;
    bool ok = !tools || (tc && tool_calls(tc, &text, &content, &calls, &n_calls));
    const srv_buf *answer = tc ? &content : &text;
    json_t *h = ok ? srv_responses_history(history, answer->s, answer->len, calls, n_calls) : NULL;
    srv_store_put(s->store, id, h);
    json_decref(h);
    srv_tc_destroy(tc);
    free_calls(calls, n_calls);
    srv_buf_free(&text);
    srv_buf_free(&content);
}

/* Waits for the end of a plain (non-stream) job and answers with the whole object. */
static enum MHD_Result answer_whole(srv_server *s, struct MHD_Connection *c, http_req *r,
                                    const srv_request *req) {
    srv_engine *e = r->model->engine;
    srv_job_state js;
    if (!wait_job(e, c, req->job, SIZE_MAX, &js)) return MHD_NO;
    if (!srv_finish_reason(js.finish)) return answer_failed(c, r, &js);
    srv_buf text = {0}, reasoning = {0}, body = {0}, content = {0};
    srv_job_poll(e, req->job, 0, 0, 0, &text, &reasoning, &js);
    srv_resp resp;
    srv_resp_init(&resp, req->kind, r->model->name, false);
    srv_tc *tc = req->tools ? srv_tc_create_for(req->tools, req->calls) : NULL;
    srv_call *calls = NULL;
    int n_calls = 0;
    bool ok = !req->tools || (tc && tool_calls(tc, &text, &content, &calls, &n_calls));
    const srv_buf *answer = tc ? &content : &text;
    resp.prev_id = req->prev_id[0] ? req->prev_id : NULL;
    resp.store = req->history != NULL;
    if (ok)
        srv_api_final(&resp, answer->s ? answer->s : "", answer->len, reasoning.s, reasoning.len,
                      calls, n_calls, &js, &body);
    if (ok && req->history) {
        json_t *h = srv_responses_history(req->history, answer->s, answer->len, calls, n_calls);
        srv_store_put(s->store, resp.id, h);
        json_decref(h);
    }
    srv_error err;
    enum MHD_Result q = ok && !body.failed
                            ? answer_json(c, r, 200, &body)
                            : answer_error(c, r, (srv_fail(&err, 500, NULL, NULL, "out of memory "
                                                           "reading the reply"), &err));
    srv_tc_destroy(tc);
    free_calls(calls, n_calls);
    srv_buf_free(&text);
    srv_buf_free(&reasoning);
    srv_buf_free(&body);
    srv_buf_free(&content);
    return q;
}

/* 503 with Retry-After while the model loads or the server drains: a balancer takes
 * it as "try another replica". */
static enum MHD_Result answer_unavailable(struct MHD_Connection *c, http_req *r) {
    srv_error err;
    if (state_of(r->srv) == SRV_STATE_LOADING)
        srv_fail(&err, 503, NULL, "loading", "the model is still loading; retry shortly");
    else
        srv_fail(&err, 503, NULL, "shutting_down", "the server is draining: it finishes the "
                 "requests it has and takes no new ones; retry on another replica");
    return answer_error(c, r, &err);
}

static enum MHD_Result run_request(srv_server *s, struct MHD_Connection *c, http_req *r,
                                   srv_request *rq);

static bool conn_gone(void *fd) { return client_gone(*(int *)fd); }

/* The model the body names, held in r->model: loaded if it must be (the request
 * waits), or a 404 that lists the models there are. */
static bool pick_model(srv_server *s, struct MHD_Connection *c, http_req *r, json_t *o,
                       srv_error *err) {
    json_t *name = json_object_get(o, "model");
    if (name && !json_is_string(name) && !json_is_null(name))
        return srv_fail(err, 400, "model", "invalid_type", "'model' must be a string");
    int i = srv_models_find(&s->models, json_string_value(name));
    if (i < 0) {
        json_t *list = srv_models_json(&s->models, NULL, s->started);
        srv_buf names = {0};
        size_t k;
        json_t *m;
        json_array_foreach(json_object_get(list, "data"), k, m) {
            srv_buf_printf(&names, "%s'%s'", k ? ", " : "",
                           json_string_value(json_object_get(m, "id")));
        }
        json_decref(list);
        srv_fail(err, 404, "model", "model_not_found", "no model '%.200s' here; the models are: "
                 "%.300s", json_string_value(name), names.s ? names.s : "");
        srv_buf_free(&names);
        return false;
    }
    int fd = client_fd(c);
    r->model = srv_models_acquire(&s->models, i, conn_gone, &fd, err);
    return r->model != NULL;
}

/* The body is complete: validate, queue, answer. */
static enum MHD_Result on_body_done(srv_server *s, struct MHD_Connection *c, http_req *r) {
    srv_error err;
    if (r->too_large) {
        srv_fail(&err, 413, NULL, "body_too_large", "the request body has %zu bytes; the limit is "
                 "%zu", r->n_body, s->p.max_body_bytes);
        return answer_error(c, r, &err);
    }
    /* a drain may have begun while the body came in */
    if (state_of(s) != SRV_STATE_READY) return answer_unavailable(c, r);
    srv_request req;
    srv_kind kind = r->ep == SRV_EP_CHAT        ? SRV_KIND_CHAT
                    : r->ep == SRV_EP_MESSAGES  ? SRV_KIND_MESSAGES
                    : r->ep == SRV_EP_RESPONSES ? SRV_KIND_RESPONSES
                                                : SRV_KIND_COMPLETION;
    json_t *o;
    if (!srv_api_load(r->body.s ? r->body.s : "", r->body.len, &o, &err))
        return answer_error(c, r, &err);
    if (!pick_model(s, c, r, o, &err)) {
        json_decref(o);
        return answer_error(c, r, &err);
    }
    if (!srv_api_parse_json(&r->model->api, kind, o, &req, &err)) return answer_error(c, r, &err);
    enum MHD_Result q = run_request(s, c, r, &req);
    srv_request_clear(&req);
    return q;
}

/* A valid request: queue its job, then answer whole or as a stream. */
static enum MHD_Result run_request(srv_server *s, struct MHD_Connection *c, http_req *r,
                                   srv_request *rq) {
    srv_error err;
    srv_request req = *rq;
    req.job->t_arrival = r->t_start;
    srv_prefix_hash(req.job->prompt, req.job->n_prompt, s->p.prefix_hash_tokens, r->prefix_hash,
                    sizeof r->prefix_hash);
    srv_submit sub = srv_engine_submit(r->model->engine, req.job);
    if (sub != SRV_SUBMIT_OK) {
        srv_job_release(NULL, req.job);
        if (sub == SRV_SUBMIT_FULL)
            srv_fail(&err, 429, NULL, "queue_full", "the server is busy: all %d sequences are in "
                     "use and %d requests are waiting; retry later", s->p.n_parallel, s->p.n_queue);
        else
            srv_fail(&err, 503, NULL, "shutting_down", "the server is shutting down");
        if (sub == SRV_SUBMIT_FULL) err.type = "rate_limit_error";
        return answer_error(c, r, &err);
    }
    r->job = req.job; /* the connection's reference; the stream below takes another */
    if (!req.stream) return answer_whole(s, c, r, &req);
    /* a stream's head waits for its first text: until then the client has seen nothing,
     * so a failure (the server stopping, the replica dying) can still be an HTTP error
     * that a balancer retries on another replica */
    srv_job_state js;
    if (!wait_job(r->model->engine, c, req.job, 0, &js)) return MHD_NO;
    if (js.finish != SRV_FINISH_NONE && !srv_finish_reason(js.finish) && js.text_len == 0 &&
        js.reasoning_len == 0)
        return answer_failed(c, r, &js);
    return answer_stream(s, c, r, &req);
}

/* ---- GET routes ------------------------------------------------------------------------ */

/* What /health and /metrics report of the moment, summed over the loaded models. */
static srv_gauges gauges(srv_server *s) {
    srv_gauges g = {.state = state_of(s), .replica = s->replica, .model = s->model_name};
    srv_models_gauges(&s->models, &g);
    return g;
}

/* /health: 200 while ready, 503 while loading or draining (a balancer's or Kubernetes'
 * readiness check then sends requests elsewhere), with the load it carries. */
static enum MHD_Result answer_health(srv_server *s, struct MHD_Connection *c, http_req *r) {
    srv_gauges g = gauges(s);
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:I}", "status",
                          g.state == SRV_STATE_READY ? "ok" : srv_state_name(g.state), "state",
                          srv_state_name(g.state), "replica", s->replica, "slots_processing",
                          g.n_active, "slots_idle", g.n_slots - g.n_active, "queued", g.n_queued,
                          "kv_cache_used", (json_int_t)g.kv_used, "kv_cache_total",
                          (json_int_t)g.kv_total);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) return MHD_NO;
    int status = g.state == SRV_STATE_READY ? 200 : 503;
    enum MHD_Result q = answer(c, r, status, "application/json", text, strlen(text),
                               MHD_RESPMEM_MUST_COPY, status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER
                                                                    : NULL, "1");
    free(text);
    return q;
}

static enum MHD_Result answer_get(srv_server *s, struct MHD_Connection *c, http_req *r,
                                  const char *url) {
    srv_buf b = {0};
    enum MHD_Result q;
    srv_gauges g;
    switch (r->ep) {
    case SRV_EP_PAGE:
        return answer(c, r, 200, "text/html; charset=utf-8", srv_chat_html, srv_chat_html_len,
                      MHD_RESPMEM_PERSISTENT, "Content-Security-Policy",
                      "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
    case SRV_EP_HEALTH:
        return answer_health(s, c, r);
    case SRV_EP_METRICS:
        g = gauges(s);
        srv_metrics_render(&s->metrics, &g, &b);
        srv_models_render(&s->models, &b);
        q = b.failed ? MHD_NO
                     : answer(c, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.s, b.len,
                              MHD_RESPMEM_MUST_COPY, NULL, NULL);
        break;
    default: { /* /v1/models, or /v1/models/ID */
        const char *id = url + strlen("/v1/models");
        json_t *o = srv_models_json(&s->models, *id ? id + 1 : NULL, s->started);
        char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (*id && !o) {
            srv_error err;
            srv_fail(&err, 404, "model", "model_not_found", "no model '%.200s' here", id + 1);
            q = answer_error(c, r, &err);
        } else {
            srv_buf_str(&b, text ? text : "");
            q = text ? answer_json(c, r, 200, &b) : MHD_NO;
        }
        free(text);
    }
    }
    srv_buf_free(&b);
    return q;
}

/* ---- routing and the request callbacks -------------------------------------------------- */

/* The endpoint of a path; *post tells whether it takes POST (else GET and HEAD). */
static srv_endpoint route(const char *url, bool *post) {
    *post = false;
    if (!strcmp(url, "/")) return SRV_EP_PAGE;
    if (!strcmp(url, "/health")) return SRV_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return SRV_EP_METRICS;
    if (!strcmp(url, "/v1/models") || (!strncmp(url, "/v1/models/", 11) && url[11]))
        return SRV_EP_MODELS;
    *post = true;
    if (!strcmp(url, "/v1/chat/completions")) return SRV_EP_CHAT;
    if (!strcmp(url, "/v1/completions")) return SRV_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/messages")) return SRV_EP_MESSAGES;
    if (!strcmp(url, "/v1/responses")) return SRV_EP_RESPONSES;
    return SRV_EP_OTHER;
}

/* Compares the whole key whatever the input, so the time taken tells nothing about how
 * much of a guess was right. */
static bool secret_equal(const char *given, const char *key) {
    size_t lg = strlen(given), lk = strlen(key);
    unsigned diff = lg != lk;
    for (size_t i = 0; i < lk; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < lg ? given[i] : 0);
    return diff == 0;
}

static bool authorized(const srv_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    /* Anthropic's clients send the key as x-api-key */
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (x) return secret_equal(x, s->api_key);
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    for (h += 7; *h == ' '; h++) {}
    return secret_equal(h, s->api_key);
}

/* True if name (a Host without its port) is an IP address literal: 1.2.3.4 or [::1].
 * DNS rebinding needs a name the attacker controls, so a literal is always safe. */
static bool ip_literal(const char *name, size_t n) {
    char tmp[64];
    unsigned char addr[16];
    bool v6 = n > 2 && name[0] == '[' && name[n - 1] == ']';
    if (v6) name++, n -= 2;
    if (n == 0 || n >= sizeof tmp) return false;
    memcpy(tmp, name, n);
    tmp[n] = 0;
    return inet_pton(v6 ? AF_INET6 : AF_INET, tmp, addr) == 1;
}

static bool name_is(const char *name, size_t n, const char *want) {
    return want && strlen(want) == n && !strncasecmp(name, want, n);
}

/* Whether a Host header names this server: loopback names and IP literals, the --host
 * the server was bound to, and the --allowed-host names ("*": any), each with or without
 * a port. Anything else is another site's name pointing here (DNS rebinding). */
static bool host_allowed(const srv_server *s, const char *h) {
    size_t n;
    const char *port = NULL;
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        if (!e || (e[1] && e[1] != ':')) return false;
        n = (size_t)(e - h) + 1;
        if (e[1]) port = e + 2;
    } else {
        const char *colon = strchr(h, ':');
        if (colon && strchr(colon + 1, ':')) return false; /* IPv6 without brackets */
        n = colon ? (size_t)(colon - h) : strlen(h);
        if (colon) port = colon + 1;
    }
    if (n == 0 || (port && (!*port || strspn(port, "0123456789") != strlen(port)))) return false;
    if (name_is(h, n, "localhost") || ip_literal(h, n) || name_is(h, n, s->p.host)) return true;
    for (int i = 0; i < s->p.n_allowed_hosts; i++)
        if (!strcmp(s->p.allowed_hosts[i], "*") || name_is(h, n, s->p.allowed_hosts[i]))
            return true;
    return false;
}

/* application/json, with parameters such as "; charset=utf-8" allowed. */
static bool json_content_type(const char *t) {
    if (!t) return false;
    while (*t == ' ' || *t == '\t') t++;
    if (strncasecmp(t, "application/json", 16)) return false;
    t += 16;
    while (*t == ' ' || *t == '\t') t++;
    return *t == 0 || *t == ';';
}

/* Refusals that come before the route is told: a missing (400) or foreign (403) Host,
 * a missing key (401). true when one was answered. */
static bool refuse_caller(srv_server *s, struct MHD_Connection *c, http_req *r,
                          const char *version, bool open_route, enum MHD_Result *q) {
    srv_error err;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!host && !strcmp(version, MHD_HTTP_VERSION_1_1))
        srv_fail(&err, 400, NULL, "missing_host", "an HTTP/1.1 request must have a Host header");
    else if (host && !host_allowed(s, host))
        srv_fail(&err, 403, NULL, "host_not_allowed", "Host '%.100s' is not a name of this "
                 "server; start it with --allowed-host NAME to accept it", host);
    else if (!open_route && !authorized(s, c))
        srv_fail(&err, 401, NULL, "invalid_api_key", "a valid API key is required: send "
                 "'Authorization: Bearer KEY' (or 'x-api-key: KEY')");
    else
        return false;
    *q = answer_error(c, r, &err);
    return true;
}

/* Headers are in: decide everything that does not need the body. */
static enum MHD_Result on_headers(srv_server *s, struct MHD_Connection *c, http_req *r,
                                  const char *url, const char *method, const char *version) {
    bool post;
    r->ep = route(url, &post);
    srv_error err;
    enum MHD_Result q;
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    /* /health for probes; the chat page because a browser cannot send the key with a
     * page load (the page asks for the key and sends it with its API calls) */
    bool open_route = (r->ep == SRV_EP_HEALTH || r->ep == SRV_EP_PAGE) && is_get;
    if (refuse_caller(s, c, r, version, open_route, &q)) return q;
    if (r->ep == SRV_EP_OTHER) {
        srv_fail(&err, 404, NULL, "not_found", "no route %.200s %.200s", method, url);
        return answer_error(c, r, &err);
    }
    if (post ? strcmp(method, "POST") != 0 : !is_get) {
        srv_fail(&err, 405, NULL, "method_not_allowed", "%.200s takes %s, not %.20s", url,
                 post ? "POST" : "GET", method);
        return answer_error(c, r, &err);
    }
    if (!post) return answer_get(s, c, r, url);
    if (state_of(s) != SRV_STATE_READY) return answer_unavailable(c, r);
    const char *type =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!json_content_type(type)) {
        srv_fail(&err, 415, NULL, "unsupported_media_type", "the request body must be sent as "
                 "'Content-Type: application/json', not '%.100s'", type ? type : "(none)");
        return answer_error(c, r, &err);
    }
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    /* a body over the limit is still read (and dropped), up to a bound, before the 413:
     * closing with it unread would reset the connection under a client still writing */
    if (cl && strtoull(cl, NULL, 10) / DISCARD_FACTOR > s->p.max_body_bytes) {
        srv_fail(&err, 413, NULL, "body_too_large", "the request body has %.30s bytes; the limit "
                 "is %zu", cl, s->p.max_body_bytes);
        return answer_error(c, r, &err);
    }
    return MHD_YES;
}

/* The first thing libmicrohttpd calls for a request, once its request line is in: the
 * request object starts here so that requests libmicrohttpd refuses itself (431 for
 * headers too large) are also counted, at completion. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    srv_server *s = cls;
    http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->ep = SRV_EP_OTHER;
    r->t_start = al_time_s();
    http_conn *k = conn_of(c);
    if (k) {
        pthread_mutex_lock(&s->lock);
        k->has_request = true;
        pthread_mutex_unlock(&s->lock);
    }
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls) {
    srv_server *s = cls;
    http_req *r = *con_cls;
    if (!r) return MHD_NO; /* out of memory in on_request_line */
    if (!r->headers_seen) {
        r->headers_seen = true;
        enum MHD_Result q = on_headers(s, c, r, url, method, version);
        if (r->answered) request_answering(s, c, r);
        return q;
    }
    if (r->answered) { /* answered from the headers; the rest of the body is ignored */
        *data_size = 0;
        return MHD_YES;
    }
    if (*data_size) {
        size_t n = *data_size;
        *data_size = 0;
        r->n_body += n;
        if (r->n_body > s->p.max_body_bytes) {
            r->too_large = true;
            srv_buf_free(&r->body);
            return r->n_body / DISCARD_FACTOR > s->p.max_body_bytes ? MHD_NO : MHD_YES;
        }
        return srv_buf_add(&r->body, data, n) ? MHD_YES : MHD_NO;
    }
    request_answering(s, c, r);
    return on_body_done(s, c, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
    srv_server *s = cls;
    http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    /* a kept-alive connection is idle from now on: the timeout applies again, and the
     * next request's head and body have their deadline after that idle time */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->p.timeout_s);
    http_conn *k = conn_of(c);
    bool timed_out = false;
    pthread_mutex_lock(&s->lock);
    if (k) {
        timed_out = k->timed_out;
        k->has_request = false;
        k->deadline = al_time_s() + s->p.timeout_s + s->p.head_timeout_s;
    }
    if (r->inflight && --s->n_inflight == 0) pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    if (r->job) { /* a request that ends before its job does leaves nobody to read it */
        srv_job_cancel(r->model->engine, r->job);
        srv_job_release(r->model->engine, r->job);
    }
    srv_models_release(&s->models, r->model);
    /* not answered by us: 408 for a timeout, else nginx's 499, "client closed request";
     * libmicrohttpd's own refusals (431...) were counted by on_mhd_log */
    int status = r->status;
    if (!status && (timed_out || why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED)) status = 408;
    if (!status) status = 499;
    bool refused = !r->headers_seen && !timed_out && mhd_status(c);
    if (!refused) srv_metrics_request(&s->metrics, r->ep, status);
    if (s->p.verbose)
        fprintf(stderr, "anyllm serve: %s %d %.3f s%s\n", srv_endpoint_path(r->ep), status,
                al_time_s() - r->t_start,
                why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    srv_buf_free(&r->body);
    free(r);
}

/* libmicrohttpd's log. Its own refusals (414 for a request line too long, 431 for
 * headers too large, 400 for a malformed head) reach no callback of ours before the
 * request object exists, and this message is the one place that names their status,
 * so they are counted here. The rest is printed with -v. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    srv_server *s = cls;
    static const char refusal[] = "Error processing request (HTTP response code is %u";
    if (!strncmp(fmt, refusal, sizeof refusal - 1)) {
        va_list aq;
        va_copy(aq, ap);
        unsigned status = va_arg(aq, unsigned);
        va_end(aq);
        srv_metrics_request(&s->metrics, SRV_EP_OTHER, (int)status);
    }
    if (s->p.verbose) {
        fputs("anyllm serve: libmicrohttpd: ", stderr);
        vfprintf(stderr, fmt, ap);
    }
}

/* ---- create / destroy -------------------------------------------------------------------- */

static al_status listen_on(srv_server *s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", s->p.port);
    int rc = getaddrinfo(s->p.host, port, &hints, &ai);
    if (rc != 0)
        return al_error(AL_ERR_ARG, "cannot use host '%s': %s", s->p.host, gai_strerror(rc));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0) |
                     MHD_USE_ERROR_LOG;
    /* connections beyond the sequences and the queue only wait to be told 429; one
     * address's share comes on top, so that a client holding all of it leaves as many
     * connections to the others as there were before the per-address cap */
    unsigned limit = (unsigned)(s->p.n_parallel + s->p.n_queue + 64 + s->p.max_conns_per_ip);
    errno = 0;
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, on_request, s,
                              MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.timeout_s,
                              MHD_OPTION_CONNECTION_LIMIT, limit,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->p.max_conns_per_ip,
                              MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                              MHD_OPTION_URI_LOG_CALLBACK, on_request_line, s,
                              MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd)
        return al_error(AL_ERR_IO, "cannot listen on %s:%d: %s", s->p.host, s->p.port,
                        errno ? strerror(errno) : "libmicrohttpd refused to start");
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->p.port;
    return AL_OK;
}

/* X-Replica: the name given, else this machine's name and the port, which tells
 * replicas apart on one machine and across machines. */
static void name_replica(srv_server *s, int port) {
    char host[200] = "localhost";
    if (s->p.replica_id && *s->p.replica_id) {
        snprintf(s->replica, sizeof s->replica, "%s", s->p.replica_id);
        return;
    }
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    snprintf(s->replica, sizeof s->replica, "%s:%d", host, port);
}

al_status srv_create(const srv_params *p, srv_server **out) {
    *out = NULL;
    if (p->n_parallel < 1 || p->n_queue < 0 || p->timeout_s < 1 || p->max_tokens_default < 1 ||
        p->port < 0 || p->port > 65535 || !p->model_name || p->head_timeout_s < 1 ||
        p->max_conns_per_ip < 0 || p->prefix_hash_tokens < 0)
        return al_error(AL_ERR_ARG, "server: invalid parameters (%d sequences, queue %d, port %d)",
                        p->n_parallel, p->n_queue, p->port);
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return al_error(AL_ERR_NOMEM, "out of memory starting the server");
    srv_metrics_init(&s->metrics);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    s->listen_fd = -1;
    s->p = *p;
    s->state = SRV_STATE_LOADING;
    s->started = (long long)time(NULL);
    s->model_name = strdup(p->model_name);
    s->api_key = p->api_key ? strdup(p->api_key) : NULL;
    s->store = srv_store_create();
    srv_models_init(&s->models, &s->p, &s->metrics, s->store);
    al_status st = AL_OK;
    if (!s->model_name || (p->api_key && !s->api_key) || !s->store)
        st = al_error(AL_ERR_NOMEM, "out of memory starting the server");
    if (st == AL_OK) {
        s->reaper_running = pthread_create(&s->reaper, NULL, reaper_main, s) == 0;
        if (!s->reaper_running) st = al_error(AL_ERR_NOMEM, "cannot start the reaper thread");
    }
    /* named before the listener runs, so that no answer goes out without it; with port
     * 0 the port is known only after, and an answer in that first instant has "" */
    if (p->port) name_replica(s, p->port);
    if (st == AL_OK) st = listen_on(s);
    if (st != AL_OK) {
        srv_destroy(s);
        return st;
    }
    if (!p->port) name_replica(s, s->port);
    *out = s;
    return AL_OK;
}

al_status srv_start(srv_server *s, const al_model *m, const al_model *decode_model, int n_ctx) {
    /* nothing reads these while the state is LOADING */
    s->p.n_ctx = n_ctx;
    al_status st = srv_models_put(&s->models, s->model_name, m, decode_model, n_ctx);
    if (st != AL_OK) return st;
    __atomic_store_n(&s->state, SRV_STATE_READY, __ATOMIC_RELEASE);
    return AL_OK;
}

void srv_set_draft_model(srv_server *s, const al_model *dm) { s->p.draft_model = dm; }

al_status srv_add_model(srv_server *s, const char *name, const char *path) {
    if (!s->p.loader.load || !s->p.loader.unload)
        return al_error(AL_ERR_ARG, "server: several models need a loader (srv_params.loader)");
    return srv_models_add(&s->models, name, path);
}

al_status srv_start_models(srv_server *s) {
    if (s->models.n == 0) return al_error(AL_ERR_ARG, "server: no models were added");
    __atomic_store_n(&s->state, SRV_STATE_READY, __ATOMIC_RELEASE);
    return AL_OK;
}

void srv_drain_begin(srv_server *s) {
    int ready = SRV_STATE_READY;
    __atomic_compare_exchange_n(&s->state, &ready, SRV_STATE_DRAINING, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

bool srv_drained(srv_server *s) {
    pthread_mutex_lock(&s->lock);
    int n = s->n_inflight;
    pthread_mutex_unlock(&s->lock);
    srv_gauges g = {0};
    srv_models_gauges(&s->models, &g);
    return n == 0 && g.n_active == 0 && g.n_queued == 0;
}

/* Waits until every request with a decided answer has written it, DRAIN_S at most. */
static void drain(srv_server *s) {
    double until = al_time_s() + DRAIN_S;
    pthread_mutex_lock(&s->lock);
    while (s->n_inflight > 0 && al_time_s() < until) {
        wait_changed(s);
    }
    pthread_mutex_unlock(&s->lock);
}

void srv_destroy(srv_server *s) {
    if (!s) return;
    /* no new connections; then the engine: its jobs end, which wakes the threads
     * waiting on them, and each writes its answer (503, or a stream's error event and
     * [DONE]); only when those are out does libmicrohttpd shut the sockets down */
    if (s->mhd) s->listen_fd = (int)MHD_quiesce_daemon(s->mhd);
    srv_models_stop(&s->models);
    if (s->mhd) drain(s);
    if (s->reaper_running) {
        pthread_mutex_lock(&s->lock);
        s->reaper_stop = true;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->reaper, NULL);
    }
    if (s->mhd) MHD_stop_daemon(s->mhd);
    if (s->listen_fd >= 0) close(s->listen_fd);
    srv_models_free(&s->models);
    srv_metrics_free(&s->metrics);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    free(s->model_name);
    free(s->api_key);
    srv_store_destroy(s->store);
    free(s);
}
