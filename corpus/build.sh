#!/usr/bin/env bash
# Rebuild every corpus binary from source into corpus/bin/.
#
#   bash corpus/build.sh            rebuild IL and C# binaries, refresh *.expected
#   bash corpus/build.sh --check    rebuild into a temp dir and compare with the
#                                   committed binaries (byte for byte) and
#                                   the committed *.expected outputs
#
# Needs: ilasm, mcs, mono, monodis (Debian/Ubuntu: mono-devel mono-utils), python3.
# Output is reproducible: mcs runs with -deterministic, and ilasm output has
# its timestamp zeroed and its MVID derived from the content
# (tools/normalize_pe.py).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

missing=0
for tool in ilasm mcs mono monodis python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "build.sh: required tool '$tool' not found (apt-get install -y mono-devel mono-utils python3)" >&2
        missing=1
    fi
done
[ "$missing" -eq 0 ] || exit 1

check=0
[ "${1:-}" = "--check" ] && check=1

out="$here/bin"
if [ "$check" -eq 1 ]; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
gen="$(mktemp -d)"
trap 'rm -rf "$gen"; [ "$check" -eq 1 ] && rm -rf "$out"' EXIT

# Stable environment for the tools.
export LC_ALL=C TZ=UTC MONO_ENV_OPTIONS=

run_ilasm() { # output, inputs...
    local o="$1"; shift
    local log
    if ! log="$(ilasm /dll /quiet /output:"$o" "$@" 2>&1)"; then
        echo "$log" >&2
        echo "build.sh: ilasm failed for $o" >&2
        exit 1
    fi
    [ -s "$o" ] || { echo "build.sh: ilasm produced no $o" >&2; exit 1; }
    python3 tools/normalize_pe.py "$o"
}

# 1. IL corpus --------------------------------------------------------------
python3 tools/gen_codec.py "$gen/codec_generated.il"
run_ilasm "$out/codec_shapes.dll" il/codec_shapes.il "$gen/codec_generated.il"
run_ilasm "$out/verify_cases.dll" il/verify_cases.il
run_ilasm "$out/type_cases.dll" il/type_cases.il
python3 tools/patch_verify_cases.py "$out/verify_cases.dll"
python3 tools/normalize_pe.py "$out/verify_cases.dll"

# 2. C# runtime-oracle programs ----------------------------------------------
# Each program is built twice: optimized and unoptimized (different IL shapes).
for src in cs/*.cs; do
    name="$(basename "$src" .cs)"
    mcs -nologo -unsafe -optimize+ -debug- -deterministic -out:"$out/$name.exe" "$src"
    mcs -nologo -unsafe -optimize- -debug- -deterministic -out:"$out/$name.debug.exe" "$src"
    # Record expected output (both variants must agree).
    a="$(mono "$out/$name.exe")"
    b="$(mono "$out/$name.debug.exe")"
    if [ "$a" != "$b" ]; then
        echo "build.sh: $name: optimized and unoptimized builds print different output" >&2
        exit 1
    fi
    if [ "$check" -eq 1 ]; then
        if ! diff <(printf '%s\n' "$a") "cs/$name.expected" >/dev/null; then
            echo "build.sh: $name: output differs from cs/$name.expected" >&2
            exit 1
        fi
    else
        printf '%s\n' "$a" > "cs/$name.expected"
    fi
done

# 3. Sanity checks -------------------------------------------------------------
python3 tools/ildump.py --coverage "$out/codec_shapes.dll" "$out/verify_cases.dll" "$out"/*.exe

if [ "$check" -eq 1 ]; then
    status=0
    for f in "$out"/*.dll "$out"/*.exe; do
        b="$(basename "$f")"
        if ! cmp -s "$f" "bin/$b"; then
            if diff <(python3 tools/ildump.py --bodies "$f") <(python3 tools/ildump.py --bodies "bin/$b") >/dev/null; then
                echo "build.sh: bin/$b differs from a fresh build (method bodies are identical)" >&2
            else
                echo "build.sh: bin/$b differs from a fresh build, including method bodies" >&2
            fi
            status=1
        fi
    done
    [ "$status" -eq 0 ] && echo "build.sh: committed binaries match a fresh build byte for byte"
    exit "$status"
fi
echo "build.sh: wrote $(ls "$out" | wc -l) files to corpus/bin/"
