/* anthropic.c: /v1/messages requests as chat requests, and replies as messages (see
 * anthropic.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/anthropic.h"

/* ---- the request ------------------------------------------------------------------------- */

/* Text blocks (or a string) joined into one string; NULL (err set) for other blocks. */
static json_t *joined_text(json_t *c, const char *what, srv_error *err) {
    static const char *const text[] = {"text", NULL};
    srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    long bad = srv_text_parts(c, text, &b);
    json_t *s = bad == -1 && !b.failed ? json_stringn(b.s, b.len) : NULL;
    srv_buf_free(&b);
    if (bad == -2)
        srv_fail(err, 400, what, "invalid_type", "%s must be a string or an array of text blocks",
                 what);
    else if (bad >= 0)
        srv_fail(err, 400, what, "invalid_type", "%s[%ld] must be a text block", what, bad);
    else if (!s)
        srv_fail(err, 500, NULL, NULL, "out of memory");
    return s;
}

/* One message's blocks: text into *text, tool_use into calls, tool_result into tool
 * messages appended to out (before the message itself). */
static bool blocks(json_t *content, size_t i, bool assistant, json_t *out, srv_buf *text,
                   json_t *calls, srv_error *err) {
    for (size_t k = 0; k < json_array_size(content); k++) {
        json_t *b = json_array_get(content, k);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type)
            return srv_fail(err, 400, "messages", "invalid_type",
                            "messages[%zu].content[%zu] needs "
                            "a type",
                            i, k);
        if (!strcmp(type, "text")) {
            const char *t = json_string_value(json_object_get(b, "text"));
            if (!t)
                return srv_fail(err, 400, "messages", "invalid_type",
                                "messages[%zu].content[%zu]"
                                ".text must be a string",
                                i, k);
            srv_buf_str(text, t);
        } else if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
            continue; /* a past turn's reasoning: not shown to the model again */
        } else if (!strcmp(type, "tool_use") && assistant) {
            const char *name = json_string_value(json_object_get(b, "name"));
            const char *id = json_string_value(json_object_get(b, "id"));
            json_t *input = json_object_get(b, "input");
            if (!name || (input && !json_is_object(input)))
                return srv_fail(err, 400, "messages", "invalid_type",
                                "messages[%zu].content[%zu]: "
                                "tool_use needs a name and an input object",
                                i, k);
            char *args = json_dumps(input ? input : json_object(), JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id ? id : "",
                                                   "type", "function", "function", "name", name,
                                                   "arguments", args ? args : "{}"));
            free(args);
        } else if (!strcmp(type, "tool_result") && !assistant) {
            json_t *c = json_object_get(b, "content");
            json_t *s = c ? joined_text(c, "messages", err) : json_string("");
            if (!s) return false;
            if (json_is_true(json_object_get(b, "is_error"))) {
                char *e = NULL;
                if (asprintf(&e, "Error: %s", json_string_value(s)) < 0) e = NULL;
                json_decref(s);
                s = e ? json_string(e) : NULL;
                free(e);
                if (!s) return srv_fail(err, 500, NULL, NULL, "out of memory");
            }
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            json_array_append_new(out, json_pack("{s:s, s:s, s:o}", "role", "tool", "tool_call_id",
                                                 id ? id : "", "content", s));
        } else {
            return srv_fail(err, 400, "messages", "unsupported_value",
                            "messages[%zu].content[%zu]: "
                            "a block of type '%.40s' is not supported in a%s message",
                            i, k, type, assistant ? "n assistant" : " user");
        }
    }
    return true;
}

static bool translate_messages(json_t *msgs, json_t *out, srv_error *err) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return srv_fail(err, 400, "messages", "invalid_type", "messages must be a non-empty array");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i), *content = json_object_get(m, "content");
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
            return srv_fail(err, 400, "messages", "invalid_value",
                            "messages[%zu].role must be user "
                            "or assistant",
                            i);
        bool assistant = !strcmp(role, "assistant");
        if (json_is_string(content)) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", content));
            continue;
        }
        if (!json_is_array(content))
            return srv_fail(err, 400, "messages", "invalid_type",
                            "messages[%zu].content must be a "
                            "string or an array of blocks",
                            i);
        srv_buf text = {0};
        json_t *calls = json_array();
        bool ok = blocks(content, i, assistant, out, &text, calls, err);
        if (ok && (text.len || json_array_size(calls) || !json_array_size(content) || assistant)) {
            json_t *msg =
                json_pack("{s:s, s:s%}", "role", role, "content", text.s ? text.s : "", text.len);
            if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
            json_array_append_new(out, msg);
        }
        json_decref(calls);
        srv_buf_free(&text);
        if (!ok) return false;
    }
    return true;
}

