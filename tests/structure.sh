#!/bin/sh
# The structure the folders are cut for (README: layout), checked on the tree as it is:
#   - no include cycle between modules (scripts/include_graph.py), and the check itself
#     finds one planted in a scratch tree, so that it cannot pass by finding nothing;
#   - the tools use the public API alone: no file of tools/ includes a header of src/
#     (include/: anyllm.h and the server library's anyllm_server.h);
#   - the library reads no environment variable: settings are parameters, and the CLI
#     (tools/) reads the ANYLLM_* variables into them;
#   - the library writes nothing to stdout or stderr but through al_set_log, the server
#     (its own library, with its own access log) and AL_ASSERT's last words apart;
#   - no source line quotes a speed (t/s, GB/s): measurements live in docs/benchmarks.md.
. "$(dirname "$0")/lib.sh"

if ! command -v python3 >/dev/null 2>&1; then
    echo "skip: python3 not found (.ci/run installs it)"; echo "0 passed, 0 failed, 1 skipped"; exit 0
fi

if out=$(python3 scripts/include_graph.py 2>&1); then
    ok "no include cycle: $(echo "$out" | tail -1)"
else
    bad "include cycles:"; echo "$out"
fi

# a planted cycle: a.c includes b.h, b.c includes a.h
mkdir -p "$tmp/plant/src/x" "$tmp/plant/include"
printf '#include "x/b.h"\n' >"$tmp/plant/src/x/a.c"
printf 'int a(void);\n' >"$tmp/plant/src/x/a.h"
printf '#include "x/a.h"\n' >"$tmp/plant/src/x/b.c"
printf 'int b(void);\n' >"$tmp/plant/src/x/b.h"
if python3 scripts/include_graph.py --root "$tmp/plant" >"$tmp/plant.out" 2>&1; then
    bad "a planted cycle (x/a <-> x/b) was not found: $(tail -1 "$tmp/plant.out")"
elif grep -q "src:x/a <-> src:x/b" "$tmp/plant.out"; then
    ok "a planted cycle is found: $(head -1 "$tmp/plant.out")"
else
    bad "a planted cycle: unexpected report"; cat "$tmp/plant.out"
fi

# tools/ includes only anyllm.h, system headers and its own
hits=""
for f in tools/*.c tools/*.h; do
    for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        [ -f "include/$h" ] && continue
        [ -f "tools/$h" ] && continue
        hits="$hits $f:$h"
    done
done
if [ -z "$hits" ]; then ok "tools include only include/ and their own headers"
else bad "tools reach into src/:$hits"; fi

hits=$(grep -rn 'getenv *(' src | grep -v '^src/server/' || true)
if [ -z "$hits" ]; then ok "the library reads no environment variable"
else bad "getenv in the library:"; echo "$hits"; fi

# stdout/stderr: AL_ASSERT (util.h) and the server's own log are the exceptions
hits=$(grep -rnE '\b(stderr|stdout)\b|\bprintf *\(|\bputs *\(' src --include=*.c --include=*.h |
    grep -v '^src/server/' | grep -v '^src/util.h:' | grep -vE ':[0-9]+: *(/?\*|//)' || true)
if [ -z "$hits" ]; then ok "the library writes to no stream but through al_set_log"
else bad "the library writes to stdout/stderr:"; echo "$hits"; fi

hits=$(grep -rnE '[0-9][0-9.]* ?(t/s|tok/s|tokens/s|GB/s|MB/s)' src tools include tests/*.c || true)
if [ -z "$hits" ]; then ok "no source line quotes a speed"
else bad "speeds quoted in source (move them to docs/benchmarks.md):"; echo "$hits"; fi

echo "$pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
