//! The protected regions of a body, as the single pass needs them: a small tree in byte
//! offsets, and the offsets where a region begins or ends, in code order.
//!
//! Only tables the full passes accept get a tree here, and only the common ones: a table with
//! anything the region rules would report (or would have to think about: a handler nested
//! inside its own try, two handlers starting together) is `None`, and its body takes the full
//! passes. The rules below are each at least as strict as the full passes' (`eh`, `flow`,
//! `stack`), so that the single pass never accepts a body they reject.

use super::super::Resolver;
use super::super::eh::RegionKind;
use super::super::resolver::token_passes;
use crate::body::{Block, ClauseKind};
use crate::opcode::{Opcode, OperandKind};
use std::cmp::Reverse;

use super::super::clauses::Clauses;

/// Tables with more clauses take the full passes (so that a node index fits in a byte).
pub(super) const MAX_CLAUSES: usize = 64;

/// No region: outside every one, or no parent.
pub(super) const OUTSIDE: u8 = u8::MAX;

/// One try, handler or filter block; a try shared by several catch and filter clauses is one.
#[derive(Clone, Copy, Debug)]
struct Node {
    start: u32,
    end: u32,
    kind: RegionKind,
    /// The lowest clause owning the block.
    clause: u32,
    parent: u8,
    /// A try whose clause is a finally or fault: no other clause may share it.
    finally: bool,
    /// A filter whose last instruction was seen to be `endfilter`.
    ended: bool,
}

/// An offset where regions begin or end: it must be an instruction start that does not
/// follow a prefix.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bound {
    pub off: u32,
    /// A try starts here: its depth must be 0 (or 1 where a catch or filter starts too).
    pub try_start: bool,
    /// A handler or filter starts here, entered with this depth (1 with the exception object,
    /// 0 for a finally or fault); never by falling through or by a branch from outside it.
    pub entry: Option<u32>,
}

/// The region tree and the bounds of a body, rebuilt for each body in buffers kept between
/// bodies.
#[derive(Debug, Default)]
pub(super) struct Regions {
    /// In code order (by start, outer first).
    nodes: Vec<Node>,
    /// Every bound inside the code, ascending, one per offset.
    pub bounds: Vec<Bound>,
    /// The try node of each clause, for the own-try rule.
    try_of: Vec<u8>,
    open: Vec<u8>,
    sorted: Vec<(u32, Reverse<u32>, u32, u32)>,
}

/// The depth a handler-like block starts with; `None` for a try.
fn entry_depth(kind: RegionKind) -> Option<u32> {
    match kind {
        RegionKind::Try => None,
        RegionKind::Filter | RegionKind::Catch | RegionKind::FilterHandler => Some(1),
        RegionKind::Finally | RegionKind::Fault => Some(0),
    }
}

impl Regions {
    /// Builds the tree of `clauses` for code of `len` bytes; false when the table is one the
    /// single pass leaves to the full passes (anything they would report, and more).
    pub(super) fn build<R: Resolver + ?Sized>(
        &mut self,
        clauses: &Clauses<'_>,
        len: usize,
        r: &R,
    ) -> bool {
        self.nodes.clear();
        self.bounds.clear();
        self.sorted.clear();
        if clauses.len() > MAX_CLAUSES {
            return false;
        }
        let len64 = len as u64;
        for (ci, c) in clauses.iter().enumerate() {
            let ci = ci as u32;
            let handler = match c.kind() {
                ClauseKind::Catch => RegionKind::Catch,
                ClauseKind::Filter => RegionKind::FilterHandler,
                ClauseKind::Finally => RegionKind::Finally,
                ClauseKind::Fault => RegionKind::Fault,
                ClauseKind::Invalid => return false,
            };
            if c.try_length == 0
                || c.handler_length == 0
                || c.try_end() > len64
                || c.handler_end() > len64
            {
                return false;
            }
            if handler == RegionKind::FilterHandler && c.class_or_filter >= c.handler_offset {
                return false;
            }
            // The catch class obeys a type token's operand rule (as `eh`'s clause rules check).
            if handler == RegionKind::Catch
                && !token_passes(r, OperandKind::Type, c.class_or_filter)
            {
                return false;
            }
            let mut push = |kind: RegionKind, block: Block| {
                let Some((start, end)) = clauses.block(ci as usize, block) else {
                    return false;
                };
                self.sorted.push((start, Reverse(end), kind.number(), ci));
                true
            };
            if !push(RegionKind::Try, Block::Try)
                || !push(handler, Block::Handler)
                || (handler == RegionKind::FilterHandler
                    && !push(RegionKind::Filter, Block::Filter))
            {
                return false;
            }
        }
        // The full passes' order: by start, outer first, then by kind and clause.
        self.sorted.sort_unstable();
        self.try_of.clear();
        self.try_of.resize(clauses.len(), OUTSIDE);
        self.open.clear();
        for k in 0..self.sorted.len() {
            let (start, Reverse(end), kind, clause) = self.sorted[k];
            let kind = RegionKind::from_number(kind);
            let finally = matches!(
                clauses.get(clause as usize).map(|c| c.kind()),
                Some(ClauseKind::Finally | ClauseKind::Fault)
            );
            while let Some(&top) = self.open.last() {
                if self.nodes[top as usize].end <= start {
                    self.open.pop();
                } else {
                    break;
                }
            }
            let parent = self.open.last().copied().unwrap_or(OUTSIDE);
            if let Some(p) = self.nodes.get(parent as usize).copied() {
                if p.start == start && p.end == end {
                    // Only catch and filter clauses may share a try; the newcomer must come
                    // before whatever encloses it.
                    if kind != RegionKind::Try || p.kind != RegionKind::Try || p.finally || finally
                    {
                        return false;
                    }
                    if let Some(gp) = self.nodes.get(p.parent as usize)
                        && clause > gp.clause
                    {
                        return false;
                    }
                    self.try_of[clause as usize] = parent;
                    continue;
                }
                if end > p.end || p.kind == RegionKind::Filter || clause > p.clause {
                    return false;
                }
                // No block inside a block of its own clause, at any depth; no two handlers
                // starting together.
                let mut a = parent;
                while let Some(n) = self.nodes.get(a as usize) {
                    let own = if kind == RegionKind::Try {
                        n.kind != RegionKind::Try && n.clause == clause
                    } else {
                        self.try_of[clause as usize] == a
                    };
                    if own
                        || (kind != RegionKind::Try
                            && n.kind != RegionKind::Try
                            && n.start == start)
                    {
                        return false;
                    }
                    a = n.parent;
                }
            }
            let me = self.nodes.len() as u8;
            if kind == RegionKind::Try {
                self.try_of[clause as usize] = me;
            }
            self.nodes.push(Node {
                start,
                end,
                kind,
                clause,
                parent,
                finally,
                ended: false,
            });
            self.open.push(me);
        }
        // The bounds in code order: starts (each node's, ascending) merged with ends.
        for n in &self.nodes {
            for (off, try_start, entry) in [
                (n.start, n.kind == RegionKind::Try, entry_depth(n.kind)),
                (n.end, false, None),
            ] {
                if (off as usize) < len {
                    self.bounds.push(Bound {
                        off,
                        try_start,
                        entry,
                    });
                }
            }
        }
        self.bounds.sort_unstable_by_key(|b| b.off);
        let mut w = 0;
        for k in 0..self.bounds.len() {
            let b = self.bounds[k];
            if w > 0 && self.bounds[w - 1].off == b.off {
                let last = &mut self.bounds[w - 1];
                last.try_start |= b.try_start;
                // Two handlers never start together (rejected above).
                last.entry = last.entry.or(b.entry);
            } else {
                self.bounds[w] = b;
                w += 1;
            }
        }
        self.bounds.truncate(w);
        true
    }

