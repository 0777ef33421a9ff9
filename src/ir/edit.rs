//! Edits on an [`ir::Method`](Method), recorded by an [`Editor`] and applied in one pass.
//!
//! An insertion before an instruction X states both choices that are otherwise easy to make by
//! accident: whether branches that targeted X now reach the new code ([`Targets`]) and whether
//! the new code belongs to the regions X starts ([`Regions`]). Instructions carry their prefixes,
//! so no edit can separate a prefix from its instruction.
//!
//! Label roles are read from their uses: a label used by a branch, `leave` or `switch` is a
//! target; a clause's try, handler or filter start is a region start; a try or handler end is a
//! region end. A label used in roles that the edit would move to different places is refused
//! ([`EditError::AmbiguousLabel`]).

use super::method::*;

/// Where branches that targeted an instruction go when code is inserted before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Targets {
    /// They reach the new code, which then runs before X on every path.
    ToNew,
    /// They still reach X; the new code runs only when falling through into it.
    StayOnOld,
}

/// Whether inserted code joins the exception-handling regions at its insertion point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Regions {
    /// Before X: the new code is part of every region that starts at X (as well as those X is
    /// already inside). After Y: it is part of every region that ends with Y.
    Inside,
    /// Before X: regions that start at X still start at X. After Y: regions that end with Y
    /// still end there.
    Outside,
}

/// Why an edit was refused. The method is unchanged when [`Editor::commit`] fails.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// An edit names an instruction the method does not have.
    #[error("instruction index {index} is out of range (the method has {len})")]
    IndexOutOfRange {
        /// The index given.
        index: usize,
        /// How many instructions the method has.
        len: usize,
    },
    /// Two edits at one instruction cannot both apply (e.g. two replacements).
    #[error("instruction {index}: conflicting edits ({reason})")]
    ConflictingEdits {
        /// The instruction.
        index: usize,
        /// Which edits conflict.
        reason: &'static str,
    },
    /// A label serves as more than one kind of place (branch target, region bound) and the
    /// edit would have to move those uses to different places.
    #[error("label {label} is used as {roles} and this edit would move those uses apart")]
    AmbiguousLabel {
        /// The label.
        label: u32,
        /// The roles it has.
        roles: &'static str,
    },
    /// A label the method does not have.
    #[error("label {0} is not a label of this method")]
    UnknownLabel(u32),
    /// A block id this editor did not hand out.
    #[error("block {0} was not inserted by this editor")]
    UnknownBlock(u32),
    /// A label already bound would be bound again.
    #[error("label {0} would be bound twice")]
    BoundTwice(u32),
    /// The new clause cannot go anywhere in the table with inner clauses before outer ones.
    #[error(
        "new clause cannot be placed: it nests inside clause {outer} but must follow clause {inner}"
    )]
    ClauseOrder {
        /// The clause it must follow.
        inner: usize,
        /// The clause it nests inside, which it must precede.
        outer: usize,
    },
}

/// Identifies a block of code an edit inserted, to bind labels at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockId(u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Inserted after the instruction before the gap.
    After(Regions),
    Before(Targets, Regions),
    /// The instruction at the gap replaced by the block (empty block: removed).
    Replace,
    /// At the end of the code, after everything else.
    Append,
}

