#!/bin/sh
# End-to-end tests of `anyllm quantize` and `anyllm gen-model`:
#   - the F16 reference model quantized to Q8_0, Q4_0 and Q4_K_M is byte-identical to the
#     file llama.cpp's llama-quantize made, and its logits match llama.cpp's for that file;
#   - the F32 gpt-oss model quantized to MXFP4_MOE is byte-identical to llama.cpp's file;
#   - generated benchmark models load (`info`), run (`logits`) and are deterministic;
#   - bad use fails with one line on stderr, a non-zero exit, and no output file.
# Env: BUILD (default build), SHARED (default ../shared). Last line: "N passed, M failed".
. "$(dirname "$0")/lib.sh"

if [ ! -x "$bin" ]; then
    echo "FAIL $bin not found (run make first)"
    echo "0 passed, 1 failed"
    exit 1
fi
ref=$SHARED/models/ref
if [ ! -f "$ref/ref-llama-f16.gguf" ]; then
    echo "skip: $ref/ref-llama-f16.gguf not found (the shared test data is missing)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

# ---- the reference model, quantized as llama.cpp does ----------------------------------
tokens=$(tr -d ' \n' <"$ref/ref-llama-f16.ref.json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
for type in Q8_0 Q4_0 Q4_K_M; do
    out=$tmp/ref-$type.gguf
    if ! "$bin" quantize "$ref/ref-llama-f16.gguf" "$out" "$type" -t 2 >"$tmp/log" 2>&1; then
        bad "quantize ref-llama-f16 to $type"; cat "$tmp/log"; continue
    fi
    ok "quantize ref-llama-f16 to $type: $(tail -n 1 "$tmp/log")"
    if cmp -s "$out" "$ref/ref-llama-$type.gguf"; then
        ok "$type file is byte-identical to llama.cpp's ref-llama-$type.gguf"
    else
        bad "$type file differs from llama.cpp's ref-llama-$type.gguf"
    fi
    if "$bin" logits -m "$out" --tokens "$tokens" --out "$tmp/l.f32" -t 2 >/dev/null &&
            "$BUILD/test_ref" --compare "$tmp/l.f32" "$ref/ref-llama-$type.logits.f32" 1e-3 \
                >"$tmp/cmp" 2>&1; then
        ok "$type logits match llama.cpp's: $(cat "$tmp/cmp")"
    else
        bad "$type logits vs llama.cpp's"; cat "$tmp/cmp"
    fi
done
# gpt-oss in llama.cpp's MXFP4_MOE: MXFP4 experts, Q8_0 elsewhere, the whole file byte for
# byte (metadata included). gpt-oss need not be loadable: quantize reads only the GGUF.
moe=$SHARED/models/moe
if [ ! -f "$moe/ref-gpt-oss-f32.gguf" ]; then
    echo "skip: $moe/ref-gpt-oss-f32.gguf not found: no MXFP4_MOE check"
elif ! "$bin" quantize "$moe/ref-gpt-oss-f32.gguf" "$tmp/gpt-oss.gguf" mxfp4_moe -t 2 \
        >"$tmp/log" 2>&1; then
    bad "quantize ref-gpt-oss-f32 to MXFP4_MOE"; cat "$tmp/log"
elif cmp -s "$tmp/gpt-oss.gguf" "$moe/ref-gpt-oss-MXFP4_MOE.gguf"; then
    ok "MXFP4_MOE file is byte-identical to llama.cpp's ref-gpt-oss-MXFP4_MOE.gguf"
    echo "     $(tail -n 1 "$tmp/log")"
else
    bad "MXFP4_MOE file differs from llama.cpp's ref-gpt-oss-MXFP4_MOE.gguf"
    cmp "$tmp/gpt-oss.gguf" "$moe/ref-gpt-oss-MXFP4_MOE.gguf"
fi
if "$bin" info -m "$moe/ref-gpt-oss-MXFP4_MOE.gguf" 2>/dev/null |
        grep -q 'blk.0.ffn_up_exps.weight *MXFP4'; then
    ok "info lists llama.cpp's MXFP4 expert tensors"
elif [ -f "$moe/ref-gpt-oss-MXFP4_MOE.gguf" ]; then
    bad "info on ref-gpt-oss-MXFP4_MOE.gguf"
fi

# lower-case type names and the BF16/F16 conversions
if "$bin" quantize "$ref/ref-llama-f16.gguf" "$tmp/bf16.gguf" bf16 -t 2 >/dev/null 2>&1 &&
        "$bin" info -m "$tmp/bf16.gguf" | grep -q 'token_embd.weight *BF16'; then
    ok "quantize to bf16"
else
    bad "quantize to bf16"
fi

# ---- generated benchmark models ---------------------------------------------------------
gen() { # gen OUT ARCH TYPE [extra options]
    o=$1; a=$2; t=$3; shift 3
    "$bin" gen-model "$o" --arch "$a" --dim 256 --layers 2 --heads 8 --kv-heads 2 --ffn 640 \
        --vocab 512 --ctx 256 --type "$t" "$@" >"$tmp/gen.log" 2>&1
}
for spec in "llama Q4_0" "llama Q4_K_M" "qwen2 Q8_0 --tied" "qwen2 Q5_K_M --tied"; do
    set -- $spec
    m=$tmp/gen-$1-$2.gguf
    if gen "$m" "$@" && "$bin" info -m "$m" >"$tmp/info" 2>&1 &&
            grep -q 'anyllm random benchmark model' "$tmp/info" && grep -q '^parameters' "$tmp/info" &&
            "$bin" logits -m "$m" --tokens 1,100,200,511 --out "$tmp/g.f32" -t 2 >/dev/null &&
            [ "$(wc -c <"$tmp/g.f32")" -eq $((4 * 512 * 4)) ]; then
        ok "gen-model $spec: info and logits work"
    else
        bad "gen-model $spec"; cat "$tmp/gen.log" "$tmp/info"
    fi
done
gen "$tmp/d1.gguf" llama Q4_K_M --seed 7 -t 1 && gen "$tmp/d2.gguf" llama Q4_K_M --seed 7 -t 2 &&
    gen "$tmp/d3.gguf" llama Q4_K_M --seed 8 -t 2
if cmp -s "$tmp/d1.gguf" "$tmp/d2.gguf" && ! cmp -s "$tmp/d1.gguf" "$tmp/d3.gguf"; then
    ok "gen-model is deterministic for a seed, whatever the thread count"
else
    bad "gen-model determinism"
fi

# ---- bad use ---------------------------------------------------------------------------
f16=$ref/ref-llama-f16.gguf
expect_error "quantize without arguments" "$bin" quantize
expect_error "quantize: unknown type" "$bin" quantize "$f16" "$tmp/x.gguf" Q3_X
expect_error "quantize: missing input" "$bin" quantize /nonexistent.gguf "$tmp/x.gguf" Q8_0
expect_error "quantize: unwritable output" "$bin" quantize "$f16" /nonexistent/dir/x.gguf Q8_0
expect_error "quantize: input already quantized" "$bin" quantize "$ref/ref-llama-Q8_0.gguf" "$tmp/x.gguf" Q4_0
expect_error "quantize: output is the input" "$bin" quantize "$tmp/bf16.gguf" "$tmp/bf16.gguf" Q8_0
expect_error "quantize: bad thread count" "$bin" quantize "$f16" "$tmp/x.gguf" Q8_0 -t 0
expect_error "quantize: not a gguf" "$bin" quantize /etc/hostname "$tmp/x.gguf" Q8_0
if [ ! -e "$tmp/x.gguf" ] && [ ! -e "$tmp/x.gguf.partial" ]; then
    ok "failed runs leave no output file"
else
    bad "a failed run left $tmp/x.gguf or its .partial"
fi
expect_error "gen-model without options" "$bin" gen-model "$tmp/x.gguf"
expect_error "gen-model: bad arch" "$bin" gen-model "$tmp/x.gguf" --arch gpt2 --dim 64 --layers 1 \
    --heads 2 --kv-heads 1 --ffn 64 --vocab 300 --type Q8_0
expect_error "gen-model: heads do not divide dim" "$bin" gen-model "$tmp/x.gguf" --arch llama \
    --dim 100 --layers 1 --heads 3 --kv-heads 1 --ffn 64 --vocab 300 --type Q8_0
expect_error "gen-model: vocab too small" "$bin" gen-model "$tmp/x.gguf" --arch llama --dim 64 \
    --layers 1 --heads 2 --kv-heads 1 --ffn 64 --vocab 100 --type Q8_0
expect_error "gen-model: unwritable output" "$bin" gen-model /nonexistent/dir/x.gguf --arch llama \
    --dim 64 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --vocab 300 --type Q8_0

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
