/* api.c: OpenAI chat and text completion requests, checked field by field, and the
 * response objects and server-sent-event chunks (see api.h).
 *
 * Field rules (a field that is absent or null keeps its default):
 *   max_completion_tokens / max_tokens  integer in [1, n_ctx]; default min(cap, room left)
 *   temperature [0, 2] (default 1, 0 = greedy)   top_p (0, 1] (default 1)
 *   frequency_penalty, presence_penalty [-2, 2]  seed: any integer (default: random)
 *   n: 1 only   stream: boolean   stream_options.include_usage: boolean
 *   stop: a string or up to 4 non-empty strings
 *   top_k (integer >= 0) and min_p [0, 1], as llama.cpp's server takes them
 * JSON itself is parsed by jansson, which also rejects invalid UTF-8 and lone surrogate
 * escapes; the body is checked for UTF-8 first so that the message says so plainly.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/anthropic.h"
#include "server/api.h"
#include "server/responses.h"
#include "server/schema.h"
#include "server/tools.h"
#include "util.h"

enum { MAX_STOP_BYTES = 256 };

/* ---- optional fields: 0 absent or null, 1 read, -1 refused (err filled) ---------------- */

static int opt_number(json_t *o, const char *key, double lo, double hi, bool lo_open,
                      double *out, srv_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return srv_fail(err, 400, key, "invalid_type", "%s must be a number", key), -1;
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return srv_fail(err, 400, key, "out_of_range", "%s %g is out of range %c%g, %g]", key, x,
                        lo_open ? '(' : '[', lo, hi), -1;
    *out = x;
    return 1;
}

static int opt_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                   srv_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return srv_fail(err, 400, key, "invalid_type", "%s must be an integer", key), -1;
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return srv_fail(err, 400, key, "out_of_range", "%s %lld is out of range [%lld, %lld]",
                        key, x, lo, hi), -1;
    *out = x;
    return 1;
}

static int opt_bool(json_t *o, const char *key, bool *out, srv_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return srv_fail(err, 400, key, "invalid_type", "%s must be true or false", key), -1;
    *out = json_is_true(v);
    return 1;
}

/* A seed for requests that bring none: distinct per request, not reproducible. */
static uint64_t fresh_seed(void) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = __atomic_add_fetch(&counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED) ^
                 ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The sampling fields. Defaults are OpenAI's (temperature 1, top_p 1, no penalties),
 * with none of the library's own cuts (top-k, min-p) unless the request asks. */
static bool parse_sampling(const srv_api *api, json_t *o, al_sampler_params *sp, srv_error *err) {
    *sp = al_sampler_default_params();
    sp->temperature = 1;
    sp->top_k = 0;
    sp->top_p = 1;
    sp->min_p = 0;
    sp->repeat_penalty = 1;
    sp->penalty_last_n = api->n_ctx; /* the whole generated text */
    sp->seed = fresh_seed();
    double d;
    long long i;
    int r;
    if ((r = opt_number(o, "temperature", 0, 2, false, &d, err)) < 0) return false;
    if (r) sp->temperature = (float)d;
    if ((r = opt_number(o, "top_p", 0, 1, true, &d, err)) < 0) return false;
    if (r) sp->top_p = (float)d;
    if ((r = opt_number(o, "min_p", 0, 1, false, &d, err)) < 0) return false;
    if (r) sp->min_p = (float)d;
    if ((r = opt_number(o, "frequency_penalty", -2, 2, false, &d, err)) < 0) return false;
    if (r) sp->frequency_penalty = (float)d;
    if ((r = opt_number(o, "presence_penalty", -2, 2, false, &d, err)) < 0) return false;
    if (r) sp->presence_penalty = (float)d;
    if ((r = opt_int(o, "top_k", 0, api->n_vocab, &i, err)) < 0) return false;
    if (r) sp->top_k = (int)i;
    if ((r = opt_int(o, "seed", INT64_MIN, INT64_MAX, &i, err)) < 0) return false;
    if (r) sp->seed = (uint64_t)i;
    return true;
}

