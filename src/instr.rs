//! Instructions: a zero-copy iterator over IL code and an owned form, both driven by the opcode
//! table.
//!
//! Decoding never allocates: a `switch` table stays a borrowed slice of its raw displacements.
//! Branch displacements are kept as stored, so a target in the middle of an instruction or outside
//! the method still decodes and re-encodes exactly; the verifier judges it.

use crate::opcode::{DECODE, FAST_LEN, Opcode, OperandKind};

/// The targets of a `switch`: raw little-endian `int32` displacements (borrowed), or owned values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SwitchTargets<'a> {
    /// `4 * len` bytes straight from the code.
    Raw(&'a [u8]),
    /// Displacements built or edited in memory.
    Owned(Vec<i32>),
}

/// A `switch` table read in place from the code, for the passes that keep no decoded
/// targets: the one reader of its layout (III.3.66: the case count, then a 32-bit
/// displacement per case, each from the end of the table).
#[derive(Clone, Copy, Debug)]
pub struct SwitchTable<'c> {
    code: &'c [u8],
    /// Where the displacements start.
    table: usize,
    count: usize,
}

impl<'c> SwitchTable<'c> {
    /// The table of the `switch` at byte `at` of `code`, with `count` cases (the decoder's
    /// reading of its operand).
    #[inline]
    pub fn new(code: &'c [u8], at: usize, count: u32) -> Self {
        SwitchTable {
            code,
            table: at + 5,
            count: count as usize,
        }
    }

    /// The table of the `switch` at byte `at` of `code`, its count read from the code (no
    /// cases when the count is not there).
    #[inline]
    pub fn read(code: &'c [u8], at: usize) -> Self {
        let count = code
            .get(at + 1..at + 5)
            .map_or(0, |c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        Self::new(code, at, count)
    }

    /// Where the instruction after the table starts: the displacements' origin.
    #[inline]
    fn next(&self) -> i64 {
        (self.table + 4 * self.count) as i64
    }

    /// Case `k`'s target, an offset from the start of the code (outside it when the
    /// displacement says so); `None` when its displacement is not in the code.
    #[inline]
    pub fn target(&self, k: usize) -> Option<i64> {
        let at = self.table + 4 * k;
        let c = self.code.get(at..at + 4)?;
        Some(self.next() + i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
    }

    /// Every case's target in order, as [`Self::target`]; none unless the whole table is in
    /// the code.
    pub fn targets(self) -> impl Iterator<Item = i64> + 'c {
        let next = self.next();
        self.code
            .get(self.table..self.table + 4 * self.count)
            .unwrap_or(&[])
            .chunks_exact(4)
            .map(move |c| next + i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
    }
}

impl SwitchTargets<'_> {
    /// Number of targets (the `switch` count N).
    pub fn len(&self) -> usize {
        match self {
            SwitchTargets::Raw(raw) => raw.len() / 4,
            SwitchTargets::Owned(v) => v.len(),
        }
    }

    /// Whether the table has no targets (a `switch` that always falls through).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The displacements, relative to the end of the `switch` instruction.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i32> + '_ {
        let (raw, owned): (&[u8], &[i32]) = match self {
            SwitchTargets::Raw(raw) => (raw, &[]),
            SwitchTargets::Owned(v) => (&[], v),
        };
        let raw_iter = raw
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        // Exactly one of the two is non-empty.
        RawOrOwned {
            raw: raw_iter,
            owned: owned.iter(),
        }
    }

    /// The same displacements as an owned table.
    pub fn to_owned_targets(&self) -> SwitchTargets<'static> {
        SwitchTargets::Owned(self.iter().collect())
    }
}

struct RawOrOwned<R, O> {
    raw: R,
    owned: O,
}

impl<'b, R: ExactSizeIterator<Item = i32>, O: ExactSizeIterator<Item = &'b i32>> Iterator
    for RawOrOwned<R, O>
{
    type Item = i32;
    fn next(&mut self) -> Option<i32> {
        self.raw.next().or_else(|| self.owned.next().copied())
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.raw.len() + self.owned.len();
        (n, Some(n))
    }
}

