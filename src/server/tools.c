/* tools.c: tools, tool choice and the conversation's calls and results (see tools.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reply.h"
#include "server/tools.h"

enum { MAX_TOOLS = 128, MAX_NAME = 64 };

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.';
        if (!ok) return false;
    }
    return true;
}

static json_t *tool_function(json_t *tool) {
    return json_object_get(tool, "function");
}

static const char *tool_name(json_t *tool) {
    return json_string_value(json_object_get(tool_function(tool), "name"));
}

static bool check_tool(json_t *tool, size_t i, srv_error *err) {
    const char *type = json_string_value(json_object_get(tool, "type"));
    if (!json_is_object(tool) || !type)
        return srv_fail(err, 400, "tools", "invalid_type",
                        "tools[%zu] must be an object with a "
                        "type",
                        i);
    if (strcmp(type, "function"))
        return srv_fail(err, 400, "tools", "unsupported_value",
                        "tools[%zu].type is '%.40s': only "
                        "function tools can be called here",
                        i, type);
    json_t *f = tool_function(tool), *params = json_object_get(f, "parameters");
    const char *name = tool_name(tool);
    if (!json_is_object(f) || !name)
        return srv_fail(err, 400, "tools", "invalid_type",
                        "tools[%zu].function must be an object "
                        "with a string name",
                        i);
    if (!name_ok(name))
        return srv_fail(err, 400, "tools", "invalid_value",
                        "tools[%zu].function.name '%.70s' must "
                        "be 1 to %d of a-z, A-Z, 0-9, _, - and .",
                        i, name, MAX_NAME);
    if (params && !json_is_null(params) && !json_is_object(params))
        return srv_fail(err, 400, "tools", "invalid_type",
                        "tools[%zu].function.parameters must "
                        "be a JSON Schema object",
                        i);
    json_t *desc = json_object_get(f, "description");
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return srv_fail(err, 400, "tools", "invalid_type",
                        "tools[%zu].function.description must "
                        "be a string",
                        i);
    return true;
}

static bool parse_choice(json_t *body, srv_tools *t, srv_error *err) {
    json_t *c = json_object_get(body, "tool_choice");
    t->choice = SRV_TOOLS_AUTO;
    if (!c || json_is_null(c)) return true;
    const char *s = json_string_value(c);
    if (s && !strcmp(s, "auto")) return true;
    if (s && !strcmp(s, "none")) return t->choice = SRV_TOOLS_NONE, true;
    if (s && !strcmp(s, "required"))
        t->choice = SRV_TOOLS_REQUIRED;
    else if (s)
        return srv_fail(err, 400, "tool_choice", "invalid_value",
                        "tool_choice '%.40s' is not "
                        "auto, none, required or {\"type\": \"function\", ...}",
                        s);
    else {
        const char *type = json_string_value(json_object_get(c, "type"));
        const char *name =
            json_string_value(json_object_get(json_object_get(c, "function"), "name"));
        if (!type || strcmp(type, "function") || !name)
            return srv_fail(err, 400, "tool_choice", "invalid_value",
                            "tool_choice must be auto, "
                            "none, required or {\"type\": \"function\", \"function\": {\"name\": "
                            "NAME}}");
        t->choice = SRV_TOOLS_NAMED;
        t->named = name;
    }
    if (!t->tools)
        return srv_fail(err, 400, "tool_choice", "invalid_value",
                        "tool_choice asks for a call but "
                        "the request has no tools");
    for (size_t i = 0; t->named && i < json_array_size(t->tools); i++)
        if (!strcmp(tool_name(json_array_get(t->tools, i)), t->named)) return true;
    if (t->named)
        return srv_fail(err, 400, "tool_choice", "invalid_value",
                        "tool_choice names '%.64s', which "
                        "is not among the tools",
                        t->named);
    return true;
}

/* The chat formats whose tools the library renders (al_chat_render_turns): their
 * markup is control tokens, which message text cannot hold. */
bool srv_tools_native(const char *tmpl_name) {
    static const char *const native[] = {"mistral", "harmony", "gemma4", "glm45", "glm47"};
    for (size_t i = 0; tmpl_name && i < sizeof native / sizeof *native; i++)
        if (!strcmp(tmpl_name, native[i])) return true;
    return false;
}

