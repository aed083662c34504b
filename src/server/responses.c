/* responses.c: /v1/responses requests as chat requests, replies as response objects,
 * and the store behind previous_response_id (see responses.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/responses.h"

/* ---- the store ------------------------------------------------------------------------------ */

struct srv_store {
    pthread_mutex_t lock;
    char ids[SRV_STORE_MAX][48];
    json_t *msgs[SRV_STORE_MAX];
    int next; /* the slot written next: the oldest */
};

srv_store *srv_store_create(void) {
    srv_store *s = calloc(1, sizeof *s);
    if (s && pthread_mutex_init(&s->lock, NULL)) {
        free(s);
        return NULL;
    }
    return s;
}

void srv_store_destroy(srv_store *s) {
    if (!s) return;
    for (int i = 0; i < SRV_STORE_MAX; i++)
        json_decref(s->msgs[i]);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void srv_store_put(srv_store *s, const char *id, json_t *messages) {
    if (!s || !messages) return;
    pthread_mutex_lock(&s->lock);
    json_decref(s->msgs[s->next]);
    s->msgs[s->next] = json_incref(messages);
    snprintf(s->ids[s->next], sizeof s->ids[s->next], "%s", id);
    s->next = (s->next + 1) % SRV_STORE_MAX;
    pthread_mutex_unlock(&s->lock);
}

json_t *srv_store_get(srv_store *s, const char *id) {
    json_t *m = NULL;
    if (!s) return NULL;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < SRV_STORE_MAX && !m; i++)
        if (s->msgs[i] && !strcmp(s->ids[i], id)) m = json_incref(s->msgs[i]);
    pthread_mutex_unlock(&s->lock);
    return m;
}

/* ---- the request --------------------------------------------------------------------------- */

/* A message item's content: a string, or input_text / output_text parts joined. */
static json_t *item_text(json_t *c, size_t i, srv_error *err) {
    static const char *const parts[] = {"input_text", "output_text", NULL};
    srv_buf b = {0};
    srv_buf_add(&b, "", 0);
    long bad = srv_text_parts(c, parts, &b);
    json_t *s = bad == -1 && !b.failed ? json_stringn(b.s, b.len) : NULL;
    srv_buf_free(&b);
    if (bad == -2)
        srv_fail(err, 400, "input", "invalid_type",
                 "input[%zu].content must be a string or an array of parts", i);
    else if (bad >= 0) {
        const char *type =
            json_string_value(json_object_get(json_array_get(c, (size_t)bad), "type"));
        srv_fail(err, 400, "input", "unsupported_value",
                 "input[%zu].content[%ld]: a part of type '%.40s' is not supported (input_text "
                 "and output_text are)",
                 i, bad, type ? type : "(none)");
    } else if (!s)
        srv_fail(err, 500, NULL, NULL, "out of memory");
    return s;
}

/* The assistant message that function_call items join: the last message when it is an
 * assistant's, else a new one. */
static json_t *assistant_for_calls(json_t *msgs) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!last || !role || strcmp(role, "assistant")) {
        last = json_pack("{s:s, s:n}", "role", "assistant", "content");
        json_array_append_new(msgs, last);
    }
    if (!json_object_get(last, "tool_calls")) json_object_set_new(last, "tool_calls", json_array());
    return last;
}

static bool input_items(json_t *input, json_t *msgs, srv_error *err) {
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return true;
    }
    if (!json_is_array(input))
        return srv_fail(err, 400, "input", "invalid_type",
                        "input must be a string or an array of "
                        "items");
    for (size_t i = 0; i < json_array_size(input); i++) {
        json_t *it = json_array_get(input, i);
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!json_is_object(it))
            return srv_fail(err, 400, "input", "invalid_type", "input[%zu] must be an object", i);
        if ((!type && role) || (type && !strcmp(type, "message"))) {
            if (!role || (strcmp(role, "user") && strcmp(role, "system") &&
                          strcmp(role, "developer") && strcmp(role, "assistant")))
                return srv_fail(err, 400, "input", "invalid_value",
                                "input[%zu].role must be user, "
                                "system, developer or assistant",
                                i);
            json_t *text = item_text(json_object_get(it, "content"), i, err);
            if (!text) return false;
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role",
                                                  strcmp(role, "developer") ? role : "system",
                                                  "content", text));
        } else if (type && !strcmp(type, "function_call")) {
            json_t *a = assistant_for_calls(msgs);
            json_t *args = json_object_get(it, "arguments");
            json_array_append_new(json_object_get(a, "tool_calls"),
                                  json_pack("{s:O*, s:s, s:{s:O*, s:O*}}", "id",
                                            json_object_get(it, "call_id"), "type", "function",
                                            "function", "name", json_object_get(it, "name"),
                                            "arguments", args));
        } else if (type && !strcmp(type, "function_call_output")) {
            json_t *out = json_object_get(it, "output");
            json_t *text = json_is_string(out) ? json_incref(out) : item_text(out, i, err);
            if (!text) return false;
            json_array_append_new(msgs,
                                  json_pack("{s:s, s:O*, s:o}", "role", "tool", "tool_call_id",
                                            json_object_get(it, "call_id"), "content", text));
        } else if (type && !strcmp(type, "reasoning")) {
            continue; /* an earlier turn's reasoning: not shown to the model again */
        } else {
            return srv_fail(err, 400, "input", "unsupported_value",
                            "input[%zu]: an item of type "
                            "'%.40s' is not supported",
                            i, type ? type : "(none)");
        }
    }
    return true;
}

