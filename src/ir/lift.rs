//! Lifting a decoded body into an [`ir::Method`](Method): byte displacements and clause offsets
//! become labels. A body whose targets or clause boundaries are not instruction starts cannot be
//! expressed with labels, so it is refused with the offset at fault (the verifier rejects such
//! bodies anyway).

use super::method::*;
use crate::body::{Body, ClauseKind, SectionContent};
use crate::instr::{self, InstrError};
use crate::opcode::{Opcode, OperandKind};
use crate::verify::StartIndex;
use std::mem::MaybeUninit;

/// Why a body cannot be lifted. Offsets are IL offsets from the start of the code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IrError {
    /// An instruction does not decode.
    #[error("{0}")]
    Decode(#[from] InstrError),
    /// A branch or `switch` target is not an instruction start: no label can stand for it.
    #[error("IL_{offset:04x}: {opcode} targets {target}, which is not the start of an instruction")]
    TargetNotInstruction {
        /// The branch's offset.
        offset: u32,
        /// Its opcode.
        opcode: Opcode,
        /// The offset it targets.
        target: i64,
    },
    /// A clause bound is not an instruction start (or the end of the code).
    #[error("clause {clause}: {field} {offset} is not the start of an instruction")]
    ClauseBoundary {
        /// The clause's index in the EH table.
        clause: usize,
        /// Which bound (`try start`, `handler end`, …).
        field: &'static str,
        /// Its offset.
        offset: u64,
    },
    /// A clause whose flags name no handler kind.
    #[error("clause {clause}: flags {flags:#x} name no handler kind")]
    InvalidClauseKind {
        /// The clause's index in the EH table.
        clause: usize,
        /// Its flags.
        flags: u32,
    },
    /// The code ends after a prefix.
    #[error("IL_{offset:04x}: prefix {opcode} is not followed by an instruction")]
    DanglingPrefix {
        /// The prefix's offset.
        offset: u32,
        /// The prefix.
        opcode: Opcode,
    },
    /// The code is larger than a body can be.
    #[error("code of {0} bytes is too large to lift")]
    TooLarge(usize),
}

/// Marks "no label yet" in the per-instruction table.
const NO_LABEL: u32 = u32::MAX;

/// Marks a provisional target held by a `switch` table slot rather than an instruction.
const SWITCH_SLOT: u32 = 1 << 31;

/// How the lift loop turns an instruction's operand bytes into an [`Operand`].
pub(super) mod arg {
    pub const NONE: u8 = 0;
    pub const I1: u8 = 1;
    pub const VAR1: u8 = 2;
    pub const VAR2: u8 = 3;
    pub const I4: u8 = 4;
    pub const R4: u8 = 5;
    pub const TOKEN: u8 = 6;
    pub const I8: u8 = 7;
    pub const R8: u8 = 8;
    pub const BR1: u8 = 9;
    pub const BR4: u8 = 10;
}

/// One lift-table entry: everything the loop needs to know about an opcode.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) opcode: Opcode,
    /// Opcode and operand bytes; 0 for `switch`, prefixes, `FE` and undefined bytes, which
    /// take the codec's decoder.
    pub(super) len: u8,
    /// Opcode bytes: where the operand starts.
    pub(super) ops: u8,
    pub(super) arg: u8,
}

