#!/bin/sh
# AMX against VNNI on whole models: every reference model of ../shared/models/ref and
# models/moe (experts in MXFP4 and Q4_K among them) gives the same logits file, byte for
# byte, with prompt batches on AMX tiles (ANYLLM_AMX=1) and on the AVX-512 VNNI kernels
# (ANYLLM_AMX=0), in both activation modes. The reference prompts have 47 tokens: two
# full AMX tiles and one of 15. Where AMX cannot run (no AMX-INT8, e.g. AMD EPYC, or
# the kernel refuses the tile state), the comparison is skipped with anyllm's reason,
# and ANYLLM_AMX=1 must still run.
. "$(dirname "$0")/lib.sh"
skip=0
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; exit $?; }

refs=$(ls "$SHARED"/models/ref/*.gguf "$SHARED"/models/moe/*.gguf 2>/dev/null)
if [ -z "$refs" ]; then
    echo "skip: $SHARED/models/ref not found"; skip=1; finish
fi
first=$(echo "$refs" | head -n 1)
tokens=$(tr -d ' \n' <"${first%.gguf}.ref.json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')

# ANYLLM_AMX=1 says why where AMX cannot run, and then runs without it
if ! ANYLLM_AMX=1 "$bin" logits -m "$first" --tokens "$tokens" --out "$tmp/probe.f32" -t 2 \
        2>"$tmp/err"; then
    bad "logits with ANYLLM_AMX=1: $(cat "$tmp/err")"; finish
fi
if grep -q "ANYLLM_AMX=1" "$tmp/err"; then
    ok "ANYLLM_AMX=1 where AMX cannot run: $(cat "$tmp/err")"
    echo "skip: AMX against VNNI: $(sed 's/^anyllm: ANYLLM_AMX=1: //' "$tmp/err")"
    skip=1; finish
fi

for m in $refs; do
    name=$(basename "$m" .gguf)
    tokens=$(tr -d ' \n' <"${m%.gguf}.ref.json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
    for mode in q8x2 q8; do
        for a in 0 1; do
            ANYLLM_AMX=$a "$bin" logits -m "$m" --tokens "$tokens" --backend cpu:$mode -t 2 \
                --out "$tmp/$a.f32" 2>"$tmp/err$a" || echo "exit $?" >>"$tmp/err$a"
        done
        if [ -s "$tmp/1.f32" ] && [ ! -s "$tmp/err0" ] && [ ! -s "$tmp/err1" ] &&
                cmp -s "$tmp/0.f32" "$tmp/1.f32"; then
            ok "$name cpu:$mode: AMX and VNNI logits identical"
        else
            bad "$name cpu:$mode: AMX and VNNI differ: $(cat "$tmp/err0" "$tmp/err1")"
        fi
    done
done
finish
