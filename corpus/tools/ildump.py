#!/usr/bin/env python3
"""Minimal, dependency-free method-body lister for the corpus binaries.

Usage:
  ildump.py FILE...              one line per method: name, header kind, maxstack,
                                 code size, EH section kind and clause count
  ildump.py --bodies FILE...     one line per method: name and the hex of the
                                 whole body (header, code, EH section); used by
                                 build.sh --check
  ildump.py --coverage FILE...   list ECMA-335 Partition III opcodes that no method
                                 body in FILE... uses (exit 1 if any are missing)

It reads only what it needs (PE sections, the #~ / #Strings heaps, TypeDef and
MethodDef tables) and decodes instructions linearly. Bodies that are
deliberately malformed (see il/verify_cases.il) are decoded best-effort:
decoding stops at the first byte that is not an opcode.
"""
import struct, sys

# (value, mnemonic, operand kind). Operand kinds: none, i1, i4, i8, r4, r8, tok,
# br1, br4, sw, var1, var2, u1 (unaligned. alignment / no. flags).
OPCODES = [
 (0x00,'nop',''),(0x01,'break',''),(0x02,'ldarg.0',''),(0x03,'ldarg.1',''),(0x04,'ldarg.2',''),
 (0x05,'ldarg.3',''),(0x06,'ldloc.0',''),(0x07,'ldloc.1',''),(0x08,'ldloc.2',''),(0x09,'ldloc.3',''),
 (0x0A,'stloc.0',''),(0x0B,'stloc.1',''),(0x0C,'stloc.2',''),(0x0D,'stloc.3',''),(0x0E,'ldarg.s','var1'),
 (0x0F,'ldarga.s','var1'),(0x10,'starg.s','var1'),(0x11,'ldloc.s','var1'),(0x12,'ldloca.s','var1'),
 (0x13,'stloc.s','var1'),(0x14,'ldnull',''),(0x15,'ldc.i4.m1',''),(0x16,'ldc.i4.0',''),(0x17,'ldc.i4.1',''),
 (0x18,'ldc.i4.2',''),(0x19,'ldc.i4.3',''),(0x1A,'ldc.i4.4',''),(0x1B,'ldc.i4.5',''),(0x1C,'ldc.i4.6',''),
 (0x1D,'ldc.i4.7',''),(0x1E,'ldc.i4.8',''),(0x1F,'ldc.i4.s','i1'),(0x20,'ldc.i4','i4'),(0x21,'ldc.i8','i8'),
 (0x22,'ldc.r4','r4'),(0x23,'ldc.r8','r8'),(0x25,'dup',''),(0x26,'pop',''),(0x27,'jmp','tok'),
 (0x28,'call','tok'),(0x29,'calli','tok'),(0x2A,'ret',''),(0x2B,'br.s','br1'),(0x2C,'brfalse.s','br1'),
 (0x2D,'brtrue.s','br1'),(0x2E,'beq.s','br1'),(0x2F,'bge.s','br1'),(0x30,'bgt.s','br1'),(0x31,'ble.s','br1'),
 (0x32,'blt.s','br1'),(0x33,'bne.un.s','br1'),(0x34,'bge.un.s','br1'),(0x35,'bgt.un.s','br1'),
 (0x36,'ble.un.s','br1'),(0x37,'blt.un.s','br1'),(0x38,'br','br4'),(0x39,'brfalse','br4'),(0x3A,'brtrue','br4'),
 (0x3B,'beq','br4'),(0x3C,'bge','br4'),(0x3D,'bgt','br4'),(0x3E,'ble','br4'),(0x3F,'blt','br4'),
 (0x40,'bne.un','br4'),(0x41,'bge.un','br4'),(0x42,'bgt.un','br4'),(0x43,'ble.un','br4'),(0x44,'blt.un','br4'),
 (0x45,'switch','sw'),(0x46,'ldind.i1',''),(0x47,'ldind.u1',''),(0x48,'ldind.i2',''),(0x49,'ldind.u2',''),
 (0x4A,'ldind.i4',''),(0x4B,'ldind.u4',''),(0x4C,'ldind.i8',''),(0x4D,'ldind.i',''),(0x4E,'ldind.r4',''),
 (0x4F,'ldind.r8',''),(0x50,'ldind.ref',''),(0x51,'stind.ref',''),(0x52,'stind.i1',''),(0x53,'stind.i2',''),
 (0x54,'stind.i4',''),(0x55,'stind.i8',''),(0x56,'stind.r4',''),(0x57,'stind.r8',''),(0x58,'add',''),
 (0x59,'sub',''),(0x5A,'mul',''),(0x5B,'div',''),(0x5C,'div.un',''),(0x5D,'rem',''),(0x5E,'rem.un',''),
 (0x5F,'and',''),(0x60,'or',''),(0x61,'xor',''),(0x62,'shl',''),(0x63,'shr',''),(0x64,'shr.un',''),
 (0x65,'neg',''),(0x66,'not',''),(0x67,'conv.i1',''),(0x68,'conv.i2',''),(0x69,'conv.i4',''),
 (0x6A,'conv.i8',''),(0x6B,'conv.r4',''),(0x6C,'conv.r8',''),(0x6D,'conv.u4',''),(0x6E,'conv.u8',''),
 (0x6F,'callvirt','tok'),(0x70,'cpobj','tok'),(0x71,'ldobj','tok'),(0x72,'ldstr','tok'),(0x73,'newobj','tok'),
 (0x74,'castclass','tok'),(0x75,'isinst','tok'),(0x76,'conv.r.un',''),(0x79,'unbox','tok'),(0x7A,'throw',''),
 (0x7B,'ldfld','tok'),(0x7C,'ldflda','tok'),(0x7D,'stfld','tok'),(0x7E,'ldsfld','tok'),(0x7F,'ldsflda','tok'),
 (0x80,'stsfld','tok'),(0x81,'stobj','tok'),(0x82,'conv.ovf.i1.un',''),(0x83,'conv.ovf.i2.un',''),
 (0x84,'conv.ovf.i4.un',''),(0x85,'conv.ovf.i8.un',''),(0x86,'conv.ovf.u1.un',''),(0x87,'conv.ovf.u2.un',''),
 (0x88,'conv.ovf.u4.un',''),(0x89,'conv.ovf.u8.un',''),(0x8A,'conv.ovf.i.un',''),(0x8B,'conv.ovf.u.un',''),
 (0x8C,'box','tok'),(0x8D,'newarr','tok'),(0x8E,'ldlen',''),(0x8F,'ldelema','tok'),(0x90,'ldelem.i1',''),
 (0x91,'ldelem.u1',''),(0x92,'ldelem.i2',''),(0x93,'ldelem.u2',''),(0x94,'ldelem.i4',''),(0x95,'ldelem.u4',''),
 (0x96,'ldelem.i8',''),(0x97,'ldelem.i',''),(0x98,'ldelem.r4',''),(0x99,'ldelem.r8',''),(0x9A,'ldelem.ref',''),
 (0x9B,'stelem.i',''),(0x9C,'stelem.i1',''),(0x9D,'stelem.i2',''),(0x9E,'stelem.i4',''),(0x9F,'stelem.i8',''),
 (0xA0,'stelem.r4',''),(0xA1,'stelem.r8',''),(0xA2,'stelem.ref',''),(0xA3,'ldelem','tok'),(0xA4,'stelem','tok'),
 (0xA5,'unbox.any','tok'),(0xB3,'conv.ovf.i1',''),(0xB4,'conv.ovf.u1',''),(0xB5,'conv.ovf.i2',''),
 (0xB6,'conv.ovf.u2',''),(0xB7,'conv.ovf.i4',''),(0xB8,'conv.ovf.u4',''),(0xB9,'conv.ovf.i8',''),
 (0xBA,'conv.ovf.u8',''),(0xC2,'refanyval','tok'),(0xC3,'ckfinite',''),(0xC6,'mkrefany','tok'),
 (0xD0,'ldtoken','tok'),(0xD1,'conv.u2',''),(0xD2,'conv.u1',''),(0xD3,'conv.i',''),(0xD4,'conv.ovf.i',''),
 (0xD5,'conv.ovf.u',''),(0xD6,'add.ovf',''),(0xD7,'add.ovf.un',''),(0xD8,'mul.ovf',''),(0xD9,'mul.ovf.un',''),
 (0xDA,'sub.ovf',''),(0xDB,'sub.ovf.un',''),(0xDC,'endfinally',''),(0xDD,'leave','br4'),(0xDE,'leave.s','br1'),
 (0xDF,'stind.i',''),(0xE0,'conv.u',''),
 (0xFE00,'arglist',''),(0xFE01,'ceq',''),(0xFE02,'cgt',''),(0xFE03,'cgt.un',''),(0xFE04,'clt',''),
 (0xFE05,'clt.un',''),(0xFE06,'ldftn','tok'),(0xFE07,'ldvirtftn','tok'),(0xFE09,'ldarg','var2'),
 (0xFE0A,'ldarga','var2'),(0xFE0B,'starg','var2'),(0xFE0C,'ldloc','var2'),(0xFE0D,'ldloca','var2'),
 (0xFE0E,'stloc','var2'),(0xFE0F,'localloc',''),(0xFE11,'endfilter',''),(0xFE12,'unaligned.','u1'),
 (0xFE13,'volatile.',''),(0xFE14,'tail.',''),(0xFE15,'initobj','tok'),(0xFE16,'constrained.','tok'),
 (0xFE17,'cpblk',''),(0xFE18,'initblk',''),(0xFE19,'no.','u1'),(0xFE1A,'rethrow',''),(0xFE1C,'sizeof','tok'),
 (0xFE1D,'refanytype',''),(0xFE1E,'readonly.',''),
]
BY_VALUE = {v: (n, k) for v, n, k in OPCODES}
OPSIZE = {'': 0, 'i1': 1, 'u1': 1, 'br1': 1, 'var1': 1, 'var2': 2, 'i4': 4, 'br4': 4, 'tok': 4,
          'r4': 4, 'i8': 8, 'r8': 8}


