/* toolcall.h: tool calls out of a model's reply, as it streams.
 *
 * Models of the chatml family (Qwen 2.5/3, Hermes, SmolLM2 with tools) write a call as
 *   <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
 * and Qwen3.5/3.6 and Qwen3-Coder as
 *   <tool_call><function=get_weather><parameter=city>Paris</parameter></function></tool_call>
 * (newlines around each part). One parser reads both: a block is JSON when it starts
 * with '{', XML when it starts with "<function=". What it gives:
 *   - text outside the blocks is text; the whitespace between text and a block, between
 *     blocks and after the last one is markup and dropped;
 *   - a block that parses is a call: its name and its arguments as one compact JSON
 *     object ("arguments" as an object or as a string holding one; none is {}). An XML
 *     parameter's value loses one newline (\n or \r\n) at each end; it is a JSON
 *     string where the request's tool gives the parameter the type "string" (or the
 *     value is not JSON), else the JSON value it reads as (3, true, [1, 2], {"a": 1});
 *   - a block that does not parse (not JSON, no name, arguments that are not an object,
 *     an XML part missing, a parameter twice) is text, tags included, as written;
 *   - a block left open at the end of the reply, or cut by a new <tool_call>, is a call
 *     if what it holds parses, else text; a </tool_call> outside a block is dropped
 *     right after a call (a duplicated closing tag), text anywhere else;
 *   - a block over SRV_TC_BLOCK_MAX bytes is text.
 * How the reply is cut into pushes does not change the result: text that may begin a
 * tag, and whitespace that may precede one, are held back until more text decides.
 *
 * Llama 3 (srv_tc_bare), Mistral (srv_tc_mistral), Harmony (srv_tc_harmony), Gemma 4
 * (srv_tc_gemma4) and GLM (srv_tc_glm) are modes of the same parser, with the same events
 * and the same guarantees.
 */
#ifndef AL_SERVER_TOOLCALL_H
#define AL_SERVER_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "anyllm.h"

enum { SRV_TC_BLOCK_MAX = 256 * 1024 };

typedef enum srv_tc_kind { SRV_TC_TEXT, SRV_TC_CALL } srv_tc_kind;

typedef struct srv_tc_event {
    srv_tc_kind kind;
    const char *text; /* SRV_TC_TEXT: len bytes, not NUL-terminated */
    size_t len;
    int index;             /* SRV_TC_CALL: 0 for the reply's first call, then 1, ... */
    const char *name;      /* SRV_TC_CALL: NUL-terminated */
    const char *arguments; /* SRV_TC_CALL: a JSON object, compact, NUL-terminated */
} srv_tc_event;

typedef struct srv_tc srv_tc;

/* How a reply's text writes tool calls, by chat format: tags (chatml; also Harmony,
 * whose calls the engine writes as tags: engine.h), bare JSON (Llama 3), [TOOL_CALLS]
 * (Mistral), <|tool_call>call:NAME{...} (Gemma 4), <tool_call>NAME<arg_key>... (GLM). */
typedef enum srv_calls {
    SRV_CALLS_TAGGED,
    SRV_CALLS_BARE,
    SRV_CALLS_MISTRAL,
    SRV_CALLS_GEMMA4,
    SRV_CALLS_GLM,
} srv_calls;

/* srv_tc_create, then the mode of `how`. */
srv_tc *srv_tc_create_for(const json_t *tools, srv_calls how);

/* A parser for one reply. tools (may be NULL) is the request's "tools" array, read for
 * the parameters' types of XML calls while the parser lives; the parser takes no
 * reference. NULL when memory runs out. */
srv_tc *srv_tc_create(const json_t *tools);
void srv_tc_destroy(srv_tc *p); /* NULL is a no-op */

/* Llama 3 writes a call as a bare JSON object, {"name": ..., "parameters": {...}}, as the
 * whole reply: with this (before the first push) a reply whose first non-blank byte is
 * '{' is held to its end and is calls when all of it is call objects separated by
 * whitespace or ';' (at most 64), else text as usual. */
void srv_tc_bare(srv_tc *p);

