/* schema.h: JSON Schema to grammar text (al_grammar_create's syntax), for response_format
 * and strict tools.
 *
 * The grammar accepts a subset of the JSON texts the schema accepts, chosen so that a
 * model always has a way forward and always has a way to finish:
 *   - objects write the listed properties in the schema's order, the required ones
 *     always, the others where the model chooses; no other properties (valid for any
 *     additionalProperties); an object without "properties" is any object;
 *   - strings: minLength / maxLength (at most 10000 counted), enum, const, pattern (a
 *     regular-expression subset: literals, classes, ., groups, |, ?, *, +, {m,n},
 *     anchors; see schema.c), format date, time, date-time and uuid;
 *   - integers and numbers with minimum / maximum / exclusive bounds: digits in the
 *     range; numbers with bounds write at most 6 fraction digits, the last not 0, and
 *     no exponent, and a fraction only after an integer part whose every fraction is in
 *     range (so near a bound that is not an integer, fewer numbers are written than
 *     the schema allows); values beyond +-10^15 are not written;
 *   - arrays: items, prefixItems (then exactly the tuple), minItems / maxItems;
 *   - anyOf and oneOf as alternatives (oneOf's branches are not made exclusive), allOf
 *     of one schema, $ref to "#", "#/$defs/..." or "#/definitions/..." (not recursive),
 *     type as a list, enum and const of any JSON values (an enum's literals factored
 *     by their common prefixes, so thousands of them cost the matcher little);
 *   - whitespace where JSON allows it: one space, or a newline and up to 20 spaces or tabs.
 * Any other keyword, except the annotations (title, description, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly), is refused with its name
 * and place, as are recursive $ref, schemas nested deeper than 64 and grammars over
 * SRV_SCHEMA_MAX bytes: a constraint is enforced or refused, never dropped.
 */
#ifndef AL_SERVER_SCHEMA_H
#define AL_SERVER_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>

#include "server/server.h"

enum { SRV_SCHEMA_MAX = 4 << 20 };

/* Rules accumulate in one grammar: several schemas (a tool's each) and the caller's
 * own rules can share it. */
typedef struct srv_gram {
    srv_buf text;
    int n_rules;
    unsigned prims;     /* the shared rules (whitespace, strings, ...) written so far */
    char err[512];      /* why the last call failed */
    /* for $ref: the schema being compiled and the references open on the way */
    const json_t *doc;
    const json_t *open[64];
    int n_open;
} srv_gram;

/* Appends rules defining `name` as the JSON texts that schema accepts. False with
 * g->err set when the schema uses what is not supported or is malformed. */
bool srv_gram_schema(srv_gram *g, const json_t *schema, const char *name);
/* Appends `name ::= "literal"` for text (escaped as the grammar needs). */
bool srv_gram_literal_rule(srv_gram *g, const char *name, const char *text, size_t len);
/* Appends grammar text as is (the caller's own rules). */
bool srv_gram_raw(srv_gram *g, const char *text);
void srv_gram_free(srv_gram *g);

#endif /* AL_SERVER_SCHEMA_H */
