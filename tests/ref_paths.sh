#!/bin/sh
# The reference-logit criteria of test_ref on the two CPU paths that are not the
# default: the plain-C reference ops (ANYLLM_ISA=ref, the oracle) and the fast kernels
# with the precise activations (ANYLLM_ACT=q8x2). The default path (best ISA, q8)
# is test_ref's own run. Ends with one summed result line, as tests/run.sh expects.
bin="${BUILD:-build}/test_ref"
p=0; f=0; k=0; rc=0
for mode in ANYLLM_ISA=ref ANYLLM_ACT=q8x2; do
    echo "-- $mode"
    out=$(env "$mode" "$bin" 2>&1) || rc=1
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then echo "$mode: test_ref gave no result line"; f=$((f + 1)); rc=1; continue; fi
    set -- $line
    p=$((p + $1)); f=$((f + $3)); k=$((k + $5))
done
echo "$p passed, $f failed, $k skipped"
exit $rc
