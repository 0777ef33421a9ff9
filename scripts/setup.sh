#!/usr/bin/env bash
# Installs what ilcheck's tests and corpus runs use on a fresh Debian machine: mono (the runtime
# oracle, ilasm, mcs, monodis, pedump) and its assemblies in /usr/lib/mono/4.5 (the real corpus).
# Safe to run again: it installs only what is missing.
set -euo pipefail
need=()
for tool in mono mcs ilasm monodis; do
    command -v "$tool" >/dev/null 2>&1 || need=(mono-devel)
done
command -v pedump >/dev/null 2>&1 || need+=(mono-utils)
[ -d /usr/lib/mono/4.5 ] || need+=(mono-devel)
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}" >&2
    sudo_cmd=()
    [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq mono-devel mono-utils >/dev/null
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo is required (rustup)" >&2; exit 1; }
echo "setup: mono $(mono --version | head -1 | sed 's/.*version \([^ ]*\).*/\1/'), $(ls /usr/lib/mono/4.5/*.dll | wc -l) assemblies in /usr/lib/mono/4.5" >&2
