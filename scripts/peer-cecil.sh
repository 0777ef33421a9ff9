#!/usr/bin/env bash
# The `prologue-epilogue` workload with Mono.Cecil under mono, beside ilcheck's
# `examples/rewrite_corpus`, on the same machine: the peer figure the rewrite throughput report
# compares with. Uses the Mono.Cecil 0.11 that Debian's mono ships in its GAC (installs
# mono-devel when mono is missing).
#
#   scripts/peer-cecil.sh [DIR] [ROUNDS]     # default /usr/lib/mono/4.5, 3 rounds
#   PAIRS=N scripts/peer-cecil.sh [DIR] [ROUNDS]
#
# Runs Cecil reading from files and from memory, on 1 and 2 threads, then ilcheck on 1 and 2
# threads (best of 5), and prints each figure. Set CECIL_OUT=DIR to keep Cecil's last output
# (one file per assembly) for `ilcheck verify`.
#
# With PAIRS=N it measures the command line against Cecil instead, interleaved, for a host whose
# speed drifts by more than the difference being measured: N pairs of one Cecil process
# (reading files, 1 thread, best of ROUNDS) and then five runs of `ilcheck rewrite DIR/*.dll -o
# TMP -t prologue-epilogue` (the median of their own clocks, the output directory removed
# before each), printing each pair's ratio and then the median, least and greatest ratio.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-/usr/lib/mono/4.5}"
rounds="${2:-3}"
if ! command -v mcs >/dev/null || ! command -v mono >/dev/null; then
    apt-get install -y mono-devel
fi
cecil=$(ls -d /usr/lib/mono/gac/Mono.Cecil/0.11.*/Mono.Cecil.dll 2>/dev/null | tail -n 1)
if [ -z "$cecil" ]; then
    echo "no Mono.Cecil 0.11 in /usr/lib/mono/gac: install mono-devel" >&2
    exit 1
fi
target="${CARGO_TARGET_DIR:-$root/target}"
exe="$target/peers/cecil_prologue_epilogue.exe"
mkdir -p "$(dirname "$exe")"
mcs -nologo -optimize+ -out:"$exe" -r:"$cecil" "$root/benches/peers/cecil_prologue_epilogue.cs"
echo "Mono.Cecil: $cecil; mono: $(mono --version | head -n 1)"
if [ -n "${PAIRS:-}" ]; then
    (cd "$root" && cargo build --release --bin ilcheck)
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
    ratios=()
    for pair in $(seq "$PAIRS"); do
        c=$(mono "$exe" "$dir" "$rounds" 1 file | tail -n 1 | sed -n 's/.*wall \([0-9.]*\)s.*/\1/p')
        runs=()
        for _ in 1 2 3 4 5; do
            rm -rf "$out/o"
            runs+=("$("$target/release/ilcheck" rewrite "$dir"/*.dll -o "$out/o" -t prologue-epilogue \
                | tail -n 1 | sed -n 's/.* in \([0-9.]*\) s on .*/\1/p')")
        done
        i=$(printf '%s\n' "${runs[@]}" | sort -n | sed -n 3p)
        r=$(awk -v c="$c" -v i="$i" 'BEGIN { printf "%.1f", c / i }')
        ratios+=("$r")
        echo "pair $pair: Cecil $c s, ilcheck $i s (median of ${runs[*]}): ${r}x"
    done
    printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "ratio over %d pairs: median %.1fx, least %.1fx, greatest %.1fx\n", NR, m, a[1], a[NR] }'
    exit 0
fi
for mode in file memory; do
    for threads in 1 2; do
        out=()
        if [ -n "${CECIL_OUT:-}" ] && [ "$mode" = memory ] && [ "$threads" = 2 ]; then
            mkdir -p "$CECIL_OUT"
            out=("$CECIL_OUT")
        fi
        echo "Cecil, reading from $mode, $threads thread(s):"
        mono "$exe" "$dir" "$rounds" "$threads" "$mode" "${out[@]}" | tail -n 1
    done
done
(cd "$root" && cargo build --release --example rewrite_corpus)
for threads in 1 2; do
    echo "ilcheck, $threads thread(s), whole assemblies:"
    "$target/release/examples/rewrite_corpus" "$dir" 999 5 "$threads" images verify | tail -n 2
done