/// Indexed by the first byte, or by 256 + the byte after `FE`.
pub(super) static TABLE: [Entry; 512] = {
    use crate::opcode::{ALL, Flow};
    let undefined = Entry {
        opcode: Opcode::Nop,
        len: 0,
        ops: 1,
        arg: arg::NONE,
    };
    let mut t = [undefined; 512];
    let mut i = 0;
    while i < ALL.len() {
        let info = &ALL[i];
        let code = info.opcode as u16;
        let two_byte = code >> 8 == 0xFE;
        let ops: u8 = if two_byte { 2 } else { 1 };
        let (a, operand_len) = match (info.flow, info.operand) {
            // A prefix run goes to the decoder with the instruction it belongs to, so that
            // the fast loop carries no run state.
            (Flow::Prefix, _) => (arg::NONE, usize::MAX),
            (_, OperandKind::None) => (arg::NONE, 0),
            (_, OperandKind::ShortI) => (arg::I1, 1),
            (_, OperandKind::ShortLocal | OperandKind::ShortArg) => (arg::VAR1, 1),
            (_, OperandKind::Local | OperandKind::Arg) => (arg::VAR2, 2),
            (_, OperandKind::I) => (arg::I4, 4),
            (_, OperandKind::ShortR) => (arg::R4, 4),
            (_, OperandKind::I8) => (arg::I8, 8),
            (_, OperandKind::R) => (arg::R8, 8),
            (_, OperandKind::ShortBrTarget) => (arg::BR1, 1),
            (_, OperandKind::BrTarget) => (arg::BR4, 4),
            // Variable length: the codec's decoder reads the table.
            (_, OperandKind::Switch) => (arg::NONE, usize::MAX),
            (
                _,
                OperandKind::Tok
                | OperandKind::Type
                | OperandKind::Field
                | OperandKind::Method
                | OperandKind::String
                | OperandKind::Sig,
            ) => (arg::TOKEN, 4),
        };
        let len = if operand_len == usize::MAX {
            0
        } else {
            ops + operand_len as u8
        };
        let entry = Entry {
            opcode: info.opcode,
            len,
            ops,
            arg: a,
        };
        if two_byte {
            t[256 + (code & 0xFF) as usize] = entry;
        } else {
            t[code as usize] = entry;
        }
        i += 1;
    }
    t
};

/// Zero bytes after the copy of the code the fast loop reads: enough for the opcode bytes of
/// any instruction plus an 8-byte operand load, so that no load needs a bounds fallback.
const PAD: usize = 16;

impl Method {
    /// Lifts a decoded body: instructions with their prefixes, targets as labels, clauses as
    /// label ranges, the header's attributes and raw sections kept.
    pub fn from_body(body: &Body<'_>) -> Result<Method, IrError> {
        let mut m = Method::default();
        Lifter::default().lift(body, &mut m)?;
        Ok(m)
    }
}

/// Lifts bodies, keeping its scratch buffers between bodies.
///
/// The per-instruction buffers are at least as long as the largest code lifted so far (an
/// instruction, and each target it holds, takes at least a byte), so the decoding loop writes
/// them by index without growing them, and they are never cleared: only the entries a body
/// writes are read back.
#[derive(Debug, Default)]
pub struct Lifter {
    /// The code being lifted followed by [`PAD`] zero bytes.
    code: Vec<u8>,
    /// Where each IR instruction starts (at its first prefix), a bit per byte of code, and
    /// the instruction index of each start.
    starts: StartIndex,
    /// Absolute byte target of each provisional label, and who holds it: an instruction
    /// index, or a `switch` table slot tagged with [`SWITCH_SLOT`].
    targets: Vec<(i64, u32)>,
    label_at: Vec<u32>,
}

/// The buffers the decoding loop writes, each at least as long as the code.
struct Decoder<'a> {
    /// The method's own instruction list, written in place (its spare capacity): the
    /// instructions, their targets provisional until resolved. Every entry below `n` is
    /// written.
    instrs: &'a mut [MaybeUninit<Instr>],
    /// A bit per byte: an instruction starts there.
    starts: &'a mut [u64],
    /// Grown by the slow path when the fast loop stops at a full one.
    targets: &'a mut Vec<(i64, u32)>,
    prefixes: &'a mut Vec<Prefix>,
    switch_targets: &'a mut Vec<Label>,
    /// Instructions written.
    n: usize,
    /// Targets written.
    t: usize,
}

