#!/bin/sh
# End-to-end tests of the anyllm command line: `info` on every shared GGUF file (its
# features and chat template lines), `logits` against a reference, the chat template
# chosen for a file without one, chat in the Harmony, Gemma 4 and GLM formats, and
# one-line errors with a non-zero exit for bad use.
. "$(dirname "$0")/lib.sh"

if [ ! -d "$SHARED/models" ]; then
    echo "skip: $SHARED/models not found (the shared test data is missing)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

for f in "$SHARED"/models/*.gguf "$SHARED"/models/ref/*.gguf "$SHARED"/vocab/*.gguf \
        "$SHARED"/models/qwen3/*.gguf "$SHARED"/models/gemma3/*.gguf; do
    [ -f "$f" ] || continue # a folder older shared data lacks
    if "$bin" info -m "$f" >"$tmp/info" 2>"$tmp/err" && grep -q '^parameters' "$tmp/info"; then
        ok "info $(basename "$f")"
    else
        bad "info $(basename "$f")"; cat "$tmp/err"
    fi
done
if "$bin" info -m "$SHARED/vocab/ggml-vocab-gpt-2.gguf" | grep -q 'vocabulary-only'; then
    ok "info says a vocabulary-only file has no weights"
else
    bad "info on a vocabulary-only file"
fi

# info says what the layers of a model do; Qwen3 normalises Q and K per head
q3=$SHARED/models/qwen3/ref-qwen3-f32.gguf
if [ -f "$q3" ]; then
    "$bin" info -m "$q3" >"$tmp/info" 2>&1
    feat=$(grep '^features' "$tmp/info")
    if echo "$feat" | grep -q 'per-head Q/K norm'; then ok "info qwen3: $feat"
    else bad "info qwen3 has no features line naming the Q/K norm: '$feat'"; fi
else
    echo "skip: $q3 not found (older shared data)"
fi

# chat templates without a template in the file: a gemma3 file gets the built-in Gemma
# format (chat with no input chooses it and exits without evaluating anything), other
# architectures are refused in one line that says what to do
g3=$tmp/gemma3-tiny.gguf
if "$bin" gen-model "$g3" --arch gemma3 --dim 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 \
        --vocab 300 --head-dim 32 --swa 16 --type Q8_0 -t 1 >/dev/null 2>"$tmp/err"; then
    line=$("$bin" info -m "$g3" | grep '^chat template')
    if echo "$line" | grep -q '^chat template  *gemma (built in for gemma3'; then
        ok "info on a gemma3 file without a template: $line"
    else
        bad "info on a gemma3 file: '$line'"
    fi
    "$bin" chat -m "$g3" -t 1 </dev/null >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc -eq 0 ] && [ ! -s "$tmp/err" ]; then
        ok "chat on a gemma3 file without a template starts"
    else
        bad "chat on a gemma3 file without a template: rc $rc: $(cat "$tmp/err")"
    fi
else
    bad "gen-model gemma3: $(cat "$tmp/err")"
fi
if [ -f "$q3" ]; then
    expect_error "chat on a qwen3 file without a template" "$bin" chat -m "$q3" -t 1
    grep -q -- "--chat-template" "$tmp/err" || bad "the chat refusal does not name --chat-template"
fi

ref=$SHARED/models/ref/ref-llama-f32
tokens=$(tr -d ' \n' <"$ref.ref.json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
if "$bin" logits -m "$ref.gguf" --tokens "$tokens" --out "$tmp/l.f32" -t 2 &&
        "$BUILD/test_ref" --compare "$tmp/l.f32" "$ref.logits.f32" 1e-4; then
    ok "logits ref-llama-f32 matches its reference"
else
    bad "logits ref-llama-f32"
fi

# the CPU activation modes against the reference ops on a quantized model: q8x2 (the
# default) within 1e-7, q8 (llama.cpp's rounding) visibly further but within 1e-3
q=$SHARED/models/ref/ref-llama-Q8_0
qtok=$(tr -d ' \n' <"$q.ref.json" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
ANYLLM_ISA=ref "$bin" logits -m "$q.gguf" --tokens "$qtok" --out "$tmp/oracle.f32" -t 2 2>"$tmp/err"
for b in cpu:q8x2 cpu:q8; do
    "$bin" logits -m "$q.gguf" --tokens "$qtok" --out "$tmp/$b.f32" -t 2 --backend $b 2>>"$tmp/err"
done
d_x2=$("$BUILD/test_ref" --compare "$tmp/cpu:q8x2.f32" "$tmp/oracle.f32" 1e-7)
rc_x2=$?
d_q8=$("$BUILD/test_ref" --compare "$tmp/cpu:q8.f32" "$tmp/oracle.f32" 1e-3)
rc_q8=$?
if [ $rc_x2 -eq 0 ] && [ $rc_q8 -eq 0 ] &&
        ! "$BUILD/test_ref" --compare "$tmp/cpu:q8.f32" "$tmp/oracle.f32" 1e-6 >/dev/null; then
    ok "activation modes vs the reference ops: q8x2 $d_x2, q8 $d_q8"
else
    bad "activation modes: q8x2 $d_x2 (rc $rc_x2), q8 $d_q8 (rc $rc_q8): $(cat "$tmp/err")"
fi

# tokenize works on vocabulary-only files; the expected ids are the .out line of the
# "Hello world" test string
for v in gpt-2 llama-spm; do
    vf=$SHARED/vocab/ggml-vocab-$v.gguf
    want=$(awk 'BEGIN{RS="\n__ggml_vocab_test__\n"} $0=="Hello world"{print NR; exit}' "$vf.inp")
    want=$(sed -n "${want:-0}p" "$vf.out" | sed 's/^ *//')
    got=$("$bin" tokenize -m "$vf" -p "Hello world" 2>&1)
    if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "tokenize $v 'Hello world': $got"
    else bad "tokenize $v: got '$got', want '$want'"; fi
