#!/bin/sh
# gpu-check.sh: the Vulkan backend on a real GPU, in one go.
#
#   scripts/gpu-check.sh [BANDWIDTH_GB/s]
#
# 1. the Vulkan devices (anyllm devices), the loader brought in from .gl/*.deb when the
#    machine has none (see the device machine's notes), NVIDIA's driver file when the
#    loader finds no driver
# 2. the op tests against the CPU reference (build/test_vulkan, build/test_vkattn: the
#    decode attention with its rope and cache stores; build/test_vkdelta: the delta-net
#    hybrids' sigmoid_mul, ssm_conv and delta_net, its rows over 32 lanes by default)
# 3. the reference logits with --backend vulkan (llama, qwen2, qwen3, qwen3moe, gpt-oss,
#    also in pieces through the KV cache), and the no-Vulkan
#    fall-back (tests/vulkan.sh); Gemma 3 270M too when ANYLLM_GEMMA3 names the file
#    (241 MiB, more than a device run carries: there it is skipped unless present);
#    qwen35, qwen35moe and qwen3next (build/test_hybrid: llama.cpp's logits, the exact
#    result for the Q8_0 weights, the reference ops', decoding against the batch,
#    checkpoints); glm4moe, deepseek2 (latent attention: the attention shader's wide
#    build), gemma4 and the qwen35 MTP block against llama.cpp (test_glm4moe,
#    test_deepseek2, test_gemma4, test_mtp, where built or carried); typed KV caches
#    (test_vkattn, tests/vulkan.sh)
# 4. bench-1b Q4_0 (made with `anyllm gen-model` if absent): prompt and generation
#    speed, and generation as a share of the memory-bandwidth roofline: bytes read per
#    token / bandwidth, the bandwidth taken from the argument or measured by a
#    device-to-device copy (anyllm devices --bandwidth); dispatches per token, and
#    generation with the fused ops turned off, which says what the fusions are worth,
#    where a token's time goes (the host's recording, the wait, the device's own time),
#    and with the norm fused into the matvecs (fuse_norm=1; off by default since an H200
#    measured it slower), or only the decode attention's fusion off (fuse_attn=0: rope,
#    cache stores and attention in one dispatch); the prompt on cooperative matrices
#    (coopmat=1, where the device has them; tests/vulkan.sh in step 3 checks its logits);
#    then the device's time per shader build, prompt and generation (ANYLLM_VK_PROFILE=1)
# 5. a tuning sweep (SWEEP=0 skips): pp with the prompt matmul's tiles (SWEEP_PP; on
#    cooperative matrices SWEEP_CM, where the device has them), tg and pp with the
#    submission in chunks (SWEEP_TG, SWEEP_PP_CHUNK), a line per setting
# 6. the bench matrix: every backend (the CPU and each Vulkan device) at context depths
#    DEPTHS (0,512,2048), as a table and a plot ($OUT/gpu-check-depth.svg when OUT is set,
#    as on a device run, else $BUILD)
#
# Uses $BUILD/anyllm, test_vulkan, test_vkattn and test_ref when they exist (build them
# elsewhere and carry them: a GPU machine may lack glslc), else runs make; test_vkdelta
# and test_hybrid where they were built or carried. Environment:
# BUILD (build), SHARED (../shared, else ./shared), MODELS ($BUILD/models), PP and TG
# (512, 128), REPS (3), BENCH_MODEL (a model file instead of bench-1b Q4_0), ANYLLM_LIBS
# (a folder of carried shared libraries for LD_LIBRARY_PATH). The last line says
# "gpu-check: N passed, M failed".
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
SHARED=${SHARED:-../shared}
[ -d "$SHARED/models/ref" ] || SHARED=shared
MODELS=${MODELS:-$BUILD/models}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-3}
bin=$BUILD/anyllm
pass=0; fail=0
step() { echo; echo "== $*"; }
# a number of a one-line JSON object on stdin (bench -o json)
field() { sed -nE "s/.*\"$1\": ([0-9.e+-]+).*/\1/p"; }
result() { if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi; }
if [ -n "${ANYLLM_LIBS:-}" ]; then
    LD_LIBRARY_PATH=$ANYLLM_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
fi