/* stop: a string or an array of up to SRV_MAX_STOP strings; copies go into the job. */
static bool parse_stop(json_t *o, srv_job *j, srv_error *err) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return srv_fail(err, 400, "stop", "invalid_type",
                        "stop must be a string or an array of strings");
    if (n > SRV_MAX_STOP)
        return srv_fail(err, 400, "stop", "out_of_range", "stop has %zu strings; at most %d are "
                        "allowed", n, SRV_MAX_STOP);
    for (size_t k = 0; k < n; k++) {
        json_t *s = json_is_array(v) ? json_array_get(v, k) : v;
        if (!json_is_string(s))
            return srv_fail(err, 400, "stop", "invalid_type", "stop[%zu] must be a string", k);
        size_t len = json_string_length(s);
        if (len == 0 || len > MAX_STOP_BYTES)
            return srv_fail(err, 400, "stop", "out_of_range", "stop[%zu] has %zu bytes; a stop "
                            "string has 1 to %d", k, len, MAX_STOP_BYTES);
        if (!(j->stop[j->n_stop] = strdup(json_string_value(s))))
            return srv_fail(err, 500, NULL, NULL, "out of memory");
        j->n_stop++;
    }
    return true;
}

/* ---- prompts ---------------------------------------------------------------------------- */

static bool tokenize(const srv_api *api, const char *text, size_t len, const char *param,
                     int32_t **ids, int *n, srv_error *err) {
    al_tokenize_params tp = {.add_special = true, .parse_special = true};
    int32_t *t = NULL;
    if (al_tokenize(api->vocab, text, len, &tp, &t, n) != AL_OK)
        return srv_fail(err, 400, param, NULL, "cannot tokenize %s: %s", param, al_last_error());
    /* into plain malloc memory, which the job frees like the token arrays of requests */
    *ids = malloc((size_t)(*n ? *n : 1) * sizeof **ids);
    if (*ids) memcpy(*ids, t, (size_t)*n * sizeof **ids);
    al_free_tokens(t);
    return *ids ? true : srv_fail(err, 500, NULL, NULL, "out of memory");
}

/* messages (tools, calls and results written in) → the model's chat template → tokens. */
static bool chat_tokens(const srv_api *api, json_t *o, const srv_tools *tools, int32_t **ids,
                        int *n, srv_error *err) {
    json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return srv_fail(err, 400, "messages", msgs ? "invalid_type" : "missing", "messages must be "
                        "a non-empty array of {\"role\", \"content\"} objects");
    if (!api->tmpl_name)
        return srv_fail(err, 500, NULL, "unsupported_template", "the model's chat template is not "
                        "recognised; start the server with --chat-template NAME");
    al_chat_message *cm = NULL;
    al_chat_turn *turns = NULL;
    const char *tools_json = NULL;
    char **owned = NULL;
    int nm = 0, n_owned = 0;
    /* formats whose calls are written with control tokens (Mistral, Harmony) are
     * rendered by the library, from turns; the others from messages, calls as text */
    bool native = srv_tools_native(api->tmpl_name);
    bool ok = native ? srv_tools_turns(tools, api->tmpl_name, msgs, &turns, &nm, &tools_json,
                                       &owned, &n_owned, err)
                     : srv_tools_messages(tools, api->tmpl_name, msgs, &cm, &nm, &owned,
                                          &n_owned, err);
    /* al_chat_tokenize: marker text inside a message must not become control tokens */
    int32_t *t = NULL;
    al_chat_params cp = al_chat_default_params();
    cp.tools = tools_json;
    al_status st = !ok       ? AL_OK
                   : native ? al_chat_tokenize_turns(api->vocab, api->tmpl_name, api->tmpl, turns,
                                                     nm, &cp, &t, n)
                            : al_chat_tokenize(api->vocab, api->tmpl_name, api->tmpl, cm, nm, true,
                                               &t, n);
    if (st != AL_OK)
        ok = srv_fail(err, 400, "messages", NULL, "cannot render the chat: %s", al_last_error());
    if (ok && !(*ids = malloc((size_t)(*n ? *n : 1) * sizeof **ids)))
        ok = srv_fail(err, 500, NULL, NULL, "out of memory");
    if (ok) memcpy(*ids, t, (size_t)*n * sizeof **ids);
    al_free_tokens(t);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(cm);
    free(turns);
    return ok;
}

