/* reply.h: what every API's reply writer shares (api.c for OpenAI's, anthropic.c for
 * Anthropic's): the request's API, the state of one reply, its tool calls, fresh
 * identifiers and the finish reasons. */
#ifndef AL_SERVER_REPLY_H
#define AL_SERVER_REPLY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/engine.h"
#include "server/error.h"

/* The request's API: what it reads and how replies are written; the last two are chats
 * read and written in another API's shape. */
typedef enum srv_kind {
    SRV_KIND_CHAT,
    SRV_KIND_COMPLETION,
    SRV_KIND_MESSAGES,  /* Anthropic's Messages API (anthropic.h) */
    SRV_KIND_RESPONSES, /* OpenAI's Responses API (responses.h) */
} srv_kind;

/* The fields every object of one response repeats. */
typedef struct srv_resp {
    srv_kind kind;
    char id[48];        /* "chatcmpl-...", "cmpl-..." or "msg_..." */
    long long created;  /* Unix seconds */
    const char *model;
    bool include_usage;
    int n_calls;        /* tool calls sent so far: a reply with some ends in "tool_calls" */
    int n_prompt;       /* the prompt's tokens, for APIs that announce them first */
    int block, open;    /* MESSAGES streams: the current content block, its kind (0 none) */
    /* RESPONSES: events sent, output items so far (their JSON), the open item's kind
     * (0 none, 1 message, 2 reasoning), id and text */
    int seq, n_items;
    json_t *items;
    char item_id[48];
    srv_buf acc;
    bool store;
    const char *prev_id; /* previous_response_id, echoed */
} srv_resp;

/* A fresh identifier: prefix and 24 hex digits (cap >= strlen(prefix) + 25). */
void srv_new_id(const char *prefix, char *out, size_t cap);

/* A tool call of a reply: name and arguments (a JSON object's text). */
typedef struct srv_call {
    const char *name, *arguments;
} srv_call;

/* The OpenAI finish_reason of an end state: "stop", "length" or NULL. */
const char *srv_finish_reason(srv_finish f);
/* ... of a reply with n_calls tool calls: "tool_calls" for one that stopped with some. */
const char *srv_reply_finish(srv_finish f, int n_calls);

/* Appends obj as compact JSON and drops it (NULL: false, nothing appended). */
bool srv_json_out(json_t *obj, srv_buf *out);
/* Appends a typed server-sent event, "event: TYPE\ndata: {...}\n\n", obj carrying
 * "type": TYPE as well (the Responses and Messages streams); drops obj. */
bool srv_sse_typed(const char *type, json_t *obj, srv_buf *out);

/* A message's content as every API sends it: a string, or an array of parts {"type": T,
 * "text": S} with T one of types (NULL-ended), appended to out joined. Returns -1 when
 * all of it was taken, -2 when c is neither a string nor an array, else the index of
 * the first part that is not such a text part. */
long srv_text_parts(const json_t *c, const char *const *types, srv_buf *out);

/* The writer of one API's replies (OpenAI's own are in api.c): the whole object, and a
 * stream's start, text and reasoning, one tool call, and end. error_body NULL: OpenAI's
 * error object. */
typedef struct srv_writer {
    bool (*final)(const srv_resp *r, const char *text, size_t len, const char *reasoning,
                  size_t rlen, const srv_call *calls, int n_calls, const srv_job_state *st,
                  srv_buf *out);
    bool (*start)(srv_resp *r, srv_buf *out);
    bool (*text)(srv_resp *r, const char *text, size_t len, const char *reasoning, size_t rlen,
                 srv_buf *out);
    bool (*call)(srv_resp *r, const srv_call *call, srv_buf *out);
    bool (*end)(srv_resp *r, const srv_job_state *st, srv_buf *out);
    void (*error_body)(const srv_error *err, srv_buf *out);
} srv_writer;

#endif /* AL_SERVER_REPLY_H */
