#!/bin/sh
# Mixtures of experts through the command line, on small models gen-model writes (the
# reference logits of ../shared/models/moe are build/test_ref's):
#   - gen-model writes qwen3moe and gpt-oss files that load and run, and refuses
#     expert options that do not fit;
#   - `info` reports the bytes a token reads: a token uses k of the experts, so it
#     reads fewer bytes than the file holds;
#   - YaRN rope scaling: a factor of 1 gives the very logits of no scaling (the
#     factors and the attention scale are wired through), a factor of 32 changes them,
#     and Vulkan, when there is a device, computes the same as the CPU;
#   - the CPU's fused experts (moe_ffn, src/cpu/moe.c) against the plain ops on whole
#     models (ANYLLM_MOE_FUSE=0): batches of 1 to 16 tokens give the same logits, byte
#     for byte, and a greedy continuation (one token at a time) the same text, in both
#     activation modes, with the weights in the x16 layout and in rows;
#   - Vulkan's fused experts (moe_ffn, src/vulkan/moe.c), when there is a device, on
#     the reference models of ../shared/models/moe: the first 8 prompt tokens as one
#     batch (fused) against the reference's logits of those positions, the same
#     logits as the plain ops (ANYLLM_VK_TUNE=fuse=0) and the same greedy text token
#     by token, and fewer dispatches per decoded token than the plain ops.
. "$(dirname "$0")/lib.sh"
cmp_bin=$BUILD/test_ref
shape="--dim 256 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 --ffn 512 --vocab 1024"
experts="--experts 8 --experts-used 2 --ffn-exp 128"
toks=$(seq -s, 5 60)

for arch in qwen3moe gpt-oss; do
    f=$tmp/$arch.gguf
    swa=""; [ $arch = gpt-oss ] && swa="--swa 16"
    if "$bin" gen-model "$f" --arch $arch $shape $experts $swa --type Q8_0 \
            >/dev/null 2>"$tmp/err" &&
        "$bin" logits -m "$f" --tokens "$toks" --out "$tmp/$arch.f32" -t 2 2>"$tmp/err"; then
        ok "gen-model $arch runs: $("$bin" info -m "$f" | grep '^features' | cut -c24-120)"
    else
        bad "gen-model $arch: $(head -n 3 "$tmp/err")"
        continue
    fi
    file_bytes=$(wc -c <"$f")
    per_token=$("$bin" info -m "$f" | sed -nE 's/^read per token +([0-9]+) bytes.*/\1/p')
    if [ -n "$per_token" ] && [ "$per_token" -gt 0 ] && [ "$per_token" -lt "$file_bytes" ]; then
        ok "$arch: a token reads $per_token of the file's $file_bytes bytes"
    else
        bad "$arch: read per token '$per_token', file $file_bytes bytes"
    fi
done

expect_error "gen-model qwen3moe without --experts" "$bin" gen-model "$tmp/x.gguf" \
    --arch qwen3moe $shape --type Q8_0
expect_error "gen-model --experts-used beyond --experts" "$bin" gen-model "$tmp/x.gguf" \
    --arch qwen3moe $shape --experts 4 --experts-used 8 --ffn-exp 64 --type Q8_0
expect_error "gen-model --experts on a dense architecture" "$bin" gen-model "$tmp/x.gguf" \
    --arch llama --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 1024 \
    $experts --type Q8_0

# YaRN: the same weights (the same seed) without scaling, with factor 1 and factor 32
for y in 0 1 32; do
    extra=""; [ $y -gt 0 ] && extra="--yarn $y"
    "$bin" gen-model "$tmp/y$y.gguf" --arch gpt-oss $shape $experts --swa 16 --ctx 4096 \
        --type F16 $extra >/dev/null 2>&1 &&
        "$bin" logits -m "$tmp/y$y.gguf" --tokens "$toks" --out "$tmp/y$y.f32" -t 2 \
        2>"$tmp/err" || bad "YaRN $y: $(head -n 3 "$tmp/err")"
done
if cmp -s "$tmp/y0.f32" "$tmp/y1.f32"; then ok "YaRN factor 1: the logits of no scaling, bit for bit"
else bad "YaRN factor 1 differs from no scaling"; fi
if ! "$cmp_bin" --compare "$tmp/y32.f32" "$tmp/y0.f32" 1e-3 >"$tmp/out" 2>&1; then
    ok "YaRN factor 32 changes the logits: $(cat "$tmp/out")"
else
    bad "YaRN factor 32 changes nothing: $(cat "$tmp/out")"
fi
if "$bin" info -m "$tmp/y32.gguf" | grep -q 'YaRN rope scaling'; then ok "info names YaRN"
else bad "info does not name YaRN"; fi
if "$bin" devices 2>/dev/null | grep -q '^vulkan:0'; then
    "$bin" logits --backend vulkan -m "$tmp/y32.gguf" --tokens "$toks" --out "$tmp/y32v.f32" \
        2>"$tmp/err"
    if res=$("$cmp_bin" --compare "$tmp/y32v.f32" "$tmp/y32.f32" 1e-6 2>&1); then
        ok "YaRN on Vulkan equals the CPU: $res"
    else
        bad "YaRN on Vulkan: $res $(head -n 2 "$tmp/err")"
    fi
else
    echo "note: no Vulkan device: YaRN on Vulkan not compared"
fi

