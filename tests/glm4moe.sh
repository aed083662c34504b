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

model_commands "$m" glm4moe "--chat-template chatml" ""

# malformed files: one line each naming the fault, no crash
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
