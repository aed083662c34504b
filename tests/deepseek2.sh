#!/bin/sh
# deepseek2 (multi-head latent attention) through the commands, on a generated model
# (random weights, DeepSeek-V3's layout at a small size; test_deepseek2.c holds its
# logits to llama.cpp's): info's latent cache, run with and without n-gram drafts,
# chat, perplexity, bench (the latent rows are all a decoded token reads of the cache)
# and serve each run on it; --mla-expand's two forms; malformed files (ranks larger than the embedding, no
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
# the expanded form's f32 weights: k_b transposed and v_b, 4 heads of 64 x 256 each, 3
# layers: 1.5 MiB; a q8_0 cache never takes it; --mla-expand -1 makes none
"$bin" info -m "$m" --mla-expand -1 >"$tmp/info_a" 2>&1
if grep -q '^prompt attention       expanded for batches of 192 tokens or more; .* take 1.5 MiB' "$tmp/info" &&
        grep -q '^prompt attention       absorbed only (the expanded form takes an f32 cache)' "$tmp/info8" &&
        grep -q '^prompt attention       absorbed only (--mla-expand -1); .* take 0.0 MiB' "$tmp/info_a"
then ok "info: $(grep '^prompt attention' "$tmp/info" | cut -c24-)"
else bad "info: $(grep -E '^prompt attention' "$tmp/info" "$tmp/info8" "$tmp/info_a")"; fi

model_commands "$m" deepseek2 "--chat-template glm47" "-ctk q8_0"

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

# --mla-expand: a prompt of 40 tokens in the expanded form (batches of 2 or more) and in
# the absorbed form (never), --precise (the default rounds the absorbed form's
# activations to 8 bits): the same logits within rounding, not the same bits (the
# option reaches the context); a value below -1 is refused
ids=$(seq -s, 1 40)
"$bin" logits -m "$m" --tokens "$ids" -o "$tmp/le" --mla-expand 2 --precise -t 2 >"$tmp/err" 2>&1 &&
    "$bin" logits -m "$m" --tokens "$ids" -o "$tmp/la" --mla-expand -1 --precise -t 2 >>"$tmp/err" 2>&1
res=$(python3 - "$tmp/le" "$tmp/la" 2>&1 <<'PY'
import struct, sys
e, a = (open(p, 'rb').read() for p in sys.argv[1:3])
assert len(e) == len(a) == 40 * 512 * 4, (len(e), len(a))
e, a = (struct.unpack(f'{len(x) // 4}f', x) for x in (e, a))
num = sum((x - y) ** 2 for x, y in zip(e, a)); den = sum(y * y for y in a)
assert 0 < num / den < 1e-6, num / den
print(f"--mla-expand 2 against -1: NMSE {num / den:.1e}")
PY
)
if echo "$res" | grep -q '^--mla-expand 2 against'; then ok "$res"
else bad "logits --mla-expand: $res $(tail -3 "$tmp/err")"; fi
if "$bin" logits -m "$m" --tokens 1,2 -o "$tmp/lx" --mla-expand -2 >"$tmp/out" 2>&1; then
    bad "--mla-expand -2 was taken"
elif [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q -- '--mla-expand' "$tmp/out"; then
    ok "--mla-expand -2 refused: $(cat "$tmp/out")"
else bad "--mla-expand -2: $(cat "$tmp/out")"; fi

# malformed files: one line each naming the fault, no crash
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