/* prompt: a string, or an array of token ids, or either wrapped in a one-element array. */
static bool completion_tokens(const srv_api *api, json_t *o, int32_t **ids, int *n,
                              srv_error *err) {
    json_t *p = json_object_get(o, "prompt");
    if (!p || json_is_null(p))
        return srv_fail(err, 400, "prompt", "missing", "prompt is required");
    json_t *first = json_array_get(p, 0);
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(first) || json_is_array(first)))
        p = first;
    if (json_is_string(p))
        return tokenize(api, json_string_value(p), json_string_length(p), "prompt", ids, n, err);
    if (!json_is_array(p))
        return srv_fail(err, 400, "prompt", "invalid_type", "prompt must be a string or an array "
                        "of token ids");
    size_t len = json_array_size(p);
    if (len > (size_t)api->n_ctx)
        return srv_fail(err, 400, "prompt", "context_length_exceeded", "the prompt has %zu tokens, "
                        "more than the context of %d tokens per sequence", len, api->n_ctx);
    int32_t *t = malloc((len ? len : 1) * sizeof *t);
    if (!t) return srv_fail(err, 500, NULL, NULL, "out of memory");
    for (size_t k = 0; k < len; k++) {
        json_t *v = json_array_get(p, k);
        if (!json_is_integer(v)) {
            free(t);
            if (k == 0 && json_is_string(v))
                return srv_fail(err, 400, "prompt", "invalid_type", "only one prompt per request "
                                "is supported");
            return srv_fail(err, 400, "prompt", "invalid_type", "prompt[%zu] must be a token id",
                            k);
        }
        long long id = json_integer_value(v);
        if (id < 0 || id >= api->n_vocab) {
            free(t);
            return srv_fail(err, 400, "prompt", "invalid_token", "prompt[%zu]: token id %lld is "
                            "out of range [0, %d)", k, id, api->n_vocab);
        }
        t[k] = (int32_t)id;
    }
    *ids = t;
    *n = (int)len;
    return true;
}

/* ---- the request ------------------------------------------------------------------------ */

/* Everything but the prompt: n, stream, stream_options, max tokens, sampling, stop. */
static bool parse_options(const srv_api *api, json_t *o, srv_request *out, srv_job *j,
                          al_sampler_params *sp, long long *max_tokens, srv_error *err) {
    json_t *model = json_object_get(o, "model");
    if (model && !json_is_string(model) && !json_is_null(model))
        return srv_fail(err, 400, "model", "invalid_type", "model must be a string");
    long long n = 1;
    if (opt_int(o, "n", INT64_MIN, INT64_MAX, &n, err) < 0) return false;
    if (n != 1)
        return srv_fail(err, 400, "n", "unsupported_value", "n must be 1: one choice per request");
    if (opt_bool(o, "stream", &out->stream, err) < 0) return false;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so) && !json_is_object(so))
        return srv_fail(err, 400, "stream_options", "invalid_type",
                        "stream_options must be an object");
    if (so && json_is_object(so) && opt_bool(so, "include_usage", &out->include_usage, err) < 0)
        return false;
    /* max_completion_tokens is the newer name; it wins when both are given */
    int r = opt_int(o, "max_completion_tokens", 1, api->n_ctx, max_tokens, err);
    if (r < 0 || (r == 0 && opt_int(o, "max_tokens", 1, api->n_ctx, max_tokens, err) < 0))
        return false;
    return parse_sampling(api, o, sp, err) && parse_stop(o, j, err);
}

