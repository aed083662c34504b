/* anthropic.h: POST /v1/messages, Anthropic's Messages API, on the chat engine.
 *
 * A request is translated into the Chat Completions request it means and goes through
 * the same checks, template, tools and engine: `system` (a string or text blocks)
 * becomes the system message; content blocks `text`, `tool_use` (assistant) and
 * `tool_result` (user; `is_error` marks the text) become text, tool_calls and tool
 * messages (`thinking` blocks of earlier turns are dropped; images and documents are
 * refused); `tools` ({name, description, input_schema}), `tool_choice` (auto, any,
 * tool, none; disable_parallel_tool_use), `max_tokens` (required; above the context it
 * is the context), `stop_sequences`, `stream`, `output_config.format` (a JSON Schema:
 * response_format json_schema), and `temperature`, `top_p`, `top_k` where a client
 * still sends them. Server tools (web search, bash, ...) are refused.
 * Replies are a `message` with `text`, `thinking` (Harmony's reasoning) and `tool_use`
 * blocks, `stop_reason` end_turn, stop_sequence (with the one met), max_tokens or
 * tool_use, and `usage`; streamed as
 * message_start, content_block_start / _delta / _stop per block, message_delta and
 * message_stop events. Errors are {"type": "error", "error": {"type", "message"}}.
 */
#ifndef AL_SERVER_ANTHROPIC_H
#define AL_SERVER_ANTHROPIC_H

#include <jansson.h>

#include "server/error.h"
#include "server/reply.h"

/* The Chat Completions request for a Messages request (a new reference), or NULL with
 * *err filled. */
json_t *srv_anthropic_request(json_t *body, int n_ctx, srv_error *err);

bool srv_anthropic_final(const srv_resp *r, const char *text, size_t len, const char *reasoning,
                         size_t rlen, const srv_call *calls, int n_calls, const srv_job_state *st,
                         srv_buf *out);
bool srv_anthropic_start(srv_resp *r, srv_buf *out);
bool srv_anthropic_text(srv_resp *r, const char *text, size_t len, const char *reasoning,
                        size_t rlen, srv_buf *out);
bool srv_anthropic_call(srv_resp *r, const srv_call *call, srv_buf *out);
bool srv_anthropic_end(srv_resp *r, const srv_job_state *st, srv_buf *out);
void srv_anthropic_error_body(const srv_error *err, srv_buf *out);

#endif /* AL_SERVER_ANTHROPIC_H */
