/* chat_glm.c: GLM's chat format, as its templates write it: GLM-4.5/4.6 ("glm45",
 * GLM-4.6.jinja) and GLM-4.7 ("glm47", GLM-4.7-Flash.jinja), rendered as transformers
 * renders them (trim_blocks, lstrip_blocks).
 *
 * The conversation opens with [gMASK]<sop>; turns are <|system|>, <|user|>, <|assistant|>
 * and <|observation|> (tool results) with no closing marker. The tools come first, in a
 * system turn of their own: "# Tools" and each tool's JSON on a line inside <tools>.
 * An assistant turn holds its reasoning in <think>...</think> when it comes after the
 * last user turn (an empty <think></think>, or GLM-4.7's lone </think>, before), its text
 * stripped, then each call as
 *   <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...</tool_call>
 * (a string value as it is, any other as JSON). GLM-4.5 puts a newline before the think
 * block, the text and each call, after each user and system marker and around the
 * parts of a call and of a result; GLM-4.7 none, and its generation prompt opens the
 * reasoning (<|assistant|><think>).
 */
#include <string.h>

#include "text/chat.h"

/* Python's str.strip() whitespace, its ASCII part */
static bool is_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* s[0, n) stripped of whitespace at both ends, as message text. */
static void stripped(strbuf *b, const char *s, size_t n) {
    while (n && is_space(*s))
        s++, n--;
    while (n && is_space(s[n - 1]))
        n--;
    sb_content_n(b, s, n);
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!is_space(s[i])) return false;
    return true;
}

/* "# Tools" in a system turn: the tools as JSON, one a line, and the call syntax. */
static void glm_tools(strbuf *b, const json_val *tools, bool glm47) {
    sb_append(b, "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the "
                 "user query.\n\nYou are provided with function signatures within "
                 "<tools></tools> XML tags:\n<tools>\n");
    for (int i = 0; i < tools->n_items; i++) {
        json_write(&tools->items[i], sb_put_content, b);
        sb_append(b, "\n");
    }
    sb_append(b, "</tools>\n\nFor each function call, output the function name and arguments "
                 "within the following XML format:\n");
    sb_append(b, glm47 ? "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>"
                         "{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>"
                         "{arg-value-2}</arg_value>...</tool_call>"
                       : "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
                         "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
                         "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>");
}

static void glm_call(strbuf *b, const chat_call *call, bool glm47) {
    const char *nl = glm47 ? "" : "\n";
    sb_cat(b, nl, "<tool_call>", NULL);
    sb_content(b, call->name);
    sb_append(b, nl);
    for (int k = 0; k < call->args->n_items; k++) {
        const json_val *v = &call->args->items[k];
        sb_append(b, "<arg_key>");
        sb_content_n(b, v->key, v->key_len);
        sb_cat(b, "</arg_key>", nl, "<arg_value>", NULL);
        if (v->type == JSON_T_STRING)
            sb_content_n(b, v->s, v->len);
        else
            json_write(v, sb_put_content, b);
        sb_cat(b, "</arg_value>", nl, NULL);
    }
    sb_append(b, "</tool_call>");
}

/* An assistant turn. Its reasoning is the turn's own, else what its text holds before
 * </think> (after any <think>), the text then being what follows the last </think>; it
 * is kept only after the last user turn, as the templates do. */
static void glm_assistant(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int i,
                          bool after_user, bool glm47) {
    const char *text = m[i].content, *r = m[i].reasoning ? m[i].reasoning : "";
    size_t n_text = strlen(text), n_r = strlen(r);
    const char *close = m[i].reasoning ? NULL : strstr(text, "</think>");
    if (close) {
        static const size_t n_open = sizeof "<think>" - 1, n_close = sizeof "</think>" - 1;
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'):
         * a <think> ends before the newlines do, as none of its bytes is one */
        const char *end = close;
        while (end > text && end[-1] == '\n')
            end--;
        r = text;
        for (const char *o = text; (o = strstr(o, "<think>")) && o < end; o += n_open)
            r = o + n_open;
        while (r < end && *r == '\n')
            r++;
        n_r = (size_t)(end - r);
        /* content.split('</think>')[-1].lstrip('\n') */
        for (const char *p = close; (p = strstr(p, "</think>")); p += n_close)
            text = p + n_close;
        while (*text == '\n')
            text++;
        n_text = strlen(text);
    }
    sb_append(b, "<|assistant|>");
    if (after_user && n_r) {
        sb_append(b, glm47 ? "<think>" : "\n<think>");
        stripped(b, r, n_r);
        sb_append(b, "</think>");
    } else {
        sb_append(b, glm47 ? "</think>" : "\n<think></think>");
    }
    if (!blank(text, n_text)) {
        if (!glm47) sb_append(b, "\n");
        stripped(b, text, n_text);
    }
    for (int k = 0; k < c->n_calls[i]; k++)
        glm_call(b, &c->calls[i][k], glm47);
}

void chat_render_glm(strbuf *b, const chat_ctx *c, const al_chat_turn *m, int n, bool gen,
                     bool glm47) {
    const char *nl = glm47 ? "" : "\n";
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(m[i].role, "user")) last_user = i;
    sb_append(b, "[gMASK]<sop>");
    if (c->tools) glm_tools(b, c->tools, glm47);
    for (int i = 0; i < n; i++) {
        const char *role = m[i].role;
        if (!strcmp(role, "assistant")) {
            glm_assistant(b, c, m, i, i > last_user, glm47);
        } else if (!strcmp(role, "tool")) {
            /* one <|observation|> for a run of results */
            if (i == 0 || strcmp(m[i - 1].role, "tool")) sb_append(b, "<|observation|>");
            sb_cat(b, nl, "<tool_response>", nl, NULL);
            sb_content(b, m[i].content);
            sb_cat(b, nl, "</tool_response>", NULL);
        } else {
            sb_cat(b, "<|", role, "|>", nl, NULL); /* system or user: checked */
            sb_content(b, m[i].content);
        }
    }
    if (gen) sb_append(b, glm47 ? "<|assistant|><think>" : "<|assistant|>");
}