/* The formats whose templates take an assistant turn's reasoning back (srv_tools_turns). */
static bool takes_reasoning(const char *tmpl_name) {
    return srv_tools_native(tmpl_name) && strcmp(tmpl_name, "mistral");
}

/* The chat formats whose tool calls are written and read here, as messages name them. */
#define TOOL_FORMATS "chatml, llama3, mistral, harmony, gemma4, glm45 and glm47"
static bool tools_format(const char *tmpl_name) {
    return tmpl_name && (!strcmp(tmpl_name, "chatml") || !strcmp(tmpl_name, "llama3") ||
                         srv_tools_native(tmpl_name));
}

bool srv_tools_parse(json_t *body, const char *tmpl_name, const char *tmpl, srv_tools *t,
                     srv_error *err) {
    *t = (srv_tools){.parallel = true};
    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return srv_fail(err, 400, "tools", "invalid_type", "tools must be an array");
        size_t n = json_array_size(tools);
        if (n > MAX_TOOLS)
            return srv_fail(err, 400, "tools", "out_of_range", "tools has %zu entries; at most %d",
                            n, MAX_TOOLS);
        for (size_t i = 0; i < n; i++) {
            if (!check_tool(json_array_get(tools, i), i, err)) return false;
            for (size_t k = 0; k < i; k++)
                if (!strcmp(tool_name(json_array_get(tools, i)),
                            tool_name(json_array_get(tools, k))))
                    return srv_fail(err, 400, "tools", "invalid_value",
                                    "tools[%zu] and tools[%zu] "
                                    "are both named '%s'",
                                    k, i, tool_name(json_array_get(tools, i)));
        }
        if (n > 0) t->tools = json_incref(tools);
    }
    json_t *par = json_object_get(body, "parallel_tool_calls");
    if (par && !json_is_null(par) && !json_is_boolean(par))
        return srv_fail(err, 400, "parallel_tool_calls", "invalid_type",
                        "parallel_tool_calls must "
                        "be true or false");
    if (json_is_false(par)) t->parallel = false;
    if (!parse_choice(body, t, err)) return false;
    if (t->tools && t->choice != SRV_TOOLS_NONE && !tools_format(tmpl_name))
        return srv_fail(err, 400, "tools", "unsupported_value",
                        "tools are not supported with the "
                        "'%s' chat format yet (" TOOL_FORMATS " are)",
                        tmpl_name ? tmpl_name : "unknown");
    /* A grammar holds the reply to the text of its tokens, and control tokens spell
     * none: it could never let the model write [TOOL_CALLS] or <|channel|>. */
    if ((t->choice == SRV_TOOLS_REQUIRED || t->choice == SRV_TOOLS_NAMED) &&
        srv_tools_native(tmpl_name))
        return srv_fail(err, 400, "tool_choice", "unsupported_value",
                        "tool_choice '%s' is not supported with the '%s' chat format: its "
                        "calls begin with control tokens, which constrained decoding cannot "
                        "require; use \"auto\"",
                        t->choice == SRV_TOOLS_REQUIRED ? "required" : "function", tmpl_name);
    t->llama3 = tmpl_name && !strcmp(tmpl_name, "llama3");
    t->mistral = tmpl_name && !strcmp(tmpl_name, "mistral");
    t->harmony = tmpl_name && !strcmp(tmpl_name, "harmony");
    t->gemma4 = tmpl_name && !strcmp(tmpl_name, "gemma4");
    t->glm = tmpl_name && (!strcmp(tmpl_name, "glm45") || !strcmp(tmpl_name, "glm47"));
    t->xml = !t->llama3 && !srv_tools_native(tmpl_name) && tmpl && strstr(tmpl, "<function=");
    return true;
}

void srv_tools_free(srv_tools *t) {
    json_decref(t->tools);
    *t = (srv_tools){0};
}

/* ---- the conversation -------------------------------------------------------------------- */

