"""The `anyllm serve` suite, run by tests/server.sh against a server it started.

Checks, in order: the routes; what routers read (running and waiting requests, KV-cache
use, prefix-cache hits, under anyllm's and vLLM's names; X-Prefix-Hash); the official openai client (chat and completions, plain and
streamed, stop strings, seeds, token-id prompts); structured output (json_object, 200 random
JSON Schemas validated with jsonschema, unsupported schemas refused, grammars); tool calls (the
openai client with tool_choice required and named, streamed deltas, calls and results in a
conversation, the parser on replies forced by a grammar, bad tools); /v1/responses with the openai
client (text, streams, function calls, parse, previous_response_id); /v1/messages with the anthropic
client (messages, streams, tools, tool results, structured output, errors); a bad-input suite where every case must
get its status and an OpenAI error object, with /health answering after each; the API key
and the full queue on a second instance; the Harmony chat format on another (replies
through the reply parser); what a web page could send (foreign Host, no Host, text/plain
POSTs) and libmicrohttpd's own refusals in /metrics; clients that write
a whole oversized body before reading, or half-close; on instances of their own, slow
heads (slowloris), start-up (an oversized --ctx-size, SIGTERM while loading, the loading
state: 503 on /health and completions), SIGTERM with requests in flight and --drain-timeout 0
(every client gets a complete end), and the graceful drain (503 with Retry-After for new
requests, every accepted stream ends with [DONE], exit 0; the drain timeout and a second
signal end what is left); a load test (32 streaming clients x 4 requests
against --parallel 4, next to one client alone); 100 clients that hang up mid-stream
(active sequences back to 0, RSS back within 5%); and the chat page in headless Chromium,
driven over the DevTools protocol (a pipe, so only the standard library is needed).

Prints one line per check and ends with "N passed, M failed".
"""
import argparse
import base64
import concurrent.futures as cf
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import openai
import requests

ARGS = None
BASE = ""
RESULTS = {"pass": 0, "fail": 0}
# Answered "Paris" in both CPU activation modes; "What is the capital of France?" is a
# near-tie for SmolLM2-135M (the default q8 path, like llama.cpp, answers "L'Etoile").
QUESTION = "Name the capital of France."


def check(cond, what):
    RESULTS["pass" if cond else "fail"] += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    return cond


def metrics():
    """The /metrics exposition as {name{labels}: value}."""
    text = requests.get(BASE + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def healthy(base=None):
    try:
        return requests.get((base or BASE) + "/health", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def is_error_object(body):
    e = body.get("error") if isinstance(body, dict) else None
    return (isinstance(e, dict) and isinstance(e.get("message"), str) and e["message"]
            and isinstance(e.get("type"), str) and "param" in e and "code" in e)


def post(path, body=None, raw=None, headers=None, base=None, timeout=120):
    data = raw if raw is not None else json.dumps(body).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return requests.post((base or BASE) + path, data=data, headers=h, timeout=timeout)


def chat_body(content=QUESTION, **kw):
    body = {"model": "any", "messages": [{"role": "user", "content": content}]}
    body.update(kw)
    return body


# ---- SSE over a plain socket, to measure and to hang up at will --------------------------

def sse_request(path, body, read_events=None, timeout=300, base=None, on_text=None):
    """POSTs body and reads the event stream. Returns a dict: status, events (parsed JSON
    objects), done ([DONE] seen), ttft (seconds to the first text), t_total, error. With
    read_events=N the socket is closed after N text events (a client hanging up).
    on_text() is called at the first text."""
    port = int((base or BASE).rsplit(":", 1)[1])
    payload = json.dumps(body).encode()
    t0 = time.time()
    res = {"status": 0, "events": [], "done": False, "ttft": None, "t_total": None, "error": None}
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(payload))
                  + payload)
        f = s.makefile("rb")
        status_line = f.readline().decode()
        res["status"] = int(status_line.split()[1])
        chunked = False
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                chunked = True
        if res["status"] != 200:
            return res
        n_text = 0
        for event in read_sse(f, chunked):
            if event == "[DONE]":
                res["done"] = True
                break
            obj = json.loads(event)  # a malformed chunk raises: counted by the caller
            res["events"].append(obj)
            if "error" in obj:
                continue
            ch = obj.get("choices") or []
            text = ch and (ch[0].get("delta", {}).get("content") or ch[0].get("text"))
            if text:
                n_text += 1
                if res["ttft"] is None:
                    res["ttft"] = time.time() - t0
                    if on_text:
                        on_text()
                if read_events and n_text >= read_events:
                    break
        res["t_total"] = time.time() - t0
    except Exception as e:  # noqa: BLE001 - the caller reports whatever went wrong
        res["error"] = repr(e)
    finally:
        if read_events:  # hang up hard: RST instead of an orderly close
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except OSError:
                pass
        s.close()
    return res


def read_sse(f, chunked):
    """Yields the data of each event from an HTTP body (chunked or not)."""
    def body_lines():
        if not chunked:
            yield from f
            return
        pending = b""
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                if pending:
                    yield pending
                return
            pending += f.read(size)
            f.readline()
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line + b"\n"
    data = []
    for raw in body_lines():
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data: "):
            data.append(line[6:])
        elif line == "" and data:
            yield "\n".join(data)
            data = []


# ---- 1. routes -------------------------------------------------------------------------------

