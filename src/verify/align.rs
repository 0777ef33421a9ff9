//! Baseline alignment: a patched method body checked against its original.
//!
//! The structural verifier accepts a branch that lands on the wrong instruction as long as that
//! instruction is a valid target reached with the same stack depth: the mark of a short
//! displacement that wrapped, or of a label a rewriter bound to the wrong place. With the
//! original body at hand (`verify --baseline`), [`Aligner`] maps the original's instructions
//! onto the patched body's and checks every branch target and clause boundary copied from the
//! original against the copy of the instruction it pointed at.
//!
//! # Alignment
//!
//! Instructions are compared by opcode family and operand ([`Key`]): a short branch and its
//! long form are one family, and so are a macro form and its general form (`ldarg.0`,
//! `ldarg.s 0` and `ldarg 0`; `ldc.i4.1`, `ldc.i4.s 1` and `ldc.i4 1`), as the opcode table's
//! names say. Tokens and constants must be equal; branch displacements are not compared (they
//! are what is checked), a `switch`'s case count is.
//!
//! The two instruction streams are aligned in the manner of patience diff, a stretch at a time
//! (at first, the whole bodies):
//!
//! 1. its common prefix and suffix are matched;
//! 2. a stretch of at most 64 cells (instructions × instructions) is aligned exactly;
//! 3. when one side is a subsequence of the other (code only inserted, or only removed), it is
//!    matched at its leftmost embedding;
//! 4. else it is cut at the instructions that occur exactly once on each side (those with a
//!    token operand first, then any), keeping those on every longest chain of them in order,
//!    and the pieces between are queued;
//! 5. a stretch without such instructions, or whose unique instructions disagree on their
//!    order as much as they agree (code moved), is aligned exactly in the band of diagonals its
//!    edit distance allows (Myers' greedy algorithm finds the distance) when the band is at most
//!    64 cells an instruction; else it is left unaligned ([`Unchecked::Unanchored`],
//!    [`Unchecked::Reordered`]) and the method counts as aligned in part.
//!
//! The anchoring passes stop at a work bound linear in the bodies' sizes, and an exact stretch
//! takes at most 64 cells an instruction (and at most 2^20), so the whole alignment takes time
//! and memory linear in the bodies. An original without a branch, `leave`,
//! `switch` or clause has nothing to check and is not aligned at all.
//!
//! # Certain copies
//!
//! Only copies no plausible alignment disputes are used. In an exactly aligned stretch, a pair
//! is kept when every longest common subsequence matches the original instruction, always to
//! the same patched one. Over the whole body, a pair is kept when the matched original
//! instructions embed into the patched body (and the matched patched ones into the original)
//! only one way at that place: the leftmost and rightmost embeddings agree. So a `nop`
//! prologue in front of a body that starts with `nop` leaves that first `nop` without a certain
//! copy. When fewer than half of the original's instructions (its `ret`s left out) have a
//! certain copy, the method is not aligned at all ([`Unchecked::TooDifferent`]).

//! # Findings
//!
//! Certain copies cut the patched body into stretches. An original position `t` (an
//! instruction, or the end of the code) and a patched position `x` *correspond* when no certain
//! copy lies between them: every certain copy before `x` is of an instruction before `t`, and
//! every certain copy at or after `x` is of `t` or an instruction after it. So a position may
//! move over inserted or replaced code, but never across code both bodies share.
//!
//! - [`Code::BranchRetargeted`]: a branch, `leave` or `switch` case with a certain copy whose
//!   patched target does not correspond to its original target, when the landing is itself
//!   a certain copy (of another instruction), or is code not in the original that leads (by
//!   falling through and unconditional branches, within 64 instructions) to a certain copy that
//!   does not correspond either while the target has a certain copy. A landing on code without
//!   a certain copy that goes nowhere certain (moved code, a target that was replaced) is
//!   counted as [`Unchecked::LandingUncertain`] instead.
//! - [`Code::ClauseBoundaryMoved`]: a try start or end, handler start or end, or filter start
//!   of an original clause whose counterpart in the patched table does not correspond. The
//!   counterpart is the clause of the same kind and class whose handler start corresponds (or,
//!   when none does, the one clause whose every other boundary does).
//!
//! What is not a finding follows from the rule: a branch that lands on code inserted right
//! before its target's copy (a prologue, an epilogue before a `ret`, a `nop`) or on code that
//! leads to it (a trampoline), or on the replacement of a target that has no copy (a `ret`
//! replaced by `br` or `stloc`+`leave` to an epilogue); a short branch widened; a macro form
//! replaced by its general form; a removed `tail.` prefix; a clause boundary moved over
//! inserted code next to it, either way; new clauses. Findings are never guessed: targets and
//! boundaries that cannot be compared are counted by [`Unchecked`] reason instead.

use super::{Code, Diagnostic, NONE};
use crate::body::{Body, Clause, ClauseKind};
use crate::instr::{Instruction, Operand, decode_at};
use crate::opcode::{DECODE, FAST_LEN, Flow, Opcode, OperandKind};
use serde::Serialize;
use std::sync::LazyLock;

/// A stretch is aligned exactly (in time and memory proportional to its cells: original
/// instructions × patched diagonals) when the band of diagonals its edits allow takes at most
/// this many cells, or [`BAND_CELLS_PER_INSTRUCTION`] per instruction of the stretch.
const DP_CELLS: usize = 4096;

/// Stretches of at most this many cells are aligned exactly without looking for anchors.
const SMALL_CELLS: usize = 64;

/// A stretch without anchors is aligned exactly in a diagonal band when the band takes at most
/// this many cells per instruction of the stretch (or [`DP_CELLS`]), and at most
/// [`MAX_BAND_CELLS`]. Also bounds the edit distance looked for.
const BAND_CELLS_PER_INSTRUCTION: usize = 64;

/// The most cells of one band (8 bytes each).
const MAX_BAND_CELLS: usize = 1 << 20;

/// The work bound of the anchoring passes: instructions looked at, per instruction of the two
/// bodies.
const WORK_PER_INSTRUCTION: usize = 16;

/// Most instructions followed from a landing on code without a certain copy.
const MAX_WALK: usize = 64;

/// Most patched clauses looked at as candidates for one original clause.
const MAX_CANDIDATES: usize = 64;

/// Why part of a comparison with the original was not made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Unchecked {
    /// A body's code does not decode into whole instructions (the structural verifier reports
    /// it): the method is not aligned.
    Undecodable,
    /// Fewer than half of the original's instructions (its `ret`s left out, which rewriters
    /// replace) have a certain copy in the patched body: the method was rewritten beyond
    /// alignment (or is not the original's) and is not aligned.
    TooDifferent,
    /// The method's match to its original is by token only (the names differ or cannot be
    /// read): it is not aligned.
    UncertainMatch,
    /// The original assembly could not be read again when its patched one was verified (it
    /// was read when the baseline was). Kept for readers of older reports: `verify` now
    /// reports such an assembly as having no original (`no_original` says why), so its
    /// findings all count as new.
    OriginalUnreadable,
    /// A stretch of the bodies had no instruction occurring once on each side, or the work
    /// bound was reached: it is left unaligned (counted once per stretch).
    Unanchored,
    /// A stretch whose unique instructions disagree on their order as much as they agree (code
    /// moved): it is left unaligned (counted once per stretch).
    Reordered,
    /// A branch, `leave` or `switch` of the original with no certain copy (replaced, or placed
    /// ambiguously): its targets are not checked (counted per target).
    NoCertainCopy,
    /// A target that lands on code without a certain copy which does not lead (within a few
    /// instructions) to the copy of the original target's place, while that target has no
    /// certain copy itself (moved, replaced or ambiguous), or control returns or throws first:
    /// not checked (counted per target).
    LandingUncertain,
    /// A target or clause boundary that is not an instruction start of its body, which is
    /// the structural verifier's to report: not checked (counted per target or boundary).
    InvalidTarget,
    /// An original clause with no single counterpart in the patched table (removed, or its
    /// kind, class or several boundaries changed): its boundaries are not checked (counted per
    /// boundary).
    ClauseUnmatched,
}

impl Unchecked {
    /// Every reason, in declaration order.
    pub const ALL: [Unchecked; 10] = [
        Unchecked::Undecodable,
        Unchecked::TooDifferent,
        Unchecked::UncertainMatch,
        Unchecked::OriginalUnreadable,
        Unchecked::Unanchored,
        Unchecked::Reordered,
        Unchecked::NoCertainCopy,
        Unchecked::LandingUncertain,
        Unchecked::InvalidTarget,
        Unchecked::ClauseUnmatched,
    ];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Unchecked::Undecodable => "Undecodable",
            Unchecked::TooDifferent => "TooDifferent",
            Unchecked::UncertainMatch => "UncertainMatch",
            Unchecked::OriginalUnreadable => "OriginalUnreadable",
            Unchecked::Unanchored => "Unanchored",
            Unchecked::Reordered => "Reordered",
            Unchecked::NoCertainCopy => "NoCertainCopy",
            Unchecked::LandingUncertain => "LandingUncertain",
            Unchecked::InvalidTarget => "InvalidTarget",
            Unchecked::ClauseUnmatched => "ClauseUnmatched",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What one comparison checked and what it left unchecked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlignStats {
    /// The original has no branch, `leave`, `switch` or clause: there was nothing to compare,
    /// and the bodies were not aligned (nor the patched one decoded).
    pub nothing_to_check: bool,
    /// Why the bodies were not aligned at all ([`Unchecked::Undecodable`],
    /// [`Unchecked::TooDifferent`]); `None` when they were.
    pub not_aligned: Option<Unchecked>,
    /// Original instructions, and those with a certain copy.
    pub instructions: u32,
    /// Original instructions with a certain copy in the patched body.
    pub certain: u32,
    /// Branch, `leave` and `switch` targets compared.
    pub targets_checked: u32,
    /// Clause boundaries compared.
    pub boundaries_checked: u32,
    /// What was not compared, by [`Unchecked::ALL`] index.
    pub unchecked: [u32; Unchecked::ALL.len()],
}

impl AlignStats {
    /// Whether everything was compared: aligned, no stretch left unaligned, no target or
    /// boundary unchecked.
    pub fn complete(&self) -> bool {
        self.not_aligned.is_none() && self.unchecked.iter().all(|&n| n == 0)
    }

    /// The unchecked counts with their reasons, leaving out zeros.
    pub fn unchecked(&self) -> impl Iterator<Item = (Unchecked, u32)> + '_ {
        Unchecked::ALL
            .iter()
            .map(|&u| (u, self.unchecked[u.index()]))
            .filter(|&(_, n)| n > 0)
    }

