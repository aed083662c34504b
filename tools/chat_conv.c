/* chat_conv.c: the conversation of `anyllm chat` (a growing array of messages) and its
 * JSON file for /save and /load, {"messages":[{"role":"system","content":"..."},...]},
 * the shape of an OpenAI chat request, so a file can be written by hand or by other
 * tools. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

/* The role's static string (al_chat_message.role is not owned), or NULL if unknown. */
static const char *role_name(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant"};
    for (size_t i = 0; i < sizeof roles / sizeof *roles; i++)
        if (!strcmp(role, roles[i])) return roles[i];
    return NULL;
}

int conv_add(chat_conv *cv, const char *role, const char *content) {
    const char *r = role_name(role);
    if (!r) return cli_fail("chat: unknown role '%s'", role);
    if (cv->n == cv->cap) {
        int cap = cv->cap ? 2 * cv->cap : 16;
        al_chat_message *p = realloc(cv->msgs, (size_t)cap * sizeof *p);
        if (!p) return cli_fail("out of memory");
        cv->msgs = p;
        cv->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return cli_fail("out of memory");
    cv->msgs[cv->n++] = (al_chat_message){.role = r, .content = copy};
    return 0;
}

void conv_remove(chat_conv *cv, int first, int count) {
    for (int i = first; i < first + count; i++) free((char *)cv->msgs[i].content);
    memmove(cv->msgs + first, cv->msgs + first + count,
            (size_t)(cv->n - first - count) * sizeof *cv->msgs);
    cv->n -= count;
}

static bool is_system(const al_chat_message *m) { return !strcmp(m->role, "system"); }

bool conv_drop_turn(chat_conv *cv) {
    int first = 0;
    while (first < cv->n - 1 && is_system(&cv->msgs[first])) first++;
    if (first >= cv->n - 1) return false;
    int end = first + 1;
    while (end < cv->n - 1 && strcmp(cv->msgs[end].role, "user")) end++;
    int kept = first; /* a system message inside the turn (a loaded file may have one) */
    for (int i = first; i < end; i++) {
        if (is_system(&cv->msgs[i])) cv->msgs[kept++] = cv->msgs[i];
        else free((char *)cv->msgs[i].content);
    }
    memmove(cv->msgs + kept, cv->msgs + end, (size_t)(cv->n - end) * sizeof *cv->msgs);
    cv->n -= end - kept;
    return true;
}

void conv_clear(chat_conv *cv, bool keep_system) {
    int kept = 0;
    for (int i = 0; i < cv->n; i++) {
        if (keep_system && is_system(&cv->msgs[i])) cv->msgs[kept++] = cv->msgs[i];
        else free((char *)cv->msgs[i].content);
    }
    cv->n = kept;
}

void conv_free(chat_conv *cv) {
    conv_clear(cv, false);
    free(cv->msgs);
    *cv = (chat_conv){0};
}

/* s with each byte that starts no valid UTF-8 character replaced by U+FFFD (JSON
 * strings are UTF-8; a reply may be cut inside a character, or be any bytes); NULL
 * when out of memory. */
static char *utf8_fixed(const char *s) {
    const size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    for (size_t i = 0; out && i < n;) {
        const size_t k = al_utf8_char_len(s + i, n - i);
        if (k) {
            memcpy(o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    if (out) *o = 0;
    return out;
}

int conv_save(const chat_conv *cv, const char *path) {
    json_t *root = json_object(), *arr = json_array();
    bool ok = root && arr && json_object_set(root, "messages", arr) == 0;
    for (int i = 0; ok && i < cv->n; i++) {
        char *content = utf8_fixed(cv->msgs[i].content);
        json_t *m = content ? json_pack("{s:s, s:s}", "role", cv->msgs[i].role, "content",
                                        content) : NULL;
        free(content);
        ok = m && json_array_append_new(arr, m) == 0;
    }
    json_decref(arr);
    if (!ok) {
        json_decref(root);
        return cli_fail("/save: out of memory");
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        json_decref(root);
        return cli_fail("/save: cannot write %s: %s", path, strerror(errno));
    }
    /* indented: a person may read or edit the file */
    int bad = json_dumpf(root, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0;
    bad |= fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    json_decref(root);
    return bad ? cli_fail("/save: writing %s failed: %s", path, strerror(errno)) : 0;
}

/* The messages of a parsed file into *out; 0, or 1 with the reason printed. */
static int load_messages(chat_conv *out, json_t *root, const char *path) {
    json_t *arr = json_is_object(root) ? json_object_get(root, "messages") : NULL;
    if (!json_is_array(arr))
        return cli_fail("/load: %s: expected an object {\"messages\": [...]}", path);
    size_t i;
    json_t *m;
    json_array_foreach(arr, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role) || !json_is_string(content))
            return cli_fail("/load: %s: message %zu needs \"role\" and \"content\" strings",
                            path, i + 1);
        if (!role_name(json_string_value(role)))
            return cli_fail("/load: %s: message %zu has the role '%s' (expected system, user "
                            "or assistant)", path, i + 1, json_string_value(role));
        if (conv_add(out, json_string_value(role), json_string_value(content))) return 1;
    }
    return 0;
}

int conv_load(chat_conv *out, const char *path) {
    /* fopen first: its errno says "No such file or directory" plainly, where jansson
     * would wrap it in a longer message */
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail("/load: cannot open %s: %s", path, strerror(errno));
    json_error_t err;
    /* a NUL inside a string is refused (\u0000): a message is a C string */
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
    fclose(f);
    if (!root)
        return cli_fail("/load: %s is not valid JSON (line %d: %s)", path, err.line, err.text);
    int rc = load_messages(out, root, path);
    json_decref(root);
    if (rc) conv_free(out);
    return rc;
}