impl<'b, R: ExactSizeIterator<Item = i32>, O: ExactSizeIterator<Item = &'b i32>> ExactSizeIterator
    for RawOrOwned<R, O>
{
}

/// An instruction's operand. Which variant goes with which opcode is fixed by
/// [`OperandKind`]; the encoder checks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operand<'a> {
    /// No operand (InlineNone).
    None,
    /// ShortInlineI.
    Int8(i8),
    /// InlineI.
    Int32(i32),
    /// InlineI8.
    Int64(i64),
    /// ShortInlineR as raw IEEE bits (NaN payloads survive).
    Float32(u32),
    /// InlineR as raw IEEE bits.
    Float64(u64),
    /// Short branch displacement, relative to the next instruction.
    ShortBranch(i8),
    /// Long branch displacement, relative to the next instruction.
    Branch(i32),
    /// InlineSwitch: the case displacements, relative to the end of the whole instruction.
    Switch(SwitchTargets<'a>),
    /// A local or argument index (ShortInlineVar holds it in one byte, InlineVar in two).
    Var(u16),
    /// A metadata token.
    Token(u32),
}

impl Operand<'_> {
    /// The same operand, owning its switch table.
    pub fn into_owned(self) -> Operand<'static> {
        match self {
            Operand::None => Operand::None,
            Operand::Int8(v) => Operand::Int8(v),
            Operand::Int32(v) => Operand::Int32(v),
            Operand::Int64(v) => Operand::Int64(v),
            Operand::Float32(v) => Operand::Float32(v),
            Operand::Float64(v) => Operand::Float64(v),
            Operand::ShortBranch(v) => Operand::ShortBranch(v),
            Operand::Branch(v) => Operand::Branch(v),
            Operand::Switch(t) => Operand::Switch(t.to_owned_targets()),
            Operand::Var(v) => Operand::Var(v),
            Operand::Token(v) => Operand::Token(v),
        }
    }

    /// Whether this operand is the right shape for `kind`.
    pub fn fits(&self, kind: OperandKind) -> bool {
        match self {
            Operand::None => kind == OperandKind::None,
            Operand::Int8(_) => kind == OperandKind::ShortI,
            Operand::Int32(_) => kind == OperandKind::I,
            Operand::Int64(_) => kind == OperandKind::I8,
            Operand::Float32(_) => kind == OperandKind::ShortR,
            Operand::Float64(_) => kind == OperandKind::R,
            Operand::ShortBranch(_) => kind == OperandKind::ShortBrTarget,
            Operand::Branch(_) => kind == OperandKind::BrTarget,
            Operand::Switch(_) => kind == OperandKind::Switch,
            Operand::Var(v) => {
                matches!(kind, OperandKind::Local | OperandKind::Arg)
                    || (matches!(kind, OperandKind::ShortLocal | OperandKind::ShortArg)
                        && *v <= 0xFF)
            }
            Operand::Token(_) => kind.is_token(),
        }
    }
}

/// One decoded instruction at an IL offset.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Instruction<'a> {
    /// Offset of the first opcode byte from the start of the code.
    pub offset: u32,
    /// The opcode (a prefix is an instruction of its own).
    pub opcode: Opcode,
    /// The operand, as stored.
    pub operand: Operand<'a>,
}

impl<'a> Instruction<'a> {
    /// Encoded size in bytes.
    pub fn size(&self) -> usize {
        let operand = match (&self.operand, self.opcode.operand_kind().fixed_size()) {
            (_, Some(n)) => n,
            (Operand::Switch(t), None) => 4 + 4 * t.len(),
            (_, None) => 4,
        };
        self.opcode.size() + operand
    }

    /// Offset of the instruction that follows, where displacements are measured from.
    pub fn next_offset(&self) -> i64 {
        self.offset as i64 + self.size() as i64
    }