/* Mistral (before the first push): the reply's text holds "[TOOL_CALLS]" where the model
 * wrote that control token (the engine writes its text), and a block runs from it to the
 * next one or to the end of the reply. A block is calls when it is
 *   - a JSON array of call objects {"name", "arguments"} (as the Hermes objects above;
 *     "id" ignored; at most 64), or one such object: all of them parse or none does;
 *   - or NAME[ARGS]{...} (Mistral's newer tokenizers; NAME[CALL_ID]ID[ARGS]{...} too),
 *     NAME of [A-Za-z0-9_.-], the arguments a JSON object; parallel calls repeat
 *     [TOOL_CALLS];
 * what follows the calls in the block is text (whitespace around it dropped). A block
 * of neither form is text, "[TOOL_CALLS]" included; a blank one (the marker alone, or
 * twice in a row) is dropped. Text before the first [TOOL_CALLS] is text. */
void srv_tc_mistral(srv_tc *p);

/* Gemma 4 (before the first push): a block runs from <|tool_call> to <tool_call|> (the
 * engine writes these control tokens' text, and <|"|>'s) and is
 *   call:NAME{key:VALUE,...}
 * in Gemma's notation: keys bare (or between <|"|> markers), strings between <|"|>
 * markers taken as they are (no escapes), objects {...} and arrays [...] of the same,
 * numbers, true, false, null (and None, as Gemma's template prints null), whitespace
 * allowed between the parts, at most 64 levels deep; NAME (and a bare key) has no
 * whitespace, quotes, colons, braces or angle brackets. The arguments become JSON
 * ({"city": "Paris", "days": 2}). A block that is not this (a key twice, a bare word as a
 * value, something after the closing brace) is text, tags included; the rules on open,
 * cut and oversized blocks are those above. */
void srv_tc_gemma4(srv_tc *p);

/* GLM-4.5/4.6/4.7 (before the first push): a <tool_call> block may also be
 *   NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...
 * (whitespace allowed between the parts; GLM-4.5 writes newlines there); NAME and each
 * KEY have no whitespace, quotes, colons, braces or angle brackets; a KEY twice is no
 * call. A VALUE is read as an XML parameter's above, without losing newlines: a string
 * where the tool gives its parameter the type "string" or it is not JSON, else the JSON
 * value. JSON and XML blocks are calls too, as above. */
void srv_tc_glm(srv_tc *p);

/* Harmony (gpt-oss; before the first call): the parser reads the pieces of al_harmony
 * (srv_tc_pieces) instead of text. A run of pieces of one channel with the recipient
 * "functions.NAME" is the body of a call of NAME: it ends at a piece of another channel
 * or recipient, or at srv_tc_finish; it is a call when the body is a JSON object
 * (compacted) or blank (no arguments: {}), at most SRV_TC_BLOCK_MAX bytes, and NAME is
 * not empty, else the body is text.
 * Final-channel text is text; the rest (analysis, commentary without a recipient,
 * other recipients) gives no event: the engine shows it as reasoning, if at all. Text
 * given with srv_tc_push in this mode is final text. Two calls with nothing between
 * them are one run: gpt-oss ends its reply with each call (<|call|>). */
void srv_tc_harmony(srv_tc *p);

/* Harmony mode: feeds the pieces al_harmony_push_token (or _push, _finish) returned, in
 * order. Events as srv_tc_push. How the reply was cut into pieces does not change the
 * events. Ignored (no events) when the parser is not in Harmony mode. */
bool srv_tc_pieces(srv_tc *p, const al_chat_piece *pieces, int n, const srv_tc_event **ev,
                   int *n_ev);

/* Feeds n bytes of the reply. *ev lists what is now decided, in order (adjacent text
 * merged); it is owned by the parser and valid until its next call. False when memory
 * ran out: the parser is then unusable. */
bool srv_tc_push(srv_tc *p, const char *s, size_t n, const srv_tc_event **ev, int *n_ev);

/* The end of the reply: decides what was held back. Later pushes are ignored. */
bool srv_tc_finish(srv_tc *p, const srv_tc_event **ev, int *n_ev);

/* Calls found so far. */
int srv_tc_calls(const srv_tc *p);

#endif