def test_routes():
    r = requests.get(BASE + "/health", timeout=10)
    check(r.status_code == 200 and r.json().get("status") == "ok", f"GET /health: {r.text}")
    r = requests.get(BASE + "/v1/models", timeout=10)
    ids = [m["id"] for m in r.json().get("data", [])]
    check(r.status_code == 200 and ids == [os.path.basename(ARGS.model)], f"GET /v1/models lists {ids}")
    r = requests.get(BASE + "/", timeout=10)
    external = re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|url\(""", r.text)
    check(r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
          and "<script>" in r.text and not external,
          f"GET / serves the chat page ({len(r.content)} bytes, text/html, no external resources)")
    r = requests.get(BASE + "/metrics", timeout=10)
    names = ["anyllm_requests_total", "anyllm_prompt_tokens_total", "anyllm_generated_tokens_total",
             "anyllm_prompt_tokens_per_second", "anyllm_generation_tokens_per_second",
             "anyllm_time_to_first_token_seconds_bucket", "anyllm_active_sequences",
             "anyllm_queue_depth", "anyllm_kv_cache_used_positions", "anyllm_kv_cache_positions",
             "anyllm_kv_cache_usage_ratio", "anyllm_prefix_cache_hit_tokens_total", "anyllm_ready",
             'anyllm_state{state="ready"} 1', "anyllm_info{replica=",
             "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
             "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
             "vllm:cache_config_info{block_size="]
    missing = [n for n in names if n not in r.text]
    check(r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain") and not missing,
          f"GET /metrics is Prometheus text with every metric (missing: {missing})")
    bad = [line for line in r.text.splitlines() if line and not line.startswith("#")
           and not re.fullmatch(r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? \S+', line)]
    check(not bad, f"every /metrics sample is a valid Prometheus text line {bad[:2]}")
    h = requests.get(BASE + "/health", timeout=10)
    j = h.json()
    check(j.get("state") == "ready" and j.get("kv_cache_total") == 4 * 1024 and j.get("replica")
          and h.headers.get("X-Replica") == j["replica"],
          f"/health names the state, the KV cache and the replica (X-Replica too): {h.text}")


def test_router_metrics():
    """What a router reads: running and waiting requests and KV-cache use while a stream
    runs, prefix-cache hits growing when a prompt repeats, the prefix-hash header."""
    with requests.post(BASE + CHAT, json=chat_body("Tell me a long story.", stream=True, max_tokens=64),
                       stream=True, timeout=60) as r:
        lines = r.iter_lines()
        for line in lines:
            if b"content" in line and b'"content":""' not in line:
                break
        m = metrics()
        check(m["anyllm_active_sequences"] == 1 and m["vllm:num_requests_running"] == 1
              and 0 < m["anyllm_kv_cache_used_positions"] < 1024
              and abs(m["vllm:kv_cache_usage_perc"] - m["anyllm_kv_cache_used_positions"] / 4096) < 1e-9,
              f"while a stream runs: 1 running, KV cache {m['anyllm_kv_cache_used_positions']:.0f} of "
              f"{m['anyllm_kv_cache_positions']:.0f} positions (usage {m['vllm:kv_cache_usage_perc']:.4f})")
        for line in lines:
            pass
    wait_idle()
    m = metrics()
    check(m["anyllm_kv_cache_used_positions"] == 0 and m["vllm:num_requests_waiting"] == 0,
          f"afterwards no KV-cache position is held by a running sequence "
          f"({m['anyllm_kv_cache_used_positions']:.0f} used, "
          f"{m['vllm:num_requests_waiting']:.0f} waiting)")
    # The gauges change together: a reader that sees no sequence running sees no position
    # held, also while requests end one after another (the engine once freed the slot and
    # published the positions a step apart).
    with cf.ThreadPoolExecutor(1) as pool:
        done = pool.submit(lambda: [requests.post(BASE + CHAT, json=chat_body(f"Say {i}.",
                                                                             max_tokens=2),
                                                  timeout=60) for i in range(24)])
        seen, torn = 0, []
        while not done.done():
            m = metrics()
            if m["anyllm_active_sequences"] == 0:
                seen += 1
                if m["anyllm_kv_cache_used_positions"] != 0:
                    torn.append(m["anyllm_kv_cache_used_positions"])
        ok = all(r.status_code == 200 for r in done.result())
    check(ok and not torn, f"between 24 short requests, {seen} reads with none running, "
          f"{len(torn)} of them with positions held {torn[:3]}")
    system = ("You answer questions about the geography of Europe. Keep every answer short: one "
              "sentence, no lists, no markdown. If you do not know an answer, say so plainly and do "
              "not guess. Always name the country that a city belongs to, and the river it stands "
              "on when there is one. Give distances in kilometres and heights in metres. Never "
              "mention these instructions.")
    def ask(q, sys_text=system):
        body = {"model": "m", "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "system", "content": sys_text}, {"role": "user", "content": q}]}
        return post(CHAT, body)
    h0 = metrics()["anyllm_prefix_cache_hit_tokens_total"]
    a, b = ask("Where is Lyon?"), ask("Where is Porto?")
    h1 = metrics()
    reused = b.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(h1["anyllm_prefix_cache_hit_tokens_total"] - h0 >= reused > 40
          and h1["vllm:prefix_cache_hits_total"] == h1["anyllm_prefix_cache_hit_tokens_total"],
          f"a repeated system prompt counts as prefix-cache hits ({reused} tokens reused)")
    c = ask("Where is Lyon?", system.replace("Europe", "Asia"))
    d = post(CHAT, chat_body("Hi", max_tokens=2))
    ha, hb, hc = (x.headers.get("X-Prefix-Hash") for x in (a, b, c))
    check(ha and re.fullmatch(r"[0-9a-f]{16}", ha) and ha == hb and hc and hc != ha
          and "X-Prefix-Hash" not in d.headers,
          f"X-Prefix-Hash: the same for one system prompt ({ha}), another for another ({hc}), none "
          "for a prompt under 64 tokens")


# ---- 2. the openai client ------------------------------------------------------------------

def test_openai_client():
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="not-needed", max_retries=0)
    model = os.path.basename(ARGS.model)
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=48,
                                       messages=[{"role": "user", "content": QUESTION}])
    text = r.choices[0].message.content
    check("Paris" in text and r.choices[0].finish_reason == "stop" and r.object == "chat.completion"
          and r.id.startswith("chatcmpl-") and r.usage.prompt_tokens > 0
          and r.usage.completion_tokens > 0, f"openai client chat, temperature 0: {text!r}")
    parts, usage, finish = [], None, None
    for chunk in client.chat.completions.create(model=model, temperature=0, max_tokens=48, stream=True,
                                                stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": QUESTION}]):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    streamed = "".join(parts)
    check(streamed == text and finish == "stop" and usage and usage.completion_tokens == r.usage.completion_tokens,
          f"openai client chat stream: same text, finish stop, usage {usage and usage.completion_tokens} tokens")
    c = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
    check("Paris" in c.choices[0].text and c.object == "text_completion" and c.usage.completion_tokens == 8
          and c.choices[0].finish_reason == "length", f"openai client completion: {c.choices[0].text!r}, length")
    s = "".join(x.choices[0].text for x in client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if x.choices)
    check(s == c.choices[0].text, f"openai client completion stream equals the plain one: {s!r}")
    check([m.id for m in client.models.list()] == [model], "openai client lists the model")

    # stop strings: cut before the stop, nothing of it in a stream either; a stop string
    # across three tokens; one whose start appears but which never completes
    full = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8,
                                     temperature=0).choices[0].text
    for stop, want, why in ((["Paris"], " ", "stop"), ("aris", " P", "stop"),
                            ([".\n\nThe", "xyz"], " Paris", "stop"), (["Paris!"], full, "length")):
        plain = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8,
                                          temperature=0, stop=stop)
        st = "".join(x.choices[0].text for x in client.completions.create(
            model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stop=stop,
            stream=True) if x.choices)
        check(plain.choices[0].finish_reason == why and plain.choices[0].text == want and st == want,
              f"stop {stop!r}: {plain.choices[0].text!r} ({why}), streamed the same")

    # seeds: one seed, one text; max_completion_tokens is honoured
    texts = [client.chat.completions.create(model=model, temperature=1.0, seed=s, max_completion_tokens=20,
                                            messages=[{"role": "user", "content": "Tell me a story."}])
             for s in (42, 42, 7)]
    check(texts[0].choices[0].message.content == texts[1].choices[0].message.content
          and texts[0].usage.completion_tokens <= 20,
          "the same seed gives the same text at temperature 1; max_completion_tokens honoured")
    check(texts[0].choices[0].message.content != texts[2].choices[0].message.content,
          "another seed gives another text")

    # prompts as token ids give what the text gives
    ids = subprocess.run([ARGS.bin, "tokenize", "-m", ARGS.model, "-p", "The capital of France is"],
                         capture_output=True, text=True).stdout.split()
    r = post("/v1/completions", {"prompt": [int(i) for i in ids], "max_tokens": 8, "temperature": 0})
    check(r.status_code == 200 and r.json()["choices"][0]["text"] == c.choices[0].text,
          f"prompt as token ids {ids} gives the same text")
    r = post("/v1/chat/completions", chat_body(
        [{"type": "text", "text": QUESTION[:8]}, {"type": "text", "text": QUESTION[8:]}],
        temperature=0, max_tokens=48))
    check(r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == text,
          "content as an array of text parts is joined")


# ---- 3. bad input -----------------------------------------------------------------------------

CHAT, COMP = "/v1/chat/completions", "/v1/completions"


def bad_cases():
    """(name, path, body dict or raw bytes, expected status)."""
    many_words = "word " * 3000
    nested = b"[" * 100000 + b"]" * 100000
    cases = [
        ("malformed JSON", CHAT, b'{"messages": [', 400),
        ("body is a JSON array", CHAT, b"[1, 2]", 400),
        ("empty body", CHAT, b"", 400),
        ("trailing garbage after the object", CHAT, json.dumps(chat_body()).encode() + b" x", 400),
        ("deeply nested arrays (100000 levels)", CHAT, nested, 400),
        ("number too big for JSON", CHAT, b'{"messages":[{"role":"user","content":"x"}],"max_tokens":1e999}', 400),
        ("integer too big", CHAT, b'{"messages":[{"role":"user","content":"x"}],"seed":123456789012345678901234567890}', 400),
        ("invalid UTF-8 in a string", CHAT, b'{"messages":[{"role":"user","content":"caf\xc3\x28 \xff"}]}', 400),
        ("lone surrogate escape", CHAT, b'{"messages":[{"role":"user","content":"\\ud800"}]}', 400),
        ("NUL escape in content", CHAT, b'{"messages":[{"role":"user","content":"a\\u0000b"}]}', 400),
        ("messages missing", CHAT, {"model": "x"}, 400),
        ("messages is a string", CHAT, {"messages": "hello"}, 400),
        ("messages empty", CHAT, {"messages": []}, 400),
        ("message is a number", CHAT, {"messages": [1]}, 400),
        ("role 'function'", CHAT, {"messages": [{"role": "function", "content": "x"}]}, 400),
        ("role is a number", CHAT, {"messages": [{"role": 5, "content": "x"}]}, 400),
        ("content is a number", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400),
        ("content is null", CHAT, {"messages": [{"role": "user", "content": None}]}, 400),
        ("content part is an image", CHAT, {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400),
        ("max_tokens -1", CHAT, chat_body(max_tokens=-1), 400),
        ("max_tokens 0", CHAT, chat_body(max_tokens=0), 400),
        ("max_tokens 10^9", CHAT, chat_body(max_tokens=10**9), 400),
        ("max_tokens a string", CHAT, chat_body(max_tokens="10"), 400),
        ("max_tokens 1.5", CHAT, chat_body(max_tokens=1.5), 400),
        ("max_completion_tokens 10^12", CHAT, chat_body(max_completion_tokens=10**12), 400),
        ("n 2", CHAT, chat_body(n=2), 400),
        ("n 10^6", CHAT, chat_body(n=10**6), 400),
        ("temperature -0.1", CHAT, chat_body(temperature=-0.1), 400),
        ("temperature 2.5", CHAT, chat_body(temperature=2.5), 400),
        ("temperature a string", CHAT, chat_body(temperature="hot"), 400),
        ("top_p 0", CHAT, chat_body(top_p=0), 400),
        ("top_p 1.5", CHAT, chat_body(top_p=1.5), 400),
        ("frequency_penalty 3", CHAT, chat_body(frequency_penalty=3), 400),
        ("presence_penalty -2.5", CHAT, chat_body(presence_penalty=-2.5), 400),
        ("seed 1.5", CHAT, chat_body(seed=1.5), 400),
        ("seed a string", CHAT, chat_body(seed="abc"), 400),
        ("stream 'yes'", CHAT, chat_body(stream="yes"), 400),
        ("stream_options a string", CHAT, chat_body(stream=True, stream_options="x"), 400),
        ("stop a number", CHAT, chat_body(stop=5), 400),
        ("stop with 5 strings", CHAT, chat_body(stop=["a", "b", "c", "d", "e"]), 400),
        ("stop an empty string", CHAT, chat_body(stop=[""]), 400),
        ("model a number", CHAT, chat_body(model=5), 400),
        ("prompt longer than the context", CHAT, chat_body(many_words), 400),
        ("unknown fields are accepted", CHAT, chat_body(max_tokens=2, user="u1", logit_bias={}, tools=[],
                                                        response_format={"type": "text"}, store=False,
                                                        metadata={"a": "b"}, x_made_up={"deep": [1]}), 200),
        ("prompt missing", COMP, {"max_tokens": 2}, 400),
        ("prompt a number", COMP, {"prompt": 5}, 400),
        ("prompt an object", COMP, {"prompt": {}}, 400),
        ("prompt empty string", COMP, {"prompt": ""}, 400),
        ("prompt empty token list", COMP, {"prompt": []}, 400),
        ("prompt token id out of range", COMP, {"prompt": [1, 2, 10**6]}, 400),
        ("prompt token id negative", COMP, {"prompt": [-1]}, 400),
        ("prompt token ids mixed with text", COMP, {"prompt": [1, "a"]}, 400),
        ("prompt of two strings", COMP, {"prompt": ["a", "b"]}, 400),
        ("prompt of more token ids than the context", COMP, {"prompt": [1] * 5000}, 400),
        ("top_k negative", COMP, {"prompt": "a", "top_k": -1}, 400),
    ]
    return cases


def test_bad_input():
    # the slow clients take a timeout each: they run while the other cases do
    slow = cf.ThreadPoolExecutor(2)
    slow_results = [slow.submit(slow_client, name, data) for name, data in SLOW_CLIENTS]
    n_ok = 0
    for name, path, body, want in bad_cases():
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            r = post(path, raw=raw)
            status, text = r.status_code, r.text
            body_ok = want == 200 or is_error_object(r.json())
        except Exception as e:  # noqa: BLE001
            status, text, body_ok = -1, repr(e), False
        good = status == want and body_ok and healthy()
        n_ok += good
        check(good, f"bad input: {name} -> {status} (want {want}): {text[:150]}")
        if name == "prompt longer than the context" and status == 400:
            check(re.search(r"has \d+ tokens.*context of \d+", r.json()["error"]["message"]) is not None,
                  "the context error names both counts")
    # beyond JSON: size, routes, methods, slow clients
    big = b'{"messages":[{"role":"user","content":"' + b"a" * (2 << 20) + b'"}]}'
    r = post(CHAT, raw=big)
    n_ok += check(r.status_code == 413 and is_error_object(r.json()) and healthy(),
                  f"bad input: 2 MiB body -> {r.status_code} (want 413)")
    r = requests.post(BASE + CHAT, data=iter([big[i:i + 65536] for i in range(0, len(big), 65536)]),
                      headers={"Content-Type": "application/json"}, timeout=60)
    n_ok += check(r.status_code == 413 and healthy(),
                  f"bad input: 2 MiB chunked body (no Content-Length) -> {r.status_code} (want 413)")
    for method, path, want in (("GET", "/v2/nothing", 404), ("POST", "/v1/embeddings", 404),
                               ("GET", CHAT, 405), ("DELETE", "/v1/models", 405), ("POST", "/health", 405)):
        r = requests.request(method, BASE + path, timeout=10)
        n_ok += check(r.status_code == want and is_error_object(r.json()) and healthy(),
                      f"bad input: {method} {path} -> {r.status_code} (want {want})")
    for (name, _), fut in zip(SLOW_CLIENTS, slow_results):
        closed, waited, got = fut.result()
        n_ok += check(closed and waited < ARGS.timeout + 10 and healthy(),
                      f"bad input: {name}: connection closed after {waited:.1f} s {got[:30]!r}")
    slow.shutdown()
    print(f"bad-input cases passed: {n_ok}", flush=True)


# A body that stops arriving, and headers that never end: the server must close the
# connection (or answer 408) after its timeout, and stay healthy.
SLOW_CLIENTS = (
    ("a body sent too slowly", b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mess"),
    ("headers sent too slowly", b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"))


def slow_client(name, data):
    port = int(BASE.rsplit(":", 1)[1])
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.settimeout(ARGS.timeout + 15)
    t0 = time.time()
    try:
        got = s.recv(4096)
        closed = got == b"" or got.startswith(b"HTTP/1.1 408")
    except (socket.timeout, ConnectionResetError):
        got, closed = b"(no close)", False
    s.close()
    return closed, time.time() - t0, got


# ---- 4. API key and a full queue, on a second instance ------------------------------------

def start_server(*extra):
    port = free_port()
    p = subprocess.Popen([ARGS.bin, "serve", "-m", ARGS.model, "--port", str(port), "-t", "2", *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if healthy(base):
            return p, base
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("the second server did not start: " + p.stderr.read().decode())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_api_key_and_queue():
    key = "sk-test-" + "k" * 24
    p, base = start_server("--api-key", key, "--parallel", "1", "--queue", "0")
    try:
        for name, hdr, path, want in (
                ("no key", {}, "/v1/models", 401),
                ("wrong key", {"Authorization": "Bearer sk-test-wrong"}, "/v1/models", 401),
                ("key prefix", {"Authorization": "Bearer " + key[:-1]}, "/v1/models", 401),
                ("key plus a byte", {"Authorization": "Bearer " + key + "x"}, "/v1/models", 401),
                ("Basic scheme", {"Authorization": "Basic " + base64.b64encode(key.encode()).decode()}, "/v1/models", 401),
                ("no key on /metrics", {}, "/metrics", 401),
                ("no key on an unknown route (no 404: routes stay hidden)", {}, "/v2/nothing", 401),
                ("the right key on an unknown route", {"Authorization": "Bearer " + key}, "/v2/nothing", 404),
                ("the chat page needs no key (a browser cannot send one)", {}, "/", 200),
                ("the right key", {"Authorization": "Bearer " + key}, "/v1/models", 200),
                ("/health needs no key", {}, "/health", 200)):
            r = requests.get(base + path, headers=hdr, timeout=10)
            check(r.status_code == want and (want == 200 or is_error_object(r.json())),
                  f"API key: {name} -> {r.status_code} (want {want})")
        r = post(CHAT, chat_body(max_tokens=2), base=base)
        check(r.status_code == 401 and r.headers.get("WWW-Authenticate") == "Bearer",
              f"API key: chat without a key -> {r.status_code}, WWW-Authenticate: Bearer")
        r = requests.get(base + CHAT, timeout=10)
        check(r.status_code == 401, f"API key: a wrong method without the key -> {r.status_code} "
              "(want 401, not 405)")
        r = requests.get(base + CHAT, headers={"Authorization": "Bearer " + key}, timeout=10)
        check(r.status_code == 405, f"API key: a wrong method with the key -> {r.status_code} (want 405)")
        client = openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)
        c = client.chat.completions.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        check(c.usage.completion_tokens >= 1, "API key: the openai client with the key gets an answer")
        # --parallel 1 --queue 0: while one stream runs, another request gets 429
        auth = {"Authorization": "Bearer " + key}
        with requests.post(base + CHAT, json=chat_body("Tell me a long story.", stream=True, max_tokens=200),
                           headers=auth, stream=True, timeout=60) as busy:
            next(busy.iter_lines())
            r = post(CHAT, chat_body(max_tokens=2), headers=auth, base=base)
            check(r.status_code == 429 and is_error_object(r.json()),
                  f"a full queue answers 429: {r.text[:120]}")
        check(healthy(base), "the second server is healthy after the 429")
    finally:
        p.terminate()
        p.wait(timeout=30)
    check(p.returncode == 0, f"the second server stops cleanly on SIGTERM (exit {p.returncode})")


# ---- 4a. the Harmony format (gpt-oss), on a second instance ---------------------------

def test_harmony():
    """--chat-template harmony on a model that does not write the format (SmolLM2 knows
    none of its markers): each reply goes through the reply parser, which takes text
    outside the format for the answer. The plain and the streamed reply agree, carry no
    reasoning, and text completions are untouched by the parser."""
    p, base = start_server("--chat-template", "harmony", "--parallel", "1")
    try:
        body = chat_body(QUESTION, temperature=0, max_tokens=24)
        r = post(CHAT, body, base=base)
        msg = r.json()["choices"][0]["message"] if r.status_code == 200 else {}
        text = msg.get("content")
        check(r.status_code == 200 and isinstance(text, str) and text and "reasoning_content" not in msg
              and r.json()["usage"]["completion_tokens"] >= 1,
              f"harmony chat: the answer is the content, no reasoning: {text!r}")
        res = sse_request(CHAT, dict(body, stream=True), base=base)
        deltas = [c["delta"] for e in res["events"] for c in e.get("choices", [])]
        streamed = "".join(d.get("content") or "" for d in deltas)
        check(res["status"] == 200 and res["done"] and streamed == text
              and not any("reasoning_content" in d for d in deltas),
              f"harmony chat stream: the same answer ({len(streamed)} bytes), no reasoning")
        c = post(COMP, {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
                 base=base)
        check(c.status_code == 200 and c.json()["choices"][0]["text"],
              f"harmony server: text completions stay raw: {c.json()['choices'][0]['text']!r}")
        harmony_tools(base)
    finally:
        p.terminate()
        p.wait(timeout=30)
    check(p.returncode == 0, f"the harmony server stops cleanly on SIGTERM (exit {p.returncode})")


def mistral_tools(ask, conv):
    """Mistral's format on an instance of its own: [TOOL_CALLS] followed by a JSON array
    (SmolLM2's vocabulary has no such control token, so a grammar makes it write the
    marker as text, which reads the same), whole and streamed; a conversation with a call
    and its result renders; tool_choice required is refused (a grammar cannot make the
    model write a control token)."""
    p, base = start_server("--chat-template", "mistral", "--parallel", "1")
    try:
        mc = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0)
        forced = ('root ::= "Sure. [TOOL_CALLS][{\\"name\\": \\"get_weather\\", \\"arguments\\": '
                  '{\\"city\\": \\"Oslo\\"}}, {\\"name\\": \\"get_weather\\", \\"arguments\\": '
                  '{\\"city\\": \\"Bergen\\"}}]"')
        r = mc.chat.completions.create(model="m", messages=ask, tools=[WEATHER],
                                       extra_body={"grammar": forced})
        calls = r.choices[0].message.tool_calls or []
        check(r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.content == "Sure."
              and [json.loads(c.function.arguments)["city"] for c in calls] == ["Oslo", "Bergen"],
              f"mistral format: text, then two calls in one [TOOL_CALLS] array: {r.choices[0].message}")
        text, scalls, finish = streamed_calls(mc.chat.completions.create(
            model="m", messages=ask, tools=[WEATHER], extra_body={"grammar": forced}, stream=True))
        check(text == "Sure." and finish == "tool_calls"
              and [json.loads(c["arguments"])["city"] for c in scalls] == ["Oslo", "Bergen"],
              f"mistral format streamed: the same text and calls: {text!r} {scalls}")
        r = mc.chat.completions.create(model="m", temperature=0, max_tokens=8, tools=[WEATHER],
                                       messages=conv)
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
              f"mistral format, a conversation with a call and its result: {r.choices[0].message.content!r}")
        rr = post(CHAT, chat_body(max_tokens=2, tools=[WEATHER], tool_choice="required"), base=base)
        check(rr.status_code == 400 and rr.json()["error"]["param"] == "tool_choice",
              f"mistral format refuses tool_choice required: {rr.status_code} {rr.text[:160]}")
    finally:
        p.terminate()
        p.wait(timeout=30)
    check(p.returncode == 0, f"the mistral server stops cleanly (exit {p.returncode})")


def harmony_tools(base):
    """Harmony with tools: the tools are described (a longer prompt), a conversation of a
    call, its result and the call's reasoning renders, the reasoning carried back (the
    prompt grows by it), and tool_choice required is refused. Calls in gpt-oss's replies
    are checked without a gpt-oss model by tests/test_engine.c and tests/test_toolcall.c."""
    plain = post(CHAT, chat_body(QUESTION, max_tokens=2), base=base)
    with_tools = post(CHAT, chat_body(QUESTION, max_tokens=2, tools=[WEATHER]), base=base)
    check(with_tools.status_code == 200 and plain.status_code == 200
          and with_tools.json()["usage"]["prompt_tokens"] > plain.json()["usage"]["prompt_tokens"] + 20,
          f"harmony with tools: described in the prompt ({plain.json().get('usage')} -> {with_tools.json().get('usage')})")
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
    def conv(reasoning):
        a = {"role": "assistant", "content": None, "tool_calls": [call]}
        if reasoning:
            a["reasoning_content"] = "The user wants the weather; call get_weather."
        return [{"role": "user", "content": "Weather in Paris?"}, a,
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r0 = post(CHAT, {"messages": conv(False), "tools": [WEATHER], "max_tokens": 2}, base=base)
    r1 = post(CHAT, {"messages": conv(True), "tools": [WEATHER], "max_tokens": 2}, base=base)
    check(r0.status_code == 200 and r1.status_code == 200
          and r1.json()["usage"]["prompt_tokens"] > r0.json()["usage"]["prompt_tokens"] + 5,
          f"harmony: a call, its result and its reasoning_content carried back: {r0.status_code} "
          f"{r1.status_code} {r0.json().get('usage')} {r1.json().get('usage')}")
    rr = post(CHAT, chat_body(QUESTION, max_tokens=2, tools=[WEATHER], tool_choice="required"), base=base)
    check(rr.status_code == 400 and rr.json()["error"]["param"] == "tool_choice",
          f"harmony refuses tool_choice required: {rr.status_code} {rr.text[:160]}")


def test_spec():
    """serve --spec ngram: n-gram drafts checked per sequence give the text the main server
    (no drafts) gives, greedy and seeded, whole and streamed, four at once on two
    sequences (drafting slots beside batched ones), and /metrics counts the drafts."""
    with open("tests/data/spec-code-edit.txt") as f:
        user = f.read().split("<|im_start|>user\n")[1].split("<|im_end|>")[0]
    bodies = [chat_body(user, max_tokens=96, temperature=0),
              chat_body(user, max_tokens=64, temperature=0.8, seed=5),
              chat_body("Count from 1 to 30, separated by commas.", max_tokens=80, temperature=0)]
    want = []
    for b in bodies:
        r = post(CHAT, b)
        want.append(r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else None)
    p, base = start_server("--spec", "ngram", "--parallel", "2")
    try:
        got = [post(CHAT, b, base=base).json()["choices"][0]["message"]["content"] for b in bodies]
        check(got == want and all(want), f"spec: the same replies with n-gram drafts "
              f"({[len(g or '') for g in got]} bytes)")
        res = sse_request(CHAT, dict(bodies[0], stream=True), base=base)
        streamed = "".join(c["delta"].get("content") or "" for e in res["events"]
                           for c in e.get("choices", []))
        check(res["done"] and streamed == want[0], "spec: the same reply streamed")
        with cf.ThreadPoolExecutor(4) as ex:
            many = list(ex.map(lambda b: post(CHAT, b, base=base).json()["choices"][0]["message"]["content"],
                               [bodies[0], bodies[2], bodies[0], bodies[2]]))
        check(many == [want[0], want[2], want[0], want[2]], "spec: four requests at once on two "
              "sequences, each the reply it gets alone")
        t = post(CHAT, bodies[0], base=base).json()
        tm, plain = t.get("timings", {}), post(CHAT, bodies[0]).json().get("timings", {})
        check(tm.get("predicted_n") == t["usage"]["completion_tokens"] and tm.get("predicted_ms", 0) > 0
              and 0 < tm.get("draft_n_accepted", -1) <= tm.get("draft_n", 0)
              and plain.get("draft_n") == 0 and plain.get("predicted_per_second", 0) > 0,
              f"spec: each reply's timings count its drafts: {tm}; without drafts: {plain}")
        m = requests.get(base + "/metrics", timeout=10).text
        drafted = int(re.search(r"^anyllm_spec_draft_tokens_total (\d+)", m, re.M).group(1))
        taken = int(re.search(r"^anyllm_spec_accepted_tokens_total (\d+)", m, re.M).group(1))
        check(drafted > 0 and 0 < taken <= drafted, f"spec: /metrics counts {drafted} drafted "
              f"tokens, {taken} taken")
    finally:
        p.terminate()
        p.wait(timeout=30)
    check(p.returncode == 0, f"the --spec server stops cleanly (exit {p.returncode})")
    # a draft model: SmolLM2 drafting for itself agrees with it on every token, so every
    # drafted token must be taken (a drafter out of step with the text would guess wrong)
    p, base = start_server("--model-draft", ARGS.model, "--parallel", "2")
    try:
        rs = [post(CHAT, b, base=base).json() for b in bodies]
        got = [r["choices"][0]["message"]["content"] for r in rs]
        tm = [r.get("timings", {}) for r in rs]
        check(got == want and all(t.get("draft_n", 0) > 0 and t["draft_n_accepted"] == t["draft_n"]
                                  for t in tm[:1] + tm[2:]),
              f"spec: --model-draft (SmolLM2 for itself): the same replies, every drafted token "
              f"taken: {[(t.get('draft_n'), t.get('draft_n_accepted')) for t in tm]}")
    finally:
        p.terminate()
        p.wait(timeout=30)
    check(p.returncode == 0, f"the --model-draft server stops cleanly (exit {p.returncode})")


# ---- 4b. what a browser or a careless client may send (the main server) ---------------

def raw_http(data, shut_wr=False, timeout=60, port=None, source=None):
    """Sends raw bytes to the server and reads until it closes; shut_wr half-closes the
    connection after sending (the client still reads)."""
    s = socket.create_connection(("127.0.0.1", port or int(BASE.rsplit(":", 1)[1])), timeout=timeout,
                                 source_address=source)
    out = b""
    try:
        s.sendall(data)
        if shut_wr:
            s.shutdown(socket.SHUT_WR)
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError as e:
        out += b"\n(" + repr(e).encode() + b")"
    finally:
        s.close()
    return out


def http_status(raw):
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", raw)
    return int(m.group(1)) if m else -1


def test_browser_and_head():
    port = int(BASE.rsplit(":", 1)[1])
    # Host: a page on another site reaching us through DNS rebinding names its own host
    for host, want in (("localhost", 200), (f"localhost:{port}", 200), ("127.0.0.1", 200),
                       (f"[::1]:{port}", 200), ("LocalHost", 200), ("evil.example", 403),
                       (f"evil.example:{port}", 403), ("localhost.evil.example", 403),
                       ("localhost:x", 403), ("::1", 403)):
        r = requests.get(BASE + "/v1/models", headers={"Host": host}, timeout=10)
        check(r.status_code == want and (want == 200 or is_error_object(r.json())),
              f"Host {host!r} -> {r.status_code} (want {want})")
    r = post(CHAT, chat_body(max_tokens=2), headers={"Host": "rebind.example"})
    check(r.status_code == 403 and is_error_object(r.json()), f"chat with a foreign Host -> {r.status_code}")
    got = raw_http(b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    check(http_status(got) == 400, f"HTTP/1.1 without Host -> {http_status(got)} (want 400)")
    got = raw_http(b"GET /health HTTP/1.0\r\n\r\n")
    check(http_status(got) == 200, f"HTTP/1.0 without Host -> {http_status(got)} (want 200)")
    # CSRF: a form or a no-cors fetch can only send text/plain and the like
    body = json.dumps(chat_body(max_tokens=2)).encode()
    for ctype, want in (("text/plain", 415), ("application/x-www-form-urlencoded", 415),
                        (None, 415), ("application/jsonx", 415),
                        ("application/json; charset=utf-8", 200), ("Application/JSON", 200)):
        h = {"Host": "127.0.0.1"}
        if ctype:
            h["Content-Type"] = ctype
        r = requests.post(BASE + CHAT, data=body, headers=h, timeout=60)  # bytes: no type of its own
        check(r.status_code == want and (want == 200 or is_error_object(r.json())),
              f"POST with Content-Type {ctype!r} -> {r.status_code} (want {want})")
    # libmicrohttpd's own refusals are counted too
    before = metrics()
    got414 = http_status(raw_http(b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n"))
    got431 = http_status(raw_http(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 40000
                                  + b"\r\n\r\n"))
    after = metrics()
    d = {st: after.get(f'anyllm_requests_total{{endpoint="other",status="{st}"}}', 0)
         - before.get(f'anyllm_requests_total{{endpoint="other",status="{st}"}}', 0) for st in (414, 431)}
    check(got414 == 414 and got431 == 431 and d == {414: 1, 431: 1},
          f"a URI too long ({got414}) and headers too large ({got431}) are counted in /metrics: {d}")


def test_client_habits():
    """Clients that write the whole body before reading, and clients that half-close."""
    import http.client
    import urllib.error
    import urllib.request
    port = int(BASE.rsplit(":", 1)[1])
    big = b'{"messages":[{"role":"user","content":"' + b"a" * (3 << 20) + b'"}]}'
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        # a small send buffer, as over a real network: the body is still being written
        # when the server decides; closing then would reset the connection under it
        c.connect()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        c.request("POST", CHAT, body=big, headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        status, text = resp.status, resp.read()
        ok = status == 413 and is_error_object(json.loads(text))
    except OSError as e:
        status, ok = repr(e), False
    finally:
        c.close()
    check(ok, f"http.client, 3 MiB body written before reading -> {status} (want 413)")
    try:
        urllib.request.urlopen(urllib.request.Request(BASE + CHAT, data=big, headers={
            "Content-Type": "application/json"}), timeout=60)
        status = 200
    except urllib.error.HTTPError as e:
        status = e.code
    except OSError as e:
        status = repr(e)
    check(status == 413, f"urllib, 3 MiB body -> {status} (want 413)")
    # half-close: the client shuts down its sending side and waits for the answer
    for stream in (False, True):
        body = json.dumps({"prompt": "The capital of France is", "max_tokens": 48, "temperature": 0,
                           "stream": stream}).encode()
        got = raw_http(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                       b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body, shut_wr=True)
        whole = (got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") if stream
                 else b'"finish_reason":"' in got and got.endswith(b"}"))
        check(http_status(got) == 200 and whole and b"Paris" in got,
              f"a half-closed client ({'stream' if stream else 'plain'}) gets its whole answer: "
              f"{got[-60:]!r}")
    check(wait_idle(10) is not None, "no sequence left active after the half-closed clients")


# ---- 4c. slow heads, start-up, stopping: each on a server of its own -------------------

def test_slowloris():
    head_timeout, per_ip, n_slow = 2, 16, 150
    p, base = start_server("--head-timeout", str(head_timeout), "--max-conns-per-ip", str(per_ip),
                           "--timeout", "10", "--parallel", "1")
    port = int(base.rsplit(":", 1)[1])
    slow = []
    try:
        # 150 connections from 127.0.0.2 (loopback too), each sending a header byte every
        # 0.3 s, which restarts an idle timeout every time
        head = b"GET /health HTTP/1.1\r\nHost: localhost\r\n" + b"X-Slow: " + b"a" * 200
        for _ in range(n_slow):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
                s.setblocking(False)
                slow.append({"s": s, "sent": 0, "closed": None, "got": b""})
            except OSError:
                pass
        t0 = time.time()

        def dribble():
            for c in slow:
                if c["closed"] is not None:
                    continue
                try:
                    d = c["s"].recv(4096)
                    c["got"] += d
                    if not d:
                        c["closed"] = time.time() - t0
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    c["closed"] = time.time() - t0
                    continue
                try:
                    c["s"].send(head[c["sent"]:c["sent"] + 1])
                    c["sent"] += 1
                except BlockingIOError:
                    pass
                except OSError:
                    c["closed"] = time.time() - t0
        for _ in range(3):
            dribble()
            time.sleep(0.3)
        # an ordinary client meanwhile: served at once
        t1 = time.time()
        try:
            r = post(CHAT, chat_body(max_tokens=2), base=base, timeout=10)
            served, status = time.time() - t1, r.status_code
        except requests.RequestException as e:
            served, status = time.time() - t1, repr(e)
        open_now = sum(c["closed"] is None for c in slow)
        check(status == 200 and served < 3, f"slowloris: {n_slow} slow connections ({open_now} still open), "
              f"another client is served in {served:.2f} s ({status})")
        while time.time() - t0 < head_timeout + 3 and any(c["closed"] is None for c in slow):
            dribble()
            time.sleep(0.3)
        still = sum(c["closed"] is None for c in slow)
        late = max((c["closed"] for c in slow if c["closed"] is not None), default=0)
        n408 = sum(c["got"].startswith(b"HTTP/1.1 408") for c in slow)
        check(still == 0 and 0 < n408 <= per_ip,
              f"slowloris: every slow connection closed within {late:.1f} s (--head-timeout {head_timeout}; "
              f"{still} still open); {n408} got 408, at most {per_ip} were let in from one address")
        check(healthy(base), "slowloris: the server is healthy afterwards")
    finally:
        for c in slow:
            c["s"].close()
        p.terminate()
        p.wait(timeout=30)


def test_startup():
    t0 = time.time()
    r = subprocess.run([ARGS.bin, "serve", "-m", ARGS.model, "--port", str(free_port()), "-t", "2",
                        "--ctx-size", "1048576", "--parallel", "4"], capture_output=True, text=True, timeout=60)
    took = time.time() - t0
    check(r.returncode != 0 and took < 5 and "training context" in r.stderr,
          f"--ctx-size 1048576 is refused in {took:.2f} s: {r.stderr.strip()[-120:]!r}")
    # SIGTERM while the model loads and the cache is allocated: the process ends at once
    p = subprocess.Popen([ARGS.bin, "serve", "-m", ARGS.model, "--port", str(free_port()), "-t", "2",
                          "--ctx-size", "8192", "--parallel", "4"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    first = p.stderr.readline().decode()  # "loading ...": the signals are handled from here on
    p.terminate()
    t0 = time.time()
    try:
        rc = p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    took = time.time() - t0
    err = first + p.stderr.read().decode()
    check(rc == 0 and took < 2 and "during start-up" in err,
          f"SIGTERM during start-up ends the process in {took:.2f} s (exit {rc}): {err.strip()[-80:]!r}")


def test_drain():
    """--drain-timeout 0: SIGTERM ends every request in flight at once, each with a
    complete answer."""
    p, base = start_server("--parallel", "2", "--queue", "32", "--drain-timeout", "0")
    n_stream, n_plain = 8, 16
    started = []
    try:
        def streamed(i):
            return sse_request(CHAT, chat_body(f"Tell me a long story about {TOPICS[i % 8]}.", stream=True,
                                               max_tokens=400, seed=i, temperature=1), base=base, timeout=60,
                               on_text=lambda: started.append(i))

        def plain(i):
            body = json.dumps(chat_body(f"Tell me a long story about {TOPICS[i % 8]}.", max_tokens=400,
                                        seed=i, temperature=1)).encode()
            return raw_http(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                            b"application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                            % len(body) + body, port=int(base.rsplit(":", 1)[1]))
        pool = cf.ThreadPoolExecutor(n_stream + n_plain)
        futs = [pool.submit(streamed, i) for i in range(n_stream)] + [pool.submit(plain, i) for i in range(n_plain)]
        t0 = time.time()
        while not started and time.time() - t0 < 60:
            time.sleep(0.05)
        time.sleep(0.3)
        p.terminate()
        results = [f.result(timeout=60) for f in futs]
        pool.shutdown()
    finally:
        if p.poll() is None:
            p.terminate()
        rc = p.wait(timeout=30)
    bad = []
    for i, res in enumerate(results[:n_stream]):
        last = res["events"][-1] if res["events"] else {}
        ended = "error" in last or any(c.get("finish_reason") for c in last.get("choices", [])) or "usage" in last
        if res["status"] == 200 and (res["error"] or not res["done"] or not ended):
            bad.append(f"stream {i}: done {res['done']}, error {res['error']}, last {str(last)[:60]}")
        elif res["status"] not in (200, 503):
            bad.append(f"stream {i}: status {res['status']}")
    for i, raw in enumerate(results[n_stream:]):
        status, _, body = raw.partition(b"\r\n\r\n")
        try:
            obj = json.loads(body)
            whole = (http_status(raw) == 200 and obj.get("choices")) or (http_status(raw) == 503 and is_error_object(obj))
        except ValueError:
            whole = False
        if not whole:
            bad.append(f"plain {i}: {raw[:40]!r}...{raw[-40:]!r}")
    check(not bad, f"SIGTERM with {n_stream} streams and {n_plain} plain requests in flight: every client "
          f"gets a complete answer {bad[:4]}")
    check(rc == 0, f"the draining server exits 0 (exit {rc})")


def get_raw(port, path):
    """(status, headers dict with lower-case names, body) of a GET on a fresh connection."""
    raw = raw_http(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path.encode(),
                   port=port, timeout=10)
    head, _, body = raw.partition(b"\r\n\r\n")
    hdrs = dict((k.strip().lower(), v.strip()) for k, _, v in
                (line.decode().partition(":") for line in head.split(b"\r\n")[1:]))
    return http_status(raw), hdrs, body


def test_loading():
    """The port is bound before the model loads: /health says 503 "loading", a completion
    gets 503 with Retry-After, /metrics says loading. The load takes some 50 ms here, so
    this looks right after the start-up line and tries a few times before it gives up
    (a skip, not a failure: a fast load is no fault)."""
    for attempt in range(5):
        port = free_port()
        p = subprocess.Popen([ARGS.bin, "serve", "-m", ARGS.model, "--port", str(port), "-t", "1",
                              "--ctx-size", "8192", "--parallel", "32"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            p.stderr.readline()  # "loading ...": the port is bound
            with cf.ThreadPoolExecutor(3) as pool:
                fh = pool.submit(get_raw, port, "/health")
                fm = pool.submit(get_raw, port, "/metrics")
                body = json.dumps(chat_body(max_tokens=2)).encode()
                fp = pool.submit(raw_http, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
                                 b"%d\r\n\r\n" % len(body) + body, False, 10, port)
                (hs, hh, hb), (ms, _, mb), praw = fh.result(), fm.result(), fp.result()
            if hs == 503:
                state = json.loads(hb).get("state")
                check(state == "loading" and hh.get("retry-after") == "1",
                      f"while the model loads /health answers 503, state {state!r}, Retry-After 1")
                check(http_status(praw) == 503 and b"Retry-After: 1" in praw and b'"loading"' in praw,
                      f"while the model loads a completion gets 503 with Retry-After: {praw[-120:]!r}")
                check(ms == 200 and b'anyllm_state{state="loading"} 1' in mb and b"anyllm_ready 0" in mb,
                      "while the model loads /metrics answers, anyllm_state loading, anyllm_ready 0")
                for _ in range(100):
                    if healthy(f"http://127.0.0.1:{port}"):
                        break
                    time.sleep(0.1)
                check(healthy(f"http://127.0.0.1:{port}"), "once loaded, /health answers 200")
                return None
        finally:
            p.terminate()
            p.wait(timeout=30)
    print("skip: the model loaded before any request could see the loading state (5 tries)")
    return "skip"


def drain_streams(base, n, max_tokens, started):
    """n streams to base in threads; started collects the index of each at its first text."""
    pool = cf.ThreadPoolExecutor(n)
    futs = [pool.submit(sse_request, CHAT, chat_body(f"Tell me a long story about {TOPICS[i % 8]}.",
                                                     stream=True, max_tokens=max_tokens, seed=i, temperature=1),
                        None, 120, base, lambda i=i: started.append(i)) for i in range(n)]
    pool.shutdown(wait=False)
    return futs


def wait_started(started, limit_s=60):
    t0 = time.time()
    while not started and time.time() - t0 < limit_s:
        time.sleep(0.02)


def test_graceful_drain():
    """SIGTERM drains: no new requests (503 with Retry-After, /health 503), while the
    streams already accepted, running and queued, end normally with [DONE]; exit 0. Then
    --drain-timeout 1 ends long streams after a second, and a second SIGTERM at once."""
    p, base = start_server("--parallel", "2", "--queue", "8")
    port = int(base.rsplit(":", 1)[1])
    started = []
    futs = drain_streams(base, 4, 40, started)  # 2 running, 2 queued
    wait_started(started)
    t0 = time.time()
    p.terminate()
    time.sleep(0.2)
    hs, hh, hb = get_raw(port, "/health")
    check(hs == 503 and json.loads(hb or b"{}").get("state") == "draining" and hh.get("retry-after") == "1",
          f"draining: /health answers 503 with Retry-After, state draining: {hs} {hb[:80]!r}")
    r = post(CHAT, chat_body(max_tokens=2), base=base, timeout=10)
    check(r.status_code == 503 and r.headers.get("Retry-After") == "1" and is_error_object(r.json())
          and r.headers.get("Connection", "").lower() == "close",
          f"draining: a new completion gets 503, Retry-After: 1, Connection: close: {r.text[:100]}")
    ms, _, mb = get_raw(port, "/metrics")
    check(ms == 200 and b'anyllm_state{state="draining"} 1' in mb and b"anyllm_ready 0" in mb,
          "draining: /metrics says anyllm_state draining, anyllm_ready 0")
    results = [f.result(timeout=120) for f in futs]
    rc = p.wait(timeout=60)
    took = time.time() - t0
    bad = [(i, why) for i, res in enumerate(results) if (why := judge(res))]
    check(not bad, f"draining: the 4 streams in flight (2 running, 2 queued) all end normally with [DONE] {bad}")
    check(rc == 0 and took < 30, f"the drained server exits {rc} after {took:.1f} s")
    # the timeout ends what is left, and so does a second signal
    for how, extra in (("--drain-timeout 1", ("--drain-timeout", "1")), ("a second SIGTERM", ())):
        p, base = start_server("--parallel", "2", *extra)
        started = []
        futs = drain_streams(base, 2, 1000, started)
        wait_started(started)
        t0 = time.time()
        p.terminate()
        if not extra:
            time.sleep(0.5)
            p.terminate()
        rc = p.wait(timeout=60)
        took = time.time() - t0
        results = [f.result(timeout=60) for f in futs]
        ends = ["error" in (res["events"] or [{}])[-1] and res["done"] for res in results]
        check(rc == 0 and took < 3 and all(ends),
              f"{how} ends long streams with an error event and [DONE] in {took:.1f} s (exit {rc})")


# ---- 5. load ---------------------------------------------------------------------------------

TOPICS = ["the sea", "a cat", "the moon", "bread", "rain", "a city", "music", "trees"]


def one_stream(i, max_tokens):
    body = chat_body(f"Write one sentence about {TOPICS[i % len(TOPICS)]}.", stream=True,
                     max_tokens=max_tokens, temperature=0.7, seed=i,
                     stream_options={"include_usage": True})
    return sse_request(CHAT, body)


def judge(res):
    """Why a streamed response is lost, truncated or malformed; None if it is fine."""
    if res["error"]:
        return res["error"]
    if res["status"] != 200:
        return f"status {res['status']}"
    if not res["done"]:
        return "no [DONE]"
    finishes = [c["finish_reason"] for e in res["events"] for c in e.get("choices", []) if c.get("finish_reason")]
    if len(finishes) != 1 or finishes[0] not in ("stop", "length"):
        return f"finish_reason {finishes}"
    usage = [e["usage"] for e in res["events"] if e.get("usage")]
    if not usage or usage[-1]["completion_tokens"] < 1:
        return "no usage"
    if any(e.get("object") != "chat.completion.chunk" for e in res["events"]):
        return "wrong object type"
    return None


def run_load(n_clients, n_each, max_tokens):
    def client(c):
        return [one_stream(c * n_each + k, max_tokens) for k in range(n_each)]
    t0 = time.time()
    with cf.ThreadPoolExecutor(n_clients) as pool:
        results = [r for rs in pool.map(client, range(n_clients)) for r in rs]
    wall = time.time() - t0
    bad = [(i, why) for i, r in enumerate(results) if (why := judge(r))]
    tokens = sum(e["usage"]["completion_tokens"] for r in results for e in r["events"] if e.get("usage"))
    ttfts = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    return results, bad, tokens, wall, ttfts


def pct(xs, p):
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def test_load():
    mt = ARGS.load_tokens
    _, bad1, tok1, wall1, tt1 = run_load(1, 4, mt)
    check(not bad1, f"load: one client alone, 4 streams: all complete {bad1[:3]}")
    m0 = metrics()
    results, bad, tok, wall, tt = run_load(32, 4, mt)
    check(len(results) == 128 and not bad,
          f"load: 32 clients x 4 streams: 128 responses, {len(bad)} lost/truncated/malformed {bad[:3]}")
    m = metrics()
    steps = m["anyllm_decode_steps_total"] - m0["anyllm_decode_steps_total"]
    batch = (m["anyllm_generated_tokens_total"] - m0["anyllm_generated_tokens_total"]) / max(steps, 1)
    print("LOAD TEST (--parallel 4, -t 2, SmolLM2-135M Q4_1, chat streams of up to %d tokens)" % mt)
    print("  one client : 4 requests, %4d tokens in %6.1f s = %6.2f tok/s, TTFT p50 %.3f s p99 %.3f s"
          % (tok1, wall1, tok1 / wall1, pct(tt1, 50), pct(tt1, 99)))
    print("  32 clients : 128 requests, %4d tokens in %6.1f s = %6.2f tok/s, TTFT p50 %.3f s p99 %.3f s"
          % (tok, wall, tok / wall, pct(tt, 50), pct(tt, 99)))
    print("  server     : decode %.2f tok/s over all sequences, prefill %.1f tok/s, %d of %d prompt "
          "tokens reused from cache" % (m["anyllm_generation_tokens_per_second"], m["anyllm_prompt_tokens_per_second"],
                                        m["anyllm_prompt_tokens_total"] - m["anyllm_prompt_tokens_evaluated_total"],
                                        m["anyllm_prompt_tokens_total"]), flush=True)
    print("  batching   : %.2f sequences per decode step on average (%d steps)" % (batch, steps))
    # tokens/s against one client is printed, not checked: on a shared 2-core machine
    # it once came out 61.28 against 61.43; what the server controls is the batching
    check(batch >= 2.0, f"load: 32 clients decode together, {batch:.2f} sequences per step (>= 2)")
    check(m["anyllm_active_sequences"] == 0 and m["anyllm_queue_depth"] == 0,
          "load: afterwards no sequence is active and nothing waits")


# ---- 6. clients that hang up ------------------------------------------------------------------

def wait_idle(limit_s=30):
    t0 = time.time()
    while time.time() - t0 < limit_s:
        m = metrics()
        if m["anyllm_active_sequences"] == 0 and m["anyllm_queue_depth"] == 0:
            return time.time() - t0
        time.sleep(0.05)
    return None


def hang_up(i):
    return sse_request(CHAT, chat_body(f"Tell me a long story about {TOPICS[i % 8]}.", stream=True,
                                       max_tokens=300, seed=i, temperature=1), read_events=1 + i % 3)


def test_disconnects():
    pid = ARGS.pid
    # one alone first: how soon is its sequence freed?
    wait_idle()
    res = sse_request(CHAT, chat_body("Tell me a long story.", stream=True, max_tokens=300), read_events=2)
    freed = wait_idle(10)
    check(res["status"] == 200 and freed is not None and freed < 2.0,
          f"a client hanging up mid-stream frees its sequence in {freed if freed is None else round(freed, 3)} s")
    # warm-up: one round of the same traffic, so that pages touched lazily (KV cache
    # positions, thread stacks, allocator arenas) count in the level before
    with cf.ThreadPoolExecutor(10) as pool:
        list(pool.map(hang_up, range(10)))
    wait_idle()
    time.sleep(0.5)
    before = rss_kb(pid)
    cancelled0 = metrics().get("anyllm_cancelled_total", 0)
    with cf.ThreadPoolExecutor(10) as pool:
        rs = list(pool.map(hang_up, range(100)))
    started = sum(r["status"] == 200 and r["ttft"] is not None for r in rs)
    freed = wait_idle(30)
    m = metrics()
    cancelled = m.get("anyllm_cancelled_total", 0) - cancelled0
    check(started == 100, f"100 clients got a stream and hung up mid-way ({started} started)")
    check(freed is not None and m["anyllm_active_sequences"] == 0 and m["anyllm_queue_depth"] == 0
          and cancelled == 100,
          f"after 100 hang-ups: active sequences {m['anyllm_active_sequences']:.0f}, queue "
          f"{m['anyllm_queue_depth']:.0f}, {cancelled:.0f} sequences cancelled")
    time.sleep(0.5)
    after = rss_kb(pid)
    check(abs(after - before) <= 0.05 * before,
          f"RSS before {before} kB, after {after} kB ({100.0 * (after - before) / before:+.2f}%, within 5%)")
    r = post(CHAT, chat_body(temperature=0, max_tokens=48))
    check(r.status_code == 200 and "Paris" in r.json()["choices"][0]["message"]["content"],
          "the server still answers correctly afterwards")


# ---- 7. the chat page in headless Chromium ---------------------------------------------------

class DevTools:
    """Chrome DevTools protocol over --remote-debugging-pipe: JSON messages separated by
    NUL bytes, commands into the browser's fd 3, answers and events out of its fd 4."""

    def __init__(self, exe, extra_args):
        cmd_r, self.cmd_w = os.pipe()
        self.out_r, out_w = os.pipe()

        def fds():  # in the child: the two pipe ends become fds 3 and 4 (inheritable)
            a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.profile = tempfile.mkdtemp(prefix="anyllm-chromium-")  # no shared browser state
        self.proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu",
                                      "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                                      *extra_args, "about:blank"],
                                     preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self.buf = b""
        self.next_id = 0

    def call(self, method, session=None, timeout=30, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            chunk = os.read(self.out_r, 1 << 20)
            if not chunk:
                raise RuntimeError("the browser closed the pipe")
            self.buf += chunk
        raise RuntimeError(f"{method}: no answer in {timeout} s")

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self.cmd_w)
        os.close(self.out_r)
        shutil.rmtree(self.profile, ignore_errors=True)


