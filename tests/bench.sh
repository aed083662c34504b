#!/bin/sh
# anyllm bench as a matrix: every backend (--backend all), context depths (-d), comma
# lists, the three output formats with llama-bench's field names, and --plot's SVG.
. "$(dirname "$0")/lib.sh"
m=$SHARED/models/ref/ref-llama-Q8_0.gguf
if [ ! -f "$m" ]; then
    echo "skip: $m not found (the shared test data is missing)"
    echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
n_backends=$("$bin" devices 2>/dev/null | grep -c '^vulkan:[0-9]')
n_backends=$((n_backends + 1))
"$bin" bench -m "$m" -p 8,16 -n 4 -d 0,32 -r 1 -t 1 --backend all -o json --plot "$tmp/b.svg" \
    >"$tmp/b.json" 2>"$tmp/err"; rc=$?
# keys and values per position, from info: 2 (k, v) x layers x kv heads x dim x 4 bytes
kv_pos=$("$bin" info -m "$m" 2>/dev/null |
    sed -n 's/^architecture.*: \([0-9]*\) layers,.*(\([0-9]*\) kv, dim \([0-9]*\)).*/\1 \2 \3/p' |
    awk '{print 2 * $1 * $2 * $3 * 4}')
python3 - "$tmp/b.json" "$tmp/b.svg" "$n_backends" "${kv_pos:-0}" >"$tmp/check" 2>&1 <<'PY'
import json, sys, xml.etree.ElementTree as ET
rows = json.load(open(sys.argv[1]))
n_backends = int(sys.argv[3])
want = n_backends * 2 * 3  # backends x depths x (pp8, pp16, tg4)
assert len(rows) == want, f"{len(rows)} rows, want {want}"
keys = {(r["backends"], r["n_depth"], r["n_prompt"], r["n_gen"]) for r in rows}
assert len(keys) == want, "a (backend, depth, test) is missing or doubled"
assert {r["n_depth"] for r in rows} == {0, 32}
assert all(r["avg_ts"] > 0 and r["n_threads"] == 1 for r in rows)
for f in ("build_commit", "model_filename", "model_size", "model_n_params", "avg_ns", "stddev_ts"):
    assert all(f in r for r in rows), f"field {f} missing"
# tg rows: the bandwidth measured around their repetitions, and the share of its roofline
tg = [r for r in rows if r["n_gen"] > 0]
assert all(r["bandwidth_gbs"] > 0 and r["roofline_pct"] > 0 for r in tg), "tg without a roofline"
assert all(r["roofline_pct"] == 0 for r in rows if r["n_prompt"] > 0), "pp with a roofline"
# a token reads the keys and values before it too: 32 positions deeper, 32 positions more
kv_pos = int(sys.argv[4])
assert kv_pos > 0, "no kv size from anyllm info"
by = {(r["backends"], r["n_depth"]): r["bytes_per_token"] for r in tg}
for (b, d), v in by.items():
    if d == 32:
        assert v - by[(b, 0)] == 32 * kv_pos, f"{b}: read/token {by[(b, 0)]} at d0, {v} at d32"
# Vulkan tg rows: where a token's time went; the host's recording and its wait are
# parts of the token's time, and the device's time (timestamps) a part of the wait
for r in tg:
    if "vk_dispatches_per_token" not in r:
        continue
    tok_ms = r["avg_ns"] / 1e6 / r["n_gen"]
    rec, wait = r["vk_record_ms_per_token"], r["vk_wait_ms_per_token"]
    assert rec > 0 and wait > 0, f"{r['backends']}: recording {rec} ms, waiting {wait} ms"
    assert rec + wait <= tok_ms * 1.02 + 0.05, f"recording {rec} + waiting {wait} > {tok_ms} ms"
    gpu = r.get("vk_gpu_ms_per_token")
    assert gpu is not None or "llvmpipe" not in r["backends"], "lavapipe has timestamps"
    assert gpu is None or 0 < gpu <= wait * 1.02 + 0.05, f"device {gpu} ms, waited {wait} ms"
svg = ET.parse(sys.argv[2]).getroot()
lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
# a line per backend and test: pp8, pp16 and tg4, each over the two depths
assert len(lines) == n_backends * 3, f"{len(lines)} lines"
assert all(len(l.get("points").split()) == 2 for l in lines), "a line without its 2 depths"
print(f"{len(rows)} rows over {n_backends} backend(s), {len(lines)} lines in the plot")
PY
if [ $rc -eq 0 ] && grep -q rows "$tmp/check"; then ok "bench --backend all -d 0,32 -o json --plot: $(cat "$tmp/check")"
else bad "bench matrix: rc $rc: $(cat "$tmp/check" "$tmp/err")"; fi

