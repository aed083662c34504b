/* test_tools.c: the request side of tool calls (src/server/tools.h): what the chat
 * template receives for tools, assistant calls (JSON and the XML form) and tool
 * results, the turns of the formats the library renders (Mistral, Harmony), the grammar
 * of tool_choice required, and the refusals. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"
#include "test.h"

static const char *TOOLS =
    "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
    "\"required\": [\"city\"]}}}], \"messages\": ";

static const char *g_format = "chatml";

/* Renders the messages of body (JSON text) to "role: content" lines in out. */
static bool render(const char *body, const char *tmpl, char *out, size_t cap, srv_error *err) {
    json_t *o = json_loads(body, 0, NULL);
    srv_tools t;
    al_chat_message *m = NULL;
    char **owned = NULL;
    int n = 0, n_owned = 0;
    bool ok = o && srv_tools_parse(o, g_format, tmpl, &t, err) &&
              srv_tools_messages(&t, g_format, json_object_get(o, "messages"), &m, &n, &owned,
                                 &n_owned, err);
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; ok && i < n; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s: %s\n", m[i].role, m[i].content);
    for (int i = 0; i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(m);
    if (o) srv_tools_free(&t);
    json_decref(o);
    return ok;
}

static void test_render(void) {
    char body[4096], out[8192];
    srv_error err;
    /* no system message: one carrying the tools comes first */
    snprintf(body, sizeof body, "%s[{\"role\": \"user\", \"content\": \"Weather in Paris?\"}]}",
             TOOLS);
    CHECK(render(body, NULL, out, sizeof out, &err));
    CHECK_MSG(!strncmp(out, "system: # Tools\n\n", 17) &&
                  strstr(out, "<tools>\n{\"type\":\"function\"") && strstr(out, "</tools>") &&
                  strstr(out, "<tool_call>\n{\"name\": <function-name>") &&
                  strstr(out, "\nuser: Weather in Paris?\n"),
              "%s", out);
    /* a system message gets the tools after its text; calls and results in the history */
    snprintf(
        body, sizeof body,
        "%s[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
        "{\"role\": \"user\", \"content\": \"Paris and Rome?\"}, {\"role\": \"assistant\", "
        "\"content\": null, \"tool_calls\": [{\"id\": \"a\", \"type\": \"function\", \"function\": "
        "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}, {\"id\": "
        "\"b\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
        "\"{\\\"city\\\": \\\"Rome\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"a\", "
        "\"content\": \"sunny\"}, {\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": "
        "[{\"type\": \"text\", \"text\": \"rain\"}]}, {\"role\": \"user\", \"content\": "
        "\"And?\"}]}",
        TOOLS);
    CHECK(render(body, NULL, out, sizeof out, &err));
    CHECK_MSG(!strncmp(out, "system: Be brief.\n\n# Tools", 26), "%s", out);
    CHECK_MSG(
        strstr(out,
               "\nassistant: <tool_call>\n{\"name\":\"get_weather\",\"arguments\":"
               "{\"city\":\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"get_weather\","
               "\"arguments\":{\"city\":\"Rome\"}}\n</tool_call>\nuser: <tool_response>\n"
               "sunny\n</tool_response>\n<tool_response>\nrain\n</tool_response>\nuser: And?\n"),
        "%s", out);
    /* a template that writes calls as XML: the instructions and the history in that form */
    CHECK(render(body, "... <function=NAME> ...", out, sizeof out, &err));
    CHECK_MSG(strstr(out, "<function=NAME>\n<parameter=PARAMETER>") &&
                  strstr(out,
                         "assistant: <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                         "</parameter>\n</function>\n</tool_call>"),
              "%s", out);
    /* Llama 3: bare JSON calls with "parameters", each result a tool message of its own */
    g_format = "llama3";
    snprintf(body, sizeof body,
             "%s[{\"role\": \"user\", \"content\": \"Paris?\"}, {\"role\": "
             "\"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"get_weather\", "
             "\"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", "
             "\"content\": \"sunny\"}, {\"role\": \"tool\", \"content\": \"21 C\"}]}",
             TOOLS);
    CHECK(render(body, NULL, out, sizeof out, &err));
    CHECK_MSG(!strncmp(out, "system: # Tools", 15) &&
                  strstr(out, "reply with nothing but a JSON object") &&
                  strstr(out, "\nassistant: {\"name\":\"get_weather\",\"parameters\":{\"city\":"
                              "\"Paris\"}}\ntool: sunny\ntool: 21 C\n"),
              "%s", out);
    g_format = "chatml";
    /* tool_choice none: no tools described, the history still rendered */
    snprintf(body, sizeof body,
             "{\"tool_choice\": \"none\", %s[{\"role\": \"user\", \"content\": "
             "\"x\"}]}",
             TOOLS + 1);
    CHECK(render(body, NULL, out, sizeof out, &err) && !strcmp(out, "user: x\n"));
}

static void test_grammar_text(void) {
    json_t *o =
        json_loads("{\"tool_choice\": \"required\", \"parallel_tool_calls\": false, \"tools\": "
                   "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": "
                   "\"function\", \"function\": {\"name\": \"g\", \"parameters\": {\"type\": "
                   "\"object\", \"properties\": {\"n\": {\"type\": \"integer\"}}}}}]}",
                   0, NULL);
    srv_tools t;
    srv_error err;
    srv_gram g = {0};
    bool any = false;
    CHECK(srv_tools_parse(o, "chatml", NULL, &t, &err) && srv_tools_grammar(&t, &g, &any, &err) &&
          any);
    CHECK_MSG(g.text.s && strstr(g.text.s, "root ::= tool-call\n") &&
                  strstr(g.text.s, "\"{\\\"name\\\": \\\"f\\\", \\\"arguments\\\": \"") &&
                  strstr(g.text.s, "tool1-args"),
              "%s", g.text.s ? g.text.s : "(none)");
    srv_gram_free(&g);
    srv_tools_free(&t);
    /* Llama 3's calls: bare objects with "parameters", several on separate lines */
    json_object_set_new(o, "parallel_tool_calls", json_true());
    g = (srv_gram){0};
    CHECK(srv_tools_parse(o, "llama3", NULL, &t, &err) && srv_tools_grammar(&t, &g, &any, &err));
    CHECK_MSG(g.text.s && strstr(g.text.s, "tool-call ::= ( ") &&
                  strstr(g.text.s, "\\\"parameters\\\": ") && !strstr(g.text.s, "<tool_call>") &&
                  strstr(g.text.s, "root ::= tool-call ( \"\\n\" tool-call )*"),
              "%s", g.text.s ? g.text.s : "(none)");
    srv_gram_free(&g);
    srv_tools_free(&t);
    json_decref(o);
}

static void test_refused(void) {
    static const struct {
        const char *body, *fmt, *expect;
    } cases[] = {
        {"{\"tools\": 3}", "chatml", "tools must be an array"},
        {"{\"tools\": [{\"type\": \"code_interpreter\"}]}", "chatml", "only function tools"},
        {"{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}", "phi3",
         "not supported with the 'phi3' chat format yet (chatml, llama3, mistral, harmony, "
         "gemma4, glm45 and glm47 are)"},
        {"{\"tool_choice\": {\"type\": \"function\"}, \"tools\": [{\"type\": \"function\", "
         "\"function\": {\"name\": \"f\"}}]}",
         "chatml", "tool_choice must be"},
        /* a grammar cannot make the model write a control token */
        {"{\"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": "
         "{\"name\": \"f\"}}]}", "harmony",
         "tool_choice 'required' is not supported with the 'harmony' chat format"},
        {"{\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}, "
         "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}", "mistral",
         "tool_choice 'function' is not supported with the 'mistral' chat format"},
        {"{\"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": "
         "{\"name\": \"f\"}}]}", "glm47",
         "tool_choice 'required' is not supported with the 'glm47' chat format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *o = json_loads(cases[i].body, 0, NULL);
        srv_tools t;
        srv_error err = {0};
        bool ok = srv_tools_parse(o, cases[i].fmt, NULL, &t, &err);
        CHECK_MSG(!ok && err.status == 400 && strstr(err.message, cases[i].expect), "case %zu: %s",
                  i, err.message);
        srv_tools_free(&t);
        json_decref(o);
    }
    /* tool messages in another format's conversation */
    json_t *msgs = json_loads("[{\"role\": \"tool\", \"content\": \"x\"}]", 0, NULL);
    srv_tools t = {0};
    srv_error err = {0};
    al_chat_message *m = NULL;
    char **owned = NULL;
    int n = 0, n_owned = 0;
    CHECK(!srv_tools_messages(&t, "gemma", msgs, &m, &n, &owned, &n_owned, &err) &&
          strstr(err.message, "'gemma' chat format"));
    free(m);
    free(owned);
    json_decref(msgs);
}

/* The native formats (Mistral, Harmony, Gemma 4, GLM): the turns handed to the library,
 * field by field. */
static void test_turns(void) {
    static const char body[] =
        "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}], "
        "\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Paris?\"}]}, "
        "{\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"Look it up.\", "
        "\"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}, {\"function\": "
        "{\"name\": \"get_weather\", \"arguments\": \"not json\"}}]}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"name\": \"get_weather\", "
        "\"content\": \"sunny\"}]}";
    static const char *const formats[] = {"mistral", "harmony", "gemma4", "glm45", "glm47"};
    for (int f = 0; f < 5; f++) {
        const char *fmt = formats[f];
        json_t *o = json_loads(body, 0, NULL);
        srv_tools t;
        srv_error err = {0};
        al_chat_turn *m = NULL;
        char **owned = NULL;
        const char *tools = NULL;
        int n = 0, n_owned = 0;
        bool ok = o && srv_tools_parse(o, fmt, NULL, &t, &err);
        CHECK_MSG(ok && t.mistral == (f == 0) && t.harmony == (f == 1) && t.gemma4 == (f == 2) &&
                      t.glm == (f >= 3) && !t.xml && !t.llama3 && srv_tools_native(fmt),
                  "%s: %s", fmt, err.message);
        ok = ok && srv_tools_turns(&t, fmt, json_object_get(o, "messages"), &m, &n, &tools,
                                   &owned, &n_owned, &err);
        CHECK_MSG(ok && n == 4, "%s: %s", fmt, err.message);
        if (ok && n == 4) {
            CHECK(tools && !strcmp(tools, "[{\"type\":\"function\",\"function\":{\"name\":"
                                          "\"get_weather\"}}]"));
            CHECK(!strcmp(m[0].role, "system") && !strcmp(m[0].content, "Be brief."));
            CHECK(!strcmp(m[1].role, "user") && !strcmp(m[1].content, "Paris?"));
            CHECK_MSG(!strcmp(m[2].role, "assistant") && m[2].content == NULL && m[2].tool_calls &&
                          !strcmp(m[2].tool_calls,
                                  "[{\"function\":{\"name\":\"get_weather\",\"arguments\":"
                                  "{\"city\":\"Paris\"}},\"id\":\"call_1\"},{\"function\":{\"name\":"
                                  "\"get_weather\",\"arguments\":{\"value\":\"not json\"}}}]"),
                      "%s", m[2].tool_calls ? m[2].tool_calls : "(none)");
            /* the chain of thought goes back, but to Mistral, whose format has none */
            CHECK(f ? m[2].reasoning && !strcmp(m[2].reasoning, "Look it up.") : !m[2].reasoning);
            CHECK(!strcmp(m[3].role, "tool") && !strcmp(m[3].content, "sunny") &&
                  !strcmp(m[3].tool_call_id, "call_1") && !strcmp(m[3].name, "get_weather"));
        }
        /* the text path refuses what it cannot write */
        al_chat_message *cm = NULL;
        char **owned2 = NULL;
        int n2 = 0, n_owned2 = 0;
        srv_error err2 = {0};
        CHECK(!srv_tools_messages(&t, fmt, json_object_get(o, "messages"), &cm, &n2, &owned2,
                                  &n_owned2, &err2) &&
              strstr(err2.message, "srv_tools_turns"));
        free(cm);
        free(owned2);
        for (int i = 0; i < n_owned; i++) free(owned[i]);
        free(owned);
        free(m);
        srv_tools_free(&t);
        json_decref(o);
    }
    /* tool_choice none: no tools for the library, the history still there */
    json_t *o = json_loads("{\"tool_choice\": \"none\", \"tools\": [{\"type\": \"function\", "
                           "\"function\": {\"name\": \"f\"}}], \"messages\": [{\"role\": "
                           "\"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]}",
                           0, NULL);
    srv_tools t;
    srv_error err = {0};
    al_chat_turn *m = NULL;
    char **owned = NULL;
    const char *tools = "x";
    int n = 0, n_owned = 0;
    CHECK(srv_tools_parse(o, "harmony", NULL, &t, &err) &&
          srv_tools_turns(&t, "harmony", json_object_get(o, "messages"), &m, &n, &tools, &owned,
                          &n_owned, &err));
    CHECK_MSG(!tools && n == 1 && m[0].tool_calls &&
                  !strcmp(m[0].tool_calls, "[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]"),
              "%s", n == 1 && m[0].tool_calls ? m[0].tool_calls : err.message);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(m);
    srv_tools_free(&t);
    json_decref(o);
}

int main(void) {
    TEST_RUN(test_render);
    TEST_RUN(test_turns);
    TEST_RUN(test_grammar_text);
    TEST_RUN(test_refused);
    return test_finish();
}