    fn skip(&mut self, why: Unchecked, n: u32) {
        self.unchecked[why.index()] += n;
    }
}

/// What makes two instructions the same for alignment: the general form of the opcode's family
/// and the operand, normalised (the implied operand of a macro form, a constant as `int32`
/// bits, a token, a local or argument index, a `switch`'s case count; 0 for branches).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The family's general form: `br` for `br.s`, `ldarg` for `ldarg.0`, `ldc.i4` for
    /// `ldc.i4.m1`; the opcode itself for the others.
    pub family: Opcode,
    /// The normalised operand.
    pub operand: u64,
}

/// An opcode's family: its general form, and the operand a macro form implies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Family {
    general: Opcode,
    implied: Option<i32>,
}

/// What [`Side::load`] needs of an encoding (low byte, plus 256 for `FE xx`), in one entry:
/// the decoder's length and operand kind, and the family. `len` 0: undefined.
#[derive(Clone, Copy, Debug)]
struct LoadEntry {
    family: Opcode,
    implied: Option<i32>,
    operand: OperandKind,
    len: u8,
}

static LOAD: LazyLock<[LoadEntry; 512]> = LazyLock::new(|| {
    let mut t = [LoadEntry {
        family: Opcode::Nop,
        implied: None,
        operand: OperandKind::None,
        len: 0,
    }; 512];
    for (k, e) in t.iter_mut().enumerate() {
        let d = if k < 256 {
            DECODE.one[k]
        } else {
            DECODE.two[k - 256]
        };
        if let Some(op) = d.opcode {
            *e = LoadEntry {
                family: op.general_form(),
                implied: op.implied_operand(),
                operand: d.operand,
                len: d.len,
            };
        }
    }
    t
});

/// The alignment key of an instruction.
pub fn key(ins: &Instruction<'_>) -> Key {
    let family = Family {
        general: ins.opcode.general_form(),
        implied: ins.opcode.implied_operand(),
    };
    let operand = match (family.implied, &ins.operand) {
        (Some(v), _) => v as u32 as u64,
        (None, Operand::None) => 0,
        (None, Operand::Int8(v)) => *v as i32 as u32 as u64,
        (None, Operand::Int32(v)) => *v as u32 as u64,
        (None, Operand::Int64(v)) => *v as u64,
        (None, Operand::Float32(bits)) => *bits as u64,
        (None, Operand::Float64(bits)) => *bits,
        (None, Operand::ShortBranch(_) | Operand::Branch(_)) => 0,
        (None, Operand::Switch(t)) => t.len() as u64,
        (None, Operand::Var(v)) => *v as u64,
        (None, Operand::Token(t)) => *t as u64,
    };
    Key {
        family: family.general,
        operand,
    }
}

/// What a metadata token stands for, as a number the original and the patched image agree
/// on. A rewriter that writes its metadata anew (Mono.Cecil, dnlib) numbers tokens its own way,
/// so that comparing them by value would pair `callvirt A` with `callvirt B` and report the
/// branches between them as retargeted; given one of these, [`Aligner::compare_identified`]
/// compares instructions and catch classes by what their tokens name.
pub trait TokenIdentity {
    /// The identity of `token` of the original image.
    fn original(&mut self, token: u32) -> u64;
    /// The identity of `token` of the patched image.
    fn patched(&mut self, token: u32) -> u64;
}

/// One body's instructions: keys, and the offset of each (plus the code length at the end).
#[derive(Debug, Default)]
struct Side {
    keys: Vec<Key>,
    offs: Vec<u32>,
    /// Instructions with targets (branches, `leave`, `switch`), by index.
    branch_at: Vec<u32>,
    /// Instructions whose operand is a metadata token, by index.
    token_at: Vec<u32>,
}

impl Side {
    /// Decodes `code`; false when it does not decode into whole instructions. Reads the
    /// decoder's table directly (the same facts [`key`] takes from a decoded instruction):
    /// this runs on every instruction of both bodies.
    fn load(&mut self, code: &[u8]) -> bool {
        self.keys.clear();
        self.offs.clear();
        self.branch_at.clear();
        self.token_at.clear();
        let Ok(len) = u32::try_from(code.len()) else {
            return false;
        };
        let table = &*LOAD;
        let mut pos = 0usize;
        while pos < code.len() {
            let (entry, size) = match code[pos] {
                0xFE => match code.get(pos + 1) {
                    Some(&b) => (table[256 + b as usize], 2),
                    None => return false,
                },
                b => (table[b as usize], 1),
            };
            if entry.len == 0 {
                return false;
            }
            let mut next = pos + entry.len as usize;
            let Some(bytes) = code.get(pos + size..next) else {
                return false;
            };
            let le = |n: usize| {
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(&bytes[..n]);
                u64::from_le_bytes(v)
            };
            let operand = match entry.operand {
                OperandKind::None => 0,
                OperandKind::ShortBrTarget | OperandKind::BrTarget => {
                    self.branch_at.push(self.keys.len() as u32);
                    0
                }
                OperandKind::ShortI => bytes[0] as i8 as i32 as u32 as u64,
                OperandKind::ShortLocal | OperandKind::ShortArg => le(1),
                OperandKind::Local | OperandKind::Arg => le(2),
                OperandKind::I | OperandKind::ShortR => le(4),
                OperandKind::Tok
                | OperandKind::Type
                | OperandKind::Field
                | OperandKind::Method
                | OperandKind::String
                | OperandKind::Sig => {
                    self.token_at.push(self.keys.len() as u32);
                    le(4)
                }
                OperandKind::I8 | OperandKind::R => le(8),
                OperandKind::Switch => {
                    self.branch_at.push(self.keys.len() as u32);
                    let count = le(4);
                    match usize::try_from(count)
                        .ok()
                        .and_then(|c| c.checked_mul(4))
                        .and_then(|t| next.checked_add(t))
                        .filter(|&end| end <= code.len())
                    {
                        Some(end) => next = end,
                        None => return false,
                    }
                    count
                }
            };
            // A macro form's operand is implied (and it has none in the code).
            let operand = entry.implied.map_or(operand, |v| v as u32 as u64);
            self.offs.push(pos as u32);
            self.keys.push(Key {
                family: entry.family,
                operand,
            });
            pos = next;
        }
        self.offs.push(len);
        true
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The instruction starting at byte `off`, or the instruction count for the end of the
    /// code; `None` inside an instruction or outside the code.
    fn index_of(&self, off: i64) -> Option<u32> {
        let off = u32::try_from(off).ok()?;
        self.offs.binary_search(&off).ok().map(|i| i as u32)
    }
}

/// Original instructions `i..i + len` matched to patched `j..j + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    i: u32,
    j: u32,
    len: u32,
}

/// A stretch `o[a0..a1]` × `p[b0..b1]` still to align.
#[derive(Clone, Copy, Debug)]
struct Seg {
    a0: usize,
    a1: usize,
    b0: usize,
    b1: usize,
}

/// A key's occurrences in a stretch: how many on each side (0, 1, or 2 for more), and where
/// the last is. Empty unless its generation is the table's current one (only original keys
/// are entered).
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: Key,
    generation: u32,
    at_o: u32,
    at_p: u32,
    o: u8,
    p: u8,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            key: Key {
                family: Opcode::Nop,
                operand: 0,
            },
            generation: 0,
            at_o: 0,
            at_p: 0,
            o: 0,
            p: 0,
        }
    }
}

/// A clause with its boundaries as instruction positions.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    /// The clause's index in its table.
    clause: u32,
    kind: ClauseKind,
    /// A catch clause's class token (or its [`TokenIdentity`]); 0 for other kinds.
    class: u64,
    /// try start, try end, handler start, handler end, filter start (or [`NONE`]).
    at: [u32; 5],
    /// The same as stored byte offsets.
    off: [u32; 5],
}

const BOUNDARY_NAMES: [&str; 5] = [
    "try start",
    "try end",
    "handler start",
    "handler end",
    "filter start",
];
const HANDLER_START: usize = 2;

impl Bounds {
    fn of(clause: usize, c: &Clause, side: &Side) -> Option<Bounds> {
        let kind = c.kind();
        let filter = kind == ClauseKind::Filter;
        let off64 = [
            c.try_offset as u64,
            c.try_end(),
            c.handler_offset as u64,
            c.handler_end(),
            if filter { c.class_or_filter as u64 } else { 0 },
        ];
        let mut at = [NONE; 5];
        let mut off = [0; 5];
        for k in 0..5 {
            if k == 4 && !filter {
                continue;
            }
            off[k] = u32::try_from(off64[k]).ok()?;
            at[k] = side.index_of(off64[k] as i64)?;
        }
        Some(Bounds {
            clause: clause as u32,
            kind,
            class: if kind == ClauseKind::Catch {
                u64::from(c.class_or_filter)
            } else {
                0
            },
            at,
            off,
        })
    }

    fn count(&self) -> u32 {
        if self.kind == ClauseKind::Filter {
            5
        } else {
            4
        }
    }

    fn same_kind(&self, other: &Bounds) -> bool {
        self.kind == other.kind && self.class == other.class
    }
}

/// Aligns patched method bodies with their originals and reports what moved. Keeps its
/// buffers between bodies.
#[derive(Debug, Default)]
pub struct Aligner {
    o: Side,
    p: Side,
    /// Per original instruction: the patched instruction it is matched to, or [`NONE`].
    matched: Vec<u32>,
    /// The matched pairs, as diagonal runs.
    runs: Vec<Run>,
    /// Per original instruction: whether no embedding moves its match.
    forced: Vec<bool>,
    /// The certain copies, as diagonal runs, in order.
    certain: Vec<Run>,
    segs: Vec<Seg>,
    /// The keys of a stretch being anchored: occurrences on each side.
    table: Vec<Slot>,
    /// The seed of `table`'s hash (0 until first used).
    seed: u64,
    /// The generation of `table`'s current slots.
    generation: u32,
    /// Per original instruction of the stretch being anchored: its slot in `table`.
    slot_of: Vec<u32>,
    /// Per anchor candidate: the longest chain ending, and starting, there.
    ends: Vec<u32>,
    starts: Vec<u32>,
    pairs: Vec<(u32, u32)>,
    tails: Vec<u32>,
    links: Vec<u32>,
    fwd: Vec<u32>,
    bwd: Vec<u32>,
    bounds: Vec<Bounds>,
    by_handler: Vec<u32>,
    by_try: Vec<u32>,
    /// The targets of a branch of each body, being compared.
    targets: (Vec<i64>, Vec<i64>),
    /// The clauses of the bodies [`Aligner::compare`] was given.
    clauses: (Vec<Clause>, Vec<Clause>),
    diags: Vec<Diagnostic>,
    stats: AlignStats,
}

