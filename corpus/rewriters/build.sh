#!/usr/bin/env bash
# Builds the sample rewriters with mcs into DIR (default: target/rewriters, or
# $CARGO_TARGET_DIR/rewriters):
#
#   weaver.exe         the Mono.Cecil probe weaver and its seeded bugs (weaver.cs)
#   run_triggers.exe   calls each method of corpus/il/weaver_triggers.il (run_triggers.cs)
#
#   bash corpus/rewriters/build.sh [DIR]
#
# Needs mcs and the Mono.Cecil 0.11 in mono's GAC (Debian: mono-devel, which pulls in
# libmono-cecil-private-cil; `bash scripts/setup.sh` installs both). The build is reproducible
# (mcs -deterministic): the same sources and tools give the same bytes.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-${CARGO_TARGET_DIR:-$root/target}/rewriters}"

if ! command -v mcs >/dev/null 2>&1; then
    echo "build.sh: mcs not found (apt-get install -y mono-devel, or bash scripts/setup.sh)" >&2
    exit 1
fi
cecil="$(ls -d /usr/lib/mono/gac/Mono.Cecil/0.11.*/Mono.Cecil.dll 2>/dev/null | sort -V | tail -n 1 || true)"
if [ -z "$cecil" ]; then
    echo "build.sh: no Mono.Cecil 0.11 in /usr/lib/mono/gac (apt-get install -y libmono-cecil-private-cil, or bash scripts/setup.sh)" >&2
    exit 1
fi

export LC_ALL=C TZ=UTC MONO_ENV_OPTIONS=
mkdir -p "$out"
mcs -nologo -optimize+ -debug- -deterministic -r:"$cecil" -out:"$out/weaver.exe" "$here/weaver.cs"
mcs -nologo -optimize+ -debug- -deterministic -out:"$out/run_triggers.exe" "$here/run_triggers.cs"
echo "build.sh: wrote $out/weaver.exe and $out/run_triggers.exe (Mono.Cecil: $cecil)"