/* The job from parsed options and prompt tokens (taken over). */
static bool build_job(const srv_api *api, srv_job *j, int32_t *ids, int n_ids,
                      const al_sampler_params *sp, long long max_tokens, const char *param,
                      srv_error *err) {
    j->prompt = ids;
    j->n_prompt = n_ids;
    if (n_ids == 0) return srv_fail(err, 400, param, "empty_prompt", "the prompt is empty");
    if (n_ids > api->n_ctx)
        return srv_fail(err, 400, param, "context_length_exceeded", "the prompt has %d tokens, "
                        "more than the context of %d tokens per sequence", n_ids, api->n_ctx);
    if (max_tokens == 0) { /* not given: what fits, up to the configured cap */
        int room = api->n_ctx - n_ids;
        max_tokens = room < api->max_tokens_default ? room : api->max_tokens_default;
        if (max_tokens < 1) max_tokens = 1; /* one token is sampled from the prompt's logits */
    }
    j->max_tokens = (int)max_tokens;
    if (al_sampler_create(sp, api->n_vocab, &j->sampler) != AL_OK ||
        al_detok_create(api->vocab, &j->detok) != AL_OK)
        return srv_fail(err, 500, NULL, NULL, "cannot set up sampling: %s", al_last_error());
    return true;
}

/* A chat in the Harmony format gets a reply parser: the answer is its final channel. */
static bool harmony_parser(const srv_api *api, srv_kind kind, srv_job *j, srv_error *err) {
    if (kind != SRV_KIND_CHAT || !api->tmpl_name || strcmp(api->tmpl_name, "harmony")) return true;
    if (al_harmony_create(api->vocab, &j->harmony) != AL_OK)
        return srv_fail(err, 500, NULL, NULL, "cannot set up the reply parser: %s",
                        al_last_error());
    return true;
}

/* ---- constrained output ------------------------------------------------------------------- */

/* Grammar text for response_format (json_object, json_schema) or llama.cpp's "grammar"
 * field into *text; NULL when the request constrains nothing. */
static bool format_grammar(json_t *o, srv_gram *g, bool *any, srv_error *err) {
    json_t *rf = json_object_get(o, "response_format"), *gr = json_object_get(o, "grammar");
    *any = false;
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr))
            return srv_fail(err, 400, "grammar", "invalid_type", "grammar must be a string");
        if (rf && !json_is_null(rf))
            return srv_fail(err, 400, "grammar", "invalid_value", "give grammar or "
                            "response_format, not both");
        *any = true;
        return srv_gram_raw(g, json_string_value(gr)) ||
               srv_fail(err, 500, NULL, NULL, "out of memory");
    }
    if (!rf || json_is_null(rf)) return true;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !type)
        return srv_fail(err, 400, "response_format", "invalid_type", "response_format must be an "
                        "object with a string type");
    if (!strcmp(type, "text")) return true;
    json_t *schema = NULL, *obj = NULL;
    if (!strcmp(type, "json_object")) {
        schema = obj = json_pack("{s:s}", "type", "object");
    } else if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return srv_fail(err, 400, "response_format", "invalid_type", "response_format."
                            "json_schema must be an object with the schema");
        schema = json_object_get(js, "schema");
        if (!schema || json_is_null(schema)) schema = obj = json_true(); /* any JSON */
        else if (!json_is_object(schema) && !json_is_boolean(schema))
            return srv_fail(err, 400, "response_format", "invalid_schema", "response_format."
                            "json_schema.schema must be a JSON Schema object");
    } else {
        return srv_fail(err, 400, "response_format", "invalid_value", "response_format.type "
                        "'%.40s' is not text, json_object or json_schema", type);
    }
    *any = true;
    bool ok = srv_gram_schema(g, schema, "root");
    json_decref(obj);
    return ok || srv_fail(err, 400, "response_format", "unsupported_schema", "response_format: "
                          "%s", g->err);
}