    /// Absolute target of a branch (`br`, `leave`, conditional branches), if this is one. May lie
    /// outside the method: callers check.
    pub fn branch_target(&self) -> Option<i64> {
        match self.operand {
            Operand::ShortBranch(d) => Some(self.next_offset() + d as i64),
            Operand::Branch(d) => Some(self.next_offset() + d as i64),
            Operand::None
            | Operand::Int8(_)
            | Operand::Int32(_)
            | Operand::Int64(_)
            | Operand::Float32(_)
            | Operand::Float64(_)
            | Operand::Switch(_)
            | Operand::Var(_)
            | Operand::Token(_) => None,
        }
    }

    /// The local or argument index the operand names explicitly (`ldloc.s 5`), if it does.
    pub fn var(&self) -> Option<u16> {
        match self.operand {
            Operand::Var(v) => Some(v),
            Operand::None
            | Operand::Int8(_)
            | Operand::Int32(_)
            | Operand::Int64(_)
            | Operand::Float32(_)
            | Operand::Float64(_)
            | Operand::ShortBranch(_)
            | Operand::Branch(_)
            | Operand::Switch(_)
            | Operand::Token(_) => None,
        }
    }

    /// Every target this instruction may transfer to (branch target or switch cases), in order.
    pub fn targets(&self) -> impl Iterator<Item = i64> + '_ {
        let next = self.next_offset();
        let single = self.branch_target();
        let cases = match &self.operand {
            Operand::Switch(t) => Some(t.iter().map(move |d| next + d as i64)),
            // Other operands have no cases; branches are `single` above.
            _ => None,
        };
        single.into_iter().chain(cases.into_iter().flatten())
    }

    /// The same instruction, owning its switch table.
    pub fn into_owned(self) -> Instruction<'static> {
        Instruction {
            offset: self.offset,
            opcode: self.opcode,
            operand: self.operand.into_owned(),
        }
    }

    /// Appends the encoded instruction to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        encode(self.opcode, &self.operand, out)
    }
}

/// Why an instruction could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The operand's variant is not the one the opcode's [`OperandKind`] takes, or a
    /// one-byte local or argument index is above 255.
    #[error("operand {operand:?} does not fit opcode {opcode} (expects {expected:?})")]
    OperandMismatch {
        /// The opcode.
        opcode: Opcode,
        /// The operand given.
        operand: Operand<'static>,
        /// The operand kind the opcode takes.
        expected: OperandKind,
    },
    /// A `switch` with more targets than its `uint32` count can say (the number of targets).
    #[error("switch with {0} targets is too large to encode")]
    SwitchTooLarge(usize),
}

/// Appends `opcode` with `operand` to `out`.
pub fn encode(opcode: Opcode, operand: &Operand<'_>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let kind = opcode.operand_kind();
    if !operand.fits(kind) {
        return Err(EncodeError::OperandMismatch {
            opcode,
            operand: operand.clone().into_owned(),
            expected: kind,
        });
    }
    let code = opcode.code();
    if code >> 8 == 0xFE {
        out.extend_from_slice(&[0xFE, code as u8]);
    } else {
        out.push(code as u8);
    }
    match operand {
        Operand::None => {}
        Operand::Int8(v) => out.push(*v as u8),
        Operand::ShortBranch(v) => out.push(*v as u8),
        Operand::Int32(v) | Operand::Branch(v) => out.extend_from_slice(&v.to_le_bytes()),
        Operand::Int64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Operand::Float32(v) | Operand::Token(v) => out.extend_from_slice(&v.to_le_bytes()),
        Operand::Float64(v) => out.extend_from_slice(&v.to_le_bytes()),
        // `fits` above has matched the kind to the operand: a variable's kind is one of four.
        Operand::Var(v) if matches!(kind, OperandKind::ShortLocal | OperandKind::ShortArg) => {
            out.push(*v as u8)
        }
        Operand::Var(v) => out.extend_from_slice(&v.to_le_bytes()),
        Operand::Switch(targets) => {
            let n = u32::try_from(targets.len())
                .map_err(|_| EncodeError::SwitchTooLarge(targets.len()))?;
            out.extend_from_slice(&n.to_le_bytes());
            match targets {
                SwitchTargets::Raw(raw) => out.extend_from_slice(raw),
                SwitchTargets::Owned(v) => v
                    .iter()
                    .for_each(|d| out.extend_from_slice(&d.to_le_bytes())),
            }
        }
    }
    Ok(())
}