done
got=$("$bin" tokenize -m "$SHARED/vocab/ggml-vocab-llama-spm.gguf" -p "Hello world" --bos)
case "$got" in "1 "*) ok "tokenize --bos adds BOS: $got";; *) bad "tokenize --bos: $got";; esac

m=$SHARED/models/ref/ref-llama-Q8_0.gguf
expect_error "missing file" "$bin" info -m /nonexistent.gguf
expect_error "not a gguf" "$bin" info -m /etc/hostname
expect_error "no command" "$bin" frobnicate -m "$m"
expect_error "no model" "$bin" logits --tokens 1 --out "$tmp/x"
expect_error "bad token list" "$bin" logits -m "$m" --tokens 1,x,3 --out "$tmp/x"
expect_error "token out of range" "$bin" logits -m "$m" --tokens 1,99999 --out "$tmp/x"
expect_error "unwritable output" "$bin" logits -m "$m" --tokens 1,2 --out /nonexistent/dir/x
expect_error "vocabulary-only model" "$bin" logits -m "$SHARED/vocab/ggml-vocab-gpt-2.gguf" --tokens 1 --out "$tmp/x"
expect_error "bad activation mode" "$bin" logits -m "$m" --tokens 1 --out "$tmp/x" --backend cpu:q9
expect_error "bad thread count" "$bin" logits -m "$m" --tokens 1 --out "$tmp/x" -t 0

# a tokenizer whose size differs from the embedding's rows (1024): the file is refused
# for running with one line naming both counts; info still reads its metadata
for nt in 1000 1100; do
    bad_vocab=$tmp/vocab-$nt.gguf
    if ! "$BUILD/test_limits" --resize-vocab "$m" "$bad_vocab" $nt; then
        bad "writing a file with $nt tokens"; continue
    fi
    if "$bin" info -m "$bad_vocab" >"$tmp/info" 2>&1 && grep -q "runnable.*no:.*has $nt tokens.*1024 rows" "$tmp/info"
    then ok "info on a $nt-token tokenizer over 1024 rows: $(grep runnable "$tmp/info" | cut -c1-60)..."
    else bad "info on a $nt-token tokenizer: $(cat "$tmp/info")"; fi
    expect_error "logits with $nt tokens over 1024 rows" "$bin" logits -m "$bad_vocab" --tokens 1,2 --out "$tmp/x"
    expect_error "run with $nt tokens over 1024 rows" "$bin" run -m "$bad_vocab" -p "hello" -n 4
done

