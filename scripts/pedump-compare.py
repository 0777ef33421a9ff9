#!/usr/bin/env python3
"""Methods that `pedump --verify code` flags in a patched assembly but not in its original.

    scripts/pedump-compare.py ORIGINAL_DIR PATCHED_DIR [--timeout SECS]

For every assembly of PATCHED_DIR with an original of the same file name in ORIGINAL_DIR, runs
mono's pedump on both and prints, per assembly, the methods with a finding (a `Not Verifiable`
or `Error` line under their `In method:` header) in the patched file only, with those findings.
Offsets are not compared: a rewrite moves them. pedump finds the assemblies a patched file
references through mono's usual search, so a probe assembly must be in the GAC or on MONO_PATH.
Exit code 0 when no method is newly flagged, 1 otherwise, 2 when pedump is missing.
"""
import os
import shutil
import subprocess
import sys


def flagged(path, timeout):
    """Method name -> its finding lines (offsets dropped), as pedump prints them for `path`."""
    out = subprocess.run(["pedump", "--verify", "code", path], capture_output=True,
                         text=True, timeout=timeout).stdout
    methods, current = {}, None
    for line in out.splitlines():
        if line.startswith("In method:"):
            current = line[len("In method:"):].strip()
        elif line.startswith(("Not Verifiable", "Error:")) and current is not None:
            methods.setdefault(current, []).append(line.split(" at ")[0])
    return methods


def main():
    args = sys.argv[1:]
    timeout = 300
    if "--timeout" in args:
        i = args.index("--timeout")
        timeout = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    if shutil.which("pedump") is None:
        print("pedump is not installed (Debian: mono-utils)", file=sys.stderr)
        return 2
    original_dir, patched_dir = args
    total = 0
    for name in sorted(os.listdir(patched_dir)):
        original = os.path.join(original_dir, name)
        if not name.endswith((".dll", ".exe")) or not os.path.isfile(original):
            continue
        before = flagged(original, timeout)
        after = flagged(os.path.join(patched_dir, name), timeout)
        new = sorted(m for m in after if m not in before)
        if new:
            print(f"{name}: {len(new)} newly flagged method(s)")
            for m in new:
                print(f"  {m}: {'; '.join(sorted(set(after[m])))}")
        total += len(new)
    print(f"total: {total} newly flagged method(s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
