"""Several models in one server (`serve --models-dir`, several -m), for test_server.py's
"models" part: two models served from a directory, requests for both interleaved (whole
and streamed, through the openai client), the idle one unloaded and loaded again on
demand with no request lost, the process's memory back to the one-model figure after the
unload, --models-max 1 taking turns, unknown models refused with the list, a file that
does not load failing only its own requests, and the chat page's model picker.

run(t) takes test_server's module for its helpers (check, free_port, healthy, rss_kb,
page_state, ARGS)."""
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import openai
import requests

# --idle-unload of the instance under test; longer under a sanitizer, whose slower
# requests would otherwise leave a model idle that long in the middle of the test
IDLE_S = 8 if os.environ.get("ANYLLM_SANITIZED") else 2


def start(t, *args):
    port = t.free_port()
    p = subprocess.Popen([t.ARGS.bin, "serve", "--port", str(port), "-t", "2", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if t.healthy(base):
            return p, base
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("the multi-model server did not start: " + p.stderr.read().decode())


def stop(p):
    p.terminate()
    try:
        return p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        return None


def status(base):
    r = requests.get(base + "/v1/models", timeout=10).json()
    return {m["id"]: m.get("status") for m in r.get("data", [])}


def ask(base, model, stream=False, tokens=6):
    """One chat request through the openai client: (model named in the reply, text)."""
    c = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "Name a colour."}]
    if not stream:
        r = c.chat.completions.create(model=model, messages=msgs, max_tokens=tokens, temperature=0)
        return r.model, r.choices[0].message.content or ""
    text, name = "", None
    for ch in c.chat.completions.create(model=model, messages=msgs, max_tokens=tokens,
                                        temperature=0, stream=True):
        name = ch.model
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
    return name, text


def wait_for(cond, seconds, poke=None):
    t0 = time.time()
    while time.time() - t0 < seconds:
        if cond():
            return True
        if poke:
            poke()
        time.sleep(0.3)
    return cond()


