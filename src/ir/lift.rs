//! Lifting a decoded body into an [`ir::Method`](Method): byte displacements and clause offsets
//! become labels. A body whose targets or clause boundaries are not instruction starts cannot be
//! expressed with labels, so it is refused with the offset at fault (the verifier rejects such
//! bodies anyway).

use super::method::*;
use crate::body::{Body, ClauseKind, SectionContent};
use crate::instr::{self, InstrError};
use crate::opcode::{Opcode, OperandKind};

/// Why a body cannot be lifted. Offsets are IL offsets from the start of the code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IrError {
    #[error("{0}")]
    Decode(#[from] InstrError),
    #[error("IL_{offset:04x}: {opcode} targets {target}, which is not the start of an instruction")]
    TargetNotInstruction {
        offset: u32,
        opcode: Opcode,
        target: i64,
    },
    #[error("clause {clause}: {field} {offset} is not the start of an instruction")]
    ClauseBoundary {
        clause: usize,
        field: &'static str,
        offset: u64,
    },
    #[error("clause {clause}: flags {flags:#x} name no handler kind")]
    InvalidClauseKind { clause: usize, flags: u32 },
    #[error("IL_{offset:04x}: prefix {opcode} is not followed by an instruction")]
    DanglingPrefix { offset: u32, opcode: Opcode },
    #[error("code of {0} bytes is too large to lift")]
    TooLarge(usize),
}

/// Marks "no label yet" in the per-instruction table.
const NO_LABEL: u32 = u32::MAX;

/// Marks "no prefix run pending".
const NO_RUN: usize = usize::MAX;

/// Marks a provisional target held by a `switch` table slot rather than an instruction.
const SWITCH_SLOT: u32 = 1 << 31;

/// How the lift loop turns an instruction's operand bytes into an [`Operand`].
mod arg {
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
    /// A prefix; its value is the operand bytes that follow (none, one, or a token).
    pub const PREFIX: u8 = 11;
}

/// One lift-table entry: everything the loop needs to know about an opcode.
#[derive(Clone, Copy)]
struct Entry {
    opcode: Opcode,
    /// Opcode and operand bytes; 0 for `switch`, `FE` and undefined bytes, which take the
    /// codec's decoder.
    len: u8,
    /// Opcode bytes: where the operand starts.
    ops: u8,
    arg: u8,
}

