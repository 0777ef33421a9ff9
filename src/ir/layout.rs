//! Layout: an [`ir::Method`](Method) back to body bytes.
//!
//! Branch relaxation is a fixpoint: every branch starts in the form the options ask for, each
//! pass computes offsets and widens the short branches whose displacement no longer fits an
//! `int8`, until a pass widens nothing. Widening only grows code, so a branch that fits in one
//! pass may stop fitting in the next (a cascade), but never the other way round: the process is
//! monotone and ends within one pass per branch. It is bounded anyway, with an error rather than
//! a hang. Displacements are range-checked as they are written, never wrapped.
//!
//! The EH table is rebuilt in clause order, the header and sections are written by
//! [`BodyParts::encode_canonical`] (tiny when eligible, small EH section when every clause
//! fits).

use super::method::*;
use crate::body::{BodyParts, Clause, EncodeError, RawSection as BodyRawSection};
use crate::opcode::{DECODE, Opcode, OperandKind};
use crate::verify::{Code, Diagnostic, Resolver, Verifier};

/// Which form each branch (including `leave`) gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BranchForms {
    /// Each branch keeps the form its opcode names while it fits; a short branch that no
    /// longer fits is widened. Long branches stay long. The smallest diff from the original.
    #[default]
    KeepOriginal,
    /// Every branch long.
    AllLong,
    /// Every branch short where its displacement fits, long elsewhere.
    ShortestWhereFits,
}

/// What MaxStack the header declares. The needed depth comes from the verifier's dataflow
/// over the laid-out code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MaxStackPolicy {
    /// The needed depth.
    Recompute,
    /// The declared value ([`HeaderInfo::max_stack`]) while it is still large enough, else the
    /// needed depth. Keeps headers byte-identical when nothing grew the stack. When a callee's
    /// signature is unknown the dataflow only gives a lower bound; the declared value is kept
    /// if it meets it.
    #[default]
    KeepDeclaredIfEnough,
    /// The declared value, unchecked (nothing is computed).
    Declared,
}

/// How to lay a method out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayoutOptions {
    pub branch_forms: BranchForms,
    pub max_stack: MaxStackPolicy,
    /// Verify the result and refuse it when the verifier finds anything.
    pub verify: bool,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        LayoutOptions {
            branch_forms: BranchForms::default(),
            max_stack: MaxStackPolicy::default(),
            verify: true,
        }
    }
}

/// Why a method could not be laid out. Instruction positions are IR indices; offsets are IL
/// offsets of the laid-out code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("instruction {index}: label {label} is not bound to an instruction")]
    UnboundLabel { index: usize, label: u32 },
    #[error("clause {clause}: label {label} is not bound")]
    UnboundClauseLabel { clause: usize, label: u32 },
    #[error("instruction {index}: operand does not fit {opcode}")]
    OperandMismatch { index: usize, opcode: Opcode },
    #[error("instruction {index}: {opcode} is not a prefix, or its prefix run is out of range")]
    BadPrefix { index: usize, opcode: Opcode },
    #[error("instruction {index}: switch table out of range")]
    BadSwitchTable { index: usize },
    #[error("clause {clause}: {region} region is empty or reversed ({start}..{end})")]
    EmptyRegion {
        clause: usize,
        region: &'static str,
        start: u32,
        end: u32,
    },
    #[error("branch relaxation did not settle after {0} passes")]
    RelaxationDidNotConverge(usize),
    #[error("IL_{offset:04x}: {opcode} displacement {displacement} does not fit its form")]
    DisplacementOutOfRange {
        offset: u32,
        opcode: Opcode,
        displacement: i64,
    },
    /// An internal inconsistency between sizing and writing; never expected.
    #[error("laid-out code is {written} bytes, {computed} were computed")]
    SizeMismatch { computed: usize, written: usize },
    #[error("code of {0} bytes is too large")]
    CodeTooLarge(u64),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The verifier rejects the laid-out body: `code` names the rule.
    #[error("rewritten body is invalid: IL_{offset:04x}: {code}: {message}")]
    Invalid {
        code: Code,
        offset: u32,
        message: String,
    },
    #[error("the needed MaxStack is unknown: {0}")]
    MaxStackUnknown(String),
}

