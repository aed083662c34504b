#!/bin/sh
# Prefill on one backend, decode on another, through the command line, and the device
# profile that --backend auto reads (in a temporary XDG_CACHE_HOME):
#   - run --prefill-backend/--decode-backend: the split line, a zero-copy hand-off on a
#     unified-memory device and a copy with ANYLLM_VK_PRETEND_DISCRETE=1, the same text
#     either way, with an f32 and a q8_0 cache; a bad backend name is one line
#   - --backend auto without a profile says so in one line and runs as before
#   - bench --save-profile writes the profile, `anyllm profile` shows it, auto reads it
#   - rigged profiles (written here) make auto choose each split, say which on one
#     line, and run it; --prefill-backend/--decode-backend override auto's choice;
#     the nearest measured point decides (prompt size, then depth)
#   - serve with the split: the same text per request, shared or copied, and /metrics
#     naming each phase's backend and counting the hand-offs and bytes copied
# The library's checks (every split against the reference logits) are test_split.
. "$(dirname "$0")/lib.sh"
m=$SHARED/models/ref/ref-llama-Q8_0.gguf
if [ ! -f "$m" ]; then
    echo "skip: $m not found (the shared test data is missing)"
    echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
XDG_CACHE_HOME=$tmp/cache; export XDG_CACHE_HOME
vk=0; skip=0
"$bin" devices 2>/dev/null | grep -q '^vulkan:0' && vk=1
[ $vk = 1 ] || { echo "skip: no Vulkan device (the runs on vulkan:0 are left out)"; skip=1; }
prompt="hello world the cat sat on the mat"
run() { "$bin" run -m "$m" -p "$prompt" -n 6 --temp 0 -t 2 "$@"; }

# ---- explicit splits ----------------------------------------------------------------
if [ $vk = 1 ]; then
    # the last pairs: a q8_0 cache (its typed rows shared, or copied as bytes)
    for pair in "cpu vulkan:0" "vulkan:0 cpu" "cpu vulkan:0 q8_0" "vulkan:0 cpu q8_0"; do
        set -- $pair
        kv=${3:+-ctk $3 -ctv $3}
        run --prefill-backend "$1" --decode-backend "$2" $kv >"$tmp/shared.out" \
            2>"$tmp/shared.err"
        rc1=$?
        ANYLLM_VK_PRETEND_DISCRETE=1 run --prefill-backend "$1" --decode-backend "$2" $kv \
            >"$tmp/copy.out" 2>"$tmp/copy.err"; rc2=$?
        s=$(grep '^split:' "$tmp/shared.err"); c=$(grep '^split:' "$tmp/copy.err")
        if [ $rc1 = 0 ] && [ $rc2 = 0 ] && echo "$s" | grep -q 'shared memory (0 bytes copied)' &&
           echo "$c" | grep -Eq 'a copy \([1-9][0-9]* bytes copied\)' &&
           grep -q 'TTFT' "$tmp/shared.err" && cmp -s "$tmp/shared.out" "$tmp/copy.out"; then
            ok "$1 -> $2${3:+ ($3 cache)}: $s | discrete: $(echo "$c" | sed 's/.*; KV/KV/')"
        else
            bad "$1 -> $2: exit $rc1/$rc2"; cat "$tmp/shared.err" "$tmp/copy.err"
        fi
    done
fi
expect_error "a bad --decode-backend" run --prefill-backend cpu --decode-backend nope

# ---- auto without a profile ----------------------------------------------------------------
run --backend auto >"$tmp/out" 2>"$tmp/err"; rc=$?
n=$(grep -c '^auto: no device profile' "$tmp/err")
if [ $rc = 0 ] && [ "$n" = 1 ]; then ok "no profile: $(grep '^auto:' "$tmp/err" | cut -c1-100)..."
else bad "no profile: exit $rc, $n lines"; cat "$tmp/err"; fi

# ---- bench --save-profile, profile, auto -----------------------------------------------------
backends=cpu; [ $vk = 1 ] && backends=all
"$bin" bench -m "$m" -p 8 -n 4 -r 1 -t 1 --backend $backends --save-profile >"$tmp/bench.md" \
    2>"$tmp/bench.err"; rc=$?