static bool translate_tools(json_t *body, json_t *chat, srv_error *err) {
    json_t *tools = json_object_get(body, "tools"), *tc = json_object_get(body, "tool_choice");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return srv_fail(err, 400, "tools", "invalid_type", "tools must be an array");
        json_t *list = json_array();
        json_object_set_new(chat, "tools", list);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i);
            const char *type = json_string_value(json_object_get(t, "type"));
            if (type && strcmp(type, "custom"))
                return srv_fail(err, 400, "tools", "unsupported_value",
                                "tools[%zu]: the server "
                                "tool '%.60s' is not supported (only tools with an input_schema)",
                                i, type);
            json_t *f = json_pack("{s:O*, s:O*, s:O*}", "name", json_object_get(t, "name"),
                                  "description", json_object_get(t, "description"), "parameters",
                                  json_object_get(t, "input_schema"));
            json_array_append_new(list, json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
    }
    if (!tc || json_is_null(tc)) return true;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!type) return srv_fail(err, 400, "tool_choice", "invalid_type", "tool_choice needs a type");
    if (json_is_true(json_object_get(tc, "disable_parallel_tool_use")))
        json_object_set_new(chat, "parallel_tool_calls", json_false());
    if (!strcmp(type, "auto") || !strcmp(type, "none") || !strcmp(type, "any"))
        json_object_set_new(chat, "tool_choice",
                            json_string(!strcmp(type, "any") ? "required" : type));
    else if (!strcmp(type, "tool"))
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s, s:{s:O*}}", "type", "function", "function", "name",
                                      json_object_get(tc, "name")));
    else
        return srv_fail(err, 400, "tool_choice", "invalid_value",
                        "tool_choice type '%.40s' is not "
                        "auto, any, tool or none",
                        type);
    return true;
}

json_t *srv_anthropic_request(json_t *body, int n_ctx, srv_error *err) {
    json_t *mt = json_object_get(body, "max_tokens");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
        srv_fail(err, 400, "max_tokens", mt ? "invalid_type" : "missing",
                 "max_tokens is required "
                 "and must be a positive integer");
        return NULL;
    }
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    json_int_t cap = json_integer_value(mt) < n_ctx ? json_integer_value(mt) : n_ctx;
    json_object_set_new(chat, "max_tokens", json_integer(cap));
    static const char *const same[] = {"model", "stream", "temperature", "top_p", "top_k"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v) json_object_set(chat, same[i], v);
    }
    json_t *fmt = json_object_get(json_object_get(body, "output_config"), "format");
    if (fmt && !json_is_null(fmt)) { /* structured output: the chat request's response_format */
        const char *type = json_string_value(json_object_get(fmt, "type"));
        if (!type || strcmp(type, "json_schema")) {
            srv_fail(err, 400, "output_config", "invalid_value",
                     "output_config.format.type must be "
                     "json_schema");
            json_decref(chat);
            return NULL;
        }
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s, s:{s:s, s:O*}}", "type", "json_schema", "json_schema",
                                      "name", "output", "schema", json_object_get(fmt, "schema")));
    }
    json_t *stop = json_object_get(body, "stop_sequences");
    if (stop && !json_is_null(stop)) json_object_set(chat, "stop", stop);
    json_t *sys = json_object_get(body, "system");
    bool ok = true;
    if (sys && !json_is_null(sys)) {
        json_t *s = joined_text(sys, "system", err);
        ok = s != NULL;
        if (ok)
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "system", "content", s));
    }
    ok = ok && translate_messages(json_object_get(body, "messages"), msgs, err) &&
         translate_tools(body, chat, err);
    if (!ok) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

static void msg_error_body(const srv_error *err, srv_buf *out);

/* ---- the reply ---------------------------------------------------------------------------- */

static const char *stop_reason(const srv_job_state *st, int n_calls) {
    if (st->finish == SRV_FINISH_LENGTH) return "max_tokens";
    return n_calls > 0 ? "tool_use" : st->stop_hit ? "stop_sequence" : "end_turn";
}

static json_t *usage_of(const srv_job_state *st, int n_prompt) {
    return json_pack("{s:i, s:i, s:i}", "input_tokens", st ? st->n_prompt : n_prompt,
                     "output_tokens", st ? st->n_gen : 0, "cache_read_input_tokens",
                     st ? st->n_reused : 0);
}

static json_t *tool_use(const srv_call *c) {
    char id[40];
    srv_new_id("toolu_", id, sizeof id);
    json_t *input = json_loads(c->arguments, JSON_ALLOW_NUL, NULL);
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", id, "name", c->name, "input",
                     input ? input : json_object());
}

/* The message object; st NULL: one just begun (no stop reason yet). */
static json_t *message(const srv_resp *r, json_t *content, const srv_job_state *st, int n_calls,
                       json_t *usage) {
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s?, s:s?, s:o}", "id", r->id, "type", "message",
                     "role", "assistant", "model", r->model, "content", content, "stop_reason",
                     st ? stop_reason(st, n_calls) : NULL, "stop_sequence",
                     st && !n_calls ? st->stop_hit : NULL, "usage", usage);
}

