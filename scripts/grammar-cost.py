"""Decode speed with and without a grammar, against a running `anyllm serve`.

Usage: python3 scripts/grammar-cost.py PORT [ROUNDS]

Alternates unconstrained and constrained chat requests (temperature 0 and 0.8, 128
tokens) and prints, per kind, the decode time per token measured from the first to the
last streamed chunk (the prompt's evaluation excluded). Only the standard library."""
import json
import sys
import time
import urllib.request

PORT = int(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
PROMPT = "Write a long list of people with their names, ages, cities and a short biography."
SCHEMA = {"type": "object", "properties": {"people": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                     "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                     "city": {"type": "string"}, "bio": {"type": "string"}},
    "required": ["name", "age", "city", "bio"]}}}, "required": ["people"]}
KINDS = {"none": None, "json_object": {"type": "json_object"},
         "json_schema": {"type": "json_schema", "json_schema": {"name": "people", "schema": SCHEMA}}}


def run(fmt, temperature, seed):
    body = {"model": "m", "stream": True, "max_tokens": 128, "temperature": temperature, "seed": seed,
            "messages": [{"role": "user", "content": PROMPT}], "stream_options": {"include_usage": True}}
    if fmt:
        body["response_format"] = fmt
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    first = last = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: {"):
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            if ev.get("choices") and ev["choices"][0]["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
    return tokens, (last - first) if first and last else 0.0


def main():
    totals = {k: [0, 0.0] for k in KINDS}
    for i in range(ROUNDS):
        for kind, fmt in KINDS.items():
            n, dt = run(fmt, 0 if i % 2 == 0 else 0.8, i)
            totals[kind][0] += max(n - 1, 0)
            totals[kind][1] += dt
    base = totals["none"][1] / max(totals["none"][0], 1)
    for kind, (n, dt) in totals.items():
        per = dt / max(n, 1)
        print(f"{kind:12s} {n:5d} tokens  {per * 1e3:6.2f} ms/token  {1 / per if per else 0:6.1f} t/s  "
              f"x{per / base:.3f} of unconstrained")


if __name__ == "__main__":
    main()