/* The job's grammar and the sampler held to it. */
static bool constrain(const srv_api *api, json_t *o, srv_kind kind, const srv_tools *tools,
                      srv_job *j, srv_error *err) {
    srv_gram g = {0};
    bool any = false, calls = false;
    bool ok = format_grammar(o, &g, &any, err) && srv_tools_grammar(tools, &g, &calls, err);
    if (ok && any && calls)
        ok = srv_fail(err, 400, "tool_choice", "invalid_value", "tool_choice asks for tool calls "
                      "and response_format for an answer in a format: give one of them");
    any |= calls;
    if (ok && any && kind == SRV_KIND_CHAT && api->tmpl_name && !strcmp(api->tmpl_name, "harmony"))
        ok = srv_fail(err, 400, "response_format", "unsupported_value", "constrained output is "
                      "not supported with the harmony chat format yet");
    if (ok && any && al_grammar_create(api->vocab, g.text.s ? g.text.s : "", &j->grammar) != AL_OK)
        ok = srv_fail(err, 400, calls ? "tools" : json_object_get(o, "grammar") ? "grammar"
                                                                                : "response_format",
                      "invalid_grammar", "%s", al_last_error());
    if (ok && j->grammar) al_sampler_set_grammar(j->sampler, j->grammar);
    srv_gram_free(&g);
    return ok;
}

static bool parse_object(const srv_api *api, srv_kind kind, json_t *o, srv_request *out,
                         srv_error *err);

/* A refusal of a translated request names the field the client sent, not the chat
 * request's: "response_format: ..." becomes "text.format: ..." for /v1/responses. */
static void rename_param(srv_kind kind, srv_error *err) {
    static const char *const map[][3] = { /* chat name, Responses name, Messages name */
        {"response_format", "text.format", "output_config.format"},
        {"max_tokens", "max_output_tokens", "max_tokens"},
        {"messages", "input", "messages"},
        {"stop", "stop", "stop_sequences"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        const char *to = map[i][kind == SRV_KIND_RESPONSES ? 1 : 2];
        if (strcmp(err->param, map[i][0])) continue;
        size_t n = strlen(map[i][0]);
        if (!strncmp(err->message, map[i][0], n)) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "%s%s", to, err->message + n);
            snprintf(err->message, sizeof err->message, "%s", msg);
        }
        snprintf(err->param, sizeof err->param, "%s", to);
        return;
    }
}

bool srv_api_load(const char *body, size_t len, json_t **out, srv_error *err) {
    *out = NULL;
    if (!srv_utf8_valid(body, len))
        return srv_fail(err, 400, NULL, "invalid_encoding", "the request body is not valid UTF-8");
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (!o)
        return srv_fail(err, 400, NULL, "invalid_json", "the request body is not valid JSON: %s "
                        "(line %d, column %d)", je.text, je.line, je.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return srv_fail(err, 400, NULL, "invalid_type", "the request body must be a JSON object");
    }
    *out = o;
    return true;
}

bool srv_api_parse(const srv_api *api, srv_kind kind, const char *body, size_t len,
                   srv_request *out, srv_error *err) {
    json_t *o;
    if (!srv_api_load(body, len, &o, err)) {
        *out = (srv_request){.kind = kind};
        return false;
    }
    return srv_api_parse_json(api, kind, o, out, err);
}

bool srv_api_parse_json(const srv_api *api, srv_kind kind, json_t *o, srv_request *out,
                        srv_error *err) {
    *out = (srv_request){.kind = kind};
    if (kind == SRV_KIND_MESSAGES || kind == SRV_KIND_RESPONSES) { /* the chat request meant */
        json_t *chat = kind == SRV_KIND_MESSAGES ? srv_anthropic_request(o, api->n_ctx, err)
                                                 : srv_responses_request(o, api->n_ctx, api->store, err);
        if (chat && kind == SRV_KIND_RESPONSES) {
            json_t *store = json_object_get(o, "store"), *prev = json_object_get(o, "previous_response_id");
            if (!json_is_false(store)) out->history = json_incref(json_object_get(chat, "messages"));
            snprintf(out->prev_id, sizeof out->prev_id, "%s", json_is_string(prev) ? json_string_value(prev) : "");
        }
        json_decref(o);
        if (!chat) return false;
        o = chat;
    }
    bool ok = parse_object(api, kind >= SRV_KIND_MESSAGES ? SRV_KIND_CHAT : kind, o, out, err);
    out->kind = kind;
    if (!ok) {
        srv_request_clear(out);
        if (kind >= SRV_KIND_MESSAGES) rename_param(kind, err);
    }
    return ok;
}