/// Indexed by the first byte, or by 256 + the byte after `FE`.
static TABLE: [Entry; 512] = {
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
            (Flow::Prefix, OperandKind::None) => (arg::PREFIX, 0),
            (Flow::Prefix, OperandKind::ShortI) => (arg::PREFIX, 1),
            (Flow::Prefix, _) => (arg::PREFIX, 4),
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
            _ => (arg::TOKEN, 4),
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

/// The eight bytes at `code[at..]` as a little-endian `u64`, zero-padded past the end.
#[inline(always)]
fn load8(code: &[u8], at: usize) -> u64 {
    match code.get(at..at + 8) {
        Some(s) => u64::from_le_bytes(s.try_into().unwrap_or([0; 8])),
        None => load_short(code, at),
    }
}

#[cold]
#[inline(never)]
fn load_short(code: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    let rest = code.get(at..).unwrap_or(&[]);
    let n = rest.len().min(8);
    a[..n].copy_from_slice(&rest[..n]);
    u64::from_le_bytes(a)
}

impl Method {
    /// Lifts a decoded body: instructions with their prefixes, targets as labels, clauses as
    /// label ranges, the header's attributes and raw sections kept.
    pub fn from_body(body: &Body<'_>) -> Result<Method, IrError> {
        let mut m = Method::default();
        Lifter::default().lift(body, &mut m)?;
        Ok(m)
    }
}

/// Lifts bodies, keeping its scratch buffers (and the target method's) between bodies.
#[derive(Debug, Default)]
pub struct Lifter {
    /// Byte offset where each IR instruction starts (its first prefix).
    starts: Vec<u32>,
    /// Byte offset → IR instruction starting there. Never cleared: an entry counts only when
    /// `starts` confirms it, so stale entries from earlier bodies are harmless.
    index_at: Vec<u32>,
    /// Absolute byte targets, indexed by the provisional labels the operands hold until they
    /// are resolved.
    raw_targets: Vec<i64>,
    /// Who holds each provisional target: an instruction index, or a `switch` table slot
    /// tagged with [`SWITCH_SLOT`].
    holders: Vec<u32>,
    label_at: Vec<u32>,
}

/// The vectors the decoding loop fills.
struct Decoder {
    instrs: Vec<Instr>,
    prefixes: Vec<Prefix>,
    switch_targets: Vec<Label>,
    starts: Vec<u32>,
    raw_targets: Vec<i64>,
    holders: Vec<u32>,
}

impl Decoder {
    /// Decodes `code` into instructions with provisional target labels; `index_at` (as long
    /// as the code) receives the index of each instruction at its start.
    #[inline(always)]
    fn run(&mut self, code: &[u8], index_at: &mut [u32]) -> Result<(), IrError> {
        let len = code.len();
        self.instrs.reserve(len / 2 + 1);
        self.starts.reserve(len / 2 + 1);
        // Where the prefix run waiting for its instruction starts ([`NO_RUN`] when none), and
        // its first prefix.
        let mut run_at = NO_RUN;
        let mut run_first = 0u32;
        let mut pos = 0usize;
        while pos < len {
            let here = pos;
            let first = code[pos];
            let mut key = first as usize;
            if first == 0xFE && pos + 1 < len {
                key = 256 + code[pos + 1] as usize;
            }
            let e = TABLE[key];
            let size = e.len as usize;
            if size == 0 || len - pos < size {
                pos += self.slow(code, pos, &mut run_at, &mut run_first, index_at)?;
                continue;
            }
            // One load covers every operand; each arm keeps the bytes it needs.
            let raw = load8(code, pos + e.ops as usize);
            pos += size;
            if e.arg == arg::PREFIX {
                let value = match size - e.ops as usize {
                    0 => 0,
                    1 => raw as u8 as u32,
                    _ => raw as u32,
                };
                self.prefix(here, &mut run_at, &mut run_first, e.opcode, value);
                continue;
            }
            let idx = self.instrs.len() as u32;
            let prefixes = self.begin(here, &mut run_at, run_first, idx, index_at);
            // One push per arm: merged, the arms would all write every operand field.
            let instrs = &mut self.instrs;
            macro_rules! put {
                ($operand:expr) => {
                    instrs.push(Instr {
                        opcode: e.opcode,
                        prefixes,
                        operand: $operand,
                    })
                };
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
                    let operand = self.provisional(pos as i64 + disp, idx);
                    self.instrs.push(Instr {
                        opcode: e.opcode,
                        prefixes,
                        operand,
                    });
                }
            }
        }
        if run_at != NO_RUN {
            return Err(IrError::DanglingPrefix {
                offset: run_at as u32,
                opcode: self.prefixes[run_first as usize].opcode,
            });
        }
        Ok(())
    }

    #[inline(always)]
    fn prefix(
        &mut self,
        at: usize,
        run_at: &mut usize,
        run_first: &mut u32,
        opcode: Opcode,
        value: u32,
    ) {
        if *run_at == NO_RUN {
            *run_at = at;
            *run_first = self.prefixes.len() as u32;
        }
        self.prefixes.push(Prefix { opcode, value });
    }

    /// Records where instruction `idx`, found at `at`, starts (at its prefixes, if any) and
    /// returns its prefix run.
    #[inline(always)]
    fn begin(
        &mut self,
        at: usize,
        run_at: &mut usize,
        run_first: u32,
        idx: u32,
        index_at: &mut [u32],
    ) -> Prefixes {
        let (start, prefixes) = if *run_at == NO_RUN {
            (at, Prefixes::NONE)
        } else {
            let p = Prefixes {
                start: run_first,
                len: self.prefixes.len() as u32 - run_first,
            };
            (std::mem::replace(run_at, NO_RUN), p)
        };
        index_at[start] = idx;
        self.starts.push(start as u32);
        prefixes
    }

    #[inline(always)]
    fn provisional(&mut self, target: i64, holder: u32) -> Operand {
        self.raw_targets.push(target);
        self.holders.push(holder);
        Operand::Target(Label(self.raw_targets.len() as u32 - 1))
    }

    /// The instruction at `pos` through the codec's decoder: a `switch`, or the exact error.
    /// Returns its encoded length.
    #[cold]
    #[inline(never)]
    fn slow(
        &mut self,
        code: &[u8],
        pos: usize,
        run_at: &mut usize,
        run_first: &mut u32,
        index_at: &mut [u32],
    ) -> Result<usize, IrError> {
        let (i, size) = instr::decode_with_len(code, pos)?;
        if i.opcode.is_prefix() {
            let value = match i.operand {
                instr::Operand::Int8(v) => v as u8 as u32,
                instr::Operand::Token(t) => t,
                _ => 0,
            };
            self.prefix(pos, run_at, run_first, i.opcode, value);
            return Ok(size);
        }
        let idx = self.instrs.len() as u32;
        let prefixes = self.begin(pos, run_at, *run_first, idx, index_at);
        let next = (pos + size) as i64;
        let operand = match i.operand {
            instr::Operand::None => Operand::None,
            instr::Operand::Int8(v) => Operand::Int8(v),
            instr::Operand::Int32(v) => Operand::Int32(v),
            instr::Operand::Int64(v) => Operand::Int64(v),
            instr::Operand::Float32(v) => Operand::Float32(v),
            instr::Operand::Float64(v) => Operand::Float64(v),
            instr::Operand::Var(v) => Operand::Var(v),
            instr::Operand::Token(v) => Operand::Token(v),
            instr::Operand::ShortBranch(d) => self.provisional(next + d as i64, idx),
            instr::Operand::Branch(d) => self.provisional(next + d as i64, idx),
            instr::Operand::Switch(ref t) => {
                let first = self.switch_targets.len() as u32;
                for d in t.iter() {
                    let slot = self.switch_targets.len() as u32 | SWITCH_SLOT;
                    self.raw_targets.push(next + d as i64);
                    self.holders.push(slot);
                    self.switch_targets
                        .push(Label(self.raw_targets.len() as u32 - 1));
                }
                Operand::Switch(SwitchTable {
                    start: first,
                    len: t.len() as u32,
                })
            }
        };
        self.instrs.push(Instr {
            opcode: i.opcode,
            prefixes,
            operand,
        });
        Ok(size)
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
        self.starts.clear();
        self.raw_targets.clear();
        self.holders.clear();
        if self.index_at.len() < len {
            self.index_at.resize(len, 0);
        }
        // The loop works on vectors of its own, so that a store into one does not make the
        // compiler reload the others' lengths and pointers.
        let mut d = Decoder {
            instrs: std::mem::take(&mut m.instrs),
            prefixes: std::mem::take(&mut m.prefixes),
            switch_targets: std::mem::take(&mut m.switch_targets),
            starts: std::mem::take(&mut self.starts),
            raw_targets: std::mem::take(&mut self.raw_targets),
            holders: std::mem::take(&mut self.holders),
        };
        let decoded = d.run(code, &mut self.index_at[..len]);
        m.instrs = d.instrs;
        m.prefixes = d.prefixes;
        m.switch_targets = d.switch_targets;
        self.starts = d.starts;
        self.raw_targets = d.raw_targets;
        self.holders = d.holders;
        decoded?;
        let n = m.instrs.len();
        let starts = &self.starts;
        let index_at = &self.index_at;
        let index_of = |offset: i64| -> Option<usize> {
            if offset == len as i64 {
                return Some(n);
            }
            let o = usize::try_from(offset).ok().filter(|&o| o < len)?;
            let i = index_at[o] as usize;
            (i < n && starts[i] as usize == o).then_some(i)
        };

        if !self.raw_targets.is_empty() {
            // One label per targeted instruction, shared by every branch to it, numbered in
            // the order the targets appear.
            let label_at = &mut self.label_at;
            label_at.clear();
            label_at.resize(n, NO_LABEL);
            for (k, (&target, &holder)) in self.raw_targets.iter().zip(&self.holders).enumerate() {
                // Targets at the very end of the code are not instructions either.
                let Some(idx) = index_of(target).filter(|&i| i < n) else {
                    let (offset, opcode) = owner_of(m, starts, k);
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
                    m.instrs[holder as usize].operand = Operand::Target(label);
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
        Ok(())
    }
}

/// The offset and opcode of the instruction that owns provisional target `k`.
fn owner_of(m: &Method, starts: &[u32], k: usize) -> (u32, Opcode) {
    let mut seen = 0usize;
    for (idx, ins) in m.instrs.iter().enumerate() {
        let count = match ins.operand {
            Operand::Target(_) => 1,
            Operand::Switch(t) => t.len as usize,
            _ => 0,
        };
        if k < seen + count {
            return (starts[idx], ins.opcode);
        }
        seen += count;
    }
    (0, Opcode::Nop)
}
