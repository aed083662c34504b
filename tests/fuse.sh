#!/bin/sh
# The CPU's fused matmuls (matmul_multi, matmul_glu, matmul_add: src/cpu/fuse.c)
# against the plain ops on whole models: every reference model of ../shared/models/ref,
# qwen3 and moe, and SmolLM2 and Gemma 3 where they were downloaded, give the same
# logits for a batch of 1 and of 3 prompt tokens (batches the fused ops take: at most
# a tile of tokens) and the same greedy continuation (one token at a time) with the
# fusion on (the default) and off (ANYLLM_CPU_FUSE=0), in both activation modes.
# tests/test_fuse.c checks the ops themselves, and that they take those batches.
. "$(dirname "$0")/lib.sh"
skip=0
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; exit $?; }

refs=$(ls "$SHARED"/models/ref/*.gguf "$SHARED"/models/qwen3/*.gguf \
    "$SHARED"/models/moe/*.gguf 2>/dev/null)
if [ -z "$refs" ]; then
    echo "skip: $SHARED/models/ref not found"; skip=1; finish
fi
first=$(echo "$refs" | head -n 1)
expect_flag_default ANYLLM_CPU_FUSE "$first"

models="$refs $(real_models)"
for m in $models; do
    name=$(basename "$m" .gguf)
    for mode in q8 q8x2; do
        why=""
        for f in 1 0; do
            for toks in 1 1,2,3; do
                n=$(echo "$toks" | tr , '\n' | wc -l)
                ANYLLM_CPU_FUSE=$f "$bin" logits -m "$m" --tokens "$toks" --backend cpu:$mode \
                    -t 2 --out "$tmp/l$f-$n.f32" 2>>"$tmp/err" || why="$why; logits exit $?"
            done
            ANYLLM_CPU_FUSE=$f "$bin" run -m "$m" -p "Once upon a time" -n 8 --temp 0 \
                --ignore-eos --backend cpu:$mode -t 2 >"$tmp/r$f.txt" 2>>"$tmp/err" ||
                why="$why; run exit $?"
        done
        for n in 1 3; do
            cmp -s "$tmp/l1-$n.f32" "$tmp/l0-$n.f32" || why="$why; $n tokens' logits differ"
        done
        cmp -s "$tmp/r1.txt" "$tmp/r0.txt" || why="$why; greedy text differs"
        if [ -z "$why" ] && [ -s "$tmp/l1-3.f32" ] && [ -s "$tmp/r1.txt" ]; then
            ok "$name cpu:$mode: fused matmuls give the plain ops' logits and text"
        else
            bad "$name cpu:$mode: fused matmuls$why"
        fi
    done
done
finish
