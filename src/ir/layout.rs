//! Layout: an [`ir::Method`](Method) back to body bytes.
//!
//! Branch relaxation is a fixpoint: every branch starts in the form the options ask for, each
//! pass computes offsets and widens the short branches whose displacement no longer fits an
//! `int8`, until a pass widens nothing. Widening only grows code, so a branch that fits in one
//! pass may stop fitting in the next (a cascade), but never the other way round: the process is
//! monotone and ends within one pass per branch. It is bounded anyway, with an error rather than
//! a hang. The passes run in time linear in the branches however long the cascade: a pass after
//! the first only revisits the short branches around those the pass before widened (see
//! `relax`). Displacements are range-checked as they are written, never wrapped.
//!
//! The EH table is rebuilt in clause order, the header and sections are written by
//! [`BodyParts::encode_canonical`] (tiny when eligible, small EH section when every clause
//! fits).

use super::method::*;
use crate::body::{BodyParts, Clause, EncodeError, RawSection as BodyRawSection};
use crate::opcode::{Opcode, OperandKind};
use crate::verify::{Code, Diagnostic, Resolver, Verdict, Verifier};

/// The first of `diags` of the class invalid: what makes a laid-out body refused.
fn first_invalid(diags: &[Diagnostic]) -> Option<&Diagnostic> {
    diags.iter().find(|d| d.code.verdict() == Verdict::Invalid)
}

mod relax;
mod splice;
pub use splice::SpliceDecline;

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
    /// Which branch forms the laid-out code uses.
    pub branch_forms: BranchForms,
    /// How MaxStack is chosen.
    pub max_stack: MaxStackPolicy,
    /// Verify the result and refuse it when the verifier finds anything of the class invalid
    /// (an unverifiable finding, which the runtimes run, is the original's: a `localloc`
    /// over a non-empty stack stays one after a rewrite).
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
#[non_exhaustive]
pub enum LayoutError {
    /// A branch targets a label that was never bound.
    #[error("instruction {index}: label {label} is not bound to an instruction")]
    UnboundLabel {
        /// The branch's index.
        index: usize,
        /// The label.
        label: u32,
    },
    /// A clause bound is a label that was never bound.
    #[error("clause {clause}: label {label} is not bound")]
    UnboundClauseLabel {
        /// The clause's index.
        clause: usize,
        /// The label.
        label: u32,
    },
    /// An operand that the opcode does not take.
    #[error("instruction {index}: operand does not fit {opcode}")]
    OperandMismatch {
        /// The instruction's index.
        index: usize,
        /// Its opcode.
        opcode: Opcode,
    },
    /// A prefix run that is out of range or holds something else than prefixes.
    #[error("instruction {index}: {opcode} is not a prefix, or its prefix run is out of range")]
    BadPrefix {
        /// The instruction's index.
        index: usize,
        /// The offending opcode.
        opcode: Opcode,
    },
    /// A `switch` whose table is out of range.
    #[error("instruction {index}: switch table out of range")]
    BadSwitchTable {
        /// The instruction's index.
        index: usize,
    },
    /// A clause region that is empty or ends before it starts.
    #[error("clause {clause}: {region} region is empty or reversed ({start}..{end})")]
    EmptyRegion {
        /// The clause's index.
        clause: usize,
        /// Which region (`try`, `handler`, `filter`).
        region: &'static str,
        /// Where it starts (instruction index).
        start: u32,
        /// Where it ends (instruction index).
        end: u32,
    },
    /// Relaxation widened something in more passes than there are branches; never expected.
    #[error("branch relaxation did not settle after {0} passes")]
    RelaxationDidNotConverge(usize),
    /// A branch whose displacement does not fit the form it must keep.
    #[error("IL_{offset:04x}: {opcode} displacement {displacement} does not fit its form")]
    DisplacementOutOfRange {
        /// The branch's offset.
        offset: u32,
        /// Its opcode.
        opcode: Opcode,
        /// The displacement it needs.
        displacement: i64,
    },
    /// An internal inconsistency between sizing and writing; never expected.
    #[error("laid-out code is {written} bytes, {computed} were computed")]
    SizeMismatch {
        /// The size computed.
        computed: usize,
        /// The size written.
        written: usize,
    },
    /// The code is larger than a body can be.
    #[error("code of {0} bytes is too large")]
    CodeTooLarge(u64),
    /// An instruction could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The verifier rejects the laid-out body: its finding (the rule, the offset, the clauses
    /// or arrivals it concerns).
    #[error("rewritten body is invalid: {0}")]
    Invalid(Box<Diagnostic>),
    /// MaxStack could not be computed for the policy asked for.
    #[error("the needed MaxStack is unknown: {0}")]
    MaxStackUnknown(MaxStackUnknown),
}