/* Text parts joined, or the string itself (appended to b). */
static bool content_text(json_t *c, size_t i, srv_buf *b, srv_error *err) {
    static const char *const text[] = {"text", NULL};
    long bad = srv_text_parts(c, text, b);
    if (bad == -2)
        return srv_fail(err, 400, "messages", "invalid_type",
                        "messages[%zu].content must be a string or an array of text parts", i);
    if (bad >= 0)
        return srv_fail(err, 400, "messages", "invalid_type",
                        "messages[%zu].content[%ld] must be {\"type\": \"text\", \"text\": "
                        "STRING}: only text is supported",
                        i, bad);
    return true;
}

static void add_tools_block(const srv_tools *t, srv_buf *b) {
    srv_buf_str(b, b->len ? "\n\n# Tools\n\nYou may call" : "# Tools\n\nYou may call");
    srv_buf_str(b, " functions to help with the reply. They are "
                   "described inside <tools></tools>:\n<tools>");
    for (size_t i = 0; i < json_array_size(t->tools); i++) {
        char *s = json_dumps(json_array_get(t->tools, i), JSON_COMPACT | JSON_ENSURE_ASCII);
        srv_buf_printf(b, "\n%s", s ? s : "{}");
        free(s);
    }
    if (t->llama3)
        srv_buf_str(b, "\n</tools>\n\nTo call a function, reply with nothing but a JSON object "
                       "naming it and its arguments:\n{\"name\": <function-name>, \"parameters\": "
                       "<arguments-object>}");
    else if (t->xml)
        srv_buf_str(b, "\n</tools>\n\nTo call a function, write:\n<tool_call>\n<function=NAME>\n"
                       "<parameter=PARAMETER>\nVALUE\n</parameter>\n</function>\n</tool_call>");
    else
        srv_buf_str(b, "\n</tools>\n\nTo call a function, write its name and arguments as JSON "
                       "inside <tool_call></tool_call>:\n<tool_call>\n{\"name\": <function-name>, "
                       "\"arguments\": <arguments-object>}\n</tool_call>");
}

/* A call's name and its arguments (a new reference): arguments that are not JSON are
 * kept as written, as {"value": TEXT}. */
static json_t *call_args(json_t *call, size_t i, const char **name, srv_error *err) {
    json_t *f = json_object_get(call, "function");
    json_t *args = json_object_get(f, "arguments");
    *name = json_string_value(json_object_get(f, "name"));
    if (!*name || (args && !json_is_string(args) && !json_is_object(args)))
        return srv_fail(err, 400, "messages", "invalid_type",
                        "messages[%zu].tool_calls: each call "
                        "needs function.name and function.arguments (a JSON string)",
                        i),
               NULL;
    json_t *parsed = json_is_string(args)
                         ? json_loads(json_string_value(args), JSON_ALLOW_NUL, NULL)
                         : json_incref(args);
    if (!parsed && args && json_string_length(args) > 0)
        parsed = json_pack("{s:O}", "value", args); /* not JSON: kept as written */
    if (!parsed) parsed = json_object();
    if (!parsed) srv_fail(err, 500, NULL, NULL, "out of memory");
    return parsed;
}

/* One call of an assistant message, in the template's form. */
static bool add_call(const srv_tools *t, json_t *call, size_t i, srv_buf *b, srv_error *err) {
    const char *name;
    json_t *parsed = call_args(call, i, &name, err);
    if (!parsed) return false;
    if (!t->xml) {
        json_t *obj =
            json_pack("{s:s, s:O}", "name", name, t->llama3 ? "parameters" : "arguments", parsed);
        char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        srv_buf_printf(b, t->llama3 ? "%s" : "<tool_call>\n%s\n</tool_call>", s ? s : "{}");
        free(s);
        json_decref(obj);
    } else {
        srv_buf_printf(b, "<tool_call>\n<function=%s>\n", name);
        const char *k;
        json_t *v;
        json_object_foreach(parsed, k, v) {
            char *s = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            srv_buf_printf(b, "<parameter=%s>\n%s\n</parameter>\n", k,
                           s ? s : json_string_value(v));
            free(s);
        }
        srv_buf_str(b, "</function>\n</tool_call>");
    }
    json_decref(parsed);
    return true;
}