/// Why the code stream could not be decoded at an IL offset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstrError {
    /// The byte, or the `FE xx` pair, at `offset` is no opcode of Partition III.
    #[error("IL_{offset:04x}: unknown opcode {}", fmt_code(*code))]
    UnknownOpcode {
        /// IL offset of the instruction.
        offset: u32,
        /// The encoding found: `0x00XX`, or `0xFEXX` for a two-byte one.
        code: u16,
    },
    /// The code ends inside the operand.
    #[error("IL_{offset:04x}: {opcode} needs {needed} operand bytes, only {available} remain")]
    OperandTruncated {
        /// IL offset of the instruction.
        offset: u32,
        /// Its opcode.
        opcode: Opcode,
        /// Operand bytes the opcode takes (4 for `switch`'s count).
        needed: usize,
        /// Code bytes after the opcode.
        available: usize,
    },
    /// A `switch` count needs more case bytes than the code has left.
    #[error("IL_{offset:04x}: switch with {count} targets runs past the end of the code")]
    SwitchTruncated {
        /// IL offset of the `switch`.
        offset: u32,
        /// The count N as stored.
        count: u32,
    },
    /// The code ends right after an `FE` escape byte.
    #[error("IL_{offset:04x}: code ends inside a two-byte opcode")]
    OpcodeTruncated {
        /// IL offset of the `FE` byte.
        offset: u32,
    },
}

impl InstrError {
    /// IL offset of the faulty instruction.
    pub fn offset(&self) -> u32 {
        match *self {
            InstrError::UnknownOpcode { offset, .. }
            | InstrError::OperandTruncated { offset, .. }
            | InstrError::SwitchTruncated { offset, .. }
            | InstrError::OpcodeTruncated { offset } => offset,
        }
    }
}

fn fmt_code(code: u16) -> String {
    if code >> 8 == 0xFE {
        format!("FE {:02X}", code & 0xFF)
    } else {
        format!("{code:02X}")
    }
}

#[inline(always)]
fn le<const N: usize>(code: &[u8], at: usize) -> [u8; N] {
    // Callers have checked that `at + N <= code.len()`.
    code[at..at + N].try_into().unwrap_or([0; N])
}

/// Decodes the instruction starting at `pos` in `code` (`pos < code.len()`).
#[inline]
pub fn decode_at(code: &[u8], pos: usize) -> Result<Instruction<'_>, InstrError> {
    decode_with_len(code, pos).map(|(i, _)| i)
}