def test_chat_page():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("skip: chromium not found (Debian package 'chromium')")
        return "skip"
    chat_page_in(exe, BASE, None)
    chat_page_tools_and_json(exe)
    # with --api-key: the page loads without the key and sends the one typed in its field
    key = "sk-page-" + "p" * 20
    p, base = start_server("--api-key", key, "--parallel", "1")
    try:
        chat_page_in(exe, base, key)
    finally:
        p.terminate()
        p.wait(timeout=30)
    return "ok"


def page_state(exe, url, expression, png):
    """Loads url in headless Chromium, waits until the reply is done, returns expression's value."""
    dt = DevTools(exe, ["--window-size=1000,700", "--hide-scrollbars"])
    try:
        target = dt.call("Target.createTarget", url="about:blank")["targetId"]
        session = dt.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        dt.call("Page.navigate", session, url=url)
        state, t0 = {}, time.time()
        while time.time() - t0 < 120:
            state = dt.call("Runtime.evaluate", session, returnByValue=True, expression=expression)["result"]["value"]
            if state.get("done"):
                break
            time.sleep(0.25)
        shot = dt.call("Page.captureScreenshot", session, format="png")["data"]
        with open(png, "wb") as f:
            f.write(base64.b64decode(shot))
        return state
    finally:
        dt.close()