class Image:
    def __init__(self, path):
        self.d = d = open(path, 'rb').read()
        pe = struct.unpack_from('<I', d, 0x3C)[0]
        nsec = struct.unpack_from('<H', d, pe + 6)[0]
        optsz = struct.unpack_from('<H', d, pe + 20)[0]
        opt = pe + 24
        magic = struct.unpack_from('<H', d, opt)[0]
        ddir = opt + (96 if magic == 0x10B else 112)
        self.secs = []
        s = opt + optsz
        for i in range(nsec):
            vsz, va, rsz, rptr = struct.unpack_from('<IIII', d, s + 40 * i + 8)
            self.secs.append((va, max(vsz, rsz), rptr))
        cli_rva = struct.unpack_from('<I', d, ddir + 14 * 8)[0]
        cli = self.off(cli_rva)
        md = self.off(struct.unpack_from('<I', d, cli + 8)[0])
        vlen = struct.unpack_from('<I', d, md + 12)[0]
        p = md + 16 + vlen
        nstreams = struct.unpack_from('<H', d, p + 2)[0]
        p += 4
        self.streams = {}
        for _ in range(nstreams):
            o, sz = struct.unpack_from('<II', d, p)
            p += 8
            e = d.index(b'\0', p)
            name = d[p:e].decode()
            p = (e + 4) & ~3
            self.streams[name] = (md + o, sz)
        self.parse_tables()

    def off(self, rva):
        for va, sz, rptr in self.secs:
            if va <= rva < va + sz:
                return rva - va + rptr
        raise ValueError('rva %x' % rva)

    def string(self, idx):
        base = self.streams['#Strings'][0]
        e = self.d.index(b'\0', base + idx)
        return self.d[base + idx:e].decode()

    def parse_tables(self):
        d = self.d
        t = self.streams.get('#~') or self.streams['#-']
        t = t[0]
        heap = d[t + 6]
        valid = struct.unpack_from('<Q', d, t + 8)[0]
        p = t + 24
        rows = [0] * 64
        for i in range(64):
            if valid >> i & 1:
                rows[i] = struct.unpack_from('<I', d, p)[0]
                p += 4
        sidx = 4 if heap & 1 else 2
        bidx = 4 if heap & 4 else 2
        gidx = 4 if heap & 2 else 2
        def idx(tbl):
            return 4 if rows[tbl] > 0xFFFF else 2
        def coded(tbls, bits):
            return 4 if max(rows[x] for x in tbls) >= (1 << (16 - bits)) else 2
        tdor = coded([0x02, 0x01, 0x1B], 2)
        rscope = coded([0x00, 0x1A, 0x23, 0x01], 2)
        sizes = {
            0x00: 2 + sidx + 3 * gidx,
            0x01: rscope + 2 * sidx,
            0x02: 4 + 2 * sidx + tdor + idx(0x04) + idx(0x06),
            0x03: idx(0x04),
            0x04: 2 + sidx + bidx,
            0x05: idx(0x06),
        }
        off = {}
        for i in range(0x06):
            off[i] = p
            p += rows[i] * sizes[i]
        off[0x06] = p
        # TypeDef rows -> (name, first method)
        types = []
        q = off[0x02]
        for r in range(rows[0x02]):
            name = struct.unpack_from('<I' if sidx == 4 else '<H', d, q + 4)[0]
            ns = struct.unpack_from('<I' if sidx == 4 else '<H', d, q + 4 + sidx)[0]
            mo = q + 4 + 2 * sidx + tdor + idx(0x04)
            ml = struct.unpack_from('<I' if idx(0x06) == 4 else '<H', d, mo)[0]
            types.append((self.string(name), ml))
            q += sizes[0x02]
        msz = 8 + sidx + bidx + idx(0x08)
        self.methods = []
        q = off[0x06]
        for r in range(1, rows[0x06] + 1):
            rva = struct.unpack_from('<I', d, q)[0]
            name = struct.unpack_from('<I' if sidx == 4 else '<H', d, q + 8)[0]
            owner = ''
            for tn, ml in types:
                if ml <= r:
                    owner = tn
            self.methods.append((owner + '::' + self.string(name), rva))
            q += msz

    def body(self, rva):
        d = self.d
        o = self.off(rva)
        b0 = d[o]
        if b0 & 3 == 2:
            return dict(kind='tiny', maxstack=8, code=d[o + 1:o + 1 + (b0 >> 2)], eh=None, locals=0, init=False,
                        raw=d[o:o + 1 + (b0 >> 2)])
        flags, maxstack, size, ltok = struct.unpack_from('<HHII', d, o)
        hs = (flags >> 12) * 4
        code = d[o + hs:o + hs + size]
        eh = None
        if flags & 8:
            p = (o + hs + size + 3) & ~3
            kind = d[p]
            if kind & 0x40:
                n = (struct.unpack_from('<I', d, p)[0] >> 8) // 24
                eh = ('fat', n)
            else:
                n = d[p + 1] // 12
                eh = ('small', n)
        end = o + hs + size
        if eh:
            p = (o + hs + size + 3) & ~3
            end = p + (n * 24 + 4 if eh[0] == 'fat' else n * 12 + 4)
        return dict(kind='fat', maxstack=maxstack, code=code, eh=eh, locals=ltok, init=bool(flags & 0x10),
                    raw=d[o:end])