step "Vulkan loader and driver"
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1'; then
    if ls .gl/*.deb >/dev/null 2>&1; then
        echo "no libvulkan: unpacking .gl/*.deb"
        for f in .gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    else
        echo "no libvulkan on this machine and no .gl/*.deb to bring it"
    fi
fi
nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$nv_icd" ] &&
    ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
    export VK_DRIVER_FILES=$nv_icd
    echo "VK_DRIVER_FILES=$nv_icd"
fi

step "build"
if [ -x "$bin" ] && [ -x "$BUILD/test_vulkan" ] && [ -x "$BUILD/test_vkattn" ] &&
    [ -x "$BUILD/test_ref" ]; then
    echo "using the binaries in $BUILD"
else
    make -j"$(nproc 2>/dev/null || echo 4)" BUILD="$BUILD" "$bin" "$BUILD/test_vulkan" \
        "$BUILD/test_vkattn" "$BUILD/test_vkdelta" "$BUILD/test_hybrid" "$BUILD/test_ref" \
        "$BUILD/test_glm4moe" "$BUILD/test_mtp" "$BUILD/test_deepseek2" "$BUILD/test_gemma4" ||
        { echo "gpu-check: 0 passed, 1 failed (build)"; exit 1; }
fi

step "devices"
devices=$("$bin" devices 2>&1)
echo "$devices"
grep_dev=$(echo "$devices" | grep -c '^vulkan:')
# whether vulkan:0 has cooperative matrices (matmul_cm.comp, ANYLLM_VK_TUNE=coopmat=1)
coopmat=0
echo "$devices" | sed -n '/^vulkan:0/,/^vulkan:1/p' | grep -q '^  coop. matrices   yes' &&
    coopmat=1
if [ "$grep_dev" -eq 0 ]; then
    echo "no Vulkan device: nothing to check"
    echo "gpu-check: $pass passed, 1 failed"
    exit 1
fi

step "op tests against the CPU reference"
SHARED=$SHARED "$BUILD/test_vulkan" >"$BUILD/gpu-check-ops.log" 2>&1
rc=$?
grep -E '^(ok|FAIL|SKIP|skip|note|--)|passed|FAIL' "$BUILD/gpu-check-ops.log"
result $rc
SHARED=$SHARED "$BUILD/test_vkattn" >"$BUILD/gpu-check-attn.log" 2>&1
rc=$?
grep -E '^(ok|FAIL|SKIP|skip|note|--)|passed|FAIL' "$BUILD/gpu-check-attn.log"
result $rc
# optional: the delta-net hybrids' ops (here, and qwen35's logits after vulkan.sh)
run_opt() { # LOG PATTERN PROGRAM
    if [ ! -x "$3" ]; then echo "skip: $3 not built or carried"; return; fi
    BUILD=$BUILD SHARED=$SHARED "$3" >"$1" 2>&1
    rc=$?
    grep -E "$2" "$1"
    result $rc
}
run_opt "$BUILD/gpu-check-delta.log" '^(ok|FAIL|SKIP|skip|--)|passed' "$BUILD/test_vkdelta"

step "reference logits with --backend vulkan"
BUILD=$BUILD SHARED=$SHARED sh tests/vulkan.sh
result $?
run_opt "$BUILD/gpu-check-hybrid.log" 'vulkan|FAIL|passed' "$BUILD/test_hybrid"
# glm4moe's logits, and the MTP block's (--spec mtp), against llama.cpp's
run_opt "$BUILD/gpu-check-glm.log" 'vulkan|FAIL|passed' "$BUILD/test_glm4moe"
run_opt "$BUILD/gpu-check-mtp.log" 'vulkan|FAIL|passed' "$BUILD/test_mtp"
run_opt "$BUILD/gpu-check-ds2.log" 'vulkan|FAIL|passed' "$BUILD/test_deepseek2"
run_opt "$BUILD/gpu-check-g4.log" 'vulkan|FAIL|passed' "$BUILD/test_gemma4"

step "bench"
model=${BENCH_MODEL:-$MODELS/bench-1b-Q4_0.gguf}
if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$bin" gen-model "$model" --arch llama --dim 2048 --layers 16 --heads 32 --kv-heads 8 \
        --ffn 8192 --vocab 32000 --type Q4_0 || { result 1; model=; }
fi
bw=${1:-}
if [ -z "$bw" ]; then
    bw=$("$bin" devices --bandwidth 2>/dev/null |
        sed -nE 's/^vulkan:0  copy bandwidth ([0-9.]+) GB\/s.*/\1/p')
    echo "device-to-device copy bandwidth of vulkan:0: ${bw:-unknown} GB/s (measured)"
