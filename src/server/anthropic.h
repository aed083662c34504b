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

/* Its replies: messages, their stream events and errors (reply.h). */
extern const srv_writer srv_anthropic_writer;

#endif /* AL_SERVER_ANTHROPIC_H */