/// Why the MaxStack a body needs is unknown.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MaxStackUnknown {
    /// The dataflow stopped at a finding (other than an unresolved token).
    #[error("IL_{offset:04x}: {code}: {message}")]
    Stopped {
        /// The rule.
        code: Code,
        /// Where.
        offset: u32,
        /// The verifier's message.
        message: String,
    },
    /// The stack grows deeper than MaxStack can say.
    #[error("stack depth {depth} exceeds 65535")]
    TooDeep {
        /// The depth reached.
        depth: u32,
    },
    /// A callee's signature is unknown, so only a lower bound is known, and the declared
    /// MaxStack is below it.
    #[error(
        "a callee's signature is unknown; the stack needs at least {needed}, {declared} is declared"
    )]
    CalleeUnknown {
        /// The depth needed at least.
        needed: u16,
        /// The MaxStack declared.
        declared: u16,
    },
}

impl LayoutError {
    fn invalid(d: &Diagnostic) -> LayoutError {
        LayoutError::Invalid(Box::new(d.clone()))
    }
}

/// What a layout did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayoutInfo {
    /// Bytes of code laid out.
    pub code_size: u32,
    /// Relaxation passes (1 when nothing had to be widened).
    pub passes: u32,
    /// Branches widened by relaxation (not counting those that started long).
    pub widened: u32,
    /// The MaxStack written in the header.
    pub max_stack: u16,
}

/// Encoded size of one prefix.
fn prefix_size(p: &Prefix) -> u32 {
    2 + p.opcode.operand_kind().fixed_size().unwrap_or(0) as u32
}

/// The [`Operand`] variant each opcode takes, as [`operand_tag`] numbers it.
mod tag {
    pub const NONE: u8 = 0;
    pub const INT8: u8 = 1;
    pub const INT32: u8 = 2;
    pub const INT64: u8 = 3;
    pub const FLOAT32: u8 = 4;
    pub const FLOAT64: u8 = 5;
    pub const VAR: u8 = 6;
    pub const TOKEN: u8 = 7;
    pub const TARGET: u8 = 8;
    pub const SWITCH: u8 = 9;
}

#[inline(always)]
fn operand_tag(o: &Operand) -> u8 {
    match o {
        Operand::None => tag::NONE,
        Operand::Int8(_) => tag::INT8,
        Operand::Int32(_) => tag::INT32,
        Operand::Int64(_) => tag::INT64,
        Operand::Float32(_) => tag::FLOAT32,
        Operand::Float64(_) => tag::FLOAT64,
        Operand::Var(_) => tag::VAR,
        Operand::Token(_) => tag::TOKEN,
        Operand::Target(_) => tag::TARGET,
        Operand::Switch(_) => tag::SWITCH,
    }
}

/// What layout needs of one opcode, in one lookup.
#[derive(Clone, Copy)]
struct Enc {
    /// Opcode and operand bytes (`switch` without its targets).
    len: u8,
    /// Opcode bytes: where the operand starts.
    ops: u8,
    /// The operand variant that fits ([`tag`]).
    tag: u8,
    /// A one-byte local or argument index: a `Var` above 255 does not fit.
    short_var: bool,
    /// The opcode bytes, little-endian.
    bytes: u16,
}

/// Instructions `place` makes room for at a time (ten bytes each, but for a `switch` or an
/// instruction with prefixes, which make room for themselves).
const ROOM_AHEAD: usize = 4096;

