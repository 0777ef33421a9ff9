#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 40) on this stable toolchain (`-s none`),
# seeded from the project's own assemblies. A crash fails the run; its input is left under
# fuzz/artifacts/TARGET/ (see corpus/regressions/README.md to keep it as a regression test).
set -euo pipefail
seconds=${1:-40}
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
cargo run --release -q --example fuzz_seeds -- fuzz/corpus
cd fuzz
targets=$(cargo fuzz list)
cargo fuzz build -s none -O
for t in $targets; do
    log=$(mktemp)
    if ! cargo fuzz run -s none -O "$t" "corpus/$t" -- -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log"
        echo "fuzz: $t FAILED; input in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $t: $runs executions in ${seconds}s, no failure"
    rm -f "$log"
done
