"""Structured output: random JSON Schemas, each answered by the server with
response_format json_schema and validated with the jsonschema package; and the schemas
the server must refuse with a 400 that names what it does not support.

The generator draws nested objects, enums, consts, arrays with item bounds, integers and
numbers with (exclusive) bounds, strings with length bounds, patterns and formats, anyOf
and $ref. Strings and arrays are bounded so that every answer can finish within
max_tokens: a cut answer would be invalid JSON whatever the constraint.
"""
import datetime
import json
import random
import re

import jsonschema

# jsonschema's own "time" checker is draft 3's (no offset) and its "date-time" needs a
# package it does not install: RFC 3339 checked here
FORMATS_CHECKED = jsonschema.FormatChecker(["date", "uuid"])


@FORMATS_CHECKED.checks("time", raises=ValueError)
def _time(s):
    return not isinstance(s, str) or (
        re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", s) is not None
        and datetime.datetime.fromisoformat("1970-01-01T" + s.replace("Z", "+00:00")) is not None)


@FORMATS_CHECKED.checks("date-time", raises=ValueError)
def _date_time(s):
    return not isinstance(s, str) or (
        re.fullmatch(r"\d{4}-\d\d-\d\dT.*", s) is not None and _time(s[11:])
        and datetime.date.fromisoformat(s[:10]) is not None)

PATTERNS = ["^[A-Z]{2}-[0-9]{3}$", "^(yes|no|maybe)$", "^[a-z]{1,8}@[a-z]{1,8}\\.(com|org)$",
            "^#[0-9a-f]{6}$", "^\\d{1,3}(\\.\\d{1,2})?$", "^[^\"\\\\]{0,6}$", "^(?:ab|cd){1,3}x?$",
            "^\\w{1,5}\\s\\w{1,5}$", "^\\\\[a-z]{1,4}\"$"]
FORMATS = ["date", "time", "date-time", "uuid"]
WORDS = ["red", "green", "blue", "Ünïcødé", "a \"quoted\" word", "back\\slash", "tab\there", "", "ok"]


def number_schema(rng, integer):
    s = {"type": "integer" if integer else "number"}
    lo = rng.choice([None, rng.randint(-1000, 50), round(rng.uniform(-50, 50), 2)])
    hi = rng.choice([None, rng.randint(60, 5000), round(rng.uniform(51, 99), 3)])
    if lo is not None:
        s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
    if hi is not None:
        s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = hi
    return s


def string_schema(rng):
    r = rng.random()
    if r < 0.15:
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if r < 0.25:
        return {"type": "string", "format": rng.choice(FORMATS)}
    if r < 0.35:
        return {"type": "string", "enum": rng.sample(WORDS, rng.randint(1, 4))}
    lo = rng.randint(0, 3)
    return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 12)}