def served_pair(t, d, gemma):
    """Two models interleaved, one unloaded when idle and loaded again; the memory."""
    p, base = start(t, "--models-dir", d, "--idle-unload", str(IDLE_S), "--parallel", "2")
    try:
        st = status(base)
        t.check(st == {"gemma.gguf": "unloaded", "smol.gguf": "unloaded"},
                f"models: /v1/models lists the directory's files, none loaded yet: {st}")
        name, text = ask(base, "smol")
        t.check(name == "smol.gguf" and text, f"models: a request naming 'smol' (no .gguf) is "
                f"answered by smol.gguf: {name!r} {text!r}")
        rss_one = t.rss_kb(p.pid)
        jobs = [("smol.gguf" if i % 2 else "gemma", i % 3 == 0) for i in range(12)]
        with cf.ThreadPoolExecutor(4) as ex:
            got = list(ex.map(lambda j: ask(base, j[0], stream=j[1]), jobs))
        want = ["smol.gguf" if i % 2 else "gemma.gguf" for i in range(12)]
        t.check([g[0] for g in got] == want and all(g[1] for g in got),
                f"models: 12 requests for the two models interleaved, 4 at a time, a third "
                f"streamed: each answered by its model ({[g[0] for g in got]})")
        st = status(base)
        rss_two = t.rss_kb(p.pid)
        t.check(st == {"gemma.gguf": "loaded", "smol.gguf": "loaded"}, f"models: both loaded: {st}")
        # keep smol in use; gemma, idle, goes after --idle-unload seconds
        unloaded = wait_for(lambda: status(base)["gemma.gguf"] == "unloaded", 10 * IDLE_S,
                            poke=lambda: ask(base, "smol.gguf", tokens=1))
        st = status(base)
        t.check(unloaded and st["smol.gguf"] == "loaded",
                f"models: gemma unloaded after {IDLE_S} s idle while smol, in use, stays: {st}")
        time.sleep(0.5)
        rss_back = t.rss_kb(p.pid)
        # the unload gives back at least 80% of what gemma's load took, and the process
        # is within 20% of what it was with smol alone (smol's cache has grown meanwhile)
        if os.environ.get("ANYLLM_SANITIZED"):
            print("skip: memory after the unload: a sanitizer's allocator keeps what is freed")
        else:
            t.check(rss_two - rss_back >= 0.8 * (rss_two - rss_one) and rss_back <= rss_one * 1.2 + 16384,
                f"models: memory back to the one-model figure after the unload: {rss_one} kB "
                f"with smol, {rss_two} kB with both, {rss_back} kB after gemma's unload")
        name, text = ask(base, "gemma.gguf", stream=True)
        t.check(name == "gemma.gguf" and text, f"models: gemma loaded again on demand: {text!r}")
        m = requests.get(base + "/metrics", timeout=10).text
        loads = int(re.search(r"^anyllm_model_loads_total (\d+)", m, re.M).group(1))
        unloads = int(re.search(r"^anyllm_model_unloads_total (\d+)", m, re.M).group(1))
        # 3 loads and 1 unload, or more where a slow machine let a model idle meanwhile
        t.check(loads >= 3 and unloads >= 1 and 'anyllm_model_loaded{model="gemma.gguf"} 1' in m,
                f"models: /metrics counts the loads ({loads}) and unloads ({unloads}), gemma loaded")
        r = requests.post(base + "/v1/chat/completions", json={
            "model": "llama-70b", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        msg = r.json().get("error", {}).get("message", "")
        t.check(r.status_code == 404 and "'gemma.gguf'" in msg and "'smol.gguf'" in msg,
                f"models: an unknown model is a 404 that lists the models: {r.status_code} {msg!r}")
        r = requests.post(base + "/v1/messages", json={
            "model": 7, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        t.check(r.status_code == 400 and r.json().get("type") == "error",
                f"models: 'model' not a string is a 400 (Anthropic's shape on /v1/messages): "
                f"{r.status_code} {r.text[:120]}")
        r = requests.post(base + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=60)
        t.check(r.status_code == 200 and r.json().get("model") == "gemma.gguf",
                f"models: a request naming no model goes to the first listed: {r.text[:120]}")
        page_picker(t, base)
    finally:
        code = stop(p)
        t.check(code == 0, f"models: the multi-model server stops cleanly on SIGTERM: {code}")


def page_picker(t, base):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("skip: the chat page's model picker: chromium not found")
        return
    state = t.page_state(exe, base + "/?model=smol.gguf&q=Hello", (
        "(() => { const a = document.querySelector('.msg.assistant'), p = document.getElementById('modelpick');"
        " return {done: !!(a && a.dataset.done), options: p ? [...p.options].map((o) => o.value) : null,"
        " picked: p ? p.value : null, text: a ? a.textContent : null,"
        " error: (document.querySelector('.msg.error') || {}).textContent || null}; })()"),
        os.path.join(t.ARGS.build, "chat-page-models.png"))
    t.check(state.get("done") and state.get("options") == ["gemma.gguf", "smol.gguf"]
            and state.get("picked") == "smol.gguf" and state.get("text") and not state.get("error"),
            f"models: the chat page offers both models and answers with the one picked: {state}")


def taking_turns(t, d):
    """--models-max 1: requests for two models at once take turns, none lost."""
    p, base = start(t, "-m", os.path.join(d, "smol.gguf"), "-m", os.path.join(d, "gemma.gguf"),
                    "--models-max", "1", "--parallel", "1")
    try:
        jobs = ["smol.gguf", "gemma.gguf"] * 3
        with cf.ThreadPoolExecutor(6) as ex:
            got = list(ex.map(lambda m: ask(base, m, tokens=3), jobs))
        t.check([g[0] for g in got] == jobs and all(g[1] for g in got),
                f"models: --models-max 1, 6 requests for two models at once: all answered "
                f"({[g[0] for g in got]})")
        st = status(base)
        t.check(sorted(st.values()) == ["loaded", "unloaded"], f"models: one model loaded at "
                f"most: {st}")
        m = requests.get(base + "/metrics", timeout=10).text
        t.check("anyllm_model_unloads_total 0" not in m, "models: a model was unloaded to make room")
    finally:
        code = stop(p)
        t.check(code == 0, f"models: --models-max 1 server stops cleanly: {code}")


def broken_file(t, d):
    """A file that does not load fails its own requests (500 naming it); the other answers."""
    bad = os.path.join(d, "broken.gguf")
    with open(bad, "wb") as f:
        f.write(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    p, base = start(t, "-m", bad, "-m", os.path.join(d, "smol.gguf"))
    try:
        r = requests.post(base + "/v1/chat/completions", json={
            "model": "broken.gguf", "messages": [{"role": "user", "content": "hi"}]}, timeout=60)
        msg = r.json().get("error", {}).get("message", "")
        t.check(r.status_code == 500 and "broken.gguf" in msg,
                f"models: a file that does not load is a 500 naming it: {r.status_code} {msg!r}")
        name, text = ask(base, "smol.gguf")
        t.check(name == "smol.gguf" and text, "models: the other model still answers")
    finally:
        code = stop(p)
        t.check(code == 0, f"models: the server with a broken file stops cleanly: {code}")
    empty = tempfile.mkdtemp()
    for args, want in ((["--models-dir", "/nonexistent-dir"], "nonexistent-dir"),
                       (["--models-dir", empty], "no .gguf"),
                       (["-m", os.path.join(d, "smol.gguf"), "-m", os.path.join(d, "smol.gguf")], "two models"),
                       (["--models-dir", d, "--models-memory", "12Q"], "--models-memory")):
        r = subprocess.run([t.ARGS.bin, "serve", "--port", "0", *args], capture_output=True, timeout=30)
        err = r.stderr.decode()
        t.check(r.returncode != 0 and want in err and len(err.strip().splitlines()) == 1,
                f"models: serve {' '.join(args)} refused with one line: {err.strip()!r}")
    os.rmdir(empty)


def run(t):
    gemma = os.environ.get("ANYLLM_GEMMA3", "models/gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(gemma):
        print(f"skip: {gemma} not found (make models): the multi-model part needs a second model")
        return "skip"
    d = tempfile.mkdtemp()
    try:
        os.symlink(os.path.abspath(t.ARGS.model), os.path.join(d, "smol.gguf"))
        os.symlink(os.path.abspath(gemma), os.path.join(d, "gemma.gguf"))
        served_pair(t, d, gemma)
        taking_turns(t, d)
        broken_file(t, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return "ok"
