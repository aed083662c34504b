#!/bin/sh
# glm4moe (GLM-4.5 / 4.6) through the commands, on a generated model (random weights,
# GLM-4.5-Air's layout; test_glm4moe.c holds its logits to llama.cpp's): run, with and
# without n-gram drafts, chat, perplexity, bench and serve each run on it; malformed
# files (a dense-layer count past the layers, no shared expert, a softmax router, a
# missing shared expert's tensor) are refused with one line, under ASan where it is built.
. "$(dirname "$0")/lib.sh"
asan=$BUILD/asan/anyllm
[ -x "$asan" ] || asan=$bin
m=$tmp/glm.gguf
if ! "$bin" gen-model "$m" --arch glm4moe --dim 256 --layers 3 --heads 4 --kv-heads 2 \
        --head-dim 64 --ffn 512 --vocab 512 --experts 8 --experts-used 2 --ffn-exp 128 \
        --type Q8_0 -t 2 >"$tmp/out" 2>&1; then
    bad "gen-model glm4moe: $(cat "$tmp/out")"
    echo "$pass passed, $fail failed"
    exit 1
fi

feat=$("$bin" info -m "$m" 2>/dev/null | grep '^features')
if echo "$feat" | grep -q 'picked by sigmoid scores plus a bias, weighted normalized x 2.5 and a shared'
then ok "info: $(echo "$feat" | cut -c24-)"
else bad "info: $feat"; fi

p="one two three four five six seven eight nine ten"
"$bin" run -m "$m" -p "$p" -n 24 --temp 0 --ignore-eos -t 2 >"$tmp/plain" 2>"$tmp/err" &&
    "$bin" run -m "$m" -p "$p" -n 24 --temp 0 --ignore-eos -t 2 --spec ngram >"$tmp/spec" \
        2>>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -c <"$tmp/plain")" -gt "${#p}" ] && cmp -s "$tmp/plain" "$tmp/spec"
then ok "run: 24 tokens, the same with --spec ngram"
else bad "run: rc $rc $(tail -3 "$tmp/err")"; fi

if printf 'hello\n' | "$bin" chat -m "$m" -n 8 --temp 0 -t 2 --chat-template chatml \
        >"$tmp/chat" 2>"$tmp/err"; then ok "chat: one turn"
else bad "chat: $(tail -3 "$tmp/err")"; fi

"$bin" perplexity -m "$m" -f README.md -c 64 --chunks 2 -t 2 >"$tmp/ppl" 2>"$tmp/err"
if grep -Eq '^perplexity: [0-9.]+ over' "$tmp/ppl"; then ok "$(grep '^perplexity:' "$tmp/ppl")"
else bad "perplexity: $(tail -3 "$tmp/err")"; fi

"$bin" bench -m "$m" -p 16 -n 4 -r 1 -t 2 -o json >"$tmp/bench" 2>"$tmp/err"
if [ "$(grep -c '"model_type": "glm4moe"' "$tmp/bench")" = 2 ]; then ok "bench: a pp and a tg row"
else bad "bench: $(tail -3 "$tmp/err")"; fi

port=$(free_port)
"$bin" serve -m "$m" --port "$port" -c 128 -t 2 >"$tmp/serve.log" 2>&1 &
pid=$!
wait_health "$port"
python3 - "$port" >"$tmp/serve.out" 2>&1 <<'PY'
import json, sys, urllib.request as u
req = u.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"prompt": "one two", "max_tokens": 6, "temperature": 0,
                                 "ignore_eos": True}).encode())
print(json.load(u.urlopen(req, timeout=120))["usage"]["completion_tokens"])
PY
kill -TERM $pid
wait $pid
if [ "$(cat "$tmp/serve.out")" = 6 ]; then ok "serve: a completion of 6 tokens"
else bad "serve: $(cat "$tmp/serve.out" "$tmp/serve.log" | tail -4)"; fi

# malformed files: one line each naming the fault, no crash
refused() { # NAME FILE PATTERN
    expect_error "$1" "$asan" run -m "$2" -p hi -n 1
    grep -q "$3" "$tmp/err" || bad "$1: the line does not name $3"
}
gguf_patch_u32 "$m" "$tmp/m1.gguf" glm4moe.leading_dense_block_count 9
refused "dense layers past the layers" "$tmp/m1.gguf" leading_dense_block_count
gguf_patch_u32 "$m" "$tmp/m2.gguf" glm4moe.expert_shared_count 0
refused "no shared expert" "$tmp/m2.gguf" expert_shared_count
gguf_patch_u32 "$m" "$tmp/m3.gguf" glm4moe.expert_gating_func 1
refused "a softmax router" "$tmp/m3.gguf" expert_gating_func
python3 - "$m" "$tmp/m4.gguf" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'wb').write(d.replace(b'blk.2.ffn_down_shexp', b'blk.2.ffn_down_shexq', 1))
PY
refused "a shared expert's tensor missing" "$tmp/m4.gguf" ffn_down_shexp

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