/// Decodes the instruction at `pos` and returns it with its encoded length.
#[inline]
pub fn decode_with_len(code: &[u8], pos: usize) -> Result<(Instruction<'_>, usize), InstrError> {
    let offset = pos as u32;
    let first = code[pos];
    let mut entry = DECODE.one[first as usize];
    if first == 0xFE {
        let Some(&second) = code.get(pos + 1) else {
            return Err(InstrError::OpcodeTruncated { offset });
        };
        entry = DECODE.two[second as usize];
        if entry.opcode.is_none() {
            return Err(InstrError::UnknownOpcode {
                offset,
                code: 0xFE00 | second as u16,
            });
        }
    }
    let Some(opcode) = entry.opcode else {
        return Err(InstrError::UnknownOpcode {
            offset,
            code: first as u16,
        });
    };
    let len = entry.len as usize;
    if code.len() - pos < len {
        let at = pos + opcode.size();
        return Err(InstrError::OperandTruncated {
            offset,
            opcode,
            needed: len - opcode.size(),
            available: code.len() - at,
        });
    }
    let at = pos + opcode.size();
    let operand = match entry.operand {
        OperandKind::None => Operand::None,
        OperandKind::ShortI => Operand::Int8(code[at] as i8),
        OperandKind::ShortBrTarget => Operand::ShortBranch(code[at] as i8),
        OperandKind::ShortLocal | OperandKind::ShortArg => Operand::Var(code[at] as u16),
        OperandKind::Local | OperandKind::Arg => Operand::Var(u16::from_le_bytes(le(code, at))),
        OperandKind::I => Operand::Int32(i32::from_le_bytes(le(code, at))),
        OperandKind::BrTarget => Operand::Branch(i32::from_le_bytes(le(code, at))),
        OperandKind::ShortR => Operand::Float32(u32::from_le_bytes(le(code, at))),
        OperandKind::Tok
        | OperandKind::Type
        | OperandKind::Field
        | OperandKind::Method
        | OperandKind::String
        | OperandKind::Sig => Operand::Token(u32::from_le_bytes(le(code, at))),
        OperandKind::I8 => Operand::Int64(i64::from_le_bytes(le(code, at))),
        OperandKind::R => Operand::Float64(u64::from_le_bytes(le(code, at))),
        OperandKind::Switch => {
            let table = switch_table(code, pos, at)?;
            let instr = Instruction {
                offset,
                opcode,
                operand: Operand::Switch(SwitchTargets::Raw(table)),
            };
            return Ok((instr, len + table.len()));
        }
    };
    let instr = Instruction {
        offset,
        opcode,
        operand,
    };
    Ok((instr, len))
}

/// The raw case table of the `switch` at `pos` whose count starts at `at`. The count is checked
/// against the bytes that remain before anything is sliced.
#[inline]
fn switch_table(code: &[u8], pos: usize, at: usize) -> Result<&[u8], InstrError> {
    let count = u32::from_le_bytes(le(code, at));
    let table = at + 4;
    if count as usize > (code.len() - table) / 4 {
        return Err(InstrError::SwitchTruncated {
            offset: pos as u32,
            count,
        });
    }
    Ok(&code[table..table + 4 * count as usize])
}

/// Iterator over the instructions of a code stream. Stops after the first error.
#[derive(Clone, Debug)]
pub struct Instructions<'a> {
    code: &'a [u8],
    pos: usize,
}

impl<'a> Instructions<'a> {
    /// An iterator from IL offset 0 of `code`.
    pub fn new(code: &'a [u8]) -> Self {
        Instructions { code, pos: 0 }
    }

    /// Offset of the next instruction to decode (the code length once finished).
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Instructions<'a> {
    type Item = Result<Instruction<'a>, InstrError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.code.len() {
            return None;
        }
        match decode_with_len(self.code, self.pos) {
            Ok((instr, len)) => {
                self.pos += len;
                Some(Ok(instr))
            }
            Err(e) => {
                self.pos = self.code.len();
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Instructions<'_> {}

/// Bytes of code a decoder fills [`fill_lengths`] for at a time: a table of the whole code would
/// take a byte per byte of it, so walkers cover long code a window at a time.
pub const LENGTHS_WINDOW: usize = 1 << 16;

/// `out[i]` = the length of the instruction starting at `code[i]` when it has a fixed length
/// and is not a prefix (0 where the full decoder is needed: prefixes, `switch`, undefined
/// bytes, an `FE` at the end), for every byte, whether or not an instruction starts there. A
/// decoder walking `code` with it has one load between one instruction and the next, instead of
/// the byte and then its table entry. The length may run past the code: the walker checks.
/// `out` must be at least as long as `code`.
pub fn fill_lengths(code: &[u8], out: &mut [u8]) {
    let out = &mut out[..code.len()];
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512vbmi") && std::is_x86_feature_detected!("avx512bw") {
        // SAFETY: the features the function is compiled for are present.
        unsafe { fill_lengths_vbmi(code, out) };
        return;
    }
    fill_lengths_scalar(code, out);
}

/// [`fill_lengths`] without vector permutes: eight bytes a step, read as one word, with one
/// test for an `FE` among them (rare: two-byte opcodes) instead of one a byte.
fn fill_lengths_scalar(code: &[u8], out: &mut [u8]) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let words = code.len() / 8;
    for (k, (o, c)) in out
        .chunks_exact_mut(8)
        .zip(code.chunks_exact(8))
        .take(words)
        .enumerate()
    {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        for (j, o) in o.iter_mut().enumerate() {
            *o = FAST_LEN[(w >> (8 * j)) as u8 as usize];
        }
        // A zero byte of `w ^ FE…FE` is an `FE` byte of `w` (the classic zero-byte test:
        // exact for the lowest such byte, and never zero when there is none).
        let x = w ^ (0xFE * ONES);
        if x.wrapping_sub(ONES) & !x & (0x80 * ONES) != 0 {
            for (j, o) in o.iter_mut().enumerate() {
                if c[j] == 0xFE {
                    *o = fe_length(code, 8 * k + j);
                }
            }
        }
    }
    for i in 8 * words..code.len() {
        out[i] = FAST_LEN[code[i] as usize];
        if code[i] == 0xFE {
            out[i] = fe_length(code, i);
        }
    }
}