impl LayoutError {
    fn invalid(d: &Diagnostic) -> LayoutError {
        LayoutError::Invalid {
            code: d.code,
            offset: d.offset,
            message: d.message.clone(),
        }
    }
}

/// What a layout did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutInfo {
    pub code_size: u32,
    /// Relaxation passes (1 when nothing had to be widened).
    pub passes: u32,
    /// Branches widened by relaxation (not counting those that started long).
    pub widened: u32,
    pub max_stack: u16,
}

/// Writes into a buffer sized in advance; running past its end is recorded, not a panic.
struct Cursor<'a> {
    buf: &'a mut [u8],
    at: usize,
    overflow: bool,
}

impl Cursor<'_> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.at..self.at + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.at += bytes.len();
            }
            None => self.overflow = true,
        }
    }
}

/// Encoded size of one prefix.
fn prefix_size(p: &Prefix) -> u32 {
    2 + match p.opcode.operand_kind() {
        OperandKind::ShortI => 1,
        OperandKind::None => 0,
        _ => 4,
    }
}

/// The decoder's table entry of an opcode: its operand kind and encoded length.
#[inline(always)]
fn entry(opcode: Opcode) -> &'static crate::opcode::DecodeEntry {
    let c = opcode.code();
    let table = if c >> 8 == 0xFE {
        &DECODE.two
    } else {
        &DECODE.one
    };
    &table[(c & 0xFF) as usize]
}

/// [`Instr::operand_fits`] from the decode table (one lookup on the hot path).
#[inline]
fn operand_fits(ins: &Instr) -> bool {
    match (ins.operand, entry(ins.opcode).operand) {
        (Operand::None, OperandKind::None) | (Operand::Token(_), OperandKind::Method) => true,
        _ => ins.operand_fits(),
    }
}

/// Encoded size of `instr` (with its prefixes) if its opcode were `opcode`.
#[inline]
pub fn instr_size(m: &Method, instr: &Instr, opcode: Opcode) -> usize {
    // Opcode and operand bytes, from the decoder's table (`switch` without its targets).
    let mut size = entry(opcode).len as usize;
    if let Operand::Switch(t) = instr.operand {
        size += 4 * t.len as usize;
    }
    if !instr.prefixes.is_empty() {
        size += m.prefixes_of(instr).iter().map(prefix_size).sum::<u32>() as usize;
    }
    size
}

/// A reusable layout engine: keeps its buffers between methods.
#[derive(Debug, Default)]
pub struct Layout {
    /// Size of each instruction in its current form.
    sizes: Vec<u32>,
    /// Start offset of each instruction; `offsets[n]` is the code size.
    offsets: Vec<u32>,
    /// Instruction indices of branches and their target positions.
    branches: Vec<(u32, u32)>,
    /// Whether each branch (parallel to `branches`) is in the long form.
    long: Vec<bool>,
    code: Vec<u8>,
    clauses: Vec<Clause>,
    verifier: Verifier,
}

impl Layout {
    pub fn new() -> Self {
        Self::default()
    }

    /// The code of the last successful layout.
    pub fn code(&self) -> &[u8] {
        &self.code
    }

    /// The EH clauses of the last successful layout.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }

    /// Lays `m` out, computes MaxStack and verifies as `opts` say (signatures from
    /// `resolver`), and appends the body (header, code, sections) to `out`. On error nothing is
    /// appended.
    pub fn run(
        &mut self,
        m: &Method,
        opts: &LayoutOptions,
        resolver: &dyn Resolver,
        out: &mut Vec<u8>,
    ) -> Result<LayoutInfo, LayoutError> {
        let mut info = self.place(m, opts.branch_forms)?;
        self.emit(m)?;
        self.build_clauses(m)?;
        info.max_stack = self.check(m, opts, resolver)?;
        let raw_sections: Vec<BodyRawSection<'_>> = m
            .raw_sections
            .iter()
            .map(|s| BodyRawSection {
                kind: s.kind,
                data: &s.data,
            })
            .collect();
        let parts = BodyParts {
            max_stack: info.max_stack,
            init_locals: m.header.init_locals,
            local_sig: m.header.local_sig,
            code: &self.code,
            clauses: std::mem::take(&mut self.clauses),
            raw_sections,
        };
        let result = write_canonical(&parts, out);
        self.clauses = parts.clauses;
        result?;
        Ok(info)
    }

    /// Runs the verifier's dataflow once: its findings (when verifying) and the depth it needs
    /// give the MaxStack to declare.
    fn check(
        &mut self,
        m: &Method,
        opts: &LayoutOptions,
        resolver: &dyn Resolver,
    ) -> Result<u16, LayoutError> {
        let declared = m.header.max_stack;
        if opts.max_stack == MaxStackPolicy::Declared {
            if opts.verify {
                let diags =
                    self.verifier
                        .verify_code(&self.code, &self.clauses, Some(declared), resolver);
                if let Some(d) = diags.first() {
                    return Err(LayoutError::invalid(d));
                }
            }
            return Ok(declared);
        }
        if opts.verify {
            let diags = self
                .verifier
                .verify_code(&self.code, &self.clauses, None, resolver);
            if let Some(d) = diags.first() {
                return Err(LayoutError::invalid(d));
            }
        } else if let Err(d) = self.verifier.max_stack(&self.code, &self.clauses, resolver)
            && d.code != Code::UnresolvedToken
        {
            return Err(LayoutError::MaxStackUnknown(d.to_string()));
        }
        let needed = u16::try_from(self.verifier.computed_max_stack()).map_err(|_| {
            LayoutError::MaxStackUnknown(format!(
                "stack depth {} exceeds 65535",
                self.verifier.computed_max_stack()
            ))
        })?;
        let complete = self.verifier.is_complete();
        match opts.max_stack {
            MaxStackPolicy::KeepDeclaredIfEnough if declared >= needed => Ok(declared),
            _ if complete => Ok(needed),
            _ => Err(LayoutError::MaxStackUnknown(format!(
                "a callee's signature is unknown; the stack needs at least {needed}, {declared} is declared"
            ))),
        }
    }