typedef struct conv {
    al_chat_message *m;
    int n, cap;
    char **owned;
    int n_owned;
} conv;

/* Appends a message whose text is b's (taken over). */
static bool push(conv *c, const char *role, srv_buf *b, srv_error *err) {
    if (b->failed || c->n == c->cap) {
        srv_buf_free(b);
        return srv_fail(err, 500, NULL, NULL, "out of memory");
    }
    srv_buf_add(b, "", 0);
    c->owned[c->n_owned++] = b->s;
    c->m[c->n++] = (al_chat_message){.role = role, .content = b->s};
    *b = (srv_buf){0};
    return true;
}

static bool convert(const srv_tools *t, bool tools_on, json_t *msgs, conv *c, srv_error *err) {
    size_t n = json_array_size(msgs);
    bool sys_done = !tools_on;
    srv_buf results = {0}; /* a run of tool results, one user turn */
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *r = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !r)
            return srv_buf_free(&results), srv_fail(err, 400, "messages", "invalid_type",
                                                    "messages[%zu] must be an object with a "
                                                    "string role",
                                                    i);
        bool tool = !strcmp(r, "tool");
        if (!tool && results.len && !push(c, "user", &results, err)) return false;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && !tool)
            return srv_fail(err, 400, "messages", "invalid_value",
                            "messages[%zu].role '%.40s' is "
                            "not system, user, assistant or tool",
                            i, r);
        if (!sys_done && strcmp(r, "system")) { /* tools need a system message: one first */
            srv_buf b = {0};
            add_tools_block(t, &b);
            if (!push(c, "system", &b, err)) return false;
            sys_done = true;
        }
        json_t *content = json_object_get(m, "content"), *calls = json_object_get(m, "tool_calls");
        srv_buf b = {0};
        bool ok = true;
        if (tool && t->llama3) { /* a message of its own, in the tool role */
            if (!content_text(content, i, &b, err)) return srv_buf_free(&b), false;
            if (!push(c, "tool", &b, err)) return false;
            continue;
        }
        if (tool) {
            srv_buf_str(&results, results.len ? "\n<tool_response>\n" : "<tool_response>\n");
            ok = content_text(content, i, &results, err);
            srv_buf_str(&results, "\n</tool_response>");
            if (!ok) return srv_buf_free(&results), false;
            continue;
        }
        bool empty_ok = !strcmp(r, "assistant") && json_array_size(calls) > 0;
        if (!(empty_ok && (!content || json_is_null(content))))
            ok = content_text(content, i, &b, err);
        if (ok && !strcmp(r, "system") && !sys_done) {
            add_tools_block(t, &b);
            sys_done = true;
        }
        if (ok && calls && !json_is_null(calls) && strcmp(r, "assistant"))
            ok = srv_fail(err, 400, "messages", "invalid_value",
                          "messages[%zu]: only assistant "
                          "messages have tool_calls",
                          i);
        if (ok && calls && !json_is_null(calls) && !json_is_array(calls))
            ok = srv_fail(err, 400, "messages", "invalid_type",
                          "messages[%zu].tool_calls must be "
                          "an array",
                          i);
        for (size_t k = 0; ok && k < json_array_size(calls); k++) {
            if (b.len) srv_buf_str(&b, "\n");
            ok = add_call(t, json_array_get(calls, k), i, &b, err);
        }
        if (!ok) {
            srv_buf_free(&b);
            return false;
        }
        if (!push(c, r, &b, err)) return false;
    }
    return !results.len || push(c, "user", &results, err);
}

static bool uses_tools(json_t *msgs) {
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *r = json_string_value(json_object_get(m, "role"));
        if ((r && !strcmp(r, "tool")) || json_array_size(json_object_get(m, "tool_calls")) > 0)
            return true;
    }
    return false;
}

