#!/usr/bin/env bash
# ilcheck's own `rewrite` as a rewriter under test, for `ilcheck fuzz --rewriter`: each program
# gets one of the transforms (and, for the entry/exit and wrap transforms, probes by name, taking
# the method's name, token, arguments and return value), chosen by a checksum of its file name,
# so a run covers all of them and a seed always gets the same one.
#
#   ilcheck fuzz --rewriter 'bash scripts/own-rewriter.sh {in} {out}' --with Acme.Probe.dll
#
# Acme.Probe.dll is corpus/probe/probe.cs built with mcs (`mcs -target:library
# -out:Acme.Probe.dll corpus/probe/probe.cs`); ILCHECK names the ilcheck binary (default: the
# one on PATH, else target/release/ilcheck).
set -euo pipefail
in=$1 out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
ilcheck=${ILCHECK:-$(command -v ilcheck || echo "$here/target/release/ilcheck")}
probe=$(dirname "$in")/Acme.Probe.dll
enter='void [Acme.Probe]Acme.Probe::EnterArgs(string, object[])'
exit_probe='void [Acme.Probe]Acme.Probe::ExitValue(string, object)'
variants=(identity nop-pad widen shorten prologue epilogue prologue-epilogue wrap-finally wrap-catch
    prologue-epilogue+probes epilogue+probes wrap-finally+probes)
# By the file name (gS.exe), not the scratch path: a seed gets the same transform in every run.
sum=$(basename "$in" | cksum | cut -d' ' -f1)
variant=${variants[$((sum % ${#variants[@]}))]}
transform=${variant%+probes}
args=(rewrite "$in" -o "$out" -t "$transform")
if [[ $variant == *+probes ]]; then
    [[ $transform == epilogue ]] || args+=(--prologue-call "$enter")
    args+=(--epilogue-call "$exit_probe" --reference "$probe")
fi
exec "$ilcheck" "${args[@]}"