void srv_request_clear(srv_request *r) {
    json_decref(r->tools);
    json_decref(r->history);
    r->tools = r->history = NULL;
}

/* The request object (a reference, taken over) into the job. */
static bool parse_object(const srv_api *api, srv_kind kind, json_t *o, srv_request *out,
                         srv_error *err) {
    srv_job *j = srv_job_create();
    al_sampler_params sp;
    long long max_tokens = 0;
    int32_t *ids = NULL;
    int n_ids = 0;
    const char *param = kind == SRV_KIND_CHAT ? "messages" : "prompt";
    bool ok = j ? true : srv_fail(err, 500, NULL, NULL, "out of memory");
    srv_tools tools = {0};
    ok = ok && parse_options(api, o, out, j, &sp, &max_tokens, err);
    if (ok && kind == SRV_KIND_CHAT)
        ok = srv_tools_parse(o, api->tmpl_name, api->tmpl, &tools, err) &&
             chat_tokens(api, o, &tools, &ids, &n_ids, err);
    if (ok && kind == SRV_KIND_COMPLETION) ok = completion_tokens(api, o, &ids, &n_ids, err);
    if (ok) ok = build_job(api, j, ids, n_ids, &sp, max_tokens, param, err) &&
                 harmony_parser(api, kind, j, err) && constrain(api, o, kind, &tools, j, err);
    else free(ids);
    if (ok && srv_tools_parsed(&tools)) {
        out->tools = json_incref(tools.tools);
        out->calls = tools.llama3    ? SRV_CALLS_BARE
                     : tools.mistral ? SRV_CALLS_MISTRAL
                     : tools.gemma4  ? SRV_CALLS_GEMMA4
                     : tools.glm     ? SRV_CALLS_GLM
                                     : SRV_CALLS_TAGGED;
        j->control_text = tools.mistral || tools.gemma4 || tools.glm;
        if (tools.harmony && !(j->harmony_calls = srv_tc_create(NULL)))
            ok = srv_fail(err, 500, NULL, NULL, "out of memory");
        if (j->harmony_calls) srv_tc_harmony(j->harmony_calls);
    }
    srv_tools_free(&tools);
    json_decref(o);
    if (!ok) {
        srv_job_release(NULL, j);
        return false;
    }
    out->job = j;
    return true;
}

/* ---- responses ------------------------------------------------------------------------ */

void srv_resp_init(srv_resp *r, srv_kind kind, const char *model, bool include_usage) {
    *r = (srv_resp){.kind = kind, .created = (long long)time(NULL), .model = model,
                    .include_usage = include_usage};
    srv_new_id(kind == SRV_KIND_CHAT        ? "chatcmpl-"
               : kind == SRV_KIND_MESSAGES  ? "msg_"
               : kind == SRV_KIND_RESPONSES ? "resp_"
                                            : "cmpl-",
               r->id, sizeof r->id);
}

void srv_prefix_hash(const int32_t *tokens, int n, int k, char *out, size_t cap) {
    if (cap) out[0] = 0;
    if (k <= 0 || n < k || cap < 17) return;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < k; i++)
        for (int b = 0; b < 4; b++) { /* the id's bytes in a fixed order, whatever the CPU's */
            h ^= ((uint32_t)tokens[i] >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    snprintf(out, cap, "%016llx", (unsigned long long)h);
}


/* {"id": "call_...", "type": "function", "function": {"name", "arguments"}}; arguments
 * NULL gives the streamed first delta's shape with its index. */
static json_t *call_object(const srv_call *c, int index, bool with_index, bool head) {
    char id[40];
    srv_new_id("call_", id, sizeof id);
    json_t *o = json_object();
    if (with_index) json_object_set_new(o, "index", json_integer(index));
    if (head) {
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "type", json_string("function"));
    }
    json_t *f = json_object();
    if (head) json_object_set_new(f, "name", json_string(c->name));
    json_object_set_new(f, "arguments", json_string(head && with_index ? "" : c->arguments));
    json_object_set_new(o, "function", f);
    return o;
}