/// The length of the two-byte instruction at `code[i]` (an `FE`), as [`fill_lengths`] gives it.
#[inline]
fn fe_length(code: &[u8], i: usize) -> u8 {
    code.get(i + 1)
        .map_or(0, |&b| crate::opcode::FAST_LEN_FE[b as usize])
}

/// [`fill_lengths`], 64 bytes per step: two 128-entry byte permutes and a blend on the top bit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
fn fill_lengths_vbmi(code: &[u8], out: &mut [u8]) {
    use std::arch::x86_64::*;
    let t = &FAST_LEN;
    // SAFETY: every load and store is of 64 bytes inside `t`, or masked to the bytes of
    // `code` and `out` (of equal length) from `at`.
    unsafe {
        let t0 = _mm512_loadu_si512(t[0..].as_ptr().cast());
        let t1 = _mm512_loadu_si512(t[64..].as_ptr().cast());
        let t2 = _mm512_loadu_si512(t[128..].as_ptr().cast());
        let t3 = _mm512_loadu_si512(t[192..].as_ptr().cast());
        let mut at = 0;
        while at < code.len() {
            let left = code.len() - at;
            let mask: u64 = if left >= 64 { !0 } else { (1u64 << left) - 1 };
            let idx = _mm512_maskz_loadu_epi8(mask, code.as_ptr().add(at).cast());
            let low = _mm512_permutex2var_epi8(t0, idx, t1);
            let high = _mm512_permutex2var_epi8(t2, idx, t3);
            let lens = _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high);
            _mm512_mask_storeu_epi8(out.as_mut_ptr().add(at).cast(), mask, lens);
            let mut fe = _mm512_cmpeq_epi8_mask(idx, _mm512_set1_epi8(0xFE_u8 as i8)) & mask;
            while fe != 0 {
                let i = at + fe.trailing_zeros() as usize;
                out[i] = fe_length(code, i);
                fe &= fe - 1;
            }
            at += 64;
        }
    }
}

