/* api.h: the OpenAI side of `anyllm serve`: request bodies in, response objects out.
 *
 * srv_api_parse checks every field it uses (type and range), ignores fields it does not
 * know (clients send many), renders chat messages with the model's template, tokenizes,
 * and builds the engine job. Every refusal is an srv_error that becomes the OpenAI error
 * object {"error": {"message", "type", "param", "code"}} with an HTTP status.
 * Thread-safe: the context is read-only and the vocabulary may be shared by threads.
 */
#ifndef AL_SERVER_API_H
#define AL_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>

#include "server/engine.h"
#include "server/error.h"
#include "server/reply.h"
#include "server/toolcall.h"

/* What parsing needs to know about the model; read-only once the server runs. */
typedef struct srv_api {
    const al_vocab *vocab;
    int n_vocab;
    int n_ctx;              /* positions per sequence                                */
    int max_tokens_default; /* cap when a request gives no max_tokens               */
    const char *tmpl_name;  /* chat format; NULL: chat requests are refused          */
    const char *tmpl;       /* the model's Jinja text (default system prompt), or NULL */
    const char *model_name;
    struct srv_store *store; /* responses kept for previous_response_id (responses.h) */
} srv_api;

typedef struct srv_request {
    srv_kind kind;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    srv_job *job;       /* one reference, the caller's: submit it, then release it */
    json_t *tools;      /* the tools when the reply is parsed for calls (toolcall.h), or NULL;
                           one reference, the caller's */
    srv_calls calls;    /* how the reply's text writes calls (toolcall.h)           */
    json_t *history;    /* RESPONSES to be stored: the chat messages (one reference), or NULL */
    char prev_id[64];   /* RESPONSES: previous_response_id, or "" */
} srv_request;

/* Drops the request's references (not the job's). */
void srv_request_clear(srv_request *r);

/* Validates a request body and builds its job. On failure returns false, *err says why
 * and out->job is NULL. */
bool srv_api_parse(const srv_api *api, srv_kind kind, const char *body, size_t len,
                   srv_request *out, srv_error *err);
/* The same in two steps, for a server that must read the body's "model" before it knows
 * which api to parse with: the body as a JSON object (*out, one reference), then the
 * object (its reference taken over) into the request. */
bool srv_api_load(const char *body, size_t len, json_t **out, srv_error *err);
bool srv_api_parse_json(const srv_api *api, srv_kind kind, json_t *o, srv_request *out,
                        srv_error *err);

/* ---- responses ------------------------------------------------------------------------- */

void srv_resp_init(srv_resp *r, srv_kind kind, const char *model, bool include_usage);

/* {"error": {...}} as text (appended to out); in Anthropic's form for MESSAGES. */
void srv_api_error_body(const srv_error *err, srv_buf *out);
void srv_api_error_body_for(srv_kind kind, const srv_error *err, srv_buf *out);

/* The complete non-streaming object for text and reasoning (valid UTF-8; the message's
 * "reasoning_content" when rlen > 0, as other OpenAI-compatible servers name the
 * reasoning of a model) and the job's end state. */
bool srv_api_final(const srv_resp *r, const char *text, size_t len, const char *reasoning,
                   size_t rlen, const srv_call *calls, int n_calls, const srv_job_state *st,
                   srv_buf *out);

/* Server-sent events, each appended as "data: {...}\n\n":
 * the first chunk (chat: the assistant role), a chunk of text and/or reasoning (the
 * delta's "content" when len > 0, its "reasoning_content" when rlen > 0), and the end:
 * the chunk with finish_reason (carrying usage too), the usage-only chunk when
 * include_usage, and "data: [DONE]". */
bool srv_api_chunk_start(srv_resp *r, srv_buf *out);
bool srv_api_chunk_text(srv_resp *r, const char *text, size_t len, const char *reasoning,
                        size_t rlen, srv_buf *out);
bool srv_api_chunk_end(srv_resp *r, const srv_job_state *st, srv_buf *out);
/* A tool call, streamed: a delta with its index, id, type and name (arguments ""), then
 * one with its arguments. */
bool srv_api_chunk_call(srv_resp *r, const srv_call *call, srv_buf *out);

/* X-Prefix-Hash: 16 hex digits of a 64-bit FNV-1a hash over the first k token ids of a
 * rendered prompt, written to out (cap >= 17); "" when k is 0 or the prompt is shorter
 * than k, so that equal hashes always mean a shared k-token prefix. */
void srv_prefix_hash(const int32_t *tokens, int n, int k, char *out, size_t cap);



#endif /* AL_SERVER_API_H */