    /// The innermost region holding byte `t` ([`OUTSIDE`] for none).
    pub(super) fn innermost(&self, t: u32) -> u8 {
        // The last node starting at or before `t`; the innermost one holding `t` is it or one
        // of its ancestors (the family is laminar).
        let k = self.nodes.partition_point(|n| n.start <= t);
        let mut r = k.wrapping_sub(1).min(OUTSIDE as usize) as u8;
        while let Some(n) = self.nodes.get(r as usize) {
            if t < n.end {
                return r;
            }
            r = n.parent;
        }
        OUTSIDE
    }

    /// `r` and the tries above it that start at `t`, passed: the region an entry at `t`
    /// arrives from, if it enters nothing but tries at their first instruction.
    fn above_tries_at(&self, mut r: u8, t: u32) -> u8 {
        while let Some(n) = self.nodes.get(r as usize) {
            if n.kind != RegionKind::Try || n.start != t {
                break;
            }
            r = n.parent;
        }
        r
    }

    /// Whether a branch or fall-through from region `from` to byte `t` (in region `to`) stays
    /// in its region, or enters only tries, at their first instruction.
    pub(super) fn may_branch(&self, from: u8, to: u8, t: u32) -> bool {
        to == from || self.above_tries_at(to, t) == from
    }

    /// Whether a `leave` from region `from` to byte `t` (in region `to`) exits only tries and
    /// catch handlers, and enters only tries at their first instruction.
    pub(super) fn may_leave(&self, from: u8, to: u8, t: u32) -> bool {
        if to == from {
            return true;
        }
        let stop = self.above_tries_at(to, t);
        let mut r = from;
        while r != stop {
            let Some(n) = self.nodes.get(r as usize) else {
                // `stop` is not around `from`: the leave enters it.
                return false;
            };
            if !matches!(
                n.kind,
                RegionKind::Try | RegionKind::Catch | RegionKind::FilterHandler
            ) {
                return false;
            }
            r = n.parent;
        }
        true
    }

    /// Whether `op` (`endfinally`, `rethrow` or `endfilter`) may stand in region `r`, ending
    /// at byte `next`, with `d` items on the stack.
    pub(super) fn may_place(&mut self, op: Opcode, r: u8, next: usize, d: u32) -> bool {
        let Some(&n) = self.nodes.get(r as usize) else {
            // Outside every region, none of them may stand.
            return false;
        };
        match op {
            Opcode::Endfilter => {
                let last = n.kind == RegionKind::Filter && n.end as usize == next && d == 1;
                if last {
                    self.nodes[r as usize].ended = true;
                }
                last
            }
            Opcode::Endfinally => matches!(
                self.handler_around(r),
                Some(RegionKind::Finally | RegionKind::Fault)
            ),
            Opcode::Rethrow => matches!(
                self.handler_around(r),
                Some(RegionKind::Catch | RegionKind::FilterHandler)
            ),
            // Only the handler instructions have placement rules here.
            _ => false,
        }
    }

    /// The kind of the innermost handler or filter around region `r`, looking through tries.
    fn handler_around(&self, mut r: u8) -> Option<RegionKind> {
        while let Some(n) = self.nodes.get(r as usize) {
            if n.kind != RegionKind::Try {
                return Some(n.kind);
            }
            r = n.parent;
        }
        None
    }

    /// Whether every filter ends in `endfilter` ([`Self::may_place`] saw it there).
    pub(super) fn filters_ended(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.kind != RegionKind::Filter || n.ended)
    }
}
