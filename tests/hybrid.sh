# hybrid.sh: a qwen35 file (gated delta-net layers, test_hybrid checks its logits)
# through the commands: run, bench (pp, tg, at depth), perplexity, info, run on Vulkan
# where there is a device, serve (checkpoint reuse, two slots, a cancelled stream),
# chat (turns, /save, /load, a full context), and malformed files (sizes that disagree
# or overflow, a missing convolution, a layer array of the wrong length), each refused
# with one line, through the ASan build where there is one.
. tests/lib.sh
m=$tmp/q35.gguf
asan=$BUILD/asan/anyllm
[ -x "$asan" ] || asan=$bin
if ! "$bin" gen-model "$m" --arch qwen35 --dim 256 --layers 4 --heads 4 --kv-heads 2 \
        --head-dim 64 --ffn 512 --vocab 512 --type Q8_0 -t 2 >"$tmp/out" 2>&1; then
    bad "gen-model qwen35: $(cat "$tmp/out")"
    echo "$pass passed, $fail failed"
    exit 1
fi

if "$bin" run -m "$m" -p "one two three" -n 12 -s 1 >"$tmp/run" 2>"$tmp/err" &&
        grep -q "generated 12 tokens" "$tmp/err"; then
    ok "run: 12 tokens"
else
    bad "run: $(cat "$tmp/err")"
fi

if "$bin" bench -m "$m" -p 32 -n 8 -d 0,32 -r 1 -t 2 -o csv >"$tmp/bench" 2>"$tmp/err" &&
        [ "$(grep -c ',qwen35,' "$tmp/bench")" -eq 4 ]; then
    ok "bench: pp and tg at depth 0 and 32"
else
    bad "bench: $(cat "$tmp/bench" "$tmp/err")"
fi

if "$bin" perplexity -m "$m" -f README.md -c 64 --chunks 2 >"$tmp/ppl" 2>&1 &&
        grep -qE '^perplexity: [0-9.]+ over' "$tmp/ppl"; then
    ok "perplexity: $(grep '^perplexity' "$tmp/ppl")"
else
    bad "perplexity: $(cat "$tmp/ppl")"
fi

if "$bin" info -m "$m" 2>&1 | grep -q "gated delta-net on 3 of 4 layers"; then
    ok "info names the delta-net layers"
else
    bad "info: no delta-net in the features line"
fi

# the state checkpoints chat and serve keep count in the memory info reports: four
# states' bytes, and memory needed = weights + KV cache (with the states) + checkpoints
"$bin" info -m "$m" >"$tmp/info" 2>&1
ck=$(sed -n 's/^state checkpoints (4) *\([0-9]*\) bytes.*/\1/p' "$tmp/info")
kv=$(sed -n 's/^kv cache (ctx [0-9]*) *\([0-9]*\) bytes.*/\1/p' "$tmp/info")
need=$(sed -n 's/^memory needed *\([0-9]*\) bytes.*/\1/p' "$tmp/info")
data=$(sed -n 's/^tensor data *\([0-9]*\) bytes.*/\1/p' "$tmp/info")
if [ -n "$ck" ] && [ "$ck" -gt 0 ] && [ $((ck % 4)) -eq 0 ] && [ -n "$need" ] && [ -n "$data" ] &&
        [ "$need" -eq $((data + kv + ck)) ]; then
    ok "info: state checkpoints (4) $ck bytes, counted in memory needed"
else
    bad "info: checkpoints '$ck', kv '$kv', data '$data', needed '$need'"; cat "$tmp/info"
fi

# the GPU runs it too (src/vulkan/recurrent.c), with the validation layer silent where
# it is installed
if "$bin" devices 2>/dev/null | grep -q 'vulkan:0'; then
    val=1 msgs=0
    ANYLLM_VK_VALIDATION=1 "$bin" devices >/dev/null 2>&1 || { val=0; msgs=off; }
    if ANYLLM_VK_VALIDATION=$val "$bin" run -m "$m" --backend vulkan -p "one two three" -n 12 \
            -s 1 >"$tmp/run" 2>"$tmp/err" && grep -q "generated 12 tokens" "$tmp/err" &&
            { [ $val -eq 0 ] || grep -q "vulkan validation: 0 messages" "$tmp/err"; }; then
        ok "run --backend vulkan: 12 tokens, validation messages: $msgs"
    else
        bad "run --backend vulkan: $(cat "$tmp/err")"
    fi
    # the prompt on the GPU, the tokens on the CPU: the states go with the sequence
    if "$bin" run -m "$m" --prefill-backend vulkan --decode-backend cpu -p "one two three" \
            -n 12 -s 1 >"$tmp/run" 2>"$tmp/err" && grep -q "generated 12 tokens" "$tmp/err" &&
            grep -q "^split: prompt on vulkan" "$tmp/err"; then
        ok "run --prefill-backend vulkan --decode-backend cpu: $(grep '^split' "$tmp/err")"
    else
        bad "run split: $(cat "$tmp/err")"
    fi
    split_serve=1
else
    echo "skip: no Vulkan device here, so --backend vulkan is not run"
fi

