#!/usr/bin/env python3
"""Make ilasm output reproducible (run by build.sh on each ilasm-built file).

ilasm stamps every module with the current time (COFF TimeDateStamp) and a
random MVID. This zeroes the timestamp and replaces the MVID with the first 16
bytes of the SHA-256 of the file as it is with both fields zeroed, so that the
same sources always give byte-identical binaries. (mcs already does the same
with -deterministic.)
"""
import hashlib, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ildump  # noqa: E402


def normalize(path):
    img = ildump.Image(path)
    d = bytearray(img.d)
    pe = struct.unpack_from('<I', d, 0x3C)[0]
    struct.pack_into('<I', d, pe + 8, 0)           # COFF TimeDateStamp
    # Module table row 1: Generation u16, Name str-index, Mvid guid-index.
    t = (img.streams.get('#~') or img.streams['#-'])[0]
    heap = d[t + 6]
    sidx = 4 if heap & 1 else 2
    gidx = 4 if heap & 2 else 2
    valid = struct.unpack_from('<Q', d, t + 8)[0]
    nrows = bin(valid).count('1')
    row = t + 24 + 4 * nrows
    mvid_index = struct.unpack_from('<I' if gidx == 4 else '<H', d, row + 2 + sidx)[0]
    if mvid_index == 0:
        sys.exit('normalize_pe: %s has no MVID' % path)
    guid = img.streams['#GUID'][0] + 16 * (mvid_index - 1)
    d[guid:guid + 16] = bytes(16)
    d[guid:guid + 16] = hashlib.sha256(bytes(d)).digest()[:16]
    with open(path, 'wb') as f:
        f.write(d)


if __name__ == '__main__':
    for p in sys.argv[1:]:
        normalize(p)