impl Aligner {
    /// A new aligner.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compares a patched body with its original; the findings are sorted by offset (IL offsets
    /// of the patched body).
    pub fn compare(&mut self, original: &Body<'_>, patched: &Body<'_>) -> &[Diagnostic] {
        let (mut oc, mut pc) = std::mem::take(&mut self.clauses);
        oc.clear();
        oc.extend(original.clauses());
        pc.clear();
        pc.extend(patched.clauses());
        self.compare_code(original.code, &oc, patched.code, &pc);
        self.clauses = (oc, pc);
        &self.diags
    }

    /// [`Self::compare`] for a patched body whose tokens are numbered otherwise than its
    /// original's: instructions and catch classes compare by `ids`.
    pub fn compare_identified(
        &mut self,
        original: &Body<'_>,
        patched: &Body<'_>,
        ids: &mut dyn TokenIdentity,
    ) -> &[Diagnostic] {
        let (mut oc, mut pc) = std::mem::take(&mut self.clauses);
        oc.clear();
        oc.extend(original.clauses());
        pc.clear();
        pc.extend(patched.clauses());
        self.run(original.code, &oc, patched.code, &pc, Some(ids));
        self.clauses = (oc, pc);
        &self.diags
    }

    /// [`Self::compare`] on raw code and clauses.
    pub fn compare_code(
        &mut self,
        original: &[u8],
        original_clauses: &[Clause],
        patched: &[u8],
        patched_clauses: &[Clause],
    ) -> &[Diagnostic] {
        self.run(original, original_clauses, patched, patched_clauses, None)
    }

    fn run(
        &mut self,
        original: &[u8],
        original_clauses: &[Clause],
        patched: &[u8],
        patched_clauses: &[Clause],
        mut ids: Option<&mut dyn TokenIdentity>,
    ) -> &[Diagnostic] {
        self.diags.clear();
        self.stats = AlignStats::default();
        if original_clauses.is_empty() && !maybe_targets(original) {
            self.stats.nothing_to_check = true;
            return &self.diags;
        }
        if !self.o.load(original) {
            self.stats.not_aligned = Some(Unchecked::Undecodable);
            return &self.diags;
        }
        let n = self.o.len();
        self.stats.instructions = n as u32;
        if self.o.branch_at.is_empty() && original_clauses.is_empty() {
            self.stats.nothing_to_check = true;
            return &self.diags;
        }
        if !self.p.load(patched) {
            self.stats.not_aligned = Some(Unchecked::Undecodable);
            return &self.diags;
        }
        if let Some(ids) = ids.as_deref_mut() {
            for &i in &self.o.token_at {
                let k = &mut self.o.keys[i as usize];
                k.operand = ids.original(k.operand as u32);
            }
            for &i in &self.p.token_at {
                let k = &mut self.p.keys[i as usize];
                k.operand = ids.patched(k.operand as u32);
            }
        }
        self.align();
        self.certainty();
        let certain: usize = self.certain.iter().map(|r| r.len as usize).sum();
        self.stats.certain = certain as u32;
        // Rewriters replace `ret`s (by branches to an epilogue, `leave`s out of a new try), so
        // they are not counted against the similarity.
        let returns = self
            .o
            .keys
            .iter()
            .filter(|k| k.family == Opcode::Ret)
            .count();
        if certain * 2 < n - returns {
            self.stats.not_aligned = Some(Unchecked::TooDifferent);
            return &self.diags;
        }
        self.check_branches(original, patched);
        self.check_clauses(original_clauses, patched_clauses, ids);
        self.diags.sort_by_key(|d| (d.offset, d.code));
        &self.diags
    }

