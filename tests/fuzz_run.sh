#!/bin/sh
# Runs the libFuzzer targets for FUZZ_SECONDS in all, half each: the GGUF reader
# (FUZZ_BIN, seeded by tests/fuzz_seed.sh) and the tokenizer + chat templates
# (FUZZ_TEXT_BIN, seeded with the shared vocabularies' test strings, a few templates and
# Harmony replies, on the shared vocabularies and the odd ones of BUILD/gen_malformed
# when it is built).
# Each passes when its fuzzer finds no crash, leak, trap or sanitizer report.
bin=${FUZZ_BIN:-build/fuzz/fuzz_gguf}
text_bin=${FUZZ_TEXT_BIN:-build/fuzz/fuzz_text}
seconds=${FUZZ_SECONDS:-60}
half=$(( (seconds + 1) / 2 ))
shared=${SHARED:-../shared}
pass=0; fail=0

# fuzz NAME BIN CORPUS MAX_LEN: one fuzzer run; counts a pass or a failure
fuzz() {
    dir=$(dirname "$2")
    mkdir -p "$3" "$dir/artifacts"
    if SHARED=$shared "$2" -max_total_time="$half" -max_len="$4" -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$3" 2>"$dir/log.$1"; then
        grep -E '^fuzz_text:' "$dir/log.$1"
        grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov:' "$dir/log.$1" | tail -n 3
        echo "fuzz: ${half}s on the $1 found nothing"
        pass=$((pass + 1))
    else
        tail -n 40 "$dir/log.$1"
        echo "fuzz: the $1 fuzzer found a failing input (see $dir/artifacts)"
        fail=$((fail + 1))
    fi
}

corpus=$(dirname "$bin")/corpus
sh "$(dirname "$0")/fuzz_seed.sh" "$corpus"
fuzz "GGUF reader" "$bin" "$corpus" 65536

# Text seeds: byte 0 picks the vocabulary (0 SentencePiece, 1 GPT-2, 2 Phi-3).
text_corpus=$(dirname "$text_bin")/corpus_text
mkdir -p "$text_corpus"
i=0
for f in "$shared"/vocab/*.inp; do
    [ -f "$f" ] || continue
    awk -v dir="$text_corpus" -v base="$i" '
        /^__ggml_vocab_test__$/ { n++; next }
        { f = sprintf("%s/seed-%d-%d", dir, base, n)
          printf "%s%s\n", (n in seen) ? "" : sprintf("%c", 48 + n % 3), $0 >> f; seen[n] = 1; close(f) }
    ' "$f"
    i=$((i + 1))
done
printf "\001<|im_start|>system\\\\nYou are kind.<|im_end|>\\\\n{%% for m in messages %%}" > "$text_corpus/seed-chatml"
printf "\002<|start_header_id|>user<|end_header_id|>\n\n{{ c }}<|eot_id|>" > "$text_corpus/seed-llama3"
printf "\000[INST] <<SYS>>\nsys\n<</SYS>>\n\nhi [/INST]<start_of_turn><|user|><|end|>" > "$text_corpus/seed-inst"
# Harmony: a reply with reasoning and an answer, and a tool call (the reply parser)
printf "\001<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi<|return|>" \
    > "$text_corpus/seed-harmony"
printf "\002 to=functions.f<|channel|>commentary <|constrain|>json<|message|>{}<|call|>set model_identity = 'x'" \
    > "$text_corpus/seed-harmony-call"
# Grammars (al_grammar_create): a JSON-like one, and one of repetitions and classes
printf '\001root ::= "{" ws (kv ("," ws kv)*)? "}"\nkv ::= "\\"" [a-z]+ "\\"" ws ":" ws [0-9]{1,3} ws\nws ::= [ \\n]?' \
    > "$text_corpus/seed-grammar-json"
printf '\000root ::= ("ab" | [^x-z\\u00e9])* .{2,4} ("x"? "\\U0001F600")+ # c' > "$text_corpus/seed-grammar-rep"
# A reply with tool calls (both forms), and a JSON Schema
printf '\001Sure.\n<tool_call>\n{"name": "f", "arguments": {"a": [1, "\\u00e9"]}}\n</tool_call>\n<tool_call>\n<function=g>\n<parameter=x>\n3\n</parameter>\n</function>\n</tool_call></tool_call>' \
    > "$text_corpus/seed-toolcall"
printf '\001{"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, "exclusiveMaximum": 120}, "s": {"type": "string", "pattern": "^[a-z]{2}(x|y)?$"}, "e": {"enum": [1, "a", null]}, "l": {"type": "array", "items": {"$ref": "#/$defs/d"}, "maxItems": 3}}, "required": ["n"], "$defs": {"d": {"type": "number", "minimum": 0.5}}}' \
    > "$text_corpus/seed-schema"
# The generator's odd vocabularies too (tests/gen_malformed.c), when it is built.
gen=${BUILD:-build}/gen_malformed
odd=$(dirname "$text_bin")/odd_vocabs
if [ -x "$gen" ] && rm -rf "$odd" && mkdir -p "$odd" && "$gen" "$odd" >/dev/null; then
    FUZZ_VOCABS=$(echo "$odd"/tok-*.gguf "$odd"/bpe-*.gguf)
    export FUZZ_VOCABS
fi
fuzz "tokenizer and chat templates" "$text_bin" "$text_corpus" 4096

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