impl Decoder<'_> {
    /// Decodes the first `len` bytes of `code` (followed by [`PAD`] zero bytes) into
    /// instructions with provisional target labels.
    fn run(&mut self, code: &[u8], len: usize) -> Result<(), IrError> {
        let mut pos = 0usize;
        loop {
            let fast = fast_run(
                Bufs {
                    instrs: self.instrs,
                    starts: self.starts,
                    targets: &mut self.targets[..],
                },
                (&mut self.n, &mut self.t),
                code,
                len,
                pos,
            );
            match fast {
                None => return Ok(()),
                Some(at) => pos = self.slow(&code[..len], at)?,
            }
        }
    }

    /// The instruction at `pos` through the codec's decoder: a prefix run with the
    /// instruction it belongs to, a `switch`, or the exact error. Returns where the next
    /// instruction starts.
    #[cold]
    #[inline(never)]
    fn slow(&mut self, code: &[u8], start: usize) -> Result<usize, IrError> {
        let first_prefix = self.prefixes.len();
        let mut pos = start;
        let (i, size) = loop {
            let (i, size) = instr::decode_with_len(code, pos)?;
            if !i.opcode.is_prefix() {
                break (i, size);
            }
            let value = match i.operand {
                instr::Operand::Int8(v) => v as u8 as u32,
                instr::Operand::Token(t) => t,
                _ => 0,
            };
            self.prefixes.push(Prefix {
                opcode: i.opcode,
                value,
            });
            pos += size;
            if pos >= code.len() {
                return Err(IrError::DanglingPrefix {
                    offset: start as u32,
                    opcode: self.prefixes[first_prefix].opcode,
                });
            }
        };
        let prefixes = Prefixes {
            start: first_prefix as u32,
            len: (self.prefixes.len() - first_prefix) as u32,
        };
        let prefixes = if prefixes.is_empty() {
            Prefixes::NONE
        } else {
            prefixes
        };
        let idx = self.n;
        self.starts[start / 64] |= 1 << (start % 64);
        let next = pos + size;
        // Room for this instruction's targets: the buffer doubles, so it is grown a
        // logarithmic number of times.
        let count = match &i.operand {
            instr::Operand::ShortBranch(_) | instr::Operand::Branch(_) => 1,
            instr::Operand::Switch(t) => t.len(),
            _ => 0,
        };
        if self.targets.len() < self.t + count {
            let size = (2 * self.targets.len()).max(self.t + count).max(64);
            self.targets.resize(size, (0, 0));
        }
        let mut provisional = |target: i64, holder: u32| {
            let t = self.t;
            self.targets[t] = (target, holder);
            self.t = t + 1;
            Label(t as u32)
        };
        let operand = match i.operand {
            instr::Operand::None => Operand::None,
            instr::Operand::Int8(v) => Operand::Int8(v),
            instr::Operand::Int32(v) => Operand::Int32(v),
            instr::Operand::Int64(v) => Operand::Int64(v),
            instr::Operand::Float32(v) => Operand::Float32(v),
            instr::Operand::Float64(v) => Operand::Float64(v),
            instr::Operand::Var(v) => Operand::Var(v),
            instr::Operand::Token(v) => Operand::Token(v),
            instr::Operand::ShortBranch(d) => {
                Operand::Target(provisional(next as i64 + d as i64, idx as u32))
            }
            instr::Operand::Branch(d) => {
                Operand::Target(provisional(next as i64 + d as i64, idx as u32))
            }
            instr::Operand::Switch(ref t) => {
                let first = self.switch_targets.len() as u32;
                for d in t.iter() {
                    let slot = self.switch_targets.len() as u32 | SWITCH_SLOT;
                    let label = provisional(next as i64 + d as i64, slot);
                    self.switch_targets.push(label);
                }
                Operand::Switch(SwitchTable {
                    start: first,
                    len: t.len() as u32,
                })
            }
        };
        self.instrs[idx].write(Instr {
            opcode: i.opcode,
            prefixes,
            operand,
        });
        self.n = idx + 1;
        Ok(next)
    }
}

