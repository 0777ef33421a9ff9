#!/usr/bin/env python3
"""Post-assembly patch for bin/verify_cases.dll (run by build.sh).

ilasm always emits at least `ret` for a method body, so a zero-length body
cannot be assembled. This rewrites the tiny header of
Verify.Cases::CodeSizeZero_Invalid_CodeSizeZero from 0x06 (tiny, 1 byte of
code) to 0x02 (tiny, 0 bytes of code). The `ret` byte stays in the file as
unreferenced padding; nothing else moves.
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ildump  # noqa: E402

TARGET = 'Cases::CodeSizeZero_Invalid_CodeSizeZero'


def main(path):
    img = ildump.Image(path)
    rvas = [rva for name, rva in img.methods if name == TARGET]
    if len(rvas) != 1:
        sys.exit('patch_verify_cases: %s not found exactly once' % TARGET)
    off = img.off(rvas[0])
    data = bytearray(img.d)
    if data[off:off + 2] == b'\x02\x2a' or data[off] == 0x02:
        return  # already patched
    if data[off:off + 2] != b'\x06\x2a':
        sys.exit('patch_verify_cases: unexpected body %s' % data[off:off + 2].hex())
    data[off] = 0x02
    with open(path, 'wb') as f:
        f.write(data)


if __name__ == '__main__':
    main(sys.argv[1])
