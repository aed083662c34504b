"""The cluster test, run by tests/cluster.sh: three `anyllm serve` replicas behind nginx,
started and stopped with deploy/local-cluster.sh, driven with deploy/loadtest.py's
client (Python standard library only).

  1. start: the last line is the balancer's URL; `status` shows three ready replicas;
  2. load with a replica killed: 48 streaming clients x 3 requests through nginx, one
     replica SIGKILLed a third of the way; every request that had not started streaming
     completes (nginx retries it on another replica), those streaming from the killed
     one end without [DONE] within the client timeout (no hang); the killed replica is
     restarted (`local-cluster.sh restart`) and serves again, as its own /metrics shows;
  3. sessions: a 5-turn chat with one X-Session-Id stays on one replica (X-Replica), and
     that replica's prefix-cache hits grow every turn; requests with one X-Prefix-Hash
     land on one replica too;
  4. drain: streams sent straight to one replica, then SIGTERM: new requests to it get
     503 with Retry-After, requests through nginx still all complete, the streams end
     with [DONE], the replica exits 0;
  5. stop: every replica and nginx are gone.

Prints one line per check and ends with "N passed, M failed".
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
import loadtest  # noqa: E402

ARGS = None
RESULTS = {"pass": 0, "fail": 0}
CLIENT_TIMEOUT = 30  # seconds without a byte before a client gives up: a hang fails the test


def check(cond, what):
    RESULTS["pass" if cond else "fail"] += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    return cond


def cluster(*args, timeout=300):
    return subprocess.run(["sh", ARGS.script, *args, "-d", ARGS.dir], capture_output=True, text=True,
                          timeout=timeout)


def state_file(name):
    try:
        with open(os.path.join(ARGS.dir, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def replica_url(i):
    return f"http://127.0.0.1:{state_file(f'replica-{i}.port')}"


def get(url, timeout=10):
    """(status, headers, body text) of a GET, errors included."""
    try:
        r = urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as e:
        r = e
    return r.status, r.headers, r.read().decode()


def metrics(url):
    out = {}
    for line in get(url + "/metrics")[2].splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def chat_requests(m):
    return m.get('anyllm_requests_total{endpoint="/v1/chat/completions",status="200"}', 0)


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def wait_for(cond, limit_s, step=0.1):
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if cond():
            return True
        time.sleep(step)
    return cond()


# ---- 1. start --------------------------------------------------------------------------------

def test_start():
    t0 = time.time()
    r = cluster("start", "3", "-m", ARGS.model, "-p", "0", "-t", "1",
                "-o", "--parallel 4 --drain-timeout 30", timeout=180)
    lines = r.stdout.strip().splitlines()
    ok = check(r.returncode == 0 and lines and re.fullmatch(r"http://127\.0\.0\.1:\d+", lines[-1]),
               f"local-cluster.sh start 3 prints the balancer's URL last ({time.time() - t0:.1f} s): "
               f"{lines[-1] if lines else r.stderr.strip()!r}")
    if not ok:
        return None
    st = cluster("status").stdout.strip().splitlines()
    want = [rf"replica {i} pid \d+ port \d+ health ready" for i in (1, 2, 3)] + [r"balancer pid \d+ http://\S+"]
    check(len(st) == 4 and all(re.fullmatch(w, s) for w, s in zip(want, st)),
          f"status: one line per replica (pid, port, health) and the balancer: {st}")
    ids = [json.loads(get(replica_url(i) + "/health")[2])["replica"] for i in (1, 2, 3)]
    check(len(set(ids)) == 3, f"each replica names itself (X-Replica): {ids}")
    return lines[-1]


# ---- 2. load with a replica killed -----------------------------------------------------------

def test_kill(url):
    victim = 2
    pid = int(state_file(f"replica-{victim}.pid"))
    victim_id = json.loads(get(replica_url(victim) + "/health")[2])["replica"]
    n_total, kill_at = ARGS.clients * ARGS.requests, ARGS.clients * ARGS.requests // 3
    done, lock, killed = [], threading.Lock(), threading.Event()

    def on_result(res):
        with lock:
            done.append(res)
            if len(done) == kill_at:
                os.kill(pid, signal.SIGKILL)
                killed.set()
    restarted = {}

    def restart():  # while the load goes on: nginx finds it again after fail_timeout
        killed.wait()
        wait_for(lambda: state_file(f"replica-{victim}.exit") is not None, 10)
        restarted["exit"] = state_file(f"replica-{victim}.exit")
        time.sleep(1)
        r = cluster("restart", str(victim))
        restarted["rc"], restarted["out"] = r.returncode, (r.stdout + r.stderr).strip()
    t = threading.Thread(target=restart)
    t.start()
    results, wall = loadtest.run_load(url, ARGS.clients, ARGS.requests, ARGS.max_tokens,
                                      timeout=CLIENT_TIMEOUT, on_result=on_result)
    t.join(timeout=180)
    s = loadtest.summarize(results, wall)
    print(f"  load through nginx, replica {victim} killed after {kill_at} of {n_total} requests: "
          + loadtest.summary_line(s), flush=True)
    check(restarted.get("exit") == "137", f"the killed replica's exit status is {restarted.get('exit')} (SIGKILL)")
    lost = [r for r in results if r["cause"] and not (r["cause"] == "cut" and r["status"] == 200)]
    check(not lost, f"no request that had not started streaming is lost ({len(lost)}: "
          f"{[(r['cause'], r['status'], r['error']) for r in lost][:3]})")
    cut = [r for r in results if r["cause"] == "cut"]
    check(all(r["replica"] == victim_id for r in cut) and len(cut) <= 4,
          f"only streams of the killed replica ({victim_id}, 4 sequences) are cut: {len(cut)}")
    check(all(not r["done"] and r["t_total"] < CLIENT_TIMEOUT for r in cut),
          f"each cut stream ends without [DONE], none hangs (longest "
          f"{max([r['t_total'] for r in cut] or [0]):.1f} s, client timeout {CLIENT_TIMEOUT} s)")
    retried = [r for r in results if r["upstream"] and ", " in r["upstream"] and not r["cause"]]
    check(len(retried) >= 1, f"nginx retried {len(retried)} requests on another replica "
          f"(e.g. {retried[0]['upstream'] if retried else None})")
    check(restarted.get("rc") == 0, f"local-cluster.sh restart {victim}: {restarted.get('out', '')[-100:]!r}")
    # the restarted replica serves again: its own counter rises through the balancer
    new = replica_url(victim)
    before = chat_requests(metrics(new))

    def served():
        loadtest.run_load(url, 4, 1, 4, timeout=CLIENT_TIMEOUT)
        return chat_requests(metrics(new)) > before
    check(wait_for(served, 30, step=0.5),
          f"the restarted replica serves requests from nginx again (its /metrics: "
          f"{before:.0f} -> {chat_requests(metrics(new)):.0f} chat requests)")
    return s


# ---- 3. a session stays on one replica ---------------------------------------------------------

def test_session(url):
    questions = ["What is the capital of France?", "And of Germany?", "Which of the two is larger?",
                 "Name a river in each.", "Thank you. Summarise what we said."]
    messages, replicas, cached, hits = [], [], [], []
    for q in questions:
        messages.append({"role": "user", "content": q})
        body = loadtest.chat_body(0, 12, messages)
        body["temperature"] = 0
        res = loadtest.stream_chat(url, body, timeout=CLIENT_TIMEOUT, headers={"X-Session-Id": "cluster-test-7"})
        if res["cause"]:
            check(False, f"session turn {len(replicas) + 1}: {res['cause']} {res['error']}")
            return
        replicas.append(res["replica"])
        cached.append(res["cached"])
        port = res["replica"].rsplit(":", 1)[1]
        hits.append(metrics(f"http://127.0.0.1:{port}")["anyllm_prefix_cache_hit_tokens_total"])
        messages.append({"role": "assistant", "content": res["text"]})
    check(len(set(replicas)) == 1, f"a 5-turn chat with one X-Session-Id stays on one replica: {replicas}")
    grow = all(b > a for a, b in zip(cached, cached[1:])) and all(b > a for a, b in zip(hits, hits[1:]))
    check(grow, f"turn by turn its prefix-cache hits grow: cached tokens per turn {cached}, the replica's "
          f"anyllm_prefix_cache_hit_tokens_total {[int(h) for h in hits]}")
    # without a session, the prefix hash a reply carried routes the same way
    same = [loadtest.stream_chat(url, loadtest.chat_body(i, 2), timeout=CLIENT_TIMEOUT,
                                 headers={"X-Prefix-Hash": "0123456789abcdef"})["replica"] for i in range(4)]
    check(len(set(same)) == 1 and None not in same, f"requests with one X-Prefix-Hash land on one replica: {same}")


# ---- 4. drain -------------------------------------------------------------------------------------

def test_drain(url):
    target = 1
    base = replica_url(target)
    pid = int(state_file(f"replica-{target}.pid"))
    started = threading.Event()
    results = [None] * 3

    def stream(i):
        body = loadtest.chat_body(100 + i, 48, [{"role": "user", "content": "Tell me a long story about a ship."}])
        results[i] = loadtest.stream_chat(base, body, timeout=CLIENT_TIMEOUT, on_text=lambda r: started.set())
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    started.wait(60)
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    direct = loadtest.stream_chat(base, loadtest.chat_body(7, 4), timeout=CLIENT_TIMEOUT)
    check(direct["status"] == 503 and direct["retry_after"] == "1",
          f"draining: a new request straight to the replica gets {direct['status']}, Retry-After "
          f"{direct['retry_after']}")
    hs = get(base + "/health")
    check(hs[0] == 503 and json.loads(hs[2]).get("state") == "draining", f"draining: its /health: {hs[0]} {hs[2][:60]}")
    via, wall = loadtest.run_load(url, 6, 1, 4, timeout=CLIENT_TIMEOUT)
    s = loadtest.summarize(via, wall)
    check(s["failed"] == 0, "while it drains, requests through nginx all complete: " + loadtest.summary_line(s))
    for t in threads:
        t.join(timeout=120)
    bad = [(r["cause"], r["error"]) for r in results if r is None or r["cause"] or not r["done"]]
    check(not bad, f"the 3 streams in flight on the draining replica end with [DONE] {bad}")
    check(wait_for(lambda: state_file(f"replica-{target}.exit") is not None, 60) and
          state_file(f"replica-{target}.exit") == "0" and not alive(pid),
          f"the drained replica exits {state_file(f'replica-{target}.exit')}")
    st = cluster("status").stdout
    check(f"replica {target} pid {pid} port" in st and "health down (exit 0)" in st,
          f"status shows it down: {st.splitlines()[target - 1] if st else st!r}")


# ---- 5. stop ------------------------------------------------------------------------------------

def test_stop():
    files = [f"replica-{i}.pid" for i in (1, 2, 3)] + ["nginx.pid"]
    pids = [int(p) for p in map(state_file, files) if p]
    r = cluster("stop", timeout=200)
    gone = wait_for(lambda: not any(alive(p) for p in pids), 10)
    check(r.returncode == 0 and gone, f"local-cluster.sh stop: every replica and nginx gone ({r.stdout.strip()})")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=8)
    ARGS = ap.parse_args()
    t0 = time.time()
    try:
        url = test_start()
        for name, fn in (("kill", test_kill), ("session", test_session), ("drain", test_drain)):
            if not url:
                break
            t = time.time()
            print(f"-- {name}", flush=True)
            try:
                fn(url)
            except Exception as e:  # noqa: BLE001 - one part failing is a failure, not the end
                check(False, f"{name}: {e!r}")
            print(f"-- {name}: {time.time() - t:.1f} s", flush=True)
    finally:
        test_stop()
    print(f"cluster test: {time.time() - t0:.1f} s")
    print(f"{RESULTS['pass']} passed, {RESULTS['fail']} failed")
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