static bool tools_and_format(json_t *body, json_t *chat, srv_error *err) {
    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return srv_fail(err, 400, "tools", "invalid_type", "tools must be an array");
        json_t *list = json_array();
        json_object_set_new(chat, "tools", list);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            json_t *t = json_array_get(tools, i);
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function"))
                return srv_fail(err, 400, "tools", "unsupported_value",
                                "tools[%zu]: a tool of type "
                                "'%.40s' is not supported (function tools are)",
                                i, type ? type : "(none)");
            json_array_append_new(list, json_pack("{s:s, s:{s:O*, s:O*, s:O*}}", "type", "function",
                                                  "function", "name", json_object_get(t, "name"),
                                                  "description", json_object_get(t, "description"),
                                                  "parameters", json_object_get(t, "parameters")));
        }
    }
    json_t *tc = json_object_get(body, "tool_choice");
    if (tc && json_is_object(tc)) { /* {"type": "function", "name": N}: the chat shape nests it */
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!type || strcmp(type, "function"))
            return srv_fail(err, 400, "tool_choice", "invalid_value",
                            "tool_choice must be auto, none, "
                            "required or {\"type\": \"function\", \"name\": NAME}");
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s, s:{s:O*}}", "type", "function", "function", "name",
                                      json_object_get(tc, "name")));
    } else if (tc) {
        json_object_set(chat, "tool_choice", tc);
    }
    json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (fmt && !json_is_null(fmt) && !ft)
        return srv_fail(err, 400, "text", "invalid_type", "text.format must have a type");
    if (ft && !strcmp(ft, "json_schema"))
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s, s:{s:O*, s:O*, s:O*}}", "type", "json_schema",
                                      "json_schema", "name", json_object_get(fmt, "name"), "schema",
                                      json_object_get(fmt, "schema"), "strict",
                                      json_object_get(fmt, "strict")));
    else if (ft)
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", ft));
    return true;
}

json_t *srv_responses_request(json_t *body, int n_ctx, srv_store *store, srv_error *err) {
    json_t *chat = json_object(), *msgs = NULL;
    json_t *prev = json_object_get(body, "previous_response_id");
    bool ok = true;
    if (prev && !json_is_null(prev)) {
        const char *id = json_string_value(prev);
        if (!id)
            ok = srv_fail(err, 400, "previous_response_id", "invalid_type",
                          "previous_response_id must be a string");
        else if (!(msgs = srv_store_get(store, id)))
            ok = srv_fail(err, 404, "previous_response_id", "previous_response_not_found",
                          "previous response '%.60s' is not held by this server (it keeps the last "
                          "%d stored)",
                          id, SRV_STORE_MAX);
        if (msgs) { /* a copy, without the earlier instructions (they do not carry over) */
            json_t *copy = json_deep_copy(msgs);
            json_decref(msgs);
            msgs = copy;
            if (json_is_true(json_object_get(json_array_get(msgs, 0), "instructions")))
                json_array_remove(msgs, 0);
        }
    }
    if (!msgs) msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    json_t *ins = json_object_get(body, "instructions");
    if (ok && ins && !json_is_null(ins)) {
        if (!json_is_string(ins))
            ok =
                srv_fail(err, 400, "instructions", "invalid_type", "instructions must be a string");
        else
            json_array_insert_new(
                msgs, 0, /* marked: a later response drops it */
                json_pack("{s:s, s:O, s:b}", "role", "system", "content", ins, "instructions", 1));
    }
    json_t *input = json_object_get(body, "input");
    if (ok && !input) ok = srv_fail(err, 400, "input", "missing", "input is required");
    ok = ok && input_items(input, msgs, err) && tools_and_format(body, chat, err);
    json_t *mt = json_object_get(body, "max_output_tokens");
    if (ok && mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1)
            ok = srv_fail(err, 400, "max_output_tokens", "invalid_type",
                          "max_output_tokens must be "
                          "a positive integer");
        else
            json_object_set_new(
                chat, "max_tokens",
                json_integer(json_integer_value(mt) < n_ctx ? json_integer_value(mt) : n_ctx));
    }
    static const char *const same[] = {"model", "stream", "temperature", "top_p",
                                       "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v) json_object_set(chat, same[i], v);
    }
    if (!ok) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