static bool msg_final(const srv_resp *r, const char *text, size_t len, const char *reasoning,
                      size_t rlen, const srv_call *calls, int n_calls, const srv_job_state *st,
                      srv_buf *out) {
    json_t *content = json_array();
    if (rlen)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking",
                                                 reasoning, rlen, "signature", ""));
    if (len || n_calls == 0)
        json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "text", "text", text, len));
    for (int i = 0; i < n_calls; i++)
        json_array_append_new(content, tool_use(&calls[i]));
    return srv_json_out(message(r, content, st, n_calls, usage_of(st, 0)), out);
}

static bool msg_start(srv_resp *r, srv_buf *out) {
    r->block = -1;
    r->open = 0;
    return srv_sse_typed("message_start",
                         json_pack("{s:o}", "message",
                                   message(r, json_array(), NULL, 0, usage_of(NULL, r->n_prompt))),
                         out);
}

/* Closes the open block, if any. */
static bool close_block(srv_resp *r, srv_buf *out) {
    if (!r->open) return true;
    r->open = 0;
    return srv_sse_typed("content_block_stop", json_pack("{s:i}", "index", r->block), out);
}

/* Opens a block of kind (1 text, 2 thinking) unless one of that kind is open. */
static bool open_block(srv_resp *r, int kind, srv_buf *out) {
    if (r->open == kind) return true;
    if (!close_block(r, out)) return false;
    r->open = kind;
    r->block++;
    json_t *b = kind == 1 ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                          : json_pack("{s:s, s:s}", "type", "thinking", "thinking", "");
    return srv_sse_typed("content_block_start",
                         json_pack("{s:i, s:o}", "index", r->block, "content_block", b), out);
}

static bool msg_text(srv_resp *r, const char *text, size_t len, const char *reasoning, size_t rlen,
                     srv_buf *out) {
    bool ok = true;
    if (rlen) {
        ok = open_block(r, 2, out) &&
             srv_sse_typed("content_block_delta",
                           json_pack("{s:i, s:{s:s, s:s%}}", "index", r->block, "delta", "type",
                                     "thinking_delta", "thinking", reasoning, rlen),
                           out);
    }
    if (ok && len) {
        ok = open_block(r, 1, out) &&
             srv_sse_typed("content_block_delta",
                           json_pack("{s:i, s:{s:s, s:s%}}", "index", r->block, "delta", "type",
                                     "text_delta", "text", text, len),
                           out);
    }
    return ok;
}

static bool msg_call(srv_resp *r, const srv_call *call, srv_buf *out) {
    if (!close_block(r, out)) return false;
    r->block++;
    r->n_calls++;
    json_t *b = tool_use(call);
    json_object_set_new(b, "input", json_object()); /* the input comes as deltas */
    return srv_sse_typed("content_block_start",
                         json_pack("{s:i, s:o}", "index", r->block, "content_block", b), out) &&
           srv_sse_typed("content_block_delta",
                         json_pack("{s:i, s:{s:s, s:s}}", "index", r->block, "delta", "type",
                                   "input_json_delta", "partial_json", call->arguments),
                         out) &&
           srv_sse_typed("content_block_stop", json_pack("{s:i}", "index", r->block), out);
}

static bool msg_end(srv_resp *r, const srv_job_state *st, srv_buf *out) {
    if (!srv_finish_reason(st->finish)) {
        srv_error err;
        srv_fail(&err, 500, NULL, NULL, "generation failed: %s",
                 st->error[0] ? st->error : "cancelled");
        srv_buf_str(out, "event: error\ndata: ");
        msg_error_body(&err, out);
        return srv_buf_str(out, "\n\n");
    }
    if (r->block < 0 && !open_block(r, 1, out)) return false; /* a reply has one block at least */
    return close_block(r, out) &&
           srv_sse_typed("message_delta",
                         json_pack("{s:{s:s, s:s?}, s:{s:i}}", "delta", "stop_reason",
                                   stop_reason(st, r->n_calls), "stop_sequence",
                                   r->n_calls ? NULL : st->stop_hit, "usage", "output_tokens",
                                   st->n_gen),
                         out) &&
           srv_sse_typed("message_stop", json_object(), out);
}

static void msg_error_body(const srv_error *err, srv_buf *out) {
    const char *type = err->status == 401   ? "authentication_error"
                       : err->status == 404 ? "not_found_error"
                       : err->status == 413 ? "request_too_large"
                       : err->status == 429 ? "rate_limit_error"
                       : err->status == 503 ? "overloaded_error"
                       : err->status >= 500 ? "api_error"
                                            : "invalid_request_error";
    srv_buf msg = {0};
    srv_buf_add_utf8(&msg, err->message, strlen(err->message));
    json_t *e = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", type, "message",
                          msg.s ? msg.s : "error");
    if (!srv_json_out(e, out))
        srv_buf_str(out,
                    "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of "
                    "memory\"}}");
    srv_buf_free(&msg);
}

const srv_writer srv_anthropic_writer = {
    .final = msg_final,
    .start = msg_start,
    .text = msg_text,
    .call = msg_call,
    .end = msg_end,
    .error_body = msg_error_body,
};