    /// Chooses branch forms and offsets (the relaxation fixpoint).
    fn place(&mut self, m: &Method, forms: BranchForms) -> Result<LayoutInfo, LayoutError> {
        let n = m.instrs.len();
        self.sizes.clear();
        self.branches.clear();
        self.long.clear();
        self.sizes.reserve(n);
        for (index, ins) in m.instrs.iter().enumerate() {
            if !operand_fits(ins) {
                return Err(LayoutError::OperandMismatch {
                    index,
                    opcode: ins.opcode,
                });
            }
            if !ins.prefixes.is_empty() {
                let ok = m
                    .prefixes
                    .get(ins.prefixes.range())
                    .is_some_and(|ps| ps.iter().all(|p| p.opcode.is_prefix()));
                if !ok {
                    return Err(LayoutError::BadPrefix {
                        index,
                        opcode: ins.opcode,
                    });
                }
            }
            let mut opcode = ins.opcode;
            match ins.operand {
                Operand::Target(label) => {
                    let target = match m.position(label) {
                        Some(p) if p < n => p as u32,
                        _ => {
                            return Err(LayoutError::UnboundLabel {
                                index,
                                label: label.0,
                            });
                        }
                    };
                    opcode = match forms {
                        BranchForms::KeepOriginal => opcode,
                        BranchForms::AllLong => opcode.long_form(),
                        BranchForms::ShortestWhereFits => opcode.short_form(),
                    };
                    self.branches.push((index as u32, target));
                    self.long
                        .push(opcode.operand_kind() == OperandKind::BrTarget);
                }
                Operand::Switch(t) => {
                    let Some(targets) = m.switch_targets.get(t.range()) else {
                        return Err(LayoutError::BadSwitchTable { index });
                    };
                    if let Some(l) = targets
                        .iter()
                        .find(|l| !matches!(m.position(**l), Some(p) if p < n))
                    {
                        return Err(LayoutError::UnboundLabel { index, label: l.0 });
                    }
                }
                _ => {}
            }
            self.sizes.push(instr_size(m, ins, opcode) as u32);
        }

        let mut info = LayoutInfo {
            passes: 0,
            ..LayoutInfo::default()
        };
        // Each pass that does not settle widens at least one branch.
        let bound = self.branches.len() + 2;
        loop {
            info.passes += 1;
            if info.passes as usize > bound {
                return Err(LayoutError::RelaxationDidNotConverge(bound));
            }
            self.compute_offsets()?;
            let mut widened = false;
            for (k, &(index, target)) in self.branches.iter().enumerate() {
                if self.long[k] {
                    continue;
                }
                let i = index as usize;
                let next = self.offsets[i] as i64 + self.sizes[i] as i64;
                let disp = self.offsets[target as usize] as i64 - next;
                if i8::try_from(disp).is_err() {
                    self.long[k] = true;
                    // Short and long branch opcodes are both one byte: the operand grows by 3.
                    self.sizes[i] += 3;
                    info.widened += 1;
                    widened = true;
                }
            }
            if !widened {
                break;
            }
        }
        info.code_size = self.offsets[n];
        Ok(info)
    }

    fn compute_offsets(&mut self) -> Result<(), LayoutError> {
        self.offsets.clear();
        self.offsets.reserve(self.sizes.len() + 1);
        let mut at: u64 = 0;
        for &s in &self.sizes {
            self.offsets.push(at as u32);
            at += s as u64;
        }
        if at > i32::MAX as u64 {
            return Err(LayoutError::CodeTooLarge(at));
        }
        self.offsets.push(at as u32);
        Ok(())
    }

