/* tools.h: the request side of tool calls (OpenAI Chat Completions): `tools`,
 * `tool_choice`, `parallel_tool_calls`, and a conversation's tool calls and results, as
 * the chatml family writes them.
 *
 * The tools are described at the end of the system message (one is added when the
 * conversation has none), inside <tools></tools>, one JSON object per line, with the
 * call format: Hermes JSON (<tool_call>{"name", "arguments"}</tool_call>) or, for
 * templates that use it (Qwen3.5/3.6, Qwen3-Coder: their template mentions
 * "<function="), the XML form <tool_call><function=NAME><parameter=P>...</tool_call>.
 * An assistant message's tool_calls are written in that form after its content; the
 * results of `tool` messages become one user turn of <tool_response> blocks per run of
 * consecutive results. tool_choice "required" and a named function hold the reply to
 * calls with a grammar (each function's parameters compiled as JSON Schema); "auto"
 * leaves the model free and the reply is parsed (toolcall.h); "none" describes no tools.
 * Llama 3 (the llama3 format) is told to answer with a bare JSON object, {"name": ...,
 * "parameters": {...}}, which is how its history writes calls too; its tool results
 * stay messages of their own (the library renders them in Llama 3.1's ipython role).
 * Mistral, Harmony (gpt-oss), Gemma 4 and GLM (glm45, glm47) write tools, calls and
 * results with control tokens, which message text cannot hold: the library renders them
 * (al_chat_render_turns) from the turns srv_tools_turns makes; their tool_choice is auto
 * or none (required and a named function are refused with a 400: a grammar cannot make
 * the model write a control token). Other chat formats refuse tools and tool messages
 * (400) rather than drop them.
 */
#ifndef AL_SERVER_TOOLS_H
#define AL_SERVER_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

#include "server/error.h"
#include "server/schema.h"

typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO,
    SRV_TOOLS_NONE,
    SRV_TOOLS_REQUIRED,
    SRV_TOOLS_NAMED,
} srv_tool_choice;

typedef struct srv_tools {
    json_t *tools;        /* the request's "tools" (a reference), or NULL: none */
    srv_tool_choice choice;
    const char *named;    /* SRV_TOOLS_NAMED: that function's name (in tools) */
    bool parallel;        /* parallel_tool_calls (default true) */
    bool xml;             /* the template writes calls in the XML form */
    bool llama3;          /* Llama 3: bare JSON calls, results in the tool (ipython) role */
    bool mistral;         /* Mistral: [TOOL_CALLS] (srv_tc_mistral), rendered by the library */
    bool harmony;         /* gpt-oss: calls in al_harmony's pieces (srv_tc_harmony), ditto */
    bool gemma4;          /* Gemma 4: <|tool_call> blocks (srv_tc_gemma4), ditto */
    bool glm;             /* GLM-4.5/4.7: <arg_key> calls (srv_tc_glm), ditto */
} srv_tools;

/* Reads tools, tool_choice and parallel_tool_calls from the request body (every tool a
 * {"type": "function", "function": {"name", "description", "parameters", "strict"}}
 * with a name of [A-Za-z0-9_.-], at most 64 bytes). */
bool srv_tools_parse(json_t *body, const char *tmpl_name, const char *tmpl, srv_tools *t,
                     srv_error *err);
void srv_tools_free(srv_tools *t);

/* The messages as the template's roles and contents, tools and calls written in.
 * *owned (n_owned strings) holds the texts made here; the caller frees each and the
 * arrays. */
bool srv_tools_messages(const srv_tools *t, const char *tmpl_name, json_t *msgs,
                        al_chat_message **out, int *n_out, char ***owned, int *n_owned,
                        srv_error *err);

/* Whether the library renders the format's tools and calls (mistral, harmony, gemma4,
 * glm45, glm47): the conversation then goes through srv_tools_turns, not
 * srv_tools_messages (which refuses tools for these formats). */
bool srv_tools_native(const char *tmpl_name);

/* The messages as turns for al_chat_tokenize_turns (the native formats): role, content,
 * tool_calls (normalized: [{"id", "function": {"name", "arguments": {...}}}]),
 * tool_call_id and name of tool results, and but for mistral an assistant message's
 * reasoning_content (or "reasoning", "thinking"). *tools_json is the tools to pass as
 * al_chat_params.tools (NULL: none, as with tool_choice none). Roles and names point
 * into msgs, which must outlive the turns; *owned (n_owned strings) holds the texts made
 * here, *tools_json among them; the caller frees each and the arrays, also on failure. */
bool srv_tools_turns(const srv_tools *t, const char *tmpl_name, json_t *msgs, al_chat_turn **out,
                     int *n_out, const char **tools_json, char ***owned, int *n_owned,
                     srv_error *err);

/* For tool_choice required or named: the grammar of the calls (root), *any set; else
 * nothing is added. */
bool srv_tools_grammar(const srv_tools *t, srv_gram *g, bool *any, srv_error *err);

/* Whether the reply is parsed for calls. */
static inline bool srv_tools_parsed(const srv_tools *t) {
    return t->tools && t->choice != SRV_TOOLS_NONE;
}

#endif /* AL_SERVER_TOOLS_H */
