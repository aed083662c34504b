#!/bin/sh
# Remakes the figures of tests/data/exact.tsv: llama.cpp's NMSE against the exact
# result for each model's weights, over the tokens of its .ref.json.
#
#   scripts/exact-llamacpp.sh LLAMA_CPP_DIR [MODEL.gguf REF.json]
#
# LLAMA_CPP_DIR is a llama.cpp tree built with CMake into LLAMA_CPP_DIR/build, or into
# LLAMA_CPP_BUILD (for example vendor/llama.cpp of the PyPI source package
# llama-cpp-python 0.3.36; the build's libraries are in its bin/). The
# exact result is anyllm's reference ops (ANYLLM_ISA=ref); build/anyllm and
# build/test_ref must be built. Without a model, every model the data file lists (in
# ../shared/models); prints "model<TAB>NMSE" lines: the limits stay the data file's.
set -e
llama=${1:?usage: $0 LLAMA_CPP_DIR [MODEL.gguf REF.json]}
shared=${SHARED:-../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lib=${LLAMA_CPP_BUILD:-$llama/build}/bin
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
c++ -O2 -std=c++17 -I"$llama/include" -I"$llama/ggml/include" scripts/llamacpp_logits.cpp \
    -L"$lib" -lllama -lggml -lggml-base -o "$tmp/logits"

one() { # MODEL REF.json NAME
    tokens=$(tr -d ' \n' <"$2" | sed -E 's/.*"tokens":\[([0-9,]*)\].*/\1/')
    ANYLLM_ISA=ref build/anyllm logits -m "$1" --tokens "$tokens" -o "$tmp/exact.f32" -t 2 2>/dev/null
    "$tmp/logits" "$1" "$tmp/llama.f32" "$tokens" 2>/dev/null
    nmse=$(build/test_ref --compare "$tmp/llama.f32" "$tmp/exact.f32" 1 | sed -E 's/^NMSE //')
    printf '%s\t%s\n' "$3" "$nmse"
}

if [ $# -eq 3 ]; then
    one "$2" "$3" "$2"
    exit 0
fi
grep -vE '^#' tests/data/exact.tsv | while read -r model _; do
    one "$shared/models/$model" "$shared/models/${model%.gguf}.ref.json" "$model"
done