path=$(sed -n 's/^bench: profile of .* saved: //p' "$tmp/bench.err")
case $path in "$XDG_CACHE_HOME"/anyllm/profiles/*.json) good=1 ;; *) good=0 ;; esac
if [ $rc = 0 ] && [ $good = 1 ] && [ -f "$path" ]; then ok "bench --save-profile: $path"
else bad "bench --save-profile: exit $rc, path '$path'"; cat "$tmp/bench.err"; fi
"$bin" profile -m "$m" >"$tmp/prof" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q '^| cpu | cpu .* | pp8 | 0 | 1 |' "$tmp/prof" && grep -q '^auto, for' "$tmp/prof"
then ok "profile: $(grep '^auto, for' "$tmp/prof")"
else bad "profile: exit $rc"; cat "$tmp/prof"; fi
run --backend auto >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc = 0 ] && grep -q "^auto: prefill on .*, decode on .*, from profile $path" "$tmp/err"
then ok "auto reads the saved profile: $(grep '^auto:' "$tmp/err" | cut -c1-110)..."
else bad "auto with the saved profile: exit $rc"; cat "$tmp/err"; fi

# rig PP_CPU PP_VK TG_CPU TG_VK: a profile measured at pp8 and tg4, depth 0
rig() {
    python3 - "$path" "$@" <<'PY'
import json, sys
path, pc, pv, tc, tv = sys.argv[1], *map(float, sys.argv[2:6])
doc = json.load(open(path))
pt = lambda b, t, n, d, ts: {"backend": b, "desc": b + " (rigged)", "test": t, "n_tokens": n,
                             "n_depth": d, "n_threads": 2, "ts": ts, "sd": 0}
doc["points"] = [pt("cpu", "pp", 8, 0, pc), pt("vulkan:0", "pp", 8, 0, pv),
                 pt("cpu", "tg", 4, 0, tc), pt("vulkan:0", "tg", 4, 0, tv)]
json.dump(doc, open(path, "w"))
PY
}

# auto_case NAME PREFILL DECODE [run options]: auto's line names both, and the run works
auto_case() {
    name=$1; want_p=$2; want_d=$3; shift 3
    line=$("$bin" profile -m "$m" -p 8 | grep '^auto, for')
    want="prefill on $want_p (.*), decode on $want_d ("
    if [ $vk = 0 ]; then # no device to run on: the choice alone
        if [ $# = 0 ] && echo "$line" | grep -q "$want"; then ok "$name: $line"
        elif [ $# != 0 ]; then ok "$name: (needs vulkan:0)"
        else bad "$name: $line"; fi
        return
    fi
    run --backend auto "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    a=$(grep '^auto:' "$tmp/err")
    split_ok=1
    if [ "$want_p" != "$want_d" ]; then
        grep -q '^split: prompt on .*, tokens on .*shared memory (0 bytes copied)' "$tmp/err" || split_ok=0
    elif grep -q '^split:' "$tmp/err"; then split_ok=0; fi
    if [ $rc = 0 ] && [ $(grep -c '^auto:' "$tmp/err") = 1 ] && [ $split_ok = 1 ] &&
       echo "$a" | grep -q "auto: $want"; then ok "$name: $a"
    else bad "$name: exit $rc"; cat "$tmp/err"; fi
}
rig 100 500 50 10;  auto_case "rigged: vulkan prefills, cpu decodes" vulkan:0 cpu
rig 500 100 10 50;  auto_case "rigged: cpu prefills, vulkan decodes" cpu vulkan:0
rig 100 500 10 50;  auto_case "rigged: vulkan does both" vulkan:0 vulkan:0
rig 500 100 50 10;  auto_case "rigged: cpu does both" cpu cpu
rig 100 500 50 10;  auto_case "--prefill-backend overrides auto" cpu cpu --prefill-backend cpu
if [ $vk = 1 ] && ! grep -q 'prefill on cpu (--prefill-backend)' "$tmp/err"; then
    bad "--prefill-backend is not named as the reason"; fi

# the nearest measured point: pp at 8 and 512 tokens, tg at depths 0 and 4096
python3 - "$path" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
pt = lambda b, t, n, d, ts: {"backend": b, "desc": b, "test": t, "n_tokens": n, "n_depth": d,
                             "n_threads": 2, "ts": ts, "sd": 0}
doc["points"] = [pt("cpu", "pp", 8, 0, 300), pt("vulkan:0", "pp", 8, 0, 100),
                 pt("cpu", "pp", 512, 0, 100), pt("vulkan:0", "pp", 512, 0, 900),
                 pt("cpu", "tg", 128, 0, 40), pt("vulkan:0", "tg", 128, 0, 20),
                 pt("cpu", "tg", 128, 4096, 5), pt("vulkan:0", "tg", 128, 4096, 15)]
json.dump(doc, open(sys.argv[1], "w"))
PY
near() { # NAME -p -d PREFILL DECODE
    line=$("$bin" profile -m "$m" -p "$2" -d "$3" | grep '^auto, for')
    if echo "$line" | grep -q "prefill on $4 (.*), decode on $5 ("; then ok "$1: $line"
    else bad "$1: $line"; fi
}
near "nearest: a short prompt" 12 0 cpu cpu
near "nearest: a long prompt" 300 0 vulkan:0 cpu
near "nearest: deep in the context" 12 3000 cpu vulkan:0

# ---- serve: the same split per request, /metrics names each phase's backend -----------------
# serve_case NAME [ENV=VALUE]: two identical completions (the second reuses the cached
# prefix, handed back from the decode context), then /metrics; prints the text
serve_case() {
    name=$1; shift
    port=$(free_port)
    env "$@" "$bin" serve -m "$m" --port "$port" --parallel 2 -c 128 -t 2 \
        --prefill-backend vulkan:0 --decode-backend cpu >"$tmp/serve.log" 2>&1 &
    pid=$!
    wait_health "$port"
    python3 - "$port" >"$tmp/serve.out" 2>&1 <<'PY'
import json, sys, urllib.request as u
base = f"http://127.0.0.1:{sys.argv[1]}"
texts = []
for _ in range(2):
    req = u.Request(base + "/v1/completions", headers={"Content-Type": "application/json"},
                    data=json.dumps({"prompt": "hello world the cat", "max_tokens": 6,
                                     "temperature": 0}).encode())
    texts.append(json.load(u.urlopen(req, timeout=120))["choices"][0]["text"])
metrics = u.urlopen(base + "/metrics", timeout=10).read().decode()
print("texts", json.dumps(texts))
for line in metrics.splitlines():
    if line.startswith(("anyllm_phase_backend", "anyllm_kv_")): print(line)
PY
    kill -TERM $pid; wait $pid; rc=$?
    echo "exit $rc" >>"$tmp/serve.out"
}
if [ $vk = 1 ]; then
    serve_case shared; cp "$tmp/serve.out" "$tmp/serve.shared"
    serve_case copy ANYLLM_VK_PRETEND_DISCRETE=1
    for f in shared copy; do
        [ $f = shared ] && out=$tmp/serve.shared || out=$tmp/serve.out
        texts=$(grep '^texts' "$out")
        n_hand=$(sed -n 's/^anyllm_kv_handoffs_total //p' "$out")
        bytes=$(sed -n 's/^anyllm_kv_handoff_bytes_copied_total //p' "$out")
        want_bytes=0; [ $f = copy ] && want_bytes=nonzero
        got_bytes=0; [ "${bytes:-0}" != 0 ] && got_bytes=nonzero
        if grep -q 'exit 0' "$out" && grep -q 'phase="prefill",backend="vulkan' "$out" &&
           grep -q 'phase="decode",backend="cpu' "$out" && [ "${n_hand:-0}" -ge 3 ] &&
           [ $got_bytes = $want_bytes ] && [ "$texts" = "$(grep '^texts' "$tmp/serve.shared")" ] &&
           echo "$texts" | python3 -c 'import json,sys; t=json.loads(sys.stdin.read()[6:]); sys.exit(t[0] != t[1] or not t[0])'
        then ok "serve, $f: $n_hand hand-offs, $bytes bytes copied, $texts"
        else bad "serve, $f"; cat "$out" "$tmp/serve.log"; fi
    done
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