# serve: two slots; a second request reuses a checkpoint of the state, the next turn of
# a conversation too; two requests at once; a stream whose client hangs up is cancelled
# (tests/hybrid_serve.py)
port=$((20000 + $$ % 20000))
"$bin" serve -m "$m" --port $port --parallel 2 --chat-template chatml >"$tmp/serve.log" 2>&1 &
spid=$!
for i in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    sleep 0.3
done
if python3 "$(dirname "$0")/hybrid_serve.py" $port >"$tmp/serve.out" 2>&1; then
    ok "serve: $(grep -c '^ok' "$tmp/serve.out") checks: $(grep 'cached' "$tmp/serve.out" | sed 's/^ok *//' | tr '\n' ';')"
else
    bad "serve: $(cat "$tmp/serve.out" "$tmp/serve.log")"
fi
kill $spid 2>/dev/null
wait $spid 2>/dev/null
# the same with prompts on the GPU and tokens on the CPU: the states and checkpoints
# are handed over with the sequence
if [ -n "${split_serve:-}" ]; then
    "$bin" serve -m "$m" --port $port --parallel 2 --chat-template chatml \
        --prefill-backend vulkan --decode-backend cpu >"$tmp/serve.log" 2>&1 &
    spid=$!
    for i in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
        sleep 0.3
    done
    if python3 "$(dirname "$0")/hybrid_serve.py" $port >"$tmp/serve.out" 2>&1; then
        ok "serve --prefill-backend vulkan --decode-backend cpu: $(grep -c '^ok' "$tmp/serve.out") checks"
    else
        bad "serve split: $(cat "$tmp/serve.out" "$tmp/serve.log")"
    fi
    kill $spid 2>/dev/null
    wait $spid 2>/dev/null
fi
# --ctx-checkpoints -1: none are kept, so the same request again reuses nothing
"$bin" serve -m "$m" --port $port --parallel 1 --chat-template chatml --ctx-checkpoints -1 \
    >"$tmp/serve.log" 2>&1 &
spid=$!
for i in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    sleep 0.3
done
req='{"messages":[{"role":"user","content":"hi there"}],"max_tokens":4,"temperature":0}'
for i in 1 2; do
    curl -s -m 30 -H 'Content-Type: application/json' -d "$req" \
        "http://127.0.0.1:$port/v1/chat/completions" >"$tmp/n$i.json"
done
if grep -q '"cached_tokens":0' "$tmp/n2.json" && grep -q '"finish_reason"' "$tmp/n2.json"; then
    ok "serve --ctx-checkpoints -1: the same request again reuses nothing"
else
    bad "serve --ctx-checkpoints -1: $(cat "$tmp/n2.json" "$tmp/serve.log")"
fi
kill $spid 2>/dev/null
wait $spid 2>/dev/null

# chat: turns, /save, /load and a context that fills (the oldest turns go, the rest is
# evaluated again: a recurrent state cannot be shifted); the replies are the same
# without checkpoints, which only save work
printf '%s\n' "hello there my friend" "what is the sea" "/save $tmp/conv.json" \
    "tell me more about it" "/load $tmp/conv.json" "and the river" "and mountains too" \
    "last one please" >"$tmp/chat.in"
for k in 4 -1; do
    "$bin" chat -m "$m" --chat-template chatml --temp 0 -t 2 -c 320 -n 16 \
        --ctx-checkpoints $k <"$tmp/chat.in" >"$tmp/chat$k.out" 2>"$tmp/chat$k.err"
    echo "exit $?" >>"$tmp/chat$k.err"
done
if grep -q "exit 0" "$tmp/chat4.err" && grep -q "saved 4 messages" "$tmp/chat4.err" &&
        grep -q "loaded 4 messages" "$tmp/chat4.err" && grep -q "context full: dropped" "$tmp/chat4.err" &&
        [ "$(wc -l <"$tmp/chat4.out")" -ge 6 ] && cmp -s "$tmp/chat4.out" "$tmp/chat-1.out"; then
    ok "chat: 6 turns, /save, /load, a full context; the same replies without checkpoints"
else
    bad "chat: $(cat "$tmp/chat4.err" "$tmp/chat-1.err"; diff "$tmp/chat4.out" "$tmp/chat-1.out")"
fi