bool srv_tools_messages(const srv_tools *t, const char *tmpl_name, json_t *msgs,
                        al_chat_message **out, int *n_out, char ***owned, int *n_owned,
                        srv_error *err) {
    size_t n = json_array_size(msgs);
    *out = NULL, *n_out = 0, *owned = NULL, *n_owned = 0;
    if (uses_tools(msgs) && !tools_format(tmpl_name))
        return srv_fail(err, 400, "messages", "unsupported_value",
                        "tool calls and tool messages "
                        "are not supported with the '%s' chat format yet (" TOOL_FORMATS
                        " are)",
                        tmpl_name ? tmpl_name : "unknown");
    /* their markup is control tokens: srv_tools_turns, for al_chat_tokenize_turns */
    if (srv_tools_native(tmpl_name) && (uses_tools(msgs) || srv_tools_parsed(t)))
        return srv_fail(err, 500, "messages", "unsupported_value", "tool calls with the '%s' "
                        "chat format are rendered by srv_tools_turns", tmpl_name);
    conv c = {.cap = (int)n + 1};
    c.m = calloc(n + 1, sizeof *c.m);
    c.owned = calloc(n + 1, sizeof *c.owned);
    bool ok = c.m && c.owned ? convert(t, srv_tools_parsed(t), msgs, &c, err)
                             : srv_fail(err, 500, NULL, NULL, "out of memory");
    *out = c.m;
    *n_out = c.n;
    *owned = c.owned;
    *n_owned = c.n_owned;
    return ok;
}

/* ---- the native formats (Mistral, Harmony, Gemma 4, GLM): turns for the library ------------ */

typedef struct turns {
    al_chat_turn *m;
    int n;
    char **owned;
    int n_owned;
} turns;

static const char *keep(turns *c, char *s) {
    if (s) c->owned[c->n_owned++] = s;
    return s;
}

/* An assistant message's tool_calls as the library reads them: [{"id", "function":
 * {"name", "arguments": {...}}}], arguments that are not an object kept as {"value": ...}. */
static bool turn_calls(json_t *calls, size_t i, turns *c, const char **out, srv_error *err) {
    json_t *arr = json_array();
    bool ok = arr != NULL;
    for (size_t k = 0; ok && k < json_array_size(calls); k++) {
        json_t *call = json_array_get(calls, k), *id = json_object_get(call, "id");
        const char *name;
        json_t *args = call_args(call, i, &name, err);
        if (!args) return json_decref(arr), false;
        if (!json_is_object(args)) args = json_pack("{s:o}", "value", args);
        json_t *o = json_pack("{s:{s:s, s:o}}", "function", "name", name, "arguments", args);
        ok = o && (!json_is_string(id) || !json_object_set(o, "id", id)) &&
             !json_array_append_new(arr, o);
    }
    *out = ok ? keep(c, json_dumps(arr, JSON_COMPACT)) : NULL;
    json_decref(arr);
    return *out || srv_fail(err, 500, NULL, NULL, "out of memory");
}

/* What the model reasoned before its reply, as OpenAI-style clients send it back. */
static const char *reasoning_of(json_t *m) {
    static const char *const keys[] = {"reasoning_content", "reasoning", "thinking"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *r = json_string_value(json_object_get(m, keys[k]));
        if (r) return r;
    }
    return NULL;
}

/* One message as a turn; texts it makes are kept in c. */
static bool one_turn(json_t *m, size_t i, bool reasoning, turns *c, srv_error *err) {
    const char *r = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !r)
        return srv_fail(err, 400, "messages", "invalid_type",
                        "messages[%zu] must be an object with a string role", i);
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
        return srv_fail(err, 400, "messages", "invalid_value",
                        "messages[%zu].role '%.40s' is not system, user, assistant or tool", i, r);
    json_t *content = json_object_get(m, "content"), *calls = json_object_get(m, "tool_calls");
    const bool assistant = !strcmp(r, "assistant"), tool = !strcmp(r, "tool");
    al_chat_turn turn = {.role = r};
    if (calls && !json_is_null(calls) && !assistant)
        return srv_fail(err, 400, "messages", "invalid_value",
                        "messages[%zu]: only assistant messages have tool_calls", i);
    if (calls && !json_is_null(calls) && !json_is_array(calls))
        return srv_fail(err, 400, "messages", "invalid_type",
                        "messages[%zu].tool_calls must be an array", i);
    if (!(assistant && json_array_size(calls) > 0 && (!content || json_is_null(content)))) {
        srv_buf b = {0};
        if (!content_text(content, i, &b, err)) return srv_buf_free(&b), false;
        srv_buf_add(&b, "", 0);
        if (b.failed) return srv_buf_free(&b), srv_fail(err, 500, NULL, NULL, "out of memory");
        turn.content = keep(c, b.s);
    }
    if (json_array_size(calls) > 0 && !turn_calls(calls, i, c, &turn.tool_calls, err))
        return false;
    if (tool) {
        turn.tool_call_id = json_string_value(json_object_get(m, "tool_call_id"));
        turn.name = json_string_value(json_object_get(m, "name"));
    }
    if (assistant && reasoning) turn.reasoning = reasoning_of(m);
    c->m[c->n++] = turn;
    return true;
}