def decode(code):
    """Yield (offset, mnemonic); stops at an unknown opcode or a truncated operand."""
    i = 0
    while i < len(code):
        start = i
        v = code[i]; i += 1
        if v == 0xFE:
            if i >= len(code):
                return
            v = 0xFE00 | code[i]; i += 1
        if v not in BY_VALUE:
            return
        name, kind = BY_VALUE[v]
        if kind == 'sw':
            if i + 4 > len(code):
                return
            n = struct.unpack_from('<I', code, i)[0]
            i += 4 + 4 * n
        else:
            i += OPSIZE[kind]
        if i > len(code):
            return
        yield start, name


def main(argv):
    cov = '--coverage' in argv
    bodies = '--bodies' in argv
    files = [a for a in argv if not a.startswith('--')]
    used = set()
    for f in files:
        img = Image(f)
        for name, rva in img.methods:
            if rva == 0:
                continue
            b = img.body(rva)
            ops = [n for _, n in decode(b['code'])]
            used.update(ops)
            if bodies:
                print(name, b['raw'].hex())
            elif not cov:
                eh = '%s EH x%d' % b['eh'] if b['eh'] else 'no EH'
                print('%-60s %-4s maxstack=%-5d code=%-6d %s%s%s' % (
                    name, b['kind'], b['maxstack'], len(b['code']), eh,
                    ' locals=%08x' % b['locals'] if b['locals'] else '', ' init' if b['init'] else ''))
    if cov:
        missing = [n for _, n, _ in OPCODES if n not in used]
        print('%d of %d opcodes used' % (len(OPCODES) - len(missing), len(OPCODES)))
        for n in missing:
            print('missing:', n)
        return 1 if missing else 0
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