json_t *srv_responses_history(json_t *messages, const char *text, size_t len, const srv_call *calls,
                              int n_calls) {
    json_t *h = json_deep_copy(messages);
    json_t *m = json_pack("{s:s, s:s%}", "role", "assistant", "content", text ? text : "", len);
    if (n_calls > 0) {
        json_t *list = json_array();
        for (int i = 0; i < n_calls; i++)
            json_array_append_new(list, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", "", "type",
                                                  "function", "function", "name", calls[i].name,
                                                  "arguments", calls[i].arguments));
        json_object_set_new(m, "tool_calls", list);
    }
    json_array_append_new(h, m);
    return h;
}

/* ---- the reply ----------------------------------------------------------------------------------
 */

static json_t *message_item(const char *id, const char *text, size_t len, const char *status) {
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%, s:[]}]}", "type", "message", "id", id,
                     "status", status, "role", "assistant", "content", "type", "output_text",
                     "text", text, len, "annotations");
}

static json_t *reasoning_item(const char *id, const char *text, size_t len) {
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:s%}]}", "type", "reasoning", "id", id, "summary",
                     "content", "type", "reasoning_text", "text", text, len);
}

static json_t *call_item(const char *id, const srv_call *c, const char *args, const char *status) {
    char call_id[48];
    srv_new_id("call_", call_id, sizeof call_id);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "type", "function_call", "id", id, "call_id",
                     call_id, "name", c->name, "arguments", args, "status", status);
}

/* The response object: status from the end state (NULL: in progress). */
static json_t *response(const srv_resp *r, json_t *output, const srv_job_state *st) {
    const char *status = !st                               ? "in_progress"
                         : st->finish == SRV_FINISH_LENGTH ? "incomplete"
                                                           : "completed";
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:n, s:b, s:s, s:[], s:{s:{s:s}}, s:b}",
                          "id", r->id, "object", "response", "created_at", (json_int_t)r->created,
                          "status", status, "model", r->model, "output", output, "error",
                          "parallel_tool_calls", 1, "tool_choice", "auto", "tools", "text",
                          "format", "type", "text", "store", r->store);
    json_object_set_new(o, "previous_response_id",
                        r->prev_id ? json_string(r->prev_id) : json_null());
    json_object_set_new(o, "incomplete_details",
                        st && st->finish == SRV_FINISH_LENGTH
                            ? json_pack("{s:s}", "reason", "max_output_tokens")
                            : json_null());
    int np = st ? st->n_prompt : r->n_prompt, ng = st ? st->n_gen : 0;
    json_object_set_new(o, "usage",
                        json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "input_tokens", np,
                                  "output_tokens", ng, "total_tokens", np + ng,
                                  "input_tokens_details", "cached_tokens", st ? st->n_reused : 0,
                                  "output_tokens_details", "reasoning_tokens", 0));
    return o;
}

static bool resp_final(const srv_resp *r, const char *text, size_t len, const char *reasoning,
                       size_t rlen, const srv_call *calls, int n_calls, const srv_job_state *st,
                       srv_buf *out) {
    json_t *output = json_array();
    char id[48];
    if (rlen) {
        srv_new_id("rs_", id, sizeof id);
        json_array_append_new(output, reasoning_item(id, reasoning, rlen));
    }
    if (len || n_calls == 0) {
        srv_new_id("msg_", id, sizeof id);
        json_array_append_new(output, message_item(id, text, len, "completed"));
    }
    for (int i = 0; i < n_calls; i++) {
        srv_new_id("fc_", id, sizeof id);
        json_array_append_new(output, call_item(id, &calls[i], calls[i].arguments, "completed"));
    }
    return srv_json_out(response(r, output, st), out);
}

/* One event: "event: TYPE\ndata: {...}\n\n" with type and sequence_number (obj taken). */
static bool event(srv_resp *r, const char *type, json_t *obj, srv_buf *out) {
    if (obj) json_object_set_new(obj, "sequence_number", json_integer(r->seq++));
    return srv_sse_typed(type, obj, out);
}

static bool resp_start(srv_resp *r, srv_buf *out) {
    if (!r->items) r->items = json_array();
    return event(r, "response.created",
                 json_pack("{s:o}", "response", response(r, json_array(), NULL)), out) &&
           event(r, "response.in_progress",
                 json_pack("{s:o}", "response", response(r, json_array(), NULL)), out);
}