# contexts: --ctx beyond the training context (2048) is refused before anything is
# allocated; a KV cache beyond the machine's memory is refused by the library at once
expect_error "run --ctx beyond the training context" "$bin" run -m "$m" -p hi --ctx 4096
big=$tmp/ctx16m.gguf
if "$bin" gen-model "$big" --arch llama --dim 1024 --layers 2 --heads 8 --kv-heads 8 --ffn 64 \
        --vocab 259 --ctx 16777216 --type Q8_0 >/dev/null 2>"$tmp/err"; then
    t0=$(date +%s%N)
    expect_error "run --ctx 16777216 (a 256 GiB KV cache)" "$bin" run -m "$big" -p hi --ctx 16777216
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if grep -q "MemAvailable" "$tmp/err" && [ "$ms" -lt 3000 ]; then ok "refused by the memory check in $ms ms"
    else bad "huge context: $ms ms: $(cat "$tmp/err")"; fi
else
    bad "gen-model for the context test: $(cat "$tmp/err")"
fi

# perplexity needs windows of at least 3 tokens to score anything
printf 'one two three four five six seven eight nine ten\n' >"$tmp/text"
expect_error "perplexity --ctx 2" "$bin" perplexity -m "$m" -f "$tmp/text" --ctx 2

# chat: a line with a NUL byte is skipped with a message, not cut at the NUL
printf 'Hi\000there\n' | "$bin" chat -m "$m" --chat-template chatml -n 2 --temp 0 -t 2 \
    >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 0 ] && grep -q "NUL byte" "$tmp/err" && [ ! -s "$tmp/out" ]; then
    ok "chat skips a line holding a NUL byte: $(cat "$tmp/err")"
else
    bad "chat with a NUL byte: rc $rc, out '$(cat "$tmp/out")', err '$(cat "$tmp/err")'"
fi

# chat in the Gemma 4 and GLM formats, named on the command line: a reply and no
# complaint (the model writes neither; its vocabulary lacks their markers, which are
# then text); a name that is none lists them
for t in gemma4 glm45 glm47; do
    printf 'Hi\n' | "$bin" chat -m "$m" --chat-template $t -n 2 --temp 0 -t 2 \
        >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ $rc -eq 0 ] && [ ! -s "$tmp/err" ]; then ok "chat --chat-template $t"
    else bad "chat --chat-template $t: rc $rc, $(cat "$tmp/err")"; fi
done
expect_error "chat --chat-template gemma5" sh -c \
    "printf 'Hi\\n' | '$bin' chat -m '$m' --chat-template gemma5 -n 2 -t 2"
grep -q "gemma4, phi3, harmony, glm45, glm47" "$tmp/err" ||
    bad "the unknown template's error does not list the formats: $(cat "$tmp/err")"

# chat in the Harmony format (gpt-oss) on a model that does not write it (random weights,
# no Harmony tokens): the reply goes through the reply parser, which takes text outside
# the format for the answer; --show-reasoning marks the channels, and without it the
# same answer comes unmarked
printf 'Hi\n' | "$bin" chat -m "$m" --chat-template harmony -n 12 --temp 0 -t 2 \
    >"$tmp/plain" 2>"$tmp/err"; rc1=$?
printf 'Hi\n' | "$bin" chat -m "$m" --chat-template harmony -n 12 --temp 0 -t 2 --show-reasoning \
    >"$tmp/marked" 2>>"$tmp/err"; rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -s "$tmp/plain" ] && [ ! -s "$tmp/err" ] &&
        [ "[final] $(cat "$tmp/plain")" = "$(cat "$tmp/marked")" ]; then
    ok "chat --chat-template harmony: the answer, marked with --show-reasoning"
else
    bad "chat harmony: rc $rc1/$rc2, '$(cat "$tmp/plain")' vs '$(cat "$tmp/marked")': $(cat "$tmp/err")"
fi

# a gpt-oss file without a template gets the built-in Harmony format, once the
# architecture runs here
oss=$SHARED/models/moe/ref-gpt-oss-f32.gguf
if [ -f "$oss" ] && "$bin" info -m "$oss" >"$tmp/info" 2>&1 && ! grep -q '^runnable *no' "$tmp/info"; then
    line=$(grep '^chat template' "$tmp/info")
    if echo "$line" | grep -q '^chat template  *harmony (built in for gpt-oss'; then
        ok "info on a gpt-oss file without a template: $line"
    else
        bad "info on a gpt-oss file: '$line'"
    fi
else
    echo "skip: the gpt-oss architecture does not run here (or $oss is missing)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