bool srv_tools_turns(const srv_tools *t, const char *tmpl_name, json_t *msgs, al_chat_turn **out,
                     int *n_out, const char **tools_json, char ***owned, int *n_owned,
                     srv_error *err) {
    const size_t n = json_array_size(msgs);
    const bool reasoning = takes_reasoning(tmpl_name);
    turns c = {0};
    c.m = calloc(n + 1, sizeof *c.m);
    c.owned = calloc(2 * n + 2, sizeof *c.owned); /* a text and calls per message, the tools */
    bool ok = c.m && c.owned;
    if (!ok) srv_fail(err, 500, NULL, NULL, "out of memory");
    *tools_json = NULL;
    if (ok && srv_tools_parsed(t)) {
        *tools_json = keep(&c, json_dumps(t->tools, JSON_COMPACT));
        ok = *tools_json || srv_fail(err, 500, NULL, NULL, "out of memory");
    }
    for (size_t i = 0; ok && i < n; i++)
        ok = one_turn(json_array_get(msgs, i), i, reasoning, &c, err);
    *out = c.m;
    *n_out = c.n;
    *owned = c.owned;
    *n_owned = c.n_owned;
    return ok;
}

/* ---- tool_choice required or named: the calls as a grammar -------------------------------- */

bool srv_tools_grammar(const srv_tools *t, srv_gram *g, bool *any, srv_error *err) {
    *any = false;
    if (!t->tools || (t->choice != SRV_TOOLS_REQUIRED && t->choice != SRV_TOOLS_NAMED)) return true;
    srv_buf alts = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(t->tools); i++) {
        json_t *tool = json_array_get(t->tools, i);
        const char *name = tool_name(tool);
        if (t->choice == SRV_TOOLS_NAMED && strcmp(name, t->named)) continue;
        json_t *params = json_object_get(tool_function(tool), "parameters"), *own = NULL;
        if (!params || json_is_null(params)) params = own = json_pack("{s:s}", "type", "object");
        char rule[32], head[32], text[160];
        snprintf(rule, sizeof rule, "tool%zu-args", i);
        snprintf(head, sizeof head, "tool%zu-head", i);
        snprintf(text, sizeof text, "{\"name\": \"%s\", \"%s\": ", name,
                 t->llama3 ? "parameters" : "arguments");
        ok = srv_gram_schema(g, params, rule) && srv_gram_literal_rule(g, head, text, strlen(text));
        if (!ok)
            srv_fail(err, 400, "tools", "unsupported_schema", "tools[%zu].function.parameters: %s",
                     i, g->err);
        srv_buf_printf(&alts, "%s%s %s", alts.len ? " | " : "", head, rule);
        json_decref(own);
    }
    if (ok) {
        srv_gram_raw(g, t->llama3 ? "tool-call ::= ( " : "tool-call ::= \"<tool_call>\\n\" ( ");
        srv_gram_raw(g, alts.s);
        srv_gram_raw(g, t->llama3 ? " ) \"}\"\n" : " ) \"}\\n</tool_call>\"\n");
        srv_gram_raw(g, t->parallel ? "root ::= tool-call ( \"\\n\" tool-call )*\n"
                                    : "root ::= tool-call\n");
        ok = !g->text.failed || srv_fail(err, 500, NULL, NULL, "out of memory");
        *any = ok;
    }
    srv_buf_free(&alts);
    return ok;
}