/// The slices the fast loop writes.
struct Bufs<'a> {
    instrs: &'a mut [MaybeUninit<Instr>],
    starts: &'a mut [u64],
    targets: &'a mut [(i64, u32)],
}

/// Decodes fixed-size instructions from `pos` to the end of the code (`None`), or up to one
/// that needs the codec's decoder (its offset), or up to a branch when `targets` is full (its
/// offset: the slow path grows it). A function of its own, with its state in
/// locals: nothing the loop stores can alias its buffers' bounds or its counters, so they stay
/// in registers instead of being reloaded after every store.
#[inline(never)]
fn fast_run(
    b: Bufs<'_>,
    (n_out, t_out): (&mut usize, &mut usize),
    code: &[u8],
    len: usize,
    mut pos: usize,
) -> Option<usize> {
    let Bufs {
        instrs,
        starts,
        targets,
    } = b;
    let (mut n, mut t) = (*n_out, *t_out);
    let stopped = loop {
        if pos >= len {
            break None;
        }
        let first = code[pos];
        let mut key = first as usize;
        if first == 0xFE && pos + 1 < len {
            key = 256 + code[pos + 1] as usize;
        }
        let e = TABLE[key];
        let size = e.len as usize;
        if size == 0 || len - pos < size || (t == targets.len() && e.arg >= arg::BR1) {
            break Some(pos);
        }
        // One load covers every operand; each arm keeps the bytes it needs.
        let at = pos + e.ops as usize;
        let raw = u64::from_le_bytes(code[at..at + 8].try_into().unwrap_or([0; 8]));
        let next = pos + size;
        let idx = n;
        starts[pos / 64] |= 1 << (pos % 64);
        n = idx + 1;
        // One write per arm: merged, the arms would all write every operand field.
        macro_rules! put {
            ($operand:expr) => {{
                instrs[idx].write(Instr {
                    opcode: e.opcode,
                    prefixes: Prefixes::NONE,
                    operand: $operand,
                });
            }};
        }
        match e.arg {
            arg::NONE => put!(Operand::None),
            arg::I1 => put!(Operand::Int8(raw as u8 as i8)),
            arg::VAR1 => put!(Operand::Var(raw as u8 as u16)),
            arg::VAR2 => put!(Operand::Var(raw as u16)),
            arg::I4 => put!(Operand::Int32(raw as u32 as i32)),
            arg::R4 => put!(Operand::Float32(raw as u32)),
            arg::TOKEN => put!(Operand::Token(raw as u32)),
            arg::I8 => put!(Operand::Int64(raw as i64)),
            arg::R8 => put!(Operand::Float64(raw)),
            _ => {
                let disp = if e.arg == arg::BR1 {
                    raw as u8 as i8 as i64
                } else {
                    raw as u32 as i32 as i64
                };
                targets[t] = (next as i64 + disp, idx as u32);
                t += 1;
                put!(Operand::Target(Label(t as u32 - 1)))
            }
        }
        pos = next;
    };
    (*n_out, *t_out) = (n, t);
    stopped
}

/// Grows `v` to at least `len` entries (it is never shrunk).
fn at_least<T: Copy>(v: &mut Vec<T>, len: usize, fill: T) {
    if v.len() < len {
        v.resize(len, fill);
    }
}