    /// Findings of the last comparison.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diags
    }

    /// What the last comparison checked and left unchecked.
    pub fn stats(&self) -> &AlignStats {
        &self.stats
    }

    /// Fills `matched` with an alignment of the two bodies, stretch by stretch.
    fn align(&mut self) {
        let (n, m) = (self.o.len(), self.p.len());
        self.matched.clear();
        self.matched.resize(n, NONE);
        self.segs.clear();
        self.segs.push(Seg {
            a0: 0,
            a1: n,
            b0: 0,
            b1: m,
        });
        let mut budget = WORK_PER_INSTRUCTION.saturating_mul(n + m);
        while let Some(mut s) = self.segs.pop() {
            let (o, p) = (&self.o.keys, &self.p.keys);
            while s.a0 < s.a1 && s.b0 < s.b1 && o[s.a0] == p[s.b0] {
                self.matched[s.a0] = s.b0 as u32;
                s.a0 += 1;
                s.b0 += 1;
            }
            while s.a0 < s.a1 && s.b0 < s.b1 && o[s.a1 - 1] == p[s.b1 - 1] {
                self.matched[s.a1 - 1] = (s.b1 - 1) as u32;
                s.a1 -= 1;
                s.b1 -= 1;
            }
            if s.a0 == s.a1 || s.b0 == s.b1 {
                continue;
            }
            let (a, b) = (s.a1 - s.a0, s.b1 - s.b0);
            if a.saturating_mul(b) <= SMALL_CELLS {
                self.exact(s, i64::MIN / 4, i64::MAX / 4);
                continue;
            }
            if self.embedded(s) {
                continue;
            }
            let work = a + b;
            let why = if work > budget {
                Unchecked::Unanchored
            } else {
                budget -= work;
                match self.anchor(s) {
                    None => continue,
                    Some(why) => why,
                }
            };
            // No anchors: exactly, in the band of diagonals the edits allow, when it is narrow.
            let cap = DP_CELLS
                .max(BAND_CELLS_PER_INSTRUCTION.saturating_mul(a + b))
                .min(MAX_BAND_CELLS);
            // Myers' search up to distance d costs about d² (plus the snakes, within the
            // band): bounded by the band and by 64 per instruction of the stretch; and the
            // distance is at least the difference in lengths.
            let max = (cap / (a + 1))
                .saturating_sub(3)
                .min(BAND_CELLS_PER_INSTRUCTION.saturating_mul(a + b).isqrt());
            if a.abs_diff(b) > max {
                self.stats.skip(why, 1);
                continue;
            }
            if let Some(d) = self.distance(s, max) {
                let lcs = (a + b - d) / 2;
                if self.exact(s, -((a - lcs) as i64), (b - lcs) as i64) {
                    continue;
                }
            }
            self.stats.skip(why, 1);
        }
    }

    /// When one side of a stretch is a subsequence of the other (code only inserted, or only
    /// removed), matches it at its leftmost embedding: every longest common subsequence matches
    /// all of it, and [`Self::certainty`] keeps only the pairs no other embedding moves.
    fn embedded(&mut self, s: Seg) -> bool {
        let (o, p) = (&self.o.keys[s.a0..s.a1], &self.p.keys[s.b0..s.b1]);
        let flip = o.len() > p.len();
        let (short, long) = if flip { (p, o) } else { (o, p) };
        // At most `long - short` keys of the longer side are skipped: fail as soon as more
        // would be (and forget what was matched).
        let mut skips = long.len() - short.len();
        let mut at = 0;
        for (r, k) in short.iter().enumerate() {
            match long[at..at + skips + 1].iter().position(|l| l == k) {
                Some(d) => {
                    skips -= d;
                    at += d;
                    let (i, j) = if flip { (at, r) } else { (r, at) };
                    self.matched[s.a0 + i] = (s.b0 + j) as u32;
                    at += 1;
                }
                None => {
                    self.matched[s.a0..s.a1].iter_mut().for_each(|m| *m = NONE);
                    return false;
                }
            }
        }
        true
    }

    /// Cuts a stretch at the instructions occurring once on each side that every longest
    /// chain of them in order keeps, and queues the pieces between them; or says why it cannot
    /// ([`Unchecked::Unanchored`]: no such instruction; [`Unchecked::Reordered`]: the unique
    /// instructions disagree on their order as much as they agree).
    fn anchor(&mut self, s: Seg) -> Option<Unchecked> {
        // Instructions with a token operand are the likeliest to be unique, and no other key
        // equals theirs: counting only them finds the same unique ones among them, for less.
        self.count_keys::<true>(s);
        if self.pairs.is_empty() {
            self.count_keys::<false>(s);
        }
        if self.pairs.is_empty() {
            return Some(Unchecked::Unanchored);
        }
        // Patience sorting both ways: `ends[e]` is the longest chain (increasing in both
        // positions) ending at pair e, `starts[e]` the longest starting there.
        let n = self.pairs.len();
        self.ends.clear();
        self.starts.clear();
        self.starts.resize(n, 0);
        self.tails.clear();
        for &(_, j) in &self.pairs {
            let pos = self.tails.partition_point(|&t| t < j);
            if pos == self.tails.len() {
                self.tails.push(j);
            } else {
                self.tails[pos] = j;
            }
            self.ends.push(pos as u32 + 1);
        }
        let chain = self.tails.len();
        self.tails.clear();
        for e in (0..n).rev() {
            let v = u32::MAX - self.pairs[e].1;
            let pos = self.tails.partition_point(|&t| t < v);
            if pos == self.tails.len() {
                self.tails.push(v);
            } else {
                self.tails[pos] = v;
            }
            self.starts[e] = pos as u32 + 1;
        }
        let dropped = n - chain;
        if chain <= 2 * dropped {
            return Some(Unchecked::Reordered);
        }
        // A pair is on every longest chain when it is on one and no other pair on one has the
        // same rank: those are the anchors.
        self.links.clear();
        self.links.resize(chain + 1, 0);
        let on = |e: usize| (self.ends[e] + self.starts[e]) as usize == chain + 1;
        for e in 0..n {
            if on(e) {
                self.links[self.ends[e] as usize] += 1;
            }
        }
        let (mut a0, mut b0) = (s.a0, s.b0);
        let mut any = false;
        for e in 0..n {
            if !on(e) || self.links[self.ends[e] as usize] != 1 {
                continue;
            }
            let (i, j) = self.pairs[e];
            let (i, j) = (i as usize, j as usize);
            self.matched[i] = j as u32;
            self.segs.push(Seg {
                a0,
                a1: i,
                b0,
                b1: j,
            });
            (a0, b0) = (i + 1, j + 1);
            any = true;
        }
        if !any {
            return Some(Unchecked::Unanchored);
        }
        self.segs.push(Seg {
            a0,
            a1: s.a1,
            b0,
            b1: s.b1,
        });
        None
    }

    /// Fills `pairs` with the (original, patched) positions of the keys that occur exactly
    /// once on each side of the stretch, in original order (with `TOKENS`, of the keys whose
    /// operand is a token only). An open-addressing table with a
    /// seeded hash: the input chooses the keys, not where they land.
    fn count_keys<const TOKENS: bool>(&mut self, s: Seg) {
        let (o, p) = (&self.o.keys, &self.p.keys);
        let size = ((s.a1 - s.a0) * 2).next_power_of_two().max(16);
        let mask = size - 1;
        // Slots of earlier stretches are stale by their generation, so the table is cleared
        // only when it grows or the generations wrap.
        self.generation = self.generation.wrapping_add(1);
        if self.table.len() < size || self.generation == 0 {
            self.table.clear();
            self.table.resize(size, Slot::default());
            self.generation = 1;
        }
        let generation = self.generation;
        if self.seed == 0 {
            use std::hash::BuildHasher;
            self.seed = std::collections::hash_map::RandomState::new().hash_one(0x1Cu8) | 1;
        }
        let seed = self.seed;
        let home = |k: &Key| {
            let h = (k.operand ^ seed)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29)
                ^ (k.family as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
            (h.wrapping_mul(0x1656_67B1_9E37_79F9) >> 32) as usize & mask
        };
        let table = &mut self.table;
        let slot_of = &mut self.slot_of;
        slot_of.clear();
        let counted = |k: &Key| !TOKENS || k.family.operand_kind().is_token();
        for (i, &k) in o.iter().enumerate().take(s.a1).skip(s.a0) {
            if !counted(&k) {
                continue;
            }
            let mut at = home(&k);
            loop {
                let slot = &mut table[at];
                if slot.generation != generation {
                    *slot = Slot {
                        key: k,
                        generation,
                        at_o: i as u32,
                        at_p: 0,
                        o: 1,
                        p: 0,
                    };
                    break;
                }
                if slot.key == k {
                    slot.o = 2;
                    break;
                }
                at = (at + 1) & mask;
            }
            slot_of.push(at as u32);
        }
        for (j, &k) in p.iter().enumerate().take(s.b1).skip(s.b0) {
            if !counted(&k) {
                continue;
            }
            let mut at = home(&k);
            loop {
                let slot = &mut table[at];
                if slot.generation != generation {
                    break;
                }
                if slot.key == k {
                    slot.p = slot.p.saturating_add(1).min(2);
                    slot.at_p = j as u32;
                    break;
                }
                at = (at + 1) & mask;
            }
        }
        self.pairs.clear();
        for &at in slot_of.iter() {
            let slot = &table[at as usize];
            if slot.o == 1 && slot.p == 1 {
                self.pairs.push((slot.at_o, slot.at_p));
            }
        }
    }

    /// The edit distance (deletions plus insertions) of a stretch, by Myers' greedy algorithm,
    /// when it is at most `max`; time proportional to the stretch times the distance.
    fn distance(&mut self, s: Seg, max: usize) -> Option<usize> {
        let (o, p) = (&self.o.keys[s.a0..s.a1], &self.p.keys[s.b0..s.b1]);
        let (a, b) = (o.len() as i64, p.len() as i64);
        let max = max.min(o.len() + p.len());
        let off = max as i64 + 1;
        // v[k + off]: the furthest original position on diagonal k = x - y.
        self.fwd.clear();
        self.fwd.resize(2 * max + 3, 0);
        let v = &mut self.fwd;
        for d in 0..=max as i64 {
            let mut k = -d;
            while k <= d {
                let at = (k + off) as usize;
                let mut x = if k == -d || (k != d && v[at - 1] < v[at + 1]) {
                    v[at + 1] as i64
                } else {
                    v[at - 1] as i64 + 1
                };
                let mut y = x - k;
                while x < a && y < b && o[x as usize] == p[y as usize] {
                    x += 1;
                    y += 1;
                }
                v[at] = x as u32;
                if x >= a && y >= b {
                    return Some(d as usize);
                }
                k += 2;
            }
        }
        None
    }

    /// Aligns a stretch exactly within the diagonals `k = j - i` in `klo..=khi`, keeping only
    /// the pairs every longest common subsequence has. False, with nothing matched, when an
    /// optimal alignment might leave the band: every optimal path makes `a - L` deletions and
    /// `b - L` insertions, so its diagonal stays within `[-(a - L), b - L]`, and a band that
    /// covers that range for the band's own `L` holds every optimal path.
    fn exact(&mut self, s: Seg, klo: i64, khi: i64) -> bool {
        let (o, p) = (&self.o.keys[s.a0..s.a1], &self.p.keys[s.b0..s.b1]);
        let (a, b) = (o.len(), p.len());
        let (klo, khi) = (klo.max(-(a as i64)), khi.min(b as i64));
        // Row i holds diagonals klo..=khi at columns 1..=w, with a 0 on each side, so that
        // every neighbour a cell reads is in the table; cells off the band or the grid stay 0
        // (a lower bound, and never on an optimal path once the band holds them all).
        let w = (khi - klo + 1) as usize;
        let row = w + 2;
        let cells = (a + 1) * row;
        self.fwd.clear();
        self.fwd.resize(cells, 0);
        self.bwd.clear();
        self.bwd.resize(cells, 0);
        let (f, r) = (&mut self.fwd, &mut self.bwd);
        // The columns of row i whose j = i + k lies in lo..=hi, and j at the first of them.
        let span = |i: usize, lo: i64, hi: i64| {
            let k0 = (lo - i as i64).max(klo);
            let k1 = (hi - i as i64).min(khi);
            let c0 = (k0 - klo + 1) as usize;
            let c1 = (k1 - klo + 1) as usize;
            (c0, c1 + 1, (i as i64 + k0) as usize)
        };
        // f[i][j]: LCS of o[..i] and p[..j], for j >= 1.
        for i in 1..=a {
            let (c0, c1, j0) = span(i, 1, b as i64);
            if c0 >= c1 {
                continue;
            }
            let (before, rest) = f.split_at_mut(i * row);
            let prev = &before[(i - 1) * row..];
            let cur = &mut rest[..row];
            let oi = o[i - 1];
            for (n, c) in (c0..c1).enumerate() {
                cur[c] = if oi == p[j0 + n - 1] {
                    prev[c] + 1
                } else {
                    prev[c + 1].max(cur[c - 1])
                };
            }
        }
        let best = f[a * row + (b as i64 - a as i64 - klo + 1) as usize];
        let (del, ins) = ((a - best as usize) as i64, (b - best as usize) as i64);
        if -del < klo || ins > khi {
            return false;
        }
        // r[i][j]: LCS of o[i..] and p[j..], for j < b; row i + 1 done, row i of f: whether
        // every optimal path matches o[i], and to one p[j].
        for i in (0..a).rev() {
            let (cur, after) = r.split_at_mut((i + 1) * row);
            let cur = &mut cur[i * row..];
            let next = &after[..row];
            let oi = o[i];
            let (c0, c1, j0) = span(i, 0, b as i64 - 1);
            for (n, c) in (c0..c1).enumerate().rev() {
                cur[c] = if oi == p[j0 + n] {
                    next[c] + 1
                } else {
                    next[c - 1].max(cur[c + 1])
                };
            }
            let fi = &f[i * row..(i + 1) * row];
            let (c0, c1, j0) = span(i, 0, b as i64);
            let mut only = NONE;
            let mut ways = 0;
            let mut skippable = false;
            for (n, c) in (c0..c1).enumerate() {
                let j = j0 + n;
                // A path that passes row i without matching it: down to (i + 1, j).
                skippable |= fi[c] + next[c - 1] == best;
                if j < b && oi == p[j] && fi[c] + 1 + next[c] == best {
                    ways += 1;
                    only = j as u32;
                }
            }
            if ways == 1 && !skippable {
                self.matched[s.a0 + i] = s.b0 as u32 + only;
            }
        }
        true
    }

    /// Keeps the matched pairs whose place no other embedding disputes, as runs in `certain`.
    fn certainty(&mut self) {
        let n = self.o.len();
        // The matched pairs as diagonal runs.
        self.runs.clear();
        for (i, &j) in self.matched.iter().enumerate() {
            if j == NONE {
                continue;
            }
            let i = i as u32;
            match self.runs.last_mut() {
                Some(r) if r.i + r.len == i && r.j + r.len == j => r.len += 1,
                _ => self.runs.push(Run { i, j, len: 1 }),
            }
        }
        // The matched original keys embedded into the patched body, leftmost and rightmost;
        // then the matched patched keys into the original. A pair is kept when both
        // embeddings put it where it is, both ways.
        self.forced.clear();
        self.forced.resize(n, true);
        embed::<true>(&self.runs, &self.o.keys, &self.p.keys, &mut self.forced);
        embed::<false>(&self.runs, &self.o.keys, &self.p.keys, &mut self.forced);
        self.certain.clear();
        for r in &self.runs {
            let flags = &self.forced[r.i as usize..(r.i + r.len) as usize];
            if flags.iter().all(|&f| f) {
                self.certain.push(*r);
                continue;
            }
            for (q, &f) in flags.iter().enumerate() {
                let (i, j) = (r.i + q as u32, r.j + q as u32);
                match self.certain.last_mut() {
                    Some(c) if f && c.i + c.len == i && c.j + c.len == j => c.len += 1,
                    _ if f => self.certain.push(Run { i, j, len: 1 }),
                    _ => {}
                }
            }
        }
    }

    /// The certain copy of original instruction `i`.
    fn copy_of(&self, i: u32) -> Option<u32> {
        let k = self.certain.partition_point(|r| r.i + r.len <= i);
        let r = self.certain.get(k)?;
        (r.i <= i).then(|| r.j + (i - r.i))
    }

    /// The original instruction whose certain copy patched instruction `x` is.
    fn origin_of(&self, x: u32) -> Option<u32> {
        let k = self.certain.partition_point(|r| r.j + r.len <= x);
        let r = self.certain.get(k)?;
        (r.j <= x).then(|| r.i + (x - r.j))
    }

    /// Whether original position `t` and patched position `x` correspond: no certain copy lies
    /// between them (every certain copy before `x` is of an instruction before `t`, every one at
    /// or after `x` of `t` or later).
    fn corresponds(&self, t: u32, x: u32) -> bool {
        let (lo, hi) = self.span(t);
        (lo..=hi).contains(&x)
    }

    /// The patched positions that correspond to original position `t`: from just after the
    /// last certain copy of an instruction before `t` to the first certain copy of `t` or a
    /// later one (the end of the code when there is none).
    fn span(&self, t: u32) -> (u32, u32) {
        let k = self.certain.partition_point(|r| r.i < t);
        match k.checked_sub(1).map(|k| self.certain[k]) {
            // t's own copy, in the run that holds it and the instruction before.
            Some(r) if t < r.i + r.len => (r.j + (t - r.i), r.j + (t - r.i)),
            before => (
                before.map_or(0, |r| r.j + r.len),
                self.certain.get(k).map_or(self.p.len() as u32, |r| r.j),
            ),
        }
    }

    /// [`Self::span`] as byte offsets.
    fn expected(&self, t: u32) -> (u32, u32) {
        let (lo, hi) = self.span(t);
        let at = |x: u32| self.p.offs.get(x as usize).copied().unwrap_or(0);
        (at(lo), at(hi))
    }

    fn check_branches(&mut self, original: &[u8], patched: &[u8]) {
        let n = self.o.len() as u32;
        let m = self.p.len() as u32;
        let (mut to_all, mut tp_all) = std::mem::take(&mut self.targets);
        for k in 0..self.o.branch_at.len() {
            let i = self.o.branch_at[k] as usize;
            let (start, next) = (self.o.offs[i] as usize, self.o.offs[i + 1] as usize);
            targets_at(original, start, next, &mut to_all);
            let Some(j) = self.copy_of(i as u32) else {
                self.stats
                    .skip(Unchecked::NoCertainCopy, to_all.len() as u32);
                continue;
            };
            let (pstart, pnext) = (
                self.p.offs[j as usize] as usize,
                self.p.offs[j as usize + 1] as usize,
            );
            targets_at(patched, pstart, pnext, &mut tp_all);
            for (case, (&to, &tp)) in to_all.iter().zip(&tp_all).enumerate() {
                let t = self.o.index_of(to).filter(|&t| t < n);
                let x = self.p.index_of(tp).filter(|&x| x < m);
                let (Some(t), Some(x)) = (t, x) else {
                    self.stats.skip(Unchecked::InvalidTarget, 1);
                    continue;
                };
                self.stats.targets_checked += 1;
                if self.corresponds(t, x) {
                    continue;
                }
                // The landing is a copy of other original code, or inserted code that leads
                // there while the target kept its copy; else (inserted code going elsewhere,
                // a target without a certain copy, moved code) nothing certain is known.
                let origin = self.origin_of(x);
                let leads = if origin.is_some() {
                    None
                } else {
                    match self.walk(patched, x) {
                        Some(y) if self.corresponds(t, y) => continue,
                        Some(y) if self.copy_of(t).is_some() => Some(y),
                        _ => {
                            self.stats.skip(Unchecked::LandingUncertain, 1);
                            continue;
                        }
                    }
                };
                let (lo, hi) = self.expected(t);
                let opcode = decode_at(patched, pstart).map_or(Opcode::Nop, |ins| ins.opcode);
                let what = if opcode.operand_kind() == OperandKind::Switch {
                    format!("case {case} of `switch`")
                } else {
                    format!("`{opcode}`")
                };
                let original_at = |x: u32| {
                    let u = self.origin_of(x).unwrap_or(0);
                    self.o.offs[u as usize]
                };
                let landing = match leads {
                    None => format!(
                        "lands on IL_{tp:04x}, the copy of the original's IL_{:04x}",
                        original_at(x)
                    ),
                    Some(y) => format!(
                        "lands on IL_{tp:04x}, code not in the original that leads to \
                         IL_{:04x}, the copy of the original's IL_{:04x}",
                        self.p.offs[y as usize],
                        original_at(y)
                    ),
                };
                let message = format!(
                    "{what} copied from IL_{start:04x} of the original {landing}; its original \
                     target IL_{to:04x} corresponds to {} here",
                    range(lo, hi)
                );
                self.diags.push(Diagnostic::new(
                    Code::BranchRetargeted,
                    pstart as u32,
                    message,
                ));
            }
        }
        self.targets = (to_all, tp_all);
    }

    /// The first certain copy that control reaches from patched instruction `x` through code
    /// without one (falling through, taking unconditional branches), within [`MAX_WALK`]
    /// instructions; `None` when control returns, throws or goes further first.
    fn walk(&self, patched: &[u8], mut x: u32) -> Option<u32> {
        let m = self.p.len() as u32;
        for _ in 0..MAX_WALK {
            if x >= m {
                return None;
            }
            if self.origin_of(x).is_some() {
                return Some(x);
            }
            let ins = decode_at(patched, self.p.offs[x as usize] as usize).ok()?;
            x = match ins.opcode.flow() {
                Flow::Next | Flow::Break | Flow::Call | Flow::Prefix | Flow::CondBranch => x + 1,
                Flow::Branch => self.p.index_of(ins.branch_target()?)?,
                Flow::Return | Flow::Throw => return None,
            };
        }
        None
    }

    fn check_clauses(
        &mut self,
        original: &[Clause],
        patched: &[Clause],
        mut ids: Option<&mut dyn TokenIdentity>,
    ) {
        if original.is_empty() {
            return;
        }
        self.bounds.clear();
        for (k, c) in patched.iter().enumerate() {
            if let Some(mut b) = Bounds::of(k, c, &self.p) {
                if let Some(ids) = ids.as_deref_mut()
                    && b.kind == ClauseKind::Catch
                {
                    b.class = ids.patched(b.class as u32);
                }
                self.bounds.push(b);
            }
        }
        let bounds = std::mem::take(&mut self.bounds);
        self.by_handler.clear();
        self.by_handler.extend(0..bounds.len() as u32);
        self.by_handler
            .sort_by_key(|&k| bounds[k as usize].at[HANDLER_START]);
        self.by_try.clear();
        self.by_try.extend(0..bounds.len() as u32);
        self.by_try.sort_by_key(|&k| bounds[k as usize].at[0]);
        for (index, c) in original.iter().enumerate() {
            let Some(mut ob) = Bounds::of(index, c, &self.o) else {
                let boundaries = if c.kind() == ClauseKind::Filter { 5 } else { 4 };
                self.stats.skip(Unchecked::InvalidTarget, boundaries);
                continue;
            };
            if let Some(ids) = ids.as_deref_mut()
                && ob.kind == ClauseKind::Catch
            {
                ob.class = ids.original(ob.class as u32);
            }
            self.check_clause(index, &ob, &bounds);
        }
        self.bounds = bounds;
    }

    /// The patched clauses of `order` (sorted by boundary `k`) whose boundary `k` corresponds
    /// to the original's, of the same kind and class: at most [`MAX_CANDIDATES`], or `None`
    /// when there are more.
    fn candidates(
        &self,
        ob: &Bounds,
        k: usize,
        order: &[u32],
        bounds: &[Bounds],
    ) -> Option<Vec<u32>> {
        let (lo, hi) = self.span(ob.at[k]);
        let start = order.partition_point(|&c| bounds[c as usize].at[k] < lo);
        let mut found = Vec::new();
        for &c in &order[start..] {
            let b = &bounds[c as usize];
            if b.at[k] > hi {
                break;
            }
            if b.same_kind(ob) {
                if found.len() == MAX_CANDIDATES {
                    return None;
                }
                found.push(c);
            }
        }
        Some(found)
    }

    fn moved(&self, ob: &Bounds, pb: &Bounds) -> Vec<usize> {
        (0..5)
            .filter(|&k| ob.at[k] != NONE && !self.corresponds(ob.at[k], pb.at[k]))
            .collect()
    }

    fn check_clause(&mut self, index: usize, ob: &Bounds, bounds: &[Bounds]) {
        let count = ob.count();
        let unmatched = |s: &mut Self| s.stats.skip(Unchecked::ClauseUnmatched, count);
        let Some(by_handler) = self.candidates(ob, HANDLER_START, &self.by_handler, bounds) else {
            return unmatched(self);
        };
        let pick = if by_handler.is_empty() {
            // The handler start may be what moved: the one clause whose other boundaries all
            // correspond.
            let Some(by_try) = self.candidates(ob, 0, &self.by_try, bounds) else {
                return unmatched(self);
            };
            let fits: Vec<u32> = by_try
                .into_iter()
                .filter(|&c| self.moved(ob, &bounds[c as usize]) == [HANDLER_START])
                .collect();
            match fits[..] {
                [one] => one,
                _ => return unmatched(self),
            }
        } else if by_handler
            .iter()
            .any(|&c| self.moved(ob, &bounds[c as usize]).is_empty())
        {
            self.stats.boundaries_checked += count;
            return;
        } else {
            match by_handler[..] {
                [one] => one,
                _ => return unmatched(self),
            }
        };
        self.stats.boundaries_checked += count;
        let pb = &bounds[pick as usize];
        for k in self.moved(ob, pb) {
            let (lo, hi) = self.expected(ob.at[k]);
            let message = format!(
                "{} of the {} clause copied from clause {index} of the original is at IL_{:04x}, \
                 but the original's IL_{:04x} corresponds to {} here: the region now covers \
                 different original code",
                BOUNDARY_NAMES[k],
                kind_name(ob.kind),
                pb.off[k],
                ob.off[k],
                range(lo, hi)
            );
            // The patched clause is the one the table shows; the original's is in the message.
            self.diags.push(Diagnostic {
                code: Code::ClauseBoundaryMoved,
                offset: pb.off[k],
                message,
                detail: super::Detail::clause(pb.clause, None),
            });
        }
    }
}