fi
if [ -n "$model" ]; then
    "$bin" bench -m "$model" -p "$PP" -n "$TG" -r "$REPS" --backend vulkan -o json \
        >"$BUILD/gpu-check-bench.json" 2>"$BUILD/gpu-check-bench.err"
    rc=$?
    result $rc
    if [ $rc -eq 0 ]; then
        # one JSON object per line: pick avg_ts of the pp and tg lines, bytes_per_token
        pp=$(grep "\"n_prompt\": $PP," "$BUILD/gpu-check-bench.json" | field avg_ts)
        tg=$(grep "\"n_gen\": $TG," "$BUILD/gpu-check-bench.json" | field avg_ts)
        bpt=$(grep "\"n_gen\": $TG," "$BUILD/gpu-check-bench.json" | field bytes_per_token)
        dev=$(sed -nE 's/.*"backends": "([^"]*)".*/\1/p' "$BUILD/gpu-check-bench.json" | head -n 1)
        echo "model $(basename "$model") on $dev"
        echo "pp$PP: $pp t/s"
        echo "tg$TG: $tg t/s"
        dpt=$(grep "\"n_gen\": $TG," "$BUILD/gpu-check-bench.json" | field vk_dispatches_per_token)
        echo "dispatches per token: ${dpt:-?} fused"
        # where a token's time goes: what replaying a recorded command buffer could save
        # (the recording) against what the device itself spends (its timestamps)
        tgl=$(grep "\"n_gen\": $TG," "$BUILD/gpu-check-bench.json")
        echo "per token: $(echo "$tgl" | field vk_record_ms_per_token) ms recording on the" \
            "host, $(echo "$tgl" | field vk_wait_ms_per_token) ms waiting for the device," \
            "$(echo "$tgl" | field vk_gpu_ms_per_token) ms of device time (timestamps)"
        # decode again with fusions switched, which says what they are worth here: all of
        # them off (fuse=0); the norm inside the matvecs, which re-reads each workgroup's
        # input (fuse_norm=1; on an H200 it cost 1.35 ms a token); the decode attention's
        # rope, cache stores and attention in one dispatch off (fuse_attn=0)
        for tune in fuse=0 fuse_norm=1 fuse_attn=0; do
            out="$BUILD/gpu-check-$(echo "$tune" | tr -d '=').json"
            ANYLLM_VK_TUNE=$tune "$bin" bench -m "$model" -p 0 -n "$TG" -r "$REPS" \
                --backend vulkan -o json >"$out" 2>>"$BUILD/gpu-check-bench.err"
            tgx=$(grep "\"n_gen\": $TG," "$out" | field avg_ts)
            dptx=$(grep "\"n_gen\": $TG," "$out" | field vk_dispatches_per_token)
            echo "with ANYLLM_VK_TUNE=$tune: ${dptx:-?} dispatches per token, tg$TG ${tgx:-?} t/s"
        done
        # the prompt's matmuls on the matrix units (matmul_cm.comp, fp16 inputs, fp32
        # sums): off by default until measured here
        if [ "$coopmat" = 1 ]; then
            for cm in 0 1; do
                out="$BUILD/gpu-check-coopmat$cm.json"
                ANYLLM_VK_TUNE=coopmat=$cm "$bin" bench -m "$model" -p "$PP" -n 0 -r "$REPS" \
                    --backend vulkan -o json >"$out" 2>>"$BUILD/gpu-check-bench.err"
                result $?
                ts=$(field avg_ts <"$out" | head -n 1)
                echo "pp$PP with ANYLLM_VK_TUNE=coopmat=$cm: ${ts:-?} t/s"
            done
            ANYLLM_VK_TUNE=coopmat=1 ANYLLM_VK_PROFILE=1 "$bin" bench -m "$model" -p "$PP" \
                -n 0 -r 1 --backend vulkan >"$BUILD/gpu-check-profile-cm.md" \
                2>>"$BUILD/gpu-check-bench.err"
            sed -n '/device time per shader build/,/^| all/p' "$BUILD/gpu-check-profile-cm.md"
        else
            echo "cooperative matrices: vulkan:0 has none (anyllm devices)"
        fi
        # the device's time shader by shader, a timestamp on each side of every dispatch
        # (ANYLLM_VK_PROFILE): a slow kernel, or a cost every dispatch pays. The
        # dispatches run one at a time then: read the shares and the us each
        ANYLLM_VK_PROFILE=1 "$bin" bench -m "$model" -p "$PP" -n "$TG" -r 1 --backend vulkan \
            >"$BUILD/gpu-check-profile.md" 2>>"$BUILD/gpu-check-bench.err"
        result $?
        sed -n '/device time per shader build/,/^| all/p' "$BUILD/gpu-check-profile.md"
        if [ -n "$bw" ] && [ -n "$bpt" ] && [ -n "$tg" ]; then
            awk -v tg="$tg" -v bpt="$bpt" -v bw="$bw" 'BEGIN {
                bound = bw * 1e9 / bpt
                printf "tg roofline: %.0f bytes/token at %.1f GB/s bounds tg at %.1f t/s; " \
                       "measured %.1f t/s = %.1f%% of it\n", bpt, bw, bound, tg, 100 * tg / bound }'
        fi
    fi