impl Kind {
    /// Order of chunks within one gap.
    fn rank(self) -> u8 {
        match self {
            Kind::After(_) => 0,
            Kind::Append => 1,
            Kind::Before(..) => 2,
            Kind::Replace => 3,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Op {
    /// The gap: before old instruction `gap` (`gap == n` is the end).
    gap: u32,
    kind: Kind,
    /// The op's [`BlockId`]: its index in the order the edits were recorded.
    id: u32,
    code: (u32, u32),
    /// New index of the block's first instruction, once placed.
    placed: u32,
}

/// New positions around one gap that has edits.
#[derive(Clone, Copy, Debug)]
struct Gap {
    gap: u32,
    /// Before the chunks inserted after the previous instruction.
    gap_start: u32,
    /// Before the chunks inserted before the instruction at the gap.
    after_end: u32,
    /// At the instruction (or its replacement).
    before_end: u32,
    after: Option<Regions>,
    before: Option<(Targets, Regions)>,
    /// How far old instructions after this gap moved.
    next_shift: i64,
}

/// What a commit did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EditSummary {
    /// Instructions inserted (replacements included).
    pub inserted: usize,
    /// Instructions removed (replaced ones included).
    pub removed: usize,
}

/// Records edits against the instruction indices the method has now; [`Editor::commit`] applies
/// them all at once.
#[derive(Debug)]
pub struct Editor<'m> {
    m: &'m mut Method,
    /// The recorded edits and the buffers to apply them, boxed so that taking them from the
    /// pool and handing them back moves one pointer.
    s: Box<Scratch>,
}

/// Buffers an edit needs, kept per thread between editors: a rewriter edits every method of
/// an assembly, and allocating these for each one costs more than the edit.
#[derive(Debug, Default)]
struct Scratch {
    ops: Vec<Op>,
    code: Vec<Instr>,
    binds: Vec<(Label, BlockId)>,
    new_clauses: Vec<EhClause>,
    roles: Vec<u8>,
    gaps: Vec<Gap>,
    /// Becomes the method's instruction list; receives the old one.
    instrs: Vec<Instr>,
    /// Becomes the method's label table; receives the old one.
    labels: Vec<u32>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Box<Scratch>>> = const { std::cell::Cell::new(None) };
}

impl Editor<'_> {
    /// Hands the buffers back for the next editor on this thread (an editor that is dropped
    /// instead, or fails, just frees them).
    fn recycle(mut self) {
        let s = &mut *self.s;
        // A giant body's old instructions and labels are let go, not kept through its layout
        // and verification.
        if s.instrs.capacity() > KEEP_LARGEST {
            s.instrs = Vec::new();
        }
        if s.labels.capacity() > KEEP_LARGEST {
            s.labels = Vec::new();
        }
        s.ops.clear();
        s.code.clear();
        s.binds.clear();
        s.new_clauses.clear();
        // Ignored during thread teardown: the buffers are just freed.
        let _ = SCRATCH.try_with(|c| c.set(Some(self.s)));
    }
}

/// Scratch buffers of at most this many entries (16 MiB of instructions) are kept for the next
/// editor on the thread: bodies up to that size are edited again and again without fresh pages,
/// and a larger one's old copy is not held through its layout and verification.
const KEEP_LARGEST: usize = 1 << 19;

const TARGET: u8 = 1;
const START: u8 = 2;
const END: u8 = 4;

fn role_names(roles: u8) -> &'static str {
    match roles {
        r if r == TARGET | START => "branch target and region start",
        r if r == TARGET | END => "branch target and region end",
        r if r == START | END => "region start and region end",
        _ => "branch target, region start and region end",
    }
}

impl Method {
    /// Starts a batch of edits.
    pub fn edit(&mut self) -> Editor<'_> {
        // A nested editor on the same thread finds the pool empty and allocates its own.
        let s = SCRATCH
            .try_with(|c| c.take())
            .ok()
            .flatten()
            .unwrap_or_default();
        Editor { m: self, s }
    }

    /// Adds a clause where table order keeps inner clauses before the clauses that enclose
    /// them; returns its index.
    pub fn add_clause(&mut self, clause: EhClause) -> Result<usize, EditError> {
        for l in clause.labels() {
            if self.position(l).is_none() {
                return Err(EditError::UnknownLabel(l.0));
            }
        }
        let span =
            |a: Label, b: Label| (self.position(a).unwrap_or(0), self.position(b).unwrap_or(0));
        let within =
            |inner: (usize, usize), outer: (usize, usize)| outer.0 <= inner.0 && inner.1 <= outer.1;
        let regions = |c: &EhClause| {
            let mut r = vec![
                span(c.try_start, c.try_end),
                span(c.handler_start, c.handler_end),
            ];
            if let Some(f) = c.filter_start {
                r.push(span(f, c.handler_start));
            }
            r
        };
        let new_try = span(clause.try_start, clause.try_end);
        let new_regions = regions(&clause);
        let mut after = 0; // the new clause goes after every clause nested in it
        let mut first_outer = None;
        for (i, c) in self.clauses.iter().enumerate() {
            let c_try = span(c.try_start, c.try_end);
            if new_regions.iter().any(|&r| within(c_try, r)) {
                after = i + 1;
            } else if regions(c).iter().any(|&r| within(new_try, r)) && first_outer.is_none() {
                first_outer = Some(i);
            }
        }
        if let Some(outer) = first_outer
            && outer < after
        {
            return Err(EditError::ClauseOrder {
                inner: after - 1,
                outer,
            });
        }
        self.clauses.insert(after, clause);
        Ok(after)
    }
}