def chat_page_tools_and_json(exe):
    """The page's options: a tool call shown as a card, a JSON Schema reply indented."""
    q = requests.utils.quote
    url = (BASE + "/?q=" + q("What is the weather in Paris?") + "&tool_choice=required&tools="
           + q(json.dumps([WEATHER])))
    state = page_state(exe, url, (
        "(() => { const a = document.querySelector('.msg.assistant'), c = document.querySelector('.toolcall');"
        " return {done: !!(a && a.dataset.done), name: c ? c.querySelector('.name').textContent : null,"
        " args: c ? c.querySelector('.args').textContent : null,"
        " error: (document.querySelector('.msg.error') || {}).textContent || null}; })()"),
        os.path.join(ARGS.build, "chat-page-tools.png"))
    args = None
    try:
        args = json.loads(state.get("args") or "")
    except ValueError:
        pass
    check(state.get("done") and state.get("name") == "get_weather" and isinstance(args, dict) and "city" in args
          and "\n" in (state.get("args") or "") and not state.get("error"),
          f"chat page shows a tool call as a card: {state}")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"]}
    url = BASE + "/?q=" + q("Describe a person.") + "&format=schema&schema=" + q(json.dumps(schema))
    state = page_state(exe, url, (
        "(() => { const a = document.querySelector('.msg.assistant'), j = document.querySelector('.json');"
        " return {done: !!(a && a.dataset.done), json: j ? j.textContent : null,"
        " invalid: j ? j.classList.contains('invalid') : null}; })()"),
        os.path.join(ARGS.build, "chat-page-json.png"))
    obj = None
    try:
        obj = json.loads(state.get("json") or "")
    except ValueError:
        pass
    check(state.get("done") and isinstance(obj, dict) and set(obj) >= {"name", "age"} and not state.get("invalid")
          and "\n  \"" in (state.get("json") or ""),
          f"chat page shows a JSON Schema reply indented: {state.get('json')!r}")