fi
step "tuning sweep: prompt tiles, submission in chunks (ANYLLM_VK_TUNE)"
if [ -n "$model" ] && [ "${SWEEP:-1}" != 0 ]; then
    # what the defaults leave on the table, for the next change of vk_tuning: the prompt's
    # matmul tiles (BM x BN per workgroup, TM x TN per invocation, read from shared memory
    # as vec4s), and decoding submitted in chunks of N dispatches (chunk=N: the device
    # runs each while the host records the rest; off by default, unmeasured on a GPU).
    # The matvec's sizes (mv_wg, mv_nr) moved an H200's decode by 0.3 ms at most (README).
    # One row per setting; a setting the shaders reject says so
    sweep() { # $1: pp or tg, then the settings
        kind=$1; shift
        for tune in "$@"; do
            if [ "$kind" = pp ]; then args="-p $PP -n 0"; else args="-p 0 -n $TG"; fi
            # shellcheck disable=SC2086
            ANYLLM_VK_TUNE=$tune "$bin" bench -m "$model" $args -r 2 --backend vulkan -o json \
                >"$BUILD/gpu-check-sweep.json" 2>"$BUILD/gpu-check-sweep.err"
            if [ $? -ne 0 ]; then
                echo "$kind $tune: $(tail -n 1 "$BUILD/gpu-check-sweep.err")"
                continue
            fi
            ts=$(field avg_ts <"$BUILD/gpu-check-sweep.json" | head -n 1)
            ms=$(field vk_gpu_ms_per_token <"$BUILD/gpu-check-sweep.json" | head -n 1)
            echo "$kind $tune: ${ts:-?} t/s, ${ms:-?} ms of device time per token"
        done
    }
    sweep pp ${SWEEP_PP:-mm_bm=64,mm_bn=64,mm_tm=4,mm_tn=4 mm_bm=128,mm_bn=64,mm_tm=8,mm_tn=4 \
        mm_bm=64,mm_bn=128,mm_tm=4,mm_tn=8 mm_bm=128,mm_bn=128,mm_tm=8,mm_tn=8 \
        mm_bm=64,mm_bn=64,mm_tm=8,mm_tn=8}
    # the tiles of the prompt's matmul on cooperative matrices, where the device has them
    if [ "$coopmat" = 1 ]; then
        sweep pp ${SWEEP_CM:-coopmat=1,cm_bm=64,cm_bn=64 coopmat=1,cm_bm=128,cm_bn=64 \
            coopmat=1,cm_bm=64,cm_bn=128 coopmat=1,cm_bm=128,cm_bn=128}
    fi
    sweep tg ${SWEEP_TG:-chunk=0 chunk=8 chunk=16 chunk=32 chunk=64}
    sweep pp ${SWEEP_PP_CHUNK:-chunk=0 chunk=16}
fi

step "bench matrix: every backend at depths ${DEPTHS:=0,512,2048}"
if [ -n "$model" ]; then
    # prefill and decode of each backend after DEPTHS tokens, side by side: which backend
    # should run which phase (issue 14); the plot goes next to the logs
    "$bin" bench -m "$model" -p "$PP" -n "$TG" -d "$DEPTHS" -r 1 --backend all \
        --plot "${OUT:-$BUILD}/gpu-check-depth.svg" >"$BUILD/gpu-check-matrix.md" \
        2>"$BUILD/gpu-check-matrix.err"
    rc=$?
    cat "$BUILD/gpu-check-matrix.md"
    [ $rc -eq 0 ] || tail -n 3 "$BUILD/gpu-check-matrix.err"
    result $rc
fi

echo
echo "gpu-check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