/* Closes the open item (a message or reasoning), recording it. */
static bool close_item(srv_resp *r, srv_buf *out) {
    if (!r->open) return true;
    const char *text = r->acc.s ? r->acc.s : "";
    int idx = r->n_items - 1;
    bool ok = true;
    json_t *item;
    if (r->open == 1) {
        ok = event(r, "response.output_text.done",
                   json_pack("{s:s, s:i, s:i, s:s%}", "item_id", r->item_id, "output_index", idx,
                             "content_index", 0, "text", text, r->acc.len),
                   out) &&
             event(r, "response.content_part.done",
                   json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", r->item_id,
                             "output_index", idx, "content_index", 0, "part", "type", "output_text",
                             "text", text, r->acc.len, "annotations"),
                   out);
        item = message_item(r->item_id, text, r->acc.len, "completed");
    } else {
        item = reasoning_item(r->item_id, text, r->acc.len);
    }
    json_array_append(r->items, item);
    ok = ok && event(r, "response.output_item.done",
                     json_pack("{s:i, s:o}", "output_index", idx, "item", item), out);
    r->open = 0;
    r->acc.len = 0;
    return ok;
}

/* Opens an item of kind (1 message, 2 reasoning) unless one is open. */
static bool open_item(srv_resp *r, int kind, srv_buf *out) {
    if (r->open == kind) return true;
    if (!close_item(r, out)) return false;
    r->open = kind;
    srv_new_id(kind == 1 ? "msg_" : "rs_", r->item_id, sizeof r->item_id);
    int idx = r->n_items++;
    json_t *item =
        kind == 1 ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", r->item_id,
                              "status", "in_progress", "role", "assistant", "content")
                  : json_pack("{s:s, s:s, s:[], s:[]}", "type", "reasoning", "id", r->item_id,
                              "summary", "content");
    bool ok = event(r, "response.output_item.added",
                    json_pack("{s:i, s:o}", "output_index", idx, "item", item), out);
    if (ok && kind == 1)
        ok = event(r, "response.content_part.added",
                   json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", r->item_id,
                             "output_index", idx, "content_index", 0, "part", "type", "output_text",
                             "text", "", "annotations"),
                   out);
    return ok;
}

/* A delta of the open item of kind (1 message, 2 reasoning), kept for its done event. */
static bool delta(srv_resp *r, int kind, const char *type, const char *s, size_t n, srv_buf *out) {
    bool ok = open_item(r, kind, out) &&
              event(r, type,
                    json_pack("{s:s, s:i, s:i, s:s%}", "item_id", r->item_id, "output_index",
                              r->n_items - 1, "content_index", 0, "delta", s, n),
                    out);
    srv_buf_add(&r->acc, s, n);
    return ok && !r->acc.failed;
}

static bool resp_text(srv_resp *r, const char *text, size_t len, const char *reasoning, size_t rlen,
                      srv_buf *out) {
    return (!rlen || delta(r, 2, "response.reasoning_text.delta", reasoning, rlen, out)) &&
           (!len || delta(r, 1, "response.output_text.delta", text, len, out));
}

static bool resp_call(srv_resp *r, const srv_call *call, srv_buf *out) {
    if (!close_item(r, out)) return false;
    char id[48];
    srv_new_id("fc_", id, sizeof id);
    int idx = r->n_items++;
    r->n_calls++;
    json_t *added = call_item(id, call, "", "in_progress");
    json_t *done = json_deep_copy(added);
    json_object_set_new(done, "arguments", json_string(call->arguments));
    json_object_set_new(done, "status", json_string("completed"));
    json_array_append(r->items, done);
    return event(r, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", idx, "item", added), out) &&
           event(r, "response.function_call_arguments.delta",
                 json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", idx, "delta",
                           call->arguments),
                 out) &&
           event(r, "response.function_call_arguments.done",
                 json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", idx, "arguments",
                           call->arguments),
                 out) &&
           event(r, "response.output_item.done",
                 json_pack("{s:i, s:o}", "output_index", idx, "item", done), out);
}

static bool resp_end(srv_resp *r, const srv_job_state *st, srv_buf *out) {
    if (!srv_finish_reason(st->finish)) {
        return event(r, "error",
                     json_pack("{s:s, s:s*, s:n}", "code", "server_error", "message",
                               st->error[0] ? st->error : "generation failed", "param"),
                     out);
    }
    if (r->n_items == 0 && !open_item(r, 1, out)) return false; /* one message at least */
    if (!close_item(r, out)) return false;
    const char *type =
        st->finish == SRV_FINISH_LENGTH ? "response.incomplete" : "response.completed";
    return event(r, type, json_pack("{s:o}", "response", response(r, json_incref(r->items), st)),
                 out);
}

void srv_responses_free(srv_resp *r) {
    json_decref(r->items);
    r->items = NULL;
    srv_buf_free(&r->acc);
}

const srv_writer srv_responses_writer = {
    .final = resp_final,
    .start = resp_start,
    .text = resp_text,
    .call = resp_call,
    .end = resp_end,
    .error_body = NULL,
};