/// By [`enc_key`].
static ENC: [Enc; 512] = {
    let mut t = [Enc {
        len: 0,
        ops: 1,
        tag: tag::NONE,
        short_var: false,
        bytes: 0,
    }; 512];
    let mut i = 0;
    while i < crate::opcode::ALL.len() {
        let info = &crate::opcode::ALL[i];
        let code = info.opcode as u16;
        let two_byte = code >> 8 == 0xFE;
        let ops = if two_byte { 2 } else { 1 };
        let operand_len = match info.operand.fixed_size() {
            Some(n) => n as u8,
            None => 4,
        };
        let (tag, short_var) = match info.operand {
            OperandKind::None => (tag::NONE, false),
            OperandKind::ShortI => (tag::INT8, false),
            OperandKind::I => (tag::INT32, false),
            OperandKind::I8 => (tag::INT64, false),
            OperandKind::ShortR => (tag::FLOAT32, false),
            OperandKind::R => (tag::FLOAT64, false),
            OperandKind::ShortLocal | OperandKind::ShortArg => (tag::VAR, true),
            OperandKind::Local | OperandKind::Arg => (tag::VAR, false),
            OperandKind::ShortBrTarget | OperandKind::BrTarget => (tag::TARGET, false),
            OperandKind::Switch => (tag::SWITCH, false),
            OperandKind::Tok
            | OperandKind::Type
            | OperandKind::Field
            | OperandKind::Method
            | OperandKind::String
            | OperandKind::Sig => (tag::TOKEN, false),
        };
        t[enc_key(info.opcode)] = Enc {
            len: ops + operand_len,
            ops,
            tag,
            short_var,
            // `FE xx` is stored as the bytes FE, xx.
            bytes: if two_byte {
                0xFE | (code & 0xFF) << 8
            } else {
                code
            },
        };
        i += 1;
    }
    t
};

/// The index of an opcode in [`ENC`]: its low byte, plus 256 for two-byte opcodes (the only
/// ones with the top bit set).
#[inline(always)]
const fn enc_key(opcode: Opcode) -> usize {
    let c = opcode as u16;
    (c & 0xFF) as usize | ((c >> 15) as usize) << 8
}

/// [`Instr::operand_fits`] from the table.
#[inline(always)]
fn operand_fits(ins: &Instr, e: &Enc) -> bool {
    operand_tag(&ins.operand) == e.tag
        && !(e.short_var && matches!(ins.operand, Operand::Var(v) if v > 0xFF))
}

/// The operand bytes of a non-branch, non-`switch` operand, little-endian (`None` for those).
#[inline(always)]
fn operand_value(operand: &Operand) -> Option<u64> {
    Some(match *operand {
        Operand::None => 0,
        Operand::Int8(v) => v as u8 as u64,
        Operand::Int32(v) => v as u32 as u64,
        Operand::Float32(v) | Operand::Token(v) => v as u64,
        Operand::Var(v) => v as u64,
        Operand::Int64(v) => v as u64,
        Operand::Float64(v) => v,
        Operand::Target(_) | Operand::Switch(_) => return None,
    })
}

/// Appends the encoding of an instruction without prefixes, branch or `switch` (a snippet's);
/// `None` for any other, or an operand that does not fit.
fn encode_plain(ins: &Instr, out: &mut Vec<u8>) -> Option<()> {
    let e = &ENC[enc_key(ins.opcode)];
    if !ins.prefixes.is_empty() || !operand_fits(ins, e) {
        return None;
    }
    let value = operand_value(&ins.operand)?;
    let bytes = (e.bytes as u64).to_le_bytes();
    out.extend_from_slice(&bytes[..e.ops as usize]);
    let operand_len = (e.len - e.ops) as usize;
    out.extend_from_slice(&value.to_le_bytes()[..operand_len]);
    Some(())
}

/// Where [`encode_plain`] puts the operand of an instruction with `ins`'s opcode: its offset
/// past the opcode bytes, its width, and whether a `Var` above 255 does not fit it.
fn plain_operand_slot(ins: &Instr) -> (u8, u8, bool) {
    let e = &ENC[enc_key(ins.opcode)];
    (e.ops, e.len - e.ops, e.short_var)
}

/// A prefix with its operand, little-endian.
fn prefix_word(p: &Prefix) -> u64 {
    0xFE | (p.opcode.code() as u64 & 0xFF) << 8 | (p.value as u64) << 16
}

/// Writes `word` at `code[at..at + 8]` (the buffer keeps 8 bytes of slack past the code).
#[inline(always)]
fn put8(code: &mut [u8], at: usize, word: u64) {
    if let Some(dst) = code.get_mut(at..at + 8) {
        dst.copy_from_slice(&word.to_le_bytes());
    }
}