/// Clears `forced[i]` of a matched original instruction `i` unless the leftmost and the
/// rightmost embedding of the matched keys put its pair where it is: the original keys into
/// the patched body (`INTO_PATCHED`), or the patched keys into the original. `runs` are the
/// pairs as diagonal runs.
fn embed<const INTO_PATCHED: bool>(runs: &[Run], o: &[Key], p: &[Key], forced: &mut [bool]) {
    let (into, of) = if INTO_PATCHED { (p, o) } else { (o, p) };
    // Pair q of run r: its place in `into`, its key, its original index.
    let pair = |r: &Run, q: u32| {
        let (i, j) = (r.i + q, r.j + q);
        if INTO_PATCHED {
            (j as usize, of[i as usize], i as usize)
        } else {
            (i as usize, of[j as usize], i as usize)
        }
    };
    // A run embeds where it is once its first pair does (leftmost) or its last (rightmost):
    // each next key is the very next one. So a run is settled whole unless that pair moves.
    let mut at = 0usize;
    'left: for r in runs {
        for q in 0..r.len {
            let (mine, key, i) = pair(r, q);
            let Some(k) = into[at..].iter().position(|k| *k == key) else {
                forced[i..].iter_mut().for_each(|f| *f = false);
                break 'left;
            };
            at += k;
            forced[i] &= at == mine;
            at += 1;
            if q == 0 && at == mine + 1 {
                at = pair(r, r.len - 1).0 + 1;
                break;
            }
        }
    }
    let mut end = into.len();
    'right: for r in runs.iter().rev() {
        for q in (0..r.len).rev() {
            let (mine, key, i) = pair(r, q);
            let Some(k) = into[..end].iter().rposition(|k| *k == key) else {
                forced[..=i].iter_mut().for_each(|f| *f = false);
                break 'right;
            };
            forced[i] &= k == mine;
            end = k;
            if q == r.len - 1 && k == mine {
                end = pair(r, 0).0;
                break;
            }
        }
    }
}

