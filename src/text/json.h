/* json.h: a small JSON reader and writer for the chat templates (chat.c), which render
 * the tools, calls and results of a conversation from JSON text.
 *
 * The reader is strict RFC 8259 (no comments, no trailing commas, no control
 * characters in strings, no duplicate keys, at most JSON_DEPTH_MAX levels) and keeps an
 * object's keys in their order, as the templates write them in that order. Strings are
 * decoded to UTF-8 (\u escapes included, surrogate pairs joined); numbers keep their
 * text as written. The writer prints what Python's json.dumps(ensure_ascii=False)
 * prints, which is what the models' Jinja templates (tojson) wrote in training: ", "
 * and ": " between items, non-ASCII characters as they are.
 */
#ifndef AL_TEXT_JSON_H
#define AL_TEXT_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "anyllm.h"

enum { JSON_DEPTH_MAX = 64 };

typedef enum json_type {
    JSON_T_NULL,
    JSON_T_BOOL,
    JSON_T_NUMBER,
    JSON_T_STRING,
    JSON_T_ARRAY,
    JSON_T_OBJECT,
} json_type;

typedef struct json_val json_val;
struct json_val {
    json_type type;
    bool b;          /* JSON_T_BOOL */
    const char *s;   /* JSON_T_STRING: decoded, NUL-terminated; JSON_T_NUMBER: as written */
    size_t len;      /* of s */
    const char *key; /* a member of an object: its key, decoded, NUL-terminated */
    size_t key_len;
    json_val *items; /* JSON_T_ARRAY: the elements; JSON_T_OBJECT: the members */
    int n_items;
};

typedef struct json_doc json_doc;

/* Parses text[0..len). On success *doc owns every value and *root is the top one; on
 * failure AL_ERR_ARG (al_last_error() says where, prefixed by what) or AL_ERR_NOMEM,
 * and *doc is NULL. */
al_status json_parse(const char *what, const char *text, size_t len, json_doc **doc,
                     const json_val **root);
void json_doc_free(json_doc *doc); /* NULL is a no-op */

/* The member of an object named key; NULL when there is none or v is not an object. */
const json_val *json_get(const json_val *v, const char *key);
/* The string of a member, or NULL when it is missing or not a string. */
const char *json_get_str(const json_val *v, const char *key);

/* Writes v as Python's json.dumps(v, ensure_ascii=False) would, through put. */
typedef void (*json_put)(void *ctx, const char *s, size_t n);
void json_write(const json_val *v, json_put put, void *ctx);
/* Writes s[0..n) as a JSON string, quotes included. */
void json_write_str(const char *s, size_t n, json_put put, void *ctx);

#endif /* AL_TEXT_JSON_H */