impl Lifter {
    /// Lifts `body` into `m`, replacing its contents (and reusing its allocations). On error
    /// `m` holds a partial lift.
    pub fn lift(&mut self, body: &Body<'_>, m: &mut Method) -> Result<(), IrError> {
        let code = body.code;
        let len = code.len();
        if len >= u32::MAX as usize {
            return Err(IrError::TooLarge(len));
        }
        m.header = HeaderInfo {
            max_stack: body.max_stack(),
            init_locals: body.init_locals(),
            local_sig: body.local_sig(),
        };
        m.instrs.clear();
        m.labels.clear();
        m.prefixes.clear();
        m.switch_targets.clear();
        m.clauses.clear();
        m.raw_sections.clear();
        // An instruction takes at least a byte.
        m.instrs.reserve(len);
        self.starts.reset(len);
        // Grown as branches are met (a branch takes at least two bytes).
        at_least(&mut self.targets, (len / 16).min(1 << 16), (0, 0));
        let mut d = Decoder {
            instrs: &mut m.instrs.spare_capacity_mut()[..len],
            starts: &mut self.starts.bits,
            targets: &mut self.targets,
            prefixes: &mut m.prefixes,
            switch_targets: &mut m.switch_targets,
            n: 0,
            t: 0,
        };
        self.code.clear();
        self.code.extend_from_slice(code);
        self.code.extend_from_slice(&[0; PAD]);
        let decoded = d.run(&self.code, len);
        let (n, t) = (d.n, d.t);
        // SAFETY: the decoder initialized every entry below `n` of the spare capacity (each
        // writer bumps `n` only with, or after, the write), and `n <= len <= capacity`.
        unsafe { m.instrs.set_len(n) };
        decoded?;
        let instrs = &mut m.instrs[..];
        self.starts.count();
        let starts = &self.starts;
        let index_of = |offset: i64| -> Option<usize> {
            if offset == len as i64 {
                return Some(n);
            }
            let o = usize::try_from(offset).ok().filter(|&o| o < len)?;
            let i = starts.get(o as u32)? as usize;
            (i < n).then_some(i)
        };

        if t > 0 {
            // One label per targeted instruction, shared by every branch to it, numbered in
            // the order the targets appear.
            let label_at = &mut self.label_at;
            label_at.clear();
            label_at.resize(n, NO_LABEL);
            for (k, &(target, holder)) in self.targets[..t].iter().enumerate() {
                // Targets at the very end of the code are not instructions either.
                let Some(idx) = index_of(target).filter(|&i| i < n) else {
                    let (offset, opcode) = owner_of(instrs, starts, k);
                    return Err(IrError::TargetNotInstruction {
                        offset,
                        opcode,
                        target,
                    });
                };
                if label_at[idx] == NO_LABEL {
                    label_at[idx] = m.labels.len() as u32;
                    m.labels.push(idx as u32);
                }
                let label = Label(label_at[idx]);
                if holder & SWITCH_SLOT == 0 {
                    instrs[holder as usize].operand = Operand::Target(label);
                } else {
                    m.switch_targets[(holder & !SWITCH_SLOT) as usize] = label;
                }
            }
        }

        for s in &body.sections {
            match &s.content {
                SectionContent::Eh { clauses, .. } => {
                    for c in clauses {
                        let clause = m.clauses.len();
                        let kind = c.kind();
                        if kind == ClauseKind::Invalid {
                            return Err(IrError::InvalidClauseKind {
                                clause,
                                flags: c.flags,
                            });
                        }
                        let mut at = |field: &'static str, offset: u64| -> Result<Label, IrError> {
                            let idx = i64::try_from(offset).ok().and_then(index_of).ok_or(
                                IrError::ClauseBoundary {
                                    clause,
                                    field,
                                    offset,
                                },
                            )?;
                            m.labels.push(idx as u32);
                            Ok(Label(m.labels.len() as u32 - 1))
                        };
                        let try_start = at("try start", c.try_offset as u64)?;
                        let try_end = at("try end", c.try_end())?;
                        let handler_start = at("handler start", c.handler_offset as u64)?;
                        let handler_end = at("handler end", c.handler_end())?;
                        let filter_start = if kind == ClauseKind::Filter {
                            Some(at("filter start", c.class_or_filter as u64)?)
                        } else {
                            None
                        };
                        m.clauses.push(EhClause {
                            kind,
                            try_start,
                            try_end,
                            handler_start,
                            handler_end,
                            filter_start,
                            class_token: if kind == ClauseKind::Filter {
                                0
                            } else {
                                c.class_or_filter
                            },
                            extra_flags: c.flags & !0x7,
                        });
                    }
                }
                SectionContent::Raw(data) => m.raw_sections.push(RawSection {
                    kind: s.kind & crate::body::SECT_KIND_MASK,
                    data: data.to_vec(),
                }),
            }
        }
        self.release_large();
        Ok(())
    }

    /// Lets go of buffers sized for code longer than [`KEEP_LARGEST`] bytes, so that a giant
    /// body's layout and verification do not hold them too (the next body that long allocates
    /// them again).
    fn release_large(&mut self) {
        if self.code.len() > KEEP_LARGEST {
            *self = Lifter::default();
        }
    }
}

