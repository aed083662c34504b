#!/bin/sh
# Runs each test program given, prints its output, and sums the "N passed, M failed"
# lines into one closing line, and the seconds each took (slowest last: where the
# suite's time goes). Exits non-zero if any program failed or crashed.
total_pass=0; total_fail=0; total_skip=0; status=0
times=""
for t in "$@"; do
    echo "== $t"
    t0=$(date +%s)
    case "$t" in
        *.sh) out=$(sh "$t" 2>&1); rc=$? ;; # scripts need no executable bit
        *) out=$("$t" 2>&1); rc=$? ;;
    esac
    printf '%s\n' "$out"
    times="$times$(($(date +%s) - t0)) $t
"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        echo "$t: exited $rc without a result line"; total_fail=$((total_fail + 1)); status=1
        continue
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    k=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + ${k:-0}))
    [ "$rc" -ne 0 ] && status=1
done
echo "== seconds per test, the slowest:"
printf '%s' "$times" | sort -n | tail -n 8
echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"
exit $status