/// Whether `code` may hold a branch, `leave` or `switch`: false only when every instruction is
/// a one-byte one that is none of them (by the decoder's tables alone, so this is fast);
/// two-byte opcodes, `switch`, undefined bytes and code that runs past its end say true.
fn maybe_targets(code: &[u8]) -> bool {
    let mut pos = 0;
    while pos < code.len() {
        let b = code[pos] as usize;
        let len = FAST_LEN[b] as usize;
        if len == 0 || DECODE.one[b].operand.is_branch() {
            return true;
        }
        pos += len;
    }
    pos != code.len()
}

/// The targets (byte offsets, which may lie outside the code) of the branch, `leave` or
/// `switch` at `start` in `code` whose next instruction is at `next`, into `out`; none for
/// another instruction. The instruction decoded before, so its operand is in the code.
fn targets_at(code: &[u8], start: usize, next: usize, out: &mut Vec<i64>) {
    out.clear();
    let int = |at: usize| -> Option<i64> {
        let b = code.get(at..at.checked_add(4)?)?;
        Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
    };
    let Some(&first) = code.get(start) else {
        return;
    };
    let next_i = next as i64;
    match DECODE.one[first as usize].operand {
        OperandKind::ShortBrTarget => {
            if let Some(&d) = code.get(next.wrapping_sub(1)) {
                out.push(next_i + d as i8 as i64);
            }
        }
        OperandKind::BrTarget => {
            if let Some(d) = next.checked_sub(4).and_then(int) {
                out.push(next_i + d);
            }
        }
        OperandKind::Switch => {
            let mut at = start + 5;
            while at < next {
                match int(at) {
                    Some(d) => out.push(next_i + d),
                    None => return,
                }
                at += 4;
            }
        }
        OperandKind::None
        | OperandKind::ShortI
        | OperandKind::I
        | OperandKind::I8
        | OperandKind::ShortR
        | OperandKind::R
        | OperandKind::ShortLocal
        | OperandKind::ShortArg
        | OperandKind::Local
        | OperandKind::Arg
        | OperandKind::Tok
        | OperandKind::Type
        | OperandKind::Field
        | OperandKind::Method
        | OperandKind::String
        | OperandKind::Sig => {}
    }
}

fn kind_name(kind: ClauseKind) -> &'static str {
    match kind {
        ClauseKind::Catch => "catch",
        ClauseKind::Filter => "filter",
        ClauseKind::Finally => "finally",
        ClauseKind::Fault => "fault",
        ClauseKind::Invalid => "invalid",
    }
}

