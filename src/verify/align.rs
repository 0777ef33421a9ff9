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
//! The two instruction streams are aligned in the manner of patience diff, each stretch in
//! turn: its common prefix and suffix are matched; a stretch of at most [`DP_CELLS`] cells is
//! aligned exactly (longest common subsequence); a larger one is cut at the instructions that
//! occur exactly once on each side, keeping the longest chain of them in order, and each piece
//! is aligned the same way. A stretch with no such instruction, one whose unique instructions
//! disagree on their order as much as they agree (code moved), and anything past a work bound
//! linear in the bodies' sizes is left unaligned: its instructions get no copy, so nothing
//! inside it is checked, and the method counts as checked in part.
//!
//! # Certain copies
//!
//! Only copies no plausible alignment disputes are used. In an exactly aligned stretch, a pair
//! is kept when every longest common subsequence matches the original instruction, always to
//! the same patched one. Over the whole body, a pair is kept when the matched original
//! instructions embed into the patched body (and the matched patched ones into the original)
//! only one way at that place: the leftmost and rightmost embeddings agree. So a `nop`
//! prologue in front of a body that starts with `nop` leaves that first `nop` without a certain
//! copy. When fewer than half of the original's instructions have a certain copy, the method is
//! not aligned at all ([`Unchecked::TooDifferent`]).
//!
//! # Findings
//!
//! Certain copies cut the patched body into stretches. An original position `t` (an
//! instruction, or the end of the code) and a patched position `x` *correspond* when no certain
//! copy lies between them: every certain copy before `x` is of an instruction before `t`, and
//! every certain copy at or after `x` is of `t` or an instruction after it. So a position may
//! move over inserted or replaced code, but never across code both bodies share.
//!
//! - [`Code::BranchRetargeted`]: a branch, `leave` or `switch` case with a certain copy whose
//!   patched target does not correspond to its original target.
//! - [`Code::ClauseBoundaryMoved`]: a try start or end, handler start or end, or filter start
//!   of an original clause whose counterpart in the patched table does not correspond.
//!
//! What is not a finding follows from the rule: a branch that lands on code inserted right
//! before its target's copy (a prologue, an epilogue before a `ret`, a `nop`), or on the
//! replacement of a target that has no copy (a `ret` replaced by `br` or `stloc`+`leave` to an
//! epilogue); a short branch widened; a removed `tail.` prefix; a clause boundary moved over
//! inserted code next to it. Findings are never guessed: targets and boundaries that cannot be
//! compared are counted by [`Unchecked`] reason instead.

use super::{Code, Diagnostic, NONE};
use crate::body::{Body, Clause, ClauseKind};
use crate::instr::{Instruction, Instructions, Operand, decode_at};
use crate::opcode::{ALL, Flow, OpInfo, Opcode, OperandKind};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::LazyLock;

