#!/bin/sh
# gemma4 (Gemma 4) through the commands, on a generated model (random weights, the
# E2B/E4B layout at a small size: sliding layers with heads of their own, the last
# layers on earlier layers' caches, per-layer inputs; test_gemma4.c holds its logits to
# llama.cpp's): info, run with and without n-gram drafts, chat, perplexity, bench and
# serve each run on it; malformed files (a window pattern of the wrong length, shared
# layers whose sources are not a sliding and a global layer, per-layer inputs wider
# than the embedding, a layer with its own cache but no keys) are refused with one
# line, under ASan where it is built.
. "$(dirname "$0")/lib.sh"
asan=$BUILD/asan/anyllm
[ -x "$asan" ] || asan=$bin
m=$tmp/g4.gguf
if ! "$bin" gen-model "$m" --arch gemma4 --dim 256 --layers 6 --heads 4 --kv-heads 2 \
        --head-dim 128 --ffn 512 --vocab 512 --swa 16 --swa-period 3 --shared-kv 3 --ple 64 \
        --type Q8_0 -t 2 >"$tmp/out" 2>&1; then
    bad "gen-model gemma4: $(cat "$tmp/out")"
    echo "$pass passed, $fail failed"
    exit 1
fi

# layers 0 and 1 slide (2 kv heads of 64), layer 2 is global (2 of 128), layers 3-5
# read those caches: 4096 bytes per position in f32
"$bin" info -m "$m" >"$tmp/info" 2>&1
if grep -q '^features .*sliding heads of 64 (64 rotating), normed values, the last 3 layers on earlier layers. caches, per-layer inputs of 64, output scales on 6 layers' "$tmp/info" &&
        grep -q '^kv per position        4096 bytes' "$tmp/info"
then ok "info: $(grep '^features' "$tmp/info" | cut -c24- | sed 's/.*sliding window/sliding window/')"
else bad "info: $(grep -E '^(features|kv per)' "$tmp/info")"; fi

model_commands "$m" gemma4 "" "-ctk q8_0"

# the 26B-A4B's layout: experts beside the dense FFN of each layer
m2=$tmp/g4moe.gguf
"$bin" gen-model "$m2" --arch gemma4 --dim 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 128 \
    --ffn 512 --vocab 512 --swa 16 --swa-period 2 --experts 8 --experts-used 2 --ffn-exp 128 \
    --type Q8_0 -t 2 >"$tmp/out" 2>&1 &&
    "$bin" run -m "$m2" -p "one two three" -n 16 --temp 0 --ignore-eos -t 2 >"$tmp/plain" 2>"$tmp/err" &&
    "$bin" bench -m "$m2" -p 16 -n 4 -r 1 -t 2 -o json >"$tmp/bench" 2>>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '"model_type": "gemma4"' "$tmp/bench")" = 2 ] &&
        "$bin" info -m "$m2" 2>/dev/null | grep -q 'GELU-gated FFN and beside it an FFN of 8 experts'
then ok "experts beside the FFN: run and bench"
else bad "experts: rc $rc $(tail -3 "$tmp/err")"; fi
gguf_patch_u32 "$m2" "$tmp/m5.gguf" gemma4.expert_used_count 9
expect_error "more experts used than there are" "$asan" run -m "$tmp/m5.gguf" -p hi -n 1

# malformed files: one line each naming the fault, no crash
gguf_patch_u32 "$m" "$tmp/m1.gguf" gemma4.attention.shared_kv_layers 4
refused "shared layers whose sources are two sliding layers" "$tmp/m1.gguf" shared_kv_layers
gguf_patch_u32 "$m" "$tmp/m2.gguf" gemma4.embedding_length_per_layer_input 4096
refused "per-layer inputs wider than the embedding" "$tmp/m2.gguf" embedding_length_per_layer_input
gguf_patch_u32 "$m" "$tmp/m3.gguf" gemma4.block_count 5 # the pattern's 6 bools then
python3 - "$m" "$tmp/m4.gguf" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
open(sys.argv[2], 'wb').write(d.replace(b'blk.1.attn_k.weight', b'blk.1.attn_k.weighx', 1))
PY
refused "a window pattern of the wrong length" "$tmp/m3.gguf" sliding_window_pattern
refused "a layer with its own cache but no keys" "$tmp/m4.gguf" attn_k.weight

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