fn range(lo: u32, hi: u32) -> String {
    if lo == hi {
        format!("IL_{lo:04x}")
    } else {
        format!("IL_{lo:04x}…IL_{hi:04x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::Opcode::*;

    /// An instruction of a test body: branch targets are instruction indices (the count for
    /// the end of the code).
    #[derive(Clone, Debug)]
    enum A {
        Op(Opcode),
        Tok(Opcode, u32),
        I(Opcode, Operand<'static>),
        J(Opcode, usize),
        Sw(Vec<usize>),
    }
    use A::{J, Op, Sw, Tok};

    fn size(a: &A) -> u32 {
        match a {
            Op(op) | Tok(op, _) | A::I(op, _) | J(op, _) => {
                (op.size() + op.operand_kind().fixed_size().unwrap_or(0)) as u32
            }
            Sw(cases) => 5 + 4 * cases.len() as u32,
        }
    }

    /// The code and the offset of every instruction (and of the end).
    fn asm(items: &[A]) -> (Vec<u8>, Vec<u32>) {
        let mut offs = vec![0u32];
        for a in items {
            offs.push(offs.last().unwrap() + size(a));
        }
        let mut code = Vec::new();
        for (k, a) in items.iter().enumerate() {
            let next = offs[k + 1] as i64;
            let disp = |t: usize| (offs[t] as i64 - next) as i32;
            let (op, operand) = match a {
                Op(op) => (*op, Operand::None),
                Tok(op, t) => (*op, Operand::Token(*t)),
                A::I(op, operand) => (*op, operand.clone()),
                J(op, t) if op.operand_kind() == OperandKind::ShortBrTarget => {
                    (*op, Operand::ShortBranch(disp(*t) as i8))
                }
                J(op, t) => (*op, Operand::Branch(disp(*t))),
                Sw(cases) => (
                    Switch,
                    Operand::Switch(crate::instr::SwitchTargets::Owned(
                        cases.iter().map(|&t| disp(t)).collect(),
                    )),
                ),
            };
            crate::instr::encode(op, &operand, &mut code).unwrap();
        }
        (code, offs)
    }

    /// A clause over instruction indices: try [ts, te), handler [hs, he).
    fn clause(
        offs: &[u32],
        flags: u32,
        (ts, te): (usize, usize),
        (hs, he): (usize, usize),
    ) -> Clause {
        Clause {
            flags,
            try_offset: offs[ts],
            try_length: offs[te] - offs[ts],
            handler_offset: offs[hs],
            handler_length: offs[he] - offs[hs],
            class_or_filter: if flags == 0 { 0x0100_0001 } else { 0 },
        }
    }

    const CALL_A: u32 = 0x0A00_0001;
    const CALL_B: u32 = 0x0A00_0002;
    const CALL_C: u32 = 0x0A00_0003;
    const PROBE: u32 = 0x0A00_0099;

    fn compare(
        a: &[A],
        ac: &dyn Fn(&[u32]) -> Vec<Clause>,
        b: &[A],
        bc: &dyn Fn(&[u32]) -> Vec<Clause>,
    ) -> (Vec<(Code, u32)>, AlignStats) {
        let (oc, oo) = asm(a);
        let (pc, po) = asm(b);
        let mut al = Aligner::new();
        let found = al
            .compare_code(&oc, &ac(&oo), &pc, &bc(&po))
            .iter()
            .map(|d| (d.code, d.offset))
            .collect();
        (found, al.stats().clone())
    }

    fn none(_: &[u32]) -> Vec<Clause> {
        Vec::new()
    }

    fn clean(a: &[A], b: &[A]) -> AlignStats {
        let (found, stats) = compare(a, &none, b, &none);
        assert_eq!(found, [], "{stats:?}");
        stats
    }

    /// A loop over calls: `i = 0; do { A(); B(); } while (i < 10); C(); return`.
    fn looped() -> Vec<A> {
        vec![
            Op(Ldc_I4_0),                      // 0
            Op(Stloc_0),                       // 1
            Tok(Call, CALL_A),                 // 2 (loop head)
            Tok(Call, CALL_B),                 // 3
            Op(Ldloc_0),                       // 4
            Op(Ldc_I4_1),                      // 5
            Op(Add),                           // 6
            Op(Stloc_0),                       // 7
            Op(Ldloc_0),                       // 8
            A::I(Ldc_I4_S, Operand::Int8(10)), // 9
            J(Blt_S, 2),                       // 10
            Tok(Call, CALL_C),                 // 11
            Op(Ret),                           // 12
        ]
    }

    #[test]
    fn the_fast_decoder_gives_the_instruction_decoder_keys() {
        // Every one- and two-byte opcode with operand bytes after it, and cut short.
        let mut side = Side::default();
        for first in [None, Some(0xFEu8)] {
            for b in 0..=255u8 {
                let mut code: Vec<u8> = first.into_iter().chain([b]).collect();
                code.extend_from_slice(&[2, 0, 0, 0, 0x80, 0xFF, 0x01, 0x02, 0x03, 0x04]);
                for len in 0..=code.len() {
                    let code = &code[..len];
                    let decoded: Result<Vec<Instruction<'_>>, _> =
                        crate::instr::Instructions::new(code).collect();
                    let loaded = side.load(code);
                    assert_eq!(loaded, decoded.is_ok(), "{code:02x?}");
                    if let Ok(all) = decoded {
                        let keys: Vec<Key> = all.iter().map(key).collect();
                        let offs: Vec<u32> = all.iter().map(|i| i.offset).collect();
                        assert_eq!(side.keys, keys, "{code:02x?}");
                        assert_eq!(&side.offs[..offs.len()], offs, "{code:02x?}");
                        assert_eq!(side.offs.last(), Some(&(len as u32)));
                    }
                }
            }
        }
    }

    /// A small deterministic generator for the randomized tests.
    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn certain_copies_and_spans_agree_with_their_definitions() {
        // Random bodies over a few keys, and patched ones with keys inserted, removed and
        // replaced; the certain pairs must be kept by every leftmost and rightmost embedding
        // (computed naively here), and the spans must be the positions no certain copy
        // separates from t.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let k = |v: u64| Key {
            family: Opcode::Call,
            operand: v,
        };
        for round in 0..3000 {
            let n = 1 + (rng(&mut seed) % 40) as usize;
            let alphabet = 2 + rng(&mut seed) % if round % 2 == 0 { 4 } else { 60 };
            let o: Vec<Key> = (0..n).map(|_| k(rng(&mut seed) % alphabet)).collect();
            let mut p = Vec::new();
            for key in &o {
                match rng(&mut seed) % 10 {
                    0 => p.push(k(rng(&mut seed) % alphabet)),
                    1 => {}
                    2 => {
                        p.push(k(rng(&mut seed) % alphabet));
                        p.push(*key);
                    }
                    _ => p.push(*key),
                }
            }
            let mut al = Aligner::new();
            al.o.keys = o.clone();
            al.p.keys = p.clone();
            al.p.offs = (0..=p.len() as u32).collect();
            al.align();
            al.certainty();
            let pairs: Vec<(usize, usize)> = al
                .certain
                .iter()
                .flat_map(|r| (0..r.len).map(move |q| ((r.i + q) as usize, (r.j + q) as usize)))
                .collect();
            for w in pairs.windows(2) {
                assert!(w[0].0 < w[1].0 && w[0].1 < w[1].1, "{pairs:?}");
            }
            for &(i, j) in &pairs {
                assert_eq!(o[i], p[j]);
            }
            // Naive embeddings of every matched pair.
            let matched: Vec<(usize, usize)> = al
                .matched
                .iter()
                .enumerate()
                .filter(|&(_, &j)| j != NONE)
                .map(|(i, &j)| (i, j as usize))
                .collect();
            let embeds = |keys: Vec<Key>, into: &[Key]| {
                let mut left = Vec::new();
                let mut at = 0;
                for key in &keys {
                    while into[at] != *key {
                        at += 1;
                    }
                    left.push(at);
                    at += 1;
                }
                let mut right = vec![0; keys.len()];
                let mut end = into.len();
                for (r, key) in keys.iter().enumerate().rev() {
                    end -= 1;
                    while into[end] != *key {
                        end -= 1;
                    }
                    right[r] = end;
                }
                (left, right)
            };
            let (lp, rp) = embeds(matched.iter().map(|&(i, _)| o[i]).collect(), &p);
            let (lo_, ro) = embeds(matched.iter().map(|&(_, j)| p[j]).collect(), &o);
            let naive: Vec<(usize, usize)> = matched
                .iter()
                .enumerate()
                .filter(|&(r, &(i, j))| lp[r] == j && rp[r] == j && lo_[r] == i && ro[r] == i)
                .map(|(_, &pair)| pair)
                .collect();
            assert_eq!(pairs, naive, "{o:?} {p:?}");
            for t in 0..=n as u32 {
                for x in 0..=p.len() as u32 {
                    let separated = pairs.iter().any(|&(i, j)| {
                        ((j as u32) < x && i as u32 >= t) || (j as u32 >= x && (i as u32) < t)
                    });
                    assert_eq!(al.corresponds(t, x), !separated, "t {t} x {x} {pairs:?}");
                }
            }
        }
    }

    #[test]
    fn arbitrary_bodies_and_clauses_never_panic() {
        // Random code (often undecodable), copies of it with bytes changed, and random clauses
        // over both: every comparison ends, with findings only of the two alignment codes.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut al = Aligner::new();
        let valid = [
            0x00u8, 0x02, 0x06, 0x0A, 0x16, 0x2A, 0x2B, 0x2C, 0x38, 0x45, 0x58, 0xDD,
        ];
        for _ in 0..20_000 {
            let n = (rng(&mut seed) % 48) as usize;
            let code: Vec<u8> = (0..n)
                .map(|_| {
                    let r = rng(&mut seed);
                    if r.is_multiple_of(3) {
                        r as u8 >> 3
                    } else {
                        valid[(r >> 8) as usize % valid.len()]
                    }
                })
                .collect();
            let mut patched = code.clone();
            for _ in 0..rng(&mut seed) % 4 {
                if !patched.is_empty() {
                    let at = (rng(&mut seed) as usize) % patched.len();
                    patched[at] = rng(&mut seed) as u8;
                }
            }
            if rng(&mut seed).is_multiple_of(2) {
                patched.insert(0, 0x00);
            }
            let clause = |seed: &mut u64| Clause {
                flags: (rng(seed) % 5) as u32,
                try_offset: (rng(seed) % 50) as u32,
                try_length: (rng(seed) % 50) as u32,
                handler_offset: (rng(seed) % 50) as u32,
                handler_length: (rng(seed) % 50) as u32,
                class_or_filter: (rng(seed) % 50) as u32,
            };
            let oc: Vec<Clause> = (0..rng(&mut seed) % 3).map(|_| clause(&mut seed)).collect();
            let pc: Vec<Clause> = (0..rng(&mut seed) % 3).map(|_| clause(&mut seed)).collect();
            for d in al.compare_code(&code, &oc, &patched, &pc) {
                assert!(
                    matches!(d.code, Code::BranchRetargeted | Code::ClauseBoundaryMoved),
                    "{d:?}"
                );
            }
        }
    }

    #[test]
    fn index_of_finds_every_instruction_start_and_nothing_else() {
        let mut seed = 0x1234_5678_9ABC_DEF1u64;
        for _ in 0..300 {
            let n = (rng(&mut seed) % 60) as usize;
            let mut side = Side::default();
            let mut at = 0u32;
            for _ in 0..n {
                side.offs.push(at);
                at += 1
                    + (rng(&mut seed)
                        % if rng(&mut seed).is_multiple_of(4) {
                            40
                        } else {
                            5
                        }) as u32;
            }
            side.offs.push(at);
            for off in -3..at as i64 + 4 {
                let want = side
                    .offs
                    .iter()
                    .position(|&o| o as i64 == off)
                    .map(|k| k as u32);
                assert_eq!(side.index_of(off), want, "{off} in {:?}", side.offs);
            }
        }
    }

    #[test]
    fn macro_and_general_forms_share_a_key() {
        let k = |op, operand| {
            key(&Instruction {
                offset: 0,
                opcode: op,
                operand,
            })
        };
        let one = k(Ldc_I4_1, Operand::None);
        assert_eq!(one, k(Ldc_I4_S, Operand::Int8(1)));
        assert_eq!(one, k(Ldc_I4, Operand::Int32(1)));
        assert_ne!(one, k(Ldc_I4, Operand::Int32(2)));
        assert_eq!(k(Ldc_I4_M1, Operand::None), k(Ldc_I4_S, Operand::Int8(-1)));
        assert_eq!(k(Ldarg_0, Operand::None), k(Ldarg, Operand::Var(0)));
        assert_ne!(k(Ldarg_0, Operand::None), k(Ldloc, Operand::Var(0)));
        assert_eq!(
            k(Br_S, Operand::ShortBranch(5)),
            k(Br, Operand::Branch(-900))
        );
        assert_ne!(
            k(Br_S, Operand::ShortBranch(5)),
            k(Leave, Operand::Branch(5))
        );
        assert_ne!(k(Call, Operand::Token(1)), k(Call, Operand::Token(2)));
    }

    #[test]
    fn identical_and_widened_bodies_align_completely() {
        let stats = clean(&looped(), &looped());
        assert!(stats.complete(), "{stats:?}");
        assert_eq!((stats.certain, stats.targets_checked), (13, 1));
        let mut wide = looped();
        wide[10] = J(Blt, 2);
        wide[9] = A::I(Ldc_I4, Operand::Int32(10));
        let stats = clean(&looped(), &wide);
        assert!(stats.complete(), "{stats:?}");
    }

    #[test]
    fn a_prologue_is_not_a_finding_wherever_branches_to_the_start_land() {
        let body = looped();
        // The loop head is instruction 2: branch to the start instead.
        let mut o = body.clone();
        o[10] = J(Blt_S, 0);
        let prologue = [Tok(Ldstr, 0x7000_0001), Tok(Call, PROBE)];
        for stay_on_old in [true, false] {
            let mut p: Vec<A> = prologue.to_vec();
            p.extend(o.iter().cloned());
            p[12] = J(Blt_S, if stay_on_old { 2 } else { 0 });
            let stats = clean(&o, &p);
            assert!(stats.complete(), "{stats:?}");
        }
    }

    #[test]
    fn a_nop_prologue_before_a_nop_is_ambiguous_not_a_finding() {
        let o = vec![Op(Nop), Tok(Call, CALL_A), J(Br_S, 0)];
        // The new nop first, the branch kept on the original one (the second).
        let p = vec![Op(Nop), Op(Nop), Tok(Call, CALL_A), J(Br_S, 1)];
        let stats = clean(&o, &p);
        assert_eq!(stats.certain, 2, "{stats:?}");
        // Landing after the call is a finding: the call's copy lies between.
        let bad = vec![Op(Nop), Op(Nop), Tok(Call, CALL_A), J(Br_S, 3)];
        let (found, _) = compare(&o, &none, &bad, &none);
        assert_eq!(found, [(Code::BranchRetargeted, 7)]);
    }

    #[test]
    fn epilogues_and_replaced_returns_are_not_findings() {
        // if (x) { A(); return; } B(); return;
        let o = vec![
            Op(Ldarg_0),       // 0
            J(Brfalse_S, 4),   // 1
            Tok(Call, CALL_A), // 2
            Op(Ret),           // 3
            Tok(Call, CALL_B), // 4
            Op(Ret),           // 5
        ];
        // The last ret shared: epilogue before it (branches to it reach the epilogue), the
        // other ret a branch to the epilogue.
        let shared = vec![
            Op(Ldarg_0),
            J(Brfalse_S, 4),
            Tok(Call, CALL_A),
            J(Br_S, 5),
            Tok(Call, CALL_B),
            Tok(Call, PROBE),
            Op(Ret),
        ];
        clean(&o, &shared);
        // The body ends with a throw: every ret becomes a branch to an appended epilogue.
        let mut o2 = o.clone();
        o2[5] = Op(Throw);
        let appended = vec![
            Op(Ldarg_0),
            J(Brfalse_S, 4),
            Tok(Call, CALL_A),
            J(Br_S, 6),
            Tok(Call, CALL_B),
            Op(Throw),
            Tok(Call, PROBE),
            Op(Ret),
        ];
        clean(&o2, &appended);
        // A branch to a `ret` that became stloc + leave to an exit block.
        let o3 = vec![
            Op(Ldarg_0),    // 0
            J(Brtrue_S, 4), // 1
            Op(Ldc_I4_0),   // 2
            J(Br_S, 5),     // 3
            Op(Ldc_I4_1),   // 4
            Op(Ret),        // 5
        ];
        let wrapped = vec![
            Op(Ldarg_0),
            J(Brtrue_S, 4),
            Op(Ldc_I4_0),
            J(Br_S, 5),
            Op(Ldc_I4_1),
            Op(Stloc_1),      // 5: the ret's replacement
            J(Leave_S, 9),    // 6
            Tok(Call, PROBE), // 7: finally
            Op(Endfinally),   // 8
            Op(Ldloc_1),      // 9: exit
            Op(Ret),          // 10
        ];
        let fin = |offs: &[u32]| vec![clause(offs, 2, (0, 7), (7, 9))];
        let (found, stats) = compare(&o3, &none, &wrapped, &fin);
        assert_eq!(found, [], "{stats:?}");
    }

    #[test]
    fn nop_padding_moves_targets_and_boundaries_onto_inserted_code() {
        // try { A(); leave END } catch { pop; leave END } END: ret, with a loop to A.
        let o = vec![
            Tok(Call, CALL_A), // 0
            J(Leave_S, 5),     // 1
            Op(Pop),           // 2
            J(Leave_S, 5),     // 3
            Op(Nop),           // 4 (unreachable)
            Op(Ret),           // 5
        ];
        let oc = |offs: &[u32]| vec![clause(offs, 0, (0, 2), (2, 4))];
        let mut p = Vec::new();
        for a in &o {
            p.push(Op(Nop));
            p.push(match a {
                J(op, t) => J(*op, 2 * t),
                other => other.clone(),
            });
        }
        let pc = |offs: &[u32]| vec![clause(offs, 0, (0, 4), (4, 8))];
        let (found, stats) = compare(&o, &oc, &p, &pc);
        assert_eq!(found, [], "{stats:?}");
        assert_eq!((stats.targets_checked, stats.boundaries_checked), (2, 4));
    }

    #[test]
    fn a_retargeted_branch_is_reported_at_its_patched_offset() {
        let o = looped();
        let mut p = vec![Op(Nop)];
        p.extend(o.iter().cloned());
        // The loop's branch lands one instruction late (on B() instead of A()).
        p[11] = J(Blt_S, 4);
        let (found, stats) = compare(&o, &none, &p, &none);
        let (_, offs) = asm(&p);
        assert_eq!(found, [(Code::BranchRetargeted, offs[11])], "{stats:?}");
        // And on the inserted nop before the whole body: not the loop head's neighbour.
        p[11] = J(Blt_S, 0);
        let (found, _) = compare(&o, &none, &p, &none);
        assert_eq!(found, [(Code::BranchRetargeted, offs[11])]);
    }

    #[test]
    fn every_switch_case_is_checked() {
        let o = vec![
            Op(Ldarg_0),       // 0
            Sw(vec![2, 3, 4]), // 1
            Tok(Call, CALL_A), // 2
            Tok(Call, CALL_B), // 3
            Tok(Call, CALL_C), // 4
            Op(Ret),           // 5
        ];
        let mut p = o.clone();
        p[1] = Sw(vec![2, 4, 4]);
        let (found, stats) = compare(&o, &none, &p, &none);
        let (_, offs) = asm(&p);
        assert_eq!(found, [(Code::BranchRetargeted, offs[1])]);
        assert_eq!(stats.targets_checked, 3);
    }

    #[test]
    fn a_moved_clause_boundary_is_reported() {
        // try { A(); B(); leave END } finally { C(); endfinally } END: ret
        let o = vec![
            Tok(Call, CALL_A), // 0
            Tok(Call, CALL_B), // 1
            J(Leave_S, 5),     // 2
            Tok(Call, CALL_C), // 3
            Op(Endfinally),    // 4
            Op(Ret),           // 5
        ];
        let oc = |offs: &[u32]| vec![clause(offs, 2, (0, 3), (3, 5))];
        let (_, offs) = asm(&o);
        // Try start one instruction late: A() is outside the try.
        let late = |offs: &[u32]| vec![clause(offs, 2, (1, 3), (3, 5))];
        let (found, _) = compare(&o, &oc, &o, &late);
        assert_eq!(found, [(Code::ClauseBoundaryMoved, offs[1])]);
        // Handler end one instruction early, and (separately) the handler start one late,
        // with the try end left alone.
        let early = |offs: &[u32]| vec![clause(offs, 2, (0, 3), (3, 4))];
        let (found, _) = compare(&o, &oc, &o, &early);
        assert_eq!(found, [(Code::ClauseBoundaryMoved, offs[4])]);
        let handler = |offs: &[u32]| vec![clause(offs, 2, (0, 3), (4, 5))];
        let (found, _) = compare(&o, &oc, &o, &handler);
        assert_eq!(found, [(Code::ClauseBoundaryMoved, offs[4])]);
        // A new outer clause and a prologue outside it are no findings.
        let mut p = vec![Tok(Call, PROBE)];
        p.extend(o.iter().cloned().map(|a| match a {
            J(op, t) => J(op, t + 1),
            a => a,
        }));
        p[6] = J(Leave_S, 9);
        p.extend([Op(Endfinally), Op(Endfinally), Op(Ret)]);
        let pc = |offs: &[u32]| {
            vec![
                clause(offs, 2, (1, 4), (4, 6)),
                clause(offs, 2, (1, 7), (7, 9)),
            ]
        };
        let (found, stats) = compare(&o, &oc, &p, &pc);
        assert_eq!(found, [], "{stats:?}");
        assert_eq!(stats.boundaries_checked, 4);
    }

    #[test]
    fn a_rewritten_body_is_not_aligned() {
        let o = looped();
        let p = vec![Op(Pop), Op(Ret)];
        let (found, stats) = compare(&o, &none, &p, &none);
        assert_eq!(found, []);
        assert_eq!(stats.not_aligned, Some(Unchecked::TooDifferent));
        let mut al = Aligner::new();
        assert_eq!(al.compare_code(&[0xFE], &[], &[0x2A], &[]), []);
        assert_eq!(al.stats().not_aligned, Some(Unchecked::Undecodable));
    }

    #[test]
    fn a_tie_between_alignments_is_not_a_finding() {
        // `ret` and `rethrow` trade places: either could be the copy.
        let o = vec![
            Op(Ldarg_0),    // 0
            J(Brtrue_S, 3), // 1
            Op(Ret),        // 2
            Op(Rethrow),    // 3
        ];
        let p = vec![
            Op(Ldarg_0),
            J(Brtrue_S, 3),
            J(Br_S, 4),
            Op(Rethrow),
            Op(Ret),
        ];
        clean(&o, &p);
    }

    #[test]
    fn moved_code_is_left_unchecked() {
        // Two long blocks of unique calls swap places; a branch into the moved one.
        let block = |base: u32| (0..40).map(move |k| Tok(Call, base + k));
        let mut o = vec![Op(Ldarg_0), J(Brtrue, 42)];
        o.extend(block(0x0A00_1000));
        o.extend(block(0x0A00_2000));
        o.push(Op(Ret));
        let mut p = vec![Op(Ldarg_0), J(Brtrue, 2)];
        p.extend(block(0x0A00_2000));
        p.extend(block(0x0A00_1000));
        p.push(Op(Ret));
        let (found, stats) = compare(&o, &none, &p, &none);
        assert_eq!(found, [], "{stats:?}");
        assert!(!stats.complete());
    }

    #[test]
    fn a_small_moved_block_is_left_unchecked() {
        // B() C() moved after the return; a branch into them lands on their new place.
        let o = vec![
            Op(Ldarg_0),          // 0
            J(Brtrue_S, 3),       // 1
            Tok(Call, CALL_A),    // 2
            Tok(Call, CALL_B),    // 3
            Tok(Call, CALL_C),    // 4
            Tok(Call, PROBE),     // 5
            Tok(Call, PROBE + 1), // 6
            Tok(Call, PROBE + 2), // 7
            Op(Ret),              // 8
        ];
        let p = vec![
            Op(Ldarg_0),
            J(Brtrue_S, 8),
            Tok(Call, CALL_A),
            J(Br_S, 8),
            Tok(Call, PROBE),
            Tok(Call, PROBE + 1),
            Tok(Call, PROBE + 2),
            Op(Ret),
            Tok(Call, CALL_B),
            Tok(Call, CALL_C),
            J(Br_S, 4),
        ];
        // The moved block leads back to where the original's C() fell through to.
        let (found, stats) = compare(&o, &none, &p, &none);
        assert_eq!(found, [], "{stats:?}");
        assert_eq!(stats.certain, 7, "{stats:?}");
        assert!(stats.complete(), "{stats:?}");
        // Control leaves the moved block otherwise: nothing certain is known.
        let mut p = p;
        p[10] = Op(Ret);
        let (found, stats) = compare(&o, &none, &p, &none);
        assert_eq!(found, [], "{stats:?}");
        assert_eq!(stats.unchecked[Unchecked::LandingUncertain.index()], 1);
    }

    #[test]
    fn a_trampoline_to_the_target_is_not_a_finding_but_one_to_elsewhere_is() {
        // The loop's branch goes to code appended at the end that counts the hit and jumps
        // back to the loop head.
        let o = looped();
        let mut p = o.clone();
        p[10] = J(Blt_S, 13);
        p.extend([Tok(Call, PROBE), J(Br_S, 2)]);
        let stats = clean(&o, &p);
        assert_eq!(stats.targets_checked, 1);
        p[14] = J(Br_S, 3);
        let (found, _) = compare(&o, &none, &p, &none);
        let (_, offs) = asm(&p);
        assert_eq!(found, [(Code::BranchRetargeted, offs[10])]);
    }

    #[test]
    fn hostile_stretches_end_quickly() {
        let start = std::time::Instant::now();
        let call = |k: u32| Tok(Call, 0x0A00_0000 + k);
        // One original instruction against 200k others, none the same; then 100k repeated
        // keys against 100k shifted and changed ones; then no unique key on either side.
        let cases: Vec<(Vec<A>, Vec<A>)> = vec![
            (vec![call(1)], (0..200_000).map(|_| Op(Nop)).collect()),
            (
                (0..100_000).map(|k| call(k % 3)).collect(),
                (0..100_000).map(|k| call((k + 1) % 4)).collect(),
            ),
            (
                (0..50_000).flat_map(|_| [Op(Ldc_I4_0), Op(Pop)]).collect(),
                (0..50_000)
                    .flat_map(|_| [Op(Pop), Op(Ldc_I4_0), Op(Dup)])
                    .collect(),
            ),
        ];
        for (o, p) in &cases {
            // A branch each, so that there is something to align for.
            let (mut o, mut p) = (o.clone(), p.clone());
            o.push(J(Br, 0));
            p.push(J(Br, 0));
            let (found, stats) = compare(&o, &none, &p, &none);
            assert_eq!(found, [], "{stats:?}");
        }
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    }

    #[test]
    fn large_bodies_align_in_linear_time() {
        // 200k instructions: unique calls with a loop back every 10; a prologue, a nop every
        // 1000 instructions, and one branch that lands one instruction late.
        let n = 200_000usize;
        let mut o = Vec::with_capacity(n);
        for k in 0..n {
            o.push(if k % 10 == 9 {
                J(Brtrue, k - 9)
            } else {
                Tok(Call, 0x0A00_0000 + k as u32)
            });
        }
        o.push(Op(Ret));
        let mut p = vec![Tok(Call, PROBE)];
        let mut at = vec![0usize; o.len()];
        for (k, a) in o.iter().enumerate() {
            if k % 1000 == 500 {
                p.push(Op(Nop));
            }
            at[k] = p.len();
            p.push(a.clone());
        }
        for a in p.iter_mut() {
            if let J(_, t) = a {
                *t = at[*t];
            }
        }
        let victim = at[100_009];
        p[victim] = J(Brtrue, at[100_001]);
        let start = std::time::Instant::now();
        let (found, stats) = compare(&o, &none, &p, &none);
        let (_, offs) = asm(&p);
        assert_eq!(found, [(Code::BranchRetargeted, offs[victim])], "{stats:?}");
        assert!(stats.complete(), "{stats:?}");
        assert_eq!(stats.targets_checked, 20_000);
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    }
}