impl Editor<'_> {
    /// The method as it is before the edits are applied.
    pub fn method(&self) -> &Method {
        self.m
    }

    /// A fresh label, to be bound with [`Editor::bind`] or used by a later edit.
    pub fn new_label(&mut self) -> Label {
        self.m.new_label()
    }

    /// Stores a `switch` table for new code.
    pub fn add_switch(&mut self, targets: &[Label]) -> SwitchTable {
        self.m.add_switch(targets)
    }

    /// Stores a prefix run for new code.
    pub fn add_prefixes(&mut self, prefixes: &[Prefix]) -> Prefixes {
        self.m.add_prefixes(prefixes)
    }

    fn check_index(&self, index: usize) -> Result<u32, EditError> {
        if index < self.m.instrs.len() {
            Ok(index as u32)
        } else {
            Err(EditError::IndexOutOfRange {
                index,
                len: self.m.instrs.len(),
            })
        }
    }

    fn record(&mut self, gap: u32, kind: Kind, code: &[Instr]) -> BlockId {
        let s = &mut *self.s;
        let start = s.code.len() as u32;
        s.code.extend_from_slice(code);
        let id = s.ops.len() as u32;
        s.ops.push(Op {
            gap,
            kind,
            id,
            code: (start, s.code.len() as u32),
            placed: 0,
        });
        BlockId(s.ops.len() as u32 - 1)
    }

    /// Inserts `code` before instruction `at` (before its prefixes).
    pub fn insert_before(
        &mut self,
        at: usize,
        code: &[Instr],
        targets: Targets,
        regions: Regions,
    ) -> Result<BlockId, EditError> {
        let gap = self.check_index(at)?;
        Ok(self.record(gap, Kind::Before(targets, regions), code))
    }

    /// Inserts `code` after instruction `at`. Branches to the instruction that follows still
    /// reach it (use [`Editor::insert_before`] on that instruction to choose otherwise).
    pub fn insert_after(
        &mut self,
        at: usize,
        code: &[Instr],
        regions: Regions,
    ) -> Result<BlockId, EditError> {
        let gap = self.check_index(at)? + 1;
        Ok(self.record(gap, Kind::After(regions), code))
    }

    /// Replaces instruction `at` (with its prefixes) by `code`; every label bound before it is
    /// bound before the replacement.
    pub fn replace(&mut self, at: usize, code: &[Instr]) -> Result<BlockId, EditError> {
        let gap = self.check_index(at)?;
        Ok(self.record(gap, Kind::Replace, code))
    }

    /// Removes instruction `at` with its prefixes; labels bound before it move to what follows.
    pub fn remove(&mut self, at: usize) -> Result<(), EditError> {
        self.replace(at, &[]).map(|_| ())
    }

    /// Appends `code` at the end, after every other edit's code; regions that end with the last
    /// instruction do not grow.
    pub fn append(&mut self, code: &[Instr]) -> BlockId {
        let gap = self.m.instrs.len() as u32;
        self.record(gap, Kind::Append, code)
    }

    /// Binds `label` before the first instruction of `block` (or where the block would be, when
    /// it is empty).
    pub fn bind(&mut self, block: BlockId, label: Label) -> Result<(), EditError> {
        if label.index() >= self.m.labels.len() {
            return Err(EditError::UnknownLabel(label.0));
        }
        if block.0 as usize >= self.s.ops.len() {
            return Err(EditError::UnknownBlock(block.0));
        }
        self.s.binds.push((label, block));
        Ok(())
    }

    /// Adds a clause once the edits are applied (see [`Method::add_clause`]).
    pub fn add_clause(&mut self, clause: EhClause) {
        self.s.new_clauses.push(clause);
    }

    /// Applies every recorded edit, or none.
    pub fn commit(mut self) -> Result<EditSummary, EditError> {
        let summary = self.apply()?;
        self.recycle();
        Ok(summary)
    }

    fn apply(&mut self) -> Result<EditSummary, EditError> {
        let m = &mut *self.m;
        let s = &mut *self.s;
        let n = m.instrs.len();
        // Stable: edits at one gap keep the order they were recorded in. Transforms mostly
        // record them in order already.
        // Sorted in place; binds find their op by id.
        let key = |op: &Op| (op.gap, op.kind.rank());
        if !s.ops.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
            s.ops.sort_by_key(key);
        }
        // Per gap: the policies in force, checked for conflicts.
        for w in s.ops.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if a.gap != b.gap || a.kind.rank() != b.kind.rank() {
                continue;
            }
            let reason = match (a.kind, b.kind) {
                (Kind::Replace, Kind::Replace) => "replaced or removed twice",
                (Kind::Before(..), Kind::Before(..)) if a.kind != b.kind => {
                    "insertions before it disagree on targets or regions"
                }
                (Kind::After(_), Kind::After(_)) if a.kind != b.kind => {
                    "insertions after it disagree on regions"
                }
                _ => continue,
            };
            let index = a.gap as usize;
            return Err(EditError::ConflictingEdits { index, reason });
        }
        for (k, &(label, _)) in s.binds.iter().enumerate() {
            let again = s.binds[k + 1..].iter().any(|(l, _)| *l == label);
            if again || m.labels[label.index()] != UNBOUND {
                return Err(EditError::BoundTwice(label.0));
            }
        }

        // Region roles, from the clauses (few). Whether a label is a branch target costs a
        // scan of all the code, so it is only found when it decides where a label goes.
        let roles = &mut s.roles;
        roles.clear();
        let mark = |roles: &mut Vec<u8>, l: Label, r: u8| {
            if let Some(slot) = roles.get_mut(l.index()) {
                *slot |= r;
            }
        };
        if !m.clauses.is_empty() || !s.new_clauses.is_empty() {
            roles.resize(m.labels.len(), 0);
            for c in m.clauses.iter().chain(&s.new_clauses) {
                mark(roles, c.try_start, START);
                mark(roles, c.handler_start, START);
                if let Some(f) = c.filter_start {
                    mark(roles, f, START);
                }
                mark(roles, c.try_end, END);
                mark(roles, c.handler_end, END);
            }
        }

        // Only gaps with edits are recorded; labels elsewhere shift with the code around them.
        let inserted = s.code.len();
        let gaps = &mut s.gaps;
        gaps.clear();
        let out = &mut s.instrs;
        out.clear();
        out.reserve(n + inserted);
        let mut copied = 0usize; // old instructions before this index are in `out` (or dropped)
        let mut k = 0usize;
        let mut removed = 0usize;
        while k < s.ops.len() {
            let g = s.ops[k].gap as usize;
            out.extend_from_slice(&m.instrs[copied..g]);
            copied = g;
            let gap_start = out.len() as u32;
            // Where the chunks of each rank end (After, Append, Before, Replace): set when the
            // first chunk of a later rank arrives, or at the end of the gap.
            let mut after_end = None;
            let mut before_end = None;
            let mut after = None;
            let mut before = None;
            let mut replaced = false;
            while let Some(op) = s.ops.get_mut(k) {
                if op.gap as usize != g {
                    break;
                }
                let rank = op.kind.rank();
                if rank >= 1 && after_end.is_none() {
                    after_end = Some(out.len() as u32);
                }
                if rank >= 3 && before_end.is_none() {
                    before_end = Some(out.len() as u32);
                }
                match op.kind {
                    Kind::After(r) => after = Some(r),
                    Kind::Before(t, r) => before = Some((t, r)),
                    Kind::Replace => replaced = true,
                    Kind::Append => {}
                }
                op.placed = out.len() as u32;
                // Most blocks are one instruction: a push is cheaper than a copy call.
                match &s.code[op.code.0 as usize..op.code.1 as usize] {
                    [one] => out.push(*one),
                    block => out.extend_from_slice(block),
                }
                k += 1;
            }
            let end = out.len() as u32;
            if g < n {
                if replaced {
                    removed += 1;
                } else {
                    out.push(m.instrs[g]);
                }
                copied = g + 1;
            }
            gaps.push(Gap {
                gap: g as u32,
                gap_start,
                after_end: after_end.unwrap_or(end),
                before_end: before_end.unwrap_or(end),
                after,
                before,
                next_shift: out.len() as i64 - copied as i64,
            });
        }
        out.extend_from_slice(&m.instrs[copied..]);

        // Move every bound label.
        let new_labels = &mut s.labels;
        new_labels.clear();
        new_labels.extend_from_slice(&m.labels);
        let (first_gap, last_gap, last_shift) = match (gaps.first(), gaps.last()) {
            (Some(f), Some(l)) => (f.gap, l.gap, l.next_shift),
            _ => (u32::MAX, 0, 0),
        };
        let mut targets_known = false;
        for (l, slot) in new_labels.iter_mut().enumerate() {
            let p = *slot;
            if p == UNBOUND || p as usize > n || p < first_gap {
                continue;
            }
            if p > last_gap {
                *slot = (p as i64 + last_shift) as u32;
                continue;
            }
            let g = match gaps.binary_search_by_key(&p, |g| g.gap) {
                Ok(i) => &gaps[i],
                Err(i) => {
                    // `p` is past the first gap, so `i > 0`.
                    *slot = (p as i64 + gaps[i - 1].next_shift) as u32;
                    continue;
                }
            };
            let to_target = match g.before {
                Some((Targets::ToNew, _)) => g.after_end,
                _ => g.before_end,
            };
            let to_start = match g.before {
                Some((_, Regions::Inside)) => g.after_end,
                _ => g.before_end,
            };
            let to_end = match g.after {
                Some(Regions::Inside) => g.after_end,
                _ => g.gap_start,
            };
            let r = roles.get(l).copied().unwrap_or(0);
            if !targets_known {
                // Settled without knowing whether the label is a branch target when its region
                // roles, if any, all go where a target would.
                let start_ok = r & START == 0 || to_start == to_target;
                let end_ok = r & END == 0 || to_end == to_target;
                if start_ok && end_ok {
                    *slot = to_target;
                    continue;
                }
                if roles.is_empty() {
                    roles.resize(m.labels.len(), 0);
                }
                for ins in m.instrs.iter().chain(&s.code) {
                    if let Operand::Target(t) = ins.operand {
                        mark(roles, t, TARGET);
                    }
                }
                for &t in &m.switch_targets {
                    mark(roles, t, TARGET);
                }
                targets_known = true;
            }
            let r = roles.get(l).copied().unwrap_or(0);
            let mut dest = None::<u32>;
            for (role, to) in [(TARGET, to_target), (START, to_start), (END, to_end)] {
                if r & role != 0 {
                    match dest {
                        Some(d) if d != to => {
                            return Err(EditError::AmbiguousLabel {
                                label: l as u32,
                                roles: role_names(r),
                            });
                        }
                        _ => dest = Some(to),
                    }
                }
            }
            // A label nothing uses moves like a branch target.
            *slot = dest.unwrap_or(to_target);
        }
        for &(label, block) in &s.binds {
            // Where the op was recorded, unless sorting moved it; `bind` checked it exists.
            let op = match s.ops.get(block.0 as usize) {
                Some(op) if op.id == block.0 => Some(op),
                _ => s.ops.iter().find(|op| op.id == block.0),
            };
            if let Some(op) = op {
                new_labels[label.index()] = op.placed;
            }
        }

        std::mem::swap(&mut m.instrs, out);
        std::mem::swap(&mut m.labels, new_labels);
        if !s.new_clauses.is_empty() {
            let old_clauses = m.clauses.clone();
            for k in 0..s.new_clauses.len() {
                if let Err(e) = m.add_clause(s.new_clauses[k]) {
                    // All or nothing: put the method back as it was.
                    std::mem::swap(&mut m.instrs, &mut s.instrs);
                    std::mem::swap(&mut m.labels, &mut s.labels);
                    m.clauses = old_clauses;
                    return Err(e);
                }
            }
        }
        Ok(EditSummary { inserted, removed })
    }
}