/* The writer of a kind that is another API's; NULL for OpenAI's own, written here. */
static const srv_writer *writer_of(srv_kind kind) {
    return kind == SRV_KIND_MESSAGES    ? &srv_anthropic_writer
           : kind == SRV_KIND_RESPONSES ? &srv_responses_writer
                                        : NULL;
}

void srv_api_error_body_for(srv_kind kind, const srv_error *err, srv_buf *out) {
    const srv_writer *w = writer_of(kind);
    if (w && w->error_body) w->error_body(err, out);
    else srv_api_error_body(err, out);
}

void srv_api_error_body(const srv_error *err, srv_buf *out) {
    /* a message cut at its buffer's end, or quoting the input, may end inside a character */
    srv_buf msg = {0};
    srv_buf_add_utf8(&msg, err->message, strlen(err->message));
    json_t *e = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg.s ? msg.s : "error",
                          "type", err->type ? err->type : "invalid_request_error", "param",
                          err->param[0] ? json_string(err->param) : json_null(), "code",
                          err->code ? json_string(err->code) : json_null());
    char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
    srv_buf_str(out, s ? s : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                             "\"param\":null,\"code\":null}}");
    free(s);
    json_decref(e);
    srv_buf_free(&msg);
}

static json_t *usage(const srv_job_state *st) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", st->n_prompt,
                     "completion_tokens", st->n_gen, "total_tokens", st->n_prompt + st->n_gen,
                     "prompt_tokens_details", "cached_tokens", st->n_reused);
}

/* llama.cpp's "timings" of a finished job: its clients (and users comparing servers)
 * read prompt and decode speed, and a speculative decoder's acceptance, from it. */
static json_t *timings(const srv_job_state *st) {
    const srv_timings *t = &st->timings;
    int n_new = st->n_prompt - st->n_reused, n_dec = st->n_gen > 1 ? st->n_gen - 1 : 0;
    return json_pack("{s:i, s:f, s:f, s:i, s:f, s:f, s:i, s:i}", "prompt_n", n_new, "prompt_ms",
                     1000 * t->prompt_s, "prompt_per_second",
                     t->prompt_s > 0 ? n_new / t->prompt_s : 0.0, "predicted_n", st->n_gen,
                     "predicted_ms", 1000 * t->decode_s, "predicted_per_second",
                     t->decode_s > 0 ? n_dec / t->decode_s : 0.0, "draft_n", t->n_drafted,
                     "draft_n_accepted", t->n_accepted);
}

/* {"id", "object", "created", "model", "choices": [choice]}, taking choice over. */
static json_t *envelope(const srv_resp *r, const char *object, json_t *choice) {
    json_t *choices = choice ? json_pack("[o]", choice) : json_array();
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->model, "choices", choices);
}

/* One choice: text (may be NULL), reasoning (rlen > 0: chat only), the role when first,
 * finish_reason (NULL = null). */
static json_t *choice(const srv_resp *r, bool chunk, const char *text, size_t len,
                      const char *reasoning, size_t rlen, bool first, const char *finish) {
    json_t *fin = finish ? json_string(finish) : json_null();
    if (r->kind == SRV_KIND_COMPLETION)
        return json_pack("{s:i, s:s%, s:n, s:o}", "index", 0, "text", text ? text : "",
                         text ? len : 0, "logprobs", "finish_reason", fin);
    json_t *msg = json_object();
    if (first || !chunk) json_object_set_new(msg, "role", json_string("assistant"));
    if (text || first || !chunk)
        json_object_set_new(msg, "content", json_stringn(text ? text : "", text ? len : 0));
    if (reasoning && rlen > 0)
        json_object_set_new(msg, "reasoning_content", json_stringn(reasoning, rlen));
    return json_pack("{s:i, s:o, s:n, s:o}", "index", 0, chunk ? "delta" : "message", msg,
                     "logprobs", "finish_reason", fin);
}

static bool emit_event(json_t *obj, srv_buf *out) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) return false;
    bool ok = srv_buf_str(out, "data: ") && srv_buf_str(out, s) && srv_buf_str(out, "\n\n");
    free(s);
    return ok;
}