"$bin" bench -m "$m" -p 8 -n 0 -d 0,16 -r 1 -t 1 >"$tmp/md" 2>/dev/null
if grep -q '| pp8 |' "$tmp/md" && grep -q '| pp8 @ d16 |' "$tmp/md"; then ok "md names the depth: pp8 @ d16"
else bad "md depth: $(cat "$tmp/md")"; fi
"$bin" bench -m "$m" -p 8 -n 0 -d 16 -r 1 -t 1 -o csv >"$tmp/csv" 2>/dev/null
if head -1 "$tmp/csv" | grep -q ',n_depth,' && sed -n 2p "$tmp/csv" | grep -q ',1,8,0,16,'; then
    ok "csv has n_depth"
else bad "csv: $(cat "$tmp/csv")"; fi
# a GPU reading weights from its own memory (as if discrete: a staging copy) has no
# roofline against the host's bandwidth: '-' in md, 0 in JSON; the CPU row keeps its own
if [ "$n_backends" -gt 1 ]; then
    ANYLLM_VK_WEIGHTS=staging "$bin" bench -m "$m" -p 0 -n 4 -r 1 -t 1 --backend vulkan \
        --backend cpu >"$tmp/own" 2>/dev/null
    vk_row=$(grep '| vulkan' "$tmp/own" | grep '| tg4 |')
    cpu_row=$(grep '| cpu' "$tmp/own" | grep '| tg4 |')
    if echo "$vk_row" | grep -q '| - | - |$' && echo "$cpu_row" | grep -q '[0-9]% |$' &&
        grep -q 'no roofline for a GPU with its own memory' "$tmp/own"; then
        ok "no roofline for a GPU's own memory: $(echo "$vk_row" | cut -d'|' -f11-13)"
    else bad "own-memory roofline: $(cat "$tmp/own")"; fi
    # ANYLLM_VK_PROFILE: a table per test of device time per shader build (on stderr
    # beside JSON), whose dispatches per token add up to the row's, whose times fit in
    # the device's own time, and none without the variable (the matrix above)
    ANYLLM_VK_PROFILE=1 "$bin" bench -m "$m" -p 8 -n 4 -r 2 -t 1 --backend vulkan -o json \
        >"$tmp/prof.json" 2>"$tmp/prof"
    python3 - "$tmp/prof.json" "$tmp/prof" >"$tmp/check" 2>&1 <<'PY'
import json, re, sys
rows = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
tables = {}
for m in re.finditer(r"(pp8|tg4): device time per shader build.*\n.*\n.*\n((?:\|.*\n?)+)", text):
    tables[m.group(1)] = [l.strip("|").split("|") for l in m.group(2).strip().split("\n")]
assert set(tables) == {"pp8", "tg4"}, f"tables for {sorted(tables)}: {text}"
for test, t in tables.items():
    body, last = t[:-1], t[-1]
    assert last[0].strip() == "all" and body, f"{test}: no rows or no 'all' row"
    names = [r[0].strip() for r in body]
    assert all(re.fullmatch(r"[a-z0-9_]+\.[0-7]", n) for n in names), f"{test}: names {names}"
    assert any(n.startswith(("matvec", "matmul")) for n in names), f"{test}: no matmul {names}"
    disp = [float(r[1]) for r in body]
    us = [float(r[2]) for r in body]
    share = [float(r[4].strip().rstrip("%")) for r in body]
    assert all(u > 0 for u in us), f"{test}: a build without device time {us}"
    assert abs(sum(disp) - float(last[1])) < 0.05 * len(disp), f"{test}: {disp} vs {last[1]}"
    assert abs(sum(share) - 100) < 0.1 * len(share), f"{test}: shares add to {sum(share)}"
tg = [r for r in rows if r["n_gen"] > 0][0]
tot = tables["tg4"][-1]
assert abs(float(tot[1]) - tg["vk_dispatches_per_token"]) < 0.05, \
    f"{tot[1]} dispatches in the table, {tg['vk_dispatches_per_token']} in the row"
assert float(tot[3]) <= tg["vk_gpu_ms_per_token"] * 1.01 + 0.01, \
    f"{tot[3]} ms in the table, the device ran {tg['vk_gpu_ms_per_token']} ms"
print(f"tg4: {len(tables['tg4']) - 1} builds, {tot[1]} dispatches and {tot[3]} of "
      f"{tg['vk_gpu_ms_per_token']:.3f} device ms per token")
PY
    if grep -q 'dispatches and' "$tmp/check" && ! grep -q 'device time per shader' "$tmp/err"; then
        ok "ANYLLM_VK_PROFILE: $(cat "$tmp/check")"
    else bad "ANYLLM_VK_PROFILE: $(cat "$tmp/check")"; fi
else
    echo "skip: no Vulkan device: the own-memory roofline and ANYLLM_VK_PROFILE are not checked"
fi
expect_error "bench -d beyond the training context" "$bin" bench -m "$m" -p 8 -n 0 -d 4096 -r 1
expect_error "bench --backend all with another" "$bin" bench -m "$m" --backend all --backend cpu
expect_error "bench --plot into a missing folder" "$bin" bench -m "$m" -p 8 -n 0 -r 1 --plot /nonexistent/x.svg

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
