# hybrid.sh: a qwen35 file (gated delta-net layers, test_hybrid checks its logits)
# through the commands: run, bench (pp, tg, at depth), perplexity, info, serve (two
# slots; the same request twice gives the same text; a stream), a GPU backend without
# the recurrent ops (refused with one line; auto runs on the CPU), and malformed
# files (sizes that disagree or overflow, a missing convolution), each refused with one
# line, through the ASan build where there is one.
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
else
    echo "skip: no Vulkan device here, so --backend vulkan is not run"
fi

# serve: two slots; the same request twice gives the same text (the second cannot
# reuse the first's recurrent state at an earlier position: it starts over)
port=$((20000 + $$ % 20000))
"$bin" serve -m "$m" --port $port --parallel 2 --chat-template chatml >"$tmp/serve.log" 2>&1 &
spid=$!
for i in 1 2 3 4 5 6 7 8 9 10; do
    curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    sleep 0.3
done
req='{"messages":[{"role":"user","content":"hi there"}],"max_tokens":8,"temperature":0}'
for i in 1 2; do
    curl -s -m 30 -H 'Content-Type: application/json' -d "$req" \
        "http://127.0.0.1:$port/v1/chat/completions" >"$tmp/r$i.json"
done
if grep -q '"finish_reason"' "$tmp/r1.json" &&
        [ "$(sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' "$tmp/r1.json")" = \
          "$(sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' "$tmp/r2.json")" ]; then
    ok "serve: the same request twice, the same reply"
else
    bad "serve: $(cat "$tmp/r1.json" "$tmp/r2.json" "$tmp/serve.log")"
fi
curl -s -m 30 -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"again"}],"max_tokens":6,"stream":true}' \
    "http://127.0.0.1:$port/v1/chat/completions" >"$tmp/stream"
if grep -q 'data: \[DONE\]' "$tmp/stream"; then ok "serve: a stream ends"
else bad "serve stream: $(cat "$tmp/stream")"; fi
kill $spid 2>/dev/null
wait $spid 2>/dev/null

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
patch_u32() { # OUT KEY VALUE
    python3 - "$m" "$1" "$2" "$3" <<'EOF'
import struct, sys
src, out, key, v = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
d = open(src, 'rb').read()
i = d.find(key) + len(key)
assert struct.unpack_from('<I', d, i)[0] == 4
open(out, 'wb').write(d[:i + 4] + struct.pack('<I', v) + d[i + 8:])
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

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
