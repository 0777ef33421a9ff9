#!/usr/bin/env bash
# Installs what ilcheck's tests and corpus runs use on a fresh Debian machine: mono (a runtime
# oracle, ilasm, mcs, monodis, pedump) and its assemblies in /usr/lib/mono/4.5 (the real corpus),
# the Mono.Cecil 0.11 in mono's GAC (the sample rewriters of corpus/rewriters are built on it),
# and Microsoft's CoreCLR 3.1 (the second runtime oracle: PyPI's dotnetcore2 in a virtual
# environment under $ILCHECK_CORECLR_DIR, default /opt/ilcheck-coreclr), and in the same
# environment the JSON-schema validator the report tests use.
# Safe to run again: it installs only what is missing.
set -euo pipefail
need=()
for tool in mono mcs ilasm monodis; do
    command -v "$tool" >/dev/null 2>&1 || need=(mono-devel)
done
command -v pedump >/dev/null 2>&1 || need+=(mono-utils)
[ -d /usr/lib/mono/4.5 ] || need+=(mono-devel)
ls -d /usr/lib/mono/gac/Mono.Cecil/0.11.* >/dev/null 2>&1 || need+=(libmono-cecil-private-cil)
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}" >&2
    sudo_cmd=()
    [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq mono-devel mono-utils libmono-cecil-private-cil >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo is required (rustup)" >&2; exit 1; }

coreclr_dir="${ILCHECK_CORECLR_DIR:-/opt/ilcheck-coreclr}"
dotnet=$(ls "$coreclr_dir"/lib/python3*/site-packages/dotnetcore2/bin/dotnet 2>/dev/null | head -1 || true)
if [ -z "$dotnet" ]; then
    echo "setup: installing CoreCLR 3.1 (dotnetcore2) into $coreclr_dir" >&2
    if ! python3 -m venv "$coreclr_dir" >/dev/null 2>&1; then
        sudo_cmd=()
        [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
        "${sudo_cmd[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$coreclr_dir"
    fi
    "$coreclr_dir/bin/pip" install -q --disable-pip-version-check dotnetcore2==3.1.23
    dotnet=$(ls "$coreclr_dir"/lib/python3*/site-packages/dotnetcore2/bin/dotnet | head -1)
fi
# The schema validator the report tests use (SARIF 2.1.0 and ilcheck's own JSON schemas).
if ! "$coreclr_dir/bin/python" -c "import jsonschema" >/dev/null 2>&1; then
    echo "setup: installing jsonschema into $coreclr_dir" >&2
    "$coreclr_dir/bin/pip" install -q --disable-pip-version-check jsonschema==4.23.0
fi
echo "setup: CoreCLR $(ls "$(dirname "$dotnet")/shared/Microsoft.NETCore.App" | sort -V | tail -1) at $dotnet" >&2
echo "setup: mono $(mono --version | head -1 | sed 's/.*version \([^ ]*\).*/\1/'), $(ls /usr/lib/mono/4.5/*.dll | wc -l) assemblies in /usr/lib/mono/4.5" >&2