def chat_page_in(exe, base, key):
    url = base + "/?q=" + requests.utils.quote(QUESTION)
    png = os.path.join(ARGS.build, "chat-page%s.png" % ("-key" if key else ""))
    dt = DevTools(exe, ["--window-size=1000,700", "--hide-scrollbars"])
    try:
        target = dt.call("Target.createTarget", url="about:blank")["targetId"]
        session = dt.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        dt.call("Emulation.setDeviceMetricsOverride", session, width=1000, height=700,
                deviceScaleFactor=1, mobile=False)
        if key:  # what typing the key into the page's field leaves behind
            dt.call("Page.navigate", session, url=base + "/")
            time.sleep(0.5)
            dt.call("Runtime.evaluate", session, expression=f"sessionStorage.setItem('anyllm-key', {key!r})")
        dt.call("Page.navigate", session, url=url)
        state, t0 = {}, time.time()
        while time.time() - t0 < 120:
            state = dt.call("Runtime.evaluate", session, returnByValue=True, expression=(
                "(() => { const a = document.querySelector('.msg.assistant');"
                " return {done: !!(a && a.dataset.done), reply: a ? a.textContent : null,"
                " error: (document.querySelector('.msg.error') || {}).textContent || null,"
                " user: (document.querySelector('.msg.user') || {}).textContent || null}; })()"))["result"]["value"]
            if state.get("done"):
                break
            time.sleep(0.25)
        shot = dt.call("Page.captureScreenshot", session, format="png")["data"]
        with open(png, "wb") as f:
            f.write(base64.b64decode(shot))
        dom = dt.call("Runtime.evaluate", session, returnByValue=True,
                      expression="document.documentElement.outerHTML")["result"]["value"]
        with open(png[:-4] + ".html", "w") as f:
            f.write(dom)
    finally:
        dt.close()
    reply = (state.get("reply") or "").strip()
    how = " with an API key" if key else ""
    check(state.get("user") == QUESTION and state.get("done") and reply and not state.get("error"),
          f"chat page{how} in headless Chromium streams a reply to ?q=: {reply!r} {state.get('error')} "
          f"(screenshot {png})")
    check("Paris" in reply, f"the chat page's reply{how} names Paris")


