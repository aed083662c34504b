#!/bin/sh
# Runs the libFuzzer target on the GGUF reader for FUZZ_SECONDS, seeded by
# tests/fuzz_seed.sh. Passes when the fuzzer finds no crash, leak or sanitizer report.
bin=${FUZZ_BIN:-build/fuzz/fuzz_gguf}
seconds=${FUZZ_SECONDS:-60}
corpus=$(dirname "$bin")/corpus
mkdir -p "$corpus" "$(dirname "$bin")/artifacts"
sh "$(dirname "$0")/fuzz_seed.sh" "$corpus"
if "$bin" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$(dirname "$bin")/artifacts/" "$corpus" 2>"$(dirname "$bin")/log"; then
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov:' "$(dirname "$bin")/log" | tail -n 3
    echo "fuzz: ${seconds}s on the GGUF reader found nothing"
    echo "1 passed, 0 failed"
else
    tail -n 40 "$(dirname "$bin")/log"
    echo "fuzz: the fuzzer found a failing input (see $(dirname "$bin")/artifacts)"
    echo "0 passed, 1 failed"
    exit 1
fi
