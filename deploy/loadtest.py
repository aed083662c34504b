#!/usr/bin/env python3
"""loadtest.py: streamed chat requests against an OpenAI-compatible server or a balancer
in front of several, with the Python standard library only.

  python3 deploy/loadtest.py URL [--clients 48] [--requests 3] [--max-tokens 16]
  python3 deploy/loadtest.py --report [-m MODEL] [--clients 48] [--requests 3] ...

With URL: each client sends its requests one after another (a chat, streamed, a seed of
its own), then one summary: requests sent, completed and failed by cause, time to first
token (p50, p99), tokens per second over the wall time, and how many each replica
answered (X-Replica).

--report: starts clusters with deploy/local-cluster.sh (free ports, a folder of its own)
and sends the same loads to one replica directly, to one replica through nginx, and to
three replicas through nginx, and, as a control, to one replica with as many sequences
as the three together (--wide-options), then prints one table: the load given (by default 48
clients x 3 requests, which queues) and a light one (--light, 4 clients x 5 requests,
where the time to first token is mostly prefill, so that the balancer's own cost shows).

A request fails as: "refused" (no connection to URL), "status N" (an HTTP error before
any event), "cut" (the stream ended without data: [DONE]: its replica died), "error
event" (the server ended the stream with an error), "timeout" (no byte for --timeout
seconds: a hang), "malformed" (an event that is not JSON).
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

TOPICS = ["the sea", "a cat", "the moon", "bread", "rain", "a city", "music", "trees",
          "snow", "a bridge", "coffee", "a library"]
HERE = os.path.dirname(os.path.abspath(__file__))


def chat_body(i, max_tokens, messages=None):
    return {"model": "any", "stream": True, "max_tokens": max_tokens, "temperature": 0.7,
            "seed": i, "stream_options": {"include_usage": True},
            "messages": messages or [{"role": "user",
                                      "content": f"Write one sentence about {TOPICS[i % len(TOPICS)]}."}]}


def new_result():
    return {"status": None, "replica": None, "upstream": None, "retry_after": None,
            "t_head": None, "ttft": None, "t_total": None, "done": False, "finish": None,
            "tokens": 0, "cached": 0, "text": "", "error_event": None, "error": None,
            "cause": None}


def read_events(resp, res, t0, on_text):
    """Reads the SSE body into res until [DONE] or the end of the connection."""
    data = []
    while True:
        line = resp.readline()
        if not line:
            raise http.client.IncompleteRead(b"")  # ended without [DONE]
        line = line.decode().rstrip("\r\n")
        if line.startswith("data: "):
            data.append(line[6:])
            continue
        if line or not data:
            continue
        event, data = "\n".join(data), []
        if event == "[DONE]":
            res["done"] = True
            return
        obj = json.loads(event)
        if "error" in obj:
            res["error_event"] = obj["error"].get("message")
            continue
        if obj.get("usage"):
            res["tokens"] = obj["usage"].get("completion_tokens", 0)
            res["cached"] = (obj["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        for c in obj.get("choices") or []:
            text = (c.get("delta") or {}).get("content")
            if text:
                res["text"] += text
                if res["ttft"] is None:
                    res["ttft"] = time.time() - t0
                    if on_text:
                        on_text(res)
            if c.get("finish_reason"):
                res["finish"] = c["finish_reason"]


def stream_chat(url, body, timeout=60, headers=None, on_text=None):
    """POSTs a streamed chat to URL (a base such as http://127.0.0.1:8080) and reads it
    to the end; returns a result dict (see new_result), its "cause" None if it completed."""
    u = urllib.parse.urlsplit(url)
    res = new_result()
    t0 = time.time()
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    try:
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=h)
        except OSError as e:
            res["error"], res["cause"] = repr(e), "refused"
            return res
        resp = conn.getresponse()
        res["t_head"] = time.time() - t0
        res["status"] = resp.status
        res["replica"] = resp.getheader("X-Replica")
        res["upstream"] = resp.getheader("X-Anyllm-Upstream")
        res["retry_after"] = resp.getheader("Retry-After")
        if resp.status != 200:
            res["error"] = resp.read()[:300].decode(errors="replace")
            res["cause"] = f"status {resp.status}"
            return res
        read_events(resp, res, t0, on_text)
    except (socket.timeout, TimeoutError) as e:
        res["error"], res["cause"] = repr(e), "timeout"
    except json.JSONDecodeError as e:
        res["error"], res["cause"] = repr(e), "malformed"
    except (http.client.HTTPException, OSError, ValueError) as e:
        # a connection that ends in the middle of a chunked body: the replica died
        res["error"] = repr(e)
        res["cause"] = "cut" if res["status"] == 200 else "refused"
    finally:
        res["t_total"] = time.time() - t0
        conn.close()
    if res["cause"] is None and res["error_event"]:
        res["cause"] = "error event"
    elif res["cause"] is None and res["finish"] not in ("stop", "length"):
        res["cause"] = "no finish_reason"
    return res


def run_load(url, clients, requests, max_tokens, timeout=60, on_result=None, on_text=None):
    """clients threads, each sending requests streamed chats one after another; returns
    (results, wall seconds). on_result(res) is called as each one ends (from its thread)."""
    results = [None] * (clients * requests)

    def client(c):
        for k in range(requests):
            i = c * requests + k
            res = stream_chat(url, chat_body(i, max_tokens), timeout=timeout, on_text=on_text)
            results[i] = res
            if on_result:
                on_result(res)
    t0 = time.time()
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.time() - t0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def summarize(results, wall):
    causes = {}
    for r in results:
        if r["cause"]:
            causes[r["cause"]] = causes.get(r["cause"], 0) + 1
    ok = [r for r in results if not r["cause"]]
    replicas = {}
    for r in ok:
        replicas[r["replica"]] = replicas.get(r["replica"], 0) + 1
    ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]
    tokens = sum(r["tokens"] for r in ok)
    return {"sent": len(results), "completed": len(ok), "failed": len(results) - len(ok),
            "causes": causes, "ttft_p50": pct(ttfts, 50), "ttft_p99": pct(ttfts, 99),
            "tokens": tokens, "wall": wall, "tok_s": tokens / wall if wall > 0 else 0.0,
            "replicas": replicas}


def summary_line(s):
    causes = ", ".join(f"{n} {c}" for c, n in sorted(s["causes"].items())) or "none"
    return (f"sent {s['sent']}, completed {s['completed']}, failed {s['failed']} ({causes}); "
            f"TTFT p50 {s['ttft_p50']:.3f} s, p99 {s['ttft_p99']:.3f} s; {s['tokens']} tokens in "
            f"{s['wall']:.1f} s = {s['tok_s']:.1f} tok/s; by replica "
            + ", ".join(f"{k}: {v}" for k, v in sorted(s["replicas"].items(), key=str)))


# ---- --report: the same load on three setups ---------------------------------------------------

def cluster(n, args, folder, options=None):
    """Starts n replicas with local-cluster.sh; returns (balancer URL, replica URLs)."""
    threads = args.threads_one if n == 1 else args.threads_each
    cmd = ["sh", os.path.join(HERE, "local-cluster.sh"), "start", str(n), "-p", "0", "-d", folder,
           "-t", str(threads), "-o", options or args.serve_options]
    if args.model:
        cmd[5:5] = ["-m", args.model]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"loadtest.py: cannot start {n} replicas: {out.stderr.strip()}")
    url = out.stdout.strip().splitlines()[-1]
    ports = [open(os.path.join(folder, f"replica-{i}.port")).read().strip() for i in range(1, n + 1)]
    return url, [f"http://127.0.0.1:{p}" for p in ports]


def stop(folder):
    subprocess.run(["sh", os.path.join(HERE, "local-cluster.sh"), "stop", "-d", folder],
                   capture_output=True, timeout=300)


def measure(name, url, args, rows):
    """Both loads against url, each after a warm-up request (the first one pays for page
    faults); appends (setup, load, summary) to rows."""
    for load, clients, requests in ((f"{args.clients}x{args.requests}", args.clients, args.requests),
                                    (f"{args.light[0]}x{args.light[1]}", *args.light)):
        stream_chat(url, chat_body(0, 2))
        results, wall = run_load(url, clients, requests, args.max_tokens, args.timeout)
        s = summarize(results, wall)
        print(f"  {name}, {load}: " + summary_line(s), flush=True)
        rows.append((name, load, s))


def report(args):
    print(f"clients x requests each, streamed chats of max_tokens {args.max_tokens}; replicas "
          f"`anyllm serve {args.serve_options}`; {os.cpu_count()} cores", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        try:
            url, replicas = cluster(1, args, folder)
            measure(f"1 replica (-t {args.threads_one}), direct", replicas[0], args, rows)
            measure(f"1 replica (-t {args.threads_one}), nginx", url, args, rows)
        finally:
            stop(folder)
    with tempfile.TemporaryDirectory() as folder:
        try:
            url, _ = cluster(3, args, folder)
            measure(f"3 replicas (-t {args.threads_each} each), nginx", url, args, rows)
        finally:
            stop(folder)
    # the control: one replica with as many sequences as the three together
    with tempfile.TemporaryDirectory() as folder:
        try:
            _, replicas = cluster(1, args, folder, args.wide_options)
            measure(f"1 replica (-t {args.threads_one}, {args.wide_options}), direct", replicas[0], args, rows)
        finally:
            stop(folder)
    print("\n| setup | load | sent | completed | failed | TTFT p50 | TTFT p99 | tokens/s |\n"
          "|---|---|---|---|---|---|---|---|")
    for name, load, s in rows:
        print(f"| {name} | {load} | {s['sent']} | {s['completed']} | {s['failed']} | "
              f"{s['ttft_p50']:.3f} s | {s['ttft_p99']:.3f} s | {s['tok_s']:.1f} |")
    return 0 if all(s["failed"] == 0 for _, _, s in rows) else 1


def main():
    ap = argparse.ArgumentParser(description="streamed chat load against anyllm serve or a balancer")
    ap.add_argument("url", nargs="?", help="base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--report", action="store_true", help="start clusters and compare setups")
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--requests", type=int, default=3, help="requests per client, one after another")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=60, help="seconds without a byte before a request fails")
    ap.add_argument("-m", "--model", help="--report: the model (default: local-cluster.sh's)")
    ap.add_argument("--threads-one", type=int, default=os.cpu_count() or 1,
                    help="--report: threads of the single replica (default: all cores)")
    ap.add_argument("--threads-each", type=int, default=1, help="--report: threads of each of 3 replicas")
    ap.add_argument("--light", type=int, nargs=2, default=[4, 5], metavar=("CLIENTS", "REQUESTS"),
                    help="--report: the light load (default 4 clients x 5 requests)")
    # a queue for every client, so that the single replica refuses none (429) either
    ap.add_argument("--serve-options", default="--parallel 4 --queue 64",
                    help="--report: options for anyllm serve")
    ap.add_argument("--wide-options", default="--parallel 12 --queue 64",
                    help="--report: options of the control, one replica as wide as three")
    args = ap.parse_args()
    if args.report:
        return report(args)
    if not args.url:
        ap.error("give a URL or --report")
    results, wall = run_load(args.url, args.clients, args.requests, args.max_tokens, args.timeout)
    s = summarize(results, wall)
    print(summary_line(s))
    return 0 if s["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