    /// Writes the code with the chosen forms into a buffer of the size `place` computed.
    fn emit(&mut self, m: &Method) -> Result<(), LayoutError> {
        let total = *self.offsets.last().unwrap_or(&0) as usize;
        self.code.clear();
        self.code.resize(total, 0);
        let mut w = Cursor {
            buf: &mut self.code,
            at: 0,
            overflow: false,
        };
        let mut branch = 0usize;
        for (i, ins) in m.instrs.iter().enumerate() {
            if !ins.prefixes.is_empty() {
                for p in m.prefixes_of(ins) {
                    w.put(&[0xFE, p.opcode.code() as u8]);
                    match p.opcode.operand_kind() {
                        OperandKind::ShortI => w.put(&[p.value as u8]),
                        OperandKind::None => {}
                        _ => w.put(&p.value.to_le_bytes()),
                    }
                }
            }
            let next = self.offsets[i + 1] as i64;
            match ins.operand {
                Operand::Target(_) => {
                    let (_, target) = self.branches[branch];
                    let long = self.long[branch];
                    branch += 1;
                    let disp = self.offsets[target as usize] as i64 - next;
                    if long {
                        let opcode = ins.opcode.long_form();
                        let d = i32::try_from(disp)
                            .map_err(|_| out_of_range(&self.offsets, i, opcode, disp))?;
                        w.put(&[opcode.code() as u8]);
                        w.put(&d.to_le_bytes());
                    } else {
                        let opcode = ins.opcode.short_form();
                        let d = i8::try_from(disp)
                            .map_err(|_| out_of_range(&self.offsets, i, opcode, disp))?;
                        w.put(&[opcode.code() as u8, d as u8]);
                    }
                }
                Operand::Switch(t) => {
                    w.put(&[Opcode::Switch.code() as u8]);
                    w.put(&t.len.to_le_bytes());
                    for l in m.switch_of(t) {
                        let target = m.position(*l).unwrap_or(0);
                        let disp = self.offsets[target] as i64 - next;
                        let d = i32::try_from(disp)
                            .map_err(|_| out_of_range(&self.offsets, i, Opcode::Switch, disp))?;
                        w.put(&d.to_le_bytes());
                    }
                }
                operand => {
                    let c = ins.opcode.code();
                    if c >> 8 == 0xFE {
                        w.put(&[0xFE, c as u8]);
                    } else {
                        w.put(&[c as u8]);
                    }
                    // `place` checked that the operand fits the opcode.
                    match operand {
                        Operand::None | Operand::Target(_) | Operand::Switch(_) => {}
                        Operand::Int8(v) => w.put(&[v as u8]),
                        Operand::Int32(v) => w.put(&v.to_le_bytes()),
                        Operand::Int64(v) => w.put(&v.to_le_bytes()),
                        Operand::Float32(v) | Operand::Token(v) => w.put(&v.to_le_bytes()),
                        Operand::Float64(v) => w.put(&v.to_le_bytes()),
                        Operand::Var(v) => match ins.opcode.operand_kind() {
                            OperandKind::ShortLocal | OperandKind::ShortArg => w.put(&[v as u8]),
                            _ => w.put(&v.to_le_bytes()),
                        },
                    }
                }
            }
        }
        if w.overflow || w.at != total {
            return Err(LayoutError::SizeMismatch {
                computed: total,
                written: w.at,
            });
        }
        Ok(())
    }

    fn build_clauses(&mut self, m: &Method) -> Result<(), LayoutError> {
        self.clauses.clear();
        let n = m.instrs.len();
        for (clause, c) in m.clauses.iter().enumerate() {
            let at = |l: Label| -> Result<u32, LayoutError> {
                match m.position(l) {
                    Some(p) if p <= n => Ok(self.offsets[p]),
                    _ => Err(LayoutError::UnboundClauseLabel { clause, label: l.0 }),
                }
            };
            let (ts, te) = (at(c.try_start)?, at(c.try_end)?);
            let (hs, he) = (at(c.handler_start)?, at(c.handler_end)?);
            for (region, start, end) in [("try", ts, te), ("handler", hs, he)] {
                if end <= start {
                    return Err(LayoutError::EmptyRegion {
                        clause,
                        region,
                        start,
                        end,
                    });
                }
            }
            let class_or_filter = match c.filter_start {
                Some(f) => at(f)?,
                None => c.class_token,
            };
            self.clauses.push(Clause {
                flags: c.flags(),
                try_offset: ts,
                try_length: te - ts,
                handler_offset: hs,
                handler_length: he - hs,
                class_or_filter,
            });
        }
        Ok(())
    }
}

/// The canonical encoding of `parts` (as [`BodyParts::encode_canonical`]), with the laid-out
/// code copied as written: every instruction in it was just encoded.
fn write_canonical(parts: &BodyParts<'_>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    parts.encode_canonical_encoded(out)
}

fn out_of_range(offsets: &[u32], i: usize, opcode: Opcode, displacement: i64) -> LayoutError {
    LayoutError::DisplacementOutOfRange {
        offset: offsets[i],
        opcode,
        displacement,
    }
}

/// Lays `m` out with a fresh [`Layout`] and appends the body to `out`.
pub fn layout(
    m: &Method,
    opts: &LayoutOptions,
    resolver: &dyn Resolver,
    out: &mut Vec<u8>,
) -> Result<LayoutInfo, LayoutError> {
    Layout::new().run(m, opts, resolver, out)
}