def gen_schema(rng, depth=0):
    kinds = ["string", "string", "integer", "number", "boolean", "null", "enum", "const"]
    if depth < 3:
        kinds += ["object", "object", "array", "array", "anyOf"]
    k = rng.choice(kinds)
    if k == "string":
        return string_schema(rng)
    if k in ("integer", "number"):
        return number_schema(rng, k == "integer")
    if k in ("boolean", "null"):
        return {"type": k}
    if k == "enum":
        return {"enum": rng.sample([1, 2.5, -3, "x", "y z", True, None, [1, "a"], {"k": "v"}],
                                   rng.randint(1, 4))}
    if k == "const":
        return {"const": rng.choice(["fixed", 42, False, {"a": [1, 2]}, "ü\n"])}
    if k == "array":
        lo = rng.randint(0, 2)
        s = {"type": "array", "items": gen_schema(rng, depth + 1), "minItems": lo,
             "maxItems": lo + rng.randint(0, 3)}
        if rng.random() < 0.2:
            s = {"type": "array", "prefixItems": [gen_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))],
                 "items": False}
        return s
    if k == "anyOf":
        return {"anyOf": [gen_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    return object_schema(rng, depth)


def object_schema(rng, depth):
    names = rng.sample(["id", "name", "value", "items", "kind", "when", "déjà vu", "a\"b", "x y"],
                       rng.randint(1, 4))
    props = {n: gen_schema(rng, depth + 1) for n in names}
    s = {"type": "object", "properties": props,
         "required": [n for n in names if rng.random() < 0.7]}
    if rng.random() < 0.5:
        s["additionalProperties"] = False
    if rng.random() < 0.2:
        s["description"] = "annotations are ignored"
    return s


def random_schema(rng):
    s = object_schema(rng, 0)
    if rng.random() < 0.15:  # the same through $defs and $ref
        name = next(iter(s["properties"]))
        s = {"$defs": {"part": s["properties"][name]}, "type": "object",
             "properties": {**s["properties"], name: {"$ref": "#/$defs/part"}},
             "required": s["required"]}
    return s


UNSUPPORTED = [
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    ("multipleOf", {"type": "integer", "multipleOf": 3}),
    ("patternProperties", {"type": "object", "patternProperties": {"^x": {"type": "string"}}}),
    ("not", {"not": {"type": "string"}}),
    ("if", {"if": {"type": "string"}, "then": {"minLength": 2}}),
    ("recursive $ref", {"$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}},
                        "$ref": "#/$defs/t"}),
    ("recursive $ref", {"type": "object", "properties": {"self": {"$ref": "#"}}}),
    ("allOf", {"allOf": [{"type": "string"}, {"maxLength": 3}]}),
    ("accepts nothing", {"type": "object", "properties": {"a": False}, "required": ["a"]}),
    ("$ref", {"$ref": "https://example.com/schema.json"}),
    ("format", {"type": "string", "format": "hostname"}),
    ("pattern", {"type": "string", "pattern": "^(a)\\1$"}),
    ("pattern", {"type": "string", "pattern": "(?=x)x"}),
    ("not in properties", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
    ("unknown type", {"type": "decimal"}),
    ("no integer", {"type": "integer", "minimum": 5, "maximum": 4.5}),
    ("nested deeper", None),  # made below
]


def deep_schema(n):
    s = {"type": "string"}
    for _ in range(n):
        s = {"type": "array", "items": s}
    return s


def run(post, check, n=200, seed=1234, workers=4):
    """post(body) -> (status, json); check(cond, what)."""
    import concurrent.futures as cf
    rng = random.Random(seed)
    cases = [random_schema(rng) for _ in range(n)]

    def one(i):
        schema = cases[i]
        body = {"model": "m", "max_tokens": 600, "temperature": 0 if i % 2 == 0 else 0.8, "seed": i,
                "messages": [{"role": "user", "content": "Fill in this JSON schema with an example."
                              " Schema: " + json.dumps(schema)}],
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": f"s{i}", "strict": True, "schema": schema}}}
        status, r = post(body)
        if status != 200:
            return f"schema {i}: HTTP {status}: {r}"
        choice = r["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] != "stop":
            return f"schema {i}: finish_reason {choice['finish_reason']} after {len(text)} bytes: {text[:200]!r}"
        try:
            jsonschema.validate(json.loads(text), schema, format_checker=FORMATS_CHECKED)
        except Exception as e:  # noqa: BLE001 - any failure is a finding
            return f"schema {i}: {type(e).__name__}: {str(e)[:300]}\n  schema {json.dumps(schema)}\n  text {text!r}"
        return None

    with cf.ThreadPoolExecutor(workers) as ex:
        bad = [m for m in ex.map(one, range(n)) if m]
    for m in bad[:5]:
        print("   ", m)
    check(not bad, f"{n} random schemas: {n - len(bad)} answers valid, {len(bad)} invalid")

    for what, schema in UNSUPPORTED:
        if schema is None:
            schema = deep_schema(80)
        body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
        status, r = post(body)
        msg = (r.get("error") or {}).get("message", "") if isinstance(r, dict) else ""
        check(status == 400 and what.split()[0] in msg,
              f"unsupported schema ({what}) is a 400 naming it: {status} {msg[:120]!r}")