# malformed files: the same bytes with one field changed (same length)
patch_file() { # OUT FROM TO: replace the first occurrence of bytes FROM by TO
    python3 - "$m" "$1" "$2" "$3" <<'EOF'
import sys
src, out, a, b = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode()
d = open(src, 'rb').read()
i = d.find(a)
assert i >= 0 and len(a) == len(b)
open(out, 'wb').write(d[:i] + b + d[i + len(a):])
EOF
}
# a u32 value after its key: the key's bytes, the type (4), then the value
patch_u32() { gguf_patch_u32 "$m" "$@"; } # OUT KEY VALUE
# a key added: a bool array KEY of N entries, or a u32 (N < 0: -N); the header grows, so
# the data section moves (to the file's alignment, 32)
add_key() { # OUT KEY N
    python3 - "$m" "$1" "$2" "$3" <<'EOF'
import struct, sys
src, out, key, n = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
d = open(src, 'rb').read()
n_t, n_kv = struct.unpack_from('<QQ', d, 8)
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(i, t):
    if t == 8: return i + 8 + struct.unpack_from('<Q', d, i)[0]
    if t == 9:
        et, cnt = struct.unpack_from('<IQ', d, i); i += 12
        for _ in range(cnt): i = skip(i, et)
        return i
    return i + size[t]
i = 24
for _ in range(n_kv):
    i += 8 + struct.unpack_from('<Q', d, i)[0]
    i = skip(i + 4, struct.unpack_from('<I', d, i)[0])
kv_end = i
for _ in range(n_t):
    i += 8 + struct.unpack_from('<Q', d, i)[0]
    i += 4 + 8 * struct.unpack_from('<I', d, i)[0] + 4 + 8
data = (i + 31) // 32 * 32
val = struct.pack('<IIQ', 9, 7, n) + bytes([1, 1, 1, 0] * n)[:n] if n >= 0 else struct.pack('<II', 4, -n)
kv = struct.pack('<Q', len(key)) + key + val
head = d[:16] + struct.pack('<Q', n_kv + 1) + d[24:kv_end] + kv + d[kv_end:i]
open(out, 'wb').write(head + bytes((-len(head)) % 32) + d[data:])
EOF
}
patch_u32 "$tmp/m1.gguf" qwen35.ssm.time_step_rank 12
expect_error "value heads that disagree with inner_size" "$asan" run -m "$tmp/m1.gguf" -p hi -n 1
patch_u32 "$tmp/m2.gguf" qwen35.ssm.state_size 4294967295
expect_error "a state size that overflows" "$asan" run -m "$tmp/m2.gguf" -p hi -n 1
patch_u32 "$tmp/m3.gguf" qwen35.ssm.group_count 5
expect_error "key heads that do not divide the value heads" "$asan" run -m "$tmp/m3.gguf" -p hi -n 1
patch_u32 "$tmp/m4.gguf" qwen35.ssm.conv_kernel 7
expect_error "a convolution of other taps than its tensor" "$asan" run -m "$tmp/m4.gguf" -p hi -n 1
patch_file "$tmp/m5.gguf" blk.1.ssm_conv1d.weight blk.1.ssm_conv1x.weight
expect_error "a missing convolution" "$asan" run -m "$tmp/m5.gguf" -p hi -n 1
patch_u32 "$tmp/m6.gguf" qwen35.full_attention_interval 0
expect_error "a full-attention interval of 0" "$asan" run -m "$tmp/m6.gguf" -p hi -n 1
add_key "$tmp/m7.gguf" qwen35.attention.recurrent_layers 4
if "$bin" run -m "$tmp/m7.gguf" -p hi -n 1 >/dev/null 2>&1; then
    ok "the key writer makes a file that runs (recurrent_layers of 4 entries)"
else
    bad "add_key: a file with the right recurrent_layers does not run"
fi
add_key "$tmp/m8.gguf" qwen35.attention.recurrent_layers 3
expect_error "a recurrent-layer array of 3 for 4 layers" "$asan" run -m "$tmp/m8.gguf" -p hi -n 1
add_key "$tmp/m9.gguf" qwen35.nextn_predict_layers -4
expect_error "as many MTP blocks as blocks" "$asan" run -m "$tmp/m9.gguf" -p hi -n 1

# gen_moe ARCH: a mixture-of-experts hybrid of the same shape into $m
gen_moe() {
    m=$tmp/$1.gguf
    "$bin" gen-model "$m" --arch "$1" --dim 256 --layers 4 --heads 4 --kv-heads 2 \
        --head-dim 64 --ffn 256 --experts 8 --experts-used 2 --ffn-exp 128 --vocab 512 \
        --type Q8_0 -t 2 >"$tmp/out" 2>&1 || { bad "gen-model $1: $(cat "$tmp/out")"; return 1; }
}

# qwen3next: a recurrent layer with neither layout of its input projection
if gen_moe qwen3next; then
    patch_file "$tmp/n1.gguf" blk.1.ssm_in.weight blk.1.ssm_xx.weight
    expect_error "qwen3next without ssm_in or attn_qkv" "$asan" run -m "$tmp/n1.gguf" -p hi -n 1
    patch_file "$tmp/n2.gguf" blk.2.ssm_ba.weight blk.2.ssm_xx.weight
    expect_error "qwen3next without ssm_ba" "$asan" run -m "$tmp/n2.gguf" -p hi -n 1
fi

# qwen35moe: a layer without its shared expert's gate, more experts used than there are
if gen_moe qwen35moe; then
    patch_file "$tmp/e1.gguf" blk.3.ffn_gate_inp_shexp.weight blk.3.ffn_gate_inp_shexx.weight
    expect_error "qwen35moe without a shared expert's gate" "$asan" run -m "$tmp/e1.gguf" -p hi -n 1
    patch_u32 "$tmp/e2.gguf" qwen35moe.expert_used_count 9
    expect_error "qwen35moe using 9 of 8 experts" "$asan" run -m "$tmp/e2.gguf" -p hi -n 1
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