/// Stretches of at most this many cells (original instructions × patched instructions) are
/// aligned exactly, in time and memory proportional to the cells.
pub const DP_CELLS: usize = 4096;

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
    /// Fewer than half of the original's instructions have a certain copy in the patched body:
    /// the method was rewritten beyond alignment and is not aligned.
    TooDifferent,
    /// The method's match to its original is by token only (the names differ or cannot be
    /// read): it is not aligned.
    UncertainMatch,
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
    pub const ALL: [Unchecked; 9] = [
        Unchecked::Undecodable,
        Unchecked::TooDifferent,
        Unchecked::UncertainMatch,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// Families by encoding (low byte, plus 256 for `FE xx`), derived from the opcode table's
/// names: `<op>.s` is the short form of `<op>` (`br.s`, `ldarg.s`, `ldc.i4.s`), and `<op>.<n>`
/// or `<op>.m1` without an operand is `<op>` with the operand `n` or −1 (`ldloc.2`,
/// `ldc.i4.m1`), where `<op>` is an opcode that takes an operand.
static FAMILIES: LazyLock<[Family; 512]> = LazyLock::new(|| {
    let mut t = [Family {
        general: Opcode::Nop,
        implied: None,
    }; 512];
    for info in ALL {
        t[slot(info.opcode)] = family_by_name(info);
    }
    t
});

fn slot(op: Opcode) -> usize {
    let code = op.code();
    (code & 0xFF) as usize + if code >> 8 == 0xFE { 256 } else { 0 }
}

fn family_by_name(info: &OpInfo) -> Family {
    let own = Family {
        general: info.opcode,
        implied: None,
    };
    let Some((base, suffix)) = info.name.rsplit_once('.') else {
        return own;
    };
    let Some(general) = ALL
        .iter()
        .find(|i| i.name == base && i.operand != OperandKind::None)
    else {
        return own;
    };
    let implied = match suffix {
        "s" => {
            return Family {
                general: general.opcode,
                implied: None,
            };
        }
        "m1" => -1,
        n => match n.parse::<i32>() {
            Ok(v) => v,
            Err(_) => return own,
        },
    };
    if info.operand != OperandKind::None {
        return own;
    }
    Family {
        general: general.opcode,
        implied: Some(implied),
    }
}

/// The alignment key of an instruction.
pub fn key(ins: &Instruction<'_>) -> Key {
    let family = FAMILIES[slot(ins.opcode)];
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

/// Whether instructions of this family transfer to targets.
fn has_targets(family: Opcode) -> bool {
    match family.operand_kind() {
        OperandKind::ShortBrTarget | OperandKind::BrTarget | OperandKind::Switch => true,
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
        | OperandKind::Sig => false,
    }
}

/// One body's instructions: keys, and the offset of each (plus the code length at the end).
#[derive(Debug, Default)]
struct Side {
    keys: Vec<Key>,
    offs: Vec<u32>,
}

impl Side {
    /// Decodes `code`; false when it does not decode into whole instructions.
    fn load(&mut self, code: &[u8]) -> bool {
        self.keys.clear();
        self.offs.clear();
        let Ok(len) = u32::try_from(code.len()) else {
            return false;
        };
        for ins in Instructions::new(code) {
            let Ok(ins) = ins else { return false };
            self.offs.push(ins.offset);
            self.keys.push(key(&ins));
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

/// A stretch `o[a0..a1]` × `p[b0..b1]` still to align.
#[derive(Clone, Copy, Debug)]
struct Seg {
    a0: usize,
    a1: usize,
    b0: usize,
    b1: usize,
}

/// Occurrences of a key in a stretch: counts and last positions on each side.
#[derive(Clone, Copy, Debug, Default)]
struct Occ {
    o: u32,
    at_o: u32,
    p: u32,
    at_p: u32,
}

/// A clause with its boundaries as instruction positions.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    kind: ClauseKind,
    class: u32,
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
    fn of(c: &Clause, side: &Side) -> Option<Bounds> {
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
            kind,
            class: if kind == ClauseKind::Catch {
                c.class_or_filter
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
    /// Per original instruction: its certain copy, or [`NONE`].
    copy: Vec<u32>,
    /// Per patched instruction: the original instruction it is the certain copy of, or
    /// [`NONE`].
    origin: Vec<u32>,
    /// Per patched position `x` (0..=m): 1 + the original index of the last certain copy
    /// before `x`, or 0.
    before: Vec<u32>,
    /// Per patched position `x` (0..=m): the original index of the first certain copy at or
    /// after `x`, or n.
    after: Vec<u32>,
    segs: Vec<Seg>,
    occ: HashMap<Key, Occ>,
    pairs: Vec<(u32, u32)>,
    tails: Vec<u32>,
    links: Vec<u32>,
    fwd: Vec<u16>,
    bwd: Vec<u16>,
    left: Vec<u32>,
    right: Vec<u32>,
    bounds: Vec<Bounds>,
    by_handler: Vec<u32>,
    by_try: Vec<u32>,
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
        let oc: Vec<Clause> = original.clauses().copied().collect();
        let pc: Vec<Clause> = patched.clauses().copied().collect();
        self.compare_code(original.code, &oc, patched.code, &pc)
    }

    /// [`Self::compare`] on raw code and clauses.
    pub fn compare_code(
        &mut self,
        original: &[u8],
        original_clauses: &[Clause],
        patched: &[u8],
        patched_clauses: &[Clause],
    ) -> &[Diagnostic] {
        self.diags.clear();
        self.stats = AlignStats::default();
        if !self.o.load(original) || !self.p.load(patched) {
            self.stats.not_aligned = Some(Unchecked::Undecodable);
            return &self.diags;
        }
        let n = self.o.len();
        self.stats.instructions = n as u32;
        if n == 0 {
            return &self.diags;
        }
        self.align();
        self.certainty();
        let certain = self.copy.iter().filter(|&&j| j != NONE).count();
        self.stats.certain = certain as u32;
        if certain * 2 < n {
            self.stats.not_aligned = Some(Unchecked::TooDifferent);
            return &self.diags;
        }
        self.fill_positions();
        self.check_branches(original, patched);
        self.check_clauses(original_clauses, patched_clauses);
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
            if (s.a1 - s.a0).saturating_mul(s.b1 - s.b0) <= DP_CELLS {
                self.exact(s);
                continue;
            }
            let work = (s.a1 - s.a0) + (s.b1 - s.b0);
            if work > budget {
                self.stats.skip(Unchecked::Unanchored, 1);
                continue;
            }
            budget -= work;
            self.anchor(s);
        }
    }

    /// Cuts a stretch at the instructions occurring once on each side, in the longest chain
    /// that keeps their order, and queues the pieces between them.
    fn anchor(&mut self, s: Seg) {
        let (o, p) = (&self.o.keys, &self.p.keys);
        self.occ.clear();
        for (i, k) in o.iter().enumerate().take(s.a1).skip(s.a0) {
            let e = self.occ.entry(*k).or_default();
            e.o += 1;
            e.at_o = i as u32;
        }
        for (j, k) in p.iter().enumerate().take(s.b1).skip(s.b0) {
            if let Some(e) = self.occ.get_mut(k) {
                e.p += 1;
                e.at_p = j as u32;
            }
        }
        self.pairs.clear();
        for k in &o[s.a0..s.a1] {
            if let Some(e) = self.occ.get(k)
                && e.o == 1
                && e.p == 1
            {
                self.pairs.push((e.at_o, e.at_p));
            }
        }
        if self.pairs.is_empty() {
            self.stats.skip(Unchecked::Unanchored, 1);
            return;
        }
        // Longest chain increasing in the patched position (patience sorting): `tails[k]` is
        // the pair ending the best chain of length k + 1, `links` the predecessor of each pair.
        self.tails.clear();
        self.links.clear();
        for (idx, &(_, j)) in self.pairs.iter().enumerate() {
            let pos = self
                .tails
                .partition_point(|&t| self.pairs[t as usize].1 < j);
            self.links
                .push(if pos == 0 { NONE } else { self.tails[pos - 1] });
            if pos == self.tails.len() {
                self.tails.push(idx as u32);
            } else {
                self.tails[pos] = idx as u32;
            }
        }
        let chain = self.tails.len();
        let dropped = self.pairs.len() - chain;
        if chain <= 2 * dropped {
            self.stats.skip(Unchecked::Reordered, 1);
            return;
        }
        // Walk the chain back from its end, queueing the pieces after each anchor.
        let mut at = self.tails[chain - 1];
        let (mut a1, mut b1) = (s.a1, s.b1);
        loop {
            let (i, j) = self.pairs[at as usize];
            let (i, j) = (i as usize, j as usize);
            self.matched[i] = j as u32;
            self.segs.push(Seg {
                a0: i + 1,
                a1,
                b0: j + 1,
                b1,
            });
            (a1, b1) = (i, j);
            at = self.links[at as usize];
            if at == NONE {
                break;
            }
        }
        self.segs.push(Seg {
            a0: s.a0,
            a1,
            b0: s.b0,
            b1,
        });
    }

    /// Aligns a small stretch exactly, keeping only the pairs every longest common subsequence
    /// has.
    fn exact(&mut self, s: Seg) {
        let (o, p) = (&self.o.keys[s.a0..s.a1], &self.p.keys[s.b0..s.b1]);
        let (a, b) = (o.len(), p.len());
        let w = b + 1;
        let cells = (a + 1) * w;
        self.fwd.clear();
        self.fwd.resize(cells, 0);
        self.bwd.clear();
        self.bwd.resize(cells, 0);
        let (f, r) = (&mut self.fwd, &mut self.bwd);
        // f[i][j]: LCS of o[..i] and p[..j]; r[i][j]: LCS of o[i..] and p[j..].
        for i in 0..a {
            for j in 0..b {
                f[(i + 1) * w + j + 1] = if o[i] == p[j] {
                    f[i * w + j] + 1
                } else {
                    f[i * w + j + 1].max(f[(i + 1) * w + j])
                };
            }
        }
        for i in (0..a).rev() {
            for j in (0..b).rev() {
                r[i * w + j] = if o[i] == p[j] {
                    r[(i + 1) * w + j + 1] + 1
                } else {
                    r[(i + 1) * w + j].max(r[i * w + j + 1])
                };
            }
        }
        let best = f[a * w + b];
        for i in 0..a {
            let mut only = NONE;
            let mut ways = 0;
            let mut skippable = false;
            for j in 0..=b {
                // A path that passes row i without matching it.
                skippable |= f[i * w + j] + r[(i + 1) * w + j] == best;
                if j < b && o[i] == p[j] && f[i * w + j] + 1 + r[(i + 1) * w + j + 1] == best {
                    ways += 1;
                    only = j as u32;
                }
            }
            if ways == 1 && !skippable {
                self.matched[s.a0 + i] = s.b0 as u32 + only;
            }
        }
    }

    /// Keeps the matched pairs whose place no other embedding disputes, in `copy`.
    fn certainty(&mut self) {
        let (o, p) = (&self.o.keys, &self.p.keys);
        let n = o.len();
        self.copy.clear();
        self.copy.resize(n, NONE);
        self.pairs.clear();
        self.pairs.extend(
            self.matched
                .iter()
                .enumerate()
                .filter(|&(_, &j)| j != NONE)
                .map(|(i, &j)| (i as u32, j)),
        );
        let pairs = &self.pairs;
        // The matched original keys embedded into the patched body, leftmost and rightmost;
        // then the matched patched keys into the original.
        let mut forced = vec![true; pairs.len()];
        for (side, into) in [(true, p), (false, o)] {
            let of = |r: usize| {
                let (i, j) = pairs[r];
                if side { o[i as usize] } else { p[j as usize] }
            };
            let mine = |r: usize| {
                let (i, j) = pairs[r];
                if side { j } else { i }
            };
            self.left.clear();
            let mut at = 0usize;
            for r in 0..pairs.len() {
                while at < into.len() && into[at] != of(r) {
                    at += 1;
                }
                self.left.push(at as u32);
                at += 1;
            }
            self.right.clear();
            self.right.resize(pairs.len(), NONE);
            let mut at = into.len();
            for r in (0..pairs.len()).rev() {
                loop {
                    if at == 0 {
                        // No embedding this far left: only the chosen place is known to hold.
                        at = usize::MAX;
                        break;
                    }
                    at -= 1;
                    if into[at] == of(r) {
                        break;
                    }
                }
                if at == usize::MAX {
                    forced[..=r].iter_mut().for_each(|f| *f = false);
                    break;
                }
                self.right[r] = at as u32;
            }
            for r in 0..pairs.len() {
                forced[r] &= self.left[r] == mine(r) && self.right[r] == mine(r);
            }
        }
        for (r, &(i, j)) in pairs.iter().enumerate() {
            if forced[r] {
                self.copy[i as usize] = j;
            }
        }
    }

    /// Fills `before` and `after` from the certain copies.
    fn fill_positions(&mut self) {
        let (n, m) = (self.o.len(), self.p.len());
        self.before.clear();
        self.before.resize(m + 1, 0);
        self.after.clear();
        self.after.resize(m + 1, n as u32);
        self.origin.clear();
        self.origin.resize(m, NONE);
        for (i, &j) in self.copy.iter().enumerate() {
            if j != NONE {
                self.origin[j as usize] = i as u32;
            }
        }
        let of = &self.origin;
        let mut last = 0;
        for x in 0..=m {
            self.before[x] = last;
            if x < m && of[x] != NONE {
                last = of[x] + 1;
            }
        }
        let mut next = n as u32;
        for x in (0..=m).rev() {
            if x < m && of[x] != NONE {
                next = of[x];
            }
            self.after[x] = next;
        }
    }

    /// Whether original position `t` and patched position `x` correspond: no certain copy lies
    /// between them.
    fn corresponds(&self, t: u32, x: u32) -> bool {
        let x = x as usize;
        self.before[x] <= t && self.after[x] >= t
    }

    /// The patched positions that correspond to original position `t`, as byte offsets.
    fn expected(&self, t: u32) -> (u32, u32) {
        let lo = self.after.partition_point(|&a| a < t);
        let hi = self.before.partition_point(|&b| b <= t).saturating_sub(1);
        let at = |x: usize| self.p.offs.get(x).copied().unwrap_or(0);
        (at(lo), at(hi.max(lo)))
    }

    fn check_branches(&mut self, original: &[u8], patched: &[u8]) {
        let n = self.o.len() as u32;
        let m = self.p.len() as u32;
        for i in 0..self.o.len() {
            if !has_targets(self.o.keys[i].family) {
                continue;
            }
            let (Ok(oi), j) = (decode_at(original, self.o.offs[i] as usize), self.copy[i]) else {
                continue;
            };
            let count = oi.targets().count() as u32;
            if j == NONE {
                self.stats.skip(Unchecked::NoCertainCopy, count);
                continue;
            }
            let Ok(pi) = decode_at(patched, self.p.offs[j as usize] as usize) else {
                continue;
            };
            for (case, (to, tp)) in oi.targets().zip(pi.targets()).enumerate() {
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
                let leads = if self.origin[x as usize] != NONE {
                    None
                } else {
                    match self.walk(patched, x) {
                        Some(y) if self.corresponds(t, y) => continue,
                        Some(y) if self.copy[t as usize] != NONE => Some(y),
                        _ => {
                            self.stats.skip(Unchecked::LandingUncertain, 1);
                            continue;
                        }
                    }
                };
                let (lo, hi) = self.expected(t);
                let what = match &pi.operand {
                    Operand::Switch(_) => format!("case {case} of `switch`"),
                    _ => format!("`{}`", pi.opcode),
                };
                let landing = match leads {
                    None => format!(
                        "lands on IL_{tp:04x}, the copy of the original's IL_{:04x}",
                        self.o.offs[self.origin[x as usize] as usize]
                    ),
                    Some(y) => format!(
                        "lands on IL_{tp:04x}, code not in the original that leads to \
                         IL_{:04x}, the copy of the original's IL_{:04x}",
                        self.p.offs[y as usize], self.o.offs[self.origin[y as usize] as usize]
                    ),
                };
                let message = format!(
                    "{what} copied from IL_{:04x} of the original {landing}; its original \
                     target IL_{to:04x} corresponds to {} here",
                    oi.offset,
                    range(lo, hi)
                );
                self.diags.push(Diagnostic {
                    code: Code::BranchRetargeted,
                    offset: pi.offset,
                    message,
                });
            }
        }
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
            if self.origin[x as usize] != NONE {
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

    fn check_clauses(&mut self, original: &[Clause], patched: &[Clause]) {
        if original.is_empty() {
            return;
        }
        self.bounds.clear();
        for c in patched {
            if let Some(b) = Bounds::of(c, &self.p) {
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
            let Some(ob) = Bounds::of(c, &self.o) else {
                let boundaries = if c.kind() == ClauseKind::Filter { 5 } else { 4 };
                self.stats.skip(Unchecked::InvalidTarget, boundaries);
                continue;
            };
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
        let t = ob.at[k];
        let lo = self.after.partition_point(|&a| a < t) as u32;
        let hi = self.before.partition_point(|&b| b <= t) as u32;
        let start = order.partition_point(|&c| bounds[c as usize].at[k] < lo);
        let mut found = Vec::new();
        for &c in &order[start..] {
            let b = &bounds[c as usize];
            if b.at[k] >= hi {
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
            self.diags.push(Diagnostic {
                code: Code::ClauseBoundaryMoved,
                offset: pb.off[k],
                message,
            });
        }
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
    fn families_come_from_the_opcode_table() {
        let fam = |op: Opcode| FAMILIES[slot(op)];
        for info in ALL {
            let f = fam(info.opcode);
            match info.operand {
                OperandKind::ShortBrTarget => assert_eq!(f.general, info.opcode.long_form()),
                _ if f.general != info.opcode => {
                    assert_ne!(f.general.operand_kind(), OperandKind::None, "{}", info.name)
                }
                _ => assert_eq!(f.implied, None, "{}", info.name),
            }
        }
        let implied: Vec<(&str, Opcode, i32)> = ALL
            .iter()
            .filter_map(|i| {
                let f = fam(i.opcode);
                f.implied.map(|v| (i.name, f.general, v))
            })
            .collect();
        assert_eq!(implied.len(), 4 + 4 + 4 + 10, "{implied:?}");
        assert!(implied.contains(&("ldarg.3", Ldarg, 3)));
        assert!(implied.contains(&("stloc.0", Stloc, 0)));
        assert!(implied.contains(&("ldc.i4.m1", Ldc_I4, -1)));
        assert!(implied.contains(&("ldc.i4.8", Ldc_I4, 8)));
        let short: Vec<&str> = ALL
            .iter()
            .filter(|i| fam(i.opcode).general != i.opcode && fam(i.opcode).implied.is_none())
            .map(|i| i.name)
            .collect();
        assert_eq!(short.len(), 13 + 1 + 7, "{short:?}");
        for (a, b) in [
            (Ldelem_I4, Ldelem_I4),
            (Conv_Ovf_I1_Un, Conv_Ovf_I1_Un),
            (Cgt_Un, Cgt_Un),
        ] {
            assert_eq!(fam(a).general, b);
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