fn finish(overflow: bool, computed: usize, written: usize) -> Result<(), LayoutError> {
    if overflow || computed != written {
        return Err(LayoutError::SizeMismatch { computed, written });
    }
    Ok(())
}

/// Encoded size of `instr` (with its prefixes) if its opcode were `opcode`.
#[inline]
pub fn instr_size(m: &Method, instr: &Instr, opcode: Opcode) -> usize {
    // Opcode and operand bytes, from the table (`switch` without its targets).
    let mut size = ENC[enc_key(opcode)].len as usize;
    if let Operand::Switch(t) = instr.operand {
        size += 4 * t.len as usize;
    }
    if !instr.prefixes.is_empty() {
        size += m.prefixes_of(instr).iter().map(prefix_size).sum::<u32>() as usize;
    }
    size
}

// Here rather than beside `Method`: sizes are the layout's knowledge, and `method` stays below
// it.
impl Method {
    /// Number of IL bytes the instructions take with every branch in its current form.
    pub fn code_size_hint(&self) -> usize {
        self.instrs
            .iter()
            .map(|i| instr_size(self, i, i.opcode))
            .sum()
    }
}

/// A reusable layout engine: keeps its buffers between methods.
#[derive(Debug, Default)]
pub struct Layout {
    /// Start offset of each instruction; `offsets[n]` is the code size.
    offsets: Vec<u32>,
    /// Instruction indices of branches and their target positions.
    branches: Vec<(u32, u32)>,
    /// Whether each branch (parallel to `branches`) is in the long form.
    long: Vec<bool>,
    /// Relaxation's passes.
    relax: relax::Relax,
    /// Instructions widened by every pass of the current layout.
    widened: Vec<u32>,
    /// The code of the last layout in `code[..code_len]`; the rest is scratch that is never
    /// shrunk, so that the next body does not pay for zeroing it again.
    code: Vec<u8>,
    code_len: usize,
    clauses: Vec<Clause>,
    verifier: Verifier,
    splice: splice::Scratch,
}

impl Layout {
    /// A layout engine with empty buffers (they grow to the largest body it lays out).
    pub fn new() -> Self {
        Self::default()
    }

    /// The code of the last successful layout.
    pub fn code(&self) -> &[u8] {
        &self.code[..self.code_len]
    }

    /// The EH clauses of the last successful layout.
    pub fn clauses(&self) -> &[Clause] {
        &self.clauses
    }

    /// Lays `m` out, computes MaxStack and verifies as `opts` say (signatures from
    /// `resolver`), and appends the body (header, code, sections) to `out`. On error nothing is
    /// appended.
    pub fn run<R: Resolver + ?Sized>(
        &mut self,
        m: &Method,
        opts: &LayoutOptions,
        resolver: &R,
        out: &mut Vec<u8>,
    ) -> Result<LayoutInfo, LayoutError> {
        let mut info = self.place(m, opts.branch_forms)?;
        if info.widened != 0 {
            self.spread(m)?;
        }
        self.patch(m)?;
        self.build_clauses(m)?;
        info.max_stack = self.check(m.header.max_stack, opts, resolver)?;
        let raw_sections: Vec<BodyRawSection<'_>> = m
            .raw_sections
            .iter()
            .map(|s| BodyRawSection {
                kind: s.kind,
                data: &s.data,
            })
            .collect();
        self.write_body(info.max_stack, &m.header, raw_sections, out)?;
        Ok(info)
    }

