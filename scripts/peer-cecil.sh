#!/usr/bin/env bash
# The `prologue-epilogue` workload with Mono.Cecil under mono, beside ilcheck's
# `examples/rewrite_corpus`, on the same machine: the peer figure the rewrite throughput report
# compares with. Uses the Mono.Cecil 0.11 that Debian's mono ships in its GAC (installs
# mono-devel when mono is missing).
#
#   scripts/peer-cecil.sh [DIR] [ROUNDS]     # default /usr/lib/mono/4.5, 3 rounds
#
# Runs Cecil reading from files and from memory, on 1 and 2 threads, then ilcheck on 1 and 2
# threads (best of 5), and prints each figure. Set CECIL_OUT=DIR to keep Cecil's last output
# (one file per assembly) for `ilcheck verify`.
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
