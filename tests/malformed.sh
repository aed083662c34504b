#!/bin/sh
# malformed.sh: runs every model written by gen_malformed through `info`, `tokenize`,
# `run` and `chat` of the sanitizer build of the CLI (make malformed; part of make test).
#
# A command passes when it ends by itself with status 0, or with a non-zero status and
# a message; it fails on a sanitizer report (ASan, UBSan, LeakSanitizer), on a signal
# (status >= 128, which is also how abort_on_error reports) or when it runs past the
# time limit (a hang). base-valid.gguf, the unbroken model, must also succeed at every
# command, so that the variants test the checks and not a broken base.
#
# BUILD: the build folder (build); TIMEOUT: seconds per command (20); JOBS: files run
# at once (2).
build=${BUILD:-build}
bin=$build/asan/anyllm
gen=$build/gen_malformed
dir=$build/malformed
limit=${TIMEOUT:-20}
jobs=${JOBS:-2}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

for f in "$bin" "$gen"; do
    if [ ! -x "$f" ]; then
        echo "malformed: $f is missing (make $f)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done
rm -rf "$dir" && mkdir -p "$dir/log" || exit 1
"$gen" "$dir" || { echo "malformed: the generator failed"; echo "0 passed, 1 failed"; exit 1; }

# check NAME CMD...: runs one command; prints "ok" or "FAIL <why>" into the result file.
check() {
    name=$1; shift
    log=$dir/log/$name
    timeout -s KILL "$limit" "$@" </dev/null >"$log.out" 2>"$log.err"
    rc=$?
    why=
    if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: UndefinedBehavior' \
            "$log.err"; then why="sanitizer report"
    elif [ "$rc" -ge 128 ]; then why="signal (status $rc)"
    fi
    [ "$rc" -eq 137 ] && why="no end within ${limit}s (killed)"
    case $name in base-valid.*) [ -z "$why" ] && [ "$rc" -ne 0 ] && why="the valid base failed" ;; esac
    if [ -n "$why" ]; then echo "FAIL $name: $why"; else echo "ok $name"; fi
}

# one file: the four commands; chat reads one line from a file instead of a terminal
one() {
    f=$1; n=$(basename "$f" .gguf)
    check "$n.info" "$bin" info -m "$f"
    check "$n.tokenize" "$bin" tokenize -m "$f" -p "Hello world" --special
    check "$n.run" "$bin" run -m "$f" -p "Hello" -n 4 --temp 0 -t 1
    printf 'Hello\n' > "$dir/log/$n.stdin"
    check "$n.chat" sh -c "exec \"\$0\" chat -m \"\$1\" -n 4 --temp 0 -t 1 < \"\$2\"" \
        "$bin" "$f" "$dir/log/$n.stdin"
}

start=$(date +%s)
results=$dir/results
: > "$results"
# JOBS files at a time: each batch runs in the background, then the next
set -- "$dir"/*.gguf
while [ $# -gt 0 ]; do
    i=0
    while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
        one "$1" > "$dir/log/batch.$i" &
        shift; i=$((i + 1))
    done
    wait
    cat "$dir"/log/batch.* >> "$results"; rm -f "$dir"/log/batch.*
done

pass=$(grep -c '^ok ' "$results")
fail=$(grep -c '^FAIL ' "$results")
n_files=$(ls "$dir"/*.gguf | wc -l)
grep '^FAIL ' "$results" | while read -r _ what why; do
    echo "FAIL $what $why"
    sed -n '1,12p' "$dir/log/${what%:}.err" | sed 's/^/    /'
done
echo "malformed: $n_files files x 4 commands in $(( $(date +%s) - start ))s (logs in $dir/log)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
