#!/bin/sh
# fuzz_seed.sh: fills a libFuzzer corpus directory with small GGUF seeds.
#
# Usage: sh tests/fuzz_seed.sh CORPUS_DIR    (SHARED: the shared data directory,
#                                              default ../shared; skipped if absent)
#
# The shared models and vocabularies are megabytes. Their first 64 KiB hold the header,
# the key-value pairs and usually the tensor infos, which is where the parser's logic
# is, so each seed is that prefix (the fuzzer runs with -max_len=65536). A tiny complete
# file is written as well, so the fuzzer also starts from an input that parses.
set -eu

corpus=${1:?usage: fuzz_seed.sh CORPUS_DIR}
shared=${SHARED:-../shared}
mkdir -p "$corpus"

n=0
for f in "$shared"/models/*.gguf "$shared"/models/ref/*.gguf "$shared"/vocab/*.gguf; do
    [ -f "$f" ] || continue # an unmatched glob stays literal
    head -c 65536 "$f" > "$corpus/seed-$(basename "$f" .gguf)"
    n=$((n + 1))
done

# Little-endian integers below 256, as octal escapes for printf.
le32() { printf "\\$(printf '%03o' "$1")\\000\\000\\000"; }
le64() { le32 "$1"; printf '\000\000\000\000'; }
str() { le64 ${#1}; printf '%s' "$1"; }

# GGUF v3 with general.alignment = 32, a two-string token list and one F32 tensor [4].
tiny="$corpus/seed-tiny"
{
    printf 'GGUF'; le32 3; le64 1; le64 2
    str general.alignment; le32 4; le32 32
    str tokenizer.ggml.tokens; le32 9; le32 8; le64 2; str a; str bc
    str w; le32 1; le64 4; le32 0; le64 0
} > "$tiny"
size=$(wc -c < "$tiny")
head -c $(((32 - size % 32) % 32)) /dev/zero >> "$tiny" # pad to the alignment
printf '\000\000\200\077\000\000\000\100\000\000\100\100\000\000\200\100' >> "$tiny"

echo "fuzz_seed: $((n + 1)) seeds in $corpus"