/// Counts the instructions of `code`, or returns the first decoding error. Allocates nothing.
///
/// This is the structural check behind [`crate::body::Body::validate_code`]: every opcode known,
/// every operand and switch table inside the code. It reads only the per-byte length table, so
/// its one hot branch is well predicted.
pub fn count(code: &[u8]) -> Result<usize, InstrError> {
    let mut pos = 0;
    let mut n = 0;
    while pos < code.len() {
        let len = FAST_LEN[code[pos] as usize] as usize;
        if len != 0 {
            pos += len;
        } else {
            // Two-byte opcodes, switch and errors: the full decoder handles them.
            pos += decode_with_len(code, pos)?.1;
        }
        n += 1;
    }
    if pos > code.len() {
        // The last instruction ran past the end: find it and report it exactly.
        return Instructions::new(code)
            .find_map(Result::err)
            .map_or(Ok(n), Err);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `switch` read in place gives the decoder's targets; a table cut short by the end of
    /// the code gives its cases in the code one by one, and none as a whole.
    #[test]
    fn a_switch_table_read_in_place_is_the_decoded_one() {
        // nop; switch (3) [-6, 0, 7]; ret
        let mut code = vec![0x00, 0x45, 3, 0, 0, 0];
        for d in [-6i32, 0, 7] {
            code.extend_from_slice(&d.to_le_bytes());
        }
        code.push(0x2A);
        let decoded: Vec<i64> = decode_at(&code, 1).unwrap().targets().collect();
        let table = SwitchTable::read(&code, 1);
        assert_eq!(table.targets().collect::<Vec<_>>(), decoded);
        assert_eq!(decoded, vec![12, 18, 25]);
        assert_eq!(
            (0..3).map(|k| table.target(k)).collect::<Vec<_>>(),
            [12, 18, 25].map(Some)
        );
        assert_eq!(table.target(3), None, "past the code");
        let cut = &code[..14];
        let short = SwitchTable::new(cut, 1, 3);
        assert_eq!(short.targets().count(), 0);
        assert_eq!(short.target(1), Some(18));
        assert_eq!(short.target(2), None);
        assert_eq!(SwitchTable::read(&code[..3], 1).targets().count(), 0);
    }

    /// The word-at-a-time fill gives the table's answer with `FE` at every position of a word
    /// and of the tail, followed by every second byte (or by nothing, at the end).
    #[test]
    fn the_scalar_fill_finds_every_fe() {
        for len in 0..=41usize {
            for at in 0..len {
                for second in [0x00u8, 0x06, 0x0C, 0x16, 0x1E, 0xFE, 0xFF] {
                    let mut code: Vec<u8> =
                        (0..len as u32).map(|i| (i * 7 + 1) as u8 | 1).collect();
                    code[at] = 0xFE;
                    if at + 1 < len {
                        code[at + 1] = second;
                    }
                    let mut out = vec![0xAA; len];
                    fill_lengths_scalar(&code, &mut out);
                    for (i, &b) in code.iter().enumerate() {
                        let want = if b == 0xFE {
                            fe_length(&code, i)
                        } else {
                            FAST_LEN[b as usize]
                        };
                        assert_eq!(out[i], want, "len {len}, FE at {at}, byte {i}");
                    }
                }
            }
        }
    }

    /// The vector fill gives the table's answer at every byte, for every length around the
    /// 64-byte steps.
    #[test]
    fn fill_lengths_is_the_table() {
        let code: Vec<u8> = (0..300u32).map(|i| (i * 37 + i / 7) as u8).collect();
        for len in [0, 1, 63, 64, 65, 127, 128, 129, 300] {
            let mut out = vec![0xAA; len];
            fill_lengths(&code[..len], &mut out);
            let mut scalar = vec![0x55; len];
            fill_lengths_scalar(&code[..len], &mut scalar);
            assert_eq!(out, scalar, "len {len}");
            for (i, &b) in code[..len].iter().enumerate() {
                let want = if b == 0xFE {
                    fe_length(&code[..len], i)
                } else {
                    FAST_LEN[b as usize]
                };
                assert_eq!(out[i], want, "len {len}, byte {i} ({b:#04x})");
            }
        }
        // Every one- and two-byte opcode: a non-zero length is the decoded length, and only
        // prefixes, `switch` and undefined bytes have none.
        for first in [None, Some(0xFE)] {
            for b in 0..=255u8 {
                let mut code: Vec<u8> = first.into_iter().chain([b]).collect();
                code.extend_from_slice(&[1; 8]);
                let mut out = vec![0; code.len()];
                fill_lengths(&code, &mut out);
                let decoded = decode_with_len(&code, 0).ok();
                match decoded {
                    Some((i, n))
                        if !i.opcode.is_prefix() && !matches!(i.operand, Operand::Switch(_)) =>
                    {
                        assert_eq!(out[0] as usize, n, "{first:?} {b:#04x}")
                    }
                    _ => assert_eq!(out[0], 0, "{first:?} {b:#04x}"),
                }
            }
        }
    }
}
