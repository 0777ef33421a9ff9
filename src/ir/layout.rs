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
use crate::opcode::{Opcode, OperandKind};
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

/// Encoded size of one prefix.
fn prefix_size(p: &Prefix) -> u32 {
    2 + match p.opcode.operand_kind() {
        OperandKind::ShortI => 1,
        OperandKind::None => 0,
        _ => 4,
    }
}

/// Encoded size of `instr` (with its prefixes) if its opcode were `opcode`.
pub fn instr_size(m: &Method, instr: &Instr, opcode: Opcode) -> usize {
    let prefixes: u32 = m.prefixes_of(instr).iter().map(prefix_size).sum();
    let operand = match (instr.operand, opcode.operand_kind().fixed_size()) {
        (_, Some(n)) => n,
        (Operand::Switch(t), None) => 4 + 4 * t.len as usize,
        (_, None) => 4,
    };
    prefixes as usize + opcode.size() + operand
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
        let result = parts.encode_canonical(out);
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
        } else if let Err(d) = self.verifier.max_stack(&self.code, &self.clauses, resolver) {
            if d.code != Code::UnresolvedToken {
                return Err(LayoutError::MaxStackUnknown(d.to_string()));
            }
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
            if !ins.operand_fits() {
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

    /// Writes the code with the chosen forms.
    fn emit(&mut self, m: &Method) -> Result<(), LayoutError> {
        let code = &mut self.code;
        code.clear();
        code.reserve(*self.offsets.last().unwrap_or(&0) as usize);
        let mut branch = 0usize;
        for (i, ins) in m.instrs.iter().enumerate() {
            for p in m.prefixes_of(ins) {
                let code16 = p.opcode.code();
                code.extend_from_slice(&[0xFE, code16 as u8]);
                match p.opcode.operand_kind() {
                    OperandKind::ShortI => code.push(p.value as u8),
                    OperandKind::None => {}
                    _ => code.extend_from_slice(&p.value.to_le_bytes()),
                }
            }
            let next = self.offsets[i + 1] as i64;
            match ins.operand {
                Operand::Target(_) => {
                    let (_, target) = self.branches[branch];
                    let long = self.long[branch];
                    branch += 1;
                    let disp = self.offsets[target as usize] as i64 - next;
                    let opcode = if long {
                        ins.opcode.long_form()
                    } else {
                        ins.opcode.short_form()
                    };
                    code.push(opcode.code() as u8);
                    if long {
                        let d = i32::try_from(disp)
                            .map_err(|_| out_of_range(&self.offsets, i, opcode, disp))?;
                        code.extend_from_slice(&d.to_le_bytes());
                    } else {
                        let d = i8::try_from(disp)
                            .map_err(|_| out_of_range(&self.offsets, i, opcode, disp))?;
                        code.push(d as u8);
                    }
                }
                Operand::Switch(t) => {
                    code.push(Opcode::Switch.code() as u8);
                    code.extend_from_slice(&t.len.to_le_bytes());
                    for l in m.switch_of(t) {
                        let target = m.position(*l).unwrap_or(0);
                        let disp = self.offsets[target] as i64 - next;
                        let d = i32::try_from(disp)
                            .map_err(|_| out_of_range(&self.offsets, i, Opcode::Switch, disp))?;
                        code.extend_from_slice(&d.to_le_bytes());
                    }
                }
                operand => {
                    let raw = match operand {
                        Operand::None => crate::instr::Operand::None,
                        Operand::Int8(v) => crate::instr::Operand::Int8(v),
                        Operand::Int32(v) => crate::instr::Operand::Int32(v),
                        Operand::Int64(v) => crate::instr::Operand::Int64(v),
                        Operand::Float32(v) => crate::instr::Operand::Float32(v),
                        Operand::Float64(v) => crate::instr::Operand::Float64(v),
                        Operand::Var(v) => crate::instr::Operand::Var(v),
                        Operand::Token(v) => crate::instr::Operand::Token(v),
                        Operand::Target(_) | Operand::Switch(_) => unreachable_operand(),
                    };
                    crate::instr::encode(ins.opcode, &raw, code).map_err(|_| {
                        LayoutError::OperandMismatch {
                            index: i,
                            opcode: ins.opcode,
                        }
                    })?;
                }
            }
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

/// Target and switch operands are written by their own arms.
#[inline]
fn unreachable_operand() -> crate::instr::Operand<'static> {
    crate::instr::Operand::None
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
