#!/bin/sh
# The x16 weight layout against the file's rows on whole models (src/cpu/ops.h): every
# reference model of ../shared/models/ref and models/moe, and SmolLM2 and Gemma 3 where
# they were downloaded (their output matrices are the tied embedding tables), gives
# the same prompt logits, byte for byte, and the same greedy continuation (one token
# at a time: the GEMV path) with the weights moved into x16 (the default) and read in
# place (ANYLLM_X16=0), in both activation modes, on each ISA whose kernels read x16
# (AVX-512 and AVX2) that this CPU runs. bench's weights_copied_bytes says that the
# layout was taken at all, and not with --no-repack. On a CPU without AVX2 the
# comparison is skipped with the reason.
. "$(dirname "$0")/lib.sh"
skip=0
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; exit $?; }

refs=$(ls "$SHARED"/models/ref/*.gguf "$SHARED"/models/moe/*.gguf 2>/dev/null)
if [ -z "$refs" ]; then
    echo "skip: $SHARED/models/ref not found"; skip=1; finish
fi
case $("$bin" --version 2>&1) in
*"cpu (avx512"*) isas="avx512 avx2" ;;
*"cpu (avx2"*) isas=avx2 ;;
*)
    echo "skip: x16 is read by the AVX-512 and AVX2 kernels; this CPU runs" \
        "$("$bin" --version | grep backends)"
    skip=1; finish ;;
esac

# bytes of weights copied at load, from bench's JSON
copied() {
    m=$1; shift
    "$bin" bench -m "$m" -p 8 -n 0 -r 1 -o json "$@" 2>/dev/null |
        sed -n 's/.*"weights_copied_bytes": \([0-9]*\).*/\1/p' | head -n 1
}
first=$(echo "$refs" | head -n 1)
c1=$(copied "$first"); c0=$(ANYLLM_X16=0 copied "$first"); cn=$(copied "$first" --no-repack)
if [ -n "$c1" ] && [ "$c1" -gt 0 ] && [ "$c0" = 0 ] && [ "$cn" = 0 ]; then
    ok "$(basename "$first"): $c1 bytes of weights moved into x16, none with ANYLLM_X16=0 or --no-repack"
else
    bad "$(basename "$first"): weights copied: '$c1' by default, '$c0' with ANYLLM_X16=0, '$cn' with --no-repack"
fi
expect_flag_default ANYLLM_X16 "$first"
expect_flag_default ANYLLM_X16_PF "$first"
# the in-place K-quant kernels' own prefetches (on by default on Intel CPUs) change no
# bit
kq=$SHARED/models/ref/ref-llama-Q4_K_M.gguf
for pf in 0 1; do
    ANYLLM_X16=0 ANYLLM_X16_PF=$pf "$bin" logits -m "$kq" --tokens 1,45,74,31,26 \
        --backend cpu -t 2 --out "$tmp/pf$pf.f32" 2>/dev/null
done
if [ -s "$tmp/pf0.f32" ] && cmp -s "$tmp/pf0.f32" "$tmp/pf1.f32"; then
    ok "ANYLLM_X16_PF=0 and 1 on $(basename "$kq"): the same logits, byte for byte"
else
    bad "ANYLLM_X16_PF=0 and 1 give different logits (or none)"
fi

models="$refs $(real_models)"
for isa in $isas; do
export ANYLLM_ISA=$isa
for m in $models; do
    name=$(basename "$m" .gguf)
    json=${m%.gguf}.ref.json
    if [ -f "$json" ]; then
        tokens=$(tr -d ' \n' <"$json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
    else
        tokens=1,450,7483,310,263,931,727,1023,338,263,2217
    fi
    for mode in q8 q8x2; do
        for x in 0 1; do
            ANYLLM_X16=$x "$bin" logits -m "$m" --tokens "$tokens" --backend cpu:$mode -t 2 \
                --out "$tmp/l$x.f32" 2>"$tmp/err$x" || echo "exit $?" >>"$tmp/err$x"
            ANYLLM_X16=$x "$bin" run -m "$m" -p "Once upon a time" -n 12 --temp 0 --ignore-eos \
                --backend cpu:$mode -t 2 >"$tmp/r$x.txt" 2>>"$tmp/err$x" ||
                echo "exit $?" >>"$tmp/err$x"
        done
        if [ -s "$tmp/l1.f32" ] && ! grep -q exit "$tmp/err0" "$tmp/err1" &&
                cmp -s "$tmp/l0.f32" "$tmp/l1.f32" && cmp -s "$tmp/r0.txt" "$tmp/r1.txt"; then
            ok "$name $isa cpu:$mode: x16 and rows give the same logits and greedy text"
        else
            bad "$name $isa cpu:$mode: x16 and rows differ: $(grep exit "$tmp/err0" "$tmp/err1")"
        fi
    done
done
done
finish
