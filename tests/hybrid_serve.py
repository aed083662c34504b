"""hybrid_serve.py PORT: anyllm serve on a model with a recurrent state (hybrid.sh starts
it with two slots). A state goes back only to the positions where it was checkpointed,
so the server checkpoints before each prompt's last token and at each job's end; this
checks that a second request reuses them (usage.prompt_tokens_details.cached_tokens),
that two requests run at once, and that a stream whose client hangs up is cancelled and
leaves the slot's state usable. Prints one "ok"/"FAIL" line per check; exits 1 on any
failure. Standard library only."""
import json
import socket
import sys
import threading
import time
import urllib.request

BASE = f"http://127.0.0.1:{int(sys.argv[1])}"
failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    failures += 0 if cond else 1


def post(body):
    req = urllib.request.Request(BASE + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def metrics():
    with urllib.request.urlopen(BASE + "/metrics", timeout=10) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def chat(messages, **kw):
    return post(dict({"messages": messages, "max_tokens": 8, "temperature": 0}, **kw))


def cached(r):
    return r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def text(r):
    return r["choices"][0]["message"]["content"]


def hang_up(body):
    """Streams body, reads until the first text event, and resets the connection."""
    payload = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
    got = b""
    while b'"content"' not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    return b'"content"' in got


first = [{"role": "user", "content": "hi there, tell me about the sea"}]
r1 = chat(first)
r2 = chat(first)
n1 = r1["usage"]["prompt_tokens"]
check(text(r1) == text(r2), "the same request twice, the same reply")
check(cached(r1) == 0 and cached(r2) == n1 - 1,
      f"the second reuses the checkpoint before the prompt's last token: cached {cached(r2)} "
      f"of {n1} (the first {cached(r1)})")

turn2 = first + [{"role": "assistant", "content": text(r1)}, {"role": "user", "content": "more"}]
r3 = chat(turn2)
check(cached(r3) >= n1 - 1 and r3["usage"]["prompt_tokens"] > n1,
      f"the next turn of the conversation reuses a checkpoint: cached {cached(r3)} of "
      f"{r3['usage']['prompt_tokens']}")

# two at once, each on its slot
results = [None, None]


def one(i):
    results[i] = chat([{"role": "user", "content": f"question number {i} about rivers"}],
                      max_tokens=24)


threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(all(r and r["choices"][0]["finish_reason"] for r in results),
      "two requests at once both finish")

# a stream whose client hangs up: long enough (no end before 300 tokens, checked first
# without a stream) that the server is still writing when the connection goes
long_body = {"messages": [{"role": "user", "content": "count"}], "max_tokens": 300,
             "temperature": 0}
r = post(long_body)
check(r["choices"][0]["finish_reason"] == "length",
      f"the long request runs to max_tokens ({r['choices'][0]['finish_reason']})")
c0 = metrics().get("anyllm_cancelled_total", 0)
check(hang_up(dict(long_body, stream=True)), "the stream sent text before the hang-up")
m = {}
for _ in range(100):
    m = metrics()
    if m.get("anyllm_active_sequences", 1) == 0:
        break
    time.sleep(0.1)
check(m.get("anyllm_cancelled_total", 0) == c0 + 1 and m.get("anyllm_active_sequences") == 0,
      f"the hung-up stream is cancelled ({m.get('anyllm_cancelled_total', 0) - c0:.0f}) and "
      f"its slot freed")
r4 = chat(first)
check(text(r4) == text(r1), "after the cancel the first request still gets its reply")
sys.exit(1 if failures else 0)
