#!/usr/bin/env bash
# Digests of everything ilcheck outputs, for checking that a refactor changed no result:
# every rewrite output (each transform × branch mode on each corpus/bin file, and every
# transform with the default branch mode on each mono 4.5 assembly), and the findings and counts
# of `verify --json` and `roundtrip --json` (timings and other run-dependent fields left out).
#
#   bash scripts/digests.sh [ILCHECK_BINARY] > digests.txt     (default: target/release/ilcheck)
#
# Compare two binaries with `diff <(bash scripts/digests.sh OLD) <(bash scripts/digests.sh NEW)`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-target/release/ilcheck}"
[ -x "$bin" ] || { echo "digests.sh: $bin is not an executable (cargo build --release)" >&2; exit 2; }
mono_dir="${ILCHECK_MONO_DIR:-/usr/lib/mono/4.5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
transforms="identity nop-pad widen shorten prologue epilogue prologue-epilogue wrap-finally wrap-catch"

# One line per rewrite: file, transform, branch mode, exit code, digest of the output.
rewrite_digest() {
    local file="$1" t="$2" b="$3" code=0
    rm -f "$work/out"
    "$bin" rewrite "$file" -o "$work/out" --transform "$t" --branches "$b" >/dev/null 2>&1 || code=$?
    if [ -f "$work/out" ]; then
        echo "rewrite $(basename "$file") $t $b exit=$code $(sha256sum < "$work/out" | cut -c1-16)"
    else
        echo "rewrite $(basename "$file") $t $b exit=$code no-output"
    fi
}

for f in corpus/bin/*; do
    for t in $transforms; do
        for b in keep long short; do
            rewrite_digest "$f" "$t" "$b"
        done
    done
done
if [ -d "$mono_dir" ]; then
    for f in "$mono_dir"/*.dll; do
        for t in $transforms; do
            rewrite_digest "$f" "$t" keep
        done
    done
fi

# The stable parts of the JSON reports.
stable() {
    python3 -c '
import json, sys, hashlib
r = json.load(sys.stdin)
drop = {"sources", "seconds", "verify_seconds", "decode_seconds", "encode_seconds", "canonical_seconds"}
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if k not in drop}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
keep = {k: clean(v) for k, v in r.items() if k not in drop}
# Fields added by later schema versions are left out, so old and new reports compare.
for k in ("baseline_uncertain", "baseline_missing", "integrity_findings"):
    keep.pop(k, None)
print(hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16])
'
}
for target in corpus/bin "$mono_dir"; do
    [ -e "$target" ] || continue
    echo "verify $target $("$bin" verify "$target" --json --max 100000 2>/dev/null | stable)"
    echo "roundtrip $target $("$bin" roundtrip "$target" --json --canonical 2>/dev/null | stable)"
done