    /// Appends the body of the laid-out code and clauses, with `header`'s InitLocals and locals
    /// token and MaxStack `max_stack`, in the canonical encoding.
    fn write_body(
        &mut self,
        max_stack: u16,
        header: &HeaderInfo,
        raw_sections: Vec<BodyRawSection<'_>>,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let parts = BodyParts {
            max_stack,
            init_locals: header.init_locals,
            local_sig: header.local_sig,
            code: &self.code[..self.code_len],
            clauses: std::mem::take(&mut self.clauses),
            raw_sections,
        };
        let result = write_canonical(&parts, out);
        self.clauses = parts.clauses;
        result
    }

    /// Runs the verifier's dataflow once: its findings (when verifying) and the depth it needs
    /// give the MaxStack to declare.
    fn check<R: Resolver + ?Sized>(
        &mut self,
        declared: u16,
        opts: &LayoutOptions,
        resolver: &R,
    ) -> Result<u16, LayoutError> {
        if opts.max_stack == MaxStackPolicy::Declared {
            if opts.verify {
                let diags = self.verifier.verify_code_in(
                    &self.code,
                    self.code_len,
                    (&self.clauses).into(),
                    Some(declared),
                    resolver,
                    &crate::verify::Options::ALL,
                );
                if let Some(d) = first_invalid(diags) {
                    return Err(LayoutError::invalid(d));
                }
            }
            return Ok(declared);
        }
        if opts.verify {
            let diags = self.verifier.verify_code_in(
                &self.code,
                self.code_len,
                (&self.clauses).into(),
                None,
                resolver,
                &crate::verify::Options::ALL,
            );
            if let Some(d) = first_invalid(diags) {
                return Err(LayoutError::invalid(d));
            }
        } else if let Err(d) = {
            let first = &crate::verify::Options::FIRST;
            self.verifier.verify_code_in(
                &self.code,
                self.code_len,
                (&self.clauses).into(),
                None,
                resolver,
                first,
            );
            self.verifier.needed_max_stack()
        } && d.code != Code::UnresolvedToken
        {
            return Err(LayoutError::MaxStackUnknown(MaxStackUnknown::Stopped {
                code: d.code,
                offset: d.offset,
                message: d.message.clone(),
            }));
        }
        let needed = u16::try_from(self.verifier.computed_max_stack()).map_err(|_| {
            LayoutError::MaxStackUnknown(MaxStackUnknown::TooDeep {
                depth: self.verifier.computed_max_stack(),
            })
        })?;
        let complete = self.verifier.is_complete();
        match opts.max_stack {
            MaxStackPolicy::KeepDeclaredIfEnough if declared >= needed => Ok(declared),
            _ if complete => Ok(needed),
            _ => Err(LayoutError::MaxStackUnknown(
                MaxStackUnknown::CalleeUnknown { needed, declared },
            )),
        }
    }

    /// Chooses branch forms and offsets (the relaxation fixpoint), and writes the code as it
    /// goes: displacements are left for [`Layout::patch`], after [`Layout::spread`] has made
    /// room for the branches that had to be widened.
    fn place(&mut self, m: &Method, forms: BranchForms) -> Result<LayoutInfo, LayoutError> {
        let n = m.instrs.len();
        self.code_len = 0;
        self.offsets.clear();
        self.branches.clear();
        self.long.clear();
        self.widened.clear();
        self.offsets.reserve(n + 1);
        // Ten bytes hold any instruction but a `switch` or one with prefixes, which make room
        // for themselves and what follows; the rest is slack for 8-byte writes. Room is made
        // for [`ROOM_AHEAD`] instructions at a time, so the buffer grows with the code, not ten
        // times the instructions. Bytes from an earlier method need no clearing: the code
        // covers all of them.
        self.make_room(0);
        let mut at: u64 = 0;
        for (index, ins) in m.instrs.iter().enumerate() {
            if index % ROOM_AHEAD == 0 {
                self.make_room(at);
            }
            let e = &ENC[enc_key(ins.opcode)];
            if !operand_fits(ins, e) {
                return Err(LayoutError::OperandMismatch {
                    index,
                    opcode: ins.opcode,
                });
            }
            self.offsets.push(at as u32);
            if !ins.prefixes.is_empty() {
                at += self.put_prefixes(m, ins, index, at)?;
            }
            let value = match ins.operand {
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
                    let opcode = match forms {
                        BranchForms::KeepOriginal => ins.opcode,
                        BranchForms::AllLong => ins.opcode.long_form(),
                        BranchForms::ShortestWhereFits => ins.opcode.short_form(),
                    };
                    // Short and long branch opcodes are both one byte; the displacement
                    // comes later.
                    let long = opcode.operand_kind() == OperandKind::BrTarget;
                    put8(&mut self.code, at as usize, opcode.code() as u64);
                    at += if long { 5 } else { 2 };
                    self.branches.push((index as u32, target));
                    self.long.push(long);
                    continue;
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
                    let size = 5 + 4 * t.len as u64;
                    self.make_room(at + size);
                    put8(
                        &mut self.code,
                        at as usize,
                        Opcode::Switch.code() as u64 | (t.len as u64) << 8,
                    );
                    at += size;
                    continue;
                }
                // Checked above to fit the opcode (a one-byte index included).
                other => operand_value(&other).unwrap_or(0),
            };
            if e.len - e.ops == 8 {
                // `ldc.i8`, `ldc.r8`: opcode and operand do not fit one write.
                put8(&mut self.code, at as usize, e.bytes as u64);
                put8(&mut self.code, at as usize + e.ops as usize, value);
                at += e.len as u64;
                continue;
            }
            put8(
                &mut self.code,
                at as usize,
                e.bytes as u64 | value << (8 * e.ops),
            );
            at += e.len as u64;
        }
        self.offsets.push(at as u32);

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
            if at > i32::MAX as u64 {
                return Err(LayoutError::CodeTooLarge(at));
            }
            let (offsets, branches, long) = (&self.offsets, &self.branches, &self.long);
            let grown = if info.passes == 1 {
                self.relax.first_pass(branches.len(), |k| {
                    let (index, target) = branches[k];
                    let disp = offsets[target as usize] as i64 - offsets[index as usize + 1] as i64;
                    (!long[k]).then_some(disp)
                })
            } else {
                let jump = |k: usize| {
                    let (index, target) = branches[k];
                    relax::Jump {
                        at: index,
                        from: index + 1,
                        to: target,
                    }
                };
                // Keyed by where each branch ends: prefixes come before the opcode.
                self.relax
                    .next_pass(jump, |k| offsets[branches[k].0 as usize + 1] as i64)
            };
            if grown.is_empty() {
                break;
            }
            // Short and long branch opcodes are both one byte: the operand grows by 3.
            info.widened += grown.len() as u32;
            at += 3 * grown.len() as u64;
            for &k in grown {
                self.long[k as usize] = true;
                self.widened.push(branches[k as usize].0);
            }
        }
        self.move_widened();
        info.code_size = at as u32;
        Ok(info)
    }

    /// Moves every offset past the branches relaxation widened by the three bytes each adds.
    fn move_widened(&mut self) {
        self.widened.sort_unstable();
        let Some(&first) = self.widened.first() else {
            return;
        };
        let mut delta = 0u32;
        let mut next = self.widened.iter().copied().peekable();
        for (j, o) in self.offsets.iter_mut().enumerate().skip(first as usize) {
            *o = o.wrapping_add(delta);
            if next.next_if_eq(&(j as u32)).is_some() {
                delta += 3;
            }
        }
    }

    /// Checks the prefix run of instruction `index`, writes it at `at` and returns its size.
    #[cold]
    fn put_prefixes(
        &mut self,
        m: &Method,
        ins: &Instr,
        index: usize,
        at: u64,
    ) -> Result<u64, LayoutError> {
        let ps = match m.prefixes.get(ins.prefixes.range()) {
            Some(ps) if ps.iter().all(|p| p.opcode.is_prefix()) => ps,
            _ => {
                return Err(LayoutError::BadPrefix {
                    index,
                    opcode: ins.opcode,
                });
            }
        };
        let size: u64 = ps.iter().map(|p| prefix_size(p) as u64).sum();
        self.make_room(at + size);
        let mut p_at = at as usize;
        for p in ps {
            put8(&mut self.code, p_at, prefix_word(p));
            p_at += prefix_size(p) as usize;
        }
        Ok(size)
    }

    /// Grows the code buffer to hold `end` bytes and, after them, ten bytes for each
    /// instruction of `m` and the 8-byte write slack.
    /// Makes `code` hold bytes up to `end` and [`ROOM_AHEAD`] instructions of ten bytes after
    /// it, with slack for 8-byte writes; it grows by half at least, so a body's layout grows
    /// it a logarithmic number of times.
    fn make_room(&mut self, end: u64) {
        if end > i32::MAX as u64 {
            // Past what any body can hold; `place` reports the size once every instruction
            // has been checked, so stop writing and only count.
            return;
        }
        let need = end as usize + 10 * ROOM_AHEAD + 16;
        if self.code.len() < need {
            self.code
                .resize(need.max(self.code.len() + self.code.len() / 2), 0);
        }
    }

    /// Fills in the displacements `place` left open, at the offsets relaxation settled on
    /// (after [`Layout::spread`] when a branch was widened).
    fn patch(&mut self, m: &Method) -> Result<(), LayoutError> {
        let total = *self.offsets.last().unwrap_or(&0) as usize;
        let mut overflow = false;
        for (k, &(index, target)) in self.branches.iter().enumerate() {
            let i = index as usize;
            let next = self.offsets[i + 1] as usize;
            let disp = self.offsets[target as usize] as i64 - next as i64;
            let ins = &m.instrs[i];
            let bytes = if self.long[k] {
                let opcode = ins.opcode.long_form();
                let d = i32::try_from(disp)
                    .map_err(|_| out_of_range(&self.offsets, i, opcode, disp))?;
                d.to_le_bytes()
            } else {
                let opcode = ins.opcode.short_form();
                let d =
                    i8::try_from(disp).map_err(|_| out_of_range(&self.offsets, i, opcode, disp))?;
                [d as u8, 0, 0, 0]
            };
            let len = if self.long[k] { 4 } else { 1 };
            match self.code.get_mut(next - len..next) {
                Some(dst) => dst.copy_from_slice(&bytes[..len]),
                None => overflow = true,
            }
        }
        if m.switch_targets.is_empty() {
            finish(overflow, total, total)?;
            self.code_len = total;
            return Ok(());
        }
        // Switches, in instruction order (after every branch: neither can fail in practice,
        // displacements of a valid size always fit).
        for (i, ins) in m.instrs.iter().enumerate() {
            let Operand::Switch(t) = ins.operand else {
                continue;
            };
            let next = self.offsets[i + 1] as usize;
            let mut at = next - 4 * t.len as usize;
            for l in m.switch_of(t) {
                let target = m.position(*l).unwrap_or(0);
                let disp = self.offsets[target] as i64 - next as i64;
                let d = i32::try_from(disp)
                    .map_err(|_| out_of_range(&self.offsets, i, Opcode::Switch, disp))?;
                match self.code.get_mut(at..at + 4) {
                    Some(dst) => dst.copy_from_slice(&d.to_le_bytes()),
                    None => overflow = true,
                }
                at += 4;
            }
        }
        finish(overflow, total, total)?;
        self.code_len = total;
        Ok(())
    }

    /// Moves the code `place` wrote to the offsets relaxation settled on and writes the long
    /// opcode of every widened branch; [`Layout::patch`] then writes every displacement. A
    /// widened branch grew from opcode and one byte to opcode and four, so the bytes after the
    /// i-th widened branch (in code order) move by 3·i: runs are moved from the last one back,
    /// each to a place past its own source, so nothing is overwritten before it is moved.
    fn spread(&mut self, m: &Method) -> Result<(), LayoutError> {
        let total = *self.offsets.last().unwrap_or(&0) as usize;
        if self.code.len() < total + 8 {
            self.code.resize(total + 8, 0);
        }
        self.widened.sort_unstable();
        // Never expected: `place` wrote every widened branch in its short form.
        let mismatch = |written| LayoutError::SizeMismatch {
            computed: total,
            written,
        };
        // The end of the run after the branch being moved, as `place` wrote it.
        let mut end = total
            .checked_sub(3 * self.widened.len())
            .ok_or(mismatch(0))?;
        for (i, &w) in self.widened.iter().enumerate().rev() {
            let w = w as usize;
            let shift = 3 * (i + 1);
            let (Some(&next), Some(ins)) = (self.offsets.get(w + 1), m.instrs.get(w)) else {
                return Err(mismatch(end));
            };
            // Where the branch ended before it was widened, and where its opcode now goes.
            let Some(start) = (next as usize)
                .checked_sub(shift)
                .filter(|&s| s >= 2 && s <= end)
            else {
                return Err(mismatch(end));
            };
            self.code.copy_within(start..end, start + shift);
            self.code[next as usize - 5] = ins.opcode.long_form().code() as u8;
            end = start - 2;
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
pub fn layout<R: Resolver + ?Sized>(
    m: &Method,
    opts: &LayoutOptions,
    resolver: &R,
    out: &mut Vec<u8>,
) -> Result<LayoutInfo, LayoutError> {
    Layout::new().run(m, opts, resolver, out)
}