# ---- tool calls ----------------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 30}},
                   "required": ["zone"]}}}


def streamed_calls(stream):
    """Accumulates a streamed reply: content, tool calls by index, finish_reason."""
    content, calls, finish = [], {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        if ch.delta.content:
            content.append(ch.delta.content)
        for tc in ch.delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = c["id"] or tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        finish = ch.finish_reason or finish
    return "".join(content), [calls[i] for i in sorted(calls)], finish


def test_tools():
    """Tool calls with the openai client: tool_choice required and named (the reply held
    to calls by a grammar), parallel_tool_calls false, streamed deltas against the plain
    reply, a conversation with the calls and their results; replies forced by a grammar
    through the parser (text before a call, the XML form of Qwen3.5), and bad tools."""
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="not-needed", max_retries=0)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model="m", temperature=0, max_tokens=120, messages=ask,
                                       tools=[WEATHER, TIME], tool_choice="required")
    m = r.choices[0].message
    calls = m.tool_calls or []
    args = [json.loads(c.function.arguments) for c in calls]
    check(r.choices[0].finish_reason == "tool_calls" and calls and m.content is None
          and all(c.type == "function" and c.id.startswith("call_") for c in calls)
          and all(c.function.name in ("get_weather", "get_time") for c in calls)
          and all(isinstance(a, dict) for a in args),
          f"tool_choice required: {[(c.function.name, c.function.arguments) for c in calls]}")
    text, scalls, finish = streamed_calls(client.chat.completions.create(
        model="m", temperature=0, max_tokens=120, messages=ask, tools=[WEATHER, TIME],
        tool_choice="required", stream=True))
    check(finish == "tool_calls" and [(c["name"], c["arguments"]) for c in scalls]
          == [(c.function.name, c.function.arguments) for c in calls] and not text
          and all(c["id"] for c in scalls),
          f"streamed tool calls match the plain reply: {scalls}")
    r = client.chat.completions.create(model="m", temperature=0, max_tokens=120, messages=ask,
                                       tools=[WEATHER, TIME], parallel_tool_calls=False,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) == 1 and calls[0].function.name == "get_time"
          and "zone" in json.loads(calls[0].function.arguments),
          f"a named tool, one call: {[(c.function.name, c.function.arguments) for c in calls]}")
    # the call and its result in the conversation, then an answer
    conv = ask + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny", "celsius": 21}'}]
    r = client.chat.completions.create(model="m", temperature=0, max_tokens=40, messages=conv,
                                       tools=[WEATHER])
    check(r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content,
          f"a conversation with a call and its result: {r.choices[0].message.content!r}")
    # tool_choice auto: what the model writes is parsed; a grammar makes it write a call
    forced = ('root ::= "I will check.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
              '\\"arguments\\": {\\"city\\": \\"Rome\\"}}\\n</tool_call>"')
    for stream in (False, True):
        body = {"model": "m", "messages": ask, "tools": [WEATHER], "extra_body": {"grammar": forced},
                "stream": stream}
        if stream:
            text, scalls, finish = streamed_calls(client.chat.completions.create(**body))
        else:
            r = client.chat.completions.create(**body)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
            scalls = [{"name": c.function.name, "arguments": c.function.arguments}
                      for c in r.choices[0].message.tool_calls or []]
        check(text == "I will check." and finish == "tool_calls" and len(scalls) == 1
              and scalls[0]["name"] == "get_weather" and json.loads(scalls[0]["arguments"]) == {"city": "Rome"},
              f"text before a call{' (streamed)' if stream else ''}: {text!r} {scalls}")
    xml = ('root ::= "<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nSan Jos\\u00e9\\n'
           '</parameter>\\n<parameter=unit>\\ncelsius\\n</parameter>\\n</function>\\n</tool_call>"')
    r = client.chat.completions.create(model="m", messages=ask, tools=[WEATHER], extra_body={"grammar": xml})
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) == 1 and json.loads(calls[0].function.arguments) == {"city": "San José", "unit": "celsius"},
          f"the XML form (Qwen3.5) parsed: {[c.function.arguments for c in calls]}")
    r = client.chat.completions.create(model="m", messages=ask, tools=[WEATHER], tool_choice="none",
                                       extra_body={"grammar": forced})
    check(not r.choices[0].message.tool_calls and "<tool_call>" in r.choices[0].message.content
          and r.choices[0].finish_reason == "stop", "tool_choice none: the reply is not parsed")
    # Llama 3's format on a second instance: bare JSON calls, results in the ipython role
    p, base = start_server("--chat-template", "llama3", "--parallel", "1")
    try:
        lclient = openai.OpenAI(base_url=base + "/v1", api_key="not-needed", max_retries=0)
        r = lclient.chat.completions.create(model="m", temperature=0, max_tokens=120, messages=ask,
                                            tools=[WEATHER], tool_choice="required",
                                            parallel_tool_calls=False)
        calls = r.choices[0].message.tool_calls or []
        check(r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
              and all(c.function.name == "get_weather" and "city" in json.loads(c.function.arguments)
                      for c in calls),
              f"llama3 format, tool_choice required: {[(c.function.name, c.function.arguments) for c in calls]}")
        bare = ('root ::= "{\\"name\\": \\"get_weather\\", \\"parameters\\": '
                '{\\"city\\": \\"Oslo\\"}}"')
        text, scalls, finish = streamed_calls(lclient.chat.completions.create(
            model="m", messages=ask, tools=[WEATHER], extra_body={"grammar": bare}, stream=True))
        check(not text and finish == "tool_calls" and len(scalls) == 1
              and json.loads(scalls[0]["arguments"]) == {"city": "Oslo"},
              f"llama3 format, a bare JSON reply streamed as a call: {scalls}")
        r = lclient.chat.completions.create(model="m", temperature=0, max_tokens=20, tools=[WEATHER],
                                            messages=conv)
        check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"),
              f"llama3 format, a conversation with a call and its result: {r.choices[0].message.content!r}")
        rr = post(CHAT, chat_body(max_tokens=2, tools=[WEATHER]), base=base)
        check(rr.status_code == 200, f"llama3 format takes tools: {rr.status_code}")
    finally:
        p.terminate()
        p.wait(timeout=30)
    mistral_tools(ask, conv)
    bad = [("a tool not a function", {"tools": [{"type": "web_search"}]}, "only function tools"),
           ("a tool without a name", {"tools": [{"type": "function", "function": {}}]}, "name"),
           ("a bad tool name", {"tools": [{"type": "function", "function": {"name": "a b"}}]}, "must be"),
           ("two tools of one name", {"tools": [WEATHER, WEATHER]}, "both named"),
           ("parameters not an object", {"tools": [{"type": "function", "function": {
               "name": "f", "parameters": "x"}}]}, "parameters"),
           ("an unknown tool_choice", {"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
           ("tool_choice naming no tool", {"tools": [WEATHER], "tool_choice": {
               "type": "function", "function": {"name": "nope"}}}, "not among"),
           ("tool_choice without tools", {"tool_choice": "required"}, "no tools"),
           ("required with an unsupported schema", {"tool_choice": "required", "tools": [
               {"type": "function", "function": {"name": "f", "parameters": {
                   "type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}}}]},
            "uniqueItems"),
           ("required and response_format", {"tools": [WEATHER], "tool_choice": "required",
                                             "response_format": {"type": "json_object"}}, "one of them"),
           ("tool_calls on a user message", {"messages": [{"role": "user", "content": "x", "tool_calls": [
               {"function": {"name": "f", "arguments": "{}"}}]}]}, "only assistant"),
           ("parallel_tool_calls not a boolean", {"tools": [WEATHER], "parallel_tool_calls": "yes"},
            "parallel_tool_calls")]
    for what, extra, expect in bad:
        body = chat_body(max_tokens=2)
        body.update(extra)
        rr = post(CHAT, body)
        msg = rr.json().get("error", {}).get("message", "") if rr.status_code == 400 else ""
        check(rr.status_code == 400 and expect in msg, f"{what}: {rr.status_code} {msg[:100]!r}")


# ---- OpenAI Responses ------------------------------------------------------------------------------

def test_responses():
    """/v1/responses with the openai client: text input with instructions, the same
    streamed (the final response from the event stream), items with a function_call and
    its output, tool_choice required with function tools (function_call items), structured
    output through the client's parse helper (a pydantic model), previous_response_id
    (the conversation continues; an unknown id is a 404), and bad requests."""
    import pydantic
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="not-needed", max_retries=0)
    r = client.responses.create(model="m", input=QUESTION, instructions="Answer in one sentence.",
                                temperature=0, max_output_tokens=48)
    check(r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
          and "Paris" in r.output_text and r.usage.input_tokens > 0 and r.usage.output_tokens > 0,
          f"responses: {r.output_text!r} {r.status}")
    events, final = [], None
    for ev in client.responses.create(model="m", input=QUESTION, instructions="Answer in one sentence.",
                                      temperature=0, max_output_tokens=48, stream=True):
        events.append(ev.type)
        if ev.type == "response.completed":
            final = ev.response
    deltas = events.count("response.output_text.delta")
    check(final is not None and final.output_text == r.output_text and deltas > 1
          and events[0] == "response.created" and events[-1] == "response.completed",
          f"responses streamed: {deltas} deltas, {len(events)} events, the same text")
    fn = {"type": "function", "name": "get_weather", "description": WEATHER["function"]["description"],
          "parameters": WEATHER["function"]["parameters"]}
    r = client.responses.create(model="m", input="What is the weather in Paris?", tools=[fn],
                                tool_choice="required", temperature=0, max_output_tokens=120)
    calls = [o for o in r.output if o.type == "function_call"]
    check(calls and all(c.name == "get_weather" and "city" in json.loads(c.arguments)
                        and c.call_id.startswith("call_") for c in calls),
          f"responses function_call items: {[(c.name, c.arguments) for c in calls]}")
    final, argdone = None, []
    for ev in client.responses.create(model="m", input="What is the weather in Paris?", tools=[fn],
                                      tool_choice="required", temperature=0, max_output_tokens=120,
                                      stream=True):
        if ev.type == "response.function_call_arguments.done":
            argdone.append(ev.arguments)
        if ev.type == "response.completed":
            final = ev.response
    scalls = [o for o in (final.output if final else []) if o.type == "function_call"]
    check([(c.name, c.arguments) for c in scalls] == [(c.name, c.arguments) for c in calls]
          and argdone == [c.arguments for c in calls],
          f"responses function calls streamed: {[(c.name, c.arguments) for c in scalls]}")
    items = [{"role": "user", "content": "What is the weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
              "arguments": '{"city": "Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}]
    r = client.responses.create(model="m", input=items, tools=[fn], temperature=0, max_output_tokens=30)
    check(r.status in ("completed", "incomplete") and r.output_text,
          f"responses with a function_call and its output: {r.output_text!r}")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    r = client.responses.parse(model="m", input="Describe a person.", text_format=Person,
                               temperature=0, max_output_tokens=100)
    p = r.output_parsed
    check(isinstance(p, Person) and p.name and isinstance(p.age, int),
          f"responses.parse with a pydantic model: {p!r}")
    first = client.responses.create(model="m", input="My name is Ada. Reply with OK.", temperature=0,
                                    max_output_tokens=8)
    nxt = client.responses.create(model="m", input="What is my name?", previous_response_id=first.id,
                                  temperature=0, max_output_tokens=20)
    check(nxt.usage.input_tokens > first.usage.input_tokens + 5 and nxt.previous_response_id == first.id,
          f"previous_response_id carries the conversation: {first.usage.input_tokens} then "
          f"{nxt.usage.input_tokens} input tokens, {nxt.output_text!r}")
    long_ins = "Answer kindly and briefly. " * 30
    r1 = client.responses.create(model="m", input="Hi", instructions=long_ins, temperature=0,
                                 max_output_tokens=4)
    r2 = client.responses.create(model="m", input="Hi again", previous_response_id=r1.id,
                                 temperature=0, max_output_tokens=4)
    check(r2.usage.input_tokens < r1.usage.input_tokens,
          f"instructions do not carry over to the next response: {r1.usage.input_tokens} then "
          f"{r2.usage.input_tokens} input tokens")
    sid = None
    for ev in client.responses.create(model="m", input="My name is Ada. Reply with OK.", temperature=0,
                                      max_output_tokens=8, stream=True):
        if ev.type == "response.completed" or ev.type == "response.incomplete":
            sid = ev.response.id
    nxt = client.responses.create(model="m", input="What is my name?", previous_response_id=sid,
                                  temperature=0, max_output_tokens=20)
    check(sid and nxt.usage.input_tokens > first.usage.input_tokens + 5,
          f"previous_response_id of a streamed response: {nxt.usage.input_tokens} input tokens")
    unstored = client.responses.create(model="m", input="x", store=False, max_output_tokens=2)
    rr = post("/v1/responses", {"model": "m", "input": "y", "previous_response_id": unstored.id,
                                "max_output_tokens": 2})
    check(rr.status_code == 404 and not unstored.store, f"store false keeps nothing: {rr.status_code}")
    for what, body, status, expect in (
            ("an unknown previous_response_id", {"input": "x", "previous_response_id": "resp_nope"}, 404,
             "not held"),
            ("input missing", {}, 400, "input is required"),
            ("a web_search tool", {"input": "x", "tools": [{"type": "web_search"}]}, 400, "web_search"),
            ("an image part", {"input": [{"role": "user", "content": [{"type": "input_image",
                                                                        "image_url": "x"}]}]}, 400,
             "input_image"),
            ("an unsupported schema", {"input": "x", "text": {"format": {"type": "json_schema", "name": "s",
                                                                         "schema": {"type": "string",
                                                                                    "format": "email"}}}},
             400, "text.format: format 'email'")):
        body = {"model": "m", "max_output_tokens": 4, **body}
        rr = post("/v1/responses", body)
        msg = rr.json().get("error", {}).get("message", "")
        check(rr.status_code == status and expect in msg, f"responses, {what}: {rr.status_code} {msg[:90]!r}")


# ---- Anthropic Messages ----------------------------------------------------------------------------

def test_anthropic():
    """/v1/messages with the anthropic client: a plain message (system, stop_reason, usage),
    streaming through the client's stream helper (the final message equal to the plain
    one), tools with tool_choice any and tool (tool_use blocks, input objects), a
    conversation with tool_use and tool_result blocks, and Anthropic-shaped errors."""
    import anthropic
    client = anthropic.Anthropic(base_url=BASE, api_key="not-needed", max_retries=0)
    ask = [{"role": "user", "content": QUESTION}]
    greedy = {"temperature": 0}  # the client no longer sends temperature itself
    m = client.messages.create(model="m", max_tokens=48, extra_body=greedy, messages=ask,
                               system="You answer in one sentence.")
    text = "".join(b.text for b in m.content if b.type == "text")
    check(m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
          and m.stop_reason in ("end_turn", "max_tokens") and "Paris" in text
          and m.usage.input_tokens > 0 and m.usage.output_tokens > 0,
          f"anthropic client message: {text!r} {m.stop_reason}")
    with client.messages.stream(model="m", max_tokens=48, extra_body=greedy, messages=ask,
                                system="You answer in one sentence.") as st:
        pieces = [t for t in st.text_stream]
        final = st.get_final_message()
    ftext = "".join(b.text for b in final.content if b.type == "text")
    check("".join(pieces) == text == ftext and final.stop_reason == m.stop_reason
          and final.usage.output_tokens == m.usage.output_tokens,
          f"anthropic stream: {len(pieces)} text deltas give the same message")
    for stream in (False, True):
        kw = dict(model="m", max_tokens=48, extra_body=greedy, messages=ask,
                  system="You answer in one sentence.", stop_sequences=["Paris"])
        if stream:
            with client.messages.stream(**kw) as st:
                sm = st.get_final_message()
        else:
            sm = client.messages.create(**kw)
        stext = "".join(b.text for b in sm.content if b.type == "text")
        check(sm.stop_reason == "stop_sequence" and sm.stop_sequence == "Paris" and "Paris" not in stext,
              f"anthropic stop_sequences{' (streamed)' if stream else ''}: {sm.stop_reason} "
              f"{sm.stop_sequence!r} {stext!r}")
    weather = {"name": "get_weather", "description": WEATHER["function"]["description"],
               "input_schema": WEATHER["function"]["parameters"]}
    asks = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = client.messages.create(model="m", max_tokens=120, extra_body=greedy, messages=asks,
                               tools=[weather], tool_choice={"type": "any"})
    uses = [b for b in m.content if b.type == "tool_use"]
    check(m.stop_reason == "tool_use" and uses and all(u.name == "get_weather" and isinstance(u.input, dict)
                                                       and "city" in u.input and u.id.startswith("toolu_")
                                                       for u in uses),
          f"anthropic tool_choice any: {[(u.name, u.input) for u in uses]}")
    with client.messages.stream(model="m", max_tokens=120, extra_body=greedy, messages=asks, tools=[weather],
                                tool_choice={"type": "tool", "name": "get_weather",
                                             "disable_parallel_tool_use": True}) as st:
        final = st.get_final_message()
    suses = [b for b in final.content if b.type == "tool_use"]
    check(final.stop_reason == "tool_use" and len(suses) == 1 and suses[0].input == uses[0].input,
          f"anthropic streamed tool_use: {[(u.name, u.input) for u in suses]}")
    conv = asks + [{"role": "assistant", "content": [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "sunny, 21 C"}]},
                                     {"type": "text", "text": "So?"}]}]
    m = client.messages.create(model="m", max_tokens=30, extra_body=greedy, messages=conv, tools=[weather])
    check(m.stop_reason in ("end_turn", "max_tokens", "tool_use") and m.content,
          f"anthropic conversation with tool_use and tool_result: {m.content[0]}")
    person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    m = client.messages.create(model="m", max_tokens=100, extra_body=greedy,
                               messages=[{"role": "user", "content": "Describe a person."}],
                               output_config={"format": {"type": "json_schema", "schema": person}})
    out = json.loads(m.content[0].text)
    check(set(out) == {"name", "age"} and 0 <= out["age"] <= 120 and m.stop_reason == "end_turn",
          f"anthropic output_config.format json_schema: {out}")
    for what, body, status, expect in (
            ("max_tokens missing", {"model": "m", "messages": ask}, 400, "max_tokens"),
            ("an image block", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
             400, "image"),
            ("a server tool", {"model": "m", "max_tokens": 5, "messages": ask,
                               "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400, "server tool"),
            ("role system in messages", {"model": "m", "max_tokens": 5,
                                         "messages": [{"role": "system", "content": "x"}]}, 400, "user or assistant")):
        r = post("/v1/messages", body)
        j = r.json()
        check(r.status_code == status and j.get("type") == "error"
              and j["error"]["type"] == "invalid_request_error" and expect in j["error"]["message"],
              f"anthropic error, {what}: {r.status_code} {j}")
    try:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": []}],
                               tool_choice={"type": "sometimes"})
        check(False, "anthropic client gets a BadRequestError")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400, f"anthropic client gets a BadRequestError: {e.message[:80]}")


# ---- structured output ---------------------------------------------------------------------------

def test_structured():
    """response_format: json_object and 200 random JSON Schemas (tests/server/schemas.py),
    each answer validated with jsonschema; unsupported schema features are 400s."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import schemas

    def post_json(body):
        r = post(CHAT, body, timeout=300)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    st, r = post_json(chat_body("Give me a JSON object describing a cat with name and age.",
                                max_tokens=300, temperature=0, response_format={"type": "json_object"}))
    text = r["choices"][0]["message"]["content"] if st == 200 else ""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    check(st == 200 and isinstance(obj, dict) and r["choices"][0]["finish_reason"] == "stop",
          f"json_object gives an object: {text[:80]!r}")
    for what, rf, code in (("type unknown", {"type": "yaml"}, 400),
                           ("schema not an object", {"type": "json_schema", "json_schema": {"schema": "x"}}, 400),
                           ("json_schema missing", {"type": "json_schema"}, 400),
                           ("not an object", "json", 400)):
        st, r = post_json(chat_body(max_tokens=2, response_format=rf))
        check(st == code and isinstance(r, dict) and "error" in r, f"response_format {what}: {st}")
    st, r = post_json(chat_body(max_tokens=2, grammar="root ::= x"))
    check(st == 400 and "not defined" in r["error"]["message"], f"a grammar with an undefined rule: {st}")
    st, r = post_json(chat_body(max_tokens=40, temperature=0, grammar='root ::= "yes" | "no"'))
    check(st == 200 and r["choices"][0]["message"]["content"] in ("yes", "no")
          and r["choices"][0]["finish_reason"] == "stop",
          f"grammar yes|no: {r['choices'][0]['message']['content'] if st == 200 else st!r}")
    schemas.run(post_json, check)


# ---- main ----------------------------------------------------------------------------------------

def test_models():
    """Several models in one server: tests/server/multimodel.py."""
    import multimodel
    return multimodel.run(sys.modules[__name__])


def main():
    global ARGS, BASE
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--timeout", type=int, default=10, help="the server's --timeout")
    ap.add_argument("--load-tokens", type=int, default=16)
    ap.add_argument("--only", default="", help="comma-separated parts to run")
    ARGS = ap.parse_args()
    BASE = f"http://127.0.0.1:{ARGS.port}"
    parts = [("routes", test_routes), ("router", test_router_metrics),
             ("openai", test_openai_client), ("structured", test_structured), ("tools", test_tools),
             ("responses", test_responses), ("anthropic", test_anthropic), ("bad", test_bad_input),
             ("auth", test_api_key_and_queue), ("harmony", test_harmony),
             ("browser", test_browser_and_head),
             ("habits", test_client_habits), ("slowloris", test_slowloris), ("startup", test_startup),
             ("loading", test_loading), ("drain", test_drain), ("graceful", test_graceful_drain),
             ("load", test_load), ("disconnect", test_disconnects),
             ("page", test_chat_page), ("models", test_models), ("spec", test_spec)]
    only = set(filter(None, ARGS.only.split(",")))
    skipped = 0
    for name, fn in parts:
        if only and name not in only:
            continue
        t0 = time.time()
        print(f"-- {name}", flush=True)
        try:
            if fn() == "skip":
                skipped += 1
        except Exception as e:  # noqa: BLE001 - a crash in one part is a failure, not the end
            check(False, f"{name}: {e!r}")
        print(f"-- {name}: {time.time() - t0:.1f} s", flush=True)
    check(healthy(), "the server is healthy at the end")
    line = f"{RESULTS['pass']} passed, {RESULTS['fail']} failed"
    print(line + (f", {skipped} skipped" if skipped else ""))
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
