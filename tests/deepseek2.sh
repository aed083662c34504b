#!/bin/sh
# deepseek2 (multi-head latent attention) through the commands, on a generated model
# (random weights, DeepSeek-V3's layout at a small size; test_deepseek2.c holds its
# logits to llama.cpp's): info's latent cache, run with and without n-gram drafts,
# chat, perplexity, bench (the latent rows are all a decoded token reads of the cache)
# and serve each run on it; malformed files (ranks larger than the embedding, no
# shared expert, groups that do not divide the experts, the older attn_kv_b layout, a
# missing k_b) are refused with one line, under ASan where it is built.
. "$(dirname "$0")/lib.sh"
asan=$BUILD/asan/anyllm
[ -x "$asan" ] || asan=$bin
m=$tmp/ds.gguf
if ! "$bin" gen-model "$m" --arch deepseek2 --dim 256 --layers 3 --heads 4 --kv-heads 1 \
        --head-dim 96 --ffn 512 --vocab 512 --experts 8 --experts-used 2 --ffn-exp 128 \
        --q-lora 128 --type Q8_0 -t 2 >"$tmp/out" 2>&1; then
    bad "gen-model deepseek2: $(cat "$tmp/out")"
    echo "$pass passed, $fail failed"
    exit 1
fi

# a row of 256 + 32 per layer and position, 3 layers: 3456 bytes in f32, 918 in q8_0
"$bin" info -m "$m" >"$tmp/info" 2>&1
"$bin" info -m "$m" -ctk q8_0 >"$tmp/info8" 2>&1
if grep -q '^features .*latent attention (a cached row of 256 + 32 rope' "$tmp/info" &&
        grep -q '^kv per position        3456 bytes (latent rows of 288, f32: .*640 per layer, would take 2.2x)' "$tmp/info" &&
        grep -q '^kv per position        918 bytes (latent rows of 288, q8_0' "$tmp/info8"
then ok "info: $(grep '^kv per position' "$tmp/info" | cut -c24-)"
else bad "info: $(grep -E '^(features|kv per)' "$tmp/info" "$tmp/info8")"; fi

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

"$bin" perplexity -m "$m" -f README.md -c 64 --chunks 2 -t 2 -ctk q8_0 >"$tmp/ppl" 2>"$tmp/err"
if grep -Eq '^perplexity: [0-9.]+ over' "$tmp/ppl"; then ok "$(grep '^perplexity:' "$tmp/ppl") (q8_0 cache)"
else bad "perplexity: $(tail -3 "$tmp/err")"; fi

# a decoded token reads the latent rows before it and nothing else of the cache: its
# bytes grow by one row per layer and position
"$bin" bench -m "$m" -p 16 -n 4 -d 0,32 -r 1 -t 2 -o json >"$tmp/bench" 2>"$tmp/err"
res=$(python3 - "$tmp/bench" 2>&1 <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4 and all(r["model_type"] == "deepseek2" for r in rows), rows
assert all(r["kv_bytes_per_pos"] == 3456 for r in rows), [r["kv_bytes_per_pos"] for r in rows]
tg = {r["n_depth"]: r["bytes_per_token"] for r in rows if r["n_gen"] > 0}
assert tg[32] - tg[0] == 32 * 3456, tg
print(f"bench: read/token {tg[0]} at d0, {tg[32]} at d32: 32 latent rows of 3456 bytes")
PY
)
if echo "$res" | grep -q '^bench: read/token'; then ok "$res"
else bad "bench: $res $(tail -3 "$tmp/err")"; fi

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
gguf_patch_u32 "$m" "$tmp/m1.gguf" deepseek2.attention.kv_lora_rank 4096
refused "a latent rank larger than the embedding" "$tmp/m1.gguf" kv_lora_rank
gguf_patch_u32 "$m" "$tmp/m2.gguf" deepseek2.attention.q_lora_rank 300
refused "a query rank larger than the embedding" "$tmp/m2.gguf" q_lora_rank
gguf_patch_u32 "$m" "$tmp/m3.gguf" deepseek2.expert_shared_count 0
refused "no shared expert" "$tmp/m3.gguf" expert_shared_count
gguf_patch_u32 "$m" "$tmp/m4.gguf" deepseek2.expert_group_count 3
refused "groups that do not divide the experts" "$tmp/m4.gguf" expert_group_count
python3 - "$m" "$tmp" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
out = sys.argv[2]
# the older layout: no key_length_mla (its kv_b is not split into k_b and v_b)
open(out + '/m5.gguf', 'wb').write(d.replace(b'attention.key_length_mla', b'attention.key_length_old', 1))
open(out + '/m6.gguf', 'wb').write(d.replace(b'blk.1.attn_k_b', b'blk.1.attn_k_c', 1))
PY
refused "the older attn_kv_b layout" "$tmp/m5.gguf" key_length_mla
refused "a missing attn_k_b" "$tmp/m6.gguf" attn_k_b

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
