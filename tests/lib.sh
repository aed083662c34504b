# lib.sh: shared by the shell test scripts (sourced, not run). Sets BUILD, SHARED, bin
# and a temporary folder removed at exit; counts results for the closing
# "N passed, M failed" line that tests/run.sh sums.
BUILD=${BUILD:-build}
SHARED=${SHARED:-../shared}
bin=$BUILD/anyllm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# expect_error NAME CMD...: a non-zero exit that is not a crash or a missing program
# (126 and up), and exactly one line on stderr
expect_error() {
    name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 126 ] && [ "$lines" -eq 1 ]; then
        ok "$name: $(cat "$tmp/err")"
    else
        bad "$name: exit $rc, $lines stderr lines"; cat "$tmp/err"
    fi
}
