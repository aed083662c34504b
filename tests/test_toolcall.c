/* test_toolcall.c: the tool-call parser (src/server/toolcall.h) on a table of replies per
 * format, Hermes JSON, Qwen's XML, Llama 3's bare JSON, Mistral's [TOOL_CALLS],
 * Harmony's pieces, Gemma 4's <|tool_call>call:NAME{...} and GLM's <arg_key> calls: text
 * before, between and after calls, parallel calls, malformed markup (unclosed and
 * duplicated tags, arguments that are not JSON or not an object, missing parts), unicode
 * and escapes in arguments. Each reply is fed whole, cut in two
 * at every byte, and byte by byte: the events, adjacent text merged, must be the table's
 * every time. Harmony's replies are written as the pieces al_harmony gives (channel,
 * recipient, text), cut the same way.
 */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"
#include "server/toolcall.h"
#include "test.h"

typedef struct tc_case {
    const char *name, *reply, *want; /* want: T[text] per text, Cindex:name:arguments per call */
} tc_case;

static const tc_case k_json_cases[] = {
    {"plain text", "Hello world", "T[Hello world]"},
    {"empty reply", "", ""},
    {"one call",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"text before",
     "Let me check.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}</tool_call>",
     "T[Let me check.]C0:get_weather:{\"city\":\"Paris\"}"},
    {"text after",
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}</tool_call>\nDone.",
     "C0:get_weather:{\"city\":\"Paris\"}T[Done.]"},
    {"two calls",
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}</tool_call>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
     "C0:get_weather:{\"city\":\"Paris\"}C1:f:{}"},
    {"three calls",
     "<tool_call>{\"name\":\"a\"}</tool_call><tool_call>{\"name\":\"b\"}</"
     "tool_call>\n\n<tool_call>{\"name\":\"c\"}</tool_call>",
     "C0:a:{}C1:b:{}C2:c:{}"},
    {"arguments as a string",
     "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}</tool_call>", "C0:f:{\"a\":1}"},
    {"no arguments", "<tool_call>{\"name\":\"f\"}</tool_call>", "C0:f:{}"},
    {"parameters for arguments",
     "<tool_call>{\"name\":\"f\",\"parameters\":{\"x\":true}}</tool_call>", "C0:f:{\"x\":true}"},
    {"arguments an array", "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>",
     "T[<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>]"},
    {"arguments string not JSON", "<tool_call>{\"name\":\"f\",\"arguments\":\"x\"}</tool_call>",
     "T[<tool_call>{\"name\":\"f\",\"arguments\":\"x\"}</tool_call>]"},
    {"arguments null", "<tool_call>{\"name\":\"f\",\"arguments\":null}</tool_call>",
     "T[<tool_call>{\"name\":\"f\",\"arguments\":null}</tool_call>]"},
    {"no name", "<tool_call>{\"arguments\":{}}</tool_call>",
     "T[<tool_call>{\"arguments\":{}}</tool_call>]"},
    {"name not a string", "<tool_call>{\"name\":3}</tool_call>",
     "T[<tool_call>{\"name\":3}</tool_call>]"},
    {"empty name", "<tool_call>{\"name\":\"\"}</tool_call>",
     "T[<tool_call>{\"name\":\"\"}</tool_call>]"},
    {"not JSON", "<tool_call>hello</tool_call>", "T[<tool_call>hello</tool_call>]"},
    {"single quotes", "<tool_call>{'name': 'f'}</tool_call>",
     "T[<tool_call>{'name': 'f'}</tool_call>]"},
    {"garbage after the JSON", "<tool_call>{\"name\":\"f\"} extra</tool_call>",
     "T[<tool_call>{\"name\":\"f\"} extra</tool_call>]"},
    {"unclosed, complete",
     "ok\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
     "T[ok]C0:get_weather:{\"city\":\"Paris\"}"},
    {"unclosed, cut short", "<tool_call>{\"name\": \"f\", \"argu",
     "T[<tool_call>{\"name\": \"f\", \"argu]"},
    {"duplicated closing tag",
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}</tool_call></tool_call>",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"duplicated closing tag, then text",
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}</tool_call>\n</tool_call>\nok",
     "C0:get_weather:{\"city\":\"Paris\"}T[ok]"},
    {"stray closing tag in text", "a </tool_call> b", "T[a </tool_call> b]"},
    {"a call cut by the next",
     "<tool_call>{\"name\":\"a\"}\n<tool_call>{\"name\":\"b\"}</tool_call>", "C0:a:{}C1:b:{}"},
    {"a broken call cut by the next", "<tool_call>{\"na\n<tool_call>{\"name\":\"b\"}</tool_call>",
     "T[<tool_call>{\"na\n]C0:b:{}"},
    {"unicode",
     "<tool_call>{\"name\":\"f\",\"arguments\":{\"city\":\"Zürich 東京 🌍\"}}</tool_call>",
     "C0:f:{\"city\":\"Zürich 東京 🌍\"}"},
    {"escapes",
     "<tool_call>{\"name\":\"f\",\"arguments\":{\"q\":\"a\\\"b\\\\c\\nd\\t\"}}</tool_call>",
     "C0:f:{\"q\":\"a\\\"b\\\\c\\nd\\t\"}"},
    {"unicode escapes",
     "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"\\u00e9\\ud83c\\udf0d\"}}</tool_call>",
     "C0:f:{\"s\":\"é🌍\"}"},
    {"angle brackets in text", "if a < b then <b>bold</b>", "T[if a < b then <b>bold</b>]"},
    {"a tag's start at the end", "see <tool_ca", "T[see <tool_ca]"},
    {"almost a tag", "x <tool_callx y", "T[x <tool_callx y]"},
    {"text between calls",
     "<tool_call>{\"name\":\"a\"}</tool_call> and then <tool_call>{\"name\":\"b\"}</tool_call>",
     "C0:a:{}T[and then]C1:b:{}"},
    {"nested arguments",
     "<tool_call>{\"name\":\"f\",\"arguments\":{\"o\":{\"x\":[1,2,{\"y\":null}]}}}</tool_call>",
     "C0:f:{\"o\":{\"x\":[1,2,{\"y\":null}]}}"},
    {"duplicate keys", "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1,\"a\":2}}</tool_call>",
     "T[<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1,\"a\":2}}</tool_call>]"},
    {"numbers and booleans",
     "<tool_call>{\"name\":\"f\",\"arguments\":{\"n\":-3,\"b\":false,\"s\":\"1\"}}</tool_call>",
     "C0:f:{\"n\":-3,\"b\":false,\"s\":\"1\"}"},
    {"blank lines first",
     "\n\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"CRLF",
     "<tool_call>\r\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}\r\n</tool_call>\r\n",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"upper-case tag",
     "<TOOL_CALL>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</TOOL_CALL>",
     "T[<TOOL_CALL>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</TOOL_CALL>]"},
    {"empty block", "<tool_call></tool_call>", "T[<tool_call></tool_call>]"},
    {"blank block", "<tool_call>  \n </tool_call>", "T[<tool_call>  \n </tool_call>]"},
    {"spaces inside text", "a   b\n\nc  ", "T[a   b\n\nc  ]"},
    {"text, call, text, call",
     "one<tool_call>{\"name\":\"a\"}</tool_call>two<tool_call>{\"name\":\"b\"}</tool_call>",
     "T[one]C0:a:{}T[two]C1:b:{}"},
    {"name with arguments first",
     "<tool_call>{\"arguments\":{\"k\":\"v\"},\"name\":\"f\"}</tool_call>", "C0:f:{\"k\":\"v\"}"},
};
static const tc_case k_xml_cases[] = {
    {"one call",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"an integer by the schema",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</"
     "parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "C0:get_weather:{\"city\":\"Paris\",\"days\":3}"},
    {"a string by the schema",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\n123\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:get_weather:{\"city\":\"123\"}"},
    {"no schema: JSON values",
     "<tool_call>\n<function=other>\n<parameter=n>\n42\n</parameter>\n<parameter=b>\ntrue\n</"
     "parameter>\n<parameter=s>\nhello\n</parameter>\n</function>\n</tool_call>",
     "C0:other:{\"n\":42,\"b\":true,\"s\":\"hello\"}"},
    {"null",
     "<tool_call>\n<function=other>\n<parameter=x>\nnull\n</parameter>\n</function>\n</tool_call>",
     "C0:other:{\"x\":null}"},
    {"multi-line value",
     "<tool_call>\n<function=note>\n<parameter=text>\nline 1\nline "
     "2\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"line 1\\nline 2\"}"},
    {"one newline stripped per end",
     "<tool_call>\n<function=note>\n<parameter=text>\n\nx\n\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:note:{\"text\":\"\\nx\\n\"}"},
    {"CRLF around a value",
     "<tool_call>\n<function=note>\r\n<parameter=text>\r\nx\r\n</parameter>\r\n</function>\r\n</"
     "tool_call>",
     "C0:note:{\"text\":\"x\"}"},
    {"no parameters", "<tool_call>\n<function=list_files>\n</function>\n</tool_call>",
     "C0:list_files:{}"},
    {"</function> left out",
     "<tool_call>\n<function=note>\n<parameter=text>\nx\n</parameter>\n</tool_call>",
     "C0:note:{\"text\":\"x\"}"},
    {"</parameter> left out",
     "<tool_call>\n<function=note>\n<parameter=text>\nx\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=note>\n<parameter=text>\nx\n</function>\n</tool_call>]"},
    {"a parameter twice",
     "<tool_call>\n<function=note>\n<parameter=text>\na\n</parameter>\n<parameter=text>\nb\n</"
     "parameter>\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=note>\n<parameter=text>\na\n</parameter>\n<parameter=text>\nb\n</"
     "parameter>\n</function>\n</tool_call>]"},
    {"empty function name", "<tool_call>\n<function=>\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=>\n</function>\n</tool_call>]"},
    {"name trimmed",
     "<tool_call>\n<function= note >\n<parameter= text "
     ">\nx\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"x\"}"},
    {"'<' in the name", "<tool_call>\n<function=a<b>\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=a<b>\n</function>\n</tool_call>]"},
    {"empty parameter name",
     "<tool_call>\n<function=f>\n<parameter=>\nx\n</parameter>\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=f>\n<parameter=>\nx\n</parameter>\n</function>\n</tool_call>]"},
    {"text before and after",
     "I will "
     "look.\n\n<tool_call>\n<function=note>\n<parameter=text>\na\n</parameter>\n</function>\n</"
     "tool_call>\n\nDone.",
     "T[I will look.]C0:note:{\"text\":\"a\"}T[Done.]"},
    {"parallel calls",
     "<tool_call>\n<function=note>\n<parameter=text>\na\n</parameter>\n</function>\n</"
     "tool_call>\n<tool_call>\n<function=note>\n<parameter=text>\nb\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:note:{\"text\":\"a\"}C1:note:{\"text\":\"b\"}"},
    {"three calls",
     "<tool_call>\n<function=a>\n</function>\n</tool_call><tool_call>\n<function=b>\n</"
     "function>\n</tool_call><tool_call>\n<function=c>\n</function>\n</tool_call>",
     "C0:a:{}C1:b:{}C2:c:{}"},
    {"unclosed, complete",
     "<tool_call>\n<function=note>\n<parameter=text>\na\n</parameter>\n</function>\n",
     "C0:note:{\"text\":\"a\"}"},
    {"unclosed, cut short", "<tool_call>\n<function=note>\n<parameter=text>\nx",
     "T[<tool_call>\n<function=note>\n<parameter=text>\nx]"},
    {"garbage between parameters",
     "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\nhmm\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\nhmm\n</function>\n</"
     "tool_call>]"},
    {"garbage after </function>", "<tool_call>\n<function=f>\n</function>\nmore\n</tool_call>",
     "T[<tool_call>\n<function=f>\n</function>\nmore\n</tool_call>]"},
    {"an object value",
     "<tool_call>\n<function=other>\n<parameter=opts>\n{\"a\": [1, "
     "2]}\n</parameter>\n</function>\n</tool_call>",
     "C0:other:{\"opts\":{\"a\":[1,2]}}"},
    {"an array value",
     "<tool_call>\n<function=other>\n<parameter=xs>\n[1, "
     "\"two\"]\n</parameter>\n</function>\n</tool_call>",
     "C0:other:{\"xs\":[1,\"two\"]}"},
    {"not JSON: a string",
     "<tool_call>\n<function=get_weather>\n<parameter=days>\n{oops\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:get_weather:{\"days\":\"{oops\"}"},
    {"unicode value",
     "<tool_call>\n<function=note>\n<parameter=text>\nZürich 東京 "
     "🌍\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"Zürich 東京 🌍\"}"},
    {"quotes and backslashes",
     "<tool_call>\n<function=note>\n<parameter=text>\nsay \"hi\" \\ "
     "now\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"say \\\"hi\\\" \\\\ now\"}"},
    {"'<' in a value",
     "<tool_call>\n<function=note>\n<parameter=text>\na < b "
     "<i>\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"a < b <i>\"}"},
    {"a partial closing tag in a value",
     "<tool_call>\n<function=note>\n<parameter=text>\nx </param "
     "y\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"x </param y\"}"},
    {"empty value",
     "<tool_call>\n<function=note>\n<parameter=text></parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"\"}"},
    {"a string keeps its zeros",
     "<tool_call>\n<function=note>\n<parameter=text>\n007\n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"007\"}"},
    {"JSON text for a string",
     "<tool_call>\n<function=note>\n<parameter=text>\n{\"a\":1}\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:note:{\"text\":\"{\\\"a\\\":1}\"}"},
    {"duplicated closing tag",
     "<tool_call>\n<function=a>\n</function>\n</tool_call></tool_call>\nok", "C0:a:{}T[ok]"},
    {"JSON then XML",
     "<tool_call>{\"name\":\"a\"}</"
     "tool_call>\n<tool_call>\n<function=note>\n<parameter=text>\nb\n</parameter>\n</function>\n</"
     "tool_call>",
     "C0:a:{}C1:note:{\"text\":\"b\"}"},
    {"on one line",
     "<tool_call><function=note><parameter=text>x</parameter></function></tool_call>",
     "C0:note:{\"text\":\"x\"}"},
    {"not a parameter after the name",
     "<tool_call>\n<function=f>\nhello\n</function>\n</tool_call>",
     "T[<tool_call>\n<function=f>\nhello\n</function>\n</tool_call>]"},
    {"neither JSON nor XML", "<tool_call>call f()</tool_call>",
     "T[<tool_call>call f()</tool_call>]"},
    {"a call cut by the next",
     "<tool_call>\n<function=a>\n</function>\n<tool_call>\n<function=b>\n</function>\n</tool_call>",
     "C0:a:{}C1:b:{}"},
    {"a long value",
     "<tool_call>\n<function=note>\n<parameter=text>\nword word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word \n</parameter>\n</function>\n</tool_call>",
     "C0:note:{\"text\":\"word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word word word \"}"},
    {"text only, with tags' look-alikes", "<function=f> is how it is written",
     "T[<function=f> is how it is written]"},
    {"blank lines between calls and text",
     "\n\n<tool_call>\n<function=a>\n</function>\n</tool_call>\n\n\n<tool_call>\n<function=b>\n</"
     "function>\n</tool_call>\n\n",
     "C0:a:{}C1:b:{}"},
};

/* Llama 3 (srv_tc_bare): a reply that is only call objects is calls; anything else is
 * text (and <tool_call> blocks as above), decided from the whole reply. */
static const tc_case k_bare_cases[] = {
    {"plain text", "Hello world", "T[Hello world]"},
    {"empty reply", "", ""},
    {"one call", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"arguments for parameters", "{\"name\": \"f\", \"arguments\": {\"x\": 1}}", "C0:f:{\"x\":1}"},
    {"both: arguments win", "{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"parameters\": {\"b\": 2}}",
     "C0:f:{\"a\":1}"},
    {"blank before", "\n\n  {\"name\": \"f\", \"parameters\": {}}", "C0:f:{}"},
    {"blank after", "{\"name\": \"f\", \"parameters\": {}}\n\n", "C0:f:{}"},
    {"two calls, ;", "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}",
     "C0:a:{}C1:b:{}"},
    {"two calls, newline", "{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {}}",
     "C0:a:{}C1:b:{}"},
    {"three calls", "{\"name\":\"a\"};{\"name\":\"b\"} ; {\"name\":\"c\"}", "C0:a:{}C1:b:{}C2:c:{}"},
    {"trailing ;", "{\"name\": \"f\"};", "C0:f:{}"},
    {"no parameters", "{\"name\": \"f\"}", "C0:f:{}"},
    {"parameters a JSON string", "{\"name\": \"f\", \"parameters\": \"{\\\"a\\\": 1}\"}", "C0:f:{\"a\":1}"},
    {"parameters an empty string", "{\"name\": \"f\", \"parameters\": \"\"}",
     "T[{\"name\": \"f\", \"parameters\": \"\"}]"},
    {"parameters an array", "{\"name\": \"f\", \"parameters\": [1]}",
     "T[{\"name\": \"f\", \"parameters\": [1]}]"},
    {"parameters null", "{\"name\": \"f\", \"parameters\": null}",
     "T[{\"name\": \"f\", \"parameters\": null}]"},
    {"no name", "{\"parameters\": {}}", "T[{\"parameters\": {}}]"},
    {"empty name", "{\"name\": \"\"}", "T[{\"name\": \"\"}]"},
    {"name a number", "{\"name\": 7}", "T[{\"name\": 7}]"},
    {"an object that is no call", "{\"a\": 1, \"b\": [true]}", "T[{\"a\": 1, \"b\": [true]}]"},
    {"empty object", "{}", "T[{}]"},
    {"a brace alone", "{", "T[{]"},
    {"unclosed", "{\"name\": \"f\", \"parameters\": {\"a\": 1}", "T[{\"name\": \"f\", \"parameters\": {\"a\": 1}]"},
    {"not JSON", "{hello}", "T[{hello}]"},
    {"an array first", "[{\"name\": \"f\"}]", "T[[{\"name\": \"f\"}]]"},
    {"text first", "Sure: {\"name\": \"f\"}", "T[Sure: {\"name\": \"f\"}]"},
    {"text after a call", "{\"name\": \"f\"} and done", "T[{\"name\": \"f\"} and done]"},
    {"text on the next line", "{\"name\": \"f\"}\nDone.", "T[{\"name\": \"f\"}\nDone.]"},
    {"a bad second call", "{\"name\": \"f\"}; {\"x\": 1}", "T[{\"name\": \"f\"}; {\"x\": 1}]"},
    {"separated by a comma", "{\"name\": \"a\"},{\"name\": \"b\"}", "T[{\"name\": \"a\"},{\"name\": \"b\"}]"},
    {"a leading ;", "; {\"name\": \"f\"}", "T[; {\"name\": \"f\"}]"},
    {"duplicated key", "{\"name\": \"f\", \"parameters\": {\"a\": 1, \"a\": 2}}",
     "T[{\"name\": \"f\", \"parameters\": {\"a\": 1, \"a\": 2}}]"},
    {"unicode and escapes", "{\"name\": \"note\", \"parameters\": {\"t\": \"caf\\u00e9 \\\"q\\\" \\\\ \\n \xe2\x98\x83\"}}",
     "C0:note:{\"t\":\"caf\xc3\xa9 \\\"q\\\" \\\\ \\n \xe2\x98\x83\"}"},
    {"nested values", "{\"name\": \"f\", \"parameters\": {\"x\": [1, {\"y\": null}], \"z\": {\"w\": false}}}",
     "C0:f:{\"x\":[1,{\"y\":null}],\"z\":{\"w\":false}}"},
    {"numbers", "{\"name\": \"f\", \"parameters\": {\"i\": -3, \"d\": 2.5, \"e\": 1e3}}",
     "C0:f:{\"i\":-3,\"d\":2.5,\"e\":1000.0}"},
    {"a name with a space", "{\"name\": \"get weather\"}", "C0:get weather:{}"},
    {"only blanks", "  \n ", "T[  \n ]"},
    {"a Hermes block", "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "C0:f:{}"},
    {"text before a Hermes block", "Ok. <tool_call>{\"name\": \"f\"}</tool_call>", "T[Ok.]C0:f:{}"},
    {"a bare call then a block", "{\"name\": \"a\"}<tool_call>{\"name\": \"b\"}</tool_call>",
     "T[{\"name\": \"a\"}]C0:b:{}"},
    {"braces inside strings", "{\"name\": \"f\", \"parameters\": {\"s\": \"}{;\"}}", "C0:f:{\"s\":\"}{;\"}"},
    {"a tab and CRLF between", "{\"name\": \"a\"}\t\r\n{\"name\": \"b\"}", "C0:a:{}C1:b:{}"},
};

/* Mistral (srv_tc_mistral): "[TOOL_CALLS]" is the text of the control token. */
#define TC "[TOOL_CALLS]"
static const tc_case k_mistral_cases[] = {
    {"plain text", "Hello world", "T[Hello world]"},
    {"empty reply", "", ""},
    {"one call", TC "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"with an id", TC "[{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcDEF123\"}]",
     "C0:f:{\"a\":1}"},
    {"text before", "Let me check." TC "[{\"name\": \"f\", \"arguments\": {}}]", "T[Let me check.]C0:f:{}"},
    {"blank between text and marker", "Checking.\n\n " TC "[{\"name\": \"f\"}]", "T[Checking.]C0:f:{}"},
    {"two calls in one array",
     TC "[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
     "C0:a:{\"x\":1}C1:b:{}"},
    {"three calls", TC "[{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"c\"}]",
     "C0:a:{}C1:b:{}C2:c:{}"},
    {"one object, no array", TC "{\"name\": \"f\", \"arguments\": {\"k\": \"v\"}}", "C0:f:{\"k\":\"v\"}"},
    {"arguments as a string", TC "[{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}]",
     "C0:f:{\"a\":1}"},
    {"parameters for arguments", TC "[{\"name\": \"f\", \"parameters\": {\"b\": true}}]",
     "C0:f:{\"b\":true}"},
    {"no arguments", TC "[{\"name\": \"f\"}]", "C0:f:{}"},
    {"the [ARGS] form", TC "get_weather[ARGS]{\"city\": \"Paris\"}",
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"the [ARGS] form, parallel", TC "a[ARGS]{}" TC "b[ARGS]{\"x\": 1}", "C0:a:{}C1:b:{\"x\":1}"},
    {"the [CALL_ID] form", TC "f[CALL_ID]abcDEF123[ARGS]{\"q\": \"x\"}", "C0:f:{\"q\":\"x\"}"},
    {"text after the array", TC "[{\"name\": \"f\"}]\n\nDone.", "C0:f:{}T[Done.]"},
    {"text after [ARGS]", TC "f[ARGS]{} and more", "C0:f:{}T[and more]"},
    {"unclosed array", TC "[{\"name\": \"f\", \"argu", "T[" TC "[{\"name\": \"f\", \"argu]"},
    {"unclosed [ARGS] object", TC "f[ARGS]{\"a\": ", "T[" TC "f[ARGS]{\"a\": ]"},
    {"arguments not JSON", TC "[{\"name\": \"f\", \"arguments\": \"x\"}]",
     "T[" TC "[{\"name\": \"f\", \"arguments\": \"x\"}]]"},
    {"arguments an array", TC "[{\"name\": \"f\", \"arguments\": [1]}]",
     "T[" TC "[{\"name\": \"f\", \"arguments\": [1]}]]"},
    {"no name", TC "[{\"arguments\": {}}]", "T[" TC "[{\"arguments\": {}}]]"},
    {"empty name", TC "[{\"name\": \"\"}]", "T[" TC "[{\"name\": \"\"}]]"},
    {"one bad call of two", TC "[{\"name\": \"a\"}, {\"x\": 1}]",
     "T[" TC "[{\"name\": \"a\"}, {\"x\": 1}]]"},
    {"empty array", TC "[]", "T[" TC "[]]"},
    {"not JSON", TC "call f()", "T[" TC "call f()]"},
    {"the marker alone at the end", "Hmm." TC, "T[Hmm.]"},
    {"the marker alone, blank after", "Hmm." TC " \n", "T[Hmm.]"},
    {"duplicated marker", TC TC "[{\"name\": \"f\"}]", "C0:f:{}"},
    {"a marker after the call", TC "[{\"name\": \"f\"}]" TC, "C0:f:{}"},
    {"unicode", TC "[{\"name\": \"f\", \"arguments\": {\"city\": \"Zürich 東京 🌍\"}}]",
     "C0:f:{\"city\":\"Zürich 東京 🌍\"}"},
    {"escapes", TC "[{\"name\": \"f\", \"arguments\": {\"q\": \"a\\\"b\\\\c\\nd\\t\"}}]",
     "C0:f:{\"q\":\"a\\\"b\\\\c\\nd\\t\"}"},
    {"unicode escapes", TC "[{\"name\": \"f\", \"arguments\": {\"s\": \"\\u00e9\\ud83c\\udf0d\"}}]",
     "C0:f:{\"s\":\"é🌍\"}"},
    {"nested arguments", TC "[{\"name\": \"f\", \"arguments\": {\"o\": {\"x\": [1, {\"y\": null}]}}}]",
     "C0:f:{\"o\":{\"x\":[1,{\"y\":null}]}}"},
    {"duplicate keys", TC "[{\"name\": \"f\", \"arguments\": {\"a\": 1, \"a\": 2}}]",
     "T[" TC "[{\"name\": \"f\", \"arguments\": {\"a\": 1, \"a\": 2}}]]"},
    {"a marker's start at the end", "see [TOOL_CA", "T[see [TOOL_CA]"},
    {"almost a marker", "x [TOOL_CALLSX] y", "T[x [TOOL_CALLSX] y]"},
    {"lower case", "[tool_calls][{\"name\": \"f\"}]", "T[[tool_calls][{\"name\": \"f\"}]]"},
    {"brackets in text", "a [1, 2] b [INST]", "T[a [1, 2] b [INST]]"},
    {"a bad name in the [ARGS] form", TC "get weather[ARGS]{}", "T[" TC "get weather[ARGS]{}]"},
    {"[ARGS] with an array", TC "f[ARGS][1]", "T[" TC "f[ARGS][1]]"},
    {"no [ARGS]", TC "f{\"a\": 1}", "T[" TC "f{\"a\": 1}]"},
    {"text between blocks", TC "[{\"name\": \"a\"}] then " TC "[{\"name\": \"b\"}]",
     "C0:a:{}T[then]C1:b:{}"},
    {"newlines around the array", TC "\n[{\"name\": \"f\"}]\r\n", "C0:f:{}"},
    {"numbers and booleans",
     TC "[{\"name\": \"f\", \"arguments\": {\"n\": -3, \"d\": 2.5, \"b\": false, \"s\": \"1\"}}]",
     "C0:f:{\"n\":-3,\"d\":2.5,\"b\":false,\"s\":\"1\"}"},
    {"Hermes tags are text here", "<tool_call>{\"name\": \"f\"}</tool_call>",
     "T[<tool_call>{\"name\": \"f\"}</tool_call>]"},
};
#undef TC

/* Harmony (srv_tc_harmony): a reply is the pieces al_harmony gives, each written
 * "\x01" CHANNEL RECIPIENT "\x02" TEXT: CHANNEL f(inal), a(nalysis) or c(ommentary). */
#define FIN(t) "\x01" "f\x02" t
#define ANA(t) "\x01" "a\x02" t
#define COM(t) "\x01" "c\x02" t
#define CALL(fn, args) "\x01" "cfunctions." fn "\x02" args
static const tc_case k_harmony_cases[] = {
    {"final text", FIN("Hello world"), "T[Hello world]"},
    {"empty reply", "", ""},
    {"one call", CALL("get_weather", "{\"city\": \"Paris\"}"), "C0:get_weather:{\"city\":\"Paris\"}"},
    {"reasoning, then a call", ANA("Need the weather.") CALL("get_weather", "{\"city\": \"Paris\"}"),
     "C0:get_weather:{\"city\":\"Paris\"}"},
    {"text before", FIN("Let me check.") CALL("f", "{}"), "T[Let me check.]C0:f:{}"},
    {"text after", CALL("f", "{}") FIN("Done."), "C0:f:{}T[Done.]"},
    {"two functions", CALL("a", "{\"x\": 1}") CALL("b", "{}"), "C0:a:{\"x\":1}C1:b:{}"},
    {"one function twice, reasoning between",
     CALL("f", "{\"n\": 1}") ANA("again") CALL("f", "{\"n\": 2}"), "C0:f:{\"n\":1}C1:f:{\"n\":2}"},
    {"one function twice, nothing between: one body",
     CALL("f", "{\"n\": 1}") CALL("f", "{\"n\": 2}"), "T[{\"n\": 1}{\"n\": 2}]"},
    {"arguments not JSON", CALL("f", "city=Paris"), "T[city=Paris]"},
    {"arguments an array", CALL("f", "[1, 2]"), "T[[1, 2]]"},
    {"arguments a string", CALL("f", "\"Paris\""), "T[\"Paris\"]"},
    {"arguments null", CALL("f", "null"), "T[null]"},
    {"blank arguments", CALL("f", " \n"), "C0:f:{}"},
    {"empty object", CALL("f", "{}"), "C0:f:{}"},
    {"blanks around", CALL("f", "\n  {\"a\": true}  \r\n"), "C0:f:{\"a\":true}"},
    {"unicode", CALL("f", "{\"city\": \"Zürich 東京 🌍\"}"), "C0:f:{\"city\":\"Zürich 東京 🌍\"}"},
    {"escapes", CALL("f", "{\"q\": \"a\\\"b\\\\c\\nd\\t\"}"), "C0:f:{\"q\":\"a\\\"b\\\\c\\nd\\t\"}"},
    {"unicode escapes", CALL("f", "{\"s\": \"\\u00e9\\ud83c\\udf0d\"}"), "C0:f:{\"s\":\"é🌍\"}"},
    {"nested", CALL("f", "{\"o\": {\"x\": [1, {\"y\": null}]}}"),
     "C0:f:{\"o\":{\"x\":[1,{\"y\":null}]}}"},
    {"duplicate keys", CALL("f", "{\"a\": 1, \"a\": 2}"), "T[{\"a\": 1, \"a\": 2}]"},
    {"garbage after", CALL("f", "{\"a\": 1} x"), "T[{\"a\": 1} x]"},
    {"cut short", CALL("f", "{\"city\": \"Par"), "T[{\"city\": \"Par]"},
    {"no function name", "\x01" "cfunctions.\x02{}", "T[{}]"},
    {"a dotted name", CALL("ns.tool", "{}"), "C0:ns.tool:{}"},
    {"another recipient", "\x01" "apython\x02print(1)", ""},
    {"a built-in tool", "\x01" "cbrowser.search\x02{\"query\": \"x\"}", ""},
    {"a preamble", COM("I will look it up.") CALL("f", "{}"), "C0:f:{}"},
    {"reasoning only", ANA("Thinking..."), ""},
    {"a call on the analysis channel", "\x01" "afunctions.f\x02{\"a\": 1}", "C0:f:{\"a\":1}"},
    {"one recipient, two channels",
     CALL("f", "{\"a\": 1}") "\x01" "afunctions.f\x02{\"a\": 2}", "C0:f:{\"a\":1}C1:f:{\"a\":2}"},
    {"text, call, text, call", FIN("one") CALL("a", "{}") FIN("two") CALL("b", "{}"),
     "T[one]C0:a:{}T[two]C1:b:{}"},
    {"numbers and booleans", CALL("f", "{\"n\": -3, \"d\": 2.5, \"b\": false, \"s\": \"1\"}"),
     "C0:f:{\"n\":-3,\"d\":2.5,\"b\":false,\"s\":\"1\"}"},
    {"final text to a recipient", "\x01" "fassistant\x02Hi", "T[Hi]"},
    {"JSON as final text", FIN("{\"name\": \"f\"}"), "T[{\"name\": \"f\"}]"},
    {"newlines in a value", CALL("f", "{\"t\": \"a\\nb\"}"), "C0:f:{\"t\":\"a\\nb\"}"},
    {"final text in pieces", FIN("Hel") FIN("lo") ANA("x") FIN(" there"), "T[Hello there]"},
    {"a broken call then a good one", CALL("a", "{oops") ANA("retry") CALL("a", "{\"k\": 1}"),
     "T[{oops]C0:a:{\"k\":1}"},
    {"three calls", CALL("a", "{}") CALL("b", "{}") CALL("c", "{}"), "C0:a:{}C1:b:{}C2:c:{}"},
    {"a name with unicode", CALL("caf\xc3\xa9", "{}"), "C0:caf\xc3\xa9:{}"},
    {"a long body",
     CALL("note", "{\"text\": \"word word word word word word word word word word word word word "
                  "word word word word word word word word word word word word word word word\"}"),
     "C0:note:{\"text\":\"word word word word word word word word word word word word word word "
     "word word word word word word word word word word word word word word\"}"},
    {"the body of another recipient between", CALL("a", "{}") "\x01" "cbrowser.open\x02{}" CALL("a", "{}"),
     "C0:a:{}C1:a:{}"},
};
#undef FIN
#undef ANA
#undef COM
#undef CALL

/* Gemma 4: <|tool_call>call:NAME{...}<tool_call|>, arguments in Gemma's notation (strings
 * between <|"|>), as google-gemma-4-31B-it.jinja writes them and the model replies. */
#define Q "<|\"|>"
#define G4(body) "<|tool_call>call:" body "<tool_call|>"
static const tc_case k_gemma4_cases[] = {
    {"plain text", "Hello world", "T[Hello world]"},
    {"empty reply", "", ""},
    {"one call", G4("get_weather{city:" Q "Paris" Q "}"), "C0:get_weather:{\"city\":\"Paris\"}"},
    {"two arguments", G4("get_weather{city:" Q "Paris" Q ",days:2}"),
     "C0:get_weather:{\"city\":\"Paris\",\"days\":2}"},
    {"text before", "Let me check.\n" G4("f{a:1}"), "T[Let me check.]C0:f:{\"a\":1}"},
    {"text after", G4("f{a:1}") "\nDone.", "C0:f:{\"a\":1}T[Done.]"},
    {"two calls", G4("a{}") G4("b{x:" Q "y" Q "}"), "C0:a:{}C1:b:{\"x\":\"y\"}"},
    {"three calls, newlines between", G4("a{}") "\n" G4("b{}") "\n\n" G4("c{}"),
     "C0:a:{}C1:b:{}C2:c:{}"},
    {"no arguments", G4("now{}"), "C0:now:{}"},
    {"numbers", G4("f{n:-3,d:2.5,z:0,e:1e3}"), "C0:f:{\"n\":-3,\"d\":2.5,\"z\":0,\"e\":1000.0}"},
    {"booleans and nulls", G4("f{b:true,c:false,z:null,y:None}"),
     "C0:f:{\"b\":true,\"c\":false,\"z\":null,\"y\":null}"},
    {"nested", G4("f{o:{x:[1," Q "a" Q ",{y:null}]}}"),
     "C0:f:{\"o\":{\"x\":[1,\"a\",{\"y\":null}]}}"},
    {"an array of strings", G4("f{tags:[" Q "a" Q "," Q "b c" Q "]}"),
     "C0:f:{\"tags\":[\"a\",\"b c\"]}"},
    {"empty containers", G4("f{a:[],o:{}}"), "C0:f:{\"a\":[],\"o\":{}}"},
    {"whitespace between parts", G4("f{ city : " Q "Paris" Q " ,\n days : 2 }"),
     "C0:f:{\"city\":\"Paris\",\"days\":2}"},
    {"blanks around the call", "<|tool_call>\n call:f{a:1} \n<tool_call|>", "C0:f:{\"a\":1}"},
    {"a colon in the name", G4("call:f{a:1}"), "T[" G4("call:f{a:1}") "]"},
    {"newlines in a string", G4("f{t:" Q "a\nb" Q "}"), "C0:f:{\"t\":\"a\\nb\"}"},
    {"quotes and backslashes in a string", G4("f{q:" Q "say \"hi\" \\ ok" Q "}"),
     "C0:f:{\"q\":\"say \\\"hi\\\" \\\\ ok\"}"},
    {"unicode", G4("f{city:" Q "Zürich 東京 🌍" Q "}"), "C0:f:{\"city\":\"Zürich 東京 🌍\"}"},
    {"markup inside a string", G4("f{s:" Q "{a:1}, b: [c]" Q "}"),
     "C0:f:{\"s\":\"{a:1}, b: [c]\"}"},
    {"quoted keys", G4("f{" Q "city" Q ":" Q "Paris" Q "}"), "C0:f:{\"city\":\"Paris\"}"},
    {"keys with punctuation", G4("f{max_results:5,x-y:1,a.b:2}"),
     "C0:f:{\"max_results\":5,\"x-y\":1,\"a.b\":2}"},
    {"a dotted name", G4("ns.tool{}"), "C0:ns.tool:{}"},
    {"unclosed, complete", "ok " "<|tool_call>call:f{a:1}", "T[ok]C0:f:{\"a\":1}"},
    {"unclosed, cut short", "<|tool_call>call:f{a:" Q "Par",
     "T[<|tool_call>call:f{a:" Q "Par]"},
    {"duplicated closing tag", G4("f{}") "<tool_call|>", "C0:f:{}"},
    {"stray closing tag in text", "a <tool_call|> b", "T[a <tool_call|> b]"},
    {"no call: prefix", "<|tool_call>f{a:1}<tool_call|>", "T[<|tool_call>f{a:1}<tool_call|>]"},
    {"no name", G4("{a:1}"), "T[" G4("{a:1}") "]"},
    {"a name with a space", G4("get weather{}"), "T[" G4("get weather{}") "]"},
    {"a bare word as a value", G4("f{city:Paris}"), "T[" G4("f{city:Paris}") "]"},
    {"a key twice", G4("f{a:1,a:2}"), "T[" G4("f{a:1,a:2}") "]"},
    {"something after the brace", G4("f{a:1} x"), "T[" G4("f{a:1} x") "]"},
    {"an unterminated string", G4("f{a:" Q "x}"), "T[" G4("f{a:" Q "x}") "]"},
    {"a missing comma", G4("f{a:1 b:2}"), "T[" G4("f{a:1 b:2}") "]"},
    {"a trailing comma", G4("f{a:1,}"), "T[" G4("f{a:1,}") "]"},
    {"a missing brace", G4("f{a:{b:1}"), "T[" G4("f{a:{b:1}") "]"},
    {"JSON keys", G4("f{\"a\": 1}"), "T[" G4("f{\"a\": 1}") "]"},
    {"a call cut by the next", "<|tool_call>call:a{}\n" G4("b{}"), "C0:a:{}C1:b:{}"},
    {"a broken call cut by the next", "<|tool_call>call:a{x:\n" G4("b{}"),
     "T[<|tool_call>call:a{x:\n]C0:b:{}"},
    {"text between calls", G4("a{}") " and then " G4("b{}"), "C0:a:{}T[and then]C1:b:{}"},
    {"a tag's start at the end", "see <|tool_ca", "T[see <|tool_ca]"},
    {"almost a tag", "x <|tool_callx y", "T[x <|tool_callx y]"},
    {"Hermes tags are text here", "<tool_call>{\"name\": \"f\"}</tool_call>",
     "T[<tool_call>{\"name\": \"f\"}</tool_call>]"},
    {"CRLF", "\r\n" G4("f{a:1}") "\r\n", "C0:f:{\"a\":1}"},
    {"invalid UTF-8 in a string", G4("f{a:" Q "\xff" Q "}"), "T[" G4("f{a:" Q "\xff" Q "}") "]"},
    {"an empty string", G4("f{a:" Q Q "}"), "C0:f:{\"a\":\"\"}"},
};
#undef G4
#undef Q

/* GLM: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>, as
 * GLM-4.6.jinja (newlines between the parts) and GLM-4.7-Flash.jinja (none) write them;
 * get_weather's city is a string and its days an integer (k_tools). */
#define KV(k, v) "<arg_key>" k "</arg_key><arg_value>" v "</arg_value>"
static const tc_case k_glm_cases[] = {
    {"plain text", "Hello world", "T[Hello world]"},
    {"empty reply", "", ""},
    {"GLM-4.5 form",
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
     "C0:get_weather:{\"city\":\"Paris\",\"days\":3}"},
    {"GLM-4.7 form", "<tool_call>get_weather" KV("city", "Paris") KV("days", "3") "</tool_call>",
     "C0:get_weather:{\"city\":\"Paris\",\"days\":3}"},
    {"a string by the schema", "<tool_call>get_weather" KV("city", "123") "</tool_call>",
     "C0:get_weather:{\"city\":\"123\"}"},
    {"JSON-looking, a string by the schema",
     "<tool_call>get_weather" KV("city", "[1]") "</tool_call>",
     "C0:get_weather:{\"city\":\"[1]\"}"},
    {"no schema: JSON values",
     "<tool_call>other" KV("n", "42") KV("b", "true") KV("s", "hello") KV("o", "{\"a\": [1]}")
     "</tool_call>",
     "C0:other:{\"n\":42,\"b\":true,\"s\":\"hello\",\"o\":{\"a\":[1]}}"},
    {"no arguments", "<tool_call>get_time</tool_call>", "C0:get_time:{}"},
    {"no arguments, newline", "<tool_call>get_time\n</tool_call>", "C0:get_time:{}"},
    {"reasoning and text before",
     "<think>hmm</think>\nLet me check.\n<tool_call>f" KV("a", "1") "</tool_call>",
     "T[<think>hmm</think>\nLet me check.]C0:f:{\"a\":1}"},
    {"text after", "<tool_call>f</tool_call>\nDone.", "C0:f:{}T[Done.]"},
    {"two calls, GLM-4.5",
     "\n<tool_call>a\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n</tool_call>\n"
     "<tool_call>b\n</tool_call>",
     "C0:a:{\"x\":1}C1:b:{}"},
    {"two calls, GLM-4.7", "<tool_call>a" KV("x", "1") "</tool_call><tool_call>b</tool_call>",
     "C0:a:{\"x\":1}C1:b:{}"},
    {"newlines inside a value", "<tool_call>note" KV("text", "line1\nline2") "</tool_call>",
     "C0:note:{\"text\":\"line1\\nline2\"}"},
    {"newlines around a value kept", "<tool_call>note" KV("text", "\nhi\n") "</tool_call>",
     "C0:note:{\"text\":\"\\nhi\\n\"}"},
    {"spaces around a number", "<tool_call>get_weather" KV("days", " 3 ") "</tool_call>",
     "C0:get_weather:{\"days\":3}"},
    {"an empty value", "<tool_call>f" KV("a", "") "</tool_call>", "C0:f:{\"a\":\"\"}"},
    {"unicode", "<tool_call>f" KV("city", "Zürich 東京 🌍") "</tool_call>",
     "C0:f:{\"city\":\"Zürich 東京 🌍\"}"},
    {"quotes and backslashes", "<tool_call>note" KV("text", "say \"hi\" \\ ok") "</tool_call>",
     "C0:note:{\"text\":\"say \\\"hi\\\" \\\\ ok\"}"},
    {"markup inside a value", "<tool_call>note" KV("text", "a <b> <arg_key> c") "</tool_call>",
     "C0:note:{\"text\":\"a <b> <arg_key> c\"}"},
    {"a key with spaces around", "<tool_call>f<arg_key> a </arg_key><arg_value>1</arg_value>"
                                 "</tool_call>",
     "C0:f:{\"a\":1}"},
    {"CRLF between parts",
     "<tool_call>f\r\n<arg_key>a</arg_key>\r\n<arg_value>1</arg_value>\r\n</tool_call>",
     "C0:f:{\"a\":1}"},
    {"a dotted name", "<tool_call>ns.tool</tool_call>", "C0:ns.tool:{}"},
    {"a key twice", "<tool_call>f" KV("a", "1") KV("a", "2") "</tool_call>",
     "T[<tool_call>f" KV("a", "1") KV("a", "2") "</tool_call>]"},
    {"no </arg_key>", "<tool_call>f<arg_key>a<arg_value>1</arg_value></tool_call>",
     "T[<tool_call>f<arg_key>a<arg_value>1</arg_value></tool_call>]"},
    {"no <arg_value>", "<tool_call>f<arg_key>a</arg_key>1</tool_call>",
     "T[<tool_call>f<arg_key>a</arg_key>1</tool_call>]"},
    {"no </arg_value>", "<tool_call>f<arg_key>a</arg_key><arg_value>1</tool_call>",
     "T[<tool_call>f<arg_key>a</arg_key><arg_value>1</tool_call>]"},
    {"words between arguments", "<tool_call>f" KV("a", "1") " and " KV("b", "2") "</tool_call>",
     "T[<tool_call>f" KV("a", "1") " and " KV("b", "2") "</tool_call>]"},
    {"a name with a space", "<tool_call>some words</tool_call>",
     "T[<tool_call>some words</tool_call>]"},
    {"a key with a space", "<tool_call>f" KV("a b", "1") "</tool_call>",
     "T[<tool_call>f" KV("a b", "1") "</tool_call>]"},
    {"an empty block", "<tool_call></tool_call>", "T[<tool_call></tool_call>]"},
    {"invalid UTF-8 in a value", "<tool_call>f" KV("a", "\xff") "</tool_call>",
     "T[<tool_call>f" KV("a", "\xff") "</tool_call>]"},
    {"unclosed, complete", "ok\n<tool_call>f" KV("a", "1"), "T[ok]C0:f:{\"a\":1}"},
    {"unclosed, cut short", "<tool_call>f<arg_key>a</arg_key><arg_value>Par",
     "T[<tool_call>f<arg_key>a</arg_key><arg_value>Par]"},
    {"duplicated closing tag", "<tool_call>f</tool_call></tool_call>", "C0:f:{}"},
    {"stray closing tag in text", "a </tool_call> b", "T[a </tool_call> b]"},
    {"Hermes JSON still a call",
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", "C0:f:{\"a\":1}"},
    {"Qwen XML still a call",
     "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
     "C0:f:{\"a\":1}"},
    {"a call cut by the next", "<tool_call>a\n<tool_call>b</tool_call>", "C0:a:{}C1:b:{}"},
    {"text between calls", "<tool_call>a</tool_call> and then <tool_call>b</tool_call>",
     "C0:a:{}T[and then]C1:b:{}"},
    {"a tag's start at the end", "see <tool_ca", "T[see <tool_ca]"},
    {"Gemma tags are text here", "<|tool_call>call:f{}<tool_call|>",
     "T[<|tool_call>call:f{}<tool_call|>]"},
};
#undef KV

/* The tools of the XML cases' requests: parameter types for get_weather and note. */
static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"note\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"text\": {\"type\": \"string\"}}}}}]";

/* Appends events to out in the table's notation, text merged across calls. */
static void render(srv_buf *out, bool *in_text, const srv_tc_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        if (ev[i].kind == SRV_TC_TEXT) {
            if (!*in_text) srv_buf_str(out, "T[");
            srv_buf_add(out, ev[i].text, ev[i].len);
            *in_text = true;
            continue;
        }
        if (*in_text) srv_buf_str(out, "]");
        *in_text = false;
        srv_buf_printf(out, "C%d:%s:%s", ev[i].index, ev[i].name, ev[i].arguments);
    }
}

/* The mode of the table being run. */
static enum { MODE_TAGS, MODE_BARE, MODE_MISTRAL, MODE_HARMONY, MODE_GEMMA4, MODE_GLM } g_mode;

enum { MAX_PIECES = 16 };

/* A Harmony case's pieces, decoded from its notation: text into s's bytes. */
typedef struct hpieces {
    al_chat_piece p[MAX_PIECES];
    size_t at[MAX_PIECES + 1]; /* where each piece's text starts in the whole reply's */
    int n;
} hpieces;

static void decode(const char *s, hpieces *h) {
    h->n = 0;
    h->at[0] = 0;
    while (*s == '\x01' && h->n < MAX_PIECES) {
        al_chat_piece *p = &h->p[h->n];
        p->channel = s[1] == 'f' ? AL_CHANNEL_FINAL : s[1] == 'a' ? AL_CHANNEL_ANALYSIS
                                                                 : AL_CHANNEL_COMMENTARY;
        const char *r = s + 2, *t = strchr(r, '\x02');
        p->recipient = t > r ? r : NULL;
        p->recipient_len = (size_t)(t - r);
        p->text = t + 1;
        p->len = strcspn(t + 1, "\x01");
        h->at[h->n + 1] = h->at[h->n] + p->len;
        h->n++;
        s = p->text + p->len;
    }
}

/* The length of the reply's text: for Harmony, of its pieces' texts. */
static size_t reply_len(const char *reply) {
    if (g_mode != MODE_HARMONY) return strlen(reply);
    hpieces h;
    decode(reply, &h);
    return h.at[h.n];
}

/* Harmony: the pieces' texts from offset a to b of the whole, cut where pieces end, fed
 * as one list, as one call of al_harmony may return them. */
static bool feed_pieces(srv_tc *p, const hpieces *h, size_t a, size_t b, const srv_tc_event **ev,
                        int *n_ev) {
    al_chat_piece part[MAX_PIECES];
    int k = 0;
    for (int i = 0; i < h->n; i++) {
        size_t lo = a > h->at[i] ? a : h->at[i], hi = b < h->at[i + 1] ? b : h->at[i + 1];
        if (lo >= hi) continue;
        part[k] = h->p[i];
        part[k].text += lo - h->at[i];
        part[k++].len = hi - lo;
    }
    return srv_tc_pieces(p, part, k, ev, n_ev);
}

/* The reply fed in pieces cut at the offsets cuts[0..n_cuts) (ascending). */
static char *parse(const json_t *tools, const char *reply, const size_t *cuts, int n_cuts) {
    srv_tc *p = srv_tc_create(tools);
    if (g_mode == MODE_BARE) srv_tc_bare(p);
    if (g_mode == MODE_MISTRAL) srv_tc_mistral(p);
    if (g_mode == MODE_HARMONY) srv_tc_harmony(p);
    if (g_mode == MODE_GEMMA4) srv_tc_gemma4(p);
    if (g_mode == MODE_GLM) srv_tc_glm(p);
    hpieces h;
    if (g_mode == MODE_HARMONY) decode(reply, &h);
    srv_buf out = {0};
    bool in_text = false, ok = p != NULL;
    const srv_tc_event *ev;
    int n;
    size_t at = 0, len = reply_len(reply);
    for (int i = 0; ok && i <= n_cuts; i++) {
        const size_t to = i < n_cuts ? cuts[i] : len;
        ok = g_mode == MODE_HARMONY ? feed_pieces(p, &h, at, to, &ev, &n)
                                    : srv_tc_push(p, reply + at, to - at, &ev, &n);
        if (ok) render(&out, &in_text, ev, n);
        at = to;
    }
    if (ok && (ok = srv_tc_finish(p, &ev, &n))) render(&out, &in_text, ev, n);
    if (in_text) srv_buf_str(&out, "]");
    srv_buf_str(&out, "");
    srv_tc_destroy(p);
    if (!ok) free(out.s);
    return ok ? out.s : NULL;
}

/* Whole, cut in two at every byte, byte by byte: each must give the case's events. */
static int run_case(const json_t *tools, const tc_case *c) {
    const size_t len = reply_len(c->reply);
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    int bad = 0;
    for (size_t i = 0; i <= len; i++)
        cuts[i] = i;
    for (size_t k = 0; k <= len + 1; k++) {
        /* k <= len: one cut at k (0 and len: whole); k = len + 1: every byte */
        char *got = k <= len ? parse(tools, c->reply, &cuts[k], 1)
                             : parse(tools, c->reply, cuts + 1, len ? (int)len - 1 : 0);
        const bool same = got && !strcmp(got, c->want);
        if (!same && !bad++)
            CHECK_MSG(false, "%s (%s): got %s, want %s", c->name,
                      k <= len ? "cut in two" : "byte by byte", got ? got : "(failed)", c->want);
        free(got);
    }
    free(cuts);
    return bad == 0;
}

static void run_table(const char *format, const tc_case *cases, int n, const json_t *tools) {
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += run_case(tools, &cases[i]);
    printf("     %s: %d of %d replies give their events, whole and cut at every byte\n", format, ok,
           n);
    CHECK(n >= 40);
}

static void test_hermes_json(void) {
    run_table("Hermes JSON", k_json_cases, (int)(sizeof k_json_cases / sizeof *k_json_cases), NULL);
}

static void test_qwen_xml(void) {
    json_t *tools = json_loads(k_tools, 0, NULL);
    CHECK(tools != NULL);
    run_table("Qwen XML", k_xml_cases, (int)(sizeof k_xml_cases / sizeof *k_xml_cases), tools);
    json_decref(tools);
}

static void test_llama3_bare(void) {
    g_mode = MODE_BARE;
    run_table("Llama 3 JSON", k_bare_cases, (int)(sizeof k_bare_cases / sizeof *k_bare_cases), NULL);
    g_mode = MODE_TAGS;
    /* more than 64 calls in one reply: text */
    srv_buf many = {0};
    for (int i = 0; i < 65; i++) srv_buf_str(&many, "{\"name\": \"f\"};");
    srv_tc *p = srv_tc_create(NULL);
    srv_tc_bare(p);
    const srv_tc_event *ev;
    int n = 0;
    CHECK(srv_tc_push(p, many.s, many.len, &ev, &n) && n == 0);
    CHECK(srv_tc_finish(p, &ev, &n) && n == 1 && ev[0].kind == SRV_TC_TEXT && ev[0].len == many.len);
    srv_tc_destroy(p);
    srv_buf_free(&many);
}

static void test_mistral(void) {
    g_mode = MODE_MISTRAL;
    run_table("Mistral", k_mistral_cases, (int)(sizeof k_mistral_cases / sizeof *k_mistral_cases),
              NULL);
    g_mode = MODE_TAGS;
    /* more than 64 calls in one block: text; a block past SRV_TC_BLOCK_MAX: text */
    for (int big = 0; big < 2; big++) {
        srv_buf r = {0};
        srv_buf_str(&r, "[TOOL_CALLS][");
        for (int i = 0; i < 65 && !big; i++) srv_buf_str(&r, i ? ", {\"name\": \"f\"}" : "{\"name\": \"f\"}");
        if (big) {
            srv_buf_str(&r, "{\"name\": \"f\", \"arguments\": {\"s\": \"");
            for (int i = 0; i < SRV_TC_BLOCK_MAX / 64 + 1; i++)
                srv_buf_str(&r, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
            srv_buf_str(&r, "\"}}");
        }
        srv_buf_str(&r, "]");
        srv_tc *p = srv_tc_create(NULL);
        srv_tc_mistral(p);
        const srv_tc_event *ev;
        int n = 0;
        size_t text = 0;
        CHECK(srv_tc_push(p, r.s, r.len, &ev, &n));
        for (int i = 0; i < n; i++) text += ev[i].kind == SRV_TC_TEXT ? ev[i].len : 0;
        CHECK(srv_tc_finish(p, &ev, &n));
        for (int i = 0; i < n; i++) text += ev[i].kind == SRV_TC_TEXT ? ev[i].len : 0;
        CHECK_MSG(srv_tc_calls(p) == 0 && text == r.len, "%s: %d calls, %zu of %zu bytes text",
                  big ? "big block" : "65 calls", srv_tc_calls(p), text, r.len);
        srv_tc_destroy(p);
        srv_buf_free(&r);
    }
}

static void test_harmony(void) {
    g_mode = MODE_HARMONY;
    run_table("Harmony", k_harmony_cases,
              (int)(sizeof k_harmony_cases / sizeof *k_harmony_cases), NULL);
    g_mode = MODE_TAGS;
    /* pieces outside Harmony mode, and after the end, give nothing */
    const al_chat_piece pc = {.channel = AL_CHANNEL_FINAL, .text = "x", .len = 1};
    const srv_tc_event *ev;
    int n = 7;
    srv_tc *p = srv_tc_create(NULL);
    CHECK(srv_tc_pieces(p, &pc, 1, &ev, &n) && n == 0);
    srv_tc_harmony(p);
    CHECK(srv_tc_pieces(p, &pc, 1, &ev, &n) && n == 1 && ev[0].kind == SRV_TC_TEXT);
    CHECK(srv_tc_finish(p, &ev, &n) && n == 0);
    CHECK(srv_tc_pieces(p, &pc, 1, &ev, &n) && n == 0);
    srv_tc_destroy(p);
}

static void test_gemma4(void) {
    g_mode = MODE_GEMMA4;
    run_table("Gemma 4", k_gemma4_cases, (int)(sizeof k_gemma4_cases / sizeof *k_gemma4_cases),
              NULL);
    g_mode = MODE_TAGS;
    /* nesting past 64 levels: text; at 64, a call */
    for (int depth = 63; depth <= 64; depth++) {
        srv_buf r = {0};
        srv_buf_str(&r, "<|tool_call>call:f{a:");
        for (int i = 0; i < depth; i++) srv_buf_str(&r, "[");
        for (int i = 0; i < depth; i++) srv_buf_str(&r, "]");
        srv_buf_str(&r, "}<tool_call|>");
        srv_tc *p = srv_tc_create_for(NULL, SRV_CALLS_GEMMA4);
        const srv_tc_event *ev;
        int n = 0;
        CHECK(p && srv_tc_push(p, r.s, r.len, &ev, &n) && srv_tc_finish(p, &ev, &n));
        CHECK_MSG(srv_tc_calls(p) == (depth < 64), "%d levels: %d calls", depth + 1,
                  srv_tc_calls(p));
        srv_tc_destroy(p);
        srv_buf_free(&r);
    }
}

static void test_glm(void) {
    json_t *tools = json_loads(k_tools, 0, NULL);
    CHECK(tools != NULL);
    g_mode = MODE_GLM;
    run_table("GLM", k_glm_cases, (int)(sizeof k_glm_cases / sizeof *k_glm_cases), tools);
    g_mode = MODE_TAGS;
    /* the same blocks are text in the chatml family's mode */
    const srv_tc_event *ev;
    int n = 0;
    srv_tc *p = srv_tc_create_for(tools, SRV_CALLS_TAGGED);
    CHECK(srv_tc_push(p, "<tool_call>f</tool_call>", 24, &ev, &n) && srv_tc_finish(p, &ev, &n));
    CHECK(srv_tc_calls(p) == 0);
    srv_tc_destroy(p);
    json_decref(tools);
}

/* The calls as the templates write them, and as the library renders them
 * (test_chat_tools checks these same texts): the parser reads back the arguments they
 * were made from, fed byte by byte. Gemma 4's keys sorted, null as None; GLM's values
 * as they are for strings, as JSON for the rest. */
#define RT_ARGS                                                                                    \
    "{\"city\": \"Paris\", \"n\": 3, \"ok\": true, \"z\": null, \"list\": [1, \"a b\", {\"k\": "   \
    "\"v\"}], \"o\": {\"deep\": {\"x\": 2.5}}, \"s\": \"quote \\\" and \\\\ and {braces}, "         \
    "[brackets]: colon\\nnext line\", \"u\": \"Z\\u00fcrich\"}"
#define Q "<|\"|>"
static const char k_rt_gemma4[] =
    "<|tool_call>call:get_weather{city:" Q "Paris" Q ",list:[1," Q "a b" Q ",{k:" Q "v" Q "}],n:3,"
    "o:{deep:{x:2.5}},ok:true,s:" Q "quote \" and \\ and {braces}, [brackets]: colon\nnext line" Q
    ",u:" Q "Z\xc3\xbcrich" Q ",z:None}<tool_call|><|tool_call>call:now{}<tool_call|>";
#undef Q
static const char k_rt_glm45[] =
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n<arg_key>ok</arg_key>\n<arg_value>true"
    "</arg_value>\n<arg_key>z</arg_key>\n<arg_value>null</arg_value>\n<arg_key>list</arg_key>\n"
    "<arg_value>[1, \"a b\", {\"k\": \"v\"}]</arg_value>\n<arg_key>o</arg_key>\n<arg_value>"
    "{\"deep\": {\"x\": 2.5}}</arg_value>\n<arg_key>s</arg_key>\n<arg_value>quote \" and \\ and "
    "{braces}, [brackets]: colon\nnext line</arg_value>\n<arg_key>u</arg_key>\n<arg_value>"
    "Z\xc3\xbcrich</arg_value>\n</tool_call>\n<tool_call>now\n</tool_call>";
static const char k_rt_glm47[] =
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>n"
    "</arg_key><arg_value>3</arg_value><arg_key>ok</arg_key><arg_value>true</arg_value><arg_key>z"
    "</arg_key><arg_value>null</arg_value><arg_key>list</arg_key><arg_value>[1, \"a b\", {\"k\": "
    "\"v\"}]</arg_value><arg_key>o</arg_key><arg_value>{\"deep\": {\"x\": 2.5}}</arg_value>"
    "<arg_key>s</arg_key><arg_value>quote \" and \\ and {braces}, [brackets]: colon\nnext line"
    "</arg_value><arg_key>u</arg_key><arg_value>Z\xc3\xbcrich</arg_value></tool_call>"
    "<tool_call>now</tool_call>";

static void test_round_trip(void) {
    static const struct {
        const char *format, *text;
        srv_calls how;
    } f[] = {{"gemma4", k_rt_gemma4, SRV_CALLS_GEMMA4},
             {"glm45", k_rt_glm45, SRV_CALLS_GLM},
             {"glm47", k_rt_glm47, SRV_CALLS_GLM}};
    json_t *want = json_loads(RT_ARGS, 0, NULL);
    CHECK(want != NULL);
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        srv_tc *p = srv_tc_create_for(NULL, f[i].how);
        const srv_tc_event *ev;
        int n = 0, k = 0;
        bool ok = p != NULL;
        for (const char *c = f[i].text; ok && *c; c++) { /* byte by byte */
            ok = srv_tc_push(p, c, 1, &ev, &n);
            for (int e = 0; ok && e < n; e++, k++) {
                const bool call = ev[e].kind == SRV_TC_CALL;
                json_t *got = call ? json_loads(ev[e].arguments, 0, NULL) : NULL;
                const bool same = call && (k == 0 ? !strcmp(ev[e].name, "get_weather") &&
                                                        json_equal(got, want)
                                                  : !strcmp(ev[e].name, "now") &&
                                                        json_object_size(got) == 0);
                CHECK_MSG(same, "%s: event %d: %s %s", f[i].format, k,
                          call ? ev[e].name : "text", call ? ev[e].arguments : "");
                json_decref(got);
            }
        }
        CHECK(ok && srv_tc_finish(p, &ev, &n) && n == 0);
        CHECK_MSG(k == 2 && srv_tc_calls(p) == 2, "%s: %d calls", f[i].format, srv_tc_calls(p));
        srv_tc_destroy(p);
    }
    json_decref(want);
}
#undef RT_ARGS

/* A block past SRV_TC_BLOCK_MAX is text, and so is what follows it up to the next tag;
 * a push after finish is ignored. */
static void test_limits(void) {
    const size_t big = SRV_TC_BLOCK_MAX + 100;
    char *reply = malloc(big + 64);
    strcpy(reply, "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"");
    size_t n = strlen(reply);
    memset(reply + n, 'a', big), n += big;
    strcpy(reply + n, "\"}}</tool_call>");
    srv_tc *p = srv_tc_create(NULL);
    const srv_tc_event *ev;
    int n_ev, calls = 0;
    size_t text = 0;
    for (size_t at = 0, len = strlen(reply); at < len; at += 4096) {
        CHECK(srv_tc_push(p, reply + at, len - at < 4096 ? len - at : 4096, &ev, &n_ev));
        for (int i = 0; i < n_ev; i++)
            ev[i].kind == SRV_TC_TEXT ? (void)(text += ev[i].len) : (void)calls++;
    }
    CHECK(srv_tc_finish(p, &ev, &n_ev));
    for (int i = 0; i < n_ev; i++)
        ev[i].kind == SRV_TC_TEXT ? (void)(text += ev[i].len) : (void)calls++;
    CHECK_MSG(calls == 0 && text == strlen(reply), "%d calls, %zu of %zu bytes as text", calls,
              text, strlen(reply));
    CHECK(srv_tc_push(p, "<tool_call>{\"name\":\"g\"}</tool_call>", 35, &ev, &n_ev) && n_ev == 0);
    CHECK(srv_tc_calls(p) == 0);
    srv_tc_destroy(p);
    srv_tc_destroy(NULL);
    free(reply);
}

int main(void) {
    TEST_RUN(test_hermes_json);
    TEST_RUN(test_qwen_xml);
    TEST_RUN(test_llama3_bare);
    TEST_RUN(test_mistral);
    TEST_RUN(test_harmony);
    TEST_RUN(test_gemma4);
    TEST_RUN(test_glm);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_limits);
    return test_finish();
}