/// See [`Lifter::release_large`].
const KEEP_LARGEST: usize = 1 << 20;

/// The offset and opcode of the instruction that owns provisional target `k`.
fn owner_of(instrs: &[Instr], starts: &StartIndex, k: usize) -> (u32, Opcode) {
    let mut seen = 0usize;
    for (idx, ins) in instrs.iter().enumerate() {
        let count = match ins.operand {
            Operand::Target(_) => 1,
            Operand::Switch(t) => t.len as usize,
            // No other operand is a target.
            _ => 0,
        };
        if k < seen + count {
            return (starts.offset_of(idx as u32).unwrap_or(0), ins.opcode);
        }
        seen += count;
    }
    (0, Opcode::Nop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(code: &[u8]) -> Vec<u8> {
        let mut b = vec![(code.len() as u8) << 2 | 0x2];
        b.extend_from_slice(code);
        b
    }

    /// A lifter reused after a body with an instruction at every offset still refuses a
    /// target inside an instruction of the next body.
    #[test]
    fn stale_offsets_of_earlier_bodies_do_not_count() {
        let nops = tiny(&[0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2A]);
        // br.s +1 (to offset 3, inside ldc.i4.s 5); pop; ret
        let bad = tiny(&[0x2B, 0x01, 0x1F, 0x05, 0x26, 0x2A]);
        let mut lifter = Lifter::default();
        let mut m = Method::default();
        lifter.lift(&Body::parse(&nops).unwrap(), &mut m).unwrap();
        assert_eq!(m.instrs.len(), 7);
        let err = lifter.lift(&Body::parse(&bad).unwrap(), &mut m);
        assert_eq!(
            err,
            Err(IrError::TargetNotInstruction {
                offset: 0,
                opcode: Opcode::Br_S,
                target: 3
            })
        );
        lifter.lift(&Body::parse(&nops).unwrap(), &mut m).unwrap();
        assert_eq!(m.instrs.len(), 7);
    }

    /// A body that stops decoding part-way leaves the instructions before the fault (the
    /// list is written in place), and the next body lifts whole.
    #[test]
    fn a_decode_error_leaves_the_instructions_before_it() {
        // ldc.i4.1; ldc.i4.s 5; add; then 0xA6, which is no opcode.
        let bad = tiny(&[0x17, 0x1F, 0x05, 0x58, 0xA6, 0x2A]);
        let mut lifter = Lifter::default();
        let mut m = Method::default();
        assert!(lifter.lift(&Body::parse(&bad).unwrap(), &mut m).is_err());
        let ops: Vec<Opcode> = m.instrs.iter().map(|i| i.opcode).collect();
        assert_eq!(ops, [Opcode::Ldc_I4_1, Opcode::Ldc_I4_S, Opcode::Add]);
        assert_eq!(m.instrs[1].operand, Operand::Int8(5));
        let good = tiny(&[0x00, 0x2A]);
        lifter.lift(&Body::parse(&good).unwrap(), &mut m).unwrap();
        assert_eq!(m.instrs, [Instr::op(Opcode::Nop), Instr::op(Opcode::Ret)]);
    }
}