# Fused experts against the plain ops: qwen3moe with 8 of 32 Q4_K experts (bench-qwen3moe's
# shape in small), gpt-oss with MXFP4 experts and biases, and the Q8_0 files above
"$bin" gen-model "$tmp/q4k.gguf" --arch qwen3moe $shape --experts 32 --experts-used 8 \
    --ffn-exp 256 --type Q4_K_M >/dev/null 2>&1
"$bin" gen-model "$tmp/mxfp4.gguf" --arch gpt-oss $shape --experts 16 --experts-used 4 \
    --ffn-exp 128 --swa 16 --type MXFP4_MOE >/dev/null 2>&1
for f in "$tmp/q4k.gguf" "$tmp/mxfp4.gguf" "$tmp/qwen3moe.gguf" "$tmp/gpt-oss.gguf"; do
    name=$(basename "$f" .gguf)
    for mode in q8 q8x2; do
        for x in 1 0; do
            why=""
            for len in 1 3 8 16; do
                t=$(seq -s, 5 $((4 + len)))
                for fuse in 1 0; do
                    ANYLLM_MOE_FUSE=$fuse ANYLLM_X16=$x "$bin" logits -m "$f" --tokens "$t" \
                        --backend cpu:$mode -t 2 --out "$tmp/l$fuse.f32" 2>>"$tmp/err" ||
                        why="$why; logits exit $?"
                done
                cmp -s "$tmp/l1.f32" "$tmp/l0.f32" || why="$why; $len tokens' logits differ"
            done
            for fuse in 1 0; do
                ANYLLM_MOE_FUSE=$fuse ANYLLM_X16=$x "$bin" run -m "$f" -p "Once upon a time" \
                    -n 12 --temp 0 --ignore-eos --backend cpu:$mode -t 2 >"$tmp/r$fuse.txt" \
                    2>>"$tmp/err" || why="$why; run exit $?"
            done
            cmp -s "$tmp/r1.txt" "$tmp/r0.txt" || why="$why; greedy text differs"
            if [ -z "$why" ] && [ -s "$tmp/l1.f32" ] && [ -s "$tmp/r1.txt" ]; then
                ok "$name cpu:$mode x16=$x: fused experts give the plain ops' logits and text"
            else
                bad "$name cpu:$mode x16=$x: fused experts$why"
            fi
        done
    done
done
expect_flag_default ANYLLM_MOE_FUSE "$tmp/q4k.gguf"

# Vulkan's fused experts against the reference logits and the plain ops
vk_moe() { # NAME: a reference model of $SHARED/models/moe
    m=$SHARED/models/moe/$1
    why=""
    all=$(tr -d ' \n' <"$m.ref.json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
    t8=$(echo "$all" | cut -d, -f1-8)
    n_vocab=$(($(wc -c <"$m.logits.f32") / 4 / $(echo "$all" | tr , '\n' | wc -l)))
    head -c $((8 * n_vocab * 4)) "$m.logits.f32" >"$tmp/ref8.f32"
    for fuse in 1 0; do
        ANYLLM_VK_TUNE=fuse=$fuse "$bin" logits --backend vulkan -m "$m.gguf" --tokens "$t8" \
            --out "$tmp/v$fuse.f32" 2>>"$tmp/err" || why="$why; logits exit $?"
        ANYLLM_VK_TUNE=fuse=$fuse "$bin" run --backend vulkan -m "$m.gguf" -p "Once upon a time" \
            -n 8 --temp 0 --ignore-eos >"$tmp/vr$fuse.txt" 2>>"$tmp/err" || why="$why; run exit $?"
        ANYLLM_VK_TUNE=fuse=$fuse "$bin" bench --backend vulkan -m "$m.gguf" -p 0 -n 4 -r 1 \
            -o json 2>>"$tmp/err" | sed -nE 's/.*"vk_dispatches_per_token": ([0-9.]+).*/\1/p' \
            >"$tmp/vd$fuse.txt"
    done
    ref=$("$cmp_bin" --compare "$tmp/v1.f32" "$tmp/ref8.f32" 1e-3 2>&1) || why="$why; vs reference $ref"
    plain=$("$cmp_bin" --compare "$tmp/v1.f32" "$tmp/v0.f32" 1e-9 2>&1) || why="$why; vs plain $plain"
    cmp -s "$tmp/vr1.txt" "$tmp/vr0.txt" && [ -s "$tmp/vr1.txt" ] || why="$why; greedy text differs"
    d1=$(cat "$tmp/vd1.txt") d0=$(cat "$tmp/vd0.txt")
    awk -v a="$d1" -v b="$d0" 'BEGIN { exit !(a > 0 && a < b) }' ||
        why="$why; dispatches per token fused '$d1', plain '$d0'"
    if [ -z "$why" ]; then
        ok "$1 vulkan: fused experts vs reference $ref, vs plain $plain, greedy text equal, dispatches per token $d0 -> $d1"
    else
        bad "$1 vulkan: fused experts$why"; tail -n 3 "$tmp/err"
    fi
}
if "$bin" devices 2>/dev/null | grep -q '^vulkan:0'; then
    for name in ref-qwen3moe-Q4_K_M ref-qwen3moe-Q8_0 ref-gpt-oss-MXFP4_MOE; do
        [ -f "$SHARED/models/moe/$name.gguf" ] && vk_moe $name
    done
else
    echo "note: no Vulkan device: Vulkan's fused experts not checked"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