bool srv_api_final(const srv_resp *r, const char *text, size_t len, const char *reasoning,
                   size_t rlen, const srv_call *calls, int n_calls, const srv_job_state *st,
                   srv_buf *out) {
    const srv_writer *w = writer_of(r->kind);
    if (w) return w->final(r, text, len, reasoning, rlen, calls, n_calls, st, out);
    const char *object = r->kind == SRV_KIND_CHAT ? "chat.completion" : "text_completion";
    json_t *c = choice(r, false, text, len, reasoning, rlen, false,
                       srv_reply_finish(st->finish, n_calls));
    json_t *msg = json_object_get(c, "message");
    if (n_calls > 0 && msg) {
        json_t *list = json_array();
        for (int i = 0; i < n_calls; i++)
            json_array_append_new(list, call_object(&calls[i], i, false, true));
        json_object_set_new(msg, "tool_calls", list);
        if (len == 0) json_object_set_new(msg, "content", json_null());
    }
    json_t *o = envelope(r, object, c);
    if (o) json_object_set_new(o, "usage", usage(st));
    if (o) json_object_set_new(o, "timings", timings(st));
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    bool ok = s && srv_buf_str(out, s);
    free(s);
    return ok;
}

static const char *chunk_object(const srv_resp *r) {
    return r->kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion";
}

bool srv_api_chunk_start(srv_resp *r, srv_buf *out) {
    const srv_writer *w = writer_of(r->kind);
    if (w) return w->start(r, out);
    if (r->kind != SRV_KIND_CHAT) return true; /* text completions have no role to announce */
    return emit_event(envelope(r, chunk_object(r), choice(r, true, "", 0, NULL, 0, true, NULL)),
                      out);
}

bool srv_api_chunk_text(srv_resp *r, const char *text, size_t len, const char *reasoning,
                        size_t rlen, srv_buf *out) {
    const srv_writer *w = writer_of(r->kind);
    if (w) return w->text(r, text, len, reasoning, rlen, out);
    json_t *c = choice(r, true, len ? text : NULL, len, reasoning, rlen, false, NULL);
    return emit_event(envelope(r, chunk_object(r), c), out);
}

bool srv_api_chunk_call(srv_resp *r, const srv_call *call, srv_buf *out) {
    const srv_writer *w = writer_of(r->kind);
    if (w) return w->call(r, call, out);
    bool ok = true;
    for (int part = 0; part < 2 && ok; part++) {
        json_t *msg = json_pack("{s:[o]}", "tool_calls", call_object(call, r->n_calls, true, !part));
        json_t *c = json_pack("{s:i, s:o, s:n, s:n}", "index", 0, "delta", msg, "logprobs",
                              "finish_reason");
        ok = emit_event(envelope(r, chunk_object(r), c), out);
    }
    r->n_calls++;
    return ok;
}

bool srv_api_chunk_end(srv_resp *r, const srv_job_state *st, srv_buf *out) {
    const srv_writer *w = writer_of(r->kind);
    if (w) return w->end(r, st, out);
    const char *why = srv_reply_finish(st->finish, r->n_calls);
    bool ok = true;
    if (!why) { /* the engine failed or is stopping: say so in the stream, then end it */
        srv_error err;
        srv_fail(&err, 500, NULL, NULL, "generation failed: %s",
                 st->error[0] ? st->error : "cancelled");
        ok = srv_buf_str(out, "data: ");
        srv_api_error_body(&err, out);
        ok = ok && srv_buf_str(out, "\n\n");
    } else {
        json_t *o = envelope(r, chunk_object(r), choice(r, true, NULL, 0, NULL, 0, false, why));
        /* usage rides on the last chunk unless the client asked for OpenAI's own chunk */
        if (o && !r->include_usage) json_object_set_new(o, "usage", usage(st));
        if (o) json_object_set_new(o, "timings", timings(st));
        ok = emit_event(o, out);
        if (ok && r->include_usage) {
            o = envelope(r, chunk_object(r), NULL);
            if (o) json_object_set_new(o, "usage", usage(st));
            ok = emit_event(o, out);
        }
    }
    return ok && srv_buf_str(out, "data: [DONE]\n\n");
}
