/* responses.h: POST /v1/responses, OpenAI's Responses API, on the chat engine.
 *
 * A request is translated into the Chat Completions request it means: `instructions`
 * (the system message), `input` as a string or items (messages with roles user, system,
 * developer or assistant and input_text / output_text parts, `function_call` and
 * `function_call_output` items; earlier `reasoning` items are dropped, images and files
 * refused), `tools` (function tools, flat: {type, name, description, parameters,
 * strict}; other tool types refused), `tool_choice`, `parallel_tool_calls`,
 * `text.format` (text, json_object, json_schema), `max_output_tokens` (above the context
 * it is the context), `temperature`, `top_p`, `stream`, and `previous_response_id`: the
 * conversation of a response this server still holds (the last SRV_STORE_MAX stored, with
 * `store` true, the default) comes before the new input, its instructions left out
 * (they do not carry over).
 * Replies are a `response` object whose `output` holds a reasoning item (Harmony), a
 * message item with output_text, and function_call items, `status` completed or
 * incomplete (max_output_tokens), and `usage`; streamed as response.created,
 * response.in_progress, output_item.added / content_part.added / output_text.delta /
 * output_text.done / content_part.done / output_item.done per message, output_item.added /
 * function_call_arguments.delta / .done / output_item.done per call, and
 * response.completed (or response.incomplete), each with its sequence_number.
 */
#ifndef AL_SERVER_RESPONSES_H
#define AL_SERVER_RESPONSES_H

#include <jansson.h>
#include <pthread.h>

#include "server/error.h"
#include "server/reply.h"

enum { SRV_STORE_MAX = 256 };

/* The responses kept for previous_response_id: each one's whole conversation as chat
 * messages, the oldest dropped first. Thread-safe. */
typedef struct srv_store srv_store;
srv_store *srv_store_create(void);
void srv_store_destroy(srv_store *s);
/* Keeps messages (a reference is taken) under id. */
void srv_store_put(srv_store *s, const char *id, json_t *messages);
/* The messages kept under id (a new reference), or NULL. */
json_t *srv_store_get(srv_store *s, const char *id);

/* The Chat Completions request for a Responses request (a new reference), or NULL with
 * *err filled. */
json_t *srv_responses_request(json_t *body, int n_ctx, srv_store *store, srv_error *err);

/* The conversation to keep for a finished response: the chat request's messages and
 * the reply as an assistant message (a new reference). */
json_t *srv_responses_history(json_t *messages, const char *text, size_t len,
                              const srv_call *calls, int n_calls);

/* Its replies: response objects and their stream events (reply.h). */
extern const srv_writer srv_responses_writer;
/* Frees what a streamed reply accumulated (srv_resp's items and text). */
void srv_responses_free(srv_resp *r);

#endif /* AL_SERVER_RESPONSES_H */
